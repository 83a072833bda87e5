/* The router's state shared between its loop threads, driven from several threads at once as the loops
 * drive it: admission (one queue and one set of counters for the process, a freed slot handed to a waiter
 * on its own loop through that loop's wakeup handle) and the worker pool (picks, snapshots, references and
 * in-flight counts on every loop while loop 0 adds and removes workers and applies health results). Each
 * case checks what must hold whatever the interleaving: no more requests admitted at once than
 * limits.max_inflight, every request served exactly once, every count back to zero. The ThreadSanitizer
 * tree (make test-tsan) runs this test, so that a race on this state is reported even when the counts
 * come out right. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>
#include "check.h"
#include "runner.h"
#include "admission.h"
#include "config.h"
#include "err.h"
#include "pool.h"
#include "router.h"

static pdr_config_t *make_config(const char *limits)
{
    char yaml[1024];
    int o =
        snprintf(yaml, sizeof(yaml),
                 "policy: { prefill: least_load, decode: round_robin }\n%s\nworkers:\n  prefill:\n", limits);
    for (int i = 0; i < 2; i++)
        o += snprintf(yaml + o, sizeof(yaml) - (size_t)o,
                      "    - { url: http://127.0.0.1:%d, bootstrap_port: %d }\n", 30000 + i, 9000 + i);
    o += snprintf(yaml + o, sizeof(yaml) - (size_t)o, "  decode:\n");
    for (int i = 0; i < 2; i++)
        o += snprintf(yaml + o, sizeof(yaml) - (size_t)o, "    - { url: http://127.0.0.1:%d }\n", 31000 + i);
    char err[256];
    pdr_config_t *c = pdr_config_load_string(yaml, (size_t)o, "test.yaml", err, sizeof(err));
    if (c == NULL)
        fprintf(stderr, "%s\n", err);
    return c;
}

/* ---- admission across loops ---- */

#define LOOPS 4
#define REQUESTS 300 /* per loop, one at a time on each */
#define MAX_INFLIGHT 2

typedef struct loop_run {
    pdr_thread_t t;
    const pdr_config_t *c;
    pdr_admit_waiter_t w;
    pdr_admit_tag_t tag; /* with classes and tenants: this loop's class and tenant */
    const pdr_admit_tag_t *tagp;
    uv_timer_t hold; /* a running request keeps its slot until the loop's next turn */
    int started, served, waited, refused;
} loop_run_t;

static pdr_router_t router; /* only its shutting_down flag is read (0) */
static int running_now, running_max, served_total;
/* Every loop's first request is entered before any of them runs: two go at once, two must wait. */
static pthread_barrier_t all_entered;

static void next_request(loop_run_t *lr);

static void on_hold_end(uv_timer_t *h)
{
    loop_run_t *lr = h->data;
    __atomic_sub_fetch(&running_now, 1, __ATOMIC_ACQ_REL);
    __atomic_add_fetch(&served_total, 1, __ATOMIC_RELAXED);
    lr->served++;
    pdr_admit_leave(&lr->t, lr->c, &lr->w);
    next_request(lr);
}

