/*
 * The command-line flags of their own shape: the sglang router's worker flags (--prefill URL [PORT|none],
 * --decode URL), names (policies, protocol, log level), flags that set several keys or take special
 * values (--request-timeout-secs, --max-concurrent-requests -1), the Kubernetes group and the lists. The
 * flags that set one key as it is are the schema's (cli.c, set_key). Runs once, on the main thread.
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

const struct opt pdr__cli_opts[] = {
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
    {"epp", OPT_EPP, ARG_NONE},
    {"history-backend", OPT_HISTORY_BACKEND, ARG_ONE},
    {"sidecar", OPT_SIDECAR, ARG_NONE},
};
const size_t pdr__cli_nopts = sizeof(pdr__cli_opts) / sizeof(pdr__cli_opts[0]);

/* The schema row of path (a key of the schema, or this is a bug caught by every flag test). */
static const pdr_conf_key_t *key_of(const char *path)
{
    return pdr_conf_key_find(path, strlen(path));
}

/* Marks the key path as given on the command line: its value in the flags' snapshot goes over the file's. */
void pdr__cli_mark(struct pstate *ps, const char *path)
{
    const pdr_conf_key_t *k = key_of(path);
    if (k != NULL && (size_t)(k - pdr_conf_keys) < MAX_KEYS)
        ps->keys[k - pdr_conf_keys] = 1;
}

int pdr__cli_marked(const struct pstate *ps, const char *path)
{
    const pdr_conf_key_t *k = key_of(path);
    return k != NULL && (size_t)(k - pdr_conf_keys) < MAX_KEYS && ps->keys[k - pdr_conf_keys];
}

