/*
 * Active health checks: every health.interval_ms each worker receives GET <url><health.path> with a
 * health.timeout_ms deadline; a 2xx answer is a pass. The rise/fall state machine is in pool.c.
 * The first round runs at start. Probes run on loop 0 and its upstream client. With a worker key
 * (workers.api_key_file, --api-key) every check carries "Authorization: Bearer KEY", as the requests do.
 *
 * Worker-initiated drain: a check answered health.drain_status (410 Gone by default) means "drain me"
 * (HAProxy's disable-on-404, Envoy's x-envoy-immediate-health-check-fail). The worker goes DRAINING (see
 * pool.h) and the check counts as passed (the worker is alive); a later 2xx does not re-activate it, only the
 * admin API does. A second timer here (every PDR_DRAIN_TICK_MS) moves idle or timed-out DRAINING workers to
 * DRAINED, and starts the engine load reads that are due (load_poll.c, load.poll_ms).
 */
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "defaults.h"
#include "err.h"
#include "health.h"
#include "identify.h"
#include "load_poll.h"
#include "router.h"
#include "util.h"

/* One check in progress: holds a reference on its worker (which may leave the pool meanwhile). Running
 * probes are on a list so that stopping cancels them. */
typedef struct pdr_health_probe {
    pdr_router_t *r;
    pdr_worker_t *w;
    pdr_leg_t leg;
    pdr_dlink_t link; /* on r->probes */
    char url[512];
} probe_t;

static size_t probe_data(pdr_leg_t *leg, const char *p, size_t n)
{
    (void)leg;
    (void)p;
    return n;
}

static void probe_free(probe_t *pr)
{
    pdr_dlink_unlink(&pr->link);
    pr->w->probing = 0;
    pdr_worker_unref(pr->w);
    free(pr);
}

static void probe_done(pdr_leg_t *leg, int err)
{
    probe_t *pr = leg->data;
    pdr_worker_t *w = pr->w;
    pdr_router_t *r = pr->r;
    const pdr_config_t *c = r->config;
    if (pdr_worker_removed(w)) {
        probe_free(pr);
        return;
    }
    int gone = err == 0 && c->health.drain_status != 0 && leg->status == c->health.drain_status;
    int ok = gone || (err == 0 && leg->status >= 200 && leg->status < 300);
    if (err != 0)
        pdr_debug("health: %s %s: check failed: %s", w->id, pr->url, pdr_leg_strerror(leg, err));
    else
        pdr_debug("health: %s %s: HTTP %ld, check %s", w->id, pr->url, (long)leg->status,
                  ok ? "passed" : "failed");
    if (ok)
        pdr_worker_note_alive(w, pdr_now_ns());
    if (gone && pdr_worker_drain_state(w) == PDR_DRAIN_ACTIVE)
        pdr_pool_drain(&r->pool, w, 0,
                       c->health.drain_status == 410 ? "its health check answered 410"
                                                     : "its health check answered health.drain_status");
    if (pdr_pool_check_result(&r->pool, w, ok)) {
        if (ok) {
            pdr_info("worker %s %s is healthy (%d checks passed)", w->id, w->target, c->health.rise);
            /* It may have come back as another model or KV layout: its identity is read again. */
            pdr_identify_forget(r, w, "healthy again: re-reading");
        } else {
            pdr_warn("worker %s %s is unhealthy: %d checks failed, last: %s", w->id, w->target,
                     c->health.fall, err ? pdr_leg_strerror(leg, err) : "bad status");
            pdr_pool_record(&r->pool, w, "marked unhealthy: %d failed health check(s), last: %s",
                            c->health.fall, err ? pdr_leg_strerror(leg, err) : "bad status");
        }
    }
    probe_free(pr);
}

static const pdr_leg_cbs_t probe_cbs = {probe_data, probe_done};

