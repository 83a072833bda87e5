/*
 * Control frames and matching: the per-connection control-frame queue, FETCH against push (parked
 * fetches and tombstones), the room-scoped frames (WAIT, DONE, IPC_DONE, ACK, ERROR, CANCEL, RDMA_GO),
 * aborts and the ready list. Thread 0, which owns every control connection; pdr__cq_append and
 * pdr__queue_ctl run on the thread that owns the connection.
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

/* ---- control frames ---- */

/* A control frame of len bytes to fill (m->data) and queue; NULL without memory. */
struct ctl_msg *pdr__ctl_new(size_t len)
{
    struct ctl_msg *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return NULL;
    m->data = len <= sizeof(m->inl) ? m->inl : malloc(len);
    if (m->data == NULL) {
        free(m);
        return NULL;
    }
    return m;
}

void pdr__cq_append(pdr_xfer_engine_t *eng, struct pdr__conn *c, struct ctl_msg *m)
{
    pdr_dqueue_append(&c->cq, &m->link);
    if (!c->connecting && c->attached)
        pdr__conn_set_events(eng, c, EPOLLIN | EPOLLOUT);
}

int pdr__queue_ctl(pdr_xfer_engine_t *eng, struct pdr__conn *c, uint8_t type, uint64_t room, uint64_t xid,
                   uint64_t value, int32_t code)
{
    if (c == NULL || c->dead)
        return 0;
    struct ctl_msg *m = pdr__ctl_new(PDR_XFER_HDR_LEN + 16);
    if (m == NULL) {
        /* The peer would wait for a frame that never comes: fail the session rather than hang it. */
        pdr__conn_fail(eng, c, PDR_ENOMEM);
        return -1;
    }
    m->len = pdr__xfer_ctl_encode(m->inl, type, room, xid, value, code);
    pdr__cq_append(eng, c, m);
    return 0;
}

static void tomb_add(pdr_xfer_engine_t *eng, uint64_t room, int code, int push, uint32_t keep_ms)
{
    if (eng->nparked >= eng->opts.max_rooms || pdr__parked_find(eng, room) != NULL)
        return;
    struct pdr__parked *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return; /* best effort: a late FETCH then waits for its own deadline */
    p->timer.idx = SIZE_MAX;
    p->timer.what = PDR__TIMER_PARKED;
    p->room = room;
    p->tomb_code = code;
    p->tomb_push = push;
    if (keep_ms > 60000)
        keep_ms = 60000;
    if (pdr__timer_arm(eng, &p->timer, pdr_now_ns() + (uint64_t)keep_ms * 1000000u) != 0) {
        free(p);
        return;
    }
    pdr__parked_insert(eng, p);
}

void pdr__tomb_del(pdr_xfer_engine_t *eng, struct pdr__parked *p)
{
    pdr__parked_remove(eng, p);
    free(p);
}

void pdr__parked_unlink(struct pdr__conn *c, struct pdr__parked *p)
{
    (void)c;
    pdr_dlink_unlink(&p->clink);
}

void pdr__drop_parked_all(pdr_xfer_engine_t *eng, struct pdr__conn *c)
{
    while (c->parked != NULL) {
        struct pdr__parked *p = PDR_DLINK_ENTRY(c->parked, struct pdr__parked, clink);
        pdr_dlink_unlink(&p->clink);
        pdr__parked_remove(eng, p);
        free(p);
    }
}

