/*
 * The GPU paths of the engine on a CPU, against tests/unit/fake_cuda.c ("device memory" is host memory
 * the fake knows; copies run when their event has been polled a few times): device → device, device →
 * host and host → device over TCP staging with the pool bound (staging_peak_bytes <= conns ×
 * staging_chunks × chunk_bytes, independent of the room size), many GPU rooms at once, a GPU room
 * canceled mid-transfer, CUDA IPC chosen between two engines of one host (the same process) with
 * backend auto and refused (PDR_ENOTSUP) when forced for host memory, and every fake stream, event and
 * pinned buffer released after destroy. Short heartbeats make a stalled connection fail fast.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu_cuda.h"
#include "err.h"
#include "transport.h"
#include "test_shim_util.h"
#include "runner.h"

extern long pdr__fake_cuda_live;
extern long pdr__fake_cuda_copy_us;
void pdr__fake_cuda_vmm_adopt(void *p, size_t len, int dev, int exportable);
void pdr__fake_cuda_forget(void *p);

static void *dev_alloc(int dev, size_t len)
{
    void *p;
    CHECK_EQ_ERR(pdr__cuda_bind(dev), 0);
    CHECK_EQ_ERR(pdr__cuda_mem_alloc(len, &p), 0);
    return p;
}

/* Fills src with the room's pattern, clears dst and splits it in two segments (ds), and readies the
 * completions of both ends; finish_pair() checks them. */
static void begin_pair(struct info_done *a, struct info_done *b, uint8_t *src, uint8_t *dst, size_t len,
                       uint64_t room, pdr_xfer_seg_t ds[2])
{
    fill(src, len, room, 0);
    memset(dst, 0, len);
    ds[0] = (pdr_xfer_seg_t){dst, len / 3};
    ds[1] = (pdr_xfer_seg_t){dst + len / 3, len - len / 3};
    memset(a, 0, sizeof(*a));
    memset(b, 0, sizeof(*b));
    done_init(&a->d);
    done_init(&b->d);
}

/* Waits for both ends of one room, then checks that both succeeded over want_backend and that dst holds
 * the room's fill pattern. */
static void finish_pair(struct info_done *a, struct info_done *b, int wait_ms, const uint8_t *dst, size_t len,
                        uint64_t room, const char *want_backend)
{
    CHECK(done_wait(&a->d, 1, wait_ms) == 1 && done_wait(&b->d, 1, wait_ms) == 1);
    CHECK_EQ_ERR(a->d.status, 0);
    CHECK_EQ_ERR(b->d.status, 0);
    CHECK(check_fill(dst, len, room, 0));
    if (strcmp(a->backend, want_backend) != 0 || strcmp(b->backend, want_backend) != 0) {
        fprintf(stderr, "room %llu: backends %s/%s, want %s\n", (unsigned long long)room, a->backend,
                b->backend, want_backend);
        exit(1);
    }
    done_fini(&a->d);
    done_fini(&b->d);
}

static void run_room_in(pdr_xfer_engine_t *pre, pdr_xfer_engine_t *dec, int port, uint64_t room, uint8_t *src,
                        uint8_t *dst, size_t len, const char *want_backend, uint32_t timeout_ms)
{
    pdr_xfer_seg_t ss[3] = {{src, 1}, {src + 1, len / 2}, {src + 1 + len / 2, len - 1 - len / 2}}, ds[2];
    struct info_done a, b;
    begin_pair(&a, &b, src, dst, len, room, ds);
    CHECK_EQ_ERR(pdr_xfer_pull_ex(dec, "127.0.0.1", port, room, ds, 2, timeout_ms, info_cb, &b), 0);
    CHECK_EQ_ERR(pdr_xfer_push_ex(pre, room, ss, 3, timeout_ms, info_cb, &a), 0);
    finish_pair(&a, &b, (int)timeout_ms + 10000, dst, len, room, want_backend);
}

static void run_room(pdr_xfer_engine_t *pre, pdr_xfer_engine_t *dec, int port, uint64_t room, uint8_t *src,
                     uint8_t *dst, size_t len, const char *want_backend)
{
    run_room_in(pre, dec, port, room, src, dst, len, want_backend, 20000);
}

