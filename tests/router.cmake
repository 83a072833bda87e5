# Router unit tests (pure modules, no sockets).
foreach(t rewrite pool events sse_count util reqguard fwdheaders disagg otlp links breaker retry affinity)
  add_executable(test_${t} unit/test_${t}.c)
  target_link_libraries(test_${t} PRIVATE pdr_router)
  add_test(NAME router_unit_${t} COMMAND test_${t})
  set_tests_properties(router_unit_${t} PROPERTIES TIMEOUT 60 LABELS unit)
endforeach()
add_executable(test_token_ids unit/test_token_ids.c)
target_link_libraries(test_token_ids PRIVATE pdr_router)
add_test(NAME router_unit_token_ids COMMAND test_token_ids ${PROJECT_SOURCE_DIR}/tests/fixtures/tokenizer/llama3.tokenizer.json)
set_tests_properties(router_unit_token_ids PROPERTIES TIMEOUT 60 LABELS unit)

# The router's state shared between loops (admission, the worker pool) driven from several threads at once;
# the ThreadSanitizer tree runs it too (the Makefile's TSAN_TARGETS).
add_executable(test_shared_state unit/test_shared_state.c)
target_link_libraries(test_shared_state PRIVATE pdr_router)
add_test(NAME router_unit_shared_state COMMAND test_shared_state)
set_tests_properties(router_unit_shared_state PROPERTIES TIMEOUT 60 LABELS unit)

# Router integration scenarios: real pdrouter and pdsim processes on loopback (see test_router.py).
pdr_scenario_tests(router_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_router.py LABEL integration TIMEOUT 120)

# Attacks and faults (see test_hardening.py): stalled readers over HTTP/1 and HTTP/2, smuggling, stream
# floods, a full fd table, frozen and dead workers; slow_steady_reader_h2 drives HTTP/2 flow control with
# python3-h2 (H2 below).
pdr_scenario_tests(router_hardening_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_hardening.py LABEL integration TIMEOUT 120 SKIP77
                   H2 slow_steady_reader_h2)

# Admin API scenarios (see test_admin.py): auth, worker list, drain under load, drain timeout,
# worker-initiated drain (health 410), readiness while draining.
pdr_scenario_tests(router_admin_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_admin.py LABEL integration TIMEOUT 120 SKIP77)

# Fuzz target of the admin API's parsers (drain body, worker id, add-worker body).
add_executable(fuzz_admin fuzz/fuzz_admin.c)
target_link_libraries(fuzz_admin PRIVATE pdr_router)
pdr_fuzz_corpus_test(router_admin_fuzz_corpus fuzz_admin admin 60)

# Discovery scenarios (see test_discovery.py): Kubernetes against a replaying API server, DNS against
# dnsmasq (skipped with 77 when dnsmasq is missing); pools_kubernetes: a Kubernetes source per pool.
pdr_scenario_tests(router_discovery_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_discovery.py LABEL integration TIMEOUT 120 SKIP77)

# The upstream HTTP/1.1 client against a scripted raw-socket server (keep-alive reuse, chunked,
# until-close bodies, idle closes, resets, garbage, deadlines, pause/resume, cancel).
add_executable(test_upstream integration/test_upstream.c)
target_link_libraries(test_upstream PRIVATE pdr_upstream pdr_common)
add_test(NAME router_upstream COMMAND test_upstream ${Python3_EXECUTABLE}
                                      ${CMAKE_CURRENT_SOURCE_DIR}/integration/h1_script_server.py)
set_tests_properties(router_upstream PROPERTIES TIMEOUT 120 LABELS integration)

# pd.relay (see test_relay.py): the first token without waiting for the prefill's answer, the option to
# wait, late prefill failures, a decode failure cancelling the prefill, the lingering prefill leg.
pdr_scenario_tests(router_relay_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_relay.py LABEL integration TIMEOUT 120)

# The router's KV-transfer deadline (see test_kv_deadline.py): retried on another pair, a 504, an SSE error
# event once the stream has begun, the deadline scaled by prompt length, the link state, leg cancellation.
pdr_scenario_tests(router_kv_deadline_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_kv_deadline.py LABEL integration TIMEOUT 120)

# protocol vllm (see test_vllm.py): the sequential prefill-then-decode path against pdsim in vLLM mode,
# prefill failures, dead prefills, the release of KV a client left behind, and KV leases.
pdr_scenario_tests(router_vllm_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_vllm.py LABEL integration TIMEOUT 120)
# Sidecar mode (see test_sidecar.py): the prefill a request header names, among the pool's prefills only
# (403 otherwise; DNS-discovered ones too), 400 for a malformed header, 503 for a down one, the policy without
# it or for a draining one.
pdr_scenario_tests(router_sidecar_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_sidecar.py LABEL integration TIMEOUT 120 SKIP77)
# Engine aborts (see test_abort.py): /abort_request to an sglang worker still running a leg the router let go
# (client gone, the other leg failed), not sent when disabled, a hung one delays nothing; vLLM's legs closed.
pdr_scenario_tests(router_abort_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_abort.py LABEL integration TIMEOUT 120)

