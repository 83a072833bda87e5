/* Bounded growable buffers (see buf.h). Any thread, one buffer per thread at a time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "buf.h"
#include "err.h"

int pdr_buf_append(pdr_buf_t *b, const void *p, size_t n, size_t limit)
{
    if (n > limit || b->len > limit - n)
        return PDR_ETOOBIG;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 1024; /* streams of small events stay small */
        while (cap < b->len + n)
            cap *= 2;
        char *np = realloc(b->p, cap);
        if (np == NULL)
            return PDR_ENOMEM;
        b->p = np;
        b->cap = cap;
    }
    if (n > 0)
        memcpy(b->p + b->len, p, n);
    b->len += n;
    return 0;
}

int pdr_buf_vprintf(pdr_buf_t *b, size_t limit, const char *fmt, va_list ap)
{
    for (;;) {
        va_list aq;
        va_copy(aq, ap);
        size_t room = b->p != NULL ? b->cap - b->len : 0;
        int n = vsnprintf(room ? b->p + b->len : NULL, room, fmt, aq);
        va_end(aq);
        if (n < 0)
            return PDR_EINVAL;
        if ((size_t)n < room) {
            b->len += (size_t)n;
            return 0;
        }
        if ((size_t)n + 1 > limit || b->len > limit - (size_t)n - 1)
            return PDR_ETOOBIG;
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->len + (size_t)n + 1)
            cap *= 2;
        char *np = realloc(b->p, cap);
        if (np == NULL)
            return PDR_ENOMEM;
        b->p = np;
        b->cap = cap;
    }
}

void pdr_buf_free(pdr_buf_t *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}
