/*
 * Worker registry and pair selection. Policies: round_robin (next healthy worker in order), least_load and
 * power_of_two (one rule, routing/'s pdr_power_of_two_pick: two distinct random healthy workers, the less
 * loaded by in-flight requests wins, as sglang's power_of_two and Envoy's least_request do), random,
 * cache_aware and precise_prefix. Any loop thread.
 *
 * This file is the bottom of the pool's files: the settings, the membership, a snapshot of the lists, the
 * event record and a worker's idleness. Above it, and never called from it: reading and picking
 * (pool_pick.c), health, outlier ejection and drain (pool_state.c), and the outlier views
 * (pool_outlier.c).
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
    return r == PDR_ROLE_PREFILL ? "prefill" : r == PDR_ROLE_DECODE ? "decode" : "regular";
}

static __thread uint64_t rng_state;
static __thread int rng_seeded;

/* The thread's random state for routing/'s generator, seeded once from the system's random source:
 * selection only needs to be unbiased, not secret. */
uint64_t *pdr__pool_thread_rng(void)
{
    if (!rng_seeded) {
        pdr_random_bytes(&rng_state, sizeof(rng_state));
        rng_seeded = 1;
    }
    return &rng_state;
}

uint64_t pdr__pool_next_rand(void)
{
    return pdr_routing_rng_next(pdr__pool_thread_rng());
}

const char *const pdr_source_names[4] = {"static", "admin", "dns", "kubernetes"};

int pdr_role_parse(const char *s, size_t len)
{
    if (len == 7 && memcmp(s, "prefill", 7) == 0)
        return PDR_ROLE_PREFILL;
    if (len == 6 && memcmp(s, "decode", 6) == 0)
        return PDR_ROLE_DECODE;
    return -1;
}

static void conf_free(pdr_worker_conf_t *c)
{
    free(c->url);
    free(c->host);
    free(c->kv_events);
    free(c->kv_events_replay);
    memset(c, 0, sizeof(*c));
}

/* Data-parallel attention: a worker with dp_size N > 1 is N routing targets, one per rank, each a
 * pdr_worker_t of its own (its own load, cache_aware tenant and health state); a config entry is expanded
 * into them here. The rank of a conf, or -1 for a worker that is one target. */
static int rank_of(const pdr_worker_conf_t *c)
{
    return c->dp_size > 1 ? c->dp_rank : -1;
}
static size_t targets_of(const pdr_worker_conf_t *c)
{
    return c->dp_size > 1 ? (size_t)c->dp_size : 1;
}

static int conf_copy(pdr_worker_conf_t *to, const pdr_worker_conf_t *from)
{
    *to = *from;
    to->url = strdup(from->url);
    to->host = strdup(from->host);
    to->kv_events = from->kv_events != NULL ? strdup(from->kv_events) : NULL;
    to->kv_events_replay = from->kv_events_replay != NULL ? strdup(from->kv_events_replay) : NULL;
    if (to->url == NULL || to->host == NULL || (from->kv_events != NULL && to->kv_events == NULL) ||
        (from->kv_events_replay != NULL && to->kv_events_replay == NULL)) {
        conf_free(to);
        return PDR_ENOMEM;
    }
    return 0;
}

