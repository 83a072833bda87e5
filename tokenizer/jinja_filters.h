/*
 * What the filters of the Jinja engine share: argument helpers (jinja_filters.c) and the string filters
 * (jinja_filters_text.c) that the filter table names.
 */
#ifndef PDR_JINJA_FILTERS_H
#define PDR_JINJA_FILTERS_H

#include "jinja_internal.h"

/* An argument that must be a string, or an integer (def when absent); what names it in the error. */
const jj_str_t *pdr__jj_want_str(jj_render_t *r, const jj_val_t *v, const char *what);
int64_t pdr__jj_want_int(jj_render_t *r, const jj_val_t *v, int64_t def, const char *what);
/* A boolean argument: absent is false. */
int pdr__jj_flag(jj_render_t *r, const jj_val_t *v);
/* Fails for the use of an undefined value, naming it. */
_Noreturn void pdr__jj_undefined_use(jj_render_t *r, jj_val_t v);

jj_val_t pdr__jj_f_format(jj_render_t *r, jj_val_t v, const jj_args_t *a);
jj_val_t pdr__jj_f_trim(jj_render_t *r, jj_val_t v, const jj_args_t *a);
jj_val_t pdr__jj_f_upper(jj_render_t *r, jj_val_t v, const jj_args_t *a);
jj_val_t pdr__jj_f_lower(jj_render_t *r, jj_val_t v, const jj_args_t *a);
jj_val_t pdr__jj_f_title(jj_render_t *r, jj_val_t v, const jj_args_t *a);
jj_val_t pdr__jj_f_capitalize(jj_render_t *r, jj_val_t v, const jj_args_t *a);
jj_val_t pdr__jj_f_replace(jj_render_t *r, jj_val_t v, const jj_args_t *a);
jj_val_t pdr__jj_f_string(jj_render_t *r, jj_val_t v, const jj_args_t *a);
jj_val_t pdr__jj_f_int(jj_render_t *r, jj_val_t v, const jj_args_t *a);
jj_val_t pdr__jj_f_float(jj_render_t *r, jj_val_t v, const jj_args_t *a);
jj_val_t pdr__jj_f_safe(jj_render_t *r, jj_val_t v, const jj_args_t *a);
jj_val_t pdr__jj_f_indent(jj_render_t *r, jj_val_t v, const jj_args_t *a);
jj_val_t pdr__jj_f_wordcount(jj_render_t *r, jj_val_t v, const jj_args_t *a);
jj_val_t pdr__jj_f_center(jj_render_t *r, jj_val_t v, const jj_args_t *a);

#endif
