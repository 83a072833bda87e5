/*
 * Attribute, item and slice access as jinja2's sandbox does them (an attribute of a dict is its method,
 * else its key; an item of a dict is its key, else its method; a missing one is undefined, but any access
 * on an undefined value is an error), and the methods of strings, dicts and lists that templates call.
 * The sandbox forbids the methods that change a list or a dict, so they are not here. Strings index and
 * slice by code point, as Python's do.
 */
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "jinja_internal.h"
#include "jinja_str.h"

static const char *const str_methods[] = {
    "capitalize", "count",        "endswith",     "find",    "format",  "index",  "isalnum",
    "isalpha",    "isdigit",      "islower",      "isspace", "isupper", "join",   "lower",
    "lstrip",     "removeprefix", "removesuffix", "replace", "rfind",   "rsplit", "rstrip",
    "split",      "splitlines",   "startswith",   "strip",   "title",   "upper",  NULL};
static const char *const dict_methods[] = {"copy", "get", "items", "keys", "values", NULL};
/* Python's dict methods that change the dict: the sandbox leaves them undefined. */
static const char *const dict_unsafe[] = {"clear",      "fromkeys", "pop", "popitem",
                                          "setdefault", "update",   NULL};
static const char *const list_methods[] = {"copy", "count", "index", NULL};

static const char *find_name(const char *const *names, const jj_str_t *name)
{
    for (size_t i = 0; names[i]; i++)
        if (strcmp(names[i], name->p) == 0)
            return names[i];
    return NULL;
}

static jj_val_t method(jj_render_t *r, jj_val_t self, const char *name)
{
    jj_method_t *m = pdr__jj_ralloc(r, sizeof(*m));
    m->self = self;
    m->name = name;
    jj_val_t v = {.type = JV_METHOD};
    v.u.m = m;
    return v;
}

_Noreturn static void undef_access(jj_render_t *r, jj_val_t v)
{
    if (v.u.s != NULL)
        pdr__jj_fail(r, PDR_EINVAL, "'%s' is undefined", v.u.s->p);
    pdr__jj_fail(r, PDR_EINVAL, "access to an attribute or item of an undefined value");
}

static jj_val_t attr_only(jj_render_t *r, jj_val_t obj, const jj_str_t *name, int *found)
{
    const char *m = NULL;
    *found = 1;
    if (obj.type == JV_STR)
        m = find_name(str_methods, name);
    else if (obj.type == JV_DICT && !(obj.flags & JF_NS)) {
        m = find_name(dict_methods, name);
        if (m == NULL && find_name(dict_unsafe, name) != NULL)
            return pdr__jj_undef(name);
    } else if (obj.type == JV_LIST && !(obj.flags & JF_TUPLE))
        m = find_name(list_methods, name);
    else if (obj.type == JV_LIST)
        m = strcmp(name->p, "count") == 0 ? "count" : strcmp(name->p, "index") == 0 ? "index" : NULL;
    if (m != NULL)
        return method(r, obj, m);
    *found = 0;
    return pdr__jj_undef(name);
}

jj_val_t pdr__jj_getattr(jj_render_t *r, jj_val_t obj, const jj_str_t *name)
{
    if (obj.type == JV_UNDEF)
        undef_access(r, obj);
    int found;
    jj_val_t v = attr_only(r, obj, name, &found);
    if (found)
        return v;
    if (obj.type == JV_DICT) {
        jj_val_t *x = pdr__jj_dict_gets(obj.u.d, name->p, name->len);
        if (x != NULL)
            return *x;
    }
    return pdr__jj_undef(name);
}

jj_val_t pdr__jj_getattr_only(jj_render_t *r, jj_val_t obj, const jj_str_t *name)
{
    if (obj.type == JV_UNDEF)
        undef_access(r, obj);
    int found;
    jj_val_t v = attr_only(r, obj, name, &found);
    if (!found && obj.type == JV_DICT && (obj.flags & JF_NS)) {
        jj_val_t *x = pdr__jj_dict_gets(obj.u.d, name->p, name->len);
        if (x != NULL)
            return *x;
    }
    return v;
}

