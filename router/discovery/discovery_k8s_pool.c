/*
 * The InferencePool watcher of the Kubernetes source (discovery.kubernetes.inference_pool): it LISTs the one
 * InferencePool (inference.networking.k8s.io/v1) of that name in the namespace, then WATCHes it, and hands
 * its selector and target ports to the two pod watchers (discovery_k8s.c) through the pool state
 * (discovery_k8s_internal.h): a change bumps the state's generation and wakes them, and they list the pods
 * again with it.
 *
 * Thread: its own, with its own curl multi handle, as the pod watchers'. The pool state's spec and gen
 * change only here, under its lock. What the API cannot give (an error, a pool that does not exist, was
 * deleted or asks for what pdrouter cannot do) changes nothing: the pod watchers keep the last spec, so
 * the workers found so far stay, and the watcher logs why and keeps trying (discovery.h: a failure emits
 * nothing).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "discovery_k8s_internal.h"
#include "err.h"
#include "util.h"

#define POOL_API "/apis/inference.networking.k8s.io/v1/namespaces/"

static char *pool_url(pdr_k8s_pool_state_t *p, int watching)
{
    pdr_k8s_source_t *src = p->w.src;
    char *ns = curl_easy_escape(NULL, src->ns, 0);
    char *name = curl_easy_escape(NULL, p->name, 0);
    char *rv = curl_easy_escape(NULL, p->rv, 0);
    char *url = NULL;
    if (ns != NULL && name != NULL && rv != NULL) {
        size_t len = strlen(src->api_server) + strlen(ns) + strlen(name) + strlen(rv) + 200;
        url = malloc(len);
        if (url != NULL && watching)
            snprintf(url, len,
                     "%s" POOL_API "%s/inferencepools?fieldSelector=metadata.name%%3D%s&watch=1"
                     "&resourceVersion=%s&timeoutSeconds=%d&allowWatchBookmarks=true",
                     src->api_server, ns, name, rv, src->watch_timeout_s);
        else if (url != NULL)
            snprintf(url, len, "%s" POOL_API "%s/inferencepools?fieldSelector=metadata.name%%3D%s",
                     src->api_server, ns, name);
    }
    curl_free(ns);
    curl_free(name);
    curl_free(rv);
    return url;
}

static int set_rv(pdr_k8s_pool_state_t *p, const char *rv)
{
    if (rv == NULL || rv[0] == '\0' || strlen(rv) >= sizeof(p->rv))
        return PDR_EPROTO;
    memcpy(p->rv, rv, strlen(rv) + 1);
    return 0;
}

static void describe(const pdr_k8s_infpool_t *s, char *out, size_t outlen)
{
    size_t used = (size_t)snprintf(out, outlen, "selector %.256s, target ports", s->selector);
    for (int i = 0; i < s->nports && used < outlen; i++)
        used += (size_t)snprintf(out + used, outlen - used, "%s%d", i ? "," : " ", s->ports[i]);
}

/* The pool as the API has it now: its spec becomes the pod watchers' unless it is the one they have. */
static void pool_apply(pdr_k8s_pool_state_t *p, const json_t *obj)
{
    char err[256], what[400];
    const char *rv = pdr__k8s_jstr(json_object_get(obj, "metadata"), "resourceVersion");
    pdr_k8s_infpool_t *next = malloc(sizeof(*next));
    if (next == NULL) {
        pdr_warn("kubernetes discovery: InferencePool %s: out of memory; its change is not followed",
                 p->name);
        return;
    }
    p->missing_warned = 0;
    int rc = pdr__k8s_infpool_parse(obj, next, err, sizeof(err));
    if (rc != 0) {
        char key[sizeof(p->refused)];
        snprintf(key, sizeof(key), "%.40s %.100s", rv != NULL ? rv : "", err);
        if (strcmp(key, p->refused) != 0)
            pdr_error("kubernetes discovery: InferencePool %s in namespace %s (resourceVersion %s): %s; "
                      "%s",
                      p->name, p->w.src->ns, rv != NULL ? rv : "?", err,
                      p->gen == 0 ? "no worker is taken from it until it changes"
                                  : "its last usable spec stays in use until it changes");
        memcpy(p->refused, key, sizeof(key));
        free(next);
        return;
    }
    p->refused[0] = '\0';
    uv_mutex_lock(&p->lock);
    int changed = p->gen == 0 || strcmp(p->spec.selector, next->selector) != 0 ||
                  p->spec.nports != next->nports ||
                  memcmp(p->spec.ports, next->ports, sizeof(next->ports[0]) * (size_t)next->nports) != 0;
    if (changed) {
        p->spec = *next;
        __atomic_store_n(&p->gen, p->gen + 1, __ATOMIC_RELEASE);
    }
    uv_mutex_unlock(&p->lock);
    if (changed) {
        describe(next, what, sizeof(what));
        pdr_info("kubernetes discovery: InferencePool %s: %s", p->name, what);
        for (int i = 0; i < 2; i++)
            if (p->w.src->roles[i].multi != NULL)
                curl_multi_wakeup(p->w.src->roles[i].multi);
    }
    free(next);
}

