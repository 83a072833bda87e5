# Client-side limits (see test_limits.py): 413 in the OpenAI shape on every path, 408 for slow heads and
# bodies, idle keep-alive connections and the idle cap, the client connection cap, HTTP/2 stream
# concurrency, and HTTP/2 control-frame floods (SETTINGS, PING, CONTINUATION).
foreach(s body_too_large early_answers client_timeouts keepalive_idle max_client_connections h2_streams h2_control_floods)
  add_test(NAME router_limits_${s} COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_limits.py ${s})
  set_tests_properties(router_limits_${s} PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77 ENVIRONMENT "PDR_BUILD=${CMAKE_BINARY_DIR}")
endforeach()

# HTTP/2 body budgets drive flow control with python3-h2, which Debian's /usr/bin/python3 sees (a pyenv
# python3 would not): run with it, skipped (77) where the module is missing.
add_test(NAME router_limits_h2_body_budget
         COMMAND sh -c "/usr/bin/python3 -c 'import h2' 2>/dev/null || { echo 'skipped: /usr/bin/python3 has no h2 module (python3-h2)'; exit 77; }; exec /usr/bin/python3 \"$0\" h2_body_budget"
                 ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_limits.py)
set_tests_properties(router_limits_h2_body_budget PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77 ENVIRONMENT "PDR_BUILD=${CMAKE_BINARY_DIR}")
