/*
 * The JSON scanner's value types (jsonscan.h includes this header): what a value and a top-level member
 * are, as the scan records them. No .c file goes with it; the grammar (jsonscan_value.c, through
 * jsonscan_internal.h) and the public side (jsonscan.c) both build on it.
 */
#ifndef PDR_JSONSCAN_TYPES_H
#define PDR_JSONSCAN_TYPES_H

#include <stddef.h>
#include <stdint.h>

/* Deepest nesting of arrays and objects accepted; the top-level object counts as depth 1. */
#define PDR_JSON_MAX_DEPTH 128

typedef enum {
    PDR_JT_NONE = 0,
    PDR_JT_NULL,
    PDR_JT_TRUE,
    PDR_JT_FALSE,
    PDR_JT_INT /* a number without fraction or exponent */,
    PDR_JT_NUMBER /* any other number */,
    PDR_JT_STRING,
    PDR_JT_ARRAY,
    PDR_JT_OBJECT,
    PDR_JT_MIXED
} pdr_jt_t;

typedef struct pdr_jval {
    uint8_t type; /* pdr_jt_t */
    /* Arrays: the type shared by all elements (INT and NUMBER elements mixed -> NUMBER), PDR_JT_MIXED if
     * they differ, PDR_JT_NONE if empty. TRUE and FALSE are distinct types, so [true,false] is MIXED. */
    uint8_t elem;
    /* Arrays whose elements are all arrays: the type shared by all their elements, empty inner arrays
     * not counting (NONE if all inner arrays are empty, MIXED if they differ). NONE otherwise. */
    uint8_t elem_elem;
    /* Arrays whose elements are all arrays: 1 when at least one of them is empty. 0 otherwise. */
    uint8_t empty_inner;
    uint32_t count; /* arrays: elements; objects: members; others: 0 */
    const char *p;  /* raw bytes of the value, exactly as in the input */
    size_t len;
} pdr_jval_t;

typedef struct pdr_jmember {
    const char *key; /* raw key bytes between the quotes (escapes NOT decoded) */
    size_t key_len;
    int key_escaped; /* the raw key contains a backslash escape */
    const char *raw; /* from the opening quote of the key to the end of the value: what to copy to keep it */
    size_t raw_len;
    pdr_jval_t v;
} pdr_jmember_t;

#endif
