/*
 * libpdshim's tickets (pdshim.h, "Tickets"; the format in docs/internals/tickets.md): verify the router's
 * signed ticket, check the peer, remember it against replay, then run the plain offer or fetch with the
 * room, the prefill address and a deadline taken from the ticket. Any thread may call in: the key ring
 * is read-only after create, the replay caches are under the shim's lock (a handful of loads per call).
 *
 * Binding the fetch to the ticket: on the transport the room is not named by its bootstrap room (which
 * the request body, logs and metrics show) but by 64 bits of the ticket's MAC, which only holders of the
 * ticket know. A prefill that offered by ticket serves the room only to a fetch that names that value:
 * a peer that knows the room number but not the ticket finds nothing to fetch. Callbacks and
 * pdshim_cancel keep using the bootstrap room.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "shim_internal.h"
#include "ticket.h"

#define DEFAULT_SKEW_MS 2000
#define DEFAULT_REPLAY_MAX 65536
#define DEFAULT_TIMEOUT_MS 30000 /* the transport's default (transport.h) */

static int replay_init(pdshim__replay_t *r, size_t max)
{
    size_t cap = 16;
    while (cap < 2 * max)
        cap *= 2;
    r->slots = calloc(cap, sizeof(*r->slots));
    if (r->slots == NULL)
        return PDR_ENOMEM;
    r->cap = cap;
    r->max = max;
    r->used = 0;
    return 0;
}

static size_t slot_of(uint64_t room, size_t cap)
{
    uint64_t h = room * 0x9e3779b97f4a7c15ull; /* Fibonacci hashing; rooms are uniform anyway */
    return (size_t)(h >> 17) & (cap - 1);
}

/* Rehashes the live entries in place of the table (when too many slots were ever filled, probe chains
 * would grow long). Returns the number of live entries. */
static size_t replay_rebuild(pdshim__replay_t *r, uint64_t now_ms)
{
    struct pdshim__seen *old = r->slots;
    struct pdshim__seen *fresh = calloc(r->cap, sizeof(*fresh));
    if (fresh == NULL)
        return r->max; /* keep the old table: correct, only slower; report it as full */
    size_t live = 0;
    for (size_t i = 0; i < r->cap; i++) {
        if (old[i].until_ms == 0 || old[i].until_ms < now_ms)
            continue;
        size_t j = slot_of(old[i].room, r->cap);
        while (fresh[j].until_ms != 0)
            j = (j + 1) & (r->cap - 1);
        fresh[j] = old[i];
        live++;
    }
    free(old);
    r->slots = fresh;
    r->used = live;
    return live;
}

/* The live entry of room, or NULL. */
static const struct pdshim__seen *replay_find(const pdshim__replay_t *r, uint64_t room, uint64_t now_ms)
{
    size_t i = slot_of(room, r->cap);
    for (size_t probes = 0; r->slots != NULL && probes < r->cap; probes++, i = (i + 1) & (r->cap - 1)) {
        const struct pdshim__seen *s = &r->slots[i];
        if (s->until_ms == 0)
            return NULL;
        if (s->until_ms >= now_ms && s->room == room)
            return s;
    }
    return NULL;
}

/* Records room until until_ms. 0, PDR_EREPLAYED (live already) or PDR_ETOOBIG (max live entries). */
static int replay_add(pdshim__replay_t *r, uint64_t room, uint64_t xroom, uint64_t until_ms, uint64_t now_ms)
{
    size_t free_slot = r->cap, i = slot_of(room, r->cap);
    for (size_t probes = 0; probes < r->cap; probes++, i = (i + 1) & (r->cap - 1)) {
        struct pdshim__seen *s = &r->slots[i];
        if (s->until_ms == 0) {
            if (free_slot == r->cap)
                free_slot = i;
            break;
        }
        if (s->until_ms < now_ms) {
            if (free_slot == r->cap)
                free_slot = i;
            continue;
        }
        if (s->room == room)
            return PDR_EREPLAYED;
    }
    if (free_slot == r->cap || r->slots[free_slot].until_ms == 0) {
        /* A never-used slot is about to be filled: keep at most max of those, then rebuild. */
        if (r->used >= r->max) {
            if (replay_rebuild(r, now_ms) >= r->max)
                return PDR_ETOOBIG;
            return replay_add(r, room, xroom, until_ms, now_ms);
        }
        r->used++;
    }
    r->slots[free_slot].room = room;
    r->slots[free_slot].xroom = xroom;
    r->slots[free_slot].until_ms = until_ms;
    return 0;
}

uint64_t pdshim__ticket_xroom(pdshim_t *shim, int role, uint64_t room)
{
    if (shim->keys == NULL)
        return 0;
    pthread_mutex_lock(&shim->lock);
    const struct pdshim__seen *s = replay_find(&shim->seen[role], room, pdr_ticket_now_ms());
    uint64_t x = s != NULL ? s->xroom : 0;
    pthread_mutex_unlock(&shim->lock);
    return x;
}

