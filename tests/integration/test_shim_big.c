/*
 * One large room (1 GiB by default; PDR_TEST_BIG_BYTES=4294967296 for 4 GiB) between two shims in one
 * process. Checks every byte and that the process's peak RSS (VmHWM) grew by the two buffers plus a
 * small constant, i.e. that the transport allocated nothing proportional to the room.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "pdshim.h"
#include "test_shim_util.h"

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

int main(void)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    size_t size = 1ull << 30;
    const char *env = getenv("PDR_TEST_BIG_BYTES");
    if (env != NULL) {
        char *end;
        unsigned long long v = strtoull(env, &end, 10);
        if (*end != '\0' || v == 0 || v > (16ull << 30)) {
            fprintf(stderr, "PDR_TEST_BIG_BYTES: want a byte count\n");
            return 2;
        }
        size = (size_t)v;
    }
    int err;
    pdshim_opts_t po = {.listen_host = "127.0.0.1"}, dopt = {0};
    pdshim_t *pre = pdshim_create(&po, &err), *dec = pdshim_create(&dopt, &err);
    CHECK(pre && dec);
    long before = vm_hwm_kb();
    uint64_t *src = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint8_t *dst = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(src != MAP_FAILED && dst != MAP_FAILED);
    /* Fault the destination in first: on VMs first-touch page faults inside recv cost more than the
     * transfer itself, and they are not what this test measures. */
    memset(dst, 1, size);
    uint64_t s = 88172645463325252ull;
    for (size_t i = 0; i < size / 8; i++)
        src[i] = xorshift(&s);
    for (size_t i = size / 8 * 8; i < size; i++)
        ((uint8_t *)src)[i] = (uint8_t)i;
    /* Two segments each side, cut at different places. */
    pdshim_seg_t ss[2] = {{src, size / 3}, {(uint8_t *)src + size / 3, size - size / 3}};
    pdshim_seg_t ds[2] = {{dst, size / 2 + 1}, {dst + size / 2 + 1, size - size / 2 - 1}};
    struct done a, b;
    done_init(&a);
    done_init(&b);
    uint64_t t0 = t_now_ns();
    CHECK_EQ_ERR(pdshim_fetch(dec, "127.0.0.1", pdshim_listen_port(pre), 1, ds, 2, 120000, done_cb, &b), 0);
    CHECK_EQ_ERR(pdshim_offer(pre, 1, ss, 2, 120000, done_cb, &a), 0);
    CHECK(done_wait(&b, 1, 150000) == 1 && done_wait(&a, 1, 150000) == 1);
    CHECK_EQ_ERR(b.status, 0);
    CHECK_EQ_ERR(a.status, 0);
    double secs = (double)(t_now_ns() - t0) / 1e9;
    CHECK(memcmp(src, dst, size) == 0);
    long after = vm_hwm_kb();
    long grown = after - before, buffers = (long)(2 * size / 1024);
    printf("%zu bytes in %.2f s (%.2f GB/s); VmHWM grew %ld KiB, buffers %ld KiB, overhead %ld KiB\n", size,
           secs, (double)size / secs / 1e9, grown, buffers, grown - buffers);
    /* ASan's shadow of touched memory adds up to 1/8 of it; the transport itself adds a few MiB. */
    CHECK(grown - buffers < (long)(size / 4 / 1024) + 64 * 1024);
    pdshim_destroy(pre);
    pdshim_destroy(dec);
    munmap(src, size);
    munmap(dst, size);
    done_fini(&a);
    done_fini(&b);
    printf("ok big transfer\n");
    return 0;
}