void pdr__tcp_abort(pdr_xfer_engine_t *eng, struct pdr__op *op, int notify_code)
{
    pdr__movers_abort(eng, op, op->sess);
    struct pdr__sess *s = op->sess;
    if (s == NULL) {
        struct pdr__parked *p = op->parted && op->kind == PDR__OP_PUSH && op->state == PDR__OP_WAITING
                                    ? pdr__parked_find(eng, op->room)
                                    : NULL;
        if (p != NULL && p->tomb_code == 0 && p->conn != NULL) {
            /* Opened in parts, fetched, never given a first part: the parked FETCH fails now. */
            struct pdr__conn *c = p->conn;
            uint64_t xid = p->xid;
            pdr__parked_unlink(c, p);
            pdr__parked_remove(eng, p);
            free(p);
            int code = notify_code != 0 ? notify_code : PDR_ECANCELED;
            if (code == PDR_ECANCELED)
                pdr__queue_ctl(eng, c, PDR_XF_CANCEL, op->room, xid, 0, 0);
            else
                pdr__queue_ctl(eng, c, PDR_XF_ERROR, op->room, xid, 0, code);
            return;
        }
        if (op->kind == PDR__OP_PUSH && op->state == PDR__OP_WAITING && notify_code != 0)
            tomb_add(eng, op->room, notify_code, 1, op->timeout_ms);
        return;
    }
    pthread_mutex_lock(&eng->lock);
    pdr__push_list_del(s, op);
    pdr_dlink_unlink(&op->slink);
    s->nops--;
    op->sess = NULL;
    pthread_mutex_unlock(&eng->lock);
    if (notify_code != 0 && s->ctl != NULL && !s->ctl->dead) {
        if (notify_code == PDR_ECANCELED)
            pdr__queue_ctl(eng, s->ctl, PDR_XF_CANCEL, op->room, op->xid, 0, 0);
        else
            pdr__queue_ctl(eng, s->ctl, PDR_XF_ERROR, op->room, op->xid, 0, notify_code);
    }
}

/* The op of (room, xid, kind) bound to c's session, or NULL. Thread 0. */
static struct pdr__op *find_op(pdr_xfer_engine_t *eng, struct pdr__conn *c, int kind, uint64_t room,
                               uint64_t xid)
{
    struct pdr__op *op = pdr__room_get(eng, room, kind);
    return op != NULL && c->sess != NULL && op->sess == c->sess && op->xid == xid ? op : NULL;
}

static int on_fetch(pdr_xfer_engine_t *eng, struct pdr__conn *c, uint64_t room, const uint8_t *body,
                    size_t len, int ext_type)
{
    struct pdr_xfer_fetch_desc d;
    struct pdr_xfer_ipc_desc ipc;
    struct pdr_xfer_rdma_desc rd;
    int is_ipc = ext_type != PDR_XF_FETCH;
    int bad = ext_type == PDR_XF_FETCH_IPC    ? pdr__xfer_fetch_ipc_decode(body, len, &d, &ipc)
              : ext_type == PDR_XF_FETCH_RDMA ? pdr__xfer_fetch_rdma_decode(body, len, &d, &rd)
                                              : pdr__xfer_fetch_decode(body, len, &d);
    if (bad != 0) {
        pdr__conn_fail(eng, c, PDR_EPROTO);
        return -1;
    }
    pthread_mutex_lock(&eng->lock);
    struct pdr__op *op = pdr__room_find(eng, room, PDR__OP_PUSH);
    /* A push opened in parts waits for its first part (which fixes its memory kind): park the FETCH. */
    int early = op != NULL && op->state == PDR__OP_WAITING && !pdr__op_servable_locked(op);
    pthread_mutex_unlock(&eng->lock);
    if (op != NULL && op->state == PDR__OP_WAITING && !early) {
        pdr__push_match(eng, op, c, d.xid, d.total, is_ipc ? body : NULL, len, ext_type);
        return c->dead ? -1 : 0;
    }
    struct pdr__parked *t = pdr__parked_find(eng, room);
    if (t != NULL && t->tomb_code != 0) {
        int code = t->tomb_code, push = t->tomb_push;
        pdr__tomb_del(eng, t);
        if (op == NULL && push) {
            if (code == PDR_ECANCELED)
                return pdr__queue_ctl(eng, c, PDR_XF_CANCEL, room, d.xid, 0, 0);
            return pdr__queue_ctl(eng, c, PDR_XF_ERROR, room, d.xid, 0, code);
        }
        /* Re-offered (still queued): park the fetch for the new push. */
    }
    if ((op != NULL && op->state != PDR__OP_QUEUED && !early) || pdr__parked_find(eng, room) != NULL)
        return pdr__queue_ctl(eng, c, PDR_XF_ERROR, room, d.xid, 0, PDR_EEXIST); /* another decode has it */
    if (eng->nparked >= eng->opts.max_rooms)
        return pdr__queue_ctl(eng, c, PDR_XF_ERROR, room, d.xid, 0, PDR_ETOOBIG);
    struct pdr__parked *p = calloc(1, sizeof(*p) + (is_ipc ? len : 0));
    if (p == NULL)
        return pdr__queue_ctl(eng, c, PDR_XF_ERROR, room, d.xid, 0, PDR_ENOMEM);
    if (is_ipc) {
        p->ext_type = ext_type;
        p->ipc = (uint8_t *)(p + 1);
        p->ipc_len = len;
        memcpy(p->ipc, body, len);
    }
    p->timer.idx = SIZE_MAX;
    p->timer.what = PDR__TIMER_PARKED;
    p->room = room;
    p->xid = d.xid;
    p->total = d.total;
    p->conn = c;
    /* The decode enforces its own deadline; ours only bounds how long we remember it (+1 s slack). */
    uint32_t keep = d.timeout_ms != 0 && d.timeout_ms < 3600000 ? d.timeout_ms : eng->opts.default_timeout_ms;
    if (pdr__timer_arm(eng, &p->timer, pdr_now_ns() + ((uint64_t)keep + 1000) * 1000000u) != 0) {
        free(p);
        return pdr__queue_ctl(eng, c, PDR_XF_ERROR, room, d.xid, 0, PDR_ETOOBIG);
    }
    pdr__parked_insert(eng, p);
    pdr_dlink_push(&c->parked, &p->clink);
    return pdr__queue_ctl(eng, c, PDR_XF_WAIT, room, d.xid, 0, 0);
}

