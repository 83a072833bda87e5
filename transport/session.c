/*
 * Sessions: the connections between one decode engine and one prefill engine, HELLO (identity and
 * capabilities), opening a session and its data connections, binding ops to it, and the choice of the
 * data mover for each room (pdr__mover_choose). Thread 0.
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

void pdr__sess_unref(pdr_xfer_engine_t *eng, struct pdr__sess *s)
{
    pthread_mutex_lock(&eng->lock);
    int last = --s->refs == 0;
    pthread_mutex_unlock(&eng->lock);
    if (last)
        free(s);
}

static struct pdr__sess *sess_new(pdr_xfer_engine_t *eng, int outbound, uint64_t id, const char *peer)
{
    struct pdr__sess *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->refs = 1; /* the list's */
    s->outbound = outbound;
    s->id = id;
    snprintf(s->peer, sizeof(s->peer), "%s", peer);
    struct tcp_state *ts = pdr__tcp_st(eng);
    pdr_dlink_push(&ts->sessions, &s->link);
    return s;
}

static void conn_join(pdr_xfer_engine_t *eng, struct pdr__conn *c, struct pdr__sess *s, int index)
{
    pthread_mutex_lock(&eng->lock);
    s->refs++;
    s->nconns++;
    pthread_mutex_unlock(&eng->lock);
    c->sess = s;
    c->index = index;
}

static int queue_hello(pdr_xfer_engine_t *eng, struct pdr__conn *c, uint64_t session, uint32_t index,
                       uint32_t nconns)
{
    struct ctl_msg *m = pdr__ctl_new(PDR_XFER_HDR_LEN + PDR_XFER_HELLO_LEN);
    if (m == NULL)
        return PDR_ENOMEM;
    struct pdr_xfer_hello h = pdr__tcp_st(eng)->me;
    pthread_mutex_lock(&eng->lock);
    if (eng->has_cuda)
        h.caps |= PDR_XFER_CAP_CUDA;
    pthread_mutex_unlock(&eng->lock);
    h.session = session;
    h.index = index;
    h.nconns = nconns;
    m->len = pdr__xfer_hello_encode(m->data, &h);
    pdr__cq_append(eng, c, m);
    return 0;
}

/* ---- binding ops to sessions (thread 0) ---- */

static void sess_bind(pdr_xfer_engine_t *eng, struct pdr__sess *s, struct pdr__op *op)
{
    pthread_mutex_lock(&eng->lock);
    op->sess = s;
    pdr_dlink_push(&s->ops, &op->slink);
    s->nops++;
    pthread_mutex_unlock(&eng->lock);
    op->backend = "tcp";
}

/* eng->lock held. */
void pdr__push_list_add(struct pdr__sess *s, struct pdr__op *op)
{
    pdr_dqueue_append(&s->push, &op->plink);
}

void pdr__push_list_del(struct pdr__sess *s, struct pdr__op *op)
{
    pdr_dqueue_unlink(&s->push, &op->plink);
}

/* ---- the choice of the data mover (thread 0) ----
 *
 * The one place that reads the configured backend (eng->backend_forced): auto tries CUDA IPC for device
 * memory on the same host and RDMA where both HELLOs carry PDR_XFER_CAP_RDMA, and falls back to TCP when
 * they fail; tcp, rdma and cuda_ipc force one mover, and a room the forced mover cannot move fails with
 * PDR_ENOTSUP instead of falling back.
 */
