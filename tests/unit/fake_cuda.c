/*
 * A fake of transport/gpu_cuda.h for CPU-only tests of the GPU paths (staging ring, event polling, IPC
 * bookkeeping): "device memory" is host memory handed out by pdr__cuda_mem_alloc and known to
 * pdr__cuda_ptr_info; an async copy or pattern fill is queued on its stream and done when an event
 * recorded after it has been queried FAKE_POLLS times (so the engine's pending paths run), when the
 * stream is synchronized, or when the stream is destroyed (with pdr__fake_cuda_strict set, destroying
 * a stream drops its pending work instead, so that a caller that never waits for its work is caught);
 * IPC handles name fake allocations in this process. Thread-safe (one mutex). Not for production:
 * tests link it instead of cuda.c.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "gpu_cuda.h"
#include "err.h"

#define FAKE_POLLS 3
#define MAX_ALLOCS 64

struct fake_alloc {
    uint8_t *base;
    size_t len;
    int dev;
    int vmm;           /* a "VMM mapping": exported as a memfd holding its base address */
    int exportable;    /* vmm: created exportable as a POSIX file descriptor */
    uint64_t block_id; /* vmm: a new one per adoption */
};
struct fake_copy {
    struct fake_copy *next;
    void *dst;
    const void *src; /* NULL: a pattern fill of seed from word0 */
    size_t len;
    uint64_t seed, word0;
};
struct fake_stream {
    struct fake_copy *head, *tail;
};
struct fake_event {
    struct fake_stream *s;
    struct fake_copy *upto; /* the stream's last copy when recorded */
    int polls;
    int recorded;
    uint64_t done_at_us; /* pdr__fake_cuda_copy_us mode */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct fake_alloc allocs[MAX_ALLOCS];
static __thread int bound = -1;
long pdr__fake_cuda_live;
long pdr__fake_cuda_copy_us;  /* > 0: events complete by time instead of by poll count */
long pdr__fake_cuda_strict;   /* != 0: pdr__cuda_stream_destroy drops pending work */
long pdr__fake_cuda_dropped;  /* operations dropped that way */
long pdr__fake_cuda_lose_d2d; /* > 0: every N-th device-to-device copy is lost (accepted, never run) */
static long d2d_copies;

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
} /* streams + events + pinned buffers alive: 0 after every engine is destroyed */

int pdr__cuda_init(void)
{
    return 0;
}
int pdr__cuda_device_count(void)
{
    return 2;
}
const char *pdr__cuda_last_error(void)
{
    return "";
}
const char *pdr__cuda_init_error(void)
{
    return "";
}
int pdr__cuda_device_name(int ordinal, char *buf, size_t len)
{
    snprintf(buf, len, "fake device %d", ordinal);
    return 0;
}

static int alloc_at(const void *p) /* mu held; index or -1 */
{
    for (int i = 0; i < MAX_ALLOCS; i++)
        if (allocs[i].base != NULL && (const uint8_t *)p >= allocs[i].base &&
            (const uint8_t *)p < allocs[i].base + allocs[i].len)
            return i;
    return -1;
}

int pdr__cuda_ptr_info(const void *p, int *is_device, int *ordinal)
{
    *is_device = 0;
    if (ordinal != NULL)
        *ordinal = -1;
    pthread_mutex_lock(&mu);
    int i = alloc_at(p);
    if (i >= 0) {
        *is_device = 1;
        if (ordinal != NULL)
            *ordinal = allocs[i].dev;
    }
    pthread_mutex_unlock(&mu);
    return 0;
}

int pdr__cuda_bind(int ordinal)
{
    if (ordinal < 0 || ordinal > 1)
        return PDR_EINVAL;
    bound = ordinal;
    return 0;
}

int pdr__cuda_host_alloc(size_t len, void **out)
{
    *out = malloc(len);
    if (*out == NULL)
        return PDR_ENOMEM;
    __atomic_add_fetch(&pdr__fake_cuda_live, 1, __ATOMIC_RELAXED);
    return 0;
}
void pdr__cuda_host_free(void *p)
{
    free(p);
    __atomic_sub_fetch(&pdr__fake_cuda_live, 1, __ATOMIC_RELAXED);
}

int pdr__cuda_stream_create(void **out)
{
    if (bound < 0)
        return PDR_EINVAL;
    *out = calloc(1, sizeof(struct fake_stream));
    __atomic_add_fetch(&pdr__fake_cuda_live, 1, __ATOMIC_RELAXED);
    return *out != NULL ? 0 : PDR_ENOMEM;
}

