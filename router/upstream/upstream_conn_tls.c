/*
 * The TLS side of an upstream connection to an https:// origin (the session itself is upstream_tls.c's):
 * the handshake on the TCP connection, the session kept for the next connections and what happens when
 * resuming it fails, and the request and response encrypted through the session.
 */
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dlist.h"
#include "err.h"
#include "h1parse.h"
#include "upstream_types.h"
#include "upstream_internal.h"
#include "upstream_tls.h"
#include "util.h"

/* ---- TLS (https:// origins; the session itself is upstream_tls.c's) ---- */

typedef struct tls_wreq {
    uv_write_t req;
    pdr_conn_t *c;
    char data[];
} tls_wreq_t;

static void on_tls_write(uv_write_t *w, int status)
{
    tls_wreq_t *q = (tls_wreq_t *)w;
    pdr_conn_t *c = q->c;
    free(q);
    if (--c->tls_writes == 0)
        c->writing = 0;
    if (status < 0 && c->state != C_CLOSING)
        c->m->up->leg_fail(c, PDR_EPEERGONE);
}

/* Writes what the session has for the worker. 0, or an error after which c must be failed. */
static int tls_flush(pdr_conn_t *c)
{
    size_t n = pdr_utls_output_len(c->tls);
    if (n == 0)
        return 0;
    tls_wreq_t *q = malloc(sizeof(*q) + n);
    if (q == NULL)
        return PDR_ENOMEM;
    n = pdr_utls_take_output(c->tls, q->data, n);
    q->c = c;
    uv_buf_t b = uv_buf_init(q->data, (unsigned)n);
    if (uv_write(&q->req, (uv_stream_t *)&c->tcp, &b, 1, on_tls_write) != 0) {
        free(q);
        return PDR_EPEERGONE;
    }
    c->tls_writes++;
    c->writing = 1;
    return 0;
}

/* Decrypts what the session holds into c->buf (made room for as on_alloc does). 1: bytes added; 0: the
 * session needs more ciphertext; -1: the leg ended here (the response ran to the close, or failed). */
int pdr__up_tls_fill(pdr_conn_t *c)
{
    if (!c->tls_ready || c->buf == NULL)
        return 0;
    if (c->start > 0) {
        memmove(c->buf, c->buf + c->start, c->len);
        c->start = 0;
    }
    if (c->filled && c->cap < READ_BUF_MAX) {
        char *nb = realloc(c->buf, 2 * c->cap);
        if (nb != NULL) {
            c->buf = nb;
            c->cap *= 2;
        }
    }
    c->filled = 0;
    if (c->len == c->cap) {
        c->m->up->leg_fail(c, PDR_EIO); /* a response head larger than the buffer can ever hold */
        return -1;
    }
    ssize_t n = pdr_utls_read(c->tls, c->buf + c->len, c->cap - c->len);
    if (n > 0) {
        c->got_byte = 1;
        c->filled = c->len + (size_t)n == c->cap;
        c->len += (size_t)n;
        return 1;
    }
    if (tls_flush(c) != 0) { /* a key update or alert the read produced */
        c->m->up->leg_fail(c, PDR_EPEERGONE);
        return -1;
    }
    if (n == 0)
        return 0;
    if (n == PDR_UTLS_EOF && pdr_h1_eof(&c->resp) == PDR_H1_DONE) {
        c->resp.keep_alive = 0;
        pdr__up_conn_complete(c);
        return -1;
    }
    if (n != PDR_UTLS_EOF && c->leg != NULL)
        snprintf(c->leg->error_detail, sizeof(c->leg->error_detail), "TLS: %s", pdr_utls_error(c->tls));
    c->m->up->leg_fail(c, n == PDR_UTLS_EOF ? PDR_EPEERGONE : PDR_EIO);
    return -1;
}

/* Keeps the connection's session for the next connections to its worker once it is resumable (TLS 1.2:
 * at the handshake's end; TLS 1.3: once a ticket came, read with the first response). */
void pdr__up_keep_session(pdr_conn_t *c)
{
    if (c->tls_saved || c->tls == NULL || c->o->tls_no_resume)
        return;
    struct ssl_session_st *s = pdr_utls_session(c->tls);
    if (s == NULL)
        return;
    pdr_origin_t *o = c->o;
    if (o->tls_session != NULL)
        SSL_SESSION_free(o->tls_session);
    o->tls_session = s;
    o->tls_session_ctx = c->m->tls_ctx;
    c->tls_saved = 1;
}

