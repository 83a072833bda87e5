/*
 * Starting an attempt: the attempt's state reset, its pair picked, then its legs: the /v1/models leg, a
 * solo attempt's one leg, protocol vllm's prefill, or both sglang legs at once with fresh rooms (each
 * owned in the shims' table for their reports) and, for protocol pdshim, a signed ticket per room.
 * Loop thread of the request.
 */
#include "pd_internal.h"

/* The header lines of a leg to w: the request's (pdr_fwd_leg), and for protocol vllm with w one rank of a
 * data-parallel worker "X-data-parallel-rank: R" (vLLM's API server hands the request to that rank's
 * engine). sglang takes the rank in the body instead (pdr_pdreq_build_body_rank). */
const char *const *pdr__pd_leg_headers(pd_req_t *x, const pdr_worker_t *w)
{
    const char *const *base = pdr_fwd_leg(&x->fwd);
    if (!x->vllm || w == NULL || w->dp_rank < 0)
        return base;
    size_t k = 0;
    for (; base[k] != NULL && k < 2; k++)
        x->rank_hdrs[k] = base[k];
    snprintf(x->rank_line, sizeof(x->rank_line), "X-data-parallel-rank: %d", w->dp_rank);
    x->rank_hdrs[k++] = x->rank_line;
    x->rank_hdrs[k] = NULL;
    return x->rank_hdrs;
}

/* sglang: the room of a prefill rank. A prefill with dp_size N sends a request to rank room % N unless the
 * request names one ("follow_bootstrap_room", its default in PD mode), and a decode finds the prefill rank
 * that holds the KV the same way, so the room is made to agree with the rank the router chose: its value
 * modulo N is the rank (the rest of it stays random). */
static uint64_t room_for_rank(uint64_t room, const pdr_worker_t *pw)
{
    if (pw == NULL || pw->dp_rank < 0)
        return room;
    uint64_t n = (uint64_t)pw->conf.dp_size, r = room - room % n + (uint64_t)pw->dp_rank;
    return r > ((1ull << 63) - 1) ? r - n : r;
}

/* A solo attempt: one leg, the client's body without any PD field, to the worker that runs it all. The
 * prefill counts as done, so pdr__pd_advance() treats the leg as a decode whose prefill succeeded. */
static void start_solo(pd_req_t *x)
{
    free(x->body);
    x->body = pdr_pdreq_build_plain(&x->pr, x->vllm ? -1 : x->at.dw->dp_rank, &x->body_len);
    if (x->body == NULL) {
        pdr__pd_fail_response(x, 503, "service_unavailable", "out of memory", 1);
        return;
    }
    memset(&x->pleg, 0, sizeof(x->pleg));
    x->at.p_done = 1;
    char url[512];
    static const char *paths[] = {"/generate", "/v1/completions", "/v1/chat/completions"};
    pdr_join2(url, sizeof(url), x->at.dw->conf.url, paths[x->route]);
    if (pdr_leg_start(&x->dleg, x->t->multi, url, x->body, x->body_len, pdr__pd_leg_headers(x, x->at.dw),
                      x->to.connect_ms, 0, &pdr__pd_decode_cbs, x) != 0) {
        pdr__pd_fail_response(x, 503, "service_unavailable", "cannot start upstream requests", 1);
        return;
    }
    memcpy(x->at.d_span, x->fwd.last_span, 8);
    x->ph.solo = 1;
    x->at.d_running = 1;
    pdr_worker_track(x->at.dw, 1);
    pdr__pd_arm_timer(x);
}

/* The attempt's rooms but the first, taken back from the shims' table (the first one's events go to the
 * access log). */
