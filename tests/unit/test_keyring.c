/*
 * common/keyring.c: HMAC-SHA256 against RFC 4231's vectors, key files (trailing newline, too short, too
 * long, missing, the same key twice, more than the ring holds), ids that name their key, derived keys,
 * constant-time equality, and base64url both ways with every malformed form refused.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "runner.h"
#include "err.h"
#include "keyring.h"

static void hex(const uint8_t *d, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void test_hmac_rfc4231(void)
{
    /* Test case 6: a 131-byte key (larger than the block), and test case 7 (a long message). */
    pdr_keyring_t kr = {0};
    uint8_t key[131];
    memset(key, 0xaa, sizeof(key));
    CHECK(pdr_keyring_add(&kr, key, sizeof(key)) == 0);
    uint8_t mac[PDR_HMAC_LEN];
    char h[2 * PDR_HMAC_LEN + 1];
    const char *m6 = "Test Using Larger Than Block-Size Key - Hash Key First";
    pdr_hmac_sha256(&kr.keys[0], m6, strlen(m6), mac);
    hex(mac, sizeof(mac), h);
    CHECK(strcmp(h, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54") == 0);
    const char *m7 = "This is a test using a larger than block-size key and a larger than block-size data. "
                     "The key needs to be hashed before being used by the HMAC algorithm.";
    pdr_hmac_sha256(&kr.keys[0], m7, strlen(m7), mac);
    hex(mac, sizeof(mac), h);
    CHECK(strcmp(h, "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2") == 0);
    CHECK(strlen(kr.keys[0].id) == PDR_KEY_ID_LEN);
    CHECK(pdr_keyring_find(&kr, kr.keys[0].id, PDR_KEY_ID_LEN) == &kr.keys[0]);
    CHECK(pdr_keyring_find(&kr, "00000000", 8) == NULL || strcmp(kr.keys[0].id, "00000000") == 0);
    CHECK(pdr_keyring_find(&kr, kr.keys[0].id, 7) == NULL);
    CHECK(pdr_keyring_add(&kr, key, PDR_KEY_MIN - 1) == PDR_EINVAL);
    pdr_keyring_wipe(&kr);
    CHECK(kr.n == 0 && kr.keys[0].secret[0] == 0);
}

static char dir[64];

static const char *put(const char *name, const void *data, size_t n)
{
    static char path[8][128];
    static int k;
    char *p = path[k++ % 8];
    snprintf(p, 128, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    CHECK(f != NULL);
    CHECK(fwrite(data, 1, n, f) == n);
    fclose(f);
    return p;
}

static void test_key_files(void)
{
    snprintf(dir, sizeof(dir), "/tmp/pdr-keyring-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    char err[256];
    pdr_keyring_t kr;
    const char *a = put("a", "0123456789abcdef0123456789abcdef\n", 33);
    const char *a2 = put("a2", "0123456789abcdef0123456789abcdef\r\n", 34);
    const char *b = put("b", "fedcba9876543210fedcba9876543210fe", 34);
    const char *shortk = put("short", "0123456789abcdef0123456789abcde\n", 32);
    char big[PDR_KEY_MAX + 1];
    memset(big, 'x', sizeof(big));
    const char *bigk = put("big", big, sizeof(big));
    const char *exact = put("exact", big, PDR_KEY_MAX);

    const char *one[] = {a};
    CHECK(pdr_keyring_load(&kr, one, 1, err, sizeof(err)) == 0);
    CHECK(kr.n == 1 && kr.keys[0].len == 32 && memcmp(kr.keys[0].secret, "0123456789abcdef", 16) == 0);
    const char *two[] = {b, a};
    CHECK(pdr_keyring_load(&kr, two, 2, err, sizeof(err)) == 0);
    CHECK(kr.n == 2 && kr.keys[0].len == 34 && strcmp(kr.keys[0].id, kr.keys[1].id) != 0);
    /* "\r\n" is stripped too: the same secret, refused as a duplicate with both names. */
    const char *dup[] = {a, a2};
    CHECK(pdr_keyring_load(&kr, dup, 2, err, sizeof(err)) == PDR_EINVAL);
    CHECK(strstr(err, "the same key") != NULL && strstr(err, a) != NULL && kr.n == 0);
    const char *s[] = {shortk};
    CHECK(pdr_keyring_load(&kr, s, 1, err, sizeof(err)) == PDR_EINVAL && strstr(err, "31 bytes") != NULL);
    const char *g[] = {bigk};
    CHECK(pdr_keyring_load(&kr, g, 1, err, sizeof(err)) == PDR_ETOOBIG && strstr(err, bigk) != NULL);
    const char *e[] = {exact};
    CHECK(pdr_keyring_load(&kr, e, 1, err, sizeof(err)) == 0 && kr.keys[0].len == PDR_KEY_MAX);
    const char *missing[] = {"/nonexistent/pdr-key"};
    CHECK(pdr_keyring_load(&kr, missing, 1, err, sizeof(err)) == PDR_EINVAL);
    CHECK(strstr(err, "/nonexistent/pdr-key") != NULL && strstr(err, "No such file") != NULL);
    const char *five[] = {a, b, exact, a2, b};
    CHECK(pdr_keyring_load(&kr, five, 5, err, sizeof(err)) == PDR_EINVAL);
    CHECK(pdr_keyring_load(&kr, five, 0, err, sizeof(err)) == PDR_EINVAL);
    /* Binary keys end in 0x0a or 0x0d by chance: 32 random bytes are never cut to 31, and 32 random bytes
     * followed by a newline (or "\r\n") are those 32 bytes. */
    uint8_t bin[34];
    for (size_t i = 0; i < 32; i++)
        bin[i] = (uint8_t)(0x80 + i);
    bin[31] = '\n';
    const char *nl_end[] = {put("nl_end", (const char *)bin, 32)};
    CHECK(pdr_keyring_load(&kr, nl_end, 1, err, sizeof(err)) == 0);
    CHECK(kr.keys[0].len == 32 && memcmp(kr.keys[0].secret, bin, 32) == 0);
    bin[30] = '\r';
    const char *crlf_end[] = {put("crlf_end", (const char *)bin, 32)};
    CHECK(pdr_keyring_load(&kr, crlf_end, 1, err, sizeof(err)) == 0);
    CHECK(kr.keys[0].len == 32 && memcmp(kr.keys[0].secret, bin, 32) == 0);
    bin[31] = '\r';
    bin[32] = '\n';
    const char *cr_then_nl[] = {put("cr_then_nl", (const char *)bin, 33)};
    CHECK(pdr_keyring_load(&kr, cr_then_nl, 1, err, sizeof(err)) == 0);
    CHECK(kr.keys[0].len == 32 && memcmp(kr.keys[0].secret, bin, 32) == 0);
    bin[32] = '\r';
    bin[33] = '\n';
    const char *bin_crlf[] = {put("bin_crlf", (const char *)bin, 34)};
    CHECK(pdr_keyring_load(&kr, bin_crlf, 1, err, sizeof(err)) == 0);
    CHECK(kr.keys[0].len == 32 && memcmp(kr.keys[0].secret, bin, 32) == 0);
    const char *names[] = {"a",     "a2",     "b",        "short",      "big",
                           "exact", "nl_end", "crlf_end", "cr_then_nl", "bin_crlf"};
    char p[160];
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(p, sizeof(p), "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
}

static void test_ct_equal(void)
{
    CHECK(pdr_ct_equal("abcd", "abcd", 4));
    CHECK(!pdr_ct_equal("abcd", "abce", 4));
    CHECK(!pdr_ct_equal("xbcd", "abcd", 4));
    CHECK(pdr_ct_equal("a", "b", 0));
}

static void test_b64url(void)
{
    /* RFC 4648's vectors, in the url alphabet without padding. */
    static const char *plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    static const char *enc[] = {"", "Zg", "Zm8", "Zm9v", "Zm9vYg", "Zm9vYmE", "Zm9vYmFy"};
    char out[64];
    uint8_t back[64];
    for (int i = 0; i < 7; i++) {
        size_t n = pdr_b64url_encode(plain[i], strlen(plain[i]), out, sizeof(out));
        CHECK(n == strlen(enc[i]) && strcmp(out, enc[i]) == 0);
        long m = pdr_b64url_decode(enc[i], strlen(enc[i]), back, sizeof(back));
        CHECK(m == (long)strlen(plain[i]) && memcmp(back, plain[i], (size_t)m) == 0);
    }
    uint8_t all[256];
    for (int i = 0; i < 256; i++)
        all[i] = (uint8_t)(255 - i);
    char big[400];
    size_t n = pdr_b64url_encode(all, sizeof(all), big, sizeof(big));
    CHECK(n == 342 && strspn(big, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") == n);
    uint8_t dec[256];
    CHECK(pdr_b64url_decode(big, n, dec, sizeof(dec)) == 256 && memcmp(dec, all, 256) == 0);
    CHECK(pdr_b64url_decode(big, n, dec, 255) == -1);     /* cap too small */
    CHECK(pdr_b64url_encode(all, 3, out, 4) == 0);        /* no room for the NUL */
    CHECK(pdr_b64url_decode("Zm9v=", 5, back, 64) == -1); /* padding */
    CHECK(pdr_b64url_decode("Zm+v", 4, back, 64) == -1);  /* the standard alphabet */
    CHECK(pdr_b64url_decode("Zm9vY", 5, back, 64) == -1); /* 1 mod 4 */
    CHECK(pdr_b64url_decode("Zh", 2, back, 64) == -1);    /* trailing bits: "Zg" is the one form */
    CHECK(pdr_b64url_decode("Zm9\0", 4, back, 64) == -1); /* a NUL inside */
}

static void test_derive(void)
{
    /* The derived secret is the hex of HMAC-SHA256(master, label): RFC 4231's test case 7 again. */
    pdr_keyring_t kr = {0};
    uint8_t key[131];
    memset(key, 0xaa, sizeof(key));
    CHECK(pdr_keyring_add(&kr, key, sizeof(key)) == 0);
    const char *m7 = "This is a test using a larger than block-size key and a larger than block-size data. "
                     "The key needs to be hashed before being used by the HMAC algorithm.";
    pdr_key_t d, e;
    pdr_key_derive(&kr.keys[0], m7, strlen(m7), &d);
    CHECK(d.len == 64 &&
          memcmp(d.secret, "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2", 64) == 0);
    /* Its id is the one the key file holding that text gets. */
    pdr_keyring_t kd = {0};
    CHECK(pdr_keyring_add(&kd, d.secret, d.len) == 0 && strcmp(kd.keys[0].id, d.id) == 0);
    CHECK(strcmp(d.id, kr.keys[0].id) != 0);
    /* Another label, another key. */
    pdr_key_derive(&kr.keys[0], m7, strlen(m7) - 1, &e);
    CHECK(e.len == 64 && memcmp(e.secret, d.secret, 64) != 0 && strcmp(e.id, d.id) != 0);
    pdr_keyring_wipe(&kr);
    pdr_keyring_wipe(&kd);
}

static const pdr_test_case_t cases[] = {
    {"hmac_rfc4231", test_hmac_rfc4231, 30}, {"derive", test_derive, 30}, {"key_files", test_key_files, 30},
    {"ct_equal", test_ct_equal, 30},         {"b64url", test_b64url, 30},
};

int main(int argc, char **argv)
{
    return PDR_TEST_RUN(cases, argc, argv);
}
