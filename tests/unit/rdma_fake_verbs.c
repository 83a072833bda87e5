/*
 * A fake libibverbs for test_rdma_runtime: linked instead of the real library, it defines the verbs
 * symbols rdma.c calls and fills the context's ops table (post_send, post_recv, poll_cq, req_notify_cq)
 * that verbs.h's inline functions jump through. One fake device, one port, RC QPs in one process:
 * a WRITE is a memcpy checked against the registered MRs (lkey and rkey, bounds, REMOTE_WRITE), a
 * WRITE_WITH_IMM consumes a receive posted on the peer QP. It enforces what real hardware would (QP
 * state order, send-queue depth counted until a signaled CQE is polled, CQ capacity, RTR/RTS
 * attributes) and records violations in fake_verbs.violations for the test to assert on. Faults:
 * fake_verbs.fail_at_wr makes a chosen WRITE fail with IBV_WC_RETRY_EXC_ERR (the QP then goes to ERR
 * and flushes). Thread-safe (one mutex); the completion channel is an eventfd.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "rdma_fake_verbs.h"

/* verbs.h wraps these two in macros; the fake defines the exported symbols themselves. */
#undef ibv_query_port
#undef ibv_reg_mr

struct fake_verbs_state fake_verbs = {.ndev = 1, .link_layer = IBV_LINK_LAYER_INFINIBAND};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

int fake_verbs_counter(const int *counter)
{
    pthread_mutex_lock(&mu);
    int v = *counter;
    pthread_mutex_unlock(&mu);
    return v;
}
static struct ibv_device dev = {.name = "fake_0"};

#define MAX_QP 64
#define MAX_MR 64

struct cqe {
    struct ibv_wc wc;
    struct fqp *qp; /* send CQEs: the QP whose send-queue slots this CQE frees */
    uint32_t free;
};

struct fcq {
    struct ibv_cq cq;
    struct cqe *ring;
    uint32_t cap, head, count;
    int armed;
};

struct fchan {
    struct ibv_comp_channel ch;
    struct fcq *cq;
};

struct fqp {
    struct ibv_qp qp;
    enum ibv_qp_state st;
    uint32_t dest;
    uint32_t max_send, max_recv, sq_used, unsignaled;
    uint64_t recvs[1024];
    uint32_t rhead, rcount;
};

struct fmr {
    struct ibv_mr mr;
    int access;
    int used;
};

static struct fqp *qps[MAX_QP];
static struct fmr mrs[MAX_MR];
static uint32_t next_qpn = 0x100, next_key = 0x1000;

static void violation(const char *what)
{
    fprintf(stderr, "fake verbs: %s\n", what);
    fake_verbs.violations++;
}

static void push(struct fcq *c, const struct ibv_wc *wc, struct fqp *q, uint32_t free_slots)
{
    if (c->count == c->cap) {
        violation("CQ overflow");
        return;
    }
    struct cqe *e = &c->ring[(c->head + c->count) % c->cap];
    e->wc = *wc;
    e->qp = q;
    e->free = free_slots;
    c->count++;
    if (c->armed) {
        uint64_t one = 1;
        c->armed = 0;
        if (write(((struct fchan *)c->cq.channel)->ch.fd, &one, sizeof(one)) != sizeof(one))
            violation("eventfd write");
    }
}

static struct fqp *qp_by_num(uint32_t n)
{
    for (int i = 0; i < MAX_QP; i++)
        if (qps[i] != NULL && qps[i]->qp.qp_num == n)
            return qps[i];
    return NULL;
}

static struct fmr *mr_find(uint64_t addr, uint64_t len, uint32_t key, int remote)
{
    for (int i = 0; i < MAX_MR; i++) {
        struct fmr *m = &mrs[i];
        if (!m->used || (remote ? m->mr.rkey : m->mr.lkey) != key)
            continue;
        uint64_t base = (uint64_t)(uintptr_t)m->mr.addr;
        if (addr < base || addr + len > base + m->mr.length)
            return NULL;
        if (remote && !(m->access & IBV_ACCESS_REMOTE_WRITE))
            return NULL;
        return m;
    }
    return NULL;
}

static void flush_recvs(struct fqp *q)
{
    while (q->rcount > 0) {
        struct ibv_wc wc = {
            .wr_id = q->recvs[q->rhead], .status = IBV_WC_WR_FLUSH_ERR, .qp_num = q->qp.qp_num};
        q->rhead = (q->rhead + 1) % 1024;
        q->rcount--;
        push((struct fcq *)q->qp.recv_cq, &wc, NULL, 0);
    }
}

