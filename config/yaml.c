/*
 * YAML → snapshot. libyaml's document API builds the node tree; a descriptor table per mapping
 * ({key, type, offset, range, sub-table}: yaml_fields.c) is walked over it. A scalar key's row names its
 * row of the configuration schema (schema.c, F_KEY), which gives its type, place and range. Every value
 * is checked where it is read (yaml_read.c), so each error carries the file, 1-based line and column of
 * the offending node. The first error stops the load; everything allocated so far is released. Any
 * thread; no shared state.
 *
 * libyaml does not check for duplicate keys and gives every scalar as an untyped string, so both are
 * done here. The walker only descends into nodes the schema names, so its depth is bounded by the
 * schema, whatever the input.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>
#include "err.h"
#include "config.h"
#include "config_internal.h"
#include "defaults.h"
#include "keyring.h"
#include "ticket.h"
#include "schema.h"
#include "yaml_internal.h"

typedef int (*check_fn)(const char *s, size_t len, char *msg, size_t msglen);

static check_fn checker(enum ftype t)
{
    switch (t) {
    case F_HOSTNAME:
        return pdr__check_hostname;
    case F_RESOLVER:
        return pdr__check_resolver;
    case F_SELECTOR:
        return pdr__check_selector;
    case F_NAMESPACE:
        return pdr__check_namespace;
    case F_ANNOTATION:
        return pdr__check_annotation;
    case F_KV_ENDPOINT:
        return pdr_kv_endpoint_check;
    default:
        return pdr__check_api_server;
    }
}

/* The loader's reading of a schema type. */
static const enum ftype key_ftype[] = {
    [PDR_CT_INT] = F_INT,
    [PDR_CT_INT64] = F_INT64,
    [PDR_CT_DOUBLE] = F_DOUBLE,
    [PDR_CT_BOOL] = F_BOOL,
    [PDR_CT_STR] = F_STR,
    [PDR_CT_STR_OPT] = F_STR_OPT,
    [PDR_CT_PATH] = F_PATH,
    [PDR_CT_PROTOCOL] = F_PROTOCOL,
    [PDR_CT_POLICY] = F_POLICY,
    [PDR_CT_LEVEL] = F_LEVEL,
    [PDR_CT_RELAY] = F_RELAY,
    [PDR_CT_SEED] = F_SEED,
    [PDR_CT_TLS_VER] = F_TLS_VERSION,
    [PDR_CT_SCHEME] = F_SCHEME,
    [PDR_CT_BPORT] = F_BPORT,
    [PDR_CT_HOSTNAME] = F_HOSTNAME,
    [PDR_CT_RESOLVER] = F_RESOLVER,
    [PDR_CT_SELECTOR] = F_SELECTOR,
    [PDR_CT_NAMESPACE] = F_NAMESPACE,
    [PDR_CT_URL] = F_API_URL,
    [PDR_CT_ANNOTATION] = F_ANNOTATION,
    [PDR_CT_UNKNOWN] = F_UNKNOWN,
    [PDR_CT_AFFINITY] = F_AFFINITY,
};

/* An F_KEY row as the field its schema row describes; 0, or PDR_ECONFIG when the table lacks the row (a
 * bug here, caught by the schema test). */
static int key_field(const struct field *f, struct field *out)
{
    const pdr_conf_key_t *k = pdr_conf_key_find(f->schema, strlen(f->schema));
    if (k == NULL)
        return PDR_ECONFIG;
    size_t off = f->off == KEY_OFF        ? k->off
                 : f->off == KEY_OFF_DISC ? k->off - offsetof(pdr_config_t, discovery)
                                          : f->off;
    *out = (struct field){f->key, key_ftype[k->type], off, k->min, k->max, NULL, NULL};
    return 0;
}

