/*
 * transport — the KV transfer engine. Moves the bytes of a "room" (one request's KV cache, a list of
 * memory segments) from the process that produced it (the prefill, which *pushes*) to the process
 * that needs it (the decode, which *pulls*). Backends: TCP (host memory directly; GPU memory through a
 * fixed pool of pinned staging buffers), CUDA IPC (both ends on one host, GPU memory on both ends:
 * cuMemAlloc memory through legacy IPC handles, VMM memory from cuMemCreate through file descriptors
 * passed over a Unix socket) and RDMA (libibverbs, when both ends have a device; never run on hardware).
 *
 *   prefill: eng = pdr_xfer_engine_create({.listen_host = "0.0.0.0", .listen_port = 8998}, &err);
 *            pdr_xfer_push(eng, room, segs, nseg, timeout_ms, cb, arg);
 *   decode:  eng = pdr_xfer_engine_create({0}, &err);
 *            pdr_xfer_pull(eng, "10.0.0.7", 8998, room, segs, nseg, timeout_ms, cb, arg);
 *
 * Push and pull may be posted in either order; each has a deadline. The pulling engine keeps one
 * session per peer (host:port) of conns_per_peer TCP connections and stripes every room's chunks over
 * them; a failed room never touches another room, a dead connection fails the rooms of its session
 * only and the next pull opens a fresh session. No buffer proportional to the size of a room is ever
 * allocated: host segments are written to and read from the socket directly, GPU segments go through
 * staging_chunks pinned buffers per connection. docs/internals/transport.md describes the wire
 * protocol, threads and limits.
 *
 * Ordering with CUDA work (device memory). The engine copies device memory on streams of its own, and
 * with CUDA IPC the peer process copies into or out of this process's memory; neither waits for any
 * stream or event of the caller, and nothing the caller queued on any stream is ordered before them.
 * Hence, for a room in device memory:
 *  - Before pdr_xfer_push: every write of the source bytes has completed on the device, i.e. the caller
 *    synchronized the stream that wrote them (cuStreamSynchronize, cuEventSynchronize on an event
 *    recorded after the writes, cudaDeviceSynchronize, torch.cuda.synchronize()). A returned call is not
 *    a completed write: a kernel launch or cuMemsetD8 returns once queued, and cuMemcpy from pageable
 *    host memory returns once the bytes are staged, before they reach the device.
 *  - Before pdr_xfer_pull: nothing the caller queued still writes or reads the destination (a write
 *    landing after the engine's overwrites the room's bytes; the same synchronization as above).
 *  - Until the callback: the caller does not write the source nor touch the destination.
 *  - When a pull's callback reports status 0 (backends tcp and cuda_ipc): every byte of the destination
 *    has been written to device memory and the copies that wrote it have completed (the engine's
 *    host-to-device staging copies, or the peer's CUDA IPC copy, which the peer waits for before it
 *    reports the room done). Work that any stream of any context queues on that device after the
 *    callback ran reads the room's bytes, with no further synchronization. RDMA into device memory has
 *    not run on hardware, so this is not established for it.
 *  - When a push's callback runs, the engine and the peer no longer read the source.
 * Host memory needs none of this: the engine reads and writes it with the CPU, and the callback orders
 * those accesses before whatever the caller does after it.
 *
 * Threading: every function may be called from any thread, except pdr_xfer_engine_destroy (not from
 * a callback). Each engine runs io_threads I/O threads; every callback runs on the first of them,
 * exactly once per accepted operation, never inside the call that posted it. Callbacks must not block.
 *
 * Errors: negative PDR_E* codes (common/err.h). Operation statuses: 0, PDR_ETIMEDOUT (deadline),
 * PDR_EPEERGONE (connection lost or peer silent past the heartbeat timeout), PDR_ECONNREFUSED,
 * PDR_ESIZE (source and destination totals differ), PDR_ENOROOM (the peer was reachable but never
 * offered the room before the deadline), PDR_ECANCELED (canceled here or by the peer), PDR_EEXIST
 * (another pull of this room is already being served by the peer), PDR_EPROTO (the peer sent a
 * malformed frame; its connection was closed), PDR_ENOTSUP (a forced backend cannot serve the room),
 * PDR_ECLOSED (engine destroyed), or a CUDA failure's code for a GPU room.
 */
#ifndef PDR_TRANSPORT_H
#define PDR_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

typedef struct pdr_xfer_engine pdr_xfer_engine_t;

/* One contiguous piece of a room. Layout-compatible with pdshim_seg_t. */
typedef struct pdr_xfer_seg {
    void *addr;
    size_t len;
} pdr_xfer_seg_t;

