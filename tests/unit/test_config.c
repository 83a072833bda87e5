/*
 * Unit test of config/: YAML loading (every key, defaults, each class of error with its exact
 * file:line:col), worker URLs and the command-line flags. Exit 0 when every check passes; each
 * failed check is printed with its line. Runs under ASan+LeakSanitizer in the sanitizer build, so
 * every snapshot is released.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include "config.h"
#include "err.h"
#include "keyring.h"
#include "runner.h"

static int failures;

#define CHECK(cond)                                                                                          \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                         \
            failures++;                                                                                      \
        }                                                                                                    \
    } while (0)

#define CHECK_STR(got, want)                                                                                 \
    do {                                                                                                     \
        const char *g_ = (got), *w_ = (want);                                                                \
        if (g_ == NULL || strcmp(g_, w_) != 0) {                                                             \
            fprintf(stderr, "%s:%d: got '%s', want '%s'\n", __FILE__, __LINE__, g_ ? g_ : "(null)", w_);     \
            failures++;                                                                                      \
        }                                                                                                    \
    } while (0)

static char tmpdir[] = "/tmp/pdr_test_config.XXXXXX";

static const char *write_file(const char *name, const char *text)
{
    static char path[4][256];
    static int next;
    char *p = path[next++ % 4];
    snprintf(p, sizeof(path[0]), "%s/%s", tmpdir, name);
    FILE *f = fopen(p, "w");
    if (f == NULL) {
        perror(p);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
    return p;
}

static pdr_config_t *load(const char *text, char *err, size_t errlen)
{
    return pdr_config_load_string(text, strlen(text), "bad.yaml", err, errlen);
}

/* Loading must fail with exactly this message (want ends with '*': a prefix). */
static void expect_error(int line, const char *text, const char *want)
{
    char err[1024];
    pdr_config_t *c = load(text, err, sizeof(err));
    size_t wl = strlen(want);
    int prefix = wl > 0 && want[wl - 1] == '*';
    if (c != NULL) {
        fprintf(stderr, "%s:%d: loaded, want error '%s'\n", __FILE__, line, want);
        failures++;
        pdr_config_unref(c);
        return;
    }
    if (prefix ? strncmp(err, want, wl - 1) != 0 : strcmp(err, want) != 0) {
        fprintf(stderr, "%s:%d: error\n  got  '%s'\n  want '%s'\n", __FILE__, line, err, want);
        failures++;
    }
}
#define EXPECT_ERROR(text, want) expect_error(__LINE__, text, want)

#define WORKERS "workers:\n  prefill: [ http://127.0.0.1:30001 ]\n  decode: [ http://127.0.0.1:30002 ]\n"

static void test_full_file(void)
{
    static const char text[] =
        "# every key\n"
        "listen:   { host: 127.0.0.2, port: 9000 }\n"
        "admin:    { host: 127.0.0.3, port: 0, token_file: /etc/pdrouter/token }\n"
        "protocol: sglang\n"
        "policy:   { prefill: random, decode: round_robin }\n"
        "workers:\n"
        "  prefill:\n"
        "    - { url: http://127.0.0.1:30001, bootstrap_port: 8998 }\n"
        "    - url: \"http://[::1]:30003/\"\n"
        "      bootstrap_port: null\n"
        "    - url: http://prefill-2.local\n"
        "      bootstrap_port: none\n"
        "    - http://10.0.0.9:30005\n"
        "  decode:\n"
        "    - { url: http://127.0.0.1:30002 }\n"
        "    - url: http://[fe80::1]:30004\n"
        "health:   { path: /healthz, interval_ms: 500, timeout_ms: 2500, rise: 1, fall: 5 }\n"
        "timeouts: { connect_ms: 100, first_byte_ms: 5000, kv_transfer_ms: 7000,\n"
        "            stream_idle_ms: 9000 }\n"
        "limits:   { max_body_bytes: 1048576, max_inflight: 10, max_connections_per_worker: 32,\n"
        "            max_inflight_per_pool: 6, max_inflight_per_worker: 3, queue: 20, queue_timeout_ms: "
        "1500,\n"
        "            rate_limit_rps: 2.5, rate_limit_burst: 4 }\n"
        "retries:  { max: 0 }\n"
        "pd: { relay: after_prefill }\n"
        "log:      { access_log: off, level: warning }\n"
        "lifecycle: { drain_grace_ms: 0, drain_timeout_ms: 12000 }\n";
    char err[512] = "";
    const char *path = write_file("full.yaml", text);
    pdr_config_t *c = pdr_config_load_file(path, err, sizeof(err));
    if (c == NULL) {
        fprintf(stderr, "full file: %s\n", err);
        failures++;
        return;
    }
    CHECK_STR(c->source, path);
    CHECK_STR(c->listen_host, "127.0.0.2");
    CHECK(c->listen_port == 9000);
    CHECK_STR(c->admin_host, "127.0.0.3");
    CHECK(c->admin_port == 0);
    CHECK_STR(c->admin_token_file, "/etc/pdrouter/token");
    CHECK(c->protocol == PDR_PROTO_SGLANG);
    CHECK(c->policy_prefill == PDR_POLICY_RANDOM);
    CHECK(c->policy_decode == PDR_POLICY_ROUND_ROBIN);
    CHECK(c->n_prefill == 4);
    CHECK(c->n_decode == 2);
    if (c->n_prefill == 4 && c->n_decode == 2) {
        CHECK_STR(c->prefill[0].url, "http://127.0.0.1:30001");
        CHECK_STR(c->prefill[0].host, "127.0.0.1");
        CHECK(c->prefill[0].port == 30001);
        CHECK(c->prefill[0].is_ipv6 == 0);
        CHECK(c->prefill[0].bootstrap_port == 8998);
        CHECK_STR(c->prefill[1].url, "http://[::1]:30003");
        CHECK_STR(c->prefill[1].host, "::1");
        CHECK(c->prefill[1].is_ipv6 == 1);
        CHECK(c->prefill[1].port == 30003);
        CHECK(c->prefill[1].bootstrap_port == -1);
        CHECK_STR(c->prefill[2].host, "prefill-2.local");
        CHECK(c->prefill[2].port == 80);
        CHECK(c->prefill[2].bootstrap_port == -1);
        CHECK_STR(c->prefill[3].url, "http://10.0.0.9:30005");
        CHECK(c->prefill[3].bootstrap_port == -1);
        CHECK_STR(c->decode[0].url, "http://127.0.0.1:30002");
        CHECK(c->decode[0].bootstrap_port == -1);
        CHECK_STR(c->decode[1].host, "fe80::1");
        CHECK(c->decode[1].is_ipv6 == 1);
        CHECK(c->decode[1].port == 30004);
    }
    CHECK_STR(c->health.path, "/healthz");
    CHECK(c->health.interval_ms == 500);
    CHECK(c->health.timeout_ms == 2500); /* timeout above interval is allowed */
    CHECK(c->health.rise == 1);
    CHECK(c->health.fall == 5);
    CHECK(c->timeouts.connect_ms == 100);
    CHECK(c->timeouts.first_byte_ms == 5000);
    CHECK(c->timeouts.kv_transfer_ms == 7000);
    CHECK(c->timeouts.stream_idle_ms == 9000);
    CHECK(c->lifecycle.drain_grace_ms == 0);
    CHECK(c->lifecycle.drain_timeout_ms == 12000);
    CHECK(c->limits.max_body_bytes == 1048576);
    CHECK(c->limits.max_inflight == 10);
    CHECK(c->limits.max_connections_per_worker == 32);
    CHECK(c->limits.max_inflight_per_pool == 6 && c->limits.max_inflight_per_worker == 3);
    CHECK(c->limits.queue == 20 && c->limits.queue_timeout_ms == 1500);
    CHECK(c->limits.rate_limit_rps == 2.5 && c->limits.rate_limit_burst == 4);
    CHECK(c->retries.max == 0);
    CHECK(c->pd.relay == PDR_RELAY_AFTER_PREFILL);
    CHECK_STR(c->log.access_log, "off");
    CHECK_STR(c->log.level, "warn");
    CHECK(pdr_config_validate(c, err, sizeof(err)) == 0);

    /* Reference counting: the snapshot survives until the last reference goes. */
    CHECK(pdr_config_ref(c) == c);
    CHECK(c->refcnt == 2);
    pdr_config_unref(c);
    CHECK(c->refcnt == 1);
    CHECK_STR(c->listen_host, "127.0.0.2");
    pdr_config_unref(c);
}

static void check_defaults_but_token(const pdr_config_t *c)
{
    CHECK_STR(c->listen_host, "0.0.0.0");
    CHECK(c->listen_port == 8000);
    CHECK_STR(c->admin_host, "127.0.0.1");
    CHECK(c->admin_port == 8001);
    CHECK(c->protocol == PDR_PROTO_SGLANG);
    CHECK(c->policy_prefill == PDR_POLICY_ROUND_ROBIN);
    CHECK(c->policy_decode == PDR_POLICY_LEAST_LOAD);
    CHECK_STR(c->health.path, "/health");
    CHECK(c->health.interval_ms == 2000);
    CHECK(c->health.timeout_ms == 1000);
    CHECK(c->health.rise == 2);
    CHECK(c->health.fall == 3);
    CHECK(c->health.drain_status == 410);
    CHECK(c->timeouts.connect_ms == 1000);
    CHECK(c->timeouts.first_byte_ms == 60000);
    CHECK(c->timeouts.kv_transfer_ms == 30000);
    CHECK(c->timeouts.stream_idle_ms == 300000);
    CHECK(c->lifecycle.drain_grace_ms == 5000);
    CHECK(c->lifecycle.drain_timeout_ms == 30000);
    CHECK(c->limits.max_body_bytes == 33554432);
    CHECK(c->limits.max_inflight == 4096);
    CHECK(c->limits.max_connections_per_worker == 0);
    CHECK(c->limits.max_inflight_per_pool == 0 && c->limits.max_inflight_per_worker == 0);
    CHECK(c->limits.queue == 100 && c->limits.queue_timeout_ms == 60000); /* sglang's defaults */
    CHECK(c->limits.rate_limit_rps == 0 && c->limits.rate_limit_burst == 0);
    CHECK(c->retries.max == 2);
    CHECK(c->pd.relay == PDR_RELAY_FIRST_BYTE);
    CHECK_STR(c->log.access_log, "-");
    CHECK_STR(c->log.level, "info");
}

static void check_defaults(const pdr_config_t *c)
{
    check_defaults_but_token(c);
    CHECK(c->admin_token_file == NULL);
}

static void test_defaults(void)
{
    char err[512];
    pdr_config_t *c = pdr_config_new_default();
    CHECK(c != NULL);
    if (c == NULL)
        return;
    check_defaults(c);
    CHECK(c->n_prefill == 0 && c->n_decode == 0 && c->prefill == NULL && c->decode == NULL);
    CHECK(c->refcnt == 1);
    /* Without workers the defaults are not runnable. */
    CHECK(pdr_config_validate(c, err, sizeof(err)) == PDR_ECONFIG);
    CHECK_STR(err, "workers.prefill: at least one prefill worker is required, or a discovery source for it "
                   "(discovery.dns.prefill.name or discovery.kubernetes.prefill.selector)");
    /* A snapshot built in code with protocol pdshim and no ticket keys is refused like a file is. */
    c->protocol = PDR_PROTO_PDSHIM;
    CHECK(pdr_config_validate(c, err, sizeof(err)) == PDR_ECONFIG);
    CHECK_STR(err, "protocol: protocol pdshim signs tickets: set ticket: { key_file: FILE } (or key_files)");
    pdr_config_unref(c);

    /* protocol: vllm runs: loaded and validated like sglang, a bootstrap_port accepted (and unused). */
    c = load("workers:\n  prefill: [ { url: http://127.0.0.1:30001, bootstrap_port: 8998 } ]\n"
             "  decode: [ http://127.0.0.1:30002 ]\nprotocol: vllm\n",
             err, sizeof(err));
    CHECK(c != NULL);
    if (c != NULL) {
        CHECK(c->protocol == PDR_PROTO_VLLM);
        CHECK(pdr_config_validate(c, err, sizeof(err)) == 0);
        pdr_config_unref(c);
    }

    /* A file with only workers receives every default. */
    c = load(WORKERS, err, sizeof(err));
    CHECK(c != NULL);
    if (c == NULL) {
        fprintf(stderr, "  %s\n", err);
        return;
    }
    check_defaults(c);
    CHECK_STR(c->source, "bad.yaml");
    CHECK(c->n_prefill == 1 && c->n_decode == 1);
    CHECK(c->prefill[0].bootstrap_port == -1); /* absent: none */
    pdr_config_unref(c);

    /* Shorthands: one policy for both roles; token_file null. */
    c = load(WORKERS "policy: random\nadmin: { token_file: ~ }\nlog: { level: debug }\n", err, sizeof(err));
    CHECK(c != NULL);
    if (c != NULL) {
        CHECK(c->policy_prefill == PDR_POLICY_RANDOM && c->policy_decode == PDR_POLICY_RANDOM);
        CHECK(c->admin_token_file == NULL);
        CHECK_STR(c->log.level, "debug");
        pdr_config_unref(c);
    }

    /* The contract's example configuration (docs/config.md), verbatim. */
    static const char design[] =
        "listen:   { host: 0.0.0.0, port: 8000 }\n"
        "admin:    { host: 127.0.0.1, port: 8001, token_file: /path/to/token }   # token_file optional in "
        "dev\n"
        "protocol: sglang            # sglang | vllm | pdshim (how the ticket is handed to workers)\n"
        "policy:   { prefill: round_robin, decode: least_load }\n"
        "workers:\n"
        "  prefill:\n"
        "    - { url: http://127.0.0.1:30001, bootstrap_port: 8998 }\n"
        "  decode:\n"
        "    - { url: http://127.0.0.1:30002 }\n"
        "health:   { path: /health, interval_ms: 2000, timeout_ms: 1000, rise: 2, fall: 3 }\n"
        "timeouts: { connect_ms: 1000, first_byte_ms: 60000, kv_transfer_ms: 30000, stream_idle_ms: 300000 "
        "}\n"
        "limits:   { max_body_bytes: 33554432, max_inflight: 4096 }\n"
        "retries:  { max: 2 }\n";
    c = load(design, err, sizeof(err));
    CHECK(c != NULL);
    if (c != NULL) {
        check_defaults_but_token(c);
        CHECK_STR(c->admin_token_file, "/path/to/token");
        CHECK(c->prefill[0].bootstrap_port == 8998);
        pdr_config_unref(c);
    }

    CHECK_STR(pdr_policy_name(PDR_POLICY_LEAST_LOAD), "least_load");
    CHECK_STR(pdr_protocol_name(PDR_PROTO_PDSHIM), "pdshim");
    pdr_policy_kind_t pk;
    pdr_protocol_t pt;
    CHECK(pdr_policy_parse("round_robin", &pk) == 0 && pk == PDR_POLICY_ROUND_ROBIN);
    CHECK(pdr_policy_parse("cache_aware", &pk) == 0 && pk == PDR_POLICY_CACHE_AWARE);
    CHECK(pdr_policy_parse("power_of_two", &pk) == 0 && pk == PDR_POLICY_POWER_OF_TWO);
    CHECK(pdr_policy_parse("bucket", &pk) == PDR_EINVAL);
    CHECK(pdr_protocol_parse("vllm", &pt) == 0 && pt == PDR_PROTO_VLLM);
    CHECK(pdr_protocol_parse("grpc", &pt) == PDR_EINVAL);
}

