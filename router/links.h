/*
 * Prefill -> decode link state (links.c): for every pairing whose KV transfer failed, the consecutive
 * failures, the last failure's time and cause, and a suspect mark. A KV failure on the link (deadline,
 * shim failure, a peer gone while the KV was in flight, an error answer before the KV arrived) sets the
 * mark; a KV transfer that completes on the link clears it. Nothing here changes picking: a later
 * breaker may avoid suspect pairings through pdr_links_is_suspect().
 *
 * One table for the process, shared by every loop (its own mutex). Bounded: at most PDR_LINKS_MAX
 * entries (the least recently failed is dropped to make room), and a worker that leaves the pool or
 * restarts takes its entries with it (pdr_links_forget_worker). A link with no entry has never failed
 * (or was forgotten): not suspect. Any thread.
 */
#ifndef PDR_LINKS_H
#define PDR_LINKS_H

#include <stddef.h>
#include <stdint.h>
#include "pool.h"

#define PDR_LINKS_MAX 1024   /* entries: also the bound on pdr_link_suspect's series */
#define PDR_LINKS_TARGET 300 /* a worker's target (pdr_worker_t.target) */

typedef struct pdr_link_info {
    uint64_t prefill_uid, decode_uid;
    char prefill[PDR_LINKS_TARGET], decode[PDR_LINKS_TARGET]; /* the workers' targets */
    char prefill_id[32], decode_id[32];                       /* "prefill-3" */
    int suspect;
    uint64_t consecutive_failures, failures_total, successes_total;
    uint64_t last_failure_ms; /* wall clock */
    char last_cause[24];
} pdr_link_info_t;

/* A KV transfer on the link p -> d failed with cause (a pdr_kv_cause_name()): counts it and marks the
 * link suspect. */
void pdr_links_failure(const pdr_worker_t *p, const pdr_worker_t *d, const char *cause);
/* A KV transfer on the link completed: the consecutive count goes to 0 and the mark is cleared. Costs one
 * atomic load while no link has an entry. */
void pdr_links_success(const pdr_worker_t *p, const pdr_worker_t *d);
/* 1 when the link is marked suspect. */
int pdr_links_is_suspect(const pdr_worker_t *p, const pdr_worker_t *d);
/* Drops every entry of w (as prefill or decode): it left the pool or a new incarnation replaced it. */
void pdr_links_forget_worker(const pdr_worker_t *w);
/* Copies up to cap entries (in no particular order) into out; returns how many. *suspect (optional)
 * receives the number of suspect links in the whole table. */
size_t pdr_links_snapshot(pdr_link_info_t *out, size_t cap, size_t *suspect);
/* How many links have an entry now. */
size_t pdr_links_count(void);
/* Tests: empties the table. */
void pdr_links__reset(void);

#endif
