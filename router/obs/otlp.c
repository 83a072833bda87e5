/*
 * Span records and their OTLP/HTTP JSON encoding (otlp.h). Pure functions: no lock, no clock, no I/O;
 * the span helpers run on loop threads, the encoder on the exporter thread. Unit-tested in
 * tests/unit/test_otlp.c.
 *
 * The encoding follows the OTLP/HTTP specification's JSON form of ExportTraceServiceRequest: trace and
 * span ids as lower-case hex (not base64), enum values as integers, 64-bit integers (times, intValue)
 * as decimal strings, field names in lowerCamelCase.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include "err.h"
#include "otlp.h"
#include "util.h"

void pdr_span_init(pdr_span_t *s, const char *name, int kind, const uint8_t trace_id[16],
                   const uint8_t span_id[8], const uint8_t *parent_id, uint64_t start_us, uint64_t end_us)
{
    memset(s, 0, offsetof(pdr_span_t, text));
    s->name = name;
    s->kind = (uint8_t)kind;
    memcpy(s->trace_id, trace_id, 16);
    memcpy(s->span_id, span_id, 8);
    if (parent_id != NULL)
        memcpy(s->parent_id, parent_id, 8);
    s->start_us = start_us;
    s->end_us = end_us >= start_us ? end_us : start_us;
}

void pdr_span_attr_str(pdr_span_t *s, const char *key, const char *v, size_t len)
{
    if (s->n_attrs >= PDR_SPAN_ATTRS || v == NULL)
        return;
    size_t room = PDR_SPAN_TEXT - s->text_len;
    if (len > room)
        len = room;
    pdr_span_attr_t *a = &s->attrs[s->n_attrs++];
    a->key = key;
    a->is_int = 0;
    a->off = s->text_len;
    a->len = (uint16_t)len;
    memcpy(s->text + s->text_len, v, len);
    s->text_len = (uint16_t)(s->text_len + len);
}

void pdr_span_attr_int(pdr_span_t *s, const char *key, int64_t v)
{
    if (s->n_attrs >= PDR_SPAN_ATTRS)
        return;
    pdr_span_attr_t *a = &s->attrs[s->n_attrs++];
    a->key = key;
    a->is_int = 1;
    a->i = v;
    a->off = a->len = 0;
}

void pdr_span_event(pdr_span_t *s, const char *name, uint64_t t_us)
{
    if (s->n_events >= PDR_SPAN_EVENTS || t_us == 0)
        return;
    s->events[s->n_events].name = name;
    s->events[s->n_events].t_us = t_us;
    s->n_events++;
}

/* ---- encoding ---- */

typedef struct enc {
    pdr_buf_t *b;
    size_t limit;
    int rc;
} enc_t;

static void raw(enc_t *e, const char *p, size_t n)
{
    if (e->rc == 0)
        e->rc = pdr_buf_append(e->b, p, n, e->limit);
}

#define LIT(e, s) raw((e), (s), sizeof(s) - 1)

/* A JSON string: quotes, escapes, and '?' for bytes outside printable ASCII. */
static void str(enc_t *e, const char *p, size_t n)
{
    char tmp[256];
    size_t k = 0;
    tmp[k++] = '"';
    for (size_t i = 0; i < n; i++) {
        if (k > sizeof(tmp) - 8) {
            raw(e, tmp, k);
            k = 0;
        }
        unsigned char c = (unsigned char)p[i];
        if (c == '"' || c == '\\') {
            tmp[k++] = '\\';
            tmp[k++] = (char)c;
        } else if (c == '\n') {
            tmp[k++] = '\\';
            tmp[k++] = 'n';
        } else if (c < 0x20) {
            k += (size_t)snprintf(tmp + k, sizeof(tmp) - k, "\\u%04x", c);
        } else {
            tmp[k++] = c < 0x7f ? (char)c : '?';
        }
    }
    tmp[k++] = '"';
    raw(e, tmp, k);
}

static void cstr(enc_t *e, const char *s)
{
    str(e, s, strlen(s));
}

