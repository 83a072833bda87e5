/*
 * The PD request path. For each client request: validate the body once, pick a prefill and a decode
 * worker, give both the same body with the router's bootstrap fields (a fresh CSPRNG room per item
 * and per attempt), send both legs at once, read the prefill's answer to the end and check it, and
 * relay the decode's answer with back-pressure both ways.
 *
 * pd.relay first_byte (the default): the decode's answer is relayed from its first body byte, without
 * waiting for the prefill's HTTP answer (a real prefill answers up to a forward pass after its KV has
 * left); the prefill leg is still read to its end, after the client's response if need be (the request
 * lingers, off the client's books, until the prefill answers or its KV deadline passes). A prefill
 * failure after that first byte is logged and counted by cause, and the decode's stream goes on: the
 * decode already holds the KV. pd.relay after_prefill, and any request with the logprob merge (which
 * needs the prefill's input logprobs in front of the decode's): the decode's bytes are held (at most
 * HIGH_WATER, then the decode transfer is paused) until the prefill leg has answered successfully.
 * Any failure before the client response starts cancels both legs at once (their connections are
 * closed, and an sglang worker is told to abort its leg: abort.c) and retries up to retries.max on a new
 * pair with new rooms, then answers 502 (upstream failure) or 504 (deadline) in the OpenAI error shape. A
 * decode failure cancels the prefill leg at once; a client that goes away cancels both.
 *
 * Ownership: pd_req_t is malloc'd; the h2o pool holds a small anchor whose dispose callback detaches
 * the request (the client is gone or the response is over), cancels what is still running, writes
 * the access log line and closes the timer; the memory is freed in the timer's close callback.
 * A request stays on the loop thread that accepted it.
 *
 * The path is spread over the files of router/pd/, one part each (each file's opening block says which);
 * this header holds the request, the table a protocol fills (pd_proto_ops_t) and the functions the files
 * share (pdr__pd_*). Nothing outside router/pd/ includes it: the router reaches the path through
 * pdr_pd_handle and pdr_models_handle (router.h).
 */
#ifndef PDR_PD_INTERNAL_H
#define PDR_PD_INTERNAL_H

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include "admission.h"
#include "affinity.h"
#include "breaker.h"
#include "buf.h"
#include "decide.h"
#include "disagg.h"
#include "err.h"
#include "fwdheaders.h"
#include "kvdeadline.h"
#include "links.h"
#include "phases.h"
#include "resume.h"
#include "retry.h"
#include "rewrite.h"
#include "tickets.h"
#include "router.h"
#include "shim_events.h"
#include "sockinfo.h"
#include "state.h"
#include "token_ids.h"
#include "trace.h"
#include "util.h"

/* Decode bytes are coalesced up to 64 KiB per send: one small write per SSE event starves a client with a
 * small receive window (measured ~140 KB/s against ~1.9 MB/s). */
#define HIGH_WATER (64 * 1024)
#define PREFILL_BODY_CAP (64u << 20)
/* The error event that ends a stream the router cuts short (the buffers that build one are this size). */
#define ERR_EVENT_MAX 512
/* Decode bytes waiting for the client (pd_relay_t.pending) that are not a whole answer held for the merge:
 * at most PREFILL_BODY_CAP (a stream pauses the decode at HIGH_WATER; an error answer is read whole within
 * PREFILL_BODY_CAP), then the error event that may end a stream. */
#define PENDING_CAP ((size_t)PREFILL_BODY_CAP + ERR_EVENT_MAX)
#define PDR_MAX_TRIED 16
#define PDR_MAX_AVOID (PDR_MAX_TRIED + 240) /* the failed ones, then those at their in-flight limit */
#define PD_MEMBERS 32 /* a body's top-level members kept in the request itself (more: malloc'd) */
#define PD_ROOMS 4    /* bootstrap rooms kept in the request itself (a larger batch: calloc'd) */

typedef enum { MODE_PD = 0, MODE_MODELS } pd_mode_t;

struct pd_req;
struct pd_proto_ops;

