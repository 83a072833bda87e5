/*
 * pdrouter as an endpoint picker (EPP) of the Kubernetes Gateway API Inference Extension: a gRPC server
 * (h2c, its own listener on a libuv loop) with Envoy's external processing service
 * (envoy.service.ext_proc.v3.ExternalProcessor/Process, a bidirectional stream per HTTP request the
 * gateway routes) and gRPC health checking (grpc.health.v1.Health/Check for "liveness", "readiness" and
 * "envoy.service.ext_proc.v3.ExternalProcessor", or whatever service names the embedder sets).
 *
 * This layer speaks the protocol; it does not pick. Each ProcessingRequest the gateway sends is handed to
 * the embedder's on_message as it arrives (headers, each body chunk, trailers), and the embedder answers
 * with the pdr_epp_answer_* calls, at once or later on the same loop: a pick (the request headers'
 * answer that names the endpoints in the x-gateway-destination-endpoint header and in the envoy.lb dynamic
 * metadata), a body chunk given back, a plain continue, or an ImmediateResponse (503 no endpoint, 429
 * shed). docs/internals/epp.md has the exchange in each body mode. Loop thread only; the process ignores
 * SIGPIPE (as pdrouter's main does), so that a write to a gateway that left is an error, not the end.
 */
#ifndef PDR_EPP_H
#define PDR_EPP_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct pdr_epp pdr_epp_t;
typedef struct pdr_epp_stream pdr_epp_stream_t;

/* The header and the dynamic metadata's key and namespace the protocol names. */
#define PDR_EPP_DEST_HEADER "x-gateway-destination-endpoint"
#define PDR_EPP_METADATA_NS "envoy.lb"
#define PDR_EPP_SUBSET_NS "envoy.lb.subset_hint"
#define PDR_EPP_SUBSET_KEY "x-gateway-destination-endpoint-subset"
#define PDR_EPP_SERVED_KEY "x-gateway-destination-endpoint-served"

/* Which part of the HTTP exchange a ProcessingRequest carries (and its answer answers). */
typedef enum {
    PDR_EPP_REQUEST_HEADERS,
    PDR_EPP_REQUEST_BODY,
    PDR_EPP_REQUEST_TRAILERS,
    PDR_EPP_RESPONSE_HEADERS,
    PDR_EPP_RESPONSE_BODY,
    PDR_EPP_RESPONSE_TRAILERS,
} pdr_epp_phase_t;

/* envoy.extensions.filters.http.ext_proc.v3.ProcessingMode.BodySendMode, as the gateway announces it in
 * its first message (protocol_config); PDR_EPP_MODE_UNKNOWN when it did not. */
typedef enum {
    PDR_EPP_MODE_UNKNOWN = -1,
    PDR_EPP_MODE_NONE = 0,
    PDR_EPP_MODE_STREAMED = 1,
    PDR_EPP_MODE_BUFFERED = 2,
    PDR_EPP_MODE_BUFFERED_PARTIAL = 3,
    PDR_EPP_MODE_FULL_DUPLEX_STREAMED = 4,
    PDR_EPP_MODE_GRPC = 5,
} pdr_epp_body_mode_t;

typedef struct pdr_epp_header {
    const char *name; /* lower case, as Envoy sends them */
    size_t name_len;
    const char *value;
    size_t value_len;
} pdr_epp_header_t;

/* One ProcessingRequest, valid during on_message only. */
typedef struct pdr_epp_msg {
    pdr_epp_phase_t phase;
    const pdr_epp_header_t *headers; /* the headers or trailers phases */
    size_t nheaders;
    const uint8_t *body; /* the body phases: this chunk */
    size_t body_len;
    int end_of_stream; /* headers: no body follows; body: the last chunk */
    int observability; /* observability_mode: the gateway reads no answer */
    /* The request's body mode, from the first message of the stream. */
    pdr_epp_body_mode_t request_body_mode, response_body_mode;
    /* From metadata_context: the endpoint subset the gateway allows (envoy.lb.subset_hint's
     * x-gateway-destination-endpoint-subset; has_subset says it was sent, even empty: the picker must then
     * pick only among these, and answer 503 when none is eligible), and the endpoint that served the
     * request (envoy.lb's x-gateway-destination-endpoint-served, in the response phase; NULL if absent). */
    int has_subset;
    const char *const *subset;
    size_t nsubset;
    const char *served;
} pdr_epp_msg_t;

/* The embedder's side. on_message: one ProcessingRequest of stream s; on_close: s is gone (the gateway
 * ended or reset it, or the server closed), after which s must not be used. */
typedef struct pdr_epp_handler {
    void (*on_message)(void *data, pdr_epp_stream_t *s, const pdr_epp_msg_t *m);
    void (*on_close)(void *data, pdr_epp_stream_t *s);
    void *data;
} pdr_epp_handler_t;

