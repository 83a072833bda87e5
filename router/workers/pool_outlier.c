/*
 * Passive health over the whole pool (outlier.c holds the per-worker rules): the ejections that ended,
 * logged and recorded on loop 0's drain tick, and the families /metrics renders. Part of the pool
 * (pool.c, pool_pick.c, pool_state.c): it walks a snapshot of the workers.
 */
#include <stdint.h>
#include "outlier.h"
#include "pool.h"
#include "util.h"

void pdr_outlier_tick(pdr_pool_t *p, uint64_t now_ms)
{
    pdr_worker_t **ws;
    size_t n = pdr_pool_snapshot(p, -1, &ws);
    for (size_t i = 0; i < n; i++) {
        pdr_outlier_state_t *s = &ws[i]->outlier;
        uint64_t until = __atomic_load_n(&s->until_ms, __ATOMIC_ACQUIRE);
        if (until == 0 || now_ms < until || __atomic_exchange_n(&s->return_logged, 1, __ATOMIC_RELAXED))
            continue;
        unsigned long long d = __atomic_load_n(&s->last_eject_ms, __ATOMIC_RELAXED);
        pdr_info("worker %s %s returns from outlier ejection (ejected %llu ms)", ws[i]->id, ws[i]->target, d);
        pdr_pool_record(p, ws[i], "returned from outlier ejection after %llu ms", d);
    }
    pdr_pool_release(ws, n);
}

void pdr_outlier_metrics(pdr_pool_t *p, pdr_outlier_put_cb put, void *out)
{
    pdr_worker_t **ws;
    size_t n = pdr_pool_snapshot(p, -1, &ws);
    uint64_t now = pdr_now_ms();
    put(out, "# HELP pdr_worker_ejections_by_reason_total Times the worker was taken out, by reason "
             "(health_check, unreachable, consecutive_failures); they add up to pdr_worker_ejections_total.\n"
             "# TYPE pdr_worker_ejections_by_reason_total counter\n");
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < PDR_EJECT_REASONS; k++)
            put(out,
                "pdr_worker_ejections_by_reason_total{pool=\"%s\",role=\"%s\",url=\"%s\",reason=\"%s\"} "
                "%llu\n",
                ws[i]->pool, pdr_role_name(ws[i]->role), ws[i]->target, pdr_eject_reason_names[k],
                (unsigned long long)__atomic_load_n(&ws[i]->outlier.by_reason[k], __ATOMIC_RELAXED));
    put(out, "# HELP pdr_worker_ejected 1 while an outlier ejection holds the worker out.\n"
             "# TYPE pdr_worker_ejected gauge\n");
    for (size_t i = 0; i < n; i++)
        put(out, "pdr_worker_ejected{pool=\"%s\",role=\"%s\",url=\"%s\"} %d\n", ws[i]->pool,
            pdr_role_name(ws[i]->role), ws[i]->target, pdr_outlier_is_ejected(&ws[i]->outlier, now));
    put(out,
        "# HELP pdr_worker_ejection_remaining_seconds Time left of the worker's outlier ejection (0: none).\n"
        "# TYPE pdr_worker_ejection_remaining_seconds gauge\n");
    for (size_t i = 0; i < n; i++)
        put(out, "pdr_worker_ejection_remaining_seconds{pool=\"%s\",role=\"%s\",url=\"%s\"} %.3f\n",
            ws[i]->pool, pdr_role_name(ws[i]->role), ws[i]->target,
            (double)pdr_outlier_ms_left(&ws[i]->outlier, now) / 1000.0);
    pdr_pool_release(ws, n);
    put(out,
        "# HELP pdr_outlier_panic_total Picks made in panic (too few workers of the role serving: health "
        "and ejection ignored).\n# TYPE pdr_outlier_panic_total counter\n");
    for (int r = 0; r < PDR_ROLES; r++)
        put(out, "pdr_outlier_panic_total{role=\"%s\"} %llu\n", pdr_role_name((pdr_role_t)r),
            (unsigned long long)__atomic_load_n(&p->panic_total[r], __ATOMIC_RELAXED));
}
