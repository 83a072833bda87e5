/*
 * The upstream HTTP/1.1 client (see upstream.h): keep-alive connections per origin on the loop, the
 * request written with one writev (head + body), the response parsed in place by h1parse.c and body
 * bytes handed to the owner straight from the read buffer.
 *
 * Why not libcurl (which the router used first): on the PD path curl took 27.5% of the router's CPU and
 * glibc another 16% mostly on its behalf (perf, one loop at c=32), plus four poll() calls per request
 * (its liveness check of a reused connection) and epoll_ctl churn from the socket callbacks. Here a
 * pooled connection keeps its read watcher, so a worker's close is seen when it happens and reuse costs
 * no syscall; a request is one writev and the response usually one read.
 *
 * Connection states: RESOLVING (uv_getaddrinfo for a host name; cached per origin for DNS_TTL_MS),
 * CONNECTING, BUSY (carries a leg), IDLE (in its origin's pool), CLOSING. A connection is freed when
 * its two handles (tcp, timer) have closed. A leg points at its connection and the connection at the
 * leg; cancelling a leg closes the connection, so the worker sees the abort.
 *
 * Re-entrancy: the owner's callbacks may start and cancel legs, including the current one. After each
 * callback the code checks that the connection still carries the same leg before touching either.
 */
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dlist.h"
#include "err.h"
#include "h1parse.h"
#include "upstream.h"
#include "upstream_tls.h"
#include "util.h"

#define READ_BUF_MIN 1024        /* per connection carrying a leg (idle ones share IDLE_BUF)... */
#define READ_BUF_MAX (64 * 1024) /* ...doubled up to this while reads fill it (large answers) */
#define IDLE_BUF 512
#define SPARE_BUFS 64 /* READ_BUF_MIN buffers a loop keeps for its next legs: 64 KiB at most */
#define DNS_TTL_MS 10000
#define HEAD_MAX (512 * 1024) /* a request head to a worker: forwarded client headers are at most 256 KiB */
#define IDLE_MAX_MS 60000     /* a pooled connection unused this long is closed */
#define CONNECTING_MAX 64     /* connects in progress per origin and loop; more requests wait for one */

enum { C_RESOLVING = 0, C_CONNECTING, C_BUSY, C_IDLE, C_CLOSING };

typedef struct pdr_conn {
    uv_tcp_t tcp;
    uv_timer_t timer; /* connect deadline, then the leg's total deadline */
    uv_connect_t creq;
    uv_write_t wreq;
    uv_getaddrinfo_t *gai; /* while resolving */
    pdr_multi_t *m;
    struct pdr_origin *o;
    pdr_leg_t *leg;
    int state;
    int tcp_open, timer_open, gai_pending;
    int counted;  /* counted in its origin's `connecting` */
    int reused;   /* the current leg went out on a connection that had served before */
    int got_byte; /* a response byte came for the current leg */
    int writing;  /* the request is being written */
    int reading;
    pdr_h1resp_t resp;
    char *buf;
    size_t cap;
    size_t start, len; /* unparsed bytes: buf[start, start + len) */
    int filled;        /* the last read filled the buffer */
    const char *pend;  /* a body span the owner paused on */
    size_t pend_len;
    pdr_dlink_t idle_link; /* on its origin's idle list */
    pdr_dlink_t due;       /* on the multi's list of deadlines to act on after a poll */
    pdr_utls_t *tls;       /* https:// origins: the session (upstream_tls.c), from the TCP connect on */
    int tls_ready;         /* its handshake completed */
    int tls_writes;        /* ciphertext writes in flight */
    int tls_saved;         /* its session was kept for resumption (origin tls_session) */
    int tls_offered;       /* its handshake offered the origin's kept session */
} pdr_conn_t;

typedef struct pdr_origin {
    pdr_dlink_t link; /* on the multi's origins */
    pdr_multi_t *m;
    char host[256];      /* as in the URL, IPv6 without brackets */
    char authority[272]; /* the Host header */
    int port;
    int tls; /* https:// */
    struct sockaddr_storage addr;
    int have_addr;
    uint64_t addr_ms;  /* when a host name was resolved (0 for a literal address) */
    pdr_dlink_t *idle; /* pooled connections, the last one pooled first */
    size_t n_idle;
    size_t connecting; /* connections resolving or connecting */
    size_t open;       /* every connection of this origin: connecting, busy or idle */
    pdr_dqueue_t wait; /* legs waiting for a connect slot or a pooled connection, oldest first */
    /* https://: the last resumable session a connection got, offered by the next ones (made with
     * tls_session_ctx: one from before a workers.tls reload is not offered) */
    struct ssl_session_st *tls_session;
    struct ssl_ctx_st *tls_session_ctx;
    int tls_no_resume; /* a resumed handshake failed: sessions are no longer kept for this worker */
} pdr_origin_t;

#define IDLE_FIRST(o) PDR_DLINK_ITEM((o)->idle, pdr_conn_t, idle_link)

