/*
 * The YAML loader's readers: the node helpers, the scalar readers each checking its value where it is
 * written (so the error has its line and column), and the lists (workers, pools, models, origins, networks,
 * header names, ALPN, ticket key files). Any thread; no shared state.
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

int pdr__yaml_fail_mark(struct ctx *cx, yaml_mark_t m, const char *fmt, ...)
{
    if (cx->err == NULL || cx->errlen == 0)
        return PDR_ECONFIG;
    int n = snprintf(cx->err, cx->errlen, "%s:%zu:%zu: ", cx->name, m.line + 1, m.column + 1);
    if (n >= 0 && (size_t)n < cx->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(cx->err + n, cx->errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return PDR_ECONFIG;
}

const char *pdr__yaml_node_kind(const yaml_node_t *n)
{
    switch (n->type) {
    case YAML_SCALAR_NODE:
        return "a scalar";
    case YAML_SEQUENCE_NODE:
        return "a sequence";
    case YAML_MAPPING_NODE:
        return "a mapping";
    default:
        return "an empty node";
    }
}

const char *pdr__yaml_sval(const yaml_node_t *n, size_t *len)
{
    *len = n->data.scalar.length;
    return (const char *)n->data.scalar.value;
}

/* A plain (unquoted) null: empty, "~" or null in any of YAML's spellings. */
int pdr__yaml_is_null(const yaml_node_t *n)
{
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return 0;
    size_t len;
    const char *s = pdr__yaml_sval(n, &len);
    return len == 0 || (len == 1 && s[0] == '~') ||
           (len == 4 &&
            (memcmp(s, "null", 4) == 0 || memcmp(s, "Null", 4) == 0 || memcmp(s, "NULL", 4) == 0));
}

const char *pdr__yaml_show(const yaml_node_t *n, char *buf, size_t buflen)
{
    size_t len;
    const char *s = pdr__yaml_sval(n, &len);
    return pdr__config_show(s, len, buf, buflen);
}

int pdr__yaml_need_scalar(struct ctx *cx, const yaml_node_t *v, const char *path, const char *what)
{
    if (v->type != YAML_SCALAR_NODE)
        return FAIL(cx, v, "%s: expected %s, got %s", path, what, pdr__yaml_node_kind(v));
    if (pdr__yaml_is_null(v))
        return FAIL(cx, v, "%s: expected %s, got null", path, what);
    return 0;
}

/* Item i of the sequence seq at path, its own path ("path[i]") written into ipath (160 bytes). NULL, with
 * the error set, when the document lacks it. */
const yaml_node_t *pdr__yaml_seq_item(struct ctx *cx, const yaml_node_t *seq, const char *path, size_t i,
                                      char *ipath)
{
    const yaml_node_t *item = yaml_document_get_node(cx->doc, seq->data.sequence.items.start[i]);
    snprintf(ipath, 160, "%.120s[%zu]", path, i);
    if (item == NULL)
        FAIL(cx, seq, "%s: missing node", ipath);
    return item;
}

/* Item i of a sequence of scalars (seq_item, then need_scalar with what): 0 with *item and its text. */
int pdr__yaml_seq_scalar(struct ctx *cx, const yaml_node_t *seq, const char *path, size_t i, const char *what,
                         char *ipath, const yaml_node_t **item, const char **str, size_t *len)
{
    *item = pdr__yaml_seq_item(cx, seq, path, i, ipath);
    if (*item == NULL)
        return PDR_ECONFIG;
    int rc = pdr__yaml_need_scalar(cx, *item, ipath, what);
    if (rc == 0)
        *str = pdr__yaml_sval(*item, len);
    return rc;
}

int pdr__yaml_get_string(struct ctx *cx, const yaml_node_t *v, const char *path, char **dst)
{
    int rc = pdr__yaml_need_scalar(cx, v, path, "a string");
    if (rc != 0)
        return rc;
    size_t len;
    const char *s = pdr__yaml_sval(v, &len);
    if (len == 0)
        return FAIL(cx, v, "%s: must not be empty", path);
    if (memchr(s, '\0', len) != NULL)
        return FAIL(cx, v, "%s: contains a NUL character", path);
    if (pdr__config_set_str(dst, s, len) != 0)
        return FAIL(cx, v, "out of memory");
    return 0;
}