static void test_errors(void)
{
    /* Unknown keys. */
    EXPECT_ERROR(WORKERS "timeouts:\n  connect_ms: 1000\n  foo: 1\n",
                 "bad.yaml:6:3: unknown key 'foo' in 'timeouts' (valid keys: connect_ms, first_byte_ms, "
                 "kv_transfer_ms, stream_idle_ms, kv_transfer_ms_per_1k_tokens, client_header_ms, "
                 "client_body_ms, keepalive_idle_ms, lingering_ms, lingering_idle_ms)");
    EXPECT_ERROR("lisen: { port: 1 }\n", "bad.yaml:1:1: unknown key 'lisen' at the top level*");
    /* The lists of valid keys are whole, however long (the top level's and limits' are past 256 bytes). */
    EXPECT_ERROR(
        "pool: {}\n",
        "bad.yaml:1:1: unknown key 'pool' at the top level (valid keys: listen, admin, metrics, cors, "
        "protocol, policy, workers, health, timeouts, limits, retries, outlier, breaker, compat, affinity, "
        "migration, epp, sidecar, pd, "
        "cache_aware, "
        "disaggregation, kv_events, ticket, shim_events, kv_admission, admission, load, log, lifecycle, "
        "tracing, "
        "threads, "
        "dp_aware, h2_nghttp2, tokenizer, discovery, pools, request_id_headers)");
    EXPECT_ERROR(
        "limits: { max_body: 1 }\n",
        "bad.yaml:1:11: unknown key 'max_body' in 'limits' (valid keys: max_body_bytes, max_inflight, "
        "max_connections_per_worker, h2_max_resets, max_merge_bytes, max_header_bytes, max_headers, "
        "max_batch_items, max_client_connections, max_idle_client_connections, max_lingering_bytes, "
        "h2_max_connection_body_bytes, max_body_memory_bytes, h2_max_concurrent_streams, "
        "h2_max_control_frames, max_inflight_per_pool, max_inflight_per_worker, queue, queue_timeout_ms, "
        "rate_limit_rps, rate_limit_burst)");
    EXPECT_ERROR("workers:\n  prefill:\n    - { url: http://a:1, weight: 2 }\n",
                 "bad.yaml:3:26: unknown key 'weight' in 'workers.prefill[0]' (valid keys: url, "
                 "bootstrap_port, dp_size, kv_events, kv_events_replay)");

    /* Duplicate keys (libyaml does not check them). */
    EXPECT_ERROR("listen:\n  port: 1\n  port: 2\n", "bad.yaml:3:3: duplicate key 'port' in 'listen'");
    EXPECT_ERROR("retries: {max: 1}\nretries: {max: 2}\n",
                 "bad.yaml:2:1: duplicate key 'retries' at the top level");
    EXPECT_ERROR("workers:\n  prefill:\n    - url: http://a:1\n      url: http://a:2\n",
                 "bad.yaml:4:7: duplicate key 'url' in 'workers.prefill[0]'");

    /* Bad integers and ranges. */
    EXPECT_ERROR(WORKERS "timeouts: { connect_ms: 5, first_byte_ms: fast }\n",
                 "bad.yaml:4:43: timeouts.first_byte_ms: expected an integer, got 'fast'");
    EXPECT_ERROR("listen: { port: 70000 }\n",
                 "bad.yaml:1:17: listen.port: 70000 is out of range, expected 1..65535");
    EXPECT_ERROR("listen: { port: 0 }\n", "bad.yaml:1:17: listen.port: 0 is out of range, expected 1..65535");
    EXPECT_ERROR(
        WORKERS "timeouts: { kv_transfer_ms_per_1k_tokens: -1 }\n",
        "bad.yaml:4:43: timeouts.kv_transfer_ms_per_1k_tokens: -1 is out of range, expected 0..86400000");
    EXPECT_ERROR("admin: { port: -1 }\n", "bad.yaml:1:16: admin.port: -1 is out of range, expected 0..65535");
    EXPECT_ERROR("health: { rise: 0 }\n", "bad.yaml:1:17: health.rise: 0 is out of range, expected 1..1000");
    EXPECT_ERROR("health: { drain_status: 600 }\n",
                 "bad.yaml:1:25: health.drain_status: 600 is out of range, expected 0..599");
    EXPECT_ERROR(WORKERS "health: { drain_status: 204 }\n",
                 "bad.yaml:1:1: health.drain_status: 204 is not a 3xx*");
    EXPECT_ERROR("health: { timeout_ms: 0 }\n",
                 "bad.yaml:1:23: health.timeout_ms: 0 is out of range, expected 1..86400000");
    EXPECT_ERROR("lifecycle: { drain_timeout_ms: 0 }\n",
                 "bad.yaml:1:32: lifecycle.drain_timeout_ms: 0 is out of range, expected 1..86400000");
    EXPECT_ERROR("lifecycle:\n  drain_grace_ms: -1\n",
                 "bad.yaml:2:19: lifecycle.drain_grace_ms: -1 is out of range, expected 0..86400000");
    EXPECT_ERROR("lifecycle: { drain_ms: 1 }\n",
                 "bad.yaml:1:14: unknown key 'drain_ms' in 'lifecycle' (valid keys: "
                 "drain_grace_ms, drain_timeout_ms, worker_startup_timeout_ms)");
    EXPECT_ERROR("retries: { max: 11 }\n", "bad.yaml:1:17: retries.max: 11 is out of range, expected 0..10");
    EXPECT_ERROR("limits: { max_body_bytes: 1023 }\n",
                 "bad.yaml:1:27: limits.max_body_bytes: 1023 is out of range, expected 1024..1099511627776");
    EXPECT_ERROR(
        "limits: { max_inflight: 99999999999999999999999 }\n",
        "bad.yaml:1:25: limits.max_inflight: 99999999999999999999999 is out of range, expected 1..10000000");
    EXPECT_ERROR("limits: { queue: -1 }\n",
                 "bad.yaml:1:18: limits.queue: -1 is out of range, expected 0..1000000");
    EXPECT_ERROR("limits: { queue_timeout_ms: 0 }\n",
                 "bad.yaml:1:29: limits.queue_timeout_ms: 0 is out of range, expected 1..86400000");
    EXPECT_ERROR("limits: { rate_limit_rps: fast }\n", "bad.yaml:1:27: *");
    EXPECT_ERROR("limits: { max_connections_per_worker: -1 }\n",
                 "bad.yaml:1:39: limits.max_connections_per_worker: -1 is out of range, expected 0..1000000");
    EXPECT_ERROR("timeouts: { connect_ms: 1.5 }\n",
                 "bad.yaml:1:25: timeouts.connect_ms: expected an integer, got '1.5'");
    EXPECT_ERROR("timeouts: { connect_ms: }\n",
                 "bad.yaml:1:25: timeouts.connect_ms: expected an integer, got null");
    EXPECT_ERROR("health: { path: healthz }\n",
                 "bad.yaml:1:17: health.path: must start with '/', got 'healthz'");
    EXPECT_ERROR("protocol: grpc\n",
                 "bad.yaml:1:11: protocol: unknown protocol 'grpc', expected sglang, vllm or pdshim");
    /* pdshim without ticket keys: refused where written, not at start. */
    EXPECT_ERROR("listen: { port: 8000 }\nprotocol:   pdshim\n",
                 "bad.yaml:2:13: protocol: protocol pdshim signs tickets: set ticket: { key_file: FILE } (or "
                 "key_files)");
    EXPECT_ERROR("policy: { decode: bucket }\n",
                 "bad.yaml:1:19: policy.decode: unknown policy 'bucket', expected round_robin, "
                 "least_load, random, cache_aware, power_of_two or precise_prefix");
    EXPECT_ERROR("cache_aware: { cache_threshold: 1.5 }\n",
                 "bad.yaml:1:33: cache_aware.cache_threshold: 1.5 is out of range, expected 0..1");
    EXPECT_ERROR("cache_aware: { balance_rel_threshold: x }\n",
                 "bad.yaml:1:39: cache_aware.balance_rel_threshold: expected a number, got 'x'");
    EXPECT_ERROR(
        "cache_aware: { max_tree_size: 10 }\n",
        "bad.yaml:1:31: cache_aware.max_tree_size: 10 is out of range, expected 1024..1099511627776");
    EXPECT_ERROR("pd: { relay: eager }\n",
                 "bad.yaml:1:14: pd.relay: unknown relay mode 'eager', expected first_byte or after_prefill");
    EXPECT_ERROR("pd: { relay: [a] }\n",
                 "bad.yaml:1:14: pd.relay: expected first_byte or after_prefill, got a sequence");
    EXPECT_ERROR("log: { level: loud }\n", "bad.yaml:1:15: log.level: unknown level 'loud', expected debug, "
                                           "info, warn (warning), error or critical");

    /* Wrong node types. */
    EXPECT_ERROR("listen: 8000\n", "bad.yaml:1:9: listen: expected a mapping, got a scalar");
    EXPECT_ERROR("health:\n  path: [a, b]\n", "bad.yaml:2:9: health.path: expected a path, got a sequence");
    EXPECT_ERROR("listen: { host: { a: 1 } }\n",
                 "bad.yaml:1:17: listen.host: expected a string, got a mapping");
    EXPECT_ERROR("workers:\n  prefill: { url: http://a:1 }\n",
                 "bad.yaml:2:12: workers.prefill: expected a sequence of workers, got a mapping");
    EXPECT_ERROR("- a\n- b\n", "bad.yaml:1:1: configuration: expected a mapping, got a sequence");
    EXPECT_ERROR("? [a]\n: 1\n", "bad.yaml:1:3: keys must be scalars, got a sequence (in the top level)");

    /* Workers. */
    EXPECT_ERROR("workers:\n  prefill:\n    - bootstrap_port: 8998\n",
                 "bad.yaml:3:7: workers.prefill[0]: missing required key 'url'");
    EXPECT_ERROR("workers:\n  prefill:\n    - url: ftp://a:1\n",
                 "bad.yaml:3:12: workers.prefill[0].url: 'ftp://a:1': unsupported URL scheme; use "
                 "http://host[:port] or https://");
    EXPECT_ERROR(WORKERS "listen:\n  tls:\n    cert_file: /c.pem\n",
                 "bad.yaml:1:1: listen.tls: cert_file and key_file go together (give both for TLS on the "
                 "listener, or neither)");
    EXPECT_ERROR(WORKERS "listen:\n  tls:\n    client_ca_file: /ca.pem\n",
                 "bad.yaml:1:1: listen.tls.client_ca_file: set without listen.tls.cert_file and key_file");
    EXPECT_ERROR(
        "listen:\n  tls:\n    min_version: TLS1.1\n",
        "bad.yaml:3:18: listen.tls.min_version: unknown TLS version 'TLS1.1', expected TLS1.2 or TLS1.3");
    EXPECT_ERROR("listen:\n  tls:\n    alpn: [h3]\n",
                 "bad.yaml:3:12: listen.tls.alpn[0]: unknown protocol 'h3', expected h2 or http/1.1");
    EXPECT_ERROR(
        WORKERS "  tls:\n    key_file: /k.pem\n",
        "bad.yaml:1:1: workers.tls: cert_file and key_file go together (the router's client certificate "
        "and its key)");
    EXPECT_ERROR(
        "workers:\n  decode:\n    - url: grpc://a:1\n",
        "bad.yaml:3:12: workers.decode[0].url: 'grpc://a:1': unsupported URL scheme; use http://host[:port] "
        "or https://");
    EXPECT_ERROR(
        "workers:\n  decode:\n    - http://a:1/v1\n",
        "bad.yaml:3:7: workers.decode[0]: 'http://a:1/v1': worker URLs take no path, query or fragment "
        "(got '/v1')");
    EXPECT_ERROR("workers:\n  prefill:\n    - { url: http://a:1, bootstrap_port: 0 }\n",
                 "bad.yaml:3:42: workers.prefill[0].bootstrap_port: 0 is out of range, expected 1..65535");
    EXPECT_ERROR(
        "workers:\n  prefill:\n    - http://a:1\n  decode:\n    - { url: http://b:1, bootstrap_port: 8998 "
        "}\n",
        "bad.yaml:5:42: workers.decode[0].bootstrap_port: only prefill workers have a bootstrap port");
    EXPECT_ERROR(
        "workers:\n  prefill:\n    - http://a:1\n    - http://A:1/\n",
        "bad.yaml:4:7: workers.prefill[1]: duplicate worker 'http://a:1' (same as workers.prefill[0])");
    EXPECT_ERROR(
        "workers:\n  decode:\n    - http://[::1]:80\n    - http://[0::1]\n",
        "bad.yaml:4:7: workers.decode[1]: duplicate worker 'http://[::1]' (same as workers.decode[0])");
    /* The file's worker URLs go through the same normalizer as the admin API's. */
    EXPECT_ERROR("workers:\n  decode:\n    - http://127.0.0.1:30002\n    - http://0x7f000001:30002/\n",
                 "bad.yaml:4:7: workers.decode[1]: duplicate worker 'http://127.0.0.1:30002' (same as "
                 "workers.decode[0])");
    EXPECT_ERROR(
        "workers:\n  prefill:\n    - { url: \"http://[::ffff:127.0.0.1]:1\" }\n    - http://127.1:1\n",
        "bad.yaml:4:7: workers.prefill[1]: duplicate worker 'http://127.0.0.1:1' (same as "
        "workers.prefill[0])");
    EXPECT_ERROR(
        "workers:\n  prefill:\n    - http://0.0.0.0:30001\n",
        "bad.yaml:3:7: workers.prefill[0]: 'http://0.0.0.0:30001': 0.0.0.0 is the unspecified address "
        "(it means 'any' when binding), not one a worker can be reached at");
    /* admin.deny_worker_networks: each entry checked where it is written. */
    EXPECT_ERROR(
        WORKERS "admin:\n  deny_worker_networks: [169.254.0.0/16, 10.0.0.1/8]\n",
        "bad.yaml:5:42: admin.deny_worker_networks[1]: '10.0.0.1/8' has bits set past the prefix; the "
        "network is 10.0.0.0/8");
    EXPECT_ERROR(
        WORKERS "admin: { deny_worker_networks: [ \"fe80::/129\" ] }\n",
        "bad.yaml:4:34: admin.deny_worker_networks[0]: 'fe80::/129': the prefix length must be 0..128");
    EXPECT_ERROR(WORKERS "admin: { deny_worker_networks: [ metadata.internal ] }\n",
                 "bad.yaml:4:34: admin.deny_worker_networks[0]: 'metadata.internal' is not an IP network: "
                 "'metadata.internal' is not an IPv4 (a.b.c.d) or IPv6 address");
    EXPECT_ERROR(WORKERS "admin: { deny_worker_networks: 169.254.0.0/16 }\n",
                 "bad.yaml:4:32: admin.deny_worker_networks: expected a sequence of IP networks such as "
                 "[169.254.0.0/16, \"fe80::/10\"], got a scalar");
    EXPECT_ERROR(WORKERS "admin: { deny_worker_networks: [ [1] ] }\n",
                 "bad.yaml:4:34: admin.deny_worker_networks[0]: expected an IP network (ADDRESS or "
                 "ADDRESS/PREFIX), got a sequence");
    EXPECT_ERROR(
        "workers:\n  prefill:\n    - http://a:1\n",
        "bad.yaml:2:3: workers.decode: at least one decode worker is required, or a discovery source "
        "for it (discovery.dns.decode.name or discovery.kubernetes.decode.selector)");
    EXPECT_ERROR("workers:\n  prefill: []\n  decode: [http://a:1]\n",
                 "bad.yaml:2:12: workers.prefill: at least one prefill worker is required, or a discovery "
                 "source for it (discovery.dns.prefill.name or discovery.kubernetes.prefill.selector)");
    EXPECT_ERROR("listen: {}\n", "bad.yaml:1:1: workers.prefill: at least one prefill worker is required*");

    /* Syntax errors: problem, problem mark and context. */
    EXPECT_ERROR(
        "listen:\n  host: a\n port: 1\n",
        "bad.yaml:3:2: did not find expected key while parsing a block mapping that started at line 1, "
        "column 1");
    EXPECT_ERROR(
        "listen: {port: 1\n",
        "bad.yaml:2:1: did not find expected ',' or '}' while parsing a flow mapping that started at line "
        "1, column 9");
    EXPECT_ERROR("a: *foo\n", "bad.yaml:1:4: found undefined alias");
    EXPECT_ERROR("a: 1\n---\nb: 2\n", "bad.yaml:3:1: only one YAML document is allowed");
    EXPECT_ERROR("a: 1\n---\nb: [\n",
                 "bad.yaml:4:1: did not find expected node content while parsing a flow node*");
    EXPECT_ERROR("x: \001\n", "bad.yaml:1:4: control characters are not allowed (byte 0x01 at offset 3)");

    /* Empty documents. */
    EXPECT_ERROR("", "bad.yaml:1:1: empty configuration");
    EXPECT_ERROR("# only a comment\n", "bad.yaml:1:1: empty configuration");
    EXPECT_ERROR("---\n", "bad.yaml:1:1: empty configuration");

    /* Files. */
    char err[512];
    char missing[300];
    snprintf(missing, sizeof(missing), "%s/missing.yaml", tmpdir);
    CHECK(pdr_config_load_file(missing, err, sizeof(err)) == NULL);
    char want[400];
    snprintf(want, sizeof(want), "%s: cannot open: No such file or directory", missing);
    CHECK_STR(err, want);
    const char *p = write_file("empty.yaml", "");
    CHECK(pdr_config_load_file(p, err, sizeof(err)) == NULL);
    snprintf(want, sizeof(want), "%s:1:1: empty configuration", p);
    CHECK_STR(err, want);

    /* A tiny error buffer is still NUL-terminated; a NULL one is allowed. */
    char small[8];
    CHECK(load("listen: 1\n", small, sizeof(small)) == NULL);
    CHECK(strlen(small) == 7);
    CHECK(load("listen: 1\n", NULL, 0) == NULL);
}

static void test_urls(void)
{
    char err[256];
    pdr_worker_conf_t w;
    CHECK(pdr_worker_conf_parse_url("http://[::1]:30001", &w, err, sizeof(err)) == 0);
    CHECK_STR(w.url, "http://[::1]:30001");
    CHECK_STR(w.host, "::1");
    CHECK(w.is_ipv6 == 1 && w.port == 30001 && w.bootstrap_port == -1);
    pdr_worker_conf_clear(&w);
    CHECK(w.url == NULL && w.host == NULL);

    CHECK(pdr_worker_conf_parse_url("http://example.com/", &w, err, sizeof(err)) == 0);
    CHECK_STR(w.url, "http://example.com");
    CHECK_STR(w.host, "example.com");
    CHECK(w.port == 80 && w.is_ipv6 == 0);
    pdr_worker_conf_clear(&w);

    static const char *const bad[] = {
        "",
        "http://",
        "http://:80",
        "http://a:",
        "http://a:0",
        "http://a:65536",
        "http://a:x",
        "http://[::1",
        "http://[zz]:1",
        "http://::1:80",
        "http://a b",
        "http://u@a:1",
        "http://a:1?x=1",
        "http://a:1//",
        "a:1",
        "ftp://a",
        "http://a:-1",
        "http://[::1]x",
        "http://a:1#f",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (pdr_worker_conf_parse_url(bad[i], &w, err, sizeof(err)) != PDR_EINVAL) {
            fprintf(stderr, "%s:%d: URL '%s' accepted\n", __FILE__, __LINE__, bad[i]);
            failures++;
            pdr_worker_conf_clear(&w);
        } else {
            CHECK(w.url == NULL && w.host == NULL);
        }
    }
    CHECK(pdr_worker_conf_parse_url("HTTPS://a:443/", &w, err, sizeof(err)) == 0);
    CHECK_STR(w.url, "https://a");
    CHECK(w.port == 443);
    pdr_worker_conf_clear(&w);
    CHECK(pdr_worker_conf_parse_url("https://[::1]:8443", &w, err, sizeof(err)) == 0);
    CHECK_STR(w.url, "https://[::1]:8443");
    pdr_worker_conf_clear(&w);
    CHECK(pdr_worker_conf_parse_url("http://::1:80", &w, err, sizeof(err)) == PDR_EINVAL);
    CHECK_STR(err, "'http://::1:80': invalid port; write IPv6 addresses in brackets: http://[::1]:30001");
}

/* Spellings of one worker normalize to one URL; addresses no worker can have are refused. */
static void test_url_normalization(void)
{
    static const struct {
        const char *in, *url, *host;
        int port, is_ipv6;
    } same[] = {
        {"http://127.0.0.1:30001", "http://127.0.0.1:30001", "127.0.0.1", 30001, 0},
        {"http://0x7f000001:30001", "http://127.0.0.1:30001", "127.0.0.1", 30001, 0},
        {"http://0X7F000001:30001", "http://127.0.0.1:30001", "127.0.0.1", 30001, 0},
        {"http://2130706433:30001", "http://127.0.0.1:30001", "127.0.0.1", 30001, 0},
        {"http://0177.0.0.1:30001", "http://127.0.0.1:30001", "127.0.0.1", 30001, 0},
        {"http://127.1:30001", "http://127.0.0.1:30001", "127.0.0.1", 30001, 0},
        {"http://127.0.1:30001", "http://127.0.0.1:30001", "127.0.0.1", 30001, 0},
        {"http://0x7f.0.0.0x1:30001/", "http://127.0.0.1:30001", "127.0.0.1", 30001, 0},
        {"http://127.0.0.1.:30001", "http://127.0.0.1:30001", "127.0.0.1", 30001, 0},
        {"http://[::ffff:127.0.0.1]:30001", "http://127.0.0.1:30001", "127.0.0.1", 30001, 0},
        {"http://[::FFFF:7f00:1]:30001", "http://127.0.0.1:30001", "127.0.0.1", 30001, 0},
        {"HTTP://LOCALHOST:30001", "http://localhost:30001", "localhost", 30001, 0},
        {"http://Prefill-0.Svc.Cluster.Local:030001", "http://prefill-0.svc.cluster.local:30001",
         "prefill-0.svc.cluster.local", 30001, 0},
        {"http://10.0.0.5:80/", "http://10.0.0.5", "10.0.0.5", 80, 0},
        {"http://10.0.0.5", "http://10.0.0.5", "10.0.0.5", 80, 0},
        {"http://[0:0:0:0:0:0:0:1]:80", "http://[::1]", "::1", 80, 1},
        {"http://[2001:DB8:0:0::1]:30001/", "http://[2001:db8::1]:30001", "2001:db8::1", 30001, 1},
        {"http://1.2.3.4", "http://1.2.3.4", "1.2.3.4", 80, 0},
        {"http://0.1.2.3:1", "http://0.1.2.3:1", "0.1.2.3", 1, 0},
        {"http://cafe:1", "http://cafe:1", "cafe", 1, 0},
        {"http://1a:1", "http://1a:1", "1a", 1, 0},
        {"http://x.0y:1", "http://x.0y:1", "x.0y", 1, 0},
    };
    char err[256];
    pdr_worker_conf_t w;
    for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++) {
        int rc = pdr_worker_conf_parse_url(same[i].in, &w, err, sizeof(err));
        if (rc != 0 || strcmp(w.url, same[i].url) != 0 || strcmp(w.host, same[i].host) != 0 ||
            w.port != same[i].port || w.is_ipv6 != same[i].is_ipv6) {
            fprintf(stderr, "%s:%d: '%s' -> rc %d '%s' '%s' %d %d, want '%s' '%s' %d %d (%s)\n", __FILE__,
                    __LINE__, same[i].in, rc, rc == 0 ? w.url : "", rc == 0 ? w.host : "", w.port, w.is_ipv6,
                    same[i].url, same[i].host, same[i].port, same[i].is_ipv6, rc ? err : "");
            failures++;
        }
        if (rc == 0)
            pdr_worker_conf_clear(&w);
    }

    static const struct {
        const char *in, *msg;
    } refused[] = {
        {"http://0.0.0.0:30001", "'http://0.0.0.0:30001': 0.0.0.0 is the unspecified address"},
        {"http://0:30001", "0.0.0.0 is the unspecified address"},
        {"http://0x0:30001", "0.0.0.0 is the unspecified address"},
        {"http://[::]:30001", "'http://[::]:30001': :: is the unspecified address"},
        {"http://[::ffff:0.0.0.0]:1", "0.0.0.0 is the unspecified address"},
        {"http://255.255.255.255:1", "255.255.255.255 is the limited broadcast address"},
        {"http://4294967295:1", "255.255.255.255 is the limited broadcast address"},
        {"http://224.0.0.1:1", "224.0.0.1 is a multicast address (224.0.0.0/4)"},
        {"http://239.255.255.250:1", "239.255.255.250 is a multicast address (224.0.0.0/4)"},
        {"http://0xe0000001:1", "224.0.0.1 is a multicast address"},
        {"http://[::ffff:239.1.2.3]:1", "239.1.2.3 is a multicast address"},
        {"http://[ff02::1]:1", "ff02::1 is a multicast address (ff00::/8)"},
        {"http://[FF05::1:3]:1", "ff05::1:3 is a multicast address"},
        {"http://1.2.3.256:1",
         "'1.2.3.256' is read as an IPv4 address (its last label is a number) but is not"},
        {"http://256.1:1", "is read as an IPv4 address"},
        {"http://1.16777216:1", "is read as an IPv4 address"},
        {"http://4294967296:1", "is read as an IPv4 address"},
        {"http://1.2.3.4.5:1", "is read as an IPv4 address"},
        {"http://1..2:1", "is read as an IPv4 address"},
        {"http://08.1:1", "is read as an IPv4 address"},
        {"http://0x1g.1:1", "is read as an IPv4 address"},
        {"http://a.0x:1", "is read as an IPv4 address"},
        {"http://example.123:1", "is read as an IPv4 address"},
    };
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        err[0] = '\0';
        int rc = pdr_worker_conf_parse_url(refused[i].in, &w, err, sizeof(err));
        if (rc != PDR_EINVAL || strstr(err, refused[i].msg) == NULL) {
            fprintf(stderr, "%s:%d: '%s' -> rc %d '%s', want PDR_EINVAL with '%s'\n", __FILE__, __LINE__,
                    refused[i].in, rc, rc == 0 ? w.url : err, refused[i].msg);
            failures++;
            if (rc == 0)
                pdr_worker_conf_clear(&w);
        } else {
            CHECK(w.url == NULL && w.host == NULL);
        }
    }
}

