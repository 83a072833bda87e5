/*
 * The worker registry's insides shared by its files: pool.c (settings, membership), pool_pick.c (reading
 * and picking, under the read lock) and pool_state.c (health, outlier ejection, drain, the event record).
 * Nothing outside these three files includes it.
 */
#ifndef PDR_POOL_INTERNAL_H
#define PDR_POOL_INTERNAL_H
#include <stdint.h>
#include "pool.h"

/* pool.c */
uint64_t *pdr__pool_thread_rng(void);
uint64_t pdr__pool_next_rand(void);
int pdr__pool_group_of(const pdr_pool_t *p, const char *pool);

#endif
