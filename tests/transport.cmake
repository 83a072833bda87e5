# Transport engine and worker-shim tests (unit, integration, fuzz seed replay, python binding).
set(PDR_XFER_TEST_DIR ${CMAKE_CURRENT_SOURCE_DIR})

# pdr_xfer_test(NAME SRC TIMEOUT LABEL LIBS...): a C test program NAME, its ctest of the same name.
function(pdr_xfer_test name src timeout label)
  add_executable(${name} ${src})
  target_include_directories(${name} PRIVATE ${PDR_XFER_TEST_DIR}/integration ${PROJECT_SOURCE_DIR}/transport)
  target_link_libraries(${name} PRIVATE ${ARGN} pdr_common Threads::Threads)
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES TIMEOUT ${timeout} SKIP_RETURN_CODE 77 LABELS ${label})
endfunction()

pdr_xfer_test(test_shim_basic ${PDR_XFER_TEST_DIR}/integration/test_shim_basic.c 60 integration pdshim)
pdr_xfer_test(test_shim_parts ${PDR_XFER_TEST_DIR}/integration/test_shim_parts.c 120 integration pdshim)

# The ctypes binding, from python3, against the freshly built libpdshim.so.
add_test(NAME test_shim_python
         COMMAND ${Python3_EXECUTABLE} ${PDR_XFER_TEST_DIR}/integration/test_shim_python.py ${CMAKE_BINARY_DIR})
set(PDR_XFER_PY_ENV "PDSHIM_LIB=$<TARGET_FILE:pdshim>")
if(PDR_SANITIZE)
  # python3 itself is not instrumented: the ASan runtime must be loaded first, and python's own
  # allocations at exit are not ours to report.
  execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libasan.so
                  OUTPUT_VARIABLE PDR_LIBASAN OUTPUT_STRIP_TRAILING_WHITESPACE)
  list(APPEND PDR_XFER_PY_ENV "LD_PRELOAD=${PDR_LIBASAN}" "ASAN_OPTIONS=detect_leaks=0")
endif()
set_tests_properties(test_shim_python PROPERTIES TIMEOUT 60 LABELS integration ENVIRONMENT "${PDR_XFER_PY_ENV}")
# The shim with PyTorch GPU tensors across processes (cudaMalloc and expandable-segment memory, forced
# tcp); exits 77 without torch or a GPU.
add_test(NAME test_shim_torch_gpu
         COMMAND ${Python3_EXECUTABLE} ${PDR_XFER_TEST_DIR}/gpu/test_shim_torch.py ${CMAKE_BINARY_DIR})
set_tests_properties(test_shim_torch_gpu PROPERTIES TIMEOUT 300 LABELS gpu SKIP_RETURN_CODE 77 ENVIRONMENT "${PDR_XFER_PY_ENV}")
# A real (randomly initialised) Llama-style model disaggregated behind pdrouter (tests/gpu/test_model_pd.py):
# the 1b config on GPU 0 (exits 77 without torch or a GPU), and the same flow with the tiny config on the
# CPU over tcp (exits 77 without torch). Results under the build directory.
add_test(NAME test_model_pd_gpu
         COMMAND ${Python3_EXECUTABLE} ${PDR_XFER_TEST_DIR}/gpu/test_model_pd.py ${CMAKE_BINARY_DIR}
                 --out ${CMAKE_BINARY_DIR}/model-pd-gpu)
set_tests_properties(test_model_pd_gpu PROPERTIES TIMEOUT 900 LABELS gpu SKIP_RETURN_CODE 77 ENVIRONMENT "${PDR_XFER_PY_ENV}")
add_test(NAME test_model_pd_cpu
         COMMAND ${Python3_EXECUTABLE} ${PDR_XFER_TEST_DIR}/gpu/test_model_pd.py ${CMAKE_BINARY_DIR}
                 --out ${CMAKE_BINARY_DIR}/model-pd-cpu --device cpu --config tiny --lengths 32,128
                 --max-new-tokens 6 --reps 1 --warmup 0 --skip-hf-check)
