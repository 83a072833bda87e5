/*
 * The client-facing server: h2o (HTTP/1.1, h2c upgrade and prior knowledge) on the router's libuv
 * loop, the route table, the small local endpoints (/health, /readiness, /metrics), error answers in
 * the OpenAI shape, CORS on the data port (cors.allowed_origins), the batched access log, the loop
 * threads and the shutdown sequence. Loop 0 also owns the admin listener (routes in admin.c, a separate
 * h2o config: no admin route on the data port), the metrics-only listener (metrics.port: GET /metrics and
 * nothing else, its own h2o config) and the worker startup deadline (lifecycle.worker_startup_timeout_ms).
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
#include "err.h"
#include "reqguard.h"
#include "kv_events.h"
#include "router.h"
#include "util.h"

#define ALOG_FLUSH_MS 100
#define ALOG_MAX (256 * 1024)
#define PDR_MAX_THREADS_RENDER 256

typedef struct route_handler {
    h2o_handler_t super;
    pdr_router_t *r;
} route_handler_t;

static void start_loop_shutdown(pdr_thread_t *t);
static void begin_drain(pdr_router_t *r);

static void json_escape(char *out, size_t cap, const char *s)
{
    size_t o = 0;
    for (; *s && o + 7 < cap; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') {
            out[o++] = '\\';
            out[o++] = (char)ch;
        } else if (ch < 0x20) {
            o += (size_t)snprintf(out + o, cap - o, "\\u%04x", ch);
        } else {
            out[o++] = (char)ch;
        }
    }
    out[o] = '\0';
}

void pdr_send_error(h2o_req_t *req, int status, const char *type, const char *msg, int retry_after_s)
{
    char esc[512], body[768];
    json_escape(esc, sizeof(esc), msg);
    int n = snprintf(body, sizeof(body), "{\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"code\":%d}}", esc,
                     type, status);
    req->res.status = status;
    req->res.reason = pdr_http_reason(status);
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
                   H2O_STRLIT("application/json"));
    if (retry_after_s > 0) {
        char ra[16];
        int k = snprintf(ra, sizeof(ra), "%d", retry_after_s);
        h2o_iovec_t v = h2o_strdup(&req->pool, ra, (size_t)k);
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_RETRY_AFTER, NULL, v.base, v.len);
    }
    req->res.content_length = (size_t)n;
    h2o_send_inline(req, body, (size_t)n);
}

void pdr_send_body(h2o_req_t *req, int status, const char *ctype, const char *body, size_t len)
{
    req->res.status = status;
    req->res.reason = pdr_http_reason(status);
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, ctype, strlen(ctype));
    req->res.content_length = len;
    h2o_send_inline(req, body, len);
}

int pdr_send_json(h2o_req_t *req, int status, json_t *o)
{
    char *s = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (s == NULL) {
        pdr_send_error(req, 503, "service_unavailable", "out of memory", 1);
        return 503;
    }
    pdr_send_body(req, status, "application/json", s, strlen(s));
    free(s);
    return status;
}

/* ---- access log ---- */

static void alog_flush(pdr_thread_t *t)
{
    size_t off = 0;
    while (off < t->alog_len) {
        ssize_t n = write(t->r->access_fd, t->alog + off, t->alog_len - off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            break; /* EAGAIN on a full pipe or a broken log: drop this batch rather than block the loop */
        }
        off += (size_t)n;
    }
    t->alog_len = 0;
}

#define ALOG_ABORT_PER_S 100

static void alog_summary(pdr_thread_t *t)
{
    char line[192];
    int n = snprintf(line, sizeof(line),
                     "{\"ts_us\":%" PRIu64 ",\"suppressed\":%" PRIu64
                     ",\"error\":\"client_abort\",\"note\":\"lines of "
                     "client-aborted requests over %d/s per loop\"}\n",
                     pdr_wall_us(), t->alog_suppressed, ALOG_ABORT_PER_S);
    t->alog_suppressed = 0;
    pdr_access_log(t, line, (size_t)n);
}

static void on_alog_timer(uv_timer_t *h)
{
    pdr_thread_t *t = h->data;
    if (t->alog_suppressed > 0)
        alog_summary(t);
    if (t->alog_len > 0)
        alog_flush(t);
}

void pdr_access_log_aborted(pdr_thread_t *t, const char *line, size_t len)
{
    if (t->r->access_fd < 0 || t->alog == NULL)
        return;
    uint64_t now = pdr_now_ms();
    t->alog_abort_tokens += (double)(now - t->alog_abort_ms) * ALOG_ABORT_PER_S / 1000;
    if (t->alog_abort_tokens > ALOG_ABORT_PER_S)
        t->alog_abort_tokens = ALOG_ABORT_PER_S;
    t->alog_abort_ms = now;
    if (t->alog_abort_tokens >= 1) {
        t->alog_abort_tokens -= 1;
        pdr_access_log(t, line, len);
        return;
    }
    t->alog_suppressed++;
    t->m.alog_suppressed_total++;
    if (t->alog_closed)
        alog_summary(t);
    else if (!uv_is_active((uv_handle_t *)&t->alog_timer))
        uv_timer_start(&t->alog_timer, on_alog_timer, ALOG_FLUSH_MS, 0);
}

