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
#include "otlp.h"

struct pdr_config;

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
