/*
 * Admission (admission.h; the design is in docs/internals/admission.md). Owns the process's admission
 * state: the requests admitted (all loops, and by pool), the bounded FIFO queue of those that wait, the
 * token bucket of limits.rate_limit_rps, and the admission metrics. All of it is under one mutex, taken
 * for a few comparisons per request; the queue is shared by every loop, so that arrival order and the
 * global limit hold across loops.
 *
 * Invariants: a waiter is in exactly one place: nowhere (IDLE or ADMITTED), the queue (QUEUED), or the
 * list of its loop's handed-over slots (GRANTED, counted as admitted already). A slot is handed over only
 * under the mutex, and the loop is woken with its wakeup handle (uv_async_send, also under the mutex, so
 * that pdr_admit_loop_closing orders before the handle is closed). go() runs on the waiter's own loop,
 * never from the call that freed the slot.
 *
 * With admission.classes or admission.fairness_header set, waiters queue in the scheduler of fairq.c
 * (classes, then tenants in round robin) instead of the FIFO; without them the FIFO alone, as before.
 * Either way the counters by class, and the service time estimate of admission.refuse_late, are kept here.
 *
 * Threads: any loop thread; go() on the waiter's loop.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "admission.h"
#include "buf.h"
#include "router.h"
#include "util.h"

/* ---- the token bucket (pure: tests/unit/test_admission.c) ---- */

double pdr_bucket_cap(double rate, int burst)
{
    if (burst > 0)
        return (double)burst;
    return rate > 1 ? rate : 1;
}

static void bucket_refill(pdr_bucket_t *b, double rate, double cap, uint64_t now_ns)
{
    if (b->last_ns == 0) {
        b->tokens = cap;
    } else if (now_ns > b->last_ns) {
        b->tokens += (double)(now_ns - b->last_ns) * rate / 1e9;
    }
    if (b->tokens > cap)
        b->tokens = cap;
    if (now_ns > b->last_ns || b->last_ns == 0)
        b->last_ns = now_ns ? now_ns : 1;
}

int pdr_bucket_take(pdr_bucket_t *b, double rate, double cap, uint64_t now_ns)
{
    bucket_refill(b, rate, cap, now_ns);
    if (b->tokens < 1)
        return 0;
    b->tokens -= 1;
    return 1;
}

uint64_t pdr_bucket_wait_ns(const pdr_bucket_t *b, double rate, double cap, uint64_t now_ns)
{
    pdr_bucket_t c = *b;
    bucket_refill(&c, rate, cap, now_ns);
    if (c.tokens >= 1 || rate <= 0)
        return 1;
    double ns = (1 - c.tokens) * 1e9 / rate;
    return ns < 1 ? 1 : (uint64_t)ns + 1;
}

/* ---- the shared state ---- */

/* Queue waits, seconds: 1 ms (a slot freed at once) to 2 min (past the default 60 s timeout). */
static const double wait_bounds[] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                     1,     2.5,   5,    10,    30,   60,  120};
#define N_BOUNDS (sizeof(wait_bounds) / sizeof(wait_bounds[0]))

static const char *const reject_names[PDR_REJ__COUNT] = {"queue_full",
                                                         "queue_timeout",
                                                         "rate_limited",
                                                         "max_inflight",
                                                         "max_inflight_per_pool",
                                                         "max_inflight_per_worker",
                                                         "shutting_down",
                                                         "shed",
                                                         "deadline"};

_Static_assert(PDR_FAIRQ_MAX_CLASSES == PDR_CONFIG_MAX_CLASSES, "one ceiling of classes");
_Static_assert(PDR_FAIRQ_MAX_TENANTS >= 1024, "admission.max_tenants reaches 1024");
#define N_CLASSES PDR_FAIRQ_MAX_CLASSES
#define RES_ADMITTED PDR_REJ__COUNT /* pdr_admission_class_total's results: the reasons, then admitted */
#define EST_MIN_SAMPLES 4           /* slots ended before the service time estimate is used */

