/* Unit tests for the recent-errors ring (router/workers/events.c): empty, partial, wraparound keeping the
 * newest PDR_EVENTS_CAP oldest first, truncation of long messages, a smaller snapshot, and concurrent adds
 * from several threads (no entry torn, the total exact). The pool records into it: checked last. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "runner.h"
#include "config.h"
#include "events.h"
#include "pool.h"

static void test_ring(void)
{
    pdr_events_t ev;
    pdr_event_t out[PDR_EVENTS_CAP];
    uint64_t total = 99;
    pdr_events_init(&ev);
    CHECK(pdr_events_snapshot(&ev, out, PDR_EVENTS_CAP, &total) == 0 && total == 0);

    pdr_events_add(&ev, "prefill-0", "failure %d", 0);
    pdr_events_add(&ev, NULL, "failure %d", 1);
    CHECK(pdr_events_snapshot(&ev, out, PDR_EVENTS_CAP, &total) == 2 && total == 2);
    CHECK(strcmp(out[0].worker, "prefill-0") == 0 && strcmp(out[0].message, "failure 0") == 0);
    CHECK(out[1].worker[0] == '\0' && strcmp(out[1].message, "failure 1") == 0);
    CHECK(out[0].time_ms > 1600000000000ULL && out[1].time_ms >= out[0].time_ms); /* wall clock, in ms */

    /* 2 + 40 entries: the ring keeps the last 32 (failures 10..41), oldest first. */
    for (int i = 2; i < 42; i++)
        pdr_events_add(&ev, "decode-1", "failure %d", i);
    size_t n = pdr_events_snapshot(&ev, out, PDR_EVENTS_CAP, &total);
    CHECK(n == PDR_EVENTS_CAP && total == 42);
    for (size_t k = 0; k < n; k++) {
        char want[32];
        snprintf(want, sizeof(want), "failure %zu", k + 10);
        CHECK(strcmp(out[k].message, want) == 0);
    }
    /* A smaller snapshot receives the most recent ones. */
    CHECK(pdr_events_snapshot(&ev, out, 3, NULL) == 3);
    CHECK(strcmp(out[0].message, "failure 39") == 0 && strcmp(out[2].message, "failure 41") == 0);

    /* Long messages and ids are cut, NUL-terminated. */
    char big[1000];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    pdr_events_add(&ev, big, "%s", big);
    CHECK(pdr_events_snapshot(&ev, out, 1, NULL) == 1);
    CHECK(strlen(out[0].message) == sizeof(out[0].message) - 1 &&
          strlen(out[0].worker) == sizeof(out[0].worker) - 1);
    pdr_events_dispose(&ev);
}

#define THREADS 4
#define PER_THREAD 5000

typedef struct {
    pdr_events_t *ev;
    int id;
} adder_t;

static void *adder(void *arg)
{
    adder_t *a = arg;
    char wid[32];
    snprintf(wid, sizeof(wid), "prefill-%d", a->id);
    for (int i = 0; i < PER_THREAD; i++)
        pdr_events_add(a->ev, wid, "thread %d entry %d", a->id, i);
    return NULL;
}

static void test_concurrent(void)
{
    pdr_events_t ev;
    pdr_events_init(&ev);
    pthread_t th[THREADS];
    adder_t args[THREADS];
    for (int t = 0; t < THREADS; t++) {
        args[t] = (adder_t){&ev, t};
        CHECK(pthread_create(&th[t], NULL, adder, &args[t]) == 0);
    }
    /* Snapshots race with the adders: each entry must be whole (its worker matches its message). */
    pdr_event_t out[PDR_EVENTS_CAP];
    for (int k = 0; k < 200; k++) {
        size_t n = pdr_events_snapshot(&ev, out, PDR_EVENTS_CAP, NULL);
        for (size_t i = 0; i < n; i++) {
            int t = -1, e = -1;
            char wid[32];
            CHECK(sscanf(out[i].message, "thread %d entry %d", &t, &e) == 2);
            snprintf(wid, sizeof(wid), "prefill-%d", t);
            CHECK(strcmp(wid, out[i].worker) == 0);
        }
    }
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    uint64_t total = 0;
    size_t n = pdr_events_snapshot(&ev, out, PDR_EVENTS_CAP, &total);
    CHECK(total == THREADS * PER_THREAD && n == PDR_EVENTS_CAP);
    /* Per thread, the surviving entries keep their order. */
    int last[THREADS] = {-1, -1, -1, -1};
    for (size_t i = 0; i < n; i++) {
        int t = -1, e = -1;
        CHECK(sscanf(out[i].message, "thread %d entry %d", &t, &e) == 2 && t >= 0 && t < THREADS);
        if (t >= 0 && t < THREADS) {
            CHECK(e > last[t]);
            last[t] = e;
        }
    }
    pdr_events_dispose(&ev);
}

static void test_pool_records(void)
{
    char err[256];
    static const char yaml[] =
        "workers:\n  prefill:\n    - { url: http://127.0.0.1:30000, bootstrap_port: 9000 }\n"
        "  decode:\n    - { url: http://127.0.0.1:31000 }\n";
    pdr_config_t *c = pdr_config_load_string(yaml, sizeof(yaml) - 1, "test.yaml", err, sizeof(err));
    CHECK(c != NULL);
    if (c == NULL)
        return;
    pdr_pool_t p;
    CHECK(pdr_pool_init(&p, c) == 0);
    pdr_pool_eject(&p, pdr_pool__at(&p, PDR_ROLE_DECODE, 0), "connection refused");
    pdr_pool_report_failure(&p, pdr_pool__at(&p, PDR_ROLE_PREFILL, 0), "status 500");
    pdr_event_t out[PDR_EVENTS_CAP];
    CHECK(pdr_events_snapshot(&p.events, out, PDR_EVENTS_CAP, NULL) == 2);
    CHECK(strcmp(out[0].worker, "decode-0") == 0 && strstr(out[0].message, "ejected") != NULL &&
          strstr(out[0].message, "connection refused") != NULL);
    CHECK(strcmp(out[1].worker, "prefill-0") == 0 && strstr(out[1].message, "status 500") != NULL);
    pdr_pool_dispose(&p);
    pdr_config_unref(c);
}

static const pdr_test_case_t cases[] = {
    {"ring", test_ring, 60},
    {"concurrent", test_concurrent, 60},
    {"pool_records", test_pool_records, 60},
};

int main(int argc, char **argv)
{
    return PDR_TEST_RUN(cases, argc, argv);
}