/* Where memory lives; the engine picks a backend per memory kind. */
enum pdr_xfer_mem_kind {
    PDR_XFER_MEM_HOST = 0,
    PDR_XFER_MEM_CUDA = 1,
    PDR_XFER_MEM_AUTO = 2, /* ask the CUDA driver (cuPointerGetAttribute) which one it is */
};

/* Every field may be 0, which selects the default in brackets. */
typedef struct pdr_xfer_opts {
    const char *listen_host;       /* NULL: no listener (pull-only engine) */
    int listen_port;               /* 0: ephemeral, see pdr_xfer_listen_port() */
    uint32_t default_timeout_ms;   /* [30000] used when an operation passes 0 */
    size_t max_segments;           /* [65536] per room */
    size_t max_rooms;              /* [65536] pending operations per engine (push + pull) */
    size_t chunk_bytes;            /* [1 MiB] payload per DATA frame, at most PDR_XFER_MAX_CHUNK */
    uint32_t heartbeat_ms;         /* [1000] PING a connection with pending rooms after this quiet time */
    uint32_t heartbeat_timeout_ms; /* [5000] silence after which the peer is gone (PDR_EPEERGONE) */
    int sock_buf_bytes;            /* [4 MiB] SO_SNDBUF / SO_RCVBUF; -1 leaves the kernel's autotuning */
    int io_threads;                /* [min(4, cores)] I/O threads; each connection lives on one */
    int conns_per_peer;            /* [4] TCP connections per peer; a room's chunks are striped over them */
    size_t staging_chunks;         /* [4] pinned staging buffers of chunk_bytes per connection (GPU memory) */
    const char *backend;           /* ["auto"] "auto" | "tcp" | "rdma" | "cuda_ipc": force a backend */
} pdr_xfer_opts_t;

/* What one transfer did, for logs and benchmarks. */
typedef struct pdr_xfer_info {
    int status;          /* 0 or a negative PDR_E* code */
    uint64_t bytes;      /* bytes moved */
    const char *backend; /* "tcp", "rdma" or "cuda_ipc" (static string), "none" when it never started */
    uint64_t usec;       /* from the post to completion */
} pdr_xfer_info_t;
typedef void (*pdr_xfer_info_cb)(void *arg, uint64_t room, const pdr_xfer_info_t *info);

/* Engine counters. staging_* count pinned staging memory: a fixed pool, never proportional to a room. */
typedef struct pdr_xfer_stats {
    uint64_t transfers, failures;
    uint64_t bytes_sent, bytes_received;
    uint64_t staging_bytes, staging_peak_bytes;
} pdr_xfer_stats_t;
void pdr_xfer_get_stats(pdr_xfer_engine_t *eng, pdr_xfer_stats_t *out);

/* Called once per accepted push or pull, on the engine's I/O thread. status is 0 or a negative PDR_E*
 * code; bytes is the number of bytes moved (all of them on success). */
typedef void (*pdr_xfer_done_cb)(void *arg, uint64_t room, int status, uint64_t bytes);

/* Creates an engine, binds the listener if asked and starts the I/O thread. Returns NULL and sets
 * *err (PDR_EINVAL, PDR_ENOMEM, PDR_EIO when the address cannot be bound) on failure. */
pdr_xfer_engine_t *pdr_xfer_engine_create(const pdr_xfer_opts_t *opts, int *err);
/* The bound listen port, or -1 without a listener. */
int pdr_xfer_listen_port(const pdr_xfer_engine_t *eng);
/* Fails every pending operation with PDR_ECLOSED (their callbacks run before this returns), closes
 * every connection, joins the I/O thread and frees everything. Not from a callback. */
void pdr_xfer_engine_destroy(pdr_xfer_engine_t *eng);

/* Describes a memory region to the engine. Host memory needs no registration (an unregistered
 * address is host memory). PDR_XFER_MEM_CUDA: device memory (PDR_ENOTSUP without a CUDA driver,
 * PDR_EINVAL if the driver says it is not device memory); PDR_XFER_MEM_AUTO asks the driver (host
 * memory without one). A push/pull segment inside a registered CUDA region is device memory; a room is
 * all host memory or all memory of one device (PDR_EINVAL otherwise). Returns 0 or a PDR_E* code. */
int pdr_xfer_mem_register(pdr_xfer_engine_t *eng, void *addr, size_t len, int kind);
int pdr_xfer_mem_unregister(pdr_xfer_engine_t *eng, void *addr);

