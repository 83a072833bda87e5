# The PD request path's pure decisions (router/pd/decide.c): blame, retry, answer status, next deadline.
add_executable(test_pd_decide unit/test_pd_decide.c)
target_link_libraries(test_pd_decide PRIVATE pdr_router)
add_test(NAME router_unit_pd_decide COMMAND test_pd_decide)
set_tests_properties(router_unit_pd_decide PROPERTIES TIMEOUT 60 LABELS unit)
# The PD request's transition table (router/pd/state.c) against docs/internals/request.md.
add_executable(test_pd_state unit/test_pd_state.c)
target_link_libraries(test_pd_state PRIVATE pdr_router)
add_test(NAME router_unit_pd_state COMMAND test_pd_state)
set_tests_properties(router_unit_pd_state PROPERTIES TIMEOUT 60 LABELS unit)
