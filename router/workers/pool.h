/*
 * The worker registry: every prefill and decode worker with its health state and in-flight count,
 * and the policies that pick a pair. Shared by every loop thread: counters and the healthy flag are
 * atomics, health transitions happen under the pool's mutex.
 *
 * Membership changes at run time (the admin API, discovery, a config reload). The list of each role is
 * an immutable array replaced as a whole under the pool's rwlock (readers hold the read lock only while
 * they pick or copy it). Workers are reference-counted: the list holds one reference, and so does every
 * request and health check using the worker, so a worker taken out of the pool stays valid until the
 * last request on it ends; it simply is never picked again. A worker keeps its id ("prefill-3": role and
 * a per-role sequence number, the static workers numbered in config order) for its whole life.
 *
 * Pools (config `pools:`; the one-pool shorthand is a pool named "default"): every worker belongs to one
 * pool, the request's model picks the pool (router/pd/) and pdr_pool_pick chooses only among that pool's
 * workers, by that pool's policies. The registry keeps one group per configured pool (name, policies,
 * protocol, round-robin cursors), replaced by a reload; a worker's `group` is its index there (-1 once its
 * pool is gone: never picked again, and taken out of the registry).
 *
 * Sources: "static" (the config's lists; a reload reconciles them), "admin" (POST /admin/v1/workers;
 * kept across reloads), "dns" and "kubernetes" (discovery: each pool's sources reconcile that pool's
 * workers only). A URL is in the pool at most once per role: the first source to bring it owns it.
 *
 * Health state machine (HAProxy/Envoy style): a worker starts healthy; `fall` consecutive failed
 * checks make it unhealthy, `rise` consecutive good checks make it healthy again. Request failures
 * that prove the worker unreachable (connect refused, timeout) eject it at once ("passive" check);
 * the active checks bring it back.
 *
 * Drain state machine (orthogonal to health; operator- or worker-initiated, HAProxy's "drain"):
 * ACTIVE --drain--> DRAINING --in_flight reaches 0, or the drain timeout passes--> DRAINED
 * DRAINING/DRAINED --activate--> ACTIVE. Pickers skip DRAINING and DRAINED workers; requests already
 * in flight finish (nothing is cancelled, not even at the timeout). Health checks keep running.
 */
#ifndef PDR_POOL_H
#define PDR_POOL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include "config.h"
#include "events.h"
#include "identity.h"
#include "outlier.h"
#include "routing.h"

typedef struct pdr_health_state {
    int healthy;
    int consec_ok, consec_fail;
} pdr_health_state_t;

/* Applies one check result; returns 1 when the healthy flag changed. Pure. */
int pdr_health_update(pdr_health_state_t *s, int ok, int rise, int fall);

enum { PDR_DRAIN_ACTIVE = 0, PDR_DRAIN_DRAINING = 1, PDR_DRAIN_DRAINED = 2 };

