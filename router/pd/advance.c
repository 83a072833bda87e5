/*
 * The request's decision point, called after every event of its legs, timer and client: which failure
 * fails the attempt and whose it is, when to wait a little for the other leg's own failure, and when the
 * client's response starts. It acts only on the facts the callbacks recorded. Loop thread of the request.
 */
#include "pd_internal.h"

/* 200: how long a decode's failure waits for the outstanding prefill leg's own failure (a reset on
 * loopback or a LAN arrives within a few ms of the decode's failed KV fetch; 200 ms leaves room for a
 * loaded host). */
#define PDR_PREFILL_DEATH_WINDOW_MS 200
/* 50: how long a prefill's 5xx waits for the outstanding decode leg's own failure (a decode killed while
 * it pulled KV: its reset reached the router 4 ms after the prefill's 500 in the fault suite's
 * kv_decode_killed, on two loaded cores). Shorter than the prefill's window: every prefill 5xx with the
 * decode still waiting pays it before its retry. */
#define PDR_DECODE_DEATH_WINDOW_MS 50

/* The decode's answer goes to the client from its first body byte (pd.relay first_byte), not after the
 * prefill's answer. The logprob merge needs the prefill's answer first. */
static int relay_first_byte(const pd_req_t *x)
{
    return x->mode == MODE_PD && x->at.ops->relay_first_byte && x->conf->pd.relay == PDR_RELAY_FIRST_BYTE &&
           !x->at.merge;
}

