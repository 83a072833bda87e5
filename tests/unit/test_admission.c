/* Unit tests for the admission token bucket (router/fleet/admission.c): it starts full, takes one token per
 * request down to empty, refills at the rate without passing its capacity, says how long until the next
 * token, and a burst of 0 means max(1, rate). Also the rendered admission families. */
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "runner.h"
#include "admission.h"

#define MS 1000000ull
#define S_NS 1000000000ull

static void test_burst_then_empty(void)
{
    pdr_bucket_t b = {0, 0};
    uint64_t t = 5 * S_NS;
    for (int i = 0; i < 3; i++)
        CHECK(pdr_bucket_take(&b, 2, 3, t) == 1);
    CHECK(pdr_bucket_take(&b, 2, 3, t) == 0);
    CHECK(pdr_bucket_take(&b, 2, 3, t) == 0); /* a refusal takes nothing */
}

static void test_refill(void)
{
    pdr_bucket_t b = {0, 0};
    uint64_t t = S_NS;
    CHECK(pdr_bucket_take(&b, 2, 1, t) == 1);
    CHECK(pdr_bucket_take(&b, 2, 1, t + 400 * MS) == 0); /* 0.8 of a token */
    CHECK(pdr_bucket_take(&b, 2, 1, t + 500 * MS) == 1); /* one token per 500 ms at 2/s */
    CHECK(pdr_bucket_take(&b, 2, 1, t + 500 * MS) == 0);
    /* A long idle time refills to the capacity, not past it. */
    CHECK(pdr_bucket_take(&b, 2, 1, t + 100 * S_NS) == 1);
    CHECK(pdr_bucket_take(&b, 2, 1, t + 100 * S_NS) == 0);
    /* A clock that goes back (another loop read it a moment earlier) adds nothing and breaks nothing. */
    CHECK(pdr_bucket_take(&b, 2, 1, t + 99 * S_NS) == 0);
    CHECK(pdr_bucket_take(&b, 2, 1, t + 100 * S_NS + 500 * MS) == 1);
}

static void test_fractional_rate(void)
{
    pdr_bucket_t b = {0, 0};
    uint64_t t = S_NS;
    CHECK(pdr_bucket_take(&b, 0.5, pdr_bucket_cap(0.5, 0), t) == 1);
    CHECK(pdr_bucket_take(&b, 0.5, 1, t + 1999 * MS) == 0);
    CHECK(pdr_bucket_take(&b, 0.5, 1, t + 2000 * MS) == 1);
}

static void test_wait(void)
{
    pdr_bucket_t b = {0, 0};
    uint64_t t = S_NS;
    CHECK(pdr_bucket_take(&b, 4, 1, t) == 1);
    uint64_t w = pdr_bucket_wait_ns(&b, 4, 1, t);
    CHECK(w >= 249 * MS && w <= 251 * MS); /* 1/4 s */
    w = pdr_bucket_wait_ns(&b, 4, 1, t + 200 * MS);
    CHECK(w >= 49 * MS && w <= 51 * MS);
    CHECK(pdr_bucket_wait_ns(&b, 4, 1, t + 300 * MS) == 1); /* a token is there */
}

static void test_cap(void)
{
    CHECK(pdr_bucket_cap(10, 0) == 10);
    CHECK(pdr_bucket_cap(0.2, 0) == 1);
    CHECK(pdr_bucket_cap(10, 25) == 25);
}

static void test_render(void)
{
    pdr_admit_count_reject(PDR_REJ_QUEUE_FULL);
    pdr_admit_count_reject(PDR_REJ_QUEUE_FULL);
    pdr_admit_count_reject(PDR_REJ_RATE_LIMITED);
    size_t len = 0;
    char *m = pdr_admit_render_metrics(&len);
    CHECK(m != NULL && strlen(m) == len);
    CHECK(strstr(m, "pdr_queue_depth 0\n") != NULL);
    CHECK(strstr(m, "# TYPE pdr_queue_wait_seconds histogram\n") != NULL);
    CHECK(strstr(m, "pdr_queue_wait_seconds_bucket{le=\"+Inf\"} 0\n") != NULL);
    CHECK(strstr(m, "pdr_admission_rejected_total{reason=\"queue_full\"} 2\n") != NULL);
    CHECK(strstr(m, "pdr_admission_rejected_total{reason=\"rate_limited\"} 1\n") != NULL);
    CHECK(strstr(m, "pdr_admission_rejected_total{reason=\"queue_timeout\"} 0\n") != NULL);
    free(m);
}

static const pdr_test_case_t cases[] = {
    {"burst_then_empty", test_burst_then_empty, 30},
    {"refill", test_refill, 30},
    {"fractional_rate", test_fractional_rate, 30},
    {"wait", test_wait, 30},
    {"cap", test_cap, 30},
    {"render", test_render, 30},
};

int main(int argc, char **argv)
{
    return PDR_TEST_RUN(cases, argc, argv);
}
