/*
 * Passive health: outlier ejection (Envoy's consecutive-5xx detector, with the sglang router's half-open
 * probation), panic routing and slow start. docs/operations.md, "Passive health", describes the behaviour
 * for operators.
 *
 * Every worker keeps a count of consecutive request failures (5xx answers, connect errors, resets,
 * deadlines and KV-transfer failures blamed on it: router/pd/ reports them through pdr_pool_eject and
 * pdr_pool_report_failure). At outlier.consecutive_failures the worker is ejected for base_ejection_ms x n,
 * n being how many times it was ejected (one step of n is forgiven for every base_ejection_ms it then
 * serves without being ejected), at most max_ejection_ms. It comes back by itself when the time is up;
 * the active health checks keep their own verdict (an ejected worker can be unhealthy too). A worker that
 * comes back is on probation for probation_successes requests (the sglang router's half-open state): one
 * failure then ejects it again at once. At most max_ejection_percent of a role's workers in a pool are
 * ejected at a time (never fewer than one, as Envoy).
 *
 * Panic: when fewer than panic_threshold_percent of a role's non-draining workers in a pool are serving
 * (healthy and not ejected), a pick ignores outlier ejection and chooses among all the healthy ones, as
 * Envoy's panic threshold does, so that a few survivors are not crushed under the whole load (a storm of
 * 5xx from overload ejects workers that are not broken). Unlike Envoy, a worker its health checks mark
 * down, or that a request proved unreachable, stays out even in panic: the data-plane contract answers a
 * dead prefill with a retry elsewhere or a 503 within a second, never a wait on a known-dead worker.
 *
 * Slow start: a worker that came back (its ejection ended, or its checks turned it healthy again) has a
 * weight rising linearly from 10% to 100% over slow_start_ms. Policies honour it: least_load and
 * power_of_two compare (in_flight + 1) / weight, the others skip the worker with probability 1 - weight.
 *
 * The state is per worker, written under the pool's mutex; the fields a pick reads are atomics.
 */
#ifndef PDR_OUTLIER_H
#define PDR_OUTLIER_H

#include <stddef.h>
#include <stdint.h>
#include "config.h"

/* 10%: the weight of a worker that just came back (Envoy's min_weight_percent default). */
#define PDR_OUTLIER_MIN_WEIGHT 0.1

/* What took a worker out, for pdr_worker_ejections_by_reason_total: its health checks failed, a request
 * proved it unreachable, or consecutive request failures (outlier ejection, or health.fall with outlier
 * detection off). */
enum { PDR_EJECT_HEALTH_CHECK = 0, PDR_EJECT_UNREACHABLE, PDR_EJECT_CONSECUTIVE, PDR_EJECT_REASONS };
extern const char *const pdr_eject_reason_names[PDR_EJECT_REASONS];

typedef struct pdr_outlier_state {
    int consec_fail;          /* written under the pool lock (atomic stores): consecutive failed requests */
    unsigned multiplier;      /* under the pool lock: the ejection count the backoff uses (decays) */
    int probation;            /* written under the pool lock (atomic stores): successes due after a return */
    uint64_t until_ms;        /* atomic: ejected until this time (0: never ejected) */
    uint64_t back_ms;         /* atomic: when it last came back (slow start); 0 = never */
    int ramp_ms;              /* atomic: the slow start it came back with (slow_start_ms then; 0 = none) */
    uint64_t ejections_total; /* atomic: outlier ejections */
    uint64_t by_reason[PDR_EJECT_REASONS]; /* atomic: every taking out of the worker, by reason */
    uint64_t last_eject_ms;                /* atomic: the duration of the last ejection */
    uint64_t last_fail_ms;                 /* under the pool lock: the last failure (failure_window_ms) */
    int return_logged;                     /* atomic: pdr_outlier_tick logged the last ejection's end */
} pdr_outlier_state_t;

/* ---- pure (the unit test drives these) ---- */

/* How many of n workers may be ejected at once: max_ejection_percent of n, at least 1 (0 when n is 0). */
size_t pdr_outlier_max_ejected(const pdr_outlier_conf_t *c, size_t n);
/* 1 while the worker is ejected at now_ms. */
int pdr_outlier_is_ejected(const pdr_outlier_state_t *s, uint64_t now_ms);
/* Milliseconds of ejection left at now_ms (0: not ejected). */
uint64_t pdr_outlier_ms_left(const pdr_outlier_state_t *s, uint64_t now_ms);
/* A failed request. ejected_now of the role's n workers in the pool are ejected at the moment. Returns the
 * ejection's duration in ms when this failure ejects the worker, 0 when it does not (below the threshold,
 * disabled, already ejected, or the max_ejection_percent cap; *capped is then set to 1 for the cap). */
uint64_t pdr_outlier_failure(pdr_outlier_state_t *s, const pdr_outlier_conf_t *c, uint64_t now_ms,
                             size_t ejected_now, size_t n, int *capped);
/* A request succeeded: the failure count restarts, probation counts down. */
void pdr_outlier_success(pdr_outlier_state_t *s);
/* Health went from unhealthy to healthy at now_ms: slow start begins. */
void pdr_outlier_came_back(pdr_outlier_state_t *s, const pdr_outlier_conf_t *c, uint64_t now_ms);
/* The worker is a new process (shim events): everything forgotten. */
void pdr_outlier_reset(pdr_outlier_state_t *s);
/* The slow start weight in [PDR_OUTLIER_MIN_WEIGHT, 1] at now_ms, over the ramp the worker came back with;
 * 1 when it had none or it is over. */
double pdr_outlier_weight(const pdr_outlier_state_t *s, uint64_t now_ms);
/* 1 when a role with `serving` of `total` non-draining workers serving (healthy and not ejected), `healthy`
 * of them healthy, is in panic (never with none healthy: nothing to pick). */
int pdr_outlier_panic(const pdr_outlier_conf_t *c, size_t serving, size_t healthy, size_t total);

#endif
