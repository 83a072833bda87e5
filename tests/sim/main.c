/*
 * pdsim's entry point: flags, the uv loop, signals and a clean shutdown (SIGTERM/SIGINT stop the
 * listener, fail what is pending, close every connection and handle, destroy the shim, exit 0).
 * Single-threaded apart from the shim's threads and the uv thread pool.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>
#include "err.h"
#include "util.h"
#include "pdsim.h"
#include "chat_template.h"
#include "tokenizer.h"

static uv_signal_t sig_term, sig_int;
static uv_timer_t guard;
static uv_loop_t *loop;

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: pdsim --role prefill|decode|both --port N [options]\n"
        "  --host H                  listen address (default 127.0.0.1)\n"
        "  --port N                  HTTP port\n"
        "  --bootstrap-port M        prefill: its shim (KV transfer) port, required; decode: the port a\n"
        "                            request whose bootstrap_port is null or absent pulls from (default\n"
        "                            8998, as sglang's --disaggregation-bootstrap-port)\n"
        "  --kv-bytes-per-token B    KV bytes per prompt token (default 1024)\n"
        "  --model NAME              model name reported by the OpenAI routes (default pdsim)\n"
        "  --tls-cert F --tls-key F  serve HTTPS (PEM certificate chain and key) on --port\n"
        "  --tls-client-ca F         with them: require a client certificate signed by F\n"
        "  --tls-fail-resumption     with --tls-client-ca: fail every handshake that resumes a session\n"
        "                            (as an OpenSSL server without a session id context does)\n"
        "  --prefill-us-per-token N  simulated prefill time per prompt token (default 0)\n"
        "  --decode-us-per-token N   gap between output tokens in microseconds (default 0)\n"
        "  --max-tokens-default N    output tokens when the request names none (default 16)\n"
        "  --kv-timeout-ms N         deadline of every KV offer or fetch (default 30000)\n"
        "  --prefill-answer-lag-ms N the prefill answers N ms after its KV was sent (default 0; a real\n"
        "                            prefill answers up to a forward pass after its KV has left)\n"
        "  --stamp-first-token       the first streamed event carries \"pdsim_mono_us\": CLOCK_MONOTONIC\n"
        "                            microseconds when it was written (pdbench: router overhead)\n"
        "  --kv-lease-ms N           vLLM mode: a prefill holds KV under a lease of N ms, which a decode\n"
        "                            renews every N/6 ms by N*2/3 ms while it holds the request (default\n"
        "                            30000, vLLM's NIXL kv_lease_duration; 60..3600000)\n"
        "  --kv-fetch-delay-ms N     a decode waits N ms before it pulls the KV (default 0)\n"
        "  --kv-parts N              prefill: publish each room's KV in N parts spread over the simulated\n"
        "                            prefill time (a layer-wise KV stream; default 0: whole, at the end)\n"
        "  --prefix-cache-tokens N   prefill and both: an LRU prefix cache of N prompt tokens in whole\n"
        "                            blocks; prefill time counts only the uncached tokens (default 0: off)\n"
        "  --cache-block-tokens N    the prefix cache's block size in tokens (default 16, vLLM's)\n"
        "  --model-path P --revision R --dtype D --kv-cache-dtype D --transfer-backend B --page-size N\n"
        "  --tp-size N               the identity /get_server_info reports by sglang's names (model_path,\n"
        "                            revision, dtype, kv_cache_dtype, disaggregation_transfer_backend,\n"
        "                            page_size, tp_size; defaults --model, null, auto, auto, mooncake, 1, "
        "1);\n"
        "                            vLLM mode: /v1/models's root is the model path\n"
        "  --no-server-info          /get_server_info answers 404 (an engine without the route)\n"
        "  --dp-size N               the dp_size /get_server_info reports (default 1; pdsim serves every\n"
        "                            rank itself and records the rank each request names)\n"
        "  --local-prefill           decode: a request with no bootstrap fields and no kv_transfer_params\n"
        "                            is computed here, prompt and all (a vLLM decode's plain request)\n"
        "  --tokenizer FILE          a Hugging Face tokenizer.json (or its directory): prompt text becomes "
        "its\n"
        "                            token ids, chat messages through the chat template beside it if any "
        "(the\n"
        "                            prefix cache and KV follow them) instead of one hash per word\n"
        "  --events-url URL          report room events and load to the router's admin listener "
        "(http://H:P)\n"
        "  --events-key-file F       this worker's event key (with --events-url): pdrouter\n"
        "                            --derive-shim-key of the router's shim_events.key_file for its URL\n"
        "  --kv-capacity-bytes N     decode: KV its running requests may hold; beyond it 503 (default 0: no "
        "limit)\n"
        "  --kv-events-endpoint E    publish the prefix cache's KV events in vLLM's format on a ZMQ PUB\n"
        "                            socket bound to E (tcp://HOST:PORT); needs --prefix-cache-tokens\n"
        "  --kv-events-topic T       the topic frame of every KV event message (default empty)\n"
        "  --ticket-key FILE         protocol pdshim: a ticket key file of the router (repeat for rotation:\n"
        "                            every one verifies); then every PD request needs a valid pd_ticket\n"
        "                            (403 otherwise) and the KV moves through pdshim's ticket calls\n"
        "  --ticket-identity ID      decode: the identity tickets must name (default HOST:PORT of --host\n"
        "                            and --port, IPv6 in brackets; \"\" checks none)\n"
        "fault knobs (also POST /pdsim/fault at run time):\n"
        "  --fail-health             GET /health answers 503\n"
        "  --fail-status CODE        generate routes answer CODE with an OpenAI error\n"
        "  --hang-before-headers     accept generate requests and never answer\n"
        "  --drip-ms N               gap between streamed tokens (overrides --decode-us-per-token)\n"
        "  --reset-after-tokens N    abort the connection hard after N output tokens\n"
        "  --stall-after-tokens N    a stream stops after N output tokens and stays open (a frozen engine)\n"
        "  --stall-kv                the prefill never offers its KV (fails after --kv-timeout-ms)\n"
        "  --stream-head-before-kv   decode: start a stream (headers, one SSE comment) before pulling the "
        "KV\n"
        "  --fail-after-kv CODE      the prefill sends its KV, then answers CODE with an OpenAI error\n"
        "  --reset-answer            cut every answer sent whole (non-streamed; a prefill's) mid-body, hard\n"
        "  --fail-kv-from-port PORT  a decode fails at once (500) the KV fetch from bootstrap port PORT\n"
        "  --die-after N             exit(3) after N generate requests completed\n"
        "  --kv-events-drop-every N  every Nth KV event message is not sent (a gap in its numbers)\n"
        "  --kv-events-replay-endpoint E  bind a ROUTER socket serving vLLM's replay of KV event batches\n"
        "  --kv-events-replay-buffer N    batches the replay keeps (default 10000, vLLM's buffer_steps)\n"
        "  --kv-events-lora-name NAME     every stored block is a LoRA adapter's (lora_name NAME)\n"
        "  --log-level debug|info|warn|error\n");
}

static int int_arg(const char *flag, const char *v, int64_t min, int64_t max, int64_t *out)
{
    if (v == NULL || pdr_parse_int64(v, strlen(v), min, max, out) != 0) {
        fprintf(stderr, "pdsim: %s needs an integer in [%lld, %lld], got '%s'\n", flag, (long long)min,
                (long long)max, v ? v : "");
        return -1;
    }
    return 0;
}

static int parse_args(int argc, char **argv, pdsim_opts_t *o)
{
    int64_t v;
    int have_role = 0, have_port = 0;
    o->role = PDSIM_ROLE_BOTH;
    o->host = "127.0.0.1";
    o->bootstrap_port = -1;
    o->kv_bytes_per_token = 1024;
    o->model = "pdsim";
    o->max_tokens_default = 16;
    o->kv_timeout_ms = 30000;
    o->kv_lease_ms = 30000;     /* 30 s: vLLM's NIXL kv_lease_duration */
    o->cache_block_tokens = 16; /* vLLM's default block size */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
