/*
 * A snapshot's workers that no worker of the router matched when it was loaded (kvsnap_park.c): a
 * Kubernetes pod or a DNS name that discovery lists only after the start. Their entries are kept (the
 * router bounds for how long) and loaded into the index when a worker of that name joins. Not thread-safe:
 * one thread owns a parked set (the router's loop 0).
 */
#ifndef PDR_KVSNAP_PARK_H
#define PDR_KVSNAP_PARK_H

#include <stddef.h>
#include <stdint.h>

#include "kvsnap.h"

typedef struct pdr_kv_park pdr_kv_park_t;

/*
 * Takes the workers of snap that have id 0 and were heard from (seen), with their entries, in the
 * snapshot's order; names are copied (snap's point into a buffer the caller frees). snap itself is left
 * as it was. NULL when there is no such worker, or without memory (*nomem set then).
 */
pdr_kv_park_t *pdr_kv_park_new(const pdr_kvsnap_t *snap, int *nomem);
/*
 * The worker `name` joined the pool as uid: its parked entries are loaded into ix (as the snapshot's
 * import does: warm when it was in sync, unless the index already knows uid) and forgotten. Returns the
 * entries loaded (0: none parked under that name). *rc: the import's result.
 */
uint64_t pdr_kv_park_adopt(pdr_kv_park_t *p, struct pdr_kvindex *ix, const char *name, uint64_t uid, int *rc);
/* Workers and entries still parked. */
size_t pdr_kv_park_workers(const pdr_kv_park_t *p);
size_t pdr_kv_park_entries(const pdr_kv_park_t *p);
/* The name of parked worker i (i < pdr_kv_park_workers), NUL-ended. */
const char *pdr_kv_park_name(const pdr_kv_park_t *p, size_t i);
void pdr_kv_park_free(pdr_kv_park_t *p);

#endif
