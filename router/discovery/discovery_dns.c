/*
 * DNS discovery (see discovery.h): workers are the A and AAAA records of a name, typically a headless
 * Service, re-resolved every discovery.dns.interval_ms.
 *
 * One thread per source resolves every configured role in turn with glibc's stub resolver (res_nquery on
 * a private res_state, so nothing is shared with other threads), then waits on a condition variable until
 * the next round or until stop. Each role's answer becomes a sorted, de-duplicated set of addresses; it is
 * emitted whole when it differs from the last one emitted for that role (the first complete answer is
 * always emitted, even when empty). NXDOMAIN and NODATA are complete answers: the empty set. SERVFAIL,
 * REFUSED, a timeout or a network error are not: nothing is emitted, the previous set stands, and the
 * next round tries again.
 *
 * discovery.dns.resolver replaces the nameservers of /etc/resolv.conf with one server, IPv4 or IPv6, at
 * any port. Names are queried as written (res_nquery: no search list), so give fully qualified names.
 *
 * A query waits at most PDR_DNS_QUERY_TIMEOUT_S per nameserver and is sent once; the thread checks for
 * stop between queries. A stop therefore waits at most for the query in flight: 1 s per nameserver, so
 * 1 s with discovery.dns.resolver (glibc's timeouts are whole seconds, and a blocking res_nquery cannot be
 * interrupted). A server that refuses (ICMP port unreachable) fails at once.
 *
 * Threads: pdr_dns_discovery_start and the stop callback run on the caller's thread; resolution and the
 * emit callback on the source's own. The mutex guards only the stopping flag.
 */
#include <arpa/inet.h>
#include <arpa/nameser.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <resolv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "discovery.h"
#include "util.h"

#define PDR_DNS_QUERY_TIMEOUT_S 1 /* res_state.retrans: seconds per nameserver; one try (retry = 1) */
#define PDR_DNS_MAX_ADDRS 4096   /* per role: config's ceiling on workers per role (PDR_CONFIG_MAX_WORKERS) */
#define PDR_DNS_ANSWER_MAX 65535 /* the largest DNS message (RFC 1035 4.2.2: 16-bit TCP length) */

/* One address of an answer. family is AF_INET (4 bytes used) or AF_INET6. */
struct dns_addr {
    unsigned char family;
    unsigned char bytes[16];
};

struct dns_set {
    struct dns_addr *v;
    size_t n;
};

struct dns_role {
    const char *name; /* NULL: role not configured */
    int port, bootstrap_port;
    int https;   /* scheme: https */
    int emitted; /* a set was emitted; last/n_last hold it */
    int failing; /* the last round failed (warned once per streak) */
    struct dns_addr *last;
    size_t n_last;
};

typedef struct dns_source {
    pdr_discovery_t base; /* first: the stop callback's argument */
    pdr_discovery_emit_cb cb;
    void *ud;
    int interval_ms;
    char pool[64];  /* the pool it feeds, for the log */
    int has_server; /* discovery.dns.resolver given: server replaces resolv.conf */
    struct sockaddr_in6 server;
    struct dns_role roles[2];
    unsigned char *answer; /* PDR_DNS_ANSWER_MAX bytes, the thread's */
    struct __res_state res;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC */
    int stopping;
} dns_source_t;

static const char *const role_names[2] = {"prefill", "decode"};

/* The set's order: IPv4 before IPv6, then by address bytes. */
static int addr_cmp(const void *pa, const void *pb)
{
    const struct dns_addr *a = pa, *b = pb;
    if (a->family != b->family)
        return a->family == AF_INET ? -1 : 1;
    return memcmp(a->bytes, b->bytes, sizeof(a->bytes));
}

/* Sorts v and removes duplicates; returns the new count. */
static size_t set_normalize(struct dns_addr *v, size_t n)
{
    if (n < 2)
        return n;
    qsort(v, n, sizeof(*v), addr_cmp);
    size_t k = 1;
    for (size_t i = 1; i < n; i++)
        if (addr_cmp(&v[k - 1], &v[i]) != 0)
            v[k++] = v[i];
    return k;
}

static int set_equal(const struct dns_addr *a, size_t na, const struct dns_addr *b, size_t nb)
{
    if (na != nb)
        return 0;
    for (size_t i = 0; i < na; i++)
        if (addr_cmp(&a[i], &b[i]) != 0)
            return 0;
    return 1;
}