/* The room's name on the transport: the first 8 bytes of the ticket's MAC (never 0). */
static uint64_t xfer_room(const pdr_ticket_t *t)
{
    uint64_t x = 0;
    for (int i = 0; i < 8; i++)
        x = x << 8 | t->mac[i];
    return x != 0 ? x : 1;
}

/* The result callback of a ticket operation: reports the ticket's room, not the transport's name. */
struct tk_call {
    pdshim_result_cb cb;
    void *arg;
    uint64_t room;
};

static void tk_done(void *arg, const pdshim_result_t *res)
{
    struct tk_call c = *(struct tk_call *)arg;
    free(arg);
    pdshim_result_t r = *res;
    r.room = c.room;
    c.cb(c.arg, &r);
}

int pdshim__tickets_init(pdshim_t *shim, const pdshim_opts_t *opts)
{
    pthread_mutex_init(&shim->lock, NULL);
    shim->skew_ms = DEFAULT_SKEW_MS;
    shim->default_ms = DEFAULT_TIMEOUT_MS;
    size_t max = DEFAULT_REPLAY_MAX;
    if (opts != NULL) {
        if (opts->ticket_max_skew_ms != 0)
            shim->skew_ms = opts->ticket_max_skew_ms;
        if (opts->default_timeout_ms != 0)
            shim->default_ms = opts->default_timeout_ms;
        if (opts->ticket_replay_max != 0)
            max = opts->ticket_replay_max;
        if (opts->ticket_identity != NULL) {
            size_t n = strlen(opts->ticket_identity);
            if (n == 0 || n > PDR_TICKET_PEER_MAX)
                return PDR_EINVAL;
            memcpy(shim->identity, opts->ticket_identity, n + 1);
        }
    }
    if (max > ((size_t)1 << 24))
        return PDR_EINVAL;
    int rc = 0;
    if (opts != NULL && opts->n_ticket_key_files > 0) {
        if (opts->ticket_key_files == NULL || opts->n_ticket_key_files > PDR_KEYRING_MAX)
            return PDR_EINVAL;
        shim->keys = malloc(sizeof(*shim->keys));
        if (shim->keys == NULL)
            return PDR_ENOMEM;
        char msg[512];
        rc = pdr_keyring_load(shim->keys, opts->ticket_key_files, opts->n_ticket_key_files, msg, sizeof(msg));
        if (rc != 0) {
            fprintf(stderr, "pdshim: %s\n", msg);
            free(shim->keys);
            shim->keys = NULL;
            return rc;
        }
        if ((rc = replay_init(&shim->seen[0], max)) != 0 || (rc = replay_init(&shim->seen[1], max)) != 0) {
            pdshim__tickets_free(shim);
            return rc;
        }
    }
    return 0;
}

void pdshim__tickets_free(pdshim_t *shim)
{
    if (shim->keys != NULL) {
        pdr_keyring_wipe(shim->keys);
        free(shim->keys);
        shim->keys = NULL;
    }
    for (int i = 0; i < 2; i++) {
        free(shim->seen[i].slots);
        shim->seen[i].slots = NULL;
    }
    pthread_mutex_destroy(&shim->lock);
}

/* Verification up to expiry (pdr_ticket_verify), for every call here. */
static int verify(pdshim_t *shim, const char *ticket, pdr_ticket_t *t, uint64_t *now_ms)
{
    if (shim == NULL || ticket == NULL)
        return PDR_EINVAL;
    size_t len = strnlen(ticket, PDR_TICKET_MAX + 1);
    *now_ms = pdr_ticket_now_ms();
    /* Without key files nothing verifies: every ticket is PDR_EFORGED (or PDR_EBADTICKET). */
    return pdr_ticket_verify(shim->keys, ticket, len, *now_ms, shim->skew_ms, t);
}

/* The rest of the checks for role (0 offer, 1 fetch): the peer, then replay. On 0, *timeout is the
 * operation's deadline, capped at the ticket's expiry. */
static int admit(pdshim_t *shim, int role, const pdr_ticket_t *t, uint64_t now_ms, uint32_t *timeout)
{
    /* The router signs at most PDR_TICKET_TTL_MAX_MS ahead: a later expiry would hold a replay slot for
     * longer than any ticket lives, so it is refused as malformed (it can only come from a wrong clock
     * or a wrong signer). */
    if (t->expires_ms > now_ms + PDR_TICKET_TTL_MAX_MS + shim->skew_ms)
        return PDR_EBADTICKET;
    if (role == 0) {
        if (pdshim_listen_port(shim) != t->port)
            return PDR_EWRONGPEER;
    } else if (shim->identity[0] != '\0' && strcmp(shim->identity, t->peer) != 0) {
        return PDR_EWRONGPEER;
    }
    uint64_t until = t->expires_ms + shim->skew_ms;
    pthread_mutex_lock(&shim->lock);
    int rc = replay_add(&shim->seen[role], t->room, xfer_room(t), until, now_ms);
    pthread_mutex_unlock(&shim->lock);
    if (rc != 0)
        return rc;
    uint64_t left = until > now_ms ? until - now_ms : 1;
    uint32_t want = *timeout != 0 ? *timeout : shim->default_ms;
    *timeout = left < want ? (uint32_t)left : want;
    if (*timeout == 0)
        *timeout = 1;
    return 0;
}

