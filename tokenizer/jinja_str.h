/*
 * String operations of the Jinja engine with Python's semantics where chat templates meet them: strip and
 * split on Unicode whitespace (str.isspace), code point counts, replace, and the case changes (ASCII
 * letters only: docs/internals/jinja.md). Shared by the string methods (jinja_str.c) and the filters.
 */
#ifndef PDR_JINJA_STR_H
#define PDR_JINJA_STR_H

#include "jinja_internal.h"

/* chars NULL: whitespace. */
jj_val_t pdr__jj_str_strip(jj_render_t *r, const jj_str_t *s, const jj_str_t *chars, int left, int right);
/* mode: 'u' upper, 'l' lower, 't' str.title, 'T' jinja's title filter, 'c' capitalize. */
jj_val_t pdr__jj_str_case(jj_render_t *r, const jj_str_t *s, int mode);
/* count < 0: every occurrence. */
jj_val_t pdr__jj_str_replace(jj_render_t *r, const jj_str_t *s, const jj_str_t *from, const jj_str_t *to,
                             int64_t count);
/* sep NULL: runs of whitespace; maxsplit < 0: no limit; right: rsplit. */
jj_val_t pdr__jj_str_split(jj_render_t *r, const jj_str_t *s, const jj_str_t *sep, int64_t maxsplit,
                           int right);
/* Python's str.isspace() of the code point at p (n bytes left); *len gets its length in bytes. */
int pdr__jj_space_at(const char *p, size_t n, size_t *len);
jj_val_t pdr__jj_str_method(jj_render_t *r, const jj_method_t *m, const jj_args_t *a);
void pdr__jj_check_args(jj_render_t *r, const jj_method_t *m, const jj_args_t *a, uint32_t most);

#endif
