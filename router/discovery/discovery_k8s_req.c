/*
 * The one request of the Kubernetes source (discovery_k8s_internal.h): a GET of a list or a watch run on
 * the watcher's own curl multi handle until it ends, the source stops or (a pod watcher of an
 * InferencePool) the pool changes, with the bearer token re-read for each request. Runs on the calling
 * watcher's thread; touches only that watcher and the source's immutable settings.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "discovery_k8s_internal.h"
#include "err.h"
#include "util.h"

#define K8S_CONNECT_TIMEOUT_MS 5000
#define K8S_LIST_TIMEOUT_S 60
/* A watch may sit idle for its whole timeoutSeconds; past that plus this margin the connection is dead. */
#define K8S_WATCH_MARGIN_S 30

int pdr__k8s_stopping(const pdr_k8s_source_t *src)
{
    return __atomic_load_n(&src->stopping, __ATOMIC_ACQUIRE);
}

/* The InferencePool moved on since this pod watcher took its selector. */
static int pool_moved(const pdr_k8s_watcher_t *w)
{
    const pdr_k8s_pool_state_t *p = w->src->infpool;
    return p != NULL && w != &p->w && __atomic_load_n(&p->gen, __ATOMIC_ACQUIRE) != w->pool_gen;
}

int pdr__k8s_backoff(int backoff)
{
    if (backoff == 0)
        return PDR_K8S_BACKOFF_MIN_MS;
    return backoff * 2 > PDR_K8S_BACKOFF_MAX_MS ? PDR_K8S_BACKOFF_MAX_MS : backoff * 2;
}

char *pdr__k8s_read_small_file(const char *path, size_t limit, char *err, size_t errlen)
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

static size_t on_body(char *p, size_t size, size_t nmemb, void *ud)
{
    pdr_k8s_watcher_t *r = ud;
    size_t n = size * nmemb;
    if (pdr__k8s_stopping(r->src))
        return 0;
    if (r->status == 0)
        curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &r->status);
    if (r->status != 200) {
        /* Keep the start of an error answer for the message; drop the rest. */
        size_t room = PDR_K8S_MAX_ERROR_BODY - r->body.len;
        if (room > 0 && pdr_buf_append(&r->body, p, n < room ? n : room, PDR_K8S_MAX_ERROR_BODY) != 0)
            return 0;
        return n;
    }
    if (!r->watching) {
        int rc = pdr_buf_append(&r->body, p, n, PDR_K8S_MAX_LIST);
        if (rc != 0) {
            snprintf(r->why, sizeof(r->why), "the list is larger than %u bytes", PDR_K8S_MAX_LIST);
            r->verdict = PDR_K8S_REQ_BROKEN;
            return 0;
        }
        return n;
    }
    int rc = pdr__k8s_lines_feed(&r->lines, p, n, r->line_cb, r);
    if (rc < 0) {
        snprintf(r->why, sizeof(r->why), "watch event longer than %u bytes (%s)", PDR_K8S_MAX_LINE,
                 pdr_strerror(rc));
        r->verdict = PDR_K8S_REQ_BROKEN;
    }
    return rc == 0 ? n : 0;
}

void pdr__k8s_status_message(const pdr_buf_t *b, char *out, size_t outlen)
{
    json_t *root = b->len > 0 ? json_loadb(b->p, b->len, 0, NULL) : NULL;
    const char *msg = pdr__k8s_jstr(root, "message");
    snprintf(out, outlen, "%s", msg != NULL ? msg : "(no Status message)");
    json_decref(root);
}

/* Runs one GET until it ends or the source stops. REQ_DONE means an HTTP answer ended cleanly (r->status
 * holds its code); REQ_GONE and PDR_K8S_REQ_BROKEN come from the watch stream; REQ_FAILED is a transport
 * error. */
