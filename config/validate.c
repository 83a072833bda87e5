/*
 * Whole-snapshot validation: the checks that do not depend on where a value was written. The YAML
 * loader checks each value as it reads it (to report line and column) and runs this as a final
 * guard; the command line and programmatic builders rely on it. Pure functions, any thread.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include "err.h"
#include "util.h"
#include "config.h"
#include "config_internal.h"
#include "defaults.h"
#include "schema.h"

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

int pdr__role_discovered(const pdr_discovery_conf_t *d, pdr_role_t r)
{
    return d->dns.role[r].name != NULL || d->kubernetes.role[r].selector != NULL ||
           d->kubernetes.inference_pool != NULL;
}

typedef int (*string_check_fn)(const char *s, size_t len, char *msg, size_t msglen);

static int check_string(const char *val, string_check_fn fn, const char *key, char *err, size_t errlen)
{
    char msg[256];
    if (val == NULL)
        return 0;
    if (fn == NULL ? val[0] == '\0' : fn(val, strlen(val), msg, sizeof(msg)) != 0) {
        pdr__config_err(err, errlen, "%s: %s", key, fn == NULL ? "must not be empty" : msg);
        return PDR_ECONFIG;
    }
    return 0;
}

/* The range check of the discovery key path ("discovery.dns.interval_ms") in the section d, named with pre
 * in front ("" at the top, "pools[1]." in a pool). */
static int check_disc_range(const pdr_discovery_conf_t *d, const char *pre, const char *path, char *err,
                            size_t errlen)
{
    char key[128];
    const pdr_conf_key_t *k = pdr_conf_key_find(path, strlen(path));
    snprintf(key, sizeof(key), "%s%s", pre, path);
    if (k == NULL) {
        pdr__config_err(err, errlen, "%s: internal error: not in the schema", key);
        return PDR_ECONFIG;
    }
    return pdr_conf_check_range(k, d, offsetof(pdr_config_t, discovery), key, err, errlen);
}

/* One discovery section; pre names where it is ("" at the top, "pools[1]." in a pool). */
static int check_discovery(const pdr_discovery_conf_t *d, const char *pre, char *err, size_t errlen)
{
    static const char *const roles[] = {"prefill", "decode"};
    char key[128], path[96];
    if (check_disc_range(d, pre, "discovery.dns.interval_ms", err, errlen))
        return PDR_ECONFIG;
    snprintf(key, sizeof(key), "%sdiscovery.dns.resolver", pre);
    if (check_string(d->dns.resolver, pdr__check_resolver, key, err, errlen))
        return PDR_ECONFIG;
    for (int r = 0; r < 2; r++) {
        const char *role = roles[r];
        const char *name = d->dns.role[r].name, *selector = d->kubernetes.role[r].selector;
        if (name != NULL) {
            snprintf(key, sizeof(key), "%sdiscovery.dns.%s.name", pre, role);
            if (check_string(name, pdr__check_hostname, key, err, errlen))
                return PDR_ECONFIG;
            snprintf(path, sizeof(path), "discovery.dns.%s.port", role);
            if (check_disc_range(d, pre, path, err, errlen))
                return PDR_ECONFIG;
        }
        snprintf(key, sizeof(key), "%sdiscovery.kubernetes.%s.selector", pre, role);
        if (check_string(selector, pdr__check_selector, key, err, errlen))
            return PDR_ECONFIG;
        snprintf(path, sizeof(path), "discovery.kubernetes.%s.port", role);
        if (check_disc_range(d, pre, path, err, errlen))
            return PDR_ECONFIG;
        int bports[2] = {d->dns.role[r].bootstrap_port, d->kubernetes.role[r].bootstrap_port};
        for (int s = 0; s < 2; s++) {
            snprintf(path, sizeof(path), "discovery.%s.%s.bootstrap_port", s == 0 ? "dns" : "kubernetes",
                     role);
            if (r == PDR_ROLE_DECODE && bports[s] != -1) {
                pdr__config_err(err, errlen, "%s%s: only prefill workers have a bootstrap port", pre, path);
                return PDR_ECONFIG;
            }
            if (r == PDR_ROLE_PREFILL && check_disc_range(d, pre, path, err, errlen))
                return PDR_ECONFIG;
        }
    }
    const struct {
        const char *name, *val;
        string_check_fn fn;
    } strs[] = {
        {"namespace", d->kubernetes.namespace_, pdr__check_namespace},
        {"api_server", d->kubernetes.api_server, pdr__check_api_server},
        {"token_file", d->kubernetes.token_file, NULL},
        {"ca_file", d->kubernetes.ca_file, NULL},
        {"inference_pool", d->kubernetes.inference_pool, pdr__check_hostname},
        {"role_label", d->kubernetes.role_label, pdr__check_annotation},
        {"bootstrap_port_annotation", d->kubernetes.bootstrap_port_annotation, pdr__check_annotation},
    };
    for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) {
        snprintf(key, sizeof(key), "%sdiscovery.kubernetes.%s", pre, strs[i].name);
        if (check_string(strs[i].val, strs[i].fn, key, err, errlen))
            return PDR_ECONFIG;
    }
    if (check_disc_range(d, pre, "discovery.kubernetes.watch_timeout_s", err, errlen))
        return PDR_ECONFIG;
    for (int r = 0; r < 2 && d->kubernetes.inference_pool != NULL; r++)
        if (d->kubernetes.role[r].selector != NULL) {
            pdr__config_err(
                err, errlen,
                "%sdiscovery.kubernetes.%s: the pods of both roles come from inference_pool %s (their "
                "role from the label role_label); remove the %s section",
                pre, roles[r], d->kubernetes.inference_pool, roles[r]);
            return PDR_ECONFIG;
        }
    return 0;
}

