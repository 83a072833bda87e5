/* Unit tests for passive health (router/workers/outlier.c): the ejection backoff (growth, cap, decay), the
 * max_ejection_percent cap, probation, panic, slow start weights, and the same rules through the pool's
 * report and pick functions. */
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "runner.h"
#include "config.h"
#include "outlier.h"
#include "pool.h"
#include "util.h"

static pdr_outlier_conf_t conf(int consecutive, int base, int max)
{
    pdr_outlier_conf_t c = {.enabled = 1,
                            .consecutive_failures = consecutive,
                            .base_ejection_ms = base,
                            .max_ejection_ms = max,
                            .max_ejection_percent = 100,
                            .panic_threshold_percent = 50};
    return c;
}

/* n failures at now (nobody else ejected, 10 workers); returns the last one's verdict. */
static uint64_t fail(pdr_outlier_state_t *s, const pdr_outlier_conf_t *c, uint64_t now, int n)
{
    uint64_t d = 0;
    int capped;
    for (int i = 0; i < n; i++)
        d = pdr_outlier_failure(s, c, now, 0, 10, &capped);
    return d;
}

static void test_backoff(void)
{
    pdr_outlier_conf_t c = conf(3, 100, 350);
    pdr_outlier_state_t s = {0};
    int capped;
    CHECK(pdr_outlier_failure(&s, &c, 1000, 0, 10, &capped) == 0 && !capped);
    CHECK(pdr_outlier_failure(&s, &c, 1000, 0, 10, &capped) == 0);
    CHECK(!pdr_outlier_is_ejected(&s, 1000));
    /* The third consecutive failure ejects for base x 1. */
    CHECK(pdr_outlier_failure(&s, &c, 1000, 0, 10, &capped) == 100);
    CHECK(pdr_outlier_is_ejected(&s, 1000) && pdr_outlier_is_ejected(&s, 1099) &&
          !pdr_outlier_is_ejected(&s, 1100));
    CHECK(pdr_outlier_ms_left(&s, 1040) == 60 && pdr_outlier_ms_left(&s, 1100) == 0);
    /* Failures while ejected (requests still in flight) change nothing. */
    CHECK(fail(&s, &c, 1050, 5) == 0 && pdr_outlier_ms_left(&s, 1050) == 50);
    /* A success resets the count: two failures after it do not eject. */
    pdr_outlier_success(&s);
    CHECK(fail(&s, &c, 1100, 2) == 0 && !pdr_outlier_is_ejected(&s, 1100));
    pdr_outlier_success(&s);
    /* Failing again soon after the return: twice as long, then three times, then the cap. */
    CHECK(fail(&s, &c, 1110, 3) == 200 && pdr_outlier_ms_left(&s, 1110) == 200);
    CHECK(fail(&s, &c, 1320, 3) == 300);
    CHECK(fail(&s, &c, 1630, 3) == 350);
    CHECK(fail(&s, &c, 1990, 3) == 350);
    CHECK(__atomic_load_n(&s.ejections_total, __ATOMIC_RELAXED) == 5);
    CHECK(s.by_reason[PDR_EJECT_CONSECUTIVE] == 5);
    /* max below base: base is the cap. */
    pdr_outlier_conf_t c2 = conf(1, 100, 50);
    pdr_outlier_state_t s2 = {0};
    CHECK(fail(&s2, &c2, 0, 1) == 100 && fail(&s2, &c2, 100, 1) == 100);
    /* Disabled: never ejected. */
    pdr_outlier_conf_t off = conf(1, 100, 1000);
    off.enabled = 0;
    pdr_outlier_state_t s3 = {0};
    CHECK(fail(&s3, &off, 0, 10) == 0 && !pdr_outlier_is_ejected(&s3, 0));
}

