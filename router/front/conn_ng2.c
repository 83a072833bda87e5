/*
 * Client connections over HTTP/2 served by libnghttp2 instead of h2o's HTTP/2 (h2_nghttp2: true; the
 * connection's own loop). What it takes: a plain connection that opens with the HTTP/2 preface (prior
 * knowledge) and a TLS connection whose ALPN chose h2; Upgrade: h2c stays h2o's. The frames, HPACK, flow
 * control, stream states and the protocol's flood limits are nghttp2's (the settings and rate limits are
 * set from limits.* below); each stream becomes an h2o_req_t on a connection of this file's own
 * (h2o_conn_t with its callbacks), handed to h2o_process_request, so that the route table and every
 * handler run as they do under h2o. The response comes back through the request's final ostream:
 * do_send queues the handler's buffers, nghttp2's data provider copies them into DATA frames as the
 * peer's windows allow, and the handler is asked for more (h2o_proceed_response) only once those frames
 * were written to the socket (the handler's back-pressure). The socket is h2o's (h2o_socket_t over the
 * libuv handle), so TLS and the connection's close are as for every other connection.
 *
 * Request bodies are read whole into the request's entity, up to limits.max_body_bytes plus one byte:
 * past it the request is handed on at once, and the handler answers 413 (pdr__body_too_large); the
 * rest of its DATA is dropped (its window is still given back).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "conn_ng2_internal.h"
#include "err.h"
#include "front.h"
#include "ratelog.h"
#include "router.h"
#include "util.h"

static void ng2_flush(ng2_conn_t *c);
static void ng2_close(ng2_conn_t *c);
static void ostr_do_send(h2o_ostream_t *self, h2o_req_t *req, h2o_iovec_t *bufs, size_t bufcnt,
                         h2o_send_state_t state);

static void request_flush(ng2_conn_t *c)
{
    if (!c->writing && !h2o_timeout_is_linked(&c->flush_entry))
        h2o_timeout_link(c->super.ctx->loop, &c->super.ctx->zero_timeout, &c->flush_entry);
}

/* ---- the h2o connection the requests run on ---- */

#define conn_of(conn) ((ng2_conn_t *)(conn))

static socklen_t get_sockname(h2o_conn_t *conn, struct sockaddr *sa)
{
    return h2o_socket_getsockname(conn_of(conn)->sock, sa);
}

static socklen_t get_peername(h2o_conn_t *conn, struct sockaddr *sa)
{
    return h2o_socket_getpeername(conn_of(conn)->sock, sa);
}

static h2o_socket_t *get_socket(h2o_conn_t *conn)
{
    return conn_of(conn)->sock;
}

static const h2o_conn_callbacks_t ng2_callbacks = {
    .get_sockname = get_sockname,
    .get_peername = get_peername,
    .get_socket = get_socket,
};

/* ---- streams ---- */

static ng2_stream_t *stream_open(ng2_conn_t *c, int32_t id)
{
    ng2_stream_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->conn = c;
    s->id = id;
    h2o_init_request(&s->req, &c->super, NULL);
    s->req.version = 0x200;
    s->ostr.do_send = ostr_do_send;
    s->req._ostr_top = &s->ostr;
    pdr_dlink_push(&c->streams, &s->link);
    h2o_timeout_unlink(&c->idle_entry);
    return s;
}

/* The stream is gone from nghttp2 (answered, reset by either side, or the connection ends): the
 * request's memory goes, and a handler still running is stopped (h2o_dispose_request calls the
 * generator's stop). */
static void stream_dispose(ng2_stream_t *s)
{
    ng2_conn_t *c = s->conn;
    pdr_dlink_unlink(&s->link);
    pdr_dlink_unlink(&s->plink);
    if (s->body != NULL)
        h2o_buffer_dispose(&s->body);
    pdr_dqueue_unlink(&c->waiting, &s->wlink);
    if (s->running)
        c->running--;
    h2o_dispose_request(&s->req);
    free(s);
    if (c->streams == NULL && !c->closing && c->super.ctx->http2.idle_timeout.timeout != 0)
        h2o_timeout_link(c->super.ctx->loop, &c->super.ctx->http2.idle_timeout, &c->idle_entry);
    ng2_stream_t *next;
    while (!c->dying && c->running < c->max_running &&
           (next = PDR_DLINK_ENTRY(pdr_dqueue_pop(&c->waiting), ng2_stream_t, wlink)) != NULL) {
        next->running = 1;
        c->running++;
        h2o_process_request(&next->req);
    }
}

