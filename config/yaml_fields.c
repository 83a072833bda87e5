/*
 * The YAML loader's tables: one per mapping, a row per key ({key, type, offset, range, sub-table}), in
 * the order the "valid keys" of an error list them. A scalar key's row names its row of the configuration
 * schema (schema.c), which gives its type, place and range. Const data.
 */
#include <stddef.h>
#include "config.h"
#include "defaults.h"
#include "yaml_internal.h"

#define CONF(m) offsetof(pdr_config_t, m)
/* A scalar key (F_KEY): its type, range and place in pdr_config_t are the schema row's of "SECTION.KEY".
 * KEY_AT reads the same key into another struct (a pool's own) at off in base, KEY_DISC into a discovery
 * section (the top level's or a pool's). */
/* clang-format off */
#define KEY(sect, key) {#key, F_KEY, KEY_OFF, 0, 0, NULL, #sect "." #key}
#define KEY0(key) {#key, F_KEY, KEY_OFF, 0, 0, NULL, #key}
#define KEY_AT(sect, key, off) {#key, F_KEY, off, 0, 0, NULL, #sect "." #key}
#define KEY0_AT(key, off) {#key, F_KEY, off, 0, 0, NULL, #key}
#define KEY_DISC(sect, key) {#key, F_KEY, KEY_OFF_DISC, 0, 0, NULL, #sect "." #key}

