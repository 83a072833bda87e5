/*
 * fdpass.c — the fd server and client of fdpass.h.
 *
 * Owns: the server's listening socket, its thread, a stop eventfd and the table of held descriptors
 * (id → fd, guarded by a mutex: the engine adds and drops from its threads, the server thread reads).
 *
 * Wire (SOCK_SEQPACKET, one request and one answer per connection): request = 16 bytes, "PDFD" u32 +
 * 4 zero bytes + id u64 (little-endian host order: both ends are one host); answer = 1 status byte
 * (0 = found, with one descriptor attached by SCM_RIGHTS; 1 = unknown id; 2 = refused).
 */
#define _GNU_SOURCE
#include "fdpass.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "err.h"
#include "util.h"

#define FD_MAGIC 0x44464450u /* "PDFD" */
#define FD_MAX 65536

struct fd_ent {
    uint64_t id;
    int fd;
};

struct pdr__fdsrv {
    int lfd, stopfd;
    uint32_t pid;
    uint64_t nonce;
    pthread_t thread;
    pthread_mutex_t lock;
    struct fd_ent *ents;
    size_t n, cap;
};

static socklen_t srv_addr(struct sockaddr_un *a, uint32_t pid, uint64_t nonce)
{
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    int n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "pdxfer-fd/%u/%016llx", (unsigned)pid,
                     (unsigned long long)nonce);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static void serve_one(struct pdr__fdsrv *srv, int c)
{
    /* One connection at a time: a client that connects and says nothing holds the others up 200 ms at
     * most (a real client sends its request right after connecting). */
    struct timeval tv = {0, 200000};
    setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    uint8_t req[16];
    ssize_t r = recv(c, req, sizeof(req), 0);
    if (r != (ssize_t)sizeof(req))
        return;
    uint32_t magic;
    uint64_t id;
    memcpy(&magic, req, 4);
    memcpy(&id, req + 8, 8);
    uint8_t status = 1;
    int dup_fd = -1;
    struct ucred cred;
    socklen_t cl = sizeof(cred);
    if (magic != FD_MAGIC || getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0 ||
        (cred.uid != geteuid() && cred.uid != 0)) {
        status = 2;
    } else {
        pthread_mutex_lock(&srv->lock);
        for (size_t i = 0; i < srv->n; i++) {
            if (srv->ents[i].id == id) {
                dup_fd = fcntl(srv->ents[i].fd, F_DUPFD_CLOEXEC, 0);
                break;
            }
        }
        pthread_mutex_unlock(&srv->lock);
        if (dup_fd >= 0)
            status = 0;
    }
    struct iovec iov = {&status, 1};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } u;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    if (dup_fd >= 0) {
        memset(&u, 0, sizeof(u));
        msg.msg_control = u.buf;
        msg.msg_controllen = sizeof(u.buf);
        struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &dup_fd, sizeof(int));
    }
    (void)sendmsg(c, &msg, MSG_NOSIGNAL);
    if (dup_fd >= 0)
        close(dup_fd);
}

static void *srv_main(void *arg)
{
    struct pdr__fdsrv *srv = arg;
    for (;;) {
        struct pollfd p[2] = {{srv->lfd, POLLIN, 0}, {srv->stopfd, POLLIN, 0}};
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            pdr_warn("transport: fd server: poll: %s", strerror(errno));
            return NULL;
        }
        if (p[1].revents != 0)
            return NULL;
        if (p[0].revents == 0)
            continue;
        int c = accept4(srv->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
            continue;
        serve_one(srv, c);
        close(c);
    }
}

int pdr__fdsrv_start(struct pdr__fdsrv **out)
{
    *out = NULL;
    struct pdr__fdsrv *srv = calloc(1, sizeof(*srv));
    if (srv == NULL)
        return PDR_ENOMEM;
    srv->lfd = srv->stopfd = -1;
    srv->pid = (uint32_t)getpid();
    int rc = pdr_random_bytes(&srv->nonce, sizeof(srv->nonce));
    if (rc == 0 && (srv->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0)) < 0)
        rc = PDR_EIO;
    if (rc == 0) {
        struct sockaddr_un a;
        socklen_t al = srv_addr(&a, srv->pid, srv->nonce);
        if (bind(srv->lfd, (struct sockaddr *)&a, al) != 0 || listen(srv->lfd, 64) != 0)
            rc = PDR_EIO;
    }
    if (rc == 0 && (srv->stopfd = eventfd(0, EFD_CLOEXEC)) < 0)
        rc = PDR_EIO;
    if (rc == 0 && pthread_mutex_init(&srv->lock, NULL) != 0)
        rc = PDR_ENOMEM;
    if (rc == 0 && pthread_create(&srv->thread, NULL, srv_main, srv) != 0) {
        pthread_mutex_destroy(&srv->lock);
        rc = PDR_ENOMEM;
    }
    if (rc != 0) {
        pdr_warn("transport: cannot start the fd server: %s (%s)", pdr_strerror(rc), strerror(errno));
        if (srv->lfd >= 0)
            close(srv->lfd);
        if (srv->stopfd >= 0)
            close(srv->stopfd);
        free(srv);
        return rc;
    }
    *out = srv;
    return 0;
}

