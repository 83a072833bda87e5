/*
 * Owns the single-pass JSON scanner declared in jsonscan.h: strict RFC 8259 validation of a request
 * body whose top-level value must be an object, plus a record (key, raw span, type, array shape) for
 * each top-level member. Nested values are validated and typed but not recorded; the walkers
 * (pdr_jarray_next, pdr_jobject_next) read them again on demand.
 *
 * Invariants: the input is never written and never read past p + len (it need not be NUL-terminated);
 * recursion is bounded by PDR_JSON_MAX_DEPTH; a call allocates at most once (the duplicate-key table of a
 * document with more than SMALL_MEMBERS members) and frees it before returning. Reentrant, any thread.
 *
 * Speed: string bodies, which carry almost all the bytes of a prompt, are skipped 16 bytes at a time
 * with SSE2 (baseline on x86-64) and UTF-8 is decoded only where a byte >= 0x80 appears.
 */
#include "jsonscan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "err.h"

typedef struct {
    const char *start;
    const char *end;
    char *err;
    size_t errlen;
} scan_t;

/* Records a syntax error at `at` and returns NULL, so that callers can `return fail(...)`. */
static const char *fail(scan_t *s, const char *at, const char *what)
{
    if (s->errlen > 0)
        snprintf(s->err, s->errlen, "malformed JSON at byte %zu: %s", (size_t)(at - s->start), what);
    return NULL;
}

static inline const char *skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    return p;
}

static inline int is_digit(char c)
{
    return (unsigned char)(c - '0') < 10;
}

static inline int hex_value(unsigned char c)
{
    if ((unsigned char)(c - '0') < 10)
        return c - '0';
    c |= 0x20;
    if ((unsigned char)(c - 'a') < 6)
        return c - 'a' + 10;
    return -1;
}

/* Four hex digits at p (bounds already checked), or -1. */
static inline int hex4(const char *p)
{
    int a = hex_value((unsigned char)p[0]), b = hex_value((unsigned char)p[1]);
    int c = hex_value((unsigned char)p[2]), d = hex_value((unsigned char)p[3]);
    if ((a | b | c | d) < 0)
        return -1;
    return (a << 12) | (b << 8) | (c << 4) | d;
}

/* 1 for bytes that a string body holds as they are: 0x20..0x7f except '"' and '\\'. */
static const unsigned char plain_byte[256] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x00 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x10 */
    1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x20: '"' */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x30 */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x40 */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, /* 0x50: '\\' */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x60 */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x70 */
    /* 0x80..0xff: zero */
};

/*
 * Validates the run of UTF-8 sequences starting at p (*p >= 0x80) and returns the first byte after it that
 * is ASCII (or the end). Well-formed sequences per Unicode 15 table 3-7: no overlongs, no surrogates
 * (ED A0..BF), nothing above U+10FFFF, nothing truncated. Looping here keeps text in non-Latin scripts
 * off the 16-byte ASCII path, which would stop at every character.
 */
static const char *scan_utf8(scan_t *s, const char *p)
{
    const char *end = s->end;
    do {
        const unsigned char *u = (const unsigned char *)p;
        size_t avail = (size_t)(end - p);
        unsigned c = u[0], lo = 0x80, hi = 0xbf;
        if (c >= 0xc2 && c <= 0xdf) {
            if (avail < 2 || (u[1] & 0xc0) != 0x80)
                break;
            p += 2;
        } else if (c >= 0xe0 && c <= 0xef) {
            if (c == 0xe0)
                lo = 0xa0;
            else if (c == 0xed)
                hi = 0x9f;
            if (avail < 3 || u[1] < lo || u[1] > hi || (u[2] & 0xc0) != 0x80)
                break;
            p += 3;
        } else if (c >= 0xf0 && c <= 0xf4) {
            if (c == 0xf0)
                lo = 0x90;
            else if (c == 0xf4)
                hi = 0x8f;
            if (avail < 4 || u[1] < lo || u[1] > hi || (u[2] & 0xc0) != 0x80 || (u[3] & 0xc0) != 0x80)
                break;
            p += 4;
        } else {
            break;
        }
        if (p == end || (unsigned char)*p < 0x80)
            return p;
    } while (1);
    return fail(s, p, "invalid UTF-8 in string");
}