static void check_worker(pdr_router_t *r, pdr_worker_t *w)
{
    const pdr_config_t *c = r->config;
    if (w->probing)
        return;
    probe_t *pr = calloc(1, sizeof(*pr));
    if (pr == NULL)
        return;
    pr->r = r;
    pr->w = pdr_worker_ref(w);
    snprintf(pr->url, sizeof(pr->url), "%s%s", w->conf.url, c->health.path);
    pdr_dlink_push(&r->probes, &pr->link);
    w->probing = 1;
    /* With a worker key the checks carry it too: a worker that requires it answers 401 without. */
    char auth[32 + PDR_CONFIG_MAX_API_KEY];
    const char *hdrs[2] = {NULL, NULL};
    if (c->worker_api_key != NULL) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", c->worker_api_key);
        hdrs[0] = auth;
    }
    int rc = pdr_leg_start_probe(&pr->leg, r->threads[0].multi, pr->url, hdrs, c->health.timeout_ms,
                                 &probe_cbs, pr);
    if (c->worker_api_key != NULL)
        OPENSSL_cleanse(auth, sizeof(auth));
    if (rc != 0)
        probe_free(pr);
}

/* Checks every worker not being checked already; workers new since the last round (added, discovered,
 * reloaded) get their first check now. */
static void run_round(pdr_router_t *r)
{
    pdr_worker_t **ws;
    size_t n = pdr_pool_snapshot(&r->pool, -1, &ws);
    for (size_t i = 0; i < n; i++)
        check_worker(r, ws[i]);
    pdr_pool_release(ws, n);
    r->health_generation = __atomic_load_n(&r->pool.generation, __ATOMIC_ACQUIRE);
    /* cache_aware's trees are trimmed every cache_aware.eviction_interval_secs (at this round's pace). */
    uint64_t now = pdr_now_ms();
    if (now - r->ca_evict_ms >= (uint64_t)r->config->cache_aware.eviction_interval_secs * 1000) {
        r->ca_evict_ms = now;
        pdr_pool_evict_trees(&r->pool);
    }
}

static void on_health_timer(uv_timer_t *t)
{
    run_round(t->data);
}

#define PDR_DRAIN_TICK_MS 100

/* Workers a request suspects (pdr_worker_suspect) are checked now rather than at the next round. */
static void check_suspects(pdr_router_t *r)
{
    pdr_worker_t **ws;
    size_t n = pdr_pool_snapshot(&r->pool, -1, &ws);
    for (size_t i = 0; i < n; i++)
        if (__atomic_exchange_n(&ws[i]->probe_now, 0, __ATOMIC_RELAXED))
            check_worker(r, ws[i]);
    pdr_pool_release(ws, n);
}

static void on_drain_timer(uv_timer_t *t)
{
    pdr_router_t *r = t->data;
    pdr_pool_drain_tick(&r->pool, pdr_now_ms());
    pdr_outlier_tick(&r->pool, pdr_now_ms());
    check_suspects(r);
    pdr_identify_tick(r);
    pdr_engine_load_tick(r); /* the engines' load reads that are due (load.poll_ms) */
    /* Membership changed: check the newcomers now rather than at the next round. */
    if (__atomic_load_n(&r->pool.generation, __ATOMIC_ACQUIRE) != r->health_generation)
        run_round(r);
}

int pdr_health_start(pdr_router_t *r)
{
    const pdr_config_t *c = r->config;
    uv_timer_init(r->threads[0].loop, &r->health_timer);
    r->health_timer.data = r;
    uv_timer_start(&r->health_timer, on_health_timer, 0, (uint64_t)c->health.interval_ms);
    uv_timer_init(r->threads[0].loop, &r->drain_timer);
    r->drain_timer.data = r;
    uv_timer_start(&r->drain_timer, on_drain_timer, PDR_DRAIN_TICK_MS, PDR_DRAIN_TICK_MS);
    return 0;
}

void pdr_health_restart(pdr_router_t *r)
{
    uv_timer_start(&r->health_timer, on_health_timer, 0, (uint64_t)r->config->health.interval_ms);
}

void pdr_health_stop(pdr_router_t *r)
{
    pdr_identify_stop(r);
    pdr_engine_load_stop(r);
    while (r->probes != NULL) {
        probe_t *pr = PDR_DLINK_ITEM(r->probes, probe_t, link);
        pdr_leg_cancel(&pr->leg);
        probe_free(pr);
    }
    uv_timer_stop(&r->health_timer);
    uv_close((uv_handle_t *)&r->health_timer, NULL);
    uv_timer_stop(&r->drain_timer);
    uv_close((uv_handle_t *)&r->drain_timer, NULL);
}
