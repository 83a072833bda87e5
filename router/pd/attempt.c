/*
 * Starting an attempt: a fresh attempt's state, its workers picked (the pair, or the one worker of a solo
 * attempt), its deadlines set, then its legs started by the attempt's table (pd_proto_ops_t). Also what
 * the tables share: a leg's header lines and the attempt's rooms in the shims' table. Loop thread of the
 * request.
 */
#include "pd_internal.h"
#include "ratelog.h"

/* The header lines of a leg to w: the request's (pdr_fwd_leg), and for protocol vllm with w one rank of a
 * data-parallel worker "X-data-parallel-rank: R" (vLLM's API server hands the request to that rank's
 * engine). sglang takes the rank in the body instead (pdr_pdreq_build_body_rank). */
const char *const *pdr__pd_leg_headers(pd_req_t *x, const pdr_worker_t *w)
{
    const char *const *base = pdr_fwd_leg(&x->fwd);
    if (!x->at.ops->rank_header || w == NULL || w->dp_rank < 0)
        return base;
    size_t k = 0;
    for (; base[k] != NULL && k < 2; k++)
        x->rank_hdrs[k] = base[k];
    snprintf(x->rank_line, sizeof(x->rank_line), "X-data-parallel-rank: %d", w->dp_rank);
    x->rank_hdrs[k++] = x->rank_line;
    x->rank_hdrs[k] = NULL;
    return x->rank_hdrs;
}

/* The shims' events for the attempt's rooms: forgotten (a retry takes new rooms). */
void pdr__pd_forget_room(pd_req_t *x)
{
    if (x->room_open) {
        char skip[8];
        pdr_shim_room_take(x->r, x->rooms[0], skip, sizeof(skip));
        pdr__pd_take_other_rooms(x);
        x->room_open = 0;
    }
}

