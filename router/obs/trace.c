/*
 * The trace exporter (trace.h): a bounded queue of spans filled by the loop threads under a short mutex,
 * and one exporter thread that batches, encodes (otlp.c) and ships them with libcurl and/or to a file.
 * Nothing here runs on a loop thread except pdr_trace_submit() and pdr_trace_sample_new(), which never
 * block on I/O: a collector that is down or slow delays no request.
 */
#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "config.h"
#include "err.h"
#include "otlp.h"
#include "trace.h"
#include "util.h"

#define BACKOFF_FIRST_MS 100
#define BACKOFF_MAX_MS 5000
#define EXPORT_TRIES 5
#define BODY_LIMIT ((size_t)256 << 20) /* an encoded batch: 64 Ki spans of < 4 KiB */

enum { DROP_QUEUE_FULL = 0, DROP_EXPORT_FAILED, DROP__COUNT };

typedef struct tracer {
    pthread_t tid;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pdr_span_t *ring; /* queue_max slots */
    size_t cap, head, len;
    int stopping;
    int give_up; /* exporter thread only: an export failed while stopping; the rest is dropped unsent */
    /* settings, copied at start */
    char *endpoint, *file_path, *service;
    double ratio;
    size_t batch_max;
    int flush_ms, timeout_ms;
    FILE *file;
    /* counters (atomic) */
    uint64_t exported, dropped[DROP__COUNT], failures, retries, file_failures;
} tracer_t;

static tracer_t *T; /* set before the thread starts, cleared after it is joined */

int pdr_trace_on(void)
{
    return __atomic_load_n(&T, __ATOMIC_ACQUIRE) != NULL;
}

int pdr_trace_sample_new(void)
{
    tracer_t *t = __atomic_load_n(&T, __ATOMIC_ACQUIRE);
    if (t == NULL || t->ratio >= 1.0)
        return 1;
    if (t->ratio <= 0.0)
        return 0;
    /* 53 random bits as a uniform double in [0, 1). */
    return (double)(pdr_random_u64() >> 11) * (1.0 / 9007199254740992.0) < t->ratio;
}

void pdr_trace_submit(const pdr_span_t *spans, size_t n)
{
    tracer_t *t = __atomic_load_n(&T, __ATOMIC_ACQUIRE);
    if (t == NULL || n == 0)
        return;
    size_t taken = 0;
    int wake = 0;
    pthread_mutex_lock(&t->mu);
    if (!t->stopping) {
        for (; taken < n && t->len < t->cap; taken++) {
            t->ring[(t->head + t->len) % t->cap] = spans[taken];
            t->len++;
        }
        wake = t->len >= t->batch_max;
    }
    pthread_mutex_unlock(&t->mu);
    if (wake)
        pthread_cond_signal(&t->cv);
    if (taken < n)
        __atomic_add_fetch(&t->dropped[DROP_QUEUE_FULL], n - taken, __ATOMIC_RELAXED);
}

/* Unix time minus monotonic time, in ns: added to the spans' monotonic times. */
static int64_t clock_offset_ns(void)
{
    struct timespec rt, mt;
    clock_gettime(CLOCK_REALTIME, &rt);
    clock_gettime(CLOCK_MONOTONIC, &mt);
    return ((int64_t)rt.tv_sec - (int64_t)mt.tv_sec) * 1000000000 +
           ((int64_t)rt.tv_nsec - (int64_t)mt.tv_nsec);
}

static size_t discard_cb(char *p, size_t size, size_t n, void *arg)
{
    (void)p;
    (void)arg;
    return size * n;
}

/* One POST. 0: accepted; 1: failed, worth a retry; -1: failed for good (the collector refused it). */
static int post(tracer_t *t, CURL *h, const pdr_buf_t *body)
{
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body->p);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body->len);
    CURLcode rc = curl_easy_perform(h);
    if (rc != CURLE_OK) {
        pdr_debug("trace export to %s: %s", t->endpoint, curl_easy_strerror(rc));
        return 1;
    }
    long st = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &st);
    if (st >= 200 && st < 300)
        return 0;
    pdr_debug("trace export to %s: HTTP %ld", t->endpoint, st);
    /* The OTLP/HTTP specification's retryable answers. */
    return st == 429 || st == 502 || st == 503 || st == 504 ? 1 : -1;
}

/* Waits ms unless the exporter is stopping (then returns at once) or, with on_batch, a batch is full.
 * Called with the lock held. */
static void wait_ms(tracer_t *t, int ms, int on_batch)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    while (!t->stopping && pthread_cond_timedwait(&t->cv, &t->mu, &until) != ETIMEDOUT) {
        if (on_batch && t->len >= t->batch_max)
            break;
    }
}

