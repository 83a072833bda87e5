/*
 * The strict JSON parser of tjson.h: recursive descent over one buffer, strings unescaped in place
 * (an escape never decodes to more bytes than it spells), values appended to one array in document
 * order. Lines and columns are counted where whitespace is skipped (a newline can only appear there).
 * Single-threaded per document; a parsed document is read-only.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "tjson.h"
#include "util.h"

#define MAX_DEPTH 128
#define MAX_FILE ((size_t)1 << 30) /* 1 GiB: far past any tokenizer.json (17 MB) */
#define DUP_CHECK_MAX 64

typedef struct ps {
    pdr__tj_t *doc;
    char *p, *end;
    const char *line_start;
    size_t line;
    const char *name;
    char *err;
    size_t errlen;
    int rc;
} ps_t;

__attribute__((format(printf, 3, 4))) static int perr(ps_t *s, const char *at, const char *fmt, ...)
{
    if (s->rc != 0)
        return s->rc;
    s->rc = PDR_ECONFIG;
    if (s->errlen == 0)
        return s->rc;
    int k = snprintf(s->err, s->errlen, "%s:%zu:%zu: ", s->name, s->line, (size_t)(at - s->line_start) + 1);
    if (k < 0 || (size_t)k >= s->errlen)
        return s->rc;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err + k, s->errlen - (size_t)k, fmt, ap);
    va_end(ap);
    return s->rc;
}

static void skip_ws(ps_t *s)
{
    while (s->p < s->end) {
        char c = *s->p;
        if (c == '\n') {
            s->line++;
            s->line_start = ++s->p;
        } else if (c == ' ' || c == '\t' || c == '\r') {
            s->p++;
        } else {
            break;
        }
    }
}

static pdr__tj_node_t *new_node(ps_t *s, uint8_t type)
{
    pdr__tj_t *d = s->doc;
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 1024;
        if (cap > UINT32_MAX) {
            perr(s, s->p, "too many values");
            return NULL;
        }
        pdr__tj_node_t *n = realloc(d->nodes, cap * sizeof(*n));
        if (n == NULL) {
            s->rc = PDR_ENOMEM;
            snprintf(s->err, s->errlen, "%s: out of memory", s->name);
            return NULL;
        }
        d->nodes = n;
        d->cap = cap;
    }
    pdr__tj_node_t *n = &d->nodes[d->n++];
    memset(n, 0, sizeof(*n));
    n->type = type;
    return n;
}

static int hex4(ps_t *s, const char *at, uint32_t *out)
{
    if (s->end - at < 4)
        return perr(s, at, "truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int h = pdr_hex_digit(at[i]);
        if (h < 0)
            return perr(s, at, "invalid \\u escape");
        v = v << 4 | (uint32_t)h;
    }
    *out = v;
    return 0;
}

static char *put_utf8(char *w, uint32_t cp)
{
    if (cp < 0x80) {
        *w++ = (char)cp;
    } else if (cp < 0x800) {
        *w++ = (char)(0xC0 | cp >> 6);
        *w++ = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *w++ = (char)(0xE0 | cp >> 12);
        *w++ = (char)(0x80 | (cp >> 6 & 0x3F));
        *w++ = (char)(0x80 | (cp & 0x3F));
    } else {
        *w++ = (char)(0xF0 | cp >> 18);
        *w++ = (char)(0x80 | (cp >> 12 & 0x3F));
        *w++ = (char)(0x80 | (cp >> 6 & 0x3F));
        *w++ = (char)(0x80 | (cp & 0x3F));
    }
    return w;
}

