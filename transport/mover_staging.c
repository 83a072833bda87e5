/*
 * The pinned GPU staging ring: how a connection of the TCP mover moves a room in device memory through
 * a fixed ring of pinned host buffers. Runs on the I/O thread that owns the connection (pdr__stage_free: any
 * thread that may bind the device; pdr__stage_quiesce: thread 0).
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

/* ---- GPU staging ----
 *
 * A room in device memory moves through a fixed ring of pinned buffers per connection (staging_chunks
 * of chunk_bytes, never more, whatever the room size). Sender: claim a chunk, cuMemcpyDtoHAsync it into
 * the next free buffer on the connection's stream, record an event; buffers whose event completed are
 * sent in issue order, so copies overlap sends. Receiver: DATA payload lands in a buffer, which is
 * copied to the destination with cuMemcpyHtoDAsync; the bytes count toward the room (and so toward its
 * ACK) only when that copy's event completed. Events are polled (cuEventQuery) every loop turn while
 * copies are pending, never waited for. Every CUDA call is preceded by binding the thread to the
 * primary context of the memory's device (pdr__io_bind), never device 0 implicitly.
 */

int pdr__io_bind(struct pdr__io *io, int dev)
{
    if (io != NULL && io->cuda_dev == dev)
        return 0;
    int rc = pdr__cuda_bind(dev);
    if (rc == 0 && io != NULL)
        io->cuda_dev = dev;
    return rc;
}

static void stage_destroy_handles(struct pdr__conn *c)
{
    for (size_t i = 0; i < c->nstg; i++) {
        if (c->stg[i].ev != NULL)
            pdr__cuda_event_destroy(c->stg[i].ev);
        c->stg[i].ev = NULL;
    }
    if (c->stream != NULL)
        pdr__cuda_stream_destroy(c->stream);
    c->stream = NULL;
}

/* Makes the ring ready for rooms of device dev. Returns 0, PDR_EAGAIN (copies of another device are
 * still in flight) or a CUDA error. Owner thread. */
int pdr__stage_init(pdr_xfer_engine_t *eng, struct pdr__conn *c, int dev)
{
    if (c->stg != NULL && c->stg_dev == dev && c->stream != NULL)
        return 0;
    if (c->stg != NULL && c->stg_count > 0)
        return PDR_EAGAIN;
    int rc = pdr__io_bind(c->io, dev);
    if (rc != 0)
        return rc;
    if (c->stg == NULL) {
        size_t n = eng->opts.staging_chunks;
        c->stg = calloc(n, sizeof(*c->stg));
        if (c->stg == NULL)
            return PDR_ENOMEM;
        c->nstg = n;
        for (size_t i = 0; i < n; i++) {
            void *p = NULL;
            rc = pdr__cuda_host_alloc(eng->opts.chunk_bytes, &p);
            if (rc != 0)
                break;
            c->stg[i].buf = p;
            pdr__stats_staging(eng, (int64_t)eng->opts.chunk_bytes);
        }
    } else {
        if (c->stg_dev >= 0 && pdr__io_bind(c->io, c->stg_dev) == 0)
            stage_destroy_handles(c);
        rc = pdr__io_bind(c->io, dev);
    }
    c->stg_dev = dev;
    if (rc == 0)
        rc = pdr__cuda_stream_create(&c->stream);
    for (size_t i = 0; i < c->nstg && rc == 0; i++)
        rc = pdr__cuda_event_create(&c->stg[i].ev);
    if (rc != 0) {
        pdr_warn("transport: cannot set up GPU staging on device %d: %s (%s)", dev, pdr_strerror(rc),
                 pdr__cuda_last_error());
        pdr__stage_free(eng, c);
    }
    return rc;
}

/* Finishes or abandons every copy and frees the ring. Any thread that may bind the device. */
void pdr__stage_free(pdr_xfer_engine_t *eng, struct pdr__conn *c)
{
    if (c->stg == NULL)
        return;
    int bound = c->stg_dev >= 0 && pdr__cuda_bind(c->stg_dev) == 0;
    if (c->io != NULL && bound)
        c->io->cuda_dev = c->stg_dev;
    if (bound && c->stream != NULL)
        pdr__cuda_stream_sync(c->stream);
    for (size_t i = 0; i < c->nstg; i++) {
        struct stage *g = &c->stg[i];
        if (g->op != NULL) {
            if (g->state == STG_COPY)
                pdr__op_leave(g->op);
            pdr__op_unref(eng, g->op);
            g->op = NULL;
        }
        if (g->buf != NULL) {
            pdr__cuda_host_free(g->buf);
            pdr__stats_staging(eng, -(int64_t)eng->opts.chunk_bytes);
        }
    }
    if (bound)
        stage_destroy_handles(c);
    free(c->stg);
    c->stg = NULL;
    c->nstg = c->stg_head = c->stg_count = 0;
    c->tx_stage = c->rx_fill = -1;
}