typedef struct pdr_worker {
    int refcnt; /* atomic */
    pdr_role_t role;
    unsigned seq;            /* the number in the id */
    uint64_t uid;            /* unique for the process's life (retries avoid by uid) */
    uint64_t ring_key;       /* cache_aware: hash of the target (URL[@RANK]), alike in every replica */
    char id[32];             /* "prefill-3" */
    char source[16];         /* static | admin | dns | kubernetes */
    char pool[64];           /* the pool's name (immutable) */
    int group;               /* under rw: index in pdr_pool_t.groups, -1 when the pool is gone */
    char name[256];          /* the source's name for it (pod, address); "" for static and admin */
    char *labels_json;       /* a JSON object, "{}" when none; immutable */
    pdr_worker_conf_t conf;  /* its own copy: url, host, port, bootstrap_port */
    char bootstrap_host[80]; /* as sent to workers: IPv6 in brackets */
    int dp_rank;             /* data-parallel attention rank this target is (conf.dp_size > 1), else -1 */
    char target[300]; /* the URL, with "@RANK" for a rank (the sglang router's naming): logs, metrics */
    uint64_t added_ms;
    pdr_health_state_t health;
    int inflight;
    uint64_t requests_total, failures_total, ejections_total;
    uint64_t checks_ok, checks_failed;
    uint64_t last_check_ms;
    int probing;                 /* loop 0: a health check is running */
    int ejected;                 /* atomic: made unhealthy by request failures, not by health checks */
    int drain;                   /* atomic: PDR_DRAIN_* */
    uint64_t drain_deadline_ms;  /* under the pool lock: 0 = no timeout */
    uint64_t drains_total;       /* under the pool lock */
    int remove_when_drained;     /* under the pool lock: DELETE without force */
    int removed;                 /* atomic: out of the pool */
    uint64_t alive_ns;           /* atomic: when it last answered a request (pdr_worker_note_alive) */
    int probe_now;               /* atomic: a request suspects it; loop 0 checks it at its next tick */
    pdr_outlier_state_t outlier; /* passive health (outlier.h): under the pool lock, atomics read */
    /* What its shim reports (fleet/shim_events.c): atomics, written by loop 0; report_ms 0 = never. */
    struct {
        uint64_t report_ms, kv_free_bytes, kv_total_bytes, kv_free_blocks, block_size, kv_bytes_per_token;
        uint64_t queue_depth, active_rooms, dropped_total;
        uint64_t inst_hi, inst_lo; /* the shim's instance id (0: none seen) */
        uint64_t epoch;            /* bumped by each new instance: KV holds of older ones are void */
        uint64_t restarts_total;
        uint64_t reserved;     /* KV bytes held by requests admitted to it (kv_admission) */
        uint64_t reserved_rep; /* reserved when the last report arrived */
        int64_t inflight_rep;  /* the router's in-flight count when the last report arrived */
    } load;
    /* Its identity (identity.h), read by loop 0 (fleet/identify.c). */
    struct {
        uint64_t key;       /* atomic: the compat key picks compare; 0 = unknown (not read, or re-reading) */
        pdr_identity_t id;  /* under the pool lock: the last identity read (id.key 0: never read) */
        char error[160];    /* under the pool lock: why the last read failed; "" after a good one */
        uint64_t read_ms;   /* under the pool lock: when it was last read successfully */
        int reading, stale; /* loop 0: a read runs; a new read is due (healthy again, restarted) */
        uint64_t epoch;     /* loop 0: load.epoch when the last read started */
        uint64_t next_ms;   /* loop 0: a failed read is tried again from then */
        int fails;          /* loop 0: reads failed in a row (the first one is logged) */
    } ident;
    /* What its engine answered to the load poll (fleet/load_poll.c, pool_load.h): atomics written by
     * loop 0, read by every loop's picks. */
    struct {
        uint64_t ok_ms;         /* when the last good answer arrived; 0: none yet */
        uint64_t reqs, waiting; /* requests on the engine (running and waiting), of which waiting */
        uint64_t tokens;        /* sglang's num_tokens over its ranks */
        int64_t kv_usage_ppm;   /* KV cache usage in millionths; -1: not reported */
        int64_t inflight_at;    /* the router's in-flight count when the answer arrived */
        int state;              /* PDR_ELOAD_* of the last poll */
        int polling;            /* loop 0: a poll is running */
        uint64_t next_ms;       /* loop 0: when the next poll is due */
    } engine;
} pdr_worker_t;

typedef struct pdr_worker_list {
    size_t n;
    pdr_worker_t *w[];
} pdr_worker_list_t;

