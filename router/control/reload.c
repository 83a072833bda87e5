/*
 * Configuration reload (SIGHUP, POST /admin/v1/reload) and the discovery sources, both on loop 0.
 *
 * A reload parses the command line again (the --config file, then the same flag overrides) into a new
 * snapshot; an invalid file changes nothing. Otherwise the
 * snapshot becomes current under config_lock and every loop takes it at its next wakeup: a request keeps
 * the snapshot it started with to its end. The pool takes the new policies and thresholds and reconciles
 * the static workers (an unchanged URL keeps its worker: health state, counters, drain state; the
 * connection pools are keyed by host, so they stay warm too). The health timer takes the new interval,
 * and discovery sources whose settings changed are restarted (per pool: see discovery_reload). Keys read only
 * at start (listeners, threads, the access log file, the body limit that h2o enforces) keep their running
 * values and the answer names them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "control.h"
#include "discovery.h"
#include "dpaware.h"
#include "err.h"
#include "front.h"
#include "health.h"
#include "router.h"
#include "schema.h"
#include "util.h"

static const int source_ids[2] = {PDR_SOURCE_DNS, PDR_SOURCE_KUBERNETES};
static const char *const source_kinds[2] = {"dns", "kubernetes"};

/* A running source: one kind (dns or kubernetes) of one pool's discovery section. Its emits are applied
 * while `live`; stopping clears it first (under the lock, so no emit is half-applied), then joins the
 * source's thread, on a thread of its own when the caller must not wait (a reload on loop 0: a DNS query
 * in progress may take a second to give up). */
typedef struct pdr_source_run {
    pdr_router_t *r;
    pdr_discovery_t *d;
    pdr_config_t *config; /* the snapshot the source reads (its discovery section and pool name) */
    const char *pool;     /* the pool it feeds, borrowed from config */
    int which;            /* 0: dns, 1: kubernetes */
    pthread_mutex_t lock;
    int live;
    int sidecar_noted; /* the decode role's watcher thread: its endpoints' disuse was logged */
} source_run_t;

/* The discovery section of pool i of c: the top-level one in the one-pool form. */
static const pdr_discovery_conf_t *pool_discovery(const pdr_config_t *c, size_t i)
{
    return c->n_pools > 0 ? &c->pools[i].discovery : &c->discovery;
}

static const char *pool_name(const pdr_config_t *c, size_t i)
{
    return c->n_pools > 0 ? c->pools[i].name : PDR_DEFAULT_POOL;
}

/* Discovery thread: the full set of one role from one source becomes that source's workers in its pool. */
static void on_discovered(void *ud, const char *source, pdr_role_t role, const pdr_discovered_t *list,
                          size_t n)
{
    source_run_t *run = ud;
    int src = source_ids[run->which];
    if (role == PDR_ROLE_DECODE && run->config->sidecar.enabled) {
        /* A sidecar's decode is its pod's engine (the one static decode); an InferencePool gives the pool's
         * decode pods too, which are not this sidecar's to use: only its prefills are taken. */
        if (!run->sidecar_noted)
            pdr_info(
                "%s discovery (pool %s): sidecar mode: the pool's %zu decode endpoints are not used (the "
                "decode is this pod's engine)",
                source, run->pool, n);
        run->sidecar_noted = 1;
        return;
    }
    pdr_worker_conf_t *confs = calloc(n + 1, sizeof(*confs));
    const char **names = calloc(n + 1, sizeof(*names));
    size_t k = 0;
    for (size_t i = 0; i < n && confs != NULL && names != NULL; i++) {
        char err[256];
        if (pdr_worker_conf_parse_url(list[i].url, &confs[k], err, sizeof(err)) != 0) {
            pdr_warn("%s discovery (pool %s): %s %s skipped: %s", source, run->pool, pdr_role_name(role),
                     list[i].url, err);
            continue;
        }
        confs[k].bootstrap_port = role == PDR_ROLE_PREFILL ? list[i].bootstrap_port : -1;
        if ((list[i].kv_events[0] != '\0' && (confs[k].kv_events = strdup(list[i].kv_events)) == NULL) ||
            (list[i].kv_events_replay[0] != '\0' &&
             (confs[k].kv_events_replay = strdup(list[i].kv_events_replay)) == NULL)) {
            pdr_worker_conf_clear(&confs[k]);
            continue;
        }
        names[k] = list[i].name;
        k++;
    }
    pthread_mutex_lock(&run->lock);
    if (!run->live)
        ; /* stopped (a reload replaced it): its news are stale */
    else if (confs != NULL && names != NULL)
        pdr_pool_reconcile(&run->r->pool, run->pool, src, role, confs, names, k);
    else
        pdr_warn("%s discovery (pool %s): out of memory; %s workers unchanged", source, run->pool,
                 pdr_role_name(role));
    pthread_mutex_unlock(&run->lock);
    for (size_t i = 0; i < k; i++)
        pdr_worker_conf_clear(&confs[i]);
    free(confs);
    free(names);
}

