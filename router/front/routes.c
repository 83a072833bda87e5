/* The route table of both listeners (routes.h). */
#include <stdint.h>
#include <stdio.h>
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
    /* The admin port. */
    {"/", "GET", PDR_RK_ADMIN_PAGE, 0, PDR_MR_OTHER, NULL},
    {"/metrics", "GET", PDR_RK_ADMIN_METRICS, 0, PDR_MR_OTHER, NULL},
    {"/admin/v1/status", "GET", PDR_RK_ADMIN_STATUS, 0, PDR_MR_OTHER, NULL},
    {"/admin/v1/events", "GET", PDR_RK_ADMIN_EVENTS, 0, PDR_MR_OTHER, NULL},
    {"/admin/v1/links", "GET", PDR_RK_ADMIN_LINKS, 0, PDR_MR_OTHER, NULL},
    {"/admin/v1/workers", "GET", PDR_RK_ADMIN_WORKERS, 0, PDR_MR_OTHER, NULL},
    {"/admin/v1/workers", "POST", PDR_RK_ADMIN_WORKER_ADD, 0, PDR_MR_OTHER, NULL},
    {"/admin/v1/workers/{id}", "GET", PDR_RK_ADMIN_WORKER, 0, PDR_MR_OTHER, NULL},
    {"/admin/v1/workers/{id}", "DELETE", PDR_RK_ADMIN_WORKER_DELETE, 0, PDR_MR_OTHER, NULL},
    {"/admin/v1/workers/{id}/drain", "POST", PDR_RK_ADMIN_WORKER_DRAIN, 0, PDR_MR_OTHER, NULL},
    {"/admin/v1/workers/{id}/activate", "POST", PDR_RK_ADMIN_WORKER_ACTIVATE, 0, PDR_MR_OTHER, NULL},
    {"/admin/v1/reload", "POST", PDR_RK_ADMIN_RELOAD, 0, PDR_MR_OTHER, NULL},
    {"/admin/v1/shim", "GET", PDR_RK_ADMIN_SHIM, 0, PDR_MR_OTHER, NULL},
    {"/admin/v1/kv-index/snapshot", "GET", PDR_RK_ADMIN_KV_SNAPSHOT, 0, PDR_MR_OTHER, NULL},
    {"/shim/v1/events", "POST", PDR_RK_ADMIN_SHIM_EVENTS, 0, PDR_MR_OTHER, NULL},
};
const size_t pdr_n_routes = sizeof(pdr_routes) / sizeof(pdr_routes[0]);

const pdr_route_def_t *pdr_route_lookup(const h2o_req_t *req)
{
    size_t len = req->query_at != SIZE_MAX ? req->query_at : req->path.len;
    for (size_t i = 0; i < pdr_n_routes; i++)
        if (!PDR_RK_IS_ADMIN(pdr_routes[i].kind) && strlen(pdr_routes[i].path) == len &&
            memcmp(req->path.base, pdr_routes[i].path, len) == 0)
            return &pdr_routes[i];
    return NULL;
}

/* Whether path[0..len) matches pattern (literal, or with one {id} segment: then *id is that segment). */
static int path_match(const char *pattern, const char *path, size_t len, const char **id, size_t *id_len)
{
    const char *brace = strstr(pattern, "{id}");
    size_t pre = brace != NULL ? (size_t)(brace - pattern) : strlen(pattern);
    if (brace == NULL)
        return len == pre && memcmp(path, pattern, len) == 0;
    const char *post = brace + 4;
    size_t npost = strlen(post);
    if (len <= pre + npost || memcmp(path, pattern, pre) != 0 || memcmp(path + len - npost, post, npost) != 0)
        return 0;
    if (memchr(path + pre, '/', len - pre - npost) != NULL)
        return 0;
    *id = path + pre;
    *id_len = len - pre - npost;
    return 1;
}

const pdr_route_def_t *pdr_route_admin(const h2o_req_t *req, pdr_route_match_t *m)
{
    size_t len = req->query_at != SIZE_MAX ? req->query_at : req->path.len;
    const pdr_route_def_t *found = NULL;
    memset(m, 0, sizeof(*m));
    size_t an = 0;
    for (size_t i = 0; i < pdr_n_routes; i++) {
        const pdr_route_def_t *rt = &pdr_routes[i];
        const char *id = NULL;
        size_t id_len = 0;
        if (!PDR_RK_IS_ADMIN(rt->kind) ||
            (m->path_route != NULL && strcmp(rt->path, m->path_route->path) != 0) ||
            (m->path_route == NULL && !path_match(rt->path, req->path.base, len, &id, &id_len)))
            continue;
        if (m->path_route == NULL) {
            m->path_route = rt;
            m->id = id;
            m->id_len = id_len;
        }
        an += (size_t)snprintf(m->allow + an, sizeof(m->allow) - an, "%s%s", an > 0 ? ", " : "", rt->method);
        if (an >= sizeof(m->allow))
            an = sizeof(m->allow) - 1;
        if (found == NULL && pdr_route_method_ok(req, rt))
            found = rt;
    }
    return found;
}

int pdr_route_method_ok(const h2o_req_t *req, const pdr_route_def_t *rt)
{
    return h2o_memis(req->method.base, req->method.len, rt->method, strlen(rt->method));
}
