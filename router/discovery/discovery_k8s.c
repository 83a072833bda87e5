/*
 * Kubernetes worker discovery (see discovery.h): for each role with a label selector, LIST the matching
 * pods of the namespace, then WATCH them from the list's resourceVersion, and emit the role's ready
 * workers whenever they change.
 *
 * Threads: one per role, each with its own curl multi handle driven by curl_multi_poll, so that a watch of
 * one role never delays the other and stop() interrupts any wait (a transfer or a back-off) at once with
 * curl_multi_wakeup. A role's pod set, line splitter and buffers belong to its thread; the emit callback
 * is serialized across the two threads by emit_lock, so the receiver never sees two calls at once.
 *
 * Invariants: the pod set is always sorted by name; an emit happens after the first successful list and
 * then only when the ready set differs from the last one emitted; a failure emits nothing (discovery.h).
 * Every buffer has a ceiling: a watch line PDR_K8S_MAX_LINE, a list body PDR_K8S_MAX_LIST, an error body
 * K8S_MAX_ERROR_BODY, a token K8S_MAX_TOKEN.
 *
 * This file holds the source (threads, requests); the pure parts (pods, lines, sets) are
 * discovery_k8s_pods.c's.
 */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>
#include "discovery_k8s_pods.h"
#include "err.h"
#include "util.h"

#define K8S_SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"
#define K8S_MAX_ERROR_BODY (64u << 10)
#define K8S_MAX_TOKEN (64u << 10)
#define K8S_BACKOFF_MIN_MS 200
#define K8S_BACKOFF_MAX_MS 10000
#define K8S_CONNECT_TIMEOUT_MS 5000
#define K8S_LIST_TIMEOUT_S 60
/* A watch may sit idle for its whole timeoutSeconds; past that plus this margin the connection is dead. */
#define K8S_WATCH_MARGIN_S 30
/* 300: the watch_timeout_s default of config.h, used when the config left the field at 0. */
#define K8S_DEF_WATCH_TIMEOUT_S 300

/* ---- the source: threads, requests ---- */

typedef struct k8s_source k8s_source_t;

/* Why a request ended. */
enum { REQ_DONE, REQ_STOPPED, REQ_FAILED, REQ_GONE, REQ_BROKEN };

typedef struct k8s_role {
    k8s_source_t *src;
    pdr_role_t role;
    const char *selector;
    char label[192];
    CURLM *multi;
    uv_thread_t thread;
    int thread_started;
    pdr_k8s_set_t set;
    pdr_k8s_lines_t lines;
    /* One request at a time. */
    CURL *easy;
    int watching;
    long status;
    pdr_buf_t body; /* a list body, or the start of an error answer */
    int verdict;    /* REQ_GONE or REQ_BROKEN when the watch stream asked to end the transfer */
    int events;     /* events received in this watch */
    char why[512];  /* what went wrong */
} k8s_role_t;

struct k8s_source {
    pdr_discovery_t base; /* first member (discovery.h) */
    pdr_discovery_emit_cb cb;
    void *ud;
    char *api_server, *ns, *token_file, *ca_file;
    int token_required; /* token_file came from the config: failing to read it is an error */
    int watch_timeout_s;
    char pool[64]; /* the pool it feeds, for the log */
    int stopping;  /* atomic */
    uv_mutex_t emit_lock;
    k8s_role_t roles[2];
};

static const char *role_name(pdr_role_t r)
{
    return r == PDR_ROLE_PREFILL ? "prefill" : "decode";
}

static int stopping(const k8s_source_t *src)
{
    return __atomic_load_n(&src->stopping, __ATOMIC_ACQUIRE);
}

/* Reads a whole small file, trimmed of surrounding whitespace. Returns a malloc'd string or NULL. */
static char *read_small_file(const char *path, size_t limit, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = malloc(limit + 1);
    size_t n = buf != NULL ? fread(buf, 1, limit + 1, f) : 0;
    int bad = buf == NULL || ferror(f) || n > limit;
    fclose(f);
    if (bad) {
        snprintf(err, errlen, "cannot read %s: %s", path,
                 buf == NULL ? "out of memory" : "error or too large");
        free(buf);
        return NULL;
    }
    size_t start = 0;
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' || buf[n - 1] == '\t'))
        n--;
    while (start < n && (buf[start] == ' ' || buf[start] == '\t' || buf[start] == '\n'))
        start++;
    memmove(buf, buf + start, n - start);
    buf[n - start] = '\0';
    return buf;
}

static void role_emit(k8s_role_t *r)
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
    k8s_source_t *src = r->src;
    uv_mutex_lock(&src->emit_lock);
    src->cb(src->ud, "kubernetes", r->role, list, n);
    uv_mutex_unlock(&src->emit_lock);
}