void pdr__mover_choose(pdr_xfer_engine_t *eng, const struct pdr__sess *s, const struct pdr__op *op, int step,
                       int ext_type, int has_body, struct pdr__mover_plan *p)
{
    int be = eng->backend_forced;
    int me_rdma = (pdr__tcp_st(eng)->me.caps & PDR_XFER_CAP_RDMA) != 0;
    memset(p, 0, sizeof(*p));
    p->ipc_forced = be == PDR__BE_CUDA_IPC;
    p->rdma_forced = be == PDR__BE_RDMA;
    switch (step) {
    case PDR__CHOOSE_PUSH:
        p->refuse = be == PDR__BE_RDMA && op->total > 0 && !me_rdma; /* no RDMA device here */
        break;
    case PDR__CHOOSE_PULL:
        p->rdma = op->total > 0 && me_rdma && (be == PDR__BE_AUTO || be == PDR__BE_RDMA);
        p->refuse = be == PDR__BE_RDMA && op->total > 0 && !p->rdma; /* no RDMA device here */
        /* RDMA needs the peer's capability: its HELLO comes within one round trip. */
        p->need_hello = p->rdma && !(op->dev >= 0 && be == PDR__BE_AUTO);
        break;
    case PDR__CHOOSE_OFFER:
        /* Device memory on a peer that may share this host (its HELLO not seen yet, or the same boot id
         * and host name): offer CUDA IPC handles; the prefill decides. */
        p->ipc = op->dev >= 0 && be != PDR__BE_TCP && be != PDR__BE_RDMA &&
                 (s->peer_hello.hostname[0] == '\0' || pdr__same_host(eng, s));
        p->rdma = op->total > 0 && me_rdma && (s->peer_hello.caps & PDR_XFER_CAP_RDMA) &&
                  (be == PDR__BE_AUTO || be == PDR__BE_RDMA);
        p->refuse = (be == PDR__BE_CUDA_IPC && !p->ipc) || (be == PDR__BE_RDMA && op->total > 0 && !p->rdma);
        break;
    case PDR__CHOOSE_SERVE:
        p->ipc = ext_type == PDR_XF_FETCH_IPC && has_body && op->dev >= 0 && be != PDR__BE_TCP &&
                 pdr__same_host(eng, s);
        /* A push in parts is never written over RDMA (pdr_xfer_push_open refuses a forced rdma). */
        p->rdma = ext_type == PDR_XF_FETCH_RDMA && has_body && op->total > 0 && me_rdma && !op->parted &&
                  (be == PDR__BE_AUTO || be == PDR__BE_RDMA);
        p->refuse = (be == PDR__BE_CUDA_IPC && !p->ipc) || (be == PDR__BE_RDMA && op->total > 0 && !p->rdma);
        break;
    }
}

const struct pdr__mover_ops *const pdr__movers[PDR__NMOVERS] = {&pdr__mover_rdma, &pdr__mover_ipc,
                                                                &pdr__mover_staging, &pdr__mover_tcp};

int pdr__movers_init(pdr_xfer_engine_t *eng)
{
    for (int i = 0; i < PDR__NMOVERS; i++) {
        int rc = pdr__movers[i]->init != NULL ? pdr__movers[i]->init(eng) : 0;
        if (rc != 0)
            return rc;
    }
    return 0;
}

void pdr__movers_abort(pdr_xfer_engine_t *eng, struct pdr__op *op, struct pdr__sess *s)
{
    for (int i = 0; i < PDR__NMOVERS; i++)
        if (pdr__movers[i]->abort != NULL)
            pdr__movers[i]->abort(eng, op, s);
}

void pdr__movers_quiesce(pdr_xfer_engine_t *eng, struct pdr__op *op)
{
    for (int i = 0; i < PDR__NMOVERS; i++)
        if (pdr__movers[i]->quiesce != NULL)
            pdr__movers[i]->quiesce(eng, op);
}

/* Returns how many rooms are still in flight in the movers' own work. */
int pdr__movers_poll(pdr_xfer_engine_t *eng)
{
    int pending = 0;
    for (int i = 0; i < PDR__NMOVERS; i++)
        if (pdr__movers[i]->poll != NULL)
            pending += pdr__movers[i]->poll(eng);
    return pending;
}

void pdr__movers_sess_close(pdr_xfer_engine_t *eng, struct pdr__io *io, struct pdr__sess *s)
{
    for (int i = 0; i < PDR__NMOVERS; i++)
        if (pdr__movers[i]->sess_close != NULL)
            pdr__movers[i]->sess_close(eng, io, s);
}

