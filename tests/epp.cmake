# The endpoint picker (router/epp/): a test picker on the real server (integration/epp_testpicker.c) and a
# gateway played by Debian's python3-grpcio (integration/test_epp.py), which compiles router/epp/proto/
# with python3-grpc-tools into a temporary directory. Included by tests/CMakeLists.txt. A scenario is
# skipped (77) where /usr/bin/python3 lacks grpc or grpc_tools.
add_executable(epp_testpicker integration/epp_testpicker.c)
target_link_libraries(epp_testpicker PRIVATE pdr_epp pdr_common PkgConfig::UV)

add_executable(test_grpc_frame unit/test_grpc_frame.c)
target_link_libraries(test_grpc_frame PRIVATE pdr_epp pdr_common)
add_test(NAME epp_grpc_frame COMMAND test_grpc_frame)
set_tests_properties(epp_grpc_frame PROPERTIES LABELS unit TIMEOUT 30)

set(pdr_epp_driver ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_epp.py)
pdr_driver_scenarios(pdr_epp_names ${pdr_epp_driver})
foreach(s ${pdr_epp_names})
  add_test(NAME epp_${s}
           COMMAND sh -c "/usr/bin/python3 -c 'import grpc, grpc_tools' 2>/dev/null || { echo 'skipped: /usr/bin/python3 has no grpc or grpc_tools (python3-grpcio, python3-grpc-tools)'; exit 77; }; exec /usr/bin/python3 \"$0\" ${s}"
                   ${pdr_epp_driver})
  set_tests_properties(epp_${s} PROPERTIES LABELS integration TIMEOUT 60 SKIP_RETURN_CODE 77
                       ENVIRONMENT "PDR_BUILD=${CMAKE_BINARY_DIR}")
endforeach()

# Fuzz target of the reading side: the framing reader against a reference walk, each message decoded as
# the ext_proc layer does (fuzz/fuzz_grpc_msg.c); seeds in fuzz/corpus/grpc/.
add_executable(fuzz_grpc_msg fuzz/fuzz_grpc_msg.c)
target_link_libraries(fuzz_grpc_msg PRIVATE pdr_epp pdr_epp_pb pdr_common PkgConfig::UV)
target_include_directories(fuzz_grpc_msg PRIVATE ${PROJECT_SOURCE_DIR}/router/epp)
pdr_fuzz_corpus_test(epp_fuzz_corpus fuzz_grpc_msg grpc 120)

# The router as the endpoint picker (router/gateway/): pdrouter with epp.enabled, real pdsim workers, the
# same Python gateway (integration/test_gateway.py).
set(pdr_gateway_driver ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_gateway.py)
pdr_driver_scenarios(pdr_gateway_names ${pdr_gateway_driver})
foreach(s ${pdr_gateway_names})
  add_test(NAME gateway_epp_${s}
           COMMAND sh -c "/usr/bin/python3 -c 'import grpc, grpc_tools' 2>/dev/null || { echo 'skipped: /usr/bin/python3 has no grpc or grpc_tools (python3-grpcio, python3-grpc-tools)'; exit 77; }; exec /usr/bin/python3 \"$0\" ${s}"
                   ${pdr_gateway_driver})
  set_tests_properties(gateway_epp_${s} PROPERTIES LABELS integration TIMEOUT 90 SKIP_RETURN_CODE 77
                       ENVIRONMENT "PDR_BUILD=${CMAKE_BINARY_DIR}")
endforeach()

# bench/epp_bench: a closed-loop ext_proc load generator (libnghttp2's client, the messages' protobuf-c
# code); bench/epp_pick.sh runs it against pdrouter --epp with pdsim workers. The smoke test plays 200
# exchanges at concurrency 8 and fails on any wrong answer, so the bench cannot rot.
add_executable(epp_bench ${PROJECT_SOURCE_DIR}/bench/epp_bench.c)
target_link_libraries(epp_bench PRIVATE pdr_epp_pb pdr_common PkgConfig::NGHTTP2)
add_test(NAME epp_bench_smoke COMMAND sh ${PROJECT_SOURCE_DIR}/bench/epp_pick.sh smoke)
set_tests_properties(epp_bench_smoke PROPERTIES LABELS integration TIMEOUT 90
                     ENVIRONMENT "BUILD=${CMAKE_BINARY_DIR}")
