# Tests of router/h1parse.c, the incremental HTTP/1.1 response parser. Both programs compile h1parse.c
# directly (it is pure: no I/O, no allocation) and link nothing else, so they build whatever the state of
# the rest of the router.
add_executable(test_h1parse ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_h1parse.c ${PROJECT_SOURCE_DIR}/router/h1parse.c)
target_include_directories(test_h1parse PRIVATE ${PROJECT_SOURCE_DIR}/router ${PROJECT_SOURCE_DIR}/common)
add_test(NAME h1parse_unit COMMAND test_h1parse)
set_tests_properties(h1parse_unit PROPERTIES TIMEOUT 60)

# With -DPDR_LIBFUZZER=ON (clang) fuzz_h1parse is a libFuzzer binary; otherwise a plain program that
# replays the seed corpus with deterministic mutations.
option(PDR_LIBFUZZER "Build fuzz targets with libFuzzer (clang only)" OFF)
add_executable(fuzz_h1parse ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_h1parse.c ${PROJECT_SOURCE_DIR}/router/h1parse.c)
target_include_directories(fuzz_h1parse PRIVATE ${PROJECT_SOURCE_DIR}/router ${PROJECT_SOURCE_DIR}/common
                                                ${CMAKE_CURRENT_SOURCE_DIR}/fuzz)
if(PDR_LIBFUZZER)
  target_compile_definitions(fuzz_h1parse PRIVATE PDR_LIBFUZZER)
  target_compile_options(fuzz_h1parse PRIVATE -fsanitize=fuzzer)
  target_link_options(fuzz_h1parse PRIVATE -fsanitize=fuzzer)
endif()
file(GLOB PDR_H1_SEEDS ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/h1/*)
list(SORT PDR_H1_SEEDS)
add_test(NAME h1parse_fuzz_corpus COMMAND fuzz_h1parse ${PDR_H1_SEEDS})
set_tests_properties(h1parse_fuzz_corpus PROPERTIES TIMEOUT 60)
