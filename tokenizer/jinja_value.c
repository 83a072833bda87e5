/*
 * Jinja values: construction in the render's arena, Python's truth, equality and ordering, str() and
 * repr() as Python writes them, json.dumps (transformers' tojson: ensure_ascii=False), and the context's
 * JSON (jansson) turned into values. Called from a render only; everything allocated here goes with the
 * render's arena.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "jinja_internal.h"

jj_val_t pdr__jj_undef(const jj_str_t *name)
{
    jj_val_t v = {.type = JV_UNDEF};
    v.u.s = name;
    return v;
}

jj_val_t pdr__jj_none(void)
{
    return (jj_val_t){.type = JV_NONE};
}

jj_val_t pdr__jj_bool(int b)
{
    jj_val_t v = {.type = JV_BOOL};
    v.u.i = b != 0;
    return v;
}

jj_val_t pdr__jj_int(int64_t i)
{
    jj_val_t v = {.type = JV_INT};
    v.u.i = i;
    return v;
}

jj_val_t pdr__jj_float(double f)
{
    jj_val_t v = {.type = JV_FLOAT};
    v.u.f = f;
    return v;
}

jj_val_t pdr__jj_strv(const jj_str_t *s)
{
    jj_val_t v = {.type = JV_STR};
    v.u.s = s;
    return v;
}

jj_val_t pdr__jj_listv(jj_list_t *l, int tuple)
{
    jj_val_t v = {.type = JV_LIST, .flags = tuple ? JF_TUPLE : 0};
    v.u.l = l;
    return v;
}

jj_val_t pdr__jj_dictv(jj_dict_t *d)
{
    jj_val_t v = {.type = JV_DICT};
    v.u.d = d;
    return v;
}

const jj_str_t *pdr__jj_str(jj_render_t *r, const char *p, size_t n)
{
    if (n > r->t->limits.max_output_bytes)
        pdr__jj_fail(r, PDR_ETOOBIG, "a string of %zu bytes passes the output limit of %zu", n,
                     r->t->limits.max_output_bytes);
    jj_str_t *s = pdr__jj_ralloc(r, sizeof(*s) + n + 1);
    s->len = n;
    if (n)
        memcpy(s->p, p, n);
    s->p[n] = '\0';
    return s;
}

jj_val_t pdr__jj_cstr(jj_render_t *r, const char *p, size_t n)
{
    return pdr__jj_strv(pdr__jj_str(r, p, n));
}

jj_list_t *pdr__jj_list_new(jj_render_t *r, size_t n)
{
    jj_list_t *l = pdr__jj_ralloc(r, sizeof(*l));
    l->n = n;
    l->v = n ? pdr__jj_ralloc(r, n * sizeof(*l->v)) : NULL;
    return l;
}

jj_dict_t *pdr__jj_dict_new(jj_render_t *r, size_t cap)
{
    jj_dict_t *d = pdr__jj_ralloc(r, sizeof(*d));
    d->n = 0;
    d->cap = cap;
    d->k = cap ? pdr__jj_ralloc(r, cap * sizeof(*d->k)) : NULL;
    d->v = cap ? pdr__jj_ralloc(r, cap * sizeof(*d->v)) : NULL;
    return d;
}

jj_val_t *pdr__jj_dict_get(const jj_dict_t *d, jj_val_t k)
{
    for (size_t i = 0; i < d->n; i++)
        if (pdr__jj_equal(d->k[i], k))
            return &d->v[i];
    return NULL;
}

jj_val_t *pdr__jj_dict_gets(const jj_dict_t *d, const char *k, size_t n)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].type == JV_STR && d->k[i].u.s->len == n && memcmp(d->k[i].u.s->p, k, n) == 0)
            return &d->v[i];
    return NULL;
}

void pdr__jj_dict_set(jj_render_t *r, jj_dict_t *d, jj_val_t k, jj_val_t v)
{
    jj_val_t *old = pdr__jj_dict_get(d, k);
    if (old != NULL) {
        *old = v;
        return;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        jj_val_t *nk = pdr__jj_ralloc(r, cap * sizeof(*nk)), *nv = pdr__jj_ralloc(r, cap * sizeof(*nv));
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof(*nk));
            memcpy(nv, d->v, d->n * sizeof(*nv));
        }
        d->k = nk;
        d->v = nv;
        d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n++] = v;
}

int pdr__jj_truthy(jj_render_t *r, jj_val_t v)
{
    (void)r;
    switch (v.type) {
    case JV_UNDEF:
    case JV_NONE:
        return 0;
    case JV_BOOL:
    case JV_INT:
        return v.u.i != 0;
    case JV_FLOAT:
        return v.u.f != 0;
    case JV_STR:
        return v.u.s->len != 0;
    case JV_LIST:
        return v.u.l->n != 0;
    case JV_DICT:
        return (v.flags & JF_NS) || v.u.d->n != 0;
    default:
        return 1;
    }
}

static int is_num(jj_val_t v)
{
    return v.type == JV_BOOL || v.type == JV_INT || v.type == JV_FLOAT;
}

static double num(jj_val_t v)
{
    return v.type == JV_FLOAT ? v.u.f : (double)v.u.i;
}

static int equal_at(jj_val_t a, jj_val_t b, unsigned depth)
{
    if (depth > JJ_VALUE_DEPTH)
        return 0;
    if (is_num(a) && is_num(b)) {
        if (a.type != JV_FLOAT && b.type != JV_FLOAT)
            return a.u.i == b.u.i;
        return num(a) == num(b);
    }
    if (a.type != b.type)
        return 0;
    switch (a.type) {
    case JV_UNDEF:
    case JV_NONE:
        return 1;
    case JV_STR:
        return a.u.s->len == b.u.s->len && memcmp(a.u.s->p, b.u.s->p, a.u.s->len) == 0;
    case JV_LIST:
        if ((a.flags & JF_TUPLE) != (b.flags & JF_TUPLE) || a.u.l->n != b.u.l->n)
            return 0;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!equal_at(a.u.l->v[i], b.u.l->v[i], depth + 1))
                return 0;
        return 1;
    case JV_DICT:
        if ((a.flags & JF_NS) || (b.flags & JF_NS))
            return a.u.d == b.u.d;
        if (a.u.d->n != b.u.d->n)
            return 0;
        for (size_t i = 0; i < a.u.d->n; i++) {
            jj_val_t *o = pdr__jj_dict_get(b.u.d, a.u.d->k[i]);
            if (o == NULL || !equal_at(a.u.d->v[i], *o, depth + 1))
                return 0;
        }
        return 1;
    case JV_MACRO:
        return a.u.macro == b.u.macro;
    case JV_FUNC:
        return a.u.i == b.u.i;
    default:
        return a.u.m == b.u.m;
    }
}

int pdr__jj_equal(jj_val_t a, jj_val_t b)
{
    return equal_at(a, b, 0);
}

const char *pdr__jj_type_name(jj_val_t v)
{
    switch (v.type) {
    case JV_UNDEF:
        return "Undefined";
    case JV_NONE:
        return "NoneType";
    case JV_BOOL:
        return "bool";
    case JV_INT:
        return "int";
    case JV_FLOAT:
        return "float";
    case JV_STR:
        return "str";
    case JV_LIST:
        return v.flags & JF_TUPLE ? "tuple" : "list";
    case JV_DICT:
        return v.flags & JF_NS ? "Namespace" : "dict";
    case JV_MACRO:
        return "Macro";
    default:
        return "builtin_function_or_method";
    }
}

int pdr__jj_compare(jj_render_t *r, jj_val_t a, jj_val_t b)
{
    if (is_num(a) && is_num(b)) {
        if (a.type != JV_FLOAT && b.type != JV_FLOAT)
            return (a.u.i > b.u.i) - (a.u.i < b.u.i);
        double x = num(a), y = num(b);
        return (x > y) - (x < y);
    }
    if (a.type == JV_STR && b.type == JV_STR) {
        size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
        int c = memcmp(a.u.s->p, b.u.s->p, n);
        if (c != 0)
            return c < 0 ? -1 : 1;
        return (a.u.s->len > b.u.s->len) - (a.u.s->len < b.u.s->len);
    }
    if (a.type == JV_LIST && b.type == JV_LIST && (a.flags & JF_TUPLE) == (b.flags & JF_TUPLE)) {
        if (++r->depth > JJ_VALUE_DEPTH)
            pdr__jj_fail(r, PDR_ETOOBIG, "comparison nests deeper than %d", JJ_VALUE_DEPTH);
        for (size_t i = 0; i < a.u.l->n && i < b.u.l->n; i++) {
            if (pdr__jj_equal(a.u.l->v[i], b.u.l->v[i]))
                continue;
            int c = pdr__jj_compare(r, a.u.l->v[i], b.u.l->v[i]);
            r->depth--;
            return c;
        }
        r->depth--;
        return (a.u.l->n > b.u.l->n) - (a.u.l->n < b.u.l->n);
    }
    pdr__jj_fail(r, PDR_EINVAL, "ordering not supported between instances of '%s' and '%s'",
                 pdr__jj_type_name(a), pdr__jj_type_name(b));
}

void pdr__jj_out_put(jj_render_t *r, jj_out_t *o, const char *p, size_t n)
{
    size_t limit = r->t->limits.max_output_bytes;
    if (n > limit - o->len)
        pdr__jj_fail(r, PDR_ETOOBIG, "output passes the limit of %zu bytes", limit);
    if (o->len + n + 1 > o->cap) {
        size_t cap = o->cap ? o->cap : 256;
        while (cap < o->len + n + 1)
            cap *= 2;
        char *np = pdr__jj_ralloc(r, cap);
        if (o->len)
            memcpy(np, o->p, o->len);
        o->p = np;
        o->cap = cap;
    }
    if (n)
        memcpy(o->p + o->len, p, n);
    o->len += n;
    o->p[o->len] = '\0';
}

static void put_s(jj_render_t *r, jj_out_t *o, const char *s)
{
    pdr__jj_out_put(r, o, s, strlen(s));
}

int pdr__jj_fmt_float(double f, char *buf, size_t n)
{
    if (isnan(f))
        return snprintf(buf, n, "nan");
    if (isinf(f))
        return snprintf(buf, n, f < 0 ? "-inf" : "inf");
    char e[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(e, sizeof(e), "%.*e", prec - 1, f);
        if (strtod(e, NULL) == f)
            break;
    }
    /* e is [-]d[.ddd]e[+-]XX: its digits and decimal exponent. */
    char digits[24];
    size_t nd = 0;
    const char *q = e;
    int neg = *q == '-';
    q += neg;
    for (; *q && *q != 'e'; q++)
        if (*q != '.')
            digits[nd++] = *q;
    int exp = (int)strtol(q + 1, NULL, 10);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = '\0';
    size_t k = 0;
    char out[64];
    if (neg)
        out[k++] = '-';
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            out[k++] = '0';
            out[k++] = '.';
            for (int z = -1; z > exp; z--)
                out[k++] = '0';
            for (size_t d = 0; d < nd; d++)
                out[k++] = digits[d];
        } else {
            for (int d = 0; d <= exp; d++)
                out[k++] = (size_t)d < nd ? digits[d] : '0';
            out[k++] = '.';
            if ((size_t)exp + 1 < nd)
                for (size_t d = (size_t)exp + 1; d < nd; d++)
                    out[k++] = digits[d];
            else
                out[k++] = '0';
        }
        out[k] = '\0';
    } else {
        out[k++] = digits[0];
        if (nd > 1) {
            out[k++] = '.';
            for (size_t d = 1; d < nd; d++)
                out[k++] = digits[d];
        }
        snprintf(out + k, sizeof(out) - k, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
    return snprintf(buf, n, "%s", out);
}

static void put_repr_str(jj_render_t *r, jj_out_t *o, const jj_str_t *s)
{
    char q = memchr(s->p, '\'', s->len) && !memchr(s->p, '"', s->len) ? '"' : '\'';
    pdr__jj_out_put(r, o, &q, 1);
    size_t run = 0;
    for (size_t i = 0; i < s->len; i++) {
        unsigned char c = (unsigned char)s->p[i];
        char esc[12] = {0};
        if (c == '\\' || c == (unsigned char)q)
            snprintf(esc, sizeof(esc), "\\%c", c);
        else if (c == '\n')
            snprintf(esc, sizeof(esc), "\\n");
        else if (c == '\r')
            snprintf(esc, sizeof(esc), "\\r");
        else if (c == '\t')
            snprintf(esc, sizeof(esc), "\\t");
        else if (c < 0x20 || c == 0x7f)
            snprintf(esc, sizeof(esc), "\\x%02x", c);
        else if (c == 0xc2 && i + 1 < s->len && (unsigned char)s->p[i + 1] <= 0xa0)
            snprintf(esc, sizeof(esc), "\\x%02x", (unsigned char)s->p[i + 1]);
        if (esc[0] == '\0')
            continue;
        pdr__jj_out_put(r, o, s->p + run, i - run);
        put_s(r, o, esc);
        if (c == 0xc2)
            i++;
        run = i + 1;
    }
    pdr__jj_out_put(r, o, s->p + run, s->len - run);
    pdr__jj_out_put(r, o, &q, 1);
}

static void put_scalar(jj_render_t *r, jj_out_t *o, jj_val_t v, int repr)
{
    char buf[64];
    switch (v.type) {
    case JV_UNDEF:
        if (repr)
            put_s(r, o, "Undefined");
        return;
    case JV_NONE:
        put_s(r, o, "None");
        return;
    case JV_BOOL:
        put_s(r, o, v.u.i ? "True" : "False");
        return;
    case JV_INT:
        snprintf(buf, sizeof(buf), "%lld", (long long)v.u.i);
        put_s(r, o, buf);
        return;
    case JV_FLOAT:
        pdr__jj_fmt_float(v.u.f, buf, sizeof(buf));
        put_s(r, o, buf);
        return;
    case JV_STR:
        if (repr)
            put_repr_str(r, o, v.u.s);
        else
            pdr__jj_out_put(r, o, v.u.s->p, v.u.s->len);
        return;
    case JV_MACRO:
        put_s(r, o, "<Macro '");
        put_s(r, o, v.u.macro->s->names[0]->p);
        put_s(r, o, "'>");
        return;
    default:
        put_s(r, o, "<built-in function>");
        return;
    }
}

void pdr__jj_out_repr(jj_render_t *r, jj_out_t *o, jj_val_t v)
{
    if ((v.type == JV_LIST || v.type == JV_DICT) && ++r->depth > JJ_VALUE_DEPTH)
        pdr__jj_fail(r, PDR_ETOOBIG, "repr nests deeper than %d (or a circular reference)", JJ_VALUE_DEPTH);
    if (v.type == JV_LIST) {
        int tuple = v.flags & JF_TUPLE;
        put_s(r, o, tuple ? "(" : "[");
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i)
                put_s(r, o, ", ");
            pdr__jj_out_repr(r, o, v.u.l->v[i]);
        }
        put_s(r, o, tuple ? (v.u.l->n == 1 ? ",)" : ")") : "]");
    } else if (v.type == JV_DICT) {
        put_s(r, o, v.flags & JF_NS ? "<Namespace {" : "{");
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i)
                put_s(r, o, ", ");
            pdr__jj_out_repr(r, o, v.u.d->k[i]);
            put_s(r, o, ": ");
            pdr__jj_out_repr(r, o, v.u.d->v[i]);
        }
        put_s(r, o, v.flags & JF_NS ? "}>" : "}");
    }
    if (v.type == JV_LIST || v.type == JV_DICT) {
        r->depth--;
    } else {
        put_scalar(r, o, v, 1);
    }
}

