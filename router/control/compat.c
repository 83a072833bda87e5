/*
 * The sglang router's routes beside the PD ones, served the way its PD router serves them:
 *
 *   GET  /get_model_info, /model_info, /get_server_info, /server_info
 *        forwarded to one prefill worker (the first healthy one in the pool's order, else the first),
 *        on the same path; its status, content type and body come back as they are.
 *   GET  /health_generate
 *        one prefill/decode pair picked by the policies, GET /health_generate on both at once: 200 when
 *        both answer 2xx, else 503 naming the failures.
 *   POST /flush_cache
 *        POST /flush_cache to every worker of both roles: 200 {"status":"success",...} when all of them
 *        answer 2xx, else 206 {"status":"partial_success", "successful", "failed"}.
 *   GET  /get_loads, /v1/loads
 *        GET /get_load on every worker: {"workers":[{"worker","worker_type","load"}]}, the load being the
 *        sum of num_tokens over the engine's data-parallel ranks, -1 for a worker that did not answer.
 *
 * One call per worker through the loop's upstream multi; a request's state lives from its handler to
 * the request pool's dispose (the client may leave first: the calls still running are cancelled there).
 * It counts in the loop's live requests, so that a shutdown waits for it as for a PD request and ends
 * its calls at the drain deadline (each then counts as failed in the answer).
 * Answers are read whole up to COMPAT_MAX_BODY. Loop thread only.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "control.h"
#include "engine_load.h"
#include "err.h"
#include "reply.h"
#include "router.h"
#include "routes.h"
#include "util.h"

#define COMPAT_MAX_BODY (4u << 20) /* a model or server info document is a few KiB */

enum kind { K_FORWARD, K_HEALTH_GENERATE, K_FLUSH, K_LOADS };

typedef struct call {
    pdr_leg_t leg;
    struct fan *fan;
    pdr_worker_t *w;
    char *buf;
    size_t len, cap;
    int err;     /* 0 or the PDR_E* of the transfer; PDR_ETOOBIG past COMPAT_MAX_BODY */
    int running; /* started and not yet done */
} call_t;

typedef struct fan {
    pdr_thread_t *t;
    h2o_req_t *req; /* NULL once the request is disposed */
    enum kind kind;
    char path[32];
    size_t n, pending;
    call_t calls[];
} fan_t;

static size_t on_data(pdr_leg_t *leg, const char *p, size_t n)
{
    call_t *c = leg->data;
    if (c->len + n > COMPAT_MAX_BODY) {
        c->err = PDR_ETOOBIG;
        return 0; /* aborts the leg */
    }
    if (c->len + n > c->cap) {
        size_t cap = c->cap ? c->cap : 4096;
        while (cap < c->len + n)
            cap *= 2;
        char *nb = realloc(c->buf, cap);
        if (nb == NULL) {
            c->err = PDR_ENOMEM;
            return 0;
        }
        c->buf = nb;
        c->cap = cap;
    }
    memcpy(c->buf + c->len, p, n);
    c->len += n;
    return n;
}

static void finish(fan_t *f);

static void on_done(pdr_leg_t *leg, int err)
{
    call_t *c = leg->data;
    c->running = 0;
    if (c->err == 0)
        c->err = err;
    if (--c->fan->pending == 0 && c->fan->req != NULL)
        finish(c->fan);
}

static const pdr_leg_cbs_t cbs = {on_data, on_done};

static void on_dispose(void *p)
{
    fan_t *f = *(fan_t **)p;
    f->t->live--;
    for (size_t i = 0; i < f->n; i++) {
        call_t *c = &f->calls[i];
        if (c->running)
            pdr_leg_cancel(&c->leg);
        free(c->buf);
        if (c->w != NULL)
            pdr_worker_unref(c->w);
    }
    free(f);
}

static int ok_status(const call_t *c)
{
    return c->err == 0 && c->leg.status >= 200 && c->leg.status < 300;
}