set_tests_properties(test_model_pd_cpu PROPERTIES TIMEOUT 240 LABELS gpu SKIP_RETURN_CODE 77 ENVIRONMENT "${PDR_XFER_PY_ENV}")

pdr_xfer_test(test_transport_wire ${PDR_XFER_TEST_DIR}/unit/test_transport_wire.c 30 unit pdr_transport)
pdr_xfer_test(test_transport_engine ${PDR_XFER_TEST_DIR}/unit/test_transport_engine.c 60 unit pdr_transport)

# The wire-descriptor fuzz target: libFuzzer with -DPDR_LIBFUZZER (clang), else a replay of the seeds
# and their deterministic mutations.
add_executable(fuzz_xfer_frame ${PDR_XFER_TEST_DIR}/fuzz/fuzz_xfer_frame.c)
target_link_libraries(fuzz_xfer_frame PRIVATE pdr_transport)
target_include_directories(fuzz_xfer_frame PRIVATE ${PROJECT_SOURCE_DIR}/transport)
pdr_fuzz_corpus_test(fuzz_xfer_frame fuzz_xfer_frame xfer 60)

pdr_xfer_test(test_shim_faults ${PDR_XFER_TEST_DIR}/integration/test_shim_faults.c 90 integration pdshim pdr_transport)

# GPU memory through the engine (TCP staging, CUDA IPC): built always, exits 77 (skipped) without a GPU.
pdr_xfer_test(test_xfer_gpu ${PDR_XFER_TEST_DIR}/gpu/test_xfer_gpu.c 300 gpu pdr_transport)
pdr_xfer_test(test_transport_big ${PDR_XFER_TEST_DIR}/integration/test_transport_big.c 120 integration pdr_transport)
# A 4 GiB room, past every 32-bit length (8 GiB of buffers, ~40 s of page faults on the 2-core VM): release
# build only, alone (RUN_SERIAL), so the sanitizer run and parallel tests do not double its memory.
if(NOT PDR_SANITIZE)
  add_test(NAME test_transport_big_4g COMMAND test_transport_big)
  set_tests_properties(test_transport_big_4g PROPERTIES TIMEOUT 300 LABELS integration RUN_SERIAL TRUE
                       ENVIRONMENT "PDR_TEST_BIG_BYTES=4294967296")
endif()

# The GPU paths on a CPU: the engine's objects (pdr_transport_core) with tests/unit/fake_cuda.c instead of
# cuda.c.
add_executable(test_transport_staging ${PDR_XFER_TEST_DIR}/unit/test_transport_staging.c
               ${PDR_XFER_TEST_DIR}/unit/fake_cuda.c)
target_include_directories(test_transport_staging PRIVATE ${PDR_XFER_TEST_DIR}/integration
                           ${PROJECT_SOURCE_DIR}/transport)
target_link_libraries(test_transport_staging PRIVATE pdr_transport_core pdr_transport_rdma PkgConfig::IBVERBS)
add_test(NAME test_transport_staging COMMAND test_transport_staging)
set_tests_properties(test_transport_staging PROPERTIES TIMEOUT 120 LABELS unit)

# pdxfer-bench's rooms on a CPU: the benchmark's sources included by the test, the engine's objects with
# tests/unit/fake_cuda.c (strict about waiting for stream work).
add_executable(test_bench_order ${PDR_XFER_TEST_DIR}/unit/test_bench_order.c
               ${PDR_XFER_TEST_DIR}/unit/fake_cuda.c)
target_include_directories(test_bench_order PRIVATE ${PDR_XFER_TEST_DIR}/integration
                           ${PROJECT_SOURCE_DIR}/transport)
target_link_libraries(test_bench_order PRIVATE pdr_transport_core pdr_transport_rdma PkgConfig::IBVERBS)
add_test(NAME test_bench_order COMMAND test_bench_order)
set_tests_properties(test_bench_order PROPERTIES TIMEOUT 120 LABELS unit)

