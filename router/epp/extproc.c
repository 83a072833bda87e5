/*
 * envoy.service.ext_proc.v3.ExternalProcessor/Process: one bidirectional stream per HTTP request the
 * gateway routes. Each ProcessingRequest is decoded (protobuf-c) as it arrives and handed to the
 * embedder's on_message as a pdr_epp_msg_t (headers as name/value slices, a body chunk, end_of_stream,
 * the endpoint subset and the served endpoint of the gateway's metadata_context);
 * the embedder answers through extproc_answer.c. A message that is not a ProcessingRequest, or carries
 * none of its six parts, ends the stream with INVALID_ARGUMENT and says why. The gateway half-closes its
 * side only when it waits for no more answers (Envoy's ext_proc filter ends the stream when the HTTP
 * exchange is done), so the half-close ends the stream with OK after whatever answers are queued.
 * Loop thread only.
 */
#include <stdlib.h>
#include <string.h>
#include "epp_internal.h"
#include "err.h"
#include "ext_proc.pb-c.h"

typedef Envoy__Service__ExtProc__V3__ProcessingRequest proc_req_t;

static void on_open(void *data, pdr_grpc_call_t *call)
{
    pdr_epp_t *e = data;
    pdr_epp_stream_t *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        pdr_grpc_finish(call, PDR_GRPC_RESOURCE_EXHAUSTED, "out of memory for a stream");
        return;
    }
    s->epp = e;
    s->call = call;
    s->request_body_mode = s->response_body_mode = PDR_EPP_MODE_UNKNOWN;
    pdr_grpc_call_set_data(call, s);
    e->streams++;
}

static void on_close(void *data, pdr_grpc_call_t *call)
{
    pdr_epp_t *e = data;
    pdr_epp_stream_t *s = pdr_grpc_call_data(call);
    if (s == NULL)
        return;
    if (e->handler.on_close != NULL)
        e->handler.on_close(e->handler.data, s);
    free(s);
}

/* The headers of a HeaderMap as slices into the decoded message: raw_value where Envoy sent it (its
 * current form), value otherwise. *out is malloc'd (free) or NULL when there are none. */
static int headers_of(const Envoy__Config__Core__V3__HeaderMap *map, pdr_epp_header_t **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    if (map == NULL || map->n_headers == 0)
        return 0;
    pdr_epp_header_t *h = calloc(map->n_headers, sizeof(*h));
    if (h == NULL)
        return PDR_ENOMEM;
    for (size_t i = 0; i < map->n_headers; i++) {
        const Envoy__Config__Core__V3__HeaderValue *v = map->headers[i];
        h[i].name = v->key;
        h[i].name_len = strlen(v->key);
        if (v->raw_value.len > 0) {
            h[i].value = (const char *)v->raw_value.data;
            h[i].value_len = v->raw_value.len;
        } else {
            h[i].value = v->value;
            h[i].value_len = strlen(v->value);
        }
    }
    *out = h;
    *n = map->n_headers;
    return 0;
}

static int headers_part(const Envoy__Service__ExtProc__V3__HttpHeaders *hh, pdr_epp_msg_t *m,
                        pdr_epp_header_t **owned)
{
    if (hh == NULL)
        return 0;
    m->end_of_stream = hh->end_of_stream;
    return headers_of(hh->headers, owned, &m->nheaders);
}

static void body_part(const Envoy__Service__ExtProc__V3__HttpBody *b, pdr_epp_msg_t *m)
{
    if (b == NULL)
        return;
    m->body = b->body.data;
    m->body_len = b->body.len;
    m->end_of_stream = b->end_of_stream;
}

/* Fills m from the request; PDR_EPROTO when it carries no part, PDR_ENOMEM. */
static int message_of(const proc_req_t *r, pdr_epp_msg_t *m, pdr_epp_header_t **owned)
{
    int rc = 0;
    switch (r->request_case) {
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_REQUEST_HEADERS:
        m->phase = PDR_EPP_REQUEST_HEADERS;
        rc = headers_part(r->request_headers, m, owned);
        break;
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_RESPONSE_HEADERS:
        m->phase = PDR_EPP_RESPONSE_HEADERS;
        rc = headers_part(r->response_headers, m, owned);
        break;
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_REQUEST_BODY:
        m->phase = PDR_EPP_REQUEST_BODY;
        body_part(r->request_body, m);
        break;
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_RESPONSE_BODY:
        m->phase = PDR_EPP_RESPONSE_BODY;
        body_part(r->response_body, m);
        break;
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_REQUEST_TRAILERS:
        m->phase = PDR_EPP_REQUEST_TRAILERS;
        if (r->request_trailers != NULL)
            rc = headers_of(r->request_trailers->trailers, owned, &m->nheaders);
        break;
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_RESPONSE_TRAILERS:
        m->phase = PDR_EPP_RESPONSE_TRAILERS;
        if (r->response_trailers != NULL)
            rc = headers_of(r->response_trailers->trailers, owned, &m->nheaders);
        break;
    default:
        return PDR_EPROTO;
    }
    m->headers = *owned;
    m->observability = r->observability_mode;
    return rc;
}

