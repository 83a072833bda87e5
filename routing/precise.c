/*
 * The precise_prefix decision: sglang's cache_aware rules on the KV event index's match where the index
 * knows the worker, on the approximate tree's match where it does not. Any thread: the index and the tree
 * take their own locks (the index is read first, then the tree's decision section runs), so a decision
 * sees the index as of one instant and the tree as of a later one; both only estimate a worker's cache.
 */
#include "err.h"
#include "kvevents.h"
#include "routing_internal.h"

int pdr_precise_prefix_pick(pdr_ptree_t *tree, pdr_kvindex_t *ix, const pdr_cache_aware_params_t *params,
                            const uint64_t *ids, const uint64_t *keys, const uint64_t *loads, size_t n,
                            const char *text, size_t len, const uint32_t *tokens, size_t n_tokens,
                            pdr_cache_aware_decision_t *decision, int record, size_t *matched_out,
                            int *from_index)
{
    return pdr_precise_prefix_pick_model(tree, ix, params, ids, keys, loads, n, text, len, tokens, n_tokens,
                                         decision, record, matched_out, from_index, NULL, 0);
}

int pdr_precise_prefix_pick_model(pdr_ptree_t *tree, pdr_kvindex_t *ix,
                                  const pdr_cache_aware_params_t *params, const uint64_t *ids,
                                  const uint64_t *keys, const uint64_t *loads, size_t n, const char *text,
                                  size_t len, const uint32_t *tokens, size_t n_tokens,
                                  pdr_cache_aware_decision_t *decision, int record, size_t *matched_out,
                                  int *from_index, const char *model, size_t mlen)
{
    if (n == 0)
        return PDR_ENOWORKER;
    if (tree == NULL || params == NULL || ids == NULL || loads == NULL || (text == NULL && len > 0) ||
        (tokens == NULL && n_tokens > 0) || n > INT32_MAX)
        return PDR_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (ids[i] == 0)
            return PDR_EINVAL;
    if (text == NULL)
        text = "";
    if (from_index != NULL)
        *from_index = 0;
    if (matched_out != NULL)
        *matched_out = 0;

    int imbalanced = pdr__loads_imbalanced(params, loads, n);
    pdr_kvindex_match_t m[n + 1];
    int any_synced = 0;
    for (size_t i = 0; i < n; i++)
        m[i].synced = 0;
    if (!imbalanced && ix != NULL && n_tokens > 0) {
        pdr_kvindex_match_model(ix, model, mlen, tokens, n_tokens, ids, n, m);
        for (size_t i = 0; i < n; i++)
            any_synced |= m[i].synced;
    }
    if (any_synced) {
        /* Each candidate's share of the prompt: the index's for those in sync, the tree's for the others. */
        size_t pick = 0;
        double best = -1.0;
        pdr__ptree_lock(tree);
        for (size_t i = 0; i < n; i++) {
            double rate;
            if (m[i].synced) {
                rate = (double)m[i].blocks * m[i].block_size / (double)n_tokens;
            } else {
                size_t matched = 0;
                (void)pdr__ptree_walk(tree, text, len, &ids[i], 1, &matched);
                rate = len > 0 ? (double)matched / (double)len : 0.0;
            }
            if (rate > best || (rate == best && loads[i] < loads[pick])) {
                best = rate;
                pick = i;
            }
        }
        if (best > params->cache_threshold) {
            size_t tmatched = 0;
            if (matched_out != NULL && !m[pick].synced) /* before the insert, which would make it whole */
                (void)pdr__ptree_walk(tree, text, len, &ids[pick], 1, &tmatched);
            if (record)
                (void)pdr__ptree_insert_locked(tree, text, len, ids[pick]);
            pdr__ptree_unlock(tree);
            if (decision != NULL)
                *decision = PDR_CACHE_AWARE_MATCH;
            if (from_index != NULL)
                *from_index = m[pick].synced;
            /* In the unit of the estimate that chose: tokens from the index, bytes from the tree. */
            if (matched_out != NULL)
                *matched_out = m[pick].synced ? (size_t)m[pick].blocks * m[pick].block_size : tmatched;
            return (int)pick;
        }
        pdr__ptree_unlock(tree);
    }
    /* Imbalanced, no index, or no worker holding enough of the prompt now: cache_aware's own decision on
     * the tree. Its match keeps a prefix where it went last even when the index says its blocks were
     * evicted everywhere (better than moving it), then its seed (smallest tree or the hash ring). */
    return pdr_cache_aware_pick_ex(tree, params, ids, keys, loads, n, text, len, decision, record,
                                   matched_out);
}
