/* Unit tests for the worker pool: the health state machine, round robin, least load (power of two
 * choices), ejection and retries avoiding a failed worker, the drain state machine, worker ids, and
 * membership changes (add, remove, reconcile, reload, delete) with reference-counted workers; worker
 * identities (parsing, the compat key, the difference in words) and picks narrowed by a compat filter; the
 * load a policy weighs by source (shim report, engine answer, the router's count), fresh or not; the look-up
 * of a worker by its address. */
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "runner.h"
#include "err.h"
#include "config.h"
#include "pool.h"
#include "pool_load.h"
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

/* The i-th worker of the role, borrowed from the pool. */
static pdr_worker_t *W(pdr_pool_t *p, pdr_role_t role, size_t i)
{
    return pdr_pool__at(p, role, i);
}

/* A pick, borrowed (the pool keeps the worker alive in these single-threaded tests). */
static pdr_worker_t *pick(pdr_pool_t *p, pdr_role_t role, const uint64_t *avoid, size_t n)
{
    pdr_worker_t *w = pdr_pool_pick(p, NULL, role, avoid, n);
    pdr_worker_unref(w);
    return w;
}

static int pick_seq(pdr_pool_t *p, pdr_role_t role, const uint64_t *avoid, size_t n)
{
    pdr_worker_t *w = pick(p, role, avoid, n);
    return w != NULL ? (int)w->seq : -1;
}

static void test_round_robin(void)
{
    pdr_config_t *c = make_config(3, 1, "round_robin", "round_robin");
    pdr_pool_t p;
    CHECK(pdr_pool_init(&p, c) == 0);
    int seen[3] = {0};
    for (int i = 0; i < 9; i++)
        seen[pick_seq(&p, PDR_ROLE_PREFILL, NULL, 0)]++;
    CHECK(seen[0] == 3 && seen[1] == 3 && seen[2] == 3);
    /* An ejected worker is skipped; the rest share the load. */
    pdr_pool_eject(&p, W(&p, PDR_ROLE_PREFILL, 1), "test");
    CHECK(!W(&p, PDR_ROLE_PREFILL, 1)->health.healthy);
    CHECK(pdr_pool_count_healthy(&p, PDR_ROLE_PREFILL) == 2);
    for (int i = 0; i < 10; i++)
        CHECK(pick_seq(&p, PDR_ROLE_PREFILL, NULL, 0) != 1);
    /* A retry avoids the worker that just failed while another is healthy. */
    uint64_t tried[2] = {W(&p, PDR_ROLE_PREFILL, 0)->uid, W(&p, PDR_ROLE_PREFILL, 2)->uid};
    for (int i = 0; i < 10; i++)
        CHECK(pick_seq(&p, PDR_ROLE_PREFILL, tried, 1) == 2);
    /* If every healthy worker was avoided, one is still returned. */
    CHECK(pick(&p, PDR_ROLE_PREFILL, tried, 2) != NULL);
    pdr_pool_eject(&p, W(&p, PDR_ROLE_PREFILL, 0), "test");
    pdr_pool_eject(&p, W(&p, PDR_ROLE_PREFILL, 2), "test");
    CHECK(pick(&p, PDR_ROLE_PREFILL, NULL, 0) == NULL);
    pdr_pool_dispose(&p);
    pdr_config_unref(c);
}

static void test_least_load(void)
{
    pdr_config_t *c = make_config(1, 4, "round_robin", "least_load");
    pdr_pool_t p;
    CHECK(pdr_pool_init(&p, c) == 0);
    pdr_worker_t *d[4];
    for (int i = 0; i < 4; i++)
        d[i] = W(&p, PDR_ROLE_DECODE, (size_t)i);
    d[0]->inflight = 10;
    d[1]->inflight = 10;
    d[2]->inflight = 10;
    d[3]->inflight = 0;
    /* With two random choices, the idle worker wins whenever it is drawn: half the picks, and a loaded
     * worker is never preferred over it. 2000 picks stay within 1000 +- 200 (8.9 standard deviations)
     * except with probability below 1e-18. */
    int idle = 0;
    for (int i = 0; i < 2000; i++)
        idle += pick_seq(&p, PDR_ROLE_DECODE, NULL, 0) == 3;
    CHECK(idle > 800 && idle < 1200);
    /* Two workers: the less loaded always wins. */
    pdr_pool_eject(&p, d[0], "test");
    pdr_pool_eject(&p, d[1], "test");
    for (int i = 0; i < 100; i++)
        CHECK(pick_seq(&p, PDR_ROLE_DECODE, NULL, 0) == 3);
    /* Load spreads when equal. */
    d[2]->inflight = d[3]->inflight = 0;
    int cnt[4] = {0};
    for (int i = 0; i < 1000; i++) {
        pdr_worker_t *w = pick(&p, PDR_ROLE_DECODE, NULL, 0);
        cnt[w->seq]++;
        w->inflight++;
    }
    CHECK(abs(cnt[2] - cnt[3]) <= 2);
    CHECK(strcmp(W(&p, PDR_ROLE_PREFILL, 0)->bootstrap_host, "127.0.0.1") == 0);
    pdr_pool_dispose(&p);
    pdr_config_unref(c);
}

/* pool_load.c: the precedence shim > engine > router, the correction by the router's requests since the
 * sample, freshness, the fall-back, and the pick following the engine's load. */
