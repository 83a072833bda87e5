/*
 * Session affinity: a request that names its session (a header of affinity.headers) goes, for each role,
 * to the rendezvous (highest random weight) choice of its session key among the eligible workers of its
 * pool. The choice is a pure function of the key and the workers' ring keys (a hash of the worker's URL,
 * alike in every router replica), so every replica chooses alike and nothing is stored: no table, no
 * expiry, nothing to carry across a reload or a restart. When a worker leaves the eligible set only its own
 * sessions move (each to its next-highest worker), and they come back when it returns. Pure, any thread.
 */
#ifndef PDR_AFFINITY_H
#define PDR_AFFINITY_H

#include <stddef.h>
#include <stdint.h>

/* The outcomes of a pick with affinity on, by role (pdr_affinity_picks_total{outcome}). */
enum {
    PDR_AFFINITY_HIT = 0, /* the session's first choice among all the pool's workers of the role */
    PDR_AFFINITY_MOVED,   /* its first choice is not eligible (unhealthy, draining, ejected,
                             incompatible, failed this request): the next one among the eligible */
    PDR_AFFINITY_FALLBACK_OVERLOADED, /* soft: the choice was overloaded, the pool's policy picked */
    PDR_AFFINITY_NO_KEY,              /* the request names no session: the pool's policy picked */
    PDR_AFFINITY__COUNT
};
extern const char *const pdr_affinity_outcome_names[PDR_AFFINITY__COUNT];

/* The session key of a header's value (the same on every platform and in every process). */
uint64_t pdr_affinity_key(const char *value, size_t len);
/* The weight of a worker with ring key ring_key for the session key (highest wins). */
uint64_t pdr_affinity_weight(uint64_t session, uint64_t ring_key);
/* The index in ring_keys[0..n) of the highest weight among those ok allows (ok NULL: all); ties go to the
 * lower ring key. -1 when none is allowed. */
int pdr_affinity_choose(uint64_t session, const uint64_t *ring_keys, const unsigned char *ok, size_t n);
/* Soft mode: whether a choice with `inflight` requests in flight is overloaded among n workers with `sum`
 * requests in flight together: inflight + 1 > ratio * (sum / n + 1) (the request itself counted on both
 * sides, so that an idle pool never sheds a session), computed without dividing. */
int pdr_affinity_overloaded(int inflight, uint64_t sum, size_t n, double ratio);

#endif
