/*
 * Answers every listener sends itself (any loop): the OpenAI error shape
 * {"error":{"message","type","code"}}, a body of a given type, a JSON object, and GET /metrics (the data,
 * admin and metrics ports). Calls nothing of server.c, pd/ or admin.c.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "err.h"
#include "router.h"
#include "util.h"

void pdr_json_escape(char *out, size_t cap, const char *s)
{
    size_t o = 0;
    for (; *s && o + 7 < cap; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') {
            out[o++] = '\\';
            out[o++] = (char)ch;
        } else if (ch < 0x20) {
            o += (size_t)snprintf(out + o, cap - o, "\\u%04x", ch);
        } else {
            out[o++] = (char)ch;
        }
    }
    out[o] = '\0';
}

void pdr_send_error(h2o_req_t *req, int status, const char *type, const char *msg, int retry_after_s)
{
    char esc[512], body[768];
    pdr_json_escape(esc, sizeof(esc), msg);
    int n = snprintf(body, sizeof(body), "{\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"code\":%d}}", esc,
                     type, status);
    req->res.status = status;
    req->res.reason = pdr_http_reason(status);
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
                   H2O_STRLIT("application/json"));
    if (retry_after_s > 0) {
        char ra[16];
        int k = snprintf(ra, sizeof(ra), "%d", retry_after_s);
        h2o_iovec_t v = h2o_strdup(&req->pool, ra, (size_t)k);
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_RETRY_AFTER, NULL, v.base, v.len);
    }
    req->res.content_length = (size_t)n;
    h2o_send_inline(req, body, (size_t)n);
}

void pdr_send_body(h2o_req_t *req, int status, const char *ctype, const char *body, size_t len)
{
    req->res.status = status;
    req->res.reason = pdr_http_reason(status);
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, ctype, strlen(ctype));
    req->res.content_length = len;
    h2o_send_inline(req, body, len);
}

int pdr_send_json(h2o_req_t *req, int status, json_t *o)
{
    char *s = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (s == NULL) {
        pdr_send_error(req, 503, "service_unavailable", "out of memory", 1);
        return 503;
    }
    pdr_send_body(req, status, "application/json", s, strlen(s));
    free(s);
    return status;
}

void pdr__send_metrics(pdr_thread_t *t, h2o_req_t *req)
{
    pdr_router_t *r = t->r;
    pdr_metrics_count_request(&t->m, PDR_MR_METRICS, 200, 0, -1);
    size_t len = 0;
    const pdr_metrics_t *ms[PDR_MAX_THREADS_RENDER];
    size_t n = 0;
    for (int i = 0; i < r->n_threads && n < PDR_MAX_THREADS_RENDER; i++)
        ms[n++] = &r->threads[i].m;
    pdr_metrics_extra_t x = {
        .inflight = __atomic_load_n(&r->inflight, __ATOMIC_RELAXED),
        .max_inflight = t->config->limits.max_inflight,
        .body_bytes_held = __atomic_load_n(&r->body_bytes_held, __ATOMIC_RELAXED),
        .reloads_ok = __atomic_load_n(&r->reloads_ok, __ATOMIC_RELAXED),
        .reloads_failed = __atomic_load_n(&r->reloads_failed, __ATOMIC_RELAXED),
        .router = r,
    };
    int err = 0;
    char *text = pdr_metrics_render(&r->pool, ms, n, &x, &len, &err);
    if (text == NULL && err == PDR_ETOOBIG) {
        pdr_warn("the /metrics page would pass its ceiling of %zu MiB (PDR_METRICS_PAGE_MAX): not served",
                 PDR_METRICS_PAGE_MAX >> 20);
        pdr_send_error(req, 500, "internal_error",
                       "the metrics page exceeds its ceiling (PDR_METRICS_PAGE_MAX)", 0);
        return;
    }
    if (text == NULL) {
        pdr_send_error(req, 503, "service_unavailable", "out of memory", 1);
        return;
    }
    pdr_send_body(req, 200, "text/plain; version=0.0.4", text, len);
    free(text);
}