static void test_load_sources(void)
{
    pdr_config_t *c = make_config(1, 2, "round_robin", "least_load");
    pdr_pool_t p;
    CHECK(pdr_pool_init(&p, c) == 0);
    pdr_worker_t *d0 = W(&p, PDR_ROLE_DECODE, 0), *d1 = W(&p, PDR_ROLE_DECODE, 1);
    uint64_t now = pdr_now_ms(), load;
    int fb;
    d0->inflight = 2;
    /* Poll off: the router's count, whatever else is known; no fall-back. */
    d0->engine.state = PDR_ELOAD_OK;
    d0->engine.ok_ms = now;
    d0->engine.reqs = 9;
    CHECK(pdr_worker_load(d0, 0, 1000, now, &load, &fb) == PDR_LOAD_SRC_ROUTER && load == 2 && !fb);
    /* Poll on, a fresh answer: 9 requests when the router had 1 in flight, 2 now: 10. */
    d0->engine.inflight_at = 1;
    CHECK(pdr_worker_load(d0, 100, 1000, now, &load, &fb) == PDR_LOAD_SRC_ENGINE && load == 10 && !fb);
    /* Requests ended since the answer take it down, never below 0. */
    d0->engine.inflight_at = 20;
    CHECK(pdr_worker_load(d0, 100, 1000, now, &load, &fb) == PDR_LOAD_SRC_ENGINE && load == 0);
    d0->engine.inflight_at = 2;
    /* Stale (older than 3 polls and a timeout), or failed: unknown, the router's count, a fall-back. */
    CHECK(pdr_worker_load(d0, 100, 1000, now + 1301, &load, &fb) == PDR_LOAD_SRC_ROUTER && load == 2 && fb);
    CHECK(pdr_worker_load(d0, 100, 1000, now + 1300, &load, &fb) == PDR_LOAD_SRC_ENGINE && load == 9 && !fb);
    d0->engine.state = PDR_ELOAD_FAILED;
    CHECK(pdr_worker_load(d0, 100, 1000, now, &load, &fb) == PDR_LOAD_SRC_ROUTER && load == 2 && fb);
    d0->engine.state = PDR_ELOAD_OK;
    /* A fresh shim report comes first: its queue depth 4 with 1 in flight then, 2 now: 5. */
    d0->load.report_ms = now;
    d0->load.queue_depth = 4;
    d0->load.inflight_rep = 1;
    CHECK(pdr_worker_load(d0, 100, 1000, now, &load, &fb) == PDR_LOAD_SRC_SHIM && load == 5 && !fb);
    CHECK(pdr_worker_load(d0, 10000, 1000, now + PDR_LOAD_SHIM_MAX_AGE_MS + 1, &load, &fb) ==
          PDR_LOAD_SRC_ENGINE);
    d0->load.report_ms = 0;
    /* The pick: d0 has fewer requests of the router's (0 against 1) but its engine says 9: least_load,
     * which draws both of two candidates, takes d1 every time once the poll is on, d0 while it is off. */
    d0->inflight = 0;
    d0->engine.inflight_at = 0;
    d0->engine.ok_ms = pdr_now_ms();
    d1->inflight = 1;
    for (int i = 0; i < 50; i++)
        CHECK(pick_seq(&p, PDR_ROLE_DECODE, NULL, 0) == 0);
    p.load_poll_ms = 60000;
    p.load_timeout_ms = 1000;
    d1->engine.state = PDR_ELOAD_OK; /* d1's engine: 1 request, the router's own */
    d1->engine.reqs = 1;
    d1->engine.inflight_at = 1;
    d1->engine.ok_ms = pdr_now_ms();
    for (int i = 0; i < 50; i++)
        CHECK(pick_seq(&p, PDR_ROLE_DECODE, NULL, 0) == 1);
    pdr_pool_dispose(&p);
    pdr_config_unref(c);
}

static void test_drain(void)
{
    pdr_config_t *c = make_config(2, 1, "round_robin", "least_load");
    pdr_pool_t p;
    CHECK(pdr_pool_init(&p, c) == 0);
    pdr_worker_t *w0 = W(&p, PDR_ROLE_PREFILL, 0), *w1 = W(&p, PDR_ROLE_PREFILL, 1);
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
        CHECK(pick(&p, PDR_ROLE_PREFILL, NULL, 0) == w1);
    CHECK(pick(&p, PDR_ROLE_PREFILL, &w1->uid, 1) == w1); /* the only serving one, even if avoided */
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
    CHECK(pick(&p, PDR_ROLE_PREFILL, NULL, 0) == NULL && pdr_pool_count_healthy(&p, PDR_ROLE_PREFILL) == 0);
    pdr_pool_eject(&p, w1, "test");
    CHECK(strcmp(pdr_worker_state_name(w1), "drained") == 0);
    pdr_pool_activate(&p, w1);
    CHECK(strcmp(pdr_worker_state_name(w1), "ejected") == 0); /* by a request failure, not a check */
    pdr_pool_check_result(&p, w1, 0);
    CHECK(strcmp(pdr_worker_state_name(w1), "ejected") == 0); /* failing checks keep the cause */
    pdr_pool_check_result(&p, w1, 1);
    pdr_pool_check_result(&p, w1, 1);
    CHECK(strcmp(pdr_worker_state_name(w1), "healthy") == 0);
    for (int i = 0; i < 3; i++)
        pdr_pool_check_result(&p, w1, 0);
    CHECK(strcmp(pdr_worker_state_name(w1), "unhealthy") == 0); /* by checks */
    pdr_pool_eject(&p, w1, "already down");
    CHECK(strcmp(pdr_worker_state_name(w1), "unhealthy") == 0);
    pdr_pool_activate(&p, w0);
    CHECK(pick(&p, PDR_ROLE_PREFILL, NULL, 0) == w0);
    pdr_pool_dispose(&p);
    pdr_config_unref(c);
}

static int found(pdr_pool_t *p, const char *id, size_t len, pdr_worker_t *want)
{
    pdr_worker_t *w = pdr_pool_find(p, id, len);
    pdr_worker_unref(w);
    return w == want;
}

static void test_find(void)
{
    pdr_config_t *c = make_config(2, 3, "round_robin", "round_robin");
    pdr_pool_t p;
    CHECK(pdr_pool_init(&p, c) == 0);
    CHECK(found(&p, "prefill-0", 9, W(&p, PDR_ROLE_PREFILL, 0)));
    CHECK(found(&p, "prefill-1", 9, W(&p, PDR_ROLE_PREFILL, 1)));
    CHECK(found(&p, "decode-2", 8, W(&p, PDR_ROLE_DECODE, 2)));
    CHECK(found(&p, "prefill-2", 9, NULL));
    CHECK(found(&p, "prefill-01", 10, NULL));
    CHECK(found(&p, "prefill-", 8, NULL));
    CHECK(found(&p, "prefill-1x", 10, NULL));
    CHECK(found(&p, "decode-0/drain", 8, W(&p, PDR_ROLE_DECODE, 0)));
    CHECK(found(&p, "decoder-0", 9, NULL));
    CHECK(found(&p, "prefill-99999999999999999999", 28, NULL));
    pdr_pool_dispose(&p);
    pdr_config_unref(c);
}

