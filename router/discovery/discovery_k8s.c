/*
 * Kubernetes worker discovery (see discovery.h): for each role with a label selector, LIST the matching
 * pods of the namespace, then WATCH them from the list's resourceVersion, and emit the role's ready
 * workers whenever they change. With discovery.kubernetes.inference_pool both roles' watchers take the
 * selector and the target ports from the InferencePool that discovery_k8s_pool.c watches, list again when
 * it changes, and keep the pods of their role (the role label).
 *
 * Threads: one per role, each with its own curl multi handle driven by curl_multi_poll, so that a watch of
 * one role never delays the other and stop() interrupts any wait (a transfer or a back-off) at once with
 * curl_multi_wakeup. A role's pod set, line splitter and buffers belong to its thread; the emit callback
 * is serialized across the two threads by emit_lock, so the receiver never sees two calls at once.
 *
 * Invariants: the pod set is always sorted by name; an emit happens after the first successful list and
 * then only when the ready set differs from the last one emitted; a failure emits nothing (discovery.h).
 * Every buffer has a ceiling: a watch line PDR_K8S_MAX_LINE, a list body PDR_K8S_MAX_LIST, an error body
 * PDR_K8S_MAX_ERROR_BODY, a token PDR_K8S_MAX_TOKEN.
 *
 * This file holds the source and the pod watchers' loops; the request is discovery_k8s_req.c's, the
 * pure parts (pods, lines, sets) are discovery_k8s_pods.c's.
 */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>
#include "discovery_k8s_internal.h"
#include "err.h"
#include "util.h"
#include "defaults.h"

/* 300: the watch_timeout_s default of config.h, used when the config left the field at 0. */
#define K8S_DEF_WATCH_TIMEOUT_S 300

static const char *role_name(pdr_role_t r)
{
    return r == PDR_ROLE_PREFILL ? "prefill" : "decode";
}

static void role_emit(pdr_k8s_watcher_t *r)
{
    const pdr_discovered_t *list;
    size_t n;
    int rc = pdr__k8s_set_take_changed(&r->set, &list, &n);
    if (rc < 0) {
        pdr_warn("kubernetes discovery: %s: out of memory, the set is not emitted", r->label);
        return;
    }
    if (rc == 0)
        return;
    pdr_info("kubernetes discovery: %s -> %zu ready pod%s", r->label, n, n == 1 ? "" : "s");
    pdr_k8s_source_t *src = r->src;
    uv_mutex_lock(&src->emit_lock);
    src->cb(src->ud, "kubernetes", r->role, list, n);
    uv_mutex_unlock(&src->emit_lock);
}

static int on_line(void *ud, const char *line, size_t len)
{
    pdr_k8s_watcher_t *r = ud;
    char err[256];
    switch (pdr__k8s_set_apply_event(&r->set, line, len, err, sizeof(err))) {
    case PDR_K8S_EV_APPLIED:
        r->events++;
        role_emit(r);
        return 0;
    case PDR_K8S_EV_BOOKMARK:
        r->events++;
        return 0;
    case PDR_K8S_EV_IGNORED:
        return 0;
    case PDR_K8S_EV_GONE:
        snprintf(r->why, sizeof(r->why), "watch expired (ERROR 410: %s)", err);
        r->verdict = PDR_K8S_REQ_GONE;
        return 1;
    case PDR_K8S_EV_ERROR:
        snprintf(r->why, sizeof(r->why), "ERROR event: %s", err);
        r->verdict = PDR_K8S_REQ_BROKEN;
        return 1;
    case PDR_K8S_EV_MALFORMED:
        snprintf(r->why, sizeof(r->why), "%s", err);
        r->verdict = PDR_K8S_REQ_BROKEN;
        return 1;
    }
    return 1;
}

static char *role_url(pdr_k8s_watcher_t *r, int watching)
{
    pdr_k8s_source_t *src = r->src;
    char *sel = curl_easy_escape(NULL, r->selector, 0);
    char *ns = curl_easy_escape(NULL, src->ns, 0);
    char *rv = curl_easy_escape(NULL, r->set.rv, 0);
    char *url = NULL;
    if (sel != NULL && ns != NULL && rv != NULL) {
        size_t len = strlen(src->api_server) + strlen(ns) + strlen(sel) + strlen(rv) + 160;
        url = malloc(len);
        if (url != NULL && watching)
            snprintf(url, len,
                     "%s/api/v1/namespaces/%s/pods?labelSelector=%s&watch=1&resourceVersion=%s"
                     "&timeoutSeconds=%d&allowWatchBookmarks=true",
                     src->api_server, ns, sel, rv, src->watch_timeout_s);
        else if (url != NULL)
            snprintf(url, len, "%s/api/v1/namespaces/%s/pods?labelSelector=%s", src->api_server, ns, sel);
    }
    curl_free(sel);
    curl_free(ns);
    curl_free(rv);
    return url;
}

