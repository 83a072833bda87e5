/*
 * The CUDA loader on a real GPU (exits 77 where pdr__cuda_init() fails, i.e. without a driver or device).
 *
 * Checks: device memory and pinned memory on every device, async copies with events (round trip,
 * byte-exact), pointer classification without a context, errors translated (out of memory), an unbound
 * thread refused, d2d and peer copies across devices, a dma-buf fd, PCI bus id and UUID, the pattern
 * kernels (fill and compare, from PTX), pdr__cuda_copy_sync and pdr__cuda_memset complete on return
 * (another stream reads their bytes right after, while the device is busy), and CUDA IPC:
 * a child process exports device memory, this process opens and reads it. The child is forked before
 * any CUDA call here (CUDA state does not survive fork). At the end of "devices" and of "ipc" nvidia-smi
 * must list the case's process at most once per device, and only on devices it bound (the
 * stray-context-on-GPU0 check). Each case runs in a child of the runner that made no CUDA call, so each
 * starts from a process without CUDA state; every case exits 77 without a driver or a device.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "runner.h"
#include "gpu_cuda.h"
#include "err.h"

#define LEN (8u << 20)
#define IPC_LEN (1u << 20)
#define IPC_OFF 4096u
#define MAXDEV 16

struct ipc_msg {
    int rc;
    unsigned char handle[PDR_CUDA_IPC_HANDLE_BYTES];
    uint64_t offset;
};

static unsigned char pattern(size_t i, unsigned seed)
{
    return (unsigned char)((i * 131u + seed * 7u + (i >> 12)) & 0xff);
}

static int read_full(int fd, void *buf, size_t len)
{
    unsigned char *p = buf;
    while (len > 0) {
        ssize_t n = read(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int write_full(int fd, const void *buf, size_t len)
{
    const unsigned char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* The exporting child: device 0, 1 MiB, the pattern starting at IPC_OFF; waits for the parent's "done". */
static int child_main(int to_parent, int from_parent)
{
    struct ipc_msg m;
    memset(&m, 0, sizeof(m));
    m.rc = pdr__cuda_init();
    void *dev = NULL;
    unsigned char *host = malloc(IPC_LEN);
    if (m.rc == 0)
        m.rc = pdr__cuda_bind(0);
    if (m.rc == 0)
        m.rc = pdr__cuda_mem_alloc(IPC_OFF + IPC_LEN, &dev);
    if (m.rc == 0 && host == NULL)
        m.rc = PDR_ENOMEM;
    if (m.rc == 0) {
        for (size_t i = 0; i < IPC_LEN; i++)
            host[i] = pattern(i, 99);
        m.rc = pdr__cuda_copy_sync((char *)dev + IPC_OFF, host, IPC_LEN);
    }
    if (m.rc == 0)
        m.rc = pdr__cuda_ipc_export((char *)dev + IPC_OFF, m.handle, &m.offset);
    if (write_full(to_parent, &m, sizeof(m)) != 0)
        return 1;
    char done;
    (void)read_full(from_parent, &done, 1);
    pdr__cuda_mem_free(dev);
    free(host);
    return m.rc == 0 ? 0 : 1;
}

static void *unbound_thread(void *arg)
{
    void **dev = arg;
    void *p = NULL;
    int is_dev = 0, ord = -1;
    CHECK(pdr__cuda_host_alloc(4096, &p) == PDR_EINVAL); /* no context bound on this thread */
    CHECK(strstr(pdr__cuda_last_error(), "bind") != NULL);
    CHECK(pdr__cuda_ptr_info(*dev, &is_dev, &ord) == 0 && is_dev == 1 && ord == 0);
    return NULL;
}

static int verify(const unsigned char *buf, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++)
        if (buf[i] != pattern(i, seed)) {
            fprintf(stderr, "byte %zu: got %u want %u\n", i, buf[i], pattern(i, seed));
            return 0;
        }
    return 1;
}

