/*
 * Pushes published in parts (pdr_xfer_push_open / pdr_xfer_push_part) and per-room progress.
 *
 * A push opened in parts starts with its total and no memory. Each part is validated and published by
 * the caller's thread under eng->lock: it joins op->parts (sorted by offset, so an overlap is found by
 * looking at one neighbour) and the op's pending list (publish order), from which the movers take its
 * bytes. Invariants, all under eng->lock: parts never overlap and lie inside [0, total); the bytes of
 * the pending parts that are not yet claimed plus the claimed ones equal published; a part is never
 * changed after publication except its claim cursor, and it lives until its op is freed, so a
 * connection or a copy that claimed some of its bytes may read its segments without the lock.
 *
 * Threads: the API functions run on any thread. The TCP mover claims chunks of pending parts on any
 * I/O thread (pdr__claim, under the lock). Thread 0 learns of each new part from the ready list
 * (PDR__READY_PART): it serves a FETCH that was parked because the room had no part yet (the first
 * part fixes the room's memory kind, which decides the mover), and hands new parts to the CUDA IPC
 * mover, which copies them itself.
 */
#include <stdlib.h>
#include <string.h>
#include "err.h"
#include "transport_internal.h"
#include "session.h"

int pdr__op_servable_locked(const struct pdr__op *op)
{
    return !op->parted || op->nparts > 0 || op->total == 0;
}

int pdr__part_take_locked(struct pdr__op *op, uint64_t max, uint64_t *off, uint64_t *len,
                          struct pdr__part **part)
{
    struct pdr__part *pt = PDR_DLINK_ENTRY(op->pend.head, struct pdr__part, qlink);
    if (pt == NULL)
        return -1;
    uint64_t n = pt->len - pt->claimed;
    if (n > max)
        n = max;
    *off = pt->off + pt->claimed;
    *len = n;
    *part = pt;
    pt->claimed += n;
    op->next_off += n;
    if (pt->claimed == pt->len)
        pdr_dqueue_unlink(&op->pend, &pt->qlink);
    return 0;
}

void pdr__parts_free(struct pdr__op *op)
{
    op->pend.head = op->pend.tail = NULL; /* its members are freed below, by the other list */
    pdr_dlink_t *l;
    while ((l = pdr_dlink_pop(&op->parts)) != NULL)
        free(PDR_DLINK_ITEM(l, struct pdr__part, olink));
}

void pdr__parts_ready(pdr_xfer_engine_t *eng, struct pdr__op *op)
{
    if (op->state == PDR__OP_WAITING && op->sess == NULL) {
        /* A FETCH that came before the first part waits in the parked table. */
        struct pdr__parked *p = pdr__parked_find(eng, op->room);
        if (p == NULL || p->tomb_code != 0 || p->conn == NULL)
            return;
        struct pdr__conn *c = p->conn;
        pdr__parked_unlink(c, p);
        pdr__parked_remove(eng, p);
        pdr__push_match(eng, op, c, p->xid, p->total, p->ipc, p->ipc_len, p->ext_type);
        free(p);
        return;
    }
    if (op->mover == &pdr__mover_ipc && op->mv != NULL)
        pdr__ipc_parts(eng, op);
}

/* A new part of op is pending: the session's connections may claim it. eng->lock held. */
static void tcp_wake_locked(pdr_xfer_engine_t *eng, struct pdr__op *op)
{
    struct pdr__sess *s = op->sess;
    if (!op->tcp_serving || s == NULL || s->dead || pdr_dlink_linked(&op->plink))
        return;
    pdr__push_list_add(s, op);
    for (int i = 0; i < eng->nio; i++) {
        eng->io[i].rescan = 1;
        pdr__io_wake_locked(eng, &eng->io[i]);
    }
}

