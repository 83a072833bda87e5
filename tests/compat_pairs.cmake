# Compatible pairs (see test_compat_pairs.py): the workers' identities read from their engines, and a
# prefill paired only with a decode of its compat group. Real pdrouter and pdsim processes on loopback.
pdr_scenario_tests(router_compat_pairs_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_compat_pairs.py LABEL integration TIMEOUT 120)

# bench/rolling_upgrade.py in its smallest form (2 prefills, 2 decodes, 4 clients, about 10 s): a rolling
# upgrade under load, with compat on (no pair of two revisions may form) and off (the check must see them).
add_test(NAME router_compat_pairs_bench_rolling_upgrade
         COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/bench/rolling_upgrade.py --prefills 2 --decodes 2
                 --concurrency 4 --settle 1 --gap 0.3)
set_tests_properties(router_compat_pairs_bench_rolling_upgrade PROPERTIES TIMEOUT 120 LABELS integration
                     ENVIRONMENT "PDR_BUILD=${CMAKE_BINARY_DIR}")