/* Device memory on devices 0 (registered with the prefill) and 1 (with the decode), and host memory. */
struct bufs {
    uint8_t *dsrc, *ddst, *hsrc, *hdst;
    size_t len;
};

static void bufs_new(struct bufs *b, pdr_xfer_engine_t *pre, pdr_xfer_engine_t *dec, size_t len)
{
    b->len = len;
    b->dsrc = dev_alloc(0, len);
    b->ddst = dev_alloc(1, len);
    b->hsrc = malloc(len);
    b->hdst = malloc(len);
    CHECK(b->hsrc && b->hdst);
    CHECK_EQ_ERR(pdr_xfer_mem_register(pre, b->dsrc, len, PDR_XFER_MEM_CUDA), 0);
    CHECK_EQ_ERR(pdr_xfer_mem_register(dec, b->ddst, len, PDR_XFER_MEM_AUTO), 0);
}

static void bufs_free(struct bufs *b)
{
    pdr__cuda_mem_free(b->dsrc);
    pdr__cuda_mem_free(b->ddst);
    free(b->hsrc);
    free(b->hdst);
}

/* rounds × (device → device, device → host, host → device): rooms room0 + r, room0 + 10 + r,
 * room0 + 20 + r, each within timeout_ms. */
static void three_ways(pdr_xfer_engine_t *pre, pdr_xfer_engine_t *dec, int port, uint64_t room0,
                       const struct bufs *b, int rounds, uint32_t timeout_ms)
{
    for (int r = 0; r < rounds; r++) {
        run_room_in(pre, dec, port, room0 + (uint64_t)r, b->dsrc, b->ddst, b->len, "tcp", timeout_ms);
        run_room_in(pre, dec, port, room0 + 10 + (uint64_t)r, b->dsrc, b->hdst, b->len, "tcp", timeout_ms);
        run_room_in(pre, dec, port, room0 + 20 + (uint64_t)r, b->hsrc, b->ddst, b->len, "tcp", timeout_ms);
    }
}

static void test_staging(void)
{
    int err;
    pdr_xfer_opts_t po = {.listen_host = "127.0.0.1",
                          .backend = "tcp",
                          .chunk_bytes = 256u << 10,
                          .heartbeat_ms = 100,
                          .heartbeat_timeout_ms = 1000};
    pdr_xfer_opts_t dopt = {
        .backend = "tcp", .chunk_bytes = 128u << 10, .heartbeat_ms = 100, .heartbeat_timeout_ms = 1000};
    pdr_xfer_engine_t *pre = pdr_xfer_engine_create(&po, &err), *dec = pdr_xfer_engine_create(&dopt, &err);
    CHECK(pre && dec);
    int port = pdr_xfer_listen_port(pre);
    size_t len = 48u << 20;
    struct bufs bu;
    bufs_new(&bu, pre, dec, len);
    uint8_t *dsrc = bu.dsrc, *ddst = bu.ddst;
    three_ways(pre, dec, port, 10, &bu, 4, 20000);
    /* Many GPU rooms at once, one slice of the buffers each. */
    enum { N = 16 };
    size_t part = len / N;
    struct done a, b;
    done_init(&a);
    done_init(&b);
    fill(dsrc, len, 99, 0);
    memset(ddst, 0, len);
    for (int i = 0; i < N; i++) {
        pdr_xfer_seg_t s = {dsrc + (size_t)i * part, part}, d = {ddst + (size_t)i * part, part};
        CHECK_EQ_ERR(pdr_xfer_push(pre, 100 + (uint64_t)i, &s, 1, 20000, done_cb, &a), 0);
        CHECK_EQ_ERR(pdr_xfer_pull(dec, "127.0.0.1", port, 100 + (uint64_t)i, &d, 1, 20000, done_cb, &b), 0);
    }
    CHECK(done_wait(&a, N, 30000) == N && done_wait(&b, N, 30000) == N);
    CHECK(a.nfail == 0 && b.nfail == 0);
    CHECK(check_fill(ddst, part * N, 99, 0));

    /* A GPU room canceled while it moves: both sides end, the session and the pool stay usable. */
    done_init(&a);
    done_init(&b);
    pdr_xfer_seg_t s = {dsrc, len}, d = {ddst, len};
    CHECK_EQ_ERR(pdr_xfer_pull(dec, "127.0.0.1", port, 200, &d, 1, 20000, done_cb, &b), 0);
    CHECK_EQ_ERR(pdr_xfer_push(pre, 200, &s, 1, 20000, done_cb, &a), 0);
    int crc = pdr_xfer_cancel(dec, 200);
    CHECK(crc == 0 || crc == PDR_ENOROOM); /* ENOROOM: it finished first */
    CHECK(done_wait(&a, 1, 10000) == 1 && done_wait(&b, 1, 10000) == 1);
    CHECK(b.status == PDR_ECANCELED || b.status == 0);
    run_room(pre, dec, port, 201, dsrc, ddst, len, "tcp");

    pdr_xfer_stats_t sp, sd;
    pdr_xfer_get_stats(pre, &sp);
    pdr_xfer_get_stats(dec, &sd);
    printf("staging peak: prefill %llu bytes, decode %llu bytes (%zu-byte rooms)\n",
           (unsigned long long)sp.staging_peak_bytes, (unsigned long long)sd.staging_peak_bytes, len);
    CHECK(sp.staging_peak_bytes > 0 && sp.staging_peak_bytes <= 4ull * 4 * (256u << 10));
    CHECK(sd.staging_peak_bytes > 0 && sd.staging_peak_bytes <= 4ull * 4 * (128u << 10));
    pdr_xfer_engine_destroy(dec);
    pdr_xfer_engine_destroy(pre);
    CHECK(pdr__fake_cuda_live == 0);
    bufs_free(&bu);
    done_fini(&a);
    done_fini(&b);
    printf("ok staging\n");
}

