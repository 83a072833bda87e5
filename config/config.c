/*
 * The configuration snapshot: defaults, reference counting, names of enums and worker URL parsing.
 * A snapshot is immutable once built; any thread may take or drop a reference. The last
 * pdr_config_unref() frees every string and worker it owns.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "err.h"
#include "util.h"
#include "config.h"
#include "config_internal.h"
#include "keyring.h"
#include "defaults.h"
#include "schema.h"

void pdr__config_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (err == NULL || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

int pdr__config_set_str(char **dst, const char *s, size_t len)
{
    char *copy = malloc(len + 1);
    if (copy == NULL)
        return PDR_ENOMEM;
    memcpy(copy, s, len);
    copy[len] = '\0';
    free(*dst);
    *dst = copy;
    return 0;
}

const char *pdr__config_show(const char *s, size_t len, char *out, size_t outlen)
{
    size_t max = outlen > 64 ? 60 : outlen > 4 ? outlen - 4 : 0, n = 0;
    if (outlen == 0)
        return "";
    for (; n < len && n < max; n++)
        out[n] = (unsigned char)s[n] >= 0x20 && (unsigned char)s[n] < 0x7f ? s[n] : '?';
    if (n < len && outlen - n >= 4) {
        memcpy(out + n, "...", 3);
        n += 3;
    }
    out[n < outlen ? n : outlen - 1] = '\0';
    return out;
}

int pdr__parse_int(const char *s, size_t len, int64_t *out)
{
    size_t i = (len > 0 && s[0] == '-') ? 1 : 0;
    if (i == len)
        return PDR_EINVAL;
    for (size_t j = i; j < len; j++)
        if (s[j] < '0' || s[j] > '9')
            return PDR_EINVAL;
    if (pdr_parse_int64(s, len, INT64_MIN, INT64_MAX, out) != 0)
        return PDR_ETOOBIG;
    return 0;
}

static const char *const protocol_names[] = {"sglang", "vllm", "pdshim"};

static int name_lookup(const char *const *names, int n, const char *s, size_t len)
{
    for (int i = 0; i < n; i++)
        if (strlen(names[i]) == len && memcmp(names[i], s, len) == 0)
            return i;
    return -1;
}

int pdr__policy_parse(const char *s, size_t len, pdr_policy_kind_t *out)
{
    int i = pdr_policy_find(s, len); /* routing/'s list of policies */
    if (i < 0)
        return PDR_EINVAL;
    *out = (pdr_policy_kind_t)i;
    return 0;
}

int pdr__protocol_parse(const char *s, size_t len, pdr_protocol_t *out)
{
    int i = name_lookup(protocol_names, 3, s, len);
    if (i < 0)
        return PDR_EINVAL;
    *out = (pdr_protocol_t)i;
    return 0;
}

const char *pdr__log_level_parse(const char *s, size_t len)
{
    static const char *const levels[] = {"debug", "info", "warn", "error"};
    int i = name_lookup(levels, 4, s, len);
    if (i >= 0)
        return levels[i];
    /* The sglang router's names (older releases: debug, info, warning, error, critical). pdrouter has
     * no level above error and nothing it logs is more severe than an error, so critical keeps the
     * errors: a router that went silent on errors would hide why it stops serving. */
    if (len == 7 && memcmp(s, "warning", 7) == 0)
        return "warn";
    if (len == 8 && memcmp(s, "critical", 8) == 0)
        return "error";
    return NULL;
}

int pdr_policy_parse(const char *name, pdr_policy_kind_t *out)
{
    return name == NULL ? PDR_EINVAL : pdr__policy_parse(name, strlen(name), out);
}

int pdr_protocol_parse(const char *name, pdr_protocol_t *out)
{
    return name == NULL ? PDR_EINVAL : pdr__protocol_parse(name, strlen(name), out);
}

const char *pdr_policy_name(pdr_policy_kind_t p)
{
    const pdr_policy_ops_t *ops = pdr_policy_get((int)p);
    return ops != NULL ? ops->name : "unknown";
}

const char *pdr_protocol_name(pdr_protocol_t p)
{
    return (unsigned)p < 3 ? protocol_names[p] : "unknown";
}

