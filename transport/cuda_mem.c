/*
 * cuda_mem.c — the CUDA driver API's memory, stream, event and copy calls (gpu_cuda.h): pinned host
 * memory, device-to-device and peer copies (peer access enabled once per device pair), legacy IPC
 * handles, VMM ranges, export and import, dma-buf descriptors, device identity, and the synchronous
 * helpers tests use. The loader and the contexts are in cuda.c.
 *
 * Threads: any; the peer-access matrix is guarded by pdr__cuda_ctx_lock.
 */
#include "cuda_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static unsigned char peer_tried[PDR_CUDA_MAX_DEVICES][PDR_CUDA_MAX_DEVICES]; /* [a][b], a < b */

int pdr__cuda_host_alloc(size_t len, void **out)
{
    PDR__CUDA_BOUND();
    if (out == NULL || len == 0)
        return PDR_EINVAL;
    *out = NULL;
    return pdr__cuda_tr(pdr__cu.MemHostAlloc(out, len, CU_MEMHOSTALLOC_PORTABLE));
}

void pdr__cuda_host_free(void *p)
{
    if (p == NULL || pdr__cuda_init() != 0)
        return;
    int borrowed;
    pdr__cuda_borrow_begin(NULL, &borrowed);
    (void)pdr__cuda_tr(pdr__cu.MemFreeHost(p));
    pdr__cuda_borrow_end(borrowed);
}

int pdr__cuda_stream_create(void **out)
{
    PDR__CUDA_BOUND();
    if (out == NULL)
        return PDR_EINVAL;
    CUstream s = NULL;
    int rc = pdr__cuda_tr(pdr__cu.StreamCreate(&s, CU_STREAM_NON_BLOCKING));
    *out = rc == 0 ? (void *)s : NULL;
    return rc;
}

void pdr__cuda_stream_destroy(void *stream)
{
    if (stream != NULL && pdr__cuda_init() == 0)
        (void)pdr__cuda_tr(pdr__cu.StreamDestroy((CUstream)stream));
}

int pdr__cuda_event_create(void **out)
{
    PDR__CUDA_BOUND();
    if (out == NULL)
        return PDR_EINVAL;
    CUevent e = NULL;
    int rc = pdr__cuda_tr(pdr__cu.EventCreate(&e, CU_EVENT_DISABLE_TIMING));
    *out = rc == 0 ? (void *)e : NULL;
    return rc;
}

void pdr__cuda_event_destroy(void *ev)
{
    if (ev != NULL && pdr__cuda_init() == 0)
        (void)pdr__cuda_tr(pdr__cu.EventDestroy((CUevent)ev));
}

int pdr__cuda_event_record(void *ev, void *stream)
{
    PDR__CUDA_READY();
    return ev == NULL ? PDR_EINVAL : pdr__cuda_tr(pdr__cu.EventRecord((CUevent)ev, (CUstream)stream));
}

int pdr__cuda_event_query(void *ev)
{
    PDR__CUDA_READY();
    if (ev == NULL)
        return PDR_EINVAL;
    CUresult r = pdr__cu.EventQuery((CUevent)ev);
    return r == CUDA_ERROR_NOT_READY ? PDR_EAGAIN : pdr__cuda_tr(r); /* pending is not a failure */
}

int pdr__cuda_event_sync(void *ev)
{
    PDR__CUDA_READY();
    return ev == NULL ? PDR_EINVAL : pdr__cuda_tr(pdr__cu.EventSynchronize((CUevent)ev));
}

int pdr__cuda_stream_sync(void *stream)
{
    PDR__CUDA_READY();
    return pdr__cuda_tr(pdr__cu.StreamSynchronize((CUstream)stream));
}

int pdr__cuda_copy_d2h_async(void *dst_host, const void *src_dev, size_t len, void *stream)
{
    PDR__CUDA_READY();
    if (len == 0)
        return 0;
    return pdr__cuda_tr(pdr__cu.MemcpyDtoHAsync(dst_host, pdr__cuda_dptr(src_dev), len, (CUstream)stream));
}

int pdr__cuda_copy_h2d_async(void *dst_dev, const void *src_host, size_t len, void *stream)
{
    PDR__CUDA_READY();
    if (len == 0)
        return 0;
    return pdr__cuda_tr(pdr__cu.MemcpyHtoDAsync(pdr__cuda_dptr(dst_dev), src_host, len, (CUstream)stream));
}

