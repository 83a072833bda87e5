/*
 * The configuration schema's table (schema.h) and the helpers that read it. Each scalar key of pdr_config_t
 * is one row here and nowhere else: its default, its range, its flag, its reload class and its one line of
 * documentation. docs/config.md is checked against this table (tests/unit/config_docs_schema.py). Const
 * data and pure functions, any thread.
 */
#include <stdlib.h>
#include <string.h>
#include "err.h"
#include "ticket.h"
#include "config_internal.h"
#include "defaults.h"
#include "schema.h"

/* Enumerations are stored through an int. */
_Static_assert(sizeof(pdr_protocol_t) == sizeof(int) && sizeof(pdr_policy_kind_t) == sizeof(int) &&
                   sizeof(pdr_relay_t) == sizeof(int),
               "enumerations stored as int");

#define AT(m) .off = offsetof(pdr_config_t, m), .size = sizeof(((pdr_config_t *)0)->m)
#define INT(p, m, d, lo, hi) .path = p, .type = PDR_CT_INT, AT(m), .def_i = (d), .min = (lo), .max = (hi)
#define I64(p, m, d, lo, hi) .path = p, .type = PDR_CT_INT64, AT(m), .def_i = (d), .min = (lo), .max = (hi)
#define DBL(p, m, d, lo, hi) .path = p, .type = PDR_CT_DOUBLE, AT(m), .def_d = (d), .min = (lo), .max = (hi)
#define BOOL(p, m, d) .path = p, .type = PDR_CT_BOOL, AT(m), .def_i = (d), .max = 1
#define STR(p, t, m, d) .path = p, .type = (t), AT(m), .def_s = (d)
#define ENUM(p, t, m, d) .path = p, .type = (t), AT(m), .def_i = (d)
/* A discovery role's key; the decode role has no bootstrap port (it is -1, not a key). */
#define DNS(r, m) AT(discovery.dns.role[r].m)
#define K8S(r, m) AT(discovery.kubernetes.role[r].m)
#define RESTART .reload = PDR_RELOAD_RESTART