/* inference_pool: takes the pool's selector and target ports for the next list. 0, 1 when the pool has
 * not been read yet (wait for it), -1 when out of memory. */
static int role_take_pool(pdr_k8s_watcher_t *r)
{
    pdr_k8s_pool_state_t *p = r->src->infpool;
    uv_mutex_lock(&p->lock);
    unsigned gen = p->gen;
    char *sel = gen != 0 ? strdup(p->spec.selector) : NULL;
    if (sel != NULL) {
        memcpy(r->set.rc.ports, p->spec.ports, sizeof(r->set.rc.ports));
        r->set.rc.nports = p->spec.nports;
    }
    uv_mutex_unlock(&p->lock);
    if (sel == NULL)
        return gen == 0 ? 1 : -1;
    free(r->pool_selector);
    r->pool_selector = sel;
    r->selector = sel;
    r->pool_gen = gen;
    return 0;
}

/* LIST: returns 0 when the set was replaced from the API, 1 when the InferencePool changed meanwhile (list
 * again at once), -1 otherwise (logged). */
static int role_list(pdr_k8s_watcher_t *r)
{
    char *url = role_url(r, 0);
    if (url == NULL) {
        pdr_warn("kubernetes discovery: %s: out of memory", r->label);
        return -1;
    }
    int res = pdr__k8s_get(r, url, 0);
    free(url);
    if (res == PDR_K8S_REQ_STOPPED)
        return -1;
    if (res == PDR_K8S_REQ_RESTART)
        return 1;
    if (res != PDR_K8S_REQ_DONE) {
        pdr_warn("kubernetes discovery: %s: listing pods at %s failed: %s", r->label, r->src->api_server,
                 r->why);
        return -1;
    }
    if (r->status != 200) {
        pdr__k8s_http_error(r, "the pod list");
        return -1;
    }
    char err[256];
    if (pdr__k8s_set_apply_list(&r->set, r->body.p, r->body.len, err, sizeof(err)) != 0) {
        pdr_warn("kubernetes discovery: %s: %s", r->label, err);
        return -1;
    }
    role_emit(r);
    return 0;
}

/* How a watch ended, for the loop. */
enum { WATCH_AGAIN, WATCH_RELIST, WATCH_FAILED, WATCH_STOPPED, WATCH_RESTART };

static int role_watch(pdr_k8s_watcher_t *r)
{
    char *url = role_url(r, 1);
    if (url == NULL) {
        pdr_warn("kubernetes discovery: %s: out of memory", r->label);
        return WATCH_FAILED;
    }
    int res = pdr__k8s_get(r, url, 1);
    free(url);
    switch (res) {
    case PDR_K8S_REQ_STOPPED:
        return WATCH_STOPPED;
    case PDR_K8S_REQ_RESTART:
        pdr_info("kubernetes discovery: %s: the InferencePool changed; listing its pods again", r->label);
        return WATCH_RESTART;
    case PDR_K8S_REQ_GONE:
        pdr_info("kubernetes discovery: %s: %s; listing again", r->label, r->why);
        return WATCH_RELIST;
    case PDR_K8S_REQ_BROKEN:
        pdr_warn("kubernetes discovery: %s: the watch broke: %s; listing again", r->label, r->why);
        return WATCH_FAILED;
    case PDR_K8S_REQ_FAILED:
        pdr_warn("kubernetes discovery: %s: watching pods at %s failed: %s", r->label, r->src->api_server,
                 r->why);
        return WATCH_FAILED;
    }
    if (r->status == 410) {
        char msg[256];
        pdr__k8s_status_message(&r->body, msg, sizeof(msg));
        pdr_info("kubernetes discovery: %s: watch answered HTTP 410 (%s); listing again", r->label, msg);
        return WATCH_RELIST;
    }
    if (r->status != 200) {
        pdr__k8s_http_error(r, "the pod watch");
        return WATCH_FAILED;
    }
    return WATCH_AGAIN; /* timeoutSeconds passed, or the server closed the stream: watch on from rv */
}

