/*
 * YAML → snapshot. libyaml's document API builds the node tree; a descriptor table per mapping
 * ({key, type, offset, range, sub-table}) is walked over it. A scalar key's row names its row of the
 * configuration schema (schema.c, F_KEY), which gives its type, place and range. Every value is checked where it is read,
 * so each error carries the file, 1-based line and column of the offending node. The first error
 * stops the load; everything allocated so far is released. Any thread; no shared state.
 *
 * libyaml does not check for duplicate keys and gives every scalar as an untyped string, so both are
 * done here. The walker only descends into nodes the schema names, so its depth is bounded by the
 * schema, whatever the input.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>
#include "err.h"
#include "config.h"
#include "config_internal.h"
#include "defaults.h"
#include "keyring.h"
#include "ticket.h"
#include "schema.h"

enum ftype {
    F_SECTION,      /* a mapping described by sub */
    F_POLICIES,     /* policy: a mapping {prefill, decode} or one name for both */
    F_STR,          /* non-empty string */
    F_STR_OPT,      /* string, or null for "none" */
    F_PATH,         /* string starting with '/' */
    F_INT,          /* int in [min, max] */
    F_INT64,        /* int64_t in [min, max] */
    F_DOUBLE,       /* double in [min, max] */
    F_PROTOCOL,     /* pdr_protocol_t */
    F_POLICY,       /* pdr_policy_kind_t */
    F_LEVEL,        /* log level, stored as its canonical name */
    F_RELAY,        /* pdr_relay_t */
    F_BOOL,         /* int 0/1 from true or false */
    F_WORKERS,      /* sequence of workers; min is the role */
    F_URL,          /* worker url (base is a pdr_worker_conf_t) */
    F_BPORT,        /* bootstrap port or null/none */
    F_BPORT_BAD,    /* bootstrap_port on a decode worker */
    F_HOSTNAME,     /* string: a DNS name (pdr__check_hostname) */
    F_RESOLVER,     /* string: "IPv4[:port]", "[IPv6]:port" or IPv6 */
    F_SELECTOR,     /* string: a Kubernetes label selector */
    F_NAMESPACE,    /* string: a Kubernetes namespace name */
    F_API_URL,      /* string: http:// or https:// URL of the API server */
    F_DNS_ROLE,     /* a mapping described by sub, then name and port required; min is the role */
    F_K8S_ROLE,     /* a mapping described by sub, then selector required; min is the role */
    F_NETWORKS,     /* sequence of IP networks, or null for none (admin_deny_networks) */
    F_ORIGINS,      /* sequence of CORS origins, or null for none (cors.allowed_origins) */
    F_ANNOTATION,   /* string: a Kubernetes annotation key */
    F_POOLS,        /* pools: a sequence of pool mappings */
    F_POOL_NAME,    /* a pool's name: [a-z0-9_-], unique */
    F_MODELS,       /* a pool's models: a sequence of model names, each in one pool only */
    F_DISCOVERY,    /* a pdr_discovery_conf_t at off: its fields' offsets are relative to it */
    F_KEY_FILE,     /* path of a key file, read and checked now (workers.api_key_file); null for none */
    F_NAMES,        /* sequence of header names, stored lower case (request_id_headers) */
    F_SEED,         /* cache_aware.seed: smallest_tree or consistent_hash, stored as an int */
    F_SCHEME,       /* discovery scheme: http or https, stored as int 0/1 */
    F_KV_ENDPOINT,  /* string: a ZMQ endpoint (pdr_kv_endpoint_check) */
    F_TICKET_KEYS,  /* ticket.key_file (a path; min 0) or ticket.key_files (a sequence; min 1), read now */
    F_CONF_SECTION, /* a mapping described by sub, offsets in pdr_config_t wherever it appears (tls:) */
    F_TLS_VERSION,  /* TLS1.2 or TLS1.3, stored as PDR_TLS_1_2 / PDR_TLS_1_3 */
    F_ALPN,         /* sequence of h2 and http/1.1 (listen.tls.alpn) */
    F_KEY,          /* a scalar key of the schema: read as its row's type says (key_field) */
};

struct field {
    const char *key;
    enum ftype type;
    size_t off;
    int64_t min, max;
    const struct field *sub;
    const char *schema; /* F_KEY: the schema row's path (schema.c) */
};

#define CONF(m) offsetof(pdr_config_t, m)
/* A scalar key (F_KEY): its type, range and place in pdr_config_t are the schema row's of "SECTION.KEY".
 * KEY_AT reads the same key into another struct (a pool's own) at off in base, KEY_DISC into a discovery
 * section (the top level's or a pool's). */
