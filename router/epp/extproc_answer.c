/*
 * The ProcessingResponses an endpoint picker sends (epp.h's pdr_epp_answer_*), encoded with protobuf-c
 * into one buffer each and queued on the stream's call. The pick is the shape the Gateway API Inference
 * Extension's endpoint-picker protocol names: the request headers' answer (or, in the BUFFERED exchange,
 * the request body's) sets the
 * x-gateway-destination-endpoint header (raw_value, overwriting any the client sent) to the endpoints
 * joined by commas, clears the route cache (the destination changed), and carries the same list in the
 * dynamic metadata under envoy.lb. Loop thread only.
 */
#include <stdlib.h>
#include <string.h>
#include "epp_internal.h"
#include "err.h"
#include "ext_proc.pb-c.h"

typedef Envoy__Service__ExtProc__V3__ProcessingResponse proc_resp_t;
typedef Envoy__Service__ExtProc__V3__CommonResponse common_t;
typedef Envoy__Config__Core__V3__HeaderValueOption hvo_t;
typedef Envoy__Config__Core__V3__HeaderValue hv_t;

/* Header options beyond the destination a pick may set. */
#define EPP_EXTRA_HEADERS_MAX 16

static int send_response(pdr_epp_stream_t *s, const proc_resp_t *r)
{
    size_t n = envoy__service__ext_proc__v3__processing_response__get_packed_size(r);
    uint8_t small[512];
    uint8_t *buf = n <= sizeof(small) ? small : malloc(n);
    if (buf == NULL)
        return PDR_ENOMEM;
    envoy__service__ext_proc__v3__processing_response__pack(r, buf);
    int rc = pdr_grpc_send(s->call, buf, n);
    if (buf != small)
        free(buf);
    return rc;
}

/* Which oneof case and which member of the response answers phase. */
static void set_common(proc_resp_t *r, pdr_epp_phase_t phase,
                       Envoy__Service__ExtProc__V3__HeadersResponse *hr,
                       Envoy__Service__ExtProc__V3__BodyResponse *br,
                       Envoy__Service__ExtProc__V3__TrailersResponse *tr)
{
    switch (phase) {
    case PDR_EPP_REQUEST_HEADERS:
        r->response_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_REQUEST_HEADERS;
        r->request_headers = hr;
        break;
    case PDR_EPP_RESPONSE_HEADERS:
        r->response_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_RESPONSE_HEADERS;
        r->response_headers = hr;
        break;
    case PDR_EPP_REQUEST_BODY:
        r->response_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_REQUEST_BODY;
        r->request_body = br;
        break;
    case PDR_EPP_RESPONSE_BODY:
        r->response_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_RESPONSE_BODY;
        r->response_body = br;
        break;
    case PDR_EPP_REQUEST_TRAILERS:
        r->response_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_REQUEST_TRAILERS;
        r->request_trailers = tr;
        break;
    case PDR_EPP_RESPONSE_TRAILERS:
        r->response_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_RESPONSE_TRAILERS;
        r->response_trailers = tr;
        break;
    }
}

int pdr_epp_answer_continue(pdr_epp_stream_t *s, pdr_epp_phase_t phase)
{
    common_t common = ENVOY__SERVICE__EXT_PROC__V3__COMMON_RESPONSE__INIT;
    Envoy__Service__ExtProc__V3__HeadersResponse hr = ENVOY__SERVICE__EXT_PROC__V3__HEADERS_RESPONSE__INIT;
    Envoy__Service__ExtProc__V3__BodyResponse br = ENVOY__SERVICE__EXT_PROC__V3__BODY_RESPONSE__INIT;
    Envoy__Service__ExtProc__V3__TrailersResponse tr = ENVOY__SERVICE__EXT_PROC__V3__TRAILERS_RESPONSE__INIT;
    hr.response = &common;
    br.response = &common;
    proc_resp_t r = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__INIT;
    set_common(&r, phase, &hr, &br, &tr);
    return send_response(s, &r);
}