/* Validates the escape at p (*p == '\\') and returns the byte after it. */
static const char *scan_escape(scan_t *s, const char *p)
{
    size_t avail = (size_t)(s->end - p);
    if (avail < 2)
        return fail(s, p, "unexpected end of input in a string");
    switch (p[1]) {
    case '"':
    case '\\':
    case '/':
    case 'b':
    case 'f':
    case 'n':
    case 'r':
    case 't':
        return p + 2;
    case 'u': {
        int cp = avail >= 6 ? hex4(p + 2) : -1;
        if (cp < 0)
            return fail(s, p, "invalid \\u escape (expected 4 hex digits)");
        if (cp >= 0xdc00 && cp <= 0xdfff)
            return fail(s, p, "invalid \\u escape: lone low surrogate");
        if (cp < 0xd800 || cp > 0xdbff)
            return p + 6;
        if (avail < 12 || p[6] != '\\' || p[7] != 'u')
            return fail(s, p, "invalid \\u escape: high surrogate not followed by a low surrogate");
        cp = hex4(p + 8);
        if (cp < 0)
            return fail(s, p + 6, "invalid \\u escape (expected 4 hex digits)");
        if (cp < 0xdc00 || cp > 0xdfff)
            return fail(s, p, "invalid \\u escape: high surrogate not followed by a low surrogate");
        return p + 12;
    }
    default:
        return fail(s, p, "invalid escape in string");
    }
}

/*
 * p is just past the opening quote. Returns the byte after the closing quote, or NULL. Sets *escaped
 * when the body holds a backslash escape.
 */
static const char *scan_string(scan_t *s, const char *p, int *escaped)
{
    const char *end = s->end;
#ifdef __SSE2__
    const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(' ');
#endif
    for (;;) {
#ifdef __SSE2__
        /* A signed compare with ' ' flags control characters and bytes >= 0x80 at once. */
        while (end - p >= 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
            __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bslash)),
                                     _mm_cmplt_epi8(v, space));
            unsigned mask = (unsigned)_mm_movemask_epi8(m);
            if (mask != 0) {
                p += __builtin_ctz(mask);
                break;
            }
            p += 16;
        }
#endif
        while (p < end && plain_byte[(unsigned char)*p])
            p++;
        if (p == end)
            return fail(s, p, "unexpected end of input in a string");
        unsigned char c = (unsigned char)*p;
        if (c == '"')
            return p + 1;
        if (c == '\\') {
            *escaped = 1;
            p = scan_escape(s, p);
        } else if (c < 0x20) {
            return fail(s, p, "control character in string (must be escaped)");
        } else {
            p = scan_utf8(s, p);
        }
        if (p == NULL)
            return NULL;
    }
}

/*
 * 1 when the number token [p, end) (valid JSON grammar) is larger in magnitude than DBL_MAX, so that a
 * consumer parsing it as a double (Python's json module, strtod) gets infinity. With m the position of
 * the first significant digit relative to the decimal point (123.4 -> 3, 0.05 -> -1) and e the exponent,
 * the magnitude lies in [10^(m+e-1), 10^(m+e)): above 309 it overflows, below 309 it does not (DBL_MAX
 * is about 1.8e308), and at 309 strtod decides on the first 40 significant digits, which fix the
 * rounding for every value not within 1e-40 relative of DBL_MAX's rounding boundary.
 */
static int number_overflows(const char *p, const char *end)
{
    /* EXP_CAP: beyond any digit count a body can hold, so m + e keeps its sign when e saturates. */
    enum { SIG_MAX = 40 };
    const long long EXP_CAP = 1000000000000000ll;
    char buf[SIG_MAX + 32];
    size_t nsig = 0;
    long long m = 0, e = 0;
    int seen = 0, in_frac = 0, eneg = 0;
    if (p < end && *p == '-')
        p++;
    for (; p < end && (is_digit(*p) || *p == '.'); p++) {
        if (*p == '.') {
            in_frac = 1;
            continue;
        }
        if (!seen && *p == '0') {
            if (in_frac)
                m--;
            continue;
        }
        if (!seen)
            seen = 1;
        if (!in_frac)
            m++;
        if (nsig < SIG_MAX)
            buf[nsig++] = *p;
    }
    if (!seen)
        return 0; /* zero */
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            eneg = *p++ == '-';
        for (; p < end && is_digit(*p); p++)
            if (e < EXP_CAP)
                e = e * 10 + (*p - '0');
        if (eneg)
            e = -e;
    }
    if (m + e != 309)
        return m + e > 309;
    /* The digits read as an integer, scaled by 10^(m + e - nsig); no decimal point, so no locale. */
    snprintf(buf + nsig, sizeof(buf) - nsig, "e%lld", m + e - (long long)nsig);
    return isinf(strtod(buf, NULL));
}

