/*
 * The RDMA data mover: one endpoint per session, FETCH_RDMA / RDMA_READY / RDMA_GO, the rooms' memory
 * registrations and their completion. Thread 0 (the module's completion callbacks run on its completion
 * thread and only take eng->lock). The protocol is described below.
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

/* ---- RDMA (thread 0) ----
 *
 * With backend auto (or rdma) and PDR_XFER_CAP_RDMA in both HELLOs, a pull registers its destination
 * and sends FETCH_RDMA (its endpoint, its memory with rkeys, a 32-bit tag). The prefill keeps one
 * endpoint per session (struct rdma_link, nqp = PDR_RDMA_DEFAULT_NQP): when it has none, or the decode's
 * endpoint bytes differ from those it connected to (the decode recreated its endpoint), it creates one,
 * connects it to the decode's and answers RDMA_READY with its own; the decode connects its side and
 * answers RDMA_GO; only then does the prefill post pdr__rdma_write_room (rooms that arrive meanwhile
 * wait for the GO). The decode completes a room on its immediate (every byte is placed, by rdma.h's
 * completion rule), without a completion frame; the prefill completes on write_room's done_cb(0).
 * A failed room kills the session's endpoint on the side that saw it (its other rooms fail with
 * PDR_EPEERGONE); the next room creates a new one. A room that ends without its bytes on the decode
 * (error, cancel, deadline) destroys the decode's endpoint before deregistering its memory, and an
 * unfinished push destroys the prefill's endpoint before its memory is released: no QP can touch a
 * completed room's memory. Memory inside a region registered with pdr_xfer_mem_register uses the
 * region's cached MR (one per region, made on first RDMA use, refcounted by the rooms that use it:
 * rdma_mem_ref); other memory is registered per room. The blocking verbs calls (open, ep_create,
 * ep_connect, reg, dereg, destroy) run here on thread 0, not on a helper thread: a bounded cost (open
 * and endpoints once per session; a registered region once; other memory once per room, proportional to
 * its size). The one exception is pdr_xfer_mem_unregister (engine_room.c), which deregisters the MR of a
 * region no room uses on the caller's thread.
 */
struct rdma_link {
    pdr_xfer_engine_t *eng;
    struct pdr__sess *sess;
    struct pdr_rdma_ep *ep;
    struct pdr_rdma_ep_info mine;
    uint8_t peer_ep[PDR_RDMA_EP_MAX_BYTES]; /* prefill: the decode endpoint it connected to */
    size_t peer_len;
    int connected; /* decode: connected to the prefill's endpoint; prefill: RDMA_GO arrived */
};

struct rdma_room {
    pdr_xfer_engine_t *eng;
    struct pdr__op *op;
    struct rdma_link *link;   /* (L): cleared when the link dies */
    struct pdr_rdma_mr **mrs; /* per-room registrations (memory outside registered regions) */
    size_t nmr;
    struct pdr_xfer_memreg **regs; /* registered regions whose cached MR this room holds a ref on */
    size_t nregs;
    struct pdr_rdma_seg *local, *remote;
    uint32_t nlocal, nremote;
    uint32_t tag;
    int posted;  /* push: write_room accepted, done_cb pending until done */
    int done;    /* push: done_cb ran (L) */
    int status;  /* push: done_cb's status (L) */
    int got;     /* pull: the immediate arrived (L) */
    int wait_go; /* push: waiting for RDMA_GO */
};

/* op's RDMA state, or NULL when RDMA does not move it. */
static struct rdma_room *rdma_of(const struct pdr__op *op)
{
    return op->mover == &pdr__mover_rdma ? op->mv : NULL;
}

/* The mover's engine-wide state (tcp_state.rdma). */
struct rdma_engine {
    struct pdr_rdma_ctx *rdma_ctx; /* opened by the first RDMA room, closed at shutdown */
};