static void test_decay(void)
{
    pdr_outlier_conf_t c = conf(1, 100, 10000);
    pdr_outlier_state_t s = {0};
    CHECK(fail(&s, &c, 0, 1) == 100);   /* back at 100 */
    CHECK(fail(&s, &c, 150, 1) == 200); /* 50 ms clean: no step forgiven */
    /* Back at 350; 250 ms clean (two base steps) forgives both: the next ejection is base x 1 again. */
    CHECK(fail(&s, &c, 600, 1) == 100);
    /* Back at 700; one step clean of three ejections' worth. */
    CHECK(fail(&s, &c, 700, 1) == 200 && fail(&s, &c, 900, 1) == 300);
    CHECK(fail(&s, &c, 1200 + 100, 1) == 300); /* back at 1200, 100 ms clean: 3 - 1 + 1 */
    /* A new process forgets everything. */
    pdr_outlier_reset(&s);
    CHECK(!pdr_outlier_is_ejected(&s, 1400) && fail(&s, &c, 1400, 1) == 100);
}

static void test_window(void)
{
    /* failure_window_ms: failures further apart than it are not consecutive. */
    pdr_outlier_conf_t c = conf(3, 100, 1000);
    c.failure_window_ms = 50;
    pdr_outlier_state_t s = {0};
    CHECK(fail(&s, &c, 1000, 2) == 0);
    CHECK(fail(&s, &c, 1051, 2) == 0); /* 51 ms after the last: the count restarts, now at 2 */
    CHECK(fail(&s, &c, 1101, 1) == 100);
    c.failure_window_ms = 0; /* none: any gap */
    pdr_outlier_state_t s2 = {0};
    CHECK(fail(&s2, &c, 0, 2) == 0 && fail(&s2, &c, 1000000, 1) == 100);
}

static void test_max_percent(void)
{
    pdr_outlier_conf_t c = conf(2, 1000, 10000);
    c.max_ejection_percent = 10;
    CHECK(pdr_outlier_max_ejected(&c, 0) == 0);
    CHECK(pdr_outlier_max_ejected(&c, 1) == 1 && pdr_outlier_max_ejected(&c, 5) == 1); /* at least one */
    CHECK(pdr_outlier_max_ejected(&c, 10) == 1 && pdr_outlier_max_ejected(&c, 25) == 2);
    c.max_ejection_percent = 0;
    CHECK(pdr_outlier_max_ejected(&c, 20) == 1);
    c.max_ejection_percent = 50;
    CHECK(pdr_outlier_max_ejected(&c, 4) == 2 && pdr_outlier_max_ejected(&c, 5) == 2);
    c.max_ejection_percent = 100;
    CHECK(pdr_outlier_max_ejected(&c, 3) == 3);
    /* At the cap a due worker is not ejected; it is at the next failure once room is free. */
    c.max_ejection_percent = 10;
    pdr_outlier_state_t s = {0};
    int capped = 0;
    CHECK(pdr_outlier_failure(&s, &c, 0, 1, 10, &capped) == 0 && !capped);
    CHECK(pdr_outlier_failure(&s, &c, 0, 1, 10, &capped) == 0 && capped);
    CHECK(!pdr_outlier_is_ejected(&s, 0));
    CHECK(pdr_outlier_failure(&s, &c, 5, 0, 10, &capped) == 1000 && !capped);
}

static void test_probation(void)
{
    pdr_outlier_conf_t c = conf(3, 100, 1000);
    c.probation_successes = 2;
    pdr_outlier_state_t s = {0};
    CHECK(fail(&s, &c, 0, 3) == 100);
    /* Back at 100 on probation: one failure ejects again at once. */
    CHECK(fail(&s, &c, 100, 1) == 200);
    /* Back at 300: two successes end the probation; then it takes three failures again. */
    pdr_outlier_success(&s);
    pdr_outlier_success(&s);
    CHECK(fail(&s, &c, 300, 2) == 0 && fail(&s, &c, 300, 1) > 0);
}

