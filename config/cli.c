/*
 * Command-line flags: sglang-router-compatible quick-start flags (--pd-disaggregation, --prefill URL
 * [BOOTSTRAP_PORT|none], --decode URL, --host, --port, --policy ...) plus --config FILE and a few
 * overrides. Flags are collected first, then applied on top of the defaults or of the --config file,
 * whatever their order, and the result is validated as a whole. This file holds the parse loop, the flags
 * that set one schema key (read by the table, set_key) and the overrides; cli_flags.c the flags of their
 * own shape, cli_help.c --help. Runs once, on the main thread.
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
        return pdr__cli_argv_secs(opt, val, (int *)(void *)p, err, errlen);
    switch (k->type) {
    case PDR_CT_INT:
        return pdr__cli_argv_int(opt, val, k->min, k->max, (int *)(void *)p, err, errlen);
    case PDR_CT_DOUBLE:
        return pdr__cli_argv_double(opt, val, (double)k->min, (double)k->max, (double *)(void *)p, err,
                                    errlen);
    case PDR_CT_STR:
    case PDR_CT_STR_OPT:
        return pdr__cli_set_str((char **)(void *)p, val, err, errlen);
    default:
        pdr__config_err(err, errlen, "argv: --%s: internal error: the key %s has no flag reader", opt,
                        k->path);
        return PDR_EINVAL;
    }
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
    /* sglang's bucket holds --max-concurrent-requests tokens: the burst of the rate limit. The rate flag
     * sets the burst in any case (the default, 0, without --max-concurrent-requests). */
    if (pdr__cli_marked(ps, "limits.rate_limit_rps")) {
        if (pdr__cli_marked(ps, "limits.max_inflight"))
            fl->limits.rate_limit_burst = fl->limits.max_inflight;
        pdr__cli_mark(ps, "limits.rate_limit_burst");
    }
    if (pdr__cli_marked(ps, "metrics.host") && !pdr__cli_marked(ps, "metrics.port")) {
        fl->metrics_port = PDR_SGLANG_PROMETHEUS_PORT;
        pdr__cli_mark(ps, "metrics.port");
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
        for (size_t k = 0; k < pdr__cli_nopts; k++) {
            if (strlen(pdr__cli_opts[k].name) == nlen && memcmp(pdr__cli_opts[k].name, name, nlen) == 0) {
                o = &pdr__cli_opts[k];
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
            const char *why = NULL, *rname = pdr__cli_refused(name, nlen, &why);
            if (rname != NULL)
                pdr__config_err(err, errlen, "argv: --%s (sglang router) is not supported: %s", rname, why);
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
            rc = pdr__cli_handle(o, vals, n, argc, argv, &i, fl, &ps, cli, err, errlen);
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
        int proto = pdr__cli_marked(&ps, "protocol");
        if (c->n_pools > 0 &&
            (proto || pdr__cli_marked(&ps, "policy.prefill") || pdr__cli_marked(&ps, "policy.decode"))) {
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
        if (pdr__cli_set_str(&fl->source, "<command line>", err, errlen) != 0) {
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
