/* Unit tests for pdsim's prefix cache (tests/sim/prefix_cache.c): whole blocks only, the last token
 * never counted, the chained key (a block matches only after the same prefix), LRU eviction at the
 * token cap (tail blocks first, a touched prefix survives), re-inserts, stats and bad sizes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "runner.h"
#include "pdsim.h"

static void fill(int64_t *ids, size_t n, int64_t base)
{
    for (size_t i = 0; i < n; i++)
        ids[i] = base + (int64_t)i;
}

static void test_basic(void)
{
    pdsim_pcache_t *c = pdsim_pcache_new(1024, 16);
    CHECK(c != NULL);
    int64_t a[100];
    fill(a, 100, 1000);
    CHECK(pdsim_pcache_lookup(c, a, 100) == 0);
    CHECK(pdsim_pcache_insert(c, a, 100) == 0);
    pdsim_pcache_stats_t st;
    pdsim_pcache_stats(c, &st);
    CHECK(st.blocks == 6 && st.max_blocks == 64 && st.block_tokens == 16);
    CHECK(st.hit_tokens == 0 && st.miss_tokens == 100);
    /* The same prompt: 6 whole blocks = 96 tokens. */
    CHECK(pdsim_pcache_lookup(c, a, 100) == 96);
    /* 96 tokens exactly: the last token is computed, so only 5 blocks count. */
    CHECK(pdsim_pcache_lookup(c, a, 96) == 80);
    CHECK(pdsim_pcache_lookup(c, a, 97) == 96);
    /* A shared prefix of 40 tokens, then a different suffix: 2 whole blocks. */
    int64_t b[100];
    fill(b, 100, 1000);
    for (size_t i = 40; i < 100; i++)
        b[i] = 7;
    CHECK(pdsim_pcache_lookup(c, b, 100) == 32);
    /* Block 2 of a equals block 2 of d, but d's block 1 differs: the chain stops at block 1. */
    int64_t d[100];
    fill(d, 100, 1000);
    d[20] = 5;
    CHECK(pdsim_pcache_lookup(c, d, 100) == 16);
    pdsim_pcache_stats(c, &st);
    CHECK(st.hit_tokens == 96 + 80 + 96 + 32 + 16);
    CHECK(st.miss_tokens == 100 + 4 + 16 + 1 + 68 + 84);
    /* Re-inserting adds nothing. */
    CHECK(pdsim_pcache_insert(c, a, 100) == 0);
    pdsim_pcache_stats(c, &st);
    CHECK(st.blocks == 6 && st.inserted_blocks == 6);
    /* Short prompts: nothing to cache or match. */
    CHECK(pdsim_pcache_insert(c, a, 15) == 0);
    CHECK(pdsim_pcache_lookup(c, a, 1) == 0);
    CHECK(pdsim_pcache_lookup(c, a, 0) == 0);
    pdsim_pcache_free(c);
}

static void test_lru(void)
{
    /* 4 blocks of 4 tokens. */
    pdsim_pcache_t *c = pdsim_pcache_new(16, 4);
    int64_t a[9], b[9], e[9];
    fill(a, 9, 100);
    fill(b, 9, 200);
    fill(e, 9, 300);
    CHECK(pdsim_pcache_insert(c, a, 9) == 0); /* a0 a1 */
    CHECK(pdsim_pcache_insert(c, b, 9) == 0); /* b0 b1 */
    CHECK(pdsim_pcache_lookup(c, a, 9) == 8); /* a is now the most recent */
    CHECK(pdsim_pcache_insert(c, e, 9) == 0); /* evicts b1, then b0 */
    pdsim_pcache_stats_t st;
    pdsim_pcache_stats(c, &st);
    CHECK(st.blocks == 4 && st.evicted_blocks == 2);
    CHECK(pdsim_pcache_lookup(c, a, 9) == 8);
    CHECK(pdsim_pcache_lookup(c, e, 9) == 8);
    CHECK(pdsim_pcache_lookup(c, b, 9) == 0);
    /* One more 1-block prompt evicts the tail of the least recent prefix (a1), not its head. */
    int64_t f[5];
    fill(f, 5, 400);
    CHECK(pdsim_pcache_insert(c, f, 5) == 0);
    CHECK(pdsim_pcache_lookup(c, a, 9) == 4);
    CHECK(pdsim_pcache_lookup(c, e, 9) == 8);
    /* A prompt longer than the cache keeps its head only. */
    int64_t g[40];
    fill(g, 40, 500);
    CHECK(pdsim_pcache_insert(c, g, 40) == 0);
    pdsim_pcache_stats(c, &st);
    CHECK(st.blocks == 4);
    CHECK(pdsim_pcache_lookup(c, g, 40) == 16);
    CHECK(pdsim_pcache_lookup(c, e, 9) == 0);
    pdsim_pcache_free(c);
}

static void test_many(void)
{
    /* Many prompts through a small cache with colliding buckets: the count never passes the cap. */
    pdsim_pcache_t *c = pdsim_pcache_new(64 * 16, 16);
    int64_t p[200];
    for (int r = 0; r < 500; r++) {
        fill(p, 200, (int64_t)(r % 37) * 1000);
        pdsim_pcache_lookup(c, p, 200);
        CHECK(pdsim_pcache_insert(c, p, 200) == 0);
        pdsim_pcache_stats_t st;
        pdsim_pcache_stats(c, &st);
        CHECK(st.blocks <= 64);
    }
    fill(p, 200, (499 % 37) * 1000); /* the last one inserted */
    CHECK(pdsim_pcache_lookup(c, p, 200) == 192);
    pdsim_pcache_free(c);
}

static void test_bad_args(void)
{
    CHECK(pdsim_pcache_new(100, 0) == NULL);
    CHECK(pdsim_pcache_new(15, 16) == NULL);
    pdsim_pcache_free(NULL);
}

static const pdr_test_case_t runner_cases[] = {{"bad_args", test_bad_args, 60},
                                               {"basic", test_basic, 60},
                                               {"lru", test_lru, 60},
                                               {"many", test_many, 60}};

int main(int argc, char **argv)
{
    return PDR_TEST_RUN(runner_cases, argc, argv);
}
