/*
 * Protocol pdshim: the router signs one ticket per room of a PD attempt (common/ticket.h; the format in
 * docs/internals/tickets.md) with the first key of the config snapshot's ticket key ring. Any loop thread.
 */
#ifndef PDR_ROUTER_TICKETS_H
#define PDR_ROUTER_TICKETS_H

#include <stddef.h>
#include <stdint.h>
#include "config.h"
#include "pool.h"

/* Signs the tickets of rooms[0..n) for the pair (pw, dw): each names the room, the prefill's bootstrap
 * host and port, the decode's identity ("host:port" of its URL, IPv6 in brackets) and expires
 * c->ticket.ttl_ms from now. Returns a malloc'd array of n strings in one block (free() it), or NULL with
 * the reason in err: no keys, a prefill without a bootstrap port, a host too long for a ticket, or out of
 * memory (*oom set). */
char **pdr_tickets_sign(const pdr_config_t *c, const pdr_worker_t *pw, const pdr_worker_t *dw,
                        const uint64_t *rooms, size_t n, int *oom, char *err, size_t errlen);

/* The decode identity a ticket names for worker conf w: "host:port", IPv6 in brackets. Returns the length,
 * or 0 when it does not fit cap. */
size_t pdr_tickets_peer_id(const pdr_worker_conf_t *w, char *out, size_t cap);

#endif
