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

enum opt_id {
    OPT_PD,
    OPT_PREFILL,
    OPT_DECODE,
    OPT_HOST,
    OPT_PORT,
    OPT_POLICY,
    OPT_PREFILL_POLICY,
    OPT_DECODE_POLICY,
    OPT_PROTOCOL,
    OPT_CONFIG,
    OPT_CHECK,
    OPT_VERSION,
    OPT_HELP,
    OPT_LOG_LEVEL,
    OPT_ACCESS_LOG,
    OPT_RETRIES,
    OPT_FIRST_BYTE,
    OPT_KV,
    OPT_HEALTH_INTERVAL,
    OPT_ADMIN_PORT,
    OPT_THREADS,
    OPT_DRAIN_GRACE,
    OPT_DRAIN_TIMEOUT,
    OPT_API_KEY,
    OPT_API_KEY_FILE,
    OPT_REQUEST_ID_HEADERS,
};

static const struct opt {
    const char *name;
    enum opt_id id;
    int has_arg;
} opts[] = {
    {"pd-disaggregation", OPT_PD, 0},
    {"prefill", OPT_PREFILL, 1},
    {"decode", OPT_DECODE, 1},
    {"host", OPT_HOST, 1},
    {"port", OPT_PORT, 1},
    {"policy", OPT_POLICY, 1},
    {"prefill-policy", OPT_PREFILL_POLICY, 1},
    {"decode-policy", OPT_DECODE_POLICY, 1},
    {"protocol", OPT_PROTOCOL, 1},
    {"config", OPT_CONFIG, 1},
    {"check-config", OPT_CHECK, 1},
    {"version", OPT_VERSION, 0},
    {"help", OPT_HELP, 0},
    {"log-level", OPT_LOG_LEVEL, 1},
    {"access-log", OPT_ACCESS_LOG, 1},
    {"retries", OPT_RETRIES, 1},
    {"first-byte-ms", OPT_FIRST_BYTE, 1},
    {"kv-transfer-ms", OPT_KV, 1},
    {"health-interval-ms", OPT_HEALTH_INTERVAL, 1},
    {"admin-port", OPT_ADMIN_PORT, 1},
    {"threads", OPT_THREADS, 1},
    {"drain-grace-ms", OPT_DRAIN_GRACE, 1},
    {"drain-timeout-ms", OPT_DRAIN_TIMEOUT, 1},
    {"api-key", OPT_API_KEY, 1},
    {"api-key-file", OPT_API_KEY_FILE, 1},
    {"request-id-headers", OPT_REQUEST_ID_HEADERS, 1},
};

