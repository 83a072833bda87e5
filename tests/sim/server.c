/*
 * pdsim's data plane: one h2o context on the main uv loop, the request state machine and the glue to
 * libpdshim. Everything here runs on the loop thread, except on_shim_done(), which runs on a shim thread
 * and only appends the finished item to a locked queue and wakes the loop with a uv_async_t.
 *
 * A request's state (sim_req_t) is malloc'ed and reference counted: one reference for the h2o request
 * (dropped by the pool's dispose callback, which h2o runs even when stop never ran: an HTTP/2 client that
 * resets before the headers receives no stop), one per pending shim operation and one per thread-pool job. KV
 * buffers live in it, so they stay valid until every shim callback has run. Its two timers are closed, and it
 * is freed, when the count is zero. After dispose (ctx->req == NULL) nothing touches h2o again; after stop
 * nothing is sent again.
 */
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
    int status;     /* shim result */
    uint64_t bytes; /* shim result */
    uint64_t digest;
    uint64_t cached;   /* prompt tokens found in the prefix cache */
    pdr_dlink_t qlink; /* S.done_items while its shim result waits for the loop (under S.qlock) */
} sim_item_t;

typedef struct sim_req {
    h2o_generator_t gen;
    h2o_req_t *req; /* NULL once h2o disposed the request */
    int refs;
    int closed_handles;
    int active;       /* counted in S.active */
    pdr_dlink_t link; /* on S.reqs */
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
    int sending, in_pump, need_pump;
    int kv_wait;  /* stream_head_before_kv: the stream has begun, its KV has not arrived yet */
    int lease_hb; /* vLLM decode: heartbeats renew the prefill's lease until the pull ends */
    size_t ops_pending;
    int op_error;
    uint64_t op_error_room;
    uint64_t next_ev;
    uint64_t t0_us, gap_us;
    int64_t reset_after;
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
} sim_req_t;

typedef struct sim_conn {
    uv_tcp_t tcp;
    pdr_dlink_t link; /* on S.conns */
} sim_conn_t;

static struct {
    uv_loop_t *loop;
    pdsim_opts_t opts;
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
    char engine_id[96];
    pdsim_pcache_t *pcache;  /* prefill and both with --prefix-cache-tokens; NULL when off */
    json_t *last_headers[3]; /* GET /pdsim/last_headers: of the last generate, health and models request */
    int shutting_down;
    void (*on_drained)(void);
} S;

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
static const char *const ticket_reasons[] = {"missing",  "malformed",  "forged",    "expired",
                                             "replayed", "wrong_peer", "wrong_room"};

/* The reason for a shim's ticket error, or -1 when status is not one. */
static int ticket_reason(int status)
{
    switch (status) {
    case PDR_EBADTICKET:
        return TICKET_MALFORMED;
    case PDR_EFORGED:
        return TICKET_FORGED;
    case PDR_ETICKETEXPIRED:
        return TICKET_EXPIRED;
    case PDR_EREPLAYED:
        return TICKET_REPLAYED;
    case PDR_EWRONGPEER:
        return TICKET_WRONG_PEER;
    default:
        return -1;
    }
}

static const char *role_name(int role)
{
    return role == PDSIM_ROLE_PREFILL ? "prefill" : role == PDSIM_ROLE_DECODE ? "decode" : "both";
}

/* ------------------------------------------------------------------ responses */

/* Sends a complete response with a known length (h2o_send_inline alone would send it chunked). */
static void send_body(h2o_req_t *req, int status, const char *ctype, const char *body, size_t len)
{
    req->res.status = status;
    req->res.reason = pdr_http_reason(status);
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, ctype, strlen(ctype));
    req->res.content_length = len;
    h2o_send_inline(req, body, len);
}

static void send_json(h2o_req_t *req, int status, json_t *obj)
{
    char *s = json_dumps(obj, JSON_COMPACT);
    if (s == NULL) {
        static const char oom[] =
            "{\"error\":{\"message\":\"out of memory\",\"type\":\"internal_error\",\"code\":500}}";
        send_body(req, 500, "application/json", oom, sizeof(oom) - 1);
        return;
    }
    send_body(req, status, "application/json", s, strlen(s));
    free(s);
}

static json_t *error_obj(int status, const char *msg)
{
    const char *type = status == 400 || status == 404 || status == 405 || status == 413
                           ? "invalid_request_error"
                       : status == 403 ? "permission_error"
                       : status == 503 ? "service_unavailable"
                                       : "internal_error";
    return json_pack("{s:{s:s,s:s,s:i}}", "error", "message", msg, "type", type, "code", status);
}

/* The OpenAI error shape {"error":{"message","type","code"}}. */
static void send_error(h2o_req_t *req, int status, const char *msg)
{
    json_t *o = error_obj(status, msg);
    send_json(req, status, o);
    json_decref(o);
}

/* ------------------------------------------------------------------ request lifetime */

/* The request's answer is complete, failed or cancelled: it no longer counts as in progress. */
static void req_inactive(sim_req_t *ctx)
{
    if (ctx->active) {
        ctx->active = 0;
        S.active--;
    }
}

static void req_on_handle_close(uv_handle_t *h)
{
    sim_req_t *ctx = h->data;
    if (++ctx->closed_handles < 2)
        return;
    pdr_dqueue_unlink(&S.reqs, &ctx->link);
    S.nreqs--;
    req_inactive(ctx);
    for (size_t i = 0; i < ctx->n_items; i++) {
        pdsim_toks_free(&ctx->items[i].toks);
        free(ctx->items[i].kv);
    }
    free(ctx->items);
    pdr_buf_free(&ctx->send);
    json_decref(ctx->body);
    json_decref(ctx->vllm_kv);
    free(ctx);
    if (S.shutting_down && S.nreqs == 0 && S.nconns == 0 && S.on_drained != NULL)
        S.on_drained();
}

static void req_unref(sim_req_t *ctx)
{
    if (--ctx->refs > 0)
        return;
    uv_close((uv_handle_t *)&ctx->timer, req_on_handle_close);
    uv_close((uv_handle_t *)&ctx->peek, req_on_handle_close);
}

/* The engine's load as the shim reports it to the router (--events-url). */
static void report_load(void)
{
    if (S.shim == NULL || S.opts.events_url == NULL)
        return;
    uint64_t cap = (uint64_t)S.opts.kv_capacity_bytes;
    pdshim_load_t ld = {0};
    if (cap > 0) {
        ld.kv_total_bytes = cap;
        ld.kv_free_bytes = cap > S.kv_used ? cap - S.kv_used : 0;
        ld.kv_bytes_per_token = (uint64_t)S.opts.kv_bytes_per_token;
    }
    ld.queue_depth = S.nreqs;
    pdshim_report_load(S.shim, &ld);
}

/* Gives back the KV a request held (before its last bytes go out: the router may send the next request
 * the moment it has them). */
static void kv_give_back(sim_req_t *ctx)
{
    if (ctx->kv_held == 0)
        return;
    S.kv_used -= ctx->kv_held;
    ctx->kv_held = 0;
    report_load();
}

/* Stops the timers and cancels pending transfers; the shim callbacks still come and drop their refs. */
static void req_release(sim_req_t *ctx)
{
    kv_give_back(ctx);
    uv_timer_stop(&ctx->timer);
    uv_timer_stop(&ctx->peek);
    for (size_t i = 0; i < ctx->n_items; i++) {
        if (ctx->items[i].op_pending && S.shim != NULL)
            pdshim_cancel(S.shim, ctx->items[i].room);
    }
}

static void mark_cancelled(sim_req_t *ctx)
{
    if (ctx->cancelled || ctx->finished)
        return;
    ctx->cancelled = 1;
    S.cancelled++;
    req_inactive(ctx);
}

static void on_die(uv_timer_t *t)
{
    (void)t;
    pdr_warn("pdsim: --die-after reached (%" PRIu64 " requests completed), exiting with status 3",
             S.completed);
    fflush(stderr);
    _exit(3);
}

static void on_dispose(void *p)
{
    sim_req_t *ctx = *(sim_req_t **)p;
    ctx->req = NULL;
    mark_cancelled(ctx);
    req_release(ctx);
    if (ctx->die_on_dispose)
        uv_timer_start(&S.die_timer, on_die, 0, 0);
    req_unref(ctx);
}

/* h2o calls stop when the connection goes away after h2o_start_response and before the final send. */
static void on_stop(h2o_generator_t *gen, h2o_req_t *req)
{
    sim_req_t *ctx = (sim_req_t *)gen;
    (void)req;
    ctx->stopped = 1;
    mark_cancelled(ctx);
    req_release(ctx);
}

static void pump(sim_req_t *ctx);
static void vllm_answer_prefill(sim_req_t *ctx);
static void vllm_drain_holds(void);

static void on_proceed(h2o_generator_t *gen, h2o_req_t *req)
{
    sim_req_t *ctx = (sim_req_t *)gen;
    (void)req;
    ctx->sending = 0;
    pump(ctx);
}

static int req_is_live(const sim_req_t *ctx)
{
    return ctx->req != NULL && !ctx->finished && !ctx->stopped && !ctx->cancelled;
}

/* Ends a request that has not started its response with an error. */
static void req_fail(sim_req_t *ctx, int status, const char *msg)
{
    if (!req_is_live(ctx) || ctx->started)
        return;
    ctx->finished = 1;
    S.errors++;
    req_inactive(ctx);
    req_release(ctx);
    send_error(ctx->req, status, msg);
}

static int fd_of(h2o_req_t *req)
{
    h2o_socket_t *sock =
        req->conn->callbacks->get_socket ? req->conn->callbacks->get_socket(req->conn) : NULL;
    return sock != NULL ? h2o_socket_get_fd(sock) : -1;
}

/* h2o does not read an HTTP/1 socket while the handler is pending. */
static void on_peek(uv_timer_t *t)
{
    sim_req_t *ctx = t->data;
    if (!req_is_live(ctx) || (ctx->started && !ctx->kv_wait)) {
        uv_timer_stop(t);
        return;
    }
    int fd = fd_of(ctx->req);
    if (fd < 0)
        return;
    char c;
    ssize_t r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r > 0 || (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)))
        return;
    mark_cancelled(ctx);
    req_release(ctx);
    if (ctx->started) {
        /* stream_head_before_kv: the answer has begun (h2o sees the close only at its next write). */
        ctx->kv_wait = 0;
        ctx->abort_pending = 1;
        pump(ctx);
        return;
    }
    ctx->finished = 1;
    h2o_send_error_generic(ctx->req, 502, "Bad Gateway", "client closed the connection",
                           H2O_SEND_ERROR_HTTP1_CLOSE_CONNECTION);
}

static sim_req_t *req_new(h2o_req_t *req, enum sim_route route)
{
    sim_req_t *ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL)
        return NULL;
    sim_req_t **holder = h2o_mem_alloc_shared(&req->pool, sizeof(*holder), on_dispose);
    *holder = ctx;
    ctx->gen.proceed = on_proceed;
    ctx->gen.stop = on_stop;
    ctx->req = req;
    ctx->refs = 1;
    ctx->route = route;
    ctx->role = S.opts.role;
    ctx->created = (int64_t)time(NULL);
    uv_timer_init(S.loop, &ctx->timer);
    uv_timer_init(S.loop, &ctx->peek);
    ctx->timer.data = ctx;
    ctx->peek.data = ctx;
    pdr_dqueue_append(&S.reqs, &ctx->link);
    S.nreqs++;
    ctx->active = 1;
    if (++S.active > S.active_max)
        S.active_max = S.active;
    if (req->version < 0x200)
        uv_timer_start(&ctx->peek, on_peek, SIM_PEEK_MS, SIM_PEEK_MS);
    return ctx;
}

/* ------------------------------------------------------------------ output builders */

static uint64_t total_prompt_tokens(const sim_req_t *ctx)
{
    uint64_t n = 0;
    for (size_t i = 0; i < ctx->n_items; i++)
        n += ctx->items[i].toks.n;
    return n;
}

static uint64_t total_cached_tokens(const sim_req_t *ctx)
{
    uint64_t n = 0;
    for (size_t i = 0; i < ctx->n_items; i++)
        n += ctx->items[i].cached;
    return n;
}

/* The words of output tokens [from, to) joined by spaces; a leading space when from > 0. */
static json_t *words_json(const sim_item_t *it, uint64_t from, uint64_t to)
{
    size_t cap = 16 + (to - from) * 10, len = 0;
    char *s = malloc(cap);
    if (s == NULL)
        return NULL;
    for (uint64_t j = from; j < to; j++) {
        const char *w = pdsim_out_word(it->digest, j, NULL);
        size_t wl = strlen(w);
        if (len + wl + 2 > cap) {
            cap = cap * 2 + wl;
            char *n = realloc(s, cap);
            if (n == NULL) {
                free(s);
                return NULL;
            }
            s = n;
        }
        if (j > 0)
            s[len++] = ' ';
        memcpy(s + len, w, wl);
        len += wl;
    }
    json_t *r = json_stringn(s, len);
    free(s);
    return r;
}

