/*
 * The CUDA IPC data mover: a decode on the same host offers handles of its device memory (legacy CUDA
 * IPC, or VMM allocations whose descriptors its fd server hands out), the prefill copies device to device
 * and answers IPC_DONE. This file: the prefill's side (opening the handles, the copies, IPC_DONE) and the
 * mover's ops table; mover_ipc_export.c: the decode's side (the FETCH_IPC it offers). Thread 0.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include "gpu_cuda.h"
#include "fdpass.h"
#include "err.h"
#include "rdma.h"
#include "transport_internal.h"
#include "session.h"
#include "util.h"
#include "mover_ipc_internal.h"

/* Doubles the array *arr of *cap elements of size bytes (first: the capacity of an empty one); -1 when
 * out of memory (the array is left as it was). The callers bound *cap. */
int pdr__ipc_grow(void **arr, size_t *cap, size_t first, size_t size)
{
    size_t n = *cap == 0 ? first : 2 * *cap;
    void *p = realloc(*arr, n * size);
    if (p == NULL)
        return -1;
    *arr = p;
    *cap = n;
    return 0;
}

/* A peer allocation this (prefill) session opened: a legacy IPC handle or a VMM mapping. */
struct ipc_map {
    uint8_t handle[PDR_XFER_IPC_HANDLE];
    int dev;
    void *base;
    uint64_t vmm_size; /* > 0: a VMM mapping of that size (pdr__cuda_vmm_unmap), else a legacy IPC one */
};

/* The mover's per-session state (struct pdr__sess's ipc): the peer allocations opened so far. */
struct ipc_sess {
    struct ipc_map *maps;
    size_t n, cap;
};

/* A push whose copies are in flight: its event, on the engine's pending list (op->mv). A push in parts
 * keeps the decode's FETCH_IPC (copied) to copy each part when it is published, and stays on the list
 * until every byte was copied; while its copies are done and parts are still to come it is idle (not
 * polled). */
struct ipc_room {
    struct pdr__op *op;
    void *ev;
    pdr_dlink_t link; /* ipc_engine's ipc_pending (thread 0) */
    uint8_t *body;    /* parts: the FETCH_IPC body, and its tables decoded from it */
    struct pdr_xfer_fetch_desc fd;
    struct pdr_xfer_ipc_desc d;
    uint64_t *dcum;    /* dcum[i]: room offset of destination segment i; nseg + 1 entries */
    uint64_t issued;   /* bytes whose copies were queued */
    uint64_t recorded; /* issued when the event was last recorded */
    int idle;
};

/* ---- CUDA IPC (thread 0) ----
 *
 * A decode on the same host whose destination is device memory sends FETCH_IPC: per destination segment
 * an IPC handle of its allocation and the offset inside it. The prefill (same host per HELLO, source in
 * device memory, backend auto or cuda_ipc) opens each handle once per session (closed when the session
 * dies), binds its source device, copies with cuMemcpyAsync on its own stream, polls the event and then
 * sends IPC_DONE instead of DATA frames. If a handle cannot be opened or a copy cannot start, it warns and
 * falls back to TCP staging (the DATA frames rewrite every byte), unless cuda_ipc was forced (PDR_ENOTSUP).
 */

int pdr__same_host(pdr_xfer_engine_t *eng, const struct pdr__sess *s)
{
    return pdr__xfer_hello_same_host(&s->peer_hello, &pdr__tcp_st(eng)->me);
}

/* Maps the VMM allocation a handle slot names: its descriptor comes from the exporter's fd server. */
static int vmm_open(const uint8_t *handle, int dev, void **base, uint64_t *size)
{
    uint32_t pid = pdr__get_u32(handle + 8);
    uint64_t nonce = pdr__get_u64(handle + 16), id = pdr__get_u64(handle + 24);
    *size = pdr__get_u64(handle + 32);
    int fd = -1;
    int rc = pdr__fdsrv_fetch(pid, nonce, id, 1000, &fd);
    if (rc != 0) {
        pdr_warn("transport: cannot get the VMM allocation's descriptor from process %u: %s", (unsigned)pid,
                 pdr_strerror(rc));
        return rc;
    }
    rc = pdr__cuda_vmm_map(fd, *size, dev, base);
    close(fd);
    return rc;
}

