/*
 * Streamed offers through libpdshim's C ABI (pdshim_offer_open / pdshim_offer_part /
 * pdshim_room_progress), two shims in one process on loopback, real sockets and every byte checked:
 * parts in order and out of order (fetch before and after the first part), the decode holding the first
 * part's bytes before the second one is published, a missing part failing both sides at the deadline,
 * refused parts (overlap, out of range, empty, unknown room) that fail nothing else, cancel mid-stream
 * on either side, a size mismatch, many rooms streamed at once, an empty room, forced rdma refused, and
 * destroy with a half-published room. Every wait is on a completion callback, or on the progress
 * counter for "part 1 arrived".
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pdshim.h"
#include "test_shim_pair.h"
#include "test_shim_util.h"
#include "../unit/runner.h"

static pdshim_t *pre, *dec;
static int port;
static uint64_t next_room = 5000;

static void setup(void)
{
    shim_pair_open(&pre, &dec, &port, 10000);
}

static void teardown(void)
{
    shim_pair_close(&pre, &dec);
}

static void res_cb(void *arg, const pdshim_result_t *r)
{
    done_cb(arg, r->room, r->status, r->bytes);
}

static int timeout_scale(void)
{
    const char *s = getenv("PDR_TEST_TIMEOUT_SCALE");
    long k = s != NULL ? strtol(s, NULL, 10) : 1;
    return k >= 1 && k <= 100 ? (int)k : 1;
}

/* Waits until the room's progress on shim reaches want bytes (or timeout_ms passed); returns the last
 * value read. The counter has no event, so this polls it every 200 µs. */