/* p is at '-' or a digit. Returns the byte after the number and sets *type to INT or NUMBER. */
static const char *scan_number(scan_t *s, const char *p, uint8_t *type)
{
    const char *end = s->end, *start = p;
    if (*p == '-')
        p++;
    if (p == end || !is_digit(*p))
        return fail(s, p, "invalid number: expected a digit");
    if (*p == '0') {
        p++;
        if (p < end && is_digit(*p))
            return fail(s, p - 1, "invalid number: leading zeros are not allowed");
    } else {
        while (p < end && is_digit(*p))
            p++;
    }
    *type = PDR_JT_INT;
    if (p < end && *p == '.') {
        p++;
        if (p == end || !is_digit(*p))
            return fail(s, p, "invalid number: expected a digit after '.'");
        while (p < end && is_digit(*p))
            p++;
        *type = PDR_JT_NUMBER;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if (p == end || !is_digit(*p))
            return fail(s, p, "invalid number: expected a digit in the exponent");
        while (p < end && is_digit(*p))
            p++;
        *type = PDR_JT_NUMBER;
    }
    /* 309 digits: the shortest integer above DBL_MAX (1.8e308 has 309). */
    if ((*type == PDR_JT_NUMBER || p - start >= 309) && number_overflows(start, p)) {
        if (s->errlen > 0)
            snprintf(s->err, s->errlen,
                     "number out of range at byte %zu: larger than a double can hold (it would read as "
                     "infinity)",
                     (size_t)(start - s->start));
        return NULL;
    }
    return p;
}

/* The type an array's elements share once an element of type t joins those of type acc. */
static inline uint8_t merge_type(uint8_t acc, uint8_t t)
{
    if (acc == t || acc == PDR_JT_NONE)
        return t;
    if ((acc == PDR_JT_INT || acc == PDR_JT_NUMBER) && (t == PDR_JT_INT || t == PDR_JT_NUMBER))
        return PDR_JT_NUMBER;
    return PDR_JT_MIXED;
}

static inline uint32_t count_up(uint32_t c)
{
    return c == UINT32_MAX ? c : c + 1;
}

static const char *scan_value(scan_t *s, const char *p, int depth, pdr_jval_t *v);

/* p is at '['; depth is the array's own depth. */
static const char *scan_array(scan_t *s, const char *p, int depth, pdr_jval_t *v)
{
    const char *end = s->end;
    uint8_t elem = PDR_JT_NONE, elem_elem = PDR_JT_NONE, empty_inner = 0;
    uint32_t count = 0;
    if (depth > PDR_JSON_MAX_DEPTH)
        return fail(s, p, "nesting deeper than 128 levels");
    p = skip_ws(p + 1, end);
    if (p < end && *p == ']') {
        p++;
    } else {
        for (;;) {
            uint8_t t, te = PDR_JT_NONE;
            uint32_t tc = 0;
            if (p < end && (is_digit(*p) || *p == '-')) {
                /* Numbers skip scan_value: token-id arrays are made of little else. */
                if ((p = scan_number(s, p, &t)) == NULL)
                    return NULL;
            } else {
                pdr_jval_t c;
                if ((p = scan_value(s, p, depth, &c)) == NULL)
                    return NULL;
                t = c.type;
                te = c.elem;
                tc = c.count;
            }
            count = count_up(count);
            elem = merge_type(elem, t);
            if (t == PDR_JT_ARRAY && te != PDR_JT_NONE)
                elem_elem = merge_type(elem_elem, te);
            if (t == PDR_JT_ARRAY && tc == 0)
                empty_inner = 1;
            p = skip_ws(p, end);
            if (p == end)
                return fail(s, p, "unexpected end of input: expected ',' or ']'");
            if (*p == ']') {
                p++;
                break;
            }
            if (*p != ',')
                return fail(s, p, "expected ',' or ']'");
            p = skip_ws(p + 1, end);
            if (p < end && *p == ']')
                return fail(s, p, "trailing comma before ']'");
        }
    }
    v->type = PDR_JT_ARRAY;
    v->elem = elem;
    v->elem_elem = elem == PDR_JT_ARRAY ? elem_elem : PDR_JT_NONE;
    v->empty_inner = elem == PDR_JT_ARRAY ? empty_inner : 0;
    v->count = count;
    return p;
}

