/*
 * Unit tests of routing/: the prefix tree (structure, matches, tenant sizes, removal, LRU eviction, the
 * byte count and its bound, allocation failures, two threads) against a reference model, and the
 * cache_aware and power_of_two decisions. ptree.c is included so that the checker can walk the nodes and
 * so that its allocations go through a counting allocator that can fail the N-th call.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "runner.h"
#include "err.h"

#include "failalloc.h"
#include "../../routing/ptree.c"
#include "../../routing/policy.c"
#include "../../routing/chash.c"
#include "failalloc_end.h"

/* Walks the whole tree and checks every invariant of ptree.c's opening comment; returns the problems. */
static int tree_problems(pdr_ptree_t *t)
{
    int bad = 0;
    uint64_t bytes = sizeof(*t) + t->captenants * sizeof(tenant_t) + t->root.capchildren * sizeof(node_t *);
    uint64_t *chars = calloc(t->ntenants ? t->ntenants : 1, sizeof(uint64_t));
    node_t *n = &t->root;
    /* Preorder without a stack over all nodes. */
    for (;;) {
        node_t *next = NULL;
        if (n->nchildren > 0)
            next = n->children[0];
        else {
            node_t *c = n;
            while (c != &t->root && next == NULL) {
                node_t *p = c->parent;
                int found;
                uint32_t i = child_index(p, (unsigned char)c->label[0], &found);
                if (!found || p->children[i] != c)
                    bad++;
                if (i + 1 < p->nchildren)
                    next = p->children[i + 1];
                c = p;
            }
        }
        if (next == NULL)
            break;
        n = next;
        bytes += sizeof(node_t) + n->len + n->capchildren * sizeof(node_t *) + n->captenants * sizeof(slot_t);
        if (n->len == 0 || n->ntenants == 0 || n->nchildren > n->capchildren || n->ntenants > n->captenants)
            bad++;
        for (uint32_t i = 0; i + 1 < n->nchildren; i++)
            if ((unsigned char)n->children[i]->label[0] >= (unsigned char)n->children[i + 1]->label[0])
                bad++;
        for (uint32_t i = 0; i < n->nchildren; i++)
            if (n->children[i]->parent != n)
                bad++;
        for (uint32_t i = 0; i < n->ntenants; i++) {
            if (n->parent != &t->root) {
                slot_t *ps = node_slot(n->parent, n->tenants[i].id);
                if (ps == NULL || ps->stamp < n->tenants[i].stamp)
                    bad++;
            }
            tenant_t *te = tenant_find(t, n->tenants[i].id);
            if (te == NULL)
                bad++;
            else
                chars[te - t->tenants] += n->len;
        }
    }
    for (size_t i = 0; i < t->ntenants; i++)
        if (chars[i] != t->tenants[i].chars)
            bad++;
    if (bytes != t->bytes)
        bad++;
    free(chars);
    return bad;
}