/* The decode of a parked fetch canceled it or gave up (code): remember that for a late push. */
static void drop_parked(pdr_xfer_engine_t *eng, struct pdr__conn *c, uint64_t room, uint64_t xid, int code)
{
    struct pdr__parked *p = pdr__parked_find(eng, room);
    if (p == NULL || p->conn != c || p->xid != xid)
        return;
    pdr__parked_unlink(c, p);
    pdr__parked_remove(eng, p);
    free(p);
    /* A push opened in parts that was waiting for its first part: its decode gave up, it fails now. */
    struct pdr__op *op = pdr__room_get(eng, room, PDR__OP_PUSH);
    if (code != 0 && op != NULL && op->parted && op->state == PDR__OP_WAITING && op->sess == NULL) {
        pdr__op_complete(eng, op, code, 0);
        return;
    }
    if (code != 0)
        tomb_add(eng, room, code, 0, eng->opts.default_timeout_ms);
}

/* Both halves of a pull arrived (DONE and every byte): acknowledge and complete. Thread 0. */
static int pull_maybe_done(pdr_xfer_engine_t *eng, struct pdr__op *op)
{
    pthread_mutex_lock(&eng->lock);
    int all = op->got == op->total;
    pthread_mutex_unlock(&eng->lock);
    if (!op->done_seen || !all)
        return 0;
    struct pdr__sess *s = op->sess;
    if (s != NULL && pdr__queue_ctl(eng, s->ctl, PDR_XF_ACK, op->room, op->xid, op->total, 0) != 0)
        return -1;
    pdr__op_complete(eng, op, 0, 0);
    return 0;
}

