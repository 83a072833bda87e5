/*
 * The endpoint picker (docs/gateway-api.md): a gateway opens one ext_proc stream per request it routes to
 * the InferencePool; this file plays the picker's side of it (router/epp/ speaks the protocol) with the
 * router's own state: the request's body is read as the front door reads it (the model picks the pool,
 * the prompt feeds cache_aware and precise_prefix), admission decides whether it may go now, wait (the
 * gateway holds the request meanwhile) or be refused (429 shed, 503 busy), and the pool's policies pick
 * the decode and the prefill among serving workers (health, outlier ejection and drain as for the front
 * door). The answer names the decode (then epp.fallbacks other decodes, for the gateway's retries) in
 * x-gateway-destination-endpoint and the envoy.lb metadata, and the prefill in epp.prefill_header for
 * the decode pod's sidecar. A worker picked counts as in flight until the response's end (or the
 * stream's), as a request of the front door does.
 *
 * Exchanges: FULL_DUPLEX_STREAMED (the protocol's): the body is buffered, the pick answers the headers at
 * its last chunk and the body is given back whole; BUFFERED: the headers are continued and the pick
 * answers the body; a request without a body, and the other modes (NONE, STREAMED: the body comes after
 * the headers' answer, too late for the pick), are picked at the headers from the load alone.
 * Loop 0.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admission.h"
#include "epp.h"
#include "err.h"
#include "fairq.h"
#include "gateway.h"
#include "gateway_internal.h"
#include "pd.h"
#include "router.h"
#include "routes.h"
#include "token_ids.h"
#include "util.h"

static gw_t *gw; /* loop 0: the one picker of the process */

static void req_free(gw_req_t *q)
{
    if (q->admit_entered) {
        (void)pdr_admit_leave(&q->g->r->threads[0], q->g->r->threads[0].config, &q->admit);
        q->admit_entered = 0;
    }
    pdr__gw_release(q);
    if (q->timer != NULL) {
        uv_timer_stop(q->timer);
        uv_close((uv_handle_t *)q->timer, (uv_close_cb)free);
        q->timer = NULL;
    }
    pdr_pdreq_clear(&q->pr);
    free(q->body);
    free(q->hdrs);
    free(q);
}

/* Keeps the request's headers (names and values copied into one block). */
static int keep_headers(gw_req_t *q, const pdr_epp_msg_t *m)
{
    size_t bytes = m->nheaders * sizeof(pdr_epp_header_t);
    for (size_t i = 0; i < m->nheaders; i++)
        bytes += m->headers[i].name_len + m->headers[i].value_len + 2;
    char *blk = malloc(bytes ? bytes : 1);
    if (blk == NULL)
        return PDR_ENOMEM;
    pdr_epp_header_t *h = (pdr_epp_header_t *)blk;
    char *p = blk + m->nheaders * sizeof(*h);
    for (size_t i = 0; i < m->nheaders; i++) {
        memcpy(p, m->headers[i].name, m->headers[i].name_len);
        p[m->headers[i].name_len] = '\0';
        h[i].name = p;
        h[i].name_len = m->headers[i].name_len;
        p += h[i].name_len + 1;
        memcpy(p, m->headers[i].value, m->headers[i].value_len);
        p[m->headers[i].value_len] = '\0';
        h[i].value = p;
        h[i].value_len = m->headers[i].value_len;
        p += h[i].value_len + 1;
    }
    q->hdrs = blk;
    q->h = h;
    q->nh = m->nheaders;
    size_t len;
    const char *path = pdr__gw_header(q, ":path", &len);
    q->route = -1;
    size_t plen = path != NULL ? strcspn(path, "?") : 0;
    for (size_t i = 0; path != NULL && i < pdr_n_routes && q->route < 0; i++) /* the data port's PD routes */
        if (pdr_routes[i].kind == PDR_RK_PD && strlen(pdr_routes[i].path) == plen &&
            memcmp(pdr_routes[i].path, path, plen) == 0)
            q->route = (int)pdr_routes[i].pd_route;
    return 0;
}

static void on_admitted(pdr_admit_waiter_t *w)
{
    gw_req_t *q = (gw_req_t *)((char *)w - offsetof(gw_req_t, admit));
    if (q->timer != NULL)
        uv_timer_stop(q->timer);
    pdr_admit_started(&q->admit);
    pdr__gw_pick(q);
}