/* One attempt: its pair, the state of its legs, its deadlines and the spans its legs carry. An attempt
 * starts from a fresh one (pdr__pd_start_attempt: one assignment, after the workers' references are
 * dropped). The legs themselves lie beside it in pd_req_t: pdr_leg_start sets each up, and a leg's memory is
 * the upstream module's until it ends. */
typedef struct pd_attempt {
    pdr_worker_t *pw, *dw; /* the pair (references owned by the request) */
    unsigned p_running : 1, d_running : 1, p_done : 1, d_done : 1;
    unsigned recheck : 1; /* advance() waits for the prefill leg's connect: look again in 1 ms */
    /* The KV deadline runs (kvdeadline.h): from the moment both legs are sent (protocol vllm: the decode
     * leg) until the KV is known to have arrived. */
    unsigned kv_open : 1;
    /* How the attempt runs: the request's protocol, or its solo table when conditional disaggregation
     * (disagg.h) lets the attempt skip the prefill and run on one worker. */
    const struct pd_proto_ops *ops;
    int merge; /* the logprob merge runs in this attempt (wanted, and not solo) */
    int p_err, d_err;
    int p_truncated;      /* the prefill's answer outgrew PREFILL_BODY_CAP (still read to its end) */
    uint64_t d_failed_ns; /* when the decode's failure was seen with the prefill leg outstanding */
    uint64_t p_failed_ns; /* when the prefill's 5xx was seen with the decode leg outstanding */
    uint64_t t0_ns, first_byte_deadline_ns, kv_deadline_ns;
    /* The workers' incarnations (w->load.epoch) when the attempt began: a new one fails it fast. */
    uint64_t p_epoch, d_epoch;
    uint8_t p_span[8], d_span[8]; /* the span ids the legs carry in their traceparent */
    /* What the prefill pick (a solo attempt: the lone worker's) found cached of the prompt, when its policy
     * knows (the access log's "prefix"): matched tokens (from the KV event index) or bytes (the tree). */
    unsigned match_known : 1, match_index : 1;
    size_t matched;
    /* The pick wanted the prompt's token ids and went on without them: the fall-back's name (fallback.h;
     * the access log's prefix.fallback), else NULL. */
    const char *ids_fallback;
} pd_attempt_t;

/* The client side: the decode's bytes on their way to the client, the streaming merge, and the client's
 * progress. */
typedef struct pd_relay {
    pdr_buf_t pending; /* decode bytes not yet handed to h2o */
    pdr_buf_t sending; /* bytes h2o is writing now */
    /* HTTP/2: sending goes to h2o in pieces of H2_PIECE (send_piece), each one taken being the client's
     * progress; send_off is where the next begins, send_last whether the last piece ends the response. */
    size_t send_off;
    unsigned send_last : 1;
    /* Streaming merge: an unended event (at most limits.max_merge_bytes), after the events a send had no
     * room for when sse_more is set (relay.c, sse_merge_events). */
    pdr_buf_t sse_carry;
    size_t sse_scanned; /* the bytes of sse_carry already searched for an event's end */
    int sse_more;       /* sse_carry starts with events still to merge: pending waits for them */
    int merge_overflow; /* a whole-answer merge outgrew limits.max_merge_bytes */
    int is_sse;
    json_t *p_json;              /* parsed prefill answer when merging */
    pdr_sse_counter_t sse_count; /* token events in the relayed stream (metrics) */
    uint64_t tokens, first_token_ns, last_token_ns;
    uint64_t send_ns; /* when the send in flight was handed to h2o (the client's read clock) */
    /* HTTP/1: the client's progress by bytes (a send of up to HIGH_WATER may take a slow reader longer
     * than stream_idle_ms): its TCP's acknowledged bytes, sampled while a send is in flight. */
    uint64_t took_ns, sample_ns, acked;
    unsigned acked_known : 1;
} pd_relay_t;

/* The request's KV (kvdeadline.h, shim_events.h). The deadline, ms, is computed once from the prompt's
 * length (tokens, found as tokens_how); it ends when the KV is known to have arrived: the decode's first
 * token (sse counts its token events until the first), the prefill's successful answer (sglang), or a
 * shim's report. cause names the last KV failure (access log). Decode admission (kv_admission): the KV held
 * on the decode, the request's need in tokens (0: not computed yet) and how long it may wait for room. */
