/*
 * libpdshim through its public C ABI, two shims in one process on loopback: round trips (many odd
 * segments, either order), size mismatch, unknown room, unfetched offer, cancel on each side,
 * connection refused, duplicate rooms, 1000 concurrent rooms, destroy with pending operations.
 * Every wait is on a completion callback (mutex + condvar).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include "pdshim.h"
#include "test_shim_pair.h"
#include "test_shim_util.h"
#include "../unit/runner.h"

static pdshim_t *pre, *dec;
static int port;
static uint64_t next_room = 1000;

static void setup(void)
{
    shim_pair_open(&pre, &dec, &port, 5000);
}

static void teardown(void)
{
    shim_pair_close(&pre, &dec);
}

/* Random segment sizes adding up to total (some zero-length). */
static size_t split(uint64_t *rng, size_t total, pdshim_seg_t *segs, size_t maxseg, uint8_t *base)
{
    size_t n = 0, off = 0;
    while (off < total && n < maxseg - 1) {
        size_t len = (size_t)(xorshift(rng) % (total / 8 + 3));
        if (xorshift(rng) % 10 == 0)
            len = 0;
        if (len > total - off)
            len = total - off;
        segs[n].addr = base + off;
        segs[n].len = len;
        off += len;
        n++;
    }
    segs[n].addr = base + off;
    segs[n].len = total - off;
    return n + 1;
}

static void round_trip(size_t total, int fetch_first, uint64_t seed)
{
    uint64_t rng = seed * 7 + 1;
    uint8_t *src = malloc(total + 1), *dst = malloc(total + 1);
    CHECK(src && dst);
    fill(src, total, seed, 0);
    memset(dst, 0, total);
    pdshim_seg_t ss[64], ds[64];
    size_t ns = split(&rng, total, ss, 64, src), nd = split(&rng, total, ds, 64, dst);
    struct done a, b;
    done_init(&a);
    done_init(&b);
    uint64_t room = next_room++;
    if (fetch_first) {
        CHECK_EQ_ERR(pdshim_fetch(dec, "127.0.0.1", port, room, ds, nd, 5000, done_cb, &b), 0);
        CHECK_EQ_ERR(pdshim_offer(pre, room, ss, ns, 5000, done_cb, &a), 0);
    } else {
        CHECK_EQ_ERR(pdshim_offer(pre, room, ss, ns, 5000, done_cb, &a), 0);
        CHECK_EQ_ERR(pdshim_fetch(dec, "127.0.0.1", port, room, ds, nd, 5000, done_cb, &b), 0);
    }
    CHECK(done_wait(&b, 1, 10000) == 1);
    CHECK(done_wait(&a, 1, 10000) == 1);
    CHECK_EQ_ERR(b.status, 0);
    CHECK_EQ_ERR(a.status, 0);
    CHECK(a.bytes == total && b.bytes == total && a.room == room && b.room == room);
    CHECK(check_fill(dst, total, seed, 0));
    done_fini(&a);
    done_fini(&b);
    free(src);
    free(dst);
}

static void test_round_trips(void)
{
    static const size_t sizes[] = {0, 1, 7, 4096, 65537, 1000003, 3 << 20};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        round_trip(sizes[i], 0, i + 1);
        round_trip(sizes[i], 1, i + 100);
    }
    printf("ok round trips\n");
}

static void test_size_mismatch(void)
{
    uint8_t a_buf[100], b_buf[99];
    pdshim_seg_t sa = {a_buf, sizeof(a_buf)}, sb = {b_buf, sizeof(b_buf)};
    struct done a, b;
    done_init(&a);
    done_init(&b);
    uint64_t room = next_room++;
    CHECK_EQ_ERR(pdshim_offer(pre, room, &sa, 1, 3000, done_cb, &a), 0);
    CHECK_EQ_ERR(pdshim_fetch(dec, "127.0.0.1", port, room, &sb, 1, 3000, done_cb, &b), 0);
    CHECK(done_wait(&a, 1, 5000) == 1 && done_wait(&b, 1, 5000) == 1);
    CHECK_EQ_ERR(a.status, PDR_ESIZE);
    CHECK_EQ_ERR(b.status, PDR_ESIZE);
    /* The session survives: the next room on the same pair of shims succeeds. */
    round_trip(12345, 0, 77);
    round_trip(12345, 1, 78);
    done_fini(&a);
    done_fini(&b);
    printf("ok size mismatch\n");
}

