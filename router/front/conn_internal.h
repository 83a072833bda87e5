/*
 * The client connection, shared by the files that serve it, bottom up: conn_h2.c (the HTTP/2 frame and
 * body guards, the body budget and its eviction), conn_ng2*.c (HTTP/2 on libnghttp2, h2_nghttp2), conn_h1.c
 * (HTTP/1: its start, the client timeouts, lingering close, the chunked body and head guards, h2c) and
 * conn.c (the accept, the map from a descriptor to its connection, the close, TLS, the first bytes'
 * sniff). Each calls only the files before it; what all of them read (the map, a TLS read that failed,
 * the idle list) is inline here. Nothing outside these files includes it.
 */
#ifndef PDR_CONN_INTERNAL_H
#define PDR_CONN_INTERNAL_H
#include <stddef.h>
#include <stdint.h>
#include "reqguard.h"
#include "router.h"

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
    int sniffing; /* h2_nghttp2: the first bytes will say HTTP/2 (conn_ng2.c) or HTTP/1 (h2o) */
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
    size_t wait_size;    /* the input buffer's size when the wait (re)started */
    uint64_t wait_due;   /* the loop time (uv_now) the wait ends, 0 while busy (pdr__conn_set_wait) */
    uint64_t wait_armed; /* the loop time the timer is armed for with on_client_timer, 0 when it is not */
    int served;          /* a response was completed on it */
    uint64_t linger_bytes, linger_until; /* lingering close: bytes dropped, and until when (linger_start) */
    int counted;                         /* a data-port connection (r->client_conns) */
    pdr_dlink_t idle;                    /* on t->idle_conns while CW_IDLE */
} client_conn_t;

/* Why the HTTP/2 guard refuses a connection (pdr__conn_h2_guard_inspect). */
enum { H2_PASS = 0, H2_BLOCK_TOO_BIG, H2_CONTROL_FLOOD, H2_OVER_BUDGET, H2_BODY_STALLED };

/* conn.c's map from a descriptor to its connection (written by the loop that owns the descriptor), and
 * what every file reads through it. */
extern client_conn_t **pdr__conn_by_fd;
extern size_t pdr__conn_by_fd_len;

/* The connection a request came on (NULL when unknown), through the descriptor's slot. */
static inline client_conn_t *pdr__conn_of(h2o_req_t *req)
{
    h2o_socket_t *sock = req->conn->callbacks->get_socket(req->conn);
    if (sock == NULL)
        return NULL;
    int fd = h2o_socket_get_fd(sock);
    return fd >= 0 && (size_t)fd < pdr__conn_by_fd_len ? pdr__conn_by_fd[fd] : NULL;
}

/* A read of a TLS connection failed: the peer is gone, so it is closed without a close_notify (conn.c,
 * "TLS connections whose peer is gone"). */
static inline void pdr__conn_tls_read_failed(client_conn_t *cc, const char *err)
{
    if (cc == NULL || err == NULL || !cc->tls)
        return;
    cc->t->m.tls_peer_gone_total++;
    if (cc->ssl != NULL)
        SSL_set_quiet_shutdown(cc->ssl, 1);
}

/* The connection is no longer idle: off its loop's list of idle keep-alive connections. */
static inline void pdr__conn_idle_leave(client_conn_t *cc)
{
    if (pdr_dlink_linked(&cc->idle)) {
        pdr_dqueue_unlink(&cc->t->idle_conns, &cc->idle);
        cc->t->n_idle--;
    }
}

/* conn_h1.c */
extern h2o_socket_cb pdr__conn_h1_reqread;
/* HTTP/1 after the router read the connection's first bytes itself (the TLS handshake, or the look for
 * the HTTP/2 preface). */
void pdr__conn_start_http1(client_conn_t *cc, h2o_socket_t *sock);
/* The first bytes did not come within timeouts.client_header_ms: HTTP/1 takes the connection, to answer. */
void pdr__conn_sniff_end(client_conn_t *cc);
void pdr__conn_guard_wrap(client_conn_t *cc);
void pdr__conn_set_wait(client_conn_t *cc, int wait, int ms);
void pdr__conn_update_wait(client_conn_t *cc);
void pdr__conn_chunk_guard_read(h2o_socket_t *sock, const char *err);

/* conn_ng2.c */
int pdr__conn_ng2_init(void);
int pdr__conn_ng2_accept(client_conn_t *cc, h2o_socket_t *sock);

/* conn_h2.c */
int pdr__conn_sock_gone(client_conn_t *cc, const h2o_socket_t *sock);
int pdr__conn_h2_send_goaway(uv_tcp_t *tcp, int fd, int settings_first, uint32_t last_stream,
                             const char *debug);
void pdr__conn_h2_follow(client_conn_t *cc, int body_limit);
int pdr__conn_h2_guard_inspect(client_conn_t *cc, h2o_socket_t *sock);
void pdr__conn_h2_refuse(client_conn_t *cc, h2o_socket_t *sock, h2o_socket_cb next, int why);
void pdr__conn_h2_guard_wrap(client_conn_t *cc, h2o_socket_t *sock);
int pdr__conn_is_preface_start(const h2o_socket_t *sock);
int pdr__conn_h2_upgraded(client_conn_t *cc, h2o_socket_t *sock);

#endif
