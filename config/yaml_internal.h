/*
 * The YAML loader's internals, shared by yaml.c (the walk over the document, the entry points),
 * yaml_read.c (the readers of values and lists) and yaml_fields.c (the tables of keys). Not for other
 * modules.
 */
#ifndef PDR_CONFIG_YAML_INTERNAL_H
#define PDR_CONFIG_YAML_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <yaml.h>
#include "config.h"

enum ftype {
    F_SECTION,      /* a mapping described by sub */
    F_POLICIES,     /* policy: a mapping {prefill, decode} or one name for both */
    F_STR,          /* non-empty string */
    F_STR_OPT,      /* string, or null for "none" */
    F_PATH,         /* string starting with '/' */
    F_INT,          /* int in [min, max] */
    F_INT64,        /* int64_t in [min, max] */
    F_DOUBLE,       /* double in [min, max] */
    F_PROTOCOL,     /* pdr_protocol_t */
    F_POLICY,       /* pdr_policy_kind_t */
    F_LEVEL,        /* log level, stored as its canonical name */
    F_RELAY,        /* pdr_relay_t */
    F_BOOL,         /* int 0/1 from true or false */
    F_WORKERS,      /* sequence of workers; min is the role */
    F_URL,          /* worker url (base is a pdr_worker_conf_t) */
    F_BPORT,        /* bootstrap port or null/none */
    F_BPORT_BAD,    /* bootstrap_port on a decode worker */
    F_HOSTNAME,     /* string: a DNS name (pdr__check_hostname) */
    F_RESOLVER,     /* string: "IPv4[:port]", "[IPv6]:port" or IPv6 */
    F_SELECTOR,     /* string: a Kubernetes label selector */
    F_NAMESPACE,    /* string: a Kubernetes namespace name */
    F_API_URL,      /* string: http:// or https:// URL of the API server */
    F_DNS_ROLE,     /* a mapping described by sub, then name and port required; min is the role */
    F_K8S_ROLE,     /* a mapping described by sub, then selector required; min is the role */
    F_NETWORKS,     /* sequence of IP networks, or null for none (admin_deny_networks) */
    F_ORIGINS,      /* sequence of CORS origins, or null for none (cors.allowed_origins) */
    F_ANNOTATION,   /* string: a Kubernetes annotation key */
    F_POOLS,        /* pools: a sequence of pool mappings */
    F_POOL_NAME,    /* a pool's name: [a-z0-9_-], unique */
    F_MODELS,       /* a pool's models: a sequence of model names, each in one pool only */
    F_DISCOVERY,    /* a pdr_discovery_conf_t at off: its fields' offsets are relative to it */
    F_KEY_FILE,     /* path of a key file, read and checked now (workers.api_key_file); null for none */
    F_NAMES,        /* sequence of header names, stored lower case (request_id_headers) */
    F_UNKNOWN,      /* compat.unknown: allow or refuse, stored as an int */
    F_AFFINITY,     /* affinity.mode: off, soft or hard, stored as an int */
    F_SEED,         /* cache_aware.seed: smallest_tree or consistent_hash, stored as an int */
    F_SCHEME,       /* discovery scheme: http or https, stored as int 0/1 */
    F_KV_ENDPOINT,  /* string: a ZMQ endpoint (pdr_kv_endpoint_check) */
    F_TICKET_KEYS,  /* ticket.key_file (a path; min 0) or ticket.key_files (a sequence; min 1), read now */
    F_CONF_SECTION, /* a mapping described by sub, offsets in pdr_config_t wherever it appears (tls:) */
    F_TLS_VERSION,  /* TLS1.2 or TLS1.3, stored as PDR_TLS_1_2 / PDR_TLS_1_3 */
    F_ALPN,         /* sequence of h2 and http/1.1 (listen.tls.alpn) */
    F_KEY,          /* a scalar key of the schema: read as its row's type says (key_field) */
};

struct field {
    const char *key;
    enum ftype type;
    size_t off;
    int64_t min, max;
    const struct field *sub;
    const char *schema; /* F_KEY: the schema row's path (schema.c) */
};

struct ctx {
    const char *name;
    yaml_document_t *doc;
    pdr_config_t *c;
    pdr_pool_conf_t *pool; /* the pool being read (pools[i]); NULL outside pools: */
    char *err;
    size_t errlen;
    const yaml_node_t *pdshim; /* the first protocol: pdshim (it needs ticket keys), at pdshim_path */
    char pdshim_path[160];
    const yaml_node_t *ticket_keys; /* the ticket key_file / key_files node read */
};

