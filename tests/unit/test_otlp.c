/* Unit tests for the OTLP/HTTP JSON encoder and the span records (router/obs/otlp.c, trace.h), and for the
 * phase record (router/obs/phases.c): the encoded request parses as JSON with the OTLP field names, ids in
 * lower-case hex, times as unix-nanosecond strings, int attributes as strings; escaping of quotes,
 * control and non-ASCII bytes; a root span has no parentSpanId; full attribute and text room is cut, not
 * overrun; the size limit is PDR_ETOOBIG; phases are -1 until reached and their JSON member is valid. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include "check.h"
#include "err.h"
#include "metrics.h"
#include "otlp.h"
#include "phases.h"
#include "runner.h"
#include "trace.h"

static const uint8_t TID[16] = {0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6,
                                0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36};
static const uint8_t SID[8] = {0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7};
static const uint8_t PID[8] = {0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08};

static json_t *encode(const pdr_span_t *s, size_t n, int64_t off)
{
    pdr_buf_t b = {0};
    CHECK(pdr_otlp_encode(s, n, "svc \"x\"", off, &b, 1 << 20) == 0);
    json_error_t je;
    json_t *j = json_loadb(b.p, b.len, 0, &je);
    if (j == NULL)
        fprintf(stderr, "bad JSON at %d: %s\n%.*s\n", je.position, je.text, (int)b.len, b.p);
    pdr_buf_free(&b);
    return j;
}

static json_t *spans_of(json_t *j)
{
    json_t *rs = json_array_get(json_object_get(j, "resourceSpans"), 0);
    json_t *ss = json_array_get(json_object_get(rs, "scopeSpans"), 0);
    return json_object_get(ss, "spans");
}

static const char *sget(json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

static json_t *attr(json_t *span, const char *key)
{
    json_t *a = json_object_get(span, "attributes");
    for (size_t i = 0; i < json_array_size(a); i++)
        if (strcmp(sget(json_array_get(a, i), "key"), key) == 0)
            return json_object_get(json_array_get(a, i), "value");
    return NULL;
}

static void test_encode(void)
{
    pdr_span_t s[2];
    pdr_span_init(&s[0], "POST /generate", PDR_SPAN_SERVER, TID, SID, PID, 1000, 2500);
    pdr_span_attr_str(&s[0], "pdr.pool", "default", 7);
    pdr_span_attr_int(&s[0], "http.response.status_code", 200);
    pdr_span_attr_int(&s[0], "pdr.big", -9007199254740993LL);
    pdr_span_attr_str(&s[0], "odd", "a\"b\\c\n\x01\xc3\xa9", 9);
    pdr_span_event(&s[0], "first_token", 2000);
    pdr_span_event(&s[0], "never", 0); /* a point not reached: no event */
    s[0].status = PDR_SPAN_STATUS_OK;
    static const uint8_t zero[8] = {0};
    pdr_span_init(&s[1], "decode", PDR_SPAN_CLIENT, TID, PID, zero, 3000, 2000); /* end before start */
    json_t *j = encode(s, 2, 1700000000000000000LL);
    CHECK(j != NULL);
    json_t *rs = json_array_get(json_object_get(j, "resourceSpans"), 0);
    json_t *ra = json_array_get(json_object_get(json_object_get(rs, "resource"), "attributes"), 0);
    CHECK(strcmp(sget(ra, "key"), "service.name") == 0);
    CHECK(strcmp(sget(json_object_get(ra, "value"), "stringValue"), "svc \"x\"") == 0);
    json_t *sp = spans_of(j);
    CHECK(json_array_size(sp) == 2);
    json_t *a = json_array_get(sp, 0), *b = json_array_get(sp, 1);
    CHECK(strcmp(sget(a, "traceId"), "4bf92f3577b34da6a3ce929d0e0e4736") == 0);
    CHECK(strcmp(sget(a, "spanId"), "00f067aa0ba902b7") == 0);
    CHECK(strcmp(sget(a, "parentSpanId"), "0102030405060708") == 0);
    CHECK(strcmp(sget(a, "name"), "POST /generate") == 0);
    CHECK(json_integer_value(json_object_get(a, "kind")) == PDR_SPAN_SERVER);
    CHECK(strcmp(sget(a, "startTimeUnixNano"), "1700000000001000000") == 0);
    CHECK(strcmp(sget(a, "endTimeUnixNano"), "1700000000002500000") == 0);
    CHECK(strcmp(sget(attr(a, "pdr.pool"), "stringValue"), "default") == 0);
    CHECK(strcmp(sget(attr(a, "http.response.status_code"), "intValue"), "200") == 0);
    CHECK(strcmp(sget(attr(a, "pdr.big"), "intValue"), "-9007199254740993") == 0);
    CHECK(strcmp(sget(attr(a, "odd"), "stringValue"), "a\"b\\c\n\x01??") == 0);
    json_t *ev = json_object_get(a, "events");
    CHECK(json_array_size(ev) == 1);
    CHECK(strcmp(sget(json_array_get(ev, 0), "name"), "first_token") == 0);
    CHECK(strcmp(sget(json_array_get(ev, 0), "timeUnixNano"), "1700000000002000000") == 0);
    CHECK(json_integer_value(json_object_get(json_object_get(a, "status"), "code")) == 1);
    /* A root span: no parentSpanId at all; an end before the start is clamped to the start. */
    CHECK(json_object_get(b, "parentSpanId") == NULL);
    CHECK(strcmp(sget(b, "startTimeUnixNano"), sget(b, "endTimeUnixNano")) == 0);
    CHECK(json_array_size(json_object_get(b, "attributes")) == 0);
    json_decref(j);
}

