/*
 * Request routing that needs state of its own: an approximate prefix tree of recent prompts (which worker
 * has seen which prefix, by bytes, after sglang's router "approximate radix tree") and the two policies
 * built on it or on loads alone, cache_aware and power_of_two. Plain C: no event-loop or HTTP types, so
 * the router, the unit tests and the benchmark link the same code.
 *
 * Threads: a tree is shared by the router's loop threads; every call takes the tree's mutex for its whole
 * duration (one cache_aware decision is one critical section: match, choice and insert; the one
 * exception is the consistent-hash seed, a pure function of the candidates computed with the lock
 * released between the match and the insert). The pure functions (power_of_two, the ring, the bound)
 * touch no shared state. The cost of the lock is measured in
 * docs/benchmarks.md ("Routing: prefix tree cost"); docs/internals/routing.md describes the tree, its
 * eviction and its memory bound.
 */
#ifndef PDR_ROUTING_H
#define PDR_ROUTING_H

#include <stddef.h>
#include <stdint.h>

typedef struct pdr_ptree pdr_ptree_t;

/*
 * A tree whose tenants (workers, by an opaque non-zero id) are each trimmed to max_chars bytes of prompt
 * text: pdr_ptree_evict() trims every tenant above it (the periodic eviction), and an insert that takes
 * its tenant past 2 * max_chars trims that tenant at once, so no tenant ever holds more than
 * 2 * max_chars (the hard bound of pdr_ptree_bytes_bound()). max_chars must be at least 1. Returns NULL
 * and sets *err (PDR_EINVAL, PDR_ENOMEM) on failure.
 */
pdr_ptree_t *pdr_ptree_new(uint64_t max_chars, int *err);
void pdr_ptree_free(pdr_ptree_t *tree);

/*
 * Records that tenant has seen text[0..len): every node on the path receives the tenant with a fresh access
 * stamp. Returns 0, PDR_EINVAL (tenant 0) or PDR_ENOMEM; on PDR_ENOMEM the tree stays consistent and
 * holds a prefix of the text for the tenant.
 */
int pdr_ptree_insert(pdr_ptree_t *tree, const char *text, size_t len, uint64_t tenant);

/*
 * The longest prefix of text[0..len) that one of the tenants holds. With cand (n ids) only those tenants
 * count; with cand NULL every tenant does. Returns the matched length in bytes and sets *tenant to the
 * matching tenant (the most recently used one among those that match that far), or to 0 when nothing
 * matches. Does not refresh access stamps (an insert does).
 */
size_t pdr_ptree_match(pdr_ptree_t *tree, const char *text, size_t len, const uint64_t *cand, size_t n,
                       uint64_t *tenant);

/* The bytes of prompt text that tenant holds (the size that cache_aware's "smallest tree" compares). */
uint64_t pdr_ptree_tenant_chars(pdr_ptree_t *tree, uint64_t tenant);
/* The number of tenants known to the tree. */
size_t pdr_ptree_tenants(pdr_ptree_t *tree);
/* Forgets a tenant: its stamps, its count, and the nodes no other tenant holds. */
void pdr_ptree_remove_tenant(pdr_ptree_t *tree, uint64_t tenant);
/*
 * Trims every tenant holding more than max_chars bytes (0: the tree's own max_chars), least recently used
 * leaves first, until it holds at most that. Returns 0, or PDR_ENOMEM when the eviction's heap could not
 * be allocated (the tree stays consistent, some tenants untrimmed).
 */
int pdr_ptree_evict(pdr_ptree_t *tree, uint64_t max_chars);

/* The bytes the tree has allocated now (its own exact count of every block it holds). */
uint64_t pdr_ptree_bytes(pdr_ptree_t *tree);
/* The most pdr_ptree_bytes() can reach with the given number of tenants and max_chars (see
 * docs/internals/routing.md for the formula). */
uint64_t pdr_ptree_bytes_bound(uint64_t tenants, uint64_t max_chars);

/* Where cache_aware sends a prompt that no candidate holds far enough (below cache_threshold). */
typedef enum pdr_cache_aware_seed {
    PDR_CACHE_AWARE_SEED_SMALLEST_TREE,   /* sglang: the candidate holding the fewest bytes */
    PDR_CACHE_AWARE_SEED_CONSISTENT_HASH, /* the prompt's start on a ring of the candidates, bounded load */
} pdr_cache_aware_seed_t;

/* sglang's cache_aware thresholds (its command line defaults: 0.3, 64, 1.5) and the seeding rule. */
typedef struct pdr_cache_aware_params {
    double cache_threshold;         /* match_len / prompt_len must exceed it for a cache hit */
    uint64_t balance_abs_threshold; /* imbalanced when max - min load exceeds it ... */
    double balance_rel_threshold;   /* ... and max load exceeds min load times it */
    pdr_cache_aware_seed_t seed;    /* below the threshold: smallest tree (sglang) or consistent hash */
    size_t hash_prefix_chars;       /* consistent_hash: the ring key is a hash of this many leading bytes */
    double hash_load_factor;        /* consistent_hash: no candidate above this times the mean load */
} pdr_cache_aware_params_t;

