/* router/front/reqguard.c: the request heads a front door must refuse, and the ordinary ones it must pass. */
#include "../../router/front/reqguard.h"
#include <stdio.h>
#include <string.h>
#include "check.h"
#include "reqguard_ref.h"
#include "runner.h"

static int check_head(const char *head)
{
    const char *why = NULL;
    int rc = pdr_reqguard_check_head(head, strlen(head), &why);
    if (rc != 0 && why == NULL)
        return 99;
    return rc;
}

static void test_accepted(void)
{
    /* Accepted: ordinary heads, leading empty lines, HTTP/1.0 without Host, identical names in any case. */
    CHECK(check_head("POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}") == 0);
    CHECK(check_head("\r\nGET /health HTTP/1.1\r\nHOST: x\r\n\r\n") == 0);
    CHECK(check_head("GET / HTTP/1.0\r\n\r\n") == 0);
    CHECK(check_head(
              "POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n") == 0);
    CHECK(check_head("GET / HTTP/1.1\r\nHost: x\r\nX-A: a b\tc\r\n\r\n") == 0);
}

static void test_head_limits(void)
{
    /* Head limits (before h2o parses): fields counted as name + value + 4, the request line apart. */
    {
        const char *h = "GET / HTTP/1.1\r\nHost: x\r\nA: 1\r\n\r\n"; /* 2 fields, 9 + 6 bytes */
        CHECK(pdr_reqguard_head_limits(h, strlen(h), 2, 15) == 0);
        CHECK(pdr_reqguard_head_limits(h, strlen(h), 1, 15) == 431);
        CHECK(pdr_reqguard_head_limits(h, strlen(h), 2, 14) == 431);
        /* Incomplete heads count as far as they have arrived; a bare LF counts as a CRLF. */
        CHECK(pdr_reqguard_head_limits(h, 20, 2, 15) == 0);
        const char *lf = "GET / HTTP/1.1\nHost: x\nA: 1\n\n";
        CHECK(pdr_reqguard_head_limits(lf, strlen(lf), 2, 15) == 0 &&
              pdr_reqguard_head_limits(lf, strlen(lf), 2, 14) == 431);
        const char *part = "GET / HTTP/1.1\r\nX-Long: aaaaaaaaaaaaaaaaaaaa";
        CHECK(pdr_reqguard_head_limits(part, strlen(part), 100, 100) == 0);
        CHECK(pdr_reqguard_head_limits(part, strlen(part), 100, 20) == 431);
        /* The request line alone, complete or not. */
        const char *rl = "GET /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa HTTP/1.1\r\n\r\n";
        CHECK(pdr_reqguard_head_limits(rl, strlen(rl), 100, 20) == 414);
        CHECK(pdr_reqguard_head_limits(rl, 30, 100, 20) == 414 &&
              pdr_reqguard_head_limits(rl, 15, 100, 20) == 0);
        CHECK(pdr_reqguard_head_limits(rl, strlen(rl), 100, 100) == 0);
        /* The body after the head is not counted; leading empty lines are skipped. */
        const char *b = "\r\nPOST / HTTP/1.1\r\nHost: x\r\n\r\nHost: y\r\nHost: z\r\n";
        CHECK(pdr_reqguard_head_limits(b, strlen(b), 1, 20) == 0);
        CHECK(pdr_reqguard_head_limits("", 0, 1, 1) == 0);
    }
}

