/*
 * Command-line flags: sglang-router-compatible quick-start flags (--pd-disaggregation, --prefill URL
 * [BOOTSTRAP_PORT|none], --decode URL, --host, --port, --policy ...) plus --config FILE and a few
 * overrides. Flags are collected first, then applied on top of the defaults or of the --config file,
 * whatever their order, and the result is validated as a whole. Runs once, on the main thread.
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

enum opt_id {
    OPT_PD,
    OPT_MINI_LB,
    OPT_PREFILL,
    OPT_DECODE,
    OPT_POLICY,
    OPT_PREFILL_POLICY,
    OPT_DECODE_POLICY,
    OPT_PROTOCOL,
    OPT_BACKEND,
    OPT_CONFIG,
    OPT_CHECK,
    OPT_DERIVE_SHIM_KEY,
    OPT_VERSION,
    OPT_HELP,
    OPT_LOG_LEVEL,
    OPT_OTLP_ENDPOINT,
    OPT_ENABLE_TRACE,
    OPT_RETRY_MAX,
    OPT_DISABLE_RETRIES,
    OPT_DISABLE_CB,
    OPT_REQUEST_TIMEOUT,
    OPT_HEALTH_ENDPOINT,
    OPT_MAX_PAYLOAD,
    OPT_MAX_CONCURRENT,
    OPT_PROM_PORT,
    OPT_CORS,
    OPT_SD,
    OPT_PREFILL_SELECTOR,
    OPT_DECODE_SELECTOR,
    OPT_SD_NAMESPACE,
    OPT_SD_PORT,
    OPT_BOOTSTRAP_ANNOTATION,
    OPT_API_KEY,
    OPT_MAX_TREE_SIZE,
    OPT_CACHE_AWARE_SEED,
    OPT_API_KEY_FILE,
    OPT_REQUEST_ID_HEADERS,
    OPT_DP_AWARE,
    OPT_HISTORY_BACKEND,
    OPT_KEY, /* a flag of the schema that sets one key (set_key) */
};

/* How many words follow a flag: none, one, one or more, or zero or more (up to the next "--flag"), as
 * argparse's nargs in the sglang router. */
enum { ARG_NONE, ARG_ONE, ARG_SOME, ARG_ANY };

static const struct opt {
    const char *name;
    enum opt_id id;
    int nargs;
} opts[] = {
    {"pd-disaggregation", OPT_PD, ARG_NONE},
    {"mini-lb", OPT_MINI_LB, ARG_NONE},
    {"prefill", OPT_PREFILL, ARG_ONE},
    {"decode", OPT_DECODE, ARG_ONE},
    {"policy", OPT_POLICY, ARG_ONE},
    {"prefill-policy", OPT_PREFILL_POLICY, ARG_ONE},
    {"decode-policy", OPT_DECODE_POLICY, ARG_ONE},
    {"protocol", OPT_PROTOCOL, ARG_ONE},
    {"backend", OPT_BACKEND, ARG_ONE},
    {"config", OPT_CONFIG, ARG_ONE},
    {"check-config", OPT_CHECK, ARG_ONE},
    {"derive-shim-key", OPT_DERIVE_SHIM_KEY, ARG_SOME},
    {"version", OPT_VERSION, ARG_NONE},
    {"help", OPT_HELP, ARG_NONE},
    {"log-level", OPT_LOG_LEVEL, ARG_ONE},
    {"otlp-traces-endpoint", OPT_OTLP_ENDPOINT, ARG_ONE},
    {"enable-trace", OPT_ENABLE_TRACE, ARG_NONE},
    {"retry-max-retries", OPT_RETRY_MAX, ARG_ONE},
    {"disable-retries", OPT_DISABLE_RETRIES, ARG_NONE},
    {"disable-circuit-breaker", OPT_DISABLE_CB, ARG_NONE},
    {"request-timeout-secs", OPT_REQUEST_TIMEOUT, ARG_ONE},
    {"health-check-endpoint", OPT_HEALTH_ENDPOINT, ARG_ONE},
    {"max-payload-size", OPT_MAX_PAYLOAD, ARG_ONE},
    {"max-concurrent-requests", OPT_MAX_CONCURRENT, ARG_ONE},
    {"prometheus-port", OPT_PROM_PORT, ARG_ONE},
    {"cors-allowed-origins", OPT_CORS, ARG_ANY},
    {"service-discovery", OPT_SD, ARG_NONE},
    {"prefill-selector", OPT_PREFILL_SELECTOR, ARG_SOME},
    {"decode-selector", OPT_DECODE_SELECTOR, ARG_SOME},
    {"service-discovery-namespace", OPT_SD_NAMESPACE, ARG_ONE},
    {"service-discovery-port", OPT_SD_PORT, ARG_ONE},
    {"bootstrap-port-annotation", OPT_BOOTSTRAP_ANNOTATION, ARG_ONE},
    {"api-key", OPT_API_KEY, ARG_ONE},
    {"max-tree-size", OPT_MAX_TREE_SIZE, ARG_ONE},
    {"cache-aware-seed", OPT_CACHE_AWARE_SEED, ARG_ONE},
    {"api-key-file", OPT_API_KEY_FILE, ARG_ONE},
    {"request-id-headers", OPT_REQUEST_ID_HEADERS, ARG_SOME},
    {"dp-aware", OPT_DP_AWARE, ARG_NONE},
    {"history-backend", OPT_HISTORY_BACKEND, ARG_ONE},
};

