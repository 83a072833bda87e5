/*
 * pdxfer-bench — the transport benchmark (in the spirit of mooncake's transfer_engine_bench, in our
 * push/pull model). Uses only the public API of transport.h, plus transport/gpu_cuda.h to allocate GPU
 * memory.
 *
 *   pdxfer-bench --mode target --listen HOST:PORT [--backend B] [--mem host|cuda] [--device N] [--json]
 *   pdxfer-bench --mode initiator --peer HOST:PORT --backend tcp|rdma|cuda_ipc|auto --mem host|cuda
 *                --block-size BYTES --batch N --threads N --conns N --duration SECONDS [--json]
 *                [--verify full|sample|off] [--device N] [--staging-chunks N] [--chunk-bytes N]
 *                [--io-threads N] [--timeout-ms N] [--parts N] [--compute-us US]
 *   pdxfer-bench --mode copytest --mem cuda [--device N] [--peer-device M] [--block-size BYTES]
 *                [--duration SECONDS] [--json]
 *
 * Design. The target's engine listens on PORT; a control socket listens on PORT+1. A session:
 *  1. The initiator connects to the control port and sends "PDXFER 2 threads=T batch=B block=S\n". The
 *     target allocates B + 1 blocks of S bytes (host, or device memory on --device), fills block k with
 *     a pattern derived from k (on the device for device memory), waits until the pattern is in place,
 *     registers the buffer, and answers "OK session=N blocks=B+1\n".
 *  2. Room ids are (N << 48) | (t << 32) | seq for worker t in [0, T) and seq = 0, 1, 2, ...; room seq
 *     carries block seq % (B + 1). The target offers (pushes) seq 0..B-1 of every worker at once, and
 *     each time a push completes (successfully or not) it offers seq + B of the same worker. The
 *     initiator's worker t pulls seq 0..B-1 at once, seq into destination slot seq % B, and on each
 *     completion verifies the slot and pulls seq + B. Both sides thus keep T x B rooms in flight and agree
 *     on which rooms exist without any per-room control traffic; a failed room fails on both sides and
 *     both move on. Consecutive rooms of a slot carry different blocks (seq and seq + B differ mod B + 1),
 *     so a byte a room did not write still holds the previous room's pattern and fails verification:
 *     the initiator never writes a destination after setting it to zero once, before the first pull.
 *  3. After --duration seconds the initiator stops posting, waits for its pulls in flight, and sends
 *     "BYE\n". The target cancels the rooms it still offers (T x B), drains their callbacks and answers
 *     "STATS transfers=X failures=Y staging_peak=Z\n", which the initiator reports next to its own numbers.
 *     The target then waits for the next session (a script can run many rounds against one target), and
 *     prints its totals on SIGINT/SIGTERM.
 * Streamed offers (--parts N, --compute-us C, given to the initiator, which passes them in its hello):
 * the target simulates a prefill that computes each room for C µs. With --parts N it opens the room with
 * pdr_xfer_push_open and publishes part k (block bytes [k·S/N, (k+1)·S/N)) at open + (k+1)·C/N, so part k
 * moves while part k+1 is "computed"; with --parts 0 (the whole offer) it posts pdr_xfer_push at open + C.
 * The target then reports the tail after compute: per room, the time from the end of its compute (the
 * last part published, or the whole push posted) to the push's completion, p50 and p99.
 * Reported: GB/s (10^9 bytes/s of successfully pulled bytes over the wall time from the first post to the
 * last completion, verification included), per-transfer latency p50/p99 (the engine's post-to-completion
 * time of successful pulls), CPU seconds of the process (getrusage user+sys over the run), the seconds
 * the workers spent verifying, and pdr_xfer_get_stats().staging_peak_bytes on both sides.
 * Verification (--verify): full compares every byte of every room, on the device for device memory (a
 * compare kernel on the worker's stream) and on the CPU for host memory; sample compares 17 words (3 for
 * device memory) at fixed offsets; off compares nothing. The default is full for device memory and
 * sample for host memory. A verify error or a failed room on either side makes the initiator exit 1.
 *
 * copytest mode measures the copy rates the GPU paths are bounded by: pinned H2D/D2H whole and in 1 MiB
 * and 64 KiB pieces, pageable D2H, device-local d2d, and with a second device cuMemcpyPeerAsync and a
 * unified-address d2d copy (the CUDA IPC reference).
 *
 * Threads: main (arguments, control socket, reporting), the engine's I/O threads (callbacks only enqueue),
 * on the initiator T worker threads, on the target one offer thread per session.
 */
#define _GNU_SOURCE /* accept4 */
#include <errno.h>
#include <fcntl.h>
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
#include "transport.h"
#include "util.h"

#define MAX_SAMPLES (1u << 20) /* latency samples kept per worker (reservoir beyond) */
#define CTL_LINE 256

struct args {
    const char *mode, *listen, *peer, *backend, *mem;
    int device, peer_device, threads, conns, io_threads, json, verify; /* verify: enum verify_mode */
    long batch;
    size_t block, chunk_bytes, staging_chunks;
    double duration;
    uint32_t timeout_ms;
    int parts;       /* streamed offers: parts per room (0: the whole offer) */
    long compute_us; /* simulated compute per room on the target */
};

enum verify_mode { VERIFY_AUTO = -1, VERIFY_OFF, VERIFY_SAMPLE, VERIFY_FULL };
static const char *const verify_names[] = {"off", "sample", "full"};

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           (double)ru.ru_stime.tv_usec / 1e6;
}

static void die(const char *what, int err)
{
    fprintf(stderr, "pdxfer-bench: %s: %s\n", what, err ? pdr_strerror(err) : "failed");
    exit(2);
}

/* ---- Numbers and addresses. ---- */

/* A non-negative integer with an optional k/m/g suffix (binary). */
static int parse_size(const char *s, unsigned long long max, unsigned long long *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || s[0] == '-')
        return -1;
    unsigned shift = 0;
    if (*end == 'k' || *end == 'K')
        shift = 10;
    else if (*end == 'm' || *end == 'M')
        shift = 20;
    else if (*end == 'g' || *end == 'G')
        shift = 30;
    if (shift != 0)
        end++;
    if (*end != '\0' || v > (max >> shift))
        return -1;
    *out = v << shift;
    return 0;
}

static long need_int(const char *flag, const char *v, long lo, long hi)
{
    unsigned long long x;
    if (v == NULL || parse_size(v, (unsigned long long)hi, &x) != 0 || (long long)x < lo) {
        fprintf(stderr, "pdxfer-bench: %s wants an integer in [%ld, %ld]\n", flag, lo, hi);
        exit(2);
    }
    return (long)x;
}

/* "HOST:PORT" or "[v6]:PORT" into host (a copy) and port (required, 1-65534). */
static int split_hostport(const char *s, char *host, size_t hlen, int *port)
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
static uint64_t pattern_word(uint64_t block, uint64_t word)
{
    return pdr__cuda_pattern_word(block + 1, word);
}

