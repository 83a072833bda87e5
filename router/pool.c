/*
 * Worker registry and pair selection. Policies: round_robin (next healthy worker in order),
 * least_load (power of two choices on in-flight requests: two distinct random healthy workers, the
 * less loaded wins, as sglang's power_of_two and Envoy's least_request do), random. Any loop thread.
 */
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
    }
    memset(p, 0, sizeof(*p));
}

size_t pdr_pool_count_healthy(const pdr_pool_t *p, pdr_role_t role)
{
    size_t k = 0;
    for (size_t i = 0; i < p->n[role]; i++)
        k += pdr_worker_healthy(&p->workers[role][i]) != 0;
    return k;
}

static int usable(const pdr_worker_t *w, uint64_t avoid)
{
    return pdr_worker_healthy(w) && !(w->index < 64 && (avoid >> w->index) & 1);
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