int pdr__yaml_get_int(struct ctx *cx, const yaml_node_t *v, const char *path, int64_t min, int64_t max,
                      int64_t *out)
{
    char buf[80];
    int rc = pdr__yaml_need_scalar(cx, v, path, "an integer");
    if (rc != 0)
        return rc;
    size_t len;
    const char *s = pdr__yaml_sval(v, &len);
    rc = pdr__parse_int(s, len, out);
    if (rc == PDR_EINVAL)
        return FAIL(cx, v, "%s: expected an integer, got '%s'", path, pdr__yaml_show(v, buf, sizeof(buf)));
    if (rc != 0 || *out < min || *out > max)
        return FAIL(cx, v, "%s: %s is out of range, expected %lld..%lld", path,
                    pdr__yaml_show(v, buf, sizeof(buf)), (long long)min, (long long)max);
    return 0;
}

/* A finite decimal number in [min, max]. */
int pdr__yaml_get_double(struct ctx *cx, const yaml_node_t *v, const char *path, double min, double max,
                         double *out)
{
    char buf[80], num[64];
    int rc = pdr__yaml_need_scalar(cx, v, path, "a number");
    if (rc != 0)
        return rc;
    size_t len;
    const char *s = pdr__yaml_sval(v, &len);
    char *end = NULL;
    if (len == 0 || len >= sizeof(num))
        return FAIL(cx, v, "%s: expected a number, got '%s'", path, pdr__yaml_show(v, buf, sizeof(buf)));
    memcpy(num, s, len);
    num[len] = '\0';
    double d = strtod(num, &end);
    if (end != num + len || !(d == d) || d - d != 0)
        return FAIL(cx, v, "%s: expected a number, got '%s'", path, pdr__yaml_show(v, buf, sizeof(buf)));
    if (d < min || d > max)
        return FAIL(cx, v, "%s: %s is out of range, expected %g..%g", path,
                    pdr__yaml_show(v, buf, sizeof(buf)), min, max);
    *out = d;
    return 0;
}

/* A scalar that is one of two names: *out = va or vb. Otherwise "PATH: unknown WHAT 'X', expected A or B". */
int pdr__yaml_get_either(struct ctx *cx, const yaml_node_t *v, const char *path, const char *what,
                         const char *a, int va, const char *b, int vb, int *out)
{
    char expect[64], buf[64];
    snprintf(expect, sizeof(expect), "%s or %s", a, b);
    int rc = pdr__yaml_need_scalar(cx, v, path, expect);
    if (rc != 0)
        return rc;
    size_t len;
    const char *s = pdr__yaml_sval(v, &len);
    if (len == strlen(a) && memcmp(s, a, len) == 0)
        *out = va;
    else if (len == strlen(b) && memcmp(s, b, len) == 0)
        *out = vb;
    else
        return FAIL(cx, v, "%s: unknown %s '%s', expected %s", path, what,
                    pdr__yaml_show(v, buf, sizeof(buf)), expect);
    return 0;
}

int pdr__yaml_get_policy(struct ctx *cx, const yaml_node_t *v, const char *path, pdr_policy_kind_t *out)
{
    char buf[80], names[256];
    int rc = pdr__yaml_need_scalar(cx, v, path, "a policy name");
    if (rc != 0)
        return rc;
    size_t len;
    const char *s = pdr__yaml_sval(v, &len);
    if (pdr__policy_parse(s, len, out) != 0) {
        pdr_policy_names(names, sizeof(names), " or ");
        return FAIL(cx, v, "%s: unknown policy '%s', expected %s", path, pdr__yaml_show(v, buf, sizeof(buf)),
                    names);
    }
    return 0;
}

/* A worker: a mapping {url, bootstrap_port} or just the URL as a scalar. */
int pdr__yaml_load_worker(struct ctx *cx, const yaml_node_t *item, const char *path, pdr_role_t role,
                          pdr_worker_conf_t *w)
{
    w->bootstrap_port = -1;
    if (item->type == YAML_SCALAR_NODE && !pdr__yaml_is_null(item)) {
        size_t len;
        const char *s = pdr__yaml_sval(item, &len);
        char msg[512];
        if (memchr(s, '\0', len) != NULL)
            return FAIL(cx, item, "%s: contains a NUL character", path);
        if (pdr_worker_conf_parse_url(s, w, msg, sizeof(msg)) != 0)
            return FAIL(cx, item, "%s: %s", path, msg);
        return 0;
    }
    if (item->type != YAML_MAPPING_NODE)
        return FAIL(cx, item, "%s: expected a mapping {url: ...}, got %s", path,
                    pdr__yaml_is_null(item) ? "null" : pdr__yaml_node_kind(item));
    int rc = pdr__yaml_walk_map(
        cx, item, path, role == PDR_ROLE_PREFILL ? pdr__yaml_prefill_fields : pdr__yaml_decode_fields, w);
    if (rc != 0)
        return rc;
    if (w->url == NULL)
        return FAIL(cx, item, "%s: missing required key 'url'", path);
    return 0;
}

