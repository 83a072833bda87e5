/*
 * Ticket codec (ticket.h; the format, field by field, in docs/internals/tickets.md). Signing and
 * verifying are pure; the only state is a per-thread HMAC context that holds the last signing key with
 * its inner and outer pads already hashed (OpenSSL's EVP_MAC re-initialised without a key keeps them),
 * so that a ticket costs one HMAC over its ~100 bytes, not a key setup as well.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "err.h"
#include "ticket.h"

#define PREFIX "pt1."
#define PREFIX_LEN 4
#define PAYLOAD_MIN (8 + 8 + 2 + 1 + 1 + 1 + 1)
#define PAYLOAD_MAX (8 + 8 + 2 + 1 + PDR_TICKET_HOST_MAX + 1 + PDR_TICKET_PEER_MAX)
#define MAC_B64_LEN 43 /* 32 bytes, unpadded */

_Static_assert(PREFIX_LEN + PDR_KEY_ID_LEN + 1 + (PAYLOAD_MAX * 4 + 2) / 3 + 1 + MAC_B64_LEN <=
                   PDR_TICKET_MAX,
               "the longest ticket does not fit PDR_TICKET_MAX");

uint64_t pdr_ticket_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---- the per-thread signing context ---- */

struct signer {
    EVP_MAC_CTX *ctx;
    size_t len;
    uint8_t secret[PDR_KEY_MAX];
};

static pthread_key_t signer_key;
static pthread_once_t signer_once = PTHREAD_ONCE_INIT;
static EVP_MAC *hmac_alg;

static void signer_free(void *p)
{
    struct signer *s = p;
    EVP_MAC_CTX_free(s->ctx);
    OPENSSL_cleanse(s, sizeof(*s));
    free(s);
}

static void signer_init(void)
{
    hmac_alg = EVP_MAC_fetch(NULL, "HMAC", NULL);
    if (pthread_key_create(&signer_key, signer_free) != 0)
        hmac_alg = NULL;
}

/* This thread's context, keyed with key; NULL when OpenSSL could not make one (the caller falls back to
 * the one-shot HMAC). */
static EVP_MAC_CTX *signer_for(const pdr_key_t *key)
{
    pthread_once(&signer_once, signer_init);
    if (hmac_alg == NULL)
        return NULL;
    struct signer *s = pthread_getspecific(signer_key);
    if (s == NULL) {
        s = calloc(1, sizeof(*s));
        if (s == NULL)
            return NULL;
        s->ctx = EVP_MAC_CTX_new(hmac_alg);
        if (s->ctx == NULL || pthread_setspecific(signer_key, s) != 0) {
            signer_free(s);
            return NULL;
        }
    }
    if (s->len == key->len && CRYPTO_memcmp(s->secret, key->secret, key->len) == 0)
        return EVP_MAC_init(s->ctx, NULL, 0, NULL) == 1 ? s->ctx : NULL;
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                           OSSL_PARAM_construct_end()};
    s->len = 0;
    if (EVP_MAC_init(s->ctx, key->secret, key->len, params) != 1)
        return NULL;
    memcpy(s->secret, key->secret, key->len);
    s->len = key->len;
    return s->ctx;
}

static void mac_of(const pdr_key_t *key, const char *msg, size_t len, uint8_t out[PDR_HMAC_LEN])
{
    EVP_MAC_CTX *ctx = signer_for(key);
    size_t olen = 0;
    if (ctx != NULL && EVP_MAC_update(ctx, (const unsigned char *)msg, len) == 1 &&
        EVP_MAC_final(ctx, out, &olen, PDR_HMAC_LEN) == 1 && olen == PDR_HMAC_LEN)
        return;
    pdr_hmac_sha256(key, msg, len, out);
}

/* ---- layout ---- */

static int text_ok(const char *s, size_t n, size_t max)
{
    if (n == 0 || n > max)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f)
            return 0;
    return 1;
}