/* The sglang router's flags that pdrouter has no equivalent for: refused (never ignored), each with what
 * pdrouter offers instead. docs/migrating-from-sglang-router.md has the same table. */
#define NO_TOKENIZER                                                                                         \
    "pdrouter does not template requests or load models: the workers do (--tokenizer-path takes a "          \
    "tokenizer.json or a directory holding one)"
#define NO_HISTORY "pdrouter keeps no conversation or response history"
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

/* Bits of the overrides given on the command line that are not schema keys (those are marked in
 * pstate.keys). */
enum {
    G_CORS = 1 << 0,
    G_API_KEY = 1 << 1,
    G_REQUEST_ID_HEADERS = 1 << 2,
    G_K8S = 1 << 3, /* --service-discovery and its flags: the whole kubernetes section */
};

#define MAX_KEYS 256 /* rows of the schema a command line can mark (checked at run time) */

/* What the flags said beyond the snapshot they fill. */
struct pstate {
    unsigned given;
    unsigned char keys[MAX_KEYS]; /* the schema rows the flags set, by index in pdr_conf_keys */
    const char *config_file;
    int sd;              /* --service-discovery */
    const char *sel_opt; /* the first selector or discovery flag, for the message when sd is missing */
    int sd_port_given;
    int disable_retries;
    int dp_aware;     /* --dp-aware */
    int enable_trace; /* --enable-trace (needs an endpoint or a file) */
};

/* The schema row of path (a key of the schema, or this is a bug caught by every flag test). */
static const pdr_conf_key_t *key_of(const char *path)
{
    return pdr_conf_key_find(path, strlen(path));
}

/* Marks the key path as given on the command line: its value in the flags' snapshot goes over the file's. */
static void mark(struct pstate *ps, const char *path)
{
    const pdr_conf_key_t *k = key_of(path);
    if (k != NULL && (size_t)(k - pdr_conf_keys) < MAX_KEYS)
        ps->keys[k - pdr_conf_keys] = 1;
}

static int marked(const struct pstate *ps, const char *path)
{
    const pdr_conf_key_t *k = key_of(path);
    return k != NULL && (size_t)(k - pdr_conf_keys) < MAX_KEYS && ps->keys[k - pdr_conf_keys];
}

/* A decimal number flag in [min, max]. */
static int argv_double(const char *opt, const char *val, double min, double max, double *out, char *err,
                       size_t errlen)
{
    char *end = NULL;
    double d = strtod(val, &end);
    if (*val == '\0' || *end != '\0' || !(d >= min && d <= max)) {
        pdr__config_err(err, errlen, "argv: --%s: expected a number in %g..%g, got '%s'", opt, min, max, val);
        return PDR_EINVAL;
    }
    *out = d;
    return 0;
}

static int argv_int(const char *opt, const char *val, int64_t min, int64_t max, int *out, char *err,
                    size_t errlen)
{
    int64_t v;
    char shown[80];
    if (pdr__parse_int(val, strlen(val), &v) != 0 || v < min || v > max) {
        pdr__config_err(err, errlen, "argv: --%s: expected an integer in %lld..%lld, got '%s'", opt,
                        (long long)min, (long long)max,
                        pdr__config_show(val, strlen(val), shown, sizeof(shown)));
        return PDR_EINVAL;
    }
    *out = (int)v;
    return 0;
}

static int is_none(const char *s)
{
    return strcasecmp(s, "none") == 0 || strcasecmp(s, "null") == 0;
}

static int is_digits(const char *s)
{
    if (*s == '\0')
        return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return 0;
    return 1;
}

static int add_worker(pdr_config_t *fl, pdr_role_t role, const char *url, int bport, char *err, size_t errlen)
{
    pdr_worker_conf_t **arr = role == PDR_ROLE_PREFILL ? &fl->prefill : &fl->decode;
    size_t *n = role == PDR_ROLE_PREFILL ? &fl->n_prefill : &fl->n_decode;
    const char *opt = role == PDR_ROLE_PREFILL ? "prefill" : "decode";
    char msg[512];
    if (*n >= PDR_CONFIG_MAX_WORKERS) {
        pdr__config_err(err, errlen, "argv: --%s: at most %d workers are allowed", opt,
                        PDR_CONFIG_MAX_WORKERS);
        return PDR_EINVAL;
    }
    pdr_worker_conf_t w;
    if (pdr_worker_conf_parse_url(url, &w, msg, sizeof(msg)) != 0) {
        pdr__config_err(err, errlen, "argv: --%s: %s", opt, msg);
        return PDR_EINVAL;
    }
    w.bootstrap_port = bport;
    pdr_worker_conf_t *na = realloc(*arr, (*n + 1) * sizeof(*na));
    if (na == NULL) {
        pdr_worker_conf_clear(&w);
        pdr__config_err(err, errlen, "argv: out of memory");
        return PDR_ENOMEM;
    }
    *arr = na;
    na[*n] = w;
    (*n)++;
    long j = pdr__workers_find_dup(na, *n - 1);
    if (j >= 0) {
        pdr__config_err(err, errlen, "argv: --%s %s: duplicate worker (same as --%s %s)", opt, url, opt,
                        na[j].url);
        return PDR_EINVAL;
    }
    return 0;
}

