/*
 * A growable byte buffer with a ceiling chosen by the caller: growth past the limit is PDR_ETOOBIG,
 * never an unbounded allocation (every buffer in the project has a ceiling chosen by its owner). Not
 * thread-safe.
 */
#ifndef PDR_BUF_H
#define PDR_BUF_H

#include <stdarg.h>
#include <stddef.h>

typedef struct pdr_buf {
    char *p;
    size_t len, cap;
} pdr_buf_t;

/* Appends n bytes; PDR_ETOOBIG when len would pass limit, PDR_ENOMEM when allocation fails. */
int pdr_buf_append(pdr_buf_t *b, const void *p, size_t n, size_t limit);
/* Appends the formatted text (not its NUL; b->p stays NUL-terminated after a success); the same errors. */
int pdr_buf_vprintf(pdr_buf_t *b, size_t limit, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
void pdr_buf_free(pdr_buf_t *b);

#endif
