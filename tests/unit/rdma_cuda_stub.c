/*
 * Test-only stand-in for transport/cuda.c's GPUDirect entry point, for test_rdma_runtime, which runs
 * rdma.c against a fake libibverbs and host memory only. Answers PDR_ENOTSUP as the real wrapper does
 * without a driver. Any thread.
 */
#include <stddef.h>

#include "gpu_cuda.h"
#include "err.h"

int pdr__cuda_dmabuf_fd(const void *p, size_t len, int *fd)
{
    (void)p;
    (void)len;
    if (fd != NULL)
        *fd = -1;
    return PDR_ENOTSUP;
}