/* Enables peer access both ways between two devices, once per pair, and only when both primary contexts
 * are already retained here (retaining one would create a context on a device this process does not
 * use). Failures are ignored: the copy still works through unified addressing, just slower. */
static void enable_peer_once(int a, int b)
{
    if (a == b || a < 0 || b < 0 || a >= pdr__cuda_ndevices || b >= pdr__cuda_ndevices)
        return;
    int lo = a < b ? a : b, hi = a < b ? b : a;
    pthread_mutex_lock(&pdr__cuda_ctx_lock);
    CUcontext clo = pdr__cuda_primary[lo], chi = pdr__cuda_primary[hi];
    if (peer_tried[lo][hi] || clo == NULL || chi == NULL) {
        pthread_mutex_unlock(&pdr__cuda_ctx_lock);
        return;
    }
    peer_tried[lo][hi] = 1;
    CUcontext saved = NULL;
    (void)pdr__cu.CtxGetCurrent(&saved);
    int can = 0;
    CUdevice dlo, dhi;
    if (pdr__cu.DeviceGet(&dlo, lo) == CUDA_SUCCESS && pdr__cu.DeviceGet(&dhi, hi) == CUDA_SUCCESS &&
        pdr__cu.DeviceCanAccessPeer(&can, dlo, dhi) == CUDA_SUCCESS && can) {
        /* CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED and _NOT_SUPPORTED are both fine here. */
        if (pdr__cu.CtxSetCurrent(clo) == CUDA_SUCCESS)
            (void)pdr__cu.CtxEnablePeerAccess(chi, 0);
        if (pdr__cu.CtxSetCurrent(chi) == CUDA_SUCCESS)
            (void)pdr__cu.CtxEnablePeerAccess(clo, 0);
        (void)pdr__cu.CtxSetCurrent(saved);
    }
    pthread_mutex_unlock(&pdr__cuda_ctx_lock);
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
    return pdr__cuda_tr(
        pdr__cu.MemcpyAsync(pdr__cuda_dptr(dst_dev), pdr__cuda_dptr(src_dev), len, (CUstream)stream));
}

int pdr__cuda_copy_peer_async(void *dst_dev, int dst_ordinal, const void *src_dev, int src_ordinal,
                              size_t len, void *stream)
{
    PDR__CUDA_READY();
    CUcontext dc, sc;
    if (pdr__cuda_primary_ctx(dst_ordinal, 0, &dc) != 0 || pdr__cuda_primary_ctx(src_ordinal, 0, &sc) != 0 ||
        dc == NULL || sc == NULL)
        return pdr__cuda_fail(PDR_EINVAL, "both devices must be bound once before a peer copy");
    if (len == 0)
        return 0;
    enable_peer_once(dst_ordinal, src_ordinal);
    return pdr__cuda_tr(pdr__cu.MemcpyPeerAsync(pdr__cuda_dptr(dst_dev), dc, pdr__cuda_dptr(src_dev), sc, len,
                                                (CUstream)stream));
}

