/*
 * The routing policies as one list of operation tables, in the manner of nginx's upstream balancers
 * (each module fills init, get and free) and Envoy's load balancer factories: a policy is a name, the flags
 * that say what state the pool keeps for it, and its pick over one pick's candidates. The router's pick
 * (router/workers/pool_pick.c) builds the candidates and calls the table of the pool's policy without asking
 * which one it runs; the configuration parses, names and bounds policies by this list (config/config.c,
 * config/schema.c). Plain C, any thread: what a pick reads and updates comes in pdr_policy_input_t.
 */
#ifndef PDR_POLICIES_H
#define PDR_POLICIES_H

#include <stddef.h>
#include <stdint.h>

#include "routing.h"

struct pdr_kvindex;

/*
 * The list of policies: one row per table, in the configuration's order (a policy is stored as its index,
 * PDR_POLICY_<KIND>). A row names the table pdr_policy_<name> (a pdr_policy_ops_t defined in routing/), so
 * a new policy is its table and its row here.
 */
#define PDR_POLICY_MAP(XX)                                                                                   \
    XX(ROUND_ROBIN, round_robin)       /* the next usable worker in list order */                            \
    XX(LEAST_LOAD, least_load)         /* pdrouter's older name for power_of_two's rule */                   \
    XX(RANDOM, random)                 /* one usable worker, uniformly */                                    \
    XX(CACHE_AWARE, cache_aware)       /* sglang's: an approximate prefix tree of recent prompts */          \
    XX(POWER_OF_TWO, power_of_two)     /* sglang's: the less loaded of two workers drawn at random */        \
    XX(PRECISE_PREFIX, precise_prefix) /* cache_aware's rules on the prefixes the KV events report */

typedef enum {
#define XX(kind, name) PDR_POLICY_##kind,
    PDR_POLICY_MAP(XX)
#undef XX
        PDR_POLICY_COUNT
} pdr_policy_kind_t;

/* What a policy needs of its pool (pdr_policy_ops_t.flags). */
enum {
    PDR_POLICY_F_TREE = 1,        /* the pool keeps a prefix tree per role for it (in.tree), across reloads */
    PDR_POLICY_F_KV_INDEX = 2,    /* it reads the KV event index and the prompt's token ids */
    PDR_POLICY_F_WEIGHS_LOAD = 4, /* slow start weighs its loads (in.wloads) instead of thinning candidates */
    PDR_POLICY_F_READS_LOAD = 8,  /* its choice depends on in.loads or in.wloads */
};

/* One pick: the candidates (the pool's serving workers of the role, in list order) and the state of the
 * pool and role that the policy reads or updates. */
typedef struct pdr_policy_input {
    size_t n;                    /* candidates, at least 1 */
    const uint64_t *ids;         /* non-zero: the tree's tenants and the index's workers */
    const uint64_t *keys;        /* ring keys: the same worker has the same key in every router replica */
    const uint64_t *loads;       /* requests on each (router/workers/pool_load.h: shim, engine or own) */
    const uint64_t *wloads;      /* the loads weighed by slow start (loads itself without it) */
    const unsigned char *usable; /* usable[i] 0: a retry avoids candidate i (NULL: all usable) */
    unsigned *rr_next;           /* atomic: the pool's round-robin cursor for the role */
    uint64_t *rng;               /* the calling thread's generator (pdr_routing_rng_next) */
    pdr_ptree_t *tree;           /* PDR_POLICY_F_TREE: the pool's tree for the role, or NULL */
    const pdr_cache_aware_params_t *ca; /* the pool's cache_aware settings for the role */
    struct pdr_kvindex *kvindex;        /* PDR_POLICY_F_KV_INDEX: the index, or NULL */
    const char *text;                   /* the prompt text, or NULL when the request has none */
    size_t len;
    const uint32_t *tokens; /* the prompt's token ids, or NULL */
    size_t n_tokens;
    const char *model; /* the request's "model" (a LoRA adapter's name keys its own KV blocks), or NULL */
    size_t model_len;
    int record;       /* a tree policy records the text under the chosen worker */
    int want_matched; /* the caller reads out->matched */
} pdr_policy_input_t;

/* What a pick says besides the choice. */
typedef struct pdr_policy_output {
    int decided; /* a prefix rule chose: decision says which */
    pdr_cache_aware_decision_t decision;
    int from_index;    /* the KV event index's match chose (matched counts tokens, not bytes) */
    int matched_known; /* matched is the chosen worker's cached prefix of the prompt */
    size_t matched;
} pdr_policy_output_t;

typedef struct pdr_policy_ops {
    const char *name; /* the configuration's name */
    unsigned flags;   /* PDR_POLICY_F_* */
    /* The index of the chosen candidate among in->n, never one that usable excludes; PDR_ENOWORKER when
     * none is usable. out is zeroed by the caller. */
    int (*pick)(const pdr_policy_input_t *in, pdr_policy_output_t *out);
} pdr_policy_ops_t;

#define XX(kind, name) extern const pdr_policy_ops_t pdr_policy_##name;
PDR_POLICY_MAP(XX)
#undef XX

/* The number of policies (PDR_POLICY_COUNT). */
size_t pdr_policy_count(void);
/* The table of policy kind, or NULL when there is none. */
const pdr_policy_ops_t *pdr_policy_get(int kind);
/* The kind named name[0..len), or PDR_EINVAL. */
int pdr_policy_find(const char *name, size_t len);
/* The names, ", "-separated with "or" before the last one ("a, b or c"), into out (truncated at cap). */
void pdr_policy_names(char *out, size_t cap, const char *last_sep);

#endif