static void on_queue_timer(uv_timer_t *h)
{
    gw_req_t *q = h->data;
    if (q == NULL || q->admit.state != PDR_ADMIT_QUEUED)
        return;
    pdr_thread_t *t = &q->g->r->threads[0];
    if (pdr_now_ns() >= q->queue_deadline_ns || pdr_router_shutting_down(q->g->r)) {
        if (pdr_admit_expire(&q->admit)) {
            pdr_admit_count_refused(&q->admit, PDR_REJ_QUEUE_TIMEOUT);
            q->admit_entered = 0;
            pdr__gw_refuse(q, 503, "service_unavailable",
                           "no room for the request within limits.queue_timeout_ms", GW_BUSY);
        }
        return;
    }
    pdr_admit_kick(t, t->config); /* the rate limit's next token */
    uint64_t now = pdr_now_ns(), next = q->queue_deadline_ns, rate = pdr_admit_rate_wait_ns(t->config);
    if (rate > 0 && now + rate < next)
        next = now + rate;
    uv_timer_start(q->timer, on_queue_timer, next > now ? (next - now + 999999) / 1000000 : 1, 0);
}

/* The body is whole (or there is none): parse it, find its pool, ask admission. */
static void decide(gw_req_t *q)
{
    pdr_thread_t *t = &q->g->r->threads[0];
    const pdr_config_t *c = t->config;
    char err[512];
    q->t0_ns = pdr_now_ns();
    long pool = 0;
    if (q->route >= 0 && q->len > 0) {
        int prc = pdr_pdreq_parse((pdr_route_t)q->route, q->body, q->len, &q->pr, err, sizeof(err));
        if (prc == PDR_ENOMEM) {
            pdr__gw_refuse(q, 503, "service_unavailable", "out of memory", GW_BUSY);
            return;
        }
        if (prc != 0) {
            pdr__gw_refuse(q, 400, "invalid_request_error", err, GW_BAD_REQUEST);
            return;
        }
        q->parsed = 1;
        int pst = pdr_pd_request_pool(c, &q->pr, &pool, err, sizeof(err));
        if (pst != 0) {
            pdr__gw_refuse(q, pst, "invalid_request_error", err, pst == 404 ? GW_NOT_FOUND : GW_BAD_REQUEST);
            return;
        }
    }
    pdr_pool_conf_t pc;
    pdr_config_pool(c, (size_t)pool, &pc);
    q->pool = pc.name;
    q->precise =
        pc.policy_prefill == PDR_POLICY_PRECISE_PREFIX || pc.policy_decode == PDR_POLICY_PRECISE_PREFIX;
    pdr_admit_tag_t tag;
    pdr__gw_admit_tag(q, c, &tag);
    pdr_admit_result_t adm =
        pdr_admit_enter(t, c, &q->admit, &q->g->r->pool, q->pool, (int)pool, &tag, on_admitted);
    if (adm == PDR_ADMIT_GO || adm == PDR_ADMIT_WAIT)
        q->admit_entered = 1;
    if (adm == PDR_ADMIT_GO) {
        pdr_admit_started(&q->admit);
        pdr__gw_pick(q);
        return;
    }
    if (adm == PDR_ADMIT_WAIT) {
        q->queue_deadline_ns = tag.deadline_ns;
        if (q->timer == NULL) {
            if ((q->timer = malloc(sizeof(*q->timer))) == NULL) {
                pdr__gw_refuse(q, 503, "service_unavailable", "out of memory", GW_BUSY);
                return;
            }
            uv_timer_init(t->loop, q->timer);
            q->timer->data = q;
        }
        on_queue_timer(q->timer);
        return;
    }
    pdr__gw_admit_refused(q, adm);
}

void pdr__gw_admit_refused(gw_req_t *q, pdr_admit_result_t adm)
{
    pdr_admit_reject_t why = adm == PDR_ADMIT_FULL          ? PDR_REJ_QUEUE_FULL
                             : adm == PDR_ADMIT_RATE        ? PDR_REJ_RATE_LIMITED
                             : adm == PDR_ADMIT_SHED        ? PDR_REJ_SHED
                             : adm == PDR_ADMIT_LATE        ? PDR_REJ_DEADLINE
                             : adm == PDR_ADMIT_BUSY_POOL   ? PDR_REJ_MAX_INFLIGHT_PER_POOL
                             : adm == PDR_ADMIT_BUSY_WORKER ? PDR_REJ_MAX_INFLIGHT_PER_WORKER
                                                            : PDR_REJ_MAX_INFLIGHT;
    pdr_admit_count_refused(&q->admit, why);
    if (adm == PDR_ADMIT_FULL || adm == PDR_ADMIT_RATE || adm == PDR_ADMIT_SHED)
        pdr__gw_refuse(q, 429, "rate_limit_exceeded",
                       adm == PDR_ADMIT_SHED   ? "too many requests: this request's class is shed"
                       : adm == PDR_ADMIT_RATE ? "too many requests: over the rate limit"
                                               : "too many requests: the admission queue is full",
                       GW_SHED);
    else
        pdr__gw_refuse(q, 503, "service_unavailable", "too many requests in flight", GW_BUSY);
}

