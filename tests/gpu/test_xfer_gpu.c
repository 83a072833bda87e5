/*
 * The transport with GPU memory (exits 77 without a usable CUDA driver and device):
 *  1. device → device over TCP staging, two engines in one process on loopback (device 0 → device 1
 *     when there are two GPUs): a 32k-token KV share (32768 × 320 KiB / 8 = 1.25 GiB) in several
 *     segments, every byte verified, and each engine's staging_peak_bytes at most
 *     conns_per_peer × staging_chunks × chunk_bytes (the pool never grows with the room);
 *     host → device and device → host rooms too.
 *  2. CUDA IPC between two processes on one host (forked before any CUDA call): device 0 → device 1
 *     when there are two GPUs, else on one device; bytes verified, the backend reported; then the
 *     same into VMM memory (cuMemCreate, exportable as a file descriptor), whose descriptor travels
 *     through the decode's fd server.
 *  3. Streamed offers (pdr_xfer_push_open / pdr_xfer_push_part) from device memory: over TCP staging in
 *     one process (device 0 → device 1 with two GPUs), and over CUDA IPC between the two processes
 *     (room 7); the first part alone until the mover moved it (the decode's progress for staging, the
 *     prefill's for CUDA IPC), the rest in reverse order; every byte verified on the device.
 * Each case runs in a child of the runner that made no CUDA call, and exits 77 without a usable CUDA
 * driver and device. At the end of each case it prints `nvidia-smi --query-compute-apps=pid,used_memory
 * --format=csv` and the case's pid: that process must appear only on the devices it registered memory on
 * (the lead checks the output).
 * PDR_TEST_GPU_BYTES overrides the room size; PDR_TEST_IO_THREADS and PDR_TEST_STAGING_CHUNKS set the
 * engines' io_threads and staging_chunks (for measurements), and a host → host room of the same size is
 * timed first as the loopback TCP reference.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpu_cuda.h"
#include "err.h"
#include "transport.h"
#include "test_shim_util.h"
#include "../unit/runner.h"

#define PIECE (64u << 20)

static size_t room_bytes(void)
{
    size_t size = (size_t)32768 * (320u << 10) / 8; /* 1.25 GiB */
    const char *env = getenv("PDR_TEST_GPU_BYTES");
    if (env != NULL) {
        char *end;
        unsigned long long v = strtoull(env, &end, 10);
        if (*end == '\0' && v > 0)
            size = (size_t)v;
    }
    return size;
}

/* Fills device memory with the test pattern of seed, through a host bounce buffer. */
static void dev_fill(void *dev, size_t len, uint64_t seed)
{
    uint8_t *h = malloc(PIECE);
    CHECK(h != NULL);
    for (size_t off = 0; off < len; off += PIECE) {
        size_t n = len - off < PIECE ? len - off : PIECE;
        fill(h, n, seed, off);
        CHECK_EQ_ERR(pdr__cuda_copy_sync((uint8_t *)dev + off, h, n), 0);
    }
    free(h);
}

static int dev_check(const void *dev, size_t len, uint64_t seed)
{
    uint8_t *h = malloc(PIECE);
    CHECK(h != NULL);
    int ok = 1;
    for (size_t off = 0; off < len && ok; off += PIECE) {
        size_t n = len - off < PIECE ? len - off : PIECE;
        CHECK_EQ_ERR(pdr__cuda_copy_sync(h, (const uint8_t *)dev + off, n), 0);
        ok = check_fill(h, n, seed, off);
    }
    free(h);
    return ok;
}

static void *dev_alloc(int dev, size_t len)
{
    void *p = NULL;
    CHECK_EQ_ERR(pdr__cuda_bind(dev), 0);
    CHECK_EQ_ERR(pdr__cuda_mem_alloc(len, &p), 0);
    return p;
}

static int env_int(const char *name, int dflt)
{
    const char *env = getenv(name);
    if (env == NULL)
        return dflt;
    char *end;
    long v = strtol(env, &end, 10);
    return *end == '\0' && v > 0 && v <= 64 ? (int)v : dflt;
}

