# Checks on the C sources outside tests/ (tests/meta/check_sources.py): no file over 700 lines, without
# exception; no SIZE_MAX buffer limit but those counted in tests/meta/size_max_limits.txt, a list that may
# only shrink (the test fails when a count is smaller than its line says, until the line is lowered or
# removed); every page of docs/internals/ in its index.
foreach(check long_files size_max_limits internals_index)
  add_test(NAME meta_${check} COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/meta/check_sources.py ${check}
                                      ${PROJECT_SOURCE_DIR})
  set_tests_properties(meta_${check} PROPERTIES TIMEOUT 60 LABELS meta)
endforeach()