/* The value under ns.key in a Metadata, or NULL. */
static const Pdrouter__Epp__Wkt__Value *metadata_value(const Envoy__Config__Core__V3__Metadata *md,
                                                       const char *ns, const char *key)
{
    for (size_t i = 0; md != NULL && i < md->n_filter_metadata; i++) {
        const Envoy__Config__Core__V3__Metadata__FilterMetadataEntry *e = md->filter_metadata[i];
        if (strcmp(e->key, ns) != 0 || e->value == NULL)
            continue;
        for (size_t k = 0; k < e->value->n_fields; k++)
            if (strcmp(e->value->fields[k]->key, key) == 0)
                return e->value->fields[k]->value;
    }
    return NULL;
}

/* The subset hint and the served endpoint. The subset's strings are the decoded message's; *owned (the
 * array of pointers) is malloc'd (free). A subset entry that is not a string is skipped: it names no
 * endpoint. */
static int metadata_part(const Envoy__Config__Core__V3__Metadata *md, pdr_epp_msg_t *m, const char ***owned)
{
    *owned = NULL;
    const Pdrouter__Epp__Wkt__Value *v = metadata_value(md, PDR_EPP_METADATA_NS, PDR_EPP_SERVED_KEY);
    if (v != NULL && v->kind_case == PDROUTER__EPP__WKT__VALUE__KIND_STRING_VALUE)
        m->served = v->string_value;
    v = metadata_value(md, PDR_EPP_SUBSET_NS, PDR_EPP_SUBSET_KEY);
    if (v == NULL)
        return 0;
    m->has_subset = 1;
    if (v->kind_case != PDROUTER__EPP__WKT__VALUE__KIND_LIST_VALUE || v->list_value == NULL ||
        v->list_value->n_values == 0)
        return 0;
    const char **list = calloc(v->list_value->n_values, sizeof(*list));
    if (list == NULL)
        return PDR_ENOMEM;
    for (size_t i = 0; i < v->list_value->n_values; i++) {
        const Pdrouter__Epp__Wkt__Value *e = v->list_value->values[i];
        if (e->kind_case == PDROUTER__EPP__WKT__VALUE__KIND_STRING_VALUE)
            list[m->nsubset++] = e->string_value;
    }
    m->subset = list;
    *owned = list;
    return 0;
}

static pdr_epp_body_mode_t mode_of(int v)
{
    return v >= PDR_EPP_MODE_NONE && v <= PDR_EPP_MODE_GRPC ? (pdr_epp_body_mode_t)v : PDR_EPP_MODE_UNKNOWN;
}

static void on_message(void *data, pdr_grpc_call_t *call, const uint8_t *msg, size_t len)
{
    pdr_epp_t *e = data;
    pdr_epp_stream_t *s = pdr_grpc_call_data(call);
    if (s == NULL)
        return;
    proc_req_t *r = envoy__service__ext_proc__v3__processing_request__unpack(NULL, len, msg);
    if (r == NULL) {
        e->malformed++;
        pdr_grpc_finish(call, PDR_GRPC_INVALID_ARGUMENT,
                        "malformed ProcessingRequest: the message does not decode as protobuf");
        return;
    }
    if (r->protocol_config != NULL) {
        s->request_body_mode = mode_of(r->protocol_config->request_body_mode);
        s->response_body_mode = mode_of(r->protocol_config->response_body_mode);
    }
    pdr_epp_msg_t m = {.request_body_mode = s->request_body_mode,
                       .response_body_mode = s->response_body_mode};
    pdr_epp_header_t *owned = NULL;
    const char **subset = NULL;
    int rc = message_of(r, &m, &owned);
    if (rc == 0)
        rc = metadata_part(r->metadata_context, &m, &subset);
    if (rc == PDR_EPROTO) {
        e->malformed++;
        pdr_grpc_finish(call, PDR_GRPC_INVALID_ARGUMENT,
                        "malformed ProcessingRequest: it carries no headers, body or trailers");
    } else if (rc != 0) {
        pdr_grpc_finish(call, PDR_GRPC_RESOURCE_EXHAUSTED, "out of memory decoding a ProcessingRequest");
    } else {
        e->messages++;
        if (e->handler.on_message != NULL)
            e->handler.on_message(e->handler.data, s, &m);
    }
    free(owned);
    free(subset);
    envoy__service__ext_proc__v3__processing_request__free_unpacked(r, NULL);
}

static void on_half_close(void *data, pdr_grpc_call_t *call)
{
    (void)data;
    /* The gateway half-closes once it waits for no answer: the stream ends with OK after what is queued. */
    pdr_grpc_finish(call, PDR_GRPC_OK, NULL);
}

void pdr__epp_extproc_method(pdr_epp_t *e, pdr_grpc_method_t *m)
{
    memset(m, 0, sizeof(*m));
    m->path = EPP_PATH_PROCESS;
    m->on_open = on_open;
    m->on_message = on_message;
    m->on_half_close = on_half_close;
    m->on_close = on_close;
    m->data = e;
}

void pdr_epp_stream_set_data(pdr_epp_stream_t *s, void *data)
{
    s->data = data;
}

void *pdr_epp_stream_data(const pdr_epp_stream_t *s)
{
    return s->data;
}
