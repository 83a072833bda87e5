/*
 * Strings for the Jinja engine: Python's whitespace, strip, split, replace, case changes and the str
 * methods templates call (split, strip, startswith, replace, format, join...). Strings are UTF-8 (the
 * compiler checks the template's text, jansson the context's); indices count code points.
 */
#include <string.h>

#include "err.h"
#include "jinja_internal.h"
#include "jinja_str.h"

static uint32_t decode(const unsigned char *p, size_t n, size_t *len)
{
    uint32_t c = p[0];
    size_t k = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
    if (k > n)
        k = n;
    if (k == 1) {
        *len = 1;
        return c;
    }
    c &= 0x3f >> (k - 1);
    for (size_t i = 1; i < k; i++)
        c = (c << 6) | (p[i] & 0x3f);
    *len = k;
    return c;
}

int pdr__jj_space_at(const char *p, size_t n, size_t *len)
{
    uint32_t c = decode((const unsigned char *)p, n, len);
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
           c == 0x3000;
}

/* Is the code point at p (n bytes left) in chars (NULL: whitespace)? */
static int strip_at(const char *p, size_t n, const jj_str_t *chars, size_t *len)
{
    if (chars == NULL)
        return pdr__jj_space_at(p, n, len);
    decode((const unsigned char *)p, n, len);
    for (size_t i = 0; i < chars->len;) {
        size_t l;
        decode((const unsigned char *)chars->p + i, chars->len - i, &l);
        if (l == *len && memcmp(chars->p + i, p, l) == 0)
            return 1;
        i += l;
    }
    return 0;
}

/* The start of the code point that ends just before s + end. */
static size_t prev_cp(const char *s, size_t end)
{
    size_t i = end - 1;
    while (i > 0 && ((unsigned char)s[i] & 0xc0) == 0x80)
        i--;
    return i;
}

jj_val_t pdr__jj_str_strip(jj_render_t *r, const jj_str_t *s, const jj_str_t *chars, int left, int right)
{
    size_t a = 0, b = s->len, l;
    while (left && a < b && strip_at(s->p + a, b - a, chars, &l))
        a += l;
    while (right && b > a) {
        size_t q = prev_cp(s->p, b);
        if (q < a || !strip_at(s->p + q, b - q, chars, &l))
            break;
        b = q;
    }
    return pdr__jj_cstr(r, s->p + a, b - a);
}

static int is_lower(char c)
{
    return c >= 'a' && c <= 'z';
}

static int is_upper(char c)
{
    return c >= 'A' && c <= 'Z';
}

jj_val_t pdr__jj_str_case(jj_render_t *r, const jj_str_t *s, int mode)
{
    jj_val_t v = pdr__jj_cstr(r, s->p, s->len);
    char *p = (char *)v.u.s->p;
    int word_start = 1, first = 1;
    for (size_t i = 0; i < s->len; i++) {
        char c = p[i];
        int up;
        if (mode == 'u' || mode == 'l') {
            up = mode == 'u';
        } else if (mode == 'c') {
            up = first;
        } else if (mode == 't') {
            up = word_start;
        } else {
            up = word_start;
        }
        if (up && is_lower(c))
            p[i] = (char)(c - 32);
        else if (!up && is_upper(c))
            p[i] = (char)(c + 32);
        if (((unsigned char)c & 0xc0) != 0x80)
            first = 0;
        if (mode == 't')
            word_start = !(is_lower(c) || is_upper(c) || (unsigned char)c >= 0x80);
        else if (mode == 'T')
            word_start = c == '-' || c == ' ' || (c >= 0x09 && c <= 0x0d) || c == '(' || c == '{' ||
                         c == '[' || c == '<';
    }
    return v;
}

jj_val_t pdr__jj_str_replace(jj_render_t *r, const jj_str_t *s, const jj_str_t *from, const jj_str_t *to,
                             int64_t count)
{
    jj_out_t o = {0};
    size_t i = 0;
    int64_t done = 0;
    if (from->len == 0) {
        for (;;) {
            if (count < 0 || done < count) {
                pdr__jj_out_put(r, &o, to->p, to->len);
                done++;
            }
            if (i >= s->len)
                break;
            size_t l;
            decode((const unsigned char *)s->p + i, s->len - i, &l);
            pdr__jj_out_put(r, &o, s->p + i, l);
            i += l;
        }
        return pdr__jj_cstr(r, o.p ? o.p : "", o.len);
    }
    while (i <= s->len && (count < 0 || done < count)) {
        const char *f = pdr__jj_find(s->p + i, s->len - i, from->p, from->len);
        if (f == NULL)
            break;
        size_t at = (size_t)(f - s->p);
        pdr__jj_out_put(r, &o, s->p + i, at - i);
        pdr__jj_out_put(r, &o, to->p, to->len);
        i = at + from->len;
        done++;
    }
    pdr__jj_out_put(r, &o, s->p + i, s->len - i);
    return pdr__jj_cstr(r, o.p ? o.p : "", o.len);
}