void pdr__jj_out_str(jj_render_t *r, jj_out_t *o, jj_val_t v)
{
    if (v.type == JV_LIST || v.type == JV_DICT)
        pdr__jj_out_repr(r, o, v);
    else
        put_scalar(r, o, v, 0);
}

jj_val_t pdr__jj_tostr(jj_render_t *r, jj_val_t v)
{
    if (v.type == JV_STR)
        return v;
    jj_out_t o = {0};
    pdr__jj_out_str(r, &o, v);
    return pdr__jj_cstr(r, o.p ? o.p : "", o.len);
}

const char *pdr__jj_find(const char *hay, size_t n, const char *needle, size_t m)
{
    if (m == 0)
        return hay;
    for (const char *p = hay; m <= n - (size_t)(p - hay);) {
        p = memchr(p, needle[0], n - m + 1 - (size_t)(p - hay));
        if (p == NULL)
            return NULL;
        if (memcmp(p, needle, m) == 0)
            return p;
        p++;
    }
    return NULL;
}

size_t pdr__jj_utf8_len(const char *p, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)p[i] & 0xc0) != 0x80;
    return c;
}

size_t pdr__jj_utf8_off(const char *p, size_t n, size_t i)
{
    size_t k = 0, c = 0;
    for (; k < n; k++) {
        if (((unsigned char)p[k] & 0xc0) != 0x80) {
            if (c == i)
                return k;
            c++;
        }
    }
    return n;
}

