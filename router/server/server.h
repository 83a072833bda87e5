/*
 * The server (server/): the listeners, the loop threads, the route dispatch and the shutdown sequence.
 * main.c alone calls it.
 */
#ifndef PDR_SERVER_H
#define PDR_SERVER_H

#include <uv.h>
#include "config.h"
#include "router.h"

/* Sets up the shared state and every loop (loop 0 on `loop0`), starts threads 1..n-1. */
int pdr_router_start(pdr_router_t *r, pdr_config_t *c, uv_loop_t *loop0);
/* Loop 0, on SIGTERM/SIGINT: readiness off at once, keep serving for lifecycle.drain_grace_ms, then
 * stop accepting everywhere, let in-flight requests finish within lifecycle.drain_timeout_ms (cancel
 * the rest), then end every loop. A second call during the grace ends the grace at once. */
void pdr_router_begin_shutdown(pdr_router_t *r);
/* After loop 0 returned: joins the other threads. */
void pdr_router_join(pdr_router_t *r);

#endif
