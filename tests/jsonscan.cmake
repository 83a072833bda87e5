# Tests of router/util/jsonscan.c and jsonscan_value.c, the request-body JSON scanner. Both programs compile
# those two files directly and use jansson as the oracle of a differential check (see tests/fuzz/fuzz_jsonscan.c).
add_executable(test_jsonscan ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_jsonscan.c ${PROJECT_SOURCE_DIR}/router/util/jsonscan.c
               ${PROJECT_SOURCE_DIR}/router/util/jsonscan_value.c)
target_include_directories(test_jsonscan PRIVATE ${PROJECT_SOURCE_DIR}/router/util ${PROJECT_SOURCE_DIR}/common)
target_link_libraries(test_jsonscan PRIVATE pdr_common PkgConfig::JANSSON)
add_test(NAME jsonscan_unit COMMAND test_jsonscan)
set_tests_properties(jsonscan_unit PROPERTIES TIMEOUT 120 LABELS unit)

add_executable(fuzz_jsonscan ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_jsonscan.c ${PROJECT_SOURCE_DIR}/router/util/jsonscan.c
               ${PROJECT_SOURCE_DIR}/router/util/jsonscan_value.c)
target_include_directories(fuzz_jsonscan PRIVATE ${PROJECT_SOURCE_DIR}/router/util ${PROJECT_SOURCE_DIR}/common)
target_link_libraries(fuzz_jsonscan PRIVATE pdr_common PkgConfig::JANSSON)
pdr_fuzz_corpus_test(jsonscan_fuzz_corpus fuzz_jsonscan json 120)

# Tests of router/util/engine_load.c, the parsers of the engines' load answers (sglang's /get_load list, vLLM's
# /metrics text), with malformed input of each.
add_executable(test_engine_load ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_engine_load.c
               ${PROJECT_SOURCE_DIR}/router/util/engine_load.c)
target_include_directories(test_engine_load PRIVATE ${PROJECT_SOURCE_DIR}/router/util ${PROJECT_SOURCE_DIR}/common)
target_link_libraries(test_engine_load PRIVATE pdr_common PkgConfig::JANSSON m)
add_test(NAME engine_load_unit COMMAND test_engine_load)
set_tests_properties(engine_load_unit PROPERTIES TIMEOUT 60 LABELS unit)
