/*
 * The route table of both listeners, declared once (routes.c): every path the data port and the admin
 * port serve, its method and what answers it (the kind: the admin kinds, PDR_RK_ADMIN_*, belong to the
 * admin port, every other kind to the data port). server.c dispatches the data port from it, compat.c
 * takes its sglang routes from it, admin.c dispatches the admin port from it (a separate h2o config, so
 * no admin route is reachable from the data port), and the openapi test
 * (tests/integration/test_openapi.py) reads it to check docs/openapi.yaml. Any thread; the table is
 * constant.
 */
#ifndef PDR_ROUTES_H
#define PDR_ROUTES_H

#include <h2o.h>
#include "metrics.h"
#include "rewrite.h"

typedef enum {
    PDR_RK_PD = 0,          /* a PD request (pd/); other methods: 405 */
    PDR_RK_HEALTH,          /* GET /health: "ok" (server.c) */
    PDR_RK_READINESS,       /* GET /readiness (server.c) */
    PDR_RK_METRICS,         /* GET /metrics (reply.c) */
    PDR_RK_MODELS,          /* GET /v1/models (pd/) */
    PDR_RK_FORWARD,         /* compat.c: forwarded to one prefill worker; other methods: 405 */
    PDR_RK_HEALTH_GENERATE, /* compat.c: a prefill/decode pair asked */
    PDR_RK_FLUSH,           /* compat.c: every worker */
    PDR_RK_LOADS,           /* compat.c: every worker's load */
    /* The admin port (admin.c); all but the status page need the bearer token. */
    PDR_RK_ADMIN_PAGE,            /* GET /: the status page (no token) */
    PDR_RK_ADMIN_METRICS,         /* GET /metrics */
    PDR_RK_ADMIN_STATUS,          /* GET /admin/v1/status */
    PDR_RK_ADMIN_EVENTS,          /* GET /admin/v1/events */
    PDR_RK_ADMIN_LINKS,           /* GET /admin/v1/links: prefill -> decode link state (links.h) */
    PDR_RK_ADMIN_WORKERS,         /* GET /admin/v1/workers: the list */
    PDR_RK_ADMIN_WORKER_ADD,      /* POST /admin/v1/workers */
    PDR_RK_ADMIN_WORKER,          /* GET /admin/v1/workers/{id} */
    PDR_RK_ADMIN_WORKER_DELETE,   /* DELETE /admin/v1/workers/{id} */
    PDR_RK_ADMIN_WORKER_DRAIN,    /* POST /admin/v1/workers/{id}/drain */
    PDR_RK_ADMIN_WORKER_ACTIVATE, /* POST /admin/v1/workers/{id}/activate */
    PDR_RK_ADMIN_RELOAD,          /* POST /admin/v1/reload */
    PDR_RK_ADMIN_SHIM,            /* GET /admin/v1/shim (shim_events.c) */
    PDR_RK_ADMIN_KV_SNAPSHOT,     /* GET /admin/v1/kv-index/snapshot (fleet/kv_snapshot.c) */
    PDR_RK_ADMIN_SHIM_EVENTS,     /* POST /shim/v1/events: the shims' signed batches (no token) */
} pdr_route_kind_t;

#define PDR_RK_IS_ADMIN(k) ((k) >= PDR_RK_ADMIN_PAGE)

typedef struct pdr_route_def {
    const char *path;   /* exact, or with one "{id}" segment (a non-empty segment without '/') */
    const char *method; /* "GET", "POST" or "DELETE"; a path with several methods has one line each */
    pdr_route_kind_t kind;
    pdr_route_t pd_route;    /* PDR_RK_PD: the request shape */
    int mroute;              /* the metrics route (PDR_MR_*) */
    const char *worker_path; /* compat routes: the path asked of the workers */
} pdr_route_def_t;

extern const pdr_route_def_t pdr_routes[];
extern const size_t pdr_n_routes;

/* The data port's route of req's path (the query left out), or NULL. */
const pdr_route_def_t *pdr_route_lookup(const h2o_req_t *req);

/* How an admin-port request matched the table. */
typedef struct pdr_route_match {
    const pdr_route_def_t *path_route; /* the first route of the request's path (any method), or NULL */
    const char *id;                    /* the path's {id} segment, or NULL */
    size_t id_len;
    char allow[32]; /* the methods of that path, as an Allow header ("GET, POST") */
} pdr_route_match_t;
/* The admin port's route of req's path and method, or NULL (m says whether the path exists). */
const pdr_route_def_t *pdr_route_admin(const h2o_req_t *req, pdr_route_match_t *m);
/* Whether req's method is the route's. */
int pdr_route_method_ok(const h2o_req_t *req, const pdr_route_def_t *rt);

#endif