/* A decimal number flag in [min, max]. */
int pdr__cli_argv_double(const char *opt, const char *val, double min, double max, double *out, char *err,
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

int pdr__cli_argv_int(const char *opt, const char *val, int64_t min, int64_t max, int *out, char *err,
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
    char shown[80], names[256];
    if (pdr__policy_parse(val, strlen(val), out) == 0)
        return 0;
    for (size_t i = 0; i < sizeof(later) / sizeof(later[0]); i++)
        if (strcmp(val, later[i]) == 0) {
            pdr_policy_names(names, sizeof(names), " and ");
            pdr__config_err(err, errlen,
                            "argv: --%s: the %s policy is not available yet; the policies are %s", opt, val,
                            names);
            return PDR_EINVAL;
        }
    pdr_policy_names(names, sizeof(names), " or ");
    pdr__config_err(err, errlen, "argv: --%s: unknown policy '%s', expected %s", opt,
                    pdr__config_show(val, strlen(val), shown, sizeof(shown)), names);
    return PDR_EINVAL;
}

/* Seconds given to a flag, stored as milliseconds (1 s .. one day). */
int pdr__cli_argv_secs(const char *opt, const char *val, int *out_ms, char *err, size_t errlen)
{
    int secs;
    if (pdr__cli_argv_int(opt, val, 1, PDR_MAX_MS / 1000, &secs, err, errlen) != 0)
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

int pdr__cli_set_str(char **dst, const char *val, char *err, size_t errlen)
{
    if (pdr__config_set_str(dst, val, strlen(val)) != 0) {
        pdr__config_err(err, errlen, "argv: out of memory");
        return PDR_ENOMEM;
    }
    return 0;
}

/* Handles one option with its values (n of them at vals; none for flags). */
int pdr__cli_handle(const struct opt *o, const char *const *vals, int n, int argc, char **argv, int *i,
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
    case OPT_EPP:
        pdr__cli_mark(ps, "epp.enabled");
        fl->epp.enabled = 1;
        return 0;
    case OPT_SIDECAR:
        pdr__cli_mark(ps, "sidecar.enabled");
        fl->sidecar.enabled = 1;
        return 0;
    case OPT_PD:
    case OPT_MINI_LB:
        return 0;
    /* The sglang router's circuit breaker is pdrouter's outlier detection (docs/operations.md, "Passive
     * health"): the failure threshold, the open time (the base ejection), half-open successes (probation). */
    case OPT_DISABLE_CB:
        pdr__cli_mark(ps, "outlier.enabled");
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
            if (!is_none(p) && pdr__cli_argv_int("prefill", p, 1, 65535, &bport, err, errlen) != 0)
                return PDR_EINVAL;
        }
        return add_worker(fl, PDR_ROLE_PREFILL, val, bport, err, errlen);
    }
    case OPT_DECODE:
        return add_worker(fl, PDR_ROLE_DECODE, val, -1, err, errlen);
    case OPT_POLICY:
        pdr__cli_mark(ps, "policy.prefill");
        pdr__cli_mark(ps, "policy.decode");
        if (set_policy(o->name, val, &fl->policy_prefill, err, errlen) != 0)
            return PDR_EINVAL;
        fl->policy_decode = fl->policy_prefill;
        return 0;
    case OPT_PREFILL_POLICY:
        pdr__cli_mark(ps, "policy.prefill");
        return set_policy(o->name, val, &fl->policy_prefill, err, errlen);
    case OPT_DECODE_POLICY:
        pdr__cli_mark(ps, "policy.decode");
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
        pdr__cli_mark(ps, "protocol");
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
        pdr__cli_mark(ps, "log.level");
        if (canon == NULL) {
            pdr__config_err(err, errlen,
                            "argv: --log-level: unknown level '%s', expected debug, info, warn (warning), "
                            "error or critical",
                            pdr__config_show(val, strlen(val), shown, sizeof(shown)));
            return PDR_EINVAL;
        }
        return pdr__cli_set_str(&fl->log.level, canon, err, errlen);
    }
    case OPT_OTLP_ENDPOINT:
        pdr__cli_mark(ps, "tracing.otlp_endpoint");
        if (pdr__check_api_server(val, strlen(val), msg, sizeof(msg)) != 0) {
            pdr__config_err(
                err, errlen,
                "argv: --otlp-traces-endpoint: %s (pdrouter exports OTLP/HTTP with JSON, not gRPC: "
                "give the collector's traces URL, such as http://HOST:4318/v1/traces)",
                msg);
            return PDR_EINVAL;
        }
        return pdr__cli_set_str(&fl->tracing.otlp_endpoint, val, err, errlen);
    case OPT_ENABLE_TRACE:
        ps->enable_trace = 1;
        return 0;
    case OPT_RETRY_MAX: {
        /* sglang counts attempts (--disable-retries is "max retries 1"); retries.max counts the retries. */
        int attempts;
        pdr__cli_mark(ps, "retries.max");
        if (pdr__cli_argv_int(o->name, val, 1, PDR_MAX_RETRIES + 1, &attempts, err, errlen) != 0)
            return PDR_EINVAL;
        fl->retries.max = attempts - 1;
        return 0;
    }
    case OPT_DISABLE_RETRIES:
        pdr__cli_mark(ps, "retries.max");
        ps->disable_retries = 1;
        return 0;
    case OPT_REQUEST_TIMEOUT:
        /* sglang bounds a whole request; pdrouter bounds the wait for the first byte and each silence
         * of a stream, never a stream that keeps flowing. */
        pdr__cli_mark(ps, "timeouts.first_byte_ms");
        pdr__cli_mark(ps, "timeouts.stream_idle_ms");
        if (pdr__cli_argv_secs(o->name, val, &fl->timeouts.first_byte_ms, err, errlen) != 0)
            return PDR_EINVAL;
        fl->timeouts.stream_idle_ms = fl->timeouts.first_byte_ms;
        return 0;
    case OPT_HEALTH_ENDPOINT:
        pdr__cli_mark(ps, "health.path");
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
        return pdr__cli_set_str(&fl->health.path, val, err, errlen);
    case OPT_MAX_PAYLOAD: {
        int64_t v;
        pdr__cli_mark(ps, "limits.max_body_bytes");
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
        pdr__cli_mark(ps, "limits.max_inflight");
        if (strcmp(val, "-1") == 0) { /* sglang: no limit; here: the largest limit */
            fl->limits.max_inflight = PDR_MAX_INFLIGHT;
            return 0;
        }
        return pdr__cli_argv_int(o->name, val, 1, PDR_MAX_INFLIGHT, &fl->limits.max_inflight, err, errlen);
    case OPT_PROM_PORT:
        pdr__cli_mark(ps, "metrics.port");
        return pdr__cli_argv_int(o->name, val, 1, 65535, &fl->metrics_port, err, errlen);
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
        return pdr__cli_set_str(&fl->discovery.kubernetes.namespace_, val, err, errlen);
    case OPT_SD_PORT: {
        int port;
        *given |= G_K8S;
        if (ps->sel_opt == NULL)
            ps->sel_opt = o->name;
        if (pdr__cli_argv_int(o->name, val, 1, 65535, &port, err, errlen) != 0)
            return PDR_EINVAL;
        ps->sd_port_given = 1;
        fl->discovery.kubernetes.role[PDR_ROLE_PREFILL].port = port;
        fl->discovery.kubernetes.role[PDR_ROLE_DECODE].port = port;
        return 0;
    }
    case OPT_MAX_TREE_SIZE: {
        int64_t v;
        pdr__cli_mark(ps, "cache_aware.max_tree_size");
        if (pdr__parse_int(val, strlen(val), &v) != 0 || v < 1024 || v > ((int64_t)1 << 40)) {
            pdr__config_err(err, errlen, "argv: --max-tree-size: expected an integer in 1024..%lld, got '%s'",
                            (long long)1 << 40, val);
            return PDR_EINVAL;
        }
        fl->cache_aware.max_tree_size = v;
        return 0;
    }
    case OPT_CACHE_AWARE_SEED:
        pdr__cli_mark(ps, "cache_aware.seed");
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
            return pdr__cli_set_str(&fl->worker_api_key, val, err, errlen);
        }
        if (pdr__read_secret_file(val, &fl->worker_api_key, kmsg, sizeof(kmsg)) != 0) {
            pdr__config_err(err, errlen, "argv: --api-key-file: %s", kmsg);
            return PDR_EINVAL;
        }
        return pdr__cli_set_str(&fl->worker_api_key_file, val, err, errlen);
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
            if (pdr__cli_set_str(&copy, vals[k], err, errlen) != 0)
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
        return pdr__cli_set_str(&fl->discovery.kubernetes.bootstrap_port_annotation, val, err, errlen);
    }
    pdr__config_err(err, errlen, "argv: internal error: unhandled option --%s", o->name);
    return PDR_EINVAL;
}
