# scripts/demo.sh (make run) in its non-interactive mode (DEMO_ONCE=1), see integration/test_demo.py:
# port 8000 taken, an explicit PORT taken, a worker that does not come up.
pdr_scenario_tests(demo_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_demo.py LABEL integration TIMEOUT 120)
# taken_8000 binds port 8000 itself: not at the same time as another test that might.
set_tests_properties(demo_taken_8000 PROPERTIES RESOURCE_LOCK port_8000)
