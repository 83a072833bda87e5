/*
 * Fuzz target for the request-body JSON scanner (router/util/jsonscan.c and jsonscan_object.c), with jansson
 * as the oracle. Built with libFuzzer when PDR_LIBFUZZER is defined; otherwise a main() replays every file
 * named on the command line (ctest's jsonscan_fuzz_corpus). tests/unit/test_jsonscan.c includes this file
 * with PDR_JSONSCAN_NO_MAIN defined to reuse jsonscan_differential() on its own inputs and mutations.
 *
 * The expected verdict (accept iff a strict RFC 8259 parser accepts, the root is an object and no two
 * top-level keys are equal after decoding) comes from jansson 2.14 with these known differences, each
 * handled explicitly rather than hidden:
 *   1. Root type: jansson accepts an array root by default; the scanner requires an object. Inputs whose
 *      first non-whitespace byte is not '{' are expected to be rejected without asking jansson.
 *   2. Depth: jansson allows 2048 levels, the scanner 128. Inputs whose bracket depth outside strings
 *      exceeds 128 are expected to be rejected (that count is exact for every valid document, and an
 *      invalid one is rejected anyway).
 *   3. \u0000 in string values: jansson rejects it unless JSON_ALLOW_NUL, which the oracle passes.
 *   4. \u0000 in object keys: jansson always fails ("NUL byte in object key not supported"); RFC 8259
 *      allows it and so does the scanner. jansson stops at the first error, so nothing is known about
 *      the rest: the input is excluded and counted (skip_nul_key).
 *   5. Numbers outside int64 ("too big integer") or beyond double ("real number overflow"): jansson
 *      fails. The scanner refuses those beyond a double's range too (they would read as infinity) but
 *      accepts integers beyond int64 that a double holds. Excluded and counted (skip_range).
 *   6. Duplicate keys: JSON_REJECT_DUPLICATES checks every depth, the scanner only the top level.
 *      jansson reports the first duplicate in document order at the byte after the key; when that key
 *      is at depth 1 the input must be rejected, otherwise the input is excluded (skip_nested_dup).
 *   7. Raw NUL bytes: jansson's stream treats a buffered 0x00 as "buffer empty", so a NUL byte right after
 *      a token the lexer pushes back (a number or true/false/null) is silently dropped and jansson
 *      accepts e.g. {"a":1<NUL>} (found by libFuzzer). A raw 0x00 is never valid JSON (outside strings
 *      only whitespace and tokens may appear; inside strings bytes < 0x20 are forbidden), so any input
 *      holding one is expected to be rejected; the cases where jansson accepts are counted
 *      (jansson_raw_nul).
 * When both accept, the records are checked against jansson's tree: member count, decoded keys, the raw
 * member and value spans (each reparsed on its own), types, counts and array element types, and each
 * container member is walked with pdr_jarray_next/pdr_jobject_next element by element.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "jsonscan.h"

enum { JDIFF_MAX_MEMBERS = 4096 };

typedef struct {
    unsigned long accept, reject, skip_nested_dup, skip_nul_key, skip_range, mismatch, jansson_raw_nul;
} jdiff_stats_t;

enum { EXPECT_REJECT, EXPECT_ACCEPT, SKIP_NESTED_DUP, SKIP_NUL_KEY, SKIP_RANGE };

static int jdiff_is_ws(uint8_t c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/*
 * Bracket depth outside strings: the greatest depth anywhere (returned) and the depth at byte `at`
 * (*depth_at). Exact for valid documents.
 */
static int jdiff_depth(const uint8_t *b, size_t len, size_t at, int *depth_at)
{
    int depth = 0, max = 0, in_str = 0;
    for (size_t i = 0; i < len; i++) {
        uint8_t c = b[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '{' || c == '[') {
            if (++depth > max)
                max = depth;
        } else if (c == '}' || c == ']') {
            depth--;
        }
        if (i == at && depth_at != NULL)
            *depth_at = depth;
    }
    return max;
}

