/*
 * One large room through the engine API with its defaults (several I/O threads, 4 connections per
 * peer): 1 GiB by default, PDR_TEST_BIG_BYTES=4294967296 for 4 GiB; PDR_TEST_CONNS picks
 * conns_per_peer (to compare 1 and 4). Checks every byte, that host memory never touched the staging
 * pool (staging_peak_bytes == 0 on both engines), and that peak RSS (VmHWM) grew by the two buffers plus
 * a small constant: nothing proportional to the room was allocated.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "err.h"
#include "transport.h"
#include "test_shim_util.h"
#include "../unit/runner.h"

static long vm_hwm_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, "VmHWM:", 6) == 0)
            kb = strtol(line + 6, NULL, 10);
    if (f != NULL)
        fclose(f);
    return kb;
}

static unsigned long long env_num(const char *name, unsigned long long dflt, unsigned long long max)
{
    const char *env = getenv(name);
    if (env == NULL)
        return dflt;
    char *end;
    unsigned long long v = strtoull(env, &end, 10);
    if (*end != '\0' || v == 0 || v > max) {
        fprintf(stderr, "%s: want a number in [1, %llu]\n", name, max);
        exit(2);
    }
    return v;
}

/* One case: the room is the whole test (its buffers are most of the process's memory). */
static void test_big_room(void)
{
    size_t size = (size_t)env_num("PDR_TEST_BIG_BYTES", 1ull << 30, 16ull << 30);
    int conns = (int)env_num("PDR_TEST_CONNS", 4, 64);
    int err;
    pdr_xfer_opts_t po = {.listen_host = "127.0.0.1"}, dopt = {.conns_per_peer = conns};
    pdr_xfer_engine_t *pre = pdr_xfer_engine_create(&po, &err), *dec = pdr_xfer_engine_create(&dopt, &err);
    CHECK(pre && dec);
    long before = vm_hwm_kb();
    uint64_t *src = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint8_t *dst = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(src != MAP_FAILED && dst != MAP_FAILED);
    memset(dst, 1, size); /* fault the destination in first: page faults are not what this measures */
    uint64_t s = 88172645463325252ull;
    for (size_t i = 0; i < size / 8; i++)
        src[i] = xorshift(&s);
    for (size_t i = size / 8 * 8; i < size; i++)
        ((uint8_t *)src)[i] = (uint8_t)i;
    pdr_xfer_seg_t ss[2] = {{src, size / 3}, {(uint8_t *)src + size / 3, size - size / 3}};
    pdr_xfer_seg_t ds[2] = {{dst, size / 2 + 1}, {dst + size / 2 + 1, size - size / 2 - 1}};
    struct done a, b;
    done_init(&a);
    done_init(&b);
    uint64_t t0 = t_now_ns();
    CHECK_EQ_ERR(pdr_xfer_pull(dec, "127.0.0.1", pdr_xfer_listen_port(pre), 1, ds, 2, 120000, done_cb, &b),
                 0);
    CHECK_EQ_ERR(pdr_xfer_push(pre, 1, ss, 2, 120000, done_cb, &a), 0);
    CHECK(done_wait(&b, 1, 150000) == 1 && done_wait(&a, 1, 150000) == 1);
    CHECK_EQ_ERR(b.status, 0);
    CHECK_EQ_ERR(a.status, 0);
    double secs = (double)(t_now_ns() - t0) / 1e9;
    CHECK(memcmp(src, dst, size) == 0);
    pdr_xfer_stats_t sp, sd;
    pdr_xfer_get_stats(pre, &sp);
    pdr_xfer_get_stats(dec, &sd);
    CHECK(sp.staging_peak_bytes == 0 && sd.staging_peak_bytes == 0);
    CHECK(sp.bytes_sent == size && sd.bytes_received == size);
    long grown = vm_hwm_kb() - before, buffers = (long)(2 * size / 1024);
    printf("%zu bytes over %d connection(s) in %.2f s (%.2f GB/s); VmHWM grew %ld KiB, buffers %ld KiB, "
           "overhead %ld KiB; staging peak 0\n",
           size, conns, secs, (double)size / secs / 1e9, grown, buffers, grown - buffers);
    /* ASan's shadow of touched memory adds up to 1/8 of it; the transport itself adds a few MiB. */
    CHECK(grown - buffers < (long)(size / 4 / 1024) + 64 * 1024);
    pdr_xfer_engine_destroy(pre);
    pdr_xfer_engine_destroy(dec);
    munmap(src, size);
    munmap(dst, size);
    done_fini(&a);
    done_fini(&b);
    printf("ok big transfer\n");
}

static const pdr_test_case_t cases[] = {
    {"big_room", test_big_room, 290},
};

int main(int argc, char **argv)
{
    return PDR_TEST_RUN(cases, argc, argv);
}