static void put_be(uint8_t *p, uint64_t v, int n)
{
    for (int i = n - 1; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static uint64_t get_be(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

size_t pdr_ticket_sign(const pdr_key_t *key, const pdr_ticket_t *t, char *out, size_t cap)
{
    size_t hl = strnlen(t->host, sizeof(t->host)), pl = strnlen(t->peer, sizeof(t->peer));
    if (!text_ok(t->host, hl, PDR_TICKET_HOST_MAX) || !text_ok(t->peer, pl, PDR_TICKET_PEER_MAX) ||
        t->port < 1 || t->port > 65535 || strlen(key->id) != PDR_KEY_ID_LEN)
        return 0;
    uint8_t p[PAYLOAD_MAX];
    size_t n = 0;
    put_be(p, t->room, 8);
    put_be(p + 8, t->expires_ms, 8);
    put_be(p + 16, (uint64_t)t->port, 2);
    n = 18;
    p[n++] = (uint8_t)hl;
    memcpy(p + n, t->host, hl);
    n += hl;
    p[n++] = (uint8_t)pl;
    memcpy(p + n, t->peer, pl);
    n += pl;
    char buf[PDR_TICKET_MAX + 1];
    memcpy(buf, PREFIX, PREFIX_LEN);
    memcpy(buf + PREFIX_LEN, key->id, PDR_KEY_ID_LEN);
    size_t o = PREFIX_LEN + PDR_KEY_ID_LEN;
    buf[o++] = '.';
    o += pdr_b64url_encode(p, n, buf + o, sizeof(buf) - o);
    uint8_t mac[PDR_HMAC_LEN];
    mac_of(key, buf, o, mac);
    buf[o++] = '.';
    o += pdr_b64url_encode(mac, sizeof(mac), buf + o, sizeof(buf) - o);
    if (o + 1 > cap)
        return 0;
    memcpy(out, buf, o);
    out[o] = '\0';
    return o;
}

static int is_hex_lower(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

/* The syntax step: *payload_end is where the signed text ends (the last '.'), mac the decoded MAC. */
static int parse(const char *s, size_t len, pdr_ticket_t *out, size_t *signed_len, uint8_t mac[PDR_HMAC_LEN])
{
    memset(out, 0, sizeof(*out));
    size_t head = PREFIX_LEN + PDR_KEY_ID_LEN + 1;
    if (s == NULL || len > PDR_TICKET_MAX || len < head + 1 + 1 + MAC_B64_LEN ||
        memcmp(s, PREFIX, PREFIX_LEN) != 0)
        return PDR_EBADTICKET;
    for (size_t i = PREFIX_LEN; i < PREFIX_LEN + PDR_KEY_ID_LEN; i++)
        if (!is_hex_lower(s[i]))
            return PDR_EBADTICKET;
    if (s[head - 1] != '.' || s[len - MAC_B64_LEN - 1] != '.')
        return PDR_EBADTICKET;
    size_t plen = len - MAC_B64_LEN - 1 - head;
    if (memchr(s + head, '.', plen) != NULL)
        return PDR_EBADTICKET;
    uint8_t p[PAYLOAD_MAX];
    long n = pdr_b64url_decode(s + head, plen, p, sizeof(p));
    if (n < PAYLOAD_MIN ||
        pdr_b64url_decode(s + len - MAC_B64_LEN, MAC_B64_LEN, mac, PDR_HMAC_LEN) != PDR_HMAC_LEN)
        return PDR_EBADTICKET;
    size_t o = 18, hl = p[o++];
    if (hl == 0 || hl > PDR_TICKET_HOST_MAX || o + hl + 1 > (size_t)n ||
        !text_ok((const char *)p + o, hl, hl))
        return PDR_EBADTICKET;
    memcpy(out->host, p + o, hl);
    o += hl;
    size_t pl = p[o++];
    if (pl == 0 || pl > PDR_TICKET_PEER_MAX || o + pl != (size_t)n || !text_ok((const char *)p + o, pl, pl)) {
        memset(out, 0, sizeof(*out));
        return PDR_EBADTICKET;
    }
    memcpy(out->peer, p + o, pl);
    out->room = get_be(p, 8);
    out->expires_ms = get_be(p + 8, 8);
    out->port = (int)get_be(p + 16, 2);
    if (out->port == 0) {
        memset(out, 0, sizeof(*out));
        return PDR_EBADTICKET;
    }
    memcpy(out->key_id, s + PREFIX_LEN, PDR_KEY_ID_LEN);
    memcpy(out->mac, mac, PDR_HMAC_LEN);
    *signed_len = len - MAC_B64_LEN - 1;
    return 0;
}

int pdr_ticket_parse(const char *s, size_t len, pdr_ticket_t *out)
{
    size_t sl;
    uint8_t mac[PDR_HMAC_LEN];
    return parse(s, len, out, &sl, mac);
}

int pdr_ticket_verify(const pdr_keyring_t *kr, const char *s, size_t len, uint64_t now_ms, uint32_t skew_ms,
                      pdr_ticket_t *out)
{
    size_t sl;
    uint8_t mac[PDR_HMAC_LEN], want[PDR_HMAC_LEN];
    int rc = parse(s, len, out, &sl, mac);
    if (rc != 0)
        return rc;
    const pdr_key_t *key = kr != NULL ? pdr_keyring_find(kr, out->key_id, PDR_KEY_ID_LEN) : NULL;
    if (key == NULL) {
        rc = PDR_EFORGED;
    } else {
        mac_of(key, s, sl, want);
        if (!pdr_ct_equal(mac, want, PDR_HMAC_LEN))
            rc = PDR_EFORGED;
        else if (out->expires_ms < UINT64_MAX - skew_ms && now_ms > out->expires_ms + skew_ms)
            rc = PDR_ETICKETEXPIRED;
    }
    if (rc != 0)
        memset(out, 0, sizeof(*out));
    return rc;
}