int pdr_epp_answer_body(pdr_epp_stream_t *s, pdr_epp_phase_t phase, const uint8_t *body, size_t len,
                        int end_of_stream)
{
    if (phase != PDR_EPP_REQUEST_BODY && phase != PDR_EPP_RESPONSE_BODY)
        return PDR_EINVAL;
    Envoy__Service__ExtProc__V3__StreamedBodyResponse sb =
        ENVOY__SERVICE__EXT_PROC__V3__STREAMED_BODY_RESPONSE__INIT;
    sb.body.data = (uint8_t *)body;
    sb.body.len = len;
    sb.end_of_stream = end_of_stream != 0;
    Envoy__Service__ExtProc__V3__BodyMutation bm = ENVOY__SERVICE__EXT_PROC__V3__BODY_MUTATION__INIT;
    bm.mutation_case = ENVOY__SERVICE__EXT_PROC__V3__BODY_MUTATION__MUTATION_STREAMED_RESPONSE;
    bm.streamed_response = &sb;
    common_t common = ENVOY__SERVICE__EXT_PROC__V3__COMMON_RESPONSE__INIT;
    common.body_mutation = &bm;
    Envoy__Service__ExtProc__V3__BodyResponse br = ENVOY__SERVICE__EXT_PROC__V3__BODY_RESPONSE__INIT;
    br.response = &common;
    proc_resp_t r = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__INIT;
    set_common(&r, phase, NULL, &br, NULL);
    return send_response(s, &r);
}

static void header_option(hvo_t *o, hv_t *v, const char *name, const char *value, size_t value_len)
{
    hvo_t o0 = ENVOY__CONFIG__CORE__V3__HEADER_VALUE_OPTION__INIT;
    hv_t v0 = ENVOY__CONFIG__CORE__V3__HEADER_VALUE__INIT;
    *o = o0;
    *v = v0;
    v->key = (char *)name;
    v->raw_value.data = (uint8_t *)value;
    v->raw_value.len = value_len;
    o->header = v;
    o->append_action =
        ENVOY__CONFIG__CORE__V3__HEADER_VALUE_OPTION__HEADER_APPEND_ACTION__OVERWRITE_IF_EXISTS_OR_ADD;
}

/* The endpoints joined by commas into out (cap bytes with its NUL); PDR_ETOOBIG past it, PDR_EINVAL for
 * none or an empty one. */
static int join_endpoints(const char *const *eps, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    if (n == 0)
        return PDR_EINVAL;
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(eps[i]);
        if (l == 0)
            return PDR_EINVAL;
        if (o + l + (i > 0) + 1 > cap)
            return PDR_ETOOBIG;
        if (i > 0)
            out[o++] = ',';
        memcpy(out + o, eps[i], l);
        o += l;
    }
    out[o] = '\0';
    return 0;
}

