/*
 * The endpoint picker's counters (gateway_internal.h) and their /metrics families (gateway.h). Any loop
 * counts and renders; the server whose gRPC counters are shown is set on loop 0.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "gateway_internal.h"
#include "util.h"

static uint64_t outcomes[GW__OUTCOMES];  /* atomic */
static uint64_t served[4];               /* atomic: first, fallback, other, absent */
static int64_t streams_open;             /* atomic */
static uint64_t pick_us_buckets[10];     /* atomic: the pick's latency (the body's end to the answer) */
static uint64_t pick_us_sum, pick_count; /* atomic */
/* The gRPC server's counters as loop 0 last copied them (they are its loop's own): what any loop's
 * /metrics shows, at most one health tick old. */
static pdr_epp_stats_t grpc_stats;
static pthread_mutex_t grpc_stats_lock = PTHREAD_MUTEX_INITIALIZER;
static const uint64_t pick_us_le[9] = {25, 50, 100, 250, 500, 1000, 2500, 10000, 100000};

void pdr__gw_count(int outcome)
{
    __atomic_add_fetch(&outcomes[outcome], 1, __ATOMIC_RELAXED);
}

void pdr__gw_streams(int delta)
{
    __atomic_add_fetch(&streams_open, delta, __ATOMIC_RELAXED);
}

void pdr__gw_stats_copy(const pdr_epp_t *a, const pdr_epp_t *b)
{
    pdr_epp_stats_t s, t;
    memset(&s, 0, sizeof(s));
    memset(&t, 0, sizeof(t));
    if (a != NULL)
        pdr_epp_stats(a, &s);
    if (b != NULL)
        pdr_epp_stats(b, &t);
    uint64_t *x = (uint64_t *)&s;
    const uint64_t *y = (const uint64_t *)&t;
    for (size_t i = 0; i < sizeof(s) / sizeof(uint64_t); i++) /* the two servers' counts together */
        x[i] += y[i];
    pthread_mutex_lock(&grpc_stats_lock);
    grpc_stats = s;
    pthread_mutex_unlock(&grpc_stats_lock);
}

void pdr__gw_count_served(int k)
{
    __atomic_add_fetch(&served[k], 1, __ATOMIC_RELAXED);
}

void pdr__gw_observe(uint64_t t0_ns)
{
    uint64_t us = (pdr_now_ns() - t0_ns) / 1000;
    size_t b = 0;
    while (b < 9 && us > pick_us_le[b])
        b++;
    __atomic_add_fetch(&pick_us_buckets[b], 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&pick_us_sum, us, __ATOMIC_RELAXED);
    __atomic_add_fetch(&pick_count, 1, __ATOMIC_RELAXED);
}

typedef struct {
    pdr_buf_t b;
    int err;
} out_t;

static void put(out_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out_t *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (!o->err && pdr_buf_vprintf(&o->b, (size_t)1 << 20, fmt, ap) != 0)
        o->err = 1;
    va_end(ap);
}

char *pdr_gateway_render_metrics(size_t *len)
{
    static const char *const names[GW__OUTCOMES] = {"picked", "no_decode",   "no_prefill", "shed",
                                                    "busy",   "bad_request", "not_found",  "too_large"};
    static const char *const snames[4] = {"first", "fallback", "other", "absent"};
    out_t b = {{NULL, 0, 0}, 0};
    put(&b, "# HELP pdr_epp_requests_total Requests the endpoint picker answered, by outcome.\n"
            "# TYPE pdr_epp_requests_total counter\n");
    for (int i = 0; i < GW__OUTCOMES; i++)
        put(&b, "pdr_epp_requests_total{outcome=\"%s\"} %llu\n", names[i],
            (unsigned long long)__atomic_load_n(&outcomes[i], __ATOMIC_RELAXED));
    put(&b, "# HELP pdr_epp_served_total Picked requests by the endpoint the gateway says served them: the "
            "first named, a fall-back the answer listed, another, or not said.\n"
            "# TYPE pdr_epp_served_total counter\n");
    for (int i = 0; i < 4; i++)
        put(&b, "pdr_epp_served_total{endpoint=\"%s\"} %llu\n", snames[i],
            (unsigned long long)__atomic_load_n(&served[i], __ATOMIC_RELAXED));
    put(&b, "# HELP pdr_epp_pick_seconds From the request's last body chunk (or its headers) to the pick's "
            "answer, admission's wait included.\n# TYPE pdr_epp_pick_seconds histogram\n");
    uint64_t cum = 0;
    for (int i = 0; i < 9; i++) {
        cum += __atomic_load_n(&pick_us_buckets[i], __ATOMIC_RELAXED);
        put(&b, "pdr_epp_pick_seconds_bucket{le=\"%g\"} %llu\n", (double)pick_us_le[i] / 1e6,
            (unsigned long long)cum);
    }
    cum += __atomic_load_n(&pick_us_buckets[9], __ATOMIC_RELAXED);
    put(&b,
        "pdr_epp_pick_seconds_bucket{le=\"+Inf\"} %llu\npdr_epp_pick_seconds_sum %.6f\n"
        "pdr_epp_pick_seconds_count %llu\n",
        (unsigned long long)cum, (double)__atomic_load_n(&pick_us_sum, __ATOMIC_RELAXED) / 1e6,
        (unsigned long long)__atomic_load_n(&pick_count, __ATOMIC_RELAXED));
    pthread_mutex_lock(&grpc_stats_lock);
    pdr_epp_stats_t st = grpc_stats;
    pthread_mutex_unlock(&grpc_stats_lock);
    put(&b,
        "# HELP pdr_epp_streams_open ext_proc streams open now.\n# TYPE pdr_epp_streams_open gauge\n"
        "pdr_epp_streams_open %lld\n",
        (long long)__atomic_load_n(&streams_open, __ATOMIC_RELAXED));
    put(&b,
        "# HELP pdr_epp_grpc_total The gRPC server's counts: connections accepted and refused, calls, "
        "unknown methods, invalid or oversized messages, protocol errors.\n# TYPE pdr_epp_grpc_total "
        "counter\n"
        "pdr_epp_grpc_total{what=\"connections\"} %llu\npdr_epp_grpc_total{what=\"refused_connections\"} "
        "%llu\n"
        "pdr_epp_grpc_total{what=\"calls\"} %llu\npdr_epp_grpc_total{what=\"unimplemented\"} %llu\n"
        "pdr_epp_grpc_total{what=\"invalid\"} %llu\npdr_epp_grpc_total{what=\"too_big\"} %llu\n"
        "pdr_epp_grpc_total{what=\"protocol_errors\"} %llu\npdr_epp_grpc_total{what=\"malformed\"} %llu\n",
        (unsigned long long)st.connections, (unsigned long long)st.refused_connections,
        (unsigned long long)st.calls, (unsigned long long)st.unimplemented, (unsigned long long)st.invalid,
        (unsigned long long)st.too_big, (unsigned long long)st.protocol_errors,
        (unsigned long long)st.malformed);
    if (b.err) {
        pdr_buf_free(&b.b);
        return NULL;
    }
    *len = b.b.len;
    return b.b.p;
}