/* A complete control frame (not DATA). */
int pdr__on_ctl(pdr_xfer_engine_t *eng, struct pdr__conn *c, const struct pdr_xfer_hdr *h,
                const uint8_t *body)
{
    if (h->type == PDR_XF_HELLO)
        return pdr__on_hello(eng, c, body, (size_t)h->len);
    if (h->type == PDR_XF_PING)
        return pdr__queue_ctl(eng, c, PDR_XF_PONG, 0, 0, 0, 0);
    if (h->type == PDR_XF_PONG)
        return 0;
    /* Room-scoped control frames travel on control connections only, which live on thread 0. */
    if (c->io->idx != 0 || (c->sess != NULL && c->sess->ctl != c)) {
        pdr__conn_fail(eng, c, PDR_EPROTO);
        return -1;
    }
    if (!c->outbound && pdr__sess_implicit(eng, c) != 0)
        return -1;
    if (h->type == PDR_XF_FETCH || h->type == PDR_XF_FETCH_IPC || h->type == PDR_XF_FETCH_RDMA)
        return on_fetch(eng, c, h->room, body, (size_t)h->len, h->type);
    if (h->type == PDR_XF_RDMA_READY)
        return pdr__mv_rdma_on_ready(eng, c, h->room, body, (size_t)h->len);
    struct pdr_xfer_ctl m;
    if (pdr__xfer_ctl_decode(h->type, body, (size_t)h->len, &m) != 0) {
        pdr__conn_fail(eng, c, PDR_EPROTO);
        return -1;
    }
    struct pdr__op *op;
    switch (h->type) {
    case PDR_XF_WAIT:
        op = find_op(eng, c, PDR__OP_PULL, h->room, m.xid);
        if (op != NULL && op->state == PDR__OP_WAITING)
            op->state = PDR__OP_PARKED;
        return 0;
    case PDR_XF_DONE:
        op = find_op(eng, c, PDR__OP_PULL, h->room, m.xid);
        if (op == NULL)
            return 0; /* a room we already failed */
        if (m.value != op->total || op->done_seen) {
            pdr__conn_fail(eng, c, PDR_EPROTO);
            return -1;
        }
        op->done_seen = 1;
        op->state = PDR__OP_ACTIVE;
        return pull_maybe_done(eng, op);
    case PDR_XF_RDMA_GO:
        if (c->outbound || c->sess == NULL) {
            pdr__conn_fail(eng, c, PDR_EPROTO);
            return -1;
        }
        pdr__mv_rdma_on_go(eng, c->sess);
        return 0;
    case PDR_XF_IPC_DONE:
        op = find_op(eng, c, PDR__OP_PULL, h->room, m.xid);
        if (op == NULL)
            return 0;
        if (m.value != op->total || op->done_seen || op->mover != &pdr__mover_ipc) {
            pdr__conn_fail(eng, c, PDR_EPROTO);
            return -1;
        }
        pthread_mutex_lock(&eng->lock);
        op->got = op->total; /* the prefill's GPU wrote every byte */
        pthread_mutex_unlock(&eng->lock);
        op->done_seen = 1;
        op->state = PDR__OP_ACTIVE;
        op->backend = "cuda_ipc";
        return pull_maybe_done(eng, op);
    case PDR_XF_ACK:
        op = find_op(eng, c, PDR__OP_PUSH, h->room, m.xid);
        if (op == NULL)
            return 0;
        if (op->state != PDR__OP_DRAINED || m.value != op->total) {
            pdr__conn_fail(eng, c, PDR_EPROTO);
            return -1;
        }
        pdr__op_complete(eng, op, 0, 0);
        return 0;
    case PDR_XF_ERROR:
    case PDR_XF_CANCEL: {
        int code = h->type == PDR_XF_CANCEL ? PDR_ECANCELED : m.code;
        if ((op = find_op(eng, c, PDR__OP_PULL, h->room, m.xid)) != NULL)
            pdr__op_complete(eng, op, code, 0);
        else if ((op = find_op(eng, c, PDR__OP_PUSH, h->room, m.xid)) != NULL)
            pdr__op_complete(eng, op, code, 0);
        else
            drop_parked(eng, c, h->room, m.xid, code);
        return 0;
    }
    default:
        pdr__conn_fail(eng, c, PDR_EPROTO);
        return -1;
    }
}

/* An op from the ready list (thread 0). */
void pdr__tcp_ready(pdr_xfer_engine_t *eng, struct pdr__op *op, int what)
{
    if (what & PDR__READY_FAIL) {
        pthread_mutex_lock(&eng->lock);
        int code = op->fail_status != 0 ? op->fail_status : PDR_EIO;
        pthread_mutex_unlock(&eng->lock);
        pdr__op_complete(eng, op, code, code);
        return;
    }
    if (what & PDR__READY_PART) {
        pdr__parts_ready(eng, op);
        if (__atomic_load_n(&op->dead, __ATOMIC_SEQ_CST))
            return;
    }
    struct pdr__sess *s = op->sess;
    if (s == NULL)
        return;
    if (op->mover == &pdr__mover_rdma && op->mv != NULL && (what & (PDR__READY_SENT | PDR__READY_GOT))) {
        op->backend = "rdma"; /* the decode's bytes were placed (its immediate, or the prefill's done_cb) */
        pdr__op_complete(eng, op, 0, 0);
        return;
    }
    if ((what & PDR__READY_SENT) && op->kind == PDR__OP_PUSH && op->state == PDR__OP_ACTIVE) {
        op->state = PDR__OP_DRAINED;
        pdr__queue_ctl(eng, s->ctl, PDR_XF_DONE, op->room, op->xid, op->total, 0);
    }
    if ((what & PDR__READY_GOT) && op->kind == PDR__OP_PULL)
        pull_maybe_done(eng, op);
}

void pdr__tcp_parked_expired(pdr_xfer_engine_t *eng, struct pdr__parked *p)
{
    if (p->tomb_code != 0)
        pdr__tomb_del(eng, p);
    else
        drop_parked(eng, p->conn, p->room, p->xid, 0);
}