/* A send WR completes: signaled or in error, it produces a CQE that frees the slots up to it. */
static void send_done(struct fqp *q, const struct ibv_send_wr *w, enum ibv_wc_status st)
{
    q->unsignaled++;
    if (st == IBV_WC_SUCCESS && !(w->send_flags & IBV_SEND_SIGNALED))
        return;
    struct ibv_wc wc = {.wr_id = w->wr_id,
                        .status = st,
                        .qp_num = q->qp.qp_num,
                        .opcode =
                            w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM ? IBV_WC_RDMA_WRITE : IBV_WC_RDMA_WRITE};
    push((struct fcq *)q->qp.send_cq, &wc, q, q->unsignaled);
    q->unsignaled = 0;
}

static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    struct fqp *q = (struct fqp *)qp;
    pthread_mutex_lock(&mu);
    for (; wr != NULL; wr = wr->next) {
        if (q->st != IBV_QPS_RTS && q->st != IBV_QPS_ERR) {
            violation("post_send on a QP not in RTS");
            *bad = wr;
            pthread_mutex_unlock(&mu);
            return EINVAL;
        }
        if (q->sq_used + 1 > q->max_send) {
            violation("send queue overflow");
            *bad = wr;
            pthread_mutex_unlock(&mu);
            return ENOMEM;
        }
        q->sq_used++;
        if (q->sq_used > fake_verbs.max_sq_used)
            fake_verbs.max_sq_used = q->sq_used;
        fake_verbs.posted_wrs++;
        if (q->st == IBV_QPS_ERR) {
            send_done(q, wr, IBV_WC_WR_FLUSH_ERR);
            continue;
        }
        if (wr->opcode == IBV_WR_RDMA_WRITE && ++fake_verbs.writes == fake_verbs.fail_at_wr) {
            send_done(q, wr, IBV_WC_RETRY_EXC_ERR);
            q->st = IBV_QPS_ERR;
            flush_recvs(q);
            continue;
        }
        struct fqp *peer = qp_by_num(q->dest);
        if (peer == NULL || (wr->opcode != IBV_WR_RDMA_WRITE && wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM)) {
            violation("bad opcode or no peer");
            send_done(q, wr, IBV_WC_REM_INV_REQ_ERR);
            continue;
        }
        if (wr->num_sge > 1) {
            violation("more SGEs than max_send_sge");
            continue;
        }
        uint32_t len = wr->num_sge ? wr->sg_list[0].length : 0;
        if (len > 0) {
            if (mr_find(wr->sg_list[0].addr, len, wr->sg_list[0].lkey, 0) == NULL ||
                mr_find(wr->wr.rdma.remote_addr, len, wr->wr.rdma.rkey, 1) == NULL) {
                violation("WRITE outside a registered MR (lkey/rkey/bounds)");
                send_done(q, wr, IBV_WC_REM_ACCESS_ERR);
                continue;
            }
            memcpy((void *)(uintptr_t)wr->wr.rdma.remote_addr, (void *)(uintptr_t)wr->sg_list[0].addr, len);
            fake_verbs.bytes_written += len;
        }
        if (wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
            if (peer->rcount == 0) {
                violation("WITH_IMM with no receive posted (RNR)");
            } else {
                struct ibv_wc rwc = {.wr_id = peer->recvs[peer->rhead],
                                     .status = IBV_WC_SUCCESS,
                                     .opcode = IBV_WC_RECV_RDMA_WITH_IMM,
                                     .wc_flags = IBV_WC_WITH_IMM,
                                     .imm_data = wr->imm_data,
                                     .byte_len = len,
                                     .qp_num = peer->qp.qp_num};
                peer->rhead = (peer->rhead + 1) % 1024;
                peer->rcount--;
                push((struct fcq *)peer->qp.recv_cq, &rwc, NULL, 0);
                fake_verbs.imms++;
            }
        }
        send_done(q, wr, IBV_WC_SUCCESS);
    }
    pthread_mutex_unlock(&mu);
    return 0;
}

