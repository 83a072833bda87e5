/*
 * The RDMA data path of the engine on a CPU: the engine's objects built against the fake
 * libibverbs (tests/unit/rdma_fake_verbs.c: one fake device, RC loopback inside this process) and
 * tests/unit/fake_cuda.c. Two engines over loopback TCP with backend auto: the room's bytes arrive
 * (several segments of odd sizes on both sides) and both info callbacks say "rdma"; a second room
 * reuses the session's endpoint (no new QPs); an injected retry-exceeded completion fails that room with
 * PDR_EPEERGONE on both sides and the next room succeeds on a new endpoint; cancel on either side; a
 * deadline with a stalled peer; memory registered with pdr_xfer_mem_register receives one cached MR per
 * region (host, and fake CUDA memory with backend rdma), shared by its rooms, released at unregister
 * (after the last room using it) or engine destroy.
 * Nothing here runs on real RDMA hardware.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_cuda.h"
#include "err.h"
#include "rdma_fake_verbs.h"
#include "transport.h"
#include "test_shim_util.h"
#include "runner.h"

#define LEN 300007

/* One room, src cut in 3 odd pieces, dst in 2; returns both statuses. */
static void room(pdr_xfer_engine_t *pre, pdr_xfer_engine_t *dec, int port, uint64_t r, uint8_t *src,
                 uint8_t *dst, int *ps, int *ds, char *pb, char *db)
{
    fill(src, LEN, r, 0);
    memset(dst, 0, LEN);
    pdr_xfer_seg_t ss[3] = {{src, 1}, {src + 1, 77777}, {src + 77778, LEN - 77778}};
    pdr_xfer_seg_t dd[2] = {{dst, 12345}, {dst + 12345, LEN - 12345}};
    struct info_done a, b;
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    done_init(&a.d);
    done_init(&b.d);
    CHECK_EQ_ERR(pdr_xfer_pull_ex(dec, "127.0.0.1", port, r, dd, 2, 10000, info_cb, &b), 0);
    CHECK_EQ_ERR(pdr_xfer_push_ex(pre, r, ss, 3, 10000, info_cb, &a), 0);
    CHECK(done_wait(&a.d, 1, 20000) == 1 && done_wait(&b.d, 1, 20000) == 1);
    *ps = a.d.status;
    *ds = b.d.status;
    snprintf(pb, 16, "%s", a.backend);
    snprintf(db, 16, "%s", b.backend);
    done_fini(&a.d);
    done_fini(&b.d);
}

static void ok_room(pdr_xfer_engine_t *pre, pdr_xfer_engine_t *dec, int port, uint64_t r, uint8_t *src,
                    uint8_t *dst)
{
    int ps, ds;
    char pb[16], db[16];
    room(pre, dec, port, r, src, dst, &ps, &ds, pb, db);
    CHECK_EQ_ERR(ps, 0);
    CHECK_EQ_ERR(ds, 0);
    CHECK(check_fill(dst, LEN, r, 0));
    if (strcmp(pb, "rdma") != 0 || strcmp(db, "rdma") != 0) {
        fprintf(stderr, "room %llu: backends %s/%s, want rdma\n", (unsigned long long)r, pb, db);
        exit(1);
    }
}

/* One side posts, the other never does: cancel (or the deadline) ends it. */
static void lonely(pdr_xfer_engine_t *eng, pdr_xfer_engine_t *other, int port, uint64_t r, int pull,
                   int cancel, uint8_t *buf)
{
    pdr_xfer_seg_t s[2] = {{buf, 1001}, {buf + 1001, 5003}};
    struct info_done a;
    memset(&a, 0, sizeof(a));
    done_init(&a.d);
    (void)other;
    if (pull)
        CHECK_EQ_ERR(pdr_xfer_pull_ex(eng, "127.0.0.1", port, r, s, 2, cancel ? 10000 : 300, info_cb, &a), 0);
    else
        CHECK_EQ_ERR(pdr_xfer_push_ex(eng, r, s, 2, cancel ? 10000 : 300, info_cb, &a), 0);
    if (cancel) {
        usleep(100000);
        CHECK_EQ_ERR(pdr_xfer_cancel(eng, r), 0);
    }
    CHECK(done_wait(&a.d, 1, 5000) == 1);
    CHECK_EQ_ERR(a.d.status, cancel ? PDR_ECANCELED : PDR_ENOROOM); /* parked: never offered */
    done_fini(&a.d);
}

