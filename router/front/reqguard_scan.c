/*
 * One pass over a client's HTTP/1 request head as it arrives (see reqguard.h, pdr_reqguard_scan): the
 * head's length and framing, the router's limits on its size, the smuggling checks, whether h2o's own
 * parser (picohttpparser) would refuse it, and its Content-Length, from a single walk line by line. The
 * separate functions of reqguard.c define each verdict; this pass gives the same ones (the unit tests and
 * the fuzz target compare them, and compare the parser's verdict with the parser's own), for the
 * connection's read callback, which runs on every read of a head. Pure: no I/O, no allocation.
 */
#include <string.h>
#include "reqguard.h"

/* h2o 2.2.5 parses at most this many header lines (H2O_MAX_HEADERS); one more is a parse error. */
#define PARSER_MAX_FIELDS 100

/* tchar (RFC 9110 section 5.6.2): the bytes a field name may have, for h2o's parser. */
#define T1(c) [(unsigned char)(c)] = 1
#define T8(c) T1(c), T1((c) + 1), T1((c) + 2), T1((c) + 3), T1((c) + 4), T1((c) + 5), T1((c) + 6), T1((c) + 7)
static const unsigned char TCHAR[256] = {
    T8('0'), T1('8'), T1('9'), T8('A'), T8('I'), T8('Q'), T1('Y'), T1('Z'), T8('a'),  T8('i'),
    T8('q'), T1('y'), T1('z'), T1('!'), T1('#'), T1('$'), T1('%'), T1('&'), T1('\''), T1('*'),
    T1('+'), T1('-'), T1('.'), T1('^'), T1('_'), T1('`'), T1('|'), T1('~'),
};

enum { PARSE_OK = 0, PARSE_BAD };

/* A byte h2o's parser refuses in a value or the request line: a control character (HT aside) or DEL. */
static int ctl(unsigned char b)
{
    return (b < 0x20 && b != '\t') || b == 0x7f;
}

#define ONES 0x0101010101010101ull
#define HIGH 0x8080808080808080ull

/* Eight bytes of s as one word, in memory order. */
static uint64_t load8(const char *s)
{
    uint64_t w;
    memcpy(&w, s, 8);
    return w;
}

/* The index of the first byte (in memory order) whose high bit is set in m, m not 0. */
static size_t first_flagged(uint64_t m)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return (size_t)__builtin_clzll(m) / 8;
#else
    return (size_t)__builtin_ctzll(m) / 8;
#endif
}

/* Flags (high bit) each byte of w below 0x20 or equal to 0x7f. A borrow runs only from a flagged byte
 * to the bytes after it, so the first flagged byte is exact; later ones may not be. */
static uint64_t ctl_or_ht(uint64_t w)
{
    uint64_t x = w ^ (0x7f * ONES);
    return (((w - 0x20 * ONES) & ~w) | ((x - ONES) & ~x)) & HIGH;
}

/* Sixteen bytes at a time where sixteen remain (GCC's and clang's vector extension, SSE2 or NEON code):
 * each comparison gives 0xff or 0 per byte, exactly, and the first marked byte is found in the mask's two
 * words. */
typedef uint8_t v16_t __attribute__((vector_size(16)));

static v16_t load16(const char *s)
{
    v16_t v;
    memcpy(&v, s, 16);
    return v;
}

static v16_t splat(uint8_t b)
{
    return (v16_t){b, b, b, b, b, b, b, b, b, b, b, b, b, b, b, b};
}

/* The index of the first byte of m that is not 0, or 16. */
static size_t first_marked(v16_t m)
{
    uint64_t lo, hi;
    memcpy(&lo, &m, 8);
    memcpy(&hi, (const char *)&m + 8, 8);
    if (lo != 0)
        return first_flagged(lo & HIGH);
    return hi != 0 ? 8 + first_flagged(hi & HIGH) : 16;
}

/* The index of the first byte of s[0, n) that ctl() refuses, or n. Eight bytes at a time: the first
 * flagged byte of a word is looked at, and the walk goes on after it when it is HT. */