int pdr__yaml_load_workers(struct ctx *cx, const yaml_node_t *seq, const char *path, pdr_role_t role)
{
    pdr_worker_conf_t **arr = role == PDR_ROLE_PREFILL  ? &cx->c->prefill
                              : role == PDR_ROLE_DECODE ? &cx->c->decode
                                                        : &cx->c->regular;
    size_t *n = role == PDR_ROLE_PREFILL  ? &cx->c->n_prefill
                : role == PDR_ROLE_DECODE ? &cx->c->n_decode
                                          : &cx->c->n_regular;
    if (cx->pool != NULL) {
        arr = role == PDR_ROLE_PREFILL  ? &cx->pool->prefill
              : role == PDR_ROLE_DECODE ? &cx->pool->decode
                                        : &cx->pool->regular;
        n = role == PDR_ROLE_PREFILL  ? &cx->pool->n_prefill
            : role == PDR_ROLE_DECODE ? &cx->pool->n_decode
                                      : &cx->pool->n_regular;
    }
    if (pdr__yaml_is_null(seq))
        return 0;
    if (seq->type != YAML_SEQUENCE_NODE)
        return FAIL(cx, seq, "%s: expected a sequence of workers, got %s", path, pdr__yaml_node_kind(seq));
    size_t count = (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
    if (count == 0)
        return 0;
    if (count > PDR_CONFIG_MAX_WORKERS)
        return FAIL(cx, seq, "%s: %zu workers, at most %d are allowed", path, count, PDR_CONFIG_MAX_WORKERS);
    *arr = calloc(count, sizeof(**arr));
    if (*arr == NULL)
        return FAIL(cx, seq, "out of memory");
    *n = count;
    for (size_t i = 0; i < count; i++) {
        char ipath[160];
        const yaml_node_t *item = pdr__yaml_seq_item(cx, seq, path, i, ipath);
        if (item == NULL)
            return PDR_ECONFIG;
        int rc = pdr__yaml_load_worker(cx, item, ipath, role, &(*arr)[i]);
        if (rc != 0)
            return rc;
        long j = pdr__workers_find_dup(*arr, i);
        if (j >= 0)
            return FAIL(cx, item, "%s: duplicate worker '%s' (same as %s[%ld])", ipath, (*arr)[i].url, path,
                        j);
    }
    return 0;
}

/* admin.deny_worker_networks: a sequence of "ADDRESS[/PREFIX]" scalars; null or [] for none. */
int pdr__yaml_load_origins(struct ctx *cx, const yaml_node_t *seq, const char *path)
{
    pdr_config_t *c = cx->c;
    pdr__config_free_origins(c);
    if (pdr__yaml_is_null(seq))
        return 0;
    if (seq->type != YAML_SEQUENCE_NODE)
        return FAIL(cx, seq,
                    "%s: expected a sequence of origins such as [\"https://app.example.com\"], got %s", path,
                    pdr__yaml_node_kind(seq));
    size_t count = (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
    if (count > PDR_CONFIG_MAX_ORIGINS)
        return FAIL(cx, seq, "%s: %zu origins, at most %d are allowed", path, count, PDR_CONFIG_MAX_ORIGINS);
    for (size_t i = 0; i < count; i++) {
        const yaml_node_t *item;
        char ipath[160];
        char msg[256];
        const char *str;
        size_t len;
        int rc = pdr__yaml_seq_scalar(cx, seq, path, i, "an origin (scheme://host[:port] or *)", ipath, &item,
                                      &str, &len);
        if (rc != 0)
            return rc;
        if (pdr__check_origin(str, len, msg, sizeof(msg)) != 0)
            return FAIL(cx, item, "%s: %s", ipath, msg);
        if (pdr__config_add_origin(c, str, len) != 0)
            return FAIL(cx, item, "out of memory");
    }
    return 0;
}

int pdr__yaml_load_networks(struct ctx *cx, const yaml_node_t *seq, const char *path)
{
    pdr_config_t *c = cx->c;
    free(c->admin_deny_networks.nets);
    c->admin_deny_networks.nets = NULL;
    c->admin_deny_networks.n = 0;
    if (pdr__yaml_is_null(seq))
        return 0;
    if (seq->type != YAML_SEQUENCE_NODE)
        return FAIL(cx, seq,
                    "%s: expected a sequence of IP networks such as [169.254.0.0/16, \"fe80::/10\"], got %s",
                    path, pdr__yaml_node_kind(seq));
    size_t count = (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
    if (count > PDR_CONFIG_MAX_NETWORKS)
        return FAIL(cx, seq, "%s: %zu networks, at most %d are allowed", path, count,
                    PDR_CONFIG_MAX_NETWORKS);
    if (count == 0)
        return 0;
    if ((c->admin_deny_networks.nets = calloc(count, sizeof(pdr_ipnet_t))) == NULL)
        return FAIL(cx, seq, "out of memory");
    for (size_t i = 0; i < count; i++) {
        const yaml_node_t *item;
        char ipath[160];
        char msg[256];
        const char *str;
        size_t len;
        int rc = pdr__yaml_seq_scalar(cx, seq, path, i, "an IP network (ADDRESS or ADDRESS/PREFIX)", ipath,
                                      &item, &str, &len);
        if (rc != 0)
            return rc;
        if (pdr_ipnet_parse(str, len, &c->admin_deny_networks.nets[i], msg, sizeof(msg)) != 0)
            return FAIL(cx, item, "%s: %s", ipath, msg);
        c->admin_deny_networks.n = i + 1;
    }
    return 0;
}

/* listen.tls.alpn: the protocols offered to clients, in the server's order of preference. */
int pdr__yaml_load_alpn(struct ctx *cx, const yaml_node_t *seq, const char *path)
{
    pdr_config_t *c = cx->c;
    if (seq->type != YAML_SEQUENCE_NODE)
        return FAIL(cx, seq, "%s: expected a sequence such as [h2, http/1.1], got %s", path,
                    pdr__yaml_node_kind(seq));
    size_t count = (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
    if (count == 0 || count > 2)
        return FAIL(cx, seq, "%s: expected one or two of h2 and http/1.1, got %zu entries", path, count);
    c->listen_tls.n_alpn = 0;
    for (size_t i = 0; i < count; i++) {
        const yaml_node_t *item;
        char ipath[160], buf[64];
        const char *str;
        size_t len;
        int rc = pdr__yaml_seq_scalar(cx, seq, path, i, "a protocol name", ipath, &item, &str, &len);
        if (rc != 0)
            return rc;
        int id = len == 2 && memcmp(str, "h2", 2) == 0         ? PDR_ALPN_H2
                 : len == 8 && memcmp(str, "http/1.1", 8) == 0 ? PDR_ALPN_HTTP11
                                                               : 0;
        if (id == 0)
            return FAIL(cx, item, "%s: unknown protocol '%s', expected h2 or http/1.1", ipath,
                        pdr__yaml_show(item, buf, sizeof(buf)));
        if (i == 1 && c->listen_tls.alpn[0] == id)
            return FAIL(cx, item, "%s: '%s' is listed twice", ipath, pdr__yaml_show(item, buf, sizeof(buf)));
        c->listen_tls.alpn[i] = id;
        c->listen_tls.n_alpn = i + 1;
    }
    return 0;
}

int pdr__yaml_load_names(struct ctx *cx, const yaml_node_t *seq, const char *path)
{
    pdr_config_t *c = cx->c;
    pdr__free_names(c->request_id_headers, c->n_request_id_headers);
    c->request_id_headers = NULL;
    c->n_request_id_headers = 0;
    if (pdr__yaml_is_null(seq))
        return 0;
    if (seq->type != YAML_SEQUENCE_NODE)
        return FAIL(cx, seq, "%s: expected a sequence of header names such as [x-request-id], got %s", path,
                    pdr__yaml_node_kind(seq));
    size_t count = (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
    if (count > PDR_CONFIG_MAX_REQUEST_ID_HEADERS)
        return FAIL(cx, seq, "%s: %zu names, at most %d are allowed", path, count,
                    PDR_CONFIG_MAX_REQUEST_ID_HEADERS);
    if (count == 0)
        return 0;
    if ((c->request_id_headers = calloc(count, sizeof(char *))) == NULL)
        return FAIL(cx, seq, "out of memory");
    for (size_t i = 0; i < count; i++) {
        const yaml_node_t *item;
        char ipath[160];
        char msg[256];
        const char *str;
        size_t len;
        int rc = pdr__yaml_seq_scalar(cx, seq, path, i, "a header name", ipath, &item, &str, &len);
        if (rc != 0)
            return rc;
        if (pdr__check_header_name(str, len, msg, sizeof(msg)) != 0)
            return FAIL(cx, item, "%s: %s", ipath, msg);
        char *name = NULL;
        if (pdr__config_set_str(&name, str, len) != 0)
            return FAIL(cx, item, "out of memory");
        for (size_t k = 0; k < len; k++)
            if (name[k] >= 'A' && name[k] <= 'Z')
                name[k] = (char)(name[k] - 'A' + 'a');
        c->request_id_headers[i] = name;
        c->n_request_id_headers = i + 1;
    }
    return 0;
}

/* A pool's name: 1..PDR_CONFIG_MAX_POOL_NAME of [a-z0-9_-] (it appears in metric labels, log lines and
 * the admin API's JSON as is), unique among the pools read so far. */
int pdr__yaml_get_pool_name(struct ctx *cx, const yaml_node_t *v, const char *path, char **dst)
{
    char buf[80];
    int rc = pdr__yaml_need_scalar(cx, v, path, "a pool name");
    if (rc != 0)
        return rc;
    size_t len;
    const char *s = pdr__yaml_sval(v, &len);
    int ok = len >= 1 && len <= PDR_CONFIG_MAX_POOL_NAME;
    for (size_t i = 0; ok && i < len; i++)
        ok = (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-' || s[i] == '_';
    if (!ok)
        return FAIL(cx, v, "%s: '%s' is not a pool name: 1..%d characters of a-z, 0-9, '-' and '_'", path,
                    pdr__yaml_show(v, buf, sizeof(buf)), PDR_CONFIG_MAX_POOL_NAME);
    for (size_t i = 0; i < cx->c->n_pools && &cx->c->pools[i] != cx->pool; i++)
        if (cx->c->pools[i].name != NULL && strlen(cx->c->pools[i].name) == len &&
            memcmp(cx->c->pools[i].name, s, len) == 0)
            return FAIL(cx, v, "%s: duplicate pool name '%s' (same as pools[%zu])", path,
                        pdr__yaml_show(v, buf, sizeof(buf)), i);
    return pdr__yaml_get_string(cx, v, path, dst);
}

/* The pool (< upto) and model index that already serve model s[0..len), or -1. */
static long model_owner(const pdr_config_t *c, size_t upto, const pdr_pool_conf_t *cur, size_t cur_n,
                        const char *s, size_t len, size_t *at)
{
    for (size_t i = 0; i <= upto && i < c->n_pools; i++) {
        const pdr_pool_conf_t *pl = &c->pools[i];
        size_t n = pl == cur ? cur_n : pl->n_models;
        for (size_t k = 0; k < n; k++)
            if (pl->models[k] != NULL && strlen(pl->models[k]) == len && memcmp(pl->models[k], s, len) == 0) {
                *at = k;
                return (long)i;
            }
    }
    return -1;
}

/* A pool's models: a non-empty sequence of names (no control characters), each served by one pool. */
int pdr__yaml_load_models(struct ctx *cx, const yaml_node_t *seq, const char *path)
{
    pdr_pool_conf_t *pl = cx->pool;
    char buf[80];
    if (seq->type != YAML_SEQUENCE_NODE)
        return FAIL(cx, seq, "%s: expected a sequence of model names, got %s", path,
                    pdr__yaml_is_null(seq) ? "null" : pdr__yaml_node_kind(seq));
    size_t count = (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
    if (count == 0)
        return FAIL(cx, seq, "%s: a pool serves at least one model", path);
    if (count > PDR_CONFIG_MAX_MODELS)
        return FAIL(cx, seq, "%s: %zu models, at most %d are allowed", path, count, PDR_CONFIG_MAX_MODELS);
    if ((pl->models = calloc(count, sizeof(char *))) == NULL)
        return FAIL(cx, seq, "out of memory");
    size_t self = (size_t)(pl - cx->c->pools);
    for (size_t i = 0; i < count; i++) {
        const yaml_node_t *item;
        char ipath[160];
        const char *str;
        size_t len;
        int rc = pdr__yaml_seq_scalar(cx, seq, path, i, "a model name", ipath, &item, &str, &len);
        if (rc != 0)
            return rc;
        const unsigned char *s = (const unsigned char *)str;
        if (len == 0 || len > PDR_CONFIG_MAX_MODEL_NAME)
            return FAIL(cx, item, "%s: a model name has 1..%d bytes", ipath, PDR_CONFIG_MAX_MODEL_NAME);
        for (size_t k = 0; k < len; k++)
            if (s[k] < 0x20 || s[k] == 0x7f || s[k] == '"' || s[k] == '\\')
                return FAIL(cx, item, "%s: a model name has no control characters, '\"' or '\\'", ipath);
        size_t at = 0;
        long owner = model_owner(cx->c, self, pl, i, (const char *)s, len, &at);
        if (owner == (long)self)
            return FAIL(cx, item, "%s: model '%s' is listed twice (same as %.120s[%zu])", ipath,
                        pdr__yaml_show(item, buf, sizeof(buf)), path, at);
        if (owner >= 0)
            return FAIL(cx, item,
                        "%s: model '%s' is served by pool '%s' already; a model belongs to one pool", ipath,
                        pdr__yaml_show(item, buf, sizeof(buf)), cx->c->pools[owner].name);
        if (pdr__config_set_str(&pl->models[i], (const char *)s, len) != 0)
            return FAIL(cx, item, "out of memory");
        pl->n_models = i + 1;
    }
    return 0;
}

/* pools: a non-empty sequence of {name, models, protocol?, policy?, workers}. */
int pdr__yaml_load_pools(struct ctx *cx, const yaml_node_t *seq, const char *path, const struct field *fields)
{
    pdr_config_t *c = cx->c;
    if (seq->type != YAML_SEQUENCE_NODE)
        return FAIL(cx, seq, "%s: expected a sequence of pools ({name, models, workers}), got %s", path,
                    pdr__yaml_is_null(seq) ? "null" : pdr__yaml_node_kind(seq));
    size_t count = (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
    if (count == 0)
        return FAIL(cx, seq, "%s: at least one pool is required (or leave pools: out for one pool)", path);
    if (count > PDR_CONFIG_MAX_POOLS)
        return FAIL(cx, seq, "%s: %zu pools, at most %d are allowed", path, count, PDR_CONFIG_MAX_POOLS);
    if ((c->pools = calloc(count, sizeof(*c->pools))) == NULL)
        return FAIL(cx, seq, "out of memory");
    c->n_pools = count;
    for (size_t i = 0; i < count; i++) {
        c->pools[i].protocol = PDR_PROTO_SGLANG;
        c->pools[i].policy_prefill = PDR_POLICY_ROUND_ROBIN;
        c->pools[i].policy_decode = PDR_POLICY_LEAST_LOAD;
        pdr__discovery_conf_defaults(&c->pools[i].discovery);
        pdr__cache_aware_unset(&c->pools[i]);
    }
    for (size_t i = 0; i < count; i++) {
        char ipath[160];
        const yaml_node_t *item = pdr__yaml_seq_item(cx, seq, path, i, ipath);
        if (item == NULL)
            return PDR_ECONFIG;
        if (item->type != YAML_MAPPING_NODE)
            return FAIL(cx, item, "%s: expected a mapping {name, models, workers}, got %s", ipath,
                        pdr__yaml_is_null(item) ? "null" : pdr__yaml_node_kind(item));
        pdr_pool_conf_t *pl = &c->pools[i];
        cx->pool = pl;
        int rc = pdr__yaml_walk_map(cx, item, ipath, fields, pl);
        cx->pool = NULL;
        if (rc != 0)
            return rc;
        if (pl->name == NULL)
            return FAIL(cx, item, "%s: missing required key 'name'", ipath);
        if (pl->n_models == 0)
            return FAIL(cx, item, "%s: missing required key 'models' (the model names the pool serves)",
                        ipath);
        const yaml_node_t *tk = pdr__yaml_map_get(cx->doc, item, "tokenizer");
        if (tk != NULL) { /* the loader's errors (start, reload, --check-config) name this place */
            pl->tokenizer_line = tk->start_mark.line + 1;
            pl->tokenizer_col = tk->start_mark.column + 1;
        }
        const yaml_node_t *workers = pdr__yaml_map_get(cx->doc, item, "workers");
        static const char *const roles[] = {"prefill", "decode"};
        size_t counts[] = {pl->n_prefill, pl->n_decode};
        for (int r = 0; r < 2; r++) {
            if (counts[r] != 0 || pdr__role_discovered(&pl->discovery, (pdr_role_t)r))
                continue;
            const yaml_node_t *list = pdr__yaml_map_get(cx->doc, workers, roles[r]);
            return FAIL(cx,
                        list != NULL      ? list
                        : workers != NULL ? workers
                                          : item,
                        "%s.workers.%s: " PDR__NO_POOL_WORKERS_FMT, ipath, roles[r], roles[r], roles[r],
                        roles[r]);
        }
        /* A worker serves one pool: its URL may not appear in an earlier one. */
        for (int r = 0; r < 2; r++) {
            const pdr_worker_conf_t *ws = r == 0 ? pl->prefill : pl->decode;
            const yaml_node_t *list = pdr__yaml_map_get(cx->doc, workers, roles[r]);
            for (size_t k = 0; k < counts[r]; k++)
                for (size_t j = 0; j < i; j++) {
                    const pdr_pool_conf_t *o = &c->pools[j];
                    const pdr_worker_conf_t *os = r == 0 ? o->prefill : o->decode;
                    size_t on = r == 0 ? o->n_prefill : o->n_decode;
                    for (size_t m = 0; m < on; m++)
                        if (strcmp(os[m].url, ws[k].url) == 0) {
                            const yaml_node_t *at = list;
                            if (list != NULL && list->type == YAML_SEQUENCE_NODE)
                                at = yaml_document_get_node(cx->doc, list->data.sequence.items.start[k]);
                            return FAIL(cx, at != NULL ? at : item,
                                        "%s.workers.%s[%zu]: worker '%s' is in pool '%s' already; a worker "
                                        "serves one pool",
                                        ipath, roles[r], k, ws[k].url, o->name);
                        }
                }
        }
    }
    return 0;
}

/* ticket.key_file: PATH, or ticket.key_files: [PATH, ...] (list): each file read and checked now, so a
 * missing or short key is an error at its own line and column. */
int pdr__yaml_load_ticket_keys(struct ctx *cx, const yaml_node_t *v, const char *path, int list)
{
    if (cx->ticket_keys != NULL)
        return FAIL(cx, v, "%s: ticket has key_file or key_files, not both (line %zu)", path,
                    cx->ticket_keys->start_mark.line + 1);
    cx->ticket_keys = v;
    const yaml_node_t *items[PDR_KEYRING_MAX];
    char *files[PDR_KEYRING_MAX] = {0};
    size_t n = 0;
    int rc = 0;
    char ipath[160];
    if (!list) {
        items[n] = v;
        rc = pdr__yaml_get_string(cx, v, path, &files[n]);
        n++;
    } else {
        if (v->type != YAML_SEQUENCE_NODE)
            return FAIL(cx, v, "%s: expected a sequence of key files, got %s", path, pdr__yaml_node_kind(v));
        size_t cnt = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
        if (cnt == 0 || cnt > PDR_KEYRING_MAX)
            return FAIL(cx, v, "%s: between 1 and %d key files (the first signs, all verify), not %zu", path,
                        PDR_KEYRING_MAX, cnt);
        for (size_t i = 0; rc == 0 && i < cnt; i++) {
            items[n] = pdr__yaml_seq_item(cx, v, path, i, ipath);
            if (items[n] == NULL) {
                rc = PDR_ECONFIG;
                break;
            }
            rc = pdr__yaml_get_string(cx, items[n], ipath, &files[n]);
            n++;
        }
    }
    /* Each file alone first, so that the error points at the file that is wrong. */
    char msg[512];
    for (size_t i = 0; rc == 0 && i < n; i++) {
        pdr_keyring_t one;
        const char *f = files[i];
        if (pdr_keyring_load(&one, &f, 1, msg, sizeof(msg)) != 0)
            rc = FAIL(cx, items[i], "%s: %s", list ? "ticket.key_files" : path, msg);
        pdr_keyring_wipe(&one);
    }
    if (rc == 0 && pdr__ticket_conf_load(cx->c, (const char *const *)files, n, msg, sizeof(msg)) != 0)
        rc = FAIL(cx, v, "%s: %s", path, msg);
    for (size_t i = 0; i < n; i++)
        free(files[i]);
    return rc;
}
