/*
 * rdma_post.c — the RDMA runtime's data path: posting a room's batches within each QP's send-queue
 * budget, the completion thread (CQ, async events, the kick eventfd), retiring batches and receives,
 * the room callbacks, and pdr__rdma_write_room, which only queues. rdma.c's header comment has the
 * threading rules and the wr_id and CQ invariants.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "err.h"
#include "rdma_internal.h"
#include "util.h"

/* ---------------------------------------------------------------------------------------------------
 * Helpers
 */

static int wc_to_err(enum ibv_wc_status s)
{
    return s == IBV_WC_RETRY_EXC_ERR ? PDR_EPEERGONE : PDR_EIO;
}

/* ---------------------------------------------------------------------------------------------------
 * Posting and completions (completion thread, ctx->mu held)
 */

static void op_unlink(struct pdr_rdma_ep *ep, struct room_op *op)
{
    pdr_dqueue_unlink(&ep->ops, &op->link);
}

/* Moves op to the finished list (its callback runs once the lock is released). */
void pdr__rdma_op_finish(struct room_op *op, pdr_dlink_t **finished)
{
    op_unlink(op->ep, op);
    op->ep->cb_pending++;
    pdr_dlink_push(finished, &op->link);
}

void pdr__rdma_ep_fail(struct pdr_rdma_ep *ep, int err, pdr_dlink_t **finished)
{
    if (ep->err == 0) {
        ep->err = err;
        /* While closing, pdr__rdma_ep_drain has already moved every QP to ERR (and the state machine to
         * DESTROYED). */
        for (unsigned i = 0; i < ep->nqp && !ep->closing; i++) {
            struct qp *q = &ep->qps[i];
            enum pdr_rdma_qp_action act;
            if (q->qp == NULL || pdr__rdma_qp_event(q, PDR_RDMA_QPE_ERROR, &act) != 0 ||
                act != PDR_RDMA_QPA_FLUSH_FAIL)
                continue;
            /* One QP's error does not stop its siblings: move them all so their work flushes. */
            struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
            int rc = ibv_modify_qp(q->qp, &a, IBV_QP_STATE);
            if (rc != 0)
                pdr_error("rdma: %s: modify QP %u to ERR: %s", ep->ctx->name, q->qp->qp_num, strerror(rc));
        }
    }
    pdr_dlink_t *l = ep->ops.head;
    while (l != NULL) {
        struct room_op *op = PDR__RDMA_OP(l);
        pdr_dlink_t *nx = l->next;
        if (op->status == 0)
            op->status = ep->err;
        if (op->inflight == 0)
            pdr__rdma_op_finish(op, finished);
        l = nx;
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
/* Posts batch b of op if its QP's send queue has room: 1 posted, 0 no room yet, -1 the post failed (the
 * endpoint failed with it). */
static int pump_batch(struct pdr_rdma_ep *ep, struct room_op *op, struct batch *b, pdr_dlink_t **finished)
{
    if (ep->qps[b->qp].outstanding + b->count > ep->max_wr)
        return 0;
    if (post_batch(ep, op, b) != 0) {
        pdr__rdma_ep_fail(ep, PDR_EIO, finished);
        return -1;
    }
    return 1;
}

static void ep_pump(struct pdr_rdma_ep *ep, pdr_dlink_t **finished)
{
    if (ep->err != 0 || ep->closing)
        return;
    for (pdr_dlink_t *l = ep->ops.head; l != NULL; l = l->next) {
        struct room_op *op = PDR__RDMA_OP(l);
        for (; op->next_batch < op->ndata; op->next_batch++)
            if (pump_batch(ep, op, &op->batches[op->next_batch], finished) <= 0)
                return;
        if (op->done_batches < op->ndata)
            continue; /* its IMM waits for every data WRITE to complete; later rooms may post meanwhile */
        if (!op->imm_posted) {
            if (pump_batch(ep, op, &op->batches[op->ndata], finished) <= 0)
                return;
            op->imm_posted = 1;
        }
    }
}

static struct pdr_rdma_ep *ep_by_qpn(struct pdr_rdma_ctx *ctx, uint32_t qpn)
{
    for (pdr_dlink_t *l = ctx->eps; l != NULL; l = l->next) {
        struct pdr_rdma_ep *ep = PDR__RDMA_EP(l);
        for (unsigned i = 0; i < ep->nqp; i++)
            if (ep->qps[i].qp != NULL && ep->qps[i].qp->qp_num == qpn)
                return ep;
    }
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
static void handle_wc(struct pdr_rdma_ctx *ctx, const struct ibv_wc *wc, pdr_dlink_t **finished,
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
            pdr__rdma_ep_fail(ep, ep->closing ? PDR_ECLOSED : wc_to_err(wc->status), finished);
        } else {
            if (b->is_imm) {
                /* Delivered: the peer has every byte and its notification, whatever failed since. */
                op->imm_done = 1;
                op->status = 0;
            } else
                op->done_batches++;
            if (op->imm_done || (op->status != 0 && op->inflight == 0))
                pdr__rdma_op_finish(op, finished);
        }
        ep_pump(ep, finished);
    } else if ((id & 3u) == 2u) {
        struct qp *q = (struct qp *)(id & ~(uintptr_t)3u);
        struct pdr_rdma_ep *ep = q->ep;
        q->recv_posted--;
        if (wc->status != IBV_WC_SUCCESS) {
            pdr__rdma_ep_fail(ep, ep->closing ? PDR_ECLOSED : wc_to_err(wc->status), finished);
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
                pdr__rdma_ep_fail(ep, PDR_EIO, finished);
            } else {
                q->recv_posted++;
            }
        }
    } else if (wc->status != IBV_WC_SUCCESS) {
        /* An unsignaled WRITE failed or flushed: only its QP is known. */
        struct pdr_rdma_ep *ep = ep_by_qpn(ctx, wc->qp_num);
        if (ep != NULL)
            pdr__rdma_ep_fail(ep, ep->closing ? PDR_ECLOSED : wc_to_err(wc->status), finished);
    }
}

