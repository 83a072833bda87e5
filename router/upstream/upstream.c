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
 *
 * This file holds the legs, the origins and the multi; a connection is upstream_conn.c's, its TLS side
 * upstream_conn_tls.c's, and upstream_internal.h the structs the three share.
 */
#include <openssl/ssl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dlist.h"
#include "err.h"
#include "h1parse.h"
#include "upstream.h"
#include "upstream_internal.h"
#include "upstream_tls.h"
#include "util.h"

static int leg_connect(pdr_leg_t *leg, int fresh);
static int queue_failure(pdr_multi_t *m, pdr_leg_t *leg, int err);

/* ---- legs ---- */

/* A leg's request head goes back to the loop's spares when it is one of theirs, else to free. */
static void head_release(pdr_multi_t *m, pdr_leg_t *leg)
{
    if (leg->head != NULL && leg->head_spare && m->n_spare_head < SPARE_HEADS)
        m->spare_head[m->n_spare_head++] = leg->head;
    else
        free(leg->head);
    leg->head = NULL;
    leg->head_spare = 0;
}

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
    head_release(m, leg);
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
        pdr__up_conn_close(c);
    }
    leg->conn = NULL;
    if (leg->multi->in_start && queue_failure(leg->multi, leg, err) == 0)
        return;
    leg_unlink(leg);
    leg->cbs->on_done(leg, err);
}

/* A failure before the response began on a reused connection (the worker had closed it while idle), or in
 * a handshake that resumed a session the worker cannot resume (pdr__up_tls_resume_failed): send the request
 * once more on a fresh connection. Returns 1 when the leg was handed over. */
