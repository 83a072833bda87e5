/*
 * Single-pass JSON scanner for request bodies: validates a whole document as strictly as a conforming
 * parser (RFC 8259) and records the type, shape and raw byte span of each top-level member, without
 * building a tree. The router keeps the members it wants by copying their raw bytes. Pure functions,
 * any thread; the results point into the caller's buffer.
 */
#ifndef PDR_JSONSCAN_H
#define PDR_JSONSCAN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "err.h"

/* Deepest nesting of arrays and objects accepted; the top-level object counts as depth 1. */
#define PDR_JSON_MAX_DEPTH 128

typedef enum {
    PDR_JT_NONE = 0,
    PDR_JT_NULL,
    PDR_JT_TRUE,
    PDR_JT_FALSE,
    PDR_JT_INT /* a number without fraction or exponent */,
    PDR_JT_NUMBER /* any other number */,
    PDR_JT_STRING,
    PDR_JT_ARRAY,
    PDR_JT_OBJECT,
    PDR_JT_MIXED
} pdr_jt_t;

typedef struct pdr_jval {
    uint8_t type; /* pdr_jt_t */
    /* Arrays: the type shared by all elements (INT and NUMBER elements mixed -> NUMBER), PDR_JT_MIXED if
     * they differ, PDR_JT_NONE if empty. TRUE and FALSE are distinct types, so [true,false] is MIXED. */
    uint8_t elem;
    /* Arrays whose elements are all arrays: the type shared by all their elements, empty inner arrays
     * not counting (NONE if all inner arrays are empty, MIXED if they differ). NONE otherwise. */
    uint8_t elem_elem;
    /* Arrays whose elements are all arrays: 1 when at least one of them is empty. 0 otherwise. */
    uint8_t empty_inner;
    uint32_t count; /* arrays: elements; objects: members; others: 0 */
    const char *p;  /* raw bytes of the value, exactly as in the input */
    size_t len;
} pdr_jval_t;

typedef struct pdr_jmember {
    const char *key; /* raw key bytes between the quotes (escapes NOT decoded) */
    size_t key_len;
    int key_escaped; /* the raw key contains a backslash escape */
    const char *raw; /* from the opening quote of the key to the end of the value: what to copy to keep it */
    size_t raw_len;
    pdr_jval_t v;
} pdr_jmember_t;

/*
 * Validates the whole document (RFC 8259, strict: one top-level value which must be an OBJECT,
 * surrounding whitespace allowed; strings valid UTF-8 without raw control characters, escapes valid
 * including \uXXXX surrogate pairs; numbers per the JSON grammar and within a double's range (1e999,
 * which a parser would read as infinity, is refused: "number out of range at byte N"); nesting depth at most
 * PDR_JSON_MAX_DEPTH; no trailing commas, no comments). Fills out[0..*n) with the top-level members in
 * order, at most max of them (more: error "too many top-level fields"). Duplicate top-level keys
 * (compared after decoding escapes) are an error; nested objects are not checked for duplicates.
 * Returns 0; PDR_EINVAL with a message such as "malformed JSON at byte 123: expected ',' or '}'" or
 * "duplicate key 'text'" written to err (always NUL-terminated when errlen > 0); or PDR_ENOMEM when a
 * document with more than 32 members needs a key table and malloc fails (the only allocation, freed
 * before returning). *n is 0 on error.
 */
int pdr__json_scan_object(const char *p, size_t len, pdr_jmember_t *out, size_t max, size_t *n, char *err,
                          size_t errlen, int full_rc);
static inline int pdr_json_scan_object(const char *p, size_t len, pdr_jmember_t *out, size_t max, size_t *n,
                                       char *err, size_t errlen)
{
    return pdr__json_scan_object(p, len, out, max, n, err, errlen, PDR_EINVAL);
}
/* The same, for a caller that tries a small array first: a document with more than max members returns
 * PDR_ETOOBIG (the message written all the same), to be scanned again with room for all of them. */
static inline int pdr_json_scan_object_in(const char *p, size_t len, pdr_jmember_t *out, size_t max,
                                          size_t *n, char *err, size_t errlen)
{
    return pdr__json_scan_object(p, len, out, max, n, err, errlen, PDR_ETOOBIG);
}

/* pdr_jmember_key_is for a key with escapes: decodes them as it compares. */
int pdr__jmember_key_is_escaped(const pdr_jmember_t *m, const char *name);

/* 1 when the member's key, with escapes decoded, equals name (NUL-terminated), else 0. Inline: a key
 * without escapes (nearly all) is compared by length and bytes, and a literal name's length is known at
 * compile time. */
static inline int pdr_jmember_key_is(const pdr_jmember_t *m, const char *name)
{
    if (m->key_escaped)
        return pdr__jmember_key_is_escaped(m, name);
    size_t n = strlen(name);
    return n == m->key_len && memcmp(m->key, name, n) == 0;
}

/* Parses an INT value into *out. Returns 0, or PDR_EINVAL if v is not an INT or does not fit int64_t. */
int pdr_jval_int(const pdr_jval_t *v, int64_t *out);

/* Finds a top-level member by decoded name, or NULL. The name is measured once; a key without escapes
 * (nearly all) is compared by length and bytes here, the others by pdr_jmember_key_is. */
static inline const pdr_jmember_t *pdr_jfind(const pdr_jmember_t *m, size_t n, const char *name)
{
    size_t len = strlen(name);
    for (size_t i = 0; i < n; i++)
        if (m[i].key_escaped ? pdr_jmember_key_is(&m[i], name)
                             : m[i].key_len == len && memcmp(m[i].key, name, len) == 0)
            return &m[i];
    return NULL;
}

/*
 * Walk the elements of an ARRAY value, or the members of an OBJECT value, that pdr_json_scan_object
 * validated (nested values are not recorded by the scan; these read them when a caller needs them).
 * *pos starts at 0 and is the iteration state. Each call fills *elem (a member's key, raw span and value
 * for objects, as in the top-level records) and returns 1, or returns 0 after the last one (and for a
 * value of another type). Duplicate keys in nested objects are not detected: every occurrence comes.
 */
int pdr_jarray_next(const pdr_jval_t *arr, size_t *pos, pdr_jval_t *elem);
int pdr_jobject_next(const pdr_jval_t *obj, size_t *pos, pdr_jmember_t *member);

/* Static name of a pdr_jt_t ("string", "array", ...) for error messages. Never NULL. */
const char *pdr_jt_name(int type);

#endif