static void test_smuggling(void)
{
    /* Smuggling vectors. */
    const char *why = NULL;
    const char *clte =
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n";
    CHECK(pdr_reqguard_check_head(clte, strlen(clte), &why) == -1);
    CHECK(strstr(why, "Content-Length and Transfer-Encoding") != NULL);
    CHECK(check_head(
              "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\ncontent-length: 4\r\n\r\n") == -1);
    CHECK(check_head("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nContent-Length: 40\r\n\r\n") == -1);
    CHECK(check_head("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nContent-Length: 4\r\n\r\n") == -1);
    CHECK(check_head("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: "
                     "chunked\r\n\r\n") == -1);
    CHECK(check_head("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n") == -1);
    /* obs-fold, whitespace before the colon, bare LF (in a header line, the request line, the end). */
    CHECK(check_head("GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n") == -1);
    CHECK(check_head("GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n\tb\r\n\r\n") == -1);
    CHECK(check_head("GET / HTTP/1.1\r\nHost: x\r\nContent-Length : 4\r\n\r\n") == -1);
    CHECK(check_head("GET / HTTP/1.1\r\nHost: x\nX-A: a\r\n\r\n") == -1);
    CHECK(check_head("GET / HTTP/1.1\nHost: x\r\n\r\n") == -1);
    CHECK(check_head("GET / HTTP/1.1\r\nHost: x\r\n\n") == -1);
    CHECK(check_head("GET / HTTP/1.1\r\nHost x\r\n\r\n") == -1);
    /* Host. */
    CHECK(check_head("GET / HTTP/1.1\r\n\r\n") == -1);
    CHECK(check_head("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n") == -1);
    /* Incomplete heads (h2o hands over complete ones only; the guard still says no). */
    CHECK(check_head("GET / HTTP/1.1\r\nHost: a\r\n") == -1);
    CHECK(check_head("") == -1);
    /* Every prefix of an accepted head is refused or accepted without reading past its end. */
    const char *ok = "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n";
    for (size_t k = 0; k < strlen(ok); k++)
        CHECK(pdr_reqguard_check_head(ok, k, &why) == -1);
    /* Head length and framing. */
    int chunked = -1;
    const char *h = "\r\nPOST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n";
    CHECK(pdr_reqguard_head_len(h, strlen(h), &chunked) == strlen(h) - 3 && chunked == 1);
    CHECK(pdr_reqguard_head_len(h, 20, &chunked) == 0);
    CHECK(pdr_reqguard_head_len(ok, strlen(ok), &chunked) == strlen(ok) && chunked == 0);
}

/* pdr_reqguard_scan against the separate checks and h2o's parser (reqguard_ref.h), on one input. */
static void scan_agrees(const char *p, size_t n, size_t max_fields, size_t max_bytes)
{
    const char *d = pdr_reqguard_ref_differs(p, n, max_fields, max_bytes);
    if (d != NULL)
        fprintf(stderr, "scan and reference differ (%s) on %zu bytes: %.*s\n", d, n, (int)n, p);
    CHECK(d == NULL);
}

static void scan_all_limits(const char *p, size_t n)
{
    static const size_t fields[] = {1000, 100, 3, 1}, bytes[] = {8192, 60, 12};
    for (size_t f = 0; f < 4; f++)
        for (size_t b = 0; b < 3; b++)
            scan_agrees(p, n, fields[f], bytes[b]);
}

