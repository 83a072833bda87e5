/*
 * The endpoint picker's picks (gateway_internal.h): the decode and the prefill chosen by the pool's
 * policies among its serving workers, the gateway's endpoint subset honoured, admission's per-worker limit
 * honoured, the prompt's text (cache_aware) and token ids (precise_prefix) read as the front door reads
 * them; what the picks hold (in flight until the response ends), the endpoint the gateway says served the
 * request, and the counters of /metrics. Loop 0 (the counters are read by any loop).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "fairq.h"
#include "fallback.h"
#include "gateway_internal.h"
#include "pd.h"
#include "router.h"
#include "token_ids.h"
#include "util.h"

#define GW_MAX_AVOID 1024 /* workers a pick may leave out (a subset against a big pool: the rest picks) */

/* "host:port" of w (IPv6 in brackets), as the gateway names endpoints. */
static void endpoint_of(const pdr_worker_t *w, char *out, size_t cap)
{
    snprintf(out, cap, w->conf.is_ipv6 ? "[%s]:%d" : "%s:%d", w->conf.host, w->conf.port);
}

void pdr__gw_keep_subset(gw_req_t *q, const pdr_epp_msg_t *m)
{
    q->has_subset = 1;
    q->subset = calloc(m->nsubset + 1, sizeof(*q->subset));
    for (size_t i = 0; q->subset != NULL && i < m->nsubset; i++)
        if ((q->subset[q->nsubset] = strdup(m->subset[i])) != NULL)
            q->nsubset++;
}

static int in_subset(const gw_req_t *q, const char *ep)
{
    for (size_t i = 0; i < q->nsubset; i++)
        if (strcmp(q->subset[i], ep) == 0)
            return 1;
    return 0;
}

/* The decode workers inside the gateway's endpoint subset, into out (at most cap): their count. */
static size_t subset_uids(gw_req_t *q, uint64_t *out, size_t cap)
{
    pdr_worker_t **ws;
    size_t nw = pdr_pool_snapshot(&q->g->r->pool, PDR_ROLE_DECODE, &ws), n = 0;
    for (size_t i = 0; i < nw && n < cap; i++) {
        char ep[80];
        endpoint_of(ws[i], ep, sizeof(ep));
        if (in_subset(q, ep))
            out[n++] = ws[i]->uid;
    }
    pdr_pool_release(ws, nw);
    return n;
}

/* Whether the pool has prefill workers (in any state): a PD pool, whose requests need one. */
static int has_prefills(pdr_router_t *r, const char *pool)
{
    pdr_worker_t **ws;
    size_t nw = pdr_pool_snapshot(&r->pool, PDR_ROLE_PREFILL, &ws);
    int found = 0;
    for (size_t i = 0; i < nw && !found; i++)
        found = strcmp(ws[i]->pool, pool) == 0;
    pdr_pool_release(ws, nw);
    return found;
}