static struct {
    pthread_mutex_t lock;
    int64_t admitted;                            /* all pools */
    int64_t pool_admitted[PDR_CONFIG_MAX_POOLS]; /* by pool index */
    int64_t pool_starting[PDR_CONFIG_MAX_POOLS]; /* admitted, workers not picked yet (per-worker limit) */
    int64_t pool_queued[PDR_CONFIG_MAX_POOLS];
    pdr_dqueue_t queue;
    size_t depth;                                 /* also read without the lock (atomic) */
    pdr_dqueue_t granted[PDR_MAX_THREADS_RENDER]; /* by loop id */
    uint8_t closed[PDR_MAX_THREADS_RENDER];
    pdr_bucket_t bucket;
    uint64_t wait_counts[N_BOUNDS + 1];
    double wait_sum;
    uint64_t wait_count;
    uint64_t rejected[PDR_REJ__COUNT]; /* atomic */
    pdr_fairq_t fq;                    /* the waiters queued by class and tenant */
    size_t cls_depth[N_CLASSES];
    uint64_t cls_wait_counts[N_CLASSES][N_BOUNDS + 1];
    double cls_wait_sum[N_CLASSES];
    uint64_t cls_result[N_CLASSES][PDR_REJ__COUNT + 1];
    char classes[PDR_CONFIG_MAX_CLASSES * (PDR_CONFIG_CLASS_NAME_MAX + 1)]; /* the names rendered */
    double hold_ns;                                                         /* mean slot time (EWMA 1/8) */
    uint64_t hold_samples;
    uint64_t late_retry_s; /* the last PDR_ADMIT_LATE's estimate (atomic) */
} S = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int pool_slot(int i)
{
    return i >= 0 && i < PDR_CONFIG_MAX_POOLS ? i : 0;
}

static int cls_slot(int c)
{
    return c >= 0 && c < N_CLASSES ? c : N_CLASSES - 1;
}

static void observe_wait(uint64_t ns, int cls)
{
    double s = (double)ns / 1e9;
    size_t k = 0;
    while (k < N_BOUNDS && s > wait_bounds[k])
        k++;
    S.wait_counts[k]++;
    S.wait_sum += s;
    S.wait_count++;
    S.cls_wait_counts[cls][k]++;
    S.cls_wait_sum[cls] += s;
}

static int scheduled(const pdr_config_t *c)
{
    return c->admission.classes != NULL || c->admission.fairness_header != NULL;
}

/* The requests the role's serving workers of the pool can still take under the per-worker limit. */
static int64_t worker_room(pdr_pool_t *workers, const char *pool, pdr_role_t role, int cap)
{
    pdr_worker_t **ws;
    size_t n = pdr_pool_snapshot(workers, role, &ws);
    int64_t room = 0;
    for (size_t i = 0; i < n; i++) {
        pdr_worker_t *w = ws[i];
        if ((pool != NULL && strcmp(w->pool, pool) != 0) || !pdr_worker_serving(w))
            continue;
        int in = pdr_worker_inflight(w);
        if (in < cap)
            room += cap - in;
    }
    pdr_pool_release(ws, n);
    return room;
}

/* Whether the pool of w has a prefill and a decode under limits.max_inflight_per_worker, counting the
 * requests admitted that have not picked theirs yet. */
static int workers_fit(const pdr_config_t *c, const pdr_admit_waiter_t *w)
{
    int cap = c->limits.max_inflight_per_worker;
    if (cap <= 0)
        return 1;
    int64_t starting = S.pool_starting[pool_slot(w->pool_index)];
    return worker_room(w->workers, w->pool, PDR_ROLE_PREFILL, cap) > starting &&
           worker_room(w->workers, w->pool, PDR_ROLE_DECODE, cap) > starting;
}

/* Which limit, other than the rate, keeps w out now (PDR_REJ__COUNT: none). */
static pdr_admit_reject_t blocked_by(const pdr_config_t *c, const pdr_admit_waiter_t *w)
{
    if (S.admitted >= c->limits.max_inflight)
        return PDR_REJ_MAX_INFLIGHT;
    int per_pool = c->limits.max_inflight_per_pool;
    if (per_pool > 0 && S.pool_admitted[pool_slot(w->pool_index)] >= per_pool)
        return PDR_REJ_MAX_INFLIGHT_PER_POOL;
    if (!workers_fit(c, w))
        return PDR_REJ_MAX_INFLIGHT_PER_WORKER;
    return PDR_REJ__COUNT;
}

