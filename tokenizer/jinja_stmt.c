/*
 * The Jinja statement parser: if/elif/else, for (targets, "if" filter, else), set (a name, names, ns.attr,
 * or a block with filters), macro, filter blocks, break and continue, each body up to its end tag; text
 * and {{ }} in between. Runs at compile time only; a syntax error longjmps to pdr__jj_parse().
 */
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "jinja_internal.h"
#include "jinja_parse.h"

static jj_stmt_t *parse_body(jj_parser_t *p, const char *const *ends);

/* Names to assign: "a" or "a, b" (for and set); set also takes "ns.attr". */
static void parse_targets(jj_parser_t *p, jj_stmt_t *s, int for_loop)
{
    vec_t names = {0};
    int parens = skip_op(p, "(");
    do {
        if (parens && is_op(p, ")"))
            break;
        vec_push(p, &names, (void *)expect_name(p));
        if (!for_loop && names.n == 1 && skip_op(p, ".")) {
            s->attr = expect_name(p);
            break;
        }
    } while (skip_op(p, ","));
    if (parens)
        expect_op(p, ")");
    s->names = (const jj_str_t **)names.v;
    s->nnames = names.n;
}

static jj_stmt_t *stmt(jj_parser_t *p, int kind, uint32_t pos)
{
    jj_stmt_t *s = pdr__jj_palloc(p, sizeof(*s));
    memset(s, 0, sizeof(*s));
    s->kind = (uint8_t)kind;
    s->pos = pos;
    return s;
}

static jj_stmt_t *parse_if(jj_parser_t *p, uint32_t pos)
{
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    jj_stmt_t *s = stmt(p, S_IF, pos);
    s->expr = pdr__jj_parse_tuple(p, 1, 0, 0);
    expect_bend(p);
    s->body = parse_body(p, ends);
    jj_tok_t *tk = cur(p);
    p->cur++;
    if (!strcmp(tk->s->p, "elif")) {
        s->orelse = parse_if(p, tk->pos);
        return s;
    }
    expect_bend(p);
    if (!strcmp(tk->s->p, "else")) {
        static const char *const endif[] = {"endif", NULL};
        s->orelse = parse_body(p, endif);
        p->cur++;
        expect_bend(p);
    }
    return s;
}

static jj_stmt_t *parse_for(jj_parser_t *p, uint32_t pos)
{
    static const char *const ends[] = {"else", "endfor", NULL}, *const endfor[] = {"endfor", NULL};
    jj_stmt_t *s = stmt(p, S_FOR, pos);
    parse_targets(p, s, 1);
    if (!skip_name(p, "in"))
        pdr__jj_perr(p, PDR_EINVAL, cur(p)->pos, "expected 'in', got '%s'", tok_desc(cur(p)));
    s->expr = pdr__jj_parse_tuple(p, 0, 0, 0);
    if (skip_name(p, "if"))
        s->cond = pdr__jj_parse_expr(p, 1);
    if (skip_name(p, "recursive"))
        pdr__jj_perr(p, PDR_EINVAL, cur(p)->pos, "recursive loops are not supported");
    expect_bend(p);
    s->body = parse_body(p, ends);
    if (!strcmp(cur(p)->s->p, "else")) {
        p->cur++;
        expect_bend(p);
        s->orelse = parse_body(p, endfor);
    }
    p->cur++;
    expect_bend(p);
    return s;
}

static jj_stmt_t *parse_set(jj_parser_t *p, uint32_t pos)
{
    static const char *const ends[] = {"endset", NULL};
    jj_stmt_t *s = stmt(p, S_SET, pos);
    parse_targets(p, s, 0);
    if (skip_op(p, "=")) {
        s->expr = pdr__jj_parse_tuple(p, 1, 0, 0);
        expect_bend(p);
        return s;
    }
    if (s->nnames != 1 || s->attr != NULL)
        pdr__jj_perr(p, PDR_EINVAL, pos, "a set block assigns one name");
    s->kind = S_SETBLOCK;
    jj_tok_t *tk = cur(p);
    if (skip_op(p, "|")) {
        s->setfilter = pdr__jj_parse_filter(p, NULL, tk->pos);
        while ((tk = cur(p)), skip_op(p, "|"))
            s->setfilter = pdr__jj_parse_filter(p, s->setfilter, tk->pos);
    }
    expect_bend(p);
    s->body = parse_body(p, ends);
    p->cur++;
    expect_bend(p);
    return s;
}

