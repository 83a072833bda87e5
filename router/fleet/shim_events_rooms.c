/*
 * Rooms of the shim events (see shim_events.c): the table of rooms in flight, opened and owned by their
 * requests, the room events a batch records, and done and failed events handed to their requests' loops.
 */
#include "shim_events_rooms.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "err.h"
#include "keyring.h"
#include "kvdeadline.h"
#include "links.h"
#include "router.h"
#include "shim_events_internal.h"
#include "util.h"

/* ---- rooms ---- */

const char *const pdr__shim_ev_names[EV__COUNT] = {"accepted", "started", "progress",
                                                   "done",     "failed",  "refused"};

static size_t room_slot(uint64_t room)
{
    return (size_t)((room * 0x9E3779B97F4A7C15ull) >> 51) & (SE_ROOMS - 1);
}

/* Under pdr__shim.lock: the record of room, or NULL. */
static room_rec_t *room_find(uint64_t room)
{
    size_t i = room_slot(room);
    for (size_t k = 0; k < SE_PROBE; k++, i = (i + 1) & (SE_ROOMS - 1)) {
        room_rec_t *e = &pdr__shim.rooms[i];
        if (e->state == 0)
            return NULL;
        if (e->state == 1 && e->room == room)
            return e;
    }
    return NULL;
}

void pdr_shim_room_open(pdr_router_t *r, uint64_t room)
{
    pdr_shim_room_own(r, room, NULL, NULL, NULL);
}

void pdr_shim_room_own(pdr_router_t *r, uint64_t room, pdr_thread_t *t, void *owner, pdr_shim_room_cb cb)
{
    (void)r;
    if (!pdr__shim.on)
        return;
    pthread_mutex_lock(&pdr__shim.lock);
    room_rec_t *e = room_find(room);
    if (e == NULL) {
        size_t i = room_slot(room);
        for (size_t k = 0; k < SE_PROBE; k++, i = (i + 1) & (SE_ROOMS - 1))
            if (pdr__shim.rooms[i].state != 1) {
                e = &pdr__shim.rooms[i];
                break;
            }
    }
    if (e != NULL) {
        memset(e, 0, sizeof(*e));
        e->state = 1;
        e->room = room;
        e->t = t;
        e->owner = owner;
        e->cb = cb;
    } else {
        ADD(pdr__shim.untracked, 1);
    }
    pthread_mutex_unlock(&pdr__shim.lock);
}

void pdr_shim_room_take(pdr_router_t *r, uint64_t room, char *out, size_t cap)
{
    (void)r;
    out[0] = '\0';
    if (!pdr__shim.on)
        return;
    room_rec_t rec;
    pthread_mutex_lock(&pdr__shim.lock);
    room_rec_t *e = room_find(room);
    if (e != NULL) {
        rec = *e;
        e->state = 2;
    }
    pthread_mutex_unlock(&pdr__shim.lock);
    if (e == NULL || rec.seen == 0)
        return;
    char evs[80] = "";
    size_t n = 0;
    for (int k = 0; k < EV__COUNT; k++)
        if (rec.seen & (1u << k)) {
            int w = snprintf(evs + n, sizeof(evs) - n, "%s\"%s\"", n ? "," : "", pdr__shim_ev_names[k]);
            if (w > 0 && (size_t)w < sizeof(evs) - n)
                n += (size_t)w;
        }
    /* backend and reason come from shims: only [A-Za-z0-9_ .:-] is kept (see pdr__shim_record_room). */
    snprintf(out, cap,
             ",\"kv_events\":{\"events\":[%s],\"bytes\":%" PRIu64 ",\"total\":%" PRIu64 ",\"usec\":%" PRIu64
             ",\"backend\":%s%s%s,\"failed\":%s%s%s}",
             evs, rec.bytes, rec.total, rec.usec, rec.backend[0] ? "\"" : "",
             rec.backend[0] ? rec.backend : "null", rec.backend[0] ? "\"" : "",
             rec.seen & (1u << EV_FAILED) ? "\"" : "", rec.seen & (1u << EV_FAILED) ? rec.reason : "null",
             rec.seen & (1u << EV_FAILED) ? "\"" : "");
}

static void copy_safe(char *dst, size_t cap, const char *src)
{
    size_t n = 0;
    for (; src != NULL && *src && n + 1 < cap; src++) {
        char ch = *src;
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                 ch == '_' || ch == ' ' || ch == '.' || ch == ':' || ch == '-';
        dst[n++] = ok ? ch : '_';
    }
    dst[n] = '\0';
}

uint64_t pdr__shim_jint(const json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_integer(v) && json_integer_value(v) >= 0 ? (uint64_t)json_integer_value(v) : 0;
}

