# Tests of config/: the unit test and the fuzz target run over its seed corpus.
add_executable(test_config ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_config.c)
target_link_libraries(test_config PRIVATE pdr_config)
add_test(NAME config_unit COMMAND test_config)
set_tests_properties(config_unit PROPERTIES TIMEOUT 60 LABELS unit)

add_executable(fuzz_config ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_config.c)
target_link_libraries(fuzz_config PRIVATE pdr_config)
pdr_fuzz_corpus_test(config_fuzz_corpus fuzz_config config 60)

# The configuration schema (config/schema.c): every row is read by the YAML loader, holds its default in a
# new snapshot and has its range enforced by the loader and by validation.
add_executable(test_config_schema ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_config_schema.c)
target_link_libraries(test_config_schema PRIVATE pdr_config)
add_test(NAME config_schema COMMAND test_config_schema)
set_tests_properties(config_schema PROPERTIES TIMEOUT 60 LABELS unit)

# docs/config.md's key tables against the schema: every row listed, no scalar key the schema lacks, the
# same defaults and ranges.
add_test(NAME config_docs_schema
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/schema/check_config_docs.py
                 $<TARGET_FILE:test_config_schema> ${PROJECT_SOURCE_DIR}/docs/config.md)
set_tests_properties(config_docs_schema PROPERTIES TIMEOUT 60 LABELS meta)