static void run_free(source_run_t *run)
{
    pdr_discovery_stop(run->d);
    pdr_config_unref(run->config);
    pthread_mutex_destroy(&run->lock);
    free(run);
}

static void *reap(void *arg)
{
    run_free(arg);
    return NULL;
}

/* Starts the `which` source of pool i of r->config into *out (NULL when the section names no target for
 * it). Returns 0, or an error logged. */
static int start_source(pdr_router_t *r, size_t i, int which, source_run_t **out)
{
    char err[512] = "";
    *out = NULL;
    source_run_t *run = calloc(1, sizeof(*run));
    if (run == NULL)
        return PDR_ENOMEM;
    run->r = r;
    run->live = 1;
    run->which = which;
    run->config = pdr_config_ref(r->config);
    run->pool = pool_name(run->config, i);
    pthread_mutex_init(&run->lock, NULL);
    const pdr_discovery_conf_t *d = pool_discovery(run->config, i);
    run->d = which == 0 ? pdr_dns_discovery_start(d, run->pool, on_discovered, run, err, sizeof(err))
                        : pdr_k8s_discovery_start(d, run->pool, on_discovered, run, err, sizeof(err));
    if (run->d == NULL) {
        pdr_config_unref(run->config);
        pthread_mutex_destroy(&run->lock);
        free(run);
        if (err[0] == '\0')
            return 0; /* nothing configured */
        pdr_error("%s discovery (pool %s): %s", source_kinds[which], pool_name(r->config, i), err);
        return PDR_ECONFIG;
    }
    *out = run;
    return 0;
}

/* Takes the workers of a kind of source out of the pool named pool. */
static void forget_workers(pdr_router_t *r, const char *pool, int which)
{
    for (int role = 0; role < 2; role++)
        pdr_pool_reconcile(&r->pool, pool, source_ids[which], (pdr_role_t)role, NULL, NULL, 0);
}

/* Stops a source (NULL: none) and, with forget, takes its workers out of its pool. wait: join its thread
 * here; else the join happens on a detached thread and this returns at once. */
static void stop_source(pdr_router_t *r, source_run_t *run, int forget, int wait)
{
    if (run == NULL)
        return;
    pthread_mutex_lock(&run->lock);
    run->live = 0;
    pthread_mutex_unlock(&run->lock);
    if (forget)
        forget_workers(r, run->pool, run->which);
    pthread_t tid;
    if (wait || pthread_create(&tid, NULL, reap, run) != 0)
        run_free(run);
    else
        pthread_detach(tid);
}

int pdr_router_discovery_start(pdr_router_t *r)
{
    size_t n = pdr_config_pool_count(r->config);
    for (size_t i = 0; i < n; i++)
        for (int which = 0; which < 2; which++) {
            int rc = start_source(r, i, which, &r->discovery[i][which]);
            if (rc != 0)
                return rc;
        }
    return 0;
}

void pdr_router_discovery_stop(pdr_router_t *r)
{
    for (size_t i = 0; i < PDR_CONFIG_MAX_POOLS; i++)
        for (int which = 0; which < 2; which++) {
            stop_source(r, r->discovery[i][which], 0, 1);
            r->discovery[i][which] = NULL;
        }
}

int pdr_router_discovery_running(const pdr_router_t *r, int which)
{
    for (size_t i = 0; i < PDR_CONFIG_MAX_POOLS; i++)
        if (r->discovery[i][which] != NULL)
            return 1;
    return 0;
}