static void test_host_reference(void)
{
    size_t size = room_bytes();
    int err;
    pdr_xfer_opts_t po = {.listen_host = "127.0.0.1", .io_threads = env_int("PDR_TEST_IO_THREADS", 0)};
    pdr_xfer_opts_t dopt = {.io_threads = env_int("PDR_TEST_IO_THREADS", 0)};
    pdr_xfer_engine_t *pre = pdr_xfer_engine_create(&po, &err), *dec = pdr_xfer_engine_create(&dopt, &err);
    CHECK(pre && dec);
    uint8_t *src = malloc(size), *dst = malloc(size);
    CHECK(src && dst);
    memset(src, 0x3C, size);
    memset(dst, 0, size);
    pdr_xfer_seg_t s = {src, size}, d = {dst, size};
    struct done a, b;
    done_init(&a);
    done_init(&b);
    uint64_t t0 = t_now_ns();
    CHECK_EQ_ERR(pdr_xfer_pull(dec, "127.0.0.1", pdr_xfer_listen_port(pre), 90, &d, 1, 120000, done_cb, &b),
                 0);
    CHECK_EQ_ERR(pdr_xfer_push(pre, 90, &s, 1, 120000, done_cb, &a), 0);
    CHECK(done_wait(&a, 1, 130000) == 1 && done_wait(&b, 1, 130000) == 1);
    CHECK_EQ_ERR(b.status, 0);
    double secs = (double)(t_now_ns() - t0) / 1e9;
    CHECK(memcmp(src, dst, size) == 0);
    printf("host -> host over tcp (reference): %zu bytes in %.2f s (%.2f GB/s)\n", size, secs,
           (double)size / secs / 1e9);
    pdr_xfer_engine_destroy(dec);
    pdr_xfer_engine_destroy(pre);
    free(src);
    free(dst);
    done_fini(&a);
    done_fini(&b);
}

