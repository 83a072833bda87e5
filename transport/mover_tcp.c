/*
 * The TCP data mover: the frame reader and writer of a connection. DATA payload goes straight between
 * the socket and the room's memory (readv/sendmsg), or through the staging ring (mover_staging.c) for
 * device memory; control frames are read here and handed to ctl.c. Runs on the I/O thread that owns
 * the connection.
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

static const uint8_t zeros[64 << 10];

/* ---- segment cursors ---- */

/* Fills iov with up to max bytes of the segments segs (room offsets cum) from room offset off. */
static int segs_iov_at(const pdr_xfer_seg_t *segs, const uint64_t *cum, size_t nseg, uint64_t off,
                       uint64_t max, struct iovec *iov, int maxiov)
{
    /* The segment holding off: the last s with cum[s] <= off (skipping empty segments). */
    size_t lo = 0, hi = nseg;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (cum[mid] <= off)
            lo = mid;
        else
            hi = mid;
    }
    int n = 0;
    size_t s = lo;
    while (max > 0 && n < maxiov && s < nseg) {
        uint64_t start = cum[s], end = cum[s + 1];
        if (off >= end) {
            s++;
            continue;
        }
        uint64_t in = off - start, avail = end - off;
        size_t take = avail < max ? (size_t)avail : (size_t)max;
        iov[n].iov_base = (uint8_t *)segs[s].addr + in;
        iov[n].iov_len = take;
        n++;
        max -= take;
        off += take;
        s++;
    }
    return n;
}

/* Fills iov with up to max bytes of op's memory from room offset off. Returns the iov count. */
int pdr__seg_iov_at(const struct pdr__op *op, uint64_t off, uint64_t max, struct iovec *iov, int maxiov)
{
    return segs_iov_at(op->segs, op->cum, op->nseg, off, max, iov, maxiov);
}

int pdr__src_iov_at(const struct pdr__op *op, const struct pdr__part *part, uint64_t off, uint64_t max,
                    struct iovec *iov, int maxiov)
{
    if (part == NULL)
        return pdr__seg_iov_at(op, off, max, iov, maxiov);
    return segs_iov_at(part->segs, part->cum, part->nseg, off, max, iov, maxiov);
}

/* The 16-byte DATA prefix arrived: find the destination and check the range. Any thread. */
static int on_data_start(pdr_xfer_engine_t *eng, struct pdr__conn *c, const uint8_t *pfx)
{
    uint64_t xid, offset;
    pdr__xfer_data_pfx_decode(pfx, &xid, &offset);
    uint64_t n = c->rh.len - PDR_XFER_DATA_PFX;
    c->rx_left = n;
    c->rx_len = n;
    c->rx_off = offset;
    c->rx_op = NULL;
    if (!c->outbound || c->sess == NULL) {
        pdr__conn_fail(eng, c, PDR_EPROTO); /* DATA flows from the listening side only */
        return -1;
    }
    int bad = 0;
    pthread_mutex_lock(&eng->lock);
    struct pdr__op *op = pdr__room_find(eng, c->rh.room, PDR__OP_PULL);
    if (op != NULL && op->sess == c->sess && op->xid == xid &&
        !__atomic_load_n(&op->dead, __ATOMIC_SEQ_CST)) {
        if (offset > op->total || n > op->total - offset || n > op->total - op->got)
            bad = 1;
        else {
            op->refs++;
            c->rx_op = op;
        }
    }
    pthread_mutex_unlock(&eng->lock);
    if (bad) {
        pdr__conn_fail(eng, c, PDR_EPROTO);
        return -1;
    }
    return 0; /* without an op: a room failed or canceled here, its payload is discarded */
}

/* The current DATA frame ended. */
static void rx_frame_end(pdr_xfer_engine_t *eng, struct pdr__conn *c)
{
    c->rx_state = RX_HDR;
    struct pdr__op *op = c->rx_op;
    if (op == NULL)
        return;
    c->rx_op = NULL;
    /* Device rooms count their bytes when the staging copy lands (pdr__stage_poll). */
    if (op->dev < 0)
        pdr__op_count(eng, op, c->rx_len, PDR__READY_GOT);
    pdr__op_unref(eng, op);
}

/* Payload bytes of the current frame landed (n of them, at rx_off). */
void pdr__rx_advance(pdr_xfer_engine_t *eng, struct pdr__conn *c, uint64_t n)
{
    c->rx_off += n;
    c->rx_left -= n;
    if (c->rx_left == 0)
        rx_frame_end(eng, c);
}