static int str_eq(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

static int dns_same(const pdr_discovery_conf_t *a, const pdr_discovery_conf_t *b)
{
    for (int i = 0; i < 2; i++)
        if (!str_eq(a->dns.role[i].name, b->dns.role[i].name) || a->dns.role[i].port != b->dns.role[i].port ||
            a->dns.role[i].bootstrap_port != b->dns.role[i].bootstrap_port)
            return 0;
    return a->dns.interval_ms == b->dns.interval_ms && str_eq(a->dns.resolver, b->dns.resolver);
}

static int k8s_same(const pdr_discovery_conf_t *a, const pdr_discovery_conf_t *b)
{
    for (int i = 0; i < 2; i++)
        if (!str_eq(a->kubernetes.role[i].selector, b->kubernetes.role[i].selector) ||
            a->kubernetes.role[i].port != b->kubernetes.role[i].port ||
            a->kubernetes.role[i].bootstrap_port != b->kubernetes.role[i].bootstrap_port)
            return 0;
    return str_eq(a->kubernetes.api_server, b->kubernetes.api_server) &&
           str_eq(a->kubernetes.namespace_, b->kubernetes.namespace_) &&
           str_eq(a->kubernetes.token_file, b->kubernetes.token_file) &&
           str_eq(a->kubernetes.ca_file, b->kubernetes.ca_file) &&
           a->kubernetes.watch_timeout_s == b->kubernetes.watch_timeout_s &&
           str_eq(a->kubernetes.bootstrap_port_annotation, b->kubernetes.bootstrap_port_annotation) &&
           str_eq(a->kubernetes.inference_pool, b->kubernetes.inference_pool) &&
           str_eq(a->kubernetes.role_label, b->kubernetes.role_label);
}

/* A reload's discovery (r->config is the new snapshot, old the previous one): a pool's source whose
 * section is unchanged keeps running (it reads its own snapshot), one whose section changed is restarted
 * (its workers leave first), and the sources of a pool that is gone are stopped. Pools are matched by
 * name, so that reordering pools: restarts nothing. */
static void discovery_reload(pdr_router_t *r, const pdr_config_t *old)
{
    source_run_t *next[PDR_CONFIG_MAX_POOLS][2];
    memset(next, 0, sizeof(next));
    size_t n_old = pdr_config_pool_count(old), n_new = pdr_config_pool_count(r->config);
    for (size_t i = 0; i < n_new; i++) {
        const char *name = pool_name(r->config, i);
        long j = -1;
        for (size_t k = 0; k < n_old && j < 0; k++)
            if (strcmp(pool_name(old, k), name) == 0)
                j = (long)k;
        for (int which = 0; which < 2; which++) {
            const pdr_discovery_conf_t *nd = pool_discovery(r->config, i);
            if (j >= 0) {
                const pdr_discovery_conf_t *od = pool_discovery(old, (size_t)j);
                source_run_t *run = r->discovery[j][which];
                if (which == 0 ? dns_same(od, nd) : k8s_same(od, nd)) {
                    next[i][which] = run; /* may be NULL: nothing to run, or it failed to start */
                    r->discovery[j][which] = NULL;
                    continue;
                }
                r->discovery[j][which] = NULL;
                if (run != NULL)
                    stop_source(r, run, 1, 0);
                else
                    forget_workers(r, name, which);
            }
            start_source(r, i, which, &next[i][which]);
        }
    }
    for (size_t j = 0; j < PDR_CONFIG_MAX_POOLS; j++)
        for (int which = 0; which < 2; which++) {
            stop_source(r, r->discovery[j][which], 1, 0);
            r->discovery[j][which] = next[j][which];
        }
}

/* Whether row k's change from o to n needs a restart (its reload class in the schema, config/schema.c). */
static int needs_restart(const pdr_conf_key_t *k, const pdr_config_t *o, const pdr_config_t *n)
{
    switch (k->reload) {
    case PDR_RELOAD_RESTART:
        return !pdr_conf_key_equal(k, o, n);
    case PDR_RELOAD_RESTART_RAISE:
        return pdr_conf_key_raised(k, o, n);
    case PDR_RELOAD_RESTART_UNSET:
        return pdr_conf_key_unset(k, o, n);
    default:
        return 0;
    }
}

/* Writes into out the keys whose change needs a restart, as the schema names them (keys of one listener
 * share a name, named once). */
static void restart_keys(const pdr_config_t *o, const pdr_config_t *n, char *out, size_t cap)
{
    out[0] = '\0';
    size_t len = 0;
    const char *last = NULL;
    for (size_t i = 0; i < pdr_conf_nkeys && len < cap; i++) {
        const pdr_conf_key_t *k = &pdr_conf_keys[i];
        const char *name = k->restart_name != NULL ? k->restart_name : k->path;
        if (!needs_restart(k, o, n) || (last != NULL && strcmp(last, name) == 0))
            continue;
        len += (size_t)snprintf(out + len, cap - len, "%s%s", len ? ", " : "", name);
        last = name;
    }
    if (len >= cap && cap > 0)
        out[cap - 1] = '\0';
}

int pdr_router_reload(pdr_router_t *r, char *msg, size_t cap)
{
    if (pdr_router_stopping(r)) {
        snprintf(msg, cap, "the router is shutting down");
        return PDR_ECLOSED;
    }
    if (r->config_path == NULL) {
        snprintf(msg, cap,
                 "the router was started from command-line flags: there is no config file to reload "
                 "(start it with --config FILE)");
        __atomic_add_fetch(&r->reloads_failed, 1, __ATOMIC_RELAXED);
        return PDR_ENOTSUP;
    }
    char err[1024];
    /* The command line again: the file, then the same overrides on top (a --drain-grace-ms given at start
     * still holds after a reload). */
    pdr_config_t *c = NULL;
    if (r->argv != NULL) {
        pdr_cli_t cli;
        if (pdr_config_parse_args(r->argc, r->argv, &cli, err, sizeof(err)) == 0)
            c = cli.config;
    } else {
        c = pdr_config_load_file(r->config_path, err, sizeof(err));
    }
    if (c == NULL) {
        snprintf(msg, cap, "%s", err);
        __atomic_add_fetch(&r->reloads_failed, 1, __ATOMIC_RELAXED);
        pdr_warn("reload refused, the running configuration stays: %s", err);
        return PDR_ECONFIG;
    }
    pdr_config_t *old = r->config;
    pdr_dp_aware_resolve(c, old); /* --dp-aware: the dp_size learned at start, nothing asked */
    char kept[512];
    restart_keys(old, c, kept, sizeof(kept));
    if (c->protocol != old->protocol) {
        snprintf(msg, cap, "%s: protocol cannot change without a restart", r->config_path);
        pdr_config_unref(c);
        __atomic_add_fetch(&r->reloads_failed, 1, __ATOMIC_RELAXED);
        return PDR_ECONFIG;
    }
    /* The tokenizer is loaded first and installed last: a refused reload changes nothing. */
    pdr_tokenizer_next_t tok_next;
    int rc = pdr_router_tokenizer_prepare(r, c, &tok_next, err, sizeof(err));
    pdr_tls_next_t tls_next = {NULL, NULL}; /* TLS files are read again: a renewed certificate is taken */
    if (rc == 0 && (rc = pdr_router_tls_prepare(c, &tls_next, err, sizeof(err))) != 0)
        pdr_router_tokenizer_abandon(&tok_next);
    if (rc == 0 && (rc = pdr_admin_reload_token(r, c, err, sizeof(err))) != 0) {
        pdr_router_tls_abandon(&tls_next);
        pdr_router_tokenizer_abandon(&tok_next);
    }
    if (rc != 0) {
        snprintf(msg, cap, "%s", err);
        pdr_config_unref(c);
        __atomic_add_fetch(&r->reloads_failed, 1, __ATOMIC_RELAXED);
        return rc;
    }
    /* Pools and workers first, then the snapshot: a request that sees the new snapshot finds the new
     * pools' workers in place. */
    pdr_router_tokenizer_commit(r, &tok_next);
    pdr_router_tls_commit(r, &tls_next);
    size_t changed = pdr_pool_apply_config(&r->pool, c);
    pthread_mutex_lock(&r->config_lock);
    r->config = c;
    pthread_mutex_unlock(&r->config_lock);
    pdr_health_restart(r);
    discovery_reload(r, old);
    for (int i = 0; i < r->n_threads; i++)
        uv_async_send(&r->threads[i].wakeup);
    pdr_thread_sync_config(&r->threads[0]);
    pdr_set_log_level_name(c->log.level);
    pdr_config_unref(old);
    __atomic_add_fetch(&r->reloads_ok, 1, __ATOMIC_RELAXED);
    r->last_reload_ms = pdr_now_ms();
    snprintf(msg, cap, "%zu static worker change%s%s%s%s", changed, changed == 1 ? "" : "s",
             kept[0] ? "; these keep their running values until a restart: " : "", kept, "");
    pdr_info("reload of %s applied: %s", r->config_path, msg);
    return 0;
}

/* This loop's share of limits.max_connections_per_worker (each loop keeps its own pool): rounded up,
 * so the total may exceed the limit by at most threads - 1. */
void pdr__apply_conn_limit(pdr_thread_t *t)
{
    size_t limit = (size_t)t->config->limits.max_connections_per_worker, n = (size_t)t->r->n_threads;
    pdr_multi_set_conn_limit(t->multi, limit == 0 ? 0 : (limit + n - 1) / n);
}

void pdr_thread_sync_config(pdr_thread_t *t)
{
    pdr_router_t *r = t->r;
    pthread_mutex_lock(&r->config_lock);
    pdr_config_t *old = NULL;
    if (t->config != r->config) {
        old = t->config;
        t->config = pdr_config_ref(r->config);
    }
    pthread_mutex_unlock(&r->config_lock);
    if (old != NULL) {
        pdr__apply_conn_limit(t);
        pdr__tls_sync(t);
        pdr_config_unref(old);
    }
}
