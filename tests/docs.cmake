# docs/openapi.yaml: valid OpenAPI (openapi-spec-validator) and listing exactly the routes the router
# serves (integration/test_openapi.py, against a running router). The validator is the Python module
# openapi_spec_validator: Debian's python3-openapi-spec-validator (in /usr/bin/python3's dist-packages;
# scripts/install-deps.sh --test installs it where the distribution has it), else the default python3's copy.
# With neither the test exits 77 (skipped).
add_test(NAME docs_openapi
         COMMAND sh -c "for py in /usr/bin/python3 \"$0\"; do \"$py\" -c 'import openapi_spec_validator, yaml' 2>/dev/null && exec \"$py\" \"$1\"; done; echo 'skipped: no python3 with the openapi_spec_validator and yaml modules'; exit 77"
                 ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_openapi.py)
set_tests_properties(docs_openapi PROPERTIES TIMEOUT 60 LABELS meta SKIP_RETURN_CODE 77 ENVIRONMENT "PDR_BUILD=${CMAKE_BINARY_DIR}")


# docs/metrics.md against the router's /metrics (integration/test_metrics_doc.py): the same families, types
# and label names.
pdr_scenario_tests(docs_metrics_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_metrics_doc.py LABEL meta TIMEOUT 60)

# The router's layering: every file of router/ in a ranked folder, a folder using only the folders below it
# (calls and includes), no cycle between files (layering/check_layering.py holds the ranks;
# docs/internals/principles.md explains them). The build runs the same check (router/CMakeLists.txt). The
# fixture tree breaks each rule and must be refused, naming each: a file in no folder, a call and an include
# against the ranks, a cycle of two files of one folder by calls (c.c, d.c), and one by includes where an
# internal header includes the public header of the file that includes it (e.c, e_internal.h).
add_test(NAME router_layering COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/layering/check_layering.py
                                      ${PROJECT_SOURCE_DIR})
add_test(NAME router_layering_rejects COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/layering/check_layering.py
                                              ${CMAKE_CURRENT_SOURCE_DIR}/layering/fixtures/bad)
set_tests_properties(router_layering router_layering_rejects PROPERTIES TIMEOUT 60 LABELS meta)
set_tests_properties(router_layering_rejects PROPERTIES PASS_REGULAR_EXPRESSION
                     "router/stray.c is in no ranked folder.*router/util/a.c uses router/upstream/b.c \\(pdr_b\\(\\)\\): against the ranks.*router/util/a.c uses router/upstream/b.h \\(#include \"b.h\"\\).*cycle: router/workers/c.c -> router/workers/d.c -> router/workers/c.c.*cycle: router/workers/e.c -> router/workers/e_internal.h -> router/workers/e.c")

# The repository stands alone: no tracked file points outside it or to an issue number.
add_test(NAME repo_stands_alone COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/standalone/check_standalone.py
                                        ${PROJECT_SOURCE_DIR})
set_tests_properties(repo_stands_alone PROPERTIES TIMEOUT 60 LABELS meta)
