/*
 * The string filters of the Jinja engine, with jinja2's semantics: trim, the case changes, replace,
 * format (Python's %), string, int and float (Python's parsing of a string), safe, indent, wordcount and
 * center. Called through the filter table of jinja_filters.c, within one render.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "jinja_filters.h"
#include "jinja_internal.h"
#include "jinja_str.h"

jj_val_t pdr__jj_f_format(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    if (a->npos && a->nkw)
        pdr__jj_fail(r, PDR_EINVAL, "format: can't handle positional and keyword arguments at the same time");
    jj_val_t arg;
    if (a->nkw) {
        jj_dict_t *d = pdr__jj_dict_new(r, a->nkw);
        for (uint32_t i = 0; i < a->nkw; i++)
            pdr__jj_dict_set(r, d, pdr__jj_strv(a->kwn[i]), a->kwv[i]);
        arg = pdr__jj_dictv(d);
    } else {
        jj_list_t *l = pdr__jj_list_new(r, a->npos);
        for (uint32_t i = 0; i < a->npos; i++)
            l->v[i] = a->pos[i];
        arg = pdr__jj_listv(l, 1);
    }
    return pdr__jj_str_percent(r, pdr__jj_tostr(r, v).u.s, arg);
}

jj_val_t pdr__jj_f_trim(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    const jj_val_t *chars = pdr__jj_arg(a, 0, "chars");
    const jj_str_t *c = chars && chars->type != JV_NONE ? pdr__jj_want_str(r, chars, "trim's chars") : NULL;
    jj_val_t out = pdr__jj_str_strip(r, pdr__jj_tostr(r, v).u.s, c, 1, 1);
    out.flags = v.type == JV_STR ? v.flags & JF_SAFE : 0;
    return out;
}

/* A case filter: the string in case mode (str_case's), keeping its safe mark. */
static jj_val_t case_filter(jj_render_t *r, jj_val_t v, char mode)
{
    jj_val_t out = pdr__jj_str_case(r, pdr__jj_tostr(r, v).u.s, mode);
    out.flags = v.type == JV_STR ? v.flags & JF_SAFE : 0;
    return out;
}

jj_val_t pdr__jj_f_upper(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    (void)a;
    return case_filter(r, v, 'u');
}

jj_val_t pdr__jj_f_lower(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    (void)a;
    return case_filter(r, v, 'l');
}

jj_val_t pdr__jj_f_title(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    (void)a;
    return case_filter(r, v, 'T');
}

jj_val_t pdr__jj_f_capitalize(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    (void)a;
    return case_filter(r, v, 'c');
}

jj_val_t pdr__jj_f_replace(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    const jj_val_t *cnt = pdr__jj_arg(a, 2, "count");
    int64_t count = cnt && cnt->type != JV_NONE ? pdr__jj_want_int(r, cnt, -1, "replace's count") : -1;
    return pdr__jj_str_replace(r, pdr__jj_tostr(r, v).u.s,
                               pdr__jj_want_str(r, pdr__jj_arg(a, 0, "old"), "replace's old"),
                               pdr__jj_want_str(r, pdr__jj_arg(a, 1, "new"), "replace's new"), count);
}

jj_val_t pdr__jj_f_string(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    (void)a;
    return pdr__jj_tostr(r, v);
}

/* Python's int() and float() of a string: blanks around, underscores between digits. */
static int parse_num(const jj_str_t *s, int as_int, int64_t *i, double *f)
{
    char buf[128];
    size_t k = 0, a = 0, b = s->len, l;
    while (a < b && pdr__jj_space_at(s->p + a, b - a, &l))
        a += l;
    while (b > a && (s->p[b - 1] == ' ' || (s->p[b - 1] >= 0x09 && s->p[b - 1] <= 0x0d)))
        b--;
    if (b - a >= sizeof(buf) || a == b)
        return 0;
    for (size_t j = a; j < b; j++) {
        if (s->p[j] == '_')
            continue;
        buf[k++] = s->p[j];
    }
    buf[k] = '\0';
    char *end;
    if (as_int) {
        long long v = strtoll(buf, &end, 10);
        if (*end != '\0' || end == buf)
            return 0;
        *i = v;
        return 1;
    }
    *f = strtod(buf, &end);
    return *end == '\0' && end != buf;
}

jj_val_t pdr__jj_f_int(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    const jj_val_t *d = pdr__jj_arg(a, 0, "default");
    jj_val_t def = d ? *d : pdr__jj_int(0);
    int64_t i;
    double f;
    if (v.type == JV_UNDEF)
        pdr__jj_undefined_use(r, v);
    switch (v.type) {
    case JV_INT:
    case JV_BOOL:
        return pdr__jj_int(v.u.i);
    case JV_FLOAT:
        if (!isfinite(v.u.f) || fabs(v.u.f) >= 9.2e18)
            return def;
        return pdr__jj_int((int64_t)v.u.f);
    case JV_STR:
        if (parse_num(v.u.s, 1, &i, &f))
            return pdr__jj_int(i);
        if (parse_num(v.u.s, 0, &i, &f) && isfinite(f) && fabs(f) < 9.2e18)
            return pdr__jj_int((int64_t)f);
        return def;
    default:
        return def;
    }
}

