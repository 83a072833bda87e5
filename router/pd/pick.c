/*
 * Choosing an attempt's workers beyond the pool's policy: conditional disaggregation (disagg.h), decode
 * admission by KV room (kv_admission, shim_events.h) and the pair-aware breaker (breaker.h). Every worker
 * reference held in x->at.pw and x->at.dw is owned by the request. Loop thread of the request.
 */
#include "pd_internal.h"

/* What cache_aware matches on: the raw JSON of the prompt member ("text", "prompt", "messages" or
 * "input_ids"), exactly as the client sent it, so that requests sharing a system prompt or a
 * conversation's start share a prefix. NULL when the body has none. */
const char *pdr__pd_routing_text(const pdr_pdreq_t *pr, size_t *len)
{
    static const char *const keys[] = {"text", "prompt", "messages", "input_ids"};
    for (size_t i = 0; i < pr->n; i++)
        for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
            if (pr->m[i].key_len == strlen(keys[k]) && memcmp(pr->m[i].key, keys[k], pr->m[i].key_len) == 0) {
                *len = pr->m[i].v.len;
                return pr->m[i].v.p;
            }
    return NULL;
}

/* The feature is on and the protocol has something that can run the request alone now (its
 * can_run_alone: vLLM's decode, a regular sglang worker of the pool). */
int pdr__pd_disagg_possible(const pd_req_t *x)
{
    if (!pdr_disagg_enabled(x->conf))
        return 0;
    return x->proto->can_run_alone != NULL && x->proto->can_run_alone(x);
}

/* Picks the prefill without recording the prompt in its cache_aware tree, decides from the prefix the worker
 * that would run the request alone holds (the cost of skipping the prefill is what that worker must compute:
 * a prompt cached on the prefill only would be computed again in full) and the prefills' load, and either
 * keeps that prefill (recording the prompt now) or lets it go: the attempt is solo. */
void pdr__pd_decide_disaggregation(pd_req_t *x, const char *text, size_t tlen, const pdr_prompt_tokens_t *tok)
{
    pdr_router_t *r = x->r;
    pdr_pick_filter_t pf;
    pdr_pick_info_t info = {.record = 0, .tok = tok, .filter = pdr__pd_pick_filter(x, NULL, &pf)};
    x->at.pw = pdr_pool_pick_info(&r->pool, x->pool, PDR_ROLE_PREFILL, x->tried[PDR_ROLE_PREFILL],
                                  x->n_tried[PDR_ROLE_PREFILL], text, tlen, &info);
    if (x->at.pw == NULL)
        return; /* no serving prefill: answered as without the feature */
    /* What the worker that would run it alone holds: its role's pick, not recorded, when its policy knows
     * (a policy that does not know its workers' caches: none held; and its pick is not made twice). */
    pdr_role_t srole = x->proto->solo->answer_role;
    pdr_pick_filter_t sf;
    pdr_pick_info_t solo = {.record = 0, .tok = tok, .filter = pdr__pd_affinity_filter(x, &sf)};
    if (pdr_pool_role_knows_cache(&r->pool, x->pool, srole))
        pdr_worker_unref(pdr_pool_pick_info(&r->pool, x->pool, srole, x->tried[PDR_ROLE_DECODE],
                                            x->n_tried[PDR_ROLE_DECODE], text, tlen, &solo));
    pdr_disagg_input_t in;
    if (solo.matched_known && solo.tokens) { /* a policy that counts tokens itself */
        memset(&in, 0, sizeof(in));
        in.tokens = 1;
        in.length = solo.prompt_tokens;
        in.matched = solo.matched;
    } else {
        pdr_disagg_measure(text, tlen, solo.matched_known ? solo.matched : 0, &in);
    }
    const pdr_config_t *c = x->conf;
    if (c->disaggregation.skip_when_prefill_saturated)
        in.prefill_saturated = pdr_pool_saturated(&r->pool, x->pool, PDR_ROLE_PREFILL,
                                                  c->disaggregation.prefill_saturated_inflight);
    x->disagg = (int)pdr_disagg_decide(c, &in);
    x->t->m.disagg_decisions[x->disagg]++;
    const pdr_pick_info_t *used = x->disagg == PDR_DISAGG_DISAGGREGATED ? &info : &solo;
    x->at.match_known = used->matched_known;
    x->at.match_index = used->from_index;
    x->at.matched = used->matched;
    if (x->disagg == PDR_DISAGG_DISAGGREGATED) {
        if (info.matched_known)
            pdr_pool_record_pick(&r->pool, x->at.pw, text, tlen);
        return;
    }
    pdr_worker_unref(x->at.pw);
    x->at.pw = NULL;
    x->at.ops = x->proto->solo;
    x->at.merge = 0; /* one worker answers the whole request, input logprobs included */
}

