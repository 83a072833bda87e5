/* Unit tests for the PD request rewrite: validation, batch shape, bootstrap injection, logprob merge. */
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "runner.h"
#include "err.h"
#include "rewrite.h"

static json_t *build(pdr_route_t route, const char *body, const char *host, int port, const uint64_t *rooms)
{
    pdr_pdreq_t r;
    char err[256];
    if (pdr_pdreq_parse(route, body, strlen(body), &r, err, sizeof(err)) != 0) {
        fprintf(stderr, "unexpected parse error: %s\n", err);
        return NULL;
    }
    size_t len;
    char *s = pdr_pdreq_build_body(&r, host, port, rooms, &len);
    json_t *j = json_loads(s, 0, NULL);
    free(s);
    pdr_pdreq_clear(&r);
    return j;
}

static int rejects(pdr_route_t route, const char *body, const char *needle)
{
    pdr_pdreq_t r;
    char err[256] = "";
    int rc = pdr_pdreq_parse(route, body, strlen(body), &r, err, sizeof(err));
    if (rc == 0) {
        pdr_pdreq_clear(&r);
        fprintf(stderr, "accepted: %s\n", body);
        return 0;
    }
    if (strstr(err, needle) == NULL) {
        fprintf(stderr, "message '%s' lacks '%s'\n", err, needle);
        return 0;
    }
    return rc == PDR_EINVAL;
}

static void test_injection(void)
{
    uint64_t rooms[1] = {(1ull << 63) - 1};
    /* The client's own bootstrap fields are overwritten, other fields kept. */
    json_t *j =
        build(PDR_ROUTE_GENERATE,
              "{\"text\":\"hi\",\"bootstrap_host\":\"10.9.9.9\",\"bootstrap_port\":1,\"bootstrap_room\":5,"
              "\"sampling_params\":{\"max_new_tokens\":4}}",
              "127.0.0.1", 8998, rooms);
    CHECK(j != NULL);
    CHECK(strcmp(json_string_value(json_object_get(j, "bootstrap_host")), "127.0.0.1") == 0);
    CHECK(json_integer_value(json_object_get(j, "bootstrap_port")) == 8998);
    CHECK((uint64_t)json_integer_value(json_object_get(j, "bootstrap_room")) == rooms[0]);
    CHECK(json_integer_value(json_object_get(json_object_get(j, "sampling_params"), "max_new_tokens")) == 4);
    json_decref(j);

    /* No bootstrap port: JSON null. IPv6 hosts arrive bracketed from the pool. */
    j = build(PDR_ROUTE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "[::1]", -1, rooms);
    CHECK(json_is_null(json_object_get(j, "bootstrap_port")));
    CHECK(strcmp(json_string_value(json_object_get(j, "bootstrap_host")), "[::1]") == 0);
    json_decref(j);
}

static void test_splice(void)
{
    uint64_t rooms[1] = {42};
    pdr_pdreq_t r;
    char err[256];
    /* An escaped spelling of a bootstrap field is the same key: it is dropped too. */
    const char *b = "{ \"text\" : \"h\\u00e9llo \\\"x\\\"\" , \"bootstrap\\u005froom\":7, \"extra\": [1, "
                    "{\"a\": null}] }";
    CHECK(pdr_pdreq_parse(PDR_ROUTE_GENERATE, b, strlen(b), &r, err, sizeof(err)) == 0);
    size_t len;
    char *s = pdr_pdreq_build_body(&r, "10.0.0.1", 8998, rooms, &len);
    CHECK(s != NULL && strlen(s) == len);
    /* The client's members are copied byte for byte; the router's fields come last, once each. */
    CHECK(strcmp(s, "{\"text\" : \"h\\u00e9llo \\\"x\\\"\",\"extra\": [1, {\"a\": null}],"
                    "\"bootstrap_host\":\"10.0.0.1\",\"bootstrap_port\":8998,\"bootstrap_room\":42}") == 0);
    json_t *j = json_loads(s, JSON_REJECT_DUPLICATES, NULL);
    CHECK(j != NULL && json_integer_value(json_object_get(j, "bootstrap_room")) == 42);
    json_decref(j);
    free(s);
    pdr_pdreq_clear(&r);
}