static int rdma_ctx_get(pdr_xfer_engine_t *eng, int dev, struct pdr_rdma_ctx **ctx)
{
    struct rdma_engine *re = pdr__tcp_st(eng)->rdma;
    if (re->rdma_ctx == NULL) {
        char bus[32];
        const char *gpu = NULL;
        if (dev >= 0 && pdr__cuda_pci_bus_id(dev, bus, sizeof(bus)) == 0)
            gpu = bus;
        int err = 0;
        re->rdma_ctx = pdr__rdma_open(NULL, gpu, &err);
        if (re->rdma_ctx == NULL)
            return err != 0 ? err : PDR_EIO;
        pdr_info("transport: RDMA device %s opened", pdr__rdma_dev_name(re->rdma_ctx));
    }
    *ctx = re->rdma_ctx;
    return 0;
}

/* The decode's immediate: room tag32 of this link is in memory (completion thread). */
static void rdma_on_imm(void *arg, uint32_t tag32)
{
    struct rdma_link *l = arg;
    pdr_xfer_engine_t *eng = l->eng;
    pthread_mutex_lock(&eng->lock);
    for (struct pdr__op *op = PDR_DLINK_ENTRY(l->sess->ops, struct pdr__op, slink); op != NULL;
         op = PDR_DLINK_ENTRY(op->slink.next, struct pdr__op, slink)) {
        struct rdma_room *r = rdma_of(op);
        if (op->kind == PDR__OP_PULL && r != NULL && r->link == l && r->tag == tag32 && !r->got) {
            r->got = 1;
            op->got = op->total;
            pdr__op_ready_locked(eng, op, PDR__READY_GOT);
            break;
        }
    }
    pthread_mutex_unlock(&eng->lock);
}

/* The prefill's room finished (completion thread, or inside ep_destroy). */
static void rdma_on_done(void *arg, int status)
{
    struct rdma_room *r = arg;
    pdr_xfer_engine_t *eng = r->eng;
    struct pdr__op *op = r->op;
    pthread_mutex_lock(&eng->lock);
    r->done = 1;
    r->status = status;
    if (status == 0) {
        op->sent = op->total;
        pdr__op_ready_locked(eng, op, PDR__READY_SENT);
    } else {
        op->fail_status = status == PDR_ECLOSED ? PDR_EPEERGONE : status;
        pdr__op_ready_locked(eng, op, PDR__READY_FAIL);
    }
    pthread_mutex_unlock(&eng->lock);
    pdr__op_unref(eng, op); /* write_room's reference */
}

/* Destroys s's endpoint (never from a module callback, eng->lock not held): its rooms not finished fail
 * with PDR_EPEERGONE through the ready list; the caller's own room (if any) is completing already. */
void pdr__mv_rdma_link_kill(pdr_xfer_engine_t *eng, struct pdr__sess *s)
{
    struct rdma_link *l = s->rdma;
    if (l == NULL)
        return;
    s->rdma = NULL;
    pdr__rdma_ep_destroy(l->ep); /* push rooms posted on it get done_cb(PDR_ECLOSED) in here */
    pthread_mutex_lock(&eng->lock);
    for (struct pdr__op *op = PDR_DLINK_ENTRY(s->ops, struct pdr__op, slink); op != NULL;
         op = PDR_DLINK_ENTRY(op->slink.next, struct pdr__op, slink)) {
        struct rdma_room *r = rdma_of(op);
        if (r == NULL || r->link != l)
            continue;
        r->link = NULL;
        if (!r->got && !r->done && !__atomic_load_n(&op->dead, __ATOMIC_SEQ_CST)) {
            op->fail_status = PDR_EPEERGONE;
            pdr__op_ready_locked(eng, op, PDR__READY_FAIL);
        }
    }
    pthread_mutex_unlock(&eng->lock);
    free(l);
}

static int rdma_link_new(pdr_xfer_engine_t *eng, struct pdr__sess *s, int dev, struct rdma_link **out)
{
    struct pdr_rdma_ctx *ctx;
    int rc = rdma_ctx_get(eng, dev, &ctx);
    if (rc != 0)
        return rc;
    struct rdma_link *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return PDR_ENOMEM;
    l->eng = eng;
    l->sess = s;
    rc = pdr__rdma_ep_create(ctx, PDR_RDMA_DEFAULT_NQP, &l->ep, &l->mine);
    if (rc != 0) {
        free(l);
        return rc;
    }
    pdr__rdma_set_imm_cb(l->ep, rdma_on_imm, l);
    s->rdma = l;
    *out = l;
    return 0;
}