/* What went wrong with one call, for the answers that list failures. */
static void call_error(const call_t *c, char *out, size_t cap)
{
    if (c->err == PDR_ETOOBIG)
        snprintf(out, cap, "answer larger than %u bytes", COMPAT_MAX_BODY);
    else if (c->err != 0)
        snprintf(out, cap, "%s (%s)", pdr_strerror(c->err), pdr_leg_cause(c->err));
    else
        snprintf(out, cap, "HTTP %ld", c->leg.status);
}

static void send_json(fan_t *f, int status, json_t *o)
{
    pdr_metrics_count_request(&f->t->m, PDR_MR_OTHER, pdr_send_json(f->req, status, o), 0, -1);
}

static void finish_forward(fan_t *f)
{
    call_t *c = &f->calls[0];
    h2o_req_t *req = f->req;
    if (c->err != 0 || c->leg.status < 100) {
        char why[160], msg[512];
        call_error(c, why, sizeof(why));
        snprintf(msg, sizeof(msg), "prefill worker %s failed to answer %s: %s", c->w->conf.url, f->path, why);
        pdr_send_error(req, 502, "upstream_error", msg, 0);
        pdr_metrics_count_request(&f->t->m, PDR_MR_OTHER, 502, 0, -1);
        return;
    }
    int status = (int)c->leg.status;
    const char *ct = c->leg.content_type[0] ? c->leg.content_type : "application/json";
    pdr_send_body(req, status, h2o_strdup(&req->pool, ct, strlen(ct)).base, c->buf != NULL ? c->buf : "",
                  c->len);
    pdr_metrics_count_request(&f->t->m, PDR_MR_OTHER, status, 0, -1);
}

static void finish_health_generate(fan_t *f)
{
    char msg[1024], why[160];
    size_t len = 0;
    for (size_t i = 0; i < f->n; i++) {
        const call_t *c = &f->calls[i];
        if (ok_status(c))
            continue;
        call_error(c, why, sizeof(why));
        len += (size_t)snprintf(msg + len, len < sizeof(msg) ? sizeof(msg) - len : 0, "%s%s %s: %s",
                                len ? "; " : "health_generate failed: ", pdr_role_name(c->w->role),
                                c->w->conf.url, why);
        if (len >= sizeof(msg))
            len = sizeof(msg) - 1;
    }
    if (len > 0) {
        pdr_send_error(f->req, 503, "service_unavailable", msg, 1);
        pdr_metrics_count_request(&f->t->m, PDR_MR_OTHER, 503, 0, -1);
        return;
    }
    int n = snprintf(msg, sizeof(msg), "Health generate passed on selected pair: prefill=%s, decode=%s",
                     f->calls[0].w->conf.url, f->calls[1].w->conf.url);
    h2o_req_t *req = f->req;
    req->res.status = 200;
    req->res.reason = "OK";
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, H2O_STRLIT("text/plain"));
    req->res.content_length = (size_t)n;
    h2o_send_inline(req, msg, (size_t)n);
    pdr_metrics_count_request(&f->t->m, PDR_MR_OTHER, 200, 0, -1);
}

static void finish_flush(fan_t *f)
{
    json_t *ok = json_array(), *failed = json_array();
    char why[160], msg[160];
    for (size_t i = 0; i < f->n; i++) {
        const call_t *c = &f->calls[i];
        if (ok_status(c)) {
            json_array_append_new(ok, json_string(c->w->conf.url));
        } else {
            call_error(c, why, sizeof(why));
            json_array_append_new(failed, json_pack("{s:s,s:s}", "worker", c->w->conf.url, "error", why));
        }
    }
    size_t nok = json_array_size(ok), nfail = json_array_size(failed);
    if (nfail == 0)
        snprintf(msg, sizeof(msg), "Successfully flushed cache on all %zu HTTP workers", nok);
    else
        snprintf(msg, sizeof(msg), "Cache flush: %zu succeeded, %zu failed", nok, nfail);
    json_t *o = json_pack("{s:s,s:s,s:I,s:I,s:I}", "status", nfail == 0 ? "success" : "partial_success",
                          "message", msg, "workers_flushed", (json_int_t)nok, "total_http_workers",
                          (json_int_t)f->n, "total_workers", (json_int_t)f->n);
    if (o != NULL && nfail > 0) {
        json_object_set(o, "successful", ok);
        json_object_set(o, "failed", failed);
    }
    json_decref(ok);
    json_decref(failed);
    send_json(f, nfail == 0 ? 200 : 206, o);
}

