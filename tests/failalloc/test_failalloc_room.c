/*
 * Allocation failure along one room's path, both sides: a prefill engine and a decode engine (fresh for
 * each run, so the session's connect, HELLO and matching are on the path) move one room, and the N-th
 * allocation of the transport's code after the pull is posted fails, for every N from 1 to the number
 * a clean run makes (engine teardown included). Each run must end cleanly: both calls return 0 and both
 * callbacks run (success, or a PDR_E* error), or a call fails at once with a PDR_E* code and its
 * callback never runs; no crash, no hang (every callback within its deadline), and every allocation
 * freed once the engines are destroyed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "failalloc.h"
#include "transport.h"
#include "test_shim_util.h"

#define LEN (3u << 20) /* several DATA frames per connection */
#define ROOM_MS 1500

static int pdr_err(int st)
{
    return st == 0 || (st > PDR__ERR_FIRST && st < PDR__ERR_LAST);
}

/* One room with the N-th allocation failing (0: none). Returns the allocations counted. */
static long one_room(long n, const uint8_t *src, uint8_t *dst, int *ok)
{
    long live0 = pdr_failalloc_live();
    int err = 0;
    pdr_xfer_opts_t po = {.listen_host = "127.0.0.1", .conns_per_peer = 2, .chunk_bytes = 256u << 10};
    pdr_xfer_opts_t dopt = {.conns_per_peer = 2, .chunk_bytes = 256u << 10};
    pdr_xfer_engine_t *pre = pdr_xfer_engine_create(&po, &err);
    pdr_xfer_engine_t *dec = pdr_xfer_engine_create(&dopt, &err);
    CHECK(pre != NULL && dec != NULL);
    int port = pdr_xfer_listen_port(pre);
    memset(dst, 0, LEN);
    pdr_xfer_seg_t s = {(void *)src, LEN}, d = {dst, LEN};
    struct done a, b;
    done_init(&a);
    done_init(&b);
    pdr_failalloc_arm(n);
    int rb = pdr_xfer_pull(dec, "127.0.0.1", port, 7, &d, 1, ROOM_MS, done_cb, &b);
    int ra = pdr_xfer_push(pre, 7, &s, 1, ROOM_MS, done_cb, &a);
    CHECK(pdr_err(ra) && pdr_err(rb));
    int wa = ra == 0 ? done_wait(&a, 1, 4 * ROOM_MS) : 0, wb = rb == 0 ? done_wait(&b, 1, 4 * ROOM_MS) : 0;
    if ((ra == 0 && wa != 1) || (rb == 0 && wb != 1)) {
        fprintf(stderr, "N=%ld: a callback never ran (push %d/%d, pull %d/%d)\n", n, ra, wa, rb, wb);
        abort();
    }
    int sa = ra ? ra : a.status, sb = rb ? rb : b.status;
    CHECK(pdr_err(sa) && pdr_err(sb));
    if (sb == 0)
        CHECK(memcmp(src, dst, LEN) == 0);
    pdr_xfer_engine_destroy(dec);
    pdr_xfer_engine_destroy(pre);
    long count = pdr_failalloc_count();
    int failed = pdr_failalloc_failed();
    pdr_failalloc_arm(-1);
    done_fini(&a);
    done_fini(&b);
    long leaked = pdr_failalloc_live() - live0;
    if (n > 0)
        printf("N=%ld%s: push %s, pull %s, %ld allocations\n", n, failed ? "" : " (not reached)",
               pdr_errname(sa), pdr_errname(sb), count);
    if (leaked != 0) {
        fprintf(stderr, "N=%ld: %ld allocation(s) not freed\n", n, leaked);
        abort();
    }
    *ok = sa == 0 && sb == 0;
    return count;
}

int main(void)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    uint8_t *src = malloc(LEN), *dst = malloc(LEN);
    CHECK(src && dst);
    fill(src, LEN, 11, 0);
    int ok = 0;
    long k = one_room(0, src, dst, &ok);
    CHECK(ok);
    printf("a clean room makes %ld allocations\n", k);
    CHECK(k > 0);
    int failures = 0;
    for (long n = 1; n <= k; n++) {
        one_room(n, src, dst, &ok);
        failures += !ok;
    }
    printf("ok %ld runs: %d ended with an error, %ld succeeded\n", k, failures, k - failures);
    free(src);
    free(dst);
    return 0;
}
