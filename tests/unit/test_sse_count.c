/* Unit tests for the SSE token-event counter (router/obs/metrics.c, pdr_sse_count_tokens): whole events, an
 * event boundary split across chunks, byte-by-byte feeding, [DONE], error events (the router's own and
 * one with spaces), comments and multi-line events, and a long event whose head is cut short. */
#include <stdio.h>
#include <string.h>
#include "check.h"
#include "runner.h"
#include "metrics.h"

static size_t feed(pdr_sse_counter_t *c, const char *s)
{
    return pdr_sse_count_tokens(c, s, strlen(s));
}

/* Feeds s in chunks of `step` bytes and returns the total. */
static size_t feed_split(const char *s, size_t step)
{
    pdr_sse_counter_t c = {0};
    size_t n = strlen(s), total = 0;
    for (size_t i = 0; i < n; i += step)
        total += pdr_sse_count_tokens(&c, s + i, n - i < step ? n - i : step);
    return total;
}

static const char stream[] = "data: {\"text\":\"a\",\"meta_info\":{\"completion_tokens\":1}}\n\n"
                             "data: {\"text\":\"ab\"}\n\n"
                             ": keep-alive\n\n"
                             "data: {\"error\":{\"message\":\"decode stream ended\",\"code\":502}}\n\n"
                             "data:{ \"error\" : 1}\n\n"
                             "event: x\ndata: {\"t\":1}\n\n"
                             "data: {\"text\":\"abc\"}\n\n"
                             "data: [DONE]\n\n";

static void test_whole(void)
{
    pdr_sse_counter_t c = {0};
    CHECK(feed(&c, "") == 0);
    CHECK(feed(&c, stream) == 3);
    CHECK(c.head_len == 0 && c.prev_nl == 0);
}

static void test_splits(void)
{
    /* Every chunk size, so every boundary (in "\n\n", in "data:", in "[DONE]", in "error") is split. */
    for (size_t step = 1; step <= sizeof(stream); step++)
        CHECK(feed_split(stream, step) == 3);
}

static void test_boundary_split(void)
{
    pdr_sse_counter_t c = {0};
    CHECK(feed(&c, "data: {\"a\":1}\n") == 0); /* the first '\n' of the boundary */
    CHECK(feed(&c, "\ndata: [DO") == 1);       /* the second one ends the event */
    CHECK(feed(&c, "NE]\n") == 0);
    CHECK(feed(&c, "\n") == 0); /* [DONE] is not a token */
    CHECK(feed(&c, "data: {\"err") == 0);
    CHECK(feed(&c, "or\":{}}\n\n") == 0); /* an error event is not a token */
    CHECK(feed(&c, "data: {\"b\":2}\n\ndata: {\"c\":3}\n\ndata: {\"d\"") == 2);
    CHECK(feed(&c, ":4}\n\n") == 1);
}

static void test_long_event(void)
{
    char big[4096];
    int k = snprintf(big, sizeof(big), "data: {\"text\":\"");
    memset(big + k, 'x', 3000);
    snprintf(big + k + 3000, sizeof(big) - (size_t)k - 3000, "\"}\n\ndata: [DONE]\n\n");
    CHECK(feed_split(big, 7) == 1);
    CHECK(feed_split(big, 4096) == 1);
    /* Stray blank lines between events count nothing. */
    CHECK(feed_split("\n\n\ndata: {}\n\n\n\n", 1) == 1);
}

static const pdr_test_case_t cases[] = {
    {"whole", test_whole, 60},
    {"splits", test_splits, 60},
    {"boundary_split", test_boundary_split, 60},
    {"long_event", test_long_event, 60},
};

int main(int argc, char **argv)
{
    return PDR_TEST_RUN(cases, argc, argv);
}