static pdr_worker_conf_t conf_of(const char *url, int bport)
{
    pdr_worker_conf_t w;
    char err[128];
    CHECK(pdr_worker_conf_parse_url(url, &w, err, sizeof(err)) == 0);
    w.bootstrap_port = bport;
    return w;
}

/* The address look-up of sidecar mode's prefill header (pool_addr.c): addresses compared as addresses, names
 * case-insensitively, a name never an address; the state of what it finds. */
static int addr_state(pdr_pool_t *p, const char *host, int port, const pdr_worker_t *want)
{
    int state = -1;
    pdr_worker_t *w = pdr_pool_find_addr(p, NULL, PDR_ROLE_PREFILL, host, strlen(host), port, &state);
    int ok = w == want;
    pdr_worker_unref(w);
    return ok ? state : -1;
}

static void test_find_addr(void)
{
    pdr_config_t *c = make_config(2, 1, "round_robin", "round_robin");
    pdr_pool_t p;
    CHECK(pdr_pool_init(&p, c) == 0);
    int err = 0;
    pdr_worker_conf_t a = conf_of("http://[::1]:30005", 8998),
                      b = conf_of("http://Prefill-A.example:8000", -1);
    pdr_worker_t *v6 = pdr_pool_add(&p, NULL, PDR_ROLE_PREFILL, &a, PDR_SOURCE_ADMIN, NULL, NULL, &err);
    pdr_worker_t *named = pdr_pool_add(&p, NULL, PDR_ROLE_PREFILL, &b, PDR_SOURCE_ADMIN, NULL, NULL, &err);
    CHECK(v6 != NULL && named != NULL);
    pdr_worker_t *p0 = W(&p, PDR_ROLE_PREFILL, 0), *p1 = W(&p, PDR_ROLE_PREFILL, 1);
    CHECK(addr_state(&p, "127.0.0.1", 30000, p0) == PDR_ADDR_SERVING);
    CHECK(addr_state(&p, "127.0.0.1", 30001, p1) == PDR_ADDR_SERVING);
    CHECK(addr_state(&p, "127.0.0.1", 30009, NULL) == PDR_ADDR_NONE);
    CHECK(addr_state(&p, "127.0.0.2", 30000, NULL) == PDR_ADDR_NONE);
    CHECK(addr_state(&p, "localhost", 30000, NULL) == PDR_ADDR_NONE);
    CHECK(addr_state(&p, "127.0.0.1", 31000, NULL) == PDR_ADDR_NONE); /* the decode's: not a prefill */
    CHECK(addr_state(&p, "0:0::1", 30005, v6) == PDR_ADDR_SERVING);
    CHECK(addr_state(&p, "::2", 30005, NULL) == PDR_ADDR_NONE);
    CHECK(addr_state(&p, "prefill-a.EXAMPLE", 8000, named) == PDR_ADDR_SERVING);
    CHECK(addr_state(&p, "prefill-a.example.", 8000, NULL) == PDR_ADDR_NONE);
    /* Draining, and down: found, not returned. */
    pdr_pool_drain(&p, p1, 0, "test");
    CHECK(addr_state(&p, "127.0.0.1", 30001, NULL) == PDR_ADDR_DRAINING);
    pdr_pool_eject(&p, p0, "test");
    CHECK(addr_state(&p, "127.0.0.1", 30000, NULL) == PDR_ADDR_DOWN);
    pdr_worker_unref(v6);
    pdr_worker_unref(named);
    pdr_worker_conf_clear(&a);
    pdr_worker_conf_clear(&b);
    pdr_pool_dispose(&p);
    pdr_config_unref(c);
}

