/*
 * Prometheus metrics (text format 0.0.4): counters and histograms kept per loop thread (no sharing on
 * the request path), summed when rendered, together with the live worker gauges from the pool. Names use the
 * pdr_ prefix and base units (seconds, bytes); counters end in _total.
 */
#ifndef PDR_METRICS_H
#define PDR_METRICS_H

#include <stddef.h>
#include <stdint.h>
#include "defaults.h"
#include "pool.h"

enum {
    PDR_MR_GENERATE = 0,
    PDR_MR_COMPLETIONS,
    PDR_MR_CHAT,
    PDR_MR_MODELS,
    PDR_MR_HEALTH,
    PDR_MR_READINESS,
    PDR_MR_METRICS,
    PDR_MR_OTHER,
    PDR_MR__COUNT
};

enum {
    PDR_CAUSE_CONNECT = 0,
    PDR_CAUSE_TIMEOUT,
    PDR_CAUSE_RESET,
    PDR_CAUSE_STATUS_5XX,
    PDR_CAUSE_FIRST_BYTE_DEADLINE,
    PDR_CAUSE_KV_DEADLINE,
    PDR_CAUSE_OTHER,
    PDR_CAUSE__COUNT
};

/* Admin API requests refused for their credentials (admin.c), by reason. */
enum { PDR_ADMIN_AUTH_MISSING = 0, PDR_ADMIN_AUTH_WRONG, PDR_ADMIN_AUTH_DUPLICATED, PDR_ADMIN_AUTH__COUNT };

/* Outcomes of the decode legs that release KV a client left on a vLLM prefill (pd_vllm.c). */
enum { PDR_KV_RELEASE_OK = 0, PDR_KV_RELEASE_FAILED, PDR_KV_RELEASE_TIMEOUT, PDR_KV_RELEASE__COUNT };

/* Outcomes of the engine aborts of legs the router let go (pd/abort.c), by role: sent (an abort request went
 * out), then ok (the worker answered 2xx), failed (another answer, or no connection) or timeout (no answer in
 * pd.abort_timeout_ms); dropped (not sent: the loop had PDR_ABORTS_INFLIGHT_MAX in flight, or a shutdown
 * passed lifecycle.drain_timeout_ms); closed (a protocol whose engine aborts a request whose connection
 * closes: nothing sent). */
enum {
    PDR_ABORT_SENT = 0,
    PDR_ABORT_OK,
    PDR_ABORT_FAILED,
    PDR_ABORT_TIMEOUT,
    PDR_ABORT_DROPPED,
    PDR_ABORT_CLOSED,
    PDR_ABORT__COUNT
};

/* Stream migrations (pd/migrate.c), by outcome: moved (the stream went on on a new pair), completed (the
 * client had every token: only the stream's end was missing), refused (the request cannot be moved: n > 1,
 * logprobs, echo, a prompt of token ids...), budget (migration.max_attempts spent), unreadable (the relayed
 * stream could not be read back, or its text outgrew migration.max_bytes), failed (no new pair answered, or
 * the new decode refused the request: the stream ended with an error event after all). */
enum {
    PDR_MIG_MOVED = 0,
    PDR_MIG_COMPLETED,
    PDR_MIG_REFUSED,
    PDR_MIG_BUDGET,
    PDR_MIG_UNREADABLE,
    PDR_MIG_FAILED,
    PDR_MIG__COUNT
};

#define PDR_HIST_BUCKETS 16
typedef struct pdr_hist {
    uint64_t counts[PDR_HIST_BUCKETS + 1]; /* the last one is +Inf */
    double sum;
    uint64_t count;
} pdr_hist_t;

/* The bucket of v among ascending bounds: the number of bounds below v (PDR_HIST_BUCKETS: +Inf). Four
 * halvings of the sixteen bounds and a last comparison, without branches. */
