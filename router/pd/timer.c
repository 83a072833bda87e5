/*
 * The request's one timer: before the response, the first-byte and KV deadlines, a retry's back-off, a
 * restarted worker and an HTTP/1 client's close; after it starts, a client that takes nothing for
 * stream_idle_ms, a decode that sends nothing as long, and a prefill still unanswered at the KV deadline.
 * What the timer's callback does when one is due; when it fires next is schedule.c's, which arms only
 * deadlines acted on here. Loop thread of the request.
 */
#include "pd_internal.h"

/* Ends the response of a client that has not taken a send for stream_idle_ms (nginx's send_timeout): both
 * legs are cancelled and the client's connection is reset, which fails the write in flight, so h2o closes
 * the connection and disposes of the request. Over HTTP/2 this ends the other streams of that connection
 * too, as nginx's send_timeout does: a client that stopped reading has stalled them all, and one that
 * withholds a single stream's flow-control window is misbehaving. */
static void cut_stalled_client(pd_req_t *x)
{
    h2o_req_t *req = x->req;
    x->t->m.client_stalled_total++;
    x->error_cause = "client_stalled";
    x->stopped = 1;
    pdr__pd_cancel_legs(x);
    pdr_warn("request %s: the client took no data for %d ms (timeouts.stream_idle_ms): connection reset",
             x->request_id, x->to.stream_idle_ms);
    h2o_socket_t *sock = req->conn->callbacks->get_socket(req->conn);
    if (sock == NULL)
        return;
    /* SO_LINGER 0: the bytes queued for a client that does not read are dropped (an RST, not a FIN
     * behind them), so the kernel does not keep them either. */
    int fd = h2o_socket_get_fd(sock);
    struct linger lg = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    shutdown(fd, SHUT_RDWR);
}

/* The role whose worker restarted (its shim reported a new instance) since the attempt began, or -1. Its
 * KV for this request is gone with the old process: waiting for it would last until a deadline. */
static int restarted_role(const pd_req_t *x)
{
    if (x->at.p_running && x->at.pw != NULL &&
        __atomic_load_n(&x->at.pw->load.epoch, __ATOMIC_RELAXED) != x->at.p_epoch)
        return PDR_ROLE_PREFILL;
    if (x->at.d_running && x->at.dw != NULL &&
        __atomic_load_n(&x->at.dw->load.epoch, __ATOMIC_RELAXED) != x->at.d_epoch)
        return PDR_ROLE_DECODE;
    return -1;
}

/* Whether an HTTP/1 client closed its connection: h2o reads nothing from it while a handler is pending
 * or while a response has no write in flight, so nothing else would tell. */