# Fuzz target of the vLLM body rewrite and the prefill answer's kv_transfer_params (jansson checks
# every body built).
add_executable(fuzz_vllm fuzz/fuzz_vllm.c)
target_link_libraries(fuzz_vllm PRIVATE pdr_router)
pdr_fuzz_corpus_test(router_vllm_fuzz_corpus fuzz_vllm vllm 60)

# Fuzz target of the sglang leg bodies (bootstrap fields, ranks, tickets, the plain body), the prompt's
# token ids and its disaggregation measure (jansson checks every body built).
add_executable(fuzz_rewrite fuzz/fuzz_rewrite.c)
target_link_libraries(fuzz_rewrite PRIVATE pdr_router)
target_include_directories(fuzz_rewrite PRIVATE ${PROJECT_SOURCE_DIR}/routing)
pdr_fuzz_corpus_test(router_rewrite_fuzz_corpus fuzz_rewrite rewrite 120)

# sglang router compatibility (see test_sglang_compat.py): the metrics-only listener, the worker startup
# deadline, CORS, log levels and --log-dir, --admin-token-file, the sglang router's extra routes, refused flags.
pdr_scenario_tests(router_sglang_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_sglang_compat.py LABEL integration TIMEOUT 120)

# Model pools (see test_pools.py): routing by model across two pools, unknown models, /v1/models, the admin
# API, metrics, access log and readiness per pool; reloads that add, change and remove pools.
pdr_scenario_tests(router_pools_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_pools.py LABEL integration TIMEOUT 120 SKIP77)

# Client headers end to end (see test_headers.py): forwarding to both legs, the fields Connection names
# (every protocol), connection-specific fields over HTTP/2, trace context, request ids, the worker API key,
# 431 for heads past the limits over HTTP/1 and HTTP/2.
pdr_scenario_tests(router_headers_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_headers.py LABEL integration TIMEOUT 120 SKIP77)

# Each hop-by-hop and router-set header rule on its own, with no Connection header naming them (see
# test_hop_headers.py).
pdr_scenario_tests(router_headers_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_hop_headers.py LABEL integration TIMEOUT 120)

# Per-phase timing and trace export (see test_tracing.py): spans at an OTLP/HTTP collector chained to the
# client's traceparent and to the ids the workers received, access-log phases, histograms, the file
# exporter and sampling, a collector that hangs or is gone, protocol vllm, a request that skips the prefill,
# config errors.
pdr_scenario_tests(router_tracing_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_tracing.py LABEL integration TIMEOUT 120 SKIP77)

# Fuzz target of the forwarded-header parsers (traceparent, Connection lists, name classes) and the raw
# head limits.
add_executable(fuzz_fwdheaders fuzz/fuzz_fwdheaders.c)
target_link_libraries(fuzz_fwdheaders PRIVATE pdr_router)
pdr_fuzz_corpus_test(fwdheaders_fuzz_corpus fuzz_fwdheaders fwd 60)

# The policies at the router (see test_cache_aware.py): sglang's cache_aware keeping prompt families on one
# prefill each (against round_robin), power_of_two's spread and its choice of the less loaded decode (and
# least_load's, the same rule), round_robin's strict alternation, random's spread;
# replicas that agree through consistent-hash seeding, also when they list the workers in different orders;
# cache_aware settings per pool and role.
pdr_scenario_tests(router_policy_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_cache_aware.py LABEL integration TIMEOUT 120)
# Session affinity (see test_affinity.py): a conversation on one pair, sessions spread, moved while its worker
# is unhealthy and back after, soft mode's fallback and hard mode's none, two replicas choosing alike.
pdr_scenario_tests(router_affinity_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_affinity.py LABEL integration TIMEOUT 120)

# Conditional disaggregation (see test_disagg.py): short prompts and saturated prefills skip the prefill
# (vllm: the decode alone; sglang: a regular worker), decisions in the metrics and the access log.
pdr_scenario_tests(router_disagg_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_disagg.py LABEL integration TIMEOUT 120)

# Data-parallel attention ranks (see test_dp.py): one routing target per rank, the rank on each leg as the
# engine expects (sglang body field and room, vLLM header), reloads.
pdr_scenario_tests(router_dp_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_dp.py LABEL integration TIMEOUT 120)

