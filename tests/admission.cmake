# Admission (router/fleet/admission.c): the token bucket's arithmetic (unit), and the in-flight limits, the queue
# and the rate limit end to end (test_admission.py, real pdrouter and pdsim processes).
add_executable(test_admission unit/test_admission.c)
target_link_libraries(test_admission PRIVATE pdr_router)
add_test(NAME router_unit_admission COMMAND test_admission)
set_tests_properties(router_unit_admission PROPERTIES TIMEOUT 60 LABELS unit)

# The queue's scheduler (router/fleet/fairq.c): priority classes, tenants in round robin, the tenant cap.
add_executable(test_fairq unit/test_fairq.c)
target_link_libraries(test_fairq PRIVATE pdr_router)
add_test(NAME router_unit_fairq COMMAND test_fairq)
set_tests_properties(router_unit_fairq PROPERTIES TIMEOUT 60 LABELS unit)

pdr_scenario_tests(router_admission_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_admission.py LABEL integration TIMEOUT 120)

# Priority classes, tenant fairness, shedding and deadlines of the queue (admission.*), end to end.
pdr_scenario_tests(router_admission_fairq_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_fairq.py LABEL integration TIMEOUT 120)

# bench/priority_flood.py in its smallest form (2 s per row, a flood of 16, about 10 s): its pdbench runs
# and the access log agree, every request answered 200, and each client completed requests in the window.
add_test(NAME router_admission_bench_priority_flood
         COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/bench/priority_flood.py --seconds 2 --flood 16)
set_tests_properties(router_admission_bench_priority_flood PROPERTIES TIMEOUT 120 LABELS integration
                     ENVIRONMENT "PDR_BUILD=${CMAKE_BINARY_DIR}")