static int ipc_map_get(pdr_xfer_engine_t *eng, struct pdr__sess *s, const uint8_t *handle, int dev,
                       void **base)
{
    if (s->ipc == NULL && (s->ipc = calloc(1, sizeof(*s->ipc))) == NULL)
        return PDR_ENOMEM;
    struct ipc_sess *is = s->ipc;
    for (size_t i = 0; i < is->n; i++) {
        if (is->maps[i].dev == dev && memcmp(is->maps[i].handle, handle, PDR_XFER_IPC_HANDLE) == 0) {
            *base = is->maps[i].base;
            return 0;
        }
    }
    if (is->n == is->cap) {
        if (is->cap >= PDR_XFER_IPC_MAX_HANDLES)
            return PDR_ETOOBIG;
        if (pdr__ipc_grow((void **)&is->maps, &is->cap, 8, sizeof(*is->maps)) != 0)
            return PDR_ENOMEM;
    }
    int rc = pdr__io_bind(&eng->io[0], dev);
    uint64_t vmm_size = 0;
    if (rc == 0 && memcmp(handle, VMM_TAG, sizeof(VMM_TAG)) == 0)
        rc = vmm_open(handle, dev, base, &vmm_size);
    else if (rc == 0)
        rc = pdr__cuda_ipc_open(handle, base);
    if (rc != 0)
        return rc;
    struct ipc_map *m = &is->maps[is->n++];
    memcpy(m->handle, handle, PDR_XFER_IPC_HANDLE);
    m->dev = dev;
    m->base = *base;
    m->vmm_size = vmm_size;
    return 0;
}

void pdr__ipc_map_close(struct pdr__io *io, struct pdr__sess *s)
{
    struct ipc_sess *is = s->ipc;
    if (is == NULL)
        return;
    for (size_t i = 0; i < is->n; i++) {
        const struct ipc_map *m = &is->maps[i];
        if (pdr__io_bind(io, m->dev) != 0)
            continue;
        if (m->vmm_size > 0)
            pdr__cuda_vmm_unmap(m->base, m->vmm_size);
        else
            pdr__cuda_ipc_close(m->base);
    }
    free(is->maps);
    free(is);
    s->ipc = NULL;
}

/* Queues the copies of room bytes [a, a+len) (inside part, or op's own segments when part is NULL) into
 * the destination that ir's FETCH_IPC describes, on stream. */
static int ipc_copy_range(pdr_xfer_engine_t *eng, struct pdr__sess *s, struct ipc_room *ir,
                          struct pdr__op *op, const struct pdr__part *part, uint64_t a, uint64_t len,
                          void *stream)
{
    uint32_t lo = 0, hi = ir->fd.nseg;
    while (hi - lo > 1) { /* the last segment starting at or before a */
        uint32_t mid = lo + (hi - lo) / 2;
        if (ir->dcum[mid] <= a)
            lo = mid;
        else
            hi = mid;
    }
    uint64_t end = a + len;
    int rc = 0;
    for (uint32_t i = lo; i < ir->fd.nseg && a < end && rc == 0; i++) {
        if (ir->dcum[i + 1] <= a)
            continue;
        uint64_t y = ir->dcum[i + 1] < end ? ir->dcum[i + 1] : end;
        uint32_t hidx;
        uint64_t off;
        pdr__xfer_ipc_seg(&ir->d, i, &hidx, &off);
        void *base;
        rc = ipc_map_get(eng, s, ir->d.handles + (size_t)hidx * PDR_XFER_IPC_HENTRY, op->dev, &base);
        while (rc == 0 && a < y) {
            struct iovec iov[MAX_IOV];
            int n = pdr__src_iov_at(op, part, a, y - a, iov, MAX_IOV);
            for (int k = 0; k < n && rc == 0; k++) {
                rc = pdr__cuda_copy_d2d_async((uint8_t *)base + off + (a - ir->dcum[i]), iov[k].iov_base,
                                              iov[k].iov_len, stream);
                a += iov[k].iov_len;
            }
        }
    }
    return rc;
}

/* A push in parts served over CUDA IPC: queues the copies of every part published and not yet copied,
 * then records the room's event. Thread 0. A failure fails the room. */