/* The room of the current frame died: discard the rest of its payload. */
void pdr__rx_drop_op(pdr_xfer_engine_t *eng, struct pdr__conn *c)
{
    struct pdr__op *op = c->rx_op;
    c->rx_op = NULL;
    pdr__op_unref(eng, op);
}

/* Consumes buffered bytes. Returns 0 when it needs more input, -1 when the connection died,
 * RX_MIGRATE when it must move to another thread (the rest stays buffered). */
int pdr__rx_process(pdr_xfer_engine_t *eng, struct pdr__conn *c)
{
    for (;;) {
        size_t avail = c->rlen - c->rpos;
        const uint8_t *p = c->rbuf + c->rpos;
        switch (c->rx_state) {
        case RX_HDR:
            if (avail < PDR_XFER_HDR_LEN)
                return 0;
            if (pdr__xfer_hdr_decode(p, &c->rh) != 0) {
                pdr__conn_fail(eng, c, PDR_EPROTO);
                return -1;
            }
            c->rpos += PDR_XFER_HDR_LEN;
            if (c->rh.type == PDR_XF_DATA) {
                c->rx_state = RX_DATAPFX;
            } else if (c->rh.len == 0) {
                int rc = pdr__on_ctl(eng, c, &c->rh, c->body_inl);
                if (rc != 0)
                    return rc;
            } else {
                c->body_len = (size_t)c->rh.len;
                c->body_got = 0;
                c->body = c->body_len <= sizeof(c->body_inl) ? c->body_inl : malloc(c->body_len);
                if (c->body == NULL) {
                    pdr__conn_fail(eng, c, PDR_ENOMEM);
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
            c->rx_state = RX_PAYLOAD;
            if (c->rx_left == 0)
                rx_frame_end(eng, c);
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
                int rc = pdr__on_ctl(eng, c, &c->rh, body);
                if (body != c->body_inl)
                    free(body);
                if (rc != 0)
                    return rc;
            }
            break;
        }
        case RX_PAYLOAD: {
            if (avail == 0)
                return 0;
            size_t take = c->rx_left < avail ? (size_t)c->rx_left : avail;
            if (c->rx_op != NULL && c->rx_op->dev >= 0) {
                int r = pdr__rx_stage_slot(eng, c);
                if (r == 1)
                    return 0;
                if (r == 0) {
                    size_t room = pdr__rx_stage_room(eng, c);
                    if (take > room)
                        take = room;
                    memcpy(c->stg[c->rx_fill].buf + c->rx_fill_len, p, take);
                    c->rpos += take;
                    pdr__rx_stage_commit(eng, c, take);
                    break;
                }
            }
            if (c->rx_op != NULL) {
                if (pdr__op_enter(c->rx_op) == 0) {
                    struct iovec iov[MAX_IOV];
                    size_t done = 0;
                    while (done < take) {
                        int n = pdr__seg_iov_at(c->rx_op, c->rx_off + done, take - done, iov, MAX_IOV);
                        for (int i = 0; i < n; i++) {
                            memcpy(iov[i].iov_base, p + done, iov[i].iov_len);
                            done += iov[i].iov_len;
                        }
                    }
                    pdr__op_leave(c->rx_op);
                } else {
                    pdr__rx_drop_op(eng, c);
                }
            }
            c->rpos += take;
            pdr__rx_advance(eng, c, take);
            break;
        }
        }
    }
}