/* A list: the pool, or its absence (waited for, logged once). 0, or -1 with w->why. */
static int pool_apply_list(pdr_k8s_pool_state_t *p)
{
    pdr_k8s_watcher_t *w = &p->w;
    json_error_t jerr;
    json_t *root = json_loadb(w->body.p, w->body.len, 0, &jerr);
    const json_t *items = json_object_get(root, "items");
    const char *rv = pdr__k8s_jstr(json_object_get(root, "metadata"), "resourceVersion");
    if (root == NULL || !(json_is_array(items) || json_is_null(items)) || set_rv(p, rv) != 0) {
        snprintf(w->why, sizeof(w->why),
                 "the answer is not an InferencePoolList with metadata.resourceVersion%s%s",
                 root == NULL ? ": " : "", root == NULL ? jerr.text : "");
        json_decref(root);
        return -1;
    }
    const json_t *pool = NULL;
    size_t i;
    const json_t *item;
    json_array_foreach(items, i, item)
    {
        const char *name = pdr__k8s_jstr(json_object_get(item, "metadata"), "name");
        if (name != NULL && strcmp(name, p->name) == 0)
            pool = item;
    }
    if (pool != NULL) {
        pool_apply(p, pool);
    } else if (!p->missing_warned) {
        pdr_warn("kubernetes discovery: InferencePool %s is not in namespace %s; waiting for it (the workers "
                 "found so far stay)",
                 p->name, w->src->ns);
        p->missing_warned = 1;
    }
    json_decref(root);
    return 0;
}

static int pool_on_line(void *ud, const char *line, size_t len)
{
    pdr_k8s_watcher_t *w = ud;
    pdr_k8s_pool_state_t *p = w->src->infpool;
    json_error_t jerr;
    json_t *ev = json_loadb(line, len, 0, &jerr);
    const char *type = pdr__k8s_jstr(ev, "type");
    const json_t *obj = json_object_get(ev, "object");
    int stop = 0;
    if (type == NULL || !json_is_object(obj)) {
        snprintf(w->why, sizeof(w->why), "a watch event is not JSON with a type and an object%s%s",
                 ev == NULL ? ": " : "", ev == NULL ? jerr.text : "");
        w->verdict = PDR_K8S_REQ_BROKEN;
        stop = 1;
    } else if (strcmp(type, "ERROR") == 0) {
        const json_t *code = json_object_get(obj, "code");
        const char *msg = pdr__k8s_jstr(obj, "message");
        int gone = json_is_integer(code) && json_integer_value(code) == 410;
        snprintf(w->why, sizeof(w->why), "%s: %s", gone ? "watch expired (ERROR 410)" : "ERROR event",
                 msg != NULL ? msg : "(no message)");
        w->verdict = gone ? PDR_K8S_REQ_GONE : PDR_K8S_REQ_BROKEN;
        stop = 1;
    } else {
        const char *rv = pdr__k8s_jstr(json_object_get(obj, "metadata"), "resourceVersion");
        const char *name = pdr__k8s_jstr(json_object_get(obj, "metadata"), "name");
        int mine = name != NULL && strcmp(name, p->name) == 0;
        if (strcmp(type, "BOOKMARK") == 0 || strcmp(type, "ADDED") == 0 || strcmp(type, "MODIFIED") == 0 ||
            strcmp(type, "DELETED") == 0) {
            w->events++;
            set_rv(p, rv);
        }
        if (mine && (strcmp(type, "ADDED") == 0 || strcmp(type, "MODIFIED") == 0)) {
            pool_apply(p, obj);
        } else if (mine && strcmp(type, "DELETED") == 0) {
            pdr_warn(
                "kubernetes discovery: InferencePool %s was deleted from namespace %s; the workers found "
                "so far stay until it is created again",
                p->name, w->src->ns);
            p->missing_warned = 1;
        }
    }
    json_decref(ev);
    return stop;
}

