/*
 * The engine API (transport.h) with options the shim does not expose: tiny DATA chunks (many frames
 * per room, interleaved between rooms), the application heartbeat against a peer that accepts and
 * never answers, segment and room limits, a second decode fetching a room already being served, and
 * memory registration. Sessions: a room striped over 4 connections on several I/O threads, many rooms
 * at once, a connection killed (while a room is parked on its session, and mid-transfer) failing only
 * the rooms of that session, and the next pull opening a fresh session; the _ex callbacks and stats.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "err.h"
#include "transport.h"
#include "wire.h"
#include "test_shim_util.h"
#include "runner.h"

static void test_small_chunks(void)
{
    int err;
    pdr_xfer_opts_t po = {.listen_host = "127.0.0.1", .chunk_bytes = 1000};
    pdr_xfer_engine_t *pre = pdr_xfer_engine_create(&po, &err);
    pdr_xfer_engine_t *dec = pdr_xfer_engine_create(NULL, &err);
    CHECK(pre && dec);
    int port = pdr_xfer_listen_port(pre);
    enum { N = 20, LEN = 100003 };
    uint8_t *src = malloc((size_t)N * LEN), *dst = calloc(N, LEN);
    struct done a, b;
    done_init(&a);
    done_init(&b);
    for (int i = 0; i < N; i++) {
        fill(src + (size_t)i * LEN, LEN, (uint64_t)i, 0);
        pdr_xfer_seg_t s[3] = {{src + (size_t)i * LEN, 10},
                               {src + (size_t)i * LEN + 10, LEN - 20},
                               {src + (size_t)i * LEN + LEN - 10, 10}};
        pdr_xfer_seg_t d = {dst + (size_t)i * LEN, LEN};
        CHECK_EQ_ERR(pdr_xfer_push(pre, (uint64_t)i, s, 3, 10000, done_cb, &a), 0);
        CHECK_EQ_ERR(pdr_xfer_pull(dec, "localhost", port, (uint64_t)i, &d, 1, 10000, done_cb, &b), 0);
    }
    CHECK(done_wait(&a, N, 20000) == N && done_wait(&b, N, 20000) == N);
    CHECK(a.nfail == 0 && b.nfail == 0);
    for (int i = 0; i < N; i++)
        CHECK(check_fill(dst + (size_t)i * LEN, LEN, (uint64_t)i, 0));

    /* A second decode asking for a room that the first one is being served: PDR_EEXIST for it only. */
    pdr_xfer_engine_t *dec2 = pdr_xfer_engine_create(NULL, &err);
    struct done c;
    done_init(&c);
    done_init(&a);
    done_init(&b);
    size_t big = 32u << 20;
    uint8_t *s2 = calloc(1, big), *d2 = malloc(big), *d3 = malloc(big);
    pdr_xfer_seg_t ss = {s2, big}, ds = {d2, big}, ds3 = {d3, big};
    CHECK_EQ_ERR(pdr_xfer_pull(dec, "127.0.0.1", port, 999, &ds, 1, 10000, done_cb, &b), 0);
    CHECK_EQ_ERR(pdr_xfer_push(pre, 999, &ss, 1, 10000, done_cb, &a), 0);
    CHECK(done_wait(&b, 1, 100) == 0 || b.status == 0);
    CHECK_EQ_ERR(pdr_xfer_pull(dec2, "127.0.0.1", port, 999, &ds3, 1, 3000, done_cb, &c), 0);
    CHECK(done_wait(&c, 1, 5000) == 1);
    CHECK(c.status == PDR_EEXIST || c.status == PDR_ENOROOM); /* ENOROOM if the first had already finished */
    CHECK(done_wait(&a, 1, 10000) == 1 && done_wait(&b, 1, 10000) == 1);
    CHECK_EQ_ERR(a.status, 0);
    CHECK_EQ_ERR(b.status, 0);
    pdr_xfer_engine_destroy(dec2);
    pdr_xfer_engine_destroy(dec);
    pdr_xfer_engine_destroy(pre);
    free(s2);
    free(d2);
    free(d3);
    free(src);
    free(dst);
    printf("ok small chunks, duplicate fetch\n");
}

