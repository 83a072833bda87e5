/*
 * The list of routing policies: one operation table per policy (policies.h). The decisions themselves are
 * policy.c's (cache_aware, power_of_two), chash.c's and precise.c's; a table adapts its decision to one
 * pick's candidates, of which a retry may exclude some (usable). Any thread.
 */
#include "policies.h"

#include <stdio.h>
#include <string.h>

#include "err.h"
#include "kvevents.h"

/* The usable candidates' indexes into idx (n + 1 entries); returns their count. */
static size_t usable_of(const pdr_policy_input_t *in, size_t *idx)
{
    size_t k = 0;
    for (size_t i = 0; i < in->n; i++)
        if (in->usable == NULL || in->usable[i])
            idx[k++] = i;
    return k;
}

/* round_robin: the pool's cursor, then the next usable candidate in list order. */
static int pick_round_robin(const pdr_policy_input_t *in, pdr_policy_output_t *out)
{
    (void)out;
    unsigned start = __atomic_fetch_add(in->rr_next, 1, __ATOMIC_RELAXED);
    for (size_t k = 0; k < in->n; k++) {
        size_t i = (start + k) % in->n;
        if (in->usable == NULL || in->usable[i])
            return (int)i;
    }
    return PDR_ENOWORKER;
}

/* random: one usable candidate, uniformly. */
static int pick_random(const pdr_policy_input_t *in, pdr_policy_output_t *out)
{
    (void)out;
    size_t idx[in->n + 1], n = usable_of(in, idx);
    return n > 0 ? (int)idx[pdr_routing_rng_next(in->rng) % n] : PDR_ENOWORKER;
}

/* The power of two choices, power_of_two's rule (least_load is pdrouter's older name for it):
 * pdr_power_of_two_pick over the usable candidates' weighed loads. */
static int pick_p2c(const pdr_policy_input_t *in, pdr_policy_output_t *out)
{
    (void)out;
    size_t idx[in->n + 1], n = usable_of(in, idx);
    uint64_t loads[n + 1];
    for (size_t k = 0; k < n; k++)
        loads[k] = in->wloads[idx[k]];
    int k = pdr_power_of_two_pick(loads, n, in->rng);
    return k >= 0 && (size_t)k < n ? (int)idx[k] : PDR_ENOWORKER;
}

/* cache_aware and precise_prefix: sglang's rules over the pool's tree (with the KV event index's match
 * for the workers it knows when the table reads the index); without a prompt or a tree, or when the
 * decision fails, power_of_two's rule. */
static int pick_prefix(const pdr_policy_input_t *in, pdr_policy_output_t *out, int indexed)
{
    if (in->text == NULL || in->tree == NULL)
        return pick_p2c(in, out);
    size_t idx[in->n + 1], n = usable_of(in, idx);
    if (n == 0)
        return PDR_ENOWORKER;
    uint64_t ids[n + 1], keys[n + 1], loads[n + 1];
    for (size_t k = 0; k < n; k++) {
        ids[k] = in->ids[idx[k]];
        keys[k] = in->keys[idx[k]];
        loads[k] = in->loads[idx[k]];
    }
    pdr_cache_aware_decision_t d = PDR_CACHE_AWARE_MATCH;
    size_t matched = 0;
    int from_index = 0, k;
    if (indexed)
        k = pdr_precise_prefix_pick_model(in->tree, in->kvindex, in->ca, ids, keys, loads, n, in->text,
                                          in->len, in->tokens, in->tokens != NULL ? in->n_tokens : 0, &d,
                                          in->record, &matched, &from_index, in->model, in->model_len);
    else
        k = pdr_cache_aware_pick_ex(in->tree, in->ca, ids, keys, loads, n, in->text, in->len, &d, in->record,
                                    in->want_matched ? &matched : NULL);
    if (k < 0 || (size_t)k >= n)
        return pick_p2c(in, out);
    out->decided = 1;
    out->decision = d;
    out->from_index = from_index;
    out->matched_known = 1;
    out->matched = matched;
    return (int)idx[k];
}

static int pick_cache_aware(const pdr_policy_input_t *in, pdr_policy_output_t *out)
{
    return pick_prefix(in, out, 0);
}

static int pick_precise_prefix(const pdr_policy_input_t *in, pdr_policy_output_t *out)
{
    return pick_prefix(in, out, 1);
}

/* The policies whose choice depends on the candidates' loads: least_load and power_of_two weigh them with
 * slow start; cache_aware and precise_prefix balance by them. */
#define P2C_FLAGS (PDR_POLICY_F_WEIGHS_LOAD | PDR_POLICY_F_READS_LOAD)
#define TREE_FLAGS (PDR_POLICY_F_TREE | PDR_POLICY_F_READS_LOAD)

const pdr_policy_ops_t pdr_policy_round_robin = {"round_robin", 0, pick_round_robin};
const pdr_policy_ops_t pdr_policy_least_load = {"least_load", P2C_FLAGS, pick_p2c};
const pdr_policy_ops_t pdr_policy_random = {"random", 0, pick_random};
const pdr_policy_ops_t pdr_policy_cache_aware = {"cache_aware", TREE_FLAGS, pick_cache_aware};
const pdr_policy_ops_t pdr_policy_power_of_two = {"power_of_two", P2C_FLAGS, pick_p2c};
const pdr_policy_ops_t pdr_policy_precise_prefix = {"precise_prefix", TREE_FLAGS | PDR_POLICY_F_KV_INDEX,
                                                    pick_precise_prefix};

/* The list, from PDR_POLICY_MAP: entry PDR_POLICY_<KIND> is pdr_policy_<name>. */
static const pdr_policy_ops_t *const policies[PDR_POLICY_COUNT] = {
#define XX(kind, name) [PDR_POLICY_##kind] = &pdr_policy_##name,
    PDR_POLICY_MAP(XX)
#undef XX
};

size_t pdr_policy_count(void)
{
    return PDR_POLICY_COUNT;
}

const pdr_policy_ops_t *pdr_policy_get(int kind)
{
    return kind >= 0 && (size_t)kind < pdr_policy_count() ? policies[kind] : NULL;
}

int pdr_policy_find(const char *name, size_t len)
{
    for (size_t i = 0; name != NULL && i < pdr_policy_count(); i++)
        if (strlen(policies[i]->name) == len && memcmp(policies[i]->name, name, len) == 0)
            return (int)i;
    return PDR_EINVAL;
}

void pdr_policy_names(char *out, size_t cap, const char *last_sep)
{
    size_t n = pdr_policy_count(), at = 0;
    if (cap == 0)
        return;
    out[0] = '\0';
    for (size_t i = 0; i < n && at < cap; i++) {
        int w = snprintf(out + at, cap - at, "%s%s",
                         i == 0       ? ""
                         : i + 1 == n ? last_sep
                                      : ", ",
                         policies[i]->name);
        if (w < 0)
            break;
        at += (size_t)w;
    }
}
