/*
 * The client-facing server: h2o (HTTP/1.1, h2c upgrade and prior knowledge) on the router's libuv
 * loop, the route dispatch (to pd/, compat.c and, on the admin port,
 * admin.c), the small local endpoints (/health, /readiness), CORS on the data port
 * (cors.allowed_origins), the loop threads and the shutdown sequence. The routes are routes.c's table;
 * error answers are reply.c's, the access log accesslog.c's, client connections and their guards
 * conn.c's; none of them calls back here. Loop 0 also owns the admin listener (routes in admin.c, a
 * separate h2o config: no admin route on the data port), the metrics-only listener (metrics.port: GET
 * /metrics and nothing else, its own h2o config) and the worker startup deadline
 * (lifecycle.worker_startup_timeout_ms). The listeners are server_listen.c's, the shutdown sequence
 * server_shutdown.c's; neither calls back here.
 */
#define _GNU_SOURCE /* accept4 */
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include "admission.h"
#include "control.h"
#include "err.h"
#include "front.h"
#include "fwdheaders.h"
#include "gateway.h"
#include "health.h"
#include "pd.h"
#include "reply.h"
#include "reqguard.h"
#include "kv_events.h"
#include "phases.h"
#include "server.h"
#include "shim_events.h"
#include "router.h"
#include "routes.h"
#include "server_internal.h"
#include "trace.h"
#include "util.h"

typedef struct route_handler {
    h2o_handler_t super;
    pdr_router_t *r;
} route_handler_t;

/* ---- routes ---- */

static int path_is(h2o_req_t *req, const char *p)
{
    size_t len = req->query_at != SIZE_MAX ? req->query_at : req->path.len;
    return len == strlen(p) && memcmp(req->path.base, p, len) == 0;
}

/* Ready when every pool has a healthy (healthy and not draining) prefill and decode worker that has passed
 * a health check, as a Kubernetes readiness probe wants: a router that would answer 503 for one of its
 * models takes no traffic. Workers start optimistically healthy, so that requests are not refused while
 * the first checks run, but that guess does not make the router ready: a worker that never answered (down,
 * a name that does not resolve, still loading) would. Else 0 with the reason in msg, naming the pools that
 * have no pair. */
static int readiness_ok(pdr_router_t *r, char *msg, size_t cap)
{
    if (pdr_router_stopping(r)) {
        snprintf(msg, cap, "shutting down");
        return 0;
    }
    /* With a worker startup deadline, not before a prefill/decode pair has passed a health check (workers
     * start optimistically healthy). */
    if (__atomic_load_n(&r->startup_pending, __ATOMIC_RELAXED)) {
        snprintf(msg, cap, "waiting for the first healthy prefill/decode pair");
        return 0;
    }
    char names[PDR_CONFIG_MAX_POOLS][64], list[2][300];
    size_t ng = pdr_pool_groups(&r->pool, names, PDR_CONFIG_MAX_POOLS), bad[2] = {0, 0}, n[2] = {0, 0};
    list[0][0] = list[1][0] = '\0';
    for (size_t i = 0; i < ng; i++) {
        if (pdr_pool_count_confirmed_in(&r->pool, names[i], PDR_ROLE_PREFILL) > 0 &&
            pdr_pool_count_confirmed_in(&r->pool, names[i], PDR_ROLE_DECODE) > 0)
            continue;
        /* 0: no healthy pair at all; 1: healthy ones, none of which has passed a check yet. */
        int k = pdr_pool_count_healthy_in(&r->pool, names[i], PDR_ROLE_PREFILL) > 0 &&
                pdr_pool_count_healthy_in(&r->pool, names[i], PDR_ROLE_DECODE) > 0;
        if (n[k] + strlen(names[i]) + 3 < sizeof(list[k]))
            n[k] += (size_t)snprintf(list[k] + n[k], sizeof(list[k]) - n[k], "%s%s", bad[k] ? ", " : "",
                                     names[i]);
        bad[k]++;
    }
    int k = bad[0] > 0 ? 0 : 1;
    const char *what = k == 0 ? "no healthy prefill or decode worker"
                              : "no prefill/decode pair has passed a health check yet";
    if (bad[k] > 0 && ng == 1 && strcmp(names[0], PDR_DEFAULT_POOL) == 0)
        snprintf(msg, cap, "%s", what);
    else if (bad[k] > 0)
        snprintf(msg, cap, "%s in pool%s %s", what, bad[k] > 1 ? "s" : "", list[k]);
    return ng > 0 && bad[0] + bad[1] == 0;
}

