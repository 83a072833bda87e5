/*
 * The KV of an attempt: its deadline ended when the KV is known to have arrived, its failures counted and
 * marked on the link (links.h, breaker.h), a failure after the client's answer began, and the shims'
 * reports of the attempt's rooms (kvdeadline.h). Loop thread of the request.
 */
#include "pd_internal.h"

/* The attempt's KV is known to have arrived: its deadline ends and the link's suspect mark is cleared. */
void pdr__pd_kv_arrived(pd_req_t *x)
{
    if (!x->at.kv_open)
        return;
    x->at.kv_open = 0;
    pdr_links_success(x->at.pw, x->at.dw);
}

/* A KV failure after the client's answer began: nothing can be retried. Both legs are cancelled and the
 * answer ends visibly: a stream with an error event then its normal end, another answer aborted (its body
 * is cut short, which the client sees as a broken response). */
void pdr__pd_kv_failed_in_response(pd_req_t *x, pdr_kv_cause_t cause, const char *backend, const char *why)
{
    pdr__pd_note_kv_failure(x, cause, backend, why);
    x->t->m.upstream_errors[PDR_ROLE_PREFILL]
                           [cause == PDR_KVC_DEADLINE ? PDR_CAUSE_KV_DEADLINE : PDR_CAUSE_OTHER]++;
    int moved = pdr__pd_migrate(x, why, 0); /* the link's failure, not the decode's */
    if (moved == 1)
        return;
    if (moved == 2) {
        pdr__pd_cancel_legs(x);
        x->at.p_done = 1;
        pdr__pd_send_final_or_more(x);
        return;
    }
    x->broken = 1;
    x->error_cause = cause == PDR_KVC_DEADLINE ? "kv_transfer_deadline" : "kv_transfer_failed";
    pdr__pd_cancel_legs(x);
    x->at.p_done = x->at.d_done = 1;
    if (x->rl.is_sse) {
        if (x->mig_armed) /* relayed in whole events: an unended one goes nowhere */
            x->rl.pending.len =
                pdr_resume_events_end(x->rl.pending.p ? x->rl.pending.p : "", x->rl.pending.len);
        char ev[ERR_EVENT_MAX];
        int k =
            snprintf(ev, sizeof(ev), "data: {\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"code\":%d}}\n\n",
                     why, cause == PDR_KVC_DEADLINE ? "timeout_error" : "upstream_error",
                     cause == PDR_KVC_DEADLINE ? 504 : 502);
        /* The stream ends normally after the error event; without memory for it, aborted. */
        if (k > 0 && (size_t)k < sizeof(ev) &&
            pdr_buf_append(&x->rl.pending, ev, (size_t)k, PENDING_CAP) == 0)
            x->at.d_err = 0;
        else
            x->at.d_err = PDR_ENOMEM;
    } else {
        x->at.d_err = cause == PDR_KVC_DEADLINE ? PDR_ETIMEDOUT : PDR_EIO;
    }
    pdr__pd_send_final_or_more(x);
}

int pdr__pd_kv_failed(pd_req_t *x, const char *cause, const char *backend)
{
    if (x == NULL || x->req == NULL || x->stopped || pd_final_sent(x) || x->mode != MODE_PD || !x->at.kv_open)
        return 0;
    pdr_kv_cause_t c = pdr_kv_cause_parse(cause);
    /* The shim's own reason, kept to characters that need no escaping in JSON and logs. */
    char why[48];
    size_t k = 0;
    for (const char *q = cause ? cause : "unknown"; *q != '\0' && k + 1 < sizeof(why); q++)
        why[k++] = (*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') ||
                           *q == '_' || *q == '-' || *q == '.'
                       ? *q
                       : '_';
    why[k] = '\0';
    snprintf(x->kv.msg, sizeof(x->kv.msg), "the KV transfer failed: the shim reported %s", why);
    if (pd_started(x)) {
        pdr__pd_kv_failed_in_response(x, c, backend, x->kv.msg);
        pdr__pd_arm_timer(x);
        return 1;
    }
    pdr__pd_note_kv_failure(x, c, backend, x->kv.msg);
    pdr__pd_attempt_failed(x, -1, PDR_CAUSE_OTHER, 502, x->kv.msg);
    pdr__pd_arm_timer(x);
    return 1;
}

int pdr__pd_kv_done(pd_req_t *x, uint64_t room)
{
    if (x == NULL || x->req == NULL || x->mode != MODE_PD || !x->at.kv_open || !x->at.ops->rooms)
        return 0;
    size_t i = 0;
    while (i < x->n_rooms && x->rooms[i] != room)
        i++;
    if (i == x->n_rooms)
        return 0; /* not a room of this attempt */
    if (x->kv.room_done == NULL && (x->kv.room_done = calloc(x->n_rooms, 1)) == NULL)
        return 0; /* out of memory: the first token or the prefill's answer still ends the deadline */
    if (!x->kv.room_done[i]) {
        x->kv.room_done[i] = 1;
        if (++x->kv.rooms_done == x->n_rooms)
            pdr__pd_kv_arrived(x);
    }
    return 1;
}

void pdr__pd_shim_room_event(void *owner, uint64_t room, int failed, int code, uint64_t bytes, uint64_t usec,
                             uint64_t wall_us, const char *backend, const char *reason)
{
    pd_req_t *x = owner;
    if (x == NULL || x->req == NULL || x->mode != MODE_PD)
        return;
    size_t i = 0;
    while (i < x->n_rooms && x->rooms[i] != room)
        i++;
    if (i == x->n_rooms)
        return; /* a room of an earlier attempt */
    uint64_t start = usec < wall_us ? wall_us - usec : 0;
    if (!failed) {
        /* Both shims report done; the KV phase is the request's first room, recorded once. */
        if (i == 0 && (!x->ph.kv_seen || x->ph.kv_status != 0))
            pdr_phase_kv(&x->ph, start, wall_us, bytes, backend[0] ? backend : NULL, 0, NULL);
        pdr__pd_kv_done(x, room);
        return;
    }
    if (!x->at.kv_open || x->stopped || pd_final_sent(x))
        return; /* the KV had arrived, or the answer is over: nothing to act on */
    pdr_phase_kv(&x->ph, start, wall_us, bytes, backend[0] ? backend : NULL, code != 0 ? code : -1, reason);
    pdr__pd_kv_failed(x, reason, backend[0] ? backend : NULL);
}
