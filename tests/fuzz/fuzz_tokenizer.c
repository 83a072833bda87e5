/*
 * Fuzz target for the tokenizer.json loader (tokenizer/tjson.c and tokenizer/tokenizer_load.c) and, when a
 * file loads, the encoder (tokenizer/tokenizer.c): the input is a tokenizer.json. A load either succeeds
 * or fails with a message naming the file; a loaded tokenizer encodes fixed texts and the input itself
 * (when it is UTF-8) without crashing, every id in the vocabulary's range or an added or template id.
 * Built with libFuzzer when PDR_LIBFUZZER is defined; otherwise a main() replays every file named on the
 * command line, each also as deterministic mutations (ctest's tokenizer_fuzz_corpus).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "tokenizer.h"
#include "tokenizer_internal.h"

static void encode(const pdr_tokenizer_t *t, const char *s, size_t len)
{
    uint32_t *ids;
    size_t n;
    int r = pdr_tokenizer_encode(t, s, len, &ids, &n);
    if (r != 0 && r != PDR_EINVAL && r != PDR_ENOTSUP)
        abort();
    if (r != 0 && (ids != NULL || n != 0))
        abort();
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size ? size : 1);
    if (buf == NULL)
        return 0;
    memcpy(buf, data, size);
    char err[512];
    pdr_tokenizer_t *t = pdr__tokenizer_load_buffer(buf, size, "fuzz.json", err, sizeof(err));
    if (t == NULL) {
        if (strncmp(err, "fuzz.json", 9) != 0)
            abort();
        return 0;
    }
    static const char *const texts[] = {
        "Hello, world! It's 12345 o'clock.",
        "  \t\n\r\n  spaces   ",
        "<|endoftext|>a<s>b",
        "Привет 你好 😀",
        "e\xcc\x81 \xc2\xa0 \xe1\xa0\x8e",
        "\xff\xfe",
    };
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
        encode(t, texts[i], strlen(texts[i]));
    encode(t, (const char *)data, size < 4096 ? size : 4096);
    pdr_tokenizer_free(pdr_tokenizer_ref(t));
    pdr_tokenizer_free(t);
    return 0;
}

#ifndef PDR_LIBFUZZER
#define PDR_REPLAY_MUTATIONS 300
#include "replay_main.h"
#endif
