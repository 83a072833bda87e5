/*
 * pdshim — the worker shim's C ABI. It sits beside the inference engine, embeds the KV transfer
 * engine (transport/) and runs the bootstrap handshake for a room:
 *
 *   prefill side: pdshim_create() with a listen address (the worker's bootstrap_port), then
 *                 pdshim_offer(room, source segments) once the room's KV is ready;
 *   decode side:  pdshim_fetch(prefill host, bootstrap port, room, destination segments).
 *
 * The decode connects to the prefill's shim, presents the room and its destination segments; the
 * prefill pushes its segments when the room has been offered; the decode acknowledges completion.
 * Offer and fetch may happen in either order. Every operation has a deadline; a failed room never
 * affects another room or the peer session.
 *
 * Threading: each shim runs its own I/O thread(s). Completion callbacks run on a shim thread, never
 * synchronously inside pdshim_offer/pdshim_fetch; they must not block. Memory passed in segments must
 * stay valid and untouched until the operation's callback has run.
 *
 * Ordering with CUDA (device memory; the rules of transport.h, in short). The shim copies on its own
 * streams, and over CUDA IPC the peer process copies; they are ordered after none of the caller's
 * streams. So:
 *  - pdshim_offer only once the room's KV is complete on the device: the stream that wrote it has been
 *    synchronized (cudaStreamSynchronize, cudaEventSynchronize on an event recorded after the writes,
 *    torch.cuda.synchronize()). That the kernels were launched, or that a cudaMemcpy from pageable
 *    memory returned, is not enough.
 *  - pdshim_fetch only once no queued kernel or copy still writes or reads the destination.
 *  - A fetch completed with status 0 (tcp or cuda_ipc) has every byte of the destination written to
 *    device memory by copies that have finished: kernels launched after the callback, on any stream,
 *    read the room. An offer's callback means the source is no longer read.
 *
 * Errors are negative PDR_E* codes, defined below (see pdshim_strerror): PDR_ETIMEDOUT, PDR_EPEERGONE,
 * PDR_ECONNREFUSED, PDR_ESIZE (source and destination sizes differ), PDR_ENOROOM (the prefill never
 * offered this room before the deadline), PDR_ECANCELED, PDR_EEXIST (room already pending here),
 * PDR_EINVAL, PDR_ENOMEM, PDR_ECLOSED; and for tickets PDR_EBADTICKET, PDR_ETICKETEXPIRED, PDR_EFORGED,
 * PDR_EREPLAYED, PDR_EWRONGPEER.
 */
#ifndef PDSHIM_H
#define PDSHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PDSHIM_API __attribute__((visibility("default")))

/*
 * Error codes: the same values as the transport's own table (common/err.h), which defines the same enum
 * under the same guard, so either header may come first. The values are ABI and never change; a test
 * checks this copy and python/pdshim.py against common/err.h. pdshim_strerror describes each.
 */
#ifndef PDR_ERRNO_DEFINED
#define PDR_ERRNO_DEFINED
enum {
    PDR_OK = 0,
    PDR_EAGAIN = -999,         /* operation would block */
    PDR_ENOMEM = -998,         /* out of memory */
    PDR_EINVAL = -997,         /* invalid argument */
    PDR_ETOOBIG = -996,        /* size limit exceeded */
    PDR_ETIMEDOUT = -995,      /* the operation's deadline passed */
    PDR_ECANCELED = -994,      /* canceled by pdshim_cancel or by the peer */
    PDR_EPEERGONE = -993,      /* the peer closed the connection */
    PDR_ECONNREFUSED = -992,   /* the peer's bootstrap port refused the connection */
    PDR_ESIZE = -991,          /* source and destination sizes differ */
    PDR_ENOROOM = -990,        /* the room is unknown (never offered, or nothing pending) */
    PDR_EEXIST = -989,         /* the room is already pending here */
    PDR_EPROTO = -988,         /* protocol error */
    PDR_EIO = -987,            /* input/output error (socket, CUDA or verbs) */
    PDR_ENOWORKER = -986,      /* no healthy worker (router only) */
    PDR_ECONFIG = -985,        /* invalid configuration (router only) */
    PDR_ENOTSUP = -984,        /* not supported (e.g. device memory without a CUDA driver) */
    PDR_ECLOSED = -983,        /* the shim is shutting down */
    PDR_EBADTICKET = -982,     /* the ticket is malformed (length, syntax, fields) */
    PDR_ETICKETEXPIRED = -981, /* the ticket's expiry has passed (beyond the allowed clock skew) */
    PDR_EFORGED = -980,        /* the ticket's MAC is wrong or its key id is unknown */
    PDR_EREPLAYED = -979,      /* this shim already accepted this ticket (its room) in this role */
    PDR_EWRONGPEER = -978,     /* the ticket names another prefill port or another decode */
};
#endif