static json_t *input_logprobs(const sim_item_t *it)
{
    json_t *a = json_array();
    for (size_t i = 0; i < it->toks.n; i++)
        json_array_append_new(
            a, json_pack("[f,I,n]", pdsim_logprob(it->toks.ids[i]), (json_int_t)it->toks.ids[i]));
    return a;
}

static json_t *output_logprobs(const sim_item_t *it, uint64_t ntok)
{
    json_t *a = json_array();
    for (uint64_t j = 0; j < ntok; j++) {
        int64_t tid;
        pdsim_out_word(it->digest, j, &tid);
        json_array_append_new(a, json_pack("[f,I,n]", pdsim_logprob(tid), (json_int_t)tid));
    }
    return a;
}

static void item_id(const sim_req_t *ctx, const sim_item_t *it, char *buf, size_t len)
{
    if (ctx->role != PDSIM_ROLE_BOTH)
        snprintf(buf, len, "pdsim-%" PRIu64, it->room);
    else
        snprintf(buf, len, "%s-%zu", ctx->id, it->index);
}

/* One /generate result object for an item after ntok output tokens. */
static json_t *generate_obj(const sim_req_t *ctx, const sim_item_t *it, uint64_t ntok, int final)
{
    char id[64];
    item_id(ctx, it, id, sizeof(id));
    json_t *meta =
        json_pack("{s:s,s:o,s:I,s:I,s:i}", "id", id, "finish_reason",
                  final ? json_pack("{s:s,s:I}", "type", "length", "length", (json_int_t)ntok) : json_null(),
                  "prompt_tokens", (json_int_t)it->toks.n, "completion_tokens", (json_int_t)ntok,
                  "cached_tokens", (json_int_t)it->cached);
    if (ctx->return_logprob) {
        json_object_set_new(meta, "input_token_logprobs",
                            ctx->role == PDSIM_ROLE_DECODE ? json_array() : input_logprobs(it));
        if (ctx->role != PDSIM_ROLE_PREFILL)
            json_object_set_new(meta, "output_token_logprobs", output_logprobs(it, ntok));
    }
    json_t *o = json_pack("{s:o,s:o}", "text", words_json(it, 0, ntok), "meta_info", meta);
    if (ctx->batch && ctx->stream)
        json_object_set_new(o, "index", json_integer((json_int_t)it->index));
    return o;
}

/* OpenAI's usage object for ntok output tokens per item (cached tokens only with the prefix cache on).
 * The n choices of a chat request share one prompt, counted once, as sglang's UsageProcessor counts
 * every n-th response's prompt tokens. */
static json_t *usage_obj(const sim_req_t *ctx, uint64_t ntok)
{
    int shared = ctx->route == ROUTE_CHAT && ctx->n_items > 1;
    uint64_t pt = shared ? ctx->items[0].toks.n : total_prompt_tokens(ctx), ct = ntok * ctx->n_items;
    uint64_t cached = shared ? ctx->items[0].cached : total_cached_tokens(ctx);
    json_t *u = json_pack("{s:I,s:I,s:I}", "prompt_tokens", (json_int_t)pt, "completion_tokens",
                          (json_int_t)ct, "total_tokens", (json_int_t)(pt + ct));
    if (u != NULL && S.pcache != NULL)
        json_object_set_new(u, "prompt_tokens_details",
                            json_pack("{s:I}", "cached_tokens", (json_int_t)cached));
    return u;
}

/* The whole non-streaming answer (ntok = tokens per item: 0 on a prefill). */
static json_t *full_obj(const sim_req_t *ctx, uint64_t ntok)
{
    if (ctx->route == ROUTE_GENERATE) {
        if (!ctx->batch)
            return generate_obj(ctx, &ctx->items[0], ntok, 1);
        json_t *a = json_array();
        for (size_t i = 0; i < ctx->n_items; i++)
            json_array_append_new(a, generate_obj(ctx, &ctx->items[i], ntok, 1));
        return a;
    }
    json_t *choices = json_array();
    for (size_t i = 0; i < ctx->n_items; i++) {
        json_t *text = words_json(&ctx->items[i], 0, ntok);
        if (ctx->route == ROUTE_COMPLETIONS)
            json_array_append_new(choices, json_pack("{s:I,s:o,s:n,s:s}", "index", (json_int_t)i, "text",
                                                     text, "logprobs", "finish_reason", "length"));
        else
            json_array_append_new(choices, json_pack("{s:I,s:{s:s,s:o},s:n,s:s}", "index", (json_int_t)i,
                                                     "message", "role", "assistant", "content", text,
                                                     "logprobs", "finish_reason", "length"));
    }
    return json_pack("{s:s,s:s,s:I,s:s,s:o,s:o}", "id", ctx->id, "object",
                     ctx->route == ROUTE_COMPLETIONS ? "text_completion" : "chat.completion", "created",
                     (json_int_t)ctx->created, "model", S.opts.model, "choices", choices, "usage",
                     usage_obj(ctx, ntok));
}

/* The usage chunk of a stream whose request asked stream_options.include_usage: the last event before
 * [DONE], with no choices, as OpenAI and sglang's serving_chat / serving_completions send it. */
static json_t *usage_chunk(const sim_req_t *ctx)
{
    return json_pack("{s:s,s:s,s:I,s:s,s:[],s:o}", "id", ctx->id, "object",
                     ctx->route == ROUTE_COMPLETIONS ? "text_completion" : "chat.completion.chunk", "created",
                     (json_int_t)time(NULL), "model", S.opts.model, "choices", "usage",
                     usage_obj(ctx, ctx->max_tokens));
}

/* One streamed event: item i, step j (output token j; step 0 with no tokens when max_tokens is 0). */
static json_t *stream_obj(const sim_req_t *ctx, const sim_item_t *it, uint64_t j)
{
    uint64_t T = ctx->max_tokens;
    int last = T == 0 || j + 1 == T;
    uint64_t ntok = T == 0 ? 0 : j + 1;
    if (ctx->route == ROUTE_GENERATE)
        return generate_obj(ctx, it, ntok, last);
    json_t *delta = T == 0 ? json_string("") : words_json(it, j, j + 1);
    json_t *choice;
    if (ctx->route == ROUTE_COMPLETIONS) {
        choice = json_pack("{s:I,s:o,s:n,s:o}", "index", (json_int_t)it->index, "text", delta, "logprobs",
                           "finish_reason", last ? json_string("length") : json_null());
    } else {
        json_t *d = json_pack("{s:o}", "content", delta);
        if (j == 0)
            json_object_set_new(d, "role", json_string("assistant"));
        choice = json_pack("{s:I,s:o,s:n,s:o}", "index", (json_int_t)it->index, "delta", d, "logprobs",
                           "finish_reason", last ? json_string("length") : json_null());
    }
    return json_pack("{s:s,s:s,s:I,s:s,s:[o]}", "id", ctx->id, "object",
                     ctx->route == ROUTE_COMPLETIONS ? "text_completion" : "chat.completion.chunk", "created",
                     (json_int_t)ctx->created, "model", S.opts.model, "choices", choice);
}

static int sendbuf_append(sim_req_t *ctx, const char *s, size_t len)
{
    return pdr_buf_append(&ctx->send, s, len, SIZE_MAX / 2);
}

static int sendbuf_event(sim_req_t *ctx, json_t *obj)
{
    char *s = obj != NULL ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    if (s == NULL)
        return PDR_ENOMEM;
    int r = sendbuf_append(ctx, "data: ", 6);
    if (r == 0)
        r = sendbuf_append(ctx, s, strlen(s));
    if (r == 0)
        r = sendbuf_append(ctx, "\n\n", 2);
    free(s);
    return r;
}

static void complete_ok(sim_req_t *ctx)
{
    ctx->finished = 1;
    S.completed++;
    req_inactive(ctx);
    if (S.die_at != 0 && S.completed >= S.die_at)
        ctx->die_on_dispose = 1;
    req_release(ctx);
}

/* --reset-after-tokens: abort hard (RST on HTTP/1, RST_STREAM on HTTP/2) in the middle of the body. */
static void hard_reset(sim_req_t *ctx)
{
    if (ctx->req->version < 0x200) {
        int fd = fd_of(ctx->req);
        struct linger lg = {1, 0};
        if (fd >= 0)
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    }
    ctx->finished = 1;
    S.resets++;
    req_release(ctx);
    h2o_send(ctx->req, NULL, 0, H2O_SEND_STATE_ERROR);
}

static void start_stream_response(sim_req_t *ctx)
{
    h2o_req_t *req = ctx->req;
    ctx->started = 1;
    uv_timer_stop(&ctx->peek);
    req->res.status = 200;
    req->res.reason = "OK";
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
                   H2O_STRLIT("text/event-stream"));
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL, H2O_STRLIT("no-cache"));
    h2o_start_response(req, &ctx->gen);
}

static void on_timer_pump(uv_timer_t *t)
{
    pump(t->data);
}

static void pump_once(sim_req_t *ctx)
{
    if (ctx->req == NULL || ctx->stopped || ctx->finished || ctx->sending)
        return;
    if (ctx->kv_wait && !ctx->abort_pending)
        return; /* the stream's head is out; its tokens wait for the KV */
    if (ctx->abort_pending) {
        ctx->finished = 1;
        req_release(ctx);
        h2o_send(ctx->req, NULL, 0, H2O_SEND_STATE_ERROR);
        return;
    }
    uint64_t steps = ctx->max_tokens == 0 ? 1 : ctx->max_tokens;
    uint64_t total = steps * ctx->n_items;
    uint64_t now = uv_hrtime() / 1000;
    ctx->send.len = 0;
    while (ctx->next_ev < total && ctx->send.len < SIM_SEND_HIWAT) {
        uint64_t j = ctx->next_ev / ctx->n_items;
        if (ctx->gap_us > 0 && ctx->max_tokens > 0 && now < ctx->t0_us + (j + 1) * ctx->gap_us)
            break;
        if (ctx->reset_after > 0 && j >= (uint64_t)ctx->reset_after)
            break;
        json_t *ev = stream_obj(ctx, &ctx->items[ctx->next_ev % ctx->n_items], j);
        if (ev != NULL && ctx->next_ev == 0 && S.opts.stamp_first_token)
            json_object_set_new(ev, "pdsim_mono_us", json_integer((json_int_t)(uv_hrtime() / 1000)));
        if (sendbuf_event(ctx, ev) != 0) {
            ctx->abort_pending = 1;
            ctx->need_pump = 1;
            return;
        }
        ctx->next_ev++;
    }
    if (ctx->next_ev == total) {
        if ((ctx->include_usage && sendbuf_event(ctx, usage_chunk(ctx)) != 0) ||
            sendbuf_append(ctx, "data: [DONE]\n\n", 14) != 0) {
            ctx->abort_pending = 1;
            ctx->need_pump = 1;
            return;
        }
        h2o_iovec_t buf = h2o_iovec_init(ctx->send.p, ctx->send.len);
        complete_ok(ctx);
        h2o_send(ctx->req, &buf, 1, H2O_SEND_STATE_FINAL);
        return;
    }
    if (ctx->send.len > 0) {
        h2o_iovec_t buf = h2o_iovec_init(ctx->send.p, ctx->send.len);
        ctx->sending = 1;
        h2o_send(ctx->req, &buf, 1, H2O_SEND_STATE_IN_PROGRESS);
        return;
    }
    uint64_t j = ctx->next_ev / ctx->n_items;
    if (ctx->reset_after > 0 && j >= (uint64_t)ctx->reset_after) {
        hard_reset(ctx);
        return;
    }
    uint64_t due = ctx->t0_us + (j + 1) * ctx->gap_us;
    uint64_t wait_ms = due > now ? (due - now + 999) / 1000 : 0;
    uv_timer_start(&ctx->timer, on_timer_pump, wait_ms, 0);
}

static void pump(sim_req_t *ctx)
{
    if (ctx->in_pump) {
        ctx->need_pump = 1;
        return;
    }
    ctx->in_pump = 1;
    do {
        ctx->need_pump = 0;
        pump_once(ctx);
    } while (ctx->need_pump);
    ctx->in_pump = 0;
}

