/*
 * Reading the workers' identities (router/workers/identity.h) off the request path: loop 0, through its
 * upstream client, like the health checks. A worker is read once it is healthy and its identity is not known:
 * when it joins, when it turns healthy again after failed checks or an ejection (it may have restarted
 * with another model or layout; health.c calls pdr_identify_forget), and when its shim reports a new
 * instance (load.epoch moves). Until then its key is 0 (unknown) and compat.unknown decides whether it
 * pairs. A failed read is tried again every health.interval_ms. sglang's GET /get_server_info, vLLM's
 * GET /v1/models (by the protocol of the worker's pool).
 */
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "buf.h"
#include "err.h"
#include "identify.h"
#include "identity.h"
#include "router.h"
#include "util.h"

typedef struct ident_read {
    pdr_router_t *r;
    pdr_worker_t *w;
    pdr_leg_t leg;
    pdr_dlink_t link; /* on r->ident_reads */
    int engine;
    int too_big;
    pdr_buf_t body;
    char url[512];
} read_t;

static size_t read_data(pdr_leg_t *leg, const char *p, size_t n)
{
    read_t *rd = leg->data;
    if (!rd->too_big && pdr_buf_append(&rd->body, p, n, PDR_IDENTITY_BODY_CAP) != 0)
        rd->too_big = 1;
    return n;
}

static void read_free(read_t *rd)
{
    pdr_dlink_unlink(&rd->link);
    rd->w->ident.reading = 0;
    pdr_worker_unref(rd->w);
    pdr_buf_free(&rd->body);
    free(rd);
}

static void read_done(pdr_leg_t *leg, int err)
{
    read_t *rd = leg->data;
    pdr_worker_t *w = rd->w;
    pdr_router_t *r = rd->r;
    if (pdr_worker_removed(w)) {
        read_free(rd);
        return;
    }
    char why[768] = "";
    pdr_identity_t id;
    if (err != 0)
        snprintf(why, sizeof(why), "%s: %s", rd->url, pdr_leg_strerror(leg, err));
    else if (leg->status < 200 || leg->status >= 300)
        snprintf(why, sizeof(why), "%s: HTTP %ld", rd->url, (long)leg->status);
    else if (rd->too_big)
        snprintf(why, sizeof(why), "%s: the answer is over %zu bytes", rd->url, PDR_IDENTITY_BODY_CAP);
    else {
        char msg[128];
        if (pdr_identity_parse(rd->engine, rd->body.p != NULL ? rd->body.p : "", rd->body.len, &id, msg,
                               sizeof(msg)) != 0)
            snprintf(why, sizeof(why), "%s: %s", rd->url, msg);
    }
    pdr_compat_count_read(why[0] != '\0');
    if (why[0] != '\0') {
        w->ident.next_ms = pdr_now_ms() + (uint64_t)r->config->health.interval_ms;
        pdr_pool_set_identity(&r->pool, w, NULL, why);
        if (w->ident.fails++ == 0)
            pdr_warn("worker %s %s: identity not read (tried again every health.interval_ms): %s", w->id,
                     w->target, why);
    } else {
        char g[17];
        pdr_identity_group(id.key, g);
        uint64_t was = w->ident.id.key; /* loop 0 is its only writer */
        w->ident.fails = 0;
        pdr_pool_set_identity(&r->pool, w, &id, NULL);
        if (was != id.key)
            pdr_info("worker %s %s: model %s revision %s, page_size %lld, tp_size %lld, kv_cache_dtype %s, "
                     "dtype %s, transfer backend %s: compat group %s",
                     w->id, w->target, id.model_path, id.revision[0] ? id.revision : "(none)",
                     (long long)id.page_size, (long long)id.tp_size,
                     id.kv_cache_dtype[0] ? id.kv_cache_dtype : "-", id.dtype[0] ? id.dtype : "-",
                     id.backend[0] ? id.backend : "-", g);
    }
    read_free(rd);
}

static const pdr_leg_cbs_t read_cbs = {read_data, read_done};

static void read_worker(pdr_router_t *r, pdr_worker_t *w)
{
    const pdr_config_t *c = r->config;
    int proto = pdr_pool_protocol_of(&r->pool, w);
    if (proto < 0)
        return;
    read_t *rd = calloc(1, sizeof(*rd));
    if (rd == NULL)
        return;
    rd->r = r;
    rd->w = pdr_worker_ref(w);
    rd->engine = proto == PDR_PROTO_VLLM ? PDR_IDENTITY_VLLM : PDR_IDENTITY_SGLANG;
    snprintf(rd->url, sizeof(rd->url), "%s%s", w->conf.url,
             rd->engine == PDR_IDENTITY_VLLM ? "/v1/models" : "/get_server_info");
    pdr_dlink_push(&r->ident_reads, &rd->link);
    w->ident.reading = 1;
    w->ident.stale = 0;
    w->ident.epoch = __atomic_load_n(&w->load.epoch, __ATOMIC_RELAXED);
    char auth[32 + PDR_CONFIG_MAX_API_KEY];
    const char *hdrs[2] = {NULL, NULL};
    if (c->worker_api_key != NULL) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", c->worker_api_key);
        hdrs[0] = auth;
    }
    int rc = pdr_leg_start_probe(&rd->leg, r->threads[0].multi, rd->url, hdrs, c->health.timeout_ms,
                                 &read_cbs, rd);
    if (c->worker_api_key != NULL)
        OPENSSL_cleanse(auth, sizeof(auth));
    if (rc != 0) {
        w->ident.stale = 1;
        w->ident.next_ms = pdr_now_ms() + (uint64_t)c->health.interval_ms;
        read_free(rd);
    }
}

void pdr_identify_forget(pdr_router_t *r, pdr_worker_t *w, const char *why)
{
    /* Also with compat.enabled off: a reload that turns it on then reads the worker again. */
    w->ident.stale = 1;
    w->ident.next_ms = 0;
    pdr_pool_forget_identity(&r->pool, w, why);
}

void pdr_identify_tick(pdr_router_t *r)
{
    if (!r->config->compat.enabled)
        return;
    uint64_t now = pdr_now_ms();
    pdr_worker_t **ws;
    size_t n = pdr_pool_snapshot(&r->pool, -1, &ws);
    for (size_t i = 0; i < n; i++) {
        pdr_worker_t *w = ws[i];
        if (w->ident.reading || !pdr_worker_healthy(w))
            continue;
        uint64_t epoch = __atomic_load_n(&w->load.epoch, __ATOMIC_RELAXED);
        if (epoch != w->ident.epoch && w->ident.id.key != 0)
            pdr_identify_forget(r, w, "its shim reported a new instance: re-reading");
        int due = w->ident.stale || pdr_worker_compat_key(w) == 0;
        if (due && now >= w->ident.next_ms)
            read_worker(r, w);
    }
    pdr_pool_release(ws, n);
}

void pdr_identify_stop(pdr_router_t *r)
{
    while (r->ident_reads != NULL) {
        read_t *rd = PDR_DLINK_ITEM(r->ident_reads, read_t, link);
        pdr_leg_cancel(&rd->leg);
        read_free(rd);
    }
}
