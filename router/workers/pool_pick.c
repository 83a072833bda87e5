/*
 * The worker registry read (counts, look-ups) and a worker picked by the pool's policy, under
 * the read lock (the policies are routing/policies.c's tables). Any loop thread.
 */
#include <stdarg.h>
#include <sys/types.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "affinity.h"
#include "err.h"
#include "fallback.h"
#include "kvevents.h"
#include "pool_load.h"
#include "policies.h"
#include "pool.h"
#include "pool_internal.h"
#include "util.h"

/* ---- reading ---- */

pdr_worker_t *pdr_pool__at(pdr_pool_t *p, pdr_role_t role, size_t i)
{
    return i < p->list[role]->n ? p->list[role]->w[i] : NULL;
}

size_t pdr_pool_count(pdr_pool_t *p, pdr_role_t role)
{
    pthread_rwlock_rdlock(&p->rw);
    size_t n = p->list[role]->n;
    pthread_rwlock_unlock(&p->rw);
    return n;
}

size_t pdr_pool_count_healthy(pdr_pool_t *p, pdr_role_t role)
{
    pthread_rwlock_rdlock(&p->rw);
    size_t k = 0;
    for (size_t i = 0; i < p->list[role]->n; i++)
        k += pdr_worker_serving(p->list[role]->w[i]) != 0;
    pthread_rwlock_unlock(&p->rw);
    return k;
}

size_t pdr_pool_count_healthy_in(pdr_pool_t *p, const char *pool, pdr_role_t role)
{
    pthread_rwlock_rdlock(&p->rw);
    int g = pdr__pool_group_of(p, pool);
    size_t k = 0;
    for (size_t i = 0; g >= 0 && i < p->list[role]->n; i++)
        k += p->list[role]->w[i]->group == g && pdr_worker_serving(p->list[role]->w[i]);
    pthread_rwlock_unlock(&p->rw);
    return k;
}

size_t pdr_pool_count_confirmed_in(pdr_pool_t *p, const char *pool, pdr_role_t role)
{
    pthread_rwlock_rdlock(&p->rw);
    int g = pdr__pool_group_of(p, pool);
    size_t k = 0;
    for (size_t i = 0; g >= 0 && i < p->list[role]->n; i++) {
        const pdr_worker_t *w = p->list[role]->w[i];
        k += w->group == g && pdr_worker_serving(w) && __atomic_load_n(&w->checks_ok, __ATOMIC_RELAXED) > 0;
    }
    pthread_rwlock_unlock(&p->rw);
    return k;
}

size_t pdr_pool_groups(pdr_pool_t *p, char (*names)[64], size_t cap)
{
    pthread_rwlock_rdlock(&p->rw);
    size_t n = p->n_groups < cap ? p->n_groups : cap;
    for (size_t i = 0; i < n; i++)
        memcpy(names[i], p->groups[i].name, sizeof(names[i]));
    pthread_rwlock_unlock(&p->rw);
    return n;
}

size_t pdr_pool_count_state(pdr_pool_t *p, pdr_role_t role, int drain_state)
{
    pthread_rwlock_rdlock(&p->rw);
    size_t k = 0;
    for (size_t i = 0; i < p->list[role]->n; i++)
        k += pdr_worker_drain_state(p->list[role]->w[i]) == drain_state;
    pthread_rwlock_unlock(&p->rw);
    return k;
}

pdr_worker_t *pdr_pool_find(pdr_pool_t *p, const char *id, size_t len)
{
    pdr_worker_t *found = NULL;
    pthread_rwlock_rdlock(&p->rw);
    for (int r = 0; r < PDR_ROLES && found == NULL; r++)
        for (size_t i = 0; i < p->list[r]->n; i++) {
            pdr_worker_t *w = p->list[r]->w[i];
            if (strlen(w->id) == len && memcmp(w->id, id, len) == 0) {
                found = pdr_worker_ref(w);
                break;
            }
        }
    pthread_rwlock_unlock(&p->rw);
    return found;
}

/* ---- picking (under the read lock) ---- */

/* Whether the pick may choose w, among the candidates pdr_pool_pick_info let through (serving and not
 * ejected; in panic, ejected or not). */
static int usable(const pdr_worker_t *w, const uint64_t *avoid, size_t n_avoid)
{
    for (size_t i = 0; i < n_avoid; i++)
        if (avoid[i] == w->uid)
            return 0;
    return 1;
}

