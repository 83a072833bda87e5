/*
 * Spans as fixed-size records (pdr_span_t: no allocation on the loops) and their OTLP/HTTP JSON encoding
 * (otlp.c). trace.h exports them; docs/internals/tracing.md describes both. Any thread.
 */
#ifndef PDR_OTLP_H
#define PDR_OTLP_H

#include <stddef.h>
#include <stdint.h>
#include "buf.h"

#define PDR_SPAN_ATTRS 14
#define PDR_SPAN_EVENTS 4
#define PDR_SPAN_TEXT 640 /* bytes of string attribute values per span */

enum { PDR_SPAN_INTERNAL = 1, PDR_SPAN_SERVER = 2, PDR_SPAN_CLIENT = 3 };              /* OTLP SpanKind */
enum { PDR_SPAN_STATUS_UNSET = 0, PDR_SPAN_STATUS_OK = 1, PDR_SPAN_STATUS_ERROR = 2 }; /* OTLP StatusCode */

typedef struct pdr_span_attr {
    const char *key; /* a static string */
    uint8_t is_int;
    uint16_t off, len; /* the string value in the span's text */
    int64_t i;
} pdr_span_attr_t;

typedef struct pdr_span_event {
    const char *name; /* a static string */
    uint64_t t_us;    /* monotonic */
} pdr_span_event_t;

typedef struct pdr_span {
    uint8_t trace_id[16], span_id[8], parent_id[8]; /* parent_id all zero: a root span */
    uint8_t kind, status, n_attrs, n_events;
    const char *name;          /* a static string */
    uint64_t start_us, end_us; /* monotonic microseconds (the exporter converts them to unix time) */
    uint16_t text_len;
    pdr_span_attr_t attrs[PDR_SPAN_ATTRS];
    pdr_span_event_t events[PDR_SPAN_EVENTS];
    char text[PDR_SPAN_TEXT];
} pdr_span_t;

/* Starts a span (every field zeroed first). */
void pdr_span_init(pdr_span_t *s, const char *name, int kind, const uint8_t trace_id[16],
                   const uint8_t span_id[8], const uint8_t *parent_id, uint64_t start_us, uint64_t end_us);
/* Attributes and events; silently left out when the span's room is full (a string is cut to fit). */
void pdr_span_attr_str(pdr_span_t *s, const char *key, const char *v, size_t len);
void pdr_span_attr_int(pdr_span_t *s, const char *key, int64_t v);
void pdr_span_event(pdr_span_t *s, const char *name, uint64_t t_us);

/* OTLP/HTTP JSON of n spans (one ExportTraceServiceRequest) appended to out, at most limit bytes.
 * mono_to_unix_ns is added to each monotonic time (in ns) to give unix time. String values are JSON-escaped;
 * bytes outside printable ASCII become '?'. Returns 0, PDR_ETOOBIG or PDR_ENOMEM. */
int pdr_otlp_encode(const pdr_span_t *spans, size_t n, const char *service_name, int64_t mono_to_unix_ns,
                    pdr_buf_t *out, size_t limit);

#endif