struct pdr_multi {
    uv_loop_t *loop;
    pdr_dlink_t *origins;
    pdr_dlink_t *active; /* every leg between start and its end */
    size_t max_idle;
    size_t connecting_peak; /* the most connects ever in progress to one origin (tests) */
    size_t conn_limit;      /* connections per origin (limits.max_connections_per_worker share); 0: none */
    size_t open_peak;       /* the most connections ever open to one origin (tests) */
    size_t open_conns;      /* allocated connections */
    uv_timer_t kick;        /* 0 ms: reports failures that happened inside pdr_leg_start */
    pdr_leg_t **failq;
    int *failq_err;
    size_t n_failq, cap_failq;
    char scratch[IDLE_BUF]; /* reads of idle connections */
    uv_check_t due_check;   /* runs after the loop's poll: deadlines that passed (conn_due) */
    uv_idle_t due_idle;     /* active with due_check: makes that poll return at once */
    pdr_dlink_t *due;       /* connections whose deadline passed (conn_due) */
    int due_closed;
    int closing;
    int in_start; /* inside pdr_leg_start: failures are reported from the kick timer */
    void (*close_cb)(void *);
    void *close_arg;
    struct ssl_ctx_st *tls_ctx; /* for https:// origins (pdr_multi_set_tls); NULL: they fail */
    char *tls_server_name;
    int tls_verify;
    uint64_t *tls_full, *tls_resumed; /* handshakes, counted in the loop's metrics */
    uint64_t *tls_resume_failed;      /* workers that failed a resumed handshake */
    char tls_in[16 * 1024 + 512];     /* ciphertext reads of TLS connections (one TLS record and a header) */
    /* Read buffers of READ_BUF_MIN bytes that pooled connections gave back, for the next legs: a leg takes
     * one instead of a malloc, and memory still follows the legs in flight, not the pool. */
    char *spare[SPARE_BUFS];
    size_t n_spare;
    uint64_t buf_allocs; /* read buffers allocated (tests) */
};

static void conn_close(pdr_conn_t *c);
static void conn_dispatch(pdr_conn_t *c);
static void conn_read(pdr_conn_t *c);
static void conn_send(pdr_conn_t *c);
static void conn_complete(pdr_conn_t *c);
static int tls_fill(pdr_conn_t *c);
static void tls_input(pdr_conn_t *c, const char *p, size_t n);
static void tls_start(pdr_conn_t *c);
static void tls_send(pdr_conn_t *c);
static void keep_session(pdr_conn_t *c);
static int leg_connect(pdr_leg_t *leg, int fresh);
static int queue_failure(pdr_multi_t *m, pdr_leg_t *leg, int err);
static void origin_kick(pdr_origin_t *o);
static void on_kick_closed(uv_handle_t *h);

/* ---- legs ---- */

static void wait_remove(pdr_leg_t *leg)
{
    pdr_origin_t *o = leg->origin;
    if (!leg->waiting)
        return;
    pdr_dqueue_unlink(&o->wait, &leg->wait_link);
    leg->waiting = 0;
}

static void leg_unlink(pdr_leg_t *leg)
{
    pdr_multi_t *m = leg->multi;
    wait_remove(leg);
    for (size_t i = 0; i < m->n_failq; i++)
        if (m->failq[i] == leg) {
            m->n_failq--;
            memmove(m->failq + i, m->failq + i + 1, (m->n_failq - i) * sizeof(*m->failq));
            memmove(m->failq_err + i, m->failq_err + i + 1, (m->n_failq - i) * sizeof(*m->failq_err));
            break;
        }
    free(leg->head);
    leg->head = NULL;
    leg->active = 0;
    leg->conn = NULL;
    pdr_dlink_unlink(&leg->active_link);
}

/* Ends a leg: its connection is closed, on_done runs (from the kick timer when this happens inside
 * pdr_leg_start, which never calls back). */
static void leg_finish(pdr_leg_t *leg, int err)
{
    pdr_conn_t *c = leg->conn;
    if (c != NULL && c->leg == leg) {
        c->leg = NULL;
        conn_close(c);
    }
    leg->conn = NULL;
    if (leg->multi->in_start && queue_failure(leg->multi, leg, err) == 0)
        return;
    leg_unlink(leg);
    leg->cbs->on_done(leg, err);
}

/* A failure before the response began on a reused connection (the worker had closed it while idle), or in
 * a handshake that resumed a session the worker cannot resume (tls_resume_failed): send the request once
 * more on a fresh connection. Returns 1 when the leg was handed over. */
static int leg_retry(pdr_conn_t *c, pdr_leg_t *leg)
{
    int resumed_failed = c->tls != NULL && c->tls_offered && !c->tls_ready && c->o->tls_no_resume;
    if ((!c->reused && !resumed_failed) || c->got_byte || leg->retried)
        return 0;
    leg->retried = 1;
    c->leg = NULL;
    leg->conn = NULL;
    conn_close(c);
    if (leg_connect(leg, 1) != 0)
        return 0;
    return 1;
}

static void leg_fail(pdr_conn_t *c, int err)
{
    pdr_leg_t *leg = c->leg;
    pdr_debug("upstream %s:%d: %s (state %d, reused %d, got_byte %d, retried %d)", c->o->host, c->o->port,
              pdr_strerror(err), c->state, c->reused, c->got_byte, leg != NULL ? (int)leg->retried : -1);
    if (leg == NULL) {
        conn_close(c);
        return;
    }
    if ((err != PDR_ECONNREFUSED && err != PDR_ETIMEDOUT) || (c->tls_offered && !c->tls_ready))
        if (leg_retry(c, leg))
            return;
    leg_finish(leg, err);
}

