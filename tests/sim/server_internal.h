/*
 * pdsim's data plane, split by what each part does; this header is what the parts share. Everything runs on
 * the loop thread, except on_shim_done() (kv_flow.c) and vLLM's hold callback (vllm.c), which run on a shim
 * thread and only queue their result under sim__state.qlock and wake the loop, and the KV hashing jobs on
 * the uv thread pool.
 *   server.c    the state, responses, a request's lifetime (references, timers, disconnects), the listener,
 *               start and shutdown
 *   routes.c    the route dispatch and the routes other than generation: stats, faults, health, models
 *   generate.c  the generation routes: the request body parsed into items, the handler
 *   kv_flow.c   the simulated compute, KV offers and fetches through libpdshim, their completions
 *   vllm.c      vLLM's PD protocol (kv_transfer_params, held KV, leases)
 *   output.c    the answers, whole or streamed, at the configured pace
 * Functions and data used by more than one part carry the sim__ prefix.
 */
#ifndef PDSIM_SERVER_INTERNAL_H
#define PDSIM_SERVER_INTERNAL_H

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <h2o.h>
#include <jansson.h>
#include "buf.h"
#include "dlist.h"
#include "err.h"
#include "util.h"
#include "pdshim.h"
#include "pdsim.h"

/* Body limit: 64 MiB (brief); h2o answers 413 itself above it. */
#define SIM_MAX_BODY (64u << 20)
/* KV below this is built and hashed on the loop thread; above it, on the uv thread pool. */
#define SIM_INLINE_KV (1u << 20)
/* How often an HTTP/1 connection that is waiting is checked for a disconnect (h2o reads nothing from it while
 * the handler is pending). */
#define SIM_PEEK_MS 100
/* Coalesce streamed events up to this many bytes per h2o_send (one write per event starves small-window
 * clients). */
#define SIM_SEND_HIWAT (64u << 10)
/* The ceiling of one send (sim_req_t.send): events up to SIM_SEND_HIWAT, then the one that passes it, the
 * usage chunk and [DONE]; an answer or event is at most SIM_ANSWER_MAX (far more than any test's: a prompt
 * of SIM_MAX_BODY bytes with its logprobs). Past it the stream is aborted. */
#define SIM_ANSWER_MAX (256u << 20)
#define SIM_SEND_CAP ((size_t)SIM_SEND_HIWAT + 3 * (size_t)SIM_ANSWER_MAX)
#define SIM_LAST_MAX 64
#define SIM_PORTS_MAX 16

enum sim_route { ROUTE_GENERATE, ROUTE_COMPLETIONS, ROUTE_CHAT };
enum { VLLM_OFF = 0, VLLM_PREFILL, VLLM_DECODE };

struct sim_req;

typedef struct sim_item {
    struct sim_req *ctx;
    size_t index;
    pdsim_toks_t toks;
    uint8_t *kv;
    size_t kv_len;
    uint64_t room;
    const char *host; /* points into ctx->body */
    int port;
    const char *ticket; /* pd_ticket (--ticket-key): points into ctx->body */
    int op_pending;
    int status;      /* shim result */
    uint64_t bytes;  /* shim result */
    pdsim_gen_t gen; /* its output, from its KV's digest (role both and decode) */
    uint64_t cached; /* prompt tokens found in the prefix cache */
    pdr_dlink_t
        qlink; /* sim__state.done_items while its shim result waits for the loop (under sim__state.qlock) */
} sim_item_t;

