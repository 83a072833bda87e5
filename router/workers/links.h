/*
 * Prefill -> decode link state (links.c): for every pairing whose KV transfer failed, the consecutive
 * failures, the last failure's time and cause, and a suspect mark. A KV failure on the link (deadline,
 * shim failure, a peer gone while the KV was in flight, an error answer before the KV arrived) sets the
 * mark; a KV transfer that completes on the link clears it. The link's breaker (breaker.h) lives in its
 * entry: pdr_links_failure_breaker counts a failure toward opening it, pdr_links_admit says whether a pick
 * may use the pairing.
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
#include "breaker.h"
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
    pdr_breaker_t brk; /* the link's breaker (closed while it never opened) */
} pdr_link_info_t;

/* A KV transfer on the link p -> d failed with cause (a pdr_kv_cause_name()): counts it and marks the
 * link suspect. */
void pdr_links_failure(const pdr_worker_t *p, const pdr_worker_t *d, const char *cause);
/* As pdr_links_failure; the link's breaker counts the failure under bc (NULL: the breaker is off). */
void pdr_links_failure_breaker(const pdr_worker_t *p, const pdr_worker_t *d, const char *cause,
                               const pdr_breaker_conf_t *bc);
/* Whether a pick may pair p with d now (pdr_breaker_admit: claim takes a half-open link's probe). 1 for a
 * link with no entry, at the cost of one atomic load while the table is empty. *last_failure_ms
 * (optional) receives the link's last failure (wall clock ms; 0: none). */
int pdr_links_admit(const pdr_worker_t *p, const pdr_worker_t *d, int claim, uint64_t *last_failure_ms);
/* A KV transfer on the link completed: the consecutive count goes to 0, the mark is cleared and the
 * breaker closes. Costs one atomic load while no link has an entry. */
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
/* The link table's /metrics families: the breaker's counters (breaker.h) and each link's breaker state
 * (malloc'd text, *len its length; NULL when out of memory). */
char *pdr_links_render_metrics(size_t *len);
/* Tests: empties the table. */
void pdr_links__reset(void);

#endif
