/*
 * The load a policy weighs for a worker, from the best source fresh now (docs/operations.md "Engine load"):
 *
 *   shim    its libpdshim's signed load report (fleet/shim_events.c), at most PDR_LOAD_SHIM_MAX_AGE_MS old:
 *           the requests it says are queued;
 *   engine  its engine's own answer to the load poll (fleet/load_poll.c: sglang's /get_load, vLLM's
 *           /metrics), at most three polls (and one timeout) old: the requests running and waiting;
 *   router  the router's own count of its requests in flight on the worker.
 *
 * A report or an answer is a sample of the past: the requests the router started (or ended) on the worker
 * since are added (or taken off), so that picks between two polls do not all pile on the worker that was
 * idle when it was read. With load.poll_ms 0 (the default) the router's count is the only source, as it was
 * before the poll existed. A worker whose engine answer is not fresh (its poll failed, timed out or answered
 * garbage, or none came yet) is weighed by the router's count: pdr_worker_load says so, and the pick counts
 * it as a fall-back. Any thread: reads atomics only.
 */
#ifndef PDR_POOL_LOAD_H
#define PDR_POOL_LOAD_H

#include <stdint.h>
#include "pool.h"

enum { PDR_LOAD_SRC_ROUTER = 0, PDR_LOAD_SRC_ENGINE, PDR_LOAD_SRC_SHIM, PDR_LOAD_SRC__COUNT };
/* "router", "engine", "shim" */
extern const char *const pdr_load_source_names[PDR_LOAD_SRC__COUNT];

/* The state of a worker's last engine load poll (pdr_worker_t.engine.state). */
enum { PDR_ELOAD_NONE = 0, PDR_ELOAD_OK, PDR_ELOAD_FAILED };

/* 10 s, as decode admission's limit on a shim report's age (fleet/shim_events_internal.h). */
#define PDR_LOAD_SHIM_MAX_AGE_MS 10000

/* Whether the engine's last answer is fresh at now_ms: good, and at most 3 * poll_ms + timeout_ms old. */
int pdr_worker_engine_fresh(const pdr_worker_t *w, int poll_ms, int timeout_ms, uint64_t now_ms);

/* w's load in *load and its source (PDR_LOAD_SRC_*); *fell_back 1 when the poll is on but the engine's
 * answer is not fresh and no shim reports (the router's count stands in). poll_ms/timeout_ms: load.*. */
int pdr_worker_load(const pdr_worker_t *w, int poll_ms, int timeout_ms, uint64_t now_ms, uint64_t *load,
                    int *fell_back);

#endif
