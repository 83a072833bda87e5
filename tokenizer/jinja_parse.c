/*
 * The Jinja parser: tokens to the statement and expression tree, with jinja2's grammar and precedence
 * (conditional < or < and < not < comparisons < + - < ~ < * / // % < ** < unary - + < filters, tests and
 * calls < attribute, item and slice access). Runs at compile time only; nesting is bounded by the
 * template's max_depth. Names of filters and tests are checked here, as jinja2 does at compile time.
 */
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "jinja_internal.h"
#include "jinja_parse.h"

static jj_expr_t *parse_unary(jj_parser_t *p, int with_filter);

static jj_expr_t *node(jj_parser_t *p, int kind, uint32_t pos)
{
    jj_expr_t *e = pdr__jj_palloc(p, sizeof(*e));
    memset(e, 0, sizeof(*e));
    e->kind = (uint8_t)kind;
    e->pos = pos;
    return e;
}

static jj_expr_t *binary(jj_parser_t *p, int kind, int op, jj_expr_t *a, jj_expr_t *b)
{
    jj_expr_t *e = node(p, kind, a->pos);
    e->op = (uint8_t)op;
    e->a = a;
    e->b = b;
    return e;
}

/* Arguments of a call, filter or test, after its "(". */
static void parse_call_args(jj_parser_t *p, jj_expr_t *e)
{
    vec_t pos = {0}, kwn = {0}, kwv = {0};
    while (!is_op(p, ")")) {
        if (pos.n + kwn.n > 0)
            expect_op(p, ",");
        if (is_op(p, ")"))
            break;
        if (is_op(p, "*") || is_op(p, "**"))
            pdr__jj_perr(p, PDR_EINVAL, cur(p)->pos, "*args and **kwargs are not supported");
        if (cur(p)->type == JT_NAME && p->toks[p->cur + 1].type == JT_OP &&
            strcmp(p->toks[p->cur + 1].op, "=") == 0) {
            vec_push(p, &kwn, (void *)cur(p)->s);
            p->cur += 2;
            vec_push(p, &kwv, pdr__jj_parse_expr(p, 1));
        } else {
            if (kwn.n)
                pdr__jj_perr(p, PDR_EINVAL, cur(p)->pos, "positional argument after a keyword argument");
            vec_push(p, &pos, pdr__jj_parse_expr(p, 1));
        }
    }
    expect_op(p, ")");
    e->args = (jj_expr_t **)pos.v;
    e->nargs = pos.n;
    e->kwn = (const jj_str_t **)kwn.v;
    e->kwv = (jj_expr_t **)kwv.v;
    e->nkw = kwn.n;
}

static jj_expr_t *parse_primary(jj_parser_t *p)
{
    jj_tok_t *tk = cur(p);
    jj_expr_t *e;
    switch (tk->type) {
    case JT_NAME: {
        p->cur++;
        const char *s = tk->s->p;
        if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "false") || !strcmp(s, "False")) {
            e = node(p, X_CONST, tk->pos);
            e->value = pdr__jj_bool(s[0] == 't' || s[0] == 'T');
        } else if (!strcmp(s, "none") || !strcmp(s, "None")) {
            e = node(p, X_CONST, tk->pos);
            e->value = pdr__jj_none();
        } else {
            e = node(p, X_NAME, tk->pos);
            e->name = tk->s;
        }
        return e;
    }
    case JT_STR: {
        e = node(p, X_CONST, tk->pos);
        p->cur++;
        if (cur(p)->type != JT_STR) {
            e->value = pdr__jj_strv(tk->s);
            return e;
        }
        size_t total = tk->s->len, k = 0;
        for (size_t j = p->cur; p->toks[j].type == JT_STR; j++)
            total += p->toks[j].s->len;
        char *buf = pdr__jj_palloc(p, total + 1);
        memcpy(buf, tk->s->p, tk->s->len);
        k = tk->s->len;
        for (; cur(p)->type == JT_STR; p->cur++) {
            memcpy(buf + k, cur(p)->s->p, cur(p)->s->len);
            k += cur(p)->s->len;
        }
        e->value = pdr__jj_strv(pdr__jj_pstr(p, buf, k));
        return e;
    }
    case JT_INT:
    case JT_FLOAT:
        e = node(p, X_CONST, tk->pos);
        e->value = tk->type == JT_INT ? pdr__jj_int(tk->i) : pdr__jj_float(tk->f);
        p->cur++;
        return e;
    case JT_OP:
        if (is_op(p, "(")) {
            p->cur++;
            e = pdr__jj_parse_tuple(p, 1, 0, 1);
            expect_op(p, ")");
            return e;
        }
        if (is_op(p, "[") || is_op(p, "{")) {
            int dict = tk->op[0] == '{';
            const char *close = dict ? "}" : "]";
            p->cur++;
            e = node(p, dict ? X_DICT : X_LIST, tk->pos);
            vec_t items = {0};
            while (!is_op(p, close)) {
                if (items.n)
                    expect_op(p, ",");
                if (is_op(p, close))
                    break;
                vec_push(p, &items, pdr__jj_parse_expr(p, 1));
                if (dict) {
                    expect_op(p, ":");
                    vec_push(p, &items, pdr__jj_parse_expr(p, 1));
                }
            }
            expect_op(p, close);
            e->args = (jj_expr_t **)items.v;
            e->nargs = items.n;
            return e;
        }
        break;
    default:
        break;
    }
    pdr__jj_perr(p, PDR_EINVAL, tk->pos, "unexpected '%s'", tok_desc(tk));
}

