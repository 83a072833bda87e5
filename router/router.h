/*
 * The router process: `threads` event loops, each running an h2o server context (clients, accepted on
 * its own SO_REUSEPORT listener) and a pdr_multi_t, the hand-written HTTP/1.1 client of upstream.c
 * (workers: PD legs, health checks, model lists). The worker pool, the h2o configuration and the config
 * snapshot are shared; a request lives and dies on the loop that accepted it. Health checks, signals,
 * the drain timer and the admin listener (admin.c, its own h2o globalconf and context) run on loop 0.
 * libcurl is used only off the loops: the Kubernetes discovery threads and --dp-aware's start-time query.
 *
 * Who calls whom (tests/layering/check_layering.py; docs/internals/principles.md): main.c -> server.c ->
 * the handlers (pd/, admin.c, compat.c) -> reload.c and conn.c -> reply.c, accesslog.c, admin_token.c;
 * never the other way.
 */
#ifndef PDR_ROUTER_H
#define PDR_ROUTER_H

#include <h2o.h>
#include <sys/stat.h>
#include <uv.h>
#include "config.h"
#include "dlist.h"
#include "fwdheaders.h"
#include "metrics.h"
#include "pool.h"
#include "rewrite.h"
#include "upstream.h"

struct pdr_router;
struct pdr_thread;

#define PDR_MAX_THREADS_RENDER 256 /* loops at most (threads); /metrics sums as many */

/* A listening socket that the loop polls and accepts from by hand (server.c), so that a full file
 * descriptor table pauses accepting for a while instead of making libuv retry accept() in a loop. */
typedef struct pdr_listener {
    uv_poll_t poll;
    uv_timer_t resume; /* accepting paused after EMFILE/ENFILE: restarts it */
    struct pdr_thread *t;
    int fd;
    int admin;   /* the admin port's listener (its own h2o accept context) */
    int metrics; /* the metrics-only listener (metrics.port; its own h2o accept context) */
} pdr_listener_t;

typedef struct pdr_thread {
    struct pdr_router *r;
    int id;
    pdr_config_t *config; /* this loop's reference to the current snapshot (see pdr_router_reload) */
    uv_loop_t *loop;
    uv_thread_t tid;
    h2o_context_t h2o_ctx;
    h2o_accept_ctx_t accept_ctx;
    pdr_listener_t listener;
    int listening;
    pdr_dlink_t *rewrap; /* HTTP/1 connections whose read callback h2o reset (conn.c) */
    uv_prepare_t rewrap_prepare;
    pdr_dlink_t *h2_conns;     /* HTTP/2 connections whose request bodies are followed (conn.c) */
    uv_timer_t h2_evict_timer; /* the body budget was spent: reset the biggest bodies (conn.c) */
    pdr_dlink_t *ng2_conns;    /* HTTP/2 connections served by libnghttp2 (conn_ng2.c) */
    pdr_multi_t *multi;
    pdr_metrics_t m;
    uint64_t live;           /* PD requests in progress on this loop (lingering ones included) */
    uint64_t lingering;      /* of them, answered already: their prefill leg is read to its end */
    uint64_t conns;          /* client connections open on this loop */
    pdr_dqueue_t idle_conns; /* HTTP/1 connections idle between requests, oldest first (conn.c) */
    uint64_t n_idle;         /* their number (limits.max_idle_client_connections) */
    int h2o_disposed;

    uv_async_t wakeup; /* shutdown notification from loop 0 */
    uv_timer_t shutdown_timer, stop_timer;
    int closing, finishing; /* listener closed; idle connections told to close */
    uint64_t finish_ms;     /* when finishing began */

    /* Access log: lines are buffered and written in batches, off the request path. */
    char *alog;
    size_t alog_len, alog_cap;
    uv_timer_t alog_timer;
    int alog_closed;          /* the timer is gone (shutdown): write lines at once */
    double alog_abort_tokens; /* lines of client-aborted requests: a token bucket (pdr_access_log_aborted) */
    uint64_t alog_abort_ms;   /* its last refill */
    uint64_t alog_suppressed; /* lines not written since the last summary line */
    double alog_refused_tokens;       /* lines of refused requests: a token bucket (pdr_access_log_refused) */
    uint64_t alog_refused_ms;         /* its last refill */
    uint64_t alog_refused_suppressed; /* lines not written since the last summary line */
    SSL_CTX *tls_workers; /* the workers' TLS context the multi was last given (tls.c; compared only) */
} pdr_thread_t;