/* The candidates of one pick: the pool's workers of the role. */
typedef struct {
    size_t n;
    pdr_worker_t *const *w;
} cands_t;

/* One pick by the policy's table (routing/policies.h) over the candidates; the table's flags say what of
 * the pool it reads. A candidate's load is the best source's (pool_load.h: shim, engine, or the router's
 * own count, which stands in, counted as a fall-back, for a policy that reads loads when the engine's is
 * unknown). With slow start, a policy that weighs loads sees (load + 1) / weight, in millionths, so that a
 * returning worker takes its share gradually. */
static pdr_worker_t *pick_by(pdr_pool_t *p, pdr_pool_group_t *g, const pdr_policy_ops_t *ops, cands_t l,
                             pdr_role_t role, const uint64_t *avoid, size_t n_avoid, const char *text,
                             size_t len, pdr_pick_info_t *info)
{
    if (l.n == 0)
        return NULL;
    uint64_t ids[l.n], keys[l.n], loads[l.n], wloads[l.n];
    unsigned char ok[l.n];
    int slow = p->outlier.enabled && p->outlier.slow_start_ms > 0;
    int poll_ms = __atomic_load_n(&p->load_poll_ms, __ATOMIC_RELAXED);
    int poll_to = __atomic_load_n(&p->load_timeout_ms, __ATOMIC_RELAXED);
    uint64_t now = slow || poll_ms > 0 ? pdr_now_ms() : 0;
    size_t fell_back = 0;
    for (size_t i = 0; i < l.n; i++) {
        const pdr_worker_t *w = l.w[i];
        ids[i] = w->uid;
        keys[i] = w->ring_key;
        int fb;
        (void)pdr_worker_load(w, poll_ms, poll_to, now, &loads[i], &fb);
        fell_back += (size_t)fb;
        wloads[i] =
            slow ? (uint64_t)((double)(loads[i] + 1) * 1e6 / pdr_outlier_weight(&w->outlier, now)) : loads[i];
        ok[i] = (unsigned char)usable(w, avoid, n_avoid);
    }
    if (fell_back > 0 && (ops->flags & PDR_POLICY_F_READS_LOAD))
        pdr_fallback_n(PDR_FB_ENGINE_LOAD_UNKNOWN, fell_back,
                       "a worker's engine load is unknown (its poll failed or is not fresh): the pick weighs "
                       "the router's own count of its requests");
    const pdr_prompt_tokens_t *tok = info != NULL ? info->tok : NULL;
    pdr_policy_input_t in = {
        .n = l.n,
        .ids = ids,
        .keys = keys,
        .loads = loads,
        .wloads = wloads,
        .usable = n_avoid > 0 ? ok : NULL,
        .rr_next = &g->rr_next[role],
        .rng = pdr__pool_thread_rng(),
        .tree = g->tree[role],
        .ca = &g->ca[role],
        .kvindex = p->kvindex,
        .text = text,
        .len = len,
        .tokens = tok != NULL ? tok->ids : NULL,
        .n_tokens = tok != NULL ? tok->n : 0,
        .model = tok != NULL ? tok->model : NULL,
        .model_len = tok != NULL ? tok->model_len : 0,
        .record = info == NULL || info->record,
        .want_matched = info != NULL,
    };
    pdr_policy_output_t out = {0};
    int k = ops->pick(&in, &out);
    if (k < 0 || (size_t)k >= l.n)
        return NULL;
    if (out.matched_known && info != NULL) {
        info->matched_known = 1;
        info->matched = out.matched;
        if (out.from_index) { /* the index counts in tokens: the prompt's length in the same unit */
            info->from_index = 1;
            info->tokens = 1;
            info->prompt_tokens = info->tok->n;
        }
    }
    if (out.decided && (ops->flags & PDR_POLICY_F_KV_INDEX))
        __atomic_add_fetch(&p->pp_decisions[out.from_index != 0][out.decision], 1, __ATOMIC_RELAXED);
    else if (out.decided)
        __atomic_add_fetch(&p->ca_decisions[out.decision], 1, __ATOMIC_RELAXED);
    return l.w[k];
}

pdr_worker_t *pdr_pool_pick(pdr_pool_t *p, const char *pool, pdr_role_t role, const uint64_t *avoid,
                            size_t n_avoid)
{
    return pdr_pool_pick_prompt(p, pool, role, avoid, n_avoid, NULL, 0, NULL);
}