/* One role's static workers; prefix names where they are ("workers" or "pools[1].workers"). */
static int check_worker_list(const pdr_worker_conf_t *ws, size_t n, pdr_role_t r, const char *prefix,
                             int discovered, char *err, size_t errlen)
{
    const char *role = r == PDR_ROLE_PREFILL ? "prefill" : r == PDR_ROLE_DECODE ? "decode" : "regular";
    if (n == 0 && !discovered && r != PDR_ROLE_REGULAR) { /* regular workers are optional */
        if (strcmp(prefix, "workers") == 0)
            pdr__config_err(err, errlen, PDR__NO_WORKERS_FMT, role, role, role, role);
        else
            pdr__config_err(err, errlen, "%s.%s: " PDR__NO_POOL_WORKERS_FMT, prefix, role, role, role, role);
        return PDR_ECONFIG;
    }
    if (n > PDR_CONFIG_MAX_WORKERS) {
        pdr__config_err(err, errlen, "%s.%s: more than %d workers", prefix, role, PDR_CONFIG_MAX_WORKERS);
        return PDR_ECONFIG;
    }
    for (size_t i = 0; i < n; i++) {
        const pdr_worker_conf_t *w = &ws[i];
        if (w->url == NULL || w->host == NULL || w->port < 1 || w->port > 65535) {
            pdr__config_err(err, errlen, "%s.%s[%zu]: missing or invalid url", prefix, role, i);
            return PDR_ECONFIG;
        }
        if (r != PDR_ROLE_PREFILL && w->bootstrap_port != -1) {
            pdr__config_err(err, errlen, "%s.%s[%zu]: bootstrap_port is only valid for prefill workers",
                            prefix, role, i);
            return PDR_ECONFIG;
        }
        if (w->bootstrap_port != -1 && (w->bootstrap_port < 1 || w->bootstrap_port > 65535)) {
            pdr__config_err(err, errlen, "%s.%s[%zu].bootstrap_port: %d is out of range, expected 1..65535",
                            prefix, role, i, w->bootstrap_port);
            return PDR_ECONFIG;
        }
        long j = pdr__workers_find_dup(ws, i);
        if (j >= 0) {
            pdr__config_err(err, errlen, "%s.%s[%zu]: duplicate worker '%s' (same as %s.%s[%ld])", prefix,
                            role, i, w->url, prefix, role, j);
            return PDR_ECONFIG;
        }
    }
    return 0;
}

