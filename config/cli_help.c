/*
 * --help (pdr_config_usage) and the sglang router's flags pdrouter refuses, each with what it offers
 * instead. The flags that set one key are listed from the schema table. Runs once, on the main thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "err.h"
#include "config.h"
#include "config_internal.h"
#include "defaults.h"
#include "schema.h"
#include "cli_internal.h"

/* The sglang router's flags that pdrouter has no equivalent for: refused (never ignored), each with what
 * pdrouter offers instead. docs/migrating-from-sglang-router.md has the same table. */
#define NO_TOKENIZER                                                                                         \
    "pdrouter does not template requests or load models: the workers do (--tokenizer-path takes a "          \
    "tokenizer.json or a directory holding one)"
#define NO_JWT "the admin API takes one bearer token: --admin-token-file FILE (admin.token_file)"
#define POLICIES "policies: round_robin, least_load, random, cache_aware, power_of_two, precise_prefix"

static const struct refused {
    const char *name;
    const char *why;
} refused[] = {
    {"worker-urls", "pdrouter routes prefill/decode pairs only: give --prefill URL and --decode URL"},
    {"selector", "pdrouter discovers PD workers only: use --prefill-selector and --decode-selector"},
    {"enable-igw", "pdrouter serves one model (no multi-model gateway)"},
    {"bucket-adjust-interval-secs", "the bucket policy is not available (" POLICIES ")"},
    {"max-idle-secs", "the manual policy is not available (" POLICIES ")"},
    {"assignment-mode", "the manual policy is not available (" POLICIES ")"},
    {"redis-url", "pdrouter keeps no shared state and no history"},
    {"redis-key-prefix", "pdrouter keeps no shared state and no history"},
    {"redis-pool-max", NO_HISTORY},
    {"redis-retention-days", NO_HISTORY},
    {"worker-startup-check-interval",
     "starting workers are checked every health.interval_ms (--health-check-interval-secs)"},
    {"prometheus-duration-buckets", "the latency histograms have fixed buckets (docs/metrics.md)"},
    {"disable-health-check",
     "health checks cannot be turned off; set their period with --health-check-interval-secs "
     "(health.interval_ms)"},
    {"model-path", NO_TOKENIZER},
    {"chat-template", NO_TOKENIZER},
    {"tokenizer-cache-enable-l0", NO_TOKENIZER},
    {"tokenizer-cache-l0-max-entries", NO_TOKENIZER},
    {"tokenizer-cache-enable-l1", NO_TOKENIZER},
    {"tokenizer-cache-l1-max-memory", NO_TOKENIZER},
    {"reasoning-parser", "pdrouter passes answers through without parsing them"},
    {"tool-call-parser", "pdrouter passes answers through without parsing them"},
    {"mcp-config-path", "pdrouter calls no tools (no MCP)"},
    {"oracle-wallet-path", NO_HISTORY},
    {"oracle-tns-alias", NO_HISTORY},
    {"oracle-connect-descriptor", NO_HISTORY},
    {"oracle-username", NO_HISTORY},
    {"oracle-password", NO_HISTORY},
    {"oracle-pool-min", NO_HISTORY},
    {"oracle-pool-max", NO_HISTORY},
    {"oracle-pool-timeout-secs", NO_HISTORY},
    {"postgres-db-url", NO_HISTORY},
    {"postgres-pool-max", NO_HISTORY},
    {"control-plane-api-keys", NO_JWT},
    {"control-plane-audit-enabled",
     "admin API calls are logged at info level; there is no separate audit log"},
    {"jwt-issuer", NO_JWT},
    {"jwt-audience", NO_JWT},
    {"jwt-jwks-uri", NO_JWT},
    {"jwt-role-mapping", NO_JWT},
};

/* The sglang router flag --name[0..nlen) that pdrouter refuses: its name, with what exists instead in
 * *why; NULL when it is not one. */
const char *pdr__cli_refused(const char *name, size_t nlen, const char **why)
{
    for (size_t k = 0; k < sizeof(refused) / sizeof(refused[0]); k++)
        if (strlen(refused[k].name) == nlen && memcmp(refused[k].name, name, nlen) == 0) {
            *why = refused[k].why;
            return refused[k].name;
        }
    return NULL;
}

/* The flags that set one schema key, from the table: flag, key, default, range and its line of docs. */
static void usage_keys(FILE *out)
{
    for (size_t i = 0; i < pdr_conf_nkeys; i++) {
        const pdr_conf_key_t *k = &pdr_conf_keys[i];
        for (int s = 0; s < 2; s++) {
            const char *f = s ? k->flag_sec : k->flag;
            if (f == NULL || (k->flags & PDR_KEY_OWN_FLAG))
                continue;
            char head[64], def[128], range[64] = "";
            const char *arg = s                          ? "SECS"
                              : k->type == PDR_CT_INT    ? "N"
                              : k->type == PDR_CT_DOUBLE ? "X"
                                                         : "VALUE";
            snprintf(head, sizeof(head), "%s %s", f, arg);
            pdr_conf_default_text(k, def, sizeof(def));
            if (s)
                snprintf(range, sizeof(range), ", 1..%d s", PDR_MAX_MS / 1000);
            else if (k->type == PDR_CT_INT || k->type == PDR_CT_DOUBLE)
                snprintf(range, sizeof(range), ", %lld..%lld", (long long)k->min, (long long)k->max);
            fprintf(out, "  %-28s %s%s (default %s%s%s)\n  %-28s %s\n", head, k->path, s ? " x 1000" : "",
                    def[0] ? def : "none", s && def[0] ? " ms" : "", range, "", k->doc);
        }
    }
}

