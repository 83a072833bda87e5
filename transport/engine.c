/*
 * The engine core: public API (any thread), the room table and command queue (under eng->lock), the
 * I/O thread's loop, the deadline heap and the parked-fetch table (I/O thread only). Backends
 * (tcp.c) do the byte moving through struct pdr_xfer_backend_ops.
 *
 * Invariants: an accepted op is completed exactly once, on the I/O thread, by pdr__op_complete; the
 * heap and parked table are sized at creation (2 × max_rooms entries), so arming a deadline never
 * allocates; no API call waits for the I/O thread except pdr_xfer_engine_destroy.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include "err.h"
#include "transport_internal.h"
#include "util.h"

struct pdr_xfer_memreg {
    struct pdr_xfer_memreg *next;
    void *addr;
    size_t len;
    int kind;
};

static size_t room_bucket(const pdr_xfer_engine_t *eng, uint64_t room, int kind)
{
    uint64_t h = (room ^ ((uint64_t)kind << 63)) * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 32) & (eng->nbuckets - 1);
}

struct pdr__op *pdr__room_find(pdr_xfer_engine_t *eng, uint64_t room, int kind)
{
    for (struct pdr__op *op = eng->rooms[room_bucket(eng, room, kind)]; op != NULL; op = op->hnext)
        if (op->room == room && op->kind == kind)
            return op;
    return NULL;
}

static void room_remove(pdr_xfer_engine_t *eng, struct pdr__op *op)
{
    struct pdr__op **pp = &eng->rooms[room_bucket(eng, op->room, op->kind)];
    while (*pp != NULL && *pp != op)
        pp = &(*pp)->hnext;
    if (*pp == op) {
        *pp = op->hnext;
        eng->nops--;
    }
}

/* ---- deadline heap (I/O thread) ---- */

static void heap_swap(pdr_xfer_engine_t *eng, size_t a, size_t b)
{
    struct pdr__timer *t = eng->heap[a];
    eng->heap[a] = eng->heap[b];
    eng->heap[b] = t;
    eng->heap[a]->idx = a;
    eng->heap[b]->idx = b;
}

static void heap_up(pdr_xfer_engine_t *eng, size_t i)
{
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (eng->heap[p]->at_ns <= eng->heap[i]->at_ns)
            break;
        heap_swap(eng, p, i);
        i = p;
    }
}

static void heap_down(pdr_xfer_engine_t *eng, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < eng->heap_len && eng->heap[l]->at_ns < eng->heap[m]->at_ns)
            m = l;
        if (r < eng->heap_len && eng->heap[r]->at_ns < eng->heap[m]->at_ns)
            m = r;
        if (m == i)
            return;
        heap_swap(eng, i, m);
        i = m;
    }
}

int pdr__timer_arm(pdr_xfer_engine_t *eng, struct pdr__timer *t, uint64_t at_ns)
{
    if (t->idx != SIZE_MAX) {
        t->at_ns = at_ns;
        heap_up(eng, t->idx);
        heap_down(eng, t->idx);
        return 0;
    }
    if (eng->heap_len == eng->heap_cap)
        return PDR_ETOOBIG;
    t->at_ns = at_ns;
    t->idx = eng->heap_len;
    eng->heap[eng->heap_len++] = t;
    heap_up(eng, t->idx);
    return 0;
}

void pdr__timer_disarm(pdr_xfer_engine_t *eng, struct pdr__timer *t)
{
    size_t i = t->idx;
    if (i == SIZE_MAX)
        return;
    t->idx = SIZE_MAX;
    size_t last = --eng->heap_len;
    if (i != last) {
        eng->heap[i] = eng->heap[last];
        eng->heap[i]->idx = i;
        heap_up(eng, i);
        heap_down(eng, i);
    }
}

/* ---- parked fetches (I/O thread) ---- */

static size_t parked_bucket(const pdr_xfer_engine_t *eng, uint64_t room)
{
    return (size_t)((room * 0x9E3779B97F4A7C15ull) >> 32) & (eng->nbuckets - 1);
}

struct pdr__parked *pdr__parked_find(pdr_xfer_engine_t *eng, uint64_t room)
{
    for (struct pdr__parked *p = eng->parked[parked_bucket(eng, room)]; p != NULL; p = p->hnext)
        if (p->room == room)
            return p;
    return NULL;
}

