# routing/ unit tests: the prefix tree and the cache_aware / power_of_two decisions (test_routing.c includes
# routing/*.c to reach the tree's nodes and to count and fail its allocations).
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

# The tokenizer.json encoder, token for token against the ids the Hugging Face `tokenizers` package
# wrote for a held-out corpus (tests/fixtures/tokenizer/, see make_fixtures.py there).
add_executable(pdtok tok/pdtok.c)
target_link_libraries(pdtok PRIVATE pdr_routing PkgConfig::JANSSON)
foreach(variant llama3 qwen2 gpt2)
  add_test(NAME tokenizer_ref_${variant}
           COMMAND sh -c "gzip -dc '${PROJECT_SOURCE_DIR}/tests/fixtures/tokenizer/${variant}.reference.jsonl.gz' | '$<TARGET_FILE:pdtok>' --check '${PROJECT_SOURCE_DIR}/tests/fixtures/tokenizer/${variant}.tokenizer.json'")
  set_tests_properties(tokenizer_ref_${variant} PROPERTIES TIMEOUT 300 LABELS unit)
endforeach()
add_executable(test_tokenizer unit/test_tokenizer.c)
target_include_directories(test_tokenizer PRIVATE ${PROJECT_SOURCE_DIR}/routing)
target_link_libraries(test_tokenizer PRIVATE pdr_routing Threads::Threads)
add_test(NAME tokenizer_unit
         COMMAND test_tokenizer ${PROJECT_SOURCE_DIR}/tests/fixtures/tokenizer/llama3.tokenizer.json)
set_tests_properties(tokenizer_unit PROPERTIES TIMEOUT 60 LABELS unit)

# The tokenizer in pdsim (--tokenizer) and in the router (--tokenizer-path, config key, reload, a prompt it
# fails on counted and logged as a fall-back).
pdr_scenario_tests(tokenizer_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_tokenizer.py LABEL integration TIMEOUT 120 SKIP77)
add_test(NAME tokenizer_bench_smoke
         COMMAND sh -c "gzip -dc '${PROJECT_SOURCE_DIR}/tests/fixtures/tokenizer/gpt2.reference.jsonl.gz' | '$<TARGET_FILE:tokenizer_bench>' '${PROJECT_SOURCE_DIR}/tests/fixtures/tokenizer/gpt2.tokenizer.json' --loads 1 --rounds 1 --threads 2")
set_tests_properties(tokenizer_bench_smoke PROPERTIES TIMEOUT 60 LABELS bench)

# Fuzz target of the tokenizer.json loader and the encoder behind it (seeds: cut-down fixtures).
add_executable(fuzz_tokenizer fuzz/fuzz_tokenizer.c)
target_include_directories(fuzz_tokenizer PRIVATE ${PROJECT_SOURCE_DIR}/routing)
target_link_libraries(fuzz_tokenizer PRIVATE pdr_routing)
pdr_fuzz_corpus_test(tokenizer_fuzz_corpus fuzz_tokenizer tokenizer 120)
# Fuzz target of the encoder on arbitrary text (pre-tokenizers, added tokens, merges) with the tokenizers
# of fuzz_tokenizer's seeds; see tests/fuzz/fuzz_pretok.c.
add_executable(fuzz_pretok fuzz/fuzz_pretok.c)
target_include_directories(fuzz_pretok PRIVATE ${PROJECT_SOURCE_DIR}/routing)
target_compile_definitions(fuzz_pretok PRIVATE PDR_FUZZ_TOKENIZER_DIR="${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/tokenizer")
target_link_libraries(fuzz_pretok PRIVATE pdr_routing)
pdr_fuzz_corpus_test(tokenizer_pretok_fuzz_corpus fuzz_pretok pretok 120)
# The KV event decoder and the precise prefix index (test_kvindex.c includes routing/*.c to count and fail
# their allocations and to check the index's lists).
add_executable(test_kvindex unit/test_kvindex.c)
target_include_directories(test_kvindex PRIVATE ${PROJECT_SOURCE_DIR}/routing)
target_link_libraries(test_kvindex PRIVATE pdr_common PkgConfig::MSGPACK Threads::Threads)
add_test(NAME routing_unit_kvindex COMMAND test_kvindex)
set_tests_properties(routing_unit_kvindex PROPERTIES TIMEOUT 120 LABELS unit)

# Fuzz target of the KV event decoder and the index it feeds; see tests/fuzz/fuzz_kvevents.c.
add_executable(fuzz_kvevents fuzz/fuzz_kvevents.c)
target_link_libraries(fuzz_kvevents PRIVATE pdr_routing)
pdr_fuzz_corpus_test(kvevents_fuzz_corpus fuzz_kvevents kvevents 60)
