/*
 * The client-facing server: h2o (HTTP/1.1, h2c upgrade and prior knowledge) on the router's libuv
 * loop, the listeners and accepting, the route dispatch (to pd/, compat.c and, on the admin port,
 * admin.c), the small local endpoints (/health, /readiness), CORS on the data port
 * (cors.allowed_origins), the loop threads and the shutdown sequence. The routes are routes.c's table;
 * error answers are reply.c's, the access log accesslog.c's, client connections and their guards
 * conn.c's; none of them calls back here. Loop 0 also owns the admin listener (routes in admin.c, a
 * separate h2o config: no admin route on the data port), the metrics-only listener (metrics.port: GET
 * /metrics and nothing else, its own h2o config) and the worker startup deadline
 * (lifecycle.worker_startup_timeout_ms). The shutdown sequence is server_shutdown.c's.
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

/* ---- listeners and loops ---- */

#define ACCEPT_BATCH 64 /* connections taken per readiness event, so that one listener cannot hog a loop */
#define FD_EXHAUSTED_PAUSE_MS 100 /* nginx pauses accepting for 500 ms; idle connections close meanwhile */
#define FD_EXHAUSTED_LOG_MS 60000

static void on_listener_ready(uv_poll_t *h, int status, int events);

static void on_accept_resume(uv_timer_t *h)
{
    pdr_listener_t *l = h->data;
    uv_poll_start(&l->poll, UV_READABLE, on_listener_ready);
}

/* accept() found the process (EMFILE) or the system (ENFILE) out of file descriptors. Retrying at once
 * would spin: the pending connection stays in the backlog and the socket stays readable. Accepting
 * pauses instead, so the loop serves its open connections (and closes the ones whose clients left,
 * which frees descriptors); the backlog waits, as nginx does. Logged at most once a minute, counted. */
static void accept_exhausted(pdr_listener_t *l, int err)
{
    pdr_thread_t *t = l->t;
    t->m.accept_fd_exhausted_total++;
    uint64_t now = pdr_now_ms(), last = __atomic_load_n(&t->r->fd_exhausted_log_ms, __ATOMIC_RELAXED);
    if ((last == 0 || now - last >= FD_EXHAUSTED_LOG_MS) &&
        __atomic_compare_exchange_n(&t->r->fd_exhausted_log_ms, &last, now, 0, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED))
        pdr_warn(
            "accept: %s (%d client connections open on loop %d): not accepting for %d ms; raise the open "
            "files limit (ulimit -n, LimitNOFILE=) if this repeats",
            strerror(err), (int)t->conns, t->id, FD_EXHAUSTED_PAUSE_MS);
    uv_poll_stop(&l->poll);
    uv_timer_start(&l->resume, on_accept_resume, FD_EXHAUSTED_PAUSE_MS, 0);
}

static void on_listener_ready(uv_poll_t *h, int status, int events)
{
    pdr_listener_t *l = h->data;
    (void)events;
    if (status < 0)
        return;
    for (int i = 0; i < ACCEPT_BATCH; i++) {
        if (l == &l->t->listener && pdr__client_conns_full(l->t)) {
            /* limits.max_client_connections: the backlog waits, looked at again after the pause */
            l->t->m.accept_paused_total++;
            uv_poll_stop(&l->poll);
            uv_timer_start(&l->resume, on_accept_resume, FD_EXHAUSTED_PAUSE_MS, 0);
            return;
        }
        int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            pdr__serve_conn(l->t, l, fd);
            continue;
        }
        if (errno == EINTR || errno == ECONNABORTED)
            continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
            accept_exhausted(l, errno);
        return; /* EAGAIN: the backlog is empty */
    }
}

/* Before a listener closes: takes the connections the kernel already completed, which closing the
 * socket would reset, and serves them (their clients sent before the listener went away). */
void pdr__server_accept_backlog(pdr_thread_t *t, pdr_listener_t *l)
{
    for (int i = 0; i < 4096; i++) {
        int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        pdr__serve_conn(t, l, fd);
    }
}

static void on_listener_closed(uv_handle_t *h)
{
    pdr_listener_t *l = h->data;
    if (h == (uv_handle_t *)&l->poll) {
        close(l->fd);
        l->fd = -1;
    }
}

