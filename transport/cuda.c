/*
 * cuda.c — the CUDA driver API, loaded at run time (see gpu_cuda.h for the contract).
 *
 * Owns: the dlopen handle of libcuda.so.1, the table of driver entry points (resolved once through
 * cuGetProcAddress by base name and API version, so no _v2/_v3 spelling leaks into this file), the
 * device count, and the primary contexts this process retained (one per device, on first bind).
 *
 * Invariants:
 * - Nothing here creates a context except pdr__cuda_bind(ordinal), which retains the primary context of
 *   exactly that device. Helpers that need *some* current context (frees, memset, address ranges) borrow
 *   the primary context of the pointer's device only if it is already retained, never retaining a new
 *   one, and restore the caller's (empty) current context afterwards.
 * - Primary contexts stay retained until the process exits (the driver tears them down then); no atexit
 *   release, so an I/O thread still running during exit never finds its context gone.
 * - Without a usable driver (no libcuda.so.1, the toolkit's stub library, no device, too old a driver)
 *   every function answers PDR_ENOTSUP and nothing is printed; pdr__cuda_init_error() says why.
 * - CUresult never leaves this file: it is translated to PDR_E* here, and the name of the last failing
 *   one is kept per thread for pdr__cuda_last_error().
 *
 * Threads: any. Loading runs once under pthread_once; the context cache and the peer-access matrix are
 * guarded by one mutex, taken only on first use of a device or device pair.
 */
#include "gpu_cuda.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

static struct {
#define PDR__CU_FIELD(field, name, ver, req) PFN_##name##_v##ver field;
    PDR_CUDA_FUNCS(PDR__CU_FIELD)
#undef PDR__CU_FIELD
} cu;

/* Devices beyond this are ignored (a 64-GPU host does not exist yet; the matrix stays small). */
#define PDR_CUDA_MAX_DEVICES 64

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int load_rc = PDR_ENOTSUP;
static int driver_version;
static int ndevices;
static char load_error[160] = "not loaded";
static void *libcuda;

static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static CUcontext primary[PDR_CUDA_MAX_DEVICES]; /* retained, NULL until first bind */
static unsigned char peer_tried[PDR_CUDA_MAX_DEVICES][PDR_CUDA_MAX_DEVICES]; /* [a][b], a < b */

static _Thread_local char last_error[64];

/* Names for results the driver cannot name itself (the stub answers cuGetErrorName with an error). */
static const char *fallback_name(CUresult r)
{
    switch (r) {
    case CUDA_ERROR_STUB_LIBRARY:
        return "CUDA_ERROR_STUB_LIBRARY";
    case CUDA_ERROR_NO_DEVICE:
        return "CUDA_ERROR_NO_DEVICE";
    case CUDA_ERROR_NOT_FOUND:
        return "CUDA_ERROR_NOT_FOUND";
    default:
        return NULL;
    }
}

static void remember(CUresult r)
{
    const char *name = NULL;
    if (cu.GetErrorName == NULL || cu.GetErrorName(r, &name) != CUDA_SUCCESS || name == NULL)
        name = fallback_name(r);
    if (name != NULL)
        snprintf(last_error, sizeof(last_error), "%s", name);
    else
        snprintf(last_error, sizeof(last_error), "CUresult %d", (int)r);
}

/* The one place a CUresult becomes a PDR_E* code. */
static int tr(CUresult r)
{
    if (r == CUDA_SUCCESS)
        return 0;
    remember(r);
    switch (r) {
    case CUDA_ERROR_OUT_OF_MEMORY:
        return PDR_ENOMEM;
    case CUDA_ERROR_NOT_READY:
        return PDR_EAGAIN;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_INVALID_HANDLE:
        return PDR_EINVAL;
    case CUDA_ERROR_STUB_LIBRARY:
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_NOT_SUPPORTED:
        return PDR_ENOTSUP;
    default:
        return PDR_EIO;
    }
}

/* An error of ours (no CUresult): it still shows in pdr__cuda_last_error(). */
static int fail(int code, const char *why)
{
    snprintf(last_error, sizeof(last_error), "%s", why);
    return code;
}