typedef struct pdr_router {
    pdr_config_t *config;        /* the current snapshot: loop 0 reads it; swapped under config_lock */
    pthread_mutex_t config_lock; /* config, and the threads' t->config swaps */
    char *config_path;           /* the file a reload reads; NULL when started from flags */
    int argc;                    /* the command line a reload parses again (set before start; NULL argv: */
    char **argv;                 /* reload reads config_path alone) */
    uint64_t reloads_ok, reloads_failed; /* atomic */
    /* The tokenizer of config key `tokenizer` (NULL: none): swapped under config_lock by start and
     * reload; other code takes it with pdr_router_tokenizer() (tokenizer_ref.c). */
    struct pdr_tokenizer *tokenizer;
    char *tokenizer_path;
    struct stat tokenizer_stat; /* of the file as loaded: an unchanged file is not parsed again */
    uint64_t last_reload_ms;
    /* Discovery sources by pool (index in config's pools, or 0 for the one-pool form) and kind (dns,
     * kubernetes); NULL where none runs. Loop 0 starts and stops them (reload.c). */
    struct pdr_source_run *discovery[PDR_CONFIG_MAX_POOLS][2];
    pdr_pool_t pool;
    h2o_globalconf_t h2o_config;
    pdr_thread_t *threads;
    int n_threads;
    int stopping;      /* atomic: SIGTERM/SIGINT seen; readiness answers 503, requests still served */
    int draining;      /* atomic: past lifecycle.drain_grace_ms: listeners closed */
    int shutting_down; /* atomic: at lifecycle.drain_timeout_ms: no new request, no retry */
    uint64_t shutdown_started_ms; /* when the listeners closed (drain_timeout_ms counts from here) */
    int64_t drain_cancelled;      /* atomic: requests cancelled at drain_timeout_ms */
    uv_timer_t grace_timer;       /* loop 0 */
    int grace_timer_live;
    int64_t inflight; /* atomic: PD requests in progress, all loops */
    int access_fd;    /* -1 when off */

    uv_signal_t sig_term, sig_int, sig_hup; /* loop 0 */
    pdr_dlink_t *probes;                    /* loop 0: checks in progress (health.c) */
    uint64_t health_generation;             /* the pool generation the last round saw */
    uint64_t ca_evict_ms;                   /* loop 0: when cache_aware's trees were last trimmed */
    struct pdr_kv_events *kv_events;        /* loop 0: precise_prefix's subscribers (kv_events.c) */
    int drain_timeout_ms;                   /* lifecycle.drain_timeout_ms as of the shutdown's start */
    uv_timer_t health_timer;
    uv_timer_t drain_timer; /* loop 0: DRAINING -> DRAINED on idle or timeout */
    uint64_t started_ms;
    uint64_t fd_exhausted_log_ms; /* atomic: when accept's EMFILE/ENFILE was last logged */
    uint64_t client_conns;        /* atomic: data-port connections open (limits.max_client_connections) */
    uint64_t body_bytes_held;     /* atomic: HTTP/2 request body bytes held, all loops (conn.c) */

    /* Admin listener (loop 0 only, see admin.c); admin_on is 0 when admin.port is 0. */
    int admin_on, admin_listening, admin_ctx_live;
    h2o_globalconf_t admin_config;
    h2o_context_t admin_ctx;
    h2o_accept_ctx_t admin_accept;
    pdr_listener_t admin_listener;
    char *admin_token; /* NULL: auth off */
    size_t admin_token_len;

    /* Metrics-only listener (loop 0; metrics_on is 0 when metrics.port is 0): GET /metrics, nothing else. */
    int metrics_on, metrics_listening, metrics_ctx_live;
    h2o_globalconf_t metrics_config;
    h2o_context_t metrics_ctx;
    h2o_accept_ctx_t metrics_accept;
    pdr_listener_t metrics_listener;

    /* lifecycle.worker_startup_timeout_ms (loop 0): until a healthy prefill/decode pair is first seen. */
    uv_timer_t startup_timer;
    int startup_timer_live;
    int startup_pending; /* atomic: the deadline is set and no pair has passed a health check yet */
    int exit_code;       /* nonzero: the process exits with it (no healthy pair within the startup timeout) */
    /* TLS contexts (tls.c), swapped under config_lock: listen.tls (NULL: plain HTTP) and workers.tls. */
    SSL_CTX *tls_front, *tls_workers;
} pdr_router_t;

/* At the drain deadline: new PD requests are refused and failed ones are not retried. */
static inline int pdr_router_shutting_down(const pdr_router_t *r)
{
    return __atomic_load_n(&r->shutting_down, __ATOMIC_RELAXED);
}