static inline __attribute__((always_inline)) size_t first_ctl(const char *s, size_t n)
{
    size_t i = 0;
    while (i + 16 <= n) {
        v16_t v = load16(s + i);
        size_t f = first_marked((v16_t)(v < splat(0x20)) | (v16_t)(v == splat(0x7f)));
        if (f == 16) {
            i += 16;
            continue;
        }
        i += f;
        if (s[i] != '\t')
            return i;
        i++;
    }
    while (i + 8 <= n) {
        uint64_t m = ctl_or_ht(load8(s + i));
        if (m == 0) {
            i += 8;
            continue;
        }
        i += first_flagged(m);
        if (s[i] != '\t')
            return i;
        i++;
    }
    for (; i < n; i++)
        if (ctl((unsigned char)s[i]))
            return i;
    return n;
}

/* 1 when s[0, n) has a byte ctl() refuses. */
static int has_ctl(const char *s, size_t n)
{
    return first_ctl(s, n) < n;
}

/* Flags each byte of w that is not a letter, a digit or '-' (the bytes of most field names). Exact for
 * every byte: the sums work on seven-bit bytes, which cannot carry into the next. */
static uint64_t not_name_byte(uint64_t w)
{
    uint64_t x = w & ~HIGH, l = x | (0x20 * ONES), d = x ^ ('-' * ONES);
    uint64_t letter = (l + (0x80 - 'a') * ONES) & ~(l + (0x7f - 'z') * ONES);
    uint64_t digit = (x + (0x80 - '0') * ONES) & ~(x + (0x7f - '9') * ONES);
    uint64_t dash = ~(d + 0x7f * ONES);
    return ~((letter | digit | dash) & ~w) & HIGH;
}

/* The end of the run of tchars that starts at s[i], within s[0, n). */
static size_t name_end(const char *s, size_t i, size_t n)
{
    for (;;) {
        size_t f, step;
        if (i + 16 <= n) {
            v16_t v = load16(s + i), l = v | splat(0x20);
            v16_t good = (v16_t)((v16_t)(l - splat('a')) < splat(26)) |
                         (v16_t)((v16_t)(v - splat('0')) < splat(10)) | (v16_t)(v == splat('-'));
            f = first_marked(~good);
            step = 16;
        } else if (i + 8 <= n) {
            uint64_t m = not_name_byte(load8(s + i));
            f = m != 0 ? first_flagged(m) : 8;
            step = 8;
        } else {
            break;
        }
        i += f;
        if (f < step)
            break;
    }
    while (i < n && TCHAR[(unsigned char)s[i]])
        i++;
    return i;
}

/* Letter bytes of the lower-case word l, as the case bit (0x20) of each: the seven-bit range sums cannot
 * carry from one byte into the next. */
static uint64_t letter_bits(uint64_t l)
{
    return (((l + (0x80 - 'a') * ONES) & ~(l + (0x7f - 'z') * ONES)) & HIGH) >> 2;
}

/* 1 when s[0, n) is lower (all lower case) in any case: ASCII letters only are folded. A word at a time
 * from eight bytes on (the last word overlaps the one before it). */
static int same_name(const char *s, const char *lower, size_t n)
{
    if (n >= 8) {
        for (size_t i = 0;; i += 8) {
            size_t at = i + 8 <= n ? i : n - 8;
            uint64_t l = load8(lower + at);
            if ((load8(s + at) | letter_bits(l)) != l)
                return 0;
            if (at + 8 == n)
                return 1;
        }
    }
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c >= 'A' && c <= 'Z')
            c = (char)(c - 'A' + 'a');
        if (c != lower[i])
            return 0;
    }
    return 1;
}

/* The value of a line that starts "content-length:" (any case), from its byte after the colon: -1 when it
 * has no digits, INT64_MAX past 18 of them. */
