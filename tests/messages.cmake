# What the router says when something is wrong, and readiness (see test_messages.py): a DNS failure named
# as such, /readiness only after a passed health check.
foreach(s dns_failure readiness_first_check readiness_never_passes)
  add_test(NAME router_messages_${s} COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_messages.py ${s})
  set_tests_properties(router_messages_${s} PROPERTIES TIMEOUT 120 ENVIRONMENT "PDR_BUILD=${CMAKE_BINARY_DIR}")
endforeach()