static jj_val_t list_of(jj_render_t *r, jj_val_t *items, size_t n, int reverse)
{
    jj_list_t *l = pdr__jj_list_new(r, n);
    for (size_t i = 0; i < n; i++)
        l->v[i] = items[reverse ? n - 1 - i : i];
    return pdr__jj_listv(l, 0);
}

jj_val_t pdr__jj_str_split(jj_render_t *r, const jj_str_t *s, const jj_str_t *sep, int64_t maxsplit,
                           int right)
{
    if (sep != NULL && sep->len == 0)
        pdr__jj_fail(r, PDR_EINVAL, "empty separator");
    size_t cap = 16, n = 0;
    jj_val_t *items = pdr__jj_ralloc(r, cap * sizeof(*items));
    size_t a = 0, b = s->len, l;
    for (;;) {
        if (sep == NULL) {
            /* Skip the blanks on the side being split; stop when nothing is left. */
            if (!right)
                while (a < b && pdr__jj_space_at(s->p + a, b - a, &l))
                    a += l;
            else
                while (b > a && pdr__jj_space_at(s->p + prev_cp(s->p, b), b - prev_cp(s->p, b), &l))
                    b = prev_cp(s->p, b);
            if (a >= b)
                break;
        }
        if (n + 1 >= cap) {
            jj_val_t *ni = pdr__jj_ralloc(r, cap * 2 * sizeof(*ni));
            memcpy(ni, items, n * sizeof(*ni));
            items = ni;
            cap *= 2;
        }
        if (maxsplit >= 0 && (int64_t)n >= maxsplit) {
            items[n++] = pdr__jj_cstr(r, s->p + a, b - a);
            break;
        }
        /* Find the next separator from the side being split. */
        size_t at = 0, len = 0;
        int found = 0;
        if (sep == NULL) {
            if (!right) {
                for (at = a; at < b; at += l)
                    if (pdr__jj_space_at(s->p + at, b - at, &l)) {
                        found = 1;
                        len = l;
                        break;
                    }
            } else {
                for (at = b; at > a;) {
                    size_t q = prev_cp(s->p, at);
                    if (pdr__jj_space_at(s->p + q, at - q, &l)) {
                        found = 1;
                        at = q;
                        len = l;
                        break;
                    }
                    at = q;
                }
            }
        } else if (!right) {
            const char *f = pdr__jj_find(s->p + a, b - a, sep->p, sep->len);
            if (f != NULL) {
                found = 1;
                at = (size_t)(f - s->p);
                len = sep->len;
            }
        } else {
            for (size_t k = b; k >= a + sep->len && !found; k--)
                if (memcmp(s->p + k - sep->len, sep->p, sep->len) == 0) {
                    found = 1;
                    at = k - sep->len;
                    len = sep->len;
                }
        }
        if (!found) {
            items[n++] = pdr__jj_cstr(r, s->p + a, b - a);
            break;
        }
        pdr__jj_count_iter(r, 1);
        if (!right) {
            items[n++] = pdr__jj_cstr(r, s->p + a, at - a);
            a = at + len;
        } else {
            items[n++] = pdr__jj_cstr(r, s->p + at + len, b - at - len);
            b = at;
        }
    }
    return list_of(r, items, n, right);
}

static const jj_str_t *arg_str(jj_render_t *r, const jj_method_t *m, const jj_val_t *v, int none_ok)
{
    if (v == NULL || (none_ok && v->type == JV_NONE))
        return NULL;
    if (v->type != JV_STR)
        pdr__jj_fail(r, PDR_EINVAL, "%s() argument must be str, not %s", m->name, pdr__jj_type_name(*v));
    return v->u.s;
}

static int64_t arg_int(jj_render_t *r, const jj_method_t *m, const jj_val_t *v, int64_t def)
{
    if (v == NULL)
        return def;
    if (v->type != JV_INT && v->type != JV_BOOL)
        pdr__jj_fail(r, PDR_EINVAL, "%s() argument must be int, not %s", m->name, pdr__jj_type_name(*v));
    return v->u.i;
}

static int affix(const jj_str_t *s, const jj_str_t *x, int end)
{
    return x->len <= s->len && memcmp(s->p + (end ? s->len - x->len : 0), x->p, x->len) == 0;
}