static inline unsigned pdr_hist_bucket(const double *bounds, double v)
{
    _Static_assert(PDR_HIST_BUCKETS == 16, "pdr_hist_bucket halves sixteen bounds");
    unsigned i = 0;
    i += v > bounds[i + 7] ? 8u : 0u;
    i += v > bounds[i + 3] ? 4u : 0u;
    i += v > bounds[i + 1] ? 2u : 0u;
    i += v > bounds[i] ? 1u : 0u;
    return i + (v > bounds[i]);
}

/* Sidecar mode's prefill header (pd/sidecar.c), by outcome: used (it named a serving prefill of the pool),
 * absent (the router's policy picked), malformed (400), not_in_pool (403: nothing is sent to it), unhealthy
 * (503: the named prefill is down or ejected, or left the pool since the request arrived), draining (the
 * named prefill drains: the policy picked another). */
enum {
    PDR_SC_USED = 0,
    PDR_SC_ABSENT,
    PDR_SC_MALFORMED,
    PDR_SC_NOT_IN_POOL,
    PDR_SC_UNHEALTHY,
    PDR_SC_DRAINING,
    PDR_SC__COUNT
};
extern const char *const pdr_sidecar_outcome_names[PDR_SC__COUNT];

typedef struct pdr_metrics {
    uint64_t requests[PDR_MR__COUNT][600];
    uint64_t upstream_errors[2][PDR_CAUSE__COUNT];
    uint64_t
        prefill_late_failures[PDR_CAUSE__COUNT]; /* after the decode's first byte (pd.relay first_byte) */
    uint64_t retries_total;
    uint64_t no_worker_total[2];
    uint64_t client_aborts_total;
    uint64_t client_stalled_total;       /* streams cut: the client took no data for stream_idle_ms */
    uint64_t merge_too_large_total;      /* logprob merges past limits.max_merge_bytes (502 or error event) */
    uint64_t bad_framing_total;          /* HTTP/1 requests refused for an ambiguous head (reqguard.h) */
    uint64_t accept_fd_exhausted_total;  /* accept() out of file descriptors: accepting paused */
    uint64_t upstream_tls_full_total;    /* TLS handshakes to https:// workers: full */
    uint64_t upstream_tls_resumed_total; /* and resumed from a kept session */
    uint64_t upstream_tls_resumption_failures_total; /* workers that failed a resumed handshake */
    uint64_t h2_client_resets_total; /* HTTP/2 streams the client reset before their answer ended */
    uint64_t h2_reset_floods_total;  /* connections closed for exceeding limits.h2_max_resets */
    uint64_t alog_suppressed_total;  /* access-log lines of aborted requests over the rate */
    uint64_t chunk_too_large_total;  /* HTTP/1 chunked bodies refused at a chunk past max_body_bytes */
    uint64_t h2_header_block_too_large_total; /* HTTP/2 connections closed for a header block too large */
    uint64_t headers_too_large_total; /* requests answered 431 or 414 (limits.max_headers/max_header_bytes) */
    /* Client-side limits (router/front/limits.c, conn.c): */
    uint64_t body_too_large_total;            /* requests answered 413 (limits.max_body_bytes) */
    uint64_t batch_too_large_total;           /* requests answered 400 (limits.max_batch_items) */
    uint64_t client_header_timeouts_total;    /* 408: the head did not arrive in timeouts.client_header_ms */
    uint64_t client_body_timeouts_total;      /* 408: the body paused longer than timeouts.client_body_ms */
    uint64_t keepalive_closed_total;          /* idle keep-alive connections closed (timeout or idle cap) */
    uint64_t accept_paused_total;             /* accepting paused at limits.max_client_connections */
    uint64_t h2_control_floods_total;         /* connections closed past limits.h2_max_control_frames */
    uint64_t tls_peer_gone_total;             /* TLS client connections closed quietly after a failed read */
    uint64_t lingering_total;                 /* early answers followed by a lingering close */
    uint64_t lingering_cut_total;             /* ... whose client sent past limits.max_lingering_bytes */
    uint64_t lingering_discarded_bytes_total; /* request bytes read and dropped while lingering */
    uint64_t h2_bodies_over_budget_total;     /* HTTP/2 bodies refused for the body budget */
    uint64_t h2_body_timeouts_total;          /* HTTP/2 bodies reset: paused past timeouts.client_body_ms */
    uint64_t h2_bodies_evicted_total;         /* HTTP/2 bodies reset to make room in the body budget */
    uint64_t h2_bodies_unfollowed_total; /* HTTP/2 connections whose bodies could not be followed (memory) */
    uint64_t tickets_signed_total;       /* protocol pdshim: tickets signed (one per room and attempt) */
    uint64_t tickets_refused_total; /* protocol pdshim: a worker refused the router's ticket (403 -> 502) */
    uint64_t bytes_in_total, bytes_out_total;
    uint64_t vllm_kv_release[PDR_KV_RELEASE__COUNT]; /* by outcome */
    uint64_t engine_aborts[2][PDR_ABORT__COUNT];     /* by role and outcome */
    uint64_t migrations[PDR_MIG__COUNT];             /* stream migrations, by outcome */
    uint64_t disagg_decisions[3]; /* conditional disaggregation, by pdr_disagg_decision_t (disagg.h) */
    uint64_t sidecar_header[PDR_SC__COUNT]; /* sidecar mode's prefill header, by outcome */
    uint64_t admin_auth_refused[PDR_ADMIN_AUTH__COUNT];
    pdr_hist_t duration[PDR_MR__COUNT];
    pdr_hist_t ttfb[PDR_MR__COUNT];
    /* LLM latencies of PD routes (docs/metrics.md has the exact definitions). */
    pdr_hist_t ttft[PDR_MR__COUNT];    /* PDR_BUCKETS_LLM */
    pdr_hist_t tpot[PDR_MR__COUNT];    /* PDR_BUCKETS_TPOT */
    pdr_hist_t e2e[PDR_MR__COUNT];     /* PDR_BUCKETS_LLM */
    pdr_hist_t prefill[PDR_MR__COUNT]; /* PDR_BUCKETS_LLM */
    uint64_t stream_events_total[PDR_MR__COUNT];
    uint64_t started_wall_s;
    struct pdr_phase_metrics *phases; /* phases.h: allocated with the loop, NULL in summed copies */
    int64_t waiting; /* gauge: PD requests whose response has not started (queued in the workers) */
} pdr_metrics_t;

