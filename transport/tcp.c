/*
 * The TCP backend: the listener, sessions (conns_per_peer connections per decode/prefill pair), and
 * the per-connection receive and send state machines. Each connection runs on the I/O thread that owns
 * it (transport_internal.h has the threading story); the control connection of every session, the
 * listener and everything that completes an op run on I/O thread 0.
 *
 * Invariants:
 *  - Frames are never interleaved on a connection: a DATA frame, once started, is finished even if its
 *    room fails (the rest of its payload is sent as zeros), and a received DATA frame whose room failed
 *    is read to its end into a scratch buffer. So a failed room never breaks the framing of a
 *    connection, and only a malformed frame (PDR_EPROTO) or an I/O error closes one.
 *  - A room's chunks are claimed under eng->lock by whichever connection of the session is ready to
 *    send; each DATA frame names its offset, so the decode writes it in place and counts bytes. The
 *    prefill sends DONE (on the control connection) once every chunk was handed to the kernel; the
 *    decode ACKs when DONE arrived and its byte count reached the total.
 *  - Memory per connection is bounded: a 64 KiB receive buffer, one control body of at most the FETCH
 *    descriptor limit, and a control-frame queue of a few frames per pending room. Payload goes
 *    straight between the socket and the room's segments (readv/sendmsg), never through a copy
 *    proportional to the room size.
 *  - Nothing here touches a connection after pdr__conn_fail(): functions that can fail a connection return
 *    -1 and their callers stop. Failed connections are freed at the end of their thread's loop turn.
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

struct tcp_state *pdr__tcp_st(pdr_xfer_engine_t *eng)
{
    return eng->be_state;
}

static int tcp_supports_mem(int kind)
{
    return kind == PDR_XFER_MEM_HOST;
}

/* ---- socket setup ---- */

static void tune_socket(pdr_xfer_engine_t *eng, int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    /* Kernel keepalive finds a vanished host in 5 + 3 × 2 s; the application heartbeat finds a stopped
     * process, which the kernel keeps ACKing. */
    int idle = 5, intvl = 2, cnt = 3;
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
    if (eng->opts.sock_buf_bytes > 0) {
        int b = eng->opts.sock_buf_bytes;
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof(b));
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof(b));
    }
}

void pdr__conn_set_events(pdr_xfer_engine_t *eng, struct pdr__conn *c, uint32_t mask)
{
    (void)eng;
    if (c->dead || c->evmask == mask)
        return;
    struct epoll_event ev = {.events = mask, .data.ptr = c};
    if (epoll_ctl(c->io->epfd, EPOLL_CTL_MOD, c->fd, &ev) == 0)
        c->evmask = mask;
}

/* ---- sessions and connections ---- */

static void sess_unref(pdr_xfer_engine_t *eng, struct pdr__sess *s)
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
    s->next = ts->sessions;
    if (ts->sessions != NULL)
        ts->sessions->prev = s;
    ts->sessions = s;
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

static struct pdr__conn *conn_new(int fd, int outbound, int connecting, const char *peer)
{
    struct pdr__conn *c = calloc(1, sizeof(*c));
    uint8_t *rbuf = malloc(RBUF_CAP);
    if (c == NULL || rbuf == NULL) {
        free(c);
        free(rbuf);
        return NULL;
    }
    c->tag = PDR__IO_CONN;
    c->fd = fd;
    c->rbuf = rbuf;
    c->outbound = outbound;
    c->connecting = connecting;
    c->migrate_to = -1;
    c->tx_stage = -1;
    c->rx_fill = -1;
    c->last_live_ns = pdr_now_ns();
    snprintf(c->peer, sizeof(c->peer), "%s", peer);
    return c;
}

/* Registers c with io's epoll set and list. Owner thread (or before the threads start). */
static int conn_attach(struct pdr__io *io, struct pdr__conn *c)
{
    c->io = io;
    c->evmask = c->connecting ? EPOLLOUT : (EPOLLIN | EPOLLOUT);
    struct epoll_event ev = {.events = c->evmask, .data.ptr = c};
    if (epoll_ctl(io->epfd, EPOLL_CTL_ADD, c->fd, &ev) != 0)
        return -1;
    c->prev = NULL;
    c->next = io->conns;
    if (io->conns != NULL)
        io->conns->prev = c;
    io->conns = c;
    c->attached = 1;
    return 0;
}