/* ---- connections ---- */

static void due_unlink(pdr_conn_t *c)
{
    pdr_dlink_unlink(&c->due);
}

/* The multi is gone once its connections and its check handle have closed: the kick timer's close frees
 * it (libuv runs close callbacks in no set order, so they are chained). */
static void maybe_close_kick(pdr_multi_t *m)
{
    if (m->closing == 1 && m->open_conns == 0 && m->due_closed == 2) {
        m->closing = 2;
        uv_close((uv_handle_t *)&m->kick, on_kick_closed);
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
    maybe_close_kick(m);
}

static void idle_remove(pdr_conn_t *c)
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
    origin_kick(c->o);
}

static void conn_close(pdr_conn_t *c)
{
    if (c->state == C_CLOSING)
        return;
    if (c->state == C_IDLE)
        idle_remove(c);
    c->state = C_CLOSING;
    c->leg = NULL;
    due_unlink(c);
    c->o->open--;     /* room under the per-worker limit ... */
    connect_ended(c); /* ... and maybe a connect slot: either can serve a waiting leg */
    origin_kick(c->o);
    if (c->gai_pending)
        uv_cancel((uv_req_t *)c->gai);
    if (c->timer_open) {
        uv_timer_stop(&c->timer);
        uv_close((uv_handle_t *)&c->timer, on_handle_closed);
    }
    if (c->tcp_open)
        uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
}

static pdr_conn_t *conn_new(pdr_multi_t *m, pdr_origin_t *o)
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

/* A pooled connection nobody used for IDLE_MAX_MS: a worker that vanished without a FIN would
 * otherwise leave it to be found dead by the next request. */
static void on_idle_timeout(uv_timer_t *t)
{
    conn_close(t->data);
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
            leg_fail(c, PDR_ECONNREFUSED);
        } else if (c->state == C_BUSY && c->leg != NULL) {
            leg_fail(c, PDR_ETIMEDOUT);
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

static void on_timer(uv_timer_t *t)
{
    conn_due(t->data);
}

/* The leg's total deadline, from its start, when it has one. */
static void arm_total(pdr_conn_t *c)
{
    pdr_leg_t *leg = c->leg;
    if (leg == NULL || leg->total_timeout_ms <= 0) {
        uv_timer_stop(&c->timer);
        return;
    }
    uint64_t spent = (pdr_now_ns() - leg->started_ns) / 1000000u;
    uint64_t total = (uint64_t)leg->total_timeout_ms;
    uv_timer_start(&c->timer, on_timer, total > spent ? total - spent : 0, 0);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    pdr_conn_t *c = h->data;
    (void)hint;
    if (c->tls != NULL) {
        /* Ciphertext: fed to the session at once; plaintext is decrypted into c->buf (tls_fill). */
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
static void conn_complete(pdr_conn_t *c)
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
    keep_session(c);
    if (reusable) {
        c->state = C_IDLE;
        c->reused = 1;
        c->start = 0;
        buf_release(m, c->buf, c->cap); /* idle connections hold no buffer: memory follows requests */
        c->buf = NULL;
        uv_timer_start(&c->timer, on_idle_timeout, IDLE_MAX_MS, 0);
        pdr_dlink_push(&c->o->idle, &c->idle_link);
        c->o->n_idle++;
    } else {
        conn_close(c);
    }
    leg_unlink(leg);
    if (reusable)
        origin_kick(c->o); /* a waiting leg takes the connection just pooled */
    leg->cbs->on_done(leg, 0);
}

/* Parses what is buffered and hands it to the leg until the buffer is empty, the owner pauses, or the
 * response ends. */
static void conn_dispatch(pdr_conn_t *c)
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
                leg_finish(leg, PDR_ECANCELED);
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
            conn_complete(c);
            return;
        case PDR_H1_ERROR:
            pdr_debug("upstream %s:%d: bad response: %s", c->o->host, c->o->port, c->resp.error);
            leg_finish(leg, PDR_EIO);
            return;
        default: /* NEED_MORE: read on (again, after a pause) */
            if (c->tls != NULL) {
                int f = tls_fill(c); /* plaintext the session holds already comes first */
                if (f > 0)
                    continue;
                if (f < 0)
                    return;
            }
            conn_read(c);
            return;
        }
    }
}

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
        leg_fail(c, PDR_EPEERGONE);
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
static int tls_fill(pdr_conn_t *c)
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
        leg_fail(c, PDR_EIO); /* a response head larger than the buffer can ever hold */
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
        leg_fail(c, PDR_EPEERGONE);
        return -1;
    }
    if (n == 0)
        return 0;
    if (n == PDR_UTLS_EOF && pdr_h1_eof(&c->resp) == PDR_H1_DONE) {
        c->resp.keep_alive = 0;
        conn_complete(c);
        return -1;
    }
    if (n != PDR_UTLS_EOF && c->leg != NULL)
        snprintf(c->leg->error_detail, sizeof(c->leg->error_detail), "TLS: %s", pdr_utls_error(c->tls));
    leg_fail(c, n == PDR_UTLS_EOF ? PDR_EPEERGONE : PDR_EIO);
    return -1;
}

/* Keeps the connection's session for the next connections to its worker once it is resumable (TLS 1.2:
 * at the handshake's end; TLS 1.3: once a ticket came, read with the first response). */
