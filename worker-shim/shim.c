/*
 * libpdshim: the C ABI of pdshim.h over the transport engine (transport.h). A shim is one engine; an
 * offer is a push, a fetch a pull. Any thread may call in; callbacks run on the engine's I/O thread.
 * Only the PDSHIM_API functions are exported (-fvisibility=hidden).
 */
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "err.h"
#include "reporter.h"
#include "shim_internal.h"
#include "util.h"

_Static_assert(sizeof(pdshim_seg_t) == sizeof(pdr_xfer_seg_t), "segment layouts differ");
_Static_assert(offsetof(pdshim_seg_t, addr) == offsetof(pdr_xfer_seg_t, addr), "segment layouts differ");
_Static_assert(offsetof(pdshim_seg_t, len) == offsetof(pdr_xfer_seg_t, len), "segment layouts differ");

static void sample_rooms(void *arg);

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
    if (opts != NULL && opts->instance_id != NULL)
        memcpy(shim->inst, opts->instance_id, sizeof(shim->inst));
    else if (pdr_random_bytes(shim->inst, sizeof(shim->inst)) != 0) {
        pdshim__tickets_free(shim);
        free(shim);
        *err = PDR_EIO;
        return NULL;
    }
    pthread_mutex_init(&shim->act_lock, NULL);
    if (opts != NULL && opts->events_url != NULL) {
        pdshim_opts_t eo = *opts;
        eo.instance_id = shim->inst;
        if ((shim->ev = pdr__shim_ev_create(&eo, err)) == NULL) {
            pthread_mutex_destroy(&shim->act_lock);
            pdshim__tickets_free(shim);
            free(shim);
            return NULL;
        }
    }
    shim->eng = pdr_xfer_engine_create(&o, err);
    if (shim->eng == NULL) {
        pdr__shim_ev_destroy(shim->ev);
        pthread_mutex_destroy(&shim->act_lock);
        pdshim__tickets_free(shim);
        free(shim);
        return NULL;
    }
    if (shim->ev != NULL)
        pdr__shim_ev_set_sampler(shim->ev, sample_rooms, shim);
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
    if (shim->ev != NULL) /* the sampler asks the engine: stopped (and not running) before it goes */
        pdr__shim_ev_set_sampler(shim->ev, NULL, NULL);
    pdr_xfer_engine_destroy(shim->eng); /* callbacks (and their reports) run before it returns */
    pdr__shim_ev_destroy(shim->ev);
    pthread_mutex_destroy(&shim->act_lock);
    pdshim__tickets_free(shim);
    free(shim);
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

/* Every offer and fetch completes through ex_done: the engine's info reshaped for the caller's callback
 * (either kind), and reported to the router when the shim has a reporter. One allocation per operation,
 * freed in the callback. */
struct ex_call {
    pdshim_result_cb cb;
    pdshim_done_cb done;
    void *arg;
    pdshim_t *shim;
    const char *role; /* "prefill" (offer) or "decode" (fetch) */
    uint64_t rroom;   /* the room as the router names it (a ticket's room is not the transport's) */
    /* With a reporter, from its accepted event to its end: in shim->active, under shim->act_lock. */
    pdr_dlink_t link;
    uint64_t xroom, gen; /* the transport's name of the room; the order it joined in */
    uint64_t last;       /* the bytes moved that the last started / progress event said */
    int started;
};

static struct ex_call *ex_new(pdshim_t *shim, pdshim_result_cb cb, pdshim_done_cb done, void *arg,
                              const char *role)
{
    struct ex_call *c = malloc(sizeof(*c));
    if (c != NULL)
        *c = (struct ex_call){.cb = cb, .done = done, .arg = arg, .shim = shim, .role = role};
    return c;
}

/* c's accepted event is queued: the sampler may report its progress from now on (reporter only). */
static void act_join(pdshim_t *shim, struct ex_call *c, uint64_t xroom)
{
    if (shim->ev == NULL)
        return;
    c->xroom = xroom;
    pthread_mutex_lock(&shim->act_lock);
    c->gen = ++shim->act_gen;
    pdr_dqueue_append(&shim->active, &c->link);
    pthread_mutex_unlock(&shim->act_lock);
}

