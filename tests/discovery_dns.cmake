# Tests of router/discovery/discovery_dns.c: its pure helpers (sort, diff, format, answer parsing), then the whole
# source against a real dnsmasq on a loopback port, over IPv4 and IPv6. Without dnsmasq (Debian:
# dnsmasq-base, see scripts/install-deps.sh --test) or an IPv6 loopback the latter exit 77: skipped.
add_executable(test_dns_set unit/test_dns_set.c)
target_link_libraries(test_dns_set PRIVATE pdr_router Threads::Threads)
add_test(NAME discovery_dns_unit COMMAND test_dns_set)
set_tests_properties(discovery_dns_unit PROPERTIES TIMEOUT 60 LABELS unit)

add_executable(test_dns_discovery integration/test_dns_discovery.c)
target_link_libraries(test_dns_discovery PRIVATE pdr_router Threads::Threads)
foreach(v ipv4 ipv6)
  add_test(NAME discovery_dns_${v} COMMAND test_dns_discovery ${v})
  set_tests_properties(discovery_dns_${v} PROPERTIES TIMEOUT 60 SKIP_RETURN_CODE 77 LABELS integration)
endforeach()