static void test_unknown_room(void)
{
    uint8_t buf[64];
    pdshim_seg_t s = {buf, sizeof(buf)};
    struct done b;
    done_init(&b);
    uint64_t t0 = t_now_ns();
    CHECK_EQ_ERR(pdshim_fetch(dec, "127.0.0.1", port, next_room++, &s, 1, 400, done_cb, &b), 0);
    CHECK(done_wait(&b, 1, 5000) == 1);
    CHECK_EQ_ERR(b.status, PDR_ENOROOM);
    uint64_t ms = (b.t_ns - t0) / 1000000;
    printf("unknown room ended after %llu ms (deadline 400)\n", (unsigned long long)ms);
    CHECK(ms >= 390 && ms < 2000); /* at the deadline, not at done_wait's 5 s */
    done_fini(&b);
    printf("ok unknown room\n");
}

static void test_offer_timeout(void)
{
    uint8_t buf[64];
    pdshim_seg_t s = {buf, sizeof(buf)};
    struct done a;
    done_init(&a);
    uint64_t t0 = t_now_ns();
    CHECK_EQ_ERR(pdshim_offer(pre, next_room++, &s, 1, 300, done_cb, &a), 0);
    CHECK(done_wait(&a, 1, 5000) == 1);
    CHECK_EQ_ERR(a.status, PDR_ETIMEDOUT);
    uint64_t ms = (a.t_ns - t0) / 1000000;
    CHECK(ms >= 290 && ms < 2000); /* at the deadline, not at done_wait's 5 s */
    done_fini(&a);
    printf("ok offer timeout\n");
}

