/*
 * libpdshim: the C ABI of pdshim.h over the transport engine (transport.h). A shim is one engine; an
 * offer is a push, a fetch a pull. Any thread may call in; callbacks run on the engine's I/O thread.
 * Only the PDSHIM_API functions are exported (-fvisibility=hidden).
 */
#include <stddef.h>
#include <stdlib.h>
#include "err.h"
#include "shim_internal.h"

_Static_assert(sizeof(pdshim_seg_t) == sizeof(pdr_xfer_seg_t), "segment layouts differ");
_Static_assert(offsetof(pdshim_seg_t, addr) == offsetof(pdr_xfer_seg_t, addr), "segment layouts differ");
_Static_assert(offsetof(pdshim_seg_t, len) == offsetof(pdr_xfer_seg_t, len), "segment layouts differ");

PDSHIM_API pdshim_t *pdshim_create(const pdshim_opts_t *opts, int *err)
{
    int dummy;
    if (err == NULL)
        err = &dummy;
    pdr_xfer_opts_t o = {0};
    if (opts != NULL) {
        o.listen_host = opts->listen_host;
        o.listen_port = opts->listen_port;
        o.default_timeout_ms = opts->default_timeout_ms;
        o.max_segments = opts->max_segments;
        o.backend = opts->backend;
        o.chunk_bytes = opts->chunk_bytes;
        o.staging_chunks = opts->staging_chunks;
        o.conns_per_peer = opts->conns_per_peer;
        o.io_threads = opts->io_threads;
    }
    pdshim_t *shim = calloc(1, sizeof(*shim));
    if (shim == NULL) {
        *err = PDR_ENOMEM;
        return NULL;
    }
    int rc = pdshim__tickets_init(shim, opts);
    if (rc != 0) {
        *err = rc;
        pdshim__tickets_free(shim);
        free(shim);
        return NULL;
    }
    shim->eng = pdr_xfer_engine_create(&o, err);
    if (shim->eng == NULL) {
        pdshim__tickets_free(shim);
        free(shim);
        return NULL;
    }
    return shim;
}

PDSHIM_API int pdshim_listen_port(const pdshim_t *shim)
{
    return shim != NULL ? pdr_xfer_listen_port(shim->eng) : -1;
}

PDSHIM_API void pdshim_destroy(pdshim_t *shim)
{
    if (shim == NULL)
        return;
    pdr_xfer_engine_destroy(shim->eng);
    pdshim__tickets_free(shim);
    free(shim);
}

PDSHIM_API int pdshim_offer(pdshim_t *shim, uint64_t room, const pdshim_seg_t *segs, size_t nseg,
                            uint32_t timeout_ms, pdshim_done_cb cb, void *arg)
{
    if (shim == NULL || cb == NULL)
        return PDR_EINVAL;
    return pdr_xfer_push(shim->eng, room, (const pdr_xfer_seg_t *)segs, nseg, timeout_ms, cb, arg);
}

PDSHIM_API int pdshim_fetch(pdshim_t *shim, const char *host, int port, uint64_t room,
                            const pdshim_seg_t *segs, size_t nseg, uint32_t timeout_ms, pdshim_done_cb cb,
                            void *arg)
{
    if (shim == NULL || cb == NULL)
        return PDR_EINVAL;
    return pdr_xfer_pull(shim->eng, host, port, room, (const pdr_xfer_seg_t *)segs, nseg, timeout_ms, cb,
                         arg);
}

PDSHIM_API int pdshim_mem_register(pdshim_t *shim, void *addr, size_t len, int kind)
{
    if (shim == NULL)
        return PDR_EINVAL;
    int k = kind == PDSHIM_MEM_AUTO   ? PDR_XFER_MEM_AUTO
            : kind == PDSHIM_MEM_HOST ? PDR_XFER_MEM_HOST
            : kind == PDSHIM_MEM_CUDA ? PDR_XFER_MEM_CUDA
                                      : -1;
    if (k < 0)
        return PDR_EINVAL;
    return pdr_xfer_mem_register(shim->eng, addr, len, k);
}