static void test_staging(int src_dev, int dst_dev)
{
    size_t size = room_bytes();
    int err;
    int nio = env_int("PDR_TEST_IO_THREADS", 0), nstg = env_int("PDR_TEST_STAGING_CHUNKS", 4);
    pdr_xfer_opts_t po = {
        .listen_host = "127.0.0.1", .backend = "tcp", .io_threads = nio, .staging_chunks = (size_t)nstg};
    pdr_xfer_opts_t dopt = {.backend = "tcp", .io_threads = nio, .staging_chunks = (size_t)nstg};
    pdr_xfer_engine_t *pre = pdr_xfer_engine_create(&po, &err);
    pdr_xfer_engine_t *dec = pdr_xfer_engine_create(&dopt, &err);
    CHECK(pre && dec);
    int port = pdr_xfer_listen_port(pre);
    uint8_t *src = dev_alloc(src_dev, size), *dst = dev_alloc(dst_dev, size);
    dev_fill(src, size, 7);
    CHECK_EQ_ERR(pdr__cuda_bind(dst_dev), 0);
    CHECK_EQ_ERR(pdr__cuda_memset(dst, 0, size), 0);
    CHECK_EQ_ERR(pdr_xfer_mem_register(pre, src, size, PDR_XFER_MEM_AUTO), 0);
    CHECK_EQ_ERR(pdr_xfer_mem_register(dec, dst, size, PDR_XFER_MEM_CUDA), 0);
    /* Several segments each side, cut at different places (as KV layers would be). */
    pdr_xfer_seg_t ss[4], ds[3];
    size_t q = size / 4;
    for (int i = 0; i < 4; i++)
        ss[i] = (pdr_xfer_seg_t){src + (size_t)i * q, i == 3 ? size - 3 * q : q};
    ds[0] = (pdr_xfer_seg_t){dst, size / 3 + 1};
    ds[1] = (pdr_xfer_seg_t){dst + size / 3 + 1, size / 3};
    ds[2] = (pdr_xfer_seg_t){dst + 2 * (size / 3) + 1, size - 2 * (size / 3) - 1};
    struct info_done a, b;
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    done_init(&a.d);
    done_init(&b.d);
    uint64_t t0 = t_now_ns();
    CHECK_EQ_ERR(pdr_xfer_pull_ex(dec, "127.0.0.1", port, 1, ds, 3, 120000, info_cb, &b), 0);
    CHECK_EQ_ERR(pdr_xfer_push_ex(pre, 1, ss, 4, 120000, info_cb, &a), 0);
    CHECK(done_wait(&a.d, 1, 150000) == 1 && done_wait(&b.d, 1, 150000) == 1);
    CHECK_EQ_ERR(a.d.status, 0);
    CHECK_EQ_ERR(b.d.status, 0);
    double secs = (double)(t_now_ns() - t0) / 1e9;
    CHECK(strcmp(a.backend, "tcp") == 0 && strcmp(b.backend, "tcp") == 0);
    CHECK(dev_check(dst, size, 7));
    pdr_xfer_stats_t sp, sd;
    pdr_xfer_get_stats(pre, &sp);
    pdr_xfer_get_stats(dec, &sd);
    uint64_t bound = 4ull * (uint64_t)nstg * (1u << 20); /* conns_per_peer × staging_chunks × chunk_bytes */
    printf("device %d -> device %d over tcp staging: %zu bytes in %.2f s (%.2f GB/s); staging peak: prefill "
           "%llu, decode %llu bytes (bound %llu)\n",
           src_dev, dst_dev, size, secs, (double)size / secs / 1e9, (unsigned long long)sp.staging_peak_bytes,
           (unsigned long long)sd.staging_peak_bytes, (unsigned long long)bound);
    CHECK(sp.staging_peak_bytes > 0 && sp.staging_peak_bytes <= bound);
    CHECK(sd.staging_peak_bytes > 0 && sd.staging_peak_bytes <= bound);

    /* Host → device and device → host. */
    size_t hs = 96u << 20;
    uint8_t *h = malloc(hs);
    CHECK(h != NULL);
    fill(h, hs, 9, 0);
    pdr_xfer_seg_t hseg = {h, hs}, dseg = {dst, hs}, sseg = {src, hs};
    done_init(&a.d);
    done_init(&b.d);
    CHECK_EQ_ERR(pdr_xfer_push_ex(pre, 2, &hseg, 1, 60000, info_cb, &a), 0);
    CHECK_EQ_ERR(pdr_xfer_pull_ex(dec, "127.0.0.1", port, 2, &dseg, 1, 60000, info_cb, &b), 0);
    CHECK(done_wait(&a.d, 1, 70000) == 1 && done_wait(&b.d, 1, 70000) == 1);
    CHECK_EQ_ERR(b.d.status, 0);
    CHECK(dev_check(dst, hs, 9));
    memset(h, 0, hs);
    done_init(&a.d);
    done_init(&b.d);
    CHECK_EQ_ERR(pdr_xfer_push_ex(pre, 3, &sseg, 1, 60000, info_cb, &a), 0);
    CHECK_EQ_ERR(pdr_xfer_pull_ex(dec, "127.0.0.1", port, 3, &hseg, 1, 60000, info_cb, &b), 0);
    CHECK(done_wait(&a.d, 1, 70000) == 1 && done_wait(&b.d, 1, 70000) == 1);
    CHECK_EQ_ERR(b.d.status, 0);
    CHECK(check_fill(h, hs, 7, 0));
    free(h);

    pdr_xfer_engine_destroy(dec);
    pdr_xfer_engine_destroy(pre);
    pdr_xfer_get_stats(NULL, &sp); /* a NULL engine: zeros, no crash */
    CHECK(sp.transfers == 0);
    pdr__cuda_mem_free(src);
    pdr__cuda_mem_free(dst);
    done_fini(&a.d);
    done_fini(&b.d);
    printf("ok staging %d -> %d\n", src_dev, dst_dev);
}

#define NPARTS 8

/* Bytes moved of room on eng once they reach want (polled every 200 µs), or what was read at the end. */
static uint64_t progress_at_least(pdr_xfer_engine_t *eng, uint64_t room, uint64_t want, int timeout_ms)
{
    uint64_t end = t_now_ns() + (uint64_t)timeout_ms * 1000000u, moved = 0;
    while (t_now_ns() < end) {
        if (pdr_xfer_progress(eng, room, &moved, NULL) != 0 || moved >= want)
            break;
        usleep(200);
    }
    return moved;
}

/* Publishes part i of NPARTS of the size-byte room from src. */
static void publish_part(pdr_xfer_engine_t *pre, uint64_t room, uint8_t *src, size_t size, int i)
{
    size_t lo = size * (size_t)i / NPARTS, hi = size * (size_t)(i + 1) / NPARTS;
    pdr_xfer_seg_t ps[2] = {{src + lo, (hi - lo) / 2}, {src + lo + (hi - lo) / 2, hi - lo - (hi - lo) / 2}};
    CHECK_EQ_ERR(pdr_xfer_push_part(pre, room, lo, ps, 2), 0);
}