static jj_val_t str_format(jj_render_t *r, const jj_str_t *s, const jj_args_t *a)
{
    jj_out_t o = {0};
    uint32_t auto_i = 0;
    for (size_t i = 0; i < s->len; i++) {
        char c = s->p[i];
        if ((c == '{' || c == '}') && i + 1 < s->len && s->p[i + 1] == c) {
            pdr__jj_out_put(r, &o, &c, 1);
            i++;
            continue;
        }
        if (c == '}')
            pdr__jj_fail(r, PDR_EINVAL, "format: single '}' encountered in format string");
        if (c != '{') {
            pdr__jj_out_put(r, &o, &c, 1);
            continue;
        }
        const char *e = memchr(s->p + i, '}', s->len - i);
        if (e == NULL)
            pdr__jj_fail(r, PDR_EINVAL, "format: single '{' encountered in format string");
        size_t fl = (size_t)(e - (s->p + i + 1));
        const char *f = s->p + i + 1;
        if (memchr(f, ':', fl) || memchr(f, '!', fl) || memchr(f, '.', fl) || memchr(f, '[', fl))
            pdr__jj_fail(r, PDR_EINVAL, "format: only {}, {N} and {name} fields are supported");
        const jj_val_t *v = NULL;
        if (fl == 0) {
            v = auto_i < a->npos ? &a->pos[auto_i] : NULL;
            auto_i++;
        } else if (f[0] >= '0' && f[0] <= '9') {
            uint32_t k = 0;
            for (size_t j = 0; j < fl && k < 1000000; j++)
                k = k * 10 + (uint32_t)(f[j] - '0');
            v = k < a->npos ? &a->pos[k] : NULL;
        } else {
            for (uint32_t k = 0; k < a->nkw && v == NULL; k++)
                if (a->kwn[k]->len == fl && memcmp(a->kwn[k]->p, f, fl) == 0)
                    v = &a->kwv[k];
        }
        if (v == NULL)
            pdr__jj_fail(r, PDR_EINVAL, "format: no argument for field '%.*s'", (int)fl, f);
        pdr__jj_out_str(r, &o, *v);
        i += fl + 1;
    }
    return pdr__jj_cstr(r, o.p ? o.p : "", o.len);
}

static int all_chars(const jj_str_t *s, int kind)
{
    if (s->len == 0)
        return 0;
    int cased = 0;
    for (size_t i = 0; i < s->len; i++) {
        char c = s->p[i];
        int lo = is_lower(c), up = is_upper(c), dig = c >= '0' && c <= '9';
        cased |= lo || up;
        if ((kind == 'd' && !dig) || (kind == 'a' && !lo && !up) || (kind == 'n' && !lo && !up && !dig) ||
            (kind == 'l' && up) || (kind == 'u' && lo))
            return 0;
        if (kind == 's') {
            size_t l;
            if (!pdr__jj_space_at(s->p + i, s->len - i, &l))
                return 0;
            i += l - 1;
        }
    }
    return kind == 'l' || kind == 'u' ? cased : 1;
}

