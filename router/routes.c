/* The data port's route table (routes.h). */
#include <stdint.h>
#include <string.h>
#include "routes.h"

/* One line per route: {"path", "METHOD", kind, ...}; the openapi test parses these lines. */
const pdr_route_def_t pdr_routes[] = {
    {"/generate", "POST", PDR_RK_PD, PDR_ROUTE_GENERATE, PDR_MR_GENERATE, NULL},
    {"/v1/completions", "POST", PDR_RK_PD, PDR_ROUTE_COMPLETIONS, PDR_MR_COMPLETIONS, NULL},
    {"/v1/chat/completions", "POST", PDR_RK_PD, PDR_ROUTE_CHAT, PDR_MR_CHAT, NULL},
    {"/health", "GET", PDR_RK_HEALTH, 0, PDR_MR_HEALTH, NULL},
    {"/readiness", "GET", PDR_RK_READINESS, 0, PDR_MR_READINESS, NULL},
    {"/metrics", "GET", PDR_RK_METRICS, 0, PDR_MR_METRICS, NULL},
    {"/v1/models", "GET", PDR_RK_MODELS, 0, PDR_MR_MODELS, NULL},
    {"/get_model_info", "GET", PDR_RK_FORWARD, 0, PDR_MR_OTHER, "/get_model_info"},
    {"/model_info", "GET", PDR_RK_FORWARD, 0, PDR_MR_OTHER, "/model_info"},
    {"/get_server_info", "GET", PDR_RK_FORWARD, 0, PDR_MR_OTHER, "/get_server_info"},
    {"/server_info", "GET", PDR_RK_FORWARD, 0, PDR_MR_OTHER, "/server_info"},
    {"/health_generate", "GET", PDR_RK_HEALTH_GENERATE, 0, PDR_MR_OTHER, "/health_generate"},
    {"/flush_cache", "POST", PDR_RK_FLUSH, 0, PDR_MR_OTHER, "/flush_cache"},
    {"/get_loads", "GET", PDR_RK_LOADS, 0, PDR_MR_OTHER, "/get_load"},
    {"/v1/loads", "GET", PDR_RK_LOADS, 0, PDR_MR_OTHER, "/get_load"},
};
const size_t pdr_n_routes = sizeof(pdr_routes) / sizeof(pdr_routes[0]);

const pdr_route_def_t *pdr_route_lookup(const h2o_req_t *req)
{
    size_t len = req->query_at != SIZE_MAX ? req->query_at : req->path.len;
    for (size_t i = 0; i < pdr_n_routes; i++)
        if (strlen(pdr_routes[i].path) == len && memcmp(req->path.base, pdr_routes[i].path, len) == 0)
            return &pdr_routes[i];
    return NULL;
}

int pdr_route_method_ok(const h2o_req_t *req, const pdr_route_def_t *rt)
{
    return h2o_memis(req->method.base, req->method.len, rt->method, strlen(rt->method));
}