typedef struct pd_kv {
    uint64_t ms, tokens;
    pdr_kv_tokens_how_t tokens_how;
    uint8_t *room_done; /* the shims' "done" reports by room index (pdr_pd_kv_done), NULL until one */
    size_t rooms_done;
    pdr_sse_counter_t sse;
    const char *cause;
    char msg[200];
    pdr_kv_hold_t hold;
    uint64_t need, admit_deadline_ns;
    unsigned admit_waited : 1;
} pd_kv_t;

/* Protocol vllm (pd_vllm.h): the prefill runs first, alone; then the decode with dbody. release is the body
 * that frees the prefill's KV if the decode's answer never begins (NULL: no KV held for it). */
typedef struct pd_vllm {
    unsigned bad : 1; /* this attempt's prefill answer cannot be used (why in err); 0 as one starts */
    char *release;
    size_t release_len;
    char err[200];
} pd_vllm_t;

struct pd_req;

/* The request's state machine as the parts below it see it: what they hand over to (advance.c's
 * pdr__pd_advance, attempt.c's pdr__pd_start_attempt, request.c's begin and lingering close's end, the
 * timer's callback in timer.c). request.c gives each request its table when it allocates it, in the manner
 * of nginx's upstream handlers, so that the parts call nothing above them by name. */
/* Sidecar mode (sidecar.c): the prefill the request's header names. */
#define PD_SC_HOST_MAX 253 /* a DNS name's longest text form */
typedef struct pd_sidecar {
    const char *host; /* into the client request's header value (lives as long as x->req) */
    size_t hlen;
    int port;
    int named;   /* the header named a prefill of the pool when the request arrived */
    int outcome; /* PDR_SC_* (metrics.h) once counted; -1 before, and without sidecar mode */
} pd_sidecar_t;

typedef struct pd_machine {
    void (*advance)(struct pd_req *x);
    void (*start_attempt)(struct pd_req *x);
    void (*begin)(struct pd_req *x, int deferred);
    void (*linger_end)(struct pd_req *x);
    uv_timer_cb on_timer;
} pd_machine_t;