void pdr__gw_pick(gw_req_t *q)
{
    pdr_router_t *r = q->g->r;
    const pdr_config_t *c = r->threads[0].config;
    size_t tlen = 0;
    const char *text = q->parsed ? pdr_pd_routing_text(&q->pr, &tlen) : NULL;
    pdr_prompt_tokens_t tok = {NULL, 0, NULL, 0};
    if (text != NULL && q->precise && r->pool.kvindex != NULL) {
        struct pdr_tokenizer *tk = pdr_router_tokenizer_for(r, q->pool);
        (void)pdr_request_token_ids_or(&q->pr, tk, &tok, PDR_FB_TOKENIZE_ROUTING, &q->unknown_model);
        pdr_tokenizer_free(tk);
        const pdr_jmember_t *m = pdr_jfind(q->pr.m, q->pr.n, "model");
        if (m != NULL && m->v.type == PDR_JT_STRING && m->v.len >= 2) {
            tok.model = m->v.p + 1;
            tok.model_len = m->v.len - 2;
        }
    }
    uint64_t *avoid = malloc(GW_MAX_AVOID * 3 * sizeof(*avoid));
    if (avoid == NULL) {
        free(tok.ids);
        pdr__gw_refuse(q, 503, "service_unavailable", "out of memory", GW_BUSY);
        return;
    }
    uint64_t *only = avoid + 2 * GW_MAX_AVOID;
    size_t nav = pdr_admit_avoid(c, &r->pool, q->pool, PDR_ROLE_DECODE, NULL, 0, avoid, GW_MAX_AVOID);
    size_t nonly = q->has_subset ? subset_uids(q, only, GW_MAX_AVOID) : 0;
    pdr_pick_info_t info = {.record = 1, .tok = &tok, .only = q->has_subset ? only : NULL, .n_only = nonly};
    q->dw = pdr_pool_pick_info(&r->pool, q->pool, PDR_ROLE_DECODE, avoid, nav, text, tlen, &info);
    if (q->dw == NULL) {
        free(tok.ids);
        free(avoid);
        pdr__gw_refuse(q, 503, "service_unavailable",
                       q->has_subset ? "no healthy decode worker in the gateway's endpoint subset"
                                     : "no healthy decode worker",
                       GW_NO_DECODE);
        return;
    }
    const char *prefill = NULL;
    if (has_prefills(r, q->pool)) {
        uint64_t pav[GW_MAX_AVOID];
        size_t np = pdr_admit_avoid(c, &r->pool, q->pool, PDR_ROLE_PREFILL, NULL, 0, pav, GW_MAX_AVOID);
        pdr_pick_info_t pinfo = {.record = 1, .tok = &tok};
        q->pw = pdr_pool_pick_info(&r->pool, q->pool, PDR_ROLE_PREFILL, pav, np, text, tlen, &pinfo);
        if (q->pw == NULL) {
            free(tok.ids);
            free(avoid);
            pdr_worker_unref(q->dw);
            q->dw = NULL;
            pdr__gw_refuse(q, 503, "service_unavailable", "no healthy prefill worker", GW_NO_PREFILL);
            return;
        }
        endpoint_of(q->pw, q->pep, sizeof(q->pep));
        prefill = q->pep;
        pdr_worker_track(q->pw, 1);
    }
    free(tok.ids);
    pdr_worker_track(q->dw, 1); /* in flight until the response ends (pdr__gw_release) */
    endpoint_of(q->dw, q->dep, sizeof(q->dep));
    char fb[16][80];
    const char *eps[17] = {q->dep};
    size_t n = 1;
    avoid[nav++] = q->dw->uid;
    for (int i = 0; i < c->epp.fallbacks && i < 16 && nav < GW_MAX_AVOID * 2; i++) {
        pdr_pick_info_t fi = {.record = 0, .only = info.only, .n_only = info.n_only};
        pdr_worker_t *w = pdr_pool_pick_info(&r->pool, q->pool, PDR_ROLE_DECODE, avoid, nav, NULL, 0, &fi);
        int seen = 0; /* avoid is a preference: once every decode is listed, the pick repeats one */
        for (size_t k = 0; w != NULL && k < nav && !seen; k++)
            seen = avoid[k] == w->uid;
        if (w == NULL || seen) {
            pdr_worker_unref(w);
            break;
        }
        avoid[nav++] = w->uid;
        endpoint_of(w, fb[i], sizeof(fb[i]));
        pdr_worker_unref(w);
        eps[n++] = fb[i];
    }
    free(avoid);
    pdr__gw_observe(q->t0_ns);
    pdr__gw_count(GW_PICKED);
    pdr__gw_answer(q, eps, n, prefill);
}

void pdr__gw_release(gw_req_t *q)
{
    if (q->dw != NULL) {
        pdr_worker_track(q->dw, -1);
        pdr_worker_unref(q->dw);
        q->dw = NULL;
    }
    if (q->pw != NULL) {
        pdr_worker_track(q->pw, -1);
        pdr_worker_unref(q->pw);
        q->pw = NULL;
    }
    for (size_t i = 0; i < q->nsubset; i++)
        free(q->subset[i]);
    free(q->subset);
    q->subset = NULL;
    q->nsubset = 0;
}

void pdr__gw_served(gw_req_t *q, const char *ep)
{
    if (q->served_seen || !q->answered)
        return;
    q->served_seen = 1;
    int k = ep == NULL ? 3 : strcmp(ep, q->dep) == 0 ? 0 : 2;
    if (k == 2) { /* one of the fall-backs the answer listed, or an endpoint of the gateway's own choice */
        pdr_worker_t **ws;
        size_t nw = pdr_pool_snapshot(&q->g->r->pool, PDR_ROLE_DECODE, &ws);
        for (size_t i = 0; i < nw && k == 2; i++) {
            char e[80];
            endpoint_of(ws[i], e, sizeof(e));
            if (strcmp(e, ep) == 0) {
                k = 1;
                if (q->dw != NULL && ws[i] != q->dw) { /* in flight where it runs, not where it was sent */
                    pdr_worker_track(q->dw, -1);
                    pdr_worker_unref(q->dw);
                    pdr_worker_ref(ws[i]);
                    q->dw = ws[i];
                    pdr_worker_track(q->dw, 1);
                }
            }
        }
        pdr_pool_release(ws, nw);
    }
    pdr__gw_count_served(k);
}

/* The request's header `lower` as the gateway sent it (pdr_admit_header_fn). */
static const char *gw_header(void *ctx, const char *lower, size_t n, size_t *len)
{
    (void)n;
    return pdr__gw_header(ctx, lower, len);
}

void pdr__gw_admit_tag(gw_req_t *q, const pdr_config_t *c, pdr_admit_tag_t *tag)
{
    pdr_admit_tag_of(c, gw_header, q, q->parsed ? &q->pr : NULL, q->t0_ns, tag);
}
