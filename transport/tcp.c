/*
 * The TCP backend: the listener, one connection per peer session, and the per-connection receive and
 * send state machines. Runs entirely on the engine's I/O thread (every function here).
 *
 * Invariants:
 *  - Frames are never interleaved: a DATA frame, once started, is finished even if its room fails
 *    (the rest of its payload is sent as zeros and an ERROR/CANCEL frame follows), and a received DATA
 *    frame whose room failed is read to its end into a scratch buffer. So a failed room never breaks
 *    the framing of the connection, and only a malformed frame (PDR_EPROTO) or I/O error closes it.
 *  - Memory per connection is bounded: a 64 KiB receive buffer, one control body of at most the FETCH
 *    descriptor limit, and a control-frame queue of a few frames per pending room. Payload goes
 *    straight between the socket and the room's segments (readv/sendmsg), never through a copy
 *    proportional to the room size.
 *  - Nothing here calls back into a connection after conn_fail(): functions that can fail a
 *    connection return -1 and their callers stop touching it. Failed connections are freed at the end
 *    of the loop turn (after_turn), when no event of this turn can still point at them.
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
#include "err.h"
#include "transport_internal.h"
#include "util.h"

#define RBUF_CAP (64u << 10)
#define MAX_IOV 64
#define IO_BUDGET (8u << 20) /* bytes per connection per loop turn, for fairness */

static const uint8_t zeros[64 << 10];

struct ctl_msg {
    struct ctl_msg *next;
    size_t len;
    uint8_t *data; /* inl, or a heap buffer for FETCH */
    uint8_t inl[PDR_XFER_HDR_LEN + 16];
};

enum { RX_HDR = 0, RX_DATAPFX, RX_BODY, RX_PAYLOAD };
enum { TX_IDLE = 0, TX_CTL, TX_DATA };

struct pdr__conn {
    int tag; /* PDR__IO_CONN: first, see epoll data.ptr */
    struct pdr__conn *next, *prev;
    int fd;
    int connecting;
    int outbound;
    int dead;
    uint32_t evmask;
    char peer[96];

    uint8_t *rbuf;
    size_t rpos, rlen;
    int rx_state;
    struct pdr_xfer_hdr rh;
    uint8_t *body;
    size_t body_len, body_got;
    uint8_t body_inl[64];
    struct pdr__op *rx_op; /* NULL while discarding the payload of a failed/unknown room */
    uint64_t rx_left;

    struct ctl_msg *cq_head, *cq_tail;
    struct pdr__op *p_head, *p_tail;
    int tx_state;
    struct ctl_msg *tx_ctl;
    size_t tx_sent;
    uint8_t tx_hdr[PDR_XFER_HDR_LEN + PDR_XFER_DATA_PFX];
    struct pdr__op *tx_op; /* NULL: the frame's room failed, the rest is zeros */
    uint64_t tx_left;

    struct pdr__op *ops;
    struct pdr__parked *parked;
    uint64_t last_live_ns; /* last byte received or DATA payload accepted by the kernel */
    uint64_t ping_ns;
};

struct tcp_state {
    int listen_tag;
    struct pdr__conn *conns;
    struct pdr__conn *zombies;
};

static struct tcp_state *st(pdr_xfer_engine_t *eng)
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

static void conn_set_events(pdr_xfer_engine_t *eng, struct pdr__conn *c, uint32_t mask)
{
    if (c->dead || c->evmask == mask)
        return;
    struct epoll_event ev = {.events = mask, .data.ptr = c};
    if (epoll_ctl(eng->epfd, EPOLL_CTL_MOD, c->fd, &ev) == 0)
        c->evmask = mask;
}

/* Asks for EPOLLOUT; the frames go out on the next loop turn (never re-entrantly). */
static void conn_kick(pdr_xfer_engine_t *eng, struct pdr__conn *c)
{
    conn_set_events(eng, c, EPOLLIN | EPOLLOUT);
}

static struct pdr__conn *conn_new(pdr_xfer_engine_t *eng, int fd, int outbound, int connecting,
                                  const char *peer)
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
    c->last_live_ns = pdr_now_ns();
    snprintf(c->peer, sizeof(c->peer), "%s", peer);
    c->evmask = connecting ? EPOLLOUT : EPOLLIN;
    struct epoll_event ev = {.events = c->evmask, .data.ptr = c};
    if (epoll_ctl(eng->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        free(rbuf);
        free(c);
        return NULL;
    }
    struct tcp_state *s = st(eng);
    c->next = s->conns;
    if (s->conns != NULL)
        s->conns->prev = c;
    s->conns = c;
    return c;
}