static const char *const affinity_names[] = {"off", "soft", "hard"};

const char *pdr_affinity_mode_name(int m)
{
    return (unsigned)m < 3 ? affinity_names[m] : "unknown";
}

int pdr_affinity_mode_parse(const char *s, size_t len)
{
    for (int m = 0; m < 3; m++)
        if (len == strlen(affinity_names[m]) && memcmp(s, affinity_names[m], len) == 0)
            return m;
    return -1;
}

void pdr__config_free_origins(pdr_config_t *c)
{
    for (size_t i = 0; i < c->cors.n; i++)
        free(c->cors.origins[i]);
    free(c->cors.origins);
    c->cors.origins = NULL;
    c->cors.n = 0;
}

int pdr__config_add_origin(pdr_config_t *c, const char *s, size_t len)
{
    char **na = realloc(c->cors.origins, (c->cors.n + 1) * sizeof(*na));
    if (na == NULL)
        return PDR_ENOMEM;
    c->cors.origins = na;
    na[c->cors.n] = NULL;
    if (pdr__config_set_str(&na[c->cors.n], s, len) != 0)
        return PDR_ENOMEM;
    c->cors.n++;
    return 0;
}

/* An Origin is "*", or scheme "://" host [":" port] (RFC 6454): what a browser sends, compared as
 * written. */
int pdr__check_origin(const char *s, size_t len, char *msg, size_t msglen)
{
    if (len == 1 && s[0] == '*')
        return 0;
    if (len == 0 || len > PDR_CONFIG_MAX_ORIGIN) {
        pdr__config_err(msg, msglen, "an origin is 1..%d bytes", PDR_CONFIG_MAX_ORIGIN);
        return PDR_EINVAL;
    }
    const char *sep = NULL;
    for (size_t i = 0; i + 2 < len; i++)
        if (s[i] == ':' && s[i + 1] == '/' && s[i + 2] == '/') {
            sep = s + i;
            break;
        }
    if (sep == NULL || sep == s || (size_t)(sep - s) + 3 >= len) {
        pdr__config_err(msg, msglen,
                        "expected scheme://host[:port] (for example https://app.example.com) or *");
        return PDR_EINVAL;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch <= 0x20 || ch >= 0x7f || ch == ',' || ch == '"') {
            pdr__config_err(msg, msglen, "an origin has no spaces, commas, quotes or control characters");
            return PDR_EINVAL;
        }
    }
    if (memchr(sep + 3, '/', len - (size_t)(sep + 3 - s)) != NULL) {
        pdr__config_err(msg, msglen, "an origin has no path (no '/' after the host)");
        return PDR_EINVAL;
    }
    return 0;
}

int pdr__check_annotation(const char *s, size_t len, char *msg, size_t msglen)
{
    const char *slash = memchr(s, '/', len);
    const char *name = slash != NULL ? slash + 1 : s;
    size_t nlen = len - (size_t)(name - s), plen = slash != NULL ? (size_t)(slash - s) : 0;
    int ok = nlen >= 1 && nlen <= 63 && (slash == NULL || (plen >= 1 && plen <= 253));
    for (size_t i = 0; ok && i < nlen; i++) {
        char ch = name[i];
        int alnum = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        ok = alnum || ((ch == '-' || ch == '_' || ch == '.') && i > 0 && i + 1 < nlen);
    }
    for (size_t i = 0; ok && i < plen; i++) {
        char ch = s[i];
        ok = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '.';
    }
    if (!ok) {
        pdr__config_err(
            msg, msglen,
            "expected an annotation key [prefix/]name (name: 1..63 letters, digits, '-', '_', '.'; "
            "prefix: a lowercase DNS subdomain)");
        return PDR_EINVAL;
    }
    return 0;
}

static void discovery_conf_free(pdr_discovery_conf_t *d)
{
    for (int r = 0; r < 2; r++) {
        free(d->dns.role[r].name);
        free(d->kubernetes.role[r].selector);
    }
    free(d->dns.resolver);
    free(d->kubernetes.api_server);
    free(d->kubernetes.namespace_);
    free(d->kubernetes.token_file);
    free(d->kubernetes.ca_file);
    free(d->kubernetes.bootstrap_port_annotation);
    free(d->kubernetes.inference_pool);
    free(d->kubernetes.role_label);
}

