/*
 * The engine core: public API (any thread), the room table, command queue and ready list (under
 * eng->lock), the I/O threads' loops, the deadline heap and the parked-fetch table (I/O thread 0).
 * The TCP backend (conn.c, session.c, ctl.c, mover_*.c) does the byte moving through the pdr__tcp_*
 * entry points declared in transport_internal.h, which also has the threading story.
 *
 * Invariants: an accepted op is completed exactly once, on I/O thread 0, by pdr__op_complete; the
 * heap and parked table are sized at creation (2 × max_rooms entries), so arming a deadline never
 * allocates; no API call waits for an I/O thread except pdr_xfer_engine_destroy.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include "gpu_cuda.h"
#include "err.h"
#include "rdma.h"
#include "transport_internal.h"
#include "util.h"

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

void pdr__op_unref(pdr_xfer_engine_t *eng, struct pdr__op *op)
{
    pthread_mutex_lock(&eng->lock);
    int last = --op->refs == 0;
    pthread_mutex_unlock(&eng->lock);
    if (last) {
        free(op->segs);
        free(op->cum);
        free(op);
    }
}

void pdr__op_ref(pdr_xfer_engine_t *eng, struct pdr__op *op)
{
    pthread_mutex_lock(&eng->lock);
    op->refs++;
    pthread_mutex_unlock(&eng->lock);
}

void pdr__op_count(pdr_xfer_engine_t *eng, struct pdr__op *op, uint64_t n, int what)
{
    pthread_mutex_lock(&eng->lock);
    if (!__atomic_load_n(&op->dead, __ATOMIC_SEQ_CST)) {
        uint64_t *done = what == PDR__READY_SENT ? &op->sent : &op->got;
        *done += n;
        if (*done == op->total)
            pdr__op_ready_locked(eng, op, what);
    }
    pthread_mutex_unlock(&eng->lock);
}

struct pdr__op *pdr__room_get(pdr_xfer_engine_t *eng, uint64_t room, int kind)
{
    pthread_mutex_lock(&eng->lock);
    struct pdr__op *op = pdr__room_find(eng, room, kind);
    pthread_mutex_unlock(&eng->lock);
    return op;
}

void pdr__io_wake_locked(pdr_xfer_engine_t *eng, struct pdr__io *io)
{
    (void)eng;
    if (!io->wake_pending) {
        io->wake_pending = 1;
        uint64_t one = 1;
        ssize_t r = write(io->wakefd, &one, sizeof(one));
        (void)r; /* EAGAIN only when the counter is already non-zero: the loop wakes anyway */
    }
}

void pdr__stats_staging(pdr_xfer_engine_t *eng, int64_t delta)
{
    uint64_t now = __atomic_add_fetch(&eng->st_staging, (uint64_t)delta, __ATOMIC_RELAXED);
    uint64_t peak = __atomic_load_n(&eng->st_staging_peak, __ATOMIC_RELAXED);
    while (delta > 0 && now > peak &&
           !__atomic_compare_exchange_n(&eng->st_staging_peak, &peak, now, 0, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED)) {
    }
}

void pdr__op_ready_locked(pdr_xfer_engine_t *eng, struct pdr__op *op, int what)
{
    if (op->ready == 0) {
        op->refs++;
        op->rnext = NULL;
        if (eng->r_tail != NULL)
            eng->r_tail->rnext = op;
        else
            eng->r_head = op;
        eng->r_tail = op;
    }
    op->ready |= what;
    pdr__io_wake_locked(eng, &eng->io[0]);
}