/* Decides what happens next from the facts the callbacks recorded. Called after every event. */
void pdr__pd_advance(pd_req_t *x)
{
    if (x->req == NULL || x->stopped || x->state == PD_RETRY_WAIT) /* no attempt runs */
        return;
    if (pd_started(x)) {
        pdr__pd_send_final_or_more(x);
        return;
    }
    if (x->mode == MODE_MODELS) {
        if (!x->at.d_done)
            return;
        if (x->at.d_err != 0 || x->dleg.status == 0) {
            pdr__pd_fail_response(x, 502, "upstream_error", "decode worker failed to answer /v1/models", 0);
            return;
        }
        pdr__pd_start_client_response(x);
        pdr__pd_send_final_or_more(x);
        return;
    }
    if (x->rl.merge_overflow) {
        x->t->m.merge_too_large_total++;
        x->error_cause = "merge_too_large";
        pdr__pd_fail_response(
            x, 502, "upstream_error",
            "the decode's answer exceeds limits.max_merge_bytes (the logprob merge holds it whole)", 0);
        return;
    }
    /* Cancelled by the router itself (lifecycle.drain_timeout_ms ran out): not the workers' fault. */
    if ((x->at.p_done && x->at.p_err == PDR_ECANCELED) || (x->at.d_done && x->at.d_err == PDR_ECANCELED)) {
        x->error_cause = "shutdown_cancelled";
        pdr__pd_fail_response(x, 503, "service_unavailable",
                              "the router is shutting down: request cancelled at lifecycle.drain_timeout_ms",
                              1);
        return;
    }
    /* The router itself ran out of descriptors or memory for a leg: no worker is at fault, and a retry now
     * would fail the same way. */
    if ((x->at.p_done && x->at.p_err == PDR_ENOMEM) || (x->at.d_done && x->at.d_err == PDR_ENOMEM)) {
        x->error_cause = "router_out_of_resources";
        pdr__pd_fail_response(x, 503, "service_unavailable",
                              "the router is out of file descriptors or memory for a worker connection", 1);
        return;
    }
    /* Prefill failures before the response starts: retry on a new pair. */
    if (x->at.p_done && x->at.p_err != 0) {
        pdr__pd_attempt_failed(x, PDR_ROLE_PREFILL, pdr__pd_cause_of(x->at.p_err),
                               pdr__pd_leg_failure_status(x->pleg.status, x->at.p_err),
                               pdr_leg_strerror(&x->pleg, x->at.p_err));
        return;
    }
    /* The prefill answered a server error while the decode leg is outstanding (the mirror of the case
     * below): a prefill whose KV offer failed because the decode died answers its 5xx before the decode
     * leg's reset arrives, or just after it. A decode already known dead is blamed at once; a decode leg
     * that broke is the decode's failure (below), whichever came first; otherwise the decode leg has
     * PDR_DECODE_DEATH_WINDOW_MS to break before the prefill is blamed. A decode that answered, even
     * badly, is alive: the prefill's 5xx is then its own. */
    int d_broke = x->at.d_done && x->at.d_err != 0 && x->dleg.status == 0;
    if (x->at.p_done && x->pleg.status >= 500 && x->at.d_running && !x->dleg.got_headers &&
        x->at.dw != NULL) {
        if (!pdr_worker_healthy(x->at.dw)) {
            pdr__pd_attempt_failed(x, PDR_ROLE_DECODE, PDR_CAUSE_RESET, 503,
                                   "the decode is down (the prefill's KV offer to it failed)");
            return;
        }
        uint64_t now = pdr_now_ns();
        if (x->at.p_failed_ns == 0)
            x->at.p_failed_ns = now;
        if (now < x->at.p_failed_ns + PDR_DECODE_DEATH_WINDOW_MS * 1000000ull) {
            x->at.recheck = 1;
            return;
        }
    }
    if (x->at.p_done && x->pleg.status >= 500 && !d_broke) {
        pdr__pd_attempt_failed(x, PDR_ROLE_PREFILL, PDR_CAUSE_STATUS_5XX, 502,
                               "prefill answered a server error");
        return;
    }
    const char *unusable =
        x->at.p_done && x->at.ops->prefill_unusable ? x->at.ops->prefill_unusable(x) : NULL;
    if (unusable != NULL) {
        pdr__pd_attempt_failed(x, PDR_ROLE_PREFILL, PDR_CAUSE_OTHER, 502, unusable);
        return;
    }
    /* The decode failed while the prefill leg is still connecting: the decode's failure may come from the
     * prefill's being unreachable (its KV bootstrap failed), so the prefill's connect outcome decides
     * first; it is polled every millisecond (bounded by timeouts.connect_ms). */
    int d_failed = (x->at.d_done && (x->at.d_err != 0 || x->dleg.status == 0)) ||
                   (x->dleg.got_headers && x->dleg.status >= 500);
    if (x->at.p_running && pdr_leg_connecting(&x->pleg) && d_failed) {
        x->at.recheck = 1; /* next_deadline: 1 ms */
        return;
    }
    /* The decode failed while the prefill leg is outstanding: a decode whose KV fetch failed because the
     * prefill died answers its 5xx before the prefill leg's reset arrives. A prefill already known dead
     * answers 503 at once; otherwise its leg has PDR_PREFILL_DEATH_WINDOW_MS to fail (then it is the
     * prefill's 503 above) before the decode is blamed. */
    /* A decode whose connection was refused never had the request: no dead prefill explains that, and it is
     * blamed at once (it is down, or not listening yet after a restart). */
    int d_refused = x->at.d_done && x->at.d_err == PDR_ECONNREFUSED;
    if (x->at.p_running && d_failed && x->at.pw != NULL && !d_refused) {
        if (!pdr_worker_healthy(x->at.pw)) {
            pdr__pd_attempt_failed(x, PDR_ROLE_PREFILL, PDR_CAUSE_RESET, 503,
                                   "the prefill is down (the decode's KV fetch from it failed)");
            return;
        }
        uint64_t now = pdr_now_ns();
        if (x->at.d_failed_ns == 0)
            x->at.d_failed_ns = now;
        if (now < x->at.d_failed_ns + PDR_PREFILL_DEATH_WINDOW_MS * 1000000ull) {
            x->at.recheck = 1;
            return;
        }
    }
    /* protocol pdshim: a worker that refuses the router's own ticket is misconfigured (another
     * ticket.key_file), not the client's fault: 502, and the worker avoided by the retry. */
    if (x->at.ops->tickets &&
        ((x->at.p_done && x->pleg.status == 403) || (x->dleg.got_headers && x->dleg.status == 403))) {
        int role = x->at.p_done && x->pleg.status == 403 ? PDR_ROLE_PREFILL : PDR_ROLE_DECODE;
        x->t->m.tickets_refused_total++;
        x->error_cause = "ticket_refused";
        pdr__pd_attempt_failed(
            x, role, PDR_CAUSE_OTHER, 502,
            "refused the router's ticket (403): check that ticket.key_file is the same on the "
            "router and the worker");
        return;
    }
    if (x->at.d_done && x->at.d_err != 0) {
        pdr__pd_attempt_failed(x, PDR_ROLE_DECODE, pdr__pd_cause_of(x->at.d_err),
                               pdr__pd_leg_failure_status(x->dleg.status, x->at.d_err),
                               pdr_leg_strerror(&x->dleg, x->at.d_err));
        return;
    }
    if (x->dleg.got_headers && x->dleg.status >= 500) {
        pdr__pd_attempt_failed(x, PDR_ROLE_DECODE, PDR_CAUSE_STATUS_5XX, 502,
                               "decode answered a server error");
        return;
    }
    if (x->at.d_done && x->dleg.status == 0) {
        pdr__pd_attempt_failed(x, PDR_ROLE_DECODE, PDR_CAUSE_OTHER, 502, "decode answered nothing");
        return;
    }
    /* A client error from the prefill is the client's to see (the decode cannot proceed either); a
     * migration's stream ends with it as an error event. */
    if (x->at.p_done && x->pleg.status >= 400 && x->resuming) {
        char msg[400];
        snprintf(msg, sizeof(msg), "the stream could not go on: the new prefill %s answered %d",
                 x->at.pw ? x->at.pw->target : "-", (int)x->pleg.status);
        pdr__pd_resume_failed(x, 502, msg);
        return;
    }
    if (x->at.p_done && x->pleg.status >= 400) {
        pdr__pd_cancel_legs(x);
        x->status = (int)x->pleg.status;
        pdr__pd_mark_started(x, 1);
        pd_set_state(x, PD_ANSWERED);
        h2o_req_t *req = x->req;
        req->res.status = x->status;
        req->res.reason = pdr_http_reason(x->status);
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
                       H2O_STRLIT("application/json"));
        req->res.content_length = x->pbody.len;
        x->bytes_out += x->pbody.len;
        h2o_send_inline(req, x->pbody.p ? x->pbody.p : "", x->pbody.len);
        return;
    }
    /* A decode client error: relay it as soon as it is complete; the prefill is no longer needed. */
    int decode_4xx = x->dleg.got_headers && x->dleg.status >= 400;
    /* pd.relay first_byte: the decode's first body byte (or its end) starts the response, with the
     * prefill's answer still to come. Until then a prefill failure above retries the whole request. */
    int first_byte = relay_first_byte(x) && x->dleg.got_headers && (x->rl.pending.len > 0 || x->at.d_done);
    if (!decode_4xx && !first_byte && !(x->at.p_done && x->dleg.got_headers) &&
        !(x->at.p_done && x->at.d_done))
        return;
    if (!decode_4xx && pdr__pd_whole_answer(x) && !x->at.d_done)
        return;
    if (decode_4xx && x->at.p_running) {
        pdr_leg_cancel(&x->pleg);
        pdr__pd_release_leg(x, 1);
    }
    if (x->at.merge && x->at.p_done && x->pbody.len > 0 && !x->at.p_truncated) {
        size_t dl;
        const char *d = pdr_sse_first_data(x->pbody.p, x->pbody.len, &dl);
        x->rl.p_json = json_loadb(d ? d : x->pbody.p, d ? dl : x->pbody.len, 0, NULL);
    }
    /* A whole answer is merged before its head, so that a merged answer too large to hold is a clean 502. */
    int rc = !decode_4xx && pdr__pd_whole_answer(x) ? pdr__pd_merge_whole_answer(x) : 0;
    if (rc != 0) {
        int big = rc == PDR_ETOOBIG;
        if (big)
            x->t->m.merge_too_large_total++;
        x->error_cause = big ? "merge_too_large" : "router_out_of_resources";
        if (big)
            pdr__pd_fail_response(x, 502, "upstream_error",
                                  "the decode's answer with the prefill's logprobs merged in exceeds "
                                  "limits.max_merge_bytes (the logprob merge holds it whole)",
                                  0);
        else
            pdr__pd_fail_response(x, 503, "service_unavailable",
                                  "the router ran out of memory for the logprob merge", 1);
        return;
    }
    /* No attempt follows: what only attempts need goes now, not at the end of a long stream. */
    pdr_buf_free(&x->pbody);
    pdr_pdreq_clear(&x->pr);
    if (x->resuming) { /* a migration's first byte: the client's stream goes on */
        pdr__pd_resume_response(x);
        return;
    }
    pdr__pd_start_client_response(x);
    pdr__pd_send_final_or_more(x);
}
