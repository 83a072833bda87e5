/*
 * The RDMA runtime: one verbs context (device, port, PD, one CQ with a completion channel, a completion
 * thread) and, per peer, an endpoint of nqp RC QPs. Executes the decisions of rdma_plan.c (QP state
 * machine, write plan); descriptors come from rdma_wire.c. Compiled everywhere, exercised only with a
 * device (the engine uses it only when pdr__rdma_device_count() > 0).
 *
 * Threads: the API is called from any engine thread; every post to a send queue, every CQE and every
 * callback happens on the context's completion thread. write_room only queues the room and kicks the
 * thread (an eventfd), so a callback never runs inside the call that posted its work and no engine
 * thread ever sees another room's callback. One mutex (ctx->mu) guards all context state; callbacks run
 * with it released.
 *
 * Invariants:
 *  - wr_id: a batch's last (signaled) WR carries (batch pointer | 1); receives carry (qp pointer | 2);
 *    the unsignaled WRs carry 0 (their CQEs exist only on error, and then only wc.qp_num is used).
 *  - A QP's send queue never holds more than ep->max_wr WRs: a batch is posted only when its WRs fit,
 *    and retired (its slots freed) when its signaled CQE is polled, success or flush.
 *  - The CQ never overflows: each endpoint reserves nqp * (max_wr + PDR_RDMA_RECV_WR) entries, the
 *    most its QPs can ever complete at once (every WR flushed), and ep_create fails beyond the CQ size.
 *  - An endpoint's memory is freed only after its QPs were moved to ERR and every batch and receive
 *    was retired (flushed), so no CQE can point into freed memory.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "gpu_cuda.h"
#include "err.h"
#include "rdma.h"
#include "util.h"

#define CQ_ENTRIES 65536 /* clamped to the device's max_cqe */
#define MAX_RD_ATOMIC 16 /* clamped to the device's max_qp_rd_atom */
#define QP_TIMEOUT 14    /* 4.096 us * 2^14 = 67 ms; mooncake rdma_endpoint.cpp:36 */
#define QP_RETRY 7       /* mooncake */
#define QP_RNR_RETRY 7   /* 7: retry forever on RNR; mooncake */
#define MIN_RNR_TIMER 12 /* 0.64 ms */
#define DRAIN_TIMEOUT_MS 5000
#define POLL_BATCH 32

struct pdr_rdma_mr {
    struct ibv_mr *mr;
    struct pdr_rdma_ctx *ctx;
    struct pdr_rdma_mr *prev, *next;
};

struct room_op;

struct batch {
    struct room_op *op;
    uint32_t first, count;
    uint16_t qp;
    uint8_t is_imm;
};

struct room_op {
    struct pdr_rdma_ep *ep;
    struct room_op *prev, *next; /* ep->ops, in posting order; or the finished list */
    pdr__rdma_done_cb cb;
    void *arg;
    struct pdr_rdma_wr *wrs;
    struct batch *batches; /* ndata data batches, then the IMM batch */
    uint32_t ndata, next_batch, done_batches, inflight;
    int imm_posted, imm_done;
    int status;
};

struct qp {
    struct ibv_qp *qp;
    struct pdr_rdma_ep *ep;
    enum pdr_rdma_qp_state state;
    uint32_t outstanding; /* send WRs posted and not yet retired */
    uint32_t recv_posted;
    uint32_t psn;
};

struct pdr_rdma_ep {
    struct pdr_rdma_ctx *ctx;
    struct pdr_rdma_ep *prev, *next;
    unsigned nqp;
    uint32_t max_wr;
    uint32_t cq_reserved;
    uint32_t next_qp;    /* QP of the next room's first batch */
    uint32_t cb_pending; /* finished rooms whose callback has not returned yet */
    int err;             /* first error; the endpoint is dead once set */
    int closing;         /* ep_destroy in progress */
    pdr__rdma_imm_cb imm_cb;
    void *imm_arg;
    struct room_op *ops_head, *ops_tail;
    struct qp qps[PDR_RDMA_MAX_QP];
};

struct pdr_rdma_ctx {
    struct ibv_context *vctx;
    struct ibv_pd *pd;
    struct ibv_comp_channel *chan;
    struct ibv_cq *cq;
    char name[64];
    uint8_t port;
    uint8_t link_layer;
    uint8_t gid_index;
    uint8_t active_mtu;
    uint16_t lid;
    uint8_t gid[16];
    uint32_t max_msg;
    uint32_t dev_max_wr;
    int max_rd_atomic;
    uint32_t cq_size, cq_used;

    pthread_mutex_t mu;
    pthread_cond_t drained;
    pthread_t thread;
    int thread_started;
    int kick_fd;
    int stop;
    struct pdr_rdma_ep *eps;
    struct pdr_rdma_mr *mrs;
    const struct pdr_rdma_ep *in_cb_ep; /* the endpoint whose imm_cb runs now, for ep_destroy */
};

/* ---------------------------------------------------------------------------------------------------
 * Helpers
 */

int pdr__rdma_device_count(void)
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (list == NULL)
        return 0; /* ENOSYS without kernel support, or no providers */
    ibv_free_device_list(list);
    return n > 0 ? n : 0;
}

static int wc_to_err(enum ibv_wc_status s)
{
    return s == IBV_WC_RETRY_EXC_ERR ? PDR_EPEERGONE : PDR_EIO;
}

static void kick(struct pdr_rdma_ctx *ctx)
{
    uint64_t one = 1;
    if (write(ctx->kick_fd, &one, sizeof(one)) != (ssize_t)sizeof(one) && errno != EAGAIN)
        pdr_error("rdma: eventfd write: %s", strerror(errno));
}

static int qp_event(struct qp *q, enum pdr_rdma_qp_event ev, enum pdr_rdma_qp_action *act)
{
    enum pdr_rdma_qp_state next;
    int rc = pdr__rdma_qp_step(q->state, ev, &next, act);
    if (rc != 0) {
        pdr_error("rdma: QP %u: event %s invalid in state %s", q->qp ? q->qp->qp_num : 0,
                  pdr__rdma_qp_event_name(ev), pdr__rdma_qp_state_name(q->state));
        return rc;
    }
    q->state = next;
    return 0;
}