/* A shutdown signal arrived (readiness off); true from the start of the grace period on. */
static inline int pdr_router_stopping(const pdr_router_t *r)
{
    return __atomic_load_n(&r->stopping, __ATOMIC_RELAXED);
}

/* pd/request.c */
int pdr_pd_handle(pdr_thread_t *t, h2o_req_t *req, pdr_route_t route, int mroute);
int pdr_models_handle(pdr_thread_t *t, h2o_req_t *req);

/* compat.c: the sglang router's routes beside the PD ones (model and server info, health_generate,
 * flush_cache, get_loads; routes.c's PDR_RK_FORWARD and later kinds), forwarded to one worker or fanned
 * out to all of them. Returns 1 when rt is one of them (the request is answered), else 0. */
struct pdr_route_def;
int pdr_compat_handle(pdr_thread_t *t, h2o_req_t *req, const struct pdr_route_def *rt);

/* pools.c */
/* The pool (index in c's pools) that serves the parsed body pr: 0 with *pool set, or the HTTP status to
 * answer (400: no model with several pools, or not a string; 404: no pool serves it) with the message. */
int pdr__request_pool(const pdr_config_t *c, const pdr_pdreq_t *pr, long *pool, char *msg, size_t cap);
/* GET /v1/models with pools: every pool's models, OpenAI's list shape. malloc'd (free), or NULL. */
char *pdr__models_list_json(const pdr_config_t *c, uint64_t created, size_t *len);

/* fwdheaders.c */
/* The request-head limits and character checks every data-plane request passes first: 0, or the status
 * to answer (431 past limits.max_headers / limits.max_header_bytes, 414 for a request target longer than
 * limits.max_header_bytes, 400 for a character HTTP does not allow) with the reason in msg. */
int pdr_fwd_check_request(h2o_req_t *req, const pdr_config_t *c, char *msg, size_t cap);
/* Builds the request's forwarded headers, its request id and trace context (fwdheaders.h). 0, or
 * PDR_ENOMEM. */
int pdr_fwd_build(pdr_fwd_t *f, h2o_req_t *req, const pdr_config_t *c);
/* The trace id of the client's valid traceparent in lower-case hex: 1, or 0 when it sent none. */
int pdr_fwd_trace_id(h2o_req_t *req, char out[33]);
/* A new request id (32 hex characters). */
void pdr_fwd_new_request_id(char out[33]);

/* reply.c: answers any listener sends (calls nothing of server.c, pd/ or admin.c) */
/* The OpenAI error shape {"error":{"message","type","code"}} with status; retry_after_s > 0 adds
 * Retry-After. */
void pdr_send_error(h2o_req_t *req, int status, const char *type, const char *msg, int retry_after_s);
/* s as the inside of a JSON string (quotes, backslashes and control characters escaped), cut to fit cap. */
void pdr_json_escape(char *out, size_t cap, const char *s);
/* Answers status with body (copied by h2o) of content type ctype (a string that outlives the request). */
void pdr_send_body(h2o_req_t *req, int status, const char *ctype, const char *body, size_t len);
/* Answers status with the compact JSON text of o (its reference is taken), or 503 when out of memory.
 * Returns the status sent. */
int pdr_send_json(h2o_req_t *req, int status, json_t *o);
/* Answers GET /metrics (data, admin and metrics ports). */
void pdr__send_metrics(pdr_thread_t *t, h2o_req_t *req);

/* accesslog.c: the loop's batched access log (log.access) */
void pdr_access_log(pdr_thread_t *t, const char *line, size_t len);
/* The line of a request its client aborted: written at most ALOG_ABORT_PER_S a second per loop (a burst of
 * as many); the rest are counted and summed up in one line per flush, so that a client that opens and
 * resets streams in a loop cannot turn the access log into a disk-filling amplifier. */
void pdr_access_log_aborted(pdr_thread_t *t, const char *line, size_t len);
/* As pdr_access_log_aborted, for requests refused before any worker was chosen (admission, a flooding
 * connection's streams, malformed requests): an attacker that reconnects as fast as it is refused
 * cannot fill the disk either. A bucket of its own, so that neither kind hides the other. */
void pdr_access_log_refused(pdr_thread_t *t, const char *line, size_t len);
/* The loop's buffer (when log.access is on) and rate limit; t->alog_timer is initialized already. 0 or
 * PDR_ENOMEM. */
int pdr__access_log_init(pdr_thread_t *t);
/* At the loop's shutdown: the summary line, what is buffered, and the timer closed; later lines are
 * written at once. */
void pdr__access_log_close(pdr_thread_t *t);