void pdr__ipc_parts(pdr_xfer_engine_t *eng, struct pdr__op *op)
{
    struct ipc_room *ir = op->mover == &pdr__mover_ipc ? op->mv : NULL;
    if (ir == NULL || ir->body == NULL || op->sess == NULL)
        return;
    pthread_mutex_lock(&eng->lock);
    /* Taken whole, every byte claimed: the local queue and its links are this thread's alone now. */
    pdr_dqueue_t todo;
    pdr_dqueue_move(&todo, &op->pend);
    for (pdr_dlink_t *l = todo.head; l != NULL; l = l->next) {
        struct pdr__part *pt = PDR_DLINK_ITEM(l, struct pdr__part, qlink);
        op->next_off += pt->len - pt->claimed;
        pt->claimed = pt->len;
    }
    pthread_mutex_unlock(&eng->lock);
    if (todo.head == NULL)
        return;
    void *stream = pdr__tcp_st(eng)->ipc->ipc_stream[op->dev];
    int rc = pdr__io_bind(&eng->io[0], op->dev);
    pdr_dlink_t *l;
    while ((l = pdr_dqueue_pop(&todo)) != NULL) { /* every link leaves the stack queue, on failure too */
        struct pdr__part *pt = PDR_DLINK_ITEM(l, struct pdr__part, qlink);
        if (rc != 0)
            continue;
        rc = ipc_copy_range(eng, op->sess, ir, op, pt, pt->off, pt->len, stream);
        ir->issued += pt->len;
    }
    if (rc == 0)
        rc = pdr__cuda_event_record(ir->ev, stream);
    if (rc != 0) {
        pdr_warn("transport: cuda_ipc copy of a part of room %llu failed (%s, %s)",
                 (unsigned long long)op->room, pdr_strerror(rc), pdr__cuda_last_error());
        pdr__op_complete(eng, op, rc, rc);
        return;
    }
    ir->recorded = ir->issued;
    ir->idle = 0;
}

/* A push in parts: keeps the FETCH_IPC, opens every handle it names now (so that a failure falls back to
 * TCP with every part still pending), and copies what is published. */
static int ipc_start_parts(pdr_xfer_engine_t *eng, struct pdr__op *op, struct pdr__sess *s,
                           const uint8_t *body, size_t len, void *ev)
{
    struct ipc_room *ir = calloc(1, sizeof(*ir));
    int rc = ir == NULL ? PDR_ENOMEM : 0;
    if (rc == 0 && (ir->body = malloc(len)) == NULL)
        rc = PDR_ENOMEM;
    if (rc == 0) {
        memcpy(ir->body, body, len);
        rc = pdr__xfer_fetch_ipc_decode(ir->body, len, &ir->fd, &ir->d) != 0 ? PDR_EINVAL : 0;
    }
    if (rc == 0 && (ir->dcum = malloc(((size_t)ir->fd.nseg + 1) * sizeof(uint64_t))) == NULL)
        rc = PDR_ENOMEM;
    if (rc == 0) {
        ir->dcum[0] = 0;
        for (uint32_t i = 0; i < ir->fd.nseg; i++)
            ir->dcum[i + 1] = ir->dcum[i] + pdr__get_u64(ir->fd.seglens + (size_t)i * 8);
    }
    for (uint32_t h = 0; rc == 0 && h < ir->d.nhandles && ir->fd.nseg > 0; h++) {
        void *base;
        rc = ipc_map_get(eng, s, ir->d.handles + (size_t)h * PDR_XFER_IPC_HENTRY, op->dev, &base);
    }
    if (rc == 0 && pdr__op_enter(op) != 0)
        rc = PDR_ECANCELED;
    if (rc != 0) {
        pdr_warn("transport: cuda_ipc to %s failed (%s, %s)", s->peer, pdr_strerror(rc),
                 pdr__cuda_last_error());
        if (ir != NULL) {
            free(ir->body);
            free(ir->dcum);
        }
        free(ir);
        pdr__cuda_event_destroy(ev);
        return rc;
    }
    struct ipc_engine *ie = pdr__tcp_st(eng)->ipc;
    ir->op = op;
    ir->ev = ev;
    ir->idle = 1;
    pdr_dlink_push(&ie->ipc_pending, &ir->link);
    op->mover = &pdr__mover_ipc;
    op->mv = ir;
    op->backend = "cuda_ipc";
    pdr__ipc_parts(eng, op);
    return 0;
}