static void run_until(struct fake_stream *s, struct fake_copy *upto)
{
    /* Runs queued copies up to and including upto (all of them when upto is NULL). mu held. */
    while (s->head != NULL) {
        struct fake_copy *c = s->head;
        if (c->src != NULL) {
            memcpy(c->dst, c->src, c->len);
        } else {
            for (size_t w = 0; w < c->len / 8; w++) {
                uint64_t v = pdr__cuda_pattern_word(c->seed, c->word0 + w);
                memcpy((uint8_t *)c->dst + w * 8, &v, 8);
            }
        }
        s->head = c->next;
        if (s->head == NULL)
            s->tail = NULL;
        free(c);
        if (c == upto)
            break;
    }
}

void pdr__cuda_stream_destroy(void *stream)
{
    if (stream == NULL)
        return;
    struct fake_stream *s = stream;
    pthread_mutex_lock(&mu);
    if (__atomic_load_n(&pdr__fake_cuda_strict, __ATOMIC_RELAXED)) {
        while (s->head != NULL) {
            struct fake_copy *c = s->head;
            s->head = c->next;
            free(c);
            pdr__fake_cuda_dropped++;
        }
        s->tail = NULL;
    }
    run_until(s, NULL);
    pthread_mutex_unlock(&mu);
    free(stream);
    __atomic_sub_fetch(&pdr__fake_cuda_live, 1, __ATOMIC_RELAXED);
}

int pdr__cuda_event_create(void **out)
{
    if (bound < 0)
        return PDR_EINVAL;
    *out = calloc(1, sizeof(struct fake_event));
    __atomic_add_fetch(&pdr__fake_cuda_live, 1, __ATOMIC_RELAXED);
    return *out != NULL ? 0 : PDR_ENOMEM;
}
void pdr__cuda_event_destroy(void *ev)
{
    free(ev);
    __atomic_sub_fetch(&pdr__fake_cuda_live, 1, __ATOMIC_RELAXED);
}

int pdr__cuda_event_record(void *ev, void *stream)
{
    struct fake_event *e = ev;
    pthread_mutex_lock(&mu);
    e->s = stream;
    e->upto = e->s->tail;
    e->polls = 0;
    e->recorded = 1;
    e->done_at_us = now_us() + (uint64_t)__atomic_load_n(&pdr__fake_cuda_copy_us, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&mu);
    return 0;
}

static int stream_has(struct fake_stream *s, struct fake_copy *c)
{
    for (struct fake_copy *x = s->head; x != NULL; x = x->next)
        if (x == c)
            return 1;
    return 0;
}