static void on_admit_retry(uv_timer_t *h)
{
    pd_req_t *x = h->data;
    if (x->req != NULL)
        x->sm->start_attempt(x);
}

/* Decode admission (kv_admission): 1 to go on with x->at.dw, its KV held in x->kv.hold; 0 when the request
 * waits for room (a timer runs the attempt again, polling every ADMIT_POLL_MS) or was answered 503. */
#define ADMIT_POLL_MS 5
#define ADMIT_MAX_PICKS 8
int pdr__pd_admit_decode(pd_req_t *x, const char *text, size_t tlen)
{
    pdr_router_t *r = x->r;
    if (!pdr_kv_limited(x->conf, x->at.dw))
        return 1; /* the usual case without reports: nothing to estimate */
    if (x->kv.need == 0) {
        pdr_prompt_tokens_t tok = {NULL, 0, NULL, 0};
        struct pdr_tokenizer *tk = pdr_router_tokenizer_for(r, x->pool);
        pdr_request_token_ids_or(&x->pr, tk, &tok, PDR_FB_TOKENIZE_KV_ADMISSION, &x->unknown_model);
        pdr_tokenizer_free(tk);
        x->kv.need = pdr_kv_need_tokens(x->conf, &x->pr, tok.n, tlen);
        free(tok.ids);
    }
    uint64_t avoid[PDR_MAX_TRIED + ADMIT_MAX_PICKS];
    size_t n = x->n_tried[PDR_ROLE_DECODE];
    memcpy(avoid, x->tried[PDR_ROLE_DECODE], n * sizeof(avoid[0]));
    int never = 1; /* every decode tried has less KV in all than the request needs */
    for (int k = 0; k < ADMIT_MAX_PICKS; k++) {
        int fit = pdr_kv_admit(x->conf, x->at.dw, x->kv.need, &x->kv.hold);
        if (fit > 0) {
            pdr_kv_count(x->kv.admit_waited ? 2 : k > 0 ? 1 : 0);
            return 1;
        }
        never &= fit < 0;
        avoid[n++] = x->at.dw->uid;
        pdr_pick_filter_t df;
        pdr_worker_t *o = pdr_pool_pick_filtered(&r->pool, x->pool, PDR_ROLE_DECODE, avoid, n, text, tlen,
                                                 NULL, pdr__pd_pick_filter(x, x->at.pw, &df));
        int seen = 0;
        for (size_t i = 0; o != NULL && i < n; i++)
            seen |= avoid[i] == o->uid;
        if (o == NULL || seen) {
            pdr_worker_unref(o);
            break;
        }
        pdr_worker_unref(x->at.dw);
        x->at.dw = o;
    }
    if (never) {
        /* Waiting cannot help: no decode tried could hold it even empty. */
        pdr_kv_count(3);
        x->error_cause = "kv_too_large";
        pdr__pd_fail_response(
            x, 400, "invalid_request_error",
            "the request's KV cache need (prompt and output tokens) exceeds the whole KV cache of "
            "every decode worker (kv_admission)",
            0);
        return 0;
    }
    uint64_t now = pdr_now_ns();
    if (x->kv.admit_deadline_ns == 0) {
        uint64_t ms = (uint64_t)x->conf->kv_admission.wait_ms;
        if (ms > (uint64_t)x->to.first_byte_ms)
            ms = (uint64_t)x->to.first_byte_ms;
        x->kv.admit_deadline_ns = now + ms * 1000000u;
    }
    if (now < x->kv.admit_deadline_ns) {
        x->kv.admit_waited = 1;
        x->armed_ns = 0;
        pdr__pd_kick_cancel(x);
        uv_timer_start(&x->timer, on_admit_retry, ADMIT_POLL_MS, 0);
        return 0;
    }
    pdr_kv_count(3);
    x->error_cause = "kv_capacity";
    pdr__pd_fail_response(x, 503, "service_unavailable",
                          "no decode worker has room for the request's KV cache (kv_admission); retry later",
                          1);
    return 0;
}