int pdr__cuda_ipc_export(const void *p, unsigned char handle[PDR_CUDA_IPC_HANDLE_BYTES], uint64_t *offset)
{
    PDR__CUDA_READY();
    if (p == NULL || handle == NULL || offset == NULL)
        return PDR_EINVAL;
    _Static_assert(sizeof(CUipcMemHandle) == PDR_CUDA_IPC_HANDLE_BYTES, "CUipcMemHandle is 64 bytes");
    int borrowed;
    pdr__cuda_borrow_begin(p, &borrowed);
    CUdeviceptr base = 0;
    size_t size = 0;
    CUipcMemHandle h;
    int rc = pdr__cuda_tr(pdr__cu.MemGetAddressRange(&base, &size, pdr__cuda_dptr(p)));
    if (rc == 0)
        rc = pdr__cuda_tr(pdr__cu.IpcGetMemHandle(&h, base));
    pdr__cuda_borrow_end(borrowed);
    if (rc != 0)
        return rc;
    memcpy(handle, &h, sizeof(h));
    *offset = (uint64_t)(pdr__cuda_dptr(p) - base);
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
    int rc = pdr__cuda_tr(pdr__cu.IpcOpenMemHandle(&d, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    *base = rc == 0 ? (void *)(uintptr_t)d : NULL;
    return rc;
}

int pdr__cuda_ipc_close(void *base)
{
    PDR__CUDA_READY();
    if (base == NULL)
        return PDR_EINVAL;
    int borrowed;
    pdr__cuda_borrow_begin(base, &borrowed);
    int rc = pdr__cuda_tr(pdr__cu.IpcCloseMemHandle(pdr__cuda_dptr(base)));
    pdr__cuda_borrow_end(borrowed);
    return rc;
}

static int have_vmm(void)
{
    return pdr__cu.MemRetainAllocationHandle != NULL && pdr__cu.MemRelease != NULL &&
           pdr__cu.MemExportToShareableHandle != NULL && pdr__cu.MemImportFromShareableHandle != NULL &&
           pdr__cu.MemAddressReserve != NULL && pdr__cu.MemAddressFree != NULL && pdr__cu.MemMap != NULL &&
           pdr__cu.MemUnmap != NULL && pdr__cu.MemSetAccess != NULL;
}

int pdr__cuda_mem_range(const void *p, struct pdr_cuda_range *out)
{
    PDR__CUDA_READY();
    if (p == NULL || out == NULL)
        return PDR_EINVAL;
    memset(out, 0, sizeof(*out));
    int borrowed;
    pdr__cuda_borrow_begin(p, &borrowed);
    CUmemGenericAllocationHandle h = 0;
    int rc = 0, legacy = 0;
    if (pdr__cu.PointerGetAttribute(&legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                    pdr__cuda_dptr(p)) != CUDA_SUCCESS)
        legacy = 0;
    if (!legacy && pdr__cu.MemRetainAllocationHandle != NULL && pdr__cu.MemRelease != NULL &&
        pdr__cu.MemRetainAllocationHandle(&h, (void *)(uintptr_t)p) == CUDA_SUCCESS) {
        /* A VMM mapping: its own start and size (one cuMemMap of one physical allocation). */
        (void)pdr__cu.MemRelease(h);
        CUdeviceptr base = 0;
        size_t size = 0;
        unsigned long long id = 0;
        rc = pdr__cuda_tr(
            pdr__cu.PointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, pdr__cuda_dptr(p)));
        if (rc == 0)
            rc = pdr__cuda_tr(
                pdr__cu.PointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, pdr__cuda_dptr(p)));
        if (rc == 0)
            rc = pdr__cuda_tr(
                pdr__cu.PointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID, pdr__cuda_dptr(p)));
        out->base = (void *)(uintptr_t)base;
        out->size = size;
        out->vmm = 1;
        out->block_id = id;
    } else {
        CUdeviceptr base = 0;
        size_t size = 0;
        rc = pdr__cuda_tr(pdr__cu.MemGetAddressRange(&base, &size, pdr__cuda_dptr(p)));
        out->base = (void *)(uintptr_t)base;
        out->size = size;
    }
    pdr__cuda_borrow_end(borrowed);
    if (rc == 0 && (pdr__cuda_dptr(p) < pdr__cuda_dptr(out->base) ||
                    pdr__cuda_dptr(p) - pdr__cuda_dptr(out->base) >= out->size))
        rc = pdr__cuda_fail(PDR_EIO, "pointer outside the range the driver reported");
    return rc;
}