static void test_ipnet(void)
{
    char err[256];
    pdr_ipnet_t net;
    CHECK(pdr_ipnet_parse("169.254.0.0/16", 14, &net, err, sizeof(err)) == 0 && net.family == AF_INET &&
          net.prefix == 16);
    CHECK_STR(net.text, "169.254.0.0/16");
    CHECK(pdr_ipnet_parse("fd00:ec2::254", 13, &net, err, sizeof(err)) == 0 && net.family == AF_INET6 &&
          net.prefix == 128);
    CHECK_STR(net.text, "fd00:ec2::254/128");
    CHECK(pdr_ipnet_parse("::ffff:10.0.0.0/104", 19, &net, err, sizeof(err)) == 0 && net.family == AF_INET &&
          net.prefix == 8);
    CHECK_STR(net.text, "10.0.0.0/8");
    CHECK(pdr_ipnet_parse("0.0.0.0/0", 9, &net, err, sizeof(err)) == 0 && net.prefix == 0);
    static const char *const bad[] = {"",
                                      "/8",
                                      "10.0.0.0/",
                                      "10.0.0.0/33",
                                      "10.0.0.0/-1",
                                      "10.0.0.0/+8",
                                      "10.0.0.0/8x",
                                      "10.1/16",
                                      "0x0a000000/8",
                                      "[::1]",
                                      "::1/129",
                                      "a.b",
                                      "10.0.0.1/8",
                                      "fe80::1/10",
                                      "10.0.0.0/0008"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (pdr_ipnet_parse(bad[i], strlen(bad[i]), &net, err, sizeof(err)) != PDR_EINVAL) {
            fprintf(stderr, "%s:%d: network '%s' accepted\n", __FILE__, __LINE__, bad[i]);
            failures++;
        }
    }
    CHECK(pdr_ipnet_parse("fe80::1/10", 10, &net, err, sizeof(err)) == PDR_EINVAL);
    CHECK_STR(err, "'fe80::1/10' has bits set past the prefix; the network is fe80::/10");

    /* Matching is on the normalized worker address: every spelling of a denied address is found. */
    pdr_config_t *c = pdr_config_new_default();
    CHECK(c != NULL && c->admin_deny_networks.n == 3);
    if (c == NULL)
        return;
    static const struct {
        const char *url;
        long want;
    } m[] = {
        {"http://169.254.169.254", 0},          {"http://0xa9fea9fe:80", 0}, {"http://169.254.43518:1", 0},
        {"http://[::ffff:169.254.169.254]", 0}, {"http://169.255.0.1", -1},  {"http://[fe80::1]:1", 1},
        {"http://[febf:ffff::1]:1", 1},         {"http://[fec0::1]:1", -1},  {"http://[fd00:ec2::254]", 2},
        {"http://[fd00:ec2::255]", -1},         {"http://127.0.0.1:1", -1},  {"http://metadata.internal", -1},
    };
    for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
        pdr_worker_conf_t w;
        CHECK(pdr_worker_conf_parse_url(m[i].url, &w, err, sizeof(err)) == 0);
        long got = pdr_ipnet_find(c->admin_deny_networks.nets, c->admin_deny_networks.n, &w);
        if (got != m[i].want) {
            fprintf(stderr, "%s:%d: %s matched %ld, want %ld\n", __FILE__, __LINE__, m[i].url, got,
                    m[i].want);
            failures++;
        }
        pdr_worker_conf_clear(&w);
    }
    pdr_config_unref(c);

    /* The key replaces the default list; null and [] leave none. */
    c = load(WORKERS "admin: { deny_worker_networks: [ 10.0.0.0/8, \"fd00::/8\", 192.0.2.1 ] }\n", err,
             sizeof(err));
    CHECK(c != NULL && c->admin_deny_networks.n == 3);
    if (c != NULL) {
        CHECK_STR(c->admin_deny_networks.nets[1].text, "fd00::/8");
        CHECK_STR(c->admin_deny_networks.nets[2].text, "192.0.2.1/32");
        pdr_config_unref(c);
    }
    c = load(WORKERS "admin: { deny_worker_networks: [] }\n", err, sizeof(err));
    CHECK(c != NULL && c->admin_deny_networks.n == 0);
    pdr_config_unref(c);
    c = load(WORKERS "admin: { deny_worker_networks: null }\n", err, sizeof(err));
    CHECK(c != NULL && c->admin_deny_networks.n == 0);
    pdr_config_unref(c);
}

static void check_discovery_defaults(const pdr_config_t *c)
{
    for (int r = 0; r < 2; r++) {
        CHECK(c->discovery.dns.role[r].name == NULL);
        CHECK(c->discovery.dns.role[r].port == 0);
        CHECK(c->discovery.kubernetes.role[r].selector == NULL);
        CHECK(c->discovery.kubernetes.role[r].port == 0);
    }
    CHECK(c->discovery.dns.role[PDR_ROLE_PREFILL].bootstrap_port == 8998);
    CHECK(c->discovery.dns.role[PDR_ROLE_DECODE].bootstrap_port == -1);
    CHECK(c->discovery.kubernetes.role[PDR_ROLE_PREFILL].bootstrap_port == 8998);
    CHECK(c->discovery.kubernetes.role[PDR_ROLE_DECODE].bootstrap_port == -1);
    CHECK(c->discovery.dns.interval_ms == 5000);
    CHECK(c->discovery.dns.resolver == NULL);
    CHECK(c->discovery.kubernetes.namespace_ == NULL);
    CHECK(c->discovery.kubernetes.api_server == NULL);
    CHECK(c->discovery.kubernetes.token_file == NULL);
    CHECK(c->discovery.kubernetes.ca_file == NULL);
    CHECK(c->discovery.kubernetes.watch_timeout_s == 300);
}

static void test_discovery(void)
{
    char err[512];
    pdr_config_t *c = pdr_config_new_default();
    CHECK(c != NULL);
    if (c == NULL)
        return;
    check_discovery_defaults(c);
    pdr_config_unref(c);
    c = load(WORKERS, err, sizeof(err));
    CHECK(c != NULL);
    if (c != NULL) {
        check_discovery_defaults(c);
        pdr_config_unref(c);
    }

    /* Every key; no static workers at all. */
    static const char full[] =
        "discovery:\n"
        "  dns:\n"
        "    interval_ms: 100\n"
        "    resolver: 127.0.0.1:5353\n"
        "    prefill: { name: sglang-prefill.ns.svc.cluster.local, port: 30000,\n"
        "               bootstrap_port: 9000 }\n"
        "    decode:  { name: sglang-decode.ns.svc.cluster.local., port: 30001, scheme: https }\n"
        "  kubernetes:\n"
        "    namespace: sglang\n"
        "    api_server: https://10.0.0.1:443\n"
        "    token_file: /var/run/token\n"
        "    ca_file: ca.crt\n"
        "    watch_timeout_s: 3600\n"
        "    prefill: { selector: \"app=sglang,component=prefill\", port: 30000,\n"
        "               bootstrap_port: none }\n"
        "    decode:  { selector: \"app.kubernetes.io/name=sglang,tier!=x,gpu,!old\", scheme: https }\n";
    c = load(full, err, sizeof(err));
    CHECK(c != NULL);
    if (c == NULL) {
        fprintf(stderr, "  %s\n", err);
        return;
    }
    CHECK(c->n_prefill == 0 && c->n_decode == 0);
    CHECK(c->discovery.dns.interval_ms == 100);
    CHECK_STR(c->discovery.dns.resolver, "127.0.0.1:5353");
    CHECK_STR(c->discovery.dns.role[PDR_ROLE_PREFILL].name, "sglang-prefill.ns.svc.cluster.local");
    CHECK(c->discovery.dns.role[PDR_ROLE_PREFILL].port == 30000);
    CHECK(c->discovery.dns.role[PDR_ROLE_PREFILL].bootstrap_port == 9000);
    CHECK_STR(c->discovery.dns.role[PDR_ROLE_DECODE].name, "sglang-decode.ns.svc.cluster.local.");
    CHECK(c->discovery.dns.role[PDR_ROLE_DECODE].port == 30001);
    CHECK(c->discovery.dns.role[PDR_ROLE_DECODE].bootstrap_port == -1);
    CHECK(c->discovery.dns.role[PDR_ROLE_DECODE].https == 1 &&
          c->discovery.dns.role[PDR_ROLE_PREFILL].https == 0);
    CHECK_STR(c->discovery.kubernetes.namespace_, "sglang");
    CHECK_STR(c->discovery.kubernetes.api_server, "https://10.0.0.1:443");
    CHECK_STR(c->discovery.kubernetes.token_file, "/var/run/token");
    CHECK_STR(c->discovery.kubernetes.ca_file, "ca.crt");
    CHECK(c->discovery.kubernetes.watch_timeout_s == 3600);
    CHECK_STR(c->discovery.kubernetes.role[PDR_ROLE_PREFILL].selector, "app=sglang,component=prefill");
    CHECK(c->discovery.kubernetes.role[PDR_ROLE_PREFILL].port == 30000);
    CHECK(c->discovery.kubernetes.role[PDR_ROLE_PREFILL].bootstrap_port == -1);
    CHECK_STR(c->discovery.kubernetes.role[PDR_ROLE_DECODE].selector,
              "app.kubernetes.io/name=sglang,tier!=x,gpu,!old");
    CHECK(c->discovery.kubernetes.role[PDR_ROLE_DECODE].port == 0);
    CHECK(c->discovery.kubernetes.role[PDR_ROLE_DECODE].bootstrap_port == -1);
    CHECK(c->discovery.kubernetes.role[PDR_ROLE_DECODE].https == 1 &&
          c->discovery.kubernetes.role[PDR_ROLE_PREFILL].https == 0);
    CHECK(pdr_config_validate(c, err, sizeof(err)) == 0);
    pdr_config_unref(c);

    /* One role static, the other discovered; role defaults; the resolver's other spellings. */
    static const char *const resolvers[] = {"10.0.0.53", "\"[fd00::53]:5353\"", "\"[::1]\"", "fd00::53"};
    for (size_t i = 0; i < sizeof(resolvers) / sizeof(resolvers[0]); i++) {
        char text[512];
        snprintf(text, sizeof(text),
                 "workers: { prefill: [ http://127.0.0.1:30001 ] }\n"
                 "discovery:\n  dns:\n    resolver: %s\n    decode: { name: decode.test, port: 80 }\n"
                 "  kubernetes: { prefill: { selector: app } }\n",
                 resolvers[i]);
        c = load(text, err, sizeof(err));
        CHECK(c != NULL);
        if (c == NULL) {
            fprintf(stderr, "  %s: %s\n", resolvers[i], err);
            continue;
        }
        CHECK(c->n_prefill == 1 && c->n_decode == 0);
        CHECK(c->discovery.dns.role[PDR_ROLE_PREFILL].name == NULL);
        CHECK(c->discovery.dns.role[PDR_ROLE_PREFILL].bootstrap_port == 8998);
        CHECK(c->discovery.dns.interval_ms == 5000);
        CHECK(c->discovery.kubernetes.role[PDR_ROLE_PREFILL].bootstrap_port == 8998);
        CHECK(c->discovery.kubernetes.role[PDR_ROLE_PREFILL].port == 0);
        CHECK(c->discovery.kubernetes.watch_timeout_s == 300);
        CHECK(c->discovery.kubernetes.namespace_ == NULL);
        pdr_config_unref(c);
    }

    /* A snapshot built in code: validate applies the same rules. */
    c = pdr_config_new_default();
    if (c != NULL) {
        c->discovery.dns.role[PDR_ROLE_PREFILL].name = strdup("prefill.test");
        c->discovery.kubernetes.role[PDR_ROLE_DECODE].selector = strdup("app=x");
        CHECK(pdr_config_validate(c, err, sizeof(err)) == PDR_ECONFIG);
        CHECK_STR(err, "discovery.dns.prefill.port: 0 is out of range, expected 1..65535");
        c->discovery.dns.role[PDR_ROLE_PREFILL].port = 30000;
        CHECK(pdr_config_validate(c, err, sizeof(err)) == 0);
        c->discovery.kubernetes.role[PDR_ROLE_DECODE].bootstrap_port = 8998;
        CHECK(pdr_config_validate(c, err, sizeof(err)) == PDR_ECONFIG);
        CHECK_STR(err,
                  "discovery.kubernetes.decode.bootstrap_port: only prefill workers have a bootstrap port");
        c->discovery.kubernetes.role[PDR_ROLE_DECODE].bootstrap_port = -1;
        c->discovery.dns.resolver = strdup("localhost");
        CHECK(pdr_config_validate(c, err, sizeof(err)) == PDR_ECONFIG);
        CHECK_STR(err, "discovery.dns.resolver: 'localhost' is not a resolver address: expected IPv4[:port], "
                       "[IPv6]:port or IPv6");
        free(c->discovery.dns.resolver);
        c->discovery.dns.resolver = NULL;
        c->discovery.dns.interval_ms = 99;
        CHECK(pdr_config_validate(c, err, sizeof(err)) == PDR_ECONFIG);
        CHECK_STR(err, "discovery.dns.interval_ms: 99 is out of range, expected 100..3600000");
        c->discovery.dns.interval_ms = 100;
        free(c->discovery.kubernetes.role[PDR_ROLE_DECODE].selector);
        c->discovery.kubernetes.role[PDR_ROLE_DECODE].selector = NULL;
        CHECK(pdr_config_validate(c, err, sizeof(err)) == PDR_ECONFIG);
        CHECK_STR(err, "workers.decode: at least one decode worker is required, or a discovery source for it "
                       "(discovery.dns.decode.name or discovery.kubernetes.decode.selector)");
        pdr_config_unref(c);
    }

    /* --config with discovery only: the flags path accepts it. */
    const char *path = write_file("cli-discovery.yaml", "discovery:\n  dns:\n"
                                                        "    prefill: { name: p.test, port: 1 }\n"
                                                        "    decode: { name: d.test, port: 2 }\n");
    const char *argv[] = {"pdrouter", "--config", path, "--port", "7002", NULL};
    pdr_cli_t cli;
    CHECK(pdr_config_parse_args(5, (char **)argv, &cli, err, sizeof(err)) == 0 && cli.config != NULL);
    if (cli.config != NULL) {
        CHECK(cli.config->listen_port == 7002);
        CHECK(cli.config->n_prefill == 0);
        CHECK_STR(cli.config->discovery.dns.role[PDR_ROLE_DECODE].name, "d.test");
        pdr_config_unref(cli.config);
    }
}

#define DNS_HEAD "discovery:\n  dns:\n"
#define K8S_HEAD "discovery:\n  kubernetes:\n"