/* Each case's own pair of engines over loopback (backend auto, or the one named) and its buffers. */
struct pair {
    pdr_xfer_engine_t *pre, *dec;
    int port;
    uint8_t *src, *dst;
};

static void pair_open(struct pair *p, const char *backend)
{
    fake_verbs.ndev = 1;
    int err;
    pdr_xfer_opts_t po = {.listen_host = "127.0.0.1", .heartbeat_ms = 100, .heartbeat_timeout_ms = 2000};
    pdr_xfer_opts_t dopt = {.heartbeat_ms = 100, .heartbeat_timeout_ms = 2000};
    po.backend = dopt.backend = backend;
    p->pre = pdr_xfer_engine_create(&po, &err);
    p->dec = pdr_xfer_engine_create(&dopt, &err);
    CHECK(p->pre && p->dec);
    p->port = pdr_xfer_listen_port(p->pre);
    p->src = malloc(LEN);
    p->dst = malloc(LEN);
    CHECK(p->src && p->dst);
}

static void pair_close(struct pair *p)
{
    pdr_xfer_engine_destroy(p->dec);
    pdr_xfer_engine_destroy(p->pre);
    CHECK(fake_verbs.live_qps == 0 && fake_verbs.live_mrs == 0);
    CHECK(fake_verbs.violations == 0);
    free(p->src);
    free(p->dst);
}

/* A second room reuses the session's endpoints. */
static void test_endpoint_reuse(void)
{
    struct pair p;
    pair_open(&p, NULL);
    ok_room(p.pre, p.dec, p.port, 1, p.src, p.dst);
    int qps = fake_verbs_counter(&fake_verbs.live_qps);
    CHECK(qps == 2 * 2);
    ok_room(p.pre, p.dec, p.port, 2, p.src, p.dst);
    CHECK(fake_verbs_counter(&fake_verbs.live_qps) == qps); /* the session's endpoints were reused */
    pair_close(&p);
}

/* A retry-exceeded completion on the prefill's next WRITE. */
static void test_retry_exceeded(void)
{
    struct pair p;
    pair_open(&p, NULL);
    ok_room(p.pre, p.dec, p.port, 1, p.src, p.dst);
    int qps = fake_verbs_counter(&fake_verbs.live_qps);
    CHECK(qps == 2 * 2);
    fake_verbs.fail_at_wr = fake_verbs.writes + 1;
    int ps, ds;
    char pb[16], db[16];
    room(p.pre, p.dec, p.port, 3, p.src, p.dst, &ps, &ds, pb, db);
    CHECK_EQ_ERR(ps, PDR_EPEERGONE);
    CHECK_EQ_ERR(ds, PDR_EPEERGONE);
    fake_verbs.fail_at_wr = 0;
    ok_room(p.pre, p.dec, p.port, 4, p.src, p.dst); /* on new endpoints */
    CHECK(fake_verbs_counter(&fake_verbs.live_qps) == qps);
    pair_close(&p);
}

/* Cancel on either side, and a deadline with a stalled peer; the session still carries a room after. */
static void test_cancel_deadline(void)
{
    struct pair p;
    pair_open(&p, NULL);
    ok_room(p.pre, p.dec, p.port, 1, p.src, p.dst);
    lonely(p.dec, p.pre, p.port, 10, 1, 1, p.dst); /* decode cancels while its FETCH_RDMA is parked */
    lonely(p.pre, p.dec, p.port, 11, 0, 1, p.src); /* prefill cancels before any fetch */
    lonely(p.dec, p.pre, p.port, 12, 1, 0, p.dst); /* the prefill never pushes: the decode's deadline */
    ok_room(p.pre, p.dec, p.port, 5, p.src, p.dst);
    CHECK(fake_verbs_counter(&fake_verbs.live_mrs) ==
          0); /* unregistered memory: registered per room, released with it */
    pair_close(&p);
}

/* Registered memory: one MR per region (on each side), made on the first RDMA room inside it and
 * shared by the next rooms. */
