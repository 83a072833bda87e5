/*
 * The stream side of pdbench: an incremental text/event-stream splitter and a scanner that reads the
 * few fields pdbench needs from each event's JSON without building a DOM. An sglang /generate stream
 * repeats the whole text so far in every event, so a 2048-token answer carries megabytes of JSON;
 * skipping strings with one pass and no allocation keeps the client's cost far below the server's.
 * Pure code (no I/O), any thread.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "err.h"
#include "pdbench.h"

typedef struct span {
    const char *p, *e; /* [p, e); p == NULL: absent */
} span_t;

static const char *ws(const char *p, const char *e)
{
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* p at the opening quote; returns the position after the closing quote, or NULL. memchr finds each
 * candidate quote (the text of a /generate event is one long string); a quote preceded by an odd
 * number of backslashes is escaped. */
static const char *skip_string(const char *p, const char *e)
{
    const char *s = p + 1;
    while (s < e) {
        const char *q = memchr(s, '"', (size_t)(e - s));
        if (q == NULL)
            return NULL;
        size_t k = 0;
        while (q - k > p + 1 && q[-1 - (ptrdiff_t)k] == '\\')
            k++;
        if (k % 2 == 0)
            return q + 1;
        s = q + 1;
    }
    return NULL;
}

/* Skips one JSON value starting at p (no leading whitespace); returns its end or NULL when malformed
 * or truncated. Containers are walked with a depth counter, strings with skip_string(). */
static const char *skip_value(const char *p, const char *e)
{
    if (p >= e)
        return NULL;
    if (*p == '"')
        return skip_string(p, e);
    if (*p != '{' && *p != '[') {
        const char *q = p;
        while (q < e && *q != ',' && *q != '}' && *q != ']' && *q != ' ' && *q != '\n' && *q != '\r' &&
               *q != '\t')
            q++;
        return q > p ? q : NULL;
    }
    size_t depth = 0;
    while (p < e) {
        char c = *p;
        if (c == '"') {
            p = skip_string(p, e);
            if (p == NULL)
                return NULL;
            continue;
        }
        if (c == '{' || c == '[')
            depth++;
        else if (c == '}' || c == ']') {
            if (--depth == 0)
                return p + 1;
        }
        p++;
    }
    return NULL;
}

/* The values of the members named keys[0..n) of the object in v (keys compared as raw bytes; absent
 * spans for missing ones), in one pass over the object. Returns 0, or -1 when v is not a well-formed
 * object. */
static int obj_get_many(span_t v, const char *const *keys, span_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i].p = out[i].e = NULL;
    if (v.p == NULL)
        return -1;
    const char *p = ws(v.p, v.e), *e = v.e;
    if (p >= e || *p != '{')
        return -1;
    p = ws(p + 1, e);
    if (p < e && *p == '}')
        return 0;
    while (p < e) {
        if (*p != '"')
            return -1;
        const char *k = p + 1, *kend = skip_string(p, e);
        if (kend == NULL)
            return -1;
        size_t klen = (size_t)(kend - 1 - k);
        p = ws(kend, e);
        if (p >= e || *p != ':')
            return -1;
        p = ws(p + 1, e);
        const char *vend = skip_value(p, e);
        if (vend == NULL)
            return -1;
        for (size_t i = 0; i < n; i++)
            if (strlen(keys[i]) == klen && memcmp(k, keys[i], klen) == 0) {
                out[i].p = p;
                out[i].e = vend;
            }
        p = ws(vend, e);
        if (p < e && *p == '}')
            return ws(p + 1, e) == e ? 0 : -1;
        if (p >= e || *p != ',')
            return -1;
        p = ws(p + 1, e);
    }
    return -1;
}

static span_t obj_get(span_t v, const char *key)
{
    span_t r;
    obj_get_many(v, &key, &r, 1);
    return r;
}

static span_t arr_first(span_t v)
{
    span_t none = {NULL, NULL};
    if (v.p == NULL)
        return none;
    const char *p = ws(v.p, v.e);
    if (p >= v.e || *p != '[')
        return none;
    p = ws(p + 1, v.e);
    const char *end = skip_value(p, v.e);
    if (end == NULL || *p == ']')
        return none;
    span_t r = {p, end};
    return r;
}

static int64_t span_int(span_t v)
{
    if (v.p == NULL || v.p >= v.e)
        return -1;
    int64_t x = 0;
    for (const char *p = v.p; p < v.e; p++) {
        if (*p < '0' || *p > '9' || x > (INT64_MAX - 9) / 10)
            return -1;
        x = x * 10 + (*p - '0');
    }
    return x;
}

static int span_is(span_t v, const char *lit)
{
    size_t n = strlen(lit);
    return v.p != NULL && (size_t)(v.e - v.p) == n && memcmp(v.p, lit, n) == 0;
}

