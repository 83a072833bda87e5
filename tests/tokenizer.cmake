# tokenizer/ tests: the tokenizer.json encoder (pdr_tokenizer), its fuzz targets and its benchmark's smoke run.
# The tokenizer.json encoder, token for token against the ids the Hugging Face `tokenizers` package
# wrote for a held-out corpus (tests/fixtures/tokenizer/, see make_fixtures.py there).
add_executable(pdtok tok/pdtok.c)
target_link_libraries(pdtok PRIVATE pdr_tokenizer PkgConfig::JANSSON)
foreach(variant llama3 qwen2 gpt2 spm_meta spm_legacy spm_gemma)
  add_test(NAME tokenizer_ref_${variant}
           COMMAND sh -c "gzip -dc '${PROJECT_SOURCE_DIR}/tests/fixtures/tokenizer/${variant}.reference.jsonl.gz' | '$<TARGET_FILE:pdtok>' --check '${PROJECT_SOURCE_DIR}/tests/fixtures/tokenizer/${variant}.tokenizer.json'")
  set_tests_properties(tokenizer_ref_${variant} PROPERTIES TIMEOUT 300 LABELS unit)
endforeach()
add_executable(test_tokenizer unit/test_tokenizer.c)
target_include_directories(test_tokenizer PRIVATE ${PROJECT_SOURCE_DIR}/tokenizer)
target_link_libraries(test_tokenizer PRIVATE pdr_tokenizer Threads::Threads)
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
target_include_directories(fuzz_tokenizer PRIVATE ${PROJECT_SOURCE_DIR}/tokenizer)
target_link_libraries(fuzz_tokenizer PRIVATE pdr_tokenizer)
pdr_fuzz_corpus_test(tokenizer_fuzz_corpus fuzz_tokenizer tokenizer 120)
# Fuzz target of the encoder on arbitrary text (pre-tokenizers, added tokens, merges) with the tokenizers
# of fuzz_tokenizer's seeds; see tests/fuzz/fuzz_pretok.c.
add_executable(fuzz_pretok fuzz/fuzz_pretok.c)
target_include_directories(fuzz_pretok PRIVATE ${PROJECT_SOURCE_DIR}/tokenizer)
target_compile_definitions(fuzz_pretok PRIVATE PDR_FUZZ_TOKENIZER_DIR="${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/tokenizer")
target_link_libraries(fuzz_pretok PRIVATE pdr_tokenizer)
pdr_fuzz_corpus_test(tokenizer_pretok_fuzz_corpus fuzz_pretok pretok 120)

# The Jinja engine of chat templates (pdr_jinja), byte for byte against python3-jinja2 in transformers'
# environment over tests/fixtures/jinja/ (skipped, 77, when jinja2 is missing); its unit tests (limits,
# errors, undefined values, each filter and test); its fuzz target (template and context bytes).
add_executable(pdjinja tok/pdjinja.c)
target_link_libraries(pdjinja PRIVATE pdr_jinja)
# Debian's python3-jinja2 is in /usr/bin/python3's dist-packages; a python3 of its own (pyenv) may have jinja2 too.
add_test(NAME jinja_vs_jinja2
         COMMAND sh -c "for py in /usr/bin/python3 \"$0\"; do \"$py\" -c 'import jinja2' 2>/dev/null && exec \"$py\" \"$1\" \"$2\" \"$3\"; done; echo 'skipped: no python3 with jinja2 (apt-get install python3-jinja2)'; exit 77"
                 ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/tok/jinja_diff.py $<TARGET_FILE:pdjinja>
                 ${PROJECT_SOURCE_DIR}/tests/fixtures/jinja)
set_tests_properties(jinja_vs_jinja2 PROPERTIES TIMEOUT 120 LABELS integration SKIP_RETURN_CODE 77)
add_executable(test_jinja unit/test_jinja.c)
target_link_libraries(test_jinja PRIVATE pdr_jinja Threads::Threads)
add_test(NAME jinja_unit COMMAND test_jinja)
set_tests_properties(jinja_unit PROPERTIES TIMEOUT 60 LABELS unit)
add_executable(fuzz_jinja fuzz/fuzz_jinja.c)
target_link_libraries(fuzz_jinja PRIVATE pdr_jinja)
pdr_fuzz_corpus_test(jinja_fuzz_corpus fuzz_jinja jinja 120)