void pdr__movers_mem_unregistered(pdr_xfer_engine_t *eng, const void *addr, size_t len)
{
    for (int i = 0; i < PDR__NMOVERS; i++)
        if (pdr__movers[i]->mem_unregistered != NULL)
            pdr__movers[i]->mem_unregistered(eng, addr, len);
}

void pdr__movers_shutdown(pdr_xfer_engine_t *eng)
{
    for (int i = 0; i < PDR__NMOVERS; i++)
        if (pdr__movers[i]->shutdown != NULL)
            pdr__movers[i]->shutdown(eng);
}

/* Serves a FETCH (xid, total; ipc: its FETCH_IPC or FETCH_RDMA body, per ext_type, or NULL) of op's
 * room from the session of control connection c. */
/* Prefill: serves op with mover m (body, len: the decode's offer). Returns 1 when the room is settled: m
 * serves it, or m failed and was forced, so the room fails (with forced_code, or m's error when 0).
 * Returns 0 when the room falls back to the TCP mover (with a warning). */
static int serve_with(pdr_xfer_engine_t *eng, const struct pdr__mover_ops *m, struct pdr__op *op,
                      struct pdr__sess *s, const uint8_t *body, size_t len, int forced, int forced_code)
{
    int rc = m->serve(eng, op, s, body, len);
    if (rc == 0)
        return 1;
    if (forced) {
        int code = forced_code != 0 ? forced_code : rc;
        pdr__op_complete(eng, op, code, code);
        return 1;
    }
    pdr_warn("transport: room %llu falls back from %s to tcp%s (%s)", (unsigned long long)op->room, m->name,
             m == &pdr__mover_ipc ? " staging" : "", pdr_strerror(rc));
    op->backend = "tcp";
    return 0;
}

void pdr__push_match(pdr_xfer_engine_t *eng, struct pdr__op *op, struct pdr__conn *c, uint64_t xid,
                     uint64_t total, const uint8_t *ipc, size_t ipc_len, int ext_type)
{
    const uint8_t *rdma_body = ext_type == PDR_XF_FETCH_RDMA ? ipc : NULL;
    if (rdma_body != NULL)
        ipc = NULL;
    if (total != op->total) {
        if (pdr__queue_ctl(eng, c, PDR_XF_ERROR, op->room, xid, 0, PDR_ESIZE) != 0)
            return;
        pdr__op_complete(eng, op, PDR_ESIZE, 0);
        return;
    }
    op->xid = xid;
    op->state = PDR__OP_ACTIVE;
    sess_bind(eng, c->sess, op);
    struct pdr__mover_plan plan;
    pdr__mover_choose(eng, c->sess, op, PDR__CHOOSE_SERVE, ext_type, ipc != NULL || rdma_body != NULL, &plan);
    if (plan.refuse) {
        pdr__op_complete(eng, op, PDR_ENOTSUP, PDR_ENOTSUP);
        return;
    }
    if (plan.rdma && serve_with(eng, &pdr__mover_rdma, op, c->sess, rdma_body, ipc_len, plan.rdma_forced, 0))
        return;
    if (plan.ipc && op->total > 0 &&
        serve_with(eng, &pdr__mover_ipc, op, c->sess, ipc, ipc_len, plan.ipc_forced, PDR_ENOTSUP))
        return;
    pdr__mover_tcp.serve(eng, op, c->sess, NULL, 0);
}

/* Chooses op's movers at step (not PDR__CHOOSE_SERVE); a room the forced backend cannot move fails
 * here with PDR_ENOTSUP (returns 1). */
static int mover_refused(pdr_xfer_engine_t *eng, const struct pdr__sess *s, struct pdr__op *op, int step,
                         struct pdr__mover_plan *plan)
{
    pdr__mover_choose(eng, s, op, step, 0, 0, plan);
    if (plan->refuse)
        pdr__op_complete(eng, op, PDR_ENOTSUP, 0);
    return plan->refuse;
}

