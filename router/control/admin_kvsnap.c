/*
 * The admin API's GET /admin/v1/kv-index/snapshot (docs/admin-api.md): the precise prefix index as the
 * checksummed snapshot of docs/internals/routing.md, which a new replica with kv_events.snapshot_from
 * loads at start. Loop 0 (the admin listener's): the copy is taken here, the encoding runs on libuv's
 * thread pool (fleet/kv_snapshot.c) and the answer goes when it is done.
 */
#include <stdlib.h>

#include "control.h"
#include "err.h"
#include "kv_snapshot.h"
#include "reply.h"
#include "router.h"

/* GET /admin/v1/kv-index/snapshot waits for its encoding (kv_snapshot.c, on libuv's thread pool); the
 * anchor in the request's pool forgets the wait if the request goes first (its client left). */
typedef struct kv_snap_wait {
    h2o_req_t *req; /* NULL once the request is gone */
    struct kv_snap_wait **anchor;
    pdr_thread_t *t;
} kv_snap_wait_t;

static void on_kv_snap_req_dispose(void *p)
{
    kv_snap_wait_t *w = *(kv_snap_wait_t **)p;
    if (w != NULL)
        w->req = NULL;
}

static void on_kv_snap_encoded(void *data, int rc, char *buf, size_t len, const char *msg)
{
    kv_snap_wait_t *w = data;
    if (w->req != NULL) {
        *w->anchor = NULL;
        if (rc == 0)
            pdr_send_body(w->req, 200, "application/octet-stream", buf, len);
        else
            pdr_send_error(w->req, 503, "service_unavailable", msg, 1);
        pdr_metrics_count_request(&w->t->m, PDR_MR_OTHER, rc == 0 ? 200 : 503, 0, -1);
    }
    free(buf);
    free(w);
}

/* The precise prefix index's snapshot, in the binary format of docs/internals/routing.md: copied here
 * (under the index's lock), encoded off the loop, answered when done. */
void pdr__admin_kv_snapshot(pdr_router_t *r, pdr_thread_t *t, h2o_req_t *req)
{
    char msg[256] = "";
    kv_snap_wait_t *w = calloc(1, sizeof(*w));
    kv_snap_wait_t **anchor =
        w != NULL ? h2o_mem_alloc_shared(&req->pool, sizeof(*anchor), on_kv_snap_req_dispose) : NULL;
    int rc = PDR_ENOMEM;
    if (anchor != NULL) {
        *anchor = w;
        w->req = req;
        w->anchor = anchor;
        w->t = t;
        rc = pdr_kv_snapshot_encode_async(r, on_kv_snap_encoded, w, msg, sizeof(msg));
    }
    if (rc == 0)
        return; /* answered and counted by on_kv_snap_encoded */
    if (anchor != NULL)
        *anchor = NULL;
    free(w);
    if (rc == PDR_ENOTSUP)
        pdr_send_error(req, 409, "conflict_error", msg, 0);
    else
        pdr_send_error(req, 503, "service_unavailable", msg[0] ? msg : "out of memory", 1);
}