static void on_request_body(gw_req_t *q, const pdr_epp_msg_t *m)
{
    const pdr_config_t *c = q->g->r->threads[0].config;
    if (q->answered || q->too_big) {
        /* After the pick (STREAMED, NONE): the body is not ours to read; past the ceiling: dropped. */
        if (!q->too_big)
            (void)pdr_epp_answer_continue(q->s, PDR_EPP_REQUEST_BODY);
        return;
    }
    q->body_sent = 1;
    if (q->len + m->body_len > (size_t)c->limits.max_body_bytes) {
        q->too_big = 1;
        char msg[160];
        snprintf(msg, sizeof(msg), "the request body is larger than limits.max_body_bytes (%lld bytes)",
                 (long long)c->limits.max_body_bytes);
        pdr__gw_refuse(q, 413, "invalid_request_error", msg, GW_TOO_LARGE);
        return;
    }
    if (q->len + m->body_len > q->cap) {
        size_t nc = q->cap ? q->cap : 4096;
        while (nc < q->len + m->body_len)
            nc *= 2;
        char *nb = realloc(q->body, nc + 1);
        if (nb == NULL) {
            pdr__gw_refuse(q, 503, "service_unavailable", "out of memory", GW_BUSY);
            return;
        }
        q->body = nb;
        q->cap = nc;
    }
    memcpy(q->body + q->len, m->body, m->body_len);
    q->len += m->body_len;
    if (m->end_of_stream)
        decide(q);
}

static void on_message(void *data, pdr_epp_stream_t *s, const pdr_epp_msg_t *m)
{
    gw_req_t *q = pdr_epp_stream_data(s);
    if (q == NULL) {
        if ((q = calloc(1, sizeof(*q))) == NULL) {
            (void)pdr_epp_finish(s, 8, "out of memory"); /* RESOURCE_EXHAUSTED */
            return;
        }
        q->s = s;
        q->g = data;
        q->route = -1;
        q->mode = m->request_body_mode;
        pdr_epp_stream_set_data(s, q);
        pdr__gw_streams(1);
    }
    if (m->has_subset && !q->has_subset)
        pdr__gw_keep_subset(q, m);
    switch (m->phase) {
    case PDR_EPP_REQUEST_HEADERS:
        if (keep_headers(q, m) != 0) {
            pdr__gw_refuse(q, 503, "service_unavailable", "out of memory", GW_BUSY);
            return;
        }
        if (m->end_of_stream || q->mode == PDR_EPP_MODE_NONE || q->mode == PDR_EPP_MODE_STREAMED ||
            q->mode == PDR_EPP_MODE_UNKNOWN || q->mode == PDR_EPP_MODE_BUFFERED_PARTIAL ||
            q->mode == PDR_EPP_MODE_GRPC)
            decide(q); /* no body to read before the pick */
        else if (q->mode == PDR_EPP_MODE_BUFFERED)
            (void)pdr_epp_answer_continue(s, PDR_EPP_REQUEST_HEADERS);
        return;
    case PDR_EPP_REQUEST_BODY:
        on_request_body(q, m);
        return;
    case PDR_EPP_RESPONSE_HEADERS:
        pdr__gw_served(q, m->served);
        (void)pdr_epp_answer_continue(s, m->phase);
        if (m->end_of_stream)
            pdr__gw_release(q);
        return;
    case PDR_EPP_RESPONSE_BODY:
        if (m->served != NULL && !q->served_seen)
            pdr__gw_served(q, m->served);
        if (q->mode == PDR_EPP_MODE_FULL_DUPLEX_STREAMED)
            (void)pdr_epp_answer_body(s, m->phase, m->body, m->body_len, m->end_of_stream);
        else
            (void)pdr_epp_answer_continue(s, m->phase);
        if (m->end_of_stream)
            pdr__gw_release(q);
        return;
    case PDR_EPP_REQUEST_TRAILERS:
    case PDR_EPP_RESPONSE_TRAILERS:
        (void)pdr_epp_answer_continue(s, m->phase);
        if (m->phase == PDR_EPP_RESPONSE_TRAILERS)
            pdr__gw_release(q);
        return;
    }
}