void pdr__tcp_start_push(pdr_xfer_engine_t *eng, struct pdr__op *op)
{
    struct pdr__mover_plan plan;
    if (mover_refused(eng, NULL, op, PDR__CHOOSE_PUSH, &plan))
        return;
    struct pdr__parked *p = pdr__parked_find(eng, op->room);
    if (p != NULL && p->tomb_code != 0) {
        int code = p->tomb_push ? 0 : p->tomb_code;
        pdr__tomb_del(eng, p); /* a new push of the room replaces the memory of the old one */
        if (code != 0) {
            pdr__op_complete(eng, op, code, 0); /* its decode already gave up */
            return;
        }
        p = NULL;
    }
    if (p == NULL)
        return; /* waits for a FETCH until its deadline */
    pthread_mutex_lock(&eng->lock);
    int servable = pdr__op_servable_locked(op);
    pthread_mutex_unlock(&eng->lock);
    if (!servable)
        return; /* opened in parts: the first part serves the parked FETCH (pdr__parts_ready) */
    struct pdr__conn *c = p->conn;
    pdr__parked_unlink(c, p);
    pdr__parked_remove(eng, p);
    pdr__push_match(eng, op, c, p->xid, p->total, p->ipc, p->ipc_len, p->ext_type);
    free(p);
}

/* Opens a session to op's peer: its control connection, on thread 0. */
static struct pdr__sess *sess_open(pdr_xfer_engine_t *eng, struct pdr__op *op, int *err)
{
    int connecting;
    int fd = pdr__connect_to(eng, &op->addr, op->addrlen, &connecting, err);
    if (fd < 0)
        return NULL;
    struct pdr__conn *c = pdr__conn_new(fd, 1, connecting, op->peer);
    if (c == NULL || pdr__conn_attach(&eng->io[0], c) != 0) {
        if (c != NULL) {
            free(c->rbuf);
            free(c);
        }
        close(fd);
        *err = PDR_ENOMEM;
        return NULL;
    }
    struct pdr__sess *s = sess_new(eng, 1, pdr_random_room(), op->peer);
    if (s == NULL) {
        pdr__conn_fail(eng, c, PDR_ENOMEM);
        *err = PDR_ENOMEM;
        return NULL;
    }
    memcpy(&s->addr, &op->addr, op->addrlen);
    s->addrlen = op->addrlen;
    conn_join(eng, c, s, 0);
    s->ctl = c;
    if (queue_hello(eng, c, s->id, 0, (uint32_t)eng->opts.conns_per_peer) != 0) {
        pdr__conn_fail(eng, c, PDR_ENOMEM);
        *err = PDR_ENOMEM;
        return NULL;
    }
    return s;
}

/* The prefill answered our HELLO: open the data connections, spread over the I/O threads. */
static void sess_open_data(pdr_xfer_engine_t *eng, struct pdr__sess *s)
{
    s->hello_done = 1;
    for (int k = 1; k < eng->opts.conns_per_peer; k++) {
        int connecting, err;
        int fd = pdr__connect_to(eng, &s->addr, s->addrlen, &connecting, &err);
        if (fd < 0) {
            pdr_warn("transport: data connection %d to %s failed: %s", k, s->peer, pdr_strerror(err));
            continue;
        }
        struct pdr__conn *c = pdr__conn_new(fd, 1, connecting, s->peer);
        if (c == NULL) {
            close(fd);
            continue;
        }
        conn_join(eng, c, s, k);
        if (queue_hello(eng, c, s->id, (uint32_t)k, (uint32_t)eng->opts.conns_per_peer) != 0) {
            close(fd);
            pdr__conn_free(eng, c);
            continue;
        }
        struct pdr__io *io = &eng->io[k % eng->nio];
        if (io->idx == 0) {
            if (pdr__conn_attach(io, c) != 0) {
                close(fd);
                pdr__conn_free(eng, c);
            }
        } else {
            pdr__conn_handoff(eng, io, c);
        }
    }
}

