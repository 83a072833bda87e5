/*
 * Reading the workers' identities (identify.c, loop 0): the engine's own report of its model and KV
 * layout, read when a worker joins, turns healthy again or restarts; the pool keeps the result
 * (router/workers/identity.h, pool.h).
 */
#ifndef PDR_IDENTIFY_H
#define PDR_IDENTIFY_H

#include "router.h"

/* Loop 0, every drain tick: starts a read for each healthy worker whose identity is due. */
void pdr_identify_tick(pdr_router_t *r);
/* Loop 0: w's identity is void (it turned healthy again, it may have restarted): unknown until read. */
void pdr_identify_forget(pdr_router_t *r, pdr_worker_t *w, const char *why);
/* Loop 0, at shutdown: cancels the reads in progress. */
void pdr_identify_stop(pdr_router_t *r);

#endif
