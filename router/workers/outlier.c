/*
 * Passive health: outlier ejection, panic and slow start (outlier.h). The pure rules first; the pool's
 * tick at the end.
 */
#include "outlier.h"
#include "util.h"

const char *const pdr_eject_reason_names[PDR_EJECT_REASONS] = {"health_check", "unreachable",
                                                               "consecutive_failures"};

size_t pdr_outlier_max_ejected(const pdr_outlier_conf_t *c, size_t n)
{
    if (n == 0)
        return 0;
    size_t k = n * (size_t)c->max_ejection_percent / 100;
    return k < 1 ? 1 : k;
}

int pdr_outlier_is_ejected(const pdr_outlier_state_t *s, uint64_t now_ms)
{
    return now_ms < __atomic_load_n(&s->until_ms, __ATOMIC_ACQUIRE);
}

uint64_t pdr_outlier_ms_left(const pdr_outlier_state_t *s, uint64_t now_ms)
{
    uint64_t until = __atomic_load_n(&s->until_ms, __ATOMIC_ACQUIRE);
    return now_ms < until ? until - now_ms : 0;
}

/* The duration of the next ejection: base x multiplier, at most max (never below base). Forgives one step
 * of the multiplier for every base_ejection_ms served since the last return. */
static uint64_t next_duration(pdr_outlier_state_t *s, const pdr_outlier_conf_t *c, uint64_t now_ms)
{
    uint64_t base = (uint64_t)c->base_ejection_ms;
    uint64_t cap = (uint64_t)c->max_ejection_ms > base ? (uint64_t)c->max_ejection_ms : base;
    uint64_t back = __atomic_load_n(&s->back_ms, __ATOMIC_RELAXED);
    if (back != 0 && now_ms > back && s->multiplier > 0) {
        uint64_t steps = (now_ms - back) / base;
        s->multiplier = steps >= s->multiplier ? 0 : s->multiplier - (unsigned)steps;
    }
    if (base * s->multiplier < cap) /* stops growing once at the cap: no overflow */
        s->multiplier++;
    uint64_t d = base * s->multiplier;
    return d < cap ? d : cap;
}

uint64_t pdr_outlier_failure(pdr_outlier_state_t *s, const pdr_outlier_conf_t *c, uint64_t now_ms,
                             size_t ejected_now, size_t n, int *capped)
{
    *capped = 0;
    if (!c->enabled || pdr_outlier_is_ejected(s, now_ms))
        return 0;
    if (c->failure_window_ms > 0 && s->last_fail_ms != 0 &&
        now_ms - s->last_fail_ms > (uint64_t)c->failure_window_ms)
        __atomic_store_n(&s->consec_fail, 0, __ATOMIC_RELAXED); /* the previous failures are too old */
    s->last_fail_ms = now_ms;
    int fails = s->consec_fail < c->consecutive_failures ? s->consec_fail + 1 : s->consec_fail;
    __atomic_store_n(&s->consec_fail, fails, __ATOMIC_RELAXED);
    int due = fails >= c->consecutive_failures || s->probation > 0;
    if (!due)
        return 0;
    if (ejected_now >= pdr_outlier_max_ejected(c, n)) {
        *capped = 1;
        return 0;
    }
    uint64_t d = next_duration(s, c, now_ms);
    __atomic_store_n(&s->consec_fail, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&s->last_eject_ms, d, __ATOMIC_RELAXED);
    __atomic_store_n(&s->return_logged, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&s->ramp_ms, c->slow_start_ms, __ATOMIC_RELAXED);
    __atomic_store_n(&s->back_ms, now_ms + d, __ATOMIC_RELAXED); /* slow start from the return */
    __atomic_store_n(&s->until_ms, now_ms + d, __ATOMIC_RELEASE);
    __atomic_add_fetch(&s->ejections_total, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&s->by_reason[PDR_EJECT_CONSECUTIVE], 1, __ATOMIC_RELAXED);
    __atomic_store_n(&s->probation, c->probation_successes, __ATOMIC_RELAXED);
    return d;
}

void pdr_outlier_success(pdr_outlier_state_t *s)
{
    __atomic_store_n(&s->consec_fail, 0, __ATOMIC_RELAXED);
    if (s->probation > 0)
        __atomic_store_n(&s->probation, s->probation - 1, __ATOMIC_RELAXED);
}

void pdr_outlier_came_back(pdr_outlier_state_t *s, const pdr_outlier_conf_t *c, uint64_t now_ms)
{
    __atomic_store_n(&s->ramp_ms, c->enabled ? c->slow_start_ms : 0, __ATOMIC_RELAXED);
    __atomic_store_n(&s->back_ms, now_ms, __ATOMIC_RELAXED);
}

void pdr_outlier_reset(pdr_outlier_state_t *s)
{
    __atomic_store_n(&s->consec_fail, 0, __ATOMIC_RELAXED);
    s->multiplier = 0;
    __atomic_store_n(&s->probation, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&s->back_ms, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&s->ramp_ms, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&s->until_ms, 0, __ATOMIC_RELEASE);
}

double pdr_outlier_weight(const pdr_outlier_state_t *s, uint64_t now_ms)
{
    uint64_t back = __atomic_load_n(&s->back_ms, __ATOMIC_RELAXED);
    int ramp = __atomic_load_n(&s->ramp_ms, __ATOMIC_RELAXED);
    if (ramp <= 0 || back == 0 || now_ms < back)
        return 1.0; /* no ramp, never came back, or still ejected (not picked then anyway) */
    uint64_t t = now_ms - back;
    if (t >= (uint64_t)ramp)
        return 1.0;
    double w = (double)t / (double)ramp;
    return w < PDR_OUTLIER_MIN_WEIGHT ? PDR_OUTLIER_MIN_WEIGHT : w;
}

int pdr_outlier_panic(const pdr_outlier_conf_t *c, size_t serving, size_t healthy, size_t total)
{
    if (!c->enabled || total == 0 || healthy == 0)
        return 0;
    return serving * 100 < (size_t)c->panic_threshold_percent * total;
}
