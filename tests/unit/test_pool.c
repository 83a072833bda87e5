/* Unit tests for the worker pool: the health state machine, round robin, least load (power of two
 * choices), ejection and retries avoiding a failed worker, the drain state machine and worker ids. */
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "config.h"
#include "pool.h"
#include "util.h"

static void test_health_state(void)
{
    pdr_health_state_t s = {.healthy = 1};
    /* fall = 3: two failures keep it healthy, the third marks it down. */
    CHECK(pdr_health_update(&s, 0, 2, 3) == 0 && s.healthy);
    CHECK(pdr_health_update(&s, 0, 2, 3) == 0 && s.healthy);
    CHECK(pdr_health_update(&s, 0, 2, 3) == 1 && !s.healthy);
    /* A success in between resets the count. */
    CHECK(pdr_health_update(&s, 1, 2, 3) == 0 && !s.healthy);
    CHECK(pdr_health_update(&s, 0, 2, 3) == 0 && !s.healthy);
    /* rise = 2: two consecutive passes bring it back. */
    CHECK(pdr_health_update(&s, 1, 2, 3) == 0 && !s.healthy);
    CHECK(pdr_health_update(&s, 1, 2, 3) == 1 && s.healthy);
    s.consec_fail = 0;
    CHECK(pdr_health_update(&s, 0, 2, 3) == 0);
    CHECK(pdr_health_update(&s, 1, 2, 3) == 0);
    CHECK(pdr_health_update(&s, 0, 2, 3) == 0 && s.healthy);
}

static pdr_config_t *make_config(int np, int nd, const char *pp, const char *dp)
{
    char yaml[2048];
    int o =
        snprintf(yaml, sizeof(yaml), "policy: { prefill: %s, decode: %s }\nworkers:\n  prefill:\n", pp, dp);
    for (int i = 0; i < np; i++)
        o += snprintf(yaml + o, sizeof(yaml) - (size_t)o,
                      "    - { url: http://127.0.0.1:%d, bootstrap_port: %d }\n", 30000 + i, 9000 + i);
    o += snprintf(yaml + o, sizeof(yaml) - (size_t)o, "  decode:\n");
    for (int i = 0; i < nd; i++)
        o += snprintf(yaml + o, sizeof(yaml) - (size_t)o, "    - { url: http://127.0.0.1:%d }\n", 31000 + i);
    char err[256];
    pdr_config_t *c = pdr_config_load_string(yaml, (size_t)o, "test.yaml", err, sizeof(err));
    if (c == NULL)
        fprintf(stderr, "%s\n", err);
    return c;
}

static void test_round_robin(void)
{
    pdr_config_t *c = make_config(3, 1, "round_robin", "round_robin");
    pdr_pool_t p;
    CHECK(pdr_pool_init(&p, c) == 0);
    int seen[3] = {0};
    for (int i = 0; i < 9; i++)
        seen[pdr_pool_pick(&p, PDR_ROLE_PREFILL, 0)->index]++;
    CHECK(seen[0] == 3 && seen[1] == 3 && seen[2] == 3);
    /* An ejected worker is skipped; the rest share the load. */
    pdr_pool_eject(&p, &p.workers[PDR_ROLE_PREFILL][1], "test");
    CHECK(!p.workers[PDR_ROLE_PREFILL][1].health.healthy);
    CHECK(pdr_pool_count_healthy(&p, PDR_ROLE_PREFILL) == 2);
    for (int i = 0; i < 10; i++)
        CHECK(pdr_pool_pick(&p, PDR_ROLE_PREFILL, 0)->index != 1);
    /* A retry avoids the worker that just failed while another is healthy. */
    for (int i = 0; i < 10; i++)
        CHECK(pdr_pool_pick(&p, PDR_ROLE_PREFILL, 1ull << 0)->index == 2);
    /* If every healthy worker was avoided, one is still returned. */
    CHECK(pdr_pool_pick(&p, PDR_ROLE_PREFILL, (1ull << 0) | (1ull << 2)) != NULL);
    pdr_pool_eject(&p, &p.workers[PDR_ROLE_PREFILL][0], "test");
    pdr_pool_eject(&p, &p.workers[PDR_ROLE_PREFILL][2], "test");
    CHECK(pdr_pool_pick(&p, PDR_ROLE_PREFILL, 0) == NULL);
    pdr_pool_dispose(&p);
    pdr_config_unref(c);
}

