/*
 * The gRPC framing reader and writer (router/epp/grpc_frame.c): messages split at every byte, several in
 * one piece, an empty message, the ceiling, the compressed flag, unknown flags, a stream that ends
 * mid-message.
 */
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "grpc_frame.h"
#include "runner.h"

/* Frames msgs (NUL-terminated strings) into out; returns the length. */
static size_t frame(uint8_t *out, const char *const *msgs, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(msgs[i]);
        pdr_grpc_prefix(out + o, (uint32_t)l);
        memcpy(out + o + PDR_GRPC_PREFIX_LEN, msgs[i], l);
        o += PDR_GRPC_PREFIX_LEN + l;
    }
    return o;
}

/* Feeds wire in pieces of step bytes; checks the messages come out whole and in order. */
static void feed_in_steps(const uint8_t *wire, size_t len, size_t step, const char *const *want, size_t nwant)
{
    pdr_grpc_reader_t r;
    pdr_grpc_reader_init(&r, 1024);
    size_t got = 0;
    for (size_t off = 0; off < len;) {
        size_t piece = len - off < step ? len - off : step;
        const uint8_t *p = wire + off;
        size_t left = piece;
        while (left > 0) {
            const uint8_t *msg = NULL;
            size_t used = 0, mlen = 0;
            pdr_grpc_read_t rc = pdr_grpc_reader_feed(&r, p, left, &used, &msg, &mlen);
            CHECK(rc == PDR_GRPC_NEED_MORE || rc == PDR_GRPC_MESSAGE);
            if (rc == PDR_GRPC_MESSAGE) {
                CHECK(!pdr_grpc_reader_partial(&r));
                CHECK(got < nwant);
                CHECK(mlen == strlen(want[got]) && memcmp(msg, want[got], mlen) == 0);
                got++;
            }
            CHECK(used <= left);
            if (used == 0 && rc == PDR_GRPC_NEED_MORE)
                break;
            p += used;
            left -= used;
        }
        off += piece;
    }
    CHECK(got == nwant);
    CHECK(!pdr_grpc_reader_partial(&r) || got == nwant);
    pdr_grpc_reader_free(&r);
}

static void test_split_everywhere(void)
{
    const char *msgs[] = {"hello", "", "a somewhat longer message of the stream", "x"};
    uint8_t wire[256];
    size_t len = frame(wire, msgs, 4);
    for (size_t step = 1; step <= len; step++)
        feed_in_steps(wire, len, step, msgs, 4);
}

static void test_prefix(void)
{
    uint8_t p[PDR_GRPC_PREFIX_LEN];
    pdr_grpc_prefix(p, 0x01020304u);
    CHECK(p[0] == 0 && p[1] == 1 && p[2] == 2 && p[3] == 3 && p[4] == 4);
}

static pdr_grpc_read_t feed_once(const uint8_t *wire, size_t len, size_t max, size_t *mlen)
{
    pdr_grpc_reader_t r;
    pdr_grpc_reader_init(&r, max);
    const uint8_t *msg = NULL;
    size_t used = 0;
    *mlen = 0;
    pdr_grpc_read_t rc = pdr_grpc_reader_feed(&r, wire, len, &used, &msg, mlen);
    pdr_grpc_reader_free(&r);
    return rc;
}

static void test_ceiling(void)
{
    uint8_t wire[PDR_GRPC_PREFIX_LEN + 16];
    memset(wire, 'a', sizeof(wire));
    pdr_grpc_prefix(wire, 16);
    size_t mlen;
    CHECK(feed_once(wire, sizeof(wire), 16, &mlen) == PDR_GRPC_MESSAGE && mlen == 16);
    CHECK(feed_once(wire, sizeof(wire), 15, &mlen) == PDR_GRPC_TOO_BIG && mlen == 16);
    /* The ceiling is known from the prefix alone: no byte of the message is needed. */
    pdr_grpc_prefix(wire, 0x7fffffffu);
    CHECK(feed_once(wire, PDR_GRPC_PREFIX_LEN, 4u << 20, &mlen) == PDR_GRPC_TOO_BIG && mlen == 0x7fffffffu);
}

static void test_flags(void)
{
    uint8_t wire[PDR_GRPC_PREFIX_LEN + 1] = {1, 0, 0, 0, 1, 'z'};
    size_t mlen;
    CHECK(feed_once(wire, sizeof(wire), 64, &mlen) == PDR_GRPC_COMPRESSED);
    wire[0] = 0x80;
    CHECK(feed_once(wire, sizeof(wire), 64, &mlen) == PDR_GRPC_BAD_FLAGS);
}

static void test_partial(void)
{
    const char *msgs[] = {"partial"};
    uint8_t wire[64];
    size_t len = frame(wire, msgs, 1);
    pdr_grpc_reader_t r;
    pdr_grpc_reader_init(&r, 64);
    const uint8_t *msg;
    size_t used, mlen;
    CHECK(!pdr_grpc_reader_partial(&r));
    CHECK(pdr_grpc_reader_feed(&r, wire, 3, &used, &msg, &mlen) == PDR_GRPC_NEED_MORE && used == 3);
    CHECK(pdr_grpc_reader_partial(&r));
    CHECK(pdr_grpc_reader_feed(&r, wire + 3, len - 4, &used, &msg, &mlen) == PDR_GRPC_NEED_MORE);
    CHECK(pdr_grpc_reader_partial(&r));
    CHECK(pdr_grpc_reader_feed(&r, wire + len - 1, 1, &used, &msg, &mlen) == PDR_GRPC_MESSAGE);
    CHECK(mlen == 7 && memcmp(msg, "partial", 7) == 0);
    CHECK(!pdr_grpc_reader_partial(&r));
    /* The next feed starts a new message: the last one is no longer partial. */
    CHECK(pdr_grpc_reader_feed(&r, wire, 0, &used, &msg, &mlen) == PDR_GRPC_NEED_MORE);
    CHECK(!pdr_grpc_reader_partial(&r));
    pdr_grpc_reader_free(&r);
}

static const pdr_test_case_t cases[] = {
    {"split_everywhere", test_split_everywhere, 30},
    {"prefix", test_prefix, 10},
    {"ceiling", test_ceiling, 10},
    {"flags", test_flags, 10},
    {"partial", test_partial, 10},
};

int main(int argc, char **argv)
{
    return PDR_TEST_RUN(cases, argc, argv);
}