static void test_ipc(void)
{
    int err;
    pdr_xfer_opts_t po = {.listen_host = "127.0.0.1"};
    pdr_xfer_engine_t *pre = pdr_xfer_engine_create(&po, &err), *dec = pdr_xfer_engine_create(NULL, &err);
    CHECK(pre && dec);
    int port = pdr_xfer_listen_port(pre);
    size_t len = 8u << 20;
    uint8_t *dsrc = dev_alloc(0, len), *ddst = dev_alloc(1, len);
    uint8_t *hdst = malloc(len);
    CHECK_EQ_ERR(pdr_xfer_mem_register(pre, dsrc, len, PDR_XFER_MEM_AUTO), 0);
    CHECK_EQ_ERR(pdr_xfer_mem_register(dec, ddst, len, PDR_XFER_MEM_AUTO), 0);
    /* One host, device memory on both ends: cuda_ipc (the first room of the session too). */
    for (int r = 0; r < 3; r++)
        run_room(pre, dec, port, 300 + (uint64_t)r, dsrc, ddst, len, "cuda_ipc");
    /* Host destination: tcp staging. */
    run_room(pre, dec, port, 310, dsrc, hdst, len, "tcp");
    pdr_xfer_engine_destroy(dec);
    pdr_xfer_engine_destroy(pre);

    /* Forced cuda_ipc with host memory fails the room with PDR_ENOTSUP. */
    pdr_xfer_opts_t fo = {.listen_host = "127.0.0.1", .backend = "cuda_ipc"};
    pdr_xfer_opts_t fd = {.backend = "cuda_ipc"};
    pre = pdr_xfer_engine_create(&fo, &err);
    dec = pdr_xfer_engine_create(&fd, &err);
    CHECK(pre && dec);
    struct done b;
    done_init(&b);
    pdr_xfer_seg_t d = {hdst, len};
    CHECK_EQ_ERR(pdr_xfer_pull(dec, "127.0.0.1", pdr_xfer_listen_port(pre), 1, &d, 1, 5000, done_cb, &b), 0);
    CHECK(done_wait(&b, 1, 5000) == 1);
    CHECK_EQ_ERR(b.status, PDR_ENOTSUP);
    pdr_xfer_engine_destroy(dec);
    pdr_xfer_engine_destroy(pre);
    CHECK(pdr__fake_cuda_live == 0);
    pdr__cuda_mem_free(dsrc);
    pdr__cuda_mem_free(ddst);
    free(hdst);
    done_fini(&b);
    printf("ok ipc\n");
}

