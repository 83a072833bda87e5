/* Between tokenizer_load.c (tokenizer.json to tables) and tokenizer.c (the tables, encoding). */
#ifndef PDR_TOKENIZER_INTERNAL_H
#define PDR_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdint.h>

#include "tokenizer.h"

#define PDR_TOK_NONE UINT32_MAX

/* A string -> id table (the vocabulary), open addressing over a string pool. */
typedef struct pdr__tok_vocab {
    char *pool;
    size_t pool_len, pool_cap;
    struct pdr__tok_vslot {
        uint32_t hash, id, off, len; /* id PDR_TOK_NONE: empty */
    } * slots;
    size_t n, cap; /* entries; slots, a power of two */
} pdr__tok_vocab_t;

/* (left id, right id) -> (rank, merged id). */
typedef struct pdr__tok_merge {
    uint64_t key; /* left << 32 | right; UINT64_MAX: empty */
    uint32_t rank, id;
} pdr__tok_merge_t;

typedef struct pdr__tok_added {
    char *s;
    uint32_t len, id;
} pdr__tok_added_t;

/* One set of added tokens, matched leftmost-longest by exact bytes. */
typedef struct pdr__tok_addset {
    pdr__tok_added_t *tok; /* sorted by first byte, then by length, longest first */
    size_t n;
    uint32_t first[257]; /* tokens starting with byte b: tok[first[b] .. first[b + 1]) */
} pdr__tok_addset_t;

typedef enum { PDR__TOK_SPLIT, PDR__TOK_PREFIX_SPACE } pdr__tok_step_kind_t;

/* A normalizer step of a SentencePiece-style file: NFC, Prepend (a string in front of a non-empty
 * segment) or Replace (every occurrence of a string by another). */
typedef enum { PDR__NORM_NFC, PDR__NORM_PREPEND, PDR__NORM_REPLACE } pdr__tok_norm_kind_t;
typedef struct pdr__tok_norm {
    pdr__tok_norm_kind_t kind;
    char *a, *b; /* Prepend: a; Replace: a by b */
    size_t alen, blen;
} pdr__tok_norm_t;

/* Metaspace's prepend_scheme. */
enum { PDR__META_NEVER = 0, PDR__META_ALWAYS, PDR__META_FIRST };

typedef struct pdr__tok_step {
    pdr__tok_step_kind_t kind;
    pcre2_code *re; /* PDR__TOK_SPLIT: the pattern, behaviour Isolated */
} pdr__tok_step_t;

struct pdr_tokenizer {
    pdr__tok_vocab_t vocab;
    pdr__tok_merge_t *merges;
    size_t merge_cap, n_merges; /* cap a power of two */
    uint32_t byte_id[256];      /* the vocabulary id of each byte's ByteLevel character, or NONE */
    char byte_chr[256][2];      /* each byte's ByteLevel character as UTF-8 ... */
    uint8_t byte_len[256];      /* ... of 1 or 2 bytes */
    uint32_t unk_id;            /* NONE: unknown characters are dropped (as `tokenizers` does) */
    int fuse_unk, ignore_merges, nfc;
    /* SentencePiece-style files (no ByteLevel): BPE over characters, spaces as Metaspace's replacement,
     * characters outside the vocabulary as their bytes' <0xNN> tokens (byte_fallback). */
    int char_level, byte_fallback;
    uint32_t fb_id[256];    /* the id of "<0xNN>" for each byte, or NONE */
    pdr__tok_norm_t *norms; /* the normalizer's steps (char_level files; NFC alone stays nfc) */
    size_t n_norms;
    int meta, meta_prepend, meta_split; /* a Metaspace pre-tokenizer, its prepend_scheme and split */
    char meta_rep[8];
    size_t meta_rep_len;
    pdr__tok_addset_t added_raw;  /* added tokens with normalized false: split from the raw text */
    pdr__tok_addset_t added_norm; /* normalized true (only without a normalizer): matched afterwards */
    pdr__tok_step_t *steps;
    size_t n_steps;
    uint32_t *prefix, *suffix; /* the post-processor's ids around the sequence */
    size_t n_prefix, n_suffix;
    size_t bytes;
    void *extra; /* pdr_tokenizer_set_extra's */
    void (*free_extra)(void *);
    int refcnt; /* atomic */
};

/* pdr_tokenizer_load() from memory: buf[0..len) is taken over (freed before the call returns); name
 * stands for the file in messages. For the fuzz target. */
pdr_tokenizer_t *pdr__tokenizer_load_buffer(char *buf, size_t len, const char *name, char *err,
                                            size_t errlen);

/* The ByteLevel character of byte b as UTF-8 (1 or 2 bytes) into out; returns its length. */
size_t pdr__tok_byte_char(uint8_t b, char out[2]);
uint32_t pdr__tok_hash(const char *s, size_t len);
/* Returns the id of s in the vocabulary, or PDR_TOK_NONE. */
uint32_t pdr__tok_vocab_get(const pdr__tok_vocab_t *v, const char *s, size_t len);
/* Adds s -> id (an existing s receives the new id). Returns 0 or PDR_ENOMEM. */
int pdr__tok_vocab_put(pdr__tok_vocab_t *v, const char *s, size_t len, uint32_t id);
void pdr__tok_vocab_free(pdr__tok_vocab_t *v);
/* Sizes the tables for n entries (of bytes in all), or n merges, up front. 0 or PDR_ENOMEM. */
int pdr__tok_vocab_reserve(pdr__tok_vocab_t *v, size_t n, size_t bytes);
int pdr__tok_merge_reserve(pdr_tokenizer_t *t, size_t n);
/* Adds a merge (a later duplicate replaces an earlier one, as `tokenizers` does). 0 or PDR_ENOMEM. */
int pdr__tok_merge_put(pdr_tokenizer_t *t, uint32_t left, uint32_t right, uint32_t rank, uint32_t id);
const pdr__tok_merge_t *pdr__tok_merge_get(const pdr_tokenizer_t *t, uint32_t left, uint32_t right);
/* Sorts a set and builds its first-byte index. */
void pdr__tok_addset_index(pdr__tok_addset_t *a);

#endif
