/*
 * rdma_mr.c — memory registration of the RDMA runtime: host memory with ibv_reg_mr, CUDA memory as a
 * dma-buf (ibv_reg_dmabuf_mr) when the driver exports one, else ibv_reg_mr through nvidia-peermem.
 * Blocking verbs calls (pinning: milliseconds per GiB); ctx->mu guards the context's MR list.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"
#include "gpu_cuda.h"
#include "rdma_internal.h"
#include "util.h"

/* ---------------------------------------------------------------------------------------------------
 * Memory registration
 */

static const int ACCESS = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                          IBV_ACCESS_RELAXED_ORDERING; /* optional: ignored where unsupported */

static struct ibv_mr *reg_cuda(struct pdr_rdma_ctx *ctx, void *addr, size_t len)
{
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t page = pg > 0 ? (uintptr_t)pg : 4096u;
    uintptr_t start = (uintptr_t)addr & ~(page - 1);
    uintptr_t end = ((uintptr_t)addr + len + page - 1) & ~(page - 1);
    int fd = -1;
    int rc = pdr__cuda_dmabuf_fd((const void *)start, (size_t)(end - start), &fd);
    if (rc == 0 && fd >= 0) {
        struct ibv_mr *mr = ibv_reg_dmabuf_mr(ctx->pd, (uint64_t)((uintptr_t)addr - start), len,
                                              (uint64_t)(uintptr_t)addr, fd, ACCESS);
        int e = errno;
        close(fd); /* the MR holds its own reference to the dma-buf */
        if (mr != NULL)
            return mr;
        pdr_warn("rdma: %s: ibv_reg_dmabuf_mr: %s; trying nvidia-peermem", ctx->name, strerror(e));
    } else {
        pdr_debug("rdma: no dma-buf for %p (%s); trying nvidia-peermem", addr, pdr_strerror(rc));
    }
    struct ibv_mr *mr = ibv_reg_mr(ctx->pd, addr, len, ACCESS);
    if (mr == NULL)
        pdr_error("rdma: %s: cannot register GPU memory %p+%zu (dma-buf and nvidia-peermem failed: %s); "
                  "load nvidia-peermem or use a kernel >= 5.12 with dma-buf support",
                  ctx->name, addr, len, strerror(errno));
    return mr;
}

int pdr__rdma_reg(struct pdr_rdma_ctx *ctx, void *addr, size_t len, int is_cuda, struct pdr_rdma_mr **out,
                  uint32_t *lkey, uint32_t *rkey)
{
    if (ctx == NULL || addr == NULL || len == 0 || out == NULL)
        return PDR_EINVAL;
    struct pdr_rdma_mr *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return PDR_ENOMEM;
    if (is_cuda) {
        m->mr = reg_cuda(ctx, addr, len);
    } else {
        m->mr = ibv_reg_mr(ctx->pd, addr, len, ACCESS);
        if (m->mr == NULL)
            pdr_error("rdma: %s: ibv_reg_mr %p+%zu: %s (check `ulimit -l`)", ctx->name, addr, len,
                      strerror(errno));
    }
    if (m->mr == NULL) {
        int e = errno;
        free(m);
        return e == ENOMEM ? PDR_ENOMEM : PDR_EIO;
    }
    m->ctx = ctx;
    pthread_mutex_lock(&ctx->mu);
    pdr_dlink_push(&ctx->mrs, &m->link);
    pthread_mutex_unlock(&ctx->mu);
    if (lkey)
        *lkey = m->mr->lkey;
    if (rkey)
        *rkey = m->mr->rkey;
    *out = m;
    return 0;
}

void pdr__rdma_dereg(struct pdr_rdma_mr *m)
{
    if (m == NULL)
        return;
    struct pdr_rdma_ctx *ctx = m->ctx;
    pthread_mutex_lock(&ctx->mu);
    pdr_dlink_unlink(&m->link);
    pthread_mutex_unlock(&ctx->mu);
    int rc = ibv_dereg_mr(m->mr);
    if (rc != 0)
        pdr_error("rdma: %s: ibv_dereg_mr: %s", ctx->name, strerror(rc));
    free(m);
}