static void test_basic(void)
{
    int err;
    pdr_ptree_t *t = pdr_ptree_new(1000, &err);
    CHECK(t != NULL && err == 0);
    CHECK(pdr_ptree_new(0, &err) == NULL && err == PDR_EINVAL);
    uint64_t who;
    CHECK(pdr_ptree_match(t, "abc", 3, NULL, 0, &who) == 0 && who == 0);
    CHECK(pdr_ptree_insert(t, "hello world", 11, 1) == 0);
    CHECK(pdr_ptree_insert(t, "hello there", 11, 2) == 0);
    CHECK(pdr_ptree_insert(t, "x", 1, 0) == PDR_EINVAL);
    CHECK(pdr_ptree_match(t, "hello world!", 12, NULL, 0, &who) == 11 && who == 1);
    CHECK(pdr_ptree_match(t, "hello thx", 9, NULL, 0, &who) == 8 && who == 2);
    /* Both hold "hello ": the more recent one (2) answers. */
    CHECK(pdr_ptree_match(t, "hello xyz", 9, NULL, 0, &who) == 6 && who == 2);
    uint64_t only1 = 1, only3 = 3;
    CHECK(pdr_ptree_match(t, "hello there", 11, &only1, 1, &who) == 6 && who == 1);
    CHECK(pdr_ptree_match(t, "hello there", 11, &only3, 1, &who) == 0 && who == 0);
    CHECK(pdr_ptree_tenant_chars(t, 1) == 11 && pdr_ptree_tenant_chars(t, 2) == 11);
    CHECK(pdr_ptree_tenant_chars(t, 3) == 0 && pdr_ptree_tenants(t) == 2);
    /* A prefix of an existing label splits it; an empty insert only registers the tenant. */
    CHECK(pdr_ptree_insert(t, "hel", 3, 3) == 0 && pdr_ptree_tenant_chars(t, 3) == 3);
    CHECK(pdr_ptree_insert(t, "", 0, 4) == 0 && pdr_ptree_tenants(t) == 4);
    CHECK(pdr_ptree_insert(t, "\xff\x00\x01", 3, 4) == 0);
    CHECK(pdr_ptree_match(t, "\xff\x00\x02", 3, NULL, 0, &who) == 2 && who == 4);
    CHECK(tree_problems(t) == 0);
    uint64_t before = pdr_ptree_bytes(t);
    pdr_ptree_remove_tenant(t, 1);
    CHECK(pdr_ptree_tenants(t) == 3 && pdr_ptree_tenant_chars(t, 1) == 0);
    CHECK(pdr_ptree_match(t, "hello world", 11, NULL, 0, &who) == 6 && who == 2);
    CHECK(pdr_ptree_bytes(t) < before);
    CHECK(tree_problems(t) == 0);
    pdr_ptree_remove_tenant(t, 2);
    pdr_ptree_remove_tenant(t, 3);
    pdr_ptree_remove_tenant(t, 4);
    pdr_ptree_remove_tenant(t, 9);
    CHECK(pdr_ptree_tenants(t) == 0 && t->root.nchildren == 0);
    CHECK(pdr_ptree_bytes(t) == sizeof(*t) && tree_problems(t) == 0);
    pdr_ptree_free(t);
}

/* Eviction drops least recently used leaves first; the newest prompt survives. */
static void test_evict_lru(void)
{
    int err;
    pdr_ptree_t *t = pdr_ptree_new(1000, &err);
    const char *p[] = {"system: be brief. user: first question", "system: be brief. user: second one",
                       "system: be brief. user: third", "unrelated prompt"};
    for (int i = 0; i < 4; i++)
        CHECK(pdr_ptree_insert(t, p[i], strlen(p[i]), 7) == 0);
    CHECK(pdr_ptree_insert(t, p[0], strlen(p[0]), 8) == 0);
    /* Touch p[0] again for 7: p[1] is now its oldest leaf, then p[2]. */
    CHECK(pdr_ptree_insert(t, p[0], strlen(p[0]), 7) == 0);
    uint64_t total = pdr_ptree_tenant_chars(t, 7);
    CHECK(total == strlen(p[0]) + strlen("second one") + strlen("third") + strlen(p[3]));
    CHECK(pdr_ptree_evict(t, total - 1) == 0);
    uint64_t who;
    uint64_t c7 = 7;
    CHECK(pdr_ptree_match(t, p[1], strlen(p[1]), &c7, 1, &who) == strlen("system: be brief. user: "));
    CHECK(pdr_ptree_match(t, p[2], strlen(p[2]), &c7, 1, &who) == strlen(p[2]));
    CHECK(pdr_ptree_tenant_chars(t, 7) == total - strlen("second one"));
    CHECK(pdr_ptree_evict(t, strlen(p[0])) == 0);
    CHECK(pdr_ptree_tenant_chars(t, 7) <= strlen(p[0]));
    CHECK(pdr_ptree_match(t, p[0], strlen(p[0]), &c7, 1, &who) == strlen(p[0]) && who == 7);
    CHECK(pdr_ptree_match(t, p[3], strlen(p[3]), &c7, 1, &who) == 0);
    /* Tenant 8 is untouched by 7's eviction. */
    CHECK(pdr_ptree_tenant_chars(t, 8) == strlen(p[0]));
    CHECK(tree_problems(t) == 0);
    /* The tree's own cap (0) and an insert past twice the cap. */
    pdr_ptree_t *small = pdr_ptree_new(10, &err);
    CHECK(pdr_ptree_insert(small, "0123456789abcdefghij", 20, 1) == 0 &&
          pdr_ptree_tenant_chars(small, 1) == 20);
    CHECK(pdr_ptree_insert(small, "Z", 1, 1) == 0 && pdr_ptree_tenant_chars(small, 1) <= 10);
    CHECK(pdr_ptree_match(small, "Z", 1, NULL, 0, &who) == 1 && who == 1);
    CHECK(pdr_ptree_insert(small, "0123", 4, 1) == 0 && pdr_ptree_evict(small, 0) == 0);
    CHECK(pdr_ptree_tenant_chars(small, 1) <= 10 && tree_problems(small) == 0);
    pdr_ptree_free(small);
    pdr_ptree_free(t);
}