static void test_membership(void)
{
    pdr_config_t *c = make_config(2, 1, "round_robin", "round_robin");
    pdr_pool_t p;
    CHECK(pdr_pool_init(&p, c) == 0);
    uint64_t gen0 = p.generation;

    /* add: a new id after the static ones, a reference for the caller; the same URL again is refused. */
    pdr_worker_conf_t wc = conf_of("http://10.0.0.9:30000", 8998);
    int err = 0;
    pdr_worker_t *a =
        pdr_pool_add(&p, NULL, PDR_ROLE_PREFILL, &wc, PDR_SOURCE_ADMIN, NULL, "{\"zone\":\"a\"}", &err);
    CHECK(a != NULL && strcmp(a->id, "prefill-2") == 0 && strcmp(a->source, "admin") == 0);
    CHECK(strcmp(a->labels_json, "{\"zone\":\"a\"}") == 0 && a->conf.bootstrap_port == 8998);
    CHECK(pdr_pool_count(&p, PDR_ROLE_PREFILL) == 3 && p.generation != gen0);
    CHECK(pdr_pool_add(&p, NULL, PDR_ROLE_PREFILL, &wc, PDR_SOURCE_ADMIN, NULL, NULL, &err) == NULL &&
          err == PDR_EEXIST);
    /* The same URL as a decode is another worker. */
    pdr_worker_t *ad = pdr_pool_add(&p, NULL, PDR_ROLE_DECODE, &wc, PDR_SOURCE_ADMIN, NULL, NULL, &err);
    CHECK(ad != NULL && strcmp(ad->id, "decode-1") == 0);
    pdr_worker_unref(ad);

    /* remove while a request holds it: out of the pool, never picked, still valid; ids not reused. */
    pdr_worker_t *held = pdr_worker_ref(a);
    pdr_worker_track(held, 1);
    CHECK(pdr_pool_remove(&p, a, "test") == 0 && pdr_worker_removed(held));
    CHECK(pdr_pool_remove(&p, a, "again") == PDR_ENOWORKER);
    CHECK(pdr_pool_count(&p, PDR_ROLE_PREFILL) == 2);
    for (int i = 0; i < 10; i++)
        CHECK(pick(&p, PDR_ROLE_PREFILL, NULL, 0) != held);
    CHECK(found(&p, "prefill-2", 9, NULL));
    pdr_worker_track(held, -1);
    pdr_worker_unref(held);
    pdr_worker_unref(a); /* the add's reference: now freed (ASan checks) */
    pdr_worker_t *b = pdr_pool_add(&p, NULL, PDR_ROLE_PREFILL, &wc, PDR_SOURCE_ADMIN, NULL, NULL, &err);
    CHECK(b != NULL && strcmp(b->id, "prefill-3") == 0);
    pdr_worker_unref(b);
    pdr_worker_conf_clear(&wc);

    /* reconcile: a source's set becomes exactly the input; other sources' workers stay. */
    pdr_worker_conf_t set[3] = {conf_of("http://10.1.0.1:30000", 8998),
                                conf_of("http://10.1.0.2:30000", 8998),
                                conf_of("http://127.0.0.1:30000", 8998)}; /* the last is a static URL */
    const char *names[3] = {"pod-a", "pod-b", "pod-c"};
    CHECK(pdr_pool_reconcile(&p, PDR_DEFAULT_POOL, PDR_SOURCE_KUBERNETES, PDR_ROLE_PREFILL, set, names, 3) ==
          2);
    CHECK(pdr_pool_count(&p, PDR_ROLE_PREFILL) == 5);
    pdr_worker_t *k1 = pdr_pool_find(&p, "prefill-4", 9);
    CHECK(k1 != NULL && strcmp(k1->source, "kubernetes") == 0 && strcmp(k1->name, "pod-a") == 0);
    pdr_pool_eject(&p, k1, "keeps its state across an identical reconcile");
    CHECK(pdr_pool_reconcile(&p, PDR_DEFAULT_POOL, PDR_SOURCE_KUBERNETES, PDR_ROLE_PREFILL, set, names, 3) ==
          0);
    CHECK(!pdr_worker_removed(k1) && !pdr_worker_healthy(k1));
    /* pod-a goes away, pod-b changes its bootstrap port (a new worker), a pod-d arrives */
    pdr_worker_conf_clear(&set[0]);
    set[0] = conf_of("http://10.1.0.4:30000", 8998);
    set[1].bootstrap_port = 9999;
    CHECK(pdr_pool_reconcile(&p, PDR_DEFAULT_POOL, PDR_SOURCE_KUBERNETES, PDR_ROLE_PREFILL, set, names, 2) ==
          4);
    CHECK(pdr_worker_removed(k1) && pdr_pool_count(&p, PDR_ROLE_PREFILL) == 5);
    pdr_worker_unref(k1);
    CHECK(pdr_pool_reconcile(&p, PDR_DEFAULT_POOL, PDR_SOURCE_KUBERNETES, PDR_ROLE_PREFILL, NULL, NULL, 0) ==
          2);
    CHECK(pdr_pool_count(&p, PDR_ROLE_PREFILL) == 3); /* 2 static + prefill-3 (admin) */
    for (int i = 0; i < 3; i++)
        pdr_worker_conf_clear(&set[i]);

    /* a reload: unchanged static workers keep their state, a dropped one leaves, a new one comes; the
     * admin worker stays; the policy changes. */
    pdr_pool_eject(&p, W(&p, PDR_ROLE_PREFILL, 0), "state to keep");
    pdr_worker_t *s0 = pdr_pool_find(&p, "prefill-0", 9);
    pdr_config_t *c2 = make_config(1, 2, "least_load", "round_robin");
    CHECK(pdr_pool_apply_config(&p, c2) == 2); /* prefill-1 out, a second static decode in */
    CHECK(!pdr_worker_removed(s0) && !pdr_worker_healthy(s0));
    CHECK(found(&p, "prefill-1", 9, NULL) &&
          found(&p, "prefill-3", 9, pdr_pool__at(&p, PDR_ROLE_PREFILL, 1)));
    CHECK(pdr_pool_count(&p, PDR_ROLE_DECODE) == 3 &&
          p.groups[0].policy[PDR_ROLE_PREFILL] == PDR_POLICY_LEAST_LOAD);
    pdr_worker_unref(s0);

    /* delete: idle -> gone at once; busy -> draining, gone at the tick after its last request. */
    pdr_worker_t *d1 = pdr_pool_find(&p, "decode-1", 8);
    CHECK(pdr_pool_delete(&p, d1, 0, 0) == -1 && pdr_worker_removed(d1));
    CHECK(pdr_pool_delete(&p, d1, 0, 0) == PDR_ENOWORKER || pdr_worker_removed(d1));
    pdr_worker_unref(d1);
    pdr_worker_t *d0 = pdr_pool_find(&p, "decode-0", 8);
    pdr_worker_track(d0, 1);
    CHECK(pdr_pool_delete(&p, d0, 0, 0) == PDR_DRAIN_DRAINING && !pdr_worker_removed(d0));
    CHECK(pdr_pool_drain_tick(&p, pdr_now_ms()) == 0 && !pdr_worker_removed(d0));
    pdr_worker_track(d0, -1);
    CHECK(pdr_pool_drain_tick(&p, pdr_now_ms()) >= 1 && pdr_worker_removed(d0));
    pdr_worker_unref(d0);
    /* activate cancels a pending delete */
    pdr_worker_t *d2 = pdr_pool__at(&p, PDR_ROLE_DECODE, 0);
    pdr_worker_track(d2, 1);
    CHECK(pdr_pool_delete(&p, d2, 0, 0) == PDR_DRAIN_DRAINING);
    pdr_pool_activate(&p, d2);
    pdr_worker_track(d2, -1);
    pdr_pool_drain_tick(&p, pdr_now_ms());
    CHECK(!pdr_worker_removed(d2) && pdr_worker_serving(d2));
    /* force: gone at once, busy or not */
    pdr_worker_track(d2, 1);
    pdr_worker_t *keep = pdr_worker_ref(d2);
    CHECK(pdr_pool_delete(&p, d2, 1, 0) == -1 && pdr_worker_removed(keep) && pdr_worker_inflight(keep) == 1);
    pdr_worker_track(keep, -1);
    pdr_worker_unref(keep);

    pdr_pool_dispose(&p);
    pdr_config_unref(c2);
    pdr_config_unref(c);
}