/* A streamed offer over TCP staging, device src_dev to device dst_dev, in one process. */
static void test_staging_parts(int src_dev, int dst_dev)
{
    size_t size = room_bytes();
    int err;
    pdr_xfer_opts_t po = {.listen_host = "127.0.0.1", .backend = "tcp"};
    pdr_xfer_opts_t dopt = {.backend = "tcp"};
    pdr_xfer_engine_t *pre = pdr_xfer_engine_create(&po, &err);
    pdr_xfer_engine_t *dec = pdr_xfer_engine_create(&dopt, &err);
    CHECK(pre && dec);
    uint8_t *src = dev_alloc(src_dev, size), *dst = dev_alloc(dst_dev, size);
    dev_fill(src, size, 13);
    CHECK_EQ_ERR(pdr__cuda_bind(dst_dev), 0);
    CHECK_EQ_ERR(pdr__cuda_memset(dst, 0, size), 0);
    CHECK_EQ_ERR(pdr_xfer_mem_register(pre, src, size, PDR_XFER_MEM_CUDA), 0);
    CHECK_EQ_ERR(pdr_xfer_mem_register(dec, dst, size, PDR_XFER_MEM_CUDA), 0);
    struct info_done a, b;
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    done_init(&a.d);
    done_init(&b.d);
    pdr_xfer_seg_t ds[2] = {{dst, size / 3}, {dst + size / 3, size - size / 3}};
    uint64_t t0 = t_now_ns();
    CHECK_EQ_ERR(pdr_xfer_push_open(pre, 8, size, 120000, info_cb, &a), 0);
    CHECK_EQ_ERR(pdr_xfer_pull_ex(dec, "127.0.0.1", pdr_xfer_listen_port(pre), 8, ds, 2, 120000, info_cb, &b),
                 0);
    publish_part(pre, 8, src, size, 0);
    uint64_t first = size / NPARTS, got = progress_at_least(dec, 8, first, 60000);
    printf("staging parts: part 1 of %d in place on the decode after %.3f s\n", NPARTS,
           (double)(t_now_ns() - t0) / 1e9);
    CHECK(got == first && b.d.count == 0);
    for (int i = NPARTS - 1; i >= 1; i--)
        publish_part(pre, 8, src, size, i);
    CHECK(done_wait(&a.d, 1, 130000) == 1 && done_wait(&b.d, 1, 130000) == 1);
    CHECK_EQ_ERR(a.d.status, 0);
    CHECK_EQ_ERR(b.d.status, 0);
    CHECK(strcmp(a.backend, "tcp") == 0 && strcmp(b.backend, "tcp") == 0);
    CHECK(dev_check(dst, size, 13));
    pdr_xfer_engine_destroy(dec);
    pdr_xfer_engine_destroy(pre);
    pdr__cuda_mem_free(src);
    pdr__cuda_mem_free(dst);
    done_fini(&a.d);
    done_fini(&b.d);
    printf("ok staging parts %d -> %d\n", src_dev, dst_dev);
}

/* The prefill process of the IPC test: waits for "go", offers room 5 from device 0. */
static int ipc_child(int rfd, int wfd)
{
    char go;
    if (read(rfd, &go, 1) != 1 || go != 'g')
        _exit(0);
    if (pdr__cuda_init() != 0)
        _exit(77);
    size_t size = room_bytes();
    uint8_t *src = dev_alloc(0, size);
    dev_fill(src, size, 11);
    int err;
    pdr_xfer_opts_t po = {.listen_host = "127.0.0.1"};
    pdr_xfer_engine_t *pre = pdr_xfer_engine_create(&po, &err);
    CHECK(pre != NULL);
    CHECK_EQ_ERR(pdr_xfer_mem_register(pre, src, size, PDR_XFER_MEM_AUTO), 0);
    struct info_done a;
    memset(&a, 0, sizeof(a));
    done_init(&a.d);
    pdr_xfer_seg_t s[2] = {{src, size / 2}, {src + size / 2, size - size / 2}};
    CHECK_EQ_ERR(pdr_xfer_push_ex(pre, 5, s, 2, 120000, info_cb, &a), 0);
    int port = pdr_xfer_listen_port(pre);
    CHECK(write(wfd, &port, sizeof(port)) == sizeof(port));
    CHECK(done_wait(&a.d, 1, 130000) == 1);
    printf("ipc prefill: status %s, backend %s\n", pdr_errname(a.d.status), a.backend);
    int rc = a.d.status == 0 && strcmp(a.backend, "cuda_ipc") == 0 ? 0 : 1;
    /* Room 6: the same bytes, pulled into VMM memory. */
    done_init(&a.d);
    CHECK_EQ_ERR(pdr_xfer_push_ex(pre, 6, s, 2, 120000, info_cb, &a), 0);
    CHECK(done_wait(&a.d, 1, 130000) == 1);
    printf("ipc prefill (vmm destination): status %s, backend %s\n", pdr_errname(a.d.status), a.backend);
    if (a.d.status != 0 || strcmp(a.backend, "cuda_ipc") != 0)
        rc = 1;
    /* Room 7: the same bytes as a streamed offer; part 1 alone until its copy completed here. */
    done_init(&a.d);
    CHECK_EQ_ERR(pdr_xfer_push_open(pre, 7, size, 120000, info_cb, &a), 0);
    publish_part(pre, 7, src, size, 0);
    uint64_t first = size / NPARTS;
    if (progress_at_least(pre, 7, first, 60000) != first || a.d.count != 0)
        rc = 1;
    for (int i = NPARTS - 1; i >= 1; i--)
        publish_part(pre, 7, src, size, i);
    CHECK(done_wait(&a.d, 1, 130000) == 1);
    printf("ipc prefill (streamed in %d parts): status %s, backend %s\n", NPARTS, pdr_errname(a.d.status),
           a.backend);
    if (a.d.status != 0 || strcmp(a.backend, "cuda_ipc") != 0)
        rc = 1;
    pdr_xfer_engine_destroy(pre);
    pdr__cuda_mem_free(src);
    _exit(rc);
}

