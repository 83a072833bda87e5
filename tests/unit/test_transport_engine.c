/*
 * The engine API (transport.h) with options the shim does not expose: tiny DATA chunks (many frames
 * per room, interleaved between rooms), the application heartbeat against a peer that accepts and
 * never answers, segment and room limits, a second decode fetching a room already being served, and
 * memory registration.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "err.h"
#include "transport.h"
#include "wire.h"
#include "test_shim_util.h"

static int raw_listener(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(fd, 8) == 0);
    socklen_t sl = sizeof(sa);
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    *port = ntohs(sa.sin_port);
    return fd;
}

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
    CHECK_EQ_ERR(pdr_xfer_mem_register(e, buf, sizeof(buf), PDR_XFER_MEM_CUDA), PDR_ENOTSUP);
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

int main(void)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    test_small_chunks();
    test_heartbeat();
    test_limits();
    return 0;
}