static void ctl_free_all(struct ctl_msg *m)
{
    while (m != NULL) {
        struct ctl_msg *n = m->next;
        if (m->data != m->inl)
            free(m->data);
        free(m);
        m = n;
    }
}

static void conn_free(struct pdr__conn *c)
{
    ctl_free_all(c->cq_head);
    ctl_free_all(c->tx_ctl);
    if (c->body != NULL && c->body != c->body_inl)
        free(c->body);
    free(c->rbuf);
    free(c);
}

/* Closes the connection and fails everything bound to it with status. */
static void conn_fail(pdr_xfer_engine_t *eng, struct pdr__conn *c, int status)
{
    if (c->dead)
        return;
    c->dead = 1;
    if (status == PDR_EPROTO)
        pdr_warn("transport: protocol error from peer %s, closing the connection", c->peer);
    epoll_ctl(eng->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
    struct tcp_state *s = st(eng);
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    c->prev = NULL;
    c->next = s->zombies;
    s->zombies = c;
    while (c->ops != NULL)
        pdr__op_complete(eng, c->ops, status, 0);
    while (c->parked != NULL) {
        struct pdr__parked *p = c->parked;
        c->parked = p->cnext;
        pdr__parked_remove(eng, p);
        free(p);
    }
}

/* ---- control frames ---- */

static int queue_ctl(pdr_xfer_engine_t *eng, struct pdr__conn *c, uint8_t type, uint64_t room, uint64_t xid,
                     uint64_t value, int32_t code)
{
    if (c->dead)
        return 0;
    struct ctl_msg *m = calloc(1, sizeof(*m));
    if (m == NULL) {
        /* The peer would wait for a frame that never comes: fail the session rather than hang it. */
        conn_fail(eng, c, PDR_ENOMEM);
        return -1;
    }
    m->data = m->inl;
    m->len = pdr__xfer_ctl_encode(m->inl, type, room, xid, value, code);
    if (c->cq_tail != NULL)
        c->cq_tail->next = m;
    else
        c->cq_head = m;
    c->cq_tail = m;
    if (!c->connecting)
        conn_kick(eng, c);
    return 0;
}

/* ---- segment cursors ---- */

/* Fills iov with up to max bytes of op's segments from its cursor. Returns the iov count. */
static int seg_iov(struct pdr__op *op, uint64_t max, struct iovec *iov, int maxiov)
{
    int n = 0;
    size_t s = op->cur_seg, off = op->cur_off;
    while (max > 0 && n < maxiov && s < op->nseg) {
        size_t avail = op->segs[s].len - off;
        if (avail == 0) {
            s++;
            off = 0;
            continue;
        }
        size_t take = avail < max ? avail : (size_t)max;
        iov[n].iov_base = (uint8_t *)op->segs[s].addr + off;
        iov[n].iov_len = take;
        n++;
        max -= take;
        s++;
        off = 0;
    }
    return n;
}

static void seg_advance(struct pdr__op *op, uint64_t n)
{
    op->pos += n;
    while (n > 0 && op->cur_seg < op->nseg) {
        size_t avail = op->segs[op->cur_seg].len - op->cur_off;
        if (n < avail) {
            op->cur_off += (size_t)n;
            return;
        }
        n -= avail;
        op->cur_seg++;
        op->cur_off = 0;
    }
}

/* ---- binding ops to connections ---- */

static void conn_bind(struct pdr__conn *c, struct pdr__op *op)
{
    op->conn = c;
    op->cprev = NULL;
    op->cnext = c->ops;
    if (c->ops != NULL)
        c->ops->cprev = op;
    c->ops = op;
}

static void push_list_add(struct pdr__conn *c, struct pdr__op *op)
{
    op->in_push_list = 1;
    op->pnext = NULL;
    op->pprev = c->p_tail;
    if (c->p_tail != NULL)
        c->p_tail->pnext = op;
    else
        c->p_head = op;
    c->p_tail = op;
}

static void push_list_del(struct pdr__conn *c, struct pdr__op *op)
{
    if (!op->in_push_list)
        return;
    op->in_push_list = 0;
    if (op->pprev != NULL)
        op->pprev->pnext = op->pnext;
    else
        c->p_head = op->pnext;
    if (op->pnext != NULL)
        op->pnext->pprev = op->pprev;
    else
        c->p_tail = op->pprev;
    op->pnext = op->pprev = NULL;
}

/* After a DATA frame of op (or at the start): more data, or DONE. */
static int push_schedule(pdr_xfer_engine_t *eng, struct pdr__conn *c, struct pdr__op *op)
{
    if (op->pos < op->total) {
        push_list_add(c, op);
        conn_kick(eng, c);
        return 0;
    }
    op->state = PDR__OP_DRAINED;
    return queue_ctl(eng, c, PDR_XF_DONE, op->room, op->xid, op->total, 0);
}

/* Serves a FETCH (xid, total) of op's room from connection c. */
static void push_match(pdr_xfer_engine_t *eng, struct pdr__op *op, struct pdr__conn *c, uint64_t xid,
                       uint64_t total)
{
    if (total != op->total) {
        if (queue_ctl(eng, c, PDR_XF_ERROR, op->room, xid, 0, PDR_ESIZE) != 0)
            return;
        pdr__op_complete(eng, op, PDR_ESIZE, 0);
        return;
    }
    op->xid = xid;
    op->state = PDR__OP_ACTIVE;
    conn_bind(c, op);
    push_schedule(eng, c, op);
}

static void tomb_add(pdr_xfer_engine_t *eng, uint64_t room, int code, int push, uint32_t keep_ms)
{
    if (eng->nparked >= eng->opts.max_rooms || pdr__parked_find(eng, room) != NULL)
        return;
    struct pdr__parked *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return; /* best effort: a late FETCH then waits for its own deadline */
    p->timer.idx = SIZE_MAX;
    p->timer.what = PDR__TIMER_PARKED;
    p->room = room;
    p->tomb_code = code;
    p->tomb_push = push;
    if (keep_ms > 60000)
        keep_ms = 60000;
    if (pdr__timer_arm(eng, &p->timer, pdr_now_ns() + (uint64_t)keep_ms * 1000000u) != 0) {
        free(p);
        return;
    }
    pdr__parked_insert(eng, p);
}

static void tomb_del(pdr_xfer_engine_t *eng, struct pdr__parked *p)
{
    pdr__parked_remove(eng, p);
    free(p);
}

static void tcp_start_push(pdr_xfer_engine_t *eng, struct pdr__op *op)
{
    struct pdr__parked *p = pdr__parked_find(eng, op->room);
    if (p != NULL && p->tomb_code != 0) {
        int code = p->tomb_push ? 0 : p->tomb_code;
        tomb_del(eng, p); /* a new push of the room replaces the memory of the old one */
        if (code != 0) {
            pdr__op_complete(eng, op, code, 0); /* its decode already gave up */
            return;
        }
        p = NULL;
    }
    if (p == NULL)
        return; /* waits for a FETCH until its deadline */
    struct pdr__conn *c = p->conn;
    uint64_t xid = p->xid, total = p->total;
    if (p->cprev != NULL)
        p->cprev->cnext = p->cnext;
    else
        c->parked = p->cnext;
    if (p->cnext != NULL)
        p->cnext->cprev = p->cprev;
    pdr__parked_remove(eng, p);
    free(p);
    push_match(eng, op, c, xid, total);
}

static struct pdr__conn *conn_connect(pdr_xfer_engine_t *eng, struct pdr__op *op, int *err)
{
    int fd = socket(op->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        *err = errno == EMFILE || errno == ENFILE || errno == ENOMEM ? PDR_ENOMEM : PDR_EIO;
        return NULL;
    }
    tune_socket(eng, fd);
    int connecting = 0;
    if (connect(fd, (struct sockaddr *)&op->addr, op->addrlen) != 0) {
        if (errno != EINPROGRESS) {
            *err = PDR_ECONNREFUSED;
            close(fd);
            return NULL;
        }
        connecting = 1;
    }
    struct pdr__conn *c = conn_new(eng, fd, 1, connecting, op->peer);
    if (c == NULL) {
        close(fd);
        *err = PDR_ENOMEM;
    }
    return c;
}

static void tcp_start_pull(pdr_xfer_engine_t *eng, struct pdr__op *op)
{
    struct pdr__conn *c = st(eng)->conns;
    while (c != NULL && !(c->outbound && strcmp(c->peer, op->peer) == 0))
        c = c->next;
    if (c == NULL) {
        int err = 0;
        c = conn_connect(eng, op, &err);
        if (c == NULL) {
            pdr__op_complete(eng, op, err, 0);
            return;
        }
    }
    size_t len = pdr__xfer_fetch_size((uint32_t)op->nseg);
    struct ctl_msg *m = calloc(1, sizeof(*m));
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
    conn_bind(c, op);
    if (c->cq_tail != NULL)
        c->cq_tail->next = m;
    else
        c->cq_head = m;
    c->cq_tail = m;
    if (!c->connecting)
        conn_kick(eng, c);
}

static void tcp_abort(pdr_xfer_engine_t *eng, struct pdr__op *op, int notify_code)
{
    struct pdr__conn *c = op->conn;
    if (c == NULL) {
        if (op->kind == PDR__OP_PUSH && op->state == PDR__OP_WAITING && notify_code != 0)
            tomb_add(eng, op->room, notify_code, 1, op->timeout_ms);
        return;
    }
    if (c->rx_op == op)
        c->rx_op = NULL;
    if (c->tx_op == op)
        c->tx_op = NULL;
    push_list_del(c, op);
    if (op->cprev != NULL)
        op->cprev->cnext = op->cnext;
    else
        c->ops = op->cnext;
    if (op->cnext != NULL)
        op->cnext->cprev = op->cprev;
    op->cnext = op->cprev = NULL;
    op->conn = NULL;
    if (notify_code != 0 && !c->dead) {
        if (notify_code == PDR_ECANCELED)
            queue_ctl(eng, c, PDR_XF_CANCEL, op->room, op->xid, 0, 0);
        else
            queue_ctl(eng, c, PDR_XF_ERROR, op->room, op->xid, 0, notify_code);
    }
}

/* ---- receiving ---- */

/* The pull op of (room, xid) on c, or NULL. */
static struct pdr__op *find_pull(pdr_xfer_engine_t *eng, struct pdr__conn *c, uint64_t room, uint64_t xid)
{
    pthread_mutex_lock(&eng->lock);
    struct pdr__op *op = pdr__room_find(eng, room, PDR__OP_PULL);
    pthread_mutex_unlock(&eng->lock);
    return op != NULL && op->conn == c && op->xid == xid ? op : NULL;
}

static struct pdr__op *find_push(pdr_xfer_engine_t *eng, struct pdr__conn *c, uint64_t room, uint64_t xid)
{
    pthread_mutex_lock(&eng->lock);
    struct pdr__op *op = pdr__room_find(eng, room, PDR__OP_PUSH);
    pthread_mutex_unlock(&eng->lock);
    return op != NULL && op->conn == c && op->xid == xid ? op : NULL;
}

static int on_fetch(pdr_xfer_engine_t *eng, struct pdr__conn *c, uint64_t room, const uint8_t *body,
                    size_t len)
{
    struct pdr_xfer_fetch_desc d;
    if (pdr__xfer_fetch_decode(body, len, &d) != 0) {
        conn_fail(eng, c, PDR_EPROTO);
        return -1;
    }
    pthread_mutex_lock(&eng->lock);
    struct pdr__op *op = pdr__room_find(eng, room, PDR__OP_PUSH);
    pthread_mutex_unlock(&eng->lock);
    if (op != NULL && op->state == PDR__OP_WAITING) {
        push_match(eng, op, c, d.xid, d.total);
        return c->dead ? -1 : 0;
    }
    struct pdr__parked *t = pdr__parked_find(eng, room);
    if (t != NULL && t->tomb_code != 0) {
        int code = t->tomb_code, push = t->tomb_push;
        tomb_del(eng, t);
        if (op == NULL && push) {
            if (code == PDR_ECANCELED)
                return queue_ctl(eng, c, PDR_XF_CANCEL, room, d.xid, 0, 0);
            return queue_ctl(eng, c, PDR_XF_ERROR, room, d.xid, 0, code);
        }
        /* Re-offered (still queued): park the fetch for the new push. */
    }
    if ((op != NULL && op->state != PDR__OP_QUEUED) || pdr__parked_find(eng, room) != NULL)
        return queue_ctl(eng, c, PDR_XF_ERROR, room, d.xid, 0, PDR_EEXIST); /* another decode has it */
    if (eng->nparked >= eng->opts.max_rooms)
        return queue_ctl(eng, c, PDR_XF_ERROR, room, d.xid, 0, PDR_ETOOBIG);
    struct pdr__parked *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return queue_ctl(eng, c, PDR_XF_ERROR, room, d.xid, 0, PDR_ENOMEM);
    p->timer.idx = SIZE_MAX;
    p->timer.what = PDR__TIMER_PARKED;
    p->room = room;
    p->xid = d.xid;
    p->total = d.total;
    p->conn = c;
    /* The decode enforces its own deadline; ours only bounds how long we remember it (+1 s slack). */
    uint32_t keep = d.timeout_ms != 0 && d.timeout_ms < 3600000 ? d.timeout_ms : eng->opts.default_timeout_ms;
    if (pdr__timer_arm(eng, &p->timer, pdr_now_ns() + ((uint64_t)keep + 1000) * 1000000u) != 0) {
        free(p);
        return queue_ctl(eng, c, PDR_XF_ERROR, room, d.xid, 0, PDR_ETOOBIG);
    }
    pdr__parked_insert(eng, p);
    p->cnext = c->parked;
    if (c->parked != NULL)
        c->parked->cprev = p;
    c->parked = p;
    return queue_ctl(eng, c, PDR_XF_WAIT, room, d.xid, 0, 0);
}

/* The decode of a parked fetch canceled it or gave up (code): remember that for a late push. */
static void drop_parked(pdr_xfer_engine_t *eng, struct pdr__conn *c, uint64_t room, uint64_t xid, int code)
{
    struct pdr__parked *p = pdr__parked_find(eng, room);
    if (p == NULL || p->conn != c || p->xid != xid)
        return;
    if (p->cprev != NULL)
        p->cprev->cnext = p->cnext;
    else
        c->parked = p->cnext;
    if (p->cnext != NULL)
        p->cnext->cprev = p->cprev;
    pdr__parked_remove(eng, p);
    free(p);
    if (code != 0)
        tomb_add(eng, room, code, 0, eng->opts.default_timeout_ms);
}

/* A complete control frame (not DATA). */
static int on_ctl(pdr_xfer_engine_t *eng, struct pdr__conn *c, const struct pdr_xfer_hdr *h,
                  const uint8_t *body)
{
    if (h->type == PDR_XF_FETCH)
        return on_fetch(eng, c, h->room, body, (size_t)h->len);
    struct pdr_xfer_ctl m;
    if (pdr__xfer_ctl_decode(h->type, body, (size_t)h->len, &m) != 0) {
        conn_fail(eng, c, PDR_EPROTO);
        return -1;
    }
    struct pdr__op *op;
    switch (h->type) {
    case PDR_XF_PING:
        return queue_ctl(eng, c, PDR_XF_PONG, 0, 0, 0, 0);
    case PDR_XF_PONG:
        return 0;
    case PDR_XF_WAIT:
        op = find_pull(eng, c, h->room, m.xid);
        if (op != NULL && op->state == PDR__OP_WAITING)
            op->state = PDR__OP_PARKED;
        return 0;
    case PDR_XF_DONE:
        op = find_pull(eng, c, h->room, m.xid);
        if (op == NULL)
            return 0; /* a room we already failed */
        if (op->pos != op->total || m.value != op->total) {
            conn_fail(eng, c, PDR_EPROTO);
            return -1;
        }
        if (queue_ctl(eng, c, PDR_XF_ACK, op->room, op->xid, op->total, 0) != 0)
            return -1;
        pdr__op_complete(eng, op, 0, 0);
        return 0;
    case PDR_XF_ACK:
        op = find_push(eng, c, h->room, m.xid);
        if (op == NULL)
            return 0;
        if (op->state != PDR__OP_DRAINED || m.value != op->total) {
            conn_fail(eng, c, PDR_EPROTO);
            return -1;
        }
        pdr__op_complete(eng, op, 0, 0);
        return 0;
    case PDR_XF_ERROR:
    case PDR_XF_CANCEL: {
        int code = h->type == PDR_XF_CANCEL ? PDR_ECANCELED : m.code;
        if ((op = find_pull(eng, c, h->room, m.xid)) != NULL)
            pdr__op_complete(eng, op, code, 0);
        else if ((op = find_push(eng, c, h->room, m.xid)) != NULL)
            pdr__op_complete(eng, op, code, 0);
        else
            drop_parked(eng, c, h->room, m.xid, code);
        return 0;
    }
    default:
        conn_fail(eng, c, PDR_EPROTO);
        return -1;
    }
}

/* The 16-byte DATA prefix arrived: find the destination and check the offset. */
static int on_data_start(pdr_xfer_engine_t *eng, struct pdr__conn *c, const uint8_t *pfx)
{
    uint64_t xid, offset;
    pdr__xfer_data_pfx_decode(pfx, &xid, &offset);
    uint64_t n = c->rh.len - PDR_XFER_DATA_PFX;
    struct pdr__op *op = find_pull(eng, c, c->rh.room, xid);
    c->rx_left = n;
    c->rx_op = NULL;
    if (op == NULL)
        return 0; /* a room failed or canceled here: discard its payload */
    if (op->state == PDR__OP_DRAINED || offset != op->pos || n > op->total - op->pos) {
        conn_fail(eng, c, PDR_EPROTO);
        return -1;
    }
    op->state = PDR__OP_ACTIVE;
    c->rx_op = op;
    return 0;
}

/* Consumes buffered bytes. Returns 0 when it needs more input, -1 when the connection died. */
static int rx_process(pdr_xfer_engine_t *eng, struct pdr__conn *c)
{
    for (;;) {
        size_t avail = c->rlen - c->rpos;
        const uint8_t *p = c->rbuf + c->rpos;
        switch (c->rx_state) {
        case RX_HDR:
            if (avail < PDR_XFER_HDR_LEN)
                return 0;
            if (pdr__xfer_hdr_decode(p, &c->rh) != 0) {
                conn_fail(eng, c, PDR_EPROTO);
                return -1;
            }
            c->rpos += PDR_XFER_HDR_LEN;
            if (c->rh.type == PDR_XF_DATA) {
                c->rx_state = RX_DATAPFX;
            } else if (c->rh.len == 0) {
                if (on_ctl(eng, c, &c->rh, c->body_inl) != 0)
                    return -1;
            } else {
                c->body_len = (size_t)c->rh.len;
                c->body_got = 0;
                c->body = c->body_len <= sizeof(c->body_inl) ? c->body_inl : malloc(c->body_len);
                if (c->body == NULL) {
                    conn_fail(eng, c, PDR_ENOMEM);
                    return -1;
                }
                c->rx_state = RX_BODY;
            }
            break;
        case RX_DATAPFX:
            if (avail < PDR_XFER_DATA_PFX)
                return 0;
            c->rpos += PDR_XFER_DATA_PFX;
            if (on_data_start(eng, c, p) != 0)
                return -1;
            c->rx_state = c->rx_left > 0 ? RX_PAYLOAD : RX_HDR;
            break;
        case RX_BODY: {
            if (avail == 0)
                return 0;
            size_t take = c->body_len - c->body_got;
            if (take > avail)
                take = avail;
            memcpy(c->body + c->body_got, p, take);
            c->body_got += take;
            c->rpos += take;
            if (c->body_got == c->body_len) {
                uint8_t *body = c->body;
                c->body = NULL;
                c->rx_state = RX_HDR;
                int rc = on_ctl(eng, c, &c->rh, body);
                if (body != c->body_inl)
                    free(body);
                if (rc != 0)
                    return -1;
            }
            break;
        }
        case RX_PAYLOAD: {
            if (avail == 0)
                return 0;
            size_t take = c->rx_left < avail ? (size_t)c->rx_left : avail;
            if (c->rx_op != NULL) {
                struct iovec iov[MAX_IOV];
                size_t done = 0;
                while (done < take) {
                    int n = seg_iov(c->rx_op, take - done, iov, MAX_IOV);
                    for (int i = 0; i < n; i++) {
                        memcpy(iov[i].iov_base, p + done, iov[i].iov_len);
                        done += iov[i].iov_len;
                        seg_advance(c->rx_op, iov[i].iov_len);
                    }
                }
            }
            c->rpos += take;
            c->rx_left -= take;
            if (c->rx_left == 0)
                c->rx_state = RX_HDR;
            break;
        }
        }
    }
}

static int conn_read(pdr_xfer_engine_t *eng, struct pdr__conn *c)
{
    size_t budget = IO_BUDGET;
    while (budget > 0) {
        ssize_t n;
        if (c->rx_state == RX_PAYLOAD && c->rpos == c->rlen) {
            /* Straight from the socket into the room's memory. */
            if (c->rx_op != NULL) {
                struct iovec iov[MAX_IOV];
                int cnt = seg_iov(c->rx_op, c->rx_left, iov, MAX_IOV);
                n = readv(c->fd, iov, cnt);
            } else {
                n = read(c->fd, c->rbuf, c->rx_left < RBUF_CAP ? (size_t)c->rx_left : RBUF_CAP);
            }
            if (n > 0) {
                if (c->rx_op != NULL)
                    seg_advance(c->rx_op, (uint64_t)n);
                c->rx_left -= (uint64_t)n;
                if (c->rx_left == 0)
                    c->rx_state = RX_HDR;
            }
        } else {
            if (c->rpos > 0 && c->rpos == c->rlen)
                c->rpos = c->rlen = 0;
            if (c->rlen == RBUF_CAP || (c->rpos > 0 && RBUF_CAP - c->rlen < PDR_XFER_HDR_LEN + 16)) {
                memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
                c->rlen -= c->rpos;
                c->rpos = 0;
            }
            n = read(c->fd, c->rbuf + c->rlen, RBUF_CAP - c->rlen);
            if (n > 0) {
                c->rlen += (size_t)n;
                c->last_live_ns = pdr_now_ns();
                c->ping_ns = 0;
                if (rx_process(eng, c) != 0)
                    return -1;
            }
        }
        if (n == 0) {
            conn_fail(eng, c, PDR_EPEERGONE);
            return -1;
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            conn_fail(eng, c, PDR_EPEERGONE);
            return -1;
        }
        c->last_live_ns = pdr_now_ns();
        c->ping_ns = 0;
        budget = (size_t)n < budget ? budget - (size_t)n : 0;
    }
    return 0;
}

/* ---- sending ---- */

static int conn_flush(pdr_xfer_engine_t *eng, struct pdr__conn *c)
{
    size_t budget = IO_BUDGET;
    while (budget > 0) {
        if (c->tx_state == TX_IDLE) {
            if (c->cq_head != NULL) {
                c->tx_ctl = c->cq_head;
                c->cq_head = c->tx_ctl->next;
                if (c->cq_head == NULL)
                    c->cq_tail = NULL;
                c->tx_ctl->next = NULL;
                c->tx_state = TX_CTL;
            } else if (c->p_head != NULL) {
                struct pdr__op *op = c->p_head;
                push_list_del(c, op);
                uint64_t n = op->total - op->pos;
                if (n > eng->opts.chunk_bytes)
                    n = eng->opts.chunk_bytes;
                pdr__xfer_data_hdr_encode(c->tx_hdr, op->room, op->xid, op->pos, n);
                c->tx_op = op;
                c->tx_left = n;
                c->tx_state = TX_DATA;
            } else {
                conn_set_events(eng, c, EPOLLIN);
                return 0;
            }
            c->tx_sent = 0;
        }
        struct iovec iov[MAX_IOV + 1];
        int cnt = 0;
        size_t hdr_left = 0;
        if (c->tx_state == TX_CTL) {
            iov[cnt].iov_base = c->tx_ctl->data + c->tx_sent;
            iov[cnt++].iov_len = c->tx_ctl->len - c->tx_sent;
        } else {
            if (c->tx_sent < sizeof(c->tx_hdr)) {
                hdr_left = sizeof(c->tx_hdr) - c->tx_sent;
                iov[cnt].iov_base = c->tx_hdr + c->tx_sent;
                iov[cnt++].iov_len = hdr_left;
            }
            if (c->tx_op != NULL) {
                cnt += seg_iov(c->tx_op, c->tx_left, iov + cnt, MAX_IOV);
            } else if (c->tx_left > 0) {
                iov[cnt].iov_base = (void *)zeros;
                iov[cnt++].iov_len = c->tx_left < sizeof(zeros) ? (size_t)c->tx_left : sizeof(zeros);
            }
        }
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)cnt};
        ssize_t n = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                conn_set_events(eng, c, EPOLLIN | EPOLLOUT);
                return 0;
            }
            conn_fail(eng, c, PDR_EPEERGONE);
            return -1;
        }
        budget = (size_t)n < budget ? budget - (size_t)n : 0;
        size_t sent = (size_t)n;
        if (c->tx_state == TX_CTL) {
            c->tx_sent += sent;
            if (c->tx_sent == c->tx_ctl->len) {
                ctl_free_all(c->tx_ctl);
                c->tx_ctl = NULL;
                c->tx_state = TX_IDLE;
            }
            continue;
        }
        size_t h = sent < hdr_left ? sent : hdr_left;
        c->tx_sent += h;
        sent -= h;
        if (sent > 0) {
            c->last_live_ns = pdr_now_ns(); /* the peer's window is open: it is reading */
            if (c->tx_op != NULL)
                seg_advance(c->tx_op, sent);
            c->tx_left -= sent;
        }
        if (c->tx_sent == sizeof(c->tx_hdr) && c->tx_left == 0) {
            struct pdr__op *op = c->tx_op;
            c->tx_op = NULL;
            c->tx_state = TX_IDLE;
            if (op != NULL && push_schedule(eng, c, op) != 0)
                return -1;
        }
    }
    conn_kick(eng, c); /* budget spent: come back next turn */
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
        if (conn_new(eng, fd, 0, 0, peer) == NULL)
            close(fd);
    }
}

