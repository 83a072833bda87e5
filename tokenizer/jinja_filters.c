/*
 * The filters of the Jinja engine, with jinja2's semantics (and transformers' tojson: json.dumps with
 * ensure_ascii=False, indent, sort_keys). The tests and the global functions are in jinja_tests.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "jinja_internal.h"
#include "jinja_str.h"

typedef jj_val_t (*filter_fn)(jj_render_t *r, jj_val_t v, const jj_args_t *a);

static const jj_str_t *want_str(jj_render_t *r, const jj_val_t *v, const char *what)
{
    if (v == NULL || v->type != JV_STR)
        pdr__jj_fail(r, PDR_EINVAL, "%s must be a string", what);
    return v->u.s;
}

static int64_t want_int(jj_render_t *r, const jj_val_t *v, int64_t def, const char *what)
{
    if (v == NULL)
        return def;
    if (v->type != JV_INT && v->type != JV_BOOL)
        pdr__jj_fail(r, PDR_EINVAL, "%s must be an integer", what);
    return v->u.i;
}

static int flag(jj_render_t *r, const jj_val_t *v)
{
    return v != NULL && pdr__jj_truthy(r, *v);
}

static jj_val_t f_trim(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    const jj_val_t *chars = pdr__jj_arg(a, 0, "chars");
    const jj_str_t *c = chars && chars->type != JV_NONE ? want_str(r, chars, "trim's chars") : NULL;
    jj_val_t out = pdr__jj_str_strip(r, pdr__jj_tostr(r, v).u.s, c, 1, 1);
    out.flags = v.type == JV_STR ? v.flags & JF_SAFE : 0;
    return out;
}

static jj_val_t f_length(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    (void)a;
    return pdr__jj_int(pdr__jj_length(r, v));
}

static jj_val_t f_tojson(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    const jj_val_t *ind = pdr__jj_arg(a, 0, "indent"), *sep = pdr__jj_arg(a, 2, "separators");
    const jj_val_t *asc = pdr__jj_arg(a, 1, "ensure_ascii"), *sort = pdr__jj_arg(a, 3, "sort_keys");
    if ((asc && pdr__jj_truthy(r, *asc)) || (sep && sep->type != JV_NONE))
        pdr__jj_fail(r, PDR_EINVAL, "tojson: ensure_ascii and separators are not supported");
    int indent = -1;
    if (ind != NULL && ind->type != JV_NONE) {
        int64_t n = want_int(r, ind, 0, "tojson's indent");
        indent = n < 0 ? 0 : n > 64 ? 64 : (int)n;
    }
    jj_out_t o = {0};
    pdr__jj_out_json(r, &o, v, indent, flag(r, sort), 0);
    return pdr__jj_cstr(r, o.p ? o.p : "", o.len);
}

static jj_val_t f_upper(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    (void)a;
    jj_val_t out = pdr__jj_str_case(r, pdr__jj_tostr(r, v).u.s, 'u');
    out.flags = v.type == JV_STR ? v.flags & JF_SAFE : 0;
    return out;
}

static jj_val_t f_lower(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    (void)a;
    jj_val_t out = pdr__jj_str_case(r, pdr__jj_tostr(r, v).u.s, 'l');
    out.flags = v.type == JV_STR ? v.flags & JF_SAFE : 0;
    return out;
}

static jj_val_t f_title(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    (void)a;
    jj_val_t out = pdr__jj_str_case(r, pdr__jj_tostr(r, v).u.s, 'T');
    out.flags = v.type == JV_STR ? v.flags & JF_SAFE : 0;
    return out;
}

static jj_val_t f_capitalize(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    (void)a;
    jj_val_t out = pdr__jj_str_case(r, pdr__jj_tostr(r, v).u.s, 'c');
    out.flags = v.type == JV_STR ? v.flags & JF_SAFE : 0;
    return out;
}

static jj_val_t f_default(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    const jj_val_t *d = pdr__jj_arg(a, 0, "default_value");
    int boolean = flag(r, pdr__jj_arg(a, 1, "boolean"));
    if (v.type == JV_UNDEF || (boolean && !pdr__jj_truthy(r, v)))
        return d ? *d : pdr__jj_cstr(r, "", 0);
    return v;
}

static jj_val_t attr_path(jj_render_t *r, jj_val_t v, const jj_str_t *path)
{
    /* "a.b.0": each part an attribute, or an index when it is a number (jinja2's make_attrgetter). */
    size_t i = 0;
    while (i <= path->len) {
        const char *dot = memchr(path->p + i, '.', path->len - i);
        size_t end = dot ? (size_t)(dot - path->p) : path->len;
        const jj_str_t *part = pdr__jj_str(r, path->p + i, end - i);
        char *stop;
        long long k = part->len ? strtoll(part->p, &stop, 10) : 0;
        if (part->len && *stop == '\0')
            v = pdr__jj_getitem(r, v, pdr__jj_int(k));
        else
            v = pdr__jj_getitem(r, v, pdr__jj_strv(part));
        i = end + 1;
        if (dot == NULL)
            break;
    }
    return v;
}

