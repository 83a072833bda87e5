/*
 * Consistent hashing with bounded loads, the seed of cache_aware's unseen prefixes when several router
 * replicas must agree without sharing state. The ring is implicit: candidate i's PDR_CHASH_VNODES points
 * are mix(keys[i], v), computed on each call (no ring to rebuild when membership changes), and the
 * first point clockwise of the key whose candidate is under capacity is the one with the smallest
 * clockwise distance among those candidates: exactly the walk of a sorted ring that skips full workers.
 * Pure functions, any thread.
 */
#include "err.h"
#include "routing.h"

/* splitmix64's finalizer: a bijection that spreads every input bit over the output. */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint64_t pdr_routing_hash(const void *p, size_t len)
{
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a 64's offset basis and prime */
    for (size_t i = 0; i < len; i++)
        h = (h ^ s[i]) * 0x100000001b3ULL;
    return mix64(h);
}

/* The clockwise distance from key_hash to the nearest of the candidate's points. */
static uint64_t ring_distance(uint64_t key, uint64_t key_hash)
{
    uint64_t best = UINT64_MAX, k = mix64(key);
    for (uint64_t v = 0; v < PDR_CHASH_VNODES; v++) {
        uint64_t d = mix64(k + (v + 1) * 0x9e3779b97f4a7c15ULL) - key_hash;
        if (d < best)
            best = d;
    }
    return best;
}

/* The candidate nearest clockwise of key_hash among those whose load is at most limit (all of them when
 * loads is NULL: every load is 0), or -1 when none is. Equal distances need equal points: the lower key
 * wins, so that the order of the candidates never matters. */
static int nearest_within(const uint64_t *keys, const uint64_t *loads, size_t n, uint64_t key_hash,
                          uint64_t limit)
{
    int pick = -1;
    uint64_t best = 0;
    for (size_t i = 0; i < n; i++) {
        if (loads != NULL && loads[i] > limit)
            continue;
        uint64_t d = ring_distance(keys[i], key_hash);
        if (pick < 0 || d < best || (d == best && keys[i] < keys[pick])) {
            best = d;
            pick = (int)i;
        }
    }
    return pick;
}

int pdr_chash_pick(const uint64_t *keys, const uint64_t *loads, size_t n, uint64_t key_hash,
                   double load_factor)
{
    if (n == 0)
        return PDR_ENOWORKER;
    if (keys == NULL || n > INT32_MAX)
        return PDR_EINVAL;
    if (!(load_factor >= 1.0)) /* also NaN */
        load_factor = 1.0;
    uint64_t sum = 0, least = UINT64_MAX;
    for (size_t i = 0; loads != NULL && i < n; i++) {
        sum = loads[i] > UINT64_MAX - sum ? UINT64_MAX : sum + loads[i]; /* saturates */
        if (loads[i] < least)
            least = loads[i];
    }
    /* Capacity with this request counted: a candidate is under it when its load + 1 <= cap, that is when
     * its load is at most cap - 1 (cap >= 1: the mean is above 0). */
    double mean = load_factor * ((double)sum + 1.0) / (double)n, cap = (double)(uint64_t)mean;
    if (cap < mean)
        cap += 1.0; /* ceil, without libm */
    uint64_t limit = cap - 1.0 >= 18446744073709551615.0 ? UINT64_MAX : (uint64_t)(cap - 1.0);
    int pick = nearest_within(keys, loads, n, key_hash, limit);
    /* The least loaded candidate is under capacity in exact arithmetic; with loads near 2^64 the doubles
     * round, and then the nearest of the least loaded ones keeps the choice total and independent of the
     * candidates' order. Without loads every candidate is under capacity, so loads is not NULL here. */
    if (pick < 0)
        pick = nearest_within(keys, loads, n, key_hash, least);
    return pick;
}