int pdr__cuda_vmm_export(const void *base, int *fd)
{
    PDR__CUDA_READY();
    if (base == NULL || fd == NULL)
        return PDR_EINVAL;
    *fd = -1;
    if (!have_vmm())
        return pdr__cuda_fail(PDR_ENOTSUP, "driver lacks the VMM API (needs 11.0)");
    int borrowed;
    pdr__cuda_borrow_begin(base, &borrowed);
    CUmemGenericAllocationHandle h = 0;
    int out = -1;
    int rc = pdr__cuda_tr(pdr__cu.MemRetainAllocationHandle(&h, (void *)(uintptr_t)base));
    if (rc == 0) {
        /* Fails (CUDA_ERROR_INVALID_VALUE / NOT_SUPPORTED) unless the allocation was created with
         * CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR among its requested handle types. */
        rc = pdr__cuda_tr(
            pdr__cu.MemExportToShareableHandle(&out, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        (void)pdr__cu.MemRelease(h);
    }
    pdr__cuda_borrow_end(borrowed);
    *fd = rc == 0 ? out : -1;
    return rc;
}

/* Maps allocation h (size bytes) at a new address with read/write access for device ordinal, and
 * releases h (the mapping holds the memory from then on; on failure nothing is left). */
static int map_allocation(CUmemGenericAllocationHandle h, size_t size, int ordinal, void **base)
{
    CUdeviceptr va = 0;
    int rc = pdr__cuda_tr(pdr__cu.MemAddressReserve(&va, size, 0, 0, 0));
    int mapped = 0;
    if (rc == 0) {
        rc = pdr__cuda_tr(pdr__cu.MemMap(va, size, 0, h, 0));
        mapped = rc == 0;
    }
    if (rc == 0) {
        CUmemAccessDesc acc;
        memset(&acc, 0, sizeof(acc));
        acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        acc.location.id = ordinal;
        acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        rc = pdr__cuda_tr(pdr__cu.MemSetAccess(va, size, &acc, 1));
    }
    (void)pdr__cu.MemRelease(h);
    if (rc != 0) {
        if (mapped)
            (void)pdr__cu.MemUnmap(va, size);
        if (va != 0)
            (void)pdr__cu.MemAddressFree(va, size);
        return rc;
    }
    *base = (void *)(uintptr_t)va;
    return 0;
}

int pdr__cuda_vmm_map(int fd, uint64_t size, int ordinal, void **base)
{
    PDR__CUDA_BOUND();
    if (fd < 0 || size == 0 || base == NULL || ordinal < 0 || ordinal >= pdr__cuda_ndevices)
        return PDR_EINVAL;
    *base = NULL;
    if (!have_vmm())
        return pdr__cuda_fail(PDR_ENOTSUP, "driver lacks the VMM API (needs 11.0)");
    CUmemGenericAllocationHandle h = 0;
    int rc = pdr__cuda_tr(pdr__cu.MemImportFromShareableHandle(&h, (void *)(uintptr_t)fd,
                                                               CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
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
    pdr__cuda_borrow_begin(NULL, &borrowed);
    int rc = pdr__cuda_tr(pdr__cu.MemUnmap(pdr__cuda_dptr(base), (size_t)size));
    int rc2 = pdr__cuda_tr(pdr__cu.MemAddressFree(pdr__cuda_dptr(base), (size_t)size));
    pdr__cuda_borrow_end(borrowed);
    return rc != 0 ? rc : rc2;
}

int pdr__cuda_vmm_alloc(int ordinal, size_t len, void **out, size_t *alloc_len)
{
    PDR__CUDA_BOUND();
    if (out == NULL || alloc_len == NULL || len == 0 || ordinal < 0 || ordinal >= pdr__cuda_ndevices)
        return PDR_EINVAL;
    *out = NULL;
    *alloc_len = 0;
    if (!have_vmm() || pdr__cu.MemCreate == NULL || pdr__cu.MemGetAllocationGranularity == NULL)
        return pdr__cuda_fail(PDR_ENOTSUP, "driver lacks the VMM API (needs 11.0)");
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = ordinal;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t gran = 0;
    int rc =
        pdr__cuda_tr(pdr__cu.MemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    if (rc != 0)
        return rc;
    size_t size = (len + gran - 1) / gran * gran;
    CUmemGenericAllocationHandle h = 0;
    rc = pdr__cuda_tr(pdr__cu.MemCreate(&h, size, &prop, 0));
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
    if (pdr__cu.MemGetHandleForAddressRange == NULL)
        return pdr__cuda_fail(PDR_ENOTSUP, "driver lacks cuMemGetHandleForAddressRange (needs 11.7)");
    long page = sysconf(_SC_PAGESIZE);
    if (p == NULL || fd == NULL || len == 0 || page <= 0 || (uintptr_t)p % (uintptr_t)page != 0 ||
        len % (size_t)page != 0)
        return pdr__cuda_fail(PDR_EINVAL, "dma-buf ranges must be page-aligned");
    int borrowed;
    pdr__cuda_borrow_begin(p, &borrowed);
    int out = -1;
    int rc = pdr__cuda_tr(pdr__cu.MemGetHandleForAddressRange(&out, pdr__cuda_dptr(p), len,
                                                              CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0));
    pdr__cuda_borrow_end(borrowed);
    *fd = rc == 0 ? out : -1;
    return rc;
}

int pdr__cuda_pci_bus_id(int ordinal, char *buf, size_t len)
{
    PDR__CUDA_READY();
    if (buf == NULL || len == 0 || ordinal < 0 || ordinal >= pdr__cuda_ndevices)
        return PDR_EINVAL;
    CUdevice dev;
    char raw[64] = {0};
    int rc = pdr__cuda_tr(pdr__cu.DeviceGet(&dev, ordinal));
    if (rc == 0)
        rc = pdr__cuda_tr(pdr__cu.DeviceGetPCIBusId(raw, (int)sizeof(raw) - 1, dev));
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
    if (uuid == NULL || ordinal < 0 || ordinal >= pdr__cuda_ndevices)
        return PDR_EINVAL;
    CUdevice dev;
    CUuuid u;
    int rc = pdr__cuda_tr(pdr__cu.DeviceGet(&dev, ordinal));
    if (rc == 0)
        rc = pdr__cuda_tr(pdr__cu.DeviceGetUuid(&u, dev));
    if (rc == 0)
        memcpy(uuid, u.bytes, 16);
    return rc;
}

int pdr__cuda_device_name(int ordinal, char *buf, size_t len)
{
    PDR__CUDA_READY();
    if (buf == NULL || len == 0 || len > 1024 || ordinal < 0 || ordinal >= pdr__cuda_ndevices)
        return PDR_EINVAL;
    CUdevice dev;
    int rc = pdr__cuda_tr(pdr__cu.DeviceGet(&dev, ordinal));
    if (rc == 0)
        rc = pdr__cuda_tr(pdr__cu.DeviceGetName(buf, (int)len, dev));
    return rc;
}

int pdr__cuda_mem_alloc(size_t len, void **out)
{
    PDR__CUDA_BOUND();
    if (out == NULL || len == 0)
        return PDR_EINVAL;
    CUdeviceptr d = 0;
    int rc = pdr__cuda_tr(pdr__cu.MemAlloc(&d, len));
    *out = rc == 0 ? (void *)(uintptr_t)d : NULL;
    return rc;
}

void pdr__cuda_mem_free(void *p)
{
    if (p == NULL || pdr__cuda_init() != 0)
        return;
    int borrowed;
    pdr__cuda_borrow_begin(p, &borrowed);
    (void)pdr__cuda_tr(pdr__cu.MemFree(pdr__cuda_dptr(p)));
    pdr__cuda_borrow_end(borrowed);
}

int pdr__cuda_memset(void *dev, unsigned char byte, size_t len)
{
    PDR__CUDA_READY();
    if (dev == NULL)
        return PDR_EINVAL;
    int borrowed;
    pdr__cuda_borrow_begin(dev, &borrowed);
    /* cuMemsetD8 returns before the device wrote device memory: wait for the legacy stream it ran on. */
    int rc = pdr__cuda_tr(pdr__cu.MemsetD8(pdr__cuda_dptr(dev), byte, len));
    if (rc == 0)
        rc = pdr__cuda_tr(pdr__cu.StreamSynchronize(CU_STREAM_LEGACY));
    pdr__cuda_borrow_end(borrowed);
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
    pdr__cuda_borrow_begin(dd ? dst : src, &borrowed);
    /* cuMemcpy from pageable host memory returns once the bytes are staged, and between device buffers
     * once the copy is queued; other streams and processes are not ordered after it. The legacy stream
     * it ran on is synchronized so that the bytes are in place on return, whatever the direction. */
    int rc = pdr__cuda_tr(pdr__cu.Memcpy(pdr__cuda_dptr(dst), pdr__cuda_dptr(src), len));
    if (rc == 0)
        rc = pdr__cuda_tr(pdr__cu.StreamSynchronize(CU_STREAM_LEGACY));
    pdr__cuda_borrow_end(borrowed);
    return rc;
}