jj_val_t pdr__jj_getitem(jj_render_t *r, jj_val_t obj, jj_val_t key)
{
    if (obj.type == JV_UNDEF)
        undef_access(r, obj);
    if (obj.type == JV_DICT) {
        jj_val_t *x = pdr__jj_dict_get(obj.u.d, key);
        if (x != NULL)
            return *x;
    } else if ((obj.type == JV_LIST || obj.type == JV_STR) && (key.type == JV_INT || key.type == JV_BOOL)) {
        int64_t n = pdr__jj_length(r, obj), i = key.u.i;
        if (i < 0)
            i += n;
        if (i < 0 || i >= n)
            return pdr__jj_undef(NULL);
        if (obj.type == JV_LIST)
            return obj.u.l->v[i];
        size_t a = pdr__jj_utf8_off(obj.u.s->p, obj.u.s->len, (size_t)i);
        size_t b = pdr__jj_utf8_off(obj.u.s->p, obj.u.s->len, (size_t)i + 1);
        return pdr__jj_cstr(r, obj.u.s->p + a, b - a);
    }
    if (key.type == JV_STR) {
        int found;
        jj_val_t v = attr_only(r, obj, key.u.s, &found);
        if (found)
            return v;
        return pdr__jj_undef(key.u.s);
    }
    return pdr__jj_undef(NULL);
}

static int64_t slice_index(jj_render_t *r, const jj_val_t *v)
{
    if (v->type != JV_INT && v->type != JV_BOOL)
        pdr__jj_fail(r, PDR_EINVAL, "slice indices must be integers or None");
    return v->u.i;
}

static int64_t clamp_bound(int64_t x, int64_t len, int64_t lower, int64_t upper)
{
    if (x < 0) {
        x += len;
        if (x < lower)
            x = lower;
    } else if (x > upper) {
        x = upper;
    }
    return x;
}

jj_val_t pdr__jj_slice(jj_render_t *r, jj_val_t obj, jj_val_t *lo, jj_val_t *hi, jj_val_t *step)
{
    if (obj.type == JV_UNDEF)
        undef_access(r, obj);
    if (obj.type != JV_LIST && obj.type != JV_STR)
        pdr__jj_fail(r, PDR_EINVAL, "'%s' object is not subscriptable", pdr__jj_type_name(obj));
    int64_t st = step ? slice_index(r, step) : 1;
    if (st == 0)
        pdr__jj_fail(r, PDR_EINVAL, "slice step cannot be zero");
    if (st == INT64_MIN)
        st = -INT64_MAX;
    int64_t len = pdr__jj_length(r, obj);
    int64_t lower = st < 0 ? -1 : 0, upper = st < 0 ? len - 1 : len;
    int64_t a = lo ? clamp_bound(slice_index(r, lo), len, lower, upper) : st < 0 ? upper : lower;
    int64_t b = hi ? clamp_bound(slice_index(r, hi), len, lower, upper) : st < 0 ? lower : upper;
    size_t count = 0;
    if (st > 0 && a < b)
        count = (size_t)((b - a - 1) / st + 1);
    else if (st < 0 && a > b)
        count = (size_t)((a - b - 1) / (-st) + 1);
    if (obj.type == JV_LIST) {
        jj_list_t *l = pdr__jj_list_new(r, count);
        for (size_t k = 0; k < count; k++)
            l->v[k] = obj.u.l->v[a + (int64_t)k * st];
        return pdr__jj_listv(l, obj.flags & JF_TUPLE);
    }
    const jj_str_t *s = obj.u.s;
    size_t *offs = pdr__jj_ralloc(r, ((size_t)len + 1) * sizeof(*offs)), c = 0;
    for (size_t i = 0; i < s->len; i++)
        if (((unsigned char)s->p[i] & 0xc0) != 0x80)
            offs[c++] = i;
    offs[c] = s->len;
    if (st == 1)
        return pdr__jj_cstr(r, s->p + offs[count ? a : 0], count ? offs[a + (int64_t)count] - offs[a] : 0);
    jj_out_t o = {0};
    for (size_t k = 0; k < count; k++) {
        int64_t i = a + (int64_t)k * st;
        pdr__jj_out_put(r, &o, s->p + offs[i], offs[i + 1] - offs[i]);
    }
    return pdr__jj_cstr(r, o.p ? o.p : "", o.len);
}

