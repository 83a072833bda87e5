/*
 * The engine load poll (load_poll.h). Loop 0 only: the reads run on loop 0's upstream client, one per
 * worker at a time, each holding a reference on its worker; the worker's engine fields are atomics the
 * picks of every loop read. The poll's settings are copied into the pool at each tick, so that a reload
 * turning it on or off reaches the picks within one tick.
 */
#include "load_poll.h"

#include <inttypes.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "err.h"
#include "pool_load.h"
#include "router.h"
#include "util.h"
#include "engine_load.h"

const char *const pdr_engine_load_outcomes[PDR_ELP__COUNT] = {"ok", "failed", "timeout", "garbage"};

typedef struct poll {
    pdr_router_t *r;
    pdr_worker_t *w;
    pdr_leg_t leg;
    pdr_dlink_t link; /* on r->load_polls */
    int vllm;
    int too_big;
    char *buf;
    size_t len, cap;
    char url[512];
} poll_t;

#define ST(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)
#define LD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)

static size_t on_data(pdr_leg_t *leg, const char *p, size_t n)
{
    poll_t *pl = leg->data;
    if (pl->len + n > PDR_ENGINE_LOAD_MAX_BODY) {
        pl->too_big = 1;
        return 0; /* aborts the read: counted as garbage */
    }
    if (pl->len + n > pl->cap) {
        size_t cap = pl->cap ? pl->cap : 4096;
        while (cap < pl->len + n)
            cap *= 2;
        char *nb = realloc(pl->buf, cap);
        if (nb == NULL)
            return 0;
        pl->buf = nb;
        pl->cap = cap;
    }
    memcpy(pl->buf + pl->len, p, n);
    pl->len += n;
    return n;
}

static void poll_free(poll_t *pl)
{
    pdr_dlink_unlink(&pl->link);
    pl->w->engine.polling = 0;
    pdr_worker_unref(pl->w);
    free(pl->buf);
    free(pl);
}

/* Records a failed read: the engine load is unknown from now on; logged when the worker's last read was
 * good or none came yet. */
static void failed(poll_t *pl, int outcome, const char *why)
{
    pdr_worker_t *w = pl->w;
    __atomic_add_fetch(&pl->r->load_polls_total[outcome], 1, __ATOMIC_RELAXED);
    if (LD(w->engine.state) != PDR_ELOAD_FAILED)
        pdr_warn("engine load: %s %s: %s %s: %s; its load is unknown, picks weigh the router's own count",
                 w->id, w->target, pdr_engine_load_outcomes[outcome], pl->url, why);
    ST(w->engine.state, PDR_ELOAD_FAILED);
}

static void on_done(pdr_leg_t *leg, int err)
{
    poll_t *pl = leg->data;
    pdr_worker_t *w = pl->w;
    if (pdr_worker_removed(w)) {
        poll_free(pl);
        return;
    }
    char why[160];
    if (pl->too_big) {
        snprintf(why, sizeof(why), "answer over %u bytes", PDR_ENGINE_LOAD_MAX_BODY);
        failed(pl, PDR_ELP_GARBAGE, why);
    } else if (err == PDR_ETIMEDOUT) {
        failed(pl, PDR_ELP_TIMEOUT, pdr_leg_strerror(leg, err));
    } else if (err != 0) {
        failed(pl, PDR_ELP_FAILED, pdr_leg_strerror(leg, err));
    } else if (leg->status < 200 || leg->status >= 300) {
        snprintf(why, sizeof(why), "HTTP %ld", (long)leg->status);
        failed(pl, PDR_ELP_FAILED, why);
    } else {
        pdr_engine_load_t l;
        int rc = pl->vllm ? pdr_engine_load_parse_prometheus(pl->buf, pl->len, &l)
                          : pdr_engine_load_parse_sglang(pl->buf, pl->len, w->dp_rank, &l);
        if (rc != 0 || l.reqs_seen == 0) {
            snprintf(why, sizeof(why), "%s",
                     rc != 0 ? "the answer is not in the engine's format"
                             : (pl->vllm ? "no vllm:num_requests_running or _waiting gauge"
                                         : "no num_reqs in the answer (for its rank, with --dp-aware)"));
            failed(pl, PDR_ELP_GARBAGE, why);
        } else {
            ST(w->engine.reqs, l.reqs);
            ST(w->engine.waiting, l.waiting);
            ST(w->engine.tokens, l.tokens);
            ST(w->engine.kv_usage_ppm, l.kv_usage_ppm);
            ST(w->engine.inflight_at, (int64_t)pdr_worker_inflight(w));
            if (LD(w->engine.state) == PDR_ELOAD_FAILED)
                pdr_info("engine load: %s %s: %s answers again (%" PRIu64 " requests)", w->id, w->target,
                         pl->url, l.reqs);
            ST(w->engine.state, PDR_ELOAD_OK);
            __atomic_store_n(&w->engine.ok_ms, pdr_now_ms(), __ATOMIC_RELEASE);
            __atomic_add_fetch(&pl->r->load_polls_total[PDR_ELP_OK], 1, __ATOMIC_RELAXED);
        }
    }
    poll_free(pl);
}