static void test_cancel(void)
{
    uint8_t buf[64];
    pdshim_seg_t s = {buf, sizeof(buf)};
    struct done a, b;

    /* Decode cancels a parked fetch; the prefill side had nothing, then offers and times out. */
    done_init(&b);
    uint64_t room = next_room++;
    CHECK_EQ_ERR(pdshim_fetch(dec, "127.0.0.1", port, room, &s, 1, 5000, done_cb, &b), 0);
    CHECK_EQ_ERR(pdshim_cancel(dec, room), 0);
    CHECK(done_wait(&b, 1, 3000) == 1);
    CHECK_EQ_ERR(b.status, PDR_ECANCELED);
    done_fini(&b);

    /* Prefill cancels an offer nobody fetched yet: a late fetch of that room fails at once with
     * PDR_ECANCELED (the prefill remembers the room), not at its 5 s deadline. */
    done_init(&a);
    done_init(&b);
    room = next_room++;
    CHECK_EQ_ERR(pdshim_offer(pre, room, &s, 1, 5000, done_cb, &a), 0);
    CHECK_EQ_ERR(pdshim_cancel(pre, room), 0);
    CHECK(done_wait(&a, 1, 3000) == 1);
    CHECK_EQ_ERR(a.status, PDR_ECANCELED);
    CHECK_EQ_ERR(pdshim_cancel(pre, room), PDR_ENOROOM);
    uint64_t t1 = t_now_ns();
    CHECK_EQ_ERR(pdshim_fetch(dec, "127.0.0.1", port, room, &s, 1, 5000, done_cb, &b), 0);
    CHECK(done_wait(&b, 1, 3000) == 1);
    CHECK_EQ_ERR(b.status, PDR_ECANCELED);
    CHECK((b.t_ns - t1) / 1000000 < 2500); /* at once: half of the 5 s deadline it would wait otherwise */
    done_fini(&a);
    done_fini(&b);

    /* Decode cancels a parked fetch: a later offer of the room fails at once with PDR_ECANCELED. The
     * round trip through the decode's session orders the cancel before the offer. */
    done_init(&a);
    done_init(&b);
    room = next_room++;
    CHECK_EQ_ERR(pdshim_fetch(dec, "127.0.0.1", port, room, &s, 1, 5000, done_cb, &b), 0);
    CHECK_EQ_ERR(pdshim_cancel(dec, room), 0);
    CHECK(done_wait(&b, 1, 3000) == 1);
    round_trip(10, 0, 9); /* flushes the session: the prefill has seen FETCH and CANCEL */
    t1 = t_now_ns();
    CHECK_EQ_ERR(pdshim_offer(pre, room, &s, 1, 5000, done_cb, &a), 0);
    CHECK(done_wait(&a, 1, 3000) == 1);
    CHECK_EQ_ERR(a.status, PDR_ECANCELED);
    CHECK((a.t_ns - t1) / 1000000 < 2500); /* at once, not at the 5 s deadline */
    done_fini(&a);
    done_fini(&b);

    /* Cancel mid-transfer on each side: a large room, canceled right after both sides posted. The
     * other side must end with PDR_ECANCELED well before its 5 s deadline (or 0 if it already won). */
    size_t big = 64u << 20;
    uint8_t *src = malloc(big), *dst = malloc(big);
    CHECK(src && dst);
    memset(src, 1, big);
    pdshim_seg_t ss = {src, big}, ds = {dst, big};
    for (int side = 0; side < 2; side++) {
        done_init(&a);
        done_init(&b);
        room = next_room++;
        uint64_t t0 = t_now_ns();
        CHECK_EQ_ERR(pdshim_offer(pre, room, &ss, 1, 5000, done_cb, &a), 0);
        CHECK_EQ_ERR(pdshim_fetch(dec, "127.0.0.1", port, room, &ds, 1, 5000, done_cb, &b), 0);
        int rc = pdshim_cancel(side == 0 ? pre : dec, room);
        CHECK(rc == 0 || rc == PDR_ENOROOM);
        done_wait(&a, 1, 4000);
        done_wait(&b, 1, 4000);
        printf("cancel side %d rc %d: offer %d/%s fetch %d/%s\n", side, rc, a.count, pdr_errname(a.status),
               b.count, pdr_errname(b.status));
        CHECK(a.count == 1 && b.count == 1);
        CHECK((t_now_ns() - t0) / 1000000 < 3000);
        if (rc == 0) {
            CHECK(a.status == PDR_ECANCELED || a.status == 0);
            CHECK(b.status == PDR_ECANCELED || b.status == 0);
            CHECK((a.status == 0) == (b.status == 0));
        }
        done_fini(&a);
        done_fini(&b);
    }
    free(src);
    free(dst);
    round_trip(1000, 0, 5);
    printf("ok cancel\n");
}

static void test_refused(void)
{
    /* A port that was just bound and closed: nobody listens there. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    socklen_t sl = sizeof(sa);
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    int dead_port = ntohs(sa.sin_port);
    close(fd);
    uint8_t buf[8];
    pdshim_seg_t s = {buf, sizeof(buf)};
    struct done b;
    done_init(&b);
    uint64_t t0 = t_now_ns();
    CHECK_EQ_ERR(pdshim_fetch(dec, "127.0.0.1", dead_port, next_room++, &s, 1, 5000, done_cb, &b), 0);
    CHECK(done_wait(&b, 1, 3000) == 1);
    CHECK_EQ_ERR(b.status, PDR_ECONNREFUSED);
    CHECK((b.t_ns - t0) / 1000000 < 2500); /* at once, not at the 5 s deadline */
    done_fini(&b);
    printf("ok connection refused\n");
}