static void test_heartbeat(void)
{
    int port, lfd = raw_listener(&port);
    int err;
    pdr_xfer_opts_t o = {.heartbeat_ms = 100, .heartbeat_timeout_ms = 500};
    pdr_xfer_engine_t *dec = pdr_xfer_engine_create(&o, &err);
    CHECK(dec);
    uint8_t buf[16];
    pdr_xfer_seg_t d = {buf, sizeof(buf)};
    struct done b;
    done_init(&b);
    uint64_t t0 = t_now_ns();
    /* The kernel completes the handshake from the backlog; nobody ever reads or answers. */
    CHECK_EQ_ERR(pdr_xfer_pull(dec, "127.0.0.1", port, 1, &d, 1, 10000, done_cb, &b), 0);
    CHECK(done_wait(&b, 1, 5000) == 1);
    uint64_t ms = (b.t_ns - t0) / 1000000;
    printf("silent peer detected after %llu ms (heartbeat timeout 500, deadline 10000)\n",
           (unsigned long long)ms);
    CHECK_EQ_ERR(b.status, PDR_EPEERGONE);
    CHECK(ms >= 450 && ms < 2000);
    pdr_xfer_engine_destroy(dec);
    close(lfd);
    printf("ok heartbeat\n");
}

static void test_limits(void)
{
    int err;
    pdr_xfer_opts_t o = {.max_segments = 4, .max_rooms = 3};
    pdr_xfer_engine_t *e = pdr_xfer_engine_create(&o, &err);
    CHECK(e);
    uint8_t buf[8];
    pdr_xfer_seg_t s[5] = {{buf, 1}, {buf, 1}, {buf, 1}, {buf, 1}, {buf, 1}};
    struct done a;
    done_init(&a);
    CHECK_EQ_ERR(pdr_xfer_push(e, 1, s, 5, 0, done_cb, &a), PDR_ETOOBIG);
    for (int i = 0; i < 3; i++)
        CHECK_EQ_ERR(pdr_xfer_push(e, (uint64_t)i, s, 4, 60000, done_cb, &a), 0);
    CHECK_EQ_ERR(pdr_xfer_push(e, 3, s, 4, 60000, done_cb, &a), PDR_ETOOBIG);
    CHECK_EQ_ERR(pdr_xfer_pull(e, "no such host.invalid", 1, 9, s, 1, 0, done_cb, &a), PDR_EINVAL);
    CHECK_EQ_ERR(pdr_xfer_mem_register(e, buf, sizeof(buf), PDR_XFER_MEM_HOST), 0);
    /* No driver: PDR_ENOTSUP; with one, host memory is not CUDA memory: PDR_EINVAL. */
    int rc = pdr_xfer_mem_register(e, buf, sizeof(buf), PDR_XFER_MEM_CUDA);
    CHECK(rc == PDR_ENOTSUP || rc == PDR_EINVAL);
    CHECK_EQ_ERR(pdr_xfer_mem_register(e, buf, sizeof(buf), PDR_XFER_MEM_AUTO), 0); /* host memory */
    CHECK_EQ_ERR(pdr_xfer_mem_unregister(e, buf), 0);
    CHECK_EQ_ERR(pdr_xfer_mem_unregister(e, buf), 0);
    CHECK_EQ_ERR(pdr_xfer_mem_unregister(e, buf), PDR_ENOROOM);
    pdr_xfer_opts_t bad = {.chunk_bytes = (size_t)PDR_XFER_MAX_CHUNK + 1};
    CHECK(pdr_xfer_engine_create(&bad, &err) == NULL && err == PDR_EINVAL);
    pdr_xfer_opts_t badl = {.listen_host = "256.1.1.1"};
    CHECK(pdr_xfer_engine_create(&badl, &err) == NULL && err != 0);
    pdr_xfer_engine_destroy(e);
    CHECK(a.count == 3 && a.status == PDR_ECLOSED);
    printf("ok limits\n");
}

/* The engine's sockets connected to 127.0.0.1:port (found through /proc/self/fd and getpeername). */
static int peer_sockets(int port, int *fds, int max)
{
    DIR *d = opendir("/proc/self/fd");
    CHECK(d != NULL);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < max) {
        char *end;
        long fd = strtol(e->d_name, &end, 10);
        if (*end != '\0' || fd < 0 || fd == dirfd(d))
            continue;
        struct sockaddr_in sa;
        socklen_t sl = sizeof(sa);
        if (getpeername((int)fd, (struct sockaddr *)&sa, &sl) == 0 && sa.sin_family == AF_INET &&
            ntohs(sa.sin_port) == port)
            fds[n++] = (int)fd;
    }
    closedir(d);
    return n;
}

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* Polls until the decode has want connections to port (there is no event for "the session is open"). */
static int wait_sockets(int port, int want, int timeout_ms)
{
    int fds[64];
    for (int i = 0; i < timeout_ms; i++) {
        if (peer_sockets(port, fds, 64) == want)
            return 1;
        nap_ms(1);
    }
    return 0;
}

