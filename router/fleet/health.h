/*
 * Active health checks (health.c, loop 0): a probe per worker every health.interval_ms through loop 0's
 * upstream client; the results move the workers' states in the pool.
 */
#ifndef PDR_HEALTH_H
#define PDR_HEALTH_H

#include "router.h"

int pdr_health_start(pdr_router_t *r);
void pdr_health_stop(pdr_router_t *r);
/* After a reload: the new interval, and a round now. */
void pdr_health_restart(pdr_router_t *r);

#endif
