# scripts/demo.sh (make run) in its non-interactive mode (DEMO_ONCE=1), see integration/test_demo.py:
# port 8000 taken, an explicit PORT taken, a worker that does not come up.
foreach(s taken_8000 taken_port dead_worker)
  add_test(NAME demo_${s} COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_demo.py ${s})
  set_tests_properties(demo_${s} PROPERTIES TIMEOUT 120 ENVIRONMENT "PDR_BUILD=${CMAKE_BINARY_DIR}")
endforeach()
# taken_8000 binds port 8000 itself: not at the same time as another test that might.
set_tests_properties(demo_taken_8000 PROPERTIES RESOURCE_LOCK port_8000)