static void test_striping(void)
{
    int err;
    pdr_xfer_opts_t po = {.listen_host = "127.0.0.1", .chunk_bytes = 256u << 10, .io_threads = 3};
    pdr_xfer_opts_t dopt = {.conns_per_peer = 4, .io_threads = 2};
    pdr_xfer_engine_t *pre = pdr_xfer_engine_create(&po, &err);
    pdr_xfer_engine_t *dec = pdr_xfer_engine_create(&dopt, &err);
    CHECK(pre && dec);
    int port = pdr_xfer_listen_port(pre);
    size_t len = 64u << 20;
    uint8_t *src = malloc(len), *dst = calloc(1, len);
    fill(src, len, 77, 0);
    pdr_xfer_seg_t s[3] = {{src, 1000}, {src + 1000, len / 2}, {src + 1000 + len / 2, len / 2 - 1000}};
    pdr_xfer_seg_t d[2] = {{dst, len / 3}, {dst + len / 3, len - len / 3}};
    struct info_done a, b;
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    done_init(&a.d);
    done_init(&b.d);
    CHECK_EQ_ERR(pdr_xfer_pull_ex(dec, "127.0.0.1", port, 1, d, 2, 20000, info_cb, &b), 0);
    /* The session opens its 4 connections before the room is offered: every one carries chunks. */
    CHECK(wait_sockets(port, 4, 5000));
    CHECK_EQ_ERR(pdr_xfer_push_ex(pre, 1, s, 3, 20000, info_cb, &a), 0);
    CHECK(done_wait(&a.d, 1, 30000) == 1 && done_wait(&b.d, 1, 30000) == 1);
    CHECK_EQ_ERR(a.d.status, 0);
    CHECK_EQ_ERR(b.d.status, 0);
    CHECK(strcmp(a.backend, "tcp") == 0 && strcmp(b.backend, "tcp") == 0 && b.usec > 0);
    CHECK(b.d.bytes == len);
    CHECK(check_fill(dst, len, 77, 0));

    /* Many rooms at once over the same session, small and large, interleaved on every connection. */
    enum { N = 48 };
    size_t rl[N];
    size_t off = 0;
    for (int i = 0; i < N; i++) {
        rl[i] = (size_t)(i % 3 == 0 ? (1u << 20) + 7 * (size_t)i : 4096 + 13 * (size_t)i);
        off += rl[i];
    }
    CHECK(off <= len);
    memset(dst, 0, len);
    done_init(&a.d);
    done_init(&b.d);
    off = 0;
    for (int i = 0; i < N; i++) {
        pdr_xfer_seg_t ss = {src + off, rl[i]}, dd = {dst + off, rl[i]};
        CHECK_EQ_ERR(pdr_xfer_pull_ex(dec, "127.0.0.1", port, 100 + (uint64_t)i, &dd, 1, 20000, info_cb, &b),
                     0);
        CHECK_EQ_ERR(pdr_xfer_push_ex(pre, 100 + (uint64_t)i, &ss, 1, 20000, info_cb, &a), 0);
        off += rl[i];
    }
    CHECK(done_wait(&a.d, N, 30000) == N && done_wait(&b.d, N, 30000) == N);
    CHECK(a.d.nfail == 0 && b.d.nfail == 0);
    CHECK(memcmp(src, dst, off) == 0);
    CHECK(wait_sockets(port, 4, 1000)); /* still the same session */

    pdr_xfer_stats_t sp, sd;
    pdr_xfer_get_stats(pre, &sp);
    pdr_xfer_get_stats(dec, &sd);
    CHECK(sp.transfers == N + 1 && sd.transfers == N + 1 && sp.failures == 0);
    CHECK(sp.bytes_sent == len + off && sd.bytes_received == len + off);
    CHECK(sp.staging_peak_bytes == 0 && sd.staging_peak_bytes == 0);
    pdr_xfer_engine_destroy(dec);
    pdr_xfer_engine_destroy(pre);
    free(src);
    free(dst);
    done_fini(&a.d);
    done_fini(&b.d);
    printf("ok striping over 4 connections, %d concurrent rooms\n", N);
}