static void conn_unlink(struct pdr__conn *c)
{
    struct pdr__io *io = c->io;
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        io->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    c->next = c->prev = NULL;
    c->attached = 0;
}

/* Hands c (not attached anywhere) to thread io. */
static void conn_handoff(pdr_xfer_engine_t *eng, struct pdr__io *io, struct pdr__conn *c)
{
    c->io = io;
    pthread_mutex_lock(&eng->lock);
    c->next = io->adopt;
    io->adopt = c;
    pdr__io_wake_locked(eng, io);
    pthread_mutex_unlock(&eng->lock);
}

static void rescan_all(pdr_xfer_engine_t *eng)
{
    pthread_mutex_lock(&eng->lock);
    for (int i = 0; i < eng->nio; i++) {
        eng->io[i].rescan = 1;
        pdr__io_wake_locked(eng, &eng->io[i]);
    }
    pthread_mutex_unlock(&eng->lock);
}

void pdr__ctl_free_all(struct ctl_msg *m)
{
    while (m != NULL) {
        struct ctl_msg *n = m->next;
        if (m->data != m->inl)
            free(m->data);
        free(m);
        m = n;
    }
}

static void conn_free(pdr_xfer_engine_t *eng, struct pdr__conn *c)
{
    pdr__stage_free(eng, c);
    pdr__ctl_free_all(c->cq_head);
    pdr__ctl_free_all(c->tx_ctl);
    if (c->body != NULL && c->body != c->body_inl)
        free(c->body);
    if (c->rx_op != NULL)
        pdr__op_unref(eng, c->rx_op);
    if (c->tx_op != NULL)
        pdr__op_unref(eng, c->tx_op);
    if (c->sess != NULL)
        sess_unref(eng, c->sess);
    free(c->rbuf);
    free(c);
}

static void sess_kill(pdr_xfer_engine_t *eng, struct pdr__sess *s, int status);