/* Drops a room's reference on a registered region's MR; frees the region (and its MR) when
 * pdr_xfer_mem_unregister already unlinked it and this was the last room using it. */
static void rdma_mem_unref(pdr_xfer_engine_t *eng, struct pdr_xfer_memreg *m)
{
    pthread_mutex_lock(&eng->lock);
    int last = --m->rdma_refs == 0 && !pdr_dlink_linked(&m->link);
    pthread_mutex_unlock(&eng->lock);
    if (last) {
        pdr__rdma_dereg(m->rdma_mr);
        free(m);
    }
}

/* The cached MR of the registered region that holds [addr, addr+len), registered now if this is the
 * region's first RDMA use; takes a reference on the region (r->regs) so that an unregister meanwhile
 * cannot release the MR under the room. Returns 0 with the keys, PDR_ENOROOM when no registered region
 * holds the whole range (the caller registers it per room), or the registration's error. */
static int rdma_mem_ref(pdr_xfer_engine_t *eng, struct pdr_rdma_ctx *ctx, struct rdma_room *r, void *addr,
                        size_t len, uint32_t *lkey, uint32_t *rkey)
{
    uintptr_t a = (uintptr_t)addr;
    struct pdr_xfer_memreg *m;
    pthread_mutex_lock(&eng->lock);
    for (m = PDR_DLINK_ENTRY(eng->mem, struct pdr_xfer_memreg, link); m != NULL;
         m = PDR_DLINK_ENTRY(m->link.next, struct pdr_xfer_memreg, link)) {
        uintptr_t b = (uintptr_t)m->addr;
        if (a >= b && a - b < m->len && len <= m->len - (a - b))
            break;
    }
    if (m != NULL)
        m->rdma_refs++;
    pthread_mutex_unlock(&eng->lock);
    if (m == NULL)
        return PDR_ENOROOM;
    r->regs[r->nregs++] = m;
    if (m->rdma_mr == NULL) { /* only thread 0 registers, so nobody else is doing this now */
        struct pdr_rdma_mr *mr;
        uint32_t lk, rk;
        int rc = pdr__rdma_reg(ctx, m->addr, m->len, m->kind == PDR_XFER_MEM_CUDA, &mr, &lk, &rk);
        if (rc != 0)
            return rc; /* the reference is dropped by rdma_room_free */
        pthread_mutex_lock(&eng->lock);
        m->rdma_mr = mr;
        m->rdma_lkey = lk;
        m->rdma_rkey = rk;
        pthread_mutex_unlock(&eng->lock);
    }
    *lkey = m->rdma_lkey;
    *rkey = m->rdma_rkey;
    return 0;
}

/* Releases a room's registrations and region references; its link must no longer be able to touch
 * them. */
static void rdma_room_free(struct rdma_room *r)
{
    for (size_t i = 0; i < r->nmr; i++)
        pdr__rdma_dereg(r->mrs[i]);
    for (size_t i = 0; i < r->nregs; i++)
        rdma_mem_unref(r->eng, r->regs[i]);
    free(r->regs);
    free(r->mrs);
    free(r->local);
    free(r->remote);
    free(r);
}

/* Fills r->local with op's non-empty segments and their keys (lkeys; for a pull the rkeys it sends):
 * a segment inside a region registered with pdr_xfer_mem_register uses that region's cached MR (the
 * keys cover the whole region, the address stays absolute), any other is registered for this room. */
