/*
 * The calls of the gRPC server (grpc.h): one per HTTP/2 stream. A request's headers pick its method from
 * the table (an unknown path is answered UNIMPLEMENTED, a request that is not a POST of application/grpc
 * 415), its DATA goes through the framing reader and each whole message to the method at once. Answers
 * are queued in the call's buffer (its ceiling: limits.max_send_queue) and handed to nghttp2 by a data
 * provider as the peer's windows allow; the status goes out as trailers once the queue is empty, or alone
 * in a trailers-only answer when nothing was sent. A call the server has finished while the client still
 * sends is reset with NO_ERROR once the trailers are out, as gRPC servers do. Loop thread only.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "err.h"
#include "grpc_internal.h"

#define NV(n, v)                                                                                             \
    {                                                                                                        \
        (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE                       \
    }

static void call_free(pdr_grpc_call_t *call)
{
    pdr_dlink_unlink(&call->link);
    call->conn->ncalls--;
    if (call->opened && call->method->on_close != NULL)
        call->method->on_close(call->method->data, call);
    pdr_grpc_reader_free(&call->reader);
    pdr_buf_free(&call->out);
    free(call);
}

void pdr_grpc_call_set_data(pdr_grpc_call_t *call, void *data)
{
    call->data = data;
}

void *pdr_grpc_call_data(const pdr_grpc_call_t *call)
{
    return call->data;
}

/* grpc-message is percent-encoded: every byte outside printable ASCII, and '%' itself. */
static void set_message(pdr_grpc_call_t *call, const char *text)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (size_t i = 0; text != NULL && text[i] != '\0' && i < GRPC_MESSAGE_MAX; i++) {
        unsigned char ch = (unsigned char)text[i];
        if (ch < 0x20 || ch > 0x7e || ch == '%') {
            call->message[o++] = '%';
            call->message[o++] = hex[ch >> 4];
            call->message[o++] = hex[ch & 15];
        } else {
            call->message[o++] = (char)ch;
        }
    }
    call->message[o] = '\0';
}

static int submit_trailers(pdr_grpc_call_t *call)
{
    char st[16];
    snprintf(st, sizeof(st), "%d", call->status);
    nghttp2_nv nv[] = {NV("grpc-status", st), NV("grpc-message", call->message)};
    return nghttp2_submit_trailer(call->conn->ng, call->id, nv, call->message[0] != '\0' ? 2 : 1);
}

static ssize_t read_cb(nghttp2_session *ng, int32_t id, uint8_t *buf, size_t length, uint32_t *flags,
                       nghttp2_data_source *src, void *ud)
{
    (void)ng, (void)id, (void)ud;
    pdr_grpc_call_t *call = src->ptr;
    size_t avail = call->out.len - call->out_off;
    size_t n = avail < length ? avail : length;
    if (n > 0)
        memcpy(buf, call->out.p + call->out_off, n);
    call->out_off += n;
    if (call->out_off == call->out.len)
        call->out.len = call->out_off = 0; /* the queue is empty: its memory is reused */
    if (n == avail && call->finished) {
        *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        if (submit_trailers(call) != 0)
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        return (ssize_t)n;
    }
    return n > 0 ? (ssize_t)n : NGHTTP2_ERR_DEFERRED;
}

/* The response's headers with the data provider, or, once they are out, a nudge to the provider. */
static int start_or_resume(pdr_grpc_call_t *call)
{
    if (call->responded)
        return nghttp2_session_resume_data(call->conn->ng, call->id) == NGHTTP2_ERR_NOMEM ? PDR_ENOMEM : 0;
    nghttp2_nv nv[] = {NV(":status", "200"), NV("content-type", "application/grpc")};
    nghttp2_data_provider prd = {.source.ptr = call, .read_callback = read_cb};
    call->responded = 1;
    return nghttp2_submit_response(call->conn->ng, call->id, nv, 2, &prd) == 0 ? 0 : PDR_ENOMEM;
}

int pdr_grpc_send(pdr_grpc_call_t *call, const uint8_t *msg, size_t len)
{
    if (call->finished)
        return PDR_ECLOSED;
    if (len > call->conn->srv->lim.max_send_queue || len > UINT32_MAX)
        return PDR_ETOOBIG;
    if (call->out_off > 0) {
        memmove(call->out.p, call->out.p + call->out_off, call->out.len - call->out_off);
        call->out.len -= call->out_off;
        call->out_off = 0;
    }
    uint8_t prefix[PDR_GRPC_PREFIX_LEN];
    pdr_grpc_prefix(prefix, (uint32_t)len);
    size_t limit = call->conn->srv->lim.max_send_queue;
    if (call->out.len + sizeof(prefix) + len > limit)
        return PDR_ETOOBIG;
    int rc = pdr_buf_append(&call->out, prefix, sizeof(prefix), limit);
    if (rc == 0 && len > 0)
        rc = pdr_buf_append(&call->out, msg, len, limit);
    if (rc != 0)
        return rc;
    rc = start_or_resume(call);
    call->conn->srv->flush(call->conn);
    return rc;
}