static int set_policy(const char *opt, const char *val, pdr_policy_kind_t *out, char *err, size_t errlen)
{
    static const char *const later[] = {"manual", "bucket", "consistent_hashing", "prefix_hash"};
    char shown[80];
    if (pdr__policy_parse(val, strlen(val), out) == 0)
        return 0;
    for (size_t i = 0; i < sizeof(later) / sizeof(later[0]); i++)
        if (strcmp(val, later[i]) == 0) {
            pdr__config_err(err, errlen,
                            "argv: --%s: the %s policy is not available yet; the policies are round_robin, "
                            "least_load, random, cache_aware, power_of_two and precise_prefix",
                            opt, val);
            return PDR_EINVAL;
        }
    pdr__config_err(err, errlen,
                    "argv: --%s: unknown policy '%s', expected round_robin, least_load, random, cache_aware, "
                    "power_of_two or precise_prefix",
                    opt, pdr__config_show(val, strlen(val), shown, sizeof(shown)));
    return PDR_EINVAL;
}

/* Seconds given to a flag, stored as milliseconds (1 s .. one day). */
static int argv_secs(const char *opt, const char *val, int *out_ms, char *err, size_t errlen)
{
    int secs;
    if (argv_int(opt, val, 1, PDR_MAX_MS / 1000, &secs, err, errlen) != 0)
        return PDR_EINVAL;
    *out_ms = secs * 1000;
    return 0;
}

/* sglang's selector words "k=v k2=v2" (or one word holding spaces) as a selector string "k=v,k2=v2". */
static int join_selector(const char *opt, const char *const *vals, int n, char **dst, char *err,
                         size_t errlen)
{
    char buf[4096], shown[80], msg[256];
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        const char *w = vals[i];
        while (*w != '\0') {
            size_t wl = strcspn(w, " ");
            if (wl > 0) {
                const char *eq = memchr(w, '=', wl);
                if (eq == NULL || eq == w) {
                    pdr__config_err(err, errlen, "argv: --%s: expected key=value words, got '%s'", opt,
                                    pdr__config_show(w, wl, shown, sizeof(shown)));
                    return PDR_EINVAL;
                }
                if (len + wl + 2 > sizeof(buf)) {
                    pdr__config_err(err, errlen, "argv: --%s: selector longer than %zu bytes", opt,
                                    sizeof(buf) - 1);
                    return PDR_EINVAL;
                }
                if (len > 0)
                    buf[len++] = ',';
                memcpy(buf + len, w, wl);
                len += wl;
            }
            w += wl;
            while (*w == ' ')
                w++;
        }
    }
    if (len == 0) {
        pdr__config_err(err, errlen, "argv: --%s needs key=value words", opt);
        return PDR_EINVAL;
    }
    if (pdr__check_selector(buf, len, msg, sizeof(msg)) != 0) {
        pdr__config_err(err, errlen, "argv: --%s: %s", opt, msg);
        return PDR_EINVAL;
    }
    if (pdr__config_set_str(dst, buf, len) != 0) {
        pdr__config_err(err, errlen, "argv: out of memory");
        return PDR_ENOMEM;
    }
    return 0;
}

static int set_str(char **dst, const char *val, char *err, size_t errlen)
{
    if (pdr__config_set_str(dst, val, strlen(val)) != 0) {
        pdr__config_err(err, errlen, "argv: out of memory");
        return PDR_ENOMEM;
    }
    return 0;
}

/* The schema row whose flag is --name[0..nlen): its flag in the key's own unit, or with *secs set its flag
 * in seconds (stored x 1000). NULL when no row has it. */
static const pdr_conf_key_t *key_flag(const char *name, size_t nlen, int *secs)
{
    for (size_t i = 0; i < pdr_conf_nkeys && i < MAX_KEYS; i++) {
        const pdr_conf_key_t *k = &pdr_conf_keys[i];
        for (int s = 0; s < 2; s++) {
            const char *f = s ? k->flag_sec : k->flag;
            if (f != NULL && !(k->flags & PDR_KEY_OWN_FLAG) && strlen(f) == nlen + 2 &&
                memcmp(f + 2, name, nlen) == 0) {
                *secs = s;
                return k;
            }
        }
    }
    return NULL;
}

/* A flag that sets the schema key k as it is, or in seconds (1 s .. one day, stored as milliseconds). */
static int set_key(const pdr_conf_key_t *k, int secs, const char *opt, const char *val, pdr_config_t *fl,
                   struct pstate *ps, char *err, size_t errlen)
{
    char *p = (char *)fl + k->off;
    ps->keys[k - pdr_conf_keys] = 1;
    if (secs)
        return argv_secs(opt, val, (int *)(void *)p, err, errlen);
    switch (k->type) {
    case PDR_CT_INT:
        return argv_int(opt, val, k->min, k->max, (int *)(void *)p, err, errlen);
    case PDR_CT_DOUBLE:
        return argv_double(opt, val, (double)k->min, (double)k->max, (double *)(void *)p, err, errlen);
    case PDR_CT_STR:
    case PDR_CT_STR_OPT:
        return set_str((char **)(void *)p, val, err, errlen);
    default:
        pdr__config_err(err, errlen, "argv: --%s: internal error: the key %s has no flag reader", opt,
                        k->path);
        return PDR_EINVAL;
    }
}