static void keep_session(pdr_conn_t *c)
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
static void tls_resume_failed(pdr_conn_t *c, const char *why)
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
        leg_fail(c, PDR_EPEERGONE);
        return;
    }
    if (rc == 0) {
        conn_read(c);
        return;
    }
    if (rc < 0) {
        pdr_debug("upstream %s:%d: %s", c->o->host, c->o->port, why);
        tls_resume_failed(c, why);
        memcpy(c->leg->error_detail, why, sizeof(why));
        leg_fail(c, PDR_ECONNREFUSED); /* counted as the connect failure it is */
        return;
    }
    c->tls_ready = 1;
    uint64_t *n = pdr_utls_resumed(c->tls) ? c->m->tls_resumed : c->m->tls_full;
    if (n != NULL)
        (*n)++;
    keep_session(c);
    conn_send(c);
}

/* The TCP connection is up: the session starts (its ClientHello goes out). The connect deadline still
 * runs, so a worker that never completes the handshake fails like one that never accepts. */
static void tls_start(pdr_conn_t *c)
{
    pdr_multi_t *m = c->m;
    if (m->tls_ctx == NULL) {
        snprintf(c->leg->error_detail, sizeof(c->leg->error_detail), "https:// workers need workers.tls");
        leg_fail(c, PDR_ECONNREFUSED);
        return;
    }
    c->tls = pdr_utls_new(m->tls_ctx, c->o->host, m->tls_server_name, m->tls_verify);
    if (c->tls == NULL) {
        leg_fail(c, PDR_ENOMEM);
        return;
    }
    c->tls_saved = 0;
    c->tls_offered = c->o->tls_session != NULL && c->o->tls_session_ctx == m->tls_ctx;
    if (c->tls_offered)
        pdr_utls_offer(c->tls, c->o->tls_session);
    tls_handshake(c);
}

/* Ciphertext arrived on a connection carrying a leg. */
static void tls_input(pdr_conn_t *c, const char *p, size_t n)
{
    if (pdr_utls_feed(c->tls, p, n) != 0) {
        leg_fail(c, PDR_ENOMEM);
        return;
    }
    if (!c->tls_ready) {
        tls_handshake(c);
        return;
    }
    conn_dispatch(c); /* needs more at once when nothing is buffered: tls_fill decrypts */
}

/* The start of a send on c, plain or TLS: its read buffer, and the answer's parser reset. 0, or -1 when
 * the buffer cannot be had (the leg has failed). */