static void ship(tracer_t *t, CURL *h, const pdr_span_t *batch, size_t n, pdr_buf_t *body)
{
    body->len = 0;
    if (pdr_otlp_encode(batch, n, t->service, clock_offset_ns(), body, BODY_LIMIT) != 0) {
        __atomic_add_fetch(&t->dropped[DROP_EXPORT_FAILED], n, __ATOMIC_RELAXED);
        return;
    }
    int ok = 1;
    if (t->file != NULL) {
        if (fwrite(body->p, 1, body->len, t->file) != body->len || fputc('\n', t->file) == EOF ||
            fflush(t->file) != 0) {
            __atomic_add_fetch(&t->file_failures, 1, __ATOMIC_RELAXED);
            ok = 0;
        }
    }
    if (h != NULL && t->give_up) {
        ok = 0; /* stopping, and the collector just failed: the rest is not sent (a bounded shutdown) */
    } else if (h != NULL) {
        int backoff = BACKOFF_FIRST_MS;
        for (int k = 0;; k++) {
            int r = post(t, h, body);
            if (r == 0)
                break;
            __atomic_add_fetch(&t->failures, 1, __ATOMIC_RELAXED);
            pthread_mutex_lock(&t->mu);
            int stopping = t->stopping;
            if (r > 0 && k + 1 < EXPORT_TRIES && !stopping)
                wait_ms(t, backoff, 0); /* spans keep queueing meanwhile (and drop when it is full) */
            pthread_mutex_unlock(&t->mu);
            if (r < 0 || k + 1 >= EXPORT_TRIES || stopping) {
                ok = 0;
                t->give_up = stopping;
                break;
            }
            __atomic_add_fetch(&t->retries, 1, __ATOMIC_RELAXED);
            backoff = backoff * 2 < BACKOFF_MAX_MS ? backoff * 2 : BACKOFF_MAX_MS;
        }
    }
    __atomic_add_fetch(ok ? &t->exported : &t->dropped[DROP_EXPORT_FAILED], n, __ATOMIC_RELAXED);
}

static void *exporter_main(void *arg)
{
    tracer_t *t = arg;
    CURL *h = NULL;
    struct curl_slist *hdrs = NULL;
    if (t->endpoint != NULL) {
        h = curl_easy_init();
        hdrs = curl_slist_append(NULL, "Content-Type: application/json");
        struct curl_slist *more = hdrs != NULL ? curl_slist_append(hdrs, "Expect:") : NULL;
        if (h == NULL || more == NULL) {
            pdr_error("tracing: out of memory for the OTLP exporter; spans go to the file only");
            if (h != NULL)
                curl_easy_cleanup(h);
            h = NULL;
        } else {
            hdrs = more;
            curl_easy_setopt(h, CURLOPT_URL, t->endpoint);
            curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
            curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
            curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)t->timeout_ms);
            curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)t->timeout_ms);
            curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard_cb);
            curl_easy_setopt(h, CURLOPT_POST, 1L);
        }
    }
    pdr_span_t *batch = malloc(t->batch_max * sizeof(*batch));
    pdr_buf_t body = {0};
    pthread_mutex_lock(&t->mu);
    for (;;) {
        if (t->len < t->batch_max && !t->stopping)
            wait_ms(t, t->flush_ms, 1);
        if (t->len == 0) {
            if (t->stopping)
                break;
            continue;
        }
        size_t n = t->len < t->batch_max ? t->len : t->batch_max;
        if (batch == NULL) { /* no memory for a batch: what is queued is lost */
            __atomic_add_fetch(&t->dropped[DROP_EXPORT_FAILED], n, __ATOMIC_RELAXED);
        } else {
            for (size_t i = 0; i < n; i++)
                batch[i] = t->ring[(t->head + i) % t->cap];
        }
        t->head = (t->head + n) % t->cap;
        t->len -= n;
        pthread_mutex_unlock(&t->mu);
        if (batch != NULL)
            ship(t, h, batch, n, &body);
        pthread_mutex_lock(&t->mu);
    }
    pthread_mutex_unlock(&t->mu);
    free(batch);
    pdr_buf_free(&body);
    if (h != NULL)
        curl_easy_cleanup(h);
    curl_slist_free_all(hdrs);
    return NULL;
}

static void tracer_free(tracer_t *t)
{
    if (t->file != NULL)
        fclose(t->file);
    free(t->ring);
    free(t->endpoint);
    free(t->file_path);
    free(t->service);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t);
}

static char *dup_or_null(const char *s)
{
    return s != NULL ? strdup(s) : NULL;
}

