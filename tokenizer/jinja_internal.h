/*
 * What the parts of the Jinja engine share: the arena, the values, the syntax tree and the render state.
 *
 * Memory: a compiled template lives in one arena (its tree and constants), read only while rendering; a
 * render allocates every value in an arena of its own, with a ceiling (max_memory_bytes), freed in one
 * call. Values are immutable once built (the sandbox forbids list.append and dict.update), except a
 * namespace's attributes, so values are shared by pointer without reference counts. A render error
 * longjmps out of the evaluator to pdr_jinja_render(), which frees the arena: nothing else is allocated.
 */
#ifndef PDR_JINJA_INTERNAL_H
#define PDR_JINJA_INTERNAL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "jinja.h"

/* ---- arena ---- */
typedef struct jj_chunk jj_chunk_t;
typedef struct jj_arena {
    jj_chunk_t *head;
    size_t used, limit; /* bytes taken from malloc, and its ceiling */
} jj_arena_t;
/* NULL when the ceiling or malloc refuses. */
void *pdr__jj_alloc(jj_arena_t *a, size_t n);
void pdr__jj_arena_free(jj_arena_t *a);

/* ---- values ---- */
enum jj_type {
    JV_UNDEF,
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,  /* a list, or a tuple (flag JF_TUPLE) */
    JV_DICT,  /* a dict, or a namespace (flag JF_NS) */
    JV_MACRO, /* a macro of the template */
    JV_FUNC,  /* a global function: JJ_FN_* in u.i */
    JV_METHOD /* a bound method of a value: u.m */
};
#define JF_TUPLE 1
#define JF_NS 2
#define JF_LOOP 8 /* a dict that is a for loop's loop variable (jinja2's LoopContext) */
/* A dict that is an object (a namespace, a loop), not a mapping. */
#define JF_OBJECT (JF_NS | JF_LOOP)
#define JF_SAFE 4 /* a string marked safe (|safe): markupsafe's Markup, whose + escapes the other side */

typedef struct jj_str {
    size_t len;
    char p[]; /* len bytes, then a NUL */
} jj_str_t;
typedef struct jj_list jj_list_t;
typedef struct jj_dict jj_dict_t;
typedef struct jj_method jj_method_t;
struct jj_stmt;

typedef struct jj_val {
    uint8_t type, flags;
    union {
        int64_t i; /* JV_BOOL, JV_INT, JV_FUNC */
        double f;
        const jj_str_t *s;            /* JV_STR; JV_UNDEF: its name (may be NULL) */
        jj_list_t *l;                 /* JV_LIST */
        jj_dict_t *d;                 /* JV_DICT */
        const struct jj_macro *macro; /* JV_MACRO */
        const jj_method_t *m;         /* JV_METHOD */
    } u;
} jj_val_t;

struct jj_list {
    size_t n;
    jj_val_t *v;
};
struct jj_dict {
    size_t n, cap;
    jj_val_t *k, *v;
};
struct jj_scope;
typedef struct jj_macro {
    const struct jj_stmt *s;
    struct jj_scope *scope; /* where it was defined: its body sees that scope's names */
} jj_macro_t;
struct jj_method {
    jj_val_t self;
    const char *name; /* the method's name, a static string */
};

enum { JJ_FN_RAISE = 1, JJ_FN_STRFTIME, JJ_FN_NAMESPACE, JJ_FN_RANGE, JJ_FN_DICT };

/* ---- syntax tree ---- */
enum jj_expr_kind {
    X_CONST,
    X_NAME,
    X_ATTR,   /* a.name */
    X_ITEM,   /* a[b] */
    X_SLICE,  /* a[b:c:d], any of b c d may be NULL */
    X_CALL,   /* a(args) */
    X_FILTER, /* a|name(args); a is NULL in a filter block */
    X_TEST,   /* a is name(args); op 1: is not */
    X_NEG,
    X_POS,
    X_NOT,
    X_AND,
    X_OR,
    X_BIN,   /* a op b with op one of '+', '-', '*', '/', 'f' (//), '%', 'p' (**), '~' */
    X_CMP,   /* a op b: 'e' ==, 'n' !=, '<', 'l' <=, '>', 'g' >=, 'i' in, 'I' not in */
    X_COND,  /* b if a else c; c may be NULL */
    X_LIST,  /* args */
    X_TUPLE, /* args */
    X_DICT   /* args: key, value, key, value... */
};

typedef struct jj_expr {
    uint8_t kind, op;
    uint32_t pos; /* byte offset in the template's text */
    struct jj_expr *a, *b, *c;
    const jj_str_t *name;  /* X_NAME, X_ATTR, X_FILTER, X_TEST */
    struct jj_expr **args; /* positional arguments, or elements */
    const jj_str_t **kwn;  /* keyword argument names */
    struct jj_expr **kwv;  /* keyword argument values */
    uint32_t nargs, nkw;
    jj_val_t value; /* X_CONST */
} jj_expr_t;