void pdr_access_log(pdr_thread_t *t, const char *line, size_t len)
{
    if (t->r->access_fd < 0 || t->alog == NULL)
        return;
    if (t->alog_len + len > t->alog_cap) {
        if (t->alog_len > 0)
            alog_flush(t);
        if (len > t->alog_cap)
            return;
    }
    memcpy(t->alog + t->alog_len, line, len);
    t->alog_len += len;
    if (t->alog_closed) /* shutting down: requests ending after the last batch are written at once */
        alog_flush(t);
    else if (!uv_is_active((uv_handle_t *)&t->alog_timer))
        uv_timer_start(&t->alog_timer, on_alog_timer, ALOG_FLUSH_MS, 0);
}

/* ---- routes ---- */

static int path_is(h2o_req_t *req, const char *p)
{
    size_t len = req->query_at != SIZE_MAX ? req->query_at : req->path.len;
    return len == strlen(p) && memcmp(req->path.base, p, len) == 0;
}

void pdr__send_metrics(pdr_thread_t *t, h2o_req_t *req)
{
    pdr_router_t *r = t->r;
    pdr_metrics_count_request(&t->m, PDR_MR_METRICS, 200, 0, -1);
    size_t len = 0;
    const pdr_metrics_t *ms[PDR_MAX_THREADS_RENDER];
    size_t n = 0;
    for (int i = 0; i < r->n_threads && n < PDR_MAX_THREADS_RENDER; i++)
        ms[n++] = &r->threads[i].m;
    pdr_metrics_extra_t x = {
        .inflight = __atomic_load_n(&r->inflight, __ATOMIC_RELAXED),
        .max_inflight = t->config->limits.max_inflight,
        .reloads_ok = __atomic_load_n(&r->reloads_ok, __ATOMIC_RELAXED),
        .reloads_failed = __atomic_load_n(&r->reloads_failed, __ATOMIC_RELAXED),
        .router = r,
    };
    char *text = pdr_metrics_render(&r->pool, ms, n, &x, &len);
    if (text == NULL) {
        pdr_send_error(req, 503, "service_unavailable", "out of memory", 1);
        return;
    }
    pdr_send_body(req, 200, "text/plain; version=0.0.4", text, len);
    free(text);
}