static pdr_config_t *load_yaml(const char *yaml)
{
    char err[256];
    pdr_config_t *c = pdr_config_load_string(yaml, strlen(yaml), "pools.yaml", err, sizeof(err));
    if (c == NULL)
        fprintf(stderr, "%s\n", err);
    return c;
}

#define POOL_YAML(name, model, policy, pport, dport1, dport2)                                                \
    "  - name: " name "\n    models: [" model "]\n    policy: " policy "\n    workers:\n"                    \
    "      prefill: [ http://127.0.0.1:" pport " ]\n"                                                        \
    "      decode: [ http://127.0.0.1:" dport1 ", http://127.0.0.1:" dport2 " ]\n"

/* Pools: picks (every policy) and retries stay in the request's pool; per-pool policies and counts; a
 * reload adds a pool, removes one (its workers from every source leave) and moves a worker. */
static void test_pools(void)
{
    pdr_config_t *c = load_yaml("pools:\n" POOL_YAML("a", "ma", "round_robin", "30000", "31000", "31001")
                                    POOL_YAML("b", "mb", "least_load", "30001", "31002", "31003"));
    pdr_pool_t p;
    CHECK(c != NULL && pdr_pool_init(&p, c) == 0);
    CHECK(p.n_groups == 2 && strcmp(p.groups[1].name, "b") == 0 &&
          p.groups[1].policy[PDR_ROLE_PREFILL] == PDR_POLICY_LEAST_LOAD);
    CHECK(strcmp(W(&p, PDR_ROLE_DECODE, 2)->pool, "b") == 0 && W(&p, PDR_ROLE_DECODE, 2)->group == 1);
    /* Round robin inside a: its two decodes in turn, never b's. */
    int seen[4] = {0, 0, 0, 0};
    for (int i = 0; i < 40; i++) {
        pdr_worker_t *w = pdr_pool_pick(&p, "a", PDR_ROLE_DECODE, NULL, 0);
        CHECK(w != NULL && w->group == 0);
        if (w != NULL)
            seen[w->seq]++;
        pdr_worker_unref(w);
    }
    CHECK(seen[0] == 20 && seen[1] == 20 && seen[2] == 0 && seen[3] == 0);
    /* Least load inside b; avoiding both of b's decodes gives one of b's again, never a's. */
    uint64_t avoid[2] = {W(&p, PDR_ROLE_DECODE, 2)->uid, W(&p, PDR_ROLE_DECODE, 3)->uid};
    for (int i = 0; i < 20; i++) {
        pdr_worker_t *w = pdr_pool_pick(&p, "b", PDR_ROLE_DECODE, avoid, i % 2 ? 2 : 1);
        CHECK(w != NULL && w->group == 1 && (i % 2 || w == W(&p, PDR_ROLE_DECODE, 3)));
        pdr_worker_unref(w);
    }
    CHECK(pdr_pool_pick(&p, "c", PDR_ROLE_DECODE, NULL, 0) == NULL);
    /* b's only prefill down: b has none to give, a still does. */
    pdr_pool_eject(&p, W(&p, PDR_ROLE_PREFILL, 1), "test");
    CHECK(pdr_pool_pick(&p, "b", PDR_ROLE_PREFILL, NULL, 0) == NULL);
    CHECK(pdr_pool_count_healthy_in(&p, "b", PDR_ROLE_PREFILL) == 0 &&
          pdr_pool_count_healthy_in(&p, "a", PDR_ROLE_PREFILL) == 1 &&
          pdr_pool_count_healthy_in(&p, "b", PDR_ROLE_DECODE) == 2 &&
          pdr_pool_count_healthy_in(&p, "zz", PDR_ROLE_DECODE) == 0);
    pdr_worker_t *pw = pdr_pool_pick(&p, "a", PDR_ROLE_PREFILL, NULL, 0);
    CHECK(pw != NULL && pw->seq == 0);
    pdr_worker_unref(pw);

    /* Admin adds: into a named pool; an unknown pool is refused. */
    pdr_worker_conf_t wc;
    int err = 0;
    CHECK(pdr_worker_conf_parse_url("http://127.0.0.1:32000", &wc, NULL, 0) == 0);
    CHECK(pdr_pool_add(&p, "zz", PDR_ROLE_DECODE, &wc, PDR_SOURCE_ADMIN, NULL, NULL, &err) == NULL &&
          err == PDR_ENOWORKER);
    pdr_worker_t *ad = pdr_pool_add(&p, "b", PDR_ROLE_DECODE, &wc, PDR_SOURCE_ADMIN, NULL, NULL, &err);
    CHECK(ad != NULL && ad->group == 1 && strcmp(ad->pool, "b") == 0);
    pdr_worker_conf_clear(&wc);
    char names[4][64];
    CHECK(pdr_pool_groups(&p, names, 4) == 2 && strcmp(names[0], "a") == 0 && strcmp(names[1], "b") == 0);

    /* Reload: b goes (its static and admin workers leave), c comes with b's old prefill URL (a new worker
     * there), a keeps its workers with their state and receives a policy change. */
    pdr_worker_t *a0 = pdr_pool_find(&p, "decode-0", 8);
    pdr_worker_t *b0 = pdr_pool_find(&p, "prefill-1", 9);
    pdr_config_t *c2 = load_yaml("pools:\n" POOL_YAML("a", "ma", "random", "30000", "31000", "31001")
                                     POOL_YAML("c", "mc", "round_robin", "30001", "31004", "31005"));
    CHECK(c2 != NULL &&
          pdr_pool_apply_config(&p, c2) == 7); /* b's 3 + 1 admin out; c's 3 in (its prefill anew) */
    CHECK(p.n_groups == 2 && strcmp(p.groups[1].name, "c") == 0 &&
          p.groups[0].policy[PDR_ROLE_DECODE] == PDR_POLICY_RANDOM);
    CHECK(pdr_worker_removed(ad) && pdr_worker_removed(b0) && !pdr_worker_removed(a0) && a0->group == 0);
    CHECK(pdr_pool_count(&p, PDR_ROLE_PREFILL) == 2 && pdr_pool_count(&p, PDR_ROLE_DECODE) == 4);
    pdr_worker_t *cp = pdr_pool_pick(&p, "c", PDR_ROLE_PREFILL, NULL, 0);
    CHECK(cp != NULL && cp != b0 && strcmp(cp->conf.url, "http://127.0.0.1:30001") == 0 && cp->group == 1 &&
          pdr_worker_healthy(cp));
    pdr_worker_unref(cp);
    CHECK(pdr_pool_pick(&p, "b", PDR_ROLE_DECODE, NULL, 0) == NULL);
    /* Discovery per pool: each pool's source reconciles that pool's workers only; a URL another pool's
     * source brought first is not taken; a pool that is not configured receives nothing. */
    pdr_worker_conf_t dc[3];
    CHECK(pdr_worker_conf_parse_url("http://10.9.0.1:30000", &dc[0], NULL, 0) == 0 &&
          pdr_worker_conf_parse_url("http://10.9.0.2:30000", &dc[1], NULL, 0) == 0 &&
          pdr_worker_conf_parse_url("http://10.9.0.3:30000", &dc[2], NULL, 0) == 0);
    const char *pods[3] = {"pod-1", "pod-2", "pod-3"};
    CHECK(pdr_pool_reconcile(&p, "a", PDR_SOURCE_KUBERNETES, PDR_ROLE_DECODE, dc, pods, 2) == 2 &&
          pdr_pool_count(&p, PDR_ROLE_DECODE) == 6);
    pdr_worker_conf_t cset[2] = {dc[2], dc[0]}; /* shallow: 10.9.0.3 and a's 10.9.0.1 */
    const char *cpods[2] = {"pod-3", "pod-1"};
    CHECK(pdr_pool_reconcile(&p, "c", PDR_SOURCE_KUBERNETES, PDR_ROLE_DECODE, cset, cpods, 2) == 1 &&
          pdr_pool_count(&p, PDR_ROLE_DECODE) == 7);
    CHECK(pdr_pool_count_healthy_in(&p, "a", PDR_ROLE_DECODE) == 4 &&
          pdr_pool_count_healthy_in(&p, "c", PDR_ROLE_DECODE) == 3);
    /* a's set again unchanged: c's worker of the same source stays; then a's set empties. */
    CHECK(pdr_pool_reconcile(&p, "a", PDR_SOURCE_KUBERNETES, PDR_ROLE_DECODE, dc, pods, 2) == 0);
    CHECK(pdr_pool_reconcile(&p, "a", PDR_SOURCE_KUBERNETES, PDR_ROLE_DECODE, NULL, NULL, 0) == 2 &&
          pdr_pool_count(&p, PDR_ROLE_DECODE) == 5 &&
          pdr_pool_count_healthy_in(&p, "c", PDR_ROLE_DECODE) == 3);
    /* 10.9.0.1 is free now: c's next set takes it. */
    CHECK(pdr_pool_reconcile(&p, "c", PDR_SOURCE_KUBERNETES, PDR_ROLE_DECODE, cset, cpods, 2) == 1 &&
          pdr_pool_count_healthy_in(&p, "c", PDR_ROLE_DECODE) == 4);
    for (int i = 0; i < 20; i++) {
        pdr_worker_t *w = pdr_pool_pick(&p, "c", PDR_ROLE_DECODE, NULL, 0);
        CHECK(w != NULL && w->group == 1 && strcmp(w->pool, "c") == 0);
        pdr_worker_unref(w);
    }
    CHECK(pdr_pool_reconcile(&p, PDR_DEFAULT_POOL, PDR_SOURCE_DNS, PDR_ROLE_DECODE, &dc[1], NULL, 1) == 0 &&
          pdr_pool_count(&p, PDR_ROLE_DECODE) == 6);
    for (int i = 0; i < 3; i++)
        pdr_worker_conf_clear(&dc[i]);
    /* Back to the one-pool form: the pools are gone, their workers too; "default" receives its own. */
    pdr_config_t *c3 = make_config(1, 1, "round_robin", "round_robin");
    CHECK(c3 != NULL && pdr_pool_apply_config(&p, c3) > 0);
    CHECK(p.n_groups == 1 && strcmp(p.groups[0].name, "default") == 0);
    CHECK(pdr_pool_count(&p, PDR_ROLE_PREFILL) == 1 && pdr_pool_count(&p, PDR_ROLE_DECODE) == 1);
    pdr_worker_t *dw = pdr_pool_pick(&p, NULL, PDR_ROLE_DECODE, NULL, 0);
    CHECK(dw != NULL && strcmp(dw->pool, "default") == 0 && pdr_worker_removed(a0)); /* a is gone too */
    pdr_worker_unref(dw);
    pdr_worker_unref(ad);
    pdr_worker_unref(a0);
    pdr_worker_unref(b0);
    pdr_pool_dispose(&p);
    pdr_config_unref(c);
    pdr_config_unref(c2);
    pdr_config_unref(c3);
}

