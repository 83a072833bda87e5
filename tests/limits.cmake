# Client-side limits (see test_limits.py): 413 in the OpenAI shape on every path, 408 for slow heads and
# bodies, idle keep-alive connections and the idle cap, the client connection cap, HTTP/2 stream
# concurrency, and HTTP/2 control-frame floods (SETTINGS, PING, CONTINUATION).
foreach(s body_too_large early_answers client_timeouts keepalive_idle max_client_connections h2_streams h2_control_floods)
  add_test(NAME router_limits_${s} COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_limits.py ${s})
  set_tests_properties(router_limits_${s} PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77 ENVIRONMENT "PDR_BUILD=${CMAKE_BINARY_DIR}")
endforeach()