static void test_limits(void)
{
    pdr_span_t s;
    pdr_span_init(&s, "x", PDR_SPAN_INTERNAL, TID, SID, NULL, 1, 2);
    char big[PDR_SPAN_TEXT * 2];
    memset(big, 'y', sizeof(big));
    pdr_span_attr_str(&s, "a", big, 100);
    pdr_span_attr_str(&s, "b", big, sizeof(big)); /* cut to the room left */
    pdr_span_attr_str(&s, "c", big, 10);          /* no room: an empty value */
    CHECK(s.text_len == PDR_SPAN_TEXT);
    CHECK(s.attrs[1].len == PDR_SPAN_TEXT - 100 && s.attrs[2].len == 0);
    for (int i = 0; i < 40; i++)
        pdr_span_attr_int(&s, "n", i);
    CHECK(s.n_attrs == PDR_SPAN_ATTRS);
    for (int i = 0; i < 10; i++)
        pdr_span_event(&s, "e", 5);
    CHECK(s.n_events == PDR_SPAN_EVENTS);
    json_t *j = encode(&s, 1, 0);
    CHECK(j != NULL &&
          json_array_size(json_object_get(json_array_get(spans_of(j), 0), "attributes")) == PDR_SPAN_ATTRS);
    json_decref(j);
    /* The byte limit: PDR_ETOOBIG, never more than asked. */
    pdr_buf_t b = {0};
    CHECK(pdr_otlp_encode(&s, 1, "pdrouter", 0, &b, 200) == PDR_ETOOBIG);
    CHECK(b.len <= 200);
    pdr_buf_free(&b);
    /* No spans: a valid, empty request. */
    j = encode(NULL, 0, 0);
    CHECK(j != NULL && json_array_size(spans_of(j)) == 0);
    json_decref(j);
}