void pdr__server_close_listener(pdr_listener_t *l)
{
    uv_timer_stop(&l->resume);
    uv_close((uv_handle_t *)&l->resume, on_listener_closed);
    uv_close((uv_handle_t *)&l->poll, on_listener_closed);
}

static int open_listener_on(pdr_thread_t *t, const char *host, int port, int reuseport, pdr_listener_t *h,
                            int *listening);

static int open_listener(pdr_thread_t *t, const pdr_config_t *c)
{
    return open_listener_on(t, c->listen_host, c->listen_port, 1, &t->listener, &t->listening);
}

/* Binds host:port (SO_REUSEPORT when reuseport) and accepts on t's loop into `h`. */
static int open_listener_on(pdr_thread_t *t, const char *host, int port, int reuseport, pdr_listener_t *h,
                            int *listening)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)&ss) != 0 &&
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss) != 0) {
        pdr_error("%s %s is not an IP address",
                  h == &t->listener              ? "listen.host"
                  : h == &t->r->metrics_listener ? "metrics.host"
                                                 : "admin.host",
                  host);
        return PDR_EINVAL;
    }
    /* Every loop binds its own socket to the same address (SO_REUSEPORT): the kernel spreads new
     * connections over the loops without a shared accept queue. SO_REUSEPORT would also let a second
     * router (same user) bind the same port and silently take half the connections: the first loop
     * first binds a socket without it, which fails if anyone holds the port. */
    int one = 1;
    if (reuseport && t->id == 0) {
        int probe = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int busy =
            probe >= 0 &&
            (setsockopt(probe, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
             bind(probe, (struct sockaddr *)&ss,
                  ss.ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6)) != 0);
        int e = errno;
        if (probe >= 0)
            close(probe);
        if (busy) {
            pdr_error("cannot listen on %s:%d: %s (is another pdrouter running?)", host, port, strerror(e));
            return PDR_EIO;
        }
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        (reuseport && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0) ||
        bind(fd, (struct sockaddr *)&ss,
             ss.ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6)) != 0) {
        pdr_error("cannot listen on %s:%d: %s%s", host, port, strerror(errno),
                  h == &t->listener ? ""
                  : h == &t->r->metrics_listener
                      ? " (metrics.host/metrics.port, --prometheus-host/--prometheus-port)"
                      : " (admin.host/admin.port; port 0 turns the admin API off)");
        if (fd >= 0)
            close(fd);
        return PDR_EIO;
    }
    if (listen(fd, h == &t->listener ? 4096 : 64) != 0) {
        pdr_error("cannot listen on %s:%d: %s", host, port, strerror(errno));
        close(fd);
        return PDR_EIO;
    }
    h->t = t;
    h->fd = fd;
    h->admin = h == &t->r->admin_listener;
    h->metrics = h == &t->r->metrics_listener;
    uv_poll_init(t->loop, &h->poll, fd);
    h->poll.data = h;
    uv_timer_init(t->loop, &h->resume);
    h->resume.data = h;
    uv_poll_start(&h->poll, UV_READABLE, on_listener_ready);
    *listening = 1;
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
    int rc = open_listener(t, r->config);
    if (rc == 0 && id == 0 && r->admin_on) {
        /* The admin port is one socket on loop 0 (no SO_REUSEPORT: a second router on the same admin port
         * is a configuration error, not a load-balancing peer). */
        h2o_context_init(&r->admin_ctx, loop, &r->admin_config);
        r->admin_ctx_live = 1;
        r->admin_accept.ctx = &r->admin_ctx;
        r->admin_accept.hosts = r->admin_config.hosts;
        rc = open_listener_on(t, r->config->admin_host, r->config->admin_port, 0, &r->admin_listener,
                              &r->admin_listening);
    }
    if (rc == 0 && id == 0 && r->metrics_on) {
        h2o_context_init(&r->metrics_ctx, loop, &r->metrics_config);
        r->metrics_ctx_live = 1;
        r->metrics_accept.ctx = &r->metrics_ctx;
        r->metrics_accept.hosts = r->metrics_config.hosts;
        rc = open_listener_on(t, r->config->metrics_host, r->config->metrics_port, 0, &r->metrics_listener,
                              &r->metrics_listening);
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
