/*
 * The recent-errors ring (events.h). Every function takes the ring's mutex; entries are fixed-size
 * slots, so adding never allocates. Any thread.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "events.h"

void pdr_events_init(pdr_events_t *ev)
{
    memset(ev, 0, sizeof(*ev));
    pthread_mutex_init(&ev->lock, NULL);
}

void pdr_events_dispose(pdr_events_t *ev)
{
    pthread_mutex_destroy(&ev->lock);
}

void pdr_events_add(pdr_events_t *ev, const char *worker, const char *fmt, ...)
{
    pdr_event_t e;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    e.time_ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
    snprintf(e.worker, sizeof(e.worker), "%s", worker != NULL ? worker : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.message, sizeof(e.message), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&ev->lock);
    ev->ring[ev->next] = e;
    ev->next = (ev->next + 1) % PDR_EVENTS_CAP;
    ev->total++;
    pthread_mutex_unlock(&ev->lock);
}

size_t pdr_events_snapshot(pdr_events_t *ev, pdr_event_t *out, size_t cap, uint64_t *total)
{
    pthread_mutex_lock(&ev->lock);
    size_t have = ev->total < PDR_EVENTS_CAP ? (size_t)ev->total : PDR_EVENTS_CAP;
    size_t n = have < cap ? have : cap;
    /* The newest entry is at next - 1; the n most recent start n slots before next. */
    for (size_t k = 0; k < n; k++)
        out[k] = ev->ring[(ev->next + PDR_EVENTS_CAP - n + k) % PDR_EVENTS_CAP];
    if (total != NULL)
        *total = ev->total;
    pthread_mutex_unlock(&ev->lock);
    return n;
}