/* One subscript: an expression or a slice lo:hi:step. */
static jj_expr_t *parse_subscript(jj_parser_t *p, jj_expr_t *obj, uint32_t pos)
{
    jj_expr_t *lo = NULL, *hi = NULL, *step = NULL;
    if (!is_op(p, ":")) {
        lo = pdr__jj_parse_expr(p, 1);
        if (!is_op(p, ":"))
            return binary(p, X_ITEM, 0, obj, lo);
    }
    expect_op(p, ":");
    if (!is_op(p, "]") && !is_op(p, ":"))
        hi = pdr__jj_parse_expr(p, 1);
    if (skip_op(p, ":") && !is_op(p, "]"))
        step = pdr__jj_parse_expr(p, 1);
    jj_expr_t *e = node(p, X_SLICE, pos);
    e->a = obj;
    e->args = pdr__jj_palloc(p, 3 * sizeof(*e->args));
    e->args[0] = lo;
    e->args[1] = hi;
    e->args[2] = step;
    e->nargs = 3;
    return e;
}

static jj_expr_t *parse_postfix(jj_parser_t *p, jj_expr_t *e)
{
    for (;;) {
        jj_tok_t *tk = cur(p);
        if (skip_op(p, ".")) {
            jj_tok_t *a = cur(p);
            if (a->type == JT_NAME) {
                e = binary(p, X_ATTR, 0, e, NULL);
                e->name = a->s;
                e->pos = a->pos;
            } else if (a->type == JT_INT) {
                jj_expr_t *k = node(p, X_CONST, a->pos);
                k->value = pdr__jj_int(a->i);
                e = binary(p, X_ITEM, 0, e, k);
            } else {
                pdr__jj_perr(p, PDR_EINVAL, a->pos, "expected a name after '.'");
            }
            p->cur++;
        } else if (skip_op(p, "[")) {
            e = parse_subscript(p, e, tk->pos);
            expect_op(p, "]");
        } else if (skip_op(p, "(")) {
            e = binary(p, X_CALL, 0, e, NULL);
            parse_call_args(p, e);
        } else {
            return e;
        }
    }
}

jj_expr_t *pdr__jj_parse_filter(jj_parser_t *p, jj_expr_t *e, uint32_t pos)
{
    jj_tok_t *tk = cur(p);
    const jj_str_t *name = expect_name(p);
    (void)pos;
    jj_expr_t *f = node(p, X_FILTER, tk->pos);
    f->a = e;
    f->name = name;
    if (skip_op(p, "("))
        parse_call_args(p, f);
    return f;
}

static jj_expr_t *parse_filter_expr(jj_parser_t *p, jj_expr_t *e)
{
    for (;;) {
        jj_tok_t *tk = cur(p);
        if (skip_op(p, "|")) {
            e = pdr__jj_parse_filter(p, e, tk->pos);
        } else if (skip_name(p, "is")) {
            int negated = skip_name(p, "not");
            jj_tok_t *nt = cur(p);
            const jj_str_t *name = expect_name(p);
            jj_expr_t *t = node(p, X_TEST, nt->pos);
            t->a = e;
            t->name = name;
            jj_tok_t *n = cur(p);
            if (skip_op(p, "(")) {
                parse_call_args(p, t);
            } else if ((n->type == JT_NAME || n->type == JT_STR || n->type == JT_INT || n->type == JT_FLOAT ||
                        (n->type == JT_OP && (!strcmp(n->op, "[") || !strcmp(n->op, "{")))) &&
                       !is_name(p, "else") && !is_name(p, "or") && !is_name(p, "and")) {
                if (is_name(p, "is"))
                    pdr__jj_perr(p, PDR_EINVAL, n->pos, "cannot chain multiple tests with 'is'");
                t->args = pdr__jj_palloc(p, sizeof(*t->args));
                t->args[0] = parse_postfix(p, parse_primary(p));
                t->nargs = 1;
            }
            e = t;
            if (negated) {
                jj_expr_t *ne = node(p, X_NOT, tk->pos);
                ne->a = e;
                e = ne;
            }
        } else if (skip_op(p, "(")) {
            e = binary(p, X_CALL, 0, e, NULL);
            parse_call_args(p, e);
        } else {
            return e;
        }
    }
}

static jj_expr_t *parse_unary(jj_parser_t *p, int with_filter)
{
    jj_tok_t *tk = cur(p);
    jj_expr_t *e;
    enter(p);
    if (skip_op(p, "-") || skip_op(p, "+")) {
        e = node(p, tk->op[0] == '-' ? X_NEG : X_POS, tk->pos);
        e->a = parse_unary(p, 0);
    } else {
        e = parse_primary(p);
    }
    e = parse_postfix(p, e);
    if (with_filter)
        e = parse_filter_expr(p, e);
    p->depth--;
    return e;
}