static uint64_t wait_progress(pdshim_t *shim, uint64_t room, uint64_t want, int timeout_ms)
{
    uint64_t t_end = t_now_ns() + (uint64_t)timeout_ms * 1000000u, moved = 0, total = 0;
    while (t_now_ns() < t_end) {
        if (pdshim_room_progress(shim, room, &moved, &total) != 0)
            return moved;
        if (moved >= want)
            return moved;
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    return moved;
}

/* Publishes src[off, off+len) as one part cut into up to 5 segments. */
static int publish(uint64_t room, const uint8_t *src, uint64_t off, uint64_t len, uint64_t *rng)
{
    pdshim_seg_t segs[5];
    size_t n = 0;
    uint64_t at = off, end = off + len;
    while (at < end && n < 4) {
        uint64_t l = xorshift(rng) % (len / 3 + 2);
        if (l > end - at)
            l = end - at;
        segs[n].addr = (void *)(src + at);
        segs[n].len = (size_t)l;
        at += l;
        n++;
    }
    segs[n].addr = (void *)(src + at);
    segs[n].len = (size_t)(end - at);
    n++;
    return pdshim_offer_part(pre, room, off, segs, n);
}

/* Cuts total into nparts ranges of random sizes (bounds[0] = 0, bounds[nparts] = total). */
static void cut(uint64_t total, size_t nparts, uint64_t *bounds, uint64_t *rng)
{
    bounds[0] = 0;
    bounds[nparts] = total;
    for (size_t i = 1; i < nparts; i++)
        bounds[i] = xorshift(rng) % (total + 1);
    for (size_t i = 1; i < nparts; i++) /* sort the inner bounds */
        for (size_t j = i + 1; j < nparts; j++)
            if (bounds[j] < bounds[i]) {
                uint64_t t = bounds[i];
                bounds[i] = bounds[j];
                bounds[j] = t;
            }
}

static void streamed(uint64_t total, size_t nparts, int shuffle, int fetch_first, uint64_t seed)
{
    uint64_t rng = seed * 13 + 5;
    uint8_t *src = malloc(total + 1), *dst = malloc(total + 1);
    CHECK(src && dst);
    fill(src, total, seed, 0);
    memset(dst, 0, total);
    uint64_t bounds[65];
    CHECK(nparts <= 64);
    cut(total, nparts, bounds, &rng);
    size_t order[64];
    for (size_t i = 0; i < nparts; i++)
        order[i] = i;
    for (size_t i = nparts; shuffle && i > 1; i--) {
        size_t j = (size_t)(xorshift(&rng) % i), t = order[i - 1];
        order[i - 1] = order[j];
        order[j] = t;
    }
    pdshim_seg_t ds[3] = {
        {dst, total / 3}, {dst + total / 3, total / 3}, {dst + 2 * (total / 3), total - 2 * (total / 3)}};
    struct done a, b;
    done_init(&a);
    done_init(&b);
    uint64_t room = next_room++;
    CHECK_EQ_ERR(pdshim_offer_open(pre, room, total, 10000, res_cb, &a), 0);
    if (fetch_first)
        CHECK_EQ_ERR(pdshim_fetch(dec, "127.0.0.1", port, room, ds, 3, 10000, done_cb, &b), 0);
    for (size_t k = 0; k < nparts; k++) {
        size_t i = order[k];
        if (bounds[i + 1] > bounds[i])
            CHECK_EQ_ERR(publish(room, src, bounds[i], bounds[i + 1] - bounds[i], &rng), 0);
        if (k == 0 && !fetch_first)
            CHECK_EQ_ERR(pdshim_fetch(dec, "127.0.0.1", port, room, ds, 3, 10000, done_cb, &b), 0);
    }
    CHECK(done_wait(&b, 1, 20000) == 1);
    CHECK(done_wait(&a, 1, 20000) == 1);
    CHECK_EQ_ERR(b.status, 0);
    CHECK_EQ_ERR(a.status, 0);
    CHECK(a.bytes == total && b.bytes == total);
    CHECK(check_fill(dst, total, seed, 0));
    CHECK_EQ_ERR(pdshim_room_progress(pre, room, NULL, NULL), PDR_ENOROOM); /* gone after its callback */
    done_fini(&a);
    done_fini(&b);
    free(src);
    free(dst);
}

static void test_in_order(void)
{
    streamed(3 * 1048576 + 12345, 4, 0, 1, 1);
    streamed(3 * 1048576 + 12345, 4, 0, 0, 2);
    streamed(1000003, 17, 0, 1, 3);
    streamed(77, 1, 0, 0, 4);
    printf("ok parts in order\n");
}

static void test_out_of_order(void)
{
    streamed(3 * 1048576 + 999, 8, 1, 1, 11);
    streamed(3 * 1048576 + 999, 8, 1, 0, 12);
    streamed(500001, 64, 1, 1, 13);
    streamed(4096, 2, 1, 0, 14);
    printf("ok parts out of order\n");
}

/* The decode holds part 1's bytes before part 2 exists: a transport that waited for the whole room
 * would never reach the progress below, and the test would fail. */
static void test_streams_before_complete(void)
{
    const uint64_t part = 2 * 1048576 + 17, total = 3 * part;
    uint8_t *src = malloc(total), *dst = malloc(total);
    CHECK(src && dst);
    fill(src, total, 21, 0);
    memset(dst, 0, total);
    uint64_t rng = 99;
    pdshim_seg_t ds = {dst, total};
    struct done a, b;
    done_init(&a);
    done_init(&b);
    uint64_t room = next_room++;
    CHECK_EQ_ERR(pdshim_offer_open(pre, room, total, 20000, res_cb, &a), 0);
    CHECK_EQ_ERR(pdshim_fetch(dec, "127.0.0.1", port, room, &ds, 1, 20000, done_cb, &b), 0);
    uint64_t moved = 1, tot = 0;
    CHECK_EQ_ERR(pdshim_room_progress(dec, room, &moved, &tot), 0);
    CHECK(moved == 0 && tot == total);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_ERR(publish(room, src, (uint64_t)i * part, part, &rng), 0);
        uint64_t want = (uint64_t)(i + 1) * part;
        if (i < 2) {
            uint64_t got = wait_progress(dec, room, want, 10000 * timeout_scale());
            printf("part %d published: the decode holds %llu of %llu bytes\n", i + 1, (unsigned long long)got,
                   (unsigned long long)total);
            CHECK(got == want); /* everything published so far, nothing more */
            CHECK(b.count == 0 && a.count == 0);
            uint64_t pt = 0;
            CHECK(wait_progress(pre, room, want, 10000 * timeout_scale()) == want);
            CHECK_EQ_ERR(pdshim_room_progress(pre, room, NULL, &pt), 0);
            CHECK(pt == total);
        }
    }
    CHECK(done_wait(&b, 1, 20000) == 1 && done_wait(&a, 1, 20000) == 1);
    CHECK_EQ_ERR(b.status, 0);
    CHECK_EQ_ERR(a.status, 0);
    CHECK(check_fill(dst, total, 21, 0));
    done_fini(&a);
    done_fini(&b);
    free(src);
    free(dst);
    printf("ok bytes move before the room is complete\n");
}

