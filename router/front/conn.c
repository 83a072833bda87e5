/*
 * Client connections (any loop, the connection's own): handing an accepted socket to h2o, the per-descriptor
 * map from a request to its connection, the HTTP/2 reset-flood bucket (limits.h2_max_resets), the HTTP/1
 * chunked-body and ambiguous-head guards, the HTTP/2 header-block guard, and the disposal of a loop's h2o
 * contexts once its last connection closed. Called by server.c (accept), pd/ (resets) and admin.c (heads);
 * calls nothing of theirs. The HTTP/1 timeouts and guards are in conn_h1.c, the HTTP/2 guards and body
 * budget in conn_h2.c, HTTP/2 on libnghttp2 in conn_ng2*.c; conn_internal.h holds what they share. This
 * file is their top: it calls them, and none of them calls it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include "conn_internal.h"
#include "err.h"
#include "front.h"
#include "ratelog.h"
#include "reqguard.h"
#include "router.h"
#include "util.h"
#include "h2o/http1.h"
#include "h2o/http2.h"

void pdr__maybe_dispose_h2o(pdr_thread_t *t)
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
        uv_close((uv_handle_t *)&t->pd_kick_idle, NULL);
        uv_close((uv_handle_t *)&t->h2_evict_timer, NULL);
    }
}

#define RESET_WINDOW_MS 10000

/* The client connection of each descriptor, for the HTTP/2 reset accounting: h2o does not expose the
 * socket's handle, but a request's socket gives its descriptor. Sized to the open files limit; a slot is
 * written only by the loop that owns the descriptor. */
client_conn_t **pdr__conn_by_fd;
size_t pdr__conn_by_fd_len;

void pdr__conn_map_init(void)
{
    if (pdr__conn_by_fd != NULL)
        return;
    struct rlimit rl;
    size_t n =
        getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? (size_t)rl.rlim_cur : 65536;
    if (n > (1u << 22))
        n = 1u << 22;
    pdr__conn_by_fd = calloc(n, sizeof(*pdr__conn_by_fd));
    pdr__conn_by_fd_len = pdr__conn_by_fd != NULL ? n : 0;
    if (pdr__conn_ng2_init() != 0)
        pdr_warn("HTTP/2: libnghttp2's callbacks could not be allocated: h2_nghttp2 connections are closed");
}

/* ---- TLS connections whose peer is gone ----
 *
 * h2o closes a TLS connection by writing a close_notify first and disposing of the socket when that write
 * completes. After a read error (the peer reset the connection, or closed it with data of the router's
 * unread, which resets it too) libuv marks the stream neither readable nor writable, so uv_write fails at
 * once, h2o ignores that return, and no write callback ever comes: the descriptor and the connection's
 * memory stayed for good. A connection whose read failed is closed quietly instead (no close_notify to a
 * peer that is gone): h2o then disposes of the socket at once. */

void pdr__conn_tls_info(const SSL *ssl, int where, int ret)
{
    (void)ret;
    if (!(where & SSL_CB_HANDSHAKE_START))
        return;
    /* h2o's socket BIO carries the h2o socket as its data (h2o 2.2.5, lib/common/socket.c setup_bio). */
    BIO *b = SSL_get_rbio(ssl);
    h2o_socket_t *sock = b != NULL ? BIO_get_data(b) : NULL;
    int fd = sock != NULL ? h2o_socket_get_fd(sock) : -1;
    client_conn_t *cc = fd >= 0 && (size_t)fd < pdr__conn_by_fd_len ? pdr__conn_by_fd[fd] : NULL;
    if (cc != NULL && cc->sock == sock)
        cc->ssl = (SSL *)ssl;
}

int pdr__conn_condemned(h2o_req_t *req)
{
    client_conn_t *cc = pdr__conn_of(req);
    return cc != NULL && cc->condemned;
}

