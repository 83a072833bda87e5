/*
 * The RDMA runtime (transport/rdma.c) against a fake libibverbs (rdma_fake_verbs.c): open (device
 * list, ACTIVE port, GID choice), endpoints and the QP state sequence with its attributes, registration,
 * rooms end to end (bytes, IMM tag, send-queue depth, many rooms at once), error translation
 * (RETRY_EXC_ERR → PDR_EPEERGONE, the endpoint then refuses new rooms), the CQ budget, and teardown
 * (every QP and MR released, no QP destroyed with work outstanding). What it cannot show: that real
 * hardware behaves like the fake. Threads: main and the context's completion thread (callbacks).
 */
#define _GNU_SOURCE
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "runner.h"
#include "err.h"
#include "rdma.h"
#include "rdma_fake_verbs.h"

#define MAX_ROOMS 64

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int done_calls, imm_calls, statuses[MAX_ROOMS];
static uint32_t imm_tags[MAX_ROOMS];

static void reset_counters(void)
{
    pthread_mutex_lock(&mu);
    done_calls = imm_calls = 0;
    for (int i = 0; i < MAX_ROOMS; i++)
        statuses[i] = 1;
    pthread_mutex_unlock(&mu);
}

static void on_done(void *arg, int status)
{
    pthread_mutex_lock(&mu);
    statuses[(intptr_t)arg] = status;
    done_calls++;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static void on_imm(void *arg, uint32_t tag32)
{
    (void)arg;
    pthread_mutex_lock(&mu);
    if (imm_calls < MAX_ROOMS)
        imm_tags[imm_calls] = tag32;
    imm_calls++;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static int wait_for(int ndone, int nimm)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 10;
    int rc = 0;
    pthread_mutex_lock(&mu);
    while ((done_calls < ndone || imm_calls < nimm) && rc == 0)
        rc = pthread_cond_timedwait(&cv, &mu, &dl);
    pthread_mutex_unlock(&mu);
    return rc == 0 ? 0 : -1;
}

struct pair {
    struct pdr_rdma_ctx *ctx;
    struct pdr_rdma_ep *a, *b;
};

static int setup(struct pair *p, unsigned nqp)
{
    int err = 1;
    memset(p, 0, sizeof(*p));
    p->ctx = pdr__rdma_open(NULL, NULL, &err);
    CHECK(p->ctx != NULL && err == 0);
    if (p->ctx == NULL)
        return -1;
    CHECK(strcmp(pdr__rdma_dev_name(p->ctx), "fake_0") == 0);
    struct pdr_rdma_ep_info ia, ib, ra, rb;
    CHECK(pdr__rdma_ep_create(p->ctx, nqp, &p->a, &ia) == 0);
    CHECK(pdr__rdma_ep_create(p->ctx, nqp, &p->b, &ib) == 0);
    if (p->a == NULL || p->b == NULL)
        return -1;
    pdr__rdma_set_imm_cb(p->b, on_imm, NULL);
    uint8_t wa[PDR_RDMA_EP_MAX_BYTES], wb[PDR_RDMA_EP_MAX_BYTES];
    size_t na = pdr__rdma_pack_ep(&ia, wa, sizeof(wa)), nb = pdr__rdma_pack_ep(&ib, wb, sizeof(wb));
    CHECK(na > 0 && nb > 0);
    CHECK(pdr__rdma_unpack_ep(wa, na, &ra) == 0 && pdr__rdma_unpack_ep(wb, nb, &rb) == 0);
    CHECK(pdr__rdma_ep_connect(p->a, &rb) == 0);
    CHECK(pdr__rdma_ep_connect(p->b, &ra) == 0);
    return 0;
}

static void teardown(struct pair *p)
{
    pdr__rdma_ep_destroy(p->a);
    pdr__rdma_ep_destroy(p->b);
    pdr__rdma_close(p->ctx);
    CHECK(fake_verbs.live_qps == 0 && fake_verbs.live_mrs == 0);
}

/* nrooms rooms of room_bytes each, sources cut in 3 odd pieces, destinations in 2. */
static void rooms(unsigned nqp, int nrooms, size_t room_bytes)
{
    struct pair p;
    reset_counters();
    uint64_t bytes0 = fake_verbs.bytes_written;
    if (setup(&p, nqp) != 0)
        return;
    size_t total = room_bytes * (size_t)nrooms;
    uint8_t *src = malloc(total), *dst = calloc(1, total);
    CHECK(src != NULL && dst != NULL);
    for (size_t i = 0; i < total; i++)
        src[i] = (uint8_t)(i * 131 + 7 + i / 4093);
    struct pdr_rdma_mr *ms = NULL, *md = NULL;
    uint32_t slk, srk, dlk, drk;
    CHECK(pdr__rdma_reg(p.ctx, src, total, 0, &ms, &slk, &srk) == 0);
    CHECK(pdr__rdma_reg(p.ctx, dst, total, 0, &md, &dlk, &drk) == 0);
    const uint64_t tag0 = 0xABCDEF0012345678ull;
    for (int r = 0; r < nrooms; r++) {
        uintptr_t s = (uintptr_t)src + (size_t)r * room_bytes, d = (uintptr_t)dst + (size_t)r * room_bytes;
        size_t c1 = room_bytes / 5 + 3, c2 = room_bytes / 2 + 1;
        struct pdr_rdma_seg local[3] = {
            {s, c1, slk}, {s + c1, c2, slk}, {s + c1 + c2, room_bytes - c1 - c2, slk}};
        struct pdr_rdma_seg rsegs[2] = {{d, room_bytes / 3, drk},
                                        {d + room_bytes / 3, room_bytes - room_bytes / 3, drk}};
        uint8_t mem[PDR_RDMA_MEM_FIXED + 2 * PDR_RDMA_MEM_PER_SEG];
        struct pdr_rdma_seg remote[2];
        uint32_t nrem;
        uint64_t rtotal;
        CHECK(pdr__rdma_pack_mem(rsegs, 2, mem, sizeof(mem)) == sizeof(mem));
        CHECK(pdr__rdma_unpack_mem(mem, sizeof(mem), remote, 2, &nrem, &rtotal) == 0);
        CHECK(pdr__rdma_write_room(p.a, tag0 + (uint64_t)r, local, 3, remote, nrem, on_done,
                                   (void *)(intptr_t)r) == 0);
    }
    CHECK(wait_for(nrooms, nrooms) == 0);
    CHECK(done_calls == nrooms && imm_calls == nrooms);
    int seen[MAX_ROOMS] = {0};
    for (int r = 0; r < nrooms; r++) {
        CHECK(statuses[r] == 0);
        uint32_t k = imm_tags[r] - (uint32_t)tag0;
        CHECK(k < (uint32_t)nrooms);
        if (k < (uint32_t)nrooms)
            seen[k]++;
    }
    for (int r = 0; r < nrooms; r++)
        CHECK(seen[r] == 1);
    CHECK(memcmp(src, dst, total) == 0);
    CHECK(fake_verbs.bytes_written - bytes0 == total);

    /* Refused up front, no callback: size mismatch, bad arguments. */
    struct pdr_rdma_seg l1 = {(uintptr_t)src, 10, slk}, r1 = {(uintptr_t)dst, 11, drk};
    CHECK(pdr__rdma_write_room(p.a, 1, &l1, 1, &r1, 1, on_done, NULL) == PDR_ESIZE);
    CHECK(pdr__rdma_write_room(p.a, 1, &l1, 1, &r1, 1, NULL, NULL) == PDR_EINVAL);
    pdr__rdma_dereg(ms);
    pdr__rdma_dereg(md);
    teardown(&p);
    free(src);
    free(dst);
    CHECK(done_calls == nrooms);
}

/* Two rooms of 4 WRs, room 100 on QP 0 and room 101 on QP 1; the fail_at-th WRITE from now fails with
 * IBV_WC_RETRY_EXC_ERR. fail_at 2 hits room 100: both rooms fail, no IMM is ever sent. fail_at 5 hits
 * room 101 after room 100's data completed: room 100 is still delivered (status 0, one IMM). */
static void failure(int fail_at)
{
    struct pair p;
    reset_counters();
    fake_verbs.fail_at_wr = fake_verbs.writes + fail_at;
    if (setup(&p, 2) != 0)
        return;
    size_t total = 8u << 20;
    uint8_t *src = calloc(1, total), *dst = calloc(1, total);
    struct pdr_rdma_mr *ms = NULL, *md = NULL;
    uint32_t slk, srk, dlk, drk;
    CHECK(pdr__rdma_reg(p.ctx, src, total, 0, &ms, &slk, &srk) == 0);
    CHECK(pdr__rdma_reg(p.ctx, dst, total, 0, &md, &dlk, &drk) == 0);
    struct pdr_rdma_seg l = {(uintptr_t)src, total / 2, slk}, r = {(uintptr_t)dst, total / 2, drk};
    struct pdr_rdma_seg l2 = {(uintptr_t)src + total / 2, total / 2, slk},
                        r2 = {(uintptr_t)dst + total / 2, total / 2, drk};
    CHECK(pdr__rdma_write_room(p.a, 100, &l, 1, &r, 1, on_done, (void *)0) == 0);
    /* With fail_at 2 the endpoint may already be dead when room 101 comes: refused at once, no callback. */
    int rc101 = pdr__rdma_write_room(p.a, 101, &l2, 1, &r2, 1, on_done, (void *)1);
    CHECK(rc101 == 0 || (fail_at == 2 && rc101 == PDR_EPEERGONE));
    int expect = rc101 == 0 ? 2 : 1;
    CHECK(wait_for(expect, 0) == 0);
    if (fail_at == 2) {
        CHECK(statuses[0] == PDR_EPEERGONE && (rc101 != 0 || statuses[1] == PDR_EPEERGONE));
        CHECK(imm_calls == 0);
    } else {
        CHECK(statuses[0] == 0 && statuses[1] == PDR_EPEERGONE);
        CHECK(wait_for(2, 1) == 0 && imm_calls == 1 && imm_tags[0] == 100);
    }
    /* The endpoint is dead: new rooms are refused at once. */
    CHECK(pdr__rdma_write_room(p.a, 102, &l, 1, &r, 1, on_done, (void *)2) == PDR_EPEERGONE);
    fake_verbs.fail_at_wr = 0;
    teardown(&p); /* MRs left registered: close releases them */
    free(src);
    free(dst);
    CHECK(done_calls == expect);
}

/* Rooms posted and the sender endpoint destroyed at once: every callback runs exactly once, before
 * ep_destroy returns, with 0 or PDR_ECLOSED; nothing is left on the (fake) hardware. */
static void destroy_in_flight(void)
{
    for (int iter = 0; iter < 50; iter++) {
        struct pair p;
        reset_counters();
        if (setup(&p, 2) != 0)
            return;
        size_t total = 1u << 20;
        uint8_t *src = calloc(1, total), *dst = calloc(1, total);
        struct pdr_rdma_mr *ms = NULL, *md = NULL;
        uint32_t slk, srk, dlk, drk;
        CHECK(pdr__rdma_reg(p.ctx, src, total, 0, &ms, &slk, &srk) == 0);
        CHECK(pdr__rdma_reg(p.ctx, dst, total, 0, &md, &dlk, &drk) == 0);
        for (int r = 0; r < 4; r++) {
            struct pdr_rdma_seg l = {(uintptr_t)src + (size_t)r * (total / 4), total / 4, slk};
            struct pdr_rdma_seg d = {(uintptr_t)dst + (size_t)r * (total / 4), total / 4, drk};
            CHECK(pdr__rdma_write_room(p.a, (uint64_t)r, &l, 1, &d, 1, on_done, (void *)(intptr_t)r) == 0);
        }
        pdr__rdma_ep_destroy(p.a);
        pthread_mutex_lock(&mu);
        CHECK(done_calls == 4);
        for (int r = 0; r < 4; r++)
            CHECK(statuses[r] == 0 || statuses[r] == PDR_ECLOSED);
        pthread_mutex_unlock(&mu);
        p.a = NULL;
        teardown(&p);
        free(src);
        free(dst);
    }
}

static void budget(void)
{
    /* A CQ of 1000 entries: one endpoint of 2 QPs reserves 2 * (256 + 64) = 640. */
    fake_verbs.max_cqe = 1000;
    int err;
    struct pdr_rdma_ctx *ctx = pdr__rdma_open("fake_0", NULL, &err);
    CHECK(ctx != NULL);
    if (ctx == NULL)
        return;
    CHECK(fake_verbs.cq_size == 1000);
    struct pdr_rdma_ep *a = NULL, *b = NULL;
    struct pdr_rdma_ep_info ia, ib;
    CHECK(pdr__rdma_ep_create(ctx, 2, &a, &ia) == 0);
    CHECK(pdr__rdma_ep_create(ctx, 2, &b, &ib) == PDR_ETOOBIG);
    CHECK(pdr__rdma_ep_create(ctx, 0, &b, &ib) == PDR_EINVAL);
    CHECK(pdr__rdma_ep_create(ctx, PDR_RDMA_MAX_QP + 1, &b, &ib) == PDR_EINVAL);
    pdr__rdma_ep_destroy(a);
    CHECK(pdr__rdma_ep_create(ctx, 2, &b, &ib) == 0); /* the reservation was returned */
    /* Connecting to a peer with another QP count is a protocol error. */
    struct pdr_rdma_ep_info other = ib;
    other.nqp = 1;
    CHECK(pdr__rdma_ep_connect(b, &other) == PDR_EPROTO);
    /* Rooms before connect are refused. */
    uint8_t x[16], y[16];
    struct pdr_rdma_seg l = {(uintptr_t)x, 16, 1}, r = {(uintptr_t)y, 16, 2};
    CHECK(pdr__rdma_write_room(b, 1, &l, 1, &r, 1, on_done, NULL) == PDR_EIO);
    pdr__rdma_close(ctx); /* destroys b */
    fake_verbs.max_cqe = 0;
    CHECK(pdr__rdma_open("nosuch", NULL, &err) == NULL && err == PDR_EINVAL);
    CHECK(fake_verbs.live_qps == 0);
}

static void test_device_count(void)
{
    fake_verbs.ndev = 0;
    int err = 0;
    CHECK(pdr__rdma_device_count() == 0);
    CHECK(pdr__rdma_open(NULL, NULL, &err) == NULL && err == PDR_ENOTSUP);
    fake_verbs.ndev = 1;
    CHECK(pdr__rdma_device_count() == 1);
}

static void test_rooms(void)
{
    rooms(2, 1, (5u << 20) + 12345); /* InfiniBand, one room */
    rooms(1, 1, 64);                 /* one small room, one QP */
}

static void test_rooms_queue_limits(void)
{
    fake_verbs.max_qp_wr = 40; /* send queues of 40 WRs and 4 KiB per WRITE: batches wait for slots */
    fake_verbs.max_msg_sz = 4096;
    rooms(3, 20, (300u << 10) + 77);
    CHECK(fake_verbs.max_sq_used >= 32 && fake_verbs.max_sq_used <= 40);
    rooms(16, 40, 33u << 10);
    rooms(2, 1, 4u << 20);
    fake_verbs.max_qp_wr = 0;
    fake_verbs.max_msg_sz = 0;
}

static void test_rooms_roce(void)
{
    fake_verbs.link_layer = IBV_LINK_LAYER_ETHERNET; /* RoCE: GID index 3 must be chosen */
    rooms(2, 3, 3u << 20);
    fake_verbs.link_layer = IBV_LINK_LAYER_INFINIBAND;
}

static void test_failure(void)
{
    failure(2);
    failure(5);
}

/* Each case, in its child: one fake device, and no verbs rule broken by the end. */
static void one_device(void)
{
    fake_verbs.ndev = 1;
}

static void no_violations(void)
{
    CHECK(fake_verbs.violations == 0);
    printf("fake verbs: %llu WRs posted, %d IMMs\n", (unsigned long long)fake_verbs.posted_wrs,
           fake_verbs.imms);
}

static const pdr_test_case_t cases[] = {
    {"device_count", test_device_count, 60},
    {"rooms", test_rooms, 60},
    {"rooms_queue_limits", test_rooms_queue_limits, 60},
    {"rooms_roce", test_rooms_roce, 60},
    {"failure", test_failure, 60},
    {"destroy_in_flight", destroy_in_flight, 60},
    {"budget", budget, 60},
};

int main(int argc, char **argv)
{
    return pdr_test_run(cases, sizeof(cases) / sizeof(cases[0]), one_device, no_violations, argc, argv);
}