int pdr__conn_read(pdr_xfer_engine_t *eng, struct pdr__conn *c)
{
    size_t budget = IO_BUDGET;
    while (budget > 0) {
        ssize_t n;
        if (c->rx_blocked) {
            /* Every staging slot busy: stop polling the socket (level-triggered EPOLLIN would spin);
             * pdr__stage_pump resumes reading when a slot frees. */
            pdr__conn_set_events(eng, c, c->evmask & ~(uint32_t)EPOLLIN);
            return 0;
        }
        if (c->rx_state == RX_PAYLOAD && c->rpos == c->rlen) {
            /* Straight from the socket into the room's memory (or its staging slot). */
            n = -2;
            int r = c->rx_op != NULL && c->rx_op->dev >= 0 ? pdr__rx_stage_slot(eng, c) : -1;
            if (r == 1)
                return 0;
            if (r == 0) {
                n = read(c->fd, c->stg[c->rx_fill].buf + c->rx_fill_len, pdr__rx_stage_room(eng, c));
                if (n > 0)
                    pdr__rx_stage_commit(eng, c, (uint64_t)n);
            } else if (c->rx_op != NULL) {
                if (pdr__op_enter(c->rx_op) == 0) {
                    struct iovec iov[MAX_IOV];
                    int cnt = pdr__seg_iov_at(c->rx_op, c->rx_off, c->rx_left, iov, MAX_IOV);
                    n = readv(c->fd, iov, cnt);
                    pdr__op_leave(c->rx_op);
                } else {
                    pdr__rx_drop_op(eng, c);
                }
            }
            if (n == -2) {
                n = read(c->fd, c->rbuf, c->rx_left < RBUF_CAP ? (size_t)c->rx_left : RBUF_CAP);
                if (n > 0)
                    pdr__rx_advance(eng, c, (uint64_t)n);
            } else if (r != 0 && n > 0) {
                pdr__rx_advance(eng, c, (uint64_t)n);
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
                int rc = pdr__rx_process(eng, c);
                if (rc != 0)
                    return rc;
            }
        }
        if (n == 0) {
            pdr__conn_fail(eng, c, PDR_EPEERGONE);
            return -1;
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            pdr__conn_fail(eng, c, PDR_EPEERGONE);
            return -1;
        }
        c->last_live_ns = pdr_now_ns();
        c->ping_ns = 0;
        budget = (size_t)n < budget ? budget - (size_t)n : 0;
    }
    return 0;
}

/* ---- sending ---- */

/* Claims the next chunk of the session's first push op with unclaimed bytes (round robin over ops), if
 * that op's memory is of the wanted kind (want_dev: device memory). Returns it with a reference. */
struct pdr__op *pdr__claim(pdr_xfer_engine_t *eng, struct pdr__conn *c, int want_dev, uint64_t *off,
                           uint64_t *len, struct pdr__part **part)
{
    *part = NULL;
    struct pdr__sess *s = c->sess;
    if (s == NULL)
        return NULL;
    pthread_mutex_lock(&eng->lock);
    struct pdr__op *op = s->dead ? NULL : PDR_DLINK_ENTRY(s->push.head, struct pdr__op, plink);
    if (op != NULL && ((op->dev >= 0) != want_dev || (want_dev && c->stg_count > 0 && c->stg_dev != op->dev)))
        op = NULL;
    if (op != NULL && op->parted) {
        /* A push in parts: the next chunk of its oldest pending part; it leaves the push list when no
         * published byte is left unclaimed and comes back with its next part (engine_parts.c). */
        int rc = pdr__part_take_locked(op, eng->opts.chunk_bytes, off, len, part);
        pdr__push_list_del(s, op);
        if (op->pend.head != NULL)
            pdr__push_list_add(s, op);
        if (rc == 0)
            op->refs++;
        else
            op = NULL;
    } else if (op != NULL) {
        uint64_t n = op->total - op->next_off;
        if (n > eng->opts.chunk_bytes)
            n = eng->opts.chunk_bytes;
        *off = op->next_off;
        *len = n;
        op->next_off += n;
        pdr__push_list_del(s, op);
        if (op->next_off < op->total)
            pdr__push_list_add(s, op);
        op->refs++;
    }
    pthread_mutex_unlock(&eng->lock);
    return op;
}

/* The device of the session's next push chunk: its ordinal, -1 for host memory, -2 for none. */
static int peek_dev(pdr_xfer_engine_t *eng, struct pdr__conn *c)
{
    struct pdr__sess *s = c->sess;
    pthread_mutex_lock(&eng->lock);
    int dev = s == NULL || s->dead || s->push.head == NULL
                  ? -2
                  : PDR_DLINK_ENTRY(s->push.head, struct pdr__op, plink)->dev;
    pthread_mutex_unlock(&eng->lock);
    return dev;
}

static void tx_start(struct pdr__conn *c, struct pdr__op *op, struct pdr__part *part, uint64_t off,
                     uint64_t len)
{
    c->tx_op = op;
    c->tx_part = part;
    c->tx_off = off;
    c->tx_len = c->tx_left = len;
    pdr__xfer_data_hdr_encode(c->tx_hdr, op->room, op->xid, off, len);
}

