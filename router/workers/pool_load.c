/*
 * A worker's load by the best source fresh now (pool_load.h). Any thread.
 */
#include "pool_load.h"

const char *const pdr_load_source_names[PDR_LOAD_SRC__COUNT] = {"router", "engine", "shim"};

#define LD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)

int pdr_worker_engine_fresh(const pdr_worker_t *w, int poll_ms, int timeout_ms, uint64_t now_ms)
{
    uint64_t ok = __atomic_load_n(&w->engine.ok_ms, __ATOMIC_ACQUIRE);
    if (poll_ms <= 0 || ok == 0 || LD(w->engine.state) != PDR_ELOAD_OK)
        return 0;
    return now_ms <= ok + 3 * (uint64_t)poll_ms + (uint64_t)timeout_ms;
}

/* sample + (in flight now - in flight when sampled), never below 0. */
static uint64_t corrected(uint64_t sample, int64_t at, int now)
{
    int64_t v = (int64_t)(sample > INT64_MAX / 2 ? INT64_MAX / 2 : sample) + ((int64_t)now - at);
    return v > 0 ? (uint64_t)v : 0;
}

int pdr_worker_load(const pdr_worker_t *w, int poll_ms, int timeout_ms, uint64_t now_ms, uint64_t *load,
                    int *fell_back)
{
    int inflight = pdr_worker_inflight(w);
    *fell_back = 0;
    *load = (uint64_t)(inflight > 0 ? inflight : 0);
    if (poll_ms <= 0)
        return PDR_LOAD_SRC_ROUTER;
    uint64_t rep = __atomic_load_n(&w->load.report_ms, __ATOMIC_ACQUIRE);
    if (rep != 0 && now_ms <= rep + PDR_LOAD_SHIM_MAX_AGE_MS) {
        *load = corrected(LD(w->load.queue_depth), LD(w->load.inflight_rep), inflight);
        return PDR_LOAD_SRC_SHIM;
    }
    if (pdr_worker_engine_fresh(w, poll_ms, timeout_ms, now_ms)) {
        *load = corrected(LD(w->engine.reqs), LD(w->engine.inflight_at), inflight);
        return PDR_LOAD_SRC_ENGINE;
    }
    *fell_back = 1;
    return PDR_LOAD_SRC_ROUTER;
}
