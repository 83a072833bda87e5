/*
 * A connection of the upstream HTTP/1.1 client (see upstream.c for its states): made (DNS, connect), its
 * deadlines (acted on after the loop's poll), the request written with one writev, the response read
 * into its buffer and handed to the leg, and the connection pooled or closed when the response ends.
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

/* ---- connections ---- */

static void due_unlink(pdr_conn_t *c)
{
    pdr_dlink_unlink(&c->due);
}

/* The multi is gone once its connections and its check handle have closed: the kick timer's close frees
 * it (libuv runs close callbacks in no set order, so they are chained). */
void pdr__up_maybe_close_kick(pdr_multi_t *m)
{
    if (m->closing == 1 && m->open_conns == 0 && m->due_closed == 2) {
        m->closing = 2;
        uv_close((uv_handle_t *)&m->kick, m->up->multi_closed);
    }
}

/* A read buffer of cap bytes a connection no longer needs: kept for the next leg when it has the
 * smallest size and there is room among the spares, else freed. */
static void buf_release(pdr_multi_t *m, char *buf, size_t cap)
{
    if (buf != NULL && cap == READ_BUF_MIN && m->n_spare < SPARE_BUFS)
        m->spare[m->n_spare++] = buf;
    else
        free(buf);
}

static void on_handle_closed(uv_handle_t *h)
{
    pdr_conn_t *c = h->data;
    if (h == (uv_handle_t *)&c->tcp)
        c->tcp_open = 0;
    else
        c->timer_open = 0;
    if (c->tcp_open || c->timer_open || c->gai_pending)
        return;
    pdr_multi_t *m = c->m;
    due_unlink(c);
    pdr_utls_free(c->tls);
    buf_release(m, c->buf, c->cap);
    free(c);
    m->open_conns--;
    pdr__up_maybe_close_kick(m);
}

void pdr__up_idle_remove(pdr_conn_t *c)
{
    if (pdr_dlink_linked(&c->idle_link)) {
        pdr_dlink_unlink(&c->idle_link);
        c->o->n_idle--;
    }
}

/* A connect ended (made, failed or abandoned): the slot goes to a waiting leg. */
static void connect_ended(pdr_conn_t *c)
{
    if (!c->counted)
        return;
    c->counted = 0;
    c->o->connecting--;
    c->m->up->origin_kick(c->o);
}

void pdr__up_conn_close(pdr_conn_t *c)
{
    if (c->state == C_CLOSING)
        return;
    if (c->state == C_IDLE)
        pdr__up_idle_remove(c);
    c->state = C_CLOSING;
    c->leg = NULL;
    due_unlink(c);
    c->o->open--;     /* room under the per-worker limit ... */
    connect_ended(c); /* ... and maybe a connect slot: either can serve a waiting leg */
    c->m->up->origin_kick(c->o);
    if (c->gai_pending)
        uv_cancel((uv_req_t *)c->gai);
    if (c->timer_open) {
        uv_timer_stop(&c->timer);
        uv_close((uv_handle_t *)&c->timer, on_handle_closed);
    }
    if (c->tcp_open)
        uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
}

pdr_conn_t *pdr__up_conn_new(pdr_multi_t *m, pdr_origin_t *o)
{
    pdr_conn_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->m = m;
    c->o = o;
    uv_timer_init(m->loop, &c->timer);
    c->timer.data = c;
    c->timer_open = 1;
    c->tcp.data = c;
    m->open_conns++;
    if (++o->open > m->open_peak)
        m->open_peak = o->open;
    return c;
}

static void on_conn_timer(uv_timer_t *t);

/* Sets the connection's deadline ms from now (idle: a pooled connection's, else a connect's or a leg's
 * total; 0 ms: none). A request on a pooled connection moves its deadline twice (the leg's, then the
 * idle time's): the timer is started only when the new deadline comes before the one it is armed for. */
static void conn_deadline(pdr_conn_t *c, uint64_t ms, int idle)
{
    if (ms == 0 && !idle) {
        c->deadline_ms = 0;
        return;
    }
    uint64_t now = uv_now(c->m->loop), d = now + ms;
    c->deadline_ms = d;
    c->deadline_idle = idle;
    if (c->timer_due_ms != 0 && c->timer_due_ms <= d)
        return;
    c->timer_due_ms = d;
    uv_timer_start(&c->timer, on_conn_timer, ms, 0);
}