static int set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return -1;
    return 0;
}

/* ---------------------------------------------------------------------------------------------------
 * Posting and completions (completion thread, ctx->mu held)
 */

static void op_unlink(struct pdr_rdma_ep *ep, struct room_op *op)
{
    if (op->prev)
        op->prev->next = op->next;
    else
        ep->ops_head = op->next;
    if (op->next)
        op->next->prev = op->prev;
    else
        ep->ops_tail = op->prev;
    op->prev = op->next = NULL;
}

/* Moves op to the finished list (its callback runs once the lock is released). */
static void op_finish(struct room_op *op, struct room_op **finished)
{
    op_unlink(op->ep, op);
    op->ep->cb_pending++;
    op->next = *finished;
    *finished = op;
}

static void ep_fail(struct pdr_rdma_ep *ep, int err, struct room_op **finished)
{
    if (ep->err == 0) {
        ep->err = err;
        /* While closing, ep_drain has already moved every QP to ERR (and the state machine to DESTROYED). */
        for (unsigned i = 0; i < ep->nqp && !ep->closing; i++) {
            struct qp *q = &ep->qps[i];
            enum pdr_rdma_qp_action act;
            if (q->qp == NULL || qp_event(q, PDR_RDMA_QPE_ERROR, &act) != 0 || act != PDR_RDMA_QPA_FLUSH_FAIL)
                continue;
            /* One QP's error does not stop its siblings: move them all so their work flushes. */
            struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
            int rc = ibv_modify_qp(q->qp, &a, IBV_QP_STATE);
            if (rc != 0)
                pdr_error("rdma: %s: modify QP %u to ERR: %s", ep->ctx->name, q->qp->qp_num, strerror(rc));
        }
    }
    struct room_op *op = ep->ops_head;
    while (op != NULL) {
        struct room_op *nx = op->next;
        if (op->status == 0)
            op->status = ep->err;
        if (op->inflight == 0)
            op_finish(op, finished);
        op = nx;
    }
}

static int post_batch(struct pdr_rdma_ep *ep, struct room_op *op, struct batch *b)
{
    struct ibv_send_wr wrs[PDR_RDMA_BATCH_WRS], *bad = NULL;
    struct ibv_sge sges[PDR_RDMA_BATCH_WRS];
    for (uint32_t i = 0; i < b->count; i++) {
        const struct pdr_rdma_wr *w = &op->wrs[b->first + i];
        struct ibv_send_wr *s = &wrs[i];
        memset(s, 0, sizeof(*s));
        s->next = i + 1 < b->count ? &wrs[i + 1] : NULL;
        s->wr.rdma.remote_addr = w->raddr;
        s->wr.rdma.rkey = w->rkey;
        if (w->flags & PDR_RDMA_WR_IMM) {
            s->opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
            s->imm_data = htonl(w->imm);
            s->num_sge = 0;
        } else {
            sges[i].addr = w->laddr;
            sges[i].length = w->len;
            sges[i].lkey = w->lkey;
            s->opcode = IBV_WR_RDMA_WRITE;
            s->sg_list = &sges[i];
            s->num_sge = 1;
        }
        if (i + 1 == b->count) {
            s->send_flags = IBV_SEND_SIGNALED;
            s->wr_id = (uint64_t)(uintptr_t)b | 1u;
        }
    }
    int rc = ibv_post_send(ep->qps[b->qp].qp, wrs, &bad);
    if (rc != 0) {
        pdr_error("rdma: %s: ibv_post_send on QP %u: %s", ep->ctx->name, ep->qps[b->qp].qp->qp_num,
                  strerror(rc));
        return PDR_EIO;
    }
    ep->qps[b->qp].outstanding += b->count;
    op->inflight++;
    return 0;
}

/* Posts whatever fits, rooms in order: a room's batches go out before any of the next room's. */
static void ep_pump(struct pdr_rdma_ep *ep, struct room_op **finished)
{
    if (ep->err != 0 || ep->closing)
        return;
    for (struct room_op *op = ep->ops_head; op != NULL; op = op->next) {
        while (op->next_batch < op->ndata) {
            struct batch *b = &op->batches[op->next_batch];
            if (ep->qps[b->qp].outstanding + b->count > ep->max_wr)
                return;
            if (post_batch(ep, op, b) != 0) {
                ep_fail(ep, PDR_EIO, finished);
                return;
            }
            op->next_batch++;
        }
        if (op->done_batches < op->ndata)
            continue; /* its IMM waits for every data WRITE to complete; later rooms may post meanwhile */
        if (!op->imm_posted) {
            struct batch *b = &op->batches[op->ndata];
            if (ep->qps[b->qp].outstanding + b->count > ep->max_wr)
                return;
            if (post_batch(ep, op, b) != 0) {
                ep_fail(ep, PDR_EIO, finished);
                return;
            }
            op->imm_posted = 1;
        }
    }
}

static struct pdr_rdma_ep *ep_by_qpn(struct pdr_rdma_ctx *ctx, uint32_t qpn)
{
    for (struct pdr_rdma_ep *ep = ctx->eps; ep != NULL; ep = ep->next)
        for (unsigned i = 0; i < ep->nqp; i++)
            if (ep->qps[i].qp != NULL && ep->qps[i].qp->qp_num == qpn)
                return ep;
    return NULL;
}

static void log_wc(const struct pdr_rdma_ctx *ctx, const struct ibv_wc *wc)
{
    if (wc->status == IBV_WC_WR_FLUSH_ERR)
        pdr_debug("rdma: %s: QP %u: %s", ctx->name, wc->qp_num, ibv_wc_status_str(wc->status));
    else
        pdr_error("rdma: %s: QP %u: completion error: %s (vendor 0x%x)", ctx->name, wc->qp_num,
                  ibv_wc_status_str(wc->status), wc->vendor_err);
}