int pdr_xfer_push_part(pdr_xfer_engine_t *eng, uint64_t room, uint64_t offset, const pdr_xfer_seg_t *segs,
                       size_t nseg)
{
    if (eng == NULL || segs == NULL || nseg == 0)
        return PDR_EINVAL;
    if (nseg > eng->opts.max_segments)
        return PDR_ETOOBIG;
    uint64_t len = 0;
    for (size_t i = 0; i < nseg; i++) {
        if ((segs[i].addr == NULL && segs[i].len > 0) || segs[i].len > UINT64_MAX - len)
            return PDR_EINVAL;
        len += segs[i].len;
    }
    if (len == 0 || offset > UINT64_MAX - len)
        return PDR_EINVAL;
    struct pdr__part *pt = malloc(sizeof(*pt) + nseg * sizeof(*segs) + (nseg + 1) * sizeof(uint64_t));
    if (pt == NULL)
        return PDR_ENOMEM;
    memset(pt, 0, sizeof(*pt));
    pt->segs = (pdr_xfer_seg_t *)(pt + 1);
    pt->cum = (uint64_t *)(pt->segs + nseg);
    pt->off = offset;
    pt->len = len;
    pt->nseg = nseg;
    pt->cum[0] = offset;
    for (size_t i = 0; i < nseg; i++) {
        pt->segs[i] = segs[i];
        pt->cum[i + 1] = pt->cum[i] + segs[i].len;
    }

    int rc = 0;
    pthread_mutex_lock(&eng->lock);
    /* A part lives in one place, as a whole push does: host memory or one device. */
    int dev = -1, first = 1;
    for (size_t i = 0; i < nseg && dev != -2 && eng->mem != NULL; i++) {
        if (segs[i].len == 0)
            continue;
        int d = pdr__mem_device_locked(eng, segs[i].addr, segs[i].len);
        dev = first || d == dev ? d : -2;
        first = 0;
    }
    struct pdr__op *op = pdr__room_find(eng, room, PDR__OP_PUSH);
    pdr_dlink_t **pp = NULL;
    if (op == NULL || !op->parted || __atomic_load_n(&op->dead, __ATOMIC_SEQ_CST))
        rc = PDR_ENOROOM;
    else if (dev == -2 || offset + len > op->total || (op->nparts > 0 && dev != op->dev))
        rc = PDR_EINVAL;
    else if (op->nparts >= PDR__MAX_PARTS || nseg > eng->opts.max_segments - op->part_segs)
        rc = PDR_ETOOBIG;
    else {
        /* pp: the link to insert at, before the first part that ends after offset. */
        pp = &op->parts;
        struct pdr__part *at;
        while ((at = PDR_DLINK_ENTRY(*pp, struct pdr__part, olink)) != NULL && at->off + at->len <= offset)
            pp = &at->olink.next;
        if (at != NULL && at->off < offset + len)
            rc = PDR_EINVAL; /* overlaps a published part */
    }
    if (rc == 0) {
        pdr_dlink_push(pp, &pt->olink);
        if (op->nparts == 0)
            op->dev = dev;
        op->nparts++;
        op->part_segs += nseg;
        op->published += len;
        pdr_dqueue_append(&op->pend, &pt->qlink);
        tcp_wake_locked(eng, op);
        pdr__op_ready_locked(eng, op, PDR__READY_PART);
    }
    pthread_mutex_unlock(&eng->lock);
    if (rc != 0)
        free(pt);
    return rc;
}

int pdr_xfer_progress(pdr_xfer_engine_t *eng, uint64_t room, uint64_t *moved, uint64_t *total)
{
    if (eng == NULL)
        return PDR_EINVAL;
    int rc = 0;
    pthread_mutex_lock(&eng->lock);
    struct pdr__op *op = pdr__room_find(eng, room, PDR__OP_PUSH);
    if (op == NULL)
        op = pdr__room_find(eng, room, PDR__OP_PULL);
    if (op == NULL) {
        rc = PDR_ENOROOM;
    } else {
        if (moved != NULL)
            *moved = op->kind == PDR__OP_PUSH ? op->sent : op->got;
        if (total != NULL)
            *total = op->total;
    }
    pthread_mutex_unlock(&eng->lock);
    return rc;
}