static void test_batch(void)
{
    uint64_t rooms[3] = {11, 22, 33};
    pdr_pdreq_t r;
    char err[256];
    const char *b = "{\"text\":[\"a\",\"b\",\"c\"]}";
    CHECK(pdr_pdreq_parse(PDR_ROUTE_GENERATE, b, strlen(b), &r, err, sizeof(err)) == 0);
    CHECK(r.batch == 3);
    pdr_pdreq_clear(&r);
    json_t *j = build(PDR_ROUTE_GENERATE, b, "h", 1, rooms);
    json_t *rm = json_object_get(j, "bootstrap_room");
    CHECK(json_is_array(rm) && json_array_size(rm) == 3);
    CHECK(json_integer_value(json_array_get(rm, 2)) == 33);
    CHECK(json_array_size(json_object_get(j, "bootstrap_host")) == 3);
    CHECK(json_array_size(json_object_get(j, "bootstrap_port")) == 3);
    json_decref(j);

    const char *ids = "{\"input_ids\":[[1,2],[3]]}";
    CHECK(pdr_pdreq_parse(PDR_ROUTE_GENERATE, ids, strlen(ids), &r, err, sizeof(err)) == 0 && r.batch == 2);
    pdr_pdreq_clear(&r);
    const char *one = "{\"input_ids\":[1,2,3]}";
    CHECK(pdr_pdreq_parse(PDR_ROUTE_GENERATE, one, strlen(one), &r, err, sizeof(err)) == 0 && r.batch == 0);
    pdr_pdreq_clear(&r);
    const char *pr = "{\"prompt\":[\"a\",\"b\"]}";
    CHECK(pdr_pdreq_parse(PDR_ROUTE_COMPLETIONS, pr, strlen(pr), &r, err, sizeof(err)) == 0 && r.batch == 2);
    pdr_pdreq_clear(&r);
    const char *tok = "{\"prompt\":[5,6,7]}";
    CHECK(pdr_pdreq_parse(PDR_ROUTE_COMPLETIONS, tok, strlen(tok), &r, err, sizeof(err)) == 0 &&
          r.batch == 0);
    pdr_pdreq_clear(&r);
    const char *n = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":4}";
    CHECK(pdr_pdreq_parse(PDR_ROUTE_CHAT, n, strlen(n), &r, err, sizeof(err)) == 0 && r.batch == 4);
    pdr_pdreq_clear(&r);
}

static void test_validation(void)
{
    CHECK(rejects(PDR_ROUTE_GENERATE, "{\"text\":", "malformed JSON"));
    CHECK(rejects(PDR_ROUTE_GENERATE, "[1,2]", "JSON object"));
    CHECK(rejects(PDR_ROUTE_GENERATE, "", "empty"));
    CHECK(rejects(PDR_ROUTE_GENERATE, "{\"text\":1}", "'text'"));
    CHECK(rejects(PDR_ROUTE_GENERATE, "{\"text\":[\"a\",2]}", "'text'"));
    CHECK(rejects(PDR_ROUTE_GENERATE, "{}", "required"));
    CHECK(rejects(PDR_ROUTE_GENERATE, "{\"text\":\"a\",\"stream\":\"yes\"}", "'stream'"));
    CHECK(rejects(PDR_ROUTE_GENERATE, "{\"text\":\"a\",\"return_logprob\":1}", "'return_logprob'"));
    CHECK(rejects(PDR_ROUTE_GENERATE, "{\"input_ids\":[[1],[\"x\"]]}", "'input_ids'"));
    CHECK(rejects(PDR_ROUTE_GENERATE, "{\"text\":\"a\",\"text\":\"b\"}", "duplicate key"));
    CHECK(rejects(PDR_ROUTE_COMPLETIONS, "{\"model\":\"m\"}", "'prompt'"));
    CHECK(rejects(PDR_ROUTE_COMPLETIONS, "{\"prompt\":\"a\",\"max_tokens\":\"9\"}", "'max_tokens'"));
    CHECK(rejects(PDR_ROUTE_COMPLETIONS, "{\"prompt\":\"a\",\"model\":3}", "'model'"));
    CHECK(rejects(PDR_ROUTE_CHAT, "{\"messages\":[]}", "'messages'"));
    CHECK(rejects(PDR_ROUTE_CHAT, "{\"messages\":[1]}", "items must all be objects"));
#define MSG "{\"role\":\"user\",\"content\":\"x\"}"
    CHECK(rejects(PDR_ROUTE_CHAT, "{\"messages\":[" MSG "],\"n\":0}", "'n'"));
    CHECK(rejects(PDR_ROUTE_CHAT, "{\"messages\":[" MSG "],\"n\":129}",
                  "'n' must be an integer between 1 and 128"));
    CHECK(rejects(PDR_ROUTE_CHAT, "{\"messages\":[" MSG "],\"logprobs\":\"x\"}", "'logprobs'"));
#undef MSG
}