/* url "http://ADDR:PORT" or "https://..." (IPv6 bracketed), name the bare address. */
static void format_worker(const struct dns_addr *a, const struct dns_role *r, pdr_discovered_t *out)
{
    int port = r->port;
    const char *scheme = r->https ? "https" : "http";
    char text[INET6_ADDRSTRLEN];
    memset(out, 0, sizeof(*out));
    if (inet_ntop(a->family, a->bytes, text, sizeof(text)) == NULL)
        text[0] = '\0';
    if (a->family == AF_INET6)
        snprintf(out->url, sizeof(out->url), "%s://[%s]:%d", scheme, text, port);
    else
        snprintf(out->url, sizeof(out->url), "%s://%s:%d", scheme, text, port);
    snprintf(out->name, sizeof(out->name), "%s", text);
    out->bootstrap_port = r->bootstrap_port;
}

/* Appends the answer section's records of type (ns_t_a or ns_t_aaaa, class IN) to the set, whatever their
 * owner name (records at the end of a CNAME chain count). Returns 0, or -1 for a malformed message or
 * more than PDR_DNS_MAX_ADDRS addresses. */
static int parse_answer(const unsigned char *msg, int len, ns_type type, struct dns_set *set)
{
    ns_msg handle;
    if (ns_initparse(msg, len, &handle) != 0)
        return -1;
    int count = ns_msg_count(handle, ns_s_an);
    size_t need = type == ns_t_a ? 4 : 16;
    for (int i = 0; i < count; i++) {
        ns_rr rr;
        if (ns_parserr(&handle, ns_s_an, i, &rr) != 0)
            return -1;
        if (ns_rr_type(rr) != type || ns_rr_class(rr) != ns_c_in)
            continue;
        if (ns_rr_rdlen(rr) != need || set->n >= PDR_DNS_MAX_ADDRS)
            return -1;
        struct dns_addr *a = &set->v[set->n++];
        memset(a, 0, sizeof(*a));
        a->family = type == ns_t_a ? AF_INET : AF_INET6;
        memcpy(a->bytes, ns_rr_rdata(rr), need);
    }
    return 0;
}

/* discovery.dns.resolver, already checked by the config: "IPv4[:port]", "[IPv6][:port]" or bare IPv6.
 * Returns 0 or -1. */
static int parse_resolver(const char *s, struct sockaddr_in6 *out)
{
    char host[INET6_ADDRSTRLEN + 1];
    pdr_hostport_t hp;
    if (pdr_split_hostport(s, strlen(s), &hp) != 0 || hp.hlen >= sizeof(host))
        return -1;
    memcpy(host, hp.host, hp.hlen);
    host[hp.hlen] = '\0';
    int64_t p = 53; /* RFC 1035 */
    if (hp.port != NULL && pdr_parse_int64(hp.port, hp.plen, 1, 65535, &p) != 0)
        return -1;
    memset(out, 0, sizeof(*out));
    if (!hp.ipv6) {
        struct sockaddr_in *sin = (struct sockaddr_in *)(void *)out;
        sin->sin_family = AF_INET;
        sin->sin_port = htons((uint16_t)p);
        return inet_pton(AF_INET, host, &sin->sin_addr) == 1 ? 0 : -1;
    }
    out->sin6_family = AF_INET6;
    out->sin6_port = htons((uint16_t)p);
    return inet_pton(AF_INET6, host, &out->sin6_addr) == 1 ? 0 : -1;
}

/* res_nclose frees the IPv6 server addresses only when a query was sent (it walks the copies res_send
 * makes); free those that remain. glibc clears each pointer it frees. */
static void resolver_close(dns_source_t *s)
{
    res_nclose(&s->res);
    for (int i = 0; i < MAXNS; i++) {
        free(s->res._u._ext.nsaddrs[i]);
        s->res._u._ext.nsaddrs[i] = NULL;
    }
}

/* A fresh res_state each round, so edits of /etc/resolv.conf are picked up. Returns 0 or -1. */
static int resolver_open(dns_source_t *s, char *why, size_t whylen)
{
    memset(&s->res, 0, sizeof(s->res));
    if (res_ninit(&s->res) != 0) {
        snprintf(why, whylen, "cannot initialize the resolver (/etc/resolv.conf)");
        return -1;
    }
    s->res.retrans = PDR_DNS_QUERY_TIMEOUT_S;
    s->res.retry = 1;
    if (!s->has_server)
        return 0;
    /* One server instead of resolv.conf's. glibc keeps IPv6 servers outside nsaddr_list: a malloc'd
     * sockaddr_in6 in _u._ext.nsaddrs with nsaddr_list's family 0 (what res_ninit itself builds for an
     * IPv6 "nameserver" line); resolver_close frees it. Drop res_ninit's copies first. */
    for (int i = 0; i < MAXNS; i++) {
        free(s->res._u._ext.nsaddrs[i]);
        s->res._u._ext.nsaddrs[i] = NULL;
    }
    memset(s->res.nsaddr_list, 0, sizeof(s->res.nsaddr_list));
    s->res.nscount = 1;
    if (s->server.sin6_family == AF_INET) {
        memcpy(&s->res.nsaddr_list[0], &s->server, sizeof(struct sockaddr_in));
        return 0;
    }
    struct sockaddr_in6 *sa6 = malloc(sizeof(*sa6));
    if (sa6 == NULL) {
        snprintf(why, whylen, "out of memory");
        resolver_close(s);
        return -1;
    }
    *sa6 = s->server;
    s->res._u._ext.nsaddrs[0] = sa6;
    return 0;
}