/* A non-streaming answer, or its hard reset. */
static void send_final(sim_req_t *ctx, uint64_t ntok)
{
    json_t *o = full_obj(ctx, ntok);
    if (o != NULL && ctx->vllm_kv != NULL && json_is_object(o))
        json_object_set(o, "kv_transfer_params", ctx->vllm_kv);
    char *s = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (s == NULL) {
        req_fail(ctx, 500, "pdsim: out of memory building the response");
        return;
    }
    size_t len = strlen(s);
    /* reset_answer reaches the answers reset_after_tokens cannot: a prefill's, which carries no output
     * token, and one of fewer tokens than the knob. */
    if ((ctx->reset_after > 0 && (uint64_t)ctx->reset_after < ntok) || S.faults.reset_answer) {
        h2o_req_t *req = ctx->req;
        size_t half = len / 2;
        char *part = h2o_mem_alloc_pool(&req->pool, half + 1);
        memcpy(part, s, half);
        free(s);
        req->res.status = 200;
        req->res.reason = "OK";
        req->res.content_length = len;
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
                       H2O_STRLIT("application/json"));
        ctx->started = 1;
        h2o_start_response(req, &ctx->gen);
        h2o_iovec_t buf = h2o_iovec_init(part, half);
        if (req->version < 0x200) {
            int fd = fd_of(req);
            struct linger lg = {1, 0};
            if (fd >= 0)
                setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        }
        ctx->finished = 1;
        S.resets++;
        req_release(ctx);
        h2o_send(req, &buf, 1, H2O_SEND_STATE_ERROR);
        return;
    }
    h2o_req_t *req = ctx->req;
    complete_ok(ctx);
    if (ctx->stream) {
        /* A prefill's stream: one event with the whole object, then [DONE]. */
        size_t blen = len + 32;
        char *b = h2o_mem_alloc_pool(&req->pool, blen);
        int n = snprintf(b, blen, "data: %s\n\ndata: [DONE]\n\n", s);
        free(s);
        req->res.status = 200;
        req->res.reason = "OK";
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL, H2O_STRLIT("no-cache"));
        send_body(req, 200, "text/event-stream", b, (size_t)n);
        return;
    }
    send_body(req, 200, "application/json", s, len);
    free(s);
}

static void on_timer_send_final(uv_timer_t *t)
{
    sim_req_t *ctx = t->data;
    if (req_is_live(ctx))
        send_final(ctx, ctx->max_tokens);
}

/* Output phase of role both and decode: the digests are known. */
static void begin_output(sim_req_t *ctx)
{
    if (!req_is_live(ctx))
        return;
    pdsim_faults_t *f = &S.faults;
    ctx->gap_us = f->drip_ms > 0 ? (uint64_t)f->drip_ms * 1000 : (uint64_t)S.opts.decode_us_per_token;
    ctx->reset_after = f->reset_after_tokens;
    ctx->t0_us = uv_hrtime() / 1000;
    if (ctx->stream) {
        if (!ctx->started)
            start_stream_response(ctx);
        ctx->kv_wait = 0;
        pump(ctx);
        return;
    }
    uint64_t ms = (ctx->gap_us * ctx->max_tokens + 999) / 1000;
    if (ms == 0) {
        send_final(ctx, ctx->max_tokens);
        return;
    }
    uv_timer_start(&ctx->timer, on_timer_send_final, ms, 0);
}

/* ------------------------------------------------------------------ KV: compute, offer, fetch */

static void kv_compute(sim_req_t *ctx, int fill)
{
    for (size_t i = 0; i < ctx->n_items; i++) {
        sim_item_t *it = &ctx->items[i];
        if (fill)
            pdsim_kv_fill(it->toks.ids, it->toks.n, (size_t)S.opts.kv_bytes_per_token, it->kv);
        it->digest = pdsim_kv_digest(it->kv, it->kv_len);
    }
}

static void kv_work_cb(uv_work_t *w)
{
    sim_req_t *ctx = w->data;
    kv_compute(ctx, ctx->role != PDSIM_ROLE_DECODE);
}

static void after_compute(sim_req_t *ctx);

static void kv_after_work_cb(uv_work_t *w, int status)
{
    sim_req_t *ctx = w->data;
    (void)status;
    if (req_is_live(ctx)) {
        if (S.shutting_down)
            req_fail(ctx, 503, "pdsim is shutting down");
        else
            after_compute(ctx);
    }
    req_unref(ctx);
}

static void compute_then_continue(sim_req_t *ctx)
{
    size_t total = 0;
    for (size_t i = 0; i < ctx->n_items; i++)
        total += ctx->items[i].kv_len;
    if (total <= SIM_INLINE_KV) {
        kv_compute(ctx, ctx->role != PDSIM_ROLE_DECODE);
        after_compute(ctx);
        return;
    }
    ctx->work.data = ctx;
    ctx->refs++;
    if (uv_queue_work(S.loop, &ctx->work, kv_work_cb, kv_after_work_cb) != 0) {
        ctx->refs--;
        req_fail(ctx, 500, "pdsim: cannot queue the KV computation");
    }
}

static void on_shim_done(void *arg, uint64_t room, int status, uint64_t bytes)
{
    sim_item_t *it = arg;
    (void)room;
    it->status = status;
    it->bytes = bytes;
    pthread_mutex_lock(&S.qlock);
    pdr_dqueue_append(&S.done_items, &it->qlink);
    pthread_mutex_unlock(&S.qlock);
    uv_async_send(&S.async);
}

/* The prefill's KV has left: its answer (after --prefill-answer-lag-ms). */
static void prefill_answer(sim_req_t *ctx)
{
    if (!req_is_live(ctx))
        return;
    if (S.faults.fail_after_kv != 0) {
        req_fail(ctx, S.faults.fail_after_kv, "pdsim: fault knob fail_after_kv");
        return;
    }
    send_final(ctx, 0);
}

static void on_prefill_answer(uv_timer_t *t)
{
    prefill_answer(t->data);
}

static void transfers_done(sim_req_t *ctx)
{
    ctx->lease_hb = 0; /* the pull ended: vLLM's decode stops heartbeating when its transfer completes */
    if (!req_is_live(ctx))
        return;
    if (ctx->op_error != 0 && ctx->started) {
        /* stream_head_before_kv: the answer has begun; it can only be broken off. */
        ctx->abort_pending = 1;
        pump(ctx);
        return;
    }
    if (ctx->op_error != 0) {
        char msg[256];
        int why = ticket_reason(ctx->op_error);
        if (why >= 0) {
            /* The shim refused the ticket before anything moved (replay, mostly: the rest was checked
             * when the request arrived). */
            S.ticket_refused[why]++;
            snprintf(msg, sizeof(msg), "pdsim: pd_ticket refused (%s) for room %" PRIu64 ": %s",
                     ticket_reasons[why], ctx->op_error_room, pdshim_strerror(ctx->op_error));
            req_fail(ctx, 403, msg);
            return;
        }
        snprintf(msg, sizeof(msg), "KV transfer failed for room %" PRIu64 ": PDR_%s (%s)", ctx->op_error_room,
                 pdr_errname(ctx->op_error), pdr_strerror(ctx->op_error));
        req_fail(ctx, 500, msg);
        return;
    }
    if (ctx->role == PDSIM_ROLE_PREFILL) {
        if (S.opts.prefill_answer_lag_ms > 0) {
            uv_timer_start(&ctx->timer, on_prefill_answer, (uint64_t)S.opts.prefill_answer_lag_ms, 0);
            return;
        }
        prefill_answer(ctx);
        return;
    }
    compute_then_continue(ctx); /* decode: hash what arrived */
}

static void item_done(sim_item_t *it)
{
    sim_req_t *ctx = it->ctx;
    it->op_pending = 0;
    ctx->ops_pending--;
    if (it->status == 0) {
        if (ctx->role == PDSIM_ROLE_PREFILL && ctx->compute_end_us > 0) {
            uint64_t now = uv_hrtime() / 1000;
            S.kv_tail_us_last = now > ctx->compute_end_us ? now - ctx->compute_end_us : 0;
        }
        if (ctx->role == PDSIM_ROLE_PREFILL)
            S.kv_tx += it->bytes;
        else
            S.kv_rx += it->bytes;
    } else if (ctx->op_error == 0) {
        ctx->op_error = it->status;
        ctx->op_error_room = it->room;
        /* Fail the whole request at once: cancel the other rooms. */
        for (size_t i = 0; i < ctx->n_items; i++)
            if (ctx->items[i].op_pending && S.shim != NULL)
                pdshim_cancel(S.shim, ctx->items[i].room);
    }
    if (ctx->ops_pending == 0)
        transfers_done(ctx);
    req_unref(ctx);
}

static void drain_queue(void)
{
    vllm_drain_holds();
    for (;;) {
        pdr_dqueue_t q;
        pthread_mutex_lock(&S.qlock);
        pdr_dqueue_move(&q, &S.done_items);
        pthread_mutex_unlock(&S.qlock);
        if (q.head == NULL)
            return;
        pdr_dlink_t *l;
        while ((l = pdr_dqueue_pop(&q)) != NULL)
            item_done(PDR_DLINK_ITEM(l, sim_item_t, qlink));
    }
}

static void on_async(uv_async_t *a)
{
    (void)a;
    drain_queue();
}

static void pcache_insert(sim_req_t *ctx);

static void on_shim_result(void *arg, const pdshim_result_t *res)
{
    on_shim_done(arg, res->room, res->status, res->bytes);
}

/* Publishes part k of every item of ctx (k = ctx->parts_next); with k the last part, the compute ends. */
static void parts_publish(sim_req_t *ctx)
{
    int64_t n = S.opts.kv_parts, k = ctx->parts_next++;
    if (k == n - 1) {
        ctx->compute_end_us = uv_hrtime() / 1000;
        for (size_t i = 0; i < ctx->n_items; i++) {
            uint64_t moved = 0;
            if (ctx->items[i].op_pending &&
                pdshim_room_progress(S.shim, ctx->items[i].room, &moved, NULL) == 0)
                S.parts_moved_at_end += moved;
        }
    }
    for (size_t i = 0; i < ctx->n_items; i++) {
        sim_item_t *it = &ctx->items[i];
        size_t lo = it->kv_len * (size_t)k / (size_t)n, hi = it->kv_len * (size_t)(k + 1) / (size_t)n;
        if (!it->op_pending || hi == lo)
            continue;
        pdshim_seg_t seg = {it->kv + lo, hi - lo};
        int r = pdshim_offer_part(S.shim, it->room, lo, &seg, 1);
        if (r == 0)
            S.parts_published++;
        else if (r != PDR_ENOROOM) /* ENOROOM: the room already failed, its callback says why */
            pdr_warn("pdsim: part %lld of room %" PRIu64 " refused: %s", (long long)k, it->room,
                     pdr_strerror(r));
    }
}

static void parts_arm(sim_req_t *ctx);

static void on_parts_timer(uv_timer_t *t)
{
    sim_req_t *ctx = t->data;
    if (!req_is_live(ctx) || ctx->op_error != 0 || ctx->ops_pending == 0)
        return; /* failed or canceled: the rooms' callbacks end the request */
    parts_publish(ctx);
    if (ctx->parts_next < S.opts.kv_parts)
        parts_arm(ctx);
    else if (S.pcache != NULL)
        pcache_insert(ctx);
}

/* Arms the timer for the next part, or publishes it now when it is due. */
static void parts_arm(sim_req_t *ctx)
{
    for (;;) {
        uint64_t due =
            ctx->parts_t0_us + ctx->parts_us * (uint64_t)(ctx->parts_next + 1) / (uint64_t)S.opts.kv_parts;
        uint64_t now = uv_hrtime() / 1000;
        if (due > now) {
            uv_timer_start(&ctx->timer, on_parts_timer, (due - now + 999) / 1000, 0);
            return;
        }
        parts_publish(ctx);
        if (ctx->parts_next == S.opts.kv_parts) {
            if (S.pcache != NULL)
                pcache_insert(ctx);
            return;
        }
    }
}

/* A prefill with --kv-parts: opens every item's room now, at the start of its compute, and publishes it
 * in parts over the compute time (us), so the KV moves while the rest is computed. */
static void start_parts(sim_req_t *ctx, uint64_t us)
{
    for (size_t i = 0; i < ctx->n_items; i++) {
        sim_item_t *it = &ctx->items[i];
        /* By ticket (protocol pdshim) the parts and progress still name it->room, the ticket's room. */
        int r = it->ticket != NULL
                    ? pdshim_offer_open_ticket(S.shim, it->ticket, it->kv_len, (uint32_t)S.opts.kv_timeout_ms,
                                               on_shim_result, it)
                    : pdshim_offer_open(S.shim, it->room, it->kv_len, (uint32_t)S.opts.kv_timeout_ms,
                                        on_shim_result, it);
        if (r != 0) {
            if (ctx->op_error == 0) {
                ctx->op_error = r;
                ctx->op_error_room = it->room;
            }
            break;
        }
        S.parts_rooms++;
        S.parts_bytes += it->kv_len;
        it->op_pending = 1;
        ctx->ops_pending++;
        ctx->refs++;
    }
    if (ctx->op_error != 0) {
        for (size_t i = 0; i < ctx->n_items; i++)
            if (ctx->items[i].op_pending)
                pdshim_cancel(S.shim, ctx->items[i].room);
        if (ctx->ops_pending == 0)
            transfers_done(ctx);
        return;
    }
    ctx->parts_next = 0;
    ctx->parts_t0_us = uv_hrtime() / 1000;
    ctx->parts_us = us;
    parts_arm(ctx);
}