uint32_t pdr__fdsrv_pid(const struct pdr__fdsrv *srv)
{
    return srv->pid;
}

uint64_t pdr__fdsrv_nonce(const struct pdr__fdsrv *srv)
{
    return srv->nonce;
}

int pdr__fdsrv_add(struct pdr__fdsrv *srv, int fd, uint64_t *id)
{
    uint64_t v = 0;
    int rc = pdr_random_bytes(&v, sizeof(v));
    pthread_mutex_lock(&srv->lock);
    if (rc == 0 && srv->n == srv->cap) {
        size_t cap = srv->cap == 0 ? 16 : srv->cap * 2;
        struct fd_ent *e = cap > FD_MAX ? NULL : realloc(srv->ents, cap * sizeof(*e));
        if (e == NULL) {
            rc = cap > FD_MAX ? PDR_ETOOBIG : PDR_ENOMEM;
        } else {
            srv->ents = e;
            srv->cap = cap;
        }
    }
    if (rc == 0) {
        srv->ents[srv->n].id = v;
        srv->ents[srv->n].fd = fd;
        srv->n++;
        *id = v;
    }
    pthread_mutex_unlock(&srv->lock);
    if (rc != 0)
        close(fd);
    return rc;
}

void pdr__fdsrv_drop(struct pdr__fdsrv *srv, uint64_t id)
{
    int fd = -1;
    pthread_mutex_lock(&srv->lock);
    for (size_t i = 0; i < srv->n; i++) {
        if (srv->ents[i].id == id) {
            fd = srv->ents[i].fd;
            srv->ents[i] = srv->ents[--srv->n];
            break;
        }
    }
    pthread_mutex_unlock(&srv->lock);
    if (fd >= 0)
        close(fd);
}

size_t pdr__fdsrv_count(struct pdr__fdsrv *srv)
{
    pthread_mutex_lock(&srv->lock);
    size_t n = srv->n;
    pthread_mutex_unlock(&srv->lock);
    return n;
}

void pdr__fdsrv_stop(struct pdr__fdsrv *srv)
{
    if (srv == NULL)
        return;
    uint64_t one = 1;
    ssize_t w = write(srv->stopfd, &one, sizeof(one));
    (void)w;
    pthread_join(srv->thread, NULL);
    close(srv->lfd);
    close(srv->stopfd);
    for (size_t i = 0; i < srv->n; i++)
        close(srv->ents[i].fd);
    free(srv->ents);
    pthread_mutex_destroy(&srv->lock);
    free(srv);
}

int pdr__fdsrv_fetch(uint32_t pid, uint64_t nonce, uint64_t id, int timeout_ms, int *fd)
{
    *fd = -1;
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (s < 0)
        return PDR_EIO;
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    struct sockaddr_un a;
    socklen_t al = srv_addr(&a, pid, nonce);
    int rc = 0;
    if (connect(s, (struct sockaddr *)&a, al) != 0)
        rc = errno == ECONNREFUSED || errno == ENOENT ? PDR_ECONNREFUSED
             : errno == EAGAIN || errno == ETIMEDOUT  ? PDR_ETIMEDOUT
                                                      : PDR_EIO;
    uint8_t req[16] = {0};
    uint32_t magic = FD_MAGIC;
    memcpy(req, &magic, 4);
    memcpy(req + 8, &id, 8);
    if (rc == 0 && send(s, req, sizeof(req), MSG_NOSIGNAL) != (ssize_t)sizeof(req))
        rc = errno == EAGAIN ? PDR_ETIMEDOUT : PDR_EPEERGONE;
    uint8_t status = 2;
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } u;
    struct iovec iov = {&status, 1};
    struct msghdr msg = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    if (rc == 0) {
        ssize_t r = recvmsg(s, &msg, MSG_CMSG_CLOEXEC);
        if (r != 1)
            rc = r < 0 && errno == EAGAIN ? PDR_ETIMEDOUT : PDR_EPEERGONE;
    }
    int got = -1;
    if (rc == 0) {
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm != NULL; cm = CMSG_NXTHDR(&msg, cm))
            if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
                cm->cmsg_len == CMSG_LEN(sizeof(int)))
                memcpy(&got, CMSG_DATA(cm), sizeof(int));
        if (status != 0 || got < 0 || (msg.msg_flags & MSG_CTRUNC)) {
            if (got >= 0)
                close(got);
            got = -1;
            rc = PDR_EINVAL;
        }
    }
    close(s);
    *fd = got;
    return rc;
}
