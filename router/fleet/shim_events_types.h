/*
 * The shim events' types that every one of their files needs (shim_events.h includes it): the refusal
 * causes of a batch, its bounds, and the callback a request hands its room to. Nothing here is defined in
 * a .c file; shim_events_internal.h includes it, below every part.
 */
#ifndef PDR_SHIM_EVENTS_TYPES_H
#define PDR_SHIM_EVENTS_TYPES_H

#include <stdint.h>

#define PDR_SHIM_MAX_BATCH (1u << 20) /* bytes of one batch */

/* Refusal causes of a batch. Checked in this order: unsigned, then the first line (malformed when it names
 * no worker), wrong_worker / shared_key, bad_signature, stale, replayed / too_many_instances / too_big
 * (the replay table), then the lines (malformed). */
enum {
    PDR_SE_UNSIGNED = 0,  /* no or malformed signature header */
    PDR_SE_WRONG_WORKER,  /* the key id is not the one of the key derived for the worker the batch names */
    PDR_SE_BAD_SIGNATURE, /* the worker's key, but the MAC does not match */
    PDR_SE_STALE,         /* timestamp further than shim_events.max_skew_ms from the router's clock */
    PDR_SE_REPLAYED,
    PDR_SE_MALFORMED, /* not the JSON lines of the format (the first one naming no worker included) */
    PDR_SE_TOO_BIG,
    PDR_SE_SHARED_KEY,    /* signed with the master key itself: a shim not given its own derived key */
    PDR_SE_TOO_MANY_INST, /* the worker already has PDR_SHIM_MAX_INSTANCES live instances */
    PDR_SE__COUNT
};

/* Live instances (batches within max_skew_ms) one worker may have in the replay table: a restarting worker
 * needs a few; a compromised one cannot fill the table and lock the other shims out. */
#define PDR_SHIM_MAX_INSTANCES 8

/* A room's done (failed 0) or failed event for the request that owns it, on that request's loop: the
 * shim's code, the KV's bytes, the transfer's time in usec ending at wall_us (the event's arrival, wall
 * clock), the backend's name ("" when none was said) and the shim's reason. */
typedef void (*pdr_shim_room_cb)(void *owner, uint64_t room, int failed, int code, uint64_t bytes,
                                 uint64_t usec, uint64_t wall_us, const char *backend, const char *reason);

#endif