void pdr__op_complete(pdr_xfer_engine_t *eng, struct pdr__op *op, int status, int notify_code)
{
    if (__atomic_load_n(&op->dead, __ATOMIC_SEQ_CST))
        return;
    __atomic_store_n(&op->dead, 1, __ATOMIC_SEQ_CST);
    if (op->state != PDR__OP_QUEUED)
        pdr__tcp_abort(eng, op, notify_code);
    /* A data thread may be inside one syscall or GPU copy on this room's memory: bounded, so wait it out
     * (thread 0 first finishes its own copies: nobody else would poll them). */
    pdr__movers_quiesce(eng, op);
    while (__atomic_load_n(&op->busy, __ATOMIC_SEQ_CST) != 0)
        sched_yield();
    pdr__timer_disarm(eng, &op->timer);
    pthread_mutex_lock(&eng->lock);
    room_remove(eng, op);
    uint64_t bytes = status == 0 ? op->total : (op->kind == PDR__OP_PUSH ? op->sent : op->got);
    pthread_mutex_unlock(&eng->lock);
    __atomic_add_fetch(status == 0 ? &eng->st_transfers : &eng->st_failures, 1, __ATOMIC_RELAXED);
    if (status == 0)
        __atomic_add_fetch(op->kind == PDR__OP_PUSH ? &eng->st_bytes_sent : &eng->st_bytes_received,
                           op->total, __ATOMIC_RELAXED);
    if (op->cb != NULL)
        op->cb(op->arg, op->room, status, bytes);
    if (op->info_cb != NULL) {
        pdr_xfer_info_t info = {.status = status,
                                .bytes = bytes,
                                .backend = op->backend,
                                .usec = (pdr_now_ns() - op->t_post_ns) / 1000};
        op->info_cb(op->arg, op->room, &info);
    }
    pdr__op_unref(eng, op);
}

/* ---- the I/O threads ---- */

/* Takes the queued commands and the ready list. Returns 1 when the engine is closing. */
static int drain_commands(pdr_xfer_engine_t *eng)
{
    pthread_mutex_lock(&eng->lock);
    struct pdr__op *q = eng->q_head;
    struct pdr__cancel *c = eng->c_head;
    struct pdr__op *r = eng->r_head;
    eng->q_head = eng->q_tail = NULL;
    eng->c_head = eng->c_tail = NULL;
    eng->r_head = eng->r_tail = NULL;
    eng->io[0].wake_pending = 0;
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
            pdr__tcp_start_push(eng, op);
        else
            pdr__tcp_start_pull(eng, op);
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
    while (r != NULL) {
        struct pdr__op *op = r;
        r = op->rnext;
        pthread_mutex_lock(&eng->lock);
        int what = op->ready;
        op->ready = 0;
        op->rnext = NULL;
        pthread_mutex_unlock(&eng->lock);
        if (!closing && !__atomic_load_n(&op->dead, __ATOMIC_SEQ_CST))
            pdr__tcp_ready(eng, op, what);
        pdr__op_unref(eng, op);
    }
    return closing;
}

