# What the router says when something is wrong, and readiness (see test_messages.py): a DNS failure named
# as such, /readiness only after a passed health check.
foreach(s dns_failure readiness_first_check readiness_never_passes)
  add_test(NAME router_messages_${s} COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_messages.py ${s})
  set_tests_properties(router_messages_${s} PROPERTIES TIMEOUT 120 ENVIRONMENT "PDR_BUILD=${CMAKE_BINARY_DIR}")
endforeach()

# Claims of README.md and docs/operations.md held against the binaries (see test_docs_claims.py).
foreach(s readme_sglang_command readme_refused body_too_large quick_start)
  add_test(NAME docs_claims_${s} COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_docs_claims.py ${s})
  set_tests_properties(docs_claims_${s} PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77 ENVIRONMENT "PDR_BUILD=${CMAKE_BINARY_DIR}")
endforeach()