static void test_ipc(pid_t child, int go_fd, int port_fd, int ndev)
{
    char g = 'g';
    CHECK(write(go_fd, &g, 1) == 1);
    int port = 0;
    CHECK(read(port_fd, &port, sizeof(port)) == sizeof(port));
    int dst_dev = ndev > 1 ? 1 : 0;
    size_t size = room_bytes();
    uint8_t *dst = dev_alloc(dst_dev, size);
    CHECK_EQ_ERR(pdr__cuda_memset(dst, 0, size), 0);
    int err;
    pdr_xfer_engine_t *dec = pdr_xfer_engine_create(NULL, &err);
    CHECK(dec != NULL);
    CHECK_EQ_ERR(pdr_xfer_mem_register(dec, dst, size, PDR_XFER_MEM_AUTO), 0);
    struct info_done b;
    memset(&b, 0, sizeof(b));
    done_init(&b.d);
    pdr_xfer_seg_t d = {dst, size};
    uint64_t t0 = t_now_ns();
    CHECK_EQ_ERR(pdr_xfer_pull_ex(dec, "127.0.0.1", port, 5, &d, 1, 120000, info_cb, &b), 0);
    CHECK(done_wait(&b.d, 1, 130000) == 1);
    double secs = (double)(t_now_ns() - t0) / 1e9;
    CHECK_EQ_ERR(b.d.status, 0);
    printf("ipc: device 0 (pid %d) -> device %d (pid %d): %zu bytes in %.3f s (%.2f GB/s), backend %s\n",
           (int)child, dst_dev, (int)getpid(), size, secs, (double)size / secs / 1e9, b.backend);
    CHECK(dev_check(dst, size, 11));

    /* Room 6 into VMM memory (as PyTorch's expandable segments allocate): no legacy IPC handle, the
     * allocation travels as a file descriptor. */
    void *vmm = NULL;
    size_t vlen = 0;
    CHECK_EQ_ERR(pdr__cuda_bind(dst_dev), 0);
    CHECK_EQ_ERR(pdr__cuda_vmm_alloc(dst_dev, size, &vmm, &vlen), 0);
    CHECK_EQ_ERR(pdr__cuda_memset(vmm, 0, vlen), 0);
    CHECK_EQ_ERR(pdr_xfer_mem_register(dec, vmm, vlen, PDR_XFER_MEM_CUDA), 0);
    struct info_done v;
    memset(&v, 0, sizeof(v));
    done_init(&v.d);
    pdr_xfer_seg_t vs[2] = {{vmm, size / 3}, {(uint8_t *)vmm + size / 3, size - size / 3}};
    t0 = t_now_ns();
    CHECK_EQ_ERR(pdr_xfer_pull_ex(dec, "127.0.0.1", port, 6, vs, 2, 120000, info_cb, &v), 0);
    CHECK(done_wait(&v.d, 1, 130000) == 1);
    secs = (double)(t_now_ns() - t0) / 1e9;
    CHECK_EQ_ERR(v.d.status, 0);
    printf("ipc into VMM memory: device 0 -> device %d: %zu bytes in %.3f s (%.2f GB/s), backend %s\n",
           dst_dev, size, secs, (double)size / secs / 1e9, v.backend);
    CHECK(dev_check(vmm, size, 11));
    CHECK(strcmp(v.backend, "cuda_ipc") == 0);
    done_fini(&v.d);

    /* Room 7: a streamed offer over CUDA IPC, into the first destination again. */
    CHECK_EQ_ERR(pdr__cuda_bind(dst_dev), 0);
    CHECK_EQ_ERR(pdr__cuda_memset(dst, 0, size), 0);
    struct info_done w;
    memset(&w, 0, sizeof(w));
    done_init(&w.d);
    pdr_xfer_seg_t ws[2] = {{dst, size / 5}, {dst + size / 5, size - size / 5}};
    CHECK_EQ_ERR(pdr_xfer_pull_ex(dec, "127.0.0.1", port, 7, ws, 2, 120000, info_cb, &w), 0);
    CHECK(done_wait(&w.d, 1, 130000) == 1);
    CHECK_EQ_ERR(w.d.status, 0);
    CHECK(strcmp(w.backend, "cuda_ipc") == 0);
    CHECK(dev_check(dst, size, 11));
    done_fini(&w.d);
    printf("ok ipc streamed in %d parts\n", NPARTS);
    int st = 0;
    while (waitpid(child, &st, 0) < 0 && errno == EINTR) {
    }
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(strcmp(b.backend, "cuda_ipc") == 0); /* one host, device memory on both ends */
    pdr_xfer_engine_destroy(dec);
    pdr__cuda_mem_free(dst);
    pdr__cuda_vmm_free(vmm, vlen);
    done_fini(&b.d);
    printf("ok ipc (%s), ok ipc into VMM memory\n", b.backend);
}