/* p is at '{' of a nested object; depth is the object's own depth. Keys are validated, not recorded. */
static const char *scan_nested_object(scan_t *s, const char *p, int depth, pdr_jval_t *v)
{
    const char *end = s->end;
    uint32_t count = 0;
    if (depth > PDR_JSON_MAX_DEPTH)
        return fail(s, p, "nesting deeper than 128 levels");
    p = skip_ws(p + 1, end);
    if (p < end && *p == '}') {
        p++;
    } else {
        for (;;) {
            pdr_jval_t c;
            int escaped = 0;
            if (p == end)
                return fail(s, p, "unexpected end of input: expected a string key");
            if (*p != '"')
                return fail(s, p, "expected a string key");
            if ((p = scan_string(s, p + 1, &escaped)) == NULL)
                return NULL;
            p = skip_ws(p, end);
            if (p == end || *p != ':')
                return fail(s, p, "expected ':' after the key");
            p = skip_ws(p + 1, end);
            if ((p = scan_value(s, p, depth, &c)) == NULL)
                return NULL;
            count = count_up(count);
            p = skip_ws(p, end);
            if (p == end)
                return fail(s, p, "unexpected end of input: expected ',' or '}'");
            if (*p == '}') {
                p++;
                break;
            }
            if (*p != ',')
                return fail(s, p, "expected ',' or '}'");
            p = skip_ws(p + 1, end);
            if (p < end && *p == '}')
                return fail(s, p, "trailing comma before '}'");
        }
    }
    v->type = PDR_JT_OBJECT;
    v->count = count;
    return p;
}

static const char *scan_literal(scan_t *s, const char *p, const char *word, size_t n)
{
    if ((size_t)(s->end - p) < n || memcmp(p, word, n) != 0)
        return fail(s, p,
                    "invalid literal (expected a value: true, false, null, number, string, array or "
                    "object)");
    return p + n;
}

/* p is at the first byte of a value (whitespace skipped); depth is that of the enclosing container. */
static const char *scan_value(scan_t *s, const char *p, int depth, pdr_jval_t *v)
{
    const char *q;
    int escaped = 0;
    v->elem = PDR_JT_NONE;
    v->elem_elem = PDR_JT_NONE;
    v->empty_inner = 0;
    v->count = 0;
    v->p = p;
    if (p == s->end)
        return fail(s, p, "unexpected end of input: expected a value");
    switch (*p) {
    case '"':
        v->type = PDR_JT_STRING;
        q = scan_string(s, p + 1, &escaped);
        break;
    case '{':
        q = scan_nested_object(s, p, depth + 1, v);
        break;
    case '[':
        q = scan_array(s, p, depth + 1, v);
        break;
    case 't':
        v->type = PDR_JT_TRUE;
        q = scan_literal(s, p, "true", 4);
        break;
    case 'f':
        v->type = PDR_JT_FALSE;
        q = scan_literal(s, p, "false", 5);
        break;
    case 'n':
        v->type = PDR_JT_NULL;
        q = scan_literal(s, p, "null", 4);
        break;
    case '-':
    case '0':
    case '1':
    case '2':
    case '3':
    case '4':
    case '5':
    case '6':
    case '7':
    case '8':
    case '9':
        q = scan_number(s, p, &v->type);
        break;
    case ']':
    case '}':
    case ',':
        return fail(s, p, "expected a value");
    default:
        return fail(s, p, "expected a value (true, false, null, number, string, array or object)");
    }
    if (q != NULL)
        v->len = (size_t)(q - p);
    return q;
}

/* ---- Decoded keys: iteration, hashing, comparison. Keys have been validated before any of this. ---- */

typedef struct {
    const unsigned char *p, *end;
    unsigned char buf[4];
    unsigned nbuf, ibuf;
} key_iter_t;

static void key_iter_init(key_iter_t *it, const pdr_jmember_t *m)
{
    it->p = (const unsigned char *)m->key;
    it->end = it->p + m->key_len;
    it->nbuf = it->ibuf = 0;
}

