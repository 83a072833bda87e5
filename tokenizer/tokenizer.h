/*
 * A Hugging Face tokenizer.json encoder for byte-level BPE tokenizers (as Llama 3, Qwen2 and GPT-2 ship
 * them): the router turns a prompt's text into the token ids the engine will see, so that KV events
 * keyed by token ids can be matched against requests. docs/internals/tokenizer.md lists what a file may
 * use, what was checked token for token against the `tokenizers` package, and what is refused.
 *
 * Threads: a loaded tokenizer is immutable; pdr_tokenizer_encode() may run on one tokenizer from any
 * number of threads at once (each call allocates its own scratch).
 */
#ifndef PDR_TOKENIZER_H
#define PDR_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct pdr_tokenizer pdr_tokenizer_t;

/*
 * Loads a tokenizer.json: path names the file, or a directory holding it (a model directory). Returns NULL
 * and writes a message to err[0..errlen) on failure: the file's name and what is wrong, with line:column
 * for malformed JSON and the JSON path of a feature this encoder does not implement (e.g.
 * "normalizer.type: \"Lowercase\" is not supported"); a path that is neither says what is expected.
 */
pdr_tokenizer_t *pdr_tokenizer_load(const char *path, char *err, size_t errlen);
/* The file pdr_tokenizer_load reads for path (path itself, or DIR/tokenizer.json) into out[0..cap).
 * Returns 0, or PDR_ECONFIG / PDR_ETOOBIG with the message in err: no such file (a name that looks like
 * a Hugging Face model id says that those are not downloaded), a directory without a tokenizer.json, not
 * a regular file, a path longer than cap - 1. */
#define PDR_TOKENIZER_PATH_MAX 4096
int pdr_tokenizer_file(const char *path, char *out, size_t cap, char *err, size_t errlen);
/* A tokenizer is reference-counted (it starts with one): pdr_tokenizer_ref() adds one, and
 * pdr_tokenizer_free() drops one and frees the tokenizer with the last. Both are thread-safe. */
pdr_tokenizer_t *pdr_tokenizer_ref(pdr_tokenizer_t *tok);
void pdr_tokenizer_free(pdr_tokenizer_t *tok);

/*
 * Encodes text[0..len) (UTF-8) as `Tokenizer.encode(text).ids` does: added tokens split out first, the
 * normalizer, the pre-tokenizer, BPE, then the post-processor's special tokens. *ids is malloc'ed (the
 * caller frees it; NULL when *n is 0). Returns 0, PDR_EINVAL (text not valid UTF-8), PDR_ENOMEM, or
 * PDR_ENOTSUP (a regex step exceeded PCRE2's match limits; the caller should fall back).
 */
int pdr_tokenizer_encode(const pdr_tokenizer_t *tok, const char *text, size_t len, uint32_t **ids, size_t *n);
/* As pdr_tokenizer_encode; add_special 0 leaves out the post-processor's special tokens, as
 * `encode(text, add_special_tokens=False)` does (a chat template's text carries its own). */
int pdr_tokenizer_encode_special(const pdr_tokenizer_t *tok, const char *text, size_t len, int add_special,
                                 uint32_t **ids, size_t *n);

/* What a tokenizer carries for its user: the model's chat template, attached once after the load and
 * before the tokenizer is shared (free_extra frees it with the tokenizer). NULL when none. */
void pdr_tokenizer_set_extra(pdr_tokenizer_t *tok, void *extra, void (*free_extra)(void *));
const void *pdr_tokenizer_extra(const pdr_tokenizer_t *tok);

/* The bytes the loaded tokenizer holds (tables, strings and compiled patterns; an estimate for PCRE2). */
size_t pdr_tokenizer_bytes(const pdr_tokenizer_t *tok);
/* The number of vocabulary entries and of merges. */
size_t pdr_tokenizer_vocab_size(const pdr_tokenizer_t *tok);
size_t pdr_tokenizer_merges(const pdr_tokenizer_t *tok);

#endif