/* A string value with at least one character ("" and non-strings are empty). */
static int span_nonempty_string(span_t v)
{
    return v.p != NULL && *v.p == '"' && v.e - v.p > 2;
}

void pdb_event_parse(const char *p, size_t n, pdb_event_t *ev)
{
    memset(ev, 0, sizeof(*ev));
    ev->completion = ev->prompt = ev->cached = ev->pdsim_mono_us = -1;
    const char *q = ws(p, p + n);
    size_t rest = (size_t)(p + n - q);
    while (rest > 0 && (q[rest - 1] == ' ' || q[rest - 1] == '\r' || q[rest - 1] == '\n'))
        rest--;
    if (rest == 6 && memcmp(q, "[DONE]", 6) == 0) {
        ev->done = 1;
        return;
    }
    static const char *const keys[] = {"error", "object", "pdsim_mono_us", "meta_info", "usage", "choices"};
    span_t all = {q, q + rest}, v[6];
    if (rest == 0 || *q != '{' || obj_get_many(all, keys, v, 6) != 0) {
        ev->bad_json = 1;
        return;
    }
    if (v[0].p != NULL || span_is(v[1], "\"error\"")) {
        ev->error = 1;
        return;
    }
    ev->pdsim_mono_us = span_int(v[2]);
    span_t meta = v[3].p != NULL ? v[3] : v[4];
    ev->completion = span_int(obj_get(meta, "completion_tokens"));
    ev->prompt = span_int(obj_get(meta, "prompt_tokens"));
    ev->cached = span_int(obj_get(meta, "cached_tokens"));
    if (ev->cached < 0)
        ev->cached = span_int(obj_get(obj_get(meta, "prompt_tokens_details"), "cached_tokens"));
    span_t c0 = arr_first(v[5]);
    if (c0.p != NULL)
        ev->has_content = span_nonempty_string(obj_get(c0, "text")) ||
                          span_nonempty_string(obj_get(obj_get(c0, "delta"), "content"));
}

/* ------------------------------------------------------------------ SSE */

void pdb_sse_init(pdb_sse_t *s, size_t limit)
{
    memset(s, 0, sizeof(*s));
    s->limit = limit;
}

void pdb_sse_free(pdb_sse_t *s)
{
    free(s->line);
    free(s->data);
    memset(s, 0, sizeof(*s));
}

static int grow(char **b, size_t *cap, size_t need, size_t limit)
{
    if (need <= *cap)
        return 0;
    if (need > limit)
        return PDR_ETOOBIG;
    size_t c = *cap ? *cap : 256;
    while (c < need)
        c *= 2;
    if (c > limit)
        c = limit;
    char *n = realloc(*b, c);
    if (n == NULL)
        return PDR_ENOMEM;
    *b = n;
    *cap = c;
    return 0;
}

/* One complete line (without its end). */
static int sse_line(pdb_sse_t *s, const char *l, size_t n, int (*on_event)(void *, const char *, size_t),
                    void *arg)
{
    if (n == 0) {
        if (!s->have_data)
            return 0;
        s->have_data = 0;
        size_t len = s->data_len;
        s->data_len = 0;
        return on_event(arg, s->data, len);
    }
    if (n < 5 || memcmp(l, "data:", 5) != 0)
        return 0; /* comment, event:, id:, retry: */
    l += 5;
    n -= 5;
    if (n > 0 && *l == ' ') {
        l++;
        n--;
    }
    size_t need = s->data_len + (s->have_data ? 1 : 0) + n + 1;
    int r = grow(&s->data, &s->data_cap, need, s->limit);
    if (r != 0)
        return r;
    if (s->have_data)
        s->data[s->data_len++] = '\n';
    memcpy(s->data + s->data_len, l, n);
    s->data_len += n;
    s->data[s->data_len] = '\0';
    s->have_data = 1;
    return 0;
}

int pdb_sse_feed(pdb_sse_t *s, const char *p, size_t n, int (*on_event)(void *arg, const char *d, size_t n),
                 void *arg)
{
    while (n > 0) {
        const char *nl = memchr(p, '\n', n);
        size_t take = nl != NULL ? (size_t)(nl - p) : n;
        if (nl == NULL || s->line_len > 0) {
            int r = grow(&s->line, &s->line_cap, s->line_len + take + 1, s->limit);
            if (r != 0)
                return r;
            memcpy(s->line + s->line_len, p, take);
            s->line_len += take;
        }
        if (nl == NULL)
            return 0;
        const char *l = s->line_len > 0 ? s->line : p;
        size_t ln = s->line_len > 0 ? s->line_len : take;
        if (ln > 0 && l[ln - 1] == '\r')
            ln--;
        int r = sse_line(s, l, ln, on_event, arg);
        s->line_len = 0;
        if (r != 0)
            return r;
        p += take + 1;
        n -= take + 1;
    }
    return 0;
}
