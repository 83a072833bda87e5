/*
 * Fuzz target for the ticket codec (common/ticket.c). Any input: parse and verify must not crash and must
 * agree (verify accepts only what parse accepts). Tickets are canonical: an input that verifies under the
 * target's key must be exactly what signing its fields produces, and everything parse accepts must survive
 * a sign/parse round trip field for field. The seeds (tests/fuzz/corpus/ticket) are signed with the key
 * below by tests/integration/pdticket.py, an independent implementation of the format.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "ticket.h"

/* The seeds' key: 32 bytes of 'k'. */
static const char fuzz_key[] = "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static pdr_keyring_t kr;
    if (kr.n == 0 && pdr_keyring_add(&kr, fuzz_key, 32) != 0)
        abort();
    pdr_ticket_t p, v;
    const char *s = (const char *)data;
    int prc = pdr_ticket_parse(s, size, &p);
    int vrc = pdr_ticket_verify(&kr, s, size, 0, 0, &v);
    if (prc != 0 && prc != PDR_EBADTICKET)
        abort();
    if (prc != 0 && vrc != PDR_EBADTICKET)
        abort();
    if (vrc != 0 && vrc != PDR_EBADTICKET && vrc != PDR_EFORGED && vrc != PDR_ETICKETEXPIRED)
        abort();
    if (prc != 0)
        return 0;
    char out[PDR_TICKET_MAX + 1];
    size_t n = pdr_ticket_sign(&kr.keys[0], &p, out, sizeof(out));
    if (n == 0)
        abort(); /* every parsed ticket's fields are signable */
    pdr_ticket_t q;
    if (pdr_ticket_verify(&kr, out, n, 0, 0, &q) != 0 || q.room != p.room || q.expires_ms != p.expires_ms ||
        q.port != p.port || strcmp(q.host, p.host) != 0 || strcmp(q.peer, p.peer) != 0)
        abort();
    if (vrc == 0 && (n != size || memcmp(out, data, n) != 0))
        abort(); /* a verified ticket is the one encoding of its fields */
    return 0;
}

#ifndef PDR_LIBFUZZER
#define PDR_REPLAY_MUTATIONS 300
#include "replay_main.h"
#endif