/* The verify-then-act start that every ticketed call shares: check the ticket and admit it for the
 * role (0 offers, 1 fetches), report a refusal to the router (under the ticket's room once the ticket is
 * known to be genuine), and allocate the completion that tk_done will run. On success *c belongs to the
 * caller, which frees it if posting fails. */
static int take_ticket(pdshim_t *shim, const char *ticket, int role, pdshim_result_cb cb, void *arg,
                       pdr_ticket_t *t, uint32_t *timeout_ms, struct tk_call **c)
{
    uint64_t now;
    if (cb == NULL)
        return PDR_EINVAL;
    int rc = verify(shim, ticket, t, &now);
    if (rc == 0)
        rc = admit(shim, role, t, now, timeout_ms);
    if (rc != 0) {
        pdshim__report_refused(shim, rc == PDR_EREPLAYED || rc == PDR_EWRONGPEER ? t->room : 0, role, rc);
        return rc;
    }
    *c = malloc(sizeof(**c));
    if (*c == NULL)
        return PDR_ENOMEM;
    **c = (struct tk_call){cb, arg, t->room};
    return 0;
}

PDSHIM_API int pdshim_offer_ticket(pdshim_t *shim, const char *ticket, const pdshim_seg_t *segs, size_t nseg,
                                   uint32_t timeout_ms, pdshim_result_cb cb, void *arg)
{
    pdr_ticket_t t = {0};
    struct tk_call *c;
    int rc = take_ticket(shim, ticket, 0, cb, arg, &t, &timeout_ms, &c);
    if (rc != 0)
        return rc;
    rc = pdshim__post(shim, NULL, 0, xfer_room(&t), t.room, segs, nseg, timeout_ms, tk_done, NULL, c);
    if (rc != 0)
        free(c);
    return rc;
}

PDSHIM_API int pdshim_offer_open_ticket(pdshim_t *shim, const char *ticket, uint64_t total_bytes,
                                        uint32_t timeout_ms, pdshim_result_cb cb, void *arg)
{
    pdr_ticket_t t = {0};
    struct tk_call *c;
    int rc = take_ticket(shim, ticket, 0, cb, arg, &t, &timeout_ms, &c);
    if (rc != 0)
        return rc;
    /* The parts that follow name the ticket's room; pdshim_offer_part finds this name through the replay
     * cache entry admit() just made. */
    rc = pdshim__open(shim, xfer_room(&t), t.room, total_bytes, timeout_ms, tk_done, c);
    if (rc != 0)
        free(c);
    return rc;
}

PDSHIM_API int pdshim_fetch_ticket(pdshim_t *shim, const char *ticket, const pdshim_seg_t *segs, size_t nseg,
                                   uint32_t timeout_ms, pdshim_result_cb cb, void *arg)
{
    pdr_ticket_t t = {0};
    struct tk_call *c;
    int rc = take_ticket(shim, ticket, 1, cb, arg, &t, &timeout_ms, &c);
    if (rc != 0)
        return rc;
    rc = pdshim__post(shim, t.host, t.port, xfer_room(&t), t.room, segs, nseg, timeout_ms, tk_done, NULL, c);
    if (rc != 0)
        free(c);
    return rc;
}

PDSHIM_API int pdshim_ticket_inspect(pdshim_t *shim, const char *ticket, pdshim_ticket_info_t *out)
{
    pdr_ticket_t t;
    uint64_t now;
    if (out == NULL)
        return PDR_EINVAL;
    memset(out, 0, sizeof(*out));
    int rc = verify(shim, ticket, &t, &now);
    if (rc != 0)
        return rc;
    _Static_assert(sizeof(out->prefill_host) == sizeof(t.host) && sizeof(out->decode_id) == sizeof(t.peer) &&
                       sizeof(out->key_id) == sizeof(t.key_id),
                   "pdshim_ticket_info_t and pdr_ticket_t differ");
    out->room = t.room;
    out->expires_ms = t.expires_ms;
    memcpy(out->prefill_host, t.host, sizeof(t.host));
    out->prefill_port = t.port;
    memcpy(out->decode_id, t.peer, sizeof(t.peer));
    memcpy(out->key_id, t.key_id, sizeof(t.key_id));
    return 0;
}