static int rate_on(const pdr_config_t *c)
{
    return c->limits.rate_limit_rps > 0;
}

static int take_token(const pdr_config_t *c, uint64_t now)
{
    if (!rate_on(c))
        return 1;
    double rate = c->limits.rate_limit_rps;
    return pdr_bucket_take(&S.bucket, rate, pdr_bucket_cap(rate, c->limits.rate_limit_burst), now);
}

static void count_admitted(pdr_admit_waiter_t *w, const pdr_config_t *c)
{
    int p = pool_slot(w->pool_index);
    S.admitted++;
    S.pool_admitted[p]++;
    S.cls_result[w->cls][RES_ADMITTED]++;
    w->slot_ns = pdr_now_ns();
    if (c->limits.max_inflight_per_worker > 0) {
        S.pool_starting[p]++;
        w->starting = 1;
    }
}

/* w leaves the counts of the queue (the FIFO or the scheduler unlinks it). */
static void unqueue_counts(pdr_admit_waiter_t *w, uint64_t now)
{
    __atomic_store_n(&S.depth, S.depth - 1, __ATOMIC_RELAXED);
    S.pool_queued[pool_slot(w->pool_index)]--;
    S.cls_depth[w->cls]--;
    w->wait_ns = now > w->enq_ns ? now - w->enq_ns : 0;
    observe_wait(w->wait_ns, w->cls);
}

static void unqueue(pdr_admit_waiter_t *w, uint64_t now)
{
    if (pdr_dlink_linked(&w->fq.link))
        pdr_fairq_remove(&S.fq, &w->fq);
    else
        pdr_dqueue_unlink(&S.queue, &w->link);
    unqueue_counts(w, now);
}

static void grant(pdr_admit_waiter_t *w, const pdr_config_t *c)
{
    count_admitted(w, c);
    w->state = PDR_ADMIT_GRANTED;
    pdr_dqueue_append(&S.granted[w->t->id], &w->link);
    uv_async_send(&w->t->wakeup);
}

struct pump_ctx {
    const pdr_config_t *c;
    uint64_t now;
    uint64_t full_pools; /* pools found without room in this pump: room only shrinks while it runs */
};

/* The scheduler's offer of a waiter: the same decision as the FIFO's walk (pump). */
static pdr_fairq_verdict_t try_waiter(pdr_fairq_item_t *it, void *arg)
{
    struct pump_ctx *p = arg;
    pdr_admit_waiter_t *w = PDR_DLINK_ITEM(it, pdr_admit_waiter_t, fq);
    if (pdr_router_shutting_down(w->t->r))
        return PDR_FAIRQ_STOP; /* past the drain deadline: the waiters are answered 503 on their loops */
    uint64_t bit = 1ull << (w->pool_index & 63);
    if (S.closed[w->t->id] || (p->full_pools & bit) != 0)
        return PDR_FAIRQ_SKIP;
    pdr_admit_reject_t why = blocked_by(p->c, w);
    if (why == PDR_REJ_MAX_INFLIGHT)
        return PDR_FAIRQ_STOP;
    if (why != PDR_REJ__COUNT) {
        p->full_pools |= bit;
        return PDR_FAIRQ_SKIP;
    }
    if (!take_token(p->c, p->now))
        return PDR_FAIRQ_STOP;
    unqueue_counts(w, p->now);
    grant(w, p->c);
    return PDR_FAIRQ_TAKE;
}

/* Hands the freed room to the oldest waiters that fit, in arrival order; a waiter held back by its pool's
 * limits does not hold back another pool's. Under the lock. */