# precise_prefix (see test_kv_events.py): pdsim prefills publish KV events (vLLM's format) and the router
# routes by them; gaps, publisher restarts and malformed messages are counted and fall back to the tree.
# A misbehaving publisher (integration/kvflood.c): oversized messages and event floods stay bounded.
add_executable(kvflood integration/kvflood.c)
target_link_libraries(kvflood PRIVATE PkgConfig::ZMQ PkgConfig::MSGPACK)
pdr_scenario_tests(router_kv_events_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_kv_events.py LABEL integration TIMEOUT 120)
# Snapshots of the precise prefix index (see test_kv_snapshot.py): a restarted router and a replica warmed
# from a sibling's admin API route their first request by the index; a corrupt snapshot starts cold.
pdr_scenario_tests(router_kv_snapshot_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_kv_snapshot.py LABEL integration TIMEOUT 120)
# The HMAC-SHA256 key ring shared by the router, the shim and pdsim (common/keyring.c).
add_executable(test_keyring unit/test_keyring.c)
target_link_libraries(test_keyring PRIVATE pdr_keyring)
add_test(NAME keyring_unit COMMAND test_keyring)
set_tests_properties(keyring_unit PROPERTIES TIMEOUT 60 LABELS unit)

# Shim events and load (see test_shim_events.py): the signed channel's refusals, per-worker keys, load in
# status and metrics, worker incarnations, decode admission by reported free KV.
pdr_scenario_tests(shim_events_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_shim_events.py LABEL integration TIMEOUT 120 SKIP77)
# Room events acting on the request in flight (see test_kv_shim.py): the KV phase from a shim's done, a
# shim's failure retried on another pair, a restarted worker's links forgotten.
pdr_scenario_tests(kv_shim_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_kv_shim.py LABEL integration TIMEOUT 120 SKIP77)
# PD answers that are not the workers' to pass through (see test_pd_answers.py): a refused ticket, a
# prefill that dies after the decode's failure.
pdr_scenario_tests(pd_answers_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_pd_answers.py LABEL integration TIMEOUT 120)
add_executable(test_shim_events unit/test_shim_events.c)
target_include_directories(test_shim_events PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/unit)
target_link_libraries(test_shim_events PRIVATE pdr_router pdshim)
add_test(NAME shim_events_unit COMMAND test_shim_events)
set_tests_properties(shim_events_unit PROPERTIES TIMEOUT 120 LABELS unit)
if(PDR_SANITIZE)
  # python3 loads the instrumented libpdshim.so: the ASan runtime goes first (as for test_shim_python).
  execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libasan.so
                  OUTPUT_VARIABLE PDR_SE_LIBASAN OUTPUT_STRIP_TRAILING_WHITESPACE)
  set_tests_properties(shim_events_python PROPERTIES ENVIRONMENT
                       "PDR_BUILD=${CMAKE_BINARY_DIR};LD_PRELOAD=${PDR_SE_LIBASAN};ASAN_OPTIONS=detect_leaks=0")
endif()

# Fuzz target of the shim event batches (signature header, JSON lines).
add_executable(fuzz_shim fuzz/fuzz_shim.c)
target_link_libraries(fuzz_shim PRIVATE pdr_router)
pdr_fuzz_corpus_test(router_shim_fuzz_corpus fuzz_shim shim 120)

# The load read from the engines (see test_engine_load.py): sglang's /get_load and vLLM's /metrics, served by
# pdsim from its state, steer least_load and power_of_two away from a worker loaded behind the router's back;
# a failing or garbage load read leaves the worker unknown (the router's own count weighs it), counted and
# logged once; each data-parallel rank weighed by its own entry; a decode whose engine reports its KV over
# load.kv_usage_max_percent is not admitted to.
pdr_scenario_tests(router_engine_load_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_engine_load.py LABEL integration TIMEOUT 120)
# Stream migration (see test_migration.py): a decode that breaks a stream hands it to a new pair; the client's
# text equals an undisturbed run's
pdr_scenario_tests(router_migration_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_migration.py LABEL integration
                   TIMEOUT 120)
# bench/decode_kills.py in its smallest form (8 clients, 4 s, one decode killed mid-stream, both rows, about
# 15 s): with migration every stream ends whole with the undisturbed run's text; without, the check sees the
# broken ones.
add_test(NAME router_migration_bench_decode_kills
         COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/bench/decode_kills.py --quick)
set_tests_properties(router_migration_bench_decode_kills PROPERTIES TIMEOUT 120 LABELS integration
                     ENVIRONMENT "PDR_BUILD=${CMAKE_BINARY_DIR}")