enum jj_stmt_kind {
    S_TEXT,
    S_OUTPUT,
    S_IF,
    S_FOR,
    S_SET,
    S_SETBLOCK,
    S_MACRO,
    S_BREAK,
    S_CONTINUE,
    S_FILTER,
    S_GENERATION /* transformers' {% generation %}: its body, in a scope of its own */
};

typedef struct jj_stmt {
    uint8_t kind;
    uint32_t pos;
    struct jj_stmt *next;
    const jj_str_t *text;   /* S_TEXT */
    jj_expr_t *expr;        /* S_OUTPUT, S_IF (test), S_FOR (iterable), S_SET (value), S_FILTER */
    jj_expr_t *cond;        /* S_FOR: the "if" of the loop */
    struct jj_stmt *body;   /* S_IF, S_FOR, S_SETBLOCK, S_MACRO, S_FILTER, S_GENERATION */
    struct jj_stmt *orelse; /* S_IF: the elif or else; S_FOR: the else */
    const jj_str_t **names; /* S_FOR and S_SET targets, S_MACRO: its parameters (name is names[0]) */
    uint32_t nnames;
    const jj_str_t *attr; /* S_SET: ns.attr = ... (names[0] is ns) */
    jj_expr_t **defaults; /* S_MACRO: a default per parameter, or NULL */
    jj_expr_t *setfilter; /* S_SETBLOCK: {% set x | filter %}, may be NULL */
} jj_stmt_t;

struct pdr_jinja_tmpl {
    jj_arena_t arena;
    pdr_jinja_limits_t limits;
    char *src; /* the text, newlines normalised to \n as jinja2 does */
    size_t src_len;
    jj_stmt_t *root;
};

/* ---- compile ---- */
int pdr__jj_parse(pdr_jinja_tmpl_t *t, char *err, size_t errlen);
/* An error's text, for the compile's and the render's error exits alike: "line:col: " for the byte offset pos
 * of src (the position left out when buf has no room for it), then the message fmt makes, into buf (at most
 * buflen bytes, NUL included; nothing when buflen is 0). */
void pdr__jj_verr(char *buf, size_t buflen, const char *src, size_t len, uint32_t pos, const char *fmt,
                  va_list ap) __attribute__((format(printf, 6, 0)));

/* ---- render ---- */
typedef struct jj_scope {
    struct jj_scope *parent;
    jj_dict_t vars;
} jj_scope_t;

typedef struct jj_out {
    char *p;
    size_t len, cap;
} jj_out_t;

typedef struct jj_render {
    const pdr_jinja_tmpl_t *t;
    jj_arena_t arena;
    jmp_buf jmp;
    int code;  /* the PDR_E* of the error */
    char *err; /* where the message goes */
    size_t errlen;
    uint32_t pos;   /* the offset of the node being evaluated, for messages */
    uint64_t iters; /* loop iterations so far */
    uint64_t bytes; /* bytes copied or scanned, not yet charged as iterations (4096 make one) */
    unsigned depth; /* evaluation depth */
    int64_t now;
    jj_out_t *out;       /* where output goes (a macro call or a set block swaps it) */
    jj_scope_t *globals; /* the template's top-level scope (its parent holds the context) */
    jj_scope_t *scope;   /* the innermost scope: where names are looked up and set */
} jj_render_t;

