/* The shim's state, shared by shim.c (transfers) and shim_ticket.c (tickets and their replay caches). */
#ifndef PDSHIM_INTERNAL_H
#define PDSHIM_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include "dlist.h"
#include "keyring.h"
#include "pdshim.h"
#include "transport.h"

/* The rooms of the tickets one role accepted, each until its expiry (plus the skew): open addressing,
 * linear probing, a slot whose entry expired reused. Bounded at init; never grows. */
typedef struct pdshim__replay {
    struct pdshim__seen {
        uint64_t room;     /* the ticket's room (the caller's name for it) */
        uint64_t xroom;    /* the room's name on the transport, derived from the ticket's MAC */
        uint64_t until_ms; /* 0: never used */
    } * slots;
    size_t cap;  /* a power of two, at least twice max */
    size_t max;  /* live entries allowed */
    size_t used; /* slots ever filled since the last rebuild */
} pdshim__replay_t;

struct pdr_shim_ev;

struct pdshim {
    pdr_xfer_engine_t *eng;
    struct pdr_shim_ev *ev; /* the reporter to the router (events.c); NULL without opts.events_url */
    uint8_t inst[16];       /* the instance id */
    /* Tickets: read-only after create, except the replay caches under lock. */
    pdr_keyring_t *keys; /* NULL: no key files */
    uint32_t skew_ms;
    uint32_t default_ms; /* the operations' default timeout (opts.default_timeout_ms or 30000) */
    char identity[96];   /* "" when not checked */
    pthread_mutex_t lock;
    pdshim__replay_t seen[2]; /* [0] offers, [1] fetches */
    /* With a reporter: the offers and fetches in progress (shim.c's struct ex_call, oldest first, under
     * act_lock), whose progress the reporter thread samples into started / progress events. */
    pthread_mutex_t act_lock;
    pdr_dqueue_t active;
    uint64_t act_gen; /* under act_lock: the last member's number (members join in increasing order) */
};

/* Sets up the ticket part of shim from opts. 0, or PDR_EINVAL / PDR_ENOMEM / a key file's error. */
int pdshim__tickets_init(pdshim_t *shim, const pdshim_opts_t *opts);
void pdshim__tickets_free(pdshim_t *shim);
/* The transport room of a ticket this shim accepted under room (pdshim_cancel by the caller's room), or 0
 * when none is live. role: 0 offers, 1 fetches. */
uint64_t pdshim__ticket_xroom(pdshim_t *shim, int role, uint64_t room);

/* shim.c: posts an offer (host NULL) or a fetch of transport room `room`, reported to the router as
 * `rroom` (accepted now, done or failed with the callback); cb or done is called. 0 or a PDR_E* code. */
int pdshim__post(pdshim_t *shim, const char *host, int port, uint64_t room, uint64_t rroom,
                 const pdshim_seg_t *segs, size_t nseg, uint32_t timeout_ms, pdshim_result_cb cb,
                 pdshim_done_cb done, void *arg);
/* shim.c: opens a streamed offer (pdshim_offer_open) of transport room `room`, reported as `rroom`. */
int pdshim__open(pdshim_t *shim, uint64_t room, uint64_t rroom, uint64_t total_bytes, uint32_t timeout_ms,
                 pdshim_result_cb cb, void *arg);
/* Reports a ticket the shim refused (role: 0 offers, 1 fetches; room 0 when the ticket names none). */
void pdshim__report_refused(pdshim_t *shim, uint64_t room, int role, int status);

#endif
