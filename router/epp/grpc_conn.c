/*
 * The gRPC server's listener and connections (grpc.h): a TCP listener of its own on the caller's libuv
 * loop, one nghttp2 server session per accepted connection, HTTP/2 with prior knowledge only (the
 * session checks the client preface). Bytes read go to the session at once; what the session has to send
 * is gathered into one buffer (GRPC_WRITE_BATCH, plus at most one frame) and written with one uv_write at
 * a time, the next gathered when it completes, so a slow reader holds at most one batch here and its
 * calls' queues (each with its ceiling) behind it. An answer queued by a call is written from a zero timer
 * (kick), never inside the call that queued it: sending may close streams, and so free calls. A connection
 * past limits.max_connections is closed on accept; one with no open call for limits.idle_timeout_ms says
 * GOAWAY and closes. Closing the server ends every call with UNAVAILABLE, says GOAWAY, and cuts what is still
 * open after GRPC_DRAIN_MS. Loop thread only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "err.h"
#include "grpc_internal.h"

static void conn_flush(grpc_conn_t *c);

static void server_handle_closed(pdr_grpc_server_t *s)
{
    if (--s->handles > 0)
        return;
    void (*cb)(void *) = s->close_cb;
    void *data = s->close_data;
    free(s);
    if (cb != NULL)
        cb(data);
}

static void conn_handle_closed(uv_handle_t *h)
{
    grpc_conn_t *c = h->data;
    pdr_grpc_server_t *s = c->srv;
    if (--c->handles == 0) {
        pdr_buf_free(&c->wbuf);
        free(c);
    }
    server_handle_closed(s);
}

static void conn_close(grpc_conn_t *c)
{
    if (c->closed)
        return;
    if (c->busy || c->writing) {
        c->want_close = 1;
        return;
    }
    c->closed = 1;
    pdr__grpc_calls_drop(c);
    nghttp2_session_del(c->ng);
    c->ng = NULL;
    pdr_dlink_unlink(&c->link);
    c->srv->nconns--;
    uv_close((uv_handle_t *)&c->tcp, conn_handle_closed);
    uv_close((uv_handle_t *)&c->timer, conn_handle_closed);
    uv_close((uv_handle_t *)&c->kick, conn_handle_closed);
}

static void on_kick(uv_timer_t *t)
{
    conn_flush(t->data);
}

/* The calls' side asks for a write: it happens on the loop's next turn. */
static void request_flush(grpc_conn_t *c)
{
    if (!c->closed && !uv_is_active((uv_handle_t *)&c->kick))
        uv_timer_start(&c->kick, on_kick, 0, 0);
}

static void on_timer(uv_timer_t *t)
{
    grpc_conn_t *c = t->data;
    if (c->draining) {
        /* The drain's deadline: a write still pending is cancelled by the close (on_written sees it). */
        c->writing = 0;
        c->busy = 0;
        conn_close(c);
        return;
    }
    if (c->ncalls > 0)
        return;
    c->srv->stats.idle_closed++;
    nghttp2_session_terminate_session(c->ng, NGHTTP2_NO_ERROR);
    conn_flush(c);
}

static void on_written(uv_write_t *w, int status)
{
    grpc_conn_t *c = w->data;
    c->writing = 0;
    c->wbuf.len = 0;
    if (status < 0 || c->want_close) {
        c->want_close = 0;
        conn_close(c);
        return;
    }
    conn_flush(c);
}

/* Sends what the session has; closes the connection once neither side has more to say. */
static void conn_flush(grpc_conn_t *c)
{
    if (c->closed || c->busy || c->writing)
        return;
    c->busy = 1;
    int rc = 0;
    while (c->wbuf.len < GRPC_WRITE_BATCH) {
        const uint8_t *p;
        ssize_t n = nghttp2_session_mem_send(c->ng, &p);
        if (n <= 0) {
            rc = (int)n;
            break;
        }
        /* The batch's ceiling plus the one frame that crossed it (a frame is at most 16 KiB + 9). */
        rc = pdr_buf_append(&c->wbuf, p, (size_t)n, GRPC_WRITE_BATCH + 65536);
        if (rc != 0)
            break;
    }
    c->busy = 0;
    if (rc != 0 || c->want_close) {
        c->want_close = 0;
        c->wbuf.len = 0;
        conn_close(c);
        return;
    }
    if (c->wbuf.len > 0) {
        uv_buf_t b = uv_buf_init(c->wbuf.p, (unsigned)c->wbuf.len);
        c->writing = 1;
        if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, on_written) != 0) {
            c->writing = 0;
            conn_close(c);
        }
        return;
    }
    if (!nghttp2_session_want_read(c->ng) && !nghttp2_session_want_write(c->ng)) {
        conn_close(c);
        return;
    }
    if (c->draining) {
        if (c->ncalls == 0)
            conn_close(c);
        return;
    }
    /* The idle clock runs while no call is open. */
    if (c->ncalls == 0 && !uv_is_active((uv_handle_t *)&c->timer) && c->srv->lim.idle_timeout_ms > 0)
        uv_timer_start(&c->timer, on_timer, c->srv->lim.idle_timeout_ms, 0);
    else if (c->ncalls > 0)
        uv_timer_stop(&c->timer);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    grpc_conn_t *c = h->data;
    *buf = uv_buf_init((char *)c->rbuf, sizeof(c->rbuf));
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
    grpc_conn_t *c = st->data;
    (void)buf;
    if (n == 0)
        return;
    if (n < 0) {
        conn_close(c);
        return;
    }
    c->busy = 1;
    ssize_t rc = nghttp2_session_mem_recv(c->ng, c->rbuf, (size_t)n);
    c->busy = 0;
    if (rc < 0) {
        /* A protocol violation: nghttp2 has queued its GOAWAY where it could; the connection goes after it.
         */
        c->srv->stats.protocol_errors++;
        if (rc != NGHTTP2_ERR_BAD_CLIENT_MAGIC && rc != NGHTTP2_ERR_FLOODED)
            nghttp2_session_terminate_session(c->ng, NGHTTP2_PROTOCOL_ERROR);
        else
            c->want_close = 1;
    }
    conn_flush(c);
}

