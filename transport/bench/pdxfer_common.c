/*
 * What pdxfer-bench's target and initiator share: time, errors and addresses; the data pattern; host or
 * device memory and the engine; the bounded completion queue the engine's callbacks feed; the control
 * socket's lines. The design is in pdxfer_bench.c's header comment.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "gpu_cuda.h"
#include "err.h"
#include "pdxfer_internal.h"
#include "transport.h"
#include "util.h"

const char *const pdx__verify_names[] = {"off", "sample", "full"};

volatile sig_atomic_t pdx__stop_flag;

double pdx__now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

double pdx__cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           (double)ru.ru_stime.tv_usec / 1e6;
}

void pdx__die(const char *what, int err)
{
    fprintf(stderr, "pdxfer-bench: %s: %s\n", what, err ? pdr_strerror(err) : "failed");
    exit(2);
}

/* ---- Addresses. ---- */

/* "HOST:PORT" or "[v6]:PORT" into host (a copy) and port (required, 1-65534). */
int pdx__split_hostport(const char *s, char *host, size_t hlen, int *port)
{
    pdr_hostport_t hp;
    if (pdr_split_hostport(s, strlen(s), &hp) != 0 || hp.port == NULL || hp.hlen == 0 || hp.hlen >= hlen)
        return -1;
    memcpy(host, hp.host, hp.hlen);
    host[hp.hlen] = '\0';
    char digits[8];
    if (hp.plen == 0 || hp.plen >= sizeof(digits))
        return -1;
    memcpy(digits, hp.port, hp.plen);
    digits[hp.plen] = '\0';
    char *end;
    errno = 0;
    long p = strtol(digits, &end, 10);
    if (errno != 0 || *end != '\0' || p < 1 || p > 65534)
        return -1;
    *port = (int)p;
    return 0;
}

/* ---- The data pattern: 64-bit words derived from (block, word index). ---- */

/* Seed block + 1 of the pattern that transport/cuda.c's kernels also write and compare on the device. */
uint64_t pdx__pattern_word(uint64_t block, uint64_t word)
{
    return pdr__cuda_pattern_word(block + 1, word);
}

static void fill_block(unsigned char *p, size_t len, uint64_t block)
{
    for (size_t w = 0; w < len / 8; w++) {
        uint64_t v = pdx__pattern_word(block, w);
        memcpy(p + w * 8, &v, 8);
    }
}

/* Offsets of the sampled words in a block: first, last and evenly spaced ones between. */
size_t pdx__sample_offset(size_t block, unsigned i, unsigned n)
{
    size_t words = block / 8;
    return n <= 1 ? 0 : (size_t)((words - 1) * (unsigned long long)i / (n - 1)) * 8;
}

/* ---- Memory (host or device). ---- */

int pdx__is_cuda(const struct args *a)
{
    return strcmp(a->mem, "cuda") == 0 || strcmp(a->mem, "cuda_vmm") == 0;
}

/* --mem cuda_vmm: device memory from cuMemCreate (as PyTorch's expandable segments), exportable as a
 * file descriptor; CUDA IPC then shares it through the fd server. Its mapping sizes, to free it. */
static struct {
    void *p;
    size_t len;
} vmm_allocs[4];

