/* Snapshots of the precise prefix index on disk and from a sibling router (kv_snapshot.c). */
#ifndef PDR_KV_SNAPSHOT_H
#define PDR_KV_SNAPSHOT_H

#include <stddef.h>

struct pdr_router;
struct pdr_kvindex;
typedef struct pdr_kv_snap pdr_kv_snap_t;

/* Whether the configuration asks for snapshots (kv_events.snapshot_path or kv_events.snapshot_from). */
int pdr_kv_snapshot_wanted(const struct pdr_router *r);

/*
 * At start, before any loop runs and before the first subscription: fetches the index from
 * kv_events.snapshot_from, else reads kv_events.snapshot_path, and loads it into ix (blocking, bounded by
 * kv_events.snapshot_fetch_timeout_ms and kv_events.max_index_bytes); any failure is logged and counted,
 * and the index stays empty. Then starts the save timer on loop 0. NULL: out of memory (logged).
 */
pdr_kv_snap_t *pdr_kv_snapshot_start(struct pdr_router *r, struct pdr_kvindex *ix);
/* Loop 0, at shutdown, while the index still holds every subscribed worker: the last save, then the
 * timer's close. */
void pdr_kv_snapshot_stop(pdr_kv_snap_t *s);
/* After every loop has ended. */
void pdr_kv_snapshot_free(pdr_kv_snap_t *s);
/* Loop 0, when w is subscribed (it joined the pool after the load): the loaded snapshot's entries for a
 * worker of its name, parked since, go into the index before its first message. */
struct pdr_worker;
void pdr_kv_snapshot_adopt(pdr_kv_snap_t *s, const struct pdr_worker *w);
/* Loop 0, once a second: parked entries past their time are dropped (logged). */
void pdr_kv_snapshot_tick(pdr_kv_snap_t *s);

/* What an encoding ends with: rc 0 and buf[0..len) (malloc'd: the callee frees it, NULL otherwise), or a
 * PDR_E* code (PDR_ETOOBIG: past kv_events.max_index_bytes) and msg. */
typedef void (*pdr_kv_snapshot_done_cb)(void *data, int rc, char *buf, size_t len, const char *msg);
/*
 * Loop 0 (the admin API's GET /admin/v1/kv-index/snapshot): copies the index now (under its lock) and
 * encodes the copy on libuv's thread pool; cb runs later on loop 0, never from this call. Returns 0 (cb
 * will run), PDR_ENOTSUP when no pool uses the index, or PDR_ENOMEM; msg says why.
 */
int pdr_kv_snapshot_encode_async(struct pdr_router *r, pdr_kv_snapshot_done_cb cb, void *data, char *msg,
                                 size_t cap);

typedef void (*pdr_kv_snapshot_put_cb)(void *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Any loop: pdr_kv_index_snapshots_total, pdr_kv_index_snapshot_loaded_entries,
 * pdr_kv_index_snapshot_parked_entries and pdr_kv_index_snapshot_warm_workers. */
void pdr_kv_snapshot_metrics(struct pdr_router *r, pdr_kv_snapshot_put_cb put, void *out);

#endif
