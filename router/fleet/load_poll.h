/*
 * The engines' own load, read on loop 0 every load.poll_ms (docs/operations.md "Engine load"): GET
 * /get_load of a worker whose pool speaks sglang or pdshim (a data-parallel rank target reads its own
 * rank's object), GET /metrics of a vLLM one, parsed by
 * util/engine_load.c into the worker's engine fields (pool.h) that the picks read through
 * workers/pool_load.h. A read that fails, passes load.timeout_ms or answers garbage leaves the worker's
 * engine load unknown (never idle); each read is counted by outcome and a worker's change between a good
 * and a failing read is logged once.
 */
#ifndef PDR_LOAD_POLL_H
#define PDR_LOAD_POLL_H

#include <jansson.h>
#include <stdint.h>

struct pdr_router;
struct pdr_worker;

/* The outcomes of one read (pdr_engine_load_poll_total{outcome}). */
enum { PDR_ELP_OK = 0, PDR_ELP_FAILED, PDR_ELP_TIMEOUT, PDR_ELP_GARBAGE, PDR_ELP__COUNT };
extern const char *const pdr_engine_load_outcomes[PDR_ELP__COUNT]; /* ok, failed, timeout, garbage */

/* Loop 0, every health tick: starts the reads that are due (each worker at most one at a time). */
void pdr_engine_load_tick(struct pdr_router *r);
/* Loop 0, at shutdown: cancels the reads in progress. */
void pdr_engine_load_stop(struct pdr_router *r);
/* The worker's engine load for the admin listing: {"source", "state", and what the engine said}. */
json_t *pdr_engine_load_worker_json(struct pdr_router *r, const struct pdr_worker *w);

typedef void (*pdr_engine_load_put_cb)(void *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Any loop: pdr_engine_load_poll_total and the pdr_worker_engine_* / pdr_worker_load_source families. */
void pdr_engine_load_metrics(struct pdr_router *r, pdr_engine_load_put_cb put, void *out);

#endif