/* A reference: each tenant's set of inserted strings. */
#define REF_MAX 512
typedef struct ref {
    char *s[8][REF_MAX];
    size_t len[8][REF_MAX];
    size_t n[8];
} ref_t;

static size_t lcp(const char *a, size_t al, const char *b, size_t bl)
{
    size_t i = 0;
    while (i < al && i < bl && a[i] == b[i])
        i++;
    return i;
}

static int cmp_str(const void *x, const void *y)
{
    const char *const *a = x, *const *b = y;
    return strcmp(*a, *b);
}

/* The distinct non-empty prefixes of a tenant's strings: its size in a trie. */
static uint64_t ref_chars(ref_t *r, int t)
{
    char **v = malloc((r->n[t] + 1) * sizeof(char *));
    memcpy(v, r->s[t], r->n[t] * sizeof(char *));
    qsort(v, r->n[t], sizeof(char *), cmp_str);
    uint64_t total = 0;
    for (size_t i = 0; i < r->n[t]; i++)
        total += strlen(v[i]) - (i ? lcp(v[i], strlen(v[i]), v[i - 1], strlen(v[i - 1])) : 0);
    free(v);
    return total;
}

static void random_text(uint64_t *rng, char *buf, size_t *len)
{
    /* Small alphabet and shared stems so that paths meet and split often. */
    static const char *stems[] = {"", "sys:", "sys:hello ", "abc", "abcabc", "q"};
    uint64_t r = pdr_routing_rng_next(rng);
    const char *stem = stems[r % 6];
    size_t n = strlen(stem);
    memcpy(buf, stem, n);
    size_t extra = (r >> 8) % 12;
    for (size_t i = 0; i < extra; i++)
        buf[n++] = "abcq: "[pdr_routing_rng_next(rng) % 6];
    buf[n] = 0;
    *len = n;
}

static void test_reference(void)
{
    int err;
    pdr_ptree_t *t = pdr_ptree_new(1u << 20, &err);
    static ref_t r;
    uint64_t rng = 42;
    char buf[64];
    size_t len;
    for (int step = 0; step < 3000; step++) {
        random_text(&rng, buf, &len);
        int ten = (int)(pdr_routing_rng_next(&rng) % 8);
        if (pdr_routing_rng_next(&rng) % 3 == 0 || r.n[ten] == REF_MAX) {
            /* A match over a random candidate set against the reference. */
            uint64_t cand[8];
            size_t nc = 0;
            uint64_t mask = pdr_routing_rng_next(&rng);
            for (int i = 0; i < 8; i++)
                if (mask >> i & 1)
                    cand[nc++] = (uint64_t)i + 1;
            size_t best = 0;
            for (size_t c = 0; c < nc; c++)
                for (size_t k = 0; k < r.n[cand[c] - 1]; k++) {
                    size_t l = lcp(buf, len, r.s[cand[c] - 1][k], r.len[cand[c] - 1][k]);
                    best = l > best ? l : best;
                }
            uint64_t who;
            size_t m = pdr_ptree_match(t, buf, len, cand, nc, &who);
            CHECK(m == best);
            if (m > 0) {
                int holds = 0;
                for (size_t k = 0; k < r.n[who - 1]; k++)
                    holds |= lcp(buf, len, r.s[who - 1][k], r.len[who - 1][k]) == m;
                CHECK(holds);
            }
            continue;
        }
        CHECK(pdr_ptree_insert(t, buf, len, (uint64_t)ten + 1) == 0);
        r.s[ten][r.n[ten]] = strdup(buf);
        r.len[ten][r.n[ten]++] = len;
        if (step % 500 == 499) {
            CHECK(tree_problems(t) == 0);
            for (int i = 0; i < 8; i++)
                CHECK(pdr_ptree_tenant_chars(t, (uint64_t)i + 1) == ref_chars(&r, i));
        }
        if (step == 2000) {
            pdr_ptree_remove_tenant(t, 3);
            for (size_t k = 0; k < r.n[2]; k++)
                free(r.s[2][k]);
            r.n[2] = 0;
            CHECK(tree_problems(t) == 0);
        }
    }
    for (int i = 0; i < 8; i++)
        for (size_t k = 0; k < r.n[i]; k++)
            free(r.s[i][k]);
    pdr_ptree_free(t);
}