static int check_workers(const pdr_config_t *c, pdr_role_t r, char *err, size_t errlen)
{
    const pdr_worker_conf_t *ws = r == PDR_ROLE_PREFILL ? c->prefill : c->decode;
    size_t n = r == PDR_ROLE_PREFILL ? c->n_prefill : c->n_decode;
    return check_worker_list(ws, n, r, "workers", pdr__role_discovered(&c->discovery, r), err, errlen);
}

static int same_str(const char *a, const char *b)
{
    return a != NULL && b != NULL && strcmp(a, b) == 0;
}

/* pools: names, models (each in one pool), protocol, policies and workers (each in one pool); nothing of
 * the one-pool form beside them. */
static int check_pools(const pdr_config_t *c, char *err, size_t errlen)
{
    char key[96];
    if (c->n_pools > PDR_CONFIG_MAX_POOLS || c->pools == NULL) {
        pdr__config_err(err, errlen, "pools: between 1 and %d pools", PDR_CONFIG_MAX_POOLS);
        return PDR_ECONFIG;
    }
    if (c->n_prefill > 0 || c->n_decode > 0 || c->n_regular > 0) {
        pdr__config_err(err, errlen, "workers: not allowed beside pools: (each pool has its own workers)");
        return PDR_ECONFIG;
    }
    if (pdr__role_discovered(&c->discovery, PDR_ROLE_PREFILL) ||
        pdr__role_discovered(&c->discovery, PDR_ROLE_DECODE)) {
        pdr__config_err(err, errlen,
                        "discovery: not allowed beside pools: (each pool has its own discovery:)");
        return PDR_ECONFIG;
    }
    for (size_t i = 0; i < c->n_pools; i++) {
        const pdr_pool_conf_t *pl = &c->pools[i];
        const char *nm = pl->name;
        size_t len = nm != NULL ? strlen(nm) : 0;
        int ok = len >= 1 && len <= PDR_CONFIG_MAX_POOL_NAME;
        for (size_t k = 0; ok && k < len; k++)
            ok = (nm[k] >= 'a' && nm[k] <= 'z') || (nm[k] >= '0' && nm[k] <= '9') || nm[k] == '-' ||
                 nm[k] == '_';
        if (!ok) {
            pdr__config_err(err, errlen, "pools[%zu].name: 1..%d characters of a-z, 0-9, '-' and '_'", i,
                            PDR_CONFIG_MAX_POOL_NAME);
            return PDR_ECONFIG;
        }
        for (size_t j = 0; j < i; j++)
            if (same_str(c->pools[j].name, nm)) {
                pdr__config_err(err, errlen, "pools[%zu].name: duplicate pool name '%s' (same as pools[%zu])",
                                i, nm, j);
                return PDR_ECONFIG;
            }
        if (pl->n_models == 0 || pl->n_models > PDR_CONFIG_MAX_MODELS || pl->models == NULL) {
            pdr__config_err(err, errlen, "pools[%zu].models: between 1 and %d model names", i,
                            PDR_CONFIG_MAX_MODELS);
            return PDR_ECONFIG;
        }
        for (size_t k = 0; k < pl->n_models; k++) {
            const char *m = pl->models[k];
            size_t ml = m != NULL ? strlen(m) : 0;
            int mok = ml >= 1 && ml <= PDR_CONFIG_MAX_MODEL_NAME;
            for (size_t q = 0; mok && q < ml; q++)
                mok = (unsigned char)m[q] >= 0x20 && m[q] != 0x7f && m[q] != '"' && m[q] != '\\';
            if (!mok) {
                pdr__config_err(err, errlen,
                                "pools[%zu].models[%zu]: 1..%d bytes, no control characters, '\"' or '\\'", i,
                                k, PDR_CONFIG_MAX_MODEL_NAME);
                return PDR_ECONFIG;
            }
            for (size_t j = 0; j <= i; j++)
                for (size_t q = 0; q < (j == i ? k : c->pools[j].n_models); q++)
                    if (same_str(c->pools[j].models[q], m)) {
                        pdr__config_err(err, errlen,
                                        "pools[%zu].models[%zu]: model '%s' is served by pool '%s' already",
                                        i, k, m, c->pools[j].name);
                        return PDR_ECONFIG;
                    }
        }
        snprintf(key, sizeof(key), "pools[%zu].protocol", i);
        CHECK_RANGE(pl->protocol, 0, pdr_conf_key_find("protocol", 8)->max, key);
        if (pl->protocol == PDR_PROTO_PDSHIM && c->ticket.keys == NULL) {
            pdr__config_err(err, errlen, "%s: " PDR__PDSHIM_NEEDS_KEYS, key);
            return PDR_ECONFIG;
        }
        snprintf(key, sizeof(key), "pools[%zu].policy.prefill", i);
        CHECK_RANGE(pl->policy_prefill, 0, pdr_conf_key_find("policy.prefill", 14)->max, key);
        snprintf(key, sizeof(key), "pools[%zu].policy.decode", i);
        CHECK_RANGE(pl->policy_decode, 0, pdr_conf_key_find("policy.decode", 13)->max, key);
        snprintf(key, sizeof(key), "pools[%zu].", i);
        int drc = check_discovery(&pl->discovery, key, err, errlen);
        if (drc != 0)
            return drc;
        snprintf(key, sizeof(key), "pools[%zu].workers", i);
        for (int r = 0; r < 2; r++) {
            const pdr_worker_conf_t *ws = r == 0 ? pl->prefill : pl->decode;
            size_t n = r == 0 ? pl->n_prefill : pl->n_decode;
            int rc = check_worker_list(ws, n, (pdr_role_t)r, key,
                                       pdr__role_discovered(&pl->discovery, (pdr_role_t)r), err, errlen);
            if (rc == 0 && r == PDR_ROLE_DECODE)
                rc = check_worker_list(pl->regular, pl->n_regular, PDR_ROLE_REGULAR, key, 0, err, errlen);
            if (rc != 0)
                return rc;
            for (size_t k = 0; k < n; k++)
                for (size_t j = 0; j < i; j++) {
                    const pdr_worker_conf_t *os = r == 0 ? c->pools[j].prefill : c->pools[j].decode;
                    size_t on = r == 0 ? c->pools[j].n_prefill : c->pools[j].n_decode;
                    for (size_t q = 0; q < on; q++)
                        if (same_str(os[q].url, ws[k].url)) {
                            pdr__config_err(err, errlen, "%s.%s[%zu]: worker '%s' is in pool '%s' already",
                                            key, r == 0 ? "prefill" : "decode", k, ws[k].url,
                                            c->pools[j].name);
                            return PDR_ECONFIG;
                        }
                }
        }
    }
    return 0;
}