static int leg_retry(pdr_conn_t *c, pdr_leg_t *leg)
{
    int resumed_failed = c->tls != NULL && c->tls_offered && !c->tls_ready && c->o->tls_no_resume;
    if ((!c->reused && !resumed_failed) || c->got_byte || leg->retried)
        return 0;
    leg->retried = 1;
    c->leg = NULL;
    leg->conn = NULL;
    pdr__up_conn_close(c);
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
        pdr__up_conn_close(c);
        return;
    }
    if ((err != PDR_ECONNREFUSED && err != PDR_ETIMEDOUT) || (c->tls_offered && !c->tls_ready))
        if (leg_retry(c, leg))
            return;
    leg_finish(leg, err);
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
    int an = snprintf(o->authority, sizeof(o->authority), v6 ? "[%s]:%d" : "%s:%d", o->host, port);
    o->authority_len = an > 0 ? (size_t)an : 0;
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
        pdr__up_idle_remove(c);
        c->leg = leg;
        leg->conn = c;
        pdr__up_conn_send(c);
        return 0;
    }
    if (fresh && m->conn_limit > 0 && o->open >= m->conn_limit && o->idle != NULL &&
        o->connecting < CONNECTING_MAX)
        pdr__up_conn_close(IDLE_FIRST(o)); /* a retry needs a new connection: a pooled one makes room */
    if (!can_open(o, leg)) {
        /* A burst must not become a SYN storm that overflows the worker's accept queue (and makes its
         * connects time out, which would eject it), nor exceed limits.max_connections_per_worker: wait
         * for a slot or a pooled connection. */
        leg->waiting = 1;
        pdr_dqueue_append(&o->wait, &leg->wait_link);
        return 0;
    }
    pdr_conn_t *c = pdr__up_conn_new(m, o);
    if (c == NULL)
        return PDR_ENOMEM;
    c->leg = leg;
    leg->conn = c;
    c->counted = 1;
    if (++o->connecting > m->connecting_peak)
        m->connecting_peak = o->connecting;
    int literal = o->have_addr && o->addr_ms == 0;
    if (literal || (o->have_addr && pdr_now_ms() - o->addr_ms < DNS_TTL_MS)) {
        pdr__up_conn_connect(c);
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
    int rc = uv_getaddrinfo(m->loop, c->gai, pdr__up_on_resolved, o->host, port, &hints);
    if (rc != 0) {
        free(c->gai);
        c->gai = NULL;
        pdr__up_dns_failed(leg, o->host, uv_strerror(rc));
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

static void on_kick_closed(uv_handle_t *h);

/* What the connections call above them (upstream_internal.h). */
static const pdr_up_handlers_t handlers = {
    .leg_fail = leg_fail,
    .leg_finish = leg_finish,
    .leg_unlink = leg_unlink,
    .origin_kick = origin_kick,
    .multi_closed = on_kick_closed,
    .tls_start = pdr__up_tls_start,
    .tls_input = pdr__up_tls_input,
    .tls_send = pdr__up_tls_send,
    .tls_fill = pdr__up_tls_fill,
    .tls_keep_session = pdr__up_keep_session,
    .tls_resume_failed = pdr__up_tls_resume_failed,
};

pdr_multi_t *pdr_multi_new(uv_loop_t *loop, int max_connects)
{
    pdr_multi_t *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return NULL;
    m->loop = loop;
    m->up = &handlers;
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
    while (m->n_spare_head > 0)
        free(m->spare_head[--m->n_spare_head]);
    free(m);
}

static void on_due_closed(uv_handle_t *h)
{
    pdr_multi_t *m = h->data;
    if (++m->due_closed == 2) /* the check and the idle handle */
        pdr__up_maybe_close_kick(m);
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
            pdr__up_conn_close(IDLE_FIRST(o));
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

/* A worker URL legs went to before: its entry in the loop's cache, or NULL. The entry the last leg used
 * is looked at first (a loop sends most legs to few workers). */
static const struct up_url *url_cached(pdr_multi_t *m, const char *url)
{
    if (m->n_urls > 0 && strcmp(m->urls[m->last_url].url, url) == 0)
        return &m->urls[m->last_url];
    for (size_t i = 0; i < m->n_urls; i++)
        if (i != m->last_url && strcmp(m->urls[i].url, url) == 0) {
            m->last_url = i;
            return &m->urls[i];
        }
    return NULL;
}

/* Writes v in decimal at d (20 bytes of room); the number of digits. Counted first (a body's length has
 * three or four digits: comparisons, not divisions), then written from the last digit back. */
static size_t fmt_len(char *d, uint64_t v)
{
    size_t n = v < 10 ? 1 : v < 100 ? 2 : v < 1000 ? 3 : 4;
    for (uint64_t t = v / 10000; t != 0; t /= 10)
        n++;
    for (char *q = d + n; q != d; v /= 10)
        *--q = (char)('0' + v % 10);
    return n;
}

/* Writes "<path> HTTP/1.1\r\nHost: <authority>\r\n" at d (room for plen + 19 + the authority); its length. */
static size_t head_line(char *d, const char *path, size_t plen, const pdr_origin_t *o)
{
    char *p = d;
    memcpy(p, path, plen);
    p += plen;
    memcpy(p, " HTTP/1.1\r\nHost: ", 17);
    p += 17;
    memcpy(p, o->authority, o->authority_len);
    p += o->authority_len;
    memcpy(p, "\r\n", 2);
    return (size_t)(p + 2 - d);
}

/* Keeps a parsed URL and its head line for the next legs, when it fits: the entry, or NULL. */
static const struct up_url *url_remember(pdr_multi_t *m, const char *url, pdr_origin_t *o, const char *path,
                                         size_t plen)
{
    size_t ulen = strlen(url);
    if (ulen >= URL_CACHE_LEN || plen >= URL_CACHE_LEN)
        return NULL;
    size_t i = m->next_url;
    struct up_url *u = &m->urls[i];
    m->next_url = (m->next_url + 1) % URL_CACHE;
    if (m->n_urls < URL_CACHE)
        m->n_urls++;
    memcpy(u->url, url, ulen + 1);
    u->o = o;
    u->line_len = head_line(u->line, path, plen, o);
    m->last_url = i;
    return u;
}

static int leg_start(pdr_leg_t *leg, pdr_multi_t *m, const char *url, const char *body, size_t body_len,
                     const char *const *extra_headers, long connect_timeout_ms, long total_timeout_ms,
                     const pdr_leg_cbs_t *cbs, void *data, int uncapped)
{
    /* The two text arrays come last and are strings: their first bytes are enough. */
    memset(leg, 0, offsetof(pdr_leg_t, content_type));
    leg->content_type[0] = '\0';
    leg->error_detail[0] = '\0';
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
    const char *path = NULL;
    size_t plen = 0;
    const struct up_url *u = url_cached(m, url);
    if (u != NULL) {
        leg->origin = u->o;
    } else {
        const char *host;
        size_t hlen;
        int port, v6, tls;
        if (parse_url(url, &host, &hlen, &port, &path, &v6, &tls) != 0)
            return PDR_EINVAL;
        leg->origin = origin_get(m, host, hlen, port, v6, tls);
        if (leg->origin == NULL)
            return PDR_ENOMEM;
        plen = strcspn(path, " \r\n");
        u = url_remember(m, url, leg->origin, path, plen);
    }
    size_t line_len = u != NULL ? u->line_len : plen + 19 + leg->origin->authority_len;
    /* The head by hand, not snprintf: this runs twice per PD request. Sized exactly first (the body's
     * length at its most digits), so a request with many forwarded client headers is one allocation of
     * what it needs, and written with one copy per piece. */
    static const char ctype_clen[] = "Content-Type: application/json\r\nContent-Length: ";
    size_t xl[16];
    size_t need = 5 + line_len + (body != NULL ? sizeof(ctype_clen) - 1 + 20 + 2 : 0) + 2, nx = 0;
    for (const char *const *x = extra_headers; x != NULL && *x != NULL; x++, nx++) {
        size_t l = strlen(*x);
        if (nx < sizeof(xl) / sizeof(xl[0]))
            xl[nx] = l;
        need += l + 2;
    }
    if (need > HEAD_MAX)
        return PDR_ETOOBIG;
    if (need <= HEAD_SPARE && m->n_spare_head > 0) {
        leg->head = m->spare_head[--m->n_spare_head];
        leg->head_spare = 1;
    } else if (need <= HEAD_SPARE) {
        leg->head = malloc(HEAD_SPARE);
        leg->head_spare = 1;
    } else {
        leg->head = malloc(need);
    }
    if (leg->head == NULL)
        return PDR_ENOMEM;
    char *p = leg->head;
    if (body != NULL) {
        memcpy(p, "POST ", 5);
        p += 5;
    } else {
        memcpy(p, "GET ", 4);
        p += 4;
    }
    if (u != NULL) {
        memcpy(p, u->line, u->line_len);
        p += u->line_len;
    } else {
        p += head_line(p, path, plen, leg->origin);
    }
    if (body != NULL) {
        memcpy(p, ctype_clen, sizeof(ctype_clen) - 1);
        p += sizeof(ctype_clen) - 1;
        p += fmt_len(p, body_len);
        memcpy(p, "\r\n", 2);
        p += 2;
    }
    nx = 0;
    for (const char *const *x = extra_headers; x != NULL && *x != NULL; x++, nx++) {
        size_t l = nx < sizeof(xl) / sizeof(xl[0]) ? xl[nx] : strlen(*x);
        memcpy(p, *x, l);
        memcpy(p + l, "\r\n", 2);
        p += l + 2;
    }
    memcpy(p, "\r\n", 2);
    p += 2;
    leg->head_len = (size_t)(p - leg->head);
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
        pdr__up_conn_close(c); /* the worker sees the close */
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
    pdr__up_conn_dispatch(c);
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
