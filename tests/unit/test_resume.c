/* Unit tests for stream migration's arithmetic (router/util/resume.c): what the client of a stream has, read
 * back from the events relayed to it; the body that goes on from there; the rewrite of the new stream's
 * events; the requests that cannot be moved; the ends of the first and the last whole events. */
#include <string.h>
#include <jansson.h>
#include "check.h"
#include "err.h"
#include "resume.h"
#include "runner.h"

static void note(pdr_resume_t *s, const char *ev)
{
    pdr_resume_note(s, ev, strlen(ev));
}

static json_t *body_of(pdr_resume_t *s, const char *client, int *nothing_left)
{
    char err[256];
    size_t len = 0;
    const char *refusal;
    json_t *o = pdr_resume_parse(s->route, client, strlen(client), &refusal);
    char *b = pdr_resume_body(s, o, &len, nothing_left, err, sizeof(err));
    json_decref(o);
    if (b == NULL)
        return NULL;
    json_t *j = json_loadb(b, len, 0, NULL);
    free(b);
    return j;
}

/* The rewrite of one event, decoded ("" kept for a dropped event: NULL). */
static json_t *rewrite(pdr_resume_t *s, const char *ev, size_t *out_len)
{
    pdr_buf_t out = {0};
    CHECK(pdr_resume_rewrite(s, ev, strlen(ev), &out, 1 << 20) == 0);
    *out_len = out.len;
    json_t *j = NULL;
    if (out.len > 8) {
        CHECK(memcmp(out.p, "data: ", 6) == 0 && memcmp(out.p + out.len - 2, "\n\n", 2) == 0);
        j = json_loadb(out.p + 6, out.len - 8, 0, NULL);
    }
    pdr_buf_free(&out);
    return j;
}

static void test_events_end(void)
{
    CHECK(pdr_resume_events_end("", 0) == 0);
    CHECK(pdr_resume_events_end("data: {}\n", 9) == 0);
    CHECK(pdr_resume_events_end("data: {}\n\n", 10) == 10);
    CHECK(pdr_resume_events_end("data: {}\n\ndata: {\"a\"", 21) == 10);
    CHECK(pdr_resume_events_end("data: 1\r\n\r\ndata: 2", 18) == 11);
    /* The first event's end: the first empty line, not the last; a lone newline at p[0] ends nothing. */
    CHECK(pdr_resume_first_event_end("", 0) == 0);
    CHECK(pdr_resume_first_event_end("data: {}\n", 9) == 0);
    CHECK(pdr_resume_first_event_end("data: 1\n\ndata: 2\n\n", 18) == 9);
    CHECK(pdr_resume_first_event_end("data: 1\r\n\r\ndata: 2\r\n\r\n", 22) == 11);
    CHECK(pdr_resume_first_event_end("\ndata: 1\n\n", 10) == 10);
    CHECK(pdr_resume_first_event_end("\n\n", 2) == 2);
    CHECK(pdr_resume_first_event_end("\n", 1) == 0);
}

static void test_completions(void)
{
    pdr_resume_t s;
    pdr_resume_init(&s, PDR_ROUTE_COMPLETIONS, 1 << 20);
    note(
        &s,
        "data: {\"id\":\"cmpl-1\",\"choices\":[{\"index\":0,\"text\":\" alpha\",\"finish_reason\":null}]}\n\n"
        ": a comment\n\n"
        "data: {\"id\":\"cmpl-1\",\"choices\":[{\"index\":0,\"text\":\" "
        "bravo\",\"finish_reason\":null}]}\n\n");
    int left = -1;
    json_t *b = body_of(&s, "{\"model\":\"m\",\"prompt\":\"Once\",\"max_tokens\":10,\"stream\":true}", &left);
    CHECK(b != NULL && left == 0);
    CHECK(strcmp(json_string_value(json_object_get(b, "prompt")), "Once alpha bravo") == 0);
    CHECK(json_integer_value(json_object_get(b, "max_tokens")) == 8);
    CHECK(json_is_true(json_object_get(b, "stream")));
    json_decref(b);
    /* The new stream: the first stream's id, usage moved back to the completion. */
    size_t n;
    json_t *e =
        rewrite(&s,
                "data: {\"id\":\"cmpl-2\",\"choices\":[{\"index\":0,\"text\":\" charlie\"}],\"usage\":"
                "{\"prompt_tokens\":7,\"completion_tokens\":3,\"total_tokens\":10}}\n\n",
                &n);
    CHECK(e != NULL && strcmp(json_string_value(json_object_get(e, "id")), "cmpl-1") == 0);
    json_t *u = json_object_get(e, "usage");
    CHECK(json_integer_value(json_object_get(u, "prompt_tokens")) == 5);
    CHECK(json_integer_value(json_object_get(u, "completion_tokens")) == 5);
    CHECK(json_integer_value(json_object_get(u, "total_tokens")) == 10);
    json_decref(e);
    /* [DONE] and error events go as they are. */
    e = rewrite(&s, "data: [DONE]\n\n", &n);
    CHECK(e == NULL && n == 14);
    pdr_resume_free(&s);
}

