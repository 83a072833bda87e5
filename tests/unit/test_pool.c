/* Unit tests for the worker pool: the health state machine, round robin, least load (power of two
 * choices), ejection and retries avoiding a failed worker. */
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "config.h"
#include "pool.h"

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

int main(void)
{
    test_health_state();
    test_round_robin();
    test_least_load();
    CHECK_DONE();
}
