/*
 * The pair-aware breaker (breaker.c): a prefill -> decode link whose KV transfers fail
 * breaker.consecutive_failures times in a row opens, and the pick of a pair avoids it (another decode for
 * the prefill, or another prefill) while both workers stay in rotation for their other pairings. After
 * the open period (breaker.open_ms, doubling per re-open up to breaker.max_open_ms) the link is half-open:
 * one request may use it as a probe; its completed transfer closes the link, its failure re-opens it.
 *
 * The state lives in the link's entry of links.c (pdr_link_info_t.brk) and changes under that table's
 * lock: the functions on pdr_breaker_t below are pure (the caller gives the time) and do no locking; the
 * counters are atomics, for /metrics. Any thread.
 */
#ifndef PDR_BREAKER_H
#define PDR_BREAKER_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    PDR_BREAKER_CLOSED = 0,
    PDR_BREAKER_OPEN,
    PDR_BREAKER_HALF_OPEN,
    PDR_BREAKER__COUNT
} pdr_breaker_state_t;
extern const char *const pdr_breaker_state_names[PDR_BREAKER__COUNT]; /* "closed", "open", "half_open" */

typedef struct pdr_breaker_conf {
    uint64_t consecutive_failures; /* the failures in a row that open a closed link */
    uint64_t open_ms, max_open_ms; /* the first open period; the cap of its doubling */
} pdr_breaker_conf_t;

typedef struct pdr_breaker {
    uint8_t state;     /* pdr_breaker_state_t */
    uint8_t probe;     /* half-open: a probe request has the link */
    uint64_t until_ms; /* open: when it turns half-open; half-open with a probe: when the probe is given up */
    uint64_t period_ms; /* the open period in force (0 while it never opened) */
} pdr_breaker_t;

/* The link's KV transfer failed; consecutive is the link's failures in a row, this one included. A
 * closed link opens at the threshold, a half-open one (its probe failed) re-opens for twice its last
 * period (at most max_open_ms). Returns the state after. */
pdr_breaker_state_t pdr_breaker_failure(pdr_breaker_t *b, uint64_t consecutive, const pdr_breaker_conf_t *c,
                                        uint64_t now_ms);
/* A KV transfer on the link completed: the link closes (its period starts again from open_ms). */
void pdr_breaker_success(pdr_breaker_t *b);
/* Whether a request may use the link now. An open link whose period is over turns half-open; a
 * half-open link admits one probe at a time (claim: the caller takes it; a probe not heard of within
 * the open period is given up, and another may go). 1: use it, 0: avoid it. */
int pdr_breaker_admit(pdr_breaker_t *b, uint64_t now_ms, int claim);
/* The state at now_ms (an open link past its period reads half-open) and, for an open link, the time
 * left before it turns half-open (*left_ms, optional). */
pdr_breaker_state_t pdr_breaker_state(const pdr_breaker_t *b, uint64_t now_ms, uint64_t *left_ms);

/* Counters (atomics). */
void pdr_breaker_count_avoided(void);  /* a pick left an open link for another pairing */
void pdr_breaker_count_all_open(void); /* every pairing tried was open: the least recently failed went */
uint64_t pdr_breaker_transitions(pdr_breaker_state_t to);
uint64_t pdr_breaker_avoided(void);
uint64_t pdr_breaker_all_open(void);
/* Tests: zeroes the counters. */
void pdr_breaker__reset(void);

#endif
