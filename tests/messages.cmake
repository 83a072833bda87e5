# What the router says when something is wrong, and readiness (see test_messages.py): a DNS failure named
# as such, /readiness only after a passed health check.
pdr_scenario_tests(router_messages_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_messages.py LABEL integration TIMEOUT 120)

# Claims of README.md and docs/operations.md held against the binaries (see test_docs_claims.py).
pdr_scenario_tests(docs_claims_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_docs_claims.py LABEL integration TIMEOUT 120 SKIP77)