/* Copies that finish on their own time, as on a device, and heartbeats far apart (the loop's idle tick
 * is a quarter of heartbeat_ms = 10 s): a ring that a loop turn both drains and refills must have its
 * new copies polled at once. When it was not, every refill waited for the next tick (the H200 moved
 * 0.12 GB/s with 1 MiB chunks); here a single missed poll would outlast the rooms' 5 s deadline. */
static void test_copy_wakeup(void)
{
    int err;
    pdr__fake_cuda_copy_us = 50;
    pdr_xfer_opts_t po = {.listen_host = "127.0.0.1",
                          .backend = "tcp",
                          .chunk_bytes = 256u << 10,
                          .heartbeat_ms = 40000,
                          .heartbeat_timeout_ms = 120000};
    pdr_xfer_opts_t dopt = {
        .backend = "tcp", .chunk_bytes = 256u << 10, .heartbeat_ms = 40000, .heartbeat_timeout_ms = 120000};
    pdr_xfer_engine_t *pre = pdr_xfer_engine_create(&po, &err), *dec = pdr_xfer_engine_create(&dopt, &err);
    CHECK(pre && dec);
    int port = pdr_xfer_listen_port(pre);
    struct bufs b;
    bufs_new(&b, pre, dec, 16u << 20); /* 64 chunks: each connection's ring of 4 is refilled 4 times */
    three_ways(pre, dec, port, 400, &b, 3, 5000);
    pdr_xfer_engine_destroy(dec);
    pdr_xfer_engine_destroy(pre);
    CHECK(pdr__fake_cuda_live == 0);
    bufs_free(&b);
    pdr__fake_cuda_copy_us = 0;
    printf("ok copy wakeup\n");
}

/* CUDA IPC into VMM memory (cuMemCreate + cuMemMap, as PyTorch's expandable segments): the decode's
 * destination is four adjacent VMM mappings, so a segment crossing a boundary is cut; each
 * mapping travels as a file descriptor through the decode's fd server (a real abstract Unix socket)
 * and the prefill maps it. An allocation not exportable as a descriptor falls back to tcp staging; one
 * freed and created again at the same address is exported anew (its block id changed). */
static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    CHECK(d != NULL);
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n;
}