static void test_escapes(void)
{
    /* Events after the first are read without a tree: their strings' escapes decoded as JSON says. */
    pdr_resume_t s;
    pdr_resume_init(&s, PDR_ROUTE_CHAT, 1 << 20);
    note(&s, "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"A\"}}]}\n\n"
             "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":"
             "\"\\\"q\\\" \\\\ \\/\\n\\t\\u00e9\\ud83d\\ude00\"},\"finish_reason\":null}]}\n\n");
    CHECK(pdr_resume_fold(&s) == 0 && s.tokens == 2);
    const char want[] = "A\"q\" \\ /\n\t\xc3\xa9\xf0\x9f\x98\x80";
    CHECK(s.text.len == sizeof(want) - 1 && memcmp(s.text.p, want, s.text.len) == 0);
    /* usage.completion_tokens (continuous usage) is the engine's count. */
    note(&s,
         "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":9}}\n\n");
    CHECK(pdr_resume_fold(&s) == 0 && s.tokens == 9);
    pdr_resume_free(&s);
}

static void test_no_limit_and_nothing_left(void)
{
    pdr_resume_t s;
    pdr_resume_init(&s, PDR_ROUTE_COMPLETIONS, 1 << 20);
    /* No max_tokens: the default 16 less what the client has. */
    note(&s, "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"text\":\" a\"}]}\n\n");
    int left;
    json_t *b = body_of(&s, "{\"prompt\":\"p\",\"stream\":true}", &left);
    CHECK(b != NULL && json_integer_value(json_object_get(b, "max_tokens")) == 15);
    json_decref(b);
    pdr_resume_free(&s);
    /* Every token the request allows: nothing left, no body. */
    pdr_resume_init(&s, PDR_ROUTE_COMPLETIONS, 1 << 20);
    note(&s, "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"text\":\" a\"}]}\n\n"
             "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"text\":\" b\"}]}\n\n");
    CHECK(body_of(&s, "{\"prompt\":\"p\",\"max_tokens\":2,\"stream\":true}", &left) == NULL && left == 1);
    pdr_resume_free(&s);
    /* A finish_reason seen: nothing left; the tail is [DONE]. */
    pdr_resume_init(&s, PDR_ROUTE_COMPLETIONS, 1 << 20);
    note(&s,
         "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"text\":\" a\",\"finish_reason\":\"stop\"}]}\n\n");
    CHECK(body_of(&s, "{\"prompt\":\"p\",\"max_tokens\":9,\"stream\":true}", &left) == NULL && left == 1);
    size_t tl;
    CHECK(strcmp(pdr_resume_tail(&s, &tl), "data: [DONE]\n\n") == 0 && tl == 14);
    pdr_resume_free(&s);
}

