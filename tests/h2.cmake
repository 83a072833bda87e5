# HTTP/2 conformance of every listener (see test_h2_conformance.py): connection errors, stream errors,
# stream states, flow control, HPACK and frame sizes as raw frames, through prior knowledge, Upgrade: h2c,
# TLS with ALPN h2 and the admin port. Included by tests/CMakeLists.txt.
pdr_scenario_tests(router_h2_conformance_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_h2_conformance.py LABEL integration TIMEOUT 180 SKIP77)

# Fuzz target of whole client connections into a real router context (see fuzz/fuzz_conn.c); its seeds are
# written by fuzz/make_conn_seeds.py from the conformance cases above and a few HTTP/1 requests.
add_executable(fuzz_conn fuzz/fuzz_conn.c)
target_link_libraries(fuzz_conn PRIVATE pdr_router)
pdr_fuzz_corpus_test(router_conn_fuzz_corpus fuzz_conn conn 300)