void pdr__pd_take_other_rooms(pd_req_t *x)
{
    char skip[8];
    for (size_t i = 1; i < x->n_rooms; i++)
        pdr_shim_room_take(x->r, x->rooms[i], skip, sizeof(skip));
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
    pdr_kv_release(&x->kv.hold);
    pdr__pd_forget_room(x);
    pdr_worker_unref(x->at.pw);
    pdr_worker_unref(x->at.dw);
    /* A fresh attempt: no leg runs, no deadline is set, no worker is held. */
    x->at = (pd_attempt_t){.merge = x->merge_wanted};
    x->pbody.len = 0;
    x->rl.pending.len = 0;
    size_t tlen = 0;
    const char *text = x->mode == MODE_PD ? pdr__pd_routing_text(&x->pr, &tlen) : NULL;
    /* precise_prefix matches token ids: only read them when some pool uses it (the index exists). */
    pdr_prompt_tokens_t tok = {NULL, 0};
    if (text != NULL && r->pool.kvindex != NULL) {
        struct pdr_tokenizer *tk = pdr_router_tokenizer(r);
        pdr_request_token_ids_or(&x->pr, tk, &tok, PDR_FB_TOKENIZE_ROUTING);
        pdr_tokenizer_free(tk);
    }
    if (x->mode == MODE_PD && pdr__pd_disagg_possible(x)) {
        pdr__pd_decide_disaggregation(x, text, tlen, &tok);
    } else if (x->mode == MODE_PD) {
        uint64_t avoid[PDR_MAX_AVOID];
        size_t n = pdr_admit_avoid(x->conf, &r->pool, x->pool, PDR_ROLE_PREFILL, x->tried[PDR_ROLE_PREFILL],
                                   x->n_tried[PDR_ROLE_PREFILL], avoid, PDR_MAX_AVOID);
        x->at.pw = pdr_pool_pick_prompt(&r->pool, x->pool, PDR_ROLE_PREFILL, avoid, n, text, tlen, &tok);
    }
    /* The decode; or, for a solo sglang attempt, the regular worker that runs it all (in dw: it is the
     * worker that answers, blamed and avoided as a decode would be). Workers at
     * limits.max_inflight_per_worker are avoided as failed ones are. */
    pdr_role_t drole = x->at.solo && !x->vllm ? PDR_ROLE_REGULAR : PDR_ROLE_DECODE;
    uint64_t davoid[PDR_MAX_AVOID];
    size_t dn = pdr_admit_avoid(x->conf, &r->pool, x->pool, drole, x->tried[PDR_ROLE_DECODE],
                                x->n_tried[PDR_ROLE_DECODE], davoid, PDR_MAX_AVOID);
    x->at.dw = pdr_pool_pick_prompt(&r->pool, x->pool, drole, davoid, dn, text, tlen, &tok);
    if (x->mode == MODE_PD && !x->at.solo)
        pdr__pd_breaker_pick(x, text, tlen, &tok);
    free(tok.ids);
    if (x->mode == MODE_PD && x->at.dw != NULL && x->at.pw != NULL && !x->at.solo &&
        !pdr__pd_admit_decode(x, text, tlen))
        return;
    if ((x->mode == MODE_PD && x->at.pw == NULL && !x->at.solo) || x->at.dw == NULL) {
        if (x->attempt > 0) {
            /* The pair that failed was the last healthy one: answer with that failure. */
            pdr__pd_fail_last(x);
            return;
        }
        pdr_role_t role =
            x->mode == MODE_PD && x->at.pw == NULL && !x->at.solo ? PDR_ROLE_PREFILL : PDR_ROLE_DECODE;
        x->t->m.no_worker_total[role]++;
        pdr_role_t named = x->at.solo && !x->vllm ? PDR_ROLE_REGULAR : role;
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
    x->at.p_epoch = x->at.pw != NULL ? __atomic_load_n(&x->at.pw->load.epoch, __ATOMIC_RELAXED) : 0;
    x->at.d_epoch = __atomic_load_n(&x->at.dw->load.epoch, __ATOMIC_RELAXED);
    x->at.t0_ns = pdr_now_ns();
    pdr_phase_attempt(&x->ph);
    x->ph.sent_us = x->at.t0_ns / 1000; /* the pair is picked; its first leg goes out now */
    x->at.first_byte_deadline_ns = x->at.t0_ns + (uint64_t)x->to.first_byte_ms * 1000000u;
    x->at.kv_deadline_ns = x->at.t0_ns + x->kv.ms * 1000000u;
    char url[512];
    if (x->mode == MODE_MODELS) {
        snprintf(url, sizeof(url), "%s/v1/models", x->at.dw->conf.url);
        if (pdr_leg_start(&x->dleg, x->t->multi, url, NULL, 0, pdr_fwd_leg(&x->fwd), x->to.connect_ms, 0,
                          &pdr__pd_decode_cbs, x) != 0) {
            pdr__pd_fail_response(x, 503, "service_unavailable", "out of memory", 1);
            return;
        }
        x->at.d_running = 1;
        pdr_worker_track(x->at.dw, 1);
        pdr__pd_arm_timer(x);
        return;
    }
    if (x->at.solo) {
        start_solo(x);
        return;
    }
    if (x->vllm) {
        pdr__pd_vllm_start_prefill(x);
        return;
    }
    /* A fresh CSPRNG room per item and per attempt; the same rooms go to both legs. */
    for (size_t i = 0; i < x->n_rooms; i++)
        x->rooms[i] = room_for_rank(pdr_random_room(), x->at.pw);
    for (size_t i = 0; i < x->n_rooms; i++)
        pdr_shim_room_own(r, x->rooms[i], x->t, x); /* done and failed come back on this loop */
    x->room_open = 1;
    free(x->body);
    free(x->dbody);
    x->dbody = NULL;
    /* protocol pdshim: a signed ticket per room (tickets.h), the same in both legs. */
    char **tickets = NULL;
    if (x->protocol == PDR_PROTO_PDSHIM) {
        char terr[256];
        int oom;
        tickets =
            pdr_tickets_sign(x->conf, x->at.pw, x->at.dw, x->rooms, x->n_rooms, &oom, terr, sizeof(terr));
        if (tickets == NULL) {
            x->error_cause = oom ? "out_of_memory" : "ticket";
            pdr__pd_fail_response(x, oom ? 503 : 500, oom ? "service_unavailable" : "internal_error", terr,
                                  oom);
            return;
        }
        x->t->m.tickets_signed_total += x->n_rooms;
    }
    const char *const *tk = (const char *const *)tickets;
    x->body = pdr_pdreq_build_body_ticket(&x->pr, x->at.pw->bootstrap_host, x->at.pw->conf.bootstrap_port,
                                          x->rooms, x->at.pw->dp_rank, tk, &x->body_len);
    /* Each leg names its own worker's rank: the decode's rank is its own choice (it finds the prefill's
     * rank from the room). Without ranks both legs share one body. */
    if (x->body != NULL && (x->at.pw->dp_rank >= 0 || x->at.dw->dp_rank >= 0)) {
        x->dbody =
            pdr_pdreq_build_body_ticket(&x->pr, x->at.pw->bootstrap_host, x->at.pw->conf.bootstrap_port,
                                        x->rooms, x->at.dw->dp_rank, tk, &x->dbody_len);
        if (x->dbody == NULL) {
            free(x->body);
            x->body = NULL;
        }
    }
    free(tickets);
    if (x->body == NULL) {
        pdr__pd_fail_response(x, 503, "service_unavailable", "out of memory", 1);
        return;
    }
    static const char *paths[] = {"/generate", "/v1/completions", "/v1/chat/completions"};
    pdr_join2(url, sizeof(url), x->at.pw->conf.url, paths[x->route]);
    int rc = pdr_leg_start(&x->pleg, x->t->multi, url, x->body, x->body_len, pdr_fwd_leg(&x->fwd),
                           x->to.connect_ms, 0, &pdr__pd_prefill_cbs, x);
    memcpy(x->at.p_span, x->fwd.last_span, 8);
    if (rc == 0) {
        x->at.p_running = 1;
        pdr_worker_track(x->at.pw, 1);
        pdr_join2(url, sizeof(url), x->at.dw->conf.url, paths[x->route]);
        rc = pdr_leg_start(&x->dleg, x->t->multi, url, x->dbody ? x->dbody : x->body,
                           x->dbody ? x->dbody_len : x->body_len, pdr_fwd_leg(&x->fwd), x->to.connect_ms, 0,
                           &pdr__pd_decode_cbs, x);
        memcpy(x->at.d_span, x->fwd.last_span, 8);
        if (rc == 0) {
            x->at.d_running = 1;
            pdr_worker_track(x->at.dw, 1);
        }
    }
    if (rc != 0) {
        pdr__pd_fail_response(x, 503, "service_unavailable", "cannot start upstream requests", 1);
        return;
    }
    /* Both legs are sent: the KV deadline runs. */
    x->at.kv_open = 1;
    x->kv.rooms_done = 0;
    if (x->kv.room_done != NULL)
        memset(x->kv.room_done, 0, x->n_rooms);
    memset(&x->kv.sse, 0, sizeof(x->kv.sse));
    pdr__pd_arm_timer(x);
}