static jj_val_t f_join(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    const jj_val_t *d = pdr__jj_arg(a, 0, "d"), *attr = pdr__jj_arg(a, 1, "attribute");
    const jj_str_t *sep = d ? pdr__jj_tostr(r, *d).u.s : NULL;
    jj_list_t *l = pdr__jj_iterate(r, v);
    jj_out_t o = {0};
    for (size_t i = 0; i < l->n; i++) {
        if (i && sep)
            pdr__jj_out_put(r, &o, sep->p, sep->len);
        jj_val_t x = attr ? attr_path(r, l->v[i], want_str(r, attr, "join's attribute")) : l->v[i];
        pdr__jj_out_str(r, &o, x);
    }
    return pdr__jj_cstr(r, o.p ? o.p : "", o.len);
}

static jj_val_t f_replace(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    const jj_val_t *cnt = pdr__jj_arg(a, 2, "count");
    int64_t count = cnt && cnt->type != JV_NONE ? want_int(r, cnt, -1, "replace's count") : -1;
    return pdr__jj_str_replace(r, pdr__jj_tostr(r, v).u.s,
                               want_str(r, pdr__jj_arg(a, 0, "old"), "replace's old"),
                               want_str(r, pdr__jj_arg(a, 1, "new"), "replace's new"), count);
}

static jj_val_t f_first(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    (void)a;
    jj_list_t *l = pdr__jj_iterate(r, v);
    return l->n ? l->v[0] : pdr__jj_undef(NULL);
}

static jj_val_t f_last(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    (void)a;
    jj_list_t *l = pdr__jj_iterate(r, v);
    return l->n ? l->v[l->n - 1] : pdr__jj_undef(NULL);
}

static jj_val_t f_list(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    (void)a;
    jj_list_t *l = pdr__jj_iterate(r, v);
    jj_list_t *c = pdr__jj_list_new(r, l->n);
    if (l->n)
        memcpy(c->v, l->v, l->n * sizeof(*c->v));
    return pdr__jj_listv(c, 0);
}

static jj_val_t f_items(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    (void)a;
    if (v.type == JV_UNDEF)
        return pdr__jj_listv(pdr__jj_list_new(r, 0), 0);
    if (v.type != JV_DICT || (v.flags & JF_NS))
        pdr__jj_fail(r, PDR_EINVAL, "items: can only get item pairs from a mapping");
    jj_method_t m = {.self = v, .name = "items"};
    jj_args_t none = {0};
    return pdr__jj_call_method(r, &m, &none);
}

static jj_val_t f_string(jj_render_t *r, jj_val_t v, const jj_args_t *a)
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

