/*
 * rdma_internal.h — what the RDMA runtime's files share: the context, endpoint, QP, room and MR
 * structs, the tuning constants, and the helpers one file calls in another. rdma.c: helpers, the context
 * (device, port, PD, CQ, completion channel) and the endpoints (QP setup and connection); rdma_mr.c:
 * memory registration; rdma_post.c: posting, completions and the completion thread, write_room. Only
 * those files include it. The threading rules and invariants are in rdma.c's header comment.
 */
#ifndef PDR_TRANSPORT_RDMA_INTERNAL_H
#define PDR_TRANSPORT_RDMA_INTERNAL_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdint.h>

#include "dlist.h"
#include "rdma.h"

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
    pdr_dlink_t link; /* ctx->mrs */
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
    pdr_dlink_t link; /* ep->ops, in posting order; then a finished list (pdr__rdma_op_finish) */
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
    pdr_dlink_t link; /* ctx->eps */
    unsigned nqp;
    uint32_t max_wr;
    uint32_t cq_reserved;
    uint32_t next_qp;    /* QP of the next room's first batch */
    uint32_t cb_pending; /* finished rooms whose callback has not returned yet */
    int err;             /* first error; the endpoint is dead once set */
    int closing;         /* ep_destroy in progress */
    pdr__rdma_imm_cb imm_cb;
    void *imm_arg;
    pdr_dqueue_t ops; /* struct room_op, in posting order */
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
    pdr_dlink_t *eps;                   /* struct pdr_rdma_ep */
    pdr_dlink_t *mrs;                   /* struct pdr_rdma_mr */
    const struct pdr_rdma_ep *in_cb_ep; /* the endpoint whose imm_cb runs now, for ep_destroy */
};

/* rdma.c */
void pdr__rdma_kick(struct pdr_rdma_ctx *ctx);
int pdr__rdma_qp_event(struct qp *q, enum pdr_rdma_qp_event ev, enum pdr_rdma_qp_action *act);
void pdr__rdma_ep_drain(struct pdr_rdma_ep *ep);

/* rdma_post.c (ctx->mu held unless said otherwise) */
void pdr__rdma_op_finish(struct room_op *op, pdr_dlink_t **finished);
void pdr__rdma_ep_fail(struct pdr_rdma_ep *ep, int err, pdr_dlink_t **finished);
/* Runs the callbacks of the finished list (ctx->mu released). */
void pdr__rdma_run_finished(pdr_dlink_t **finished);
void *pdr__rdma_completion_thread(void *p);

#define PDR__RDMA_EP(l) PDR_DLINK_ITEM(l, struct pdr_rdma_ep, link)
#define PDR__RDMA_OP(l) PDR_DLINK_ITEM(l, struct room_op, link)

#endif
