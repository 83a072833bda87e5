/* Bounded growable buffers (see buf.h). Any thread, one buffer per thread at a time. */
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

void pdr_buf_free(pdr_buf_t *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}