/* Before c's done or failed event is queued: no progress event of c can follow it. */
static void act_leave(pdshim_t *shim, struct ex_call *c)
{
    if (shim->ev == NULL)
        return;
    pthread_mutex_lock(&shim->act_lock);
    pdr_dqueue_unlink(&shim->active, &c->link);
    pthread_mutex_unlock(&shim->act_lock);
}

#define SAMPLE_MAX 256 /* rooms sampled per flush interval (the oldest) */

/* The reporter thread, every flush interval while rooms are in progress: started once a room's first
 * bytes moved, then progress whenever more moved, never once all have (done follows). The transport is
 * asked without act_lock held (its I/O threads take act_lock in ex_done while holding their own locks);
 * the events are queued under it, only for rooms still in progress, so none follows its room's done. */
static void sample_rooms(void *arg)
{
    pdshim_t *shim = arg;
    struct {
        uint64_t gen, xroom, moved, total;
        int ok;
    } s[SAMPLE_MAX];
    size_t n = 0;
    pthread_mutex_lock(&shim->act_lock);
    for (pdr_dlink_t *l = shim->active.head; l != NULL && n < SAMPLE_MAX; l = l->next, n++) {
        const struct ex_call *c = PDR_DLINK_ITEM(l, struct ex_call, link);
        s[n].gen = c->gen;
        s[n].xroom = c->xroom;
    }
    pthread_mutex_unlock(&shim->act_lock);
    for (size_t i = 0; i < n; i++)
        s[i].ok = pdr_xfer_progress(shim->eng, s[i].xroom, &s[i].moved, &s[i].total) == 0;
    pthread_mutex_lock(&shim->act_lock);
    size_t i = 0;
    for (pdr_dlink_t *l = shim->active.head; l != NULL && i < n; l = l->next) {
        struct ex_call *c = PDR_DLINK_ITEM(l, struct ex_call, link);
        while (i < n && s[i].gen < c->gen) /* finished since the snapshot */
            i++;
        if (i == n || s[i].gen != c->gen)
            continue;
        if (s[i].ok && s[i].moved > 0 && s[i].moved < s[i].total && s[i].moved != c->last) {
            pdr__shim_ev_room(shim->ev, c->rroom, c->started ? PDSHIM_EV_PROGRESS : PDSHIM_EV_STARTED,
                              c->role, s[i].moved, s[i].total, 0, NULL, 0, NULL);
            c->started = 1;
            c->last = s[i].moved;
        }
        i++;
    }
    pthread_mutex_unlock(&shim->act_lock);
}

static void ex_done(void *arg, uint64_t room, const pdr_xfer_info_t *info)
{
    act_leave(((struct ex_call *)arg)->shim, arg);
    struct ex_call c = *(struct ex_call *)arg;
    free(arg);
    if (c.shim->ev != NULL) {
        pdr__shim_ev_active(c.shim->ev, -1);
        pdr__shim_ev_room(c.shim->ev, c.rroom, info->status == 0 ? PDSHIM_EV_DONE : PDSHIM_EV_FAILED, c.role,
                          info->bytes, info->bytes, info->usec, info->backend, info->status,
                          info->status == 0 ? NULL : pdr_strerror(info->status));
    }
    if (c.done != NULL) {
        c.done(c.arg, room, info->status, info->bytes);
        return;
    }
    pdshim_result_t r = {room, info->status, info->bytes, info->backend, info->usec};
    c.cb(c.arg, &r);
}