/* conn.c: client connections and their guards */
/* HTTP/1 requests whose head another parser could frame differently (reqguard.h): answers 400, closes the
 * connection and returns 1; else 0. Both listeners call it first. */
int pdr__refuse_ambiguous_head(pdr_thread_t *t, h2o_req_t *req);
/* HTTP/2: the client reset (or abandoned) a stream before its answer ended. Takes a token of the
 * connection's limits.h2_max_resets bucket; when none is left the connection is closed. Returns 1 when
 * the connection is (now or already) closed for that. */
int pdr__note_client_reset(pdr_thread_t *t, h2o_req_t *req);
/* The request's connection was closed for a reset flood (its buffer may still hold requests). */
int pdr__conn_condemned(h2o_req_t *req);
/* The request's body is above limits.max_body_bytes (HTTP/2: or its stream was ended early for that by the
 * router's reader): the handler answers 413. Counts it. */
int pdr__body_too_large(pdr_thread_t *t, h2o_req_t *req);
/* Once, before any loop accepts: the descriptor -> connection map, sized to the open files limit. */
void pdr__conn_map_init(void);
void pdr__conn_evict_init(pdr_thread_t *t);
/* limits.max_client_connections: 1 when that many data-port connections are open (accepting pauses). */
int pdr__client_conns_full(pdr_thread_t *t);
/* Hands an accepted connection on listener l to h2o, with the guards in front of h2o's reads. */
void pdr__serve_conn(pdr_thread_t *t, pdr_listener_t *l, int fd);
/* A handler takes an HTTP/2 request's body (conn.c): held until the request ends. 1 when the body was
 * refused for the connection's or the router's body budget and the request answered 503. */
int pdr__conn_take_body(pdr_thread_t *t, h2o_req_t *req);
/* SSL_CTX info callback of the listener's context (conn.c): ties a connection to its SSL object. */
void pdr__conn_tls_info(const SSL *ssl, int where, int ret);
/* Once shutting down and the loop's last connection closed: disposes of its h2o contexts and handles. */
void pdr__maybe_dispose_h2o(pdr_thread_t *t);
/* Shutdown (conn_ng2.c): the libnghttp2 connections get a GOAWAY, the idle ones close. */
void pdr__conn_ng2_shutdown(pdr_thread_t *t);

/* limits.c: client-side limits that are h2o settings or h2o answers */
/* Before the contexts are made: h2o's request and idle timeouts and its HTTP/2 concurrency. */
void pdr__limits_h2o_config(h2o_globalconf_t *g, const pdr_config_t *c);
/* The data port's host: h2o's own plain-text 413 answers go out in the OpenAI error shape. */
void pdr__limits_register(h2o_hostconf_t *host);

/* admin_token.c (loop 0) */
/* Reads the token file into *out (malloc'd, length *out_len). 0, or an error described in msg. */
int pdr__admin_token_read(const char *path, char **out, size_t *out_len, char *msg, size_t cap);
/* Wipes and frees r->admin_token. */
void pdr__admin_token_drop(pdr_router_t *r);
/* A reload: reads the new admin.token_file (a new token applies at once). 0, or an error in msg and the
 * old token stays. */
int pdr_admin_reload_token(pdr_router_t *r, const pdr_config_t *c, char *msg, size_t cap);

/* tls.c (loop 0 builds and commits; each loop syncs): the listener's and the workers' TLS contexts. */
typedef struct pdr_tls_next {
    SSL_CTX *front, *workers;
} pdr_tls_next_t;
/* Builds the contexts of c from its files. 0, or PDR_ECONFIG with "key file: reason" in err. */
int pdr_router_tls_prepare(const pdr_config_t *c, pdr_tls_next_t *next, char *err, size_t cap);
void pdr_router_tls_abandon(pdr_tls_next_t *next);
/* Makes them current (every loop takes them at its next pdr_thread_sync_config). */
void pdr_router_tls_commit(pdr_router_t *r, pdr_tls_next_t *next);
void pdr_router_tls_free(pdr_router_t *r);
/* The loop takes the current contexts: its accept context and its upstream client. */
void pdr__tls_sync(pdr_thread_t *t);
/* The loop drops its reference (its end). */
void pdr__tls_thread_done(pdr_thread_t *t);

/* server.c: the listeners, the loop threads, the route dispatch and the shutdown sequence */
/* Sets up the shared state and every loop (loop 0 on `loop0`), starts threads 1..n-1. */
int pdr_router_start(pdr_router_t *r, pdr_config_t *c, uv_loop_t *loop0);
/* Loop 0, on SIGTERM/SIGINT: readiness off at once, keep serving for lifecycle.drain_grace_ms, then
 * stop accepting everywhere, let in-flight requests finish within lifecycle.drain_timeout_ms (cancel
 * the rest), then end every loop. A second call during the grace ends the grace at once. */
