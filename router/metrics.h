/*
 * Prometheus metrics (text format 0.0.4): counters and histograms kept per loop thread (no sharing on
 * the request path), summed when rendered, together with the live worker gauges from the pool. Names use the
 * pdr_ prefix and base units (seconds, bytes); counters end in _total.
 */
#ifndef PDR_METRICS_H
#define PDR_METRICS_H

#include <stddef.h>
#include <stdint.h>
#include "pool.h"

enum {
    PDR_MR_GENERATE = 0,
    PDR_MR_COMPLETIONS,
    PDR_MR_CHAT,
    PDR_MR_MODELS,
    PDR_MR_HEALTH,
    PDR_MR_READINESS,
    PDR_MR_METRICS,
    PDR_MR_OTHER,
    PDR_MR__COUNT
};

enum {
    PDR_CAUSE_CONNECT = 0,
    PDR_CAUSE_TIMEOUT,
    PDR_CAUSE_RESET,
    PDR_CAUSE_STATUS_5XX,
    PDR_CAUSE_FIRST_BYTE_DEADLINE,
    PDR_CAUSE_KV_DEADLINE,
    PDR_CAUSE_OTHER,
    PDR_CAUSE__COUNT
};

#define PDR_HIST_BUCKETS 16
typedef struct pdr_hist {
    uint64_t counts[PDR_HIST_BUCKETS + 1]; /* the last one is +Inf */
    double sum;
    uint64_t count;
} pdr_hist_t;

typedef struct pdr_metrics {
    uint64_t requests[PDR_MR__COUNT][600];
    uint64_t upstream_errors[2][PDR_CAUSE__COUNT];
    uint64_t retries_total;
    uint64_t no_worker_total[2];
    uint64_t client_aborts_total;
    uint64_t bytes_in_total, bytes_out_total;
    pdr_hist_t duration[PDR_MR__COUNT];
    pdr_hist_t ttfb[PDR_MR__COUNT];
    uint64_t started_wall_s;
} pdr_metrics_t;

void pdr_hist_observe(pdr_hist_t *h, double seconds);
void pdr_metrics_count_request(pdr_metrics_t *m, int route, int status, double seconds, double ttfb_seconds);

/* Renders every metric: the sum of the n per-thread sets, the pool's gauges, the in-flight count.
 * Returns a malloc'd buffer and its length (NULL when out of memory). */
char *pdr_metrics_render(const pdr_pool_t *pool, const pdr_metrics_t *const *ms, size_t n, int64_t inflight,
                         size_t *len);

#endif
