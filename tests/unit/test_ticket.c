/*
 * common/ticket.c: a round trip of every field, the longest ticket within PDR_TICKET_MAX, each refusal in
 * verification order (malformed, unknown key, bad MAC, expired, skew), rotation (a ring of old + new
 * verifies what either signed), fields that cannot be signed, and the signing cost (printed in ns per
 * ticket, never asserted).
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "runner.h"
#include "err.h"
#include "ticket.h"

static pdr_keyring_t ring(const char *secret)
{
    pdr_keyring_t kr = {0};
    CHECK(pdr_keyring_add(&kr, secret, strlen(secret)) == 0);
    return kr;
}

static const char K1[] = "0123456789abcdef0123456789abcdef";
static const char K2[] = "fedcba9876543210fedcba9876543210-new";

static pdr_ticket_t sample(uint64_t exp)
{
    pdr_ticket_t t = {0};
    t.room = 0x7fffffffffffffffull;
    t.expires_ms = exp;
    snprintf(t.host, sizeof(t.host), "10.1.2.3");
    t.port = 8998;
    snprintf(t.peer, sizeof(t.peer), "10.1.2.4:30002");
    return t;
}

static void test_roundtrip(void)
{
    pdr_keyring_t kr = ring(K1);
    pdr_ticket_t t = sample(1000000), v;
    char s[PDR_TICKET_MAX + 1];
    size_t n = pdr_ticket_sign(&kr.keys[0], &t, s, sizeof(s));
    CHECK(n > 0 && n == strlen(s) && strncmp(s, "pt1.", 4) == 0);
    printf("# ticket: %s (%zu bytes)\n", s, n);
    CHECK(pdr_ticket_verify(&kr, s, n, 999999, 0, &v) == 0);
    CHECK(v.room == t.room && v.expires_ms == t.expires_ms && v.port == 8998);
    CHECK(strcmp(v.host, "10.1.2.3") == 0 && strcmp(v.peer, "10.1.2.4:30002") == 0);
    CHECK(strcmp(v.key_id, kr.keys[0].id) == 0);
    /* Exactly at expiry still valid; one ms later not, unless the skew allows it. */
    CHECK(pdr_ticket_verify(&kr, s, n, 1000000, 0, &v) == 0);
    CHECK(pdr_ticket_verify(&kr, s, n, 1000001, 0, &v) == PDR_ETICKETEXPIRED && v.room == 0);
    CHECK(pdr_ticket_verify(&kr, s, n, 1002000, 2000, &v) == 0);
    CHECK(pdr_ticket_verify(&kr, s, n, 1002001, 2000, &v) == PDR_ETICKETEXPIRED);
    /* The longest fields fit. */
    pdr_ticket_t big = sample(UINT64_MAX);
    memset(big.host, 'h', PDR_TICKET_HOST_MAX);
    memset(big.peer, 'p', PDR_TICKET_PEER_MAX);
    n = pdr_ticket_sign(&kr.keys[0], &big, s, sizeof(s));
    CHECK(n > 0 && n <= PDR_TICKET_MAX);
    printf("# longest ticket: %zu bytes\n", n);
    CHECK(pdr_ticket_verify(&kr, s, n, 0, 0, &v) == 0 && strlen(v.host) == PDR_TICKET_HOST_MAX);
    CHECK(pdr_ticket_sign(&kr.keys[0], &big, s, n) == 0); /* no room for the NUL */
    pdr_keyring_wipe(&kr);
}

static void test_unsignable(void)
{
    pdr_keyring_t kr = ring(K1);
    char s[PDR_TICKET_MAX + 1];
    pdr_ticket_t t = sample(1);
    t.port = 0;
    CHECK(pdr_ticket_sign(&kr.keys[0], &t, s, sizeof(s)) == 0);
    t = sample(1);
    t.host[0] = '\0';
    CHECK(pdr_ticket_sign(&kr.keys[0], &t, s, sizeof(s)) == 0);
    t = sample(1);
    t.peer[3] = ' ';
    CHECK(pdr_ticket_sign(&kr.keys[0], &t, s, sizeof(s)) == 0);
    t = sample(1);
    t.host[2] = '\x80';
    CHECK(pdr_ticket_sign(&kr.keys[0], &t, s, sizeof(s)) == 0);
    t = sample(1);
    memset(t.host, 'h', sizeof(t.host)); /* not terminated: one byte over the limit */
    CHECK(pdr_ticket_sign(&kr.keys[0], &t, s, sizeof(s)) == 0);
}