/* The byte count is exact (tree_problems recomputes it) and never passes the documented bound. */
static void test_memory_bound(void)
{
    int err;
    const uint64_t cap = 300;
    pdr_ptree_t *t = pdr_ptree_new(cap, &err);
    uint64_t rng = 7, peak = 0;
    char buf[64];
    size_t len;
    for (int step = 0; step < 20000; step++) {
        random_text(&rng, buf, &len);
        uint64_t ten = pdr_routing_rng_next(&rng) % 4 + 1;
        CHECK(pdr_ptree_insert(t, buf, len, ten) == 0);
        CHECK(pdr_ptree_tenant_chars(t, ten) <= 2 * cap);
        uint64_t b = pdr_ptree_bytes(t);
        peak = b > peak ? b : peak;
        if (step % 1000 == 0)
            CHECK(pdr_ptree_evict(t, 0) == 0 && tree_problems(t) == 0);
    }
    CHECK(peak <= pdr_ptree_bytes_bound(4, cap));
    /* The bound's per-character term, as docs/internals/routing.md states it. */
    CHECK(pdr_ptree_bytes_bound(1, 1) - pdr_ptree_bytes_bound(0, 1) == sizeof(tenant_t) + 2 * 81);
    CHECK(sizeof(node_t) == 56 && sizeof(slot_t) == 16);
    /* A worst case: prompts that grow one byte at a time make one-byte nodes. */
    pdr_ptree_t *w = pdr_ptree_new(cap, &err);
    char big[700];
    memset(big, 'a', sizeof(big));
    for (size_t i = 1; i <= sizeof(big); i++) {
        big[i - 1] = (char)('a' + i % 7);
        CHECK(pdr_ptree_insert(w, big, i, 1) == 0);
        CHECK(pdr_ptree_bytes(w) <= pdr_ptree_bytes_bound(1, cap));
    }
    CHECK(tree_problems(w) == 0);
    pdr_ptree_free(w);
    pdr_ptree_free(t);
}

/* Every allocation of a sequence fails in turn: the call reports PDR_ENOMEM or succeeds, and the tree
 * stays consistent (ASan checks that nothing leaks). */
static void test_alloc_failures(void)
{
    for (long fail = 1; fail < 400; fail++) {
        alloc_calls = 0;
        alloc_fail_at = fail;
        int err;
        pdr_ptree_t *t = pdr_ptree_new(40, &err);
        if (t == NULL) {
            CHECK(err == PDR_ENOMEM);
            continue;
        }
        uint64_t rng = 3;
        char buf[64];
        size_t len;
        for (int i = 0; i < 60; i++) {
            random_text(&rng, buf, &len);
            int rc = pdr_ptree_insert(t, buf, len, (uint64_t)(i % 3) + 1);
            CHECK(rc == 0 || rc == PDR_ENOMEM);
            if (i % 20 == 19) {
                rc = pdr_ptree_evict(t, 10);
                CHECK(rc == 0 || rc == PDR_ENOMEM);
            }
            if (i == 45)
                pdr_ptree_remove_tenant(t, 2);
        }
        CHECK(tree_problems(t) == 0);
        pdr_ptree_free(t);
    }
    alloc_fail_at = -1;
}

