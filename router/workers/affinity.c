/*
 * Session affinity's choice (affinity.h): rendezvous hashing of a session key over ring keys. Pure, any
 * thread; the pool's pick (pool_pick.c) applies it.
 */
#include "affinity.h"
#include "routing.h"

const char *const pdr_affinity_outcome_names[PDR_AFFINITY__COUNT] = {"hit", "moved", "fallback_overloaded",
                                                                     "no_key"};

uint64_t pdr_affinity_key(const char *value, size_t len)
{
    return pdr_routing_hash(value, len);
}

uint64_t pdr_affinity_weight(uint64_t session, uint64_t ring_key)
{
    return pdr_mix64(session ^ pdr_mix64(ring_key + 0x9e3779b97f4a7c15ull));
}

int pdr_affinity_choose(uint64_t session, const uint64_t *ring_keys, const unsigned char *ok, size_t n)
{
    int best = -1;
    uint64_t bw = 0;
    for (size_t i = 0; i < n; i++) {
        if (ok != NULL && !ok[i])
            continue;
        uint64_t w = pdr_affinity_weight(session, ring_keys[i]);
        if (best < 0 || w > bw || (w == bw && ring_keys[i] < ring_keys[best])) {
            best = (int)i;
            bw = w;
        }
    }
    return best;
}

int pdr_affinity_overloaded(int inflight, uint64_t sum, size_t n, double ratio)
{
    /* (inflight + 1) > ratio * (sum / n + 1), multiplied by n: whole numbers on both sides but the ratio,
     * so that a choice exactly at the bound is never shed by a rounding of the mean. */
    return n > 0 && (double)(inflight + 1) * (double)n > ratio * (double)(sum + n);
}
