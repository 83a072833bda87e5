/*
 * The /metrics exposition: every family in Prometheus' text format, the loops' counters (metrics.h) summed
 * and rendered here, beside the families each part renders of its own (pool, outlier ejection, admission,
 * links, retry budget, KV deadlines and events, shim events, phases, traces, fall-backs), and the answer
 * to GET /metrics on the data, admin and metrics ports. Rendering reads the loops' sets without locks
 * (64-bit counters: a scrape may see a count a moment old). Any loop.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "admission.h"
#include "breaker.h"
#include "buf.h"
#include "control.h"
#include "disagg.h"
#include "gateway.h"
#include "err.h"
#include "fallback.h"
#include "kv_events.h"
#include "kvdeadline.h"
#include "links.h"
#include "load_poll.h"
#include "metrics.h"
#include "phases.h"
#include "reply.h"
#include "retry.h"
#include "router.h"
#include "shim_events.h"
#include "trace.h"
#include "util.h"

static const char *route_names[PDR_MR__COUNT] = {"generate", "completions", "chat_completions", "models",
                                                 "health",   "readiness",   "metrics",          "other"};
static const char *cause_names[PDR_CAUSE__COUNT] = {
    "connect", "timeout", "reset", "status_5xx", "first_byte_deadline", "kv_transfer_deadline", "other"};

static void add_hist(pdr_hist_t *to, const pdr_hist_t *from)
{
    for (int i = 0; i <= PDR_HIST_BUCKETS; i++)
        to->counts[i] += from->counts[i];
    to->sum += from->sum;
    to->count += from->count;
}

/* Counters with no labels: summed over the loops and rendered from this one table. */
static const struct {
    const char *name, *help;
    size_t off;
} plain_counters[] = {
    {"pdr_client_aborts_total", "Requests whose client went away before the end.",
     offsetof(pdr_metrics_t, client_aborts_total)},
    {"pdr_client_stalled_total", "Streams ended because the client took no data for timeouts.stream_idle_ms.",
     offsetof(pdr_metrics_t, client_stalled_total)},
    {"pdr_merge_too_large_total",
     "Logprob merges refused past limits.max_merge_bytes: a whole answer (502) or a stream's event without "
     "its end (the stream ends with an error event).",
     offsetof(pdr_metrics_t, merge_too_large_total)},
    {"pdr_http_bad_framing_total",
     "HTTP/1 requests refused with 400 because another parser could frame their head differently "
     "(Content-Length with Transfer-Encoding, duplicate Content-Length, obs-fold, bare LF, no Host); their "
     "connections are closed.",
     offsetof(pdr_metrics_t, bad_framing_total)},
    {"pdr_upstream_tls_handshakes_total", "Full TLS handshakes with https:// workers (no session resumed).",
     offsetof(pdr_metrics_t, upstream_tls_full_total)},
    {"pdr_upstream_tls_resumptions_total",
     "TLS handshakes with https:// workers that resumed the session of an earlier connection.",
     offsetof(pdr_metrics_t, upstream_tls_resumed_total)},
    {"pdr_upstream_tls_resumption_failures_total",
     "https:// workers whose TLS handshake failed when it resumed a session: they get full handshakes only "
     "from then on (per loop).",
     offsetof(pdr_metrics_t, upstream_tls_resumption_failures_total)},
    {"pdr_accept_fd_exhausted_total",
     "Times accept() found no free file descriptor (EMFILE/ENFILE) and accepting paused for 100 ms.",
     offsetof(pdr_metrics_t, accept_fd_exhausted_total)},
    {"pdr_h2_client_resets_total", "HTTP/2 streams the client reset or abandoned before their answer ended.",
     offsetof(pdr_metrics_t, h2_client_resets_total)},
    {"pdr_h2_reset_floods_total",
     "HTTP/2 connections closed for resetting more streams than limits.h2_max_resets allows.",
     offsetof(pdr_metrics_t, h2_reset_floods_total)},
    {"pdr_http_chunk_too_large_total",
     "HTTP/1 chunked request bodies answered 413 at a chunk that declares more than limits.max_body_bytes "
     "allows.",
     offsetof(pdr_metrics_t, chunk_too_large_total)},
    {"pdr_h2_header_block_too_large_total",
     "HTTP/2 connections closed with GOAWAY ENHANCE_YOUR_CALM for a header block (HEADERS + CONTINUATION) "
     "larger than the router takes.",
     offsetof(pdr_metrics_t, h2_header_block_too_large_total)},
    {"pdr_http_headers_too_large_total",
     "Requests answered 431 (more header fields than limits.max_headers, or more bytes than "
     "limits.max_header_bytes) or 414 (a request target longer than limits.max_header_bytes).",
     offsetof(pdr_metrics_t, headers_too_large_total)},
    /* Client-side limits (router/front/limits.c, conn.c): */
    {"pdr_http_body_too_large_total",
     "Requests answered 413 for a body above limits.max_body_bytes (HTTP/1 Content-Length or chunked, "
     "HTTP/2 content-length or DATA; the chunk guard's are pdr_http_chunk_too_large_total).",
     offsetof(pdr_metrics_t, body_too_large_total)},
    {"pdr_batch_too_large_total",
     "PD requests answered 400 for more batch items than limits.max_batch_items, before any per-item work.",
     offsetof(pdr_metrics_t, batch_too_large_total)},
    {"pdr_http_client_header_timeouts_total",
     "HTTP/1 connections answered 408 and closed: the request head did not arrive within "
     "timeouts.client_header_ms (TLS connections whose handshake did not end within it included).",
     offsetof(pdr_metrics_t, client_header_timeouts_total)},
    {"pdr_http_client_body_timeouts_total",
     "HTTP/1 connections answered 408 and closed: the request body paused longer than "
     "timeouts.client_body_ms.",
     offsetof(pdr_metrics_t, client_body_timeouts_total)},
    {"pdr_http_keepalive_closed_total",
     "Idle HTTP/1 keep-alive connections the router closed (timeouts.keepalive_idle_ms, or the oldest past "
     "limits.max_idle_client_connections).",
     offsetof(pdr_metrics_t, keepalive_closed_total)},
    {"pdr_accept_paused_total",
     "Times accepting paused because limits.max_client_connections client connections were open.",
     offsetof(pdr_metrics_t, accept_paused_total)},
    {"pdr_h2_control_floods_total",
     "HTTP/2 connections closed with GOAWAY ENHANCE_YOUR_CALM for sending more SETTINGS, PING, PRIORITY, "
     "CONTINUATION and unknown-type frames than limits.h2_max_control_frames allows.",
     offsetof(pdr_metrics_t, h2_control_floods_total)},
    {"pdr_tls_client_read_failures_total",
     "TLS client connections whose read failed (the client reset or closed the connection): closed at once "
     "without a close_notify.",
     offsetof(pdr_metrics_t, tls_peer_gone_total)},
    {"pdr_http_lingering_closes_total",
     "HTTP/1 connections answered before their request was read whole (413, 431, 414, 408, 400) whose rest "
     "the router read and dropped before closing, so that the answer reaches a client still sending.",
     offsetof(pdr_metrics_t, lingering_total)},
    {"pdr_http_lingering_cut_total",
     "Lingering connections reset because the client sent more than limits.max_lingering_bytes after the "
     "answer.",
     offsetof(pdr_metrics_t, lingering_cut_total)},
    {"pdr_http_lingering_discarded_bytes_total",
     "Request bytes read and dropped while lingering after an early answer.",
     offsetof(pdr_metrics_t, lingering_discarded_bytes_total)},
    {"pdr_h2_bodies_over_budget_total",
     "HTTP/2 request bodies refused because the bodies held would pass limits.h2_max_connection_body_bytes "
     "(one connection) or limits.max_body_memory_bytes (all): answered 503, or over TLS the connection "
     "closed.",
     offsetof(pdr_metrics_t, h2_bodies_over_budget_total)},
    {"pdr_h2_body_timeouts_total",
     "HTTP/2 request bodies that paused longer than timeouts.client_body_ms: the stream reset, or its "
     "connection closed.",
     offsetof(pdr_metrics_t, h2_body_timeouts_total)},
    {"pdr_h2_bodies_evicted_total",
     "HTTP/2 request bodies still arriving that were reset, the biggest first, to make room after a "
     "refusal for limits.max_body_memory_bytes: the stream reset, or over TLS its connection closed.",
     offsetof(pdr_metrics_t, h2_bodies_evicted_total)},
    {"pdr_h2_bodies_unfollowed_total",
     "HTTP/2 connections whose request bodies the router could not follow (no memory for the table): h2o's "
     "own limits stand for them.",
     offsetof(pdr_metrics_t, h2_bodies_unfollowed_total)},
    {"pdr_tickets_signed_total",
     "Tickets signed for protocol pdshim: one per room of each attempt (both legs carry the same one).",
     offsetof(pdr_metrics_t, tickets_signed_total)},
    {"pdr_tickets_refused_total",
     "Attempts a worker answered 403 to, refusing the router's own ticket (protocol pdshim): a deployment "
     "fault (ticket.key_file differs), answered 502 naming the worker.",
     offsetof(pdr_metrics_t, tickets_refused_total)},
    {"pdr_access_log_suppressed_total",
     "Access-log lines of client-aborted requests, and of requests refused before any worker was chosen, not "
     "written because they came faster than 100/s per loop, each kind (summary lines count them).",
     offsetof(pdr_metrics_t, alog_suppressed_total)},
};
static void sum_metrics(pdr_metrics_t *t, const pdr_metrics_t *m)
{
    for (int r = 0; r < PDR_MR__COUNT; r++) {
        for (int s = 100; s < 600; s++)
            t->requests[r][s] += m->requests[r][s];
        add_hist(&t->duration[r], &m->duration[r]);
        add_hist(&t->ttfb[r], &m->ttfb[r]);
        add_hist(&t->ttft[r], &m->ttft[r]);
        add_hist(&t->tpot[r], &m->tpot[r]);
        add_hist(&t->e2e[r], &m->e2e[r]);
        add_hist(&t->prefill[r], &m->prefill[r]);
        t->stream_events_total[r] += m->stream_events_total[r];
    }
    for (int role = 0; role < 2; role++) {
        for (int c = 0; c < PDR_CAUSE__COUNT; c++)
            t->upstream_errors[role][c] += m->upstream_errors[role][c];
        t->no_worker_total[role] += m->no_worker_total[role];
    }
    for (int c = 0; c < PDR_CAUSE__COUNT; c++)
        t->prefill_late_failures[c] += m->prefill_late_failures[c];
    t->retries_total += m->retries_total;
    for (int k = 0; k < PDR_KV_RELEASE__COUNT; k++)
        t->vllm_kv_release[k] += m->vllm_kv_release[k];
    for (int role = 0; role < 2; role++)
        for (int k = 0; k < PDR_ABORT__COUNT; k++)
            t->engine_aborts[role][k] += m->engine_aborts[role][k];
    for (int k = 0; k < PDR_MIG__COUNT; k++)
        t->migrations[k] += m->migrations[k];
    for (int k = 0; k < PDR_DISAGG__COUNT; k++)
        t->disagg_decisions[k] += m->disagg_decisions[k];
    for (int k = 0; k < PDR_ADMIN_AUTH__COUNT; k++)
        t->admin_auth_refused[k] += m->admin_auth_refused[k];
    for (int k = 0; k < PDR_SC__COUNT; k++)
        t->sidecar_header[k] += m->sidecar_header[k];
    for (size_t i = 0; i < sizeof(plain_counters) / sizeof(plain_counters[0]); i++)
        *(uint64_t *)((char *)t + plain_counters[i].off) +=
            *(const uint64_t *)((const char *)m + plain_counters[i].off);
    t->waiting += __atomic_load_n(&m->waiting, __ATOMIC_RELAXED);
    t->bytes_in_total += m->bytes_in_total;
    t->bytes_out_total += m->bytes_out_total;
}