static const pdr_leg_cbs_t poll_cbs = {on_data, on_done};

static void poll_worker(pdr_router_t *r, pdr_worker_t *w, int vllm)
{
    const pdr_config_t *c = r->config;
    poll_t *pl = calloc(1, sizeof(*pl));
    if (pl == NULL)
        return;
    pl->r = r;
    pl->w = pdr_worker_ref(w);
    pl->vllm = vllm;
    snprintf(pl->url, sizeof(pl->url), "%s%s", w->conf.url, vllm ? "/metrics" : "/get_load");
    pdr_dlink_push(&r->load_polls, &pl->link);
    w->engine.polling = 1;
    char auth[32 + PDR_CONFIG_MAX_API_KEY];
    const char *hdrs[2] = {NULL, NULL};
    if (c->worker_api_key != NULL) { /* as the health checks: a worker that requires the key answers 401 */
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", c->worker_api_key);
        hdrs[0] = auth;
    }
    int rc =
        pdr_leg_start_probe(&pl->leg, r->threads[0].multi, pl->url, hdrs, c->load.timeout_ms, &poll_cbs, pl);
    if (c->worker_api_key != NULL)
        OPENSSL_cleanse(auth, sizeof(auth));
    if (rc != 0) {
        failed(pl, PDR_ELP_FAILED, pdr_strerror(rc));
        poll_free(pl);
    }
}

void pdr_engine_load_tick(pdr_router_t *r)
{
    const pdr_config_t *c = r->config;
    int poll_ms = c->load.poll_ms;
    __atomic_store_n(&r->pool.load_timeout_ms, c->load.timeout_ms, __ATOMIC_RELAXED);
    __atomic_store_n(&r->pool.load_poll_ms, poll_ms, __ATOMIC_RELAXED);
    if (poll_ms <= 0)
        return;
    uint64_t now = pdr_now_ms();
    pdr_worker_t **ws;
    size_t n = pdr_pool_snapshot(&r->pool, -1, &ws);
    for (size_t i = 0; i < n; i++) {
        pdr_worker_t *w = ws[i];
        if (w->engine.polling || now < w->engine.next_ms)
            continue;
        int proto = pdr_pool_protocol_of(&r->pool, w);
        if (proto < 0)
            continue;
        w->engine.next_ms = now + (uint64_t)poll_ms;
        poll_worker(r, w, proto == PDR_PROTO_VLLM);
    }
    pdr_pool_release(ws, n);
}

void pdr_engine_load_stop(pdr_router_t *r)
{
    while (r->load_polls != NULL) {
        poll_t *pl = PDR_DLINK_ITEM(r->load_polls, poll_t, link);
        pdr_leg_cancel(&pl->leg);
        poll_free(pl);
    }
}

