/*
 * cuda_internal.h — what cuda.c, cuda_mem.c and cuda_pattern.c share: the table of driver entry
 * points, the error translation, the loaded state and the context helpers. Only those three files
 * include it (it includes the toolkit's <cuda.h>); everyone else uses gpu_cuda.h.
 */
#ifndef PDR_TRANSPORT_CUDA_INTERNAL_H
#define PDR_TRANSPORT_CUDA_INTERNAL_H

#include "gpu_cuda.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <pthread.h>
#include <stdint.h>

#include "err.h"

/* Every driver entry point we use: field, base name, API version of the signature (the PFN_*_v<ver>
 * typedef in cudaTypedefs.h), required (1) or optional (0). */
#define PDR_CUDA_FUNCS(XX)                                                                                   \
    XX(Init, cuInit, 2000, 1)                                                                                \
    XX(DriverGetVersion, cuDriverGetVersion, 2020, 1)                                                        \
    XX(GetErrorName, cuGetErrorName, 6000, 1)                                                                \
    XX(DeviceGetCount, cuDeviceGetCount, 2000, 1)                                                            \
    XX(DeviceGet, cuDeviceGet, 2000, 1)                                                                      \
    XX(DeviceGetName, cuDeviceGetName, 2000, 1)                                                              \
    XX(DeviceGetPCIBusId, cuDeviceGetPCIBusId, 4010, 1)                                                      \
    XX(DeviceGetUuid, cuDeviceGetUuid, 11040, 1)                                                             \
    XX(DeviceCanAccessPeer, cuDeviceCanAccessPeer, 4000, 1)                                                  \
    XX(DevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 7000, 1)                                            \
    XX(CtxSetCurrent, cuCtxSetCurrent, 4000, 1)                                                              \
    XX(CtxGetCurrent, cuCtxGetCurrent, 4000, 1)                                                              \
    XX(CtxEnablePeerAccess, cuCtxEnablePeerAccess, 4000, 1)                                                  \
    XX(PointerGetAttribute, cuPointerGetAttribute, 4000, 1)                                                  \
    XX(MemAlloc, cuMemAlloc, 3020, 1)                                                                        \
    XX(MemFree, cuMemFree, 3020, 1)                                                                          \
    XX(MemHostAlloc, cuMemHostAlloc, 2020, 1)                                                                \
    XX(MemFreeHost, cuMemFreeHost, 2000, 1)                                                                  \
    XX(MemsetD8, cuMemsetD8, 3020, 1)                                                                        \
    XX(MemGetAddressRange, cuMemGetAddressRange, 3020, 1)                                                    \
    XX(Memcpy, cuMemcpy, 4000, 1)                                                                            \
    XX(MemcpyAsync, cuMemcpyAsync, 4000, 1)                                                                  \
    XX(MemcpyDtoHAsync, cuMemcpyDtoHAsync, 3020, 1)                                                          \
    XX(MemcpyHtoDAsync, cuMemcpyHtoDAsync, 3020, 1)                                                          \
    XX(MemcpyPeerAsync, cuMemcpyPeerAsync, 4000, 1)                                                          \
    XX(ModuleLoadData, cuModuleLoadData, 2000, 1)                                                            \
    XX(ModuleGetFunction, cuModuleGetFunction, 2000, 1)                                                      \
    XX(LaunchKernel, cuLaunchKernel, 4000, 1)                                                                \
    XX(StreamCreate, cuStreamCreate, 2000, 1)                                                                \
    XX(StreamDestroy, cuStreamDestroy, 4000, 1)                                                              \
    XX(StreamSynchronize, cuStreamSynchronize, 2000, 1)                                                      \
    XX(EventCreate, cuEventCreate, 2000, 1)                                                                  \
    XX(EventDestroy, cuEventDestroy, 4000, 1)                                                                \
    XX(EventRecord, cuEventRecord, 2000, 1)                                                                  \
    XX(EventQuery, cuEventQuery, 2000, 1)                                                                    \
    XX(EventSynchronize, cuEventSynchronize, 2000, 1)                                                        \
    XX(IpcGetMemHandle, cuIpcGetMemHandle, 4010, 1)                                                          \
    XX(IpcOpenMemHandle, cuIpcOpenMemHandle, 11000, 1)                                                       \
    XX(IpcCloseMemHandle, cuIpcCloseMemHandle, 4010, 1)                                                      \
    XX(MemGetHandleForAddressRange, cuMemGetHandleForAddressRange, 11070, 0)                                 \
    XX(MemCreate, cuMemCreate, 10020, 0)                                                                     \
    XX(MemRelease, cuMemRelease, 10020, 0)                                                                   \
    XX(MemRetainAllocationHandle, cuMemRetainAllocationHandle, 11000, 0)                                     \
    XX(MemExportToShareableHandle, cuMemExportToShareableHandle, 10020, 0)                                   \
    XX(MemImportFromShareableHandle, cuMemImportFromShareableHandle, 10020, 0)                               \
    XX(MemAddressReserve, cuMemAddressReserve, 10020, 0)                                                     \
    XX(MemAddressFree, cuMemAddressFree, 10020, 0)                                                           \
    XX(MemMap, cuMemMap, 10020, 0)                                                                           \
    XX(MemUnmap, cuMemUnmap, 10020, 0)                                                                       \
    XX(MemSetAccess, cuMemSetAccess, 10020, 0)                                                               \
    XX(MemGetAllocationGranularity, cuMemGetAllocationGranularity, 10020, 0)

struct pdr__cuda_fns {
#define PDR__CU_FIELD(field, name, ver, req) PFN_##name##_v##ver field;
    PDR_CUDA_FUNCS(PDR__CU_FIELD)
#undef PDR__CU_FIELD
};
extern struct pdr__cuda_fns pdr__cu;

/* Devices beyond this are ignored (a 64-GPU host does not exist yet; the matrix stays small). */
#define PDR_CUDA_MAX_DEVICES 64

/* The device count (set once by the loader) and the retained primary contexts, under pdr__cuda_ctx_lock. */
extern int pdr__cuda_ndevices;
extern pthread_mutex_t pdr__cuda_ctx_lock;
extern CUcontext pdr__cuda_primary[PDR_CUDA_MAX_DEVICES];

/* The one place a CUresult becomes a PDR_E* code (cuda.c). */
int pdr__cuda_tr(CUresult r);
/* An error of ours (no CUresult): it still shows in pdr__cuda_last_error(). */
int pdr__cuda_fail(int code, const char *why);
int pdr__cuda_has_context(void);
/* The retained primary context of a device, retaining it when `retain` (else NULL if not yet retained). */
int pdr__cuda_primary_ctx(int ordinal, int retain, CUcontext *out);
/* Borrows an already retained primary context when none is current (cuda.c says how). */
void pdr__cuda_borrow_begin(const void *p, int *borrowed);
void pdr__cuda_borrow_end(int borrowed);

static inline CUdeviceptr pdr__cuda_dptr(const void *p)
{
    return (CUdeviceptr)(uintptr_t)p;
}

#define PDR__CUDA_READY()                                                                                    \
    do {                                                                                                     \
        if (pdr__cuda_init() != 0)                                                                           \
            return PDR_ENOTSUP;                                                                              \
    } while (0)

#define PDR__CUDA_BOUND()                                                                                    \
    do {                                                                                                     \
        PDR__CUDA_READY();                                                                                   \
        if (!pdr__cuda_has_context())                                                                        \
            return pdr__cuda_fail(PDR_EINVAL, "no current context (call pdr__cuda_bind first)");             \
    } while (0)

#endif