static jj_stmt_t *parse_macro(jj_parser_t *p, uint32_t pos)
{
    static const char *const ends[] = {"endmacro", NULL};
    jj_stmt_t *s = stmt(p, S_MACRO, pos);
    vec_t names = {0}, defs = {0};
    vec_push(p, &names, (void *)expect_name(p));
    vec_push(p, &defs, NULL);
    expect_op(p, "(");
    while (!is_op(p, ")")) {
        if (names.n > 1)
            expect_op(p, ",");
        if (is_op(p, ")"))
            break;
        vec_push(p, &names, (void *)expect_name(p));
        jj_expr_t *d = skip_op(p, "=") ? pdr__jj_parse_expr(p, 1) : NULL;
        if (d == NULL && defs.v[defs.n - 1] != NULL && defs.n > 1)
            pdr__jj_perr(p, PDR_EINVAL, cur(p)->pos, "non-default argument follows default argument");
        vec_push(p, &defs, d);
    }
    expect_op(p, ")");
    expect_bend(p);
    s->names = (const jj_str_t **)names.v;
    s->nnames = names.n;
    s->defaults = (jj_expr_t **)defs.v;
    s->body = parse_body(p, ends);
    p->cur++;
    expect_bend(p);
    return s;
}

static jj_stmt_t *parse_statement(jj_parser_t *p)
{
    jj_tok_t *tk = cur(p);
    if (tk->type != JT_NAME)
        pdr__jj_perr(p, PDR_EINVAL, tk->pos, "expected a statement name, got '%s'", tok_desc(tk));
    p->cur++;
    const char *n = tk->s->p;
    if (!strcmp(n, "if"))
        return parse_if(p, tk->pos);
    if (!strcmp(n, "for"))
        return parse_for(p, tk->pos);
    if (!strcmp(n, "set"))
        return parse_set(p, tk->pos);
    if (!strcmp(n, "macro"))
        return parse_macro(p, tk->pos);
    if (!strcmp(n, "break") || !strcmp(n, "continue")) {
        expect_bend(p);
        return stmt(p, n[0] == 'b' ? S_BREAK : S_CONTINUE, tk->pos);
    }
    if (!strcmp(n, "filter")) {
        static const char *const ends[] = {"endfilter", NULL};
        jj_stmt_t *s = stmt(p, S_FILTER, tk->pos);
        jj_tok_t *f = cur(p);
        s->expr = pdr__jj_parse_filter(p, NULL, f->pos);
        while ((f = cur(p)), skip_op(p, "|"))
            s->expr = pdr__jj_parse_filter(p, s->expr, f->pos);
        expect_bend(p);
        s->body = parse_body(p, ends);
        p->cur++;
        expect_bend(p);
        return s;
    }
    if (!strcmp(n, "generation")) {
        /* transformers' AssistantTracker: the body renders as it is (the tracking is for training masks). */
        static const char *const ends[] = {"endgeneration", NULL};
        jj_stmt_t *s = stmt(p, S_GENERATION, tk->pos);
        expect_bend(p);
        s->body = parse_body(p, ends);
        p->cur++;
        expect_bend(p);
        return s;
    }
    pdr__jj_perr(p, PDR_EINVAL, tk->pos, "unknown or unsupported tag '%s'", n);
}

/* Statements up to a block tag whose name is in ends (left as the current token), or the end of the
 * template when ends is NULL. */