void pdr_pool_evict_trees(pdr_pool_t *p)
{
    pthread_rwlock_rdlock(&p->rw);
    for (size_t k = 0; k < p->n_groups; k++)
        for (int r = 0; r < PDR_ROLES; r++)
            if (p->groups[k].tree[r] != NULL)
                pdr_ptree_evict(p->groups[k].tree[r], p->ca_max_tree);
    pthread_rwlock_unlock(&p->rw);
}

pdr_worker_t *pdr_pool_pick_text(pdr_pool_t *p, const char *pool, pdr_role_t role, const uint64_t *avoid,
                                 size_t n_avoid, const char *text, size_t len)
{
    return pdr_pool_pick_info(p, pool, role, avoid, n_avoid, text, len, NULL);
}

pdr_worker_t *pdr_pool_pick_prompt(pdr_pool_t *p, const char *pool, pdr_role_t role, const uint64_t *avoid,
                                   size_t n_avoid, const char *text, size_t len,
                                   const pdr_prompt_tokens_t *tok)
{
    pdr_pick_info_t info = {.record = 1, .tok = tok};
    return pdr_pool_pick_info(p, pool, role, avoid, n_avoid, text, len, tok != NULL ? &info : NULL);
}

void pdr_pool_record_pick(pdr_pool_t *p, const pdr_worker_t *w, const char *text, size_t len)
{
    if (text == NULL)
        return;
    pthread_rwlock_rdlock(&p->rw);
    if (w->group >= 0 && (size_t)w->group < p->n_groups && p->groups[w->group].tree[w->role] != NULL)
        (void)pdr_ptree_insert(p->groups[w->group].tree[w->role], text, len, w->uid);
    pthread_rwlock_unlock(&p->rw);
}

int pdr_pool_saturated(pdr_pool_t *p, const char *pool, pdr_role_t role, int inflight)
{
    size_t serving = 0, full = 0;
    pthread_rwlock_rdlock(&p->rw);
    int gi = pdr__pool_group_of(p, pool);
    const pdr_worker_list_t *l = p->list[role];
    for (size_t i = 0; gi >= 0 && i < l->n; i++) {
        const pdr_worker_t *w = l->w[i];
        if (w->group != gi || !pdr_worker_serving(w))
            continue;
        serving++;
        full += pdr_worker_inflight(w) >= inflight;
    }
    pthread_rwlock_unlock(&p->rw);
    return serving > 0 && full == serving;
}

static pdr_worker_t *pick_in(pdr_pool_t *p, const char *pool, pdr_role_t role, const uint64_t *avoid,
                             size_t n_avoid, const char *text, size_t len, pdr_pick_info_t *info,
                             const pdr_pick_filter_t *filter);

/* Session affinity's step of a pick (affinity.h), under the read lock: the rendezvous choice of the
 * session among the candidates c (eligible: serving, not ejected, compatible) that avoid leaves usable (all
 * of them when it leaves none). Soft mode lets the pool's policy pick instead (NULL) when that choice is
 * overloaded, and *shed is then its uid (for the policy to avoid; 0 otherwise). Counts the outcome; NULL
 * also when the request names no session. */