#define KEY_OFF ((size_t)-1)
#define KEY_OFF_DISC ((size_t)-2) /* the row's place in pdr_config_t.discovery, in a discovery section */
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
static const struct field kv_events_fields[] = {
    KEY(kv_events, max_index_bytes),
    KEY(kv_events, resync_messages),
    KEY(kv_events, max_message_bytes),
    KEY(kv_events, queue_messages),
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
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field top_fields[] = {
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
    {"pd", F_SECTION, 0, 0, 0, pd_fields, NULL},
    {"cache_aware", F_SECTION, 0, 0, 0, cache_aware_fields, NULL},
    {"disaggregation", F_SECTION, 0, 0, 0, disaggregation_fields, NULL},
    {"kv_events", F_SECTION, 0, 0, 0, kv_events_fields, NULL},
    {"ticket", F_SECTION, 0, 0, 0, ticket_fields, NULL},
    {"shim_events", F_SECTION, 0, 0, 0, shim_events_fields, NULL},
    {"kv_admission", F_SECTION, 0, 0, 0, kv_admission_fields, NULL},
    {"log", F_SECTION, 0, 0, 0, log_fields, NULL},
    {"lifecycle", F_SECTION, 0, 0, 0, lifecycle_fields, NULL},
    {"tracing", F_SECTION, 0, 0, 0, tracing_fields, NULL},
    KEY0(threads),
    KEY0(dp_aware),
    KEY0(tokenizer),
    {"discovery", F_DISCOVERY, CONF(discovery), 0, 0, discovery_fields, NULL},
    {"pools", F_POOLS, 0, 0, 0, pool_fields, NULL},
    {"request_id_headers", F_NAMES, 0, 0, 0, NULL, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field prefill_fields[] = {
    {"url", F_URL, 0, 0, 0, NULL, NULL},
    {"bootstrap_port", F_BPORT, offsetof(pdr_worker_conf_t, bootstrap_port), 1, 65535, NULL, NULL},
    {"dp_size", F_INT, offsetof(pdr_worker_conf_t, dp_size), 1, PDR_MAX_DP_SIZE, NULL, NULL},
    {"kv_events", F_KV_ENDPOINT, offsetof(pdr_worker_conf_t, kv_events), 0, 0, NULL, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
static const struct field decode_fields[] = {
    {"url", F_URL, 0, 0, 0, NULL, NULL},
    {"bootstrap_port", F_BPORT_BAD, 0, 0, 0, NULL, NULL},
    {"dp_size", F_INT, offsetof(pdr_worker_conf_t, dp_size), 1, PDR_MAX_DP_SIZE, NULL, NULL},
    {"kv_events", F_KV_ENDPOINT, offsetof(pdr_worker_conf_t, kv_events), 0, 0, NULL, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL},
};
/* clang-format on */

struct ctx {
    const char *name;
    yaml_document_t *doc;
    pdr_config_t *c;
    pdr_pool_conf_t *pool; /* the pool being read (pools[i]); NULL outside pools: */
    char *err;
    size_t errlen;
    const yaml_node_t *pdshim; /* the first protocol: pdshim (it needs ticket keys), at pdshim_path */
    char pdshim_path[160];
    const yaml_node_t *ticket_keys; /* the ticket key_file / key_files node read */
};

static int fail_mark(struct ctx *cx, yaml_mark_t m, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int load_ticket_keys(struct ctx *cx, const yaml_node_t *v, const char *path, int list);
static int fail_mark(struct ctx *cx, yaml_mark_t m, const char *fmt, ...)
{
    if (cx->err == NULL || cx->errlen == 0)
        return PDR_ECONFIG;
    int n = snprintf(cx->err, cx->errlen, "%s:%zu:%zu: ", cx->name, m.line + 1, m.column + 1);
    if (n >= 0 && (size_t)n < cx->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(cx->err + n, cx->errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return PDR_ECONFIG;
}

#define FAIL(cx, node, ...) fail_mark(cx, (node)->start_mark, __VA_ARGS__)

static const char *node_kind(const yaml_node_t *n)
{
    switch (n->type) {
    case YAML_SCALAR_NODE:
        return "a scalar";
    case YAML_SEQUENCE_NODE:
        return "a sequence";
    case YAML_MAPPING_NODE:
        return "a mapping";
    default:
        return "an empty node";
    }
}

static const char *sval(const yaml_node_t *n, size_t *len)
{
    *len = n->data.scalar.length;
    return (const char *)n->data.scalar.value;
}

/* A plain (unquoted) null: empty, "~" or null in any of YAML's spellings. */
static int is_null(const yaml_node_t *n)
{
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return 0;
    size_t len;
    const char *s = sval(n, &len);
    return len == 0 || (len == 1 && s[0] == '~') ||
           (len == 4 &&
            (memcmp(s, "null", 4) == 0 || memcmp(s, "Null", 4) == 0 || memcmp(s, "NULL", 4) == 0));
}

static const char *show(const yaml_node_t *n, char *buf, size_t buflen)
{
    size_t len;
    const char *s = sval(n, &len);
    return pdr__config_show(s, len, buf, buflen);
}

static int need_scalar(struct ctx *cx, const yaml_node_t *v, const char *path, const char *what)
{
    if (v->type != YAML_SCALAR_NODE)
        return FAIL(cx, v, "%s: expected %s, got %s", path, what, node_kind(v));
    if (is_null(v))
        return FAIL(cx, v, "%s: expected %s, got null", path, what);
    return 0;
}

/* Item i of the sequence seq at path, its own path ("path[i]") written into ipath (160 bytes). NULL, with
 * the error set, when the document lacks it. */
static const yaml_node_t *seq_item(struct ctx *cx, const yaml_node_t *seq, const char *path, size_t i,
                                   char *ipath)
{
    const yaml_node_t *item = yaml_document_get_node(cx->doc, seq->data.sequence.items.start[i]);
    snprintf(ipath, 160, "%.120s[%zu]", path, i);
    if (item == NULL)
        FAIL(cx, seq, "%s: missing node", ipath);
    return item;
}

/* Item i of a sequence of scalars (seq_item, then need_scalar with what): 0 with *item and its text. */
static int seq_scalar(struct ctx *cx, const yaml_node_t *seq, const char *path, size_t i, const char *what,
                      char *ipath, const yaml_node_t **item, const char **str, size_t *len)
{
    *item = seq_item(cx, seq, path, i, ipath);
    if (*item == NULL)
        return PDR_ECONFIG;
    int rc = need_scalar(cx, *item, ipath, what);
    if (rc == 0)
        *str = sval(*item, len);
    return rc;
}

static int get_string(struct ctx *cx, const yaml_node_t *v, const char *path, char **dst)
{
    int rc = need_scalar(cx, v, path, "a string");
    if (rc != 0)
        return rc;
    size_t len;
    const char *s = sval(v, &len);
    if (len == 0)
        return FAIL(cx, v, "%s: must not be empty", path);
    if (memchr(s, '\0', len) != NULL)
        return FAIL(cx, v, "%s: contains a NUL character", path);
    if (pdr__config_set_str(dst, s, len) != 0)
        return FAIL(cx, v, "out of memory");
    return 0;
}

static int get_int(struct ctx *cx, const yaml_node_t *v, const char *path, int64_t min, int64_t max,
                   int64_t *out)
{
    char buf[80];
    int rc = need_scalar(cx, v, path, "an integer");
    if (rc != 0)
        return rc;
    size_t len;
    const char *s = sval(v, &len);
    rc = pdr__parse_int(s, len, out);
    if (rc == PDR_EINVAL)
        return FAIL(cx, v, "%s: expected an integer, got '%s'", path, show(v, buf, sizeof(buf)));
    if (rc != 0 || *out < min || *out > max)
        return FAIL(cx, v, "%s: %s is out of range, expected %lld..%lld", path, show(v, buf, sizeof(buf)),
                    (long long)min, (long long)max);
    return 0;
}

/* A finite decimal number in [min, max]. */
static int get_double(struct ctx *cx, const yaml_node_t *v, const char *path, double min, double max,
                      double *out)
{
    char buf[80], num[64];
    int rc = need_scalar(cx, v, path, "a number");
    if (rc != 0)
        return rc;
    size_t len;
    const char *s = sval(v, &len);
    char *end = NULL;
    if (len == 0 || len >= sizeof(num))
        return FAIL(cx, v, "%s: expected a number, got '%s'", path, show(v, buf, sizeof(buf)));
    memcpy(num, s, len);
    num[len] = '\0';
    double d = strtod(num, &end);
    if (end != num + len || !(d == d) || d - d != 0)
        return FAIL(cx, v, "%s: expected a number, got '%s'", path, show(v, buf, sizeof(buf)));
    if (d < min || d > max)
        return FAIL(cx, v, "%s: %s is out of range, expected %g..%g", path, show(v, buf, sizeof(buf)), min,
                    max);
    *out = d;
    return 0;
}

/* A scalar that is one of two names: *out = va or vb. Otherwise "PATH: unknown WHAT 'X', expected A or B". */
static int get_either(struct ctx *cx, const yaml_node_t *v, const char *path, const char *what, const char *a,
                      int va, const char *b, int vb, int *out)
{
    char expect[64], buf[64];
    snprintf(expect, sizeof(expect), "%s or %s", a, b);
    int rc = need_scalar(cx, v, path, expect);
    if (rc != 0)
        return rc;
    size_t len;
    const char *s = sval(v, &len);
    if (len == strlen(a) && memcmp(s, a, len) == 0)
        *out = va;
    else if (len == strlen(b) && memcmp(s, b, len) == 0)
        *out = vb;
    else
        return FAIL(cx, v, "%s: unknown %s '%s', expected %s", path, what, show(v, buf, sizeof(buf)), expect);
    return 0;
}

static int get_policy(struct ctx *cx, const yaml_node_t *v, const char *path, pdr_policy_kind_t *out)
{
    char buf[80];
    int rc = need_scalar(cx, v, path, "a policy name");
    if (rc != 0)
        return rc;
    size_t len;
    const char *s = sval(v, &len);
    if (pdr__policy_parse(s, len, out) != 0)
        return FAIL(cx, v,
                    "%s: unknown policy '%s', expected round_robin, least_load, random, cache_aware, "
                    "power_of_two or precise_prefix",
                    path, show(v, buf, sizeof(buf)));
    return 0;
}

static int walk_map(struct ctx *cx, const yaml_node_t *map, const char *path, const struct field *fields,
                    void *base);
static const yaml_node_t *map_get(yaml_document_t *doc, const yaml_node_t *map, const char *key);

typedef int (*check_fn)(const char *s, size_t len, char *msg, size_t msglen);

static check_fn checker(enum ftype t)
{
    switch (t) {
    case F_HOSTNAME:
        return pdr__check_hostname;
    case F_RESOLVER:
        return pdr__check_resolver;
    case F_SELECTOR:
        return pdr__check_selector;
    case F_NAMESPACE:
        return pdr__check_namespace;
    case F_ANNOTATION:
        return pdr__check_annotation;
    case F_KV_ENDPOINT:
        return pdr_kv_endpoint_check;
    default:
        return pdr__check_api_server;
    }
}

/* A worker: a mapping {url, bootstrap_port} or just the URL as a scalar. */
static int load_worker(struct ctx *cx, const yaml_node_t *item, const char *path, pdr_role_t role,
                       pdr_worker_conf_t *w)
{
    w->bootstrap_port = -1;
    if (item->type == YAML_SCALAR_NODE && !is_null(item)) {
        size_t len;
        const char *s = sval(item, &len);
        char msg[512];
        if (memchr(s, '\0', len) != NULL)
            return FAIL(cx, item, "%s: contains a NUL character", path);
        if (pdr_worker_conf_parse_url(s, w, msg, sizeof(msg)) != 0)
            return FAIL(cx, item, "%s: %s", path, msg);
        return 0;
    }
    if (item->type != YAML_MAPPING_NODE)
        return FAIL(cx, item, "%s: expected a mapping {url: ...}, got %s", path,
                    is_null(item) ? "null" : node_kind(item));
    int rc = walk_map(cx, item, path, role == PDR_ROLE_PREFILL ? prefill_fields : decode_fields, w);
    if (rc != 0)
        return rc;
    if (w->url == NULL)
        return FAIL(cx, item, "%s: missing required key 'url'", path);
    return 0;
}

static int load_workers(struct ctx *cx, const yaml_node_t *seq, const char *path, pdr_role_t role)
{
    pdr_worker_conf_t **arr = role == PDR_ROLE_PREFILL  ? &cx->c->prefill
                              : role == PDR_ROLE_DECODE ? &cx->c->decode
                                                        : &cx->c->regular;
    size_t *n = role == PDR_ROLE_PREFILL  ? &cx->c->n_prefill
                : role == PDR_ROLE_DECODE ? &cx->c->n_decode
                                          : &cx->c->n_regular;
    if (cx->pool != NULL) {
        arr = role == PDR_ROLE_PREFILL  ? &cx->pool->prefill
              : role == PDR_ROLE_DECODE ? &cx->pool->decode
                                        : &cx->pool->regular;
        n = role == PDR_ROLE_PREFILL  ? &cx->pool->n_prefill
            : role == PDR_ROLE_DECODE ? &cx->pool->n_decode
                                      : &cx->pool->n_regular;
    }
    if (is_null(seq))
        return 0;
    if (seq->type != YAML_SEQUENCE_NODE)
        return FAIL(cx, seq, "%s: expected a sequence of workers, got %s", path, node_kind(seq));
    size_t count = (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
    if (count == 0)
        return 0;
    if (count > PDR_CONFIG_MAX_WORKERS)
        return FAIL(cx, seq, "%s: %zu workers, at most %d are allowed", path, count, PDR_CONFIG_MAX_WORKERS);
    *arr = calloc(count, sizeof(**arr));
    if (*arr == NULL)
        return FAIL(cx, seq, "out of memory");
    *n = count;
    for (size_t i = 0; i < count; i++) {
        char ipath[160];
        const yaml_node_t *item = seq_item(cx, seq, path, i, ipath);
        if (item == NULL)
            return PDR_ECONFIG;
        int rc = load_worker(cx, item, ipath, role, &(*arr)[i]);
        if (rc != 0)
            return rc;
        long j = pdr__workers_find_dup(*arr, i);
        if (j >= 0)
            return FAIL(cx, item, "%s: duplicate worker '%s' (same as %s[%ld])", ipath, (*arr)[i].url, path,
                        j);
    }
    return 0;
}

/* admin.deny_worker_networks: a sequence of "ADDRESS[/PREFIX]" scalars; null or [] for none. */
static int load_origins(struct ctx *cx, const yaml_node_t *seq, const char *path)
{
    pdr_config_t *c = cx->c;
    pdr__config_free_origins(c);
    if (is_null(seq))
        return 0;
    if (seq->type != YAML_SEQUENCE_NODE)
        return FAIL(cx, seq,
                    "%s: expected a sequence of origins such as [\"https://app.example.com\"], got %s", path,
                    node_kind(seq));
    size_t count = (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
    if (count > PDR_CONFIG_MAX_ORIGINS)
        return FAIL(cx, seq, "%s: %zu origins, at most %d are allowed", path, count, PDR_CONFIG_MAX_ORIGINS);
    for (size_t i = 0; i < count; i++) {
        const yaml_node_t *item;
        char ipath[160];
        char msg[256];
        const char *str;
        size_t len;
        int rc =
            seq_scalar(cx, seq, path, i, "an origin (scheme://host[:port] or *)", ipath, &item, &str, &len);
        if (rc != 0)
            return rc;
        if (pdr__check_origin(str, len, msg, sizeof(msg)) != 0)
            return FAIL(cx, item, "%s: %s", ipath, msg);
        if (pdr__config_add_origin(c, str, len) != 0)
            return FAIL(cx, item, "out of memory");
    }
    return 0;
}

static int load_networks(struct ctx *cx, const yaml_node_t *seq, const char *path)
{
    pdr_config_t *c = cx->c;
    free(c->admin_deny_networks.nets);
    c->admin_deny_networks.nets = NULL;
    c->admin_deny_networks.n = 0;
    if (is_null(seq))
        return 0;
    if (seq->type != YAML_SEQUENCE_NODE)
        return FAIL(cx, seq,
                    "%s: expected a sequence of IP networks such as [169.254.0.0/16, \"fe80::/10\"], got %s",
                    path, node_kind(seq));
    size_t count = (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
    if (count > PDR_CONFIG_MAX_NETWORKS)
        return FAIL(cx, seq, "%s: %zu networks, at most %d are allowed", path, count,
                    PDR_CONFIG_MAX_NETWORKS);
    if (count == 0)
        return 0;
    if ((c->admin_deny_networks.nets = calloc(count, sizeof(pdr_ipnet_t))) == NULL)
        return FAIL(cx, seq, "out of memory");
    for (size_t i = 0; i < count; i++) {
        const yaml_node_t *item;
        char ipath[160];
        char msg[256];
        const char *str;
        size_t len;
        int rc = seq_scalar(cx, seq, path, i, "an IP network (ADDRESS or ADDRESS/PREFIX)", ipath, &item, &str,
                            &len);
        if (rc != 0)
            return rc;
        if (pdr_ipnet_parse(str, len, &c->admin_deny_networks.nets[i], msg, sizeof(msg)) != 0)
            return FAIL(cx, item, "%s: %s", ipath, msg);
        c->admin_deny_networks.n = i + 1;
    }
    return 0;
}

/* listen.tls.alpn: the protocols offered to clients, in the server's order of preference. */
static int load_alpn(struct ctx *cx, const yaml_node_t *seq, const char *path)
{
    pdr_config_t *c = cx->c;
    if (seq->type != YAML_SEQUENCE_NODE)
        return FAIL(cx, seq, "%s: expected a sequence such as [h2, http/1.1], got %s", path, node_kind(seq));
    size_t count = (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
    if (count == 0 || count > 2)
        return FAIL(cx, seq, "%s: expected one or two of h2 and http/1.1, got %zu entries", path, count);
    c->listen_tls.n_alpn = 0;
    for (size_t i = 0; i < count; i++) {
        const yaml_node_t *item;
        char ipath[160], buf[64];
        const char *str;
        size_t len;
        int rc = seq_scalar(cx, seq, path, i, "a protocol name", ipath, &item, &str, &len);
        if (rc != 0)
            return rc;
        int id = len == 2 && memcmp(str, "h2", 2) == 0         ? PDR_ALPN_H2
                 : len == 8 && memcmp(str, "http/1.1", 8) == 0 ? PDR_ALPN_HTTP11
                                                               : 0;
        if (id == 0)
            return FAIL(cx, item, "%s: unknown protocol '%s', expected h2 or http/1.1", ipath,
                        show(item, buf, sizeof(buf)));
        if (i == 1 && c->listen_tls.alpn[0] == id)
            return FAIL(cx, item, "%s: '%s' is listed twice", ipath, show(item, buf, sizeof(buf)));
        c->listen_tls.alpn[i] = id;
        c->listen_tls.n_alpn = i + 1;
    }
    return 0;
}

static int load_names(struct ctx *cx, const yaml_node_t *seq, const char *path)
{
    pdr_config_t *c = cx->c;
    pdr__free_names(c->request_id_headers, c->n_request_id_headers);
    c->request_id_headers = NULL;
    c->n_request_id_headers = 0;
    if (is_null(seq))
        return 0;
    if (seq->type != YAML_SEQUENCE_NODE)
        return FAIL(cx, seq, "%s: expected a sequence of header names such as [x-request-id], got %s", path,
                    node_kind(seq));
    size_t count = (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
    if (count > PDR_CONFIG_MAX_REQUEST_ID_HEADERS)
        return FAIL(cx, seq, "%s: %zu names, at most %d are allowed", path, count,
                    PDR_CONFIG_MAX_REQUEST_ID_HEADERS);
    if (count == 0)
        return 0;
    if ((c->request_id_headers = calloc(count, sizeof(char *))) == NULL)
        return FAIL(cx, seq, "out of memory");
    for (size_t i = 0; i < count; i++) {
        const yaml_node_t *item;
        char ipath[160];
        char msg[256];
        const char *str;
        size_t len;
        int rc = seq_scalar(cx, seq, path, i, "a header name", ipath, &item, &str, &len);
        if (rc != 0)
            return rc;
        if (pdr__check_header_name(str, len, msg, sizeof(msg)) != 0)
            return FAIL(cx, item, "%s: %s", ipath, msg);
        char *name = NULL;
        if (pdr__config_set_str(&name, str, len) != 0)
            return FAIL(cx, item, "out of memory");
        for (size_t k = 0; k < len; k++)
            if (name[k] >= 'A' && name[k] <= 'Z')
                name[k] = (char)(name[k] - 'A' + 'a');
        c->request_id_headers[i] = name;
        c->n_request_id_headers = i + 1;
    }
    return 0;
}

/* A pool's name: 1..PDR_CONFIG_MAX_POOL_NAME of [a-z0-9_-] (it appears in metric labels, log lines and
 * the admin API's JSON as is), unique among the pools read so far. */
static int get_pool_name(struct ctx *cx, const yaml_node_t *v, const char *path, char **dst)
{
    char buf[80];
    int rc = need_scalar(cx, v, path, "a pool name");
    if (rc != 0)
        return rc;
    size_t len;
    const char *s = sval(v, &len);
    int ok = len >= 1 && len <= PDR_CONFIG_MAX_POOL_NAME;
    for (size_t i = 0; ok && i < len; i++)
        ok = (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-' || s[i] == '_';
    if (!ok)
        return FAIL(cx, v, "%s: '%s' is not a pool name: 1..%d characters of a-z, 0-9, '-' and '_'", path,
                    show(v, buf, sizeof(buf)), PDR_CONFIG_MAX_POOL_NAME);
    for (size_t i = 0; i < cx->c->n_pools && &cx->c->pools[i] != cx->pool; i++)
        if (cx->c->pools[i].name != NULL && strlen(cx->c->pools[i].name) == len &&
            memcmp(cx->c->pools[i].name, s, len) == 0)
            return FAIL(cx, v, "%s: duplicate pool name '%s' (same as pools[%zu])", path,
                        show(v, buf, sizeof(buf)), i);
    return get_string(cx, v, path, dst);
}

/* The pool (< upto) and model index that already serve model s[0..len), or -1. */
static long model_owner(const pdr_config_t *c, size_t upto, const pdr_pool_conf_t *cur, size_t cur_n,
                        const char *s, size_t len, size_t *at)
{
    for (size_t i = 0; i <= upto && i < c->n_pools; i++) {
        const pdr_pool_conf_t *pl = &c->pools[i];
        size_t n = pl == cur ? cur_n : pl->n_models;
        for (size_t k = 0; k < n; k++)
            if (pl->models[k] != NULL && strlen(pl->models[k]) == len && memcmp(pl->models[k], s, len) == 0) {
                *at = k;
                return (long)i;
            }
    }
    return -1;
}

/* A pool's models: a non-empty sequence of names (no control characters), each served by one pool. */
static int load_models(struct ctx *cx, const yaml_node_t *seq, const char *path)
{
    pdr_pool_conf_t *pl = cx->pool;
    char buf[80];
    if (seq->type != YAML_SEQUENCE_NODE)
        return FAIL(cx, seq, "%s: expected a sequence of model names, got %s", path,
                    is_null(seq) ? "null" : node_kind(seq));
    size_t count = (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
    if (count == 0)
        return FAIL(cx, seq, "%s: a pool serves at least one model", path);
    if (count > PDR_CONFIG_MAX_MODELS)
        return FAIL(cx, seq, "%s: %zu models, at most %d are allowed", path, count, PDR_CONFIG_MAX_MODELS);
    if ((pl->models = calloc(count, sizeof(char *))) == NULL)
        return FAIL(cx, seq, "out of memory");
    size_t self = (size_t)(pl - cx->c->pools);
    for (size_t i = 0; i < count; i++) {
        const yaml_node_t *item;
        char ipath[160];
        const char *str;
        size_t len;
        int rc = seq_scalar(cx, seq, path, i, "a model name", ipath, &item, &str, &len);
        if (rc != 0)
            return rc;
        const unsigned char *s = (const unsigned char *)str;
        if (len == 0 || len > PDR_CONFIG_MAX_MODEL_NAME)
            return FAIL(cx, item, "%s: a model name has 1..%d bytes", ipath, PDR_CONFIG_MAX_MODEL_NAME);
        for (size_t k = 0; k < len; k++)
            if (s[k] < 0x20 || s[k] == 0x7f || s[k] == '"' || s[k] == '\\')
                return FAIL(cx, item, "%s: a model name has no control characters, '\"' or '\\'", ipath);
        size_t at = 0;
        long owner = model_owner(cx->c, self, pl, i, (const char *)s, len, &at);
        if (owner == (long)self)
            return FAIL(cx, item, "%s: model '%s' is listed twice (same as %.120s[%zu])", ipath,
                        show(item, buf, sizeof(buf)), path, at);
        if (owner >= 0)
            return FAIL(cx, item,
                        "%s: model '%s' is served by pool '%s' already; a model belongs to one pool", ipath,
                        show(item, buf, sizeof(buf)), cx->c->pools[owner].name);
        if (pdr__config_set_str(&pl->models[i], (const char *)s, len) != 0)
            return FAIL(cx, item, "out of memory");
        pl->n_models = i + 1;
    }
    return 0;
}

/* pools: a non-empty sequence of {name, models, protocol?, policy?, workers}. */
static int load_pools(struct ctx *cx, const yaml_node_t *seq, const char *path, const struct field *fields)
{
    pdr_config_t *c = cx->c;
    if (seq->type != YAML_SEQUENCE_NODE)
        return FAIL(cx, seq, "%s: expected a sequence of pools ({name, models, workers}), got %s", path,
                    is_null(seq) ? "null" : node_kind(seq));
    size_t count = (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
    if (count == 0)
        return FAIL(cx, seq, "%s: at least one pool is required (or leave pools: out for one pool)", path);
    if (count > PDR_CONFIG_MAX_POOLS)
        return FAIL(cx, seq, "%s: %zu pools, at most %d are allowed", path, count, PDR_CONFIG_MAX_POOLS);
    if ((c->pools = calloc(count, sizeof(*c->pools))) == NULL)
        return FAIL(cx, seq, "out of memory");
    c->n_pools = count;
    for (size_t i = 0; i < count; i++) {
        c->pools[i].protocol = PDR_PROTO_SGLANG;
        c->pools[i].policy_prefill = PDR_POLICY_ROUND_ROBIN;
        c->pools[i].policy_decode = PDR_POLICY_LEAST_LOAD;
        pdr__discovery_conf_defaults(&c->pools[i].discovery);
        pdr__cache_aware_unset(&c->pools[i]);
    }
    for (size_t i = 0; i < count; i++) {
        char ipath[160];
        const yaml_node_t *item = seq_item(cx, seq, path, i, ipath);
        if (item == NULL)
            return PDR_ECONFIG;
        if (item->type != YAML_MAPPING_NODE)
            return FAIL(cx, item, "%s: expected a mapping {name, models, workers}, got %s", ipath,
                        is_null(item) ? "null" : node_kind(item));
        pdr_pool_conf_t *pl = &c->pools[i];
        cx->pool = pl;
        int rc = walk_map(cx, item, ipath, fields, pl);
        cx->pool = NULL;
        if (rc != 0)
            return rc;
        if (pl->name == NULL)
            return FAIL(cx, item, "%s: missing required key 'name'", ipath);
        if (pl->n_models == 0)
            return FAIL(cx, item, "%s: missing required key 'models' (the model names the pool serves)",
                        ipath);
        const yaml_node_t *workers = map_get(cx->doc, item, "workers");
        static const char *const roles[] = {"prefill", "decode"};
        size_t counts[] = {pl->n_prefill, pl->n_decode};
        for (int r = 0; r < 2; r++) {
            if (counts[r] != 0 || pdr__role_discovered(&pl->discovery, (pdr_role_t)r))
                continue;
            const yaml_node_t *list = map_get(cx->doc, workers, roles[r]);
            return FAIL(cx,
                        list != NULL      ? list
                        : workers != NULL ? workers
                                          : item,
                        "%s.workers.%s: " PDR__NO_POOL_WORKERS_FMT, ipath, roles[r], roles[r], roles[r],
                        roles[r]);
        }
        /* A worker serves one pool: its URL may not appear in an earlier one. */
        for (int r = 0; r < 2; r++) {
            const pdr_worker_conf_t *ws = r == 0 ? pl->prefill : pl->decode;
            const yaml_node_t *list = map_get(cx->doc, workers, roles[r]);
            for (size_t k = 0; k < counts[r]; k++)
                for (size_t j = 0; j < i; j++) {
                    const pdr_pool_conf_t *o = &c->pools[j];
                    const pdr_worker_conf_t *os = r == 0 ? o->prefill : o->decode;
                    size_t on = r == 0 ? o->n_prefill : o->n_decode;
                    for (size_t m = 0; m < on; m++)
                        if (strcmp(os[m].url, ws[k].url) == 0) {
                            const yaml_node_t *at = list;
                            if (list != NULL && list->type == YAML_SEQUENCE_NODE)
                                at = yaml_document_get_node(cx->doc, list->data.sequence.items.start[k]);
                            return FAIL(cx, at != NULL ? at : item,
                                        "%s.workers.%s[%zu]: worker '%s' is in pool '%s' already; a worker "
                                        "serves one pool",
                                        ipath, roles[r], k, ws[k].url, o->name);
                        }
                }
        }
    }
    return 0;
}

/* The loader's reading of a schema type. */
static const enum ftype key_ftype[] = {
    [PDR_CT_INT] = F_INT,
    [PDR_CT_INT64] = F_INT64,
    [PDR_CT_DOUBLE] = F_DOUBLE,
    [PDR_CT_BOOL] = F_BOOL,
    [PDR_CT_STR] = F_STR,
    [PDR_CT_STR_OPT] = F_STR_OPT,
    [PDR_CT_PATH] = F_PATH,
    [PDR_CT_PROTOCOL] = F_PROTOCOL,
    [PDR_CT_POLICY] = F_POLICY,
    [PDR_CT_LEVEL] = F_LEVEL,
    [PDR_CT_RELAY] = F_RELAY,
    [PDR_CT_SEED] = F_SEED,
    [PDR_CT_TLS_VER] = F_TLS_VERSION,
    [PDR_CT_SCHEME] = F_SCHEME,
    [PDR_CT_BPORT] = F_BPORT,
    [PDR_CT_HOSTNAME] = F_HOSTNAME,
    [PDR_CT_RESOLVER] = F_RESOLVER,
    [PDR_CT_SELECTOR] = F_SELECTOR,
    [PDR_CT_NAMESPACE] = F_NAMESPACE,
    [PDR_CT_URL] = F_API_URL,
    [PDR_CT_ANNOTATION] = F_ANNOTATION,
};

/* An F_KEY row as the field its schema row describes; 0, or PDR_ECONFIG when the table lacks the row (a
 * bug here, caught by the schema test). */
static int key_field(const struct field *f, struct field *out)
{
    const pdr_conf_key_t *k = pdr_conf_key_find(f->schema, strlen(f->schema));
    if (k == NULL)
        return PDR_ECONFIG;
    size_t off = f->off == KEY_OFF        ? k->off
                 : f->off == KEY_OFF_DISC ? k->off - offsetof(pdr_config_t, discovery)
                                          : f->off;
    *out = (struct field){f->key, key_ftype[k->type], off, k->min, k->max, NULL, NULL};
    return 0;
}

static int apply(struct ctx *cx, const struct field *f, const yaml_node_t *v, const char *path, void *base)
{
    char buf[80];
    char *p = (char *)base + f->off;
    int64_t iv;
    size_t len;
    int rc;
    switch (f->type) {
    case F_KEY: {
        struct field row;
        if (key_field(f, &row) != 0)
            return FAIL(cx, v, "%s: internal error: not in the schema", path);
        return apply(cx, &row, v, path, base);
    }
    case F_SECTION:
        return walk_map(cx, v, path, f->sub, base);
    case F_DISCOVERY:
        return walk_map(cx, v, path, f->sub, p);
    case F_POLICIES:
        if (v->type == YAML_SCALAR_NODE) {
            pdr_policy_kind_t k;
            rc = get_policy(cx, v, path, &k);
            if (rc == 0 && cx->pool != NULL)
                cx->pool->policy_prefill = cx->pool->policy_decode = k;
            else if (rc == 0)
                cx->c->policy_prefill = cx->c->policy_decode = k;
            return rc;
        }
        return walk_map(cx, v, path, f->sub, base);
    case F_STR:
        return get_string(cx, v, path, (char **)(void *)p);
    case F_STR_OPT:
        if (is_null(v)) {
            free(*(char **)(void *)p);
            *(char **)(void *)p = NULL;
            return 0;
        }
        return get_string(cx, v, path, (char **)(void *)p);
    case F_PATH: {
        rc = need_scalar(cx, v, path, "a path");
        if (rc != 0)
            return rc;
        const unsigned char *s = (const unsigned char *)sval(v, &len);
        if (len == 0 || s[0] != '/')
            return FAIL(cx, v, "%s: must start with '/', got '%s'", path, show(v, buf, sizeof(buf)));
        for (size_t i = 0; i < len; i++)
            if (s[i] <= 0x20 || s[i] == 0x7f)
                return FAIL(cx, v, "%s: must not contain spaces or control characters", path);
        return get_string(cx, v, path, (char **)(void *)p);
    }
    case F_INT:
        rc = get_int(cx, v, path, f->min, f->max, &iv);
        if (rc == 0)
            *(int *)(void *)p = (int)iv;
        return rc;
    case F_BOOL: {
        rc = need_scalar(cx, v, path, "true or false");
        if (rc != 0)
            return rc;
        const char *s = sval(v, &len);
        if (len == 4 && (memcmp(s, "true", 4) == 0 || memcmp(s, "True", 4) == 0 || memcmp(s, "TRUE", 4) == 0))
            *(int *)(void *)p = 1;
        else if (len == 5 &&
                 (memcmp(s, "false", 5) == 0 || memcmp(s, "False", 5) == 0 || memcmp(s, "FALSE", 5) == 0))
            *(int *)(void *)p = 0;
        else
            return FAIL(cx, v, "%s: expected true or false, got '%s'", path, show(v, buf, sizeof(buf)));
        return 0;
    }
    case F_DOUBLE:
        return get_double(cx, v, path, (double)f->min, (double)f->max, (double *)(void *)p);
    case F_INT64:
        rc = get_int(cx, v, path, f->min, f->max, &iv);
        if (rc == 0)
            *(int64_t *)(void *)p = iv;
        return rc;
    case F_PROTOCOL: {
        rc = need_scalar(cx, v, path, "a protocol name");
        if (rc != 0)
            return rc;
        const char *s = sval(v, &len);
        if (pdr__protocol_parse(s, len, (pdr_protocol_t *)(void *)p) != 0)
            return FAIL(cx, v, "%s: unknown protocol '%s', expected sglang, vllm or pdshim", path,
                        show(v, buf, sizeof(buf)));
        if (*(pdr_protocol_t *)(void *)p == PDR_PROTO_PDSHIM && cx->pdshim == NULL) {
            cx->pdshim = v;
            snprintf(cx->pdshim_path, sizeof(cx->pdshim_path), "%s", path);
        }
        return 0;
    }
    case F_POLICY:
        return get_policy(cx, v, path, (pdr_policy_kind_t *)(void *)p);
    case F_RELAY: {
        int m;
        rc = get_either(cx, v, path, "relay mode", "first_byte", PDR_RELAY_FIRST_BYTE, "after_prefill",
                        PDR_RELAY_AFTER_PREFILL, &m);
        if (rc == 0)
            *(pdr_relay_t *)(void *)p = (pdr_relay_t)m;
        return rc;
    }
    case F_CONF_SECTION:
        return walk_map(cx, v, path, f->sub, cx->c);
    case F_TLS_VERSION:
        return get_either(cx, v, path, "TLS version", "TLS1.2", PDR_TLS_1_2, "TLS1.3", PDR_TLS_1_3,
                          (int *)(void *)p);
    case F_ALPN:
        return load_alpn(cx, v, path);
    case F_SCHEME:
        return get_either(cx, v, path, "scheme", "http", 0, "https", 1, (int *)(void *)p);
    case F_SEED:
        return get_either(cx, v, path, "seed", "smallest_tree", PDR_CA_SEED_SMALLEST_TREE, "consistent_hash",
                          PDR_CA_SEED_CONSISTENT_HASH, (int *)(void *)p);
    case F_LEVEL: {
        rc = need_scalar(cx, v, path, "a log level");
        if (rc != 0)
            return rc;
        const char *s = sval(v, &len);
        const char *canon = pdr__log_level_parse(s, len);
        if (canon == NULL)
            return FAIL(cx, v,
                        "%s: unknown level '%s', expected debug, info, warn (warning), error or critical",
                        path, show(v, buf, sizeof(buf)));
        if (pdr__config_set_str((char **)(void *)p, canon, strlen(canon)) != 0)
            return FAIL(cx, v, "out of memory");
        return 0;
    }
    case F_WORKERS:
        return load_workers(cx, v, path, (pdr_role_t)f->min);
    case F_URL: {
        pdr_worker_conf_t *w = base;
        char msg[512];
        rc = need_scalar(cx, v, path, "a URL");
        if (rc != 0)
            return rc;
        const char *s = sval(v, &len);
        if (memchr(s, '\0', len) != NULL)
            return FAIL(cx, v, "%s: contains a NUL character", path);
        int bport = w->bootstrap_port, dp = w->dp_size;
        if (pdr_worker_conf_parse_url(s, w, msg, sizeof(msg)) != 0)
            return FAIL(cx, v, "%s: %s", path, msg);
        w->bootstrap_port = bport;
        w->dp_size = dp;
        return 0;
    }
    case F_BPORT: {
        if (v->type == YAML_SCALAR_NODE) {
            const char *s = sval(v, &len);
            if (is_null(v) || (len == 4 && (memcmp(s, "none", 4) == 0 || memcmp(s, "None", 4) == 0 ||
                                            memcmp(s, "NONE", 4) == 0))) {
                *(int *)(void *)p = -1;
                return 0;
            }
        }
        rc = get_int(cx, v, path, f->min, f->max, &iv);
        if (rc == 0)
            *(int *)(void *)p = (int)iv;
        return rc;
    }
    case F_BPORT_BAD:
        return FAIL(cx, v, "%s: only prefill workers have a bootstrap port", path);
    case F_NETWORKS:
        return load_networks(cx, v, path);
    case F_NAMES:
        return load_names(cx, v, path);
    case F_KEY_FILE: {
        pdr_config_t *c = cx->c;
        char msg[512];
        if (c->worker_api_key != NULL)
            pdr__secure_zero(c->worker_api_key, strlen(c->worker_api_key));
        free(c->worker_api_key);
        c->worker_api_key = NULL;
        free(c->worker_api_key_file);
        c->worker_api_key_file = NULL;
        if (is_null(v))
            return 0;
        rc = get_string(cx, v, path, &c->worker_api_key_file);
        if (rc != 0)
            return rc;
        if (pdr__read_secret_file(c->worker_api_key_file, &c->worker_api_key, msg, sizeof(msg)) != 0)
            return FAIL(cx, v, "%s: %s", path, msg);
        return 0;
    }
    case F_ORIGINS:
        return load_origins(cx, v, path);
    case F_TICKET_KEYS:
        return load_ticket_keys(cx, v, path, (int)f->min);
    case F_ANNOTATION:
    case F_KV_ENDPOINT:
    case F_HOSTNAME:
    case F_RESOLVER:
    case F_SELECTOR:
    case F_NAMESPACE:
    case F_API_URL: {
        char msg[256];
        rc = need_scalar(cx, v, path, "a string");
        if (rc != 0)
            return rc;
        const char *s = sval(v, &len);
        if (memchr(s, '\0', len) != NULL)
            return FAIL(cx, v, "%s: contains a NUL character", path);
        if (checker(f->type)(s, len, msg, sizeof(msg)) != 0)
            return FAIL(cx, v, "%s: %s", path, msg);
        return get_string(cx, v, path, (char **)(void *)p);
    }
    case F_DNS_ROLE: {
        rc = walk_map(cx, v, path, f->sub, base);
        if (rc != 0)
            return rc;
        const pdr_discovery_conf_t *d = base;
        if (d->dns.role[f->min].name == NULL)
            return FAIL(cx, v, "%s: missing required key 'name'", path);
        if (d->dns.role[f->min].port == 0)
            return FAIL(cx, v, "%s: missing required key 'port' (the workers' HTTP port)", path);
        return 0;
    }
    case F_POOLS:
        return load_pools(cx, v, path, f->sub);
    case F_POOL_NAME:
        return get_pool_name(cx, v, path, (char **)(void *)p);
    case F_MODELS:
        return load_models(cx, v, path);
    case F_K8S_ROLE:
        rc = walk_map(cx, v, path, f->sub, base);
        if (rc == 0 && ((const pdr_discovery_conf_t *)base)->kubernetes.role[f->min].selector == NULL)
            return FAIL(cx, v, "%s: missing required key 'selector'", path);
        return rc;
    }
    return FAIL(cx, v, "%s: internal error: unknown field type", path);
}

/* Every key of fields, comma-separated, into out (VALID_KEYS_MAX holds the longest list, limits' of about
 * 400 bytes, with room to grow; a list that ever outgrows it ends in "..." rather than looking complete). */
#define VALID_KEYS_MAX 1024
static void valid_keys(const struct field *fields, char *out, size_t outlen)
{
    size_t n = 0;
    out[0] = '\0';
    for (const struct field *f = fields; f->key != NULL; f++) {
        int w = snprintf(out + n, outlen - n, "%s%s", n ? ", " : "", f->key);
        if (w < 0 || (size_t)w >= outlen - n) {
            if (outlen >= 4)
                memcpy(out + outlen - 4, "...", 4);
            return;
        }
        n += (size_t)w;
    }
}

static int walk_map(struct ctx *cx, const yaml_node_t *map, const char *path, const struct field *fields,
                    void *base)
{
    char buf[80], keys[VALID_KEYS_MAX];
    const char *where = path[0] ? path : "the top level";
    if (map->type != YAML_MAPPING_NODE)
        return FAIL(cx, map, "%s: expected a mapping, got %s", path[0] ? path : "configuration",
                    is_null(map) ? "null" : node_kind(map));
    uint32_t seen = 0;
    for (const yaml_node_pair_t *pair = map->data.mapping.pairs.start; pair < map->data.mapping.pairs.top;
         pair++) {
        const yaml_node_t *k = yaml_document_get_node(cx->doc, pair->key);
        const yaml_node_t *v = yaml_document_get_node(cx->doc, pair->value);
        if (k == NULL || v == NULL)
            return FAIL(cx, map, "%s: incomplete key/value pair", where);
        if (k->type != YAML_SCALAR_NODE)
            return FAIL(cx, k, "keys must be scalars, got %s (in %s%s%s)", node_kind(k), path[0] ? "'" : "",
                        where, path[0] ? "'" : "");
        size_t len;
        const char *key = sval(k, &len);
        int idx = -1;
        for (int i = 0; fields[i].key != NULL; i++) {
            if (strlen(fields[i].key) == len && memcmp(fields[i].key, key, len) == 0) {
                idx = i;
                break;
            }
        }
        if (idx < 0) {
            valid_keys(fields, keys, sizeof(keys));
            if (path[0])
                return FAIL(cx, k, "unknown key '%s' in '%s' (valid keys: %s)", show(k, buf, sizeof(buf)),
                            path, keys);
            return FAIL(cx, k, "unknown key '%s' at the top level (valid keys: %s)",
                        show(k, buf, sizeof(buf)), keys);
        }
        if ((seen & (1u << idx)) && path[0])
            return FAIL(cx, k, "duplicate key '%s' in '%s'", fields[idx].key, path);
        if (seen & (1u << idx))
            return FAIL(cx, k, "duplicate key '%s' at the top level", fields[idx].key);
        seen |= 1u << idx;
        char sub[160];
        snprintf(sub, sizeof(sub), "%.120s%s%.30s", path, path[0] ? "." : "", fields[idx].key);
        int rc = apply(cx, &fields[idx], v, sub, base);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static const yaml_node_t *map_get(yaml_document_t *doc, const yaml_node_t *map, const char *key)
{
    if (map == NULL || map->type != YAML_MAPPING_NODE)
        return NULL;
    for (const yaml_node_pair_t *pair = map->data.mapping.pairs.start; pair < map->data.mapping.pairs.top;
         pair++) {
        const yaml_node_t *k = yaml_document_get_node(doc, pair->key);
        if (k != NULL && k->type == YAML_SCALAR_NODE && k->data.scalar.length == strlen(key) &&
            memcmp(k->data.scalar.value, key, k->data.scalar.length) == 0)
            return yaml_document_get_node(doc, pair->value);
    }
    return NULL;
}

/* The key node of `key` in map, or NULL. */
static const yaml_node_t *map_key(yaml_document_t *doc, const yaml_node_t *map, const char *key)
{
    for (const yaml_node_pair_t *pair = map->data.mapping.pairs.start; pair < map->data.mapping.pairs.top;
         pair++) {
        const yaml_node_t *k = yaml_document_get_node(doc, pair->key);
        if (k != NULL && k->type == YAML_SCALAR_NODE && k->data.scalar.length == strlen(key) &&
            memcmp(k->data.scalar.value, key, k->data.scalar.length) == 0)
            return k;
    }
    return NULL;
}

/* Translates libyaml's parser error into "name:line:col: problem context". */
static void syntax_error(struct ctx *cx, const yaml_parser_t *p, const char *text, size_t textlen)
{
    if (p->error == YAML_MEMORY_ERROR) {
        pdr__config_err(cx->err, cx->errlen, "%s: out of memory while parsing", cx->name);
        return;
    }
    if (p->error == YAML_READER_ERROR) {
        /* Reader errors carry a byte offset, not a mark: count lines up to it ourselves. */
        yaml_mark_t m = {0, 0, 0};
        size_t off = p->problem_offset < textlen ? p->problem_offset : textlen;
        for (size_t i = 0; i < off; i++) {
            if (text[i] == '\n') {
                m.line++;
                m.column = 0;
            } else {
                m.column++;
            }
        }
        fail_mark(cx, m, "%s (byte 0x%02x at offset %zu)", p->problem ? p->problem : "invalid input",
                  (unsigned)p->problem_value & 0xffu, p->problem_offset);
        return;
    }
    const char *problem = p->problem ? p->problem : "syntax error";
    if (p->context == NULL) {
        fail_mark(cx, p->problem_mark, "%s", problem);
    } else if (p->context_mark.line != p->problem_mark.line ||
               p->context_mark.column != p->problem_mark.column) {
        fail_mark(cx, p->problem_mark, "%s %s that started at line %zu, column %zu", problem, p->context,
                  p->context_mark.line + 1, p->context_mark.column + 1);
    } else {
        fail_mark(cx, p->problem_mark, "%s %s", problem, p->context);
    }
}

pdr_config_t *pdr_config_load_string(const char *text, size_t len, const char *name, char *err, size_t errlen)
{
    struct ctx cx = {.name = name != NULL ? name : "<string>", .err = err, .errlen = errlen};
    yaml_parser_t parser;
    yaml_document_t doc, extra;
    pdr_config_t *c = NULL;
    int rc = PDR_ECONFIG;

    pdr__config_err(err, errlen, "%s: unknown error", cx.name);
    if (text == NULL)
        len = 0;
    if (len > PDR_CONFIG_MAX_FILE) {
        pdr__config_err(err, errlen, "%s: larger than %u bytes", cx.name, PDR_CONFIG_MAX_FILE);
        return NULL;
    }
    if (!yaml_parser_initialize(&parser)) {
        pdr__config_err(err, errlen, "%s: out of memory", cx.name);
        return NULL;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)(text != NULL ? text : ""), len);
    if (!yaml_parser_load(&parser, &doc)) {
        syntax_error(&cx, &parser, text, len);
        yaml_parser_delete(&parser);
        return NULL;
    }
    cx.doc = &doc;
    const yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root == NULL || is_null(root)) {
        fail_mark(&cx, doc.start_mark, "empty configuration");
        goto out;
    }
    /* A second document is an error, and so is a syntax error after the first one. */
    if (!yaml_parser_load(&parser, &extra)) {
        syntax_error(&cx, &parser, text, len);
        goto out;
    }
    const yaml_node_t *second = yaml_document_get_root_node(&extra);
    if (second != NULL) {
        fail_mark(&cx, second->start_mark, "only one YAML document is allowed");
        yaml_document_delete(&extra);
        goto out;
    }
    yaml_document_delete(&extra);

    c = pdr_config_new_default();
    if (c == NULL || pdr__config_set_str(&c->source, cx.name, strlen(cx.name)) != 0) {
        pdr__config_err(err, errlen, "%s: out of memory", cx.name);
        goto out;
    }
    cx.c = c;
    rc = walk_map(&cx, root, "", top_fields, c);
    if (rc != 0)
        goto out;
    if (cx.pdshim != NULL && c->ticket.keys == NULL) {
        rc = FAIL(&cx, cx.pdshim, "%s: " PDR__PDSHIM_NEEDS_KEYS, cx.pdshim_path);
        goto out;
    }

    /* pools: or the one-pool shorthand (workers, protocol, policy, discovery at the top), not both. */
    const yaml_node_t *pools = map_key(&doc, root, "pools");
    if (pools != NULL) {
        static const char *const shorthand[] = {"workers", "protocol", "policy", "discovery"};
        for (size_t i = 0; i < sizeof(shorthand) / sizeof(shorthand[0]); i++) {
            const yaml_node_t *v = map_key(&doc, root, shorthand[i]);
            if (v == NULL)
                continue;
            if (i == 3)
                rc = FAIL(
                    &cx, v,
                    "discovery: not allowed beside pools: (line %zu); with pools:, each pool has its own "
                    "discovery: section (a top-level discovery: is the one-pool form)",
                    pools->start_mark.line + 1);
            else
                rc = FAIL(&cx, v,
                          "%s: not allowed beside pools: (line %zu); with pools:, each pool has its own "
                          "workers, protocol and policy (a top-level %s: is the one-pool form)",
                          shorthand[i], pools->start_mark.line + 1, shorthand[i]);
            goto out;
        }
    } else {
        /* Each role needs static workers or a discovery source. */
        const yaml_node_t *workers = map_get(&doc, root, "workers");
        const char *roles[] = {"prefill", "decode"};
        size_t counts[] = {c->n_prefill, c->n_decode};
        for (int r = 0; r < 2; r++) {
            if (counts[r] != 0 || pdr__role_discovered(&c->discovery, (pdr_role_t)r))
                continue;
            const yaml_node_t *list = map_get(&doc, workers, roles[r]);
            const yaml_node_t *at = list != NULL ? list : workers != NULL ? workers : root;
            rc = FAIL(&cx, at, PDR__NO_WORKERS_FMT, roles[r], roles[r], roles[r], roles[r]);
            goto out;
        }
    }
    /* Final guard: every value was checked where it was read, so this only fails on a bug here. */
    char msg[512];
    rc = pdr_config_validate(c, msg, sizeof(msg));
    if (rc != 0)
        FAIL(&cx, root, "%s", msg);

out:
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    if (rc != 0) {
        pdr_config_unref(c);
        return NULL;
    }
    return c;
}

/* ticket.key_file: PATH, or ticket.key_files: [PATH, ...] (list): each file read and checked now, so a
 * missing or short key is an error at its own line and column. */
static int load_ticket_keys(struct ctx *cx, const yaml_node_t *v, const char *path, int list)
{
    if (cx->ticket_keys != NULL)
        return FAIL(cx, v, "%s: ticket has key_file or key_files, not both (line %zu)", path,
                    cx->ticket_keys->start_mark.line + 1);
    cx->ticket_keys = v;
    const yaml_node_t *items[PDR_KEYRING_MAX];
    char *files[PDR_KEYRING_MAX] = {0};
    size_t n = 0;
    int rc = 0;
    char ipath[160];
    if (!list) {
        items[n] = v;
        rc = get_string(cx, v, path, &files[n]);
        n++;
    } else {
        if (v->type != YAML_SEQUENCE_NODE)
            return FAIL(cx, v, "%s: expected a sequence of key files, got %s", path, node_kind(v));
        size_t cnt = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
        if (cnt == 0 || cnt > PDR_KEYRING_MAX)
            return FAIL(cx, v, "%s: between 1 and %d key files (the first signs, all verify), not %zu", path,
                        PDR_KEYRING_MAX, cnt);
        for (size_t i = 0; rc == 0 && i < cnt; i++) {
            items[n] = seq_item(cx, v, path, i, ipath);
            if (items[n] == NULL) {
                rc = PDR_ECONFIG;
                break;
            }
            rc = get_string(cx, items[n], ipath, &files[n]);
            n++;
        }
    }
    /* Each file alone first, so that the error points at the file that is wrong. */
    char msg[512];
    for (size_t i = 0; rc == 0 && i < n; i++) {
        pdr_keyring_t one;
        const char *f = files[i];
        if (pdr_keyring_load(&one, &f, 1, msg, sizeof(msg)) != 0)
            rc = FAIL(cx, items[i], "%s: %s", list ? "ticket.key_files" : path, msg);
        pdr_keyring_wipe(&one);
    }
    if (rc == 0 && pdr__ticket_conf_load(cx->c, (const char *const *)files, n, msg, sizeof(msg)) != 0)
        rc = FAIL(cx, v, "%s: %s", path, msg);
    for (size_t i = 0; i < n; i++)
        free(files[i]);
    return rc;
}

pdr_config_t *pdr_config_load_file(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        pdr__config_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    int failed = buf == NULL;
    while (!failed) {
        if (len == cap) {
            if (cap > PDR_CONFIG_MAX_FILE) {
                fclose(f);
                free(buf);
                pdr__config_err(err, errlen, "%s: larger than %u bytes", path, PDR_CONFIG_MAX_FILE);
                return NULL;
            }
            char *nb = realloc(buf, cap * 2);
            if (nb == NULL) {
                failed = 1;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0) {
            if (ferror(f)) {
                int e = errno;
                fclose(f);
                free(buf);
                pdr__config_err(err, errlen, "%s: cannot read: %s", path, strerror(e));
                return NULL;
            }
            break;
        }
    }
    fclose(f);
    if (failed) {
        free(buf);
        pdr__config_err(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    pdr_config_t *c = pdr_config_load_string(buf, len, path, err, errlen);
    free(buf);
    return c;
}
