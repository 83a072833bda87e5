/*
 * Prefill -> decode link state (links.h). A fixed array of PDR_LINKS_MAX entries, kept dense (entries
 * [0, n) are live), searched linearly under one mutex: entries exist only for links that failed, so the
 * table is empty (and pdr_links_success costs one atomic load) in a healthy cluster, and small in a sick
 * one. When it is full, the entry whose last failure is oldest goes (a cleared link before a suspect
 * one). Workers are named by uid (unique for the process's life), so an entry never outlives its worker's
 * identity: a worker removed or restarted is forgotten, and a new worker with the same URL starts clean.
 * Any thread.
 */
#include "links.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "buf.h"
#include "util.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pdr_link_info_t table[PDR_LINKS_MAX];
static size_t n_links; /* under lock; also read atomically by the fast path */

static pdr_link_info_t *find(uint64_t p, uint64_t d)
{
    for (size_t i = 0; i < n_links; i++)
        if (table[i].prefill_uid == p && table[i].decode_uid == d)
            return &table[i];
    return NULL;
}

static void drop(size_t i)
{
    size_t n = __atomic_load_n(&n_links, __ATOMIC_RELAXED);
    if (i + 1 < n)
        table[i] = table[n - 1];
    __atomic_store_n(&n_links, n - 1, __ATOMIC_RELAXED);
}

/* The slot a new entry takes: a free one, else the cleared link that failed longest ago, else the
 * suspect link that failed longest ago. */
static pdr_link_info_t *take_slot(void)
{
    if (n_links < PDR_LINKS_MAX) {
        pdr_link_info_t *e = &table[n_links];
        __atomic_store_n(&n_links, n_links + 1, __ATOMIC_RELAXED);
        return e;
    }
    size_t best = 0;
    for (size_t i = 1; i < n_links; i++) {
        const pdr_link_info_t *a = &table[i], *b = &table[best];
        if (a->suspect != b->suspect ? a->suspect < b->suspect : a->last_failure_ms < b->last_failure_ms)
            best = i;
    }
    return &table[best];
}

void pdr_links_failure(const pdr_worker_t *p, const pdr_worker_t *d, const char *cause)
{
    pdr_links_failure_breaker(p, d, cause, NULL);
}

void pdr_links_failure_breaker(const pdr_worker_t *p, const pdr_worker_t *d, const char *cause,
                               const pdr_breaker_conf_t *bc)
{
    if (p == NULL || d == NULL)
        return;
    /* Entries go with their workers: the pool calls pdr_links_forget_worker for each worker it retires
     * from the first entry on (registered before the entry exists, so no retirement slips between). */
    pdr_pool_on_retire(pdr_links_forget_worker);
    pthread_mutex_lock(&lock);
    pdr_link_info_t *e = find(p->uid, d->uid);
    if (e == NULL) {
        e = take_slot();
        memset(e, 0, sizeof(*e));
        e->prefill_uid = p->uid;
        e->decode_uid = d->uid;
        snprintf(e->prefill, sizeof(e->prefill), "%s", p->target);
        snprintf(e->decode, sizeof(e->decode), "%s", d->target);
        snprintf(e->prefill_id, sizeof(e->prefill_id), "%s", p->id);
        snprintf(e->decode_id, sizeof(e->decode_id), "%s", d->id);
    }
    e->suspect = 1;
    e->consecutive_failures++;
    e->failures_total++;
    e->last_failure_ms = pdr_wall_us() / 1000;
    snprintf(e->last_cause, sizeof(e->last_cause), "%s", cause != NULL ? cause : "unknown");
    pdr_breaker_state_t before = (pdr_breaker_state_t)e->brk.state, after = before;
    if (bc != NULL)
        after = pdr_breaker_failure(&e->brk, e->consecutive_failures, bc, pdr_now_ms());
    uint64_t period = e->brk.period_ms, consecutive = e->consecutive_failures;
    pthread_mutex_unlock(&lock);
    if (after == PDR_BREAKER_OPEN && before != PDR_BREAKER_OPEN)
        pdr_warn(
            "link prefill %s -> decode %s: breaker open for %llu ms after %llu KV failures in a row (%s)",
            p->target, d->target, (unsigned long long)period, (unsigned long long)consecutive,
            cause != NULL ? cause : "unknown");
}

int pdr_links_admit(const pdr_worker_t *p, const pdr_worker_t *d, int claim, uint64_t *last_failure_ms)
{
    if (last_failure_ms != NULL)
        *last_failure_ms = 0;
    if (p == NULL || d == NULL || __atomic_load_n(&n_links, __ATOMIC_RELAXED) == 0)
        return 1;
    pthread_mutex_lock(&lock);
    pdr_link_info_t *e = find(p->uid, d->uid);
    int ok = e == NULL || pdr_breaker_admit(&e->brk, pdr_now_ms(), claim);
    if (e != NULL && last_failure_ms != NULL)
        *last_failure_ms = e->last_failure_ms;
    pthread_mutex_unlock(&lock);
    return ok;
}