/* Runs the callbacks of finished rooms; ctx->mu must not be held. ep_destroy waits for cb_pending to
 * drop to 0, so the endpoint outlives the decrement and not one instant more. */
void pdr__rdma_run_finished(pdr_dlink_t **finished)
{
    pdr_dlink_t *l;
    while ((l = pdr_dlink_pop(finished)) != NULL) {
        struct room_op *op = PDR__RDMA_OP(l);
        struct pdr_rdma_ep *ep = op->ep;
        struct pdr_rdma_ctx *ctx = ep->ctx;
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
            pdr_dlink_t *finished = NULL;
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
            pdr__rdma_run_finished(&finished);
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
            pdr_dlink_t *finished = NULL;
            pthread_mutex_lock(&ctx->mu);
            struct pdr_rdma_ep *ep = ep_by_qpn(ctx, ev.element.qp->qp_num);
            if (ep != NULL)
                pdr__rdma_ep_fail(ep, PDR_EIO, &finished);
            pthread_mutex_unlock(&ctx->mu);
            pdr__rdma_run_finished(&finished);
        }
        ibv_ack_async_event(&ev);
    }
}

void *pdr__rdma_completion_thread(void *p)
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
        pdr_dlink_t *finished = NULL;
        for (pdr_dlink_t *l = ctx->eps; l != NULL; l = l->next)
            ep_pump(PDR__RDMA_EP(l), &finished);
        pthread_mutex_unlock(&ctx->mu);
        pdr__rdma_run_finished(&finished);
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
    pdr_dqueue_append(&ep->ops, &op->link);
    pthread_mutex_unlock(&ctx->mu);
    pdr__rdma_kick(ctx); /* the completion thread posts it */
    return 0;
}
