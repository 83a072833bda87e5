# routing/ unit tests: the prefix tree, the cache_aware / power_of_two decisions (test_routing.c includes
# routing/*.c to reach the tree's nodes and to count and fail its allocations) and the list of policies.
add_executable(test_routing unit/test_routing.c)
target_include_directories(test_routing PRIVATE ${PROJECT_SOURCE_DIR}/routing)
target_link_libraries(test_routing PRIVATE pdr_common Threads::Threads)
add_test(NAME routing_unit COMMAND test_routing)
set_tests_properties(routing_unit PROPERTIES TIMEOUT 120 LABELS unit)

# The list of policies walked: each table alone (usable candidates, seeds) and through the pool.
add_executable(test_policies unit/test_policies.c)
target_link_libraries(test_policies PRIVATE pdr_router)
add_test(NAME routing_unit_policies COMMAND test_policies)
set_tests_properties(routing_unit_policies PROPERTIES TIMEOUT 60 LABELS unit)

# The benchmark runs (small) in every build, so that it keeps building and answering.
add_test(NAME routing_bench_smoke COMMAND routing_bench --entries 2000 --workers 4 --cap 65536 --threads 2
                                          --kv-blocks 20000 --kv-cap 1048576)
set_tests_properties(routing_bench_smoke PROPERTIES TIMEOUT 60 LABELS bench)

# The KV event decoder and the precise prefix index (test_kvindex.c includes routing/*.c to count and fail
# their allocations and to check the index's lists).
add_executable(test_kvindex unit/test_kvindex.c)
target_include_directories(test_kvindex PRIVATE ${PROJECT_SOURCE_DIR}/routing)
target_link_libraries(test_kvindex PRIVATE pdr_common PkgConfig::MSGPACK Threads::Threads)
add_test(NAME routing_unit_kvindex COMMAND test_kvindex)
set_tests_properties(routing_unit_kvindex PROPERTIES TIMEOUT 120 LABELS unit)

# Snapshots of the precise prefix index: round trip, every corruption, seeded random bytes.
add_executable(test_kvsnap unit/test_kvsnap.c)
target_link_libraries(test_kvsnap PRIVATE pdr_routing)
add_test(NAME routing_unit_kvsnap COMMAND test_kvsnap)
set_tests_properties(routing_unit_kvsnap PROPERTIES TIMEOUT 180 LABELS unit)

# Fuzz target of the KV event decoder and the index it feeds; see tests/fuzz/fuzz_kvevents.c.
add_executable(fuzz_kvevents fuzz/fuzz_kvevents.c)
target_link_libraries(fuzz_kvevents PRIVATE pdr_routing)
pdr_fuzz_corpus_test(kvevents_fuzz_corpus fuzz_kvevents kvevents 60)

# Fuzz target of the index's snapshot decoder and the import it feeds; see tests/fuzz/fuzz_kvsnap.c.
add_executable(fuzz_kvsnap fuzz/fuzz_kvsnap.c)
target_link_libraries(fuzz_kvsnap PRIVATE pdr_routing)
pdr_fuzz_corpus_test(kvsnap_fuzz_corpus fuzz_kvsnap kvsnap 60)
