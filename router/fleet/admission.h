/*
 * Admission (admission.c, docs/internals/admission.md): whether a PD request may start now, wait in the
 * router's bounded FIFO queue, or be refused. The limits are limits.max_inflight (the router),
 * limits.max_inflight_per_pool (each pool), limits.max_inflight_per_worker (a pool whose every prefill or
 * every decode is at it has no room) and the token bucket of limits.rate_limit_rps / rate_limit_burst.
 * One queue and one set of counters for the process, under one mutex; a waiter is handed its slot on its
 * own loop through that loop's wakeup handle.
 */
#ifndef PDR_ADMISSION_H
#define PDR_ADMISSION_H

#include <stddef.h>
#include <stdint.h>
#include "config.h"
#include "dlist.h"
#include "fairq.h"
#include "pool.h"
#include "rewrite.h"

struct pdr_thread;

/* A token bucket: rate tokens a second, at most cap of them; it starts full. */
typedef struct pdr_bucket {
    double tokens;
    uint64_t last_ns; /* 0: never used (full) */
} pdr_bucket_t;

/* Refills b to now_ns and takes one token: 1, or 0 when less than one is there. */
int pdr_bucket_take(pdr_bucket_t *b, double rate, double cap, uint64_t now_ns);
/* After a refused take at now_ns: nanoseconds until one token is there (at least 1). */
uint64_t pdr_bucket_wait_ns(const pdr_bucket_t *b, double rate, double cap, uint64_t now_ns);
/* The capacity limits.rate_limit_burst gives (0: max(1, rate)). */
double pdr_bucket_cap(double rate, int burst);

enum { PDR_ADMIT_IDLE = 0, PDR_ADMIT_QUEUED, PDR_ADMIT_GRANTED, PDR_ADMIT_ADMITTED };

/* What pdr_admit_enter answers. */
typedef enum {
    PDR_ADMIT_GO = 0,      /* a slot is taken: start */
    PDR_ADMIT_WAIT,        /* queued: go() runs on the loop when a slot is handed over */
    PDR_ADMIT_FULL,        /* 429: the queue is full */
    PDR_ADMIT_RATE,        /* 429: the rate limit, and no queue */
    PDR_ADMIT_BUSY,        /* 503: no room and no queue (limits.queue 0) */
    PDR_ADMIT_BUSY_POOL,   /* 503: the same, limits.max_inflight_per_pool */
    PDR_ADMIT_BUSY_WORKER, /* 503: the same, limits.max_inflight_per_worker */
    PDR_ADMIT_SHED,        /* 429: the last class, the queue at admission.shed_queue_depth */
    PDR_ADMIT_LATE,        /* 503: its estimated wait passes its deadline (admission.refuse_late) */
} pdr_admit_result_t;

/* Why requests were refused (pdr_admission_rejected_total{reason}). */
typedef enum {
    PDR_REJ_QUEUE_FULL = 0,
    PDR_REJ_QUEUE_TIMEOUT,
    PDR_REJ_RATE_LIMITED,
    PDR_REJ_MAX_INFLIGHT,
    PDR_REJ_MAX_INFLIGHT_PER_POOL,
    PDR_REJ_MAX_INFLIGHT_PER_WORKER,
    PDR_REJ_SHUTTING_DOWN,
    PDR_REJ_SHED,
    PDR_REJ_DEADLINE,
    PDR_REJ__COUNT
} pdr_admit_reject_t;

/* What the request says of itself (router/pd/queue.c reads it from its headers). */
typedef struct pdr_admit_tag {
    int cls;              /* its class (admission.classes), 0 the most important */
    uint64_t key;         /* its tenant (pdr_fairq_key of admission.fairness_header's value); 0: none */
    uint64_t deadline_ns; /* when its wait in the queue must end */
} pdr_admit_tag_t;

typedef struct pdr_admit_waiter pdr_admit_waiter_t;
struct pdr_admit_waiter {
    pdr_dlink_t link; /* the queue (arrival order), then its loop's list of slots handed over */
    struct pdr_thread *t;
    pdr_pool_t *workers;
    const char *pool;    /* the pool's name (outlives the request's config reference) */
    int pool_index;      /* its index in the config's pools (0 with one pool) */
    int state;           /* PDR_ADMIT_* */
    int starting;        /* counted in its pool's admitted-but-not-started requests (per-worker limit) */
    uint64_t enq_ns;     /* when it joined the queue */
    uint64_t wait_ns;    /* how long it waited (0 when it went at once) */
    uint64_t slot_ns;    /* when it was given its slot (the service time estimate's samples) */
    int cls;             /* its class */
    pdr_fairq_item_t fq; /* queued with classes or fairness: its place there, else it is in the FIFO */
    void (*go)(pdr_admit_waiter_t *w); /* on t's loop: the slot is the waiter's, start */
};