/* A data thread cannot complete an op: it hands the failure to thread 0. */
void pdr__op_fail_async(pdr_xfer_engine_t *eng, struct pdr__op *op, int status)
{
    pthread_mutex_lock(&eng->lock);
    if (!__atomic_load_n(&op->dead, __ATOMIC_SEQ_CST)) {
        if (op->fail_status == 0)
            op->fail_status = status;
        pdr__op_ready_locked(eng, op, PDR__READY_FAIL);
    }
    pthread_mutex_unlock(&eng->lock);
}

/* Polls the ring's copies in issue order (block: wait for them). Receiver slots are recycled here and
 * their bytes counted; sender slots become READY. Returns the number of copies still pending. */
size_t pdr__stage_poll(pdr_xfer_engine_t *eng, struct pdr__conn *c, int block)
{
    size_t pending = 0;
    int stop = 0;
    for (size_t k = 0; k < c->stg_count; k++) {
        struct stage *g = &c->stg[(c->stg_head + k) % c->nstg];
        if (g->state != STG_COPY)
            continue;
        if (stop) {
            pending++;
            continue;
        }
        pdr__io_bind(c->io, c->stg_dev);
        int rc = block ? pdr__cuda_event_sync(g->ev) : pdr__cuda_event_query(g->ev);
        if (rc == PDR_EAGAIN) {
            stop = 1; /* later copies on the stream are not done either */
            pending++;
            continue;
        }
        struct pdr__op *op = g->op;
        pdr__op_leave(op);
        if (rc != 0) {
            pdr_warn("transport: GPU staging copy failed: %s", pdr__cuda_last_error());
            pdr__op_fail_async(eng, op, rc);
        }
        if (c->outbound) {
            /* Receiver: the bytes are in place. */
            g->op = NULL;
            if (rc == 0)
                pdr__op_count(eng, op, g->len, PDR__READY_GOT);
            pdr__op_unref(eng, op);
            g->state = STG_FREE;
        } else {
            g->state = STG_READY;
        }
    }
    /* Receiver: recycle finished slots at the head. */
    while (c->outbound && c->stg_count > 0 && c->stg[c->stg_head].state == STG_FREE) {
        c->stg_head = (c->stg_head + 1) % c->nstg;
        c->stg_count--;
    }
    return pending;
}

/* Issues the device copy of slot g for op (d2h: sender; h2d: receiver). Returns 0 or a PDR_E* code;
 * PDR_ECANCELED when the op died (nothing issued). */
int pdr__stage_issue(pdr_xfer_engine_t *eng, struct pdr__conn *c, struct stage *g, struct pdr__op *op,
                     int d2h)
{
    if (pdr__op_enter(op) != 0)
        return PDR_ECANCELED;
    int rc = pdr__io_bind(c->io, op->dev);
    struct iovec iov[MAX_IOV];
    uint64_t done = 0;
    while (rc == 0 && done < g->len) {
        int n = pdr__src_iov_at(op, d2h ? g->part : NULL, g->off + done, g->len - done, iov, MAX_IOV);
        for (int i = 0; i < n && rc == 0; i++) {
            rc = d2h ? pdr__cuda_copy_d2h_async(g->buf + done, iov[i].iov_base, iov[i].iov_len, c->stream)
                     : pdr__cuda_copy_h2d_async(iov[i].iov_base, g->buf + done, iov[i].iov_len, c->stream);
            done += iov[i].iov_len;
        }
    }
    if (rc == 0)
        rc = pdr__cuda_event_record(g->ev, c->stream);
    if (rc != 0) {
        pdr__op_leave(op);
        pdr_warn("transport: GPU staging copy could not start: %s", pdr__cuda_last_error());
        return rc;
    }
    pdr__op_ref(eng, op);
    g->op = op;
    g->state = STG_COPY;
    return 0;
}

/* Device destination: makes sure a staging slot is being filled. Returns 0 (go), 1 (every slot busy:
 * stop reading until a copy finishes) or -1 (the room was dropped: discard its payload). */