static void test_panic(void)
{
    pdr_outlier_conf_t c = conf(5, 100, 1000);
    CHECK(pdr_outlier_panic(&c, 1, 3, 3) == 1); /* 33% serving */
    CHECK(pdr_outlier_panic(&c, 2, 4, 4) == 0); /* 50% is not below 50% */
    CHECK(pdr_outlier_panic(&c, 0, 2, 2) == 1); /* all ejected, all healthy */
    CHECK(pdr_outlier_panic(&c, 0, 0, 2) == 0); /* nothing passes its checks: the 503 of the contract */
    CHECK(pdr_outlier_panic(&c, 0, 0, 0) == 0);
    c.panic_threshold_percent = 0;
    CHECK(pdr_outlier_panic(&c, 0, 2, 2) == 0);
    c.panic_threshold_percent = 100;
    CHECK(pdr_outlier_panic(&c, 9, 10, 10) == 1 && pdr_outlier_panic(&c, 10, 10, 10) == 0);
    c.enabled = 0;
    CHECK(pdr_outlier_panic(&c, 1, 3, 3) == 0);
}

static int near(double a, double b)
{
    return a > b - 1e-9 && a < b + 1e-9;
}

static void test_slow_start(void)
{
    pdr_outlier_conf_t c = conf(1, 1000, 10000);
    pdr_outlier_state_t s = {0};
    CHECK(near(pdr_outlier_weight(&s, 5), 1.0)); /* slow start off */
    c.slow_start_ms = 1000;
    CHECK(near(pdr_outlier_weight(&s, 5), 1.0)); /* never came back */
    CHECK(fail(&s, &c, 0, 1) == 1000);           /* back at 1000 */
    CHECK(near(pdr_outlier_weight(&s, 1000), PDR_OUTLIER_MIN_WEIGHT));
    CHECK(near(pdr_outlier_weight(&s, 1050), PDR_OUTLIER_MIN_WEIGHT));
    CHECK(near(pdr_outlier_weight(&s, 1250), 0.25));
    CHECK(near(pdr_outlier_weight(&s, 1500), 0.5));
    CHECK(near(pdr_outlier_weight(&s, 2000), 1.0) && near(pdr_outlier_weight(&s, 9000), 1.0));
    /* Health coming back starts it too. */
    pdr_outlier_came_back(&s, &c, 20000);
    CHECK(near(pdr_outlier_weight(&s, 20750), 0.75));
}

static pdr_config_t *make_config(int np, const char *policy, const char *outlier)
{
    char yaml[4096];
    int o = snprintf(yaml, sizeof(yaml),
                     "policy: { prefill: %s, decode: round_robin }\noutlier: %s\nworkers:\n"
                     "  prefill:\n",
                     policy, outlier);
    for (int i = 0; i < np; i++)
        o += snprintf(yaml + o, sizeof(yaml) - (size_t)o,
                      "    - { url: http://127.0.0.1:%d, bootstrap_port: %d }\n", 30000 + i, 9000 + i);
    o += snprintf(yaml + o, sizeof(yaml) - (size_t)o, "  decode: [ 'http://127.0.0.1:31000' ]\n");
    char err[256];
    pdr_config_t *c = pdr_config_load_string(yaml, (size_t)o, "test.yaml", err, sizeof(err));
    if (c == NULL)
        fprintf(stderr, "%s\n", err);
    return c;
}

/* Picks n prefills and counts them by seq into seen[]. */
static void picks(pdr_pool_t *p, int n, int *seen)
{
    for (int i = 0; i < n; i++) {
        pdr_worker_t *w = pdr_pool_pick(p, NULL, PDR_ROLE_PREFILL, NULL, 0);
        CHECK(w != NULL);
        if (w == NULL)
            return;
        seen[w->seq]++;
        pdr_worker_unref(w);
    }
}

