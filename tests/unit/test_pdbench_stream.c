/* Unit tests for pdbench's stream side (bench/pdbench/stream.c): the SSE splitter fed whole, byte by
 * byte and in odd chunks (CRLF lines, comments, multi-line data, the size limit), and the event
 * scanner on sglang /generate, OpenAI completions and chat chunks, usage chunks, error events,
 * escaped quotes inside the text, cached_tokens (both shapes), pdsim_mono_us, [DONE] and malformed payloads.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "runner.h"
#include "err.h"
#include "pdbench.h"

typedef struct got {
    char events[8][256];
    size_t n;
} got_t;

static int collect(void *arg, const char *d, size_t n)
{
    got_t *g = arg;
    if (g->n < 8 && n < 256) {
        memcpy(g->events[g->n], d, n);
        g->events[g->n][n] = '\0';
    }
    g->n++;
    return 0;
}

static const char stream[] = "data: {\"a\":1}\n\n"
                             ": comment\r\n\r\n"
                             "event: x\r\ndata: {\"b\":2}\r\n\r\n"
                             "data: one\ndata:two\n\n"
                             "id: 3\n\n"
                             "data: [DONE]\n\n"
                             "data: {\"unterminated\":";

static void check_stream(size_t step)
{
    pdb_sse_t s;
    got_t g;
    memset(&g, 0, sizeof(g));
    pdb_sse_init(&s, 1024);
    size_t n = strlen(stream);
    for (size_t i = 0; i < n; i += step)
        CHECK(pdb_sse_feed(&s, stream + i, n - i < step ? n - i : step, collect, &g) == 0);
    CHECK(g.n == 4);
    CHECK(strcmp(g.events[0], "{\"a\":1}") == 0);
    CHECK(strcmp(g.events[1], "{\"b\":2}") == 0);
    CHECK(strcmp(g.events[2], "one\ntwo") == 0);
    CHECK(strcmp(g.events[3], "[DONE]") == 0);
    pdb_sse_free(&s);
}

static void check_limit(void)
{
    pdb_sse_t s;
    got_t g;
    memset(&g, 0, sizeof(g));
    pdb_sse_init(&s, 64);
    char big[200];
    memset(big, 'x', sizeof(big));
    CHECK(pdb_sse_feed(&s, "data: ", 6, collect, &g) == 0);
    CHECK(pdb_sse_feed(&s, big, sizeof(big), collect, &g) == PDR_ETOOBIG);
    pdb_sse_free(&s);
}

static pdb_event_t ev_of(const char *s)
{
    pdb_event_t ev;
    pdb_event_parse(s, strlen(s), &ev);
    return ev;
}

static void check_events(void)
{
    pdb_event_t e = ev_of("{\"text\":\"a \\\"completion_tokens\\\": 99 b\",\"meta_info\":{\"id\":\"x\","
                          "\"finish_reason\":null,\"prompt_tokens\":12,\"completion_tokens\":3}}");
    CHECK(!e.bad_json && !e.error && !e.done && e.completion == 3 && e.prompt == 12 && e.pdsim_mono_us == -1);
    e = ev_of("{\"pdsim_mono_us\":123456,\"text\":\"a\\\\\",\"meta_info\":{\"completion_tokens\":1}}");
    CHECK(!e.bad_json && e.pdsim_mono_us == 123456 && e.completion == 1);
    e = ev_of(" [DONE] ");
    CHECK(e.done);
    e = ev_of("{\"error\":{\"message\":\"boom\",\"code\":500}}");
    CHECK(e.error);
    e = ev_of("{\"object\":\"error\",\"message\":\"bad\"}");
    CHECK(e.error);
    e = ev_of("{\"id\":\"c\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\" w\","
              "\"logprobs\":null,\"finish_reason\":null}]}");
    CHECK(!e.error && e.has_content && e.completion == -1);
    e = ev_of("{\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":\"length\"}]}");
    CHECK(!e.has_content);
    e = ev_of("{\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"hi\"}}]}");
    CHECK(e.has_content);
    e = ev_of("{\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}");
    CHECK(!e.has_content);
    e = ev_of("{\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":5,\"total_tokens\":12}}");
    CHECK(!e.has_content && e.completion == 5 && e.prompt == 7);
    CHECK(e.cached == -1);
    /* The prefix cache's hits: sglang's meta_info.cached_tokens, OpenAI's prompt_tokens_details. */
    e = ev_of("{\"text\":\"\",\"meta_info\":{\"prompt_tokens\":40,\"cached_tokens\":32}}");
    CHECK(e.prompt == 40 && e.cached == 32);
    e = ev_of("{\"choices\":[],\"usage\":{\"prompt_tokens\":70,\"completion_tokens\":5,"
              "\"prompt_tokens_details\":{\"cached_tokens\":64}}}");
    CHECK(e.prompt == 70 && e.cached == 64);
    e = ev_of("{\"usage\":{\"prompt_tokens\":70,\"prompt_tokens_details\":null}}");
    CHECK(e.prompt == 70 && e.cached == -1);
    CHECK(ev_of("not json").bad_json);
    CHECK(ev_of("{\"text\":\"unterminated}").bad_json);
    CHECK(ev_of("{\"a\":1} trailing").bad_json);
    CHECK(ev_of("[1,2]").bad_json);
    CHECK(ev_of("").bad_json);
    CHECK(!ev_of("{}").bad_json);
}

static void test_stream_steps(void)
{
    for (size_t step = 1; step <= sizeof(stream); step++)
        check_stream(step);
}

static void test_dist(void)
{
    pdb_dist_t d = pdb_dist_of((double[]){4, 1, 3, 2, 5}, 5);
    CHECK(d.n == 5 && d.p50 == 3 && d.max == 5 && d.mean == 3 && d.p90 > 4.5 && d.p90 < 4.7);
}

static const pdr_test_case_t cases[] = {
    {"stream_steps", test_stream_steps, 60},
    {"limit", check_limit, 60},
    {"events", check_events, 60},
    {"dist", test_dist, 60},
};

int main(int argc, char **argv)
{
    return PDR_TEST_RUN(cases, argc, argv);
}