static pdr_config_t *load(const char *yaml)
{
    char err[256];
    pdr_config_t *c = pdr_config_load_string(yaml, strlen(yaml), "dp.yaml", err, sizeof(err));
    if (c == NULL)
        fprintf(stderr, "%s\n", err);
    return c;
}

/* dp_size: one worker per rank, named URL@RANK; regular workers; saturation; a reload by URL and rank. */
static void test_ranks_and_regular(void)
{
    pdr_config_t *c =
        load("workers:\n"
             "  prefill: [ { url: 'http://127.0.0.1:30000', bootstrap_port: 9000, dp_size: 3 } ]\n"
             "  decode: [ 'http://127.0.0.1:31000' ]\n"
             "  regular: [ 'http://127.0.0.1:32000', { url: 'http://127.0.0.1:32001', dp_size: 2 } ]\n");
    pdr_pool_t p;
    CHECK(c != NULL && pdr_pool_init(&p, c) == 0);
    CHECK(pdr_pool_count(&p, PDR_ROLE_PREFILL) == 3 && pdr_pool_count(&p, PDR_ROLE_DECODE) == 1);
    CHECK(pdr_pool_count(&p, PDR_ROLE_REGULAR) == 3);
    for (int r = 0; r < 3; r++) {
        pdr_worker_t *w = W(&p, PDR_ROLE_PREFILL, (size_t)r);
        char want[64];
        snprintf(want, sizeof(want), "http://127.0.0.1:30000@%d", r);
        CHECK(w->dp_rank == r && strcmp(w->target, want) == 0 && w->conf.bootstrap_port == 9000);
    }
    CHECK(W(&p, PDR_ROLE_DECODE, 0)->dp_rank == -1 &&
          strcmp(W(&p, PDR_ROLE_DECODE, 0)->target, "http://127.0.0.1:31000") == 0);
    CHECK(W(&p, PDR_ROLE_REGULAR, 0)->dp_rank == -1 && W(&p, PDR_ROLE_REGULAR, 2)->dp_rank == 1);
    CHECK(strcmp(W(&p, PDR_ROLE_REGULAR, 0)->id, "regular-0") == 0);
    pdr_worker_t **all;
    size_t n = pdr_pool_snapshot(&p, -1, &all); /* every role: health checks cover regular workers */
    CHECK(n == 7);
    pdr_pool_release(all, n);
    /* Saturation: every serving prefill at the threshold. */
    CHECK(!pdr_pool_saturated(&p, NULL, PDR_ROLE_PREFILL, 1));
    for (int r = 0; r < 3; r++)
        pdr_worker_track(W(&p, PDR_ROLE_PREFILL, (size_t)r), 1);
    CHECK(pdr_pool_saturated(&p, NULL, PDR_ROLE_PREFILL, 1) &&
          !pdr_pool_saturated(&p, NULL, PDR_ROLE_PREFILL, 2));
    pdr_pool_drain(&p, W(&p, PDR_ROLE_PREFILL, 0), 0, "test"); /* not serving: does not count */
    pdr_worker_track(W(&p, PDR_ROLE_PREFILL, 1), -1);
    CHECK(!pdr_pool_saturated(&p, NULL, PDR_ROLE_PREFILL, 1));
    pdr_worker_track(W(&p, PDR_ROLE_PREFILL, 0), -1);
    pdr_worker_track(W(&p, PDR_ROLE_PREFILL, 2), -1);
    pdr_pool_activate(&p, W(&p, PDR_ROLE_PREFILL, 0));
    /* A reload: an identical config keeps every rank's worker; a new dp_size replaces them all (the room
     * is computed from the worker's dp_size). */
    uint64_t uid2 = W(&p, PDR_ROLE_PREFILL, 2)->uid;
    pdr_pool_apply_config(&p, c);
    CHECK(pdr_pool_count(&p, PDR_ROLE_PREFILL) == 3 && W(&p, PDR_ROLE_PREFILL, 2)->uid == uid2);
    uint64_t uid0 = W(&p, PDR_ROLE_PREFILL, 0)->uid, uid1 = W(&p, PDR_ROLE_PREFILL, 1)->uid;
    pdr_config_t *c2 =
        load("workers:\n"
             "  prefill: [ { url: 'http://127.0.0.1:30000', bootstrap_port: 9000, dp_size: 2 } ]\n"
             "  decode: [ 'http://127.0.0.1:31000' ]\n");
    CHECK(c2 != NULL);
    pdr_pool_apply_config(&p, c2);
    CHECK(pdr_pool_count(&p, PDR_ROLE_PREFILL) == 2 && pdr_pool_count(&p, PDR_ROLE_REGULAR) == 0);
    CHECK(W(&p, PDR_ROLE_PREFILL, 0)->uid != uid0 && W(&p, PDR_ROLE_PREFILL, 1)->uid != uid1);
    CHECK(W(&p, PDR_ROLE_PREFILL, 0)->conf.dp_size == 2 && W(&p, PDR_ROLE_PREFILL, 1)->dp_rank == 1);
    pdr_pool_dispose(&p);
    pdr_config_unref(c);
    pdr_config_unref(c2);
}