/* Closes the connection; its session dies with status (thread 0 does that; other threads post it). */
void pdr__conn_fail(pdr_xfer_engine_t *eng, struct pdr__conn *c, int status)
{
    if (c->dead)
        return;
    c->dead = 1;
    if (status == PDR_EPROTO)
        pdr_warn("transport: protocol error from peer %s, closing the connection", c->peer);
    epoll_ctl(c->io->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
    struct pdr__io *io = c->io;
    conn_unlink(c);
    c->next = io->zombies;
    io->zombies = c;
    struct pdr__sess *s = c->sess;
    if (io->idx == 0) {
        pdr__drop_parked_all(eng, c);
        if (s != NULL && s->ctl == c)
            s->ctl = NULL;
        if (s != NULL)
            sess_kill(eng, s, status);
        return;
    }
    if (s == NULL)
        return;
    pthread_mutex_lock(&eng->lock);
    if (!s->dead && !s->dead_queued) {
        s->dead_queued = 1;
        s->status = status;
        s->refs++;
        s->dnext = eng->dead_sess;
        eng->dead_sess = s;
        pdr__io_wake_locked(eng, &eng->io[0]);
    }
    pthread_mutex_unlock(&eng->lock);
}

static int queue_hello(pdr_xfer_engine_t *eng, struct pdr__conn *c, uint64_t session, uint32_t index,
                       uint32_t nconns)
{
    struct ctl_msg *m = calloc(1, sizeof(*m));
    uint8_t *buf = malloc(PDR_XFER_HDR_LEN + PDR_XFER_HELLO_LEN);
    if (m == NULL || buf == NULL) {
        free(m);
        free(buf);
        return PDR_ENOMEM;
    }
    struct pdr_xfer_hello h = pdr__tcp_st(eng)->me;
    pthread_mutex_lock(&eng->lock);
    if (eng->has_cuda)
        h.caps |= PDR_XFER_CAP_CUDA;
    pthread_mutex_unlock(&eng->lock);
    h.session = session;
    h.index = index;
    h.nconns = nconns;
    m->data = buf;
    m->len = pdr__xfer_hello_encode(buf, &h);
    pdr__cq_append(eng, c, m);
    return 0;
}

/* ---- binding ops to sessions (thread 0) ---- */

static void sess_bind(pdr_xfer_engine_t *eng, struct pdr__sess *s, struct pdr__op *op)
{
    pthread_mutex_lock(&eng->lock);
    op->sess = s;
    op->sprev = NULL;
    op->snext = s->ops;
    if (s->ops != NULL)
        s->ops->sprev = op;
    s->ops = op;
    s->nops++;
    pthread_mutex_unlock(&eng->lock);
    op->backend = "tcp";
}

/* eng->lock held. */
void pdr__push_list_add(struct pdr__sess *s, struct pdr__op *op)
{
    op->in_push_list = 1;
    op->pnext = NULL;
    op->pprev = s->p_tail;
    if (s->p_tail != NULL)
        s->p_tail->pnext = op;
    else
        s->p_head = op;
    s->p_tail = op;
}

void pdr__push_list_del(struct pdr__sess *s, struct pdr__op *op)
{
    if (!op->in_push_list)
        return;
    op->in_push_list = 0;
    if (op->pprev != NULL)
        op->pprev->pnext = op->pnext;
    else
        s->p_head = op->pnext;
    if (op->pnext != NULL)
        op->pnext->pprev = op->pprev;
    else
        s->p_tail = op->pprev;
    op->pnext = op->pprev = NULL;
}

/* Serves a FETCH (xid, total; ipc: its FETCH_IPC or FETCH_RDMA body, per ext_type, or NULL) of op's
 * room from the session of control connection c. */
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
    int want_ipc =
        ipc != NULL && op->dev >= 0 && eng->backend_forced != PDR__BE_TCP && pdr__same_host(eng, c->sess);
    if (eng->backend_forced == PDR__BE_CUDA_IPC && !want_ipc) {
        pdr__op_complete(eng, op, PDR_ENOTSUP, PDR_ENOTSUP);
        return;
    }
    int want_rdma = rdma_body != NULL && op->total > 0 && (pdr__tcp_st(eng)->me.caps & PDR_XFER_CAP_RDMA) &&
                    (eng->backend_forced == PDR__BE_AUTO || eng->backend_forced == PDR__BE_RDMA);
    if (eng->backend_forced == PDR__BE_RDMA && op->total > 0 && !want_rdma) {
        pdr__op_complete(eng, op, PDR_ENOTSUP, PDR_ENOTSUP);
        return;
    }
    if (want_rdma) {
        int rc = pdr__mv_rdma_push_start(eng, op, c->sess, rdma_body, ipc_len);
        if (rc == 0)
            return;
        if (eng->backend_forced == PDR__BE_RDMA) {
            pdr__op_complete(eng, op, rc, rc);
            return;
        }
        pdr_warn("transport: room %llu falls back from rdma to tcp (%s)", (unsigned long long)op->room,
                 pdr_strerror(rc));
    }
    if (want_ipc && op->total > 0) {
        int rc = pdr__ipc_start(eng, op, c->sess, ipc, ipc_len);
        if (rc == 0)
            return;
        if (eng->backend_forced == PDR__BE_CUDA_IPC) {
            pdr__op_complete(eng, op, PDR_ENOTSUP, PDR_ENOTSUP);
            return;
        }
        pdr_warn("transport: room %llu falls back from cuda_ipc to tcp staging",
                 (unsigned long long)op->room);
        op->backend = "tcp";
    }
    if (op->total == 0) {
        op->state = PDR__OP_DRAINED;
        pdr__queue_ctl(eng, c, PDR_XF_DONE, op->room, op->xid, 0, 0);
        return;
    }
    pthread_mutex_lock(&eng->lock);
    pdr__push_list_add(c->sess, op);
    pthread_mutex_unlock(&eng->lock);
    rescan_all(eng); /* every connection of the session may pdr__claim chunks now */
}

static void tcp_start_push(pdr_xfer_engine_t *eng, struct pdr__op *op)
{
    if (eng->backend_forced == PDR__BE_RDMA && op->total > 0 &&
        !(pdr__tcp_st(eng)->me.caps & PDR_XFER_CAP_RDMA)) {
        pdr__op_complete(eng, op, PDR_ENOTSUP, 0); /* no RDMA device here */
        return;
    }
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
    struct pdr__conn *c = p->conn;
    pdr__parked_unlink(c, p);
    pdr__parked_remove(eng, p);
    pdr__push_match(eng, op, c, p->xid, p->total, p->ipc, p->ipc_len, p->ext_type);
    free(p);
}