static void fill_block(unsigned char *p, size_t len, uint64_t block)
{
    for (size_t w = 0; w < len / 8; w++) {
        uint64_t v = pattern_word(block, w);
        memcpy(p + w * 8, &v, 8);
    }
}

/* Offsets of the sampled words in a block: first, last and evenly spaced ones between. */
static size_t sample_offset(size_t block, unsigned i, unsigned n)
{
    size_t words = block / 8;
    return n <= 1 ? 0 : (size_t)((words - 1) * (unsigned long long)i / (n - 1)) * 8;
}

/* ---- Memory (host or device). ---- */

static int is_cuda(const struct args *a)
{
    return strcmp(a->mem, "cuda") == 0 || strcmp(a->mem, "cuda_vmm") == 0;
}

/* --mem cuda_vmm: device memory from cuMemCreate (as PyTorch's expandable segments), exportable as a
 * file descriptor; CUDA IPC then shares it through the fd server. Its mapping sizes, to free it. */
static struct {
    void *p;
    size_t len;
} vmm_allocs[4];

static void *mem_alloc(const struct args *a, size_t len)
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
    if (is_cuda(a)) {
        int rc = pdr__cuda_mem_alloc(len, &p);
        if (rc != 0) {
            fprintf(stderr, "pdxfer-bench: cuMemAlloc(%zu) on device %d: %s (%s)\n", len, a->device,
                    pdr_strerror(rc), pdr__cuda_last_error());
            exit(2);
        }
        return p;
    }
    if (posix_memalign(&p, 4096, len) != 0)
        die("host buffer", PDR_ENOMEM);
    memset(p, 0, len); /* fault the pages in before measuring */
    return p;
}

static void mem_free(const struct args *a, void *p)
{
    for (size_t i = 0; p != NULL && i < sizeof(vmm_allocs) / sizeof(vmm_allocs[0]); i++) {
        if (vmm_allocs[i].p == p) {
            pdr__cuda_vmm_free(p, vmm_allocs[i].len);
            vmm_allocs[i].p = NULL;
            return;
        }
    }
    if (is_cuda(a))
        pdr__cuda_mem_free(p);
    else
        free(p);
}