/* The verdict expected of pdr_json_scan_object, or a SKIP_* reason (see the header comment). */
static int jdiff_expect(const uint8_t *b, size_t len, jdiff_stats_t *st)
{
    size_t i = 0;
    json_error_t e;
    while (i < len && jdiff_is_ws(b[i]))
        i++;
    if (i == len || b[i] != '{')
        return EXPECT_REJECT;
    if (jdiff_depth(b, len, 0, NULL) > PDR_JSON_MAX_DEPTH)
        return EXPECT_REJECT;
    json_t *j = json_loadb((const char *)b, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &e);
    if (memchr(b, '\0', len) != NULL) {
        if (j != NULL && st != NULL)
            st->jansson_raw_nul++;
        json_decref(j);
        return EXPECT_REJECT;
    }
    if (j != NULL) {
        json_decref(j);
        return EXPECT_ACCEPT;
    }
    switch (json_error_code(&e)) {
    case json_error_duplicate_key: {
        int d = -1;
        if (e.position > 0)
            (void)jdiff_depth(b, len, (size_t)e.position - 1, &d);
        return d == 1 ? EXPECT_REJECT : SKIP_NESTED_DUP;
    }
    case json_error_null_byte_in_key:
        return SKIP_NUL_KEY;
    case json_error_numeric_overflow:
        return SKIP_RANGE;
    default:
        return EXPECT_REJECT;
    }
}

static uint8_t jdiff_merge(uint8_t acc, uint8_t t)
{
    if (acc == t || acc == PDR_JT_NONE)
        return t;
    if ((acc == PDR_JT_INT || acc == PDR_JT_NUMBER) && (t == PDR_JT_INT || t == PDR_JT_NUMBER))
        return PDR_JT_NUMBER;
    return PDR_JT_MIXED;
}

/* The record jansson's tree implies for a value: type, elem, elem_elem, count. */
static void jdiff_shape(const json_t *j, pdr_jval_t *v)
{
    v->elem = v->elem_elem = PDR_JT_NONE;
    v->empty_inner = 0;
    v->count = 0;
    switch (json_typeof(j)) {
    case JSON_OBJECT:
        v->type = PDR_JT_OBJECT;
        v->count = (uint32_t)json_object_size(j);
        break;
    case JSON_ARRAY:
        v->type = PDR_JT_ARRAY;
        v->count = (uint32_t)json_array_size(j);
        for (size_t i = 0; i < json_array_size(j); i++) {
            pdr_jval_t c;
            jdiff_shape(json_array_get(j, i), &c);
            v->elem = jdiff_merge(v->elem, c.type);
            if (c.type == PDR_JT_ARRAY && c.elem != PDR_JT_NONE)
                v->elem_elem = jdiff_merge(v->elem_elem, c.elem);
            if (c.type == PDR_JT_ARRAY && c.count == 0)
                v->empty_inner = 1;
        }
        if (v->elem != PDR_JT_ARRAY)
            v->elem_elem = v->empty_inner = 0;
        break;
    case JSON_STRING:
        v->type = PDR_JT_STRING;
        break;
    case JSON_INTEGER:
        v->type = PDR_JT_INT;
        break;
    case JSON_REAL:
        v->type = PDR_JT_NUMBER;
        break;
    case JSON_TRUE:
        v->type = PDR_JT_TRUE;
        break;
    case JSON_FALSE:
        v->type = PDR_JT_FALSE;
        break;
    default:
        v->type = PDR_JT_NULL;
        break;
    }
}

/*
 * Walks a container member with pdr_jarray_next/pdr_jobject_next and checks each element (each member:
 * decoded key and value) against jansson's. Returns 0, or 1 with a description in why.
 */