int pdr__note_client_reset(pdr_thread_t *t, h2o_req_t *req)
{
    t->m.h2_client_resets_total++;
    int limit = t->config->limits.h2_max_resets;
    client_conn_t *cc = pdr__conn_of(req);
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
    if (!cc->tls) /* over TLS the reset alone ends it: plaintext would corrupt the session */
        pdr__conn_h2_send_goaway(&cc->tcp, cc->fd, 0,
                                 cc->h2_state == H2G_FOLLOWING ? cc->h2g.last_stream : 0x7fffffff, debug);
    pdr_warn("HTTP/2 client reset more than %d streams in %d s on one connection (limits.h2_max_resets): "
             "connection closed",
             limit, RESET_WINDOW_MS / 1000);
    struct linger lg = {1, 0};
    setsockopt(cc->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    shutdown(cc->fd, SHUT_RDWR);
    return 1;
}

static void on_timer_closed(uv_handle_t *h)
{
    client_conn_t *cc = h->data;
    pdr_thread_t *t = cc->t;
    t->conns--;
    free(cc);
    pdr__maybe_dispose_h2o(t);
}

static void on_conn_closed(uv_handle_t *h)
{
    client_conn_t *cc = (client_conn_t *)h;
    pdr_dlink_unlink(&cc->rewrap);
    pdr_dlink_unlink(&cc->h2link);
    pdr__conn_idle_leave(cc);
    free(cc->tls_out);
    cc->tls_out = NULL;
    if (cc->h2g.held > 0) /* bodies of streams h2o dropped with the connection */
        __atomic_sub_fetch(&cc->t->r->body_bytes_held, cc->h2g.held, __ATOMIC_RELAXED);
    cc->h2g.held = 0;
    free(cc->h2bodies);
    cc->h2bodies = NULL;
    if (cc->ssl_ctx != NULL)
        SSL_CTX_free(cc->ssl_ctx);
    cc->ssl_ctx = NULL;
    cc->ssl = NULL;
    if (cc->fd >= 0 && (size_t)cc->fd < pdr__conn_by_fd_len && pdr__conn_by_fd[cc->fd] == cc)
        pdr__conn_by_fd[cc->fd] = NULL;
    if (cc->counted)
        __atomic_sub_fetch(&cc->t->r->client_conns, 1, __ATOMIC_RELAXED);
    uv_close((uv_handle_t *)&cc->timer, on_timer_closed);
}

int pdr__client_conns_full(pdr_thread_t *t)
{
    int cap = t->config->limits.max_client_connections;
    return cap > 0 && __atomic_load_n(&t->r->client_conns, __ATOMIC_RELAXED) >= (uint64_t)cap;
}

/* ---- TLS ----
 *
 * The listener's handshake is run here rather than by h2o_accept, which would hand the connection to its
 * HTTP/1 or HTTP/2 code itself: at its end the protocol ALPN chose is started as h2o starts it, and the
 * guards go in front before any request byte reaches h2o, those that came in the same read as the
 * handshake's end included. Over TLS the frame guard follows no body limit: giving a refused body's window
 * back needs a write of the router's own, which could cross one of h2o's. */
static void on_tls_handshake(h2o_socket_t *sock, const char *err)
{
    client_conn_t *cc = sock->data;
    sock->data = NULL;
    if (err != NULL || cc == NULL) {
        h2o_socket_close(sock);
        return;
    }
    h2o_iovec_t proto = h2o_socket_ssl_get_selected_protocol(sock);
    int h2 = 0;
    for (const h2o_iovec_t *id = h2o_http2_alpn_protocols; id->len != 0; id++)
        h2 |= proto.len == id->len && memcmp(proto.base, id->base, proto.len) == 0;
    if (h2) {
        /* h2o's HTTP/2 idle timeout governs from here */
        cc->wait = CW_OFF;
        uv_timer_stop(&cc->timer);
        if (cc->t->config->h2_nghttp2) {
            pdr__conn_ng2_accept(cc, sock);
            return;
        }
        pdr__conn_h2_follow(cc, 0);
        cc->g_last_size = 0;
        int why = sock->input->size > 0 ? pdr__conn_h2_guard_inspect(cc, sock) : H2_PASS;
        if (why != H2_PASS) {
            pdr__conn_h2_refuse(cc, sock, NULL, why);
            return;
        }
        h2o_http2_accept(cc->actx, sock, cc->accepted);
        if (!pdr__conn_sock_gone(cc, sock) && cc->h2_state == H2G_FOLLOWING)
            pdr__conn_h2_guard_wrap(cc, sock);
        return;
    }
    pdr__conn_start_http1(cc, sock);
}

#define PREFACE "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

/* h2_nghttp2: a plain connection's first bytes say who serves it: the HTTP/2 preface goes to
 * conn_ng2.c, anything else to h2o's HTTP/1 (which may still switch to h2o's HTTP/2 by Upgrade: h2c). */
static void on_first_read(h2o_socket_t *sock, const char *err)
{
    client_conn_t *cc = sock->data;
    if (err != NULL) {
        sock->data = NULL;
        h2o_socket_close(sock);
        return;
    }
    size_t n = sock->input->size < sizeof(PREFACE) - 1 ? sock->input->size : sizeof(PREFACE) - 1;
    if (memcmp(sock->input->bytes, PREFACE, n) != 0) {
        pdr__conn_sniff_end(cc);
        return;
    }
    if (n < sizeof(PREFACE) - 1)
        return; /* the rest of the preface is still to come (within timeouts.client_header_ms) */
    cc->sniffing = 0;
    cc->wait = CW_OFF;
    cc->wait_armed = 0;
    uv_timer_stop(&cc->timer);
    h2o_socket_read_stop(sock);
    pdr__conn_ng2_accept(cc, sock);
}

/* Hands an accepted connection to h2o. */
void pdr__serve_conn(pdr_thread_t *t, pdr_listener_t *l, int fd)
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
    if ((size_t)fd < pdr__conn_by_fd_len)
        pdr__conn_by_fd[fd] = cc;
    t->conns++; /* admin connections count too: loop 0 ends only when they are gone */
    h2o_socket_t *sock = h2o_uv_socket_create((uv_stream_t *)conn, on_conn_closed);
    cc->sock = sock;
    cc->g_active = 0;
    cc->g_last_size = 0;
    cc->g_checked = NULL;
    cc->g_checked_size = 0;
    cc->h2_state = H2G_UNDECIDED;
    cc->h2_fresh = 0;
    cc->sniffing = 0;
    cc->rewrap = (pdr_dlink_t){NULL, NULL};
    cc->h2link = (pdr_dlink_t){NULL, NULL};
    cc->idle = (pdr_dlink_t){NULL, NULL};
    cc->served = 0;
    cc->counted = l == &t->listener;
    if (cc->counted)
        __atomic_add_fetch(&t->r->client_conns, 1, __ATOMIC_RELAXED);
    uv_timer_init(t->loop, &cc->timer);
    cc->timer.data = cc;
    cc->wait = CW_BUSY;
    cc->wait_due = 0;
    cc->wait_armed = 0;
    pdr__conn_set_wait(cc, CW_HEAD,
                       t->config->timeouts.client_header_ms); /* the first request: from the accept */

    h2o_accept_ctx_t *actx = l->metrics ? &t->r->metrics_accept
                             : l->admin ? &t->r->admin_accept
                                        : &t->accept_ctx;
    cc->tls = actx->ssl_ctx != NULL;
    cc->actx = actx;
    cc->tls_out = NULL;
    cc->ssl_ctx = NULL;
    cc->ssl = NULL;
    cc->h2bodies = NULL;
    cc->h2_budget_logged = 0;
    cc->h2g.held = 0;
    if (cc->tls) {
        SSL_CTX_up_ref(actx->ssl_ctx);
        cc->ssl_ctx = actx->ssl_ctx;
        /* The handshake is the router's, within timeouts.client_header_ms (the timer set above), so that
         * the connection's guards are in place before its first request is read (on_tls_handshake). */
        gettimeofday(&cc->accepted, NULL);
        cc->wait = CW_HANDSHAKE;
        sock->data = cc;
        h2o_socket_ssl_handshake(sock, actx->ssl_ctx, NULL, on_tls_handshake);
        return;
    }
    if (t->config->h2_nghttp2) {
        gettimeofday(&cc->accepted, NULL);
        cc->sniffing = 1;
        sock->data = cc;
        h2o_socket_read_start(sock, on_first_read);
        return;
    }
    h2o_accept(actx, sock);
    /* A plain connection starts as HTTP/1: the callback h2o reads it with is its HTTP/1 one. */
    if (pdr__conn_h1_reqread == NULL)
        pdr__conn_h1_reqread = sock->_cb.read;
    pdr__conn_guard_wrap(cc);
}