static int64_t length_value(const char *s, const char *end)
{
    while (s < end && (*s == ' ' || *s == '\t'))
        s++;
    int64_t v = 0;
    size_t digits = 0;
    for (; s < end && *s >= '0' && *s <= '9' && digits < 18; s++, digits++)
        v = v * 10 + (*s - '0');
    if (digits == 0)
        return -1;
    return s < end && *s >= '0' && *s <= '9' ? INT64_MAX : v;
}

/* The first index from i of a byte in s[0, n) that ends a token of the request line (a space, a control
 * byte, HT included, or DEL), or n. Eight bytes at a time: the first flagged byte of a word is exact. */
static size_t token_end(const char *s, size_t i, size_t n)
{
    for (; i + 8 <= n; i += 8) {
        uint64_t w = load8(s + i), x = w ^ (0x7f * ONES);
        uint64_t m = (((w - 0x21 * ONES) & ~w) | ((x - ONES) & ~x)) & HIGH;
        if (m != 0)
            return i + first_flagged(m);
    }
    for (; i < n; i++)
        if ((unsigned char)s[i] <= 0x20 || s[i] == 0x7f)
            return i;
    return n;
}

/* The request line line[0, len) (without its CRLF) as h2o's parser reads it: a method and a target,
 * each ended by one space, without control bytes (HT included) or DEL, then "HTTP/1." and a digit that
 * end the line. The parser skips at most one empty line before it (p[0, pre): the bytes skipped). (It
 * also waits for more bytes while fewer than nine follow the target; a head that passes the smuggling
 * checks always has them: a Host line or a version of 8 bytes, and the empty line.) */
static int parse_request_line(const char *line, size_t len, const char *p, size_t pre)
{
    if (!(pre == 0 || (pre == 1 && p[0] == '\n') || (pre == 2 && p[0] == '\r' && p[1] == '\n')))
        return PARSE_BAD;
    size_t i = 0;
    for (int token = 0; token < 2; token++) {
        i = token_end(line, i, len);
        if (i == len || line[i] != ' ')
            return PARSE_BAD; /* a control byte, or the line's CR ends the token */
        i++;
    }
    if (len - i != 8 || memcmp(line + i, "HTTP/1.", 7) != 0 || line[i + 7] < '0' || line[i + 7] > '9')
        return PARSE_BAD;
    return PARSE_OK;
}

