/*
 * The list of routing policies (routing/policies.h), walked: every table has a name the configuration
 * parses back to it, picks only among the candidates a retry leaves usable, answers PDR_ENOWORKER when none
 * is, and with the same seed and state makes the same choices; through the pool, every policy picks a
 * serving worker and never an ejected one. A policy added to the list is tested here without a new case.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "runner.h"
#include "config.h"
#include "err.h"
#include "policies.h"
#include "pool.h"

#define N 6

static void test_list(void)
{
    size_t n = pdr_policy_count();
    CHECK(n >= 6);
    char names[512];
    pdr_policy_names(names, sizeof(names), " or ");
    for (size_t i = 0; i < n; i++) {
        const pdr_policy_ops_t *ops = pdr_policy_get((int)i);
        CHECK(ops != NULL && ops->name != NULL && ops->pick != NULL);
        if (ops == NULL)
            continue;
        CHECK(pdr_policy_find(ops->name, strlen(ops->name)) == (int)i);
        pdr_policy_kind_t k = (pdr_policy_kind_t)-1;
        CHECK(pdr_policy_parse(ops->name, &k) == 0 && (size_t)k == i);
        CHECK(strcmp(pdr_policy_name(k), ops->name) == 0);
        CHECK(strstr(names, ops->name) != NULL);
    }
    CHECK(pdr_policy_get(-1) == NULL && pdr_policy_get((int)n) == NULL);
    CHECK(pdr_policy_find("prefix_hash", 11) == PDR_EINVAL && pdr_policy_find("round", 5) == PDR_EINVAL);
    /* The built-ins keep their indexes: configurations and tests name them by constant. */
    CHECK(strcmp(pdr_policy_get(PDR_POLICY_ROUND_ROBIN)->name, "round_robin") == 0);
    CHECK(strcmp(pdr_policy_get(PDR_POLICY_LEAST_LOAD)->name, "least_load") == 0);
    CHECK(strcmp(pdr_policy_get(PDR_POLICY_RANDOM)->name, "random") == 0);
    CHECK(strcmp(pdr_policy_get(PDR_POLICY_CACHE_AWARE)->name, "cache_aware") == 0);
    CHECK(strcmp(pdr_policy_get(PDR_POLICY_POWER_OF_TWO)->name, "power_of_two") == 0);
    CHECK(strcmp(pdr_policy_get(PDR_POLICY_PRECISE_PREFIX)->name, "precise_prefix") == 0);
    CHECK(strstr(names, " or precise_prefix") != NULL);
}

/* One policy's state for a run of picks: what the pool would hold. */
typedef struct {
    unsigned rr;
    uint64_t rng;
    pdr_ptree_t *tree;
    pdr_cache_aware_params_t ca;
} state_t;

static void state_init(state_t *s, const pdr_policy_ops_t *ops, uint64_t seed)
{
    int err = 0;
    pdr_cache_aware_params_t def = PDR_CACHE_AWARE_PARAMS_DEFAULT;
    s->rr = 0;
    s->rng = seed;
    s->ca = def;
    s->tree = (ops->flags & PDR_POLICY_F_TREE) ? pdr_ptree_new(1 << 20, &err) : NULL;
    CHECK(!(ops->flags & PDR_POLICY_F_TREE) || s->tree != NULL);
}

/* rounds picks of ops with random loads, usable masks and prompts drawn from seed; the choices go to out
 * (-1: none usable, as expected). */
static void run(const pdr_policy_ops_t *ops, uint64_t seed, int rounds, int *out)
{
    state_t s;
    state_init(&s, ops, seed);
    uint64_t draw = seed ^ 0x5bd1e995u;
    static const char *const prompts[] = {"You are a helpful assistant. Tell me about cats.",
                                          "You are a helpful assistant. Tell me about dogs.",
                                          "Summarize this document: the quick brown fox", ""};
    for (int r = 0; r < rounds; r++) {
        uint64_t ids[N], keys[N], loads[N];
        unsigned char usable[N];
        size_t n = 1 + (size_t)(pdr_routing_rng_next(&draw) % N), n_usable = 0;
        for (size_t i = 0; i < n; i++) {
            ids[i] = 100 + i;
            keys[i] = pdr_routing_hash(&ids[i], sizeof(ids[i]));
            loads[i] = pdr_routing_rng_next(&draw) % 8;
            usable[i] = pdr_routing_rng_next(&draw) % 4 != 0;
            n_usable += usable[i];
        }
        int all = pdr_routing_rng_next(&draw) % 3 == 0;
        const char *text = prompts[pdr_routing_rng_next(&draw) % 4];
        uint32_t tokens[4] = {1, 2, 3, (uint32_t)r};
        pdr_policy_input_t in = {
            .n = n,
            .ids = ids,
            .keys = keys,
            .loads = loads,
            .wloads = loads,
            .usable = all ? NULL : usable,
            .rr_next = &s.rr,
            .rng = &s.rng,
            .tree = s.tree,
            .ca = &s.ca,
            .kvindex = NULL,
            .text = r % 5 == 4 ? NULL : text,
            .len = strlen(text),
            .tokens = tokens,
            .n_tokens = 4,
            .record = 1,
            .want_matched = r % 2,
        };
        pdr_policy_output_t o;
        memset(&o, 0, sizeof(o));
        int k = ops->pick(&in, &o);
        if (!all && n_usable == 0) {
            CHECK(k == PDR_ENOWORKER);
            out[r] = -1;
            continue;
        }
        CHECK(k >= 0 && (size_t)k < n);
        if (k < 0 || (size_t)k >= n) {
            out[r] = -2;
            continue;
        }
        CHECK(all || usable[k]);
        CHECK(!o.decided || (ops->flags & PDR_POLICY_F_TREE));
        out[r] = k;
    }
    pdr_ptree_free(s.tree);
}