static void stream_process(ng2_stream_t *s)
{
    if (s->processed)
        return;
    s->processed = 1;
    if (s->req.input.scheme == NULL)
        s->req.input.scheme = s->conn->cc->tls ? &H2O_URL_SCHEME_HTTPS : &H2O_URL_SCHEME_HTTP;
    if (s->req.input.authority.base == NULL) {
        ssize_t i = h2o_find_header(&s->req.headers, H2O_TOKEN_HOST, -1);
        s->req.input.authority = i >= 0 ? s->req.headers.entries[i].value : h2o_iovec_init(H2O_STRLIT(""));
    }
    if (s->body != NULL) {
        s->req.entity = h2o_iovec_init(s->body->bytes, s->body->size);
        s->req.timestamps.request_body_begin_at = s->req.timestamps.request_begin_at;
    }
    if (s->conn->running >= s->conn->max_running) { /* limits.h2_max_concurrent_streams */
        pdr_dqueue_append(&s->conn->waiting, &s->wlink);
        return;
    }
    s->running = 1;
    s->conn->running++;
    h2o_process_request(&s->req);
}

/* nghttp2's data provider: copies what do_send queued into the DATA frame being built. */
static ssize_t data_read(nghttp2_session *ng, int32_t id, uint8_t *buf, size_t length, uint32_t *flags,
                         nghttp2_data_source *src, void *user)
{
    (void)ng, (void)id, (void)user;
    ng2_stream_t *s = src->ptr;
    size_t n = 0;
    while (n < length && s->bi < s->nbufs) {
        h2o_iovec_t *b = &s->bufs[s->bi];
        size_t k = b->len - s->boff < length - n ? b->len - s->boff : length - n;
        memcpy(buf + n, b->base + s->boff, k);
        n += k;
        s->boff += k;
        if (s->boff == b->len)
            s->bi++, s->boff = 0;
    }
    if (s->bi < s->nbufs)
        return (ssize_t)n;
    if (s->state == H2O_SEND_STATE_FINAL) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        return (ssize_t)n;
    }
    if (s->state == H2O_SEND_STATE_ERROR) /* the handler failed mid-answer: the stream is reset */
        return n > 0 ? (ssize_t)n : NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    /* All of it is in frames: the handler is asked for more once those are written. */
    if (!pdr_dlink_linked(&s->plink))
        pdr_dlink_push(&s->conn->proceed, &s->plink);
    if (n > 0)
        return (ssize_t)n;
    s->deferred = 1;
    return NGHTTP2_ERR_DEFERRED;
}