static int connect_to(pdr_xfer_engine_t *eng, const struct sockaddr_storage *addr, socklen_t addrlen,
                      int *connecting, int *err)
{
    int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        *err = errno == EMFILE || errno == ENFILE || errno == ENOMEM ? PDR_ENOMEM : PDR_EIO;
        return -1;
    }
    tune_socket(eng, fd);
    *connecting = 0;
    if (connect(fd, (const struct sockaddr *)addr, addrlen) != 0) {
        if (errno != EINPROGRESS) {
            *err = PDR_ECONNREFUSED;
            close(fd);
            return -1;
        }
        *connecting = 1;
    }
    return fd;
}

/* Opens a session to op's peer: its control connection, on thread 0. */
static struct pdr__sess *sess_open(pdr_xfer_engine_t *eng, struct pdr__op *op, int *err)
{
    int connecting;
    int fd = connect_to(eng, &op->addr, op->addrlen, &connecting, err);
    if (fd < 0)
        return NULL;
    struct pdr__conn *c = conn_new(fd, 1, connecting, op->peer);
    if (c == NULL || conn_attach(&eng->io[0], c) != 0) {
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
        int fd = connect_to(eng, &s->addr, s->addrlen, &connecting, &err);
        if (fd < 0) {
            pdr_warn("transport: data connection %d to %s failed: %s", k, s->peer, pdr_strerror(err));
            continue;
        }
        struct pdr__conn *c = conn_new(fd, 1, connecting, s->peer);
        if (c == NULL) {
            close(fd);
            continue;
        }
        conn_join(eng, c, s, k);
        if (queue_hello(eng, c, s->id, (uint32_t)k, (uint32_t)eng->opts.conns_per_peer) != 0) {
            close(fd);
            conn_free(eng, c);
            continue;
        }
        struct pdr__io *io = &eng->io[k % eng->nio];
        if (io->idx == 0) {
            if (conn_attach(io, c) != 0) {
                close(fd);
                conn_free(eng, c);
            }
        } else {
            conn_handoff(eng, io, c);
        }
    }
}

/* Sends op's FETCH (or FETCH_IPC, or FETCH_RDMA) on session s, to which it is bound. */
static void pull_send(pdr_xfer_engine_t *eng, struct pdr__sess *s, struct pdr__op *op)
{
    /* Device memory on a peer that may share this host (its HELLO not seen yet, or the same boot id and
     * host name): offer CUDA IPC handles; the prefill decides. */
    int ipc = op->dev >= 0 && eng->backend_forced != PDR__BE_TCP && eng->backend_forced != PDR__BE_RDMA &&
              (s->peer_hello.hostname[0] == '\0' || pdr__same_host(eng, s));
    if (eng->backend_forced == PDR__BE_CUDA_IPC && !ipc) {
        pdr__op_complete(eng, op, PDR_ENOTSUP, 0);
        return;
    }
    int rdma = op->total > 0 && (pdr__tcp_st(eng)->me.caps & PDR_XFER_CAP_RDMA) &&
               (s->peer_hello.caps & PDR_XFER_CAP_RDMA) &&
               (eng->backend_forced == PDR__BE_AUTO || eng->backend_forced == PDR__BE_RDMA);
    if (eng->backend_forced == PDR__BE_RDMA && op->total > 0 && !rdma) {
        pdr__op_complete(eng, op, PDR_ENOTSUP, 0);
        return;
    }
    struct ctl_msg *m = ipc ? pdr__fetch_ipc_msg(eng, op) : NULL;
    if (m == NULL && eng->backend_forced == PDR__BE_CUDA_IPC) {
        pdr__op_complete(eng, op, PDR_ENOTSUP, 0);
        return;
    }
    if (m != NULL) {
        op->ipc_offered = 1;
    } else if (rdma) {
        int rc = 0;
        m = pdr__mv_rdma_fetch_msg(eng, s, op, &rc);
        if (m == NULL && eng->backend_forced == PDR__BE_RDMA) {
            pdr__op_complete(eng, op, rc, 0);
            return;
        }
        if (m == NULL)
            pdr_warn("transport: room %llu falls back from rdma to tcp (%s)", (unsigned long long)op->room,
                     pdr_strerror(rc));
    }
    if (m == NULL) {
        size_t len = pdr__xfer_fetch_size((uint32_t)op->nseg);
        m = calloc(1, sizeof(*m));
        uint8_t *buf = malloc(len);
        if (m == NULL || buf == NULL) {
            free(m);
            free(buf);
            pdr__op_complete(eng, op, PDR_ENOMEM, 0);
            return;
        }
        m->data = buf;
        m->len = pdr__xfer_fetch_encode(buf, len, op->room, op->xid, op->total, op->timeout_ms,
                                        op->nseg > 0 ? &op->segs[0].len : NULL, sizeof(pdr_xfer_seg_t),
                                        (uint32_t)op->nseg);
    }
    pdr__cq_append(eng, s->ctl, m);
}

