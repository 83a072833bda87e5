/*
 * pdrouter in the Kubernetes Gateway API path: the endpoint picker (epp_pick.c) that answers a gateway's
 * Envoy ext_proc stream with the router's own picks (its policies, KV index, outlier and drain state,
 * admission), the decode endpoint first and the prefill named in a header for the decode's sidecar.
 * Loop 0.
 */
#ifndef PDR_GATEWAY_H
#define PDR_GATEWAY_H

#include <stddef.h>

struct pdr_router;

/* Whether the router is ready to take requests (the data port's /readiness rule); msg says why not. */
typedef int (*pdr_gateway_ready_cb)(struct pdr_router *r, char *msg, size_t cap);

/* Loop 0, at start, when epp.enabled: starts the endpoint picker's gRPC listener on loop 0 (epp.host,
 * epp.port). Returns 0, or a PDR_E* code with the reason logged. */
int pdr_gateway_start(struct pdr_router *r, pdr_gateway_ready_cb ready);
/* Loop 0, at shutdown: the health services answer NOT_SERVING, open streams end (UNAVAILABLE: the gateway
 * retries on another picker), the listener closes. */
void pdr_gateway_stop(struct pdr_router *r);
/* The pdr_epp_* metric families (docs/metrics.md; zeros while the picker is off): malloc'd text of *len
 * bytes, or NULL (no memory). Any loop. */
char *pdr_gateway_render_metrics(size_t *len);

#endif