/* Sets up the next DATA frame of this (sending) connection. Returns 1 if there is one. */
static int tx_next(pdr_xfer_engine_t *eng, struct pdr__conn *c)
{
    for (;;) {
        /* 1. A staged chunk whose device copy finished, in issue order. */
        if (c->stg_count > 0) {
            pdr__stage_poll(eng, c, 0);
            struct stage *g = &c->stg[c->stg_head];
            if (g->state == STG_READY) {
                struct pdr__op *op = g->op;
                g->op = NULL;
                if (__atomic_load_n(&op->dead, __ATOMIC_SEQ_CST)) {
                    pdr__op_unref(eng, op);
                    g->state = STG_FREE;
                    c->stg_head = (c->stg_head + 1) % c->nstg;
                    c->stg_count--;
                    continue;
                }
                c->tx_stage = (int)c->stg_head;
                tx_start(c, op, NULL, g->off, g->len); /* the slot's reference moves to the frame */
                return 1;
            }
        }
        /* 2. Keep the ring full of device copies. */
        int dev = peek_dev(eng, c);
        if (dev >= 0) {
            int rc = pdr__stage_init(eng, c, dev);
            if (rc == PDR_EAGAIN)
                return 0; /* the other device's copies drain first */
            uint64_t off, len;
            struct pdr__part *part;
            if (rc != 0) {
                struct pdr__op *op = pdr__claim(eng, c, 1, &off, &len, &part);
                if (op != NULL) {
                    pdr__op_fail_async(eng, op, rc);
                    pdr__op_unref(eng, op);
                }
                return 0;
            }
            if (c->stg_count == c->nstg)
                return 0; /* every buffer busy: the loop polls the copies */
            struct pdr__op *op = pdr__claim(eng, c, 1, &off, &len, &part);
            if (op == NULL)
                continue;
            struct stage *g = &c->stg[(c->stg_head + c->stg_count) % c->nstg];
            g->part = part;
            g->off = off;
            g->len = len;
            rc = pdr__stage_issue(eng, c, g, op, 1);
            if (rc == 0)
                c->stg_count++;
            else if (rc != PDR_ECANCELED)
                pdr__op_fail_async(eng, op, rc);
            pdr__op_unref(eng, op);
            if (rc != 0 && rc != PDR_ECANCELED)
                return 0;
            continue;
        }
        /* 3. Host memory goes straight from the room to the socket. */
        if (dev == -1) {
            uint64_t off, len;
            struct pdr__part *part;
            struct pdr__op *op = pdr__claim(eng, c, 0, &off, &len, &part);
            if (op == NULL)
                continue;
            tx_start(c, op, part, off, len);
            return 1;
        }
        return 0;
    }
}

static void tx_frame_end(pdr_xfer_engine_t *eng, struct pdr__conn *c)
{
    struct pdr__op *op = c->tx_op;
    c->tx_op = NULL;
    c->tx_state = TX_IDLE;
    if (c->tx_stage >= 0) {
        c->stg[c->tx_stage].state = STG_FREE;
        c->stg_head = (c->stg_head + 1) % c->nstg;
        c->stg_count--;
        c->tx_stage = -1;
    }
    if (op == NULL)
        return;
    pdr__op_count(eng, op, c->tx_len, PDR__READY_SENT);
    pdr__op_unref(eng, op);
}

