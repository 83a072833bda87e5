/*
 * Protocol sglang, and pdshim (sglang's with a signed ticket per room, tickets.h): both legs at once with
 * the same body, a fresh CSPRNG bootstrap room per item and per attempt (each owned in the shims' table for
 * their reports); the KV has arrived once the prefill answers 2xx. A solo attempt runs on a regular worker
 * of the pool (a decode-mode sglang server cannot prefill), the data-parallel rank in the body. Loop thread
 * of the request.
 */
#include "pd_internal.h"

/* sglang: the room of a prefill rank. A prefill with dp_size N sends a request to rank room % N unless the
 * request names one ("follow_bootstrap_room", its default in PD mode), and a decode finds the prefill rank
 * that holds the KV the same way, so the room is made to agree with the rank the router chose: its value
 * modulo N is the rank (the rest of it stays random). */
static uint64_t room_for_rank(uint64_t room, const pdr_worker_t *pw)
{
    if (pw == NULL || pw->dp_rank < 0)
        return room;
    uint64_t n = (uint64_t)pw->conf.dp_size, r = room - room % n + (uint64_t)pw->dp_rank;
    return r > ((1ull << 63) - 1) ? r - n : r;
}

static void sglang_start(pd_req_t *x)
{
    /* A fresh CSPRNG room per item and per attempt; the same rooms go to both legs. */
    for (size_t i = 0; i < x->n_rooms; i++)
        x->rooms[i] = room_for_rank(pdr_random_room(), x->at.pw);
    /* Their done and failed reports come back on this loop, to pdr__pd_shim_room_event. */
    for (size_t i = 0; i < x->n_rooms; i++)
        pdr_shim_room_own(x->r, x->rooms[i], x->t, x, pdr__pd_shim_room_event);
    x->room_open = 1;
    free(x->body);
    free(x->dbody);
    x->dbody = NULL;
    /* protocol pdshim: a signed ticket per room (tickets.h), the same in both legs. */
    char **tickets = NULL;
    if (x->at.ops->tickets) {
        char terr[256];
        int oom;
        tickets =
            pdr_tickets_sign(x->conf, x->at.pw, x->at.dw, x->rooms, x->n_rooms, &oom, terr, sizeof(terr));
        if (tickets == NULL) {
            x->error_cause = oom ? "out_of_memory" : "ticket";
            pdr__pd_fail_response(x, oom ? 503 : 500, oom ? "service_unavailable" : "internal_error", terr,
                                  oom);
            return;
        }
        x->t->m.tickets_signed_total += x->n_rooms;
    }
    const char *const *tk = (const char *const *)tickets;
    x->body = pdr_pdreq_build_body_rid(&x->pr, x->at.pw->bootstrap_host, x->at.pw->conf.bootstrap_port,
                                       x->rooms, x->at.pw->dp_rank, tk, &x->body_len);
    /* Each leg names its own worker's rank: the decode's rank is its own choice (it finds the prefill's
     * rank from the room). Without ranks both legs share one body. */
    if (x->body != NULL && (x->at.pw->dp_rank >= 0 || x->at.dw->dp_rank >= 0)) {
        x->dbody = pdr_pdreq_build_body_rid(&x->pr, x->at.pw->bootstrap_host, x->at.pw->conf.bootstrap_port,
                                            x->rooms, x->at.dw->dp_rank, tk, &x->dbody_len);
        if (x->dbody == NULL) {
            free(x->body);
            x->body = NULL;
        }
    }
    free(tickets);
    if (x->body == NULL) {
        pdr__pd_fail_response(x, 503, "service_unavailable", "out of memory", 1);
        return;
    }
    char url[512];
    static const char *paths[] = {"/generate", "/v1/completions", "/v1/chat/completions"};
    pdr_join2(url, sizeof(url), x->at.pw->conf.url, paths[x->route]);
    int rc = pdr_leg_start(&x->pleg, x->t->multi, url, x->body, x->body_len, pdr_fwd_leg(&x->fwd),
                           x->to.connect_ms, 0, &pdr__pd_prefill_cbs, x);
    memcpy(x->at.p_span, x->fwd.last_span, 8);
    if (rc == 0) {
        x->at.p_running = 1;
        pdr_worker_track(x->at.pw, 1);
        pdr_join2(url, sizeof(url), x->at.dw->conf.url, paths[x->route]);
        rc = pdr_leg_start(&x->dleg, x->t->multi, url, x->dbody ? x->dbody : x->body,
                           x->dbody ? x->dbody_len : x->body_len, pdr_fwd_leg(&x->fwd), x->to.connect_ms, 0,
                           &pdr__pd_decode_cbs, x);
        memcpy(x->at.d_span, x->fwd.last_span, 8);
        if (rc == 0) {
            x->at.d_running = 1;
            pdr_worker_track(x->at.dw, 1);
        }
    }
    if (rc != 0) {
        pdr__pd_fail_response(x, 503, "service_unavailable", "cannot start upstream requests", 1);
        return;
    }
    /* Both legs are sent: the KV deadline runs. */
    x->at.kv_open = 1;
    x->kv.rooms_done = 0;
    if (x->kv.room_done != NULL)
        memset(x->kv.room_done, 0, x->n_rooms);
    memset(&x->kv.sse, 0, sizeof(x->kv.sse));
    pdr__pd_arm_timer(x);
}