static void on_connection(uv_stream_t *l, int status)
{
    pdr_grpc_server_t *s = l->data;
    if (status < 0)
        return;
    grpc_conn_t *c = calloc(1, sizeof(*c));
    if (c == NULL || uv_tcp_init(s->loop, &c->tcp) != 0) {
        free(c);
        return;
    }
    c->srv = s;
    c->tcp.data = c;
    c->wreq.data = c;
    c->handles = 1;
    s->handles++;
    if (uv_accept(l, (uv_stream_t *)&c->tcp) != 0 || uv_timer_init(s->loop, &c->timer) != 0) {
        c->closed = 1;
        uv_close((uv_handle_t *)&c->tcp, conn_handle_closed);
        return;
    }
    c->timer.data = c;
    c->handles = 2;
    s->handles++;
    if (uv_timer_init(s->loop, &c->kick) != 0) {
        c->closed = 1;
        uv_close((uv_handle_t *)&c->tcp, conn_handle_closed);
        uv_close((uv_handle_t *)&c->timer, conn_handle_closed);
        return;
    }
    c->kick.data = c;
    c->handles = 3;
    s->handles++;
    pdr_dlink_push(&s->conns, &c->link);
    s->nconns++;
    if (s->nconns > s->lim.max_connections) {
        s->stats.refused_connections++;
        c->ng = NULL;
        c->closed = 1;
        pdr_dlink_unlink(&c->link);
        s->nconns--;
        uv_close((uv_handle_t *)&c->tcp, conn_handle_closed);
        uv_close((uv_handle_t *)&c->timer, conn_handle_closed);
        uv_close((uv_handle_t *)&c->kick, conn_handle_closed);
        return;
    }
    s->stats.connections++;
    nghttp2_session_callbacks *cbs = NULL;
    nghttp2_option *opt = NULL;
    int bad = nghttp2_session_callbacks_new(&cbs) != 0;
    if (!bad && nghttp2_option_new(&opt) == 0) {
        pdr__grpc_session_callbacks(cbs);
        bad = nghttp2_session_server_new2(&c->ng, cbs, c, opt) != 0;
        nghttp2_option_del(opt);
    } else {
        bad = 1;
    }
    if (cbs != NULL)
        nghttp2_session_callbacks_del(cbs);
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, s->lim.max_streams},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, 16384},
    };
    if (bad || nghttp2_submit_settings(c->ng, NGHTTP2_FLAG_NONE, iv, 2) != 0 ||
        uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0) {
        conn_close(c);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    conn_flush(c);
}

static void listener_closed(uv_handle_t *h)
{
    server_handle_closed(h->data);
}

pdr_grpc_server_t *pdr_grpc_server_new(uv_loop_t *loop, const char *host, int port,
                                       const pdr_grpc_limits_t *lim, const pdr_grpc_method_t *methods,
                                       size_t nmethods, int *err, char *msg, size_t cap)
{
    struct sockaddr_storage ss;
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)&ss) != 0 &&
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss) != 0) {
        snprintf(msg, cap, "epp: %s is not an IP address to listen on", host);
        *err = PDR_EINVAL;
        return NULL;
    }
    pdr_grpc_server_t *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        snprintf(msg, cap, "epp: out of memory");
        *err = PDR_ENOMEM;
        return NULL;
    }
    s->loop = loop;
    s->lim = *lim;
    s->methods = methods;
    s->nmethods = nmethods;
    s->flush = request_flush;
    uv_tcp_init(loop, &s->listener);
    s->listener.data = s;
    s->handles = 1;
    int rc = uv_tcp_bind(&s->listener, (struct sockaddr *)&ss, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&s->listener, 128, on_connection);
    if (rc != 0) {
        snprintf(msg, cap, "epp: cannot listen on %s:%d: %s", host, port, uv_strerror(rc));
        *err = PDR_EIO;
        uv_close((uv_handle_t *)&s->listener, listener_closed);
        return NULL;
    }
    struct sockaddr_storage bound;
    int len = sizeof(bound);
    uv_tcp_getsockname(&s->listener, (struct sockaddr *)&bound, &len);
    s->port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                : ((struct sockaddr_in *)&bound)->sin_port);
    return s;
}

int pdr_grpc_server_port(const pdr_grpc_server_t *s)
{
    return s->port;
}

void pdr_grpc_server_stats(const pdr_grpc_server_t *s, pdr_grpc_stats_t *out)
{
    *out = s->stats;
}

void pdr_grpc_server_close(pdr_grpc_server_t *s, void (*cb)(void *data), void *data)
{
    s->closing = 1;
    s->close_cb = cb;
    s->close_data = data;
    pdr_dlink_t *next;
    for (pdr_dlink_t *l = s->conns; l != NULL; l = next) {
        next = l->next;
        grpc_conn_t *c = PDR_DLINK_ITEM(l, grpc_conn_t, link);
        c->draining = 1;
        pdr__grpc_calls_shutdown(c);
        nghttp2_submit_goaway(c->ng, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(c->ng),
                              NGHTTP2_NO_ERROR, NULL, 0);
        uv_timer_stop(&c->timer);
        uv_timer_start(&c->timer, on_timer, GRPC_DRAIN_MS, 0);
        conn_flush(c);
    }
    uv_close((uv_handle_t *)&s->listener, listener_closed);
}
