/*
 * Client connections over HTTP/2 (the connection's own loop): the frame guard in front of h2o's read
 * callback (header blocks, control-frame floods), the request bodies each connection holds and how long
 * they may pause, and the eviction of the biggest bodies when the router's body budget is spent.
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
int pdr__conn_sock_gone(client_conn_t *cc, const h2o_socket_t *sock)
{
    return sock->input == NULL || uv_is_closing((uv_handle_t *)&cc->tcp);
}

static h2o_socket_cb h2_read; /* h2o's HTTP/2 read callback, learned at the first switch */

#define H2_ENHANCE_YOUR_CALM 0xb

/* Writes a GOAWAY straight to the socket when nothing of h2o's is waiting to be written (so it lands
 * between frames). settings_first: h2o has not sent its SETTINGS yet (the client expects them first).
 * Returns 1 when written. */
int pdr__conn_h2_send_goaway(uv_tcp_t *tcp, int fd, int settings_first, uint32_t last_stream,
                             const char *debug)
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
int pdr__conn_h2_guard_inspect(client_conn_t *cc, h2o_socket_t *sock)
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

void pdr__conn_h2_follow(client_conn_t *cc, int body_limit)
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

void pdr__conn_h2_refuse(client_conn_t *cc, h2o_socket_t *sock, h2o_socket_cb next, int why)
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
        pdr__conn_h2_send_goaway(&cc->tcp, cc->fd, next != h2_read, cc->h2g.last_stream, debug);
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
        pdr__conn_h2_refuse(cc, sock, h2_read, why);
        return -1;
    }
    uint8_t rst[13] = {0,          0, 4, 0x3, 0,  (uint8_t)(s >> 24), (uint8_t)(s >> 16), (uint8_t)(s >> 8),
                       (uint8_t)s, 0, 0, 0,   0x8};
    ssize_t w = send(cc->fd, rst, sizeof(rst), MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)w;
    h2o_iovec_t room = h2o_buffer_reserve(&sock->input, sizeof(rst));
    if (room.base == NULL) {
        pdr__conn_h2_refuse(cc, sock, h2_read, why);
        return -1;
    }
    memcpy(room.base, rst, sizeof(rst));
    sock->input->size += sizeof(rst);
    h2_read(sock, NULL);
    if (pdr__conn_sock_gone(cc, sock))
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
 * A refusal for limits.max_body_memory_bytes (pdr__conn_h2_guard_inspect) runs this after the read: the loop
 * resets the biggest bodies still arriving on its connections, one at a time, until the bodies held by the
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
    client_conn_t *cc = fd >= 0 && (size_t)fd < pdr__conn_by_fd_len ? pdr__conn_by_fd[fd] : NULL;
    int why;
    pdr__conn_tls_read_failed(cc, err);
    if (err == NULL && cc != NULL && cc->h2_fresh) {
        /* Upgraded from HTTP/1: h2o may have parsed bytes sent with the upgrade request already; what it
         * left starts at a frame, or at the part of the preface still missing. */
        cc->h2_fresh = 0;
        if (!pdr__conn_is_preface_start(sock))
            cc->h2g.preface_left = 0;
    }
    if (err == NULL && cc != NULL && cc->h2_state == H2G_FOLLOWING &&
        (why = pdr__conn_h2_guard_inspect(cc, sock)) != 0) {
        pdr__conn_h2_refuse(cc, sock, h2_read, why);
        return;
    }
    h2_read(sock, err);
    if (cc != NULL && err == NULL && !pdr__conn_sock_gone(cc, sock))
        cc->g_last_size = sock->input->size;
}

/* After h2o's HTTP/1 callback switched the connection to HTTP/2: its HTTP/2 callback receives the guard. */
void pdr__conn_h2_guard_wrap(client_conn_t *cc, h2o_socket_t *sock)
{
    h2o_socket_cb cb = sock->_cb.read;
    if (pdr__conn_sock_gone(cc, sock) || cb == NULL || cb == pdr__conn_h1_reqread ||
        cb == pdr__conn_chunk_guard_read || cb == h2_guard_read) {
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
    pdr__conn_idle_leave(cc);
    cc->wait = CW_H2;
    uint64_t period = (uint64_t)cc->t->config->timeouts.client_body_ms / 4 + 1;
    cc->wait_armed = 0;
    uv_timer_start(&cc->timer, on_h2_body_timer, period, period);
}

int pdr__conn_is_preface_start(const h2o_socket_t *sock)
{
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    size_t n = sock->input->size < sizeof(preface) - 1 ? sock->input->size : sizeof(preface) - 1;
    return n > 0 && memcmp(sock->input->bytes, preface, n) == 0;
}
/* An HTTP/1 connection that h2o switched to HTTP/2 (Upgrade: h2c), seen from the upgraded request's
 * handler, which h2o runs once it reads the connection with its HTTP/2 callback: the frame guard and the
 * control-frame bucket follow it from here, as they follow a connection that opened with the preface.
 * 1 when it was one. */
int pdr__conn_h2_upgraded(client_conn_t *cc, h2o_socket_t *sock)
{
    h2o_socket_cb cb = sock->_cb.read;
    if (cc->h2_state != H2G_HTTP1 || cc->tls || cb == NULL || cb == pdr__conn_h1_reqread ||
        cb == pdr__conn_chunk_guard_read || cb == h2_guard_read)
        return 0;
    pdr__conn_idle_leave(cc);
    cc->wait = CW_OFF; /* h2o's HTTP/2 idle timeout governs from here */
    uv_timer_stop(&cc->timer);
    pdr__conn_h2_follow(cc, 1);
    cc->h2_fresh = 1;
    pdr__conn_h2_guard_wrap(cc, sock);
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
    client_conn_t *cc = pdr__conn_of(req);
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