/* Sends op's FETCH (or FETCH_IPC, or FETCH_RDMA) on session s, to which it is bound. */
static void pull_send(pdr_xfer_engine_t *eng, struct pdr__sess *s, struct pdr__op *op)
{
    struct pdr__mover_plan plan;
    if (mover_refused(eng, s, op, PDR__CHOOSE_OFFER, &plan))
        return;
    int rc = 0;
    struct ctl_msg *m = plan.ipc ? pdr__mover_ipc.offer(eng, s, op, &rc) : NULL;
    if (m == NULL && plan.ipc_forced) {
        pdr__op_complete(eng, op, PDR_ENOTSUP, 0);
        return;
    }
    if (m != NULL) {
        op->mover = &pdr__mover_ipc; /* IPC_DONE may answer it */
    } else if (plan.rdma) {
        m = pdr__mover_rdma.offer(eng, s, op, &rc);
        if (m == NULL && plan.rdma_forced) {
            pdr__op_complete(eng, op, rc, 0);
            return;
        }
        if (m == NULL)
            pdr_warn("transport: room %llu falls back from rdma to tcp (%s)", (unsigned long long)op->room,
                     pdr_strerror(rc));
    }
    if (m == NULL && (m = pdr__mover_tcp.offer(eng, s, op, &rc)) == NULL) {
        pdr__op_complete(eng, op, rc, 0);
        return;
    }
    pdr__cq_append(eng, s->ctl, m);
}

/* The outbound session's HELLO arrived: send the FETCHes that waited for it (its RDMA capability). */
static void pull_flush_hello(pdr_xfer_engine_t *eng, struct pdr__sess *s)
{
    for (;;) {
        struct pdr__op *op;
        pthread_mutex_lock(&eng->lock);
        for (op = PDR_DLINK_ENTRY(s->ops, struct pdr__op, slink); op != NULL && !op->wait_hello;
             op = PDR_DLINK_ENTRY(op->slink.next, struct pdr__op, slink))
            ;
        if (op != NULL)
            op->wait_hello = 0;
        pthread_mutex_unlock(&eng->lock);
        if (op == NULL)
            return;
        pull_send(eng, s, op);
    }
}

void pdr__tcp_start_pull(pdr_xfer_engine_t *eng, struct pdr__op *op)
{
    struct pdr__mover_plan plan;
    if (mover_refused(eng, NULL, op, PDR__CHOOSE_PULL, &plan))
        return;
    struct pdr__sess *s = PDR_DLINK_ENTRY(pdr__tcp_st(eng)->sessions, struct pdr__sess, link);
    while (s != NULL && !(s->outbound && !s->dead && s->ctl != NULL && strcmp(s->peer, op->peer) == 0))
        s = PDR_DLINK_ENTRY(s->link.next, struct pdr__sess, link);
    if (s == NULL) {
        int err = 0;
        s = sess_open(eng, op, &err);
        if (s == NULL) {
            pdr__op_complete(eng, op, err, 0);
            return;
        }
    }
    sess_bind(eng, s, op);
    if (plan.need_hello && s->peer_hello.hostname[0] == '\0') {
        op->wait_hello = 1;
        return;
    }
    pull_send(eng, s, op);
}

/* Kills a session (thread 0): its rooms fail with status, its connections close. */
void pdr__sess_kill(pdr_xfer_engine_t *eng, struct pdr__sess *s, int status)
{
    pthread_mutex_lock(&eng->lock);
    if (s->dead) {
        pthread_mutex_unlock(&eng->lock);
        return;
    }
    s->dead = 1;
    s->status = status;
    pthread_mutex_unlock(&eng->lock);
    pdr_dlink_unlink(&s->link);
    for (;;) {
        pthread_mutex_lock(&eng->lock);
        struct pdr__op *op = PDR_DLINK_ENTRY(s->ops, struct pdr__op, slink);
        pthread_mutex_unlock(&eng->lock);
        if (op == NULL)
            break;
        pdr__op_complete(eng, op, status, 0);
    }
    if (s->ctl != NULL)
        pdr__conn_fail(eng, s->ctl, status);
    pdr__movers_sess_close(eng, &eng->io[0], s);
    pdr__rescan_all(eng);    /* the other threads close their connections of s */
    pdr__sess_unref(eng, s); /* the list's reference */
}

