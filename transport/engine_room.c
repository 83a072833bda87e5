/*
 * The engine's rooms: the room table and the ready list (under eng->lock), the deadline heap and the
 * parked-fetch table (I/O thread 0), completion (pdr__op_complete, I/O thread 0 only), and the public
 * API's room and memory functions (any thread): push, pull and cancel, which post to the command
 * queue, and memory registration.
 * engine.c has the engine's lifecycle and the I/O threads' loops.
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
    for (struct pdr__op *op =
             PDR_DLINK_ENTRY(eng->rooms[room_bucket(eng, room, kind)], struct pdr__op, hlink);
         op != NULL; op = PDR_DLINK_ENTRY(op->hlink.next, struct pdr__op, hlink))
        if (op->room == room && op->kind == kind)
            return op;
    return NULL;
}

static void room_remove(pdr_xfer_engine_t *eng, struct pdr__op *op)
{
    if (pdr_dlink_linked(&op->hlink)) {
        pdr_dlink_unlink(&op->hlink);
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
    for (struct pdr__parked *p =
             PDR_DLINK_ENTRY(eng->parked[parked_bucket(eng, room)], struct pdr__parked, hlink);
         p != NULL; p = PDR_DLINK_ENTRY(p->hlink.next, struct pdr__parked, hlink))
        if (p->room == room)
            return p;
    return NULL;
}

void pdr__parked_insert(pdr_xfer_engine_t *eng, struct pdr__parked *p)
{
    pdr_dlink_push(&eng->parked[parked_bucket(eng, p->room)], &p->hlink);
    eng->nparked++;
}

void pdr__parked_remove(pdr_xfer_engine_t *eng, struct pdr__parked *p)
{
    if (pdr_dlink_linked(&p->hlink)) {
        pdr_dlink_unlink(&p->hlink);
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
        pdr__parts_free(op);
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
        pdr_dqueue_append(&eng->ready, &op->rlink);
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
    pdr_dlink_push(&eng->mem, &m->link);
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
    for (struct pdr_xfer_memreg *m = PDR_DLINK_ENTRY(eng->mem, struct pdr_xfer_memreg, link); m != NULL;
         m = PDR_DLINK_ENTRY(m->link.next, struct pdr_xfer_memreg, link)) {
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

int pdr__mem_device_locked(pdr_xfer_engine_t *eng, const void *addr, size_t len)
{
    return mem_device(eng, addr, len);
}

int pdr_xfer_mem_unregister(pdr_xfer_engine_t *eng, void *addr)
{
    if (eng == NULL)
        return PDR_EINVAL;
    pthread_mutex_lock(&eng->lock);
    for (struct pdr_xfer_memreg *m = PDR_DLINK_ENTRY(eng->mem, struct pdr_xfer_memreg, link); m != NULL;
         m = PDR_DLINK_ENTRY(m->link.next, struct pdr_xfer_memreg, link)) {
        if (m->addr == addr) {
            pdr_dlink_unlink(&m->link);
            pdr__movers_mem_unregistered(eng, m->addr, m->len); /* takes only its own lock */
            if (m->rdma_refs > 0) {
                /* RDMA rooms in flight still use its MR: the last of them releases it (mover_rdma.c). */
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
        pdr_dlink_push(&eng->rooms[room_bucket(eng, op->room, op->kind)], &op->hlink);
        eng->nops++;
        pdr_dqueue_append(&eng->cmds, &op->qlink);
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

int pdr_xfer_push_open(pdr_xfer_engine_t *eng, uint64_t room, uint64_t total, uint32_t timeout_ms,
                       pdr_xfer_info_cb cb, void *arg)
{
    if (eng == NULL)
        return PDR_EINVAL;
    if (eng->backend_forced == PDR__BE_RDMA)
        return PDR_ENOTSUP; /* parts are not written over RDMA (docs/internals/transport.md) */
    struct pdr__op *op;
    int rc = op_new(eng, PDR__OP_PUSH, room, NULL, 0, timeout_ms, NULL, arg, &op);
    if (rc != 0)
        return rc;
    op->parted = 1;
    op->total = total;
    op->info_cb = cb;
    return op_post(eng, op);
}

static int pull_common(pdr_xfer_engine_t *eng, const char *host, int port, uint64_t room,
                       const pdr_xfer_seg_t *segs, size_t nseg, uint32_t timeout_ms, pdr_xfer_done_cb cb,
                       pdr_xfer_info_cb icb, void *arg)
{
    if (host == NULL || port <= 0 || port > 65535)
        return PDR_EINVAL;
    size_t hlen = strlen(host);
    /* Brackets around an IPv6 literal are accepted ("[::1]"), as the router writes them. */
    char name[84];
    if (hlen == 0 || hlen > 80 || pdr_host_copy(host, hlen, name, sizeof(name)) != 0)
        return PDR_EINVAL;
    struct pdr__op *op;
    int rc = op_new(eng, PDR__OP_PULL, room, segs, nseg, timeout_ms, cb, arg, &op);
    if (rc != 0)
        return rc;
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
        pdr_dqueue_append(&eng->cancels, &c->link);
        pdr__io_wake_locked(eng, &eng->io[0]);
    }
    pthread_mutex_unlock(&eng->lock);
    if (rc != 0)
        free(c);
    return rc;
}
