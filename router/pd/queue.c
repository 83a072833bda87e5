/*
 * Admission (admission.h) as a PD request sees it: the wait in the queue (its timeout, the rate limit's
 * next token, an HTTP/1 client's close), the slot handed over, and the answers of a refusal (429 for the
 * queue and the rate limit, 503 for a limit without a queue). Loop thread of the request.
 */
#include "pd_internal.h"

static void on_queue_tick(uv_timer_t *h);

/* While queued, the request's timer wakes it for its queue timeout, the next token of the rate limit, and
 * (HTTP/1) to see whether its client closed; a freed slot comes through pdr__pd_on_admitted, not the timer.
 */
void pdr__pd_arm_queue_tick(pd_req_t *x)
{
    uint64_t now = pdr_now_ns(), next = x->queue_deadline_ns;
    uint64_t peek =
        now + PDR_PD_PEEK_INTERVAL_MS * 1000000ull; /* also when a drain's deadline is looked for */
    if (peek < next)
        next = peek;
    uint64_t rate = pdr_admit_rate_wait_ns(x->conf);
    if (rate > 0 && now + rate < next)
        next = now + rate;
    uint64_t ms = next > now ? (next - now + 999999) / 1000000 : 1;
    x->armed_ns = 0;
    pdr__pd_kick_cancel(x);
    uv_timer_start(&x->timer, on_queue_tick, ms ? ms : 1, 0);
}

/* The request's header `lower` (pdr_admit_header_fn). */
static const char *header_value(void *ctx, const char *lower, size_t n, size_t *len)
{
    pd_req_t *x = ctx;
    ssize_t i = h2o_find_header_by_str(&x->req->headers, lower, n, -1);
    if (i < 0)
        return NULL;
    *len = x->req->headers.entries[i].value.len;
    return x->req->headers.entries[i].value.base;
}

void pdr__pd_admit_tag(pd_req_t *x, const pdr_config_t *c, pdr_admit_tag_t *tag)
{
    pdr_admit_tag_of(c, header_value, x, &x->pr, x->t0_ns, tag);
}

static void queue_refused(pd_req_t *x, pdr_admit_reject_t why, const char *cause, const char *msg)
{
    pdr_admit_count_refused(&x->admit, why);
    x->error_cause = cause;
    x->refused = 1;
    pdr__pd_fail_response(x, 503, "service_unavailable", msg, 1);
}

static void on_queue_tick(uv_timer_t *h)
{
    pd_req_t *x = h->data;
    if (x->req == NULL || x->admit.state != PDR_ADMIT_QUEUED)
        return;
    if (x->req->version < 0x200) {
        h2o_socket_t *sock = x->req->conn->callbacks->get_socket(x->req->conn);
        char c;
        if (sock != NULL && recv(h2o_socket_get_fd(sock), &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0) {
            /* The HTTP/1 client closed while queued: it leaves the queue now (a slot handed over meanwhile
             * is given back by on_dispose). */
            (void)pdr_admit_expire(&x->admit);
            pdr__pd_note_client_abort(x);
            x->status = 499;
            x->stopped = 1;
            pdr__pd_mark_started(x, 0);
            h2o_send_error_502(x->req, "Bad Gateway", "client closed", H2O_SEND_ERROR_HTTP1_CLOSE_CONNECTION);
            return;
        }
    }
    if (pdr_router_shutting_down(x->r)) {
        if (pdr_admit_expire(&x->admit))
            queue_refused(x, PDR_REJ_SHUTTING_DOWN, "shutting_down", "the router is shutting down");
        return;
    }
    if (pdr_now_ns() >= x->queue_deadline_ns) {
        if (pdr_admit_expire(&x->admit)) {
            char msg[160];
            snprintf(msg, sizeof(msg),
                     "no room for the request within limits.queue_timeout_ms (%d ms): too many requests in "
                     "flight",
                     x->conf->limits.queue_timeout_ms);
            queue_refused(x, PDR_REJ_QUEUE_TIMEOUT, "queue_timeout", msg);
        }
        return;
    }
    pdr_admit_kick(x->t, x->t->config); /* a token of the rate limit may have come */
    if (x->admit.state == PDR_ADMIT_QUEUED)
        pdr__pd_arm_queue_tick(x);
}

/* Loop of the request (pdr_admit_deliver): a slot was handed over. */
void pdr__pd_on_admitted(pdr_admit_waiter_t *w)
{
    pd_req_t *x = PDR_DLINK_ITEM(w, pd_req_t, admit);
    x->armed_ns = 0;
    pdr__pd_kick_cancel(x);
    uv_timer_stop(&x->timer);
    if (x->req != NULL && !x->stopped && !pd_final_sent(x)) /* not answered while the slot came */
        x->sm->begin(x, 0);
}

/* Admission said no: the answer (429 for the queue and the rate limit, 503 for a limit without a queue),
 * with the cause in the access log. */
void pdr__pd_admit_refused(pd_req_t *x, pdr_admit_result_t res)
{
    const pdr_config_t *c = x->conf;
    char msg[200];
    x->refused = 1;
    if (res == PDR_ADMIT_LATE) {
        x->error_cause = "deadline";
        snprintf(msg, sizeof(msg),
                 "the request's wait in the admission queue is estimated past its deadline "
                 "(admission.refuse_late)");
        pdr__pd_fail_response(x, 503, "service_unavailable", msg, pdr_admit_late_retry_s());
        return;
    }
    if (res == PDR_ADMIT_FULL || res == PDR_ADMIT_RATE || res == PDR_ADMIT_SHED) {
        int retry = 1;
        if (res == PDR_ADMIT_SHED) {
            x->error_cause = "shed";
            snprintf(msg, sizeof(msg),
                     "too many requests: the admission queue holds admission.shed_queue_depth (%d) requests "
                     "and this request's class is shed",
                     c->admission.shed_queue_depth);
        } else if (res == PDR_ADMIT_FULL) {
            x->error_cause = "queue_full";
            snprintf(msg, sizeof(msg), "too many requests: the admission queue is full (limits.queue %d)",
                     c->limits.queue);
        } else {
            x->error_cause = "rate_limited";
            snprintf(msg, sizeof(msg),
                     "too many requests: over the rate limit of %g requests/s "
                     "(limits.rate_limit_rps)",
                     c->limits.rate_limit_rps);
            retry = (int)((pdr_admit_rate_wait_ns(c) + 999999999ull) / 1000000000ull);
        }
        pdr__pd_fail_response(x, 429, "rate_limit_exceeded", msg, retry > 0 ? retry : 1);
        return;
    }
    if (res == PDR_ADMIT_BUSY_POOL) {
        x->error_cause = "max_inflight_per_pool";
        snprintf(msg, sizeof(msg), "too many requests in flight in pool %s (limits.max_inflight_per_pool)",
                 x->pool);
    } else if (res == PDR_ADMIT_BUSY_WORKER) {
        x->error_cause = "max_inflight_per_worker";
        snprintf(msg, sizeof(msg), "every worker is at limits.max_inflight_per_worker (%d)",
                 c->limits.max_inflight_per_worker);
    } else {
        x->error_cause = "max_inflight";
        snprintf(msg, sizeof(msg), "too many requests in flight (limits.max_inflight)");
    }
    pdr__pd_fail_response(x, 503, "service_unavailable", msg, 1);
}