/* A part never published: both sides fail at the deadline; with no part at all as well. */
static void test_missing_part(void)
{
    for (int none = 0; none <= 1; none++) {
        uint8_t src[3000], dst[3000];
        fill(src, sizeof(src), 31, 0);
        uint64_t rng = 5;
        pdshim_seg_t ds = {dst, sizeof(dst)};
        struct done a, b;
        done_init(&a);
        done_init(&b);
        uint64_t room = next_room++;
        uint64_t t0 = t_now_ns();
        CHECK_EQ_ERR(pdshim_offer_open(pre, room, sizeof(src), 600, res_cb, &a), 0);
        CHECK_EQ_ERR(pdshim_fetch(dec, "127.0.0.1", port, room, &ds, 1, 30000, done_cb, &b), 0);
        if (!none) {
            CHECK_EQ_ERR(publish(room, src, 0, 1000, &rng), 0);
            CHECK_EQ_ERR(publish(room, src, 2000, 1000, &rng), 0);
        }
        CHECK(done_wait(&a, 1, 10000) == 1);
        CHECK(done_wait(&b, 1, 10000) == 1);
        CHECK_EQ_ERR(a.status, PDR_ETIMEDOUT);
        CHECK_EQ_ERR(b.status, PDR_ETIMEDOUT); /* told by the prefill, long before its own 30 s */
        uint64_t ms = (b.t_ns - t0) / 1000000;
        printf("missing part (%s): both sides failed after %llu ms (deadline 600)\n",
               none ? "no part" : "one", (unsigned long long)ms);
        CHECK(ms >= 500 && ms < 10000);
        CHECK_EQ_ERR(publish(room, src, 1000, 1000, &rng), PDR_ENOROOM); /* too late */
        done_fini(&a);
        done_fini(&b);
    }
    printf("ok missing part\n");
}