int pdr__rx_stage_slot(pdr_xfer_engine_t *eng, struct pdr__conn *c)
{
    if (c->rx_fill >= 0)
        return 0;
    int rc = pdr__stage_init(eng, c, c->rx_op->dev);
    if (rc == PDR_EAGAIN || (rc == 0 && c->stg_count == c->nstg)) {
        c->rx_blocked = 1;
        return 1;
    }
    if (rc != 0) {
        pdr__op_fail_async(eng, c->rx_op, rc);
        pdr__rx_drop_op(eng, c);
        return -1;
    }
    size_t i = (c->stg_head + c->stg_count) % c->nstg;
    c->stg_count++;
    c->stg[i].state = STG_FILL;
    c->stg[i].off = c->rx_off;
    c->stg[i].len = 0;
    c->rx_fill = (int)i;
    c->rx_fill_len = 0;
    return 0;
}

/* n payload bytes were put in the slot being filled; a full slot (or the frame's end) goes to the GPU. */
void pdr__rx_stage_commit(pdr_xfer_engine_t *eng, struct pdr__conn *c, uint64_t n)
{
    struct stage *g = &c->stg[c->rx_fill];
    c->rx_fill_len += n;
    if (c->rx_fill_len == eng->opts.chunk_bytes || n == c->rx_left) {
        g->len = c->rx_fill_len;
        c->rx_fill = -1;
        int rc = pdr__stage_issue(eng, c, g, c->rx_op, 0);
        if (rc != 0) {
            g->state = STG_FREE; /* the newest slot: the ring's tail */
            c->stg_count--;
            if (rc != PDR_ECANCELED)
                pdr__op_fail_async(eng, c->rx_op, rc);
            pdr__rx_drop_op(eng, c);
        }
    }
    pdr__rx_advance(eng, c, n);
}

/* Room left in the slot being filled, capped by the frame. */
size_t pdr__rx_stage_room(pdr_xfer_engine_t *eng, const struct pdr__conn *c)
{
    uint64_t room = eng->opts.chunk_bytes - c->rx_fill_len;
    return (size_t)(room < c->rx_left ? room : c->rx_left);
}

/* Whether a device copy of the ring is still in flight. */
static int stage_copying(const struct pdr__conn *c)
{
    for (size_t k = 0; k < c->stg_count; k++)
        if (c->stg[(c->stg_head + k) % c->nstg].state == STG_COPY)
            return 1;
    return 0;
}

/* Polls c's staging copies: finished sends go out, a receiver blocked on a full ring reads again. While
 * copies are pending the loop must not sleep (*want = 0). Returns -1 if c died. */
int pdr__stage_pump(pdr_xfer_engine_t *eng, struct pdr__conn *c, int *want)
{
    pdr__stage_poll(eng, c, 0);
    if (!c->outbound) {
        if (c->tx_state == TX_IDLE && c->cq.head == NULL && c->stg_count > 0 &&
            c->stg[c->stg_head].state == STG_READY && pdr__conn_flush(eng, c) != 0)
            return -1;
        /* The flush refills the ring: those copies must be polled soon too, not at the next heartbeat. */
        if (!c->dead && c->stg != NULL && stage_copying(c)) {
            *want = 0;
            c->io->copy_wait = 1;
        }
        return 0;
    }
    if (c->rx_blocked && c->stg_count < c->nstg) {
        c->rx_blocked = 0;
        pdr__conn_set_events(eng, c, EPOLLIN | (c->evmask & EPOLLOUT));
        if (c->rpos < c->rlen) {
            int rc = pdr__rx_process(eng, c);
            if (rc != 0)
                return -1;
        }
        if (!c->rx_blocked && pdr__conn_read(eng, c) != 0)
            return -1;
    }
    if (c->rx_blocked || (c->stg != NULL && stage_copying(c))) {
        *want = 0;
        c->io->copy_wait = 1;
    }
    return 0;
}

/* Thread 0 is about to wait for op's busy count: copies it issued itself must finish first. */
void pdr__stage_quiesce(pdr_xfer_engine_t *eng, struct pdr__op *op)
{
    for (struct pdr__conn *c = PDR_DLINK_ENTRY(eng->io[0].conns, struct pdr__conn, link); c != NULL;
         c = PDR_DLINK_ENTRY(c->link.next, struct pdr__conn, link)) {
        for (size_t k = 0; k < c->stg_count; k++) {
            struct stage *g = &c->stg[(c->stg_head + k) % c->nstg];
            if (g->state == STG_COPY && g->op == op) {
                pdr__stage_poll(eng, c, 1);
                break;
            }
        }
    }
}

const struct pdr__mover_ops pdr__mover_staging = {
    .name = "tcp staging",
    .quiesce = pdr__stage_quiesce,
};
