/*
 * The filters of the Jinja engine, with jinja2's semantics (and transformers' tojson: json.dumps with
 * ensure_ascii=False, indent, sort_keys); the string filters are in jinja_filters_text.c, the tests and
 * the global functions in jinja_tests.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "jinja_internal.h"
#include "jinja_filters.h"
#include "jinja_str.h"

typedef jj_val_t (*filter_fn)(jj_render_t *r, jj_val_t v, const jj_args_t *a);

const jj_str_t *pdr__jj_want_str(jj_render_t *r, const jj_val_t *v, const char *what)
{
    if (v == NULL || v->type != JV_STR)
        pdr__jj_fail(r, PDR_EINVAL, "%s must be a string", what);
    return v->u.s;
}

int64_t pdr__jj_want_int(jj_render_t *r, const jj_val_t *v, int64_t def, const char *what)
{
    if (v == NULL)
        return def;
    if (v->type != JV_INT && v->type != JV_BOOL)
        pdr__jj_fail(r, PDR_EINVAL, "%s must be an integer", what);
    return v->u.i;
}

_Noreturn void pdr__jj_undefined_use(jj_render_t *r, jj_val_t v)
{
    if (v.u.s != NULL)
        pdr__jj_fail(r, PDR_EINVAL, "'%s' is undefined", v.u.s->p);
    pdr__jj_fail(r, PDR_EINVAL, "use of an undefined value");
}

int pdr__jj_flag(jj_render_t *r, const jj_val_t *v)
{
    return v != NULL && pdr__jj_truthy(r, *v);
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
        int64_t n = pdr__jj_want_int(r, ind, 0, "tojson's indent");
        indent = n < 0 ? 0 : n > 64 ? 64 : (int)n;
    }
    jj_out_t o = {0};
    pdr__jj_out_json(r, &o, v, indent, pdr__jj_flag(r, sort), 0);
    return pdr__jj_cstr(r, o.p ? o.p : "", o.len);
}

static jj_val_t f_default(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    const jj_val_t *d = pdr__jj_arg(a, 0, "default_value");
    int boolean = pdr__jj_flag(r, pdr__jj_arg(a, 1, "boolean"));
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
        jj_val_t x = attr ? attr_path(r, l->v[i], pdr__jj_want_str(r, attr, "join's attribute")) : l->v[i];
        pdr__jj_out_str(r, &o, x);
    }
    return pdr__jj_cstr(r, o.p ? o.p : "", o.len);
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
    if (v.type != JV_DICT || (v.flags & JF_OBJECT))
        pdr__jj_fail(r, PDR_EINVAL, "items: can only get item pairs from a mapping");
    jj_method_t m = {.self = v, .name = "items"};
    jj_args_t none = {0};
    return pdr__jj_call_method(r, &m, &none);
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
    int64_t prec = pdr__jj_want_int(r, pdr__jj_arg(a, 0, "precision"), 0, "round's precision");
    const jj_val_t *mv = pdr__jj_arg(a, 1, "method");
    const char *method = mv ? pdr__jj_want_str(r, mv, "round's method")->p : "common";
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
    /* jinja2 iterates only a true value: none, false, 0 and '' give nothing. */
    jj_list_t *l = pdr__jj_truthy(r, v) ? pdr__jj_iterate(r, v) : pdr__jj_list_new(r, 0);
    const jj_str_t *path = attr ? pdr__jj_want_str(r, pdr__jj_arg(a, 0, NULL), "the attribute") : NULL;
    uint32_t ti = attr ? 1 : 0;
    const jj_val_t *tv = pdr__jj_arg(a, ti, NULL);
    const jj_str_t *test = tv ? pdr__jj_want_str(r, tv, "the test's name") : NULL;
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
    jj_list_t *l = pdr__jj_truthy(r, v) ? pdr__jj_iterate(r, v) : pdr__jj_list_new(r, 0);
    const jj_val_t *attr = pdr__jj_arg(a, UINT32_MAX, "attribute"),
                   *def = pdr__jj_arg(a, UINT32_MAX, "default");
    const jj_str_t *filter = NULL;
    if (attr == NULL) {
        filter = pdr__jj_want_str(r, pdr__jj_arg(a, 0, NULL), "map's filter name");
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
            jj_val_t x = attr_path(r, l->v[i], pdr__jj_want_str(r, attr, "map's attribute"));
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
    int cs = pdr__jj_flag(r, pdr__jj_arg(a, key_arg, "case_sensitive"));
    const jj_val_t *attr = pdr__jj_arg(a, key_arg + 1, "attribute");
    sort_item_t *it = pdr__jj_ralloc(r, (l->n ? l->n : 1) * sizeof(*it));
    for (size_t i = 0; i < l->n; i++) {
        jj_val_t k = attr && attr->type != JV_NONE
                         ? attr_path(r, l->v[i], pdr__jj_want_str(r, attr, "the attribute"))
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
    int rev = pdr__jj_flag(r, pdr__jj_arg(a, 0, "reverse"));
    return sorted_list(r, sort_keys(r, l, a, 1), l->n, rev);
}

static jj_val_t f_dictsort(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    if (v.type != JV_DICT || (v.flags & JF_OBJECT))
        pdr__jj_fail(r, PDR_EINVAL, "dictsort: a mapping is required, not %s", pdr__jj_type_name(v));
    int cs = pdr__jj_flag(r, pdr__jj_arg(a, 0, "case_sensitive")),
        rev = pdr__jj_flag(r, pdr__jj_arg(a, 2, "reverse"));
    const jj_val_t *by = pdr__jj_arg(a, 1, "by");
    int by_value = 0;
    if (by != NULL) {
        const char *b = pdr__jj_want_str(r, by, "dictsort's by")->p;
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
            if (pdr__jj_equal_r(r, it[j].key, it[i].key))
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

static jj_val_t f_attr(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    return pdr__jj_getattr_only(r, v, pdr__jj_want_str(r, pdr__jj_arg(a, 0, "name"), "attr's name"));
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
        acc = pdr__jj_binop(r, '+', acc,
                            attr && attr->type != JV_NONE
                                ? attr_path(r, l->v[i], pdr__jj_want_str(r, attr, "attribute"))
                                : l->v[i]);
    return acc;
}

static const struct {
    const char *name;
    filter_fn fn;
} filters[] = {{"abs", f_abs},
               {"attr", f_attr},
               {"capitalize", pdr__jj_f_capitalize},
               {"center", pdr__jj_f_center},
               {"count", f_length},
               {"d", f_default},
               {"default", f_default},
               {"dictsort", f_dictsort},
               {"first", f_first},
               {"float", pdr__jj_f_float},
               {"format", pdr__jj_f_format},
               {"indent", pdr__jj_f_indent},
               {"int", pdr__jj_f_int},
               {"items", f_items},
               {"join", f_join},
               {"last", f_last},
               {"length", f_length},
               {"list", f_list},
               {"lower", pdr__jj_f_lower},
               {"map", f_map},
               {"max", f_max},
               {"min", f_min},
               {"reject", f_reject},
               {"rejectattr", f_rejectattr},
               {"replace", pdr__jj_f_replace},
               {"reverse", f_reverse},
               {"round", f_round},
               {"safe", pdr__jj_f_safe},
               {"select", f_select},
               {"selectattr", f_selectattr},
               {"sort", f_sort},
               {"string", pdr__jj_f_string},
               {"sum", f_sum},
               {"title", pdr__jj_f_title},
               {"tojson", f_tojson},
               {"trim", pdr__jj_f_trim},
               {"unique", f_unique},
               {"upper", pdr__jj_f_upper},
               {"wordcount", pdr__jj_f_wordcount}};

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