/* 256 bytes: past a chat template's opening and into the system prompt; 1.5: 1 + epsilon with epsilon
 * 0.5, where three replicas kept families together better than at 1.25 (docs/benchmarks.md). */
#define PDR_CACHE_AWARE_PARAMS_DEFAULT                                                                       \
    {                                                                                                        \
        0.3, 64, 1.5, PDR_CACHE_AWARE_SEED_SMALLEST_TREE, 256, 1.5                                           \
    }

typedef enum pdr_cache_aware_decision {
    PDR_CACHE_AWARE_MATCH,         /* the candidate holding the longest prefix */
    PDR_CACHE_AWARE_SMALLEST_TREE, /* match too short: the candidate holding the fewest bytes */
    PDR_CACHE_AWARE_BALANCE,       /* loads imbalanced: the least loaded candidate */
    PDR_CACHE_AWARE_HASH,          /* match too short, seed consistent_hash: the ring's choice */
} pdr_cache_aware_decision_t;

/*
 * Picks one of n candidates (ids[i] non-zero, loads[i] their in-flight requests) for text[0..len) and
 * records the text under the chosen one (in every case, as sglang does). Ties go to the lower load, then
 * to the lower index. Returns the index, or PDR_ENOWORKER when n is 0, or PDR_EINVAL. A failed insert
 * (out of memory) does not change the choice. decision, when not NULL, says which rule chose.
 */
int pdr_cache_aware_pick(pdr_ptree_t *tree, const pdr_cache_aware_params_t *params, const uint64_t *ids,
                         const uint64_t *loads, size_t n, const char *text, size_t len,
                         pdr_cache_aware_decision_t *decision);

/*
 * As pdr_cache_aware_pick, with keys[i] the candidates' ring keys for the consistent_hash seed: a value
 * that names the worker alike in every router replica (pdr_routing_hash of its URL), where ids (the
 * tree's tenants) may be local numbers. keys NULL: the ids are the keys.
 */
int pdr_cache_aware_pick_keyed(pdr_ptree_t *tree, const pdr_cache_aware_params_t *params, const uint64_t *ids,
                               const uint64_t *keys, const uint64_t *loads, size_t n, const char *text,
                               size_t len, pdr_cache_aware_decision_t *decision);

/*
 * Consistent hashing with bounded loads (Mirrokni, Thorup, Zadimoghaddam, "Consistent Hashing with
 * Bounded Loads", 2018). Each candidate (keys[i]: a value the same in every process) has
 * PDR_CHASH_VNODES points on a 64-bit ring; key_hash goes to the first point clockwise whose candidate
 * is under capacity, capacity being ceil(load_factor * (sum(loads) + 1) / n), the mean load with this
 * request counted. The result depends on the set of (key, load) pairs only, not on their order, so
 * independent processes with the same candidates and loads choose the same one; removing a candidate
 * moves only the keys that were on it (with no load above capacity). load_factor below 1 counts as 1
 * (someone is always under capacity then; with loads near 2^64, where the arithmetic saturates and rounds,
 * the nearest of the least loaded). loads NULL: all zero. Returns the index, PDR_ENOWORKER when n is 0,
 * PDR_EINVAL when keys is NULL.
 */
#define PDR_CHASH_VNODES 64
int pdr_chash_pick(const uint64_t *keys, const uint64_t *loads, size_t n, uint64_t key_hash,
                   double load_factor);

/* A 64-bit hash of bytes, the same on every platform and in every process (FNV-1a, then splitmix64's
 * finalizer to spread FNV's low bits). */
uint64_t pdr_routing_hash(const void *p, size_t len);

/* splitmix64's finalizer: every bit of x reaches every bit of the result. */
static inline uint64_t pdr_mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

/*
 * As pdr_cache_aware_pick_keyed, and: with record 0 the tree is left unchanged (the caller records the
 * text with pdr_ptree_insert once it knows the request goes to that worker); matched_out, when not NULL,
 * receives the length of the prefix of text the chosen candidate holds (its own match, whatever rule chose
 * it), from the same critical section. Conditional disaggregation uses both: the prefill's cached prefix
 * decides whether the prefill runs at all.
 */
int pdr_cache_aware_pick_ex(pdr_ptree_t *tree, const pdr_cache_aware_params_t *params, const uint64_t *ids,
                            const uint64_t *keys, const uint64_t *loads, size_t n, const char *text,
                            size_t len, pdr_cache_aware_decision_t *decision, int record,
                            size_t *matched_out);

/*
 * power_of_two: two distinct candidates drawn at random from *rng_state (advanced), the less loaded of
 * the two (the first drawn on a tie). Returns the index, or PDR_ENOWORKER when n is 0.
 */
int pdr_power_of_two_pick(const uint64_t *loads, size_t n, uint64_t *rng_state);

/* The generator power_of_two draws from (splitmix64): any seed, a new state and 64 bits per call. */
uint64_t pdr_routing_rng_next(uint64_t *state);

#endif