void pdr__discovery_conf_defaults(pdr_discovery_conf_t *d)
{
    /* Every role unused (NULL name and selector). The kubernetes strings stay NULL: their defaults come
     * from the pod's environment and are resolved when the source starts. The schema's discovery rows
     * hold no string default, so this cannot fail. A decode has no bootstrap port (-1, not a key). */
    size_t lo = offsetof(pdr_config_t, discovery);
    (void)pdr_conf_defaults(d, lo, lo + sizeof(*d));
    d->dns.role[PDR_ROLE_DECODE].bootstrap_port = -1;
    d->kubernetes.role[PDR_ROLE_DECODE].bootstrap_port = -1;
}

static void pool_conf_free(pdr_pool_conf_t *pl)
{
    discovery_conf_free(&pl->discovery);
    free(pl->name);
    free(pl->tokenizer);
    for (size_t i = 0; i < pl->n_models; i++)
        free(pl->models[i]);
    free(pl->models);
    for (size_t i = 0; i < pl->n_prefill; i++)
        pdr_worker_conf_clear(&pl->prefill[i]);
    free(pl->prefill);
    for (size_t i = 0; i < pl->n_decode; i++)
        pdr_worker_conf_clear(&pl->decode[i]);
    free(pl->decode);
    for (size_t i = 0; i < pl->n_regular; i++)
        pdr_worker_conf_clear(&pl->regular[i]);
    free(pl->regular);
}

size_t pdr_config_pool_count(const pdr_config_t *c)
{
    return c->n_pools > 0 ? c->n_pools : 1;
}

void pdr_config_pool(const pdr_config_t *c, size_t i, pdr_pool_conf_t *out)
{
    if (c->n_pools > 0) {
        *out = c->pools[i < c->n_pools ? i : 0];
        return;
    }
    memset(out, 0, sizeof(*out));
    out->name = (char *)PDR_DEFAULT_POOL;
    out->protocol = c->protocol;
    out->policy_prefill = c->policy_prefill;
    out->policy_decode = c->policy_decode;
    out->prefill = c->prefill;
    out->n_prefill = c->n_prefill;
    out->decode = c->decode;
    out->n_decode = c->n_decode;
    out->regular = c->regular;
    out->n_regular = c->n_regular;
    out->discovery = c->discovery;
    pdr__cache_aware_unset(out);
}

static void ca_unset(pdr_cache_aware_conf_t *a)
{
    a->cache_threshold = a->balance_rel_threshold = a->hash_load_factor = -1;
    a->balance_abs_threshold = a->seed = a->hash_prefix_chars = -1;
}

void pdr__cache_aware_unset(pdr_pool_conf_t *pc)
{
    ca_unset(&pc->cache_aware);
    for (int r = 0; r < 2; r++)
        ca_unset(&pc->cache_aware_role[r]);
}

/* Copies every field of from that is set (not negative) over out. */
static void ca_over(pdr_cache_aware_conf_t *out, const pdr_cache_aware_conf_t *from)
{
    if (from->cache_threshold >= 0)
        out->cache_threshold = from->cache_threshold;
    if (from->balance_abs_threshold >= 0)
        out->balance_abs_threshold = from->balance_abs_threshold;
    if (from->balance_rel_threshold >= 0)
        out->balance_rel_threshold = from->balance_rel_threshold;
    if (from->seed >= 0)
        out->seed = from->seed;
    if (from->hash_prefix_chars >= 0)
        out->hash_prefix_chars = from->hash_prefix_chars;
    if (from->hash_load_factor >= 0)
        out->hash_load_factor = from->hash_load_factor;
}