/* LIST: 0 when the pool (or its absence) was read, -1 otherwise (logged). */
static int pool_list(pdr_k8s_pool_state_t *p)
{
    pdr_k8s_watcher_t *w = &p->w;
    char *url = pool_url(p, 0);
    int res = url != NULL ? pdr__k8s_get(w, url, 0) : PDR_K8S_REQ_FAILED;
    if (url == NULL)
        snprintf(w->why, sizeof(w->why), "out of memory");
    free(url);
    if (res == PDR_K8S_REQ_STOPPED)
        return -1;
    if (res != PDR_K8S_REQ_DONE) {
        pdr_warn("kubernetes discovery: %s: listing at %s failed: %s", w->label, w->src->api_server, w->why);
        return -1;
    }
    if (w->status != 200) {
        pdr__k8s_http_error(w, "the InferencePool list");
        return -1;
    }
    if (pool_apply_list(p) != 0) {
        pdr_warn("kubernetes discovery: %s: %s", w->label, w->why);
        return -1;
    }
    return 0;
}

/* WATCH: 0 to watch on from rv, 1 to list again now, -1 to back off and list again (logged). */
static int pool_watch(pdr_k8s_pool_state_t *p)
{
    pdr_k8s_watcher_t *w = &p->w;
    char *url = pool_url(p, 1);
    int res = url != NULL ? pdr__k8s_get(w, url, 1) : PDR_K8S_REQ_FAILED;
    if (url == NULL)
        snprintf(w->why, sizeof(w->why), "out of memory");
    free(url);
    switch (res) {
    case PDR_K8S_REQ_STOPPED:
        return -1;
    case PDR_K8S_REQ_GONE:
        pdr_info("kubernetes discovery: %s: %s; listing again", w->label, w->why);
        return 1;
    case PDR_K8S_REQ_DONE:
        break;
    default:
        pdr_warn("kubernetes discovery: %s: the watch at %s failed: %s; listing again", w->label,
                 w->src->api_server, w->why);
        return -1;
    }
    if (w->status == 410) {
        char msg[256];
        pdr__k8s_status_message(&w->body, msg, sizeof(msg));
        pdr_info("kubernetes discovery: %s: watch answered HTTP 410 (%s); listing again", w->label, msg);
        return 1;
    }
    if (w->status != 200) {
        pdr__k8s_http_error(w, "the InferencePool watch");
        return -1;
    }
    return 0;
}

static void pool_main(void *arg)
{
    pdr_k8s_pool_state_t *p = arg;
    pdr_k8s_watcher_t *w = &p->w;
    int backoff = 0, listed = 0, gone_in_a_row = 0;
    while (!pdr__k8s_stopping(w->src)) {
        int failed = 0;
        if (!listed) {
            listed = pool_list(p) == 0;
            failed = !listed;
        } else {
            int rc = pool_watch(p);
            if (rc == 0) {
                backoff = 0;
                gone_in_a_row = 0;
            } else {
                listed = 0;
                if (w->events > 0) {
                    gone_in_a_row = 0;
                    backoff = 0;
                }
                /* A failure, or a second expiry with no event between, backs off (no spinning). */
                failed = rc < 0 || ++gone_in_a_row > 1;
            }
        }
        if (failed && !pdr__k8s_stopping(w->src)) {
            backoff = pdr__k8s_backoff(backoff);
            pdr__k8s_wait(w, backoff);
        }
    }
}

int pdr__k8s_pool_start(pdr_k8s_source_t *src, const char *name, char *err, size_t errlen)
{
    pdr_k8s_pool_state_t *p = calloc(1, sizeof(*p));
    if (p == NULL || uv_mutex_init(&p->lock) != 0) {
        free(p);
        snprintf(err, errlen, "kubernetes discovery: out of memory");
        return -1;
    }
    p->name = name;
    p->w.src = src;
    p->w.role = PDR_ROLE_DECODE; /* unused: this watcher has no pod set */
    p->w.resource = "inferencepools (API group inference.networking.k8s.io)";
    p->w.line_cb = pool_on_line;
    p->w.lines.limit = PDR_K8S_MAX_LINE;
    snprintf(p->w.label, sizeof(p->w.label), "InferencePool %.128s", name);
    src->infpool = p;
    if ((p->w.multi = curl_multi_init()) == NULL) {
        snprintf(err, errlen, "kubernetes discovery: out of memory");
        return -1;
    }
    if (uv_thread_create(&p->w.thread, pool_main, p) != 0) {
        snprintf(err, errlen, "kubernetes discovery: cannot start a thread");
        return -1;
    }
    p->w.thread_started = 1;
    return 0;
}

void pdr__k8s_pool_free(pdr_k8s_pool_state_t *p)
{
    if (p == NULL)
        return;
    if (p->w.thread_started) {
        curl_multi_wakeup(p->w.multi);
        uv_thread_join(&p->w.thread);
    }
    if (p->w.multi != NULL)
        curl_multi_cleanup(p->w.multi);
    pdr__k8s_lines_free(&p->w.lines);
    pdr_buf_free(&p->w.body);
    uv_mutex_destroy(&p->lock);
    free(p);
}
