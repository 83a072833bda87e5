# TLS (see test_tls.py): the listener over TLS 1.2/1.3 with ALPN h2 and http/1.1, plain clients and cut
# handshakes on the TLS port, certificate reload on SIGHUP, https:// workers (CA, wrong CA, client
# certificate, a worker that cannot resume sessions), config errors naming the file. Included by tests/CMakeLists.txt.
pdr_scenario_tests(router_tls_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_tls.py LABEL integration TIMEOUT 120 SKIP77)
