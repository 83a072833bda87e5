/*
 * Per-request phase timing: the durations derived from a request's timestamps, the KV transfer the shims
 * report, their access-log member and their Prometheus families. Every function but the renderer runs on
 * the request's loop thread and touches only that loop's set; the renderer sums the loops' sets without
 * locks (a scrape may see a count a moment old, as everywhere in metrics.c).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include "phases.h"

const char *const pdr_phase_names[PDR_PHASE__COUNT] = {
    "queue", "prefill", "kv_transfer", "decode_admission", "decode_first_token", "first_token", "last_token"};
const char *const pdr_kv_backend_names[PDR_KVB__COUNT] = {"tcp", "rdma", "cuda_ipc", "other"};

/* Phase durations: 100 µs (a queue on an idle router) to 2 min (a long generation's last token). */
static const double phase_bounds[PDR_HIST_BUCKETS] = {0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                      0.25,   0.5,    1,     2.5,   5,    10,    30,   120};
/* KV transfer times: 1 ms (a short prompt over NVLink) to 5 min (sglang's engine-side timeout, 300 s). */
static const double kv_time_bounds[PDR_HIST_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                        0.5,   1,      2.5,   5,    10,    30,   60,  300};
/* KV sizes: 64 KiB to 32 GiB, by powers of 2 squared (a 32k-token prompt of a large model is GiBs). */
static const double kv_byte_bounds[PDR_HIST_BUCKETS] = {
    65536.0,      262144.0,      1048576.0,     4194304.0,    16777216.0,   67108864.0,
    134217728.0,  268435456.0,   536870912.0,   1073741824.0, 2147483648.0, 4294967296.0,
    8589934592.0, 17179869184.0, 34359738368.0, 68719476736.0};
/* The LLM latency buckets of metrics.c (PDR_BUCKETS_LLM, PDR_BUCKETS_TPOT), repeated for the per-pool
 * families so that both sets of series aggregate alike. */
static const double ttft_bounds[PDR_HIST_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75,
                                                     1,     2.5,  5,     10,   20,  30,   60,  120};
static const double tpot_bounds[PDR_HIST_BUCKETS] = {0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025,
                                                     0.03,  0.04,   0.05,  0.075,  0.1,  0.25,  0.5,  1};

/* v into its bucket: the first bound >= v (PDR_HIST_BUCKETS: +Inf), found by pdr_hist_bucket's halvings
 * (a request observes several phases). */
static void observe(pdr_hist_t *h, const double *bounds, double v)
{
    unsigned i = pdr_hist_bucket(bounds, v);
    h->counts[i]++;
    h->sum += v;
    h->count++;
}

int pdr_kv_backend_index(const char *name)
{
    if (name != NULL)
        for (int i = 0; i < PDR_KVB_OTHER; i++)
            if (strcmp(name, pdr_kv_backend_names[i]) == 0)
                return i;
    return PDR_KVB_OTHER;
}

void pdr_phase_init(pdr_phase_t *p, pdr_phase_metrics_t *m, uint64_t now_us)
{
    memset(p, 0, sizeof(*p));
    p->m = m;
    p->arrival_us = now_us;
}

void pdr_phase_attempt(pdr_phase_t *p)
{
    p->sent_us = 0;
    p->prefill_sent_us = p->prefill_headers_us = p->prefill_done_us = 0;
    p->decode_sent_us = p->decode_headers_us = p->decode_first_byte_us = 0;
    p->solo = 0;
}

/* A string copied into a fixed field, cut at its size and at a quote or a control character (the field
 * goes into JSON unescaped). */
static void copy_name(char *dst, size_t cap, const char *src)
{
    size_t i = 0;
    if (src != NULL)
        for (; src[i] != '\0' && i + 1 < cap; i++) {
            unsigned char c = (unsigned char)src[i];
            dst[i] = c < 0x20 || c == '"' || c == '\\' || c >= 0x7f ? '_' : (char)c;
        }
    dst[i] = '\0';
}