const jj_val_t *pdr__jj_arg(const jj_args_t *a, uint32_t i, const char *kw)
{
    if (i < a->npos)
        return &a->pos[i];
    for (uint32_t k = 0; kw != NULL && k < a->nkw; k++)
        if (strcmp(a->kwn[k]->p, kw) == 0)
            return &a->kwv[k];
    return NULL;
}

void pdr__jj_check_args(jj_render_t *r, const jj_method_t *m, const jj_args_t *a, uint32_t most)
{
    if (a->npos + a->nkw > most)
        pdr__jj_fail(r, PDR_EINVAL, "%s() takes at most %u argument(s)", m->name, most);
}

static jj_val_t dict_method(jj_render_t *r, const jj_method_t *m, const jj_args_t *a)
{
    jj_dict_t *d = m->self.u.d;
    const char *n = m->name;
    if (!strcmp(n, "get")) {
        pdr__jj_check_args(r, m, a, 2);
        const jj_val_t *k = pdr__jj_arg(a, 0, NULL), *def = pdr__jj_arg(a, 1, NULL);
        if (k == NULL)
            pdr__jj_fail(r, PDR_EINVAL, "get expected at least 1 argument");
        jj_val_t *v = pdr__jj_dict_get(d, *k);
        return v ? *v : def ? *def : pdr__jj_none();
    }
    pdr__jj_check_args(r, m, a, 0);
    if (!strcmp(n, "copy")) {
        jj_dict_t *c = pdr__jj_dict_new(r, d->n);
        for (size_t i = 0; i < d->n; i++)
            pdr__jj_dict_set(r, c, d->k[i], d->v[i]);
        return pdr__jj_dictv(c);
    }
    jj_list_t *l = pdr__jj_list_new(r, d->n);
    for (size_t i = 0; i < d->n; i++) {
        if (!strcmp(n, "keys")) {
            l->v[i] = d->k[i];
        } else if (!strcmp(n, "values")) {
            l->v[i] = d->v[i];
        } else {
            jj_list_t *t = pdr__jj_list_new(r, 2);
            t->v[0] = d->k[i];
            t->v[1] = d->v[i];
            l->v[i] = pdr__jj_listv(t, 1);
        }
    }
    return pdr__jj_listv(l, 0);
}

static jj_val_t list_method(jj_render_t *r, const jj_method_t *m, const jj_args_t *a)
{
    jj_list_t *l = m->self.u.l;
    if (!strcmp(m->name, "copy")) {
        pdr__jj_check_args(r, m, a, 0);
        return m->self;
    }
    pdr__jj_check_args(r, m, a, 1);
    const jj_val_t *x = pdr__jj_arg(a, 0, NULL);
    if (x == NULL)
        pdr__jj_fail(r, PDR_EINVAL, "%s() takes exactly one argument", m->name);
    int64_t count = 0;
    for (size_t i = 0; i < l->n; i++) {
        if (pdr__jj_equal(l->v[i], *x)) {
            if (!strcmp(m->name, "index"))
                return pdr__jj_int((int64_t)i);
            count++;
        }
    }
    if (!strcmp(m->name, "index"))
        pdr__jj_fail(r, PDR_EINVAL, "list.index(x): x not in list");
    return pdr__jj_int(count);
}

jj_val_t pdr__jj_call_method(jj_render_t *r, const jj_method_t *m, const jj_args_t *a)
{
    switch (m->self.type) {
    case JV_DICT:
        return dict_method(r, m, a);
    case JV_LIST:
        return list_method(r, m, a);
    default:
        return pdr__jj_str_method(r, m, a);
    }
}
