/* The key ring, HMAC-SHA256 (OpenSSL's libcrypto) and base64url (keyring.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include "err.h"
#include "keyring.h"

/* The key's public id: the first 4 bytes of the SHA-256 of its secret, in hex. */
static void set_id(pdr_key_t *k)
{
    uint8_t d[SHA256_DIGEST_LENGTH];
    SHA256(k->secret, k->len, d);
    snprintf(k->id, sizeof(k->id), "%02x%02x%02x%02x", d[0], d[1], d[2], d[3]);
}

int pdr_keyring_add(pdr_keyring_t *kr, const void *secret, size_t len)
{
    if (kr->n >= PDR_KEYRING_MAX)
        return PDR_ETOOBIG;
    if (len < PDR_KEY_MIN || len > PDR_KEY_MAX)
        return PDR_EINVAL;
    pdr_key_t *k = &kr->keys[kr->n];
    memcpy(k->secret, secret, len);
    k->len = len;
    set_id(k);
    kr->n++;
    return 0;
}

/* The key's length in a file of n bytes. A text key (hex, base64: printable ASCII) ends at its line end,
 * "\n" or "\r\n". A binary key (head -c 32 /dev/urandom) may end in those bytes by chance (one key in 256
 * ends in 0x0a): its line end is dropped only as far as a whole key remains, so that 32 random bytes are
 * never cut to 31, and 32 random bytes followed by a newline are those 32 bytes. */
static size_t key_length(const uint8_t *p, size_t n)
{
    size_t m = n;
    if (m > 0 && p[m - 1] == '\n') {
        m--;
        if (m > 0 && p[m - 1] == '\r')
            m--;
    }
    for (size_t i = 0; i < m; i++) {
        if (p[i] < 0x20 || p[i] > 0x7e) { /* binary */
            m = n;
            if (m > PDR_KEY_MIN && p[m - 1] == '\n') {
                m--;
                if (m > PDR_KEY_MIN && p[m - 1] == '\r')
                    m--;
            }
            break;
        }
    }
    return m;
}

static int read_key(const char *path, uint8_t *buf, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, errlen, "key file %s: %s", path, strerror(errno));
        return PDR_EINVAL;
    }
    /* One byte more than the largest key plus its "\r\n": anything longer is refused, never cut. */
    uint8_t tmp[PDR_KEY_MAX + 3];
    size_t n = fread(tmp, 1, sizeof(tmp), f);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        snprintf(err, errlen, "key file %s: read error", path);
        return PDR_EIO;
    }
    n = key_length(tmp, n);
    int rc = 0;
    if (n < PDR_KEY_MIN) {
        snprintf(err, errlen, "key file %s: %zu bytes; a key has at least %d (head -c 32 /dev/urandom)", path,
                 n, PDR_KEY_MIN);
        rc = PDR_EINVAL;
    } else if (n > PDR_KEY_MAX) {
        snprintf(err, errlen, "key file %s: longer than %d bytes", path, PDR_KEY_MAX);
        rc = PDR_ETOOBIG;
    } else {
        memcpy(buf, tmp, n);
        *len = n;
    }
    OPENSSL_cleanse(tmp, sizeof(tmp));
    return rc;
}

int pdr_keyring_load(pdr_keyring_t *kr, const char *const *files, size_t n, char *err, size_t errlen)
{
    memset(kr, 0, sizeof(*kr));
    if (n == 0 || n > PDR_KEYRING_MAX) {
        snprintf(err, errlen, "between 1 and %d key files, not %zu", PDR_KEYRING_MAX, n);
        return PDR_EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        uint8_t secret[PDR_KEY_MAX];
        size_t len = 0;
        int rc = read_key(files[i], secret, &len, err, errlen);
        if (rc == 0) {
            rc = pdr_keyring_add(kr, secret, len);
            for (size_t j = 0; rc == 0 && j + 1 < kr->n; j++)
                if (strcmp(kr->keys[j].id, kr->keys[kr->n - 1].id) == 0) {
                    snprintf(err, errlen, "key file %s: the same key as %s", files[i], files[j]);
                    rc = PDR_EINVAL;
                }
        }
        OPENSSL_cleanse(secret, sizeof(secret));
        if (rc != 0) {
            pdr_keyring_wipe(kr);
            return rc;
        }
    }
    return 0;
}

const pdr_key_t *pdr_keyring_find(const pdr_keyring_t *kr, const char *id, size_t idlen)
{
    if (idlen != PDR_KEY_ID_LEN)
        return NULL;
    for (size_t i = 0; i < kr->n; i++)
        if (memcmp(kr->keys[i].id, id, PDR_KEY_ID_LEN) == 0)
            return &kr->keys[i];
    return NULL;
}

void pdr_keyring_wipe(pdr_keyring_t *kr)
{
    OPENSSL_cleanse(kr, sizeof(*kr));
}

void pdr_hmac_sha256(const pdr_key_t *key, const void *msg, size_t len, uint8_t out[PDR_HMAC_LEN])
{
    unsigned int olen = PDR_HMAC_LEN;
    HMAC(EVP_sha256(), key->secret, (int)key->len, msg, len, out, &olen);
}

void pdr_key_derive(const pdr_key_t *master, const void *label, size_t len, pdr_key_t *out)
{
    static const char hex[] = "0123456789abcdef";
    uint8_t mac[PDR_HMAC_LEN];
    pdr_hmac_sha256(master, label, len, mac);
    memset(out, 0, sizeof(*out));
    for (size_t i = 0; i < PDR_HMAC_LEN; i++) {
        out->secret[2 * i] = (uint8_t)hex[mac[i] >> 4];
        out->secret[2 * i + 1] = (uint8_t)hex[mac[i] & 15];
    }
    out->len = 2 * PDR_HMAC_LEN;
    set_id(out);
    OPENSSL_cleanse(mac, sizeof(mac));
}

int pdr_ct_equal(const void *a, const void *b, size_t n)
{
    return CRYPTO_memcmp(a, b, n) == 0;
}

static const char b64url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

size_t pdr_b64url_encode(const void *in, size_t n, char *out, size_t cap)
{
    const uint8_t *p = in;
    size_t need = n / 3 * 4 + (n % 3 ? n % 3 + 1 : 0);
    if (cap < need + 1)
        return 0;
    size_t o = 0, i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        out[o++] = b64url[v >> 18];
        out[o++] = b64url[v >> 12 & 63];
        out[o++] = b64url[v >> 6 & 63];
        out[o++] = b64url[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)p[i] << 16;
        out[o++] = b64url[v >> 18];
        out[o++] = b64url[v >> 12 & 63];
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;
        out[o++] = b64url[v >> 18];
        out[o++] = b64url[v >> 12 & 63];
        out[o++] = b64url[v >> 6 & 63];
    }
    out[o] = '\0';
    return o;
}

static int b64val(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '-')
        return 62;
    if (c == '_')
        return 63;
    return -1;
}

long pdr_b64url_decode(const char *in, size_t n, void *out, size_t cap)
{
    uint8_t *o = out;
    if (n % 4 == 1)
        return -1;
    size_t need = n / 4 * 3 + (n % 4 ? n % 4 - 1 : 0);
    if (need > cap)
        return -1;
    uint32_t acc = 0;
    int bits = 0;
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64val(in[i]);
        if (v < 0)
            return -1;
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            o[w++] = (uint8_t)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    if (acc != 0) /* the unused low bits of the last character must be zero: one encoding per input */
        return -1;
    return (long)w;
}
