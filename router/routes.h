/*
 * The data port's route table, declared once (routes.c): every path the listener serves, its method and
 * what answers it. server.c dispatches from it, compat.c takes its sglang routes from it, and the
 * openapi test (tests/integration/test_openapi.py) reads it to check docs/openapi.yaml. The admin port's
 * routes are admin.c's own (a separate h2o config). Any thread; the table is constant.
 */
#ifndef PDR_ROUTES_H
#define PDR_ROUTES_H

#include <h2o.h>
#include "metrics.h"
#include "rewrite.h"

typedef enum {
    PDR_RK_PD = 0,          /* a PD request (pd.c); other methods: 405 */
    PDR_RK_HEALTH,          /* GET /health: "ok" (server.c) */
    PDR_RK_READINESS,       /* GET /readiness (server.c) */
    PDR_RK_METRICS,         /* GET /metrics (reply.c) */
    PDR_RK_MODELS,          /* GET /v1/models (pd.c) */
    PDR_RK_FORWARD,         /* compat.c: forwarded to one prefill worker; other methods: 405 */
    PDR_RK_HEALTH_GENERATE, /* compat.c: a prefill/decode pair asked */
    PDR_RK_FLUSH,           /* compat.c: every worker */
    PDR_RK_LOADS,           /* compat.c: every worker's load */
} pdr_route_kind_t;

typedef struct pdr_route_def {
    const char *path;
    const char *method; /* "GET" or "POST" */
    pdr_route_kind_t kind;
    pdr_route_t pd_route;    /* PDR_RK_PD: the request shape */
    int mroute;              /* the metrics route (PDR_MR_*) */
    const char *worker_path; /* compat routes: the path asked of the workers */
} pdr_route_def_t;

extern const pdr_route_def_t pdr_routes[];
extern const size_t pdr_n_routes;

/* The route of req's path (the query left out), or NULL. */
const pdr_route_def_t *pdr_route_lookup(const h2o_req_t *req);
/* Whether req's method is the route's. */
int pdr_route_method_ok(const h2o_req_t *req, const pdr_route_def_t *rt);

#endif