/* ---- CORS (cors.allowed_origins), as the sglang router's: with "*" any origin and any method or header;
 * with a list the listed origins, GET/POST/OPTIONS, the content-type and authorization headers, and
 * x-request-id readable by the page. Preflights are answered here; other answers get the headers. ---- */

#define CORS_MAX_AGE "3600"

static void add_hdr(h2o_req_t *req, const char *name, const char *val, size_t len)
{
    h2o_add_header_by_str(&req->pool, &req->res.headers, name, strlen(name), 0, NULL, val, len);
}

/* Returns 1 when the request was a preflight and is answered. */
static int cors_apply(pdr_thread_t *t, h2o_req_t *req)
{
    const pdr_config_t *c = t->config;
    ssize_t oi = h2o_find_header_by_str(&req->headers, H2O_STRLIT("origin"), -1);
    if (oi < 0)
        return 0;
    h2o_iovec_t origin = req->headers.entries[oi].value;
    int any = 0, allowed = 0;
    for (size_t i = 0; i < c->cors.n; i++) {
        const char *o = c->cors.origins[i];
        if (strcmp(o, "*") == 0)
            any = 1;
        else if (strlen(o) == origin.len && memcmp(o, origin.base, origin.len) == 0)
            allowed = 1;
    }
    int preflight =
        h2o_memis(req->method.base, req->method.len, H2O_STRLIT("OPTIONS")) &&
        h2o_find_header_by_str(&req->headers, H2O_STRLIT("access-control-request-method"), -1) >= 0;
    if (any) {
        add_hdr(req, "access-control-allow-origin", H2O_STRLIT("*"));
    } else {
        add_hdr(req, "vary", H2O_STRLIT("origin"));
        if (allowed)
            add_hdr(req, "access-control-allow-origin", origin.base, origin.len);
    }
    if (!preflight) {
        if (any || allowed)
            add_hdr(req, "access-control-expose-headers", any ? "*" : "x-request-id", any ? 1 : 12);
        return 0;
    }
    if (any || allowed) {
        add_hdr(req, "access-control-allow-methods", any ? "*" : "GET,POST,OPTIONS", any ? 1 : 16);
        add_hdr(req, "access-control-allow-headers", any ? "*" : "content-type,authorization", any ? 1 : 26);
        add_hdr(req, "access-control-max-age", H2O_STRLIT(CORS_MAX_AGE));
    }
    req->res.status = 200;
    req->res.reason = "OK";
    req->res.content_length = 0;
    h2o_send_inline(req, "", 0);
    pdr_metrics_count_request(&t->m, PDR_MR_OTHER, 200, 0, -1);
    return 1;
}