typedef struct pdshim pdshim_t;

typedef struct pdshim_seg {
    void *addr; /* host memory, or device memory inside a region given to pdshim_mem_register */
    size_t len;
} pdshim_seg_t;

/* Zero-initialize, then set what you need: every 0 / NULL field selects the default. */
typedef struct pdshim_opts {
    const char *listen_host;     /* NULL: no listener (a decode-only shim) */
    int listen_port;             /* 0: an ephemeral port, see pdshim_listen_port() */
    uint32_t default_timeout_ms; /* used when an operation passes 0; 0 here means 30000 */
    size_t max_segments;         /* per room; 0 means 65536 */
    /* Transport tuning (docs/internals/transport.md). */
    const char *backend;   /* NULL or "auto": cuda_ipc on one host with GPU memory on both ends, else rdma
                              when both ends have a device, else tcp; or force "tcp" | "rdma" | "cuda_ipc" */
    size_t chunk_bytes;    /* TCP payload per frame and pinned staging buffer size; 0 means 1 MiB */
    size_t staging_chunks; /* pinned staging buffers per TCP connection (GPU memory); 0 means 4 */
    int conns_per_peer;    /* TCP connections per peer, a room striped over them; 0 means 4 */
    int io_threads;        /* I/O threads; 0 means min(4, cores) */
    /* Tickets (protocol pdshim; docs/internals/tickets.md). With key files, pdshim_offer_ticket and
     * pdshim_fetch_ticket verify the router's signed ticket; without, they fail with PDR_EFORGED. */
    const char *const *ticket_key_files; /* the router's key files: every one verifies (rotation) */
    size_t n_ticket_key_files;           /* 0..4 */
    uint32_t ticket_max_skew_ms;         /* clock skew allowed past a ticket's expiry; 0 means 2000 */
    const char *ticket_identity; /* decode: its identity as tickets name it, "host:port" of the URL the
                                    router has for it; NULL: not checked */
    size_t ticket_replay_max;    /* tickets remembered per role until they expire; 0 means 65536 */
    /* Event and load reports to the router (docs/internals/shim-events.md). events_url NULL: none. */
    const char *events_url;      /* "http://HOST:PORT" of the router's admin listener */
    const char *events_key_file; /* this worker's own key (required with events_url), derived from the
                                    router's shim_events.key_file for worker_url (or bootstrap_addr) by
                                    pdrouter --derive-shim-key: the router takes a batch only under the key
                                    of the worker it names */
    const char *worker_url;      /* the URL the router knows this worker by (or set bootstrap_addr) */
    const char *bootstrap_addr;  /* "host:port" of this worker's bootstrap listener, as the router names it */
    uint32_t events_flush_ms;    /* a batch goes at most this long after its first event; 0 means 10 */
    uint32_t load_interval_ms;   /* load is re-sent this often even when unchanged; 0 means 1000 */
    size_t events_queue;         /* events queued at most (more are dropped and counted); 0 means 4096 */
    const uint8_t *instance_id;  /* 16 bytes naming this shim instance; NULL: random per pdshim_create */
} pdshim_opts_t;

/* Kinds of pdshim_mem_register. */
#define PDSHIM_MEM_AUTO 0 /* ask the CUDA driver (host memory without one) */
#define PDSHIM_MEM_HOST 1
#define PDSHIM_MEM_CUDA 2 /* device memory (cudaMalloc / cuMemAlloc, or cuMemCreate) */

/* What one offer or fetch did. */
typedef struct pdshim_result {
    uint64_t room;
    int status;          /* 0 or a negative PDR_E* code */
    uint64_t bytes;      /* bytes moved */
    const char *backend; /* "tcp", "rdma", "cuda_ipc", or "none" when nothing moved (static string) */
    uint64_t usec;       /* from the call to completion */
} pdshim_result_t;
typedef void (*pdshim_result_cb)(void *arg, const pdshim_result_t *result);

