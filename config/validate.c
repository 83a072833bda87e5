/*
 * Whole-snapshot validation: the checks that do not depend on where a value was written. The YAML
 * loader checks each value as it reads it (to report line and column) and runs this as a final
 * guard; the command line and programmatic builders rely on it. Pure functions, any thread.
 */
#include <arpa/inet.h>
#include <string.h>
#include <strings.h>
#include "err.h"
#include "config.h"
#include "config_internal.h"
#include "defaults.h"

static int same_worker(const pdr_worker_conf_t *a, const pdr_worker_conf_t *b)
{
    if (a->port != b->port || a->is_ipv6 != b->is_ipv6 || a->host == NULL || b->host == NULL)
        return 0;
    if (a->is_ipv6) {
        struct in6_addr x, y;
        if (inet_pton(AF_INET6, a->host, &x) == 1 && inet_pton(AF_INET6, b->host, &y) == 1)
            return memcmp(&x, &y, sizeof(x)) == 0;
    }
    return strcasecmp(a->host, b->host) == 0;
}

long pdr__workers_find_dup(const pdr_worker_conf_t *ws, size_t i)
{
    for (size_t j = 0; j < i; j++)
        if (same_worker(&ws[j], &ws[i]))
            return (long)j;
    return -1;
}

#define CHECK_RANGE(val, lo, hi, name)                                                                       \
    do {                                                                                                     \
        if ((int64_t)(val) < (int64_t)(lo) || (int64_t)(val) > (int64_t)(hi)) {                              \
            pdr__config_err(err, errlen, "%s: %lld is out of range, expected %lld..%lld", name,              \
                            (long long)(val), (long long)(lo), (long long)(hi));                             \
            return PDR_ECONFIG;                                                                              \
        }                                                                                                    \
    } while (0)

static int check_workers(const pdr_worker_conf_t *ws, size_t n, const char *role, char *err, size_t errlen)
{
    if (n == 0) {
        pdr__config_err(err, errlen, "workers.%s: at least one %s worker is required", role, role);
        return PDR_ECONFIG;
    }
    if (n > PDR_CONFIG_MAX_WORKERS) {
        pdr__config_err(err, errlen, "workers.%s: more than %d workers", role, PDR_CONFIG_MAX_WORKERS);
        return PDR_ECONFIG;
    }
    for (size_t i = 0; i < n; i++) {
        const pdr_worker_conf_t *w = &ws[i];
        if (w->url == NULL || w->host == NULL || w->port < 1 || w->port > 65535) {
            pdr__config_err(err, errlen, "workers.%s[%zu]: missing or invalid url", role, i);
            return PDR_ECONFIG;
        }
        if (role[0] == 'd' && w->bootstrap_port != -1) {
            pdr__config_err(err, errlen,
                            "workers.decode[%zu]: bootstrap_port is only valid for prefill workers", i);
            return PDR_ECONFIG;
        }
        if (w->bootstrap_port != -1 && (w->bootstrap_port < 1 || w->bootstrap_port > 65535)) {
            pdr__config_err(err, errlen,
                            "workers.%s[%zu].bootstrap_port: %d is out of range, expected 1..65535", role, i,
                            w->bootstrap_port);
            return PDR_ECONFIG;
        }
        long j = pdr__workers_find_dup(ws, i);
        if (j >= 0) {
            pdr__config_err(err, errlen, "workers.%s[%zu]: duplicate worker '%s' (same as workers.%s[%ld])",
                            role, i, w->url, role, j);
            return PDR_ECONFIG;
        }
    }
    return 0;
}

int pdr_config_validate(const pdr_config_t *c, char *err, size_t errlen)
{
    if (c->listen_host == NULL || c->listen_host[0] == '\0') {
        pdr__config_err(err, errlen, "listen.host: must not be empty");
        return PDR_ECONFIG;
    }
    CHECK_RANGE(c->listen_port, 1, 65535, "listen.port");
    if (c->admin_host == NULL || c->admin_host[0] == '\0') {
        pdr__config_err(err, errlen, "admin.host: must not be empty");
        return PDR_ECONFIG;
    }
    CHECK_RANGE(c->admin_port, 0, 65535, "admin.port");
    if (c->admin_token_file != NULL && c->admin_token_file[0] == '\0') {
        pdr__config_err(err, errlen, "admin.token_file: must not be empty (leave it out for no token)");
        return PDR_ECONFIG;
    }
    CHECK_RANGE(c->protocol, 0, 2, "protocol");
    CHECK_RANGE(c->policy_prefill, 0, 2, "policy.prefill");
    CHECK_RANGE(c->policy_decode, 0, 2, "policy.decode");
    if (c->health.path == NULL || c->health.path[0] != '/') {
        pdr__config_err(err, errlen, "health.path: must start with '/'");
        return PDR_ECONFIG;
    }
    CHECK_RANGE(c->health.interval_ms, 1, PDR_MAX_MS, "health.interval_ms");
    CHECK_RANGE(c->health.timeout_ms, 1, PDR_MAX_MS, "health.timeout_ms");
    CHECK_RANGE(c->health.rise, 1, PDR_MAX_RISE_FALL, "health.rise");
    CHECK_RANGE(c->health.fall, 1, PDR_MAX_RISE_FALL, "health.fall");
    CHECK_RANGE(c->timeouts.connect_ms, 1, PDR_MAX_MS, "timeouts.connect_ms");
    CHECK_RANGE(c->timeouts.first_byte_ms, 1, PDR_MAX_MS, "timeouts.first_byte_ms");
    CHECK_RANGE(c->timeouts.kv_transfer_ms, 1, PDR_MAX_MS, "timeouts.kv_transfer_ms");
    CHECK_RANGE(c->timeouts.stream_idle_ms, 1, PDR_MAX_MS, "timeouts.stream_idle_ms");
    CHECK_RANGE(c->lifecycle.drain_grace_ms, 0, PDR_MAX_MS, "lifecycle.drain_grace_ms");
    CHECK_RANGE(c->lifecycle.drain_timeout_ms, 1, PDR_MAX_MS, "lifecycle.drain_timeout_ms");
    CHECK_RANGE(c->limits.max_body_bytes, PDR_MIN_BODY_BYTES, PDR_MAX_BODY_BYTES, "limits.max_body_bytes");
    CHECK_RANGE(c->limits.max_inflight, 1, PDR_MAX_INFLIGHT, "limits.max_inflight");
    CHECK_RANGE(c->retries.max, 0, PDR_MAX_RETRIES, "retries.max");
    CHECK_RANGE(c->threads, 0, PDR_MAX_THREADS, "threads");
    if (c->log.access_log == NULL || c->log.access_log[0] == '\0') {
        pdr__config_err(err, errlen, "log.access_log: must not be empty (a path, '-' for stdout or 'off')");
        return PDR_ECONFIG;
    }
    if (c->log.level == NULL || pdr__log_level_parse(c->log.level, strlen(c->log.level)) == NULL) {
        pdr__config_err(err, errlen, "log.level: expected debug, info, warn or error");
        return PDR_ECONFIG;
    }
    int rc = check_workers(c->prefill, c->n_prefill, "prefill", err, errlen);
    if (rc == 0)
        rc = check_workers(c->decode, c->n_decode, "decode", err, errlen);
    return rc;
}