int pdr__conn_flush(pdr_xfer_engine_t *eng, struct pdr__conn *c)
{
    size_t budget = IO_BUDGET;
    while (budget > 0) {
        if (c->tx_state == TX_IDLE) {
            if (c->cq.head != NULL) {
                c->tx_ctl = PDR_DLINK_ENTRY(pdr_dqueue_pop(&c->cq), struct ctl_msg, link);
                c->tx_state = TX_CTL;
            } else if (!c->outbound && tx_next(eng, c)) {
                c->tx_state = TX_DATA;
            } else {
                pdr__conn_set_events(eng, c, EPOLLIN);
                return 0;
            }
            c->tx_sent = 0;
        }
        struct iovec iov[MAX_IOV + 1];
        int cnt = 0;
        size_t hdr_left = 0;
        int entered = 0;
        if (c->tx_state == TX_CTL) {
            iov[cnt].iov_base = c->tx_ctl->data + c->tx_sent;
            iov[cnt++].iov_len = c->tx_ctl->len - c->tx_sent;
        } else {
            if (c->tx_sent < sizeof(c->tx_hdr)) {
                hdr_left = sizeof(c->tx_hdr) - c->tx_sent;
                iov[cnt].iov_base = c->tx_hdr + c->tx_sent;
                iov[cnt++].iov_len = hdr_left;
            }
            if (c->tx_stage >= 0 && c->tx_left > 0) {
                /* Staged: the bytes are ours, sent whatever happens to the room. */
                iov[cnt].iov_base = c->stg[c->tx_stage].buf + (c->tx_len - c->tx_left);
                iov[cnt++].iov_len = (size_t)c->tx_left;
                entered = -1;
            } else if (c->tx_op != NULL && c->tx_left > 0) {
                if (pdr__op_enter(c->tx_op) == 0) {
                    entered = 1;
                    cnt += pdr__src_iov_at(c->tx_op, c->tx_part, c->tx_off, c->tx_left, iov + cnt, MAX_IOV);
                } else {
                    pdr__op_unref(eng, c->tx_op); /* dead: the rest of this frame is zeros */
                    c->tx_op = NULL;
                }
            }
            if (entered == 0 && c->tx_left > 0) {
                iov[cnt].iov_base = (void *)zeros;
                iov[cnt++].iov_len = c->tx_left < sizeof(zeros) ? (size_t)c->tx_left : sizeof(zeros);
            }
        }
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)cnt};
        ssize_t n = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        int saved = errno;
        if (entered == 1)
            pdr__op_leave(c->tx_op);
        if (n < 0) {
            if (saved == EINTR)
                continue;
            if (saved == EAGAIN || saved == EWOULDBLOCK) {
                pdr__conn_set_events(eng, c, EPOLLIN | EPOLLOUT);
                return 0;
            }
            pdr__conn_fail(eng, c, PDR_EPEERGONE);
            return -1;
        }
        budget = (size_t)n < budget ? budget - (size_t)n : 0;
        size_t sent = (size_t)n;
        if (c->tx_state == TX_CTL) {
            c->tx_sent += sent;
            if (c->tx_sent == c->tx_ctl->len) {
                pdr__ctl_free(c->tx_ctl);
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
            c->tx_off += sent;
            c->tx_left -= sent;
        }
        if (c->tx_sent == sizeof(c->tx_hdr) && c->tx_left == 0)
            tx_frame_end(eng, c);
    }
    pdr__conn_set_events(eng, c, EPOLLIN | EPOLLOUT); /* budget spent: come back next turn */
    return 0;
}

/* Decode: a plain FETCH (the bytes come in DATA frames). */
static struct ctl_msg *tcp_offer(pdr_xfer_engine_t *eng, struct pdr__sess *s, struct pdr__op *op, int *rc)
{
    (void)eng;
    (void)s;
    size_t len = pdr__xfer_fetch_size((uint32_t)op->nseg);
    struct ctl_msg *m = pdr__ctl_new(len);
    if (m == NULL) {
        *rc = PDR_ENOMEM;
        return NULL;
    }
    m->len = pdr__xfer_fetch_encode(m->data, len, op->room, op->xid, op->total, op->timeout_ms,
                                    op->nseg > 0 ? &op->segs[0].len : NULL, sizeof(pdr_xfer_seg_t),
                                    (uint32_t)op->nseg);
    return m;
}

/* Prefill: the room's chunks go on the session's push list, where its connections claim them. */
static int tcp_serve(pdr_xfer_engine_t *eng, struct pdr__op *op, struct pdr__sess *s, const uint8_t *body,
                     size_t len)
{
    (void)body;
    (void)len;
    if (op->total == 0) {
        op->state = PDR__OP_DRAINED;
        pdr__queue_ctl(eng, s->ctl, PDR_XF_DONE, op->room, op->xid, 0, 0);
        return 0;
    }
    pthread_mutex_lock(&eng->lock);
    op->tcp_serving = 1;
    if (pdr__op_servable_locked(op) && (!op->parted || op->pend.head != NULL))
        pdr__push_list_add(s, op);
    pthread_mutex_unlock(&eng->lock);
    pdr__rescan_all(eng); /* every connection of the session may claim chunks now */
    return 0;
}

const struct pdr__mover_ops pdr__mover_tcp = {
    .name = "tcp",
    .offer = tcp_offer,
    .serve = tcp_serve,
};