static void test_bad_parts(void)
{
    enum { N = 10000 };
    static uint8_t src[N], dst[N];
    fill(src, N, 41, 0);
    memset(dst, 0, N);
    uint64_t rng = 7;
    struct done a, b, w;
    done_init(&a);
    done_init(&b);
    done_init(&w);
    uint64_t room = next_room++;
    pdshim_seg_t one = {src, 10};
    /* No room opened in parts. */
    CHECK_EQ_ERR(pdshim_offer_part(pre, room, 0, &one, 1), PDR_ENOROOM);
    uint64_t whole = next_room++;
    CHECK_EQ_ERR(pdshim_offer(pre, whole, &one, 1, 5000, done_cb, &w), 0);
    CHECK_EQ_ERR(pdshim_offer_part(pre, whole, 0, &one, 1), PDR_ENOROOM);
    CHECK_EQ_ERR(pdshim_cancel(pre, whole), 0);
    /* API misuse. */
    CHECK_EQ_ERR(pdshim_offer_open(NULL, room, N, 0, res_cb, &a), PDR_EINVAL);
    CHECK_EQ_ERR(pdshim_offer_open(pre, room, N, 0, NULL, &a), PDR_EINVAL);
    CHECK_EQ_ERR(pdshim_offer_open(pre, room, N, 5000, res_cb, &a), 0);
    CHECK_EQ_ERR(pdshim_offer_open(pre, room, N, 5000, res_cb, &a), PDR_EEXIST);
    CHECK_EQ_ERR(pdshim_offer_part(pre, room, 0, NULL, 1), PDR_EINVAL);
    CHECK_EQ_ERR(pdshim_offer_part(pre, room, 0, &one, 0), PDR_EINVAL);
    pdshim_seg_t empty = {src, 0}, null = {NULL, 5};
    CHECK_EQ_ERR(pdshim_offer_part(pre, room, 0, &empty, 1), PDR_EINVAL);
    CHECK_EQ_ERR(pdshim_offer_part(pre, room, 0, &null, 1), PDR_EINVAL);
    /* Out of range. */
    pdshim_seg_t tail = {src + N - 10, 11};
    CHECK_EQ_ERR(pdshim_offer_part(pre, room, N - 10, &tail, 1), PDR_EINVAL);
    pdshim_seg_t far = {src, 1};
    CHECK_EQ_ERR(pdshim_offer_part(pre, room, N, &far, 1), PDR_EINVAL);
    CHECK_EQ_ERR(pdshim_offer_part(pre, room, UINT64_MAX, &far, 1), PDR_EINVAL);
    CHECK_EQ_ERR(pdshim_room_progress(NULL, room, NULL, NULL), PDR_EINVAL);
    /* Publish [3000, 6000), then overlaps of every shape. */
    CHECK_EQ_ERR(publish(room, src, 3000, 3000, &rng), 0);
    static const uint64_t ov[][2] = {{3000, 3000}, {2999, 2}, {5999, 2}, {2000, 5000}, {4000, 10}, {3000, 1}};
    for (size_t i = 0; i < sizeof(ov) / sizeof(ov[0]); i++) {
        pdshim_seg_t s = {src + ov[i][0], (size_t)ov[i][1]};
        CHECK_EQ_ERR(pdshim_offer_part(pre, room, ov[i][0], &s, 1), PDR_EINVAL);
    }
    /* The refusals failed nothing: the rest of the room goes through, fetched now. */
    pdshim_seg_t ds = {dst, N};
    CHECK_EQ_ERR(pdshim_fetch(dec, "127.0.0.1", port, room, &ds, 1, 5000, done_cb, &b), 0);
    CHECK_EQ_ERR(publish(room, src, 0, 2999, &rng), 0);
    CHECK_EQ_ERR(publish(room, src, 6000, N - 6000, &rng), 0);
    CHECK_EQ_ERR(publish(room, src, 2999, 1, &rng), 0);
    CHECK(done_wait(&a, 1, 10000) == 1 && done_wait(&b, 1, 10000) == 1);
    CHECK_EQ_ERR(a.status, 0);
    CHECK_EQ_ERR(b.status, 0);
    CHECK(check_fill(dst, N, 41, 0));
    CHECK(done_wait(&w, 1, 10000) == 1);
    CHECK_EQ_ERR(w.status, PDR_ECANCELED);
    done_fini(&a);
    done_fini(&b);
    done_fini(&w);
    printf("ok bad parts refused\n");
}

static void cancel_mid_stream(int on_prefill)
{
    const uint64_t part = 1048576, total = 4 * part;
    uint8_t *src = malloc(total), *dst = malloc(total);
    CHECK(src && dst);
    fill(src, total, 51, 0);
    uint64_t rng = 3;
    pdshim_seg_t ds = {dst, total};
    struct done a, b;
    done_init(&a);
    done_init(&b);
    uint64_t room = next_room++;
    CHECK_EQ_ERR(pdshim_offer_open(pre, room, total, 20000, res_cb, &a), 0);
    CHECK_EQ_ERR(pdshim_fetch(dec, "127.0.0.1", port, room, &ds, 1, 20000, done_cb, &b), 0);
    CHECK_EQ_ERR(publish(room, src, 0, part, &rng), 0);
    CHECK(wait_progress(dec, room, part, 10000 * timeout_scale()) == part);
    CHECK_EQ_ERR(pdshim_cancel(on_prefill ? pre : dec, room), 0);
    CHECK(done_wait(&a, 1, 10000) == 1 && done_wait(&b, 1, 10000) == 1);
    CHECK_EQ_ERR(a.status, PDR_ECANCELED);
    CHECK_EQ_ERR(b.status, PDR_ECANCELED);
    int rc = publish(room, src, part, part, &rng);
    CHECK(rc == PDR_ENOROOM);
    /* The session lives on. */
    streamed(100000, 3, 1, 1, 52);
    done_fini(&a);
    done_fini(&b);
    free(src);
    free(dst);
}