void pdr_links_success(const pdr_worker_t *p, const pdr_worker_t *d)
{
    if (p == NULL || d == NULL || __atomic_load_n(&n_links, __ATOMIC_RELAXED) == 0)
        return;
    int closed = 0;
    pthread_mutex_lock(&lock);
    pdr_link_info_t *e = find(p->uid, d->uid);
    if (e != NULL) {
        e->suspect = 0;
        e->consecutive_failures = 0;
        e->successes_total++;
        closed = e->brk.state != PDR_BREAKER_CLOSED;
        pdr_breaker_success(&e->brk);
    }
    pthread_mutex_unlock(&lock);
    if (closed)
        pdr_info("link prefill %s -> decode %s: breaker closed (a KV transfer completed)", p->target,
                 d->target);
}

int pdr_links_is_suspect(const pdr_worker_t *p, const pdr_worker_t *d)
{
    if (p == NULL || d == NULL || __atomic_load_n(&n_links, __ATOMIC_RELAXED) == 0)
        return 0;
    pthread_mutex_lock(&lock);
    const pdr_link_info_t *e = find(p->uid, d->uid);
    int s = e != NULL && e->suspect;
    pthread_mutex_unlock(&lock);
    return s;
}

void pdr_links_forget_worker(const pdr_worker_t *w)
{
    if (w == NULL || __atomic_load_n(&n_links, __ATOMIC_RELAXED) == 0)
        return;
    pthread_mutex_lock(&lock);
    for (size_t i = n_links; i-- > 0;)
        if (table[i].prefill_uid == w->uid || table[i].decode_uid == w->uid)
            drop(i);
    pthread_mutex_unlock(&lock);
}

size_t pdr_links_snapshot(pdr_link_info_t *out, size_t cap, size_t *suspect)
{
    pthread_mutex_lock(&lock);
    size_t k = 0, s = 0;
    for (size_t i = 0; i < n_links; i++) {
        s += table[i].suspect != 0;
        if (k < cap)
            out[k++] = table[i];
    }
    pthread_mutex_unlock(&lock);
    if (suspect != NULL)
        *suspect = s;
    return k;
}

size_t pdr_links_count(void)
{
    return __atomic_load_n(&n_links, __ATOMIC_RELAXED);
}

void pdr_links__reset(void)
{
    pthread_mutex_lock(&lock);
    __atomic_store_n(&n_links, 0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&lock);
}

/* Every piece of the text is at most one line of RENDER_LINE bytes: the link series, at most PDR_LINKS_MAX,
 * and fewer than 16 others (three families' heads and values, a series per state). */
#define RENDER_LINE 800
#define RENDER_CAP ((size_t)(PDR_LINKS_MAX + 16) * RENDER_LINE)
_Static_assert(PDR_BREAKER__COUNT + 4 < 16, "the breaker's families outgrew RENDER_CAP");

char *pdr_links_render_metrics(size_t *len)
{
    pdr_buf_t o = {0};
    char line[RENDER_LINE];
    int n;
#define PUT(...)                                                                                             \
    do {                                                                                                     \
        n = snprintf(line, sizeof(line), __VA_ARGS__);                                                       \
        if (n > 0 && pdr_buf_append(&o, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1,       \
                                    RENDER_CAP) != 0)                                                        \
            goto oom;                                                                                        \
    } while (0)
    PUT("# HELP pdr_breaker_transitions_total Prefill->decode link breaker state changes, by the state "
        "entered.\n# TYPE pdr_breaker_transitions_total counter\n");
    for (int s = 0; s < PDR_BREAKER__COUNT; s++)
        PUT("pdr_breaker_transitions_total{to=\"%s\"} %llu\n", pdr_breaker_state_names[s],
            (unsigned long long)pdr_breaker_transitions((pdr_breaker_state_t)s));
    PUT("# HELP pdr_breaker_avoided_total Pair picks that left an open link for another pairing.\n"
        "# TYPE pdr_breaker_avoided_total counter\npdr_breaker_avoided_total %llu\n",
        (unsigned long long)pdr_breaker_avoided());
    PUT("# HELP pdr_breaker_all_open_total Pair picks whose every pairing tried was open: the least "
        "recently failed link was used.\n# TYPE pdr_breaker_all_open_total counter\n"
        "pdr_breaker_all_open_total %llu\n",
        (unsigned long long)pdr_breaker_all_open());
    size_t cap = pdr_links_count() + 1;
    pdr_link_info_t *ls = malloc(sizeof(*ls) * cap);
    size_t k = ls != NULL ? pdr_links_snapshot(ls, cap, NULL) : 0;
    uint64_t now = pdr_now_ms();
    PUT("# HELP pdr_link_state The prefill->decode link's breaker: 0 closed, 1 open, 2 half-open; links "
        "that never failed have no series.\n# TYPE pdr_link_state gauge\n");
    for (size_t i = 0; i < k; i++) {
        n = snprintf(line, sizeof(line), "pdr_link_state{prefill=\"%s\",decode=\"%s\"} %d\n", ls[i].prefill,
                     ls[i].decode, (int)pdr_breaker_state(&ls[i].brk, now, NULL));
        if (n > 0 && pdr_buf_append(&o, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1,
                                    RENDER_CAP) != 0) {
            free(ls);
            goto oom;
        }
    }
    free(ls);
#undef PUT
    if (pdr_buf_append(&o, "", 1, RENDER_CAP + 1) != 0) /* NUL-terminated, not counted */
        goto oom;
    *len = o.len - 1;
    return o.p;
oom: /* out of memory (RENDER_CAP is never reached) */
    pdr_buf_free(&o);
    return NULL;
}