/* A request of this loop has its slot: it counts among those running until the loop's next turn. */
static void run(loop_run_t *lr)
{
    int now = __atomic_add_fetch(&running_now, 1, __ATOMIC_ACQ_REL);
    int max = __atomic_load_n(&running_max, __ATOMIC_ACQUIRE);
    while (now > max &&
           !__atomic_compare_exchange_n(&running_max, &max, now, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        ;
    pdr_admit_started(&lr->w);
    uv_timer_start(&lr->hold, on_hold_end, 0, 0);
}

static void on_go(pdr_admit_waiter_t *w)
{
    loop_run_t *lr = PDR_DLINK_ITEM(w, loop_run_t, w);
    lr->waited++;
    run(lr);
}

/* Starts this loop's next request: it runs now, or waits for a slot (go() runs it on this loop). */
static void next_request(loop_run_t *lr)
{
    while (lr->started < REQUESTS) {
        lr->started++;
        pdr_admit_result_t r = pdr_admit_enter(&lr->t, lr->c, &lr->w, NULL, NULL, 0, lr->tagp, on_go);
        if (r == PDR_ADMIT_GO)
            run(lr);
        if (lr->started == 1)
            pthread_barrier_wait(&all_entered); /* the two that went are counted, and still running */
        if (r == PDR_ADMIT_WAIT || r == PDR_ADMIT_GO)
            return;
        lr->refused++;
    }
    /* Every request of this loop has run: none of its waiters is queued, so no other loop wakes it now. */
    pdr_admit_loop_closing(&lr->t);
    uv_close((uv_handle_t *)&lr->t.wakeup, NULL);
    uv_close((uv_handle_t *)&lr->hold, NULL);
}

static void on_wakeup(uv_async_t *a)
{
    pdr_admit_deliver((pdr_thread_t *)a->data);
}

static void *loop_thread(void *arg)
{
    loop_run_t *lr = arg;
    uv_loop_t loop;
    if (uv_loop_init(&loop) != 0)
        return NULL;
    lr->t.loop = &loop;
    uv_async_init(&loop, &lr->t.wakeup, on_wakeup);
    lr->t.wakeup.data = &lr->t;
    uv_timer_init(&loop, &lr->hold);
    lr->hold.data = lr;
    next_request(lr);
    uv_run(&loop, UV_RUN_DEFAULT);
    lr->t.loop = NULL;
    if (uv_loop_close(&loop) != 0)
        lr->refused = -1; /* a handle left open: reported by the case */
    return NULL;
}

/* The loops' requests with limits (YAML); tagged: each loop its own class and tenant (the scheduler). */
static void admission_across_loops(const char *limits, int tagged)
{
    pdr_config_t *c = make_config(limits);
    CHECK(c != NULL && c->limits.max_inflight == MAX_INFLIGHT);
    if (c == NULL)
        return;
    static loop_run_t runs[LOOPS];
    memset(runs, 0, sizeof(runs));
    running_now = running_max = served_total = 0;
    pthread_t th[LOOPS];
    CHECK(pthread_barrier_init(&all_entered, NULL, LOOPS) == 0);
    for (int i = 0; i < LOOPS; i++) {
        runs[i].t.r = &router;
        runs[i].t.id = i;
        runs[i].c = c;
        runs[i].tag = (pdr_admit_tag_t){.cls = i % 3, .key = (uint64_t)i + 1};
        runs[i].tagp = tagged ? &runs[i].tag : NULL;
        CHECK(pthread_create(&th[i], NULL, loop_thread, &runs[i]) == 0);
    }
    int waited = 0;
    for (int i = 0; i < LOOPS; i++) {
        pthread_join(th[i], NULL);
        CHECK(runs[i].started == REQUESTS && runs[i].refused == 0);
        CHECK(runs[i].served == REQUESTS);
        waited += runs[i].waited;
    }
    /* One request at a time per loop, four loops and two slots: some waited in the queue and were handed
     * their slot on their own loop; never more than two ran at once; the queue is empty again. */
    CHECK(served_total == LOOPS * REQUESTS);
    CHECK(waited >= LOOPS - MAX_INFLIGHT && running_max == MAX_INFLIGHT);
    CHECK(pdr_admit_depth() == 0);
    printf("admission: %d requests on %d loops, %d handed a slot after waiting, at most %d at once\n",
           served_total, LOOPS, waited, running_max);
    pthread_barrier_destroy(&all_entered);
    pdr_config_unref(c);
}

static void test_admission_across_loops(void)
{
    admission_across_loops("limits: { max_inflight: 2, queue: 64 }", 0);
}

/* The same through the scheduler of classes and tenants (router/fleet/fairq.c). */
static void test_admission_scheduled_across_loops(void)
{
    admission_across_loops("limits: { max_inflight: 2, queue: 64 }\n"
                           "admission: { classes: 'a,b,c', fairness_header: x-tenant }",
                           1);
}

/* ---- the pool across loops ---- */

#define PICKS 4000 /* per reader */
#define READERS 3
#define CHANGES 400

typedef struct reader {
    pdr_pool_t *p;
    int picked, snapshots, missing;
} reader_t;

/* A loop's requests: pick a prefill and a decode, count them in flight, report the outcome, let go. */
static void *reader_thread(void *arg)
{
    reader_t *rd = arg;
    for (int i = 0; i < PICKS; i++) {
        pdr_worker_t *pw = pdr_pool_pick(rd->p, NULL, PDR_ROLE_PREFILL, NULL, 0);
        pdr_worker_t *dw = pdr_pool_pick(rd->p, NULL, PDR_ROLE_DECODE, NULL, 0);
        if (pw == NULL || dw == NULL) {
            rd->missing++;
        } else {
            rd->picked++;
            pdr_worker_track(pw, 1);
            pdr_worker_track(dw, 1);
            if (i % 7 == 0)
                pdr_pool_report_failure(rd->p, pw, "test");
            else
                pdr_pool_report_success(rd->p, pw);
            pdr_worker_track(pw, -1);
            pdr_worker_track(dw, -1);
        }
        pdr_worker_unref(pw);
        pdr_worker_unref(dw);
        if (i % 16 == 0) {
            pdr_worker_t **ws;
            size_t n = pdr_pool_snapshot(rd->p, -1, &ws);
            for (size_t k = 0; k < n; k++)
                (void)pdr_worker_inflight(ws[k]);
            pdr_pool_release(ws, n);
            rd->snapshots++;
        }
    }
    return NULL;
}

static void test_pool_across_loops(void)
{
    pdr_config_t *c = make_config("");
    CHECK(c != NULL);
    if (c == NULL)
        return;
    pdr_pool_t p;
    CHECK(pdr_pool_init(&p, c) == 0);
    reader_t rd[READERS];
    pthread_t th[READERS];
    for (int i = 0; i < READERS; i++) {
        rd[i] = (reader_t){.p = &p};
        CHECK(pthread_create(&th[i], NULL, reader_thread, &rd[i]) == 0);
    }
    /* Loop 0 meanwhile: a worker joins and leaves (the admin API, discovery), health checks land. */
    pdr_worker_conf_t wc;
    char err[128];
    CHECK(pdr_worker_conf_parse_url("http://10.0.0.9:30000", &wc, err, sizeof(err)) == 0);
    wc.bootstrap_port = 8998;
    int added = 0, removed = 0;
    for (int i = 0; i < CHANGES; i++) {
        int e = 0;
        pdr_worker_t *w = pdr_pool_add(&p, NULL, PDR_ROLE_PREFILL, &wc, PDR_SOURCE_ADMIN, NULL, NULL, &e);
        if (w == NULL)
            continue;
        added++;
        pdr_pool_check_result(&p, w, i % 3 != 0);
        pdr_pool_check_result(&p, pdr_pool__at(&p, PDR_ROLE_DECODE, (size_t)i % 2), 1);
        if (pdr_pool_remove(&p, w, "test") == 0)
            removed++;
        pdr_worker_unref(w);
    }
    free(wc.url);
    free(wc.host);
    int picked = 0;
    for (int i = 0; i < READERS; i++) {
        pthread_join(th[i], NULL);
        CHECK(rd[i].picked + rd[i].missing == PICKS);
        picked += rd[i].picked;
    }
    /* The static workers stay; the one added each round left; nothing is counted in flight any more. */
    CHECK(added == CHANGES && removed == CHANGES);
    CHECK(pdr_pool_count(&p, PDR_ROLE_PREFILL) == 2 && pdr_pool_count(&p, PDR_ROLE_DECODE) == 2);
    pdr_worker_t **ws;
    size_t n = pdr_pool_snapshot(&p, -1, &ws);
    CHECK(n == 4);
    for (size_t k = 0; k < n; k++)
        CHECK(pdr_worker_inflight(ws[k]) == 0);
    pdr_pool_release(ws, n);
    printf("pool: %d pairs picked on %d threads while a worker joined and left %d times\n", picked, READERS,
           CHANGES);
    pdr_pool_dispose(&p);
    pdr_config_unref(c);
}

static const pdr_test_case_t cases[] = {
    {"admission_across_loops", test_admission_across_loops, 60},
    {"admission_scheduled_across_loops", test_admission_scheduled_across_loops, 60},
    {"pool_across_loops", test_pool_across_loops, 60},
};

int main(int argc, char **argv)
{
    return PDR_TEST_RUN(cases, argc, argv);
}
