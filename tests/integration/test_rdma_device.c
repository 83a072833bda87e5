/*
 * RDMA loopback on a real device: two endpoints of one context in one process, connected to each other
 * (RC), write a few MiB of host memory from one segment list into another with differently cut segments
 * and the WITH_IMM notification, then verify every byte, the tag seen by the receiver and the sender's
 * status. Exits 77 (skipped) when pdr__rdma_device_count() is 0, as on every machine without RDMA.
 * Threads: main, plus the context's completion thread that runs the callbacks.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "../unit/runner.h"
#include "err.h"
#include "rdma.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int done_status = 1, done_calls, imm_calls;
static uint32_t imm_tag;

static void on_done(void *arg, int status)
{
    (void)arg;
    pthread_mutex_lock(&mu);
    done_status = status;
    done_calls++;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static void on_imm(void *arg, uint32_t tag32)
{
    (void)arg;
    pthread_mutex_lock(&mu);
    imm_tag = tag32;
    imm_calls++;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

/* Waits until both callbacks ran n times or 10 s passed. */
static int wait_for(int n)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 10;
    pthread_mutex_lock(&mu);
    int rc = 0;
    while ((done_calls < n || imm_calls < n) && rc == 0)
        rc = pthread_cond_timedwait(&cv, &mu, &dl);
    pthread_mutex_unlock(&mu);
    return rc == 0 ? 0 : -1;
}

/* Each case's own context, two endpoints connected to each other, and a source and a destination of a few
 * MiB, registered, with the source cut in 3 odd pieces and the destination in 2 others. */
struct loop {
    struct pdr_rdma_ctx *ctx;
    struct pdr_rdma_ep *a, *b;
    size_t total;
    uint8_t *src, *dst;
    struct pdr_rdma_mr *ms, *md;
    struct pdr_rdma_seg local[3], remote[2];
    uint32_t nrem;
};

static void loop_open(struct loop *l)
{
    memset(l, 0, sizeof(*l));
    if (pdr__rdma_device_count() == 0) {
        printf("no RDMA device: skipped\n");
        exit(77);
    }
    int err = 0;
    l->ctx = pdr__rdma_open(NULL, NULL, &err);
    if (l->ctx == NULL) {
        /* PDR_ENOTSUP: a device without an active port. */
        fprintf(stderr, "pdr__rdma_open: %s%s\n", pdr_strerror(err), err == PDR_ENOTSUP ? ": skipped" : "");
        exit(err == PDR_ENOTSUP ? 77 : 1);
    }
    printf("device %s\n", pdr__rdma_dev_name(l->ctx));
    struct pdr_rdma_ep_info ia, ib;
    CHECK(pdr__rdma_ep_create(l->ctx, 2, &l->a, &ia) == 0);
    CHECK(pdr__rdma_ep_create(l->ctx, 2, &l->b, &ib) == 0);
    if (l->a == NULL || l->b == NULL)
        exit(1);
    pdr__rdma_set_imm_cb(l->b, on_imm, NULL);

    /* The descriptors go through the wire format, as they would between two hosts. */
    uint8_t wa[PDR_RDMA_EP_MAX_BYTES], wb[PDR_RDMA_EP_MAX_BYTES];
    struct pdr_rdma_ep_info ra, rb;
    size_t na = pdr__rdma_pack_ep(&ia, wa, sizeof(wa)), nb = pdr__rdma_pack_ep(&ib, wb, sizeof(wb));
    CHECK(na > 0 && nb > 0);
    CHECK(pdr__rdma_unpack_ep(wa, na, &ra) == 0 && pdr__rdma_unpack_ep(wb, nb, &rb) == 0);
    CHECK(pdr__rdma_ep_connect(l->a, &rb) == 0);
    CHECK(pdr__rdma_ep_connect(l->b, &ra) == 0);
    CHECK(pdr__rdma_ep_connect(l->a, &rb) == PDR_EINVAL); /* already connected */

    const size_t total = l->total = (5u << 20) + 12345;
    uint8_t *src = l->src = malloc(total), *dst = l->dst = calloc(1, total);
    CHECK(src != NULL && dst != NULL);
    if (src == NULL || dst == NULL)
        exit(1);
    for (size_t i = 0; i < total; i++)
        src[i] = (uint8_t)(i * 131 + 7);
    uint32_t slk, srk, dlk, drk;
    CHECK(pdr__rdma_reg(l->ctx, src, total, 0, &l->ms, &slk, &srk) == 0);
    CHECK(pdr__rdma_reg(l->ctx, dst, total, 0, &l->md, &dlk, &drk) == 0);

    /* Source cut in 3 odd pieces, destination in 2 others; the remote side travels packed. */
    struct pdr_rdma_seg local[3] = {
        {(uintptr_t)src, 1000003, slk},
        {(uintptr_t)src + 1000003, 3u << 20, slk},
        {(uintptr_t)src + 1000003 + (3u << 20), total - 1000003 - (3u << 20), slk}};
    memcpy(l->local, local, sizeof(local));
    struct pdr_rdma_seg remote_segs[2] = {{(uintptr_t)dst, 2u << 20, drk},
                                          {(uintptr_t)dst + (2u << 20), total - (2u << 20), drk}};
    uint8_t mem[PDR_RDMA_MEM_FIXED + 2 * PDR_RDMA_MEM_PER_SEG];
    uint64_t rtotal;
    CHECK(pdr__rdma_pack_mem(remote_segs, 2, mem, sizeof(mem)) == sizeof(mem));
    CHECK(pdr__rdma_unpack_mem(mem, sizeof(mem), l->remote, 2, &l->nrem, &rtotal) == 0 && rtotal == total);
}