/* The outbound session's HELLO arrived: send the FETCHes that waited for it (its RDMA capability). */
static void pull_flush_hello(pdr_xfer_engine_t *eng, struct pdr__sess *s)
{
    for (;;) {
        struct pdr__op *op;
        pthread_mutex_lock(&eng->lock);
        for (op = s->ops; op != NULL && !op->wait_hello; op = op->snext)
            ;
        if (op != NULL)
            op->wait_hello = 0;
        pthread_mutex_unlock(&eng->lock);
        if (op == NULL)
            return;
        pull_send(eng, s, op);
    }
}

static void tcp_start_pull(pdr_xfer_engine_t *eng, struct pdr__op *op)
{
    int may_rdma = op->total > 0 && (pdr__tcp_st(eng)->me.caps & PDR_XFER_CAP_RDMA) &&
                   (eng->backend_forced == PDR__BE_AUTO || eng->backend_forced == PDR__BE_RDMA);
    if (eng->backend_forced == PDR__BE_RDMA && op->total > 0 && !may_rdma) {
        pdr__op_complete(eng, op, PDR_ENOTSUP, 0); /* no RDMA device here */
        return;
    }
    struct pdr__sess *s = pdr__tcp_st(eng)->sessions;
    while (s != NULL && !(s->outbound && !s->dead && s->ctl != NULL && strcmp(s->peer, op->peer) == 0))
        s = s->next;
    if (s == NULL) {
        int err = 0;
        s = sess_open(eng, op, &err);
        if (s == NULL) {
            pdr__op_complete(eng, op, err, 0);
            return;
        }
    }
    sess_bind(eng, s, op);
    if (may_rdma && s->peer_hello.hostname[0] == '\0' &&
        !(op->dev >= 0 && eng->backend_forced == PDR__BE_AUTO)) {
        op->wait_hello = 1; /* RDMA needs the peer's capability: its HELLO comes within one round trip */
        return;
    }
    pull_send(eng, s, op);
}

/* Kills a session (thread 0): its rooms fail with status, its connections close. */
static void sess_kill(pdr_xfer_engine_t *eng, struct pdr__sess *s, int status)
{
    pthread_mutex_lock(&eng->lock);
    if (s->dead) {
        pthread_mutex_unlock(&eng->lock);
        return;
    }
    s->dead = 1;
    s->status = status;
    pthread_mutex_unlock(&eng->lock);
    struct tcp_state *ts = pdr__tcp_st(eng);
    if (s->prev != NULL)
        s->prev->next = s->next;
    else
        ts->sessions = s->next;
    if (s->next != NULL)
        s->next->prev = s->prev;
    s->next = s->prev = NULL;
    for (;;) {
        pthread_mutex_lock(&eng->lock);
        struct pdr__op *op = s->ops;
        pthread_mutex_unlock(&eng->lock);
        if (op == NULL)
            break;
        pdr__op_complete(eng, op, status, 0);
    }
    if (s->ctl != NULL)
        pdr__conn_fail(eng, s->ctl, status);
    pdr__ipc_map_close(&eng->io[0], s);
    pdr__mv_rdma_link_kill(eng, s);
    rescan_all(eng);    /* the other threads close their connections of s */
    sess_unref(eng, s); /* the list's reference */
}