void pdr_phase_kv(pdr_phase_t *p, uint64_t start_wall_us, uint64_t end_wall_us, uint64_t bytes,
                  const char *backend, int status, const char *cause)
{
    if (p == NULL)
        return;
    if (end_wall_us < start_wall_us)
        end_wall_us = start_wall_us; /* clocks of two hosts: never a negative duration */
    p->kv_seen = 1;
    p->kv_start_wall_us = start_wall_us;
    p->kv_end_wall_us = end_wall_us;
    p->kv_bytes = bytes;
    p->kv_status = status;
    copy_name(p->kv_backend, sizeof(p->kv_backend), backend != NULL ? backend : "other");
    copy_name(p->kv_cause, sizeof(p->kv_cause), status != 0 ? cause : NULL);
    if (p->m == NULL)
        return;
    int b = pdr_kv_backend_index(backend);
    if (status != 0) {
        p->m->kv_failed[b]++;
        return;
    }
    observe(&p->m->kv_seconds[b], kv_time_bounds, (double)(end_wall_us - start_wall_us) / 1e6);
    observe(&p->m->kv_bytes[b], kv_byte_bounds, (double)bytes);
}

static int64_t span(uint64_t from, uint64_t to)
{
    return from != 0 && to != 0 && to >= from ? (int64_t)(to - from) : -1;
}

/* pdr_phase_duration, inlined where the phases are observed. */
static inline __attribute__((always_inline)) int64_t duration(const pdr_phase_t *p, pdr_phase_id_t id)
{
    switch (id) {
    case PDR_PHASE_QUEUE:
        return span(p->arrival_us, p->sent_us);
    case PDR_PHASE_PREFILL:
        return p->solo ? -1 : span(p->prefill_sent_us, p->prefill_done_us);
    case PDR_PHASE_KV_TRANSFER:
        return p->kv_seen && p->kv_status == 0 ? (int64_t)(p->kv_end_wall_us - p->kv_start_wall_us) : -1;
    case PDR_PHASE_DECODE_ADMISSION:
        return span(p->decode_sent_us, p->decode_headers_us);
    case PDR_PHASE_DECODE_FIRST_TOKEN:
        return span(p->arrival_us, p->decode_first_byte_us);
    case PDR_PHASE_FIRST_TOKEN:
        return span(p->arrival_us, p->first_token_us);
    case PDR_PHASE_LAST_TOKEN:
        return span(p->arrival_us, p->last_token_us);
    default:
        return -1;
    }
}

int64_t pdr_phase_duration(const pdr_phase_t *p, pdr_phase_id_t id)
{
    return duration(p, id);
}

void pdr_phase_observe(const pdr_phase_t *p, pdr_phase_metrics_t *m)
{
    if (m == NULL)
        return;
    for (int i = 0; i < PDR_PHASE__COUNT; i++) {
        if (i == PDR_PHASE_KV_TRANSFER || i == PDR_PHASE_PREFILL)
            continue; /* observed below, and when the prefill ends (it may outlast the answer) */
        int64_t d = duration(p, (pdr_phase_id_t)i);
        if (d >= 0)
            observe(&m->phase[i], phase_bounds, (double)d / 1e6);
    }
    int64_t kv = duration(p, PDR_PHASE_KV_TRANSFER);
    if (kv >= 0)
        observe(&m->phase[PDR_PHASE_KV_TRANSFER], phase_bounds, (double)kv / 1e6);
}

void pdr_phase_observe_prefill(const pdr_phase_t *p, pdr_phase_metrics_t *m)
{
    int64_t d = duration(p, PDR_PHASE_PREFILL);
    if (m != NULL && d >= 0)
        observe(&m->phase[PDR_PHASE_PREFILL], phase_bounds, (double)d / 1e6);
}

/* The slot of a pool name in m (claimed on first sight), or -1 when every slot is taken. */
static int pool_slot(pdr_phase_metrics_t *m, const char *pool)
{
    if (pool == NULL)
        pool = "default";
    uint32_t n = m->n_pools;
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(m->pool_names[i], pool) == 0)
            return (int)i;
    if (n >= PDR_PHASE_MAX_POOLS)
        return -1;
    copy_name(m->pool_names[n], PDR_PHASE_POOL_NAME, pool);
    __atomic_store_n(&m->n_pools, n + 1, __ATOMIC_RELEASE); /* the renderer reads names below n_pools */
    return (int)n;
}

