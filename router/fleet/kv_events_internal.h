/*
 * What the KV event subscriber's files share (kv_events.c, the subscriber; kv_replay.c, a gap's replay):
 * one kv_sub_t per worker that names a publisher, and the subscriber's state. Loop 0 only, but for the
 * counters marked atomic (read by the metrics on any loop).
 */
#ifndef PDR_KV_EVENTS_INTERNAL_H
#define PDR_KV_EVENTS_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "dlist.h"

#define KV_LOG_EVERY_MS 5000
#define KV_TURN_MESSAGES 64
#define KV_TURN_BYTES (64 * 1024)

/* How a replay ended (pdr_kv_events_replays_total's outcome label). */
typedef enum kv_replay_outcome {
    KV_REPLAY_REPAIRED,    /* the replay covered the gap: the worker stayed in sync */
    KV_REPLAY_TOO_OLD,     /* the publisher's buffer no longer had the first number needed */
    KV_REPLAY_TIMEOUT,     /* no end within kv_events.replay_timeout_ms */
    KV_REPLAY_FAILED,      /* a hole or a malformed frame in the replay, the hold full, a socket error */
    KV_REPLAY_UNAVAILABLE, /* a gap of a worker without a replay endpoint */
    KV_REPLAY_OUTCOMES,
} kv_replay_outcome_t;

struct kv_replay;

typedef struct kv_sub {
    pdr_dlink_t link; /* on ke->subs */
    struct pdr_kv_events *ke;
    uint64_t uid;
    char *url, *endpoint;
    char *replay_endpoint; /* the worker's replay socket (its rank's port), or NULL */
    void *sock;
    void *mon; /* the PAIR end of the socket's monitor: its disconnections */
    uv_poll_t poll, mon_poll;
    int handles; /* handles not closed yet (the sub is freed with the last) */
    int mark;
    int pending; /* messages left for the next loop turn (the budget ran out) */
    /* The replay running for a gap, or NULL (stored atomically: the admin API reads it). */
    struct kv_replay *replay;
    uint64_t applied, malformed;          /* atomic (read by the metrics) */
    uint64_t unknown_events;              /* atomic */
    uint64_t yields;                      /* atomic: turns that ended with messages left */
    uint64_t disconnects;                 /* atomic: connections to the publisher that ended */
    uint64_t replays[KV_REPLAY_OUTCOMES]; /* atomic: replays by outcome */
    uint64_t replayed;                    /* atomic: batches applied from replays */
    uint64_t epoch;                       /* the worker's load.epoch (its incarnation) last seen */
    /* After a replay that went past the last live message held: the live numbers [dup_next, dup_end) still
     * on their way are the replay's batches again (dup_end 0: none expected). */
    uint64_t dup_next, dup_end;
    uint64_t incarnations; /* atomic: new incarnations that dropped its blocks */
    uint64_t log_ms;       /* the last warning about this publisher */
    uint64_t disc_log_ms;  /* the last line about a disconnection */
} kv_sub_t;

#define SUB_OF(l) PDR_DLINK_ITEM(l, kv_sub_t, link)

struct pdr_kv_events {
    struct pdr_router *r;
    void *zctx;
    struct pdr_kvindex *ix;
    pthread_mutex_t lock; /* subs (the list; loop 0 changes it, the metrics read it) */
    pdr_dlink_t *subs;
    uv_timer_t timer;
    uv_idle_t idle; /* runs while a publisher has messages left past its budget */
    int timer_live;
    uint64_t unhashed_seen;   /* the index's unhashed lookups already counted as fall-backs */
    uint64_t cold_seen;       /* the same for its cold candidates */
    struct pdr_kv_snap *snap; /* kv_events.snapshot_path / snapshot_from (kv_snapshot.c); NULL: none */
};

#endif