/* Handles one CQE. Sets *imm_ep when an immediate arrived for that endpoint's callback. */
static void handle_wc(struct pdr_rdma_ctx *ctx, const struct ibv_wc *wc, struct room_op **finished,
                      struct pdr_rdma_ep **imm_ep, uint32_t *imm)
{
    uintptr_t id = (uintptr_t)wc->wr_id;
    if (wc->status != IBV_WC_SUCCESS)
        log_wc(ctx, wc);
    if ((id & 3u) == 1u) {
        struct batch *b = (struct batch *)(id & ~(uintptr_t)3u);
        struct room_op *op = b->op;
        struct pdr_rdma_ep *ep = op->ep;
        ep->qps[b->qp].outstanding -= b->count;
        op->inflight--;
        if (wc->status != IBV_WC_SUCCESS) {
            /* Fails every room of the endpoint; those with nothing in flight (this one too, if this
             * was its last batch) finish now, the others when their last batch flushes. */
            ep_fail(ep, ep->closing ? PDR_ECLOSED : wc_to_err(wc->status), finished);
        } else {
            if (b->is_imm) {
                /* Delivered: the peer has every byte and its notification, whatever failed since. */
                op->imm_done = 1;
                op->status = 0;
            } else
                op->done_batches++;
            if (op->imm_done || (op->status != 0 && op->inflight == 0))
                op_finish(op, finished);
        }
        ep_pump(ep, finished);
    } else if ((id & 3u) == 2u) {
        struct qp *q = (struct qp *)(id & ~(uintptr_t)3u);
        struct pdr_rdma_ep *ep = q->ep;
        q->recv_posted--;
        if (wc->status != IBV_WC_SUCCESS) {
            ep_fail(ep, ep->closing ? PDR_ECLOSED : wc_to_err(wc->status), finished);
            return;
        }
        if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM && (wc->wc_flags & IBV_WC_WITH_IMM)) {
            *imm_ep = ep;
            *imm = ntohl(wc->imm_data);
        }
        if (ep->err == 0 && !ep->closing) {
            struct ibv_recv_wr r = {.wr_id = (uint64_t)(uintptr_t)q | 2u}, *bad = NULL;
            int rc = ibv_post_recv(q->qp, &r, &bad);
            if (rc != 0) {
                pdr_error("rdma: %s: ibv_post_recv: %s", ctx->name, strerror(rc));
                ep_fail(ep, PDR_EIO, finished);
            } else {
                q->recv_posted++;
            }
        }
    } else if (wc->status != IBV_WC_SUCCESS) {
        /* An unsignaled WRITE failed or flushed: only its QP is known. */
        struct pdr_rdma_ep *ep = ep_by_qpn(ctx, wc->qp_num);
        if (ep != NULL)
            ep_fail(ep, ep->closing ? PDR_ECLOSED : wc_to_err(wc->status), finished);
    }
}

/* Runs the callbacks of finished rooms; ctx->mu must not be held. ep_destroy waits for cb_pending to
 * drop to 0, so the endpoint outlives the decrement and not one instant more. */
static void run_finished(struct room_op *finished)
{
    while (finished != NULL) {
        struct room_op *op = finished;
        struct pdr_rdma_ep *ep = op->ep;
        struct pdr_rdma_ctx *ctx = ep->ctx;
        finished = op->next;
        op->cb(op->arg, op->status);
        free(op);
        pthread_mutex_lock(&ctx->mu);
        ep->cb_pending--;
        pthread_cond_broadcast(&ctx->drained);
        pthread_mutex_unlock(&ctx->mu);
    }
}

static void drain_cq(struct pdr_rdma_ctx *ctx)
{
    struct ibv_wc wcs[POLL_BATCH];
    for (;;) {
        int n = ibv_poll_cq(ctx->cq, POLL_BATCH, wcs);
        if (n < 0) {
            pdr_error("rdma: %s: ibv_poll_cq failed (%d)", ctx->name, n);
            return;
        }
        if (n == 0)
            return;
        for (int i = 0; i < n; i++) {
            struct room_op *finished = NULL;
            struct pdr_rdma_ep *imm_ep = NULL;
            uint32_t imm = 0;
            pdr__rdma_imm_cb cb = NULL;
            void *arg = NULL;
            pthread_mutex_lock(&ctx->mu);
            handle_wc(ctx, &wcs[i], &finished, &imm_ep, &imm);
            if (imm_ep != NULL && imm_ep->imm_cb != NULL && !imm_ep->closing) {
                cb = imm_ep->imm_cb;
                arg = imm_ep->imm_arg;
                ctx->in_cb_ep = imm_ep;
            }
            pthread_cond_broadcast(&ctx->drained);
            pthread_mutex_unlock(&ctx->mu);
            if (cb != NULL) {
                cb(arg, imm);
                pthread_mutex_lock(&ctx->mu);
                ctx->in_cb_ep = NULL;
                pthread_cond_broadcast(&ctx->drained);
                pthread_mutex_unlock(&ctx->mu);
            }
            run_finished(finished);
        }
    }
}

static void handle_async(struct pdr_rdma_ctx *ctx)
{
    struct ibv_async_event ev;
    while (ibv_get_async_event(ctx->vctx, &ev) == 0) {
        pdr_warn("rdma: %s: async event: %s", ctx->name, ibv_event_type_str(ev.event_type));
        if (ev.event_type == IBV_EVENT_QP_FATAL || ev.event_type == IBV_EVENT_QP_ACCESS_ERR ||
            ev.event_type == IBV_EVENT_QP_REQ_ERR) {
            struct room_op *finished = NULL;
            pthread_mutex_lock(&ctx->mu);
            struct pdr_rdma_ep *ep = ep_by_qpn(ctx, ev.element.qp->qp_num);
            if (ep != NULL)
                ep_fail(ep, PDR_EIO, &finished);
            pthread_mutex_unlock(&ctx->mu);
            run_finished(finished);
        }
        ibv_ack_async_event(&ev);
    }
}