int pdr__cuda_event_query(void *ev)
{
    struct fake_event *e = ev;
    int rc = 0;
    pthread_mutex_lock(&mu);
    if (e->recorded && e->upto != NULL && stream_has(e->s, e->upto)) {
        long by_time = __atomic_load_n(&pdr__fake_cuda_copy_us, __ATOMIC_RELAXED);
        if (by_time > 0 ? now_us() < e->done_at_us : ++e->polls < FAKE_POLLS)
            rc = PDR_EAGAIN;
        else
            run_until(e->s, e->upto);
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

int pdr__cuda_event_sync(void *ev)
{
    struct fake_event *e = ev;
    pthread_mutex_lock(&mu);
    if (e->recorded && e->upto != NULL && stream_has(e->s, e->upto))
        run_until(e->s, e->upto);
    pthread_mutex_unlock(&mu);
    return 0;
}

int pdr__cuda_stream_sync(void *stream)
{
    if (stream == NULL)
        return 0; /* the legacy stream: the fake's synchronous helpers leave nothing on it */
    pthread_mutex_lock(&mu);
    run_until(stream, NULL);
    pthread_mutex_unlock(&mu);
    return 0;
}

static int enqueue_op(void *dst, const void *src, size_t len, uint64_t seed, uint64_t word0, void *stream)
{
    if (bound < 0)
        return PDR_EINVAL; /* the engine must bind before any copy */
    struct fake_copy *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return PDR_ENOMEM;
    c->dst = dst;
    c->src = src;
    c->len = len;
    c->seed = seed;
    c->word0 = word0;
    struct fake_stream *s = stream;
    pthread_mutex_lock(&mu);
    if (s->tail != NULL)
        s->tail->next = c;
    else
        s->head = c;
    s->tail = c;
    pthread_mutex_unlock(&mu);
    return 0;
}

static int enqueue(void *dst, const void *src, size_t len, void *stream)
{
    return enqueue_op(dst, src, len, 0, 0, stream);
}

int pdr__cuda_copy_d2h_async(void *dst_host, const void *src_dev, size_t len, void *stream)
{
    return enqueue(dst_host, src_dev, len, stream);
}
int pdr__cuda_copy_h2d_async(void *dst_dev, const void *src_host, size_t len, void *stream)
{
    return enqueue(dst_dev, src_host, len, stream);
}
int pdr__cuda_copy_d2d_async(void *dst_dev, const void *src_dev, size_t len, void *stream)
{
    /* A VMM mapping ends where it ends: a copy past it faults on a device. */
    pthread_mutex_lock(&mu);
    int i = alloc_at(dst_dev);
    int past = i >= 0 && allocs[i].vmm && (uint8_t *)dst_dev + len > allocs[i].base + allocs[i].len;
    pthread_mutex_unlock(&mu);
    if (past)
        return PDR_EINVAL;
    long lose = __atomic_load_n(&pdr__fake_cuda_lose_d2d, __ATOMIC_RELAXED);
    if (lose > 0 && __atomic_add_fetch(&d2d_copies, 1, __ATOMIC_RELAXED) % lose == 0)
        return 0;
    return enqueue(dst_dev, src_dev, len, stream);
}

int pdr__cuda_ipc_export(const void *p, unsigned char handle[PDR_CUDA_IPC_HANDLE_BYTES], uint64_t *offset)
{
    memset(handle, 0, PDR_CUDA_IPC_HANDLE_BYTES);
    pthread_mutex_lock(&mu);
    int i = alloc_at(p);
    if (i >= 0) {
        uintptr_t b = (uintptr_t)allocs[i].base;
        memcpy(handle, &b, sizeof(b));
        *offset = (uint64_t)((const uint8_t *)p - allocs[i].base);
    }
    pthread_mutex_unlock(&mu);
    return i >= 0 ? 0 : PDR_EINVAL;
}
int pdr__cuda_ipc_open(const unsigned char handle[PDR_CUDA_IPC_HANDLE_BYTES], void **base)
{
    uintptr_t b;
    memcpy(&b, handle, sizeof(b));
    *base = (void *)b;
    __atomic_add_fetch(&pdr__fake_cuda_live, 1, __ATOMIC_RELAXED);
    return 0;
}
int pdr__cuda_ipc_close(void *base)
{
    (void)base;
    __atomic_sub_fetch(&pdr__fake_cuda_live, 1, __ATOMIC_RELAXED);
    return 0;
}

int pdr__cuda_uuid(int ordinal, unsigned char uuid[16])
{
    memset(uuid, ordinal, 16);
    return 0;
}

int pdr__cuda_mem_alloc(size_t len, void **out)
{
    uint8_t *p = malloc(len);
    if (p == NULL)
        return PDR_ENOMEM;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (allocs[i].base == NULL) {
            allocs[i] = (struct fake_alloc){p, len, bound < 0 ? 0 : bound, 0, 0, 0};
            break;
        }
    }
    pthread_mutex_unlock(&mu);
    *out = p;
    return 0;
}
void pdr__cuda_mem_free(void *p)
{
    pthread_mutex_lock(&mu);
    for (int i = 0; i < MAX_ALLOCS; i++)
        if (allocs[i].base == p)
            allocs[i].base = NULL;
    pthread_mutex_unlock(&mu);
    free(p);
}
int pdr__cuda_memset(void *dev, unsigned char byte, size_t len)
{
    memset(dev, byte, len);
    return 0;
}
int pdr__cuda_copy_sync(void *dst, const void *src, size_t len)
{
    memcpy(dst, src, len);
    return 0;
}
int pdr__cuda_copy_peer_async(void *dst_dev, int dst_ordinal, const void *src_dev, int src_ordinal,
                              size_t len, void *stream)
{
    (void)dst_ordinal;
    (void)src_ordinal;
    return enqueue(dst_dev, src_dev, len, stream);
}

/* ---- Pattern kernels: a fill runs with the stream's other work; a check waits for the stream. ---- */

int pdr__cuda_pattern_fill(void *dev, size_t len, uint64_t seed, uint64_t word0, void *stream)
{
    if (dev == NULL || (uintptr_t)dev % 8 != 0 || len % 8 != 0)
        return PDR_EINVAL;
    return len == 0 ? 0 : enqueue_op(dev, NULL, len, seed, word0, stream);
}

int pdr__cuda_pattern_check(const void *dev, size_t len, uint64_t seed, uint64_t word0, void *scratch,
                            void *stream, struct pdr_cuda_check *out)
{
    if (dev == NULL || scratch == NULL || stream == NULL || (uintptr_t)dev % 8 != 0 || len % 8 != 0 ||
        bound < 0)
        return PDR_EINVAL;
    pthread_mutex_lock(&mu);
    run_until(stream, NULL);
    pthread_mutex_unlock(&mu);
    out->mismatches = 0;
    out->first_bad = UINT64_MAX;
    for (size_t w = 0; w < len / 8; w++) {
        uint64_t v;
        memcpy(&v, (const uint8_t *)dev + w * 8, 8);
        if (v != pdr__cuda_pattern_word(seed, word0 + w) && out->mismatches++ == 0)
            out->first_bad = w;
    }
    return 0;
}

const char *pdr__cuda_pattern_ptx(void)
{
    return "";
}

/* No GPUDirect in the fake: the RDMA module (linked into the engine) asks only with a device. */
int pdr__cuda_dmabuf_fd(const void *p, size_t len, int *fd)
{
    (void)p;
    (void)len;
    *fd = -1;
    return PDR_ENOTSUP;
}

int pdr__cuda_pci_bus_id(int ordinal, char *buf, size_t len)
{
    (void)ordinal;
    (void)buf;
    (void)len;
    return PDR_ENOTSUP; /* no PCI topology in the fake: the RDMA NIC is picked by name */
}

/* ---- VMM ---- */

static uint64_t next_block_id = 1;
void pdr__fake_cuda_vmm_adopt(void *p, size_t len, int dev, int exportable);
void pdr__fake_cuda_forget(void *p);

/* Test helper: [p, p + len) becomes a VMM mapping of device dev (adjacent adoptions make a range that
 * spans several mappings, as PyTorch's expandable segments do). */
void pdr__fake_cuda_vmm_adopt(void *p, size_t len, int dev, int exportable)
{
    pthread_mutex_lock(&mu);
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (allocs[i].base == NULL) {
            allocs[i] = (struct fake_alloc){p, len, dev, 1, exportable, next_block_id++};
            break;
        }
    }
    pthread_mutex_unlock(&mu);
}

