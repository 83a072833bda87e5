/* Unit tests for the pair-aware breaker (router/workers/breaker.c) and its place in the link table
 * (router/workers/links.c): a link opens at breaker.consecutive_failures failures in a row, is avoided while
 * open, turns half-open after its period and admits one probe at a time; the probe's success closes it, its
 * failure re-opens it for twice the period (capped at max_open_ms); a probe never heard of is given up
 * after the period; a success resets the period; the counters and /metrics families follow. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "breaker.h"
#include "check.h"
#include "fake_worker.h"
#include "links.h"
#include "runner.h"
#include "util.h"

static const pdr_breaker_conf_t conf = {3, 100, 350};

static void test_state_machine(void)
{
    pdr_breaker__reset();
    pdr_breaker_t b;
    memset(&b, 0, sizeof(b));
    uint64_t t = 1000, left;
    CHECK(pdr_breaker_admit(&b, t, 1) == 1);
    CHECK(pdr_breaker_failure(&b, 1, &conf, t) == PDR_BREAKER_CLOSED);
    CHECK(pdr_breaker_failure(&b, 2, &conf, t) == PDR_BREAKER_CLOSED);
    CHECK(pdr_breaker_failure(&b, 3, &conf, t) == PDR_BREAKER_OPEN);
    CHECK(pdr_breaker_transitions(PDR_BREAKER_OPEN) == 1);
    CHECK(pdr_breaker_admit(&b, t + 99, 1) == 0);
    CHECK(pdr_breaker_state(&b, t + 40, &left) == PDR_BREAKER_OPEN && left == 60);
    /* A failure while open (every pairing was open) does not extend the period. */
    CHECK(pdr_breaker_failure(&b, 4, &conf, t + 50) == PDR_BREAKER_OPEN);
    CHECK(pdr_breaker_state(&b, t + 100, &left) == PDR_BREAKER_HALF_OPEN && left == 0);
    /* Half-open: exactly one probe. */
    CHECK(pdr_breaker_admit(&b, t + 100, 0) == 1); /* looking does not take it */
    CHECK(pdr_breaker_admit(&b, t + 100, 1) == 1);
    CHECK(pdr_breaker_transitions(PDR_BREAKER_HALF_OPEN) == 1);
    CHECK(pdr_breaker_admit(&b, t + 101, 1) == 0);
    CHECK(pdr_breaker_admit(&b, t + 150, 1) == 0);
    /* The probe fails: open for twice the period. */
    CHECK(pdr_breaker_failure(&b, 5, &conf, t + 150) == PDR_BREAKER_OPEN);
    CHECK(b.period_ms == 200);
    CHECK(pdr_breaker_admit(&b, t + 349, 1) == 0);
    CHECK(pdr_breaker_admit(&b, t + 350, 1) == 1); /* half-open, probe taken */
    CHECK(pdr_breaker_failure(&b, 6, &conf, t + 360) == PDR_BREAKER_OPEN);
    CHECK(b.period_ms == 350); /* 400, capped */
    CHECK(pdr_breaker_admit(&b, t + 710, 1) == 1);
    /* A probe never heard of is given up after the period: another may go. */
    CHECK(pdr_breaker_admit(&b, t + 1000, 1) == 0);
    CHECK(pdr_breaker_admit(&b, t + 1060, 1) == 1);
    /* Its success closes the link, and the next opening starts from open_ms again. */
    pdr_breaker_success(&b);
    CHECK(b.state == PDR_BREAKER_CLOSED && pdr_breaker_transitions(PDR_BREAKER_CLOSED) == 1);
    CHECK(pdr_breaker_admit(&b, t + 1061, 1) == 1);
    CHECK(pdr_breaker_failure(&b, 3, &conf, t + 2000) == PDR_BREAKER_OPEN && b.period_ms == 100);
    CHECK(pdr_breaker_transitions(PDR_BREAKER_OPEN) == 4);
    CHECK(pdr_breaker_transitions(PDR_BREAKER_HALF_OPEN) == 3);
    /* A success on a closed link counts no transition. */
    pdr_breaker_success(&b);
    pdr_breaker_success(&b);
    CHECK(pdr_breaker_transitions(PDR_BREAKER_CLOSED) == 2);
}

static void test_links(void)
{
    pdr_links__reset();
    pdr_breaker__reset();
    pdr_worker_t p1 = mk(1, "http://p:1"), p2 = mk(2, "http://p:2"), d1 = mk(3, "http://d:1"),
                 d2 = mk(4, "http://d:2");
    pdr_breaker_conf_t bc = {2, 60000, 120000};
    uint64_t lf = 7;
    CHECK(pdr_links_admit(&p1, &d1, 1, &lf) == 1 && lf == 0); /* no entry */
    pdr_links_failure_breaker(&p1, &d1, "decode_error", &bc);
    CHECK(pdr_links_admit(&p1, &d1, 1, &lf) == 1 && lf > 0);
    /* A failure without the breaker counts, but does not open it. */
    pdr_links_failure(&p1, &d1, "decode_error");
    CHECK(pdr_links_admit(&p1, &d1, 1, NULL) == 1);
    pdr_links_failure_breaker(&p1, &d1, "decode_error", &bc);
    CHECK(pdr_links_admit(&p1, &d1, 1, NULL) == 0);
    /* Only that pairing: both workers serve their others. */
    CHECK(pdr_links_admit(&p1, &d2, 1, NULL) == 1 && pdr_links_admit(&p2, &d1, 1, NULL) == 1);
    pdr_link_info_t ls[4];
    size_t n = pdr_links_snapshot(ls, 4, NULL);
    CHECK(n == 1 && pdr_breaker_state(&ls[0].brk, pdr_now_ms(), NULL) == PDR_BREAKER_OPEN);
    size_t len = 0;
    char *m = pdr_links_render_metrics(&len);
    CHECK(m != NULL && strlen(m) == len);
    CHECK(m != NULL && strstr(m, "pdr_link_state{prefill=\"http://p:1\",decode=\"http://d:1\"} 1\n") != NULL);
    CHECK(m != NULL && strstr(m, "pdr_breaker_transitions_total{to=\"open\"} 1\n") != NULL);
    CHECK(m != NULL && strstr(m, "pdr_breaker_avoided_total 0\n") != NULL);
    free(m);
    /* A completed transfer closes it. */
    pdr_links_success(&p1, &d1);
    CHECK(pdr_links_admit(&p1, &d1, 1, NULL) == 1);
    m = pdr_links_render_metrics(&len);
    CHECK(m != NULL && strstr(m, "pdr_link_state{prefill=\"http://p:1\",decode=\"http://d:1\"} 0\n") != NULL);
    CHECK(m != NULL && strstr(m, "pdr_breaker_transitions_total{to=\"closed\"} 1\n") != NULL);
    free(m);
    /* Forgetting a worker forgets its breakers. */
    pdr_links_failure_breaker(&p1, &d1, "decode_error", &bc);
    pdr_links_failure_breaker(&p1, &d1, "decode_error", &bc);
    CHECK(pdr_links_admit(&p1, &d1, 1, NULL) == 0);
    pdr_links_forget_worker(&d1);
    CHECK(pdr_links_admit(&p1, &d1, 1, NULL) == 1);
}

static const pdr_test_case_t cases[] = {
    {"state_machine", test_state_machine, 30},
    {"links", test_links, 30},
};

int main(int argc, char **argv)
{
    return PDR_TEST_RUN(cases, argc, argv);
}
