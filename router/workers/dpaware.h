/*
 * --dp-aware: learning each static worker's data-parallel size from the worker (see dpaware.c).
 */
#ifndef PDR_DPAWARE_H
#define PDR_DPAWARE_H

#include "config.h"

/* With c->dp_aware: each static worker of c without a dp_size receives one. prev NULL (the start): asked of
 * the worker (blocking, bounded by health.timeout_ms each); prev non-NULL (a reload): taken from prev's
 * worker with the same URL, nothing asked. Only for a snapshot no other thread holds yet. */
void pdr_dp_aware_resolve(pdr_config_t *c, const pdr_config_t *prev);

#endif
