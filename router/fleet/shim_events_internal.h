/*
 * The shim events' insides shared by their files: shim_events.c (the state, verification, per-worker keys,
 * load reports and the handler), shim_events_rooms.c (rooms and their events on the way to their
 * requests) and shim_events_views.c (the admin views, metrics and decode admission by reported free KV).
 * Nothing outside these three files includes it.
 */
#ifndef PDR_SHIM_EVENTS_INTERNAL_H
#define PDR_SHIM_EVENTS_INTERNAL_H
#include <pthread.h>
#include <stdint.h>
#include <jansson.h>
#include "keyring.h"
#include "router.h"
#include "shim_events_types.h"

#define SE_MAX_BODY (1u << 20)     /* bytes of one batch */
#define SE_MAX_LINES 4096          /* lines of one batch */
#define SE_INSTANCES 4096          /* senders remembered for replay protection */
#define SE_ROOMS 8192              /* rooms in flight tracked (a power of two) */
#define SE_PROBE 64                /* slots probed per room lookup */
#define SE_RECENT 128              /* room events kept for GET /admin/v1/shim */
#define SE_MAX_REPORT_AGE_MS 10000 /* a load report older than this does not limit admission */
#define SE_INBOX 1024              /* done/failed events on their way to their requests' loops */
#define SE_MAX_FIRST_LINE 4096     /* bytes of a batch's first line, read before its signature is checked */
#define SE_LABEL "pdr-shim-events-key-v1\n"

enum { EV_ACCEPTED = 0, EV_STARTED, EV_PROGRESS, EV_DONE, EV_FAILED, EV_REFUSED, EV__COUNT };
typedef struct sender {
    uint64_t who; /* the worker identity's hash: an instance is one worker's (another cannot take its id) */
    uint64_t hi, lo, seq, last_ms;
} sender_t;

typedef struct room_rec {
    int state; /* 0 free, 1 used, 2 deleted */
    uint64_t room;
    uint32_t seen; /* bit per EV_* */
    uint64_t bytes, total, usec;
    char backend[12];
    int code;
    char reason[96];
    pdr_thread_t *t;     /* the loop of the request that owns the room (NULL: none to tell) */
    void *owner;         /* that request, touched only on t's loop */
    pdr_shim_room_cb cb; /* what its done and failed events are handed to */
} room_rec_t;

/* A done or failed event for a room whose request lives on loop t: queued here by loop 0, taken by t in
 * pdr_shim_events_deliver (woken by its async handle). */
typedef struct inbox_msg {
    pdr_thread_t *t;
    void *owner;
    pdr_shim_room_cb cb;
    uint64_t room, bytes, usec, wall_us;
    int failed, code;
    char backend[12], reason[96];
} inbox_msg_t;

typedef struct recent {
    uint64_t time_ms, room, bytes, usec;
    int ev, code, matched;
    char worker[32], backend[12], reason[96];
} recent_t;

#define ADD(x, n) __atomic_add_fetch(&(x), (n), __ATOMIC_RELAXED)
#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)

/* The router's one shim events state (the threads that touch it: shim_events.c). */
struct pdr__shim_state {
    pthread_mutex_t lock;
    pdr_keyring_t kr;
    int on;
    sender_t senders[SE_INSTANCES];
    room_rec_t rooms[SE_ROOMS];
    recent_t recent[SE_RECENT];
    uint64_t recent_n;
    inbox_msg_t inbox[SE_INBOX];
    size_t inbox_n;
    uint64_t refused[PDR_SE__COUNT]; /* atomic */
    uint64_t batches, events[EV__COUNT], loads, unmatched, unknown_worker, shim_dropped, untracked,
        inbox_full;        /* atomic */
    uint64_t kv_failed[2]; /* atomic */
    uint64_t admission[4]; /* atomic */
};
extern struct pdr__shim_state pdr__shim;

/* shim_events_rooms.c */
extern const char *const pdr__shim_ev_names[EV__COUNT];

uint64_t pdr__shim_jint(const json_t *o, const char *k);
int pdr__shim_record_room(const json_t *o, const char *worker_id);

#endif