# The RDMA data path on a CPU: the engine's objects with the fake libibverbs
# (tests/unit/rdma_fake_verbs.c) and tests/unit/fake_cuda.c.
add_executable(test_transport_rdma ${PDR_XFER_TEST_DIR}/unit/test_transport_rdma.c
               ${PDR_XFER_TEST_DIR}/unit/rdma_fake_verbs.c ${PDR_XFER_TEST_DIR}/unit/fake_cuda.c)
target_include_directories(test_transport_rdma PRIVATE ${PDR_XFER_TEST_DIR}/integration ${PDR_XFER_TEST_DIR}/unit
                           ${PROJECT_SOURCE_DIR}/transport ${IBVERBS_INCLUDE_DIRS})
target_link_libraries(test_transport_rdma PRIVATE pdr_transport_core pdr_transport_rdma)
add_test(NAME test_transport_rdma COMMAND test_transport_rdma)
set_tests_properties(test_transport_rdma PROPERTIES TIMEOUT 60 LABELS unit)

# The fd server of CUDA VMM sharing alone: descriptors over an abstract Unix socket, unknown ids, no
# server, drop, stop.
add_executable(test_fdpass ${PDR_XFER_TEST_DIR}/unit/test_fdpass.c)
target_include_directories(test_fdpass PRIVATE ${PDR_XFER_TEST_DIR}/unit ${PROJECT_SOURCE_DIR}/transport)
target_link_libraries(test_fdpass PRIVATE pdr_transport)
add_test(NAME test_fdpass COMMAND test_fdpass)
set_tests_properties(test_fdpass PROPERTIES TIMEOUT 30 LABELS unit)

# The error codes are ABI: pdshim.h's enum and pdshim.py's ERRORS must match common/err.h, name for name
# and value for value.
add_test(NAME abi_err_codes COMMAND ${Python3_EXECUTABLE} ${PDR_XFER_TEST_DIR}/abi/check_err_codes.py
                                    ${PROJECT_SOURCE_DIR})
set_tests_properties(abi_err_codes PROPERTIES TIMEOUT 30 LABELS meta)

# The case runner itself (tests/unit/runner.h): a crash, a hang past its deadline and a failed check are
# each reported with the case's name, and the cases after them still run.
add_executable(test_runner ${PDR_XFER_TEST_DIR}/unit/test_runner.c)
add_test(NAME test_runner COMMAND test_runner)
set_tests_properties(test_runner PROPERTIES TIMEOUT 30 LABELS unit)

# ThreadSanitizer slows the engine's threads several times over.
if(PDR_TSAN)
  set_tests_properties(test_transport_engine test_shim_basic test_shim_parts test_shim_faults test_transport_staging
                       test_transport_rdma PROPERTIES TIMEOUT 400 ENVIRONMENT "PDR_TEST_TIMEOUT_SCALE=4")
endif()

# What may include what (router/ no transport or shim header; transport/ no h2o, curl or config header),
# on the tree and on a fixture tree that breaks every rule (which must fail).
add_test(NAME check_includes COMMAND ${Python3_EXECUTABLE} ${PDR_XFER_TEST_DIR}/check_includes.py ${PROJECT_SOURCE_DIR})
add_test(NAME check_includes_rejects
         COMMAND ${Python3_EXECUTABLE} ${PDR_XFER_TEST_DIR}/check_includes.py ${PDR_XFER_TEST_DIR}/fixtures/includes_bad)
set_tests_properties(check_includes check_includes_rejects PROPERTIES TIMEOUT 30 LABELS meta)
set_tests_properties(check_includes_rejects PROPERTIES PASS_REGULAR_EXPRESSION
                     "router/bad.c:2: router/[^\n]*transport.h.*transport/bad.c:2: [^\n]*h2o.h.*curl/curl.h.*config header config.h")