void pdr__parked_insert(pdr_xfer_engine_t *eng, struct pdr__parked *p)
{
    size_t b = parked_bucket(eng, p->room);
    p->hnext = eng->parked[b];
    eng->parked[b] = p;
    eng->nparked++;
}

void pdr__parked_remove(pdr_xfer_engine_t *eng, struct pdr__parked *p)
{
    struct pdr__parked **pp = &eng->parked[parked_bucket(eng, p->room)];
    while (*pp != NULL && *pp != p)
        pp = &(*pp)->hnext;
    if (*pp == p) {
        *pp = p->hnext;
        eng->nparked--;
    }
    pdr__timer_disarm(eng, &p->timer);
}

/* ---- completion ---- */

void pdr__op_complete(pdr_xfer_engine_t *eng, struct pdr__op *op, int status, int notify_code)
{
    if (op->state != PDR__OP_QUEUED)
        eng->be->abort(eng, op, notify_code);
    pdr__timer_disarm(eng, &op->timer);
    pthread_mutex_lock(&eng->lock);
    room_remove(eng, op);
    pthread_mutex_unlock(&eng->lock);
    uint64_t bytes = status == 0 ? op->total : op->pos;
    if (op->cb != NULL)
        op->cb(op->arg, op->room, status, bytes);
    free(op->segs);
    free(op);
}

/* ---- the I/O thread ---- */

/* Takes the queued commands. Returns 1 when the engine is closing. */
static int drain_commands(pdr_xfer_engine_t *eng)
{
    pthread_mutex_lock(&eng->lock);
    struct pdr__op *q = eng->q_head;
    struct pdr__cancel *c = eng->c_head;
    eng->q_head = eng->q_tail = NULL;
    eng->c_head = eng->c_tail = NULL;
    eng->wake_pending = 0;
    int closing = eng->closing;
    pthread_mutex_unlock(&eng->lock);

    while (q != NULL) {
        struct pdr__op *op = q;
        q = op->qnext;
        op->qnext = NULL;
        if (closing)
            continue; /* still in the room table: failed with PDR_ECLOSED by shutdown */
        op->state = PDR__OP_WAITING;
        uint64_t at = op->timer.at_ns;
        op->timer.idx = SIZE_MAX;
        if (pdr__timer_arm(eng, &op->timer, at) != 0) {
            pdr__op_complete(eng, op, PDR_ETOOBIG, 0);
            continue;
        }
        if (op->kind == PDR__OP_PUSH)
            eng->be->start_push(eng, op);
        else
            eng->be->start_pull(eng, op);
    }
    while (c != NULL) {
        struct pdr__cancel *n = c->next;
        if (!closing) {
            for (int kind = PDR__OP_PUSH; kind <= PDR__OP_PULL; kind++) {
                pthread_mutex_lock(&eng->lock);
                struct pdr__op *op = pdr__room_find(eng, c->room, kind);
                pthread_mutex_unlock(&eng->lock);
                if (op != NULL && op->state != PDR__OP_QUEUED)
                    pdr__op_complete(eng, op, PDR_ECANCELED, PDR_ECANCELED);
            }
        }
        free(c);
        c = n;
    }
    return closing;
}

static void fire_timers(pdr_xfer_engine_t *eng, uint64_t now)
{
    while (eng->heap_len > 0 && eng->heap[0]->at_ns <= now) {
        struct pdr__timer *t = eng->heap[0];
        pdr__timer_disarm(eng, t);
        if (t->what == PDR__TIMER_PARKED) {
            eng->be->parked_expired(eng, (struct pdr__parked *)t);
            continue;
        }
        struct pdr__op *op = (struct pdr__op *)t;
        int status = PDR_ETIMEDOUT;
        /* The peer answered but never had the room: say so rather than "timed out". */
        if (op->kind == PDR__OP_PULL && op->state == PDR__OP_PARKED)
            status = PDR_ENOROOM;
        pdr__op_complete(eng, op, status, PDR_ETIMEDOUT);
    }
}

static int next_timeout_ms(pdr_xfer_engine_t *eng, uint64_t now)
{
    int ms = eng->be->tick(eng, now);
    if (eng->heap_len > 0) {
        uint64_t at = eng->heap[0]->at_ns;
        uint64_t d = at > now ? (at - now + 999999) / 1000000 : 0;
        if (ms < 0 || d < (uint64_t)ms)
            ms = (int)(d > 60000 ? 60000 : d);
    }
    return ms;
}