/* ---- receiving ---- */

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
    struct pdr__sess *s = pdr__tcp_st(eng)->sessions;
    while (s != NULL && !(!s->outbound && s->id == h.session && s->ctl != NULL))
        s = s->next;
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
    rescan_all(eng);
    return 0;
}

/* ---- events ---- */

static void on_accept(pdr_xfer_engine_t *eng)
{
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        int fd = accept4(eng->listen_fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                pdr_warn("transport: accept failed: %s", strerror(errno));
            return;
        }
        tune_socket(eng, fd);
        char host[64] = "?", port[8] = "?";
        getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host), port, sizeof(port),
                    NI_NUMERICHOST | NI_NUMERICSERV);
        char peer[96];
        snprintf(peer, sizeof(peer), "%s:%s", host, port);
        /* Every accepted connection starts on thread 0; a data connection moves after its HELLO. */
        struct pdr__conn *c = conn_new(fd, 0, 0, peer);
        if (c == NULL || conn_attach(&eng->io[0], c) != 0) {
            if (c != NULL) {
                free(c->rbuf);
                free(c);
            }
            close(fd);
        }
    }
}

/* Moves c from thread 0 to thread c->migrate_to; buffered input goes with it. */
static void conn_migrate(pdr_xfer_engine_t *eng, struct pdr__conn *c)
{
    epoll_ctl(c->io->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    conn_unlink(c);
    struct pdr__io *to = &eng->io[c->migrate_to];
    c->migrate_to = -1;
    conn_handoff(eng, to, c);
}

static void conn_service(pdr_xfer_engine_t *eng, struct pdr__conn *c, uint32_t events)
{
    if (c->connecting) {
        int soerr = 0;
        socklen_t sl = sizeof(soerr);
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0)
            soerr = errno;
        if (soerr == 0 && !(events & (EPOLLERR | EPOLLHUP)) && (events & EPOLLOUT)) {
            c->connecting = 0;
            c->last_live_ns = pdr_now_ns();
            pdr__conn_set_events(eng, c, EPOLLIN | EPOLLOUT);
        } else if (soerr != 0 || (events & (EPOLLERR | EPOLLHUP))) {
            /* A data connection's session was up already: its peer went away, it did not refuse. */
            pdr__conn_fail(eng, c, c->index > 0 ? PDR_EPEERGONE : PDR_ECONNREFUSED);
            return;
        } else {
            return;
        }
    }
    if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
        int rc = pdr__conn_read(eng, c);
        if (rc == RX_MIGRATE) {
            conn_migrate(eng, c);
            return;
        }
        if (rc != 0)
            return;
    }
    if (c->cq_head != NULL || c->tx_state != TX_IDLE || (events & EPOLLOUT))
        pdr__conn_flush(eng, c);
}

static void tcp_on_event(pdr_xfer_engine_t *eng, struct pdr__io *io, void *handle, uint32_t events)
{
    (void)io;
    if (handle == &pdr__tcp_st(eng)->listen_tag) {
        on_accept(eng);
        return;
    }
    struct pdr__conn *c = handle;
    if (c->dead)
        return;
    conn_service(eng, c, events);
}

/* An adopted connection: attach it, then process what it already buffered. */
static void conn_adopted(pdr_xfer_engine_t *eng, struct pdr__io *io, struct pdr__conn *c)
{
    if (conn_attach(io, c) != 0) {
        /* Not registered anywhere: count it as dead right away. */
        c->dead = 1;
        close(c->fd);
        c->fd = -1;
        c->next = io->zombies;
        io->zombies = c;
        return;
    }
    if (c->rpos < c->rlen) {
        int rc = pdr__rx_process(eng, c);
        if (rc != 0)
            return;
    }
    if (!c->connecting)
        pdr__conn_flush(eng, c);
}

