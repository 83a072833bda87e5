/*
 * Single-pass JSON scanner for request bodies: validates a whole document as strictly as a conforming
 * parser (RFC 8259) and records the type, shape and raw byte span of each top-level member, without
 * building a tree. The router keeps the members it wants by copying their raw bytes. Pure functions,
 * any thread; the results point into the caller's buffer. The value types are jsonscan_types.h's, which
 * this header includes; the functions are jsonscan.c's.
 */
#ifndef PDR_JSONSCAN_H
#define PDR_JSONSCAN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "err.h"
#include "jsonscan_types.h"

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