static void test_cache_aware(void)
{
    int err;
    pdr_ptree_t *t = pdr_ptree_new(1u << 20, &err);
    pdr_cache_aware_params_t p = PDR_CACHE_AWARE_PARAMS_DEFAULT;
    uint64_t ids[3] = {11, 22, 33}, loads[3] = {0, 0, 0};
    pdr_cache_aware_decision_t d;
    const char *a = "You are a helpful assistant. Summarize the following document: lorem ipsum";
    const char *b = "Translate into French: the cat sat on the mat";
    CHECK(pdr_cache_aware_pick(t, &p, ids, loads, 0, a, strlen(a), &d) == PDR_ENOWORKER);
    uint64_t zero[1] = {0};
    CHECK(pdr_cache_aware_pick(t, &p, zero, loads, 1, a, strlen(a), &d) == PDR_EINVAL);
    /* Empty tree: smallest tree, the lowest index on a tie. */
    CHECK(pdr_cache_aware_pick(t, &p, ids, loads, 3, a, strlen(a), &d) == 0 &&
          d == PDR_CACHE_AWARE_SMALLEST_TREE);
    /* A different prompt: 0 holds bytes now, so 1 (smallest, lower index than 2). */
    CHECK(pdr_cache_aware_pick(t, &p, ids, loads, 3, b, strlen(b), &d) == 1 &&
          d == PDR_CACHE_AWARE_SMALLEST_TREE);
    /* The same prefix again goes back to its holder, whatever the small load difference. */
    loads[0] = 5;
    CHECK(pdr_cache_aware_pick(t, &p, ids, loads, 3, a, strlen(a) - 3, &d) == 0 &&
          d == PDR_CACHE_AWARE_MATCH);
    CHECK(pdr_cache_aware_pick(t, &p, ids, loads, 3, b, strlen(b), &d) == 1 && d == PDR_CACHE_AWARE_MATCH);
    /* Short match (under 30%): smallest tree, which is 2 (nothing yet). */
    CHECK(pdr_cache_aware_pick(t, &p, ids, loads, 3, "You are xyz but different and long enough", 41, &d) ==
              2 &&
          d == PDR_CACHE_AWARE_SMALLEST_TREE);
    /* Imbalance: both spreads must exceed the thresholds (100 - 0 > 64 and 100 > 0 * 1.5). */
    loads[0] = 100;
    loads[1] = 0;
    loads[2] = 3;
    CHECK(pdr_cache_aware_pick(t, &p, ids, loads, 3, a, strlen(a), &d) == 1 && d == PDR_CACHE_AWARE_BALANCE);
    /* Balance mode still records the prompt under its choice: 1 now holds a too. */
    uint64_t who, c1 = 22;
    CHECK(pdr_ptree_match(t, a, strlen(a), &c1, 1, &who) == strlen(a));
    /* Absolute spread over 64 but relative under 1.5: not imbalanced. */
    loads[0] = 200;
    loads[1] = 150;
    loads[2] = 150;
    CHECK(pdr_cache_aware_pick(t, &p, ids, loads, 3, b, strlen(b), &d) == 1 && d == PDR_CACHE_AWARE_MATCH);
    /* Two holders of the full prompt (0 and 1): the less loaded. */
    loads[0] = 10;
    loads[1] = 20;
    loads[2] = 0;
    CHECK(pdr_cache_aware_pick(t, &p, ids, loads, 3, a, strlen(a), &d) == 0 && d == PDR_CACHE_AWARE_MATCH);
    /* The threshold is strict (sglang: match_rate > cache_threshold). */
    pdr_cache_aware_params_t half = PDR_CACHE_AWARE_PARAMS_DEFAULT;
    half.cache_threshold = 0.5;
    loads[0] = loads[1] = loads[2] = 0;
    CHECK(pdr_cache_aware_pick(t, &half, ids, loads, 3, "Translate XXXXXXXXXXX", 20, &d) >= 0 &&
          d == PDR_CACHE_AWARE_SMALLEST_TREE); /* "Translate " is 10 of 20 */
    /* A candidate outside the set does not count: only 2 is offered. */
    CHECK(pdr_cache_aware_pick(t, &p, &ids[2], &loads[2], 1, a, strlen(a), &d) == 0);
    /* An empty prompt: a rate of 0, smallest tree. */
    CHECK(pdr_cache_aware_pick(t, &p, ids, loads, 3, NULL, 0, &d) >= 0 && d == PDR_CACHE_AWARE_SMALLEST_TREE);
    CHECK(tree_problems(t) == 0);
    pdr_ptree_free(t);
}