jj_list_t *pdr__jj_iterate(jj_render_t *r, jj_val_t v)
{
    switch (v.type) {
    case JV_UNDEF:
        return pdr__jj_list_new(r, 0);
    case JV_LIST:
        return v.u.l;
    case JV_DICT: {
        if (v.flags & JF_NS)
            break;
        jj_list_t *l = pdr__jj_list_new(r, v.u.d->n);
        memcpy(l->v, v.u.d->k, v.u.d->n * sizeof(*l->v));
        return l;
    }
    case JV_STR: {
        const jj_str_t *s = v.u.s;
        jj_list_t *l = pdr__jj_list_new(r, pdr__jj_utf8_len(s->p, s->len));
        size_t at = 0;
        for (size_t i = 0; i < l->n; i++) {
            size_t end = at + 1;
            while (end < s->len && ((unsigned char)s->p[end] & 0xc0) == 0x80)
                end++;
            l->v[i] = pdr__jj_cstr(r, s->p + at, end - at);
            at = end;
        }
        return l;
    }
    default:
        break;
    }
    pdr__jj_fail(r, PDR_EINVAL, "'%s' object is not iterable", pdr__jj_type_name(v));
}

int64_t pdr__jj_length(jj_render_t *r, jj_val_t v)
{
    switch (v.type) {
    case JV_UNDEF:
        return 0;
    case JV_STR:
        return (int64_t)pdr__jj_utf8_len(v.u.s->p, v.u.s->len);
    case JV_LIST:
        return (int64_t)v.u.l->n;
    case JV_DICT:
        if (!(v.flags & JF_NS))
            return (int64_t)v.u.d->n;
        break;
    default:
        break;
    }
    pdr__jj_fail(r, PDR_EINVAL, "object of type '%s' has no len()", pdr__jj_type_name(v));
}