jj_val_t pdr__jj_f_float(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    const jj_val_t *d = pdr__jj_arg(a, 0, "default");
    jj_val_t def = d ? *d : pdr__jj_float(0);
    int64_t i;
    double f;
    if (v.type == JV_UNDEF)
        pdr__jj_undefined_use(r, v);
    switch (v.type) {
    case JV_INT:
    case JV_BOOL:
        return pdr__jj_float((double)v.u.i);
    case JV_FLOAT:
        return v;
    case JV_STR:
        return parse_num(v.u.s, 0, &i, &f) ? pdr__jj_float(f) : def;
    default:
        return def;
    }
}

jj_val_t pdr__jj_f_safe(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    (void)a;
    jj_val_t s = pdr__jj_tostr(r, v);
    s.flags = JF_SAFE;
    return s;
}

jj_val_t pdr__jj_f_indent(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    const jj_val_t *w = pdr__jj_arg(a, 0, "width");
    int first = pdr__jj_flag(r, pdr__jj_arg(a, 1, "first")),
        blank = pdr__jj_flag(r, pdr__jj_arg(a, 2, "blank"));
    const jj_str_t *pad;
    if (w != NULL && w->type == JV_STR) {
        pad = w->u.s;
    } else {
        int64_t n = pdr__jj_want_int(r, w, 4, "indent's width");
        if (n < 0)
            n = 0;
        if (n > 1024)
            pdr__jj_fail(r, PDR_EINVAL, "indent: width above 1024");
        char *sp = pdr__jj_ralloc(r, (size_t)n + 1);
        memset(sp, ' ', (size_t)n);
        pad = pdr__jj_str(r, sp, (size_t)n);
    }
    /* jinja2 appends "\n" to the value: anything but a string fails there. */
    if (v.type == JV_UNDEF)
        pdr__jj_undefined_use(r, v);
    if (v.type != JV_STR)
        pdr__jj_fail(r, PDR_EINVAL, "indent: unsupported operand type(s) for +=: '%s' and 'str'",
                     pdr__jj_type_name(v));
    const jj_str_t *s = v.u.s;
    jj_out_t o = {0};
    size_t i = 0;
    for (int line = 0; i <= s->len; line++) {
        const char *nl = memchr(s->p + i, '\n', s->len - i);
        size_t end = nl ? (size_t)(nl - s->p) : s->len;
        int empty = end == i;
        size_t k = i;
        while (!blank && k < end && (s->p[k] == ' ' || s->p[k] == '\t'))
            k++;
        if ((line > 0 || first) && (blank || (!empty && k < end)))
            pdr__jj_out_put(r, &o, pad->p, pad->len);
        pdr__jj_out_put(r, &o, s->p + i, end - i + (nl ? 1 : 0));
        if (nl == NULL)
            break;
        i = end + 1;
    }
    return pdr__jj_cstr(r, o.p ? o.p : "", o.len);
}

/* Is the code point a character of Python's \w (str.isalnum() or "_")? Exact for ASCII and Latin-1; beyond,
 * punctuation, symbol and emoji blocks are not, the rest is. */
static int word_char(uint32_t c)
{
    if (c < 0x80)
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (c < 0xc0)
        return c == 0xaa || c == 0xb2 || c == 0xb3 || c == 0xb5 || c == 0xb9 || c == 0xba || c == 0xbc ||
               c == 0xbd || c == 0xbe;
    if (c == 0xd7 || c == 0xf7 || (c >= 0x2000 && c <= 0x206f) || (c >= 0x3000 && c <= 0x3004) ||
        (c >= 0x3008 && c <= 0x3020) || (c >= 0xff01 && c <= 0xff0f) || (c >= 0xff1a && c <= 0xff20) ||
        (c >= 0x1f000 && c <= 0x1faff) || (c >= 0x2190 && c <= 0x2bff))
        return 0;
    return 1;
}

jj_val_t pdr__jj_f_wordcount(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    (void)a;
    const jj_str_t *s = pdr__jj_tostr(r, v).u.s;
    int64_t n = 0;
    int in = 0;
    for (size_t i = 0, l; i < s->len; i += l) {
        int space = pdr__jj_space_at(s->p + i, s->len - i, &l);
        uint32_t c = (unsigned char)s->p[i];
        if (l > 1) {
            c &= 0x3fu >> (l - 1);
            for (size_t k = 1; k < l; k++)
                c = (c << 6) | ((unsigned char)s->p[i + k] & 0x3fu);
        }
        int word = !space && word_char(c);
        n += word && !in;
        in = word;
    }
    return pdr__jj_int(n);
}

jj_val_t pdr__jj_f_center(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    int64_t w = pdr__jj_want_int(r, pdr__jj_arg(a, 0, "width"), 80, "center's width");
    const jj_str_t *s = pdr__jj_tostr(r, v).u.s;
    int64_t len = (int64_t)pdr__jj_utf8_len(s->p, s->len);
    if (w > 65536)
        pdr__jj_fail(r, PDR_EINVAL, "center: width above 65536");
    if (w <= len)
        return pdr__jj_strv(s);
    int64_t pad = w - len, left = pad / 2 + (pad & w & 1);
    jj_out_t o = {0};
    for (int64_t i = 0; i < left; i++)
        pdr__jj_out_put(r, &o, " ", 1);
    pdr__jj_out_put(r, &o, s->p, s->len);
    for (int64_t i = 0; i < pad - left; i++)
        pdr__jj_out_put(r, &o, " ", 1);
    return pdr__jj_cstr(r, o.p, o.len);
}