/* sglang's /get_server_info and vLLM's /v1/models parsed; the key follows the layout's fields only. */
static void test_identity(void)
{
    const char *sg = "{\"model_path\":\"/m/llama\",\"revision\":\"r1\",\"tp_size\":2,\"dp_size\":4,"
                     "\"dtype\":\"bfloat16\",\"kv_cache_dtype\":\"auto\",\"page_size\":16,"
                     "\"disaggregation_transfer_backend\":\"mooncake\",\"port\":30000,\"other\":[1,2]}";
    pdr_identity_t a, b;
    char msg[128], diff[256];
    CHECK(pdr_identity_parse(PDR_IDENTITY_SGLANG, sg, strlen(sg), &a, msg, sizeof(msg)) == 0);
    CHECK(strcmp(a.model_path, "/m/llama") == 0 && strcmp(a.revision, "r1") == 0 && a.tp_size == 2);
    CHECK(a.dp_size == 4 && a.page_size == 16 && strcmp(a.backend, "mooncake") == 0 && a.key != 0);
    CHECK(a.key == pdr_identity_key(&a));
    /* dp_size is shown, not compared; every layout field changes the key. */
    b = a;
    b.dp_size = 1;
    CHECK(pdr_identity_key(&b) == a.key && pdr_identity_diff(&a, &b, diff, sizeof(diff)) == 0);
    b = a;
    snprintf(b.kv_cache_dtype, sizeof(b.kv_cache_dtype), "fp8_e4m3");
    CHECK(pdr_identity_key(&b) != a.key && pdr_identity_diff(&b, &a, diff, sizeof(diff)) == 1);
    CHECK(strcmp(diff, "kv_cache_dtype fp8_e4m3 vs auto") == 0);
    b = a;
    b.page_size = 32;
    CHECK(pdr_identity_key(&b) != a.key && pdr_identity_diff(&a, &b, diff, sizeof(diff)) == 1);
    CHECK(strcmp(diff, "page_size 16 vs 32") == 0);
    b = a;
    b.revision[0] = '\0';
    CHECK(pdr_identity_key(&b) != a.key && pdr_identity_diff(&a, &b, diff, sizeof(diff)) == 1);
    CHECK(strcmp(diff, "revision r1 vs (none)") == 0);
    /* null and absent fields: "" and -1. */
    const char *sparse = "{\"model_path\":\"m\",\"revision\":null,\"page_size\":null}";
    CHECK(pdr_identity_parse(PDR_IDENTITY_SGLANG, sparse, strlen(sparse), &b, msg, sizeof(msg)) == 0);
    CHECK(b.revision[0] == '\0' && b.page_size == -1 && b.tp_size == -1 && b.key != 0);
    /* Not the engine's shape: refused with a reason. */
    static const char *const bad[] = {"[]", "{", "{\"revision\":\"x\"}", "{\"model_path\":3}",
                                      "{\"model_path\":\"m\",\"tp_size\":\"2\"}"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK(pdr_identity_parse(PDR_IDENTITY_SGLANG, bad[i], strlen(bad[i]), &b, msg, sizeof(msg)) ==
              PDR_EINVAL);
        CHECK(msg[0] != '\0' && b.key == 0);
    }
    const char *vl = "{\"object\":\"list\",\"data\":[{\"id\":\"served\",\"root\":\"/m/llama\"}]}";
    CHECK(pdr_identity_parse(PDR_IDENTITY_VLLM, vl, strlen(vl), &b, msg, sizeof(msg)) == 0);
    CHECK(strcmp(b.model_path, "/m/llama") == 0 && b.engine == PDR_IDENTITY_VLLM && b.key != a.key);
    CHECK(pdr_identity_parse(PDR_IDENTITY_VLLM, "{\"data\":[]}", 11, &b, msg, sizeof(msg)) == PDR_EINVAL);
    char g[17];
    pdr_identity_group(0, g);
    CHECK(g[0] == '\0');
    pdr_identity_group(0xabcULL, g);
    CHECK(strcmp(g, "0000000000000abc") == 0);
}