static void loop_close(struct loop *l)
{
    pdr__rdma_ep_destroy(l->a);
    pdr__rdma_ep_destroy(l->b);
    pdr__rdma_dereg(l->ms);
    pdr__rdma_dereg(l->md);
    pdr__rdma_close(l->ctx);
    free(l->src);
    free(l->dst);
}

static const uint64_t tag = 0xABCDEF0012345678ull;

/* A room, then a second room over the same endpoints, reversed direction of the data pattern. */
static void test_two_rooms(void)
{
    struct loop l;
    loop_open(&l);
    CHECK(pdr__rdma_write_room(l.a, tag, l.local, 3, l.remote, l.nrem, on_done, NULL) == 0);
    CHECK(wait_for(1) == 0);
    CHECK(done_status == 0);
    CHECK(imm_tag == (uint32_t)tag);
    CHECK(memcmp(l.src, l.dst, l.total) == 0);

    memset(l.dst, 0, l.total);
    for (size_t i = 0; i < l.total; i++)
        l.src[i] = (uint8_t)(255 - i % 251);
    CHECK(pdr__rdma_write_room(l.a, tag + 1, l.local, 3, l.remote, l.nrem, on_done, NULL) == 0);
    CHECK(wait_for(2) == 0);
    CHECK(done_status == 0 && imm_tag == (uint32_t)(tag + 1) && memcmp(l.src, l.dst, l.total) == 0);
    loop_close(&l);
}

/* Size mismatch is refused before anything is posted. */
static void test_size_mismatch(void)
{
    struct loop l;
    loop_open(&l);
    l.local[2].len -= 1;
    CHECK(pdr__rdma_write_room(l.a, tag, l.local, 3, l.remote, l.nrem, on_done, NULL) == PDR_ESIZE);
    loop_close(&l);
}

static const pdr_test_case_t cases[] = {
    {"two_rooms", test_two_rooms, 30},
    {"size_mismatch", test_size_mismatch, 20},
};

int main(int argc, char **argv)
{
    int rc = PDR_TEST_RUN(cases, argc, argv);
    if (rc == 0)
        printf("all checks passed\n");
    return rc;
}