static int tcp_tick(pdr_xfer_engine_t *eng, struct pdr__io *io, uint64_t now)
{
    pthread_mutex_lock(&eng->lock);
    struct pdr__conn *adopt = io->adopt;
    io->adopt = NULL;
    int rescan = io->rescan;
    io->rescan = 0;
    if (io->idx != 0)
        io->wake_pending = 0;
    struct pdr__sess *dead = NULL;
    if (io->idx == 0) {
        dead = eng->dead_sess;
        eng->dead_sess = NULL;
    }
    pthread_mutex_unlock(&eng->lock);
    while (adopt != NULL) {
        struct pdr__conn *c = adopt;
        adopt = c->next;
        conn_adopted(eng, io, c);
    }
    while (dead != NULL) {
        struct pdr__sess *s = dead;
        dead = s->dnext;
        sess_kill(eng, s, s->status);
        sess_unref(eng, s); /* the dead list's reference */
    }
    uint64_t hb = (uint64_t)eng->opts.heartbeat_ms * 1000000u;
    uint64_t dead_after = (uint64_t)eng->opts.heartbeat_timeout_ms * 1000000u;
    int want = -1;
    if (io->idx == 0 && pdr__tcp_st(eng)->ipc_pending != NULL && pdr__ipc_poll(eng) > 0) {
        want = 0; /* copies in flight: poll them soon */
        io->copy_wait = 1;
    }
    struct pdr__conn *c = io->conns;
    while (c != NULL) {
        struct pdr__conn *next = c->next;
        struct pdr__sess *s = c->sess;
        int sdead = 0, busy = 0;
        if (s != NULL) {
            pthread_mutex_lock(&eng->lock);
            sdead = s->dead;
            busy = s->nops > 0;
            pthread_mutex_unlock(&eng->lock);
        }
        if (sdead) {
            pdr__conn_fail(eng, c, s->status);
            c = next;
            continue;
        }
        if (rescan && !c->connecting && c->tx_state == TX_IDLE && c->cq_head == NULL &&
            pdr__conn_flush(eng, c) != 0) {
            c = next;
            continue;
        }
        /* A paused reader resumes here even if thread 0's quiesce already recycled its ring. */
        if ((c->stg_count > 0 || c->rx_blocked) && pdr__stage_pump(eng, c, &want) != 0) {
            c = next;
            continue;
        }
        if (busy && !c->hb_armed) {
            /* Idle until now: silence counts from here, not from the last room's last byte. */
            c->hb_armed = 1;
            c->last_live_ns = now;
            c->ping_ns = 0;
        }
        c->hb_armed = busy;
        if (busy && !c->connecting) {
            uint64_t quiet = now > c->last_live_ns ? now - c->last_live_ns : 0;
            if (quiet >= dead_after) {
                pdr_warn(
                    "transport: peer %s silent for %llu ms, closing (connection %d on thread %d: rx state "
                    "%d, %llu payload bytes left, tx state %d, staging %zu/%zu busy%s)",
                    c->peer, (unsigned long long)(quiet / 1000000), c->index, io->idx, c->rx_state,
                    (unsigned long long)c->rx_left, c->tx_state, c->stg_count, c->nstg,
                    c->rx_blocked ? ", reading paused" : "");
                pdr__conn_fail(eng, c, PDR_EPEERGONE);
                c = next;
                continue;
            } else if (quiet >= hb && (c->ping_ns == 0 || now - c->ping_ns >= hb)) {
                c->ping_ns = now;
                if (pdr__queue_ctl(eng, c, PDR_XF_PING, 0, 0, 0, 0) != 0) {
                    c = next;
                    continue;
                }
            }
            int ms = (int)(eng->opts.heartbeat_ms / 4) + 1;
            if (want < 0 || ms < want)
                want = ms;
        }
        c = next;
    }
    return want;
}

static void tcp_after_turn(pdr_xfer_engine_t *eng, struct pdr__io *io)
{
    while (io->zombies != NULL) {
        struct pdr__conn *c = io->zombies;
        io->zombies = c->next;
        conn_free(eng, c);
    }
}

static void read_identity(struct pdr_xfer_hello *me)
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

