/*
 * The client-facing server: h2o (HTTP/1.1, h2c upgrade and prior knowledge) on the router's libuv
 * loop, the route table, the small local endpoints (/health, /readiness, /metrics), error answers in
 * the OpenAI shape, the batched access log and the shutdown sequence. Loop thread only.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "err.h"
#include "router.h"
#include "util.h"

#define ALOG_FLUSH_MS 100
#define ALOG_MAX (256 * 1024)

typedef struct route_handler {
    h2o_handler_t super;
    pdr_router_t *r;
} route_handler_t;

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
    int n = snprintf(body, sizeof(body), "{\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"code\":%d}}", esc, type,
                     status);
    req->res.status = status;
    req->res.reason = status == 400   ? "Bad Request"
                      : status == 404 ? "Not Found"
                      : status == 405 ? "Method Not Allowed"
                      : status == 413 ? "Payload Too Large"
                      : status == 502 ? "Bad Gateway"
                      : status == 503 ? "Service Unavailable"
                      : status == 504 ? "Gateway Timeout"
                                      : "Error";
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, H2O_STRLIT("application/json"));
    if (retry_after_s > 0) {
        char ra[16];
        int k = snprintf(ra, sizeof(ra), "%d", retry_after_s);
        h2o_iovec_t v = h2o_strdup(&req->pool, ra, (size_t)k);
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_RETRY_AFTER, NULL, v.base, v.len);
    }
    req->res.content_length = (size_t)n;
    h2o_send_inline(req, body, (size_t)n);
}

static void send_text(h2o_req_t *req, int status, const char *ctype, const char *body, size_t len)
{
    req->res.status = status;
    req->res.reason = status == 200 ? "OK" : "Service Unavailable";
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, ctype, strlen(ctype));
    req->res.content_length = len;
    h2o_send_inline(req, body, len);
}

/* ---- access log ---- */

static void alog_flush(pdr_router_t *r)
{
    size_t off = 0;
    while (off < r->alog_len) {
        ssize_t n = write(r->access_fd, r->alog + off, r->alog_len - off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            break; /* EAGAIN on a full pipe or a broken log: drop this batch rather than block the loop */
        }
        off += (size_t)n;
    }
    r->alog_len = 0;
}

static void on_alog_timer(uv_timer_t *t)
{
    pdr_router_t *r = t->data;
    if (r->alog_len > 0)
        alog_flush(r);
}

void pdr_access_log(pdr_router_t *r, const char *line, size_t len)
{
    if (r->access_fd < 0)
        return;
    if (r->alog_len + len > r->alog_cap) {
        if (r->alog_len > 0)
            alog_flush(r);
        if (len > r->alog_cap)
            return;
    }
    memcpy(r->alog + r->alog_len, line, len);
    r->alog_len += len;
    if (!uv_is_active((uv_handle_t *)&r->alog_timer))
        uv_timer_start(&r->alog_timer, on_alog_timer, ALOG_FLUSH_MS, 0);
}

/* ---- routes ---- */

static int path_is(h2o_req_t *req, const char *p)
{
    size_t len = req->query_at != SIZE_MAX ? req->query_at : req->path.len;
    return len == strlen(p) && memcmp(req->path.base, p, len) == 0;
}

static int readiness_ok(pdr_router_t *r)
{
    return !r->shutting_down && pdr_pool_count_healthy(&r->pool, PDR_ROLE_PREFILL) > 0 &&
           pdr_pool_count_healthy(&r->pool, PDR_ROLE_DECODE) > 0;
}