static int jdiff_check_walk(const pdr_jval_t *v, const json_t *want, size_t i, char *why, size_t whylen)
{
    json_error_t e;
    size_t pos = 0, k = 0, want_n = json_is_array(want) ? json_array_size(want) : json_object_size(want);
    int bad = 0;
    if (v->type == PDR_JT_ARRAY) {
        pdr_jval_t c;
        for (; !bad && pdr_jarray_next(v, &pos, &c); k++) {
            json_t *cv = json_loadb(c.p, c.len, JSON_ALLOW_NUL | JSON_DECODE_ANY, &e);
            if (cv == NULL || !json_equal(cv, json_array_get(want, k)) || c.p < v->p ||
                c.p + c.len > v->p + v->len) {
                snprintf(why, whylen, "member %zu: walked element %zu differs from jansson's", i, k);
                bad = 1;
            }
            json_decref(cv);
        }
    } else if (v->type == PDR_JT_OBJECT) {
        pdr_jmember_t c;
        for (; !bad && pdr_jobject_next(v, &pos, &c); k++) {
            size_t wlen = c.raw_len + 2;
            char *w = malloc(wlen);
            if (w == NULL)
                abort();
            w[0] = '{';
            memcpy(w + 1, c.raw, c.raw_len);
            w[wlen - 1] = '}';
            json_t *one = json_loadb(w, wlen, JSON_ALLOW_NUL, &e);
            void *it = one ? json_object_iter(one) : NULL;
            const char *key = it ? json_object_iter_key(it) : NULL;
            json_t *cv = json_loadb(c.v.p, c.v.len, JSON_ALLOW_NUL | JSON_DECODE_ANY, &e);
            json_t *wv = key ? json_object_getn(want, key, json_object_iter_key_len(it)) : NULL;
            if (wv == NULL || cv == NULL || !json_equal(cv, wv) || c.key != c.raw + 1 ||
                c.v.p + c.v.len != c.raw + c.raw_len ||
                (memchr(key, '\0', json_object_iter_key_len(it)) == NULL && !pdr_jmember_key_is(&c, key))) {
                snprintf(why, whylen, "member %zu: walked member %zu differs from jansson's", i, k);
                bad = 1;
            }
            json_decref(cv);
            json_decref(one);
            free(w);
        }
    } else if (pdr_jarray_next(v, &pos, &(pdr_jval_t){0}) || pdr_jobject_next(v, &pos, &(pdr_jmember_t){0})) {
        snprintf(why, whylen, "member %zu: a walker accepted a %s", i, pdr_jt_name(v->type));
        return 1;
    } else {
        return 0;
    }
    if (!bad && k != want_n) {
        snprintf(why, whylen, "member %zu: walked %zu elements, jansson has %zu", i, k, want_n);
        bad = 1;
    }
    return bad;
}

/* Checks accepted records against jansson's tree. Returns 0, or 1 with a description in why. */
static int jdiff_check_members(const uint8_t *b, size_t len, const pdr_jmember_t *m, size_t n, char *why,
                               size_t whylen)
{
    json_error_t e;
    json_t *root = json_loadb((const char *)b, len, JSON_ALLOW_NUL, &e);
    int bad = 0;
    if (root == NULL || !json_is_object(root) || json_object_size(root) != n) {
        snprintf(why, whylen, "jansson tree has %zu members, scanner %zu", root ? json_object_size(root) : 0,
                 n);
        json_decref(root);
        return 1;
    }
    for (size_t i = 0; i < n && !bad; i++) {
        const pdr_jmember_t *x = &m[i];
        size_t wlen = x->raw_len + 2;
        char *w = malloc(wlen);
        json_t *wrapped = NULL, *val = NULL;
        if (w == NULL)
            abort();
        w[0] = '{';
        memcpy(w + 1, x->raw, x->raw_len);
        w[wlen - 1] = '}';
        wrapped = json_loadb(w, wlen, JSON_ALLOW_NUL, &e);
        val = json_loadb(x->v.p, x->v.len, JSON_ALLOW_NUL | JSON_DECODE_ANY, &e);
        void *it = wrapped ? json_object_iter(wrapped) : NULL;
        const char *k = it ? json_object_iter_key(it) : NULL;
        size_t klen = it ? json_object_iter_key_len(it) : 0;
        json_t *want = k ? json_object_getn(root, k, klen) : NULL;
        pdr_jval_t shape;
        if (x->raw < (const char *)b || x->raw + x->raw_len > (const char *)b + len || x->raw[0] != '"' ||
            x->key != x->raw + 1 || x->v.p + x->v.len != x->raw + x->raw_len) {
            snprintf(why, whylen, "member %zu: spans are inconsistent", i);
            bad = 1;
        } else if (wrapped == NULL || json_object_size(wrapped) != 1 || want == NULL) {
            snprintf(why, whylen, "member %zu: raw span is not one member of the document", i);
            bad = 1;
        } else if (val == NULL || !json_equal(val, want) || !json_equal(json_object_iter_value(it), want)) {
            snprintf(why, whylen, "member %zu: value span differs from jansson's value", i);
            bad = 1;
        } else if ((x->key_escaped != 0) != (memchr(x->key, '\\', x->key_len) != NULL)) {
            snprintf(why, whylen, "member %zu: key_escaped is wrong", i);
            bad = 1;
        } else if (memchr(k, '\0', klen) == NULL && (!pdr_jmember_key_is(x, k) || pdr_jfind(m, n, k) != x)) {
            snprintf(why, whylen, "member %zu: decoded key does not match jansson's", i);
            bad = 1;
        } else {
            jdiff_shape(want, &shape);
            if (shape.type != x->v.type || shape.elem != x->v.elem || shape.elem_elem != x->v.elem_elem ||
                shape.empty_inner != x->v.empty_inner || shape.count != x->v.count) {
                snprintf(why, whylen, "member %zu: shape %d/%d/%d/%u, jansson says %d/%d/%d/%u", i, x->v.type,
                         x->v.elem, x->v.elem_elem, x->v.count, shape.type, shape.elem, shape.elem_elem,
                         shape.count);
                bad = 1;
            } else if (jdiff_check_walk(&x->v, want, i, why, whylen) != 0) {
                bad = 1;
            } else if (shape.type == PDR_JT_INT) {
                int64_t iv;
                if (pdr_jval_int(&x->v, &iv) != 0 || iv != json_integer_value(want)) {
                    snprintf(why, whylen, "member %zu: pdr_jval_int differs from jansson", i);
                    bad = 1;
                }
            }
        }
        json_decref(val);
        json_decref(wrapped);
        free(w);
    }
    json_decref(root);
    return bad;
}