/* Bodies whose prompt sglang would read differently from the router are refused, naming the fields. */
static void test_prompt_forms(void)
{
    CHECK(rejects(PDR_ROUTE_GENERATE, "{\"text\":\"a\",\"input_ids\":[[1],[2]]}",
                  "give only one of 'text', 'input_ids' or 'input_embeds' (this request has 'text' and "
                  "'input_ids')"));
    CHECK(rejects(PDR_ROUTE_GENERATE, "{\"input_ids\":[1],\"input_embeds\":[[0.5]]}",
                  "(this request has 'input_ids' and 'input_embeds')"));
    CHECK(rejects(PDR_ROUTE_GENERATE, "{\"text\":[\"a\"],\"input_ids\":[1],\"input_embeds\":[[0.5]]}",
                  "(this request has 'text' and 'input_ids' and 'input_embeds')"));
    /* null is absent, as for the engine. */
    pdr_pdreq_t r;
    char err[256];
    const char *b = "{\"text\":null,\"input_ids\":[[1],[2]]}";
    CHECK(pdr_pdreq_parse(PDR_ROUTE_GENERATE, b, strlen(b), &r, err, sizeof(err)) == 0 && r.batch == 2);
    pdr_pdreq_clear(&r);

    /* input_ids: integers, or non-empty lists of integers; nothing else. */
    static const char *const bad_ids[] = {
        "{\"input_ids\":[]}",      "{\"input_ids\":[[]]}",    "{\"input_ids\":[[1],[]]}",
        "{\"input_ids\":[1,[2]]}", "{\"input_ids\":[[1],2]}", "{\"input_ids\":[1.5]}",
        "{\"input_ids\":[[1.5]]}", "{\"input_ids\":\"1 2\"}", "{\"input_ids\":[[[1]]]}",
        "{\"input_ids\":[\"1\"]}", "{\"input_ids\":{}}",      "{\"input_ids\":7}",
    };
    for (size_t i = 0; i < sizeof(bad_ids) / sizeof(bad_ids[0]); i++)
        CHECK(rejects(PDR_ROUTE_GENERATE, bad_ids[i], "'input_ids' must be a non-empty array"));
    CHECK(rejects(PDR_ROUTE_GENERATE, "{\"text\":[]}", "'text'"));
    CHECK(rejects(PDR_ROUTE_GENERATE, "{\"text\":[[\"a\"]]}", "'text'"));

    /* input_embeds: a list of vectors is one prompt, a list of those a batch. */
    b = "{\"input_embeds\":[[0.5,1],[2,3e-2]]}";
    CHECK(pdr_pdreq_parse(PDR_ROUTE_GENERATE, b, strlen(b), &r, err, sizeof(err)) == 0 && r.batch == 0);
    pdr_pdreq_clear(&r);
    b = "{\"input_embeds\":[[[0.5]],[[1]],[[2]]]}";
    CHECK(pdr_pdreq_parse(PDR_ROUTE_GENERATE, b, strlen(b), &r, err, sizeof(err)) == 0 && r.batch == 3);
    pdr_pdreq_clear(&r);
    CHECK(rejects(PDR_ROUTE_GENERATE, "{\"input_embeds\":[0.5]}", "'input_embeds'"));
    CHECK(rejects(PDR_ROUTE_GENERATE, "{\"input_embeds\":[[]]}", "'input_embeds'"));
    CHECK(rejects(PDR_ROUTE_GENERATE, "{\"input_embeds\":[[\"a\"]]}", "'input_embeds'"));
}

