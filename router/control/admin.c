/*
 * The admin REST API (docs/admin-api.md): worker list, drain and activate, status, and /metrics, on
 * its own listener (admin.host:admin.port; port 0 turns it off) with its own h2o globalconf, so no
 * admin route is reachable from the data port. Served by loop 0 only. Every route needs the bearer
 * token read from admin.token_file at start (compared in constant time, length first); without a
 * token file auth is off, which the start log says. Mutations write an audit line to the log.
 *
 * Worker ids are "<role>-<n>" ("prefill-0"): the static workers numbered in config order, later ones
 * (added, discovered) numbered on from there; an id is never reused while the router runs.
 *
 * GET / is the status page (router/control/status.html, embedded at build time as status_html.h). It is the
 * one route served without the token: a browser cannot send a bearer header when it navigates, and the page
 * holds no data; its script asks for the token and sends it on every API call.
 *
 * The request bodies (drain, add a worker) are parsed by admin_parse.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "control.h"
#include "err.h"
#include "front.h"
#include "kv_events.h"
#include "links.h"
#include "load_poll.h"
#include "reply.h"
#include "router.h"
#include "routes.h"
#include "shim_events.h"
#include "status_html.h"
#include "util.h"

#ifndef PDR_VERSION
#define PDR_VERSION "dev"
#endif

typedef struct admin_handler {
    h2o_handler_t super;
    pdr_router_t *r;
} admin_handler_t;

typedef enum { AUTH_OK = 0, AUTH_MISSING, AUTH_WRONG, AUTH_DUPLICATED } auth_result_t;

/* The bearer token check. A request with more than one Authorization field is refused whatever they
 * hold: the field is not a list (RFC 9110 section 11.6.2), and judging one of two lets a proxy in front
 * and the router disagree on which credential was used. */
static auth_result_t authorized(pdr_router_t *r, h2o_req_t *req)
{
    ssize_t i = h2o_find_header(&req->headers, H2O_TOKEN_AUTHORIZATION, -1);
    if (i >= 0 && h2o_find_header(&req->headers, H2O_TOKEN_AUTHORIZATION, i) >= 0)
        return AUTH_DUPLICATED;
    if (r->admin_token == NULL)
        return AUTH_OK;
    if (i < 0)
        return AUTH_MISSING;
    h2o_iovec_t v = req->headers.entries[i].value;
    if (v.len < 7 || !h2o_lcstris(v.base, 7, H2O_STRLIT("bearer ")))
        return AUTH_WRONG;
    const char *tok = v.base + 7;
    size_t len = v.len - 7;
    while (len > 0 && *tok == ' ') {
        tok++;
        len--;
    }
    return len == r->admin_token_len && CRYPTO_memcmp(tok, r->admin_token, len) == 0 ? AUTH_OK : AUTH_WRONG;
}

static void method_not_allowed(h2o_req_t *req, const char *allow)
{
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_ALLOW, NULL, allow, strlen(allow));
    char msg[64];
    snprintf(msg, sizeof(msg), "use %s", allow);
    pdr_send_error(req, 405, "invalid_request_error", msg, 0);
}

/* The worker's identity as its engine reported it (router/workers/identity.h) and its compat group ("" while
 * unknown); "identity" is null until a read succeeded, and "identity_error" says why the last one failed. */
