/*
 * When the request's one timer fires next (the earliest of the deadlines that timer.c acts on, from
 * decide.c's pdr__pd_next_deadline), the HTTP/1 client's progress samples, and the kick that advances a
 * request on the next loop turn. Below the state machine: the timer's callback and the kick's advance are
 * the request's (x->sm). Loop thread of the request.
 */
#include "pd_internal.h"

/* Whether an HTTP/1 client took bytes of the response since the last sample (a steady slow reader makes
 * progress inside one long send). HTTP/2 shares the socket among streams: its progress stays per send. */
void pdr__pd_sample_client_progress(pd_req_t *x, uint64_t now)
{
    x->rl.sample_ns = now;
    h2o_socket_t *sock = x->req->conn->callbacks->get_socket(x->req->conn);
    uint64_t acked;
    if (sock == NULL || pdr_sock_bytes_acked(h2o_socket_get_fd(sock), &acked) != 0)
        return;
    if (x->rl.acked_known && acked > x->rl.acked)
        x->rl.took_ns = now;
    x->rl.acked = acked;
    x->rl.acked_known = 1;
}

int pdr__pd_samples_progress(const pd_req_t *x)
{
    return x->send_inflight && x->req->version < 0x200;
}

/* Whether a worker of the attempt reports through its shim (then its restarts are looked for). */
static int reports(const pd_req_t *x)
{
    return (x->at.pw != NULL && __atomic_load_n(&x->at.pw->load.report_ms, __ATOMIC_RELAXED) != 0) ||
           (x->at.dw != NULL && __atomic_load_n(&x->at.dw->load.report_ms, __ATOMIC_RELAXED) != 0);
}

/* The next deadline of a request (pdr__pd_next_deadline), from what it depends on now: only deadlines
 * that the timer's callback (timer.c) acts on. */
static uint64_t next_deadline(const pd_req_t *x, uint64_t now)
{
    int pd = x->mode == MODE_PD;
    pdr_pd_timeline_t tl = {
        .started = pd_started(x),
        .backoff_ns = x->backoff_ns,
        .first_byte_deadline_ns = x->at.first_byte_deadline_ns,
        .kv_deadline_ns = x->at.kv_deadline_ns,
        .idle_ns = pd_idle_ns(x),
    };
    if (!pd_started(x)) {
        tl.kv_awaited = pd && (x->at.kv_open || !x->at.p_done);
        tl.peek_client = x->req->version < 0x200;
        tl.recheck = x->at.recheck;
        tl.watch_restarts = pd && reports(x);
    } else {
        tl.send_inflight = x->send_inflight;
        tl.client_idle_since_ns = pd_client_idle_since(x);
        tl.sample_progress = pdr__pd_samples_progress(x);
        tl.sample_due_ns = tl.sample_progress ? pd_progress_sample_due(x) : 0;
        tl.kv_after_start = x->at.p_running || x->at.kv_open;
        tl.decode_reading = x->at.d_running && !x->dleg.paused;
        tl.last_data_ns = x->last_data_ns;
        tl.probe_client = pd_probe_started_client(x);
    }
    return pdr__pd_next_deadline(&tl, now);
}

void pdr__pd_arm_timer(pd_req_t *x)
{
    if (x->req == NULL || pd_final_sent(x) || x->stopped)
        return;
    pdr__pd_kick_cancel(x); /* advanced now: a kick still waiting would have been this call's timer */
    uint64_t now = pdr_now_ns(), next = next_deadline(x, now);
    if (next == 0) {
        x->armed_ns = 0;
        uv_timer_stop(&x->timer);
        return;
    }
    if (x->armed_ns != 0 && x->armed_ns <= next)
        return; /* armed for an earlier deadline: on_timer finds this one not due yet and arms again */
    /* At least 1 ms: libuv runs a 0 ms timer started from a timer callback again in the same pass, so a
     * deadline that on_timer did not act on would keep the loop from ever polling again. */
    uint64_t ms = next > now ? (next - now + 999999) / 1000000 : 1;
    x->armed_ns = next;
    uv_timer_start(&x->timer, x->sm->on_timer, ms ? ms : 1, 0);
}

/* The requests kicked since the last loop turn, in order. */
static void run_kicks(uv_idle_t *h)
{
    pdr_thread_t *t = h->data;
    pdr_dlink_t *l;
    while ((l = pdr_dqueue_pop(&t->pd_kicks)) != NULL) {
        pd_req_t *x = PDR_DLINK_ITEM(l, pd_req_t, kick);
        x->sm->advance(x);
        pdr__pd_arm_timer(x);
    }
    uv_idle_stop(h);
}

void pdr__pd_kick(pd_req_t *x)
{
    if (pdr_dlink_linked(&x->kick))
        return;
    if (x->t->pd_kicks.head == NULL)
        uv_idle_start(&x->t->pd_kick_idle, run_kicks);
    pdr_dqueue_append(&x->t->pd_kicks, &x->kick);
}