static void test_pool_cap_and_panic(void)
{
    /* 10 prefills, 2 failures eject, at most 20% (2) out at once. */
    pdr_config_t *c = make_config(
        10, "round_robin", "{ consecutive_failures: 2, base_ejection_ms: 60000, max_ejection_percent: 20 }");
    CHECK(c != NULL);
    pdr_pool_t p;
    CHECK(pdr_pool_init(&p, c) == 0);
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < 10; i++)
            pdr_pool_report_failure(&p, pdr_pool__at(&p, PDR_ROLE_PREFILL, i), "status 500");
    int out = 0;
    for (size_t i = 0; i < 10; i++) {
        pdr_worker_t *w = pdr_pool__at(&p, PDR_ROLE_PREFILL, i);
        out += pdr_outlier_is_ejected(&w->outlier, pdr_now_ms());
        CHECK(pdr_worker_healthy(w)); /* the checks' verdict is their own */
    }
    CHECK(out == 2);
    CHECK(strcmp(pdr_worker_state_name(pdr_pool__at(&p, PDR_ROLE_PREFILL, 0)), "ejected") == 0);
    CHECK(strcmp(pdr_worker_state_name(pdr_pool__at(&p, PDR_ROLE_PREFILL, 2)), "healthy") == 0);
    int seen[10] = {0};
    picks(&p, 80, seen);
    CHECK(seen[0] == 0 && seen[1] == 0 && seen[2] == 10 && seen[9] == 10); /* ejected ones are skipped */
    CHECK(p.panic_total[PDR_ROLE_PREFILL] == 0);
    /* 7 of 10 unhealthy by their checks: 1 serving of 10, below 50%: panic, the ejected ones are picked
     * again, the unhealthy ones never. */
    for (size_t i = 3; i < 10; i++)
        pdr_pool_eject(&p, pdr_pool__at(&p, PDR_ROLE_PREFILL, i), "connection refused");
    memset(seen, 0, sizeof(seen));
    picks(&p, 90, seen);
    CHECK(seen[0] == 30 && seen[1] == 30 && seen[2] == 30 && seen[3] == 0 && seen[9] == 0);
    CHECK(p.panic_total[PDR_ROLE_PREFILL] == 90);
    /* A drained worker is never picked, panic or not. */
    pdr_pool_drain(&p, pdr_pool__at(&p, PDR_ROLE_PREFILL, 0), 0, "test");
    memset(seen, 0, sizeof(seen));
    picks(&p, 90, seen);
    CHECK(seen[0] == 0 && seen[1] == 45 && seen[2] == 45);
    /* The reasons add up. */
    CHECK(pdr_pool__at(&p, PDR_ROLE_PREFILL, 0)->outlier.by_reason[PDR_EJECT_CONSECUTIVE] == 1);
    CHECK(pdr_pool__at(&p, PDR_ROLE_PREFILL, 5)->outlier.by_reason[PDR_EJECT_UNREACHABLE] == 1);
    /* Nothing healthy: no panic, no pick (the 503 of the contract). */
    pdr_pool_eject(&p, pdr_pool__at(&p, PDR_ROLE_PREFILL, 1), "connection refused");
    pdr_pool_eject(&p, pdr_pool__at(&p, PDR_ROLE_PREFILL, 2), "connection refused");
    CHECK(pdr_pool_pick(&p, NULL, PDR_ROLE_PREFILL, NULL, 0) == NULL);
    pdr_pool_dispose(&p);
    pdr_config_unref(c);
}

static void test_pool_disabled(void)
{
    /* enabled: false: request failures count against health.fall (3) as before, no outlier ejection. */
    pdr_config_t *c = make_config(3, "round_robin", "{ enabled: false, consecutive_failures: 1 }");
    CHECK(c != NULL);
    pdr_pool_t p;
    CHECK(pdr_pool_init(&p, c) == 0);
    pdr_worker_t *w = pdr_pool__at(&p, PDR_ROLE_PREFILL, 0);
    pdr_pool_report_failure(&p, w, "status 500");
    pdr_pool_report_failure(&p, w, "status 500");
    CHECK(pdr_worker_healthy(w) && !pdr_outlier_is_ejected(&w->outlier, pdr_now_ms()));
    pdr_pool_report_failure(&p, w, "status 500");
    CHECK(!pdr_worker_healthy(w) && strcmp(pdr_worker_state_name(w), "ejected") == 0);
    CHECK(w->outlier.by_reason[PDR_EJECT_CONSECUTIVE] == 1 && w->ejections_total == 1);
    pdr_pool_dispose(&p);
    pdr_config_unref(c);
}