static int send_begin(pdr_conn_t *c)
{
    if (c->buf == NULL) {
        pdr_multi_t *m = c->m;
        if (m->n_spare > 0) {
            c->buf = m->spare[--m->n_spare];
        } else if ((c->buf = malloc(READ_BUF_MIN)) != NULL) {
            m->buf_allocs++;
        } else {
            leg_fail(c, PDR_ENOMEM);
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

/* conn_send for a TLS connection: the head and body are encrypted and written in one go. */
static void tls_send(pdr_conn_t *c)
{
    pdr_leg_t *leg = c->leg;
    if (send_begin(c) != 0)
        return;
    if (pdr_utls_write(c->tls, leg->head, leg->head_len) != 0 ||
        pdr_utls_write(c->tls, leg->body, leg->body_len) != 0) {
        leg_fail(c, PDR_EIO);
        return;
    }
    int rc = tls_flush(c);
    if (rc != 0) {
        leg_fail(c, rc);
        return;
    }
    arm_total(c);
    conn_read(c);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b)
{
    pdr_conn_t *c = s->data;
    (void)b;
    if (nread == 0)
        return;
    if (c->tls != NULL && nread > 0 && c->state != C_IDLE && c->leg != NULL) {
        tls_input(c, b->base, (size_t)nread);
        return;
    }
    if (c->tls != NULL && nread < 0 && !c->tls_ready && c->leg != NULL) {
        snprintf(c->leg->error_detail, sizeof(c->leg->error_detail),
                 "TLS handshake with the worker failed: it closed the connection (does it serve https?)");
        tls_resume_failed(c, "the worker closed the connection");
        leg_fail(c, PDR_ECONNREFUSED);
        return;
    }
    if (c->tls != NULL && nread < 0 && !c->reused && !c->got_byte && c->leg != NULL)
        snprintf(c->leg->error_detail, sizeof(c->leg->error_detail),
                 "TLS: the worker closed the connection after the handshake without answering (a worker that "
                 "requires a client certificate does this: workers.tls.cert_file)");
    if (c->state == C_IDLE || c->leg == NULL) {
        /* The worker closed a pooled connection, or sent bytes nobody asked for: drop it. */
        conn_close(c);
        return;
    }
    if (nread < 0) {
        if (nread == UV_EOF && pdr_h1_eof(&c->resp) == PDR_H1_DONE) {
            /* The body ran until the close, which ends it. */
            c->resp.keep_alive = 0;
            conn_complete(c);
            return;
        }
        leg_fail(c, PDR_EPEERGONE);
        return;
    }
    c->got_byte = 1;
    c->filled = c->start + c->len + (size_t)nread == c->cap;
    c->len += (size_t)nread;
    conn_dispatch(c);
}

static void conn_read(pdr_conn_t *c)
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
        leg_fail(c, PDR_EPEERGONE);
}

/* Sends the leg's request on a connected c. */
static void conn_send(pdr_conn_t *c)
{
    if (c->tls != NULL) {
        tls_send(c);
        return;
    }
    pdr_leg_t *leg = c->leg;
    if (send_begin(c) != 0)
        return;
    uv_buf_t bufs[2] = {uv_buf_init(leg->head, (unsigned)leg->head_len),
                        uv_buf_init((char *)(uintptr_t)leg->body, (unsigned)leg->body_len)};
    unsigned nbufs = leg->body_len > 0 ? 2 : 1;
    /* Written at once in the common case: uv_write would also re-arm the socket's poll watcher (one
     * epoll_ctl per request); only what the socket does not take now goes through a write request. */
    int w = uv_try_write((uv_stream_t *)&c->tcp, bufs, nbufs);
    if (w < 0 && w != UV_EAGAIN) {
        leg_fail(c, PDR_EPEERGONE);
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
            leg_fail(c, PDR_EPEERGONE);
            return;
        }
        c->writing = 1;
    }
    arm_total(c);
    conn_read(c);
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
        leg_fail(c, PDR_ECONNREFUSED);
        return;
    }
    if (c->leg == NULL) {
        conn_close(c);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    uv_tcp_keepalive(&c->tcp, 1, 30); /* a worker host that disappears is noticed on idle connections too */
    if (c->o->tls) {
        tls_start(c);
        return;
    }
    conn_send(c);
}

static void on_connect_timeout(uv_timer_t *t)
{
    conn_due(t->data); /* a connect that does not finish in time: the worker is unreachable */
}

static void conn_connect(pdr_conn_t *c)
{
    pdr_origin_t *o = c->o;
    c->state = C_CONNECTING;
    if (uv_tcp_init(c->m->loop, &c->tcp) != 0) {
        leg_fail(c, PDR_EIO);
        return;
    }
    c->tcp_open = 1;
    c->creq.data = c;
    int rc = uv_tcp_connect(&c->creq, &c->tcp, (const struct sockaddr *)&o->addr, on_connect);
    if (rc != 0) {
        /* libuv makes the socket here: out of descriptors or memory is the router's own failure, and must
         * not be taken for a worker that refuses connections. */
        int local = rc == UV_EMFILE || rc == UV_ENFILE || rc == UV_ENOBUFS || rc == UV_ENOMEM;
        leg_fail(c, local ? PDR_ENOMEM : PDR_ECONNREFUSED);
        return;
    }
    uv_timer_start(&c->timer, on_connect_timeout, (uint64_t)connect_ms(c->leg), 0);
}

/* A leg whose worker's host name did not resolve: the reason its error names. */
static void dns_failed(pdr_leg_t *leg, const char *host, const char *why)
{
    snprintf(leg->error_detail, sizeof(leg->error_detail),
             "DNS lookup failed: cannot resolve host '%.100s' (%s)", host, why);
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
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
            dns_failed(c->leg, o->host, status != 0 ? uv_strerror(status) : "no address");
        leg_fail(c, PDR_ECONNREFUSED);
        return;
    }
    conn_connect(c);
}

/* ---- origins ---- */

static pdr_origin_t *origin_get(pdr_multi_t *m, const char *host, size_t hlen, int port, int v6, int tls)
{
    for (pdr_dlink_t *l = m->origins; l != NULL; l = l->next) {
        pdr_origin_t *o = PDR_DLINK_ITEM(l, pdr_origin_t, link);
        if (o->port == port && o->tls == tls && strlen(o->host) == hlen && memcmp(o->host, host, hlen) == 0)
            return o;
    }
    if (hlen >= sizeof(((pdr_origin_t *)0)->host))
        return NULL;
    pdr_origin_t *o = calloc(1, sizeof(*o));
    if (o == NULL)
        return NULL;
    memcpy(o->host, host, hlen);
    o->m = m;
    o->port = port;
    o->tls = tls;
    snprintf(o->authority, sizeof(o->authority), v6 ? "[%s]:%d" : "%s:%d", o->host, port);
    if (uv_ip4_addr(o->host, port, (struct sockaddr_in *)&o->addr) == 0 ||
        uv_ip6_addr(o->host, port, (struct sockaddr_in6 *)&o->addr) == 0)
        o->have_addr = 1; /* a literal: never resolved, never expires */
    pdr_dlink_push(&m->origins, &o->link);
    return o;
}

/* Parses "http[s]://host[:port][/path]": host span, port, path (NULL: "/"), tls. 0 or PDR_EINVAL. */
static int parse_url(const char *url, const char **host, size_t *hlen, int *port, const char **path, int *v6,
                     int *tls)
{
    *tls = strncmp(url, "https://", 8) == 0;
    if (!*tls && strncmp(url, "http://", 7) != 0)
        return PDR_EINVAL;
    const char *auth = url + (*tls ? 8 : 7);
    const char *p = auth + strcspn(auth, "/?");
    pdr_hostport_t hp;
    if (pdr_split_hostport(auth, (size_t)(p - auth), &hp) != 0 || hp.ipv6 != hp.bracketed)
        return PDR_EINVAL;
    *host = hp.host;
    *hlen = hp.hlen;
    *v6 = hp.bracketed;
    int64_t v = *tls ? 443 : 80;
    if (hp.port != NULL && pdr_parse_int64(hp.port, hp.plen, 1, 65535, &v) != 0)
        return PDR_EINVAL;
    *port = (int)v;
    *path = *p != '\0' ? p : "/";
    return 0;
}