static void test_phases(void)
{
    pdr_phase_metrics_t *m = calloc(1, sizeof(*m));
    pdr_phase_t p;
    pdr_phase_init(&p, m, 1000);
    for (int i = 0; i < PDR_PHASE__COUNT; i++)
        CHECK(pdr_phase_duration(&p, (pdr_phase_id_t)i) == -1);
    p.sent_us = 1100;
    p.prefill_sent_us = 1100;
    p.prefill_done_us = 1900;
    p.decode_sent_us = 1105;
    p.decode_headers_us = 1200;
    p.decode_first_byte_us = 1950;
    p.first_token_us = 1960;
    p.last_token_us = 3000;
    CHECK(pdr_phase_duration(&p, PDR_PHASE_QUEUE) == 100);
    CHECK(pdr_phase_duration(&p, PDR_PHASE_PREFILL) == 800);
    CHECK(pdr_phase_duration(&p, PDR_PHASE_DECODE_ADMISSION) == 95);
    CHECK(pdr_phase_duration(&p, PDR_PHASE_DECODE_FIRST_TOKEN) == 950);
    CHECK(pdr_phase_duration(&p, PDR_PHASE_FIRST_TOKEN) == 960);
    CHECK(pdr_phase_duration(&p, PDR_PHASE_LAST_TOKEN) == 2000);
    CHECK(pdr_phase_duration(&p, PDR_PHASE_KV_TRANSFER) == -1);
    pdr_phase_kv(&p, 5000000, 5000400, 1 << 20, "rdma", 0, NULL);
    CHECK(pdr_phase_duration(&p, PDR_PHASE_KV_TRANSFER) == 400);
    CHECK(m->kv_seconds[PDR_KVB_RDMA].count == 1 && m->kv_bytes[PDR_KVB_RDMA].count == 1);
    CHECK(m->kv_bytes[PDR_KVB_RDMA].sum == (double)(1 << 20));
    pdr_phase_kv(&p, 10, 5, 7, "smoke\"signal", -3, "peer \"gone\"");
    CHECK(m->kv_failed[PDR_KVB_OTHER] == 1 && pdr_phase_duration(&p, PDR_PHASE_KV_TRANSFER) == -1);
    char out[512];
    int n = pdr_phase_format_json(&p, out + 1, sizeof(out) - 2);
    CHECK(n > 0 && (size_t)n < sizeof(out) - 2);
    out[0] = '{';
    out[n + 1] = '}';
    out[n + 2] = '\0';
    json_t *j = json_loads(out, 0, NULL);
    CHECK(j != NULL);
    json_t *ph = json_object_get(j, "phases_us");
    CHECK(json_integer_value(json_object_get(ph, "queue")) == 100);
    CHECK(json_integer_value(json_object_get(ph, "last_token")) == 2000);
    CHECK(json_object_get(ph, "kv_transfer") == NULL);
    CHECK(strcmp(sget(json_object_get(j, "kv"), "backend"), "smoke_signal") == 0);
    CHECK(strcmp(sget(json_object_get(j, "kv"), "cause"), "peer _gone_") == 0);
    json_decref(j);
    /* A short buffer: the full length is returned, nothing written past cap. */
    char tiny[8];
    CHECK(pdr_phase_format_json(&p, tiny, sizeof(tiny)) == n);
    /* Solo attempts have no prefill phase; a new attempt forgets the legs. */
    p.solo = 1;
    CHECK(pdr_phase_duration(&p, PDR_PHASE_PREFILL) == -1);
    pdr_phase_attempt(&p);
    CHECK(pdr_phase_duration(&p, PDR_PHASE_QUEUE) == -1 &&
          pdr_phase_duration(&p, PDR_PHASE_DECODE_ADMISSION) == -1);
    /* Per-pool series by name. */
    pdr_phase_observe_llm(m, 1, "alpha", 0.2, -1);
    pdr_phase_observe_llm(m, 1, "alpha", 0.3, 0.01);
    pdr_phase_observe_llm(m, 2, "beta", 0.1, -1);
    CHECK(m->n_pools == 2 && m->ttft[1][0].count == 2 && m->tpot[1][0].count == 1 &&
          m->ttft[2][1].count == 1);
    /* Buckets: a bound is inclusive (le), past the last is +Inf. */
    pdr_phase_observe_llm(m, 0, "edges", 0.005, 1.0);
    pdr_phase_observe_llm(m, 0, "edges", 0.0051, 1.01);
    pdr_phase_observe_llm(m, 0, "edges", 120, -1);
    pdr_phase_observe_llm(m, 0, "edges", 121, -1);
    CHECK(m->ttft[0][2].counts[0] == 1 && m->ttft[0][2].counts[1] == 1);
    CHECK(m->ttft[0][2].counts[PDR_HIST_BUCKETS - 1] == 1 && m->ttft[0][2].counts[PDR_HIST_BUCKETS] == 1);
    CHECK(m->tpot[0][2].counts[PDR_HIST_BUCKETS - 1] == 1 && m->tpot[0][2].counts[PDR_HIST_BUCKETS] == 1);
    pdr_phase_observe_llm(m, 7, "alpha", 0.1, 0.1); /* not a PD route */
    CHECK(m->ttft[1][0].count == 2);
    free(m);
    /* pdr_hist_bucket against the count of bounds below v: every bound, each side of it, the ends. */
    double bounds[PDR_HIST_BUCKETS];
    for (int i = 0; i < PDR_HIST_BUCKETS; i++)
        bounds[i] = 0.5 * (i + 1) * (i + 1);
    int bad = 0;
    for (int k = -2; k <= 4 * PDR_HIST_BUCKETS * PDR_HIST_BUCKETS; k++) {
        double v = 0.125 * k;
        unsigned want = 0;
        while (want < PDR_HIST_BUCKETS && v > bounds[want])
            want++;
        bad += pdr_hist_bucket(bounds, v) != want;
    }
    CHECK(bad == 0 && pdr_hist_bucket(bounds, 1e300) == PDR_HIST_BUCKETS &&
          pdr_hist_bucket(bounds, -1e300) == 0);
}

static const pdr_test_case_t cases[] = {
    {"encode", test_encode, 60},
    {"limits", test_limits, 60},
    {"phases", test_phases, 60},
};

int main(int argc, char **argv)
{
    return PDR_TEST_RUN(cases, argc, argv);
}