/* One configured pool's picking state. */
typedef struct pdr_pool_group {
    char name[64];
    pdr_policy_kind_t policy[PDR_ROLES]; /* by role */
    pdr_protocol_t protocol;
    unsigned rr_next[PDR_ROLES];  /* atomic: round-robin cursors by role */
    pdr_ptree_t *tree[PDR_ROLES]; /* cache_aware: the prompts recently sent to each worker of the role
                                     (own lock) */
    pdr_cache_aware_params_t
        ca[PDR_ROLES]; /* cache_aware: the pool's thresholds and seed by role (under rw) */
} pdr_pool_group_t;

typedef struct pdr_pool {
    pthread_rwlock_t rw; /* list[] pointers, groups, workers' group, rise, fall, sequence counters */
    pdr_worker_list_t *list[PDR_ROLES]; /* [PDR_ROLE_PREFILL], [PDR_ROLE_DECODE], [PDR_ROLE_REGULAR] */
    pdr_pool_group_t *groups;           /* the configured pools, in config order */
    size_t n_groups;
    int rise, fall;
    unsigned next_seq[PDR_ROLES];
    uint64_t next_uid;
    uint64_t generation;                       /* atomic: bumped on every membership change */
    uint64_t added_total[4], removed_total[4]; /* by source (PDR_SOURCE_*), under rw write */
    pthread_mutex_t lock;                      /* health and drain transitions */
    pdr_events_t events;                       /* recent errors, for the admin status page (own lock) */
    uint64_t ca_max_tree;                      /* cache_aware.max_tree_size */
    uint64_t ca_decisions[4];                  /* atomic: by pdr_cache_aware_decision_t */
    struct pdr_kvindex *kvindex;               /* precise_prefix: the KV event index (fleet/kv_events.c) */
    uint64_t pp_decisions[2][4];               /* atomic: precise_prefix by [from the index][decision] */
    int live;
    pdr_outlier_conf_t outlier;      /* under rw: the outlier settings */
    uint64_t panic_total[PDR_ROLES]; /* atomic: picks made in panic (outlier.h), by role */
    uint64_t affinity_total[PDR_ROLES]
                           [4]; /* atomic: picks with affinity on by role and outcome (affinity.h) */
    int load_poll_ms;           /* atomic: load.poll_ms as loop 0's poller last saw it (pool_load.h) */
    int load_timeout_ms;        /* atomic: load.timeout_ms, likewise */
} pdr_pool_t;

enum { PDR_SOURCE_STATIC = 0, PDR_SOURCE_ADMIN, PDR_SOURCE_DNS, PDR_SOURCE_KUBERNETES };
extern const char *const pdr_source_names[4];

static inline pdr_worker_t *pdr_worker_ref(pdr_worker_t *w)
{
    __atomic_add_fetch(&w->refcnt, 1, __ATOMIC_RELAXED);
    return w;
}
/* Drops a reference; the last one frees the worker. NULL is a no-op. */
void pdr_worker_unref(pdr_worker_t *w);

static inline int pdr_worker_healthy(const pdr_worker_t *w)
{
    return __atomic_load_n(&w->health.healthy, __ATOMIC_RELAXED);
}
static inline int pdr_worker_drain_state(const pdr_worker_t *w)
{
    return __atomic_load_n(&w->drain, __ATOMIC_ACQUIRE);
}
static inline int pdr_worker_removed(const pdr_worker_t *w)
{
    return __atomic_load_n(&w->removed, __ATOMIC_ACQUIRE);
}
/* Healthy and not draining: may receive new requests. */
static inline int pdr_worker_serving(const pdr_worker_t *w)
{
    return pdr_worker_healthy(w) && pdr_worker_drain_state(w) == PDR_DRAIN_ACTIVE;
}
static inline int pdr_worker_inflight(const pdr_worker_t *w)
{
    return __atomic_load_n(&w->inflight, __ATOMIC_RELAXED);
}
/* A draining worker's last request ended: DRAINING -> DRAINED (any thread). */
void pdr_pool_note_idle(pdr_worker_t *w);
/* Counts a request to the worker starting (+1) or ending (-1). */
static inline void pdr_worker_track(pdr_worker_t *w, int delta)
{
    int now = __atomic_add_fetch(&w->inflight, delta, __ATOMIC_ACQ_REL);
    if (delta > 0)
        __atomic_add_fetch(&w->requests_total, 1, __ATOMIC_RELAXED);
    else if (now == 0 && pdr_worker_drain_state(w) == PDR_DRAIN_DRAINING)
        pdr_pool_note_idle(w);
}