void pdr_config_pool_cache_aware(const pdr_config_t *c, const pdr_pool_conf_t *pc, int role,
                                 pdr_cache_aware_conf_t *out)
{
    out->cache_threshold = c->cache_aware.cache_threshold;
    out->balance_abs_threshold = c->cache_aware.balance_abs_threshold;
    out->balance_rel_threshold = c->cache_aware.balance_rel_threshold;
    out->seed = c->cache_aware.seed;
    out->hash_prefix_chars = c->cache_aware.hash_prefix_chars;
    out->hash_load_factor = c->cache_aware.hash_load_factor;
    if (pc == NULL)
        return;
    ca_over(out, &pc->cache_aware);
    if (role >= 0 && role < 2)
        ca_over(out, &pc->cache_aware_role[role]);
}

void pdr_config_pool_timeouts(const pdr_config_t *c, const pdr_pool_conf_t *pc, pdr_timeouts_t *out)
{
    out->connect_ms = pc && pc->timeouts.connect_ms ? pc->timeouts.connect_ms : c->timeouts.connect_ms;
    out->first_byte_ms =
        pc && pc->timeouts.first_byte_ms ? pc->timeouts.first_byte_ms : c->timeouts.first_byte_ms;
    out->kv_transfer_ms =
        pc && pc->timeouts.kv_transfer_ms ? pc->timeouts.kv_transfer_ms : c->timeouts.kv_transfer_ms;
    out->stream_idle_ms =
        pc && pc->timeouts.stream_idle_ms ? pc->timeouts.stream_idle_ms : c->timeouts.stream_idle_ms;
    out->kv_transfer_ms_per_1k_tokens = pc && pc->timeouts.kv_transfer_ms_per_1k_tokens
                                            ? pc->timeouts.kv_transfer_ms_per_1k_tokens
                                            : c->timeouts.kv_transfer_ms_per_1k_tokens;
}

long pdr_config_pool_for_model(const pdr_config_t *c, const char *model, size_t len)
{
    if (c->n_pools == 0)
        return 0;
    for (size_t i = 0; i < c->n_pools; i++)
        for (size_t k = 0; k < c->pools[i].n_models; k++)
            if (strlen(c->pools[i].models[k]) == len && memcmp(c->pools[i].models[k], model, len) == 0)
                return (long)i;
    return -1;
}

long pdr_config_pool_find(const pdr_config_t *c, const char *name, size_t len)
{
    if (c->n_pools == 0)
        return len == strlen(PDR_DEFAULT_POOL) && memcmp(name, PDR_DEFAULT_POOL, len) == 0 ? 0 : -1;
    for (size_t i = 0; i < c->n_pools; i++)
        if (strlen(c->pools[i].name) == len && memcmp(c->pools[i].name, name, len) == 0)
            return (long)i;
    return -1;
}

static void config_free(pdr_config_t *c)
{
    for (size_t i = 0; i < c->n_pools; i++)
        pool_conf_free(&c->pools[i]);
    free(c->pools);
    free(c->source);
    free(c->listen_host);
    free(c->admin_host);
    free(c->admin_token_file);
    free(c->shim_events.key_file);
    free(c->kv_events.snapshot_path);
    free(c->kv_events.snapshot_from);
    free(c->kv_events.snapshot_from_token_file);
    free(c->admission.classes);
    free(c->admission.default_class);
    free(c->admission.class_header);
    free(c->admission.fairness_header);
    free(c->admission.timeout_header);
    free(c->admin_deny_networks.nets);
    free(c->metrics_host);
    pdr__config_free_origins(c);
    for (size_t i = 0; i < c->n_prefill; i++)
        pdr_worker_conf_clear(&c->prefill[i]);
    free(c->prefill);
    for (size_t i = 0; i < c->n_decode; i++)
        pdr_worker_conf_clear(&c->decode[i]);
    free(c->decode);
    for (size_t i = 0; i < c->n_regular; i++)
        pdr_worker_conf_clear(&c->regular[i]);
    free(c->regular);
    free(c->worker_api_key_file);
    if (c->worker_api_key != NULL)
        pdr__secure_zero(c->worker_api_key, strlen(c->worker_api_key));
    free(c->worker_api_key);
    pdr__ticket_conf_clear(c);
    pdr__free_names(c->request_id_headers, c->n_request_id_headers);
    free(c->health.path);
    free(c->log.access_log);
    free(c->log.level);
    free(c->log.dir);
    free(c->affinity.headers);
    free(c->epp.host);
    free(c->epp.prefill_header);
    free(c->sidecar.prefill_header);
    free(c->tokenizer);
    free(c->listen_tls.cert_file);
    free(c->listen_tls.key_file);
    free(c->listen_tls.ciphers);
    free(c->listen_tls.client_ca_file);
    free(c->workers_tls.ca_file);
    free(c->workers_tls.cert_file);
    free(c->workers_tls.key_file);
    free(c->workers_tls.server_name);
    free(c->tracing.otlp_endpoint);
    free(c->tracing.file);
    free(c->tracing.service_name);
    discovery_conf_free(&c->discovery);
    free(c);
}