static void *completion_thread(void *p)
{
    struct pdr_rdma_ctx *ctx = p;
    for (;;) {
        struct pollfd fds[3] = {{.fd = ctx->kick_fd, .events = POLLIN},
                                {.fd = ctx->chan->fd, .events = POLLIN},
                                {.fd = ctx->vctx->async_fd, .events = POLLIN}};
        int rc = poll(fds, 3, 1000);
        if (rc < 0 && errno != EINTR) {
            pdr_error("rdma: poll: %s", strerror(errno));
            break;
        }
        if (fds[0].revents & POLLIN) {
            uint64_t v;
            if (read(ctx->kick_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
                pdr_error("rdma: eventfd read: %s", strerror(errno));
        }
        pthread_mutex_lock(&ctx->mu);
        int stop = ctx->stop;
        struct room_op *finished = NULL;
        for (struct pdr_rdma_ep *ep = ctx->eps; ep != NULL; ep = ep->next)
            ep_pump(ep, &finished);
        pthread_mutex_unlock(&ctx->mu);
        run_finished(finished);
        if (stop)
            break;
        if (fds[1].revents & POLLIN) {
            struct ibv_cq *cq;
            void *cq_ctx;
            if (ibv_get_cq_event(ctx->chan, &cq, &cq_ctx) == 0) {
                ibv_ack_cq_events(cq, 1);
                if (ibv_req_notify_cq(cq, 0) != 0)
                    pdr_error("rdma: %s: ibv_req_notify_cq failed", ctx->name);
            }
        }
        if (fds[2].revents & POLLIN)
            handle_async(ctx);
        /* Always poll: after re-arming, and as a safety net on the 1 s timeout. */
        drain_cq(ctx);
    }
    return NULL;
}

/* ---------------------------------------------------------------------------------------------------
 * Context
 */

static int is_ipv4_mapped(const uint8_t *g)
{
    static const uint8_t pfx[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return memcmp(g, pfx, 12) == 0;
}

static int is_zero(const uint8_t *g)
{
    static const uint8_t z[16];
    return memcmp(g, z, 16) == 0;
}

/* RoCE: a RoCE v2 IPv4-mapped GID first (routable, what most fabrics configure), then any RoCE v2, then
 * any nonzero entry. */
static int pick_gid(struct pdr_rdma_ctx *ctx, int tbl_len)
{
    int best = -1, best_rank = 0;
    for (int i = 0; i < tbl_len && i < 256; i++) {
        struct ibv_gid_entry e;
        int rank;
        if (ibv_query_gid_ex(ctx->vctx, ctx->port, (uint32_t)i, &e, 0) == 0) {
            if (is_zero(e.gid.raw))
                continue;
            if (e.gid_type == IBV_GID_TYPE_ROCE_V2)
                rank = is_ipv4_mapped(e.gid.raw) ? 3 : 2;
            else
                rank = 1;
        } else {
            union ibv_gid g;
            if (ibv_query_gid(ctx->vctx, ctx->port, i, &g) != 0 || is_zero(g.raw))
                continue;
            rank = 1;
        }
        if (rank > best_rank) {
            best = i;
            best_rank = rank;
        }
    }
    if (best < 0)
        return PDR_ENOTSUP;
    union ibv_gid g;
    if (ibv_query_gid(ctx->vctx, ctx->port, best, &g) != 0)
        return PDR_EIO;
    ctx->gid_index = (uint8_t)best;
    memcpy(ctx->gid, g.raw, 16);
    return 0;
}

static struct ibv_device *choose_device(struct ibv_device **list, int n, const char *dev_name,
                                        const char *gpu_bus)
{
    char picked[64];
    if (dev_name == NULL && pdr__rdma_pick_nic("/sys", gpu_bus, picked, sizeof(picked)) == 0)
        dev_name = picked;
    for (int i = 0; i < n; i++)
        if (dev_name != NULL && strcmp(ibv_get_device_name(list[i]), dev_name) == 0)
            return list[i];
    return dev_name == NULL || dev_name == picked ? list[0] : NULL;
}

const char *pdr__rdma_dev_name(const struct pdr_rdma_ctx *ctx)
{
    return ctx->name;
}

static int ctx_setup(struct pdr_rdma_ctx *ctx)
{
    struct ibv_device_attr da;
    int rc = ibv_query_device(ctx->vctx, &da);
    if (rc != 0) {
        pdr_error("rdma: %s: ibv_query_device: %s", ctx->name, strerror(rc));
        return PDR_EIO;
    }
    ctx->dev_max_wr = da.max_qp_wr > 0 ? (uint32_t)da.max_qp_wr : 1;
    ctx->max_rd_atomic = da.max_qp_rd_atom < MAX_RD_ATOMIC ? da.max_qp_rd_atom : MAX_RD_ATOMIC;
    struct ibv_port_attr pa;
    for (int p = 1; p <= da.phys_port_cnt && p < 256; p++) {
        rc = ibv_query_port(ctx->vctx, (uint8_t)p, &pa);
        if (rc != 0) {
            pdr_error("rdma: %s: ibv_query_port %d: %s", ctx->name, p, strerror(rc));
            continue;
        }
        if (pa.state == IBV_PORT_ACTIVE) {
            ctx->port = (uint8_t)p;
            break;
        }
    }
    if (ctx->port == 0) {
        pdr_error("rdma: %s: no ACTIVE port; check `ibv_devinfo` and the cabling/link", ctx->name);
        return PDR_ENOTSUP;
    }
    ctx->active_mtu = (uint8_t)pa.active_mtu;
    ctx->max_msg = pa.max_msg_sz > 0 && pa.max_msg_sz < PDR_RDMA_WR_BYTES ? pa.max_msg_sz : PDR_RDMA_WR_BYTES;
    if (pa.link_layer == IBV_LINK_LAYER_ETHERNET) {
        ctx->link_layer = PDR_RDMA_LINK_ETH;
        rc = pick_gid(ctx, pa.gid_tbl_len);
        if (rc != 0) {
            pdr_error("rdma: %s: no usable GID on port %u; configure an IP address on its netdev", ctx->name,
                      ctx->port);
            return rc;
        }
    } else {
        ctx->link_layer = PDR_RDMA_LINK_IB;
        ctx->lid = pa.lid;
        union ibv_gid g;
        if (ibv_query_gid(ctx->vctx, ctx->port, 0, &g) == 0)
            memcpy(ctx->gid, g.raw, 16);
    }
    ctx->pd = ibv_alloc_pd(ctx->vctx);
    if (ctx->pd == NULL) {
        pdr_error("rdma: %s: ibv_alloc_pd: %s", ctx->name, strerror(errno));
        return PDR_EIO;
    }
    ctx->chan = ibv_create_comp_channel(ctx->vctx);
    if (ctx->chan == NULL) {
        pdr_error("rdma: %s: ibv_create_comp_channel: %s", ctx->name, strerror(errno));
        return PDR_EIO;
    }
    ctx->cq_size = da.max_cqe > 0 && da.max_cqe < CQ_ENTRIES ? (uint32_t)da.max_cqe : CQ_ENTRIES;
    ctx->cq = ibv_create_cq(ctx->vctx, (int)ctx->cq_size, NULL, ctx->chan, 0);
    if (ctx->cq == NULL) {
        pdr_error("rdma: %s: ibv_create_cq(%u): %s", ctx->name, ctx->cq_size, strerror(errno));
        return PDR_EIO;
    }
    rc = ibv_req_notify_cq(ctx->cq, 0);
    if (rc != 0) {
        pdr_error("rdma: %s: ibv_req_notify_cq: %s", ctx->name, strerror(rc));
        return PDR_EIO;
    }
    if (set_nonblock(ctx->chan->fd) != 0 || set_nonblock(ctx->vctx->async_fd) != 0)
        return PDR_EIO;
    ctx->kick_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (ctx->kick_fd < 0)
        return PDR_EIO;
    if (pthread_create(&ctx->thread, NULL, completion_thread, ctx) != 0)
        return PDR_ENOMEM;
    ctx->thread_started = 1;
    return 0;
}

static void ctx_free(struct pdr_rdma_ctx *ctx)
{
    if (ctx->thread_started) {
        pthread_mutex_lock(&ctx->mu);
        ctx->stop = 1;
        pthread_mutex_unlock(&ctx->mu);
        kick(ctx);
        pthread_join(ctx->thread, NULL);
    }
    int rc;
    if (ctx->cq != NULL && (rc = ibv_destroy_cq(ctx->cq)) != 0)
        pdr_error("rdma: %s: ibv_destroy_cq: %s", ctx->name, strerror(rc));
    if (ctx->chan != NULL && (rc = ibv_destroy_comp_channel(ctx->chan)) != 0)
        pdr_error("rdma: %s: ibv_destroy_comp_channel: %s", ctx->name, strerror(rc));
    if (ctx->pd != NULL && (rc = ibv_dealloc_pd(ctx->pd)) != 0)
        pdr_error("rdma: %s: ibv_dealloc_pd: %s", ctx->name, strerror(rc));
    if (ctx->vctx != NULL && ibv_close_device(ctx->vctx) != 0)
        pdr_error("rdma: %s: ibv_close_device failed", ctx->name);
    if (ctx->kick_fd >= 0)
        close(ctx->kick_fd);
    pthread_cond_destroy(&ctx->drained);
    pthread_mutex_destroy(&ctx->mu);
    free(ctx);
}

struct pdr_rdma_ctx *pdr__rdma_open(const char *dev_name, const char *gpu_pci_bus_id, int *err)
{
    int dummy;
    if (err == NULL)
        err = &dummy;
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (list == NULL || n <= 0) {
        if (list != NULL)
            ibv_free_device_list(list);
        *err = PDR_ENOTSUP;
        return NULL;
    }
    struct ibv_device *dev = choose_device(list, n, dev_name, gpu_pci_bus_id);
    if (dev == NULL) {
        pdr_error("rdma: no RDMA device named \"%s\"; see `ibv_devices`", dev_name);
        ibv_free_device_list(list);
        *err = PDR_EINVAL;
        return NULL;
    }
    struct pdr_rdma_ctx *ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL) {
        ibv_free_device_list(list);
        *err = PDR_ENOMEM;
        return NULL;
    }
    ctx->kick_fd = -1;
    pthread_mutex_init(&ctx->mu, NULL);
    pthread_cond_init(&ctx->drained, NULL);
    snprintf(ctx->name, sizeof(ctx->name), "%s", ibv_get_device_name(dev));
    ctx->vctx = ibv_open_device(dev);
    ibv_free_device_list(list);
    if (ctx->vctx == NULL) {
        pdr_error("rdma: ibv_open_device(%s): %s", ctx->name, strerror(errno));
        ctx_free(ctx);
        *err = PDR_EIO;
        return NULL;
    }
    int rc = ctx_setup(ctx);
    if (rc != 0) {
        ctx_free(ctx);
        *err = rc;
        return NULL;
    }
    pdr_info("rdma: opened %s port %u (%s)", ctx->name, ctx->port,
             ctx->link_layer == PDR_RDMA_LINK_ETH ? "RoCE" : "InfiniBand");
    *err = 0;
    return ctx;
}

void pdr__rdma_close(struct pdr_rdma_ctx *ctx)
{
    if (ctx == NULL)
        return;
    for (;;) {
        pthread_mutex_lock(&ctx->mu);
        struct pdr_rdma_ep *ep = ctx->eps;
        pthread_mutex_unlock(&ctx->mu);
        if (ep == NULL)
            break;
        pdr__rdma_ep_destroy(ep);
    }
    while (ctx->mrs != NULL)
        pdr__rdma_dereg(ctx->mrs);
    ctx_free(ctx);
}

/* ---------------------------------------------------------------------------------------------------
 * Endpoints
 */

static int post_recv(struct qp *q)
{
    struct ibv_recv_wr r = {.wr_id = (uint64_t)(uintptr_t)q | 2u, .sg_list = NULL, .num_sge = 0}, *bad = NULL;
    int rc = ibv_post_recv(q->qp, &r, &bad);
    if (rc != 0)
        return rc;
    q->recv_posted++;
    return 0;
}

static int qp_to_init(struct pdr_rdma_ctx *ctx, struct qp *q)
{
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = ctx->port;
    a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    int rc = ibv_modify_qp(q->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    if (rc != 0) {
        pdr_error("rdma: %s: modify QP %u to INIT: %s", ctx->name, q->qp->qp_num, strerror(rc));
        return PDR_EIO;
    }
    return 0;
}

/* Moves the endpoint's QPs to ERR and waits until every batch and receive was retired. ctx->mu held. */
static void ep_drain(struct pdr_rdma_ep *ep)
{
    struct pdr_rdma_ctx *ctx = ep->ctx;
    for (unsigned i = 0; i < ep->nqp; i++) {
        struct qp *q = &ep->qps[i];
        if (q->qp == NULL)
            continue;
        struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
        int rc = ibv_modify_qp(q->qp, &a, IBV_QP_STATE);
        if (rc != 0)
            pdr_error("rdma: %s: modify QP %u to ERR: %s", ctx->name, q->qp->qp_num, strerror(rc));
    }
    kick(ctx);
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += DRAIN_TIMEOUT_MS / 1000;
    for (;;) {
        uint32_t left = 0;
        for (unsigned i = 0; i < ep->nqp; i++)
            left += ep->qps[i].outstanding + ep->qps[i].recv_posted;
        if (left == 0 && ctx->in_cb_ep != ep && ep->cb_pending == 0)
            break;
        if (pthread_cond_timedwait(&ctx->drained, &ctx->mu, &dl) == ETIMEDOUT) {
            pdr_error("rdma: %s: %u work requests not flushed after %d ms; destroying anyway", ctx->name,
                      left, DRAIN_TIMEOUT_MS);
            break;
        }
    }
}

/* The context's endpoint list (ctx->mu held). Unlinking also returns the endpoint's CQ reservation. */
static void ep_link(struct pdr_rdma_ctx *ctx, struct pdr_rdma_ep *ep)
{
    ep->next = ctx->eps;
    if (ctx->eps)
        ctx->eps->prev = ep;
    ctx->eps = ep;
}

static void ep_unlink(struct pdr_rdma_ctx *ctx, struct pdr_rdma_ep *ep)
{
    if (ep->prev)
        ep->prev->next = ep->next;
    else
        ctx->eps = ep->next;
    if (ep->next)
        ep->next->prev = ep->prev;
    ctx->cq_used -= ep->cq_reserved;
}

static void ep_free(struct pdr_rdma_ep *ep)
{
    for (unsigned i = 0; i < ep->nqp; i++) {
        if (ep->qps[i].qp == NULL)
            continue;
        int rc = ibv_destroy_qp(ep->qps[i].qp);
        if (rc != 0)
            pdr_error("rdma: %s: ibv_destroy_qp: %s", ep->ctx->name, strerror(rc));
    }
    free(ep);
}

int pdr__rdma_ep_create(struct pdr_rdma_ctx *ctx, unsigned nqp, struct pdr_rdma_ep **out,
                        struct pdr_rdma_ep_info *info)
{
    if (ctx == NULL || out == NULL || info == NULL || nqp < 1 || nqp > PDR_RDMA_MAX_QP)
        return PDR_EINVAL;
    struct pdr_rdma_ep *ep = calloc(1, sizeof(*ep));
    if (ep == NULL)
        return PDR_ENOMEM;
    ep->ctx = ctx;
    ep->nqp = nqp;
    ep->max_wr = ctx->dev_max_wr < PDR_RDMA_MAX_WR ? ctx->dev_max_wr : PDR_RDMA_MAX_WR;
    uint32_t recv_wr = ctx->dev_max_wr < PDR_RDMA_RECV_WR ? ctx->dev_max_wr : PDR_RDMA_RECV_WR;
    ep->cq_reserved = nqp * (ep->max_wr + recv_wr);
    pthread_mutex_lock(&ctx->mu);
    if (ctx->cq_used + ep->cq_reserved > ctx->cq_size) {
        pthread_mutex_unlock(&ctx->mu);
        pdr_error("rdma: %s: CQ full (%u of %u entries reserved); fewer peers or QPs per peer", ctx->name,
                  ctx->cq_used, ctx->cq_size);
        free(ep);
        return PDR_ETOOBIG;
    }
    ctx->cq_used += ep->cq_reserved;
    pthread_mutex_unlock(&ctx->mu);

    uint32_t psns[PDR_RDMA_MAX_QP];
    int rc = pdr_random_bytes(psns, sizeof(psns));
    for (unsigned i = 0; rc == 0 && i < nqp; i++) {
        struct qp *q = &ep->qps[i];
        enum pdr_rdma_qp_action act;
        q->ep = ep;
        q->psn = psns[i] & 0xFFFFFFu;
        struct ibv_qp_init_attr ia;
        memset(&ia, 0, sizeof(ia));
        ia.send_cq = ctx->cq;
        ia.recv_cq = ctx->cq;
        ia.qp_type = IBV_QPT_RC;
        ia.sq_sig_all = 0;
        ia.cap.max_send_wr = ep->max_wr;
        ia.cap.max_recv_wr = recv_wr;
        ia.cap.max_send_sge = 1;
        ia.cap.max_recv_sge = 1;
        q->qp = ibv_create_qp(ctx->pd, &ia);
        if (q->qp == NULL) {
            pdr_error("rdma: %s: ibv_create_qp: %s", ctx->name, strerror(errno));
            rc = PDR_EIO;
            break;
        }
        rc = qp_event(q, PDR_RDMA_QPE_CREATE, &act);
        if (rc == 0 && act == PDR_RDMA_QPA_MODIFY_INIT)
            rc = qp_to_init(ctx, q);
        if (rc == 0)
            rc = qp_event(q, PDR_RDMA_QPE_LOCAL_INIT_DONE, &act);
        for (uint32_t k = 0; rc == 0 && k < recv_wr; k++) {
            int prc = post_recv(q);
            if (prc != 0) {
                pdr_error("rdma: %s: ibv_post_recv: %s", ctx->name, strerror(prc));
                rc = PDR_EIO;
            }
        }
    }
    pthread_mutex_lock(&ctx->mu);
    if (rc != 0) {
        /* Not yet visible to the completion thread by list, but its receives may flush: drain by qp. */
        ep_link(ctx, ep);
        ep->closing = 1;
        ep_drain(ep);
        ep_unlink(ctx, ep);
        pthread_mutex_unlock(&ctx->mu);
        ep_free(ep);
        return rc;
    }
    ep_link(ctx, ep);
    pthread_mutex_unlock(&ctx->mu);

    memset(info, 0, sizeof(*info));
    info->version = PDR_RDMA_EP_VERSION;
    info->nqp = (uint8_t)nqp;
    info->link_layer = ctx->link_layer;
    info->mtu = ctx->active_mtu;
    info->gid_index = ctx->gid_index;
    info->lid = ctx->lid;
    memcpy(info->gid, ctx->gid, 16);
    for (unsigned i = 0; i < nqp; i++) {
        info->qpn[i] = ep->qps[i].qp->qp_num;
        info->psn[i] = ep->qps[i].psn;
    }
    *out = ep;
    return 0;
}

void pdr__rdma_set_imm_cb(struct pdr_rdma_ep *ep, pdr__rdma_imm_cb cb, void *arg)
{
    pthread_mutex_lock(&ep->ctx->mu);
    ep->imm_cb = cb;
    ep->imm_arg = arg;
    pthread_mutex_unlock(&ep->ctx->mu);
}

static int qp_connect(struct pdr_rdma_ctx *ctx, struct qp *q, const struct pdr_rdma_ep_info *r, unsigned i)
{
    enum pdr_rdma_qp_action act;
    int rc = qp_event(q, PDR_RDMA_QPE_REMOTE_INFO, &act);
    if (rc != 0 || act != PDR_RDMA_QPA_MODIFY_RTR)
        return PDR_EINVAL;
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = (enum ibv_mtu)(ctx->active_mtu < r->mtu ? ctx->active_mtu : r->mtu);
    a.dest_qp_num = r->qpn[i];
    a.rq_psn = r->psn[i];
    a.max_dest_rd_atomic = (uint8_t)ctx->max_rd_atomic;
    a.min_rnr_timer = MIN_RNR_TIMER;
    a.ah_attr.port_num = ctx->port;
    a.ah_attr.dlid = r->lid;
    if (ctx->link_layer == PDR_RDMA_LINK_ETH) {
        a.ah_attr.is_global = 1;
        memcpy(a.ah_attr.grh.dgid.raw, r->gid, 16);
        a.ah_attr.grh.sgid_index = ctx->gid_index;
        a.ah_attr.grh.hop_limit = 64;
    }
    rc = ibv_modify_qp(q->qp, &a,
                       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                           IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rc != 0) {
        pdr_error("rdma: %s: modify QP %u to RTR (peer QP %u): %s", ctx->name, q->qp->qp_num, r->qpn[i],
                  strerror(rc));
        return PDR_EIO;
    }
    if (qp_event(q, PDR_RDMA_QPE_RTR_DONE, &act) != 0 || act != PDR_RDMA_QPA_MODIFY_RTS)
        return PDR_EINVAL;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = QP_TIMEOUT;
    a.retry_cnt = QP_RETRY;
    a.rnr_retry = QP_RNR_RETRY;
    a.sq_psn = q->psn;
    a.max_rd_atomic = (uint8_t)ctx->max_rd_atomic;
    rc = ibv_modify_qp(q->qp, &a,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                           IBV_QP_MAX_QP_RD_ATOMIC);
    if (rc != 0) {
        pdr_error("rdma: %s: modify QP %u to RTS: %s", ctx->name, q->qp->qp_num, strerror(rc));
        return PDR_EIO;
    }
    return qp_event(q, PDR_RDMA_QPE_RTS_DONE, &act);
}

int pdr__rdma_ep_connect(struct pdr_rdma_ep *ep, const struct pdr_rdma_ep_info *remote)
{
    if (ep == NULL || remote == NULL)
        return PDR_EINVAL;
    struct pdr_rdma_ctx *ctx = ep->ctx;
    if (remote->nqp != ep->nqp || remote->link_layer != ctx->link_layer) {
        pdr_error("rdma: %s: peer has %u QPs on %s, we have %u on %s", ctx->name, remote->nqp,
                  remote->link_layer == PDR_RDMA_LINK_ETH ? "Ethernet" : "InfiniBand", ep->nqp,
                  ctx->link_layer == PDR_RDMA_LINK_ETH ? "Ethernet" : "InfiniBand");
        return PDR_EPROTO;
    }
    pthread_mutex_lock(&ctx->mu);
    int rc = ep->err != 0 ? ep->err : 0;
    for (unsigned i = 0; rc == 0 && i < ep->nqp; i++)
        rc = qp_connect(ctx, &ep->qps[i], remote, i);
    struct room_op *finished = NULL;
    if (rc == PDR_EIO)
        ep_fail(ep, PDR_EIO, &finished); /* no room can be queued before connect succeeded */
    pthread_mutex_unlock(&ctx->mu);
    run_finished(finished);
    return rc;
}

void pdr__rdma_ep_destroy(struct pdr_rdma_ep *ep)
{
    if (ep == NULL)
        return;
    struct pdr_rdma_ctx *ctx = ep->ctx;
    struct room_op *finished = NULL;
    pthread_mutex_lock(&ctx->mu);
    ep->closing = 1;
    for (struct room_op *op = ep->ops_head; op != NULL; op = op->next)
        if (op->status == 0)
            op->status = PDR_ECLOSED;
    for (unsigned i = 0; i < ep->nqp; i++) {
        enum pdr_rdma_qp_action act;
        if (ep->qps[i].state != PDR_RDMA_QPS_NONE)
            qp_event(&ep->qps[i], PDR_RDMA_QPE_DESTROY, &act);
    }
    ep_drain(ep);
    while (ep->ops_head != NULL)
        op_finish(ep->ops_head, &finished);
    ep_unlink(ctx, ep);
    pthread_mutex_unlock(&ctx->mu);
    run_finished(finished);
    ep_free(ep);
}

/* ---------------------------------------------------------------------------------------------------
 * Memory registration
 */

static const int ACCESS = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                          IBV_ACCESS_RELAXED_ORDERING; /* optional: ignored where unsupported */

static struct ibv_mr *reg_cuda(struct pdr_rdma_ctx *ctx, void *addr, size_t len)
{
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t page = pg > 0 ? (uintptr_t)pg : 4096u;
    uintptr_t start = (uintptr_t)addr & ~(page - 1);
    uintptr_t end = ((uintptr_t)addr + len + page - 1) & ~(page - 1);
    int fd = -1;
    int rc = pdr__cuda_dmabuf_fd((const void *)start, (size_t)(end - start), &fd);
    if (rc == 0 && fd >= 0) {
        struct ibv_mr *mr = ibv_reg_dmabuf_mr(ctx->pd, (uint64_t)((uintptr_t)addr - start), len,
                                              (uint64_t)(uintptr_t)addr, fd, ACCESS);
        int e = errno;
        close(fd); /* the MR holds its own reference to the dma-buf */
        if (mr != NULL)
            return mr;
        pdr_warn("rdma: %s: ibv_reg_dmabuf_mr: %s; trying nvidia-peermem", ctx->name, strerror(e));
    } else {
        pdr_debug("rdma: no dma-buf for %p (%s); trying nvidia-peermem", addr, pdr_strerror(rc));
    }
    struct ibv_mr *mr = ibv_reg_mr(ctx->pd, addr, len, ACCESS);
    if (mr == NULL)
        pdr_error("rdma: %s: cannot register GPU memory %p+%zu (dma-buf and nvidia-peermem failed: %s); "
                  "load nvidia-peermem or use a kernel >= 5.12 with dma-buf support",
                  ctx->name, addr, len, strerror(errno));
    return mr;
}

int pdr__rdma_reg(struct pdr_rdma_ctx *ctx, void *addr, size_t len, int is_cuda, struct pdr_rdma_mr **out,
                  uint32_t *lkey, uint32_t *rkey)
{
    if (ctx == NULL || addr == NULL || len == 0 || out == NULL)
        return PDR_EINVAL;
    struct pdr_rdma_mr *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return PDR_ENOMEM;
    if (is_cuda) {
        m->mr = reg_cuda(ctx, addr, len);
    } else {
        m->mr = ibv_reg_mr(ctx->pd, addr, len, ACCESS);
        if (m->mr == NULL)
            pdr_error("rdma: %s: ibv_reg_mr %p+%zu: %s (check `ulimit -l`)", ctx->name, addr, len,
                      strerror(errno));
    }
    if (m->mr == NULL) {
        int e = errno;
        free(m);
        return e == ENOMEM ? PDR_ENOMEM : PDR_EIO;
    }
    m->ctx = ctx;
    pthread_mutex_lock(&ctx->mu);
    m->next = ctx->mrs;
    if (ctx->mrs)
        ctx->mrs->prev = m;
    ctx->mrs = m;
    pthread_mutex_unlock(&ctx->mu);
    if (lkey)
        *lkey = m->mr->lkey;
    if (rkey)
        *rkey = m->mr->rkey;
    *out = m;
    return 0;
}

void pdr__rdma_dereg(struct pdr_rdma_mr *m)
{
    if (m == NULL)
        return;
    struct pdr_rdma_ctx *ctx = m->ctx;
    pthread_mutex_lock(&ctx->mu);
    if (m->prev)
        m->prev->next = m->next;
    else
        ctx->mrs = m->next;
    if (m->next)
        m->next->prev = m->prev;
    pthread_mutex_unlock(&ctx->mu);
    int rc = ibv_dereg_mr(m->mr);
    if (rc != 0)
        pdr_error("rdma: %s: ibv_dereg_mr: %s", ctx->name, strerror(rc));
    free(m);
}

/* ---------------------------------------------------------------------------------------------------
 * Rooms
 */

int pdr__rdma_write_room(struct pdr_rdma_ep *ep, uint64_t tag, const struct pdr_rdma_seg *local,
                         uint32_t nlocal, const struct pdr_rdma_seg *remote, uint32_t nremote,
                         pdr__rdma_done_cb cb, void *arg)
{
    if (ep == NULL || cb == NULL)
        return PDR_EINVAL;
    struct pdr_rdma_ctx *ctx = ep->ctx;
    struct pdr_rdma_plan_limits lim = {
        .max_wr_bytes = ctx->max_msg,
        .batch_wrs = ep->max_wr < PDR_RDMA_BATCH_WRS ? ep->max_wr : PDR_RDMA_BATCH_WRS,
        .nqp = ep->nqp,
    };
    size_t nwr;
    uint32_t nb;
    int rc = pdr__rdma_plan(local, nlocal, remote, nremote, &lim, tag, NULL, 0, &nwr, &nb);
    if (rc != 0)
        return rc;
    /* One allocation: the op, its WRs and its batches (data batches + the IMM batch). */
    size_t sz =
        sizeof(struct room_op) + nwr * sizeof(struct pdr_rdma_wr) + (size_t)(nb + 1) * sizeof(struct batch);
    struct room_op *op = calloc(1, sz);
    if (op == NULL)
        return PDR_ENOMEM;
    op->wrs = (struct pdr_rdma_wr *)(op + 1);
    op->batches = (struct batch *)(op->wrs + nwr);
    rc = pdr__rdma_plan(local, nlocal, remote, nremote, &lim, tag, op->wrs, nwr, &nwr, &nb);
    if (rc != 0) {
        free(op);
        return rc;
    }
    for (size_t i = 0; i < nwr; i++) {
        struct batch *b = &op->batches[op->wrs[i].batch];
        if (b->count == 0) {
            b->op = op;
            b->first = (uint32_t)i;
            b->qp = op->wrs[i].qp;
            b->is_imm = (op->wrs[i].flags & PDR_RDMA_WR_IMM) != 0;
        }
        b->count++;
    }
    op->ep = ep;
    op->cb = cb;
    op->arg = arg;
    op->ndata = nb;

    pthread_mutex_lock(&ctx->mu);
    /* Rooms start on successive QPs, so that small rooms (one batch each) spread over all of them. */
    uint16_t rot = (uint16_t)(ep->next_qp++ % ep->nqp);
    for (uint32_t i = 0; i <= nb; i++)
        op->batches[i].qp = (uint16_t)((op->batches[i].qp + rot) % ep->nqp);
    rc = ep->err != 0 ? ep->err : ep->closing ? PDR_ECLOSED : 0;
    for (unsigned i = 0; rc == 0 && i < ep->nqp; i++)
        if (ep->qps[i].state != PDR_RDMA_QPS_RTS)
            rc = PDR_EIO;
    if (rc != 0) {
        pthread_mutex_unlock(&ctx->mu);
        free(op);
        return rc;
    }
    op->prev = ep->ops_tail;
    if (ep->ops_tail)
        ep->ops_tail->next = op;
    else
        ep->ops_head = op;
    ep->ops_tail = op;
    pthread_mutex_unlock(&ctx->mu);
    kick(ctx); /* the completion thread posts it */
    return 0;
}