static const char *herror_text(int h)
{
    switch (h) {
    case TRY_AGAIN:
        return "server failure or timeout";
    case NO_RECOVERY:
        return "query refused or not answerable";
    default:
        return "resolver error";
    }
}

static int is_stopping(dns_source_t *s)
{
    pthread_mutex_lock(&s->mu);
    int stop = s->stopping;
    pthread_mutex_unlock(&s->mu);
    return stop;
}

/* Resolves one role into set (capacity PDR_DNS_MAX_ADDRS). Returns 0 when the answer is complete
 * (possibly empty), -1 on a transient failure with the reason in why. */
static int resolve_role(dns_source_t *s, const struct dns_role *r, struct dns_set *set, char *why,
                        size_t whylen)
{
    static const ns_type types[2] = {ns_t_a, ns_t_aaaa};
    set->n = 0;
    for (int t = 0; t < 2; t++) {
        if (t > 0 && is_stopping(s)) {
            snprintf(why, whylen, "stopped");
            return -1;
        }
        errno = 0;
        s->res.res_h_errno = 0;
        int n = res_nquery(&s->res, r->name, ns_c_in, types[t], s->answer, PDR_DNS_ANSWER_MAX);
        if (n < 0) {
            int h = s->res.res_h_errno;
            if (h == HOST_NOT_FOUND) /* NXDOMAIN: the name holds no record of any type */
                break;
            if (h == NO_DATA)
                continue;
            int e = errno;
            if (h == NETDB_INTERNAL && e != 0)
                snprintf(why, whylen, "%s query: %s", t == 0 ? "A" : "AAAA", strerror(e));
            else
                snprintf(why, whylen, "%s query: %s%s%s%s", t == 0 ? "A" : "AAAA", herror_text(h),
                         e != 0 ? " (" : "", e != 0 ? strerror(e) : "", e != 0 ? ")" : "");
            return -1;
        }
        if (parse_answer(s->answer, n > PDR_DNS_ANSWER_MAX ? PDR_DNS_ANSWER_MAX : n, types[t], set) != 0) {
            snprintf(why, whylen, "%s answer: malformed, or more than %d addresses", t == 0 ? "A" : "AAAA",
                     PDR_DNS_MAX_ADDRS);
            return -1;
        }
    }
    set->n = set_normalize(set->v, set->n);
    return 0;
}

/* Emits set for role r when it differs from the last emitted one, and keeps it. */
static void publish(dns_source_t *s, pdr_role_t ri, struct dns_set *set)
{
    struct dns_role *r = &s->roles[ri];
    if (r->emitted && set_equal(r->last, r->n_last, set->v, set->n))
        return;
    struct dns_addr *copy = malloc((set->n ? set->n : 1) * sizeof(*copy));
    pdr_discovered_t *list = malloc((set->n ? set->n : 1) * sizeof(*list));
    if (copy == NULL || list == NULL) {
        free(copy);
        free(list);
        pdr_warn("dns discovery: %s %s: out of memory; will retry", role_names[ri], r->name);
        return;
    }
    memcpy(copy, set->v, set->n * sizeof(*copy));
    for (size_t i = 0; i < set->n; i++)
        format_worker(&set->v[i], r, &list[i]);
    pdr_info("dns discovery: %s %s -> %zu address%s (pool %s)", role_names[ri], r->name, set->n,
             set->n == 1 ? "" : "es", s->pool);
    s->cb(s->ud, "dns", ri, list, set->n);
    free(list);
    free(r->last);
    r->last = copy;
    r->n_last = set->n;
    r->emitted = 1;
}