/* The worker answered (a prefill's response, a decode's first bytes): evidence, at a pair's deadline, of
 * which side went silent. Any thread. */
static inline void pdr_worker_note_alive(pdr_worker_t *w, uint64_t now_ns)
{
    __atomic_store_n(&w->alive_ns, now_ns, __ATOMIC_RELAXED);
}
static inline uint64_t pdr_worker_alive_ns(const pdr_worker_t *w)
{
    return __atomic_load_n(&w->alive_ns, __ATOMIC_RELAXED);
}
/* Asks loop 0 to health-check the worker now, out of turn (a pair's deadline could not tell which side
 * is at fault). Any thread. */
static inline void pdr_worker_suspect(pdr_worker_t *w)
{
    __atomic_store_n(&w->probe_now, 1, __ATOMIC_RELAXED);
}

/* Identities (identity.h). Stores a read's result: id, or NULL with why it failed (the key goes to 0). */
void pdr_pool_set_identity(pdr_pool_t *p, pdr_worker_t *w, const pdr_identity_t *id, const char *error);
/* The worker's identity is void (healthy again, restarted): its key goes to 0 until it is read again. */
void pdr_pool_forget_identity(pdr_pool_t *p, pdr_worker_t *w, const char *why);
/* A copy of what is known: the last identity read (id->key 0: never), the current key (0: unknown) and
 * the last read's error (err may be NULL). */
uint64_t pdr_pool_identity(pdr_pool_t *p, const pdr_worker_t *w, pdr_identity_t *id, char *err, size_t cap);
/* The protocol of the worker's pool; -1 once its pool is gone. */
int pdr_pool_protocol_of(pdr_pool_t *p, const pdr_worker_t *w);
static inline uint64_t pdr_worker_compat_key(const pdr_worker_t *w)
{
    return __atomic_load_n(&w->ident.key, __ATOMIC_ACQUIRE);
}

/* Applies an active check's result under the pool lock; returns 1 when the healthy flag changed. */
int pdr_pool_check_result(pdr_pool_t *p, pdr_worker_t *w, int ok);

/* The static workers of c, its policies and health thresholds. */
int pdr_pool_init(pdr_pool_t *p, const pdr_config_t *c);
/* Drops the pool's references (workers still referenced elsewhere live on until released). */
void pdr_pool_dispose(pdr_pool_t *p);
/* Passive health over the pool (pool_outlier.c). Loop 0, every drain tick: logs and records the
 * ejections that ended. */