static void start_transfers(sim_req_t *ctx)
{
    ctx->compute_end_us = uv_hrtime() / 1000;
    for (size_t i = 0; i < ctx->n_items; i++) {
        sim_item_t *it = &ctx->items[i];
        pdshim_seg_t seg = {it->kv, it->kv_len};
        int r;
        if (it->ticket != NULL && ctx->role == PDSIM_ROLE_PREFILL)
            r = pdshim_offer_ticket(S.shim, it->ticket, &seg, 1, (uint32_t)S.opts.kv_timeout_ms,
                                    on_shim_result, it);
        else if (it->ticket != NULL)
            r = pdshim_fetch_ticket(S.shim, it->ticket, &seg, 1, (uint32_t)S.opts.kv_timeout_ms,
                                    on_shim_result, it);
        else if (ctx->role == PDSIM_ROLE_PREFILL)
            r = pdshim_offer(S.shim, it->room, &seg, 1, (uint32_t)S.opts.kv_timeout_ms, on_shim_done, it);
        else
            r = pdshim_fetch(S.shim, it->host, it->port, it->room, &seg, 1, (uint32_t)S.opts.kv_timeout_ms,
                             on_shim_done, it);
        if (r != 0) {
            if (ctx->op_error == 0) {
                ctx->op_error = r;
                ctx->op_error_room = it->room;
            }
            break;
        }
        it->op_pending = 1;
        ctx->ops_pending++;
        ctx->refs++;
    }
    if (ctx->op_error != 0) {
        for (size_t i = 0; i < ctx->n_items; i++)
            if (ctx->items[i].op_pending)
                pdshim_cancel(S.shim, ctx->items[i].room);
    }
    if (ctx->ops_pending == 0)
        transfers_done(ctx);
}

static void on_stall_timeout(uv_timer_t *t)
{
    sim_req_t *ctx = t->data;
    char msg[160];
    snprintf(msg, sizeof(msg),
             "KV transfer failed for room %" PRIu64 ": PDR_ETIMEDOUT (--stall-kv: never offered)",
             ctx->items[0].room);
    if (ctx->started && req_is_live(ctx)) { /* stream_head_before_kv: only an abort can end it */
        ctx->kv_wait = 0;
        ctx->abort_pending = 1;
        pump(ctx);
        return;
    }
    req_fail(ctx, 500, msg);
}

/* After a prefill: its whole blocks join the prefix cache (an engine caches a prompt's KV once it is
 * computed). Short of memory the cache just holds less. */
static void pcache_insert(sim_req_t *ctx)
{
    for (size_t i = 0; i < ctx->n_items; i++)
        if (pdsim_pcache_insert(S.pcache, ctx->items[i].toks.ids, ctx->items[i].toks.n) != 0) {
            pdr_warn("pdsim: out of memory inserting into the prefix cache");
            break;
        }
    pdsim_kvev_flush();
}

static void after_prefill_delay(sim_req_t *ctx)
{
    if (!req_is_live(ctx))
        return;
    if (S.pcache != NULL)
        pcache_insert(ctx);
    if (ctx->role == PDSIM_ROLE_BOTH) {
        begin_output(ctx);
    } else if (ctx->vllm == VLLM_PREFILL) {
        vllm_answer_prefill(ctx);
    } else if (S.faults.stall_kv) {
        uv_timer_start(&ctx->timer, on_stall_timeout, (uint64_t)S.opts.kv_timeout_ms, 0);
    } else {
        start_transfers(ctx);
    }
}

static void on_prefill_delay(uv_timer_t *t)
{
    after_prefill_delay(t->data);
}

static void after_compute(sim_req_t *ctx)
{
    if (!req_is_live(ctx))
        return;
    if (ctx->role == PDSIM_ROLE_DECODE) {
        begin_output(ctx);
        return;
    }
    /* With the prefix cache on, only the tokens after the cached prefix are computed. */
    uint64_t computed = 0;
    for (size_t i = 0; i < ctx->n_items; i++) {
        sim_item_t *it = &ctx->items[i];
        if (S.pcache != NULL)
            it->cached = pdsim_pcache_lookup(S.pcache, it->toks.ids, it->toks.n);
        computed += it->toks.n - it->cached;
    }
    if (S.opts.kv_parts > 0 && ctx->role == PDSIM_ROLE_PREFILL && ctx->vllm != VLLM_PREFILL &&
        !S.faults.stall_kv) {
        start_parts(ctx, computed * (uint64_t)S.opts.prefill_us_per_token);
        return;
    }
    uint64_t ms = (computed * (uint64_t)S.opts.prefill_us_per_token + 999) / 1000;
    if (ms == 0) {
        after_prefill_delay(ctx);
        return;
    }
    uv_timer_start(&ctx->timer, on_prefill_delay, ms, 0);
}

/* ------------------------------------------------------------------ vLLM mode */

/*
 * A request that carries kv_transfer_params speaks vLLM's PD protocol (the fields of vLLM's NIXL
 * connector); one without them, the sglang one. The transfer itself is libpdshim's, as in sglang mode.
 *  - prefill, given {"do_remote_decode": true}: builds the KV, answers one token with kv_transfer_params
 *    {"do_remote_prefill": true, "do_remote_decode": false, "remote_engine_id", "remote_block_ids" (one
 *    shim room per item: the name of its held KV), "remote_host", "remote_port" (the shim's listener),
 *    "tp_size": 1}, and holds each item's KV (offered on the shim, owned by a vllm_hold_t, not by the HTTP
 *    request) until a decode pulls it or its lease runs out (kv_lease.c: --kv-lease-ms, renewed by the
 *    decode's heartbeats, as vLLM's NIXL connector leases KV to a remote decode). /pdsim/stats counts
 *    kv_held, kv_released (pulled), kv_expired (the lease ran out) and kv_hold_failed.
 *  - decode, given {"do_remote_prefill": true, "remote_host", "remote_port", "remote_block_ids"}: from its
 *    arrival until its pull ends (or the request does), heartbeats the prefill's leases every lease / 6;
 *    pulls each item's KV (after --kv-fetch-delay-ms), then generates from its digest, so the output
 *    equals --role both's.
 */

typedef struct vllm_hold {
    uint8_t *kv;
    size_t len;
    uint64_t room;
    int status;
    uint64_t bytes;
    pdr_dlink_t link;    /* S.holds_done (under S.qlock) */
    pdsim_lease_t lease; /* loop thread */
} vllm_hold_t;

#define VLLM_FAIL(...)                                                                                       \
    do {                                                                                                     \
        snprintf(err, errlen, __VA_ARGS__);                                                                  \
        return PDR_EINVAL;                                                                                   \
    } while (0)

static int vllm_parse(sim_req_t *ctx, const json_t *body, char *err, size_t errlen)
{
    json_t *kv = json_object_get(body, "kv_transfer_params");
    if (kv == NULL || json_is_null(kv) || ctx->role == PDSIM_ROLE_BOTH)
        return 0;
    if (!json_is_object(kv))
        VLLM_FAIL("kv_transfer_params must be an object");
    int remote_decode = json_is_true(json_object_get(kv, "do_remote_decode"));
    int remote_prefill = json_is_true(json_object_get(kv, "do_remote_prefill"));
    if (ctx->role == PDSIM_ROLE_PREFILL) {
        if (!remote_decode || remote_prefill)
            VLLM_FAIL("this pdsim is a prefill: kv_transfer_params needs do_remote_decode true and "
                      "do_remote_prefill not true");
        ctx->vllm = VLLM_PREFILL;
        for (size_t i = 0; i < ctx->n_items; i++) {
            uint64_t room = 0;
            if (pdr_random_bytes(&room, sizeof(room)) != 0)
                room = pdsim_mix64(uv_hrtime() + i);
            ctx->items[i].room = room & (uint64_t)INT64_MAX;
        }
        return 0;
    }
    if (!remote_prefill || remote_decode)
        VLLM_FAIL("this pdsim is a decode: kv_transfer_params needs do_remote_prefill true and "
                  "do_remote_decode not true");
    json_t *host = json_object_get(kv, "remote_host"), *port = json_object_get(kv, "remote_port");
    json_t *ids = json_object_get(kv, "remote_block_ids");
    if (!json_is_string(host) || !json_is_integer(port) || json_integer_value(port) < 1 ||
        json_integer_value(port) > 65535)
        VLLM_FAIL("kv_transfer_params.remote_host (a string) and remote_port (an integer) are required");
    if (!json_is_array(ids) || json_array_size(ids) != ctx->n_items)
        VLLM_FAIL("kv_transfer_params.remote_block_ids must be a list of %zu ids (one per item)",
                  ctx->n_items);
    for (size_t i = 0; i < ctx->n_items; i++) {
        json_t *id = json_array_get(ids, i);
        if (!json_is_integer(id) || json_integer_value(id) < 0)
            VLLM_FAIL("kv_transfer_params.remote_block_ids[%zu] must be a non-negative integer", i);
        ctx->items[i].room = (uint64_t)json_integer_value(id);
        ctx->items[i].host = json_string_value(host);
        ctx->items[i].port = (int)json_integer_value(port);
    }
    ctx->vllm = VLLM_DECODE;
    return 0;
}

/* A shim thread: a held KV's offer ended (pulled, expired, cancelled at shutdown). */
static void vllm_on_hold_done(void *arg, uint64_t room, int status, uint64_t bytes)
{
    vllm_hold_t *h = arg;
    (void)room;
    h->status = status;
    h->bytes = bytes;
    pthread_mutex_lock(&S.qlock);
    pdr_dlink_push(&S.holds_done, &h->link);
    pthread_mutex_unlock(&S.qlock);
    uv_async_send(&S.async);
}

static void vllm_drain_holds(void)
{
    pdr_dlink_t *done, *l;
    pthread_mutex_lock(&S.qlock);
    pdr_dlink_move(&done, &S.holds_done);
    pthread_mutex_unlock(&S.qlock);
    while ((l = pdr_dlink_pop(&done)) != NULL) {
        vllm_hold_t *h = PDR_DLINK_ITEM(l, vllm_hold_t, link);
        pdsim_lease_drop(&h->lease);
        S.kv_held--;
        if (h->status == 0) {
            S.kv_released++;
            S.kv_tx += h->bytes;
        } else if (h->lease.expired) {
            S.kv_expired++;
            pdr_info("pdsim: KV of room %" PRIu64 " freed: its lease ran out (--kv-lease-ms %" PRId64
                     ", not renewed by a decode's heartbeat)",
                     h->room, S.opts.kv_lease_ms);
        } else {
            S.kv_hold_failed++;
        }
        free(h->kv);
        free(h);
    }
}

/* The prefill's KV is ready: hand each item's buffer to a hold, offer it, answer with kv_transfer_params.
 * With --stall-kv nothing is offered (a decode's pull times out). */
static void vllm_answer_prefill(sim_req_t *ctx)
{
    json_t *ids = json_array();
    for (size_t i = 0; i < ctx->n_items; i++) {
        sim_item_t *it = &ctx->items[i];
        json_array_append_new(ids, json_integer((json_int_t)it->room));
        if (S.faults.stall_kv)
            continue;
        vllm_hold_t *h = calloc(1, sizeof(*h));
        if (h == NULL) {
            json_decref(ids);
            req_fail(ctx, 503, "pdsim: out of memory");
            return;
        }
        h->kv = it->kv;
        h->len = it->kv_len;
        h->room = it->room;
        pdshim_seg_t seg = {h->kv, h->len};
        /* The lease, not the offer's deadline, bounds the hold: the offer waits as long as the shim can. */
        int r = pdshim_offer(S.shim, h->room, &seg, 1, UINT32_MAX, vllm_on_hold_done, h);
        if (r != 0) {
            free(h);
            S.kv_hold_failed++;
            json_decref(ids);
            char msg[160];
            snprintf(msg, sizeof(msg), "pdsim: cannot hold the KV of room %" PRIu64 ": PDR_%s", it->room,
                     pdr_errname(r));
            req_fail(ctx, 500, msg);
            return;
        }
        it->kv = NULL; /* the hold owns it now */
        pdsim_lease_grant(&h->lease, h->room);
        S.kv_held++;
    }
    ctx->vllm_kv = json_pack("{s:b,s:b,s:s,s:o,s:s,s:i,s:i}", "do_remote_prefill", 1, "do_remote_decode", 0,
                             "remote_engine_id", S.engine_id, "remote_block_ids", ids, "remote_host",
                             S.opts.host, "remote_port", S.opts.bootstrap_port, "tp_size", 1);
    send_final(ctx, ctx->max_tokens);
}

/* kv_lease.c: a held KV's lease ran out; cancelling the offer frees the KV (vllm_drain_holds counts it). */
static void vllm_lease_expired(pdsim_lease_t *ls)
{
    if (S.shim != NULL)
        pdshim_cancel(S.shim, ls->room);
}