/* The seeding settings at the top, and every pool's (and role's) cache_aware overrides that are set; the
 * ranges are the top-level keys' (schema.c). */
static const char *const ca_names[] = {"cache_threshold", "balance_abs_threshold", "balance_rel_threshold",
                                       "hash_prefix_chars", "hash_load_factor"};

/* Whether path is one of the cache_aware keys a pool may set for itself: checked by check_ca. */
static int ca_pooled(const char *path)
{
    if (strncmp(path, "cache_aware.", 12) != 0)
        return 0;
    for (size_t i = 0; i < sizeof(ca_names) / sizeof(ca_names[0]); i++)
        if (strcmp(path + 12, ca_names[i]) == 0)
            return 1;
    return 0;
}

static int check_ca(const pdr_cache_aware_conf_t *a, int pooled, const char *where, char *err, size_t errlen)
{
    const char *const *names = ca_names;
    const double vals[] = {a->cache_threshold, a->balance_abs_threshold, a->balance_rel_threshold,
                           a->hash_prefix_chars, a->hash_load_factor};
    for (size_t i = 0; i < sizeof(ca_names) / sizeof(ca_names[0]); i++) {
        char path[64];
        snprintf(path, sizeof(path), "cache_aware.%s", names[i]);
        const pdr_conf_key_t *k = pdr_conf_key_find(path, strlen(path));
        /* In a pool a negative value is "not set"; at the top every value is in use. */
        if (k == NULL || (pooled && vals[i] < 0) || (vals[i] >= (double)k->min && vals[i] <= (double)k->max))
            continue;
        pdr__config_err(err, errlen, "%s%s: out of range, expected %lld..%lld", where, path,
                        (long long)k->min, (long long)k->max);
        return PDR_ECONFIG;
    }
    if (!((pooled && a->seed < 0) || (a->seed >= 0 && a->seed <= 1))) {
        pdr__config_err(err, errlen, "%scache_aware.seed: expected smallest_tree or consistent_hash", where);
        return PDR_ECONFIG;
    }
    return 0;
}

