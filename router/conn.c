/*
 * Client connections (any loop, the connection's own): handing an accepted socket to h2o, the per-descriptor
 * map from a request to its connection, the HTTP/2 reset-flood bucket (limits.h2_max_resets), the HTTP/1
 * chunked-body and ambiguous-head guards, the HTTP/2 header-block guard, and the disposal of a loop's h2o
 * contexts once its last connection closed. Called by server.c (accept), pd/ (resets) and admin.c (heads);
 * calls nothing of theirs.
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
#include "err.h"
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
        uv_close((uv_handle_t *)&t->h2_evict_timer, NULL);
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
    /* The head that head_guard found well-framed in the read being handed to h2o now (input bytes and
     * size; NULL outside chunk_guard_read): pdr__refuse_ambiguous_head need not check it again. */
    const char *g_checked;
    size_t g_checked_size;
    pdr_dlink_t rewrap; /* on t->rewrap */
    /* HTTP/2 header-block guard (h2_guard_read): decided at the connection's first bytes */
    /* H2G_HTTP1: opened as HTTP/1 (it may switch with Upgrade: h2c, h2_upgraded) */
    enum { H2G_UNDECIDED = 0, H2G_FOLLOWING, H2G_OFF, H2G_HTTP1 } h2_state;
    int h2_fresh; /* upgraded: the guard's first read decides whether the preface is still to come */
    pdr_h2guard_t h2g;
    pdr_h2g_bodies_t *h2bodies; /* the request bodies the guard follows (HTTP/2 only) */
    int h2_budget_logged;       /* the first refusal for the body budget was logged */
    int h2_budget_global;       /* the router's budget, not the connection's, bounds its bodies now */
    pdr_dlink_t h2link;         /* on t->h2_conns while its bodies are followed (h2_evict) */
    /* Accepted with listen.tls: the handshake is the router's (on_tls_handshake), answers of its own go
     * through h2o's socket (encrypted), and an HTTP/2 refusal closes without a GOAWAY. */
    int tls;
    h2o_accept_ctx_t *actx;  /* the listener's, for the protocol chosen by ALPN */
    struct timeval accepted; /* handed to h2o as the connection's start */
    char *tls_out;           /* an answer being written over TLS (h1_answer_close) */
    /* The listener's SSL_CTX at the accept, referenced until the connection closes: h2o creates the
     * connection's SSL object from this pointer when the ClientHello arrives, without a reference of its
     * own, and a certificate reload releases the loop's reference meanwhile (tls.c). */
    SSL_CTX *ssl_ctx;
    SSL *ssl; /* h2o's SSL object of the connection, once its handshake started (pdr__conn_tls_info) */
    /* HTTP/2 control frames (SETTINGS, PING, PRIORITY, CONTINUATION; counted by the guard): a token bucket
     * of limits.h2_max_control_frames refilled over CONTROL_WINDOW_MS; empty, the connection is closed. */
    double ctl_tokens;
    uint64_t ctl_ms, ctl_seen;
    /* HTTP/1 client timeouts (on_client_timer): what the connection waits for, since when */
    uv_timer_t timer;
    enum { CW_HEAD = 0, CW_BODY, CW_IDLE, CW_BUSY, CW_OFF, CW_HANDSHAKE, CW_LINGER, CW_H2 } wait;
    size_t wait_size;                    /* the input buffer's size when the wait (re)started */
    int served;                          /* a response was completed on it */
    uint64_t linger_bytes, linger_until; /* lingering close: bytes dropped, and until when (linger_start) */
    int counted;                         /* a data-port connection (r->client_conns) */
    pdr_dlink_t idle;                    /* on t->idle_conns while CW_IDLE */
} client_conn_t;

#define RESET_WINDOW_MS 10000

/* The client connection of each descriptor, for the HTTP/2 reset accounting: h2o does not expose the
 * socket's handle, but a request's socket gives its descriptor. Sized to the open files limit; a slot is
 * written only by the loop that owns the descriptor. */
static client_conn_t **conn_by_fd;
static size_t conn_by_fd_len;

void pdr__conn_map_init(void)
{
    if (conn_by_fd != NULL)
        return;
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
    client_conn_t *cc = fd >= 0 && (size_t)fd < conn_by_fd_len ? conn_by_fd[fd] : NULL;
    if (cc != NULL && cc->sock == sock)
        cc->ssl = (SSL *)ssl;
}