static void test_least_load(void)
{
    pdr_config_t *c = make_config(1, 4, "round_robin", "least_load");
    pdr_pool_t p;
    CHECK(pdr_pool_init(&p, c) == 0);
    pdr_worker_t *d = p.workers[PDR_ROLE_DECODE];
    d[0].inflight = 10;
    d[1].inflight = 10;
    d[2].inflight = 10;
    d[3].inflight = 0;
    /* With two random choices, the idle worker wins whenever it is drawn: about half the picks, and
     * a loaded worker is never preferred over it. */
    int idle = 0;
    for (int i = 0; i < 2000; i++)
        idle += pdr_pool_pick(&p, PDR_ROLE_DECODE, 0)->index == 3;
    CHECK(idle > 800 && idle < 1200);
    /* Two workers: the less loaded always wins. */
    pdr_pool_eject(&p, &d[0], "test");
    pdr_pool_eject(&p, &d[1], "test");
    for (int i = 0; i < 100; i++)
        CHECK(pdr_pool_pick(&p, PDR_ROLE_DECODE, 0)->index == 3);
    /* Load spreads when equal. */
    d[2].inflight = d[3].inflight = 0;
    int cnt[4] = {0};
    for (int i = 0; i < 1000; i++) {
        pdr_worker_t *w = pdr_pool_pick(&p, PDR_ROLE_DECODE, 0);
        cnt[w->index]++;
        w->inflight++;
    }
    CHECK(abs(cnt[2] - cnt[3]) <= 2);
    CHECK(strcmp(p.workers[PDR_ROLE_PREFILL][0].bootstrap_host, "127.0.0.1") == 0);
    pdr_pool_dispose(&p);
    pdr_config_unref(c);
}