/* The device count; exits 77 (skipped) without a usable CUDA driver or device. */
static int cuda_or_skip(void)
{
    if (pdr__cuda_init() != 0) {
        printf("skip: no usable CUDA driver or device\n");
        exit(77);
    }
    int ndev = pdr__cuda_device_count();
    printf("%d CUDA device(s)\n", ndev);
    return ndev;
}

static void case_host_reference(void)
{
    (void)cuda_or_skip();
    test_host_reference();
}

static void case_staging(void)
{
    int ndev = cuda_or_skip();
    test_staging(0, ndev > 1 ? 1 : 0);
}

/* With two GPUs the same on one device; with one, case_staging did it already. */
static void case_staging_one_device(void)
{
    int ndev = cuda_or_skip();
    if (ndev > 1)
        test_staging(0, 0);
}

static void case_staging_parts(void)
{
    int ndev = cuda_or_skip();
    test_staging_parts(0, ndev > 1 ? 1 : 0);
}

/* The IPC prefill is forked before this process makes any CUDA call. */
static void case_ipc(void)
{
    int go[2], ports[2];
    CHECK(pipe(go) == 0 && pipe(ports) == 0);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        close(go[1]);
        close(ports[0]);
        exit(ipc_child(go[0], ports[1]));
    }
    close(go[0]);
    close(ports[1]);
    if (pdr__cuda_init() != 0) {
        close(go[1]); /* the child reads EOF and exits */
        waitpid(child, NULL, 0);
        printf("skip: no usable CUDA driver or device\n");
        exit(77);
    }
    int ndev = pdr__cuda_device_count();
    printf("%d CUDA device(s)\n", ndev);
    test_ipc(child, go[1], ports[0], ndev);
}

static void setup(void)
{
    signal(SIGPIPE, SIG_IGN);
}

static void teardown(void)
{
    printf("pid %d; nvidia-smi compute apps (this pid must appear only on the devices it used):\n",
           (int)getpid());
    fflush(stdout);
    int rc = system("nvidia-smi --query-compute-apps=pid,used_memory --format=csv");
    (void)rc;
}

static const pdr_test_case_t cases[] = {
    {"host_reference", case_host_reference, 60},
    {"staging", case_staging, 120},
    {"staging_one_device", case_staging_one_device, 120},
    {"staging_parts", case_staging_parts, 120},
    {"ipc", case_ipc, 300},
};

int main(int argc, char **argv)
{
    int rc = pdr_test_run(cases, sizeof(cases) / sizeof(cases[0]), setup, teardown, argc, argv);
    if (rc == 0)
        printf("all ok\n");
    return rc;
}
