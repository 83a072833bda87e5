/*
 * Connections of the TCP backend: sockets (options, connect, accept, the listener), attaching a
 * connection to its I/O thread and handing it to another, failing and freeing it, the heartbeat, and
 * each thread's turn (adopted connections, rescans, dead sessions). Also the backend's init and shutdown
 * and its hooks table for engine.c. Each connection runs on the I/O thread that owns it
 * (transport_internal.h has the threading story); the control connection of every session, the
 * listener and everything that completes an op run on I/O thread 0.
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

struct pdr__conn *pdr__conn_new(int fd, int outbound, int connecting, const char *peer)
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
int pdr__conn_attach(struct pdr__io *io, struct pdr__conn *c)
{
    c->io = io;
    c->evmask = c->connecting ? EPOLLOUT : (EPOLLIN | EPOLLOUT);
    struct epoll_event ev = {.events = c->evmask, .data.ptr = c};
    if (epoll_ctl(io->epfd, EPOLL_CTL_ADD, c->fd, &ev) != 0)
        return -1;
    pdr_dlink_push(&io->conns, &c->link);
    c->attached = 1;
    return 0;
}

static void conn_unlink(struct pdr__conn *c)
{
    pdr_dlink_unlink(&c->link);
    c->attached = 0;
}

/* Hands c (not attached anywhere) to thread io. */
void pdr__conn_handoff(pdr_xfer_engine_t *eng, struct pdr__io *io, struct pdr__conn *c)
{
    c->io = io;
    pthread_mutex_lock(&eng->lock);
    pdr_dlink_push(&io->adopt, &c->qlink);
    pdr__io_wake_locked(eng, io);
    pthread_mutex_unlock(&eng->lock);
}

void pdr__rescan_all(pdr_xfer_engine_t *eng)
{
    pthread_mutex_lock(&eng->lock);
    for (int i = 0; i < eng->nio; i++) {
        eng->io[i].rescan = 1;
        pdr__io_wake_locked(eng, &eng->io[i]);
    }
    pthread_mutex_unlock(&eng->lock);
}

void pdr__ctl_free(struct ctl_msg *m)
{
    if (m == NULL)
        return;
    if (m->data != m->inl)
        free(m->data);
    free(m);
}

void pdr__ctl_free_all(pdr_dqueue_t *q)
{
    struct ctl_msg *m;
    while ((m = PDR_DLINK_ENTRY(pdr_dqueue_pop(q), struct ctl_msg, link)) != NULL)
        pdr__ctl_free(m);
}

void pdr__conn_free(pdr_xfer_engine_t *eng, struct pdr__conn *c)
{
    pdr__stage_free(eng, c);
    pdr__ctl_free_all(&c->cq);
    pdr__ctl_free(c->tx_ctl);
    if (c->body != NULL && c->body != c->body_inl)
        free(c->body);
    if (c->rx_op != NULL)
        pdr__op_unref(eng, c->rx_op);
    if (c->tx_op != NULL)
        pdr__op_unref(eng, c->tx_op);
    if (c->sess != NULL)
        pdr__sess_unref(eng, c->sess);
    free(c->rbuf);
    free(c);
}

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
    pdr_dlink_push(&io->zombies, &c->qlink);
    struct pdr__sess *s = c->sess;
    if (io->idx == 0) {
        pdr__drop_parked_all(eng, c);
        if (s != NULL && s->ctl == c)
            s->ctl = NULL;
        if (s != NULL)
            pdr__sess_kill(eng, s, status);
        return;
    }
    if (s == NULL)
        return;
    pthread_mutex_lock(&eng->lock);
    if (!s->dead && !s->dead_queued) {
        s->dead_queued = 1;
        s->status = status;
        s->refs++;
        pdr_dlink_push(&eng->dead_sess, &s->dlink);
        pdr__io_wake_locked(eng, &eng->io[0]);
    }
    pthread_mutex_unlock(&eng->lock);
}