static void add_identity(pdr_pool_t *pool, const pdr_worker_t *w, json_t *o)
{
    pdr_identity_t id;
    char err[160], g[17];
    uint64_t key = pdr_pool_identity(pool, w, &id, err, sizeof(err));
    pdr_identity_group(key, g);
    json_t *page = id.page_size >= 0 ? json_integer((json_int_t)id.page_size) : json_null();
    json_t *tp = id.tp_size >= 0 ? json_integer((json_int_t)id.tp_size) : json_null();
    json_t *dp = id.dp_size >= 0 ? json_integer((json_int_t)id.dp_size) : json_null();
    json_t *ident = id.key == 0 ? json_null()
                                : json_pack("{s:s,s:s,s:s,s:o,s:o,s:o,s:s,s:s,s:s}", "engine",
                                            id.engine == PDR_IDENTITY_VLLM ? "vllm" : "sglang", "model_path",
                                            id.model_path, "revision", id.revision, "page_size", page,
                                            "tp_size", tp, "dp_size", dp, "dtype", id.dtype, "kv_cache_dtype",
                                            id.kv_cache_dtype, "disaggregation_transfer_backend", id.backend);
    if (id.key == 0) {
        json_decref(page);
        json_decref(tp);
        json_decref(dp);
    }
    json_object_set_new(o, "compat_group", json_string(g));
    json_object_set_new(o, "identity", ident != NULL ? ident : json_null());
    if (err[0])
        json_object_set_new(o, "identity_error", json_string(err));
}

static json_t *worker_json(pdr_router_t *r, const pdr_worker_t *w)
{
    uint64_t last = __atomic_load_n(&w->last_check_ms, __ATOMIC_RELAXED);
    uint64_t now = pdr_now_ms();
    json_t *ago = last == 0 ? json_null() : json_integer((json_int_t)(now > last ? now - last : 0));
    json_t *bport = w->conf.bootstrap_port >= 0 ? json_integer(w->conf.bootstrap_port) : json_null();
    json_t *labels = json_loads(w->labels_json, 0, NULL);
    if (labels == NULL)
        labels = json_object();
    json_t *name = w->name[0] ? json_string(w->name) : json_null();
    json_t *o =
        json_pack("{s:s,s:s,s:s,s:s,s:o,s:s,s:o,s:s,s:i,s:I,s:o,s:o}", "id", w->id, "pool", w->pool, "role",
                  pdr_role_name(w->role), "url", w->conf.url, "bootstrap_port", bport, "source", w->source,
                  "name", name, "state", pdr_worker_state_name(w), "in_flight", pdr_worker_inflight(w),
                  "requests_total", (json_int_t)__atomic_load_n(&w->requests_total, __ATOMIC_RELAXED),
                  "last_check_ms_ago", ago, "labels", labels);
    if (o != NULL && w->dp_rank >= 0) /* one data-parallel rank of the worker at url */
        json_object_set_new(o, "dp_rank", json_integer(w->dp_rank));
    if (o != NULL && pdr_worker_removed(w))
        json_object_set_new(o, "removed", json_true());
    uint64_t left = pdr_outlier_ms_left(&w->outlier, now); /* passive health (router/workers/outlier.h) */
    if (o != NULL && left > 0)
        json_object_set_new(o, "ejected_ms_left", json_integer((json_int_t)left));
    double weight = pdr_outlier_weight(&w->outlier, now);
    if (o != NULL && left == 0 && weight < 1.0)
        json_object_set_new(o, "slow_start_weight", json_real(weight));
    if (o != NULL)
        json_object_set_new(
            o, "outlier_ejections_total",
            json_integer((json_int_t)__atomic_load_n(&w->outlier.ejections_total, __ATOMIC_RELAXED)));
    json_t *load = o != NULL ? pdr_shim_worker_json(w) : NULL;
    if (load != NULL)
        json_object_set_new(o, "load", load);
    if (o != NULL)
        add_identity(&r->pool, w, o);
    json_t *eload = o != NULL ? pdr_engine_load_worker_json(r, w) : NULL; /* what the policies weigh */
    if (eload != NULL)
        json_object_set_new(o, "load_source", eload);
    json_t *kv = o != NULL ? pdr_kv_events_worker_json(r, w) : NULL; /* precise_prefix: cold or in sync */
    if (kv != NULL)
        json_object_set_new(o, "kv_events", kv);
    if (o != NULL && !pdr_worker_removed(w) && __atomic_load_n(&w->remove_when_drained, __ATOMIC_RELAXED))
        json_object_set_new(o, "delete_pending", json_true());
    return o;
}