static void fail_all(pdr_xfer_engine_t *eng, int status)
{
    for (;;) {
        struct pdr__op *op = NULL;
        pthread_mutex_lock(&eng->lock);
        for (size_t b = 0; b < eng->nbuckets && op == NULL; b++)
            op = eng->rooms[b];
        pthread_mutex_unlock(&eng->lock);
        if (op == NULL)
            return;
        pdr__op_complete(eng, op, status, 0);
    }
}

static void *io_main(void *arg)
{
    pdr_xfer_engine_t *eng = arg;
    struct epoll_event evs[64];
    for (;;) {
        int timeout = next_timeout_ms(eng, pdr_now_ns());
        int n = epoll_wait(eng->epfd, evs, 64, timeout);
        if (n < 0)
            n = 0; /* EINTR */
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == &eng->wake_tag) {
                uint64_t v;
                ssize_t r = read(eng->wakefd, &v, sizeof(v));
                (void)r;
            } else {
                eng->be->on_event(eng, evs[i].data.ptr, evs[i].events);
            }
        }
        if (drain_commands(eng))
            break;
        fire_timers(eng, pdr_now_ns());
        eng->be->after_turn(eng);
    }
    fail_all(eng, PDR_ECLOSED);
    eng->be->shutdown(eng);
    return NULL;
}

/* ---- public API ---- */

static size_t pow2_at_least(size_t v)
{
    size_t p = 64;
    while (p < v)
        p <<= 1;
    return p;
}

static void engine_free(pdr_xfer_engine_t *eng)
{
    if (eng->epfd >= 0)
        close(eng->epfd);
    if (eng->wakefd >= 0)
        close(eng->wakefd);
    while (eng->mem != NULL) {
        struct pdr_xfer_memreg *m = eng->mem;
        eng->mem = m->next;
        free(m);
    }
    free(eng->rooms);
    free(eng->parked);
    free(eng->heap);
    pthread_mutex_destroy(&eng->lock);
    free(eng);
}

pdr_xfer_engine_t *pdr_xfer_engine_create(const pdr_xfer_opts_t *opts, int *err)
{
    int dummy;
    if (err == NULL)
        err = &dummy;
    pdr_xfer_opts_t o = {0};
    if (opts != NULL)
        o = *opts;
    if (o.listen_port < 0 || o.listen_port > 65535 || o.chunk_bytes > PDR_XFER_MAX_CHUNK ||
        o.max_segments > PDR_XFER_WIRE_MAX_SEGS || o.max_rooms > (1u << 24)) {
        *err = PDR_EINVAL;
        return NULL;
    }
    if (o.default_timeout_ms == 0)
        o.default_timeout_ms = 30000;
    if (o.max_segments == 0)
        o.max_segments = 65536;
    if (o.max_rooms == 0)
        o.max_rooms = 65536;
    if (o.chunk_bytes == 0)
        o.chunk_bytes = 1u << 20;
    if (o.heartbeat_ms == 0)
        o.heartbeat_ms = 1000;
    if (o.heartbeat_timeout_ms == 0)
        o.heartbeat_timeout_ms = 5000;
    if (o.heartbeat_timeout_ms < o.heartbeat_ms)
        o.heartbeat_timeout_ms = o.heartbeat_ms;
    if (o.sock_buf_bytes == 0)
        o.sock_buf_bytes = 4 << 20;

    pdr_xfer_engine_t *eng = calloc(1, sizeof(*eng));
    if (eng == NULL) {
        *err = PDR_ENOMEM;
        return NULL;
    }
    eng->opts = o;
    eng->opts.listen_host = NULL; /* not kept: the caller's string */
    eng->be = &pdr__tcp_backend;
    eng->epfd = eng->wakefd = eng->listen_fd = -1;
    eng->listen_port = -1;
    eng->wake_tag = PDR__IO_WAKE;
    pthread_mutex_init(&eng->lock, NULL);
    eng->nbuckets = pow2_at_least(o.max_rooms / 4);
    eng->rooms = calloc(eng->nbuckets, sizeof(*eng->rooms));
    eng->parked = calloc(eng->nbuckets, sizeof(*eng->parked));
    eng->heap_cap = 2 * o.max_rooms;
    eng->heap = malloc(eng->heap_cap * sizeof(*eng->heap));
    if (eng->rooms == NULL || eng->parked == NULL || eng->heap == NULL) {
        engine_free(eng);
        *err = PDR_ENOMEM;
        return NULL;
    }
    eng->epfd = epoll_create1(EPOLL_CLOEXEC);
    eng->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (eng->epfd < 0 || eng->wakefd < 0) {
        engine_free(eng);
        *err = PDR_EIO;
        return NULL;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &eng->wake_tag};
    if (epoll_ctl(eng->epfd, EPOLL_CTL_ADD, eng->wakefd, &ev) != 0) {
        engine_free(eng);
        *err = PDR_EIO;
        return NULL;
    }
    eng->opts.listen_host = opts != NULL ? opts->listen_host : NULL;
    int rc = eng->be->init(eng);
    eng->opts.listen_host = NULL;
    if (rc != 0) {
        eng->be->shutdown(eng);
        engine_free(eng);
        *err = rc;
        return NULL;
    }
    if (pthread_create(&eng->thread, NULL, io_main, eng) != 0) {
        eng->be->shutdown(eng);
        engine_free(eng);
        *err = PDR_ENOMEM;
        return NULL;
    }
    eng->thread_started = 1;
    *err = 0;
    return eng;
}