/* Handles one option with its values (n of them at vals; none for flags). */
static int handle(const struct opt *o, const char *const *vals, int n, int argc, char **argv, int *i,
                  pdr_config_t *fl, struct pstate *ps, pdr_cli_t *cli, char *err, size_t errlen)
{
    char shown[80], msg[256];
    const char *val = n > 0 ? vals[0] : NULL;
    unsigned *given = &ps->given;
    switch (o->id) {
    case OPT_KEY: /* set_key's */
        break;
    case OPT_DP_AWARE:
        ps->dp_aware = 1;
        return 0;
    case OPT_PD:
    case OPT_MINI_LB:
        return 0;
    /* The sglang router's circuit breaker is pdrouter's outlier detection (docs/operations.md, "Passive
     * health"): the failure threshold, the open time (the base ejection), half-open successes (probation). */
    case OPT_DISABLE_CB:
        mark(ps, "outlier.enabled");
        fl->outlier.enabled = 0;
        return 0;
    case OPT_HELP:
        cli->show_help = 1;
        return 0;
    case OPT_VERSION:
        cli->show_version = 1;
        return 0;
    case OPT_PREFILL: {
        int bport = -1;
        if (*i + 1 < argc && (is_digits(argv[*i + 1]) || is_none(argv[*i + 1]))) {
            const char *p = argv[++*i];
            if (!is_none(p) && argv_int("prefill", p, 1, 65535, &bport, err, errlen) != 0)
                return PDR_EINVAL;
        }
        return add_worker(fl, PDR_ROLE_PREFILL, val, bport, err, errlen);
    }
    case OPT_DECODE:
        return add_worker(fl, PDR_ROLE_DECODE, val, -1, err, errlen);
    case OPT_POLICY:
        mark(ps, "policy.prefill");
        mark(ps, "policy.decode");
        if (set_policy(o->name, val, &fl->policy_prefill, err, errlen) != 0)
            return PDR_EINVAL;
        fl->policy_decode = fl->policy_prefill;
        return 0;
    case OPT_PREFILL_POLICY:
        mark(ps, "policy.prefill");
        return set_policy(o->name, val, &fl->policy_prefill, err, errlen);
    case OPT_DECODE_POLICY:
        mark(ps, "policy.decode");
        return set_policy(o->name, val, &fl->policy_decode, err, errlen);
    /* sglang's choices: memory (its default), none, oracle, postgres. pdrouter keeps no history, which
     * is what none asks for. */
    case OPT_HISTORY_BACKEND:
        if (strcmp(val, "none") == 0)
            return 0;
        pdr__config_err(err, errlen,
                        "argv: --history-backend: '%s' is not supported: " NO_HISTORY
                        " (--history-backend none is accepted)",
                        pdr__config_show(val, strlen(val), shown, sizeof(shown)));
        return PDR_EINVAL;
    case OPT_BACKEND:
        if (strcmp(val, "sglang") != 0) {
            pdr__config_err(err, errlen,
                            "argv: --backend: '%s' is not supported; pdrouter drives sglang or vLLM engines, "
                            "not an OpenAI API (--backend sglang, or --protocol sglang|vllm|pdshim)",
                            pdr__config_show(val, strlen(val), shown, sizeof(shown)));
            return PDR_EINVAL;
        }
        /* --backend sglang is --protocol sglang */
        /* fall through */
    case OPT_PROTOCOL:
        mark(ps, "protocol");
        if (pdr__protocol_parse(val, strlen(val), &fl->protocol) != 0) {
            pdr__config_err(err, errlen,
                            "argv: --protocol: unknown protocol '%s', expected sglang, vllm or pdshim",
                            pdr__config_show(val, strlen(val), shown, sizeof(shown)));
            return PDR_EINVAL;
        }
        return 0; /* pdshim: its ticket keys come from the --config file (validated with the rest) */
    case OPT_CONFIG:
        if (ps->config_file != NULL) {
            pdr__config_err(err, errlen, "argv: --config given twice");
            return PDR_EINVAL;
        }
        ps->config_file = val;
        return 0;
    case OPT_CHECK:
        cli->check_config = val;
        return 0;
    case OPT_DERIVE_SHIM_KEY:
        if (n != 2) {
            pdr__config_err(
                err, errlen,
                "argv: --derive-shim-key takes two words: the shim_events.key_file and the worker "
                "(its URL, or its bootstrap host:port)");
            return PDR_EINVAL;
        }
        cli->derive_key_file = vals[0];
        cli->derive_worker = vals[1];
        return 0;
    case OPT_LOG_LEVEL: {
        const char *canon = pdr__log_level_parse(val, strlen(val));
        mark(ps, "log.level");
        if (canon == NULL) {
            pdr__config_err(err, errlen,
                            "argv: --log-level: unknown level '%s', expected debug, info, warn (warning), "
                            "error or critical",
                            pdr__config_show(val, strlen(val), shown, sizeof(shown)));
            return PDR_EINVAL;
        }
        return set_str(&fl->log.level, canon, err, errlen);
    }
    case OPT_OTLP_ENDPOINT:
        mark(ps, "tracing.otlp_endpoint");
        if (pdr__check_api_server(val, strlen(val), msg, sizeof(msg)) != 0) {
            pdr__config_err(
                err, errlen,
                "argv: --otlp-traces-endpoint: %s (pdrouter exports OTLP/HTTP with JSON, not gRPC: "
                "give the collector's traces URL, such as http://HOST:4318/v1/traces)",
                msg);
            return PDR_EINVAL;
        }
        return set_str(&fl->tracing.otlp_endpoint, val, err, errlen);
    case OPT_ENABLE_TRACE:
        ps->enable_trace = 1;
        return 0;
    case OPT_RETRY_MAX: {
        /* sglang counts attempts (--disable-retries is "max retries 1"); retries.max counts the retries. */
        int attempts;
        mark(ps, "retries.max");
        if (argv_int(o->name, val, 1, PDR_MAX_RETRIES + 1, &attempts, err, errlen) != 0)
            return PDR_EINVAL;
        fl->retries.max = attempts - 1;
        return 0;
    }
    case OPT_DISABLE_RETRIES:
        mark(ps, "retries.max");
        ps->disable_retries = 1;
        return 0;
    case OPT_REQUEST_TIMEOUT:
        /* sglang bounds a whole request; pdrouter bounds the wait for the first byte and each silence
         * of a stream, never a stream that keeps flowing. */
        mark(ps, "timeouts.first_byte_ms");
        mark(ps, "timeouts.stream_idle_ms");
        if (argv_secs(o->name, val, &fl->timeouts.first_byte_ms, err, errlen) != 0)
            return PDR_EINVAL;
        fl->timeouts.stream_idle_ms = fl->timeouts.first_byte_ms;
        return 0;
    case OPT_HEALTH_ENDPOINT:
        mark(ps, "health.path");
        for (const char *c = val; *c; c++)
            if ((unsigned char)*c <= 0x20 || *c == 0x7f) {
                pdr__config_err(err, errlen, "argv: --%s: no spaces or control characters in a path",
                                o->name);
                return PDR_EINVAL;
            }
        if (val[0] != '/') {
            pdr__config_err(err, errlen, "argv: --%s: '%s' must start with '/'", o->name,
                            pdr__config_show(val, strlen(val), shown, sizeof(shown)));
            return PDR_EINVAL;
        }
        return set_str(&fl->health.path, val, err, errlen);
    case OPT_MAX_PAYLOAD: {
        int64_t v;
        mark(ps, "limits.max_body_bytes");
        if (pdr__parse_int(val, strlen(val), &v) != 0 || v < PDR_MIN_BODY_BYTES || v > PDR_MAX_BODY_BYTES) {
            pdr__config_err(err, errlen, "argv: --%s: expected a size in bytes in %lld..%lld, got '%s'",
                            o->name, (long long)PDR_MIN_BODY_BYTES, (long long)PDR_MAX_BODY_BYTES,
                            pdr__config_show(val, strlen(val), shown, sizeof(shown)));
            return PDR_EINVAL;
        }
        fl->limits.max_body_bytes = v;
        return 0;
    }
    case OPT_MAX_CONCURRENT:
        mark(ps, "limits.max_inflight");
        if (strcmp(val, "-1") == 0) { /* sglang: no limit; here: the largest limit */
            fl->limits.max_inflight = PDR_MAX_INFLIGHT;
            return 0;
        }
        return argv_int(o->name, val, 1, PDR_MAX_INFLIGHT, &fl->limits.max_inflight, err, errlen);
    case OPT_PROM_PORT:
        mark(ps, "metrics.port");
        return argv_int(o->name, val, 1, 65535, &fl->metrics_port, err, errlen);
    case OPT_CORS:
        *given |= G_CORS;
        if (n == 0) {
            pdr__config_err(err, errlen,
                            "argv: --cors-allowed-origins needs the origins, or '*' for any origin (what the "
                            "sglang router allows when it is given none)");
            return PDR_EINVAL;
        }
        pdr__config_free_origins(fl);
        for (int k = 0; k < n; k++) {
            if (pdr__check_origin(vals[k], strlen(vals[k]), msg, sizeof(msg)) != 0) {
                pdr__config_err(err, errlen, "argv: --cors-allowed-origins: '%s': %s",
                                pdr__config_show(vals[k], strlen(vals[k]), shown, sizeof(shown)), msg);
                return PDR_EINVAL;
            }
            if (fl->cors.n >= PDR_CONFIG_MAX_ORIGINS) {
                pdr__config_err(err, errlen, "argv: --cors-allowed-origins: at most %d origins",
                                PDR_CONFIG_MAX_ORIGINS);
                return PDR_EINVAL;
            }
            if (pdr__config_add_origin(fl, vals[k], strlen(vals[k])) != 0) {
                pdr__config_err(err, errlen, "argv: out of memory");
                return PDR_ENOMEM;
            }
        }
        return 0;
    case OPT_SD:
        *given |= G_K8S;
        ps->sd = 1;
        return 0;
    case OPT_PREFILL_SELECTOR:
    case OPT_DECODE_SELECTOR: {
        pdr_role_t role = o->id == OPT_PREFILL_SELECTOR ? PDR_ROLE_PREFILL : PDR_ROLE_DECODE;
        *given |= G_K8S;
        if (ps->sel_opt == NULL)
            ps->sel_opt = o->name;
        return join_selector(o->name, vals, n, &fl->discovery.kubernetes.role[role].selector, err, errlen);
    }
    case OPT_SD_NAMESPACE:
        *given |= G_K8S;
        if (ps->sel_opt == NULL)
            ps->sel_opt = o->name;
        if (pdr__check_namespace(val, strlen(val), msg, sizeof(msg)) != 0) {
            pdr__config_err(err, errlen, "argv: --%s: %s", o->name, msg);
            return PDR_EINVAL;
        }
        return set_str(&fl->discovery.kubernetes.namespace_, val, err, errlen);
    case OPT_SD_PORT: {
        int port;
        *given |= G_K8S;
        if (ps->sel_opt == NULL)
            ps->sel_opt = o->name;
        if (argv_int(o->name, val, 1, 65535, &port, err, errlen) != 0)
            return PDR_EINVAL;
        ps->sd_port_given = 1;
        fl->discovery.kubernetes.role[PDR_ROLE_PREFILL].port = port;
        fl->discovery.kubernetes.role[PDR_ROLE_DECODE].port = port;
        return 0;
    }
    case OPT_MAX_TREE_SIZE: {
        int64_t v;
        mark(ps, "cache_aware.max_tree_size");
        if (pdr__parse_int(val, strlen(val), &v) != 0 || v < 1024 || v > ((int64_t)1 << 40)) {
            pdr__config_err(err, errlen, "argv: --max-tree-size: expected an integer in 1024..%lld, got '%s'",
                            (long long)1 << 40, val);
            return PDR_EINVAL;
        }
        fl->cache_aware.max_tree_size = v;
        return 0;
    }
    case OPT_CACHE_AWARE_SEED:
        mark(ps, "cache_aware.seed");
        if (strcmp(val, "smallest_tree") == 0)
            fl->cache_aware.seed = PDR_CA_SEED_SMALLEST_TREE;
        else if (strcmp(val, "consistent_hash") == 0)
            fl->cache_aware.seed = PDR_CA_SEED_CONSISTENT_HASH;
        else {
            pdr__config_err(
                err, errlen,
                "argv: --cache-aware-seed: unknown seed '%s', expected smallest_tree or consistent_hash",
                val);
            return PDR_EINVAL;
        }
        return 0;
    case OPT_API_KEY:
    case OPT_API_KEY_FILE: {
        char kmsg[512];
        if (*given & G_API_KEY) {
            pdr__config_err(err, errlen, "argv: --%s: give one of --api-key and --api-key-file, once",
                            o->name);
            return PDR_EINVAL;
        }
        *given |= G_API_KEY;
        if (o->id == OPT_API_KEY) {
            if (pdr__check_api_key(val, strlen(val), kmsg, sizeof(kmsg)) != 0) {
                pdr__config_err(err, errlen, "argv: --api-key: %s", kmsg);
                return PDR_EINVAL;
            }
            return set_str(&fl->worker_api_key, val, err, errlen);
        }
        if (pdr__read_secret_file(val, &fl->worker_api_key, kmsg, sizeof(kmsg)) != 0) {
            pdr__config_err(err, errlen, "argv: --api-key-file: %s", kmsg);
            return PDR_EINVAL;
        }
        return set_str(&fl->worker_api_key_file, val, err, errlen);
    }
    case OPT_REQUEST_ID_HEADERS:
        if (*given & G_REQUEST_ID_HEADERS) {
            pdr__config_err(err, errlen, "argv: --request-id-headers given twice");
            return PDR_EINVAL;
        }
        *given |= G_REQUEST_ID_HEADERS;
        pdr__free_names(fl->request_id_headers, fl->n_request_id_headers);
        fl->request_id_headers = NULL;
        fl->n_request_id_headers = 0;
        if (n > PDR_CONFIG_MAX_REQUEST_ID_HEADERS) {
            pdr__config_err(err, errlen, "argv: --request-id-headers: at most %d names",
                            PDR_CONFIG_MAX_REQUEST_ID_HEADERS);
            return PDR_EINVAL;
        }
        if ((fl->request_id_headers = calloc((size_t)n, sizeof(char *))) == NULL) {
            pdr__config_err(err, errlen, "argv: out of memory");
            return PDR_ENOMEM;
        }
        for (int k = 0; k < n; k++) {
            if (pdr__check_header_name(vals[k], strlen(vals[k]), msg, sizeof(msg)) != 0) {
                pdr__config_err(err, errlen, "argv: --request-id-headers '%s': %s",
                                pdr__config_show(vals[k], strlen(vals[k]), shown, sizeof(shown)), msg);
                return PDR_EINVAL;
            }
            char *copy = NULL;
            if (set_str(&copy, vals[k], err, errlen) != 0)
                return PDR_ENOMEM;
            for (char *q = copy; *q; q++)
                if (*q >= 'A' && *q <= 'Z')
                    *q = (char)(*q - 'A' + 'a');
            fl->request_id_headers[fl->n_request_id_headers++] = copy;
        }
        return 0;
    case OPT_BOOTSTRAP_ANNOTATION:
        *given |= G_K8S;
        if (ps->sel_opt == NULL)
            ps->sel_opt = o->name;
        if (pdr__check_annotation(val, strlen(val), msg, sizeof(msg)) != 0) {
            pdr__config_err(err, errlen, "argv: --%s: %s", o->name, msg);
            return PDR_EINVAL;
        }
        return set_str(&fl->discovery.kubernetes.bootstrap_port_annotation, val, err, errlen);
    }
    pdr__config_err(err, errlen, "argv: internal error: unhandled option --%s", o->name);
    return PDR_EINVAL;
}