/* The decode cancels (or gives up) while its fetch waits for the first part: the prefill fails at once,
 * not at its own deadline. */
static void cancel_before_first_part(void)
{
    uint8_t dst[1000];
    pdshim_seg_t ds = {dst, sizeof(dst)};
    for (int give_up = 0; give_up <= 1; give_up++) {
        struct done a, b;
        done_init(&a);
        done_init(&b);
        uint64_t room = next_room++;
        CHECK_EQ_ERR(pdshim_offer_open(pre, room, sizeof(dst), 30000, res_cb, &a), 0);
        CHECK_EQ_ERR(pdshim_fetch(dec, "127.0.0.1", port, room, &ds, 1, give_up ? 300 : 30000, done_cb, &b),
                     0);
        if (!give_up) {
            /* The fetch is parked once the prefill's WAIT came back: the decode's progress exists then. */
            CHECK_EQ_ERR(pdshim_room_progress(dec, room, NULL, NULL), 0);
            CHECK_EQ_ERR(pdshim_cancel(dec, room), 0);
        }
        CHECK(done_wait(&b, 1, 10000) == 1 && done_wait(&a, 1, 10000) == 1);
        CHECK(b.status == (give_up ? PDR_ENOROOM : PDR_ECANCELED) || (give_up && b.status == PDR_ETIMEDOUT));
        CHECK(a.status == PDR_ECANCELED || a.status == PDR_ETIMEDOUT);
        CHECK(((int64_t)a.t_ns - (int64_t)b.t_ns) / 1000000 <
              5000); /* promptly after the decode, not after 30 s */
        done_fini(&a);
        done_fini(&b);
    }
}

static void test_cancel(void)
{
    cancel_before_first_part();
    cancel_mid_stream(1);
    cancel_mid_stream(0);
    printf("ok cancel mid-stream on either side\n");
}

static void test_size_mismatch(void)
{
    uint8_t src[100], dst[99];
    fill(src, sizeof(src), 61, 0);
    uint64_t rng = 1;
    pdshim_seg_t ds = {dst, sizeof(dst)};
    struct done a, b;
    done_init(&a);
    done_init(&b);
    uint64_t room = next_room++;
    CHECK_EQ_ERR(pdshim_offer_open(pre, room, sizeof(src), 5000, res_cb, &a), 0);
    CHECK_EQ_ERR(publish(room, src, 0, 50, &rng), 0);
    CHECK_EQ_ERR(pdshim_fetch(dec, "127.0.0.1", port, room, &ds, 1, 5000, done_cb, &b), 0);
    CHECK(done_wait(&a, 1, 10000) == 1 && done_wait(&b, 1, 10000) == 1);
    CHECK_EQ_ERR(a.status, PDR_ESIZE);
    CHECK_EQ_ERR(b.status, PDR_ESIZE);
    done_fini(&a);
    done_fini(&b);
    printf("ok size mismatch\n");
}

