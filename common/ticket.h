/*
 * Tickets (protocol pdshim): what the router hands both legs of a PD request so that the shims can
 * check, before touching any memory, that the router chose this room, this prefill transport address
 * and this decode, and that the choice is recent. Format and verification order: docs/internals/tickets.md.
 *
 *   pt1.<key id>.<payload>.<mac>
 *
 * "pt1" is the version; the key id names the key ring entry that signed (keyring.h: 8 hex digits);
 * payload is base64url of the fields below in a fixed binary layout; mac is base64url of
 * HMAC-SHA256(key, every byte before the last '.'). At most PDR_TICKET_MAX characters.
 *
 * Pure functions; any thread. Signing keeps an HMAC context per thread with the key's pads already
 * hashed, so a ticket costs one HMAC of ~100 bytes (a few hundred ns).
 */
#ifndef PDR_TICKET_H
#define PDR_TICKET_H

#include <stddef.h>
#include <stdint.h>
#include "keyring.h"

#define PDR_TICKET_MAX 300           /* characters of a ticket, the longest one fits */
#define PDR_TICKET_HOST_MAX 64       /* bytes of the prefill's transport host */
#define PDR_TICKET_PEER_MAX 80       /* bytes of the decode's identity */
#define PDR_TICKET_TTL_MAX_MS 300000 /* the longest ticket.ttl_ms; shims refuse expiries further ahead */

typedef struct pdr_ticket {
    uint64_t room;                      /* the bootstrap room; also the replay key */
    uint64_t expires_ms;                /* wall clock, ms since the Unix epoch */
    char host[PDR_TICKET_HOST_MAX + 1]; /* the prefill's transport host (IPv6 without brackets) */
    int port;                           /* the prefill's transport (bootstrap) port, 1..65535 */
    char peer[PDR_TICKET_PEER_MAX + 1]; /* the decode's identity ("host:port" of its URL) */
    char key_id[PDR_KEY_ID_LEN + 1];    /* verify only: the key that signed */
    uint8_t mac[PDR_HMAC_LEN];          /* verify only: the MAC (known only to holders of the ticket) */
} pdr_ticket_t;

/* Writes the ticket for t (its key_id is ignored) signed with key into out (cap bytes, NUL-terminated).
 * Returns its length, or 0 when a field is out of range (empty or too long host or peer, a byte outside
 * printable ASCII or a space, port outside 1..65535) or cap is too small. */
size_t pdr_ticket_sign(const pdr_key_t *key, const pdr_ticket_t *t, char *out, size_t cap);

/* Verifies s[0..len) in this order: length and syntax (PDR_EBADTICKET), key id known to kr and MAC in
 * constant time (PDR_EFORGED), expiry against now_ms with skew_ms of tolerance (PDR_ETICKETEXPIRED).
 * 0 with *out filled; on failure *out is zeroed. Replay and peer checks are the caller's (they need
 * state). */
int pdr_ticket_verify(const pdr_keyring_t *kr, const char *s, size_t len, uint64_t now_ms, uint32_t skew_ms,
                      pdr_ticket_t *out);

/* The syntax step alone (no key needed): 0 or PDR_EBADTICKET, *out filled except that nothing is
 * authenticated. For tools and the fuzz target. */
int pdr_ticket_parse(const char *s, size_t len, pdr_ticket_t *out);

/* Wall clock in ms since the Unix epoch (CLOCK_REALTIME). */
uint64_t pdr_ticket_now_ms(void);

#endif