static json_t *workers_json(pdr_router_t *r)
{
    pdr_worker_t **ws;
    size_t n = pdr_pool_snapshot(&r->pool, -1, &ws);
    json_t *a = json_array();
    for (size_t i = 0; i < n && a != NULL; i++)
        if (json_array_append_new(a, worker_json(r, ws[i])) != 0) {
            json_decref(a);
            a = NULL;
        }
    pdr_pool_release(ws, n);
    return a != NULL ? json_pack("{s:o}", "workers", a) : NULL;
}

static json_t *role_counts(pdr_router_t *r, pdr_role_t role)
{
    return json_pack("{s:I,s:I,s:I,s:I}", "total", (json_int_t)pdr_pool_count(&r->pool, role), "healthy",
                     (json_int_t)pdr_pool_count_healthy(&r->pool, role), "draining",
                     (json_int_t)pdr_pool_count_state(&r->pool, role, PDR_DRAIN_DRAINING), "drained",
                     (json_int_t)pdr_pool_count_state(&r->pool, role, PDR_DRAIN_DRAINED));
}

/* The pools of the current config (loop 0 reads r->config): name, protocol, models (null in the one-pool
 * form: any) and the serving workers of each role. */
static json_t *pools_json(pdr_router_t *r)
{
    const pdr_config_t *c = r->config;
    json_t *a = json_array();
    for (size_t i = 0; a != NULL && i < pdr_config_pool_count(c); i++) {
        pdr_pool_conf_t pc;
        pdr_config_pool(c, i, &pc);
        json_t *models = c->n_pools > 0 ? json_array() : json_null();
        for (size_t k = 0; models != NULL && k < pc.n_models; k++)
            json_array_append_new(models, json_string(pc.models[k]));
        json_array_append_new(
            a, json_pack("{s:s,s:s,s:o,s:{s:I,s:I}}", "name", pc.name, "protocol",
                         pdr_protocol_name(pc.protocol), "models", models, "healthy", "prefill",
                         (json_int_t)pdr_pool_count_healthy_in(&r->pool, pc.name, PDR_ROLE_PREFILL), "decode",
                         (json_int_t)pdr_pool_count_healthy_in(&r->pool, pc.name, PDR_ROLE_DECODE)));
    }
    return a != NULL ? a : json_null();
}

static json_t *status_json(pdr_router_t *r)
{
    uint64_t up = (pdr_now_ms() - r->started_ms) / 1000;
    json_t *disc = json_array();
    for (int i = 0; i < 2 && disc != NULL; i++)
        if (pdr_router_discovery_running(r, i))
            json_array_append_new(disc, json_string(i == 0 ? "dns" : "kubernetes"));
    json_t *cfg = r->config_path != NULL ? json_string(r->config_path) : json_null();
    return json_pack("{s:s,s:I,s:i,s:{s:o,s:o},s:o,s:I,s:b,s:o,s:o,s:{s:I,s:I}}", "version", PDR_VERSION,
                     "uptime_s", (json_int_t)up, "threads", r->n_threads, "workers", "prefill",
                     role_counts(r, PDR_ROLE_PREFILL), "decode", role_counts(r, PDR_ROLE_DECODE), "pools",
                     pools_json(r), "inflight", (json_int_t)__atomic_load_n(&r->inflight, __ATOMIC_RELAXED),
                     "shutting_down", pdr_router_stopping(r), "discovery", disc, "config_file", cfg,
                     "reloads", "ok", (json_int_t)__atomic_load_n(&r->reloads_ok, __ATOMIC_RELAXED), "failed",
                     (json_int_t)__atomic_load_n(&r->reloads_failed, __ATOMIC_RELAXED));
}

/* GET /admin/v1/links: the prefill -> decode links that have failed KV transfers (links.h), and how many
 * of them are suspect now. */
