/*
 * Recent errors: a small ring of the last PDR_EVENTS_CAP upstream failures, ejections, failed health
 * checks and drain timeouts, for the admin status page (GET /admin/v1/events). Any thread adds; the
 * ring is under its own mutex, which is fine because only failures are recorded (never the hot path).
 * Older entries are overwritten; `total` counts every entry ever added.
 */
#ifndef PDR_EVENTS_H
#define PDR_EVENTS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define PDR_EVENTS_CAP 32

typedef struct pdr_event {
    uint64_t time_ms; /* wall clock, ms since the Unix epoch */
    char worker[32];  /* "prefill-0"; empty when no worker is concerned */
    char message[200];
} pdr_event_t;

typedef struct pdr_events {
    pthread_mutex_t lock;
    pdr_event_t ring[PDR_EVENTS_CAP];
    size_t next;    /* slot the next entry goes to */
    uint64_t total; /* entries ever added */
} pdr_events_t;

void pdr_events_init(pdr_events_t *ev);
void pdr_events_dispose(pdr_events_t *ev);
/* Records one entry (truncated to fit); worker may be NULL. Any thread. */
void pdr_events_add(pdr_events_t *ev, const char *worker, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Copies up to cap of the most recent entries into out, oldest first; returns how many. *total (when
 * not NULL) gets the count of entries ever added. Any thread. */
size_t pdr_events_snapshot(pdr_events_t *ev, pdr_event_t *out, size_t cap, uint64_t *total);

#endif