typedef struct pd_req {
    const pd_machine_t *sm; /* request.c's */
    pdr_router_t *r;
    pdr_thread_t *t;
    h2o_req_t *req; /* NULL once h2o disposed the request */
    h2o_generator_t gen;
    pd_mode_t mode;
    pdr_route_t route;
    int mroute;
    pdr_pdreq_t pr;
    char *body, *dbody; /* the legs' bodies (dbody: the decode's, when it differs) */
    size_t body_len, dbody_len;
    uint64_t *rooms;
    size_t n_rooms;
    unsigned room_open : 1; /* the attempt's rooms are owned in the shims' table */

    const pdr_config_t *conf; /* the snapshot this request started with (a reload does not change it) */
    const char *pool;         /* the pool serving the request's model (a name in conf); retries stay in it */
    pdr_timeouts_t to;        /* its deadlines: the pool's timeouts where it sets them, else the top-level */
    const struct pd_proto_ops *proto; /* that pool's protocol (pdr__pd_proto) */
    int attempt;
    size_t n_tried[2]; /* of tried (below) */
    pd_attempt_t at;
    pdr_leg_t pleg, dleg;
    pdr_buf_t pbody; /* the prefill's answer (checked, used for logprob merge) */
    pd_relay_t rl;
    int merge_wanted; /* the logprob merge is asked for (and the protocol needs the router to do it) */

    pd_state_t state; /* where the request is (state.h); changed only by pd_set_state */
    /* What happened to the response, with it at any point: send_inflight = h2o writes a send; stopped = the
     * client went away or was cut off (both legs are cancelled); errored = answered by an error
     * (pdr__pd_fail_response); broken = it ended visibly cut short. */
    unsigned send_inflight : 1, stopped : 1, errored : 1, broken : 1;
    unsigned client_aborted : 1; /* the client went away before the end (error_cause "client_abort") */
    unsigned refused : 1;        /* answered by admission, no worker chosen: its log line is rate-limited */
    int status;
    uint64_t t0_ns, ttfb_ns, end_ns, last_data_ns;
    pd_kv_t kv;
    uint64_t bytes_in, bytes_out;
    const char *error_cause;
    uv_timer_t timer;
    /* The deadline (pdr_now_ns) the timer is armed for with on_timer (timer.c), 0 when it is not: a
     * deadline that moves later leaves the timer as it is (it fires, and arms itself again). Every other
     * use of the timer clears it. */
    uint64_t armed_ns;
    /* On t->pd_kicks: advanced on the next loop turn (pdr__pd_kick). Whatever uses the timer otherwise
     * drops it first (pdr__pd_kick_cancel), as restarting the timer did when a kick was its 0 ms run. */
    pdr_dlink_t kick;
    int counted_inflight;
    int last_fail_status;
    pd_vllm_t vl;
    /* Conditional disaggregation (disagg.h): the last decision made (-1: none made, the feature is off or
     * nothing can run the request alone). */
    int disagg;
    /* Data-parallel attention (pool.c: a rank is a worker of its own, w->dp_rank): protocol vllm names the
     * rank in a header of each leg, built here (pdr_leg_start copies it). */
    const char *rank_hdrs[4];
    /* The request's trace spans (trace.h; its phase timing, ph, is in the tail): traced = the trace is
     * sampled and an exporter runs; root_span is the router's span for the request. */
    unsigned traced : 1;
    uint8_t root_span[8];
    /* Admission (admission.h): the request's slot or place in the queue, and when its wait ends. */
    pdr_admit_waiter_t admit;
    uint64_t queue_deadline_ns;
    /* Retries (retry.h): retry_slot = the request holds a slot of the retry budget (released at its end);
     * backoff_ns = in PD_RETRY_WAIT (no attempt runs): when the next attempt starts. */
    unsigned retry_slot : 1;
    uint64_t backoff_ns;
    /* Session affinity (affinity.h): the request names a session (a header of affinity.headers), whose key
     * is session. */
    unsigned has_session : 1;
    uint64_t session;
    /* Token ids: precise = the request's pool has a policy that reads them (the KV event index);
     * unknown_model = that fall-back was counted for the request (token_ids.h: once per request). */
    unsigned precise : 1;
    int unknown_model;
    int affinity_outcome[2]; /* with affinity on: the last prefill and decode picks' PDR_AFFINITY_*, -1: none
                              */
    /* Stream migration (migrate.c): mig_possible = a streamed request with migration.enabled (whether it
     * can be moved is read from its body when its decode fails); mig_armed = its stream is relayed in whole
     * events, each noted in mig (what the client has); resuming = a migration's attempt runs: the client's
     * response went long ago, and the new decode's first byte goes on with it (no second head). mig_body: the
     * body x->pr borrows after a migration. */
    unsigned mig_possible : 1, mig_armed : 1, resuming : 1;
    int migrations;
    char *mig_body;
    pdr_resume_t mig;
    pd_sidecar_t sc; /* sidecar mode's prefill header (sidecar.c) */

    /* The tail (from PD_REQ_TAIL on) is not zeroed at the request's start (new_req): fwd and ph are
     * cleared whole by their own initialisation (pdr_fwd_build, pdr_phase_init), each text is written
     * before it is read, and it starts as the empty string; tried is read up to n_tried, members up to
     * pr.n, room_space up to n_rooms (zeroed when taken). 3.6 KB a request that calloc would clear for
     * nothing. */
    pdr_fwd_t fwd; /* the headers both legs carry (fwdheaders.h), built once */
    pdr_phase_t ph;
    char request_id[80];
    char last_fail_msg[768];
    char retry_error[192]; /* JSON-escaped: the failure of the last attempt that was retried (access log) */
    char rank_line[48];    /* the data-parallel rank's header (rank_hdrs) */
    uint64_t tried[2][PDR_MAX_TRIED];  /* uids of the workers that failed this request, by role */
    pdr_jmember_t members[PD_MEMBERS]; /* pr.m when the body's members fit (!pr.m_owned) */
    uint64_t room_space[PD_ROOMS];     /* rooms when n_rooms fits */
} pd_req_t;

#define PD_REQ_TAIL offsetof(pd_req_t, fwd)

