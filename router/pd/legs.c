/*
 * The upstream legs of a PD request (upstream.h): their data and done callbacks, which record what
 * happened and hand over to advance(), or to the request's end of a lingering close (x->sm: request.c is
 * above this file). Their release and cancellation are release.c's. Loop thread of the request.
 */
#include "pd_internal.h"

static size_t prefill_data(pdr_leg_t *leg, const char *p, size_t n)
{
    pd_req_t *x = leg->data;
    if (!x->at.merge && !x->at.ops->keep_prefill_answer && leg->status < 400)
        return n; /* a successful answer is only needed for the logprob merge (or vLLM's kv_transfer_params)
                   */
    if (!x->at.p_truncated && pdr_buf_append(&x->pbody, p, n, PREFILL_BODY_CAP) != 0)
        x->at.p_truncated = 1; /* still read to the end; only the merge needs the body */
    return n;
}

static void prefill_done(pdr_leg_t *leg, int err)
{
    pd_req_t *x = leg->data;
    x->at.p_done = 1;
    x->at.p_err = err;
    pdr__pd_release_leg(x, 1);
    if (err == 0 && leg->status >= 200 && leg->status < 300 && x->at.ops->kv_by_prefill)
        pdr__pd_kv_arrived(x); /* an sglang prefill answers once its KV has been received */
    if (pd_started(x)) {
        /* After the decode's first byte (pd.relay first_byte), lingering included: the outcome no longer
         * changes the answer. */
        if (err == PDR_ECANCELED) {
            /* the router's own drain deadline: nobody's fault */
        } else if (err != 0) {
            pdr__pd_late_prefill_failure(x, pdr__pd_cause_of(err), pdr_strerror(err));
        } else if (leg->status >= 500 || leg->status < 200) {
            pdr__pd_late_prefill_failure(x, PDR_CAUSE_STATUS_5XX, "prefill answered a server error");
        } else if (leg->status >= 400) {
            pdr__pd_late_prefill_failure(x, PDR_CAUSE_OTHER, "prefill answered a client error");
        } else if (x->at.pw != NULL) {
            pdr_pool_report_success(&x->r->pool, x->at.pw);
            pdr_worker_note_alive(x->at.pw, pdr_now_ns());
            pdr_hist_observe_in(&x->t->m.prefill[x->mroute], PDR_BUCKETS_LLM,
                                (double)(pdr_now_ns() - x->at.t0_ns) / 1e9);
        }
        if (x->state == PD_LINGER) {
            x->sm->linger_end(x);
            return;
        }
        pdr__pd_advance(x);
        pdr__pd_arm_timer(x);
        return;
    }
    if (err == 0 && leg->status < 500 && x->at.pw != NULL) {
        pdr_pool_report_success(&x->r->pool, x->at.pw);
        pdr_worker_note_alive(x->at.pw, pdr_now_ns());
    }
    if (err == 0 && leg->status >= 200 && leg->status < 300)
        pdr_hist_observe_in(&x->t->m.prefill[x->mroute], PDR_BUCKETS_LLM,
                            (double)(pdr_now_ns() - x->at.t0_ns) / 1e9);
    if (x->at.ops->prefill_ok != NULL && err == 0 && leg->status >= 200 && leg->status < 300)
        x->at.ops->prefill_ok(x);
    pdr__pd_advance(x);
    pdr__pd_arm_timer(x);
}