static void hex(enc_t *e, const uint8_t *p, size_t n)
{
    char h[40];
    h[0] = '"';
    pdr_hex(p, n, h + 1);
    h[1 + 2 * n] = '"';
    raw(e, h, 2 + 2 * n);
}

/* A monotonic time in µs as a unix-nanosecond string. */
static void time_ns(enc_t *e, uint64_t mono_us, int64_t offset_ns)
{
    char t[32];
    int64_t ns = (int64_t)(mono_us * 1000u) + offset_ns;
    int n = snprintf(t, sizeof(t), "\"%" PRIu64 "\"", ns > 0 ? (uint64_t)ns : 0);
    raw(e, t, (size_t)n);
}

static int all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0)
            return 0;
    return 1;
}

static void span(enc_t *e, const pdr_span_t *s, int64_t offset_ns)
{
    char num[48];
    LIT(e, "{\"traceId\":");
    hex(e, s->trace_id, 16);
    LIT(e, ",\"spanId\":");
    hex(e, s->span_id, 8);
    if (!all_zero(s->parent_id, 8)) {
        LIT(e, ",\"parentSpanId\":");
        hex(e, s->parent_id, 8);
    }
    LIT(e, ",\"name\":");
    cstr(e, s->name != NULL ? s->name : "span");
    int n = snprintf(num, sizeof(num), ",\"kind\":%d,\"startTimeUnixNano\":", s->kind);
    raw(e, num, (size_t)n);
    time_ns(e, s->start_us, offset_ns);
    LIT(e, ",\"endTimeUnixNano\":");
    time_ns(e, s->end_us, offset_ns);
    LIT(e, ",\"attributes\":[");
    for (size_t i = 0; i < s->n_attrs && i < PDR_SPAN_ATTRS; i++) {
        const pdr_span_attr_t *a = &s->attrs[i];
        if (i > 0)
            LIT(e, ",");
        LIT(e, "{\"key\":");
        cstr(e, a->key);
        if (a->is_int) {
            n = snprintf(num, sizeof(num), ",\"value\":{\"intValue\":\"%" PRId64 "\"}}", a->i);
            raw(e, num, (size_t)n);
        } else {
            LIT(e, ",\"value\":{\"stringValue\":");
            size_t off = a->off < PDR_SPAN_TEXT ? a->off : PDR_SPAN_TEXT;
            size_t len = a->len <= PDR_SPAN_TEXT - off ? a->len : PDR_SPAN_TEXT - off;
            str(e, s->text + off, len);
            LIT(e, "}}");
        }
    }
    LIT(e, "],\"events\":[");
    for (size_t i = 0; i < s->n_events && i < PDR_SPAN_EVENTS; i++) {
        if (i > 0)
            LIT(e, ",");
        LIT(e, "{\"timeUnixNano\":");
        time_ns(e, s->events[i].t_us, offset_ns);
        LIT(e, ",\"name\":");
        cstr(e, s->events[i].name != NULL ? s->events[i].name : "event");
        LIT(e, "}");
    }
    n = snprintf(num, sizeof(num), "],\"status\":{\"code\":%d}}", s->status);
    raw(e, num, (size_t)n);
}

int pdr_otlp_encode(const pdr_span_t *spans, size_t n, const char *service_name, int64_t mono_to_unix_ns,
                    pdr_buf_t *out, size_t limit)
{
    enc_t e = {out, limit, 0};
    LIT(&e, "{\"resourceSpans\":[{\"resource\":{\"attributes\":[{\"key\":\"service.name\",\"value\":{"
            "\"stringValue\":");
    cstr(&e, service_name != NULL ? service_name : "pdrouter");
    LIT(&e, "}}]},\"scopeSpans\":[{\"scope\":{\"name\":\"pdrouter\"},\"spans\":[");
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            LIT(&e, ",");
        span(&e, &spans[i], mono_to_unix_ns);
    }
    LIT(&e, "]}]}]}");
    return e.rc;
}