static void tcp_on_event(pdr_xfer_engine_t *eng, void *handle, uint32_t events)
{
    if (handle == &st(eng)->listen_tag) {
        on_accept(eng);
        return;
    }
    struct pdr__conn *c = handle;
    if (c->dead)
        return;
    if (c->connecting) {
        int soerr = 0;
        socklen_t sl = sizeof(soerr);
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0)
            soerr = errno;
        if (soerr == 0 && !(events & (EPOLLERR | EPOLLHUP)) && (events & EPOLLOUT)) {
            c->connecting = 0;
            c->last_live_ns = pdr_now_ns();
            conn_set_events(eng, c, EPOLLIN | EPOLLOUT);
        } else if (soerr != 0 || (events & (EPOLLERR | EPOLLHUP))) {
            conn_fail(eng, c, PDR_ECONNREFUSED);
            return;
        } else {
            return;
        }
    }
    if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
        if (conn_read(eng, c) != 0)
            return;
    }
    if (c->cq_head != NULL || c->p_head != NULL || c->tx_state != TX_IDLE)
        conn_flush(eng, c);
    else
        conn_set_events(eng, c, EPOLLIN);
}

static int tcp_tick(pdr_xfer_engine_t *eng, uint64_t now)
{
    uint64_t hb = (uint64_t)eng->opts.heartbeat_ms * 1000000u;
    uint64_t dead_after = (uint64_t)eng->opts.heartbeat_timeout_ms * 1000000u;
    int want = -1;
    struct pdr__conn *c = st(eng)->conns;
    while (c != NULL) {
        struct pdr__conn *next = c->next;
        if (c->ops != NULL && !c->connecting) {
            uint64_t quiet = now > c->last_live_ns ? now - c->last_live_ns : 0;
            if (quiet >= dead_after) {
                pdr_warn("transport: peer %s silent for %llu ms, closing", c->peer,
                         (unsigned long long)(quiet / 1000000));
                conn_fail(eng, c, PDR_EPEERGONE);
            } else if (quiet >= hb && (c->ping_ns == 0 || now - c->ping_ns >= hb)) {
                c->ping_ns = now;
                queue_ctl(eng, c, PDR_XF_PING, 0, 0, 0, 0);
            }
            int ms = (int)(eng->opts.heartbeat_ms / 4) + 1;
            if (want < 0 || ms < want)
                want = ms;
        }
        c = next;
    }
    return want;
}