/* A vLLM decode's heartbeat for the rooms it will pull (all from one prefill). */
static void vllm_heartbeat(const sim_req_t *ctx)
{
    uint64_t rooms[64];
    size_t n = 0;
    for (size_t i = 0; i < ctx->n_items; i++) {
        rooms[n++] = ctx->items[i].room;
        if (n == sizeof(rooms) / sizeof(rooms[0]) || i + 1 == ctx->n_items) {
            pdsim_lease_heartbeat(ctx->items[0].host, ctx->items[0].port, rooms, n);
            n = 0;
        }
    }
}

/* kv_lease.c's tick on a decode: every request that still waits for its KV renews its leases. */
static void vllm_heartbeat_tick(void)
{
    for (pdr_dlink_t *l = S.reqs.head; l != NULL; l = l->next) {
        sim_req_t *ctx = PDR_DLINK_ITEM(l, sim_req_t, link);
        if (ctx->lease_hb && req_is_live(ctx))
            vllm_heartbeat(ctx);
    }
}

/* stall_kv_from_port: one link's transfers stall (the prefill on that port serves other decodes, this
 * decode pulls from other prefills). The request fails as a stalled pull would, at --kv-timeout-ms. */
static int stalled_link(const sim_req_t *ctx)
{
    for (size_t i = 0; S.faults.stall_kv_from_port > 0 && i < ctx->n_items; i++)
        if (ctx->items[i].port == S.faults.stall_kv_from_port)
            return 1;
    return 0;
}

/* fail_kv_from_port: one link's KV fetches fail at once (the decode answers 500 before its first token);
 * the prefill on that port serves other decodes, this decode pulls from other prefills. */
static int failed_link(const sim_req_t *ctx)
{
    for (size_t i = 0; S.faults.fail_kv_from_port > 0 && i < ctx->n_items; i++)
        if (ctx->items[i].port == S.faults.fail_kv_from_port)
            return 1;
    return 0;
}

static void on_fetch_delay(uv_timer_t *t)
{
    sim_req_t *ctx = t->data;
    if (!req_is_live(ctx))
        return;
    if (failed_link(ctx) && !ctx->started) {
        char msg[160];
        snprintf(msg, sizeof(msg),
                 "KV transfer failed for room %" PRIu64 ": PDR_EIO (--fail-kv-from-port %lld: injected)",
                 ctx->items[0].room, (long long)S.faults.fail_kv_from_port);
        S.kv_link_failures++;
        req_fail(ctx, 500, msg);
        return;
    }
    if (stalled_link(ctx))
        uv_timer_start(&ctx->timer, on_stall_timeout, (uint64_t)S.opts.kv_timeout_ms, 0);
    else
        start_transfers(ctx);
}

/* A decode pulls the KV, after --kv-fetch-delay-ms (a decode whose scheduler is busy). */
static void decode_fetch(sim_req_t *ctx)
{
    if (ctx->vllm == VLLM_DECODE) {
        /* vLLM's decode heartbeats a request's leases from its arrival (not its scheduling) on. */
        ctx->lease_hb = 1;
        vllm_heartbeat(ctx);
    }
    if (ctx->stream && ctx->role == PDSIM_ROLE_DECODE && S.faults.stream_head_before_kv) {
        /* An engine whose stream begins before its first token: headers and an SSE comment now. */
        ctx->kv_wait = 1;
        start_stream_response(ctx);
        uv_timer_start(&ctx->peek, on_peek, SIM_PEEK_MS,
                       SIM_PEEK_MS); /* a client close, while no byte goes */
        static const char head[] = ": pdsim: waiting for the KV\n\n";
        ctx->send.len = 0;
        if (sendbuf_append(ctx, head, sizeof(head) - 1) == 0) {
            h2o_iovec_t buf = h2o_iovec_init(ctx->send.p, ctx->send.len);
            ctx->sending = 1;
            h2o_send(ctx->req, &buf, 1, H2O_SEND_STATE_IN_PROGRESS);
        }
    }
    if (S.opts.kv_fetch_delay_ms > 0)
        uv_timer_start(&ctx->timer, on_fetch_delay, (uint64_t)S.opts.kv_fetch_delay_ms, 0);
    else
        on_fetch_delay(&ctx->timer);
}

static void vllm_stats(json_t *o)
{
    if (S.opts.role != PDSIM_ROLE_BOTH)
        pdsim_lease_stats(o);
    json_object_set_new(o, "kv_held", json_integer((json_int_t)S.kv_held));
    json_object_set_new(o, "kv_released", json_integer((json_int_t)S.kv_released));
    json_object_set_new(o, "kv_expired", json_integer((json_int_t)S.kv_expired));
    json_object_set_new(o, "kv_hold_failed", json_integer((json_int_t)S.kv_hold_failed));
}

/* The last request's whole body and X-Request-Id, next to the fields record_last() keeps. */
static void record_detail(h2o_req_t *req, json_t *body)
{
    json_t *o = S.last_pos > 0 ? S.last[(S.last_pos - 1) % SIM_LAST_MAX] : NULL;
    if (o == NULL)
        return;
    json_object_set(o, "body", body);
    ssize_t i = h2o_find_header_by_str(&req->headers, H2O_STRLIT("x-request-id"), -1);
    json_object_set_new(
        o, "x_request_id",
        i >= 0 ? json_stringn(req->headers.entries[i].value.base, req->headers.entries[i].value.len)
               : json_null());
    /* The data-parallel rank the request named: vLLM's header, and sglang's body field (in "body"). */
    i = h2o_find_header_by_str(&req->headers, H2O_STRLIT("x-data-parallel-rank"), -1);
    json_object_set_new(
        o, "x_data_parallel_rank",
        i >= 0 ? json_stringn(req->headers.entries[i].value.base, req->headers.entries[i].value.len)
               : json_null());
}

/* ------------------------------------------------------------------ request parsing */

static int toks_from_ids(const json_t *arr, pdsim_toks_t *t, char *err, size_t errlen)
{
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v)
    {
        if (!json_is_integer(v)) {
            snprintf(err, errlen, "token ids must be integers");
            return PDR_EINVAL;
        }
        if (pdsim_toks_push(t, (int64_t)json_integer_value(v)) != 0)
            return PDR_ENOMEM;
    }
    return pdsim_toks_finish(t);
}

static int toks_from_text(const json_t *s, pdsim_toks_t *t, char *err, size_t errlen)
{
    int r = pdsim_tokenize(t, json_string_value(s), json_string_length(s));
    if (r == PDR_EINVAL || r == PDR_ENOTSUP) {
        snprintf(err, errlen, "the tokenizer cannot encode the prompt: %s",
                 r == PDR_EINVAL ? "it is not valid UTF-8" : pdr_strerror(r));
        return PDR_EINVAL;
    }
    if (r != 0)
        return PDR_ENOMEM;
    return pdsim_toks_finish(t);
}

static int add_items(sim_req_t *ctx, size_t n)
{
    ctx->items = calloc(n, sizeof(*ctx->items));
    if (ctx->items == NULL)
        return PDR_ENOMEM;
    ctx->n_items = n;
    for (size_t i = 0; i < n; i++) {
        ctx->items[i].ctx = ctx;
        ctx->items[i].index = i;
    }
    return 0;
}

/* A list of prompts: each element a string or a list of ids. */
static int prompts_from_list(sim_req_t *ctx, const json_t *list, char *err, size_t errlen)
{
    size_t n = json_array_size(list);
    if (n == 0) {
        snprintf(err, errlen, "the prompt list is empty");
        return PDR_EINVAL;
    }
    if (add_items(ctx, n) != 0)
        return PDR_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(list, i);
        int r;
        if (json_is_string(e))
            r = toks_from_text(e, &ctx->items[i].toks, err, errlen);
        else if (json_is_array(e))
            r = toks_from_ids(e, &ctx->items[i].toks, err, errlen);
        else {
            snprintf(err, errlen, "each prompt must be a string or a list of token ids");
            r = PDR_EINVAL;
        }
        if (r != 0)
            return r;
    }
    return 0;
}

static int text_error(int r, char *err, size_t errlen)
{
    if (r != PDR_EINVAL && r != PDR_ENOTSUP)
        return PDR_ENOMEM;
    snprintf(err, errlen, "the tokenizer cannot encode a message: %s",
             r == PDR_EINVAL ? "it is not valid UTF-8" : pdr_strerror(r));
    return PDR_EINVAL;
}

static int append_text(pdsim_toks_t *t, const json_t *s)
{
    return json_is_string(s) ? pdsim_tokenize(t, json_string_value(s), json_string_length(s)) : 0;
}

static int parse_prompts(sim_req_t *ctx, const json_t *body, char *err, size_t errlen)
{
    if (ctx->route == ROUTE_GENERATE) {
        json_t *ids = json_object_get(body, "input_ids"), *text = json_object_get(body, "text");
        if (ids != NULL && !json_is_null(ids)) {
            if (!json_is_array(ids)) {
                snprintf(err, errlen, "input_ids must be a list");
                return PDR_EINVAL;
            }
            if (json_array_size(ids) > 0 && json_is_array(json_array_get(ids, 0))) {
                ctx->batch = 1;
                return prompts_from_list(ctx, ids, err, errlen);
            }
            if (add_items(ctx, 1) != 0)
                return PDR_ENOMEM;
            return toks_from_ids(ids, &ctx->items[0].toks, err, errlen);
        }
        if (json_is_string(text)) {
            if (add_items(ctx, 1) != 0)
                return PDR_ENOMEM;
            return toks_from_text(text, &ctx->items[0].toks, err, errlen);
        }
        if (json_is_array(text)) {
            ctx->batch = 1;
            return prompts_from_list(ctx, text, err, errlen);
        }
        snprintf(err, errlen, "either text or input_ids is required");
        return PDR_EINVAL;
    }
    if (ctx->route == ROUTE_COMPLETIONS) {
        json_t *p = json_object_get(body, "prompt");
        if (json_is_string(p)) {
            if (add_items(ctx, 1) != 0)
                return PDR_ENOMEM;
            return toks_from_text(p, &ctx->items[0].toks, err, errlen);
        }
        if (json_is_array(p)) {
            json_t *first = json_array_get(p, 0);
            if (first == NULL || json_is_integer(first)) {
                if (add_items(ctx, 1) != 0)
                    return PDR_ENOMEM;
                return toks_from_ids(p, &ctx->items[0].toks, err, errlen);
            }
            ctx->batch = 1;
            return prompts_from_list(ctx, p, err, errlen);
        }
        snprintf(err, errlen, "prompt is required (a string, a list of token ids or a list of prompts)");
        return PDR_EINVAL;
    }
    json_t *msgs = json_object_get(body, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        snprintf(err, errlen, "messages must be a non-empty list");
        return PDR_EINVAL;
    }
    json_t *nj = json_object_get(body, "n");
    json_int_t n = 1;
    if (nj != NULL && !json_is_null(nj)) {
        if (!json_is_integer(nj) || json_integer_value(nj) < 1 || json_integer_value(nj) > 128) {
            snprintf(err, errlen, "n must be an integer in [1, 128]");
            return PDR_EINVAL;
        }
        n = json_integer_value(nj);
    }
    ctx->batch = n > 1;
    if (add_items(ctx, (size_t)n) != 0)
        return PDR_ENOMEM;
    pdsim_toks_t *t = &ctx->items[0].toks;
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m)
    {
        if (!json_is_object(m)) {
            snprintf(err, errlen, "each message must be an object");
            return PDR_EINVAL;
        }
        json_t *content = json_object_get(m, "content");
        int r;
        if ((r = append_text(t, json_object_get(m, "role"))) != 0 || (r = append_text(t, content)) != 0)
            return text_error(r, err, errlen);
        if (json_is_array(content)) { /* content parts: [{"type":"text","text":...}] */
            size_t k;
            json_t *part;
            json_array_foreach(content, k, part)
            {
                if ((r = append_text(t, json_object_get(part, "text"))) != 0)
                    return text_error(r, err, errlen);
            }
        }
    }
    if (pdsim_toks_finish(t) != 0)
        return PDR_ENOMEM;
    for (size_t k = 1; k < (size_t)n; k++) {
        for (size_t x = 0; x < t->n; x++)
            if (pdsim_toks_push(&ctx->items[k].toks, t->ids[x]) != 0)
                return PDR_ENOMEM;
    }
    return 0;
}

/* Element i of a bootstrap field: the array element in a batch, the value itself otherwise. */
static json_t *field_at(const sim_req_t *ctx, json_t *v, size_t i, int *bad)
{
    if (v == NULL || json_is_null(v))
        return NULL;
    if (json_is_array(v)) {
        if (json_array_size(v) != ctx->n_items) {
            *bad = 1;
            return NULL;
        }
        return json_array_get(v, i);
    }
    return v;
}

