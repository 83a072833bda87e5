/*
 * Answers every listener sends itself (any loop): the OpenAI error shape
 * {"error":{"message","type","code"}}, a body of a given type, a JSON object. Uses h2o and jansson only:
 * every folder may answer with it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "err.h"
#include "reply.h"
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