static void conn_due(pdr_conn_t *c);

static void on_conn_timer(uv_timer_t *t)
{
    pdr_conn_t *c = t->data;
    uint64_t now = uv_now(c->m->loop);
    c->timer_due_ms = 0;
    if (c->deadline_ms == 0)
        return;
    if (now < c->deadline_ms) {
        c->timer_due_ms = c->deadline_ms;
        uv_timer_start(&c->timer, on_conn_timer, c->deadline_ms - now, 0);
        return;
    }
    c->deadline_ms = 0;
    if (c->deadline_idle) {
        /* A pooled connection nobody used for IDLE_MAX_MS: a worker that vanished without a FIN would
         * otherwise leave it to be found dead by the next request. */
        pdr__up_conn_close(c);
        return;
    }
    conn_due(c); /* a connect that did not finish in time (the worker is unreachable), or a leg's total */
}

/* How long a connect may take: timeouts.connect_ms, cut to the leg's total deadline. */
static long connect_ms(const pdr_leg_t *leg)
{
    long ms = leg->connect_timeout_ms > 0 ? leg->connect_timeout_ms : 1000;
    if (leg->total_timeout_ms > 0 && leg->total_timeout_ms < ms)
        ms = leg->total_timeout_ms;
    return ms;
}

/* A connect or total deadline passed. It is acted on after the loop's next poll (in the check phase of
 * this same loop pass), not now: when the loop runs late (a burst of work, a flood), the answer or the
 * completed connect may already be waiting in the socket, and the router's own lag must not eject a
 * healthy worker. What the poll completes leaves the list (due_unlink); the rest fail. */
static void on_due_check(uv_check_t *h)
{
    pdr_multi_t *m = h->data;
    uv_check_stop(h);
    uv_idle_stop(&m->due_idle);
    while (m->due != NULL) {
        pdr_conn_t *c = PDR_DLINK_ITEM(m->due, pdr_conn_t, due);
        due_unlink(c);
        if (c->state == C_CONNECTING || c->state == C_RESOLVING) {
            /* The worker is unreachable: a connect error (cause "connect"), not an answer that came late. */
            if (c->leg != NULL && c->state == C_RESOLVING)
                snprintf(c->leg->error_detail, sizeof(c->leg->error_detail),
                         "DNS lookup timed out: no address for host '%.100s' within %ld ms", c->o->host,
                         connect_ms(c->leg));
            else if (c->leg != NULL)
                snprintf(c->leg->error_detail, sizeof(c->leg->error_detail),
                         "connect timed out: no connection within %ld ms", connect_ms(c->leg));
            c->m->up->leg_fail(c, PDR_ECONNREFUSED);
        } else if (c->state == C_BUSY && c->leg != NULL) {
            c->m->up->leg_fail(c, PDR_ETIMEDOUT);
        }
    }
}

static void on_due_idle(uv_idle_t *h)
{
    (void)h; /* an active idle handle only makes the loop poll without blocking */
}

static void conn_due(pdr_conn_t *c)
{
    pdr_multi_t *m = c->m;
    if (pdr_dlink_linked(&c->due))
        return;
    pdr_dlink_push(&m->due, &c->due);
    uv_check_start(&m->due_check, on_due_check);
    uv_idle_start(&m->due_idle, on_due_idle);
}

/* The leg's total deadline, from its start, when it has one. */
void pdr__up_arm_total(pdr_conn_t *c)
{
    pdr_leg_t *leg = c->leg;
    if (leg == NULL || leg->total_timeout_ms <= 0) {
        conn_deadline(c, 0, 0);
        return;
    }
    uint64_t spent = (pdr_now_ns() - leg->started_ns) / 1000000u;
    uint64_t total = (uint64_t)leg->total_timeout_ms;
    if (total <= spent) {
        /* Due now: on the timer's next run, as a timer of 0 ms would be. */
        c->deadline_ms = uv_now(c->m->loop);
        c->deadline_idle = 0;
        c->timer_due_ms = c->deadline_ms;
        uv_timer_start(&c->timer, on_conn_timer, 0, 0);
        return;
    }
    conn_deadline(c, total - spent, 0);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    pdr_conn_t *c = h->data;
    (void)hint;
    if (c->tls != NULL) {
        /* Ciphertext: fed to the session at once; plaintext is decrypted into c->buf (pdr__up_tls_fill). */
        *b = uv_buf_init(c->m->tls_in, sizeof(c->m->tls_in));
        return;
    }
    if (c->buf == NULL) {
        /* Idle: whatever comes (a close, stray bytes) ends the connection; no buffer of its own. */
        *b = uv_buf_init(c->m->scratch, sizeof(c->m->scratch));
        return;
    }
    if (c->start > 0 && c->pend == NULL) {
        memmove(c->buf, c->buf + c->start, c->len);
        c->start = 0;
    }
    if (c->filled && c->cap < READ_BUF_MAX && c->pend == NULL) {
        char *nb = realloc(c->buf, 2 * c->cap);
        if (nb != NULL) {
            c->buf = nb;
            c->cap *= 2;
        }
    }
    c->filled = 0;
    size_t used = c->start + c->len;
    *b = uv_buf_init(c->buf + used, (unsigned)(c->cap - used));
}

