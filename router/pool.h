/*
 * The worker registry: every prefill and decode worker with its health state and in-flight count,
 * and the policies that pick a pair. Shared by every loop thread: counters and the healthy flag are
 * atomics, health transitions happen under the pool's mutex, the worker list itself is immutable.
 *
 * Health state machine (HAProxy/Envoy style): a worker starts healthy; `fall` consecutive failed
 * checks make it unhealthy, `rise` consecutive good checks make it healthy again. Request failures
 * that prove the worker unreachable (connect refused, timeout) eject it at once ("passive" check);
 * the active checks bring it back.
 *
 * Drain state machine (orthogonal to health; operator- or worker-initiated, HAProxy's "drain"):
 * ACTIVE --drain--> DRAINING --in_flight reaches 0, or the drain timeout passes--> DRAINED
 * DRAINING/DRAINED --activate--> ACTIVE. Pickers skip DRAINING and DRAINED workers; requests already
 * in flight finish (nothing is cancelled, not even at the timeout). Health checks keep running.
 */
#ifndef PDR_POOL_H
#define PDR_POOL_H

#include <pthread.h>
#include <stdint.h>
#include "config.h"
#include "events.h"

typedef struct pdr_health_state {
    int healthy;
    int consec_ok, consec_fail;
} pdr_health_state_t;

/* Applies one check result; returns 1 when the healthy flag changed. Pure. */
int pdr_health_update(pdr_health_state_t *s, int ok, int rise, int fall);

enum { PDR_DRAIN_ACTIVE = 0, PDR_DRAIN_DRAINING = 1, PDR_DRAIN_DRAINED = 2 };

typedef struct pdr_worker {
    pdr_role_t role;
    int index;
    const pdr_worker_conf_t *conf; /* owned by the pool's config snapshot */
    char bootstrap_host[80];       /* as sent to workers: IPv6 in brackets */
    pdr_health_state_t health;
    int inflight;
    uint64_t requests_total, failures_total, ejections_total;
    uint64_t checks_ok, checks_failed;
    uint64_t last_check_ms;
    struct pdr_health_probe *probe; /* active check in progress */
    int drain;                      /* atomic: PDR_DRAIN_* */
    uint64_t drain_deadline_ms;     /* under the pool lock: 0 = no timeout */
    uint64_t drains_total;          /* under the pool lock */
} pdr_worker_t;

typedef struct pdr_pool {
    pdr_config_t *config;
    pdr_worker_t *workers[2]; /* [PDR_ROLE_PREFILL], [PDR_ROLE_DECODE] */
    size_t n[2];
    unsigned rr_next[2];  /* atomic */
    pthread_mutex_t lock; /* health transitions */
    pdr_events_t events;  /* recent errors, for the admin status page (own lock) */
} pdr_pool_t;

static inline int pdr_worker_healthy(const pdr_worker_t *w)
{
    return __atomic_load_n(&w->health.healthy, __ATOMIC_RELAXED);
}
static inline int pdr_worker_drain_state(const pdr_worker_t *w)
{
    return __atomic_load_n(&w->drain, __ATOMIC_ACQUIRE);
}
/* Healthy and not draining: may receive new requests. */
static inline int pdr_worker_serving(const pdr_worker_t *w)
{
    return pdr_worker_healthy(w) && pdr_worker_drain_state(w) == PDR_DRAIN_ACTIVE;
}
static inline int pdr_worker_inflight(const pdr_worker_t *w)
{
    return __atomic_load_n(&w->inflight, __ATOMIC_RELAXED);
}
/* A draining worker's last request ended: DRAINING -> DRAINED (any thread). */
void pdr_pool_note_idle(pdr_worker_t *w);
/* Counts a request to the worker starting (+1) or ending (-1). */
static inline void pdr_worker_track(pdr_worker_t *w, int delta)
{
    int now = __atomic_add_fetch(&w->inflight, delta, __ATOMIC_ACQ_REL);
    if (delta > 0)
        __atomic_add_fetch(&w->requests_total, 1, __ATOMIC_RELAXED);
    else if (now == 0 && pdr_worker_drain_state(w) == PDR_DRAIN_DRAINING)
        pdr_pool_note_idle(w);
}

/* Applies an active check's result under the pool lock; returns 1 when the healthy flag changed. */
int pdr_pool_check_result(pdr_pool_t *p, pdr_worker_t *w, int ok);

int pdr_pool_init(pdr_pool_t *p, pdr_config_t *c);
void pdr_pool_dispose(pdr_pool_t *p);

/* Drain control. drain: ACTIVE -> DRAINING (DRAINED at once when idle); timeout_ms > 0 sets a deadline
 * after which pdr_pool_drain_tick forces DRAINED. A second drain of a draining worker only updates the
 * deadline. Returns the new state. */
int pdr_pool_drain(pdr_pool_t *p, pdr_worker_t *w, uint64_t timeout_ms, const char *why);
/* Back to ACTIVE (serving when healthy). Returns the previous drain state. */
int pdr_pool_activate(pdr_pool_t *p, pdr_worker_t *w);
/* Periodic (loop 0): DRAINING workers that are idle or past their deadline become DRAINED. Returns how
 * many changed. */
int pdr_pool_drain_tick(pdr_pool_t *p, uint64_t now_ms);
/* "healthy", "unhealthy", "draining" or "drained". */
const char *pdr_worker_state_name(const pdr_worker_t *w);
/* The worker with this stable id ("prefill-0", "decode-1"): role name, '-', index. NULL if none. */
pdr_worker_t *pdr_pool_find(pdr_pool_t *p, const char *id, size_t len);
size_t pdr_pool_count_state(const pdr_pool_t *p, pdr_role_t role, int drain_state);

/* Picks a healthy worker of the role by its policy, preferring workers not in `avoid` (a bitmask of
 * worker indexes, for retries). Draining and drained workers are never picked. Returns NULL when none is
 * healthy. */
pdr_worker_t *pdr_pool_pick(pdr_pool_t *p, pdr_role_t role, uint64_t avoid);
/* Workers of the role that may receive new requests (healthy and not draining). */
size_t pdr_pool_count_healthy(const pdr_pool_t *p, pdr_role_t role);

/* A request to this worker failed in a way that proves it unreachable: mark it unhealthy now. */
void pdr_pool_eject(pdr_pool_t *p, pdr_worker_t *w, const char *why);
/* A request failed with a server error: counts like a failed check. */
void pdr_pool_report_failure(pdr_pool_t *p, pdr_worker_t *w, const char *why);
/* A request succeeded: resets the count of consecutive failures. */
void pdr_pool_report_success(pdr_pool_t *p, pdr_worker_t *w);

const char *pdr_role_name(pdr_role_t r);
/* Records a recent error about w (NULL: none) in p->events, with the worker's id. Any thread. */
void pdr_pool_record(pdr_pool_t *p, const pdr_worker_t *w, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