/* The variant conditional disaggregation uses: the chosen candidate's own match, and no record. */
static void test_cache_aware_ex(void)
{
    int err;
    pdr_ptree_t *t = pdr_ptree_new(1u << 20, &err);
    pdr_cache_aware_params_t p = PDR_CACHE_AWARE_PARAMS_DEFAULT;
    uint64_t ids[2] = {11, 22}, loads[2] = {0, 0};
    pdr_cache_aware_decision_t d;
    const char *a = "You are a helpful assistant. Summarize the following document: lorem ipsum";
    size_t m = 99;
    /* record 0: the tree stays empty, nothing matched. */
    CHECK(pdr_cache_aware_pick_ex(t, &p, ids, NULL, loads, 2, a, strlen(a), &d, 0, &m) == 0 && m == 0);
    CHECK(pdr_ptree_tenant_chars(t, 11) == 0 && pdr_ptree_tenants(t) == 0);
    CHECK(pdr_ptree_insert(t, a, strlen(a), 11) == 0);
    /* A match: the chosen one's length. */
    CHECK(pdr_cache_aware_pick_ex(t, &p, ids, NULL, loads, 2, a, strlen(a) - 5, &d, 0, &m) == 0 &&
          d == PDR_CACHE_AWARE_MATCH && m == strlen(a) - 5);
    /* Balance picks 22, which holds nothing: 0, not 11's match. */
    loads[0] = 100;
    CHECK(pdr_cache_aware_pick_ex(t, &p, ids, NULL, loads, 2, a, strlen(a), &d, 0, &m) == 1 &&
          d == PDR_CACHE_AWARE_BALANCE && m == 0);
    CHECK(pdr_ptree_tenant_chars(t, 22) == 0); /* still not recorded */
    /* Balance picks 11 (22 loaded): its own match, though balance looked at none. */
    loads[0] = 0;
    loads[1] = 100;
    CHECK(pdr_cache_aware_pick_ex(t, &p, ids, NULL, loads, 2, a, strlen(a), &d, 1, &m) == 0 &&
          d == PDR_CACHE_AWARE_BALANCE && m == strlen(a));
    CHECK(tree_problems(t) == 0);
    pdr_ptree_free(t);
}

static void test_power_of_two(void)
{
    uint64_t rng = 1;
    uint64_t loads[4] = {5, 1, 9, 3};
    CHECK(pdr_power_of_two_pick(loads, 0, &rng) == PDR_ENOWORKER);
    CHECK(pdr_power_of_two_pick(loads, 1, &rng) == 0);
    int hits[4] = {0};
    for (int i = 0; i < 4000; i++) {
        int k = pdr_power_of_two_pick(loads, 4, &rng);
        CHECK(k >= 0 && k < 4);
        hits[k]++;
    }
    /* The most loaded never wins a pair; the least loaded wins every pair it is in (half of them). */
    CHECK(hits[2] == 0);
    CHECK(hits[1] > 1800 && hits[1] < 2200);
    CHECK(hits[0] > 0 && hits[3] > hits[0]);
    /* Two candidates: always both drawn, the less loaded wins. */
    uint64_t two[2] = {4, 2};
    for (int i = 0; i < 100; i++)
        CHECK(pdr_power_of_two_pick(two, 2, &rng) == 1);
}

typedef struct worker_arg {
    pdr_ptree_t *t;
    uint64_t seed;
} worker_arg_t;

static void *hammer(void *arg)
{
    worker_arg_t *w = arg;
    pdr_cache_aware_params_t p = PDR_CACHE_AWARE_PARAMS_DEFAULT;
    uint64_t ids[3] = {1, 2, 3}, loads[3] = {0, 0, 0};
    char buf[64];
    size_t len;
    for (int i = 0; i < 5000; i++) {
        random_text(&w->seed, buf, &len);
        loads[i % 3] = (uint64_t)(i % 7);
        pdr_cache_aware_pick(w->t, &p, ids, loads, 3, buf, len, NULL);
        if (i % 1000 == 999)
            pdr_ptree_evict(w->t, 50);
    }
    return NULL;
}

static void test_threads(void)
{
    int err;
    pdr_ptree_t *t = pdr_ptree_new(200, &err);
    pthread_t th[3];
    worker_arg_t args[3] = {{t, 1}, {t, 2}, {t, 3}};
    for (int i = 0; i < 3; i++)
        pthread_create(&th[i], NULL, hammer, &args[i]);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    CHECK(tree_problems(t) == 0);
    for (uint64_t i = 1; i <= 3; i++)
        CHECK(pdr_ptree_tenant_chars(t, i) <= 400);
    pdr_ptree_free(t);
}

/* Worker keys as a router derives them: a hash of each worker's URL. */
static void url_keys(uint64_t *keys, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char url[64];
        int l = snprintf(url, sizeof(url), "http://10.0.0.%zu:30000", i + 1);
        keys[i] = pdr_routing_hash(url, (size_t)l);
    }
}

