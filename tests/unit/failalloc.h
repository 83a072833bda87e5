/*
 * Allocation-failure injection for unit tests that compile library sources into themselves: include this,
 * then the .c files under test, then failalloc_end.h. Every malloc/calloc/realloc those files make counts
 * in alloc_calls; the one numbered alloc_fail_at (-1: none) returns NULL. A test sets alloc_calls = 0 and
 * alloc_fail_at = N to fail the N-th allocation of the next call.
 */
#ifndef PDR_TEST_FAILALLOC_H
#define PDR_TEST_FAILALLOC_H

#include <stdlib.h>

static long alloc_calls, alloc_fail_at = -1;
static void *t_malloc(size_t n)
{
    return ++alloc_calls == alloc_fail_at ? NULL : malloc(n);
}
static void *t_calloc(size_t a, size_t b)
{
    return ++alloc_calls == alloc_fail_at ? NULL : calloc(a, b);
}
static void *t_realloc(void *p, size_t n)
{
    return ++alloc_calls == alloc_fail_at ? NULL : realloc(p, n);
}
#define malloc t_malloc
#define calloc t_calloc
#define realloc t_realloc

#endif