/* After every flag was read: what depends on several of them. */
static int finish_flags(pdr_config_t *fl, struct pstate *ps, char *err, size_t errlen)
{
    if (ps->enable_trace && fl->tracing.otlp_endpoint == NULL && fl->tracing.file == NULL) {
        pdr__config_err(err, errlen,
                        "argv: --enable-trace needs --otlp-traces-endpoint URL (OTLP/HTTP JSON, such as "
                        "http://HOST:4318/v1/traces) or --trace-file PATH");
        return PDR_EINVAL;
    }
    if (ps->disable_retries)
        fl->retries.max = 0; /* as in the sglang router, it wins over --retry-max-retries */
    /* sglang's bucket holds --max-concurrent-requests tokens: the burst of the rate limit. */
    if (marked(ps, "limits.rate_limit_rps") && marked(ps, "limits.max_inflight")) {
        fl->limits.rate_limit_burst = fl->limits.max_inflight;
        mark(ps, "limits.rate_limit_burst");
    }
    if (marked(ps, "metrics.host") && !marked(ps, "metrics.port")) {
        fl->metrics_port = PDR_SGLANG_PROMETHEUS_PORT;
        mark(ps, "metrics.port");
    }
    if (ps->given & G_K8S) {
        if (!ps->sd) {
            pdr__config_err(err, errlen, "argv: --%s needs --service-discovery", ps->sel_opt);
            return PDR_EINVAL;
        }
        if (fl->discovery.kubernetes.role[PDR_ROLE_PREFILL].selector == NULL &&
            fl->discovery.kubernetes.role[PDR_ROLE_DECODE].selector == NULL) {
            pdr__config_err(
                err, errlen,
                "argv: --service-discovery needs --prefill-selector K=V ... and/or --decode-selector "
                "K=V ... (PD mode; --selector is for the sglang router's regular mode)");
            return PDR_EINVAL;
        }
        if (!ps->sd_port_given) { /* the sglang router's default; 0 (the pod's containerPort) in YAML */
            fl->discovery.kubernetes.role[PDR_ROLE_PREFILL].port = PDR_SGLANG_DISCOVERY_PORT;
            fl->discovery.kubernetes.role[PDR_ROLE_DECODE].port = PDR_SGLANG_DISCOVERY_PORT;
        }
    }
    return 0;
}