static void test_discovery_errors(void)
{
    /* Structure. */
    EXPECT_ERROR(WORKERS "discovery:\n  consul: {}\n",
                 "bad.yaml:5:3: unknown key 'consul' in 'discovery' (valid keys: dns, kubernetes)");
    EXPECT_ERROR(WORKERS "discovery:\n  dns:\n    ttl: 1\n",
                 "bad.yaml:6:5: unknown key 'ttl' in 'discovery.dns' (valid keys: interval_ms, resolver, "
                 "prefill, decode)");
    EXPECT_ERROR(
        WORKERS K8S_HEAD "    prefill: { selector: a, weight: 1 }\n",
        "bad.yaml:6:29: unknown key 'weight' in 'discovery.kubernetes.prefill' (valid keys: selector, "
        "port, bootstrap_port, scheme)");
    EXPECT_ERROR(WORKERS DNS_HEAD "    decode: { name: d, port: 1, scheme: ftp }\n",
                 "bad.yaml:6:41: discovery.dns.decode.scheme: unknown scheme 'ftp', expected http or https");
    EXPECT_ERROR(WORKERS DNS_HEAD "    interval_ms: 100\n    interval_ms: 200\n",
                 "bad.yaml:7:5: duplicate key 'interval_ms' in 'discovery.dns'");
    EXPECT_ERROR(WORKERS "discovery: {}\ndiscovery: {}\n",
                 "bad.yaml:5:1: duplicate key 'discovery' at the top level");
    EXPECT_ERROR(WORKERS "discovery: dns\n", "bad.yaml:4:12: discovery: expected a mapping, got a scalar");
    EXPECT_ERROR(WORKERS DNS_HEAD "    prefill:\n",
                 "bad.yaml:6:13: discovery.dns.prefill: expected a mapping, got null");

    /* dns. */
    EXPECT_ERROR(WORKERS DNS_HEAD "    interval_ms: 99\n",
                 "bad.yaml:6:18: discovery.dns.interval_ms: 99 is out of range, expected 100..3600000");
    EXPECT_ERROR(WORKERS DNS_HEAD "    interval_ms: 3600001\n",
                 "bad.yaml:6:18: discovery.dns.interval_ms: 3600001 is out of range, expected 100..3600000");
    EXPECT_ERROR(WORKERS DNS_HEAD "    resolver: dns.google\n",
                 "bad.yaml:6:15: discovery.dns.resolver: 'dns.google' is not a resolver address: expected "
                 "IPv4[:port], [IPv6]:port or IPv6");
    EXPECT_ERROR(WORKERS DNS_HEAD "    resolver: 10.0.0.1:0\n",
                 "bad.yaml:6:15: discovery.dns.resolver: '10.0.0.1:0': invalid port, expected 1..65535");
    EXPECT_ERROR(WORKERS DNS_HEAD "    resolver: \"[::1\"\n",
                 "bad.yaml:6:15: discovery.dns.resolver: '[::1' is not a resolver address*");
    EXPECT_ERROR(WORKERS DNS_HEAD "    resolver: \"[::1]:99999\"\n",
                 "bad.yaml:6:15: discovery.dns.resolver: '[::1]:99999': invalid port, expected 1..65535");
    EXPECT_ERROR(WORKERS DNS_HEAD "    resolver: 1.2.3\n",
                 "bad.yaml:6:15: discovery.dns.resolver: '1.2.3' is not a resolver address*");
    EXPECT_ERROR(WORKERS DNS_HEAD "    resolver:\n",
                 "bad.yaml:6:14: discovery.dns.resolver: expected a string, got null");
    EXPECT_ERROR(WORKERS DNS_HEAD "    prefill: { port: 30000 }\n",
                 "bad.yaml:6:14: discovery.dns.prefill: missing required key 'name'");
    EXPECT_ERROR(WORKERS DNS_HEAD "    decode: { name: d.test }\n",
                 "bad.yaml:6:13: discovery.dns.decode: missing required key 'port' (the workers' HTTP port)");
    EXPECT_ERROR(WORKERS DNS_HEAD "    decode: { name: d.test, port: 0 }\n",
                 "bad.yaml:6:35: discovery.dns.decode.port: 0 is out of range, expected 1..65535");
    EXPECT_ERROR(
        WORKERS DNS_HEAD "    decode: { name: d.test, port: 1, bootstrap_port: 8998 }\n",
        "bad.yaml:6:54: discovery.dns.decode.bootstrap_port: only prefill workers have a bootstrap port");
    EXPECT_ERROR(WORKERS DNS_HEAD "    prefill: { name: p.test, port: 1, bootstrap_port: 0 }\n",
                 "bad.yaml:6:55: discovery.dns.prefill.bootstrap_port: 0 is out of range, expected 1..65535");
    EXPECT_ERROR(WORKERS DNS_HEAD "    prefill: { name: \"bad name\", port: 1 }\n",
                 "bad.yaml:6:22: discovery.dns.prefill.name: 'bad name' is not a host name: only letters, "
                 "digits, '-', '_' and '.' are allowed");
    EXPECT_ERROR(WORKERS DNS_HEAD "    prefill: { name: a..b, port: 1 }\n",
                 "bad.yaml:6:22: discovery.dns.prefill.name: 'a..b' is not a host name: each label has 1..63 "
                 "characters");
    EXPECT_ERROR(
        WORKERS DNS_HEAD "    prefill: { name: -a.b, port: 1 }\n",
        "bad.yaml:6:22: discovery.dns.prefill.name: '-a.b' is not a host name: a label starts or ends "
        "with '-'");
    EXPECT_ERROR(WORKERS DNS_HEAD "    prefill: { name: http://p.test, port: 1 }\n",
                 "bad.yaml:6:22: discovery.dns.prefill.name: 'http://p.test' is not a host name*");
    EXPECT_ERROR(WORKERS DNS_HEAD "    prefill: { name: \"\", port: 1 }\n",
                 "bad.yaml:6:22: discovery.dns.prefill.name: '' is not a host name");
    EXPECT_ERROR(WORKERS DNS_HEAD
                 "    prefill: { name: "
                 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.test, port: 1 }\n",
                 "bad.yaml:6:22: discovery.dns.prefill.name: '*");

    /* kubernetes. */
    EXPECT_ERROR(WORKERS K8S_HEAD "    prefill: { port: 30000 }\n",
                 "bad.yaml:6:14: discovery.kubernetes.prefill: missing required key 'selector'");
    EXPECT_ERROR(WORKERS K8S_HEAD "    prefill: { selector: \"\" }\n",
                 "bad.yaml:6:26: discovery.kubernetes.prefill.selector: '': expected a label key at offset 0 "
                 "(terms are k=v, k!=v, k or !k, separated by ',')");
    EXPECT_ERROR(
        WORKERS K8S_HEAD "    prefill: { selector: \"app in (a,b)\" }\n",
        "bad.yaml:6:26: discovery.kubernetes.prefill.selector: 'app in (a,b)': invalid term at offset 0 "
        "(terms are k=v, k!=v, k or !k, separated by ',')");
    EXPECT_ERROR(WORKERS K8S_HEAD "    prefill: { selector: \"app=a,\" }\n",
                 "bad.yaml:6:26: discovery.kubernetes.prefill.selector: 'app=a,': expected a label key at "
                 "offset 6*");
    EXPECT_ERROR(
        WORKERS K8S_HEAD "    prefill: { selector: \"!app=a\" }\n",
        "bad.yaml:6:26: discovery.kubernetes.prefill.selector: '!app=a': '!key' takes no value (offset "
        "4)");
    EXPECT_ERROR(WORKERS K8S_HEAD "    prefill: { selector: \"a=b/c\" }\n",
                 "bad.yaml:6:26: discovery.kubernetes.prefill.selector: 'a=b/c': invalid term at offset 0*");
    EXPECT_ERROR(WORKERS K8S_HEAD "    decode: { selector: a, port: -1 }\n",
                 "bad.yaml:6:34: discovery.kubernetes.decode.port: -1 is out of range, expected 0..65535");
    EXPECT_ERROR(WORKERS K8S_HEAD "    decode: { selector: a, bootstrap_port: 1 }\n",
                 "bad.yaml:6:44: discovery.kubernetes.decode.bootstrap_port: only prefill workers have a "
                 "bootstrap port");
    EXPECT_ERROR(WORKERS K8S_HEAD "    namespace: SGLang\n",
                 "bad.yaml:6:16: discovery.kubernetes.namespace: 'SGLang' is not a namespace name: 1..63 "
                 "lowercase letters, digits or '-', starting and ending with a letter or digit");
    EXPECT_ERROR(WORKERS K8S_HEAD "    api_server: 10.0.0.1:443\n",
                 "bad.yaml:6:17: discovery.kubernetes.api_server: '10.0.0.1:443' is not a URL: expected "
                 "https://host[:port] or http://host[:port]");
    EXPECT_ERROR(
        WORKERS K8S_HEAD "    api_server: \"https://a b\"\n",
        "bad.yaml:6:17: discovery.kubernetes.api_server: 'https://a b': spaces, control characters and "
        "non-ASCII bytes are not allowed");
    EXPECT_ERROR(WORKERS K8S_HEAD "    watch_timeout_s: 0\n",
                 "bad.yaml:6:22: discovery.kubernetes.watch_timeout_s: 0 is out of range, expected 1..3600");
    EXPECT_ERROR(
        WORKERS K8S_HEAD "    watch_timeout_s: 3601\n",
        "bad.yaml:6:22: discovery.kubernetes.watch_timeout_s: 3601 is out of range, expected 1..3600");
    EXPECT_ERROR(WORKERS K8S_HEAD "    token_file: \"\"\n",
                 "bad.yaml:6:17: discovery.kubernetes.token_file: must not be empty");
    EXPECT_ERROR(WORKERS K8S_HEAD "    ca_file: [a]\n",
                 "bad.yaml:6:14: discovery.kubernetes.ca_file: expected a string, got a sequence");

    /* A role without workers needs a discovery source; the other source's settings alone are not one. */
    EXPECT_ERROR(
        "workers: { prefill: [ http://a:1 ] }\ndiscovery: { dns: { interval_ms: 100 } }\n",
        "bad.yaml:1:10: workers.decode: at least one decode worker is required, or a discovery source "
        "for it (discovery.dns.decode.name or discovery.kubernetes.decode.selector)");
    EXPECT_ERROR("discovery: { dns: { decode: { name: d.test, port: 1 } } }\n",
                 "bad.yaml:1:1: workers.prefill: at least one prefill worker is required*");
}

static int parse(const char **argv, pdr_cli_t *cli, char *err, size_t errlen)
{
    int argc = 0;
    while (argv[argc] != NULL)
        argc++;
    return pdr_config_parse_args(argc, (char **)argv, cli, err, errlen);
}

static void expect_argv_error(int line, const char **argv, const char *want)
{
    char err[512];
    pdr_cli_t cli;
    int rc = parse(argv, &cli, err, sizeof(err));
    size_t wl = strlen(want);
    int prefix = wl > 0 && want[wl - 1] == '*';
    if (rc == 0) {
        fprintf(stderr, "%s:%d: flags accepted, want error '%s'\n", __FILE__, line, want);
        failures++;
        pdr_config_unref(cli.config);
        return;
    }
    if (cli.config != NULL || (prefix ? strncmp(err, want, wl - 1) != 0 : strcmp(err, want) != 0)) {
        fprintf(stderr, "%s:%d: error\n  got  '%s'\n  want '%s'\n", __FILE__, line, err, want);
        failures++;
    }
}
#define EXPECT_ARGV_ERROR(want, ...)                                                                         \
    do {                                                                                                     \
        const char *argv_[] = {"pdrouter", __VA_ARGS__, NULL};                                               \
        expect_argv_error(__LINE__, argv_, want);                                                            \
    } while (0)

static void test_cli(void)
{
    char err[512];
    pdr_cli_t cli;

    const char *a1[] = {"pdrouter",
                        "--pd-disaggregation",
                        "--prefill",
                        "http://127.0.0.1:30001",
                        "8998",
                        "--prefill",
                        "http://127.0.0.1:30003",
                        "--prefill",
                        "http://127.0.0.1:30005",
                        "none",
                        "--prefill=http://127.0.0.1:30007",
                        "9001",
                        "--decode",
                        "http://127.0.0.1:30002",
                        "--decode=http://[::1]:30004",
                        "--host",
                        "127.0.0.1",
                        "--port=9000",
                        "--policy",
                        "random",
                        NULL};
    CHECK(parse(a1, &cli, err, sizeof(err)) == 0);
    if (cli.config == NULL) {
        fprintf(stderr, "  %s\n", err);
        failures++;
    } else {
        pdr_config_t *c = cli.config;
        CHECK_STR(c->source, "<command line>");
        CHECK(c->n_prefill == 4 && c->n_decode == 2);
        if (c->n_prefill == 4 && c->n_decode == 2) {
            CHECK_STR(c->prefill[0].url, "http://127.0.0.1:30001");
            CHECK(c->prefill[0].bootstrap_port == 8998);
            CHECK(c->prefill[1].bootstrap_port == -1);
            CHECK(c->prefill[2].bootstrap_port == -1);
            CHECK(c->prefill[3].bootstrap_port == 9001);
            CHECK_STR(c->decode[0].url, "http://127.0.0.1:30002");
            CHECK_STR(c->decode[1].host, "::1");
            CHECK(c->decode[1].is_ipv6 == 1);
        }
        CHECK_STR(c->listen_host, "127.0.0.1");
        CHECK(c->listen_port == 9000);
        CHECK(c->policy_prefill == PDR_POLICY_RANDOM && c->policy_decode == PDR_POLICY_RANDOM);
        CHECK(c->admin_port == 8001);
        CHECK(!cli.show_help && !cli.show_version && cli.check_config == NULL);
        pdr_config_unref(c);
    }

    const char *a2[] = {"pdrouter",
                        "--prefill",
                        "http://a:1",
                        "--decode",
                        "http://b:1",
                        "--prefill-policy",
                        "least_load",
                        "--decode-policy=round_robin",
                        "--protocol",
                        "sglang",
                        "--log-level",
                        "debug",
                        "--access-log",
                        "off",
                        "--retries",
                        "0",
                        "--first-byte-ms",
                        "1500",
                        "--kv-transfer-ms=2500",
                        "--health-interval-ms",
                        "750",
                        "--admin-port",
                        "0",
                        "--drain-grace-ms",
                        "0",
                        "--drain-timeout-ms=4500",
                        NULL};
    CHECK(parse(a2, &cli, err, sizeof(err)) == 0);
    if (cli.config == NULL) {
        fprintf(stderr, "  %s\n", err);
        failures++;
    } else {
        pdr_config_t *c = cli.config;
        CHECK(c->policy_prefill == PDR_POLICY_LEAST_LOAD && c->policy_decode == PDR_POLICY_ROUND_ROBIN);
        CHECK(c->protocol == PDR_PROTO_SGLANG);
        CHECK_STR(c->log.level, "debug");
        CHECK_STR(c->log.access_log, "off");
        CHECK(c->retries.max == 0);
        CHECK(c->timeouts.first_byte_ms == 1500);
        CHECK(c->timeouts.kv_transfer_ms == 2500);
        CHECK(c->health.interval_ms == 750);
        CHECK(c->admin_port == 0);
        CHECK(c->lifecycle.drain_grace_ms == 0);
        CHECK(c->lifecycle.drain_timeout_ms == 4500);
        CHECK(c->prefill[0].bootstrap_port == -1);
        CHECK_STR(c->listen_host, "0.0.0.0");
        CHECK(c->listen_port == 8000);
        pdr_config_unref(c);
    }

    /* The optional bootstrap port is taken only when it is an integer or "none". */
    const char *a3[] = {"pdrouter",   "--prefill",    "http://a:1", "--decode",
                        "http://b:1", "--access-log", "-",          NULL};
    CHECK(parse(a3, &cli, err, sizeof(err)) == 0 && cli.config != NULL);
    if (cli.config != NULL) {
        CHECK(cli.config->prefill[0].bootstrap_port == -1);
        CHECK_STR(cli.config->log.access_log, "-");
        pdr_config_unref(cli.config);
    }

    /* --config with overrides, whatever the order. */
    const char *path = write_file("cli.yaml", WORKERS "listen: { port: 7000 }\nretries: { max: 5 }\n");
    const char *a4[] = {"pdrouter", "--port", "7001", "--config", path, "--policy=random", NULL};
    CHECK(parse(a4, &cli, err, sizeof(err)) == 0 && cli.config != NULL);
    if (cli.config != NULL) {
        CHECK_STR(cli.config->source, path);
        CHECK(cli.config->listen_port == 7001);
        CHECK(cli.config->retries.max == 5);
        CHECK(cli.config->policy_decode == PDR_POLICY_RANDOM);
        CHECK(cli.config->n_prefill == 1);
        pdr_config_unref(cli.config);
    }
    /* A broken --config file reports the file's own position. */
    const char *badp = write_file("cli-bad.yaml", "listen: { port: fast }\n");
    const char *a5[] = {"pdrouter", "--config", badp, NULL};
    CHECK(parse(a5, &cli, err, sizeof(err)) != 0 && cli.config == NULL);
    char want[400];
    snprintf(want, sizeof(want), "%s:1:17: listen.port: expected an integer, got 'fast'", badp);
    CHECK_STR(err, want);

    /* --check-config, --help, --version: no snapshot is built. */
    const char *a6[] = {"pdrouter", "--check-config", "some.yaml", NULL};
    CHECK(parse(a6, &cli, err, sizeof(err)) == 0);
    CHECK_STR(cli.check_config, "some.yaml");
    CHECK(cli.config == NULL);
    const char *a7[] = {"pdrouter", "--check-config=x.yaml", NULL};
    CHECK(parse(a7, &cli, err, sizeof(err)) == 0);
    CHECK_STR(cli.check_config, "x.yaml");
    const char *a8[] = {"pdrouter", "--help", NULL};
    CHECK(parse(a8, &cli, err, sizeof(err)) == 0 && cli.show_help && cli.config == NULL);
    const char *a9[] = {"pdrouter", "-h", NULL};
    CHECK(parse(a9, &cli, err, sizeof(err)) == 0 && cli.show_help && cli.config == NULL);
    const char *a10[] = {"pdrouter", "--version", NULL};
    CHECK(parse(a10, &cli, err, sizeof(err)) == 0 && cli.show_version && cli.config == NULL);
    /* --derive-shim-key KEY_FILE WORKER: two words, no snapshot. */
    const char *a11[] = {"pdrouter", "--derive-shim-key", "master.key", "http://10.0.0.7:30002", NULL};
    CHECK(parse(a11, &cli, err, sizeof(err)) == 0 && cli.config == NULL);
    CHECK_STR(cli.derive_key_file, "master.key");
    CHECK_STR(cli.derive_worker, "http://10.0.0.7:30002");
    const char *a12[] = {"pdrouter", "--derive-shim-key", "master.key", NULL};
    CHECK(parse(a12, &cli, err, sizeof(err)) != 0 &&
          strstr(err, "--derive-shim-key takes two words") != NULL);

    /* Errors. */
    EXPECT_ARGV_ERROR("argv: unknown option '--bogus' (see --help)", "--prefill", "http://a:1", "--bogus");
    EXPECT_ARGV_ERROR("argv: --worker-urls (sglang router) is not supported: pdrouter routes prefill/decode "
                      "pairs only: give --prefill URL and --decode URL",
                      "--worker-urls=http://a:1");
    EXPECT_ARGV_ERROR(
        "argv: --config cannot be combined with --prefill or --decode; list the workers in the file",
        "--config", "x.yaml", "--prefill", "http://a:1");
    EXPECT_ARGV_ERROR(
        "argv: --config cannot be combined with --prefill or --decode; list the workers in the file",
        "--decode", "http://a:1", "--config=x.yaml");
    EXPECT_ARGV_ERROR("argv: no workers: give --prefill URL and --decode URL, or --config FILE (see --help)",
                      "--port", "8000");
    EXPECT_ARGV_ERROR("argv: at least one --decode URL is required", "--prefill", "http://a:1", "8998");
    EXPECT_ARGV_ERROR("argv: at least one --prefill URL is required", "--decode", "http://a:1");
    EXPECT_ARGV_ERROR(
        "argv: protocol: protocol pdshim signs tickets: set ticket: { key_file: FILE } (or key_files)",
        "--prefill", "http://a:1", "--decode", "http://b:1", "--protocol", "pdshim");
    EXPECT_ARGV_ERROR("argv: --port: expected an integer in 1..65535, got 'abc'", "--port", "abc");
    EXPECT_ARGV_ERROR("argv: --port: expected an integer in 1..65535, got '0'", "--port=0");
    EXPECT_ARGV_ERROR("argv: --prefill: expected an integer in 1..65535, got '70000'", "--prefill",
                      "http://a:1", "70000");
    EXPECT_ARGV_ERROR("argv: unexpected argument 'http://b:2' (see --help)", "--prefill", "http://a:1",
                      "http://b:2");
    EXPECT_ARGV_ERROR("argv: --prefill needs a value", "--prefill", "--decode", "http://a:1");
    EXPECT_ARGV_ERROR("argv: --host needs a value", "--host");
    EXPECT_ARGV_ERROR("argv: --version takes no value", "--version=1");
    EXPECT_ARGV_ERROR("argv: --policy: the bucket policy is not available yet; the policies are "
                      "round_robin, least_load, random, cache_aware, power_of_two and precise_prefix",
                      "--policy", "bucket");
    EXPECT_ARGV_ERROR("argv: --cache-threshold: expected a number in 0..1, got '2'", "--cache-threshold",
                      "2");
    {
        const char *argv_ca[] = {"pdrouter",
                                 "--prefill",
                                 "http://127.0.0.1:1",
                                 "--decode",
                                 "http://127.0.0.1:2",
                                 "--prefill-policy",
                                 "cache_aware",
                                 "--decode-policy",
                                 "power_of_two",
                                 "--cache-threshold",
                                 "0.5",
                                 "--balance-abs-threshold",
                                 "32",
                                 "--balance-rel-threshold",
                                 "1.1",
                                 "--eviction-interval-secs",
                                 "30",
                                 "--max-tree-size",
                                 "10000",
                                 "--cache-aware-seed",
                                 "smallest_tree",
                                 NULL};
        pdr_cli_t cli_ca;
        char err_ca[512];
        CHECK(parse(argv_ca, &cli_ca, err_ca, sizeof(err_ca)) == 0);
        if (cli_ca.config != NULL) {
            const pdr_config_t *cc = cli_ca.config;
            CHECK(cc->policy_prefill == PDR_POLICY_CACHE_AWARE &&
                  cc->policy_decode == PDR_POLICY_POWER_OF_TWO);
            CHECK(cc->cache_aware.cache_threshold == 0.5 && cc->cache_aware.balance_abs_threshold == 32 &&
                  cc->cache_aware.balance_rel_threshold == 1.1 &&
                  cc->cache_aware.eviction_interval_secs == 30 && cc->cache_aware.max_tree_size == 10000 &&
                  cc->cache_aware.seed == PDR_CA_SEED_SMALLEST_TREE);
            pdr_config_unref(cli_ca.config);
        }
    }
    EXPECT_ARGV_ERROR(
        "argv: --cache-aware-seed: unknown seed 'ring', expected smallest_tree or consistent_hash",
        "--cache-aware-seed", "ring");
    EXPECT_ARGV_ERROR("argv: --retries: expected an integer in 0..10, got '11'", "--retries", "11");
    EXPECT_ARGV_ERROR(
        "argv: --decode: 'ftp://a:1': unsupported URL scheme; use http://host[:port] or https://", "--decode",
        "ftp://a:1");
    EXPECT_ARGV_ERROR("argv: --decode http://a:1/: duplicate worker (same as --decode http://a:1)",
                      "--decode", "http://a:1", "--decode", "http://a:1/");
    EXPECT_ARGV_ERROR("argv: --config given twice", "--config", "a.yaml", "--config", "b.yaml");
    EXPECT_ARGV_ERROR("argv: --host: empty value", "--host=");

    /* The help text names every flag. */
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (mem != NULL) {
        pdr_config_usage(mem);
        fclose(mem);
        static const char *const flags[] = {"--pd-disaggregation",
                                            "--prefill",
                                            "--decode",
                                            "--host",
                                            "--port",
                                            "--policy",
                                            "--prefill-policy",
                                            "--decode-policy",
                                            "--protocol",
                                            "--config",
                                            "--check-config",
                                            "--version",
                                            "--help",
                                            "--log-level",
                                            "--access-log",
                                            "--retries",
                                            "--first-byte-ms",
                                            "--kv-transfer-ms",
                                            "--health-interval-ms",
                                            "--admin-port",
                                            "--admin-token-file",
                                            "--prometheus-port",
                                            "--prometheus-host",
                                            "--cors-allowed-origins",
                                            "--worker-startup-timeout-secs",
                                            "--service-discovery",
                                            "--prefill-selector",
                                            "--bootstrap-port-annotation",
                                            "--log-dir",
                                            "--max-payload-size",
                                            "--request-timeout-secs",
                                            "--health-check-endpoint",
                                            "--retry-max-retries"};
        for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
            if (strstr(text, flags[i]) == NULL) {
                fprintf(stderr, "help text lacks %s\n", flags[i]);
                failures++;
            }
        free(text);
    }
}