static int apply(struct ctx *cx, const struct field *f, const yaml_node_t *v, const char *path, void *base)
{
    char buf[80];
    /* An F_KEY row's off is a marker (KEY_OFF...), not an offset: its place comes from the schema. */
    char *p = f->type == F_KEY ? (char *)base : (char *)base + f->off;
    int64_t iv;
    size_t len;
    int rc;
    switch (f->type) {
    case F_KEY: {
        struct field row;
        if (key_field(f, &row) != 0)
            return FAIL(cx, v, "%s: internal error: not in the schema", path);
        return apply(cx, &row, v, path, base);
    }
    case F_SECTION:
        return pdr__yaml_walk_map(cx, v, path, f->sub, base);
    case F_DISCOVERY:
        return pdr__yaml_walk_map(cx, v, path, f->sub, p);
    case F_POLICIES:
        if (v->type == YAML_SCALAR_NODE) {
            pdr_policy_kind_t k;
            rc = pdr__yaml_get_policy(cx, v, path, &k);
            if (rc == 0 && cx->pool != NULL)
                cx->pool->policy_prefill = cx->pool->policy_decode = k;
            else if (rc == 0)
                cx->c->policy_prefill = cx->c->policy_decode = k;
            return rc;
        }
        return pdr__yaml_walk_map(cx, v, path, f->sub, base);
    case F_STR:
        return pdr__yaml_get_string(cx, v, path, (char **)(void *)p);
    case F_STR_OPT:
        if (pdr__yaml_is_null(v)) {
            free(*(char **)(void *)p);
            *(char **)(void *)p = NULL;
            return 0;
        }
        return pdr__yaml_get_string(cx, v, path, (char **)(void *)p);
    case F_PATH: {
        rc = pdr__yaml_need_scalar(cx, v, path, "a path");
        if (rc != 0)
            return rc;
        const unsigned char *s = (const unsigned char *)pdr__yaml_sval(v, &len);
        if (len == 0 || s[0] != '/')
            return FAIL(cx, v, "%s: must start with '/', got '%s'", path,
                        pdr__yaml_show(v, buf, sizeof(buf)));
        for (size_t i = 0; i < len; i++)
            if (s[i] <= 0x20 || s[i] == 0x7f)
                return FAIL(cx, v, "%s: must not contain spaces or control characters", path);
        return pdr__yaml_get_string(cx, v, path, (char **)(void *)p);
    }
    case F_INT:
        rc = pdr__yaml_get_int(cx, v, path, f->min, f->max, &iv);
        if (rc == 0)
            *(int *)(void *)p = (int)iv;
        return rc;
    case F_BOOL: {
        rc = pdr__yaml_need_scalar(cx, v, path, "true or false");
        if (rc != 0)
            return rc;
        const char *s = pdr__yaml_sval(v, &len);
        if (len == 4 && (memcmp(s, "true", 4) == 0 || memcmp(s, "True", 4) == 0 || memcmp(s, "TRUE", 4) == 0))
            *(int *)(void *)p = 1;
        else if (len == 5 &&
                 (memcmp(s, "false", 5) == 0 || memcmp(s, "False", 5) == 0 || memcmp(s, "FALSE", 5) == 0))
            *(int *)(void *)p = 0;
        else
            return FAIL(cx, v, "%s: expected true or false, got '%s'", path,
                        pdr__yaml_show(v, buf, sizeof(buf)));
        return 0;
    }
    case F_DOUBLE:
        return pdr__yaml_get_double(cx, v, path, (double)f->min, (double)f->max, (double *)(void *)p);
    case F_INT64:
        rc = pdr__yaml_get_int(cx, v, path, f->min, f->max, &iv);
        if (rc == 0)
            *(int64_t *)(void *)p = iv;
        return rc;
    case F_PROTOCOL: {
        rc = pdr__yaml_need_scalar(cx, v, path, "a protocol name");
        if (rc != 0)
            return rc;
        const char *s = pdr__yaml_sval(v, &len);
        if (pdr__protocol_parse(s, len, (pdr_protocol_t *)(void *)p) != 0)
            return FAIL(cx, v, "%s: unknown protocol '%s', expected sglang, vllm or pdshim", path,
                        pdr__yaml_show(v, buf, sizeof(buf)));
        if (*(pdr_protocol_t *)(void *)p == PDR_PROTO_PDSHIM && cx->pdshim == NULL) {
            cx->pdshim = v;
            snprintf(cx->pdshim_path, sizeof(cx->pdshim_path), "%s", path);
        }
        return 0;
    }
    case F_POLICY:
        return pdr__yaml_get_policy(cx, v, path, (pdr_policy_kind_t *)(void *)p);
    case F_RELAY: {
        int m;
        rc = pdr__yaml_get_either(cx, v, path, "relay mode", "first_byte", PDR_RELAY_FIRST_BYTE,
                                  "after_prefill", PDR_RELAY_AFTER_PREFILL, &m);
        if (rc == 0)
            *(pdr_relay_t *)(void *)p = (pdr_relay_t)m;
        return rc;
    }
    case F_CONF_SECTION:
        return pdr__yaml_walk_map(cx, v, path, f->sub, cx->c);
    case F_TLS_VERSION:
        return pdr__yaml_get_either(cx, v, path, "TLS version", "TLS1.2", PDR_TLS_1_2, "TLS1.3", PDR_TLS_1_3,
                                    (int *)(void *)p);
    case F_ALPN:
        return pdr__yaml_load_alpn(cx, v, path);
    case F_SCHEME:
        return pdr__yaml_get_either(cx, v, path, "scheme", "http", 0, "https", 1, (int *)(void *)p);
    case F_UNKNOWN:
        return pdr__yaml_get_either(cx, v, path, "compat.unknown mode", "allow", PDR_COMPAT_UNKNOWN_ALLOW,
                                    "refuse", PDR_COMPAT_UNKNOWN_REFUSE, (int *)(void *)p);
    case F_AFFINITY: {
        rc = pdr__yaml_need_scalar(cx, v, path, "off, soft or hard");
        if (rc != 0)
            return rc;
        const char *s = pdr__yaml_sval(v, &len);
        int m = pdr_affinity_mode_parse(s, len);
        if (m < 0)
            return FAIL(cx, v, "%s: unknown affinity mode '%s', expected off, soft or hard", path,
                        pdr__yaml_show(v, buf, sizeof(buf)));
        *(int *)(void *)p = m;
        return 0;
    }
    case F_SEED:
        return pdr__yaml_get_either(cx, v, path, "seed", "smallest_tree", PDR_CA_SEED_SMALLEST_TREE,
                                    "consistent_hash", PDR_CA_SEED_CONSISTENT_HASH, (int *)(void *)p);
    case F_LEVEL: {
        rc = pdr__yaml_need_scalar(cx, v, path, "a log level");
        if (rc != 0)
            return rc;
        const char *s = pdr__yaml_sval(v, &len);
        const char *canon = pdr__log_level_parse(s, len);
        if (canon == NULL)
            return FAIL(cx, v,
                        "%s: unknown level '%s', expected debug, info, warn (warning), error or critical",
                        path, pdr__yaml_show(v, buf, sizeof(buf)));
        if (pdr__config_set_str((char **)(void *)p, canon, strlen(canon)) != 0)
            return FAIL(cx, v, "out of memory");
        return 0;
    }
    case F_WORKERS:
        return pdr__yaml_load_workers(cx, v, path, (pdr_role_t)f->min);
    case F_URL: {
        pdr_worker_conf_t *w = base;
        char msg[512];
        rc = pdr__yaml_need_scalar(cx, v, path, "a URL");
        if (rc != 0)
            return rc;
        const char *s = pdr__yaml_sval(v, &len);
        if (memchr(s, '\0', len) != NULL)
            return FAIL(cx, v, "%s: contains a NUL character", path);
        int bport = w->bootstrap_port, dp = w->dp_size;
        if (pdr_worker_conf_parse_url(s, w, msg, sizeof(msg)) != 0)
            return FAIL(cx, v, "%s: %s", path, msg);
        w->bootstrap_port = bport;
        w->dp_size = dp;
        return 0;
    }
    case F_BPORT: {
        if (v->type == YAML_SCALAR_NODE) {
            const char *s = pdr__yaml_sval(v, &len);
            if (pdr__yaml_is_null(v) ||
                (len == 4 &&
                 (memcmp(s, "none", 4) == 0 || memcmp(s, "None", 4) == 0 || memcmp(s, "NONE", 4) == 0))) {
                *(int *)(void *)p = -1;
                return 0;
            }
        }
        rc = pdr__yaml_get_int(cx, v, path, f->min, f->max, &iv);
        if (rc == 0)
            *(int *)(void *)p = (int)iv;
        return rc;
    }
    case F_BPORT_BAD:
        return FAIL(cx, v, "%s: only prefill workers have a bootstrap port", path);
    case F_NETWORKS:
        return pdr__yaml_load_networks(cx, v, path);
    case F_NAMES:
        return pdr__yaml_load_names(cx, v, path);
    case F_KEY_FILE: {
        pdr_config_t *c = cx->c;
        char msg[512];
        if (c->worker_api_key != NULL)
            pdr__secure_zero(c->worker_api_key, strlen(c->worker_api_key));
        free(c->worker_api_key);
        c->worker_api_key = NULL;
        free(c->worker_api_key_file);
        c->worker_api_key_file = NULL;
        if (pdr__yaml_is_null(v))
            return 0;
        rc = pdr__yaml_get_string(cx, v, path, &c->worker_api_key_file);
        if (rc != 0)
            return rc;
        if (pdr__read_secret_file(c->worker_api_key_file, &c->worker_api_key, msg, sizeof(msg)) != 0)
            return FAIL(cx, v, "%s: %s", path, msg);
        return 0;
    }
    case F_ORIGINS:
        return pdr__yaml_load_origins(cx, v, path);
    case F_TICKET_KEYS:
        return pdr__yaml_load_ticket_keys(cx, v, path, (int)f->min);
    case F_ANNOTATION:
    case F_KV_ENDPOINT:
    case F_HOSTNAME:
    case F_RESOLVER:
    case F_SELECTOR:
    case F_NAMESPACE:
    case F_API_URL: {
        char msg[256];
        rc = pdr__yaml_need_scalar(cx, v, path, "a string");
        if (rc != 0)
            return rc;
        const char *s = pdr__yaml_sval(v, &len);
        if (memchr(s, '\0', len) != NULL)
            return FAIL(cx, v, "%s: contains a NUL character", path);
        if (checker(f->type)(s, len, msg, sizeof(msg)) != 0)
            return FAIL(cx, v, "%s: %s", path, msg);
        return pdr__yaml_get_string(cx, v, path, (char **)(void *)p);
    }
    case F_DNS_ROLE: {
        rc = pdr__yaml_walk_map(cx, v, path, f->sub, base);
        if (rc != 0)
            return rc;
        const pdr_discovery_conf_t *d = base;
        if (d->dns.role[f->min].name == NULL)
            return FAIL(cx, v, "%s: missing required key 'name'", path);
        if (d->dns.role[f->min].port == 0)
            return FAIL(cx, v, "%s: missing required key 'port' (the workers' HTTP port)", path);
        return 0;
    }
    case F_POOLS:
        return pdr__yaml_load_pools(cx, v, path, f->sub);
    case F_POOL_NAME:
        return pdr__yaml_get_pool_name(cx, v, path, (char **)(void *)p);
    case F_MODELS:
        return pdr__yaml_load_models(cx, v, path);
    case F_K8S_ROLE:
        rc = pdr__yaml_walk_map(cx, v, path, f->sub, base);
        if (rc == 0 && ((const pdr_discovery_conf_t *)base)->kubernetes.role[f->min].selector == NULL)
            return FAIL(cx, v, "%s: missing required key 'selector'", path);
        return rc;
    }
    return FAIL(cx, v, "%s: internal error: unknown field type", path);
}