static void test_pool_slow_start(void)
{
    /* Two prefills, one just back from an ejection with slow start over a minute: weight 10%. */
    pdr_config_t *c =
        make_config(2, "random", "{ consecutive_failures: 1, base_ejection_ms: 1, slow_start_ms: 60000 }");
    CHECK(c != NULL);
    pdr_pool_t p;
    CHECK(pdr_pool_init(&p, c) == 0);
    pdr_worker_t *w0 = pdr_pool__at(&p, PDR_ROLE_PREFILL, 0);
    pdr_pool_report_failure(&p, w0, "status 500");
    uint64_t until = w0->outlier.until_ms;
    while (pdr_now_ms() <= until) /* the 1 ms ejection ends */
        ;
    int seen[2] = {0};
    picks(&p, 4000, seen);
    /* Weight 10%: among the candidates in one pick of ten, then random wins half of those: about 5% (200
     * of 4000), far from the 2000 of an even split. */
    CHECK(seen[0] > 100 && seen[0] < 400);
    /* least_load weighs its load instead: with equal loads the full-weight worker wins every comparison. */
    pdr_config_t *c2 = make_config(2, "least_load",
                                   "{ consecutive_failures: 1, base_ejection_ms: 1, slow_start_ms: 60000 }");
    pdr_pool_apply_config(&p, c2);
    memset(seen, 0, sizeof(seen));
    picks(&p, 200, seen);
    CHECK(seen[0] == 0 && seen[1] == 200);
    pdr_pool_dispose(&p);
    pdr_config_unref(c);
    pdr_config_unref(c2);
}

static void test_config(void)
{
    pdr_config_t *c = make_config(1, "round_robin", "{}");
    CHECK(c != NULL && c->outlier.enabled == 1 && c->outlier.consecutive_failures == 5 &&
          c->outlier.base_ejection_ms == 30000 && c->outlier.max_ejection_ms == 300000 &&
          c->outlier.max_ejection_percent == 10 && c->outlier.panic_threshold_percent == 50 &&
          c->outlier.slow_start_ms == 0 && c->outlier.probation_successes == 0 &&
          c->outlier.failure_window_ms == 0);
    pdr_config_unref(c);
    char err[256];
    const char *bad[] = {"outlier: { consecutive_failures: 0 }",
                         "outlier: { max_ejection_percent: 101 }",
                         "outlier: { panic_threshold_percent: -1 }",
                         "outlier: { base_ejection_ms: 0 }",
                         "outlier: { slow_start: 5 }",
                         "outlier: { enabled: maybe }"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char yaml[512];
        int n = snprintf(
            yaml, sizeof(yaml),
            "%s\nworkers:\n  prefill: [ 'http://127.0.0.1:1' ]\n  decode: [ 'http://127.0.0.1:2' ]\n",
            bad[i]);
        err[0] = '\0';
        pdr_config_t *b = pdr_config_load_string(yaml, (size_t)n, "bad.yaml", err, sizeof(err));
        CHECK(b == NULL && strncmp(err, "bad.yaml:1:", 11) == 0);
        if (b != NULL)
            pdr_config_unref(b);
    }
}

static const pdr_test_case_t cases[] = {
    {"backoff", test_backoff, 60},
    {"decay", test_decay, 60},
    {"window", test_window, 60},
    {"max_percent", test_max_percent, 60},
    {"probation", test_probation, 60},
    {"panic", test_panic, 60},
    {"slow_start", test_slow_start, 60},
    {"pool_cap_and_panic", test_pool_cap_and_panic, 60},
    {"pool_disabled", test_pool_disabled, 60},
    {"pool_slow_start", test_pool_slow_start, 60},
    {"config", test_config, 60},
};

int main(int argc, char **argv)
{
    return PDR_TEST_RUN(cases, argc, argv);
}