static const struct field listen_tls_fields[] = {
    KEY(listen.tls, cert_file),
    KEY(listen.tls, key_file),
    KEY(listen.tls, min_version),
    KEY(listen.tls, ciphers),
    KEY(listen.tls, client_ca_file),
    {"alpn", F_ALPN, 0, 0, 0, NULL, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field workers_tls_fields[] = {
    KEY(workers.tls, ca_file),
    KEY(workers.tls, cert_file),
    KEY(workers.tls, key_file),
    KEY(workers.tls, server_name),
    KEY(workers.tls, verify),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field listen_fields[] = {
    KEY(listen, host),
    KEY(listen, port),
    {"tls", F_CONF_SECTION, 0, 0, 0, listen_tls_fields, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field admin_fields[] = {
    KEY(admin, host),
    KEY(admin, port),
    KEY(admin, token_file),
    {"deny_worker_networks", F_NETWORKS, 0, 0, 0, NULL, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL},
};

static const struct field metrics_fields[] = {
    KEY(metrics, host),
    KEY(metrics, port),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};

static const struct field cors_fields[] = {
    {"allowed_origins", F_ORIGINS, 0, 0, 0, NULL, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field policy_fields[] = {
    KEY(policy, prefill),
    KEY(policy, decode),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field workers_fields[] = {
    {"prefill", F_WORKERS, 0, PDR_ROLE_PREFILL, 0, NULL, NULL},
    {"decode", F_WORKERS, 0, PDR_ROLE_DECODE, 0, NULL, NULL},
    {"regular", F_WORKERS, 0, PDR_ROLE_REGULAR, 0, NULL, NULL},
    {"api_key_file", F_KEY_FILE, 0, 0, 0, NULL, NULL},
    {"tls", F_CONF_SECTION, 0, 0, 0, workers_tls_fields, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field health_fields[] = {
    KEY(health, path),
    KEY(health, interval_ms),
    KEY(health, timeout_ms),
    KEY(health, rise),
    KEY(health, fall),
    KEY(health, drain_status),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field timeouts_fields[] = {
    KEY(timeouts, connect_ms),
    KEY(timeouts, first_byte_ms),
    KEY(timeouts, kv_transfer_ms),
    KEY(timeouts, stream_idle_ms),
    KEY(timeouts, kv_transfer_ms_per_1k_tokens),
    KEY(timeouts, client_header_ms),
    KEY(timeouts, client_body_ms),
    KEY(timeouts, keepalive_idle_ms),
    KEY(timeouts, lingering_ms),
    KEY(timeouts, lingering_idle_ms),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field limits_fields[] = {
    KEY(limits, max_body_bytes),
    KEY(limits, max_inflight),
    KEY(limits, max_connections_per_worker),
    KEY(limits, h2_max_resets),
    KEY(limits, max_merge_bytes),
    KEY(limits, max_header_bytes),
    KEY(limits, max_headers),
    KEY(limits, max_batch_items),
    KEY(limits, max_client_connections),
    KEY(limits, max_idle_client_connections),
    KEY(limits, max_lingering_bytes),
    KEY(limits, h2_max_connection_body_bytes),
    KEY(limits, max_body_memory_bytes),
    KEY(limits, h2_max_concurrent_streams),
    KEY(limits, h2_max_control_frames),
    KEY(limits, max_inflight_per_pool),
    KEY(limits, max_inflight_per_worker),
    KEY(limits, queue),
    KEY(limits, queue_timeout_ms),
    KEY(limits, rate_limit_rps),
    KEY(limits, rate_limit_burst),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field retries_fields[] = {
    KEY(retries, max),
    KEY(retries, budget_percent),
    KEY(retries, min_concurrent),
    KEY(retries, initial_backoff_ms),
    KEY(retries, max_backoff_ms),
    KEY(retries, backoff_multiplier),
    KEY(retries, jitter_factor),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field affinity_fields[] = {
    KEY(affinity, mode),
    KEY(affinity, headers),
    KEY(affinity, max_load_ratio),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field epp_fields[] = {
    KEY(epp, enabled),
    KEY(epp, host),
    KEY(epp, port),
    KEY(epp, health_port),
    KEY(epp, fallbacks),
    KEY(epp, prefill_header),
    KEY(epp, max_connections),
    KEY(epp, max_streams),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field sidecar_fields[] = {
    KEY(sidecar, enabled),
    KEY(sidecar, prefill_header),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field migration_fields[] = {
    KEY(migration, enabled),
    KEY(migration, max_attempts),
    KEY(migration, max_bytes),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field compat_fields[] = {
    KEY(compat, enabled),
    KEY(compat, unknown),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field breaker_fields[] = {
    KEY(breaker, enabled),
    KEY(breaker, consecutive_failures),
    KEY(breaker, open_ms),
    KEY(breaker, max_open_ms),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field outlier_fields[] = {
    KEY(outlier, enabled),
    KEY(outlier, consecutive_failures),
    KEY(outlier, base_ejection_ms),
    KEY(outlier, max_ejection_ms),
    KEY(outlier, max_ejection_percent),
    KEY(outlier, panic_threshold_percent),
    KEY(outlier, slow_start_ms),
    KEY(outlier, probation_successes),
    KEY(outlier, failure_window_ms),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field ticket_fields[] = {
    {"key_file", F_TICKET_KEYS, 0, 0, 0, NULL, NULL},
    {"key_files", F_TICKET_KEYS, 0, 1, 0, NULL, NULL},
    KEY(ticket, ttl_ms),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field shim_events_fields[] = {
    KEY(shim_events, key_file),
    KEY(shim_events, max_skew_ms),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field kv_admission_fields[] = {
    KEY(kv_admission, enabled),
    KEY(kv_admission, wait_ms),
    KEY(kv_admission, prompt_bytes_per_token),
    KEY(kv_admission, max_new_tokens),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field admission_fields[] = {
    KEY(admission, classes),
    KEY(admission, default_class),
    KEY(admission, class_header),
    KEY(admission, fairness_header),
    KEY(admission, max_tenants),
    KEY(admission, shed_queue_depth),
    KEY(admission, timeout_header),
    KEY(admission, refuse_late),
    KEY(admission, priority_field),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field load_fields[] = {
    KEY(load, poll_ms),
    KEY(load, timeout_ms),
    KEY(load, kv_usage_max_percent),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field kv_events_fields[] = {
    KEY(kv_events, max_index_bytes),
    KEY(kv_events, resync_messages),
    KEY(kv_events, max_message_bytes),
    KEY(kv_events, queue_messages),
    KEY(kv_events, replay_timeout_ms),
    KEY(kv_events, replay_hold_messages),
    KEY(kv_events, snapshot_path),
    KEY(kv_events, snapshot_interval_ms),
    KEY(kv_events, snapshot_from),
    KEY(kv_events, snapshot_from_token_file),
    KEY(kv_events, snapshot_fetch_timeout_ms),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field cache_aware_fields[] = {
    KEY(cache_aware, cache_threshold),
    KEY(cache_aware, balance_abs_threshold),
    KEY(cache_aware, balance_rel_threshold),
    KEY(cache_aware, eviction_interval_secs),
    KEY(cache_aware, max_tree_size),
    KEY(cache_aware, seed),
    KEY(cache_aware, hash_prefix_chars),
    KEY(cache_aware, hash_load_factor),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field pd_fields[] = {
    KEY(pd, relay),
    KEY(pd, abort),
    KEY(pd, abort_timeout_ms),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field disaggregation_fields[] = {
    KEY(disaggregation, min_prefill_tokens),
    KEY(disaggregation, min_prefill_chars),
    KEY(disaggregation, skip_when_prefill_saturated),
    KEY(disaggregation, prefill_saturated_inflight),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field log_fields[] = {
    KEY(log, access_log),
    KEY(log, level),
    KEY(log, dir),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field tracing_fields[] = {
    KEY(tracing, otlp_endpoint),
    KEY(tracing, file),
    KEY(tracing, sample_ratio),
    KEY(tracing, service_name),
    KEY(tracing, batch_max),
    KEY(tracing, flush_ms),
    KEY(tracing, queue_max),
    KEY(tracing, timeout_ms),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field lifecycle_fields[] = {
    KEY(lifecycle, drain_grace_ms),
    KEY(lifecycle, drain_timeout_ms),
    KEY(lifecycle, worker_startup_timeout_ms),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
/* Read into a pdr_discovery_conf_t (KEY_DISC): the top-level section and each pool's share these. */
static const struct field dns_prefill_fields[] = {
    KEY_DISC(discovery.dns.prefill, name),
    KEY_DISC(discovery.dns.prefill, port),
    KEY_DISC(discovery.dns.prefill, bootstrap_port),
    KEY_DISC(discovery.dns.prefill, scheme),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field dns_decode_fields[] = {
    KEY_DISC(discovery.dns.decode, name),
    KEY_DISC(discovery.dns.decode, port),
    KEY_DISC(discovery.dns.decode, scheme),
    {"bootstrap_port", F_BPORT_BAD, 0, 0, 0, NULL, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field dns_fields[] = {
    KEY_DISC(discovery.dns, interval_ms),
    KEY_DISC(discovery.dns, resolver),
    {"prefill", F_DNS_ROLE, 0, PDR_ROLE_PREFILL, 0, dns_prefill_fields, NULL},
    {"decode", F_DNS_ROLE, 0, PDR_ROLE_DECODE, 0, dns_decode_fields, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field k8s_prefill_fields[] = {
    KEY_DISC(discovery.kubernetes.prefill, selector),
    KEY_DISC(discovery.kubernetes.prefill, port),
    KEY_DISC(discovery.kubernetes.prefill, bootstrap_port),
    KEY_DISC(discovery.kubernetes.prefill, scheme),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field k8s_decode_fields[] = {
    KEY_DISC(discovery.kubernetes.decode, selector),
    KEY_DISC(discovery.kubernetes.decode, port),
    KEY_DISC(discovery.kubernetes.decode, scheme),
    {"bootstrap_port", F_BPORT_BAD, 0, 0, 0, NULL, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field k8s_fields[] = {
    KEY_DISC(discovery.kubernetes, namespace),
    KEY_DISC(discovery.kubernetes, api_server),
    KEY_DISC(discovery.kubernetes, token_file),
    KEY_DISC(discovery.kubernetes, ca_file),
    KEY_DISC(discovery.kubernetes, watch_timeout_s),
    KEY_DISC(discovery.kubernetes, bootstrap_port_annotation),
    KEY_DISC(discovery.kubernetes, inference_pool),
    KEY_DISC(discovery.kubernetes, role_label),
    {"prefill", F_K8S_ROLE, 0, PDR_ROLE_PREFILL, 0, k8s_prefill_fields, NULL},
    {"decode", F_K8S_ROLE, 0, PDR_ROLE_DECODE, 0, k8s_decode_fields, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field discovery_fields[] = {
    {"dns", F_SECTION, 0, 0, 0, dns_fields, NULL},
    {"kubernetes", F_SECTION, 0, 0, 0, k8s_fields, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
#define POOLF(m) offsetof(pdr_pool_conf_t, m)
static const struct field pool_policy_fields[] = {
    KEY_AT(policy, prefill, POOLF(policy_prefill)),
    KEY_AT(policy, decode, POOLF(policy_decode)),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field pool_timeouts_fields[] = {
    KEY_AT(timeouts, connect_ms, POOLF(timeouts.connect_ms)),
    KEY_AT(timeouts, first_byte_ms, POOLF(timeouts.first_byte_ms)),
    KEY_AT(timeouts, kv_transfer_ms, POOLF(timeouts.kv_transfer_ms)),
    KEY_AT(timeouts, stream_idle_ms, POOLF(timeouts.stream_idle_ms)),
    KEY_AT(timeouts, kv_transfer_ms_per_1k_tokens, POOLF(timeouts.kv_transfer_ms_per_1k_tokens)),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
/* A pool's cache_aware: (and its prefill: / decode: inside): the thresholds and the seed, not the
 * trees' size or eviction interval, which stay global. */
#define POOL_CA_FIELDS(m)                                                                                    \
    KEY_AT(cache_aware, cache_threshold, POOLF(m.cache_threshold)),                                          \
        KEY_AT(cache_aware, balance_abs_threshold, POOLF(m.balance_abs_threshold)),                          \
        KEY_AT(cache_aware, balance_rel_threshold, POOLF(m.balance_rel_threshold)),                          \
        KEY_AT(cache_aware, seed, POOLF(m.seed)),                                                            \
        KEY_AT(cache_aware, hash_prefix_chars, POOLF(m.hash_prefix_chars)),                                  \
        KEY_AT(cache_aware, hash_load_factor, POOLF(m.hash_load_factor))
static const struct field pool_ca_prefill_fields[] = {
    POOL_CA_FIELDS(cache_aware_role[PDR_ROLE_PREFILL]),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field pool_ca_decode_fields[] = {
    POOL_CA_FIELDS(cache_aware_role[PDR_ROLE_DECODE]),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field pool_ca_fields[] = {
    POOL_CA_FIELDS(cache_aware),
    {"prefill", F_SECTION, 0, 0, 0, pool_ca_prefill_fields, NULL},
    {"decode", F_SECTION, 0, 0, 0, pool_ca_decode_fields, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field pool_fields[] = {
    {"name", F_POOL_NAME, POOLF(name), 0, 0, NULL, NULL},
    {"models", F_MODELS, 0, 0, 0, NULL, NULL},
    KEY0_AT(protocol, POOLF(protocol)),
    {"policy", F_POLICIES, 0, 0, 0, pool_policy_fields, NULL},
    {"workers", F_SECTION, 0, 0, 0, workers_fields, NULL},
    {"timeouts", F_SECTION, 0, 0, 0, pool_timeouts_fields, NULL},
    {"discovery", F_DISCOVERY, POOLF(discovery), 0, 0, discovery_fields, NULL},
    {"cache_aware", F_SECTION, 0, 0, 0, pool_ca_fields, NULL},
    KEY0_AT(tokenizer, POOLF(tokenizer)),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
const struct field pdr__yaml_top_fields[] = {
    {"listen", F_SECTION, 0, 0, 0, listen_fields, NULL},
    {"admin", F_SECTION, 0, 0, 0, admin_fields, NULL},
    {"metrics", F_SECTION, 0, 0, 0, metrics_fields, NULL},
    {"cors", F_SECTION, 0, 0, 0, cors_fields, NULL},
    KEY0(protocol),
    {"policy", F_POLICIES, 0, 0, 0, policy_fields, NULL},
    {"workers", F_SECTION, 0, 0, 0, workers_fields, NULL},
    {"health", F_SECTION, 0, 0, 0, health_fields, NULL},
    {"timeouts", F_SECTION, 0, 0, 0, timeouts_fields, NULL},
    {"limits", F_SECTION, 0, 0, 0, limits_fields, NULL},
    {"retries", F_SECTION, 0, 0, 0, retries_fields, NULL},
    {"outlier", F_SECTION, 0, 0, 0, outlier_fields, NULL},
    {"breaker", F_SECTION, 0, 0, 0, breaker_fields, NULL},
    {"compat", F_SECTION, 0, 0, 0, compat_fields, NULL},
    {"affinity", F_SECTION, 0, 0, 0, affinity_fields, NULL},
    {"migration", F_SECTION, 0, 0, 0, migration_fields, NULL},
    {"epp", F_SECTION, 0, 0, 0, epp_fields, NULL},
    {"sidecar", F_SECTION, 0, 0, 0, sidecar_fields, NULL},
    {"pd", F_SECTION, 0, 0, 0, pd_fields, NULL},
    {"cache_aware", F_SECTION, 0, 0, 0, cache_aware_fields, NULL},
    {"disaggregation", F_SECTION, 0, 0, 0, disaggregation_fields, NULL},
    {"kv_events", F_SECTION, 0, 0, 0, kv_events_fields, NULL},
    {"ticket", F_SECTION, 0, 0, 0, ticket_fields, NULL},
    {"shim_events", F_SECTION, 0, 0, 0, shim_events_fields, NULL},
    {"kv_admission", F_SECTION, 0, 0, 0, kv_admission_fields, NULL},
    {"admission", F_SECTION, 0, 0, 0, admission_fields, NULL},
    {"load", F_SECTION, 0, 0, 0, load_fields, NULL},
    {"log", F_SECTION, 0, 0, 0, log_fields, NULL},
    {"lifecycle", F_SECTION, 0, 0, 0, lifecycle_fields, NULL},
    {"tracing", F_SECTION, 0, 0, 0, tracing_fields, NULL},
    KEY0(threads),
    KEY0(dp_aware),
    KEY0(h2_nghttp2),
    KEY0(tokenizer),
    {"discovery", F_DISCOVERY, CONF(discovery), 0, 0, discovery_fields, NULL},
    {"pools", F_POOLS, 0, 0, 0, pool_fields, NULL},
    {"request_id_headers", F_NAMES, 0, 0, 0, NULL, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
const struct field pdr__yaml_prefill_fields[] = {
    {"url", F_URL, 0, 0, 0, NULL, NULL},
    {"bootstrap_port", F_BPORT, offsetof(pdr_worker_conf_t, bootstrap_port), 1, 65535, NULL, NULL},
    {"dp_size", F_INT, offsetof(pdr_worker_conf_t, dp_size), 1, PDR_MAX_DP_SIZE, NULL, NULL},
    {"kv_events", F_KV_ENDPOINT, offsetof(pdr_worker_conf_t, kv_events), 0, 0, NULL, NULL},
    {"kv_events_replay", F_KV_ENDPOINT, offsetof(pdr_worker_conf_t, kv_events_replay), 0, 0, NULL, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
const struct field pdr__yaml_decode_fields[] = {
    {"url", F_URL, 0, 0, 0, NULL, NULL},
    {"bootstrap_port", F_BPORT_BAD, 0, 0, 0, NULL, NULL},
    {"dp_size", F_INT, offsetof(pdr_worker_conf_t, dp_size), 1, PDR_MAX_DP_SIZE, NULL, NULL},
    {"kv_events", F_KV_ENDPOINT, offsetof(pdr_worker_conf_t, kv_events), 0, 0, NULL, NULL},
    {"kv_events_replay", F_KV_ENDPOINT, offsetof(pdr_worker_conf_t, kv_events_replay), 0, 0, NULL, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
/* clang-format on */