typedef CUresult (*getproc_v2_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef CUresult (*getproc_v1_fn)(const char *, void **, int, cuuint64_t);

static void load(void)
{
    libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (libcuda == NULL) {
        const char *e = dlerror();
        snprintf(load_error, sizeof(load_error), "no CUDA driver (%s)", e != NULL ? e : "dlopen failed");
        return;
    }
    getproc_v2_fn gp2 = NULL;
    getproc_v1_fn gp1 = NULL;
    *(void **)&gp2 = dlsym(libcuda, "cuGetProcAddress_v2");
    if (gp2 == NULL)
        *(void **)&gp1 = dlsym(libcuda, "cuGetProcAddress");
    if (gp2 == NULL && gp1 == NULL) {
        snprintf(load_error, sizeof(load_error),
                 "libcuda.so.1 has no cuGetProcAddress (driver older than 11.3)");
        return;
    }

#define PDR__CU_RESOLVE(field, name, ver, req)                                                               \
    do {                                                                                                     \
        void *fn = NULL;                                                                                     \
        CUresult r;                                                                                          \
        if (gp2 != NULL) {                                                                                   \
            CUdriverProcAddressQueryResult q = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;                         \
            r = gp2(#name, &fn, ver, CU_GET_PROC_ADDRESS_DEFAULT, &q);                                       \
            if (r == CUDA_SUCCESS && q != CU_GET_PROC_ADDRESS_SUCCESS)                                       \
                fn = NULL;                                                                                   \
        } else {                                                                                             \
            r = gp1(#name, &fn, ver, CU_GET_PROC_ADDRESS_DEFAULT);                                           \
        }                                                                                                    \
        if (r != CUDA_SUCCESS)                                                                               \
            fn = NULL;                                                                                       \
        if (r == CUDA_ERROR_STUB_LIBRARY) {                                                                  \
            snprintf(load_error, sizeof(load_error),                                                         \
                     "libcuda.so.1 is the toolkit's stub library (no driver)");                              \
            remember(r);                                                                                     \
            return;                                                                                          \
        }                                                                                                    \
        if (fn == NULL && (req)) {                                                                           \
            snprintf(load_error, sizeof(load_error), "CUDA driver lacks %s (API %d)", #name, ver);           \
            remember(r != CUDA_SUCCESS ? r : CUDA_ERROR_NOT_FOUND);                                          \
            return;                                                                                          \
        }                                                                                                    \
        *(void **)&cu.field = fn;                                                                            \
    } while (0);
    PDR_CUDA_FUNCS(PDR__CU_RESOLVE)
#undef PDR__CU_RESOLVE

    CUresult r = cu.Init(0);
    if (r != CUDA_SUCCESS) {
        remember(r);
        snprintf(load_error, sizeof(load_error), "cuInit failed: %s", last_error);
        return;
    }
    int n = 0;
    r = cu.DeviceGetCount(&n);
    if (r != CUDA_SUCCESS || n <= 0) {
        if (r != CUDA_SUCCESS)
            remember(r);
        snprintf(load_error, sizeof(load_error), "no CUDA device");
        return;
    }
    (void)cu.DriverGetVersion(&driver_version);
    ndevices = n > PDR_CUDA_MAX_DEVICES ? PDR_CUDA_MAX_DEVICES : n;
    load_error[0] = '\0';
    load_rc = 0;
}

int pdr__cuda_init(void)
{
    pthread_once(&load_once, load);
    return load_rc;
}

const char *pdr__cuda_init_error(void)
{
    pdr__cuda_init();
    return load_error;
}

int pdr__cuda_driver_version(void)
{
    return pdr__cuda_init() == 0 ? driver_version : 0;
}

int pdr__cuda_device_count(void)
{
    int rc = pdr__cuda_init();
    return rc != 0 ? rc : ndevices;
}

const char *pdr__cuda_last_error(void)
{
    return last_error;
}

#define PDR__CUDA_READY()                                                                                    \
    do {                                                                                                     \
        if (pdr__cuda_init() != 0)                                                                           \
            return PDR_ENOTSUP;                                                                              \
    } while (0)

static int has_context(void)
{
    CUcontext c = NULL;
    return cu.CtxGetCurrent(&c) == CUDA_SUCCESS && c != NULL;
}

#define PDR__CUDA_BOUND()                                                                                    \
    do {                                                                                                     \
        PDR__CUDA_READY();                                                                                   \
        if (!has_context())                                                                                  \
            return fail(PDR_EINVAL, "no current context (call pdr__cuda_bind first)");                       \
    } while (0)

int pdr__cuda_ptr_info(const void *p, int *is_device, int *ordinal)
{
    PDR__CUDA_READY();
    if (is_device == NULL)
        return PDR_EINVAL;
    *is_device = 0;
    if (ordinal != NULL)
        *ordinal = -1;
    if (p == NULL)
        return 0;
    unsigned int type = 0;
    CUresult r = cu.PointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)p);
    if (r == CUDA_ERROR_INVALID_VALUE)
        return 0; /* the driver does not know it: plain host memory */
    if (r != CUDA_SUCCESS)
        return tr(r);
    if (type != CU_MEMORYTYPE_DEVICE && type != CU_MEMORYTYPE_UNIFIED)
        return 0; /* pinned or registered host memory */
    int dev = -1;
    r = cu.PointerGetAttribute(&dev, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (CUdeviceptr)(uintptr_t)p);
    if (r != CUDA_SUCCESS)
        return tr(r);
    *is_device = 1;
    if (ordinal != NULL)
        *ordinal = dev;
    return 0;
}

/* The retained primary context of a device, retaining it when `retain` (else NULL if not yet retained). */
static int primary_ctx(int ordinal, int retain, CUcontext *out)
{
    *out = NULL;
    if (ordinal < 0 || ordinal >= ndevices)
        return fail(PDR_EINVAL, "device ordinal out of range");
    int rc = 0;
    pthread_mutex_lock(&ctx_lock);
    if (primary[ordinal] == NULL && retain) {
        CUdevice dev;
        CUcontext c = NULL;
        rc = tr(cu.DeviceGet(&dev, ordinal));
        if (rc == 0)
            rc = tr(cu.DevicePrimaryCtxRetain(&c, dev));
        if (rc == 0)
            primary[ordinal] = c;
    }
    *out = primary[ordinal];
    pthread_mutex_unlock(&ctx_lock);
    return rc;
}

int pdr__cuda_bind(int ordinal)
{
    PDR__CUDA_READY();
    CUcontext c;
    int rc = primary_ctx(ordinal, 1, &c);
    if (rc != 0)
        return rc;
    return tr(cu.CtxSetCurrent(c));
}

/* Some driver calls need a current context of any kind. With none bound, borrows the already retained
 * primary context of the device owning p (or of any retained device when p is host memory); *borrowed
 * tells the caller to give it back with end_borrow(). Never retains a context. */
static void begin_borrow(const void *p, int *borrowed)
{
    *borrowed = 0;
    if (has_context())
        return;
    int is_dev = 0, ord = -1;
    CUcontext c = NULL;
    if (p != NULL && pdr__cuda_ptr_info(p, &is_dev, &ord) == 0 && is_dev && ord >= 0 && ord < ndevices)
        primary_ctx(ord, 0, &c);
    pthread_mutex_lock(&ctx_lock);
    for (int i = 0; c == NULL && i < ndevices; i++)
        c = primary[i];
    pthread_mutex_unlock(&ctx_lock);
    if (c != NULL && cu.CtxSetCurrent(c) == CUDA_SUCCESS)
        *borrowed = 1;
}

static void end_borrow(int borrowed)
{
    if (borrowed)
        (void)cu.CtxSetCurrent(NULL);
}

int pdr__cuda_host_alloc(size_t len, void **out)
{
    PDR__CUDA_BOUND();
    if (out == NULL || len == 0)
        return PDR_EINVAL;
    *out = NULL;
    return tr(cu.MemHostAlloc(out, len, CU_MEMHOSTALLOC_PORTABLE));
}

void pdr__cuda_host_free(void *p)
{
    if (p == NULL || pdr__cuda_init() != 0)
        return;
    int borrowed;
    begin_borrow(NULL, &borrowed);
    (void)tr(cu.MemFreeHost(p));
    end_borrow(borrowed);
}

int pdr__cuda_stream_create(void **out)
{
    PDR__CUDA_BOUND();
    if (out == NULL)
        return PDR_EINVAL;
    CUstream s = NULL;
    int rc = tr(cu.StreamCreate(&s, CU_STREAM_NON_BLOCKING));
    *out = rc == 0 ? (void *)s : NULL;
    return rc;
}

void pdr__cuda_stream_destroy(void *stream)
{
    if (stream != NULL && pdr__cuda_init() == 0)
        (void)tr(cu.StreamDestroy((CUstream)stream));
}

int pdr__cuda_event_create(void **out)
{
    PDR__CUDA_BOUND();
    if (out == NULL)
        return PDR_EINVAL;
    CUevent e = NULL;
    int rc = tr(cu.EventCreate(&e, CU_EVENT_DISABLE_TIMING));
    *out = rc == 0 ? (void *)e : NULL;
    return rc;
}

void pdr__cuda_event_destroy(void *ev)
{
    if (ev != NULL && pdr__cuda_init() == 0)
        (void)tr(cu.EventDestroy((CUevent)ev));
}

int pdr__cuda_event_record(void *ev, void *stream)
{
    PDR__CUDA_READY();
    return ev == NULL ? PDR_EINVAL : tr(cu.EventRecord((CUevent)ev, (CUstream)stream));
}

int pdr__cuda_event_query(void *ev)
{
    PDR__CUDA_READY();
    if (ev == NULL)
        return PDR_EINVAL;
    CUresult r = cu.EventQuery((CUevent)ev);
    return r == CUDA_ERROR_NOT_READY ? PDR_EAGAIN : tr(r); /* pending is not a failure */
}

int pdr__cuda_event_sync(void *ev)
{
    PDR__CUDA_READY();
    return ev == NULL ? PDR_EINVAL : tr(cu.EventSynchronize((CUevent)ev));
}

int pdr__cuda_stream_sync(void *stream)
{
    PDR__CUDA_READY();
    return tr(cu.StreamSynchronize((CUstream)stream));
}

static CUdeviceptr dptr(const void *p)
{
    return (CUdeviceptr)(uintptr_t)p;
}

int pdr__cuda_copy_d2h_async(void *dst_host, const void *src_dev, size_t len, void *stream)
{
    PDR__CUDA_READY();
    if (len == 0)
        return 0;
    return tr(cu.MemcpyDtoHAsync(dst_host, dptr(src_dev), len, (CUstream)stream));
}

int pdr__cuda_copy_h2d_async(void *dst_dev, const void *src_host, size_t len, void *stream)
{
    PDR__CUDA_READY();
    if (len == 0)
        return 0;
    return tr(cu.MemcpyHtoDAsync(dptr(dst_dev), src_host, len, (CUstream)stream));
}

/* Enables peer access both ways between two devices, once per pair, and only when both primary contexts
 * are already retained here (retaining one would create a context on a device this process does not
 * use). Failures are ignored: the copy still works through unified addressing, just slower. */
static void enable_peer_once(int a, int b)
{
    if (a == b || a < 0 || b < 0 || a >= ndevices || b >= ndevices)
        return;
    int lo = a < b ? a : b, hi = a < b ? b : a;
    pthread_mutex_lock(&ctx_lock);
    CUcontext clo = primary[lo], chi = primary[hi];
    if (peer_tried[lo][hi] || clo == NULL || chi == NULL) {
        pthread_mutex_unlock(&ctx_lock);
        return;
    }
    peer_tried[lo][hi] = 1;
    CUcontext saved = NULL;
    (void)cu.CtxGetCurrent(&saved);
    int can = 0;
    CUdevice dlo, dhi;
    if (cu.DeviceGet(&dlo, lo) == CUDA_SUCCESS && cu.DeviceGet(&dhi, hi) == CUDA_SUCCESS &&
        cu.DeviceCanAccessPeer(&can, dlo, dhi) == CUDA_SUCCESS && can) {
        /* CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED and _NOT_SUPPORTED are both fine here. */
        if (cu.CtxSetCurrent(clo) == CUDA_SUCCESS)
            (void)cu.CtxEnablePeerAccess(chi, 0);
        if (cu.CtxSetCurrent(chi) == CUDA_SUCCESS)
            (void)cu.CtxEnablePeerAccess(clo, 0);
        (void)cu.CtxSetCurrent(saved);
    }
    pthread_mutex_unlock(&ctx_lock);
}

int pdr__cuda_copy_d2d_async(void *dst_dev, const void *src_dev, size_t len, void *stream)
{
    PDR__CUDA_READY();
    if (len == 0)
        return 0;
    int dd = 0, sd = 0, dord = -1, sord = -1;
    if (pdr__cuda_ptr_info(dst_dev, &dd, &dord) == 0 && pdr__cuda_ptr_info(src_dev, &sd, &sord) == 0 && dd &&
        sd && dord != sord)
        enable_peer_once(dord, sord);
    return tr(cu.MemcpyAsync(dptr(dst_dev), dptr(src_dev), len, (CUstream)stream));
}

int pdr__cuda_copy_peer_async(void *dst_dev, int dst_ordinal, const void *src_dev, int src_ordinal,
                              size_t len, void *stream)
{
    PDR__CUDA_READY();
    CUcontext dc, sc;
    if (primary_ctx(dst_ordinal, 0, &dc) != 0 || primary_ctx(src_ordinal, 0, &sc) != 0 || dc == NULL ||
        sc == NULL)
        return fail(PDR_EINVAL, "both devices must be bound once before a peer copy");
    if (len == 0)
        return 0;
    enable_peer_once(dst_ordinal, src_ordinal);
    return tr(cu.MemcpyPeerAsync(dptr(dst_dev), dc, dptr(src_dev), sc, len, (CUstream)stream));
}

int pdr__cuda_ipc_export(const void *p, unsigned char handle[PDR_CUDA_IPC_HANDLE_BYTES], uint64_t *offset)
{
    PDR__CUDA_READY();
    if (p == NULL || handle == NULL || offset == NULL)
        return PDR_EINVAL;
    _Static_assert(sizeof(CUipcMemHandle) == PDR_CUDA_IPC_HANDLE_BYTES, "CUipcMemHandle is 64 bytes");
    int borrowed;
    begin_borrow(p, &borrowed);
    CUdeviceptr base = 0;
    size_t size = 0;
    CUipcMemHandle h;
    int rc = tr(cu.MemGetAddressRange(&base, &size, dptr(p)));
    if (rc == 0)
        rc = tr(cu.IpcGetMemHandle(&h, base));
    end_borrow(borrowed);
    if (rc != 0)
        return rc;
    memcpy(handle, &h, sizeof(h));
    *offset = (uint64_t)(dptr(p) - base);
    return 0;
}

int pdr__cuda_ipc_open(const unsigned char handle[PDR_CUDA_IPC_HANDLE_BYTES], void **base)
{
    PDR__CUDA_BOUND();
    if (handle == NULL || base == NULL)
        return PDR_EINVAL;
    CUipcMemHandle h;
    memcpy(&h, handle, sizeof(h));
    CUdeviceptr d = 0;
    int rc = tr(cu.IpcOpenMemHandle(&d, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    *base = rc == 0 ? (void *)(uintptr_t)d : NULL;
    return rc;
}

int pdr__cuda_ipc_close(void *base)
{
    PDR__CUDA_READY();
    if (base == NULL)
        return PDR_EINVAL;
    int borrowed;
    begin_borrow(base, &borrowed);
    int rc = tr(cu.IpcCloseMemHandle(dptr(base)));
    end_borrow(borrowed);
    return rc;
}

static int have_vmm(void)
{
    return cu.MemRetainAllocationHandle != NULL && cu.MemRelease != NULL &&
           cu.MemExportToShareableHandle != NULL && cu.MemImportFromShareableHandle != NULL &&
           cu.MemAddressReserve != NULL && cu.MemAddressFree != NULL && cu.MemMap != NULL &&
           cu.MemUnmap != NULL && cu.MemSetAccess != NULL;
}

int pdr__cuda_mem_range(const void *p, struct pdr_cuda_range *out)
{
    PDR__CUDA_READY();
    if (p == NULL || out == NULL)
        return PDR_EINVAL;
    memset(out, 0, sizeof(*out));
    int borrowed;
    begin_borrow(p, &borrowed);
    CUmemGenericAllocationHandle h = 0;
    int rc = 0, legacy = 0;
    if (cu.PointerGetAttribute(&legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, dptr(p)) !=
        CUDA_SUCCESS)
        legacy = 0;
    if (!legacy && cu.MemRetainAllocationHandle != NULL && cu.MemRelease != NULL &&
        cu.MemRetainAllocationHandle(&h, (void *)(uintptr_t)p) == CUDA_SUCCESS) {
        /* A VMM mapping: its own start and size (one cuMemMap of one physical allocation). */
        (void)cu.MemRelease(h);
        CUdeviceptr base = 0;
        size_t size = 0;
        unsigned long long id = 0;
        rc = tr(cu.PointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, dptr(p)));
        if (rc == 0)
            rc = tr(cu.PointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, dptr(p)));
        if (rc == 0)
            rc = tr(cu.PointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID, dptr(p)));
        out->base = (void *)(uintptr_t)base;
        out->size = size;
        out->vmm = 1;
        out->block_id = id;
    } else {
        CUdeviceptr base = 0;
        size_t size = 0;
        rc = tr(cu.MemGetAddressRange(&base, &size, dptr(p)));
        out->base = (void *)(uintptr_t)base;
        out->size = size;
    }
    end_borrow(borrowed);
    if (rc == 0 && (dptr(p) < dptr(out->base) || dptr(p) - dptr(out->base) >= out->size))
        rc = fail(PDR_EIO, "pointer outside the range the driver reported");
    return rc;
}

int pdr__cuda_vmm_export(const void *base, int *fd)
{
    PDR__CUDA_READY();
    if (base == NULL || fd == NULL)
        return PDR_EINVAL;
    *fd = -1;
    if (!have_vmm())
        return fail(PDR_ENOTSUP, "driver lacks the VMM API (needs 11.0)");
    int borrowed;
    begin_borrow(base, &borrowed);
    CUmemGenericAllocationHandle h = 0;
    int out = -1;
    int rc = tr(cu.MemRetainAllocationHandle(&h, (void *)(uintptr_t)base));
    if (rc == 0) {
        /* Fails (CUDA_ERROR_INVALID_VALUE / NOT_SUPPORTED) unless the allocation was created with
         * CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR among its requested handle types. */
        rc = tr(cu.MemExportToShareableHandle(&out, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        (void)cu.MemRelease(h);
    }
    end_borrow(borrowed);
    *fd = rc == 0 ? out : -1;
    return rc;
}

/* Maps allocation h (size bytes) at a new address with read/write access for device ordinal, and
 * releases h (the mapping holds the memory from then on; on failure nothing is left). */
static int map_allocation(CUmemGenericAllocationHandle h, size_t size, int ordinal, void **base)
{
    CUdeviceptr va = 0;
    int rc = tr(cu.MemAddressReserve(&va, size, 0, 0, 0));
    int mapped = 0;
    if (rc == 0) {
        rc = tr(cu.MemMap(va, size, 0, h, 0));
        mapped = rc == 0;
    }
    if (rc == 0) {
        CUmemAccessDesc acc;
        memset(&acc, 0, sizeof(acc));
        acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        acc.location.id = ordinal;
        acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        rc = tr(cu.MemSetAccess(va, size, &acc, 1));
    }
    (void)cu.MemRelease(h);
    if (rc != 0) {
        if (mapped)
            (void)cu.MemUnmap(va, size);
        if (va != 0)
            (void)cu.MemAddressFree(va, size);
        return rc;
    }
    *base = (void *)(uintptr_t)va;
    return 0;
}

int pdr__cuda_vmm_map(int fd, uint64_t size, int ordinal, void **base)
{
    PDR__CUDA_BOUND();
    if (fd < 0 || size == 0 || base == NULL || ordinal < 0 || ordinal >= ndevices)
        return PDR_EINVAL;
    *base = NULL;
    if (!have_vmm())
        return fail(PDR_ENOTSUP, "driver lacks the VMM API (needs 11.0)");
    CUmemGenericAllocationHandle h = 0;
    int rc = tr(
        cu.MemImportFromShareableHandle(&h, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    if (rc != 0)
        return rc;
    return map_allocation(h, (size_t)size, ordinal, base);
}

int pdr__cuda_vmm_unmap(void *base, uint64_t size)
{
    PDR__CUDA_READY();
    if (base == NULL || size == 0 || !have_vmm())
        return PDR_EINVAL;
    int borrowed;
    begin_borrow(NULL, &borrowed);
    int rc = tr(cu.MemUnmap(dptr(base), (size_t)size));
    int rc2 = tr(cu.MemAddressFree(dptr(base), (size_t)size));
    end_borrow(borrowed);
    return rc != 0 ? rc : rc2;
}

int pdr__cuda_vmm_alloc(int ordinal, size_t len, void **out, size_t *alloc_len)
{
    PDR__CUDA_BOUND();
    if (out == NULL || alloc_len == NULL || len == 0 || ordinal < 0 || ordinal >= ndevices)
        return PDR_EINVAL;
    *out = NULL;
    *alloc_len = 0;
    if (!have_vmm() || cu.MemCreate == NULL || cu.MemGetAllocationGranularity == NULL)
        return fail(PDR_ENOTSUP, "driver lacks the VMM API (needs 11.0)");
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = ordinal;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t gran = 0;
    int rc = tr(cu.MemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    if (rc != 0)
        return rc;
    size_t size = (len + gran - 1) / gran * gran;
    CUmemGenericAllocationHandle h = 0;
    rc = tr(cu.MemCreate(&h, size, &prop, 0));
    if (rc == 0)
        rc = map_allocation(h, size, ordinal, out);
    if (rc == 0)
        *alloc_len = size;
    return rc;
}

void pdr__cuda_vmm_free(void *p, size_t alloc_len)
{
    if (p != NULL && alloc_len > 0 && pdr__cuda_init() == 0)
        (void)pdr__cuda_vmm_unmap(p, alloc_len);
}

int pdr__cuda_dmabuf_fd(const void *p, size_t len, int *fd)
{
    PDR__CUDA_READY();
    if (cu.MemGetHandleForAddressRange == NULL)
        return fail(PDR_ENOTSUP, "driver lacks cuMemGetHandleForAddressRange (needs 11.7)");
    long page = sysconf(_SC_PAGESIZE);
    if (p == NULL || fd == NULL || len == 0 || page <= 0 || (uintptr_t)p % (uintptr_t)page != 0 ||
        len % (size_t)page != 0)
        return fail(PDR_EINVAL, "dma-buf ranges must be page-aligned");
    int borrowed;
    begin_borrow(p, &borrowed);
    int out = -1;
    int rc = tr(cu.MemGetHandleForAddressRange(&out, dptr(p), len, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0));
    end_borrow(borrowed);
    *fd = rc == 0 ? out : -1;
    return rc;
}

int pdr__cuda_pci_bus_id(int ordinal, char *buf, size_t len)
{
    PDR__CUDA_READY();
    if (buf == NULL || len == 0 || ordinal < 0 || ordinal >= ndevices)
        return PDR_EINVAL;
    CUdevice dev;
    char raw[64] = {0};
    int rc = tr(cu.DeviceGet(&dev, ordinal));
    if (rc == 0)
        rc = tr(cu.DeviceGetPCIBusId(raw, (int)sizeof(raw) - 1, dev));
    if (rc != 0)
        return rc;
    /* The driver says "00000000:18:00.0"; sysfs (and so the NIC side) says "0000:18:00.0". */
    char *end;
    unsigned long dom = strtoul(raw, &end, 16), bus = 0, slot = 0, fn = 0;
    int ok = *end == ':';
    if (ok) {
        bus = strtoul(end + 1, &end, 16);
        ok = *end == ':';
    }
    if (ok) {
        slot = strtoul(end + 1, &end, 16);
        ok = *end == '.';
    }
    if (ok) {
        fn = strtoul(end + 1, &end, 16);
        ok = *end == '\0';
    }
    int n =
        ok ? snprintf(buf, len, "%04lx:%02lx:%02lx.%lx", dom, bus, slot, fn) : snprintf(buf, len, "%s", raw);
    return n < 0 || (size_t)n >= len ? PDR_ETOOBIG : 0;
}

int pdr__cuda_uuid(int ordinal, unsigned char uuid[16])
{
    PDR__CUDA_READY();
    if (uuid == NULL || ordinal < 0 || ordinal >= ndevices)
        return PDR_EINVAL;
    CUdevice dev;
    CUuuid u;
    int rc = tr(cu.DeviceGet(&dev, ordinal));
    if (rc == 0)
        rc = tr(cu.DeviceGetUuid(&u, dev));
    if (rc == 0)
        memcpy(uuid, u.bytes, 16);
    return rc;
}

int pdr__cuda_device_name(int ordinal, char *buf, size_t len)
{
    PDR__CUDA_READY();
    if (buf == NULL || len == 0 || len > 1024 || ordinal < 0 || ordinal >= ndevices)
        return PDR_EINVAL;
    CUdevice dev;
    int rc = tr(cu.DeviceGet(&dev, ordinal));
    if (rc == 0)
        rc = tr(cu.DeviceGetName(buf, (int)len, dev));
    return rc;
}

int pdr__cuda_mem_alloc(size_t len, void **out)
{
    PDR__CUDA_BOUND();
    if (out == NULL || len == 0)
        return PDR_EINVAL;
    CUdeviceptr d = 0;
    int rc = tr(cu.MemAlloc(&d, len));
    *out = rc == 0 ? (void *)(uintptr_t)d : NULL;
    return rc;
}

void pdr__cuda_mem_free(void *p)
{
    if (p == NULL || pdr__cuda_init() != 0)
        return;
    int borrowed;
    begin_borrow(p, &borrowed);
    (void)tr(cu.MemFree(dptr(p)));
    end_borrow(borrowed);
}

int pdr__cuda_memset(void *dev, unsigned char byte, size_t len)
{
    PDR__CUDA_READY();
    if (dev == NULL)
        return PDR_EINVAL;
    int borrowed;
    begin_borrow(dev, &borrowed);
    /* cuMemsetD8 returns before the device wrote device memory: wait for the legacy stream it ran on. */
    int rc = tr(cu.MemsetD8(dptr(dev), byte, len));
    if (rc == 0)
        rc = tr(cu.StreamSynchronize(CU_STREAM_LEGACY));
    end_borrow(borrowed);
    return rc;
}

int pdr__cuda_copy_sync(void *dst, const void *src, size_t len)
{
    PDR__CUDA_READY();
    if (dst == NULL || src == NULL)
        return PDR_EINVAL;
    if (len == 0)
        return 0;
    int dd = 0, sd = 0, dord = -1, sord = -1;
    if (pdr__cuda_ptr_info(dst, &dd, &dord) == 0 && pdr__cuda_ptr_info(src, &sd, &sord) == 0 && dd && sd &&
        dord != sord)
        enable_peer_once(dord, sord);
    int borrowed;
    begin_borrow(dd ? dst : src, &borrowed);
    /* cuMemcpy from pageable host memory returns once the bytes are staged, and between device buffers
     * once the copy is queued; other streams and processes are not ordered after it. The legacy stream
     * it ran on is synchronized so that the bytes are in place on return, whatever the direction. */
    int rc = tr(cu.Memcpy(dptr(dst), dptr(src), len));
    if (rc == 0)
        rc = tr(cu.StreamSynchronize(CU_STREAM_LEGACY));
    end_borrow(borrowed);
    return rc;
}

/* ---- Tests and benchmarks: the pattern kernels ----
 *
 * Hand-written PTX (no CUDA compiler at build time), JIT-compiled by the driver once per device on first
 * use and kept until exit, like the primary contexts. pdr_pattern_fill writes word w of the buffer as
 * pdr__cuda_pattern_word(seed, word0 + w); pdr_pattern_check counts the words that differ from it and
 * keeps the lowest such index (out[0] += count, out[1] = min(out[1], index)). Both are grid-stride
 * loops over 8-byte words; the check loads four words per thread before comparing them, so that four
 * loads are in flight per thread. Parameters: buffer, word count, seed * 0x9E3779B97F4A7C15 (computed
 * on the host), word0 and, for the check, out.
 */
/* The PTX text keeps one instruction a line. */
/* clang-format off */
#define PDR_PTX_MIX(x, t)                                                                                    \
    "    mul.lo.u64 " x ", " x ", 0xBF58476D1CE4E5B9;\n"                                                     \
    "    xor.b64 " x ", " x ", %seed;\n"                                                                     \
    "    shr.u64 " t ", " x ", 30;\n"                                                                        \
    "    xor.b64 " x ", " x ", " t ";\n"                                                                     \
    "    mul.lo.u64 " x ", " x ", 0xBF58476D1CE4E5B9;\n"                                                     \
    "    shr.u64 " t ", " x ", 27;\n"                                                                        \
    "    xor.b64 " x ", " x ", " t ";\n"                                                                     \
    "    mul.lo.u64 " x ", " x ", 0x94D049BB133111EB;\n"                                                     \
    "    shr.u64 " t ", " x ", 31;\n"                                                                        \
    "    xor.b64 " x ", " x ", " t ";\n"
/* %i = blockIdx.x * blockDim.x + threadIdx.x, %stride = gridDim.x * blockDim.x. */
#define PDR_PTX_INDEX                                                                                        \
    "    cvta.to.global.u64 %base, %base;\n"                                                                 \
    "    mov.u32 %r1, %ctaid.x;\n"                                                                           \
    "    mov.u32 %r2, %ntid.x;\n"                                                                            \
    "    mov.u32 %r3, %tid.x;\n"                                                                             \
    "    mov.u32 %r4, %nctaid.x;\n"                                                                          \
    "    mul.wide.u32 %i, %r1, %r2;\n"                                                                       \
    "    cvt.u64.u32 %t, %r3;\n"                                                                             \
    "    add.u64 %i, %i, %t;\n"                                                                              \
    "    mul.wide.u32 %stride, %r4, %r2;\n"
/* Lane k of a check iteration: load word %jk when it is below %n (%pk). */
#define PDR_PTX_LOAD(k)                                                                                      \
    "    setp.lt.u64 %p" #k ", %j" #k ", %n;\n"                                                              \
    "    shl.b64 %a" #k ", %j" #k ", 3;\n"                                                                   \
    "    add.u64 %a" #k ", %base, %a" #k ";\n"                                                               \
    "    @%p" #k " ld.global.u64 %v" #k ", [%a" #k "];\n"
/* Lane k: %qk = loaded and different from the pattern; count it and keep the lowest index. */
#define PDR_PTX_CMP(k)                                                                                       \
    "    add.u64 %e" #k ", %w0, %j" #k ";\n"                                                                 \
    PDR_PTX_MIX("%e" #k, "%t")                                                                               \
    "    setp.ne.and.u64 %q" #k ", %v" #k ", %e" #k ", %p" #k ";\n"                                          \
    "    selp.u64 %t, 1, 0, %q" #k ";\n"                                                                     \
    "    add.u64 %bad, %bad, %t;\n"                                                                          \
    "    @%q" #k " min.u64 %first, %first, %j" #k ";\n"

static const char pattern_ptx[] =
    ".version 7.0\n"
    ".target sm_52\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry pdr_pattern_fill(.param .u64 p_dst, .param .u64 p_n, .param .u64 p_seed,\n"
    "                                 .param .u64 p_w0)\n"
    "{\n"
    "    .reg .pred %p;\n"
    "    .reg .b32 %r<5>;\n"
    "    .reg .b64 %base, %n, %seed, %w0, %i, %stride, %t, %x, %a;\n"
    "    ld.param.u64 %base, [p_dst];\n"
    "    ld.param.u64 %n, [p_n];\n"
    "    ld.param.u64 %seed, [p_seed];\n"
    "    ld.param.u64 %w0, [p_w0];\n"
    PDR_PTX_INDEX
    "    setp.ge.u64 %p, %i, %n;\n"
    "    @%p bra DONE;\n"
    "LOOP:\n"
    "    add.u64 %x, %w0, %i;\n"
    PDR_PTX_MIX("%x", "%t")
    "    shl.b64 %a, %i, 3;\n"
    "    add.u64 %a, %base, %a;\n"
    "    st.global.u64 [%a], %x;\n"
    "    add.u64 %i, %i, %stride;\n"
    "    setp.lt.u64 %p, %i, %n;\n"
    "    @%p bra LOOP;\n"
    "DONE:\n"
    "    ret;\n"
    "}\n"
    "\n"
    ".visible .entry pdr_pattern_check(.param .u64 p_src, .param .u64 p_n, .param .u64 p_seed,\n"
    "                                  .param .u64 p_w0, .param .u64 p_out)\n"
    "{\n"
    "    .reg .pred %p, %p0, %p1, %p2, %p3, %q0, %q1, %q2, %q3;\n"
    "    .reg .b32 %r<5>;\n"
    "    .reg .b64 %base, %n, %seed, %w0, %i, %stride, %stride4, %t, %bad, %first, %out;\n"
    "    .reg .b64 %j0, %j1, %j2, %j3, %a0, %a1, %a2, %a3, %v0, %v1, %v2, %v3, %e0, %e1, %e2, %e3;\n"
    "    ld.param.u64 %base, [p_src];\n"
    "    ld.param.u64 %n, [p_n];\n"
    "    ld.param.u64 %seed, [p_seed];\n"
    "    ld.param.u64 %w0, [p_w0];\n"
    PDR_PTX_INDEX
    "    shl.b64 %stride4, %stride, 2;\n"
    "    mov.u64 %bad, 0;\n"
    "    mov.u64 %first, -1;\n"
    "    mov.u64 %v0, 0;\n"
    "    mov.u64 %v1, 0;\n"
    "    mov.u64 %v2, 0;\n"
    "    mov.u64 %v3, 0;\n"
    "    setp.ge.u64 %p, %i, %n;\n"
    "    @%p bra REDUCE;\n"
    "LOOP:\n"
    "    mov.u64 %j0, %i;\n"
    "    add.u64 %j1, %j0, %stride;\n"
    "    add.u64 %j2, %j1, %stride;\n"
    "    add.u64 %j3, %j2, %stride;\n"
    PDR_PTX_LOAD(0) PDR_PTX_LOAD(1) PDR_PTX_LOAD(2) PDR_PTX_LOAD(3)
    PDR_PTX_CMP(0) PDR_PTX_CMP(1) PDR_PTX_CMP(2) PDR_PTX_CMP(3)
    "    add.u64 %i, %i, %stride4;\n"
    "    setp.lt.u64 %p, %i, %n;\n"
    "    @%p bra LOOP;\n"
    "REDUCE:\n"
    "    setp.eq.u64 %p, %bad, 0;\n"
    "    @%p bra DONE;\n"
    "    ld.param.u64 %out, [p_out];\n"
    "    cvta.to.global.u64 %out, %out;\n"
    "    red.global.add.u64 [%out], %bad;\n"
    "    red.global.min.u64 [%out+8], %first;\n"
    "DONE:\n"
    "    ret;\n"
    "}\n";
/* clang-format on */

const char *pdr__cuda_pattern_ptx(void)
{
    return pattern_ptx;
}

#define PDR_PATTERN_THREADS 256u
#define PDR_PATTERN_MAX_BLOCKS 2048u /* enough to fill any GPU of today; the loops stride past it */

static pthread_mutex_t pattern_lock = PTHREAD_MUTEX_INITIALIZER;
static CUfunction pattern_fill_fn[PDR_CUDA_MAX_DEVICES], pattern_check_fn[PDR_CUDA_MAX_DEVICES];

/* The kernels in the calling thread's context, which must be a primary context this file retained (the
 * module belongs to it); loaded on first use per device. */
static int pattern_functions(CUfunction *fill_fn, CUfunction *check_fn)
{
    CUcontext cur = NULL;
    if (cu.CtxGetCurrent(&cur) != CUDA_SUCCESS || cur == NULL)
        return fail(PDR_EINVAL, "no current context (call pdr__cuda_bind first)");
    int ord = -1;
    pthread_mutex_lock(&ctx_lock);
    for (int i = 0; i < ndevices && ord < 0; i++)
        if (primary[i] == cur)
            ord = i;
    pthread_mutex_unlock(&ctx_lock);
    if (ord < 0)
        return fail(PDR_EINVAL, "the current context is not a bound device's");
    int rc = 0;
    pthread_mutex_lock(&pattern_lock);
    if (pattern_fill_fn[ord] == NULL) {
        CUmodule mod = NULL;
        CUfunction f = NULL, c = NULL;
        rc = tr(cu.ModuleLoadData(&mod, pattern_ptx));
        if (rc == 0)
            rc = tr(cu.ModuleGetFunction(&f, mod, "pdr_pattern_fill"));
        if (rc == 0)
            rc = tr(cu.ModuleGetFunction(&c, mod, "pdr_pattern_check"));
        if (rc == 0) {
            pattern_fill_fn[ord] = f;
            pattern_check_fn[ord] = c;
        }
    }
    *fill_fn = pattern_fill_fn[ord];
    *check_fn = pattern_check_fn[ord];
    pthread_mutex_unlock(&pattern_lock);
    return rc;
}

static int pattern_args_ok(const void *dev, size_t len)
{
    return dev != NULL && (uintptr_t)dev % 8 == 0 && len % 8 == 0;
}

static unsigned pattern_blocks(uint64_t nwords)
{
    uint64_t b = (nwords + PDR_PATTERN_THREADS - 1) / PDR_PATTERN_THREADS;
    return b > PDR_PATTERN_MAX_BLOCKS ? PDR_PATTERN_MAX_BLOCKS : (unsigned)b;
}

int pdr__cuda_pattern_fill(void *dev, size_t len, uint64_t seed, uint64_t word0, void *stream)
{
    PDR__CUDA_BOUND();
    if (!pattern_args_ok(dev, len))
        return fail(PDR_EINVAL, "pattern buffers are whole 8-byte words");
    if (len == 0)
        return 0;
    CUfunction fill_fn, check_fn;
    int rc = pattern_functions(&fill_fn, &check_fn);
    if (rc != 0)
        return rc;
    unsigned long long p = dptr(dev), n = len / 8, s = seed * PDR_PATTERN_SEED_MUL, w0 = word0;
    void *args[] = {&p, &n, &s, &w0};
    return tr(cu.LaunchKernel(fill_fn, pattern_blocks(n), 1, 1, PDR_PATTERN_THREADS, 1, 1, 0,
                              (CUstream)stream, args, NULL));
}

int pdr__cuda_pattern_check(const void *dev, size_t len, uint64_t seed, uint64_t word0, void *scratch,
                            void *stream, struct pdr_cuda_check *out)
{
    PDR__CUDA_BOUND();
    if (out == NULL || scratch == NULL || (uintptr_t)scratch % 8 != 0 || !pattern_args_ok(dev, len))
        return fail(PDR_EINVAL, "pattern buffers are whole 8-byte words");
    out->mismatches = 0;
    out->first_bad = UINT64_MAX;
    if (len == 0)
        return 0;
    CUfunction fill_fn, check_fn;
    int rc = pattern_functions(&fill_fn, &check_fn);
    if (rc != 0)
        return rc;
    static const uint64_t init[2] = {0, UINT64_MAX};
    uint64_t res[2] = {0, UINT64_MAX};
    unsigned long long p = dptr(dev), n = len / 8, s = seed * PDR_PATTERN_SEED_MUL, w0 = word0,
                       o = dptr(scratch);
    void *args[] = {&p, &n, &s, &w0, &o};
    rc = tr(cu.MemcpyHtoDAsync(dptr(scratch), init, sizeof(init), (CUstream)stream));
    if (rc == 0)
        rc = tr(cu.LaunchKernel(check_fn, pattern_blocks(n), 1, 1, PDR_PATTERN_THREADS, 1, 1, 0,
                                (CUstream)stream, args, NULL));
    if (rc == 0)
        rc = tr(cu.MemcpyDtoHAsync(res, dptr(scratch), sizeof(res), (CUstream)stream));
    if (rc == 0)
        rc = tr(cu.StreamSynchronize((CUstream)stream));
    if (rc == 0) {
        out->mismatches = res[0];
        out->first_bad = res[1];
    }
    return rc;
}