int pdr__connect_to(pdr_xfer_engine_t *eng, const struct sockaddr_storage *addr, socklen_t addrlen,
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

/* ---- receiving ---- */

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
        struct pdr__conn *c = pdr__conn_new(fd, 0, 0, peer);
        if (c == NULL || pdr__conn_attach(&eng->io[0], c) != 0) {
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
    pdr__conn_handoff(eng, to, c);
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
    if (c->cq.head != NULL || c->tx_state != TX_IDLE || (events & EPOLLOUT))
        pdr__conn_flush(eng, c);
}

void pdr__tcp_on_event(pdr_xfer_engine_t *eng, struct pdr__io *io, void *handle, uint32_t events)
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
    if (pdr__conn_attach(io, c) != 0) {
        /* Not registered anywhere: count it as dead right away. */
        c->dead = 1;
        close(c->fd);
        c->fd = -1;
        pdr_dlink_push(&io->zombies, &c->qlink);
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

int pdr__tcp_tick(pdr_xfer_engine_t *eng, struct pdr__io *io, uint64_t now)
{
    pdr_dlink_t *adopt, *dead = NULL;
    pthread_mutex_lock(&eng->lock);
    pdr_dlink_move(&adopt, &io->adopt);
    int rescan = io->rescan;
    io->rescan = 0;
    if (io->idx != 0)
        io->wake_pending = 0;
    if (io->idx == 0)
        pdr_dlink_move(&dead, &eng->dead_sess);
    pthread_mutex_unlock(&eng->lock);
    struct pdr__conn *ac;
    while ((ac = PDR_DLINK_ENTRY(pdr_dlink_pop(&adopt), struct pdr__conn, qlink)) != NULL)
        conn_adopted(eng, io, ac);
    struct pdr__sess *ds;
    while ((ds = PDR_DLINK_ENTRY(pdr_dlink_pop(&dead), struct pdr__sess, dlink)) != NULL) {
        pdr__sess_kill(eng, ds, ds->status);
        pdr__sess_unref(eng, ds); /* the dead list's reference */
    }
    uint64_t hb = (uint64_t)eng->opts.heartbeat_ms * 1000000u;
    uint64_t dead_after = (uint64_t)eng->opts.heartbeat_timeout_ms * 1000000u;
    int want = -1;
    if (io->idx == 0 && pdr__movers_poll(eng) > 0) {
        want = 0; /* copies in flight: poll them soon */
        io->copy_wait = 1;
    }
    struct pdr__conn *c = PDR_DLINK_ENTRY(io->conns, struct pdr__conn, link);
    while (c != NULL) {
        struct pdr__conn *next = PDR_DLINK_ENTRY(c->link.next, struct pdr__conn, link);
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
        if (rescan && !c->connecting && c->tx_state == TX_IDLE && c->cq.head == NULL &&
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

void pdr__tcp_after_turn(pdr_xfer_engine_t *eng, struct pdr__io *io)
{
    struct pdr__conn *c;
    while ((c = PDR_DLINK_ENTRY(pdr_dlink_pop(&io->zombies), struct pdr__conn, qlink)) != NULL)
        pdr__conn_free(eng, c);
}

int pdr__tcp_init(pdr_xfer_engine_t *eng)
{
    struct tcp_state *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return PDR_ENOMEM;
    s->listen_tag = PDR__IO_LISTEN;
    pdr__read_identity(&s->me);
    eng->be_state = s;
    int rc = pdr__movers_init(eng);
    if (rc != 0)
        return rc;
    const char *host = eng->opts.listen_host;
    if (host == NULL)
        return 0;
    char name[96];
    if (pdr_host_copy(host, strlen(host), name, sizeof(name)) != 0)
        return PDR_EINVAL;
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
void pdr__tcp_shutdown(pdr_xfer_engine_t *eng)
{
    struct tcp_state *s = pdr__tcp_st(eng);
    if (s == NULL)
        return;
    for (int i = 0; i < eng->nio; i++) {
        struct pdr__io *io = &eng->io[i];
        struct pdr__conn *c;
        while ((c = PDR_DLINK_ENTRY(pdr_dlink_pop(&io->adopt), struct pdr__conn, qlink)) != NULL) {
            close(c->fd);
            pdr__conn_free(eng, c);
        }
        while ((c = PDR_DLINK_ENTRY(io->conns, struct pdr__conn, link)) != NULL) {
            conn_unlink(c);
            close(c->fd);
            pdr__conn_free(eng, c);
        }
        pdr__tcp_after_turn(eng, io);
    }
    struct pdr__sess *d;
    while ((d = PDR_DLINK_ENTRY(pdr_dlink_pop(&eng->dead_sess), struct pdr__sess, dlink)) != NULL)
        pdr__sess_unref(eng, d);
    while (s->sessions != NULL) {
        struct pdr__sess *x = PDR_DLINK_ENTRY(s->sessions, struct pdr__sess, link);
        pdr_dlink_unlink(&x->link);
        pdr__movers_sess_close(eng, NULL, x);
        pdr__sess_unref(eng, x);
    }
    pdr__movers_shutdown(eng);
    for (size_t b = 0; b < eng->nbuckets && eng->parked != NULL; b++)
        while (eng->parked[b] != NULL)
            pdr__tomb_del(eng, PDR_DLINK_ENTRY(eng->parked[b], struct pdr__parked, hlink));
    if (eng->listen_fd >= 0) {
        close(eng->listen_fd);
        eng->listen_fd = -1;
    }
    free(s);
    eng->be_state = NULL;
}