void *pdx__mem_alloc(const struct args *a, size_t len)
{
    void *p = NULL;
    if (strcmp(a->mem, "cuda_vmm") == 0) {
        size_t alen = 0;
        int rc = pdr__cuda_vmm_alloc(a->device, len, &p, &alen);
        for (size_t i = 0; rc == 0 && i < sizeof(vmm_allocs) / sizeof(vmm_allocs[0]); i++) {
            if (vmm_allocs[i].p == NULL) {
                vmm_allocs[i].p = p;
                vmm_allocs[i].len = alen;
                return p;
            }
        }
        fprintf(stderr, "pdxfer-bench: VMM allocation of %zu bytes on device %d: %s (%s)\n", len, a->device,
                pdr_strerror(rc != 0 ? rc : PDR_ETOOBIG), pdr__cuda_last_error());
        exit(2);
    }
    if (pdx__is_cuda(a)) {
        int rc = pdr__cuda_mem_alloc(len, &p);
        if (rc != 0) {
            fprintf(stderr, "pdxfer-bench: cuMemAlloc(%zu) on device %d: %s (%s)\n", len, a->device,
                    pdr_strerror(rc), pdr__cuda_last_error());
            exit(2);
        }
        return p;
    }
    if (posix_memalign(&p, 4096, len) != 0)
        pdx__die("host buffer", PDR_ENOMEM);
    memset(p, 0, len); /* fault the pages in before measuring */
    return p;
}

void pdx__mem_free(const struct args *a, void *p)
{
    for (size_t i = 0; p != NULL && i < sizeof(vmm_allocs) / sizeof(vmm_allocs[0]); i++) {
        if (vmm_allocs[i].p == p) {
            pdr__cuda_vmm_free(p, vmm_allocs[i].len);
            vmm_allocs[i].p = NULL;
            return;
        }
    }
    if (pdx__is_cuda(a))
        pdr__cuda_mem_free(p);
    else
        free(p);
}

void pdx__cuda_setup(const struct args *a)
{
    if (!pdx__is_cuda(a))
        return;
    if (pdr__cuda_init() != 0) {
        fprintf(stderr, "pdxfer-bench: --mem cuda: GPU disabled: %s\n", pdr__cuda_init_error());
        exit(2);
    }
    int rc = pdr__cuda_bind(a->device);
    if (rc != 0) {
        fprintf(stderr, "pdxfer-bench: device %d: %s (%s)\n", a->device, pdr_strerror(rc),
                pdr__cuda_last_error());
        exit(2);
    }
}

/* Writes the patterns of blocks 0..nblocks-1 into buf; device memory on the device (the calling thread
 * is bound). Returns once every byte is in place: the engine's copies run on streams of their own (in
 * another process, for CUDA IPC) that nothing orders after the fill. */
void pdx__fill_buffer(const struct args *a, unsigned char *buf, size_t block, long nblocks)
{
    if (!pdx__is_cuda(a)) {
        for (long k = 0; k < nblocks; k++)
            fill_block(buf + (size_t)k * block, block, (uint64_t)k);
        return;
    }
    void *stream = NULL;
    int rc = pdr__cuda_stream_create(&stream);
    for (long k = 0; k < nblocks && rc == 0; k++)
        rc = pdr__cuda_pattern_fill(buf + (size_t)k * block, block, (uint64_t)k + 1, 0, stream);
    if (rc == 0)
        rc = pdr__cuda_stream_sync(stream);
    if (rc != 0) {
        fprintf(stderr, "pdxfer-bench: pattern fill on device %d: %s (%s)\n", a->device, pdr_strerror(rc),
                pdr__cuda_last_error());
        exit(2);
    }
    pdr__cuda_stream_destroy(stream);
}

pdr_xfer_engine_t *pdx__make_engine(const struct args *a, const char *host, int port)
{
    pdr_xfer_opts_t o;
    memset(&o, 0, sizeof(o));
    o.listen_host = host;
    o.listen_port = port;
    o.chunk_bytes = a->chunk_bytes;
    o.io_threads = a->io_threads;
    o.conns_per_peer = a->conns;
    o.staging_chunks = a->staging_chunks;
    o.backend = a->backend;
    o.default_timeout_ms = a->timeout_ms;
    int err = 0;
    pdr_xfer_engine_t *eng = pdr_xfer_engine_create(&o, &err);
    if (eng == NULL)
        pdx__die("engine", err);
    return eng;
}

void pdx__queue_init(struct queue *q, size_t cap)
{
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    q->ring = calloc(cap, sizeof(*q->ring));
    if (q->ring == NULL)
        pdx__die("queue", PDR_ENOMEM);
    q->cap = cap;
    q->head = q->len = 0;
}