static void test_refusals(void)
{
    pdr_keyring_t kr = ring(K1), other = ring(K2);
    pdr_ticket_t t = sample(5000), v;
    char s[PDR_TICKET_MAX + 1], m[PDR_TICKET_MAX + 8];
    size_t n = pdr_ticket_sign(&kr.keys[0], &t, s, sizeof(s));
    CHECK(n > 0);
    /* Syntax first: these fail before any key is looked at (even with no ring at all). */
    CHECK(pdr_ticket_verify(NULL, "", 0, 0, 0, &v) == PDR_EBADTICKET);
    CHECK(pdr_ticket_verify(&kr, s, n - 1, 0, 0, &v) == PDR_EBADTICKET);
    memcpy(m, s, n);
    m[2] = '2';
    CHECK(pdr_ticket_verify(&kr, m, n, 0, 0, &v) == PDR_EBADTICKET);
    memcpy(m, s, n);
    m[5] = 'X'; /* key id must be lower-case hex */
    CHECK(pdr_ticket_verify(&kr, m, n, 0, 0, &v) == PDR_EBADTICKET);
    memcpy(m, s, n);
    m[20] = '.';
    CHECK(pdr_ticket_verify(&kr, m, n, 0, 0, &v) == PDR_EBADTICKET);
    memcpy(m, s, n);
    m[20] = '=';
    CHECK(pdr_ticket_verify(&kr, m, n, 0, 0, &v) == PDR_EBADTICKET);
    char longer[PDR_TICKET_MAX + 2];
    memset(longer, 'A', sizeof(longer));
    memcpy(longer, s, n);
    CHECK(pdr_ticket_verify(&kr, longer, sizeof(longer), 0, 0, &v) == PDR_EBADTICKET);
    CHECK(pdr_ticket_parse(s, n, &v) == 0 && v.room == t.room);
    /* Unknown key id, then a wrong MAC: forged, even when it has expired too (the MAC comes first). */
    CHECK(pdr_ticket_verify(&other, s, n, 0, 0, &v) == PDR_EFORGED);
    memcpy(m, s, n);
    m[n - 5] = m[n - 5] == 'A' ? 'B' : 'A';
    CHECK(pdr_ticket_verify(&kr, m, n, 0, 0, &v) == PDR_EFORGED);
    CHECK(pdr_ticket_verify(&kr, m, n, 999999, 0, &v) == PDR_EFORGED);
    /* A field changed under the MAC (the payload's first character: the room's top bits). */
    memcpy(m, s, n);
    m[13] = m[13] == 'B' ? 'C' : 'B';
    CHECK(pdr_ticket_verify(&kr, m, n, 0, 0, &v) == PDR_EFORGED);
    /* A ticket with the same key id but another key (an id collision): the MAC still refuses it. */
    pdr_keyring_t clash = ring(K2);
    memcpy(clash.keys[0].id, kr.keys[0].id, sizeof(clash.keys[0].id));
    CHECK(pdr_ticket_verify(&clash, s, n, 0, 0, &v) == PDR_EFORGED);
    CHECK(pdr_ticket_verify(&kr, s, n, 5001, 0, &v) == PDR_ETICKETEXPIRED);
}

static void test_rotation(void)
{
    pdr_keyring_t both = {0}, old = ring(K1), fresh = ring(K2);
    CHECK(pdr_keyring_add(&both, K2, strlen(K2)) == 0); /* the first signs */
    CHECK(pdr_keyring_add(&both, K1, strlen(K1)) == 0);
    pdr_ticket_t t = sample(5000), v;
    char a[PDR_TICKET_MAX + 1], b[PDR_TICKET_MAX + 1];
    size_t na = pdr_ticket_sign(&both.keys[0], &t, a, sizeof(a));
    size_t nb = pdr_ticket_sign(&old.keys[0], &t, b, sizeof(b));
    CHECK(na > 0 && nb > 0 && strcmp(a, b) != 0);
    CHECK(pdr_ticket_verify(&both, a, na, 0, 0, &v) == 0 && strcmp(v.key_id, fresh.keys[0].id) == 0);
    CHECK(pdr_ticket_verify(&both, b, nb, 0, 0, &v) == 0 && strcmp(v.key_id, old.keys[0].id) == 0);
    CHECK(pdr_ticket_verify(&old, a, na, 0, 0, &v) == PDR_EFORGED);
    CHECK(pdr_ticket_verify(&fresh, b, nb, 0, 0, &v) == PDR_EFORGED);
    /* Alternating keys on one thread (the cached signing context follows the key). */
    for (int i = 0; i < 4; i++) {
        size_t n = pdr_ticket_sign(i % 2 ? &old.keys[0] : &fresh.keys[0], &t, a, sizeof(a));
        CHECK(pdr_ticket_verify(i % 2 ? &old : &fresh, a, n, 0, 0, &v) == 0);
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Not an assertion: the cost of signing and of verifying, printed for docs/internals/tickets.md. */
static void test_cost(void)
{
    pdr_keyring_t kr = ring(K1);
    pdr_ticket_t t = sample(UINT64_MAX), v;
    char s[PDR_TICKET_MAX + 1];
    enum { N = 20000 };
    size_t n = 0;
    double t0 = now_s();
    for (int i = 0; i < N; i++) {
        t.room = (uint64_t)i;
        n = pdr_ticket_sign(&kr.keys[0], &t, s, sizeof(s));
    }
    double t1 = now_s();
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad += pdr_ticket_verify(&kr, s, n, 0, 0, &v) != 0;
    double t2 = now_s();
    uint8_t mac[PDR_HMAC_LEN];
    for (int i = 0; i < N; i++)
        pdr_hmac_sha256(&kr.keys[0], s, n, mac);
    double t3 = now_s();
    CHECK(bad == 0);
    printf("# sign %.0f ns/ticket, verify %.0f ns/ticket, one-shot HMAC() %.0f ns (%zu-byte ticket)\n",
           (t1 - t0) / N * 1e9, (t2 - t1) / N * 1e9, (t3 - t2) / N * 1e9, n);
}

int main(int argc, char **argv)
{
    static const pdr_test_case_t cases[] = {
        {"roundtrip", test_roundtrip, 30}, {"unsignable", test_unsignable, 30},
        {"refusals", test_refusals, 30},   {"rotation", test_rotation, 30},
        {"cost", test_cost, 60},
    };
    return PDR_TEST_RUN(cases, argc, argv);
}
