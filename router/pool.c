/*
 * Worker registry and pair selection. Policies: round_robin (next healthy worker in order),
 * least_load (power of two choices on in-flight requests: two distinct random healthy workers, the
 * less loaded wins, as sglang's power_of_two and Envoy's least_request do), random. Any loop thread.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "err.h"
#include "pool.h"
#include "util.h"

int pdr_health_update(pdr_health_state_t *s, int ok, int rise, int fall)
{
    int was = s->healthy;
    if (ok) {
        s->consec_fail = 0;
        if (s->consec_ok < rise)
            s->consec_ok++;
        if (!s->healthy && s->consec_ok >= rise)
            s->healthy = 1;
    } else {
        s->consec_ok = 0;
        if (s->consec_fail < fall)
            s->consec_fail++;
        if (s->healthy && s->consec_fail >= fall)
            s->healthy = 0;
    }
    return was != s->healthy;
}

const char *pdr_role_name(pdr_role_t r)
{
    return r == PDR_ROLE_PREFILL ? "prefill" : "decode";
}

static __thread uint64_t rng_state;

static uint64_t next_rand(pdr_pool_t *p)
{
    /* xorshift64*, one state per thread: selection only needs to be unbiased, not secret. */
    (void)p;
    if (rng_state == 0) {
        pdr_random_bytes(&rng_state, sizeof(rng_state));
        rng_state |= 1;
    }
    uint64_t x = rng_state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return x * 0x2545F4914F6CDD1DULL;
}

int pdr_pool_init(pdr_pool_t *p, pdr_config_t *c)
{
    memset(p, 0, sizeof(*p));
    p->config = pdr_config_ref(c);
    pthread_mutex_init(&p->lock, NULL);
    pdr_events_init(&p->events);
    const pdr_worker_conf_t *confs[2] = {c->prefill, c->decode};
    size_t counts[2] = {c->n_prefill, c->n_decode};
    for (int r = 0; r < 2; r++) {
        p->n[r] = counts[r];
        p->workers[r] = calloc(counts[r] ? counts[r] : 1, sizeof(pdr_worker_t));
        if (p->workers[r] == NULL)
            return PDR_ENOMEM;
        for (size_t i = 0; i < counts[r]; i++) {
            pdr_worker_t *w = &p->workers[r][i];
            w->role = (pdr_role_t)r;
            w->index = (int)i;
            w->conf = &confs[r][i];
            w->health.healthy = 1; /* optimistic start; the first check runs at once */
            if (w->conf->is_ipv6)
                snprintf(w->bootstrap_host, sizeof(w->bootstrap_host), "[%s]", w->conf->host);
            else
                snprintf(w->bootstrap_host, sizeof(w->bootstrap_host), "%s", w->conf->host);
        }
    }
    return 0;
}

void pdr_pool_dispose(pdr_pool_t *p)
{
    free(p->workers[0]);
    free(p->workers[1]);
    if (p->config) {
        pdr_config_unref(p->config);
        pthread_mutex_destroy(&p->lock);
        pdr_events_dispose(&p->events);
    }
    memset(p, 0, sizeof(*p));
}

size_t pdr_pool_count_healthy(const pdr_pool_t *p, pdr_role_t role)
{
    size_t k = 0;
    for (size_t i = 0; i < p->n[role]; i++)
        k += pdr_worker_serving(&p->workers[role][i]) != 0;
    return k;
}

static int usable(const pdr_worker_t *w, uint64_t avoid)
{
    return pdr_worker_serving(w) && !(w->index < 64 && (avoid >> w->index) & 1);
}

static pdr_worker_t *pick_round_robin(pdr_pool_t *p, pdr_role_t role, uint64_t avoid)
{
    size_t n = p->n[role];
    unsigned start = __atomic_fetch_add(&p->rr_next[role], 1, __ATOMIC_RELAXED);
    for (size_t k = 0; k < n; k++) {
        pdr_worker_t *w = &p->workers[role][(start + k) % n];
        if (usable(w, avoid))
            return w;
    }
    return NULL;
}

static pdr_worker_t *pick_random_k(pdr_pool_t *p, pdr_role_t role, uint64_t avoid, size_t nth)
{
    size_t n = p->n[role];
    for (size_t i = 0; i < n; i++) {
        pdr_worker_t *w = &p->workers[role][i];
        if (usable(w, avoid) && nth-- == 0)
            return w;
    }
    return NULL;
}