static void cuda_setup(const struct args *a)
{
    if (!is_cuda(a))
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
static void fill_buffer(const struct args *a, unsigned char *buf, size_t block, long nblocks)
{
    if (!is_cuda(a)) {
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

static pdr_xfer_engine_t *make_engine(const struct args *a, const char *host, int port)
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
        die("engine", err);
    return eng;
}

/* ---- A bounded completion queue: engine callbacks enqueue, a bench thread dequeues. ---- */

struct done {
    uint64_t room, bytes, usec;
    int status;
    const char *backend;
};

struct queue {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct done *ring;
    size_t cap, head, len;
};

static void queue_init(struct queue *q, size_t cap)
{
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    q->ring = calloc(cap, sizeof(*q->ring));
    if (q->ring == NULL)
        die("queue", PDR_ENOMEM);
    q->cap = cap;
    q->head = q->len = 0;
}

static void queue_fini(struct queue *q)
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
static int queue_get(struct queue *q, struct done *d, int ms)
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

static void on_info(void *arg, uint64_t room, const pdr_xfer_info_t *info)
{
    struct done d = {.room = room,
                     .bytes = info->bytes,
                     .usec = info->usec,
                     .status = info->status,
                     .backend = info->backend};
    queue_put(arg, &d);
}

static uint64_t room_id(unsigned session, unsigned tid, uint64_t seq)
{
    return ((uint64_t)(session & 0xffff) << 48) | ((uint64_t)(tid & 0xffff) << 32) | (seq & 0xffffffffull);
}

/* ---- Control socket: one line at a time. ---- */

static int ctl_send(int fd, const char *line)
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

/* Reads one '\n'-terminated line (without it); -1 on EOF/error/timeout, -2 on stop_flag when stoppable. */
static int ctl_recv(int fd, char *buf, size_t len, int timeout_ms, int stoppable)
{
    size_t n = 0;
    double deadline = now_s() + timeout_ms / 1000.0;
    while (n + 1 < len) {
        if (stoppable && stop_flag)
            return -2;
        double left = deadline - now_s();
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
static int ctl_field(const char *line, const char *key, unsigned long long *out)
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

static int tcp_socket(const char *host, int port, int listening)
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

/* ---- Target. ---- */

static int cmp_u32(const void *x, const void *y);

struct target_session {
    pdr_xfer_engine_t *eng;
    struct queue q;
    unsigned session, threads;
    long batch, nblocks; /* nblocks = batch + 1 blocks in buf */
    size_t block;
    unsigned char *buf;
    uint64_t *pending; /* [threads * batch]: room offered in that slot, or UINT64_MAX */
    volatile int stop;
    uint64_t transfers, failures, bytes;
    /* Streamed offers and simulated compute (--parts, --compute-us): one stream per slot. */
    int parts;
    double compute_s;
    struct stream {
        uint64_t room; /* UINT64_MAX: nothing left to publish */
        pdr_xfer_seg_t seg;
        int next;          /* the next part to publish (the whole push when parts is 0) */
        double due, t_end; /* when it is due; when the compute ended (0: not yet) */
    } * st;
    uint32_t *tail; /* µs from the end of compute to completion, successful rooms */
    size_t ntail;
};

/* Publishes what is due of slot i's stream at time now (everything when now is 0). 0, or the code of a
 * refused call (the room's callback will not run then: the caller counts it failed). */
static int stream_step(struct target_session *s, size_t i, double now)
{
    struct stream *st = &s->st[i];
    int n = s->parts > 0 ? s->parts : 1;
    while (st->room != UINT64_MAX && (now == 0 || st->due <= now)) {
        int rc;
        if (s->parts == 0) {
            rc = pdr_xfer_push_ex(s->eng, st->room, &st->seg, 1, 0, on_info, &s->q);
        } else {
            size_t lo = st->seg.len * (size_t)st->next / (size_t)n,
                   hi = st->seg.len * (size_t)(st->next + 1) / (size_t)n;
            pdr_xfer_seg_t part = {(unsigned char *)st->seg.addr + lo, hi - lo};
            rc = hi > lo ? pdr_xfer_push_part(s->eng, st->room, lo, &part, 1) : 0;
        }
        st->next++;
        st->due += s->compute_s / n;
        if (st->next == n) {
            st->t_end = now_s();
            st->room = UINT64_MAX;
        }
        if (rc != 0 && (s->parts == 0 || rc != PDR_ENOROOM)) {
            st->room = UINT64_MAX;
            return rc;
        }
    }
    return 0;
}

/* Runs every stream that is due; returns the ms until the next one (at most 100). */
static int streams_run(struct target_session *s, double now, size_t *refused)
{
    double next = now + 0.1;
    for (size_t i = 0; s->st != NULL && i < (size_t)s->threads * (size_t)s->batch; i++) {
        if (s->st[i].room == UINT64_MAX)
            continue;
        if (stream_step(s, i, s->stop ? 0 : now) != 0) {
            s->failures++;
            s->pending[i] = UINT64_MAX;
            (*refused)++;
        }
        if (s->st[i].room != UINT64_MAX && s->st[i].due < next)
            next = s->st[i].due;
    }
    double ms = (next - now) * 1000;
    return ms <= 0 ? 0 : (int)ms;
}

static int offer_one(struct target_session *s, unsigned tid, uint64_t seq)
{
    size_t slot = (size_t)tid * (size_t)s->batch + (size_t)(seq % (uint64_t)s->batch);
    pdr_xfer_seg_t seg = {.addr = s->buf + (size_t)(seq % (uint64_t)s->nblocks) * s->block, .len = s->block};
    uint64_t room = room_id(s->session, tid, seq);
    s->pending[slot] = room;
    int rc = 0;
    if (s->st != NULL) {
        /* Simulated compute: the stream publishes the room (in parts, or whole) as it becomes due. */
        struct stream *st = &s->st[slot];
        double now = now_s();
        if (s->parts > 0)
            rc = pdr_xfer_push_open(s->eng, room, seg.len, 0, on_info, &s->q);
        if (rc == 0) {
            st->room = room;
            st->seg = seg;
            st->next = 0;
            st->t_end = 0;
            st->due = now + s->compute_s / (s->parts > 0 ? s->parts : 1);
            rc = stream_step(s, slot, now);
        }
    } else {
        rc = pdr_xfer_push_ex(s->eng, room, &seg, 1, 0, on_info, &s->q);
    }
    if (rc != 0) {
        s->pending[slot] = UINT64_MAX;
        s->failures++;
        if (s->failures <= 5)
            fprintf(stderr, "target: push of room %u/%llu refused: %s\n", tid, (unsigned long long)seq,
                    pdr_errname(rc));
    }
    return rc;
}

/* Offers seq of worker tid; when the engine refuses it outright, the next rooms of the same slot (the
 * initiator moves on too once its pull of a never-offered room times out). 0 when one is in flight. */
static int offer(struct target_session *s, unsigned tid, uint64_t seq)
{
    for (; !s->stop && seq <= 0xffffffffull; seq += (uint64_t)s->batch) {
        if (offer_one(s, tid, seq) == 0)
            return 0;
        usleep(1000);
    }
    return -1;
}

static void *target_offer_main(void *arg)
{
    struct target_session *s = arg;
    size_t inflight = 0;
    for (unsigned t = 0; t < s->threads; t++)
        for (long k = 0; k < s->batch; k++)
            if (offer(s, t, (uint64_t)k) == 0)
                inflight++;
    int canceled = 0;
    while (inflight > 0) {
        size_t refused = 0;
        int wait_ms = streams_run(s, now_s(), &refused); /* at stop: everything left is published now */
        inflight -= refused;
        if (inflight == 0)
            break;
        if (s->stop && !canceled) {
            for (size_t i = 0; i < (size_t)s->threads * (size_t)s->batch; i++)
                if (s->pending[i] != UINT64_MAX)
                    (void)pdr_xfer_cancel(s->eng, s->pending[i]);
            canceled = 1;
        }
        struct done d;
        if (queue_get(&s->q, &d, s->st != NULL ? wait_ms : 100) != 0)
            continue;
        inflight--;
        unsigned tid = (unsigned)((d.room >> 32) & 0xffff);
        uint64_t seq = d.room & 0xffffffffull;
        size_t slot = (size_t)tid * (size_t)s->batch + (size_t)(seq % (uint64_t)s->batch);
        s->pending[slot] = UINT64_MAX;
        if (s->st != NULL && s->st[slot].room == d.room)
            s->st[slot].room = UINT64_MAX; /* failed before its last part */
        if (d.status == 0) {
            s->transfers++;
            s->bytes += d.bytes;
            if (s->st != NULL && s->st[slot].t_end > 0 && s->ntail < MAX_SAMPLES) {
                double us = (now_s() - s->st[slot].t_end) * 1e6;
                s->tail[s->ntail++] = us < 0 ? 0 : (uint32_t)us;
            }
        } else if (!(s->stop && (d.status == PDR_ECANCELED || d.status == PDR_ECLOSED))) {
            s->failures++;
            if (s->failures <= 5)
                fprintf(stderr, "target: room %u/%llu failed: %s\n", tid, (unsigned long long)seq,
                        pdr_errname(d.status));
            usleep(1000); /* a failing path fails fast: do not turn the run into a busy loop */
        }
        /* 2^32 rooms per worker and session: far beyond any run's length. */
        if (!s->stop && seq + (uint64_t)s->batch <= 0xffffffffull &&
            offer(s, tid, seq + (uint64_t)s->batch) == 0)
            inflight++;
    }
    return NULL;
}

static int run_target(const struct args *a)
{
    char host[256];
    int port;
    if (a->listen == NULL || split_hostport(a->listen, host, sizeof(host), &port) != 0) {
        fprintf(stderr,
                "pdxfer-bench: --mode target needs --listen HOST:PORT (PORT+1 is the control port)\n");
        return 2;
    }
    cuda_setup(a);
    pdr_xfer_engine_t *eng = make_engine(a, host, port);
    int lfd = tcp_socket(host, port + 1, 1);
    if (lfd < 0) {
        fprintf(stderr, "pdxfer-bench: cannot listen on %s:%d (control): %s\n", host, port + 1,
                strerror(errno));
        return 2;
    }
    printf("target: data %s:%d control %s:%d backend=%s mem=%s device=%d\n", host, pdr_xfer_listen_port(eng),
           host, port + 1, a->backend, a->mem, a->device);
    fflush(stdout);

    unsigned char *buf = NULL;
    size_t buflen = 0;
    unsigned session = 0;
    uint64_t tot_transfers = 0, tot_failures = 0;
    while (!stop_flag) {
        struct pollfd p = {.fd = lfd, .events = POLLIN};
        if (poll(&p, 1, 200) <= 0)
            continue;
        int cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (cfd < 0)
            continue;
        char line[CTL_LINE];
        unsigned long long th = 0, ba = 0, bl = 0, np = 0, cus = 0;
        if (ctl_recv(cfd, line, sizeof(line), 5000, 1) != 0 || strncmp(line, "PDXFER 2 ", 9) != 0 ||
            ctl_field(line, "threads", &th) != 0 || ctl_field(line, "batch", &ba) != 0 ||
            ctl_field(line, "block", &bl) != 0 || th < 1 || th > 4096 || ba < 1 || ba > 65536 || bl < 8 ||
            bl % 8 != 0 || bl > (1ull << 40) / (ba + 1)) {
            (void)ctl_send(cfd, "ERR bad hello (this target speaks PDXFER 2)\n");
            close(cfd);
            continue;
        }
        /* Optional: streamed offers and simulated compute. */
        if (ctl_field(line, "parts", &np) != 0 || np > 4096)
            np = 0;
        if (ctl_field(line, "compute_us", &cus) != 0 || cus > 100000000ull)
            cus = 0;
        unsigned long long nb = ba + 1;
        size_t need = (size_t)(nb * bl);
        if (need != buflen) {
            if (buf != NULL) {
                pdr_xfer_mem_unregister(eng, buf);
                mem_free(a, buf);
            }
            buf = mem_alloc(a, need);
            buflen = need;
            fill_buffer(a, buf, (size_t)bl, (long)nb);
            int rc =
                pdr_xfer_mem_register(eng, buf, buflen, is_cuda(a) ? PDR_XFER_MEM_CUDA : PDR_XFER_MEM_HOST);
            if (rc != 0)
                fprintf(stderr, "target: mem_register: %s\n", pdr_strerror(rc));
        } else {
            fill_buffer(a, buf, (size_t)bl, (long)nb);
        }
        session = (session + 1) & 0xffff;
        struct target_session s;
        memset(&s, 0, sizeof(s));
        s.eng = eng;
        s.session = session;
        s.threads = (unsigned)th;
        s.batch = (long)ba;
        s.nblocks = (long)nb;
        s.block = (size_t)bl;
        s.buf = buf;
        s.pending = malloc(sizeof(uint64_t) * th * ba);
        if (s.pending == NULL)
            die("pending table", PDR_ENOMEM);
        queue_init(&s.q, (size_t)(th * ba));
        s.parts = (int)np;
        s.compute_s = (double)cus / 1e6;
        if (np > 0 || cus > 0) {
            s.st = malloc(sizeof(*s.st) * th * ba);
            s.tail = malloc(sizeof(uint32_t) * MAX_SAMPLES);
            if (s.st == NULL || s.tail == NULL)
                die("streams", PDR_ENOMEM);
            for (size_t i = 0; i < th * ba; i++)
                s.st[i].room = UINT64_MAX;
        }
        char ok[64];
        snprintf(ok, sizeof(ok), "OK session=%u blocks=%llu\n", session, nb);
        pthread_t t;
        if (pthread_create(&t, NULL, target_offer_main, &s) != 0)
            die("offer thread", PDR_ENOMEM);
        (void)ctl_send(cfd, ok);
        double t0 = now_s(), c0 = cpu_s();
        int r;
        do {
            r = ctl_recv(cfd, line, sizeof(line), -1, 1); /* BYE, EOF or a signal */
        } while (r == 0 && strcmp(line, "BYE") != 0);
        s.stop = 1;
        pthread_join(t, NULL);
        double el = now_s() - t0, cpu = cpu_s() - c0;
        pdr_xfer_stats_t st;
        pdr_xfer_get_stats(eng, &st);
        char reply[CTL_LINE];
        if (s.ntail > 0) /* s.tail is NULL without parts or compute time; qsort takes no NULL */
            qsort(s.tail, s.ntail, sizeof(uint32_t), cmp_u32);
        unsigned long long tp50 = s.ntail ? s.tail[(s.ntail - 1) / 2] : 0,
                           tp99 = s.ntail ? s.tail[(size_t)((double)(s.ntail - 1) * 0.99)] : 0;
        snprintf(reply, sizeof(reply),
                 "STATS transfers=%llu failures=%llu staging_peak=%llu cpu_ms=%llu tail_p50_us=%llu "
                 "tail_p99_us=%llu\n",
                 (unsigned long long)s.transfers, (unsigned long long)s.failures,
                 (unsigned long long)st.staging_peak_bytes, (unsigned long long)(cpu * 1000), tp50, tp99);
        if (s.st != NULL)
            printf("target: session %u: parts %d, compute %.0f us per room: tail after compute p50 %llu us, "
                   "p99 %llu us\n",
                   session, s.parts, s.compute_s * 1e6, tp50, tp99);
        (void)ctl_send(cfd, reply);
        close(cfd);
        printf("target: session %u: %u threads x %ld rooms of %zu bytes: %llu transfers, %llu failures, "
               "%.3f GB/s, cpu %.2f s, staging peak %llu bytes\n",
               session, s.threads, s.batch, s.block, (unsigned long long)s.transfers,
               (unsigned long long)s.failures, el > 0 ? (double)s.bytes / el / 1e9 : 0.0, cpu,
               (unsigned long long)st.staging_peak_bytes);
        fflush(stdout);
        tot_transfers += s.transfers;
        tot_failures += s.failures;
        queue_fini(&s.q);
        free(s.pending);
        free(s.st);
        free(s.tail);
    }
    close(lfd);
    pdr_xfer_stats_t st;
    pdr_xfer_get_stats(eng, &st);
    printf("target: exit: %llu transfers, %llu failures, staging peak %llu bytes, cpu %.2f s\n",
           (unsigned long long)tot_transfers, (unsigned long long)tot_failures,
           (unsigned long long)st.staging_peak_bytes, cpu_s());
    if (a->json)
        printf("{\"mode\":\"target\",\"transfers\":%llu,\"failures\":%llu,\"staging_peak_bytes\":%llu,"
               "\"cpu_s\":%.3f}\n",
               (unsigned long long)tot_transfers, (unsigned long long)tot_failures,
               (unsigned long long)st.staging_peak_bytes, cpu_s());
    pdr_xfer_engine_destroy(eng);
    if (buf != NULL)
        mem_free(a, buf);
    return tot_failures == 0 ? 0 : 1;
}

/* ---- Initiator. ---- */

struct initiator;

struct worker {
    struct initiator *in;
    unsigned tid;
    pthread_t thread;
    struct queue q;
    uint64_t transfers, failures, verify_errors, bad_words, bytes;
    double verify_s;
    uint32_t *lat; /* microseconds, capped at UINT32_MAX */
    size_t nlat, seen;
    uint64_t rng;
    const char *backend_used;
    void *stream, *scratch; /* device memory, --verify full: the compare kernel's stream and result */
};

struct initiator {
    const struct args *a;
    pdr_xfer_engine_t *eng;
    char host[256];
    int port;
    unsigned session;
    unsigned char *dst; /* threads * batch slots of block bytes */
    double end;
    struct worker *w;
};

static unsigned sample_count(const struct args *a)
{
    return is_cuda(a) ? 3 : 17;
}

static unsigned char *slot_of(struct worker *w, uint64_t seq)
{
    const struct args *a = w->in->a;
    size_t slot = (size_t)w->tid * (size_t)a->batch + (size_t)(seq % (uint64_t)a->batch);
    return w->in->dst + slot * a->block;
}

/* The block room seq carries (the target holds batch + 1 of them). */
static uint64_t block_of(const struct args *a, uint64_t seq)
{
    return seq % ((uint64_t)a->batch + 1);
}

/* One word of a destination slot, read back to the host. */
static uint64_t read_word(const struct args *a, const unsigned char *p)
{
    uint64_t v = 0;
    if (is_cuda(a)) {
        if (pdr__cuda_copy_sync(&v, p, 8) != 0)
            die("verify read-back", PDR_EIO);
    } else {
        memcpy(&v, p, 8);
    }
    return v;
}

/* What a wrong word holds: the pattern this slot held before (the room did not write it), zeros (no room
 * ever wrote it) or something else. */
static const char *mismatch_kind(const struct args *a, uint64_t seq, uint64_t word, uint64_t v)
{
    if (seq >= (uint64_t)a->batch && v == pattern_word(block_of(a, seq - (uint64_t)a->batch), word))
        return "the slot's previous room";
    return v == 0 ? "zero, never written" : "neither this room's nor the previous room's";
}

/* Compares the slot of room seq with its block. Returns the number of wrong words; *first is the index of
 * the first one. */
static uint64_t verify(struct worker *w, uint64_t seq, uint64_t *first)
{
    const struct args *a = w->in->a;
    const unsigned char *p = slot_of(w, seq);
    uint64_t block = block_of(a, seq), bad = 0;
    *first = UINT64_MAX;
    if (a->verify == VERIFY_FULL && is_cuda(a)) {
        struct pdr_cuda_check ck;
        int rc = pdr__cuda_pattern_check(p, a->block, block + 1, 0, w->scratch, w->stream, &ck);
        if (rc != 0) {
            fprintf(stderr, "pdxfer-bench: compare kernel on device %d: %s (%s)\n", a->device,
                    pdr_strerror(rc), pdr__cuda_last_error());
            exit(2);
        }
        *first = ck.first_bad;
        return ck.mismatches;
    }
    if (a->verify == VERIFY_FULL) {
        for (size_t off = 0; off < a->block; off += 8) {
            uint64_t v;
            memcpy(&v, p + off, 8);
            if (v != pattern_word(block, off / 8) && bad++ == 0)
                *first = off / 8;
        }
        return bad;
    }
    unsigned n = a->verify == VERIFY_SAMPLE ? sample_count(a) : 0;
    for (unsigned i = 0; i < n; i++) {
        size_t off = sample_offset(a->block, i, n);
        if (read_word(a, p + off) != pattern_word(block, off / 8) && bad++ == 0)
            *first = off / 8;
    }
    return bad;
}

static int post_pull(struct worker *w, uint64_t seq)
{
    struct initiator *in = w->in;
    pdr_xfer_seg_t seg = {.addr = slot_of(w, seq), .len = in->a->block};
    return pdr_xfer_pull_ex(in->eng, in->host, in->port, room_id(in->session, w->tid, seq), &seg, 1,
                            in->a->timeout_ms, on_info, &w->q);
}

static void record_latency(struct worker *w, uint64_t usec)
{
    uint32_t v = usec > UINT32_MAX ? UINT32_MAX : (uint32_t)usec;
    w->seen++;
    if (w->nlat < MAX_SAMPLES) {
        w->lat[w->nlat++] = v;
        return;
    }
    w->rng = w->rng * 6364136223846793005ull + 1442695040888963407ull; /* reservoir sampling */
    uint64_t j = (w->rng >> 11) % w->seen;
    if (j < MAX_SAMPLES)
        w->lat[j] = v;
}

static void check_room(struct worker *w, uint64_t seq)
{
    const struct args *a = w->in->a;
    double t0 = now_s();
    uint64_t first = UINT64_MAX, bad = verify(w, seq, &first);
    if (bad > 0) {
        w->bad_words += bad;
        if (w->verify_errors++ < 5) {
            uint64_t v = read_word(a, slot_of(w, seq) + first * 8);
            fprintf(stderr,
                    "initiator: room %u/%llu (block %llu): %llu wrong words of %zu; the first, word %llu, "
                    "holds %016llx, expected %016llx (%s)\n",
                    w->tid, (unsigned long long)seq, (unsigned long long)block_of(a, seq),
                    (unsigned long long)bad, a->block / 8, (unsigned long long)first, (unsigned long long)v,
                    (unsigned long long)pattern_word(block_of(a, seq), first),
                    mismatch_kind(a, seq, first, v));
        }
    }
    w->verify_s += now_s() - t0;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    const struct args *a = w->in->a;
    if (is_cuda(a) && pdr__cuda_bind(a->device) != 0)
        die("worker bind", PDR_EIO);
    if (is_cuda(a) && a->verify == VERIFY_FULL) {
        int rc = pdr__cuda_stream_create(&w->stream);
        if (rc == 0)
            rc = pdr__cuda_mem_alloc(16, &w->scratch);
        if (rc != 0)
            die("compare kernel stream", rc);
    }
    size_t inflight = 0;
    /* Posts seq, or the next seqs of this slot when posting fails (the target moves on after its timeout). */
    for (long k = 0; k < a->batch; k++) {
        for (uint64_t seq = (uint64_t)k; now_s() < w->in->end; seq += (uint64_t)a->batch) {
            if (post_pull(w, seq) == 0) {
                inflight++;
                break;
            }
            w->failures++;
            usleep(1000);
        }
    }
    while (inflight > 0) {
        struct done d;
        if (queue_get(&w->q, &d, 1000) != 0)
            continue;
        inflight--;
        uint64_t seq = d.room & 0xffffffffull;
        if (d.status == 0) {
            record_latency(w, d.usec);
            w->transfers++;
            w->bytes += d.bytes;
            if (w->backend_used == NULL)
                w->backend_used = d.backend;
            check_room(w, seq);
        } else {
            if (w->failures++ < 5)
                fprintf(stderr, "initiator: room %u/%llu failed: %s\n", w->tid, (unsigned long long)seq,
                        pdr_errname(d.status));
            usleep(10000); /* a failing path fails fast: do not turn the run into a busy loop */
        }
        for (seq += (uint64_t)a->batch; now_s() < w->in->end; seq += (uint64_t)a->batch) {
            if (post_pull(w, seq) == 0) {
                inflight++;
                break;
            }
            w->failures++;
            usleep(1000);
        }
    }
    pdr__cuda_mem_free(w->scratch);
    pdr__cuda_stream_destroy(w->stream);
    return NULL;
}

static int cmp_u32(const void *x, const void *y)
{
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    return a < b ? -1 : a > b;
}

static int run_initiator(const struct args *a)
{
    struct initiator in;
    memset(&in, 0, sizeof(in));
    in.a = a;
    if (a->peer == NULL || split_hostport(a->peer, in.host, sizeof(in.host), &in.port) != 0) {
        fprintf(stderr, "pdxfer-bench: --mode initiator needs --peer HOST:PORT\n");
        return 2;
    }
    if (a->block < 8 || a->block % 8 != 0) {
        fprintf(stderr, "pdxfer-bench: --block-size must be a positive multiple of 8\n");
        return 2;
    }
    if ((unsigned long long)a->block * (unsigned long long)a->batch * (unsigned long long)a->threads >
        (1ull << 42)) {
        fprintf(stderr, "pdxfer-bench: block-size x batch x threads is too large\n");
        return 2;
    }
    cuda_setup(a);
    in.eng = make_engine(a, NULL, 0);
    int rc;
    size_t total = a->block * (size_t)a->batch * (size_t)a->threads;
    in.dst = mem_alloc(a, total);
    /* Zeros before the first pull (host memory: mem_alloc's), so that no earlier process's pattern can
     * pass for a room's bytes. pdr__cuda_memset returns once they are in place. */
    if (is_cuda(a) && (rc = pdr__cuda_memset(in.dst, 0, total)) != 0)
        die("clearing the destination", rc);
    rc = pdr_xfer_mem_register(in.eng, in.dst, total, is_cuda(a) ? PDR_XFER_MEM_CUDA : PDR_XFER_MEM_HOST);
    if (rc != 0)
        fprintf(stderr, "initiator: mem_register: %s\n", pdr_strerror(rc));

    int cfd = tcp_socket(in.host, in.port + 1, 0);
    if (cfd < 0) {
        fprintf(stderr, "pdxfer-bench: cannot reach the target's control port %s:%d: %s\n", in.host,
                in.port + 1, strerror(errno));
        return 2;
    }
    char line[CTL_LINE];
    snprintf(line, sizeof(line), "PDXFER 2 threads=%d batch=%ld block=%zu parts=%d compute_us=%ld\n",
             a->threads, a->batch, a->block, a->parts, a->compute_us);
    unsigned long long sess = 0, nblocks = 0;
    /* The target allocates and fills its buffer before answering: allow for a large one. */
    if (ctl_send(cfd, line) != 0 || ctl_recv(cfd, line, sizeof(line), 300000, 0) != 0 ||
        strncmp(line, "OK ", 3) != 0 || ctl_field(line, "session", &sess) != 0 ||
        ctl_field(line, "blocks", &nblocks) != 0 || nblocks != (unsigned long long)a->batch + 1) {
        fprintf(stderr, "pdxfer-bench: the target refused the session (an older pdxfer-bench?)\n");
        return 2;
    }
    in.session = (unsigned)sess;

    in.w = calloc((size_t)a->threads, sizeof(*in.w));
    if (in.w == NULL)
        die("workers", PDR_ENOMEM);
    double c0 = cpu_s(), t0 = now_s();
    in.end = t0 + a->duration;
    for (int t = 0; t < a->threads; t++) {
        struct worker *w = &in.w[t];
        w->in = &in;
        w->tid = (unsigned)t;
        w->rng = 0x853c49e6748fea9bull + (uint64_t)t;
        w->lat = malloc(sizeof(uint32_t) * MAX_SAMPLES);
        if (w->lat == NULL)
            die("latency samples", PDR_ENOMEM);
        queue_init(&w->q, (size_t)a->batch);
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0)
            die("worker thread", PDR_ENOMEM);
    }
    for (int t = 0; t < a->threads; t++)
        pthread_join(in.w[t].thread, NULL);
    double el = now_s() - t0, cpu = cpu_s() - c0;

    unsigned long long tt = 0, tf = 0, tsp = 0, tcpu = 0, tp50 = 0, tp99 = 0;
    int have_target = ctl_send(cfd, "BYE\n") == 0 && ctl_recv(cfd, line, sizeof(line), 60000, 0) == 0 &&
                      strncmp(line, "STATS ", 6) == 0 && ctl_field(line, "transfers", &tt) == 0 &&
                      ctl_field(line, "failures", &tf) == 0 && ctl_field(line, "staging_peak", &tsp) == 0 &&
                      ctl_field(line, "cpu_ms", &tcpu) == 0;
    if (have_target &&
        (ctl_field(line, "tail_p50_us", &tp50) != 0 || ctl_field(line, "tail_p99_us", &tp99) != 0))
        tp50 = tp99 = 0;
    close(cfd);

    uint64_t transfers = 0, failures = 0, verr = 0, bad_words = 0, bytes = 0;
    double verify_s = 0;
    size_t nlat = 0;
    const char *used = NULL;
    for (int t = 0; t < a->threads; t++) {
        transfers += in.w[t].transfers;
        failures += in.w[t].failures;
        verr += in.w[t].verify_errors;
        bad_words += in.w[t].bad_words;
        verify_s += in.w[t].verify_s;
        bytes += in.w[t].bytes;
        nlat += in.w[t].nlat;
        if (used == NULL)
            used = in.w[t].backend_used;
    }
    uint32_t *all = malloc(sizeof(uint32_t) * (nlat ? nlat : 1));
    if (all == NULL)
        die("latency samples", PDR_ENOMEM);
    size_t n = 0;
    for (int t = 0; t < a->threads; t++) {
        memcpy(all + n, in.w[t].lat, sizeof(uint32_t) * in.w[t].nlat);
        n += in.w[t].nlat;
    }
    qsort(all, n, sizeof(uint32_t), cmp_u32);
    double p50 = n ? all[(n - 1) / 2] : 0, p99 = n ? all[(size_t)((double)(n - 1) * 0.99)] : 0;
    double gbs = el > 0 ? (double)bytes / el / 1e9 : 0;
    pdr_xfer_stats_t st;
    pdr_xfer_get_stats(in.eng, &st);

    printf("initiator: backend=%s (used %s) mem=%s block=%zu batch=%ld threads=%d conns=%d duration=%.1fs\n",
           a->backend, used ? used : "none", a->mem, a->block, a->batch, a->threads, a->conns, el);
    printf("  transfers %llu  failures %llu  verify errors %llu (verify %s: %llu wrong words, %.2f s)\n",
           (unsigned long long)transfers, (unsigned long long)failures, (unsigned long long)verr,
           verify_names[a->verify], (unsigned long long)bad_words, verify_s);
    printf("  throughput %.3f GB/s  latency p50 %.0f us  p99 %.0f us\n", gbs, p50, p99);
    if (a->parts > 0 || a->compute_us > 0)
        printf("  parts %d, compute %ld us per room: target tail after compute p50 %llu us, p99 %llu us\n",
               a->parts, a->compute_us, tp50, tp99);
    printf("  cpu %.2f s (%.2f cores)", cpu, el > 0 ? cpu / el : 0);
    if (have_target)
        printf(", target cpu %.2f s", (double)tcpu / 1000);
    printf("\n  staging peak: initiator %llu bytes", (unsigned long long)st.staging_peak_bytes);
    if (have_target)
        printf(", target %llu bytes (target: %llu transfers, %llu failures)\n", tsp, tt, tf);
    else
        printf(", target unknown (no STATS reply)\n");
    /* A run that moved nothing, lost a room or a byte on either side, or cannot tell, failed. */
    int ok = transfers > 0 && failures == 0 && verr == 0 && have_target && tf == 0;
    printf("  result: %s\n", ok ? "ok" : "FAILED");
    if (a->json)
        printf("{\"mode\":\"initiator\",\"backend\":\"%s\",\"backend_used\":\"%s\",\"mem\":\"%s\","
               "\"block_size\":%zu,\"batch\":%ld,\"threads\":%d,\"conns\":%d,\"duration_s\":%.3f,"
               "\"bytes\":%llu,\"gb_per_s\":%.4f,\"p50_us\":%.0f,\"p99_us\":%.0f,\"transfers\":%llu,"
               "\"failures\":%llu,\"verify\":\"%s\",\"verify_errors\":%llu,\"verify_bad_words\":%llu,"
               "\"verify_s\":%.3f,\"cpu_s\":%.3f,\"staging_peak_bytes\":%llu,"
               "\"target_staging_peak_bytes\":%lld,\"target_transfers\":%lld,\"target_failures\":%lld,"
               "\"target_cpu_s\":%.3f,\"parts\":%d,\"compute_us\":%ld,\"tail_p50_us\":%llu,"
               "\"tail_p99_us\":%llu,\"ok\":%s}\n",
               a->backend, used ? used : "none", a->mem, a->block, a->batch, a->threads, a->conns, el,
               (unsigned long long)bytes, gbs, p50, p99, (unsigned long long)transfers,
               (unsigned long long)failures, verify_names[a->verify], (unsigned long long)verr,
               (unsigned long long)bad_words, verify_s, cpu, (unsigned long long)st.staging_peak_bytes,
               have_target ? (long long)tsp : -1LL, have_target ? (long long)tt : -1LL,
               have_target ? (long long)tf : -1LL, have_target ? (double)tcpu / 1000 : -1.0, a->parts,
               a->compute_us, tp50, tp99, ok ? "true" : "false");
    fflush(stdout);

    pdr_xfer_engine_destroy(in.eng);
    for (int t = 0; t < a->threads; t++) {
        free(in.w[t].lat);
        queue_fini(&in.w[t].q);
    }
    free(in.w);
    free(all);
    mem_free(a, in.dst);
    return ok ? 0 : 1;
}

/* ---- copytest: the copy rates GPU transfers are bounded by. ---- */

enum copy_kind { H2D, D2H, D2D, PEER };

/* GB/s of copying `total` bytes in `piece`-byte copies on one stream, repeated for about `secs`. */
static double copy_rate(enum copy_kind k, void *dst, const void *src, size_t total, size_t piece,
                        void *stream, int dst_dev, int src_dev, double secs)
{
    double t0 = now_s(), el = 0;
    uint64_t bytes = 0;
    do {
        for (size_t off = 0; off < total; off += piece) {
            size_t n = total - off < piece ? total - off : piece;
            char *d = (char *)dst + off;
            const char *s = (const char *)src + off;
            int rc = k == H2D   ? pdr__cuda_copy_h2d_async(d, s, n, stream)
                     : k == D2H ? pdr__cuda_copy_d2h_async(d, s, n, stream)
                     : k == D2D ? pdr__cuda_copy_d2d_async(d, s, n, stream)
                                : pdr__cuda_copy_peer_async(d, dst_dev, s, src_dev, n, stream);
            if (rc != 0) {
                fprintf(stderr, "copytest: %s (%s)\n", pdr_strerror(rc), pdr__cuda_last_error());
                return -1;
            }
        }
        if (pdr__cuda_stream_sync(stream) != 0)
            return -1;
        bytes += total;
        el = now_s() - t0;
    } while (el < secs);
    return (double)bytes / el / 1e9;
}

static int run_copytest(const struct args *a)
{
    struct args ca = *a;
    ca.mem = "cuda";
    cuda_setup(&ca);
    int ndev = pdr__cuda_device_count();
    int peer = a->peer_device >= 0 ? a->peer_device : ndev > 1 ? (a->device + 1) % ndev : -1;
    size_t total = a->block ? a->block : (size_t)256 << 20;
    double secs = a->duration > 0 ? a->duration : 1.0;
    char name[128] = "", bus[32] = "";
    (void)pdr__cuda_device_name(a->device, name, sizeof(name));
    (void)pdr__cuda_pci_bus_id(a->device, bus, sizeof(bus));
    printf("copytest: device %d (%s, %s), %zu bytes per round, %.1f s per measurement\n", a->device, name,
           bus, total, secs);
    void *dev = NULL, *dev2 = NULL, *pinned = NULL, *stream = NULL, *pageable = NULL;
    int rc = pdr__cuda_mem_alloc(total, &dev);
    if (rc == 0)
        rc = pdr__cuda_mem_alloc(total, &dev2);
    if (rc == 0)
        rc = pdr__cuda_host_alloc(total, &pinned);
    if (rc == 0)
        rc = pdr__cuda_stream_create(&stream);
    if (rc != 0 || posix_memalign(&pageable, 4096, total) != 0) {
        fprintf(stderr, "copytest: allocation: %s (%s)\n", pdr_strerror(rc), pdr__cuda_last_error());
        return 2;
    }
    memset(pinned, 1, total);
    memset(pageable, 1, total);
    struct {
        const char *label;
        enum copy_kind k;
        size_t piece;
        int use_pageable;
    } tests[] = {
        {"h2d_pinned_whole", H2D, total, 0},    {"d2h_pinned_whole", D2H, total, 0},
        {"h2d_pinned_1MiB", H2D, 1 << 20, 0},   {"d2h_pinned_1MiB", D2H, 1 << 20, 0},
        {"h2d_pinned_64KiB", H2D, 64 << 10, 0}, {"d2h_pinned_64KiB", D2H, 64 << 10, 0},
        {"d2h_pageable_whole", D2H, total, 1},  {"d2h_pageable_64KiB", D2H, 64 << 10, 1},
        {"d2d_same_device", D2D, total, 0},
    };
    size_t ntests = sizeof(tests) / sizeof(tests[0]);
    double rates[16];
    for (size_t i = 0; i < ntests; i++) {
        void *host = tests[i].use_pageable ? pageable : pinned;
        void *dst = tests[i].k == H2D ? dev : tests[i].k == D2H ? host : dev2;
        const void *src = tests[i].k == H2D ? host : dev;
        rates[i] = copy_rate(tests[i].k, dst, src, total, tests[i].piece, stream, a->device, a->device, secs);
        printf("copytest %-22s %8.2f GB/s\n", tests[i].label, rates[i]);
        fflush(stdout);
    }
    double peer_rate = -1, uva_rate = -1;
    void *pdev = NULL;
    if (peer >= 0 && peer != a->device && peer < ndev) {
        if (pdr__cuda_bind(peer) == 0 && pdr__cuda_mem_alloc(total, &pdev) == 0 &&
            pdr__cuda_bind(a->device) == 0) {
            peer_rate = copy_rate(PEER, pdev, dev, total, total, stream, peer, a->device, secs);
            uva_rate = copy_rate(D2D, pdev, dev, total, total, stream, peer, a->device, secs);
            printf("copytest peer_%d_to_%d_memcpypeer   %8.2f GB/s\n", a->device, peer, peer_rate);
            printf("copytest peer_%d_to_%d_d2d_unified  %8.2f GB/s\n", a->device, peer, uva_rate);
        } else {
            printf("copytest: device %d unusable for peer copies: %s\n", peer, pdr__cuda_last_error());
        }
    } else {
        printf("copytest: one device only, no peer copy\n");
    }
    if (a->json) {
        printf("{\"mode\":\"copytest\",\"device\":%d,\"bytes\":%zu", a->device, total);
        for (size_t i = 0; i < ntests; i++)
            printf(",\"%s_gb_per_s\":%.3f", tests[i].label, rates[i]);
        printf(",\"peer_device\":%d,\"peer_memcpypeer_gb_per_s\":%.3f,\"peer_d2d_unified_gb_per_s\":%.3f}\n",
               peer, peer_rate, uva_rate);
    }
    pdr__cuda_stream_destroy(stream);
    pdr__cuda_mem_free(pdev);
    pdr__cuda_mem_free(dev);
    pdr__cuda_mem_free(dev2);
    pdr__cuda_host_free(pinned);
    free(pageable);
    return 0;
}

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage:\n"
        "  pdxfer-bench --mode target --listen HOST:PORT [--backend auto|tcp|rdma|cuda_ipc] [--mem "
        "host|cuda|cuda_vmm]\n"
        "               [--device N] [--io-threads N] [--staging-chunks N] [--chunk-bytes N] [--json]\n"
        "  pdxfer-bench --mode initiator --peer HOST:PORT --backend B --mem host|cuda|cuda_vmm\n"
        "               --block-size BYTES --batch N --threads N --conns N --duration SECONDS [--json]\n"
        "               [--verify full|sample|off] [--device N] [--staging-chunks N] [--chunk-bytes N]\n"
        "               [--io-threads N] [--timeout-ms N] [--parts N] [--compute-us US]\n"
        "  pdxfer-bench --mode copytest --mem cuda [--device N] [--peer-device M] [--block-size BYTES]\n"
        "               [--duration SECONDS] [--json]\n"
        "cuda_vmm: device memory from cuMemCreate, shared by CUDA IPC as a file descriptor.\n"
        "--verify: full compares every byte of every room (on the device for device memory), sample 17\n"
        "  words of each (3 for device memory), off nothing; default full for cuda and cuda_vmm, sample\n"
        "  for host memory. The initiator exits 1 when a room failed on either side or a byte was wrong.\n"
        "--parts N --compute-us US: the target computes each room for US microseconds and publishes it in\n"
        "  N parts as it goes (pdr_xfer_push_open/part; --parts 0: the whole offer once computed), and\n"
        "  reports the tail from the end of compute to completion.\n"
        "Sizes take k/m/g suffixes (binary). The target also listens on PORT+1 for the control socket.\n");
}

int main(int argc, char **argv)
{
    struct args a = {.mode = NULL,
                     .backend = "auto",
                     .mem = "host",
                     .device = 0,
                     .peer_device = -1,
                     .threads = 1,
                     .conns = 0,
                     .batch = 1,
                     .block = 0,
                     .duration = 10,
                     .verify = VERIFY_AUTO,
                     .timeout_ms = 120000};
    int have_block = 0;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = 1;
        if (strcmp(f, "--mode") == 0 && v)
            a.mode = v;
        else if (strcmp(f, "--listen") == 0 && v)
            a.listen = v;
        else if (strcmp(f, "--peer") == 0 && v)
            a.peer = v;
        else if (strcmp(f, "--backend") == 0 && v)
            a.backend = v;
        else if (strcmp(f, "--mem") == 0 && v)
            a.mem = v;
        else if (strcmp(f, "--device") == 0)
            a.device = (int)need_int(f, v, 0, 1023);
        else if (strcmp(f, "--peer-device") == 0)
            a.peer_device = (int)need_int(f, v, 0, 1023);
        else if (strcmp(f, "--block-size") == 0) {
            a.block = (size_t)need_int(f, v, 1, 1L << 40);
            have_block = 1;
        } else if (strcmp(f, "--batch") == 0)
            a.batch = need_int(f, v, 1, 65536);
        else if (strcmp(f, "--threads") == 0)
            a.threads = (int)need_int(f, v, 1, 4096);
        else if (strcmp(f, "--conns") == 0)
            a.conns = (int)need_int(f, v, 1, 64);
        else if (strcmp(f, "--io-threads") == 0)
            a.io_threads = (int)need_int(f, v, 1, 64);
        else if (strcmp(f, "--staging-chunks") == 0)
            a.staging_chunks = (size_t)need_int(f, v, 1, 1024);
        else if (strcmp(f, "--chunk-bytes") == 0)
            a.chunk_bytes = (size_t)need_int(f, v, 1, 1L << 30);
        else if (strcmp(f, "--verify") == 0) {
            int m = VERIFY_OFF;
            while (v != NULL && m <= VERIFY_FULL && strcmp(v, verify_names[m]) != 0)
                m++;
            if (v == NULL || m > VERIFY_FULL) {
                fprintf(stderr, "pdxfer-bench: --verify is full, sample or off\n");
                return 2;
            }
            a.verify = m;
        } else if (strcmp(f, "--parts") == 0)
            a.parts = (int)need_int(f, v, 0, 4096);
        else if (strcmp(f, "--compute-us") == 0)
            a.compute_us = need_int(f, v, 0, 100000000);
        else if (strcmp(f, "--timeout-ms") == 0)
            a.timeout_ms = (uint32_t)need_int(f, v, 1, 3600000);
        else if (strcmp(f, "--duration") == 0) {
            char *end;
            errno = 0;
            a.duration = v ? strtod(v, &end) : -1;
            if (v == NULL || errno != 0 || *end != '\0' || !(a.duration > 0 && a.duration <= 86400)) {
                fprintf(stderr, "pdxfer-bench: --duration wants seconds in (0, 86400]\n");
                return 2;
            }
        } else {
            takes = 0;
            if (strcmp(f, "--json") == 0)
                a.json = 1;
            else if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0) {
                usage(stdout);
                return 0;
            } else {
                fprintf(stderr, "pdxfer-bench: unknown or incomplete option %s\n", f);
                usage(stderr);
                return 2;
            }
        }
        i += takes;
    }
    if (strcmp(a.mem, "host") != 0 && strcmp(a.mem, "cuda") != 0 && strcmp(a.mem, "cuda_vmm") != 0) {
        fprintf(stderr, "pdxfer-bench: --mem is host, cuda or cuda_vmm (cuMemCreate memory)\n");
        return 2;
    }
    if (a.verify == VERIFY_AUTO)
        a.verify = is_cuda(&a) ? VERIFY_FULL : VERIFY_SAMPLE;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (a.mode != NULL && strcmp(a.mode, "target") == 0)
        return run_target(&a);
    if (a.mode != NULL && strcmp(a.mode, "initiator") == 0) {
        if (!have_block) {
            fprintf(stderr, "pdxfer-bench: --block-size is required\n");
            return 2;
        }
        return run_initiator(&a);
    }
    if (a.mode != NULL && strcmp(a.mode, "copytest") == 0)
        return run_copytest(&a);
    usage(stderr);
    return 2;
}