static size_t decode_data(pdr_leg_t *leg, const char *p, size_t n)
{
    pd_req_t *x = leg->data;
    x->last_data_ns = pdr_now_ns();
    if (x->ph.decode_first_byte_us == 0)
        x->ph.decode_first_byte_us = x->last_data_ns / 1000;
    if (x->at.dw != NULL && leg->status < 500)
        pdr_worker_note_alive(x->at.dw, x->last_data_ns);
    if (pdr__pd_whole_answer(x)) {
        /* Held whole until it ends: past the limit the leg is aborted and the client receives a clean 502. */
        if (x->rl.pending.len + n > (uint64_t)x->conf->limits.max_merge_bytes) {
            x->rl.merge_overflow = 1;
            return 0;
        }
    } else if (x->rl.pending.len >= (leg->status >= 400 ? PREFILL_BODY_CAP : HIGH_WATER)) {
        return PDR_LEG_PAUSE; /* an error body is read whole too, within its own cap */
    }
    if (pdr_buf_append(&x->rl.pending, p, n,
                       pdr__pd_whole_answer(x) ? (size_t)x->conf->limits.max_merge_bytes
                                               : PREFILL_BODY_CAP) != 0)
        return 0; /* aborts the transfer; on_done reports it */
    x->bytes_in += n;
    /* A decode produces its first token only from the KV: a stream's first token event, or any byte of
     * another answer (it is whole by then), ends the KV deadline. */
    if (x->at.kv_open && leg->status < 400 &&
        (strncmp(leg->content_type, "text/event-stream", 17) != 0 ||
         pdr_sse_count_tokens(&x->kv.sse, p, n) > 0))
        pdr__pd_kv_arrived(x);
    if (pd_started(x)) {
        pdr__pd_send_final_or_more(x);
    } else if (x->req != NULL) {
        /* The first bytes may unblock the response; decide on the next loop turn, outside the leg's
         * data callback. */
        pdr__pd_kick(x);
    }
    return n;
}

void pdr__pd_decode_done(pdr_leg_t *leg, int err)
{
    pd_req_t *x = leg->data;
    x->at.d_done = 1;
    x->at.d_err = err;
    pdr__pd_release_leg(x, 0);
    if (pd_started(x) && err != 0 && !pd_final_sent(x)) {
        /* The stream broke after the response started (or the router cancelled it at its drain
         * deadline, which is not counted against the worker): end it visibly. The prefill leg (still
         * running with pd.relay first_byte) is no longer of use. */
        x->broken = 1;
        if (x->at.kv_open && err != PDR_ECANCELED) /* before its first token: the KV never arrived */
            pdr__pd_note_kv_failure(x, err == PDR_EPEERGONE ? PDR_KVC_PEER_GONE : PDR_KVC_DECODE_ERROR, NULL,
                                    pdr_strerror(err));
        x->at.kv_open = 0;
        if (x->at.p_running) {
            pdr_leg_cancel(&x->pleg);
            pdr__pd_release_leg(x, 1);
        }
        int moved = 0;
        if (err == PDR_ECANCELED) {
            x->error_cause = "shutdown_cancelled";
        } else {
            x->error_cause = "decode_stream_broken";
            x->t->m.upstream_errors[PDR_ROLE_DECODE][pdr__pd_cause_of(err)]++;
            moved = pdr__pd_migrate(x, pdr_leg_strerror(leg, err), 1);
        }
        if (moved == 1) { /* the stream goes on on a new pair */
            x->broken = 0;
            x->error_cause = NULL;
            pdr__pd_arm_timer(x);
            return;
        }
        if (moved == 2) { /* every token went: the stream ends normally */
            x->broken = 0;
            x->error_cause = NULL;
        } else if (x->rl.is_sse) {
            if (x->mig_armed) /* relayed in whole events: the unended one the decode left goes nowhere */
                x->rl.pending.len =
                    pdr_resume_events_end(x->rl.pending.p ? x->rl.pending.p : "", x->rl.pending.len);
            char ev[ERR_EVENT_MAX];
            int k = snprintf(
                ev, sizeof(ev),
                "data: {\"error\":{\"message\":\"decode stream ended: %s\",\"type\":\"upstream_error\","
                "\"code\":502}}\n\n",
                pdr_strerror(err));
            /* End the SSE stream normally after the error event; without memory for it, d_err stays and
             * the response is aborted. */
            if (k > 0 && (size_t)k < sizeof(ev) &&
                pdr_buf_append(&x->rl.pending, ev, (size_t)k, PENDING_CAP) == 0)
                x->at.d_err = 0;
        }
    }
    pdr__pd_advance(x);
    pdr__pd_arm_timer(x);
}

const pdr_leg_cbs_t pdr__pd_prefill_cbs = {prefill_data, prefill_done};

const pdr_leg_cbs_t pdr__pd_decode_cbs = {decode_data, pdr__pd_decode_done};