static void test_generate(void)
{
    pdr_resume_t s;
    pdr_resume_init(&s, PDR_ROUTE_GENERATE, 1 << 20);
    note(&s, "data: {\"text\":\" x\",\"output_ids\":[7],\"meta_info\":{\"id\":\"r1\",\"prompt_tokens\":3,"
             "\"completion_tokens\":1,\"finish_reason\":null}}\n\n"
             "data: {\"text\":\" x y\",\"output_ids\":[7,8],\"meta_info\":{\"id\":\"r1\",\"prompt_tokens\":3,"
             "\"completion_tokens\":2,\"finish_reason\":null}}\n\n");
    int left;
    json_t *b = body_of(
        &s, "{\"input_ids\":[1,2,3],\"stream\":true,\"sampling_params\":{\"max_new_tokens\":5}}", &left);
    CHECK(b != NULL);
    json_t *ids = json_object_get(b, "input_ids");
    CHECK(json_array_size(ids) == 5 && json_integer_value(json_array_get(ids, 3)) == 7 &&
          json_integer_value(json_array_get(ids, 4)) == 8);
    CHECK(json_integer_value(json_object_get(json_object_get(b, "sampling_params"), "max_new_tokens")) == 3);
    json_decref(b);
    size_t n;
    json_t *e =
        rewrite(&s,
                "data: {\"text\":\" z\",\"output_ids\":[9],\"meta_info\":{\"id\":\"r2\",\"prompt_tokens\":5,"
                "\"completion_tokens\":1,\"finish_reason\":null}}\n\n",
                &n);
    CHECK(e != NULL && strcmp(json_string_value(json_object_get(e, "text")), " x y z") == 0);
    json_t *oi = json_object_get(e, "output_ids");
    CHECK(json_array_size(oi) == 3 && json_integer_value(json_array_get(oi, 2)) == 9);
    json_t *meta = json_object_get(e, "meta_info");
    CHECK(strcmp(json_string_value(json_object_get(meta, "id")), "r1") == 0);
    CHECK(json_integer_value(json_object_get(meta, "prompt_tokens")) == 3 &&
          json_integer_value(json_object_get(meta, "completion_tokens")) == 3);
    json_decref(e);
    /* sglang's length reason names the request's limit: the client's, not the new request's. */
    e = rewrite(
        &s,
        "data: {\"text\":\" z w w\",\"output_ids\":[9,1,1],\"meta_info\":{\"id\":\"r2\",\"prompt_tokens\":5,"
        "\"completion_tokens\":3,\"finish_reason\":{\"type\":\"length\",\"length\":3}}}\n\n",
        &n);
    meta = json_object_get(e, "meta_info");
    CHECK(e != NULL &&
          json_integer_value(json_object_get(json_object_get(meta, "finish_reason"), "length")) == 5);
    json_decref(e);
    pdr_resume_free(&s);
    /* A text prompt, no limit: sglang's default 128. */
    pdr_resume_init(&s, PDR_ROUTE_GENERATE, 1 << 20);
    note(&s, "data: {\"text\":\" x\",\"meta_info\":{\"id\":\"r\",\"completion_tokens\":1}}\n\n");
    b = body_of(&s, "{\"text\":\"hi\",\"stream\":true}", &left);
    CHECK(b != NULL && strcmp(json_string_value(json_object_get(b, "text")), "hi x") == 0);
    CHECK(json_integer_value(json_object_get(json_object_get(b, "sampling_params"), "max_new_tokens")) ==
          127);
    json_decref(b);
    pdr_resume_free(&s);
    /* Incremental streaming (sglang's --incremental-streaming-output): text and ids are the new ones only. */
    pdr_resume_init(&s, PDR_ROUTE_GENERATE, 1 << 20);
    note(&s, "data: {\"text\":\" "
             "x\",\"output_ids\":[7],\"meta_info\":{\"id\":\"r\",\"completion_tokens\":1}}\n\n");
    note(&s, "data: {\"text\":\" "
             "y\",\"output_ids\":[8],\"meta_info\":{\"id\":\"r\",\"completion_tokens\":2}}\n\n");
    b = body_of(&s, "{\"input_ids\":[1],\"stream\":true}", &left);
    CHECK(b != NULL && json_array_size(json_object_get(b, "input_ids")) == 3 && s.text.len == 4 &&
          memcmp(s.text.p, " x y", 4) == 0);
    json_decref(b);
    pdr_resume_free(&s);
    /* Cumulative: after the first events only the last data event of each send is kept, and it says it all.
     */
    pdr_resume_init(&s, PDR_ROUTE_GENERATE, 1 << 20);
    note(&s, "data: {\"text\":\" "
             "x\",\"output_ids\":[7],\"meta_info\":{\"id\":\"r\",\"completion_tokens\":1}}\n\n");
    note(&s,
         "data: {\"text\":\" x y\",\"output_ids\":[7,8],\"meta_info\":{\"id\":\"r\",\"completion_tokens\":2}}"
         "\n\ndata: {\"text\":\" x y "
         "z\",\"output_ids\":[7,8,9],\"meta_info\":{\"id\":\"r\",\"completion_tokens\":3}}"
         "\n\n: keep-alive\n\n");
    CHECK(s.cumulative && s.log.len < 100);
    b = body_of(&s, "{\"input_ids\":[1],\"stream\":true}", &left);
    CHECK(b != NULL && json_array_size(json_object_get(b, "input_ids")) == 4 && s.tokens == 3);
    json_decref(b);
    pdr_resume_free(&s);
    /* input_ids, but the stream never said its ids: cannot go on. */
    pdr_resume_init(&s, PDR_ROUTE_GENERATE, 1 << 20);
    note(&s, "data: {\"text\":\" x\",\"meta_info\":{\"id\":\"r\",\"completion_tokens\":1}}\n\n");
    CHECK(body_of(&s, "{\"input_ids\":[1],\"stream\":true}", &left) == NULL && left == 0);
    pdr_resume_free(&s);
}