static int rdma_room_reg(pdr_xfer_engine_t *eng, struct pdr__op *op, struct rdma_room *r)
{
    struct pdr_rdma_ctx *ctx;
    int rc = rdma_ctx_get(eng, op->dev, &ctx);
    if (rc != 0)
        return rc;
    if (op->nseg > PDR_RDMA_MAX_SEGS)
        return PDR_ETOOBIG;
    r->mrs = calloc(op->nseg + 1, sizeof(*r->mrs));
    r->regs = calloc(op->nseg + 1, sizeof(*r->regs));
    r->local = calloc(op->nseg + 1, sizeof(*r->local));
    if (r->mrs == NULL || r->regs == NULL || r->local == NULL)
        return PDR_ENOMEM;
    if (op->dev >= 0 && (rc = pdr__io_bind(&eng->io[0], op->dev)) != 0)
        return rc;
    for (size_t i = 0; i < op->nseg; i++) {
        if (op->segs[i].len == 0)
            continue;
        uint32_t lkey, rkey;
        rc = rdma_mem_ref(eng, ctx, r, op->segs[i].addr, op->segs[i].len, &lkey, &rkey);
        if (rc == PDR_ENOROOM) {
            rc = pdr__rdma_reg(ctx, op->segs[i].addr, op->segs[i].len, op->dev >= 0, &r->mrs[r->nmr], &lkey,
                               &rkey);
            if (rc == 0)
                r->nmr++;
        }
        if (rc != 0)
            return rc;
        r->local[r->nlocal].addr = (uint64_t)(uintptr_t)op->segs[i].addr;
        r->local[r->nlocal].len = op->segs[i].len;
        r->local[r->nlocal].key = op->kind == PDR__OP_PULL ? rkey : lkey;
        r->nlocal++;
    }
    return 0;
}

/* Decode: a FETCH_RDMA message for op on session s, or NULL (rc says why). */
struct ctl_msg *pdr__mv_rdma_fetch_msg(pdr_xfer_engine_t *eng, struct pdr__sess *s, struct pdr__op *op,
                                       int *rc)
{
    struct rdma_link *l = s->rdma;
    if (l == NULL && (*rc = rdma_link_new(eng, s, op->dev, &l)) != 0)
        return NULL;
    struct rdma_room *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        *rc = PDR_ENOMEM;
        return NULL;
    }
    r->eng = eng;
    r->op = op;
    r->tag = (uint32_t)op->xid;
    if ((*rc = rdma_room_reg(eng, op, r)) != 0) {
        rdma_room_free(r);
        return NULL;
    }
    uint8_t ep[PDR_RDMA_EP_MAX_BYTES];
    size_t eplen = pdr__rdma_pack_ep(&l->mine, ep, sizeof(ep));
    size_t memcap = pdr__rdma_mem_wire_size(r->nlocal);
    uint8_t *mem = malloc(memcap);
    size_t memlen = mem != NULL ? pdr__rdma_pack_mem(r->local, r->nlocal, mem, memcap) : 0;
    size_t len = pdr__xfer_fetch_rdma_size((uint32_t)op->nseg, eplen, memlen);
    struct ctl_msg *m = eplen != 0 && memlen != 0 ? pdr__ctl_new(len) : NULL;
    if (m == NULL) {
        free(mem);
        rdma_room_free(r);
        *rc = PDR_ENOMEM;
        return NULL;
    }
    m->len = pdr__xfer_fetch_rdma_encode(m->data, len, op->room, op->xid, op->total, op->timeout_ms,
                                         &op->segs[0].len, sizeof(pdr_xfer_seg_t), (uint32_t)op->nseg, r->tag,
                                         ep, eplen, mem, memlen);
    free(mem);
    r->link = l;
    op->mover = &pdr__mover_rdma;
    op->mv = r;
    return m;
}

/* Prefill: posts a room whose link is connected. */
static void rdma_post(pdr_xfer_engine_t *eng, struct pdr__op *op)
{
    struct rdma_room *r = rdma_of(op);
    pdr__op_ref(eng, op); /* dropped by rdma_on_done */
    r->wait_go = 0;
    r->posted = 1;
    int rc = pdr__rdma_write_room(r->link->ep, r->tag, r->local, r->nlocal, r->remote, r->nremote,
                                  rdma_on_done, r);
    if (rc != 0) {
        r->posted = 0;
        pdr__op_unref(eng, op);
        pdr_warn("transport: rdma write of room %llu failed (%s)", (unsigned long long)op->room,
                 pdr_strerror(rc));
        pdr__op_complete(eng, op, rc, rc);
    }
}

