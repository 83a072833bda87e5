/* Between the encoder's files (tokenizer.c: byte-level BPE and the merges; tokenizer_spm.c:
 * SentencePiece-style segments): one encoding's scratch and what both use. */
#ifndef PDR_TOKENIZER_ENC_H
#define PDR_TOKENIZER_ENC_H

#include "tokenizer_internal.h"

struct sym {
    uint32_t id;
    int32_t prev, next;
    uint32_t len;       /* bytes; 0: merged into its left neighbour */
    uint32_t rank, mid; /* short words: the merge of this symbol with the next (rank NONE: none) */
};

/* Words of at most this many symbols merge by scanning their pairs' cached ranks (cheaper than the
 * heap for short words, and the same order: lowest rank, then leftmost). */
#define SCAN_MAX 48

struct cand {
    uint32_t rank, pos, id;
};

struct enc {
    const pdr_tokenizer_t *t;
    uint32_t *ids;
    size_t n, cap;
    char *map; /* a piece's ByteLevel characters */
    size_t map_cap;
    struct sym *sym;
    size_t sym_cap;
    struct cand *heap;
    size_t heap_cap;
    pcre2_match_data *md;
    const char *text; /* the text encoded: a segment that starts there is the sequence's first */
};

/* Grows *p (elements of size bytes) to hold need; 0 or PDR_ENOMEM. */
int pdr__tok_grow(void **p, size_t *cap, size_t need, size_t size);
/* Appends an id to the encoding's output; 0 or PDR_ENOMEM. */
int pdr__tok_emit(struct enc *e, uint32_t id);
/* The merges of symbols 0..ns-1 of e->sym (linked), then their ids. */
int pdr__tok_merge_syms(struct enc *e, int32_t ns);
/* A segment (between added tokens) of a SentencePiece-style file: normalizer, Metaspace, BPE. */
int pdr__tok_segment_chars(struct enc *e, const char *p, size_t len);
#define grow pdr__tok_grow
#define emit pdr__tok_emit
#define merge_syms pdr__tok_merge_syms

#endif