static int tcp_init(pdr_xfer_engine_t *eng)
{
    struct tcp_state *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return PDR_ENOMEM;
    s->listen_tag = PDR__IO_LISTEN;
    pthread_mutex_init(&s->vx_lock, NULL);
    read_identity(&s->me);
    eng->be_state = s;
    const char *host = eng->opts.listen_host;
    if (host == NULL)
        return 0;
    char name[96];
    size_t hlen = strlen(host);
    if (hlen >= sizeof(name))
        return PDR_EINVAL;
    if (host[0] == '[' && hlen > 2 && host[hlen - 1] == ']')
        snprintf(name, sizeof(name), "%.*s", (int)(hlen - 2), host + 1);
    else
        snprintf(name, sizeof(name), "%s", host);
    char port[8];
    snprintf(port, sizeof(port), "%d", eng->opts.listen_port);
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    if (getaddrinfo(name[0] != '\0' ? name : NULL, port, &hints, &res) != 0 || res == NULL) {
        pdr_error("transport: cannot resolve listen address '%s'", host);
        return PDR_EINVAL;
    }
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd >= 0)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (fd < 0 || bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, 512) != 0) {
        pdr_error("transport: cannot listen on %s:%d: %s", host, eng->opts.listen_port, strerror(errno));
        if (fd >= 0)
            close(fd);
        freeaddrinfo(res);
        return PDR_EIO;
    }
    freeaddrinfo(res);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    eng->listen_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                      : ((struct sockaddr_in *)&ss)->sin_port);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &s->listen_tag};
    if (epoll_ctl(eng->io[0].epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        close(fd);
        return PDR_EIO;
    }
    eng->listen_fd = fd;
    return 0;
}

/* After every I/O thread was joined (or before any started): frees everything. */
static void tcp_shutdown(pdr_xfer_engine_t *eng)
{
    struct tcp_state *s = pdr__tcp_st(eng);
    if (s == NULL)
        return;
    for (int i = 0; i < eng->nio; i++) {
        struct pdr__io *io = &eng->io[i];
        while (io->adopt != NULL) {
            struct pdr__conn *c = io->adopt;
            io->adopt = c->next;
            close(c->fd);
            conn_free(eng, c);
        }
        while (io->conns != NULL) {
            struct pdr__conn *c = io->conns;
            conn_unlink(c);
            close(c->fd);
            conn_free(eng, c);
        }
        tcp_after_turn(eng, io);
    }
    while (eng->dead_sess != NULL) {
        struct pdr__sess *d = eng->dead_sess;
        eng->dead_sess = d->dnext;
        sess_unref(eng, d);
    }
    while (s->sessions != NULL) {
        struct pdr__sess *x = s->sessions;
        s->sessions = x->next;
        pdr__ipc_map_close(NULL, x);
        pdr__mv_rdma_link_kill(eng, x);
        sess_unref(eng, x);
    }
    /* Every room is gone: release the registered regions' cached MRs before their context. */
    for (struct pdr_xfer_memreg *m = eng->mem; m != NULL; m = m->next) {
        pdr__rdma_dereg(m->rdma_mr);
        m->rdma_mr = NULL;
    }
    if (s->rdma_ctx != NULL)
        pdr__rdma_close(s->rdma_ctx);
    s->rdma_ctx = NULL;
    pdr__fdsrv_stop(s->fdsrv); /* closes every exported VMM descriptor */
    free(s->vx);
    pthread_mutex_destroy(&s->vx_lock);
    for (int d = 0; d < IPC_MAX_DEVS; d++) {
        if (s->ipc_stream[d] != NULL && pdr__cuda_bind(d) == 0) {
            pdr__cuda_stream_sync(s->ipc_stream[d]);
            pdr__cuda_stream_destroy(s->ipc_stream[d]);
        }
    }
    for (size_t b = 0; b < eng->nbuckets && eng->parked != NULL; b++)
        while (eng->parked[b] != NULL)
            pdr__tomb_del(eng, eng->parked[b]);
    if (eng->listen_fd >= 0) {
        close(eng->listen_fd);
        eng->listen_fd = -1;
    }
    free(s);
    eng->be_state = NULL;
}

const struct pdr_xfer_backend_ops pdr__tcp_backend = {
    .name = "tcp",
    .supports_mem = tcp_supports_mem,
    .init = tcp_init,
    .start_push = tcp_start_push,
    .start_pull = tcp_start_pull,
    .abort = pdr__tcp_abort,
    .quiesce = pdr__tcp_quiesce,
    .ready = pdr__tcp_ready,
    .on_event = tcp_on_event,
    .tick = tcp_tick,
    .parked_expired = pdr__tcp_parked_expired,
    .after_turn = tcp_after_turn,
    .shutdown = tcp_shutdown,
    .mem_unregistered = pdr__tcp_mem_unregistered,
};
