# Compatible pairs (see test_compat_pairs.py): the workers' identities read from their engines, and a
# prefill paired only with a decode of its compat group. Real pdrouter and pdsim processes on loopback.
pdr_scenario_tests(router_compat_pairs_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_compat_pairs.py LABEL integration TIMEOUT 120)