/* Every key of fields, comma-separated, into out (VALID_KEYS_MAX holds the longest list, limits' of about
 * 400 bytes, with room to grow; a list that ever outgrows it ends in "..." rather than looking complete). */
#define VALID_KEYS_MAX 1024
static void valid_keys(const struct field *fields, char *out, size_t outlen)
{
    size_t n = 0;
    out[0] = '\0';
    for (const struct field *f = fields; f->key != NULL; f++) {
        int w = snprintf(out + n, outlen - n, "%s%s", n ? ", " : "", f->key);
        if (w < 0 || (size_t)w >= outlen - n) {
            if (outlen >= 4)
                memcpy(out + outlen - 4, "...", 4);
            return;
        }
        n += (size_t)w;
    }
}

int pdr__yaml_walk_map(struct ctx *cx, const yaml_node_t *map, const char *path, const struct field *fields,
                       void *base)
{
    char buf[80], keys[VALID_KEYS_MAX];
    const char *where = path[0] ? path : "the top level";
    if (map->type != YAML_MAPPING_NODE)
        return FAIL(cx, map, "%s: expected a mapping, got %s", path[0] ? path : "configuration",
                    pdr__yaml_is_null(map) ? "null" : pdr__yaml_node_kind(map));
    uint64_t seen = 0; /* the keys met, by index in fields (a section has at most 64: the top level 34) */
    for (const yaml_node_pair_t *pair = map->data.mapping.pairs.start; pair < map->data.mapping.pairs.top;
         pair++) {
        const yaml_node_t *k = yaml_document_get_node(cx->doc, pair->key);
        const yaml_node_t *v = yaml_document_get_node(cx->doc, pair->value);
        if (k == NULL || v == NULL)
            return FAIL(cx, map, "%s: incomplete key/value pair", where);
        if (k->type != YAML_SCALAR_NODE)
            return FAIL(cx, k, "keys must be scalars, got %s (in %s%s%s)", pdr__yaml_node_kind(k),
                        path[0] ? "'" : "", where, path[0] ? "'" : "");
        size_t len;
        const char *key = pdr__yaml_sval(k, &len);
        int idx = -1;
        for (int i = 0; fields[i].key != NULL; i++) {
            if (strlen(fields[i].key) == len && memcmp(fields[i].key, key, len) == 0) {
                idx = i;
                break;
            }
        }
        if (idx < 0) {
            valid_keys(fields, keys, sizeof(keys));
            if (path[0])
                return FAIL(cx, k, "unknown key '%s' in '%s' (valid keys: %s)",
                            pdr__yaml_show(k, buf, sizeof(buf)), path, keys);
            return FAIL(cx, k, "unknown key '%s' at the top level (valid keys: %s)",
                        pdr__yaml_show(k, buf, sizeof(buf)), keys);
        }
        if (idx >= 64)
            return FAIL(cx, k, "key '%s': its table has more than 64 keys (a bug)", fields[idx].key);
        if ((seen & (1ull << idx)) && path[0])
            return FAIL(cx, k, "duplicate key '%s' in '%s'", fields[idx].key, path);
        if (seen & (1ull << idx))
            return FAIL(cx, k, "duplicate key '%s' at the top level", fields[idx].key);
        seen |= 1ull << idx;
        char sub[160];
        snprintf(sub, sizeof(sub), "%.120s%s%.30s", path, path[0] ? "." : "", fields[idx].key);
        int rc = apply(cx, &fields[idx], v, sub, base);
        if (rc != 0)
            return rc;
    }
    return 0;
}

