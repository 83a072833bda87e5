/*
 * Retry budget and back-off (retry.c). The budget is Envoy's: at most retries.budget_percent of the
 * requests in flight may be retrying at once, and never fewer than retries.min_concurrent; a failed
 * attempt past it is answered to the client (counted as skipped, reason "budget"). A request holds one
 * slot of the budget from its first retry to its end. The back-off before retry n (1, 2, ...) is
 * initial_backoff_ms x backoff_multiplier^(n-1), at most max_backoff_ms, times a factor drawn uniformly in
 * [1 - jitter_factor, 1 + jitter_factor] (then capped at max_backoff_ms again), as the sglang router does;
 * pd/failure.c cuts it short so that it ends by the request's first-byte deadline counted from its arrival.
 * Any thread: the count of retrying requests is one atomic for the process.
 */
#ifndef PDR_RETRY_H
#define PDR_RETRY_H

#include <stddef.h>
#include <stdint.h>

typedef enum { PDR_RETRY_SKIP_BUDGET = 0, PDR_RETRY_SKIP__COUNT } pdr_retry_skip_t;
extern const char *const pdr_retry_skip_names[PDR_RETRY_SKIP__COUNT]; /* "budget" */

/* How many requests may be retrying at once with `inflight` requests in flight: max(min_concurrent,
 * inflight x percent / 100). */
uint64_t pdr_retry_budget(uint64_t inflight, int percent, int min_concurrent);
/* Takes a slot of the budget: 1 when one was free (the caller releases it with pdr_retry_release at the
 * request's end), 0 when the budget is spent. */
int pdr_retry_acquire(uint64_t inflight, int percent, int min_concurrent);
void pdr_retry_release(void);
/* Requests holding a slot now. */
uint64_t pdr_retry_active(void);

/* The wait before retry n (n >= 1), in ms; u is a uniform draw in [0, 1) (the jitter). */
uint64_t pdr_retry_backoff_ms(int n, int initial_ms, double multiplier, int max_ms, double jitter, double u);
/* A uniform draw in [0, 1) from the per-thread CSPRNG buffer. */
double pdr_retry_uniform(void);

void pdr_retry_count_skipped(pdr_retry_skip_t why);
uint64_t pdr_retry_skipped(pdr_retry_skip_t why);
/* pdr_retries_skipped_total (malloc'd text, *len its length; NULL when out of memory). */
char *pdr_retry_render_metrics(size_t *len);
/* Tests: zeroes the counters and the slots. */
void pdr_retry__reset(void);

#endif