/* A trailers-only answer: the status in the response's only HEADERS frame. */
static int answer_alone(pdr_grpc_call_t *call, const char *http_status)
{
    char st[16];
    snprintf(st, sizeof(st), "%d", call->status);
    nghttp2_nv nv[] = {NV(":status", http_status), NV("content-type", "application/grpc"),
                       NV("grpc-status", st), NV("grpc-message", call->message)};
    call->responded = 1;
    return nghttp2_submit_response(call->conn->ng, call->id, nv, call->message[0] != '\0' ? 4 : 3, NULL) == 0
               ? 0
               : PDR_ENOMEM;
}

static int finish_http(pdr_grpc_call_t *call, const char *http_status, int status, const char *message)
{
    if (call->finished)
        return PDR_ECLOSED;
    call->finished = 1;
    call->status = status;
    set_message(call, message);
    int rc = call->responded ? start_or_resume(call) : answer_alone(call, http_status);
    call->conn->srv->flush(call->conn);
    return rc;
}

int pdr_grpc_finish(pdr_grpc_call_t *call, int status, const char *message)
{
    return finish_http(call, "200", status, message);
}

static void finishf(pdr_grpc_call_t *call, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void finishf(pdr_grpc_call_t *call, int status, const char *fmt, ...)
{
    char text[GRPC_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    pdr_grpc_finish(call, status, text);
}

/* ---- the session's callbacks ---- */

static pdr_grpc_call_t *call_of(nghttp2_session *ng, int32_t id)
{
    return nghttp2_session_get_stream_user_data(ng, id);
}

static int on_begin_headers(nghttp2_session *ng, const nghttp2_frame *frame, void *ud)
{
    grpc_conn_t *c = ud;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    pdr_grpc_call_t *call = calloc(1, sizeof(*call));
    if (call == NULL)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    call->conn = c;
    call->id = frame->hd.stream_id;
    pdr_grpc_reader_init(&call->reader, c->srv->lim.max_message);
    pdr_dlink_push(&c->calls, &call->link);
    c->ncalls++;
    nghttp2_session_set_stream_user_data(ng, call->id, call);
    return 0;
}

static int is_grpc_type(const uint8_t *v, size_t n)
{
    static const char t[] = "application/grpc";
    size_t tl = sizeof(t) - 1;
    return n >= tl && memcmp(v, t, tl) == 0 && (n == tl || v[tl] == '+' || v[tl] == ';');
}

static int on_header(nghttp2_session *ng, const nghttp2_frame *frame, const uint8_t *name, size_t namelen,
                     const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
    (void)flags, (void)ud;
    pdr_grpc_call_t *call = call_of(ng, frame->hd.stream_id);
    if (call == NULL || frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    if (namelen == 5 && memcmp(name, ":path", 5) == 0) {
        if (valuelen < sizeof(call->path)) {
            memcpy(call->path, value, valuelen);
            call->path[valuelen] = '\0';
            call->path_len = (int)valuelen;
        } else {
            call->path_len = -1;
        }
    } else if (namelen == 7 && memcmp(name, ":method", 7) == 0) {
        call->is_post = valuelen == 4 && memcmp(value, "POST", 4) == 0;
    } else if (namelen == 12 && memcmp(name, "content-type", 12) == 0) {
        call->is_grpc = is_grpc_type(value, valuelen);
    }
    return 0;
}

static void dispatch(pdr_grpc_call_t *call)
{
    pdr_grpc_server_t *srv = call->conn->srv;
    if (srv->closing) {
        pdr_grpc_finish(call, PDR_GRPC_UNAVAILABLE, "the server is shutting down");
        return;
    }
    if (!call->is_post || !call->is_grpc) {
        srv->stats.invalid++;
        finish_http(call, "415", PDR_GRPC_INTERNAL,
                    "a gRPC request is a POST of content-type application/grpc");
        return;
    }
    for (size_t i = 0; call->path_len > 0 && i < srv->nmethods; i++) {
        if (strcmp(srv->methods[i].path, call->path) == 0) {
            call->method = &srv->methods[i];
            call->opened = 1;
            srv->stats.calls++;
            if (call->method->on_open != NULL)
                call->method->on_open(call->method->data, call);
            return;
        }
    }
    srv->stats.unimplemented++;
    if (call->path_len < 0)
        pdr_grpc_finish(call, PDR_GRPC_UNIMPLEMENTED, "unknown method (its path is too long)");
    else
        finishf(call, PDR_GRPC_UNIMPLEMENTED, "unknown method %s", call->path);
}

static void remote_done(pdr_grpc_call_t *call)
{
    call->remote_done = 1;
    if (call->finished || !call->opened)
        return;
    if (pdr_grpc_reader_partial(&call->reader)) {
        call->conn->srv->stats.invalid++;
        pdr_grpc_finish(call, PDR_GRPC_INVALID_ARGUMENT, "the request stream ended inside a message");
        return;
    }
    if (call->method->on_half_close != NULL)
        call->method->on_half_close(call->method->data, call);
}

static int on_frame_recv(nghttp2_session *ng, const nghttp2_frame *frame, void *ud)
{
    (void)ud;
    pdr_grpc_call_t *call = call_of(ng, frame->hd.stream_id);
    if (call == NULL)
        return 0;
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST)
        dispatch(call);
    if ((frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) &&
        (frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
        remote_done(call);
    return 0;
}

static int on_data_chunk(nghttp2_session *ng, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
                         void *ud)
{
    (void)flags, (void)ud;
    pdr_grpc_call_t *call = call_of(ng, id);
    pdr_grpc_stats_t *st = call != NULL ? &call->conn->srv->stats : NULL;
    while (call != NULL && call->opened && !call->finished && len > 0) {
        const uint8_t *msg = NULL;
        size_t used = 0, mlen = 0;
        pdr_grpc_read_t r = pdr_grpc_reader_feed(&call->reader, data, len, &used, &msg, &mlen);
        data += used;
        len -= used;
        switch (r) {
        case PDR_GRPC_NEED_MORE:
            break;
        case PDR_GRPC_MESSAGE:
            if (call->method->on_message != NULL)
                call->method->on_message(call->method->data, call, msg, mlen);
            break;
        case PDR_GRPC_TOO_BIG:
            st->too_big++;
            finishf(call, PDR_GRPC_RESOURCE_EXHAUSTED,
                    "a request message of %zu bytes is over the ceiling of %zu", mlen,
                    call->reader.max_message);
            break;
        case PDR_GRPC_COMPRESSED:
            st->invalid++;
            pdr_grpc_finish(call, PDR_GRPC_UNIMPLEMENTED,
                            "compressed messages are not supported (no grpc-encoding)");
            break;
        case PDR_GRPC_BAD_FLAGS:
            st->invalid++;
            pdr_grpc_finish(call, PDR_GRPC_INVALID_ARGUMENT, "a message prefix has unknown flag bits");
            break;
        case PDR_GRPC_NOMEM:
            pdr_grpc_finish(call, PDR_GRPC_RESOURCE_EXHAUSTED, "out of memory for a request message");
            break;
        }
    }
    return 0;
}

static int on_frame_send(nghttp2_session *ng, const nghttp2_frame *frame, void *ud)
{
    (void)ud;
    if (frame->hd.type != NGHTTP2_HEADERS || !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    pdr_grpc_call_t *call = call_of(ng, frame->hd.stream_id);
    /* The status is out and the client still sends: its stream is reset, the answer stands. */
    if (call != NULL && !call->remote_done)
        nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, call->id, NGHTTP2_NO_ERROR);
    return 0;
}

static int on_stream_close(nghttp2_session *ng, int32_t id, uint32_t error_code, void *ud)
{
    (void)error_code, (void)ud;
    pdr_grpc_call_t *call = call_of(ng, id);
    if (call != NULL) {
        nghttp2_session_set_stream_user_data(ng, id, NULL);
        call_free(call);
    }
    return 0;
}

void pdr__grpc_session_callbacks(nghttp2_session_callbacks *cbs)
{
    nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
    nghttp2_session_callbacks_set_on_frame_send_callback(cbs, on_frame_send);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
}

void pdr__grpc_calls_drop(grpc_conn_t *c)
{
    pdr_grpc_call_t *call;
    while ((call = PDR_DLINK_ENTRY(c->calls, pdr_grpc_call_t, link)) != NULL)
        call_free(call);
}

void pdr__grpc_calls_shutdown(grpc_conn_t *c)
{
    for (pdr_dlink_t *l = c->calls; l != NULL; l = l->next) {
        pdr_grpc_call_t *call = PDR_DLINK_ITEM(l, pdr_grpc_call_t, link);
        if (!call->finished)
            pdr_grpc_finish(call, PDR_GRPC_UNAVAILABLE, "the server is shutting down");
    }
}
