/* Between ptree.c and policy.c: the tree's lock and its steps, so that a decision is one critical
 * section. Every pdr__ptree_* call below runs with the lock held. */
#ifndef PDR_ROUTING_INTERNAL_H
#define PDR_ROUTING_INTERNAL_H

#include "routing.h"

void pdr__ptree_lock(pdr_ptree_t *t);
void pdr__ptree_unlock(pdr_ptree_t *t);
/* The deepest node on text's path held by one of ids (NULL: none), and the length matched. */
const void *pdr__ptree_walk(pdr_ptree_t *t, const char *text, size_t len, const uint64_t *ids, size_t n,
                            size_t *matched);
int pdr__ptree_node_holds(const void *node, uint64_t id);
uint64_t pdr__ptree_chars_locked(pdr_ptree_t *t, uint64_t id);
int pdr__ptree_insert_locked(pdr_ptree_t *t, const char *text, size_t len, uint64_t id);
/* cache_aware's balance rule over loads[0..n), n >= 1 (policy.c; precise_prefix uses it too). */
int pdr__loads_imbalanced(const pdr_cache_aware_params_t *params, const uint64_t *loads, size_t n);

#endif