/* Prefill: serves op (matched with a FETCH_RDMA body) by RDMA. 0, or a PDR_E* code (nothing started). */
int pdr__mv_rdma_push_start(pdr_xfer_engine_t *eng, struct pdr__op *op, struct pdr__sess *s,
                            const uint8_t *body, size_t len)
{
    struct pdr_xfer_fetch_desc fd;
    struct pdr_xfer_rdma_desc rd;
    struct pdr_rdma_ep_info peer;
    if (pdr__xfer_fetch_rdma_decode(body, len, &fd, &rd) != 0 ||
        pdr__rdma_unpack_ep(rd.ep, rd.eplen, &peer) != 0)
        return PDR_EPROTO;
    struct rdma_room *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return PDR_ENOMEM;
    r->eng = eng;
    r->op = op;
    r->tag = rd.tag;
    r->remote = calloc(rd.nseg, sizeof(*r->remote));
    uint64_t total;
    int rc = r->remote == NULL ? PDR_ENOMEM : 0;
    if (rc == 0)
        rc = pdr__rdma_unpack_mem(rd.mem, rd.memlen, r->remote, rd.nseg, &r->nremote, &total);
    if (rc == 0)
        rc = rdma_room_reg(eng, op, r);
    if (rc != 0) {
        rdma_room_free(r);
        return rc;
    }
    struct rdma_link *l = s->rdma;
    if (l != NULL && (l->peer_len != rd.eplen || memcmp(l->peer_ep, rd.ep, rd.eplen) != 0))
        pdr__mv_rdma_link_kill(eng, s); /* the decode has a new endpoint: its old one is gone */
    l = s->rdma;
    if (l == NULL) {
        rc = rdma_link_new(eng, s, op->dev, &l);
        if (rc == 0 && (rc = pdr__rdma_ep_connect(l->ep, &peer)) != 0)
            pdr__mv_rdma_link_kill(eng, s);
        if (rc != 0) {
            rdma_room_free(r);
            return rc;
        }
        memcpy(l->peer_ep, rd.ep, rd.eplen);
        l->peer_len = rd.eplen;
        uint8_t ep[PDR_RDMA_EP_MAX_BYTES];
        size_t eplen = pdr__rdma_pack_ep(&l->mine, ep, sizeof(ep));
        size_t flen = PDR_XFER_HDR_LEN + PDR_XFER_RDMA_READY_FIXED + eplen;
        struct ctl_msg *m = eplen != 0 ? pdr__ctl_new(flen) : NULL;
        if (m == NULL) {
            pdr__mv_rdma_link_kill(eng, s);
            rdma_room_free(r);
            return PDR_ENOMEM;
        }
        m->len = pdr__xfer_rdma_ready_encode(m->data, flen, op->room, fd.xid, peer.qpn[0], ep, eplen);
        pdr__cq_append(eng, s->ctl, m);
    }
    r->link = l;
    op->mover = &pdr__mover_rdma;
    op->mv = r;
    op->backend = "rdma";
    if (l->connected)
        rdma_post(eng, op);
    else
        r->wait_go = 1;
    return 0;
}

/* Decode: the prefill's endpoint for ours. */
int pdr__mv_rdma_on_ready(pdr_xfer_engine_t *eng, struct pdr__conn *c, uint64_t room, const uint8_t *body,
                          size_t len)
{
    uint64_t xid;
    uint32_t qpn0;
    const uint8_t *epb;
    size_t eplen;
    struct pdr_rdma_ep_info peer;
    struct pdr__sess *s = c->sess;
    if (!c->outbound || s == NULL || pdr__xfer_rdma_ready_decode(body, len, &xid, &qpn0, &epb, &eplen) != 0 ||
        pdr__rdma_unpack_ep(epb, eplen, &peer) != 0) {
        pdr__conn_fail(eng, c, PDR_EPROTO);
        return -1;
    }
    struct rdma_link *l = s->rdma;
    if (l == NULL || l->connected || l->mine.qpn[0] != qpn0)
        return 0; /* for an endpoint we already dropped */
    int rc = pdr__rdma_ep_connect(l->ep, &peer);
    if (rc != 0) {
        pdr_warn("transport: rdma connect to %s failed (%s)", s->peer, pdr_strerror(rc));
        pdr__mv_rdma_link_kill(eng, s);
        return 0;
    }
    l->connected = 1;
    return pdr__queue_ctl(eng, c, PDR_XF_RDMA_GO, room, xid, 0, 0);
}