static void test_scan(void)
{
    /* Heads accepted and refused, each class of refusal; then every prefix of each, each byte replaced
     * by bytes that matter to one of the checks, removed, or doubled; then random splices. */
    static const char *const seeds[] = {
        "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        "user-agent: OpenAI/Python 1.54.0\r\naccept: application/json\r\nauthorization: Bearer sk-0123\r\n"
        "x-stainless-lang: python\r\ntraceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        "\r\ncontent-length: 12\r\n\r\n{\"model\":\"m\"}",
        "\r\nGET /health HTTP/1.1\r\nHOST: x\r\n\r\n",
        "\nGET / HTTP/1.0\r\n\r\n",
        "\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n",
        "POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nContent-Length: 40\r\n\r\n",
        "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\nContent-Length : 4\r\n\r\n",
        "GET / HTTP/1.1\nHost: x\nA: 1\n\n",
        "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        "GET / HTTP/1.1\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\nX-A: a b\tc \x80\xff\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\nX\"A: 1\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\nX-A: \x01\r\n\r\n",
        "GET  HTTP/1.1\r\nHost: x\r\n\r\n",
        " / HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET / HTTP/1.10\r\nHost: x\r\n\r\n",
        "GET / H\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 123456789012345678901\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: \r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\nContent-Length:\t7x\r\n\r\n",
        "\r\nContent-Length:9 / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\n",
        "\nTransfer-Encoding: / HTTP/1.1\r\nHost: x\r\n\r\n",
        "Transfer-Encoding: / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n",
        "Content-Length:99 / HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\n:a\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\nA:\r\r\n\r\n",
        "GET /\t HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\n\r\r\n\r\n",
        "GET / HTTP\r\n\r\n",
        "GET / HTTP/1\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\nX-!#$%&'*+-.^_`|~09azAZ: 1\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\nX(),/;<=>?@[\\]{}: 1\r\n\r\n",
    };
    static const char subst[] = {'\0',       '\t',       '\r', '\n', ' ', ':', 0x7f,
                                 (char)0x80, (char)0xff, 'A',  '"',  '0', '/'};
    char buf[600];
    uint64_t rnd = 0x9e3779b97f4a7c15ull;
    for (size_t s = 0; s < sizeof(seeds) / sizeof(seeds[0]); s++) {
        const char *h = seeds[s];
        size_t n = strlen(h);
        for (size_t k = 0; k <= n; k++)
            scan_all_limits(h, k);
        for (size_t k = 0; k < n; k++) {
            memcpy(buf, h, n);
            for (size_t c = 0; c < sizeof(subst); c++) {
                buf[k] = subst[c];
                scan_all_limits(buf, n);
            }
            memcpy(buf, h, k); /* removed */
            memcpy(buf + k, h + k + 1, n - k - 1);
            scan_all_limits(buf, n - 1);
            memcpy(buf, h, k + 1); /* doubled */
            memcpy(buf + k + 1, h + k, n - k);
            scan_all_limits(buf, n + 1);
        }
    }
    /* h2o's parser takes at most 100 fields (a limit above it lets the scan see more). */
    static char many[2200];
    size_t m = (size_t)snprintf(many, sizeof(many), "GET / HTTP/1.1\r\nHost: x\r\n");
    for (int f = 0; f < 101; f++)
        m += (size_t)snprintf(many + m, sizeof(many) - m, "X-%d: v\r\n", f);
    m += (size_t)snprintf(many + m, sizeof(many) - m, "\r\n");
    scan_agrees(many, m, 1000, 8192);
    scan_agrees(many, m - 9, 1000, 8192); /* 100 fields */
    /* Random splices: pieces of the seeds, joined, with a byte of subst now and then. */
    for (int round = 0; round < 20000; round++) {
        size_t n = 0;
        for (;;) {
            rnd ^= rnd << 13, rnd ^= rnd >> 7, rnd ^= rnd << 17;
            const char *h = seeds[rnd % (sizeof(seeds) / sizeof(seeds[0]))];
            size_t hl = strlen(h);
            if (n + hl + 1 > sizeof(buf))
                break;
            size_t a = (rnd >> 8) % (hl + 1), b = a + (rnd >> 20) % (hl + 1 - a);
            memcpy(buf + n, h + a, b - a);
            n += b - a;
            if ((rnd >> 40) % 4 == 0) /* n + 1 <= sizeof(buf): checked above */
                buf[n++] = subst[(rnd >> 44) % sizeof(subst)];
            if ((rnd >> 50) % 3 == 0)
                break;
        }
        scan_all_limits(buf, n);
    }
}

static void test_chunk_guard(void)
{
    /* The chunk guard: a well-framed body fed byte by byte ends DONE with its data counted. */
    const char *body = "5;ext=1\r\nhello\r\n1a\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\n\r\n";
    pdr_chunkguard_t g;
    pdr_chunkguard_init(&g, 1000);
    int rc = PDR_CHUNK_MORE;
    for (size_t k = 0; k < strlen(body) && rc == PDR_CHUNK_MORE; k++)
        rc = pdr_chunkguard_feed(&g, body + k, 1);
    CHECK(rc == PDR_CHUNK_DONE && g.data == 31);
    pdr_chunkguard_init(&g, 1000);
    CHECK(pdr_chunkguard_feed(&g, body, strlen(body)) == PDR_CHUNK_DONE && g.data == 31);
    /* Bare LFs are framing too. */
    pdr_chunkguard_init(&g, 1000);
    CHECK(pdr_chunkguard_feed(&g, "2\nab\n0\n", 9) == PDR_CHUNK_DONE && g.data == 2);
    /* A size past the limit, at once or after data; 16 hex digits (the largest h2o accepts). */
    pdr_chunkguard_init(&g, 1000);
    CHECK(pdr_chunkguard_feed(&g, "ffffffffffffffff\r\n", 18) == PDR_CHUNK_TOO_BIG);
    pdr_chunkguard_init(&g, 1000);
    CHECK(pdr_chunkguard_feed(&g, "3e8\r\n", 5) == PDR_CHUNK_MORE); /* exactly the limit */
    pdr_chunkguard_init(&g, 1000);
    CHECK(pdr_chunkguard_feed(&g, "3e9\r\n", 5) == PDR_CHUNK_TOO_BIG);
    pdr_chunkguard_init(&g, 10);
    CHECK(pdr_chunkguard_feed(&g, "8\r\n12345678\r\n3\r\n", 18) == PDR_CHUNK_TOO_BIG);
    /* Not chunked framing: left to h2o. */
    pdr_chunkguard_init(&g, 1000);
    CHECK(pdr_chunkguard_feed(&g, "fffffffffffffffff\r\n", 19) == PDR_CHUNK_LOST);
    pdr_chunkguard_init(&g, 1000);
    CHECK(pdr_chunkguard_feed(&g, "GET / HTTP/1.1\r\n", 16) == PDR_CHUNK_LOST);
    pdr_chunkguard_init(&g, 1000);
    CHECK(pdr_chunkguard_feed(&g, "2\r\nabX", 7) == PDR_CHUNK_LOST);
}

/* Feeds n bytes at p as the only new bytes of a buffer whose earlier bytes (still there) precede p; no
 * frame of these tests is removed, so the length stays. */
static int feed(pdr_h2guard_t *g, char *p, size_t n)
{
    size_t len = n;
    int v = pdr_h2guard_feed(g, p, 0, &len);
    CHECK(len == n);
    return v;
}

static void test_h2_guard(void)
{
    /* HTTP/2 header blocks. */
    {
        static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
        char buf[256];
        size_t n = 0;
#define H2F(type, flags, stream, len)                                                                        \
    do {                                                                                                     \
        uint8_t h_[9] = {0, (uint8_t)((len) >> 8), (uint8_t)(len), (type), (flags), 0, 0, 0, (stream)};      \
        memcpy(buf + n, h_, 9);                                                                              \
        n += 9;                                                                                              \
        memset(buf + n, 'x', (len));                                                                         \
        n += (len);                                                                                          \
    } while (0)
        memcpy(buf, preface, 24);
        n = 24;
        H2F(4, 0, 0, 0);    /* SETTINGS */
        H2F(1, 0x4, 1, 30); /* a whole block on stream 1 */
        H2F(1, 0, 3, 40);   /* HEADERS without END_HEADERS on stream 3 ... */
        H2F(9, 0, 3, 40);   /* ... 80 bytes so far */
        pdr_h2guard_t hg;
        pdr_h2guard_init(&hg, 100);
        CHECK(feed(&hg, buf, n) == PDR_H2G_MORE && hg.in_block && hg.block == 80 && hg.last_stream == 1);
        int hr = PDR_H2G_MORE;
        pdr_h2guard_init(&hg, 100);
        for (size_t k = 0; k < n && hr == PDR_H2G_MORE; k++) /* a byte at a time */
            hr = feed(&hg, buf + k, 1);
        CHECK(hr == PDR_H2G_MORE && hg.block == 80);
        size_t m = n;
        H2F(9, 0x4, 3, 20); /* exactly the limit, ends the block */
        CHECK(feed(&hg, buf + m, n - m) == PDR_H2G_MORE && !hg.in_block && hg.last_stream == 3);
        /* Past the limit: decided at the frame header, before its payload. */
        pdr_h2guard_init(&hg, 100);
        CHECK(feed(&hg, buf, m) == PDR_H2G_MORE);
        CHECK(feed(&hg, (char *)"\0\0\x15\x09\0\0\0\0\x03", 9) == PDR_H2G_TOO_BIG && hg.block_stream == 3 &&
              hg.last_stream == 1);
        /* Another frame inside a block, a CONTINUATION out of one, a wrong preface: h2o's to answer. */
        pdr_h2guard_init(&hg, 100);
        CHECK(feed(&hg, buf, m) == PDR_H2G_MORE);
        CHECK(feed(&hg, (char *)"\0\0\0\x04\0\0\0\0\0", 9) == PDR_H2G_LOST);
        pdr_h2guard_init(&hg, 100);
        CHECK(feed(&hg, (char *)preface, 24) == PDR_H2G_MORE);
        CHECK(feed(&hg, (char *)"\0\0\0\x09\x04\0\0\0\x01", 9) == PDR_H2G_LOST);
        pdr_h2guard_init(&hg, 100);
        CHECK(feed(&hg, (char *)"PRI * HTTP/1.1", 14) == PDR_H2G_LOST);
#undef H2F
        /* GOAWAY framing. */
        char f[64];
        size_t fl = pdr_h2_goaway_frame(f, sizeof(f), 5, 0xb, "why");
        CHECK(fl == 9 + 8 + 3 && memcmp(f, "\0\0\x0b\x07\0\0\0\0\0\0\0\0\x05\0\0\0\x0bwhy", fl) == 0);
        CHECK(pdr_h2_goaway_frame(f, 19, 5, 0xb, "why") == 0);
    }
}

/* Appends a frame header and payload to buf at *n. */
static void h2_put(char *buf, size_t *n, uint8_t type, uint8_t flags, uint8_t stream, const void *payload,
                   size_t len)
{
    uint8_t h[9] = {0, (uint8_t)(len >> 8), (uint8_t)len, type, flags, 0, 0, 0, stream};
    memcpy(buf + *n, h, 9);
    *n += 9;
    if (len > 0)
        memcpy(buf + *n, payload, len);
    *n += len;
}

static void test_h2_bodies(void)
{
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    static char buf[8192], zeros[1024];
    size_t n = 24, at_cl_raw, at_cl_huff, at_small, at_cross, at_after;
    memcpy(buf, preface, 24);
    h2_put(buf, &n, 4, 0, 0, NULL, 0); /* SETTINGS: a control frame */
    /* stream 1: content-length 9999 (literal without indexing, name 28, plain digits) */
    static const uint8_t cl_raw[] = {0x83, 0x0f, 0x0d, 0x04, '9', '9', '9', '9'};
    at_cl_raw = n + 9 + 2;
    h2_put(buf, &n, 1, 0x4, 1, cl_raw, sizeof(cl_raw));
    /* stream 3: content-length 9999 Huffman-coded (incremental indexing, name 28) */
    static const uint8_t cl_huff[] = {0x83, 0x5c, 0x83, 0x7d, 0xf7, 0xdf};
    at_cl_huff = n + 9 + 1;
    h2_put(buf, &n, 1, 0x4, 3, cl_huff, sizeof(cl_huff));
    /* stream 5: content-length 12, below the limit: left alone */
    static const uint8_t cl_small[] = {0x83, 0x0f, 0x0d, 0x02, '1', '2'};
    at_small = n + 9 + 2;
    h2_put(buf, &n, 1, 0x4, 5, cl_small, sizeof(cl_small));
    /* stream 1's body: 600 bytes, then 600 more cross the limit of 1000, then 100 after */
    h2_put(buf, &n, 0, 0, 1, zeros, 600);
    at_cross = n;
    h2_put(buf, &n, 0, 0, 1, zeros, 600);
    at_after = n;
    h2_put(buf, &n, 0, 0, 1, zeros, 100);
    /* control frames: 3 PINGs and 2 SETTINGS, an ACK of each (not counted), a PRIORITY, an empty DATA */
    for (int i = 0; i < 3; i++)
        h2_put(buf, &n, 6, 0, 0, zeros, 8);
    h2_put(buf, &n, 6, 1, 0, zeros, 8);
    h2_put(buf, &n, 4, 0, 0, zeros, 6);
    h2_put(buf, &n, 4, 0, 0, zeros, 6);
    h2_put(buf, &n, 4, 1, 0, NULL, 0);
    h2_put(buf, &n, 2, 0, 5, zeros, 5);
    h2_put(buf, &n, 0, 0, 5, NULL, 0);
    /* two frames of unknown types (ignored, RFC 9113 4.1): removed, and counted as control frames */
    size_t at_unknown = n;
    h2_put(buf, &n, 0xfa, 0, 0, zeros, 300);
    h2_put(buf, &n, 0x21, 0x3, 7, zeros, 0);
    size_t at_ping = n;
    h2_put(buf, &n, 6, 0, 0, zeros, 8);
    for (int bytewise = 0; bytewise < 2; bytewise++) {
        static char copy[sizeof(buf)];
        size_t len = n;
        memcpy(copy, buf, n);
        pdr_h2guard_t g;
        pdr_h2guard_init(&g, 1 << 20);
        static pdr_h2g_bodies_t slots;
        memset(&slots, 0, sizeof(slots));
        pdr_h2guard_set_body_limit(&g, 1000, &slots);
        int v = PDR_H2G_MORE;
        if (bytewise) { /* a byte at a time, appended to what is kept: as h2o's buffer grows and shrinks */
            len = 0;
            for (size_t k = 0; k < n && v == PDR_H2G_MORE; k++) {
                copy[len] = buf[k];
                size_t from = len++;
                v = pdr_h2guard_feed(&g, copy, from, &len);
            }
        } else {
            v = pdr_h2guard_feed(&g, copy, 0, &len);
        }
        CHECK(v == PDR_H2G_MORE);
        if (!bytewise) { /* the rename needs the whole HEADERS frame in the buffer */
            CHECK((uint8_t)copy[at_cl_raw] == 0x0e);
            CHECK((uint8_t)copy[at_cl_huff] == 0x5d);
        }
        CHECK((uint8_t)copy[at_small] == 0x0d);
        CHECK((uint8_t)copy[at_cross - 600 - 9 + 4] == 0); /* the first 600: as they were */
        CHECK((uint8_t)copy[at_cross + 4] == 0x1);         /* the crossing frame ends the stream */
        /* later DATA of the stream is removed, its window owed; the frames after it move down */
        CHECK(g.window_debt == 100 &&
              memcmp(copy + at_after, buf + at_after + 109, at_unknown - at_after - 109) == 0);
        /* the unknown frames are gone, the PING after them follows the empty DATA */
        CHECK(len == n - 109 - (9 + 300) - 9 && memcmp(copy + at_unknown - 109, buf + at_ping, 17) == 0);
        CHECK(g.bodies_refused == 1 && g.dropped == 3);
        CHECK(g.control == 1 + 3 + 2 + 1 + 1 + 2 + 1);
    }
    /* Without a body limit only the unknown frames leave. */
    static char copy[sizeof(buf)];
    size_t len = n;
    memcpy(copy, buf, n);
    pdr_h2guard_t g;
    pdr_h2guard_init(&g, 1 << 20);
    CHECK(pdr_h2guard_feed(&g, copy, 0, &len) == PDR_H2G_MORE && memcmp(copy, buf, at_unknown) == 0 &&
          len == n - 309 - 9 && memcmp(copy + at_unknown, buf + at_ping, 17) == 0 && g.control == 11);
    /* An unknown frame over 16 384 bytes stays, for h2o to refuse (FRAME_SIZE_ERROR). */
    static char big[9 + 16385];
    len = 0;
    h2_put(big, &len, 0xfa, 0, 0, NULL, 0);
    big[1] = 0x40, big[2] = 0x01;
    len = sizeof(big);
    pdr_h2guard_init(&g, 1 << 20);
    g.preface_left = 0;
    CHECK(pdr_h2guard_feed(&g, big, 0, &len) == PDR_H2G_MORE && len == sizeof(big) && g.dropped == 0);
}

static const pdr_test_case_t cases[] = {
    {"accepted", test_accepted, 60},   {"head_limits", test_head_limits, 60},
    {"smuggling", test_smuggling, 60}, {"chunk_guard", test_chunk_guard, 60},
    {"h2_guard", test_h2_guard, 60},   {"h2_bodies", test_h2_bodies, 60},
    {"scan", test_scan, 60},
};

int main(int argc, char **argv)
{
    return PDR_TEST_RUN(cases, argc, argv);
}