static void swap_str(char **a, char **b)
{
    char *t = *a;
    *a = *b;
    *b = t;
}

/* Moves the given overrides from fl into c: every schema key a flag set, then the lists and sections. */
static void apply_overrides(pdr_config_t *c, pdr_config_t *fl, const struct pstate *ps)
{
    unsigned given = ps->given;
    for (size_t i = 0; i < pdr_conf_nkeys && i < MAX_KEYS; i++) {
        const pdr_conf_key_t *k = &pdr_conf_keys[i];
        if (!ps->keys[i])
            continue;
        if (k->size == sizeof(char *) && pdr_conf_key_is_string(k))
            swap_str((char **)(void *)((char *)c + k->off), (char **)(void *)((char *)fl + k->off));
        else
            memcpy((char *)c + k->off, (char *)fl + k->off, k->size);
    }
    if (given & G_K8S) {
        for (int r = 0; r < 2; r++) { /* a role the flags name; the file's other role stays */
            if (fl->discovery.kubernetes.role[r].selector == NULL)
                continue;
            swap_str(&c->discovery.kubernetes.role[r].selector, &fl->discovery.kubernetes.role[r].selector);
            c->discovery.kubernetes.role[r].port = fl->discovery.kubernetes.role[r].port;
        }
        if (fl->discovery.kubernetes.namespace_ != NULL)
            swap_str(&c->discovery.kubernetes.namespace_, &fl->discovery.kubernetes.namespace_);
        if (fl->discovery.kubernetes.bootstrap_port_annotation != NULL)
            swap_str(&c->discovery.kubernetes.bootstrap_port_annotation,
                     &fl->discovery.kubernetes.bootstrap_port_annotation);
    }
    if (given & G_API_KEY) {
        swap_str(&c->worker_api_key, &fl->worker_api_key);
        swap_str(&c->worker_api_key_file, &fl->worker_api_key_file);
    }
    if (given & G_REQUEST_ID_HEADERS) {
        char **names = c->request_id_headers;
        size_t nn = c->n_request_id_headers;
        c->request_id_headers = fl->request_id_headers;
        c->n_request_id_headers = fl->n_request_id_headers;
        fl->request_id_headers = names;
        fl->n_request_id_headers = nn;
    }
    if (given & G_CORS) {
        pdr__config_free_origins(c);
        c->cors = fl->cors;
        fl->cors.origins = NULL;
        fl->cors.n = 0;
    }
}