int pdr_trace_start(const pdr_config_t *c, char *err, size_t errlen)
{
    if (T != NULL || (c->tracing.otlp_endpoint == NULL && c->tracing.file == NULL))
        return 0;
    tracer_t *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        snprintf(err, errlen, "tracing: out of memory");
        return PDR_ENOMEM;
    }
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    t->cap = (size_t)c->tracing.queue_max;
    t->batch_max = (size_t)c->tracing.batch_max < t->cap ? (size_t)c->tracing.batch_max : t->cap;
    t->flush_ms = c->tracing.flush_ms;
    t->timeout_ms = c->tracing.timeout_ms;
    t->ratio = c->tracing.sample_ratio;
    t->ring = calloc(t->cap, sizeof(*t->ring));
    t->endpoint = dup_or_null(c->tracing.otlp_endpoint);
    t->file_path = dup_or_null(c->tracing.file);
    t->service = strdup(c->tracing.service_name != NULL ? c->tracing.service_name : "pdrouter");
    if (t->ring == NULL || t->service == NULL || (c->tracing.otlp_endpoint != NULL && t->endpoint == NULL) ||
        (c->tracing.file != NULL && t->file_path == NULL)) {
        tracer_free(t);
        snprintf(err, errlen, "tracing: out of memory for a queue of %d spans (tracing.queue_max)",
                 c->tracing.queue_max);
        return PDR_ENOMEM;
    }
    if (t->file_path != NULL) {
        t->file = fopen(t->file_path, "ae");
        if (t->file == NULL) {
            snprintf(err, errlen, "tracing.file: cannot open %s: %s", t->file_path, strerror(errno));
            tracer_free(t);
            return PDR_EINVAL;
        }
    }
    __atomic_store_n(&T, t, __ATOMIC_RELEASE);
    if (pthread_create(&t->tid, NULL, exporter_main, t) != 0) {
        __atomic_store_n(&T, NULL, __ATOMIC_RELEASE);
        tracer_free(t);
        snprintf(err, errlen, "tracing: cannot start the exporter thread");
        return PDR_ENOMEM;
    }
    pdr_info("tracing: exporting spans to %s%s%s (sample_ratio %g, batch %zu, queue %zu)",
             t->endpoint != NULL ? t->endpoint : "",
             t->endpoint != NULL && t->file_path != NULL ? " and " : "",
             t->file_path != NULL ? t->file_path : "", t->ratio, t->batch_max, t->cap);
    return 0;
}

void pdr_trace_stop(void)
{
    tracer_t *t = T;
    if (t == NULL)
        return;
    pthread_mutex_lock(&t->mu);
    t->stopping = 1;
    pthread_mutex_unlock(&t->mu);
    pthread_cond_broadcast(&t->cv);
    pthread_join(t->tid, NULL);
    __atomic_store_n(&T, NULL, __ATOMIC_RELEASE);
    tracer_free(t);
}

void pdr_trace_metrics(pdr_trace_put_cb put, void *o)
{
    tracer_t *t = __atomic_load_n(&T, __ATOMIC_ACQUIRE);
    uint64_t exported = 0, q = 0, f = 0, failures = 0, retries = 0, ff = 0;
    if (t != NULL) {
        exported = __atomic_load_n(&t->exported, __ATOMIC_RELAXED);
        q = __atomic_load_n(&t->dropped[DROP_QUEUE_FULL], __ATOMIC_RELAXED);
        f = __atomic_load_n(&t->dropped[DROP_EXPORT_FAILED], __ATOMIC_RELAXED);
        failures = __atomic_load_n(&t->failures, __ATOMIC_RELAXED);
        retries = __atomic_load_n(&t->retries, __ATOMIC_RELAXED);
        ff = __atomic_load_n(&t->file_failures, __ATOMIC_RELAXED);
    }
    put(o,
        "# HELP pdr_trace_spans_exported_total Spans exported (accepted by the collector, or written to "
        "tracing.file).\n# TYPE pdr_trace_spans_exported_total counter\npdr_trace_spans_exported_total "
        "%llu\n",
        (unsigned long long)exported);
    put(o,
        "# HELP pdr_trace_spans_dropped_total Spans not exported, by reason: the queue was full "
        "(tracing.queue_max), or their batch failed every try.\n# TYPE pdr_trace_spans_dropped_total "
        "counter\n"
        "pdr_trace_spans_dropped_total{reason=\"queue_full\"} %llu\n"
        "pdr_trace_spans_dropped_total{reason=\"export_failed\"} %llu\n",
        (unsigned long long)q, (unsigned long long)f);
    put(o,
        "# HELP pdr_trace_export_failures_total Export requests to tracing.otlp_endpoint that failed "
        "(connection, timeout, or a non-2xx answer), and writes to tracing.file that failed.\n"
        "# TYPE pdr_trace_export_failures_total counter\n"
        "pdr_trace_export_failures_total{sink=\"otlp\"} %llu\npdr_trace_export_failures_total{sink=\"file\"} "
        "%llu\n",
        (unsigned long long)failures, (unsigned long long)ff);
    put(o,
        "# HELP pdr_trace_export_retries_total Export requests sent again after a failure (back-off 100 ms "
        "doubling to 5 s).\n# TYPE pdr_trace_export_retries_total counter\npdr_trace_export_retries_total "
        "%llu\n",
        (unsigned long long)retries);
}