/* The pair-aware breaker (breaker.h): when the picked pair's link is open, another decode for the prefill,
 * else another prefill with a decode of its own, is picked (BREAKER_MAX_PICKS of each at most, avoiding the
 * workers that failed this request). When every pairing tried is open, the least recently failed one goes:
 * the breaker alone never refuses a request. */
#define BREAKER_MAX_PICKS 8
static int uid_in(const uint64_t *a, size_t n, uint64_t uid)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] == uid)
            return 1;
    return 0;
}

void pdr__pd_breaker_pick(pd_req_t *x, const char *text, size_t tlen, const pdr_prompt_tokens_t *tok)
{
    uint64_t last;
    if (!x->conf->breaker.enabled || x->at.pw == NULL || x->at.dw == NULL ||
        pdr_links_admit(x->at.pw, x->at.dw, 1, &last))
        return;
    pdr_breaker_count_avoided();
    pdr_pool_t *pool = &x->r->pool;
    pdr_worker_t *bp = x->at.pw, *bd = x->at.dw; /* the least recently failed pairing seen (owned) */
    pdr_worker_t *p = pdr_worker_ref(x->at.pw);  /* the prefill whose decodes are tried (owned) */
    x->at.pw = x->at.dw = NULL;
    uint64_t pav[PDR_MAX_TRIED + BREAKER_MAX_PICKS], dav[PDR_MAX_TRIED + BREAKER_MAX_PICKS + 1];
    size_t np = x->n_tried[PDR_ROLE_PREFILL];
    memcpy(pav, x->tried[PDR_ROLE_PREFILL], np * sizeof(pav[0]));
    pdr_pick_filter_t pf, df; /* compatible pairs only (compat.enabled) */
    const pdr_pick_filter_t *pfp = pdr__pd_pick_filter(x, NULL, &pf);
    for (int i = 0; i < BREAKER_MAX_PICKS && p != NULL; i++) {
        size_t nd = x->n_tried[PDR_ROLE_DECODE];
        memcpy(dav, x->tried[PDR_ROLE_DECODE], nd * sizeof(dav[0]));
        if (p == bp)
            dav[nd++] = bd->uid;
        for (int j = 0; j < BREAKER_MAX_PICKS; j++) {
            pdr_worker_t *d = pdr_pool_pick_filtered(pool, x->pool, PDR_ROLE_DECODE, dav, nd, text, tlen, tok,
                                                     pdr__pd_pick_filter(x, p, &df));
            if (d == NULL || uid_in(dav, nd, d->uid)) {
                pdr_worker_unref(d);
                break;
            }
            uint64_t lf;
            if (pdr_links_admit(p, d, 1, &lf)) {
                pdr_worker_unref(bp);
                pdr_worker_unref(bd);
                x->at.pw = p;
                x->at.dw = d;
                return;
            }
            if (lf < last) {
                pdr_worker_unref(bp);
                pdr_worker_unref(bd);
                bp = pdr_worker_ref(p);
                bd = d;
                last = lf;
            } else {
                pdr_worker_unref(d);
            }
            dav[nd++] = d->uid;
        }
        pav[np++] = p->uid;
        pdr_worker_unref(p);
        p = pdr_pool_pick_filtered(pool, x->pool, PDR_ROLE_PREFILL, pav, np, text, tlen, tok, pfp);
        if (p != NULL && uid_in(pav, np, p->uid)) {
            pdr_worker_unref(p);
            p = NULL;
        }
    }
    pdr_worker_unref(p);
    pdr_breaker_count_all_open();
    (void)pdr_links_admit(bp, bd, 1, NULL); /* a half-open link's probe, if it is free */
    pdr_warn("request %s: every pairing tried has its breaker open: prefill %s -> decode %s (the least "
             "recently failed) is used",
             x->request_id, bp->target, bd->target);
    x->at.pw = bp;
    x->at.dw = bd;
}

