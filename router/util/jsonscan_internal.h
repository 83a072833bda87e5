/*
 * jsonscan_internal.h — what the request-body JSON scanner's two files share, below both: the scan state,
 * the small inline helpers of the grammar, and the value scanner the top-level object and the walkers call.
 * jsonscan_value.c: the grammar (strings, numbers, literals, arrays, nested objects: any value validated
 * and typed); jsonscan.c, above it: the top-level object with its member records and duplicate-key check,
 * decoded keys, and the walkers over nested arrays and objects. Only those files include it.
 */
#ifndef PDR_JSONSCAN_INTERNAL_H
#define PDR_JSONSCAN_INTERNAL_H

#include <stddef.h>

#include "jsonscan_types.h"

typedef struct {
    const char *start;
    const char *end;
    char *err;
    size_t errlen;
} scan_t;

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

/* Records a syntax error at `at` and returns NULL, so that callers can `return pdr__json_fail(...)`. */
const char *pdr__json_fail(scan_t *s, const char *at, const char *what);

/* p is just past the opening quote. Returns the byte after the closing quote, or NULL. Sets *escaped
 * when the body holds a backslash escape. */
const char *pdr__json_scan_string(scan_t *s, const char *p, int *escaped);

/* p is at the first byte of a value (whitespace skipped); depth is that of the enclosing container.
 * Fills v and returns the byte after the value, or NULL (the error is in s). */
const char *pdr__json_scan_value(scan_t *s, const char *p, int depth, pdr_jval_t *v);

#endif
