/*
 * The RDMA backend's pure decisions: the QP state machine (which verbs call comes next) and the per-room
 * write plan (which WRITE work requests, on which QP, in which batch). No verbs, no allocation, any
 * thread; rdma.c executes what these functions decide, and tests/unit/test_rdma_pure.c checks them.
 */
#include <string.h>

#include "err.h"
#include "rdma.h"

static const char *const state_names[PDR_RDMA_QPS__COUNT] = {"NONE", "RESET", "INIT",     "RTR",
                                                             "RTS",  "ERR",   "DESTROYED"};
static const char *const event_names[PDR_RDMA_QPE__COUNT] = {
    "create", "local_init_done", "remote_info_received", "rtr_done", "rts_done", "error", "destroy"};
static const char *const action_names[] = {"NONE",       "MODIFY_INIT", "MODIFY_RTR",
                                           "MODIFY_RTS", "FLUSH_FAIL",  "DESTROY"};

const char *pdr__rdma_qp_state_name(int s)
{
    return s >= 0 && s < PDR_RDMA_QPS__COUNT ? state_names[s] : "?";
}

const char *pdr__rdma_qp_event_name(int e)
{
    return e >= 0 && e < PDR_RDMA_QPE__COUNT ? event_names[e] : "?";
}

const char *pdr__rdma_qp_action_name(int a)
{
    return a >= 0 && a < (int)(sizeof(action_names) / sizeof(action_names[0])) ? action_names[a] : "?";
}

int pdr__rdma_qp_step(enum pdr_rdma_qp_state cur, enum pdr_rdma_qp_event ev, enum pdr_rdma_qp_state *next,
                      enum pdr_rdma_qp_action *act)
{
    enum pdr_rdma_qp_state n = cur;
    enum pdr_rdma_qp_action a = PDR_RDMA_QPA_NONE;
    int ok = 0;
    switch (ev) {
    case PDR_RDMA_QPE_CREATE:
        if (cur == PDR_RDMA_QPS_NONE) {
            n = PDR_RDMA_QPS_RESET;
            a = PDR_RDMA_QPA_MODIFY_INIT;
            ok = 1;
        }
        break;
    case PDR_RDMA_QPE_LOCAL_INIT_DONE:
        if (cur == PDR_RDMA_QPS_RESET) {
            n = PDR_RDMA_QPS_INIT;
            ok = 1;
        }
        break;
    case PDR_RDMA_QPE_REMOTE_INFO:
        if (cur == PDR_RDMA_QPS_INIT) {
            a = PDR_RDMA_QPA_MODIFY_RTR;
            ok = 1;
        }
        break;
    case PDR_RDMA_QPE_RTR_DONE:
        if (cur == PDR_RDMA_QPS_INIT) {
            n = PDR_RDMA_QPS_RTR;
            a = PDR_RDMA_QPA_MODIFY_RTS;
            ok = 1;
        }
        break;
    case PDR_RDMA_QPE_RTS_DONE:
        if (cur == PDR_RDMA_QPS_RTR) {
            n = PDR_RDMA_QPS_RTS;
            ok = 1;
        }
        break;
    case PDR_RDMA_QPE_ERROR:
        if (cur >= PDR_RDMA_QPS_RESET && cur <= PDR_RDMA_QPS_RTS) {
            n = PDR_RDMA_QPS_ERR;
            a = PDR_RDMA_QPA_FLUSH_FAIL;
            ok = 1;
        } else if (cur == PDR_RDMA_QPS_ERR) {
            ok = 1;
        }
        break;
    case PDR_RDMA_QPE_DESTROY:
        if (cur >= PDR_RDMA_QPS_RESET && cur <= PDR_RDMA_QPS_ERR) {
            n = PDR_RDMA_QPS_DESTROYED;
            a = PDR_RDMA_QPA_DESTROY;
            ok = 1;
        }
        break;
    default:
        break;
    }
    if (next != NULL)
        *next = ok ? n : cur;
    if (act != NULL)
        *act = ok ? a : PDR_RDMA_QPA_NONE;
    return ok ? 0 : PDR_EINVAL;
}

