/*
 * The control plane (control/): the admin API (admin.c, admin_parse.c, admin_token.c), reload and the
 * per-loop config sync (reload.c), the sglang router's compatible routes (compat.c) and the /metrics
 * exposition (exposition.c). The server (server/) dispatches to them; main.c reloads on SIGHUP.
 */
#ifndef PDR_CONTROL_H
#define PDR_CONTROL_H

#include <h2o.h>
#include <stddef.h>
#include <stdint.h>
#include "config.h"
#include "metrics.h"
#include "pool.h"
#include "router.h"

/* compat.c: the sglang router's routes beside the PD ones (model and server info, health_generate,
 * flush_cache, get_loads; routes.c's PDR_RK_FORWARD and later kinds), forwarded to one worker or fanned
 * out to all of them. Returns 1 when rt is one of them (the request is answered), else 0. */
struct pdr_route_def;
int pdr_compat_handle(pdr_thread_t *t, h2o_req_t *req, const struct pdr_route_def *rt);

/* admin.c (loop 0) */
/* Reads the token and builds the admin h2o config (nothing when admin.port is 0). */
int pdr_admin_init(pdr_router_t *r);
void pdr_admin_log_start(const pdr_router_t *r);
void pdr_admin_dispose(pdr_router_t *r);

/* admin_token.c (loop 0) */
/* Reads the token file into *out (malloc'd, length *out_len). 0, or an error described in msg. */
int pdr__admin_token_read(const char *path, char **out, size_t *out_len, char *msg, size_t cap);
/* Wipes and frees r->admin_token. */
void pdr__admin_token_drop(pdr_router_t *r);
/* A reload: reads the new admin.token_file (a new token applies at once). 0, or an error in msg and the
 * old token stays. */
int pdr_admin_reload_token(pdr_router_t *r, const pdr_config_t *c, char *msg, size_t cap);

/* admin_kvsnap.c (loop 0) */
/* Answers GET /admin/v1/kv-index/snapshot (the token checked), now or when the encoding is done. */
void pdr__admin_kv_snapshot(pdr_router_t *r, pdr_thread_t *t, h2o_req_t *req);

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
/* reload.c, any loop: takes the current snapshot into t->config if it changed. */
void pdr_thread_sync_config(pdr_thread_t *t);
/* This loop's share of limits.max_connections_per_worker, applied to its worker connections. */
void pdr__apply_conn_limit(pdr_thread_t *t);

/* exposition.c */
/* Router-wide values that are not per loop. */
typedef struct pdr_metrics_extra {
    int64_t inflight;         /* PD requests in progress */
    int max_inflight;         /* limits.max_inflight of the current config */
    uint64_t body_bytes_held; /* HTTP/2 request body bytes held (conn.c) */
    uint64_t reloads_ok, reloads_failed;
    struct pdr_router *router; /* the KV event families (kv_events.c); NULL: left out */
} pdr_metrics_extra_t;

/* The ceiling of the /metrics page: 64 series of at most 512 bytes (a family's name, the pool, role and
 * url labels, a value) for each of 2 x PDR_CONFIG_MAX_WORKERS workers, far more than the families with a
 * worker label hold (under 40 series a worker), and room to spare for those without one. */
#define PDR_METRICS_PAGE_MAX ((size_t)64 * 512 * 2 * PDR_CONFIG_MAX_WORKERS)

/* Renders every metric: the sum of the n per-thread sets, the pool's gauges, the router-wide values.
 * Returns a malloc'd buffer and its length, or NULL with *err: PDR_ENOMEM, or PDR_ETOOBIG when the page
 * would pass PDR_METRICS_PAGE_MAX. */
char *pdr_metrics_render(pdr_pool_t *pool, const pdr_metrics_t *const *ms, size_t n,
                         const pdr_metrics_extra_t *x, size_t *len, int *err);
/* Answers GET /metrics (data, admin and metrics ports). */
void pdr__send_metrics(pdr_thread_t *t, h2o_req_t *req);

#endif
