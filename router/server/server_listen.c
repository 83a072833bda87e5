/*
 * The listeners: bind and listen, accept in batches on the loop (pausing when the process is out of file
 * descriptors or at limits.max_client_connections), hand each connection to front/, and close. server.c
 * opens them, server_shutdown.c takes their backlog and closes them; this file calls neither. Runs on
 * the loop that owns the listener.
 */
#define _GNU_SOURCE /* accept4 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "err.h"
#include "front.h"
#include "router.h"
#include "server_internal.h"
#include "util.h"

#define ACCEPT_BATCH 64 /* connections taken per readiness event, so that one listener cannot hog a loop */
#define FD_EXHAUSTED_PAUSE_MS 100 /* nginx pauses accepting for 500 ms; idle connections close meanwhile */
#define FD_EXHAUSTED_LOG_MS 60000

static void on_listener_ready(uv_poll_t *h, int status, int events);

static void on_accept_resume(uv_timer_t *h)
{
    pdr_listener_t *l = h->data;
    uv_poll_start(&l->poll, UV_READABLE, on_listener_ready);
}

/* accept() found the process (EMFILE) or the system (ENFILE) out of file descriptors. Retrying at once
 * would spin: the pending connection stays in the backlog and the socket stays readable. Accepting
 * pauses instead, so the loop serves its open connections (and closes the ones whose clients left,
 * which frees descriptors); the backlog waits, as nginx does. Logged at most once a minute, counted. */
static void accept_exhausted(pdr_listener_t *l, int err)
{
    pdr_thread_t *t = l->t;
    t->m.accept_fd_exhausted_total++;
    uint64_t now = pdr_now_ms(), last = __atomic_load_n(&t->r->fd_exhausted_log_ms, __ATOMIC_RELAXED);
    if ((last == 0 || now - last >= FD_EXHAUSTED_LOG_MS) &&
        __atomic_compare_exchange_n(&t->r->fd_exhausted_log_ms, &last, now, 0, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED))
        pdr_warn(
            "accept: %s (%d client connections open on loop %d): not accepting for %d ms; raise the open "
            "files limit (ulimit -n, LimitNOFILE=) if this repeats",
            strerror(err), (int)t->conns, t->id, FD_EXHAUSTED_PAUSE_MS);
    uv_poll_stop(&l->poll);
    uv_timer_start(&l->resume, on_accept_resume, FD_EXHAUSTED_PAUSE_MS, 0);
}

static void on_listener_ready(uv_poll_t *h, int status, int events)
{
    pdr_listener_t *l = h->data;
    (void)events;
    if (status < 0)
        return;
    for (int i = 0; i < ACCEPT_BATCH; i++) {
        if (l == &l->t->listener && pdr__client_conns_full(l->t)) {
            /* limits.max_client_connections: the backlog waits, looked at again after the pause */
            l->t->m.accept_paused_total++;
            uv_poll_stop(&l->poll);
            uv_timer_start(&l->resume, on_accept_resume, FD_EXHAUSTED_PAUSE_MS, 0);
            return;
        }
        int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            pdr__serve_conn(l->t, l, fd);
            continue;
        }
        if (errno == EINTR || errno == ECONNABORTED)
            continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
            accept_exhausted(l, errno);
        return; /* EAGAIN: the backlog is empty */
    }
}

/* Before a listener closes: takes the connections the kernel already completed, which closing the
 * socket would reset, and serves them (their clients sent before the listener went away). */
void pdr__server_accept_backlog(pdr_thread_t *t, pdr_listener_t *l)
{
    for (int i = 0; i < 4096; i++) {
        int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        pdr__serve_conn(t, l, fd);
    }
}

static void on_listener_closed(uv_handle_t *h)
{
    pdr_listener_t *l = h->data;
    if (h == (uv_handle_t *)&l->poll) {
        close(l->fd);
        l->fd = -1;
    }
}

void pdr__server_close_listener(pdr_listener_t *l)
{
    uv_timer_stop(&l->resume);
    uv_close((uv_handle_t *)&l->resume, on_listener_closed);
    uv_close((uv_handle_t *)&l->poll, on_listener_closed);
}

/* Binds host:port (SO_REUSEPORT when reuseport) and accepts on t's loop into `h`. */
int pdr__server_open_listener(pdr_thread_t *t, const char *host, int port, int reuseport, pdr_listener_t *h,
                              int *listening)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)&ss) != 0 &&
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss) != 0) {
        pdr_error("%s %s is not an IP address",
                  h == &t->listener              ? "listen.host"
                  : h == &t->r->metrics_listener ? "metrics.host"
                                                 : "admin.host",
                  host);
        return PDR_EINVAL;
    }
    /* Every loop binds its own socket to the same address (SO_REUSEPORT): the kernel spreads new
     * connections over the loops without a shared accept queue. SO_REUSEPORT would also let a second
     * router (same user) bind the same port and silently take half the connections: the first loop
     * first binds a socket without it, which fails if anyone holds the port. */
    int one = 1;
    if (reuseport && t->id == 0) {
        int probe = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int busy =
            probe >= 0 &&
            (setsockopt(probe, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
             bind(probe, (struct sockaddr *)&ss,
                  ss.ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6)) != 0);
        int e = errno;
        if (probe >= 0)
            close(probe);
        if (busy) {
            pdr_error("cannot listen on %s:%d: %s (is another pdrouter running?)", host, port, strerror(e));
            return PDR_EIO;
        }
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        (reuseport && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0) ||
        bind(fd, (struct sockaddr *)&ss,
             ss.ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6)) != 0) {
        pdr_error("cannot listen on %s:%d: %s%s", host, port, strerror(errno),
                  h == &t->listener ? ""
                  : h == &t->r->metrics_listener
                      ? " (metrics.host/metrics.port, --prometheus-host/--prometheus-port)"
                      : " (admin.host/admin.port; port 0 turns the admin API off)");
        if (fd >= 0)
            close(fd);
        return PDR_EIO;
    }
    if (listen(fd, h == &t->listener ? 4096 : 64) != 0) {
        pdr_error("cannot listen on %s:%d: %s", host, port, strerror(errno));
        close(fd);
        return PDR_EIO;
    }
    h->t = t;
    h->fd = fd;
    h->admin = h == &t->r->admin_listener;
    h->metrics = h == &t->r->metrics_listener;
    uv_poll_init(t->loop, &h->poll, fd);
    h->poll.data = h;
    uv_timer_init(t->loop, &h->resume);
    h->resume.data = h;
    uv_poll_start(&h->poll, UV_READABLE, on_listener_ready);
    *listening = 1;
    return 0;
}