static void test_conn_killed(void)
{
    int err;
    pdr_xfer_opts_t po = {.listen_host = "127.0.0.1"};
    pdr_xfer_opts_t dopt = {.conns_per_peer = 4};
    pdr_xfer_engine_t *pa = pdr_xfer_engine_create(&po, &err), *pb = pdr_xfer_engine_create(&po, &err);
    pdr_xfer_engine_t *dec = pdr_xfer_engine_create(&dopt, &err);
    CHECK(pa && pb && dec);
    int porta = pdr_xfer_listen_port(pa), portb = pdr_xfer_listen_port(pb);
    size_t len = 512u << 20;
    uint8_t *src = malloc(len), *dst = calloc(1, len);
    memset(src, 0x5A, len);
    uint8_t small_src[5000], small_dst[5000];
    fill(small_src, sizeof(small_src), 3, 0);
    pdr_xfer_seg_t s = {src, len}, d = {dst, len};
    pdr_xfer_seg_t ss = {small_src, sizeof(small_src)}, sd = {small_dst, sizeof(small_dst)};
    struct done a, b, c, e;
    done_init(&a);
    done_init(&b);
    done_init(&c);
    done_init(&e);

    /* 1. A room parked on session A (not offered yet) and one parked on session B; a data connection of
     * A dies: A's room fails with PDR_EPEERGONE, B's is untouched and completes when offered. */
    CHECK_EQ_ERR(pdr_xfer_pull(dec, "127.0.0.1", porta, 1, &sd, 1, 20000, done_cb, &b), 0);
    CHECK_EQ_ERR(pdr_xfer_pull(dec, "127.0.0.1", portb, 2, &sd, 1, 20000, done_cb, &c), 0);
    CHECK(wait_sockets(porta, 4, 5000) && wait_sockets(portb, 4, 5000));
    int fds[8];
    CHECK(peer_sockets(porta, fds, 8) == 4);
    shutdown(fds[3], SHUT_RDWR);
    CHECK(done_wait(&b, 1, 3000) == 1);
    CHECK_EQ_ERR(b.status, PDR_EPEERGONE);
    CHECK(done_wait(&c, 1, 50) == 0);
    CHECK_EQ_ERR(pdr_xfer_push(pb, 2, &ss, 1, 20000, done_cb, &e), 0);
    CHECK(done_wait(&c, 1, 5000) == 1 && done_wait(&e, 1, 5000) == 1);
    CHECK_EQ_ERR(c.status, 0);
    CHECK(check_fill(small_dst, sizeof(small_dst), 3, 0));

    /* 2. Mid-transfer: a big room from A on a fresh session; once bytes flow, one of its connections
     * dies. The room fails on both sides, a room running on session B at the same time is untouched. */
    done_init(&a);
    done_init(&b);
    done_init(&c);
    done_init(&e);
    CHECK_EQ_ERR(pdr_xfer_pull(dec, "127.0.0.1", porta, 3, &d, 1, 20000, done_cb, &b), 0);
    CHECK_EQ_ERR(pdr_xfer_push(pa, 3, &s, 1, 20000, done_cb, &a), 0);
    CHECK_EQ_ERR(pdr_xfer_pull(dec, "127.0.0.1", portb, 4, &sd, 1, 20000, done_cb, &c), 0);
    /* "Bytes flow" is read from the kernel's count of bytes received on the decode's sockets, not from
     * dst, which the engine's threads are writing. */
    int got = 0;
    for (int i = 0; i < 10000 && !got; i++) {
        got = tcp_received_from(porta) > (1u << 20);
        if (!got)
            nap_ms(1);
    }
    CHECK(got);
    int n = peer_sockets(porta, fds, 8);
    CHECK(n >= 1);
    shutdown(fds[n - 1], SHUT_RDWR);
    CHECK(done_wait(&b, 1, 5000) == 1 && done_wait(&a, 1, 5000) == 1);
    printf("connection killed mid-transfer: decode %s (%llu of %zu bytes), prefill %s\n",
           pdr_errname(b.status), (unsigned long long)b.bytes, len, pdr_errname(a.status));
    CHECK_EQ_ERR(b.status, PDR_EPEERGONE);
    CHECK(a.status == PDR_EPEERGONE || a.status == PDR_ECANCELED);
    CHECK_EQ_ERR(pdr_xfer_push(pb, 4, &ss, 1, 20000, done_cb, &e), 0);
    CHECK(done_wait(&c, 1, 5000) == 1 && done_wait(&e, 1, 5000) == 1);
    CHECK_EQ_ERR(c.status, 0);

    /* 3. The next pull from A reconnects. */
    done_init(&a);
    done_init(&b);
    memset(dst, 0, len);
    CHECK_EQ_ERR(pdr_xfer_push(pa, 5, &s, 1, 20000, done_cb, &a), 0);
    CHECK_EQ_ERR(pdr_xfer_pull(dec, "127.0.0.1", porta, 5, &d, 1, 20000, done_cb, &b), 0);
    CHECK(done_wait(&a, 1, 20000) == 1 && done_wait(&b, 1, 20000) == 1);
    CHECK_EQ_ERR(a.status, 0);
    CHECK_EQ_ERR(b.status, 0);
    CHECK(memcmp(src, dst, len) == 0);
    pdr_xfer_engine_destroy(dec);
    pdr_xfer_engine_destroy(pa);
    pdr_xfer_engine_destroy(pb);
    free(src);
    free(dst);
    done_fini(&a);
    done_fini(&b);
    done_fini(&c);
    done_fini(&e);
    printf("ok connection killed: only its session's rooms failed, next pull reconnected\n");
}