static void pump(const pdr_config_t *c)
{
    if (S.depth == 0)
        return;
    struct pump_ctx p = {c, pdr_now_ns(), 0};
    (void)pdr_fairq_pump(&S.fq, try_waiter, &p); /* waiters of the scheduler (none without it) */
    pdr_dlink_t *l = S.queue.head;
    if (l == NULL)
        return;
    if (pdr_router_shutting_down(PDR_DLINK_ITEM(l, pdr_admit_waiter_t, link)->t->r))
        return; /* past the drain deadline: the waiters are answered 503 on their loops */
    uint64_t now = pdr_now_ns();
    while (l != NULL) {
        pdr_admit_waiter_t *w = PDR_DLINK_ITEM(l, pdr_admit_waiter_t, link);
        l = l->next;
        if (S.closed[w->t->id])
            continue; /* its loop is closing: it is answered there */
        pdr_admit_reject_t why = blocked_by(c, w);
        if (why == PDR_REJ_MAX_INFLIGHT)
            break; /* nobody fits */
        if (why != PDR_REJ__COUNT)
            continue;
        if (!take_token(c, now))
            break; /* the next token comes on a waiter's timer (pdr_admit_rate_wait_ns) */
        unqueue(w, now);
        grant(w, c);
    }
}

/* The class names rendered follow admission.classes. Under the lock. */
static void note_classes(const pdr_config_t *c)
{
    const char *cl = c->admission.classes != NULL ? c->admission.classes : "";
    if (strcmp(cl, S.classes) != 0)
        snprintf(S.classes, sizeof(S.classes), "%s", cl);
}

/* Whether a waiter of class cls, to be queued now, cannot leave the queue by deadline_ns: the waiters
 * queued ahead of it (its class and the more important ones) and itself, each taking a slot for the mean
 * slot time, shared by the slots held now. Under the lock. */
static int too_late(const pdr_config_t *c, int cls, uint64_t now, uint64_t deadline_ns)
{
    if (!c->admission.refuse_late || S.hold_samples < EST_MIN_SAMPLES || deadline_ns == 0)
        return 0;
    size_t ahead = 0;
    for (int k = 0; k <= cls; k++)
        ahead += S.cls_depth[k];
    double slots = S.admitted > 0 ? (double)S.admitted : 1;
    double est = (double)(ahead + 1) * S.hold_ns / slots;
    if ((double)now + est <= (double)deadline_ns)
        return 0;
    __atomic_store_n(&S.late_retry_s, (uint64_t)(est / 1e9) + 1, __ATOMIC_RELAXED);
    return 1;
}

static void note_hold(pdr_admit_waiter_t *w, uint64_t now)
{
    if (w->slot_ns == 0 || now < w->slot_ns)
        return;
    double ns = (double)(now - w->slot_ns);
    S.hold_ns = S.hold_samples == 0 ? ns : S.hold_ns + (ns - S.hold_ns) / 8;
    S.hold_samples++;
}