/* Whether a new connection to o may be opened now: a connect slot is free and the per-worker limit (if
 * any) not reached. */
static int can_open(const pdr_origin_t *o, const pdr_leg_t *leg)
{
    const pdr_multi_t *m = o->m;
    return o->connecting < CONNECTING_MAX && (m->conn_limit == 0 || leg->uncapped || o->open < m->conn_limit);
}

/* Gives the leg a connection: a pooled one (unless fresh), else a new one (resolving first when the
 * origin is a host name whose address is missing or old). 0 or PDR_ENOMEM. */
static int leg_connect(pdr_leg_t *leg, int fresh)
{
    pdr_multi_t *m = leg->multi;
    pdr_origin_t *o = leg->origin;
    if (!fresh && o->idle != NULL) {
        pdr_conn_t *c = IDLE_FIRST(o);
        idle_remove(c);
        c->leg = leg;
        leg->conn = c;
        conn_send(c);
        return 0;
    }
    if (fresh && m->conn_limit > 0 && o->open >= m->conn_limit && o->idle != NULL &&
        o->connecting < CONNECTING_MAX)
        conn_close(IDLE_FIRST(o)); /* a retry needs a new connection: a pooled one makes room */
    if (!can_open(o, leg)) {
        /* A burst must not become a SYN storm that overflows the worker's accept queue (and makes its
         * connects time out, which would eject it), nor exceed limits.max_connections_per_worker: wait
         * for a slot or a pooled connection. */
        leg->waiting = 1;
        pdr_dqueue_append(&o->wait, &leg->wait_link);
        return 0;
    }
    pdr_conn_t *c = conn_new(m, o);
    if (c == NULL)
        return PDR_ENOMEM;
    c->leg = leg;
    leg->conn = c;
    c->counted = 1;
    if (++o->connecting > m->connecting_peak)
        m->connecting_peak = o->connecting;
    int literal = o->have_addr && o->addr_ms == 0;
    if (literal || (o->have_addr && pdr_now_ms() - o->addr_ms < DNS_TTL_MS)) {
        conn_connect(c);
        return 0;
    }
    c->state = C_RESOLVING;
    c->gai = malloc(sizeof(*c->gai));
    if (c->gai == NULL) {
        leg_fail(c, PDR_ENOMEM);
        return 0;
    }
    c->gai->data = c;
    struct addrinfo hints;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    char port[8];
    snprintf(port, sizeof(port), "%d", o->port);
    int rc = uv_getaddrinfo(m->loop, c->gai, on_resolved, o->host, port, &hints);
    if (rc != 0) {
        free(c->gai);
        c->gai = NULL;
        dns_failed(leg, o->host, uv_strerror(rc));
        leg_fail(c, PDR_ECONNREFUSED);
        return 0;
    }
    c->gai_pending = 1;
    return 0;
}

/* Hands pooled connections and free connect slots to the legs waiting for them, oldest first. A leg is
 * taken off the queue only when leg_connect can serve it at once (it never queues it again). */
static void origin_kick(pdr_origin_t *o)
{
    while (o->wait.head != NULL) {
        pdr_leg_t *leg = PDR_DLINK_ITEM(o->wait.head, pdr_leg_t, wait_link);
        size_t limit = leg->multi->conn_limit;
        int fresh = leg->retried;
        int ok = (!fresh && o->idle != NULL) || can_open(o, leg) ||
                 (fresh && limit > 0 && o->idle != NULL && o->connecting < CONNECTING_MAX);
        if (!ok)
            break;
        wait_remove(leg);
        if (leg_connect(leg, fresh) != 0)
            leg_finish(leg, PDR_ENOMEM);
    }
}

void pdr_multi_set_conn_limit(pdr_multi_t *m, size_t per_origin)
{
    m->conn_limit = per_origin;
    for (pdr_dlink_t *l = m->origins; l != NULL; l = l->next)
        origin_kick(PDR_DLINK_ITEM(l, pdr_origin_t, link)); /* a raised limit serves the waiting legs */
}

uint64_t pdr__multi_buf_allocs(const pdr_multi_t *m)
{
    return m->buf_allocs;
}

size_t pdr__multi_open_peak(const pdr_multi_t *m)
{
    return m->open_peak;
}

/* ---- the multi ---- */

static void on_kick(uv_timer_t *t)
{
    pdr_multi_t *m = t->data;
    while (m->n_failq > 0) {
        pdr_leg_t *leg = m->failq[0];
        int err = m->failq_err[0];
        m->n_failq--;
        memmove(m->failq, m->failq + 1, m->n_failq * sizeof(*m->failq));
        memmove(m->failq_err, m->failq_err + 1, m->n_failq * sizeof(*m->failq_err));
        leg_unlink(leg);
        leg->cbs->on_done(leg, err);
    }
}

