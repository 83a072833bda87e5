/*
 * cuda.c — the CUDA driver API, loaded at run time (see gpu_cuda.h for the contract): the loader,
 * the error translation and the context binding. Memory, streams and copies are in cuda_mem.c, the
 * pattern kernels in cuda_pattern.c; what the three share is cuda_internal.h.
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
 * - CUresult never leaves these three files: it is translated to PDR_E* here, and the name of the last
 * failing one is kept per thread for pdr__cuda_last_error().
 *
 * Threads: any. Loading runs once under pthread_once; the context cache and the peer-access matrix are
 * guarded by one mutex, taken only on first use of a device or device pair.
 */
#include "cuda_internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"

struct pdr__cuda_fns pdr__cu;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int load_rc = PDR_ENOTSUP;
static int driver_version;
int pdr__cuda_ndevices;
static char load_error[160] = "not loaded";
static void *libcuda;

pthread_mutex_t pdr__cuda_ctx_lock = PTHREAD_MUTEX_INITIALIZER;
CUcontext pdr__cuda_primary[PDR_CUDA_MAX_DEVICES]; /* retained, NULL until first bind */

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
    if (pdr__cu.GetErrorName == NULL || pdr__cu.GetErrorName(r, &name) != CUDA_SUCCESS || name == NULL)
        name = fallback_name(r);
    if (name != NULL)
        snprintf(last_error, sizeof(last_error), "%s", name);
    else
        snprintf(last_error, sizeof(last_error), "CUresult %d", (int)r);
}

/* The one place a CUresult becomes a PDR_E* code. */
int pdr__cuda_tr(CUresult r)
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
int pdr__cuda_fail(int code, const char *why)
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
        *(void **)&pdr__cu.field = fn;                                                                       \
    } while (0);
    PDR_CUDA_FUNCS(PDR__CU_RESOLVE)
#undef PDR__CU_RESOLVE

    CUresult r = pdr__cu.Init(0);
    if (r != CUDA_SUCCESS) {
        remember(r);
        snprintf(load_error, sizeof(load_error), "cuInit failed: %s", last_error);
        return;
    }
    int n = 0;
    r = pdr__cu.DeviceGetCount(&n);
    if (r != CUDA_SUCCESS || n <= 0) {
        if (r != CUDA_SUCCESS)
            remember(r);
        snprintf(load_error, sizeof(load_error), "no CUDA device");
        return;
    }
    (void)pdr__cu.DriverGetVersion(&driver_version);
    pdr__cuda_ndevices = n > PDR_CUDA_MAX_DEVICES ? PDR_CUDA_MAX_DEVICES : n;
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
    return rc != 0 ? rc : pdr__cuda_ndevices;
}

const char *pdr__cuda_last_error(void)
{
    return last_error;
}

int pdr__cuda_has_context(void)
{
    CUcontext c = NULL;
    return pdr__cu.CtxGetCurrent(&c) == CUDA_SUCCESS && c != NULL;
}

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
    CUresult r =
        pdr__cu.PointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)p);
    if (r == CUDA_ERROR_INVALID_VALUE)
        return 0; /* the driver does not know it: plain host memory */
    if (r != CUDA_SUCCESS)
        return pdr__cuda_tr(r);
    if (type != CU_MEMORYTYPE_DEVICE && type != CU_MEMORYTYPE_UNIFIED)
        return 0; /* pinned or registered host memory */
    int dev = -1;
    r = pdr__cu.PointerGetAttribute(&dev, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (CUdeviceptr)(uintptr_t)p);
    if (r != CUDA_SUCCESS)
        return pdr__cuda_tr(r);
    *is_device = 1;
    if (ordinal != NULL)
        *ordinal = dev;
    return 0;
}

/* The retained primary context of a device, retaining it when `retain` (else NULL if not yet retained). */
int pdr__cuda_primary_ctx(int ordinal, int retain, CUcontext *out)
{
    *out = NULL;
    if (ordinal < 0 || ordinal >= pdr__cuda_ndevices)
        return pdr__cuda_fail(PDR_EINVAL, "device ordinal out of range");
    int rc = 0;
    pthread_mutex_lock(&pdr__cuda_ctx_lock);
    if (pdr__cuda_primary[ordinal] == NULL && retain) {
        CUdevice dev;
        CUcontext c = NULL;
        rc = pdr__cuda_tr(pdr__cu.DeviceGet(&dev, ordinal));
        if (rc == 0)
            rc = pdr__cuda_tr(pdr__cu.DevicePrimaryCtxRetain(&c, dev));
        if (rc == 0)
            pdr__cuda_primary[ordinal] = c;
    }
    *out = pdr__cuda_primary[ordinal];
    pthread_mutex_unlock(&pdr__cuda_ctx_lock);
    return rc;
}

int pdr__cuda_bind(int ordinal)
{
    PDR__CUDA_READY();
    CUcontext c;
    int rc = pdr__cuda_primary_ctx(ordinal, 1, &c);
    if (rc != 0)
        return rc;
    return pdr__cuda_tr(pdr__cu.CtxSetCurrent(c));
}

/* Some driver calls need a current context of any kind. With none bound, borrows the already retained
 * primary context of the device owning p (or of any retained device when p is host memory); *borrowed
 * tells the caller to give it back with pdr__cuda_borrow_end(). Never retains a context. */
void pdr__cuda_borrow_begin(const void *p, int *borrowed)
{
    *borrowed = 0;
    if (pdr__cuda_has_context())
        return;
    int is_dev = 0, ord = -1;
    CUcontext c = NULL;
    if (p != NULL && pdr__cuda_ptr_info(p, &is_dev, &ord) == 0 && is_dev && ord >= 0 &&
        ord < pdr__cuda_ndevices)
        pdr__cuda_primary_ctx(ord, 0, &c);
    pthread_mutex_lock(&pdr__cuda_ctx_lock);
    for (int i = 0; c == NULL && i < pdr__cuda_ndevices; i++)
        c = pdr__cuda_primary[i];
    pthread_mutex_unlock(&pdr__cuda_ctx_lock);
    if (c != NULL && pdr__cu.CtxSetCurrent(c) == CUDA_SUCCESS)
        *borrowed = 1;
}

void pdr__cuda_borrow_end(int borrowed)
{
    if (borrowed)
        (void)pdr__cu.CtxSetCurrent(NULL);
}
