/*
 * Trace spans of PD requests and their export (docs/internals/tracing.md). A request's spans hang under
 * the client's W3C trace context (fwdheaders.h): a root span for the request, a child per leg whose span
 * id is the one the worker received in its traceparent (so the worker's own spans hang under it), and
 * children for the queue and the KV transfer, with span events for the first and last token.
 *
 * Loop threads build fixed-size pdr_span_t records (no allocation) and hand them to pdr_trace_submit(),
 * which copies them into a bounded queue under a short lock; spans that find it full are dropped and
 * counted. One exporter thread (never a loop thread) takes batches of up to tracing.batch_max spans,
 * every tracing.flush_ms or sooner when a batch is full, encodes them as OTLP/HTTP JSON
 * (ExportTraceServiceRequest: resourceSpans / scopeSpans / spans, ids in hex, times as unix-nanosecond
 * strings) and POSTs them with libcurl to tracing.otlp_endpoint and/or appends them, one JSON object per
 * line, to tracing.file. A failed POST is counted and retried with back-off (100 ms doubling to 5 s, at
 * most 5 tries; only for connection failures, timeouts and 429/502/503/504, as the OTLP specification
 * asks), then the batch is dropped and counted.
 */
#ifndef PDR_TRACE_H
#define PDR_TRACE_H

#include <stddef.h>
#include <stdint.h>
#include "buf.h"

struct pdr_config;

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

/* ---- the exporter (one per process) ---- */

/* Starts the exporter thread when c sets tracing.otlp_endpoint or tracing.file (else does nothing).
 * Returns 0, or a PDR_E* code with a message in err (the file cannot be opened). */
int pdr_trace_start(const struct pdr_config *c, char *err, size_t errlen);
/* Exports what is queued (one try, bounded by tracing.timeout_ms), stops the thread. */
void pdr_trace_stop(void);
/* 1 while an exporter runs. */
int pdr_trace_on(void);
/* Whether a new trace (no client traceparent) is recorded: tracing.sample_ratio, or 1 without an
 * exporter (the flag then tells the workers to sample, as before tracing existed). Any thread. */
int pdr_trace_sample_new(void);
/* Copies n spans into the queue (any thread). Those that do not fit are dropped and counted. */
void pdr_trace_submit(const pdr_span_t *spans, size_t n);

typedef void (*pdr_trace_put_cb)(void *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The exporter's counters (pdr_trace_spans_*_total, pdr_trace_export_*_total). */
void pdr_trace_metrics(pdr_trace_put_cb put, void *o);

#endif
