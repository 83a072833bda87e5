/*
 * Retry budget and back-off (retry.h). Any thread.
 */
#include "retry.h"
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include "util.h"

const char *const pdr_retry_skip_names[PDR_RETRY_SKIP__COUNT] = {"budget"};

static uint64_t active, skipped[PDR_RETRY_SKIP__COUNT];

uint64_t pdr_retry_budget(uint64_t inflight, int percent, int min_concurrent)
{
    uint64_t b = inflight * (uint64_t)(percent > 0 ? percent : 0) / 100;
    uint64_t m = (uint64_t)(min_concurrent > 0 ? min_concurrent : 0);
    return b > m ? b : m;
}

int pdr_retry_acquire(uint64_t inflight, int percent, int min_concurrent)
{
    uint64_t limit = pdr_retry_budget(inflight, percent, min_concurrent);
    uint64_t cur = __atomic_load_n(&active, __ATOMIC_RELAXED);
    do {
        if (cur >= limit)
            return 0;
    } while (!__atomic_compare_exchange_n(&active, &cur, cur + 1, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return 1;
}

void pdr_retry_release(void)
{
    __atomic_sub_fetch(&active, 1, __ATOMIC_RELAXED);
}

uint64_t pdr_retry_active(void)
{
    return __atomic_load_n(&active, __ATOMIC_RELAXED);
}

uint64_t pdr_retry_backoff_ms(int n, int initial_ms, double multiplier, int max_ms, double jitter, double u)
{
    if (initial_ms <= 0 || n < 1)
        return 0;
    double d = (double)initial_ms;
    for (int i = 1; i < n && d < (double)max_ms; i++)
        d *= multiplier;
    if (d > (double)max_ms)
        d = (double)max_ms;
    d *= 1.0 + jitter * (2.0 * u - 1.0);
    if (d > (double)max_ms)
        d = (double)max_ms;
    return d > 0 ? (uint64_t)(d + 0.5) : 0;
}

double pdr_retry_uniform(void)
{
    return (double)(pdr_random_u64() >> 11) / 9007199254740992.0; /* 53 bits: [0, 1) */
}

void pdr_retry_count_skipped(pdr_retry_skip_t why)
{
    __atomic_add_fetch(&skipped[why], 1, __ATOMIC_RELAXED);
}

uint64_t pdr_retry_skipped(pdr_retry_skip_t why)
{
    return __atomic_load_n(&skipped[why], __ATOMIC_RELAXED);
}

char *pdr_retry_render_metrics(size_t *len)
{
    char *p = malloc(1024);
    if (p == NULL)
        return NULL;
    int n = snprintf(p, 1024,
                     "# HELP pdr_retries_skipped_total Failed attempts answered to the client although "
                     "retries.max allowed a retry: the retry budget was spent.\n"
                     "# TYPE pdr_retries_skipped_total counter\n"
                     "pdr_retries_skipped_total{reason=\"budget\"} %llu\n"
                     "# HELP pdr_retries_active Requests holding a slot of the retry budget.\n"
                     "# TYPE pdr_retries_active gauge\npdr_retries_active %llu\n",
                     (unsigned long long)pdr_retry_skipped(PDR_RETRY_SKIP_BUDGET),
                     (unsigned long long)pdr_retry_active());
    if (n < 0 || n >= 1024) {
        free(p);
        return NULL;
    }
    *len = (size_t)n;
    return p;
}

void pdr_retry__reset(void)
{
    __atomic_store_n(&active, 0, __ATOMIC_RELAXED);
    for (int i = 0; i < PDR_RETRY_SKIP__COUNT; i++)
        __atomic_store_n(&skipped[i], 0, __ATOMIC_RELAXED);
}
