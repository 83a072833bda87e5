/*
 * Ticket signing for protocol pdshim (tickets.h). Pure apart from the clock and the codec's per-thread
 * HMAC context; any loop thread. One HMAC per room (both legs carry the same ticket).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keyring.h"
#include "ticket.h"
#include "tickets.h"

size_t pdr_tickets_peer_id(const pdr_worker_conf_t *w, char *out, size_t cap)
{
    int n = snprintf(out, cap, w->is_ipv6 ? "[%s]:%d" : "%s:%d", w->host, w->port);
    return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

char **pdr_tickets_sign(const pdr_config_t *c, const pdr_worker_t *pw, const pdr_worker_t *dw,
                        const uint64_t *rooms, size_t n, int *oom, char *err, size_t errlen)
{
    *oom = 0;
    if (c->ticket.keys == NULL || c->ticket.keys->n == 0) {
        snprintf(err, errlen, "protocol pdshim without ticket keys");
        return NULL;
    }
    if (pw->conf.bootstrap_port < 1) {
        snprintf(err, errlen, "prefill %s has no bootstrap port; protocol pdshim needs one", pw->target);
        return NULL;
    }
    pdr_ticket_t t;
    memset(&t, 0, sizeof(t));
    if (strlen(pw->conf.host) > PDR_TICKET_HOST_MAX ||
        pdr_tickets_peer_id(&dw->conf, t.peer, sizeof(t.peer)) == 0) {
        snprintf(err, errlen, "a worker host is too long for a ticket (%d bytes at most)",
                 PDR_TICKET_HOST_MAX);
        return NULL;
    }
    snprintf(t.host, sizeof(t.host), "%s", pw->conf.host);
    t.port = pw->conf.bootstrap_port;
    t.expires_ms = pdr_ticket_now_ms() + (uint64_t)c->ticket.ttl_ms;
    char **out = malloc(n * (sizeof(char *) + PDR_TICKET_MAX + 1));
    if (out == NULL) {
        *oom = 1;
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    char *text = (char *)(out + n);
    const pdr_key_t *key = &c->ticket.keys->keys[0];
    for (size_t i = 0; i < n; i++) {
        out[i] = text + i * (PDR_TICKET_MAX + 1);
        t.room = rooms[i];
        if (pdr_ticket_sign(key, &t, out[i], PDR_TICKET_MAX + 1) == 0) {
            free(out);
            snprintf(err, errlen, "a worker host cannot be named in a ticket");
            return NULL;
        }
    }
    return out;
}
