# routing/ unit tests: the prefix tree and the cache_aware / power_of_two decisions (test_routing.c includes
# routing/*.c to reach the tree's nodes and to count and fail its allocations).
add_executable(test_routing unit/test_routing.c)
target_include_directories(test_routing PRIVATE ${PROJECT_SOURCE_DIR}/routing)
target_link_libraries(test_routing PRIVATE pdr_common Threads::Threads)
add_test(NAME routing_unit COMMAND test_routing)
set_tests_properties(routing_unit PROPERTIES TIMEOUT 120)

# The benchmark runs (small) in every build, so that it keeps building and answering.
add_test(NAME routing_bench_smoke COMMAND routing_bench --entries 2000 --workers 4 --cap 65536 --threads 2)
set_tests_properties(routing_bench_smoke PROPERTIES TIMEOUT 60)