/* The next byte of the decoded (UTF-8) key, or -1 at its end. */
static int key_iter_next(key_iter_t *it)
{
    if (it->ibuf < it->nbuf)
        return it->buf[it->ibuf++];
    if (it->p == it->end)
        return -1;
    unsigned c = *it->p;
    if (c != '\\') {
        it->p++;
        return (int)c;
    }
    c = it->p[1];
    it->p += 2;
    switch (c) {
    case 'b':
        return '\b';
    case 'f':
        return '\f';
    case 'n':
        return '\n';
    case 'r':
        return '\r';
    case 't':
        return '\t';
    case 'u':
        break;
    default:
        return (int)c; /* '"', '\\' or '/' */
    }
    uint32_t cp = (uint32_t)hex4((const char *)it->p);
    it->p += 4;
    if (cp >= 0xd800 && cp <= 0xdbff) {
        cp = 0x10000 + ((cp - 0xd800) << 10) + ((uint32_t)hex4((const char *)it->p + 2) - 0xdc00);
        it->p += 6;
    }
    if (cp < 0x80)
        return (int)cp;
    it->ibuf = 1;
    if (cp < 0x800) {
        it->buf[1] = (unsigned char)(0x80 | (cp & 0x3f));
        it->nbuf = 2;
        return (int)(0xc0 | (cp >> 6));
    }
    if (cp < 0x10000) {
        it->buf[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        it->buf[2] = (unsigned char)(0x80 | (cp & 0x3f));
        it->nbuf = 3;
        return (int)(0xe0 | (cp >> 12));
    }
    it->buf[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
    it->buf[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
    it->buf[3] = (unsigned char)(0x80 | (cp & 0x3f));
    it->nbuf = 4;
    return (int)(0xf0 | (cp >> 18));
}

/* FNV-1a (64-bit) of the decoded key. */
static uint64_t key_hash(const pdr_jmember_t *m)
{
    uint64_t h = 0xcbf29ce484222325ull;
    if (!m->key_escaped) {
        const unsigned char *p = (const unsigned char *)m->key, *end = p + m->key_len;
        while (p < end)
            h = (h ^ *p++) * 0x100000001b3ull;
        return h;
    }
    key_iter_t it;
    int c;
    key_iter_init(&it, m);
    while ((c = key_iter_next(&it)) >= 0)
        h = (h ^ (unsigned)c) * 0x100000001b3ull;
    return h;
}

static int keys_equal(const pdr_jmember_t *a, const pdr_jmember_t *b)
{
    if (!a->key_escaped && !b->key_escaped)
        return a->key_len == b->key_len && memcmp(a->key, b->key, a->key_len) == 0;
    key_iter_t ia, ib;
    int ca, cb;
    key_iter_init(&ia, a);
    key_iter_init(&ib, b);
    do {
        ca = key_iter_next(&ia);
        cb = key_iter_next(&ib);
        if (ca != cb)
            return 0;
    } while (ca >= 0);
    return 1;
}

int pdr_jmember_key_is(const pdr_jmember_t *m, const char *name)
{
    if (!m->key_escaped) {
        size_t n = strlen(name);
        return n == m->key_len && memcmp(m->key, name, n) == 0;
    }
    key_iter_t it;
    int c;
    key_iter_init(&it, m);
    while ((c = key_iter_next(&it)) >= 0) {
        if (*name == '\0' || (unsigned char)*name != (unsigned)c)
            return 0;
        name++;
    }
    return *name == '\0';
}

/*
 * ---- Duplicate detection for top-level keys. Up to SMALL_MEMBERS members: a linear scan of their hashes
 * on the stack (nothing to clear per call); past that, one heap table with open addressing. ----
 */

enum { SMALL_MEMBERS = 32 };

typedef struct {
    uint64_t hash;
    uint32_t idx1; /* member index + 1; 0 marks an empty slot */
} key_slot_t;

typedef struct {
    key_slot_t *slots; /* NULL while small[] is in use */
    size_t mask;
    uint64_t small[SMALL_MEMBERS];
} key_table_t;

/* Returns 1 when an earlier member has the same key as member i, else records member i and returns 0. */
static int key_table_insert(key_table_t *t, const pdr_jmember_t *members, size_t i, uint64_t h)
{
    if (t->slots == NULL) {
        for (size_t j = 0; j < i; j++)
            if (t->small[j] == h && keys_equal(&members[j], &members[i]))
                return 1;
        t->small[i] = h;
        return 0;
    }
    size_t pos = (size_t)h & t->mask;
    while (t->slots[pos].idx1 != 0) {
        const key_slot_t *e = &t->slots[pos];
        if (e->hash == h && keys_equal(&members[e->idx1 - 1], &members[i]))
            return 1;
        pos = (pos + 1) & t->mask;
    }
    t->slots[pos].hash = h;
    t->slots[pos].idx1 = (uint32_t)i + 1;
    return 0;
}

/*
 * Moves to a heap table when member SMALL_MEMBERS + 1 arrives. Sized once for the most members the
 * document can hold (each takes at least 4 bytes: "":0,) or max, whichever is less, at load factor
 * <= 1/2, so it never grows again.
 */
static int key_table_grow(key_table_t *t, size_t n, size_t max, size_t len)
{
    size_t bound = len / 4 + 1, cap = 4 * SMALL_MEMBERS;
    if (max < bound)
        bound = max;
    while (cap < 2 * bound)
        cap *= 2;
    key_slot_t *slots = calloc(cap, sizeof(*slots));
    if (slots == NULL)
        return PDR_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        size_t pos = (size_t)t->small[i] & (cap - 1);
        while (slots[pos].idx1 != 0)
            pos = (pos + 1) & (cap - 1);
        slots[pos].hash = t->small[i];
        slots[pos].idx1 = (uint32_t)i + 1;
    }
    t->slots = slots;
    t->mask = cap - 1;
    return 0;
}

/* Writes "duplicate key '...' at byte N" with at most 64 bytes of the raw key, cut on a UTF-8 boundary. */
static void report_duplicate(scan_t *s, const pdr_jmember_t *m)
{
    size_t shown = m->key_len, off = (size_t)(m->raw - s->start);
    const char *more = "";
    if (shown > 64) {
        shown = 64;
        while (shown > 0 && ((unsigned char)m->key[shown] & 0xc0) == 0x80)
            shown--;
        more = "...";
    }
    if (s->errlen > 0)
        snprintf(s->err, s->errlen, "duplicate key '%.*s%s' at byte %zu", (int)shown, m->key, more, off);
}

static const char *type_of_first_byte(char c)
{
    switch (c) {
    case '[':
        return "an array";
    case '"':
        return "a string";
    case 't':
    case 'f':
        return "a boolean";
    case 'n':
        return "null";
    default:
        return is_digit(c) || c == '-' ? "a number" : "not JSON";
    }
}

int pdr__json_scan_object(const char *p, size_t len, pdr_jmember_t *out, size_t max, size_t *n, char *err,
                          size_t errlen, int full_rc)
{
    scan_t s;
    key_table_t t;
    size_t count = 0;
    int rc = PDR_EINVAL;

    *n = 0;
    if (errlen > 0)
        err[0] = '\0';
    if (len == 0) {
        if (errlen > 0)
            snprintf(err, errlen, "empty request body: expected a JSON object");
        return PDR_EINVAL;
    }
    s.start = p;
    s.end = p + len;
    s.err = err;
    s.errlen = errlen;
    const char *q = skip_ws(p, s.end);
    if (q == s.end) {
        if (errlen > 0)
            snprintf(err, errlen, "empty request body (only whitespace): expected a JSON object");
        return PDR_EINVAL;
    }
    if (*q != '{') {
        if (errlen > 0)
            snprintf(err, errlen,
                     "malformed JSON at byte %zu: the request body must be a JSON object (found %s)",
                     (size_t)(q - p), type_of_first_byte(*q));
        return PDR_EINVAL;
    }

    t.slots = NULL;
    t.mask = 0;
    q = skip_ws(q + 1, s.end);
    if (q < s.end && *q == '}') {
        q++;
    } else {
        for (;;) {
            int escaped = 0;
            if (q == s.end) {
                fail(&s, q, "unexpected end of input: expected a string key");
                goto done;
            }
            if (*q != '"') {
                fail(&s, q, "expected a string key");
                goto done;
            }
            if (count == max) {
                snprintf(err, errlen, "too many top-level fields (at most %zu) at byte %zu", max,
                         (size_t)(q - p));
                rc = full_rc;
                goto done;
            }
            pdr_jmember_t *m = &out[count];
            m->raw = q;
            m->key = q + 1;
            if ((q = scan_string(&s, q + 1, &escaped)) == NULL)
                goto done;
            m->key_len = (size_t)(q - 1 - m->key);
            m->key_escaped = escaped;
            q = skip_ws(q, s.end);
            if (q == s.end || *q != ':') {
                fail(&s, q, "expected ':' after the key");
                goto done;
            }
            q = skip_ws(q + 1, s.end);
            if ((q = scan_value(&s, q, 1, &m->v)) == NULL)
                goto done;
            m->raw_len = (size_t)(q - m->raw);
            if (count == SMALL_MEMBERS && key_table_grow(&t, count, max, len) != 0) {
                if (errlen > 0)
                    snprintf(err, errlen, "out of memory checking %zu top-level keys", count + 1);
                rc = PDR_ENOMEM;
                goto done;
            }
            if (key_table_insert(&t, out, count, key_hash(m))) {
                report_duplicate(&s, m);
                goto done;
            }
            count++;
            q = skip_ws(q, s.end);
            if (q == s.end) {
                fail(&s, q, "unexpected end of input: expected ',' or '}'");
                goto done;
            }
            if (*q == '}') {
                q++;
                break;
            }
            if (*q != ',') {
                fail(&s, q, "expected ',' or '}'");
                goto done;
            }
            q = skip_ws(q + 1, s.end);
            if (q < s.end && *q == '}') {
                fail(&s, q, "trailing comma before '}'");
                goto done;
            }
        }
    }
    q = skip_ws(q, s.end);
    if (q != s.end) {
        fail(&s, q, "unexpected data after the top-level object");
        goto done;
    }
    *n = count;
    rc = 0;
done:
    free(t.slots);
    return rc;
}

int pdr_jval_int(const pdr_jval_t *v, int64_t *out)
{
    const char *p = v->p, *end = v->p + v->len;
    int neg = 0;
    uint64_t acc = 0, limit;
    if (v->type != PDR_JT_INT || v->len == 0)
        return PDR_EINVAL;
    if (*p == '-') {
        neg = 1;
        p++;
    }
    limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    if (p == end)
        return PDR_EINVAL;
    for (; p < end; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (d > 9 || acc > (limit - d) / 10)
            return PDR_EINVAL;
        acc = acc * 10 + d;
    }
    if (neg)
        *out = acc == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)acc;
    else
        *out = (int64_t)acc;
    return 0;
}

/* The first byte of the next element or member of a container being walked, or NULL at its end. */
static const char *walk_next(const pdr_jval_t *c, size_t *pos, char close)
{
    const char *end = c->p + c->len;
    const char *p = skip_ws(c->p + (*pos == 0 ? 1 : *pos), end);
    if (p < end && *p == ',')
        p = skip_ws(p + 1, end);
    return p < end && *p != close ? p : NULL;
}

int pdr_jarray_next(const pdr_jval_t *arr, size_t *pos, pdr_jval_t *elem)
{
    scan_t s = {arr->p, arr->p + arr->len, NULL, 0};
    const char *p = arr->type == PDR_JT_ARRAY ? walk_next(arr, pos, ']') : NULL;
    if (p == NULL || (p = scan_value(&s, p, 1, elem)) == NULL)
        return 0;
    *pos = (size_t)(p - arr->p);
    return 1;
}

int pdr_jobject_next(const pdr_jval_t *obj, size_t *pos, pdr_jmember_t *m)
{
    scan_t s = {obj->p, obj->p + obj->len, NULL, 0};
    const char *p = obj->type == PDR_JT_OBJECT ? walk_next(obj, pos, '}') : NULL;
    int escaped = 0;
    if (p == NULL || *p != '"')
        return 0;
    m->raw = p;
    m->key = p + 1;
    if ((p = scan_string(&s, p + 1, &escaped)) == NULL)
        return 0;
    m->key_len = (size_t)(p - 1 - m->key);
    m->key_escaped = escaped;
    p = skip_ws(p, s.end);
    if (p == s.end || *p != ':')
        return 0;
    if ((p = scan_value(&s, skip_ws(p + 1, s.end), 1, &m->v)) == NULL)
        return 0;
    m->raw_len = (size_t)(p - m->raw);
    *pos = (size_t)(p - obj->p);
    return 1;
}

const char *pdr_jt_name(int type)
{
    static const char *const names[] = {"none",   "null",   "true",  "false",  "integer",
                                        "number", "string", "array", "object", "mixed"};
    if (type < 0 || type >= (int)(sizeof(names) / sizeof(names[0])))
        return "unknown";
    return names[type];
}
