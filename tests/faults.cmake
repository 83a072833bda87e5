# The fault suite (see faults/ and docs/reliability.md, "Faults"): every worker failure mode and network
# faults between workers, each case with a bounded time, the status docs/operations.md names, and exactly
# one answer and one access-log line per request. The network cases need root (namespaces, veth, tc) and
# exit 77 (skipped) without it. Label `faults`: `ctest -L faults`.
foreach(s prefill_killed prefill_dead_all prefill_frozen prefill_slow prefill_5xx prefill_reset decode_killed
          decode_frozen kv_stalled)
  add_test(NAME faults_worker_${s} COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/faults/test_faults_workers.py ${s})
  set_tests_properties(faults_worker_${s} PROPERTIES TIMEOUT 60 LABELS faults ENVIRONMENT "PDR_BUILD=${CMAKE_BINARY_DIR}")
endforeach()
foreach(s kv_loss kv_latency kv_partition kv_prefill_killed kv_decode_killed router_partition)
  add_test(NAME faults_net_${s} COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/faults/test_faults_net.py ${s})
  set_tests_properties(faults_net_${s} PROPERTIES TIMEOUT 90 LABELS faults SKIP_RETURN_CODE 77
                       ENVIRONMENT "PDR_BUILD=${CMAKE_BINARY_DIR}")
endforeach()
