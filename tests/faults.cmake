# The fault suite (see faults/ and docs/reliability.md, "Faults"): every worker failure mode and network
# faults between workers, each case with a bounded time, the status docs/operations.md names, and exactly
# one answer and one access-log line per request. The network cases need root (namespaces, veth, tc) and
# exit 77 (skipped) without it. Label `faults`: `ctest -L faults`.
pdr_scenario_tests(faults_worker_ ${CMAKE_CURRENT_SOURCE_DIR}/faults/test_faults_workers.py LABEL faults TIMEOUT 60)
pdr_scenario_tests(faults_net_ ${CMAKE_CURRENT_SOURCE_DIR}/faults/test_faults_net.py LABEL faults TIMEOUT 90 SKIP77)