static json_t *links_json(void)
{
    size_t cap = pdr_links_count() + 1;
    pdr_link_info_t *ls = malloc(sizeof(*ls) * cap);
    size_t suspect = 0, n = ls != NULL ? pdr_links_snapshot(ls, cap, &suspect) : 0;
    json_t *arr = json_array();
    uint64_t now = pdr_now_ms();
    for (size_t i = 0; i < n && arr != NULL; i++) {
        uint64_t left;
        pdr_breaker_state_t st = pdr_breaker_state(&ls[i].brk, now, &left);
        json_t *o = json_pack(
            "{s:s,s:s,s:s,s:s,s:b,s:I,s:I,s:I,s:I,s:s}", "prefill", ls[i].prefill, "decode", ls[i].decode,
            "prefill_id", ls[i].prefill_id, "decode_id", ls[i].decode_id, "suspect", ls[i].suspect,
            "consecutive_failures", (json_int_t)ls[i].consecutive_failures, "failures_total",
            (json_int_t)ls[i].failures_total, "successes_total", (json_int_t)ls[i].successes_total,
            "last_failure_ms", (json_int_t)ls[i].last_failure_ms, "last_cause", ls[i].last_cause);
        /* The breaker (breaker.h): its state, the time left before an open link turns half-open, and the
         * open period in force (doubling per re-open). */
        if (o != NULL) {
            json_object_set_new(o, "state", json_string(pdr_breaker_state_names[st]));
            json_object_set_new(o, "open_ms_left", json_integer((json_int_t)left));
            json_object_set_new(o, "open_period_ms", json_integer((json_int_t)ls[i].brk.period_ms));
            json_object_set_new(o, "probe_out", json_boolean(st == PDR_BREAKER_HALF_OPEN && ls[i].brk.probe));
        }
        json_array_append_new(arr, o);
    }
    free(ls);
    return json_pack("{s:I,s:I,s:o}", "tracked", (json_int_t)n, "suspect", (json_int_t)suspect, "links",
                     arr != NULL ? arr : json_array());
}

static json_t *events_json(pdr_router_t *r)
{
    pdr_event_t ev[PDR_EVENTS_CAP];
    uint64_t total = 0;
    size_t n = pdr_events_snapshot(&r->pool.events, ev, PDR_EVENTS_CAP, &total);
    json_t *a = json_array();
    for (size_t i = 0; i < n && a != NULL; i++) {
        time_t secs = (time_t)(ev[i].time_ms / 1000);
        struct tm tm;
        char when[64] = "";
        if (gmtime_r(&secs, &tm) != NULL)
            snprintf(when, sizeof(when), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     (int)(ev[i].time_ms % 1000));
        json_t *worker = ev[i].worker[0] != '\0' ? json_string(ev[i].worker) : json_null();
        if (json_array_append_new(a, json_pack("{s:s,s:I,s:o,s:s}", "time", when, "time_ms",
                                               (json_int_t)ev[i].time_ms, "worker", worker, "message",
                                               ev[i].message)) != 0) {
            json_decref(a);
            return NULL;
        }
    }
    return json_pack("{s:o,s:I,s:i}", "events", a, "total", (json_int_t)total, "capacity", PDR_EVENTS_CAP);
}

static void send_status_page(h2o_req_t *req)
{
    req->res.status = 200;
    req->res.reason = "OK";
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
                   H2O_STRLIT("text/html; charset=utf-8"));
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL, H2O_STRLIT("no-store"));
    /* The page loads nothing from elsewhere and may talk to this listener only. */
    h2o_add_header_by_str(
        &req->pool, &req->res.headers, H2O_STRLIT("content-security-policy"), 0, NULL,
        H2O_STRLIT("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                   "connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"));
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-content-type-options"), 0, NULL,
                          H2O_STRLIT("nosniff"));
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-frame-options"), 0, NULL,
                          H2O_STRLIT("DENY"));
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("referrer-policy"), 0, NULL,
                          H2O_STRLIT("no-referrer"));
    req->res.content_length = pdr_status_html_len;
    h2o_send_inline(req, pdr_status_html, pdr_status_html_len);
}