/*
 * Runs the scanner and the oracle on one input (which must be exactly size bytes of its own buffer, so
 * that ASan sees any over-read). Returns 0 when they agree or the input is excluded, 1 with a reason.
 */
static int jsonscan_differential(const uint8_t *data, size_t size, jdiff_stats_t *st, char *why,
                                 size_t whylen)
{
    static pdr_jmember_t members[JDIFF_MAX_MEMBERS];
    char err[256];
    size_t n = 99;
    memset(err, 'x', sizeof(err));
    why[0] = '\0';
    int rc = pdr_json_scan_object((const char *)data, size, members, JDIFF_MAX_MEMBERS, &n, err, sizeof(err));
    int want = jdiff_expect(data, size, st);
    if (rc != 0 && (rc != PDR_EINVAL || n != 0 || memchr(err, '\0', sizeof(err)) == NULL || err[0] == '\0')) {
        snprintf(why, whylen, "bad error contract: rc=%d n=%zu", rc, n);
        st->mismatch++;
        return 1;
    }
    switch (want) {
    case SKIP_NESTED_DUP:
        st->skip_nested_dup++;
        return 0;
    case SKIP_NUL_KEY:
        st->skip_nul_key++;
        return 0;
    case SKIP_RANGE:
        st->skip_range++;
        return 0;
    default:
        break;
    }
    if ((rc == 0) != (want == EXPECT_ACCEPT)) {
        snprintf(why, whylen, "scanner %s, jansson-based oracle %s (scanner: %s)",
                 rc == 0 ? "accepts" : "rejects", want == EXPECT_ACCEPT ? "accepts" : "rejects",
                 rc == 0 ? "ok" : err);
        st->mismatch++;
        return 1;
    }
    if (rc != 0) {
        st->reject++;
        return 0;
    }
    if (jdiff_check_members(data, size, members, n, why, whylen) != 0) {
        st->mismatch++;
        return 1;
    }
    st->accept++;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static jdiff_stats_t st;
    char why[512];
    if (jsonscan_differential(data, size, &st, why, sizeof(why)) != 0) {
        fprintf(stderr, "jsonscan differential failure: %s\n", why);
        abort();
    }
    return 0;
}

#if !defined(PDR_LIBFUZZER) && !defined(PDR_JSONSCAN_NO_MAIN)
#include "replay_main.h"
#endif