/* Bucket sets: the general one (request duration, first byte), one for LLM request latencies (first
 * token, end to end, prefill: 5 ms .. 120 s) and one for the time per output token (1 ms .. 1 s). */
typedef enum { PDR_BUCKETS_DEFAULT = 0, PDR_BUCKETS_LLM, PDR_BUCKETS_TPOT, PDR_BUCKETS__COUNT } pdr_buckets_t;

void pdr_hist_observe(pdr_hist_t *h, double seconds);
void pdr_hist_observe_in(pdr_hist_t *h, pdr_buckets_t set, double seconds);

/* Counts the token events of an SSE stream as its bytes go by, in chunks split anywhere. An event ends
 * at a blank line ("\n\n"); it is a token event when its first line is "data:" and its payload is
 * neither "[DONE]" nor an error object ({"error" ...). Only the first bytes of each event are kept (no
 * JSON parsing, no allocation); the scan is memchr over the chunk. Zero-initialise before the first call. */
#define PDR_SSE_HEAD 24
typedef struct pdr_sse_counter {
    char head[PDR_SSE_HEAD]; /* the current event's first bytes */
    uint8_t head_len;
    uint8_t prev_nl; /* the last byte seen was a '\n' that did not end an event */
} pdr_sse_counter_t;

/* Returns how many token events ended in [p, p + n). */
size_t pdr_sse_count_tokens(pdr_sse_counter_t *c, const char *p, size_t n);
void pdr_metrics_count_request(pdr_metrics_t *m, int route, int status, double seconds, double ttfb_seconds);

/* The histograms' bucket bounds, by set (metrics.c). */
extern const double pdr__metrics_buckets[PDR_BUCKETS__COUNT][PDR_HIST_BUCKETS];

#endif