void pdr_config_usage(FILE *out)
{
    fputs(
        "Usage: pdrouter --config FILE [OVERRIDES]\n"
        "       pdrouter [--pd-disaggregation] --prefill URL [BOOTSTRAP_PORT|none] ... --decode URL ...\n"
        "                [--host H] [--port P] [--policy P] [OVERRIDES]\n"
        "       pdrouter --check-config FILE | --derive-shim-key KEY_FILE WORKER | --version | --help\n"
        "\n"
        "Workers (sglang router compatible; each flag may be repeated):\n"
        "  --pd-disaggregation        accepted for compatibility (always on); so is --mini-lb\n"
        "  --prefill URL [PORT|none]  a prefill worker, http://host[:port]; the optional second word is\n"
        "                             its bootstrap port (1..65535) or 'none' (the default: none)\n"
        "  --decode URL               a decode worker\n"
        "  --config FILE              read a YAML configuration (cannot be combined with "
        "--prefill/--decode)\n"
        "  --check-config FILE        validate FILE and exit: 0 valid, 2 invalid\n"
        "  --derive-shim-key KEY_FILE WORKER\n"
        "                             print the key the shim of WORKER (its URL, or its bootstrap\n"
        "                             host:port) signs its event batches with, derived from\n"
        "                             shim_events.key_file KEY_FILE; write it to that worker's key file\n"
        "\n"
        "Kubernetes discovery (sglang router compatible):\n"
        "  --service-discovery        find the workers by label selector (needs a selector below)\n"
        "  --prefill-selector K=V ... prefill pods' labels; --decode-selector K=V ... decode pods'\n"
        "  --service-discovery-namespace NS   namespace (default: the router's own)\n"
        "  --service-discovery-port N         the workers' HTTP port (default 80, as sglang)\n"
        "  --bootstrap-port-annotation KEY    pod annotation with the bootstrap port "
        "(default " PDR_DEF_K8S_BOOTSTRAP_ANNOTATION ")\n"
        "\n"
        "Headers to the workers:\n"
        "  --api-key KEY              sent to every worker as 'Authorization: Bearer KEY' (sglang's\n"
        "                             flag; other users can read a command line: prefer the file)\n"
        "  --api-key-file PATH        the same, read from a file (workers.api_key_file)\n"
        "  --request-id-headers H ... client headers that carry the request id, in order (default\n"
        "                             x-request-id x-correlation-id x-trace-id request-id)\n"
        "\n"
        "Data-parallel attention:\n"
        "  --dp-aware                 ask each worker its dp_size at start (GET /get_server_info): a worker\n"
        "                             of N ranks is N targets (dp_aware; or dp_size: N per worker)\n"
        "\n"
        "Gateway API:\n"
        "  --epp                      also serve as an InferencePool's endpoint picker: Envoy ext_proc over\n"
        "                             gRPC on epp.port (9002), picking with this router's policies\n"
        "Sidecar mode (one router per decode pod):\n"
        "  --sidecar                  the one --decode is the local engine; a request header names the\n"
        "                             prefill of the pool to use (sidecar.enabled)\n"
        "\n"
        "Overrides (also applied on top of --config):\n"
        "  --policy P                 policy for both roles: round_robin, least_load, random,\n"
        "                             cache_aware, power_of_two or precise_prefix\n"
        "  --prefill-policy P         prefill policy (default round_robin)\n"
        "  --decode-policy P          decode policy (default least_load)\n"
        "  --protocol X               sglang, vllm or pdshim (default sglang); --backend sglang too\n"
        "  --cache-aware-seed S       consistent_hash (default) or smallest_tree (sglang's rule)\n"
        "  --max-tree-size BYTES      cache_aware.max_tree_size (sglang's)\n"
        "  --prometheus-port N        a listener serving GET /metrics only (default: none); without it\n"
        "                             --prometheus-host implies 29000, the sglang router's port\n"
        "  --cors-allowed-origins O.. CORS on the data port for these origins ('*': any; default off)\n"
        "  --log-level L              debug, info, warn (or warning), error, critical (as error;\n"
        "                             default info)\n"
        "  --otlp-traces-endpoint URL export trace spans as OTLP/HTTP JSON to URL (tracing.otlp_endpoint;\n"
        "                             e.g. http://collector:4318/v1/traces); --enable-trace is accepted\n"
        "  --retry-max-retries N      attempts in all, 1..11 (retries = N - 1); --disable-retries: 1\n"
        "  --max-payload-size BYTES   largest request body (default 33554432)\n"
        "  --max-concurrent-requests N  requests in flight, -1 = no limit (default 4096); with\n"
        "                             --rate-limit-tokens-per-second it is the bucket's burst too\n"
        "  --request-timeout-secs N   first-byte and stream-idle deadlines (default 60 and 300)\n"
        "  --health-check-endpoint PATH   health.path\n"
        "  --disable-circuit-breaker  outlier.enabled false (the --cb-* flags set outlier.*)\n"
        "\n"
        "Keys (each flag sets the key it names; also applied on top of --config):\n",
        out);
    usage_keys(out);
    fputs("\n"
          "  --version                  print the version and exit\n"
          "  -h, --help                 print this help and exit\n"
          "\n"
          "Both '--opt value' and '--opt=value' are accepted. Every key is described in docs/config.md;\n"
          "docs/migrating-from-sglang-router.md maps every sglang router flag.\n",
          out);
}