#define INT_FLAG(name, field, min, max)                                                                      \
    if (strcmp(a, name) == 0) {                                                                              \
        if (int_arg(name, val, min, max, &v) != 0)                                                           \
            return -1;                                                                                       \
        o->field = v;                                                                                        \
        i++;                                                                                                 \
        continue;                                                                                            \
    }
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            exit(0);
        }
        if (strcmp(a, "--role") == 0 && val != NULL) {
            if (strcmp(val, "prefill") == 0)
                o->role = PDSIM_ROLE_PREFILL;
            else if (strcmp(val, "decode") == 0)
                o->role = PDSIM_ROLE_DECODE;
            else if (strcmp(val, "both") == 0)
                o->role = PDSIM_ROLE_BOTH;
            else {
                fprintf(stderr, "pdsim: --role must be prefill, decode or both, got '%s'\n", val);
                return -1;
            }
            have_role = 1;
            i++;
            continue;
        }
        if (strcmp(a, "--host") == 0 && val != NULL) {
            o->host = val;
            i++;
            continue;
        }
        if (strcmp(a, "--tokenizer") == 0 && val != NULL) {
            o->tokenizer = val;
            i++;
            continue;
        }
        if (strcmp(a, "--events-url") == 0 && val != NULL) {
            o->events_url = val;
            i++;
            continue;
        }
        if (strcmp(a, "--events-key-file") == 0 && val != NULL) {
            o->events_key_file = val;
            i++;
            continue;
        }
        if (strcmp(a, "--kv-events-endpoint") == 0 && val != NULL) {
            o->kv_events_endpoint = val;
            i++;
            continue;
        }
        if (strcmp(a, "--kv-events-lora-name") == 0 && val != NULL) {
            o->kv_events_lora_name = val;
            i++;
            continue;
        }
        if (strcmp(a, "--kv-events-replay-endpoint") == 0 && val != NULL) {
            o->kv_events_replay_endpoint = val;
            i++;
            continue;
        }
        if (strcmp(a, "--kv-events-topic") == 0 && val != NULL) {
            o->kv_events_topic = val;
            i++;
            continue;
        }
        if (strcmp(a, "--ticket-key") == 0 && val != NULL) {
            if (o->n_ticket_keys >= PDSIM_MAX_TICKET_KEYS) {
                fprintf(stderr, "pdsim: at most %d --ticket-key files\n", PDSIM_MAX_TICKET_KEYS);
                return -1;
            }
            o->ticket_keys[o->n_ticket_keys++] = val;
            i++;
            continue;
        }
        if (strcmp(a, "--ticket-identity") == 0 && val != NULL) {
            o->ticket_identity = val;
            i++;
            continue;
        }
        if ((strcmp(a, "--tls-cert") == 0 || strcmp(a, "--tls-key") == 0 ||
             strcmp(a, "--tls-client-ca") == 0) &&
            val != NULL) {
            if (strcmp(a, "--tls-cert") == 0)
                o->tls_cert = val;
            else if (strcmp(a, "--tls-key") == 0)
                o->tls_key = val;
            else
                o->tls_client_ca = val;
            i++;
            continue;
        }
        if (strcmp(a, "--tls-fail-resumption") == 0) {
            o->tls_no_resumption = 1;
            continue;
        }
        if (strcmp(a, "--model") == 0 && val != NULL) {
            o->model = val;
            i++;
            continue;
        }
        static const struct {
            const char *flag;
            size_t off;
        } strs[] = {
            {"--model-path", offsetof(pdsim_opts_t, model_path)},
            {"--revision", offsetof(pdsim_opts_t, revision)},
            {"--dtype", offsetof(pdsim_opts_t, dtype)},
            {"--kv-cache-dtype", offsetof(pdsim_opts_t, kv_cache_dtype)},
            {"--transfer-backend", offsetof(pdsim_opts_t, transfer_backend)},
        };
        int str_flag = 0;
        for (size_t k = 0; k < sizeof(strs) / sizeof(strs[0]) && val != NULL; k++)
            if (strcmp(a, strs[k].flag) == 0) {
                *(const char **)(void *)((char *)o + strs[k].off) = val;
                str_flag = 1;
            }
        if (str_flag) {
            i++;
            continue;
        }
        if (strcmp(a, "--log-level") == 0 && val != NULL) {
            static const char *const lv[] = {"debug", "info", "warn", "error"};
            int found = 0;
            for (int k = 0; k < 4; k++)
                if (strcmp(val, lv[k]) == 0) {
                    pdr_log_level = k;
                    found = 1;
                }
            if (!found) {
                fprintf(stderr, "pdsim: --log-level must be debug, info, warn or error\n");
                return -1;
            }
            i++;
            continue;
        }
        if (strcmp(a, "--port") == 0) {
            if (int_arg(a, val, 0, 65535, &v) != 0)
                return -1;
            o->port = (int)v;
            have_port = 1;
            i++;
            continue;
        }
        INT_FLAG("--bootstrap-port", bootstrap_port, 1, 65535)
        INT_FLAG("--kv-bytes-per-token", kv_bytes_per_token, 1, 1 << 24)
        INT_FLAG("--prefill-us-per-token", prefill_us_per_token, 0, 10000000)
        INT_FLAG("--decode-us-per-token", decode_us_per_token, 0, 10000000)
        INT_FLAG("--max-tokens-default", max_tokens_default, 0, PDSIM_MAX_TOKENS)
        INT_FLAG("--kv-timeout-ms", kv_timeout_ms, 1, 3600000)
        INT_FLAG("--prefill-answer-lag-ms", prefill_answer_lag_ms, 0, 3600000)
        INT_FLAG("--kv-lease-ms", kv_lease_ms, 60, 3600000)
        INT_FLAG("--kv-fetch-delay-ms", kv_fetch_delay_ms, 0, 3600000)
        INT_FLAG("--kv-parts", kv_parts, 0, 1024)
        INT_FLAG("--prefix-cache-tokens", prefix_cache_tokens, 0, PDSIM_PCACHE_MAX_TOKENS)
        INT_FLAG("--cache-block-tokens", cache_block_tokens, 1, 4096)
        INT_FLAG("--dp-size", dp_size, 1, 1024)
        INT_FLAG("--page-size", page_size, 1, 1 << 20)
        INT_FLAG("--tp-size", tp_size, 1, 1024)
        INT_FLAG("--kv-capacity-bytes", kv_capacity_bytes, 0, INT64_MAX)
        INT_FLAG("--kv-events-drop-every", kv_events_drop_every, 0, INT32_MAX)
        INT_FLAG("--kv-events-replay-buffer", kv_events_replay_buffer, 1, 1000000)
        INT_FLAG("--drip-ms", faults.drip_ms, 0, 3600000)
        INT_FLAG("--reset-after-tokens", faults.reset_after_tokens, 0, PDSIM_MAX_TOKENS)
        INT_FLAG("--stall-after-tokens", faults.stall_after_tokens, 0, PDSIM_MAX_TOKENS)
        INT_FLAG("--die-after", faults.die_after, 0, INT32_MAX)
        INT_FLAG("--fail-status", faults.fail_status, 400, 599)
