/*
 * An attempt's failure: the worker blamed (ejected, or counted towards outlier ejection), the KV failure
 * it implies, the retry that may follow (the retry budget, the back-off cut to the first-byte deadline)
 * and the answer when none does (503 unreachable, 502 answered badly, 504 deadline). Loop thread of the
 * request.
 */
#include "pd_internal.h"
#include "reply.h"

/* A KV failure of the attempt: counted by cause and backend, the link marked suspect, logged; the deadline
 * no longer runs for this attempt. */
void pdr__pd_note_kv_failure(pd_req_t *x, pdr_kv_cause_t cause, const char *backend, const char *why)
{
    x->at.kv_open = 0;
    x->kv.cause = pdr_kv_cause_names[cause];
    pdr_kv_count_failure(cause, pdr_kvf_backend_parse(backend));
    /* The breaker counts what points at the link: the deadline, a shim's failure, the decode's error
     * answer. A prefill's own error answer, a connection broken by a dying worker or a restart are the
     * worker's (outlier ejection and health checks take a worker that fails with every partner). */
    if (x->conf->breaker.enabled &&
        (cause == PDR_KVC_DEADLINE || cause == PDR_KVC_SHIM_FAILED || cause == PDR_KVC_DECODE_ERROR)) {
        pdr_breaker_conf_t bc = {(uint64_t)x->conf->breaker.consecutive_failures,
                                 (uint64_t)x->conf->breaker.open_ms, (uint64_t)x->conf->breaker.max_open_ms};
        pdr_links_failure_breaker(x->at.pw, x->at.dw, x->kv.cause, &bc);
    } else {
        pdr_links_failure(x->at.pw, x->at.dw, x->kv.cause);
    }
    pdr_warn("request %s: KV transfer from prefill %s to decode %s failed (%s, backend %s): %s",
             x->request_id, x->at.pw ? x->at.pw->target : "-", x->at.dw ? x->at.dw->target : "-", x->kv.cause,
             pdr_kvf_backend_names[pdr_kvf_backend_parse(backend)], why);
}

/* The prefill leg failed (or its KV deadline passed) after the decode's first byte reached the client:
 * nothing is retried, the decode's stream goes on; logged, counted by cause, and the prefill's failure
 * reported to the pool. */
void pdr__pd_late_prefill_failure(pd_req_t *x, int cause, const char *msg)
{
    x->t->m.upstream_errors[PDR_ROLE_PREFILL][cause]++;
    x->t->m.prefill_late_failures[cause]++;
    if (x->at.pw != NULL && cause != PDR_CAUSE_KV_DEADLINE)
        pdr_pool_report_failure(&x->r->pool, x->at.pw, msg);
    pdr_warn("request %s: prefill %s failed after the decode's first byte (%s); the decode's answer goes on",
             x->request_id, x->at.pw ? x->at.pw->target : "-", msg);
}

/* No retry follows: the answer says how the last attempt failed. */
void pdr__pd_fail_last(pd_req_t *x)
{
    int st = x->last_fail_status;
    pdr__pd_fail_response(x, st, pdr__pd_failure_type(st), x->last_fail_msg, pdr__pd_failure_retry_after(st));
}

/* The retry budget (retry.h): 1 when the request may retry (it holds a slot until its end), 0 when too
 * many requests are retrying already (counted; the attempt's failure is the answer). */
static int take_retry_slot(pd_req_t *x)
{
    uint64_t inflight = __atomic_load_n(&x->r->inflight, __ATOMIC_RELAXED);
    if (!pdr_retry_acquire(inflight, x->conf->retries.budget_percent, x->conf->retries.min_concurrent)) {
        pdr_retry_count_skipped(PDR_RETRY_SKIP_BUDGET);
        pdr_info("request %s: no retry: the retry budget is spent (%" PRIu64 " of %" PRIu64
                 " requests in flight are retrying; retries.budget_percent, retries.min_concurrent)",
                 x->request_id, pdr_retry_active(), inflight);
        return 0;
    }
    x->retry_slot = 1;
    return 1;
}

/* The back-off before retry x->attempt, cut short so that it ends by the request's first-byte deadline
 * counted from its start (a request already past it retries at once). */