static jj_val_t f_int(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    const jj_val_t *d = pdr__jj_arg(a, 0, "default");
    jj_val_t def = d ? *d : pdr__jj_int(0);
    int64_t i;
    double f;
    (void)r;
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

static jj_val_t f_float(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    const jj_val_t *d = pdr__jj_arg(a, 0, "default");
    jj_val_t def = d ? *d : pdr__jj_float(0);
    int64_t i;
    double f;
    (void)r;
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

static jj_val_t f_abs(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    (void)a;
    if (v.type == JV_FLOAT)
        return pdr__jj_float(fabs(v.u.f));
    if (v.type != JV_INT && v.type != JV_BOOL)
        pdr__jj_fail(r, PDR_EINVAL, "bad operand type for abs(): '%s'", pdr__jj_type_name(v));
    if (v.u.i == INT64_MIN)
        pdr__jj_fail(r, PDR_EINVAL, "integer out of range");
    return pdr__jj_int(v.u.i < 0 ? -v.u.i : v.u.i);
}

static jj_val_t f_round(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    int64_t prec = want_int(r, pdr__jj_arg(a, 0, "precision"), 0, "round's precision");
    const jj_val_t *mv = pdr__jj_arg(a, 1, "method");
    const char *method = mv ? want_str(r, mv, "round's method")->p : "common";
    if (strcmp(method, "common") && strcmp(method, "floor") && strcmp(method, "ceil"))
        pdr__jj_fail(r, PDR_EINVAL, "method must be common, ceil or floor");
    if (v.type == JV_INT || v.type == JV_BOOL)
        return method[0] == 'c' && method[1] == 'o' ? pdr__jj_int(v.u.i) : pdr__jj_float((double)v.u.i);
    if (v.type != JV_FLOAT)
        pdr__jj_fail(r, PDR_EINVAL, "round: a number is required, not %s", pdr__jj_type_name(v));
    if (prec < 0 || prec > 300 || !isfinite(v.u.f))
        pdr__jj_fail(r, PDR_EINVAL, "round: precision out of the supported range");
    if (method[0] == 'c' && method[1] == 'o') {
        /* Python's round(): the correctly rounded decimal, ties to even, as printf's %.Nf gives. */
        char buf[512];
        snprintf(buf, sizeof(buf), "%.*f", (int)prec, v.u.f);
        return pdr__jj_float(strtod(buf, NULL));
    }
    double p = pow(10, (double)prec);
    return pdr__jj_float((method[0] == 'f' ? floor(v.u.f * p) : ceil(v.u.f * p)) / p);
}

static jj_val_t f_safe(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    (void)a;
    jj_val_t s = pdr__jj_tostr(r, v);
    s.flags = JF_SAFE;
    return s;
}

/* The test or filter that select/reject/map apply, named by the first argument at index. */
static jj_args_t rest_args(const jj_args_t *a, uint32_t from)
{
    jj_args_t b = *a;
    b.npos = a->npos > from ? a->npos - from : 0;
    b.pos = a->npos > from ? a->pos + from : NULL;
    return b;
}

static jj_val_t select_common(jj_render_t *r, jj_val_t v, const jj_args_t *a, int attr, int keep)
{
    jj_list_t *l = pdr__jj_iterate(r, v);
    const jj_str_t *path = attr ? want_str(r, pdr__jj_arg(a, 0, NULL), "the attribute") : NULL;
    uint32_t ti = attr ? 1 : 0;
    const jj_val_t *tv = pdr__jj_arg(a, ti, NULL);
    const jj_str_t *test = tv ? want_str(r, tv, "the test's name") : NULL;
    if (test != NULL && !pdr__jj_have_test(test->p, test->len))
        pdr__jj_fail(r, PDR_EINVAL, "no test named '%s'", test->p);
    jj_args_t targs = rest_args(a, ti + 1);
    targs.nkw = 0;
    jj_list_t *out = pdr__jj_list_new(r, l->n);
    out->n = 0;
    pdr__jj_count_iter(r, l->n);
    for (size_t i = 0; i < l->n; i++) {
        jj_val_t x = path ? attr_path(r, l->v[i], path) : l->v[i];
        int ok = test ? pdr__jj_test(r, test, x, &targs) : pdr__jj_truthy(r, x);
        if (ok == keep)
            out->v[out->n++] = l->v[i];
    }
    return pdr__jj_listv(out, 0);
}

static jj_val_t f_select(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    return select_common(r, v, a, 0, 1);
}

static jj_val_t f_reject(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    return select_common(r, v, a, 0, 0);
}

static jj_val_t f_selectattr(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    return select_common(r, v, a, 1, 1);
}

static jj_val_t f_rejectattr(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    return select_common(r, v, a, 1, 0);
}

static jj_val_t f_map(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    jj_list_t *l = pdr__jj_iterate(r, v);
    const jj_val_t *attr = pdr__jj_arg(a, UINT32_MAX, "attribute"),
                   *def = pdr__jj_arg(a, UINT32_MAX, "default");
    const jj_str_t *filter = NULL;
    if (attr == NULL) {
        filter = want_str(r, pdr__jj_arg(a, 0, NULL), "map's filter name");
        if (!pdr__jj_have_filter(filter->p, filter->len))
            pdr__jj_fail(r, PDR_EINVAL, "no filter named '%s'", filter->p);
    }
    jj_args_t fargs = rest_args(a, 1);
    jj_list_t *out = pdr__jj_list_new(r, l->n);
    pdr__jj_count_iter(r, l->n);
    for (size_t i = 0; i < l->n; i++) {
        if (filter != NULL) {
            out->v[i] = pdr__jj_filter(r, filter, l->v[i], &fargs);
        } else {
            jj_val_t x = attr_path(r, l->v[i], want_str(r, attr, "map's attribute"));
            out->v[i] = x.type == JV_UNDEF && def ? *def : x;
        }
    }
    return pdr__jj_listv(out, 0);
}

/* Sort keys: the item, or its attribute, lowercased when a string and not case sensitive. */
typedef struct {
    jj_val_t key, item;
    size_t at;
} sort_item_t;

static sort_item_t *sort_keys(jj_render_t *r, jj_list_t *l, const jj_args_t *a, int key_arg)
{
    int cs = flag(r, pdr__jj_arg(a, key_arg, "case_sensitive"));
    const jj_val_t *attr = pdr__jj_arg(a, key_arg + 1, "attribute");
    sort_item_t *it = pdr__jj_ralloc(r, (l->n ? l->n : 1) * sizeof(*it));
    for (size_t i = 0; i < l->n; i++) {
        jj_val_t k = attr && attr->type != JV_NONE ? attr_path(r, l->v[i], want_str(r, attr, "the attribute"))
                                                   : l->v[i];
        if (k.type == JV_STR && !cs)
            k = pdr__jj_str_case(r, k.u.s, 'l');
        it[i] = (sort_item_t){k, l->v[i], i};
    }
    return it;
}

/* Insertion sort with pdr__jj_compare (which may fail and longjmp, so no qsort): stable, also reversed, as
 * Python's sorted(); the lists of chat templates are short, and the iteration limit bounds the rest. */
static jj_val_t sorted_list(jj_render_t *r, sort_item_t *it, size_t n, int rev)
{
    pdr__jj_count_iter(r, n);
    for (size_t i = 1; i < n; i++) {
        sort_item_t x = it[i];
        size_t j = i;
        while (j > 0) {
            int c = pdr__jj_compare(r, it[j - 1].key, x.key);
            if (rev ? c >= 0 : c <= 0)
                break;
            it[j] = it[j - 1];
            j--;
            pdr__jj_count_iter(r, 1);
        }
        it[j] = x;
    }
    jj_list_t *out = pdr__jj_list_new(r, n);
    for (size_t i = 0; i < n; i++)
        out->v[i] = it[i].item;
    return pdr__jj_listv(out, 0);
}

static jj_val_t f_sort(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    jj_list_t *l = pdr__jj_iterate(r, v);
    int rev = flag(r, pdr__jj_arg(a, 0, "reverse"));
    return sorted_list(r, sort_keys(r, l, a, 1), l->n, rev);
}

static jj_val_t f_dictsort(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    if (v.type != JV_DICT || (v.flags & JF_NS))
        pdr__jj_fail(r, PDR_EINVAL, "dictsort: a mapping is required, not %s", pdr__jj_type_name(v));
    int cs = flag(r, pdr__jj_arg(a, 0, "case_sensitive")), rev = flag(r, pdr__jj_arg(a, 2, "reverse"));
    const jj_val_t *by = pdr__jj_arg(a, 1, "by");
    int by_value = 0;
    if (by != NULL) {
        const char *b = want_str(r, by, "dictsort's by")->p;
        if (strcmp(b, "key") != 0 && strcmp(b, "value") != 0)
            pdr__jj_fail(r, PDR_EINVAL, "dictsort: you can only sort by either \"key\" or \"value\"");
        by_value = b[0] == 'v';
    }
    jj_dict_t *d = v.u.d;
    sort_item_t *it = pdr__jj_ralloc(r, (d->n ? d->n : 1) * sizeof(*it));
    for (size_t i = 0; i < d->n; i++) {
        jj_list_t *t = pdr__jj_list_new(r, 2);
        t->v[0] = d->k[i];
        t->v[1] = d->v[i];
        jj_val_t k = by_value ? d->v[i] : d->k[i];
        if (k.type == JV_STR && !cs)
            k = pdr__jj_str_case(r, k.u.s, 'l');
        it[i] = (sort_item_t){k, pdr__jj_listv(t, 1), i};
    }
    return sorted_list(r, it, d->n, rev);
}

static jj_val_t f_unique(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    jj_list_t *l = pdr__jj_iterate(r, v);
    sort_item_t *it = sort_keys(r, l, a, 0);
    jj_list_t *out = pdr__jj_list_new(r, l->n);
    out->n = 0;
    pdr__jj_count_iter(r, l->n);
    for (size_t i = 0; i < l->n; i++) {
        size_t j;
        for (j = 0; j < i; j++)
            if (pdr__jj_equal(it[j].key, it[i].key))
                break;
        if (j == i)
            out->v[out->n++] = it[i].item;
        pdr__jj_count_iter(r, i / 64);
    }
    return pdr__jj_listv(out, 0);
}

static jj_val_t f_reverse(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    (void)a;
    if (v.type == JV_STR) {
        jj_val_t m1 = pdr__jj_int(-1);
        return pdr__jj_slice(r, v, NULL, NULL, &m1);
    }
    jj_list_t *l = pdr__jj_iterate(r, v);
    jj_list_t *out = pdr__jj_list_new(r, l->n);
    for (size_t i = 0; i < l->n; i++)
        out->v[i] = l->v[l->n - 1 - i];
    return pdr__jj_listv(out, 0);
}

static jj_val_t f_indent(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    const jj_val_t *w = pdr__jj_arg(a, 0, "width");
    int first = flag(r, pdr__jj_arg(a, 1, "first")), blank = flag(r, pdr__jj_arg(a, 2, "blank"));
    const jj_str_t *pad;
    if (w != NULL && w->type == JV_STR) {
        pad = w->u.s;
    } else {
        int64_t n = want_int(r, w, 4, "indent's width");
        if (n < 0)
            n = 0;
        if (n > 1024)
            pdr__jj_fail(r, PDR_EINVAL, "indent: width above 1024");
        char *sp = pdr__jj_ralloc(r, (size_t)n + 1);
        memset(sp, ' ', (size_t)n);
        pad = pdr__jj_str(r, sp, (size_t)n);
    }
    const jj_str_t *s = pdr__jj_tostr(r, v).u.s;
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

static jj_val_t f_wordcount(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    (void)a;
    const jj_str_t *s = pdr__jj_tostr(r, v).u.s;
    int64_t n = 0;
    int in = 0;
    for (size_t i = 0; i < s->len; i++) {
        unsigned char c = (unsigned char)s->p[i];
        int word = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                   c >= 0x80;
        n += word && !in;
        in = word;
    }
    return pdr__jj_int(n);
}

static jj_val_t f_attr(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    return pdr__jj_getattr_only(r, v, want_str(r, pdr__jj_arg(a, 0, "name"), "attr's name"));
}

static jj_val_t f_center(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    int64_t w = want_int(r, pdr__jj_arg(a, 0, "width"), 80, "center's width");
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

static jj_val_t minmax(jj_render_t *r, jj_val_t v, const jj_args_t *a, int want)
{
    jj_list_t *l = pdr__jj_iterate(r, v);
    if (l->n == 0)
        return pdr__jj_undef(NULL);
    sort_item_t *it = sort_keys(r, l, a, 0);
    size_t best = 0;
    for (size_t i = 1; i < l->n; i++)
        if (pdr__jj_compare(r, it[i].key, it[best].key) == want)
            best = i;
    return it[best].item;
}

static jj_val_t f_min(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    return minmax(r, v, a, -1);
}

static jj_val_t f_max(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    return minmax(r, v, a, 1);
}

static jj_val_t f_sum(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    jj_list_t *l = pdr__jj_iterate(r, v);
    const jj_val_t *attr = pdr__jj_arg(a, 0, "attribute"), *start = pdr__jj_arg(a, 1, "start");
    jj_val_t acc = start ? *start : pdr__jj_int(0);
    for (size_t i = 0; i < l->n; i++)
        acc = pdr__jj_binop(
            r, '+', acc,
            attr && attr->type != JV_NONE ? attr_path(r, l->v[i], want_str(r, attr, "attribute")) : l->v[i]);
    return acc;
}

static const struct {
    const char *name;
    filter_fn fn;
} filters[] = {{"abs", f_abs},
               {"attr", f_attr},
               {"capitalize", f_capitalize},
               {"center", f_center},
               {"count", f_length},
               {"d", f_default},
               {"default", f_default},
               {"dictsort", f_dictsort},
               {"first", f_first},
               {"float", f_float},
               {"indent", f_indent},
               {"int", f_int},
               {"items", f_items},
               {"join", f_join},
               {"last", f_last},
               {"length", f_length},
               {"list", f_list},
               {"lower", f_lower},
               {"map", f_map},
               {"max", f_max},
               {"min", f_min},
               {"reject", f_reject},
               {"rejectattr", f_rejectattr},
               {"replace", f_replace},
               {"reverse", f_reverse},
               {"round", f_round},
               {"safe", f_safe},
               {"select", f_select},
               {"selectattr", f_selectattr},
               {"sort", f_sort},
               {"string", f_string},
               {"sum", f_sum},
               {"title", f_title},
               {"tojson", f_tojson},
               {"trim", f_trim},
               {"unique", f_unique},
               {"upper", f_upper},
               {"wordcount", f_wordcount}};

static filter_fn find_filter(const char *name, size_t n)
{
    for (size_t i = 0; i < sizeof(filters) / sizeof(filters[0]); i++)
        if (strlen(filters[i].name) == n && memcmp(filters[i].name, name, n) == 0)
            return filters[i].fn;
    return NULL;
}

int pdr__jj_have_filter(const char *name, size_t n)
{
    return find_filter(name, n) != NULL;
}

jj_val_t pdr__jj_filter(jj_render_t *r, const jj_str_t *name, jj_val_t v, const jj_args_t *a)
{
    filter_fn fn = find_filter(name->p, name->len);
    if (fn == NULL)
        pdr__jj_fail(r, PDR_EINVAL, "no filter named '%s'", name->p);
    return fn(r, v, a);
}