static void test_chat(void)
{
    pdr_resume_t s;
    pdr_resume_init(&s, PDR_ROUTE_CHAT, 1 << 20);
    note(&s,
         "data: "
         "{\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
         "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Red\"}}]}\n\n");
    int left;
    json_t *b =
        body_of(&s, "{\"messages\":[{\"role\":\"user\",\"content\":\"colours?\"}],\"stream\":true}", &left);
    CHECK(b != NULL && json_object_get(b, "max_tokens") == NULL); /* chat has no default limit */
    json_t *msgs = json_object_get(b, "messages");
    CHECK(json_array_size(msgs) == 2);
    json_t *last = json_array_get(msgs, 1);
    CHECK(strcmp(json_string_value(json_object_get(last, "role")), "assistant") == 0 &&
          strcmp(json_string_value(json_object_get(last, "content")), "Red") == 0);
    CHECK(json_is_true(json_object_get(b, "continue_final_message")) &&
          json_is_false(json_object_get(b, "add_generation_prompt")));
    json_decref(b);
    /* The new stream's role delta says nothing the client lacks: dropped; a later one is kept. */
    size_t n;
    json_t *e = rewrite(
        &s,
        "data: "
        "{\"id\":\"c2\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
        &n);
    CHECK(e == NULL && n == 0);
    e = rewrite(
        &s,
        "data: {\"id\":\"c2\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\", "
        "blue\"}}]}\n\n",
        &n);
    json_t *d = json_object_get(json_array_get(json_object_get(e, "choices"), 0), "delta");
    CHECK(e != NULL && json_object_get(d, "role") == NULL &&
          strcmp(json_string_value(json_object_get(d, "content")), ", blue") == 0 &&
          strcmp(json_string_value(json_object_get(e, "id")), "c1") == 0);
    json_decref(e);
    pdr_resume_free(&s);
    /* A client that continues its own assistant message: the text goes on it. */
    pdr_resume_init(&s, PDR_ROUTE_CHAT, 1 << 20);
    note(&s, "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" more\"}}]}\n\n");
    b = body_of(
        &s,
        "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":\"A\"}],"
        "\"continue_final_message\":true,\"add_generation_prompt\":false,\"max_tokens\":4,\"stream\":true}",
        &left);
    msgs = json_object_get(b, "messages");
    CHECK(b != NULL && json_array_size(msgs) == 2 &&
          strcmp(json_string_value(json_object_get(json_array_get(msgs, 1), "content")), "A more") == 0 &&
          json_integer_value(json_object_get(b, "max_tokens")) == 3);
    json_decref(b);
    pdr_resume_free(&s);
}

