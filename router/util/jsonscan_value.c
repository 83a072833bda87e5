/*
 * The grammar of the single-pass JSON scanner, below jsonscan.c (the scanner's public side) and calling
 * nothing of it: strict RFC 8259 validation and typing of any value (strings, numbers, literals, arrays
 * with their element shape, nested objects), declared in jsonscan_internal.h. The top-level object, its
 * member records, the duplicate-key check, the walkers, pdr_jval_int and pdr_jt_name are jsonscan.c's.
 *
 * Invariants: the input is never written and never read past p + len (it need not be NUL-terminated);
 * recursion is bounded by PDR_JSON_MAX_DEPTH; nothing here allocates. Reentrant, any thread.
 *
 * Speed: string bodies, which carry almost all the bytes of a prompt, are skipped 16 bytes at a time
 * with SSE2 (baseline on x86-64) and UTF-8 is decoded only where a byte >= 0x80 appears.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "err.h"
#include "jsonscan_internal.h"

/* Records a syntax error at `at` and returns NULL, so that callers can `return pdr__json_fail(...)`. */
const char *pdr__json_fail(scan_t *s, const char *at, const char *what)
{
    if (s->errlen > 0)
        snprintf(s->err, s->errlen, "malformed JSON at byte %zu: %s", (size_t)(at - s->start), what);
    return NULL;
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
    return pdr__json_fail(s, p, "invalid UTF-8 in string");
}

/* Validates the escape at p (*p == '\\') and returns the byte after it. */
static const char *scan_escape(scan_t *s, const char *p)
{
    size_t avail = (size_t)(s->end - p);
    if (avail < 2)
        return pdr__json_fail(s, p, "unexpected end of input in a string");
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
            return pdr__json_fail(s, p, "invalid \\u escape (expected 4 hex digits)");
        if (cp >= 0xdc00 && cp <= 0xdfff)
            return pdr__json_fail(s, p, "invalid \\u escape: lone low surrogate");
        if (cp < 0xd800 || cp > 0xdbff)
            return p + 6;
        if (avail < 12 || p[6] != '\\' || p[7] != 'u')
            return pdr__json_fail(s, p, "invalid \\u escape: high surrogate not followed by a low surrogate");
        cp = hex4(p + 8);
        if (cp < 0)
            return pdr__json_fail(s, p + 6, "invalid \\u escape (expected 4 hex digits)");
        if (cp < 0xdc00 || cp > 0xdfff)
            return pdr__json_fail(s, p, "invalid \\u escape: high surrogate not followed by a low surrogate");
        return p + 12;
    }
    default:
        return pdr__json_fail(s, p, "invalid escape in string");
    }
}

/*
 * p is just past the opening quote. Returns the byte after the closing quote, or NULL. Sets *escaped
 * when the body holds a backslash escape.
 */
const char *pdr__json_scan_string(scan_t *s, const char *p, int *escaped)
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
            return pdr__json_fail(s, p, "unexpected end of input in a string");
        unsigned char c = (unsigned char)*p;
        if (c == '"')
            return p + 1;
        if (c == '\\') {
            *escaped = 1;
            p = scan_escape(s, p);
        } else if (c < 0x20) {
            return pdr__json_fail(s, p, "control character in string (must be escaped)");
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
        return pdr__json_fail(s, p, "invalid number: expected a digit");
    if (*p == '0') {
        p++;
        if (p < end && is_digit(*p))
            return pdr__json_fail(s, p - 1, "invalid number: leading zeros are not allowed");
    } else {
        while (p < end && is_digit(*p))
            p++;
    }
    *type = PDR_JT_INT;
    if (p < end && *p == '.') {
        p++;
        if (p == end || !is_digit(*p))
            return pdr__json_fail(s, p, "invalid number: expected a digit after '.'");
        while (p < end && is_digit(*p))
            p++;
        *type = PDR_JT_NUMBER;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if (p == end || !is_digit(*p))
            return pdr__json_fail(s, p, "invalid number: expected a digit in the exponent");
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

/* p is at '['; depth is the array's own depth. */
static const char *scan_array(scan_t *s, const char *p, int depth, pdr_jval_t *v)
{
    const char *end = s->end;
    uint8_t elem = PDR_JT_NONE, elem_elem = PDR_JT_NONE, empty_inner = 0;
    uint32_t count = 0;
    if (depth > PDR_JSON_MAX_DEPTH)
        return pdr__json_fail(s, p, "nesting deeper than 128 levels");
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
                if ((p = pdr__json_scan_value(s, p, depth, &c)) == NULL)
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
                return pdr__json_fail(s, p, "unexpected end of input: expected ',' or ']'");
            if (*p == ']') {
                p++;
                break;
            }
            if (*p != ',')
                return pdr__json_fail(s, p, "expected ',' or ']'");
            p = skip_ws(p + 1, end);
            if (p < end && *p == ']')
                return pdr__json_fail(s, p, "trailing comma before ']'");
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
        return pdr__json_fail(s, p, "nesting deeper than 128 levels");
    p = skip_ws(p + 1, end);
    if (p < end && *p == '}') {
        p++;
    } else {
        for (;;) {
            pdr_jval_t c;
            int escaped = 0;
            if (p == end)
                return pdr__json_fail(s, p, "unexpected end of input: expected a string key");
            if (*p != '"')
                return pdr__json_fail(s, p, "expected a string key");
            if ((p = pdr__json_scan_string(s, p + 1, &escaped)) == NULL)
                return NULL;
            p = skip_ws(p, end);
            if (p == end || *p != ':')
                return pdr__json_fail(s, p, "expected ':' after the key");
            p = skip_ws(p + 1, end);
            if ((p = pdr__json_scan_value(s, p, depth, &c)) == NULL)
                return NULL;
            count = count_up(count);
            p = skip_ws(p, end);
            if (p == end)
                return pdr__json_fail(s, p, "unexpected end of input: expected ',' or '}'");
            if (*p == '}') {
                p++;
                break;
            }
            if (*p != ',')
                return pdr__json_fail(s, p, "expected ',' or '}'");
            p = skip_ws(p + 1, end);
            if (p < end && *p == '}')
                return pdr__json_fail(s, p, "trailing comma before '}'");
        }
    }
    v->type = PDR_JT_OBJECT;
    v->count = count;
    return p;
}

static const char *scan_literal(scan_t *s, const char *p, const char *word, size_t n)
{
    if ((size_t)(s->end - p) < n || memcmp(p, word, n) != 0)
        return pdr__json_fail(
            s, p,
            "invalid literal (expected a value: true, false, null, number, string, array or "
            "object)");
    return p + n;
}

/* p is at the first byte of a value (whitespace skipped); depth is that of the enclosing container. */
const char *pdr__json_scan_value(scan_t *s, const char *p, int depth, pdr_jval_t *v)
{
    const char *q;
    int escaped = 0;
    v->elem = PDR_JT_NONE;
    v->elem_elem = PDR_JT_NONE;
    v->empty_inner = 0;
    v->count = 0;
    v->p = p;
    if (p == s->end)
        return pdr__json_fail(s, p, "unexpected end of input: expected a value");
    switch (*p) {
    case '"':
        v->type = PDR_JT_STRING;
        q = pdr__json_scan_string(s, p + 1, &escaped);
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
        return pdr__json_fail(s, p, "expected a value");
    default:
        return pdr__json_fail(s, p, "expected a value (true, false, null, number, string, array or object)");
    }
    if (q != NULL)
        v->len = (size_t)(q - p);
    return q;
}