/*
 * A way of running an attempt, in the manner of nginx's upstream callbacks (create_request,
 * process_header, finalize_request): the core (start_attempt, advance, the legs' callbacks, the timer,
 * observation) asks the attempt's table and never which protocol it runs. One table per protocol:
 * sglang's (both legs at once, a bootstrap room per item), pdshim's (sglang's with a signed ticket per
 * room), vLLM's (the prefill alone, then the decode with its kv_transfer_params); a solo table for each
 * protocol that can run a request on one worker; and the /v1/models relay. A hook left NULL does nothing.
 */
typedef struct pd_proto_ops {
    const char *name;
    /* Starts the attempt's legs once its workers are chosen (pw is NULL unless pair); answers the client
     * itself when they cannot start. */
    void (*start)(pd_req_t *x);
    /* The prefill answered 2xx before the client's response began (vLLM: the decode starts). */
    void (*prefill_ok)(pd_req_t *x);
    /* Why the prefill's successful answer cannot be used (the client's 502), or NULL. */
    const char *(*prefill_unusable)(const pd_req_t *x);
    /* The request lets go of the attempt's legs: KV the prefill still holds is released. */
    void (*release)(pd_req_t *x);
    /* The router let go of a leg its worker still runs (prefill: the prefill's leg, else the decode's): the
     * engine is told to stop it and free its KV (abort.c). Called from pdr__pd_release_leg, with the leg's
     * worker still referenced and the attempt's rooms still set. */
    void (*abort)(pd_req_t *x, int prefill);
    /* A pair's deadline passed with the prefill's answer missing: the role to blame, or -1 (neither can be,
     * both are avoided by the retry). */
    int (*deadline_culprit)(const pd_req_t *x);
    /* Whether something can run the request alone now (conditional disaggregation): then the attempt may
     * run with the table `solo`. */
    int (*can_run_alone)(const pd_req_t *x);
    const struct pd_proto_ops *solo;
    pdr_role_t answer_role;      /* the role of the worker in dw, the one that answers */
    const char *answer_name;     /* its leg's role in spans */
    unsigned pair : 1;           /* the attempt runs a prefill and a decode (picked, admitted, the breaker) */
    unsigned generate : 1;       /* serves sglang's native /generate */
    unsigned merge_logprobs : 1; /* the router merges the prefill's input logprobs into the answer */
    unsigned relay_first_byte : 1;    /* pd.relay first_byte applies (the decode holds the KV by then) */
    unsigned keep_prefill_answer : 1; /* a successful prefill's answer is read whole (kv_transfer_params) */
    unsigned kv_by_prefill : 1;       /* a 2xx prefill answer means its KV has arrived */
    unsigned rooms : 1;       /* the attempt has bootstrap rooms (the shims' reports, access log, spans) */
    unsigned tickets : 1;     /* a signed ticket per room (tickets.h); a 403 is the ticket refused */
    unsigned rank_header : 1; /* a data-parallel rank is named in a header, not in the body */
} pd_proto_ops_t;

/* The request's one transition: to `to`, which the table of state.c must allow from where it is (an
 * assertion in debug builds). */
static inline void pd_set_state(pd_req_t *x, pd_state_t to)
{
    assert(pdr__pd_state_legal(x->state, to));
    x->state = to;
}

/* The client's response has begun (its status line went), or its end has been handed to h2o. */
static inline int pd_started(const pd_req_t *x)
{
    return x->state == PD_RESPONDING || x->state == PD_ANSWERED || x->state == PD_LINGER;
}

static inline int pd_final_sent(const pd_req_t *x)
{
    return x->state == PD_ANSWERED || x->state == PD_LINGER;
}

/* The timer's arithmetic, shared by when it fires (schedule.c) and what it does (timer.c). */

static inline uint64_t pd_idle_ns(const pd_req_t *x)
{
    return (uint64_t)x->to.stream_idle_ms * 1000000u;
}

/* How often an HTTP/1 client's progress is sampled while a send is in flight: an eighth of
 * stream_idle_ms (at least 10 ms), so a client that stops is cut within 1.125 x stream_idle_ms. */
