/*
 * Engine aborts: the router lets go of a leg its worker still runs (the client went away, the other leg
 * failed, a deadline passed, a stream froze), and tells the engine, so that it stops computing and frees the
 * request's KV instead of finishing work nobody reads. The protocol's table says how (its abort hook,
 * called by pdr__pd_release_leg for a leg cancelled before its end):
 *   - sglang and pdshim: POST /abort_request {"rid": RID} to the leg's worker, one per item, RID being the
 *     rid the router put in both legs' bodies (pdr_pdreq_rid of the item's bootstrap room). sglang's
 *     tokenizer manager passes it to the scheduler, which drops the request wherever it is (queued,
 *     computing, waiting for or sending its KV, decoding) and ends its answer with finish_reason
 *     {"type": "abort"}; an unknown rid is a no-op answered 200.
 *   - vLLM, and a solo attempt (a plain request, no rid): closing the leg's connection is the abort (vLLM
 *     aborts a request whose client disconnected; sglang a stream's, 2 s later); it is counted as closed.
 *     KV a vLLM prefill holds for a decode that never began is freed by the release leg (proto_vllm.c).
 * An abort is fire and forget: it owns its memory (the request may end first), runs under
 * pd.abort_timeout_ms, is never retried, and nothing waits for its answer. At most PDR_ABORTS_INFLIGHT_MAX
 * run per loop; past that, and once a shutdown passed lifecycle.drain_timeout_ms, an abort is dropped. Every
 * outcome is counted in pdr_engine_aborts_total{role,outcome}. Loop thread of the request.
 */
#include "pd_internal.h"

/* 128: an abort holds one worker connection for at most pd.abort_timeout_ms; a loop that loses more than 128
 * legs within that time (a mass disconnect) would otherwise open a socket per leg at the moment it is
 * busiest. The engines still see the closed connections. */
#define PDR_ABORTS_INFLIGHT_MAX 128

/* An abort that did not do its work (dropped, failed, timed out) is logged at info at most once a second per
 * loop (a mass disconnect, or workers that do not serve the route, would write a line per leg), else at
 * debug; every one is counted. */
#define LOG_EVERY_NS 1000000000ull
static __thread uint64_t last_info_ns;

#define ABORT_LOG(...)                                                                                       \
    do {                                                                                                     \
        uint64_t now_ = pdr_now_ns();                                                                        \
        if (last_info_ns == 0 || now_ - last_info_ns >= LOG_EVERY_NS) {                                      \
            last_info_ns = now_;                                                                             \
            pdr_info(__VA_ARGS__);                                                                           \
        } else {                                                                                             \
            pdr_debug(__VA_ARGS__);                                                                          \
        }                                                                                                    \
    } while (0)

typedef struct engine_abort {
    pdr_leg_t leg;
    pdr_thread_t *t;
    int role;
    char rid[PDR_RID_LEN + 1];
    char body[PDR_RID_LEN + 16]; /* {"rid":"RID"} */
} engine_abort_t;

static size_t abort_data(pdr_leg_t *leg, const char *p, size_t n)
{
    (void)leg;
    (void)p;
    return n; /* nobody reads the answer */
}

static void abort_done(pdr_leg_t *leg, int err)
{
    engine_abort_t *a = leg->data;
    int outcome = err == PDR_ETIMEDOUT                                  ? PDR_ABORT_TIMEOUT
                  : err == 0 && leg->status >= 200 && leg->status < 300 ? PDR_ABORT_OK
                                                                        : PDR_ABORT_FAILED;
    a->t->m.engine_aborts[a->role][outcome]++;
    if (outcome == PDR_ABORT_OK)
        pdr_debug("engine abort of rid %s (%s): done", a->rid, pdr_role_name((pdr_role_t)a->role));
    else
        ABORT_LOG("engine abort of rid %s (%s) %s: %s, status %ld", a->rid,
                  pdr_role_name((pdr_role_t)a->role), outcome == PDR_ABORT_TIMEOUT ? "timed out" : "failed",
                  err != 0 ? pdr_strerror(err) : "answered", leg->status);
    a->t->aborts--;
    a->t->live--;
    free(a);
}

static const pdr_leg_cbs_t abort_cbs = {abort_data, abort_done};

/* One abort of `room`'s rid on worker w. */
static void send_abort(pd_req_t *x, pdr_worker_t *w, int role, uint64_t room)
{
    pdr_thread_t *t = x->t;
    char rid[PDR_RID_LEN + 1];
    pdr_pdreq_rid(room, rid);
    const char *why = t->multi == NULL || pdr_router_shutting_down(x->r)
                          ? "the shutdown passed its drain deadline"
                      : t->aborts >= PDR_ABORTS_INFLIGHT_MAX ? "too many in flight on this loop"
                                                             : NULL;
    engine_abort_t *a = why == NULL ? calloc(1, sizeof(*a)) : NULL;
    if (a == NULL) {
        t->m.engine_aborts[role][PDR_ABORT_DROPPED]++;
        ABORT_LOG("engine abort of rid %s (%s) dropped: %s", rid, pdr_role_name((pdr_role_t)role),
                  why != NULL ? why : "out of memory");
        return;
    }
    a->t = t;
    a->role = role;
    memcpy(a->rid, rid, sizeof(rid));
    int n = snprintf(a->body, sizeof(a->body), "{\"rid\":\"%s\"}", rid);
    char url[512];
    pdr_join2(url, sizeof(url), w->conf.url, "/abort_request");
    long ms = x->conf->pd.abort_timeout_ms;
    if (pdr_leg_start(&a->leg, t->multi, url, a->body, (size_t)n, pdr__pd_leg_headers(x, w), ms, ms,
                      &abort_cbs, a) != 0) {
        t->m.engine_aborts[role][PDR_ABORT_FAILED]++;
        ABORT_LOG("engine abort of rid %s (%s) failed: cannot start it", rid,
                  pdr_role_name((pdr_role_t)role));
        free(a);
        return;
    }
    t->m.engine_aborts[role][PDR_ABORT_SENT]++;
    t->aborts++;
    t->live++;
    pdr_debug("engine abort of rid %s sent to %s (%s)", rid, w->conf.url, pdr_role_name((pdr_role_t)role));
}

/* Whether the leg's worker still runs the request: not a decode whose whole answer reached the client (its
 * leg is let go with the response's end, the engine done with it). */
static int still_running(const pd_req_t *x, int prefill)
{
    return prefill || !pd_final_sent(x) || x->broken;
}

void pdr__pd_abort_by_rid(pd_req_t *x, int prefill)
{
    pdr_worker_t *w = prefill ? x->at.pw : x->at.dw;
    if (w == NULL || !x->conf->pd.abort || !still_running(x, prefill))
        return;
    int role = prefill ? PDR_ROLE_PREFILL : PDR_ROLE_DECODE;
    for (size_t i = 0; i < x->n_rooms; i++)
        send_abort(x, w, role, x->rooms[i]);
}

void pdr__pd_abort_by_close(pd_req_t *x, int prefill)
{
    if (!still_running(x, prefill))
        return;
    int role = prefill ? PDR_ROLE_PREFILL : PDR_ROLE_DECODE;
    x->t->m.engine_aborts[role][PDR_ABORT_CLOSED]++;
    pdr_debug("engine abort of request %s (%s): its connection is closed", x->request_id,
              pdr_role_name((pdr_role_t)role));
}
