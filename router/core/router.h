/*
 * The router process: `threads` event loops, each running an h2o server context (clients, accepted on
 * its own SO_REUSEPORT listener) and a pdr_multi_t, the hand-written HTTP/1.1 client of upstream.c
 * (workers: PD legs, health checks, model lists). The worker pool, the h2o configuration and the config
 * snapshot are shared; a request lives and dies on the loop that accepted it. Health checks, signals,
 * the drain timer and the admin listener (admin.c, its own h2o globalconf and context) run on loop 0.
 * libcurl is used only off the loops: the Kubernetes discovery threads and --dp-aware's start-time query.
 *
 * This header holds that state (pdr_router_t, pdr_thread_t) and the tokenizer reference (tokenizer_ref.c),
 * shared by the folders ranked above core/; each folder declares its own functions in its own headers
 * (server.h, control.h, pd.h, front.h, health.h, reply.h ...). docs/internals/principles.md has the ranks,
 * tests/layering/check_layering.py checks them.
 */
#ifndef PDR_ROUTER_H
#define PDR_ROUTER_H

#include <h2o.h>
#include <sys/stat.h>
#include <uv.h>
#include "config.h"
#include "dlist.h"
#include "metrics.h"
#include "pool.h"
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
    pdr_dqueue_t pd_kicks;     /* PD requests to advance on the next loop turn, in order (pd/timer.c) */
    uv_idle_t pd_kick_idle;    /* runs them; active while there are any */
    pdr_dlink_t *h2_conns;     /* HTTP/2 connections whose request bodies are followed (conn.c) */
    uv_timer_t h2_evict_timer; /* the body budget was spent: reset the biggest bodies (conn.c) */
    pdr_dlink_t *ng2_conns;    /* HTTP/2 connections served by libnghttp2 (conn_ng2.c) */
    pdr_multi_t *multi;
    pdr_metrics_t m;
    uint64_t live;           /* PD requests in progress on this loop (lingering ones included) */
    uint64_t lingering;      /* of them, answered already: their prefill leg is read to its end */
    uint64_t aborts;         /* engine aborts in flight on this loop (pd/abort.c), counted in live too */
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
    /* The pools' own tokenizers (pools[].tokenizer), by pool name: swapped with the one above; a request
     * routed to a pool takes its pool's, else the one above (pdr_router_tokenizer_for()). */
    struct pdr_pool_tokenizer *pool_tokenizers;
    size_t n_pool_tokenizers;
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
    pdr_dlink_t *ident_reads;               /* loop 0: identity reads in progress (fleet/identify.c) */
    pdr_dlink_t *load_polls;                /* loop 0: engine load reads in progress (engine_load.c) */
    uint64_t load_polls_total[4];           /* atomic: engine load reads by outcome (engine_load.h) */
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

/* tokenizer_ref.c. Loop 0 (start, reload): loads c->tokenizer and each pool's tokenizer (pools[].tokenizer)
 * unless the same file is loaded already (by that key or another), or drops what c has no more. Returns 0,
 * or an error with the loader's message in err (a pool's prefixed with its key's file:line:col; the running
 * tokenizers stay). _prepare does the loading and leaves the swap to _commit (or _abandon), for a reload
 * that may still be refused. */
typedef struct pdr_pool_tokenizer {
    char *pool; /* the pool's name */
    struct pdr_tokenizer *tok;
    char *path; /* the tokenizer.json loaded (a directory's), and its identity then */
    struct stat st;
    uint64_t load_ms; /* in a pdr_tokenizer_next_t: how long the load took, */
    int reused;       /* or 1 for a file loaded already (not parsed again) */
} pdr_pool_tokenizer_t;
typedef struct pdr_tokenizer_next {
    int change; /* whether _commit changes the top-level one (a new tokenizer, or none any more) */
    struct pdr_tokenizer *tok;
    char *path;
    struct stat st;
    uint64_t load_ms;
    int reused;                  /* tok is a pool's, loaded already: not parsed again */
    pdr_pool_tokenizer_t *pools; /* the pools' tokenizers as c has them (n_pools of them) */
    size_t n_pools;
} pdr_tokenizer_next_t;
int pdr_router_tokenizer_load(pdr_router_t *r, const pdr_config_t *c, char *err, size_t errlen);
int pdr_router_tokenizer_prepare(pdr_router_t *r, const pdr_config_t *c, pdr_tokenizer_next_t *next,
                                 char *err, size_t errlen);
void pdr_router_tokenizer_commit(pdr_router_t *r, pdr_tokenizer_next_t *next);
void pdr_router_tokenizer_abandon(pdr_tokenizer_next_t *next);
/* --check-config: loads every tokenizer c names as a start would (chat templates aside) and frees them;
 * 0, or the error a start would give. */
int pdr_router_tokenizer_check(const pdr_config_t *c, char *err, size_t errlen);
/* Any loop: a reference to the current top-level tokenizer (release it with pdr_tokenizer_free()), or
 * NULL. */
struct pdr_tokenizer *pdr_router_tokenizer(pdr_router_t *r);
/* Any loop: the tokenizer of a request routed to the pool named pool: the pool's own, else the top-level
 * one (a reference, or NULL: none applies). */
struct pdr_tokenizer *pdr_router_tokenizer_for(pdr_router_t *r, const char *pool);
void pdr_router_tokenizer_dispose(pdr_router_t *r);
#endif