static void test_api_errors(void)
{
    uint8_t buf[8];
    pdshim_seg_t s = {buf, sizeof(buf)};
    struct done a;
    done_init(&a);
    uint64_t room = next_room++;
    CHECK_EQ_ERR(pdshim_offer(pre, room, &s, 1, 200, done_cb, &a), 0);
    CHECK_EQ_ERR(pdshim_offer(pre, room, &s, 1, 200, done_cb, &a), PDR_EEXIST);
    CHECK_EQ_ERR(pdshim_offer(pre, room + 1, NULL, 1, 200, done_cb, &a), PDR_EINVAL);
    CHECK_EQ_ERR(pdshim_fetch(dec, "127.0.0.1", 0, room, &s, 1, 200, done_cb, &a), PDR_EINVAL);
    CHECK_EQ_ERR(pdshim_fetch(dec, NULL, port, room, &s, 1, 200, done_cb, &a), PDR_EINVAL);
    CHECK_EQ_ERR(pdshim_cancel(dec, 424242424242ull), PDR_ENOROOM);
    CHECK(done_wait(&a, 1, 3000) == 1);
    CHECK_EQ_ERR(a.status, PDR_ETIMEDOUT);
    CHECK(strcmp(pdshim_strerror(PDR_ESIZE), "size mismatch between source and destination") == 0);
    done_fini(&a);
    printf("ok api errors\n");
}

/* The _ex calls: the result names the room, the bytes, the backend and a duration; registration kinds;
 * tuning options reach the engine (an unknown backend is refused at create). */
struct ex_done {
    struct done d;
    pdshim_result_t r;
    char backend[16];
};

static void ex_cb(void *arg, const pdshim_result_t *r)
{
    struct ex_done *e = arg;
    e->r = *r;
    snprintf(e->backend, sizeof(e->backend), "%s", r->backend);
    done_cb(&e->d, r->room, r->status, r->bytes);
}

static void test_ex(void)
{
    int err = 0;
    pdshim_opts_t bad = {.backend = "carrier-pigeon"};
    CHECK(pdshim_create(&bad, &err) == NULL && err == PDR_EINVAL);
    pdshim_opts_t po = {.listen_host = "127.0.0.1",
                        .backend = "tcp",
                        .chunk_bytes = 4096,
                        .conns_per_peer = 2,
                        .io_threads = 2,
                        .staging_chunks = 2};
    pdshim_opts_t dopt = {.backend = "tcp", .chunk_bytes = 4096, .conns_per_peer = 2, .io_threads = 2};
    pdshim_t *p2 = pdshim_create(&po, &err), *d2 = pdshim_create(&dopt, &err);
    CHECK(p2 != NULL && d2 != NULL);
    size_t len = 1u << 20;
    uint8_t *src = malloc(len), *dst = calloc(1, len);
    CHECK(src && dst);
    fill(src, len, 31, 0);
    CHECK_EQ_ERR(pdshim_mem_register(d2, dst, len, PDSHIM_MEM_HOST), 0);
    CHECK_EQ_ERR(pdshim_mem_register(d2, dst, len, 42), PDR_EINVAL);
    CHECK_EQ_ERR(pdshim_mem_register(NULL, dst, len, PDSHIM_MEM_HOST), PDR_EINVAL);
    int crc = pdshim_mem_register(d2, src, len, PDSHIM_MEM_CUDA); /* host memory: never device memory */
    CHECK(crc == PDR_ENOTSUP || crc == PDR_EINVAL);
    struct ex_done a, b;
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    done_init(&a.d);
    done_init(&b.d);
    pdshim_seg_t ss = {src, len}, ds = {dst, len};
    CHECK_EQ_ERR(pdshim_fetch_ex(d2, "127.0.0.1", pdshim_listen_port(p2), 7, &ds, 1, 5000, ex_cb, &b), 0);
    CHECK_EQ_ERR(pdshim_offer_ex(p2, 7, &ss, 1, 5000, ex_cb, &a), 0);
    CHECK_EQ_ERR(pdshim_offer_ex(p2, 8, &ss, 1, 5000, NULL, &a), PDR_EINVAL);
    CHECK(done_wait(&a.d, 1, 10000) == 1 && done_wait(&b.d, 1, 10000) == 1);
    CHECK_EQ_ERR(a.r.status, 0);
    CHECK_EQ_ERR(b.r.status, 0);
    CHECK(a.r.room == 7 && b.r.room == 7 && a.r.bytes == len && b.r.bytes == len);
    CHECK(strcmp(a.backend, "tcp") == 0 && strcmp(b.backend, "tcp") == 0);
    CHECK(b.r.usec > 0);
    CHECK(check_fill(dst, len, 31, 0));
    CHECK_EQ_ERR(pdshim_mem_unregister(d2, dst), 0);
    pdshim_destroy(d2);
    pdshim_destroy(p2);
    done_fini(&a.d);
    done_fini(&b.d);
    free(src);
    free(dst);
    printf("ok ex calls\n");
}