pdr_config_t *pdr_config_new_default(void)
{
    pdr_config_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->refcnt = 1;
    c->source = strdup("<defaults>");
    /* Every scalar key's default comes from the schema (schema.c); the lists follow. */
    int defaults_rc = pdr_conf_defaults(c, 0, sizeof(*c));
    static const char *const deny[] = PDR_DEF_ADMIN_DENY_NETWORKS;
    size_t ndeny = sizeof(deny) / sizeof(deny[0]);
    c->admin_deny_networks.nets = calloc(ndeny, sizeof(pdr_ipnet_t));
    for (size_t i = 0; c->admin_deny_networks.nets != NULL && i < ndeny; i++)
        if (pdr_ipnet_parse(deny[i], strlen(deny[i]), &c->admin_deny_networks.nets[c->admin_deny_networks.n],
                            NULL, 0) == 0)
            c->admin_deny_networks.n++;
    static const char *const rid[] = PDR_DEF_REQUEST_ID_HEADERS;
    c->request_id_headers = calloc(sizeof(rid) / sizeof(rid[0]), sizeof(char *));
    for (size_t i = 0; c->request_id_headers != NULL && i < sizeof(rid) / sizeof(rid[0]); i++)
        if ((c->request_id_headers[i] = strdup(rid[i])) != NULL)
            c->n_request_id_headers = i + 1;
    c->listen_tls.alpn[0] = PDR_ALPN_H2;
    c->listen_tls.alpn[1] = PDR_ALPN_HTTP11;
    c->listen_tls.n_alpn = 2;
    pdr__discovery_conf_defaults(&c->discovery);
    if (defaults_rc != 0 || c->source == NULL || c->admin_deny_networks.nets == NULL ||
        c->n_request_id_headers != sizeof(rid) / sizeof(rid[0])) {
        config_free(c);
        return NULL;
    }
    return c;
}

void pdr__secure_zero(void *p, size_t n)
{
    volatile unsigned char *v = p;
    while (n-- > 0)
        *v++ = 0;
}

void pdr__free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

int pdr__check_header_name(const char *s, size_t len, char *msg, size_t msglen)
{
    if (len == 0 || len > PDR_CONFIG_MAX_HEADER_NAME) {
        pdr__config_err(msg, msglen, "a header name has 1 to %d characters", PDR_CONFIG_MAX_HEADER_NAME);
        return PDR_EINVAL;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        /* RFC 9110 token characters. */
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              (ch != 0 && strchr("!#$%&'*+-.^_`|~", ch) != NULL))) {
            if (ch > 0x20 && ch < 0x7f)
                pdr__config_err(msg, msglen,
                                "'%c' cannot be in a header name (RFC 9110 token characters only)", ch);
            else
                pdr__config_err(msg, msglen,
                                "byte 0x%02x cannot be in a header name (RFC 9110 token characters only)",
                                ch);
            return PDR_EINVAL;
        }
    }
    return 0;
}

int pdr__check_api_key(const char *s, size_t len, char *msg, size_t msglen)
{
    if (len == 0) {
        pdr__config_err(msg, msglen, "the key is empty");
        return PDR_EINVAL;
    }
    if (len > PDR_CONFIG_MAX_API_KEY) {
        pdr__config_err(msg, msglen, "the key is longer than %d bytes", PDR_CONFIG_MAX_API_KEY);
        return PDR_EINVAL;
    }
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f) {
            /* It goes into a header line: no spaces, control characters or non-ASCII bytes. */
            pdr__config_err(msg, msglen,
                            "the key holds a space, control character or non-ASCII byte at offset %zu "
                            "(only visible ASCII characters can go into an Authorization header)",
                            i);
            return PDR_EINVAL;
        }
    return 0;
}