/* listen.tls and workers.tls: a certificate goes with its key; no empty file names. The files
 * themselves are read by the router when it builds its TLS contexts (start and reload). */
static int validate_tls(const pdr_config_t *c, char *err, size_t errlen)
{
    const struct {
        const char *v, *name;
    } s[] = {
        {c->listen_tls.cert_file, "listen.tls.cert_file"},
        {c->listen_tls.key_file, "listen.tls.key_file"},
        {c->listen_tls.ciphers, "listen.tls.ciphers"},
        {c->listen_tls.client_ca_file, "listen.tls.client_ca_file"},
        {c->workers_tls.ca_file, "workers.tls.ca_file"},
        {c->workers_tls.cert_file, "workers.tls.cert_file"},
        {c->workers_tls.key_file, "workers.tls.key_file"},
        {c->workers_tls.server_name, "workers.tls.server_name"},
    };
    for (size_t i = 0; i < sizeof(s) / sizeof(s[0]); i++)
        if (s[i].v != NULL && s[i].v[0] == '\0') {
            pdr__config_err(err, errlen, "%s: must not be empty (leave it out for none)", s[i].name);
            return PDR_ECONFIG;
        }
    if ((c->listen_tls.cert_file == NULL) != (c->listen_tls.key_file == NULL)) {
        pdr__config_err(err, errlen,
                        "listen.tls: cert_file and key_file go together (give both for TLS on "
                        "the listener, or neither)");
        return PDR_ECONFIG;
    }
    if (c->listen_tls.cert_file == NULL && c->listen_tls.ciphers != NULL) {
        pdr__config_err(err, errlen, "listen.tls.ciphers: set without listen.tls.cert_file and key_file");
        return PDR_ECONFIG;
    }
    if (c->listen_tls.cert_file == NULL && c->listen_tls.client_ca_file != NULL) {
        pdr__config_err(err, errlen,
                        "listen.tls.client_ca_file: set without listen.tls.cert_file and key_file");
        return PDR_ECONFIG;
    }
    if ((c->workers_tls.cert_file == NULL) != (c->workers_tls.key_file == NULL)) {
        pdr__config_err(err, errlen,
                        "workers.tls: cert_file and key_file go together (the router's client "
                        "certificate and its key)");
        return PDR_ECONFIG;
    }
    if (c->listen_tls.min_version != PDR_TLS_1_2 && c->listen_tls.min_version != PDR_TLS_1_3) {
        pdr__config_err(err, errlen, "listen.tls.min_version: expected TLS1.2 or TLS1.3");
        return PDR_ECONFIG;
    }
    return 0;
}

static int validate_cache_aware(const pdr_config_t *c, char *err, size_t errlen)
{
    pdr_cache_aware_conf_t top;
    pdr_config_pool_cache_aware(c, NULL, 0, &top);
    if (check_ca(&top, 0, "", err, errlen) != 0)
        return PDR_ECONFIG;
    static const char *const roles[] = {"prefill.", "decode."};
    for (size_t i = 0; i < c->n_pools; i++) {
        char where[64];
        snprintf(where, sizeof(where), "pools[%zu].", i);
        if (check_ca(&c->pools[i].cache_aware, 1, where, err, errlen) != 0)
            return PDR_ECONFIG;
        for (int r = 0; r < 2; r++) {
            /* The key sits inside cache_aware: pools[i].cache_aware.prefill.seed. */
            char msg[256];
            if (check_ca(&c->pools[i].cache_aware_role[r], 1, "", msg, sizeof(msg)) != 0) {
                pdr__config_err(err, errlen, "pools[%zu].cache_aware.%s%s", i, roles[r],
                                msg + strlen("cache_aware."));
                return PDR_ECONFIG;
            }
        }
    }
    return 0;
}