pdr_admit_result_t pdr_admit_enter(pdr_thread_t *t, const pdr_config_t *c, pdr_admit_waiter_t *w,
                                   pdr_pool_t *workers, const char *pool, int pool_index,
                                   const pdr_admit_tag_t *tag, void (*go)(pdr_admit_waiter_t *))
{
    memset(w, 0, sizeof(*w));
    w->cls = cls_slot(tag != NULL ? tag->cls : 0);
    w->t = t;
    w->workers = workers;
    w->pool = pool;
    w->pool_index = pool_slot(pool_index);
    w->go = go;
    pthread_mutex_lock(&S.lock);
    note_classes(c);
    uint64_t now = pdr_now_ns();
    pump(c); /* older waiters first: tokens refilled since, room freed on another loop */
    pdr_admit_reject_t why = S.pool_queued[w->pool_index] > 0 ? PDR_REJ_MAX_INFLIGHT : blocked_by(c, w);
    int token = why == PDR_REJ__COUNT ? take_token(c, now) : 1;
    if (why == PDR_REJ__COUNT && token) {
        count_admitted(w, c);
        w->state = PDR_ADMIT_ADMITTED;
        pthread_mutex_unlock(&S.lock);
        return PDR_ADMIT_GO;
    }
    pdr_admit_result_t res;
    if (c->limits.queue == 0) {
        res = !token                                   ? PDR_ADMIT_RATE
              : why == PDR_REJ_MAX_INFLIGHT_PER_POOL   ? PDR_ADMIT_BUSY_POOL
              : why == PDR_REJ_MAX_INFLIGHT_PER_WORKER ? PDR_ADMIT_BUSY_WORKER
                                                       : PDR_ADMIT_BUSY;
    } else if (S.depth >= (size_t)c->limits.queue) {
        res = PDR_ADMIT_FULL;
    } else if (c->admission.shed_queue_depth > 0 && S.depth >= (size_t)c->admission.shed_queue_depth &&
               pdr_config_class_count(c->admission.classes) >= 2 &&
               w->cls == pdr_config_class_count(c->admission.classes) - 1) {
        res = PDR_ADMIT_SHED;
    } else if (too_late(c, w->cls, now, tag != NULL ? tag->deadline_ns : 0)) {
        res = PDR_ADMIT_LATE;
    } else {
        w->state = PDR_ADMIT_QUEUED;
        w->enq_ns = now;
        if (scheduled(c)) {
            w->fq.cls = w->cls;
            w->fq.key = tag != NULL ? tag->key : 0;
            (void)pdr_fairq_push(&S.fq, &w->fq, c->admission.max_tenants);
        } else {
            pdr_dqueue_append(&S.queue, &w->link);
        }
        __atomic_store_n(&S.depth, S.depth + 1, __ATOMIC_RELAXED);
        S.pool_queued[w->pool_index]++;
        S.cls_depth[w->cls]++;
        res = PDR_ADMIT_WAIT;
    }
    pthread_mutex_unlock(&S.lock);
    if (res != PDR_ADMIT_WAIT)
        pdr_admit_count_refused(w, res == PDR_ADMIT_FULL          ? PDR_REJ_QUEUE_FULL
                                   : res == PDR_ADMIT_RATE        ? PDR_REJ_RATE_LIMITED
                                   : res == PDR_ADMIT_BUSY_POOL   ? PDR_REJ_MAX_INFLIGHT_PER_POOL
                                   : res == PDR_ADMIT_BUSY_WORKER ? PDR_REJ_MAX_INFLIGHT_PER_WORKER
                                   : res == PDR_ADMIT_SHED        ? PDR_REJ_SHED
                                   : res == PDR_ADMIT_LATE        ? PDR_REJ_DEADLINE
                                                                  : PDR_REJ_MAX_INFLIGHT);
    return res;
}

static void not_starting(pdr_admit_waiter_t *w)
{
    if (w->starting) {
        w->starting = 0;
        S.pool_starting[w->pool_index]--;
    }
}

void pdr_admit_started(pdr_admit_waiter_t *w)
{
    if (!w->starting)
        return;
    pthread_mutex_lock(&S.lock);
    not_starting(w);
    pthread_mutex_unlock(&S.lock);
}

int pdr_admit_leave(pdr_thread_t *t, const pdr_config_t *c, pdr_admit_waiter_t *w)
{
    (void)t;
    int was = w->state;
    if (was == PDR_ADMIT_IDLE)
        return was;
    pthread_mutex_lock(&S.lock);
    if (was == PDR_ADMIT_QUEUED) {
        unqueue(w, pdr_now_ns());
    } else {
        if (was == PDR_ADMIT_GRANTED)
            pdr_dqueue_unlink(&S.granted[w->t->id], &w->link);
        note_hold(w, pdr_now_ns());
        S.admitted--;
        S.pool_admitted[w->pool_index]--;
        not_starting(w);
        pump(c);
    }
    w->state = PDR_ADMIT_IDLE;
    pthread_mutex_unlock(&S.lock);
    return was;
}

int pdr_admit_expire(pdr_admit_waiter_t *w)
{
    pthread_mutex_lock(&S.lock);
    int queued = w->state == PDR_ADMIT_QUEUED;
    if (queued) {
        unqueue(w, pdr_now_ns());
        w->state = PDR_ADMIT_IDLE;
    }
    pthread_mutex_unlock(&S.lock);
    return queued;
}

