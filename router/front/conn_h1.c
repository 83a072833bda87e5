/*
 * Client connections over HTTP/1 (the connection's own loop): the client timeouts (head, body, idle
 * keep-alive), lingering close after an answer of the router's own, and the guards in front of h2o's
 * read callback (a chunk larger than the body limit, a head past the router's limits or framed
 * ambiguously). conn.c hands each connection here (pdr__conn_start_http1, or h2o's HTTP/1 at the accept);
 * the HTTP/2 guards are conn_h2.c's, below this file.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>
#include "conn_internal.h"
#include "err.h"
#include "front.h"
#include "ratelog.h"
#include "reply.h"
#include "reqguard.h"
#include "router.h"
#include "util.h"
#include "h2o/http1.h"
#include "h2o/http2.h"

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

h2o_socket_cb pdr__conn_h1_reqread; /* h2o's HTTP/1 read callback, learned at the first accept */

void pdr__conn_guard_wrap(client_conn_t *cc)
{
    if (cc->sock != NULL && cc->sock->input != NULL && pdr__conn_h1_reqread != NULL &&
        cc->sock->_cb.read == pdr__conn_h1_reqread) {
        cc->sock->_cb.read = pdr__conn_chunk_guard_read;
        cc->g_last_size = cc->sock->input->size;
    }
}

/* ---- HTTP/1 taking a connection (conn.c hands it over) ---- */

/* HTTP/1 after the router read the connection's first bytes itself (the TLS handshake, or the look for
 * the HTTP/2 preface): the head's deadline still counts from the accept. h2o's HTTP/1 code parses what
 * its input holds as soon as it starts: it starts on an empty buffer, and the bytes read so far are then
 * handed to it through the guard, as a read. */
void pdr__conn_start_http1(client_conn_t *cc, h2o_socket_t *sock)
{
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
    if (pdr__conn_h1_reqread == NULL)
        pdr__conn_h1_reqread = sock->_cb.read;
    pdr__conn_guard_wrap(cc);
    cc->g_last_size = 0; /* the guard has seen none of it */
    if (sock->input->size > 0)
        sock->_cb.read(sock, NULL);
    else
        pdr__conn_update_wait(cc);
}

void pdr__conn_sniff_end(client_conn_t *cc)
{
    cc->sniffing = 0;
    h2o_socket_read_stop(cc->sock);
    cc->sock->data = NULL;
    pdr__conn_start_http1(cc, cc->sock);
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
 * (limits.c).
 * The timer is moved only to an earlier time: a wait that ends later than the one it is armed for leaves
 * it as it is, and when it fires before the wait's end (wait_due) it is armed again for the rest; while
 * the handler runs it is left armed, and firing then it does nothing. So a keep-alive connection that
 * goes from idle to busy and back with each request does not stop and start it each time. */

static void on_client_timer(uv_timer_t *h);

static int reading_h1(const client_conn_t *cc)
{
    h2o_socket_cb cb = cc->sock->_cb.read;
    return cb != NULL && (cb == pdr__conn_h1_reqread || cb == pdr__conn_chunk_guard_read);
}

static void close_idle(client_conn_t *cc)
{
    pdr__conn_idle_leave(cc);
    cc->wait = CW_OFF;
    uv_timer_stop(&cc->timer);
    cc->t->m.keepalive_closed_total++;
    pdr__conn_h1_reqread(cc->sock, h2o_socket_error_closed); /* h2o closes the connection */
}

void pdr__conn_set_wait(client_conn_t *cc, int wait, int ms)
{
    if (wait != CW_IDLE)
        pdr__conn_idle_leave(cc);
    cc->wait = wait;
    cc->wait_size = cc->sock->input != NULL ? cc->sock->input->size : 0;
    if (ms > 0) {
        uint64_t due = uv_now(cc->t->loop) + (uint64_t)ms;
        cc->wait_due = due;
        if (cc->wait_armed == 0 || cc->wait_armed > due || !uv_is_active((uv_handle_t *)&cc->timer)) {
            cc->wait_armed = due;
            uv_timer_start(&cc->timer, on_client_timer, (uint64_t)ms, 0);
        }
    } else {
        cc->wait_due = 0;
        if (wait != CW_BUSY) {
            cc->wait_armed = 0;
            uv_timer_stop(&cc->timer);
        }
    }
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
            pdr__conn_idle_leave(old);
            old->wait = CW_BUSY;
        }
    }
}

