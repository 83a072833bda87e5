# Tests of the Kubernetes discovery source (router/discovery/discovery_k8s.c).
# Unit: the pure parts (pod parsing, watch line splitting, event application).
add_executable(test_k8s_discovery_pure unit/test_k8s_discovery_pure.c)
target_link_libraries(test_k8s_discovery_pure PRIVATE pdr_router)
add_test(NAME discovery_k8s_unit COMMAND test_k8s_discovery_pure)
set_tests_properties(discovery_k8s_unit PROPERTIES TIMEOUT 60 LABELS unit)

# Integration: the source against k8s_replay.py, a scripted Kubernetes API server on loopback.
add_executable(test_k8s_discovery integration/test_k8s_discovery.c)
target_link_libraries(test_k8s_discovery PRIVATE pdr_router)
add_test(NAME discovery_k8s_replay
         COMMAND test_k8s_discovery ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/k8s_replay.py)
set_tests_properties(discovery_k8s_replay PROPERTIES TIMEOUT 60 LABELS integration)

# Fuzz target of the watch stream and pod parsers; see tests/fuzz/fuzz_k8s.c.
add_executable(fuzz_k8s fuzz/fuzz_k8s.c)
target_link_libraries(fuzz_k8s PRIVATE pdr_router)
pdr_fuzz_corpus_test(discovery_k8s_fuzz_corpus fuzz_k8s k8s 60)