static int parse_bootstrap(sim_req_t *ctx, const json_t *body, char *err, size_t errlen)
{
    json_t *rooms = json_object_get(body, "bootstrap_room");
    json_t *hosts = json_object_get(body, "bootstrap_host");
    json_t *ports = json_object_get(body, "bootstrap_port");
    int decode = ctx->role == PDSIM_ROLE_DECODE;
    if (json_is_integer(rooms) && ctx->n_items > 1) {
        snprintf(err, errlen, "bootstrap_room must be a list of %zu rooms for this batch", ctx->n_items);
        return PDR_EINVAL;
    }
    for (size_t i = 0; i < ctx->n_items; i++) {
        sim_item_t *it = &ctx->items[i];
        int bad = 0;
        json_t *r = field_at(ctx, rooms, i, &bad);
        if (bad || !json_is_integer(r) || json_integer_value(r) < 0) {
            snprintf(err, errlen, "bootstrap_room is required: an integer in [0, 2^63-1]%s",
                     ctx->batch ? ", one per batch item" : "");
            return PDR_EINVAL;
        }
        it->room = (uint64_t)json_integer_value(r);
        if (!decode)
            continue;
        json_t *h = field_at(ctx, hosts, i, &bad);
        json_t *p = field_at(ctx, ports, i, &bad);
        /* A null or absent bootstrap_port is the decode's own --bootstrap-port, as an sglang scheduler
         * puts its --disaggregation-bootstrap-port into a request that names none (a router given
         * "--prefill URL" without a port sends null). */
        int port_default = p == NULL || json_is_null(p);
        if (bad || !json_is_string(h) ||
            (!port_default &&
             (!json_is_integer(p) || json_integer_value(p) < 1 || json_integer_value(p) > 65535))) {
            snprintf(err, errlen,
                     "bootstrap_host (string) is required on a decode, and bootstrap_port an integer in "
                     "[1, 65535] or null (null: this decode's --bootstrap-port, %d)",
                     S.opts.bootstrap_port);
            return PDR_EINVAL;
        }
        it->host = json_string_value(h);
        it->port = port_default ? S.opts.bootstrap_port : (int)json_integer_value(p);
    }
    return 0;
}

/* --ticket-key: every item needs a pd_ticket (a string, or a list of one per item in a batch) that
 * verifies, names the item's room and this worker (the prefill's transport port; the decode's identity).
 * Returns -1 when all pass, else the refusal's TICKET_* reason with the message in err. Replay is the
 * shim's to see, when the KV moves (transfers_done). */
static int parse_tickets(sim_req_t *ctx, const json_t *body, char *err, size_t errlen)
{
    json_t *tickets = json_object_get(body, "pd_ticket");
    for (size_t i = 0; i < ctx->n_items; i++) {
        sim_item_t *it = &ctx->items[i];
        int bad = 0;
        json_t *t = field_at(ctx, tickets, i, &bad);
        if (tickets == NULL) {
            snprintf(err, errlen, "pdsim: pd_ticket refused (missing): a signed ticket is required%s",
                     ctx->batch ? ", one per batch item" : "");
            return TICKET_MISSING;
        }
        if (bad || !json_is_string(t)) {
            snprintf(err, errlen, "pdsim: pd_ticket refused (malformed): expected %s",
                     ctx->batch ? "a list of one ticket string per batch item" : "a ticket string");
            return TICKET_MALFORMED;
        }
        pdshim_ticket_info_t info;
        int rc = pdshim_ticket_inspect(S.shim, json_string_value(t), &info);
        int why = rc == 0 ? -1 : ticket_reason(rc);
        if (rc != 0 && why < 0)
            why = TICKET_MALFORMED;
        if (why < 0 && info.room != it->room)
            why = TICKET_WRONG_ROOM;
        if (why < 0 && ((ctx->role == PDSIM_ROLE_PREFILL && info.prefill_port != S.opts.bootstrap_port) ||
                        (ctx->role == PDSIM_ROLE_DECODE && S.ticket_identity[0] != '\0' &&
                         strcmp(info.decode_id, S.ticket_identity) != 0)))
            why = TICKET_WRONG_PEER;
        if (why >= 0) {
            snprintf(err, errlen, "pdsim: pd_ticket refused (%s) for item %zu: %s", ticket_reasons[why], i,
                     why == TICKET_WRONG_ROOM ? "the ticket names another room than bootstrap_room"
                     : why == TICKET_WRONG_PEER && ctx->role == PDSIM_ROLE_PREFILL
                         ? "the ticket names another prefill transport port"
                     : why == TICKET_WRONG_PEER ? "the ticket names another decode"
                                                : pdshim_strerror(rc));
            return why;
        }
        it->ticket = json_string_value(t);
    }
    S.tickets_accepted += ctx->n_items;
    return -1;
}

static int parse_max_tokens(sim_req_t *ctx, const json_t *body, char *err, size_t errlen)
{
    json_t *v = NULL;
    if (ctx->route == ROUTE_GENERATE) {
        json_t *sp = json_object_get(body, "sampling_params");
        if (json_is_object(sp))
            v = json_object_get(sp, "max_new_tokens");
    } else {
        v = json_object_get(body, "max_tokens");
        if ((v == NULL || json_is_null(v)) && ctx->route == ROUTE_CHAT)
            v = json_object_get(body, "max_completion_tokens");
    }
    if (v == NULL || json_is_null(v)) {
        ctx->max_tokens = (uint64_t)S.opts.max_tokens_default;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > PDSIM_MAX_TOKENS) {
        snprintf(err, errlen, "the maximum number of tokens must be an integer in [0, %d]", PDSIM_MAX_TOKENS);
        return PDR_EINVAL;
    }
    ctx->max_tokens = (uint64_t)json_integer_value(v);
    return 0;
}

/* stream_options (OpenAI routes): {"include_usage": bool} asks for a usage chunk before [DONE] on a
 * stream; ignored when the answer is not streamed, as sglang ignores it. */
static int parse_stream_options(sim_req_t *ctx, const json_t *body, char *err, size_t errlen)
{
    json_t *so = json_object_get(body, "stream_options");
    if (ctx->route == ROUTE_GENERATE || so == NULL || json_is_null(so))
        return 0;
    json_t *iu = json_is_object(so) ? json_object_get(so, "include_usage") : NULL;
    if (!json_is_object(so) || (iu != NULL && !json_is_null(iu) && !json_is_boolean(iu))) {
        snprintf(err, errlen, "stream_options must be an object whose include_usage is a boolean");
        return PDR_EINVAL;
    }
    ctx->include_usage = ctx->stream && json_is_true(iu);
    return 0;
}

static json_t *field_or_null(const json_t *body, const char *key)
{
    json_t *v = json_object_get(body, key);
    return v != NULL ? json_incref(v) : json_null();
}

static void count_port(const json_t *body)
{
    json_t *v = json_object_get(body, "bootstrap_port");
    int64_t port;
    if (json_is_integer(v))
        port = json_integer_value(v);
    else if (S.opts.role == PDSIM_ROLE_DECODE && (v == NULL || json_is_null(v)) &&
             json_object_get(body, "bootstrap_room") != NULL)
        port = S.opts.bootstrap_port; /* the port such a decode pulls from: see parse_bootstrap */
    else
        return;
    for (size_t i = 0; i < S.n_by_port; i++)
        if (S.by_port[i][0] == port) {
            S.by_port[i][1]++;
            return;
        }
    if (S.n_by_port < SIM_PORTS_MAX) {
        S.by_port[S.n_by_port][0] = port;
        S.by_port[S.n_by_port++][1] = 1;
    }
}

static void record_last(const char *path, const json_t *body)
{
    count_port(body);
    json_t *o = json_pack(
        "{s:s,s:o,s:o,s:o,s:b}", "path", path, "room", field_or_null(body, "bootstrap_room"),
        "bootstrap_host", field_or_null(body, "bootstrap_host"), "bootstrap_port",
        field_or_null(body, "bootstrap_port"), "stream", json_is_true(json_object_get(body, "stream")));
    if (o == NULL)
        return;
    json_decref(S.last[S.last_pos % SIM_LAST_MAX]);
    S.last[S.last_pos % SIM_LAST_MAX] = o;
    S.last_pos++;
}

static void handle_generate(h2o_req_t *req, enum sim_route route, const char *path)
{
    S.requests++;
    S.arrivals_us[S.arrivals_pos++ % SIM_LAST_MAX] = uv_hrtime() / 1000;
    if (S.faults.fail_status != 0) {
        char msg[96];
        snprintf(msg, sizeof(msg), "pdsim: injected failure (--fail-status %d)", S.faults.fail_status);
        S.errors++;
        send_error(req, S.faults.fail_status, msg);
        return;
    }
    sim_req_t *ctx = req_new(req, route);
    if (ctx == NULL) {
        send_error(req, 503, "pdsim: out of memory");
        return;
    }
    if (S.faults.hang_before_headers) {
        ctx->hang = 1; /* accepted, never answered; the peek timer or dispose notices the client leaving */
        return;
    }
    json_error_t jerr;
    char err[256];
    ctx->body = json_loadb(req->entity.base, req->entity.len, 0, &jerr);
    if (ctx->body == NULL || !json_is_object(ctx->body)) {
        snprintf(err, sizeof(err), "malformed JSON body: %s",
                 ctx->body == NULL ? jerr.text : "not an object");
        req_fail(ctx, 400, err);
        return;
    }
    record_last(path, ctx->body);
    record_detail(req, ctx->body);
    ctx->stream = json_is_true(json_object_get(ctx->body, "stream"));
    ctx->return_logprob =
        route == ROUTE_GENERATE && json_is_true(json_object_get(ctx->body, "return_logprob"));
    err[0] = 0;
    int r = parse_stream_options(ctx, ctx->body, err, sizeof(err));
    if (r == 0)
        r = parse_prompts(ctx, ctx->body, err, sizeof(err));
    if (r == 0)
        r = parse_max_tokens(ctx, ctx->body, err, sizeof(err));
    if (r == 0)
        r = vllm_parse(ctx, ctx->body, err, sizeof(err));
    if (r == 0 && ctx->role == PDSIM_ROLE_DECODE && ctx->vllm == VLLM_OFF && S.opts.local_prefill &&
        json_object_get(ctx->body, "bootstrap_room") == NULL) {
        /* --local-prefill: a plain request (no bootstrap fields, no kv_transfer_params) is computed here,
         * prompt and all, as a vLLM decode does with a request its router did not disaggregate. */
        ctx->role = PDSIM_ROLE_BOTH;
        S.local_prefills++;
    }
    if (r == 0 && ctx->role != PDSIM_ROLE_BOTH && ctx->vllm == VLLM_OFF)
        r = parse_bootstrap(ctx, ctx->body, err, sizeof(err));
    if (r == 0 && ctx->role != PDSIM_ROLE_BOTH && ctx->vllm == VLLM_OFF && S.opts.n_ticket_keys > 0) {
        int why = parse_tickets(ctx, ctx->body, err, sizeof(err));
        if (why >= 0) {
            S.ticket_refused[why]++;
            req_fail(ctx, 403, err);
            return;
        }
    }
    if (r != 0) {
        if (r == PDR_ENOMEM)
            req_fail(ctx, 503, "pdsim: out of memory");
        else
            req_fail(ctx, 400, err);
        return;
    }
    if (ctx->role == PDSIM_ROLE_BOTH)
        snprintf(ctx->id, sizeof(ctx->id), "pdsim-%" PRIu64, ++S.counter);
    else
        snprintf(ctx->id, sizeof(ctx->id), "pdsim-%" PRIu64, ctx->items[0].room);
    uint64_t bpt = (uint64_t)S.opts.kv_bytes_per_token, total = 0;
    for (size_t i = 0; i < ctx->n_items; i++)
        total += (uint64_t)ctx->items[i].toks.n * bpt;
    if (total > PDSIM_KV_CAP) {
        snprintf(err, sizeof(err), "the request's KV (%" PRIu64 " bytes) exceeds pdsim's 1 GiB cap", total);
        req_fail(ctx, 413, err);
        return;
    }
    for (size_t i = 0; i < ctx->n_items; i++) {
        sim_item_t *it = &ctx->items[i];
        it->kv_len = it->toks.n * (size_t)bpt;
        it->kv = malloc(it->kv_len);
        if (it->kv == NULL) {
            req_fail(ctx, 503, "pdsim: out of memory for the KV buffer");
            return;
        }
    }
    if (ctx->role == PDSIM_ROLE_DECODE && S.opts.kv_capacity_bytes > 0) {
        /* Its KV while it runs: the prompt's and every output token's. */
        uint64_t need = 0;
        for (size_t i = 0; i < ctx->n_items; i++)
            need += ((uint64_t)ctx->items[i].toks.n + ctx->max_tokens) * bpt;
        if (S.kv_used + need > (uint64_t)S.opts.kv_capacity_bytes) {
            S.kv_capacity_refusals++;
            snprintf(err, sizeof(err),
                     "pdsim: KV cache full (%" PRIu64 " of %" PRId64
                     " bytes held, this request needs %" PRIu64 ")",
                     S.kv_used, S.opts.kv_capacity_bytes, need);
            req_fail(ctx, 503, err);
            return;
        }
        S.kv_used += need;
        ctx->kv_held = need;
        if (S.kv_used > S.kv_used_max)
            S.kv_used_max = S.kv_used;
        report_load();
    }
    if (ctx->role == PDSIM_ROLE_DECODE)
        decode_fetch(ctx);
    else
        compute_then_continue(ctx);
}