void pdr_config_usage(FILE *out)
{
    fputs("Usage: pdrouter --config FILE [OVERRIDES]\n"
          "       pdrouter [--pd-disaggregation] --prefill URL [BOOTSTRAP_PORT|none] ... --decode URL ...\n"
          "                [--host H] [--port P] [--policy P] [OVERRIDES]\n"
          "       pdrouter --check-config FILE | --version | --help\n"
          "\n"
          "Workers (sglang router compatible; each flag may be repeated):\n"
          "  --pd-disaggregation        accepted for compatibility (always on)\n"
          "  --prefill URL [PORT|none]  a prefill worker, http://host[:port]; the optional second word is\n"
          "                             its bootstrap port (1..65535) or 'none' (the default: none)\n"
          "  --decode URL               a decode worker\n"
          "  --config FILE              read a YAML configuration (cannot be combined with "
          "--prefill/--decode)\n"
          "  --check-config FILE        validate FILE and exit: 0 valid, 2 invalid\n"
          "\n"
          "Overrides (also applied on top of --config):\n"
          "  --host H                   listen address (default " PDR_DEF_LISTEN_HOST ")\n"
          "  --port P                   listen port (default 8000)\n"
          "  --policy P                 policy for both roles: round_robin, least_load or random\n"
          "  --prefill-policy P         prefill policy (default round_robin)\n"
          "  --decode-policy P          decode policy (default least_load)\n"
          "  --protocol X               sglang, vllm or pdshim (default sglang)\n"
          "  --admin-port N             admin listener port, 0 disables it (default 8001)\n"
          "  --threads N                event-loop threads, 0 = one per CPU core (default 0)\n"
          "  --log-level L              debug, info, warn or error (default info)\n"
          "  --access-log PATH|-|off    access log file, '-' for stdout (default), 'off' to disable\n"
          "  --retries N                retries on another worker pair, 0..10 (default 2)\n"
          "  --first-byte-ms N          deadline for the decode's first byte (default 60000)\n"
          "  --kv-transfer-ms N         deadline for the KV transfer (default 30000)\n"
          "  --health-interval-ms N     health check period (default 2000)\n"
          "  --drain-grace-ms N         on SIGTERM: readiness off, still serving (default 5000)\n"
          "  --drain-timeout-ms N       then: listeners closed, wait for requests (default 30000)\n"
          "  --api-key KEY              sent to every worker as 'Authorization: Bearer KEY' (sglang's\n"
          "                             flag; other users can read a command line: prefer the file)\n"
          "  --api-key-file PATH        the same, read from a file (workers.api_key_file)\n"
          "  --request-id-headers H ... client headers that carry the request id, in order (default\n"
          "                             x-request-id x-correlation-id x-trace-id request-id)\n"
          "\n"
          "  --version                  print the version and exit\n"
          "  -h, --help                 print this help and exit\n"
          "\n"
          "Both '--opt value' and '--opt=value' are accepted. Every key is described in docs/config.md.\n",
          out);
}