static pdr_worker_t *pick_affinity(pdr_pool_t *p, int gi, cands_t c, pdr_role_t role, const uint64_t *avoid,
                                   size_t n_avoid, const pdr_pick_filter_t *f, uint64_t *shed)
{
    *shed = 0;
    int outcome = PDR_AFFINITY_NO_KEY;
    pdr_worker_t *w = NULL;
    if (f->has_session && c.n > 0) {
        uint64_t keys[c.n];
        unsigned char ok[c.n];
        size_t n_ok = 0;
        uint64_t sum = 0;
        for (size_t i = 0; i < c.n; i++) {
            keys[i] = c.w[i]->ring_key;
            ok[i] = (unsigned char)usable(c.w[i], avoid, n_avoid);
            n_ok += ok[i];
            sum += (uint64_t)pdr_worker_inflight(c.w[i]);
        }
        int k = pdr_affinity_choose(f->session, keys, n_ok > 0 ? ok : NULL, c.n);
        w = c.w[k];
        /* The session's first choice among every worker of the pool and role, eligible or not. */
        const pdr_worker_list_t *l = p->list[role];
        const pdr_worker_t *home = NULL;
        uint64_t hw = 0;
        for (size_t i = 0; i < l->n; i++) {
            const pdr_worker_t *v = l->w[i];
            uint64_t wt = pdr_affinity_weight(f->session, v->ring_key);
            if (v->group == gi && (home == NULL || wt > hw || (wt == hw && v->ring_key < home->ring_key))) {
                home = v;
                hw = wt;
            }
        }
        outcome = home == w ? PDR_AFFINITY_HIT : PDR_AFFINITY_MOVED;
        if (f->affinity == PDR_AFFINITY_SOFT &&
            pdr_affinity_overloaded(pdr_worker_inflight(w), sum, c.n, f->max_load_ratio)) {
            outcome = PDR_AFFINITY_FALLBACK_OVERLOADED;
            *shed = w->uid;
            w = NULL;
        }
    }
    __atomic_add_fetch(&p->affinity_total[role][outcome], 1, __ATOMIC_RELAXED);
    if (f->outcome != NULL)
        *f->outcome = outcome;
    return w;
}

void pdr_affinity_metrics(pdr_pool_t *p, pdr_outlier_put_cb put, void *out)
{
    put(out, "# HELP pdr_affinity_picks_total Picks with session affinity on, by role and outcome (hit: the "
             "session's first choice; moved: its next eligible one; fallback_overloaded: the pool's policy, "
             "the choice being overloaded; no_key: the request names no session).\n"
             "# TYPE pdr_affinity_picks_total counter\n");
    for (int r = 0; r < PDR_ROLES; r++)
        for (int o = 0; o < PDR_AFFINITY__COUNT; o++)
            put(out, "pdr_affinity_picks_total{role=\"%s\",outcome=\"%s\"} %llu\n",
                pdr_role_name((pdr_role_t)r), pdr_affinity_outcome_names[o],
                (unsigned long long)__atomic_load_n(&p->affinity_total[r][o], __ATOMIC_RELAXED));
}

pdr_worker_t *pdr_pool_pick_info(pdr_pool_t *p, const char *pool, pdr_role_t role, const uint64_t *avoid,
                                 size_t n_avoid, const char *text, size_t len, pdr_pick_info_t *info)
{
    return pick_in(p, pool, role, avoid, n_avoid, text, len, info, info != NULL ? info->filter : NULL);
}

pdr_worker_t *pdr_pool_pick_filtered(pdr_pool_t *p, const char *pool, pdr_role_t role, const uint64_t *avoid,
                                     size_t n_avoid, const char *text, size_t len,
                                     const pdr_prompt_tokens_t *tok, const pdr_pick_filter_t *filter)
{
    pdr_pick_info_t info = {.record = 1, .tok = tok};
    return pick_in(p, pool, role, avoid, n_avoid, text, len, tok != NULL ? &info : NULL, filter);
}