static void audit(h2o_req_t *req, const char *what)
{
    char peer[1025] = "?"; /* NI_MAXHOST, as h2o_socket_getnumerichost wants */
    struct sockaddr_storage ss;
    socklen_t sl = req->conn->callbacks->get_peername(req->conn, (struct sockaddr *)&ss);
    if (sl > 0)
        h2o_socket_getnumerichost((struct sockaddr *)&ss, sl, peer);
    pdr_info("admin audit: %.*s %.*s from %s: %s", (int)req->method.len, req->method.base,
             (int)(req->query_at != SIZE_MAX ? req->query_at : req->path.len), req->path.base, peer, what);
}

/* ?force=true|1 (also force alone); 0 when absent or false; -1 when malformed. */
static int query_force(h2o_req_t *req)
{
    if (req->query_at == SIZE_MAX)
        return 0;
    const char *q = req->path.base + req->query_at + 1;
    size_t qn = req->path.len - req->query_at - 1;
    int force = 0;
    while (qn > 0) {
        const char *amp = memchr(q, '&', qn);
        size_t part = amp != NULL ? (size_t)(amp - q) : qn;
        if ((part == 10 && memcmp(q, "force=true", 10) == 0) || (part == 7 && memcmp(q, "force=1", 7) == 0) ||
            (part == 5 && memcmp(q, "force", 5) == 0))
            force = 1;
        else if ((part == 11 && memcmp(q, "force=false", 11) == 0) ||
                 (part == 7 && memcmp(q, "force=0", 7) == 0))
            force = 0;
        else if (part > 0)
            return -1;
        q += part + (amp != NULL);
        qn -= part + (amp != NULL);
    }
    return force;
}

static void delete_worker(pdr_router_t *r, h2o_req_t *req, pdr_worker_t *w)
{
    int force = query_force(req);
    if (force < 0) {
        pdr_send_error(req, 400, "invalid_request_error", "the only query parameter is force=true|false", 0);
        return;
    }
    uint64_t timeout_ms = 0;
    char msg[256];
    if (pdr__admin_parse_drain(req->entity.base != NULL ? req->entity.base : "",
                               req->entity.base != NULL ? req->entity.len : 0, &timeout_ms, msg,
                               sizeof(msg)) != 0) {
        pdr_send_error(req, 400, "invalid_request_error", msg, 0);
        return;
    }
    audit(req, force ? "delete (force)" : "delete (drain first)");
    int st = pdr_pool_delete(&r->pool, w, force, timeout_ms);
    if (st == PDR_ENOWORKER) {
        pdr_send_error(req, 404, "not_found_error", "the worker left the pool meanwhile", 0);
        return;
    }
    /* 200: gone now (the body is its last state); 202: draining, it leaves the pool once drained. */
    pdr_send_json(req, st == -1 ? 200 : 202, worker_json(r, w));
}

/* POST /admin/v1/workers/{id}/drain. */
static void drain_worker(pdr_router_t *r, h2o_req_t *req, pdr_worker_t *w)
{
    uint64_t timeout_ms;
    char msg[256];
    if (pdr__admin_parse_drain(req->entity.base != NULL ? req->entity.base : "",
                               req->entity.base != NULL ? req->entity.len : 0, &timeout_ms, msg,
                               sizeof(msg)) != 0) {
        pdr_send_error(req, 400, "invalid_request_error", msg, 0);
        return;
    }
    audit(req, "drain");
    pdr_pool_drain(&r->pool, w, timeout_ms, "admin API");
    pdr_send_json(req, 202, worker_json(r, w));
}