static int on_line(void *ud, const char *line, size_t len)
{
    k8s_role_t *r = ud;
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
        r->verdict = REQ_GONE;
        return 1;
    case PDR_K8S_EV_ERROR:
        snprintf(r->why, sizeof(r->why), "ERROR event: %s", err);
        r->verdict = REQ_BROKEN;
        return 1;
    case PDR_K8S_EV_MALFORMED:
        snprintf(r->why, sizeof(r->why), "%s", err);
        r->verdict = REQ_BROKEN;
        return 1;
    }
    return 1;
}

static size_t on_body(char *p, size_t size, size_t nmemb, void *ud)
{
    k8s_role_t *r = ud;
    size_t n = size * nmemb;
    if (stopping(r->src))
        return 0;
    if (r->status == 0)
        curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &r->status);
    if (r->status != 200) {
        /* Keep the start of an error answer for the message; drop the rest. */
        size_t room = K8S_MAX_ERROR_BODY - r->body.len;
        if (room > 0 && pdr_buf_append(&r->body, p, n < room ? n : room, K8S_MAX_ERROR_BODY) != 0)
            return 0;
        return n;
    }
    if (!r->watching) {
        int rc = pdr_buf_append(&r->body, p, n, PDR_K8S_MAX_LIST);
        if (rc != 0) {
            snprintf(r->why, sizeof(r->why), "the pod list is larger than %u bytes", PDR_K8S_MAX_LIST);
            r->verdict = REQ_BROKEN;
            return 0;
        }
        return n;
    }
    int rc = pdr__k8s_lines_feed(&r->lines, p, n, on_line, r);
    if (rc < 0) {
        snprintf(r->why, sizeof(r->why), "watch event longer than %u bytes (%s)", PDR_K8S_MAX_LINE,
                 pdr_strerror(rc));
        r->verdict = REQ_BROKEN;
    }
    return rc == 0 ? n : 0;
}

/* The "message" of a Status object in an error answer, for the log. */
static void status_message(const pdr_buf_t *b, char *out, size_t outlen)
{
    json_t *root = b->len > 0 ? json_loadb(b->p, b->len, 0, NULL) : NULL;
    const char *msg = pdr__k8s_jstr(root, "message");
    snprintf(out, outlen, "%s", msg != NULL ? msg : "(no Status message)");
    json_decref(root);
}

/* Runs one GET until it ends or the source stops. REQ_DONE means an HTTP answer ended cleanly (r->status
 * holds its code); REQ_GONE and REQ_BROKEN come from the watch stream; REQ_FAILED is a transport error. */
static int role_get(k8s_role_t *r, const char *url, int watching)
{
    k8s_source_t *src = r->src;
    char err[256];
    char *token = NULL;
    if (src->token_file != NULL) {
        token = read_small_file(src->token_file, K8S_MAX_TOKEN, err, sizeof(err));
        if (token == NULL && src->token_required) {
            snprintf(r->why, sizeof(r->why), "bearer token: %s", err);
            return REQ_FAILED;
        }
        for (char *t = token; t != NULL && *t != '\0'; t++) {
            if ((unsigned char)*t < 0x21 || (unsigned char)*t > 0x7e) {
                snprintf(r->why, sizeof(r->why), "bearer token in %s has a byte that may not be in a header",
                         src->token_file);
                free(token);
                return REQ_FAILED;
            }
        }
    }
    struct curl_slist *headers = curl_slist_append(NULL, "Accept: application/json");
    pdr_buf_t auth = {0};
    if (token != NULL && token[0] != '\0') {
        static const char prefix[] = "Authorization: Bearer ";
        if (pdr_buf_append(&auth, prefix, sizeof(prefix) - 1, K8S_MAX_TOKEN + 64) != 0 ||
            pdr_buf_append(&auth, token, strlen(token) + 1, K8S_MAX_TOKEN + 64) != 0) {
            pdr_buf_free(&auth);
        } else {
            struct curl_slist *h = curl_slist_append(headers, auth.p);
            if (h != NULL)
                headers = h;
            memset(auth.p, 0, auth.len);
        }
    }
    if (token != NULL) {
        memset(token, 0, strlen(token));
        free(token);
    }
    pdr_buf_free(&auth);

    r->easy = curl_easy_init();
    r->watching = watching;
    r->status = 0;
    r->body.len = 0;
    r->verdict = REQ_DONE;
    r->events = 0;
    r->why[0] = '\0';
    pdr__k8s_lines_reset(&r->lines);
    if (r->easy == NULL || headers == NULL) {
        snprintf(r->why, sizeof(r->why), "out of memory");
        curl_easy_cleanup(r->easy);
        r->easy = NULL;
        curl_slist_free_all(headers);
        return REQ_FAILED;
    }
    CURL *e = r->easy;
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)K8S_CONNECT_TIMEOUT_MS);
    curl_easy_setopt(e, CURLOPT_TIMEOUT,
                     (long)(watching ? src->watch_timeout_s + K8S_WATCH_MARGIN_S : K8S_LIST_TIMEOUT_S));
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING, "");
    if (src->ca_file != NULL)
        curl_easy_setopt(e, CURLOPT_CAINFO, src->ca_file);

    int result = REQ_FAILED;
    CURLMcode mc = curl_multi_add_handle(r->multi, e);
    while (mc == CURLM_OK) {
        int running = 0;
        mc = curl_multi_perform(r->multi, &running);
        if (mc != CURLM_OK || running == 0)
            break;
        if (stopping(src))
            break;
        mc = curl_multi_poll(r->multi, NULL, 0, 1000, NULL);
        if (stopping(src))
            break;
    }
    if (stopping(src)) {
        result = REQ_STOPPED;
    } else if (mc != CURLM_OK) {
        snprintf(r->why, sizeof(r->why), "curl multi: %s", curl_multi_strerror(mc));
    } else {
        CURLMsg *m;
        int left;
        CURLcode cc = CURLE_OK;
        while ((m = curl_multi_info_read(r->multi, &left)) != NULL)
            if (m->msg == CURLMSG_DONE && m->easy_handle == e)
                cc = m->data.result;
        if (r->status == 0)
            curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &r->status);
        if (r->verdict != REQ_DONE)
            result = r->verdict;
        else if (cc != CURLE_OK)
            snprintf(r->why, sizeof(r->why), "%s", curl_easy_strerror(cc));
        else
            result = REQ_DONE;
    }
    curl_multi_remove_handle(r->multi, e);
    curl_easy_cleanup(e);
    r->easy = NULL;
    curl_slist_free_all(headers);
    return result;
}

