/*
 * CUDA through the driver API, loaded at run time: dlopen("libcuda.so.1") and cuGetProcAddress, never
 * -lcuda, so every binary starts and every test runs on machines without a GPU (there, every call
 * answers PDR_ENOTSUP). Only transport/ includes this header (and cuda.h from the toolkit).
 *
 * Context rule (the lesson of mooncake's TCP path, which created a ~520 MiB context on GPU0 from an I/O
 * thread that never bound its device): every thread binds the *primary context of the device that owns
 * the memory* (pdr__cuda_bind) before any other call; nothing here ever creates a context on a device
 * nobody registered memory on, and nothing touches device 0 implicitly.
 *
 * All functions are thread-safe. Errors: 0 or a negative PDR_E* code; the CUresult is translated at this
 * edge and its name logged once by the caller through pdr__cuda_last_error().
 */
#ifndef PDR_TRANSPORT_CUDA_H
#define PDR_TRANSPORT_CUDA_H

#include <stddef.h>
#include <stdint.h>

/* Loads the driver once (first call wins; later calls return the cached result). 0 when a driver and at
 * least one device exist, PDR_ENOTSUP otherwise. */
int pdr__cuda_init(void);
int pdr__cuda_device_count(void);

/* What a pointer is: *is_device 1 for CUDA device (or managed) memory, with its device ordinal; 0 for
 * host memory (including memory the driver does not know). Never creates a context. */
int pdr__cuda_ptr_info(const void *p, int *is_device, int *ordinal);

/* Makes the primary context of `ordinal` current on the calling thread (retained once per device per
 * process, released at exit). */
int pdr__cuda_bind(int ordinal);

/* Pinned (page-locked) host memory for staging, portable across contexts. */
int pdr__cuda_host_alloc(size_t len, void **out);
void pdr__cuda_host_free(void *p);

/* Streams and events (opaque handles: CUstream / CUevent). The calling thread must be bound. */
int pdr__cuda_stream_create(void **out);
void pdr__cuda_stream_destroy(void *stream);
int pdr__cuda_event_create(void **out); /* CU_EVENT_DISABLE_TIMING */
void pdr__cuda_event_destroy(void *ev);
int pdr__cuda_event_record(void *ev, void *stream);
/* 0 when done, PDR_EAGAIN while pending, another code on error. */
int pdr__cuda_event_query(void *ev);
int pdr__cuda_event_sync(void *ev);
int pdr__cuda_stream_sync(void *stream);

/* Asynchronous copies on a stream (host side must be pinned for real asynchrony). */
int pdr__cuda_copy_d2h_async(void *dst_host, const void *src_dev, size_t len, void *stream);
int pdr__cuda_copy_h2d_async(void *dst_dev, const void *src_host, size_t len, void *stream);
/* Device to device, across devices too (unified addressing; peer access when possible). */
int pdr__cuda_copy_d2d_async(void *dst_dev, const void *src_dev, size_t len, void *stream);

/* CUDA IPC for pairs on one host. A handle names the allocation that contains p; *offset is p's offset
 * inside it. 64 bytes, as CUipcMemHandle. */
#define PDR_CUDA_IPC_HANDLE_BYTES 64
int pdr__cuda_ipc_export(const void *p, unsigned char handle[PDR_CUDA_IPC_HANDLE_BYTES], uint64_t *offset);
/* Maps a peer's allocation into this process (the bound device's context); *base is its start. */
int pdr__cuda_ipc_open(const unsigned char handle[PDR_CUDA_IPC_HANDLE_BYTES], void **base);
int pdr__cuda_ipc_close(void *base);

/* VMM allocations (cuMemCreate + cuMemMap, as PyTorch's expandable segments make) have no legacy IPC
 * handle; they are shared as a POSIX file descriptor (cuMemExportToShareableHandle), passed to the
 * other process over a Unix socket (fdpass.h), which maps it with pdr__cuda_vmm_map. */
struct pdr_cuda_range {
    void *base;        /* start of the allocation (cuMemAlloc) or VMM mapping that contains p */
    uint64_t size;     /* its size: p's allocation ends at base + size */
    int vmm;           /* 1: a VMM mapping (share it with pdr__cuda_vmm_export) */
    uint64_t block_id; /* VMM: process-wide unique id of the physical allocation (changes when the
                          memory at base is freed and created again) */
};
int pdr__cuda_mem_range(const void *p, struct pdr_cuda_range *out);
/* A new file descriptor for the VMM allocation mapped at base (the caller closes it). PDR_ENOTSUP or
 * PDR_EINVAL when it was not created exportable as a POSIX file descriptor. */