#undef INT_FLAG
        if (strcmp(a, "--fail-health") == 0) {
            o->faults.fail_health = 1;
            continue;
        }
        if (strcmp(a, "--reset-answer") == 0) {
            o->faults.reset_answer = 1;
            continue;
        }
        if (strcmp(a, "--hang-before-headers") == 0) {
            o->faults.hang_before_headers = 1;
            continue;
        }
        if (strcmp(a, "--stamp-first-token") == 0) {
            o->stamp_first_token = 1;
            continue;
        }
        if (strcmp(a, "--fail-kv-from-port") == 0) {
            if (int_arg(a, val, 1, 65535, &v) != 0)
                return -1;
            o->faults.fail_kv_from_port = v;
            i++;
            continue;
        }
        if (strcmp(a, "--fail-after-kv") == 0) {
            if (int_arg(a, val, 400, 599, &v) != 0)
                return -1;
            o->faults.fail_after_kv = (int)v;
            i++;
            continue;
        }
        if (strcmp(a, "--no-server-info") == 0) {
            o->no_server_info = 1;
            continue;
        }
        if (strcmp(a, "--local-prefill") == 0) {
            o->local_prefill = 1;
            continue;
        }
        if (strcmp(a, "--stall-kv") == 0) {
            o->faults.stall_kv = 1;
            continue;
        }
        if (strcmp(a, "--stream-head-before-kv") == 0) {
            o->faults.stream_head_before_kv = 1;
            continue;
        }
        fprintf(stderr, "pdsim: unknown flag or missing value: %s (see --help)\n", a);
        return -1;
    }
    if (!have_role || !have_port) {
        fprintf(stderr, "pdsim: --role and --port are required (see --help)\n");
        return -1;
    }
    if (o->role == PDSIM_ROLE_PREFILL && o->bootstrap_port < 0) {
        fprintf(stderr, "pdsim: --role prefill needs --bootstrap-port (the decode fetches KV from it)\n");
        return -1;
    }
    if (o->bootstrap_port < 0)
        o->bootstrap_port = 8998; /* 8998: sglang's default --disaggregation-bootstrap-port */
    if (o->prefix_cache_tokens > 0 && o->role == PDSIM_ROLE_DECODE) {
        fprintf(stderr,
                "pdsim: --prefix-cache-tokens applies to --role prefill or both (a decode computes no "
                "prompt)\n");
        return -1;
    }
    if ((o->events_url != NULL) != (o->events_key_file != NULL)) {
        fprintf(stderr, "pdsim: --events-url and --events-key-file go together\n");
        return -1;
    }
    if (o->kv_events_endpoint != NULL && o->prefix_cache_tokens == 0) {
        fprintf(stderr, "pdsim: --kv-events-endpoint publishes the prefix cache's events: it needs "
                        "--prefix-cache-tokens\n");
        return -1;
    }
    if (o->prefix_cache_tokens > 0 && o->prefix_cache_tokens < o->cache_block_tokens) {
        fprintf(stderr,
                "pdsim: --prefix-cache-tokens %lld is less than one block (--cache-block-tokens %lld)\n",
                (long long)o->prefix_cache_tokens, (long long)o->cache_block_tokens);
        return -1;
    }
    return 0;
}