/* The sglang router's flags: each one works with sglang's meaning, or is refused naming what exists. */
static void test_cli_sglang(void)
{
    char err[512];
    pdr_cli_t cli;
    const char *a[] = {"pdrouter",
                       "--pd-disaggregation",
                       "--mini-lb",
                       "--prefill",
                       "http://127.0.0.1:30001",
                       "8998",
                       "--decode",
                       "http://127.0.0.1:30002",
                       "--host",
                       "127.0.0.1",
                       "--port",
                       "30000",
                       "--max-payload-size",
                       "536870912",
                       "--request-timeout-secs",
                       "1800",
                       "--worker-startup-timeout-secs",
                       "600",
                       "--health-failure-threshold",
                       "5",
                       "--health-success-threshold",
                       "1",
                       "--health-check-timeout-secs",
                       "7",
                       "--health-check-interval-secs",
                       "30",
                       "--health-check-endpoint",
                       "/health_generate",
                       "--prometheus-port",
                       "29001",
                       "--log-level",
                       "warn",
                       "--log-dir",
                       "/tmp/pdr-logs",
                       "--cors-allowed-origins",
                       "https://a.example",
                       "http://localhost:3000",
                       "--prefill-policy",
                       "random",
                       "--decode-policy",
                       "round_robin",
                       "--retry-max-retries",
                       "4",
                       "--max-concurrent-requests",
                       "128",
                       "--queue-size",
                       "7",
                       "--queue-timeout-secs",
                       "30",
                       "--rate-limit-tokens-per-second",
                       "50",
                       "--shutdown-grace-period-secs",
                       "90",
                       "--admin-token-file",
                       "/run/pdr/token",
                       "--backend",
                       "sglang",
                       "--disable-circuit-breaker",
                       NULL};
    CHECK(parse(a, &cli, err, sizeof(err)) == 0);
    if (cli.config == NULL) {
        fprintf(stderr, "  %s\n", err);
        failures++;
    } else {
        const pdr_config_t *c = cli.config;
        CHECK(c->listen_port == 30000);
        CHECK(c->limits.max_body_bytes == 536870912);
        CHECK(c->timeouts.first_byte_ms == 1800000 && c->timeouts.stream_idle_ms == 1800000);
        CHECK(c->lifecycle.worker_startup_timeout_ms == 600000);
        CHECK(c->health.fall == 5 && c->health.rise == 1);
        CHECK(c->health.timeout_ms == 7000 && c->health.interval_ms == 30000);
        CHECK_STR(c->health.path, "/health_generate");
        CHECK(c->metrics_port == 29001);
        CHECK_STR(c->metrics_host, "0.0.0.0");
        CHECK_STR(c->log.level, "warn");
        CHECK_STR(c->log.dir, "/tmp/pdr-logs");
        CHECK(c->cors.n == 2);
        if (c->cors.n == 2) {
            CHECK_STR(c->cors.origins[0], "https://a.example");
            CHECK_STR(c->cors.origins[1], "http://localhost:3000");
        }
        CHECK(c->policy_prefill == PDR_POLICY_RANDOM && c->policy_decode == PDR_POLICY_ROUND_ROBIN);
        CHECK(c->retries.max == 3);
        CHECK(c->limits.max_inflight == 128);
        CHECK(c->limits.queue == 7 && c->limits.queue_timeout_ms == 30000);
        /* sglang's bucket: --rate-limit-tokens-per-second a second, --max-concurrent-requests deep. */
        CHECK(c->limits.rate_limit_rps == 50 && c->limits.rate_limit_burst == 128);
        CHECK(c->lifecycle.drain_timeout_ms == 90000);
        CHECK_STR(c->admin_token_file, "/run/pdr/token");
        CHECK(c->outlier.enabled == 0); /* --disable-circuit-breaker */
        pdr_config_unref(cli.config);
    }

    /* The circuit breaker flags are outlier detection's settings. */
    const char *cb[] = {"pdrouter",   "--prefill",
                        "http://a:1", "--decode",
                        "http://b:2", "--cb-failure-threshold",
                        "7",          "--cb-success-threshold",
                        "3",          "--cb-timeout-duration-secs",
                        "45",         "--cb-window-duration-secs",
                        "120",        NULL};
    CHECK(parse(cb, &cli, err, sizeof(err)) == 0);
    if (cli.config != NULL) {
        const pdr_outlier_conf_t *o = &cli.config->outlier;
        CHECK(o->enabled == 1 && o->consecutive_failures == 7 && o->probation_successes == 3 &&
              o->base_ejection_ms == 45000 && o->max_ejection_ms == 300000 && o->failure_window_ms == 120000);
        pdr_config_unref(cli.config);
    } else {
        fprintf(stderr, "  %s\n", err);
        failures++;
    }

    /* --prometheus-host alone: sglang's default port 29000. --disable-retries wins. -1: no limit. */
    const char *b[] = {"pdrouter",
                       "--prefill",
                       "http://a:1",
                       "--decode",
                       "http://b:2",
                       "--prometheus-host",
                       "127.0.0.1",
                       "--retry-max-retries",
                       "3",
                       "--disable-retries",
                       "--max-concurrent-requests",
                       "-1",
                       "--cors-allowed-origins=*",
                       NULL};
    CHECK(parse(b, &cli, err, sizeof(err)) == 0);
    if (cli.config != NULL) {
        CHECK(cli.config->metrics_port == 29000);
        CHECK_STR(cli.config->metrics_host, "127.0.0.1");
        CHECK(cli.config->retries.max == 0);
        CHECK(cli.config->limits.max_inflight == 10000000);
        CHECK(cli.config->cors.n == 1 && strcmp(cli.config->cors.origins[0], "*") == 0);
        pdr_config_unref(cli.config);
    } else {
        fprintf(stderr, "  %s\n", err);
        failures++;
    }

    /* Kubernetes discovery from flags alone: no static worker needed; port 80 as in sglang. */
    const char *k[] = {"pdrouter",
                       "--pd-disaggregation",
                       "--service-discovery",
                       "--prefill-selector",
                       "app=sglang",
                       "component=prefill",
                       "--decode-selector",
                       "app=sglang component=decode",
                       "--service-discovery-namespace",
                       "llm",
                       "--bootstrap-port-annotation",
                       "example.com/bootstrap",
                       NULL};
    CHECK(parse(k, &cli, err, sizeof(err)) == 0);
    if (cli.config != NULL) {
        const pdr_config_t *c = cli.config;
        CHECK(c->n_prefill == 0 && c->n_decode == 0);
        CHECK_STR(c->discovery.kubernetes.role[PDR_ROLE_PREFILL].selector, "app=sglang,component=prefill");
        CHECK_STR(c->discovery.kubernetes.role[PDR_ROLE_DECODE].selector, "app=sglang,component=decode");
        CHECK(c->discovery.kubernetes.role[PDR_ROLE_PREFILL].port == 80);
        CHECK(c->discovery.kubernetes.role[PDR_ROLE_DECODE].port == 80);
        CHECK_STR(c->discovery.kubernetes.namespace_, "llm");
        CHECK_STR(c->discovery.kubernetes.bootstrap_port_annotation, "example.com/bootstrap");
        pdr_config_unref(cli.config);
    } else {
        fprintf(stderr, "  %s\n", err);
        failures++;
    }
    const char *k2[] = {"pdrouter", "--service-discovery", "--prefill-selector",       "app=p",
                        "--decode", "http://d:1",          "--service-discovery-port", "30000",
                        NULL};
    CHECK(parse(k2, &cli, err, sizeof(err)) == 0);
    if (cli.config != NULL) {
        CHECK(cli.config->discovery.kubernetes.role[PDR_ROLE_PREFILL].port == 30000);
        CHECK(cli.config->discovery.kubernetes.role[PDR_ROLE_DECODE].selector == NULL);
        pdr_config_unref(cli.config);
    } else {
        fprintf(stderr, "  %s\n", err);
        failures++;
    }

    /* Discovery flags on top of a file: the role they name changes, the file's other role stays. */
    const char *kpath =
        write_file("cli-k8s.yaml", "workers: { prefill: [ http://a:1 ] }\n"
                                   "discovery: { kubernetes: { decode: { selector: app=d, port: 7 } } }\n");
    const char *kf[] = {"pdrouter",           "--config", kpath, "--service-discovery",
                        "--prefill-selector", "app=p",    NULL};
    CHECK(parse(kf, &cli, err, sizeof(err)) == 0);
    if (cli.config != NULL) {
        CHECK_STR(cli.config->discovery.kubernetes.role[PDR_ROLE_PREFILL].selector, "app=p");
        CHECK(cli.config->discovery.kubernetes.role[PDR_ROLE_PREFILL].port == 80);
        CHECK_STR(cli.config->discovery.kubernetes.role[PDR_ROLE_DECODE].selector, "app=d");
        CHECK(cli.config->discovery.kubernetes.role[PDR_ROLE_DECODE].port == 7);
        pdr_config_unref(cli.config);
    } else {
        fprintf(stderr, "  %s\n", err);
        failures++;
    }

    /* Flags on top of --config. */
    const char *path =
        write_file("cli-sglang.yaml", WORKERS "cors: { allowed_origins: [\"https://x.example\"] }\n");
    const char *cf[] = {"pdrouter",
                        "--config",
                        path,
                        "--prometheus-port",
                        "9100",
                        "--health-check-endpoint",
                        "/ready",
                        "--cors-allowed-origins",
                        "https://y.example",
                        NULL};
    CHECK(parse(cf, &cli, err, sizeof(err)) == 0);
    if (cli.config != NULL) {
        CHECK(cli.config->metrics_port == 9100);
        CHECK_STR(cli.config->health.path, "/ready");
        CHECK(cli.config->cors.n == 1 && strcmp(cli.config->cors.origins[0], "https://y.example") == 0);
        pdr_config_unref(cli.config);
    } else {
        fprintf(stderr, "  %s\n", err);
        failures++;
    }

#define PD "--prefill", "http://a:1", "--decode", "http://b:2"
    EXPECT_ARGV_ERROR("argv: --max-payload-size: expected a size in bytes in 1024..1099511627776, got '10'",
                      PD, "--max-payload-size", "10");
    EXPECT_ARGV_ERROR("argv: --max-payload-size: expected a size in bytes in 1024..1099511627776, got '1MB'",
                      PD, "--max-payload-size=1MB");
    EXPECT_ARGV_ERROR("argv: --request-timeout-secs: expected an integer in 1..86400, got '0'", PD,
                      "--request-timeout-secs", "0");
    EXPECT_ARGV_ERROR("argv: --worker-startup-timeout-secs: expected an integer in 1..86400, got 'soon'", PD,
                      "--worker-startup-timeout-secs", "soon");
    EXPECT_ARGV_ERROR("argv: --health-failure-threshold: expected an integer in 1..1000, got '0'", PD,
                      "--health-failure-threshold", "0");
    EXPECT_ARGV_ERROR("argv: --health-success-threshold: expected an integer in 1..1000, got '-2'", PD,
                      "--health-success-threshold=-2");
    EXPECT_ARGV_ERROR("argv: --health-check-timeout-secs: expected an integer in 1..86400, got '1.5'", PD,
                      "--health-check-timeout-secs", "1.5");
    EXPECT_ARGV_ERROR("argv: --health-check-interval-secs: expected an integer in 1..86400, got '100000'", PD,
                      "--health-check-interval-secs", "100000");
    EXPECT_ARGV_ERROR("argv: --health-check-endpoint: 'health' must start with '/'", PD,
                      "--health-check-endpoint", "health");
    EXPECT_ARGV_ERROR("argv: --health-check-endpoint: no spaces or control characters in a path", PD,
                      "--health-check-endpoint", "/a b");
    EXPECT_ARGV_ERROR("argv: --prometheus-port: expected an integer in 1..65535, got '0'", PD,
                      "--prometheus-port", "0");
    EXPECT_ARGV_ERROR(
        "argv: metrics.port: 8000 is already listen.port; give the metrics listener its own port", PD,
        "--prometheus-port", "8000");
    EXPECT_ARGV_ERROR("argv: --prometheus-host: empty value", PD, "--prometheus-host=");
    EXPECT_ARGV_ERROR(
        "argv: --log-level: unknown level 'trace', expected debug, info, warn (warning), error or critical",
        PD, "--log-level", "trace");
    EXPECT_ARGV_ERROR("argv: --log-dir needs a value", PD, "--log-dir");
    EXPECT_ARGV_ERROR(
        "argv: --cors-allowed-origins needs the origins, or '*' for any origin (what the sglang "
        "router allows when it is given none)",
        PD, "--cors-allowed-origins");
    EXPECT_ARGV_ERROR(
        "argv: --cors-allowed-origins: 'example.com': expected scheme://host[:port] (for example "
        "https://app.example.com) or *",
        PD, "--cors-allowed-origins", "example.com");
    EXPECT_ARGV_ERROR("argv: --cors-allowed-origins: 'https://a.example/app': an origin has no path (no '/' "
                      "after the host)",
                      PD, "--cors-allowed-origins", "https://a.example/app");
    EXPECT_ARGV_ERROR("argv: --prefill-policy: the bucket policy is not available yet; the policies are "
                      "round_robin, least_load, random, cache_aware, power_of_two and precise_prefix",
                      PD, "--prefill-policy", "bucket");
    EXPECT_ARGV_ERROR("argv: --decode-policy: the manual policy is not available yet; the policies are "
                      "round_robin, least_load, random, cache_aware, power_of_two and precise_prefix",
                      PD, "--decode-policy", "manual");
    EXPECT_ARGV_ERROR("argv: --retry-max-retries: expected an integer in 1..11, got '0'", PD,
                      "--retry-max-retries", "0");
    EXPECT_ARGV_ERROR("argv: --max-concurrent-requests: expected an integer in 1..10000000, got '0'", PD,
                      "--max-concurrent-requests", "0");
    EXPECT_ARGV_ERROR("argv: --queue-size: expected an integer in 0..1000000, got '-1'", PD, "--queue-size",
                      "-1");
    EXPECT_ARGV_ERROR("argv: --queue-timeout-secs: expected an integer in 1..86400, got '0'", PD,
                      "--queue-timeout-secs", "0");
    EXPECT_ARGV_ERROR("argv: --rate-limit-tokens-per-second: expected a number in 0..1e+07, got 'x'", PD,
                      "--rate-limit-tokens-per-second", "x");
    EXPECT_ARGV_ERROR("argv: --shutdown-grace-period-secs: expected an integer in 1..86400, got 'x'", PD,
                      "--shutdown-grace-period-secs", "x");
    EXPECT_ARGV_ERROR("argv: --admin-token-file: empty value", PD, "--admin-token-file=");
    EXPECT_ARGV_ERROR(
        "argv: --backend: 'openai' is not supported; pdrouter drives sglang or vLLM engines, not "
        "an OpenAI API (--backend sglang, or --protocol sglang|vllm|pdshim)",
        PD, "--backend", "openai");
    EXPECT_ARGV_ERROR("argv: --pd-disaggregation takes no value", PD, "--pd-disaggregation=1");
    /* Discovery flags. */
    EXPECT_ARGV_ERROR("argv: --prefill-selector needs --service-discovery", "--prefill-selector", "app=p",
                      PD);
    EXPECT_ARGV_ERROR("argv: --service-discovery-port needs --service-discovery", PD,
                      "--service-discovery-port", "80");
    EXPECT_ARGV_ERROR("argv: --service-discovery needs --prefill-selector K=V ... and/or --decode-selector "
                      "K=V ... (PD mode; --selector is for the sglang router's regular mode)",
                      "--service-discovery");
    EXPECT_ARGV_ERROR("argv: --prefill-selector needs a value", "--service-discovery", "--prefill-selector");
    EXPECT_ARGV_ERROR("argv: --prefill-selector: expected key=value words, got 'app'", "--service-discovery",
                      "--prefill-selector", "app");
    EXPECT_ARGV_ERROR("argv: --service-discovery-namespace: *", "--service-discovery", "--prefill-selector",
                      "a=b", "--decode-selector", "a=c", "--service-discovery-namespace", "Bad_NS");
    EXPECT_ARGV_ERROR(
        "argv: --bootstrap-port-annotation: expected an annotation key [prefix/]name (name: 1..63 "
        "letters, digits, '-', '_', '.'; prefix: a lowercase DNS subdomain)",
        "--service-discovery", "--prefill-selector", "a=b", "--decode-selector", "a=c",
        "--bootstrap-port-annotation", "bad key");
    EXPECT_ARGV_ERROR("argv: at least one --decode URL is required (or --decode-selector)",
                      "--service-discovery", "--prefill-selector", "a=b");
    EXPECT_ARGV_ERROR(
        "argv: --selector (sglang router) is not supported: pdrouter discovers PD workers only: "
        "use --prefill-selector and --decode-selector",
        "--service-discovery", "--selector", "app=x");
    /* Refused flags name what exists. */
    EXPECT_ARGV_ERROR("argv: --cb-failure-threshold: expected an integer in 1..1000, got '0'", PD,
                      "--cb-failure-threshold", "0");
    EXPECT_ARGV_ERROR("argv: --cb-timeout-duration-secs: expected an integer in 1..86400, got 'x'", PD,
                      "--cb-timeout-duration-secs", "x");
    EXPECT_ARGV_ERROR("argv: --retry-jitter-factor: *", PD, "--retry-jitter-factor", "1.5");
    EXPECT_ARGV_ERROR("argv: --retry-backoff-multiplier: *", PD, "--retry-backoff-multiplier", "0.5");
    EXPECT_ARGV_ERROR("argv: --disable-health-check (sglang router) is not supported: *", PD,
                      "--disable-health-check");
    EXPECT_ARGV_ERROR("argv: listen.tls: cert_file and key_file go together (give both for TLS on the "
                      "listener, or neither)",
                      PD, "--tls-cert-path", "x");
    {
        const char *argv[] = {"pdrouter",           "--pd-disaggregation",
                              "--prefill",          "https://p:8443",
                              "--decode",           "https://d",
                              "--tls-cert-path",    "/c.pem",
                              "--tls-key-path",     "/k.pem",
                              "--ca-cert-paths",    "/ca.pem",
                              "--client-cert-path", "/cc.pem",
                              "--client-key-path",  "/ck.pem"};
        pdr_cli_t tcli;
        char terr[512];
        CHECK(pdr_config_parse_args((int)(sizeof(argv) / sizeof(argv[0])), (char **)argv, &tcli, terr,
                                    sizeof(terr)) == 0);
        if (tcli.config != NULL) {
            CHECK_STR(tcli.config->listen_tls.cert_file, "/c.pem");
            CHECK_STR(tcli.config->listen_tls.key_file, "/k.pem");
            CHECK_STR(tcli.config->workers_tls.ca_file, "/ca.pem");
            CHECK_STR(tcli.config->workers_tls.cert_file, "/cc.pem");
            CHECK_STR(tcli.config->workers_tls.key_file, "/ck.pem");
            CHECK_STR(tcli.config->prefill[0].url, "https://p:8443");
            CHECK_STR(tcli.config->decode[0].url, "https://d");
            pdr_config_unref(tcli.config);
        }
    }
#undef PD
}

