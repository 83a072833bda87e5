/*
 * A log line at most once per period (ratelog.c), for events that can come by the thousand a second:
 * the first of a period is written, the rest are counted, and the next line written says how many were
 * not. Any thread; lock-free.
 */
#ifndef PDR_RATELOG_H
#define PDR_RATELOG_H

#include <stdint.h>

typedef struct pdr_ratelog {
    uint64_t next_ns;    /* when the next line may be written (0: now) */
    uint64_t suppressed; /* lines refused since the last one written */
} pdr_ratelog_t;

#define PDR_RATELOG_INIT                                                                                     \
    {                                                                                                        \
        0, 0                                                                                                 \
    }

/* 1 when a line may be written at now_ns (then no other may until now_ns + period_ns), with *suppressed
 * set to the lines refused since the last one; 0 when not (that one counted). */
int pdr_ratelog_take(pdr_ratelog_t *rl, uint64_t now_ns, uint64_t period_ns, uint64_t *suppressed);

#endif