int pdr_xfer_listen_port(const pdr_xfer_engine_t *eng)
{
    return eng != NULL ? eng->listen_port : -1;
}

static void wake(pdr_xfer_engine_t *eng)
{
    /* eng->lock held */
    if (!eng->wake_pending) {
        eng->wake_pending = 1;
        uint64_t one = 1;
        ssize_t r = write(eng->wakefd, &one, sizeof(one));
        (void)r; /* EAGAIN only when the counter is already non-zero: the loop wakes anyway */
    }
}

void pdr_xfer_engine_destroy(pdr_xfer_engine_t *eng)
{
    if (eng == NULL)
        return;
    pthread_mutex_lock(&eng->lock);
    eng->closing = 1;
    eng->wake_pending = 0;
    wake(eng);
    pthread_mutex_unlock(&eng->lock);
    if (eng->thread_started)
        pthread_join(eng->thread, NULL);
    engine_free(eng);
}

int pdr_xfer_mem_register(pdr_xfer_engine_t *eng, void *addr, size_t len, int kind)
{
    if (eng == NULL || (addr == NULL && len > 0))
        return PDR_EINVAL;
    if (kind != PDR_XFER_MEM_HOST)
        return PDR_ENOTSUP;
    struct pdr_xfer_memreg *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return PDR_ENOMEM;
    m->addr = addr;
    m->len = len;
    m->kind = kind;
    pthread_mutex_lock(&eng->lock);
    m->next = eng->mem;
    eng->mem = m;
    pthread_mutex_unlock(&eng->lock);
    return 0;
}

int pdr_xfer_mem_unregister(pdr_xfer_engine_t *eng, void *addr)
{
    if (eng == NULL)
        return PDR_EINVAL;
    pthread_mutex_lock(&eng->lock);
    for (struct pdr_xfer_memreg **pp = &eng->mem; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->addr == addr) {
            struct pdr_xfer_memreg *m = *pp;
            *pp = m->next;
            pthread_mutex_unlock(&eng->lock);
            free(m);
            return 0;
        }
    }
    pthread_mutex_unlock(&eng->lock);
    return PDR_ENOROOM;
}

static int op_new(pdr_xfer_engine_t *eng, int kind, uint64_t room, const pdr_xfer_seg_t *segs, size_t nseg,
                  uint32_t timeout_ms, pdr_xfer_done_cb cb, void *arg, struct pdr__op **out)
{
    if (eng == NULL || (segs == NULL && nseg > 0))
        return PDR_EINVAL;
    if (nseg > eng->opts.max_segments)
        return PDR_ETOOBIG;
    uint64_t total = 0;
    for (size_t i = 0; i < nseg; i++) {
        if (segs[i].addr == NULL && segs[i].len > 0)
            return PDR_EINVAL;
        if (segs[i].len > UINT64_MAX - total)
            return PDR_EINVAL;
        total += segs[i].len;
    }
    struct pdr__op *op = calloc(1, sizeof(*op));
    if (op == NULL)
        return PDR_ENOMEM;
    if (nseg > 0) {
        op->segs = malloc(nseg * sizeof(*segs));
        if (op->segs == NULL) {
            free(op);
            return PDR_ENOMEM;
        }
        memcpy(op->segs, segs, nseg * sizeof(*segs));
    }
    op->timer.idx = SIZE_MAX;
    op->timer.what = PDR__TIMER_OP;
    op->kind = kind;
    op->room = room;
    op->nseg = nseg;
    op->total = total;
    op->timeout_ms = timeout_ms != 0 ? timeout_ms : eng->opts.default_timeout_ms;
    op->timer.at_ns = pdr_now_ns() + (uint64_t)op->timeout_ms * 1000000u;
    op->cb = cb;
    op->arg = arg;
    *out = op;
    return 0;
}