typedef struct pdr_epp_options {
    const char *host;         /* an IP address to listen on */
    int port;                 /* 0: any free port (pdr_epp_port says which) */
    size_t max_message;       /* a ProcessingRequest's ceiling in bytes */
    size_t max_send_queue;    /* unsent answer bytes a stream may hold */
    uint32_t max_connections; /* gateway connections at once */
    uint32_t max_streams;     /* streams at once on one connection */
    uint64_t idle_timeout_ms; /* a connection with no stream for this long is closed */
} pdr_epp_options_t;

/* Defaults: 127.0.0.1, port 9002 (the extension's conventional EPP port), 4 MiB messages (gRPC's default
 * ceiling), 16 MiB queued per stream, 64 connections, 1024 streams each, 5 minutes idle. */
void pdr_epp_options_default(pdr_epp_options_t *o);

/* The health checking services the endpoint-picker protocol names. */
#define PDR_EPP_SERVICE_EXT_PROC "envoy.service.ext_proc.v3.ExternalProcessor"

/* Starts the server on loop. The three services ("liveness", "readiness", PDR_EPP_SERVICE_EXT_PROC) start
 * NOT_SERVING. NULL on failure: *err a PDR_E* code, the reason in msg (the listener's handle may still be
 * closing: run the loop before closing it). */
pdr_epp_t *pdr_epp_new(uv_loop_t *loop, const pdr_epp_options_t *o, const pdr_epp_handler_t *h, int *err,
                       char *msg, size_t cap);
int pdr_epp_port(const pdr_epp_t *e);

typedef enum {
    PDR_EPP_HEALTH_UNKNOWN = 0,
    PDR_EPP_HEALTH_SERVING = 1,
    PDR_EPP_HEALTH_NOT_SERVING = 2,
} pdr_epp_health_t;
/* Sets the status Health/Check answers for service (copied; at most PDR_EPP_HEALTH_SERVICES names, each
 * under 128 bytes): PDR_ETOOBIG past them. A service never set answers SERVICE_UNKNOWN. */
#define PDR_EPP_HEALTH_SERVICES 16
int pdr_epp_set_health(pdr_epp_t *e, const char *service, pdr_epp_health_t st);

/* Counters of the server. */
typedef struct pdr_epp_stats {
    uint64_t connections, refused_connections, idle_closed;
    uint64_t calls, unimplemented, invalid, too_big, protocol_errors;
    uint64_t streams, messages, malformed;
} pdr_epp_stats_t;
void pdr_epp_stats(const pdr_epp_t *e, pdr_epp_stats_t *out);

/* Ends every stream (UNAVAILABLE), closes the connections and the listener; cb(data) runs once all is
 * freed. */
void pdr_epp_close(pdr_epp_t *e, void (*cb)(void *data), void *data);

/* ---- answers; each returns 0, PDR_ECLOSED once the stream is finished, PDR_ETOOBIG past the queue's
 * ceiling, PDR_ENOMEM ---- */

/* The pick: the answer to phase (PDR_EPP_REQUEST_HEADERS; PDR_EPP_REQUEST_BODY in the BUFFERED exchange,
 * where Envoy applies a body answer's header mutation), with x-gateway-destination-endpoint set to the
 * endpoints ("ip:port", the first preferred) joined by commas, the same list in the dynamic metadata
 * {"envoy.lb": {"x-gateway-destination-endpoint": "..."}}, clear_route_cache set, and the extra headers
 * set too (content-length when the body is given back changed, for one). PDR_EINVAL for another phase,
 * no endpoint or an empty one. */
int pdr_epp_answer_pick(pdr_epp_stream_t *s, pdr_epp_phase_t phase, const char *const *endpoints, size_t n,
                        const pdr_epp_header_t *extra, size_t nextra);
/* CONTINUE, no change, for the phase. */
int pdr_epp_answer_continue(pdr_epp_stream_t *s, pdr_epp_phase_t phase);
/* A body chunk given back in the streamed modes (a streamed_response body mutation); end_of_stream on the
 * last. */
int pdr_epp_answer_body(pdr_epp_stream_t *s, pdr_epp_phase_t phase, const uint8_t *body, size_t len,
                        int end_of_stream);
/* An ImmediateResponse: the gateway answers the client with http_status and body (may be NULL). */
int pdr_epp_answer_immediate(pdr_epp_stream_t *s, int http_status, const char *body);
/* Ends the stream with a gRPC status (0: OK) and an optional message. */
int pdr_epp_finish(pdr_epp_stream_t *s, int grpc_status, const char *message);

void pdr_epp_stream_set_data(pdr_epp_stream_t *s, void *data);
void *pdr_epp_stream_data(const pdr_epp_stream_t *s);

#endif