static int validate_admission(const pdr_config_t *c, char *err, size_t errlen)
{
    const char *cl = c->admission.classes;
    if (cl != NULL) {
        int k = 0;
        for (const char *p = cl; p != NULL; k++) {
            size_t n;
            const char *s = pdr__config_next_class(&p, &n);
            int ok = n > 0 && n < PDR_CONFIG_CLASS_NAME_MAX && k < PDR_CONFIG_MAX_CLASSES &&
                     pdr_config_class_index(cl, s, n) == k;
            for (size_t j = 0; ok && j < n; j++)
                ok = (s[j] >= 'a' && s[j] <= 'z') || (s[j] >= '0' && s[j] <= '9') || s[j] == '_' ||
                     s[j] == '-';
            if (!ok) {
                pdr__config_err(
                    err, errlen,
                    "admission.classes: \"%s\" is not a list of 1 to %d distinct names of a-z, 0-9, _ "
                    "and - (each under %d bytes) separated by commas, the most important first",
                    cl, PDR_CONFIG_MAX_CLASSES, PDR_CONFIG_CLASS_NAME_MAX);
                return PDR_ECONFIG;
            }
        }
    }
    const char *const hk[] = {"class_header", "fairness_header", "timeout_header"};
    const char *const hv[] = {c->admission.class_header, c->admission.fairness_header,
                              c->admission.timeout_header};
    for (int i = 0; i < 3; i++) {
        size_t n = hv[i] != NULL ? strlen(hv[i]) : 1;
        int ok = n > 0 && n < PDR_CONFIG_HEADER_NAME_MAX;
        for (size_t j = 0; ok && hv[i] != NULL && j < n; j++)
            ok = hv[i][j] > ' ' && hv[i][j] < 127 && hv[i][j] != ':';
        if (!ok) {
            pdr__config_err(err, errlen, "admission.%s: \"%s\" is not a header name of 1 to %d bytes", hk[i],
                            hv[i] != NULL ? hv[i] : "", PDR_CONFIG_HEADER_NAME_MAX - 1);
            return PDR_ECONFIG;
        }
    }
    const char *d = c->admission.default_class;
    if (d != NULL && (cl == NULL || pdr_config_class_index(cl, d, strlen(d)) < 0)) {
        pdr__config_err(err, errlen, "admission.default_class: \"%s\" is not one of admission.classes (%s)",
                        d, cl != NULL ? cl : "not set");
        return PDR_ECONFIG;
    }
    return 0;
}

/* affinity.headers: 1..PDR_AFFINITY_HEADERS_MAX names of lower-case letters, digits and '-' (h2o hands the
 * request's header names in lower case), each 1..PDR_AFFINITY_HEADER_MAX bytes, separated by spaces or
 * commas. */
static int check_affinity_headers(const char *s, char *err, size_t errlen)
{
    size_t n = 0;
    for (const char *p = s != NULL ? s : ""; *p != '\0';) {
        if (*p == ' ' || *p == ',') {
            p++;
            continue;
        }
        const char *e = p;
        while (*e != '\0' && *e != ',' && *e != ' ')
            e++;
        size_t len = (size_t)(e - p);
        int ok = len <= PDR_AFFINITY_HEADER_MAX;
        for (const char *q = p; ok && q < e; q++)
            ok = (*q >= 'a' && *q <= 'z') || (*q >= '0' && *q <= '9') || *q == '-';
        if (!ok) {
            pdr__config_err(
                err, errlen,
                "affinity.headers: '%.*s' is not a header name (1..%d lower-case letters, digits or "
                "'-'; names separated by spaces or commas)",
                (int)len, p, PDR_AFFINITY_HEADER_MAX);
            return PDR_ECONFIG;
        }
        if (++n > PDR_AFFINITY_HEADERS_MAX) {
            pdr__config_err(err, errlen, "affinity.headers: more than %d names", PDR_AFFINITY_HEADERS_MAX);
            return PDR_ECONFIG;
        }
        p = e;
    }
    if (n == 0) {
        pdr__config_err(err, errlen, "affinity.headers: must name at least one header");
        return PDR_ECONFIG;
    }
    return 0;
}