/* A response ended: the leg is done; the connection goes back to the pool when it can carry another. */
void pdr__up_conn_complete(pdr_conn_t *c)
{
    pdr_leg_t *leg = c->leg;
    pdr_multi_t *m = c->m;
    int reusable =
        c->resp.keep_alive && !c->writing && c->len == 0 && (c->tls == NULL || !pdr_utls_has_input(c->tls)) &&
        !m->closing && c->o->n_idle < m->max_idle &&
        (m->conn_limit == 0 || c->o->open <= m->conn_limit); /* a probe's extra connection is not kept */
    c->leg = NULL;
    leg->conn = NULL;
    due_unlink(c);
    if (c->tls != NULL)
        m->up->tls_keep_session(c);
    if (reusable) {
        c->state = C_IDLE;
        c->reused = 1;
        c->start = 0;
        buf_release(m, c->buf, c->cap); /* idle connections hold no buffer: memory follows requests */
        c->buf = NULL;
        conn_deadline(c, IDLE_MAX_MS, 1);
        pdr_dlink_push(&c->o->idle, &c->idle_link);
        c->o->n_idle++;
    } else {
        pdr__up_conn_close(c);
    }
    m->up->leg_unlink(leg);
    if (reusable)
        c->m->up->origin_kick(c->o); /* a waiting leg takes the connection just pooled */
    leg->cbs->on_done(leg, 0);
}

/* Parses what is buffered and hands it to the leg until the buffer is empty, the owner pauses, or the
 * response ends. */
void pdr__up_conn_dispatch(pdr_conn_t *c)
{
    pdr_leg_t *leg = c->leg;
    while (leg != NULL && c->leg == leg) {
        if (c->pend != NULL) {
            const char *p = c->pend;
            size_t n = c->pend_len;
            size_t r = leg->cbs->on_data(leg, p, n);
            if (c->leg != leg)
                return; /* cancelled from the callback */
            if (r == PDR_LEG_PAUSE) {
                leg->paused = 1;
                if (c->reading) {
                    uv_read_stop((uv_stream_t *)&c->tcp);
                    c->reading = 0;
                }
                return;
            }
            c->pend = NULL;
            c->pend_len = 0;
            if (r != n) {
                c->m->up->leg_finish(leg, PDR_ECANCELED);
                return;
            }
            leg->bytes_in += n;
            continue;
        }
        size_t used = 0;
        const char *body = NULL;
        size_t blen = 0;
        int ev = pdr_h1_next(&c->resp, c->buf + c->start, c->len, &used, &body, &blen);
        c->start += used;
        c->len -= used;
        switch (ev) {
        case PDR_H1_HEADERS:
            leg->status = c->resp.status;
            leg->content_length = c->resp.content_length;
            memcpy(leg->content_type, c->resp.content_type, sizeof(leg->content_type) - 1);
            leg->content_type[sizeof(leg->content_type) - 1] = '\0';
            leg->got_headers = 1;
            leg->first_byte_ns = pdr_now_ns();
            break;
        case PDR_H1_BODY:
            c->pend = body;
            c->pend_len = blen;
            break;
        case PDR_H1_DONE:
            pdr__up_conn_complete(c);
            return;
        case PDR_H1_ERROR:
            pdr_debug("upstream %s:%d: bad response: %s", c->o->host, c->o->port, c->resp.error);
            c->m->up->leg_finish(leg, PDR_EIO);
            return;
        default: /* NEED_MORE: read on (again, after a pause) */
            if (c->tls != NULL) {
                int f = c->m->up->tls_fill(c); /* plaintext the session holds already comes first */
                if (f > 0)
                    continue;
                if (f < 0)
                    return;
            }
            pdr__up_conn_read(c);
            return;
        }
    }
}

