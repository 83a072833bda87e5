/*
 * The shim events seen from outside (shim_events_views.c): the admin views, the metrics, and decode
 * admission by the free KV the shims report. shim_events.h includes it.
 */
#ifndef PDR_SHIM_EVENTS_VIEWS_H
#define PDR_SHIM_EVENTS_VIEWS_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include "shim_events_types.h"

struct pdr_router;
struct pdr_worker;
struct pdr_config;
struct pdr_pdreq;

/* The name of each refusal cause, as the metrics and logs say it. */
extern const char *const pdr_shim_refusal_names[PDR_SE__COUNT];

/* Loop 0: GET /admin/v1/shim, the counters and the most recent room events. */
json_t *pdr_shim_events_json(struct pdr_router *r);
/* The worker's load fields for admin status (NULL when it never reported). */
json_t *pdr_shim_worker_json(const struct pdr_worker *w);

typedef void (*pdr_shim_put_cb)(void *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Any loop: the pdr_shim_* and per-worker load metric families. */
void pdr_shim_events_metrics(struct pdr_router *r, pdr_shim_put_cb put, void *out);

/* ---- decode admission (kv_admission) ---- */

/* A request's hold on a decode's KV. */
typedef struct pdr_kv_hold {
    struct pdr_worker *w; /* borrowed: the request holds its own reference on the worker */
    uint64_t bytes;
    uint64_t epoch; /* the worker's incarnation when reserved (a restart drops every hold) */
} pdr_kv_hold_t;

/* The request's KV need in tokens: prompt tokens (ids known: n_ids; else the prompt text's bytes over
 * kv_admission.prompt_bytes_per_token) plus its output tokens (max_new_tokens / max_tokens /
 * max_completion_tokens, else kv_admission.max_new_tokens); batches sum their items' text as one.
 * UINT64_MAX when the sum does not fit in 64 bits. */
uint64_t pdr_kv_need_tokens(const struct pdr_config *c, const struct pdr_pdreq *pr, size_t n_ids,
                            size_t text_len);
/* Reserves need_tokens of w's KV: 1 when reserved (or w is not limited: never reported, or admission
 * off), 0 when it does not fit now, -1 when it never can (more bytes than the worker's reported total,
 * or more than 2^64-1). Without a shim report, a fresh engine answer (load.kv_usage_max_percent) says 1
 * below the key's usage and 0 at or above it, holding nothing. */
int pdr_kv_admit(const struct pdr_config *c, struct pdr_worker *w, uint64_t need_tokens, pdr_kv_hold_t *h);
void pdr_kv_release(pdr_kv_hold_t *h);
/* Whether admission limits w now (admission on, and a recent report with kv_bytes_per_token, or a fresh
 * engine answer with its KV usage and load.kv_usage_max_percent on). */
int pdr_kv_limited(const struct pdr_config *c, const struct pdr_worker *w);
/* Counts an admission outcome: 0 admitted, 1 another decode taken, 2 waited, 3 refused (503). */
void pdr_kv_count(int outcome);

#endif
