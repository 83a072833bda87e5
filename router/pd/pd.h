/*
 * The PD request path's entry points (pd/request.c): the server dispatches the data port's PD routes and
 * GET /v1/models here.
 */
#ifndef PDR_PD_H
#define PDR_PD_H

#include <h2o.h>
#include "router.h"
#include "routes.h"

int pdr_pd_handle(pdr_thread_t *t, h2o_req_t *req, pdr_route_t route, int mroute);
int pdr_models_handle(pdr_thread_t *t, h2o_req_t *req);

#endif