static pdr_worker_t *pick_least_load(pdr_pool_t *p, pdr_role_t role, uint64_t avoid, int two)
{
    size_t cand = 0;
    for (size_t i = 0; i < p->n[role]; i++)
        cand += usable(&p->workers[role][i], avoid);
    if (cand == 0)
        return NULL;
    size_t a = next_rand(p) % cand;
    pdr_worker_t *wa = pick_random_k(p, role, avoid, a);
    if (!two || cand == 1)
        return wa;
    size_t b = next_rand(p) % (cand - 1);
    if (b >= a)
        b++;
    pdr_worker_t *wb = pick_random_k(p, role, avoid, b);
    return pdr_worker_inflight(wb) < pdr_worker_inflight(wa) ? wb : wa;
}

pdr_worker_t *pdr_pool_pick(pdr_pool_t *p, pdr_role_t role, uint64_t avoid)
{
    pdr_policy_kind_t pol = role == PDR_ROLE_PREFILL ? p->config->policy_prefill : p->config->policy_decode;
    for (int pass = 0; pass < 2; pass++) {
        pdr_worker_t *w;
        switch (pol) {
        case PDR_POLICY_LEAST_LOAD:
            w = pick_least_load(p, role, avoid, 1);
            break;
        case PDR_POLICY_RANDOM:
            w = pick_least_load(p, role, avoid, 0);
            break;
        default:
            w = pick_round_robin(p, role, avoid);
            break;
        }
        if (w != NULL)
            return w;
        /* Every healthy worker was tried already in this request: allow them again. */
        avoid = 0;
    }
    return NULL;
}

static int set_healthy(pdr_worker_t *w, int healthy)
{
    int was = w->health.healthy;
    __atomic_store_n(&w->health.healthy, healthy, __ATOMIC_RELAXED);
    if (was && !healthy)
        w->ejections_total++;
    return was != healthy;
}

void pdr_pool_eject(pdr_pool_t *p, pdr_worker_t *w, const char *why)
{
    pthread_mutex_lock(&p->lock);
    w->failures_total++;
    w->health.consec_ok = 0;
    w->health.consec_fail = p->config->health.fall;
    int changed = set_healthy(w, 0);
    pthread_mutex_unlock(&p->lock);
    if (changed)
        pdr_warn("worker %s %s marked unhealthy: %s", pdr_role_name(w->role), w->conf->url, why);
    pdr_pool_record(p, w, "%s: %s", changed ? "ejected (marked unhealthy)" : "request failed", why);
}

void pdr_pool_report_failure(pdr_pool_t *p, pdr_worker_t *w, const char *why)
{
    pthread_mutex_lock(&p->lock);
    w->failures_total++;
    pdr_health_state_t s = w->health;
    int changed = pdr_health_update(&s, 0, p->config->health.rise, p->config->health.fall);
    w->health.consec_ok = s.consec_ok;
    w->health.consec_fail = s.consec_fail;
    set_healthy(w, s.healthy);
    int fails = s.consec_fail;
    pthread_mutex_unlock(&p->lock);
    if (changed)
        pdr_warn("worker %s %s marked unhealthy after %d failures: %s", pdr_role_name(w->role), w->conf->url,
                 fails, why);
    if (changed)
        pdr_pool_record(p, w, "marked unhealthy after %d failures: %s", fails, why);
    else
        pdr_pool_record(p, w, "request failed: %s", why);
}

void pdr_pool_report_success(pdr_pool_t *p, pdr_worker_t *w)
{
    if (__atomic_load_n(&w->health.consec_fail, __ATOMIC_RELAXED) == 0)
        return;
    pthread_mutex_lock(&p->lock);
    w->health.consec_fail = 0;
    pthread_mutex_unlock(&p->lock);
}

