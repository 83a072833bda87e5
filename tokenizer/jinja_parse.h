/*
 * The compile-time state the Jinja lexer (jinja_lex.c) and parser (jinja_parse.c) share: the token array
 * and the error exit. A syntax error longjmps to pdr__jj_parse(), which frees the tokens; the tree
 * already built lives in the template's arena and goes with it.
 */
#ifndef PDR_JINJA_PARSE_H
#define PDR_JINJA_PARSE_H

#include <setjmp.h>

#include "jinja_internal.h"

enum { JT_TEXT, JT_VBEGIN, JT_VEND, JT_BBEGIN, JT_BEND, JT_NAME, JT_INT, JT_FLOAT, JT_STR, JT_OP, JT_EOF };

typedef struct jj_tok {
    uint8_t type;
    char op[3]; /* JT_OP: one or two characters */
    uint32_t pos;
    const jj_str_t *s; /* JT_TEXT, JT_NAME, JT_STR */
    int64_t i;
    double f;
} jj_tok_t;

typedef struct jj_parser {
    pdr_jinja_tmpl_t *t;
    jj_tok_t *toks;
    size_t ntoks, captoks, cur;
    unsigned depth;
    jmp_buf jmp;
    int code;
    char *err;
    size_t errlen;
} jj_parser_t;

_Noreturn void pdr__jj_perr(jj_parser_t *p, int code, uint32_t pos, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void *pdr__jj_palloc(jj_parser_t *p, size_t n);
const jj_str_t *pdr__jj_pstr(jj_parser_t *p, const char *s, size_t n);
/* Fills p->toks from the template's text, ending with JT_EOF. */
void pdr__jj_lex(jj_parser_t *p);

/* Expressions (jinja_parse.c): with_cond takes "a if b else c"; a tuple is expressions separated by
 * commas (in_ends: "in" ends it, explicit_parens: "()" is the empty tuple); a filter's name and arguments
 * after its "|" applied to e (NULL: a block's output). */
jj_expr_t *pdr__jj_parse_expr(jj_parser_t *p, int with_cond);
jj_expr_t *pdr__jj_parse_tuple(jj_parser_t *p, int with_cond, int in_ends, int explicit_parens);
jj_expr_t *pdr__jj_parse_filter(jj_parser_t *p, jj_expr_t *e, uint32_t pos);

/* Token helpers the expression and statement parsers share. */
static inline jj_tok_t *cur(jj_parser_t *p)
{
    return &p->toks[p->cur];
}

static inline int is_op(jj_parser_t *p, const char *op)
{
    jj_tok_t *tk = cur(p);
    return tk->type == JT_OP && strcmp(tk->op, op) == 0;
}

static inline int is_name(jj_parser_t *p, const char *name)
{
    jj_tok_t *tk = cur(p);
    return tk->type == JT_NAME && strcmp(tk->s->p, name) == 0;
}

static inline int skip_op(jj_parser_t *p, const char *op)
{
    if (!is_op(p, op))
        return 0;
    p->cur++;
    return 1;
}

static inline int skip_name(jj_parser_t *p, const char *name)
{
    if (!is_name(p, name))
        return 0;
    p->cur++;
    return 1;
}

static inline const char *tok_desc(jj_tok_t *tk)
{
    switch (tk->type) {
    case JT_NAME:
        return tk->s->p;
    case JT_OP:
        return tk->op;
    case JT_STR:
        return "string";
    case JT_INT:
    case JT_FLOAT:
        return "number";
    case JT_BEND:
        return "end of statement block";
    case JT_VEND:
        return "end of print statement";
    case JT_EOF:
        return "end of template";
    default:
        return "template data";
    }
}

static inline void expect_op(jj_parser_t *p, const char *op)
{
    if (!skip_op(p, op))
        pdr__jj_perr(p, PDR_EINVAL, cur(p)->pos, "expected '%s', got '%s'", op, tok_desc(cur(p)));
}

static inline const jj_str_t *expect_name(jj_parser_t *p)
{
    jj_tok_t *tk = cur(p);
    if (tk->type != JT_NAME)
        pdr__jj_perr(p, PDR_EINVAL, tk->pos, "expected a name, got '%s'", tok_desc(tk));
    p->cur++;
    return tk->s;
}

static inline void expect_bend(jj_parser_t *p)
{
    if (cur(p)->type != JT_BEND)
        pdr__jj_perr(p, PDR_EINVAL, cur(p)->pos, "expected end of statement block, got '%s'",
                     tok_desc(cur(p)));
    p->cur++;
}

static inline void enter(jj_parser_t *p)
{
    if (++p->depth > p->t->limits.max_depth)
        pdr__jj_perr(p, PDR_ETOOBIG, cur(p)->pos, "nesting deeper than the limit of %u",
                     p->t->limits.max_depth);
}

/* A growable array of pointers in the template's arena. */
typedef struct {
    void **v;
    uint32_t n, cap;
} vec_t;

static inline void vec_push(jj_parser_t *p, vec_t *v, void *x)
{
    if (v->n == v->cap) {
        uint32_t cap = v->cap ? v->cap * 2 : 4;
        void **nv = pdr__jj_palloc(p, cap * sizeof(*nv));
        if (v->n)
            memcpy(nv, v->v, v->n * sizeof(*nv));
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = x;
}

#endif