#define NCONC 1000
static void test_concurrent(void)
{
    size_t each = 3000;
    uint8_t *src = malloc(NCONC * each), *dst = calloc(NCONC, each);
    CHECK(src && dst);
    struct done a, b;
    done_init(&a);
    done_init(&b);
    uint64_t base = next_room;
    next_room += NCONC;
    for (int i = 0; i < NCONC; i++) {
        size_t len = each - (size_t)(i % 7);
        fill(src + (size_t)i * each, len, (uint64_t)i, 0);
        pdshim_seg_t ss = {src + (size_t)i * each, len}, ds = {dst + (size_t)i * each, len};
        if (i % 2) {
            CHECK_EQ_ERR(pdshim_offer(pre, base + (uint64_t)i, &ss, 1, 20000, done_cb, &a), 0);
            CHECK_EQ_ERR(pdshim_fetch(dec, "127.0.0.1", port, base + (uint64_t)i, &ds, 1, 20000, done_cb, &b),
                         0);
        } else {
            CHECK_EQ_ERR(pdshim_fetch(dec, "127.0.0.1", port, base + (uint64_t)i, &ds, 1, 20000, done_cb, &b),
                         0);
            CHECK_EQ_ERR(pdshim_offer(pre, base + (uint64_t)i, &ss, 1, 20000, done_cb, &a), 0);
        }
    }
    CHECK(done_wait(&a, NCONC, 30000) == NCONC);
    CHECK(done_wait(&b, NCONC, 30000) == NCONC);
    CHECK(a.nfail == 0 && b.nfail == 0);
    for (int i = 0; i < NCONC; i++)
        CHECK(check_fill(dst + (size_t)i * each, each - (size_t)(i % 7), (uint64_t)i, 0));
    free(src);
    free(dst);
    done_fini(&a);
    done_fini(&b);
    printf("ok %d concurrent rooms\n", NCONC);
}

static void test_destroy_pending(void)
{
    uint8_t buf[64];
    pdshim_seg_t s = {buf, sizeof(buf)};
    struct done a, b;
    done_init(&a);
    done_init(&b);
    /* Parked fetches, unmatched offers: all pending when the shims go away. */
    for (int i = 0; i < 10; i++) {
        CHECK_EQ_ERR(pdshim_offer(pre, next_room++, &s, 1, 60000, done_cb, &a), 0);
        CHECK_EQ_ERR(pdshim_fetch(dec, "127.0.0.1", port, next_room++, &s, 1, 60000, done_cb, &b), 0);
    }
    pdshim_destroy(dec);
    dec = NULL;
    CHECK(b.count == 10 && b.nfail == 10);
    CHECK_EQ_ERR(b.status, PDR_ECLOSED);
    pdshim_destroy(pre);
    pre = NULL;
    CHECK(a.count == 10 && a.nfail == 10);
    CHECK_EQ_ERR(a.status, PDR_ECLOSED);
    done_fini(&a);
    done_fini(&b);
    printf("ok destroy with pending operations\n");
}

static const pdr_test_case_t cases[] = {
    {"round_trips", test_round_trips, 30},
    {"size_mismatch", test_size_mismatch, 30},
    {"unknown_room", test_unknown_room, 30},
    {"offer_timeout", test_offer_timeout, 30},
    {"cancel", test_cancel, 30},
    {"refused", test_refused, 30},
    {"api_errors", test_api_errors, 30},
    {"ex", test_ex, 30},
    {"concurrent", test_concurrent, 30},
    {"destroy_pending", test_destroy_pending, 30},
};

int main(int argc, char **argv)
{
    return pdr_test_run(cases, sizeof(cases) / sizeof(cases[0]), setup, teardown, argc, argv);
}