int pdr_epp_answer_pick(pdr_epp_stream_t *s, pdr_epp_phase_t phase, const char *const *endpoints, size_t n,
                        const pdr_epp_header_t *extra, size_t nextra)
{
    if (phase != PDR_EPP_REQUEST_HEADERS && phase != PDR_EPP_REQUEST_BODY)
        return PDR_EINVAL;
    char list[EPP_ENDPOINTS_MAX];
    int rc = join_endpoints(endpoints, n, list, sizeof(list));
    if (rc != 0)
        return rc;
    if (nextra > EPP_EXTRA_HEADERS_MAX)
        return PDR_ETOOBIG;
    /* The header mutation: the destination, then the extra headers (names copied: the key is a C string). */
    hvo_t opts[1 + EPP_EXTRA_HEADERS_MAX];
    hv_t vals[1 + EPP_EXTRA_HEADERS_MAX];
    hvo_t *optp[1 + EPP_EXTRA_HEADERS_MAX];
    char names[EPP_EXTRA_HEADERS_MAX][EPP_SERVICE_MAX];
    header_option(&opts[0], &vals[0], PDR_EPP_DEST_HEADER, list, strlen(list));
    optp[0] = &opts[0];
    for (size_t i = 0; i < nextra; i++) {
        if (extra[i].name_len == 0 || extra[i].name_len >= sizeof(names[i]))
            return PDR_EINVAL;
        memcpy(names[i], extra[i].name, extra[i].name_len);
        names[i][extra[i].name_len] = '\0';
        header_option(&opts[1 + i], &vals[1 + i], names[i], extra[i].value, extra[i].value_len);
        optp[1 + i] = &opts[1 + i];
    }
    Envoy__Service__ExtProc__V3__HeaderMutation hm = ENVOY__SERVICE__EXT_PROC__V3__HEADER_MUTATION__INIT;
    hm.n_set_headers = 1 + nextra;
    hm.set_headers = optp;
    common_t common = ENVOY__SERVICE__EXT_PROC__V3__COMMON_RESPONSE__INIT;
    common.header_mutation = &hm;
    common.clear_route_cache = 1;
    Envoy__Service__ExtProc__V3__HeadersResponse hr = ENVOY__SERVICE__EXT_PROC__V3__HEADERS_RESPONSE__INIT;
    hr.response = &common;
    Envoy__Service__ExtProc__V3__BodyResponse br = ENVOY__SERVICE__EXT_PROC__V3__BODY_RESPONSE__INIT;
    br.response = &common;

    /* {"envoy.lb": {"x-gateway-destination-endpoint": "<list>"}} */
    Pdrouter__Epp__Wkt__Value inner_v = PDROUTER__EPP__WKT__VALUE__INIT;
    inner_v.kind_case = PDROUTER__EPP__WKT__VALUE__KIND_STRING_VALUE;
    inner_v.string_value = list;
    Pdrouter__Epp__Wkt__Struct__FieldsEntry inner_e = PDROUTER__EPP__WKT__STRUCT__FIELDS_ENTRY__INIT;
    inner_e.key = (char *)PDR_EPP_DEST_HEADER;
    inner_e.value = &inner_v;
    Pdrouter__Epp__Wkt__Struct__FieldsEntry *inner_ep = &inner_e;
    Pdrouter__Epp__Wkt__Struct inner = PDROUTER__EPP__WKT__STRUCT__INIT;
    inner.n_fields = 1;
    inner.fields = &inner_ep;
    Pdrouter__Epp__Wkt__Value outer_v = PDROUTER__EPP__WKT__VALUE__INIT;
    outer_v.kind_case = PDROUTER__EPP__WKT__VALUE__KIND_STRUCT_VALUE;
    outer_v.struct_value = &inner;
    Pdrouter__Epp__Wkt__Struct__FieldsEntry outer_e = PDROUTER__EPP__WKT__STRUCT__FIELDS_ENTRY__INIT;
    outer_e.key = (char *)PDR_EPP_METADATA_NS;
    outer_e.value = &outer_v;
    Pdrouter__Epp__Wkt__Struct__FieldsEntry *outer_ep = &outer_e;
    Pdrouter__Epp__Wkt__Struct meta = PDROUTER__EPP__WKT__STRUCT__INIT;
    meta.n_fields = 1;
    meta.fields = &outer_ep;

    proc_resp_t r = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__INIT;
    set_common(&r, phase, &hr, &br, NULL);
    r.dynamic_metadata = &meta;
    return send_response(s, &r);
}

int pdr_epp_answer_immediate(pdr_epp_stream_t *s, int http_status, const char *body)
{
    if (http_status < 100 || http_status > 599)
        return PDR_EINVAL;
    Envoy__Type__V3__HttpStatus st = ENVOY__TYPE__V3__HTTP_STATUS__INIT;
    st.code = http_status;
    Envoy__Service__ExtProc__V3__ImmediateResponse ir =
        ENVOY__SERVICE__EXT_PROC__V3__IMMEDIATE_RESPONSE__INIT;
    ir.status = &st;
    if (body != NULL) {
        ir.body.data = (uint8_t *)body;
        ir.body.len = strlen(body);
    }
    proc_resp_t r = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__INIT;
    r.response_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_IMMEDIATE_RESPONSE;
    r.immediate_response = &ir;
    return send_response(s, &r);
}

int pdr_epp_finish(pdr_epp_stream_t *s, int grpc_status, const char *message)
{
    return pdr_grpc_finish(s->call, grpc_status, message);
}