/* n on completions is validated like chat's; it does not change the batch (one prefill per prompt). */
static void test_completions_n(void)
{
    pdr_pdreq_t r;
    char err[256];
    const char *b = "{\"prompt\":\"a\",\"n\":3}";
    CHECK(pdr_pdreq_parse(PDR_ROUTE_COMPLETIONS, b, strlen(b), &r, err, sizeof(err)) == 0 && r.batch == 0);
    pdr_pdreq_clear(&r);
    b = "{\"prompt\":[\"a\",\"b\"],\"n\":128}";
    CHECK(pdr_pdreq_parse(PDR_ROUTE_COMPLETIONS, b, strlen(b), &r, err, sizeof(err)) == 0 && r.batch == 2);
    pdr_pdreq_clear(&r);
    b = "{\"prompt\":\"a\",\"n\":null}";
    CHECK(pdr_pdreq_parse(PDR_ROUTE_COMPLETIONS, b, strlen(b), &r, err, sizeof(err)) == 0);
    pdr_pdreq_clear(&r);
    static const char *const bad[] = {"0",     "-1",   "129", "1.0",
                                      "\"2\"", "true", "[2]", "99999999999999999999"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char body[96];
        snprintf(body, sizeof(body), "{\"prompt\":\"a\",\"n\":%s}", bad[i]);
        CHECK(rejects(PDR_ROUTE_COMPLETIONS, body, "'n' must be an integer between 1 and 128"));
    }
}

/* Chat messages: role a string, content a string, null or an array of content parts. */
static void test_messages(void)
{
    static const char *const good[] = {
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
        "{\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[]}]}",
        "{\"messages\":[{\"role\":\"assistant\"}]}",
        "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"x\"}]}]}",
        "{\"messages\":[{\"role\":\"user\",\"content\":[]}]}",
        "{\"messages\":[ { \"content\" : \"x\" , \"r\\u006fle\" : \"user\" } ]}",
    };
    pdr_pdreq_t r;
    char err[256];
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        int rc = pdr_pdreq_parse(PDR_ROUTE_CHAT, good[i], strlen(good[i]), &r, err, sizeof(err));
        if (rc != 0)
            fprintf(stderr, "refused %s: %s\n", good[i], err);
        CHECK(rc == 0);
        pdr_pdreq_clear(&r);
    }
    CHECK(rejects(PDR_ROUTE_CHAT, "{\"messages\":[{\"content\":\"x\"}]}", "'messages[0].role' is required"));
    CHECK(rejects(PDR_ROUTE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":1}]}",
                  "'messages[1].role' must be a string"));
    CHECK(rejects(PDR_ROUTE_CHAT, "{\"messages\":[{\"role\":null}]}", "'messages[0].role' must be a string"));
    /* A repeated key: the last one is what a parser keeps, so every one must be valid. */
    CHECK(rejects(PDR_ROUTE_CHAT, "{\"messages\":[{\"role\":\"user\",\"role\":[]}]}",
                  "'messages[0].role' must be a string"));
    static const char *const bad_content[] = {"1", "true", "{}", "[\"x\"]", "[{},\"x\"]", "[[]]"};
    for (size_t i = 0; i < sizeof(bad_content) / sizeof(bad_content[0]); i++) {
        char body[128];
        snprintf(body, sizeof(body),
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},"
                 "{\"role\":\"user\",\"content\":%s}]}",
                 bad_content[i]);
        CHECK(rejects(PDR_ROUTE_CHAT, body,
                      "'messages[1].content' must be a string, null or an array of content parts (objects)"));
    }
}