int pdr__k8s_get(pdr_k8s_watcher_t *r, const char *url, int watching)
{
    pdr_k8s_source_t *src = r->src;
    char err[256];
    char *token = NULL;
    if (src->token_file != NULL) {
        token = pdr__k8s_read_small_file(src->token_file, PDR_K8S_MAX_TOKEN, err, sizeof(err));
        if (token == NULL && src->token_required) {
            snprintf(r->why, sizeof(r->why), "bearer token: %s", err);
            return PDR_K8S_REQ_FAILED;
        }
        for (char *t = token; t != NULL && *t != '\0'; t++) {
            if ((unsigned char)*t < 0x21 || (unsigned char)*t > 0x7e) {
                snprintf(r->why, sizeof(r->why), "bearer token in %s has a byte that may not be in a header",
                         src->token_file);
                free(token);
                return PDR_K8S_REQ_FAILED;
            }
        }
    }
    struct curl_slist *headers = curl_slist_append(NULL, "Accept: application/json");
    pdr_buf_t auth = {0};
    if (token != NULL && token[0] != '\0') {
        static const char prefix[] = "Authorization: Bearer ";
        if (pdr_buf_append(&auth, prefix, sizeof(prefix) - 1, PDR_K8S_MAX_TOKEN + 64) != 0 ||
            pdr_buf_append(&auth, token, strlen(token) + 1, PDR_K8S_MAX_TOKEN + 64) != 0) {
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
    r->verdict = PDR_K8S_REQ_DONE;
    r->events = 0;
    r->why[0] = '\0';
    pdr__k8s_lines_reset(&r->lines);
    if (r->easy == NULL || headers == NULL) {
        snprintf(r->why, sizeof(r->why), "out of memory");
        curl_easy_cleanup(r->easy);
        r->easy = NULL;
        curl_slist_free_all(headers);
        return PDR_K8S_REQ_FAILED;
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

    int result = PDR_K8S_REQ_FAILED;
    CURLMcode mc = curl_multi_add_handle(r->multi, e);
    while (mc == CURLM_OK) {
        int running = 0;
        mc = curl_multi_perform(r->multi, &running);
        if (mc != CURLM_OK || running == 0)
            break;
        if (pdr__k8s_stopping(src) || pool_moved(r))
            break;
        mc = curl_multi_poll(r->multi, NULL, 0, 1000, NULL);
        if (pdr__k8s_stopping(src) || pool_moved(r))
            break;
    }
    if (pdr__k8s_stopping(src)) {
        result = PDR_K8S_REQ_STOPPED;
    } else if (pool_moved(r)) {
        result = PDR_K8S_REQ_RESTART;
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
        if (r->verdict != PDR_K8S_REQ_DONE)
            result = r->verdict;
        else if (cc != CURLE_OK)
            snprintf(r->why, sizeof(r->why), "%s", curl_easy_strerror(cc));
        else
            result = PDR_K8S_REQ_DONE;
    }
    curl_multi_remove_handle(r->multi, e);
    curl_easy_cleanup(e);
    r->easy = NULL;
    curl_slist_free_all(headers);
    return result;
}

int pdr__k8s_wait(pdr_k8s_watcher_t *r, int ms)
{
    uint64_t end = pdr_now_ms() + (uint64_t)ms;
    while (!pdr__k8s_stopping(r->src)) {
        uint64_t now = pdr_now_ms();
        if (now >= end)
            return 0;
        curl_multi_poll(r->multi, NULL, 0, (int)(end - now), NULL);
    }
    return 1;
}

void pdr__k8s_http_error(pdr_k8s_watcher_t *r, const char *what)
{
    char msg[256];
    pdr__k8s_status_message(&r->body, msg, sizeof(msg));
    if (r->status == 401 || r->status == 403)
        pdr_warn(
            "kubernetes discovery: %s: %s answered HTTP %ld (%s): %s. The service account needs get, list "
            "and watch on %s in namespace %s (a Role and a RoleBinding), and a valid token in %s",
            r->label, what, r->status, r->status == 401 ? "unauthorized" : "forbidden", msg, r->resource,
            r->src->ns, r->src->token_file != NULL ? r->src->token_file : "(no token_file)");
    else
        pdr_warn("kubernetes discovery: %s: %s answered HTTP %ld: %s", r->label, what, r->status, msg);
}
