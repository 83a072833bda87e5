/*
 * The configuration schema: one row per scalar key of pdr_config_t (nginx's ngx_command_t is the model),
 * with its YAML path, type, place in the snapshot, default, accepted range, the command-line flag that sets
 * it, what a reload does with it and one line of documentation. The defaults of a new snapshot, the YAML
 * loader's scalar values, the range checks of pdr_config_validate, the reload's list of keys that need a
 * restart and the docs check (docs/config.md against this table) all read it. Const data, any thread.
 *
 * Keys that are not scalars (worker lists, pools:, sequences such as cors.allowed_origins, key files read
 * when the config is loaded) are handled by hand in yaml.c and validate.c.
 */
#ifndef PDR_CONFIG_SCHEMA_H
#define PDR_CONFIG_SCHEMA_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "config.h"

/* How a value is written in YAML and stored in the snapshot. */
typedef enum {
    PDR_CT_INT,        /* int in [min, max] */
    PDR_CT_INT64,      /* int64_t in [min, max] */
    PDR_CT_DOUBLE,     /* double in [min, max] */
    PDR_CT_BOOL,       /* int 0/1 from true or false */
    PDR_CT_STR,        /* non-empty string */
    PDR_CT_STR_OPT,    /* string, or null for none */
    PDR_CT_PATH,       /* string starting with '/', no spaces or control characters */
    PDR_CT_PROTOCOL,   /* sglang | vllm | pdshim (pdr_protocol_t) */
    PDR_CT_POLICY,     /* a policy name (pdr_policy_kind_t) */
    PDR_CT_LEVEL,      /* a log level, stored as its canonical name */
    PDR_CT_RELAY,      /* first_byte | after_prefill (pdr_relay_t) */
    PDR_CT_SEED,       /* smallest_tree | consistent_hash (pdr_ca_seed_t in an int) */
    PDR_CT_TLS_VER,    /* TLS1.2 | TLS1.3, stored as PDR_TLS_1_2 / PDR_TLS_1_3 */
    PDR_CT_SCHEME,     /* http | https, stored as int 0/1 */
    PDR_CT_BPORT,      /* a bootstrap port in [min, max], or null/none (-1) */
    PDR_CT_HOSTNAME,   /* a DNS name (pdr__check_hostname) */
    PDR_CT_RESOLVER,   /* "IPv4[:port]", "[IPv6]:port" or IPv6 */
    PDR_CT_SELECTOR,   /* a Kubernetes label selector */
    PDR_CT_NAMESPACE,  /* a Kubernetes namespace name */
    PDR_CT_URL,        /* an http:// or https:// URL (pdr__check_api_server) */
    PDR_CT_ANNOTATION, /* a Kubernetes annotation key */
    PDR_CT_UNKNOWN,    /* allow | refuse (pdr_compat_unknown_t in an int) */
    PDR_CT_AFFINITY,   /* off | soft | hard (pdr_affinity_mode_t in an int); the last (schema.c's names) */
} pdr_ctype_t;

/* What a reload does with a changed value. */
typedef enum {
    PDR_RELOAD_LIVE = 0,      /* the new snapshot's value is used from the next request or timer on */
    PDR_RELOAD_RESTART,       /* read at start: the running value stays and the reload's answer names it */
    PDR_RELOAD_RESTART_RAISE, /* as RESTART, but only a raise is named (a lower value applies at once) */
    PDR_RELOAD_RESTART_UNSET, /* as RESTART, but only removing it is named (a new value applies at once) */
    PDR_RELOAD_START,         /* read at start, the running value stays, the answer does not name it */
} pdr_reload_t;

#define PDR_KEY_REQUIRED 1u /* no default: required where its section is given (discovery roles) */
/* Its flag has a parser of its own in cli.c (another range, another message, more than one key or a
 * special value); the other flags are read by the table (the key's type and range). */
#define PDR_KEY_OWN_FLAG 2u

typedef struct pdr_conf_key {
    const char *path; /* YAML path: "limits.max_body_bytes" */
    pdr_ctype_t type;
    size_t off, size;         /* the field in pdr_config_t */
    int64_t min, max;         /* accepted range of numbers and ports (doubles too) */
    int64_t def_i;            /* default of integers, booleans and enumerations */
    double def_d;             /* default of doubles */
    const char *def_s;        /* default of strings; NULL: none */
    const char *def_doc;      /* what an unset string means, when it is resolved later (the pod's env ...) */
    unsigned flags;           /* PDR_KEY_* */
    pdr_reload_t reload;      /* what a reload does with a change */
    const char *flag;         /* the command-line flag that sets it as is, or NULL */
    const char *flag_sec;     /* a flag that sets it in seconds (x 1000), or NULL */
    const char *doc;          /* one line */
    const char *restart_name; /* how the reload's answer names it (RESTART classes); NULL: the path */
} pdr_conf_key_t;

/* The table, and its number of rows. */
extern const pdr_conf_key_t pdr_conf_keys[];
extern const size_t pdr_conf_nkeys;

/* The row of path[0..len), or NULL. */
const pdr_conf_key_t *pdr_conf_key_find(const char *path, size_t len);

/* Writes the default of every row whose field lies in [lo, hi) of pdr_config_t into the struct at base,
 * which holds that part of a pdr_config_t (lo 0, hi sizeof(pdr_config_t): a whole snapshot; the bounds of
 * pdr_config_t.discovery: a pool's discovery section). Returns 0 or PDR_ENOMEM (strings already written
 * stay, for the caller's free). */
int pdr_conf_defaults(void *base, size_t lo, size_t hi);

/* Checks the value of row k in the struct at base (laid out as pdr_config_t from offset lo) against its
 * range: 0, or PDR_ECONFIG with "NAME: VALUE is out of range, expected MIN..MAX" in err. Rows that are
 * not numbers pass. */
int pdr_conf_check_range(const pdr_conf_key_t *k, const void *base, size_t lo, const char *name, char *err,
                         size_t errlen);

/* Whether row k's field is a string (char *). */
int pdr_conf_key_is_string(const pdr_conf_key_t *k);

/* Whether row k holds the same value in a and b (strings compared by content). */
int pdr_conf_key_equal(const pdr_conf_key_t *k, const pdr_config_t *a, const pdr_config_t *b);
/* Whether row k, a number, is larger in b than in a. */
int pdr_conf_key_raised(const pdr_conf_key_t *k, const pdr_config_t *a, const pdr_config_t *b);
/* Whether row k, a string, is set in a and not in b. */
int pdr_conf_key_unset(const pdr_conf_key_t *k, const pdr_config_t *a, const pdr_config_t *b);

/* The default of row k as docs/config.md writes it ("8000", "1.5", "true", "sglang"), into out; "" when
 * the key has none. */
const char *pdr_conf_default_text(const pdr_conf_key_t *k, char *out, size_t outlen);

/* Writes the table, one tab-separated line per row: path, type, default, min, max, reload, flag, flag in
 * seconds, doc (what the docs check reads). */
void pdr_conf_schema_print(FILE *out);

#endif
