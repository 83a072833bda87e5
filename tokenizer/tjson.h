/*
 * A small strict JSON parser for tokenizer.json (RFC 8259: UTF-8 only, no trailing commas, no comments,
 * no leading zeros, nesting at most 128 deep). The whole file is read into one buffer, strings are
 * unescaped in place and the values land in one flat array in document order, so a 17 MB file costs two
 * allocations that grow. Errors carry "file:line:col: message". Objects of up to 64 members are checked
 * for duplicate keys; larger ones (a vocabulary) are left to their reader.
 */
#ifndef PDR_TJSON_H
#define PDR_TJSON_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    PDR__TJ_NULL,
    PDR__TJ_FALSE,
    PDR__TJ_TRUE,
    PDR__TJ_NUM,
    PDR__TJ_STR,
    PDR__TJ_ARR,
    PDR__TJ_OBJ
} pdr__tj_type_t;

typedef struct pdr__tj_node {
    uint8_t type;   /* pdr__tj_type_t */
    uint8_t is_int; /* PDR__TJ_NUM: an integer that fits int64 (v.i) */
    uint32_t n;     /* string: bytes; array: elements; object: members */
    uint32_t end;   /* the index just past this value (and its children) */
    union {
        const char *s; /* string bytes (not NUL-terminated; may hold NUL) */
        int64_t i;
    } v;
} pdr__tj_node_t;

typedef struct pdr__tj {
    char *buf;
    pdr__tj_node_t *nodes; /* nodes[0]: the top-level value; an object's members are key, value pairs */
    size_t n, cap;
} pdr__tj_t;

/* Reads and parses path. Returns 0, or PDR_ECONFIG / PDR_ENOMEM / PDR_ETOOBIG with the message in err. */
int pdr__tj_parse_file(pdr__tj_t *doc, const char *path, char *err, size_t errlen);
/* Parses buf[0..len) (taken over: freed with the document). */
int pdr__tj_parse(pdr__tj_t *doc, char *buf, size_t len, const char *name, char *err, size_t errlen);
void pdr__tj_free(pdr__tj_t *doc);

/* Object member by key (NULL: missing, or obj not an object). */
const pdr__tj_node_t *pdr__tj_get(const pdr__tj_t *doc, const pdr__tj_node_t *obj, const char *key);
const pdr__tj_node_t *pdr__tj_getn(const pdr__tj_t *doc, const pdr__tj_node_t *obj, const char *key,
                                   size_t len);
/* Iteration: the first child (array element, or object key whose value is key + 1), the next one. */
const pdr__tj_node_t *pdr__tj_first(const pdr__tj_node_t *parent);
const pdr__tj_node_t *pdr__tj_next(const pdr__tj_t *doc, const pdr__tj_node_t *parent,
                                   const pdr__tj_node_t *child);
/* Element i of an array (linear in i: for short arrays), or NULL. */
const pdr__tj_node_t *pdr__tj_at(const pdr__tj_t *doc, const pdr__tj_node_t *arr, size_t i);

#endif