static void tcp_parked_expired(pdr_xfer_engine_t *eng, struct pdr__parked *p)
{
    if (p->tomb_code != 0)
        tomb_del(eng, p);
    else
        drop_parked(eng, p->conn, p->room, p->xid, 0);
}

static void tcp_after_turn(pdr_xfer_engine_t *eng)
{
    struct tcp_state *s = st(eng);
    while (s->zombies != NULL) {
        struct pdr__conn *c = s->zombies;
        s->zombies = c->next;
        conn_free(c);
    }
}

static int tcp_init(pdr_xfer_engine_t *eng)
{
    struct tcp_state *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return PDR_ENOMEM;
    s->listen_tag = PDR__IO_LISTEN;
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
    if (epoll_ctl(eng->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        close(fd);
        return PDR_EIO;
    }
    eng->listen_fd = fd;
    return 0;
}

static void tcp_shutdown(pdr_xfer_engine_t *eng)
{
    struct tcp_state *s = st(eng);
    if (s == NULL)
        return;
    while (s->conns != NULL)
        conn_fail(eng, s->conns, PDR_ECLOSED);
    tcp_after_turn(eng);
    for (size_t b = 0; b < eng->nbuckets && eng->parked != NULL; b++)
        while (eng->parked[b] != NULL)
            tomb_del(eng, eng->parked[b]); /* only tombstones are left: parked fetches died with their conn */
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
    .abort = tcp_abort,
    .on_event = tcp_on_event,
    .tick = tcp_tick,
    .parked_expired = tcp_parked_expired,
    .after_turn = tcp_after_turn,
    .shutdown = tcp_shutdown,
};
