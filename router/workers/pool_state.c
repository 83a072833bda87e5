/*
 * A worker's state in the registry: healthy or not (health checks, failures reported by requests),
 * ejected as an outlier, draining and deleted. Any loop thread.
 */
#include <stdarg.h>
#include <sys/types.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "err.h"
#include "kvevents.h"
#include "pool.h"
#include "pool_internal.h"
#include "util.h"

/* Under the lock. reason: PDR_EJECT_*, what takes it out when it becomes unhealthy. */
static int set_healthy(pdr_worker_t *w, int healthy, int reason)
{
    int was = w->health.healthy;
    __atomic_store_n(&w->health.healthy, healthy, __ATOMIC_RELAXED);
    if (was && !healthy) {
        w->ejections_total++;
        __atomic_add_fetch(&w->outlier.by_reason[reason], 1, __ATOMIC_RELAXED);
    }
    return was != healthy;
}

/* Under the read lock and the lock: one failed request of w for outlier detection. Returns the ejection's
 * duration in ms, 0 when it is not ejected (*capped: max_ejection_percent said no). */
static uint64_t outlier_failure(pdr_pool_t *p, pdr_worker_t *w, int *capped)
{
    uint64_t now = pdr_now_ms();
    size_t n = 0, out = 0;
    const pdr_worker_list_t *l = p->list[w->role];
    for (size_t i = 0; i < l->n; i++)
        if (l->w[i]->group == w->group) {
            n++;
            out += pdr_outlier_is_ejected(&l->w[i]->outlier, now);
        }
    uint64_t d = pdr_outlier_failure(&w->outlier, &p->outlier, now, out, n, capped);
    if (d > 0)
        w->ejections_total++;
    return d;
}

/* After the locks: the log line and event of an outlier verdict (threshold: consecutive_failures then). */
static void outlier_report(pdr_pool_t *p, pdr_worker_t *w, uint64_t d, int capped, int threshold,
                           const char *why)
{
    if (d > 0) {
        pdr_warn("worker %s %s ejected for %llu ms after %d consecutive failures (outlier ejection %llu): %s",
                 w->id, w->target, (unsigned long long)d, threshold,
                 (unsigned long long)__atomic_load_n(&w->outlier.ejections_total, __ATOMIC_RELAXED), why);
        pdr_pool_record(p, w, "ejected for %llu ms after consecutive failures: %s", (unsigned long long)d,
                        why);
    } else if (capped) {
        pdr_pool_record(
            p, w, "not ejected: outlier.max_ejection_percent of its role are ejected already (%s)", why);
    }
}

void pdr_pool_eject(pdr_pool_t *p, pdr_worker_t *w, const char *why)
{
    int capped = 0;
    pthread_rwlock_rdlock(&p->rw);
    int threshold = p->outlier.consecutive_failures;
    pthread_mutex_lock(&p->lock);
    w->failures_total++;
    w->health.consec_ok = 0;
    __atomic_store_n(&w->health.consec_fail, __atomic_load_n(&p->fall, __ATOMIC_RELAXED), __ATOMIC_RELAXED);
    int changed = set_healthy(w, 0, PDR_EJECT_UNREACHABLE);
    if (changed)
        __atomic_store_n(&w->ejected, 1, __ATOMIC_RELAXED);
    uint64_t d = p->outlier.enabled ? outlier_failure(p, w, &capped) : 0;
    pthread_mutex_unlock(&p->lock);
    pthread_rwlock_unlock(&p->rw);
    outlier_report(p, w, d, capped, threshold, why);
    if (changed)
        pdr_warn("worker %s %s marked unhealthy: %s", pdr_role_name(w->role), w->target, why);
    pdr_pool_record(p, w, "%s: %s", changed ? "ejected (marked unhealthy)" : "request failed", why);
}

void pdr_pool_report_failure(pdr_pool_t *p, pdr_worker_t *w, const char *why)
{
    pthread_rwlock_rdlock(&p->rw);
    if (p->outlier.enabled) { /* passive health is outlier detection's; the checks keep their own counts */
        int capped = 0, threshold = p->outlier.consecutive_failures;
        pthread_mutex_lock(&p->lock);
        w->failures_total++;
        uint64_t d = outlier_failure(p, w, &capped);
        pthread_mutex_unlock(&p->lock);
        pthread_rwlock_unlock(&p->rw);
        outlier_report(p, w, d, capped, threshold, why);
        if (d == 0)
            pdr_pool_record(p, w, "request failed: %s", why);
        return;
    }
    pthread_rwlock_unlock(&p->rw);
    pthread_mutex_lock(&p->lock);
    w->failures_total++;
    pdr_health_state_t s = w->health;
    int changed = pdr_health_update(&s, 0, __atomic_load_n(&p->rise, __ATOMIC_RELAXED),
                                    __atomic_load_n(&p->fall, __ATOMIC_RELAXED));
    w->health.consec_ok = s.consec_ok;
    __atomic_store_n(&w->health.consec_fail, s.consec_fail, __ATOMIC_RELAXED);
    if (set_healthy(w, s.healthy, PDR_EJECT_CONSECUTIVE) && !s.healthy)
        __atomic_store_n(&w->ejected, 1, __ATOMIC_RELAXED);
    int fails = s.consec_fail;
    pthread_mutex_unlock(&p->lock);
    if (changed)
        pdr_warn("worker %s %s marked unhealthy after %d failures: %s", pdr_role_name(w->role), w->target,
                 fails, why);
    if (changed)
        pdr_pool_record(p, w, "marked unhealthy after %d failures: %s", fails, why);
    else
        pdr_pool_record(p, w, "request failed: %s", why);
}

