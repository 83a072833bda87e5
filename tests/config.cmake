# Tests of config/: the unit test and the fuzz target run over its seed corpus.
add_executable(test_config ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_config.c)
target_link_libraries(test_config PRIVATE pdr_config)
add_test(NAME config_unit COMMAND test_config)
set_tests_properties(config_unit PROPERTIES TIMEOUT 60 LABELS unit)

add_executable(fuzz_config ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_config.c)
target_link_libraries(fuzz_config PRIVATE pdr_config)
pdr_fuzz_corpus_test(config_fuzz_corpus fuzz_config config 60)