/* ------------------------------------------------------------------ other routes */

static void send_stats(h2o_req_t *req)
{
    json_t *last = json_array();
    size_t n = S.last_pos < SIM_LAST_MAX ? S.last_pos : SIM_LAST_MAX;
    for (size_t k = S.last_pos - n; k < S.last_pos; k++)
        json_array_append(last, S.last[k % SIM_LAST_MAX]);
    json_t *o = json_pack("{s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:o}", "role", role_name(S.opts.role),
                          "requests", (json_int_t)S.requests, "completed", (json_int_t)S.completed,
                          "cancelled", (json_int_t)S.cancelled, "errors", (json_int_t)S.errors, "resets",
                          (json_int_t)S.resets, "inflight", (json_int_t)S.nreqs, "kv_bytes_received",
                          (json_int_t)S.kv_rx, "kv_bytes_sent", (json_int_t)S.kv_tx, "last", last);
    json_t *arr = json_array(), *ports = json_object();
    size_t na = S.arrivals_pos < SIM_LAST_MAX ? S.arrivals_pos : SIM_LAST_MAX;
    for (size_t k = S.arrivals_pos - na; k < S.arrivals_pos; k++)
        json_array_append_new(arr, json_integer((json_int_t)S.arrivals_us[k % SIM_LAST_MAX]));
    for (size_t i = 0; i < S.n_by_port; i++) {
        char key[24];
        snprintf(key, sizeof(key), "%lld", (long long)S.by_port[i][0]);
        json_object_set_new(ports, key, json_integer((json_int_t)S.by_port[i][1]));
    }
    json_object_set_new(o, "arrivals_us", arr);
    json_object_set_new(o, "by_bootstrap_port", ports);
    json_object_set_new(o, "kv_link_failures", json_integer((json_int_t)S.kv_link_failures));
    vllm_stats(o);
    json_object_set_new(o, "local_prefills", json_integer((json_int_t)S.local_prefills));
    json_object_set_new(o, "inflight_max", json_integer((json_int_t)S.active_max));
    json_t *tr = json_object();
    for (size_t k = 0; k < sizeof(ticket_reasons) / sizeof(ticket_reasons[0]); k++)
        json_object_set_new(tr, ticket_reasons[k], json_integer((json_int_t)S.ticket_refused[k]));
    json_object_set_new(o, "tickets",
                        json_pack("{s:b,s:I,s:o}", "enabled", S.opts.n_ticket_keys > 0, "accepted",
                                  (json_int_t)S.tickets_accepted, "refused", tr));
    json_object_set_new(o, "kv_parts",
                        json_pack("{s:I,s:I,s:I,s:I,s:I,s:I}", "parts", (json_int_t)S.opts.kv_parts, "rooms",
                                  (json_int_t)S.parts_rooms, "published", (json_int_t)S.parts_published,
                                  "moved_at_compute_end", (json_int_t)S.parts_moved_at_end, "bytes",
                                  (json_int_t)S.parts_bytes, "tail_us_last", (json_int_t)S.kv_tail_us_last));
    json_object_set_new(o, "kv_capacity_bytes", json_integer((json_int_t)S.opts.kv_capacity_bytes));
    json_object_set_new(o, "kv_used_bytes", json_integer((json_int_t)S.kv_used));
    json_object_set_new(o, "kv_used_max_bytes", json_integer((json_int_t)S.kv_used_max));
    json_object_set_new(o, "kv_capacity_refusals", json_integer((json_int_t)S.kv_capacity_refusals));
    if (S.shim != NULL) {
        uint8_t inst[16];
        char hex[33];
        pdshim_instance_id(S.shim, inst);
        for (int i = 0; i < 16; i++)
            snprintf(hex + 2 * i, 3, "%02x", inst[i]);
        uint64_t sent = 0, failed = 0, dropped = 0;
        pdshim_events_stats(S.shim, &sent, &failed, &dropped);
        json_object_set_new(o, "instance_id", json_string(hex));
        json_object_set_new(o, "event_batches_sent", json_integer((json_int_t)sent));
        json_object_set_new(o, "event_batches_failed", json_integer((json_int_t)failed));
        json_object_set_new(o, "events_dropped", json_integer((json_int_t)dropped));
    }
    pdsim_pcache_stats_t pc = {0};
    if (S.pcache != NULL)
        pdsim_pcache_stats(S.pcache, &pc);
    json_object_set_new(o, "prefix_cache",
                        json_pack("{s:b,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "enabled", S.pcache != NULL,
                                  "hit_tokens", (json_int_t)pc.hit_tokens, "miss_tokens",
                                  (json_int_t)pc.miss_tokens, "blocks", (json_int_t)pc.blocks, "max_blocks",
                                  (json_int_t)pc.max_blocks, "block_tokens", (json_int_t)pc.block_tokens,
                                  "inserted_blocks", (json_int_t)pc.inserted_blocks, "evicted_blocks",
                                  (json_int_t)pc.evicted_blocks));
    pdsim_kvev_stats_t ks;
    pdsim_kvev_stats(&ks);
    json_object_set_new(o, "kv_events",
                        json_pack("{s:b,s:I,s:I,s:I,s:I,s:I}", "enabled", ks.enabled, "messages",
                                  (json_int_t)ks.messages, "dropped", (json_int_t)ks.dropped, "malformed",
                                  (json_int_t)ks.malformed, "events", (json_int_t)ks.events, "next_seq",
                                  (json_int_t)ks.next_seq));
    send_json(req, 200, o);
    json_decref(o);
}

static json_t *faults_obj(void)
{
    const pdsim_faults_t *f = &S.faults;
    return json_pack("{s:b,s:i,s:i,s:b,s:I,s:I,s:b,s:I,s:i,s:b,s:I,s:b,s:I}", "fail_health", f->fail_health,
                     "health_status", f->health_status, "fail_status", f->fail_status, "hang_before_headers",
                     f->hang_before_headers, "drip_ms", (json_int_t)f->drip_ms, "reset_after_tokens",
                     (json_int_t)f->reset_after_tokens, "stall_kv", f->stall_kv, "die_after",
                     (json_int_t)f->die_after, "fail_after_kv", f->fail_after_kv, "stream_head_before_kv",
                     f->stream_head_before_kv, "stall_kv_from_port", (json_int_t)f->stall_kv_from_port,
                     "reset_answer", f->reset_answer, "fail_kv_from_port", (json_int_t)f->fail_kv_from_port);
}

static void set_die_after(int64_t n)
{
    S.faults.die_after = n;
    S.die_at = n > 0 ? S.completed + (uint64_t)n : 0;
}

static int fault_int(json_t *body, const char *key, int64_t min, int64_t max, int64_t *out)
{
    json_t *v = json_object_get(body, key);
    if (v == NULL)
        return 0;
    if (json_is_boolean(v)) {
        *out = json_is_true(v);
    } else if (json_is_integer(v) && json_integer_value(v) >= min && json_integer_value(v) <= max) {
        *out = json_integer_value(v);
    } else if (json_is_null(v)) {
        *out = 0;
    } else {
        return PDR_EINVAL;
    }
    return 0;
}

static void handle_fault(h2o_req_t *req)
{
    json_error_t jerr;
    json_t *body = json_loadb(req->entity.base, req->entity.len, 0, &jerr);
    if (!json_is_object(body)) {
        json_decref(body);
        send_error(req, 400, "malformed JSON body: expected an object of fault knobs");
        return;
    }
    pdsim_faults_t f = S.faults;
    int64_t die = f.die_after, v;
    int bad = 0;
    if (json_is_true(json_object_get(body, "reset"))) {
        memset(&f, 0, sizeof(f));
        die = 0;
    }
#define KNOB(key, field, min, max)                                                                           \
    v = f.field;                                                                                             \
    if (fault_int(body, key, min, max, &v) != 0)                                                             \
        bad = 1;                                                                                             \
    else                                                                                                     \
        f.field = v;
    KNOB("fail_health", fail_health, 0, 1)
    KNOB("fail_status", fail_status, 0, 599)
    KNOB("fail_after_kv", fail_after_kv, 0, 599)
    KNOB("health_status", health_status, 0, 599)
    KNOB("hang_before_headers", hang_before_headers, 0, 1)
    KNOB("drip_ms", drip_ms, 0, 3600000)
    KNOB("reset_after_tokens", reset_after_tokens, 0, PDSIM_MAX_TOKENS)
    KNOB("stall_kv", stall_kv, 0, 1)
    KNOB("stream_head_before_kv", stream_head_before_kv, 0, 1)
    KNOB("stall_kv_from_port", stall_kv_from_port, 0, 65535)
    KNOB("reset_answer", reset_answer, 0, 1)
    KNOB("fail_kv_from_port", fail_kv_from_port, 0, 65535)
#undef KNOB
    int64_t kv_drop = -1, kv_bad = -1;
    if (fault_int(body, "kv_events_drop_every", 0, INT32_MAX, &kv_drop) != 0 ||
        fault_int(body, "kv_events_malformed", 0, 1000, &kv_bad) != 0)
        bad = 1;
    int die_set = json_object_get(body, "die_after") != NULL || json_is_true(json_object_get(body, "reset"));
    if (fault_int(body, "die_after", 0, INT32_MAX, &die) != 0)
        bad = 1;
    if (fault_int(body, "prefill_us_per_token", 0, 10000000, &S.opts.prefill_us_per_token) != 0 ||
        fault_int(body, "decode_us_per_token", 0, 10000000, &S.opts.decode_us_per_token) != 0)
        bad = 1;
    json_decref(body);
    if (bad || (f.fail_status != 0 && f.fail_status < 400) ||
        (f.health_status != 0 && f.health_status < 200)) {
        send_error(req, 400,
                   "bad fault knob: booleans, or integers in range (fail_status 400-599 or 0, health_status "
                   "200-599 or 0)");
        return;
    }
    S.faults = f;
    if (die_set)
        set_die_after(die);
    pdsim_kvev_fault(kv_drop, kv_bad);
    json_t *o = faults_obj();
    send_json(req, 200, o);
    json_decref(o);
}

static int path_is(const h2o_req_t *req, const char *p)
{
    size_t n = strlen(p);
    return req->path_normalized.len == n && memcmp(req->path_normalized.base, p, n) == 0;
}

static int method_is(const h2o_req_t *req, const char *m)
{
    size_t n = strlen(m);
    return req->method.len == n && memcmp(req->method.base, m, n) == 0;
}

/* Tests: the header fields of the last request of each kind, as h2o received them ([[name, value], ...]),
 * answered by GET /pdsim/last_headers. */
static void record_headers(h2o_req_t *req)
{
    int kind = path_is(req, "/health") || path_is(req, "/health_generate") ? 1
               : path_is(req, "/v1/models")                                ? 2
                                                                           : 0;
    if (kind == 0 && !path_is(req, "/generate") && !path_is(req, "/v1/completions") &&
        !path_is(req, "/v1/chat/completions"))
        return;
    json_t *a = json_array();
    for (size_t i = 0; a != NULL && i < req->headers.size; i++) {
        const h2o_header_t *e = &req->headers.entries[i];
        json_array_append_new(a,
                              json_pack("[s%s%]", e->name->base, e->name->len, e->value.base, e->value.len));
    }
    if (a == NULL)
        return;
    json_decref(S.last_headers[kind]);
    S.last_headers[kind] = a;
}

static void send_last_headers(h2o_req_t *req)
{
    json_t *o = json_pack("{s:O?,s:O?,s:O?}", "generate", S.last_headers[0], "health", S.last_headers[1],
                          "models", S.last_headers[2]);
    send_json(req, 200, o);
    json_decref(o);
}