/* The request's header `lower` (lower case, n bytes), or NULL; *len its value's length. */
typedef const char *(*pdr_admit_header_fn)(void *ctx, const char *lower, size_t n, size_t *len);
/* What admission needs of a request (admission_tag.c): its class from admission.class_header (a name not in
 * admission.classes, or none, is admission.default_class; without a named class, the body's integer
 * "priority" with admission.priority_field), its tenant from admission.fairness_header (the value is
 * hashed at once and never kept nor logged; none: the tenant of requests without the header), and its queue
 * deadline from t0_ns, admission.timeout_header's milliseconds when that is sooner than
 * limits.queue_timeout_ms. hdr reads the request's headers; body may be NULL. */
void pdr_admit_tag_of(const pdr_config_t *c, pdr_admit_header_fn hdr, void *ctx, const pdr_pdreq_t *body,
                      uint64_t t0_ns, pdr_admit_tag_t *tag);
/* A new request of pool `pool` (index pool_index) on t's loop, under c's limits, of class and tenant tag
 * (NULL: class 0, no tenant, no deadline of its own). w is filled in and stays the caller's until
 * pdr_admit_leave. */
pdr_admit_result_t pdr_admit_enter(struct pdr_thread *t, const pdr_config_t *c, pdr_admit_waiter_t *w,
                                   pdr_pool_t *workers, const char *pool, int pool_index,
                                   const pdr_admit_tag_t *tag, void (*go)(pdr_admit_waiter_t *));
/* After PDR_ADMIT_LATE: the estimated wait, in whole seconds (at least 1), for Retry-After. */
int pdr_admit_late_retry_s(void);
/* The request's legs are started (or it ended): it no longer counts as about to pick workers. */
void pdr_admit_started(pdr_admit_waiter_t *w);
/* The request is over (answered, refused, or its client left): its slot or its place in the queue is
 * given back at once; a freed slot goes to the oldest waiter that fits. Returns the state it was in. */
int pdr_admit_leave(struct pdr_thread *t, const pdr_config_t *c, pdr_admit_waiter_t *w);
/* A queued waiter's time is up: 1 when it left the queue (answer 503), 0 when its slot was handed over
 * already (go() comes). */
int pdr_admit_expire(pdr_admit_waiter_t *w);
/* Something else freed room (a leg ended, a token refilled): the queue is looked at again. */
void pdr_admit_kick(struct pdr_thread *t, const pdr_config_t *c);
/* When a waiter of the rate limit may look again: ns from now, or 0 when the rate limit is off. */
uint64_t pdr_admit_rate_wait_ns(const pdr_config_t *c);
/* Counts a refusal (the caller answers it). */
void pdr_admit_count_reject(pdr_admit_reject_t why);
/* The same for w's request, counted in its class too. */
void pdr_admit_count_refused(const pdr_admit_waiter_t *w, pdr_admit_reject_t why);
/* t's loop (its wakeup handle): runs go() of the waiters handed a slot. */
void pdr_admit_deliver(struct pdr_thread *t);
/* t's loop is closing its wakeup handle: nothing more is handed to it. */
void pdr_admit_loop_closing(struct pdr_thread *t);
/* The avoid list of a pick (pdr_pool_pick_*): the first n of avoid, then the workers of the role in the
 * pool at limits.max_inflight_per_worker; at most cap uids in out. Returns the count. */
size_t pdr_admit_avoid(const pdr_config_t *c, pdr_pool_t *workers, const char *pool, pdr_role_t role,
                       const uint64_t *avoid, size_t n, uint64_t *out, size_t cap);
/* The queue depth now. */
size_t pdr_admit_depth(void);
/* The admission families (docs/metrics.md), malloc'd NUL-terminated text of *len bytes (free), or NULL. */
char *pdr_admit_render_metrics(size_t *len);

#endif