static int on_req(h2o_handler_t *self, h2o_req_t *req)
{
    pdr_router_t *r = ((route_handler_t *)self)->r;
    pdr_thread_t *t = H2O_STRUCT_FROM_MEMBER(pdr_thread_t, h2o_ctx, req->conn->ctx);
    if (pdr__conn_take_body(t, req)) {
        pdr_metrics_count_request(&t->m, PDR_MR_OTHER, 503, 0, -1);
        return 0;
    }
    if (pdr__refuse_ambiguous_head(t, req))
        return 0;
    if (t->config->cors.n > 0 && cors_apply(t, req))
        return 0;
    const pdr_route_def_t *rt = pdr_route_lookup(req); /* routes.c: the one table */
    if (rt != NULL && rt->kind == PDR_RK_PD) {
        if (!pdr_route_method_ok(req, rt)) {
            pdr_send_error(req, 405, "invalid_request_error", "use POST", 0);
            pdr_metrics_count_request(&t->m, rt->mroute, 405, 0, -1);
            return 0;
        }
        return pdr_pd_handle(t, req, rt->pd_route, rt->mroute);
    }
    if (pdr__body_too_large(t, req)) {
        pdr_send_error(req, 413, "invalid_request_error", "the request body exceeds limits.max_body_bytes",
                       0);
        pdr_metrics_count_request(&t->m, PDR_MR_OTHER, 413, 0, -1);
        return 0;
    }
    char why[256];
    int bad = pdr_fwd_check_request(req, t->config, why, sizeof(why));
    if (bad != 0) {
        if (bad != 400)
            t->m.headers_too_large_total++;
        pdr_send_error(req, bad, "invalid_request_error", why, 0);
        pdr_metrics_count_request(&t->m, PDR_MR_OTHER, bad, 0, -1);
        return 0;
    }
    /* The local routes answer their method only; another falls through to 404, as an unknown route. */
    int local = rt != NULL && pdr_route_method_ok(req, rt);
    if (local && rt->kind == PDR_RK_HEALTH) {
        pdr_send_body(req, 200, "text/plain", "ok\n", 3);
        pdr_metrics_count_request(&t->m, PDR_MR_HEALTH, 200, 0, -1);
        return 0;
    }
    if (local && rt->kind == PDR_RK_READINESS) {
        char rwhy[400] = "no pool";
        int ok = readiness_ok(r, rwhy, sizeof(rwhy));
        if (ok)
            pdr_send_body(req, 200, "text/plain", "ready\n", 6);
        else
            pdr_send_error(req, 503, "service_unavailable", rwhy, 1);
        pdr_metrics_count_request(&t->m, PDR_MR_READINESS, ok ? 200 : 503, 0, -1);
        return 0;
    }
    if (local && rt->kind == PDR_RK_METRICS) {
        pdr__send_metrics(t, req);
        return 0;
    }
    if (local && rt->kind == PDR_RK_MODELS)
        return pdr_models_handle(t, req);
    if (rt != NULL && rt->kind >= PDR_RK_FORWARD && pdr_compat_handle(t, req, rt))
        return 0;
    pdr_send_error(req, 404, "invalid_request_error", "unknown route", 0);
    pdr_metrics_count_request(&t->m, PDR_MR_OTHER, 404, 0, -1);
    return 0;
}

/* The metrics-only listener: GET /metrics (rendered as on the data port), nothing else. */
static int on_metrics_req(h2o_handler_t *self, h2o_req_t *req)
{
    pdr_router_t *r = ((route_handler_t *)self)->r;
    pdr_thread_t *t = &r->threads[0];
    if (pdr__refuse_ambiguous_head(t, req))
        return 0;
    if (!path_is(req, "/metrics")) {
        pdr_send_error(req, 404, "invalid_request_error", "this listener serves GET /metrics only", 0);
        return 0;
    }
    if (!h2o_memis(req->method.base, req->method.len, H2O_STRLIT("GET")) &&
        !h2o_memis(req->method.base, req->method.len, H2O_STRLIT("HEAD"))) {
        pdr_send_error(req, 405, "invalid_request_error", "use GET", 0);
        return 0;
    }
    pdr__send_metrics(t, req);
    return 0;
}

