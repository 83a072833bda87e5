/*
 * The tests of the Jinja engine ("x is defined", "x is string"...), with jinja2's semantics: a boolean is a
 * number but not an integer, a string is a sequence, an undefined value is iterable and a sequence; and
 * the global functions: raise_exception(), strftime_now() (at the render's time, local time as Python's
 * datetime.now()), namespace(), range() (at most 100000 items, as jinja2's sandbox) and dict().
 */
#include <math.h>
#include <string.h>
#include <time.h>

#include "err.h"
#include "jinja_internal.h"

typedef int (*test_fn)(jj_render_t *r, jj_val_t v, const jj_args_t *a);

static jj_val_t other(jj_render_t *r, const jj_args_t *a)
{
    const jj_val_t *o = pdr__jj_arg(a, 0, NULL);
    if (o == NULL)
        pdr__jj_fail(r, PDR_EINVAL, "the test needs an argument");
    return *o;
}

static int t_defined(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    (void)r, (void)a;
    return v.type != JV_UNDEF;
}

static int t_undefined(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    (void)r, (void)a;
    return v.type == JV_UNDEF;
}

static int t_none(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    (void)r, (void)a;
    return v.type == JV_NONE;
}

static int t_boolean(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    (void)r, (void)a;
    return v.type == JV_BOOL;
}

static int t_true(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    (void)r, (void)a;
    return v.type == JV_BOOL && v.u.i;
}

static int t_false(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    (void)r, (void)a;
    return v.type == JV_BOOL && !v.u.i;
}

static int t_integer(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    (void)r, (void)a;
    return v.type == JV_INT;
}

static int t_float(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    (void)r, (void)a;
    return v.type == JV_FLOAT;
}

static int t_number(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    (void)r, (void)a;
    return v.type == JV_INT || v.type == JV_FLOAT || v.type == JV_BOOL;
}

static int t_string(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    (void)r, (void)a;
    return v.type == JV_STR;
}

static int t_mapping(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    (void)r, (void)a;
    return v.type == JV_DICT && !(v.flags & JF_NS);
}

static int t_iterable(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    (void)r, (void)a;
    return v.type == JV_UNDEF || v.type == JV_STR || v.type == JV_LIST ||
           (v.type == JV_DICT && !(v.flags & JF_NS));
}

static int t_callable(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    (void)r, (void)a;
    return v.type == JV_MACRO || v.type == JV_FUNC || v.type == JV_METHOD;
}

static int parity(jj_render_t *r, jj_val_t v)
{
    if (v.type != JV_INT && v.type != JV_BOOL)
        pdr__jj_fail(r, PDR_EINVAL, "odd and even need an integer, not %s", pdr__jj_type_name(v));
    return (int)(v.u.i & 1);
}

static int t_odd(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    (void)a;
    return parity(r, v);
}

static int t_even(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    (void)a;
    return !parity(r, v);
}

static int t_divisibleby(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    jj_val_t m = pdr__jj_binop(r, '%', v, other(r, a));
    return !pdr__jj_truthy(r, m);
}

static int t_eq(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    return pdr__jj_equal(v, other(r, a));
}

static int t_ne(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    return !pdr__jj_equal(v, other(r, a));
}

static int t_lt(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    return pdr__jj_compare(r, v, other(r, a)) < 0;
}

static int t_le(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    return pdr__jj_compare(r, v, other(r, a)) <= 0;
}

static int t_gt(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    return pdr__jj_compare(r, v, other(r, a)) > 0;
}

static int t_ge(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    return pdr__jj_compare(r, v, other(r, a)) >= 0;
}

static int t_in(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    jj_val_t c = other(r, a);
    if (c.type == JV_STR) {
        if (v.type != JV_STR)
            pdr__jj_fail(r, PDR_EINVAL, "'in <string>' requires string as left operand");
        return v.u.s->len == 0 || pdr__jj_find(c.u.s->p, c.u.s->len, v.u.s->p, v.u.s->len) != NULL;
    }
    if (c.type == JV_DICT && !(c.flags & JF_NS))
        return pdr__jj_dict_get(c.u.d, v) != NULL;
    jj_list_t *l = pdr__jj_iterate(r, c);
    for (size_t i = 0; i < l->n; i++)
        if (pdr__jj_equal(l->v[i], v))
            return 1;
    return 0;
}

static int t_sameas(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    jj_val_t o = other(r, a);
    if (v.type != o.type)
        return 0;
    if (v.type == JV_NONE || v.type == JV_UNDEF)
        return v.type == JV_NONE;
    if (v.type == JV_BOOL)
        return v.u.i == o.u.i;
    return (v.type == JV_LIST || v.type == JV_DICT || v.type == JV_STR) && v.u.l == o.u.l;
}

static int t_lower(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    (void)a;
    jj_val_t s = pdr__jj_tostr(r, v);
    int cased = 0;
    for (size_t i = 0; i < s.u.s->len; i++) {
        char c = s.u.s->p[i];
        if (c >= 'A' && c <= 'Z')
            return 0;
        cased |= c >= 'a' && c <= 'z';
    }
    return cased;
}

static int t_upper(jj_render_t *r, jj_val_t v, const jj_args_t *a)
{
    (void)a;
    jj_val_t s = pdr__jj_tostr(r, v);
    int cased = 0;
    for (size_t i = 0; i < s.u.s->len; i++) {
        char c = s.u.s->p[i];
        if (c >= 'a' && c <= 'z')
            return 0;
        cased |= c >= 'A' && c <= 'Z';
    }
    return cased;
}

