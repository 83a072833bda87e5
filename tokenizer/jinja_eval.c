/*
 * The Jinja evaluator: expressions to values (Python's arithmetic, comparisons and truth, jinja2's
 * undefined names) and statements to output (if, for with loop variables, break and continue, set,
 * namespaces, macros, filter and set blocks). Scopes follow jinja2: a for loop's body gets a fresh scope
 * each iteration (a name set there is gone at the next), a macro's body one of its own whose parent is
 * where the macro was defined, and if blocks none. Runs on the rendering thread, within one render.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "jinja_internal.h"

enum { RUN_NEXT, RUN_BREAK, RUN_CONTINUE };

static int exec_list(jj_render_t *r, const jj_stmt_t *s);

static jj_val_t lookup(jj_render_t *r, const jj_str_t *name)
{
    for (jj_scope_t *sc = r->scope; sc != NULL; sc = sc->parent) {
        jj_val_t *v = pdr__jj_dict_gets(&sc->vars, name->p, name->len);
        if (v != NULL)
            return *v;
    }
    return pdr__jj_undef(name);
}

static void assign(jj_render_t *r, jj_scope_t *sc, const jj_str_t *name, jj_val_t v)
{
    pdr__jj_dict_set(r, &sc->vars, pdr__jj_strv(name), v);
}

_Noreturn static void fail_undef(jj_render_t *r, jj_val_t v)
{
    if (v.u.s != NULL)
        pdr__jj_fail(r, PDR_EINVAL, "'%s' is undefined", v.u.s->p);
    pdr__jj_fail(r, PDR_EINVAL, "use of an undefined value");
}

static int is_int(jj_val_t v)
{
    return v.type == JV_INT || v.type == JV_BOOL;
}

static int is_number(jj_val_t v)
{
    return is_int(v) || v.type == JV_FLOAT;
}

static double as_f(jj_val_t v)
{
    return v.type == JV_FLOAT ? v.u.f : (double)v.u.i;
}

_Noreturn static void bad_operands(jj_render_t *r, int op, jj_val_t a, jj_val_t b)
{
    if (a.type == JV_UNDEF)
        fail_undef(r, a);
    if (b.type == JV_UNDEF)
        fail_undef(r, b);
    char ops[3] = {(char)op, 0, 0};
    if (op == 'f' || op == 'p')
        ops[0] = ops[1] = op == 'f' ? '/' : '*';
    pdr__jj_fail(r, PDR_EINVAL, "unsupported operand type(s) for %s: '%s' and '%s'", ops,
                 pdr__jj_type_name(a), pdr__jj_type_name(b));
}

/* markupsafe's escape: & < > " ' as entities. */
static jj_val_t html_escape(jj_render_t *r, jj_val_t s)
{
    jj_out_t o = {0};
    size_t run = 0;
    for (size_t i = 0; i < s.u.s->len; i++) {
        const char *e = NULL;
        switch (s.u.s->p[i]) {
        case '&':
            e = "&amp;";
            break;
        case '<':
            e = "&lt;";
            break;
        case '>':
            e = "&gt;";
            break;
        case '"':
            e = "&#34;";
            break;
        case '\'':
            e = "&#39;";
            break;
        default:
            continue;
        }
        pdr__jj_out_put(r, &o, s.u.s->p + run, i - run);
        pdr__jj_out_put(r, &o, e, strlen(e));
        run = i + 1;
    }
    if (run == 0)
        return s;
    pdr__jj_out_put(r, &o, s.u.s->p + run, s.u.s->len - run);
    return pdr__jj_cstr(r, o.p, o.len);
}