int pdr_config_validate(const pdr_config_t *c, char *err, size_t errlen)
{
    if (c->listen_host == NULL || c->listen_host[0] == '\0') {
        pdr__config_err(err, errlen, "listen.host: must not be empty");
        return PDR_ECONFIG;
    }
    /* A drain status is 0 or a 3xx, 4xx or 5xx status: checked before the key's range, for its message. */
    if (c->health.drain_status != 0 && (c->health.drain_status < 300 || c->health.drain_status > 599)) {
        pdr__config_err(err, errlen,
                        "health.drain_status: %d is not a 3xx, 4xx or 5xx status (0 turns it off)",
                        c->health.drain_status);
        return PDR_ECONFIG;
    }
    /* Every scalar key's range (schema.c); the discovery keys are checked with their section, and the
     * cache_aware keys a pool may override with the pools' (check_discovery, validate_cache_aware). */
    size_t disc = offsetof(pdr_config_t, discovery);
    for (size_t i = 0; i < pdr_conf_nkeys; i++) {
        const pdr_conf_key_t *k = &pdr_conf_keys[i];
        if ((k->off < disc || k->off >= disc + sizeof(c->discovery)) && !ca_pooled(k->path) &&
            pdr_conf_check_range(k, c, 0, k->path, err, errlen) != 0)
            return PDR_ECONFIG;
    }
    if (validate_admission(c, err, errlen) != 0)
        return PDR_ECONFIG;
    if (check_affinity_headers(c->affinity.headers, err, errlen) != 0)
        return PDR_ECONFIG;
    if (c->admin_host == NULL || c->admin_host[0] == '\0') {
        pdr__config_err(err, errlen, "admin.host: must not be empty");
        return PDR_ECONFIG;
    }
    if (c->tokenizer != NULL && c->tokenizer[0] == '\0') {
        pdr__config_err(err, errlen,
                        "tokenizer: must not be empty (a tokenizer.json; leave it out for none)");
        return PDR_ECONFIG;
    }
    if (validate_tls(c, err, errlen) != 0)
        return PDR_ECONFIG;
    if (c->admin_token_file != NULL && c->admin_token_file[0] == '\0') {
        pdr__config_err(err, errlen, "admin.token_file: must not be empty (leave it out for no token)");
        return PDR_ECONFIG;
    }
    if (c->admin_deny_networks.n > 0 && c->admin_deny_networks.nets == NULL) {
        pdr__config_err(err, errlen, "admin.deny_worker_networks: missing list");
        return PDR_ECONFIG;
    }
    CHECK_RANGE(c->admin_deny_networks.n, 0, PDR_CONFIG_MAX_NETWORKS, "admin.deny_worker_networks (count)");
    for (size_t i = 0; i < c->admin_deny_networks.n; i++) {
        const pdr_ipnet_t *net = &c->admin_deny_networks.nets[i];
        if ((net->family != AF_INET && net->family != AF_INET6) || net->prefix < 0 ||
            net->prefix > (net->family == AF_INET ? 32 : 128)) {
            pdr__config_err(err, errlen, "admin.deny_worker_networks[%zu]: not an IP network", i);
            return PDR_ECONFIG;
        }
    }
    if (c->metrics_host == NULL || c->metrics_host[0] == '\0') {
        pdr__config_err(err, errlen, "metrics.host: must not be empty");
        return PDR_ECONFIG;
    }
    if (c->metrics_port != 0 && (c->metrics_port == c->listen_port || c->metrics_port == c->admin_port)) {
        pdr__config_err(err, errlen, "metrics.port: %d is already %s; give the metrics listener its own port",
                        c->metrics_port, c->metrics_port == c->listen_port ? "listen.port" : "admin.port");
        return PDR_ECONFIG;
    }
    CHECK_RANGE(c->cors.n, 0, PDR_CONFIG_MAX_ORIGINS, "cors.allowed_origins (count)");
    for (size_t i = 0; i < c->cors.n; i++) {
        char msg[256];
        const char *o = c->cors.origins != NULL ? c->cors.origins[i] : NULL;
        if (o == NULL || pdr__check_origin(o, strlen(o), msg, sizeof(msg)) != 0) {
            pdr__config_err(err, errlen, "cors.allowed_origins[%zu]: %s", i, o == NULL ? "missing" : msg);
            return PDR_ECONFIG;
        }
    }
    if (c->protocol == PDR_PROTO_PDSHIM && c->ticket.keys == NULL) {
        pdr__config_err(err, errlen, "protocol: " PDR__PDSHIM_NEEDS_KEYS);
        return PDR_ECONFIG;
    }
    if (c->disaggregation.skip_when_prefill_saturated && c->disaggregation.prefill_saturated_inflight < 1) {
        pdr__config_err(
            err, errlen,
            "disaggregation.skip_when_prefill_saturated needs disaggregation.prefill_saturated_inflight "
            "(the in-flight count at which a prefill is saturated, at least 1)");
        return PDR_ECONFIG;
    }
    if (validate_cache_aware(c, err, errlen) != 0)
        return PDR_ECONFIG;
    if (c->health.path == NULL || c->health.path[0] != '/') {
        pdr__config_err(err, errlen, "health.path: must start with '/'");
        return PDR_ECONFIG;
    }
    /* Client side (router/front/limits.c, conn.c): */
    CHECK_RANGE(c->n_request_id_headers, 0, PDR_CONFIG_MAX_REQUEST_ID_HEADERS, "request_id_headers (count)");
    for (size_t i = 0; i < c->n_request_id_headers; i++) {
        char msg[160];
        const char *h = c->request_id_headers != NULL ? c->request_id_headers[i] : NULL;
        if (h == NULL || pdr__check_header_name(h, strlen(h), msg, sizeof(msg)) != 0) {
            pdr__config_err(err, errlen, "request_id_headers[%zu]: %s", i, h == NULL ? "missing" : msg);
            return PDR_ECONFIG;
        }
    }
    if (c->worker_api_key != NULL) {
        char msg[200];
        if (pdr__check_api_key(c->worker_api_key, strlen(c->worker_api_key), msg, sizeof(msg)) != 0) {
            pdr__config_err(err, errlen, "workers.api_key_file: %s", msg);
            return PDR_ECONFIG;
        }
    }
    if (c->retries.max_backoff_ms < c->retries.initial_backoff_ms) {
        pdr__config_err(err, errlen, "retries.max_backoff_ms (%d) is below retries.initial_backoff_ms (%d)",
                        c->retries.max_backoff_ms, c->retries.initial_backoff_ms);
        return PDR_ECONFIG;
    }
    if (c->breaker.max_open_ms < c->breaker.open_ms) {
        pdr__config_err(err, errlen, "breaker.max_open_ms (%d) is below breaker.open_ms (%d)",
                        c->breaker.max_open_ms, c->breaker.open_ms);
        return PDR_ECONFIG;
    }
    if (c->log.access_log == NULL || c->log.access_log[0] == '\0') {
        pdr__config_err(err, errlen, "log.access_log: must not be empty (a path, '-' for stdout or 'off')");
        return PDR_ECONFIG;
    }
    if (c->log.level == NULL || pdr__log_level_parse(c->log.level, strlen(c->log.level)) == NULL) {
        pdr__config_err(err, errlen, "log.level: expected debug, info, warn (warning), error or critical");
        return PDR_ECONFIG;
    }
    if (c->log.dir != NULL && c->log.dir[0] == '\0') {
        pdr__config_err(err, errlen, "log.dir: must not be empty (leave it out for stderr only)");
        return PDR_ECONFIG;
    }
    if (c->tracing.otlp_endpoint != NULL &&
        check_string(c->tracing.otlp_endpoint, pdr__check_api_server, "tracing.otlp_endpoint", err, errlen))
        return PDR_ECONFIG;
    int rc = check_discovery(&c->discovery, "", err, errlen);
    if (rc == 0)
        rc = pdr__check_sidecar(c, err, errlen);
    if (rc == 0 && c->n_pools > 0)
        return check_pools(c, err, errlen);
    if (rc == 0)
        rc = check_workers(c, PDR_ROLE_PREFILL, err, errlen);
    if (rc == 0)
        rc = check_workers(c, PDR_ROLE_DECODE, err, errlen);
    if (rc == 0)
        rc = check_worker_list(c->regular, c->n_regular, PDR_ROLE_REGULAR, "workers", 0, err, errlen);
    return rc;
}