static void fmt_uuid(const unsigned char u[16], char *out, size_t len)
{
    snprintf(out, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
             u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

/* Round trip on one device: pinned → device → device (d2d) → pinned, with events, byte-exact. */
static void per_device(int d, void **dev_out)
{
    void *dev = NULL, *dev2 = NULL, *h1 = NULL, *h2 = NULL, *s = NULL, *ev = NULL;
    CHECK(pdr__cuda_bind(d) == 0);
    CHECK(pdr__cuda_mem_alloc(LEN, &dev) == 0);
    CHECK(pdr__cuda_mem_alloc(LEN, &dev2) == 0);
    CHECK(pdr__cuda_host_alloc(LEN, &h1) == 0);
    CHECK(pdr__cuda_host_alloc(LEN, &h2) == 0);
    CHECK(pdr__cuda_stream_create(&s) == 0);
    CHECK(pdr__cuda_event_create(&ev) == 0);
    if (!dev || !dev2 || !h1 || !h2 || !s || !ev)
        return;

    int is_dev = -1, ord = -1;
    CHECK(pdr__cuda_ptr_info(dev, &is_dev, &ord) == 0 && is_dev == 1 && ord == d);
    CHECK(pdr__cuda_ptr_info((char *)dev + 12345, &is_dev, &ord) == 0 && is_dev == 1 && ord == d);
    CHECK(pdr__cuda_ptr_info(h1, &is_dev, &ord) == 0 && is_dev == 0);
    char stackbuf[16];
    CHECK(pdr__cuda_ptr_info(stackbuf, &is_dev, &ord) == 0 && is_dev == 0);

    for (size_t i = 0; i < LEN; i++)
        ((unsigned char *)h1)[i] = pattern(i, (unsigned)d);
    memset(h2, 0, LEN);
    CHECK(pdr__cuda_memset(dev2, 0xee, LEN) == 0);
    CHECK(pdr__cuda_copy_h2d_async(dev, h1, LEN, s) == 0);
    CHECK(pdr__cuda_copy_d2d_async(dev2, dev, LEN, s) == 0);
    CHECK(pdr__cuda_copy_d2h_async(h2, dev2, LEN, s) == 0);
    CHECK(pdr__cuda_event_record(ev, s) == 0);
    int rc, polls = 0;
    while ((rc = pdr__cuda_event_query(ev)) == PDR_EAGAIN)
        polls++;
    CHECK(rc == 0);
    CHECK(verify(h2, LEN, (unsigned)d));
    printf("device %d: round trip of %u bytes ok (%d polls)\n", d, LEN, polls);

    /* Piecewise 64 KiB copies, synchronized with event_sync. */
    memset(h2, 0, LEN);
    for (size_t off = 0; off < LEN; off += 65536)
        CHECK(pdr__cuda_copy_d2h_async((char *)h2 + off, (char *)dev + off, 65536, s) == 0);
    CHECK(pdr__cuda_event_record(ev, s) == 0);
    CHECK(pdr__cuda_event_sync(ev) == 0);
    CHECK(pdr__cuda_stream_sync(s) == 0);
    CHECK(verify(h2, LEN, (unsigned)d));

    /* dma-buf: cuMemAlloc of 8 MiB is 2 MiB aligned. */
    int fd = -1;
    rc = pdr__cuda_dmabuf_fd(dev, LEN, &fd);
    printf("device %d: dma-buf fd %d (rc %d %s)\n", d, fd, rc, rc ? pdr__cuda_last_error() : "");
    CHECK(rc == 0 && fd >= 0);
    if (fd >= 0)
        close(fd);
    CHECK(pdr__cuda_dmabuf_fd((char *)dev + 1, 4096, &fd) == PDR_EINVAL);

    void *huge = NULL;
    CHECK(pdr__cuda_mem_alloc((size_t)1 << 50, &huge) == PDR_ENOMEM);
    CHECK(strcmp(pdr__cuda_last_error(), "CUDA_ERROR_OUT_OF_MEMORY") == 0);

    pdr__cuda_event_destroy(ev);
    pdr__cuda_stream_destroy(s);
    pdr__cuda_host_free(h1);
    pdr__cuda_host_free(h2);
    pdr__cuda_mem_free(dev2);
    *dev_out = dev;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The pattern kernels: a fill read back word by word, checks that find nothing, everything, a sub-range
 * from its word0 and three planted words (counted, the lowest located), arguments refused, and the rate
 * of both over 1 GiB (pdxfer-bench checks every GPU room this way). */
static void pattern_kernels(int d)
{
    size_t len = (size_t)8 * 1000003; /* not a multiple of a thread block's 256 words */
    void *dev = NULL, *scratch = NULL, *s = NULL;
    CHECK(pdr__cuda_bind(d) == 0);
    CHECK(pdr__cuda_mem_alloc(len, &dev) == 0);
    CHECK(pdr__cuda_mem_alloc(16, &scratch) == 0);
    CHECK(pdr__cuda_stream_create(&s) == 0);
    uint64_t *h = malloc(len);
    CHECK(h != NULL);
    if (!dev || !scratch || !s || !h)
        return;
    int rc = pdr__cuda_pattern_fill(dev, len, 42, 0, s);
    if (rc == 0)
        rc = pdr__cuda_stream_sync(s);
    if (rc != 0)
        printf("device %d: pattern fill: %s (%s)\n", d, pdr_strerror(rc), pdr__cuda_last_error());
    CHECK(rc == 0);
    CHECK(pdr__cuda_copy_sync(h, dev, len) == 0);
    size_t wrong = 0;
    for (size_t w = 0; w < len / 8; w++)
        wrong += h[w] != pdr__cuda_pattern_word(42, w);
    CHECK(wrong == 0);
    struct pdr_cuda_check ck;
    CHECK(pdr__cuda_pattern_check(dev, len, 42, 0, scratch, s, &ck) == 0);
    CHECK(ck.mismatches == 0 && ck.first_bad == UINT64_MAX);
    CHECK(pdr__cuda_pattern_check(dev, len, 43, 0, scratch, s, &ck) == 0);
    CHECK(ck.mismatches == len / 8 && ck.first_bad == 0);
    CHECK(pdr__cuda_pattern_check((uint64_t *)dev + 1000, len - 8000, 42, 1000, scratch, s, &ck) == 0);
    CHECK(ck.mismatches == 0);
    CHECK(pdr__cuda_pattern_check(dev, 8, 42, 0, scratch, s, &ck) == 0 && ck.mismatches == 0);
    const size_t planted[3] = {len / 8 - 1, 777777, 7};
    uint64_t junk = 0;
    for (int i = 0; i < 3; i++)
        CHECK(pdr__cuda_copy_sync((uint64_t *)dev + planted[i], &junk, 8) == 0);
    CHECK(pdr__cuda_pattern_check(dev, len, 42, 0, scratch, s, &ck) == 0);
    CHECK(ck.mismatches == 3 && ck.first_bad == 7);
    printf("device %d: pattern check found %llu wrong words, the first at word %llu\n", d,
           (unsigned long long)ck.mismatches, (unsigned long long)ck.first_bad);
    CHECK(pdr__cuda_pattern_check((char *)dev + 4, 8, 42, 0, scratch, s, &ck) == PDR_EINVAL);
    CHECK(pdr__cuda_pattern_fill(dev, 12, 42, 0, s) == PDR_EINVAL);

    void *big = NULL;
    size_t blen = (size_t)1 << 30;
    if (pdr__cuda_mem_alloc(blen, &big) == 0) {
        double t0 = now_s();
        CHECK(pdr__cuda_pattern_fill(big, blen, 5, 0, s) == 0 && pdr__cuda_stream_sync(s) == 0);
        double t1 = now_s();
        CHECK(pdr__cuda_pattern_check(big, blen, 5, 0, scratch, s, &ck) == 0 && ck.mismatches == 0);
        double t2 = now_s();
        printf("device %d: pattern fill %.0f GB/s, check %.0f GB/s over 1 GiB\n", d,
               (double)blen / (t1 - t0) / 1e9, (double)blen / (t2 - t1) / 1e9);
        pdr__cuda_mem_free(big);
    }
    free(h);
    pdr__cuda_stream_destroy(s);
    pdr__cuda_mem_free(scratch);
    pdr__cuda_mem_free(dev);
}

/* pdr__cuda_copy_sync (8 bytes from pageable memory) and pdr__cuda_memset return with the bytes in
 * place: a copy on a non-blocking stream, which nothing orders after them, reads them right after, while
 * a third stream keeps the device busy with large copies. */
static void sync_helpers(int d)
{
    size_t blen = (size_t)256 << 20;
    void *a = NULL, *b = NULL, *x = NULL, *pinned = NULL, *sb = NULL, *sr = NULL;
    CHECK(pdr__cuda_bind(d) == 0);
    CHECK(pdr__cuda_mem_alloc(blen, &a) == 0 && pdr__cuda_mem_alloc(blen, &b) == 0);
    CHECK(pdr__cuda_mem_alloc(4096, &x) == 0 && pdr__cuda_host_alloc(4096, &pinned) == 0);
    CHECK(pdr__cuda_stream_create(&sb) == 0 && pdr__cuda_stream_create(&sr) == 0);
    if (!a || !b || !x || !pinned || !sb || !sr)
        return;
    int stale = 0, rounds = 2000;
    for (int i = 0; i < rounds; i++) {
        if (i % 4 == 0)
            CHECK(pdr__cuda_copy_d2d_async(b, a, blen, sb) == 0);
        uint64_t v = 0x5100000000000000ull + (uint64_t)i, got = 0;
        CHECK(pdr__cuda_copy_sync(x, &v, 8) == 0);
        CHECK(pdr__cuda_copy_d2h_async(pinned, x, 8, sr) == 0 && pdr__cuda_stream_sync(sr) == 0);
        memcpy(&got, pinned, 8);
        stale += got != v;
        CHECK(pdr__cuda_memset(x, (unsigned char)(i | 1), 8) == 0);
        CHECK(pdr__cuda_copy_d2h_async(pinned, x, 8, sr) == 0 && pdr__cuda_stream_sync(sr) == 0);
        stale += ((unsigned char *)pinned)[7] != (unsigned char)(i | 1);
    }
    CHECK(pdr__cuda_stream_sync(sb) == 0);
    printf("device %d: %d of %d reads right after pdr__cuda_copy_sync / pdr__cuda_memset saw older bytes\n",
           d, stale, 2 * rounds);
    CHECK(stale == 0);
    pdr__cuda_stream_destroy(sb);
    pdr__cuda_stream_destroy(sr);
    pdr__cuda_host_free(pinned);
    pdr__cuda_mem_free(x);
    pdr__cuda_mem_free(a);
    pdr__cuda_mem_free(b);
}

/* nvidia-smi lists compute processes per GPU; this process must appear at most once per device and only
 * on devices it bound. Containers without the host PID namespace list nobody: then nothing to check. */
static void check_nvidia_smi(const int *used, int ndev)
{
    char uuids[MAXDEV][48];
    int seen[MAXDEV] = {0};
    for (int d = 0; d < ndev; d++) {
        unsigned char u[16];
        CHECK(pdr__cuda_uuid(d, u) == 0);
        fmt_uuid(u, uuids[d], sizeof(uuids[d]));
    }
    FILE *f =
        popen("nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader 2>&1", "r");
    if (f == NULL) {
        printf("nvidia-smi: cannot run, not checked\n");
        return;
    }
    char line[512];
    int mine = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        printf("nvidia-smi: %s", line);
        char *end;
        long pid = strtol(line, &end, 10);
        if (end == line || *end != ',' || pid != (long)getpid())
            continue;
        mine++;
        int found = 0;
        for (int d = 0; d < ndev; d++)
            if (strstr(end, uuids[d]) != NULL) {
                found = 1;
                seen[d]++;
                CHECK(used[d]);      /* never on a device it did not bind */
                CHECK(seen[d] == 1); /* one context per device */
            }
        CHECK(found);
    }
    int st = pclose(f);
    printf("nvidia-smi: exit %d, %d line(s) for pid %ld\n", st, mine, (long)getpid());
}

/* The driver's device count (at most MAXDEV); exits 77 (skipped) where the loader finds no driver or
 * device. */
static int cuda_or_skip(void)
{
    if (pdr__cuda_init() != 0) {
        printf("no usable CUDA driver (%s): skipped\n", pdr__cuda_init_error());
        exit(77);
    }
    int ndev = pdr__cuda_device_count();
    CHECK(ndev >= 1);
    if (ndev < 1)
        exit(1);
    return ndev > MAXDEV ? MAXDEV : ndev;
}

/* A process that uses only the last device (pinned memory, copies, pointer queries, an IPC-free d2d)
 * must not show up on any other device: the mooncake bug was a context created on GPU0 by a thread that
 * never bound. A case of its own, so that the use of every device elsewhere does not hide it; with one
 * device there is nothing to see. */
static void test_last_device_only(void)
{
    int ndev = cuda_or_skip();
    if (ndev < 2)
        return;
    int used[MAXDEV] = {0};
    void *dev = NULL, *pinned = NULL, *s = NULL;
    used[ndev - 1] = 1;
    CHECK(pdr__cuda_bind(ndev - 1) == 0);
    CHECK(pdr__cuda_mem_alloc(LEN, &dev) == 0);
    CHECK(pdr__cuda_host_alloc(LEN, &pinned) == 0);
    CHECK(pdr__cuda_stream_create(&s) == 0);
    if (dev && pinned && s) {
        int is_dev, ord;
        CHECK(pdr__cuda_copy_h2d_async(dev, pinned, LEN, s) == 0);
        CHECK(pdr__cuda_copy_d2h_async(pinned, dev, LEN, s) == 0);
        CHECK(pdr__cuda_stream_sync(s) == 0);
        CHECK(pdr__cuda_ptr_info(dev, &is_dev, &ord) == 0 && is_dev == 1 && ord == ndev - 1);
        CHECK(pdr__cuda_ptr_info(pinned, &is_dev, &ord) == 0 && is_dev == 0);
        CHECK(pdr__cuda_copy_sync(pinned, dev, 4096) == 0);
    }
    printf("last-device-only process %ld:\n", (long)getpid());
    check_nvidia_smi(used, ndev);
    pdr__cuda_stream_destroy(s);
    pdr__cuda_host_free(pinned);
    pdr__cuda_mem_free(dev);
}

/* Names, PCI bus ids and UUIDs; the round trip on every device; a thread that never bound; d2d and peer
 * copies between devices 0 and 1 (of the round trip's allocations, hence one case). */
static void test_devices(void)
{
    int ndev = cuda_or_skip();
    printf("driver %d, %d device(s)\n", pdr__cuda_driver_version(), ndev);
    int used[MAXDEV] = {0};
    void *devmem[MAXDEV] = {0};
    for (int d = 0; d < ndev; d++) {
        char name[128] = "", bus[32] = "", us[48];
        unsigned char u[16] = {0};
        CHECK(pdr__cuda_device_name(d, name, sizeof(name)) == 0);
        CHECK(pdr__cuda_pci_bus_id(d, bus, sizeof(bus)) == 0);
        CHECK(strlen(bus) == 12 && bus[4] == ':' && bus[7] == ':' && bus[10] == '.');
        CHECK(pdr__cuda_uuid(d, u) == 0);
        fmt_uuid(u, us, sizeof(us));
        printf("device %d: %s, pci %s, %s\n", d, name, bus, us);
    }
    char small[4];
    CHECK(pdr__cuda_pci_bus_id(0, small, sizeof(small)) == PDR_ETOOBIG);
    CHECK(pdr__cuda_bind(ndev) == PDR_EINVAL);

    for (int d = 0; d < ndev; d++) {
        per_device(d, &devmem[d]);
        used[d] = 1;
    }

    /* A thread that never bound: refused where a context is needed, fine for pointer queries. */
    pthread_t t;
    CHECK(pthread_create(&t, NULL, unbound_thread, &devmem[0]) == 0);
    pthread_join(t, NULL);

    if (ndev >= 2 && devmem[0] && devmem[1]) {
        void *s = NULL;
        unsigned char *h = malloc(LEN);
        CHECK(pdr__cuda_bind(1) == 0);
        CHECK(pdr__cuda_stream_create(&s) == 0);
        CHECK(pdr__cuda_copy_d2d_async(devmem[1], devmem[0], LEN, s) == 0);
        CHECK(pdr__cuda_stream_sync(s) == 0);
        CHECK(h != NULL && pdr__cuda_copy_sync(h, devmem[1], LEN) == 0 && verify(h, LEN, 0));
        CHECK(pdr__cuda_copy_peer_async(devmem[1], 1, devmem[0], 0, LEN, s) == 0);
        CHECK(pdr__cuda_stream_sync(s) == 0);
        printf("device 0 -> 1: d2d and peer copies ok\n");
        pdr__cuda_stream_destroy(s);
        free(h);
    }
    check_nvidia_smi(used, ndev);
    for (int d = 0; d < ndev; d++)
        pdr__cuda_mem_free(devmem[d]);
}

static void test_pattern_kernels(void)
{
    int ndev = cuda_or_skip();
    for (int d = 0; d < ndev; d++)
        pattern_kernels(d);
}

static void test_sync_helpers(void)
{
    int ndev = cuda_or_skip();
    for (int d = 0; d < ndev; d++)
        sync_helpers(d);
}

/* IPC: a child exports memory on its device 0; this process opens it on the last device (peer access
 * enabled lazily when it differs, which makes this process use device 0 as well). */
static void test_ipc(void)
{
    int to_parent[2], to_child[2];
    if (pipe(to_parent) != 0 || pipe(to_child) != 0)
        exit(1);
    pid_t child = fork(); /* before any CUDA call in this process */
    if (child < 0)
        exit(1);
    if (child == 0) {
        close(to_parent[0]);
        close(to_child[1]);
        int rc = child_main(to_parent[1], to_child[0]);
        fflush(stdout);
        _exit(rc);
    }
    close(to_parent[1]);
    close(to_child[0]);
    if (pdr__cuda_init() != 0) {
        printf("no usable CUDA driver (%s): skipped\n", pdr__cuda_init_error());
        close(to_child[1]);
        waitpid(child, NULL, 0);
        exit(77);
    }
    int ndev = pdr__cuda_device_count();
    CHECK(ndev >= 1);
    if (ndev > MAXDEV)
        ndev = MAXDEV;
    int used[MAXDEV] = {0};
    used[0] = used[ndev - 1] = 1;

    struct ipc_msg m;
    CHECK(read_full(to_parent[0], &m, sizeof(m)) == 0);
    printf("child export: rc %d offset %llu\n", m.rc, (unsigned long long)m.offset);
    CHECK(m.rc == 0 && m.offset == IPC_OFF);
    if (m.rc == 0) {
        void *base = NULL;
        unsigned char *h = malloc(IPC_LEN);
        CHECK(pdr__cuda_bind(ndev - 1) == 0);
        int rc = pdr__cuda_ipc_open(m.handle, &base);
        CHECK(rc == 0);
        if (rc == 0 && h != NULL) {
            CHECK(pdr__cuda_copy_sync(h, (char *)base + m.offset, IPC_LEN) == 0);
            CHECK(verify(h, IPC_LEN, 99));
            CHECK(pdr__cuda_ipc_close(base) == 0);
            printf("ipc: read %u bytes from the child's device memory\n", IPC_LEN);
        } else {
            printf("ipc open failed: %s\n", pdr__cuda_last_error());
        }
        free(h);
    }
    CHECK(write_full(to_child[1], "x", 1) == 0);
    int st = 0;
    CHECK(waitpid(child, &st, 0) == child && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    check_nvidia_smi(used, ndev);
}

static const pdr_test_case_t cases[] = {
    {"last_device_only", test_last_device_only, 60},
    {"devices", test_devices, 60},
    {"pattern_kernels", test_pattern_kernels, 60},
    {"sync_helpers", test_sync_helpers, 60},
    {"ipc", test_ipc, 60},
};

int main(int argc, char **argv)
{
    int rc = PDR_TEST_RUN(cases, argc, argv);
    if (rc == 0)
        printf("all checks passed\n");
    return rc;
}