void pdr_admit_kick(pdr_thread_t *t, const pdr_config_t *c)
{
    (void)t;
    if (__atomic_load_n(&S.depth, __ATOMIC_RELAXED) == 0)
        return;
    pthread_mutex_lock(&S.lock);
    pump(c);
    pthread_mutex_unlock(&S.lock);
}

uint64_t pdr_admit_rate_wait_ns(const pdr_config_t *c)
{
    if (!rate_on(c))
        return 0;
    double rate = c->limits.rate_limit_rps;
    pthread_mutex_lock(&S.lock);
    uint64_t ns =
        pdr_bucket_wait_ns(&S.bucket, rate, pdr_bucket_cap(rate, c->limits.rate_limit_burst), pdr_now_ns());
    pthread_mutex_unlock(&S.lock);
    return ns;
}

void pdr_admit_count_reject(pdr_admit_reject_t why)
{
    if (why < PDR_REJ__COUNT)
        __atomic_add_fetch(&S.rejected[why], 1, __ATOMIC_RELAXED);
}

void pdr_admit_count_refused(const pdr_admit_waiter_t *w, pdr_admit_reject_t why)
{
    pdr_admit_count_reject(why);
    if (why < PDR_REJ__COUNT)
        __atomic_add_fetch(&S.cls_result[cls_slot(w->cls)][why], 1, __ATOMIC_RELAXED);
}

int pdr_admit_late_retry_s(void)
{
    uint64_t s = __atomic_load_n(&S.late_retry_s, __ATOMIC_RELAXED);
    return s < 1 ? 1 : s > 3600 ? 3600 : (int)s;
}

void pdr_admit_deliver(pdr_thread_t *t)
{
    if (t->id < 0 || t->id >= PDR_MAX_THREADS_RENDER)
        return;
    pdr_dqueue_t mine;
    pthread_mutex_lock(&S.lock);
    pdr_dqueue_move(&mine, &S.granted[t->id]);
    pthread_mutex_unlock(&S.lock);
    /* One at a time from the front: go() may end a request whose waiter is further down this list (its
     * pdr_admit_leave unlinks it from here, on this thread). */
    pdr_dlink_t *l;
    while ((l = pdr_dqueue_pop(&mine)) != NULL) {
        pdr_admit_waiter_t *w = PDR_DLINK_ITEM(l, pdr_admit_waiter_t, link);
        w->state = PDR_ADMIT_ADMITTED;
        w->go(w);
    }
}

void pdr_admit_loop_closing(pdr_thread_t *t)
{
    if (t->id < 0 || t->id >= PDR_MAX_THREADS_RENDER)
        return;
    pthread_mutex_lock(&S.lock);
    S.closed[t->id] = 1;
    pthread_mutex_unlock(&S.lock);
}

size_t pdr_admit_avoid(const pdr_config_t *c, pdr_pool_t *workers, const char *pool, pdr_role_t role,
                       const uint64_t *avoid, size_t n, uint64_t *out, size_t cap)
{
    size_t k = 0;
    for (size_t i = 0; i < n && k < cap; i++)
        out[k++] = avoid[i];
    int limit = c->limits.max_inflight_per_worker;
    if (limit <= 0)
        return k;
    pdr_worker_t **ws;
    size_t nw = pdr_pool_snapshot(workers, role, &ws);
    for (size_t i = 0; i < nw && k < cap; i++)
        if ((pool == NULL || strcmp(ws[i]->pool, pool) == 0) && pdr_worker_inflight(ws[i]) >= limit)
            out[k++] = ws[i]->uid;
    pdr_pool_release(ws, nw);
    return k;
}

size_t pdr_admit_depth(void)
{
    return __atomic_load_n(&S.depth, __ATOMIC_RELAXED);
}

#define RENDER_CAP (64 * 1024)

