/* Unit tests for conditional disaggregation's rule and prompt measure (router/workers/disagg.c), and the
 * plain body a worker receives when its request skips the prefill (router/util/rewrite.c). */
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "check.h"
#include "runner.h"
#include "config.h"
#include "disagg.h"
#include "rewrite.h"

static pdr_disagg_input_t measure(const char *text, size_t matched)
{
    pdr_disagg_input_t in;
    pdr_disagg_measure(text, text ? strlen(text) : 0, matched, &in);
    return in;
}

static void test_measure(void)
{
    /* Text: bytes of the JSON text; matched bytes as given, at most the length. */
    pdr_disagg_input_t in = measure("\"hello world\"", 4);
    CHECK(!in.tokens && in.length == 13 && in.matched == 4);
    in = measure("\"ab\"", 99);
    CHECK(in.matched == 4);
    in = measure("[{\"role\":\"user\",\"content\":\"x\"}]", 0);
    CHECK(!in.tokens && in.length == 31);
    in = measure("[\"a\",\"b\"]", 0); /* a batch of strings is text */
    CHECK(!in.tokens);
    in = measure(NULL, 0);
    CHECK(in.length == 0 && in.matched == 0);
}

static void test_token_ids(void)
{
    /* Token ids: integers counted, matched = those wholly inside the matched bytes. */
    pdr_disagg_input_t in = measure("[101, 2023, 7, 99]", 0);
    CHECK(in.tokens && in.length == 4 && in.matched == 0);
    in = measure("[101, 2023, 7, 99]", 5); /* "[101," : 101 complete */
    CHECK(in.matched == 1);
    in = measure("[101, 2023, 7, 99]", 8); /* "[101, 20": 2023 cut */
    CHECK(in.matched == 1);
    in = measure("[101, 2023, 7, 99]", 18); /* all, the last one ended by ']' */
    CHECK(in.matched == 4);
    in = measure(" [ [1,2], [3] ]", 0);
    CHECK(in.tokens && in.length == 3);
}

static void test_rule(void)
{
    /* The rule. */
    pdr_config_t *c = pdr_config_new_default();
    CHECK(c != NULL && !pdr_disagg_enabled(c));
    pdr_disagg_input_t t = {.tokens = 1, .length = 300, .matched = 0};
    CHECK(pdr_disagg_decide(c, &t) == PDR_DISAGG_DISAGGREGATED); /* off */
    c->disaggregation.min_prefill_tokens = 256;
    CHECK(pdr_disagg_enabled(c));
    CHECK(pdr_disagg_decide(c, &t) == PDR_DISAGG_DISAGGREGATED);
    t.matched = 45; /* 255 uncached */
    CHECK(pdr_disagg_decide(c, &t) == PDR_DISAGG_SHORT_PROMPT);
    t.matched = 44; /* 256: not below */
    CHECK(pdr_disagg_decide(c, &t) == PDR_DISAGG_DISAGGREGATED);
    t.matched = 400; /* more than the prompt (a stale count): nothing uncached */
    CHECK(pdr_disagg_decide(c, &t) == PDR_DISAGG_SHORT_PROMPT);
    pdr_disagg_input_t x = {.tokens = 0, .length = 10, .matched = 0};
    CHECK(pdr_disagg_decide(c, &x) == PDR_DISAGG_DISAGGREGATED); /* chars threshold 0: off for text */
    c->disaggregation.min_prefill_chars = 11;
    CHECK(pdr_disagg_decide(c, &x) == PDR_DISAGG_SHORT_PROMPT);
    x.length = 1000;
    x.prefill_saturated = 1;
    CHECK(pdr_disagg_decide(c, &x) == PDR_DISAGG_DISAGGREGATED); /* saturation not asked for */
    c->disaggregation.skip_when_prefill_saturated = 1;
    CHECK(pdr_disagg_decide(c, &x) == PDR_DISAGG_PREFILL_SATURATED);
    x.length = 5; /* both hold: the prompt's rule is named */
    CHECK(pdr_disagg_decide(c, &x) == PDR_DISAGG_SHORT_PROMPT);
    CHECK(strcmp(pdr_disagg_decision_names[PDR_DISAGG_PREFILL_SATURATED], "prefill_saturated") == 0);
    pdr_config_unref(c);
}

static void test_plain_body(void)
{
    /* The plain body: bootstrap fields and kv_transfer_params (escaped spellings too) dropped, the rest
     * byte for byte. */
    const char *body = "{\"text\":\"hi\",\"bootstrap_room\":5,\"kv_transfer_params\":{\"a\":1},"
                       "\"bootstrap_\\u0068ost\":\"x\",\"stream\":true}";
    pdr_pdreq_t r;
    char err[256];
    CHECK(pdr_pdreq_parse(PDR_ROUTE_GENERATE, body, strlen(body), &r, err, sizeof(err)) == 0);
    size_t len;
    char *plain = pdr_pdreq_build_plain(&r, -1, &len);
    CHECK(plain != NULL && strcmp(plain, "{\"text\":\"hi\",\"stream\":true}") == 0 && len == strlen(plain));
    free(plain);
    pdr_pdreq_clear(&r);
    CHECK(pdr_pdreq_parse(PDR_ROUTE_GENERATE, "{\"bootstrap_room\":1,\"text\":\"a\"}", 31, &r, err,
                          sizeof(err)) == 0);
    plain = pdr_pdreq_build_plain(&r, -1, &len);
    CHECK(plain != NULL && strcmp(plain, "{\"text\":\"a\"}") == 0);
    free(plain);
    pdr_pdreq_clear(&r);
    /* With a data-parallel rank: the client's data_parallel_rank replaced by the router's. */
    body = "{\"text\":\"hi\",\"data_parallel_rank\":7}";
    CHECK(pdr_pdreq_parse(PDR_ROUTE_GENERATE, body, strlen(body), &r, err, sizeof(err)) == 0);
    plain = pdr_pdreq_build_plain(&r, 3, &len);
    CHECK(plain != NULL && strcmp(plain, "{\"text\":\"hi\",\"data_parallel_rank\":3}") == 0);
    free(plain);
    plain = pdr_pdreq_build_plain(&r, -1, &len); /* no rank: the client's stays */
    CHECK(plain != NULL && strcmp(plain, body) == 0);
    free(plain);
    uint64_t rooms[1] = {42};
    char *b = pdr_pdreq_build_body_rank(&r, "10.0.0.1", 8998, rooms, 1, &len);
    json_t *j = b != NULL ? json_loads(b, 0, NULL) : NULL;
    CHECK(j != NULL && json_integer_value(json_object_get(j, "data_parallel_rank")) == 1 &&
          json_integer_value(json_object_get(j, "bootstrap_room")) == 42 && json_object_size(j) == 5);
    json_decref(j);
    free(b);
    pdr_pdreq_clear(&r);
}

static const pdr_test_case_t cases[] = {
    {"measure", test_measure, 60},
    {"token_ids", test_token_ids, 60},
    {"rule", test_rule, 60},
    {"plain_body", test_plain_body, 60},
};

int main(int argc, char **argv)
{
    return PDR_TEST_RUN(cases, argc, argv);
}
