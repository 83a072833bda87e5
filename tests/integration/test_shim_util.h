/*
 * Helpers shared by the shim/transport tests: a completion record that a test thread waits on (mutex
 * + condvar, never sleeps), deterministic fill patterns and checks. Header-only; each test is one
 * process.
 */
#ifndef TEST_SHIM_UTIL_H
#define TEST_SHIM_UTIL_H

#include <arpa/inet.h>
#include <dirent.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "err.h"

#define CHECK(cond)                                                                                          \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);                         \
            abort();                                                                                         \
        }                                                                                                    \
    } while (0)

#define CHECK_EQ_ERR(got, want)                                                                              \
    do {                                                                                                     \
        int g_ = (got), w_ = (want);                                                                         \
        if (g_ != w_) {                                                                                      \
            fprintf(stderr, "%s:%d: got %d (%s), want %d (%s)\n", __FILE__, __LINE__, g_, pdr_errname(g_),   \
                    w_, pdr_errname(w_));                                                                    \
            abort();                                                                                         \
        }                                                                                                    \
    } while (0)

/* One awaited completion (or a counter of many). */
struct done {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int count;  /* callbacks seen */
    int status; /* of the last one */
    uint64_t bytes;
    uint64_t room;
    int nfail;     /* callbacks with a non-zero status */
    uint64_t t_ns; /* when the last callback ran */
};

static inline uint64_t t_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void done_init(struct done *d)
{
    memset(d, 0, sizeof(*d));
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    d->status = 1;
}

static inline void done_fini(struct done *d)
{
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv);
}

static inline void done_cb(void *arg, uint64_t room, int status, uint64_t bytes)
{
    struct done *d = arg;
    pthread_mutex_lock(&d->mu);
    d->count++;
    d->status = status;
    d->bytes = bytes;
    d->room = room;
    d->t_ns = t_now_ns();
    if (status != 0)
        d->nfail++;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

/* Waits until d has seen n callbacks or timeout_ms passed; returns the count seen. */
static inline int done_wait(struct done *d, int n, int timeout_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&d->mu);
    while (d->count < n) {
        if (pthread_cond_timedwait(&d->cv, &d->mu, &ts) != 0)
            break;
    }
    int c = d->count;
    pthread_mutex_unlock(&d->mu);
    return c;
}

/* A deterministic byte pattern from (seed, absolute offset). */
static inline uint8_t pat(uint64_t seed, uint64_t off)
{
    uint64_t x = (seed ^ (off * 0x9E3779B97F4A7C15ull)) + off;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    return (uint8_t)x;
}

static inline void fill(void *p, size_t len, uint64_t seed, uint64_t base)
{
    uint8_t *b = p;
    for (size_t i = 0; i < len; i++)
        b[i] = pat(seed, base + i);
}

static inline int check_fill(const void *p, size_t len, uint64_t seed, uint64_t base)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < len; i++)
        if (b[i] != pat(seed, base + i))
            return 0;
    return 1;
}

static inline uint64_t xorshift(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* A plain listening socket on an ephemeral loopback port (a fake or silent peer). */
static inline int raw_listener(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(fd, 8) == 0);
    socklen_t sl = sizeof(sa);
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    *port = ntohs(sa.sin_port);
    return fd;
}

#ifdef PDR_TRANSPORT_H
/* A completion that also records which backend moved the room (pdr_xfer_push_ex / pull_ex). */
struct info_done {
    struct done d;
    char backend[16];
    uint64_t usec;
};

static inline void info_cb(void *arg, uint64_t room, const pdr_xfer_info_t *info)
{
    struct info_done *x = arg;
    snprintf(x->backend, sizeof(x->backend), "%s", info->backend);
    x->usec = info->usec;
    done_cb(&x->d, room, info->status, info->bytes);
}
#endif

/* Bytes the kernel has received on this process's TCP sockets connected to 127.0.0.1:port (found through
 * /proc/self/fd and getpeername). "A transfer is under way" read from it, not from a destination buffer
 * that the engine's threads are writing (a data race for ThreadSanitizer, and for the memory model). */
static inline uint64_t tcp_received_from(int port)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return 0;
    uint64_t sum = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char *end;
        long fd = strtol(e->d_name, &end, 10);
        if (*end != '\0' || fd < 0 || fd == dirfd(d))
            continue;
        struct sockaddr_in sa;
        socklen_t sl = sizeof(sa);
        struct tcp_info ti;
        socklen_t tl = sizeof(ti);
        if (getpeername((int)fd, (struct sockaddr *)&sa, &sl) == 0 && sa.sin_family == AF_INET &&
            ntohs(sa.sin_port) == port && getsockopt((int)fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) == 0)
            sum += ti.tcpi_bytes_received;
    }
    closedir(d);
    return sum;
}

#endif
