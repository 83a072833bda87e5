/*
 * Session affinity (router/workers/affinity.h): the rendezvous choice, its stability when a worker leaves,
 * soft mode's bound, and the pool's pick with affinity on (hit, moved, fallback, no key, hard mode).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "runner.h"
#include "affinity.h"
#include "config.h"
#include "identity.h"
#include "pool.h"
#include "routing.h"

#define NW 5
#define NS 20000

static uint64_t session_of(unsigned i)
{
    char s[32];
    int n = snprintf(s, sizeof(s), "session-%u", i);
    return pdr_affinity_key(s, (size_t)n);
}

static void ring_keys(uint64_t *keys, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char url[64];
        int len = snprintf(url, sizeof(url), "http://10.0.0.%zu:30000", i + 1);
        keys[i] = pdr_routing_hash(url, (size_t)len);
    }
}

/* The same key always gets the same worker, and sessions spread: each of 5 workers gets 20% of 20000
 * sessions, within 2.5 points (the deviation of a fair draw is 0.28 points: a fixed set of keys, no luck). */
static void test_spread(void)
{
    uint64_t keys[NW];
    ring_keys(keys, NW);
    size_t count[NW] = {0};
    for (unsigned s = 0; s < NS; s++) {
        int k = pdr_affinity_choose(session_of(s), keys, NULL, NW);
        CHECK(k >= 0 && k < NW);
        CHECK(k == pdr_affinity_choose(session_of(s), keys, NULL, NW));
        count[k]++;
    }
    for (int i = 0; i < NW; i++)
        CHECK(count[i] > NS / NW - NS / 40 && count[i] < NS / NW + NS / 40);
    CHECK(pdr_affinity_choose(1, keys, NULL, 0) == -1);
}

/* A worker leaving moves its own sessions only, each to where it goes among the rest; when it returns they
 * come back. The order of the workers does not matter. */
static void test_removal_moves_only_its_sessions(void)
{
    uint64_t keys[NW], rev[NW];
    ring_keys(keys, NW);
    for (int i = 0; i < NW; i++)
        rev[i] = keys[NW - 1 - i];
    unsigned char ok[NW] = {1, 1, 0, 1, 1};
    size_t moved = 0;
    for (unsigned s = 0; s < NS; s++) {
        uint64_t k = session_of(s);
        int before = pdr_affinity_choose(k, keys, NULL, NW);
        int after = pdr_affinity_choose(k, keys, ok, NW);
        CHECK(after != 2);
        if (before != 2)
            CHECK(after == before);
        moved += before == 2;
        CHECK(NW - 1 - pdr_affinity_choose(k, rev, NULL, NW) == before);
    }
    CHECK(moved > NS / NW - NS / 40 && moved < NS / NW + NS / 40);
    unsigned char none[NW] = {0};
    CHECK(pdr_affinity_choose(7, keys, none, NW) == -1);
}

static void test_overloaded(void)
{
    CHECK(!pdr_affinity_overloaded(0, 0, 3, 1.5)); /* an idle pool never sheds */
    CHECK(!pdr_affinity_overloaded(1, 1, 3, 1.5)); /* 2 > 1.5 x 4/3 is false: exactly at the bound */
    CHECK(pdr_affinity_overloaded(2, 2, 3, 1.5));
    CHECK(!pdr_affinity_overloaded(10, 30, 3, 1.5)); /* everyone as busy */
    CHECK(!pdr_affinity_overloaded(3, 3, 3, 2));     /* 4 > 2 x 2 is false */
    CHECK(pdr_affinity_overloaded(4, 4, 3, 2));
    CHECK(!pdr_affinity_overloaded(1, 1, 0, 1.5)); /* no candidates: nothing to shed for */
}