/* A pair's deadline passed with the prefill's answer missing: the side that went silent
 * (pdr__pd_pair_culprit), judged by what each worker answered since the attempt began. When neither can be
 * blamed (-1), neither is ejected for it: both are avoided by the retry and health-checked out of turn, so
 * that one frozen worker cannot empty the other role. */
int pdr__pd_pair_deadline_culprit(const pd_req_t *x)
{
    int p_alive = x->at.pw != NULL && pdr_worker_alive_ns(x->at.pw) > x->at.t0_ns;
    int d_alive = x->at.dw != NULL && pdr_worker_alive_ns(x->at.dw) > x->at.t0_ns;
    return pdr__pd_pair_culprit(x->dleg.got_headers, p_alive, d_alive);
}

/* Whether a regular worker of the pool can run the request alone (without regular workers, sglang
 * requests are always disaggregated). */
static int sglang_can_run_alone(const pd_req_t *x)
{
    return pdr_pool_count_healthy_in(&x->r->pool, x->pool, PDR_ROLE_REGULAR) > 0;
}

static const pd_proto_ops_t sglang_solo_ops = {
    .name = "sglang solo",
    .start = pdr__pd_solo_start,
    .abort = pdr__pd_abort_by_close,
    .deadline_culprit = pdr__pd_pair_deadline_culprit,
    .answer_role = PDR_ROLE_REGULAR,
    .answer_name = "solo",
    .relay_first_byte = 1,
    .kv_by_prefill = 1,
};

const pd_proto_ops_t pdr__pd_sglang_ops = {
    .name = "sglang",
    .start = sglang_start,
    .abort = pdr__pd_abort_by_rid,
    .deadline_culprit = pdr__pd_pair_deadline_culprit,
    .can_run_alone = sglang_can_run_alone,
    .solo = &sglang_solo_ops,
    .answer_role = PDR_ROLE_DECODE,
    .answer_name = "decode",
    .pair = 1,
    .generate = 1,
    .merge_logprobs = 1,
    .relay_first_byte = 1,
    .kv_by_prefill = 1,
    .rooms = 1,
};

/* pdshim runs no solo attempt: its workers take only ticketed PD requests. */
const pd_proto_ops_t pdr__pd_pdshim_ops = {
    .name = "pdshim",
    .start = sglang_start,
    .abort = pdr__pd_abort_by_rid,
    .deadline_culprit = pdr__pd_pair_deadline_culprit,
    .answer_role = PDR_ROLE_DECODE,
    .answer_name = "decode",
    .pair = 1,
    .generate = 1,
    .merge_logprobs = 1,
    .relay_first_byte = 1,
    .kv_by_prefill = 1,
    .rooms = 1,
    .tickets = 1,
};
