/*
 * The engine's lifecycle: create (options, tables, the TCP backend, the I/O threads), destroy, the
 * listen port and stats, and the I/O threads' loops (command queue, deadlines, each thread's turn).
 * engine_room.c has the room table, the deadline heap, the parked-fetch table, completion and the
 * public API's room and memory functions. The TCP backend (conn.c, session.c, ctl.c, mover_*.c) does the
 * byte moving through the pdr__tcp_* entry points declared in transport_internal.h, which also has the
 * threading story.
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

/* ---- the I/O threads ---- */

/* Takes the queued commands and the ready list. Returns 1 when the engine is closing. */
static int drain_commands(pdr_xfer_engine_t *eng)
{
    pdr_dqueue_t q, c, r;
    pthread_mutex_lock(&eng->lock);
    pdr_dqueue_move(&q, &eng->cmds);
    pdr_dqueue_move(&c, &eng->cancels);
    pdr_dqueue_move(&r, &eng->ready);
    eng->io[0].wake_pending = 0;
    int closing = eng->closing;
    pthread_mutex_unlock(&eng->lock);

    struct pdr__op *op;
    while ((op = PDR_DLINK_ENTRY(pdr_dqueue_pop(&q), struct pdr__op, qlink)) != NULL) {
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
    pdr_dlink_t *l;
    while ((l = pdr_dqueue_pop(&c)) != NULL) {
        struct pdr__cancel *cn = PDR_DLINK_ITEM(l, struct pdr__cancel, link);
        if (!closing) {
            for (int kind = PDR__OP_PUSH; kind <= PDR__OP_PULL; kind++) {
                pthread_mutex_lock(&eng->lock);
                op = pdr__room_find(eng, cn->room, kind);
                pthread_mutex_unlock(&eng->lock);
                if (op != NULL && op->state != PDR__OP_QUEUED)
                    pdr__op_complete(eng, op, PDR_ECANCELED, PDR_ECANCELED);
            }
        }
        free(cn);
    }
    while ((op = PDR_DLINK_ENTRY(r.head, struct pdr__op, rlink)) != NULL) {
        pthread_mutex_lock(&eng->lock);
        int what = op->ready;
        op->ready = 0;
        pdr_dqueue_unlink(&r, &op->rlink); /* with ready 0 a data thread may append it again */
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
            op = PDR_DLINK_ENTRY(eng->rooms[b], struct pdr__op, hlink);
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
    struct pdr_xfer_memreg *m;
    while ((m = PDR_DLINK_ENTRY(pdr_dlink_pop(&eng->mem), struct pdr_xfer_memreg, link)) != NULL) {
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
    struct pdr__op *op;
    while ((op = PDR_DLINK_ENTRY(pdr_dqueue_pop(&eng->ready), struct pdr__op, rlink)) != NULL)
        pdr__op_unref(eng, op);
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
