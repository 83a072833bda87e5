/*
 * Client-side limits that are h2o settings or h2o answers (any loop; set up once at start by server.c):
 * h2o's request and idle timeouts, the HTTP/2 concurrency h2o runs per connection, and the rewriting of
 * the plain-text 413 h2o 2.2.5 sends itself (a Content-Length above limits.max_body_bytes, a chunked or
 * HTTP/2 body that grows past it) into the OpenAI error shape. The per-connection timers, the HTTP/2
 * control-frame bucket and the connection caps are conn.c's. Calls nothing of server.c.
 */
#include <stdio.h>
#include <string.h>
#include "front.h"
#include "router.h"
#include "util.h"

/* h2o's own HTTP/1 request timeout (http1.req_timeout: from the start of a connection or the end of the
 * previous response until the request is read whole; at it h2o closes without an answer) is only a
 * backstop behind the router's own timers (conn.c), which answer 408: it covers what they do not follow
 * (a request pipelined behind another). */
#define H2O_BACKSTOP_EXTRA_MS 300000

/* h2o answers 413 itself above max_request_entity_size: limits.max_body_bytes plus one HTTP/2 frame
 * (16384 bytes, the SETTINGS_MAX_FRAME_SIZE h2o keeps), so that conn.c can hand h2o the DATA frame that
 * crosses the limit as the stream's last and the handler answers 413 (pdr__body_too_large). HTTP/1 bodies
 * of up to that many bytes are read whole and answered 413 by the handler; larger ones by h2o, rewritten
 * below. */
#define H2_FRAME_MAX 16384

void pdr__limits_h2o_config(h2o_globalconf_t *g, const pdr_config_t *c)
{
    g->max_request_entity_size = (size_t)c->limits.max_body_bytes + H2_FRAME_MAX;
    int m = c->timeouts.client_header_ms;
    if (c->timeouts.client_body_ms > m)
        m = c->timeouts.client_body_ms;
    if (c->timeouts.keepalive_idle_ms > m)
        m = c->timeouts.keepalive_idle_ms;
    g->http1.req_timeout = (uint64_t)m + H2O_BACKSTOP_EXTRA_MS;
    /* HTTP/2: a connection with no stream in progress is closed (GOAWAY) after it; a header block that
     * never ends opens no stream, so it is bounded by it too. */
    g->http2.idle_timeout = (uint64_t)c->timeouts.keepalive_idle_ms;
    g->http2.max_concurrent_requests_per_connection = (size_t)c->limits.h2_max_concurrent_streams;
}

/* ---- h2o's own 413 in the OpenAI shape ----
 *
 * h2o answers a body above max_request_entity_size itself, before any handler runs, with a text/plain
 * 413 ("Request Entity Too Large"): on HTTP/1 for a Content-Length above it or a chunked body that grows
 * past it (then it closes the connection, the rest of the body unread), on HTTP/2 for a content-length
 * above it or DATA frames that pass it (the stream is answered, the connection stays). Such answers take
 * the host's fallback path, whose filter chain this filter is on: it replaces the body and the type. */

static const char too_large_body[] =
    "{\"error\":{\"message\":\"the request body exceeds limits.max_body_bytes\",\"type\":"
    "\"invalid_request_error\",\"code\":413}}";

typedef struct too_large_ostream {
    h2o_ostream_t super;
    int sent;
} too_large_ostream_t;

static void too_large_do_send(h2o_ostream_t *self, h2o_req_t *req, h2o_iovec_t *bufs, size_t bufcnt,
                              h2o_send_state_t state)
{
    too_large_ostream_t *o = (too_large_ostream_t *)self;
    (void)bufs;
    (void)bufcnt;
    if (o->sent || h2o_send_state_is_in_progress(state)) {
        /* h2o sends its error body in one final call; anything else passes on empty */
        h2o_ostream_send_next(self, req, NULL, 0, state);
        return;
    }
    o->sent = 1;
    h2o_iovec_t b = h2o_iovec_init(too_large_body, sizeof(too_large_body) - 1);
    h2o_ostream_send_next(self, req, &b, 1, state);
}

static int is_plain_text(h2o_req_t *req)
{
    ssize_t i = h2o_find_header(&req->res.headers, H2O_TOKEN_CONTENT_TYPE, -1);
    return i >= 0 && req->res.headers.entries[i].value.len >= 10 &&
           memcmp(req->res.headers.entries[i].value.base, "text/plain", 10) == 0;
}

static void on_setup_too_large(h2o_filter_t *self, h2o_req_t *req, h2o_ostream_t **slot)
{
    (void)self;
    if (req->res.status == 413 && is_plain_text(req)) {
        pdr_thread_t *t = H2O_STRUCT_FROM_MEMBER(pdr_thread_t, h2o_ctx, req->conn->ctx);
        t->m.body_too_large_total++;
        h2o_set_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, H2O_STRLIT("application/json"),
                       1);
        req->res.content_length = sizeof(too_large_body) - 1;
        req->res.reason = pdr_http_reason(413);
        too_large_ostream_t *o = (too_large_ostream_t *)h2o_add_ostream(req, sizeof(*o), slot);
        o->super.do_send = too_large_do_send;
        o->sent = 0;
        slot = &o->super.next;
    }
    h2o_setup_next_ostream(req, slot);
}

void pdr__limits_register(h2o_hostconf_t *host)
{
    h2o_filter_t *f = h2o_create_filter(&host->fallback_path, sizeof(*f));
    f->on_setup_ostream = on_setup_too_large;
}

int pdr__body_too_large(pdr_thread_t *t, h2o_req_t *req)
{
    /* HTTP/2: conn.c's guard ends a stream at the DATA frame that takes it past the limit, so its body
     * here is above the limit by at most that frame. */
    if ((int64_t)req->entity.len <= t->config->limits.max_body_bytes)
        return 0;
    t->m.body_too_large_total++;
    return 1;
}