int pdr__cuda_vmm_export(const void *base, int *fd);
/* Maps a peer's exported allocation of `size` bytes into this process with read/write access for
 * device `ordinal` (bound); *base is the mapping. fd stays the caller's. */
int pdr__cuda_vmm_map(int fd, uint64_t size, int ordinal, void **base);
int pdr__cuda_vmm_unmap(void *base, uint64_t size);
/* Tests and benchmarks: VMM device memory on device `ordinal` (bound), exportable as a file descriptor;
 * *alloc_len is len rounded up to the allocation granularity (pass it to pdr__cuda_vmm_free). */
int pdr__cuda_vmm_alloc(int ordinal, size_t len, void **out, size_t *alloc_len);
void pdr__cuda_vmm_free(void *p, size_t alloc_len);

/* GPUDirect: a dma-buf fd for [p, p+len) (cuMemGetHandleForAddressRange); page-aligned ranges only. */
int pdr__cuda_dmabuf_fd(const void *p, size_t len, int *fd);
/* "0000:18:00.0" style PCI bus id of a device, for NIC locality. */
int pdr__cuda_pci_bus_id(int ordinal, char *buf, size_t len);
/* A 16-byte device UUID (tells the same GPU apart across processes). */
int pdr__cuda_uuid(int ordinal, unsigned char uuid[16]);

/* Tests and benchmarks: device memory on the bound device. pdr__cuda_memset and pdr__cuda_copy_sync
 * (any direction, unified addressing) return once the bytes are in place: they run on the legacy
 * default stream and synchronize it, as cuMemsetD8 and cuMemcpy alone do not (cuMemcpy from pageable
 * host memory returns once the bytes are staged, before they reach the device; device-to-device copies
 * and memsets return once queued), and nothing on another stream, context or process is ordered after
 * the legacy stream. */
int pdr__cuda_mem_alloc(size_t len, void **out);
void pdr__cuda_mem_free(void *p);
int pdr__cuda_memset(void *dev, unsigned char byte, size_t len);
int pdr__cuda_copy_sync(void *dst, const void *src, size_t len);

/* Tests and benchmarks: a test pattern written and compared on the device. Word w (8 bytes, native
 * order) of a buffer holding the pattern of seed is pdr__cuda_pattern_word(seed, w), w counted from
 * word0 at the buffer's start; buffers are 8-byte aligned and a whole number of words long
 * (PDR_EINVAL otherwise). The calling thread must be bound to the device of the memory; the kernels
 * come from PTX text the driver compiles once per device. */
#define PDR_PATTERN_SEED_MUL 0x9E3779B97F4A7C15ull
static inline uint64_t pdr__cuda_pattern_word(uint64_t seed, uint64_t word)
{
    uint64_t z = seed * PDR_PATTERN_SEED_MUL ^ word * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
/* Queues the writing of the pattern on stream (the caller synchronizes it before anything else reads). */
int pdr__cuda_pattern_fill(void *dev, size_t len, uint64_t seed, uint64_t word0, void *stream);
struct pdr_cuda_check {
    uint64_t mismatches; /* words that differ from the pattern */
    uint64_t first_bad;  /* index (from the buffer's start) of the first of them; UINT64_MAX if none */
};
/* Compares every word with the pattern on stream and waits for the result (and so for everything queued
 * on stream before). scratch: 16 bytes of device memory of the same device, reused across calls. */
int pdr__cuda_pattern_check(const void *dev, size_t len, uint64_t seed, uint64_t word0, void *scratch,
                            void *stream, struct pdr_cuda_check *out);
/* The kernels' PTX text (tests assemble it with ptxas where one is installed). */
const char *pdr__cuda_pattern_ptx(void);

/* The name of the last CUresult that failed on this thread ("CUDA_ERROR_OUT_OF_MEMORY"), or "". */
const char *pdr__cuda_last_error(void);

/* Additions (not in the first draft of this header). Why the driver could not be used ("" when it can):
 * for a one-line "GPU disabled: ..." log by the caller. */
const char *pdr__cuda_init_error(void);
/* cuDriverGetVersion (13000 for CUDA 13.0), 0 without a driver. */
int pdr__cuda_driver_version(void);
/* cuDeviceGetName into buf. */
int pdr__cuda_device_name(int ordinal, char *buf, size_t len);
/* cuMemcpyPeerAsync between two devices whose primary contexts this process already bound (benchmarks:
 * the reference rate for CUDA IPC). */
int pdr__cuda_copy_peer_async(void *dst_dev, int dst_ordinal, const void *src_dev, int src_ordinal,
                              size_t len, void *stream);

#endif