typedef struct sim_req {
    h2o_generator_t gen;
    h2o_req_t *req; /* NULL once h2o disposed the request */
    int refs;
    int closed_handles;
    int active;       /* counted in sim__state.active */
    pdr_dlink_t link; /* on sim__state.reqs */
    enum sim_route route;
    json_t *body;
    int stream, batch, return_logprob, hang;
    int include_usage; /* stream_options.include_usage: a usage chunk before [DONE] (OpenAI routes) */
    size_t n_items;
    sim_item_t *items;
    uint64_t max_tokens;
    char id[48];
    int64_t created;
    /* progress */
    int started, finished, stopped, cancelled, die_on_dispose, abort_pending;
    int aborted; /* POST /abort_request named its rid: its answer ends with finish_reason abort */
    int sending, in_pump, need_pump;
    int kv_wait;  /* stream_head_before_kv: the stream has begun, its KV has not arrived yet */
    int lease_hb; /* vLLM decode: heartbeats renew the prefill's lease until the pull ends */
    size_t ops_pending;
    int op_error;
    uint64_t op_error_room;
    uint64_t next_ev;
    uint64_t t0_us, gap_us;
    int64_t reset_after;
    int64_t stall_after;
    uv_timer_t timer;
    uv_timer_t peek;
    uv_work_t work;
    pdr_buf_t send;  /* the events of one h2o_send */
    int vllm;        /* vLLM mode: VLLM_OFF, VLLM_PREFILL or VLLM_DECODE (see "vLLM mode" below) */
    json_t *vllm_kv; /* a vLLM prefill's kv_transfer_params answer */
    int role;        /* what this request does: the worker's role, or both for a decode's local prefill */
    /* A prefill with --kv-parts: the rooms were opened when the simulated compute began; part k of every
     * item is published at parts_t0_us + (k + 1) * parts_us / kv_parts. */
    int64_t parts_next;
    uint64_t parts_t0_us, parts_us;
    uint64_t
        compute_end_us; /* prefill: when the simulated compute ended (the whole offer, or the last part) */
    uint64_t kv_held;   /* --kv-capacity-bytes: the KV bytes this request holds while it runs */
    int dp_rank; /* the data-parallel rank it named (sglang's data_parallel_rank, vLLM's header), else 0 */
} sim_req_t;

typedef struct sim_conn {
    uv_tcp_t tcp;
    pdr_dlink_t link; /* on sim__state.conns */
} sim_conn_t;

/* The whole server's state: one instance, sim__state (server.c). */
struct sim_state {
    uv_loop_t *loop;
    pdsim_opts_t opts;
    uint64_t layout; /* pdsim_layout_salt(&opts) */
    pdsim_faults_t faults;
    uint64_t die_at;
    h2o_globalconf_t config;
    h2o_context_t ctx;
    h2o_accept_ctx_t actx;
    uv_tcp_t listener;
    pdshim_t *shim;
    uv_async_t async;
    pthread_mutex_t qlock;
    pdr_dqueue_t done_items; /* items whose shim operation ended, oldest first (sim_item_t's qlink) */
    uv_timer_t die_timer;
    pdr_dqueue_t conns, reqs; /* oldest first */
    size_t nconns, nreqs;
    /* Requests whose answer is not complete yet (nreqs counts their states until freed, a loop turn
     * later), and the most of them at once (stats: inflight_max). */
    size_t active, active_max;
    uint64_t requests, completed, cancelled, errors, resets, kv_rx, kv_tx, counter;
    uint64_t local_prefills; /* decode, --local-prefill: plain requests computed here */
    /* --ticket-key: tickets accepted (one per item) and requests refused, by reason (TICKET_*). */
    uint64_t tickets_accepted, ticket_refused[7];
    char ticket_identity[96];
    json_t *last[SIM_LAST_MAX];
    size_t last_pos;
    /* The monotonic µs at which the last SIM_LAST_MAX generate requests arrived (oldest first in stats),
     * and the requests counted by their bootstrap_port (SIM_PORTS_MAX ports; more go uncounted). */
    uint64_t arrivals_us[SIM_LAST_MAX];
    size_t arrivals_pos;
    int64_t by_port[SIM_PORTS_MAX][2];
    size_t n_by_port;
    uint64_t kv_link_failures; /* fail_kv_from_port: KV fetches failed on purpose */
    pdr_dlink_t *holds_done;   /* vLLM mode: held KV whose offer ended, for the loop (under qlock) */
    uint64_t kv_held, kv_released, kv_expired, kv_hold_failed;
    /* --kv-parts: rooms streamed, parts published, bytes the shim had moved to the decode when the
     * compute ended (read with pdshim_room_progress just before the last part), their total bytes; and
     * for every prefill transfer, the µs from the end of compute to its completion (the last one). */
    uint64_t parts_rooms, parts_published, parts_moved_at_end, parts_bytes, kv_tail_us_last;
    uint64_t kv_used, kv_capacity_refusals, kv_used_max; /* --kv-capacity-bytes accounting */
    /* POST /abort_request: calls received, the live requests they named (matched), of those the ones
     * answered with finish_reason abort (aborted; the others' callers had gone: cancelled), calls that named
     * no live request, the rids the last SIM_LAST_MAX calls named (oldest first in stats); and the output
     * tokens streamed, all requests (a test sees an aborted stream stop). */
    uint64_t abort_calls, abort_matched, aborted, abort_unknown, tokens_streamed;
    char aborted_rids[SIM_LAST_MAX][64];
    size_t aborted_pos;
    char engine_id[96];
    pdsim_pcache_t *pcache;  /* prefill and both with --prefix-cache-tokens; NULL when off */
    json_t *last_headers[3]; /* GET /pdsim/last_headers: of the last generate, health and models request */
    int shutting_down;
    void (*on_drained)(void);
};