/* The length of a valid UTF-8 sequence at p (1-4), or 0. */
static size_t utf8_len(const unsigned char *p, const unsigned char *end)
{
    unsigned c = p[0];
    size_t n;
    uint32_t cp, min;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2, cp = c & 0x1F, min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3, cp = c & 0x0F, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4, cp = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if ((size_t)(end - p) < n)
        return 0;
    for (size_t k = 1; k < n; k++) {
        if ((p[k] & 0xC0) != 0x80)
            return 0;
        cp = cp << 6 | (p[k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n;
}

/* At the opening quote; unescapes in place. */
static int parse_string(ps_t *s, pdr__tj_node_t **out)
{
    char *r = s->p + 1, *w = r, *start = r;
    for (;;) {
        if (r >= s->end)
            return perr(s, s->p, "unterminated string");
        unsigned char c = (unsigned char)*r;
        if (c == '"')
            break;
        if (c < 0x20)
            return perr(s, r, "control character in a string (escape it)");
        if (c == '\\') {
            if (r + 1 >= s->end)
                return perr(s, r, "unterminated string");
            char e = r[1];
            static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
            const char *k = e ? strchr(from, e) : NULL;
            if (k != NULL) {
                *w++ = to[k - from];
                r += 2;
                continue;
            }
            if (e != 'u')
                return perr(s, r, "invalid escape \\%c", e);
            uint32_t cp;
            if (hex4(s, r + 2, &cp) != 0)
                return s->rc;
            r += 6;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                uint32_t lo;
                if (s->end - r < 6 || r[0] != '\\' || r[1] != 'u' || hex4(s, r + 2, &lo) != 0 ||
                    lo < 0xDC00 || lo > 0xDFFF) {
                    s->rc = 0;
                    return perr(s, r, "a high surrogate \\u escape without its low surrogate");
                }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                r += 6;
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                return perr(s, r - 6, "a lone low surrogate \\u escape");
            }
            w = put_utf8(w, cp);
            continue;
        }
        if (c < 0x80) {
            *w++ = *r++;
            continue;
        }
        size_t n = utf8_len((const unsigned char *)r, (const unsigned char *)s->end);
        if (n == 0)
            return perr(s, r, "invalid UTF-8 in a string");
        memmove(w, r, n);
        w += n;
        r += n;
    }
    pdr__tj_node_t *node = new_node(s, PDR__TJ_STR);
    if (node == NULL)
        return s->rc;
    node->v.s = start;
    node->n = (uint32_t)(w - start);
    s->p = r + 1;
    *out = node;
    return 0;
}

static int parse_number(ps_t *s)
{
    char *p = s->p, *b = p;
    int neg = 0, is_int = 1;
    if (p < s->end && *p == '-') {
        neg = 1;
        p++;
    }
    if (p >= s->end || *p < '0' || *p > '9')
        return perr(s, b, "invalid value");
    if (*p == '0' && p + 1 < s->end && p[1] >= '0' && p[1] <= '9')
        return perr(s, b, "a number with a leading zero");
    uint64_t v = 0;
    int overflow = 0;
    while (p < s->end && *p >= '0' && *p <= '9') {
        unsigned d = (unsigned)(*p++ - '0');
        if (v > (UINT64_MAX - d) / 10)
            overflow = 1;
        else
            v = v * 10 + d;
    }
    if (p < s->end && *p == '.') {
        is_int = 0;
        if (++p >= s->end || *p < '0' || *p > '9')
            return perr(s, b, "a number without digits after '.'");
        while (p < s->end && *p >= '0' && *p <= '9')
            p++;
    }
    if (p < s->end && (*p == 'e' || *p == 'E')) {
        is_int = 0;
        p++;
        if (p < s->end && (*p == '+' || *p == '-'))
            p++;
        if (p >= s->end || *p < '0' || *p > '9')
            return perr(s, b, "a number without exponent digits");
        while (p < s->end && *p >= '0' && *p <= '9')
            p++;
    }
    pdr__tj_node_t *n = new_node(s, PDR__TJ_NUM);
    if (n == NULL)
        return s->rc;
    if (is_int && !overflow && v <= (uint64_t)INT64_MAX) {
        n->is_int = 1;
        n->v.i = neg ? -(int64_t)v : (int64_t)v;
    }
    n->end = (uint32_t)s->doc->n;
    s->p = p;
    return 0;
}

static int parse_value(ps_t *s, int depth);

static int dup_keys(ps_t *s, size_t first, const char *at)
{
    pdr__tj_t *d = s->doc;
    const pdr__tj_node_t *obj = &d->nodes[first];
    if (obj->n > DUP_CHECK_MAX)
        return 0;
    const pdr__tj_node_t *keys[DUP_CHECK_MAX];
    size_t k = 0;
    for (size_t i = first + 1; i < d->n; i = d->nodes[i + 1].end)
        keys[k++] = &d->nodes[i];
    for (size_t i = 0; i < k; i++)
        for (size_t j = i + 1; j < k; j++)
            if (keys[i]->n == keys[j]->n && memcmp(keys[i]->v.s, keys[j]->v.s, keys[i]->n) == 0)
                return perr(s, at, "duplicate key \"%.*s\"", (int)(keys[i]->n > 60 ? 60 : keys[i]->n),
                            keys[i]->v.s);
    return 0;
}

static int parse_container(ps_t *s, int depth, int is_obj)
{
    if (depth >= MAX_DEPTH)
        return perr(s, s->p, "nesting deeper than %d", MAX_DEPTH);
    size_t self = s->doc->n;
    if (new_node(s, is_obj ? PDR__TJ_OBJ : PDR__TJ_ARR) == NULL)
        return s->rc;
    const char *open = s->p;
    char close = is_obj ? '}' : ']';
    s->p++;
    skip_ws(s);
    uint32_t count = 0;
    if (s->p < s->end && *s->p == close) {
        s->p++;
    } else {
        for (;;) {
            if (is_obj) {
                if (s->p >= s->end || *s->p != '"')
                    return perr(s, s->p, "expected a key string");
                pdr__tj_node_t *key;
                if (parse_string(s, &key) != 0)
                    return s->rc;
                key->end = (uint32_t)s->doc->n;
                skip_ws(s);
                if (s->p >= s->end || *s->p != ':')
                    return perr(s, s->p, "expected ':'");
                s->p++;
                skip_ws(s);
            }
            if (parse_value(s, depth + 1) != 0)
                return s->rc;
            if (++count == UINT32_MAX)
                return perr(s, s->p, "too many values");
            skip_ws(s);
            if (s->p < s->end && *s->p == ',') {
                s->p++;
                skip_ws(s);
                continue;
            }
            if (s->p < s->end && *s->p == close) {
                s->p++;
                break;
            }
            return perr(s, s->p, "expected ',' or '%c'", close);
        }
    }
    pdr__tj_node_t *n = &s->doc->nodes[self];
    n->n = count;
    n->end = (uint32_t)s->doc->n;
    return is_obj ? dup_keys(s, self, open) : 0;
}

static int literal(ps_t *s, const char *word, uint8_t type)
{
    size_t len = strlen(word);
    if ((size_t)(s->end - s->p) < len || memcmp(s->p, word, len) != 0)
        return perr(s, s->p, "invalid value");
    pdr__tj_node_t *n = new_node(s, type);
    if (n == NULL)
        return s->rc;
    n->end = (uint32_t)s->doc->n;
    s->p += len;
    return 0;
}

static int parse_value(ps_t *s, int depth)
{
    if (s->p >= s->end)
        return perr(s, s->p, "unexpected end of file");
    switch (*s->p) {
    case '{':
        return parse_container(s, depth, 1);
    case '[':
        return parse_container(s, depth, 0);
    case '"': {
        pdr__tj_node_t *n;
        if (parse_string(s, &n) != 0)
            return s->rc;
        n->end = (uint32_t)s->doc->n;
        return 0;
    }
    case 't':
        return literal(s, "true", PDR__TJ_TRUE);
    case 'f':
        return literal(s, "false", PDR__TJ_FALSE);
    case 'n':
        return literal(s, "null", PDR__TJ_NULL);
    default:
        return parse_number(s);
    }
}

int pdr__tj_parse(pdr__tj_t *doc, char *buf, size_t len, const char *name, char *err, size_t errlen)
{
    memset(doc, 0, sizeof(*doc));
    doc->buf = buf;
    ps_t s = {doc, buf, buf + len, buf, 1, name, err, errlen, 0};
    if (len >= 3 && memcmp(buf, "\xEF\xBB\xBF", 3) == 0) /* a byte order mark */
        s.p += 3;
    skip_ws(&s);
    if (parse_value(&s, 0) == 0) {
        skip_ws(&s);
        if (s.p != s.end)
            perr(&s, s.p, "data after the top-level value");
    }
    if (s.rc != 0)
        pdr__tj_free(doc);
    return s.rc;
}

int pdr__tj_parse_file(pdr__tj_t *doc, const char *path, char *err, size_t errlen)
{
    memset(doc, 0, sizeof(*doc));
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return PDR_ECONFIG;
    }
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        fclose(f);
        return PDR_ECONFIG;
    }
    if ((size_t)size > MAX_FILE) {
        snprintf(err, errlen, "%s: larger than %zu bytes", path, MAX_FILE);
        fclose(f);
        return PDR_ETOOBIG;
    }
    char *buf = malloc((size_t)size + 1);
    if (buf == NULL) {
        snprintf(err, errlen, "%s: out of memory", path);
        fclose(f);
        return PDR_ENOMEM;
    }
    size_t got = fread(buf, 1, (size_t)size, f);
    int bad = ferror(f);
    fclose(f);
    if (bad || got != (size_t)size) {
        snprintf(err, errlen, "%s: cannot read: %s", path, bad ? strerror(errno) : "short read");
        free(buf);
        return PDR_ECONFIG;
    }
    return pdr__tj_parse(doc, buf, got, path, err, errlen);
}