/* Starts op's copies into the decode's memory described by a FETCH_IPC body. 0 or a PDR_E* code
 * (nothing is left in flight then). */
int pdr__ipc_start(pdr_xfer_engine_t *eng, struct pdr__op *op, struct pdr__sess *s, const uint8_t *body,
                   size_t len)
{
    struct pdr_xfer_fetch_desc fd;
    struct pdr_xfer_ipc_desc d;
    int dev = op->dev;
    if (pdr__xfer_fetch_ipc_decode(body, len, &fd, &d) != 0 || dev < 0 || dev >= IPC_MAX_DEVS)
        return PDR_EINVAL;
    struct ipc_engine *ie = pdr__tcp_st(eng)->ipc;
    int rc = pdr__io_bind(&eng->io[0], dev);
    if (rc == 0 && ie->ipc_stream[dev] == NULL)
        rc = pdr__cuda_stream_create(&ie->ipc_stream[dev]);
    void *ev = NULL;
    if (rc == 0)
        rc = pdr__cuda_event_create(&ev);
    if (rc != 0)
        return rc;
    void *stream = ie->ipc_stream[dev];
    if (op->parted)
        return ipc_start_parts(eng, op, s, body, len, ev);
    if (pdr__op_enter(op) != 0) {
        pdr__cuda_event_destroy(ev);
        return PDR_ECANCELED;
    }
    uint64_t pos = 0;
    for (uint32_t i = 0; i < fd.nseg && rc == 0; i++) {
        uint64_t seglen = pdr__get_u64(fd.seglens + (size_t)i * 8);
        uint32_t hidx;
        uint64_t off;
        pdr__xfer_ipc_seg(&d, i, &hidx, &off);
        if (seglen == 0)
            continue;
        void *base;
        rc = ipc_map_get(eng, s, d.handles + (size_t)hidx * PDR_XFER_IPC_HENTRY, dev, &base);
        uint64_t done = 0;
        while (rc == 0 && done < seglen) {
            struct iovec iov[MAX_IOV];
            int n = pdr__seg_iov_at(op, pos + done, seglen - done, iov, MAX_IOV);
            for (int k = 0; k < n && rc == 0; k++) {
                rc = pdr__cuda_copy_d2d_async((uint8_t *)base + off + done, iov[k].iov_base, iov[k].iov_len,
                                              stream);
                done += iov[k].iov_len;
            }
        }
        pos += seglen;
    }
    if (rc == 0)
        rc = pdr__cuda_event_record(ev, stream);
    struct ipc_room *ir = NULL;
    if (rc == 0 && (ir = calloc(1, sizeof(*ir))) == NULL)
        rc = PDR_ENOMEM;
    if (rc != 0) {
        pdr_warn("transport: cuda_ipc to %s failed (%s, %s)", s->peer, pdr_strerror(rc),
                 pdr__cuda_last_error());
        pdr__cuda_stream_sync(stream); /* copies already issued finish before the room's memory is let go */
        pdr__op_leave(op);
        pdr__cuda_event_destroy(ev);
        return rc;
    }
    ir->op = op;
    ir->ev = ev;
    pdr_dlink_push(&ie->ipc_pending, &ir->link);
    op->mover = &pdr__mover_ipc;
    op->mv = ir;
    op->backend = "cuda_ipc";
    return 0;
}

/* Takes op off the pending list once its copies are done (waits for them). */
void pdr__ipc_finish(pdr_xfer_engine_t *eng, struct pdr__op *op)
{
    struct ipc_room *ir = op->mv;
    pdr_dlink_unlink(&ir->link);
    pdr__io_bind(&eng->io[0], op->dev);
    pdr__cuda_event_destroy(ir->ev);
    free(ir->body);
    free(ir->dcum);
    free(ir);
    op->mv = NULL;
    op->mover = NULL;
    pdr__op_leave(op);
}

