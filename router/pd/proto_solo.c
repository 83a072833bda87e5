/*
 * A solo attempt (conditional disaggregation, disagg.h): one leg, to the one worker that runs the whole
 * request. Each protocol that can run a request alone has a solo table of its own (the role of that worker,
 * where a data-parallel rank goes); they share this start. Loop thread of the request.
 */
#include "pd_internal.h"

/* A solo attempt: one leg, the client's body without any PD field, to the worker that runs it all. The
 * prefill counts as done, so pdr__pd_advance() treats the leg as a decode whose prefill succeeded. */
void pdr__pd_solo_start(pd_req_t *x)
{
    free(x->body);
    x->body = pdr_pdreq_build_plain(&x->pr, x->at.ops->rank_header ? -1 : x->at.dw->dp_rank, &x->body_len);
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