void pdr__pd_start_attempt(pd_req_t *x)
{
    pdr_router_t *r = x->r;
    pd_set_state(x, PD_PICKING);
    pdr_kv_release(&x->kv.hold);
    pdr__pd_forget_room(x);
    pdr_worker_unref(x->at.pw);
    pdr_worker_unref(x->at.dw);
    /* A fresh attempt: no leg runs, no deadline is set, no worker is held. */
    x->at = (pd_attempt_t){.ops = x->proto, .merge = x->merge_wanted};
    /* An earlier attempt's unusable prefill answer (vLLM) says nothing of this one, a solo one included. */
    x->vl.bad = 0;
    x->pbody.len = 0;
    x->rl.pending.len = 0;
    size_t tlen = 0;
    const char *text = x->mode == MODE_PD ? pdr__pd_routing_text(&x->pr, &tlen) : NULL;
    /* Sidecar mode: the prefill the request's header names, over the policy (sidecar.c). */
    if (x->mode == MODE_PD && !pdr__pd_sidecar_pick(x, text, tlen))
        return;
    /* precise_prefix matches token ids: only read them when the request's pool uses it (the index exists),
     * with the pool's tokenizer. */
    pdr_prompt_tokens_t tok = {NULL, 0, NULL, 0};
    if (text != NULL && r->pool.kvindex != NULL && x->precise) {
        struct pdr_tokenizer *tk = pdr_router_tokenizer_for(r, x->pool);
        int fb = pdr_request_token_ids_or(&x->pr, tk, &tok, PDR_FB_TOKENIZE_ROUTING, &x->unknown_model);
        x->at.ids_fallback = fb >= 0 ? pdr_fallback_names[fb] : NULL;
        pdr_tokenizer_free(tk);
        /* The model may name a LoRA adapter, whose KV blocks are its own (kv-events.md). */
        const pdr_jmember_t *m = pdr_jfind(x->pr.m, x->pr.n, "model");
        if (m != NULL && m->v.type == PDR_JT_STRING && m->v.len >= 2) {
            tok.model = m->v.p + 1;
            tok.model_len = m->v.len - 2;
        }
    }
    pdr_pick_filter_t pf, df; /* compatible pairs only (compat.enabled, pick.c) */
    if (x->at.pw != NULL) {
        /* named by the header: disaggregated, as the endpoint picker chose */
    } else if (x->mode == MODE_PD && pdr__pd_disagg_possible(x)) {
        pdr__pd_decide_disaggregation(x, text, tlen, &tok);
    } else if (x->mode == MODE_PD) {
        uint64_t avoid[PDR_MAX_AVOID];
        size_t n = pdr_admit_avoid(x->conf, &r->pool, x->pool, PDR_ROLE_PREFILL, x->tried[PDR_ROLE_PREFILL],
                                   x->n_tried[PDR_ROLE_PREFILL], avoid, PDR_MAX_AVOID);
        pdr_pick_info_t info = {.record = 1, .tok = &tok, .filter = pdr__pd_pick_filter(x, NULL, &pf)};
        x->at.pw = pdr_pool_pick_info(&r->pool, x->pool, PDR_ROLE_PREFILL, avoid, n, text, tlen, &info);
        x->at.match_known = info.matched_known;
        x->at.match_index = info.from_index;
        x->at.matched = info.matched;
    }
    /* The decode; or, for a solo sglang attempt, the regular worker that runs it all (in dw: it is the
     * worker that answers, blamed and avoided as a decode would be). Workers at
     * limits.max_inflight_per_worker are avoided as failed ones are. */
    pdr_role_t drole = x->at.ops->answer_role;
    uint64_t davoid[PDR_MAX_AVOID];
    size_t dn = pdr_admit_avoid(x->conf, &r->pool, x->pool, drole, x->tried[PDR_ROLE_DECODE],
                                x->n_tried[PDR_ROLE_DECODE], davoid, PDR_MAX_AVOID);
    const pdr_pick_filter_t *dfp =
        x->at.pw != NULL ? pdr__pd_pick_filter(x, x->at.pw, &df) : pdr__pd_affinity_filter(x, &df);
    x->at.dw = pdr_pool_pick_filtered(&r->pool, x->pool, drole, davoid, dn, text, tlen, &tok, dfp);
    /* No decode compatible with the prefill: another prefill of a compatible pair. */
    int incompatible = x->at.pw != NULL && x->conf->compat.enabled && x->at.ops->pair && x->at.dw == NULL &&
                       pdr_pool_count_healthy_in(&r->pool, x->pool, drole) > 0 &&
                       !pdr__pd_compat_repick(x, text, tlen, &tok, davoid, dn);
    if (x->at.ops->pair)
        pdr__pd_breaker_pick(x, text, tlen, &tok);
    free(tok.ids);
    if (x->at.ops->pair && x->at.dw != NULL && x->at.pw != NULL && !pdr__pd_admit_decode(x, text, tlen))
        return;
    if (incompatible && x->at.dw == NULL && x->attempt == 0) {
        /* Every serving decode holds another KV layout: refused, never paired (its KV would be misread). */
        static pdr_ratelog_t rl = PDR_RATELOG_INIT;
        uint64_t skipped;
        pdr_compat_count(x->pool, PDR_COMPAT_INCOMPATIBLE);
        char msg[768];
        pdr__pd_compat_reason(x, msg, sizeof(msg));
        if (pdr_ratelog_take(&rl, pdr_now_ns(), 60ull * 1000000000u, &skipped))
            pdr_warn("request %s: %s (%llu more such refusals not logged)", x->request_id, msg,
                     (unsigned long long)skipped);
        x->error_cause = "incompatible_pair";
        pdr__pd_fail_response(x, 503, "service_unavailable", msg, 1);
        return;
    }
    if ((x->at.ops->pair && x->at.pw == NULL) || x->at.dw == NULL) {
        if (x->attempt > 0) {
            /* The pair that failed was the last healthy one: answer with that failure. */
            pdr__pd_fail_last(x);
            return;
        }
        pdr_role_t role = x->at.ops->pair && x->at.pw == NULL ? PDR_ROLE_PREFILL : PDR_ROLE_DECODE;
        x->t->m.no_worker_total[role]++;
        pdr_role_t named = role == PDR_ROLE_PREFILL ? role : x->at.ops->answer_role;
        char msg[128];
        if (x->conf->n_pools > 0)
            snprintf(msg, sizeof(msg), "no healthy %s worker is available in pool %s", pdr_role_name(named),
                     x->pool);
        else
            snprintf(msg, sizeof(msg), "no healthy %s worker is available", pdr_role_name(named));
        x->error_cause = "no_healthy_worker";
        pdr__pd_fail_response(x, 503, "service_unavailable", msg, 1);
        return;
    }
    if (x->at.ops->pair && x->conf->compat.enabled &&
        (pdr_worker_compat_key(x->at.pw) == 0 || pdr_worker_compat_key(x->at.dw) == 0))
        pdr_compat_count(x->pool, PDR_COMPAT_UNKNOWN_PAIRED);
    x->at.p_epoch = x->at.pw != NULL ? __atomic_load_n(&x->at.pw->load.epoch, __ATOMIC_RELAXED) : 0;
    x->at.d_epoch = __atomic_load_n(&x->at.dw->load.epoch, __ATOMIC_RELAXED);
    x->at.t0_ns = pdr_now_ns();
    pdr_phase_attempt(&x->ph);
    x->ph.sent_us = x->at.t0_ns / 1000; /* the pair is picked; its first leg goes out now */
    x->at.first_byte_deadline_ns = x->at.t0_ns + (uint64_t)x->to.first_byte_ms * 1000000u;
    x->at.kv_deadline_ns = x->at.t0_ns + x->kv.ms * 1000000u;
    pd_set_state(x, PD_LEGS);
    x->at.ops->start(x);
}