static jj_stmt_t *parse_body(jj_parser_t *p, const char *const *ends)
{
    jj_stmt_t *head = NULL, **tail = &head;
    enter(p);
    for (;;) {
        jj_tok_t *tk = cur(p);
        jj_stmt_t *s;
        if (tk->type == JT_EOF) {
            if (ends != NULL)
                pdr__jj_perr(p, PDR_EINVAL, tk->pos, "unexpected end of template, expected '%s'", ends[0]);
            break;
        }
        if (tk->type == JT_TEXT) {
            s = stmt(p, S_TEXT, tk->pos);
            s->text = tk->s;
            p->cur++;
        } else if (tk->type == JT_VBEGIN) {
            p->cur++;
            s = stmt(p, S_OUTPUT, tk->pos);
            s->expr = pdr__jj_parse_tuple(p, 1, 0, 0);
            if (cur(p)->type != JT_VEND)
                pdr__jj_perr(p, PDR_EINVAL, cur(p)->pos, "expected end of print statement, got '%s'",
                             tok_desc(cur(p)));
            p->cur++;
        } else {
            jj_tok_t *nt = &p->toks[p->cur + 1];
            if (nt->type == JT_NAME && ends != NULL) {
                for (size_t k = 0; ends[k]; k++)
                    if (!strcmp(nt->s->p, ends[k])) {
                        p->cur++;
                        p->depth--;
                        return head;
                    }
            }
            if (nt->type == JT_NAME &&
                (!strncmp(nt->s->p, "end", 3) || !strcmp(nt->s->p, "else") || !strcmp(nt->s->p, "elif")))
                pdr__jj_perr(p, PDR_EINVAL, nt->pos, "unexpected '%s'", nt->s->p);
            p->cur++;
            s = parse_statement(p);
        }
        *tail = s;
        tail = &s->next;
    }
    p->depth--;
    return head;
}

/*
 * Names of filters and tests are checked once the tree is built, as jinja2 does when it generates code: an
 * unknown one is an error at compile time, except within an if statement or a conditional expression
 * (jinja2's "soft" frames), where it fails only if it runs. The walk also bounds the depth of the tree,
 * which a long chain of operators makes deep without nesting in the text.
 */
static void check_expr(jj_parser_t *p, const jj_expr_t *e, int soft, unsigned depth)
{
    if (e == NULL)
        return;
    if (depth > p->t->limits.max_depth * 8)
        pdr__jj_perr(p, PDR_ETOOBIG, e->pos, "expression nests deeper than %u", p->t->limits.max_depth * 8);
    if (e->kind == X_COND)
        soft = 1;
    if (!soft && e->kind == X_FILTER && !pdr__jj_have_filter(e->name->p, e->name->len))
        pdr__jj_perr(p, PDR_EINVAL, e->pos, "no filter named '%s'", e->name->p);
    if (!soft && e->kind == X_TEST && !pdr__jj_have_test(e->name->p, e->name->len))
        pdr__jj_perr(p, PDR_EINVAL, e->pos, "no test named '%s'", e->name->p);
    check_expr(p, e->a, soft, depth + 1);
    check_expr(p, e->b, soft, depth + 1);
    check_expr(p, e->c, soft, depth + 1);
    for (uint32_t i = 0; i < e->nargs; i++)
        check_expr(p, e->args[i], soft, depth + 1);
    for (uint32_t i = 0; i < e->nkw; i++)
        check_expr(p, e->kwv[i], soft, depth + 1);
}

static void check_body(jj_parser_t *p, const jj_stmt_t *s, int soft)
{
    for (; s != NULL; s = s->next) {
        switch (s->kind) {
        case S_IF:
            check_expr(p, s->expr, 1, 0);
            check_body(p, s->body, 1);
            check_body(p, s->orelse, 1);
            break;
        case S_FOR:
            check_expr(p, s->expr, soft, 0);
            check_expr(p, s->cond, 0, 0);
            check_body(p, s->body, 0);
            check_body(p, s->orelse, soft);
            break;
        case S_MACRO:
            for (uint32_t i = 1; i < s->nnames; i++)
                check_expr(p, s->defaults[i], 0, 0);
            check_body(p, s->body, 0);
            break;
        case S_GENERATION:
            check_body(p, s->body, 0);
            break;
        case S_SETBLOCK:
        case S_FILTER:
            check_expr(p, s->kind == S_FILTER ? s->expr : s->setfilter, 0, 0);
            check_body(p, s->body, 0);
            break;
        default:
            check_expr(p, s->expr, soft, 0);
            break;
        }
    }
}

/* setjmp in a function of its own: the parser's state lives in the caller's frame, so its fields are
 * well defined after a longjmp. */
static int parse_guarded(jj_parser_t *p)
{
    if (setjmp(p->jmp) != 0)
        return p->code;
    pdr__jj_lex(p);
    p->t->root = parse_body(p, NULL);
    check_body(p, p->t->root, 0);
    return 0;
}

int pdr__jj_parse(pdr_jinja_tmpl_t *t, char *err, size_t errlen)
{
    jj_parser_t p = {.t = t, .err = err, .errlen = errlen};
    int r = parse_guarded(&p);
    free(p.toks);
    return r;
}
