/*
 * Per-request phase timing (docs/operations.md "Where a request's time went"). A PD request carries one
 * pdr_phase_t: monotonic timestamps in microseconds (0: the point was not reached), filled at the points
 * the request path already reads the clock, plus the KV transfer as the shims report it
 * (pdr_phase_kv). At the end of the request the phases are derived from the timestamps, written to the
 * access log, observed in the Prometheus histograms below and exported as trace spans (trace.h).
 *
 * The phases (each a duration in microseconds):
 *   queue              arrival -> the first leg of the attempt that answered is sent (the pair's pick and,
 *                      after a retry, the failed attempts)
 *   prefill            the prefill leg sent -> its complete answer
 *   kv_transfer        the shim's transfer start -> end (wall clock of the shim; pdr_phase_kv)
 *   decode_admission   the decode leg sent -> its response headers
 *   decode_first_token arrival -> the decode's first body byte reaches the router
 *   first_token        arrival -> the first token byte handed to the client (streams: the first token
 *                      event; other answers: the first body byte)
 *   last_token         arrival -> the last token byte handed to the client
 *
 * No allocation, no lock. Loop thread of the request only; pdr_phase_metrics_render reads the loops'
 * sets without locks (as metrics.c does).
 */
#ifndef PDR_PHASES_H
#define PDR_PHASES_H

#include <stddef.h>
#include <stdint.h>
#include "metrics.h"

typedef enum {
    PDR_PHASE_QUEUE = 0,
    PDR_PHASE_PREFILL,
    PDR_PHASE_KV_TRANSFER,
    PDR_PHASE_DECODE_ADMISSION,
    PDR_PHASE_DECODE_FIRST_TOKEN,
    PDR_PHASE_FIRST_TOKEN,
    PDR_PHASE_LAST_TOKEN,
    PDR_PHASE__COUNT
} pdr_phase_id_t;

extern const char *const pdr_phase_names[PDR_PHASE__COUNT];

/* KV transfer backends as the shims name them; anything else counts as "other". */
enum { PDR_KVB_TCP = 0, PDR_KVB_RDMA, PDR_KVB_CUDA_IPC, PDR_KVB_OTHER, PDR_KVB__COUNT };
extern const char *const pdr_kv_backend_names[PDR_KVB__COUNT];
/* The index of a backend name (NULL or unknown: PDR_KVB_OTHER). */
int pdr_kv_backend_index(const char *name);

#define PDR_PHASE_MAX_POOLS 64 /* pools with their own TTFT/TPOT series per loop (PDR_CONFIG_MAX_POOLS) */
#define PDR_PHASE_POOL_NAME 64
#define PDR_PHASE_ROUTES 3 /* generate, completions, chat_completions (PDR_MR_GENERATE..PDR_MR_CHAT) */

/* One loop's phase metrics (inside pdr_metrics_t). */
typedef struct pdr_phase_metrics {
    pdr_hist_t kv_seconds[PDR_KVB__COUNT];
    pdr_hist_t kv_bytes[PDR_KVB__COUNT];
    uint64_t kv_failed[PDR_KVB__COUNT]; /* transfers the shim reported failed (not in the histograms) */
    pdr_hist_t phase[PDR_PHASE__COUNT];
    /* TTFT and TPOT by route and pool, the pools known by name (a reload may renumber them). Slots are
     * claimed in order and never freed; n_pools is published after the name is written. */
    char pool_names[PDR_PHASE_MAX_POOLS][PDR_PHASE_POOL_NAME];
    uint32_t n_pools;
    pdr_hist_t ttft[PDR_PHASE_ROUTES][PDR_PHASE_MAX_POOLS];
    pdr_hist_t tpot[PDR_PHASE_ROUTES][PDR_PHASE_MAX_POOLS];
} pdr_phase_metrics_t;

typedef struct pdr_phase {
    pdr_phase_metrics_t *m; /* where pdr_phase_kv counts (the request's loop); NULL: nowhere */
    uint64_t arrival_us;
    uint64_t sent_us; /* the first leg of the current attempt sent */
    uint64_t prefill_sent_us, prefill_headers_us, prefill_done_us;
    uint64_t decode_sent_us, decode_headers_us, decode_first_byte_us;
    uint64_t first_token_us, last_token_us, end_us;
    /* The KV transfer (pdr_phase_kv): the shim's wall-clock times, in microseconds since the epoch. */
    uint64_t kv_start_wall_us, kv_end_wall_us, kv_bytes;
    int kv_status; /* 0: done; else the shim's error */
    unsigned kv_seen : 1, solo : 1, vllm : 1;
    char kv_backend[16];
    char kv_cause[48];
} pdr_phase_t;

/* Starts the record of a request that arrived at now_us. */
void pdr_phase_init(pdr_phase_t *p, pdr_phase_metrics_t *m, uint64_t now_us);
/* A new attempt: the leg timestamps of the previous one are forgotten (queue then covers it). */
void pdr_phase_attempt(pdr_phase_t *p);

/* The KV transfer of the request's room, as its shim reported it: start and end on the shim's wall
 * clock (microseconds since the epoch), bytes moved, the backend ("tcp", "rdma", "cuda_ipc"), status 0
 * when done or the shim's error code with a cause. Counted in pdr_kv_transfer_seconds/_bytes{backend}
 * (successful transfers) at once; the last report is the one the access log and the trace show. Loop
 * thread of the request. */
void pdr_phase_kv(pdr_phase_t *p, uint64_t start_wall_us, uint64_t end_wall_us, uint64_t bytes,
                  const char *backend, int status, const char *cause);

/* The phase's duration in microseconds, or -1 when it was not reached (or does not apply). */
int64_t pdr_phase_duration(const pdr_phase_t *p, pdr_phase_id_t id);

/* Observes every phase reached in m's histograms (at the end of the client's answer), but prefill. */
void pdr_phase_observe(const pdr_phase_t *p, pdr_phase_metrics_t *m);
/* Observes the prefill phase (when the prefill leg answered: with pd.relay first_byte that may be after
 * the client's answer ended). */
void pdr_phase_observe_prefill(const pdr_phase_t *p, pdr_phase_metrics_t *m);
/* TTFT/TPOT of a 2xx PD request by route (PDR_MR_*) and pool name. */
void pdr_phase_observe_llm(pdr_phase_metrics_t *m, int route, const char *pool, double ttft_s, double tpot_s);

/* Writes the phases as one JSON object member: "phases_us":{"queue":N,...} with only the phases reached,
 * then "kv":{...} or "kv":null. Returns the bytes written (snprintf's rule: may exceed cap). */
int pdr_phase_format_json(const pdr_phase_t *p, char *out, size_t cap);

/* Renders the phase families of the n loops' sets through put (metrics.c's put_line). */
typedef void (*pdr_phase_put_cb)(void *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void pdr_phase_metrics_render(const pdr_metrics_t *const *ms, size_t n, pdr_phase_put_cb put, void *o);

#endif