static jj_val_t repeat(jj_render_t *r, jj_val_t seq, int64_t n)
{
    if (n < 0)
        n = 0;
    if (seq.type == JV_STR) {
        size_t len = seq.u.s->len;
        if (len && (uint64_t)n > r->t->limits.max_output_bytes / len)
            pdr__jj_fail(r, PDR_ETOOBIG, "a repeated string passes the output limit of %zu bytes",
                         r->t->limits.max_output_bytes);
        jj_out_t o = {0};
        for (int64_t i = 0; i < n; i++)
            pdr__jj_out_put(r, &o, seq.u.s->p, len);
        jj_val_t v = pdr__jj_cstr(r, o.p ? o.p : "", o.len);
        v.flags = seq.flags & JF_SAFE;
        return v;
    }
    size_t len = seq.u.l->n;
    if (len && (uint64_t)n > r->t->limits.max_loop_iterations / len)
        pdr__jj_fail(r, PDR_ETOOBIG, "a repeated list passes the iteration limit");
    jj_list_t *l = pdr__jj_list_new(r, len * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        if (len)
            memcpy(l->v + (size_t)i * len, seq.u.l->v, len * sizeof(*l->v));
    return pdr__jj_listv(l, seq.flags & JF_TUPLE);
}

jj_val_t pdr__jj_binop(jj_render_t *r, int op, jj_val_t a, jj_val_t b)
{
    if (op == '~') {
        jj_val_t x = pdr__jj_tostr(r, a), y = pdr__jj_tostr(r, b);
        jj_out_t o = {0};
        pdr__jj_out_put(r, &o, x.u.s->p, x.u.s->len);
        pdr__jj_out_put(r, &o, y.u.s->p, y.u.s->len);
        return pdr__jj_cstr(r, o.p ? o.p : "", o.len);
    }
    if (is_number(a) && is_number(b)) {
        int ints = is_int(a) && is_int(b);
        int64_t x = a.u.i, y = b.u.i, z;
        double fx = as_f(a), fy = as_f(b);
        switch (op) {
        case '+':
            if (ints && __builtin_add_overflow(x, y, &z))
                break;
            return ints ? pdr__jj_int(z) : pdr__jj_float(fx + fy);
        case '-':
            if (ints && __builtin_sub_overflow(x, y, &z))
                break;
            return ints ? pdr__jj_int(z) : pdr__jj_float(fx - fy);
        case '*':
            if (ints && __builtin_mul_overflow(x, y, &z))
                break;
            return ints ? pdr__jj_int(z) : pdr__jj_float(fx * fy);
        case '/':
            if (fy == 0)
                pdr__jj_fail(r, PDR_EINVAL, "division by zero");
            return pdr__jj_float(fx / fy);
        case 'f':
        case '%':
            if (ints ? y == 0 : fy == 0)
                pdr__jj_fail(r, PDR_EINVAL, "integer division or modulo by zero");
            if (ints) {
                if (x == INT64_MIN && y == -1)
                    break;
                int64_t q = x / y, m = x % y;
                if (m != 0 && ((m < 0) != (y < 0))) {
                    q--;
                    m += y;
                }
                return pdr__jj_int(op == 'f' ? q : m);
            } else {
                double m = fmod(fx, fy);
                if (m != 0 && ((m < 0) != (fy < 0)))
                    m += fy;
                return pdr__jj_float(op == 'f' ? floor(fx / fy) : m);
            }
        case 'p':
            if (ints && y >= 0) {
                int64_t acc = 1;
                for (int64_t i = 0; i < y; i++) {
                    if (__builtin_mul_overflow(acc, x, &acc))
                        pdr__jj_fail(r, PDR_EINVAL, "integer power out of range");
                    if (acc == 0 || acc == 1)
                        break;
                    if (acc == -1 && i + 1 < y) {
                        acc = ((y - i - 1) % 2) ? 1 : -1;
                        break;
                    }
                }
                return pdr__jj_int(acc);
            }
            if (fx == 0 && fy < 0)
                pdr__jj_fail(r, PDR_EINVAL, "zero to a negative power");
            return pdr__jj_float(pow(fx, fy));
        }
        pdr__jj_fail(r, PDR_EINVAL, "integer out of range");
    }
    if (op == '+' && a.type == JV_STR && b.type == JV_STR) {
        if (!((a.flags | b.flags) & JF_SAFE))
            return pdr__jj_binop(r, '~', a, b);
        /* Markup + str escapes the str (markupsafe), with or without autoescaping. */
        jj_val_t v = pdr__jj_binop(r, '~', a.flags & JF_SAFE ? a : html_escape(r, a),
                                   b.flags & JF_SAFE ? b : html_escape(r, b));
        v.flags = JF_SAFE;
        return v;
    }
    if (op == '+' && a.type == JV_LIST && b.type == JV_LIST && (a.flags & JF_TUPLE) == (b.flags & JF_TUPLE)) {
        jj_list_t *l = pdr__jj_list_new(r, a.u.l->n + b.u.l->n);
        if (a.u.l->n)
            memcpy(l->v, a.u.l->v, a.u.l->n * sizeof(*l->v));
        if (b.u.l->n)
            memcpy(l->v + a.u.l->n, b.u.l->v, b.u.l->n * sizeof(*l->v));
        return pdr__jj_listv(l, a.flags & JF_TUPLE);
    }
    if (op == '*' && (a.type == JV_STR || a.type == JV_LIST) && is_int(b))
        return repeat(r, a, b.u.i);
    if (op == '*' && (b.type == JV_STR || b.type == JV_LIST) && is_int(a))
        return repeat(r, b, a.u.i);
    bad_operands(r, op, a, b);
}

static int contains(jj_render_t *r, jj_val_t item, jj_val_t c)
{
    if (c.type == JV_STR) {
        if (item.type != JV_STR)
            pdr__jj_fail(r, PDR_EINVAL, "'in <string>' requires string as left operand, not %s",
                         pdr__jj_type_name(item));
        if (item.u.s->len == 0)
            return 1;
        return pdr__jj_find(c.u.s->p, c.u.s->len, item.u.s->p, item.u.s->len) != NULL;
    }
    if (c.type == JV_DICT && !(c.flags & JF_NS))
        return pdr__jj_dict_get(c.u.d, item) != NULL;
    jj_list_t *l = pdr__jj_iterate(r, c);
    for (size_t i = 0; i < l->n; i++)
        if (pdr__jj_equal(l->v[i], item))
            return 1;
    return 0;
}

static int compare(jj_render_t *r, int op, jj_val_t a, jj_val_t b)
{
    switch (op) {
    case 'e':
        return pdr__jj_equal(a, b);
    case 'n':
        return !pdr__jj_equal(a, b);
    case 'i':
        return contains(r, a, b);
    case 'I':
        return !contains(r, a, b);
    }
    if (a.type == JV_UNDEF)
        fail_undef(r, a);
    if (b.type == JV_UNDEF)
        fail_undef(r, b);
    int c = pdr__jj_compare(r, a, b);
    return op == '<' ? c < 0 : op == 'l' ? c <= 0 : op == '>' ? c > 0 : c >= 0;
}

static void eval_args(jj_render_t *r, const jj_expr_t *e, jj_args_t *a, jj_val_t *first)
{
    uint32_t extra = first != NULL;
    a->npos = e->nargs + extra;
    a->nkw = e->nkw;
    a->pos = a->npos ? pdr__jj_ralloc(r, a->npos * sizeof(*a->pos)) : NULL;
    a->kwv = a->nkw ? pdr__jj_ralloc(r, a->nkw * sizeof(*a->kwv)) : NULL;
    a->kwn = e->kwn;
    if (first != NULL)
        a->pos[0] = *first;
    for (uint32_t i = 0; i < e->nargs; i++)
        a->pos[i + extra] = pdr__jj_eval(r, e->args[i]);
    for (uint32_t i = 0; i < e->nkw; i++)
        a->kwv[i] = pdr__jj_eval(r, e->kwv[i]);
}

static jj_val_t apply_filter(jj_render_t *r, const jj_expr_t *e, jj_val_t v)
{
    jj_args_t a;
    eval_args(r, e, &a, NULL);
    r->pos = e->pos;
    return pdr__jj_filter(r, e->name, v, &a);
}

/* A filter chain of a set or filter block, applied to the block's output. */
static jj_val_t apply_chain(jj_render_t *r, const jj_expr_t *e, jj_val_t in)
{
    jj_val_t v = e->a != NULL ? apply_chain(r, e->a, in) : in;
    return apply_filter(r, e, v);
}

static jj_val_t call(jj_render_t *r, const jj_expr_t *e)
{
    jj_val_t f = pdr__jj_eval(r, e->a);
    jj_args_t a;
    eval_args(r, e, &a, NULL);
    r->pos = e->pos;
    switch (f.type) {
    case JV_MACRO:
        return pdr__jj_call_macro(r, f.u.macro, &a);
    case JV_FUNC:
        return pdr__jj_call_func(r, (int)f.u.i, &a);
    case JV_METHOD:
        return pdr__jj_call_method(r, f.u.m, &a);
    case JV_UNDEF:
        fail_undef(r, f);
    default:
        pdr__jj_fail(r, PDR_EINVAL, "'%s' object is not callable", pdr__jj_type_name(f));
    }
}

static jj_val_t eval_list(jj_render_t *r, const jj_expr_t *e, int tuple)
{
    jj_list_t *l = pdr__jj_list_new(r, e->nargs);
    for (uint32_t i = 0; i < e->nargs; i++)
        l->v[i] = pdr__jj_eval(r, e->args[i]);
    return pdr__jj_listv(l, tuple);
}

static jj_val_t eval_inner(jj_render_t *r, const jj_expr_t *e)
{
    jj_val_t a, b;
    switch (e->kind) {
    case X_CONST:
        return e->value;
    case X_NAME:
        return lookup(r, e->name);
    case X_ATTR:
        a = pdr__jj_eval(r, e->a);
        r->pos = e->pos;
        return pdr__jj_getattr(r, a, e->name);
    case X_ITEM:
        a = pdr__jj_eval(r, e->a);
        b = pdr__jj_eval(r, e->b);
        r->pos = e->pos;
        return pdr__jj_getitem(r, a, b);
    case X_SLICE: {
        jj_val_t v[3], *p[3];
        a = pdr__jj_eval(r, e->a);
        for (int i = 0; i < 3; i++) {
            p[i] = NULL;
            if (e->args[i] != NULL) {
                v[i] = pdr__jj_eval(r, e->args[i]);
                p[i] = v[i].type == JV_NONE ? NULL : &v[i];
            }
        }
        r->pos = e->pos;
        return pdr__jj_slice(r, a, p[0], p[1], p[2]);
    }
    case X_CALL:
        return call(r, e);
    case X_FILTER:
        return apply_filter(r, e, pdr__jj_eval(r, e->a));
    case X_TEST: {
        jj_args_t args;
        a = pdr__jj_eval(r, e->a);
        eval_args(r, e, &args, NULL);
        r->pos = e->pos;
        return pdr__jj_bool(pdr__jj_test(r, e->name, a, &args));
    }
    case X_NEG:
    case X_POS:
        a = pdr__jj_eval(r, e->a);
        r->pos = e->pos;
        if (a.type == JV_FLOAT)
            return pdr__jj_float(e->kind == X_NEG ? -a.u.f : a.u.f);
        if (!is_int(a))
            bad_operands(r, '-', a, a);
        if (e->kind == X_NEG && a.u.i == INT64_MIN)
            pdr__jj_fail(r, PDR_EINVAL, "integer out of range");
        return pdr__jj_int(e->kind == X_NEG ? -a.u.i : a.u.i);
    case X_NOT:
        return pdr__jj_bool(!pdr__jj_truthy(r, pdr__jj_eval(r, e->a)));
    case X_AND:
        a = pdr__jj_eval(r, e->a);
        return pdr__jj_truthy(r, a) ? pdr__jj_eval(r, e->b) : a;
    case X_OR:
        a = pdr__jj_eval(r, e->a);
        return pdr__jj_truthy(r, a) ? a : pdr__jj_eval(r, e->b);
    case X_BIN:
        a = pdr__jj_eval(r, e->a);
        b = pdr__jj_eval(r, e->b);
        r->pos = e->pos;
        return pdr__jj_binop(r, e->op, a, b);
    case X_CMP:
        a = pdr__jj_eval(r, e->a);
        b = pdr__jj_eval(r, e->b);
        r->pos = e->pos;
        return pdr__jj_bool(compare(r, e->op, a, b));
    case X_COND:
        if (pdr__jj_truthy(r, pdr__jj_eval(r, e->a)))
            return pdr__jj_eval(r, e->b);
        return e->c != NULL ? pdr__jj_eval(r, e->c) : pdr__jj_undef(NULL);
    case X_LIST:
    case X_TUPLE:
        return eval_list(r, e, e->kind == X_TUPLE);
    case X_DICT: {
        jj_dict_t *d = pdr__jj_dict_new(r, e->nargs / 2);
        for (uint32_t i = 0; i + 1 < e->nargs; i += 2) {
            jj_val_t k = pdr__jj_eval(r, e->args[i]);
            if (k.type == JV_LIST && !(k.flags & JF_TUPLE))
                pdr__jj_fail(r, PDR_EINVAL, "unhashable type: 'list'");
            if (k.type == JV_DICT)
                pdr__jj_fail(r, PDR_EINVAL, "unhashable type: 'dict'");
            pdr__jj_dict_set(r, d, k, pdr__jj_eval(r, e->args[i + 1]));
        }
        return pdr__jj_dictv(d);
    }
    }
    pdr__jj_fail(r, PDR_EINVAL, "unknown expression");
}

jj_val_t pdr__jj_eval(jj_render_t *r, const jj_expr_t *e)
{
    r->pos = e->pos;
    if (++r->depth > r->t->limits.max_depth * 8)
        pdr__jj_fail(r, PDR_ETOOBIG, "evaluation nests deeper than %u", r->t->limits.max_depth * 8);
    jj_val_t v = eval_inner(r, e);
    r->depth--;
    return v;
}

/* Renders body into a string of its own (a macro call or a set or filter block). */
static jj_val_t capture(jj_render_t *r, const jj_stmt_t *body, jj_scope_t *sc)
{
    jj_out_t o = {0}, *saved = r->out;
    jj_scope_t *saved_scope = r->scope;
    r->out = &o;
    r->scope = sc;
    exec_list(r, body);
    r->out = saved;
    r->scope = saved_scope;
    return pdr__jj_cstr(r, o.p ? o.p : "", o.len);
}

jj_val_t pdr__jj_call_macro(jj_render_t *r, const jj_macro_t *m, const jj_args_t *a)
{
    const jj_stmt_t *s = m->s;
    uint32_t nparams = s->nnames - 1;
    if (a->npos > nparams)
        pdr__jj_fail(r, PDR_EINVAL, "macro '%s' takes not more than %u argument(s)", s->names[0]->p, nparams);
    jj_scope_t *sc = pdr__jj_ralloc(r, sizeof(*sc));
    memset(sc, 0, sizeof(*sc));
    sc->parent = m->scope;
    for (uint32_t k = 0; k < a->nkw; k++) {
        uint32_t i;
        for (i = 1; i < s->nnames; i++)
            if (strcmp(s->names[i]->p, a->kwn[k]->p) == 0)
                break;
        if (i == s->nnames || i - 1 < a->npos)
            pdr__jj_fail(r, PDR_EINVAL, "macro '%s' got an unexpected or repeated keyword argument '%s'",
                         s->names[0]->p, a->kwn[k]->p);
    }
    if (++r->depth > r->t->limits.max_depth * 8)
        pdr__jj_fail(r, PDR_ETOOBIG, "macro calls nest deeper than %u", r->t->limits.max_depth * 8);
    jj_scope_t *saved = r->scope;
    r->scope = sc;
    for (uint32_t i = 1; i < s->nnames; i++) {
        jj_val_t v = pdr__jj_undef(s->names[i]);
        const jj_val_t *given = NULL;
        if (i - 1 < a->npos)
            given = &a->pos[i - 1];
        for (uint32_t k = 0; k < a->nkw && given == NULL; k++)
            if (strcmp(s->names[i]->p, a->kwn[k]->p) == 0)
                given = &a->kwv[k];
        if (given != NULL)
            v = *given;
        else if (s->defaults[i] != NULL)
            v = pdr__jj_eval(r, s->defaults[i]);
        assign(r, sc, s->names[i], v);
    }
    r->scope = saved;
    jj_val_t out = capture(r, s->body, sc);
    r->depth--;
    return out;
}

static void bind_targets(jj_render_t *r, const jj_stmt_t *s, jj_scope_t *sc, jj_val_t v)
{
    if (s->nnames == 1) {
        assign(r, sc, s->names[0], v);
        return;
    }
    if (v.type != JV_LIST && v.type != JV_STR && v.type != JV_DICT)
        pdr__jj_fail(r, PDR_EINVAL, "cannot unpack non-iterable %s object", pdr__jj_type_name(v));
    jj_list_t *l = pdr__jj_iterate(r, v);
    if (l->n != s->nnames)
        pdr__jj_fail(r, PDR_EINVAL, "%s values to unpack (expected %u, got %zu)",
                     l->n > s->nnames ? "too many" : "not enough", s->nnames, l->n);
    for (uint32_t i = 0; i < s->nnames; i++)
        assign(r, sc, s->names[i], l->v[i]);
}

static void output(jj_render_t *r, jj_val_t v)
{
    pdr__jj_out_str(r, r->out, v);
}

/* The loop variable: one dict per loop whose values change in place at each iteration. */
static const char *const loop_keys[] = {"index",  "index0",   "revindex", "revindex0", "first", "last",
                                        "length", "previtem", "nextitem", "depth",     "depth0"};
enum {
    L_INDEX,
    L_INDEX0,
    L_REVINDEX,
    L_REVINDEX0,
    L_FIRST,
    L_LAST,
    L_LENGTH,
    L_PREV,
    L_NEXT,
    L_DEPTH,
    L_DEPTH0,
    L_N
};

static int exec_for(jj_render_t *r, const jj_stmt_t *s)
{
    jj_val_t it = pdr__jj_eval(r, s->expr);
    jj_list_t *items = pdr__jj_iterate(r, it);
    jj_scope_t *outer = r->scope;
    jj_scope_t *sc = pdr__jj_ralloc(r, sizeof(*sc));
    memset(sc, 0, sizeof(*sc));
    sc->parent = outer;
    if (s->cond != NULL) {
        jj_list_t *kept = pdr__jj_list_new(r, items->n);
        kept->n = 0;
        r->scope = sc;
        for (size_t i = 0; i < items->n; i++) {
            pdr__jj_count_iter(r, 1);
            sc->vars.n = 0;
            bind_targets(r, s, sc, items->v[i]);
            if (pdr__jj_truthy(r, pdr__jj_eval(r, s->cond)))
                kept->v[kept->n++] = items->v[i];
        }
        r->scope = outer;
        items = kept;
    }
    if (items->n == 0) {
        if (s->orelse != NULL)
            return exec_list(r, s->orelse);
        return RUN_NEXT;
    }
    jj_dict_t *loop = pdr__jj_dict_new(r, L_N);
    for (int k = 0; k < L_N; k++)
        pdr__jj_dict_set(r, loop, pdr__jj_cstr(r, loop_keys[k], strlen(loop_keys[k])), pdr__jj_none());
    static const jj_str_t loop_name = {4, {0}};
    const jj_str_t *lname = pdr__jj_str(r, "loop", 4);
    (void)loop_name;
    int64_t n = (int64_t)items->n;
    loop->v[L_LENGTH] = pdr__jj_int(n);
    loop->v[L_DEPTH] = pdr__jj_int(1);
    loop->v[L_DEPTH0] = pdr__jj_int(0);
    int status = RUN_NEXT;
    for (int64_t i = 0; i < n; i++) {
        r->pos = s->pos;
        pdr__jj_count_iter(r, 1);
        loop->v[L_INDEX] = pdr__jj_int(i + 1);
        loop->v[L_INDEX0] = pdr__jj_int(i);
        loop->v[L_REVINDEX] = pdr__jj_int(n - i);
        loop->v[L_REVINDEX0] = pdr__jj_int(n - i - 1);
        loop->v[L_FIRST] = pdr__jj_bool(i == 0);
        loop->v[L_LAST] = pdr__jj_bool(i == n - 1);
        loop->v[L_PREV] = i > 0 ? items->v[i - 1] : pdr__jj_undef(NULL);
        loop->v[L_NEXT] = i + 1 < n ? items->v[i + 1] : pdr__jj_undef(NULL);
        sc->vars.n = 0;
        assign(r, sc, lname, pdr__jj_dictv(loop));
        bind_targets(r, s, sc, items->v[i]);
        r->scope = sc;
        status = exec_list(r, s->body);
        r->scope = outer;
        if (status == RUN_BREAK)
            break;
    }
    return RUN_NEXT;
}

static void exec_set(jj_render_t *r, const jj_stmt_t *s)
{
    jj_val_t v = pdr__jj_eval(r, s->expr);
    r->pos = s->pos;
    if (s->attr != NULL) {
        jj_val_t ns = lookup(r, s->names[0]);
        if (ns.type != JV_DICT || !(ns.flags & JF_NS))
            pdr__jj_fail(r, PDR_EINVAL, "cannot assign attribute on non-namespace object");
        pdr__jj_dict_set(r, ns.u.d, pdr__jj_strv(s->attr), v);
        return;
    }
    bind_targets(r, s, r->scope, v);
}

static int exec_list(jj_render_t *r, const jj_stmt_t *s)
{
    for (; s != NULL; s = s->next) {
        r->pos = s->pos;
        switch (s->kind) {
        case S_TEXT:
            pdr__jj_out_put(r, r->out, s->text->p, s->text->len);
            break;
        case S_OUTPUT:
            output(r, pdr__jj_eval(r, s->expr));
            break;
        case S_IF: {
            int st;
            if (pdr__jj_truthy(r, pdr__jj_eval(r, s->expr)))
                st = exec_list(r, s->body);
            else
                st = exec_list(r, s->orelse);
            if (st != RUN_NEXT)
                return st;
            break;
        }
        case S_FOR:
            exec_for(r, s);
            break;
        case S_SET:
            exec_set(r, s);
            break;
        case S_SETBLOCK: {
            jj_val_t v = capture(r, s->body, r->scope);
            if (s->setfilter != NULL)
                v = apply_chain(r, s->setfilter, v);
            assign(r, r->scope, s->names[0], v);
            break;
        }
        case S_FILTER:
            output(r, apply_chain(r, s->expr, capture(r, s->body, r->scope)));
            break;
        case S_GENERATION: {
            /* A call block in jinja2: the body is a function, so what it sets stays inside. */
            jj_scope_t *sc = pdr__jj_ralloc(r, sizeof(*sc));
            memset(sc, 0, sizeof(*sc));
            sc->parent = r->scope;
            output(r, capture(r, s->body, sc));
            break;
        }
        case S_MACRO: {
            jj_macro_t *m = pdr__jj_ralloc(r, sizeof(*m));
            m->s = s;
            m->scope = r->scope;
            jj_val_t v = {.type = JV_MACRO};
            v.u.macro = m;
            assign(r, r->scope, s->names[0], v);
            break;
        }
        case S_BREAK:
            return RUN_BREAK;
        case S_CONTINUE:
            return RUN_CONTINUE;
        }
    }
    return RUN_NEXT;
}

void pdr__jj_exec(jj_render_t *r, const jj_stmt_t *s, jj_scope_t *sc)
{
    r->scope = sc;
    exec_list(r, s);
}