static void tls_read_failed(client_conn_t *cc, const char *err)
{
    if (cc == NULL || err == NULL || !cc->tls)
        return;
    cc->t->m.tls_peer_gone_total++;
    if (cc->ssl != NULL)
        SSL_set_quiet_shutdown(cc->ssl, 1);
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
    if (!cc->tls) /* over TLS the reset alone ends it: plaintext would corrupt the session */
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
static int is_preface_start(const h2o_socket_t *sock);

static void guard_wrap(client_conn_t *cc)
{
    if (cc->sock != NULL && cc->sock->input != NULL && h1_reqread != NULL &&
        cc->sock->_cb.read == h1_reqread) {
        cc->sock->_cb.read = chunk_guard_read;
        cc->g_last_size = cc->sock->input->size;
    }
}

/* ---- HTTP/1 client timeouts ----
 *
 * One timer per connection follows what it waits for: the request head (timeouts.client_header_ms: for
 * the first request from the accept, later ones from their first byte), the body (timeouts.client_body_ms
 * between reads that bring some of it), or the next request on an idle keep-alive connection
 * (timeouts.keepalive_idle_ms). A head or body that takes too long is answered 408 in the OpenAI shape
 * and the connection closed; an idle connection is closed without a word, as nginx and HAProxy do (an
 * answer could cross a request the client is sending). While the handler runs (h2o has stopped reading)
 * the timer sleeps; HTTP/2 connections are h2o's (http2.idle_timeout). The wait is updated at each read
 * the guard sees, and checked against the input buffer when the timer fires (h2o may read without the
 * guard in front, right after a response). h2o's own http1.req_timeout stays behind as a backstop
 * (limits.c). */

static void on_client_timer(uv_timer_t *h);

static int reading_h1(const client_conn_t *cc)
{
    h2o_socket_cb cb = cc->sock->_cb.read;
    return cb != NULL && (cb == h1_reqread || cb == chunk_guard_read);
}

static void idle_leave(client_conn_t *cc)
{
    if (pdr_dlink_linked(&cc->idle)) {
        pdr_dqueue_unlink(&cc->t->idle_conns, &cc->idle);
        cc->t->n_idle--;
    }
}

static void close_idle(client_conn_t *cc)
{
    idle_leave(cc);
    cc->wait = CW_OFF;
    uv_timer_stop(&cc->timer);
    cc->t->m.keepalive_closed_total++;
    h1_reqread(cc->sock, h2o_socket_error_closed); /* h2o closes the connection */
}

static void set_wait(client_conn_t *cc, int wait, int ms)
{
    if (wait != CW_IDLE)
        idle_leave(cc);
    cc->wait = wait;
    cc->wait_size = cc->sock->input != NULL ? cc->sock->input->size : 0;
    if (ms > 0)
        uv_timer_start(&cc->timer, on_client_timer, (uint64_t)ms, 0);
    else
        uv_timer_stop(&cc->timer);
    if (wait != CW_IDLE || pdr_dlink_linked(&cc->idle))
        return;
    /* limits.max_idle_client_connections, shared out across the loops (rounded up): the oldest idle
     * connection goes first */
    pdr_thread_t *t = cc->t;
    pdr_dqueue_append(&t->idle_conns, &cc->idle);
    t->n_idle++;
    int cap = t->config->limits.max_idle_client_connections, n = t->r->n_threads > 0 ? t->r->n_threads : 1;
    while (cap > 0 && t->n_idle > (uint64_t)((cap + n - 1) / n)) {
        client_conn_t *old = PDR_DLINK_ITEM(t->idle_conns.head, client_conn_t, idle);
        if (reading_h1(old) && old->sock->input != NULL && old->sock->input->size == 0) {
            close_idle(old);
        } else { /* h2o went on with a request already in its buffer: not idle */
            idle_leave(old);
            old->wait = CW_BUSY;
        }
    }
}

/* What the connection waits for now, from h2o's state and the bytes h2o holds. */
static void update_wait(client_conn_t *cc)
{
    const pdr_config_t *c = cc->t->config;
    /* the handshake's end decides (on_tls_handshake); a lingering connection only drops what it reads */
    if (cc->wait == CW_OFF || cc->wait == CW_HANDSHAKE || cc->wait == CW_LINGER || cc->wait == CW_H2)
        return;
    if (cc->sock->input == NULL) { /* h2o closed the connection */
        idle_leave(cc);
        cc->wait = CW_OFF;
        uv_timer_stop(&cc->timer);
        return;
    }
    if (cc->sock->_cb.read == NULL) { /* the handler runs, or h2o writes an answer of its own */
        if (cc->wait != CW_BUSY)
            set_wait(cc, CW_BUSY, 0);
        return;
    }
    if (!reading_h1(cc)) { /* HTTP/2 now: h2o's idle timeout governs */
        idle_leave(cc);
        cc->wait = CW_OFF;
        uv_timer_stop(&cc->timer);
        return;
    }
    size_t size = cc->sock->input->size;
    int chunked;
    if (size == 0) {
        if (cc->served && cc->wait != CW_IDLE)
            set_wait(cc, CW_IDLE, c->timeouts.keepalive_idle_ms);
    } else if (pdr_reqguard_head_len(cc->sock->input->bytes, size, &chunked) == 0) {
        if (cc->wait != CW_HEAD)
            set_wait(cc, CW_HEAD, c->timeouts.client_header_ms);
    } else if (cc->wait != CW_BODY || size != cc->wait_size) {
        set_wait(cc, CW_BODY, c->timeouts.client_body_ms);
    }
}

/* ---- Lingering close ----
 *
 * An answer the router gives before the request is read whole (413, 431, 414, 408, 400 at the head) must
 * reach a client that is still sending: closing with its bytes unread makes the kernel send a reset,
 * which discards the answer in the client's receive buffer (a client that writes its whole body before
 * it reads, as undici and the OpenAI SDKs do, sees EPIPE or ECONNRESET instead of the status). As nginx
 * does (lingering_close), the router shuts its side down after the answer, then reads and drops what the
 * client still sends until it closes, pauses timeouts.lingering_idle_ms, or timeouts.lingering_ms have
 * passed; a client that sends more than limits.max_lingering_bytes is cut (reset). */

static void on_linger_timer(uv_timer_t *h);

static void linger_end(client_conn_t *cc, h2o_socket_t *sock, int cut)
{
    uv_timer_stop(&cc->timer);
    cc->wait = CW_OFF;
    if (cut) {
        cc->t->m.lingering_cut_total++;
        struct linger lg = {1, 0};
        setsockopt(cc->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    }
    h1_reqread(sock, h2o_socket_error_closed); /* h2o closes the connection */
}

/* Drops what the client sent; 1 when the lingering is over (the caller ends it). */
static int linger_drop(client_conn_t *cc, h2o_socket_t *sock)
{
    size_t n = sock->input->size;
    cc->linger_bytes += n;
    cc->t->m.lingering_discarded_bytes_total += n;
    h2o_buffer_consume(&sock->input, n);
    return cc->linger_bytes > (uint64_t)cc->t->config->limits.max_lingering_bytes;
}

static void linger_arm(client_conn_t *cc)
{
    uint64_t now = pdr_now_ms(), idle = (uint64_t)cc->t->config->timeouts.lingering_idle_ms;
    uint64_t left = cc->linger_until > now ? cc->linger_until - now : 0;
    uv_timer_start(&cc->timer, on_linger_timer, idle < left ? idle : left, 0);
}

static void linger_read(h2o_socket_t *sock, const char *err)
{
    int fd = h2o_socket_get_fd(sock);
    client_conn_t *cc = fd >= 0 && (size_t)fd < conn_by_fd_len ? conn_by_fd[fd] : NULL;
    if (cc == NULL || cc->wait != CW_LINGER) {
        h1_reqread(sock, err != NULL ? err : h2o_socket_error_closed);
        return;
    }
    if (err != NULL) { /* the client closed its side: it has read the answer, or will not */
        tls_read_failed(cc, err);
        linger_end(cc, sock, 0);
        return;
    }
    if (linger_drop(cc, sock)) {
        linger_end(cc, sock, 1);
        return;
    }
    linger_arm(cc);
}

static void on_linger_timer(uv_timer_t *h)
{
    client_conn_t *cc = h->data;
    if (cc->wait == CW_LINGER)
        linger_end(cc, cc->sock, 0);
}

/* After an answer of the router's own was written whole: the rest of the request is read and dropped. */
static void linger_start(client_conn_t *cc, h2o_socket_t *sock)
{
    const pdr_config_t *c = cc->t->config;
    shutdown(cc->fd, SHUT_WR);
    idle_leave(cc);
    cc->t->m.lingering_total++;
    cc->wait = CW_LINGER;
    cc->linger_bytes = 0;
    cc->linger_until = pdr_now_ms() + (uint64_t)c->timeouts.lingering_ms;
    if (c->timeouts.lingering_ms == 0 || linger_drop(cc, sock)) {
        linger_end(cc, sock, cc->linger_bytes > (uint64_t)c->limits.max_lingering_bytes);
        return;
    }
    h2o_socket_read_start(sock, linger_read);
    linger_arm(cc);
}

static void on_tls_answer_written(h2o_socket_t *sock, const char *err)
{
    int fd = h2o_socket_get_fd(sock);
    client_conn_t *cc = fd >= 0 && (size_t)fd < conn_by_fd_len ? conn_by_fd[fd] : NULL;
    if (cc == NULL || uv_is_closing((uv_handle_t *)&cc->tcp))
        return;
    tls_read_failed(cc, err);
    free(cc->tls_out);
    cc->tls_out = NULL;
    if (err != NULL) {
        h1_reqread(sock, err); /* h2o closes the connection */
        return;
    }
    linger_start(cc, sock);
}

/* Answers the HTTP/1 request h2o is reading (so nothing of h2o's is being written), then has h2o close the
 * connection: plain, straight to the socket; over TLS through h2o's socket (encrypted), closed once
 * written. */
static void h1_answer_close(client_conn_t *cc, h2o_socket_t *sock, const char *resp, size_t n)
{
    if (!cc->tls) {
        if (uv_stream_get_write_queue_size((uv_stream_t *)&cc->tcp) == 0 &&
            send(cc->fd, resp, n, MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)n) {
            linger_start(cc, sock);
            return;
        }
        shutdown(cc->fd, SHUT_WR);
        h1_reqread(sock, h2o_socket_error_closed); /* h2o closes the connection */
        return;
    }
    char *copy = malloc(n);
    if (copy == NULL || cc->tls_out != NULL || h2o_socket_is_writing(sock)) {
        free(copy);
        h1_reqread(sock, h2o_socket_error_closed);
        return;
    }
    memcpy(copy, resp, n);
    cc->tls_out = copy;
    h2o_socket_read_stop(sock); /* nothing more is read: the connection ends with this answer */
    h2o_iovec_t b = h2o_iovec_init(copy, n);
    h2o_socket_write(sock, &b, 1, on_tls_answer_written);
}

static void send_408(client_conn_t *cc, const char *what)
{
    char body[256], resp[512];
    int bn =
        snprintf(body, sizeof(body),
                 "{\"error\":{\"message\":\"%s\",\"type\":\"invalid_request_error\",\"code\":408}}", what);
    int n = snprintf(resp, sizeof(resp),
                     "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\nConnection: close\r\n"
                     "Content-Length: %d\r\n\r\n%s",
                     bn, body);
    h1_answer_close(cc, cc->sock, resp, (size_t)n);
}

static void on_client_timer(uv_timer_t *h)
{
    client_conn_t *cc = h->data;
    int was = (int)cc->wait;
    size_t was_size = cc->wait_size;
    update_wait(cc); /* re-arms when the connection moved on since */
    if ((int)cc->wait != was || cc->wait == CW_OFF || cc->wait == CW_BUSY ||
        (was == CW_BODY && cc->sock->input->size != was_size))
        return;
    if (was == CW_IDLE) {
        close_idle(cc);
        return;
    }
    const pdr_config_t *c = cc->t->config;
    char what[160];
    if (was == CW_HANDSHAKE) {
        /* No TLS handshake within client_header_ms: h2o's handshake fails on the shutdown and
         * on_tls_handshake closes the socket (no HTTP connection exists yet to answer on). */
        cc->t->m.client_header_timeouts_total++;
        cc->wait = CW_OFF;
        shutdown(cc->fd, SHUT_RDWR);
        return;
    }
    if (was == CW_HEAD) {
        snprintf(what, sizeof(what),
                 "the request head did not arrive within %d ms (timeouts.client_header_ms)",
                 c->timeouts.client_header_ms);
        cc->t->m.client_header_timeouts_total++;
    } else {
        snprintf(what, sizeof(what), "the request body paused for more than %d ms (timeouts.client_body_ms)",
                 c->timeouts.client_body_ms);
        cc->t->m.client_body_timeouts_total++;
    }
    cc->wait = CW_OFF;
    cc->g_active = 0;
    send_408(cc, what); /* then h2o closes the connection */
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
    if (cc->wait != CW_OFF) {
        /* h2o reads the next request now (or closes): idle until its first byte */
        cc->served = 1;
        cc->wait = CW_BUSY;
        set_wait(cc, CW_IDLE, t->config->timeouts.keepalive_idle_ms);
    }
    if (pdr_dlink_linked(&cc->rewrap))
        return;
    pdr_dlink_push(&t->rewrap, &cc->rewrap);
    uv_prepare_start(&t->rewrap_prepare, on_rewrap_prepare);
}

/* Looks at the bytes h2o is about to read: 1 when a chunk declares more than the body limit allows. head
 * and chunked: pdr_reqguard_head_len of the input, when the guard is not active. */
static int chunk_guard_inspect(client_conn_t *cc, h2o_socket_t *sock, size_t head, int chunked)
{
    const char *p = sock->input->bytes;
    size_t size = sock->input->size, pre = cc->g_last_size;
    if (pre > size) { /* consumed meanwhile: not the bytes this guard knows */
        cc->g_active = 0;
        return 0;
    }
    size_t from = pre;
    if (!cc->g_active) {
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
 * connection, so its callback is wrapped once). A header block past H2O_MAX_REQLEN receives a GOAWAY
 * ENHANCE_YOUR_CALM that says so, and the connection is closed; h2o would reset the stream and then
 * close with an unrelated debug text. */

/* h2o closes a connection inside its own read callback on any connection error (a malformed frame, bad
 * HPACK, a flow-control overflow): the socket's memory lives until the handle's close callback, but its
 * input buffer is gone at once. Everything a guard does after handing a read to h2o asks this first. */
static int sock_gone(client_conn_t *cc, const h2o_socket_t *sock)
{
    return sock->input == NULL || uv_is_closing((uv_handle_t *)&cc->tcp);
}

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

#define CONTROL_WINDOW_MS 10000

/* The control frames the guard counted since the last read take tokens of the connection's bucket of
 * limits.h2_max_control_frames, refilled over CONTROL_WINDOW_MS: 1 when it ran dry. */
static int h2_control_flood(client_conn_t *cc)
{
    int limit = cc->t->config->limits.h2_max_control_frames;
    uint64_t seen = cc->h2g.control - cc->ctl_seen;
    cc->ctl_seen = cc->h2g.control;
    if (limit == 0 || seen == 0)
        return 0;
    uint64_t now = pdr_now_ms();
    cc->ctl_tokens += (double)(now - cc->ctl_ms) * limit / CONTROL_WINDOW_MS;
    if (cc->ctl_tokens > limit)
        cc->ctl_tokens = limit;
    cc->ctl_ms = now;
    cc->ctl_tokens -= (double)seen;
    return cc->ctl_tokens < 0;
}

/* DATA the guard made unknown (a refused body the client goes on sending) is given back to the
 * connection's flow-control window, when nothing of h2o's is half written. */
static void h2_give_back_window(client_conn_t *cc)
{
    if (cc->tls || cc->h2g.window_debt == 0 || uv_stream_get_write_queue_size((uv_stream_t *)&cc->tcp) != 0)
        return;
    uint32_t d = cc->h2g.window_debt > 0x7fffffffu ? 0x7fffffffu : (uint32_t)cc->h2g.window_debt;
    uint8_t f[13] = {0, 0, 4, 0x8, 0, 0, 0, 0, 0};
    f[9] = (uint8_t)(d >> 24), f[10] = (uint8_t)(d >> 16), f[11] = (uint8_t)(d >> 8), f[12] = (uint8_t)d;
    if (send(cc->fd, f, sizeof(f), MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)sizeof(f))
        cc->h2g.window_debt -= d;
}

enum { H2_PASS = 0, H2_BLOCK_TOO_BIG, H2_CONTROL_FLOOD, H2_OVER_BUDGET, H2_BODY_STALLED };

/* ---- HTTP/2 request bodies: what they may hold, and how long they may pause ----
 *
 * h2o 2.2.5 buffers a request body whole before the handler runs and opens the flow-control window as it
 * reads, so a client holds as much router memory as it sends. The guard counts the body bytes each
 * connection holds (received, and not yet released by the end of the request that took them) against
 * limits.h2_max_connection_body_bytes and, summed over every connection of every loop, against
 * limits.max_body_memory_bytes. The stream whose DATA would pass either is refused: over plain HTTP/2
 * its body is ended there and the handler answers 503 (the rest of its DATA is dropped and its window
 * given back), over TLS the connection is closed (a window given back needs a write of the router's own).
 * A body that pauses longer than timeouts.client_body_ms is reset (plain HTTP/2: RST_STREAM CANCEL to
 * the client, and a reset handed to h2o as if the client had sent it, which frees the stream), or its
 * connection closed when that cannot be done between frames. */

static void h2_account(client_conn_t *cc, uint64_t held_before)
{
    uint64_t now = cc->h2g.held;
    if (now > held_before)
        __atomic_add_fetch(&cc->t->r->body_bytes_held, now - held_before, __ATOMIC_RELAXED);
    else if (now < held_before)
        __atomic_sub_fetch(&cc->t->r->body_bytes_held, held_before - now, __ATOMIC_RELAXED);
}

static void h2_set_budget(client_conn_t *cc)
{
    const pdr_config_t *c = cc->t->config;
    /* Each at least one body of limits.max_body_bytes, so that every body allowed can be received. */
    uint64_t body = (uint64_t)c->limits.max_body_bytes + 16384; /* h2o's limit: one frame more */
    uint64_t conn_cap = (uint64_t)c->limits.h2_max_connection_body_bytes,
             glob_cap = (uint64_t)c->limits.max_body_memory_bytes;
    if (conn_cap > 0 && conn_cap < body)
        conn_cap = body;
    if (glob_cap > 0 && glob_cap < body)
        glob_cap = body;
    uint64_t b = conn_cap > 0 ? conn_cap : UINT64_MAX;
    if (glob_cap > 0) {
        uint64_t total = __atomic_load_n(&cc->t->r->body_bytes_held, __ATOMIC_RELAXED);
        uint64_t room = total < glob_cap ? glob_cap - total : 0;
        if (cc->h2g.held + room < b)
            b = cc->h2g.held + room;
    }
    cc->h2_budget_global = glob_cap > 0 && b < (conn_cap > 0 ? conn_cap : UINT64_MAX);
    cc->h2g.budget_on = b != UINT64_MAX;
    cc->h2g.budget = b;
    cc->h2g.now_ms = pdr_now_ms();
}

static void on_h2_evict(uv_timer_t *h);

/* Feeds the bytes added since h2o last returned: H2_PASS, or why the connection must be refused. */
static int h2_guard_inspect(client_conn_t *cc, h2o_socket_t *sock)
{
    size_t size = sock->input->size, pre = cc->g_last_size;
    if (pre > size) {
        cc->h2_state = H2G_OFF;
        return H2_PASS;
    }
    uint64_t held = cc->h2g.held, over = cc->h2g.bodies_over_budget;
    h2_set_budget(cc);
    int v = pdr_h2guard_feed(&cc->h2g, sock->input->bytes, pre, &sock->input->size);
    h2_account(cc, held);
    if (cc->h2g.bodies_over_budget != over) {
        cc->t->m.h2_bodies_over_budget_total += cc->h2g.bodies_over_budget - over;
        if (!cc->h2_budget_logged) {
            cc->h2_budget_logged = 1;
            pdr_warn("HTTP/2 request bodies past limits.h2_max_connection_body_bytes (%lld) or "
                     "limits.max_body_memory_bytes (%lld): %s",
                     (long long)cc->t->config->limits.h2_max_connection_body_bytes,
                     (long long)cc->t->config->limits.max_body_memory_bytes,
                     cc->h2g.budget_closes ? "connection closed" : "stream answered 503");
        }
        if (cc->h2_budget_global && !uv_is_active((uv_handle_t *)&cc->t->h2_evict_timer))
            uv_timer_start(&cc->t->h2_evict_timer, on_h2_evict, 0, 0); /* after this read: h2_evict */
    }
    if (v == PDR_H2G_OVER_BUDGET)
        return H2_OVER_BUDGET;
    if (v == PDR_H2G_TOO_BIG)
        return H2_BLOCK_TOO_BIG;
    if (h2_control_flood(cc))
        return H2_CONTROL_FLOOD;
    if (v == PDR_H2G_LOST)
        cc->h2_state = H2G_OFF;
    h2_give_back_window(cc);
    return H2_PASS;
}

/* The frame guard and the control-frame bucket start following the connection (from its preface on).
 * body_limit: follow request bodies against limits.max_body_bytes too (needs writes of the router's own
 * to give their window back: not over TLS). */
static void on_h2_body_timer(uv_timer_t *h);

static void h2_follow(client_conn_t *cc, int body_limit)
{
    const pdr_config_t *c = cc->t->config;
    cc->h2_state = H2G_FOLLOWING;
    uint64_t held = cc->h2g.held;
    pdr_h2guard_init(&cc->h2g, H2O_MAX_REQLEN);
    cc->h2g.held = held;
    if (cc->h2bodies == NULL)
        cc->h2bodies = calloc(1, sizeof(*cc->h2bodies));
    if (cc->h2bodies != NULL && !pdr_dlink_linked(&cc->h2link))
        pdr_dlink_push(&cc->t->h2_conns, &cc->h2link);
    if (cc->h2bodies == NULL) {
        cc->t->m.h2_bodies_unfollowed_total++;
        pdr_warn(
            "out of memory: an HTTP/2 connection's request bodies are not followed (h2o's limits stand)");
    }
    /* Over TLS the guard refuses no body at its size (h2o does, one frame past it): the bodies are
     * followed for the budget, and past it the connection is closed. */
    pdr_h2guard_set_body_limit(&cc->h2g, body_limit ? (uint64_t)c->limits.max_body_bytes : UINT64_MAX / 2,
                               cc->h2bodies);
    cc->h2g.budget_closes = !body_limit;
    cc->ctl_seen = 0;
    cc->ctl_tokens = c->limits.h2_max_control_frames;
    cc->ctl_ms = pdr_now_ms();
}

static void h2_refuse(client_conn_t *cc, h2o_socket_t *sock, h2o_socket_cb next, int why)
{
    char debug[160];
    if (why == H2_BLOCK_TOO_BIG) {
        snprintf(debug, sizeof(debug),
                 "header block of stream %" PRIu32 " exceeds %u bytes (HEADERS + CONTINUATION)",
                 cc->h2g.block_stream, (unsigned)H2O_MAX_REQLEN);
        cc->t->m
            .h2_header_block_too_large_total++; /* before the GOAWAY: a client that saw it sees the count */
    } else if (why == H2_OVER_BUDGET) {
        snprintf(debug, sizeof(debug),
                 "request bodies exceed limits.h2_max_connection_body_bytes or "
                 "limits.max_body_memory_bytes");
    } else if (why == H2_BODY_STALLED) {
        snprintf(debug, sizeof(debug), "a request body paused for more than %d ms (timeouts.client_body_ms)",
                 cc->t->config->timeouts.client_body_ms);
    } else {
        int limit = cc->t->config->limits.h2_max_control_frames;
        snprintf(debug, sizeof(debug),
                 "more than %d SETTINGS, PING, PRIORITY, CONTINUATION or unknown-type frames in %d s "
                 "(limits.h2_max_control_frames)",
                 limit, CONTROL_WINDOW_MS / 1000);
        cc->t->m.h2_control_floods_total++;
        pdr_warn("HTTP/2 client sent more than %d control frames in %d s on one connection "
                 "(limits.h2_max_control_frames): connection closed",
                 limit, CONTROL_WINDOW_MS / 1000);
    }
    if (!cc->tls) /* over TLS the close alone ends it: plaintext would corrupt the session */
        h2_send_goaway(&cc->tcp, cc->fd, next != h2_read, cc->h2g.last_stream, debug);
    shutdown(cc->fd, SHUT_WR);
    cc->h2_state = H2G_OFF;
    if (next != NULL)
        next(sock, h2o_socket_error_closed); /* h2o closes the connection */
    else
        h2o_socket_close(sock); /* before h2o took it (on_tls_handshake) */
}

/* Resets stream s, whose body the guard has forgotten already (pdr_h2guard_take*): RST_STREAM CANCEL to the
 * client, and the same frame handed to h2o as if the client had sent it (h2o frees the stream). That
 * needs the connection between frames, in plaintext, with nothing of h2o's waiting to be written; else
 * the connection is closed (why: H2_BODY_STALLED or H2_OVER_BUDGET). 0 when the connection goes on. */
static int h2_reset_stream(client_conn_t *cc, h2o_socket_t *sock, uint32_t s, int why)
{
    int between_frames = sock->input->size == 0 && cc->h2g.hdr_have == 0 && cc->h2g.payload_left == 0 &&
                         !cc->h2g.in_block && cc->g_last_size == 0;
    if (cc->tls || !between_frames || uv_stream_get_write_queue_size((uv_stream_t *)&cc->tcp) != 0) {
        h2_refuse(cc, sock, h2_read, why);
        return -1;
    }
    uint8_t rst[13] = {0,          0, 4, 0x3, 0,  (uint8_t)(s >> 24), (uint8_t)(s >> 16), (uint8_t)(s >> 8),
                       (uint8_t)s, 0, 0, 0,   0x8};
    ssize_t w = send(cc->fd, rst, sizeof(rst), MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)w;
    h2o_iovec_t room = h2o_buffer_reserve(&sock->input, sizeof(rst));
    if (room.base == NULL) {
        h2_refuse(cc, sock, h2_read, why);
        return -1;
    }
    memcpy(room.base, rst, sizeof(rst));
    sock->input->size += sizeof(rst);
    h2_read(sock, NULL);
    if (sock_gone(cc, sock))
        return -1;
    cc->g_last_size = sock->input->size;
    return 0;
}

/* A connection whose bodies the guard follows and that is still open. */
static int h2_followed(client_conn_t *cc)
{
    return cc->h2_state == H2G_FOLLOWING && cc->h2bodies != NULL && h2_read != NULL && cc->sock != NULL &&
           cc->sock->input != NULL && !uv_is_closing((uv_handle_t *)&cc->tcp);
}

/* A stream whose body paused past timeouts.client_body_ms (see above). */
static pdr_ratelog_t stall_log = PDR_RATELOG_INIT;

static void on_h2_body_timer(uv_timer_t *h)
{
    client_conn_t *cc = h->data;
    h2o_socket_t *sock = cc->sock;
    const pdr_config_t *c = cc->t->config;
    uint64_t now = pdr_now_ms(), pause = (uint64_t)c->timeouts.client_body_ms;
    if (!h2_followed(cc) || now < pause)
        return;
    uint32_t s;
    for (;;) {
        uint64_t held = cc->h2g.held;
        if ((s = pdr_h2guard_take_stalled(&cc->h2g, now - pause)) == 0)
            return;
        h2_account(cc, held);
        cc->t->m.h2_body_timeouts_total++;
        uint64_t suppressed;
        if (pdr_ratelog_take(&stall_log, pdr_now_ns(), 1000000000ull, &suppressed))
            pdr_info("HTTP/2 request body of stream %" PRIu32 " paused for more than %d ms "
                     "(timeouts.client_body_ms): %s%s",
                     s, c->timeouts.client_body_ms, cc->tls ? "connection closed" : "stream reset",
                     suppressed > 0 ? " (and more, not logged)" : "");
        if (h2_reset_stream(cc, sock, s, H2_BODY_STALLED) != 0)
            return;
    }
}

/* ---- the router's body budget spent: the biggest bodies still arriving are reset ----
 *
 * A refusal for limits.max_body_memory_bytes (h2_guard_inspect) runs this after the read: the loop resets
 * the biggest bodies still arriving on its connections, one at a time, until the bodies held by the
 * router leave room for one body of limits.max_body_bytes and for an eighth of the budget. Bodies that
 * have arrived whole (their requests in progress) are not touched; nor are other loops' connections (each
 * loop does the same when a refusal comes to it). A client that holds the budget with bodies it never
 * ends cannot keep every other client refused. */
static pdr_ratelog_t evict_log = PDR_RATELOG_INIT;

static void on_h2_evict(uv_timer_t *h)
{
    pdr_thread_t *t = h->data;
    const pdr_config_t *c = t->config;
    uint64_t body = (uint64_t)c->limits.max_body_bytes + 16384,
             cap = (uint64_t)c->limits.max_body_memory_bytes;
    if (cap == 0)
        return;
    if (cap < body)
        cap = body;
    uint64_t room = cap / 8 > body ? cap / 8 : body, target = cap > room ? cap - room : 0;
    uint64_t n = 0, freed = 0;
    while (__atomic_load_n(&t->r->body_bytes_held, __ATOMIC_RELAXED) > target) {
        client_conn_t *victim = NULL;
        uint32_t vs = 0;
        uint64_t vbytes = 0, vlast = 0;
        for (pdr_dlink_t *l = t->h2_conns; l != NULL; l = l->next) {
            client_conn_t *cc = PDR_DLINK_ITEM(l, client_conn_t, h2link);
            uint64_t bytes, last;
            uint32_t s = h2_followed(cc) ? pdr_h2guard_biggest(&cc->h2g, &bytes, &last) : 0;
            if (s != 0 && (victim == NULL || bytes > vbytes || (bytes == vbytes && last < vlast)))
                victim = cc, vs = s, vbytes = bytes, vlast = last;
        }
        if (victim == NULL)
            break;
        uint64_t held = victim->h2g.held;
        pdr_h2guard_take(&victim->h2g, vs);
        h2_account(victim, held);
        t->m.h2_bodies_evicted_total++;
        n++, freed += vbytes;
        if (h2_reset_stream(victim, victim->sock, vs, H2_OVER_BUDGET) != 0) {
            /* closed (TLS): h2o drops its other streams with it; their bytes leave the count now, not at
             * the close's callback, so that they are not made room for twice */
            held = victim->h2g.held;
            victim->h2g.held = 0;
            h2_account(victim, held);
        }
    }
    uint64_t suppressed;
    if (n > 0 && pdr_ratelog_take(&evict_log, pdr_now_ns(), 1000000000ull, &suppressed))
        pdr_warn("HTTP/2 request bodies held reached limits.max_body_memory_bytes (%llu): reset the %llu "
                 "biggest bodies still arriving (%llu bytes)%s",
                 (unsigned long long)c->limits.max_body_memory_bytes, (unsigned long long)n,
                 (unsigned long long)freed, suppressed > 0 ? " (and more, not logged)" : "");
}

void pdr__conn_evict_init(pdr_thread_t *t)
{
    uv_timer_init(t->loop, &t->h2_evict_timer);
    t->h2_evict_timer.data = t;
    t->h2_conns = NULL;
}

static void h2_guard_read(h2o_socket_t *sock, const char *err)
{
    int fd = h2o_socket_get_fd(sock);
    client_conn_t *cc = fd >= 0 && (size_t)fd < conn_by_fd_len ? conn_by_fd[fd] : NULL;
    int why;
    tls_read_failed(cc, err);
    if (err == NULL && cc != NULL && cc->h2_fresh) {
        /* Upgraded from HTTP/1: h2o may have parsed bytes sent with the upgrade request already; what it
         * left starts at a frame, or at the part of the preface still missing. */
        cc->h2_fresh = 0;
        if (!is_preface_start(sock))
            cc->h2g.preface_left = 0;
    }
    if (err == NULL && cc != NULL && cc->h2_state == H2G_FOLLOWING &&
        (why = h2_guard_inspect(cc, sock)) != 0) {
        h2_refuse(cc, sock, h2_read, why);
        return;
    }
    h2_read(sock, err);
    if (cc != NULL && err == NULL && !sock_gone(cc, sock))
        cc->g_last_size = sock->input->size;
}

/* After h2o's HTTP/1 callback switched the connection to HTTP/2: its HTTP/2 callback receives the guard. */
static void h2_guard_wrap(client_conn_t *cc, h2o_socket_t *sock)
{
    h2o_socket_cb cb = sock->_cb.read;
    if (sock_gone(cc, sock) || cb == NULL || cb == h1_reqread || cb == chunk_guard_read ||
        cb == h2_guard_read) {
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
    /* HTTP/2 from here: the connection's timer follows its request bodies (on_h2_body_timer) */
    idle_leave(cc);
    cc->wait = CW_H2;
    uint64_t period = (uint64_t)cc->t->config->timeouts.client_body_ms / 4 + 1;
    uv_timer_start(&cc->timer, on_h2_body_timer, period, period);
}

static int is_preface_start(const h2o_socket_t *sock)
{
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    size_t n = sock->input->size < sizeof(preface) - 1 ? sock->input->size : sizeof(preface) - 1;
    return n > 0 && memcmp(sock->input->bytes, preface, n) == 0;
}

/* The Content-Length of the complete HTTP/1 head of `head` bytes at the start of p (the first one: more
 * than one is refused later as ambiguous), or -1 when there is none or the head is not complete (head 0). */
static int64_t head_content_length(const char *p, size_t head, int chunked)
{
    if (head == 0 || chunked)
        return -1;
    static const char name[] = "content-length:";
    /* Line by line: memchr finds each line's end, and only a line starting with 'c' is compared. */
    for (const char *nl = memchr(p, '\n', head); nl != NULL;
         nl = memchr(nl + 1, '\n', head - (size_t)(nl + 1 - p))) {
        size_t i = (size_t)(nl - p);
        if (i + sizeof(name) - 1 >= head)
            break;
        if ((p[i + 1] | 0x20) != 'c' || strncasecmp(p + i + 1, name, sizeof(name) - 1) != 0)
            continue;
        size_t j = i + sizeof(name);
        while (j < head && (p[j] == ' ' || p[j] == '\t'))
            j++;
        int64_t v = 0;
        size_t digits = 0;
        for (; j < head && p[j] >= '0' && p[j] <= '9' && digits < 18; j++, digits++)
            v = v * 10 + (p[j] - '0');
        if (digits == 0)
            return -1; /* h2o answers a malformed length itself */
        return j < head && p[j] >= '0' && p[j] <= '9' ? INT64_MAX : v;
    }
    return -1;
}

/* h2o's HTTP/1 request parser (picohttpparser, exported by libh2o; Debian ships no header for it). */
struct phr_header {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
};
int phr_parse_request(const char *buf, size_t len, const char **method, size_t *method_len, const char **path,
                      size_t *path_len, int *minor_version, struct phr_header *headers, size_t *num_headers,
                      size_t last_len);

/* Why a complete request head must be refused with 400 before h2o reads it, or NULL: a head another
 * parser may frame differently (reqguard.h), or one h2o's own parser refuses (h2o would answer 400 and
 * close at once, resetting a client that is still sending). */
static const char *malformed_head(const char *p, size_t n, size_t head)
{
    if (head == 0)
        return NULL;
    const char *why;
    if (pdr_reqguard_check_head(p, n, &why) != 0)
        return why;
    const char *method, *path;
    size_t method_len, path_len, num_headers = H2O_MAX_HEADERS;
    int minor;
    struct phr_header headers[H2O_MAX_HEADERS];
    if (phr_parse_request(p, n, &method, &method_len, &path, &path_len, &minor, headers, &num_headers, 0) ==
        -1)
        return "the request line or a header line cannot be parsed";
    return NULL;
}

/* Answers an HTTP/1 request whose head passes the router's limits before h2o parses it (see
 * pdr_reqguard_head_limits), or whose Content-Length is above limits.max_body_bytes (413 before any of
 * the body is read), then lets h2o close the connection. head and chunked: pdr_reqguard_head_len of the
 * input. */
static int head_guard(client_conn_t *cc, h2o_socket_t *sock, int fd, size_t head, int chunked)
{
    const pdr_config_t *c = cc->t->config;
    int st = pdr_reqguard_head_limits(sock->input->bytes, sock->input->size, (size_t)c->limits.max_headers,
                                      (size_t)c->limits.max_header_bytes);
    const char *bad = NULL;
    if (st == 0 && (bad = malformed_head(sock->input->bytes, sock->input->size, head)) != NULL)
        st = 400;
    if (st == 0 && head_content_length(sock->input->bytes, head, chunked) > c->limits.max_body_bytes)
        st = 413;
    if (st == 0)
        return 0;
    char body[320], resp[640], what[160];
    if (st == 400)
        snprintf(what, sizeof(what), "malformed request: %s", bad);
    int bn = snprintf(
        body, sizeof(body), "{\"error\":{\"message\":\"%s\",\"type\":\"invalid_request_error\",\"code\":%d}}",
        st == 400   ? what
        : st == 413 ? "the request body exceeds limits.max_body_bytes"
        : st == 414 ? "the request line is longer than limits.max_header_bytes"
                    : "the request head has more fields than limits.max_headers or more bytes than "
                      "limits.max_header_bytes",
        st);
    int n = snprintf(resp, sizeof(resp),
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nConnection: close\r\n"
                     "Content-Length: %d\r\n\r\n%s",
                     st, pdr_http_reason(st), bn, body);
    (void)fd;
    if (st == 400)
        cc->t->m.bad_framing_total++;
    else if (st == 413)
        cc->t->m.body_too_large_total++;
    else
        cc->t->m.headers_too_large_total++;
    cc->g_active = 0;
    h1_answer_close(cc, sock, resp, (size_t)n);
    return 1;
}

static void chunk_guard_read(h2o_socket_t *sock, const char *err)
{
    int fd = h2o_socket_get_fd(sock);
    client_conn_t *cc = fd >= 0 && (size_t)fd < conn_by_fd_len ? conn_by_fd[fd] : NULL;
    tls_read_failed(cc, err);
    if (err == NULL && cc != NULL && cc->h2_state == H2G_UNDECIDED && sock->input->size > 0) {
        if (is_preface_start(sock))
            h2_follow(cc, 1);
        else
            cc->h2_state = H2G_HTTP1;
    }
    if (err == NULL && cc != NULL && cc->h2_state == H2G_FOLLOWING) {
        /* The HTTP/2 preface (prior knowledge): h2o switches the connection inside its HTTP/1 callback. */
        int why = h2_guard_inspect(cc, sock);
        if (why != H2_PASS) {
            h2_refuse(cc, sock, h1_reqread, why);
            return;
        }
        h1_reqread(sock, err);
        if (sock_gone(cc, sock))
            return;
        if (sock->_cb.read == chunk_guard_read || sock->_cb.read == h1_reqread) {
            sock->_cb.read = chunk_guard_read; /* still HTTP/1: the preface is not complete yet */
            cc->g_last_size = sock->input->size;
        } else if (cc->h2_state == H2G_FOLLOWING) {
            h2_guard_wrap(cc, sock);
        }
        update_wait(cc);
        return;
    }
    /* The head is scanned once for both guards (neither reads it while following a body). */
    size_t head = 0;
    int chunked = 0;
    if (err == NULL && cc != NULL && !cc->g_active)
        head = pdr_reqguard_head_len(sock->input->bytes, sock->input->size, &chunked);
    if (err == NULL && cc != NULL && !cc->g_active && head_guard(cc, sock, fd, head, chunked))
        return;
    if (err == NULL && cc != NULL && chunk_guard_inspect(cc, sock, head, chunked)) {
        static const char body[] =
            "{\"error\":{\"message\":\"a chunk of the request body exceeds "
            "limits.max_body_bytes\",\"type\":\"invalid_request_error\",\"code\":413}}";
        char resp[384];
        int n = snprintf(
            resp, sizeof(resp),
            "HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\nConnection: close\r\n"
            "Content-Length: %zu\r\n\r\n%s",
            sizeof(body) - 1, body);
        cc->t->m.chunk_too_large_total++;
        cc->g_active = 0;
        h1_answer_close(cc, sock, resp, (size_t)n);
        return;
    }
    if (cc != NULL && head != 0) {
        /* head_guard passed this complete head (check_head included) just now. */
        cc->g_checked = sock->input->bytes;
        cc->g_checked_size = sock->input->size;
    }
    h1_reqread(sock, err);
    if (cc != NULL)
        cc->g_checked = NULL;
    if (cc == NULL || err != NULL || sock_gone(cc, sock))
        return;
    if (sock->_cb.read == h1_reqread)
        sock->_cb.read = chunk_guard_read; /* h2o restarted reading inside its callback */
    cc->g_last_size = sock->input->size;
    if (cc->g_active && sock->input->size != cc->g_head_len + cc->g.data)
        cc->g_active = 0; /* h2o decoded something else than predicted: stop following */
    update_wait(cc);
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
    idle_leave(cc);
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
    if (cc->fd >= 0 && (size_t)cc->fd < conn_by_fd_len && conn_by_fd[cc->fd] == cc)
        conn_by_fd[cc->fd] = NULL;
    if (cc->counted)
        __atomic_sub_fetch(&cc->t->r->client_conns, 1, __ATOMIC_RELAXED);
    uv_close((uv_handle_t *)&cc->timer, on_timer_closed);
}

int pdr__client_conns_full(pdr_thread_t *t)
{
    int cap = t->config->limits.max_client_connections;
    return cap > 0 && __atomic_load_n(&t->r->client_conns, __ATOMIC_RELAXED) >= (uint64_t)cap;
}

/* HTTP/1: refuses a request whose head may be framed differently by another parser (reqguard.h) with 400,
 * and closes the connection, so that nothing after it on the connection is read as a request. h2o keeps
 * the raw head at the start of the connection's input buffer until the response is over. */
/* An HTTP/1 connection that h2o switched to HTTP/2 (Upgrade: h2c), seen from the upgraded request's
 * handler, which h2o runs once it reads the connection with its HTTP/2 callback: the frame guard and the
 * control-frame bucket follow it from here, as they follow a connection that opened with the preface.
 * 1 when it was one. */
static int h2_upgraded(client_conn_t *cc, h2o_socket_t *sock)
{
    h2o_socket_cb cb = sock->_cb.read;
    if (cc->h2_state != H2G_HTTP1 || cc->tls || cb == NULL || cb == h1_reqread || cb == chunk_guard_read ||
        cb == h2_guard_read)
        return 0;
    idle_leave(cc);
    cc->wait = CW_OFF; /* h2o's HTTP/2 idle timeout governs from here */
    uv_timer_stop(&cc->timer);
    h2_follow(cc, 1);
    cc->h2_fresh = 1;
    h2_guard_wrap(cc, sock);
    return 1;
}

/* HTTP/2 request bodies handed to a handler stay held until the request ends (see above). */
typedef struct body_taken {
    client_conn_t *cc;
    uint64_t bytes;
} body_taken_t;

static void on_body_released(void *p)
{
    body_taken_t *bt = p;
    client_conn_t *cc = bt->cc;
    uint64_t held = cc->h2g.held;
    pdr_h2guard_release(&cc->h2g, bt->bytes);
    h2_account(cc, held);
}

/* The HTTP/2 stream of a request, as h2o gives it to loggers (its stream struct is not public). */
static uint32_t h2_stream_id(h2o_req_t *req)
{
    if (req->conn->callbacks->log_.http2.stream_id == NULL)
        return 0;
    h2o_iovec_t v = req->conn->callbacks->log_.http2.stream_id(req);
    uint64_t id = 0;
    for (size_t i = 0; i < v.len && i < 10 && v.base[i] >= '0' && v.base[i] <= '9'; i++)
        id = id * 10 + (uint64_t)(v.base[i] - '0');
    return id <= 0x7fffffffu ? (uint32_t)id : 0;
}

int pdr__conn_take_body(pdr_thread_t *t, h2o_req_t *req)
{
    if (req->version < 0x200)
        return 0;
    client_conn_t *cc = conn_of(req);
    if (cc == NULL || cc->h2bodies == NULL)
        return 0;
    if (req->entity.len > 0) {
        body_taken_t *bt = h2o_mem_alloc_shared(&req->pool, sizeof(*bt), on_body_released);
        bt->cc = cc;
        bt->bytes = req->entity.len;
    }
    if (cc->h2g.bodies_over_budget == 0 || !pdr_h2guard_over_budget(&cc->h2g, h2_stream_id(req)))
        return 0;
    char msg[200];
    snprintf(msg, sizeof(msg),
             "the router holds too many request bodies (limits.h2_max_connection_body_bytes %lld, "
             "limits.max_body_memory_bytes %lld): retry",
             (long long)t->config->limits.h2_max_connection_body_bytes,
             (long long)t->config->limits.max_body_memory_bytes);
    pdr_send_error(req, 503, "service_unavailable", msg, 1);
    return 1;
}

int pdr__refuse_ambiguous_head(pdr_thread_t *t, h2o_req_t *req)
{
    client_conn_t *cc = conn_of(req);
    h2o_socket_t *sock = req->conn->callbacks->get_socket(req->conn);
    if (cc != NULL && sock != NULL && h2_upgraded(cc, sock))
        return 0;
    if (req->version >= 0x200)
        return 0;
    if (cc != NULL) {
        client_conn_t **anchor = h2o_mem_alloc_shared(&req->pool, sizeof(*anchor), on_h1_req_dispose);
        *anchor = cc;
    }
    if (sock == NULL || sock->input == NULL)
        return 0;
    /* The same buffer head_guard checked in the read now being handled: checked already. (h2o has
     * lower-cased the header names in place since; the checks compare names in any case.) */
    if (cc != NULL && cc->g_checked == sock->input->bytes && cc->g_checked_size == sock->input->size)
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
        h2_follow(cc, 0);
        cc->g_last_size = 0;
        int why = sock->input->size > 0 ? h2_guard_inspect(cc, sock) : H2_PASS;
        if (why != H2_PASS) {
            h2_refuse(cc, sock, NULL, why);
            return;
        }
        h2o_http2_accept(cc->actx, sock, cc->accepted);
        if (!sock_gone(cc, sock) && cc->h2_state == H2G_FOLLOWING)
            h2_guard_wrap(cc, sock);
        return;
    }
    /* HTTP/1: the head's deadline still counts from the accept. h2o's HTTP/1 code parses what its input
     * holds as soon as it starts: it starts on an empty buffer, and the bytes that came with the
     * handshake's end are then handed to it through the guard, as a read. */
    cc->wait = CW_HEAD;
    cc->wait_size = sock->input->size;
    h2o_buffer_t *held = sock->input;
    h2o_buffer_init(&sock->input, &h2o_socket_buffer_prototype);
    h2o_http1_accept(cc->actx, sock, cc->accepted);
    if (sock->input == NULL || uv_is_closing((uv_handle_t *)&cc->tcp)) {
        h2o_buffer_dispose(&held); /* h2o closed it while starting */
        return;
    }
    h2o_buffer_dispose(&sock->input);
    sock->input = held;
    if (sock->_cb.read == NULL)
        return;
    if (h1_reqread == NULL)
        h1_reqread = sock->_cb.read;
    guard_wrap(cc);
    cc->g_last_size = 0; /* the guard has seen none of it */
    if (sock->input->size > 0)
        sock->_cb.read(sock, NULL);
    else
        update_wait(cc);
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
    if ((size_t)fd < conn_by_fd_len)
        conn_by_fd[fd] = cc;
    t->conns++; /* admin connections count too: loop 0 ends only when they are gone */
    h2o_socket_t *sock = h2o_uv_socket_create((uv_stream_t *)conn, on_conn_closed);
    cc->sock = sock;
    cc->g_active = 0;
    cc->g_last_size = 0;
    cc->g_checked = NULL;
    cc->g_checked_size = 0;
    cc->h2_state = H2G_UNDECIDED;
    cc->h2_fresh = 0;
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
    set_wait(cc, CW_HEAD, t->config->timeouts.client_header_ms); /* the first request: from the accept */

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
    h2o_accept(actx, sock);
    /* A plain connection starts as HTTP/1: the callback h2o reads it with is its HTTP/1 one. */
    if (h1_reqread == NULL)
        h1_reqread = sock->_cb.read;
    guard_wrap(cc);
}