/* The families by class (admission.classes; one class, "default", without it). */
static int render_classes(pdr_buf_t *o)
{
    uint64_t counts[N_CLASSES][N_BOUNDS + 1], results[N_CLASSES][PDR_REJ__COUNT + 1];
    double sums[N_CLASSES];
    size_t depth[N_CLASSES];
    char names[sizeof(S.classes)];
    pthread_mutex_lock(&S.lock);
    memcpy(counts, S.cls_wait_counts, sizeof(counts));
    memcpy(sums, S.cls_wait_sum, sizeof(sums));
    memcpy(depth, S.cls_depth, sizeof(depth));
    memcpy(names, S.classes, sizeof(names));
    for (int k = 0; k < N_CLASSES; k++)
        for (int j = 0; j <= PDR_REJ__COUNT; j++)
            results[k][j] = __atomic_load_n(&S.cls_result[k][j], __ATOMIC_RELAXED);
    uint64_t overflow = S.fq.overflow;
    pthread_mutex_unlock(&S.lock);
    const char *cl = names[0] != '\0' ? names : NULL;
    int nc = pdr_config_class_count(cl);
    char line[256], name[PDR_CONFIG_CLASS_NAME_MAX];
    int bad = 0, n;
    static const char depth_head[] = "# HELP pdr_queue_class_depth PD requests waiting in the admission "
                                     "queue, by class (admission.classes).\n"
                                     "# TYPE pdr_queue_class_depth gauge\n";
    bad |= pdr_buf_append(o, depth_head, sizeof(depth_head) - 1, RENDER_CAP);
    for (int k = 0; k < nc; k++) {
        pdr_config_class_name(cl, k, name, sizeof(name));
        n = snprintf(line, sizeof(line), "pdr_queue_class_depth{class=\"%s\"} %zu\n", name, depth[k]);
        bad |= pdr_buf_append(o, line, (size_t)n, RENDER_CAP);
    }
    static const char wait_head[] =
        "# HELP pdr_queue_class_wait_seconds Time PD requests spent in the admission queue, by class.\n"
        "# TYPE pdr_queue_class_wait_seconds histogram\n";
    bad |= pdr_buf_append(o, wait_head, sizeof(wait_head) - 1, RENDER_CAP);
    for (int k = 0; k < nc; k++) {
        pdr_config_class_name(cl, k, name, sizeof(name));
        uint64_t cum = 0;
        for (size_t b = 0; b <= N_BOUNDS; b++) {
            cum += counts[k][b];
            char le[32];
            if (b < N_BOUNDS)
                snprintf(le, sizeof(le), "%g", wait_bounds[b]);
            else
                snprintf(le, sizeof(le), "+Inf");
            n = snprintf(line, sizeof(line),
                         "pdr_queue_class_wait_seconds_bucket{class=\"%s\",le=\"%s\"} %llu\n", name, le,
                         (unsigned long long)cum);
            bad |= pdr_buf_append(o, line, (size_t)n, RENDER_CAP);
        }
        n = snprintf(line, sizeof(line),
                     "pdr_queue_class_wait_seconds_sum{class=\"%s\"} %.6f\n"
                     "pdr_queue_class_wait_seconds_count{class=\"%s\"} %llu\n",
                     name, sums[k], name, (unsigned long long)cum);
        bad |= pdr_buf_append(o, line, (size_t)n, RENDER_CAP);
    }
    static const char res_head[] =
        "# HELP pdr_admission_class_total PD requests by class and what admission did: admitted (given a "
        "slot, "
        "at once or from the queue), or the reason of pdr_admission_rejected_total.\n"
        "# TYPE pdr_admission_class_total counter\n";
    bad |= pdr_buf_append(o, res_head, sizeof(res_head) - 1, RENDER_CAP);
    for (int k = 0; k < nc; k++) {
        pdr_config_class_name(cl, k, name, sizeof(name));
        for (int j = 0; j <= PDR_REJ__COUNT; j++) {
            n = snprintf(line, sizeof(line), "pdr_admission_class_total{class=\"%s\",result=\"%s\"} %llu\n",
                         name, j == RES_ADMITTED ? "admitted" : reject_names[j],
                         (unsigned long long)results[k][j]);
            bad |= pdr_buf_append(o, line, (size_t)n, RENDER_CAP);
        }
    }
    n = snprintf(
        line, sizeof(line),
        "# HELP pdr_admission_tenant_overflow_total PD requests queued in a class's shared sub-queue: "
        "admission.max_tenants tenants were queued already.\n"
        "# TYPE pdr_admission_tenant_overflow_total counter\npdr_admission_tenant_overflow_total %llu\n",
        (unsigned long long)overflow);
    bad |= pdr_buf_append(o, line, (size_t)n, RENDER_CAP);
    return bad;
}