/* Numbers a parser would read as infinity are refused wherever they are. */
static void test_non_finite(void)
{
    CHECK(rejects(PDR_ROUTE_GENERATE, "{\"text\":\"a\",\"sampling_params\":{\"temperature\":1e999}}",
                  "number out of range at byte 45"));
    CHECK(rejects(PDR_ROUTE_COMPLETIONS, "{\"prompt\":\"a\",\"top_p\":-2e308}", "number out of range"));
    CHECK(rejects(PDR_ROUTE_CHAT,
                  "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":{\"1\":1.8e308}}",
                  "number out of range"));
    /* Finite extremes and underflow to zero pass. */
    pdr_pdreq_t r;
    char err[256];
    const char *b = "{\"text\":\"a\",\"sampling_params\":{\"x\":1.7976931348623157e308,\"y\":1e-999}}";
    CHECK(pdr_pdreq_parse(PDR_ROUTE_GENERATE, b, strlen(b), &r, err, sizeof(err)) == 0);
    pdr_pdreq_clear(&r);
}

static void test_logprob_merge(void)
{
    json_t *d = json_loads("{\"text\":\"x\",\"meta_info\":{\"input_token_logprobs\":[[-0.5,3,null]],"
                           "\"output_token_logprobs\":[[-1,9,null]]}}",
                           0, NULL);
    json_t *p = json_loads(
        "{\"text\":\"\",\"meta_info\":{\"input_token_logprobs\":[[-0.1,1,null],[-0.2,2,null]]}}", 0, NULL);
    CHECK(pdr_merge_logprobs(d, p) == 1);
    json_t *l = json_object_get(json_object_get(d, "meta_info"), "input_token_logprobs");
    CHECK(json_array_size(l) == 3);
    CHECK(json_integer_value(json_array_get(json_array_get(l, 0), 1)) == 1);
    CHECK(json_integer_value(json_array_get(json_array_get(l, 2), 1)) == 3);
    CHECK(json_array_size(json_object_get(json_object_get(d, "meta_info"), "output_token_logprobs")) == 1);
    json_decref(d);

    /* Arrays merge element by element; a streamed chunk picks its item by "index". */
    json_t *da = json_loads("[{\"meta_info\":{\"input_token_logprobs\":[]}},{\"meta_info\":{}}]", 0, NULL);
    json_t *pa = json_loads("[{\"meta_info\":{\"input_token_logprobs\":[[-1,7,null]]}},"
                            "{\"meta_info\":{\"input_token_logprobs\":[[-1,8,null]]}}]",
                            0, NULL);
    CHECK(pdr_merge_logprobs(da, pa) == 1);
    CHECK(json_integer_value(json_array_get(
              json_array_get(json_object_get(json_object_get(json_array_get(da, 1), "meta_info"),
                                             "input_token_logprobs"),
                             0),
              1)) == 8);
    json_t *chunk = json_loads("{\"index\":1,\"meta_info\":{\"input_token_logprobs\":[]}}", 0, NULL);
    CHECK(pdr_merge_logprobs(chunk, pa) == 1);
    CHECK(json_integer_value(json_array_get(
              json_array_get(json_object_get(json_object_get(chunk, "meta_info"), "input_token_logprobs"), 0),
              1)) == 8);
    json_decref(chunk);
    json_decref(da);
    json_decref(pa);

    /* Nothing to merge without the prefill's logprobs. */
    json_t *d2 = json_loads("{\"meta_info\":{}}", 0, NULL);
    json_t *p2 = json_loads("{\"meta_info\":{}}", 0, NULL);
    CHECK(pdr_merge_logprobs(d2, p2) == 0);
    json_decref(d2);
    json_decref(p2);
    json_decref(p);
}

static void test_sse(void)
{
    const char *b = "data: {\"a\":1}\n\ndata: [DONE]\n\n";
    size_t n;
    const char *d = pdr_sse_first_data(b, strlen(b), &n);
    CHECK(d != NULL && n == 7 && memcmp(d, "{\"a\":1}", 7) == 0);
    CHECK(pdr_sse_first_data("data: [DONE]\n\n", 14, &n) == NULL);
    CHECK(pdr_sse_first_data("", 0, &n) == NULL);
}

static json_t *vllm(pdr_route_t route, const char *body, pdr_vllm_body_t kind, const char *kv)
{
    pdr_pdreq_t r;
    char err[256];
    if (pdr_pdreq_parse(route, body, strlen(body), &r, err, sizeof(err)) != 0) {
        fprintf(stderr, "unexpected parse error: %s\n", err);
        return NULL;
    }
    size_t len;
    char *s = pdr_pdreq_build_vllm(&r, kind, kv, kv ? strlen(kv) : 0, &len);
    json_error_t jerr;
    json_t *j = json_loadb(s, len, JSON_REJECT_DUPLICATES, &jerr);
    if (j == NULL)
        fprintf(stderr, "bad body %s: %s\n", s, jerr.text);
    CHECK(s != NULL && strlen(s) == len);
    free(s);
    pdr_pdreq_clear(&r);
    return j;
}

static void test_vllm_bodies(void)
{
    const char *chat =
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":true,"
        "\"stream_options\":{\"include_usage\":true},\"max_tokens\":50,\"max_completion_tokens\":40,"
        "\"min_tokens\":3,\"temperature\":0.5,"
        "\"kv_transfer_params\":{\"do_remote_prefill\":true,\"remote_host\":\"10.6.6.6\"}}";
    /* The prefill: one token, no stream, the router's request for a remote decode, the rest kept. */
    json_t *j = vllm(PDR_ROUTE_CHAT, chat, PDR_VLLM_PREFILL, NULL);
    CHECK(j != NULL);
    CHECK(json_is_false(json_object_get(j, "stream")));
    CHECK(json_object_get(j, "stream_options") == NULL && json_object_get(j, "min_tokens") == NULL);
    CHECK(json_integer_value(json_object_get(j, "max_tokens")) == 1);
    CHECK(json_integer_value(json_object_get(j, "max_completion_tokens")) == 1);
    CHECK(json_real_value(json_object_get(j, "temperature")) == 0.5);
    CHECK(strcmp(json_string_value(json_object_get(j, "model")), "m") == 0);
    json_t *kv = json_object_get(j, "kv_transfer_params");
    json_t *want =
        json_loads("{\"do_remote_decode\":true,\"do_remote_prefill\":false,\"remote_engine_id\":null,"
                   "\"remote_block_ids\":null,\"remote_host\":null,\"remote_port\":null}",
                   0, NULL);
    CHECK(json_equal(kv, want));
    json_decref(want);
    json_decref(j);

    /* max_completion_tokens only when the client sent it (even as null). */
    const char *comp = "{\"prompt\":\"a b\",\"max_tokens\":7}";
    j = vllm(PDR_ROUTE_COMPLETIONS, comp, PDR_VLLM_PREFILL, NULL);
    CHECK(j != NULL && json_object_get(j, "max_completion_tokens") == NULL);
    CHECK(json_integer_value(json_object_get(j, "max_tokens")) == 1 &&
          json_is_false(json_object_get(j, "stream")));
    json_decref(j);
    j = vllm(PDR_ROUTE_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"max_completion_tokens\":null}",
             PDR_VLLM_PREFILL, NULL);
    CHECK(j != NULL && json_integer_value(json_object_get(j, "max_completion_tokens")) == 1);
    json_decref(j);
    /* An escaped spelling of a key the router sets is dropped too (no duplicate key reaches the worker). */
    j = vllm(PDR_ROUTE_COMPLETIONS, "{\"prompt\":\"a\",\"max_token\\u0073\":9,\"str\\u0065am\":true}",
             PDR_VLLM_PREFILL, NULL);
    CHECK(j != NULL && json_integer_value(json_object_get(j, "max_tokens")) == 1);
    json_decref(j);

    /* The decode: the client's body as sent, kv_transfer_params the prefill's object byte for byte. */
    const char *pkv =
        "{\"do_remote_prefill\":true,\"do_remote_decode\":false,\"remote_block_ids\":[1,2],"
        "\"remote_engine_id\":\"e\",\"remote_host\":\"10.0.0.1\",\"remote_port\":5600,\"tp_size\":1}";
    j = vllm(PDR_ROUTE_CHAT, chat, PDR_VLLM_DECODE, pkv);
    CHECK(j != NULL);
    CHECK(json_is_true(json_object_get(j, "stream")) && json_object_get(j, "stream_options") != NULL);
    CHECK(json_integer_value(json_object_get(j, "max_tokens")) == 50);
    CHECK(json_integer_value(json_object_get(j, "min_tokens")) == 3);
    want = json_loads(pkv, 0, NULL);
    CHECK(json_equal(json_object_get(j, "kv_transfer_params"), want));
    json_decref(j);

    /* The release: one token, not streamed, with the prefill's object. */
    j = vllm(PDR_ROUTE_CHAT, chat, PDR_VLLM_RELEASE, pkv);
    CHECK(j != NULL);
    CHECK(json_is_false(json_object_get(j, "stream")) && json_object_get(j, "stream_options") == NULL);
    CHECK(json_integer_value(json_object_get(j, "max_tokens")) == 1);
    CHECK(json_integer_value(json_object_get(j, "max_completion_tokens")) == 1);
    CHECK(json_equal(json_object_get(j, "kv_transfer_params"), want));
    json_decref(want);
    json_decref(j);
}

static int kv_of(const char *answer, const char **kv, size_t *n, char *err)
{
    return pdr_vllm_kv_params(answer, strlen(answer), kv, n, err, 256);
}

static void test_vllm_answer(void)
{
    const char *kv;
    size_t n;
    char err[256];
    const char *a =
        "{\"id\":\"x\",\"choices\":[{\"text\":\"t\"}],\"kv_transfer_params\": {\"do_remote_prefill\":true,"
        "\"remote_block_ids\":[3],\"remote_host\":\"h\",\"remote_port\":1} ,\"usage\":{}}";
    CHECK(kv_of(a, &kv, &n, err) == 0);
    CHECK(n > 0 && kv[0] == '{' && kv[n - 1] == '}' && memcmp(kv, "{\"do_remote_prefill\":true,", 26) == 0);
    CHECK(kv_of("{\"choices\":[]}", &kv, &n, err) == PDR_EINVAL &&
          strstr(err, "no kv_transfer_params") != NULL);
    CHECK(kv_of("{\"kv_transfer_params\":null}", &kv, &n, err) == PDR_EINVAL);
    CHECK(kv_of("{\"kv_transfer_params\":[1]}", &kv, &n, err) == PDR_EINVAL);
    CHECK(kv_of("{\"kv_transfer_params\":{}}", &kv, &n, err) == PDR_EINVAL &&
          strstr(err, "do_remote_prefill"));
    CHECK(kv_of("{\"kv_transfer_params\":{\"do_remote_prefill\":false}}", &kv, &n, err) == PDR_EINVAL);
    CHECK(kv_of("{\"kv_transfer_params\":{\"do_remote_prefill\":true", &kv, &n, err) == PDR_EINVAL &&
          strstr(err, "not a JSON object") != NULL);
    CHECK(kv_of("", &kv, &n, err) == PDR_EINVAL);
    CHECK(kv_of("[]", &kv, &n, err) == PDR_EINVAL);
}

/* protocol pdshim: the router's pd_ticket after the bootstrap fields (an array in a batch, one per room);
 * a client's pd_ticket is dropped by every builder, tickets or not. */
static void test_tickets(void)
{
    uint64_t rooms[2] = {11, 22};
    const char *tk[2] = {"pt1.0011aabb.AAAA.x-_", "pt1.0011aabb.BBBB.y-_"};
    pdr_pdreq_t r;
    char err[256];
    size_t len;
    /* An escaped spelling is the same key: dropped too. */
    const char *b = "{\"text\":\"hi\",\"pd\\u005fticket\":\"pt1.client\"}";
    CHECK(pdr_pdreq_parse(PDR_ROUTE_GENERATE, b, strlen(b), &r, err, sizeof(err)) == 0);
    char *s = pdr_pdreq_build_body_ticket(&r, "10.0.0.1", 8998, rooms, -1, tk, &len);
    CHECK(s != NULL && strlen(s) == len);
    CHECK(s != NULL && strcmp(s, "{\"text\":\"hi\",\"bootstrap_host\":\"10.0.0.1\",\"bootstrap_port\":8998,"
                                 "\"bootstrap_room\":11,\"pd_ticket\":\"pt1.0011aabb.AAAA.x-_\"}") == 0);
    free(s);
    s = pdr_pdreq_build_body(&r, "10.0.0.1", 8998, rooms, &len);
    CHECK(s != NULL && strstr(s, "pd_ticket") == NULL && strstr(s, "client") == NULL);
    free(s);
    s = pdr_pdreq_build_plain(&r, -1, &len);
    CHECK(s != NULL && strcmp(s, "{\"text\":\"hi\"}") == 0);
    free(s);
    pdr_pdreq_clear(&r);
    const char *batch = "{\"text\":[\"a\",\"b\"],\"pd_ticket\":[\"c1\",\"c2\"]}";
    CHECK(pdr_pdreq_parse(PDR_ROUTE_GENERATE, batch, strlen(batch), &r, err, sizeof(err)) == 0 &&
          r.batch == 2);
    s = pdr_pdreq_build_body_ticket(&r, "h", 1, rooms, 3, tk, &len);
    json_t *j = s != NULL ? json_loads(s, JSON_REJECT_DUPLICATES, NULL) : NULL;
    CHECK(j != NULL);
    json_t *t = json_object_get(j, "pd_ticket");
    CHECK(json_is_array(t) && json_array_size(t) == 2);
    CHECK(strcmp(json_string_value(json_array_get(t, 1)), tk[1]) == 0);
    CHECK(json_integer_value(json_object_get(j, "data_parallel_rank")) == 3);
    json_decref(j);
    free(s);
    pdr_pdreq_clear(&r);
}

/* protocol sglang: the router's rid per item (pdr- and the room in 16 hex digits), after the bootstrap fields
 * and before the tickets; a client's rid is dropped (an abort must name this attempt's item), and the other
 * builders keep it. */
static void test_rids(void)
{
    uint64_t rooms[2] = {0x0123456789abcdefull, 7};
    const char *tk[2] = {"pt1.a", "pt1.b"};
    char rid[PDR_RID_LEN + 1];
    pdr_pdreq_rid(rooms[0], rid);
    CHECK(strcmp(rid, "pdr-0123456789abcdef") == 0);
    pdr_pdreq_t r;
    char err[256];
    size_t len;
    const char *b = "{\"text\":\"hi\",\"rid\":\"mine\"}";
    CHECK(pdr_pdreq_parse(PDR_ROUTE_GENERATE, b, strlen(b), &r, err, sizeof(err)) == 0);
    char *s = pdr_pdreq_build_body_rid(&r, "10.0.0.1", 8998, rooms, -1, NULL, &len);
    CHECK(s != NULL && strlen(s) == len);
    CHECK(s != NULL &&
          strcmp(s, "{\"text\":\"hi\",\"bootstrap_host\":\"10.0.0.1\",\"bootstrap_port\":8998,"
                    "\"bootstrap_room\":81985529216486895,\"rid\":\"pdr-0123456789abcdef\"}") == 0);
    free(s);
    s = pdr_pdreq_build_body_ticket(&r, "10.0.0.1", 8998, rooms, -1, NULL, &len);
    CHECK(s != NULL && strstr(s, "\"rid\":\"mine\"") != NULL);
    free(s);
    pdr_pdreq_clear(&r);
    const char *batch = "{\"text\":[\"a\",\"b\"],\"rid\":[\"x\",\"y\"]}";
    CHECK(pdr_pdreq_parse(PDR_ROUTE_GENERATE, batch, strlen(batch), &r, err, sizeof(err)) == 0 &&
          r.batch == 2);
    s = pdr_pdreq_build_body_rid(&r, "h", 1, rooms, 3, tk, &len);
    CHECK(s != NULL && strlen(s) == len);
    json_t *j = s != NULL ? json_loads(s, JSON_REJECT_DUPLICATES, NULL) : NULL;
    CHECK(j != NULL);
    json_t *v = json_object_get(j, "rid");
    CHECK(json_is_array(v) && json_array_size(v) == 2);
    const char *r0 = json_string_value(json_array_get(v, 0)), *r1 = json_string_value(json_array_get(v, 1));
    CHECK(r0 != NULL && strcmp(r0, "pdr-0123456789abcdef") == 0);
    CHECK(r1 != NULL && strcmp(r1, "pdr-0000000000000007") == 0);
    CHECK(json_array_size(json_object_get(j, "pd_ticket")) == 2);
    json_decref(j);
    free(s);
    pdr_pdreq_clear(&r);
}

static const pdr_test_case_t cases[] = {
    {"rids", test_rids, 60},
    {"vllm_bodies", test_vllm_bodies, 60},
    {"vllm_answer", test_vllm_answer, 60},
    {"injection", test_injection, 60},
    {"splice", test_splice, 60},
    {"tickets", test_tickets, 60},
    {"batch", test_batch, 60},
    {"validation", test_validation, 60},
    {"prompt_forms", test_prompt_forms, 60},
    {"completions_n", test_completions_n, 60},
    {"messages", test_messages, 60},
    {"non_finite", test_non_finite, 60},
    {"logprob_merge", test_logprob_merge, 60},
    {"sse", test_sse, 60},
};

int main(int argc, char **argv)
{
    return PDR_TEST_RUN(cases, argc, argv);
}
