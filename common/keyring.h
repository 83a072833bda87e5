/*
 * Shared secrets for HMAC-SHA256: the key ring that signs and verifies tickets and authenticates the
 * shims' event reports. Loaded once from key files; read-only afterwards, so any thread may use it.
 *
 * A key file holds the secret's bytes, 32 to 1024 of them (`head -c 32 /dev/urandom > key` or `openssl rand
 * -hex 32 > key`): a text key (printable ASCII) without its trailing "\n" or "\r\n"; a binary key whole,
 * less a trailing "\n" (or "\r\n") only as far as 32 bytes remain (a random key may end in those bytes).
 * Rotation: a ring of up to PDR_KEYRING_MAX files; the first signs, every one verifies. Each key has an id,
 * the first 4 bytes of the SHA-256 of the secret in hex, so a signed message can name its key without
 * revealing anything about it.
 */
#ifndef PDR_KEYRING_H
#define PDR_KEYRING_H

#include <stddef.h>
#include <stdint.h>

#define PDR_KEYRING_MAX 4
#define PDR_KEY_MIN 32
#define PDR_KEY_MAX 1024
#define PDR_KEY_ID_LEN 8 /* hex digits */
#define PDR_HMAC_LEN 32

typedef struct pdr_key {
    uint8_t secret[PDR_KEY_MAX];
    size_t len;
    char id[PDR_KEY_ID_LEN + 1];
} pdr_key_t;

typedef struct pdr_keyring {
    pdr_key_t keys[PDR_KEYRING_MAX];
    size_t n;
} pdr_keyring_t;

/* Loads files[0..n) (1 <= n <= PDR_KEYRING_MAX) into *kr. 0, or a PDR_E* code with a message in err
 * naming the file and what is wrong (unreadable, too short, too long, the same key twice). */
int pdr_keyring_load(pdr_keyring_t *kr, const char *const *files, size_t n, char *err, size_t errlen);
/* Adds one secret (tests, and callers that hold the bytes already). 0, PDR_EINVAL or PDR_ETOOBIG. */
int pdr_keyring_add(pdr_keyring_t *kr, const void *secret, size_t len);
/* The key with this id (8 hex digits, exactly), or NULL. Comparing ids leaks nothing: they are public. */
const pdr_key_t *pdr_keyring_find(const pdr_keyring_t *kr, const char *id, size_t idlen);
/* Overwrites every secret with zeros. */
void pdr_keyring_wipe(pdr_keyring_t *kr);

/* Derives the key of one party from a master key: out's secret is the lower-case hex of
 * HMAC-SHA256(master, label) (64 characters, so that it can be written to a key file as text and loaded
 * back unchanged), with its own id. The label names the purpose and the party (HKDF-Expand of RFC 5869
 * with a single block comes to the same construction; the master is already uniform). */
void pdr_key_derive(const pdr_key_t *master, const void *label, size_t len, pdr_key_t *out);
/* out = HMAC-SHA256(key, msg). */
void pdr_hmac_sha256(const pdr_key_t *key, const void *msg, size_t len, uint8_t out[PDR_HMAC_LEN]);
/* 1 when a[0..n) equals b[0..n); the time taken depends only on n. */
int pdr_ct_equal(const void *a, const void *b, size_t n);

/* Base64url without padding (RFC 4648 section 5). encode writes 4*ceil(n/3) - padding bytes plus a NUL
 * and returns the length, or 0 when cap is too small. decode returns the byte count, or -1 on a
 * character outside the alphabet, padding, a length of 1 mod 4, non-zero trailing bits, or cap too
 * small. */
size_t pdr_b64url_encode(const void *in, size_t n, char *out, size_t cap);
long pdr_b64url_decode(const char *in, size_t n, void *out, size_t cap);

#endif