static int on_req(h2o_handler_t *self, h2o_req_t *req)
{
    pdr_router_t *r = ((route_handler_t *)self)->r;
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
                pdr_metrics_count_request(pd_routes[i].mroute, 405, 0, -1);
                return 0;
            }
            return pdr_pd_handle(r, req, pd_routes[i].route, pd_routes[i].mroute);
        }
    }
    if (is_get && path_is(req, "/health")) {
        send_text(req, 200, "text/plain", "ok\n", 3);
        pdr_metrics_count_request(PDR_MR_HEALTH, 200, 0, -1);
        return 0;
    }
    if (is_get && path_is(req, "/readiness")) {
        int ok = readiness_ok(r);
        if (ok)
            send_text(req, 200, "text/plain", "ready\n", 6);
        else
            pdr_send_error(req, 503, "service_unavailable",
                           r->shutting_down ? "shutting down" : "no healthy prefill or decode worker", 1);
        pdr_metrics_count_request(PDR_MR_READINESS, ok ? 200 : 503, 0, -1);
        return 0;
    }
    if (is_get && path_is(req, "/metrics")) {
        pdr_metrics_count_request(PDR_MR_METRICS, 200, 0, -1);
        size_t len = 0;
        char *text = pdr_metrics_render(&r->pool, &len);
        if (text == NULL) {
            pdr_send_error(req, 503, "service_unavailable", "out of memory", 1);
            return 0;
        }
        send_text(req, 200, "text/plain; version=0.0.4", text, len);
        free(text);
        return 0;
    }
    if (is_get && path_is(req, "/v1/models"))
        return pdr_models_handle(r, req);
    pdr_send_error(req, 404, "invalid_request_error", "unknown route", 0);
    pdr_metrics_count_request(PDR_MR_OTHER, 404, 0, -1);
    return 0;
}

/* ---- listener ---- */

static void on_accept(uv_stream_t *listener, int status)
{
    pdr_router_t *r = listener->data;
    if (status != 0)
        return;
    uv_tcp_t *conn = malloc(sizeof(*conn));
    if (conn == NULL)
        return;
    uv_tcp_init(r->loop, conn);
    if (uv_accept(listener, (uv_stream_t *)conn) != 0) {
        uv_close((uv_handle_t *)conn, (uv_close_cb)free);
        return;
    }
    uv_tcp_nodelay(conn, 1);
    h2o_socket_t *sock = h2o_uv_socket_create((uv_stream_t *)conn, (uv_close_cb)free);
    h2o_accept(&r->accept_ctx, sock);
}