const yaml_node_t *pdr__yaml_map_get(yaml_document_t *doc, const yaml_node_t *map, const char *key)
{
    if (map == NULL || map->type != YAML_MAPPING_NODE)
        return NULL;
    for (const yaml_node_pair_t *pair = map->data.mapping.pairs.start; pair < map->data.mapping.pairs.top;
         pair++) {
        const yaml_node_t *k = yaml_document_get_node(doc, pair->key);
        if (k != NULL && k->type == YAML_SCALAR_NODE && k->data.scalar.length == strlen(key) &&
            memcmp(k->data.scalar.value, key, k->data.scalar.length) == 0)
            return yaml_document_get_node(doc, pair->value);
    }
    return NULL;
}

/* The key node of `key` in map, or NULL. */
static const yaml_node_t *map_key(yaml_document_t *doc, const yaml_node_t *map, const char *key)
{
    for (const yaml_node_pair_t *pair = map->data.mapping.pairs.start; pair < map->data.mapping.pairs.top;
         pair++) {
        const yaml_node_t *k = yaml_document_get_node(doc, pair->key);
        if (k != NULL && k->type == YAML_SCALAR_NODE && k->data.scalar.length == strlen(key) &&
            memcmp(k->data.scalar.value, key, k->data.scalar.length) == 0)
            return k;
    }
    return NULL;
}