void pdr_phase_observe_llm(pdr_phase_metrics_t *m, int route, const char *pool, double ttft_s, double tpot_s)
{
    if (m == NULL || route < 0 || route >= PDR_PHASE_ROUTES)
        return;
    int k = pool_slot(m, pool);
    if (k < 0)
        return;
    if (ttft_s >= 0)
        observe(&m->ttft[route][k], ttft_bounds, ttft_s);
    if (tpot_s >= 0)
        observe(&m->tpot[route][k], tpot_bounds, tpot_s);
}

int pdr_phase_format_json(const pdr_phase_t *p, char *out, size_t cap)
{
    size_t len = 0;
    int n = snprintf(out, cap, "\"phases_us\":{");
    if (n < 0)
        return n;
    len += (size_t)n;
    int first = 1;
    for (int i = 0; i < PDR_PHASE__COUNT; i++) {
        int64_t d = pdr_phase_duration(p, (pdr_phase_id_t)i);
        if (d < 0)
            continue;
        n = snprintf(len < cap ? out + len : NULL, len < cap ? cap - len : 0, "%s\"%s\":%" PRId64,
                     first ? "" : ",", pdr_phase_names[i], d);
        if (n < 0)
            return n;
        len += (size_t)n;
        first = 0;
    }
    if (p->kv_seen)
        n = snprintf(len < cap ? out + len : NULL, len < cap ? cap - len : 0,
                     "},\"kv\":{\"bytes\":%" PRIu64 ",\"backend\":\"%s\",\"status\":%d,\"cause\":%s%s%s}",
                     p->kv_bytes, p->kv_backend, p->kv_status, p->kv_cause[0] ? "\"" : "",
                     p->kv_cause[0] ? p->kv_cause : "null", p->kv_cause[0] ? "\"" : "");
    else
        n = snprintf(len < cap ? out + len : NULL, len < cap ? cap - len : 0, "},\"kv\":null");
    if (n < 0)
        return n;
    return (int)(len + (size_t)n);
}

/* ---- rendering ---- */

static void add(pdr_hist_t *to, const pdr_hist_t *from)
{
    for (int i = 0; i <= PDR_HIST_BUCKETS; i++)
        to->counts[i] += from->counts[i];
    to->sum += from->sum;
    to->count += from->count;
}

/* One labelled series of a histogram (labels: `k="v"` pairs, comma-separated). */
static void put_series(pdr_phase_put_cb put, void *o, const char *name, const char *labels,
                       const pdr_hist_t *h, const double *bounds)
{
    uint64_t cum = 0;
    for (int i = 0; i < PDR_HIST_BUCKETS; i++) {
        cum += h->counts[i];
        put(o, "%s_bucket{%s,le=\"%g\"} %llu\n", name, labels, bounds[i], (unsigned long long)cum);
    }
    cum += h->counts[PDR_HIST_BUCKETS];
    put(o, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, labels, (unsigned long long)cum);
    put(o, "%s_sum{%s} %.6f\n%s_count{%s} %llu\n", name, labels, h->sum, name, labels,
        (unsigned long long)h->count);
}

/* A histogram family with one series per value of one label: its HELP and TYPE lines, then hs[i] labelled
 * key="values[i]" for i < n. */