/* What the connection waits for now, from h2o's state and the bytes h2o holds. */
void pdr__conn_update_wait(client_conn_t *cc)
{
    const pdr_config_t *c = cc->t->config;
    /* the handshake's end decides (on_tls_handshake); a lingering connection only drops what it reads */
    if (cc->wait == CW_OFF || cc->wait == CW_HANDSHAKE || cc->wait == CW_LINGER || cc->wait == CW_H2)
        return;
    if (cc->sock->input == NULL) { /* h2o closed the connection */
        pdr__conn_idle_leave(cc);
        cc->wait = CW_OFF;
        uv_timer_stop(&cc->timer);
        return;
    }
    if (cc->sock->_cb.read == NULL) { /* the handler runs, or h2o writes an answer of its own */
        if (cc->wait != CW_BUSY)
            pdr__conn_set_wait(cc, CW_BUSY, 0);
        return;
    }
    if (!reading_h1(cc)) { /* HTTP/2 now: h2o's idle timeout governs */
        pdr__conn_idle_leave(cc);
        cc->wait = CW_OFF;
        uv_timer_stop(&cc->timer);
        return;
    }
    size_t size = cc->sock->input->size;
    int chunked;
    if (size == 0) {
        if (cc->served && cc->wait != CW_IDLE)
            pdr__conn_set_wait(cc, CW_IDLE, c->timeouts.keepalive_idle_ms);
    } else if (pdr_reqguard_head_len(cc->sock->input->bytes, size, &chunked) == 0) {
        if (cc->wait != CW_HEAD)
            pdr__conn_set_wait(cc, CW_HEAD, c->timeouts.client_header_ms);
    } else if (cc->wait != CW_BODY || size != cc->wait_size) {
        pdr__conn_set_wait(cc, CW_BODY, c->timeouts.client_body_ms);
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
    pdr__conn_h1_reqread(sock, h2o_socket_error_closed); /* h2o closes the connection */
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
    cc->wait_armed = 0;
    uv_timer_start(&cc->timer, on_linger_timer, idle < left ? idle : left, 0);
}

static void linger_read(h2o_socket_t *sock, const char *err)
{
    int fd = h2o_socket_get_fd(sock);
    client_conn_t *cc = fd >= 0 && (size_t)fd < pdr__conn_by_fd_len ? pdr__conn_by_fd[fd] : NULL;
    if (cc == NULL || cc->wait != CW_LINGER) {
        pdr__conn_h1_reqread(sock, err != NULL ? err : h2o_socket_error_closed);
        return;
    }
    if (err != NULL) { /* the client closed its side: it has read the answer, or will not */
        pdr__conn_tls_read_failed(cc, err);
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
    pdr__conn_idle_leave(cc);
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
    client_conn_t *cc = fd >= 0 && (size_t)fd < pdr__conn_by_fd_len ? pdr__conn_by_fd[fd] : NULL;
    if (cc == NULL || uv_is_closing((uv_handle_t *)&cc->tcp))
        return;
    pdr__conn_tls_read_failed(cc, err);
    free(cc->tls_out);
    cc->tls_out = NULL;
    if (err != NULL) {
        pdr__conn_h1_reqread(sock, err); /* h2o closes the connection */
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
        pdr__conn_h1_reqread(sock, h2o_socket_error_closed); /* h2o closes the connection */
        return;
    }
    char *copy = malloc(n);
    if (copy == NULL || cc->tls_out != NULL || h2o_socket_is_writing(sock)) {
        free(copy);
        pdr__conn_h1_reqread(sock, h2o_socket_error_closed);
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
    cc->wait_armed = 0;
    if (cc->wait == CW_BUSY && cc->wait_due == 0)
        return; /* armed for a wait that ended when the handler started */
    uint64_t now = uv_now(cc->t->loop);
    if ((cc->wait == CW_HEAD || cc->wait == CW_BODY || cc->wait == CW_IDLE) && cc->wait_due > now) {
        cc->wait_armed = cc->wait_due; /* armed for an earlier end of the wait: the rest of this one */
        uv_timer_start(&cc->timer, on_client_timer, cc->wait_due - now, 0);
        return;
    }
    if (cc->sniffing)
        pdr__conn_sniff_end(cc);
    int was = (int)cc->wait;
    size_t was_size = cc->wait_size;
    pdr__conn_update_wait(cc); /* re-arms when the connection moved on since */
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
        pdr__conn_guard_wrap(cc);
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
        pdr__conn_set_wait(cc, CW_IDLE, t->config->timeouts.keepalive_idle_ms);
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

/* Answers an HTTP/1 request whose head passes the router's limits before h2o parses it (see
 * pdr_reqguard_head_limits), that may be framed differently by another parser (reqguard.h) or that h2o's
 * own parser refuses (h2o would answer 400 and close at once, resetting a client that is still sending),
 * or whose Content-Length is above limits.max_body_bytes (413 before any of the body is read), then lets
 * h2o close the connection. h: pdr_reqguard_scan of the input. */
static int head_guard(client_conn_t *cc, h2o_socket_t *sock, const pdr_reqhead_t *h)
{
    const pdr_config_t *c = cc->t->config;
    int st = h->limit;
    const char *bad = h->bad;
    if (st == 0 && bad != NULL)
        st = 400;
    if (st == 0 && h->content_length > c->limits.max_body_bytes)
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

void pdr__conn_chunk_guard_read(h2o_socket_t *sock, const char *err)
{
    int fd = h2o_socket_get_fd(sock);
    client_conn_t *cc = fd >= 0 && (size_t)fd < pdr__conn_by_fd_len ? pdr__conn_by_fd[fd] : NULL;
    pdr__conn_tls_read_failed(cc, err);
    if (err == NULL && cc != NULL && cc->h2_state == H2G_UNDECIDED && sock->input->size > 0) {
        if (pdr__conn_is_preface_start(sock))
            pdr__conn_h2_follow(cc, 1);
        else
            cc->h2_state = H2G_HTTP1;
    }
    if (err == NULL && cc != NULL && cc->h2_state == H2G_FOLLOWING) {
        /* The HTTP/2 preface (prior knowledge): h2o switches the connection inside its HTTP/1 callback. */
        int why = pdr__conn_h2_guard_inspect(cc, sock);
        if (why != H2_PASS) {
            pdr__conn_h2_refuse(cc, sock, pdr__conn_h1_reqread, why);
            return;
        }
        pdr__conn_h1_reqread(sock, err);
        if (pdr__conn_sock_gone(cc, sock))
            return;
        if (sock->_cb.read == pdr__conn_chunk_guard_read || sock->_cb.read == pdr__conn_h1_reqread) {
            sock->_cb.read = pdr__conn_chunk_guard_read; /* still HTTP/1: the preface is not complete yet */
            cc->g_last_size = sock->input->size;
        } else if (cc->h2_state == H2G_FOLLOWING) {
            pdr__conn_h2_guard_wrap(cc, sock);
        }
        pdr__conn_update_wait(cc);
        return;
    }
    /* The head is scanned once for both guards (neither reads it while following a body). */
    size_t head = 0;
    int chunked = 0;
    if (err == NULL && cc != NULL && !cc->g_active) {
        const pdr_config_t *c = cc->t->config;
        pdr_reqhead_t h;
        pdr_reqguard_scan(sock->input->bytes, sock->input->size, (size_t)c->limits.max_headers,
                          (size_t)c->limits.max_header_bytes, &h);
        if (head_guard(cc, sock, &h))
            return;
        head = h.len;
        chunked = h.chunked;
    }
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
    pdr__conn_h1_reqread(sock, err);
    if (cc != NULL)
        cc->g_checked = NULL;
    if (cc == NULL || err != NULL || pdr__conn_sock_gone(cc, sock))
        return;
    if (sock->_cb.read == pdr__conn_h1_reqread)
        sock->_cb.read = pdr__conn_chunk_guard_read; /* h2o restarted reading inside its callback */
    cc->g_last_size = sock->input->size;
    if (cc->g_active && sock->input->size != cc->g_head_len + cc->g.data)
        cc->g_active = 0; /* h2o decoded something else than predicted: stop following */
    pdr__conn_update_wait(cc);
}

/* HTTP/1: refuses a request whose head may be framed differently by another parser (reqguard.h) with 400,
 * and closes the connection, so that nothing after it on the connection is read as a request. h2o keeps
 * the raw head at the start of the connection's input buffer until the response is over. */
int pdr__refuse_ambiguous_head(pdr_thread_t *t, h2o_req_t *req)
{
    client_conn_t *cc = pdr__conn_of(req);
    h2o_socket_t *sock = req->conn->callbacks->get_socket(req->conn);
    if (cc != NULL && sock != NULL && pdr__conn_h2_upgraded(cc, sock))
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