typedef struct out {
    char *p;
    size_t len, cap;
    /* The first error: the page is not served (PDR_ENOMEM, or PDR_ETOOBIG past PDR_METRICS_PAGE_MAX). */
    int err;
} out_t;

__attribute__((format(printf, 2, 0))) static void vput(out_t *o, const char *fmt, va_list ap)
{
    if (o->err != 0)
        return;
    pdr_buf_t b = {o->p, o->len, o->cap};
    o->err = pdr_buf_vprintf(&b, PDR_METRICS_PAGE_MAX, fmt, ap);
    o->p = b.p, o->len = b.len, o->cap = b.cap;
}

__attribute__((format(printf, 2, 3))) static void put(out_t *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vput(o, fmt, ap);
    va_end(ap);
}

/* put for other files' families (pdr_kv_events_put_cb): one formatted piece at a time, whole however
 * long (within the page's ceiling). */
__attribute__((format(printf, 2, 3))) static void put_line(void *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vput(o, fmt, ap);
    va_end(ap);
}

static void put_hist(out_t *o, const char *name, const char *help, const pdr_hist_t *hs, pdr_buckets_t set)
{
    const double *bounds = pdr__metrics_buckets[set];
    put(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    for (int r = 0; r < PDR_MR__COUNT; r++) {
        const pdr_hist_t *h = &hs[r];
        if (h->count == 0)
            continue;
        uint64_t cum = 0;
        for (int i = 0; i < PDR_HIST_BUCKETS; i++) {
            cum += h->counts[i];
            put(o, "%s_bucket{route=\"%s\",le=\"%g\"} %llu\n", name, route_names[r], bounds[i],
                (unsigned long long)cum);
        }
        cum += h->counts[PDR_HIST_BUCKETS];
        put(o, "%s_bucket{route=\"%s\",le=\"+Inf\"} %llu\n", name, route_names[r], (unsigned long long)cum);
        put(o, "%s_sum{route=\"%s\"} %.6f\n%s_count{route=\"%s\"} %llu\n", name, route_names[r], h->sum, name,
            route_names[r], (unsigned long long)h->count);
    }
}

char *pdr_metrics_render(pdr_pool_t *pool, const pdr_metrics_t *const *ms, size_t n,
                         const pdr_metrics_extra_t *x, size_t *len, int *err)
{
    out_t o = {0};
    pdr_metrics_t *m = calloc(1, sizeof(*m));
    *err = PDR_ENOMEM;
    if (m == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++)
        sum_metrics(m, ms[i]);
    put(&o, "# HELP pdr_requests_total Client requests by route and HTTP status.\n"
            "# TYPE pdr_requests_total counter\n");
    for (int r = 0; r < PDR_MR__COUNT; r++)
        for (int s = 100; s < 600; s++)
            if (m->requests[r][s])
                put(&o, "pdr_requests_total{route=\"%s\",code=\"%d\"} %llu\n", route_names[r], s,
                    (unsigned long long)m->requests[r][s]);
    put(&o, "# HELP pdr_upstream_errors_total Failed upstream calls by worker role and cause.\n"
            "# TYPE pdr_upstream_errors_total counter\n");
    for (int role = 0; role < 2; role++)
        for (int c = 0; c < PDR_CAUSE__COUNT; c++)
            put(&o, "pdr_upstream_errors_total{role=\"%s\",cause=\"%s\"} %llu\n",
                pdr_role_name((pdr_role_t)role), cause_names[c],
                (unsigned long long)m->upstream_errors[role][c]);
    put(&o, "# HELP pdr_prefill_late_failures_total Prefill legs that failed after the decode's first byte "
            "reached the client (pd.relay first_byte): not retried, the decode's answer went on.\n"
            "# TYPE pdr_prefill_late_failures_total counter\n");
    for (int c = 0; c < PDR_CAUSE__COUNT; c++)
        put(&o, "pdr_prefill_late_failures_total{cause=\"%s\"} %llu\n", cause_names[c],
            (unsigned long long)m->prefill_late_failures[c]);
    put(&o,
        "# HELP pdr_retries_total Requests retried on a new prefill/decode pair.\n"
        "# TYPE pdr_retries_total counter\npdr_retries_total %llu\n",
        (unsigned long long)m->retries_total);
    put(&o,
        "# HELP pdr_no_healthy_worker_total Requests answered 503 because no worker of a role was healthy.\n"
        "# TYPE pdr_no_healthy_worker_total counter\n");
    for (int role = 0; role < 2; role++)
        put(&o, "pdr_no_healthy_worker_total{role=\"%s\"} %llu\n", pdr_role_name((pdr_role_t)role),
            (unsigned long long)m->no_worker_total[role]);
    static const char *const release_outcomes[PDR_KV_RELEASE__COUNT] = {"released", "failed", "timeout"};
    put(&o,
        "# HELP pdr_vllm_kv_release_total Decode calls (max_tokens 1, answer discarded) that free the KV a "
        "client left on a vLLM prefill, by outcome.\n"
        "# TYPE pdr_vllm_kv_release_total counter\n");
    for (int k = 0; k < PDR_KV_RELEASE__COUNT; k++)
        put(&o, "pdr_vllm_kv_release_total{outcome=\"%s\"} %llu\n", release_outcomes[k],
            (unsigned long long)m->vllm_kv_release[k]);
    static const char *const abort_outcomes[PDR_ABORT__COUNT] = {"sent",    "ok",      "failed",
                                                                 "timeout", "dropped", "closed"};
    put(&o, "# HELP pdr_engine_aborts_total Engine aborts of legs the router let go while their worker still "
            "ran them, by role and outcome.\n"
            "# TYPE pdr_engine_aborts_total counter\n");
    for (int role = 0; role < 2; role++)
        for (int k = 0; k < PDR_ABORT__COUNT; k++)
            put(&o, "pdr_engine_aborts_total{role=\"%s\",outcome=\"%s\"} %llu\n",
                pdr_role_name((pdr_role_t)role), abort_outcomes[k],
                (unsigned long long)m->engine_aborts[role][k]);
    static const char *const mig_outcomes[PDR_MIG__COUNT] = {"moved",  "completed",  "refused",
                                                             "budget", "unreadable", "failed"};
    put(&o,
        "# HELP pdr_stream_migrations_total Streams whose decode failed after the client's stream began, by "
        "what the router did: moved to a new pair, completed, or ended with an error event (refused, "
        "budget, unreadable, failed).\n"
        "# TYPE pdr_stream_migrations_total counter\n");
    for (int k = 0; k < PDR_MIG__COUNT; k++)
        put(&o, "pdr_stream_migrations_total{outcome=\"%s\"} %llu\n", mig_outcomes[k],
            (unsigned long long)m->migrations[k]);
    put(&o, "# HELP pdr_disagg_decisions_total Conditional disaggregation: attempts sent to a prefill and a "
            "decode (disaggregated) or to one worker without a prefill, by reason.\n"
            "# TYPE pdr_disagg_decisions_total counter\n");
    for (int k = 0; k < PDR_DISAGG__COUNT; k++)
        put(&o, "pdr_disagg_decisions_total{decision=\"%s\"} %llu\n", pdr_disagg_decision_names[k],
            (unsigned long long)m->disagg_decisions[k]);
    put(&o, "# HELP pdr_sidecar_prefill_header_total Sidecar mode: requests by what their prefill header "
            "did (used, absent, malformed, not_in_pool, unhealthy, draining).\n"
            "# TYPE pdr_sidecar_prefill_header_total counter\n");
    for (int k = 0; k < PDR_SC__COUNT; k++)
        put(&o, "pdr_sidecar_prefill_header_total{outcome=\"%s\"} %llu\n", pdr_sidecar_outcome_names[k],
            (unsigned long long)m->sidecar_header[k]);
    static const char *const auth_reasons[PDR_ADMIN_AUTH__COUNT] = {"missing", "wrong", "duplicated"};
    put(&o,
        "# HELP pdr_admin_auth_refused_total Admin API requests refused for their credentials: missing or "
        "wrong token (401), more than one Authorization header (400).\n"
        "# TYPE pdr_admin_auth_refused_total counter\n");
    for (int k = 0; k < PDR_ADMIN_AUTH__COUNT; k++)
        put(&o, "pdr_admin_auth_refused_total{reason=\"%s\"} %llu\n", auth_reasons[k],
            (unsigned long long)m->admin_auth_refused[k]);
    for (size_t i = 0; i < sizeof(plain_counters) / sizeof(plain_counters[0]); i++)
        put(&o, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", plain_counters[i].name, plain_counters[i].help,
            plain_counters[i].name, plain_counters[i].name,
            (unsigned long long)*(const uint64_t *)((const char *)m + plain_counters[i].off));
    put(&o,
        "# HELP pdr_request_bytes_total Request body bytes received from clients.\n"
        "# TYPE pdr_request_bytes_total counter\npdr_request_bytes_total %llu\n",
        (unsigned long long)m->bytes_in_total);
    put(&o,
        "# HELP pdr_response_bytes_total Response body bytes sent to clients.\n"
        "# TYPE pdr_response_bytes_total counter\npdr_response_bytes_total %llu\n",
        (unsigned long long)m->bytes_out_total);
    put(&o,
        "# HELP pdr_inflight_requests PD requests in progress.\n# TYPE pdr_inflight_requests gauge\n"
        "pdr_inflight_requests %lld\n",
        (long long)x->inflight);
    put(&o,
        "# HELP pdr_h2_body_bytes_held HTTP/2 request body bytes the router holds "
        "(limits.max_body_memory_bytes).\n"
        "# TYPE pdr_h2_body_bytes_held gauge\npdr_h2_body_bytes_held %llu\n",
        (unsigned long long)x->body_bytes_held);
    put(&o,
        "# HELP pdr_inflight_limit limits.max_inflight: above it requests wait in the admission queue.\n"
        "# TYPE pdr_inflight_limit gauge\npdr_inflight_limit %d\n",
        x->max_inflight);
    put(&o,
        "# HELP pdr_queued_requests PD requests in progress whose response has not started: in the "
        "admission queue, or queued or prefilling in the workers.\n# TYPE pdr_queued_requests "
        "gauge\npdr_queued_requests %lld\n",
        (long long)m->waiting);
    put(&o,
        "# HELP pdr_config_reloads_total Configuration reloads by result.\n"
        "# TYPE pdr_config_reloads_total counter\n"
        "pdr_config_reloads_total{result=\"ok\"} %llu\npdr_config_reloads_total{result=\"failed\"} %llu\n",
        (unsigned long long)x->reloads_ok, (unsigned long long)x->reloads_failed);

    pdr_worker_t **ws;
    size_t nw = pdr_pool_snapshot(pool, -1, &ws);
    uint64_t added[4], removed[4];
    pthread_rwlock_rdlock(&pool->rw);
    memcpy(added, pool->added_total, sizeof(added));
    memcpy(removed, pool->removed_total, sizeof(removed));
    pthread_rwlock_unlock(&pool->rw);
    static const char *const ca_names[4] = {"match", "smallest_tree", "balance", "consistent_hash"};
    put(&o, "# HELP pdr_cache_aware_decisions_total Picks of the cache_aware policy by the rule that chose: "
            "the longest cached prefix, the smallest tree (no match long enough), the least loaded "
            "(loads imbalanced), or the consistent-hash ring (no match long enough, seed consistent_hash)."
            "\n# TYPE pdr_cache_aware_decisions_total counter\n");
    for (int d = 0; d < 4; d++)
        put(&o, "pdr_cache_aware_decisions_total{decision=\"%s\"} %llu\n", ca_names[d],
            (unsigned long long)__atomic_load_n(&pool->ca_decisions[d], __ATOMIC_RELAXED));
    if (x->router != NULL)
        pdr_kv_events_metrics(x->router, put_line, &o);
    pdr_phase_metrics_render(ms, n, put_line, &o);
    pdr_trace_metrics(put_line, &o);
    if (x->router != NULL)
        pdr_shim_events_metrics(x->router, put_line, &o);
    if (x->router != NULL)
        pdr_engine_load_metrics(x->router, put_line, &o);
    put(&o, "# HELP pdr_workers Workers in the pool by role and source.\n# TYPE pdr_workers gauge\n");
    for (int role = 0; role < PDR_ROLES; role++)
        for (int src = 0; src < 4; src++) {
            size_t k = 0;
            for (size_t i = 0; i < nw; i++)
                k += (int)ws[i]->role == role && strcmp(ws[i]->source, pdr_source_names[src]) == 0;
            put(&o, "pdr_workers{role=\"%s\",source=\"%s\"} %zu\n", pdr_role_name((pdr_role_t)role),
                pdr_source_names[src], k);
        }
    put(&o, "# HELP pdr_workers_added_total Workers added to the pool by source.\n"
            "# TYPE pdr_workers_added_total counter\n");
    for (int src = 0; src < 4; src++)
        put(&o, "pdr_workers_added_total{source=\"%s\"} %llu\n", pdr_source_names[src],
            (unsigned long long)added[src]);
    put(&o, "# HELP pdr_workers_removed_total Workers taken out of the pool by source.\n"
            "# TYPE pdr_workers_removed_total counter\n");
    for (int src = 0; src < 4; src++)
        put(&o, "pdr_workers_removed_total{source=\"%s\"} %llu\n", pdr_source_names[src],
            (unsigned long long)removed[src]);

    static const char *wm[][3] = {
        {"pdr_worker_healthy", "gauge", "1 when the worker passes health checks."},
        {"pdr_worker_inflight_requests", "gauge", "Requests in flight to the worker."},
        {"pdr_worker_requests_total", "counter", "Requests sent to the worker."},
        {"pdr_worker_failures_total", "counter", "Failed requests to the worker."},
        {"pdr_worker_ejections_total", "counter",
         "Times the worker was taken out (marked unhealthy, or an outlier ejection)."},
        {"pdr_worker_health_checks_total", "counter", "Active health checks by result."},
        {"pdr_worker_state", "gauge",
         "1 for the worker's current state (healthy, unhealthy, ejected, draining, drained)."},
        {"pdr_worker_drains_total", "counter", "Times the worker was put into draining."},
    };
    static const char *states[] = {"healthy", "unhealthy", "ejected", "draining", "drained"};
    for (size_t k = 0; k < sizeof(wm) / sizeof(wm[0]); k++) {
        put(&o, "# HELP %s %s\n# TYPE %s %s\n", wm[k][0], wm[k][2], wm[k][0], wm[k][1]);
        for (size_t i = 0; i < nw; i++) {
            const pdr_worker_t *w = ws[i];
            const char *rn = pdr_role_name(w->role);
            switch (k) {
            case 0:
                put(&o, "%s{pool=\"%s\",role=\"%s\",url=\"%s\"} %d\n", wm[k][0], w->pool, rn, w->target,
                    pdr_worker_healthy(w));
                break;
            case 1:
                put(&o, "%s{pool=\"%s\",role=\"%s\",url=\"%s\"} %d\n", wm[k][0], w->pool, rn, w->target,
                    pdr_worker_inflight(w));
                break;
            case 2:
                put(&o, "%s{pool=\"%s\",role=\"%s\",url=\"%s\"} %llu\n", wm[k][0], w->pool, rn, w->target,
                    (unsigned long long)w->requests_total);
                break;
            case 3:
                put(&o, "%s{pool=\"%s\",role=\"%s\",url=\"%s\"} %llu\n", wm[k][0], w->pool, rn, w->target,
                    (unsigned long long)w->failures_total);
                break;
            case 4:
                put(&o, "%s{pool=\"%s\",role=\"%s\",url=\"%s\"} %llu\n", wm[k][0], w->pool, rn, w->target,
                    (unsigned long long)w->ejections_total);
                break;
            case 6: {
                const char *cur = pdr_worker_state_name(w);
                for (size_t j = 0; j < sizeof(states) / sizeof(states[0]); j++)
                    put(&o, "%s{pool=\"%s\",role=\"%s\",url=\"%s\",state=\"%s\"} %d\n", wm[k][0], w->pool, rn,
                        w->target, states[j], strcmp(cur, states[j]) == 0);
                break;
            }
            case 7:
                put(&o, "%s{pool=\"%s\",role=\"%s\",url=\"%s\"} %llu\n", wm[k][0], w->pool, rn, w->target,
                    (unsigned long long)__atomic_load_n(&w->drains_total, __ATOMIC_RELAXED));
                break;
            default:
                put(&o, "%s{pool=\"%s\",role=\"%s\",url=\"%s\",result=\"ok\"} %llu\n", wm[k][0], w->pool, rn,
                    w->target, (unsigned long long)w->checks_ok);
                put(&o, "%s{pool=\"%s\",role=\"%s\",url=\"%s\",result=\"failed\"} %llu\n", wm[k][0], w->pool,
                    rn, w->target, (unsigned long long)w->checks_failed);
                break;
            }
        }
    }
    pdr_pool_release(ws, nw);
    pdr_outlier_metrics(pool, put_line, &o);
    pdr_affinity_metrics(pool, put_line, &o);
    {
        char names[PDR_CONFIG_MAX_POOLS][64];
        size_t ng = pdr_pool_groups(pool, names, PDR_CONFIG_MAX_POOLS);
        pdr_compat_render_metrics((const char(*)[64])names, ng, put_line, &o);
    }
    put_hist(&o, "pdr_request_duration_seconds", "Time from request to the last response byte.", m->duration,
             PDR_BUCKETS_DEFAULT);
    put_hist(&o, "pdr_time_to_first_byte_seconds", "Time from request to the first response byte.", m->ttfb,
             PDR_BUCKETS_DEFAULT);
    put_hist(
        &o, "pdr_ttft_seconds",
        "Time from request to the first token event relayed (streams) or to the response start (others), "
        "2xx PD requests.",
        m->ttft, PDR_BUCKETS_LLM);
    put_hist(&o, "pdr_tpot_seconds",
             "Time per output token of a stream: (last token event - first) / (token events - 1), "
             "streams with "
             "at least 2 token events.",
             m->tpot, PDR_BUCKETS_TPOT);
    put_hist(&o, "pdr_e2e_seconds",
             "Time from request to the last response byte, successful (2xx) PD requests.", m->e2e,
             PDR_BUCKETS_LLM);
    put_hist(&o, "pdr_prefill_seconds",
             "Time from the attempt's start to the prefill's complete answer (prefill and KV transfer), "
             "successful prefills.",
             m->prefill, PDR_BUCKETS_LLM);
    put(&o, "# HELP pdr_stream_events_total Token events relayed to streaming clients.\n"
            "# TYPE pdr_stream_events_total counter\n");
    for (int r = 0; r < PDR_MR__COUNT; r++)
        if (r <= PDR_MR_CHAT || m->stream_events_total[r])
            put(&o, "pdr_stream_events_total{route=\"%s\"} %llu\n", route_names[r],
                (unsigned long long)m->stream_events_total[r]);
    /* The families other files render: each one's text, or the page fails with it. */
    char *(*const parts[])(size_t *) = {
        pdr_kv_render_metrics,       /* KV failures and link state (kvdeadline.h, links.h) */
        pdr_admit_render_metrics,    /* queue depth and wait, refusals (admission.h) */
        pdr_links_render_metrics,    /* the links' breaker (links.h) */
        pdr_retry_render_metrics,    /* the retry budget (retry.h) */
        pdr_fallback_render_metrics, /* fall-backs by reason (fallback.h) */
        pdr_gateway_render_metrics,  /* the endpoint picker (gateway.h) */
    };
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]) && o.err == 0; i++) {
        size_t plen = 0;
        char *part = parts[i](&plen);
        if (part == NULL)
            o.err = PDR_ENOMEM;
        else
            put(&o, "%.*s", (int)plen, part);
        free(part);
    }
    free(m);
    *err = o.err;
    if (o.err != 0) {
        free(o.p);
        return NULL;
    }
    *len = o.len;
    return o.p;
}

