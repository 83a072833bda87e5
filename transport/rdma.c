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
 *
 * Files: this one (helpers, the context, the endpoints and their QPs), rdma_mr.c (memory
 * registration), rdma_post.c (posting, completions, the completion thread, write_room); the structs
 * they share are in rdma_internal.h.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "err.h"
#include "rdma_internal.h"
#include "util.h"

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

void pdr__rdma_kick(struct pdr_rdma_ctx *ctx)
{
    uint64_t one = 1;
    if (write(ctx->kick_fd, &one, sizeof(one)) != (ssize_t)sizeof(one) && errno != EAGAIN)
        pdr_error("rdma: eventfd write: %s", strerror(errno));
}

int pdr__rdma_qp_event(struct qp *q, enum pdr_rdma_qp_event ev, enum pdr_rdma_qp_action *act)
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
    if (pthread_create(&ctx->thread, NULL, pdr__rdma_completion_thread, ctx) != 0)
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
        pdr__rdma_kick(ctx);
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
        struct pdr_rdma_ep *ep = ctx->eps != NULL ? PDR__RDMA_EP(ctx->eps) : NULL;
        pthread_mutex_unlock(&ctx->mu);
        if (ep == NULL)
            break;
        pdr__rdma_ep_destroy(ep);
    }
    while (ctx->mrs != NULL)
        pdr__rdma_dereg(PDR_DLINK_ITEM(ctx->mrs, struct pdr_rdma_mr, link));
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
void pdr__rdma_ep_drain(struct pdr_rdma_ep *ep)
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
    pdr__rdma_kick(ctx);
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
    pdr_dlink_push(&ctx->eps, &ep->link);
}

static void ep_unlink(struct pdr_rdma_ctx *ctx, struct pdr_rdma_ep *ep)
{
    pdr_dlink_unlink(&ep->link);
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
        rc = pdr__rdma_qp_event(q, PDR_RDMA_QPE_CREATE, &act);
        if (rc == 0 && act == PDR_RDMA_QPA_MODIFY_INIT)
            rc = qp_to_init(ctx, q);
        if (rc == 0)
            rc = pdr__rdma_qp_event(q, PDR_RDMA_QPE_LOCAL_INIT_DONE, &act);
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
        pdr__rdma_ep_drain(ep);
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
    int rc = pdr__rdma_qp_event(q, PDR_RDMA_QPE_REMOTE_INFO, &act);
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
    if (pdr__rdma_qp_event(q, PDR_RDMA_QPE_RTR_DONE, &act) != 0 || act != PDR_RDMA_QPA_MODIFY_RTS)
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
    return pdr__rdma_qp_event(q, PDR_RDMA_QPE_RTS_DONE, &act);
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
    pdr_dlink_t *finished = NULL;
    if (rc == PDR_EIO)
        pdr__rdma_ep_fail(ep, PDR_EIO, &finished); /* no room can be queued before connect succeeded */
    pthread_mutex_unlock(&ctx->mu);
    pdr__rdma_run_finished(&finished);
    return rc;
}

void pdr__rdma_ep_destroy(struct pdr_rdma_ep *ep)
{
    if (ep == NULL)
        return;
    struct pdr_rdma_ctx *ctx = ep->ctx;
    pdr_dlink_t *finished = NULL;
    pthread_mutex_lock(&ctx->mu);
    ep->closing = 1;
    for (pdr_dlink_t *l = ep->ops.head; l != NULL; l = l->next)
        if (PDR__RDMA_OP(l)->status == 0)
            PDR__RDMA_OP(l)->status = PDR_ECLOSED;
    for (unsigned i = 0; i < ep->nqp; i++) {
        enum pdr_rdma_qp_action act;
        if (ep->qps[i].state != PDR_RDMA_QPS_NONE)
            pdr__rdma_qp_event(&ep->qps[i], PDR_RDMA_QPE_DESTROY, &act);
    }
    pdr__rdma_ep_drain(ep);
    while (ep->ops.head != NULL)
        pdr__rdma_op_finish(PDR__RDMA_OP(ep->ops.head), &finished);
    ep_unlink(ctx, ep);
    pthread_mutex_unlock(&ctx->mu);
    pdr__rdma_run_finished(&finished);
    ep_free(ep);
}