/* Translates libyaml's parser error into "name:line:col: problem context". */
static void syntax_error(struct ctx *cx, const yaml_parser_t *p, const char *text, size_t textlen)
{
    if (p->error == YAML_MEMORY_ERROR) {
        pdr__config_err(cx->err, cx->errlen, "%s: out of memory while parsing", cx->name);
        return;
    }
    if (p->error == YAML_READER_ERROR) {
        /* Reader errors carry a byte offset, not a mark: count lines up to it ourselves. */
        yaml_mark_t m = {0, 0, 0};
        size_t off = p->problem_offset < textlen ? p->problem_offset : textlen;
        for (size_t i = 0; i < off; i++) {
            if (text[i] == '\n') {
                m.line++;
                m.column = 0;
            } else {
                m.column++;
            }
        }
        pdr__yaml_fail_mark(cx, m, "%s (byte 0x%02x at offset %zu)",
                            p->problem ? p->problem : "invalid input", (unsigned)p->problem_value & 0xffu,
                            p->problem_offset);
        return;
    }
    const char *problem = p->problem ? p->problem : "syntax error";
    if (p->context == NULL) {
        pdr__yaml_fail_mark(cx, p->problem_mark, "%s", problem);
    } else if (p->context_mark.line != p->problem_mark.line ||
               p->context_mark.column != p->problem_mark.column) {
        pdr__yaml_fail_mark(cx, p->problem_mark, "%s %s that started at line %zu, column %zu", problem,
                            p->context, p->context_mark.line + 1, p->context_mark.column + 1);
    } else {
        pdr__yaml_fail_mark(cx, p->problem_mark, "%s %s", problem, p->context);
    }
}