char *pdr_admit_render_metrics(size_t *len)
{
    pdr_buf_t o = {NULL, 0, 0};
    char line[256];
    pthread_mutex_lock(&S.lock);
    uint64_t counts[N_BOUNDS + 1];
    memcpy(counts, S.wait_counts, sizeof(counts));
    double sum = S.wait_sum;
    uint64_t count = S.wait_count;
    size_t depth = S.depth;
    int64_t admitted = S.admitted;
    pthread_mutex_unlock(&S.lock);
    int n = snprintf(line, sizeof(line),
                     "# HELP pdr_queue_depth PD requests waiting in the admission queue (limits.queue).\n"
                     "# TYPE pdr_queue_depth gauge\npdr_queue_depth %zu\n",
                     depth);
    int bad = pdr_buf_append(&o, line, (size_t)n, RENDER_CAP);
    n = snprintf(line, sizeof(line),
                 "# HELP pdr_admitted_requests PD requests holding an admission slot (limits.max_inflight).\n"
                 "# TYPE pdr_admitted_requests gauge\npdr_admitted_requests %lld\n",
                 (long long)admitted);
    bad |= pdr_buf_append(&o, line, (size_t)n, RENDER_CAP);
    static const char wait_head[] =
        "# HELP pdr_queue_wait_seconds Time PD requests spent in the admission queue, whatever came next "
        "(a slot, the timeout, the client leaving).\n# TYPE pdr_queue_wait_seconds histogram\n";
    bad |= pdr_buf_append(&o, wait_head, sizeof(wait_head) - 1, RENDER_CAP);
    uint64_t cum = 0;
    for (size_t k = 0; k <= N_BOUNDS; k++) {
        cum += counts[k];
        if (k < N_BOUNDS)
            n = snprintf(line, sizeof(line), "pdr_queue_wait_seconds_bucket{le=\"%g\"} %llu\n",
                         wait_bounds[k], (unsigned long long)cum);
        else
            n = snprintf(line, sizeof(line), "pdr_queue_wait_seconds_bucket{le=\"+Inf\"} %llu\n",
                         (unsigned long long)cum);
        bad |= pdr_buf_append(&o, line, (size_t)n, RENDER_CAP);
    }
    n = snprintf(line, sizeof(line), "pdr_queue_wait_seconds_sum %.6f\npdr_queue_wait_seconds_count %llu\n",
                 sum, (unsigned long long)count);
    bad |= pdr_buf_append(&o, line, (size_t)n, RENDER_CAP);
    static const char rej_head[] =
        "# HELP pdr_admission_rejected_total PD requests refused by admission, by reason: queue_full (429), "
        "queue_timeout (503), rate_limited (429, no queue), max_inflight, max_inflight_per_pool, "
        "max_inflight_per_worker (503, no queue), shutting_down (503, queued at the drain deadline), shed "
        "(429, "
        "the last class at admission.shed_queue_depth), deadline (503, its wait estimated past its "
        "deadline).\n"
        "# TYPE pdr_admission_rejected_total counter\n";
    bad |= pdr_buf_append(&o, rej_head, sizeof(rej_head) - 1, RENDER_CAP);
    for (int k = 0; k < PDR_REJ__COUNT; k++) {
        n = snprintf(line, sizeof(line), "pdr_admission_rejected_total{reason=\"%s\"} %llu\n",
                     reject_names[k], (unsigned long long)__atomic_load_n(&S.rejected[k], __ATOMIC_RELAXED));
        bad |= pdr_buf_append(&o, line, (size_t)n, RENDER_CAP);
    }
    bad |= render_classes(&o);
    bad |= pdr_buf_append(&o, "", 1, RENDER_CAP); /* a C string too */
    if (bad != 0) {
        pdr_buf_free(&o);
        return NULL;
    }
    *len = o.len - 1;
    return o.p;
}