static int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    struct fqp *q = (struct fqp *)qp;
    pthread_mutex_lock(&mu);
    for (; wr != NULL; wr = wr->next) {
        if (q->st == IBV_QPS_RESET || q->rcount >= q->max_recv) {
            violation(q->st == IBV_QPS_RESET ? "post_recv in RESET" : "receive queue overflow");
            *bad = wr;
            pthread_mutex_unlock(&mu);
            return q->st == IBV_QPS_RESET ? EINVAL : ENOMEM;
        }
        if (q->st == IBV_QPS_ERR) {
            struct ibv_wc wc = {.wr_id = wr->wr_id, .status = IBV_WC_WR_FLUSH_ERR, .qp_num = q->qp.qp_num};
            push((struct fcq *)q->qp.recv_cq, &wc, NULL, 0);
            continue;
        }
        q->recvs[(q->rhead + q->rcount) % 1024] = wr->wr_id;
        q->rcount++;
    }
    pthread_mutex_unlock(&mu);
    return 0;
}

static int fake_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
    struct fcq *c = (struct fcq *)cq;
    int k = 0;
    pthread_mutex_lock(&mu);
    while (k < n && c->count > 0) {
        struct cqe *e = &c->ring[c->head];
        wc[k++] = e->wc;
        if (e->qp != NULL)
            e->qp->sq_used -= e->free; /* slots are freed when the CQE is polled */
        c->head = (c->head + 1) % c->cap;
        c->count--;
    }
    pthread_mutex_unlock(&mu);
    return k;
}

static int fake_req_notify(struct ibv_cq *cq, int solicited)
{
    (void)solicited;
    pthread_mutex_lock(&mu);
    ((struct fcq *)cq)->armed = 1;
    pthread_mutex_unlock(&mu);
    return 0;
}

struct ibv_device **ibv_get_device_list(int *num)
{
    if (fake_verbs.ndev == 0) {
        errno = ENOSYS;
        return NULL;
    }
    struct ibv_device **l = calloc(2, sizeof(*l));
    if (l == NULL)
        return NULL;
    l[0] = &dev;
    if (num)
        *num = 1;
    return l;
}

void ibv_free_device_list(struct ibv_device **list)
{
    free(list);
}

const char *ibv_get_device_name(struct ibv_device *device)
{
    return device->name;
}

struct ibv_context *ibv_open_device(struct ibv_device *device)
{
    struct ibv_context *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->device = device;
    c->cmd_fd = -1;
    c->async_fd = eventfd(0, EFD_CLOEXEC);
    c->ops.post_send = fake_post_send;
    c->ops.post_recv = fake_post_recv;
    c->ops.poll_cq = fake_poll_cq;
    c->ops.req_notify_cq = fake_req_notify;
    return c;
}

int ibv_close_device(struct ibv_context *c)
{
    close(c->async_fd);
    free(c);
    return 0;
}

int ibv_query_device(struct ibv_context *c, struct ibv_device_attr *a)
{
    (void)c;
    memset(a, 0, sizeof(*a));
    a->max_qp_wr = fake_verbs.max_qp_wr ? fake_verbs.max_qp_wr : 16384;
    a->max_cqe = fake_verbs.max_cqe ? fake_verbs.max_cqe : 4194303;
    a->max_qp_rd_atom = 16;
    a->phys_port_cnt = 2;
    return 0;
}

int ibv_query_port(struct ibv_context *c, uint8_t port, struct _compat_ibv_port_attr *compat)
{
    (void)c;
    struct ibv_port_attr *a = (struct ibv_port_attr *)compat;
    memset(a, 0, sizeof(*a));
    a->state = port == 2 ? IBV_PORT_ACTIVE : IBV_PORT_DOWN; /* port 1 down: the open must skip it */
    a->active_mtu = IBV_MTU_4096;
    a->max_msg_sz = fake_verbs.max_msg_sz ? fake_verbs.max_msg_sz : 1u << 30;
    a->lid = fake_verbs.link_layer == IBV_LINK_LAYER_ETHERNET ? 0 : 7;
    a->link_layer = (uint8_t)fake_verbs.link_layer;
    a->gid_tbl_len = 5;
    return 0;
}

/* GID table: 0 RoCE v1 link-local, 1 RoCE v2 link-local, 2 empty, 3 RoCE v2 IPv4-mapped, 4 RoCE v1
 * IPv4-mapped. The open must pick 3. */