const pdr_conf_key_t pdr_conf_keys[] = {
    /* listen: the data-plane listener. */
    {STR("listen.host", PDR_CT_STR, listen_host, PDR_DEF_LISTEN_HOST), RESTART, .restart_name = "listen",
     .flag = "--host", .doc = "address the data-plane listener binds"},
    {INT("listen.port", listen_port, PDR_DEF_LISTEN_PORT, 1, 65535), RESTART, .restart_name = "listen",
     .flag = "--port", .doc = "port of the data-plane listener"},
    {STR("listen.tls.cert_file", PDR_CT_STR_OPT, listen_tls.cert_file, NULL), .flag = "--tls-cert-path",
     .doc = "PEM certificate chain: the data-plane port speaks TLS"},
    {STR("listen.tls.key_file", PDR_CT_STR_OPT, listen_tls.key_file, NULL), .flag = "--tls-key-path",
     .doc = "the certificate's PEM private key"},
    {ENUM("listen.tls.min_version", PDR_CT_TLS_VER, listen_tls.min_version, PDR_TLS_1_2),
     .doc = "the lowest TLS version accepted"},
    {STR("listen.tls.ciphers", PDR_CT_STR_OPT, listen_tls.ciphers, NULL),
     .doc = "OpenSSL cipher list for TLS 1.2"},
    {STR("listen.tls.client_ca_file", PDR_CT_STR_OPT, listen_tls.client_ca_file, NULL),
     .doc = "CA file clients' certificates must chain to (mutual TLS)"},
    /* workers.tls: the router as a TLS client of https:// workers. */
    {STR("workers.tls.ca_file", PDR_CT_STR_OPT, workers_tls.ca_file, NULL), .flag = "--ca-cert-paths",
     .doc = "CA certificates the workers' certificates must chain to"},
    {STR("workers.tls.cert_file", PDR_CT_STR_OPT, workers_tls.cert_file, NULL), .flag = "--client-cert-path",
     .doc = "the router's client certificate"},
    {STR("workers.tls.key_file", PDR_CT_STR_OPT, workers_tls.key_file, NULL), .flag = "--client-key-path",
     .doc = "the client certificate's private key"},
    {STR("workers.tls.server_name", PDR_CT_STR_OPT, workers_tls.server_name, NULL),
     .doc = "name sent in SNI and checked in the workers' certificates"},
    {BOOL("workers.tls.verify", workers_tls.verify, 1), .doc = "check the workers' certificates"},
    /* admin and metrics listeners. */
    {STR("admin.host", PDR_CT_STR, admin_host, PDR_DEF_ADMIN_HOST), RESTART,
     .restart_name = "admin.host/admin.port", .doc = "address of the admin listener"},
    {INT("admin.port", admin_port, PDR_DEF_ADMIN_PORT, 0, 65535), RESTART,
     .restart_name = "admin.host/admin.port", .flag = "--admin-port",
     .doc = "port of the admin listener; 0 disables it"},
    {STR("admin.token_file", PDR_CT_STR_OPT, admin_token_file, NULL), .reload = PDR_RELOAD_RESTART_UNSET,
     .restart_name = "admin.token_file (removing it)", .flag = "--admin-token-file",
     .doc = "file holding the admin API's bearer token"},
    {STR("metrics.host", PDR_CT_STR, metrics_host, PDR_DEF_METRICS_HOST), RESTART,
     .restart_name = "metrics.host/metrics.port", .flag = "--prometheus-host",
     .doc = "address of the metrics-only listener"},
    {INT("metrics.port", metrics_port, PDR_DEF_METRICS_PORT, 0, 65535), RESTART,
     .restart_name = "metrics.host/metrics.port", .flags = PDR_KEY_OWN_FLAG, .flag = "--prometheus-port",
     .doc = "port of the metrics-only listener; 0: none"},
    /* The one-pool form's protocol and policies. */
    {ENUM("protocol", PDR_CT_PROTOCOL, protocol, PDR_PROTO_SGLANG), .max = PDR_PROTO_PDSHIM, RESTART,
     .flags = PDR_KEY_OWN_FLAG, .flag = "--protocol",
     .doc = "how the pairing is handed to the workers: sglang, vllm or pdshim"},
    {ENUM("policy.prefill", PDR_CT_POLICY, policy_prefill, PDR_POLICY_ROUND_ROBIN),
     .max = PDR_POLICY_COUNT - 1, .flags = PDR_KEY_OWN_FLAG, .flag = "--prefill-policy",
     .doc = "policy that picks the prefill worker"},
    {ENUM("policy.decode", PDR_CT_POLICY, policy_decode, PDR_POLICY_LEAST_LOAD), .max = PDR_POLICY_COUNT - 1,
     .flags = PDR_KEY_OWN_FLAG, .flag = "--decode-policy", .doc = "policy that picks the decode worker"},
    /* health: active checks. */
    {STR("health.path", PDR_CT_PATH, health.path, PDR_DEF_HEALTH_PATH), .flags = PDR_KEY_OWN_FLAG,
     .flag = "--health-check-endpoint", .doc = "path of the health check"},
    {INT("health.interval_ms", health.interval_ms, PDR_DEF_HEALTH_INTERVAL_MS, 1, PDR_MAX_MS),
     .flag = "--health-interval-ms", .flag_sec = "--health-check-interval-secs",
     .doc = "health check period"},
    {INT("health.timeout_ms", health.timeout_ms, PDR_DEF_HEALTH_TIMEOUT_MS, 1, PDR_MAX_MS),
     .flag_sec = "--health-check-timeout-secs", .doc = "deadline of one health check"},
    {INT("health.rise", health.rise, PDR_DEF_HEALTH_RISE, 1, PDR_MAX_RISE_FALL),
     .flag = "--health-success-threshold", .doc = "consecutive successes that mark a worker healthy"},
    {INT("health.fall", health.fall, PDR_DEF_HEALTH_FALL, 1, PDR_MAX_RISE_FALL),
     .flag = "--health-failure-threshold", .doc = "consecutive failures that mark a worker unhealthy"},
    {INT("health.drain_status", health.drain_status, PDR_DEF_HEALTH_DRAIN_STATUS, 0, 599),
     .doc = "a check answered with this status (3xx..5xx) drains the worker; 0: off"},
    /* timeouts. */
    {INT("timeouts.connect_ms", timeouts.connect_ms, PDR_DEF_CONNECT_MS, 1, PDR_MAX_MS),
     .doc = "TCP connect to a worker"},
    {INT("timeouts.first_byte_ms", timeouts.first_byte_ms, PDR_DEF_FIRST_BYTE_MS, 1, PDR_MAX_MS),
     .flag = "--first-byte-ms", .doc = "from sending the pair the request until the client's first byte"},
    {INT("timeouts.kv_transfer_ms", timeouts.kv_transfer_ms, PDR_DEF_KV_TRANSFER_MS, 1, PDR_MAX_MS),
     .flag = "--kv-transfer-ms", .doc = "the KV-cache transfer deadline"},
    {INT("timeouts.stream_idle_ms", timeouts.stream_idle_ms, PDR_DEF_STREAM_IDLE_MS, 1, PDR_MAX_MS),
     .doc = "longest silence inside a stream"},
    {INT("timeouts.kv_transfer_ms_per_1k_tokens", timeouts.kv_transfer_ms_per_1k_tokens, 0, 0, PDR_MAX_MS),
     .doc = "added to kv_transfer_ms per 1024 prompt tokens"},
    {INT("timeouts.client_header_ms", timeouts.client_header_ms, PDR_DEF_CLIENT_HEADER_MS, 1, PDR_MAX_MS),
     .doc = "a request head must arrive within it (408)"},
    {INT("timeouts.client_body_ms", timeouts.client_body_ms, PDR_DEF_CLIENT_BODY_MS, 1, PDR_MAX_MS),
     .doc = "longest pause inside a request body (408)"},
    {INT("timeouts.keepalive_idle_ms", timeouts.keepalive_idle_ms, PDR_DEF_KEEPALIVE_IDLE_MS, 1, PDR_MAX_MS),
     .doc = "an idle keep-alive connection is closed after it"},
    {INT("timeouts.lingering_ms", timeouts.lingering_ms, PDR_DEF_LINGERING_MS, 0, PDR_MAX_MS),
     .doc = "after an early answer, the rest of the request is read and dropped so long"},
    {INT("timeouts.lingering_idle_ms", timeouts.lingering_idle_ms, PDR_DEF_LINGERING_IDLE_MS, 1, PDR_MAX_MS),
     .doc = "... or until the client pauses so long"},
    /* limits. */
    {I64("limits.max_body_bytes", limits.max_body_bytes, PDR_DEF_MAX_BODY_BYTES, PDR_MIN_BODY_BYTES,
         PDR_MAX_BODY_BYTES),
     .reload = PDR_RELOAD_RESTART_RAISE, .restart_name = "limits.max_body_bytes (raising it)",
     .flags = PDR_KEY_OWN_FLAG, .flag = "--max-payload-size", .doc = "largest request body (413)"},
    {INT("limits.max_inflight", limits.max_inflight, PDR_DEF_MAX_INFLIGHT, 1, PDR_MAX_INFLIGHT),
     .flags = PDR_KEY_OWN_FLAG, .flag = "--max-concurrent-requests",
     .doc = "PD requests in flight in the whole router"},
    {INT("limits.max_connections_per_worker", limits.max_connections_per_worker, 0, 0,
         PDR_MAX_CONNS_PER_WORKER),
     .doc = "connections from the router to each worker; 0: no limit"},
    {INT("limits.h2_max_resets", limits.h2_max_resets, PDR_DEF_H2_MAX_RESETS, 0, PDR_MAX_H2_RESETS),
     .doc = "HTTP/2 streams a client may abandon per connection in 10 s; 0: no limit"},
    {I64("limits.max_merge_bytes", limits.max_merge_bytes, PDR_DEF_MAX_MERGE_BYTES, PDR_MIN_MERGE_BYTES,
         PDR_MAX_MERGE_BYTES),
     .doc =
         "an answer, or a stream's event, held whole for the logprob merge, before and after it (502 above)"},
    {INT("limits.max_header_bytes", limits.max_header_bytes, PDR_DEF_MAX_HEADER_BYTES,
         PDR_MIN_MAX_HEADER_BYTES, PDR_MAX_MAX_HEADER_BYTES),
     .doc = "bytes of the request's header fields (431 above)"},
    {INT("limits.max_headers", limits.max_headers, PDR_DEF_MAX_HEADERS, 1, PDR_MAX_MAX_HEADERS),
     .doc = "header fields per request (431 above)"},
    {INT("limits.max_batch_items", limits.max_batch_items, PDR_DEF_MAX_BATCH_ITEMS, 1,
         PDR_MAX_MAX_BATCH_ITEMS),
     .doc = "items of one batched PD request (400 above)"},
    {INT("limits.max_client_connections", limits.max_client_connections, 0, 0, PDR_MAX_CLIENT_CONNECTIONS),
     .doc = "data-port connections open at once; 0: no limit"},
    {INT("limits.max_idle_client_connections", limits.max_idle_client_connections, 0, 0,
         PDR_MAX_CLIENT_CONNECTIONS),
     .doc = "idle keep-alive connections kept; 0: no limit"},
    {I64("limits.max_lingering_bytes", limits.max_lingering_bytes, PDR_DEF_MAX_LINGERING_BYTES, 0,
         PDR_MAX_BODY_BYTES),
     .doc = "bytes dropped after an early answer before the connection is cut"},
    {I64("limits.h2_max_connection_body_bytes", limits.h2_max_connection_body_bytes,
         PDR_DEF_H2_MAX_CONNECTION_BODY_BYTES, 0, PDR_MAX_BODY_BYTES),
     .doc = "HTTP/2 request bodies one connection holds; 0: no cap"},
    {I64("limits.max_body_memory_bytes", limits.max_body_memory_bytes, PDR_DEF_MAX_BODY_MEMORY_BYTES, 0,
         PDR_MAX_BODY_BYTES),
     .doc = "HTTP/2 request bodies all connections hold; 0: no cap"},
    {INT("limits.h2_max_concurrent_streams", limits.h2_max_concurrent_streams,
         PDR_DEF_H2_MAX_CONCURRENT_STREAMS, 1, PDR_MAX_H2_MAX_CONCURRENT_STREAMS),
     .doc = "streams of one HTTP/2 connection processed at once"},
    {INT("limits.h2_max_control_frames", limits.h2_max_control_frames, PDR_DEF_H2_MAX_CONTROL_FRAMES, 0,
         PDR_MAX_H2_MAX_CONTROL_FRAMES),
     .doc = "HTTP/2 control frames per connection in 10 s; 0: no limit"},
    {INT("limits.max_inflight_per_pool", limits.max_inflight_per_pool, 0, 0, PDR_MAX_INFLIGHT),
     .doc = "PD requests in flight per pool; 0: none"},
    {INT("limits.max_inflight_per_worker", limits.max_inflight_per_worker, 0, 0, PDR_MAX_INFLIGHT),
     .doc = "a worker with this many legs in flight is not picked; 0: none"},
    {INT("limits.queue", limits.queue, PDR_DEF_QUEUE, 0, PDR_MAX_QUEUE), .flag = "--queue-size",
     .doc = "requests waiting for room"},
    {INT("limits.queue_timeout_ms", limits.queue_timeout_ms, PDR_DEF_QUEUE_TIMEOUT_MS, 1, PDR_MAX_MS),
     .flag_sec = "--queue-timeout-secs", .doc = "longest wait in the queue, then 503"},
    {DBL("limits.rate_limit_rps", limits.rate_limit_rps, 0, 0, PDR_MAX_RATE_LIMIT_RPS),
     .flag = "--rate-limit-tokens-per-second", .doc = "new PD requests per second (a token bucket); 0: off"},
    {INT("limits.rate_limit_burst", limits.rate_limit_burst, 0, 0, PDR_MAX_INFLIGHT),
     .doc = "tokens the bucket holds; 0: max(1, rate_limit_rps)"},
    /* retries. */
    {INT("retries.max", retries.max, PDR_DEF_RETRIES, 0, PDR_MAX_RETRIES), .flag = "--retries",
     .doc = "retries on another worker pair"},
    /* 20 % and 3: Envoy's retry budget; 50 ms, 30 s, 1.5 and 0.2: the sglang router's retry defaults. */
    {INT("retries.budget_percent", retries.budget_percent, 20, 0, 100),
     .doc = "retries in flight at most this share of the requests ..."},
    {INT("retries.min_concurrent", retries.min_concurrent, 3, 0, PDR_MAX_INFLIGHT),
     .doc = "... or this many, whichever is more"},
    {INT("retries.initial_backoff_ms", retries.initial_backoff_ms, 50, 0, PDR_MAX_MS),
     .flag = "--retry-initial-backoff-ms", .doc = "the wait before the first retry; 0: none"},
    {INT("retries.max_backoff_ms", retries.max_backoff_ms, 30000, 0, PDR_MAX_MS),
     .flag = "--retry-max-backoff-ms", .doc = "the cap of the wait"},
    {DBL("retries.backoff_multiplier", retries.backoff_multiplier, 1.5, 1, 100),
     .flag = "--retry-backoff-multiplier", .doc = "each further retry waits this many times longer"},
    {DBL("retries.jitter_factor", retries.jitter_factor, 0.2, 0, 1), .flag = "--retry-jitter-factor",
     .doc = "each wait is drawn in [1 - j, 1 + j] times its value"},
    /* outlier: passive health (Envoy's outlier detection defaults). */
    {BOOL("outlier.enabled", outlier.enabled, 1), .doc = "passive health by outlier ejection"},
    {INT("outlier.consecutive_failures", outlier.consecutive_failures, PDR_DEF_OUTLIER_CONSECUTIVE, 1,
         PDR_MAX_OUTLIER_CONSECUTIVE),
     .flag = "--cb-failure-threshold", .doc = "consecutive failed requests that eject a worker"},
    {INT("outlier.base_ejection_ms", outlier.base_ejection_ms, PDR_DEF_OUTLIER_BASE_MS, 1, PDR_MAX_MS),
     .flag_sec = "--cb-timeout-duration-secs", .doc = "the first ejection's length"},
    {INT("outlier.max_ejection_ms", outlier.max_ejection_ms, PDR_DEF_OUTLIER_MAX_MS, 1, PDR_MAX_MS),
     .doc = "the longest ejection"},
    {INT("outlier.max_ejection_percent", outlier.max_ejection_percent, PDR_DEF_OUTLIER_MAX_PERCENT, 0, 100),
     .doc = "share of a role's workers in a pool ejected at once"},
    {INT("outlier.panic_threshold_percent", outlier.panic_threshold_percent, PDR_DEF_OUTLIER_PANIC_PERCENT, 0,
         100),
     .doc = "below this share serving, picks ignore health; 0: never"},
    {INT("outlier.slow_start_ms", outlier.slow_start_ms, 0, 0, PDR_MAX_MS),
     .doc = "a returning worker's weight ramps up over this; 0: off"},
    {INT("outlier.probation_successes", outlier.probation_successes, 0, 0, PDR_MAX_OUTLIER_CONSECUTIVE),
     .flag = "--cb-success-threshold",
     .doc = "after a return, one failure among this many requests ejects again"},
    {INT("outlier.failure_window_ms", outlier.failure_window_ms, 0, 0, PDR_MAX_MS),
     .flag_sec = "--cb-window-duration-secs",
     .doc = "a failure this long after the previous one counts afresh"},
    /* breaker: the pair-aware breaker. */
    {BOOL("breaker.enabled", breaker.enabled, 1), .doc = "picks avoid a prefill->decode link that failed"},
    {INT("breaker.consecutive_failures", breaker.consecutive_failures, 3, 1, 1000000),
     .doc = "KV failures in a row on a link that open it"},
    {INT("breaker.open_ms", breaker.open_ms, 10000, 1, PDR_MAX_MS),
     .doc = "how long an open link is avoided"},
    {INT("breaker.max_open_ms", breaker.max_open_ms, 300000, 1, PDR_MAX_MS),
     .doc = "the longest an open link is avoided"},
    /* compat: pairs only of workers whose KV layouts agree. */
    {BOOL("compat.enabled", compat.enabled, 1),
     .doc = "a prefill and a decode pair only when their identities agree"},
    {ENUM("compat.unknown", PDR_CT_UNKNOWN, compat.unknown, PDR_COMPAT_UNKNOWN_ALLOW),
     .doc = "a worker whose identity is not known yet pairs with any (allow) or none (refuse)"},
    /* affinity: a session's requests stay on the workers that hold its KV cache. */
    {ENUM("affinity.mode", PDR_CT_AFFINITY, affinity.mode, PDR_AFFINITY_OFF),
     .doc = "session affinity: off, soft (the pool's policy when the choice is overloaded) or hard"},
    {STR("affinity.headers", PDR_CT_STR, affinity.headers, PDR_DEF_AFFINITY_HEADERS),
     .doc = "the request headers that carry the session key, separated by spaces or commas; the first "
            "present wins"},
    {DBL("affinity.max_load_ratio", affinity.max_load_ratio, 1.5, 1, 1000),
     .doc = "soft mode: the choice is overloaded past this times the mean in-flight count"},
    /* epp: the Gateway API endpoint picker (Envoy ext_proc over gRPC). */
    {BOOL("epp.enabled", epp.enabled, 0), RESTART, .restart_name = "epp",
     .doc = "serve as a Gateway API endpoint picker: Envoy ext_proc over gRPC on epp.port (--epp)"},
    {STR("epp.host", PDR_CT_STR, epp.host, PDR_DEF_LISTEN_HOST), RESTART, .restart_name = "epp",
     .doc = "address the endpoint picker's gRPC listener binds"},
    {INT("epp.port", epp.port, 9002, 1, 65535), RESTART, .restart_name = "epp",
     .doc = "port of the endpoint picker's gRPC listener (ext_proc and grpc.health.v1)"},
    {INT("epp.health_port", epp.health_port, 9003, 0, 65535), RESTART, .restart_name = "epp",
     .doc = "a second gRPC listener for the health probes (the extension's 9003); 0: none"},
    {INT("epp.fallbacks", epp.fallbacks, 2, 0, 15),
     .doc = "decode endpoints listed after the pick, for the gateway's retries"},
    {STR("epp.prefill_header", PDR_CT_STR, epp.prefill_header, PDR_DEF_EPP_PREFILL_HEADER),
     .doc = "the request header that names the chosen prefill (host:port) for the decode's sidecar"},
    {INT("epp.max_connections", epp.max_connections, 64, 1, 65536), RESTART, .restart_name = "epp",
     .doc = "gateway connections the endpoint picker holds at once"},
    {INT("epp.max_streams", epp.max_streams, 1024, 1, 65536), RESTART, .restart_name = "epp",
     .doc = "ext_proc streams at once on one gateway connection"},
    /* sidecar: one router per decode pod, the prefill named by a request header. */
    {BOOL("sidecar.enabled", sidecar.enabled, 0),
     .doc = "sidecar mode: the one decode is the local engine, a header names the prefill"},
    {STR("sidecar.prefill_header", PDR_CT_STR, sidecar.prefill_header, PDR_DEF_SIDECAR_HEADER),
     .doc = "the request header that names the prefill (host:port)"},
    /* migration: a stream whose decode fails goes on on a new pair. */
    {BOOL("migration.enabled", migration.enabled, 1),
     .doc = "a stream whose decode fails mid-way goes on on a new pair"},
    {INT("migration.max_attempts", migration.max_attempts, 2, 1, 16), .doc = "migrations of one request"},
    {I64("migration.max_bytes", migration.max_bytes, (int64_t)1 << 20, 4096, (int64_t)1 << 30),
     .doc = "the stream's relayed events a migration reads back; a longer stream is not moved"},
    {ENUM("pd.relay", PDR_CT_RELAY, pd.relay, PDR_RELAY_FIRST_BYTE),
     .doc = "when the decode's answer is relayed to the client"},
    {BOOL("pd.abort", pd.abort, 1), .doc = "tell an sglang worker to stop a leg the router let go"},
    {INT("pd.abort_timeout_ms", pd.abort_timeout_ms, 300, 1, 60000),
     .doc = "one engine abort's deadline, connect included; never retried"},
    /* cache_aware: the sglang router's command-line defaults, but the seed (docs/config.md says why). */
    {DBL("cache_aware.cache_threshold", cache_aware.cache_threshold, 0.3, 0, 1), .flag = "--cache-threshold",
     .doc = "a match longer than this share of the prompt wins"},
    {INT("cache_aware.balance_abs_threshold", cache_aware.balance_abs_threshold, 64, 0, 1000000),
     .flag = "--balance-abs-threshold", .doc = "loads are imbalanced when max - min exceeds it ..."},
    {DBL("cache_aware.balance_rel_threshold", cache_aware.balance_rel_threshold, 1.5, 1, 1000000),
     .flag = "--balance-rel-threshold", .doc = "... and max exceeds min times it"},
    {INT("cache_aware.eviction_interval_secs", cache_aware.eviction_interval_secs, 120, 1, 86400),
     .flag = "--eviction-interval-secs", .doc = "the trees are trimmed this often"},
    {I64("cache_aware.max_tree_size", cache_aware.max_tree_size, (int64_t)1 << 26, 1024, (int64_t)1 << 40),
     .flags = PDR_KEY_OWN_FLAG, .flag = "--max-tree-size", .doc = "bytes of prompt text kept per worker"},
    {ENUM("cache_aware.seed", PDR_CT_SEED, cache_aware.seed, PDR_CA_SEED_CONSISTENT_HASH),
     .flags = PDR_KEY_OWN_FLAG, .flag = "--cache-aware-seed",
     .doc = "where a prompt no worker holds far enough goes"},
    {INT("cache_aware.hash_prefix_chars", cache_aware.hash_prefix_chars, 256, 1, PDR_MAX_HASH_PREFIX_CHARS),
     .doc = "the consistent-hash key is this many leading bytes"},
    {DBL("cache_aware.hash_load_factor", cache_aware.hash_load_factor, 1.5, 1, 100),
     .doc = "no worker seeded above this times the mean load"},
    /* disaggregation: conditional, off by default. */
    {INT("disaggregation.min_prefill_tokens", disaggregation.min_prefill_tokens, 0, 0, PDR_MAX_DISAGG_MIN),
     .doc = "a token prompt whose uncached part is shorter skips the prefill"},
    {INT("disaggregation.min_prefill_chars", disaggregation.min_prefill_chars, 0, 0, PDR_MAX_DISAGG_MIN),
     .doc = "the same for a text prompt, in bytes"},
    {BOOL("disaggregation.skip_when_prefill_saturated", disaggregation.skip_when_prefill_saturated, 0),
     .doc = "a request skips the prefill while every prefill is saturated"},
    {INT("disaggregation.prefill_saturated_inflight", disaggregation.prefill_saturated_inflight, 0, 0,
         PDR_MAX_INFLIGHT),
     .doc = "a prefill is saturated at this many requests in flight"},
    /* kv_events: the precise_prefix index. */
    {I64("kv_events.max_index_bytes", kv_events.max_index_bytes, (int64_t)64 << 20, 4096, (int64_t)1 << 40),
     .doc = "the precise prefix index's hard cap, all workers"},
    {INT("kv_events.resync_messages", kv_events.resync_messages, 32, 1, 1000000),
     .doc = "messages after a gap before a worker counts again"},
    {I64("kv_events.max_message_bytes", kv_events.max_message_bytes, PDR_DEF_KV_MAX_MESSAGE_BYTES,
         PDR_MIN_KV_MAX_MESSAGE_BYTES, PDR_MAX_KV_MAX_MESSAGE_BYTES),
     .doc = "a KV event frame's cap (ZMQ_MAXMSGSIZE)"},
    {INT("kv_events.queue_messages", kv_events.queue_messages, PDR_DEF_KV_QUEUE_MESSAGES, 1,
         PDR_MAX_KV_QUEUE_MESSAGES),
     .doc = "messages queued per publisher (ZMQ_RCVHWM)"},
    {INT("kv_events.replay_timeout_ms", kv_events.replay_timeout_ms, 2000, 10, 600000),
     .doc = "a gap's replay not ended by then is given up"},
    {INT("kv_events.replay_hold_messages", kv_events.replay_hold_messages, 1024, 1, 1000000),
     .doc = "live messages held while a replay runs"},
    {STR("kv_events.snapshot_path", PDR_CT_STR_OPT, kv_events.snapshot_path, NULL), RESTART,
     .doc = "file the index is saved to and loaded from; none: off"},
    {INT("kv_events.snapshot_interval_ms", kv_events.snapshot_interval_ms, 30000, 0, 86400000), RESTART,
     .doc = "how often the index is saved (0: only at shutdown)"},
    {STR("kv_events.snapshot_from", PDR_CT_STR_OPT, kv_events.snapshot_from, NULL), RESTART,
     .doc = "a sibling router's admin URL to fetch the index from at start"},
    {STR("kv_events.snapshot_from_token_file", PDR_CT_STR_OPT, kv_events.snapshot_from_token_file, NULL),
     RESTART, .doc = "the bearer token file of the sibling's admin API"},
    {INT("kv_events.snapshot_fetch_timeout_ms", kv_events.snapshot_fetch_timeout_ms, 5000, 100, 600000),
     RESTART, .doc = "the fetch from the sibling gives up after this long"},
    {INT("ticket.ttl_ms", ticket.ttl_ms, PDR_DEF_TICKET_TTL_MS, 1000, PDR_TICKET_TTL_MAX_MS),
     .doc = "a ticket is valid this long after signing"},
    {STR("shim_events.key_file", PDR_CT_STR_OPT, shim_events.key_file, NULL),
     .doc = "master key of the shims' signed reports; none: the route is off"},
    {INT("shim_events.max_skew_ms", shim_events.max_skew_ms, 30000, 1, 3600000),
     .doc = "a batch whose timestamp is further from the router's clock is stale"},
    {BOOL("kv_admission.enabled", kv_admission.enabled, 1),
     .doc = "a decode that reported load is sent no more than it holds"},
    {INT("kv_admission.wait_ms", kv_admission.wait_ms, 2000, 0, 600000),
     .doc = "how long a request waits for room before a 503"},
    {INT("kv_admission.prompt_bytes_per_token", kv_admission.prompt_bytes_per_token, 4, 1, 1024),
     .doc = "prompt bytes per token when no token ids are known"},
    {INT("kv_admission.max_new_tokens", kv_admission.max_new_tokens, 128, 0, 1 << 24),
     .doc = "output tokens assumed when the body names none"},
    /* admission: priority classes and tenant fairness of the queue. */
    {STR("admission.classes", PDR_CT_STR_OPT, admission.classes, NULL),
     .doc = "the queue's priority classes, the most important first"},
    {STR("admission.default_class", PDR_CT_STR_OPT, admission.default_class, NULL),
     .doc = "the class of a request that names no known class"},
    {STR("admission.class_header", PDR_CT_STR, admission.class_header, "x-gateway-inference-objective"),
     .doc = "the request header that names its class"},
    {STR("admission.fairness_header", PDR_CT_STR_OPT, admission.fairness_header, NULL),
     .doc = "the request header whose value is the tenant; none: no fairness"},
    {INT("admission.max_tenants", admission.max_tenants, 64, 1, PDR_MAX_ADMIT_TENANTS),
     .doc = "tenants tracked per class; the others share one sub-queue"},
    {INT("admission.shed_queue_depth", admission.shed_queue_depth, 0, 0, PDR_MAX_QUEUE),
     .doc = "from this queue depth the last class is refused; 0: never"},
    {STR("admission.timeout_header", PDR_CT_STR_OPT, admission.timeout_header, NULL),
     .doc = "the request header of milliseconds that shortens its queue timeout"},
    {BOOL("admission.refuse_late", admission.refuse_late, 0),
     .doc = "refuse at once a request whose estimated wait passes its deadline"},
    {BOOL("admission.priority_field", admission.priority_field, 1),
     .doc = "a body's integer priority (vLLM's, sglang's) picks the class when no header names one"},
    /* load: read from the engines. */
    {INT("load.poll_ms", load.poll_ms, 0, 0, PDR_MAX_MS),
     .doc = "how often each worker's load is read from its engine; 0: never"},
    {INT("load.timeout_ms", load.timeout_ms, PDR_DEF_HEALTH_TIMEOUT_MS, 1, PDR_MAX_MS),
     .doc = "deadline of one engine load read"},
    {INT("load.kv_usage_max_percent", load.kv_usage_max_percent, 0, 0, 100),
     .doc = "a decode whose engine reports this KV usage or more is not admitted to; 0: off"},
    /* log. */
    {STR("log.access_log", PDR_CT_STR, log.access_log, PDR_DEF_ACCESS_LOG), RESTART, .flag = "--access-log",
     .doc = "access log file, '-' for stdout, 'off' to disable"},
    {STR("log.level", PDR_CT_LEVEL, log.level, PDR_DEF_LOG_LEVEL), .flags = PDR_KEY_OWN_FLAG,
     .flag = "--log-level", .doc = "debug, info, warn (warning), error or critical"},
    {STR("log.dir", PDR_CT_STR_OPT, log.dir, NULL), RESTART, .flag = "--log-dir",
     .doc = "also write the router's log to DIR/pdrouter.log"},
    /* lifecycle. */
    {INT("lifecycle.drain_grace_ms", lifecycle.drain_grace_ms, PDR_DEF_DRAIN_GRACE_MS, 0, PDR_MAX_MS),
     .flag = "--drain-grace-ms", .doc = "on SIGTERM: readiness off, still serving"},
    {INT("lifecycle.drain_timeout_ms", lifecycle.drain_timeout_ms, PDR_DEF_DRAIN_TIMEOUT_MS, 1, PDR_MAX_MS),
     .flag = "--drain-timeout-ms", .flag_sec = "--shutdown-grace-period-secs",
     .doc = "then: listeners closed, waiting for requests in flight"},
    {INT("lifecycle.worker_startup_timeout_ms", lifecycle.worker_startup_timeout_ms, 0, 0, PDR_MAX_MS),
     .flag_sec = "--worker-startup-timeout-secs", .doc = "exit 1 unless a healthy pair by then; 0: none"},
    /* tracing: read at start (a reload keeps the running exporter). */
    {STR("tracing.otlp_endpoint", PDR_CT_URL, tracing.otlp_endpoint, NULL), .reload = PDR_RELOAD_START,
     .flags = PDR_KEY_OWN_FLAG, .flag = "--otlp-traces-endpoint",
     .doc = "an OTLP/HTTP traces URL (JSON encoding)"},
    {STR("tracing.file", PDR_CT_STR_OPT, tracing.file, NULL), .reload = PDR_RELOAD_START,
     .flag = "--trace-file", .doc = "a file the spans are appended to, one OTLP JSON object a line"},
    {DBL("tracing.sample_ratio", tracing.sample_ratio, 1, 0, 1), .reload = PDR_RELOAD_START,
     .flag = "--trace-sample-ratio", .doc = "the share of new traces recorded"},
    {STR("tracing.service_name", PDR_CT_STR, tracing.service_name, "pdrouter"), .reload = PDR_RELOAD_START,
     .doc = "the resource's service.name"},
    {INT("tracing.batch_max", tracing.batch_max, 512, 1, PDR_MAX_TRACE_BATCH), .reload = PDR_RELOAD_START,
     .doc = "spans per export request"},
    {INT("tracing.flush_ms", tracing.flush_ms, 1000, 1, PDR_MAX_TRACE_MS), .reload = PDR_RELOAD_START,
     .doc = "a partial batch waits at most this long"},
    {INT("tracing.queue_max", tracing.queue_max, 8192, 1, PDR_MAX_TRACE_QUEUE), .reload = PDR_RELOAD_START,
     .doc = "spans waiting for export; more are dropped and counted"},
    {INT("tracing.timeout_ms", tracing.timeout_ms, 2000, 1, PDR_MAX_TRACE_MS), .reload = PDR_RELOAD_START,
     .doc = "one export request's deadline"},
    /* Top-level scalars. */
    {INT("threads", threads, 0, 0, PDR_MAX_THREADS), RESTART, .flag = "--threads",
     .doc = "event-loop threads; 0: one per CPU core"},
    {BOOL("dp_aware", dp_aware, 0), .doc = "at start, ask each static worker without dp_size its dp_size"},
    {BOOL("h2_nghttp2", h2_nghttp2, 0), .doc = "serve HTTP/2 (prior knowledge, TLS ALPN h2) with libnghttp2"},
    {STR("tokenizer", PDR_CT_STR_OPT, tokenizer, NULL), .flag = "--tokenizer-path",
     .doc = "a tokenizer.json the router loads for prompt token ids"},
    /* discovery: the one-pool form's (a pool's own discovery: has the same keys and defaults). */
    {INT("discovery.dns.interval_ms", discovery.dns.interval_ms, PDR_DEF_DNS_INTERVAL_MS,
         PDR_MIN_DNS_INTERVAL_MS, PDR_MAX_DNS_INTERVAL_MS),
     .doc = "time between two resolutions"},
    {STR("discovery.dns.resolver", PDR_CT_RESOLVER, discovery.dns.resolver, NULL),
     .doc = "one DNS server to ask instead of /etc/resolv.conf's"},
    {.path = "discovery.dns.prefill.name",
     .type = PDR_CT_HOSTNAME,
     DNS(PDR_ROLE_PREFILL, name),
     .flags = PDR_KEY_REQUIRED,
     .doc = "A/AAAA name of the prefill workers"},
    {.path = "discovery.dns.prefill.port",
     .type = PDR_CT_INT,
     DNS(PDR_ROLE_PREFILL, port),
     .min = 1,
     .max = 65535,
     .flags = PDR_KEY_REQUIRED,
     .doc = "the prefill workers' HTTP port"},
    {.path = "discovery.dns.prefill.bootstrap_port",
     .type = PDR_CT_BPORT,
     DNS(PDR_ROLE_PREFILL, bootstrap_port),
     .def_i = PDR_DEF_BOOTSTRAP_PORT,
     .min = 1,
     .max = 65535,
     .doc = "the prefill workers' bootstrap port"},
    {.path = "discovery.dns.prefill.scheme",
     .type = PDR_CT_SCHEME,
     DNS(PDR_ROLE_PREFILL, https),
     .doc = "http or https"},
    {.path = "discovery.dns.decode.name",
     .type = PDR_CT_HOSTNAME,
     DNS(PDR_ROLE_DECODE, name),
     .flags = PDR_KEY_REQUIRED,
     .doc = "A/AAAA name of the decode workers"},
    {.path = "discovery.dns.decode.port",
     .type = PDR_CT_INT,
     DNS(PDR_ROLE_DECODE, port),
     .min = 1,
     .max = 65535,
     .flags = PDR_KEY_REQUIRED,
     .doc = "the decode workers' HTTP port"},
    {.path = "discovery.dns.decode.scheme",
     .type = PDR_CT_SCHEME,
     DNS(PDR_ROLE_DECODE, https),
     .doc = "http or https"},
    {STR("discovery.kubernetes.namespace", PDR_CT_NAMESPACE, discovery.kubernetes.namespace_, NULL),
     .flags = PDR_KEY_OWN_FLAG, .flag = "--service-discovery-namespace", .doc = "namespace of the pods"},
    {STR("discovery.kubernetes.api_server", PDR_CT_URL, discovery.kubernetes.api_server, NULL),
     .def_doc = "https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT", .doc = "URL of the API server"},
    {STR("discovery.kubernetes.token_file", PDR_CT_STR, discovery.kubernetes.token_file, NULL),
     .def_doc = "/var/run/secrets/kubernetes.io/serviceaccount/token", .doc = "the bearer token's file"},
    {STR("discovery.kubernetes.ca_file", PDR_CT_STR, discovery.kubernetes.ca_file, NULL),
     .def_doc = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt", .doc = "the API server's CA bundle"},
    {INT("discovery.kubernetes.watch_timeout_s", discovery.kubernetes.watch_timeout_s,
         PDR_DEF_K8S_WATCH_TIMEOUT_S, 1, PDR_MAX_K8S_WATCH_TIMEOUT_S),
     .doc = "timeoutSeconds of each watch request"},
    {STR("discovery.kubernetes.bootstrap_port_annotation", PDR_CT_ANNOTATION,
         discovery.kubernetes.bootstrap_port_annotation, NULL),
     .def_doc = PDR_DEF_K8S_BOOTSTRAP_ANNOTATION, .flags = PDR_KEY_OWN_FLAG,
     .flag = "--bootstrap-port-annotation",
     .doc = "the pod annotation that holds a prefill pod's bootstrap port"},
    {STR("discovery.kubernetes.inference_pool", PDR_CT_HOSTNAME, discovery.kubernetes.inference_pool, NULL),
     .doc = "an InferencePool (v1) of the namespace whose pods are the workers of both roles"},
    {STR("discovery.kubernetes.role_label", PDR_CT_ANNOTATION, discovery.kubernetes.role_label, NULL),
     .def_doc = PDR_DEF_K8S_ROLE_LABEL, .doc = "the pod label that names an inference_pool pod's role"},
    {.path = "discovery.kubernetes.prefill.selector",
     .type = PDR_CT_SELECTOR,
     K8S(PDR_ROLE_PREFILL, selector),
     .flags = PDR_KEY_REQUIRED | PDR_KEY_OWN_FLAG,
     .flag = "--prefill-selector",
     .doc = "label selector of the prefill pods"},
    {.path = "discovery.kubernetes.prefill.port",
     .type = PDR_CT_INT,
     K8S(PDR_ROLE_PREFILL, port),
     .max = 65535,
     .doc = "the prefill pods' HTTP port; 0: the pod's first containerPort"},
    {.path = "discovery.kubernetes.prefill.bootstrap_port",
     .type = PDR_CT_BPORT,
     K8S(PDR_ROLE_PREFILL, bootstrap_port),
     .def_i = PDR_DEF_BOOTSTRAP_PORT,
     .min = 1,
     .max = 65535,
     .doc = "the prefill pods' bootstrap port, unless annotated"},
    {.path = "discovery.kubernetes.prefill.scheme",
     .type = PDR_CT_SCHEME,
     K8S(PDR_ROLE_PREFILL, https),
     .doc = "http or https"},
    {.path = "discovery.kubernetes.decode.selector",
     .type = PDR_CT_SELECTOR,
     K8S(PDR_ROLE_DECODE, selector),
     .flags = PDR_KEY_REQUIRED | PDR_KEY_OWN_FLAG,
     .flag = "--decode-selector",
     .doc = "label selector of the decode pods"},
    {.path = "discovery.kubernetes.decode.port",
     .type = PDR_CT_INT,
     K8S(PDR_ROLE_DECODE, port),
     .max = 65535,
     .doc = "the decode pods' HTTP port; 0: the pod's first containerPort"},
    {.path = "discovery.kubernetes.decode.scheme",
     .type = PDR_CT_SCHEME,
     K8S(PDR_ROLE_DECODE, https),
     .doc = "http or https"},
};
const size_t pdr_conf_nkeys = sizeof(pdr_conf_keys) / sizeof(pdr_conf_keys[0]);

const pdr_conf_key_t *pdr_conf_key_find(const char *path, size_t len)
{
    for (size_t i = 0; i < pdr_conf_nkeys; i++)
        if (strlen(pdr_conf_keys[i].path) == len && memcmp(pdr_conf_keys[i].path, path, len) == 0)
            return &pdr_conf_keys[i];
    return NULL;
}

static int is_string(pdr_ctype_t t)
{
    switch (t) {
    case PDR_CT_STR:
    case PDR_CT_STR_OPT:
    case PDR_CT_PATH:
    case PDR_CT_LEVEL:
    case PDR_CT_HOSTNAME:
    case PDR_CT_RESOLVER:
    case PDR_CT_SELECTOR:
    case PDR_CT_NAMESPACE:
    case PDR_CT_URL:
    case PDR_CT_ANNOTATION:
        return 1;
    default:
        return 0;
    }
}

int pdr_conf_key_is_string(const pdr_conf_key_t *k)
{
    return is_string(k->type);
}

int pdr_conf_defaults(void *base, size_t lo, size_t hi)
{
    for (size_t i = 0; i < pdr_conf_nkeys; i++) {
        const pdr_conf_key_t *k = &pdr_conf_keys[i];
        if (k->off < lo || k->off + k->size > hi)
            continue;
        char *p = (char *)base + (k->off - lo);
        if (k->type == PDR_CT_INT64)
            *(int64_t *)(void *)p = k->def_i;
        else if (k->type == PDR_CT_DOUBLE)
            *(double *)(void *)p = k->def_d;
        else if (is_string(k->type)) {
            if (k->def_s != NULL && pdr__config_set_str((char **)(void *)p, k->def_s, strlen(k->def_s)) != 0)
                return PDR_ENOMEM;
        } else
            *(int *)(void *)p = (int)k->def_i;
    }
    return 0;
}

int pdr_conf_check_range(const pdr_conf_key_t *k, const void *base, size_t lo, const char *name, char *err,
                         size_t errlen)
{
    const char *p = (const char *)base + (k->off - lo);
    int64_t v;
    switch (k->type) {
    case PDR_CT_DOUBLE: {
        double d = *(const double *)(const void *)p;
        if (d >= (double)k->min && d <= (double)k->max)
            return 0;
        pdr__config_err(err, errlen, "%s: %g is out of range, expected %lld..%lld", name, d,
                        (long long)k->min, (long long)k->max);
        return PDR_ECONFIG;
    }
    case PDR_CT_INT64:
        v = *(const int64_t *)(const void *)p;
        break;
    case PDR_CT_INT:
    case PDR_CT_PROTOCOL: /* an enumeration's values, 0..max */
    case PDR_CT_POLICY:
        v = *(const int *)(const void *)p;
        break;
    case PDR_CT_BPORT:
        v = *(const int *)(const void *)p;
        if (v == -1)
            return 0;
        break;
    default:
        return 0;
    }
    if (v >= k->min && v <= k->max)
        return 0;
    pdr__config_err(err, errlen, "%s: %lld is out of range, expected %lld..%lld", name, (long long)v,
                    (long long)k->min, (long long)k->max);
    return PDR_ECONFIG;
}

int pdr_conf_key_equal(const pdr_conf_key_t *k, const pdr_config_t *a, const pdr_config_t *b)
{
    const char *pa = (const char *)a + k->off, *pb = (const char *)b + k->off;
    if (is_string(k->type)) {
        const char *sa = *(char *const *)(const void *)pa, *sb = *(char *const *)(const void *)pb;
        return sa == sb || (sa != NULL && sb != NULL && strcmp(sa, sb) == 0);
    }
    if (k->type == PDR_CT_DOUBLE)
        return *(const double *)(const void *)pa == *(const double *)(const void *)pb;
    return memcmp(pa, pb, k->size) == 0;
}

int pdr_conf_key_raised(const pdr_conf_key_t *k, const pdr_config_t *a, const pdr_config_t *b)
{
    const char *pa = (const char *)a + k->off, *pb = (const char *)b + k->off;
    switch (k->type) {
    case PDR_CT_INT64:
        return *(const int64_t *)(const void *)pb > *(const int64_t *)(const void *)pa;
    case PDR_CT_DOUBLE:
        return *(const double *)(const void *)pb > *(const double *)(const void *)pa;
    case PDR_CT_INT:
        return *(const int *)(const void *)pb > *(const int *)(const void *)pa;
    default:
        return 0;
    }
}

int pdr_conf_key_unset(const pdr_conf_key_t *k, const pdr_config_t *a, const pdr_config_t *b)
{
    if (!is_string(k->type))
        return 0;
    return *(char *const *)(const void *)((const char *)a + k->off) != NULL &&
           *(char *const *)(const void *)((const char *)b + k->off) == NULL;
}
