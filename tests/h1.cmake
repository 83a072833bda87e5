# Tests of router/upstream/h1parse.c, the incremental HTTP/1.1 response parser. Both programs compile h1parse.c
# directly (it is pure: no I/O, no allocation) and link nothing else, so they build whatever the state of
# the rest of the router.
add_executable(test_h1parse ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_h1parse.c ${PROJECT_SOURCE_DIR}/router/upstream/h1parse.c)
target_include_directories(test_h1parse PRIVATE ${PROJECT_SOURCE_DIR}/router/upstream ${PROJECT_SOURCE_DIR}/common)
add_test(NAME h1parse_unit COMMAND test_h1parse)
set_tests_properties(h1parse_unit PROPERTIES TIMEOUT 60 LABELS unit)

add_executable(fuzz_h1parse ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_h1parse.c ${PROJECT_SOURCE_DIR}/router/upstream/h1parse.c)
target_include_directories(fuzz_h1parse PRIVATE ${PROJECT_SOURCE_DIR}/router/upstream ${PROJECT_SOURCE_DIR}/common)
pdr_fuzz_corpus_test(h1parse_fuzz_corpus fuzz_h1parse h1 60)

# bench/h1parse_bench: the parser's cost per response against picohttpparser's (callgrind counts it;
# docs/benchmarks.md). The smoke test checks that both read the bench response alike.
add_executable(h1parse_bench ${PROJECT_SOURCE_DIR}/bench/h1parse_bench.c ${PROJECT_SOURCE_DIR}/router/upstream/h1parse.c)
target_include_directories(h1parse_bench PRIVATE ${PROJECT_SOURCE_DIR}/router/upstream)
target_link_libraries(h1parse_bench PRIVATE PkgConfig::H2O)
add_test(NAME h1parse_bench_smoke COMMAND h1parse_bench ours 1000)
set_tests_properties(h1parse_bench_smoke PROPERTIES TIMEOUT 60 LABELS bench)

# The same unit tests and corpus with the portable scan (eight bytes at a time, no SSE2) that h1parse.c
# uses where SSE2 is missing: both scans must give every input the same events.
add_executable(test_h1parse_scalar ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_h1parse.c ${PROJECT_SOURCE_DIR}/router/upstream/h1parse.c)
target_include_directories(test_h1parse_scalar PRIVATE ${PROJECT_SOURCE_DIR}/router/upstream ${PROJECT_SOURCE_DIR}/common)
target_compile_definitions(test_h1parse_scalar PRIVATE PDR_H1_SCALAR)
add_test(NAME h1parse_unit_scalar COMMAND test_h1parse_scalar)
set_tests_properties(h1parse_unit_scalar PROPERTIES TIMEOUT 60 LABELS unit)
add_executable(fuzz_h1parse_scalar ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_h1parse.c ${PROJECT_SOURCE_DIR}/router/upstream/h1parse.c)
target_include_directories(fuzz_h1parse_scalar PRIVATE ${PROJECT_SOURCE_DIR}/router/upstream ${PROJECT_SOURCE_DIR}/common ${CMAKE_CURRENT_SOURCE_DIR}/fuzz)
target_compile_definitions(fuzz_h1parse_scalar PRIVATE PDR_H1_SCALAR)
file(GLOB h1_seeds ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/h1/*)
list(SORT h1_seeds)
add_test(NAME h1parse_fuzz_corpus_scalar COMMAND fuzz_h1parse_scalar ${h1_seeds})
set_tests_properties(h1parse_fuzz_corpus_scalar PROPERTIES TIMEOUT 60 LABELS fuzz-replay)
