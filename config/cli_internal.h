/*
 * The command-line parser's internals, shared by cli.c (the parse loop, the overrides over a --config
 * file), cli_flags.c (the flags of their own shape) and cli_help.c (--help, the refused sglang flags). Not
 * for other modules.
 */
#ifndef PDR_CONFIG_CLI_INTERNAL_H
#define PDR_CONFIG_CLI_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include "config.h"

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
    OPT_EPP,
    OPT_HISTORY_BACKEND,
    OPT_SIDECAR,
    OPT_KEY, /* a flag of the schema that sets one key (set_key) */
};

/* How many words follow a flag: none, one, one or more, or zero or more (up to the next "--flag"), as
 * argparse's nargs in the sglang router. */
enum { ARG_NONE, ARG_ONE, ARG_SOME, ARG_ANY };

struct opt {
    const char *name;
    enum opt_id id;
    int nargs;
};

/* The flags of their own shape (cli_flags.c); a flag not among them may be a schema row's (set_key). */
extern const struct opt pdr__cli_opts[];
extern const size_t pdr__cli_nopts;

#define NO_HISTORY "pdrouter keeps no conversation or response history"

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

/* Marks the schema key path as set by a flag; whether it is (cli_flags.c). */
void pdr__cli_mark(struct pstate *ps, const char *path);
int pdr__cli_marked(const struct pstate *ps, const char *path);

/* Flag values (cli_flags.c): 0, or PDR_EINVAL with "argv: --OPT: ..." in err. An integer or a number in
 * [min, max]; seconds (1 .. one day) stored as milliseconds; a string copied into *dst. */
int pdr__cli_argv_int(const char *opt, const char *val, int64_t min, int64_t max, int *out, char *err,
                      size_t errlen);
int pdr__cli_argv_double(const char *opt, const char *val, double min, double max, double *out, char *err,
                         size_t errlen);
int pdr__cli_argv_secs(const char *opt, const char *val, int *out_ms, char *err, size_t errlen);
int pdr__cli_set_str(char **dst, const char *val, char *err, size_t errlen);

/* Handles one flag of pdr__cli_opts with its values (n of them at vals; none for flags) (cli_flags.c). */
int pdr__cli_handle(const struct opt *o, const char *const *vals, int n, int argc, char **argv, int *i,
                    pdr_config_t *fl, struct pstate *ps, pdr_cli_t *cli, char *err, size_t errlen);

/* A refused sglang router flag (cli_help.c): its name and what exists instead, or NULL. */
const char *pdr__cli_refused(const char *name, size_t nlen, const char **why);

#endif