static void gid_at(int i, union ibv_gid *g, uint32_t *type)
{
    memset(g, 0, sizeof(*g));
    *type = (i == 1 || i == 3) ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_ROCE_V1;
    if (i == 0 || i == 1) {
        g->raw[0] = 0xfe;
        g->raw[1] = 0x80;
        g->raw[15] = (uint8_t)i;
    } else if (i == 3 || i == 4) {
        g->raw[10] = g->raw[11] = 0xff;
        g->raw[12] = 10;
        g->raw[15] = (uint8_t)i;
    }
}

int ibv_query_gid(struct ibv_context *c, uint8_t port, int index, union ibv_gid *gid)
{
    (void)c;
    (void)port;
    uint32_t t;
    if (index < 0 || index >= 5)
        return EINVAL;
    gid_at(index, gid, &t);
    return 0;
}

int _ibv_query_gid_ex(struct ibv_context *c, uint32_t port, uint32_t index, struct ibv_gid_entry *e,
                      uint32_t flags, size_t sz)
{
    (void)c;
    (void)flags;
    (void)sz;
    if (index >= 5)
        return EINVAL;
    gid_at((int)index, &e->gid, &e->gid_type);
    if (index == 2)
        return ENODATA;
    e->gid_index = index;
    e->port_num = port;
    return 0;
}

struct ibv_pd *ibv_alloc_pd(struct ibv_context *c)
{
    struct ibv_pd *pd = calloc(1, sizeof(*pd));
    if (pd != NULL)
        pd->context = c;
    return pd;
}

int ibv_dealloc_pd(struct ibv_pd *pd)
{
    free(pd);
    return 0;
}

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *c)
{
    struct fchan *ch = calloc(1, sizeof(*ch));
    if (ch == NULL)
        return NULL;
    ch->ch.context = c;
    ch->ch.fd = eventfd(0, EFD_CLOEXEC);
    return &ch->ch;
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *ch)
{
    close(ch->fd);
    free(ch);
    return 0;
}

struct ibv_cq *ibv_create_cq(struct ibv_context *c, int cqe, void *cq_context, struct ibv_comp_channel *ch,
                             int vec)
{
    (void)vec;
    struct fcq *cq = calloc(1, sizeof(*cq));
    if (cq == NULL)
        return NULL;
    cq->cap = (uint32_t)cqe;
    cq->ring = calloc(cq->cap, sizeof(*cq->ring));
    cq->cq.context = c;
    cq->cq.channel = ch;
    cq->cq.cq_context = cq_context;
    cq->cq.cqe = cqe;
    ((struct fchan *)ch)->cq = cq;
    fake_verbs.cq_size = (uint32_t)cqe;
    return &cq->cq;
}

int ibv_destroy_cq(struct ibv_cq *cq)
{
    struct fcq *c = (struct fcq *)cq;
    if (c->count != 0)
        violation("CQ destroyed with unpolled entries");
    free(c->ring);
    free(c);
    return 0;
}