void pdr__tj_free(pdr__tj_t *doc)
{
    free(doc->buf);
    free(doc->nodes);
    memset(doc, 0, sizeof(*doc));
}

const pdr__tj_node_t *pdr__tj_first(const pdr__tj_node_t *parent)
{
    if (parent == NULL || (parent->type != PDR__TJ_ARR && parent->type != PDR__TJ_OBJ) || parent->n == 0)
        return NULL;
    return parent + 1;
}

const pdr__tj_node_t *pdr__tj_next(const pdr__tj_t *doc, const pdr__tj_node_t *parent,
                                   const pdr__tj_node_t *child)
{
    const pdr__tj_node_t *v = parent->type == PDR__TJ_OBJ ? child + 1 : child;
    return v->end < parent->end ? doc->nodes + v->end : NULL;
}

const pdr__tj_node_t *pdr__tj_get(const pdr__tj_t *doc, const pdr__tj_node_t *obj, const char *key)
{
    return pdr__tj_getn(doc, obj, key, strlen(key));
}

const pdr__tj_node_t *pdr__tj_getn(const pdr__tj_t *doc, const pdr__tj_node_t *obj, const char *key,
                                   size_t len)
{
    if (obj == NULL || obj->type != PDR__TJ_OBJ)
        return NULL;
    const pdr__tj_node_t *found = NULL;
    for (const pdr__tj_node_t *k = pdr__tj_first(obj); k != NULL; k = pdr__tj_next(doc, obj, k))
        if (k->n == len && memcmp(k->v.s, key, len) == 0)
            found = k + 1; /* the last one, as a map would keep (large objects are not dup-checked) */
    return found;
}

const pdr__tj_node_t *pdr__tj_at(const pdr__tj_t *doc, const pdr__tj_node_t *arr, size_t i)
{
    if (arr == NULL || arr->type != PDR__TJ_ARR || i >= arr->n)
        return NULL;
    const pdr__tj_node_t *e = pdr__tj_first(arr);
    while (i-- > 0 && e != NULL)
        e = pdr__tj_next(doc, arr, e);
    return e;
}
