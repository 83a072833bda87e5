/* A tiny assertion helper for the C unit tests: CHECK keeps going, the exit status says if any failed. */
#ifndef PDR_TEST_CHECK_H
#define PDR_TEST_CHECK_H
#include <stdio.h>
static int check_failures;
#define CHECK(cond)                                                                                          \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);                         \
            check_failures++;                                                                                \
        }                                                                                                    \
    } while (0)
#define CHECK_DONE()                                                                                         \
    do {                                                                                                     \
        if (check_failures) {                                                                                \
            fprintf(stderr, "%d check(s) failed\n", check_failures);                                         \
            return 1;                                                                                        \
        }                                                                                                    \
        printf("all checks passed\n");                                                                       \
        return 0;                                                                                            \
    } while (0)
#endif