/* The new YAML keys and their checks. */
/*
 * Every value of every choices= list in the sglang router's router_args.py (releases differ: older ones
 * take --log-level debug|info|warning|error|critical, newer ones debug|info|warn|error; --prefill-policy
 * adds bucket to the policies): each is either accepted, with the meaning checked, or refused with a
 * message that says why. An unknown value of the same flags is refused as unknown.
 */
static void test_sglang_choices(void)
{
#define PD "--prefill", "http://a:1", "--decode", "http://b:2"
    static const struct {
        const char *flag, *value;
        const char *level; /* accepted: the log level it gives (log-level only) */
        int policy;        /* accepted: the policy it gives, -1 when the flag sets none */
        const char *error; /* refused: the message, '*' ending a prefix */
    } cases[] = {
        {"--log-level", "debug", "debug", -1, NULL},
        {"--log-level", "info", "info", -1, NULL},
        {"--log-level", "warn", "warn", -1, NULL},
        {"--log-level", "warning", "warn", -1, NULL},
        {"--log-level", "error", "error", -1, NULL},
        {"--log-level", "critical", "error", -1, NULL},
        {"--log-level", "fatal", NULL, -1, "argv: --log-level: unknown level 'fatal'*"},
        {"--policy", "random", NULL, PDR_POLICY_RANDOM, NULL},
        {"--policy", "round_robin", NULL, PDR_POLICY_ROUND_ROBIN, NULL},
        {"--policy", "cache_aware", NULL, PDR_POLICY_CACHE_AWARE, NULL},
        {"--policy", "power_of_two", NULL, PDR_POLICY_POWER_OF_TWO, NULL},
        {"--policy", "manual", NULL, -1, "argv: --policy: the manual policy is not available yet*"},
        {"--prefill-policy", "random", NULL, PDR_POLICY_RANDOM, NULL},
        {"--prefill-policy", "round_robin", NULL, PDR_POLICY_ROUND_ROBIN, NULL},
        {"--prefill-policy", "cache_aware", NULL, PDR_POLICY_CACHE_AWARE, NULL},
        {"--prefill-policy", "power_of_two", NULL, PDR_POLICY_POWER_OF_TWO, NULL},
        {"--prefill-policy", "manual", NULL, -1,
         "argv: --prefill-policy: the manual policy is not available*"},
        {"--prefill-policy", "bucket", NULL, -1,
         "argv: --prefill-policy: the bucket policy is not available*"},
        {"--decode-policy", "random", NULL, PDR_POLICY_RANDOM, NULL},
        {"--decode-policy", "round_robin", NULL, PDR_POLICY_ROUND_ROBIN, NULL},
        {"--decode-policy", "cache_aware", NULL, PDR_POLICY_CACHE_AWARE, NULL},
        {"--decode-policy", "power_of_two", NULL, PDR_POLICY_POWER_OF_TWO, NULL},
        {"--decode-policy", "manual", NULL, -1, "argv: --decode-policy: the manual policy is not available*"},
        {"--backend", "sglang", NULL, -1, NULL},
        {"--backend", "openai", NULL, -1, "argv: --backend: 'openai' is not supported*"},
        {"--history-backend", "none", NULL, -1, NULL},
        {"--history-backend", "memory", NULL, -1,
         "argv: --history-backend: 'memory' is not supported: pdrouter keeps no conversation or response "
         "history (--history-backend none is accepted)"},
        {"--history-backend", "oracle", NULL, -1, "argv: --history-backend: 'oracle' is not supported*"},
        {"--history-backend", "postgres", NULL, -1, "argv: --history-backend: 'postgres' is not supported*"},
        /* Its choices are the parsers sglang was built with; pdrouter parses no answers. */
        {"--tool-call-parser", "json", NULL, -1,
         "argv: --tool-call-parser (sglang router) is not supported: pdrouter passes answers through*"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *argv[] = {"pdrouter", PD, cases[i].flag, cases[i].value, NULL};
        if (cases[i].error != NULL) {
            expect_argv_error(__LINE__, argv, cases[i].error);
            continue;
        }
        char err[512];
        pdr_cli_t cli;
        if (parse(argv, &cli, err, sizeof(err)) != 0 || cli.config == NULL) {
            fprintf(stderr, "%s:%d: %s %s refused: %s\n", __FILE__, __LINE__, cases[i].flag, cases[i].value,
                    err);
            failures++;
            continue;
        }
        const pdr_config_t *c = cli.config;
        if (cases[i].level != NULL)
            CHECK(strcmp(c->log.level, cases[i].level) == 0);
        if (cases[i].policy >= 0 && strcmp(cases[i].flag, "--decode-policy") != 0)
            CHECK((int)c->policy_prefill == cases[i].policy);
        if (cases[i].policy >= 0 && strcmp(cases[i].flag, "--prefill-policy") != 0)
            CHECK((int)c->policy_decode == cases[i].policy);
        if (strcmp(cases[i].flag, "--backend") == 0)
            CHECK(c->protocol == PDR_PROTO_SGLANG);
        pdr_config_unref(cli.config);
    }
#undef PD
}

static void test_sglang_keys(void)
{
    char err[512];
    pdr_config_t *c = load(WORKERS "metrics: { host: 127.0.0.1, port: 29000 }\n"
                                   "cors: { allowed_origins: [\"*\", \"https://a.example:8443\"] }\n"
                                   "lifecycle: { worker_startup_timeout_ms: 5000 }\n"
                                   "log: { dir: /var/log/pdrouter }\n"
                                   "discovery: { kubernetes: { bootstrap_port_annotation: example.com/bp, "
                                   "decode: { selector: app=d } } }\n",
                           err, sizeof(err));
    CHECK(c != NULL);
    if (c == NULL) {
        fprintf(stderr, "  %s\n", err);
        return;
    }
    CHECK_STR(c->metrics_host, "127.0.0.1");
    CHECK(c->metrics_port == 29000);
    CHECK(c->cors.n == 2);
    CHECK(c->lifecycle.worker_startup_timeout_ms == 5000);
    CHECK_STR(c->log.dir, "/var/log/pdrouter");
    CHECK_STR(c->discovery.kubernetes.bootstrap_port_annotation, "example.com/bp");
    pdr_config_unref(c);

    c = pdr_config_new_default();
    CHECK(c != NULL && c->metrics_port == 0 && c->cors.n == 0 &&
          c->lifecycle.worker_startup_timeout_ms == 0 && c->log.dir == NULL &&
          c->discovery.kubernetes.bootstrap_port_annotation == NULL);
    pdr_config_unref(c);

    EXPECT_ERROR(WORKERS "metrics: { port: 70000 }\n",
                 "bad.yaml:4:18: metrics.port: 70000 is out of range, expected 0..65535");
    EXPECT_ERROR(
        WORKERS "metrics: { port: 8001 }\n",
        "bad.yaml:1:1: metrics.port: 8001 is already admin.port; give the metrics listener its own port");
    EXPECT_ERROR(WORKERS "cors: { allowed_origins: https://a.example }\n",
                 "bad.yaml:4:26: cors.allowed_origins: expected a sequence of origins such as "
                 "[\"https://app.example.com\"], got a scalar");
    EXPECT_ERROR(WORKERS "cors: { allowed_origins: [\"ftp:/x\"] }\n",
                 "bad.yaml:4:27: cors.allowed_origins[0]: expected scheme://host[:port] (for example "
                 "https://app.example.com) or *");
    EXPECT_ERROR(WORKERS "cors: { origins: [] }\n",
                 "bad.yaml:4:9: unknown key 'origins' in 'cors' (valid keys: "
                 "allowed_origins)");
    EXPECT_ERROR(
        WORKERS "lifecycle: { worker_startup_timeout_ms: -1 }\n",
        "bad.yaml:4:41: lifecycle.worker_startup_timeout_ms: -1 is out of range, expected 0..86400000");
    EXPECT_ERROR(WORKERS "log: { dir: \"\" }\n", "*");
    EXPECT_ERROR(
        WORKERS "discovery: { kubernetes: { bootstrap_port_annotation: \"a b\" } }\n",
        "bad.yaml:4:55: discovery.kubernetes.bootstrap_port_annotation: expected an annotation key "
        "[prefix/]name (name: 1..63 letters, digits, '-', '_', '.'; prefix: a lowercase DNS subdomain)");
}

/* discovery.kubernetes.inference_pool: both roles discovered (no static worker needed), no selector beside
 * it. */
static void test_inference_pool_keys(void)
{
    char err[512];
    pdr_config_t *c =
        load("discovery: { kubernetes: { inference_pool: llm-pool, namespace: llm } }\n", err, sizeof(err));
    CHECK(c != NULL);
    if (c == NULL) {
        fprintf(stderr, "  %s\n", err);
        return;
    }
    CHECK_STR(c->discovery.kubernetes.inference_pool, "llm-pool");
    CHECK(c->discovery.kubernetes.role_label == NULL);
    pdr_config_unref(c);
    c = load("discovery: { kubernetes: { inference_pool: p, role_label: example.com/role } }\n", err,
             sizeof(err));
    CHECK(c != NULL && strcmp(c->discovery.kubernetes.role_label, "example.com/role") == 0);
    pdr_config_unref(c);
    EXPECT_ERROR(
        "discovery: { kubernetes: { inference_pool: p, decode: { selector: app=d } } }\n",
        "bad.yaml:1:1: discovery.kubernetes.decode: the pods of both roles come from inference_pool p (their "
        "role from the label role_label); remove the decode section");
    EXPECT_ERROR("discovery: { kubernetes: { inference_pool: \"a b\" } }\n", "*");
    EXPECT_ERROR("discovery: { kubernetes: { inference_pool: p, role_label: \"a b\" } }\n", "*");
}

#define POOL_A                                                                                               \
    "  - name: pool-a\n"                                                                                     \
    "    models: [llama, llama-instruct]\n"                                                                  \
    "    workers:\n"                                                                                         \
    "      prefill: [ { url: http://127.0.0.1:31001, bootstrap_port: 8998 } ]\n"                             \
    "      decode: [ http://127.0.0.1:31002 ]\n"
#define POOL_B                                                                                               \
    "  - name: pool_b\n"                                                                                     \
    "    models: [qwen]\n"                                                                                   \
    "    protocol: sglang\n"                                                                                 \
    "    policy: { prefill: random, decode: round_robin }\n"                                                 \
    "    workers:\n"                                                                                         \
    "      prefill: [ http://127.0.0.1:32001 ]\n"                                                            \
    "      decode: [ http://127.0.0.1:32002, http://127.0.0.1:32003 ]\n"

static void test_pools(void)
{
    char err[512];
    pdr_config_t *c = load("pools:\n" POOL_A POOL_B, err, sizeof(err));
    CHECK(c != NULL);
    if (c == NULL) {
        fprintf(stderr, "  %s\n", err);
        return;
    }
    CHECK(c->n_pools == 2 && pdr_config_pool_count(c) == 2);
    CHECK(c->n_prefill == 0 && c->n_decode == 0);
    pdr_pool_conf_t a, b;
    pdr_config_pool(c, 0, &a);
    pdr_config_pool(c, 1, &b);
    CHECK_STR(a.name, "pool-a");
    CHECK(a.n_models == 2);
    CHECK_STR(a.models[1], "llama-instruct");
    CHECK(a.protocol == PDR_PROTO_SGLANG);
    CHECK(a.policy_prefill == PDR_POLICY_ROUND_ROBIN && a.policy_decode == PDR_POLICY_LEAST_LOAD);
    CHECK(a.n_prefill == 1 && a.prefill[0].bootstrap_port == 8998 && a.n_decode == 1);
    CHECK_STR(a.decode[0].url, "http://127.0.0.1:31002");
    CHECK_STR(b.name, "pool_b");
    CHECK(b.policy_prefill == PDR_POLICY_RANDOM && b.policy_decode == PDR_POLICY_ROUND_ROBIN);
    CHECK(b.n_decode == 2 && b.prefill[0].bootstrap_port == -1);
    CHECK(pdr_config_pool_for_model(c, "llama", 5) == 0);
    CHECK(pdr_config_pool_for_model(c, "llama-instruct", 14) == 0);
    CHECK(pdr_config_pool_for_model(c, "qwen", 4) == 1);
    CHECK(pdr_config_pool_for_model(c, "qwe", 3) == -1);
    CHECK(pdr_config_pool_for_model(c, "", 0) == -1);
    CHECK(pdr_config_pool_find(c, "pool_b", 6) == 1);
    {
        /* Per-pool timeouts: what a pool sets, else the top-level ones. */
        pdr_timeouts_t to;
        b.timeouts.kv_transfer_ms = 700;
        pdr_config_pool_timeouts(c, &b, &to);
        CHECK(to.kv_transfer_ms == 700 && to.first_byte_ms == c->timeouts.first_byte_ms &&
              to.connect_ms == c->timeouts.connect_ms && to.stream_idle_ms == c->timeouts.stream_idle_ms);
        pdr_config_pool_timeouts(c, NULL, &to);
        CHECK(to.kv_transfer_ms == c->timeouts.kv_transfer_ms);
        CHECK(to.kv_transfer_ms_per_1k_tokens == 0); /* the default: the KV deadline does not scale */
        /* The KV deadline's growth per 1024 prompt tokens: the pool's when it sets one, else the top's. */
        c->timeouts.kv_transfer_ms_per_1k_tokens = 300;
        pdr_config_pool_timeouts(c, &b, &to);
        CHECK(to.kv_transfer_ms_per_1k_tokens == 300);
        b.timeouts.kv_transfer_ms_per_1k_tokens = 50;
        pdr_config_pool_timeouts(c, &b, &to);
        CHECK(to.kv_transfer_ms_per_1k_tokens == 50);
        c->timeouts.kv_transfer_ms_per_1k_tokens = 0;
    }
    CHECK(pdr_config_pool_find(c, "default", 7) == -1);
    CHECK(pdr_config_validate(c, err, sizeof(err)) == 0);
    pdr_config_unref(c);

    /* Each pool keeps its own protocol: vllm beside sglang. */
    c = load("pools:\n" POOL_A "  - name: v\n    models: [vm]\n    protocol: vllm\n    workers:\n"
             "      prefill: [http://a:1]\n      decode: [http://a:2]\n",
             err, sizeof(err));
    CHECK(c != NULL && c->n_pools == 2 && c->pools[0].protocol == PDR_PROTO_SGLANG &&
          c->pools[1].protocol == PDR_PROTO_VLLM && c->protocol == PDR_PROTO_SGLANG);
    pdr_config_unref(c);

    /* A pool's own tokenizer, with its key's place kept for the loader's errors; another pool has none. */
    c = load("pools:\n" POOL_A "  - name: t\n    models: [tm]\n    tokenizer: /models/tm\n    workers:\n"
             "      prefill: [http://a:1]\n      decode: [http://a:2]\n",
             err, sizeof(err));
    CHECK(c != NULL && c->pools[0].tokenizer == NULL && c->pools[0].tokenizer_line == 0);
    CHECK(c != NULL && c->pools[1].tokenizer != NULL && strcmp(c->pools[1].tokenizer, "/models/tm") == 0 &&
          c->pools[1].tokenizer_line == 9 && c->pools[1].tokenizer_col == 16);
    if (c != NULL) {
        pdr_pool_conf_t t;
        pdr_config_pool(c, 1, &t);
        CHECK_STR(t.tokenizer, "/models/tm");
    }
    pdr_config_unref(c);
    EXPECT_ERROR("pools:\n  - name: a\n    models: [m]\n    tokenizer: ''\n",
                 "bad.yaml:4:16: pools[0].tokenizer: must not be empty");

    /* One policy name for both roles. */
    c = load("pools:\n  - name: p\n    models: [m]\n    policy: random\n    workers:\n      prefill: "
             "[http://a:1]\n"
             "      decode: [http://a:2]\n",
             err, sizeof(err));
    CHECK(c != NULL && c->pools[0].policy_prefill == PDR_POLICY_RANDOM &&
          c->pools[0].policy_decode == PDR_POLICY_RANDOM);
    pdr_config_unref(c);

    /* The shorthand: one pool "default" of the top-level keys, serving any model. */
    c = load(WORKERS "policy: random\n", err, sizeof(err));
    CHECK(c != NULL);
    if (c != NULL) {
        CHECK(c->n_pools == 0 && pdr_config_pool_count(c) == 1);
        pdr_config_pool(c, 0, &a);
        CHECK_STR(a.name, "default");
        CHECK(a.n_models == 0 && a.n_prefill == 1 && a.n_decode == 1 &&
              a.policy_prefill == PDR_POLICY_RANDOM);
        CHECK(pdr_config_pool_for_model(c, "anything", 8) == 0);
        CHECK(pdr_config_pool_find(c, "default", 7) == 0);
        pdr_config_unref(c);
    }

    /* Both forms at once. */
    EXPECT_ERROR(
        WORKERS "pools:\n" POOL_A,
        "bad.yaml:1:1: workers: not allowed beside pools: (line 4); with pools:, each pool has its own "
        "workers, protocol and policy (a top-level workers: is the one-pool form)");
    EXPECT_ERROR("pools:\n" POOL_A "protocol: sglang\n",
                 "bad.yaml:7:1: protocol: not allowed beside pools: (line 1)*");
    EXPECT_ERROR("policy: random\npools:\n" POOL_A,
                 "bad.yaml:1:1: policy: not allowed beside pools: (line 2)*");
    EXPECT_ERROR(
        "pools:\n" POOL_A "discovery:\n  dns:\n    decode: { name: d.local, port: 1 }\n",
        "bad.yaml:7:1: discovery: not allowed beside pools: (line 1); with pools:, each pool has its "
        "own discovery: section (a top-level discovery: is the one-pool form)");

    /* Shape of pools: and of a pool. */
    EXPECT_ERROR("pools: []\n", "bad.yaml:1:8: pools: at least one pool is required (or leave pools: out for "
                                "one pool)");
    EXPECT_ERROR("pools: {name: a}\n", "bad.yaml:1:8: pools: expected a sequence of pools ({name, models, "
                                       "workers}), got a mapping");
    EXPECT_ERROR("pools:\n  - x\n",
                 "bad.yaml:2:5: pools[0]: expected a mapping {name, models, workers}, got a "
                 "scalar");
    EXPECT_ERROR(
        "pools:\n  - name: a\n    modles: [m]\n",
        "bad.yaml:3:5: unknown key 'modles' in 'pools[0]' (valid keys: name, models, protocol, policy, "
        "workers, timeouts, discovery, cache_aware, tokenizer)");
    EXPECT_ERROR("pools:\n  - name: a\n    models: [m]\n    timeouts: { kv_transfer_ms: 0 }\n",
                 "bad.yaml:4:33: pools[0].timeouts.kv_transfer_ms: 0 is out of range, expected 1..86400000");
    EXPECT_ERROR("pools:\n  - models: [m]\n    workers: { prefill: [http://a:1], decode: [http://a:2] }\n",
                 "bad.yaml:2:5: pools[0]: missing required key 'name'");
    EXPECT_ERROR("pools:\n  - name: a\n    workers: { prefill: [http://a:1], decode: [http://a:2] }\n",
                 "bad.yaml:2:5: pools[0]: missing required key 'models' (the model names the pool serves)");
    EXPECT_ERROR("pools:\n  - name: a\n    models: [m]\n",
                 "bad.yaml:2:5: pools[0].workers.prefill: at least one prefill worker is required, or a "
                 "discovery source for it (the pool's discovery.dns.prefill.name or "
                 "discovery.kubernetes.prefill.selector)");
    EXPECT_ERROR("pools:\n  - name: a\n    models: [m]\n    workers: { prefill: [http://a:1] }\n",
                 "bad.yaml:4:14: pools[0].workers.decode: at least one decode worker is required, or a "
                 "discovery source for it*");
    EXPECT_ERROR("pools:\n  - name: a\n    models: [m]\n    workers: { prefill: [http://a:1], decode: [] }\n",
                 "bad.yaml:4:47: pools[0].workers.decode: at least one decode worker is required*");

    /* Names. */
    EXPECT_ERROR("pools:\n  - name: Pool A\n",
                 "bad.yaml:2:11: pools[0].name: 'Pool A' is not a pool name: 1..63 characters of a-z, 0-9, "
                 "'-' and '_'");
    EXPECT_ERROR("pools:\n  - name: ''\n", "bad.yaml:2:11: pools[0].name: '' is not a pool name*");
    EXPECT_ERROR("pools:\n  - name: a\n    name: b\n", "bad.yaml:3:5: duplicate key 'name' in 'pools[0]'");
    EXPECT_ERROR("pools:\n" POOL_A "  - name: pool-a\n",
                 "bad.yaml:7:11: pools[1].name: duplicate pool name 'pool-a' (same as pools[0])");
    EXPECT_ERROR("pools:\n  - name: [a]\n",
                 "bad.yaml:2:11: pools[0].name: expected a pool name, got a sequence");

    /* Models. */
    EXPECT_ERROR("pools:\n  - name: a\n    models: []\n", "bad.yaml:3:13: pools[0].models: a pool serves at "
                                                          "least one model");
    EXPECT_ERROR("pools:\n  - name: a\n    models: m\n",
                 "bad.yaml:3:13: pools[0].models: expected a sequence of model names, got a scalar");
    EXPECT_ERROR("pools:\n  - name: a\n    models: [m, '']\n",
                 "bad.yaml:3:17: pools[0].models[1]: a model name has 1..256 bytes");
    EXPECT_ERROR("pools:\n  - name: a\n    models: [m, \"x\\ty\"]\n",
                 "bad.yaml:3:17: pools[0].models[1]: a model name has no control characters, '\"' or '\\'");
    EXPECT_ERROR("pools:\n  - name: a\n    models: [m, {x: 1}]\n",
                 "bad.yaml:3:17: pools[0].models[1]: expected a model name, got a mapping");
    EXPECT_ERROR("pools:\n  - name: a\n    models: [m, n, m]\n",
                 "bad.yaml:3:20: pools[0].models[2]: model 'm' is listed twice (same as pools[0].models[0])");
    EXPECT_ERROR(
        "pools:\n" POOL_A "  - name: b\n    models: [qwen, llama]\n",
        "bad.yaml:8:20: pools[1].models[1]: model 'llama' is served by pool 'pool-a' already; a model "
        "belongs to one pool");

    /* Protocol, policy, workers, discovery. */
    EXPECT_ERROR(
        "pools:\n  - name: a\n    protocol: grpc\n",
        "bad.yaml:3:15: pools[0].protocol: unknown protocol 'grpc', expected sglang, vllm or pdshim");
    EXPECT_ERROR("pools:\n  - name: a\n    models: [m]\n    protocol: pdshim\n    workers: { prefill: [ "
                 "http://127.0.0.1:1 ], decode: [ http://127.0.0.1:2 ] }\n",
                 "bad.yaml:4:15: pools[0].protocol: protocol pdshim signs tickets: set ticket: { key_file: "
                 "FILE } (or key_files)");
    EXPECT_ERROR("pools:\n  - name: a\n    policy: { decode: fastest }\n",
                 "bad.yaml:3:23: pools[0].policy.decode: unknown policy 'fastest', expected round_robin, "
                 "least_load, random, cache_aware, power_of_two or precise_prefix");
    EXPECT_ERROR("pools:\n  - name: a\n    workers: { decode: [ { url: http://a:1, bootstrap_port: 1 } ] }\n",
                 "bad.yaml:3:61: pools[0].workers.decode[0].bootstrap_port: only prefill workers have a "
                 "bootstrap port");
    EXPECT_ERROR("pools:\n  - name: a\n    workers: { prefill: [ http://a:1, http://A:1/ ] }\n",
                 "bad.yaml:3:39: pools[0].workers.prefill[1]: duplicate worker 'http://a:1' (same as "
                 "pools[0].workers.prefill[0])");
    EXPECT_ERROR("pools:\n" POOL_A
                 "  - name: b\n    models: [qwen]\n    workers:\n      prefill: [ http://127.0.0.1:31001 ]\n"
                 "      decode: [ http://127.0.0.1:32002 ]\n",
                 "bad.yaml:10:18: pools[1].workers.prefill[0]: worker 'http://127.0.0.1:31001' is in pool "
                 "'pool-a' already; a worker serves one pool");
    /* A pool's discovery: the top-level section's keys and checks, under pools[i]. */
    EXPECT_ERROR("pools:\n  - name: a\n    discovery: { dns: { prefill: { port: 1 } } }\n",
                 "bad.yaml:3:34: pools[0].discovery.dns.prefill: missing required key 'name'");
    EXPECT_ERROR("pools:\n  - name: a\n    discovery: { kubernetes: { decode: { port: 1 } } }\n",
                 "bad.yaml:3:40: pools[0].discovery.kubernetes.decode: missing required key 'selector'");
    EXPECT_ERROR("pools:\n  - name: a\n    discovery: { kubernetes: { decode: { selector: a=b, "
                 "bootstrap_port: 1 } } }\n",
                 "bad.yaml:3:73: pools[0].discovery.kubernetes.decode.bootstrap_port: only prefill workers "
                 "have a bootstrap port");
    EXPECT_ERROR("pools:\n  - name: a\n    discovery: { kubernetes: { prefill: { selector: 'a b' } } }\n",
                 "bad.yaml:3:53: pools[0].discovery.kubernetes.prefill.selector: 'a b': invalid term*");
    EXPECT_ERROR("pools:\n  - name: a\n    discovery: { consul: {} }\n",
                 "bad.yaml:3:18: unknown key 'consul' in 'pools[0].discovery' (valid keys: dns, kubernetes)");
    EXPECT_ERROR("pools:\n  - name: a\n    discovery: { dns: { interval_ms: 1 } }\n",
                 "bad.yaml:3:38: pools[0].discovery.dns.interval_ms: 1 is out of range*");
    EXPECT_ERROR("pools:\n  - name: a\n    discovery: []\n",
                 "bad.yaml:3:16: pools[0].discovery: expected a mapping, got a sequence");
    /* Discovery for one role only: the other still needs workers or a source. */
    EXPECT_ERROR("pools:\n  - name: a\n    models: [m]\n"
                 "    discovery: { kubernetes: { prefill: { selector: app=p } } }\n",
                 "bad.yaml:2:5: pools[0].workers.decode: at least one decode worker is required, or a "
                 "discovery source for it (the pool's discovery.dns.decode.name or "
                 "discovery.kubernetes.decode.selector)");
    char many[8192];
    size_t n = (size_t)snprintf(many, sizeof(many), "pools:\n");
    for (int i = 0; i <= 64; i++)
        n += (size_t)snprintf(many + n, sizeof(many) - n, "  - {name: p%d}\n", i);
    EXPECT_ERROR(many, "bad.yaml:2:3: pools: 65 pools, at most 64 are allowed");

    /* Flags that set the one-pool form's keys do not apply to a file with pools. */
    {
        const char *path = write_file("cli-pools.yaml", "pools:\n" POOL_A);
        const char *argv1[] = {"pdrouter", "--config", path, "--policy", "random", NULL};
        pdr_cli_t cli;
        CHECK(pdr_config_parse_args(5, (char **)argv1, &cli, err, sizeof(err)) == PDR_EINVAL);
        CHECK(strstr(err, "argv: --policy/--prefill-policy/--decode-policy: ") == err &&
              strstr(err, "has pools:, each with its own policy and protocol; set them there") != NULL);
        const char *argv2[] = {"pdrouter", "--config", path, "--port", "7001", NULL};
        CHECK(pdr_config_parse_args(5, (char **)argv2, &cli, err, sizeof(err)) == 0 && cli.config != NULL &&
              cli.config->n_pools == 1 && cli.config->listen_port == 7001);
        pdr_config_unref(cli.config);
        unlink(path);
    }

    /* Snapshots built in code get the same checks from pdr_config_validate. */
    c = load("pools:\n" POOL_A POOL_B, err, sizeof(err));
    if (c != NULL) {
        char *saved = c->pools[1].models[0];
        c->pools[1].models[0] = c->pools[0].models[0];
        CHECK(pdr_config_validate(c, err, sizeof(err)) == PDR_ECONFIG);
        CHECK_STR(err, "pools[1].models[0]: model 'llama' is served by pool 'pool-a' already");
        c->pools[1].models[0] = saved;
        c->pools[1].protocol = PDR_PROTO_PDSHIM;
        CHECK(pdr_config_validate(c, err, sizeof(err)) == PDR_ECONFIG);
        CHECK_STR(err, "pools[1].protocol: protocol pdshim signs tickets: set ticket: { key_file: FILE } (or "
                       "key_files)");
        c->pools[1].protocol = PDR_PROTO_SGLANG;
        c->pools[1].name[0] = 'P';
        CHECK(pdr_config_validate(c, err, sizeof(err)) == PDR_ECONFIG);
        CHECK_STR(err, "pools[1].name: 1..63 characters of a-z, 0-9, '-' and '_'");
        c->pools[1].name[0] = 'p';
        CHECK(pdr_config_validate(c, err, sizeof(err)) == 0);
        pdr_config_unref(c);
    }
}

/* Worker key, request id headers and head limits. */
/* pools[i].discovery: the top-level section's shape, one per pool, with its own defaults. */
/* cache_aware per pool and role: the role's own, else the pool's, else the top-level; the seed keys. */
static void test_pool_cache_aware(void)
{
    char err[512];
    pdr_config_t *c =
        load("cache_aware: { cache_threshold: 0.4, seed: smallest_tree, hash_prefix_chars: 512 }\n"
             "pools:\n" POOL_A "    cache_aware:\n"
             "      balance_abs_threshold: 8\n"
             "      seed: consistent_hash\n"
             "      prefill: { cache_threshold: 0.9, hash_load_factor: 2 }\n"
             "      decode: { seed: smallest_tree, balance_rel_threshold: 3 }\n" POOL_B,
             err, sizeof(err));
    CHECK(c != NULL);
    if (c == NULL) {
        fprintf(stderr, "  %s\n", err);
        return;
    }
    pdr_pool_conf_t a, b;
    pdr_config_pool(c, 0, &a);
    pdr_config_pool(c, 1, &b);
    pdr_cache_aware_conf_t x;
    pdr_config_pool_cache_aware(c, &a, PDR_ROLE_PREFILL, &x);
    CHECK(x.cache_threshold == 0.9 && x.balance_abs_threshold == 8 && x.balance_rel_threshold == 1.5 &&
          x.seed == PDR_CA_SEED_CONSISTENT_HASH && x.hash_prefix_chars == 512 && x.hash_load_factor == 2);
    pdr_config_pool_cache_aware(c, &a, PDR_ROLE_DECODE, &x);
    CHECK(x.cache_threshold == 0.4 && x.balance_abs_threshold == 8 && x.balance_rel_threshold == 3 &&
          x.seed == PDR_CA_SEED_SMALLEST_TREE && x.hash_load_factor == 1.5);
    /* A pool that sets nothing has the top-level settings, and so does the shorthand's view. */
    pdr_config_pool_cache_aware(c, &b, PDR_ROLE_PREFILL, &x);
    CHECK(x.cache_threshold == 0.4 && x.balance_abs_threshold == 64 && x.seed == PDR_CA_SEED_SMALLEST_TREE &&
          x.hash_prefix_chars == 512);
    pdr_config_unref(c);
    c = load(WORKERS, err, sizeof(err));
    CHECK(c != NULL);
    if (c != NULL) {
        pdr_config_pool(c, 0, &a);
        pdr_config_pool_cache_aware(c, &a, PDR_ROLE_DECODE, &x);
        /* The defaults: sglang's thresholds, consistent-hash seeding over the first 256 bytes. */
        CHECK(x.cache_threshold == 0.3 && x.balance_abs_threshold == 64 && x.balance_rel_threshold == 1.5 &&
              x.seed == PDR_CA_SEED_CONSISTENT_HASH && x.hash_prefix_chars == 256 &&
              x.hash_load_factor == 1.5);
        /* A snapshot built in code is checked too. */
        c->cache_aware.hash_load_factor = 0.5;
        CHECK(pdr_config_validate(c, err, sizeof(err)) == PDR_ECONFIG &&
              strcmp(err, "cache_aware.hash_load_factor: out of range, expected 1..100") == 0);
        pdr_config_unref(c);
    }
    EXPECT_ERROR("cache_aware: { seed: nearest }\n",
                 "bad.yaml:1:22: cache_aware.seed: unknown seed 'nearest', expected smallest_tree or "
                 "consistent_hash");
    EXPECT_ERROR("cache_aware: { hash_prefix_chars: 0 }\n",
                 "bad.yaml:1:35: cache_aware.hash_prefix_chars: 0 is out of range, expected 1..1048576");
    EXPECT_ERROR("cache_aware: { hash_load_factor: 0.9 }\n",
                 "bad.yaml:1:34: cache_aware.hash_load_factor: 0.9 is out of range, expected 1..100");
    EXPECT_ERROR("pools:\n" POOL_A "    cache_aware: { prefill: { cache_threshold: 2 } }\n",
                 "bad.yaml:7:48: pools[0].cache_aware.prefill.cache_threshold: 2 is out of range, expected "
                 "0..1");
    EXPECT_ERROR("pools:\n" POOL_A "    cache_aware: { max_tree_size: 4096 }\n",
                 "bad.yaml:7:20: unknown key 'max_tree_size' in 'pools[0].cache_aware'*");
    EXPECT_ERROR(
        "pools:\n" POOL_A "    cache_aware: { decode: { seed: 1 } }\n",
        "bad.yaml:7:36: pools[0].cache_aware.decode.seed: unknown seed '1', expected smallest_tree or "
        "consistent_hash");
}

static void test_pool_discovery(void)
{
    char err[512];
    pdr_config_t *c = load("pools:\n"
                           "  - name: a\n"
                           "    models: [ma]\n"
                           "    discovery:\n"
                           "      kubernetes:\n"
                           "        api_server: http://127.0.0.1:6443\n"
                           "        namespace: llm\n"
                           "        prefill: { selector: 'app=a,role=prefill', port: 30000 }\n"
                           "        decode: { selector: 'app=a,role=decode' }\n"
                           "  - name: b\n"
                           "    models: [mb]\n"
                           "    workers: { decode: [ http://127.0.0.1:31002 ] }\n"
                           "    discovery:\n"
                           "      dns:\n"
                           "        resolver: 127.0.0.1:5353\n"
                           "        prefill: { name: prefill.b.local, port: 30000, bootstrap_port: none }\n",
                           err, sizeof(err));
    CHECK(c != NULL);
    if (c == NULL) {
        fprintf(stderr, "  %s\n", err);
        return;
    }
    pdr_pool_conf_t a, b;
    pdr_config_pool(c, 0, &a);
    pdr_config_pool(c, 1, &b);
    CHECK(a.n_prefill == 0 && a.n_decode == 0);
    CHECK_STR(a.discovery.kubernetes.api_server, "http://127.0.0.1:6443");
    CHECK_STR(a.discovery.kubernetes.namespace_, "llm");
    CHECK_STR(a.discovery.kubernetes.role[PDR_ROLE_PREFILL].selector, "app=a,role=prefill");
    CHECK_STR(a.discovery.kubernetes.role[PDR_ROLE_DECODE].selector, "app=a,role=decode");
    CHECK(a.discovery.kubernetes.role[PDR_ROLE_PREFILL].port == 30000 &&
          a.discovery.kubernetes.role[PDR_ROLE_DECODE].port == 0);
    CHECK(a.discovery.kubernetes.role[PDR_ROLE_PREFILL].bootstrap_port == 8998 &&
          a.discovery.kubernetes.role[PDR_ROLE_DECODE].bootstrap_port == -1);
    CHECK(a.discovery.kubernetes.watch_timeout_s == 300 && a.discovery.dns.interval_ms == 5000);
    CHECK(a.discovery.dns.role[0].name == NULL && a.discovery.dns.role[1].name == NULL);
    CHECK(b.n_prefill == 0 && b.n_decode == 1);
    CHECK_STR(b.discovery.dns.role[PDR_ROLE_PREFILL].name, "prefill.b.local");
    CHECK(b.discovery.dns.role[PDR_ROLE_PREFILL].port == 30000 &&
          b.discovery.dns.role[PDR_ROLE_PREFILL].bootstrap_port == -1);
    CHECK_STR(b.discovery.dns.resolver, "127.0.0.1:5353");
    CHECK(b.discovery.kubernetes.role[0].selector == NULL && b.discovery.kubernetes.role[1].selector == NULL);
    /* The top-level section stays unused with pools:. */
    CHECK(c->discovery.dns.role[0].name == NULL && c->discovery.kubernetes.role[0].selector == NULL);
    CHECK(pdr_config_validate(c, err, sizeof(err)) == 0);
    /* A snapshot built in code is checked the same way, the key naming the pool. */
    c->pools[1].discovery.dns.interval_ms = 1;
    CHECK(pdr_config_validate(c, err, sizeof(err)) == PDR_ECONFIG);
    CHECK(strstr(err, "pools[1].discovery.dns.interval_ms: 1 is out of range") == err);
    c->pools[1].discovery.dns.interval_ms = 5000;
    char *sel = c->pools[0].discovery.kubernetes.role[PDR_ROLE_DECODE].selector;
    c->pools[0].discovery.kubernetes.role[PDR_ROLE_DECODE].selector = NULL;
    CHECK(pdr_config_validate(c, err, sizeof(err)) == PDR_ECONFIG);
    CHECK(strstr(err, "pools[0].workers.decode: at least one decode worker is required, or a discovery "
                      "source for it") == err);
    c->pools[0].discovery.kubernetes.role[PDR_ROLE_DECODE].selector = sel;
    pdr_config_unref(c);

    /* The shorthand's view carries the top-level section. */
    c = load("discovery:\n  kubernetes:\n    prefill: { selector: app=p }\n    decode: { selector: app=d }\n",
             err, sizeof(err));
    CHECK(c != NULL);
    if (c != NULL) {
        pdr_config_pool(c, 0, &a);
        CHECK_STR(a.name, "default");
        CHECK_STR(a.discovery.kubernetes.role[PDR_ROLE_DECODE].selector, "app=d");
        pdr_config_unref(c);
    }
}

static void test_header_keys(void)
{
    char err[512], text[1024];
    pdr_config_t *c = load(WORKERS, err, sizeof(err));
    CHECK(c != NULL);
    if (c != NULL) {
        CHECK(c->worker_api_key == NULL && c->worker_api_key_file == NULL);
        CHECK(c->limits.max_header_bytes == 32768 && c->limits.max_headers == 100);
        CHECK(c->n_request_id_headers == 4);
        if (c->n_request_id_headers == 4) {
            CHECK_STR(c->request_id_headers[0], "x-request-id");
            CHECK_STR(c->request_id_headers[3], "request-id");
        }
        pdr_config_unref(c);
    }
    const char *key = write_file("key", "s3cret-key\n");
    chmod(key, 0640);
    snprintf(
        text, sizeof(text),
        "workers:\n  api_key_file: %s\n  prefill: [ http://127.0.0.1:30001 ]\n  decode: [ "
        "http://127.0.0.1:30002 ]\n"
        "request_id_headers: [X-My-Id, x-request-id]\nlimits: { max_header_bytes: 4096, max_headers: 50 }\n",
        key);
    c = load(text, err, sizeof(err));
    CHECK(c != NULL);
    if (c != NULL) {
        CHECK_STR(c->worker_api_key, "s3cret-key");
        CHECK_STR(c->worker_api_key_file, key);
        CHECK(c->n_request_id_headers == 2);
        if (c->n_request_id_headers == 2)
            CHECK_STR(c->request_id_headers[0], "x-my-id");
        CHECK(c->limits.max_header_bytes == 4096 && c->limits.max_headers == 50);
        pdr_config_unref(c);
    } else {
        fprintf(stderr, "  %s\n", err);
    }
    c = load(WORKERS "request_id_headers: []\n", err, sizeof(err));
    CHECK(c != NULL && c->n_request_id_headers == 0);
    pdr_config_unref(c);
    /* Refused: a key others can read, a key with a space, an empty one, a missing file. */
    chmod(key, 0644);
    snprintf(text, sizeof(text), "workers:\n  api_key_file: %s\n", key);
    c = load(text, err, sizeof(err));
    CHECK(c == NULL && strstr(err, "bad.yaml:2:17: workers.api_key_file: ") == err &&
          strstr(err, "mode 0644"));
    pdr_config_unref(c);
    chmod(key, 0600);
    write_file("key", "two words\n");
    c = load(text, err, sizeof(err));
    CHECK(c == NULL && strstr(err, "space, control character"));
    pdr_config_unref(c);
    write_file("key", "\n");
    c = load(text, err, sizeof(err));
    CHECK(c == NULL && strstr(err, "the key is empty"));
    pdr_config_unref(c);
    c = load("workers:\n  api_key_file: /nonexistent/key\n", err, sizeof(err));
    CHECK(c == NULL && strstr(err, "/nonexistent/key: No such file or directory"));
    pdr_config_unref(c);
    EXPECT_ERROR(WORKERS "request_id_headers: [\"bad name\"]\n",
                 "bad.yaml:4:22: request_id_headers[0]: byte 0x20 cannot be in a header name (RFC 9110 token "
                 "characters "
                 "only)");
    EXPECT_ERROR(
        WORKERS "request_id_headers: x-request-id\n",
        "bad.yaml:4:21: request_id_headers: expected a sequence of header names such as [x-request-id], got "
        "a scalar*");
    EXPECT_ERROR(WORKERS "limits: { max_headers: 101 }\n", "bad.yaml:4:24: limits.max_headers: *");
    EXPECT_ERROR(WORKERS "limits: { max_header_bytes: 1000000 }\n",
                 "bad.yaml:4:29: limits.max_header_bytes: *");

    /* Flags: --api-key, --api-key-file, --request-id-headers with several words. */
    pdr_cli_t cli;
    const char *argv1[] = {"pdrouter",
                           "--prefill",
                           "http://127.0.0.1:1",
                           "--decode",
                           "http://127.0.0.1:2",
                           "--api-key",
                           "k3y",
                           "--request-id-headers",
                           "X-A",
                           "x-b",
                           "--port",
                           "9000",
                           NULL};
    CHECK(parse(argv1, &cli, err, sizeof(err)) == 0);
    if (cli.config != NULL) {
        CHECK_STR(cli.config->worker_api_key, "k3y");
        CHECK(cli.config->n_request_id_headers == 2 && cli.config->listen_port == 9000);
        if (cli.config->n_request_id_headers == 2) {
            CHECK_STR(cli.config->request_id_headers[0], "x-a");
            CHECK_STR(cli.config->request_id_headers[1], "x-b");
        }
        pdr_config_unref(cli.config);
    }
    write_file("key", "filekey\n");
    const char *argv2[] = {
        "pdrouter", "--prefill", "http://127.0.0.1:1", "--decode", "http://127.0.0.1:2", "--api-key-file",
        key,        NULL};
    CHECK(parse(argv2, &cli, err, sizeof(err)) == 0);
    if (cli.config != NULL) {
        CHECK_STR(cli.config->worker_api_key, "filekey");
        pdr_config_unref(cli.config);
    }
    EXPECT_ARGV_ERROR("argv: --api-key: the key holds a space*", "--prefill", "http://127.0.0.1:1",
                      "--decode", "http://127.0.0.1:2", "--api-key", "a b");
    EXPECT_ARGV_ERROR("argv: --api-key-file: give one of --api-key and --api-key-file, once", "--api-key",
                      "a", "--api-key-file", key);
    EXPECT_ARGV_ERROR("argv: --request-id-headers 'a:b': ':' cannot be in a header name*",
                      "--request-id-headers", "x", "a:b");
    unlink(key);
}

/* precise_prefix: the policy name, a worker's kv_events endpoint, the top-level kv_events section. */
/* retries' budget and back-off, and the breaker: defaults, YAML, the sglang flags and the checks. */
static void test_retry_breaker_keys(void)
{
    char err[512];
    pdr_config_t *c = load(WORKERS, err, sizeof(err));
    CHECK(c != NULL);
    if (c != NULL) {
        CHECK(c->retries.budget_percent == 20 && c->retries.min_concurrent == 3);
        CHECK(c->retries.initial_backoff_ms == 50 && c->retries.max_backoff_ms == 30000);
        CHECK(c->retries.backoff_multiplier == 1.5 && c->retries.jitter_factor == 0.2);
        CHECK(c->breaker.enabled == 1 && c->breaker.consecutive_failures == 3);
        CHECK(c->breaker.open_ms == 10000 && c->breaker.max_open_ms == 300000);
        pdr_config_unref(c);
    }
    c = load(WORKERS "retries: { budget_percent: 50, min_concurrent: 0, initial_backoff_ms: 0, "
                     "max_backoff_ms: 10, backoff_multiplier: 2, jitter_factor: 0 }\n"
                     "breaker: { enabled: false, consecutive_failures: 1, open_ms: 5, max_open_ms: 5 }\n",
             err, sizeof(err));
    CHECK(c != NULL);
    if (c != NULL) {
        CHECK(c->retries.budget_percent == 50 && c->retries.min_concurrent == 0);
        CHECK(c->retries.initial_backoff_ms == 0 && c->retries.max_backoff_ms == 10);
        CHECK(c->retries.backoff_multiplier == 2 && c->retries.jitter_factor == 0);
        CHECK(c->breaker.enabled == 0 && c->breaker.consecutive_failures == 1);
        CHECK(c->breaker.open_ms == 5 && c->breaker.max_open_ms == 5);
        pdr_config_unref(c);
    } else {
        fprintf(stderr, "  %s\n", err);
    }
    EXPECT_ERROR(WORKERS "retries: { budget_percent: 101 }\n", "bad.yaml:*");
    EXPECT_ERROR(WORKERS "retries: { initial_backoff_ms: 100, max_backoff_ms: 10 }\n", "*");
    EXPECT_ERROR(WORKERS "breaker: { open_ms: 100, max_open_ms: 10 }\n", "*");
    EXPECT_ERROR(WORKERS "breaker: { consecutive_failures: 0 }\n", "bad.yaml:*");
    EXPECT_ERROR(WORKERS "breaker: { open: 1 }\n", "bad.yaml:*");
    const char *a[] = {"pdrouter",   "--prefill",
                       "http://a:1", "--decode",
                       "http://b:2", "--retry-initial-backoff-ms",
                       "100",        "--retry-max-backoff-ms",
                       "5000",       "--retry-backoff-multiplier",
                       "2.5",        "--retry-jitter-factor",
                       "0.1",        NULL};
    pdr_cli_t cli;
    CHECK(parse(a, &cli, err, sizeof(err)) == 0);
    if (cli.config != NULL) {
        const pdr_config_t *k = cli.config;
        CHECK(k->retries.initial_backoff_ms == 100 && k->retries.max_backoff_ms == 5000);
        CHECK(k->retries.backoff_multiplier == 2.5 && k->retries.jitter_factor == 0.1);
        pdr_config_unref(cli.config);
    } else {
        fprintf(stderr, "  %s\n", err);
        failures++;
    }
}

static void test_kv_events_keys(void)
{
    char err[512];
    pdr_config_t *c = load(WORKERS, err, sizeof(err));
    CHECK(c != NULL);
    if (c != NULL) {
        CHECK(c->kv_events.max_index_bytes == (int64_t)64 << 20 && c->kv_events.resync_messages == 32);
        CHECK(c->kv_events.replay_timeout_ms == 2000 && c->kv_events.replay_hold_messages == 1024);
        CHECK(c->prefill[0].kv_events == NULL && c->prefill[0].kv_events_replay == NULL);
        pdr_config_unref(c);
    }
    const char *ok =
        "policy: { prefill: precise_prefix }\n"
        "kv_events: { max_index_bytes: 1048576, resync_messages: 4, replay_timeout_ms: 300, "
        "replay_hold_messages: 8 }\n"
        "workers:\n  prefill:\n    - { url: http://127.0.0.1:30001, kv_events: tcp://127.0.0.1:5557, "
        "kv_events_replay: tcp://127.0.0.1:5560 }\n"
        "  decode:\n    - { url: http://127.0.0.1:30002, kv_events: 'tcp://[::1]:5558' }\n";
    c = load(ok, err, sizeof(err));
    CHECK(c != NULL);
    if (c != NULL) {
        CHECK(c->policy_prefill == PDR_POLICY_PRECISE_PREFIX);
        CHECK_STR(pdr_policy_name(c->policy_prefill), "precise_prefix");
        CHECK(c->kv_events.max_index_bytes == 1048576 && c->kv_events.resync_messages == 4);
        CHECK_STR(c->prefill[0].kv_events, "tcp://127.0.0.1:5557");
        CHECK_STR(c->decode[0].kv_events, "tcp://[::1]:5558");
        CHECK_STR(c->prefill[0].kv_events_replay, "tcp://127.0.0.1:5560");
        CHECK(c->decode[0].kv_events_replay == NULL);
        CHECK(c->kv_events.replay_timeout_ms == 300 && c->kv_events.replay_hold_messages == 8);
        pdr_config_unref(c);
    } else {
        fprintf(stderr, "%s\n", err);
    }
    EXPECT_ERROR(
        "workers:\n  prefill:\n    - { url: http://a:1, kv_events_replay: 'http://a:5' }\n",
        "bad.yaml:3:44: workers.prefill[0].kv_events_replay: expected a ZMQ endpoint tcp://HOST:PORT*");
    EXPECT_ERROR(WORKERS "kv_events: { replay_timeout_ms: 5 }\n", "bad.yaml:*");
    EXPECT_ERROR("workers:\n  prefill:\n    - { url: http://a:1, kv_events: 'http://a:5' }\n",
                 "bad.yaml:3:37: workers.prefill[0].kv_events: expected a ZMQ endpoint tcp://HOST:PORT*");
    EXPECT_ERROR("workers:\n  prefill:\n    - { url: http://a:1, kv_events: 'tcp://a:0' }\n",
                 "bad.yaml:3:37: workers.prefill[0].kv_events: expected a ZMQ endpoint*");
    EXPECT_ERROR("kv_events: { max_index_bytes: 100 }\n", "bad.yaml:1:31: kv_events.max_index_bytes:*");
    EXPECT_ERROR("kv_events: { resync_messages: 0 }\n", "bad.yaml:1:31: kv_events.resync_messages:*");
    char msg[256];
    CHECK(pdr_kv_endpoint_check("ipc:///tmp/kv", 13, msg, sizeof(msg)) == 0);
    CHECK(pdr_kv_endpoint_check("tcp://host", 10, msg, sizeof(msg)) == PDR_EINVAL);
    CHECK(pdr_kv_endpoint_check("tcp://[zz]:1", 12, msg, sizeof(msg)) == PDR_EINVAL);
    CHECK(pdr_kv_endpoint_check("tcp://a b:1", 11, msg, sizeof(msg)) == PDR_EINVAL);
}

/* After each case, in its child: its failed checks fail it. */
static void after_case(void)
{
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        fflush(stderr);
        exit(1);
    }
}

