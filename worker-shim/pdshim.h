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
 * Errors are negative PDR_E* codes (see pdshim_strerror): PDR_ETIMEDOUT, PDR_EPEERGONE,
 * PDR_ECONNREFUSED, PDR_ESIZE (source and destination sizes differ), PDR_ENOROOM (the prefill never
 * offered this room before the deadline), PDR_ECANCELED, PDR_EEXIST (room already pending here),
 * PDR_EINVAL, PDR_ENOMEM, PDR_ECLOSED.
 */
#ifndef PDSHIM_H
#define PDSHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PDSHIM_API __attribute__((visibility("default")))

typedef struct pdshim pdshim_t;

typedef struct pdshim_seg {
    void *addr; /* host memory in v1 */
    size_t len;
} pdshim_seg_t;

typedef struct pdshim_opts {
    const char *listen_host;     /* NULL: no listener (a decode-only shim) */
    int listen_port;             /* 0: an ephemeral port, see pdshim_listen_port() */
    uint32_t default_timeout_ms; /* used when an operation passes 0; 0 here means 30000 */
    size_t max_segments;         /* per room; 0 means 65536 */
} pdshim_opts_t;

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

/* Cancels a pending offer or fetch of this room on this shim: its callback runs with PDR_ECANCELED,
 * and the peer's side of the room fails promptly. Returns 0, or PDR_ENOROOM if nothing is pending. */
PDSHIM_API int pdshim_cancel(pdshim_t *shim, uint64_t room);

PDSHIM_API const char *pdshim_strerror(int status);

#ifdef __cplusplus
}
#endif
#endif
