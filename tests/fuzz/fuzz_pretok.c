/*
 * Fuzz target for the tokenizer's encoding path (tokenizer/tokenizer.c): the pre-tokenizers (the byte-level
 * regex split of GPT-2, the Split patterns of Llama 3 and Qwen2), added tokens, NFC and the BPE merges, on
 * arbitrary text. The tokenizers are the seed tokenizer.json files of fuzz_tokenizer
 * (tests/fuzz/corpus/tokenizer), loaded once; the first input byte picks one (modulo their number), the
 * rest is the text. Invariants: encoding returns 0, PDR_EINVAL or PDR_ENOTSUP (ids NULL and n 0 on an
 * error), every id is one the tokenizer can produce (the vocabulary, an added token or the template's),
 * and encoding the same text twice gives the same ids. Built with libFuzzer when PDR_LIBFUZZER is
 * defined; otherwise a main() replays the files named on the command line with deterministic mutations
 * (ctest's tokenizer_pretok_fuzz_corpus).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "tokenizer.h"
#include "tokenizer_internal.h"

#ifndef PDR_FUZZ_TOKENIZER_DIR
#error "PDR_FUZZ_TOKENIZER_DIR: the directory of the seed tokenizer.json files"
#endif

static const char *const tok_files[] = {"gpt2_small.json", "llama3_small.json", "qwen2_small.json"};
#define N_TOK (sizeof(tok_files) / sizeof(tok_files[0]))

static pdr_tokenizer_t *toks[N_TOK];
static uint32_t max_id[N_TOK];

static uint32_t highest_id(const pdr_tokenizer_t *t)
{
    uint32_t m = 0;
    for (size_t i = 0; i < t->vocab.cap; i++)
        if (t->vocab.slots[i].id != PDR_TOK_NONE && t->vocab.slots[i].id > m)
            m = t->vocab.slots[i].id;
    const pdr__tok_addset_t *sets[2] = {&t->added_raw, &t->added_norm};
    for (int s = 0; s < 2; s++)
        for (size_t i = 0; i < sets[s]->n; i++)
            if (sets[s]->tok[i].id > m)
                m = sets[s]->tok[i].id;
    for (size_t i = 0; i < t->n_prefix; i++)
        if (t->prefix[i] > m)
            m = t->prefix[i];
    for (size_t i = 0; i < t->n_suffix; i++)
        if (t->suffix[i] > m)
            m = t->suffix[i];
    if (t->unk_id != PDR_TOK_NONE && t->unk_id > m)
        m = t->unk_id;
    return m;
}

static void load_all(void)
{
    static int ready;
    if (ready)
        return;
    for (size_t i = 0; i < N_TOK; i++) {
        char path[1024], err[512];
        snprintf(path, sizeof(path), "%s/%s", PDR_FUZZ_TOKENIZER_DIR, tok_files[i]);
        toks[i] = pdr_tokenizer_load(path, err, sizeof(err));
        if (toks[i] == NULL) {
            fprintf(stderr, "fuzz_pretok: %s\n", err);
            abort();
        }
        max_id[i] = highest_id(toks[i]);
    }
    ready = 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    load_all();
    size_t k = data[0] % N_TOK;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    uint32_t *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    int ra = pdr_tokenizer_encode(toks[k], text, len, &a, &na);
    if (ra != 0 && ra != PDR_EINVAL && ra != PDR_ENOTSUP && ra != PDR_ENOMEM)
        abort();
    if (ra != 0 && (a != NULL || na != 0))
        abort();
    for (size_t i = 0; i < na; i++)
        if (a[i] > max_id[k]) {
            fprintf(stderr, "fuzz_pretok: %s gave id %u, past its highest %u\n", tok_files[k], a[i],
                    max_id[k]);
            abort();
        }
    int rb = pdr_tokenizer_encode(toks[k], text, len, &b, &nb);
    if (rb != ra || nb != na || (na > 0 && memcmp(a, b, na * sizeof(*a)) != 0))
        abort(); /* the encoder keeps no state between calls */
    free(a);
    free(b);
    return 0;
}

#ifndef PDR_LIBFUZZER
#define PDR_REPLAY_MUTATIONS 300
#include "replay_main.h"
#endif