/* Many rooms streamed at once: every room's parts published interleaved with the others'. */
static void test_many_rooms(void)
{
    enum { NR = 48, NP = 5 };
    const uint64_t each = 200003;
    uint8_t *src = malloc(NR * each), *dst = malloc(NR * each);
    CHECK(src && dst);
    memset(dst, 0, NR * each);
    uint64_t rng = 1234, bounds[NR][NP + 1], rooms[NR];
    struct done a, b;
    done_init(&a);
    done_init(&b);
    for (int r = 0; r < NR; r++) {
        fill(src + r * each, each, 100 + (uint64_t)r, 0);
        cut(each, NP, bounds[r], &rng);
        rooms[r] = next_room++;
        CHECK_EQ_ERR(pdshim_offer_open(pre, rooms[r], each, 20000, res_cb, &a), 0);
        if (r % 2 == 0) {
            pdshim_seg_t ds = {dst + r * each, each};
            CHECK_EQ_ERR(pdshim_fetch(dec, "127.0.0.1", port, rooms[r], &ds, 1, 20000, done_cb, &b), 0);
        }
    }
    for (int p = NP - 1; p >= 0; p--) {
        for (int r = 0; r < NR; r++) {
            uint64_t lo = bounds[r][p], hi = bounds[r][p + 1];
            if (hi > lo) {
                /* The segments point into this room's slice of src; the offsets are the room's own. */
                pdshim_seg_t s = {src + r * each + lo, (size_t)(hi - lo)};
                CHECK_EQ_ERR(pdshim_offer_part(pre, rooms[r], lo, &s, 1), 0);
            }
            if (p == NP - 1 && r % 2 == 1) {
                pdshim_seg_t ds = {dst + r * each, each};
                CHECK_EQ_ERR(pdshim_fetch(dec, "127.0.0.1", port, rooms[r], &ds, 1, 20000, done_cb, &b), 0);
            }
        }
    }
    CHECK(done_wait(&b, NR, 30000) == NR && done_wait(&a, NR, 30000) == NR);
    CHECK(a.nfail == 0 && b.nfail == 0);
    for (int r = 0; r < NR; r++)
        CHECK(check_fill(dst + r * each, each, 100 + (uint64_t)r, 0));
    done_fini(&a);
    done_fini(&b);
    free(src);
    free(dst);
    printf("ok %d rooms streamed at once\n", NR);
}

static void test_empty_and_rdma(void)
{
    struct done a, b;
    done_init(&a);
    done_init(&b);
    uint64_t room = next_room++;
    uint8_t x;
    pdshim_seg_t ds = {&x, 0};
    CHECK_EQ_ERR(pdshim_offer_open(pre, room, 0, 5000, res_cb, &a), 0);
    CHECK_EQ_ERR(pdshim_fetch(dec, "127.0.0.1", port, room, &ds, 1, 5000, done_cb, &b), 0);
    CHECK(done_wait(&a, 1, 10000) == 1 && done_wait(&b, 1, 10000) == 1);
    CHECK_EQ_ERR(a.status, 0);
    CHECK_EQ_ERR(b.status, 0);
    int err = 0;
    pdshim_opts_t ro = {.listen_host = "127.0.0.1", .backend = "rdma"};
    pdshim_t *r = pdshim_create(&ro, &err);
    CHECK(r != NULL);
    CHECK_EQ_ERR(pdshim_offer_open(r, room, 100, 5000, res_cb, &a), PDR_ENOTSUP);
    pdshim_destroy(r);
    done_fini(&a);
    done_fini(&b);
    printf("ok empty room, rdma refused\n");
}

static void test_destroy_pending(void)
{
    uint8_t src[1000];
    fill(src, sizeof(src), 71, 0);
    uint64_t rng = 9;
    struct done a;
    done_init(&a);
    for (int i = 0; i < 5; i++) {
        uint64_t room = next_room++;
        CHECK_EQ_ERR(pdshim_offer_open(pre, room, 2000, 60000, res_cb, &a), 0);
        CHECK_EQ_ERR(publish(room, src, 0, 1000, &rng), 0);
    }
    pdshim_destroy(pre);
    pre = NULL;
    CHECK(a.count == 5 && a.nfail == 5);
    CHECK_EQ_ERR(a.status, PDR_ECLOSED);
    done_fini(&a);
    printf("ok destroy with half-published rooms\n");
}

static const pdr_test_case_t cases[] = {
    {"in_order", test_in_order, 60},
    {"out_of_order", test_out_of_order, 60},
    {"streams_before_complete", test_streams_before_complete, 60},
    {"missing_part", test_missing_part, 60},
    {"bad_parts", test_bad_parts, 60},
    {"cancel", test_cancel, 60},
    {"size_mismatch", test_size_mismatch, 60},
    {"many_rooms", test_many_rooms, 60},
    {"empty_and_rdma", test_empty_and_rdma, 60},
    {"destroy_pending", test_destroy_pending, 60},
};

int main(int argc, char **argv)
{
    return pdr_test_run(cases, sizeof(cases) / sizeof(cases[0]), setup, teardown, argc, argv);
}