/* ticket: (protocol pdshim): key_file and key_files read at load (a missing or short key is an error at
 * its own line and column), ttl_ms, both forms at once refused, and pdshim runnable only with a key. */
static void test_ticket_keys(void)
{
    char k1[300], k2[300], shortk[300], err[512];
    snprintf(k1, sizeof(k1), "%s/ticket1.key", tmpdir);
    snprintf(k2, sizeof(k2), "%s/ticket2.key", tmpdir);
    snprintf(shortk, sizeof(shortk), "%s/short.key", tmpdir);
    FILE *f = fopen(k1, "w");
    fputs("0123456789abcdef0123456789abcdef\n", f);
    fclose(f);
    f = fopen(k2, "w");
    fputs("another key of at least thirty-two bytes\n", f);
    fclose(f);
    f = fopen(shortk, "w");
    fputs("short\n", f);
    fclose(f);
    char text[2048];
    snprintf(text, sizeof(text), "protocol: pdshim\nticket: { key_file: %s }\n" WORKERS, k1);
    pdr_config_t *c = load(text, err, sizeof(err));
    CHECK(c != NULL);
    if (c != NULL) {
        CHECK(c->protocol == PDR_PROTO_PDSHIM && c->ticket.keys != NULL && c->ticket.keys->n == 1);
        CHECK(c->ticket.ttl_ms == 30000 && c->ticket.n_key_files == 1 &&
              strcmp(c->ticket.key_files[0], k1) == 0);
        pdr_config_unref(c);
    }
    snprintf(text, sizeof(text),
             "protocol: pdshim\nticket:\n  key_files: [ %s, %s ]\n  ttl_ms: 12000\n" WORKERS, k2, k1);
    c = load(text, err, sizeof(err));
    CHECK(c != NULL);
    if (c != NULL) {
        CHECK(c->ticket.keys->n == 2 && c->ticket.ttl_ms == 12000 && strcmp(c->ticket.key_files[0], k2) == 0);
        pdr_config_unref(c);
    }
    /* Keys without pdshim are allowed (a rollout sets them first). */
    snprintf(text, sizeof(text), "ticket: { key_file: %s }\n" WORKERS, k1);
    c = load(text, err, sizeof(err));
    CHECK(c != NULL);
    pdr_config_unref(c);
    char want[1024];
    snprintf(text, sizeof(text), "protocol: pdshim\nticket: { key_file: %s/missing.key }\n" WORKERS, tmpdir);
    snprintf(want, sizeof(want),
             "bad.yaml:2:21: ticket.key_file: key file %s/missing.key: No such file or directory", tmpdir);
    EXPECT_ERROR(text, want);
    snprintf(text, sizeof(text), "ticket:\n  key_files:\n    - %s\n    - %s\n" WORKERS, k1, shortk);
    snprintf(want, sizeof(want),
             "bad.yaml:4:7: ticket.key_files: key file %s: 5 bytes; a key has at least 32 (head -c 32 "
             "/dev/urandom)",
             shortk);
    EXPECT_ERROR(text, want);
    snprintf(text, sizeof(text), "ticket: { key_files: [ %s, %s ] }\n" WORKERS, k1, k1);
    snprintf(want, sizeof(want), "bad.yaml:1:22: ticket.key_files: key file %s: the same key as %s", k1, k1);
    EXPECT_ERROR(text, want);
    snprintf(text, sizeof(text), "ticket: { key_file: %s, key_files: [ %s ] }\n" WORKERS, k1, k2);
    snprintf(want, sizeof(want),
             "bad.yaml:1:%zu: ticket.key_files: ticket has key_file or key_files, not both (line 1)",
             strlen("ticket: { key_file: , key_files: ") + strlen(k1) + 1);
    EXPECT_ERROR(text, want);
    EXPECT_ERROR(
        "ticket: { key_files: [] }\n" WORKERS,
        "bad.yaml:1:22: ticket.key_files: between 1 and 4 key files (the first signs, all verify), not 0");
    EXPECT_ERROR("ticket: { key_files: x }\n" WORKERS,
                 "bad.yaml:1:22: ticket.key_files: expected a sequence of key files, got a scalar");
    EXPECT_ERROR("ticket: { ttl_ms: 5 }\n" WORKERS,
                 "bad.yaml:1:19: ticket.ttl_ms: 5 is out of range, expected 1000..300000");
    EXPECT_ERROR("ticket: { key: x }\n" WORKERS,
                 "bad.yaml:1:11: unknown key 'key' in 'ticket' (valid keys: key_file, key_files, ttl_ms)");
    unlink(k1);
    unlink(k2);
    unlink(shortk);
}