/* A filtered pick takes only the workers of the filter's key, unknown ones as the filter says. */
static void test_pick_filter(void)
{
    pdr_config_t *c = make_config(1, 3, "round_robin", "round_robin");
    pdr_pool_t p;
    CHECK(pdr_pool_init(&p, c) == 0);
    pdr_identity_t ia = {.model_path = "a", .page_size = 1, .tp_size = 1}, ib = ia;
    snprintf(ib.revision, sizeof(ib.revision), "b");
    ia.key = pdr_identity_key(&ia);
    ib.key = pdr_identity_key(&ib);
    pdr_pool_set_identity(&p, W(&p, PDR_ROLE_DECODE, 0), &ia, NULL);
    pdr_pool_set_identity(&p, W(&p, PDR_ROLE_DECODE, 1), &ib, NULL); /* decode 2: unknown */
    pdr_pick_filter_t fa = {.key = ia.key}, fb_any = {.key = ib.key, .unknown_ok = 1}, none = {.key = 0x1234};
    for (int i = 0; i < 6; i++) {
        pdr_worker_t *w = pdr_pool_pick_filtered(&p, NULL, PDR_ROLE_DECODE, NULL, 0, NULL, 0, NULL, &fa);
        CHECK(w == W(&p, PDR_ROLE_DECODE, 0));
        pdr_worker_unref(w);
        w = pdr_pool_pick_filtered(&p, NULL, PDR_ROLE_DECODE, NULL, 0, NULL, 0, NULL, &fb_any);
        CHECK(w == W(&p, PDR_ROLE_DECODE, 1) || w == W(&p, PDR_ROLE_DECODE, 2));
        pdr_worker_unref(w);
    }
    CHECK(pdr_pool_pick_filtered(&p, NULL, PDR_ROLE_DECODE, NULL, 0, NULL, 0, NULL, &none) == NULL);
    /* Avoided workers stay out first, then come back, but never past the filter. */
    uint64_t avoid[1] = {W(&p, PDR_ROLE_DECODE, 0)->uid};
    pdr_worker_t *w = pdr_pool_pick_filtered(&p, NULL, PDR_ROLE_DECODE, avoid, 1, NULL, 0, NULL, &fa);
    CHECK(w == W(&p, PDR_ROLE_DECODE, 0));
    pdr_worker_unref(w);
    /* A forgotten identity is unknown: the key filter no longer takes it. */
    pdr_pool_forget_identity(&p, W(&p, PDR_ROLE_DECODE, 0), "test");
    CHECK(pdr_worker_compat_key(W(&p, PDR_ROLE_DECODE, 0)) == 0);
    CHECK(pdr_pool_pick_filtered(&p, NULL, PDR_ROLE_DECODE, NULL, 0, NULL, 0, NULL, &fa) == NULL);
    pdr_identity_t got;
    char err[64];
    CHECK(pdr_pool_identity(&p, W(&p, PDR_ROLE_DECODE, 0), &got, err, sizeof(err)) == 0);
    CHECK(got.key == ia.key && strcmp(err, "test") == 0); /* the last identity read stays visible */
    pdr_pool_dispose(&p);
    pdr_config_unref(c);
}

static const pdr_test_case_t cases[] = {
    {"health_state", test_health_state, 60},
    {"round_robin", test_round_robin, 60},
    {"least_load", test_least_load, 60},
    {"load_sources", test_load_sources, 60},
    {"drain", test_drain, 60},
    {"find", test_find, 60},
    {"find_addr", test_find_addr, 60},
    {"membership", test_membership, 60},
    {"pools", test_pools, 60},
    {"ranks_and_regular", test_ranks_and_regular, 60},
    {"identity", test_identity, 60},
    {"pick_filter", test_pick_filter, 60},
};

int main(int argc, char **argv)
{
    return PDR_TEST_RUN(cases, argc, argv);
}
