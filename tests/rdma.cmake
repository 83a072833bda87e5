# The RDMA backend's tests (transport/rdma*.c are part of pdr_transport).
add_executable(test_rdma_pure ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_rdma_pure.c)
target_include_directories(test_rdma_pure PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/unit ${PROJECT_SOURCE_DIR}/transport)
target_link_libraries(test_rdma_pure PRIVATE pdr_transport)
add_test(NAME test_rdma_pure COMMAND test_rdma_pure)
set_tests_properties(test_rdma_pure PROPERTIES TIMEOUT 60 LABELS unit)

# Needs an RDMA device (loopback RC in one process); exits 77 (skipped) without one.
add_executable(test_rdma_device ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_rdma_device.c)
target_include_directories(test_rdma_device PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/unit ${PROJECT_SOURCE_DIR}/transport)
target_link_libraries(test_rdma_device PRIVATE pdr_transport)
add_test(NAME test_rdma_device COMMAND test_rdma_device)
set_tests_properties(test_rdma_device PROPERTIES TIMEOUT 60 LABELS gpu SKIP_RETURN_CODE 77)

# Descriptor decoders: libFuzzer with -DPDR_LIBFUZZER (clang), else a replay of the seeds and mutations.
add_executable(fuzz_rdma_desc ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_rdma_desc.c)
target_link_libraries(fuzz_rdma_desc PRIVATE pdr_transport)
target_include_directories(fuzz_rdma_desc PRIVATE ${PROJECT_SOURCE_DIR}/transport)
pdr_fuzz_corpus_test(fuzz_rdma_desc fuzz_rdma_desc rdma 60)

# The runtime against a fake libibverbs (tests/unit/rdma_fake_verbs.c, linked instead of the real one):
# posting, completions, errors and teardown, without hardware.
add_executable(test_rdma_runtime ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_rdma_runtime.c
                                 ${CMAKE_CURRENT_SOURCE_DIR}/unit/rdma_fake_verbs.c
                                 ${CMAKE_CURRENT_SOURCE_DIR}/unit/rdma_cuda_stub.c)
target_include_directories(test_rdma_runtime PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/unit ${PROJECT_SOURCE_DIR}/transport
                                                     ${IBVERBS_INCLUDE_DIRS})
target_link_libraries(test_rdma_runtime PRIVATE pdr_transport_rdma)
add_test(NAME test_rdma_runtime COMMAND test_rdma_runtime)
set_tests_properties(test_rdma_runtime PROPERTIES TIMEOUT 60 LABELS unit)