static int open_access_log(pdr_router_t *r, const char *spec)
{
    r->access_fd = -1;
    if (spec == NULL || strcmp(spec, "off") == 0)
        return 0;
    if (strcmp(spec, "-") == 0) {
        r->access_fd = STDOUT_FILENO;
    } else {
        r->access_fd = open(spec, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (r->access_fd < 0) {
            pdr_error("access log %s: %s", spec, strerror(errno));
            return PDR_EIO;
        }
    }
    r->alog_cap = ALOG_MAX;
    r->alog = malloc(r->alog_cap);
    return r->alog ? 0 : PDR_ENOMEM;
}

int pdr_router_start(pdr_router_t *r, pdr_config_t *c, uv_loop_t *loop)
{
    memset(r, 0, sizeof(*r));
    r->loop = loop;
    r->config = pdr_config_ref(c);
    int rc = pdr_pool_init(&r->pool, c);
    if (rc != 0)
        return rc;
    if ((rc = open_access_log(r, c->log.access_log)) != 0)
        return rc;
    uv_timer_init(loop, &r->alog_timer);
    r->alog_timer.data = r;
    r->multi = pdr_multi_new(loop, 1024);
    if (r->multi == NULL)
        return PDR_ENOMEM;

    h2o_config_init(&r->h2o_config);
    r->h2o_config.server_name = h2o_iovec_init(H2O_STRLIT("pdrouter"));
    /* h2o answers 413 itself above this; the handler repeats the check in the OpenAI error shape. */
    r->h2o_config.max_request_entity_size = (size_t)c->limits.max_body_bytes;
    h2o_hostconf_t *host = h2o_config_register_host(&r->h2o_config, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    h2o_pathconf_t *path = h2o_config_register_path(host, "/", 0);
    route_handler_t *h = (route_handler_t *)h2o_create_handler(path, sizeof(*h));
    h->super.on_req = on_req;
    h->r = r;
    h2o_context_init(&r->h2o_ctx, loop, &r->h2o_config);
    r->accept_ctx.ctx = &r->h2o_ctx;
    r->accept_ctx.hosts = r->h2o_config.hosts;

    struct sockaddr_storage ss;
    if (uv_ip4_addr(c->listen_host, c->listen_port, (struct sockaddr_in *)&ss) != 0 &&
        uv_ip6_addr(c->listen_host, c->listen_port, (struct sockaddr_in6 *)&ss) != 0) {
        pdr_error("listen.host %s is not an IP address", c->listen_host);
        return PDR_EINVAL;
    }
    uv_tcp_init(loop, &r->listener);
    r->listener.data = r;
    int e = uv_tcp_bind(&r->listener, (struct sockaddr *)&ss, 0);
    if (e == 0)
        e = uv_listen((uv_stream_t *)&r->listener, 4096, on_accept);
    if (e != 0) {
        pdr_error("cannot listen on %s:%d: %s", c->listen_host, c->listen_port, uv_strerror(e));
        return PDR_EIO;
    }
    r->listening = 1;
    if ((rc = pdr_health_start(r)) != 0)
        return rc;
    pdr_info("pdrouter listening on %s:%d (%zu prefill, %zu decode, policy %s/%s, protocol %s)", c->listen_host,
             c->listen_port, c->n_prefill, c->n_decode, pdr_policy_name(c->policy_prefill),
             pdr_policy_name(c->policy_decode), pdr_protocol_name(c->protocol));
    return 0;
}

/* ---- shutdown: stop accepting, let in-flight requests finish, then close everything ---- */

static void on_multi_closed(void *arg)
{
    (void)arg;
}

static void on_stop_timer(uv_timer_t *t)
{
    /* Clients that keep connections open after shutdown must not keep the process alive. */
    uv_stop(t->loop);
}

static void finish_shutdown(pdr_router_t *r)
{
    uv_timer_init(r->loop, &r->stop_timer);
    uv_timer_start(&r->stop_timer, on_stop_timer, 2000, 0);
    uv_unref((uv_handle_t *)&r->stop_timer);
    pdr_health_stop(r);
    uv_timer_stop(&r->shutdown_timer);
    uv_close((uv_handle_t *)&r->shutdown_timer, NULL);
    uv_close((uv_handle_t *)&r->sig_term, NULL);
    uv_close((uv_handle_t *)&r->sig_int, NULL);
    if (r->alog_len > 0)
        alog_flush(r);
    uv_timer_stop(&r->alog_timer);
    uv_close((uv_handle_t *)&r->alog_timer, NULL);
    h2o_context_request_shutdown(&r->h2o_ctx);
    pdr_multi_close(r->multi, on_multi_closed, r);
    r->multi = NULL;
}

static void on_shutdown_tick(uv_timer_t *t)
{
    pdr_router_t *r = t->data;
    /* 30 s: the graceful window until issue-level drain settings exist (timeouts are per request). */
    if (pdr_pd_requests_live == 0 || pdr_now_ms() - r->shutdown_started_ms > 30000)
        finish_shutdown(r);
}

void pdr_router_begin_shutdown(pdr_router_t *r)
{
    if (r->shutting_down)
        return;
    r->shutting_down = 1;
    r->shutdown_started_ms = pdr_now_ms();
    pdr_info("shutting down: no new connections; %llu requests in flight",
             (unsigned long long)pdr_pd_requests_live);
    if (r->listening) {
        uv_close((uv_handle_t *)&r->listener, NULL);
        r->listening = 0;
    }
    uv_timer_init(r->loop, &r->shutdown_timer);
    r->shutdown_timer.data = r;
    uv_timer_start(&r->shutdown_timer, on_shutdown_tick, 0, 20);
}