static int h1_client_closed(pd_req_t *x)
{
    if (x->req->version >= 0x200)
        return 0;
    h2o_socket_t *sock = x->req->conn->callbacks->get_socket(x->req->conn);
    char c;
    return sock != NULL && recv(h2o_socket_get_fd(sock), &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

void pdr__pd_on_timer(uv_timer_t *t)
{
    pd_req_t *x = t->data;
    x->armed_ns = 0;
    if (pdr_dlink_linked(&x->kick)) { /* the kick comes first: it would have replaced this run */
        pdr__pd_kick_cancel(x);
        pdr__pd_advance(x);
        pdr__pd_arm_timer(x);
        return;
    }
    if (x->req == NULL || x->stopped) /* stopped: both legs are cancelled already */
        return;
    uint64_t now = pdr_now_ns();
    if (x->at.recheck && !pd_started(x)) {
        x->at.recheck = 0;
        pdr__pd_advance(x);
        if (x->req == NULL || x->stopped)
            return;
    }
    if (pd_started(x) && pdr__pd_samples_progress(x) && now >= pd_progress_sample_due(x))
        pdr__pd_sample_client_progress(x, now);
    if (pd_probe_started_client(x) && h1_client_closed(x)) {
        pdr__pd_note_client_abort(x);
        x->stopped = 1;
        pdr__pd_cancel_legs(x);
        pd_set_state(x, PD_ANSWERED);
        x->end_ns = now;
        h2o_send(x->req, NULL, 0, H2O_SEND_STATE_ERROR);
        return;
    }
    if (!pd_started(x)) {
        if (h1_client_closed(x)) {
            /* HTTP/1 client closed while we wait for the workers (h2o does not read it meanwhile). */
            pdr__pd_note_client_abort(x);
            x->status = 499;
            pdr__pd_cancel_legs(x);
            x->stopped = 1;
            pdr__pd_mark_started(x, 0);
            h2o_send_error_502(x->req, "Bad Gateway", "client closed", H2O_SEND_ERROR_HTTP1_CLOSE_CONNECTION);
            return;
        }
        if (x->state == PD_RETRY_WAIT) {
            /* Waiting out a retry's back-off: no leg runs, so a shutdown's cancellation of the legs in
             * flight cannot reach the request; it is looked for here. */
            int stopping = pdr_router_shutting_down(x->r);
            if (now < x->backoff_ns && !stopping) {
                pdr__pd_arm_timer(x);
                return;
            }
            x->backoff_ns = 0;
            if (stopping)
                pdr__pd_fail_last(x);
            else
                pdr__pd_start_attempt(x);
            return;
        }
        int gone = x->mode == MODE_PD ? restarted_role(x) : -1;
        if (gone >= 0) {
            pdr__pd_attempt_failed(
                x, gone, PDR_CAUSE_RESET, 503,
                "the worker restarted (a new shim instance): its KV for this request is gone");
            return;
        }
        if (x->mode == MODE_PD && (x->at.kv_open || !x->at.p_done) && now >= x->at.kv_deadline_ns) {
            if (x->at.kv_open)
                snprintf(x->kv.msg, sizeof(x->kv.msg),
                         "the KV transfer did not finish within its deadline of %" PRIu64
                         " ms (timeouts.kv_transfer_ms)",
                         x->kv.ms);
            else
                snprintf(x->kv.msg, sizeof(x->kv.msg),
                         "the prefill did not answer within %" PRIu64
                         " ms (timeouts.kv_transfer_ms; its KV had arrived)",
                         x->kv.ms);
            pdr__pd_attempt_failed(x, x->at.ops->deadline_culprit(x), PDR_CAUSE_KV_DEADLINE, 504, x->kv.msg);
            return;
        }
        if (now >= x->at.first_byte_deadline_ns) {
            pdr__pd_attempt_failed(
                x, x->mode == MODE_PD && !x->at.p_done ? x->at.ops->deadline_culprit(x) : PDR_ROLE_DECODE,
                PDR_CAUSE_FIRST_BYTE_DEADLINE, 504, "no first byte within timeouts.first_byte_ms");
            return;
        }
    } else if (x->at.kv_open && now >= x->at.kv_deadline_ns) {
        /* The client has bytes of the answer (a stream's head), but the decode's first token has not come:
         * the KV never arrived. */
        snprintf(x->kv.msg, sizeof(x->kv.msg),
                 "the KV transfer did not finish within its deadline of %" PRIu64
                 " ms (timeouts.kv_transfer_ms)",
                 x->kv.ms);
        pdr__pd_kv_failed_in_response(x, PDR_KVC_DEADLINE, NULL, x->kv.msg);
        return;
    } else if (x->at.p_running && now >= x->at.kv_deadline_ns) {
        /* pd.relay first_byte: the prefill still has not answered; the decode's answer goes on. */
        pdr_leg_cancel(&x->pleg);
        pdr__pd_release_leg(x, 1);
        x->at.p_done = 1;
        x->at.p_err = PDR_ETIMEDOUT;
        pdr__pd_late_prefill_failure(x, PDR_CAUSE_KV_DEADLINE, "no answer within timeouts.kv_transfer_ms");
    } else if (x->send_inflight && now - pd_client_idle_since(x) >= pd_idle_ns(x)) {
        cut_stalled_client(x);
        return;
    } else if (x->at.d_running && !x->dleg.paused && now - x->last_data_ns >= pd_idle_ns(x)) {
        x->t->m.upstream_errors[PDR_ROLE_DECODE][PDR_CAUSE_TIMEOUT]++;
        pdr_leg_cancel(&x->dleg);
        pdr__pd_release_leg(x, 0);
        pdr__pd_decode_done(&x->dleg, PDR_ETIMEDOUT);
        return;
    }
    pdr__pd_arm_timer(x);
}
