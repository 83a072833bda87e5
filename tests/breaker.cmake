# The pair-aware breaker (see test_breaker.py) and the retry budget and back-off (see test_retry.py):
# real pdrouter and pdsim processes on loopback.
foreach(s one_link all_open disabled)
  add_test(NAME router_breaker_${s} COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_breaker.py ${s})
  set_tests_properties(router_breaker_${s} PROPERTIES TIMEOUT 120 ENVIRONMENT "PDR_BUILD=${CMAKE_BINARY_DIR}")
endforeach()
foreach(s budget backoff backoff_deadline disconnect after_first_byte)
  add_test(NAME router_retry_${s} COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_retry.py ${s})
  set_tests_properties(router_retry_${s} PROPERTIES TIMEOUT 120 ENVIRONMENT "PDR_BUILD=${CMAKE_BINARY_DIR}")
endforeach()