int pdr__read_secret_file(const char *path, char **out, char *msg, size_t msglen)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK); /* a FIFO must not block the load */
    if (fd < 0) {
        pdr__config_err(msg, msglen, "%s: %s", path, strerror(errno));
        return PDR_EIO;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        pdr__config_err(msg, msglen, "%s: not a regular file", path);
        close(fd);
        return PDR_EINVAL;
    }
    if ((st.st_mode & (S_IRWXO | S_IWGRP)) != 0) {
        /* Like ssh with a private key: a secret others can read (or a group can rewrite) is refused. */
        pdr__config_err(msg, msglen,
                        "%s: mode %04o lets other users read or change the key; make it 0600 or 0640 "
                        "(chmod o-rwx,g-w)",
                        path, (unsigned)(st.st_mode & 07777));
        close(fd);
        return PDR_EINVAL;
    }
    char *buf = malloc(PDR_CONFIG_MAX_API_KEY + 2);
    size_t len = 0;
    ssize_t n = 0;
    while (buf != NULL && len < PDR_CONFIG_MAX_API_KEY + 1 &&
           ((n = read(fd, buf + len, PDR_CONFIG_MAX_API_KEY + 1 - len)) > 0 || (n < 0 && errno == EINTR)))
        if (n > 0)
            len += (size_t)n;
    int e = errno;
    close(fd);
    if (buf == NULL) {
        pdr__config_err(msg, msglen, "out of memory");
        return PDR_ENOMEM;
    }
    while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
        len--;
    buf[len] = '\0';
    char why[160];
    if (n < 0 || pdr__check_api_key(buf, len, why, sizeof(why)) != 0) {
        pdr__config_err(msg, msglen, "%s: %s", path, n < 0 ? strerror(e) : why);
        pdr__secure_zero(buf, len);
        free(buf);
        return PDR_EINVAL;
    }
    *out = buf;
    return 0;
}

pdr_config_t *pdr_config_ref(pdr_config_t *c)
{
    if (c != NULL)
        __atomic_fetch_add(&c->refcnt, 1, __ATOMIC_RELAXED);
    return c;
}

void pdr_config_unref(pdr_config_t *c)
{
    if (c != NULL && __atomic_sub_fetch(&c->refcnt, 1, __ATOMIC_ACQ_REL) == 0)
        config_free(c);
}

void pdr_worker_conf_clear(pdr_worker_conf_t *w)
{
    if (w == NULL)
        return;
    free(w->url);
    free(w->host);
    free(w->kv_events);
    free(w->kv_events_replay);
    memset(w, 0, sizeof(*w));
    w->bootstrap_port = -1;
}

void pdr__ticket_conf_clear(pdr_config_t *c)
{
    for (size_t i = 0; i < c->ticket.n_key_files; i++)
        free(c->ticket.key_files[i]);
    c->ticket.n_key_files = 0;
    if (c->ticket.keys != NULL) {
        pdr_keyring_wipe(c->ticket.keys);
        free(c->ticket.keys);
        c->ticket.keys = NULL;
    }
}

int pdr__ticket_conf_load(pdr_config_t *c, const char *const *files, size_t n, char *msg, size_t msglen)
{
    pdr__ticket_conf_clear(c);
    pdr_keyring_t *kr = malloc(sizeof(*kr));
    if (kr == NULL) {
        snprintf(msg, msglen, "out of memory");
        return PDR_ENOMEM;
    }
    int rc = pdr_keyring_load(kr, files, n, msg, msglen);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        c->ticket.key_files[i] = strdup(files[i]);
        if (c->ticket.key_files[i] == NULL) {
            snprintf(msg, msglen, "out of memory");
            rc = PDR_ENOMEM;
        }
        c->ticket.n_key_files = i + 1;
    }
    c->ticket.keys = kr;
    if (rc != 0)
        pdr__ticket_conf_clear(c);
    return rc;
}