/* Called once per offer or fetch, on a shim thread. status is 0 or a negative PDR_E* code; bytes is
 * the number of bytes moved. */
typedef void (*pdshim_done_cb)(void *arg, uint64_t room, int status, uint64_t bytes);

/* Creates a shim and starts its threads. Returns NULL and sets *err on failure. */
PDSHIM_API pdshim_t *pdshim_create(const pdshim_opts_t *opts, int *err);
/* The bound listen port (useful with listen_port 0), or -1 without a listener. */
PDSHIM_API int pdshim_listen_port(const pdshim_t *shim);
/* Fails every pending operation with PDR_ECLOSED (their callbacks run before this returns), closes
 * every connection and joins the threads. Must not be called from a callback. */
PDSHIM_API void pdshim_destroy(pdshim_t *shim);

/* Prefill side: the room's KV is ready in segs; push it to the decode that fetches this room.
 * Completes when the decode acknowledged every byte, or on error/deadline. Returns 0 when accepted
 * (the callback will run) or a negative code (the callback will not run). */
PDSHIM_API int pdshim_offer(pdshim_t *shim, uint64_t room, const pdshim_seg_t *segs, size_t nseg,
                            uint32_t timeout_ms, pdshim_done_cb cb, void *arg);

/* Decode side: fetch the room's KV from the prefill shim at host:port into segs. The total length must
 * equal the offered total (PDR_ESIZE otherwise). Same return convention as pdshim_offer. */
PDSHIM_API int pdshim_fetch(pdshim_t *shim, const char *host, int port, uint64_t room,
                            const pdshim_seg_t *segs, size_t nseg, uint32_t timeout_ms, pdshim_done_cb cb,
                            void *arg);

/* Describes a memory region (the KV pool, typically once at start). Device memory must be registered
 * before a room's segments point into it; host memory needs no registration. A room is all host memory
 * or all memory of one device. Returns 0, PDR_ENOTSUP (PDSHIM_MEM_CUDA without a CUDA driver) or
 * PDR_EINVAL (not device memory, bad kind). */
PDSHIM_API int pdshim_mem_register(pdshim_t *shim, void *addr, size_t len, int kind);
/* Forgets the region registered at addr (no room may use it any more). 0 or PDR_EINVAL. */
PDSHIM_API int pdshim_mem_unregister(pdshim_t *shim, void *addr);

/* As pdshim_offer / pdshim_fetch, with a callback that also says which backend moved the bytes and how
 * long it took. */
PDSHIM_API int pdshim_offer_ex(pdshim_t *shim, uint64_t room, const pdshim_seg_t *segs, size_t nseg,
                               uint32_t timeout_ms, pdshim_result_cb cb, void *arg);
PDSHIM_API int pdshim_fetch_ex(pdshim_t *shim, const char *host, int port, uint64_t room,
                               const pdshim_seg_t *segs, size_t nseg, uint32_t timeout_ms,
                               pdshim_result_cb cb, void *arg);

/*
 * Streamed offers: the KV of a room published in parts while the prefill still computes it (layer by
 * layer, or chunk by chunk), so that each part moves while the next one is computed.
 *
 *   pdshim_offer_open(shim, room, total_bytes, timeout_ms, cb, arg);
 *   for each layer/chunk, once it is complete on the device:
 *       pdshim_offer_part(shim, room, offset, segs, nseg);
 *
 * The room's byte space is the concatenation of the decode's destination segments; a part is the range
 * [offset, offset + the sum of its segments' lengths). Parts come in any order, and every byte of the
 * room is published exactly once. The decode's pdshim_fetch is unchanged and still all-or-nothing: it
 * completes only when every byte is in place. A part's bytes move as soon as both the part and the
 * decode's fetch are known (a part published before the fetch arrives waits for it).
 *
 * Ordering with CUDA: a part is published only once its bytes are complete on the device (the stream
 * that wrote them synchronized, or an event recorded after the writes synchronized), as for
 * pdshim_offer; the shim may copy it at once.
 * Lifetime: the segs array is copied; the memory of every part stays valid and unchanged until the
 * room's callback ran. The callback runs exactly once: with status 0 when the decode acknowledged
 * every byte, or with an error: PDR_ETIMEDOUT when the deadline (timeout_ms from pdshim_offer_open)
 * passed, e.g. because a part was never published (the decode's fetch fails then too), PDR_ECANCELED
 * after pdshim_cancel (which works at any point of the stream), PDR_ESIZE when the decode's total
 * differs, or a transport error. With backend "rdma" forced, pdshim_offer_open returns PDR_ENOTSUP
 * (parts are not written over RDMA; with "auto" such a room goes over TCP).
 * Errors of pdshim_offer_part (nothing else fails, the room goes on): PDR_EINVAL for an empty part, one
 * past total_bytes, one that overlaps a published part, or memory that is not host memory or
 * registered device memory of the same device as the room's first part; PDR_ETOOBIG past 65536 parts
 * or max_segments segments in all; PDR_ENOROOM when no room opened with pdshim_offer_open is pending
 * here (never opened, or already completed or failed).
 */