static void test_refusals(void)
{
#define REFUSAL(route, body) pdr_resume_refusal(route, body, strlen(body))
    CHECK(REFUSAL(PDR_ROUTE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}") == NULL);
    CHECK(strcmp(REFUSAL(PDR_ROUTE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"n\":2}"),
                 "n") == 0);
    CHECK(strcmp(REFUSAL(PDR_ROUTE_CHAT, "{\"messages\":[{}],\"logprobs\":true}"), "logprobs") == 0);
    CHECK(strcmp(REFUSAL(PDR_ROUTE_COMPLETIONS, "{\"prompt\":\"p\",\"echo\":true}"), "echo") == 0);
    CHECK(strcmp(REFUSAL(PDR_ROUTE_COMPLETIONS, "{\"prompt\":\"p\",\"best_of\":3}"), "best_of") == 0);
    CHECK(strcmp(REFUSAL(PDR_ROUTE_COMPLETIONS, "{\"prompt\":[1,2]}"), "token_prompt") == 0);
    CHECK(strcmp(REFUSAL(PDR_ROUTE_COMPLETIONS, "{\"prompt\":\"p\",\"prompt_logprobs\":1}"), "logprobs") ==
          0);
    CHECK(REFUSAL(PDR_ROUTE_COMPLETIONS, "{\"prompt\":\"p\",\"n\":1,\"logprobs\":null}") == NULL);
    CHECK(strcmp(REFUSAL(PDR_ROUTE_GENERATE, "{\"text\":[\"a\",\"b\"]}"), "batch") == 0);
    CHECK(strcmp(REFUSAL(PDR_ROUTE_GENERATE, "{\"text\":\"a\",\"sampling_params\":{\"n\":4}}"), "n") == 0);
    CHECK(strcmp(REFUSAL(PDR_ROUTE_GENERATE, "{\"text\":\"a\",\"return_logprob\":true}"), "logprobs") == 0);
    CHECK(REFUSAL(PDR_ROUTE_GENERATE, "{\"input_ids\":[1,2]}") == NULL);
    CHECK(strcmp(REFUSAL(PDR_ROUTE_GENERATE, "not json"), "not_json") == 0);
#undef REFUSAL
}

static void test_unreadable(void)
{
    pdr_resume_t s;
    /* A text past max_text: the stream is bad, no body. */
    pdr_resume_init(&s, PDR_ROUTE_COMPLETIONS, 4);
    note(&s, "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"text\":\" abcdef\"}]}\n\n");
    int left;
    CHECK(body_of(&s, "{\"prompt\":\"p\",\"stream\":true}", &left) == NULL && left == 0 && s.bad);
    pdr_resume_free(&s);
    /* An event that is not JSON. */
    pdr_resume_init(&s, PDR_ROUTE_COMPLETIONS, 1 << 20);
    note(&s, "data: {oops\n\n");
    CHECK(pdr_resume_fold(&s) == -1);
    pdr_resume_free(&s);
    /* Past PDR_RESUME_LOG_FOLD the log is read back as it goes: the state holds the stream, the log does not
     * grow. */
    pdr_resume_init(&s, PDR_ROUTE_COMPLETIONS, 1 << 20);
    const char *ev = "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"text\":\" w\"}]}\n\n";
    size_t k = 0;
    for (; k < 2 * PDR_RESUME_LOG_FOLD / strlen(ev); k++)
        note(&s, ev);
    CHECK(s.log.len < PDR_RESUME_LOG_FOLD && s.tokens > 0);
    CHECK(pdr_resume_fold(&s) == 0 && s.tokens == k && s.text.len == 2 * k);
    pdr_resume_free(&s);
}

static const pdr_test_case_t cases[] = {
    {"events_end", test_events_end, 60}, {"completions", test_completions, 60},
    {"escapes", test_escapes, 60},       {"no_limit_and_nothing_left", test_no_limit_and_nothing_left, 60},
    {"generate", test_generate, 60},     {"chat", test_chat, 60},
    {"refusals", test_refusals, 60},     {"unreadable", test_unreadable, 60},
};

int main(int argc, char **argv)
{
    return PDR_TEST_RUN(cases, argc, argv);
}
