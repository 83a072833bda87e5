/*
 * The router process: one libuv loop running the h2o server (clients) and a curl multi (workers).
 * This header ties the modules together; loop thread only.
 */
#ifndef PDR_ROUTER_H
#define PDR_ROUTER_H

#include <h2o.h>
#include <uv.h>
#include "config.h"
#include "metrics.h"
#include "pool.h"
#include "rewrite.h"
#include "upstream.h"

typedef struct pdr_router {
    uv_loop_t *loop;
    pdr_config_t *config;
    pdr_pool_t pool;
    pdr_multi_t *multi;

    h2o_globalconf_t h2o_config;
    h2o_context_t h2o_ctx;
    h2o_accept_ctx_t accept_ctx;
    uv_tcp_t listener;
    int listening;

    uv_signal_t sig_term, sig_int;
    uv_timer_t shutdown_timer, stop_timer;
    int shutting_down;
    uint64_t shutdown_started_ms;

    /* Access log: lines are buffered and written in batches, off the request path. */
    int access_fd; /* -1 when off */
    char *alog;
    size_t alog_len, alog_cap;
    uv_timer_t alog_timer;

    struct pdr_health_probe **probes; /* one per worker */
    size_t n_probes;
    uv_timer_t health_timer;
} pdr_router_t;

/* pd.c */
int pdr_pd_handle(pdr_router_t *r, h2o_req_t *req, pdr_route_t route, int mroute);
int pdr_models_handle(pdr_router_t *r, h2o_req_t *req);
extern uint64_t pdr_pd_requests_live;

/* server.c */
void pdr_send_error(h2o_req_t *req, int status, const char *type, const char *msg, int retry_after_s);
void pdr_access_log(pdr_router_t *r, const char *line, size_t len);
int pdr_router_start(pdr_router_t *r, pdr_config_t *c, uv_loop_t *loop);
void pdr_router_begin_shutdown(pdr_router_t *r);

/* health.c */
int pdr_health_start(pdr_router_t *r);
void pdr_health_stop(pdr_router_t *r);

#endif