static pdr_config_t *make_config(const char *policy)
{
    char yaml[1024];
    int o = snprintf(yaml, sizeof(yaml),
                     "policy: { prefill: %s, decode: %s }\nworkers:\n  prefill:\n"
                     "    - { url: http://127.0.0.1:30000 }\n  decode:\n",
                     policy, policy);
    for (int i = 0; i < 3; i++)
        o += snprintf(yaml + o, sizeof(yaml) - (size_t)o, "    - { url: http://127.0.0.1:%d }\n", 31000 + i);
    char err[256];
    pdr_config_t *c = pdr_config_load_string(yaml, (size_t)o, "test.yaml", err, sizeof(err));
    if (c == NULL)
        fprintf(stderr, "%s\n", err);
    return c;
}

static pdr_worker_t *pick(pdr_pool_t *p, const pdr_pick_filter_t *f)
{
    pdr_worker_t *w = pdr_pool_pick_filtered(p, NULL, PDR_ROLE_DECODE, NULL, 0, NULL, 0, NULL, f);
    pdr_worker_unref(w);
    return w;
}

static uint64_t picks(pdr_pool_t *p, int outcome)
{
    return p->affinity_total[PDR_ROLE_DECODE][outcome];
}

/* The index among the pool's decodes of the session's choice, ok as for pdr_affinity_choose. */
static int expected(pdr_pool_t *p, uint64_t session, const unsigned char *ok)
{
    uint64_t keys[3];
    for (size_t i = 0; i < 3; i++)
        keys[i] = pdr_pool__at(p, PDR_ROLE_DECODE, i)->ring_key;
    return pdr_affinity_choose(session, keys, ok, 3);
}

static void test_pool_pick(void)
{
    pdr_config_t *c = make_config("least_load");
    CHECK(c != NULL);
    pdr_pool_t p;
    CHECK(pdr_pool_init(&p, c) == 0);
    pdr_pick_filter_t soft = {.unknown_ok = 1, .affinity = PDR_AFFINITY_SOFT, .max_load_ratio = 1.5};
    /* Sessions spread and each stays on its worker (least_load alone would pick decode 0 each time). */
    int seen[3] = {0};
    for (unsigned s = 0; s < 30; s++) {
        soft.has_session = 1;
        soft.session = session_of(s);
        pdr_worker_t *home = pdr_pool__at(&p, PDR_ROLE_DECODE, (size_t)expected(&p, soft.session, NULL));
        for (int turn = 0; turn < 5; turn++)
            CHECK(pick(&p, &soft) == home);
        seen[home->seq]++;
    }
    CHECK(seen[0] > 0 && seen[1] > 0 && seen[2] > 0);
    CHECK(picks(&p, PDR_AFFINITY_HIT) == 150);
    /* Its worker unhealthy: the session moves to its next choice, and comes back. */
    soft.session = session_of(1);
    int h = expected(&p, soft.session, NULL);
    pdr_worker_t *home = pdr_pool__at(&p, PDR_ROLE_DECODE, (size_t)h);
    unsigned char ok[3] = {1, 1, 1};
    ok[h] = 0;
    pdr_worker_t *next = pdr_pool__at(&p, PDR_ROLE_DECODE, (size_t)expected(&p, soft.session, ok));
    pdr_pool_eject(&p, home, "test");
    CHECK(pick(&p, &soft) == next);
    CHECK(picks(&p, PDR_AFFINITY_MOVED) == 1);
    for (int i = 0; i < c->health.rise; i++)
        pdr_pool_check_result(&p, home, 1);
    CHECK(pick(&p, &soft) == home);
    /* Overloaded (4 in flight, the others idle: 5 > 1.5 x (4/3 + 1)): soft lets least_load pick, hard does
     * not. */
    home->inflight = 4;
    pdr_worker_t *w = pick(&p, &soft);
    CHECK(w != NULL && w != home);
    CHECK(picks(&p, PDR_AFFINITY_FALLBACK_OVERLOADED) == 1);
    pdr_pick_filter_t hard = soft;
    hard.affinity = PDR_AFFINITY_HARD;
    CHECK(pick(&p, &hard) == home);
    home->inflight = 1; /* 2 > 1.5 x (1/3 + 1) is false: not overloaded */
    CHECK(pick(&p, &soft) == home);
    home->inflight = 0;
    /* A retry that avoids it goes to the next choice. */
    uint64_t avoid = home->uid;
    w = pdr_pool_pick_filtered(&p, NULL, PDR_ROLE_DECODE, &avoid, 1, NULL, 0, NULL, &soft);
    CHECK(w == next);
    pdr_worker_unref(w);
    /* No session: the policy picks, counted. */
    soft.has_session = 0;
    uint64_t before = picks(&p, PDR_AFFINITY_NO_KEY);
    CHECK(pick(&p, &soft) != NULL);
    CHECK(picks(&p, PDR_AFFINITY_NO_KEY) == before + 1);
    pdr_pool_dispose(&p);
    pdr_config_unref(c);
}