void pdr_outlier_tick(pdr_pool_t *p, uint64_t now_ms);
/* The Prometheus families of passive health (docs/metrics.md), through put (printf-like). */
typedef void (*pdr_outlier_put_cb)(void *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void pdr_outlier_metrics(pdr_pool_t *p, pdr_outlier_put_cb put, void *out);
/* The family of session affinity's picks (docs/metrics.md), through put. */
void pdr_affinity_metrics(pdr_pool_t *p, pdr_outlier_put_cb put, void *out);
/* Called for each worker the pool retires (removed, or replaced by a new incarnation), on the thread
 * that retires it, after the worker is marked removed. One hook for the process: a part above the pool
 * that keeps state per worker registers it (links.c, when it stores its first entry). */
typedef void (*pdr_pool_retire_cb)(const pdr_worker_t *w);
void pdr_pool_on_retire(pdr_pool_retire_cb cb);

/* ---- membership ---- */

/* A new worker of the role in the pool named `pool` (NULL: the first pool) from conf (copied).
 * labels_json: a JSON object text or NULL. Returns the worker with a reference for the caller
 * (pdr_worker_unref it), or NULL with *err = PDR_EEXIST (the URL is in the role already, in any pool),
 * PDR_ENOWORKER (no such pool) or PDR_ENOMEM. */
pdr_worker_t *pdr_pool_add(pdr_pool_t *p, const char *pool, pdr_role_t role, const pdr_worker_conf_t *conf,
                           int source, const char *name, const char *labels_json, int *err);
/* Takes w out of the pool now (requests in flight on it finish). Returns 0, or PDR_ENOWORKER when it
 * was not in the pool. */
int pdr_pool_remove(pdr_pool_t *p, pdr_worker_t *w, const char *why);
/* DELETE: force removes at once; otherwise drains (timeout_ms as for pdr_pool_drain) and the drain tick
 * removes it once DRAINED. Returns the drain state (PDR_DRAIN_*), -1 when removed at once, or
 * PDR_ENOWORKER when it was no longer in the pool. */
int pdr_pool_delete(pdr_pool_t *p, pdr_worker_t *w, int force, uint64_t timeout_ms);
/* Makes the workers of `source` and `role` in the pool named `pool` (NULL: the first pool) exactly `confs`
 * (matched by URL and bootstrap port): adds the new ones, removes the missing ones, keeps the rest with
 * their state. The source's workers of other pools are left alone (each pool's discovery reconciles its
 * own), and a URL that is in the role already, from another source or pool, is not added again. For a
 * pool that is not configured, nothing is added and the source's workers of it leave. names[i] may be
 * NULL. Returns how many were added plus removed. */
size_t pdr_pool_reconcile(pdr_pool_t *p, const char *pool, int source, pdr_role_t role,
                          const pdr_worker_conf_t *confs, const char *const *names, size_t n);
/* A reload: pools, policies and thresholds from c (the workers of a pool c no longer has are removed, from
 * every source), then the static workers reconciled with c's lists (a static worker that moved to another
 * pool is replaced by a new one there). */
size_t pdr_pool_apply_config(pdr_pool_t *p, const pdr_config_t *c);

/* ---- reading ---- */

/* The workers of a role (role -1: every role, prefill first, regular last), each with a reference: release
 * with pdr_pool_release. Returns the count; *out is NULL when 0 or out of memory (then returns 0). */
size_t pdr_pool_snapshot(pdr_pool_t *p, int role, pdr_worker_t ***out);
void pdr_pool_release(pdr_worker_t **ws, size_t n);
/* The worker with this id, with a reference; NULL if none. */
pdr_worker_t *pdr_pool_find(pdr_pool_t *p, const char *id, size_t len);
size_t pdr_pool_count(pdr_pool_t *p, pdr_role_t role);
size_t pdr_pool_count_state(pdr_pool_t *p, pdr_role_t role, int drain_state);
/* Workers of the role that may receive new requests (healthy and not draining). */
size_t pdr_pool_count_healthy(pdr_pool_t *p, pdr_role_t role);
/* The same, in the pool named `pool` only. */
size_t pdr_pool_count_healthy_in(pdr_pool_t *p, const char *pool, pdr_role_t role);
/* Of those, the workers that have passed a health check since they joined: readiness counts these, not
 * the optimistic health a worker starts with. */
size_t pdr_pool_count_confirmed_in(pdr_pool_t *p, const char *pool, pdr_role_t role);
/* The names of the pools (copies, in config order) into names[0..cap); returns the count. */
size_t pdr_pool_groups(pdr_pool_t *p, char (*names)[64], size_t cap);
/* Tests only: the i-th worker of the role, borrowed (no reference). */
pdr_worker_t *pdr_pool__at(pdr_pool_t *p, pdr_role_t role, size_t i);

/* Picks a serving worker of the role in the pool named `pool` (NULL: the first pool) by that pool's
 * policy, preferring workers whose uid is not in avoid (the ones that failed this request). Draining and
 * drained workers are never picked. Returns it with a reference (pdr_worker_unref), or NULL when none
 * serves (or there is no such pool). */
/* As pdr_pool_pick, with the request's routing text for cache_aware (NULL: that policy picks as
 * power_of_two does). */
pdr_worker_t *pdr_pool_pick_text(pdr_pool_t *p, const char *pool, pdr_role_t role, const uint64_t *avoid,
                                 size_t n_avoid, const char *text, size_t len);
/* A request's prompt as token ids (pdr_request_token_ids), for precise_prefix. */
typedef struct pdr_prompt_tokens {
    uint32_t *ids;
    size_t n;
    const char
        *model; /* the request's "model" (not owned; a LoRA adapter's KV blocks are its own), or NULL */
    size_t model_len;
} pdr_prompt_tokens_t;
/* What a pick reports beside the worker (conditional disaggregation, router/workers/disagg.h). */
typedef struct pdr_pick_info {
    int record; /* in: 0 = cache_aware leaves its tree unchanged (pdr_pool_record_pick once final) */
    const pdr_prompt_tokens_t *tok;  /* in: the prompt's token ids for precise_prefix; NULL: none */
    const pdr_pick_filter_t *filter; /* in: only the workers it lets through (identity.h); NULL: all */
    int matched_known;               /* out: 1 when the policy knows what the chosen worker has cached */
    size_t matched; /* out: the prefix of the prompt the chosen worker holds, from the pick's own lookup:
                       bytes of the routing text (cache_aware), or tokens when tokens is set */
    int tokens;     /* out: a policy that counts in tokens (engine KV events) sets it, with
                       prompt_tokens = the prompt's length in the same tokens */
    size_t prompt_tokens;
    int from_index; /* out: the match came from the KV event index (precise_prefix), not the prefix tree */
    /* in: when set, only the workers whose uid is in only[0..n_only) may be picked (a gateway's endpoint
     * subset): a strict filter, unlike avoid's preference; none of them serving: no pick. */
    const uint64_t *only;
    size_t n_only;
} pdr_pick_info_t;
/* As pdr_pool_pick_prompt, among the workers filter lets through only (identity.h; NULL: all). */
pdr_worker_t *pdr_pool_pick_filtered(pdr_pool_t *p, const char *pool, pdr_role_t role, const uint64_t *avoid,
                                     size_t n_avoid, const char *text, size_t len,
                                     const pdr_prompt_tokens_t *tok, const pdr_pick_filter_t *filter);
/* As pdr_pool_pick_text; info (NULL: record, report nothing) as above. */
pdr_worker_t *pdr_pool_pick_info(pdr_pool_t *p, const char *pool, pdr_role_t role, const uint64_t *avoid,
                                 size_t n_avoid, const char *text, size_t len, pdr_pick_info_t *info);
/* 1 when the policy of the role in the pool knows what its workers hold (a prefix tree or the KV event
 * index): its picks report a matched prefix. 0 otherwise (and for an unknown pool). */
int pdr_pool_role_knows_cache(pdr_pool_t *p, const char *pool, pdr_role_t role);
/* Records text under w in its pool's cache_aware tree for its role (nothing when that role has none). */
void pdr_pool_record_pick(pdr_pool_t *p, const pdr_worker_t *w, const char *text, size_t len);
/* 1 when every serving worker of the role in the pool has at least `inflight` requests in flight; 0 when
 * one has fewer, or none serves. */
int pdr_pool_saturated(pdr_pool_t *p, const char *pool, pdr_role_t role, int inflight);
/* As pdr_pool_pick_text, with the prompt's token ids too (tok NULL or empty: precise_prefix falls back to
 * the tree for every candidate). */
pdr_worker_t *pdr_pool_pick_prompt(pdr_pool_t *p, const char *pool, pdr_role_t role, const uint64_t *avoid,
                                   size_t n_avoid, const char *text, size_t len,
                                   const pdr_prompt_tokens_t *tok);
/* Loop 0, every cache_aware.eviction_interval_secs: trims every tree to cache_aware.max_tree_size per
 * worker (least recently used first). */
void pdr_pool_evict_trees(pdr_pool_t *p);
pdr_worker_t *pdr_pool_pick(pdr_pool_t *p, const char *pool, pdr_role_t role, const uint64_t *avoid,
                            size_t n_avoid);

/* ---- by address (pool_addr.c) ---- */

/* Whether w's URL has this host and port: IP literals compared as addresses (IPv6 without brackets),
 * names case-insensitively; a name never matches an address (nothing is resolved). */
int pdr_worker_addr_is(const pdr_worker_t *w, const char *host, size_t hlen, int port);
/* What pdr_pool_find_addr found of an address in a pool. */
enum {
    PDR_ADDR_NONE = 0, /* no worker of the role in the pool has it */
    PDR_ADDR_SERVING,  /* returned: healthy, not draining, no outlier ejection holds it */
    PDR_ADDR_DRAINING, /* none serves, and one is draining or drained */
    PDR_ADDR_DOWN,     /* none serves: unhealthy (health checks, a request that proved it unreachable) or
                          ejected */
};
/* The serving worker of the role in the pool named `pool` (NULL: the first pool) whose URL has this host
 * and port (the ranks of a data-parallel worker share it: the one with the fewest requests in flight), with
 * a reference; NULL when none serves. *state says which (PDR_ADDR_*). */
pdr_worker_t *pdr_pool_find_addr(pdr_pool_t *p, const char *pool, pdr_role_t role, const char *host,
                                 size_t hlen, int port, int *state);

/* ---- drain ---- */

/* ACTIVE -> DRAINING (DRAINED at once when idle); timeout_ms > 0 sets a deadline after which
 * pdr_pool_drain_tick forces DRAINED. A second drain of a draining worker only updates the deadline.
 * Returns the new state. */
int pdr_pool_drain(pdr_pool_t *p, pdr_worker_t *w, uint64_t timeout_ms, const char *why);
/* Back to ACTIVE (serving when healthy); cancels a pending DELETE. Returns the previous drain state. */
int pdr_pool_activate(pdr_pool_t *p, pdr_worker_t *w);
/* Periodic (loop 0): DRAINING workers that are idle or past their deadline become DRAINED; DRAINED
 * workers with a pending DELETE leave the pool. Returns how many changed. */
int pdr_pool_drain_tick(pdr_pool_t *p, uint64_t now_ms);
/* "healthy", "unhealthy" (by health checks), "ejected" (an outlier ejection is running, or unhealthy
 * after request failures until the checks pass again), "draining" or "drained". */
const char *pdr_worker_state_name(const pdr_worker_t *w);

/* ---- request outcomes ---- */

/* A request to this worker failed in a way that proves it unreachable: mark it unhealthy now. */
void pdr_pool_eject(pdr_pool_t *p, pdr_worker_t *w, const char *why);
/* A request failed with a server error: counts towards an outlier ejection (router/workers/outlier.h); with
 * outlier.enabled false, like a failed check. pdr_pool_eject's failures count towards it too. */
void pdr_pool_report_failure(pdr_pool_t *p, pdr_worker_t *w, const char *why);
/* A request succeeded: resets the count of consecutive failures. */
void pdr_pool_report_success(pdr_pool_t *p, pdr_worker_t *w);

const char *pdr_role_name(pdr_role_t r);
/* "prefill" / "decode" -> role; -1 otherwise. */
int pdr_role_parse(const char *s, size_t len);
/* Records a recent error about w (NULL: none) in p->events, with the worker's id. Any thread. */
void pdr_pool_record(pdr_pool_t *p, const pdr_worker_t *w, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