PDSHIM_API int pdshim_offer_open(pdshim_t *shim, uint64_t room, uint64_t total_bytes, uint32_t timeout_ms,
                                 pdshim_result_cb cb, void *arg);
PDSHIM_API int pdshim_offer_part(pdshim_t *shim, uint64_t room, uint64_t offset, const pdshim_seg_t *segs,
                                 size_t nseg);
/* Bytes moved so far of the pending offer (or, if none, fetch) of this room on this shim, and its total:
 * offer: bytes handed to the decode (over TCP, whole frames accepted by the kernel; over CUDA IPC, bytes
 * whose copies completed); fetch: bytes in place in the destination (over CUDA IPC, 0 until the room is
 * complete: the prefill process does those copies). Either pointer may be
 * NULL. Returns 0, or PDR_ENOROOM when nothing of this room is pending here. */
PDSHIM_API int pdshim_room_progress(pdshim_t *shim, uint64_t room, uint64_t *moved, uint64_t *total);

/* Cancels a pending offer or fetch of this room on this shim: its callback runs with PDR_ECANCELED,
 * and the peer's side of the room fails promptly. Returns 0, or PDR_ENOROOM if nothing is pending. */
PDSHIM_API int pdshim_cancel(pdshim_t *shim, uint64_t room);

/*
 * Tickets (protocol pdshim). The router puts a signed `pd_ticket` in both legs' bodies; it carries the
 * room, the prefill's transport address (bootstrap host and port), the decode's identity and an expiry
 * (docs/internals/tickets.md). These calls take the room, the prefill address and the deadline from the
 * verified ticket, never from the caller. Verification order: length and syntax (PDR_EBADTICKET), key
 * id and MAC, compared in constant time (PDR_EFORGED; also when the shim has no key files), expiry with
 * ticket_max_skew_ms of tolerance (PDR_ETICKETEXPIRED), the peer (PDR_EWRONGPEER: on the prefill side
 * the ticket must name this shim's listen port; on the decode side its identity, when ticket_identity
 * is set), then replay (PDR_EREPLAYED: each shim remembers, per role, the rooms of the tickets it
 * accepted until they expire; when ticket_replay_max of them are live a new ticket is refused with
 * PDR_ETOOBIG rather than one forgotten). A refused ticket moves no bytes, registers nothing and its
 * callback does not run; an accepted one is used up even if the transfer then fails.
 *
 * The operation's deadline is timeout_ms (0: the shim's default) but never past the ticket's expiry.
 *
 * The fetch is bound to the ticket: on the transport both shims name the room by 64 bits of the ticket's
 * MAC, not by its bootstrap room, so a prefill that offered by ticket serves only a decode that fetches
 * with that ticket (a plain pdshim_fetch of the room number finds nothing). Both sides of a room must
 * use the ticket calls. Callbacks report the bootstrap room, and pdshim_cancel takes it.
 */
typedef struct pdshim_ticket_info {
    uint64_t room;
    uint64_t expires_ms;   /* wall clock, ms since the Unix epoch */
    char prefill_host[65]; /* the prefill's transport host (IPv6 without brackets) */
    int prefill_port;      /* its transport (bootstrap) port */
    char decode_id[81];    /* the decode's identity */
    char key_id[9];        /* the key that signed (8 hex digits) */
} pdshim_ticket_info_t;