static void fire_timers(pdr_xfer_engine_t *eng, uint64_t now)
{
    while (eng->heap_len > 0 && eng->heap[0]->at_ns <= now) {
        struct pdr__timer *t = eng->heap[0];
        pdr__timer_disarm(eng, t);
        if (t->what == PDR__TIMER_PARKED) {
            pdr__tcp_parked_expired(eng, (struct pdr__parked *)t);
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

static int next_timeout_ms(pdr_xfer_engine_t *eng, struct pdr__io *io, uint64_t now)
{
    int ms = pdr__tcp_tick(eng, io, now);
    if (io->idx == 0 && eng->heap_len > 0) {
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

struct io_arg {
    pdr_xfer_engine_t *eng;
    struct pdr__io *io;
};

static void io_loop(pdr_xfer_engine_t *eng, struct pdr__io *io)
{
    struct epoll_event evs[64];
    for (;;) {
        io->copy_wait = 0;
        int timeout = next_timeout_ms(eng, io, pdr_now_ns());
        int n;
        if (timeout == 0 && io->copy_wait) {
            /* Only GPU copies are pending (a 1 MiB copy takes ~35 us): spinning on cuEventQuery starved
             * the driver (0.1 GB/s measured); a 20 us wait lets them finish. */
            struct timespec ts = {0, 20000};
            n = epoll_pwait2(io->epfd, evs, 64, &ts, NULL);
            if (n < 0 && errno == ENOSYS)
                n = epoll_wait(io->epfd, evs, 64, 0);
        } else {
            n = epoll_wait(io->epfd, evs, 64, timeout);
        }
        if (n < 0)
            n = 0; /* EINTR */
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == &io->wake_tag) {
                uint64_t v;
                ssize_t r = read(io->wakefd, &v, sizeof(v));
                (void)r;
            } else {
                pdr__tcp_on_event(eng, io, evs[i].data.ptr, evs[i].events);
            }
        }
        if (io->idx == 0) {
            if (drain_commands(eng))
                break;
            fire_timers(eng, pdr_now_ns());
        } else {
            pthread_mutex_lock(&eng->lock);
            int closing = eng->closing;
            pthread_mutex_unlock(&eng->lock);
            if (closing)
                break;
        }
        pdr__tcp_after_turn(eng, io);
    }
    if (io->idx == 0)
        fail_all(eng, PDR_ECLOSED);
}

static void *io_thread(void *arg)
{
    struct io_arg *a = arg;
    pdr_xfer_engine_t *eng = a->eng;
    struct pdr__io *io = a->io;
    free(a);
    io_loop(eng, io);
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
    for (int i = 0; i < eng->nio && eng->io != NULL; i++) {
        if (eng->io[i].epfd >= 0)
            close(eng->io[i].epfd);
        if (eng->io[i].wakefd >= 0)
            close(eng->io[i].wakefd);
    }
    free(eng->io);
    while (eng->mem != NULL) {
        struct pdr_xfer_memreg *m = eng->mem;
        eng->mem = m->next;
        pdr__rdma_dereg(m->rdma_mr); /* NULL: the backend's shutdown released it with its context */
        free(m);
    }
    free(eng->rooms);
    free(eng->parked);
    free(eng->heap);
    pthread_mutex_destroy(&eng->lock);
    free(eng);
}

static int parse_backend(const char *name)
{
    if (name == NULL || strcmp(name, "auto") == 0)
        return PDR__BE_AUTO;
    if (strcmp(name, "tcp") == 0)
        return PDR__BE_TCP;
    if (strcmp(name, "rdma") == 0)
        return PDR__BE_RDMA;
    if (strcmp(name, "cuda_ipc") == 0)
        return PDR__BE_CUDA_IPC;
    return -1;
}

static void join_threads(pdr_xfer_engine_t *eng)
{
    pthread_mutex_lock(&eng->lock);
    eng->closing = 1;
    for (int i = 0; i < eng->nio; i++) {
        eng->io[i].wake_pending = 0;
        pdr__io_wake_locked(eng, &eng->io[i]);
    }
    pthread_mutex_unlock(&eng->lock);
    for (int i = 0; i < eng->nio; i++)
        if (eng->io[i].started)
            pthread_join(eng->io[i].thread, NULL);
}

pdr_xfer_engine_t *pdr_xfer_engine_create(const pdr_xfer_opts_t *opts, int *err)
{
    int dummy;
    if (err == NULL)
        err = &dummy;
    pdr_xfer_opts_t o = {0};
    if (opts != NULL)
        o = *opts;
    int be = parse_backend(o.backend);
    if (o.listen_port < 0 || o.listen_port > 65535 || o.chunk_bytes > PDR_XFER_MAX_CHUNK ||
        o.max_segments > PDR_XFER_WIRE_MAX_SEGS || o.max_rooms > (1u << 24) || o.io_threads < 0 ||
        o.io_threads > 64 || o.conns_per_peer < 0 || o.conns_per_peer > PDR_XFER_HELLO_MAX_CONNS ||
        o.staging_chunks > 1024 || be < 0) {
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
    if (o.io_threads == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        o.io_threads = cores < 1 ? 1 : cores > 4 ? 4 : (int)cores;
    }
    if (o.conns_per_peer == 0)
        o.conns_per_peer = 4;
    if (o.staging_chunks == 0)
        o.staging_chunks = 4;
    o.backend = NULL; /* not kept: the caller's string */

    pdr_xfer_engine_t *eng = calloc(1, sizeof(*eng));
    if (eng == NULL) {
        *err = PDR_ENOMEM;
        return NULL;
    }
    eng->opts = o;
    eng->opts.listen_host = NULL; /* not kept: the caller's string */
    eng->backend_forced = be;
    eng->listen_fd = -1;
    eng->listen_port = -1;
    pthread_mutex_init(&eng->lock, NULL);
    eng->nio = o.io_threads;
    eng->io = calloc((size_t)eng->nio, sizeof(*eng->io));
    eng->nbuckets = pow2_at_least(o.max_rooms / 4);
    eng->rooms = calloc(eng->nbuckets, sizeof(*eng->rooms));
    eng->parked = calloc(eng->nbuckets, sizeof(*eng->parked));
    eng->heap_cap = 2 * o.max_rooms;
    eng->heap = malloc(eng->heap_cap * sizeof(*eng->heap));
    if (eng->io == NULL || eng->rooms == NULL || eng->parked == NULL || eng->heap == NULL) {
        if (eng->io == NULL)
            eng->nio = 0;
        engine_free(eng);
        *err = PDR_ENOMEM;
        return NULL;
    }
    for (int i = 0; i < eng->nio; i++) {
        struct pdr__io *io = &eng->io[i];
        io->wake_tag = PDR__IO_WAKE;
        io->idx = i;
        io->cuda_dev = -1;
        io->epfd = epoll_create1(EPOLL_CLOEXEC);
        io->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &io->wake_tag};
        if (io->epfd < 0 || io->wakefd < 0 || epoll_ctl(io->epfd, EPOLL_CTL_ADD, io->wakefd, &ev) != 0) {
            engine_free(eng);
            *err = PDR_EIO;
            return NULL;
        }
    }
    eng->opts.listen_host = opts != NULL ? opts->listen_host : NULL;
    int rc = pdr__tcp_init(eng);
    eng->opts.listen_host = NULL;
    if (rc != 0) {
        pdr__tcp_shutdown(eng);
        engine_free(eng);
        *err = rc;
        return NULL;
    }
    for (int i = 0; i < eng->nio; i++) {
        struct io_arg *a = malloc(sizeof(*a));
        if (a != NULL) {
            a->eng = eng;
            a->io = &eng->io[i];
        }
        if (a == NULL || pthread_create(&eng->io[i].thread, NULL, io_thread, a) != 0) {
            free(a);
            join_threads(eng);
            pdr__tcp_shutdown(eng);
            engine_free(eng);
            *err = PDR_ENOMEM;
            return NULL;
        }
        eng->io[i].started = 1;
    }
    *err = 0;
    return eng;
}

int pdr_xfer_listen_port(const pdr_xfer_engine_t *eng)
{
    return eng != NULL ? eng->listen_port : -1;
}

void pdr_xfer_engine_destroy(pdr_xfer_engine_t *eng)
{
    if (eng == NULL)
        return;
    join_threads(eng);
    pdr__tcp_shutdown(eng);
    /* Ready entries posted by data threads after thread 0 stopped. */
    while (eng->r_head != NULL) {
        struct pdr__op *op = eng->r_head;
        eng->r_head = op->rnext;
        pdr__op_unref(eng, op);
    }
    engine_free(eng);
}

void pdr_xfer_get_stats(pdr_xfer_engine_t *eng, pdr_xfer_stats_t *out)
{
    if (out == NULL)
        return;
    memset(out, 0, sizeof(*out));
    if (eng == NULL)
        return;
    out->transfers = __atomic_load_n(&eng->st_transfers, __ATOMIC_RELAXED);
    out->failures = __atomic_load_n(&eng->st_failures, __ATOMIC_RELAXED);
    out->bytes_sent = __atomic_load_n(&eng->st_bytes_sent, __ATOMIC_RELAXED);
    out->bytes_received = __atomic_load_n(&eng->st_bytes_received, __ATOMIC_RELAXED);
    out->staging_bytes = __atomic_load_n(&eng->st_staging, __ATOMIC_RELAXED);
    out->staging_peak_bytes = __atomic_load_n(&eng->st_staging_peak, __ATOMIC_RELAXED);
}

int pdr_xfer_mem_register(pdr_xfer_engine_t *eng, void *addr, size_t len, int kind)
{
    if (eng == NULL || (addr == NULL && len > 0))
        return PDR_EINVAL;
    if (kind != PDR_XFER_MEM_HOST && kind != PDR_XFER_MEM_CUDA && kind != PDR_XFER_MEM_AUTO)
        return PDR_EINVAL;
    int ordinal = -1;
    if (kind != PDR_XFER_MEM_HOST) {
        /* Without a driver CUDA memory cannot exist: CUDA is refused, AUTO is host memory. */
        if (pdr__cuda_init() != 0) {
            if (kind == PDR_XFER_MEM_CUDA)
                return PDR_ENOTSUP;
            kind = PDR_XFER_MEM_HOST;
        } else {
            int is_dev = 0;
            int rc = pdr__cuda_ptr_info(addr, &is_dev, &ordinal);
            if (rc != 0)
                return rc;
            if (kind == PDR_XFER_MEM_CUDA && !is_dev)
                return PDR_EINVAL; /* not device memory: say so rather than staging host bytes */
            kind = is_dev ? PDR_XFER_MEM_CUDA : PDR_XFER_MEM_HOST;
            if (!is_dev)
                ordinal = -1;
        }
    }
    struct pdr_xfer_memreg *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return PDR_ENOMEM;
    m->addr = addr;
    m->len = len;
    m->kind = kind;
    m->ordinal = ordinal;
    pthread_mutex_lock(&eng->lock);
    m->next = eng->mem;
    eng->mem = m;
    if (kind == PDR_XFER_MEM_CUDA)
        eng->has_cuda = 1;
    pthread_mutex_unlock(&eng->lock);
    return 0;
}

/* The device that owns [addr, addr+len): its ordinal if a registered CUDA region holds it, -1 for host
 * memory, -2 if it straddles a CUDA region's edge. eng->lock held. */
static int mem_device(pdr_xfer_engine_t *eng, const void *addr, size_t len)
{
    uintptr_t a = (uintptr_t)addr;
    for (struct pdr_xfer_memreg *m = eng->mem; m != NULL; m = m->next) {
        if (m->kind != PDR_XFER_MEM_CUDA)
            continue;
        uintptr_t b = (uintptr_t)m->addr;
        if (a >= b && a - b < m->len)
            return len <= m->len - (a - b) ? m->ordinal : -2;
        if (a < b && len > b - a)
            return -2;
    }
    return -1;
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
            pdr__movers_mem_unregistered(eng, m->addr, m->len); /* takes only its own lock */
            if (m->rdma_refs > 0) {
                /* RDMA rooms in flight still use its MR: the last of them releases it (mover_rdma.c). */
                m->unlinked = 1;
                pthread_mutex_unlock(&eng->lock);
                return 0;
            }
            pthread_mutex_unlock(&eng->lock);
            pdr__rdma_dereg(m->rdma_mr); /* blocking verbs call, on the caller's thread */
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
    op->cum = malloc((nseg + 1) * sizeof(*op->cum));
    if (nseg > 0)
        op->segs = malloc(nseg * sizeof(*segs));
    if (op->cum == NULL || (nseg > 0 && op->segs == NULL)) {
        free(op->cum);
        free(op->segs);
        free(op);
        return PDR_ENOMEM;
    }
    op->cum[0] = 0;
    for (size_t i = 0; i < nseg; i++) {
        op->segs[i] = segs[i];
        op->cum[i + 1] = op->cum[i] + segs[i].len;
    }
    op->dev = -1;
    if (nseg > 0) {
        /* A room lives in one place: all host memory, or all device memory of one device. */
        pthread_mutex_lock(&eng->lock);
        int dev = -1, first = 1;
        for (size_t i = 0; i < nseg && dev != -2 && eng->mem != NULL; i++) {
            if (segs[i].len == 0)
                continue;
            int d = mem_device(eng, segs[i].addr, segs[i].len);
            if (first)
                dev = d;
            else if (d != dev)
                dev = -2;
            first = 0;
        }
        pthread_mutex_unlock(&eng->lock);
        if (dev == -2) {
            free(op->cum);
            free(op->segs);
            free(op);
            return PDR_EINVAL;
        }
        op->dev = dev;
    }
    op->refs = 1;
    op->backend = "none";
    op->t_post_ns = pdr_now_ns();
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
        pdr__io_wake_locked(eng, &eng->io[0]);
    }
    pthread_mutex_unlock(&eng->lock);
    if (rc != 0) {
        free(op->segs);
        free(op->cum);
        free(op);
    }
    return rc;
}

static int push_common(pdr_xfer_engine_t *eng, uint64_t room, const pdr_xfer_seg_t *segs, size_t nseg,
                       uint32_t timeout_ms, pdr_xfer_done_cb cb, pdr_xfer_info_cb icb, void *arg)
{
    struct pdr__op *op;
    int rc = op_new(eng, PDR__OP_PUSH, room, segs, nseg, timeout_ms, cb, arg, &op);
    if (rc != 0)
        return rc;
    op->info_cb = icb;
    return op_post(eng, op);
}

int pdr_xfer_push(pdr_xfer_engine_t *eng, uint64_t room, const pdr_xfer_seg_t *segs, size_t nseg,
                  uint32_t timeout_ms, pdr_xfer_done_cb cb, void *arg)
{
    return push_common(eng, room, segs, nseg, timeout_ms, cb, NULL, arg);
}

int pdr_xfer_push_ex(pdr_xfer_engine_t *eng, uint64_t room, const pdr_xfer_seg_t *segs, size_t nseg,
                     uint32_t timeout_ms, pdr_xfer_info_cb cb, void *arg)
{
    return push_common(eng, room, segs, nseg, timeout_ms, NULL, cb, arg);
}

void pdr__host_unbracket(const char *host, char *out, size_t cap)
{
    size_t hlen = strlen(host);
    if (host[0] == '[' && hlen > 2 && host[hlen - 1] == ']')
        snprintf(out, cap, "%.*s", (int)(hlen - 2), host + 1);
    else
        snprintf(out, cap, "%s", host);
}

static int pull_common(pdr_xfer_engine_t *eng, const char *host, int port, uint64_t room,
                       const pdr_xfer_seg_t *segs, size_t nseg, uint32_t timeout_ms, pdr_xfer_done_cb cb,
                       pdr_xfer_info_cb icb, void *arg)
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
    pdr__host_unbracket(host, name, sizeof(name));
    char portstr[8];
    snprintf(portstr, sizeof(portstr), "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    if (getaddrinfo(name, portstr, &hints, &res) != 0 || res == NULL || res->ai_addrlen > sizeof(op->addr)) {
        if (res != NULL)
            freeaddrinfo(res);
        pdr_warn("transport: cannot resolve peer host '%s'", name);
        free(op->segs);
        free(op->cum);
        free(op);
        return PDR_EINVAL;
    }
    memcpy(&op->addr, res->ai_addr, res->ai_addrlen);
    op->addrlen = res->ai_addrlen;
    freeaddrinfo(res);
    snprintf(op->peer, sizeof(op->peer), "%s:%d", name, port);
    op->info_cb = icb;
    return op_post(eng, op);
}

int pdr_xfer_pull(pdr_xfer_engine_t *eng, const char *host, int port, uint64_t room,
                  const pdr_xfer_seg_t *segs, size_t nseg, uint32_t timeout_ms, pdr_xfer_done_cb cb,
                  void *arg)
{
    return pull_common(eng, host, port, room, segs, nseg, timeout_ms, cb, NULL, arg);
}

int pdr_xfer_pull_ex(pdr_xfer_engine_t *eng, const char *host, int port, uint64_t room,
                     const pdr_xfer_seg_t *segs, size_t nseg, uint32_t timeout_ms, pdr_xfer_info_cb cb,
                     void *arg)
{
    return pull_common(eng, host, port, room, segs, nseg, timeout_ms, NULL, cb, arg);
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
        pdr__io_wake_locked(eng, &eng->io[0]);
    }
    pthread_mutex_unlock(&eng->lock);
    if (rc != 0)
        free(c);
    return rc;
}