static void test_ipc_vmm(void)
{
    int err;
    pdr_xfer_opts_t po = {.listen_host = "127.0.0.1"};
    pdr_xfer_engine_t *pre = pdr_xfer_engine_create(&po, &err), *dec = pdr_xfer_engine_create(NULL, &err);
    CHECK(pre && dec);
    int port = pdr_xfer_listen_port(pre);
    size_t len = 8u << 20, q = len / 4;
    uint8_t *dsrc = dev_alloc(0, len);
    uint8_t *vbuf = malloc(len), *nbuf = malloc(len);
    CHECK(vbuf && nbuf);
    for (int k = 0; k < 4; k++)
        pdr__fake_cuda_vmm_adopt(vbuf + k * q, q, 1, 1);
    pdr__fake_cuda_vmm_adopt(nbuf, len, 1, 0);
    CHECK_EQ_ERR(pdr_xfer_mem_register(pre, dsrc, len, PDR_XFER_MEM_AUTO), 0);
    CHECK_EQ_ERR(pdr_xfer_mem_register(dec, vbuf, len, PDR_XFER_MEM_CUDA), 0);
    CHECK_EQ_ERR(pdr_xfer_mem_register(dec, nbuf, len, PDR_XFER_MEM_CUDA), 0);
    /* vbuf is four mappings; run_room's destination segments [0, len/3) and [len/3, len) cross three of
     * their boundaries: five pieces from two segments. */
    for (int r = 0; r < 3; r++)
        run_room(pre, dec, port, 500 + (uint64_t)r, dsrc, vbuf, len, "cuda_ipc");
    {
        /* One segment over all four mappings, then zero-length ones: the piece table grows past its first
         * size (segments + 1) before the empty pieces are added. */
        fill(dsrc, len, 505, 0);
        memset(vbuf, 0, len);
        pdr_xfer_seg_t ss = {dsrc, len}, ds[3] = {{vbuf, len}, {vbuf + len, 0}, {vbuf, 0}};
        struct info_done a, b;
        memset(&a, 0, sizeof(a));
        memset(&b, 0, sizeof(b));
        done_init(&a.d);
        done_init(&b.d);
        CHECK_EQ_ERR(pdr_xfer_pull_ex(dec, "127.0.0.1", port, 505, ds, 3, 20000, info_cb, &b), 0);
        CHECK_EQ_ERR(pdr_xfer_push_ex(pre, 505, &ss, 1, 20000, info_cb, &a), 0);
        CHECK(done_wait(&a.d, 1, 30000) == 1 && done_wait(&b.d, 1, 30000) == 1);
        CHECK_EQ_ERR(b.d.status, 0);
        CHECK(check_fill(vbuf, len, 505, 0));
        CHECK(strcmp(b.backend, "cuda_ipc") == 0);
        done_fini(&a.d);
        done_fini(&b.d);
    }
    run_room(pre, dec, port, 510, dsrc, nbuf, len, "tcp");
    /* Freed and created again in place: new physical memory, so a new descriptor. */
    for (int k = 0; k < 4; k++) {
        pdr__fake_cuda_forget(vbuf + k * q);
        pdr__fake_cuda_vmm_adopt(vbuf + k * q, q, 1, 1);
    }
    run_room(pre, dec, port, 520, dsrc, vbuf, len, "cuda_ipc");
    /* Unregistering the region lets its exports go; registered again, it is exported anew and works. */
    int fds = open_fds();
    CHECK_EQ_ERR(pdr_xfer_mem_unregister(dec, vbuf), 0);
    CHECK(open_fds() == fds - 4); /* the fd server held one descriptor per mapping */
    CHECK_EQ_ERR(pdr_xfer_mem_register(dec, vbuf, len, PDR_XFER_MEM_CUDA), 0);
    run_room(pre, dec, port, 530, dsrc, vbuf, len, "cuda_ipc");
    pdr_xfer_engine_destroy(dec);
    pdr_xfer_engine_destroy(pre);
    CHECK(pdr__fake_cuda_live == 0); /* every mapping the prefill made was unmapped */
    for (int k = 0; k < 4; k++)
        pdr__fake_cuda_forget(vbuf + k * q);
    pdr__fake_cuda_forget(nbuf);
    pdr__cuda_mem_free(dsrc);
    free(vbuf);
    free(nbuf);
    printf("ok ipc vmm\n");
}

/* Bytes moved of room on eng, once they reach want (polled: the counter has no event), or what was read
 * at the deadline. */
