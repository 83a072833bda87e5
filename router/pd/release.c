/*
 * A leg let go: its worker's in-flight count given back and its phase record and span written (a leg that
 * ended), both legs cancelled (the worker sees the abort), and whether a successful answer is read whole
 * for the logprob merge. Every part above calls it; it calls only observation. Loop thread of the request.
 */
#include "pd_internal.h"

void pdr__pd_release_leg(pd_req_t *x, int prefill)
{
    pdr_worker_t *w = prefill ? x->at.pw : x->at.dw;
    if (prefill ? x->at.p_running : x->at.d_running) {
        if (x->mode == MODE_PD)
            pdr__pd_leg_ended(x, prefill, w);
        if (x->mode == MODE_PD && !(prefill ? x->at.p_done : x->at.d_done) && x->at.ops->abort != NULL)
            x->at.ops->abort(x, prefill); /* cancelled: its worker may still run it */
        if (prefill)
            x->at.p_running = 0;
        else
            x->at.d_running = 0;
        if (w != NULL)
            pdr_worker_track(w, -1);
        if (x->conf->limits.max_inflight_per_worker > 0)
            pdr_admit_kick(x->t, x->t->config); /* the worker may have room for a queued request */
    }
}

void pdr__pd_cancel_legs(pd_req_t *x)
{
    if (x->at.ops->release != NULL)
        x->at.ops->release(x);
    if (x->at.p_running) {
        pdr_leg_cancel(&x->pleg);
        pdr__pd_release_leg(x, 1);
    }
    if (x->at.d_running) {
        pdr_leg_cancel(&x->dleg);
        pdr__pd_release_leg(x, 0);
    }
}

/* A successful non-streaming answer with the logprob merge: the client response starts only once it has
 * arrived whole, so that an answer too large to merge is refused before any byte is sent. */
int pdr__pd_whole_answer(const pd_req_t *x)
{
    return x->at.merge && x->dleg.status < 400 && strncmp(x->dleg.content_type, "text/event-stream", 17) != 0;
}