pdr_multi_t *pdr_multi_new(uv_loop_t *loop, int max_connects)
{
    pdr_multi_t *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return NULL;
    m->loop = loop;
    m->max_idle = max_connects > 0 ? (size_t)max_connects : 64;
    uv_timer_init(loop, &m->kick);
    m->kick.data = m;
    uv_check_init(loop, &m->due_check);
    m->due_check.data = m;
    uv_idle_init(loop, &m->due_idle);
    m->due_idle.data = m;
    return m;
}

static void on_kick_closed(uv_handle_t *h)
{
    pdr_multi_t *m = h->data;
    while (m->origins != NULL) {
        pdr_origin_t *o = PDR_DLINK_ITEM(m->origins, pdr_origin_t, link);
        pdr_dlink_unlink(&o->link);
        if (o->tls_session != NULL)
            SSL_SESSION_free(o->tls_session);
        free(o);
    }
    if (m->close_cb)
        m->close_cb(m->close_arg);
    free(m->failq);
    free(m->failq_err);
    if (m->tls_ctx != NULL)
        SSL_CTX_free(m->tls_ctx);
    free(m->tls_server_name);
    while (m->n_spare > 0)
        free(m->spare[--m->n_spare]);
    free(m);
}

static void on_due_closed(uv_handle_t *h)
{
    pdr_multi_t *m = h->data;
    if (++m->due_closed == 2) /* the check and the idle handle */
        maybe_close_kick(m);
}

void pdr_multi_close(pdr_multi_t *m, void (*close_cb)(void *), void *arg)
{
    m->close_cb = close_cb;
    m->close_arg = arg;
    m->closing = 1;
    uv_timer_stop(&m->kick);
    for (pdr_dlink_t *l = m->origins; l != NULL; l = l->next) {
        pdr_origin_t *o = PDR_DLINK_ITEM(l, pdr_origin_t, link);
        while (o->idle != NULL)
            conn_close(IDLE_FIRST(o));
    }
    /* Connections close asynchronously; the last one's close closes the kick timer (on_handle_closed),
     * once the check handle has closed too. The kick timer's close frees the multi. */
    uv_check_stop(&m->due_check);
    uv_idle_stop(&m->due_idle);
    uv_close((uv_handle_t *)&m->due_check, on_due_closed);
    uv_close((uv_handle_t *)&m->due_idle, on_due_closed);
}

const char *pdr_leg_strerror(const pdr_leg_t *leg, int err)
{
    return leg->error_detail[0] != '\0' ? leg->error_detail : pdr_strerror(err);
}

int pdr_multi_set_tls(pdr_multi_t *m, struct ssl_ctx_st *ctx, const char *server_name, int verify)
{
    char *sn = NULL;
    if (server_name != NULL && (sn = strdup(server_name)) == NULL)
        return PDR_ENOMEM;
    if (ctx != NULL)
        SSL_CTX_up_ref(ctx);
    if (m->tls_ctx != NULL)
        SSL_CTX_free(m->tls_ctx); /* connections made with it keep it through their sessions */
    m->tls_ctx = ctx;
    /* Sessions kept for resumption were checked against the settings replaced here (another CA, server
     * name or verify): never offered again. */
    for (pdr_dlink_t *l = m->origins; l != NULL; l = l->next) {
        pdr_origin_t *o = PDR_DLINK_ITEM(l, pdr_origin_t, link);
        if (o->tls_session != NULL)
            SSL_SESSION_free(o->tls_session);
        o->tls_session = NULL;
        o->tls_session_ctx = NULL;
    }
    free(m->tls_server_name);
    m->tls_server_name = sn;
    m->tls_verify = verify;
    return 0;
}

void pdr_multi_count_tls(pdr_multi_t *m, uint64_t *full, uint64_t *resumed, uint64_t *resume_failed)
{
    m->tls_full = full;
    m->tls_resumed = resumed;
    m->tls_resume_failed = resume_failed;
}

const char *pdr_leg_cause(int err)
{
    switch (err) {
    case PDR_ECONNREFUSED:
        return "connect";
    case PDR_ETIMEDOUT:
        return "timeout";
    case PDR_EPEERGONE:
        return "reset";
    default:
        return "other";
    }
}

static int queue_failure(pdr_multi_t *m, pdr_leg_t *leg, int err)
{
    if (m->n_failq == m->cap_failq) {
        size_t cap = m->cap_failq ? 2 * m->cap_failq : 16;
        pdr_leg_t **q = realloc(m->failq, cap * sizeof(*q));
        if (q == NULL)
            return PDR_ENOMEM;
        m->failq = q;
        int *e = realloc(m->failq_err, cap * sizeof(*e));
        if (e == NULL)
            return PDR_ENOMEM;
        m->failq_err = e;
        m->cap_failq = cap;
    }
    m->failq[m->n_failq] = leg;
    m->failq_err[m->n_failq++] = err;
    uv_timer_start(&m->kick, on_kick, 0, 0);
    return 0;
}

typedef struct head {
    char *p;
    size_t len, cap;
    int overflow;
} head_t;

static void head_add(head_t *h, const char *s, size_t n)
{
    if (h->overflow || h->len + n > h->cap) {
        h->overflow = 1;
        return;
    }
    memcpy(h->p + h->len, s, n);
    h->len += n;
}

