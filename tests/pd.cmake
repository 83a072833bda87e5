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

# Stream migration's arithmetic (router/util/resume.c): the client's share read back from relayed events, the
# body that goes on, the rewrite of the new stream's events, the requests that cannot be moved.
add_executable(test_resume unit/test_resume.c)
target_link_libraries(test_resume PRIVATE pdr_router)
add_test(NAME router_unit_resume COMMAND test_resume)
set_tests_properties(router_unit_resume PROPERTIES TIMEOUT 60 LABELS unit)