void pdr_pool_report_success(pdr_pool_t *p, pdr_worker_t *w)
{
    if (__atomic_load_n(&w->health.consec_fail, __ATOMIC_RELAXED) == 0 &&
        __atomic_load_n(&w->outlier.consec_fail, __ATOMIC_RELAXED) == 0 &&
        __atomic_load_n(&w->outlier.probation, __ATOMIC_RELAXED) == 0)
        return;
    pthread_mutex_lock(&p->lock);
    __atomic_store_n(&w->health.consec_fail, 0, __ATOMIC_RELAXED); /* read unlocked above */
    pdr_outlier_success(&w->outlier);
    pthread_mutex_unlock(&p->lock);
}

int pdr_pool_check_result(pdr_pool_t *p, pdr_worker_t *w, int ok)
{
    pthread_rwlock_rdlock(&p->rw); /* p->outlier */
    pthread_mutex_lock(&p->lock);
    if (ok)
        __atomic_add_fetch(&w->checks_ok, 1, __ATOMIC_RELAXED); /* readiness reads it on every loop */
    else
        w->checks_failed++;
    w->last_check_ms = pdr_now_ms();
    pdr_health_state_t s = w->health;
    int changed = pdr_health_update(&s, ok, __atomic_load_n(&p->rise, __ATOMIC_RELAXED),
                                    __atomic_load_n(&p->fall, __ATOMIC_RELAXED));
    w->health.consec_ok = s.consec_ok;
    __atomic_store_n(&w->health.consec_fail, s.consec_fail, __ATOMIC_RELAXED);
    if (set_healthy(w, s.healthy, PDR_EJECT_HEALTH_CHECK) && s.healthy)
        pdr_outlier_came_back(&w->outlier, &p->outlier, pdr_now_ms()); /* slow start */
    if (s.healthy)
        __atomic_store_n(&w->ejected, 0, __ATOMIC_RELAXED); /* back: the checks decide again */
    pthread_mutex_unlock(&p->lock);
    pthread_rwlock_unlock(&p->rw);
    return changed;
}

/* ---- drain ---- */

const char *pdr_worker_state_name(const pdr_worker_t *w)
{
    switch (pdr_worker_drain_state(w)) {
    case PDR_DRAIN_DRAINING:
        return "draining";
    case PDR_DRAIN_DRAINED:
        return "drained";
    default:
        if (pdr_outlier_is_ejected(&w->outlier, pdr_now_ms()))
            return "ejected";
        if (pdr_worker_healthy(w))
            return "healthy";
        return __atomic_load_n(&w->ejected, __ATOMIC_RELAXED) ? "ejected" : "unhealthy";
    }
}