/* An accepted connection whose first frame is not a HELLO: a one-connection session. */
int pdr__sess_implicit(pdr_xfer_engine_t *eng, struct pdr__conn *c)
{
    if (c->sess != NULL)
        return 0;
    struct pdr__sess *s = sess_new(eng, 0, 0, c->peer);
    if (s == NULL) {
        pdr__conn_fail(eng, c, PDR_ENOMEM);
        return -1;
    }
    conn_join(eng, c, s, 0);
    s->ctl = c;
    return 0;
}

int pdr__on_hello(pdr_xfer_engine_t *eng, struct pdr__conn *c, const uint8_t *body, size_t len)
{
    struct pdr_xfer_hello h;
    if (c->hello_seen || pdr__xfer_hello_decode(body, len, &h) != 0) {
        pdr__conn_fail(eng, c, PDR_EPROTO);
        return -1;
    }
    c->hello_seen = 1;
    if (c->outbound) {
        /* The prefill's answer on our control connection. */
        struct pdr__sess *s = c->sess;
        if (s == NULL || s->ctl != c || h.session != s->id) {
            pdr__conn_fail(eng, c, PDR_EPROTO);
            return -1;
        }
        s->peer_hello = h;
        if (!s->hello_done)
            sess_open_data(eng, s);
        pull_flush_hello(eng, s);
        return 0;
    }
    if (c->sess != NULL) {
        pdr__conn_fail(eng, c, PDR_EPROTO);
        return -1;
    }
    if (h.index == 0) {
        struct pdr__sess *s = sess_new(eng, 0, h.session, c->peer);
        if (s == NULL) {
            pdr__conn_fail(eng, c, PDR_ENOMEM);
            return -1;
        }
        s->peer_hello = h;
        conn_join(eng, c, s, 0);
        s->ctl = c;
        if (queue_hello(eng, c, h.session, 0, h.nconns) != 0) {
            pdr__conn_fail(eng, c, PDR_ENOMEM);
            return -1;
        }
        return 0;
    }
    struct pdr__sess *s = PDR_DLINK_ENTRY(pdr__tcp_st(eng)->sessions, struct pdr__sess, link);
    while (s != NULL && !(!s->outbound && s->id == h.session && s->ctl != NULL))
        s = PDR_DLINK_ENTRY(s->link.next, struct pdr__sess, link);
    if (s == NULL) {
        pdr__conn_fail(eng, c, PDR_EPEERGONE); /* its session is gone already */
        return -1;
    }
    conn_join(eng, c, s, (int)h.index);
    int t = (int)(h.index % (uint32_t)eng->nio);
    if (t != 0) {
        c->migrate_to = t;
        return RX_MIGRATE;
    }
    pdr__rescan_all(eng);
    return 0;
}

void pdr__read_identity(struct pdr_xfer_hello *me)
{
    memset(me, 0, sizeof(*me));
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f != NULL) {
        if (fgets(me->boot_id, sizeof(me->boot_id), f) == NULL)
            me->boot_id[0] = '\0';
        fclose(f);
        me->boot_id[strcspn(me->boot_id, "\n")] = '\0';
    }
    if (gethostname(me->hostname, sizeof(me->hostname) - 1) != 0)
        me->hostname[0] = '\0';
    me->hostname[sizeof(me->hostname) - 1] = '\0';
    /* PDR_XFER_CAP_CUDA is added per HELLO once CUDA memory was registered (queue_hello). */
    me->caps = pdr__rdma_device_count() > 0 ? PDR_XFER_CAP_RDMA : 0;
}
