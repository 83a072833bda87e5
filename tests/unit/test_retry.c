/* Unit tests for the retry budget and back-off (router/pd/retry.c): the budget is max(min_concurrent,
 * inflight x percent / 100) and slots are taken and given back exactly (also from many threads); the
 * back-off series grows by the multiplier from initial_backoff_ms up to max_backoff_ms, with the jitter's
 * bounds at u = 0 and u -> 1 and every seeded draw within them; 0 ms initial means no back-off. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "retry.h"
#include "runner.h"

static void test_budget(void)
{
    pdr_retry__reset();
    CHECK(pdr_retry_budget(0, 20, 3) == 3);
    CHECK(pdr_retry_budget(10, 20, 3) == 3);
    CHECK(pdr_retry_budget(15, 20, 3) == 3);
    CHECK(pdr_retry_budget(20, 20, 3) == 4);
    CHECK(pdr_retry_budget(100, 20, 3) == 20);
    CHECK(pdr_retry_budget(99, 20, 3) == 19); /* rounded down */
    CHECK(pdr_retry_budget(100, 0, 0) == 0);
    CHECK(pdr_retry_budget(100, 100, 0) == 100);
    /* 10 requests in flight at 20 %, minimum 3: three may retry, the fourth may not. */
    CHECK(pdr_retry_acquire(10, 20, 3) == 1);
    CHECK(pdr_retry_acquire(10, 20, 3) == 1);
    CHECK(pdr_retry_acquire(10, 20, 3) == 1);
    CHECK(pdr_retry_acquire(10, 20, 3) == 0);
    CHECK(pdr_retry_active() == 3);
    CHECK(pdr_retry_acquire(50, 20, 3) == 1); /* more in flight: more room */
    CHECK(pdr_retry_active() == 4);
    pdr_retry_release();
    CHECK(pdr_retry_acquire(10, 20, 3) == 0);
    pdr_retry_release();
    CHECK(pdr_retry_acquire(10, 20, 3) == 1);
    for (int i = 0; i < 3; i++)
        pdr_retry_release();
    CHECK(pdr_retry_active() == 0);
    CHECK(pdr_retry_acquire(10, 0, 0) == 0);
    pdr_retry_count_skipped(PDR_RETRY_SKIP_BUDGET);
    size_t len;
    char *m = pdr_retry_render_metrics(&len);
    CHECK(m != NULL && strlen(m) == len);
    CHECK(m != NULL && strstr(m, "pdr_retries_skipped_total{reason=\"budget\"} 1\n") != NULL);
    free(m);
}

static void *grab(void *arg)
{
    int *got = arg;
    for (int i = 0; i < 1000; i++)
        if (pdr_retry_acquire(100, 10, 0)) {
            (*got)++;
            if (i % 2 == 0)
                continue; /* kept */
            pdr_retry_release();
            (*got)--;
        }
    return NULL;
}

static void test_budget_threads(void)
{
    pdr_retry__reset();
    pthread_t th[4];
    int got[4] = {0};
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, grab, &got[i]);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    CHECK(got[0] + got[1] + got[2] + got[3] == 10); /* never past the budget, every slot used */
    CHECK(pdr_retry_active() == 10);
    pdr_retry__reset();
}

static void test_backoff(void)
{
    /* The sglang router's defaults without jitter: 50, 75, 112.5, 168.75, ... up to 30 s. */
    CHECK(pdr_retry_backoff_ms(1, 50, 1.5, 30000, 0, 0.5) == 50);
    CHECK(pdr_retry_backoff_ms(2, 50, 1.5, 30000, 0, 0.5) == 75);
    CHECK(pdr_retry_backoff_ms(3, 50, 1.5, 30000, 0, 0.5) == 113);
    CHECK(pdr_retry_backoff_ms(4, 50, 1.5, 30000, 0, 0.5) == 169);
    CHECK(pdr_retry_backoff_ms(30, 50, 1.5, 30000, 0, 0.5) == 30000);
    CHECK(pdr_retry_backoff_ms(1000000, 50, 2, 30000, 0, 0.5) == 30000); /* no overflow */
    CHECK(pdr_retry_backoff_ms(0, 50, 1.5, 30000, 0, 0.5) == 0);
    CHECK(pdr_retry_backoff_ms(3, 0, 2, 30000, 0.2, 0.9) == 0); /* 0: no back-off */
    CHECK(pdr_retry_backoff_ms(3, 100, 2, 1000, 0, 0) == 400);
    CHECK(pdr_retry_backoff_ms(5, 100, 2, 1000, 0, 0) == 1000);
    /* Jitter bounds: u = 0 gives the low end, u -> 1 the high end, capped at the maximum. */
    CHECK(pdr_retry_backoff_ms(1, 100, 2, 1000, 0.2, 0) == 80);
    CHECK(pdr_retry_backoff_ms(1, 100, 2, 1000, 0.2, 0.999999) == 120);
    CHECK(pdr_retry_backoff_ms(5, 100, 2, 1000, 0.2, 0.999999) == 1000);
    CHECK(pdr_retry_backoff_ms(5, 100, 2, 1000, 0.2, 0) == 800);
    CHECK(pdr_retry_backoff_ms(1, 100, 2, 1000, 1, 0) == 0);
    /* Seeded draws stay within [base (1 - j), min(max, base (1 + j))] and spread over it. */
    srand(12345);
    for (int n = 1; n <= 8; n++) {
        double base = 50;
        for (int k = 1; k < n; k++)
            base *= 1.5;
        if (base > 1000)
            base = 1000;
        uint64_t lo = UINT64_MAX, hi = 0;
        for (int i = 0; i < 2000; i++) {
            double u = (double)rand() / ((double)RAND_MAX + 1);
            uint64_t ms = pdr_retry_backoff_ms(n, 50, 1.5, 1000, 0.2, u);
            lo = ms < lo ? ms : lo;
            hi = ms > hi ? ms : hi;
        }
        double want_hi = base * 1.2 > 1000 ? 1000 : base * 1.2;
        CHECK((double)lo >= base * 0.8 - 0.5 && (double)hi <= want_hi + 0.5);
        CHECK((double)lo <= base * 0.8 + base * 0.05 + 1 && (double)hi >= want_hi - base * 0.05 - 1);
    }
    for (int i = 0; i < 1000; i++) {
        double u = pdr_retry_uniform();
        CHECK(u >= 0 && u < 1);
    }
}

static const pdr_test_case_t cases[] = {
    {"budget", test_budget, 30},
    {"budget_threads", test_budget_threads, 30},
    {"backoff", test_backoff, 30},
};

int main(int argc, char **argv)
{
    return PDR_TEST_RUN(cases, argc, argv);
}