/* The start of a send on c, plain or TLS: its read buffer, and the answer's parser reset. 0, or -1 when
 * the buffer cannot be had (the leg has failed). */
int pdr__up_send_begin(pdr_conn_t *c)
{
    if (c->buf == NULL) {
        pdr_multi_t *m = c->m;
        if (m->n_spare > 0) {
            c->buf = m->spare[--m->n_spare];
        } else if ((c->buf = malloc(READ_BUF_MIN)) != NULL) {
            m->buf_allocs++;
        } else {
            c->m->up->leg_fail(c, PDR_ENOMEM);
            return -1;
        }
        c->cap = READ_BUF_MIN;
        c->filled = 0;
    }
    c->state = C_BUSY;
    c->got_byte = 0;
    c->start = c->len = 0;
    c->pend = NULL;
    pdr_h1_init(&c->resp);
    return 0;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b)
{
    pdr_conn_t *c = s->data;
    (void)b;
    if (nread == 0)
        return;
    if (c->tls != NULL && nread > 0 && c->state != C_IDLE && c->leg != NULL) {
        c->m->up->tls_input(c, b->base, (size_t)nread);
        return;
    }
    if (c->tls != NULL && nread < 0 && !c->tls_ready && c->leg != NULL) {
        snprintf(c->leg->error_detail, sizeof(c->leg->error_detail),
                 "TLS handshake with the worker failed: it closed the connection (does it serve https?)");
        c->m->up->tls_resume_failed(c, "the worker closed the connection");
        c->m->up->leg_fail(c, PDR_ECONNREFUSED);
        return;
    }
    if (c->tls != NULL && nread < 0 && !c->reused && !c->got_byte && c->leg != NULL)
        snprintf(c->leg->error_detail, sizeof(c->leg->error_detail),
                 "TLS: the worker closed the connection after the handshake without answering (a worker that "
                 "requires a client certificate does this: workers.tls.cert_file)");
    if (c->state == C_IDLE || c->leg == NULL) {
        /* The worker closed a pooled connection, or sent bytes nobody asked for: drop it. */
        pdr__up_conn_close(c);
        return;
    }
    if (nread < 0) {
        if (nread == UV_EOF && pdr_h1_eof(&c->resp) == PDR_H1_DONE) {
            /* The body ran until the close, which ends it. */
            c->resp.keep_alive = 0;
            pdr__up_conn_complete(c);
            return;
        }
        c->m->up->leg_fail(c, PDR_EPEERGONE);
        return;
    }
    c->got_byte = 1;
    c->filled = c->start + c->len + (size_t)nread == c->cap;
    c->len += (size_t)nread;
    pdr__up_conn_dispatch(c);
}

void pdr__up_conn_read(pdr_conn_t *c)
{
    if (c->reading || c->state == C_CLOSING)
        return;
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0)
        c->reading = 1;
}

static void on_write(uv_write_t *w, int status)
{
    pdr_conn_t *c = w->data;
    c->writing = 0;
    if (status < 0 && c->state != C_CLOSING)
        c->m->up->leg_fail(c, PDR_EPEERGONE);
}

/* Sends the leg's request on a connected c. */
void pdr__up_conn_send(pdr_conn_t *c)
{
    if (c->tls != NULL) {
        c->m->up->tls_send(c);
        return;
    }
    pdr_leg_t *leg = c->leg;
    if (pdr__up_send_begin(c) != 0)
        return;
    uv_buf_t bufs[2] = {uv_buf_init(leg->head, (unsigned)leg->head_len),
                        uv_buf_init((char *)(uintptr_t)leg->body, (unsigned)leg->body_len)};
    unsigned nbufs = leg->body_len > 0 ? 2 : 1;
    /* Written at once in the common case: uv_write would also re-arm the socket's poll watcher (one
     * epoll_ctl per request); only what the socket does not take now goes through a write request. */
    int w = uv_try_write((uv_stream_t *)&c->tcp, bufs, nbufs);
    if (w < 0 && w != UV_EAGAIN) {
        c->m->up->leg_fail(c, PDR_EPEERGONE);
        return;
    }
    size_t done = w > 0 ? (size_t)w : 0;
    uv_buf_t *rest = bufs;
    while (nbufs > 0 && done >= rest->len) {
        done -= rest->len;
        rest++;
        nbufs--;
    }
    if (nbufs > 0) {
        rest->base += done;
        rest->len -= done;
        c->wreq.data = c;
        int rc = uv_write(&c->wreq, (uv_stream_t *)&c->tcp, rest, nbufs, on_write);
        if (rc != 0) {
            c->m->up->leg_fail(c, PDR_EPEERGONE);
            return;
        }
        c->writing = 1;
    }
    pdr__up_arm_total(c);
    pdr__up_conn_read(c);
}