/* Waits ms or until the source stops; returns nonzero when it stops. */
static int role_wait(k8s_role_t *r, int ms)
{
    uint64_t end = pdr_now_ms() + (uint64_t)ms;
    while (!stopping(r->src)) {
        uint64_t now = pdr_now_ms();
        if (now >= end)
            return 0;
        curl_multi_poll(r->multi, NULL, 0, (int)(end - now), NULL);
    }
    return 1;
}

static char *role_url(k8s_role_t *r, int watching)
{
    k8s_source_t *src = r->src;
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

/* Logs an HTTP error answer. */
static void role_http_error(k8s_role_t *r, const char *what)
{
    char msg[256];
    status_message(&r->body, msg, sizeof(msg));
    if (r->status == 401 || r->status == 403)
        pdr_warn(
            "kubernetes discovery: %s: %s answered HTTP %ld (%s): %s. The service account needs get, list "
            "and watch on pods in namespace %s (a Role and a RoleBinding), and a valid token in %s",
            r->label, what, r->status, r->status == 401 ? "unauthorized" : "forbidden", msg, r->src->ns,
            r->src->token_file != NULL ? r->src->token_file : "(no token_file)");
    else
        pdr_warn("kubernetes discovery: %s: %s answered HTTP %ld: %s", r->label, what, r->status, msg);
}

/* LIST: returns 0 when the set was replaced from the API, -1 otherwise (logged). */
static int role_list(k8s_role_t *r)
{
    char *url = role_url(r, 0);
    if (url == NULL) {
        pdr_warn("kubernetes discovery: %s: out of memory", r->label);
        return -1;
    }
    int res = role_get(r, url, 0);
    free(url);
    if (res == REQ_STOPPED)
        return -1;
    if (res != REQ_DONE) {
        pdr_warn("kubernetes discovery: %s: listing pods at %s failed: %s", r->label, r->src->api_server,
                 r->why);
        return -1;
    }
    if (r->status != 200) {
        role_http_error(r, "the pod list");
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
enum { WATCH_AGAIN, WATCH_RELIST, WATCH_FAILED, WATCH_STOPPED };

static int role_watch(k8s_role_t *r)
{
    char *url = role_url(r, 1);
    if (url == NULL) {
        pdr_warn("kubernetes discovery: %s: out of memory", r->label);
        return WATCH_FAILED;
    }
    int res = role_get(r, url, 1);
    free(url);
    switch (res) {
    case REQ_STOPPED:
        return WATCH_STOPPED;
    case REQ_GONE:
        pdr_info("kubernetes discovery: %s: %s; listing again", r->label, r->why);
        return WATCH_RELIST;
    case REQ_BROKEN:
        pdr_warn("kubernetes discovery: %s: the watch broke: %s; listing again", r->label, r->why);
        return WATCH_FAILED;
    case REQ_FAILED:
        pdr_warn("kubernetes discovery: %s: watching pods at %s failed: %s", r->label, r->src->api_server,
                 r->why);
        return WATCH_FAILED;
    }
    if (r->status == 410) {
        char msg[256];
        status_message(&r->body, msg, sizeof(msg));
        pdr_info("kubernetes discovery: %s: watch answered HTTP 410 (%s); listing again", r->label, msg);
        return WATCH_RELIST;
    }
    if (r->status != 200) {
        role_http_error(r, "the pod watch");
        return WATCH_FAILED;
    }
    return WATCH_AGAIN; /* timeoutSeconds passed, or the server closed the stream: watch on from rv */
}

static void role_main(void *arg)
{
    k8s_role_t *r = arg;
    int backoff = 0; /* ms; 0 = the last attempt went well */
    int listed = 0, gone_in_a_row = 0;
    while (!stopping(r->src)) {
        int failed = 0;
        if (!listed) {
            listed = role_list(r) == 0;
            failed = !listed;
        } else {
            switch (role_watch(r)) {
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
            backoff = backoff == 0 ? K8S_BACKOFF_MIN_MS
                                   : (backoff * 2 > K8S_BACKOFF_MAX_MS ? K8S_BACKOFF_MAX_MS : backoff * 2);
            role_wait(r, backoff);
        }
    }
}

static void source_free(k8s_source_t *src)
{
    for (int i = 0; i < 2; i++) {
        k8s_role_t *r = &src->roles[i];
        if (r->multi != NULL)
            curl_multi_cleanup(r->multi);
        pdr__k8s_set_free(&r->set);
        pdr__k8s_lines_free(&r->lines);
        pdr_buf_free(&r->body);
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
    k8s_source_t *src = (k8s_source_t *)d;
    __atomic_store_n(&src->stopping, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < 2; i++)
        if (src->roles[i].thread_started)
            curl_multi_wakeup(src->roles[i].multi);
    for (int i = 0; i < 2; i++)
        if (src->roles[i].thread_started)
            uv_thread_join(&src->roles[i].thread);
    source_free(src);
}

/* Fills the connection settings, from the config or the in-cluster defaults. 0 or -1 with err. */
static int source_settings(k8s_source_t *src, const pdr_discovery_conf_t *d, char *err, size_t errlen)
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
        src->ns = read_small_file(K8S_SA_DIR "/namespace", 253, ignored, sizeof(ignored));
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
        token = K8S_SA_DIR "/token";
    if (token != NULL) {
        if ((src->token_file = strdup(token)) == NULL)
            goto nomem;
        char ferr[256];
        char *t = read_small_file(src->token_file, K8S_MAX_TOKEN, ferr, sizeof(ferr));
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
        ca = K8S_SA_DIR "/ca.crt";
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
    if (d->kubernetes.role[0].selector == NULL && d->kubernetes.role[1].selector == NULL)
        return NULL;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        snprintf(err, errlen, "kubernetes discovery: libcurl failed to initialize");
        return NULL;
    }
    k8s_source_t *src = calloc(1, sizeof(*src));
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
        k8s_role_t *r = &src->roles[i];
        r->src = src;
        r->role = (pdr_role_t)i;
        r->selector = d->kubernetes.role[i].selector;
        r->lines.limit = PDR_K8S_MAX_LINE;
        snprintf(r->label, sizeof(r->label), "%s %s", role_name(r->role), r->selector ? r->selector : "");
        pdr_k8s_role_conf_t rc = {
            .port = d->kubernetes.role[i].port,
            .bootstrap_port = i == PDR_ROLE_PREFILL ? d->kubernetes.role[i].bootstrap_port : -1,
            .use_annotation = i == PDR_ROLE_PREFILL,
            .annotation = d->kubernetes.bootstrap_port_annotation,
            .https = d->kubernetes.role[i].https,
        };
        pdr__k8s_set_init(&r->set, &rc, r->label);
        if (r->selector != NULL && (r->multi = curl_multi_init()) == NULL) {
            snprintf(err, errlen, "kubernetes discovery: out of memory");
            source_free(src);
            return NULL;
        }
    }
    for (int i = 0; i < 2; i++) {
        k8s_role_t *r = &src->roles[i];
        if (r->selector == NULL)
            continue;
        if (uv_thread_create(&r->thread, role_main, r) != 0) {
            snprintf(err, errlen, "kubernetes discovery: cannot start a thread");
            source_stop(&src->base);
            return NULL;
        }
        r->thread_started = 1;
    }
    pdr_info(
        "kubernetes discovery: watching pods at %s in namespace %s for pool %s (prefill: %s, decode: %s)",
        src->api_server, src->ns, src->pool, src->roles[0].selector ? src->roles[0].selector : "-",
        src->roles[1].selector ? src->roles[1].selector : "-");
    return &src->base;
}