static void add_worker(pdr_router_t *r, h2o_req_t *req)
{
    int role;
    pdr_worker_conf_t conf;
    char *labels = NULL;
    char msg[600], pool[64];
    int rc = pdr__admin_parse_worker(req->entity.base != NULL ? req->entity.base : "",
                                     req->entity.base != NULL ? req->entity.len : 0, &role, &conf, &labels,
                                     pool, msg, sizeof(msg));
    if (rc != 0) {
        pdr_send_error(req, rc == PDR_ENOMEM ? 503 : 400,
                       rc == PDR_ENOMEM ? "service_unavailable" : "invalid_request_error", msg, 0);
        return;
    }
    /* Link-local and metadata addresses by default: an admin token must not be a way to make the router
     * send requests (and health checks) to the host's own metadata service. */
    const pdr_config_t *c = r->config;
    long deny = pdr_ipnet_find(c->admin_deny_networks.nets, c->admin_deny_networks.n, &conf);
    if (deny >= 0) {
        snprintf(msg, sizeof(msg),
                 "url: %s is in admin.deny_worker_networks (%s); the admin API adds no worker there",
                 conf.url, c->admin_deny_networks.nets[deny].text);
        audit(req, "refused: denied network");
        pdr_send_error(req, 400, "invalid_request_error", msg, 0);
        pdr_worker_conf_clear(&conf);
        free(labels);
        return;
    }
    /* The pool: required when there are several, else the only one. */
    char names[PDR_CONFIG_MAX_POOLS][64], list[400];
    size_t ng = pdr_pool_groups(&r->pool, names, PDR_CONFIG_MAX_POOLS), ln = 0;
    int known = 0;
    list[0] = '\0';
    for (size_t i = 0; i < ng; i++) {
        known |= strcmp(names[i], pool) == 0;
        if (ln + strlen(names[i]) + 8 < sizeof(list))
            ln += (size_t)snprintf(list + ln, sizeof(list) - ln, "%s%s", i ? ", " : "", names[i]);
    }
    if ((pool[0] == '\0' && ng > 1) || (pool[0] != '\0' && !known)) {
        if (pool[0] == '\0')
            snprintf(msg, sizeof(msg), "pool is required: the router has several pools (%s)", list);
        else
            snprintf(msg, sizeof(msg), "unknown pool \"%s\" (pools: %s)", pool, list);
        pdr_send_error(req, 400, "invalid_request_error", msg, 0);
        pdr_worker_conf_clear(&conf);
        free(labels);
        return;
    }
    int err = 0;
    pdr_worker_t *w = pdr_pool_add(&r->pool, pool[0] ? pool : NULL, (pdr_role_t)role, &conf, PDR_SOURCE_ADMIN,
                                   NULL, labels, &err);
    if (w == NULL && err == PDR_EEXIST) {
        snprintf(msg, sizeof(msg), "a %s worker with url %s is in the pool already",
                 pdr_role_name((pdr_role_t)role), conf.url);
        pdr_send_error(req, 409, "conflict_error", msg, 0);
    } else if (w == NULL && err == PDR_ENOWORKER) {
        snprintf(msg, sizeof(msg), "the pool \"%s\" left the configuration meanwhile", pool);
        pdr_send_error(req, 409, "conflict_error", msg, 0);
    } else if (w == NULL) {
        pdr_send_error(req, 503, "service_unavailable", "out of memory", 1);
    } else {
        audit(req, w->id);
        char loc[96];
        int k = snprintf(loc, sizeof(loc), "/admin/v1/workers/%s", w->id);
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_LOCATION, NULL,
                       h2o_strdup(&req->pool, loc, (size_t)k).base, (size_t)k);
        pdr_send_json(req, 201, worker_json(r, w));
        pdr_worker_unref(w);
    }
    pdr_worker_conf_clear(&conf);
    free(labels);
}

static void reload(pdr_router_t *r, h2o_req_t *req)
{
    char msg[1024];
    int rc = pdr_router_reload(r, msg, sizeof(msg));
    audit(req, rc == 0 ? "reload applied" : "reload refused");
    if (rc == 0)
        pdr_send_json(req, 200, json_pack("{s:b,s:s}", "reloaded", 1, "message", msg));
    else if (rc == PDR_ECONFIG)
        pdr_send_error(req, 400, "invalid_config_error", msg, 0);
    else if (rc == PDR_ECLOSED)
        pdr_send_error(req, 503, "service_unavailable", msg, 1);
    else
        pdr_send_error(req, 409, "conflict_error", msg, 0);
}