static const struct {
    const char *name;
    test_fn fn;
} tests[] = {{"!=", t_ne},
             {"<", t_lt},
             {"<=", t_le},
             {"==", t_eq},
             {">", t_gt},
             {">=", t_ge},
             {"boolean", t_boolean},
             {"callable", t_callable},
             {"defined", t_defined},
             {"divisibleby", t_divisibleby},
             {"eq", t_eq},
             {"equalto", t_eq},
             {"even", t_even},
             {"false", t_false},
             {"float", t_float},
             {"ge", t_ge},
             {"greaterthan", t_gt},
             {"gt", t_gt},
             {"in", t_in},
             {"integer", t_integer},
             {"iterable", t_iterable},
             {"le", t_le},
             {"lessthan", t_lt},
             {"lower", t_lower},
             {"lt", t_lt},
             {"mapping", t_mapping},
             {"ne", t_ne},
             {"none", t_none},
             {"number", t_number},
             {"odd", t_odd},
             {"sameas", t_sameas},
             {"sequence", t_iterable},
             {"string", t_string},
             {"true", t_true},
             {"undefined", t_undefined},
             {"upper", t_upper}};

static test_fn find_test(const char *name, size_t n)
{
    for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++)
        if (strlen(tests[i].name) == n && memcmp(tests[i].name, name, n) == 0)
            return tests[i].fn;
    return NULL;
}

int pdr__jj_have_test(const char *name, size_t n)
{
    return find_test(name, n) != NULL;
}

int pdr__jj_test(jj_render_t *r, const jj_str_t *name, jj_val_t v, const jj_args_t *a)
{
    test_fn fn = find_test(name->p, name->len);
    if (fn == NULL)
        pdr__jj_fail(r, PDR_EINVAL, "no test named '%s'", name->p);
    return fn(r, v, a);
}

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

static jj_val_t fn_strftime(jj_render_t *r, const jj_args_t *a)
{
    const jj_str_t *fmt = want_str(r, pdr__jj_arg(a, 0, NULL), "strftime_now's format");
    if (fmt->len > 256 || memchr(fmt->p, '\0', fmt->len))
        pdr__jj_fail(r, PDR_EINVAL, "strftime_now: format longer than 256 bytes or with a NUL");
    time_t t = (time_t)r->now;
    struct tm tm;
    if (localtime_r(&t, &tm) == NULL)
        pdr__jj_fail(r, PDR_EINVAL, "strftime_now: time out of range");
    char buf[4096];
    /* The format is the template's, as Python's strftime takes it: glibc's strftime reads it safely. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    size_t n = fmt->len ? strftime(buf, sizeof(buf), fmt->p, &tm) : 0;
#pragma GCC diagnostic pop
    if (n == 0 && fmt->len)
        pdr__jj_fail(r, PDR_EINVAL, "strftime_now: the formatted time is empty or too long");
    return pdr__jj_cstr(r, buf, n);
}

jj_val_t pdr__jj_call_func(jj_render_t *r, int fn, const jj_args_t *a)
{
    switch (fn) {
    case JJ_FN_RAISE: {
        const jj_val_t *m = pdr__jj_arg(a, 0, NULL);
        jj_val_t s = m ? pdr__jj_tostr(r, *m) : pdr__jj_cstr(r, "", 0);
        pdr__jj_fail(r, PDR_EINVAL, "raise_exception: %s", s.u.s->p);
    }
    case JJ_FN_STRFTIME:
        return fn_strftime(r, a);
    case JJ_FN_NAMESPACE:
    case JJ_FN_DICT: {
        jj_dict_t *d = pdr__jj_dict_new(r, a->nkw + 1);
        for (uint32_t i = 0; i < a->npos; i++) {
            if (a->pos[i].type != JV_DICT)
                pdr__jj_fail(r, PDR_EINVAL, "%s: positional arguments must be mappings",
                             fn == JJ_FN_DICT ? "dict" : "namespace");
            jj_dict_t *src = a->pos[i].u.d;
            for (size_t k = 0; k < src->n; k++)
                pdr__jj_dict_set(r, d, src->k[k], src->v[k]);
        }
        for (uint32_t i = 0; i < a->nkw; i++)
            pdr__jj_dict_set(r, d, pdr__jj_strv(a->kwn[i]), a->kwv[i]);
        jj_val_t v = pdr__jj_dictv(d);
        v.flags = fn == JJ_FN_NAMESPACE ? JF_NS : 0;
        return v;
    }
    case JJ_FN_RANGE: {
        int64_t lo = 0, hi, step = 1;
        if (a->npos == 1) {
            hi = want_int(r, &a->pos[0], 0, "range's argument");
        } else if (a->npos == 2 || a->npos == 3) {
            lo = want_int(r, &a->pos[0], 0, "range's start");
            hi = want_int(r, &a->pos[1], 0, "range's stop");
            step = a->npos == 3 ? want_int(r, &a->pos[2], 1, "range's step") : 1;
        } else {
            pdr__jj_fail(r, PDR_EINVAL, "range expected 1 to 3 arguments");
        }
        if (step == 0)
            pdr__jj_fail(r, PDR_EINVAL, "range() arg 3 must not be zero");
        double count = step > 0 ? ceil(((double)hi - (double)lo) / (double)step)
                                : ceil(((double)lo - (double)hi) / -(double)step);
        if (count < 0)
            count = 0;
        if (count > 100000)
            pdr__jj_fail(r, PDR_ETOOBIG, "range too big, the limit is 100000 items");
        jj_list_t *l = pdr__jj_list_new(r, (size_t)count);
        for (size_t i = 0; i < l->n; i++)
            l->v[i] = pdr__jj_int(lo + (int64_t)i * step);
        return pdr__jj_listv(l, 0);
    }
    }
    pdr__jj_fail(r, PDR_EINVAL, "unknown function");
}