/* sglang's /get_load answers one object per data-parallel rank; the load is their num_tokens summed
 * (util/engine_load.c reads it, as the engine load poll does). */
static long long load_of(const call_t *c)
{
    pdr_engine_load_t l;
    if (!ok_status(c) || c->buf == NULL || pdr_engine_load_parse_sglang(c->buf, c->len, -1, &l) != 0)
        return -1;
    return l.list || l.tokens_seen > 0 ? (long long)l.tokens : -1; /* one object: its num_tokens */
}

static void finish_loads(fan_t *f)
{
    json_t *ws = json_array();
    for (size_t i = 0; i < f->n; i++) {
        const call_t *c = &f->calls[i];
        json_array_append_new(ws, json_pack("{s:s,s:s,s:I}", "worker", c->w->conf.url, "worker_type",
                                            pdr_role_name(c->w->role), "load", (json_int_t)load_of(c)));
    }
    send_json(f, 200, json_pack("{s:o}", "workers", ws));
}

static void finish(fan_t *f)
{
    switch (f->kind) {
    case K_FORWARD:
        finish_forward(f);
        break;
    case K_HEALTH_GENERATE:
        finish_health_generate(f);
        break;
    case K_FLUSH:
        finish_flush(f);
        break;
    case K_LOADS:
        finish_loads(f);
        break;
    }
}

static fan_t *new_fan(pdr_thread_t *t, h2o_req_t *req, enum kind kind, const char *path, size_t n)
{
    fan_t *f = calloc(1, sizeof(*f) + n * sizeof(call_t));
    if (f == NULL)
        return NULL;
    f->t = t;
    f->req = req;
    f->kind = kind;
    f->n = n;
    snprintf(f->path, sizeof(f->path), "%s", path);
    f->t->live++; /* the shutdown waits for it, and cancels its calls at lifecycle.drain_timeout_ms */
    fan_t **anchor = h2o_mem_alloc_shared(&req->pool, sizeof(*anchor), on_dispose);
    *anchor = f;
    return f;
}

/* Starts the fan's calls (each calls[i].w set) on worker_path; POST with an empty JSON body when post. */
static void start_calls(fan_t *f, const char *worker_path, int post)
{
    const pdr_config_t *c = f->t->config;
    for (size_t i = 0; i < f->n; i++) {
        call_t *cl = &f->calls[i];
        char url[2048 + 64]; /* PDR_CONFIG_MAX_URL and the path */
        snprintf(url, sizeof(url), "%s%s", cl->w->conf.url, worker_path);
        cl->fan = f;
        int rc = pdr_leg_start(&cl->leg, f->t->multi, url, post ? "{}" : NULL, post ? 2 : 0, NULL,
                               c->timeouts.connect_ms, c->timeouts.first_byte_ms, &cbs, cl);
        if (rc == 0) {
            cl->running = 1;
            f->pending++;
        } else {
            cl->err = rc;
        }
    }
    if (f->pending == 0)
        finish(f); /* nothing could start: answered now, from the handler */
}

static void refuse(pdr_thread_t *t, h2o_req_t *req, int status, const char *type, const char *msg, int retry)
{
    pdr_send_error(req, status, type, msg, retry);
    pdr_metrics_count_request(&t->m, PDR_MR_OTHER, status, 0, -1);
}