static void role_main(void *arg)
{
    pdr_k8s_watcher_t *r = arg;
    int backoff = 0; /* ms; 0 = the last attempt went well */
    int listed = 0, gone_in_a_row = 0;
    while (!pdr__k8s_stopping(r->src)) {
        int failed = 0;
        if (!listed) {
            int taken = r->src->infpool != NULL ? role_take_pool(r) : 0;
            if (taken > 0) { /* the pool's watcher wakes this thread when it has read the pool */
                pdr__k8s_wait(r, 1000);
                continue;
            }
            int rc = taken < 0 ? -1 : role_list(r);
            listed = rc == 0;
            failed = rc < 0;
        } else {
            switch (role_watch(r)) {
            case WATCH_RESTART:
                listed = 0;
                break;
            case WATCH_AGAIN:
                backoff = 0;
                gone_in_a_row = 0;
                break;
            case WATCH_RELIST:
                listed = 0;
                /* A watch that expires again before any event, right after a list, would spin. */
                if (r->events > 0)
                    gone_in_a_row = 0;
                failed = ++gone_in_a_row > 1;
                break;
            case WATCH_FAILED:
                if (r->events > 0)
                    backoff = 0;
                listed = 0;
                failed = 1;
                break;
            default:
                break;
            }
        }
        if (failed) {
            backoff = pdr__k8s_backoff(backoff);
            pdr__k8s_wait(r, backoff);
        }
    }
}

static void source_free(pdr_k8s_source_t *src)
{
    for (int i = 0; i < 2; i++) {
        pdr_k8s_watcher_t *r = &src->roles[i];
        if (r->multi != NULL)
            curl_multi_cleanup(r->multi);
        pdr__k8s_set_free(&r->set);
        pdr__k8s_lines_free(&r->lines);
        pdr_buf_free(&r->body);
        free(r->pool_selector);
    }
    free(src->api_server);
    free(src->ns);
    free(src->token_file);
    free(src->ca_file);
    uv_mutex_destroy(&src->emit_lock);
    free(src);
    curl_global_cleanup();
}

static void source_stop(pdr_discovery_t *d)
{
    pdr_k8s_source_t *src = (pdr_k8s_source_t *)d;
    __atomic_store_n(&src->stopping, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < 2; i++)
        if (src->roles[i].thread_started)
            curl_multi_wakeup(src->roles[i].multi);
    if (src->infpool != NULL && src->infpool->w.thread_started)
        curl_multi_wakeup(src->infpool->w.multi);
    for (int i = 0; i < 2; i++)
        if (src->roles[i].thread_started)
            uv_thread_join(&src->roles[i].thread);
    pdr__k8s_pool_free(src->infpool); /* joins its thread, which wakes the roles' multis */
    src->infpool = NULL;
    source_free(src);
}

/* Fills the connection settings, from the config or the in-cluster defaults. 0 or -1 with err. */
static int source_settings(pdr_k8s_source_t *src, const pdr_discovery_conf_t *d, char *err, size_t errlen)
{
    int in_cluster = 0;
    if (d->kubernetes.api_server != NULL) {
        src->api_server = strdup(d->kubernetes.api_server);
    } else {
        const char *host = getenv("KUBERNETES_SERVICE_HOST");
        const char *port = getenv("KUBERNETES_SERVICE_PORT");
        if (host == NULL || host[0] == '\0') {
            snprintf(
                err, errlen,
                "discovery.kubernetes: no api_server in the config and KUBERNETES_SERVICE_HOST is not set "
                "(not running in a pod?); set discovery.kubernetes.api_server");
            return -1;
        }
        char buf[300];
        snprintf(buf, sizeof(buf), strchr(host, ':') != NULL ? "https://[%s]:%s" : "https://%s:%s", host,
                 port != NULL && port[0] != '\0' ? port : "443");
        src->api_server = strdup(buf);
        in_cluster = 1;
    }
    if (src->api_server == NULL)
        goto nomem;
    size_t len = strlen(src->api_server);
    while (len > 0 && src->api_server[len - 1] == '/')
        src->api_server[--len] = '\0';
    if (strncmp(src->api_server, "http://", 7) != 0 && strncmp(src->api_server, "https://", 8) != 0) {
        snprintf(err, errlen,
                 "discovery.kubernetes.api_server \"%s\": expected http://HOST[:PORT] or https://...",
                 src->api_server);
        return -1;
    }

    if (d->kubernetes.namespace_ != NULL) {
        src->ns = strdup(d->kubernetes.namespace_);
    } else {
        char ignored[256];
        src->ns = pdr__k8s_read_small_file(PDR_K8S_SA_DIR "/namespace", 253, ignored, sizeof(ignored));
        if (src->ns == NULL || src->ns[0] == '\0') {
            free(src->ns);
            src->ns = strdup("default");
        }
    }
    if (src->ns == NULL)
        goto nomem;

    const char *token = d->kubernetes.token_file;
    src->token_required = token != NULL;
    if (token == NULL && in_cluster)
        token = PDR_K8S_SA_DIR "/token";
    if (token != NULL) {
        if ((src->token_file = strdup(token)) == NULL)
            goto nomem;
        char ferr[256];
        char *t = pdr__k8s_read_small_file(src->token_file, PDR_K8S_MAX_TOKEN, ferr, sizeof(ferr));
        if (t == NULL && src->token_required) {
            snprintf(err, errlen, "discovery.kubernetes.token_file: %s", ferr);
            return -1;
        }
        if (t == NULL)
            pdr_warn("kubernetes discovery: %s; asking the API server without a bearer token", ferr);
        free(t);
    }
    const char *ca = d->kubernetes.ca_file;
    if (ca == NULL && in_cluster)
        ca = PDR_K8S_SA_DIR "/ca.crt";
    if (ca != NULL && (src->ca_file = strdup(ca)) == NULL)
        goto nomem;
    src->watch_timeout_s =
        d->kubernetes.watch_timeout_s > 0 ? d->kubernetes.watch_timeout_s : K8S_DEF_WATCH_TIMEOUT_S;
    return 0;
nomem:
    snprintf(err, errlen, "kubernetes discovery: out of memory");
    return -1;
}

