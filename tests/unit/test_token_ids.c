/* Unit tests for a request's token ids (router/workers/token_ids.c): input_ids taken as they are, a string
 * prompt through the tokenizer, and a prompt longer than PDR_TOKENIZE_MAX_BYTES encoded on its head only, cut
 * where the head's ids are a prefix of the whole text's ids. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "runner.h"
#include "rewrite.h"
#include "token_ids.h"

static pdr_prompt_tokens_t ids_of(const pdr_tokenizer_t *tk, const char *body)
{
    pdr_pdreq_t r;
    char err[256];
    pdr_prompt_tokens_t t = {0};
    CHECK(pdr_pdreq_parse(PDR_ROUTE_GENERATE, body, strlen(body), &r, err, sizeof(err)) == 0);
    CHECK(pdr_request_token_ids(&r, tk, &t) == 0);
    pdr_pdreq_clear(&r);
    return t;
}

static const char *tokenizer_json;
static pdr_tokenizer_t *tk;

static void load(void)
{
    char err[256];
    tk = pdr_tokenizer_load(tokenizer_json, err, sizeof(err));
    CHECK(tk != NULL);
}

static void unload(void)
{
    pdr_tokenizer_free(tk);
}

static void test_input_ids(void)
{
    pdr_prompt_tokens_t t = ids_of(tk, "{\"input_ids\": [5, 4000000000, 7]}");
    CHECK(t.n == 3 && t.ids[0] == 5 && t.ids[1] == 4000000000u && t.ids[2] == 7);
    free(t.ids);
}

static void test_text_cap(void)
{
    pdr_prompt_tokens_t t;
    /* Words of varied length, so the cap falls inside a word: the cut must move back to a space. */
    size_t want = PDR_TOKENIZE_MAX_BYTES * 2;
    char *text = malloc(want + 64);
    size_t o = 0;
    for (unsigned k = 0; o < want; k++)
        o += (size_t)snprintf(text + o, want + 64 - o, "%s%u ", k % 3 ? "word" : "x", k * 7919u % 100003u);
    text[o] = '\0';
    char *body = malloc(o + 64);
    snprintf(body, o + 64, "{\"text\": \"%s\"}", text);
    t = ids_of(tk, body);

    uint32_t *all = NULL;
    size_t n_all = 0;
    CHECK(pdr_tokenizer_encode(tk, text, o, &all, &n_all) == 0);
    CHECK(t.n > 1000 && t.n < n_all);                   /* the head only */
    CHECK(memcmp(t.ids, all, t.n * sizeof(*all)) == 0); /* and exactly the whole text's first ids */
    free(t.ids);

    /* The same text cut by hand in the middle of a word would not be a prefix: the test can fail. The cut
     * falls between two letters of "word": a cut next to a space, at the letters' boundary with the digits
     * (pre-tokenized apart) or after a group of digits (split in threes) would still give a prefix. */
    uint32_t *cut = NULL;
    size_t n_cut = 0;
    size_t at = PDR_TOKENIZE_MAX_BYTES;
    while (!(isalpha((unsigned char)text[at - 1]) && isalpha((unsigned char)text[at])))
        at++;
    CHECK(pdr_tokenizer_encode(tk, text, at, &cut, &n_cut) == 0);
    CHECK(n_cut > 0 && memcmp(cut, all, n_cut * sizeof(*all)) != 0);
    free(cut);

    free(all);
    free(body);
    free(text);
}

/* A NUL inside the prompt ("\u0000", which an engine's tokenizer encodes as any other character) is
 * encoded too, not refused by the JSON decoder. */
static void test_text_nul(void)
{
    pdr_prompt_tokens_t t = ids_of(tk, "{\"text\": \"a\\u0000b\"}");
    uint32_t *want = NULL;
    size_t n_want = 0;
    CHECK(pdr_tokenizer_encode(tk, "a\0b", 3, &want, &n_want) == 0);
    CHECK(t.n == n_want && n_want > 0 && memcmp(t.ids, want, n_want * sizeof(*want)) == 0);
    free(want);
    free(t.ids);
}

static const pdr_test_case_t cases[] = {
    {"input_ids", test_input_ids, 60}, {"text_cap", test_text_cap, 60}, {"text_nul", test_text_nul, 60}};

/* test_token_ids TOKENIZER_JSON [CASE...] */
int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_token_ids TOKENIZER_JSON [CASE...]\n");
        return 2;
    }
    tokenizer_json = argv[1];
    return pdr_test_run(cases, sizeof(cases) / sizeof(cases[0]), load, unload, argc - 1, argv + 1);
}
