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

#endif
