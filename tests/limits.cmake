# Client-side limits (see test_limits.py): 413 in the OpenAI shape on every path, 408 for slow heads and
# bodies, idle keep-alive connections and the idle cap, the client connection cap, HTTP/2 stream
# concurrency, HTTP/2 control-frame floods (SETTINGS, PING, CONTINUATION), and batched requests past
# limits.max_batch_items. h2_body_budget drives HTTP/2 flow control with python3-h2 (H2 below).
pdr_scenario_tests(router_limits_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_limits.py LABEL integration TIMEOUT 120 SKIP77
                   H2 h2_body_budget)