static void test_walk(void)
{
    enum { ROUNDS = 2000 };
    static int a[ROUNDS], b[ROUNDS], c[ROUNDS];
    for (size_t i = 0; i < pdr_policy_count(); i++) {
        const pdr_policy_ops_t *ops = pdr_policy_get((int)i);
        run(ops, 42, ROUNDS, a);
        run(ops, 42, ROUNDS, b);
        CHECK(memcmp(a, b, sizeof(a)) == 0); /* the same seed and state: the same choices */
        run(ops, 43, ROUNDS, c);
        int spread[N] = {0};
        for (int r = 0; r < ROUNDS; r++)
            if (a[r] >= 0)
                spread[a[r]]++;
        for (int j = 0; j < N; j++) /* every candidate position is chosen at some time */
            CHECK(spread[j] > 0);
    }
}

static pdr_config_t *make_config(const char *policy)
{
    char yaml[1024];
    int o = snprintf(yaml, sizeof(yaml), "policy: { prefill: %s, decode: %s }\nworkers:\n  prefill:\n",
                     policy, policy);
    for (int i = 0; i < 4; i++)
        o += snprintf(yaml + o, sizeof(yaml) - (size_t)o,
                      "    - { url: http://127.0.0.1:%d, bootstrap_port: %d }\n", 30000 + i, 9000 + i);
    o += snprintf(yaml + o, sizeof(yaml) - (size_t)o, "  decode:\n    - { url: http://127.0.0.1:31000 }\n");
    char err[256];
    pdr_config_t *c = pdr_config_load_string(yaml, (size_t)o, "test.yaml", err, sizeof(err));
    if (c == NULL)
        fprintf(stderr, "%s\n", err);
    return c;
}

/* Through the pool: every policy of the list picks a serving worker, never an ejected one, with and without
 * a prompt, and nothing when no worker serves. */
static void test_pool_walk(void)
{
    for (size_t i = 0; i < pdr_policy_count(); i++) {
        const char *name = pdr_policy_get((int)i)->name;
        pdr_config_t *c = make_config(name);
        CHECK(c != NULL);
        if (c == NULL)
            continue;
        pdr_pool_t p;
        CHECK(pdr_pool_init(&p, c) == 0);
        CHECK((size_t)p.groups[0].policy[PDR_ROLE_PREFILL] == i);
        pdr_worker_t *down = pdr_pool__at(&p, PDR_ROLE_PREFILL, 1);
        pdr_pool_eject(&p, down, "test");
        int seen[4] = {0};
        for (int r = 0; r < 400; r++) {
            const char *text = r % 2 ? "a prompt that some worker has seen" : NULL;
            pdr_worker_t *w =
                pdr_pool_pick_text(&p, NULL, PDR_ROLE_PREFILL, NULL, 0, text, text ? strlen(text) : 0);
            CHECK(w != NULL && w != down);
            for (size_t k = 0; k < 4; k++)
                seen[k] += w != NULL && w == pdr_pool__at(&p, PDR_ROLE_PREFILL, k);
            pdr_worker_unref(w);
        }
        CHECK(seen[1] == 0 && seen[0] + seen[2] + seen[3] == 400);
        for (int k = 0; k < 4; k++)
            if (k != 1)
                pdr_pool_eject(&p, pdr_pool__at(&p, PDR_ROLE_PREFILL, (size_t)k), "test");
        CHECK(pdr_pool_pick(&p, NULL, PDR_ROLE_PREFILL, NULL, 0) == NULL);
        pdr_pool_dispose(&p);
        pdr_config_unref(c);
    }
}

static const pdr_test_case_t cases[] = {
    {"list", test_list, 60},
    {"walk", test_walk, 60},
    {"pool_walk", test_pool_walk, 60},
};

int main(int argc, char **argv)
{
    return PDR_TEST_RUN(cases, argc, argv);
}