/* The worker a {id} route names, or NULL when it answered 404. */
static pdr_worker_t *route_worker(pdr_router_t *r, h2o_req_t *req, const pdr_route_match_t *m)
{
    pdr_worker_t *w = pdr_pool_find(&r->pool, m->id, m->id_len);
    if (w == NULL) {
        char msg[160];
        snprintf(msg, sizeof(msg), "no worker with id \"%.*s\" (ids look like prefill-0, decode-1)",
                 (int)(m->id_len > 64 ? 64 : m->id_len), m->id);
        pdr_send_error(req, 404, "not_found_error", msg, 0);
    }
    return w;
}

/* Answers an admin request whose token (if any) was checked: rt is its route (NULL: the path is unknown or
 * takes other methods, per m), w the worker of a {id} route. */
static void admin_route(pdr_router_t *r, pdr_thread_t *t, h2o_req_t *req, const pdr_route_def_t *rt,
                        const pdr_route_match_t *m, pdr_worker_t *w)
{
    if (m->path_route == NULL) {
        pdr_send_error(req, 404, "not_found_error", "unknown admin route", 0);
        return;
    }
    if (rt == NULL) {
        method_not_allowed(req, m->allow);
        return;
    }
    switch (rt->kind) {
    case PDR_RK_ADMIN_METRICS:
        pdr__send_metrics(t, req);
        break;
    case PDR_RK_ADMIN_STATUS: {
        json_t *st = status_json(r);
        size_t suspect = 0;
        pdr_links_snapshot(NULL, 0, &suspect);
        if (st != NULL)
            json_object_set_new(st, "suspect_links", json_integer((json_int_t)suspect));
        pdr_send_json(req, 200, st);
        break;
    }
    case PDR_RK_ADMIN_LINKS:
        pdr_send_json(req, 200, links_json());
        break;
    case PDR_RK_ADMIN_EVENTS:
        pdr_send_json(req, 200, events_json(r));
        break;
    case PDR_RK_ADMIN_SHIM:
        pdr_send_json(req, 200, pdr_shim_events_json(r));
        break;
    case PDR_RK_ADMIN_KV_SNAPSHOT:
        pdr__admin_kv_snapshot(r, t, req);
        break;
    case PDR_RK_ADMIN_WORKERS:
        pdr_send_json(req, 200, workers_json(r));
        break;
    case PDR_RK_ADMIN_WORKER_ADD:
        add_worker(r, req);
        break;
    case PDR_RK_ADMIN_WORKER:
        pdr_send_json(req, 200, worker_json(r, w));
        break;
    case PDR_RK_ADMIN_WORKER_DELETE:
        delete_worker(r, req, w);
        break;
    case PDR_RK_ADMIN_WORKER_DRAIN:
        drain_worker(r, req, w);
        break;
    case PDR_RK_ADMIN_WORKER_ACTIVATE:
        audit(req, "activate");
        pdr_pool_activate(&r->pool, w);
        pdr_send_json(req, 200, worker_json(r, w));
        break;
    case PDR_RK_ADMIN_RELOAD:
        reload(r, req);
        break;
    default:
        pdr_send_error(req, 404, "not_found_error", "unknown admin route", 0);
        break;
    }
}