static uint64_t progress_at_least(pdr_xfer_engine_t *eng, uint64_t room, uint64_t want, int timeout_ms)
{
    uint64_t end = t_now_ns() + (uint64_t)timeout_ms * 1000000u, moved = 0;
    while (t_now_ns() < end) {
        if (pdr_xfer_progress(eng, room, &moved, NULL) != 0 || moved >= want)
            break;
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    return moved;
}

/* A room in device memory published in nparts parts, the first one alone until the mover moved it
 * (watched on the decode for tcp staging, whose bytes count once copied to the destination; on the
 * prefill for cuda_ipc, whose copies complete there), the others in reverse order; every byte checked. */
static void streamed_gpu(pdr_xfer_engine_t *pre, pdr_xfer_engine_t *dec, int port, uint64_t room,
                         uint8_t *src, uint8_t *dst, size_t len, int nparts, const char *want_backend)
{
    pdr_xfer_seg_t ds[2];
    struct info_done a, b;
    begin_pair(&a, &b, src, dst, len, room, ds);
    CHECK_EQ_ERR(pdr_xfer_push_open(pre, room, len, 20000, info_cb, &a), 0);
    CHECK_EQ_ERR(pdr_xfer_pull_ex(dec, "127.0.0.1", port, room, ds, 2, 20000, info_cb, &b), 0);
    for (int k = 0; k < nparts; k++) {
        int i = k == 0 ? 0 : nparts - k; /* 0, then n-1 down to 1 */
        size_t lo = len * (size_t)i / (size_t)nparts, hi = len * (size_t)(i + 1) / (size_t)nparts;
        pdr_xfer_seg_t ps[2] = {{src + lo, (hi - lo) / 2},
                                {src + lo + (hi - lo) / 2, hi - lo - (hi - lo) / 2}};
        CHECK_EQ_ERR(pdr_xfer_push_part(pre, room, lo, ps, 2), 0);
        if (k == 0) {
            int ipc = strcmp(want_backend, "cuda_ipc") == 0;
            uint64_t got = progress_at_least(ipc ? pre : dec, room, hi, 10000);
            CHECK(got == hi);
            CHECK(a.d.count == 0 && b.d.count == 0);
        }
    }
    finish_pair(&a, &b, 30000, dst, len, room, want_backend);
}

/* Streamed offers from device memory: over CUDA IPC (auto, one host, device memory on both ends) and
 * over TCP staging (device to device, device to host), and a part in memory of another kind refused. */
static void test_parts(void)
{
    int err;
    pdr_xfer_opts_t po = {.listen_host = "127.0.0.1", .chunk_bytes = 256u << 10};
    pdr_xfer_engine_t *pre = pdr_xfer_engine_create(&po, &err), *dec = pdr_xfer_engine_create(NULL, &err);
    CHECK(pre && dec);
    int port = pdr_xfer_listen_port(pre);
    struct bufs bu;
    bufs_new(&bu, pre, dec, 12u << 20);
    for (int r = 0; r < 2; r++)
        streamed_gpu(pre, dec, port, 600 + (uint64_t)r, bu.dsrc, bu.ddst, bu.len, 4, "cuda_ipc");
    streamed_gpu(pre, dec, port, 610, bu.dsrc, bu.hdst, bu.len, 5, "tcp"); /* host destination: staging */
    /* A part in host memory after one in device memory: refused, nothing else fails. */
    struct info_done a;
    memset(&a, 0, sizeof(a));
    done_init(&a.d);
    CHECK_EQ_ERR(pdr_xfer_push_open(pre, 620, 200, 300, info_cb, &a), 0);
    pdr_xfer_seg_t dseg = {bu.dsrc, 100}, hseg = {bu.hsrc, 100};
    CHECK_EQ_ERR(pdr_xfer_push_part(pre, 620, 0, &dseg, 1), 0);
    CHECK_EQ_ERR(pdr_xfer_push_part(pre, 620, 100, &hseg, 1), PDR_EINVAL);
    CHECK(done_wait(&a.d, 1, 10000) == 1);
    CHECK_EQ_ERR(a.d.status, PDR_ETIMEDOUT);
    done_fini(&a.d);
    pdr_xfer_engine_destroy(dec);
    pdr_xfer_engine_destroy(pre);

    /* Forced tcp: device to device through the staging rings of both ends. */
    pdr_xfer_opts_t to = {.listen_host = "127.0.0.1", .backend = "tcp", .chunk_bytes = 256u << 10};
    pdr_xfer_opts_t td = {.backend = "tcp"};
    pre = pdr_xfer_engine_create(&to, &err);
    dec = pdr_xfer_engine_create(&td, &err);
    CHECK(pre && dec);
    CHECK_EQ_ERR(pdr_xfer_mem_register(pre, bu.dsrc, bu.len, PDR_XFER_MEM_CUDA), 0);
    CHECK_EQ_ERR(pdr_xfer_mem_register(dec, bu.ddst, bu.len, PDR_XFER_MEM_CUDA), 0);
    streamed_gpu(pre, dec, pdr_xfer_listen_port(pre), 630, bu.dsrc, bu.ddst, bu.len, 6, "tcp");
    pdr_xfer_engine_destroy(dec);
    pdr_xfer_engine_destroy(pre);
    CHECK(pdr__fake_cuda_live == 0);
    bufs_free(&bu);
    printf("ok parts from device memory (cuda_ipc, tcp staging)\n");
}

static const pdr_test_case_t cases[] = {
    {"copy_wakeup", test_copy_wakeup, 60}, {"parts", test_parts, 60},
    {"staging", test_staging, 60},         {"ipc", test_ipc, 60},
    {"ipc_vmm", test_ipc_vmm, 60},
};

int main(int argc, char **argv)
{
    return PDR_TEST_RUN(cases, argc, argv);
}