/* The pick itself; filter (NULL: none) leaves out the workers whose compat key it refuses. */
static pdr_worker_t *pick_in(pdr_pool_t *p, const char *pool, pdr_role_t role, const uint64_t *avoid,
                             size_t n_avoid, const char *text, size_t len, pdr_pick_info_t *info,
                             const pdr_pick_filter_t *filter)
{
    if (info != NULL) {
        info->matched_known = 0;
        info->matched = 0;
        info->tokens = 0;
        info->prompt_tokens = 0;
        info->from_index = 0;
    }
    pthread_rwlock_rdlock(&p->rw);
    const pdr_worker_list_t *l = p->list[role];
    int gi = pdr__pool_group_of(p, pool);
    if (gi < 0) {
        pthread_rwlock_unlock(&p->rw);
        return NULL;
    }
    pdr_pool_group_t *g = &p->groups[gi];
    const pdr_policy_ops_t *ops = pdr_policy_get(g->policy[role]);
    if (ops == NULL) { /* config/ accepts only the list's policies */
        pthread_rwlock_unlock(&p->rw);
        pdr_error("pick: pool %s: policy %d is not in the list", g->name, (int)g->policy[role]);
        return NULL;
    }
    /* The candidates: the pool's serving workers of the role that no outlier ejection holds, in list order
     * (ejected or not in panic); with slow start, a returning worker stays with the probability of its
     * weight, except for the policies that weigh its load instead (PDR_POLICY_F_WEIGHS_LOAD). */
    const pdr_outlier_conf_t *oc = &p->outlier;
    uint64_t now = pdr_now_ms();
    size_t total = 0, serving = 0, healthy = 0;
    for (size_t i = 0; oc->enabled && i < l->n; i++) {
        const pdr_worker_t *v = l->w[i];
        if (v->group != gi || pdr_worker_drain_state(v) != PDR_DRAIN_ACTIVE)
            continue;
        int h = pdr_worker_healthy(v);
        total++;
        healthy += h;
        serving += h && !pdr_outlier_is_ejected(&v->outlier, now);
    }
    int panic = pdr_outlier_panic(oc, serving, healthy, total);
    if (panic)
        __atomic_add_fetch(&p->panic_total[role], 1, __ATOMIC_RELAXED);
    int ramp = oc->enabled && oc->slow_start_ms > 0 && !(ops->flags & PDR_POLICY_F_WEIGHS_LOAD);
    pdr_worker_t *view[l->n + 1], *kept[ramp ? l->n + 1 : 1];
    cands_t c = {0, view};
    size_t n_kept = 0, kept_usable = 0;
    for (size_t i = 0; i < l->n; i++) {
        pdr_worker_t *v = l->w[i];
        if (v->group != gi || pdr_worker_drain_state(v) != PDR_DRAIN_ACTIVE)
            continue;
        if (!pdr_worker_healthy(v) || (!panic && oc->enabled && pdr_outlier_is_ejected(&v->outlier, now)))
            continue;
        if (filter != NULL && !pdr_pick_filter_ok(filter, pdr_worker_compat_key(v)))
            continue;
        if (info != NULL && info->only != NULL && usable(v, info->only, info->n_only))
            continue; /* not in the strict list */
        view[c.n++] = v;
        double wt = ramp ? pdr_outlier_weight(&v->outlier, now) : 1.0;
        if (ramp && (wt >= 1.0 || (double)(pdr__pool_next_rand() % 1000000) < wt * 1e6)) {
            kept[n_kept++] = v;
            kept_usable += usable(v, avoid, n_avoid);
        }
    }
    cands_t eligible = c;
    if (ramp && kept_usable > 0) /* never down to nothing: then the returning workers stay too */
        c = (cands_t){n_kept, kept};
    pdr_worker_t *w = NULL;
    if (filter != NULL && filter->affinity != PDR_AFFINITY_OFF) {
        uint64_t shed; /* over every eligible worker, ramping or not */
        w = pick_affinity(p, gi, eligible, role, avoid, n_avoid, filter, &shed);
        if (shed != 0) { /* the policy picks another than the overloaded choice, when there is another */
            uint64_t more[n_avoid + 1];
            if (n_avoid > 0)
                memcpy(more, avoid, n_avoid * sizeof(avoid[0]));
            more[n_avoid] = shed;
            w = pick_by(p, g, ops, c, role, more, n_avoid + 1, text, len, info);
        }
    }
    for (int pass = 0; pass < 2 && w == NULL; pass++) {
        w = pick_by(p, g, ops, c, role, avoid, n_avoid, text, len, info);
        /* Every serving worker was tried already in this request: allow them again. */
        n_avoid = 0;
    }
    if (w != NULL) {
        pdr_worker_ref(w);
        pdr_debug("pick: pool %s, %s: %s %s by %s among %zu candidate(s)%s", g->name, pdr_role_name(role),
                  w->id, w->target, ops->name, c.n, panic ? " (outlier panic: ejected workers too)" : "");
    } else {
        pdr_debug("pick: pool %s, %s: no worker among %zu candidate(s)", g->name, pdr_role_name(role), c.n);
    }
    pthread_rwlock_unlock(&p->rw);
    return w;
}

int pdr_pool_role_knows_cache(pdr_pool_t *p, const char *pool, pdr_role_t role)
{
    pthread_rwlock_rdlock(&p->rw);
    int gi = pdr__pool_group_of(p, pool), knows = 0;
    if (gi >= 0) {
        const pdr_policy_ops_t *ops = pdr_policy_get(p->groups[gi].policy[role]);
        knows = ops != NULL && (ops->flags & (PDR_POLICY_F_TREE | PDR_POLICY_F_KV_INDEX)) != 0;
    }
    pthread_rwlock_unlock(&p->rw);
    return knows;
}