int pdr_pool_check_result(pdr_pool_t *p, pdr_worker_t *w, int ok)
{
    pthread_mutex_lock(&p->lock);
    if (ok)
        w->checks_ok++;
    else
        w->checks_failed++;
    w->last_check_ms = pdr_now_ms();
    pdr_health_state_t s = w->health;
    int changed = pdr_health_update(&s, ok, p->config->health.rise, p->config->health.fall);
    w->health.consec_ok = s.consec_ok;
    w->health.consec_fail = s.consec_fail;
    set_healthy(w, s.healthy);
    pthread_mutex_unlock(&p->lock);
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
        return pdr_worker_healthy(w) ? "healthy" : "unhealthy";
    }
}

void pdr_pool_note_idle(pdr_worker_t *w)
{
    int want = PDR_DRAIN_DRAINING;
    if (__atomic_compare_exchange_n(&w->drain, &want, PDR_DRAIN_DRAINED, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
        pdr_info("worker %s-%d %s drained: no requests in flight", pdr_role_name(w->role), w->index,
                 w->conf->url);
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
        pdr_info("worker %s-%d %s draining (%s): %d requests in flight, timeout %llu ms",
                 pdr_role_name(w->role), w->index, w->conf->url, why, pdr_worker_inflight(w),
                 (unsigned long long)timeout_ms);
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
    __atomic_store_n(&w->drain, PDR_DRAIN_ACTIVE, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&p->lock);
    if (was != PDR_DRAIN_ACTIVE)
        pdr_info("worker %s-%d %s activated (was %s)", pdr_role_name(w->role), w->index, w->conf->url,
                 was == PDR_DRAIN_DRAINING ? "draining" : "drained");
    return was;
}

int pdr_pool_drain_tick(pdr_pool_t *p, uint64_t now_ms)
{
    int changed = 0;
    for (int role = 0; role < 2; role++)
        for (size_t i = 0; i < p->n[role]; i++) {
            pdr_worker_t *w = &p->workers[role][i];
            if (pdr_worker_drain_state(w) != PDR_DRAIN_DRAINING)
                continue;
            if (pdr_worker_inflight(w) == 0) {
                pdr_pool_note_idle(w);
                changed++;
                continue;
            }
            pthread_mutex_lock(&p->lock);
            int expired = w->drain_deadline_ms != 0 && now_ms >= w->drain_deadline_ms;
            int want = PDR_DRAIN_DRAINING;
            expired = expired && __atomic_compare_exchange_n(&w->drain, &want, PDR_DRAIN_DRAINED, 0,
                                                             __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
            pthread_mutex_unlock(&p->lock);
            if (expired) {
                changed++;
                pdr_warn(
                    "worker %s-%d %s drained at its drain timeout with %d requests still in flight (they are "
                    "left to finish)",
                    pdr_role_name(w->role), w->index, w->conf->url, pdr_worker_inflight(w));
                pdr_pool_record(p, w, "drain timeout: drained with %d requests still in flight",
                                pdr_worker_inflight(w));
            }
        }
    return changed;
}

pdr_worker_t *pdr_pool_find(pdr_pool_t *p, const char *id, size_t len)
{
    for (int role = 0; role < 2; role++) {
        const char *rn = pdr_role_name((pdr_role_t)role);
        size_t rl = strlen(rn);
        if (len < rl + 2 || memcmp(id, rn, rl) != 0 || id[rl] != '-')
            continue;
        size_t idx = 0;
        for (size_t k = rl + 1; k < len; k++) {
            if (id[k] < '0' || id[k] > '9' || (k > rl + 1 && id[rl + 1] == '0') || idx > 100000000)
                return NULL;
            idx = idx * 10 + (size_t)(id[k] - '0');
        }
        return idx < p->n[role] ? &p->workers[role][idx] : NULL;
    }
    return NULL;
}

void pdr_pool_record(pdr_pool_t *p, const pdr_worker_t *w, const char *fmt, ...)
{
    char id[32] = "";
    if (w != NULL)
        snprintf(id, sizeof(id), "%s-%d", pdr_role_name(w->role), w->index);
    char msg[sizeof(((pdr_event_t *)0)->message)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    pdr_events_add(&p->events, w != NULL ? id : NULL, "%s", msg);
}

size_t pdr_pool_count_state(const pdr_pool_t *p, pdr_role_t role, int drain_state)
{
    size_t k = 0;
    for (size_t i = 0; i < p->n[role]; i++)
        k += pdr_worker_drain_state(&p->workers[role][i]) == drain_state;
    return k;
}
