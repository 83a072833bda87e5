# pdsim: the simulated inference worker (tests/sim/) and its tests. Included by tests/CMakeLists.txt;
# the binary lands in the build root (CMAKE_RUNTIME_OUTPUT_DIRECTORY).
add_executable(pdsim sim/main.c sim/server.c sim/routes.c sim/generate.c sim/kv_flow.c sim/vllm.c sim/output.c
                     sim/model.c sim/prefix_cache.c sim/kv_events.c sim/kv_lease.c)
target_include_directories(pdsim PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/sim ${PROJECT_SOURCE_DIR}/worker-shim)
target_link_libraries(pdsim PRIVATE pdshim pdr_common pdr_tokenizer pdr_chat_template PkgConfig::H2O PkgConfig::UV PkgConfig::SSL
                                    PkgConfig::JANSSON PkgConfig::ZMQ PkgConfig::MSGPACK Threads::Threads)

add_test(NAME pdsim_integration
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_pdsim.py)
set_tests_properties(pdsim_integration PROPERTIES TIMEOUT 120 LABELS integration SKIP_RETURN_CODE 77
                     ENVIRONMENT "PDR_BUILD=${CMAKE_BINARY_DIR}")

# pdsim is autoregressive: a prompt extended by the first k output tokens goes on with token k, on every
# generation route, on role both and through a prefill and decode pair.
add_test(NAME pdsim_resume
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_pdsim_resume.py)
set_tests_properties(pdsim_resume PROPERTIES TIMEOUT 120 LABELS integration SKIP_RETURN_CODE 77
                     ENVIRONMENT "PDR_BUILD=${CMAKE_BINARY_DIR}")

# pdsim's prefix cache, as pure code.
add_executable(test_pdsim_pcache unit/test_pdsim_pcache.c sim/prefix_cache.c sim/model.c)
target_include_directories(test_pdsim_pcache PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/sim ${PROJECT_SOURCE_DIR}/worker-shim)
target_link_libraries(test_pdsim_pcache PRIVATE pdr_common pdr_tokenizer PkgConfig::UV)
add_test(NAME pdsim_unit_pcache COMMAND test_pdsim_pcache)
set_tests_properties(pdsim_unit_pcache PROPERTIES TIMEOUT 60 LABELS unit)

# pdsim's model, as pure code: autoregressive generation, output ids, the KV's part in the text.
add_executable(test_pdsim_model unit/test_pdsim_model.c sim/model.c)
target_include_directories(test_pdsim_model PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/sim ${PROJECT_SOURCE_DIR}/worker-shim)
target_link_libraries(test_pdsim_model PRIVATE pdr_common pdr_tokenizer PkgConfig::UV)
add_test(NAME pdsim_unit_model COMMAND test_pdsim_model)
set_tests_properties(pdsim_unit_model PROPERTIES TIMEOUT 60 LABELS unit)

# pdsim's prefix cache end to end (--prefix-cache-tokens): hits, prefill time, stats, LRU eviction.
add_test(NAME pdsim_prefix_cache
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_pdsim_cache.py)
set_tests_properties(pdsim_prefix_cache PROPERTIES TIMEOUT 120 LABELS integration SKIP_RETURN_CODE 77
                     ENVIRONMENT "PDR_BUILD=${CMAKE_BINARY_DIR}")

# pdsim --kv-parts through pdrouter: parts spread over the simulated prefill, output equal to monolithic.
add_test(NAME pdsim_kv_parts COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_kv_parts.py)
set_tests_properties(pdsim_kv_parts PROPERTIES TIMEOUT 120 LABELS integration SKIP_RETURN_CODE 77 ENVIRONMENT "PDR_BUILD=${CMAKE_BINARY_DIR}")

# pdsim as the engines behave, through pdrouter (see test_pdsim_engine.py): a decode's default bootstrap
# port, stream_options.include_usage.
pdr_scenario_tests(pdsim_engine_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_pdsim_engine.py LABEL integration TIMEOUT 120)