/* Prefill side: pdshim_offer_ex of the ticket's room. */
PDSHIM_API int pdshim_offer_ticket(pdshim_t *shim, const char *ticket, const pdshim_seg_t *segs, size_t nseg,
                                   uint32_t timeout_ms, pdshim_result_cb cb, void *arg);
/* Prefill side, a streamed offer by ticket: pdshim_offer_open of the ticket's room, refused exactly as
 * pdshim_offer_ticket is (before anything is registered). Its parts are published with
 * pdshim_offer_part(shim, room, ...) and followed with pdshim_room_progress(shim, room, ...), room being
 * the ticket's room (pdshim_ticket_inspect's room; the callback reports it too): the shim maps it to the
 * ticket-bound name on the transport, so only a decode holding the ticket can fetch it. */
PDSHIM_API int pdshim_offer_open_ticket(pdshim_t *shim, const char *ticket, uint64_t total_bytes,
                                        uint32_t timeout_ms, pdshim_result_cb cb, void *arg);
/* Decode side: pdshim_fetch_ex of the ticket's room from the prefill address inside the ticket. */
PDSHIM_API int pdshim_fetch_ticket(pdshim_t *shim, const char *ticket, const pdshim_seg_t *segs, size_t nseg,
                                   uint32_t timeout_ms, pdshim_result_cb cb, void *arg);
/* Verifies a ticket (syntax, key, MAC, expiry; neither the peer nor replay, and nothing is used up) and
 * returns its fields. 0, PDR_EBADTICKET, PDR_EFORGED, PDR_ETICKETEXPIRED or PDR_EINVAL. */
PDSHIM_API int pdshim_ticket_inspect(pdshim_t *shim, const char *ticket, pdshim_ticket_info_t *out);

PDSHIM_API const char *pdshim_strerror(int status);

/* ---- reports to the router (opts.events_url) ---- */

/* The engine's load, as it knows it; 0 for what it does not know. */
typedef struct pdshim_load {
    uint64_t kv_free_bytes, kv_total_bytes; /* KV cache free and in all */
    uint64_t kv_free_blocks, block_size;    /* in blocks, and tokens per block */
    uint64_t kv_bytes_per_token;            /* KV bytes one token takes */
    uint64_t queue_depth;                   /* requests waiting to run */
} pdshim_load_t;
/* Records the engine's load: sent with the next batch, and every load_interval_ms. Never blocks on the
 * network. 0, PDR_EINVAL, or PDR_ENOTSUP (no events_url). */
PDSHIM_API int pdshim_report_load(pdshim_t *shim, const pdshim_load_t *load);
/* The shim's instance id (16 bytes). 0 or PDR_EINVAL. */
PDSHIM_API int pdshim_instance_id(const pdshim_t *shim, uint8_t out[16]);

/* Room events (the shim reports accepted, done and failed for its own offers and fetches, and while one
 * moves, sampled every events_flush_ms: started once its first bytes moved, then progress whenever more
 * did, with the bytes moved so far and the room's total; an engine may add its own, e.g. accepted when its
 * scheduler takes a room, refused for a request it turns away). */
#define PDSHIM_EV_ACCEPTED 0
#define PDSHIM_EV_STARTED 1
#define PDSHIM_EV_PROGRESS 2
#define PDSHIM_EV_DONE 3
#define PDSHIM_EV_FAILED 4
#define PDSHIM_EV_REFUSED 5
/* Queues one room event (never blocks: a full queue drops it and counts it). status: 0 or a PDR_E* code;
 * reason may be NULL. 0, PDR_EINVAL, PDR_ENOTSUP (no events_url) or PDR_EAGAIN (dropped). */
PDSHIM_API int pdshim_report_room(pdshim_t *shim, uint64_t room, int event, uint64_t bytes, uint64_t total,
                                  int status, const char *reason);
/* Counters of the reporter: batches sent, sent failed, events dropped. Any may be NULL. */
PDSHIM_API void pdshim_events_stats(const pdshim_t *shim, uint64_t *sent, uint64_t *failed,
                                    uint64_t *dropped);

#ifdef __cplusplus
}
#endif
#endif