static void on_guard(uv_timer_t *t)
{
    (void)t;
    pdr_warn("pdsim: connections still open 2 s after the shutdown signal; exiting anyway");
    uv_stop(loop);
}

static void on_drained(void)
{
    uv_stop(loop);
}

static void on_signal(uv_signal_t *s, int signum)
{
    (void)s;
    pdr_info("pdsim: signal %d, shutting down", signum);
    uv_signal_stop(&sig_term);
    uv_signal_stop(&sig_int);
    uv_timer_start(&guard, on_guard, 2000, 0);
    uv_unref((uv_handle_t *)&guard);
    pdsim_server_shutdown(on_drained);
}

static void close_walk(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

int main(int argc, char **argv)
{
    pdsim_opts_t opts;
    memset(&opts, 0, sizeof(opts));
    if (parse_args(argc, argv, &opts) != 0)
        return 2;
    pdr_tokenizer_t *tok = NULL;
    if (opts.tokenizer != NULL) {
        char err[512];
        if ((tok = pdr_tokenizer_load(opts.tokenizer, err, sizeof(err))) == NULL) {
            fprintf(stderr, "pdsim: --tokenizer: %s\n", err);
            return 2;
        }
        /* The model's chat template beside it renders chat prompts, as the engine's does. */
        char dir[PDR_TOKENIZER_PATH_MAX];
        pdr_chat_template_t *ct = NULL;
        pdr_chat_template_dir(opts.tokenizer, dir, sizeof(dir));
        if (pdr_chat_template_load(dir, &ct, err, sizeof(err)) != 0) {
            fprintf(stderr, "pdsim: --tokenizer: %s\n", err);
            pdr_tokenizer_free(tok);
            return 2;
        }
        if (ct != NULL)
            pdr_tokenizer_set_extra(tok, ct, pdr_chat_template_free);
        pdsim_set_tokenizer(tok);
    }
    signal(SIGPIPE, SIG_IGN);
    loop = uv_default_loop();
    uv_signal_init(loop, &sig_term);
    uv_signal_init(loop, &sig_int);
    uv_timer_init(loop, &guard);
    uv_signal_start(&sig_term, on_signal, SIGTERM);
    uv_signal_start(&sig_int, on_signal, SIGINT);
    int rc = 0;
    if (pdsim_server_start(loop, &opts) != 0)
        rc = 1;
    else
        uv_run(loop, UV_RUN_DEFAULT);
    if (rc != 0)
        pdsim_server_shutdown(NULL);
    pdsim_server_dispose();
    uv_close((uv_handle_t *)&sig_term, NULL);
    uv_close((uv_handle_t *)&sig_int, NULL);
    uv_close((uv_handle_t *)&guard, NULL);
    uv_run(loop, UV_RUN_DEFAULT);
    uv_walk(loop, close_walk, NULL); /* anything the guard left behind */
    uv_run(loop, UV_RUN_DEFAULT);
    if (uv_loop_close(loop) != 0)
        pdr_warn("pdsim: handles still open at exit");
    pdsim_set_tokenizer(NULL);
    pdr_tokenizer_free(tok);
    return rc;
}
