/*
 * The byte scans of the upstream response parser (h1parse.c): the classes of head bytes (control
 * characters, tchars, whitespace), a line's end found sixteen bytes at a time with SSE2 (every x86-64
 * has it) or eight at a time with word arithmetic elsewhere (and where PDR_H1_SCALAR is defined, which
 * the tests use to run both), a header name's ':' and its comparison with a literal a word at a time.
 * Pure functions of their arguments, inline: they run for every line of every answer of a worker.
 */
#ifndef PDR_H1SCAN_H
#define PDR_H1SCAN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__) && !defined(PDR_H1_SCALAR)
#include <emmintrin.h>
#endif

static inline int is_ows(char c)
{
    return c == ' ' || c == '\t';
}

/* Whether c may not appear in a head line: a control character other than HT, or DEL. */
static inline int is_ctl(unsigned char c)
{
    return (c < 0x20 && c != '\t') || c == 0x7f;
}

/* RFC 9110 tchar: a table, since every byte of every header name is checked. */
static const unsigned char tchar_tab[256] = {
    ['a' ... 'z'] = 1, ['A' ... 'Z'] = 1, ['0' ... '9'] = 1, ['!'] = 1, ['#'] = 1, ['$'] = 1,
    ['%'] = 1,         ['&'] = 1,         ['\''] = 1,        ['*'] = 1, ['+'] = 1, ['-'] = 1,
    ['.'] = 1,         ['^'] = 1,         ['_'] = 1,         ['`'] = 1, ['|'] = 1, ['~'] = 1,
};

static inline int is_tchar(unsigned char c)
{
    return tchar_tab[c];
}

static inline int lower(unsigned char c)
{
    return c | (((unsigned)c - (unsigned)'A' < 26u) << 5); /* ASCII letters only: 'A'..'Z' gain bit 5 */
}

/*
 * Whether the n >= 8 bytes at s (bytes of a head line: no control character) are the literal lit
 * (lower-case letters and '-'), ignoring case. Eight bytes at a time, the last word overlapping the one
 * before: setting bit 5 maps 'A'..'Z' to 'a'..'z' and keeps '-' and lower-case letters as they are; of
 * the other bytes only CR (a control character) becomes one of them ('-') that way.
 */
static inline int name_is8(const char *s, const char *lit, size_t n)
{
    const uint64_t bit5 = UINT64_C(0x2020202020202020);
    uint64_t a, b;
    for (size_t i = 0; i + 8 < n; i += 8) {
        memcpy(&a, s + i, 8);
        memcpy(&b, lit + i, 8);
        if ((a | bit5) != b)
            return 0;
    }
    memcpy(&a, s + n - 8, 8);
    memcpy(&b, lit + n - 8, 8);
    return (a | bit5) == b;
}
#define NAME_IS(s, lit) name_is8(s, lit, sizeof(lit) - 1)

/* The length of the run of tchars at l, which ends before a byte that is not one (there always is). */
static inline size_t tchar_run(const char *l)
{
    const unsigned char *u = (const unsigned char *)l;
    size_t k = 0;
    while (is_tchar(u[k]))
        k++;
    return k;
}

#if defined(__SSE2__) && !defined(PDR_H1_SCALAR)
/*
 * The offset of the first byte of s[0, n) that is_ctl() takes, or n when there is none. Sixteen bytes at
 * a time (SSE2, which every x86-64 has): a byte is marked when it is at most 0x1f (its unsigned minimum
 * with 0x1f is itself) or DEL; HT is marked too and passed over where it is found, since it is rare in a
 * head. The last block overlaps the one before it: what it sees again was passed over already.
 * *colons: bit k set when s[k] is ':', for k < 16 (a header name's end is found in the same pass, since
 * most names are shorter); 0 when the first block held none or was not read that way.
 */
static inline size_t find_ctl(const unsigned char *s, size_t n, unsigned *colons)
{
    const __m128i c1f = _mm_set1_epi8(0x1f), del = _mm_set1_epi8(0x7f);
    size_t i = 0;
    *colons = 0;
    if (n < 16) {
        while (i < n && !is_ctl(s[i]))
            i++;
        return i;
    }
    __m128i v = _mm_loadu_si128((const __m128i *)(const void *)s);
    *colons = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(':')));
    for (;;) {
        __m128i m = _mm_or_si128(_mm_cmpeq_epi8(_mm_min_epu8(v, c1f), v), _mm_cmpeq_epi8(v, del));
        unsigned bits = (unsigned)_mm_movemask_epi8(m);
        while (bits != 0) {
            size_t k = i + (size_t)__builtin_ctz(bits);
            if (s[k] != '\t')
                return k;
            bits &= bits - 1;
        }
        i += 16;
        if (i + 16 > n) {
            if (i == n)
                return n;
            i = n - 16; /* the last block overlaps the one before */
        }
        v = _mm_loadu_si128((const __m128i *)(const void *)(s + i));
    }
}
#else
/*
 * The offset of the first byte of s[0, n) that is_ctl() takes, or n when there is none. Eight bytes at a
 * time: a word is looked at byte by byte only when it holds a byte below 0x20 or a DEL (the "has a byte
 * less than" and "has a zero byte" bit tricks, exact for whether any byte matches). *colons is 0: the
 * caller looks for a name's end itself.
 */
static inline size_t find_ctl(const unsigned char *s, size_t n, unsigned *colons)
{
    *colons = 0;
    const uint64_t ones = UINT64_C(0x0101010101010101), high = UINT64_C(0x8080808080808080);
    size_t i = 0;
    while (i + 8 <= n) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        uint64_t del = w ^ (ones * 0x7f);
        uint64_t m = (((w - ones * 0x20) & ~w) | ((del - ones) & ~del)) & high;
        if (m == 0) {
            i += 8;
            continue;
        }
        /* The lowest marked byte matches (a borrow marks only bytes above a match); on a little-endian
         * machine it is the first in memory. */
        size_t k = i + (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? (size_t)__builtin_ctzll(m) / 8 : 0);
        while (k < i + 8 && !is_ctl(s[k]))
            k++;
        if (k < i + 8)
            return k;
        i += 8;
    }
    for (; i < n; i++)
        if (is_ctl(s[i]))
            return i;
    return n;
}
#endif

/*
 * The offset of the first ':' in l[0, avail), or avail when there is none: memchr, with SSE2 sixteen bytes
 * at a time inline where the input holds them (a header name is short: a call costs more than the scan).
 */
static inline size_t colon_at(const char *l, size_t avail)
{
    size_t k = 0;
#if defined(__SSE2__) && !defined(PDR_H1_SCALAR)
    const __m128i colon = _mm_set1_epi8(':');
    for (; k + 16 <= avail; k += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(l + k));
        unsigned bits = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, colon));
        if (bits != 0)
            return k + (size_t)__builtin_ctz(bits);
    }
#endif
    const char *c = memchr(l + k, ':', avail - k);
    return c != NULL ? (size_t)(c - l) : avail;
}

#endif
