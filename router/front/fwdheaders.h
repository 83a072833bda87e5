/*
 * The headers a client request carries to its workers (docs/operations.md "Headers to the workers").
 * Once per request the router builds one block of header lines from the client's request and reuses it
 * for both legs and every retry; each leg adds only its own traceparent line (a fresh span id).
 *
 *   - End-to-end headers are forwarded as the client sent them (names as received).
 *   - Hop-by-hop headers are dropped: Connection and every header it names, Keep-Alive, TE, Trailer,
 *     Transfer-Encoding, Upgrade, HTTP2-Settings, Proxy-* (RFC 9110 section 7.6.1). A field Connection
 *     names is not folded into the ones the router writes either (X-Forwarded-For, X-Forwarded-Host).
 *     An HTTP/2 request carrying any connection-specific field is refused (RFC 9113 section 8.2.2).
 *   - Headers the router writes itself are dropped from the client's: Host, Content-Length,
 *     Content-Type and Content-Encoding (the body is rebuilt), Expect, Accept-Encoding (the router reads
 *     the answers: they must come uncompressed), X-Request-Id, traceparent, X-Forwarded-Proto, and
 *     Authorization when a worker key is configured.
 *   - X-Forwarded-For: the client's values with its address appended; X-Forwarded-Proto: the scheme the
 *     front door saw; X-Forwarded-Host: the client's, else its Host (:authority).
 *   - W3C trace context: a valid traceparent is continued (same trace id and flags, a new parent id per
 *     leg) and its tracestate forwarded; otherwise a new trace starts (tracestate dropped).
 *
 * The pure helpers (no h2o) are unit-tested in tests/unit/test_fwdheaders.c. Loop thread only.
 */
#ifndef PDR_FWDHEADERS_H
#define PDR_FWDHEADERS_H

#include <h2o.h>
#include <stddef.h>
#include <stdint.h>
#include "config.h"

/* ---- pure helpers ---- */

/* 1 when the header name (any case) is hop-by-hop by itself (not counting what Connection names). */
int pdr_fwd_is_hop_by_hop(const char *name, size_t len);
/* 1 when the router writes the header itself, so the client's copy is dropped (api_key: a worker key is
 * configured, which replaces the client's Authorization). */
int pdr_fwd_is_router_set(const char *name, size_t len, int api_key);
/* 1 when the Connection header value `conn` (a comma-separated list of tokens) names `name` (any case). */
int pdr_fwd_connection_names(const char *conn, size_t clen, const char *name, size_t nlen);

/* A W3C trace context (https://www.w3.org/TR/trace-context/). */
typedef struct pdr_trace {
    uint8_t trace_id[16];
    uint8_t parent_id[8];
    uint8_t flags;
} pdr_trace_t;

#define PDR_TRACEPARENT_LEN 55 /* "00-" 32 hex "-" 16 hex "-" 2 hex */

/* Parses a traceparent value. 0 when valid: lower-case hex fields of the right sizes, version not ff,
 * trace id and parent id not all zero; version 00 is exactly 55 characters, a later version may carry
 * more after a '-' (read as 00's fields, as the specification asks). Else -1. */
int pdr_traceparent_parse(const char *v, size_t len, pdr_trace_t *out);
/* Writes "00-<trace id>-<span>-<flags>" (55 characters and a NUL) into out. */
void pdr_traceparent_format(const pdr_trace_t *t, const uint8_t span[8], char out[PDR_TRACEPARENT_LEN + 1]);

/* 1 when v is a request id the router echoes: 1..63 characters of [A-Za-z0-9._-]. */
int pdr_fwd_request_id_ok(const char *v, size_t len);

/* ---- per request ---- */

typedef struct pdr_fwd {
    char *block; /* the shared header lines, "Name: value" joined by CRLF, NUL-terminated (request pool) */
    char request_id[80];
    char trace_id[33]; /* lower-case hex, for the access log */
    pdr_trace_t trace; /* the trace the legs continue (parent_id: the client's, or zero) */
    char tp_line[16 + PDR_TRACEPARENT_LEN]; /* made by pdr_fwd_build but its span id, which each leg sets */
    const char *leg[3];                     /* {block, tp_line, NULL}: what pdr_fwd_leg() returns */
    uint8_t last_span[8]; /* the span id in the last pdr_fwd_leg()'s traceparent (the leg's trace span) */
} pdr_fwd_t;

/* The header lines of one more leg: the shared block and a traceparent with a new span id. The array
 * and its strings stay valid until the next call (pdr_leg_start copies them). */
const char *const *pdr_fwd_leg(pdr_fwd_t *f);

/* ---- on h2o requests ---- */

/* The request-head limits and character checks every data-plane request passes first: 0, or the status
 * to answer (431 past limits.max_headers / limits.max_header_bytes, 414 for a request target longer than
 * limits.max_header_bytes, 400 for a character HTTP does not allow) with the reason in msg. */
int pdr_fwd_check_request(h2o_req_t *req, const pdr_config_t *c, char *msg, size_t cap);
/* Builds the request's forwarded headers, its request id and trace context (fwdheaders.h). 0, or
 * PDR_ENOMEM. */
int pdr_fwd_build(pdr_fwd_t *f, h2o_req_t *req, const pdr_config_t *c);
/* The trace id of the client's valid traceparent in lower-case hex: 1, or 0 when it sent none. */
int pdr_fwd_trace_id(h2o_req_t *req, char out[33]);
/* A new request id (32 hex characters). */
void pdr_fwd_new_request_id(char out[33]);

#endif