/* Polls the IPC copies in flight: finished rooms send IPC_DONE. Returns how many are still pending. */
int pdr__ipc_poll(pdr_xfer_engine_t *eng)
{
    int pending = 0;
    struct ipc_room *ir = PDR_DLINK_ENTRY(pdr__tcp_st(eng)->ipc->ipc_pending, struct ipc_room, link);
    while (ir != NULL) {
        struct ipc_room *next = PDR_DLINK_ENTRY(ir->link.next, struct ipc_room, link);
        struct pdr__op *op = ir->op;
        if (ir->idle) { /* a push in parts, copied so far: waits for its next part */
            ir = next;
            continue;
        }
        pdr__io_bind(&eng->io[0], op->dev);
        int rc = pdr__cuda_event_query(ir->ev);
        if (rc == PDR_EAGAIN) {
            pending++;
        } else if (rc == 0 && ir->body != NULL && ir->recorded < op->total) {
            pthread_mutex_lock(&eng->lock);
            op->sent = ir->recorded; /* progress: the copies done */
            pthread_mutex_unlock(&eng->lock);
            ir->idle = 1;
        } else {
            pdr__ipc_finish(eng, op);
            if (rc != 0) {
                pdr_warn("transport: cuda_ipc copy failed: %s", pdr__cuda_last_error());
                pdr__op_complete(eng, op, rc, rc);
            } else if (op->sess != NULL) {
                if (op->parted) {
                    pthread_mutex_lock(&eng->lock);
                    op->sent = op->total;
                    pthread_mutex_unlock(&eng->lock);
                }
                op->state = PDR__OP_DRAINED;
                pdr__queue_ctl(eng, op->sess->ctl, PDR_XF_IPC_DONE, op->room, op->xid, op->total, 0);
            }
        }
        ir = next;
    }
    return pending;
}

/* Decode: FETCH_IPC, or NULL when the handles cannot be exported (it warns; a plain FETCH goes). */
static struct ctl_msg *ipc_offer(pdr_xfer_engine_t *eng, struct pdr__sess *s, struct pdr__op *op, int *rc)
{
    (void)s;
    *rc = PDR_ENOTSUP;
    return pdr__fetch_ipc_msg(eng, op);
}

static void ipc_abort(pdr_xfer_engine_t *eng, struct pdr__op *op, struct pdr__sess *s)
{
    (void)s;
    struct ipc_room *ir = op->mover == &pdr__mover_ipc ? op->mv : NULL;
    if (ir != NULL) {
        pdr__io_bind(&eng->io[0], op->dev);
        pdr__cuda_event_sync(ir->ev); /* the copies read this room's memory */
        pdr__ipc_finish(eng, op);
    }
}

static int ipc_poll_pending(pdr_xfer_engine_t *eng)
{
    return pdr__tcp_st(eng)->ipc->ipc_pending != NULL ? pdr__ipc_poll(eng) : 0;
}

static void ipc_sess_close(pdr_xfer_engine_t *eng, struct pdr__io *io, struct pdr__sess *s)
{
    (void)eng;
    pdr__ipc_map_close(io, s);
}

static int ipc_init(pdr_xfer_engine_t *eng)
{
    struct ipc_engine *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return PDR_ENOMEM;
    pthread_mutex_init(&s->vx_lock, NULL);
    pdr__tcp_st(eng)->ipc = s;
    return 0;
}

static void ipc_shutdown(pdr_xfer_engine_t *eng)
{
    struct ipc_engine *s = pdr__tcp_st(eng)->ipc;
    if (s == NULL)
        return;
    pdr__fdsrv_stop(s->fdsrv); /* closes every exported VMM descriptor */
    free(s->vx);
    pthread_mutex_destroy(&s->vx_lock);
    for (int d = 0; d < IPC_MAX_DEVS; d++) {
        if (s->ipc_stream[d] != NULL && pdr__cuda_bind(d) == 0) {
            pdr__cuda_stream_sync(s->ipc_stream[d]);
            pdr__cuda_stream_destroy(s->ipc_stream[d]);
        }
    }
    free(s);
    pdr__tcp_st(eng)->ipc = NULL;
}

const struct pdr__mover_ops pdr__mover_ipc = {
    .name = "cuda_ipc",
    .init = ipc_init,
    .offer = ipc_offer,
    .serve = pdr__ipc_start,
    .abort = ipc_abort,
    .poll = ipc_poll_pending,
    .sess_close = ipc_sess_close,
    .mem_unregistered = pdr__tcp_mem_unregistered,
    .shutdown = ipc_shutdown,
};