/* Ready when every pool has a healthy (healthy and not draining) prefill and decode worker, as a
 * Kubernetes readiness probe wants: a router that would answer 503 for one of its models takes no traffic.
 * Else 0 with the reason in msg, naming the pools that have no pair. */
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
    char names[PDR_CONFIG_MAX_POOLS][64], list[300];
    size_t ng = pdr_pool_groups(&r->pool, names, PDR_CONFIG_MAX_POOLS), bad = 0, n = 0;
    list[0] = '\0';
    for (size_t i = 0; i < ng; i++) {
        if (pdr_pool_count_healthy_in(&r->pool, names[i], PDR_ROLE_PREFILL) > 0 &&
            pdr_pool_count_healthy_in(&r->pool, names[i], PDR_ROLE_DECODE) > 0)
            continue;
        if (n + strlen(names[i]) + 3 < sizeof(list))
            n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%s", bad ? ", " : "", names[i]);
        bad++;
    }
    if (bad > 0 && ng == 1 && strcmp(names[0], PDR_DEFAULT_POOL) == 0)
        snprintf(msg, cap, "no healthy prefill or decode worker");
    else if (bad > 0)
        snprintf(msg, cap, "no healthy prefill or decode worker in pool%s %s", bad > 1 ? "s" : "", list);
    return ng > 0 && bad == 0;
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
    if (pdr__refuse_ambiguous_head(t, req))
        return 0;
    if (t->config->cors.n > 0 && cors_apply(t, req))
        return 0;
    int is_post = h2o_memis(req->method.base, req->method.len, H2O_STRLIT("POST"));
    int is_get = h2o_memis(req->method.base, req->method.len, H2O_STRLIT("GET"));
    static const struct {
        const char *path;
        pdr_route_t route;
        int mroute;
    } pd_routes[] = {{"/generate", PDR_ROUTE_GENERATE, PDR_MR_GENERATE},
                     {"/v1/completions", PDR_ROUTE_COMPLETIONS, PDR_MR_COMPLETIONS},
                     {"/v1/chat/completions", PDR_ROUTE_CHAT, PDR_MR_CHAT}};
    for (size_t i = 0; i < sizeof(pd_routes) / sizeof(pd_routes[0]); i++) {
        if (path_is(req, pd_routes[i].path)) {
            if (!is_post) {
                pdr_send_error(req, 405, "invalid_request_error", "use POST", 0);
                pdr_metrics_count_request(&t->m, pd_routes[i].mroute, 405, 0, -1);
                return 0;
            }
            return pdr_pd_handle(t, req, pd_routes[i].route, pd_routes[i].mroute);
        }
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
    if (is_get && path_is(req, "/health")) {
        pdr_send_body(req, 200, "text/plain", "ok\n", 3);
        pdr_metrics_count_request(&t->m, PDR_MR_HEALTH, 200, 0, -1);
        return 0;
    }
    if (is_get && path_is(req, "/readiness")) {
        char rwhy[400] = "no pool";
        int ok = readiness_ok(r, rwhy, sizeof(rwhy));
        if (ok)
            pdr_send_body(req, 200, "text/plain", "ready\n", 6);
        else
            pdr_send_error(req, 503, "service_unavailable", rwhy, 1);
        pdr_metrics_count_request(&t->m, PDR_MR_READINESS, ok ? 200 : 503, 0, -1);
        return 0;
    }
    if (is_get && path_is(req, "/metrics")) {
        pdr__send_metrics(t, req);
        return 0;
    }
    if (is_get && path_is(req, "/v1/models"))
        return pdr_models_handle(t, req);
    if (pdr_compat_handle(t, req))
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

static void maybe_dispose_h2o(pdr_thread_t *t)
{
    /* Once shutting down and the last connection closed, the context's own timers can go too, and
     * the loop ends by itself. */
    pdr_router_t *r = t->r;
    if (t->closing && t->multi == NULL && t->conns == 0 && !t->h2o_disposed &&
        !h2o_timeout_is_linked(&t->h2o_ctx.http2._graceful_shutdown_timeout) &&
        !(t->id == 0 && r->admin_ctx_live &&
          h2o_timeout_is_linked(&r->admin_ctx.http2._graceful_shutdown_timeout)) &&
        !(t->id == 0 && r->metrics_ctx_live &&
          h2o_timeout_is_linked(&r->metrics_ctx.http2._graceful_shutdown_timeout))) {
        t->h2o_disposed = 1;
        h2o_context_dispose(&t->h2o_ctx);
        if (t->id == 0 && r->admin_ctx_live) {
            r->admin_ctx_live = 0;
            h2o_context_dispose(&r->admin_ctx);
        }
        if (t->id == 0 && r->metrics_ctx_live) {
            r->metrics_ctx_live = 0;
            h2o_context_dispose(&r->metrics_ctx);
        }
        uv_close((uv_handle_t *)&t->stop_timer, NULL);
        uv_close((uv_handle_t *)&t->shutdown_timer, NULL);
        uv_close((uv_handle_t *)&t->rewrap_prepare, NULL);
    }
}

/* h2o owns the handle's data pointer: the loop is found through this wrapper instead. */
typedef struct client_conn {
    uv_tcp_t tcp;
    pdr_thread_t *t;
    int fd;
    /* HTTP/2 streams the client reset or abandoned before their answer ended: a token bucket of
     * limits.h2_max_resets refilled over RESET_WINDOW_MS; empty, the connection is closed. */
    double reset_tokens;
    uint64_t reset_ms;
    int condemned; /* closed for a reset flood: requests still parsed from its buffer are refused */
    /* HTTP/1 chunked-body guard (chunk_guard_read): */
    h2o_socket_t *sock;
    size_t g_last_size; /* the input buffer's size when h2o last returned from a read */
    size_t g_head_len;  /* of the request whose body is being followed */
    int g_active;
    pdr_chunkguard_t g;
    pdr_dlink_t rewrap; /* on t->rewrap */
    /* HTTP/2 header-block guard (h2_guard_read): decided at the connection's first bytes */
    enum { H2G_UNDECIDED = 0, H2G_FOLLOWING, H2G_OFF } h2_state;
    pdr_h2guard_t h2g;
} client_conn_t;

#define RESET_WINDOW_MS 10000

/* The client connection of each descriptor, for the HTTP/2 reset accounting: h2o does not expose the
 * socket's handle, but a request's socket gives its descriptor. Sized to the open files limit; a slot is
 * written only by the loop that owns the descriptor. */
static client_conn_t **conn_by_fd;
static size_t conn_by_fd_len;

static void conn_map_init(void)
{
    struct rlimit rl;
    size_t n =
        getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? (size_t)rl.rlim_cur : 65536;
    if (n > (1u << 22))
        n = 1u << 22;
    conn_by_fd = calloc(n, sizeof(*conn_by_fd));
    conn_by_fd_len = conn_by_fd != NULL ? n : 0;
}

static client_conn_t *conn_of(h2o_req_t *req)
{
    h2o_socket_t *sock = req->conn->callbacks->get_socket(req->conn);
    if (sock == NULL)
        return NULL;
    int fd = h2o_socket_get_fd(sock);
    return fd >= 0 && (size_t)fd < conn_by_fd_len ? conn_by_fd[fd] : NULL;
}

int pdr__conn_condemned(h2o_req_t *req)
{
    client_conn_t *cc = conn_of(req);
    return cc != NULL && cc->condemned;
}

static int h2_send_goaway(uv_tcp_t *tcp, int fd, int settings_first, uint32_t last_stream, const char *debug);

int pdr__note_client_reset(pdr_thread_t *t, h2o_req_t *req)
{
    t->m.h2_client_resets_total++;
    int limit = t->config->limits.h2_max_resets;
    client_conn_t *cc = conn_of(req);
    if (limit == 0 || cc == NULL || cc->condemned)
        return cc != NULL && cc->condemned;
    uint64_t now = pdr_now_ms();
    cc->reset_tokens += (double)(now - cc->reset_ms) * limit / RESET_WINDOW_MS;
    if (cc->reset_tokens > limit)
        cc->reset_tokens = limit;
    cc->reset_ms = now;
    cc->reset_tokens -= 1;
    if (cc->reset_tokens >= 0)
        return 0;
    /* h2o 2.2.5 has no call to send this connection a GOAWAY: the router writes one itself when nothing
     * of h2o's is waiting to be written, then resets the socket (h2o sees the close on its next read and
     * disposes of every stream). */
    cc->condemned = 1;
    t->m.h2_reset_floods_total++;
    char debug[96];
    snprintf(debug, sizeof(debug), "more than %d streams reset in %d s (limits.h2_max_resets)", limit,
             RESET_WINDOW_MS / 1000);
    h2_send_goaway(&cc->tcp, cc->fd, 0, cc->h2_state == H2G_FOLLOWING ? cc->h2g.last_stream : 0x7fffffff,
                   debug);
    pdr_warn("HTTP/2 client reset more than %d streams in %d s on one connection (limits.h2_max_resets): "
             "connection closed",
             limit, RESET_WINDOW_MS / 1000);
    struct linger lg = {1, 0};
    setsockopt(cc->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    shutdown(cc->fd, SHUT_RDWR);
    return 1;
}

/* ---- HTTP/1: a chunked body whose declared chunk cannot fit limits.max_body_bytes ----
 *
 * h2o 2.2.5 de-chunks a request body in place, inside its own read callback, before any handler runs: a
 * chunk that declares more than the body limit makes it wait for those bytes until its 10 s request
 * timeout, then close without an answer. The router puts its own read callback in front of h2o's for
 * HTTP/1 connections: it follows the chunked framing of the raw bytes before h2o decodes them and answers
 * 413 at once (then h2o closes the connection). It fails open: it follows a body only when it saw the
 * head complete in the same read and every read since, and checks after each read that h2o's decoded
 * length is the one it predicts; any doubt stops it for that request, and h2o's own handling stands.
 * h2o sets its callback again whenever it restarts reading (after each response); the router's goes back
 * in front before the next poll (rewrap_prepare), or at once when that happens inside a read. */

static h2o_socket_cb h1_reqread; /* h2o's HTTP/1 read callback, learned at the first accept */

static void chunk_guard_read(h2o_socket_t *sock, const char *err);

static void guard_wrap(client_conn_t *cc)
{
    if (cc->sock != NULL && h1_reqread != NULL && cc->sock->_cb.read == h1_reqread) {
        cc->sock->_cb.read = chunk_guard_read;
        cc->g_last_size = cc->sock->input->size;
    }
}

static void on_rewrap_prepare(uv_prepare_t *h)
{
    pdr_thread_t *t = h->data;
    while (t->rewrap != NULL) {
        client_conn_t *cc = PDR_DLINK_ITEM(t->rewrap, client_conn_t, rewrap);
        pdr_dlink_unlink(&cc->rewrap);
        guard_wrap(cc);
    }
    uv_prepare_stop(h);
}

/* An HTTP/1 request is disposed of: its response is over, and h2o is about to restart reading with its
 * own callback. */
static void on_h1_req_dispose(void *p)
{
    client_conn_t *cc = *(client_conn_t **)p;
    pdr_thread_t *t = cc->t;
    cc->g_active = 0;
    if (pdr_dlink_linked(&cc->rewrap))
        return;
    pdr_dlink_push(&t->rewrap, &cc->rewrap);
    uv_prepare_start(&t->rewrap_prepare, on_rewrap_prepare);
}

/* Looks at the bytes h2o is about to read: 1 when a chunk declares more than the body limit allows. */
static int chunk_guard_inspect(client_conn_t *cc, h2o_socket_t *sock)
{
    const char *p = sock->input->bytes;
    size_t size = sock->input->size, pre = cc->g_last_size;
    if (pre > size) { /* consumed meanwhile: not the bytes this guard knows */
        cc->g_active = 0;
        return 0;
    }
    size_t from = pre;
    if (!cc->g_active) {
        int chunked;
        size_t head = pdr_reqguard_head_len(p, size, &chunked);
        if (head == 0 || !chunked || head <= pre)
            return 0; /* no head, not chunked, or a head this guard did not see arrive */
        cc->g_active = 1;
        cc->g_head_len = head;
        pdr_chunkguard_init(&cc->g, (uint64_t)cc->t->config->limits.max_body_bytes);
        from = head;
    }
    switch (pdr_chunkguard_feed(&cc->g, p + from, size - from)) {
    case PDR_CHUNK_TOO_BIG:
        return 1;
    case PDR_CHUNK_MORE:
        return 0;
    default: /* DONE (h2o dispatches the request now) or LOST (h2o answers it) */
        cc->g_active = 0;
        return 0;
    }
}

/* ---- HTTP/2: a header block larger than h2o takes ----
 *
 * Connections that open with the HTTP/2 preface (h2c with prior knowledge) have their frames followed by
 * pdr_h2guard_t, fed as the HTTP/1 guard is fed: the bytes each read adds, before h2o's callback sees
 * them (h2o consumes whole frames from the front of the buffer and never stops reading an HTTP/2
 * connection, so its callback is wrapped once). A header block past H2O_MAX_REQLEN gets a GOAWAY
 * ENHANCE_YOUR_CALM that says so, and the connection is closed; h2o would reset the stream and then
 * close with an unrelated debug text. */

static h2o_socket_cb h2_read; /* h2o's HTTP/2 read callback, learned at the first switch */

#define H2_ENHANCE_YOUR_CALM 0xb

/* Writes a GOAWAY straight to the socket when nothing of h2o's is waiting to be written (so it lands
 * between frames). settings_first: h2o has not sent its SETTINGS yet (the client expects them first).
 * Returns 1 when written. */
static int h2_send_goaway(uv_tcp_t *tcp, int fd, int settings_first, uint32_t last_stream, const char *debug)
{
    if (uv_stream_get_write_queue_size((uv_stream_t *)tcp) != 0)
        return 0;
    char buf[9 + 8 + 160];
    size_t n = 0;
    if (settings_first) {
        static const char empty_settings[9] = {0, 0, 0, 0x4, 0, 0, 0, 0, 0};
        memcpy(buf, empty_settings, sizeof(empty_settings));
        n = sizeof(empty_settings);
    }
    size_t g = pdr_h2_goaway_frame(buf + n, sizeof(buf) - n, last_stream, H2_ENHANCE_YOUR_CALM, debug);
    if (g == 0)
        return 0;
    n += g;
    return send(fd, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)n;
}

/* Feeds the bytes added since h2o last returned: 1 when the connection must be refused. */
static int h2_guard_inspect(client_conn_t *cc, h2o_socket_t *sock)
{
    size_t size = sock->input->size, pre = cc->g_last_size;
    if (pre > size) {
        cc->h2_state = H2G_OFF;
        return 0;
    }
    switch (pdr_h2guard_feed(&cc->h2g, sock->input->bytes + pre, size - pre)) {
    case PDR_H2G_TOO_BIG:
        return 1;
    case PDR_H2G_LOST:
        cc->h2_state = H2G_OFF;
        return 0;
    default:
        return 0;
    }
}

static void h2_refuse_block(client_conn_t *cc, h2o_socket_t *sock, h2o_socket_cb next)
{
    char debug[160];
    snprintf(debug, sizeof(debug),
             "header block of stream %" PRIu32 " exceeds %u bytes (HEADERS + CONTINUATION)",
             cc->h2g.block_stream, (unsigned)H2O_MAX_REQLEN);
    h2_send_goaway(&cc->tcp, cc->fd, next != h2_read, cc->h2g.last_stream, debug);
    shutdown(cc->fd, SHUT_WR);
    cc->t->m.h2_header_block_too_large_total++;
    cc->h2_state = H2G_OFF;
    next(sock, h2o_socket_error_closed); /* h2o closes the connection */
}

static void h2_guard_read(h2o_socket_t *sock, const char *err)
{
    int fd = h2o_socket_get_fd(sock);
    client_conn_t *cc = fd >= 0 && (size_t)fd < conn_by_fd_len ? conn_by_fd[fd] : NULL;
    if (err == NULL && cc != NULL && cc->h2_state == H2G_FOLLOWING && h2_guard_inspect(cc, sock)) {
        h2_refuse_block(cc, sock, h2_read);
        return;
    }
    h2_read(sock, err);
    if (cc != NULL && err == NULL)
        cc->g_last_size = sock->input->size;
}

/* After h2o's HTTP/1 callback switched the connection to HTTP/2: its HTTP/2 callback gets the guard. */
static void h2_guard_wrap(client_conn_t *cc, h2o_socket_t *sock)
{
    h2o_socket_cb cb = sock->_cb.read;
    if (cb == NULL || cb == h1_reqread || cb == chunk_guard_read || cb == h2_guard_read) {
        return;
    }
    if (h2_read == NULL)
        h2_read = cb;
    if (cb != h2_read) {
        cc->h2_state = H2G_OFF;
        return;
    }
    sock->_cb.read = h2_guard_read;
    cc->g_last_size = sock->input->size;
}

static int is_preface_start(const h2o_socket_t *sock)
{
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    size_t n = sock->input->size < sizeof(preface) - 1 ? sock->input->size : sizeof(preface) - 1;
    return n > 0 && memcmp(sock->input->bytes, preface, n) == 0;
}

/* Answers an HTTP/1 request whose head passes the router's limits before h2o parses it (see
 * pdr_reqguard_head_limits), then lets h2o close the connection. */
static int head_guard(client_conn_t *cc, h2o_socket_t *sock, int fd)
{
    const pdr_config_t *c = cc->t->config;
    int st = pdr_reqguard_head_limits(sock->input->bytes, sock->input->size, (size_t)c->limits.max_headers,
                                      (size_t)c->limits.max_header_bytes);
    if (st == 0)
        return 0;
    char body[320], resp[640];
    int bn = snprintf(
        body, sizeof(body), "{\"error\":{\"message\":\"%s\",\"type\":\"invalid_request_error\",\"code\":%d}}",
        st == 414 ? "the request line is longer than limits.max_header_bytes"
                  : "the request head has more fields than limits.max_headers or more bytes than "
                    "limits.max_header_bytes",
        st);
    int n = snprintf(resp, sizeof(resp),
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nConnection: close\r\n"
                     "Content-Length: %d\r\n\r\n%s",
                     st, pdr_http_reason(st), bn, body);
    /* Nothing else is being written on the connection: h2o is still reading this request. */
    ssize_t w = send(fd, resp, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)w;
    shutdown(fd, SHUT_WR);
    cc->t->m.headers_too_large_total++;
    cc->g_active = 0;
    h1_reqread(sock, h2o_socket_error_closed); /* h2o closes the connection */
    return 1;
}

static void chunk_guard_read(h2o_socket_t *sock, const char *err)
{
    int fd = h2o_socket_get_fd(sock);
    client_conn_t *cc = fd >= 0 && (size_t)fd < conn_by_fd_len ? conn_by_fd[fd] : NULL;
    if (err == NULL && cc != NULL && cc->h2_state == H2G_UNDECIDED && sock->input->size > 0) {
        cc->h2_state = is_preface_start(sock) ? H2G_FOLLOWING : H2G_OFF;
        if (cc->h2_state == H2G_FOLLOWING)
            pdr_h2guard_init(&cc->h2g, H2O_MAX_REQLEN);
    }
    if (err == NULL && cc != NULL && cc->h2_state == H2G_FOLLOWING) {
        /* The HTTP/2 preface (prior knowledge): h2o switches the connection inside its HTTP/1 callback. */
        if (h2_guard_inspect(cc, sock)) {
            h2_refuse_block(cc, sock, h1_reqread);
            return;
        }
        h1_reqread(sock, err);
        if (sock->_cb.read == chunk_guard_read || sock->_cb.read == h1_reqread) {
            sock->_cb.read = chunk_guard_read; /* still HTTP/1: the preface is not complete yet */
            cc->g_last_size = sock->input->size;
        } else if (cc->h2_state == H2G_FOLLOWING) {
            h2_guard_wrap(cc, sock);
        }
        return;
    }
    if (err == NULL && cc != NULL && !cc->g_active && head_guard(cc, sock, fd))
        return;
    if (err == NULL && cc != NULL && chunk_guard_inspect(cc, sock)) {
        static const char body[] =
            "{\"error\":{\"message\":\"a chunk of the request body exceeds "
            "limits.max_body_bytes\",\"type\":\"invalid_request_error\",\"code\":413}}";
        char resp[384];
        int n = snprintf(
            resp, sizeof(resp),
            "HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\nConnection: close\r\n"
            "Content-Length: %zu\r\n\r\n%s",
            sizeof(body) - 1, body);
        /* Nothing else is being written on the connection: h2o is still reading this request. */
        ssize_t w = send(fd, resp, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL);
        (void)w;
        shutdown(fd, SHUT_WR);
        cc->t->m.chunk_too_large_total++;
        cc->g_active = 0;
        h1_reqread(sock, h2o_socket_error_closed); /* h2o closes the connection */
        return;
    }
    h1_reqread(sock, err);
    if (cc == NULL || err != NULL)
        return;
    if (sock->_cb.read == h1_reqread)
        sock->_cb.read = chunk_guard_read; /* h2o restarted reading inside its callback */
    cc->g_last_size = sock->input->size;
    if (cc->g_active && sock->input->size != cc->g_head_len + cc->g.data)
        cc->g_active = 0; /* h2o decoded something else than predicted: stop following */
}

static void on_conn_closed(uv_handle_t *h)
{
    client_conn_t *cc = (client_conn_t *)h;
    pdr_thread_t *t = cc->t;
    pdr_dlink_unlink(&cc->rewrap);
    if (cc->fd >= 0 && (size_t)cc->fd < conn_by_fd_len && conn_by_fd[cc->fd] == cc)
        conn_by_fd[cc->fd] = NULL;
    t->conns--;
    free(cc);
    maybe_dispose_h2o(t);
}

/* HTTP/1: refuses a request whose head may be framed differently by another parser (reqguard.h) with 400,
 * and closes the connection, so that nothing after it on the connection is read as a request. h2o keeps
 * the raw head at the start of the connection's input buffer until the response is over. */
int pdr__refuse_ambiguous_head(pdr_thread_t *t, h2o_req_t *req)
{
    if (req->version >= 0x200)
        return 0;
    client_conn_t *cc = conn_of(req);
    if (cc != NULL) {
        client_conn_t **anchor = h2o_mem_alloc_shared(&req->pool, sizeof(*anchor), on_h1_req_dispose);
        *anchor = cc;
    }
    h2o_socket_t *sock = req->conn->callbacks->get_socket(req->conn);
    if (sock == NULL || sock->input == NULL)
        return 0;
    const char *why;
    if (pdr_reqguard_check_head(sock->input->bytes, sock->input->size, &why) == 0)
        return 0;
    t->m.bad_framing_total++;
    req->http1_is_persistent = 0;
    char msg[160];
    snprintf(msg, sizeof(msg), "malformed request: %s", why);
    pdr_send_error(req, 400, "invalid_request_error", msg, 0);
    return 1;
}

/* Hands an accepted connection to h2o. */
static void serve_conn(pdr_thread_t *t, pdr_listener_t *l, int fd)
{
    client_conn_t *cc = malloc(sizeof(*cc));
    if (cc == NULL) {
        close(fd);
        return;
    }
    uv_tcp_t *conn = &cc->tcp;
    cc->t = t;
    uv_tcp_init(t->loop, conn);
    if (uv_tcp_open(conn, fd) != 0) {
        close(fd);
        uv_close((uv_handle_t *)conn, (uv_close_cb)free);
        return;
    }
    uv_tcp_nodelay(conn, 1);
    cc->fd = fd;
    cc->reset_tokens = t->config->limits.h2_max_resets;
    cc->reset_ms = pdr_now_ms();
    cc->condemned = 0;
    if ((size_t)fd < conn_by_fd_len)
        conn_by_fd[fd] = cc;
    t->conns++; /* admin connections count too: loop 0 ends only when they are gone */
    h2o_socket_t *sock = h2o_uv_socket_create((uv_stream_t *)conn, on_conn_closed);
    cc->sock = sock;
    cc->g_active = 0;
    cc->g_last_size = 0;
    cc->h2_state = H2G_UNDECIDED;
    cc->rewrap = (pdr_dlink_t){NULL, NULL};
    h2o_accept(l->metrics ? &t->r->metrics_accept : l->admin ? &t->r->admin_accept : &t->accept_ctx, sock);
    /* A plain connection starts as HTTP/1: the callback h2o reads it with is its HTTP/1 one. */
    if (h1_reqread == NULL)
        h1_reqread = sock->_cb.read;
    guard_wrap(cc);
}

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
        int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            serve_conn(l->t, l, fd);
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
static void accept_backlog(pdr_thread_t *t, pdr_listener_t *l)
{
    for (int i = 0; i < 4096; i++) {
        int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        serve_conn(t, l, fd);
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

static void close_listener(pdr_listener_t *l)
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

/* This loop's share of limits.max_connections_per_worker (each loop keeps its own pool): rounded up,
 * so the total may exceed the limit by at most threads - 1. */
static void apply_conn_limit(pdr_thread_t *t)
{
    size_t limit = (size_t)t->config->limits.max_connections_per_worker, n = (size_t)t->r->n_threads;
    pdr_multi_set_conn_limit(t->multi, limit == 0 ? 0 : (limit + n - 1) / n);
}

void pdr_thread_sync_config(pdr_thread_t *t)
{
    pdr_router_t *r = t->r;
    pthread_mutex_lock(&r->config_lock);
    pdr_config_t *old = NULL;
    if (t->config != r->config) {
        old = t->config;
        t->config = pdr_config_ref(r->config);
    }
    pthread_mutex_unlock(&r->config_lock);
    if (old != NULL) {
        apply_conn_limit(t);
        pdr_config_unref(old);
    }
}

static void on_wakeup(uv_async_t *a)
{
    pdr_thread_t *t = a->data;
    pdr_thread_sync_config(t);
    if (__atomic_load_n(&t->r->draining, __ATOMIC_ACQUIRE) && !t->closing)
        start_loop_shutdown(t);
}

static int init_thread(pdr_router_t *r, pdr_thread_t *t, int id, uv_loop_t *loop)
{
    t->r = r;
    t->id = id;
    t->loop = loop;
    t->config = pdr_config_ref(r->config);
    t->multi = pdr_multi_new(loop, 1024);
    if (t->multi == NULL)
        return PDR_ENOMEM;
    apply_conn_limit(t);
    h2o_context_init(&t->h2o_ctx, loop, &r->h2o_config);
    t->accept_ctx.ctx = &t->h2o_ctx;
    t->accept_ctx.hosts = r->h2o_config.hosts;
    uv_timer_init(loop, &t->alog_timer);
    t->alog_timer.data = t;
    t->alog_abort_tokens = ALOG_ABORT_PER_S;
    t->alog_abort_ms = pdr_now_ms();
    if (r->access_fd >= 0) {
        t->alog_cap = ALOG_MAX;
        t->alog = malloc(t->alog_cap);
        if (t->alog == NULL)
            return PDR_ENOMEM;
    }
    uv_async_init(loop, &t->wakeup, on_wakeup);
    t->wakeup.data = t;
    uv_prepare_init(loop, &t->rewrap_prepare);
    t->rewrap_prepare.data = t;
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
        begin_drain(r); /* nothing was ever ready: no grace */
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
    if (conn_by_fd == NULL)
        conn_map_init();
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
    /* h2o answers 413 itself above this; the handler repeats the check in the OpenAI error shape. */
    r->h2o_config.max_request_entity_size = (size_t)c->limits.max_body_bytes;
    h2o_hostconf_t *host =
        h2o_config_register_host(&r->h2o_config, h2o_iovec_init(H2O_STRLIT("default")), 65535);
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
    if ((rc = pdr_health_start(r)) != 0)
        return rc;
    if ((rc = pdr_kv_events_start(r)) != 0)
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
    pdr_admin_log_start(r);
    if (r->metrics_on)
        pdr_info("metrics listener on %s:%d (GET /metrics)", c->metrics_host, c->metrics_port);
    startup_watch(r, c);
    return 0;
}

/* ---- shutdown: stop accepting, let in-flight requests finish, then close every loop ---- */

static void on_multi_closed(void *arg)
{
    (void)arg;
}

static void on_stop_timer(uv_timer_t *h)
{
    /* Clients that keep connections open after shutdown must not keep the process alive. */
    uv_stop(h->loop);
}

/* No request left (or the deadline): idle HTTP/1 connections close, HTTP/2 ones get GOAWAY (h2o re-sends
 * it each second until they are gone). The multi stays until the connections are gone, so that a
 * request still arriving on one of them is served. */
static void finish_loop(pdr_thread_t *t)
{
    pdr_router_t *r = t->r;
    t->finishing = 1;
    t->finish_ms = pdr_now_ms();
    if (t->id == 0) {
        pdr_router_discovery_stop(r);
        pdr_health_stop(r);
        pdr_kv_events_stop(r);
        uv_close((uv_handle_t *)&r->sig_term, NULL);
        uv_close((uv_handle_t *)&r->sig_int, NULL);
        uv_close((uv_handle_t *)&r->sig_hup, NULL);
        if (r->grace_timer_live) {
            r->grace_timer_live = 0;
            uv_close((uv_handle_t *)&r->grace_timer, NULL);
        }
        if (r->startup_timer_live) {
            r->startup_timer_live = 0;
            uv_close((uv_handle_t *)&r->startup_timer, NULL);
        }
    }
    uv_close((uv_handle_t *)&t->wakeup, NULL);
    if (t->conns > 0) {
        h2o_context_request_shutdown(&t->h2o_ctx);
        if (t->id == 0 && r->admin_ctx_live)
            h2o_context_request_shutdown(&r->admin_ctx);
        if (t->id == 0 && r->metrics_ctx_live)
            h2o_context_request_shutdown(&r->metrics_ctx);
    }
}

#define FINISH_LINGER_MS 1000

static void close_multi(pdr_thread_t *t)
{
    uv_timer_init(t->loop, &t->stop_timer);
    uv_timer_start(&t->stop_timer, on_stop_timer, 500, 0);
    uv_unref((uv_handle_t *)&t->stop_timer);
    if (t->alog_suppressed > 0)
        alog_summary(t);
    if (t->alog_len > 0)
        alog_flush(t);
    uv_timer_stop(&t->alog_timer);
    uv_close((uv_handle_t *)&t->alog_timer, NULL);
    t->alog_closed = 1;
    pdr_multi_close(t->multi, on_multi_closed, t);
    t->multi = NULL;
}

static void on_shutdown_tick(uv_timer_t *h)
{
    pdr_thread_t *t = h->data;
    pdr_router_t *r = t->r;
    int deadline = pdr_now_ms() - r->shutdown_started_ms >= (uint64_t)r->drain_timeout_ms;
    if (deadline && t->multi != NULL) {
        /* From here on no new request and no retry. */
        __atomic_store_n(&r->shutting_down, 1, __ATOMIC_RELAXED);
        if (!t->finishing)
            finish_loop(t); /* first: on loop 0 it stops the health probes, whose legs must not fail */
        if (t->live > 0) {
            /* End both legs of every request still running; each ends the way a broken decode stream
             * does (SSE: an error event; otherwise the response is cut). */
            int64_t n = (int64_t)(t->live - t->lingering); /* lingering ones were answered already */
            __atomic_add_fetch(&r->drain_cancelled, n, __ATOMIC_RELAXED);
            pdr_multi_fail_all(t->multi, PDR_ECANCELED);
            pdr_warn("shutdown: loop %d: %lld requests cancelled at drain_timeout", t->id, (long long)n);
        }
    }
    if (!t->finishing && t->live == 0)
        finish_loop(t);
    /* HTTP/1 keep-alive connections that stay idle get FINISH_LINGER_MS, then they no longer keep
     * the loop alive (on_stop_timer). */
    if (t->finishing && t->multi != NULL &&
        ((t->live == 0 && (t->conns == 0 || pdr_now_ms() - t->finish_ms >= FINISH_LINGER_MS)) || deadline)) {
        if (t->conns > 0) /* a request still arriving on them is refused: the multi is going away */
            __atomic_store_n(&r->shutting_down, 1, __ATOMIC_RELAXED);
        close_multi(t);
    }
    maybe_dispose_h2o(t);
}

static void start_loop_shutdown(pdr_thread_t *t)
{
    /* Stop accepting; idle connections are closed once the loop's own requests are done (finish_loop). */
    t->closing = 1;
    if (t->listening) {
        accept_backlog(t, &t->listener);
        close_listener(&t->listener);
        t->listening = 0;
    }
    if (t->id == 0 && t->r->admin_listening) {
        close_listener(&t->r->admin_listener);
        t->r->admin_listening = 0;
    }
    if (t->id == 0 && t->r->metrics_listening) {
        close_listener(&t->r->metrics_listener);
        t->r->metrics_listening = 0;
    }
    /* The first tick comes after a poll, so that the connections just taken from the backlog have
     * their requests read before idle connections are closed. */
    uv_timer_init(t->loop, &t->shutdown_timer);
    t->shutdown_timer.data = t;
    uv_timer_start(&t->shutdown_timer, on_shutdown_tick, 20, 20);
}

/* The grace is over (or a second signal cut it short): every loop stops accepting. */
static void begin_drain(pdr_router_t *r)
{
    if (r->draining)
        return;
    r->shutdown_started_ms = pdr_now_ms();
    r->drain_timeout_ms = r->config->lifecycle.drain_timeout_ms;
    __atomic_store_n(&r->draining, 1, __ATOMIC_RELEASE);
    pdr_info("shutdown: listeners closed, %lld requests in flight (drain_timeout %d ms)",
             (long long)__atomic_load_n(&r->inflight, __ATOMIC_RELAXED),
             r->config->lifecycle.drain_timeout_ms);
    for (int i = 0; i < r->n_threads; i++)
        uv_async_send(&r->threads[i].wakeup);
}

static void on_grace_over(uv_timer_t *h)
{
    begin_drain(h->data);
}

void pdr_router_begin_shutdown(pdr_router_t *r)
{
    if (r->draining)
        return;
    if (pdr_router_stopping(r)) {
        pdr_info("shutdown: second signal, ending the grace period now");
        uv_timer_stop(&r->grace_timer);
        begin_drain(r);
        return;
    }
    __atomic_store_n(&r->stopping, 1, __ATOMIC_RELAXED);
    int grace = r->config->lifecycle.drain_grace_ms;
    pdr_info("shutdown: readiness off, serving for %d ms", grace);
    if (grace == 0) {
        begin_drain(r);
        return;
    }
    uv_timer_init(r->threads[0].loop, &r->grace_timer);
    r->grace_timer.data = r;
    r->grace_timer_live = 1;
    uv_timer_start(&r->grace_timer, on_grace_over, (uint64_t)grace, 0);
}

void pdr_router_join(pdr_router_t *r)
{
    for (int i = 1; i < r->n_threads; i++) {
        uv_thread_join(&r->threads[i].tid);
        if (r->threads[i].h2o_disposed && uv_loop_close(r->threads[i].loop) == 0)
            free(r->threads[i].loop);
    }
    int clean = 1;
    for (int i = 0; i < r->n_threads; i++) {
        clean &= r->threads[i].h2o_disposed;
        free(r->threads[i].alog);
        pdr_config_unref(r->threads[i].config);
        r->threads[i].config = NULL;
    }
    if (clean) {
        /* Every loop ended by itself: release the shared state too (no leak reports at exit). */
        h2o_config_dispose(&r->h2o_config);
        pdr_admin_dispose(r);
        if (r->metrics_on)
            h2o_config_dispose(&r->metrics_config);
        r->metrics_on = 0;
        free(r->threads);
        r->threads = NULL;
        pdr_kv_events_free(r);
        pdr_pool_dispose(&r->pool);
        pdr_config_unref(r->config);
        r->config = NULL;
        pdr_router_tokenizer_dispose(r);
        pthread_mutex_destroy(&r->config_lock);
        free(r->config_path);
    }
    if (r->access_fd > STDERR_FILENO)
        close(r->access_fd);
}