/* Bits of the overrides given on the command line. */
enum {
    G_HOST = 1 << 0,
    G_PORT = 1 << 1,
    G_POLICY_P = 1 << 2,
    G_POLICY_D = 1 << 3,
    G_PROTOCOL = 1 << 4,
    G_LOG_LEVEL = 1 << 5,
    G_ACCESS_LOG = 1 << 6,
    G_RETRIES = 1 << 7,
    G_FIRST_BYTE = 1 << 8,
    G_KV = 1 << 9,
    G_HEALTH_INTERVAL = 1 << 10,
    G_ADMIN_PORT = 1 << 11,
    G_THREADS = 1 << 12,
    G_DRAIN_GRACE = 1 << 13,
    G_DRAIN_TIMEOUT = 1 << 14,
    G_API_KEY = 1 << 15,
    G_REQUEST_ID_HEADERS = 1 << 16,
};

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
    char shown[80];
    if (pdr__policy_parse(val, strlen(val), out) != 0) {
        pdr__config_err(err, errlen,
                        "argv: --%s: unknown policy '%s', expected round_robin, least_load or random", opt,
                        pdr__config_show(val, strlen(val), shown, sizeof(shown)));
        return PDR_EINVAL;
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

/* Handles one option with its value (NULL for flags). */
static int handle(const struct opt *o, const char *val, int argc, char **argv, int *i, pdr_config_t *fl,
                  unsigned *given, const char **config_file, pdr_cli_t *cli, char *err, size_t errlen)
{
    char shown[80];
    switch (o->id) {
    case OPT_PD:
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
    case OPT_HOST:
        *given |= G_HOST;
        return set_str(&fl->listen_host, val, err, errlen);
    case OPT_PORT:
        *given |= G_PORT;
        return argv_int(o->name, val, 1, 65535, &fl->listen_port, err, errlen);
    case OPT_POLICY:
        *given |= G_POLICY_P | G_POLICY_D;
        if (set_policy(o->name, val, &fl->policy_prefill, err, errlen) != 0)
            return PDR_EINVAL;
        fl->policy_decode = fl->policy_prefill;
        return 0;
    case OPT_PREFILL_POLICY:
        *given |= G_POLICY_P;
        return set_policy(o->name, val, &fl->policy_prefill, err, errlen);
    case OPT_DECODE_POLICY:
        *given |= G_POLICY_D;
        return set_policy(o->name, val, &fl->policy_decode, err, errlen);
    case OPT_PROTOCOL:
        *given |= G_PROTOCOL;
        if (pdr__protocol_parse(val, strlen(val), &fl->protocol) != 0) {
            pdr__config_err(err, errlen,
                            "argv: --protocol: unknown protocol '%s', expected sglang, vllm or pdshim",
                            pdr__config_show(val, strlen(val), shown, sizeof(shown)));
            return PDR_EINVAL;
        }
        if (fl->protocol != PDR_PROTO_SGLANG) {
            pdr__config_err(err, errlen, "argv: --protocol: " PDR__PROTOCOL_UNSUPPORTED_FMT,
                            pdr_protocol_name(fl->protocol));
            return PDR_EINVAL;
        }
        return 0;
    case OPT_CONFIG:
        if (*config_file != NULL) {
            pdr__config_err(err, errlen, "argv: --config given twice");
            return PDR_EINVAL;
        }
        *config_file = val;
        return 0;
    case OPT_CHECK:
        cli->check_config = val;
        return 0;
    case OPT_LOG_LEVEL: {
        const char *canon = pdr__log_level_parse(val, strlen(val));
        *given |= G_LOG_LEVEL;
        if (canon == NULL) {
            pdr__config_err(err, errlen,
                            "argv: --log-level: unknown level '%s', expected debug, info, warn or error",
                            pdr__config_show(val, strlen(val), shown, sizeof(shown)));
            return PDR_EINVAL;
        }
        return set_str(&fl->log.level, canon, err, errlen);
    }
    case OPT_ACCESS_LOG:
        *given |= G_ACCESS_LOG;
        return set_str(&fl->log.access_log, val, err, errlen);
    case OPT_RETRIES:
        *given |= G_RETRIES;
        return argv_int(o->name, val, 0, PDR_MAX_RETRIES, &fl->retries.max, err, errlen);
    case OPT_FIRST_BYTE:
        *given |= G_FIRST_BYTE;
        return argv_int(o->name, val, 1, PDR_MAX_MS, &fl->timeouts.first_byte_ms, err, errlen);
    case OPT_KV:
        *given |= G_KV;
        return argv_int(o->name, val, 1, PDR_MAX_MS, &fl->timeouts.kv_transfer_ms, err, errlen);
    case OPT_HEALTH_INTERVAL:
        *given |= G_HEALTH_INTERVAL;
        return argv_int(o->name, val, 1, PDR_MAX_MS, &fl->health.interval_ms, err, errlen);
    case OPT_ADMIN_PORT:
        *given |= G_ADMIN_PORT;
        return argv_int(o->name, val, 0, 65535, &fl->admin_port, err, errlen);
    case OPT_THREADS:
        *given |= G_THREADS;
        return argv_int(o->name, val, 0, PDR_MAX_THREADS, &fl->threads, err, errlen);
    case OPT_DRAIN_GRACE:
        *given |= G_DRAIN_GRACE;
        return argv_int(o->name, val, 0, PDR_MAX_MS, &fl->lifecycle.drain_grace_ms, err, errlen);
    case OPT_DRAIN_TIMEOUT:
        *given |= G_DRAIN_TIMEOUT;
        return argv_int(o->name, val, 1, PDR_MAX_MS, &fl->lifecycle.drain_timeout_ms, err, errlen);
    case OPT_API_KEY:
    case OPT_API_KEY_FILE: {
        char msg[512];
        if (*given & G_API_KEY) {
            pdr__config_err(err, errlen, "argv: --%s: give one of --api-key and --api-key-file, once",
                            o->name);
            return PDR_EINVAL;
        }
        *given |= G_API_KEY;
        if (o->id == OPT_API_KEY) {
            if (pdr__check_api_key(val, strlen(val), msg, sizeof(msg)) != 0) {
                pdr__config_err(err, errlen, "argv: --api-key: %s", msg);
                return PDR_EINVAL;
            }
            return set_str(&fl->worker_api_key, val, err, errlen);
        }
        if (pdr__read_secret_file(val, &fl->worker_api_key, msg, sizeof(msg)) != 0) {
            pdr__config_err(err, errlen, "argv: --api-key-file: %s", msg);
            return PDR_EINVAL;
        }
        return set_str(&fl->worker_api_key_file, val, err, errlen);
    }
    case OPT_REQUEST_ID_HEADERS: {
        char msg[256];
        if (*given & G_REQUEST_ID_HEADERS) {
            pdr__config_err(err, errlen, "argv: --request-id-headers given twice");
            return PDR_EINVAL;
        }
        *given |= G_REQUEST_ID_HEADERS;
        pdr__free_names(fl->request_id_headers, fl->n_request_id_headers);
        fl->request_id_headers = NULL;
        fl->n_request_id_headers = 0;
        /* Every word up to the next option (sglang's nargs="+"). */
        for (const char *name = val;;) {
            if (fl->n_request_id_headers == PDR_CONFIG_MAX_REQUEST_ID_HEADERS) {
                pdr__config_err(err, errlen, "argv: --request-id-headers: at most %d names",
                                PDR_CONFIG_MAX_REQUEST_ID_HEADERS);
                return PDR_EINVAL;
            }
            if (pdr__check_header_name(name, strlen(name), msg, sizeof(msg)) != 0) {
                pdr__config_err(err, errlen, "argv: --request-id-headers '%s': %s",
                                pdr__config_show(name, strlen(name), shown, sizeof(shown)), msg);
                return PDR_EINVAL;
            }
            char **na = realloc(fl->request_id_headers, (fl->n_request_id_headers + 1) * sizeof(char *));
            if (na == NULL) {
                pdr__config_err(err, errlen, "argv: out of memory");
                return PDR_ENOMEM;
            }
            fl->request_id_headers = na;
            char *copy = NULL;
            if (set_str(&copy, name, err, errlen) != 0)
                return PDR_ENOMEM;
            for (char *q = copy; *q; q++)
                if (*q >= 'A' && *q <= 'Z')
                    *q = (char)(*q - 'A' + 'a');
            na[fl->n_request_id_headers++] = copy;
            if (*i + 1 >= argc || strncmp(argv[*i + 1], "--", 2) == 0)
                return 0;
            name = argv[++*i];
        }
    }
    }
    pdr__config_err(err, errlen, "argv: internal error: unhandled option --%s", o->name);
    return PDR_EINVAL;
}

static void swap_str(char **a, char **b)
{
    char *t = *a;
    *a = *b;
    *b = t;
}

/* Moves the given overrides from fl into c. */
static void apply_overrides(pdr_config_t *c, pdr_config_t *fl, unsigned given)
{
    if (given & G_HOST)
        swap_str(&c->listen_host, &fl->listen_host);
    if (given & G_PORT)
        c->listen_port = fl->listen_port;
    if (given & G_POLICY_P)
        c->policy_prefill = fl->policy_prefill;
    if (given & G_POLICY_D)
        c->policy_decode = fl->policy_decode;
    if (given & G_PROTOCOL)
        c->protocol = fl->protocol;
    if (given & G_LOG_LEVEL)
        swap_str(&c->log.level, &fl->log.level);
    if (given & G_ACCESS_LOG)
        swap_str(&c->log.access_log, &fl->log.access_log);
    if (given & G_RETRIES)
        c->retries.max = fl->retries.max;
    if (given & G_FIRST_BYTE)
        c->timeouts.first_byte_ms = fl->timeouts.first_byte_ms;
    if (given & G_KV)
        c->timeouts.kv_transfer_ms = fl->timeouts.kv_transfer_ms;
    if (given & G_HEALTH_INTERVAL)
        c->health.interval_ms = fl->health.interval_ms;
    if (given & G_ADMIN_PORT)
        c->admin_port = fl->admin_port;
    if (given & G_THREADS)
        c->threads = fl->threads;
    if (given & G_DRAIN_GRACE)
        c->lifecycle.drain_grace_ms = fl->lifecycle.drain_grace_ms;
    if (given & G_DRAIN_TIMEOUT)
        c->lifecycle.drain_timeout_ms = fl->lifecycle.drain_timeout_ms;
    if (given & G_API_KEY) {
        swap_str(&c->worker_api_key, &fl->worker_api_key);
        swap_str(&c->worker_api_key_file, &fl->worker_api_key_file);
    }
    if (given & G_REQUEST_ID_HEADERS) {
        char **names = c->request_id_headers;
        size_t n = c->n_request_id_headers;
        c->request_id_headers = fl->request_id_headers;
        c->n_request_id_headers = fl->n_request_id_headers;
        fl->request_id_headers = names;
        fl->n_request_id_headers = n;
    }
}

int pdr_config_parse_args(int argc, char **argv, pdr_cli_t *cli, char *err, size_t errlen)
{
    const char *config_file = NULL;
    unsigned given = 0;
    char shown[80];
    int rc = 0;

    memset(cli, 0, sizeof(*cli));
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
        if (o == NULL) {
            pdr__config_err(err, errlen, "argv: unknown option '--%s' (see --help)",
                            pdr__config_show(name, nlen, shown, sizeof(shown)));
            rc = PDR_EINVAL;
            break;
        }
        const char *val = NULL;
        if (!o->has_arg) {
            if (eq != NULL) {
                pdr__config_err(err, errlen, "argv: --%s takes no value", o->name);
                rc = PDR_EINVAL;
                break;
            }
        } else if (eq != NULL) {
            val = eq + 1;
        } else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
            val = argv[++i];
        } else {
            pdr__config_err(err, errlen, "argv: --%s needs a value", o->name);
            rc = PDR_EINVAL;
            break;
        }
        if (val != NULL && val[0] == '\0') {
            pdr__config_err(err, errlen, "argv: --%s: empty value", o->name);
            rc = PDR_EINVAL;
            break;
        }
        rc = handle(o, val, argc, argv, &i, fl, &given, &config_file, cli, err, errlen);
    }
    if (rc != 0)
        goto fail;

    if (config_file != NULL && (fl->n_prefill > 0 || fl->n_decode > 0)) {
        pdr__config_err(err, errlen,
                        "argv: --config cannot be combined with --prefill or --decode; list the "
                        "workers in the file");
        rc = PDR_EINVAL;
        goto fail;
    }
    if (cli->show_help || cli->show_version || cli->check_config != NULL) {
        pdr_config_unref(fl);
        return 0;
    }

    pdr_config_t *c;
    if (config_file != NULL) {
        c = pdr_config_load_file(config_file, err, errlen);
        if (c == NULL) {
            rc = PDR_ECONFIG;
            goto fail;
        }
        apply_overrides(c, fl, given);
        pdr_config_unref(fl);
        fl = NULL;
    } else {
        if (fl->n_prefill == 0 && fl->n_decode == 0) {
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
        if (config_file == NULL && c->n_prefill == 0)
            pdr__config_err(err, errlen, "argv: at least one --prefill URL is required");
        else if (config_file == NULL && c->n_decode == 0)
            pdr__config_err(err, errlen, "argv: at least one --decode URL is required");
        else
            pdr__config_err(err, errlen, "argv: %s", msg);
        pdr_config_unref(c);
        return PDR_EINVAL;
    }
    cli->config = c;
    return 0;

fail:
    pdr_config_unref(fl);
    memset(cli, 0, sizeof(*cli));
    return rc < 0 ? rc : PDR_EINVAL;
}