json_t *pdr_engine_load_worker_json(pdr_router_t *r, const pdr_worker_t *w)
{
    int poll_ms = __atomic_load_n(&r->pool.load_poll_ms, __ATOMIC_RELAXED);
    int poll_to = __atomic_load_n(&r->pool.load_timeout_ms, __ATOMIC_RELAXED);
    uint64_t now = pdr_now_ms(), load;
    int fb;
    int src = pdr_worker_load(w, poll_ms, poll_to, now, &load, &fb);
    static const char *const states[3] = {"none", "ok", "failed"};
    int st = LD(w->engine.state);
    json_t *o = json_pack("{s:s,s:I,s:b,s:s}", "source", pdr_load_source_names[src], "load", (json_int_t)load,
                          "fell_back", fb, "engine_state", states[st >= 0 && st < 3 ? st : 0]);
    uint64_t ok = __atomic_load_n(&w->engine.ok_ms, __ATOMIC_ACQUIRE);
    if (o != NULL && ok != 0) {
        int64_t kv = LD(w->engine.kv_usage_ppm);
        json_object_set_new(o, "engine",
                            json_pack("{s:I,s:I,s:I,s:o,s:I,s:b}", "requests", (json_int_t)LD(w->engine.reqs),
                                      "waiting", (json_int_t)LD(w->engine.waiting), "tokens",
                                      (json_int_t)LD(w->engine.tokens), "kv_usage",
                                      kv >= 0 ? json_real((double)kv / 1e6) : json_null(), "age_ms",
                                      (json_int_t)(now > ok ? now - ok : 0), "fresh",
                                      pdr_worker_engine_fresh(w, poll_ms, poll_to, now)));
    }
    return o;
}

void pdr_engine_load_metrics(pdr_router_t *r, pdr_engine_load_put_cb put, void *out)
{
    put(out, "# HELP pdr_engine_load_poll_total Engine load reads (load.poll_ms), by outcome.\n"
             "# TYPE pdr_engine_load_poll_total counter\n");
    for (int k = 0; k < PDR_ELP__COUNT; k++)
        put(out, "pdr_engine_load_poll_total{outcome=\"%s\"} %" PRIu64 "\n", pdr_engine_load_outcomes[k],
            __atomic_load_n(&r->load_polls_total[k], __ATOMIC_RELAXED));
    int poll_ms = __atomic_load_n(&r->pool.load_poll_ms, __ATOMIC_RELAXED);
    int poll_to = __atomic_load_n(&r->pool.load_timeout_ms, __ATOMIC_RELAXED);
    pdr_worker_t **ws;
    size_t nw = pdr_pool_snapshot(&r->pool, -1, &ws);
    uint64_t now = pdr_now_ms();
    static const char *const fam[][2] = {
        {"pdr_worker_engine_requests", "Requests running and waiting, as the worker's engine last answered."},
        {"pdr_worker_engine_waiting_requests", "Requests waiting, as the worker's engine last answered."},
        {"pdr_worker_engine_tokens",
         "Tokens in use and pending (sglang's num_tokens), as the engine answered."},
        {"pdr_worker_engine_kv_usage_ratio", "KV cache usage (0..1), as the worker's engine last answered."},
        {"pdr_worker_engine_load_age_seconds",
         "Seconds since the worker's engine last answered a load read."},
    };
    for (size_t k = 0; k < sizeof(fam) / sizeof(fam[0]); k++) {
        put(out, "# HELP %s %s\n# TYPE %s gauge\n", fam[k][0], fam[k][1], fam[k][0]);
        for (size_t i = 0; i < nw; i++) {
            const pdr_worker_t *w = ws[i];
            uint64_t ok = __atomic_load_n(&w->engine.ok_ms, __ATOMIC_ACQUIRE);
            if (ok == 0)
                continue;
            int64_t kv = LD(w->engine.kv_usage_ppm);
            if (k == 3 && kv < 0)
                continue;
            if (k >= 3)
                put(out, "%s{worker=\"%s\",role=\"%s\"} %.6f\n", fam[k][0], w->target, pdr_role_name(w->role),
                    k == 3 ? (double)kv / 1e6 : (double)(now > ok ? now - ok : 0) / 1e3);
            else
                put(out, "%s{worker=\"%s\",role=\"%s\"} %" PRIu64 "\n", fam[k][0], w->target,
                    pdr_role_name(w->role),
                    k == 0   ? LD(w->engine.reqs)
                    : k == 1 ? LD(w->engine.waiting)
                             : LD(w->engine.tokens));
        }
    }
    put(out, "# HELP pdr_worker_load_source The source of the load the policies weigh for the worker (1).\n"
             "# TYPE pdr_worker_load_source gauge\n");
    for (size_t i = 0; i < nw; i++) {
        uint64_t load;
        int fb;
        int src = pdr_worker_load(ws[i], poll_ms, poll_to, now, &load, &fb);
        put(out, "pdr_worker_load_source{worker=\"%s\",role=\"%s\",source=\"%s\"} 1\n", ws[i]->target,
            pdr_role_name(ws[i]->role), pdr_load_source_names[src]);
    }
    pdr_pool_release(ws, nw);
}
