# Tests of config/: the unit test and the fuzz target run over its seed corpus.
add_executable(test_config ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_config.c)
target_link_libraries(test_config PRIVATE pdr_config)
add_test(NAME config_unit COMMAND test_config)
set_tests_properties(config_unit PROPERTIES TIMEOUT 60)

# With -DPDR_LIBFUZZER=ON (clang) fuzz_config is a libFuzzer binary; otherwise a plain program that
# runs every file named on its command line, so the corpus is replayed by every build.
option(PDR_LIBFUZZER "Build fuzz targets with libFuzzer (clang only)" OFF)
add_executable(fuzz_config ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_config.c)
target_link_libraries(fuzz_config PRIVATE pdr_config)
if(PDR_LIBFUZZER)
  target_compile_definitions(fuzz_config PRIVATE PDR_LIBFUZZER)
  target_compile_options(fuzz_config PRIVATE -fsanitize=fuzzer)
  target_link_options(fuzz_config PRIVATE -fsanitize=fuzzer)
endif()
file(GLOB PDR_CONFIG_SEEDS ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/config/*)
list(SORT PDR_CONFIG_SEEDS)
add_test(NAME config_fuzz_corpus COMMAND fuzz_config ${PDR_CONFIG_SEEDS})
set_tests_properties(config_fuzz_corpus PROPERTIES TIMEOUT 60)