/* Prefill: the decode connected its side: post every room that waited. */
void pdr__mv_rdma_on_go(pdr_xfer_engine_t *eng, struct pdr__sess *s)
{
    struct rdma_link *l = s->rdma;
    if (l == NULL || l->connected)
        return;
    l->connected = 1;
    for (;;) {
        struct pdr__op *op;
        pthread_mutex_lock(&eng->lock);
        for (op = PDR_DLINK_ENTRY(s->ops, struct pdr__op, slink); op != NULL;
             op = PDR_DLINK_ENTRY(op->slink.next, struct pdr__op, slink)) {
            struct rdma_room *r = rdma_of(op);
            if (op->kind == PDR__OP_PUSH && r != NULL && r->wait_go && r->link == l)
                break;
        }
        pthread_mutex_unlock(&eng->lock);
        if (op == NULL)
            return;
        rdma_post(eng, op);
        if (s->rdma != l)
            return;
    }
}

/* From pdr__tcp_abort: releases op's RDMA state, first destroying the endpoint if it may still touch it. */
void pdr__mv_rdma_abort(pdr_xfer_engine_t *eng, struct pdr__op *op, struct pdr__sess *s)
{
    struct rdma_room *r = rdma_of(op);
    if (r == NULL)
        return;
    pthread_mutex_lock(&eng->lock);
    struct rdma_link *l = r->link;
    int safe = op->kind == PDR__OP_PULL ? r->got || op->done_seen : !r->posted || (r->done && r->status == 0);
    int dead_ep = op->kind == PDR__OP_PUSH && r->done && r->status != 0;
    pthread_mutex_unlock(&eng->lock);
    if (l != NULL && s != NULL && s->rdma == l && (!safe || dead_ep))
        pdr__mv_rdma_link_kill(eng, s);
    op->mv = NULL;
    op->mover = NULL;
    rdma_room_free(r);
}

static void rdma_sess_close(pdr_xfer_engine_t *eng, struct pdr__io *io, struct pdr__sess *s)
{
    (void)io;
    pdr__mv_rdma_link_kill(eng, s);
}

static int rdma_init(pdr_xfer_engine_t *eng)
{
    struct rdma_engine *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return PDR_ENOMEM;
    pdr__tcp_st(eng)->rdma = s;
    return 0;
}

static void rdma_shutdown(pdr_xfer_engine_t *eng)
{
    struct rdma_engine *s = pdr__tcp_st(eng)->rdma;
    if (s == NULL)
        return;
    /* Every room is gone: release the registered regions' cached MRs before their context. */
    for (struct pdr_xfer_memreg *m = PDR_DLINK_ENTRY(eng->mem, struct pdr_xfer_memreg, link); m != NULL;
         m = PDR_DLINK_ENTRY(m->link.next, struct pdr_xfer_memreg, link)) {
        pdr__rdma_dereg(m->rdma_mr);
        m->rdma_mr = NULL;
    }
    if (s->rdma_ctx != NULL)
        pdr__rdma_close(s->rdma_ctx);
    free(s);
    pdr__tcp_st(eng)->rdma = NULL;
}

const struct pdr__mover_ops pdr__mover_rdma = {
    .name = "rdma",
    .init = rdma_init,
    .offer = pdr__mv_rdma_fetch_msg,
    .serve = pdr__mv_rdma_push_start,
    .abort = pdr__mv_rdma_abort,
    .sess_close = rdma_sess_close,
    .shutdown = rdma_shutdown,
};