/* Dispatches from the route table's admin routes (routes.c). */
static int on_admin_req(h2o_handler_t *self, h2o_req_t *req)
{
    pdr_router_t *r = ((admin_handler_t *)self)->r;
    pdr_thread_t *t = &r->threads[0];
    if (pdr__refuse_ambiguous_head(t, req))
        return 0;
    pdr_route_match_t m;
    const pdr_route_def_t *rt = pdr_route_admin(req, &m);
    pdr_route_kind_t kind = m.path_route != NULL ? m.path_route->kind : PDR_RK_PD;
    if (kind == PDR_RK_ADMIN_PAGE) {
        /* The status page: no data in it, so no token (see the top of this file). */
        if (rt != NULL)
            send_status_page(req);
        else
            method_not_allowed(req, m.allow);
        pdr_metrics_count_request(&t->m, PDR_MR_OTHER, req->res.status, 0, -1);
        return 0;
    }
    if (kind == PDR_RK_ADMIN_SHIM_EVENTS) {
        /* Shims authenticate each batch with the key ring (shim_events.c), not with the operators' token. */
        if (rt != NULL)
            pdr_shim_events_handle(r, req);
        else
            method_not_allowed(req, m.allow);
        pdr_metrics_count_request(&t->m, PDR_MR_OTHER, req->res.status, 0, -1);
        return 0;
    }
    auth_result_t auth = authorized(r, req);
    if (auth == AUTH_DUPLICATED) {
        t->m.admin_auth_refused[PDR_ADMIN_AUTH_DUPLICATED]++;
        pdr_send_error(req, 400, "invalid_request_error",
                       "more than one Authorization header: send the bearer token once", 0);
        pdr_metrics_count_request(&t->m, PDR_MR_OTHER, 400, 0, -1);
        return 0;
    }
    if (auth != AUTH_OK) {
        t->m.admin_auth_refused[auth == AUTH_MISSING ? PDR_ADMIN_AUTH_MISSING : PDR_ADMIN_AUTH_WRONG]++;
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_WWW_AUTHENTICATE, NULL,
                       H2O_STRLIT("Bearer realm=\"pdrouter-admin\""));
        pdr_send_error(req, 401, "authentication_error",
                       "missing or wrong bearer token (Authorization: Bearer <token from admin.token_file>)",
                       0);
        pdr_metrics_count_request(&t->m, PDR_MR_OTHER, 401, 0, -1);
        return 0;
    }
    /* A worker's route looks the worker up first: an unknown id is a 404 whatever the method. */
    pdr_worker_t *w = NULL;
    if (m.id == NULL || (w = route_worker(r, req, &m)) != NULL)
        admin_route(r, t, req, rt, &m, w);
    if (w != NULL)
        pdr_worker_unref(w);
    /* Not the metrics (counted there), nor an answer still being made (counted when it is sent). */
    if (kind != PDR_RK_ADMIN_METRICS && req->res.status != 0)
        pdr_metrics_count_request(&t->m, PDR_MR_OTHER, req->res.status, 0, -1);
    return 0;
}

int pdr_admin_init(pdr_router_t *r)
{
    const pdr_config_t *c = r->config;
    if (c->admin_port == 0)
        return 0;
    if (c->admin_token_file != NULL) {
        char msg[512];
        int rc = pdr__admin_token_read(c->admin_token_file, &r->admin_token, &r->admin_token_len, msg,
                                       sizeof(msg));
        if (rc != 0) {
            pdr_error("%s", msg);
            return rc;
        }
    }
    h2o_config_init(&r->admin_config);
    r->admin_config.server_name = h2o_iovec_init(H2O_STRLIT("pdrouter-admin"));
    /* Admin bodies are small JSON objects; the shims' event batches (shim_events.c) take up to 1 MiB. */
    r->admin_config.max_request_entity_size =
        c->shim_events.key_file != NULL ? PDR_SHIM_MAX_BATCH : 64 * 1024;
    h2o_hostconf_t *host =
        h2o_config_register_host(&r->admin_config, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    h2o_pathconf_t *path = h2o_config_register_path(host, "/", 0);
    admin_handler_t *h = (admin_handler_t *)h2o_create_handler(path, sizeof(*h));
    h->super.on_req = on_admin_req;
    h->r = r;
    r->admin_on = 1;
    return 0;
}

void pdr_admin_log_start(const pdr_router_t *r)
{
    const pdr_config_t *c = r->config;
    if (!r->admin_on)
        pdr_info("admin API off (admin.port 0)");
    else if (r->admin_token == NULL)
        pdr_warn("admin API on %s:%d WITHOUT authentication (no admin.token_file): development only",
                 c->admin_host, c->admin_port);
    else
        pdr_info("admin API on %s:%d (bearer token from %s)", c->admin_host, c->admin_port,
                 c->admin_token_file);
}

void pdr_admin_dispose(pdr_router_t *r)
{
    if (r->admin_on)
        h2o_config_dispose(&r->admin_config);
    r->admin_on = 0;
    pdr__admin_token_drop(r);
}
