/*
 * The two policies of sglang's router that pdrouter's older ones lack: cache_aware (prefix affinity with
 * a load-imbalance escape; unseen prefixes seeded by smallest tree or by consistent hash) and power_of_two
 * (the less loaded of two random candidates). Any thread: the caller passes the candidates' ids and loads;
 * cache_aware's only shared state is the tree, whose lock covers the whole decision.
 */
#include "routing.h"

#include "err.h"
#include "routing_internal.h"

/* The least loaded candidate, the lowest index on a tie. */
static size_t least_loaded(const uint64_t *loads, size_t n)
{
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (loads[i] < loads[best])
            best = i;
    return best;
}

/* sglang: imbalanced when both the absolute and the relative spread of loads[0..n) (n >= 1) exceed their
 * thresholds. */
int pdr__loads_imbalanced(const pdr_cache_aware_params_t *params, const uint64_t *loads, size_t n)
{
    uint64_t max = loads[0], min = loads[0];
    for (size_t i = 1; i < n; i++) {
        if (loads[i] > max)
            max = loads[i];
        if (loads[i] < min)
            min = loads[i];
    }
    return max - min > params->balance_abs_threshold &&
           (double)max > (double)min * params->balance_rel_threshold;
}

int pdr_cache_aware_pick(pdr_ptree_t *tree, const pdr_cache_aware_params_t *params, const uint64_t *ids,
                         const uint64_t *loads, size_t n, const char *text, size_t len,
                         pdr_cache_aware_decision_t *decision)
{
    return pdr_cache_aware_pick_keyed(tree, params, ids, NULL, loads, n, text, len, decision);
}

int pdr_cache_aware_pick_keyed(pdr_ptree_t *tree, const pdr_cache_aware_params_t *params, const uint64_t *ids,
                               const uint64_t *keys, const uint64_t *loads, size_t n, const char *text,
                               size_t len, pdr_cache_aware_decision_t *decision)
{
    return pdr_cache_aware_pick_ex(tree, params, ids, keys, loads, n, text, len, decision, 1, NULL);
}

int pdr_cache_aware_pick_ex(pdr_ptree_t *tree, const pdr_cache_aware_params_t *params, const uint64_t *ids,
                            const uint64_t *keys, const uint64_t *loads, size_t n, const char *text,
                            size_t len, pdr_cache_aware_decision_t *decision, int record, size_t *matched_out)
{
    if (n == 0)
        return PDR_ENOWORKER;
    if (tree == NULL || params == NULL || ids == NULL || loads == NULL || (text == NULL && len > 0) ||
        n > INT32_MAX)
        return PDR_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (ids[i] == 0)
            return PDR_EINVAL;
    if (text == NULL)
        text = "";

    int imbalanced = pdr__loads_imbalanced(params, loads, n);

    size_t pick = 0, deepest_len = 0;
    int chosen_holds_deepest = 0;
    pdr_cache_aware_decision_t why;
    pdr__ptree_lock(tree);
    if (imbalanced) {
        pick = least_loaded(loads, n);
        why = PDR_CACHE_AWARE_BALANCE;
    } else {
        size_t matched = 0;
        const void *deepest = pdr__ptree_walk(tree, text, len, ids, n, &matched);
        deepest_len = matched;
        double rate = len > 0 ? (double)matched / (double)len : 0.0;
        if (rate > params->cache_threshold) {
            /* Every candidate holding the deepest node matches the same length: the least loaded wins. */
            int found = 0;
            for (size_t i = 0; i < n; i++)
                if (pdr__ptree_node_holds(deepest, ids[i]) && (!found || loads[i] < loads[pick])) {
                    pick = i;
                    found = 1;
                }
            why = PDR_CACHE_AWARE_MATCH;
            chosen_holds_deepest = 1;
        } else if (params->seed == PDR_CACHE_AWARE_SEED_CONSISTENT_HASH) {
            /* The same first choice in every replica: the ring decides from the prompt's start. It reads
             * no tree state, so it runs outside the lock (a microsecond per dozen candidates); the insert
             * below takes the lock again. */
            pdr__ptree_unlock(tree);
            size_t k = len < params->hash_prefix_chars ? len : params->hash_prefix_chars;
            int r = pdr_chash_pick(keys != NULL ? keys : ids, loads, n, pdr_routing_hash(text, k),
                                   params->hash_load_factor);
            pick = r >= 0 ? (size_t)r : least_loaded(loads, n);
            why = PDR_CACHE_AWARE_HASH;
            pdr__ptree_lock(tree);
        } else {
            uint64_t best = 0;
            for (size_t i = 0; i < n; i++) {
                uint64_t c = pdr__ptree_chars_locked(tree, ids[i]);
                if (i == 0 || c < best || (c == best && loads[i] < loads[pick])) {
                    best = c;
                    pick = i;
                }
            }
            why = PDR_CACHE_AWARE_SMALLEST_TREE;
        }
    }
    if (matched_out != NULL) {
        /* What the chosen one holds: the match above when it chose by it; otherwise (the deepest match
         * may be another candidate's, or balance looked at none) a walk limited to the chosen one. */
        size_t mine = deepest_len;
        if (!chosen_holds_deepest)
            (void)pdr__ptree_walk(tree, text, len, &ids[pick], 1, &mine);
        *matched_out = mine;
    }
    if (record)
        (void)pdr__ptree_insert_locked(tree, text, len, ids[pick]);
    pdr__ptree_unlock(tree);
    if (decision != NULL)
        *decision = why;
    return (int)pick;
}

uint64_t pdr_routing_rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

int pdr_power_of_two_pick(const uint64_t *loads, size_t n, uint64_t *rng_state)
{
    if (n == 0)
        return PDR_ENOWORKER;
    if (loads == NULL || rng_state == NULL || n > INT32_MAX)
        return PDR_EINVAL;
    if (n == 1)
        return 0;
    size_t a = (size_t)(pdr_routing_rng_next(rng_state) % n);
    size_t b = (size_t)(pdr_routing_rng_next(rng_state) % (n - 1));
    if (b >= a)
        b++;
    return (int)(loads[b] < loads[a] ? b : a);
}
