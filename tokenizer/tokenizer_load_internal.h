/* Between the tokenizer.json loader's files (tokenizer_load.c, tokenizer_load_spm.c): the load's state, the
 * JSON accessors over tjson's nodes and the helpers that report an error with the file's name. */
#ifndef PDR_TOKENIZER_LOAD_INTERNAL_H
#define PDR_TOKENIZER_LOAD_INTERNAL_H

#include <stddef.h>
#include <string.h>

#include "tjson.h"
#include "tokenizer_internal.h"

typedef struct ld {
    const pdr__tj_t *doc;
    const char *file;
    char *err;
    size_t errlen;
    pdr_tokenizer_t *t;
} ld_t;

typedef const pdr__tj_node_t json_t;
#define IS(v, t) ((v) != NULL && (v)->type == PDR__TJ_##t)
#define json_is_null(v) IS(v, NULL)
#define json_is_string(v) IS(v, STR)
#define json_is_true(v) IS(v, TRUE)
#define json_is_boolean(v) (IS(v, TRUE) || IS(v, FALSE))
#define json_is_integer(v) (IS(v, NUM) && (v)->is_int)
#define json_is_object(v) IS(v, OBJ)
#define json_is_array(v) IS(v, ARR)
#define json_string_length(v) ((size_t)(v)->n)
#define json_array_size(v) ((size_t)(v)->n)
#define json_integer_value(v) ((v)->v.i)
#define json_object_get(o, k) pdr__tj_get(L->doc, o, k)
#define json_array_get(a, i) pdr__tj_at(L->doc, a, i)
/* A string value for printf's "%.*s". */
#define SHOW(x) (int)((x)->n > 80 ? 80 : (x)->n), (x)->v.s

/* The error message "<file>: <fmt>"; returns PDR_ECONFIG. */
__attribute__((format(printf, 2, 3))) int pdr__tok_ld_fail(ld_t *L, const char *fmt, ...);
/* Whether v is the string lit. */
int pdr__tok_ld_str_is(json_t *v, const char *lit);
/* "out of memory"; returns PDR_ENOMEM. */
int pdr__tok_ld_nomem(ld_t *L);
/* A member that must be absent/null or a bool; *out keeps its default when absent or null. */
int pdr__tok_ld_get_bool(ld_t *L, json_t *obj, const char *key, const char *path, int *out);
/* The "type" member, copied into buf as a C string (NULL: an error was reported). */
const char *pdr__tok_ld_get_type(ld_t *L, json_t *obj, const char *path, char buf[64]);
#define fail pdr__tok_ld_fail
#define str_is pdr__tok_ld_str_is
#define nomem pdr__tok_ld_nomem
#define get_bool pdr__tok_ld_get_bool
#define get_type pdr__tok_ld_get_type

/* tokenizer_load_spm.c: the normalizer (NFC, and SentencePiece-style Prepend, Replace, Sequence) and the
 * Metaspace pre-tokenizer. */
int pdr__tok_load_normalizer(ld_t *L, json_t *n);
int pdr__tok_load_metaspace(ld_t *L, json_t *pt, const char *path);

#endif
