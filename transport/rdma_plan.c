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

/* The QP state machine: an event in a state from lo to hi (an ordered range) moves to `to` and asks for
 * `act`. Anything not listed is refused (PDR_EINVAL) and changes nothing. */
static const struct qp_rule {
    enum pdr_rdma_qp_event ev;
    enum pdr_rdma_qp_state lo, hi, to;
    enum pdr_rdma_qp_action act;
} qp_rules[] = {
    {PDR_RDMA_QPE_CREATE, PDR_RDMA_QPS_NONE, PDR_RDMA_QPS_NONE, PDR_RDMA_QPS_RESET, PDR_RDMA_QPA_MODIFY_INIT},
    {PDR_RDMA_QPE_LOCAL_INIT_DONE, PDR_RDMA_QPS_RESET, PDR_RDMA_QPS_RESET, PDR_RDMA_QPS_INIT,
     PDR_RDMA_QPA_NONE},
    {PDR_RDMA_QPE_REMOTE_INFO, PDR_RDMA_QPS_INIT, PDR_RDMA_QPS_INIT, PDR_RDMA_QPS_INIT,
     PDR_RDMA_QPA_MODIFY_RTR},
    {PDR_RDMA_QPE_RTR_DONE, PDR_RDMA_QPS_INIT, PDR_RDMA_QPS_INIT, PDR_RDMA_QPS_RTR, PDR_RDMA_QPA_MODIFY_RTS},
    {PDR_RDMA_QPE_RTS_DONE, PDR_RDMA_QPS_RTR, PDR_RDMA_QPS_RTR, PDR_RDMA_QPS_RTS, PDR_RDMA_QPA_NONE},
    {PDR_RDMA_QPE_ERROR, PDR_RDMA_QPS_RESET, PDR_RDMA_QPS_RTS, PDR_RDMA_QPS_ERR, PDR_RDMA_QPA_FLUSH_FAIL},
    {PDR_RDMA_QPE_ERROR, PDR_RDMA_QPS_ERR, PDR_RDMA_QPS_ERR, PDR_RDMA_QPS_ERR, PDR_RDMA_QPA_NONE},
    {PDR_RDMA_QPE_DESTROY, PDR_RDMA_QPS_RESET, PDR_RDMA_QPS_ERR, PDR_RDMA_QPS_DESTROYED,
     PDR_RDMA_QPA_DESTROY},
};

int pdr__rdma_qp_step(enum pdr_rdma_qp_state cur, enum pdr_rdma_qp_event ev, enum pdr_rdma_qp_state *next,
                      enum pdr_rdma_qp_action *act)
{
    const struct qp_rule *r = NULL;
    for (size_t i = 0; i < sizeof(qp_rules) / sizeof(qp_rules[0]) && r == NULL; i++)
        if (qp_rules[i].ev == ev && cur >= qp_rules[i].lo && cur <= qp_rules[i].hi)
            r = &qp_rules[i];
    if (next != NULL)
        *next = r != NULL ? r->to : cur;
    if (act != NULL)
        *act = r != NULL ? r->act : PDR_RDMA_QPA_NONE;
    return r != NULL ? 0 : PDR_EINVAL;
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