/* A room line: 0, or -1 when malformed. */
int pdr__shim_record_room(const json_t *o, const char *worker_id)
{
    json_t *jr = json_object_get(o, "room");
    const char *ev = json_string_value(json_object_get(o, "event"));
    if (!json_is_integer(jr) || json_integer_value(jr) < 0 || ev == NULL)
        return -1;
    int k = 0;
    while (k < EV__COUNT && strcmp(pdr__shim_ev_names[k], ev) != 0)
        k++;
    if (k == EV__COUNT)
        return -1;
    uint64_t room = (uint64_t)json_integer_value(jr);
    const char *role = json_string_value(json_object_get(o, "role"));
    ADD(pdr__shim.events[k], 1);
    if (k == EV_FAILED) /* reacting is the KV failure path's; until then, counted by the reporting side */
        ADD(pdr__shim.kv_failed[role != NULL && strcmp(role, "decode") == 0], 1);
    json_t *code = json_object_get(o, "code");
    recent_t rc = {.time_ms = pdr_wall_us() / 1000, .room = room, .ev = k};
    rc.bytes = pdr__shim_jint(o, "bytes");
    rc.usec = pdr__shim_jint(o, "usec");
    rc.code = json_is_integer(code) ? (int)json_integer_value(code) : 0;
    copy_safe(rc.backend, sizeof(rc.backend), json_string_value(json_object_get(o, "backend")));
    copy_safe(rc.reason, sizeof(rc.reason), json_string_value(json_object_get(o, "reason")));
    copy_safe(rc.worker, sizeof(rc.worker), worker_id);
    pdr_thread_t *wake = NULL;
    pthread_mutex_lock(&pdr__shim.lock);
    room_rec_t *e = room_find(room);
    rc.matched = e != NULL;
    if (e != NULL) {
        e->seen |= 1u << k;
        if (rc.bytes > e->bytes)
            e->bytes = rc.bytes;
        uint64_t total = pdr__shim_jint(o, "total");
        if (total > e->total)
            e->total = total;
        if (rc.usec > e->usec)
            e->usec = rc.usec;
        if (rc.backend[0])
            memcpy(e->backend, rc.backend, sizeof(e->backend));
        if (k == EV_FAILED || k == EV_REFUSED) {
            e->code = rc.code;
            snprintf(e->reason, sizeof(e->reason), "%s", rc.reason[0] ? rc.reason : ev);
        }
        if (e->owner != NULL && e->cb != NULL && (k == EV_DONE || k == EV_FAILED)) {
            wake = e->t;
            if (pdr__shim.inbox_n < SE_INBOX) {
                inbox_msg_t *m = &pdr__shim.inbox[pdr__shim.inbox_n++];
                memset(m, 0, sizeof(*m));
                m->t = e->t;
                m->owner = e->owner;
                m->cb = e->cb;
                m->room = room;
                m->bytes = rc.bytes;
                m->usec = rc.usec;
                m->wall_us = pdr_wall_us();
                m->failed = k == EV_FAILED;
                m->code = rc.code;
                memcpy(m->backend, rc.backend, sizeof(m->backend));
                snprintf(m->reason, sizeof(m->reason), "%s", rc.reason[0] ? rc.reason : "shim_failed");
            } else {
                wake = NULL;
                ADD(pdr__shim.inbox_full, 1); /* the request falls back on its KV deadline */
            }
        }
    }
    pdr__shim.recent[pdr__shim.recent_n++ % SE_RECENT] = rc;
    pthread_mutex_unlock(&pdr__shim.lock);
    if (e == NULL)
        ADD(pdr__shim.unmatched, 1);
    if (wake != NULL)
        uv_async_send(&wake->wakeup);
    return 0;
}

void pdr_shim_events_deliver(pdr_thread_t *t)
{
    for (;;) {
        inbox_msg_t mine[32];
        size_t n = 0;
        pthread_mutex_lock(&pdr__shim.lock);
        for (size_t i = 0; i < pdr__shim.inbox_n && n < 32;) {
            if (pdr__shim.inbox[i].t == t) {
                mine[n++] = pdr__shim.inbox[i];
                pdr__shim.inbox[i] = pdr__shim.inbox[--pdr__shim.inbox_n];
            } else {
                i++;
            }
        }
        pthread_mutex_unlock(&pdr__shim.lock);
        if (n == 0)
            return;
        for (size_t i = 0; i < n; i++) {
            /* The request is alive while it owns the room: it takes its rooms on this loop before it
             * ends, so a room still owned here means the pointer is good. */
            pthread_mutex_lock(&pdr__shim.lock);
            room_rec_t *e = room_find(mine[i].room);
            int alive = e != NULL && e->owner == mine[i].owner && e->cb == mine[i].cb && e->t == t;
            pthread_mutex_unlock(&pdr__shim.lock);
            if (alive)
                mine[i].cb(mine[i].owner, mine[i].room, mine[i].failed, mine[i].code, mine[i].bytes,
                           mine[i].usec, mine[i].wall_us, mine[i].backend, mine[i].reason);
        }
    }
}