static void run_round(dns_source_t *s, struct dns_set *set)
{
    char why[256];
    if (resolver_open(s, why, sizeof(why)) != 0) {
        pdr_warn("dns discovery: %s; will retry in %d ms", why, s->interval_ms);
        return;
    }
    for (int ri = 0; ri < 2; ri++) {
        struct dns_role *r = &s->roles[ri];
        if (r->name == NULL)
            continue;
        if (is_stopping(s))
            break;
        if (resolve_role(s, r, set, why, sizeof(why)) != 0) {
            if (is_stopping(s))
                break;
            if (!r->failing)
                pdr_warn("dns discovery: %s %s: %s; keeping the last set, retrying every %d ms",
                         role_names[ri], r->name, why, s->interval_ms);
            r->failing = 1;
            continue;
        }
        if (r->failing)
            pdr_info("dns discovery: %s %s resolves again", role_names[ri], r->name);
        r->failing = 0;
        publish(s, (pdr_role_t)ri, set);
    }
    resolver_close(s);
}

static void *dns_thread(void *arg)
{
    dns_source_t *s = arg;
    struct dns_set set = {NULL, 0};
    set.v = malloc(PDR_DNS_MAX_ADDRS * sizeof(*set.v));
    if (set.v == NULL) {
        pdr_error("dns discovery: out of memory; no workers will be discovered");
        return NULL;
    }
    pthread_mutex_lock(&s->mu);
    while (!s->stopping) {
        pthread_mutex_unlock(&s->mu);
        struct timespec deadline;
        clock_gettime(CLOCK_MONOTONIC, &deadline);
        deadline.tv_sec += s->interval_ms / 1000;
        deadline.tv_nsec += (long)(s->interval_ms % 1000) * 1000000L;
        if (deadline.tv_nsec >= 1000000000L) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000L;
        }
        run_round(s, &set);
        pthread_mutex_lock(&s->mu);
        while (!s->stopping && pthread_cond_timedwait(&s->cv, &s->mu, &deadline) != ETIMEDOUT) {
        }
    }
    pthread_mutex_unlock(&s->mu);
    free(set.v);
    return NULL;
}

static void dns_free(dns_source_t *s)
{
    for (int r = 0; r < 2; r++)
        free(s->roles[r].last);
    free(s->answer);
    free(s);
}

static void dns_stop(pdr_discovery_t *d)
{
    dns_source_t *s = (dns_source_t *)d;
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    dns_free(s);
}

pdr_discovery_t *pdr_dns_discovery_start(const pdr_discovery_conf_t *d, const char *pool,
                                         pdr_discovery_emit_cb cb, void *ud, char *err, size_t errlen)
{
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (d->dns.role[PDR_ROLE_PREFILL].name == NULL && d->dns.role[PDR_ROLE_DECODE].name == NULL)
        return NULL;
    dns_source_t *s = calloc(1, sizeof(*s));
    if (s == NULL || (s->answer = malloc(PDR_DNS_ANSWER_MAX)) == NULL) {
        free(s);
        snprintf(err, errlen, "dns discovery: out of memory");
        return NULL;
    }
    s->base.stop = dns_stop;
    s->cb = cb;
    s->ud = ud;
    snprintf(s->pool, sizeof(s->pool), "%s", pool != NULL ? pool : PDR_DEFAULT_POOL);
    s->interval_ms = d->dns.interval_ms > 0 ? d->dns.interval_ms : 1;
    for (int r = 0; r < 2; r++) {
        s->roles[r].name = d->dns.role[r].name;
        s->roles[r].port = d->dns.role[r].port;
        s->roles[r].bootstrap_port = r == PDR_ROLE_PREFILL ? d->dns.role[r].bootstrap_port : -1;
        s->roles[r].https = d->dns.role[r].https;
    }
    if (d->dns.resolver != NULL) {
        if (parse_resolver(d->dns.resolver, &s->server) != 0) {
            snprintf(err, errlen, "discovery.dns.resolver: '%.80s' is not IPv4[:port], [IPv6]:port or IPv6",
                     d->dns.resolver);
            dns_free(s);
            return NULL;
        }
        s->has_server = 1;
    }
    pthread_condattr_t ca;
    int rc = pthread_condattr_init(&ca);
    if (rc == 0) {
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        rc = pthread_cond_init(&s->cv, &ca);
        pthread_condattr_destroy(&ca);
    }
    if (rc != 0) {
        snprintf(err, errlen, "dns discovery: pthread_cond_init: %s", strerror(rc));
        dns_free(s);
        return NULL;
    }
    pthread_mutex_init(&s->mu, NULL);
    rc = pthread_create(&s->thread, NULL, dns_thread, s);
    if (rc != 0) {
        snprintf(err, errlen, "dns discovery: cannot start its thread: %s", strerror(rc));
        pthread_cond_destroy(&s->cv);
        pthread_mutex_destroy(&s->mu);
        dns_free(s);
        return NULL;
    }
    return &s->base;
}