static void test_chash(void)
{
    uint64_t keys[8], perm[8], loads[8] = {0};
    url_keys(keys, 8);
    CHECK(pdr_routing_hash("abc", 3) == pdr_routing_hash("abc", 3));
    CHECK(pdr_routing_hash("abc", 3) != pdr_routing_hash("abd", 3));
    CHECK(pdr_chash_pick(keys, loads, 0, 1, 1.25) == PDR_ENOWORKER);
    CHECK(pdr_chash_pick(NULL, loads, 3, 1, 1.25) == PDR_EINVAL);
    /* The candidates' order does not matter: the same key names the same worker in reversed order. */
    for (size_t i = 0; i < 8; i++)
        perm[i] = keys[7 - i];
    size_t per[8] = {0};
    for (uint64_t k = 0; k < 4000; k++) {
        uint64_t h = pdr_routing_hash(&k, sizeof(k));
        int a = pdr_chash_pick(keys, NULL, 8, h, 1.25), b = pdr_chash_pick(perm, loads, 8, h, 1.25);
        CHECK(a >= 0 && b >= 0 && keys[a] == perm[b]);
        if (a >= 0)
            per[a]++;
    }
    /* 64 points each spread the keys: every worker receives at least a third of its share (500). */
    for (size_t i = 0; i < 8; i++)
        CHECK(per[i] > 4000 / 8 / 3);

    /* Removing a worker moves only its keys (no load bound in play: all loads 0). */
    uint64_t six[7];
    for (size_t i = 0, j = 0; i < 8; i++)
        if (i != 5)
            six[j++] = keys[i];
    size_t moved = 0, owned = 0;
    for (uint64_t k = 0; k < 4000; k++) {
        uint64_t h = pdr_routing_hash(&k, sizeof(k));
        int a = pdr_chash_pick(keys, NULL, 8, h, 1.25), b = pdr_chash_pick(six, NULL, 7, h, 1.25);
        if (a == 5)
            owned++;
        else
            moved += keys[a] != six[b];
    }
    CHECK(moved == 0 && owned > 0);

    /* Bounded load: every key the same (the worst case for a plain ring), requests never finish. Each
     * choice is under ceil(1.25 * (sum + 1) / n), so no worker ever exceeds it. */
    uint64_t h = pdr_routing_hash("same", 4);
    int first = pdr_chash_pick(keys, NULL, 4, h, 1.25);
    for (uint64_t i = 0; i < 400; i++) {
        uint64_t sum = 0, max = 0;
        for (size_t k = 0; k < 4; k++)
            sum += loads[k];
        double mean = 1.25 * (double)(sum + 1) / 4.0;
        uint64_t cap = (uint64_t)mean + ((double)(uint64_t)mean < mean);
        int k = pdr_chash_pick(keys, loads, 4, h, 1.25);
        CHECK(k >= 0 && k < 4 && loads[k] + 1 <= cap);
        if (k < 0 || k >= 4)
            break;
        if (i == 0)
            CHECK(k == first); /* nothing loaded: the ring's own choice */
        loads[k]++;
        for (size_t j = 0; j < 4; j++)
            max = loads[j] > max ? loads[j] : max;
        CHECK((double)max <= 1.25 * (double)(sum + 1) / 4.0 + 1.0);
    }
    /* The ring's order fills up: three workers at the cap (ceil(1.25 * 400 / 4) = 125 before the last
     * request), the ring's last one takes the rest. */
    CHECK(loads[first] == 125 && loads[0] + loads[1] + loads[2] + loads[3] == 400);
    for (size_t j = 0; j < 4; j++)
        CHECK(loads[j] <= 126);
    /* A factor below 1 (or NaN) counts as 1: still a choice. */
    CHECK(pdr_chash_pick(keys, loads, 4, h, 0.5) >= 0);
    CHECK(pdr_chash_pick(keys, loads, 4, h, 0.0 / 0.0) >= 0);

    /* Loads near 2^64 (their sum past it): the choice stays the ring's, among the least loaded, and
     * independent of the candidates' order, rather than whichever came first. */
    uint64_t huge[4], rhuge[4], rkeys[4];
    for (size_t i = 0; i < 4; i++) {
        huge[i] = rhuge[3 - i] = (UINT64_C(1) << 63) + (i == 2);
        rkeys[3 - i] = keys[i];
    }
    size_t hits[4] = {0};
    for (uint64_t k = 0; k < 400; k++) {
        uint64_t kh = pdr_routing_hash(&k, sizeof(k));
        int a = pdr_chash_pick(keys, huge, 4, kh, 1.25), b = pdr_chash_pick(rkeys, rhuge, 4, kh, 1.25);
        CHECK(a >= 0 && b >= 0 && a != 2 && keys[a] == rkeys[b]);
        if (a >= 0)
            hits[a]++;
    }
    CHECK(hits[0] > 0 && hits[1] > 0 && hits[3] > 0);
}