int ibv_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_context)
{
    uint64_t v;
    if (read(ch->fd, &v, sizeof(v)) != sizeof(v))
        return -1;
    *cq = &((struct fchan *)ch)->cq->cq;
    *cq_context = (*cq)->cq_context;
    return 0;
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int n)
{
    (void)cq;
    (void)n;
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *ia)
{
    pthread_mutex_lock(&mu);
    int slot = -1;
    for (int i = 0; i < MAX_QP && slot < 0; i++)
        if (qps[i] == NULL)
            slot = i;
    struct fqp *q = slot < 0 ? NULL : calloc(1, sizeof(*q));
    if (q == NULL || ia->qp_type != IBV_QPT_RC || ia->cap.max_recv_wr > 1024) {
        free(q);
        pthread_mutex_unlock(&mu);
        errno = EINVAL;
        return NULL;
    }
    q->qp.context = pd->context;
    q->qp.pd = pd;
    q->qp.send_cq = ia->send_cq;
    q->qp.recv_cq = ia->recv_cq;
    q->qp.qp_num = next_qpn++;
    q->qp.qp_type = IBV_QPT_RC;
    q->st = IBV_QPS_RESET;
    q->max_send = ia->cap.max_send_wr;
    q->max_recv = ia->cap.max_recv_wr;
    qps[slot] = q;
    fake_verbs.live_qps++;
    pthread_mutex_unlock(&mu);
    return &q->qp;
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
    struct fqp *q = (struct fqp *)qp;
    int rc = 0;
    pthread_mutex_lock(&mu);
    if (!(mask & IBV_QP_STATE)) {
        rc = EINVAL;
    } else if (a->qp_state == IBV_QPS_ERR) {
        q->st = IBV_QPS_ERR;
        flush_recvs(q);
    } else if (a->qp_state == IBV_QPS_INIT && q->st == IBV_QPS_RESET) {
        if (!(mask & IBV_QP_PORT) || a->port_num != 2 || !(a->qp_access_flags & IBV_ACCESS_REMOTE_WRITE))
            rc = EINVAL;
        else
            q->st = IBV_QPS_INIT;
    } else if (a->qp_state == IBV_QPS_RTR && q->st == IBV_QPS_INIT) {
        int need = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                   IBV_QP_MIN_RNR_TIMER;
        if ((mask & need) != need || qp_by_num(a->dest_qp_num) == NULL || a->path_mtu != IBV_MTU_4096 ||
            (fake_verbs.link_layer == IBV_LINK_LAYER_ETHERNET &&
             (!a->ah_attr.is_global || a->ah_attr.grh.sgid_index != 3 || a->ah_attr.grh.hop_limit == 0)) ||
            (fake_verbs.link_layer != IBV_LINK_LAYER_ETHERNET && a->ah_attr.dlid != 7)) {
            rc = EINVAL;
        } else {
            q->dest = a->dest_qp_num;
            q->st = IBV_QPS_RTR;
        }
    } else if (a->qp_state == IBV_QPS_RTS && q->st == IBV_QPS_RTR) {
        int need =
            IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
        if ((mask & need) != need || a->timeout != 14 || a->retry_cnt != 7 || a->rnr_retry != 7)
            rc = EINVAL;
        else
            q->st = IBV_QPS_RTS;
    } else {
        rc = EINVAL;
    }
    if (rc != 0)
        violation("invalid ibv_modify_qp");
    pthread_mutex_unlock(&mu);
    return rc;
}

int ibv_destroy_qp(struct ibv_qp *qp)
{
    pthread_mutex_lock(&mu);
    for (int i = 0; i < MAX_QP; i++)
        if (qps[i] == (struct fqp *)qp)
            qps[i] = NULL;
    struct fqp *q = (struct fqp *)qp;
    if (q->rcount != 0 || q->sq_used != 0)
        violation("QP destroyed with work outstanding");
    fake_verbs.live_qps--;
    pthread_mutex_unlock(&mu);
    free(qp);
    return 0;
}

static struct ibv_mr *reg(struct ibv_pd *pd, void *addr, size_t len, int access)
{
    pthread_mutex_lock(&mu);
    for (int i = 0; i < MAX_MR; i++) {
        if (mrs[i].used)
            continue;
        mrs[i].used = 1;
        mrs[i].access = access;
        mrs[i].mr.context = pd->context;
        mrs[i].mr.pd = pd;
        mrs[i].mr.addr = addr;
        mrs[i].mr.length = len;
        mrs[i].mr.lkey = next_key++;
        mrs[i].mr.rkey = next_key++;
        fake_verbs.live_mrs++;
        pthread_mutex_unlock(&mu);
        return &mrs[i].mr;
    }
    pthread_mutex_unlock(&mu);
    errno = ENOMEM;
    return NULL;
}

struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
    return reg(pd, addr, len, access);
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, unsigned int access)
{
    if (iova != (uint64_t)(uintptr_t)addr)
        violation("iova differs from the address");
    return reg(pd, addr, len, (int)access);
}

struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t len, uint64_t iova, int fd,
                                 int access)
{
    (void)pd;
    (void)offset;
    (void)len;
    (void)iova;
    (void)fd;
    (void)access;
    errno = EOPNOTSUPP;
    return NULL;
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
    pthread_mutex_lock(&mu);
    ((struct fmr *)mr)->used = 0;
    fake_verbs.live_mrs--;
    pthread_mutex_unlock(&mu);
    return 0;
}

int ibv_get_async_event(struct ibv_context *c, struct ibv_async_event *ev)
{
    (void)c;
    (void)ev;
    errno = EAGAIN;
    return -1;
}

void ibv_ack_async_event(struct ibv_async_event *ev)
{
    (void)ev;
}

const char *ibv_wc_status_str(enum ibv_wc_status status)
{
    return status == IBV_WC_RETRY_EXC_ERR ? "transport retry counter exceeded" : "fake status";
}

const char *ibv_event_type_str(enum ibv_event_type event)
{
    (void)event;
    return "fake event";
}