/* ---- compatible pairs (compat.enabled, router/workers/identity.h) ---- */

/* The filter of a pick of the role (0 prefill, 1 decode or the worker that answers a solo attempt). */
static const pdr_pick_filter_t *affinity_filter(pd_req_t *x, int role, pdr_pick_filter_t *f)
{
    const pdr_config_t *c = x->conf;
    if (c->affinity.mode == PDR_AFFINITY_OFF)
        return NULL;
    f->key = 0;
    f->unknown_ok = 1; /* compat leaves nothing out */
    f->affinity = c->affinity.mode;
    f->has_session = x->has_session;
    f->session = x->session;
    f->max_load_ratio = c->affinity.max_load_ratio;
    f->outcome = &x->affinity_outcome[role];
    return f;
}

const pdr_pick_filter_t *pdr__pd_affinity_filter(pd_req_t *x, pdr_pick_filter_t *f)
{
    return affinity_filter(x, 1, f);
}

const pdr_pick_filter_t *pdr__pd_pick_filter(pd_req_t *x, const pdr_worker_t *partner, pdr_pick_filter_t *f)
{
    int role = partner != NULL; /* a prefill's pick has no partner */
    if (!x->conf->compat.enabled || !x->at.ops->pair)
        return affinity_filter(x, role, f);
    const pdr_pick_filter_t *a = affinity_filter(x, role, f); /* f's affinity, with compat open */
    f->affinity = a != NULL ? f->affinity : PDR_AFFINITY_OFF;
    f->unknown_ok = x->conf->compat.unknown == PDR_COMPAT_UNKNOWN_ALLOW;
    f->key = partner != NULL ? pdr_worker_compat_key(partner) : 0;
    if (partner != NULL && f->key == 0 && !f->unknown_ok)
        f->key = PDR_COMPAT_KEY_NONE; /* a partner of unknown identity pairs with nothing */
    return partner == NULL && f->unknown_ok && a == NULL ? NULL
                                                         : f; /* a prefill, unknown ones allowed: any */
}

void pdr__pd_session_body(pd_req_t *x)
{
    const pdr_jmember_t *sp = pdr_jfind(x->pr.m, x->pr.n, "session_params");
    if (sp == NULL || sp->v.type != PDR_JT_OBJECT)
        return;
    size_t pos = 0;
    pdr_jmember_t m;
    while (pdr_jobject_next(&sp->v, &pos, &m)) {
        if (!pdr_jmember_key_is(&m, "id"))
            continue;
        /* A string's bytes between its quotes, as sent (escapes not decoded), or an integer's digits. */
        int str = m.v.type == PDR_JT_STRING;
        if ((str || m.v.type == PDR_JT_INT) && m.v.len > (size_t)(str ? 2 : 0)) {
            x->has_session = 1;
            x->session = pdr_affinity_key(m.v.p + str, m.v.len - (size_t)(2 * str));
        }
        return;
    }
}

void pdr__pd_session_key(pd_req_t *x, const h2o_req_t *req)
{
    x->affinity_outcome[0] = x->affinity_outcome[1] = -1;
    const char *s = x->conf->affinity.headers; /* validated: names separated by spaces or commas */
    while (*s != '\0') {
        if (*s == ' ' || *s == ',') {
            s++;
            continue;
        }
        size_t len = strcspn(s, " ,");
        ssize_t i = h2o_find_header_by_str(&req->headers, s, len, -1);
        if (i >= 0 && req->headers.entries[i].value.len > 0) {
            x->has_session = 1;
            x->session =
                pdr_affinity_key(req->headers.entries[i].value.base, req->headers.entries[i].value.len);
            return;
        }
        s += len;
    }
}

