# Tests of router/jsonscan.c, the request-body JSON scanner. Both programs compile jsonscan.c directly
# and use jansson as the oracle of a differential check (see tests/fuzz/fuzz_jsonscan.c).
add_executable(test_jsonscan ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_jsonscan.c ${PROJECT_SOURCE_DIR}/router/jsonscan.c)
target_include_directories(test_jsonscan PRIVATE ${PROJECT_SOURCE_DIR}/router ${PROJECT_SOURCE_DIR}/common)
target_link_libraries(test_jsonscan PRIVATE pdr_common PkgConfig::JANSSON)
add_test(NAME jsonscan_unit COMMAND test_jsonscan)
set_tests_properties(jsonscan_unit PROPERTIES TIMEOUT 120)

# With -DPDR_LIBFUZZER=ON (clang) fuzz_jsonscan is a libFuzzer binary; otherwise a plain program that
# runs every file named on its command line, so the corpus is replayed by every build.
option(PDR_LIBFUZZER "Build fuzz targets with libFuzzer (clang only)" OFF)
add_executable(fuzz_jsonscan ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_jsonscan.c ${PROJECT_SOURCE_DIR}/router/jsonscan.c)
target_include_directories(fuzz_jsonscan PRIVATE ${PROJECT_SOURCE_DIR}/router ${PROJECT_SOURCE_DIR}/common)
target_link_libraries(fuzz_jsonscan PRIVATE pdr_common PkgConfig::JANSSON)
if(PDR_LIBFUZZER)
  target_compile_definitions(fuzz_jsonscan PRIVATE PDR_LIBFUZZER)
  target_compile_options(fuzz_jsonscan PRIVATE -fsanitize=fuzzer)
  target_link_options(fuzz_jsonscan PRIVATE -fsanitize=fuzzer)
endif()
file(GLOB PDR_JSON_SEEDS ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/json/*)
list(SORT PDR_JSON_SEEDS)
add_test(NAME jsonscan_fuzz_corpus COMMAND fuzz_jsonscan ${PDR_JSON_SEEDS})
set_tests_properties(jsonscan_fuzz_corpus PROPERTIES TIMEOUT 120)