static inline uint64_t pd_sample_every_ns(const pd_req_t *x)
{
    uint64_t q = pd_idle_ns(x) / 8;
    return q > 10000000u ? q : 10000000u;
}

static inline uint64_t pd_progress_sample_due(const pd_req_t *x)
{
    return (x->rl.sample_ns > x->rl.send_ns ? x->rl.sample_ns : x->rl.send_ns) + pd_sample_every_ns(x);
}

/* Since when the client has taken nothing: the send in flight's start, or its last progress. */
static inline uint64_t pd_client_idle_since(const pd_req_t *x)
{
    return x->rl.took_ns > x->rl.send_ns ? x->rl.took_ns : x->rl.send_ns;
}

/* Whether the client's connection is probed for a close: HTTP/1, response started, nothing being
 * written (a write in flight shows a close by failing), the decode still read. A decode stream that
 * gives the client nothing (an event without its end, held for the logprob merge) is not read on for a
 * client that left. */
static inline int pd_probe_started_client(const pd_req_t *x)
{
    return pd_started(x) && x->req->version < 0x200 && !x->send_inflight && !pd_final_sent(x) &&
           x->at.d_running;
}

extern const pd_proto_ops_t pdr__pd_sglang_ops, pdr__pd_pdshim_ops, pdr__pd_vllm_ops;
/* The table of a protocol (config.h). */
const pd_proto_ops_t *pdr__pd_proto(pdr_protocol_t protocol);

/* request.c: the request's lifetime and the entry points (pdr_pd_handle, pdr_models_handle). */
void pdr__pd_linger_end(pd_req_t *x);
void pdr__pd_begin(pd_req_t *x, int deferred);

/* queue.c: admission (admission.h): the queue, its ticks, and the answers of a refusal. */
void pdr__pd_arm_queue_tick(pd_req_t *x);
void pdr__pd_on_admitted(pdr_admit_waiter_t *w);
void pdr__pd_admit_refused(pd_req_t *x, pdr_admit_result_t res);
void pdr__pd_admit_tag(pd_req_t *x, const pdr_config_t *c, pdr_admit_tag_t *tag);

/* relay.c: the client side: the h2o generator, the relay of the decode's answer, the SSE merge. */
void pdr__pd_mark_started(pd_req_t *x, int ttfb);
void pdr__pd_note_client_abort(pd_req_t *x);
void pdr__pd_fail_response(pd_req_t *x, int status, const char *type, const char *msg, int retry_after);

/* ---- sidecar.c: sidecar mode's prefill header ---- */

/* Reads the request's prefill header into sc: -1 without sidecar mode; PDR_SC_USED when it names a prefill
 * of the pool (its state is read at the first attempt's pick); PDR_SC_ABSENT (the policy picks),
 * PDR_SC_MALFORMED or PDR_SC_NOT_IN_POOL (the caller answers 400 or 403, the reason in msg), counted. */
int pdr__pd_sidecar_read(pdr_thread_t *t, const pdr_config_t *c, h2o_req_t *req, const char *pool,
                         pd_sidecar_t *sc, char *msg, size_t cap);
/* The first attempt's prefill from the header: 1 to go on (x->at.pw the named prefill, or NULL: the
 * policy picks), 0 when the request was answered (503: the named prefill is down). */
int pdr__pd_sidecar_pick(pd_req_t *x, const char *text, size_t tlen);
void pdr__pd_start_client_response(pd_req_t *x);
void pdr__pd_send_final_or_more(pd_req_t *x);
int pdr__pd_merge_whole_answer(pd_req_t *x);

/* failure.c: an attempt's failure, the retry that may follow, and the answer when none does. */
void pdr__pd_late_prefill_failure(pd_req_t *x, int cause, const char *msg);
void pdr__pd_fail_last(pd_req_t *x);
void pdr__pd_attempt_failed(pd_req_t *x, int role, int cause, int status, const char *msg);
void pdr__pd_note_kv_failure(pd_req_t *x, pdr_kv_cause_t cause, const char *backend, const char *why);

/* advance.c: what happens next, decided from the facts the callbacks recorded. */
void pdr__pd_advance(pd_req_t *x);