void pdr_reqguard_scan(const char *p, size_t n, size_t max_fields, size_t max_bytes, pdr_reqhead_t *h)
{
    h->len = 0;
    h->chunked = 0;
    h->limit = 0;
    h->bad = NULL;
    h->content_length = -1;
    size_t i = 0;
    while (i < n && (p[i] == '\r' || p[i] == '\n'))
        i++;
    size_t start = i;
    /* The request line: limits first (complete or not), then the rest once it has ended. */
    const char *nl = memchr(p + i, '\n', n - i);
    size_t e = nl != NULL ? (size_t)(nl - p) : n, c = e;
    if (c > i && p[c - 1] == '\r')
        c--;
    if (c - i > max_bytes) {
        h->limit = 414;
        return;
    }
    if (nl == NULL)
        return;
    const char *why = NULL;
    int parse = PARSE_OK, http10 = 0, n_cl = 0, n_te = 0, n_host = 0, cl_seen = 0;
    int64_t cl = -1;
    const char *line = p + start;
    size_t len = c - start;
    if (len >= 18 && line[17] == ':' && same_name(line, "transfer-encoding", 17))
        h->chunked = 1;
    if (start > 0 && p[start - 1] == '\n' && len >= 15 && line[14] == ':' &&
        same_name(line, "content-length", 14)) {
        cl_seen = 1;
        cl = length_value(line + 15, line + len);
    }
    if (c == e) {
        why = "a bare LF ends a line of the request head (lines end with CRLF)";
    } else {
        http10 = len >= 8 && memcmp(line + len - 8, "HTTP/1.0", 8) == 0;
        parse = parse_request_line(line, len, p, start);
    }
    /* The header lines, to the empty line. */
    size_t fields = 0, bytes = 0;
    for (i = e + 1;; i = e + 1) {
        if (i >= n)
            return;
        /* The usual line first, in one walk: tchars, a colon, a value without control bytes, CRLF. Its
         * first LF is the one after that CR. Any other line is read again the long way below. */
        size_t k = name_end(p, i, n), v = n;
        if (k > i && k < n && p[k] == ':')
            v = k + 1 + first_ctl(p + k + 1, n - k - 1);
        int cr, clean = v + 1 < n && p[v] == '\r' && p[v + 1] == '\n';
        if (clean) {
            cr = 1;
            c = v;
            e = v + 1;
        } else {
            nl = memchr(p + i, '\n', n - i);
            if (nl == NULL) { /* a line not ended yet counts as far as it has come, without a CR it ends in */
                len = n - i;
                if (p[n - 1] == '\r')
                    len--;
                if (bytes + len > max_bytes)
                    h->limit = 431;
                return;
            }
            e = (size_t)(nl - p);
            cr = e > i && p[e - 1] == '\r';
            c = cr ? e - 1 : e;
        }
        if (c == i) { /* the empty line */
            if (!cr && why == NULL)
                why = "a bare LF ends a line of the request head (lines end with CRLF)";
            h->len = e + 1;
            break;
        }
        fields++;
        bytes += c - i + 2; /* a complete line counts with a CRLF, bare LF or not */
        if (fields > max_fields || bytes > max_bytes) {
            h->limit = 431;
            return;
        }
        if (why != NULL)
            continue; /* refused already: only the limits and the head's end still count */
        if (!cr) {
            why = "a bare LF ends a line of the request head (lines end with CRLF)";
            continue;
        }
        line = p + i;
        len = c - i;
        if (!clean) {
            /* The name: tchars up to the colon (the CR at c ends the walk), else the slow way. */
            k = i;
            while (TCHAR[(unsigned char)p[k]])
                k++;
            if (p[k] != ':' || k == i) {
                if (line[0] == ' ' || line[0] == '\t') {
                    why = "obs-fold: a header line begins with whitespace";
                    continue;
                }
                const char *colon = memchr(line, ':', len);
                if (colon == NULL) {
                    why = "a header line without a colon";
                    continue;
                }
                k = (size_t)(colon - p);
                if (k == i || p[k - 1] == ' ' || p[k - 1] == '\t') {
                    why = "whitespace between a header name and its colon";
                    continue;
                }
                if (parse == PARSE_OK)
                    parse = PARSE_BAD; /* a byte that is not a tchar in the name */
            }
        }
        size_t nlen = k - i;
        if (nlen == 14 && same_name(line, "content-length", 14)) {
            n_cl++;
            if (!cl_seen) {
                cl_seen = 1;
                cl = length_value(p + k + 1, p + c);
            }
        } else if (nlen == 17 && same_name(line, "transfer-encoding", 17)) {
            n_te++;
            h->chunked = 1;
        } else if (nlen == 4 && same_name(line, "host", 4)) {
            n_host++;
        }
        if (parse == PARSE_OK && (fields > PARSER_MAX_FIELDS || (!clean && has_ctl(p + k + 1, c - k - 1))))
            parse = PARSE_BAD;
    }
    if (why == NULL) {
        if (n_cl > 0 && n_te > 0)
            why = "both Content-Length and Transfer-Encoding";
        else if (n_cl > 1)
            why = "more than one Content-Length";
        else if (n_te > 1)
            why = "more than one Transfer-Encoding";
        else if (n_te > 0 && http10)
            why = "Transfer-Encoding in an HTTP/1.0 request";
        else if (n_host > 1)
            why = "more than one Host";
        else if (n_host == 0 && !http10)
            why = "an HTTP/1.1 request without Host";
        else if (parse == PARSE_BAD)
            why = "the request line or a header line cannot be parsed";
    }
    h->bad = why;
    h->content_length = h->chunked ? -1 : cl;
}