static void test_registered_host(void)
{
    struct pair p;
    pair_open(&p, NULL);
    pdr_xfer_engine_t *pre = p.pre, *dec = p.dec;
    int port = p.port;
    uint8_t *src = p.src, *dst = p.dst;
    ok_room(pre, dec, port, 5, src, dst);
    CHECK(fake_verbs_counter(&fake_verbs.live_mrs) == 0);
    CHECK_EQ_ERR(pdr_xfer_mem_register(pre, src, LEN, PDR_XFER_MEM_HOST), 0);
    CHECK_EQ_ERR(pdr_xfer_mem_register(dec, dst, LEN, PDR_XFER_MEM_HOST), 0);
    CHECK(fake_verbs_counter(&fake_verbs.live_mrs) == 0); /* lazily */
    ok_room(pre, dec, port, 6, src, dst);
    CHECK(fake_verbs_counter(&fake_verbs.live_mrs) == 2);
    ok_room(pre, dec, port, 7, src, dst);
    CHECK(fake_verbs_counter(&fake_verbs.live_mrs) == 2);
    /* Unregistering a region that a room in flight uses keeps its MR until that room ends. */
    pdr_xfer_seg_t ps2[1] = {{dst + 100, 4000}};
    struct info_done a;
    memset(&a, 0, sizeof(a));
    done_init(&a.d);
    CHECK_EQ_ERR(pdr_xfer_pull_ex(dec, "127.0.0.1", port, 20, ps2, 1, 10000, info_cb, &a), 0);
    usleep(100000); /* its FETCH_RDMA is out: the prefill parked it */
    CHECK_EQ_ERR(pdr_xfer_mem_unregister(dec, dst), 0);
    CHECK(fake_verbs_counter(&fake_verbs.live_mrs) == 2);
    CHECK_EQ_ERR(pdr_xfer_cancel(dec, 20), 0);
    CHECK(done_wait(&a.d, 1, 5000) == 1);
    CHECK_EQ_ERR(a.d.status, PDR_ECANCELED);
    done_fini(&a.d);
    CHECK(fake_verbs_counter(&fake_verbs.live_mrs) == 1); /* the last room released the decode's region */
    CHECK_EQ_ERR(pdr_xfer_mem_unregister(pre, src), 0);
    CHECK(fake_verbs_counter(&fake_verbs.live_mrs) == 0); /* unused: released at once */
    CHECK_EQ_ERR(pdr_xfer_mem_unregister(pre, src), PDR_ENOROOM);
    ok_room(pre, dec, port, 8, src, dst); /* per-room registration again */
    CHECK(fake_verbs_counter(&fake_verbs.live_mrs) == 0);
    /* A region still registered at engine destroy: its MR is released with the engine. */
    CHECK_EQ_ERR(pdr_xfer_mem_register(dec, dst, LEN, PDR_XFER_MEM_HOST), 0);
    ok_room(pre, dec, port, 9, src, dst);
    CHECK(fake_verbs_counter(&fake_verbs.live_mrs) == 1);
    pair_close(&p);
}

/* A registered CUDA region (fake device memory on device 1) on both sides, backend forced to rdma
 * (auto would pick CUDA IPC in one process): one MR per region, through the nvidia-peermem path
 * since the fake has no dma-buf. */
static void test_registered_cuda(void)
{
    struct pair p;
    pair_open(&p, "rdma");
    uint8_t *gsrc, *gdst;
    CHECK(pdr__cuda_bind(1) == 0);
    CHECK(pdr__cuda_mem_alloc(LEN, (void **)&gsrc) == 0 && pdr__cuda_mem_alloc(LEN, (void **)&gdst) == 0);
    CHECK_EQ_ERR(pdr_xfer_mem_register(p.pre, gsrc, LEN, PDR_XFER_MEM_CUDA), 0);
    CHECK_EQ_ERR(pdr_xfer_mem_register(p.dec, gdst, LEN, PDR_XFER_MEM_AUTO), 0);
    ok_room(p.pre, p.dec, p.port, 30, gsrc, gdst);
    ok_room(p.pre, p.dec, p.port, 31, gsrc, gdst);
    CHECK(fake_verbs_counter(&fake_verbs.live_mrs) == 2);
    CHECK_EQ_ERR(pdr_xfer_mem_unregister(p.pre, gsrc), 0);
    CHECK_EQ_ERR(pdr_xfer_mem_unregister(p.dec, gdst), 0);
    CHECK(fake_verbs_counter(&fake_verbs.live_mrs) == 0);
    pair_close(&p);
    pdr__cuda_mem_free(gsrc);
    pdr__cuda_mem_free(gdst);
}

static const pdr_test_case_t cases[] = {
    {"endpoint_reuse", test_endpoint_reuse, 30},   {"retry_exceeded", test_retry_exceeded, 30},
    {"cancel_deadline", test_cancel_deadline, 30}, {"registered_host", test_registered_host, 30},
    {"registered_cuda", test_registered_cuda, 30},
};

int main(int argc, char **argv)
{
    int rc = PDR_TEST_RUN(cases, argc, argv);
    if (rc == 0)
        printf("test_transport_rdma: ok\n");
    return rc;
}