static int on_req(h2o_handler_t *self, h2o_req_t *req)
{
    (void)self;
    record_headers(req);
    static const struct {
        const char *path;
        enum sim_route route;
    } gen_routes[] = {{"/generate", ROUTE_GENERATE},
                      {"/v1/completions", ROUTE_COMPLETIONS},
                      {"/v1/chat/completions", ROUTE_CHAT}};
    for (size_t i = 0; i < sizeof(gen_routes) / sizeof(gen_routes[0]); i++) {
        if (path_is(req, gen_routes[i].path)) {
            if (!method_is(req, "POST"))
                send_error(req, 405, "use POST");
            else if (S.shutting_down)
                send_error(req, 503, "pdsim is shutting down");
            else
                handle_generate(req, gen_routes[i].route, gen_routes[i].path);
            return 0;
        }
    }
    if (path_is(req, "/health") || path_is(req, "/health_generate")) {
        if (S.faults.fail_health || S.shutting_down)
            send_body(req, 503, "text/plain", "unhealthy\n", 10);
        else if (S.faults.health_status != 0)
            send_body(req, S.faults.health_status, "text/plain", "health_status\n", 14);
        else
            send_body(req, 200, "text/plain", "ok", 2);
    } else if (path_is(req, "/v1/models")) {
        json_t *o = json_pack("{s:s,s:[{s:s,s:s,s:i,s:s,s:s}]}", "object", "list", "data", "id", S.opts.model,
                              "object", "model", "created", 0, "owned_by", "pdsim", "root", S.opts.model);
        send_json(req, 200, o);
        json_decref(o);
    } else if (path_is(req, "/get_model_info") || path_is(req, "/model_info")) {
        json_t *o = json_pack("{s:s,s:s,s:b}", "model_path", S.opts.model, "tokenizer_path", S.opts.model,
                              "is_generation", 1);
        send_json(req, 200, o);
        json_decref(o);
    } else if (path_is(req, "/get_server_info") || path_is(req, "/server_info")) {
        json_t *o = json_pack("{s:s,s:s,s:I,s:I}", "model_path", S.opts.model, "disaggregation_mode",
                              role_name(S.opts.role), "port", (json_int_t)S.opts.port, "dp_size",
                              (json_int_t)(S.opts.dp_size > 0 ? S.opts.dp_size : 1));
        send_json(req, 200, o);
        json_decref(o);
    } else if (path_is(req, "/flush_cache")) {
        if (method_is(req, "POST"))
            send_body(req, 200, "text/plain", "Cache flushed.\n", 15);
        else
            send_error(req, 405, "use POST");
    } else if (path_is(req, "/get_load")) {
        /* sglang's shape: one entry per data-parallel rank (pdsim has one); tokens = requests in flight. */
        json_t *o = json_pack("[{s:i,s:I,s:i,s:I}]", "dp_rank", 0, "num_reqs", (json_int_t)S.nreqs,
                              "num_waiting_reqs", 0, "num_tokens", (json_int_t)S.nreqs);
        send_json(req, 200, o);
        json_decref(o);
    } else if (path_is(req, "/pdsim/stats")) {
        send_stats(req);
    } else if (path_is(req, "/pdsim/last_headers")) {
        send_last_headers(req);
    } else if (path_is(req, "/pdsim/fault")) {
        if (method_is(req, "POST")) {
            handle_fault(req);
        } else {
            json_t *o = faults_obj();
            send_json(req, 200, o);
            json_decref(o);
        }
    } else {
        send_error(req, 404, "no such route on pdsim");
    }
    return 0;
}

/* ------------------------------------------------------------------ listener, start, shutdown */

static void on_conn_close(uv_handle_t *h)
{
    sim_conn_t *c = (sim_conn_t *)h;
    pdr_dqueue_unlink(&S.conns, &c->link);
    S.nconns--;
    free(c);
    if (S.shutting_down && S.nreqs == 0 && S.nconns == 0 && S.on_drained != NULL)
        S.on_drained();
}

static void on_accept(uv_stream_t *listener, int status)
{
    if (status != 0)
        return;
    sim_conn_t *c = malloc(sizeof(*c));
    if (c == NULL)
        return;
    uv_tcp_init(listener->loop, &c->tcp);
    if (uv_accept(listener, (uv_stream_t *)&c->tcp) != 0) {
        uv_close((uv_handle_t *)&c->tcp, (uv_close_cb)free);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    pdr_dqueue_append(&S.conns, &c->link);
    S.nconns++;
    h2o_accept(&S.actx, h2o_uv_socket_create((uv_stream_t *)&c->tcp, on_conn_close));
}

int pdsim_server_start(uv_loop_t *loop, const pdsim_opts_t *opts)
{
    S.loop = loop;
    S.opts = *opts;
    S.faults = opts->faults;
    set_die_after(opts->faults.die_after);
    S.conns = S.reqs = (pdr_dqueue_t){NULL, NULL};
    pthread_mutex_init(&S.qlock, NULL);
    uv_async_init(loop, &S.async, on_async);
    uv_timer_init(loop, &S.die_timer);
    if (opts->prefix_cache_tokens > 0 && opts->role != PDSIM_ROLE_DECODE) {
        S.pcache = pdsim_pcache_new((uint64_t)opts->prefix_cache_tokens, (uint64_t)opts->cache_block_tokens);
        if (S.pcache == NULL) {
            pdr_error("pdsim: cannot allocate the prefix cache (%" PRId64 " tokens)",
                      opts->prefix_cache_tokens);
            return PDR_ENOMEM;
        }
        if (opts->kv_events_endpoint != NULL && pdsim_kvev_start(opts, S.pcache) != 0)
            return PDR_EIO;
    }

    h2o_config_init(&S.config);
    S.config.max_request_entity_size = SIM_MAX_BODY;
    h2o_hostconf_t *host = h2o_config_register_host(&S.config, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    h2o_pathconf_t *path = h2o_config_register_path(host, "/", 0);
    h2o_handler_t *handler = h2o_create_handler(path, sizeof(*handler));
    handler->on_req = on_req;
    h2o_context_init(&S.ctx, loop, &S.config);
    S.actx.ctx = &S.ctx;
    S.actx.hosts = S.config.hosts;
    if (opts->tls_cert != NULL || opts->tls_key != NULL) {
        SSL_CTX *tls = SSL_CTX_new(TLS_server_method());
        if (tls == NULL || opts->tls_cert == NULL || opts->tls_key == NULL ||
            SSL_CTX_use_certificate_chain_file(tls, opts->tls_cert) != 1 ||
            SSL_CTX_use_PrivateKey_file(tls, opts->tls_key, SSL_FILETYPE_PEM) != 1 ||
            (opts->tls_client_ca != NULL &&
             SSL_CTX_load_verify_locations(tls, opts->tls_client_ca, NULL) != 1)) {
            fprintf(stderr, "pdsim: --tls-cert and --tls-key: cannot load the certificate and key\n");
            if (tls != NULL)
                SSL_CTX_free(tls);
            return PDR_EINVAL;
        }
        if (opts->tls_client_ca != NULL)
            SSL_CTX_set_verify(tls, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
        /* A session (ticket) the client resumes is checked against this context: without one, OpenSSL
         * fails every resumption once client certificates are verified, where engines' servers (Python's
         * ssl module, uvicorn) set one and resume. */
        if (!opts->tls_no_resumption) /* --tls-fail-resumption: the misconfigured server, on purpose */
            SSL_CTX_set_session_id_context(tls, (const unsigned char *)"pdsim", 5);
        S.actx.ssl_ctx = tls; /* kept for the process's life */
    }

    if (opts->role != PDSIM_ROLE_BOTH) {
        pdshim_opts_t so = {0};
        so.listen_host = opts->role == PDSIM_ROLE_PREFILL ? opts->host : NULL;
        so.listen_port = opts->role == PDSIM_ROLE_PREFILL ? opts->bootstrap_port : 0;
        so.default_timeout_ms = (uint32_t)opts->kv_timeout_ms;
        so.ticket_key_files = opts->ticket_keys;
        so.n_ticket_key_files = (size_t)opts->n_ticket_keys;
        if (opts->role == PDSIM_ROLE_DECODE && opts->n_ticket_keys > 0) {
            if (opts->ticket_identity != NULL)
                snprintf(S.ticket_identity, sizeof(S.ticket_identity), "%s", opts->ticket_identity);
            else if (strchr(opts->host, ':') != NULL && opts->host[0] != '[')
                snprintf(S.ticket_identity, sizeof(S.ticket_identity), "[%s]:%d", opts->host, opts->port);
            else
                snprintf(S.ticket_identity, sizeof(S.ticket_identity), "%s:%d", opts->host, opts->port);
            so.ticket_identity = S.ticket_identity[0] != '\0' ? S.ticket_identity : NULL;
        }
        char wurl[128];
        if (opts->events_url != NULL) {
            int v6 = strchr(opts->host, ':') != NULL && opts->host[0] != '[';
            snprintf(wurl, sizeof(wurl), "http://%s%s%s:%d", v6 ? "[" : "", opts->host, v6 ? "]" : "",
                     opts->port);
            so.events_url = opts->events_url;
            so.events_key_file = opts->events_key_file;
            so.worker_url = wurl;
        }
        int err = 0;
        S.shim = pdshim_create(&so, &err);
        if (S.shim == NULL) {
            pdr_error("pdsim: cannot start the shim%s (bootstrap port %d): %s",
                      so.listen_host ? " listener" : "", so.listen_port, pdshim_strerror(err));
            return err != 0 ? err : PDR_EIO;
        }
    }

    /* "127.0.0.1", "::1" or "[::1]" */
    struct sockaddr_storage addr;
    pdr_hostport_t hp;
    char name[64];
    int r = pdr_split_hostport(opts->host, strlen(opts->host), &hp) != 0 || hp.port != NULL ||
                    hp.hlen >= sizeof(name)
                ? UV_EINVAL
                : 0;
    if (r == 0) {
        memcpy(name, hp.host, hp.hlen);
        name[hp.hlen] = '\0';
        r = hp.ipv6 ? uv_ip6_addr(name, opts->port, (struct sockaddr_in6 *)&addr)
                    : uv_ip4_addr(name, opts->port, (struct sockaddr_in *)&addr);
    }
    if (r != 0) {
        pdr_error("pdsim: bad --host %s: %s", opts->host, uv_strerror(r));
        return PDR_EINVAL;
    }
    uv_tcp_init(loop, &S.listener);
    if ((r = uv_tcp_bind(&S.listener, (struct sockaddr *)&addr, 0)) != 0 ||
        (r = uv_listen((uv_stream_t *)&S.listener, 1024, on_accept)) != 0) {
        pdr_error("pdsim: cannot listen on %s:%d: %s", opts->host, opts->port, uv_strerror(r));
        return PDR_EIO;
    }
    if (pdsim_lease_start(loop, opts, vllm_lease_expired, vllm_heartbeat_tick) != 0)
        return PDR_EIO;
    snprintf(S.engine_id, sizeof(S.engine_id), "pdsim-%s-%d", opts->host, opts->port);
    report_load(); /* the first report: the router learns this instance at once */
    pdr_info("pdsim: role %s listening on %s:%d%s", role_name(opts->role), opts->host, opts->port,
             opts->role == PDSIM_ROLE_PREFILL ? " (bootstrap port open)" : "");
    return 0;
}

/* Stops accepting, fails what is pending, half-closes every connection so h2o closes it, and calls
 * on_drained once no connection and no request is left. */
void pdsim_server_shutdown(void (*on_drained)(void))
{
    if (S.shutting_down)
        return;
    S.shutting_down = 1;
    S.on_drained = on_drained;
    if (!uv_is_closing((uv_handle_t *)&S.listener))
        uv_close((uv_handle_t *)&S.listener, NULL);
    pdsim_lease_stop();
    if (S.shim != NULL) {
        pdshim_destroy(S.shim); /* pending operations complete with PDR_ECLOSED, into the queue */
        S.shim = NULL;
    }
    drain_queue();
    for (pdr_dlink_t *l = S.reqs.head, *next; l != NULL; l = next) {
        sim_req_t *ctx = PDR_DLINK_ITEM(l, sim_req_t, link);
        next = l->next;
        if (!req_is_live(ctx))
            continue;
        if (!ctx->started) {
            req_fail(ctx, 503, "pdsim is shutting down");
        } else if (ctx->sending) {
            ctx->abort_pending = 1;
        } else {
            ctx->abort_pending = 1;
            pump(ctx);
        }
    }
    /* Idle keep-alive connections are in h2o's read: an EOF makes h2o close them cleanly. */
    for (pdr_dlink_t *l = S.conns.head; l != NULL; l = l->next) {
        sim_conn_t *c = PDR_DLINK_ITEM(l, sim_conn_t, link);
        uv_os_fd_t fd;
        if (uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0)
            shutdown(fd, SHUT_RD);
    }
    if (S.nreqs == 0 && S.nconns == 0)
        on_drained();
}

/* After the loop stopped: closes what is left and frees h2o's state. The caller runs the loop once
 * more so the close callbacks run, then closes the loop. */
void pdsim_server_dispose(void)
{
    drain_queue();
    uv_close((uv_handle_t *)&S.async, NULL);
    uv_close((uv_handle_t *)&S.die_timer, NULL);
    pdsim_lease_stop();
    if (!uv_is_closing((uv_handle_t *)&S.listener))
        uv_close((uv_handle_t *)&S.listener, NULL);
    h2o_context_dispose(&S.ctx);
    h2o_config_dispose(&S.config);
    for (size_t i = 0; i < SIM_LAST_MAX; i++)
        json_decref(S.last[i]);
    for (size_t i = 0; i < 3; i++)
        json_decref(S.last_headers[i]);
    pdsim_kvev_stop();
    pdsim_pcache_free(S.pcache);
    S.pcache = NULL;
    pthread_mutex_destroy(&S.qlock);
}
