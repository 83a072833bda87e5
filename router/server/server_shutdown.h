/*
 * The shutdown sequence's entry points (server_shutdown.c). server.h includes it; main.c calls them.
 */
#ifndef PDR_SERVER_SHUTDOWN_H
#define PDR_SERVER_SHUTDOWN_H

#include "router.h"

/* Loop 0, on SIGTERM/SIGINT: readiness off at once, keep serving for lifecycle.drain_grace_ms, then
 * stop accepting everywhere, let in-flight requests finish within lifecycle.drain_timeout_ms (cancel
 * the rest), then end every loop. A second call during the grace ends the grace at once. */
void pdr_router_begin_shutdown(pdr_router_t *r);
/* After loop 0 returned: joins the other threads. */
void pdr_router_join(pdr_router_t *r);

#endif
