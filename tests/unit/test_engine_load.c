/*
 * router/util/engine_load.c: the engines' load answers. sglang's /get_load list (summed over ranks, its
 * older one-object form, a rank without counts, negative or non-integer counts, not JSON, not a list or
 * object, over the ceiling) and vLLM's /metrics text (its real exposition with HELP/TYPE, labels holding
 * escaped quotes, braces and commas, several engines summed, the KV usage of the fullest engine, its older
 * gauge name, CRLF and a last line without a newline, timestamps; and malformed lines: no value, an
 * unterminated label set or quote, a value that is no number, NaN, +Inf, negative, a usage over 1, a JSON
 * or HTML body, over the ceiling).
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "runner.h"
#include "engine_load.h"
#include "err.h"

#define S(lit) lit, sizeof(lit) - 1

static void test_sglang(void)
{
    pdr_engine_load_t l;
    static const char cur[] = /* sglang's current answer, two ranks */
        "[{\"dp_rank\":0,\"num_reqs\":5,\"num_waiting_reqs\":2,\"num_tokens\":900,\"num_pending_tokens\":40,"
        "\"ts_tic\":12.5},{\"dp_rank\":1,\"num_reqs\":1,\"num_waiting_reqs\":0,\"num_tokens\":100}]";
    CHECK(pdr_engine_load_parse_sglang(S(cur), -1, &l) == 0);
    CHECK(l.reqs == 6 && l.waiting == 2 && l.tokens == 1000 && l.reqs_seen == 2 && l.tokens_seen == 2 &&
          l.list);
    CHECK(l.kv_usage_ppm == -1);
    /* One rank of --dp-aware: its own object only; a rank the answer lacks has nothing seen. */
    static const char two[] =
        "[{\"dp_rank\":0,\"num_reqs\":5},{\"dp_rank\":1,\"num_reqs\":1,\"num_tokens\":4}]";
    CHECK(pdr_engine_load_parse_sglang(S(two), 1, &l) == 0 && l.reqs == 1 && l.tokens == 4 &&
          l.reqs_seen == 1);
    CHECK(pdr_engine_load_parse_sglang(S(two), 0, &l) == 0 && l.reqs == 5 && l.reqs_seen == 1);
    CHECK(pdr_engine_load_parse_sglang(S(two), 2, &l) == 0 && l.reqs_seen == 0);
    /* The older one-object form. */
    CHECK(pdr_engine_load_parse_sglang(S("{\"num_reqs\":3,\"num_waiting_reqs\":1,\"num_tokens\":7}"), -1,
                                       &l) == 0);
    CHECK(l.reqs == 3 && l.waiting == 1 && l.tokens == 7 && l.reqs_seen == 1 && !l.list);
    /* A list whose objects name no count: parsed, but nothing seen (the poll calls it garbage). */
    CHECK(pdr_engine_load_parse_sglang(S("[{\"dp_rank\":0}]"), -1, &l) == 0 && l.reqs_seen == 0);
    CHECK(pdr_engine_load_parse_sglang(S("[]"), -1, &l) == 0 && l.reqs_seen == 0);
    /* Malformed. */
    CHECK(pdr_engine_load_parse_sglang(S("[{\"num_reqs\":-1}]"), -1, &l) == PDR_EPROTO);
    CHECK(pdr_engine_load_parse_sglang(S("[{\"num_reqs\":\"5\"}]"), -1, &l) == PDR_EPROTO);
    CHECK(pdr_engine_load_parse_sglang(S("[{\"num_reqs\":1.5}]"), -1, &l) == PDR_EPROTO);
    CHECK(pdr_engine_load_parse_sglang(S("[{\"num_reqs\":1},{\"num_tokens\":null}]"), -1, &l) == PDR_EPROTO);
    CHECK(l.reqs == 0 && l.reqs_seen == 0); /* a refused answer leaves nothing half read */
    CHECK(pdr_engine_load_parse_sglang(S("[{\"num_reqs\":1}"), -1, &l) == PDR_EPROTO);
    CHECK(pdr_engine_load_parse_sglang(S("<html>busy</html>"), -1, &l) == PDR_EPROTO);
    CHECK(pdr_engine_load_parse_sglang(S("42"), -1, &l) == PDR_EPROTO);
    CHECK(pdr_engine_load_parse_sglang(S(""), -1, &l) == PDR_EPROTO);
    char *big = malloc(PDR_ENGINE_LOAD_MAX_BODY + 2);
    CHECK(big != NULL);
    memset(big, ' ', PDR_ENGINE_LOAD_MAX_BODY + 1);
    big[0] = '[';
    big[PDR_ENGINE_LOAD_MAX_BODY] = ']';
    CHECK(pdr_engine_load_parse_sglang(big, PDR_ENGINE_LOAD_MAX_BODY + 1, -1, &l) == PDR_ETOOBIG);
    free(big);
}

