/*
 * Allocation-failure injection for whole programs (curl's "torture" mode; tests/unit/failalloc.h does the
 * same for sources compiled into a unit test): a program linked with failalloc.c and
 * -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=strdup,--wrap=strndup,--wrap=free (see
 * tests/failalloc.cmake) has every allocation of its own code (not of the shared libraries it uses)
 * counted, and the N-th after arming fails with ENOMEM. Any thread.
 *
 * Armed from the test (pdr_failalloc_arm) or, for a server process, from the environment:
 * PDR_FAIL_ALLOC_AT=N arms on SIGUSR2 (counting from the signal, so start-up is not counted; 0 counts
 * only), and PDR_FAIL_ALLOC_REPORT=PATH receives "count live failed" at exit (and PATH.armed is created once
 * SIGUSR2 has armed the counter).
 */
#ifndef PDR_TEST_FAILALLOC_WRAP_H
#define PDR_TEST_FAILALLOC_WRAP_H

/* Counts allocations from now; the fail_at-th (1-based) fails, fail_at 0 counts only, -1 disarms. */
void pdr_failalloc_arm(long fail_at);
/* Allocations since the last arm. */
long pdr_failalloc_count(void);
/* Whether the armed failure has happened. */
int pdr_failalloc_failed(void);
/* Allocations made through the wrappers and not yet freed through them. */
long pdr_failalloc_live(void);

#endif