static jj_expr_t *parse_pow(jj_parser_t *p)
{
    jj_expr_t *e = parse_unary(p, 1);
    while (skip_op(p, "**"))
        e = binary(p, X_BIN, 'p', e, parse_unary(p, 1));
    return e;
}

static jj_expr_t *parse_math2(jj_parser_t *p)
{
    jj_expr_t *e = parse_pow(p);
    for (;;) {
        int op = is_op(p, "*") ? '*' : is_op(p, "/") ? '/' : is_op(p, "//") ? 'f' : is_op(p, "%") ? '%' : 0;
        if (!op)
            return e;
        p->cur++;
        e = binary(p, X_BIN, op, e, parse_pow(p));
    }
}

static jj_expr_t *parse_concat(jj_parser_t *p)
{
    jj_expr_t *e = parse_math2(p);
    while (skip_op(p, "~"))
        e = binary(p, X_BIN, '~', e, parse_math2(p));
    return e;
}

static jj_expr_t *parse_math1(jj_parser_t *p)
{
    jj_expr_t *e = parse_concat(p);
    for (;;) {
        int op = is_op(p, "+") ? '+' : is_op(p, "-") ? '-' : 0;
        if (!op)
            return e;
        p->cur++;
        e = binary(p, X_BIN, op, e, parse_concat(p));
    }
}

static jj_expr_t *parse_compare(jj_parser_t *p)
{
    static const char *const ops[] = {"==", "!=", "<", "<=", ">", ">="};
    static const char codes[] = {'e', 'n', '<', 'l', '>', 'g'};
    jj_expr_t *e = parse_math1(p), *last = NULL;
    for (;;) {
        int op = 0;
        for (size_t k = 0; k < sizeof(ops) / sizeof(ops[0]); k++)
            if (is_op(p, ops[k]))
                op = codes[k];
        if (op) {
            p->cur++;
        } else if (skip_name(p, "in")) {
            op = 'i';
        } else if (is_name(p, "not") && p->toks[p->cur + 1].type == JT_NAME &&
                   strcmp(p->toks[p->cur + 1].s->p, "in") == 0) {
            p->cur += 2;
            op = 'I';
        } else {
            return e;
        }
        /* A chain a < b < c is (a < b) and (b < c), as in Python (b is evaluated twice: it has no effects).
         */
        jj_expr_t *right = parse_math1(p);
        if (last == NULL)
            e = binary(p, X_CMP, op, e, right);
        else
            e = binary(p, X_AND, 0, e, binary(p, X_CMP, op, last, right));
        last = right;
    }
}

static jj_expr_t *parse_not(jj_parser_t *p)
{
    jj_tok_t *tk = cur(p);
    if (skip_name(p, "not")) {
        enter(p);
        jj_expr_t *e = node(p, X_NOT, tk->pos);
        e->a = parse_not(p);
        p->depth--;
        return e;
    }
    return parse_compare(p);
}

static jj_expr_t *parse_and(jj_parser_t *p)
{
    jj_expr_t *e = parse_not(p);
    while (skip_name(p, "and"))
        e = binary(p, X_AND, 0, e, parse_not(p));
    return e;
}

static jj_expr_t *parse_or(jj_parser_t *p)
{
    jj_expr_t *e = parse_and(p);
    while (skip_name(p, "or"))
        e = binary(p, X_OR, 0, e, parse_and(p));
    return e;
}

jj_expr_t *pdr__jj_parse_expr(jj_parser_t *p, int with_cond)
{
    enter(p);
    jj_expr_t *e = parse_or(p);
    while (with_cond && is_name(p, "if")) {
        uint32_t pos = cur(p)->pos;
        p->cur++;
        jj_expr_t *c = node(p, X_COND, pos);
        c->b = e;
        c->a = parse_or(p);
        if (skip_name(p, "else"))
            c->c = pdr__jj_parse_expr(p, 1);
        e = c;
    }
    p->depth--;
    return e;
}

/* Expressions separated by commas: one alone is itself, several (or one with a trailing comma) a tuple. */
jj_expr_t *pdr__jj_parse_tuple(jj_parser_t *p, int with_cond, int in_ends, int explicit_parens)
{
    uint32_t pos = cur(p)->pos;
    vec_t items = {0};
    int comma = 0;
    for (;;) {
        jj_tok_t *tk = cur(p);
        if (tk->type == JT_BEND || tk->type == JT_VEND || is_op(p, ")") || (in_ends && is_name(p, "in")))
            break;
        if (items.n && !comma)
            break;
        vec_push(p, &items, pdr__jj_parse_expr(p, with_cond));
        comma = skip_op(p, ",");
    }
    if (items.n == 1 && !comma)
        return items.v[0];
    if (items.n == 0 && !explicit_parens)
        pdr__jj_perr(p, PDR_EINVAL, pos, "expected an expression, got '%s'", tok_desc(cur(p)));
    jj_expr_t *e = node(p, X_TUPLE, pos);
    e->args = (jj_expr_t **)items.v;
    e->nargs = items.n;
    return e;
}
