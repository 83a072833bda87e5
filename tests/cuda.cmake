# The CUDA driver loader (transport/cuda.c): the no-driver and stub-driver paths run everywhere; the GPU
# test exits 77 (skipped) without a usable driver.
set(PDR_CUDA_TEST_DIR ${CMAKE_CURRENT_SOURCE_DIR})

add_executable(test_cuda_stub ${PDR_CUDA_TEST_DIR}/unit/test_cuda_stub.c)
target_include_directories(test_cuda_stub PRIVATE ${PDR_CUDA_TEST_DIR}/unit ${PROJECT_SOURCE_DIR}/transport)
target_link_libraries(test_cuda_stub PRIVATE pdr_transport ${CMAKE_DL_LIBS})
add_test(NAME test_cuda_nolib COMMAND test_cuda_stub nolib)
set_tests_properties(test_cuda_nolib PROPERTIES TIMEOUT 30 LABELS unit SKIP_RETURN_CODE 77)

# The toolkit's stub libcuda.so answers CUDA_ERROR_STUB_LIBRARY to every call: a libcuda.so.1 link to
# it on LD_LIBRARY_PATH stands in for a driver that cannot work.
get_filename_component(PDR_CUDA_STUB ${PDR_CUDA_INCLUDE}/../lib/stubs/libcuda.so ABSOLUTE)
set(PDR_CUDA_STUB_DIR ${CMAKE_BINARY_DIR}/cuda-stub)
file(MAKE_DIRECTORY ${PDR_CUDA_STUB_DIR})
if(EXISTS ${PDR_CUDA_STUB})
  file(CREATE_LINK ${PDR_CUDA_STUB} ${PDR_CUDA_STUB_DIR}/libcuda.so.1 SYMBOLIC)
endif()
add_test(NAME test_cuda_stublib COMMAND test_cuda_stub stub)
set_tests_properties(test_cuda_stublib PROPERTIES TIMEOUT 30 LABELS unit SKIP_RETURN_CODE 77
                     ENVIRONMENT "LD_LIBRARY_PATH=${PDR_CUDA_STUB_DIR}")

add_executable(test_cuda_gpu ${PDR_CUDA_TEST_DIR}/gpu/test_cuda_gpu.c)
target_include_directories(test_cuda_gpu PRIVATE ${PDR_CUDA_TEST_DIR}/unit ${PROJECT_SOURCE_DIR}/transport)
target_link_libraries(test_cuda_gpu PRIVATE pdr_transport Threads::Threads)
add_test(NAME test_cuda_gpu COMMAND test_cuda_gpu)
set_tests_properties(test_cuda_gpu PROPERTIES TIMEOUT 120 LABELS gpu SKIP_RETURN_CODE 77)

# The pattern kernels' PTX assembles (ptxas where installed; skipped otherwise).
add_executable(test_cuda_ptx ${PDR_CUDA_TEST_DIR}/unit/test_cuda_ptx.c)
target_include_directories(test_cuda_ptx PRIVATE ${PROJECT_SOURCE_DIR}/transport)
target_link_libraries(test_cuda_ptx PRIVATE pdr_transport)
add_test(NAME test_cuda_ptx COMMAND test_cuda_ptx)
set_tests_properties(test_cuda_ptx PROPERTIES TIMEOUT 60 LABELS unit SKIP_RETURN_CODE 77)

# pdxfer-bench between two processes on a GPU, full verification (skipped without a GPU).
add_test(NAME test_bench_gpu COMMAND sh ${PDR_CUDA_TEST_DIR}/gpu/test_bench_gpu.sh $<TARGET_FILE:pdxfer-bench>)
set_tests_properties(test_bench_gpu PROPERTIES TIMEOUT 120 LABELS gpu SKIP_RETURN_CODE 77)