/* An F_KEY row's offset: the schema row's own place in pdr_config_t (KEY_OFF), or that place taken
 * relative to pdr_config_t.discovery, for a discovery section (KEY_OFF_DISC); else the row's off. */
#define KEY_OFF ((size_t)-1)
#define KEY_OFF_DISC ((size_t)-2) /* the row's place in pdr_config_t.discovery, in a discovery section */

/* The tables (yaml_fields.c): the top level and one worker of each role. */
extern const struct field pdr__yaml_top_fields[];
extern const struct field pdr__yaml_prefill_fields[];
extern const struct field pdr__yaml_decode_fields[];

/* "name:line:col: message" into cx->err at mark m; returns PDR_ECONFIG. */
int pdr__yaml_fail_mark(struct ctx *cx, yaml_mark_t m, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define FAIL(cx, node, ...) pdr__yaml_fail_mark(cx, (node)->start_mark, __VA_ARGS__)

/* Node helpers (yaml_read.c): a node's kind for messages, a scalar's text, plain nulls, a shown value. */
const char *pdr__yaml_node_kind(const yaml_node_t *n);
const char *pdr__yaml_sval(const yaml_node_t *n, size_t *len);
int pdr__yaml_is_null(const yaml_node_t *n);
const char *pdr__yaml_show(const yaml_node_t *n, char *buf, size_t buflen);
/* Value readers (yaml_read.c): each returns 0, or PDR_ECONFIG with the error at the node in cx->err. */
int pdr__yaml_need_scalar(struct ctx *cx, const yaml_node_t *v, const char *path, const char *what);
const yaml_node_t *pdr__yaml_seq_item(struct ctx *cx, const yaml_node_t *seq, const char *path, size_t i,
                                      char *ipath);
int pdr__yaml_seq_scalar(struct ctx *cx, const yaml_node_t *seq, const char *path, size_t i, const char *what,
                         char *ipath, const yaml_node_t **item, const char **str, size_t *len);
int pdr__yaml_get_string(struct ctx *cx, const yaml_node_t *v, const char *path, char **dst);
int pdr__yaml_get_int(struct ctx *cx, const yaml_node_t *v, const char *path, int64_t min, int64_t max,
                      int64_t *out);
int pdr__yaml_get_double(struct ctx *cx, const yaml_node_t *v, const char *path, double min, double max,
                         double *out);
int pdr__yaml_get_either(struct ctx *cx, const yaml_node_t *v, const char *path, const char *what,
                         const char *a, int va, const char *b, int vb, int *out);
int pdr__yaml_get_policy(struct ctx *cx, const yaml_node_t *v, const char *path, pdr_policy_kind_t *out);
/* Lists and pools (yaml_read.c), read and checked where they are written. */
int pdr__yaml_load_worker(struct ctx *cx, const yaml_node_t *item, const char *path, pdr_role_t role,
                          pdr_worker_conf_t *w);
int pdr__yaml_load_workers(struct ctx *cx, const yaml_node_t *seq, const char *path, pdr_role_t role);
int pdr__yaml_load_origins(struct ctx *cx, const yaml_node_t *seq, const char *path);
int pdr__yaml_load_networks(struct ctx *cx, const yaml_node_t *seq, const char *path);
int pdr__yaml_load_alpn(struct ctx *cx, const yaml_node_t *seq, const char *path);
int pdr__yaml_load_names(struct ctx *cx, const yaml_node_t *seq, const char *path);
int pdr__yaml_get_pool_name(struct ctx *cx, const yaml_node_t *v, const char *path, char **dst);
int pdr__yaml_load_models(struct ctx *cx, const yaml_node_t *seq, const char *path);
int pdr__yaml_load_pools(struct ctx *cx, const yaml_node_t *seq, const char *path,
                         const struct field *fields);
int pdr__yaml_load_ticket_keys(struct ctx *cx, const yaml_node_t *v, const char *path, int list);
/* The walk (yaml.c): a mapping by its table, into base; a mapping's value for key, or NULL. */
int pdr__yaml_walk_map(struct ctx *cx, const yaml_node_t *map, const char *path, const struct field *fields,
                       void *base);
const yaml_node_t *pdr__yaml_map_get(yaml_document_t *doc, const yaml_node_t *map, const char *key);

#endif