pdr_config_t *pdr_config_load_string(const char *text, size_t len, const char *name, char *err, size_t errlen)
{
    struct ctx cx = {.name = name != NULL ? name : "<string>", .err = err, .errlen = errlen};
    yaml_parser_t parser;
    yaml_document_t doc, extra;
    pdr_config_t *c = NULL;
    int rc = PDR_ECONFIG;

    pdr__config_err(err, errlen, "%s: unknown error", cx.name);
    if (text == NULL)
        len = 0;
    if (len > PDR_CONFIG_MAX_FILE) {
        pdr__config_err(err, errlen, "%s: larger than %u bytes", cx.name, PDR_CONFIG_MAX_FILE);
        return NULL;
    }
    if (!yaml_parser_initialize(&parser)) {
        pdr__config_err(err, errlen, "%s: out of memory", cx.name);
        return NULL;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)(text != NULL ? text : ""), len);
    if (!yaml_parser_load(&parser, &doc)) {
        syntax_error(&cx, &parser, text, len);
        yaml_parser_delete(&parser);
        return NULL;
    }
    cx.doc = &doc;
    const yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root == NULL || pdr__yaml_is_null(root)) {
        pdr__yaml_fail_mark(&cx, doc.start_mark, "empty configuration");
        goto out;
    }
    /* A second document is an error, and so is a syntax error after the first one. */
    if (!yaml_parser_load(&parser, &extra)) {
        syntax_error(&cx, &parser, text, len);
        goto out;
    }
    const yaml_node_t *second = yaml_document_get_root_node(&extra);
    if (second != NULL) {
        pdr__yaml_fail_mark(&cx, second->start_mark, "only one YAML document is allowed");
        yaml_document_delete(&extra);
        goto out;
    }
    yaml_document_delete(&extra);

    c = pdr_config_new_default();
    if (c == NULL || pdr__config_set_str(&c->source, cx.name, strlen(cx.name)) != 0) {
        pdr__config_err(err, errlen, "%s: out of memory", cx.name);
        goto out;
    }
    cx.c = c;
    rc = pdr__yaml_walk_map(&cx, root, "", pdr__yaml_top_fields, c);
    if (rc != 0)
        goto out;
    if (cx.pdshim != NULL && c->ticket.keys == NULL) {
        rc = FAIL(&cx, cx.pdshim, "%s: " PDR__PDSHIM_NEEDS_KEYS, cx.pdshim_path);
        goto out;
    }

    /* pools: or the one-pool shorthand (workers, protocol, policy, discovery at the top), not both. */
    const yaml_node_t *pools = map_key(&doc, root, "pools");
    if (pools != NULL) {
        static const char *const shorthand[] = {"workers", "protocol", "policy", "discovery"};
        for (size_t i = 0; i < sizeof(shorthand) / sizeof(shorthand[0]); i++) {
            const yaml_node_t *v = map_key(&doc, root, shorthand[i]);
            if (v == NULL)
                continue;
            if (i == 3)
                rc = FAIL(
                    &cx, v,
                    "discovery: not allowed beside pools: (line %zu); with pools:, each pool has its own "
                    "discovery: section (a top-level discovery: is the one-pool form)",
                    pools->start_mark.line + 1);
            else
                rc = FAIL(&cx, v,
                          "%s: not allowed beside pools: (line %zu); with pools:, each pool has its own "
                          "workers, protocol and policy (a top-level %s: is the one-pool form)",
                          shorthand[i], pools->start_mark.line + 1, shorthand[i]);
            goto out;
        }
    } else {
        /* Each role needs static workers or a discovery source. */
        const yaml_node_t *workers = pdr__yaml_map_get(&doc, root, "workers");
        const char *roles[] = {"prefill", "decode"};
        size_t counts[] = {c->n_prefill, c->n_decode};
        for (int r = 0; r < 2; r++) {
            if (counts[r] != 0 || pdr__role_discovered(&c->discovery, (pdr_role_t)r))
                continue;
            const yaml_node_t *list = pdr__yaml_map_get(&doc, workers, roles[r]);
            const yaml_node_t *at = list != NULL ? list : workers != NULL ? workers : root;
            rc = FAIL(&cx, at, PDR__NO_WORKERS_FMT, roles[r], roles[r], roles[r], roles[r]);
            goto out;
        }
    }
    /* Final guard: every value was checked where it was read, so this only fails on a bug here. */
    char msg[512];
    rc = pdr_config_validate(c, msg, sizeof(msg));
    if (rc != 0)
        FAIL(&cx, root, "%s", msg);

out:
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    if (rc != 0) {
        pdr_config_unref(c);
        return NULL;
    }
    return c;
}

pdr_config_t *pdr_config_load_file(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        pdr__config_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    int failed = buf == NULL;
    while (!failed) {
        if (len == cap) {
            if (cap > PDR_CONFIG_MAX_FILE) {
                fclose(f);
                free(buf);
                pdr__config_err(err, errlen, "%s: larger than %u bytes", path, PDR_CONFIG_MAX_FILE);
                return NULL;
            }
            char *nb = realloc(buf, cap * 2);
            if (nb == NULL) {
                failed = 1;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0) {
            if (ferror(f)) {
                int e = errno;
                fclose(f);
                free(buf);
                pdr__config_err(err, errlen, "%s: cannot read: %s", path, strerror(e));
                return NULL;
            }
            break;
        }
    }
    fclose(f);
    if (failed) {
        free(buf);
        pdr__config_err(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    pdr_config_t *c = pdr_config_load_string(buf, len, path, err, errlen);
    free(buf);
    return c;
}