void pdx__queue_fini(struct queue *q)
{
    free(q->ring);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
}

static void queue_put(struct queue *q, const struct done *d)
{
    pthread_mutex_lock(&q->mu);
    if (q->len < q->cap) /* the capacity is the number of rooms in flight: never full */
        q->ring[(q->head + q->len++) % q->cap] = *d;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

/* Waits up to ms for an entry; 0 when one was taken. */
int pdx__queue_get(struct queue *q, struct done *d, int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&q->mu);
    while (q->len == 0)
        if (pthread_cond_timedwait(&q->cv, &q->mu, &ts) == ETIMEDOUT)
            break;
    int rc = -1;
    if (q->len > 0) {
        *d = q->ring[q->head];
        q->head = (q->head + 1) % q->cap;
        q->len--;
        rc = 0;
    }
    pthread_mutex_unlock(&q->mu);
    return rc;
}

void pdx__on_info(void *arg, uint64_t room, const pdr_xfer_info_t *info)
{
    struct done d = {.room = room,
                     .bytes = info->bytes,
                     .usec = info->usec,
                     .status = info->status,
                     .backend = info->backend};
    queue_put(arg, &d);
}

uint64_t pdx__room_id(unsigned session, unsigned tid, uint64_t seq)
{
    return ((uint64_t)(session & 0xffff) << 48) | ((uint64_t)(tid & 0xffff) << 32) | (seq & 0xffffffffull);
}

/* ---- Control socket: one line at a time. ---- */

int pdx__ctl_send(int fd, const char *line)
{
    size_t len = strlen(line), off = 0;
    while (off < len) {
        ssize_t n = send(fd, line + off, len - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        off += (size_t)n;
    }
    return 0;
}

/* Reads one '\n'-terminated line (without it); -1 on EOF/error/timeout, -2 on pdx__stop_flag when
 * stoppable. */
int pdx__ctl_recv(int fd, char *buf, size_t len, int timeout_ms, int stoppable)
{
    size_t n = 0;
    double deadline = pdx__now_s() + timeout_ms / 1000.0;
    while (n + 1 < len) {
        if (stoppable && pdx__stop_flag)
            return -2;
        double left = deadline - pdx__now_s();
        if (timeout_ms >= 0 && left <= 0)
            return -1;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int pr = poll(&p, 1, 200);
        if (pr < 0 && errno != EINTR)
            return -1;
        if (pr <= 0)
            continue;
        ssize_t r = recv(fd, buf + n, 1, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        if (buf[n] == '\n') {
            buf[n] = '\0';
            return 0;
        }
        n++;
    }
    return -1;
}

/* Parses "key=value" out of a control line as an unsigned number. */
int pdx__ctl_field(const char *line, const char *key, unsigned long long *out)
{
    size_t kl = strlen(key);
    for (const char *p = line; (p = strstr(p, key)) != NULL; p++) {
        if ((p == line || p[-1] == ' ') && p[kl] == '=') {
            char *end;
            errno = 0;
            *out = strtoull(p + kl + 1, &end, 10);
            return errno == 0 && end != p + kl + 1 && (*end == ' ' || *end == '\0') ? 0 : -1;
        }
    }
    return -1;
}

int pdx__tcp_socket(const char *host, int port, int listening)
{
    char ps[16];
    snprintf(ps, sizeof(ps), "%d", port);
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = listening ? AI_PASSIVE : 0;
    if (getaddrinfo(host, ps, &hints, &res) != 0)
        return -1;
    int fd = -1;
    for (struct addrinfo *ai = res; ai != NULL && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0)
            continue;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        int ok = listening ? bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 8) == 0
                           : connect(fd, ai->ai_addr, ai->ai_addrlen) == 0;
        if (!ok) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    return fd;
}

int pdx__cmp_u32(const void *x, const void *y)
{
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    return a < b ? -1 : a > b;
}