int pdr_pool_drain(pdr_pool_t *p, pdr_worker_t *w, uint64_t timeout_ms, const char *why)
{
    pthread_mutex_lock(&p->lock);
    int was = pdr_worker_drain_state(w);
    w->drain_deadline_ms = timeout_ms > 0 ? pdr_now_ms() + timeout_ms : 0;
    if (was == PDR_DRAIN_ACTIVE) {
        w->drains_total++;
        __atomic_store_n(&w->drain, PDR_DRAIN_DRAINING, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&p->lock);
    if (was == PDR_DRAIN_ACTIVE)
        pdr_info("worker %s %s draining (%s): %d requests in flight, timeout %llu ms", w->id, w->target, why,
                 pdr_worker_inflight(w), (unsigned long long)timeout_ms);
    /* Requests that ended before the flag was visible did not see it: check once here. */
    if (pdr_worker_inflight(w) == 0)
        pdr_pool_note_idle(w);
    return pdr_worker_drain_state(w);
}

int pdr_pool_activate(pdr_pool_t *p, pdr_worker_t *w)
{
    pthread_mutex_lock(&p->lock);
    int was = pdr_worker_drain_state(w);
    w->drain_deadline_ms = 0;
    w->remove_when_drained = 0;
    __atomic_store_n(&w->drain, PDR_DRAIN_ACTIVE, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&p->lock);
    if (was != PDR_DRAIN_ACTIVE)
        pdr_info("worker %s %s activated (was %s)", w->id, w->target,
                 was == PDR_DRAIN_DRAINING ? "draining" : "drained");
    return was;
}

int pdr_pool_drain_tick(pdr_pool_t *p, uint64_t now_ms)
{
    int changed = 0;
    pdr_worker_t **ws;
    size_t n = pdr_pool_snapshot(p, -1, &ws);
    for (size_t i = 0; i < n; i++) {
        pdr_worker_t *w = ws[i];
        int st = pdr_worker_drain_state(w);
        if (st == PDR_DRAIN_DRAINING && pdr_worker_inflight(w) == 0) {
            pdr_pool_note_idle(w);
            changed++;
        } else if (st == PDR_DRAIN_DRAINING) {
            pthread_mutex_lock(&p->lock);
            int expired = w->drain_deadline_ms != 0 && now_ms >= w->drain_deadline_ms;
            int want = PDR_DRAIN_DRAINING;
            expired = expired && __atomic_compare_exchange_n(&w->drain, &want, PDR_DRAIN_DRAINED, 0,
                                                             __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
            pthread_mutex_unlock(&p->lock);
            if (expired) {
                changed++;
                pdr_warn(
                    "worker %s %s drained at its drain timeout with %d requests still in flight (they are "
                    "left to finish)",
                    w->id, w->target, pdr_worker_inflight(w));
                pdr_pool_record(p, w, "drain timeout: drained with %d requests still in flight",
                                pdr_worker_inflight(w));
            }
        }
        if (pdr_worker_drain_state(w) == PDR_DRAIN_DRAINED) {
            pthread_mutex_lock(&p->lock);
            int go = w->remove_when_drained;
            w->remove_when_drained = 0;
            pthread_mutex_unlock(&p->lock);
            if (go && pdr_pool_remove(p, w, "deleted after draining") == 0)
                changed++;
        }
    }
    pdr_pool_release(ws, n);
    return changed;
}

int pdr_pool_delete(pdr_pool_t *p, pdr_worker_t *w, int force, uint64_t timeout_ms)
{
    if (force)
        return pdr_pool_remove(p, w, "deleted (force)") == 0 ? -1 : PDR_ENOWORKER;
    pthread_mutex_lock(&p->lock);
    w->remove_when_drained = 1;
    pthread_mutex_unlock(&p->lock);
    int st = pdr_pool_drain(p, w, timeout_ms, "delete requested");
    if (st == PDR_DRAIN_DRAINED) {
        pthread_mutex_lock(&p->lock);
        w->remove_when_drained = 0;
        pthread_mutex_unlock(&p->lock);
        if (pdr_pool_remove(p, w, "deleted (idle)") == 0)
            return -1;
    }
    return st;
}

/* ---- identity ---- */

void pdr_pool_set_identity(pdr_pool_t *p, pdr_worker_t *w, const pdr_identity_t *id, const char *error)
{
    pthread_mutex_lock(&p->lock);
    if (id != NULL) {
        w->ident.id = *id;
        w->ident.error[0] = '\0';
        w->ident.read_ms = pdr_now_ms();
    } else {
        snprintf(w->ident.error, sizeof(w->ident.error), "%s", error != NULL ? error : "unknown");
    }
    __atomic_store_n(&w->ident.key, id != NULL ? id->key : 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&p->lock);
}

void pdr_pool_forget_identity(pdr_pool_t *p, pdr_worker_t *w, const char *why)
{
    pthread_mutex_lock(&p->lock);
    __atomic_store_n(&w->ident.key, 0, __ATOMIC_RELEASE);
    snprintf(w->ident.error, sizeof(w->ident.error), "%s", why);
    pthread_mutex_unlock(&p->lock);
}

uint64_t pdr_pool_identity(pdr_pool_t *p, const pdr_worker_t *w, pdr_identity_t *id, char *err, size_t cap)
{
    pthread_mutex_lock(&p->lock);
    *id = w->ident.id;
    if (err != NULL && cap > 0)
        snprintf(err, cap, "%s", w->ident.error);
    uint64_t key = __atomic_load_n(&w->ident.key, __ATOMIC_ACQUIRE);
    pthread_mutex_unlock(&p->lock);
    return key;
}

int pdr_pool_protocol_of(pdr_pool_t *p, const pdr_worker_t *w)
{
    pthread_rwlock_rdlock(&p->rw);
    int proto = w->group >= 0 && (size_t)w->group < p->n_groups ? (int)p->groups[w->group].protocol : -1;
    pthread_rwlock_unlock(&p->rw);
    return proto;
}
