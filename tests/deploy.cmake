# Offline checks of deploy/ (Kubernetes manifests, Dockerfile, systemd unit): tests/deploy/test_deploy.py;
# deploy_rules runs its Kubernetes 1.30 rules (k8s_rules.py) on tests/deploy/bad/ and tests/deploy/good/.
# Debian's python3 is used explicitly (python3-yaml, python3-kubernetes live in its dist-packages);
# the tests exit 77 (skipped) when it, kubectl or the python modules are missing. The parts are those
# `test_deploy.py --list` prints.
pdr_driver_scenarios(deploy_parts ${CMAKE_CURRENT_SOURCE_DIR}/deploy/test_deploy.py)
foreach(part ${deploy_parts})
  add_test(NAME deploy_${part}
           COMMAND sh -c "[ -x /usr/bin/python3 ] || exit 77; exec /usr/bin/python3 \"$0\" ${part}"
                   ${CMAKE_CURRENT_SOURCE_DIR}/deploy/test_deploy.py)
  set_tests_properties(deploy_${part} PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77 LABELS integration
                       ENVIRONMENT "PDR_BUILD=${CMAKE_BINARY_DIR}")
endforeach()
