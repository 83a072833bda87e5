/* The shim's reporter to the router (events.c; docs/internals/shim-events.md). Internal to libpdshim. */
#ifndef PDSHIM_REPORTER_H
#define PDSHIM_REPORTER_H

#include <stdint.h>
#include "pdshim.h"

typedef struct pdr_shim_ev pdr_shim_ev_t;

/* Starts the reporter thread for opts (events_url set). NULL with *err: PDR_EINVAL (a bad URL or no
 * worker identity), PDR_ECONFIG (the key file), PDR_ENOMEM. */
pdr_shim_ev_t *pdr__shim_ev_create(const pdshim_opts_t *opts, int *err);
/* Sends what is queued (one attempt), stops and joins the thread. NULL is a no-op. */
void pdr__shim_ev_destroy(pdr_shim_ev_t *e);
/* Any thread, never blocks on the network: 0, or PDR_EAGAIN when the queue is full (dropped, counted). */
int pdr__shim_ev_room(pdr_shim_ev_t *e, uint64_t room, int event, const char *role, uint64_t bytes,
                      uint64_t total, uint64_t usec, const char *backend, int status, const char *reason);
void pdr__shim_ev_load(pdr_shim_ev_t *e, const pdshim_load_t *load);
/* Rooms in progress on the shim (reported with the load). */
void pdr__shim_ev_active(pdr_shim_ev_t *e, int delta);
void pdr__shim_ev_instance(const pdr_shim_ev_t *e, uint8_t out[16]);
/* While rooms are in progress (pdr__shim_ev_active above 0), the reporter thread calls fn(arg) every
 * flush interval, with no lock of the reporter held: the shim samples its rooms' progress there and
 * queues started / progress events. fn NULL stops it; once this returns, fn is not running and will not
 * run again (a sample in progress is waited for). */
void pdr__shim_ev_set_sampler(pdr_shim_ev_t *e, void (*fn)(void *arg), void *arg);
void pdr__shim_ev_stats(const pdr_shim_ev_t *e, uint64_t *sent, uint64_t *failed, uint64_t *dropped);

#endif