static uint64_t retry_backoff_ms(const pd_req_t *x)
{
    const pdr_config_t *c = x->conf;
    uint64_t ms =
        pdr_retry_backoff_ms(x->attempt, c->retries.initial_backoff_ms, c->retries.backoff_multiplier,
                             c->retries.max_backoff_ms, c->retries.jitter_factor, pdr_retry_uniform());
    uint64_t now = pdr_now_ns(), end = x->t0_ns + (uint64_t)x->to.first_byte_ms * 1000000u;
    uint64_t left = end > now ? (end - now) / 1000000u : 0;
    return ms < left ? ms : left;
}

/* An attempt failed. The worker of `role` is blamed (ejected or counted, and avoided by the retry) unless
 * role is -1: a pair's deadline that cannot be pinned on either side, where both are avoided and checked
 * out of turn instead. status is the answer when no retry follows: 503 for a worker that could not be
 * reached, 502 for one that answered badly, 504 for a deadline. */
void pdr__pd_attempt_failed(pd_req_t *x, int role, int cause, int status, const char *msg)
{
    int blamed = role >= 0;
    pdr_role_t r0 = blamed ? (pdr_role_t)role : PDR_ROLE_PREFILL;
    pdr_worker_t *w = r0 == PDR_ROLE_PREFILL ? x->at.pw : x->at.dw;
    x->t->m.upstream_errors[r0][cause]++;
    if (x->at.kv_open) {
        /* The attempt ends with its KV in flight. A worker that could not be reached never took part in a
         * transfer: not a KV failure. */
        int kvc = pdr__pd_kv_cause_of(cause, (int)r0);
        if (kvc >= 0)
            pdr__pd_note_kv_failure(x, (pdr_kv_cause_t)kvc, NULL, msg);
        x->at.kv_open = 0;
    }
    x->error_cause = msg;
    if (blamed && w != NULL) {
        if (pdr__pd_cause_ejects(cause))
            pdr_pool_eject(&x->r->pool, w, msg);
        else
            pdr_pool_report_failure(&x->r->pool, w, msg);
    }
    for (int k = 0; k < 2; k++) {
        pdr_worker_t *v = k == PDR_ROLE_PREFILL ? x->at.pw : x->at.dw;
        if (v == NULL || (blamed && k != role))
            continue;
        if (!blamed)
            pdr_worker_suspect(v);
        if (x->n_tried[k] < PDR_MAX_TRIED)
            x->tried[k][x->n_tried[k]++] = v->uid;
    }
    pdr__pd_cancel_legs(x);
    if (x->req == NULL)
        return;
    x->last_fail_status = status;
    if (!blamed)
        snprintf(x->last_fail_msg, sizeof(x->last_fail_msg), "prefill %s and decode %s: %s",
                 x->at.pw ? x->at.pw->target : "-", x->at.dw ? x->at.dw->target : "-", msg);
    else if (status == 503)
        snprintf(x->last_fail_msg, sizeof(x->last_fail_msg), "%s worker %s could not be reached: %s",
                 pdr_role_name(r0), w ? w->target : "-", msg);
    else
        snprintf(x->last_fail_msg, sizeof(x->last_fail_msg), "%s worker %s failed: %s", pdr_role_name(r0),
                 w ? w->target : "-", msg);
    if (pdr__pd_may_retry(x->attempt, x->conf->retries.max, pdr_router_shutting_down(x->r))) {
        if (!x->retry_slot && !take_retry_slot(x)) {
            pdr__pd_fail_last(x);
            return;
        }
        x->attempt++;
        x->t->m.retries_total++;
        /* msg may lie in the leg's buffer, which the next attempt reuses; the access log's error names the
         * final outcome (a retry that succeeds has none), its retry_error this failure. */
        pdr_json_escape(x->retry_error, sizeof(x->retry_error), msg);
        x->error_cause = NULL;
        uint64_t ms = retry_backoff_ms(x);
        pdr_info("request %s: %s; retry %d on a new pair in %" PRIu64 " ms", x->request_id, x->last_fail_msg,
                 x->attempt, ms);
        if (ms == 0) {
            x->sm->start_attempt(x);
            return;
        }
        x->at.recheck = 0;
        x->backoff_ns = pdr_now_ns() + ms * 1000000u;
        pd_set_state(x, PD_RETRY_WAIT);
        pdr__pd_arm_timer(x);
        return;
    }
    pdr__pd_fail_last(x);
}