int pdshim__post(pdshim_t *shim, const char *host, int port, uint64_t room, uint64_t rroom,
                 const pdshim_seg_t *segs, size_t nseg, uint32_t timeout_ms, pdshim_result_cb cb,
                 pdshim_done_cb done, void *arg)
{
    if (shim == NULL || (cb == NULL && done == NULL))
        return PDR_EINVAL;
    struct ex_call *c = ex_new(shim, cb, done, arg, host == NULL ? "prefill" : "decode");
    if (c == NULL)
        return PDR_ENOMEM;
    const char *role = c->role;
    c->rroom = rroom;
    /* Reported before the post: once posted, the callback may run (and free c) on an I/O thread at once,
     * and accepted must come before done in the queue. */
    if (shim->ev != NULL) {
        uint64_t total = 0;
        for (size_t i = 0; i < nseg; i++)
            total += segs[i].len;
        pdr__shim_ev_active(shim->ev, 1);
        pdr__shim_ev_room(shim->ev, rroom, PDSHIM_EV_ACCEPTED, role, 0, total, 0, NULL, 0, NULL);
        act_join(shim, c, room);
    }
    int rc = host == NULL ? pdr_xfer_push_ex(shim->eng, room, (const pdr_xfer_seg_t *)segs, nseg, timeout_ms,
                                             ex_done, c)
                          : pdr_xfer_pull_ex(shim->eng, host, port, room, (const pdr_xfer_seg_t *)segs, nseg,
                                             timeout_ms, ex_done, c);
    if (rc != 0) {
        act_leave(shim, c);
        free(c);
        if (shim->ev != NULL) {
            pdr__shim_ev_active(shim->ev, -1);
            pdr__shim_ev_room(shim->ev, rroom, PDSHIM_EV_FAILED, role, 0, 0, 0, NULL, rc, pdr_strerror(rc));
        }
        return rc;
    }
    return 0;
}

PDSHIM_API int pdshim_offer(pdshim_t *shim, uint64_t room, const pdshim_seg_t *segs, size_t nseg,
                            uint32_t timeout_ms, pdshim_done_cb cb, void *arg)
{
    return cb == NULL ? PDR_EINVAL
                      : pdshim__post(shim, NULL, 0, room, room, segs, nseg, timeout_ms, NULL, cb, arg);
}

PDSHIM_API int pdshim_fetch(pdshim_t *shim, const char *host, int port, uint64_t room,
                            const pdshim_seg_t *segs, size_t nseg, uint32_t timeout_ms, pdshim_done_cb cb,
                            void *arg)
{
    if (host == NULL || cb == NULL)
        return PDR_EINVAL;
    return pdshim__post(shim, host, port, room, room, segs, nseg, timeout_ms, NULL, cb, arg);
}

PDSHIM_API int pdshim_offer_ex(pdshim_t *shim, uint64_t room, const pdshim_seg_t *segs, size_t nseg,
                               uint32_t timeout_ms, pdshim_result_cb cb, void *arg)
{
    return cb == NULL ? PDR_EINVAL
                      : pdshim__post(shim, NULL, 0, room, room, segs, nseg, timeout_ms, cb, NULL, arg);
}

PDSHIM_API int pdshim_fetch_ex(pdshim_t *shim, const char *host, int port, uint64_t room,
                               const pdshim_seg_t *segs, size_t nseg, uint32_t timeout_ms,
                               pdshim_result_cb cb, void *arg)
{
    if (host == NULL || cb == NULL)
        return PDR_EINVAL;
    return pdshim__post(shim, host, port, room, room, segs, nseg, timeout_ms, cb, NULL, arg);
}

PDSHIM_API int pdshim_report_load(pdshim_t *shim, const pdshim_load_t *load)
{
    if (shim == NULL || load == NULL)
        return PDR_EINVAL;
    if (shim->ev == NULL)
        return PDR_ENOTSUP;
    pdr__shim_ev_load(shim->ev, load);
    return 0;
}

PDSHIM_API int pdshim_instance_id(const pdshim_t *shim, uint8_t out[16])
{
    if (shim == NULL || out == NULL)
        return PDR_EINVAL;
    memcpy(out, shim->inst, sizeof(shim->inst));
    return 0;
}

PDSHIM_API int pdshim_report_room(pdshim_t *shim, uint64_t room, int event, uint64_t bytes, uint64_t total,
                                  int status, const char *reason)
{
    if (shim == NULL)
        return PDR_EINVAL;
    if (shim->ev == NULL)
        return PDR_ENOTSUP;
    return pdr__shim_ev_room(shim->ev, room, event, "engine", bytes, total, 0, NULL, status, reason);
}