PDSHIM_API int pdshim_mem_unregister(pdshim_t *shim, void *addr)
{
    if (shim == NULL)
        return PDR_EINVAL;
    return pdr_xfer_mem_unregister(shim->eng, addr);
}

/* The _ex callbacks: the engine's info, reshaped. One allocation per operation, freed in the callback. */
struct ex_call {
    pdshim_result_cb cb;
    void *arg;
};

static struct ex_call *ex_new(pdshim_result_cb cb, void *arg)
{
    struct ex_call *c = malloc(sizeof(*c));
    if (c != NULL) {
        c->cb = cb;
        c->arg = arg;
    }
    return c;
}

static void ex_done(void *arg, uint64_t room, const pdr_xfer_info_t *info)
{
    struct ex_call c = *(struct ex_call *)arg;
    free(arg);
    pdshim_result_t r = {room, info->status, info->bytes, info->backend, info->usec};
    c.cb(c.arg, &r);
}

PDSHIM_API int pdshim_offer_ex(pdshim_t *shim, uint64_t room, const pdshim_seg_t *segs, size_t nseg,
                               uint32_t timeout_ms, pdshim_result_cb cb, void *arg)
{
    if (shim == NULL || cb == NULL)
        return PDR_EINVAL;
    struct ex_call *c = ex_new(cb, arg);
    if (c == NULL)
        return PDR_ENOMEM;
    int rc = pdr_xfer_push_ex(shim->eng, room, (const pdr_xfer_seg_t *)segs, nseg, timeout_ms, ex_done, c);
    if (rc != 0)
        free(c);
    return rc;
}

PDSHIM_API int pdshim_fetch_ex(pdshim_t *shim, const char *host, int port, uint64_t room,
                               const pdshim_seg_t *segs, size_t nseg, uint32_t timeout_ms,
                               pdshim_result_cb cb, void *arg)
{
    if (shim == NULL || cb == NULL)
        return PDR_EINVAL;
    struct ex_call *c = ex_new(cb, arg);
    if (c == NULL)
        return PDR_ENOMEM;
    int rc = pdr_xfer_pull_ex(shim->eng, host, port, room, (const pdr_xfer_seg_t *)segs, nseg, timeout_ms,
                              ex_done, c);
    if (rc != 0)
        free(c);
    return rc;
}

PDSHIM_API int pdshim_offer_open(pdshim_t *shim, uint64_t room, uint64_t total_bytes, uint32_t timeout_ms,
                                 pdshim_result_cb cb, void *arg)
{
    if (shim == NULL || cb == NULL)
        return PDR_EINVAL;
    struct ex_call *c = ex_new(cb, arg);
    if (c == NULL)
        return PDR_ENOMEM;
    int rc = pdr_xfer_push_open(shim->eng, room, total_bytes, timeout_ms, ex_done, c);
    if (rc != 0)
        free(c);
    return rc;
}

PDSHIM_API int pdshim_offer_part(pdshim_t *shim, uint64_t room, uint64_t offset, const pdshim_seg_t *segs,
                                 size_t nseg)
{
    if (shim == NULL)
        return PDR_EINVAL;
    return pdr_xfer_push_part(shim->eng, room, offset, (const pdr_xfer_seg_t *)segs, nseg);
}

PDSHIM_API int pdshim_room_progress(pdshim_t *shim, uint64_t room, uint64_t *moved, uint64_t *total)
{
    if (shim == NULL)
        return PDR_EINVAL;
    return pdr_xfer_progress(shim->eng, room, moved, total);
}

PDSHIM_API int pdshim_cancel(pdshim_t *shim, uint64_t room)
{
    if (shim == NULL)
        return PDR_EINVAL;
    /* A room offered or fetched by ticket runs on the transport under its ticket-derived name. */
    int rc = pdr_xfer_cancel(shim->eng, room);
    for (int role = 0; role < 2; role++) {
        uint64_t x = pdshim__ticket_xroom(shim, role, room);
        if (x != 0 && x != room && pdr_xfer_cancel(shim->eng, x) == 0)
            rc = 0;
    }
    return rc;
}

PDSHIM_API const char *pdshim_strerror(int status)
{
    return status == 0 ? "success" : pdr_strerror(status);
}