/* release.c: a leg's release and the cancellation of both. */
void pdr__pd_release_leg(pd_req_t *x, int prefill);
void pdr__pd_cancel_legs(pd_req_t *x);
int pdr__pd_whole_answer(const pd_req_t *x);

/* legs.c: the upstream legs' callbacks. */
void pdr__pd_decode_done(pdr_leg_t *leg, int err);
extern const pdr_leg_cbs_t pdr__pd_prefill_cbs;
extern const pdr_leg_cbs_t pdr__pd_decode_cbs;

/* timer.c: the request's timer's callback: deadlines, idle stream, stalled client, HTTP/1 disconnect
 * probe. */
void pdr__pd_on_timer(uv_timer_t *t);

/* schedule.c: when the timer fires next, the client's progress samples, the kick. */
void pdr__pd_sample_client_progress(pd_req_t *x, uint64_t now);
int pdr__pd_samples_progress(const pd_req_t *x);
void pdr__pd_arm_timer(pd_req_t *x);
/* Advances the request (x->sm->advance, then pdr__pd_arm_timer) on the next loop turn, outside the
 * callback that calls it; the request's timer stays armed meanwhile. */
void pdr__pd_kick(pd_req_t *x);
static inline void pdr__pd_kick_cancel(pd_req_t *x)
{
    pdr_dqueue_unlink(&x->t->pd_kicks, &x->kick);
}

/* pick.c: choosing the workers of an attempt: disaggregation, decode admission, the breaker. */
const char *pdr__pd_routing_text(const pdr_pdreq_t *pr, size_t *len);
int pdr__pd_disagg_possible(const pd_req_t *x);
void pdr__pd_decide_disaggregation(pd_req_t *x, const char *text, size_t tlen,
                                   const pdr_prompt_tokens_t *tok);
int pdr__pd_admit_decode(pd_req_t *x, const char *text, size_t tlen);
void pdr__pd_breaker_pick(pd_req_t *x, const char *text, size_t tlen, const pdr_prompt_tokens_t *tok);
/* Compatible pairs (compat.enabled) and session affinity (affinity.mode; pick.c). The filter of a pick in *f:
 * for a prefill (partner NULL) or for a decode of partner; NULL when nothing is left out and affinity is off
 * (compat off, a solo attempt, a prefill with compat.unknown: allow). */
const pdr_pick_filter_t *pdr__pd_pick_filter(pd_req_t *x, const pdr_worker_t *partner, pdr_pick_filter_t *f);
/* Session affinity alone, for the decode or the solo worker (a pick without compat's filter): NULL when
 * affinity is off. */
const pdr_pick_filter_t *pdr__pd_affinity_filter(pd_req_t *x, pdr_pick_filter_t *f);
/* The request's session key from the headers of affinity.headers (the first present with a value), when
 * affinity is on: x->has_session and x->session. */
void pdr__pd_session_key(pd_req_t *x, const h2o_req_t *req);
/* No header named one: the session key from the body's session_params.id (sglang's sessions), if any. */
void pdr__pd_session_body(pd_req_t *x);
int pdr__pd_compat_repick(pd_req_t *x, const char *text, size_t tlen, const pdr_prompt_tokens_t *tok,
                          const uint64_t *davoid, size_t dn);
void pdr__pd_compat_reason(pd_req_t *x, char *msg, size_t cap);

/* attempt.c: starting an attempt: its pair, its rooms and bodies, its legs. */
const char *const *pdr__pd_leg_headers(pd_req_t *x, const pdr_worker_t *w);
void pdr__pd_forget_room(pd_req_t *x);
void pdr__pd_start_attempt(pd_req_t *x);

/* proto_sglang.c: who is to blame when a pair's deadline passed (sglang's and pdshim's tables). */
int pdr__pd_pair_deadline_culprit(const pd_req_t *x);

/* abort.c: engine aborts of the legs the router lets go (the tables' abort). */
/* sglang's (and pdshim's): POST /abort_request {"rid": ...} to the leg's worker, one per item, fire and
 * forget within pd.abort_timeout_ms. */
void pdr__pd_abort_by_rid(pd_req_t *x, int prefill);
/* vLLM's, and a solo attempt's: closing the leg's connection aborts the request in the engine; counted. */
void pdr__pd_abort_by_close(pd_req_t *x, int prefill);