static int op_post(pdr_xfer_engine_t *eng, struct pdr__op *op)
{
    int rc = 0;
    pthread_mutex_lock(&eng->lock);
    if (eng->closing)
        rc = PDR_ECLOSED;
    else if (pdr__room_find(eng, op->room, op->kind) != NULL)
        rc = PDR_EEXIST;
    else if (eng->nops >= eng->opts.max_rooms)
        rc = PDR_ETOOBIG;
    if (rc == 0) {
        if (op->kind == PDR__OP_PULL)
            op->xid = ++eng->next_xid;
        size_t b = room_bucket(eng, op->room, op->kind);
        op->hnext = eng->rooms[b];
        eng->rooms[b] = op;
        eng->nops++;
        if (eng->q_tail != NULL)
            eng->q_tail->qnext = op;
        else
            eng->q_head = op;
        eng->q_tail = op;
        wake(eng);
    }
    pthread_mutex_unlock(&eng->lock);
    if (rc != 0) {
        free(op->segs);
        free(op);
    }
    return rc;
}

int pdr_xfer_push(pdr_xfer_engine_t *eng, uint64_t room, const pdr_xfer_seg_t *segs, size_t nseg,
                  uint32_t timeout_ms, pdr_xfer_done_cb cb, void *arg)
{
    struct pdr__op *op;
    int rc = op_new(eng, PDR__OP_PUSH, room, segs, nseg, timeout_ms, cb, arg, &op);
    return rc != 0 ? rc : op_post(eng, op);
}

int pdr_xfer_pull(pdr_xfer_engine_t *eng, const char *host, int port, uint64_t room,
                  const pdr_xfer_seg_t *segs, size_t nseg, uint32_t timeout_ms, pdr_xfer_done_cb cb,
                  void *arg)
{
    if (host == NULL || port <= 0 || port > 65535)
        return PDR_EINVAL;
    size_t hlen = strlen(host);
    if (hlen == 0 || hlen > 80)
        return PDR_EINVAL;
    struct pdr__op *op;
    int rc = op_new(eng, PDR__OP_PULL, room, segs, nseg, timeout_ms, cb, arg, &op);
    if (rc != 0)
        return rc;
    /* Brackets around an IPv6 literal are accepted ("[::1]"), as the router writes them. */
    char name[84];
    if (host[0] == '[' && hlen > 2 && host[hlen - 1] == ']')
        snprintf(name, sizeof(name), "%.*s", (int)(hlen - 2), host + 1);
    else
        snprintf(name, sizeof(name), "%s", host);
    char portstr[8];
    snprintf(portstr, sizeof(portstr), "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    if (getaddrinfo(name, portstr, &hints, &res) != 0 || res == NULL || res->ai_addrlen > sizeof(op->addr)) {
        if (res != NULL)
            freeaddrinfo(res);
        pdr_warn("transport: cannot resolve peer host '%s'", name);
        free(op->segs);
        free(op);
        return PDR_EINVAL;
    }
    memcpy(&op->addr, res->ai_addr, res->ai_addrlen);
    op->addrlen = res->ai_addrlen;
    freeaddrinfo(res);
    snprintf(op->peer, sizeof(op->peer), "%s:%d", name, port);
    return op_post(eng, op);
}

int pdr_xfer_cancel(pdr_xfer_engine_t *eng, uint64_t room)
{
    if (eng == NULL)
        return PDR_EINVAL;
    struct pdr__cancel *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return PDR_ENOMEM;
    c->room = room;
    int rc = 0;
    pthread_mutex_lock(&eng->lock);
    if (eng->closing)
        rc = PDR_ECLOSED;
    else if (pdr__room_find(eng, room, PDR__OP_PUSH) == NULL &&
             pdr__room_find(eng, room, PDR__OP_PULL) == NULL)
        rc = PDR_ENOROOM;
    if (rc == 0) {
        if (eng->c_tail != NULL)
            eng->c_tail->next = c;
        else
            eng->c_head = c;
        eng->c_tail = c;
        wake(eng);
    }
    pthread_mutex_unlock(&eng->lock);
    if (rc != 0)
        free(c);
    return rc;
}