pdr_discovery_t *pdr_k8s_discovery_start(const pdr_discovery_conf_t *d, const char *pool,
                                         pdr_discovery_emit_cb cb, void *ud, char *err, size_t errlen)
{
    if (errlen > 0)
        err[0] = '\0';
    const char *infpool = d->kubernetes.inference_pool;
    if (d->kubernetes.role[0].selector == NULL && d->kubernetes.role[1].selector == NULL && infpool == NULL)
        return NULL;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        snprintf(err, errlen, "kubernetes discovery: libcurl failed to initialize");
        return NULL;
    }
    pdr_k8s_source_t *src = calloc(1, sizeof(*src));
    if (src == NULL || uv_mutex_init(&src->emit_lock) != 0) {
        free(src);
        curl_global_cleanup();
        snprintf(err, errlen, "kubernetes discovery: out of memory");
        return NULL;
    }
    src->base.stop = source_stop;
    src->cb = cb;
    src->ud = ud;
    snprintf(src->pool, sizeof(src->pool), "%s", pool != NULL ? pool : PDR_DEFAULT_POOL);
    if (source_settings(src, d, err, errlen) != 0) {
        source_free(src);
        return NULL;
    }
    for (int i = 0; i < 2; i++) {
        pdr_k8s_watcher_t *r = &src->roles[i];
        r->src = src;
        r->role = (pdr_role_t)i;
        r->selector = d->kubernetes.role[i].selector;
        r->lines.limit = PDR_K8S_MAX_LINE;
        r->resource = "pods";
        r->line_cb = on_line;
        if (infpool != NULL)
            snprintf(r->label, sizeof(r->label), "%s of InferencePool %.128s", role_name(r->role), infpool);
        else
            snprintf(r->label, sizeof(r->label), "%s %s", role_name(r->role), r->selector ? r->selector : "");
        pdr_k8s_role_conf_t rc = {
            .port = d->kubernetes.role[i].port,
            .bootstrap_port = i == PDR_ROLE_PREFILL ? d->kubernetes.role[i].bootstrap_port : -1,
            .use_annotation = i == PDR_ROLE_PREFILL,
            .annotation = d->kubernetes.bootstrap_port_annotation,
            .https = d->kubernetes.role[i].https,
            .role_label = infpool == NULL                    ? NULL
                          : d->kubernetes.role_label != NULL ? d->kubernetes.role_label
                                                             : PDR_DEF_K8S_ROLE_LABEL,
            .role = (pdr_role_t)i,
        };
        pdr__k8s_set_init(&r->set, &rc, r->label);
        if ((r->selector != NULL || infpool != NULL) && (r->multi = curl_multi_init()) == NULL) {
            snprintf(err, errlen, "kubernetes discovery: out of memory");
            source_free(src);
            return NULL;
        }
    }
    if (infpool != NULL && pdr__k8s_pool_start(src, infpool, err, errlen) != 0) {
        source_stop(&src->base);
        return NULL;
    }
    for (int i = 0; i < 2; i++) {
        pdr_k8s_watcher_t *r = &src->roles[i];
        if (r->multi == NULL)
            continue;
        if (uv_thread_create(&r->thread, role_main, r) != 0) {
            snprintf(err, errlen, "kubernetes discovery: cannot start a thread");
            source_stop(&src->base);
            return NULL;
        }
        r->thread_started = 1;
    }
    if (infpool != NULL) {
        pdr_info(
            "kubernetes discovery: watching InferencePool %s and its pods at %s in namespace %s for pool %s "
            "(role label %s)",
            infpool, src->api_server, src->ns, src->pool, src->roles[0].set.rc.role_label);
        return &src->base;
    }
    pdr_info(
        "kubernetes discovery: watching pods at %s in namespace %s for pool %s (prefill: %s, decode: %s)",
        src->api_server, src->ns, src->pool, src->roles[0].selector ? src->roles[0].selector : "-",
        src->roles[1].selector ? src->roles[1].selector : "-");
    return &src->base;
}
