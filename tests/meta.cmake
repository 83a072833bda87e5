# Ratchets on the C sources outside tests/ (tests/meta/check_sources.py): no file over 700 lines but those
# listed in tests/meta/long_files.txt, each within its ceiling; no SIZE_MAX buffer limit but those counted
# in tests/meta/size_max_limits.txt; every page of docs/internals/ in its index. Both lists may only shrink: a test fails when a listed file or count
# is smaller than its line says, until the line is lowered or removed.
foreach(check long_files size_max_limits internals_index)
  add_test(NAME meta_${check} COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/meta/check_sources.py ${check}
                                      ${PROJECT_SOURCE_DIR})
  set_tests_properties(meta_${check} PROPERTIES TIMEOUT 60 LABELS meta)
endforeach()
