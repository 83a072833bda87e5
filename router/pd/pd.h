/*
 * The PD request path's entry points (pd/request.c): the server dispatches the data port's PD routes and
 * GET /v1/models here.
 */
#ifndef PDR_PD_H
#define PDR_PD_H

#include <h2o.h>
#include "router.h"
#include "rewrite.h"
#include "routes.h"

int pdr_pd_handle(pdr_thread_t *t, h2o_req_t *req, pdr_route_t route, int mroute);
int pdr_models_handle(pdr_thread_t *t, h2o_req_t *req);

/* What the endpoint picker (router/gateway/) reads of a request as the front door does. The pool the
 * body's model names: 0 and *pool (its index; 0 with one pool), or an HTTP status (400, 404) and msg. */
int pdr_pd_request_pool(const pdr_config_t *c, const pdr_pdreq_t *pr, long *pool, char *msg, size_t cap);
/* The prompt member's raw JSON (what cache_aware matches on), or NULL; *len its length. */
const char *pdr_pd_routing_text(const pdr_pdreq_t *pr, size_t *len);

#endif
