# The pair-aware breaker (see test_breaker.py) and the retry budget and back-off (see test_retry.py):
# real pdrouter and pdsim processes on loopback.
pdr_scenario_tests(router_breaker_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_breaker.py LABEL integration TIMEOUT 120)
pdr_scenario_tests(router_retry_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_retry.py LABEL integration TIMEOUT 120)