/* The first healthy prefill worker in the pool's order, else the first; with a reference. */
static pdr_worker_t *first_prefill(pdr_pool_t *p)
{
    pdr_worker_t **ws, *pick = NULL;
    size_t n = pdr_pool_snapshot(p, PDR_ROLE_PREFILL, &ws);
    for (size_t i = 0; i < n && pick == NULL; i++)
        if (pdr_worker_serving(ws[i]))
            pick = ws[i];
    if (pick == NULL && n > 0)
        pick = ws[0];
    if (pick != NULL)
        pdr_worker_ref(pick);
    pdr_pool_release(ws, n);
    return pick;
}

int pdr_compat_handle(pdr_thread_t *t, h2o_req_t *req, const pdr_route_def_t *rt)
{
    enum kind kind;
    switch (rt->kind) {
    case PDR_RK_FORWARD:
        kind = K_FORWARD;
        break;
    case PDR_RK_HEALTH_GENERATE:
        kind = K_HEALTH_GENERATE;
        break;
    case PDR_RK_FLUSH:
        kind = K_FLUSH;
        break;
    case PDR_RK_LOADS:
        kind = K_LOADS;
        break;
    default:
        return 0;
    }
    const char *path = rt->worker_path;
    if (!pdr_route_method_ok(req, rt)) {
        refuse(t, req, 405, "invalid_request_error", kind == K_FLUSH ? "use POST" : "use GET", 0);
        return 1;
    }
    if (pdr_router_shutting_down(t->r)) {
        refuse(t, req, 503, "service_unavailable", "the router is shutting down", 1);
        return 1;
    }
    pdr_pool_t *pool = &t->r->pool;
    fan_t *f = NULL;
    if (kind == K_FORWARD) {
        pdr_worker_t *w = first_prefill(pool);
        if (w == NULL) {
            refuse(t, req, 503, "service_unavailable", "no prefill worker", 1);
            return 1;
        }
        if ((f = new_fan(t, req, kind, path, 1)) == NULL) {
            pdr_worker_unref(w);
        } else {
            f->calls[0].w = w;
        }
    } else if (kind == K_HEALTH_GENERATE) {
        /* A pair a request could get: with compat.enabled, a decode whose KV layout the prefill's matches. */
        const pdr_config_t *c = t->config;
        pdr_worker_t *p = pdr_pool_pick(pool, NULL, PDR_ROLE_PREFILL, NULL, 0);
        pdr_pick_filter_t cf = {.key = p != NULL ? pdr_worker_compat_key(p) : 0,
                                .unknown_ok = c->compat.unknown == PDR_COMPAT_UNKNOWN_ALLOW};
        pdr_worker_t *d = p != NULL ? pdr_pool_pick_filtered(pool, NULL, PDR_ROLE_DECODE, NULL, 0, NULL, 0,
                                                             NULL, c->compat.enabled ? &cf : NULL)
                                    : NULL;
        if (d == NULL) {
            if (p != NULL)
                pdr_worker_unref(p);
            refuse(t, req, 503, "service_unavailable", "no healthy prefill/decode pair", 1);
            return 1;
        }
        if ((f = new_fan(t, req, kind, path, 2)) == NULL) {
            pdr_worker_unref(p);
            pdr_worker_unref(d);
        } else {
            f->calls[0].w = p;
            f->calls[1].w = d;
        }
    } else {
        pdr_worker_t **ws;
        size_t n = pdr_pool_snapshot(pool, -1, &ws);
        if (n == 0) {
            refuse(t, req, 503, "service_unavailable", "no worker", 1);
            return 1;
        }
        if ((f = new_fan(t, req, kind, path, n)) == NULL) {
            pdr_pool_release(ws, n);
        } else {
            for (size_t i = 0; i < n; i++)
                f->calls[i].w = ws[i]; /* the snapshot's references move to the calls */
            free(ws);
        }
    }
    if (f == NULL) {
        refuse(t, req, 503, "service_unavailable", "out of memory", 1);
        return 1;
    }
    start_calls(f, path, kind == K_FLUSH);
    return 1;
}