/* Ends the render with code and a message (never returns). */
_Noreturn void pdr__jj_fail(jj_render_t *r, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void *pdr__jj_ralloc(jj_render_t *r, size_t n);
void pdr__jj_count_iter(jj_render_t *r, uint64_t n);
/* Charges bytes copied or scanned against the iteration limit, 4096 bytes an iteration: work on big
 * strings in a loop is bounded like the loop itself. */
void pdr__jj_charge(jj_render_t *r, size_t bytes);
/* Python's "item in container" (a substring, an element, a key). */
int pdr__jj_contains(jj_render_t *r, jj_val_t item, jj_val_t container);

/* Value helpers (jinja_value.c). */
jj_val_t pdr__jj_undef(const jj_str_t *name);
jj_val_t pdr__jj_none(void);
jj_val_t pdr__jj_bool(int b);
jj_val_t pdr__jj_int(int64_t i);
jj_val_t pdr__jj_float(double f);
jj_val_t pdr__jj_strv(const jj_str_t *s);
jj_val_t pdr__jj_listv(jj_list_t *l, int tuple);
jj_val_t pdr__jj_dictv(jj_dict_t *d);
const jj_str_t *pdr__jj_str(jj_render_t *r, const char *p, size_t n);
jj_val_t pdr__jj_cstr(jj_render_t *r, const char *p, size_t n);
jj_list_t *pdr__jj_list_new(jj_render_t *r, size_t n);
jj_dict_t *pdr__jj_dict_new(jj_render_t *r, size_t cap);
void pdr__jj_dict_set(jj_render_t *r, jj_dict_t *d, jj_val_t k, jj_val_t v);
/* The value under key k, or NULL. */
jj_val_t *pdr__jj_dict_get(const jj_dict_t *d, jj_val_t k);
jj_val_t *pdr__jj_dict_gets(const jj_dict_t *d, const char *k, size_t n);
int pdr__jj_truthy(jj_render_t *r, jj_val_t v);
int pdr__jj_equal(jj_val_t a, jj_val_t b);
/* The same, with the elements and bytes compared charged against the iteration limit. */
int pdr__jj_equal_r(jj_render_t *r, jj_val_t a, jj_val_t b);
/* -1, 0, 1; an error for values Python does not order. */
int pdr__jj_compare(jj_render_t *r, jj_val_t a, jj_val_t b);
const char *pdr__jj_type_name(jj_val_t v);
/* str(v) and repr(v) as Python writes them, appended to o. */
void pdr__jj_out_str(jj_render_t *r, jj_out_t *o, jj_val_t v);
void pdr__jj_out_repr(jj_render_t *r, jj_out_t *o, jj_val_t v);
void pdr__jj_out_put(jj_render_t *r, jj_out_t *o, const char *p, size_t n);
jj_val_t pdr__jj_tostr(jj_render_t *r, jj_val_t v);
/* json.dumps(v, ensure_ascii=False, indent=indent (<0: none), sort_keys=sort). */
void pdr__jj_out_json(jj_render_t *r, jj_out_t *o, jj_val_t v, int indent, int sort, int level);
jj_val_t pdr__jj_from_json(jj_render_t *r, const json_t *j, unsigned depth);
/* The elements of an iterable (a list, a tuple, a dict's keys, a string's characters, nothing for
 * undefined). */
jj_list_t *pdr__jj_iterate(jj_render_t *r, jj_val_t v);
/* The first occurrence of needle (m bytes) in hay (n bytes), or NULL (memmem without _GNU_SOURCE). */
const char *pdr__jj_find(const char *hay, size_t n, const char *needle, size_t m);
size_t pdr__jj_utf8_len(const char *p, size_t n);
/* Writes code point cp as UTF-8 (1 to 4 bytes) at o; returns its length. */
size_t pdr__jj_put_utf8(char *o, uint32_t cp);
/* Byte offset of code point i (i <= the length). */
size_t pdr__jj_utf8_off(const char *p, size_t n, size_t i);
int64_t pdr__jj_length(jj_render_t *r, jj_val_t v);
/* Python's float repr. */
int pdr__jj_fmt_float(double f, char *buf, size_t n);

/* Attribute and item access (jinja_access.c). */
jj_val_t pdr__jj_getattr(jj_render_t *r, jj_val_t obj, const jj_str_t *name);
/* An attribute without the item fallback (the attr filter): a dict's key is no attribute. */
jj_val_t pdr__jj_getattr_only(jj_render_t *r, jj_val_t obj, const jj_str_t *name);
jj_val_t pdr__jj_getitem(jj_render_t *r, jj_val_t obj, jj_val_t key);
jj_val_t pdr__jj_slice(jj_render_t *r, jj_val_t obj, jj_val_t *lo, jj_val_t *hi, jj_val_t *step);

/* Calls (jinja_filters.c, jinja_methods.c). */
typedef struct jj_args {
    jj_val_t *pos;
    const jj_str_t **kwn;
    jj_val_t *kwv;
    uint32_t npos, nkw;
} jj_args_t;
jj_val_t pdr__jj_filter(jj_render_t *r, const jj_str_t *name, jj_val_t v, const jj_args_t *a);
int pdr__jj_test(jj_render_t *r, const jj_str_t *name, jj_val_t v, const jj_args_t *a);
int pdr__jj_have_filter(const char *name, size_t n);
int pdr__jj_have_test(const char *name, size_t n);
jj_val_t pdr__jj_call_method(jj_render_t *r, const jj_method_t *m, const jj_args_t *a);
jj_val_t pdr__jj_call_func(jj_render_t *r, int fn, const jj_args_t *a);
/* An argument by position or keyword, or NULL. */
const jj_val_t *pdr__jj_arg(const jj_args_t *a, uint32_t i, const char *kw);
jj_val_t pdr__jj_call_macro(jj_render_t *r, const jj_macro_t *m, const jj_args_t *a);
/* Values nest at most this deep (the context's JSON, repr, tojson, comparisons). */
#define JJ_VALUE_DEPTH 1000
void pdr__jj_exec(jj_render_t *r, const jj_stmt_t *s, jj_scope_t *sc);
/* Evaluates an expression (jinja_eval.c). */
jj_val_t pdr__jj_eval(jj_render_t *r, const jj_expr_t *e);
jj_val_t pdr__jj_binop(jj_render_t *r, int op, jj_val_t a, jj_val_t b);

#endif
