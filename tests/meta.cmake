# Checks on the C sources (tests/meta/check_sources.py): no file outside tests/ over 700 lines, without
# exception; no SIZE_MAX buffer limit in any C file of the tree; every page of docs/internals/ in its index.
# meta_check_sources_selftest runs the SIZE_MAX detector against snippets that it must find, or not.
foreach(check long_files size_max_limits internals_index)
  add_test(NAME meta_${check} COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/meta/check_sources.py ${check}
                                      ${PROJECT_SOURCE_DIR})
  set_tests_properties(meta_${check} PROPERTIES TIMEOUT 60 LABELS meta)
endforeach()
add_test(NAME meta_check_sources_selftest COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/meta/check_sources.py
                                              selftest)
set_tests_properties(meta_check_sources_selftest PROPERTIES TIMEOUT 60 LABELS meta)

# The list of scripts/mutate.sh follows the code: each mutation's file exists and its text occurs there once.
add_test(NAME meta_mutations COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/meta/check_mutations.py
                                 ${PROJECT_SOURCE_DIR})
set_tests_properties(meta_mutations PROPERTIES TIMEOUT 60 LABELS meta)