static int segs_total(const struct pdr_rdma_seg *s, uint32_t n, uint64_t *total)
{
    uint64_t sum = 0;
    if (s == NULL || n == 0)
        return PDR_EINVAL;
    for (uint32_t i = 0; i < n; i++) {
        if (s[i].len == 0 || s[i].addr + s[i].len < s[i].addr || sum + s[i].len < sum)
            return PDR_EINVAL;
        sum += s[i].len;
    }
    *total = sum;
    return 0;
}

int pdr__rdma_plan(const struct pdr_rdma_seg *local, uint32_t nlocal, const struct pdr_rdma_seg *remote,
                   uint32_t nremote, const struct pdr_rdma_plan_limits *lim, uint64_t tag,
                   struct pdr_rdma_wr *out, size_t cap, size_t *nwr, uint32_t *nbatch)
{
    uint32_t max_bytes = PDR_RDMA_WR_BYTES, batch = PDR_RDMA_BATCH_WRS, nqp = 1;
    if (lim != NULL) {
        if (lim->max_wr_bytes)
            max_bytes = lim->max_wr_bytes;
        if (lim->batch_wrs)
            batch = lim->batch_wrs;
        if (lim->nqp)
            nqp = lim->nqp;
    }
    if (max_bytes > (1u << 31) || batch > PDR_RDMA_MAX_WR || nqp > PDR_RDMA_MAX_QP)
        return PDR_EINVAL;
    uint64_t lt, rt;
    int rc = segs_total(local, nlocal, &lt);
    if (rc == 0)
        rc = segs_total(remote, nremote, &rt);
    if (rc != 0)
        return rc;
    if (lt != rt)
        return PDR_ESIZE;

    /* One pass: count always, write when out is given. */
    size_t n = 0;
    uint32_t li = 0, ri = 0;
    uint64_t loff = 0, roff = 0;
    while (li < nlocal) {
        uint64_t piece = local[li].len - loff;
        if (remote[ri].len - roff < piece)
            piece = remote[ri].len - roff;
        if (piece > max_bytes)
            piece = max_bytes;
        if (n + 1 >= PDR_RDMA_MAX_PLAN_WRS) /* + 1: the IMM entry */
            return PDR_ETOOBIG;
        if (out != NULL) {
            if (n >= cap)
                return PDR_ETOOBIG;
            struct pdr_rdma_wr *w = &out[n];
            memset(w, 0, sizeof(*w));
            w->laddr = local[li].addr + loff;
            w->lkey = local[li].key;
            w->raddr = remote[ri].addr + roff;
            w->rkey = remote[ri].key;
            w->len = (uint32_t)piece;
            w->batch = (uint32_t)(n / batch);
            w->qp = (uint16_t)(w->batch % nqp);
            if ((n + 1) % batch == 0)
                w->flags = PDR_RDMA_WR_SIGNALED;
        }
        n++;
        loff += piece;
        roff += piece;
        if (loff == local[li].len) {
            li++;
            loff = 0;
        }
        if (roff == remote[ri].len) {
            ri++;
            roff = 0;
        }
    }
    uint32_t nb = (uint32_t)((n + batch - 1) / batch);
    if (out != NULL) {
        if (n >= cap)
            return PDR_ETOOBIG;
        out[n - 1].flags |= PDR_RDMA_WR_SIGNALED; /* the last, possibly short, batch */
        struct pdr_rdma_wr *w = &out[n];
        memset(w, 0, sizeof(*w));
        w->raddr = remote[0].addr;
        w->rkey = remote[0].key;
        w->imm = (uint32_t)tag;
        w->batch = nb;
        w->qp = 0;
        w->flags = PDR_RDMA_WR_IMM | PDR_RDMA_WR_SIGNALED;
    }
    if (nwr != NULL)
        *nwr = n + 1;
    if (nbatch != NULL)
        *nbatch = nb;
    return 0;
}