/* Test helper: forgets the mapping that starts at p (the memory stays the caller's). */
void pdr__fake_cuda_forget(void *p)
{
    pthread_mutex_lock(&mu);
    for (int i = 0; i < MAX_ALLOCS; i++)
        if (allocs[i].base == p)
            allocs[i].base = NULL;
    pthread_mutex_unlock(&mu);
}

int pdr__cuda_mem_range(const void *p, struct pdr_cuda_range *out)
{
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&mu);
    int i = alloc_at(p);
    if (i >= 0) {
        out->base = allocs[i].base;
        out->size = allocs[i].len;
        out->vmm = allocs[i].vmm;
        out->block_id = allocs[i].vmm ? allocs[i].block_id : 0;
    }
    pthread_mutex_unlock(&mu);
    return i >= 0 ? 0 : PDR_EINVAL;
}

int pdr__cuda_vmm_export(const void *base, int *fd)
{
    *fd = -1;
    pthread_mutex_lock(&mu);
    int i = alloc_at(base);
    int ok = i >= 0 && allocs[i].vmm && allocs[i].exportable && allocs[i].base == base;
    pthread_mutex_unlock(&mu);
    if (!ok)
        return PDR_EINVAL;
    int f = memfd_create("fake-vmm", MFD_CLOEXEC);
    uintptr_t b = (uintptr_t)base;
    if (f < 0 || pwrite(f, &b, sizeof(b), 0) != (ssize_t)sizeof(b)) {
        if (f >= 0)
            close(f);
        return PDR_EIO;
    }
    *fd = f;
    return 0;
}

int pdr__cuda_vmm_map(int fd, uint64_t size, int ordinal, void **base)
{
    (void)ordinal;
    uintptr_t b = 0;
    if (pread(fd, &b, sizeof(b), 0) != (ssize_t)sizeof(b))
        return PDR_EINVAL;
    pthread_mutex_lock(&mu);
    int i = alloc_at((void *)b);
    int ok = i >= 0 && allocs[i].base == (uint8_t *)b && allocs[i].len == size;
    pthread_mutex_unlock(&mu);
    if (!ok)
        return PDR_EINVAL;
    *base = (void *)b;
    __atomic_add_fetch(&pdr__fake_cuda_live, 1, __ATOMIC_RELAXED);
    return 0;
}

int pdr__cuda_vmm_unmap(void *base, uint64_t size)
{
    (void)base;
    (void)size;
    __atomic_sub_fetch(&pdr__fake_cuda_live, 1, __ATOMIC_RELAXED);
    return 0;
}

int pdr__cuda_vmm_alloc(int ordinal, size_t len, void **out, size_t *alloc_len)
{
    uint8_t *p = malloc(len);
    if (p == NULL)
        return PDR_ENOMEM;
    pdr__fake_cuda_vmm_adopt(p, len, ordinal, 1);
    *out = p;
    *alloc_len = len;
    return 0;
}

void pdr__cuda_vmm_free(void *p, size_t alloc_len)
{
    (void)alloc_len;
    pdr__fake_cuda_forget(p);
    free(p);
}
