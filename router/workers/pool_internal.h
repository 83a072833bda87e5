/*
 * What pool.c, the bottom of the worker registry's files, gives the files above it: pool_pick.c (reading
 * and picking, under the read lock) and pool_state.c (health, outlier ejection, drain). It names the pool
 * without including pool.h, which is pool.c's header, so that it stays below every part. Nothing outside
 * these files includes it.
 */
#ifndef PDR_POOL_INTERNAL_H
#define PDR_POOL_INTERNAL_H
#include <stdint.h>

struct pdr_pool;

/* pool.c */
uint64_t *pdr__pool_thread_rng(void);
uint64_t pdr__pool_next_rand(void);
int pdr__pool_group_of(const struct pdr_pool *p, const char *pool);

#endif
