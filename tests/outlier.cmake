# Passive health (router/workers/outlier.c): the unit test of the ejection, cap, panic and slow start rules, and
# the integration scenarios against pdsim's fault knobs (see test_outlier.py).
add_executable(test_outlier unit/test_outlier.c)
target_link_libraries(test_outlier PRIVATE pdr_router)
add_test(NAME router_unit_outlier COMMAND test_outlier)
set_tests_properties(router_unit_outlier PROPERTIES TIMEOUT 60 LABELS unit)

pdr_scenario_tests(router_outlier_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_outlier.py LABEL integration TIMEOUT 120)