static const pdr_test_case_t runner_cases[] = {
    {"full_file", test_full_file, 60},
    {"ticket_keys", test_ticket_keys, 60},
    {"defaults", test_defaults, 60},
    {"errors", test_errors, 60},
    {"urls", test_urls, 60},
    {"url_normalization", test_url_normalization, 60},
    {"ipnet", test_ipnet, 60},
    {"cli", test_cli, 60},
    {"cli_sglang", test_cli_sglang, 60},
    {"sglang_keys", test_sglang_keys, 60},
    {"inference_pool_keys", test_inference_pool_keys, 60},
    {"sglang_choices", test_sglang_choices, 60},
    {"discovery", test_discovery, 60},
    {"discovery_errors", test_discovery_errors, 60},
    {"pools", test_pools, 60},
    {"pool_cache_aware", test_pool_cache_aware, 60},
    {"pool_discovery", test_pool_discovery, 60},
    {"header_keys", test_header_keys, 60},
    {"kv_events_keys", test_kv_events_keys, 60},
    {"retry_breaker_keys", test_retry_breaker_keys, 60},
};

int main(int argc, char **argv)
{
    if (mkdtemp(tmpdir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    int rc = pdr_test_run(runner_cases, sizeof(runner_cases) / sizeof(runner_cases[0]), NULL, after_case,
                          argc, argv);

    static const char *const files[] = {"full.yaml",    "empty.yaml",         "cli.yaml",
                                        "cli-bad.yaml", "cli-discovery.yaml", "cli-sglang.yaml",
                                        "cli-k8s.yaml"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        char p[300];
        snprintf(p, sizeof(p), "%s/%s", tmpdir, files[i]);
        unlink(p);
    }
    rmdir(tmpdir);
    return rc;
}