extern struct sim_state sim__state;

/* Why a pd_ticket was refused (403), the /pdsim/stats keys of ticket_refused. */
enum {
    TICKET_MISSING,
    TICKET_MALFORMED,
    TICKET_FORGED,
    TICKET_EXPIRED,
    TICKET_REPLAYED,
    TICKET_WRONG_PEER,
    TICKET_WRONG_ROOM
};
/* The /pdsim/stats names of the reasons above, in their order. */
extern const char *const sim__ticket_reasons[7];

/* server.c */
int sim__ticket_reason(int status);
const char *sim__role_name(int role);
void sim__send_body(h2o_req_t *req, int status, const char *ctype, const char *body, size_t len);
void sim__send_json(h2o_req_t *req, int status, json_t *obj);
void sim__send_error(h2o_req_t *req, int status, const char *msg);
void sim__req_inactive(sim_req_t *ctx);
void sim__req_unref(sim_req_t *ctx);
void sim__report_load(void);
void sim__req_release(sim_req_t *ctx);
int sim__req_is_live(const sim_req_t *ctx);
void sim__req_fail(sim_req_t *ctx, int status, const char *msg);
int sim__fd_of(h2o_req_t *req);
void sim__on_peek(uv_timer_t *t);
/* Whether the client of an HTTP/1 request closed its connection (a peek reads end of file). */
int sim__req_peer_closed(const sim_req_t *ctx);
/* The client of a live request went away: it is cancelled (as h2o's stop would), its stream aborted. */
void sim__req_disconnected(sim_req_t *ctx);
sim_req_t *sim__req_new(h2o_req_t *req, enum sim_route route);

/* output.c */
int sim__sendbuf_append(sim_req_t *ctx, const char *s, size_t len);
void sim__start_stream_response(sim_req_t *ctx);
void sim__pump(sim_req_t *ctx);
void sim__send_final(sim_req_t *ctx, uint64_t ntok);
void sim__begin_output(sim_req_t *ctx);
void sim__abort(sim_req_t *ctx);

/* kv_flow.c */
void sim__compute_then_continue(sim_req_t *ctx);
void sim__drain_queue(void);
void sim__on_async(uv_async_t *a);
void sim__start_transfers(sim_req_t *ctx);
void sim__on_stall_timeout(uv_timer_t *t);

/* vllm.c */
int sim__vllm_parse(sim_req_t *ctx, const json_t *body, char *err, size_t errlen);
void sim__vllm_drain_holds(void);
void sim__vllm_answer_prefill(sim_req_t *ctx);
void sim__vllm_lease_expired(pdsim_lease_t *ls);
void sim__vllm_heartbeat_tick(void);
void sim__decode_fetch(sim_req_t *ctx);
void sim__vllm_stats(json_t *o);

/* generate.c */
void sim__handle_generate(h2o_req_t *req, enum sim_route route, const char *path);

/* routes.c */
void sim__set_die_after(int64_t n);
int sim__on_req(h2o_handler_t *self, h2o_req_t *req);

#endif