static pdr_config_t *load(const char *yaml, char *err, size_t cap)
{
    return pdr_config_load_string(yaml, strlen(yaml), "test.yaml", err, cap);
}

/* The keys: modes, header lists (spaces or commas), their bounds; and a top level of more than 32 keys, the
 * last ones beside the first, is no duplicate. */
static void test_config(void)
{
    char err[512];
    pdr_config_t *c = load("workers: {prefill: [http://127.0.0.1:30001], decode: [http://127.0.0.1:30002]}\n"
                           "listen: {port: 8000}\nrequest_id_headers: [x-request-id]\n"
                           "affinity: {mode: soft, headers: 'x-a, x-b', max_load_ratio: 2}\n",
                           err, sizeof(err));
    CHECK(c != NULL);
    if (c == NULL) {
        fprintf(stderr, "%s\n", err);
        return;
    }
    CHECK(c->affinity.mode == PDR_AFFINITY_SOFT && strcmp(c->affinity.headers, "x-a, x-b") == 0 &&
          c->affinity.max_load_ratio == 2);
    pdr_config_unref(c);
    c = load("workers: {prefill: [http://127.0.0.1:30001], decode: [http://127.0.0.1:30002]}\n", err,
             sizeof(err));
    CHECK(c != NULL && c->affinity.mode == PDR_AFFINITY_OFF &&
          strcmp(c->affinity.headers, "x-session-id x-dynamo-session-id") == 0 &&
          c->affinity.max_load_ratio == 1.5);
    pdr_config_unref(c);
    static const char *const bad[][2] = {
        {"affinity: {mode: sticky}", "unknown affinity mode 'sticky'"},
        {"affinity: {headers: 'X-Session'}", "'X-Session' is not a header name"},
        {"affinity: {headers: ' , '}", "must name at least one header"},
        {"affinity: {headers: 'a b c d e f g h i'}", "more than 8 names"},
        {"affinity: {max_load_ratio: 0.5}", "affinity.max_load_ratio"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char yaml[256];
        snprintf(yaml, sizeof(yaml),
                 "workers: {prefill: [http://127.0.0.1:30001], decode: [http://127.0.0.1:30002]}\n%s\n",
                 bad[i][0]);
        err[0] = '\0';
        c = load(yaml, err, sizeof(err));
        CHECK(c == NULL && strstr(err, bad[i][1]) != NULL);
        if (c != NULL || strstr(err, bad[i][1]) == NULL)
            fprintf(stderr, "%s: got '%s'\n", bad[i][0], err);
        pdr_config_unref(c);
    }
}

static const pdr_test_case_t cases[] = {
    {"config", test_config, 0},
    {"spread", test_spread, 0},
    {"removal_moves_only_its_sessions", test_removal_moves_only_its_sessions, 0},
    {"overloaded", test_overloaded, 0},
    {"pool_pick", test_pool_pick, 0},
};

int main(int argc, char **argv)
{
    return PDR_TEST_RUN(cases, argc, argv);
}