static const char VLLM[] =
    "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
    "# TYPE vllm:num_requests_running gauge\n"
    "vllm:num_requests_running{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B\"} 4.0\n"
    "vllm:num_requests_running{engine=\"1\",model_name=\"meta-llama/Llama-3.1-8B\"} 2.0\n"
    "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
    "# TYPE vllm:num_requests_waiting gauge\n"
    "vllm:num_requests_waiting{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B\"} 3.0\n"
    "vllm:num_requests_waiting{engine=\"1\",model_name=\"meta-llama/Llama-3.1-8B\"} 0.0\n"
    "# TYPE vllm:kv_cache_usage_perc gauge\n"
    "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B\"} 0.25\n"
    "vllm:kv_cache_usage_perc{engine=\"1\",model_name=\"meta-llama/Llama-3.1-8B\"} 0.75\n"
    "# TYPE vllm:e2e_request_latency_seconds histogram\n"
    "vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"+Inf\",model_name=\"m\"} 17.0\n"
    "vllm:e2e_request_latency_seconds_sum{engine=\"0\",model_name=\"m\"} 1.2e+01\n"
    "python_gc_objects_collected_total{generation=\"0\"} 1234.0\n"
    "process_start_time_seconds 1.7e+09\n";

static void test_prometheus(void)
{
    pdr_engine_load_t l;
    CHECK(pdr_engine_load_parse_prometheus(S(VLLM), &l) == 0);
    CHECK(l.reqs == 9 && l.waiting == 3 && l.tokens == 0 && l.reqs_seen == 2);
    CHECK(l.kv_usage_ppm == 750000);
    /* Labels with escapes, braces and commas inside quotes; CRLF; a timestamp; no newline at the end; the
     * older KV gauge name. */
    CHECK(pdr_engine_load_parse_prometheus(
              S("vllm:num_requests_running{model_name=\"a\\\"b}{,c\",engine=\"0\",} 1 1700000000000\r\n"
                "  vllm:num_requests_waiting{engine=\"0\"}\t2\r\n"
                "vllm:gpu_cache_usage_perc{engine=\"0\"} 1e-1"),
              &l) == 0);
    CHECK(l.reqs == 3 && l.waiting == 2 && l.kv_usage_ppm == 100000);
    /* Neither request gauge: parsed, nothing seen (the poll calls it garbage). */
    CHECK(pdr_engine_load_parse_prometheus(S("process_start_time_seconds 1.7e+09\n"), &l) == 0);
    CHECK(l.reqs_seen == 0 && l.kv_usage_ppm == -1);
    CHECK(pdr_engine_load_parse_prometheus(S(""), &l) == 0 && l.reqs_seen == 0);
    /* Malformed. */
    static const char *const bad[] = {
        "vllm:num_requests_running\n",
        "vllm:num_requests_running 1 2 3\n",
        "vllm:num_requests_running{engine=\"0\" 1\n",
        "vllm:num_requests_running{engine=\"0} 1\n",
        "vllm:num_requests_running{engine=0} 1\n",
        "vllm:num_requests_running{=\"0\"} 1\n",
        "vllm:num_requests_running{engine=\"0\"}1\n",
        "vllm:num_requests_running abc\n",
        "vllm:num_requests_running 1x\n",
        "vllm:num_requests_running NaN\n",
        "vllm:num_requests_running +Inf\n",
        "vllm:num_requests_running -1\n",
        "vllm:num_requests_waiting 1e300\n",
        "vllm:kv_cache_usage_perc 1.5\n",
        "{\"num_requests_running\": 1}\n",
        "<html><body>502 Bad Gateway</body></html>\n",
        "9vllm 1\n",
        "vllm:num_requests_running{engine=\"0\\",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rc = pdr_engine_load_parse_prometheus(bad[i], strlen(bad[i]), &l);
        if (rc != PDR_EPROTO)
            fprintf(stderr, "accepted: %s\n", bad[i]);
        CHECK(rc == PDR_EPROTO && l.reqs == 0 && l.reqs_seen == 0 && l.kv_usage_ppm == -1);
    }
    /* A valid line after a bad one does not save the answer. */
    CHECK(pdr_engine_load_parse_prometheus(S("garbage here\nvllm:num_requests_running 1\n"), &l) ==
          PDR_EPROTO);
    /* Many series, each within bounds, that sum past what any engine runs. */
    size_t cap = 200 * 64, n = 0;
    char *many = malloc(cap);
    CHECK(many != NULL);
    for (int i = 0; i < 200; i++)
        n += (size_t)snprintf(many + n, cap - n, "vllm:num_requests_running{engine=\"%d\"} 1e13\n", i);
    CHECK(pdr_engine_load_parse_prometheus(many, n, &l) == PDR_EPROTO);
    free(many);
    char *big = malloc(PDR_ENGINE_LOAD_MAX_BODY + 1);
    CHECK(big != NULL);
    memset(big, '#', PDR_ENGINE_LOAD_MAX_BODY + 1);
    CHECK(pdr_engine_load_parse_prometheus(big, PDR_ENGINE_LOAD_MAX_BODY + 1, &l) == PDR_ETOOBIG);
    free(big);
}

int main(int argc, char **argv)
{
    static const pdr_test_case_t cases[] = {{"sglang", test_sglang, 30}, {"prometheus", test_prometheus, 30}};
    return PDR_TEST_RUN(cases, argc, argv);
}