void pdr__send_metrics(pdr_thread_t *t, h2o_req_t *req)
{
    pdr_router_t *r = t->r;
    pdr_metrics_count_request(&t->m, PDR_MR_METRICS, 200, 0, -1);
    size_t len = 0;
    const pdr_metrics_t *ms[PDR_MAX_THREADS_RENDER];
    size_t n = 0;
    for (int i = 0; i < r->n_threads && n < PDR_MAX_THREADS_RENDER; i++)
        ms[n++] = &r->threads[i].m;
    pdr_metrics_extra_t x = {
        .inflight = __atomic_load_n(&r->inflight, __ATOMIC_RELAXED),
        .max_inflight = t->config->limits.max_inflight,
        .body_bytes_held = __atomic_load_n(&r->body_bytes_held, __ATOMIC_RELAXED),
        .reloads_ok = __atomic_load_n(&r->reloads_ok, __ATOMIC_RELAXED),
        .reloads_failed = __atomic_load_n(&r->reloads_failed, __ATOMIC_RELAXED),
        .router = r,
    };
    int err = 0;
    char *text = pdr_metrics_render(&r->pool, ms, n, &x, &len, &err);
    if (text == NULL && err == PDR_ETOOBIG) {
        pdr_warn("the /metrics page would pass its ceiling of %zu MiB (PDR_METRICS_PAGE_MAX): not served",
                 PDR_METRICS_PAGE_MAX >> 20);
        pdr_send_error(req, 500, "internal_error",
                       "the metrics page exceeds its ceiling (PDR_METRICS_PAGE_MAX)", 0);
        return;
    }
    if (text == NULL) {
        pdr_send_error(req, 503, "service_unavailable", "out of memory", 1);
        return;
    }
    pdr_send_body(req, 200, "text/plain; version=0.0.4", text, len);
    free(text);
}