static void test_drain(void)
{
    pdr_config_t *c = make_config(2, 1, "round_robin", "least_load");
    pdr_pool_t p;
    CHECK(pdr_pool_init(&p, c) == 0);
    pdr_worker_t *w0 = &p.workers[PDR_ROLE_PREFILL][0], *w1 = &p.workers[PDR_ROLE_PREFILL][1];
    CHECK(strcmp(pdr_worker_state_name(w0), "healthy") == 0);

    /* Idle worker: drain goes straight to DRAINED. */
    CHECK(pdr_pool_drain(&p, w1, 0, "test") == PDR_DRAIN_DRAINED);
    CHECK(strcmp(pdr_worker_state_name(w1), "drained") == 0 && w1->drains_total == 1);
    CHECK(pdr_pool_activate(&p, w1) == PDR_DRAIN_DRAINED);
    CHECK(strcmp(pdr_worker_state_name(w1), "healthy") == 0);

    /* Busy worker: DRAINING, skipped by the picker (retries too: avoid cannot bring it back), DRAINED
     * when its last request ends. */
    pdr_worker_track(w0, 1);
    pdr_worker_track(w0, 1);
    CHECK(pdr_pool_drain(&p, w0, 0, "test") == PDR_DRAIN_DRAINING);
    CHECK(strcmp(pdr_worker_state_name(w0), "draining") == 0);
    CHECK(pdr_pool_count_healthy(&p, PDR_ROLE_PREFILL) == 1);
    CHECK(pdr_pool_count_state(&p, PDR_ROLE_PREFILL, PDR_DRAIN_DRAINING) == 1);
    for (int i = 0; i < 10; i++)
        CHECK(pdr_pool_pick(&p, PDR_ROLE_PREFILL, 0) == w1);
    CHECK(pdr_pool_pick(&p, PDR_ROLE_PREFILL, 1u << 1) == w1); /* the only serving one, even if avoided */
    /* A second drain only moves the deadline; the count does not change. */
    CHECK(pdr_pool_drain(&p, w0, 0, "again") == PDR_DRAIN_DRAINING && w0->drains_total == 1);
    CHECK(pdr_pool_drain_tick(&p, pdr_now_ms()) == 0); /* busy, no deadline */
    pdr_worker_track(w0, -1);
    CHECK(pdr_worker_drain_state(w0) == PDR_DRAIN_DRAINING);
    pdr_worker_track(w0, -1);
    CHECK(pdr_worker_drain_state(w0) == PDR_DRAIN_DRAINED);
    /* New requests ending on a drained worker change nothing. */
    pdr_worker_track(w0, 1);
    pdr_worker_track(w0, -1);
    CHECK(pdr_worker_drain_state(w0) == PDR_DRAIN_DRAINED);

    /* Timeout: DRAINED at the deadline even with requests in flight (they are left alone). */
    pdr_pool_activate(&p, w0);
    pdr_worker_track(w0, 1);
    CHECK(pdr_pool_drain(&p, w0, 500, "test") == PDR_DRAIN_DRAINING);
    uint64_t deadline = w0->drain_deadline_ms;
    CHECK(pdr_pool_drain_tick(&p, deadline - 1) == 0 && pdr_worker_drain_state(w0) == PDR_DRAIN_DRAINING);
    CHECK(pdr_pool_drain_tick(&p, deadline) == 1 && pdr_worker_drain_state(w0) == PDR_DRAIN_DRAINED);
    CHECK(pdr_worker_inflight(w0) == 1);
    pdr_worker_track(w0, -1);

    /* The periodic check catches an idle DRAINING worker (a request that ended before the flag). */
    pdr_pool_activate(&p, w0);
    __atomic_store_n(&w0->drain, PDR_DRAIN_DRAINING, __ATOMIC_RELEASE);
    CHECK(pdr_pool_drain_tick(&p, pdr_now_ms()) == 1 && pdr_worker_drain_state(w0) == PDR_DRAIN_DRAINED);

    /* Every prefill drained: nothing to pick. Activate restores health-based state. */
    pdr_pool_drain(&p, w1, 0, "test");
    CHECK(pdr_pool_pick(&p, PDR_ROLE_PREFILL, 0) == NULL &&
          pdr_pool_count_healthy(&p, PDR_ROLE_PREFILL) == 0);
    pdr_pool_eject(&p, w1, "test");
    CHECK(strcmp(pdr_worker_state_name(w1), "drained") == 0);
    pdr_pool_activate(&p, w1);
    CHECK(strcmp(pdr_worker_state_name(w1), "unhealthy") == 0);
    pdr_pool_activate(&p, w0);
    CHECK(pdr_pool_pick(&p, PDR_ROLE_PREFILL, 0) == w0);
    pdr_pool_dispose(&p);
    pdr_config_unref(c);
}

static void test_find(void)
{
    pdr_config_t *c = make_config(2, 3, "round_robin", "round_robin");
    pdr_pool_t p;
    CHECK(pdr_pool_init(&p, c) == 0);
    CHECK(pdr_pool_find(&p, "prefill-0", 9) == &p.workers[PDR_ROLE_PREFILL][0]);
    CHECK(pdr_pool_find(&p, "prefill-1", 9) == &p.workers[PDR_ROLE_PREFILL][1]);
    CHECK(pdr_pool_find(&p, "decode-2", 8) == &p.workers[PDR_ROLE_DECODE][2]);
    CHECK(pdr_pool_find(&p, "prefill-2", 9) == NULL);
    CHECK(pdr_pool_find(&p, "prefill-01", 10) == NULL);
    CHECK(pdr_pool_find(&p, "prefill-", 8) == NULL);
    CHECK(pdr_pool_find(&p, "prefill-1x", 10) == NULL);
    CHECK(pdr_pool_find(&p, "decode-0/drain", 8) == &p.workers[PDR_ROLE_DECODE][0]);
    CHECK(pdr_pool_find(&p, "decoder-0", 9) == NULL);
    CHECK(pdr_pool_find(&p, "prefill-99999999999999999999", 28) == NULL);
    pdr_pool_dispose(&p);
    pdr_config_unref(c);
}

int main(void)
{
    test_health_state();
    test_round_robin();
    test_least_load();
    test_drain();
    test_find();
    CHECK_DONE();
}