static void on_close(void *data, pdr_epp_stream_t *s)
{
    (void)data;
    gw_req_t *q = pdr_epp_stream_data(s);
    if (q == NULL)
        return;
    pdr_epp_stream_set_data(s, NULL);
    pdr__gw_streams(-1);
    req_free(q);
}

/* The services' statuses on one of the picker's servers: liveness while the process runs; the others (the
 * extension's "inference-extension" among them) as the router's readiness. */
static void set_health(pdr_epp_t *e, int ok)
{
    static const char *const ready_names[] = {"readiness", "envoy.service.ext_proc.v3.ExternalProcessor",
                                              "inference-extension", ""};
    if (e == NULL)
        return;
    for (size_t i = 0; i < sizeof(ready_names) / sizeof(ready_names[0]); i++)
        (void)pdr_epp_set_health(e, ready_names[i], ok ? PDR_EPP_HEALTH_SERVING : PDR_EPP_HEALTH_NOT_SERVING);
    (void)pdr_epp_set_health(e, "liveness", PDR_EPP_HEALTH_SERVING);
}

static void on_health(uv_timer_t *h)
{
    gw_t *g = h->data;
    char why[200];
    int ok = !pdr_router_stopping(g->r) && g->ready(g->r, why, sizeof(why));
    set_health(g->epp, ok);
    set_health(g->health_epp, ok);
    pdr__gw_stats_copy(g->epp, g->health_epp);
    if (ok != g->was_ready)
        pdr_info("endpoint picker: %s%s%s", ok ? "serving" : "not serving", ok ? "" : ": ", ok ? "" : why);
    g->was_ready = ok;
}

static void on_closed(void *data)
{
    gw_t *g = data;
    if (--g->open == 0)
        free(g);
}

int pdr_gateway_start(pdr_router_t *r, pdr_gateway_ready_cb ready)
{
    const pdr_config_t *c = r->config;
    if (!c->epp.enabled)
        return 0;
    gw_t *g = calloc(1, sizeof(*g));
    if (g == NULL)
        return PDR_ENOMEM;
    g->r = r;
    g->ready = ready;
    g->was_ready = -1;
    pdr_epp_options_t o;
    pdr_epp_options_default(&o);
    o.host = c->epp.host;
    o.port = c->epp.port;
    o.max_connections = (uint32_t)c->epp.max_connections;
    o.max_streams = (uint32_t)c->epp.max_streams;
    o.max_message = (size_t)c->limits.max_body_bytes + 65536; /* a body arrives whole in BUFFERED mode */
    pdr_epp_handler_t hd = {.on_message = on_message, .on_close = on_close, .data = g};
    int err = 0;
    char msg[256];
    g->epp = pdr_epp_new(r->threads[0].loop, &o, &hd, &err, msg, sizeof(msg));
    if (g->epp == NULL) {
        pdr_error("endpoint picker: cannot listen on %s:%d: %s", c->epp.host, c->epp.port, msg);
        free(g);
        return err ? err : PDR_EIO;
    }
    if (c->epp.health_port != 0 && c->epp.health_port != c->epp.port) {
        o.port = c->epp.health_port;
        g->health_epp = pdr_epp_new(r->threads[0].loop, &o, &hd, &err, msg, sizeof(msg));
        if (g->health_epp == NULL) {
            pdr_error("endpoint picker: cannot listen on %s:%d (epp.health_port): %s", c->epp.host,
                      c->epp.health_port, msg);
            g->open = 1;
            pdr_epp_close(g->epp, on_closed, g);
            return err ? err : PDR_EIO;
        }
    }
    gw = g;
    uv_timer_init(r->threads[0].loop, &g->health);
    g->health.data = g;
    uv_timer_start(&g->health, on_health, 0, 250);
    pdr_info("endpoint picker: ext_proc and grpc.health.v1 on %s:%d (h2c)%s", c->epp.host,
             pdr_epp_port(g->epp),
             g->health_epp != NULL ? ", and for the health probes on epp.health_port" : "");
    return 0;
}

void pdr_gateway_stop(pdr_router_t *r)
{
    (void)r;
    gw_t *g = gw;
    if (g == NULL)
        return;
    gw = NULL;
    pdr__gw_stats_copy(g->epp, g->health_epp);
    uv_timer_stop(&g->health);
    uv_close((uv_handle_t *)&g->health, NULL);
    set_health(g->epp, 0);
    set_health(g->health_epp, 0);
    g->open = g->health_epp != NULL ? 2 : 1;
    pdr_epp_close(g->epp, on_closed, g);
    if (g->health_epp != NULL)
        pdr_epp_close(g->health_epp, on_closed, g);
}