static void submit_headers(ng2_stream_t *s)
{
    h2o_req_t *req = &s->req;
    nghttp2_nv nv[NG2_MAX_RES_HEADERS + 4];
    size_t n = 0;
    char status[8];
    snprintf(status, sizeof(status), "%03u", (unsigned)req->res.status % 1000u);
    nv[n++] = (nghttp2_nv){(uint8_t *)":status", (uint8_t *)status, 7, 3, NGHTTP2_NV_FLAG_NONE};
    h2o_timestamp_t ts;
    h2o_get_timestamp(s->conn->super.ctx, &req->pool, &ts);
    nv[n++] = (nghttp2_nv){(uint8_t *)"date", (uint8_t *)ts.str->rfc1123, 4, strlen(ts.str->rfc1123),
                           NGHTTP2_NV_FLAG_NONE};
    h2o_iovec_t server = s->conn->super.ctx->globalconf->server_name;
    if (server.len > 0)
        nv[n++] =
            (nghttp2_nv){(uint8_t *)"server", (uint8_t *)server.base, 6, server.len, NGHTTP2_NV_FLAG_NONE};
    char clen[24];
    if (req->res.content_length != SIZE_MAX) {
        snprintf(clen, sizeof(clen), "%zu", req->res.content_length);
        nv[n++] = (nghttp2_nv){(uint8_t *)"content-length", (uint8_t *)clen, 14, strlen(clen),
                               NGHTTP2_NV_FLAG_NONE};
    }
    size_t dropped = 0;
    for (size_t i = 0; i < req->res.headers.size; i++) {
        const h2o_header_t *h = &req->res.headers.entries[i];
        const h2o_token_t *tok = h2o_lookup_token(h->name->base, h->name->len);
        /* connection-specific fields do not exist in HTTP/2 (RFC 9113 section 8.2.2) */
        if (tok == H2O_TOKEN_CONNECTION || tok == H2O_TOKEN_TRANSFER_ENCODING ||
            tok == H2O_TOKEN_KEEP_ALIVE || tok == H2O_TOKEN_UPGRADE || tok == H2O_TOKEN_CONTENT_LENGTH ||
            tok == H2O_TOKEN_SERVER || tok == H2O_TOKEN_DATE)
            continue;
        if (n == sizeof(nv) / sizeof(nv[0])) {
            dropped++;
            continue;
        }
        nv[n++] = (nghttp2_nv){(uint8_t *)h->name->base, (uint8_t *)h->value.base, h->name->len, h->value.len,
                               NGHTTP2_NV_FLAG_NONE};
    }
    if (dropped > 0)
        pdr_warn("HTTP/2 (nghttp2): %zu response header fields past %d dropped", dropped,
                 NG2_MAX_RES_HEADERS);
    nghttp2_data_provider dp = {.source.ptr = s, .read_callback = data_read};
    int no_body = s->state == H2O_SEND_STATE_FINAL && s->nbufs == 0;
    int rv = nghttp2_submit_response(s->conn->ng, s->id, nv, n, no_body ? NULL : &dp);
    if (rv != 0)
        nghttp2_submit_rst_stream(s->conn->ng, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
    s->submitted = 1;
}

static void ostr_do_send(h2o_ostream_t *self, h2o_req_t *req, h2o_iovec_t *bufs, size_t bufcnt,
                         h2o_send_state_t state)
{
    ng2_stream_t *s = (ng2_stream_t *)(void *)((char *)self - offsetof(ng2_stream_t, ostr));
    (void)req;
    size_t live = 0;
    for (size_t i = 0; i < bufcnt; i++)
        live += bufs[i].len != 0;
    s->bufs = NULL;
    s->nbufs = s->bi = s->boff = 0;
    if (live > 0) {
        s->bufs = h2o_mem_alloc_pool(&s->req.pool, sizeof(*bufs) * live);
        for (size_t i = 0; i < bufcnt; i++)
            if (bufs[i].len != 0)
                s->bufs[s->nbufs++] = bufs[i];
    }
    s->state = state;
    if (!s->submitted) {
        submit_headers(s);
    } else if (s->deferred) {
        s->deferred = 0;
        nghttp2_session_resume_data(s->conn->ng, s->id);
    }
    request_flush(s->conn);
}

/* ---- nghttp2's callbacks ---- */

static int on_begin_headers(nghttp2_session *ng, const nghttp2_frame *f, void *user)
{
    ng2_conn_t *c = user;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    ng2_stream_t *s = stream_open(c, f->hd.stream_id);
    if (s == NULL)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    nghttp2_session_set_stream_user_data(ng, f->hd.stream_id, s);
    return 0;
}

static int on_header(nghttp2_session *ng, const nghttp2_frame *f, const uint8_t *name, size_t namelen,
                     const uint8_t *value, size_t valuelen, uint8_t flags, void *user)
{
    (void)flags, (void)user;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0; /* trailers: nothing of the router reads them */
    ng2_stream_t *s = nghttp2_session_get_stream_user_data(ng, f->hd.stream_id);
    if (s == NULL)
        return 0;
    h2o_mem_pool_t *pool = &s->req.pool;
    h2o_iovec_t v = h2o_strdup(pool, (const char *)value, valuelen);
    if (namelen > 0 && name[0] == ':') { /* nghttp2 has checked the pseudo-header set (RFC 9113 8.3.1) */
        if (namelen == 7 && memcmp(name, ":method", 7) == 0)
            s->req.input.method = v;
        else if (namelen == 5 && memcmp(name, ":path", 5) == 0)
            s->req.input.path = v;
        else if (namelen == 10 && memcmp(name, ":authority", 10) == 0)
            s->req.input.authority = v;
        else if (namelen == 7 && memcmp(name, ":scheme", 7) == 0)
            s->req.input.scheme = valuelen == 5 && memcmp(value, "https", 5) == 0 ? &H2O_URL_SCHEME_HTTPS
                                                                                  : &H2O_URL_SCHEME_HTTP;
        return 0;
    }
    const h2o_token_t *tok = h2o_lookup_token((const char *)name, namelen);
    if (tok != NULL) {
        h2o_add_header(pool, &s->req.headers, tok, NULL, v.base, v.len);
    } else {
        h2o_iovec_t nm = h2o_strdup(pool, (const char *)name, namelen);
        h2o_add_header_by_str(pool, &s->req.headers, nm.base, nm.len, 0, NULL, v.base, v.len);
    }
    return 0;
}

static int on_data_chunk(nghttp2_session *ng, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
                         void *user)
{
    (void)flags;
    ng2_conn_t *c = user;
    ng2_stream_t *s = nghttp2_session_get_stream_user_data(ng, id);
    if (s == NULL || s->too_big || s->processed)
        return 0;
    size_t held = s->body != NULL ? s->body->size : 0;
    size_t take = len;
    if (held + len > c->max_body + 1) { /* one byte past the limit tells the handler to answer 413 */
        take = c->max_body + 1 - held;
        s->too_big = 1;
    }
    if (s->body == NULL)
        h2o_buffer_init(&s->body, &h2o_socket_buffer_prototype);
    h2o_iovec_t room = h2o_buffer_reserve(&s->body, take > 0 ? take : 1);
    if (room.base == NULL)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    memcpy(room.base, data, take);
    s->body->size += take;
    if (s->too_big)
        stream_process(s);
    return 0;
}

static int on_frame_recv(nghttp2_session *ng, const nghttp2_frame *f, void *user)
{
    (void)user;
    if ((f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA) ||
        !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    ng2_stream_t *s = nghttp2_session_get_stream_user_data(ng, f->hd.stream_id);
    if (s != NULL)
        stream_process(s);
    return 0;
}

static int on_stream_close(nghttp2_session *ng, int32_t id, uint32_t code, void *user)
{
    ng2_stream_t *s = nghttp2_session_get_stream_user_data(ng, id);
    (void)code, (void)user;
    if (s == NULL)
        return 0;
    nghttp2_session_set_stream_user_data(ng, id, NULL);
    stream_dispose(s); /* a handler still running counts the reset (pdr__note_client_reset) */
    return 0;
}

/* ---- the socket ---- */

static void on_write_done(h2o_socket_t *sock, const char *err)
{
    ng2_conn_t *c = sock->data;
    c->writing = 0;
    h2o_buffer_consume(&c->out, c->out->size);
    if (err != NULL) {
        ng2_close(c);
        return;
    }
    /* The handlers whose buffers are all written may give more (this may queue new frames). */
    pdr_dlink_t *ready = NULL;
    pdr_dlink_move(&ready, &c->proceed);
    ng2_stream_t *s;
    while ((s = PDR_DLINK_ENTRY(pdr_dlink_pop(&ready), ng2_stream_t, plink)) != NULL)
        if (s->req._generator != NULL && s->bi == s->nbufs)
            h2o_proceed_response(&s->req);
    ng2_flush(c);
}

/* Writes what nghttp2 has queued, one write at a time; at the end of the session closes the connection
 * once the last frames (a GOAWAY) are written. */
static void ng2_flush(ng2_conn_t *c)
{
    h2o_timeout_unlink(&c->flush_entry);
    if (c->writing)
        return;
    if (c->flooded == 1 && c->out->size == 0) {
        /* nghttp2 ends the session on a flood without a GOAWAY, and may not be asked for frames again */
        c->flooded = 2;
        char f[9 + 8 + 160];
        size_t g = pdr__ng2_flood_goaway(c, f, sizeof(f));
        h2o_iovec_t room = h2o_buffer_reserve(&c->out, g);
        if (room.base != NULL && g > 0) {
            memcpy(room.base, f, g);
            c->out->size += g;
        }
    }
    while (!c->flooded && c->out->size < NG2_WRITE_MAX) {
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(c->ng, &data);
        if (n < 0) {
            c->closing = 1;
            break;
        }
        if (n == 0)
            break;
        h2o_iovec_t room = h2o_buffer_reserve(&c->out, (size_t)n);
        if (room.base == NULL) {
            c->closing = 1;
            break;
        }
        memcpy(room.base, data, (size_t)n);
        c->out->size += (size_t)n;
    }
    if (c->out->size > 0) {
        h2o_iovec_t b = h2o_iovec_init(c->out->bytes, c->out->size);
        c->writing = 1;
        h2o_socket_write(c->sock, &b, 1, on_write_done);
        return;
    }
    if (c->closing || (!nghttp2_session_want_read(c->ng) && !nghttp2_session_want_write(c->ng)))
        ng2_close(c);
}

static void on_flush_entry(h2o_timeout_entry_t *e)
{
    ng2_flush((ng2_conn_t *)(void *)((char *)e - offsetof(ng2_conn_t, flush_entry)));
}

static void on_idle_entry(h2o_timeout_entry_t *e)
{
    ng2_conn_t *c = (ng2_conn_t *)(void *)((char *)e - offsetof(ng2_conn_t, idle_entry));
    nghttp2_session_terminate_session(c->ng, NGHTTP2_NO_ERROR);
    c->closing = 1;
    ng2_flush(c);
}

static void on_read(h2o_socket_t *sock, const char *err)
{
    ng2_conn_t *c = sock->data;
    if (err != NULL) {
        pdr__conn_tls_read_failed(c->cc, err);
        ng2_close(c);
        return;
    }
    if (c->closing) { /* a GOAWAY is being written: what comes after it is not read */
        h2o_buffer_consume(&sock->input, sock->input->size);
        return;
    }
    ssize_t n = nghttp2_session_mem_recv(c->ng, (const uint8_t *)sock->input->bytes, sock->input->size);
    if (n < 0) {
        /* A connection error: nghttp2 has queued its GOAWAY where the error has one (a bad preface has
         * none); the connection ends once it is written. */
        if (!c->flooded && (n == NGHTTP2_ERR_FLOODED || n == NGHTTP2_ERR_TOO_MANY_CONTINUATIONS)) {
            c->flooded = 1;
            c->flood_error = (int)n;
        }
        if (c->flood_error == NGHTTP2_ERR_TOO_MANY_CONTINUATIONS)
            c->cc->t->m.h2_header_block_too_large_total++;
        else if (c->flooded)
            c->cc->t->m.h2_control_floods_total++;
        c->closing = 1;
        h2o_buffer_consume(&sock->input, sock->input->size);
        h2o_socket_read_stop(sock);
    } else {
        h2o_buffer_consume(&sock->input, (size_t)n);
    }
    ng2_flush(c);
}

static void ng2_close(ng2_conn_t *c)
{
    c->dying = 1;
    while (c->streams != NULL) {
        ng2_stream_t *s = PDR_DLINK_ITEM(c->streams, ng2_stream_t, link);
        nghttp2_session_set_stream_user_data(c->ng, s->id, NULL);
        stream_dispose(s);
    }
    h2o_timeout_unlink(&c->flush_entry);
    h2o_timeout_unlink(&c->idle_entry);
    pdr_dlink_unlink(&c->link);
    nghttp2_session_del(c->ng);
    h2o_buffer_dispose(&c->out);
    h2o_socket_t *sock = c->sock;
    sock->data = NULL;
    free(c);
    h2o_socket_close(sock);
}

/* ---- the session's limits ---- */

static nghttp2_session_callbacks *ng2_cbs;
int pdr__conn_ng2_init(void)
{
    if (ng2_cbs != NULL)
        return 0;
    if (nghttp2_session_callbacks_new(&ng2_cbs) != 0)
        return PDR_ENOMEM;
    nghttp2_session_callbacks_set_on_begin_frame_callback(ng2_cbs, pdr__ng2_on_begin_frame);
    nghttp2_session_callbacks_set_on_extension_chunk_recv_callback(ng2_cbs, pdr__ng2_on_extension_chunk);
    nghttp2_session_callbacks_set_unpack_extension_callback(ng2_cbs, pdr__ng2_ignore_extension);
    nghttp2_session_callbacks_set_on_begin_headers_callback(ng2_cbs, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(ng2_cbs, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(ng2_cbs, on_data_chunk);
    nghttp2_session_callbacks_set_on_frame_recv_callback(ng2_cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_stream_close_callback(ng2_cbs, on_stream_close);
    return 0;
}

/* Takes a connection whose input starts with (a part of) the HTTP/2 preface, or a TLS one whose ALPN
 * chose h2: from here its socket's reads and writes are this file's. Returns 0, or PDR_ENOMEM with the
 * socket closed. */
int pdr__conn_ng2_accept(client_conn_t *cc, h2o_socket_t *sock)
{
    const pdr_config_t *cfg = cc->t->config;
    static int warned;
    if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
        pdr_warn("HTTP/2 is served by libnghttp2 (h2_nghttp2): the HTTP/2 body budgets "
                 "(limits.h2_max_connection_body_bytes, limits.max_body_memory_bytes) and "
                 "timeouts.client_body_ms are not applied to its streams");
    nghttp2_option *o = ng2_cbs != NULL ? pdr__ng2_options(cfg) : NULL;
    /* h2o_create_connection does not return NULL (h2o aborts when malloc fails). */
    ng2_conn_t *c = (ng2_conn_t *)h2o_create_connection(sizeof(*c), cc->actx->ctx, cc->actx->hosts,
                                                        cc->accepted, &ng2_callbacks);
    memset((char *)c + sizeof(c->super), 0, sizeof(*c) - sizeof(c->super));
    if (o == NULL || nghttp2_session_server_new2(&c->ng, ng2_cbs, c, o) != 0) {
        if (o != NULL)
            nghttp2_option_del(o);
        free(c);
        h2o_socket_close(sock);
        return PDR_ENOMEM;
    }
    nghttp2_option_del(o);
    c->cc = cc;
    c->sock = sock;
    c->max_body = (uint64_t)cfg->limits.max_body_bytes;
    c->max_running = (uint32_t)cfg->limits.h2_max_concurrent_streams;
    c->flush_entry.cb = on_flush_entry;
    c->idle_entry.cb = on_idle_entry;
    c->ctl_tokens = cfg->limits.h2_max_control_frames;
    c->ctl_ms = pdr_now_ms();
    h2o_buffer_init(&c->out, &h2o_socket_buffer_prototype);
    pdr_dlink_push(&cc->t->ng2_conns, &c->link);
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, NG2_MAX_OPEN_STREAMS},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, (uint32_t)cfg->limits.max_header_bytes},
    };
    nghttp2_submit_settings(c->ng, NGHTTP2_FLAG_NONE, iv, sizeof(iv) / sizeof(iv[0]));
    if (c->super.ctx->http2.idle_timeout.timeout != 0)
        h2o_timeout_link(c->super.ctx->loop, &c->super.ctx->http2.idle_timeout, &c->idle_entry);
    sock->data = c;
    h2o_socket_read_start(sock, on_read);
    if (sock->input->size > 0)
        on_read(sock, NULL);
    else
        ng2_flush(c);
    return 0;
}

/* Shutdown: every connection gets a GOAWAY; those with no stream in progress close once it is written. */
void pdr__conn_ng2_shutdown(pdr_thread_t *t)
{
    for (pdr_dlink_t *l = t->ng2_conns, *next; l != NULL; l = next) {
        next = l->next;
        ng2_conn_t *c = PDR_DLINK_ITEM(l, ng2_conn_t, link);
        if (c->closing)
            continue;
        nghttp2_submit_shutdown_notice(c->ng);
        if (c->streams == NULL) {
            nghttp2_session_terminate_session(c->ng, NGHTTP2_NO_ERROR);
            c->closing = 1;
        }
        request_flush(c);
    }
}
