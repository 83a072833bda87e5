# TLS (see test_tls.py): the listener over TLS 1.2/1.3 with ALPN h2 and http/1.1, plain clients and cut
# handshakes on the TLS port, certificate reload on SIGHUP, https:// workers (CA, wrong CA, client
# certificate, a worker that cannot resume sessions), config errors naming the file. Included by tests/CMakeLists.txt.
foreach(s front guards client_certs min_version reload reload_idle descriptors h2_body_budget workers workers_resumption
          config_errors)
  add_test(NAME router_tls_${s} COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_tls.py ${s})
  set_tests_properties(router_tls_${s} PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77 ENVIRONMENT "PDR_BUILD=${CMAKE_BINARY_DIR}")
endforeach()