static void put_labelled_family(pdr_phase_put_cb put, void *o, const char *name, const char *help,
                                const char *key, const char *const *values, const pdr_hist_t *hs, int n,
                                const double *bounds)
{
    char labels[64];
    put(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    for (int i = 0; i < n; i++) {
        snprintf(labels, sizeof(labels), "%s=\"%s\"", key, values[i]);
        put_series(put, o, name, labels, &hs[i], bounds);
    }
}

static const char *const route_labels[PDR_PHASE_ROUTES] = {"generate", "completions", "chat_completions"};

/* The per-pool TTFT or TPOT family: the loops' series summed by (route, pool name). */
static void put_pool_family(const pdr_metrics_t *const *ms, size_t n, pdr_phase_put_cb put, void *o,
                            const char *name, const char *help, int tpot)
{
    put(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    /* The union of the loops' pool names, in first-seen order (at most PDR_PHASE_MAX_POOLS). */
    const char *names[PDR_PHASE_MAX_POOLS];
    size_t nn = 0;
    for (size_t t = 0; t < n; t++) {
        const pdr_phase_metrics_t *m = ms[t]->phases;
        if (m == NULL)
            continue;
        uint32_t np = __atomic_load_n(&m->n_pools, __ATOMIC_ACQUIRE);
        for (uint32_t i = 0; i < np; i++) {
            size_t k = 0;
            while (k < nn && strcmp(names[k], m->pool_names[i]) != 0)
                k++;
            if (k == nn && nn < PDR_PHASE_MAX_POOLS)
                names[nn++] = m->pool_names[i];
        }
    }
    for (int r = 0; r < PDR_PHASE_ROUTES; r++)
        for (size_t k = 0; k < nn; k++) {
            pdr_hist_t sum;
            memset(&sum, 0, sizeof(sum));
            for (size_t t = 0; t < n; t++) {
                const pdr_phase_metrics_t *m = ms[t]->phases;
                if (m == NULL)
                    continue;
                uint32_t np = __atomic_load_n(&m->n_pools, __ATOMIC_ACQUIRE);
                for (uint32_t i = 0; i < np; i++)
                    if (strcmp(m->pool_names[i], names[k]) == 0)
                        add(&sum, tpot ? &m->tpot[r][i] : &m->ttft[r][i]);
            }
            if (sum.count == 0)
                continue;
            char labels[160];
            snprintf(labels, sizeof(labels), "route=\"%s\",pool=\"%s\"", route_labels[r], names[k]);
            put_series(put, o, name, labels, &sum, tpot ? tpot_bounds : ttft_bounds);
        }
}

void pdr_phase_metrics_render(const pdr_metrics_t *const *ms, size_t n, pdr_phase_put_cb put, void *o)
{
    pdr_hist_t kv_s[PDR_KVB__COUNT], kv_b[PDR_KVB__COUNT], ph[PDR_PHASE__COUNT];
    uint64_t kv_failed[PDR_KVB__COUNT] = {0};
    memset(kv_s, 0, sizeof(kv_s));
    memset(kv_b, 0, sizeof(kv_b));
    memset(ph, 0, sizeof(ph));
    for (size_t t = 0; t < n; t++) {
        const pdr_phase_metrics_t *m = ms[t]->phases;
        if (m == NULL)
            continue;
        for (int b = 0; b < PDR_KVB__COUNT; b++) {
            add(&kv_s[b], &m->kv_seconds[b]);
            add(&kv_b[b], &m->kv_bytes[b]);
            kv_failed[b] += m->kv_failed[b];
        }
        for (int i = 0; i < PDR_PHASE__COUNT; i++)
            add(&ph[i], &m->phase[i]);
    }
    put_labelled_family(put, o, "pdr_phase_seconds",
                        "Where PD requests spent their time, by phase (docs/metrics.md defines each): PD "
                        "requests that reached the phase's end.",
                        "phase", pdr_phase_names, ph, PDR_PHASE__COUNT, phase_bounds);
    put_labelled_family(put, o, "pdr_kv_transfer_seconds",
                        "KV transfers the shims reported done, by backend: start to end on the shim's clock.",
                        "backend", pdr_kv_backend_names, kv_s, PDR_KVB__COUNT, kv_time_bounds);
    put_labelled_family(put, o, "pdr_kv_transfer_bytes",
                        "KV bytes of the transfers the shims reported done, by backend.", "backend",
                        pdr_kv_backend_names, kv_b, PDR_KVB__COUNT, kv_byte_bounds);
    put(o, "# HELP pdr_kv_transfer_reported_failed_total KV transfers the shims reported failed, by "
           "backend.\n# TYPE pdr_kv_transfer_reported_failed_total counter\n");
    for (int b = 0; b < PDR_KVB__COUNT; b++)
        put(o, "pdr_kv_transfer_reported_failed_total{backend=\"%s\"} %llu\n", pdr_kv_backend_names[b],
            (unsigned long long)kv_failed[b]);
    put_pool_family(ms, n, put, o, "pdr_pool_ttft_seconds",
                    "pdr_ttft_seconds by route and pool: time from request to the first token event relayed "
                    "(streams) or to the response start (others), 2xx PD requests.",
                    0);
    put_pool_family(ms, n, put, o, "pdr_pool_tpot_seconds",
                    "pdr_tpot_seconds by route and pool: (last token event - first) / (token events - 1), "
                    "streams with at least 2 token events.",
                    1);
}