void pdshim__report_refused(pdshim_t *shim, uint64_t room, int role, int status)
{
    if (shim != NULL && shim->ev != NULL)
        pdr__shim_ev_room(shim->ev, room, PDSHIM_EV_REFUSED, role == 0 ? "prefill" : "decode", 0, 0, 0, NULL,
                          status, pdr_strerror(status));
}

PDSHIM_API void pdshim_events_stats(const pdshim_t *shim, uint64_t *sent, uint64_t *failed, uint64_t *dropped)
{
    uint64_t z = 0;
    if (shim == NULL || shim->ev == NULL) {
        if (sent)
            *sent = z;
        if (failed)
            *failed = z;
        if (dropped)
            *dropped = z;
        return;
    }
    pdr__shim_ev_stats(shim->ev, sent, failed, dropped);
}

PDSHIM_API int pdshim_offer_open(pdshim_t *shim, uint64_t room, uint64_t total_bytes, uint32_t timeout_ms,
                                 pdshim_result_cb cb, void *arg)
{
    return pdshim__open(shim, room, room, total_bytes, timeout_ms, cb, arg);
}

int pdshim__open(pdshim_t *shim, uint64_t room, uint64_t rroom, uint64_t total_bytes, uint32_t timeout_ms,
                 pdshim_result_cb cb, void *arg)
{
    if (shim == NULL || cb == NULL)
        return PDR_EINVAL;
    struct ex_call *c = ex_new(shim, cb, NULL, arg, "prefill");
    if (c == NULL)
        return PDR_ENOMEM;
    c->rroom = rroom;
    /* Reported before the post, as in pdshim__post: the callback may free c at once. */
    if (shim->ev != NULL) {
        pdr__shim_ev_active(shim->ev, 1);
        pdr__shim_ev_room(shim->ev, rroom, PDSHIM_EV_ACCEPTED, "prefill", 0, total_bytes, 0, NULL, 0, NULL);
        act_join(shim, c, room);
    }
    int rc = pdr_xfer_push_open(shim->eng, room, total_bytes, timeout_ms, ex_done, c);
    if (rc != 0) {
        act_leave(shim, c);
        free(c);
        if (shim->ev != NULL) {
            pdr__shim_ev_active(shim->ev, -1);
            pdr__shim_ev_room(shim->ev, rroom, PDSHIM_EV_FAILED, "prefill", 0, 0, 0, NULL, rc,
                              pdr_strerror(rc));
        }
    }
    return rc;
}

PDSHIM_API int pdshim_offer_part(pdshim_t *shim, uint64_t room, uint64_t offset, const pdshim_seg_t *segs,
                                 size_t nseg)
{
    if (shim == NULL)
        return PDR_EINVAL;
    /* A room opened by ticket (pdshim_offer_open_ticket) runs on the transport under its ticket-derived
     * name; the caller names it by the ticket's room. */
    uint64_t x = pdshim__ticket_xroom(shim, 0, room);
    if (x != 0 && x != room) {
        int rc = pdr_xfer_push_part(shim->eng, x, offset, (const pdr_xfer_seg_t *)segs, nseg);
        if (rc != PDR_ENOROOM)
            return rc;
    }
    return pdr_xfer_push_part(shim->eng, room, offset, (const pdr_xfer_seg_t *)segs, nseg);
}

PDSHIM_API int pdshim_room_progress(pdshim_t *shim, uint64_t room, uint64_t *moved, uint64_t *total)
{
    if (shim == NULL)
        return PDR_EINVAL;
    for (int role = 0; role < 2; role++) { /* by ticket: the offer's, then the fetch's transport name */
        uint64_t x = pdshim__ticket_xroom(shim, role, room);
        if (x != 0 && x != room && pdr_xfer_progress(shim->eng, x, moved, total) == 0)
            return 0;
    }
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