/* A session idle for longer than the heartbeat timeout is not "silent" when the next room starts (the
 * pause is the condition under test, not a synchronization). */
static void test_idle_gap(void)
{
    int err;
    pdr_xfer_opts_t po = {.listen_host = "127.0.0.1", .heartbeat_ms = 50, .heartbeat_timeout_ms = 200};
    pdr_xfer_opts_t dopt = {.heartbeat_ms = 50, .heartbeat_timeout_ms = 200};
    pdr_xfer_engine_t *pre = pdr_xfer_engine_create(&po, &err), *dec = pdr_xfer_engine_create(&dopt, &err);
    CHECK(pre && dec);
    int port = pdr_xfer_listen_port(pre);
    uint8_t src[4096], dst[4096];
    for (int r = 0; r < 2; r++) {
        fill(src, sizeof(src), (uint64_t)r, 0);
        pdr_xfer_seg_t s = {src, sizeof(src)}, d = {dst, sizeof(dst)};
        struct done a, b;
        done_init(&a);
        done_init(&b);
        CHECK_EQ_ERR(pdr_xfer_push(pre, 40 + (uint64_t)r, &s, 1, 5000, done_cb, &a), 0);
        CHECK_EQ_ERR(pdr_xfer_pull(dec, "127.0.0.1", port, 40 + (uint64_t)r, &d, 1, 5000, done_cb, &b), 0);
        CHECK(done_wait(&a, 1, 5000) == 1 && done_wait(&b, 1, 5000) == 1);
        CHECK_EQ_ERR(a.status, 0);
        CHECK_EQ_ERR(b.status, 0);
        CHECK(check_fill(dst, sizeof(dst), (uint64_t)r, 0));
        done_fini(&a);
        done_fini(&b);
        if (r == 0)
            nap_ms(500);
    }
    pdr_xfer_engine_destroy(dec);
    pdr_xfer_engine_destroy(pre);
    printf("ok idle session outlives the heartbeat timeout\n");
}

static void test_backend_opt(void)
{
    int err;
    pdr_xfer_opts_t bad = {.backend = "carrier-pigeon"};
    CHECK(pdr_xfer_engine_create(&bad, &err) == NULL && err == PDR_EINVAL);
    /* Forcing a backend this engine cannot use fails the transfer (not the call) with PDR_ENOTSUP. */
    pdr_xfer_opts_t o = {.backend = "rdma"};
    pdr_xfer_engine_t *e = pdr_xfer_engine_create(&o, &err);
    CHECK(e != NULL);
    uint8_t buf[16];
    pdr_xfer_seg_t s = {buf, sizeof(buf)};
    struct info_done a;
    memset(&a, 0, sizeof(a));
    done_init(&a.d);
    CHECK_EQ_ERR(pdr_xfer_push_ex(e, 1, &s, 1, 5000, info_cb, &a), 0);
    CHECK(done_wait(&a.d, 1, 5000) == 1);
    CHECK_EQ_ERR(a.d.status, PDR_ENOTSUP);
    CHECK(strcmp(a.backend, "none") == 0);
    pdr_xfer_engine_destroy(e);
    done_fini(&a.d);
    printf("ok backend option\n");
}

static const pdr_test_case_t cases[] = {
    {"striping", test_striping, 60},
    {"conn_killed", test_conn_killed, 60},
    {"idle_gap", test_idle_gap, 30},
    {"backend_opt", test_backend_opt, 30},
    {"small_chunks", test_small_chunks, 30},
    {"heartbeat", test_heartbeat, 30},
    {"limits", test_limits, 30},
};

int main(int argc, char **argv)
{
    return pdr_test_run(cases, sizeof(cases) / sizeof(cases[0]), NULL, NULL, argc, argv);
}