jj_val_t pdr__jj_str_method(jj_render_t *r, const jj_method_t *m, const jj_args_t *a)
{
    const jj_str_t *s = m->self.u.s;
    const char *n = m->name;
    const jj_val_t *a0 = pdr__jj_arg(a, 0, NULL), *a1 = pdr__jj_arg(a, 1, NULL);
    if (!strcmp(n, "format"))
        return str_format(r, s, a);
    if (!strcmp(n, "strip") || !strcmp(n, "lstrip") || !strcmp(n, "rstrip")) {
        pdr__jj_check_args(r, m, a, 1);
        jj_val_t v = pdr__jj_str_strip(r, s, arg_str(r, m, a0, 1), n[0] != 'r', n[0] != 'l');
        v.flags = m->self.flags & JF_SAFE;
        return v;
    }
    if (!strcmp(n, "split") || !strcmp(n, "rsplit")) {
        pdr__jj_check_args(r, m, a, 2);
        const jj_val_t *sep = pdr__jj_arg(a, 0, "sep"), *max = pdr__jj_arg(a, 1, "maxsplit");
        return pdr__jj_str_split(r, s, arg_str(r, m, sep, 1), arg_int(r, m, max, -1), n[0] == 'r');
    }
    if (!strcmp(n, "startswith") || !strcmp(n, "endswith")) {
        pdr__jj_check_args(r, m, a, 1);
        if (a0 != NULL && a0->type == JV_LIST && (a0->flags & JF_TUPLE)) {
            for (size_t i = 0; i < a0->u.l->n; i++)
                if (affix(s, arg_str(r, m, &a0->u.l->v[i], 0), n[0] == 'e'))
                    return pdr__jj_bool(1);
            return pdr__jj_bool(0);
        }
        const jj_str_t *x = arg_str(r, m, a0, 0);
        return pdr__jj_bool(affix(s, x, n[0] == 'e'));
    }
    if (!strcmp(n, "removeprefix") || !strcmp(n, "removesuffix")) {
        pdr__jj_check_args(r, m, a, 1);
        const jj_str_t *x = arg_str(r, m, a0, 0);
        int end = n[6] == 's';
        if (!affix(s, x, end))
            return m->self;
        return pdr__jj_cstr(r, s->p + (end ? 0 : x->len), s->len - x->len);
    }
    if (!strcmp(n, "replace")) {
        pdr__jj_check_args(r, m, a, 3);
        return pdr__jj_str_replace(r, s, arg_str(r, m, a0, 0), arg_str(r, m, a1, 0),
                                   arg_int(r, m, pdr__jj_arg(a, 2, "count"), -1));
    }
    if (!strcmp(n, "find") || !strcmp(n, "rfind") || !strcmp(n, "index") || !strcmp(n, "count")) {
        pdr__jj_check_args(r, m, a, 1);
        const jj_str_t *x = arg_str(r, m, a0, 0);
        int64_t found = -1, count = 0;
        for (size_t i = 0; i + x->len <= s->len; i++) {
            if (memcmp(s->p + i, x->p, x->len) != 0)
                continue;
            if (found < 0 || n[0] == 'r')
                found = (int64_t)pdr__jj_utf8_len(s->p, i);
            count++;
            if (n[0] == 'c' && x->len)
                i += x->len - 1;
            if (n[0] == 'f' || n[0] == 'i')
                break;
        }
        if (n[0] == 'c')
            return pdr__jj_int(x->len ? count : (int64_t)pdr__jj_utf8_len(s->p, s->len) + 1);
        if (n[0] == 'i' && found < 0)
            pdr__jj_fail(r, PDR_EINVAL, "substring not found");
        return pdr__jj_int(found);
    }
    if (!strcmp(n, "join")) {
        pdr__jj_check_args(r, m, a, 1);
        if (a0 == NULL)
            pdr__jj_fail(r, PDR_EINVAL, "join() takes exactly one argument");
        jj_list_t *l = pdr__jj_iterate(r, *a0);
        jj_out_t o = {0};
        for (size_t i = 0; i < l->n; i++) {
            if (i)
                pdr__jj_out_put(r, &o, s->p, s->len);
            const jj_str_t *x = arg_str(r, m, &l->v[i], 0);
            pdr__jj_out_put(r, &o, x->p, x->len);
        }
        return pdr__jj_cstr(r, o.p ? o.p : "", o.len);
    }
    if (!strcmp(n, "splitlines")) {
        pdr__jj_check_args(r, m, a, 0);
        jj_val_t nl = pdr__jj_cstr(r, "\n", 1);
        jj_val_t t = pdr__jj_str_replace(r, s, pdr__jj_str(r, "\r\n", 2), nl.u.s, -1);
        t = pdr__jj_str_replace(r, t.u.s, pdr__jj_str(r, "\r", 1), nl.u.s, -1);
        if (t.u.s->len == 0)
            return pdr__jj_listv(pdr__jj_list_new(r, 0), 0);
        const jj_str_t *body = t.u.s;
        if (body->p[body->len - 1] == '\n')
            body = pdr__jj_str(r, body->p, body->len - 1);
        return pdr__jj_str_split(r, body, nl.u.s, -1, 0);
    }
    pdr__jj_check_args(r, m, a, 0);
    if (!strcmp(n, "upper") || !strcmp(n, "lower") || !strcmp(n, "title") || !strcmp(n, "capitalize")) {
        jj_val_t v = pdr__jj_str_case(r, s, n[0] == 'u' ? 'u' : n[0] == 'l' ? 'l' : n[0] == 't' ? 't' : 'c');
        v.flags = m->self.flags & JF_SAFE;
        return v;
    }
    static const struct {
        const char *name;
        int kind;
    } is[] = {{"isdigit", 'd'}, {"isalpha", 'a'}, {"isalnum", 'n'},
              {"islower", 'l'}, {"isupper", 'u'}, {"isspace", 's'}};
    for (size_t i = 0; i < sizeof(is) / sizeof(is[0]); i++)
        if (!strcmp(n, is[i].name))
            return pdr__jj_bool(all_chars(s, is[i].kind));
    pdr__jj_fail(r, PDR_EINVAL, "str.%s() is not supported", n);
}