void pdr_router_begin_shutdown(pdr_router_t *r);
/* After loop 0 returned: joins the other threads. */
void pdr_router_join(pdr_router_t *r);

/* admin.c (loop 0) */
/* Reads the token and builds the admin h2o config (nothing when admin.port is 0). */
int pdr_admin_init(pdr_router_t *r);
void pdr_admin_log_start(const pdr_router_t *r);
void pdr_admin_dispose(pdr_router_t *r);

/* admin_parse.c (pure, any thread) */
/* Parses the optional drain body {"timeout_ms": N} (pure; fuzzed by tests/fuzz/fuzz_admin.c): 0 with
 * *timeout_ms set (0 = none; an empty or all-whitespace body = none), or PDR_EINVAL with a message. */
#define PDR_ADMIN_MAX_DRAIN_TIMEOUT_MS (7 * 24 * 3600 * 1000ULL) /* a week: anything longer is a typo */
int pdr__admin_parse_drain(const char *body, size_t len, uint64_t *timeout_ms, char *msg, size_t cap);
/* Parses the POST /admin/v1/workers body {"role", "url", "bootstrap_port"?, "pool"?, "labels"?} (pure;
 * fuzzed): 0 with *role, conf (owned by the caller: pdr_worker_conf_clear), pool (the name, "" when not
 * given) and *labels_json (malloc'd JSON object text), or PDR_EINVAL / PDR_ENOMEM with a message and
 * nothing owned. */
int pdr__admin_parse_worker(const char *body, size_t len, int *role, pdr_worker_conf_t *conf,
                            char **labels_json, char pool[64], char *msg, size_t cap);

/* health.c (loop 0) */
int pdr_health_start(pdr_router_t *r);
void pdr_health_stop(pdr_router_t *r);
/* After a reload: the new interval, and a round now. */
void pdr_health_restart(pdr_router_t *r);

/* reload.c (loop 0) */
/* Reads config_path again and applies it (see docs/operations.md "Reload"): a new snapshot for new
 * requests (in-flight ones keep theirs), workers reconciled (unchanged ones keep their state), health
 * and discovery settings applied. Keys that need a restart are named in msg. Returns 0, or an error with
 * the reason in msg (the old config stays). */
int pdr_router_reload(pdr_router_t *r, char *msg, size_t cap);
/* Starts the discovery sources of r->config; 0 or an error logged. */
int pdr_router_discovery_start(pdr_router_t *r);
void pdr_router_discovery_stop(pdr_router_t *r);
/* Whether a source of the kind (0: dns, 1: kubernetes) runs for any pool (loop 0). */
int pdr_router_discovery_running(const pdr_router_t *r, int which);
/* tokenizer_ref.c. Loop 0 (start, reload): loads c->tokenizer unless the same file is loaded already,
 * or drops the tokenizer when c has none. Returns 0, or an error with the loader's message in err (the
 * running tokenizer stays). _prepare does the loading and leaves the swap to _commit (or _abandon), for a
 * reload that may still be refused. */
typedef struct pdr_tokenizer_next {
    int change; /* whether _commit changes anything (a new tokenizer, or none any more) */
    struct pdr_tokenizer *tok;
    char *path;
    struct stat st;
    uint64_t load_ms;
} pdr_tokenizer_next_t;
int pdr_router_tokenizer_load(pdr_router_t *r, const pdr_config_t *c, char *err, size_t errlen);
int pdr_router_tokenizer_prepare(pdr_router_t *r, const pdr_config_t *c, pdr_tokenizer_next_t *next,
                                 char *err, size_t errlen);
void pdr_router_tokenizer_commit(pdr_router_t *r, pdr_tokenizer_next_t *next);
void pdr_router_tokenizer_abandon(pdr_tokenizer_next_t *next);
/* Any loop: a reference to the current tokenizer (release it with pdr_tokenizer_free()), or NULL. */
struct pdr_tokenizer *pdr_router_tokenizer(pdr_router_t *r);
void pdr_router_tokenizer_dispose(pdr_router_t *r);
/* reload.c, any loop: takes the current snapshot into t->config if it changed. */
void pdr_thread_sync_config(pdr_thread_t *t);
/* This loop's share of limits.max_connections_per_worker, applied to its worker connections. */
void pdr__apply_conn_limit(pdr_thread_t *t);

#endif
