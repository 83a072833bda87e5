# The RDMA backend (transport/rdma*.c) and its tests. Kept here, outside transport/CMakeLists.txt, until
# the engine wires the backend in: pdr_rdma_pure (descriptors, state machine, write plan, NIC choice; no
# verbs) and pdr_rdma (the libibverbs runtime on top).
pkg_check_modules(IBVERBS REQUIRED IMPORTED_TARGET libibverbs)

set(PDR_RDMA_DIR ${PROJECT_SOURCE_DIR}/transport)
add_library(pdr_rdma_pure STATIC ${PDR_RDMA_DIR}/rdma_wire.c ${PDR_RDMA_DIR}/rdma_plan.c
                                 ${PDR_RDMA_DIR}/rdma_topo.c)
target_include_directories(pdr_rdma_pure PUBLIC ${PDR_RDMA_DIR})
target_link_libraries(pdr_rdma_pure PUBLIC pdr_common)

add_library(pdr_rdma STATIC ${PDR_RDMA_DIR}/rdma.c)
target_link_libraries(pdr_rdma PUBLIC pdr_rdma_pure pdr_common PkgConfig::IBVERBS Threads::Threads)
# pdr__cuda_dmabuf_fd comes from transport/cuda.c inside pdr_transport once that file is built there;
# until then a test-only stub that answers PDR_ENOTSUP (host memory only).
file(READ ${PDR_RDMA_DIR}/CMakeLists.txt PDR_RDMA_TRANSPORT_CML)
if(PDR_RDMA_TRANSPORT_CML MATCHES "cuda\\.c")
  target_link_libraries(pdr_rdma PUBLIC pdr_transport)
else()
  target_sources(pdr_rdma PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/unit/rdma_cuda_stub.c)
endif()

add_executable(test_rdma_pure ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_rdma_pure.c)
target_include_directories(test_rdma_pure PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/unit)
target_link_libraries(test_rdma_pure PRIVATE pdr_rdma_pure)
add_test(NAME test_rdma_pure COMMAND test_rdma_pure)
set_tests_properties(test_rdma_pure PROPERTIES TIMEOUT 60)

# Needs an RDMA device (loopback RC in one process); exits 77 (skipped) without one.
add_executable(test_rdma_device ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_rdma_device.c)
target_include_directories(test_rdma_device PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/unit)
target_link_libraries(test_rdma_device PRIVATE pdr_rdma)
add_test(NAME test_rdma_device COMMAND test_rdma_device)
set_tests_properties(test_rdma_device PROPERTIES TIMEOUT 60 SKIP_RETURN_CODE 77)

# Descriptor decoders: libFuzzer with -DPDR_LIBFUZZER (clang), else a replay of the seeds and mutations.
add_executable(fuzz_rdma_desc ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_rdma_desc.c)
target_link_libraries(fuzz_rdma_desc PRIVATE pdr_rdma_pure)
add_test(NAME fuzz_rdma_desc COMMAND fuzz_rdma_desc ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/rdma)
set_tests_properties(fuzz_rdma_desc PROPERTIES TIMEOUT 60)

# The runtime against a fake libibverbs (tests/unit/rdma_fake_verbs.c, linked instead of the real one):
# posting, completions, errors and teardown, without hardware.
add_executable(test_rdma_runtime ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_rdma_runtime.c
                                 ${CMAKE_CURRENT_SOURCE_DIR}/unit/rdma_fake_verbs.c ${PDR_RDMA_DIR}/rdma.c)
target_include_directories(test_rdma_runtime PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/unit ${IBVERBS_INCLUDE_DIRS})
target_link_libraries(test_rdma_runtime PRIVATE pdr_rdma_pure pdr_common Threads::Threads)
if(PDR_RDMA_TRANSPORT_CML MATCHES "cuda\\.c")
  target_link_libraries(test_rdma_runtime PRIVATE pdr_transport)
else()
  target_sources(test_rdma_runtime PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/unit/rdma_cuda_stub.c)
endif()
add_test(NAME test_rdma_runtime COMMAND test_rdma_runtime)
set_tests_properties(test_rdma_runtime PROPERTIES TIMEOUT 60)