static void on_connect(uv_connect_t *req, int status)
{
    pdr_conn_t *c = req->data;
    if (c->state == C_CLOSING)
        return;
    due_unlink(c);
    connect_ended(c);
    if (status < 0) {
        if (status == UV_ETIMEDOUT && c->leg != NULL) /* the kernel gave up on the handshake */
            snprintf(c->leg->error_detail, sizeof(c->leg->error_detail), "connect timed out (%s)",
                     uv_strerror(status));
        c->m->up->leg_fail(c, PDR_ECONNREFUSED);
        return;
    }
    if (c->leg == NULL) {
        pdr__up_conn_close(c);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    uv_tcp_keepalive(&c->tcp, 1, 30); /* a worker host that disappears is noticed on idle connections too */
    if (c->o->tls) {
        c->m->up->tls_start(c);
        return;
    }
    pdr__up_conn_send(c);
}

void pdr__up_conn_connect(pdr_conn_t *c)
{
    pdr_origin_t *o = c->o;
    c->state = C_CONNECTING;
    if (uv_tcp_init(c->m->loop, &c->tcp) != 0) {
        c->m->up->leg_fail(c, PDR_EIO);
        return;
    }
    c->tcp_open = 1;
    c->creq.data = c;
    int rc = uv_tcp_connect(&c->creq, &c->tcp, (const struct sockaddr *)&o->addr, on_connect);
    if (rc != 0) {
        /* libuv makes the socket here: out of descriptors or memory is the router's own failure, and must
         * not be taken for a worker that refuses connections. */
        int local = rc == UV_EMFILE || rc == UV_ENFILE || rc == UV_ENOBUFS || rc == UV_ENOMEM;
        c->m->up->leg_fail(c, local ? PDR_ENOMEM : PDR_ECONNREFUSED);
        return;
    }
    conn_deadline(c, (uint64_t)connect_ms(c->leg), 0);
}

/* A leg whose worker's host name did not resolve: the reason its error names. */
void pdr__up_dns_failed(pdr_leg_t *leg, const char *host, const char *why)
{
    snprintf(leg->error_detail, sizeof(leg->error_detail),
             "DNS lookup failed: cannot resolve host '%.100s' (%s)", host, why);
}

void pdr__up_on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    pdr_conn_t *c = req->data;
    c->gai_pending = 0;
    free(c->gai);
    c->gai = NULL;
    pdr_origin_t *o = c->o;
    if (status == 0 && res != NULL) {
        memcpy(&o->addr, res->ai_addr, res->ai_addrlen);
        if (o->addr.ss_family == AF_INET)
            ((struct sockaddr_in *)&o->addr)->sin_port = htons((uint16_t)o->port);
        else
            ((struct sockaddr_in6 *)&o->addr)->sin6_port = htons((uint16_t)o->port);
        o->have_addr = 1;
        o->addr_ms = pdr_now_ms();
    }
    if (res != NULL)
        uv_freeaddrinfo(res);
    if (c->state == C_CLOSING) {
        if (!c->tcp_open && !c->timer_open) {
            on_handle_closed((uv_handle_t *)&c->timer); /* frees c */
        }
        return;
    }
    if (status != 0 || !o->have_addr) {
        /* Counted as the connect failure it is (the worker cannot be reached), named for what it is: a
         * "connection refused" would send the operator to the worker instead of the name. */
        pdr_debug("upstream: cannot resolve %s: %s", o->host, uv_strerror(status));
        if (c->leg != NULL)
            pdr__up_dns_failed(c->leg, o->host, status != 0 ? uv_strerror(status) : "no address");
        c->m->up->leg_fail(c, PDR_ECONNREFUSED);
        return;
    }
    pdr__up_conn_connect(c);
}