static int leg_start(pdr_leg_t *leg, pdr_multi_t *m, const char *url, const char *body, size_t body_len,
                     const char *const *extra_headers, long connect_timeout_ms, long total_timeout_ms,
                     const pdr_leg_cbs_t *cbs, void *data, int uncapped)
{
    memset(leg, 0, sizeof(*leg));
    leg->uncapped = uncapped != 0;
    leg->multi = m;
    leg->cbs = cbs;
    leg->data = data;
    leg->content_length = -1;
    leg->body = body;
    leg->body_len = body != NULL ? body_len : 0;
    leg->connect_timeout_ms = connect_timeout_ms;
    leg->total_timeout_ms = total_timeout_ms;
    if (m->closing)
        return PDR_ECLOSED;
    const char *host, *path;
    size_t hlen;
    int port, v6, tls;
    if (parse_url(url, &host, &hlen, &port, &path, &v6, &tls) != 0)
        return PDR_EINVAL;
    leg->origin = origin_get(m, host, hlen, port, v6, tls);
    if (leg->origin == NULL)
        return PDR_ENOMEM;
    /* The head by hand, not snprintf: this runs twice per PD request. Sized exactly first, so a request
     * with many forwarded client headers is one allocation of what it needs. */
    size_t plen = strcspn(path, " \r\n"), alen = strlen(leg->origin->authority);
    size_t need = 5 + plen + 17 + alen + 2 + (body != NULL ? 48 + 24 + 2 : 0) + 2;
    for (const char *const *x = extra_headers; x != NULL && *x != NULL; x++)
        need += strlen(*x) + 2;
    if (need > HEAD_MAX)
        return PDR_ETOOBIG;
    leg->head = malloc(need);
    if (leg->head == NULL)
        return PDR_ENOMEM;
    head_t h = {leg->head, 0, need, 0};
    head_add(&h, body != NULL ? "POST " : "GET ", body != NULL ? 5 : 4);
    head_add(&h, path, plen);
    head_add(&h, " HTTP/1.1\r\nHost: ", 17);
    head_add(&h, leg->origin->authority, alen);
    head_add(&h, "\r\n", 2);
    if (body != NULL) {
        char num[24];
        size_t nl = 0;
        size_t v = body_len;
        do
            num[sizeof(num) - 1 - nl++] = (char)('0' + v % 10);
        while ((v /= 10) != 0 && nl < sizeof(num));
        head_add(&h, "Content-Type: application/json\r\nContent-Length: ", 48);
        head_add(&h, num + sizeof(num) - nl, nl);
        head_add(&h, "\r\n", 2);
    }
    for (const char *const *x = extra_headers; x != NULL && *x != NULL; x++) {
        head_add(&h, *x, strlen(*x));
        head_add(&h, "\r\n", 2);
    }
    head_add(&h, "\r\n", 2);
    if (h.overflow) {
        free(leg->head);
        leg->head = NULL;
        return PDR_ETOOBIG;
    }
    size_t k = h.len;
    leg->head_len = (size_t)k;
    leg->started_ns = pdr_now_ns();
    leg->active = 1;
    pdr_dlink_push(&m->active, &leg->active_link);
    m->in_start = 1;
    int rc = leg_connect(leg, 0);
    m->in_start = 0;
    if (rc != 0) {
        leg_unlink(leg);
        return rc;
    }
    return 0;
}

int pdr_leg_start(pdr_leg_t *leg, pdr_multi_t *m, const char *url, const char *body, size_t body_len,
                  const char *const *extra_headers, long connect_timeout_ms, long total_timeout_ms,
                  const pdr_leg_cbs_t *cbs, void *data)
{
    return leg_start(leg, m, url, body, body_len, extra_headers, connect_timeout_ms, total_timeout_ms, cbs,
                     data, 0);
}

int pdr_leg_start_probe(pdr_leg_t *leg, pdr_multi_t *m, const char *url, const char *const *extra_headers,
                        long timeout_ms, const pdr_leg_cbs_t *cbs, void *data)
{
    return leg_start(leg, m, url, NULL, 0, extra_headers, timeout_ms, timeout_ms, cbs, data, 1);
}

size_t pdr_multi_fail_all(pdr_multi_t *m, int err)
{
    /* on_done may cancel other legs (the request's other leg): take the head again after each. */
    size_t n = 0;
    while (m->active != NULL) {
        n++;
        leg_finish(PDR_DLINK_ITEM(m->active, pdr_leg_t, active_link), err);
    }
    return n;
}

void pdr_leg_cancel(pdr_leg_t *leg)
{
    if (!leg->active || leg->abort_requested)
        return;
    leg->abort_requested = 1;
    pdr_conn_t *c = leg->conn;
    if (c != NULL && c->leg == leg) {
        c->leg = NULL;
        conn_close(c); /* the worker sees the close */
    }
    leg_unlink(leg);
}

void pdr_leg_resume(pdr_leg_t *leg)
{
    if (!leg->active || !leg->paused)
        return;
    leg->paused = 0;
    pdr_conn_t *c = leg->conn;
    if (c == NULL || c->leg != leg)
        return;
    conn_dispatch(c);
}

int pdr_leg_connecting(const pdr_leg_t *leg)
{
    if (!leg->active)
        return 0;
    if (leg->waiting || leg->conn == NULL)
        return 1;
    return leg->conn->state == C_CONNECTING || leg->conn->state == C_RESOLVING;
}

size_t pdr__multi_connecting_peak(const pdr_multi_t *m)
{
    return m->connecting_peak;
}