static int metrics_init(pdr_router_t *r, const pdr_config_t *c)
{
    if (c->metrics_port == 0)
        return 0;
    h2o_config_init(&r->metrics_config);
    r->metrics_config.server_name = h2o_iovec_init(H2O_STRLIT("pdrouter"));
    h2o_hostconf_t *host =
        h2o_config_register_host(&r->metrics_config, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    h2o_pathconf_t *path = h2o_config_register_path(host, "/", 0);
    route_handler_t *h = (route_handler_t *)h2o_create_handler(path, sizeof(*h));
    h->super.on_req = on_metrics_req;
    h->r = r;
    r->metrics_on = 1;
    return 0;
}

static void on_wakeup(uv_async_t *a)
{
    pdr_thread_t *t = a->data;
    pdr_shim_events_deliver(t); /* room events for this loop's requests */
    pdr_admit_deliver(t);       /* admission slots handed to this loop's queued requests */
    pdr_thread_sync_config(t);
    if (__atomic_load_n(&t->r->draining, __ATOMIC_ACQUIRE) && !t->closing)
        pdr__server_start_loop_shutdown(t);
}

static int init_thread(pdr_router_t *r, pdr_thread_t *t, int id, uv_loop_t *loop)
{
    t->r = r;
    t->id = id;
    t->loop = loop;
    t->config = pdr_config_ref(r->config);
    t->m.phases = calloc(1, sizeof(*t->m.phases));
    if (t->m.phases == NULL)
        return PDR_ENOMEM;
    t->multi = pdr_multi_new(loop, 1024);
    if (t->multi == NULL)
        return PDR_ENOMEM;
    pdr_multi_count_tls(t->multi, &t->m.upstream_tls_full_total, &t->m.upstream_tls_resumed_total,
                        &t->m.upstream_tls_resumption_failures_total);
    pdr__apply_conn_limit(t);
    h2o_context_init(&t->h2o_ctx, loop, &r->h2o_config);
    t->accept_ctx.ctx = &t->h2o_ctx;
    t->accept_ctx.hosts = r->h2o_config.hosts;
    pdr__tls_sync(t); /* listen.tls and workers.tls (tls.c) */
    uv_timer_init(loop, &t->alog_timer);
    t->alog_timer.data = t;
    if (pdr__access_log_init(t) != 0)
        return PDR_ENOMEM;
    uv_async_init(loop, &t->wakeup, on_wakeup);
    t->wakeup.data = t;
    uv_prepare_init(loop, &t->rewrap_prepare);
    t->rewrap_prepare.data = t;
    uv_idle_init(loop, &t->pd_kick_idle);
    t->pd_kick_idle.data = t;
    pdr__conn_evict_init(t);
    int rc = pdr__server_open_listener(t, r->config->listen_host, r->config->listen_port, 1, &t->listener,
                                       &t->listening);
    if (rc == 0 && id == 0 && r->admin_on) {
        /* The admin port is one socket on loop 0 (no SO_REUSEPORT: a second router on the same admin port
         * is a configuration error, not a load-balancing peer). */
        h2o_context_init(&r->admin_ctx, loop, &r->admin_config);
        r->admin_ctx_live = 1;
        r->admin_accept.ctx = &r->admin_ctx;
        r->admin_accept.hosts = r->admin_config.hosts;
        rc = pdr__server_open_listener(t, r->config->admin_host, r->config->admin_port, 0, &r->admin_listener,
                                       &r->admin_listening);
    }
    if (rc == 0 && id == 0 && r->metrics_on) {
        h2o_context_init(&r->metrics_ctx, loop, &r->metrics_config);
        r->metrics_ctx_live = 1;
        r->metrics_accept.ctx = &r->metrics_ctx;
        r->metrics_accept.hosts = r->metrics_config.hosts;
        rc = pdr__server_open_listener(t, r->config->metrics_host, r->config->metrics_port, 0,
                                       &r->metrics_listener, &r->metrics_listening);
    }
    return rc;
}

/* Client sockets start with a 4 KiB input buffer instead of h2o's 8 KiB (it grows when a request head
 * needs more): a held stream costs 4 KiB less. Per thread, before the loop accepts anything; h2o
 * recycles buffers of exactly this capacity, so it is set once and never changed. */
static void small_socket_buffers(void)
{
    h2o_socket_buffer_prototype._initial_buf.capacity = H2O_SOCKET_INITIAL_INPUT_BUFFER_SIZE;
}

static void thread_main(void *arg)
{
    pdr_thread_t *t = arg;
    small_socket_buffers();
    uv_run(t->loop, UV_RUN_DEFAULT);
}

static int open_access_log(pdr_router_t *r, const char *spec)
{
    r->access_fd = -1;
    if (spec == NULL || strcmp(spec, "off") == 0)
        return 0;
    if (strcmp(spec, "-") == 0) {
        r->access_fd = STDOUT_FILENO;
        return 0;
    }
    r->access_fd = open(spec, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (r->access_fd < 0) {
        pdr_error("access log %s: %s", spec, strerror(errno));
        return PDR_EIO;
    }
    return 0;
}

/* ---- lifecycle.worker_startup_timeout_ms: as the sglang router's --worker-startup-timeout-secs, a router
 * whose workers never come up exits (1) instead of waiting forever; readiness stays 503 until then. Once a
 * healthy prefill/decode pair was seen the deadline is gone: workers failing later are the health
 * checks' business. Looked at every STARTUP_POLL_MS on loop 0. ---- */

#define STARTUP_POLL_MS 100

/* A worker of the role that serves and has passed a health check (loop 0 writes checks_ok). */
static int role_confirmed(pdr_router_t *r, pdr_role_t role)
{
    pdr_worker_t **ws;
    size_t n = pdr_pool_snapshot(&r->pool, role, &ws);
    int ok = 0;
    for (size_t i = 0; i < n && !ok; i++)
        ok = pdr_worker_serving(ws[i]) && ws[i]->checks_ok > 0;
    pdr_pool_release(ws, n);
    return ok;
}

static void on_startup_tick(uv_timer_t *h)
{
    pdr_router_t *r = h->data;
    uint64_t waited = pdr_now_ms() - r->started_ms;
    int limit = r->config->lifecycle.worker_startup_timeout_ms;
    if (role_confirmed(r, PDR_ROLE_PREFILL) && role_confirmed(r, PDR_ROLE_DECODE)) {
        __atomic_store_n(&r->startup_pending, 0, __ATOMIC_RELAXED);
        pdr_info("a healthy prefill/decode pair after %llu ms (lifecycle.worker_startup_timeout_ms %d)",
                 (unsigned long long)waited, limit);
    } else if (pdr_router_stopping(r)) {
        /* a shutdown began meanwhile: nothing to wait for */
    } else if (waited >= (uint64_t)limit) {
        pdr_error("no healthy prefill/decode pair within %d ms (lifecycle.worker_startup_timeout_ms, "
                  "--worker-startup-timeout-secs): %zu of %zu prefill and %zu of %zu decode workers healthy; "
                  "exiting",
                  limit, pdr_pool_count_healthy(&r->pool, PDR_ROLE_PREFILL),
                  pdr_pool_count(&r->pool, PDR_ROLE_PREFILL),
                  pdr_pool_count_healthy(&r->pool, PDR_ROLE_DECODE),
                  pdr_pool_count(&r->pool, PDR_ROLE_DECODE));
        r->exit_code = 1;
        __atomic_store_n(&r->stopping, 1, __ATOMIC_RELAXED);
        pdr__server_begin_drain(r); /* nothing was ever ready: no grace */
    } else {
        return;
    }
    r->startup_timer_live = 0;
    uv_close((uv_handle_t *)h, NULL);
}

static void startup_watch(pdr_router_t *r, const pdr_config_t *c)
{
    if (c->lifecycle.worker_startup_timeout_ms <= 0)
        return;
    uv_timer_init(r->threads[0].loop, &r->startup_timer);
    r->startup_timer.data = r;
    r->startup_timer_live = 1;
    uv_timer_start(&r->startup_timer, on_startup_tick, STARTUP_POLL_MS, STARTUP_POLL_MS);
}

int pdr_router_start(pdr_router_t *r, pdr_config_t *c, uv_loop_t *loop0)
{
    int argc = r->argc;
    char **argv = r->argv;
    small_socket_buffers(); /* loop 0 runs on this thread */
    memset(r, 0, sizeof(*r));
    pdr__conn_map_init();
    r->argc = argc;
    r->argv = argv;
    r->config = pdr_config_ref(c);
    r->startup_pending = c->lifecycle.worker_startup_timeout_ms > 0; /* before any loop answers readiness */
    pthread_mutex_init(&r->config_lock, NULL);
    if (c->source != NULL && c->source[0] != '<' && (r->config_path = strdup(c->source)) == NULL)
        return PDR_ENOMEM;
    char tok_err[1024];
    int rc = pdr_router_tokenizer_load(r, c, tok_err, sizeof(tok_err));
    if (rc != 0) {
        pdr_error("%s", tok_err);
        return rc;
    }
    pdr_tls_next_t tls_next;
    if ((rc = pdr_router_tls_prepare(c, &tls_next, tok_err, sizeof(tok_err))) != 0) {
        pdr_error("%s", tok_err);
        return rc;
    }
    pdr_router_tls_commit(r, &tls_next);
    if ((rc = pdr_pool_init(&r->pool, c)) != 0)
        return rc;
    if ((rc = open_access_log(r, c->log.access_log)) != 0)
        return rc;
    r->n_threads = c->threads > 0 ? c->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (r->n_threads < 1)
        r->n_threads = 1;
    if (r->n_threads > PDR_MAX_THREADS_RENDER)
        r->n_threads = PDR_MAX_THREADS_RENDER;
    r->threads = calloc((size_t)r->n_threads, sizeof(pdr_thread_t));
    if (r->threads == NULL)
        return PDR_ENOMEM;

    h2o_config_init(&r->h2o_config);
    r->h2o_config.server_name = h2o_iovec_init(H2O_STRLIT("pdrouter"));
    r->started_ms = pdr_now_ms();
    if ((rc = pdr_admin_init(r)) != 0)
        return rc;
    if ((rc = metrics_init(r, c)) != 0)
        return rc;
    pdr__limits_h2o_config(&r->h2o_config, c);
    h2o_hostconf_t *host =
        h2o_config_register_host(&r->h2o_config, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    pdr__limits_register(host);
    h2o_pathconf_t *path = h2o_config_register_path(host, "/", 0);
    route_handler_t *h = (route_handler_t *)h2o_create_handler(path, sizeof(*h));
    h->super.on_req = on_req;
    h->r = r;

    for (int i = 0; i < r->n_threads; i++) {
        uv_loop_t *loop = loop0;
        if (i > 0) {
            loop = malloc(sizeof(*loop));
            if (loop == NULL || uv_loop_init(loop) != 0) {
                free(loop);
                return PDR_ENOMEM;
            }
        }
        if ((rc = init_thread(r, &r->threads[i], i, loop)) != 0)
            return rc;
    }
    char terr[512];
    if ((rc = pdr_trace_start(c, terr, sizeof(terr))) != 0) {
        pdr_error("%s", terr);
        return rc;
    }
    if ((rc = pdr_health_start(r)) != 0)
        return rc;
    if ((rc = pdr_kv_events_start(r)) != 0)
        return rc;
    if ((rc = pdr_shim_events_init(r)) != 0)
        return rc;
    if ((rc = pdr_router_discovery_start(r)) != 0)
        return rc;
    if ((rc = pdr_gateway_start(r, readiness_ok)) != 0)
        return rc;
    for (int i = 1; i < r->n_threads; i++)
        if (uv_thread_create(&r->threads[i].tid, thread_main, &r->threads[i]) != 0)
            return PDR_ENOMEM;
    if (c->n_pools > 0)
        pdr_info("pdrouter listening on %s:%d with %d loop thread%s (%zu pools)", c->listen_host,
                 c->listen_port, r->n_threads, r->n_threads == 1 ? "" : "s", c->n_pools);
    else
        pdr_info("pdrouter listening on %s:%d with %d loop thread%s (%zu prefill, %zu decode, policy %s/%s, "
                 "protocol %s)",
                 c->listen_host, c->listen_port, r->n_threads, r->n_threads == 1 ? "" : "s", c->n_prefill,
                 c->n_decode, pdr_policy_name(c->policy_prefill), pdr_policy_name(c->policy_decode),
                 pdr_protocol_name(c->protocol));
    for (size_t i = 0; i < c->n_pools; i++) {
        const pdr_pool_conf_t *pl = &c->pools[i];
        pdr_info("pool %s: %zu model%s (%s%s), %zu prefill, %zu decode, policy %s/%s, protocol %s", pl->name,
                 pl->n_models, pl->n_models == 1 ? "" : "s", pl->models[0], pl->n_models > 1 ? ", ..." : "",
                 pl->n_prefill, pl->n_decode, pdr_policy_name(pl->policy_prefill),
                 pdr_policy_name(pl->policy_decode), pdr_protocol_name(pl->protocol));
    }
    if (c->listen_tls.cert_file != NULL)
        pdr_info("TLS on %s:%d with certificate %s (minimum TLS%s)", c->listen_host, c->listen_port,
                 c->listen_tls.cert_file, c->listen_tls.min_version == PDR_TLS_1_3 ? "1.3" : "1.2");
    pdr_admin_log_start(r);
    if (r->metrics_on)
        pdr_info("metrics listener on %s:%d (GET /metrics)", c->metrics_host, c->metrics_port);
    startup_watch(r, c);
    return 0;
}