static const struct refused *find_refused(const char *name, size_t nlen)
{
    for (size_t k = 0; k < sizeof(refused) / sizeof(refused[0]); k++)
        if (strlen(refused[k].name) == nlen && memcmp(refused[k].name, name, nlen) == 0)
            return &refused[k];
    return NULL;
}

int pdr_config_parse_args(int argc, char **argv, pdr_cli_t *cli, char *err, size_t errlen)
{
    struct pstate ps;
    char shown[80];
    int rc = 0;

    memset(cli, 0, sizeof(*cli));
    memset(&ps, 0, sizeof(ps));
    pdr__config_err(err, errlen, "argv: unknown error");
    pdr_config_t *fl = pdr_config_new_default();
    if (fl == NULL) {
        pdr__config_err(err, errlen, "argv: out of memory");
        return PDR_ENOMEM;
    }

    for (int i = 1; i < argc && rc == 0; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0) {
            cli->show_help = 1;
            continue;
        }
        if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
            pdr__config_err(err, errlen, "argv: unexpected argument '%s' (see --help)",
                            pdr__config_show(a, strlen(a), shown, sizeof(shown)));
            rc = PDR_EINVAL;
            break;
        }
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t nlen = eq != NULL ? (size_t)(eq - name) : strlen(name);
        const struct opt *o = NULL;
        for (size_t k = 0; k < sizeof(opts) / sizeof(opts[0]); k++) {
            if (strlen(opts[k].name) == nlen && memcmp(opts[k].name, name, nlen) == 0) {
                o = &opts[k];
                break;
            }
        }
        /* Not one of the flags above: a flag of the schema, which sets its key. */
        int secs = 0;
        const pdr_conf_key_t *key = o == NULL ? key_flag(name, nlen, &secs) : NULL;
        struct opt kopt = {key != NULL ? (secs ? key->flag_sec : key->flag) + 2 : NULL, OPT_KEY, ARG_ONE};
        if (key != NULL)
            o = &kopt;
        if (o == NULL) {
            const struct refused *r = find_refused(name, nlen);
            if (r != NULL)
                pdr__config_err(err, errlen, "argv: --%s (sglang router) is not supported: %s", r->name,
                                r->why);
            else
                pdr__config_err(err, errlen, "argv: unknown option '--%s' (see --help)",
                                pdr__config_show(name, nlen, shown, sizeof(shown)));
            rc = PDR_EINVAL;
            break;
        }
        const char *const *vals = NULL;
        const char *one[1];
        int n = 0;
        if (o->nargs == ARG_NONE) {
            if (eq != NULL) {
                pdr__config_err(err, errlen, "argv: --%s takes no value", o->name);
                rc = PDR_EINVAL;
                break;
            }
        } else if (eq != NULL) {
            one[0] = eq + 1;
            vals = one;
            n = 1;
        } else {
            /* The words up to the next option: one for ARG_ONE, all of them for ARG_SOME/ARG_ANY. */
            vals = (const char *const *)argv + i + 1;
            while (i + 1 + n < argc && strncmp(argv[i + 1 + n], "--", 2) != 0 &&
                   (o->nargs != ARG_ONE || n == 0))
                n++;
            if (n == 0 && o->nargs != ARG_ANY) {
                pdr__config_err(err, errlen, "argv: --%s needs a value", o->name);
                rc = PDR_EINVAL;
                break;
            }
            i += n;
        }
        for (int k = 0; k < n; k++)
            if (vals[k][0] == '\0') {
                pdr__config_err(err, errlen, "argv: --%s: empty value", o->name);
                rc = PDR_EINVAL;
            }
        if (rc == 0 && key != NULL)
            rc = set_key(key, secs, o->name, vals[0], fl, &ps, err, errlen);
        else if (rc == 0)
            rc = handle(o, vals, n, argc, argv, &i, fl, &ps, cli, err, errlen);
    }
    if (rc == 0)
        rc = finish_flags(fl, &ps, err, errlen);
    if (rc != 0)
        goto fail;

    if (ps.config_file != NULL && (fl->n_prefill > 0 || fl->n_decode > 0)) {
        pdr__config_err(err, errlen,
                        "argv: --config cannot be combined with --prefill or --decode; list the "
                        "workers in the file");
        rc = PDR_EINVAL;
        goto fail;
    }
    if (cli->show_help || cli->show_version || cli->check_config != NULL || cli->derive_worker != NULL) {
        pdr_config_unref(fl);
        return 0;
    }

    pdr_config_t *c;
    if (ps.config_file != NULL) {
        c = pdr_config_load_file(ps.config_file, err, errlen);
        if (c == NULL) {
            rc = PDR_ECONFIG;
            goto fail;
        }
        int proto = marked(&ps, "protocol");
        if (c->n_pools > 0 && (proto || marked(&ps, "policy.prefill") || marked(&ps, "policy.decode"))) {
            pdr__config_err(
                err, errlen, "argv: %s: %s has pools:, each with its own policy and protocol; set them there",
                proto ? "--protocol" : "--policy/--prefill-policy/--decode-policy", ps.config_file);
            pdr_config_unref(c);
            rc = PDR_EINVAL;
            goto fail;
        }
        apply_overrides(c, fl, &ps);
        pdr_config_unref(fl);
        fl = NULL;
    } else {
        if (fl->n_prefill == 0 && fl->n_decode == 0 && !ps.sd) {
            pdr__config_err(err, errlen,
                            "argv: no workers: give --prefill URL and --decode URL, or --config FILE "
                            "(see --help)");
            rc = PDR_EINVAL;
            goto fail;
        }
        if (set_str(&fl->source, "<command line>", err, errlen) != 0) {
            rc = PDR_ENOMEM;
            goto fail;
        }
        c = fl;
        fl = NULL;
    }
    char msg[512];
    if (pdr_config_validate(c, msg, sizeof(msg)) != 0) {
        if (ps.config_file == NULL && c->n_prefill == 0 &&
            !pdr__role_discovered(&c->discovery, PDR_ROLE_PREFILL))
            pdr__config_err(err, errlen, "argv: at least one --prefill URL is required%s",
                            ps.sd ? " (or --prefill-selector)" : "");
        else if (ps.config_file == NULL && c->n_decode == 0 &&
                 !pdr__role_discovered(&c->discovery, PDR_ROLE_DECODE))
            pdr__config_err(err, errlen, "argv: at least one --decode URL is required%s",
                            ps.sd ? " (or --decode-selector)" : "");
        else
            pdr__config_err(err, errlen, "argv: %s", msg);
        pdr_config_unref(c);
        return PDR_EINVAL;
    }
    if (ps.dp_aware)
        c->dp_aware = 1;
    cli->config = c;
    return 0;

fail:
    pdr_config_unref(fl);
    memset(cli, 0, sizeof(*cli));
    return rc < 0 ? rc : PDR_EINVAL;
}