/* Prefill side: the room's bytes are ready in segs (their concatenation, in order). The engine sends
 * them to the peer that pulls this room and completes when the peer acknowledged every byte; with
 * nobody pulling before the deadline it fails with PDR_ETIMEDOUT. The segs array is copied; the
 * memory must stay valid and unchanged until the callback ran. timeout_ms 0: the default. Returns 0
 * (the callback will run) or PDR_EINVAL, PDR_ETOOBIG (too many segments or rooms), PDR_EEXIST (this
 * room is already being pushed here), PDR_ENOMEM, PDR_ECLOSED (the callback will not run). */
int pdr_xfer_push(pdr_xfer_engine_t *eng, uint64_t room, const pdr_xfer_seg_t *segs, size_t nseg,
                  uint32_t timeout_ms, pdr_xfer_done_cb cb, void *arg);

/* Decode side: fetch the room from the engine listening at host:port into segs. The total length
 * must equal the pushed total (PDR_ESIZE otherwise, on both sides). host is a numeric address or a
 * name (resolved in the calling thread). Same return convention as pdr_xfer_push; PDR_EEXIST if this
 * room is already being pulled here. */
int pdr_xfer_pull(pdr_xfer_engine_t *eng, const char *host, int port, uint64_t room,
                  const pdr_xfer_seg_t *segs, size_t nseg, uint32_t timeout_ms, pdr_xfer_done_cb cb,
                  void *arg);

/* As pdr_xfer_push / pdr_xfer_pull, with a callback that also names the backend used. */
int pdr_xfer_push_ex(pdr_xfer_engine_t *eng, uint64_t room, const pdr_xfer_seg_t *segs, size_t nseg,
                     uint32_t timeout_ms, pdr_xfer_info_cb cb, void *arg);
int pdr_xfer_pull_ex(pdr_xfer_engine_t *eng, const char *host, int port, uint64_t room,
                     const pdr_xfer_seg_t *segs, size_t nseg, uint32_t timeout_ms, pdr_xfer_info_cb cb,
                     void *arg);

/* Prefill side, a push published in parts while the room is still being computed (a layer-wise or
 * chunked prefill): opens the room with its total size, then each pdr_xfer_push_part publishes a range
 * [offset, offset + its length) of the room's byte space (the concatenation of the decode's destination
 * segments). Parts come in any order, every byte exactly once. A part's bytes move as soon as both the
 * part and the decode's FETCH are known; the pull is unchanged and completes only when it has every
 * byte. The callback runs once: every byte acknowledged by the decode, or an error, a cancel, or the
 * deadline (timeout_ms from this call; a part never published fails the room on both sides with
 * PDR_ETIMEDOUT there). Returns 0, or as pdr_xfer_push; PDR_ENOTSUP with backend "rdma" (parts are not
 * sent over RDMA: with "auto" such a room goes over TCP). */
int pdr_xfer_push_open(pdr_xfer_engine_t *eng, uint64_t room, uint64_t total, uint32_t timeout_ms,
                       pdr_xfer_info_cb cb, void *arg);
/* Publishes one part of a room opened with pdr_xfer_push_open. segs (copied) hold the bytes
 * [offset, offset + sum of their lengths); they follow the rules of a push's segments (host memory, or
 * registered device memory of the one device of every part of the room), and with device memory the
 * writes that produced them have completed on the device (see "Ordering with CUDA work"). The memory
 * stays valid and unchanged until the room's callback. Returns 0 (published), PDR_EINVAL (empty, past
 * the room's end, overlapping a published part, memory of another kind or device than the room's
 * first part: nothing else fails), PDR_ETOOBIG (more than 65536 parts or max_segments segments in
 * all), PDR_ENOROOM (no room opened in parts is pending here), PDR_ENOMEM. */
int pdr_xfer_push_part(pdr_xfer_engine_t *eng, uint64_t room, uint64_t offset, const pdr_xfer_seg_t *segs,
                       size_t nseg);
/* Bytes moved so far of the pending push or pull of this room, and its total. Push: bytes handed to the
 * peer (TCP: whole DATA frames accepted by the kernel; CUDA IPC: copies issued and completed); pull: bytes
 * in place in the destination. 0, or PDR_ENOROOM when nothing of this room is pending here (a push is
 * reported when both are). */
int pdr_xfer_progress(pdr_xfer_engine_t *eng, uint64_t room, uint64_t *moved, uint64_t *total);

/* Cancels the pending push and/or pull of this room: callbacks run with PDR_ECANCELED and the peer's
 * side fails promptly with PDR_ECANCELED. Returns 0, or PDR_ENOROOM if nothing of this room is
 * pending here. */
int pdr_xfer_cancel(pdr_xfer_engine_t *eng, uint64_t room);

#endif