/* The first prefill picked has no compatible decode: other prefills (COMPAT_MAX_PICKS at most, avoiding
 * the ones tried) each with a decode of its own key. Returns 1 with the pair in x->at, else 0 (x->at.pw
 * keeps the first prefill, x->at.dw NULL). */
#define COMPAT_MAX_PICKS 8
int pdr__pd_compat_repick(pd_req_t *x, const char *text, size_t tlen, const pdr_prompt_tokens_t *tok,
                          const uint64_t *davoid, size_t dn)
{
    pdr_pool_t *pool = &x->r->pool;
    uint64_t pav[PDR_MAX_TRIED + COMPAT_MAX_PICKS + 1];
    size_t np = x->n_tried[PDR_ROLE_PREFILL];
    memcpy(pav, x->tried[PDR_ROLE_PREFILL], np * sizeof(pav[0]));
    pav[np++] = x->at.pw->uid;
    pdr_pick_filter_t pf, df;
    const pdr_pick_filter_t *pfp = pdr__pd_pick_filter(x, NULL, &pf);
    for (int i = 0; i < COMPAT_MAX_PICKS; i++) {
        pdr_worker_t *p =
            pdr_pool_pick_filtered(pool, x->pool, PDR_ROLE_PREFILL, pav, np, text, tlen, tok, pfp);
        if (p == NULL || uid_in(pav, np, p->uid)) {
            pdr_worker_unref(p);
            break;
        }
        pav[np++] = p->uid;
        pdr_worker_t *d = pdr_pool_pick_filtered(pool, x->pool, PDR_ROLE_DECODE, davoid, dn, text, tlen, tok,
                                                 pdr__pd_pick_filter(x, p, &df));
        if (d != NULL) {
            pdr_compat_count(x->pool, PDR_COMPAT_REPICKED);
            pdr_worker_unref(x->at.pw);
            x->at.pw = p;
            x->at.dw = d;
            return 1;
        }
        pdr_worker_unref(p);
    }
    return 0;
}

/* Why the prefill x->at.pw has no decode: its identity against the first serving decode of the pool. */
void pdr__pd_compat_reason(pd_req_t *x, char *msg, size_t cap)
{
    pdr_pool_t *pool = &x->r->pool;
    pdr_identity_t pid, did;
    char perr[160], why[256] = "";
    uint64_t pk = pdr_pool_identity(pool, x->at.pw, &pid, perr, sizeof(perr));
    pdr_worker_t **ws;
    size_t n = pdr_pool_snapshot(pool, PDR_ROLE_DECODE, &ws);
    for (size_t i = 0; i < n && why[0] == '\0'; i++) {
        pdr_worker_t *d = ws[i];
        if ((x->pool != NULL && strcmp(d->pool, x->pool) != 0) || !pdr_worker_serving(d))
            continue;
        uint64_t dk = pdr_pool_identity(pool, d, &did, NULL, 0);
        if (pk == 0)
            snprintf(why, sizeof(why), "its identity is unknown (%s) and compat.unknown is refuse",
                     perr[0] ? perr : "not read yet");
        else if (dk == 0)
            snprintf(why, sizeof(why), "decode %s's identity is unknown and compat.unknown is refuse", d->id);
        else if (!pdr_identity_diff(&pid, &did, why, sizeof(why)))
            snprintf(why, sizeof(why), "identities changed while picking");
    }
    pdr_pool_release(ws, n);
    snprintf(msg, cap, "no decode compatible with prefill %s (%s) in pool %s: %s", x->at.pw->id,
             x->at.pw->target, x->pool != NULL ? x->pool : "default", why[0] ? why : "no serving decode");
}