/* migrate.c: stream migration. */
/* The client's stream has begun: its events are relayed whole and noted, when the request may be moved. */
void pdr__pd_migration_arm(pd_req_t *x);
/* The relay's send with migration armed: whole events of pending into sending (a migration's rewritten);
 * *final cleared while events wait. 0, or an error (the response is aborted). */
int pdr__pd_migration_take(pd_req_t *x, int *final);
/* The decode failed after the client's stream began (err: the leg's error; blame: the decode is to blame,
 * not the link). 1: the stream goes on on a new pair (the caller does nothing more); 2: the client had every
 * token and its stream ends normally (the end is in pending); 0: the stream ends as before. */
int pdr__pd_migrate(pd_req_t *x, const char *why, int blame);
/* A migration's attempt reached its first byte: the response goes on with the new decode's stream. */
void pdr__pd_resume_response(pd_req_t *x);
/* A migration's attempt failed with no retry left: the stream ends with an error event. */
void pdr__pd_resume_failed(pd_req_t *x, int status, const char *msg);

/* proto_solo.c: a solo attempt's one leg (the solo tables' start). */
void pdr__pd_solo_start(pd_req_t *x);

/* observe.c: observation: the phase record, spans, latencies and the access log. */
void pdr__pd_random_span(uint8_t out[8]);
void pdr__pd_leg_ended(pd_req_t *x, int prefill, const pdr_worker_t *w);
void pdr__pd_write_access_log(pd_req_t *x);
void pdr__pd_take_other_rooms(pd_req_t *x);

/* kv.c: KV tracking: the KV deadline's end, KV failures, and the shims' reports (kvdeadline.h). */
void pdr__pd_kv_arrived(pd_req_t *x);
void pdr__pd_kv_failed_in_response(pd_req_t *x, pdr_kv_cause_t cause, const char *backend, const char *why);
/* A shim reported that a room of the PD request x failed (cause: a pdr_kv_cause_names entry or the
 * shim's own reason; backend: the transport's name, or NULL). While the request still waits for its KV:
 * both legs are cancelled, the link marked suspect, the cause counted, and the request retried on a new
 * pair when nothing reached the client yet, else its answer ends with an error (an SSE error event, or
 * an aborted body). Later reports (the KV already arrived, the request over) are ignored. Call it on x's
 * loop, only while x is in flight (between its start and its end: the receiver must drop its pointer
 * when the request ends). Returns 1 when it acted, 0 when ignored. */
int pdr__pd_kv_failed(pd_req_t *x, const char *cause, const char *backend);
/* A shim reported that the KV of `room` arrived whole (its "done" event). Once every room of the
 * request's current attempt is done, the KV deadline ends and the link's suspect mark is cleared. A room
 * of an earlier attempt, or one the request does not have, is ignored. Same calling rules as
 * pdr__pd_kv_failed. Returns 1 when the room was counted, 0 when ignored. */
int pdr__pd_kv_done(pd_req_t *x, uint64_t room);
/* A room event from a shim, on x's loop (shim_events.c delivers it while x owns the room). done:
 * pdr__pd_kv_done and the KV phase (bytes, backend; start = wall_us - usec); failed: the KV phase with the
 * shim's code and reason, then pdr__pd_kv_failed. */
void pdr__pd_shim_room_event(void *x, uint64_t room, int failed, int code, uint64_t bytes, uint64_t usec,
                             uint64_t wall_us, const char *backend, const char *reason);

/* pools.c: the pool a request goes to by its model, and the models list */
/* The pool (index in c's pools) that serves the parsed body pr: 0 with *pool set, or the HTTP status to
 * answer (400: no model with several pools, or not a string; 404: no pool serves it) with the message. */
int pdr__request_pool(const pdr_config_t *c, const pdr_pdreq_t *pr, long *pool, char *msg, size_t cap);
/* GET /v1/models with pools: every pool's models, OpenAI's list shape. malloc'd (free), or NULL. */
char *pdr__models_list_json(const pdr_config_t *c, uint64_t created, size_t *len);

#endif
