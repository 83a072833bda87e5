/*
 * The room table of the shim events (shim_events_rooms.c): a request registers the rooms it has in
 * flight, the events a batch records for them reach it on its own loop, and it takes what was reported
 * when it ends. shim_events.h includes it.
 */
#ifndef PDR_SHIM_EVENTS_ROOMS_H
#define PDR_SHIM_EVENTS_ROOMS_H

#include <stddef.h>
#include <stdint.h>
#include "shim_events_types.h"

struct pdr_router;
struct pdr_thread;

/* Any loop: the request in flight now owns room (its events are recorded until pdr_shim_room_take). */
void pdr_shim_room_open(struct pdr_router *r, uint64_t room);
/* Any loop: the same, for a request that wants the room's done and failed events: they are handed to
 * cb(owner, ...) on t's loop (t's wakeup handle, then pdr_shim_events_deliver), while the room is still open.
 * owner must take the room (pdr_shim_room_take) on t's loop before it is freed. */
void pdr_shim_room_own(struct pdr_router *r, uint64_t room, struct pdr_thread *t, void *owner,
                       pdr_shim_room_cb cb);
/* Loop t (its wakeup handle): hands the events queued for t's requests to them. */
void pdr_shim_events_deliver(struct pdr_thread *t);
/* Any loop: what the shims reported for room, as an access-log fragment `,"kv":{...}` written into out
 * (empty when nothing was reported), and the room forgotten. */
void pdr_shim_room_take(struct pdr_router *r, uint64_t room, char *out, size_t cap);

#endif
