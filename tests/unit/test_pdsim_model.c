/* Unit tests for pdsim's model (tests/sim/model.c): generation is autoregressive (the digest of a prompt
 * extended by the first k output tokens is the state that produced token k, whatever the bytes per token),
 * an output token id is the whitespace tokenizer's id of its word, and one changed KV byte changes the
 * output. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "err.h"
#include "runner.h"
#include "pdsim.h"

enum { PROMPT = 9, OUT = 24 };

/* The generation of ids[0..n) from its filled KV. */
static void gen_of(pdsim_gen_t *g, const int64_t *ids, size_t n, size_t bpt)
{
    uint8_t *kv = malloc(n * bpt);
    CHECK(kv != NULL);
    pdsim_kv_fill(ids, n, bpt, 0, kv);
    pdsim_gen_init(g, pdsim_kv_digest(kv, n, bpt), ids, n, bpt, 0);
    free(kv);
}

static void test_resume(void)
{
    static const size_t bpts[] = {1, 7, 8, 100, 1024};
    for (size_t b = 0; b < sizeof(bpts) / sizeof(bpts[0]); b++) {
        int64_t ids[PROMPT + OUT];
        for (size_t i = 0; i < PROMPT; i++)
            ids[i] = (int64_t)(i * 977 + 3);
        pdsim_gen_t g;
        gen_of(&g, ids, PROMPT, bpts[b]);
        CHECK(pdsim_gen_extend(&g, OUT) == 0 && g.n == OUT);
        for (size_t j = 0; j < OUT; j++) {
            const char *w = pdsim_gen_word(&g, j, &ids[PROMPT + j]);
            pdsim_toks_t t = {0};
            CHECK(pdsim_tokenize(&t, w, strlen(w)) == 0 && t.n == 1 && t.ids[0] == ids[PROMPT + j]);
            pdsim_toks_free(&t);
        }
        for (size_t k = 1; k < OUT; k++) {
            pdsim_gen_t r;
            gen_of(&r, ids, PROMPT + k, bpts[b]);
            CHECK(pdsim_gen_extend(&r, OUT - k) == 0);
            for (size_t j = 0; j < OUT - k; j++)
                CHECK(r.words[j] == g.words[k + j]);
            pdsim_gen_free(&r);
        }
        pdsim_gen_free(&g);
    }
}

static void test_kv_changes_text(void)
{
    int64_t ids[PROMPT];
    for (size_t i = 0; i < PROMPT; i++)
        ids[i] = (int64_t)i;
    size_t bpt = 64, len = PROMPT * bpt;
    uint8_t *kv = malloc(len);
    CHECK(kv != NULL);
    pdsim_kv_fill(ids, PROMPT, bpt, 0, kv);
    pdsim_gen_t a, c;
    pdsim_gen_init(&a, pdsim_kv_digest(kv, PROMPT, bpt), ids, PROMPT, bpt, 0);
    kv[len / 2] ^= 1;
    pdsim_gen_init(&c, pdsim_kv_digest(kv, PROMPT, bpt), ids, PROMPT, bpt, 0);
    CHECK(pdsim_gen_extend(&a, OUT) == 0 && pdsim_gen_extend(&c, OUT) == 0);
    CHECK(memcmp(a.words, c.words, OUT) != 0);
    CHECK(pdsim_gen_extend(&a, PDSIM_MAX_TOKENS + 1) == PDR_EINVAL);
    pdsim_gen_free(&a);
    pdsim_gen_free(&c);
    free(kv);
}

static const pdr_test_case_t runner_cases[] = {{"kv_changes_text", test_kv_changes_text, 60},
                                               {"resume", test_resume, 60}};

int main(int argc, char **argv)
{
    return PDR_TEST_RUN(runner_cases, argc, argv);
}