void pdr_worker_unref(pdr_worker_t *w)
{
    if (w == NULL || __atomic_sub_fetch(&w->refcnt, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    conf_free(&w->conf);
    free(w->labels_json);
    free(w);
}

/* The policies that keep a prefix tree per pool and role (precise_prefix falls back to it). */
static int uses_tree(pdr_policy_kind_t k)
{
    const pdr_policy_ops_t *ops = pdr_policy_get(k);
    return ops != NULL && (ops->flags & PDR_POLICY_F_TREE);
}

static pdr_worker_list_t *list_new(size_t n)
{
    pdr_worker_list_t *l = malloc(sizeof(*l) + (n ? n : 1) * sizeof(pdr_worker_t *));
    if (l != NULL)
        l->n = 0;
    return l;
}

/* A new worker with one reference (the caller's); under the write lock (sequence numbers). */
static pdr_worker_t *worker_new(pdr_pool_t *p, int group, pdr_role_t role, const pdr_worker_conf_t *conf,
                                int source, const char *name, const char *labels_json)
{
    pdr_worker_t *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return NULL;
    w->labels_json = strdup(labels_json != NULL ? labels_json : "{}");
    if (w->labels_json == NULL || conf_copy(&w->conf, conf) != 0) {
        free(w->labels_json);
        free(w);
        return NULL;
    }
    w->refcnt = 1;
    w->role = role;
    w->seq = p->next_seq[role]++;
    w->uid = ++p->next_uid;
    snprintf(w->id, sizeof(w->id), "%s-%u", pdr_role_name(role), w->seq);
    snprintf(w->source, sizeof(w->source), "%s", pdr_source_names[source]);
    w->group = group;
    snprintf(w->pool, sizeof(w->pool), "%s", p->groups[group].name);
    snprintf(w->name, sizeof(w->name), "%s", name != NULL ? name : "");
    w->added_ms = pdr_now_ms();
    w->health.healthy = 1; /* optimistic start; the first check runs at once */
    w->dp_rank = rank_of(&w->conf);
    w->engine.kv_usage_ppm = -1; /* no engine answer yet */
    if (w->dp_rank >= 0)
        snprintf(w->target, sizeof(w->target), "%s@%d", w->conf.url, w->dp_rank);
    else
        snprintf(w->target, sizeof(w->target), "%s", w->conf.url);
    /* The ring key names the target alike in every router replica: its URL, with "@RANK" for a rank. */
    w->ring_key = pdr_routing_hash(w->target, strlen(w->target));
    if (w->conf.is_ipv6)
        snprintf(w->bootstrap_host, sizeof(w->bootstrap_host), "[%s]", w->conf.host);
    else
        snprintf(w->bootstrap_host, sizeof(w->bootstrap_host), "%s", w->conf.host);
    return w;
}

static int source_of(const pdr_worker_t *w)
{
    for (int s = 0; s < 4; s++)
        if (strcmp(w->source, pdr_source_names[s]) == 0)
            return s;
    return PDR_SOURCE_STATIC;
}

/* Under the write lock (or before the pool is shared): the groups of c's pools. A pool that existed keeps
 * its round-robin cursors. Returns 0 or PDR_ENOMEM (then nothing changed). */
static int apply_settings(pdr_pool_t *p, const pdr_config_t *c)
{
    size_t n = pdr_config_pool_count(c);
    pdr_pool_group_t *g = calloc(n, sizeof(*g));
    int(*reuse)[PDR_ROLES] = malloc((n + 1) * sizeof(*reuse));
    if (g == NULL || reuse == NULL) {
        free(g);
        free(reuse);
        return PDR_ENOMEM;
    }
    int failed = 0;
    for (size_t i = 0; i < n; i++)
        for (int r = 0; r < PDR_ROLES; r++)
            reuse[i][r] = -1;
    for (size_t i = 0; i < n; i++) {
        pdr_pool_conf_t pc;
        pdr_config_pool(c, i, &pc);
        snprintf(g[i].name, sizeof(g[i].name), "%s", pc.name);
        g[i].policy[PDR_ROLE_PREFILL] = pc.policy_prefill;
        g[i].policy[PDR_ROLE_DECODE] = pc.policy_decode;
        g[i].policy[PDR_ROLE_REGULAR] = pc.policy_decode; /* regular workers are picked as decodes are */
        g[i].protocol = pc.protocol;
        for (int r = 0; r < 2; r++) {
            pdr_cache_aware_conf_t ca;
            pdr_config_pool_cache_aware(c, c->n_pools > 0 ? &pc : NULL, r, &ca);
            g[i].ca[r].cache_threshold = ca.cache_threshold;
            g[i].ca[r].balance_abs_threshold = (uint64_t)ca.balance_abs_threshold;
            g[i].ca[r].balance_rel_threshold = ca.balance_rel_threshold;
            g[i].ca[r].seed = ca.seed == PDR_CA_SEED_CONSISTENT_HASH ? PDR_CACHE_AWARE_SEED_CONSISTENT_HASH
                                                                     : PDR_CACHE_AWARE_SEED_SMALLEST_TREE;
            g[i].ca[r].hash_prefix_chars = (size_t)ca.hash_prefix_chars;
            g[i].ca[r].hash_load_factor = ca.hash_load_factor;
        }
        g[i].ca[PDR_ROLE_REGULAR] = g[i].ca[PDR_ROLE_DECODE]; /* regular workers: the decode's settings */
        for (size_t k = 0; k < p->n_groups; k++)
            if (strcmp(p->groups[k].name, g[i].name) == 0) {
                memcpy(g[i].rr_next, p->groups[k].rr_next, sizeof(g[i].rr_next));
                for (int r = 0; r < PDR_ROLES; r++) /* a pool's tree survives a reload (taken below) */
                    if (uses_tree(g[i].policy[r]) && p->groups[k].tree[r] != NULL)
                        reuse[i][r] = (int)k;
            }
        for (int r = 0; r < PDR_ROLES && !failed; r++) {
            int err = 0;
            if (uses_tree(g[i].policy[r]) && reuse[i][r] < 0 &&
                (g[i].tree[r] = pdr_ptree_new((uint64_t)c->cache_aware.max_tree_size, &err)) == NULL)
                failed = 1;
        }
    }
    if (failed) { /* nothing taken from the old groups yet */
        for (size_t i = 0; i < n; i++)
            for (int r = 0; r < PDR_ROLES; r++)
                pdr_ptree_free(g[i].tree[r]);
        free(g);
        free(reuse);
        return PDR_ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
        for (int r = 0; r < PDR_ROLES; r++)
            if (reuse[i][r] >= 0) {
                g[i].tree[r] = p->groups[reuse[i][r]].tree[r];
                p->groups[reuse[i][r]].tree[r] = NULL;
            }
    for (size_t k = 0; k < p->n_groups; k++)
        for (int r = 0; r < PDR_ROLES; r++)
            pdr_ptree_free(p->groups[k].tree[r]); /* pools gone, or no longer cache_aware */
    free(reuse);
    p->ca_max_tree = (uint64_t)c->cache_aware.max_tree_size;
    free(p->groups);
    p->groups = g;
    p->n_groups = n;
    p->rise = c->health.rise;
    p->fall = c->health.fall;
    p->outlier = c->outlier;
    return 0;
}

/* Under the lock: the group named pool (NULL: the first), or -1. */
int pdr__pool_group_of(const pdr_pool_t *p, const char *pool)
{
    if (pool == NULL)
        return p->n_groups > 0 ? 0 : -1;
    for (size_t i = 0; i < p->n_groups; i++)
        if (strcmp(p->groups[i].name, pool) == 0)
            return (int)i;
    return -1;
}

int pdr_pool_init(pdr_pool_t *p, const pdr_config_t *c)
{
    memset(p, 0, sizeof(*p));
    pthread_rwlock_init(&p->rw, NULL);
    pthread_mutex_init(&p->lock, NULL);
    pdr_events_init(&p->events);
    p->live = 1;
    size_t total[PDR_ROLES] = {0, 0, 0};
    for (int r = 0; r < PDR_ROLES; r++)
        if ((p->list[r] = list_new(1)) == NULL)
            return PDR_ENOMEM;
    if (apply_settings(p, c) != 0)
        return PDR_ENOMEM;
    for (size_t g = 0; g < p->n_groups; g++) {
        pdr_pool_conf_t pc;
        pdr_config_pool(c, g, &pc);
        for (size_t i = 0; i < pc.n_prefill; i++)
            total[0] += targets_of(&pc.prefill[i]);
        for (size_t i = 0; i < pc.n_decode; i++)
            total[1] += targets_of(&pc.decode[i]);
        for (size_t i = 0; i < pc.n_regular; i++)
            total[2] += targets_of(&pc.regular[i]);
    }
    for (int r = 0; r < PDR_ROLES; r++) {
        free(p->list[r]);
        if ((p->list[r] = list_new(total[r])) == NULL)
            return PDR_ENOMEM;
    }
    for (size_t g = 0; g < p->n_groups; g++) {
        pdr_pool_conf_t pc;
        pdr_config_pool(c, g, &pc);
        const pdr_worker_conf_t *confs[PDR_ROLES] = {pc.prefill, pc.decode, pc.regular};
        size_t counts[PDR_ROLES] = {pc.n_prefill, pc.n_decode, pc.n_regular};
        for (int r = 0; r < PDR_ROLES; r++) {
            for (size_t i = 0; i < counts[r]; i++)
                for (size_t rank = 0; rank < targets_of(&confs[r][i]); rank++) {
                    pdr_worker_conf_t one = confs[r][i]; /* shallow; worker_new copies */
                    one.dp_rank = (int)rank;
                    pdr_worker_t *w =
                        worker_new(p, (int)g, (pdr_role_t)r, &one, PDR_SOURCE_STATIC, NULL, NULL);
                    if (w == NULL)
                        return PDR_ENOMEM;
                    p->list[r]->w[p->list[r]->n++] = w;
                    p->added_total[PDR_SOURCE_STATIC]++;
                }
        }
    }
    return 0;
}

void pdr_pool_dispose(pdr_pool_t *p)
{
    if (!p->live)
        return;
    for (int r = 0; r < PDR_ROLES; r++) {
        if (p->list[r] == NULL)
            continue;
        for (size_t i = 0; i < p->list[r]->n; i++) {
            __atomic_store_n(&p->list[r]->w[i]->removed, 1, __ATOMIC_RELEASE);
            pdr_worker_unref(p->list[r]->w[i]);
        }
        free(p->list[r]);
    }
    for (size_t k = 0; k < p->n_groups; k++)
        for (int r = 0; r < PDR_ROLES; r++)
            pdr_ptree_free(p->groups[k].tree[r]);
    free(p->groups);
    pthread_rwlock_destroy(&p->rw);
    pthread_mutex_destroy(&p->lock);
    pdr_events_dispose(&p->events);
    memset(p, 0, sizeof(*p));
}

/* ---- what the other files of the pool build on: a snapshot of the lists, the event record, idleness ---- */

size_t pdr_pool_snapshot(pdr_pool_t *p, int role, pdr_worker_t ***out)
{
    *out = NULL;
    pthread_rwlock_rdlock(&p->rw);
    size_t n = 0;
    for (int r = 0; r < PDR_ROLES; r++)
        if (role < 0 || role == r)
            n += p->list[r]->n;
    pdr_worker_t **a = n ? malloc(n * sizeof(*a)) : NULL;
    size_t k = 0;
    for (int r = 0; r < PDR_ROLES && a != NULL; r++)
        if (role < 0 || role == r)
            for (size_t i = 0; i < p->list[r]->n; i++)
                a[k++] = pdr_worker_ref(p->list[r]->w[i]);
    pthread_rwlock_unlock(&p->rw);
    *out = a;
    return a != NULL ? k : 0;
}

void pdr_pool_release(pdr_worker_t **ws, size_t n)
{
    for (size_t i = 0; i < n; i++)
        pdr_worker_unref(ws[i]);
    free(ws);
}

void pdr_pool_note_idle(pdr_worker_t *w)
{
    int want = PDR_DRAIN_DRAINING;
    if (__atomic_compare_exchange_n(&w->drain, &want, PDR_DRAIN_DRAINED, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
        pdr_info("worker %s %s drained: no requests in flight", w->id, w->target);
}

void pdr_pool_record(pdr_pool_t *p, const pdr_worker_t *w, const char *fmt, ...)
{
    const char *id = w != NULL ? w->id : NULL;
    char msg[sizeof(((pdr_event_t *)0)->message)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    pdr_events_add(&p->events, id, "%s", msg);
}

/* ---- membership (writers hold rw for writing) ---- */

static ssize_t find_url(const pdr_worker_list_t *l, const char *url)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->w[i]->conf.url, url) == 0)
            return (ssize_t)i;
    return -1;
}

/* Replaces the role's list by `next` (taking it) and drops the list's references to `gone`. */
static void publish(pdr_pool_t *p, pdr_role_t role, pdr_worker_list_t *next)
{
    free(p->list[role]);
    p->list[role] = next;
    __atomic_add_fetch(&p->generation, 1, __ATOMIC_RELEASE);
}

pdr_worker_t *pdr_pool_add(pdr_pool_t *p, const char *pool, pdr_role_t role, const pdr_worker_conf_t *conf,
                           int source, const char *name, const char *labels_json, int *err)
{
    pthread_rwlock_wrlock(&p->rw);
    int g = pdr__pool_group_of(p, pool);
    if (g < 0) {
        pthread_rwlock_unlock(&p->rw);
        *err = PDR_ENOWORKER;
        return NULL;
    }
    pdr_worker_list_t *cur = p->list[role];
    if (find_url(cur, conf->url) >= 0) {
        pthread_rwlock_unlock(&p->rw);
        *err = PDR_EEXIST;
        return NULL;
    }
    pdr_worker_list_t *next = list_new(cur->n + 1);
    pdr_worker_t *w = next != NULL ? worker_new(p, g, role, conf, source, name, labels_json) : NULL;
    if (w == NULL) {
        pthread_rwlock_unlock(&p->rw);
        free(next);
        *err = PDR_ENOMEM;
        return NULL;
    }
    memcpy(next->w, cur->w, cur->n * sizeof(pdr_worker_t *));
    next->n = cur->n;
    next->w[next->n++] = pdr_worker_ref(w);
    p->added_total[source]++;
    publish(p, role, next);
    pthread_rwlock_unlock(&p->rw);
    pdr_info("worker %s %s added (pool %s, source %s%s%s)", w->id, w->target, w->pool, w->source,
             w->name[0] ? ", " : "", w->name);
    return w;
}

/* Under the write lock: a copy of the role's list without the workers flagged in `drop`. */
static pdr_worker_list_t *without(const pdr_worker_list_t *cur, const unsigned char *drop)
{
    pdr_worker_list_t *next = list_new(cur->n);
    if (next == NULL)
        return NULL;
    for (size_t i = 0; i < cur->n; i++)
        if (!drop[i])
            next->w[next->n++] = cur->w[i];
    return next;
}

static pdr_pool_retire_cb on_retire; /* atomic: set once by the first user (pdr_pool_on_retire) */

void pdr_pool_on_retire(pdr_pool_retire_cb cb)
{
    __atomic_store_n(&on_retire, cb, __ATOMIC_RELEASE);
}

static void retire(pdr_pool_t *p, pdr_worker_t *w, const char *why)
{
    __atomic_store_n(&w->removed, 1, __ATOMIC_RELEASE);
    pdr_pool_retire_cb cb = __atomic_load_n(&on_retire, __ATOMIC_ACQUIRE);
    if (cb != NULL)
        cb(w); /* what a part above the pool keeps per worker (the links' table) goes with it */
    if (w->group >= 0 && (size_t)w->group < p->n_groups && p->groups[w->group].tree[w->role] != NULL)
        pdr_ptree_remove_tenant(p->groups[w->group].tree[w->role], w->uid);
    p->removed_total[source_of(w)]++;
    pdr_info("worker %s %s removed (%s): %d requests in flight finish on it", w->id, w->target, why,
             pdr_worker_inflight(w));
}

int pdr_pool_remove(pdr_pool_t *p, pdr_worker_t *w, const char *why)
{
    pthread_rwlock_wrlock(&p->rw);
    pdr_worker_list_t *cur = p->list[w->role];
    unsigned char drop[cur->n + 1];
    memset(drop, 0, sizeof(drop));
    int found = 0;
    for (size_t i = 0; i < cur->n; i++)
        if (cur->w[i] == w)
            drop[i] = 1, found = 1;
    pdr_worker_list_t *next = found ? without(cur, drop) : NULL;
    if (next == NULL) {
        pthread_rwlock_unlock(&p->rw);
        return found ? PDR_ENOMEM : PDR_ENOWORKER;
    }
    retire(p, w, why);
    publish(p, w->role, next);
    pthread_rwlock_unlock(&p->rw);
    pdr_pool_record(p, w, "removed: %s", why);
    pdr_worker_unref(w); /* the list's reference */
    return 0;
}

/* Under the write lock: confs[k] belongs to group groups[k] (groups NULL: all to group_all). A worker of the
 * source matches a conf with the same URL, bootstrap port and group. scope (non-NULL): only the source's
 * workers of the pool of that name are reconciled; the source's workers of other pools stay and keep
 * their URLs, like another source's. Unlocks. */
static int same_endpoint(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

/* A changed KV event endpoint (or replay endpoint) is another worker (its subscriber follows the worker,
 * kv_events.c). */
static int same_kv_events(const pdr_worker_conf_t *a, const pdr_worker_conf_t *b)
{
    return same_endpoint(a->kv_events, b->kv_events) &&
           same_endpoint(a->kv_events_replay, b->kv_events_replay);
}

static size_t reconcile_locked(pdr_pool_t *p, int source, const char *scope, pdr_role_t role,
                               const pdr_worker_conf_t *confs, const char *const *names, const int *groups,
                               int group_all, size_t n)
{
    const char *src = pdr_source_names[source];
    pdr_worker_list_t *cur = p->list[role];
    unsigned char drop[cur->n + 1];
    unsigned char keep_new[n + 1];
    memset(drop, 0, sizeof(drop));
    memset(keep_new, 1, sizeof(keep_new));
    size_t changes = 0;
    for (size_t i = 0; i < cur->n; i++) {
        pdr_worker_t *w = cur->w[i];
        int mine = strcmp(w->source, src) == 0 && (scope == NULL || strcmp(w->pool, scope) == 0);
        int wanted = 0;
        for (size_t k = 0; k < n; k++)
            if (strcmp(confs[k].url, w->conf.url) == 0 && rank_of(&confs[k]) == w->dp_rank) {
                if (!mine) {
                    keep_new[k] = 0; /* another source owns this URL */
                } else if (confs[k].bootstrap_port == w->conf.bootstrap_port &&
                           targets_of(&confs[k]) == targets_of(&w->conf) &&
                           same_kv_events(&confs[k], &w->conf) &&
                           w->group == (groups != NULL ? groups[k] : group_all)) {
                    keep_new[k] = 0;
                    wanted = 1;
                }
            }
        if (mine && !wanted)
            drop[i] = 1, changes++;
    }
    size_t adds = 0;
    for (size_t k = 0; k < n; k++) {
        /* a URL twice in the input: the first wins */
        for (size_t j = 0; j < k && keep_new[k]; j++)
            if (keep_new[j] && strcmp(confs[j].url, confs[k].url) == 0 &&
                rank_of(&confs[j]) == rank_of(&confs[k]))
                keep_new[k] = 0;
        adds += keep_new[k];
    }
    if (changes == 0 && adds == 0) {
        pthread_rwlock_unlock(&p->rw);
        return 0;
    }
    pdr_worker_list_t *next = list_new(cur->n + adds);
    if (next == NULL) {
        pthread_rwlock_unlock(&p->rw);
        pdr_warn("%s: out of memory while updating the %s workers", src, pdr_role_name(role));
        return 0;
    }
    pdr_worker_t *gone[cur->n + 1];
    size_t n_gone = 0;
    for (size_t i = 0; i < cur->n; i++) {
        if (drop[i])
            gone[n_gone++] = cur->w[i];
        else
            next->w[next->n++] = cur->w[i];
    }
    for (size_t k = 0; k < n; k++) {
        if (!keep_new[k])
            continue;
        pdr_worker_t *w = worker_new(p, groups != NULL ? groups[k] : group_all, role, &confs[k], source,
                                     names ? names[k] : NULL, NULL);
        if (w == NULL) {
            pdr_warn("%s: out of memory adding %s", src, confs[k].url);
            continue;
        }
        next->w[next->n++] = w;
        p->added_total[source]++;
        changes++;
        pdr_info("worker %s %s added (pool %s, source %s%s%s)", w->id, w->target, w->pool, src,
                 w->name[0] ? ", " : "", w->name);
    }
    for (size_t i = 0; i < n_gone; i++)
        retire(p, gone[i], src);
    publish(p, role, next);
    pthread_rwlock_unlock(&p->rw);
    for (size_t i = 0; i < n_gone; i++) {
        pdr_pool_record(p, gone[i], "removed: no longer listed by %s", src);
        pdr_worker_unref(gone[i]);
    }
    return changes;
}

size_t pdr_pool_reconcile(pdr_pool_t *p, const char *pool, int source, pdr_role_t role,
                          const pdr_worker_conf_t *confs, const char *const *names, size_t n)
{
    pthread_rwlock_wrlock(&p->rw);
    /* A pool that is not (or no longer) configured receives nothing; its workers of the source leave. */
    int g = pdr__pool_group_of(p, pool);
    return reconcile_locked(p, source, p->groups != NULL && g >= 0 ? p->groups[g].name : pool, role, confs,
                            names, NULL, g, g >= 0 ? n : 0);
}

size_t pdr_pool_apply_config(pdr_pool_t *p, const pdr_config_t *c)
{
    size_t changes = 0, n_pools = pdr_config_pool_count(c);
    pthread_rwlock_wrlock(&p->rw);
    if (apply_settings(p, c) != 0) {
        pthread_rwlock_unlock(&p->rw);
        pdr_warn("reload: out of memory while updating the pools");
        return 0;
    }
    /* Every listed worker's group by its pool's name; the workers of a pool that is gone leave. With
     * outlier detection turned off, its ejections and ramps end now, not when their time runs out. */
    for (int r = 0; r < PDR_ROLES; r++)
        for (size_t i = 0; i < p->list[r]->n; i++) {
            pdr_worker_t *w = p->list[r]->w[i];
            w->group = pdr__pool_group_of(p, w->pool);
            if (!p->outlier.enabled)
                pdr_outlier_reset(&w->outlier);
        }
    pthread_rwlock_unlock(&p->rw);
    for (int r = 0; r < PDR_ROLES; r++) {
        pdr_worker_t **ws;
        size_t n = pdr_pool_snapshot(p, r, &ws);
        for (size_t i = 0; i < n; i++) {
            char why[128];
            snprintf(why, sizeof(why), "its pool %s is no longer configured", ws[i]->pool);
            pthread_rwlock_rdlock(&p->rw);
            int gone = ws[i]->group < 0;
            pthread_rwlock_unlock(&p->rw);
            if (gone && pdr_pool_remove(p, ws[i], why) == 0)
                changes++;
        }
        pdr_pool_release(ws, n);
    }
    /* The static workers of every pool, one role at a time, so that a worker moving between pools is
     * matched against all of them at once. */
    for (int r = 0; r < PDR_ROLES; r++) {
        size_t total = 0;
        for (size_t g = 0; g < n_pools; g++) {
            pdr_pool_conf_t pc;
            pdr_config_pool(c, g, &pc);
            const pdr_worker_conf_t *ws = r == 0 ? pc.prefill : r == 1 ? pc.decode : pc.regular;
            size_t n = r == 0 ? pc.n_prefill : r == 1 ? pc.n_decode : pc.n_regular;
            for (size_t i = 0; i < n; i++)
                total += targets_of(&ws[i]);
        }
        pdr_worker_conf_t *confs = calloc(total + 1, sizeof(*confs));
        int *groups = calloc(total + 1, sizeof(*groups));
        if (confs == NULL || groups == NULL) {
            free(confs);
            free(groups);
            pdr_warn("reload: out of memory while updating the %s workers", pdr_role_name((pdr_role_t)r));
            continue;
        }
        size_t k = 0;
        pthread_rwlock_wrlock(&p->rw);
        for (size_t g = 0; g < n_pools; g++) {
            pdr_pool_conf_t pc;
            pdr_config_pool(c, g, &pc);
            const pdr_worker_conf_t *ws = r == 0 ? pc.prefill : r == 1 ? pc.decode : pc.regular;
            size_t n = r == 0 ? pc.n_prefill : r == 1 ? pc.n_decode : pc.n_regular;
            for (size_t i = 0; i < n; i++)
                for (size_t rank = 0; rank < targets_of(&ws[i]); rank++) {
                    confs[k] = ws[i]; /* shallow: borrowed from c for the call */
                    confs[k].dp_rank = (int)rank;
                    groups[k++] = pdr__pool_group_of(p, pc.name);
                }
        }
        changes += reconcile_locked(p, PDR_SOURCE_STATIC, NULL, (pdr_role_t)r, confs, NULL, groups, 0, k);
        free(confs);
        free(groups);
    }
    return changes;
}
