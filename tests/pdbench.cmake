# pdbench, the load generator (bench/pdbench/): real runs against pdsim, pdrouter and a scripted SSE
# server (see test_pdbench.py). The cluster scenario exits 77 (skipped) after its other checks when
# gnuplot is not installed.
pdr_scenario_tests(pdbench_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_pdbench.py LABEL integration TIMEOUT 120 SKIP77)

# The stream side (SSE splitter, event scanner) and the percentiles, as pure code.
add_executable(test_pdbench_stream unit/test_pdbench_stream.c ${PROJECT_SOURCE_DIR}/bench/pdbench/stream.c
                                   ${PROJECT_SOURCE_DIR}/bench/pdbench/report.c)
target_include_directories(test_pdbench_stream PRIVATE ${PROJECT_SOURCE_DIR}/bench/pdbench)
target_link_libraries(test_pdbench_stream PRIVATE pdr_common PkgConfig::JANSSON m)
add_test(NAME pdbench_unit_stream COMMAND test_pdbench_stream)
set_tests_properties(pdbench_unit_stream PROPERTIES TIMEOUT 60 LABELS unit)