/* Three independent replicas (own trees, own local ids, the workers listed in different orders) with
 * consistent_hash seeding send one prefix family to one worker; with smallest_tree seeding, replicas
 * whose trees differ scatter it. */
static void test_replicas_agree(void)
{
    uint64_t keys[4];
    url_keys(keys, 4);
    for (int seed = 0; seed < 2; seed++) {
        pdr_cache_aware_params_t p = PDR_CACHE_AWARE_PARAMS_DEFAULT;
        p.seed = seed ? PDR_CACHE_AWARE_SEED_CONSISTENT_HASH : PDR_CACHE_AWARE_SEED_SMALLEST_TREE;
        p.hash_prefix_chars = 64;
        pdr_ptree_t *t[3];
        uint64_t ids[3][4], rk[3][4], loads[4] = {0};
        int err;
        for (int r = 0; r < 3; r++) {
            t[r] = pdr_ptree_new(1 << 20, &err);
            for (int i = 0; i < 4; i++) {
                int w = (i + r) % 4; /* replica r lists worker w at place i */
                ids[r][i] = 100 * (uint64_t)(r + 1) + (uint64_t)w;
                rk[r][i] = keys[w];
            }
            /* Each replica has seen different traffic before: its trees' sizes differ. */
            for (int k = 0; k <= r; k++) {
                char warm[80];
                int l =
                    snprintf(warm, sizeof(warm), "warm-up prompt %d of replica %d ................", k, r);
                CHECK(pdr_ptree_insert(t[r], warm, (size_t)l, ids[r][k]) == 0);
            }
        }
        int scattered = 0;
        for (int fam = 0; fam < 16; fam++) {
            char sys[128], q[256];
            snprintf(sys, sizeof(sys), "family %02d's system prompt: answer briefly and in full sentences.",
                     fam);
            uint64_t owner = 0;
            for (int r = 0; r < 3; r++) {
                snprintf(q, sizeof(q), "%s user question %d", sys, r);
                pdr_cache_aware_decision_t d;
                int k = pdr_cache_aware_pick_keyed(t[r], &p, ids[r], rk[r], loads, 4, q, strlen(q), &d);
                CHECK(k >= 0 && k < 4);
                if (k < 0)
                    continue;
                if (seed)
                    CHECK(d == PDR_CACHE_AWARE_HASH);
                if (r == 0)
                    owner = rk[r][k];
                else if (rk[r][k] != owner)
                    scattered++;
                /* The replica's next request of the family matches its tree: the same worker. */
                snprintf(q, sizeof(q), "%s another user question", sys);
                int k2 = pdr_cache_aware_pick_keyed(t[r], &p, ids[r], rk[r], loads, 4, q, strlen(q), &d);
                CHECK(k2 == k && d == PDR_CACHE_AWARE_MATCH);
            }
        }
        if (seed)
            CHECK(scattered == 0);
        else
            CHECK(scattered > 0); /* the rule this seed replaces does scatter */
        for (int r = 0; r < 3; r++) {
            CHECK(tree_problems(t[r]) == 0);
            pdr_ptree_free(t[r]);
        }
    }
}

static const pdr_test_case_t cases[] = {
    {"basic", test_basic, 60},
    {"evict_lru", test_evict_lru, 60},
    {"reference", test_reference, 60},
    {"memory_bound", test_memory_bound, 60},
    {"alloc_failures", test_alloc_failures, 60},
    {"cache_aware", test_cache_aware, 60},
    {"cache_aware_ex", test_cache_aware_ex, 60},
    {"power_of_two", test_power_of_two, 60},
    {"threads", test_threads, 60},
    {"chash", test_chash, 60},
    {"replicas_agree", test_replicas_agree, 60},
};

int main(int argc, char **argv)
{
    return PDR_TEST_RUN(cases, argc, argv);
}