/* A handshake that offered a kept session failed. A worker that cannot resume (an OpenSSL server that
 * verifies client certificates without a session id context fails every resumption) would fail every
 * connection that offers a session: none is kept or offered for it any more, each connection makes a full
 * handshake (counted, and a warning), and the leg is sent once more on a new connection (leg_retry). */
void pdr__up_tls_resume_failed(pdr_conn_t *c, const char *why)
{
    pdr_origin_t *o = c->o;
    if (!c->tls_offered || o->tls_no_resume)
        return;
    if (o->tls_session != NULL)
        SSL_SESSION_free(o->tls_session);
    o->tls_session = NULL;
    o->tls_no_resume = 1;
    if (c->m->tls_resume_failed != NULL)
        (*c->m->tls_resume_failed)++;
    pdr_warn("upstream %s:%d: a TLS handshake that resumed a session failed (%s): this worker gets full "
             "handshakes only from now on",
             o->host, o->port, why);
}

/* Runs the handshake as far as the bytes received allow; once done, the request goes out. */
static void tls_handshake(pdr_conn_t *c)
{
    char why[sizeof(c->leg->error_detail)];
    int rc = pdr_utls_handshake(c->tls, why, sizeof(why));
    if (tls_flush(c) != 0) {
        c->m->up->leg_fail(c, PDR_EPEERGONE);
        return;
    }
    if (rc == 0) {
        pdr__up_conn_read(c);
        return;
    }
    if (rc < 0) {
        pdr_debug("upstream %s:%d: %s", c->o->host, c->o->port, why);
        pdr__up_tls_resume_failed(c, why);
        memcpy(c->leg->error_detail, why, sizeof(why));
        c->m->up->leg_fail(c, PDR_ECONNREFUSED); /* counted as the connect failure it is */
        return;
    }
    c->tls_ready = 1;
    uint64_t *n = pdr_utls_resumed(c->tls) ? c->m->tls_resumed : c->m->tls_full;
    if (n != NULL)
        (*n)++;
    pdr__up_keep_session(c);
    pdr__up_conn_send(c);
}

/* The TCP connection is up: the session starts (its ClientHello goes out). The connect deadline still
 * runs, so a worker that never completes the handshake fails like one that never accepts. */
void pdr__up_tls_start(pdr_conn_t *c)
{
    pdr_multi_t *m = c->m;
    if (m->tls_ctx == NULL) {
        snprintf(c->leg->error_detail, sizeof(c->leg->error_detail), "https:// workers need workers.tls");
        c->m->up->leg_fail(c, PDR_ECONNREFUSED);
        return;
    }
    c->tls = pdr_utls_new(m->tls_ctx, c->o->host, m->tls_server_name, m->tls_verify);
    if (c->tls == NULL) {
        c->m->up->leg_fail(c, PDR_ENOMEM);
        return;
    }
    c->tls_saved = 0;
    c->tls_offered = c->o->tls_session != NULL && c->o->tls_session_ctx == m->tls_ctx;
    if (c->tls_offered)
        pdr_utls_offer(c->tls, c->o->tls_session);
    tls_handshake(c);
}

/* Ciphertext arrived on a connection carrying a leg. */
void pdr__up_tls_input(pdr_conn_t *c, const char *p, size_t n)
{
    if (pdr_utls_feed(c->tls, p, n) != 0) {
        c->m->up->leg_fail(c, PDR_ENOMEM);
        return;
    }
    if (!c->tls_ready) {
        tls_handshake(c);
        return;
    }
    pdr__up_conn_dispatch(c); /* needs more at once when nothing is buffered: pdr__up_tls_fill decrypts */
}
/* pdr__up_conn_send for a TLS connection: the head and body are encrypted and written in one go. */
void pdr__up_tls_send(pdr_conn_t *c)
{
    pdr_leg_t *leg = c->leg;
    if (pdr__up_send_begin(c) != 0)
        return;
    if (pdr_utls_write(c->tls, leg->head, leg->head_len) != 0 ||
        pdr_utls_write(c->tls, leg->body, leg->body_len) != 0) {
        c->m->up->leg_fail(c, PDR_EIO);
        return;
    }
    int rc = tls_flush(c);
    if (rc != 0) {
        c->m->up->leg_fail(c, rc);
        return;
    }
    pdr__up_arm_total(c);
    pdr__up_conn_read(c);
}
