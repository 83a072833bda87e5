/*
 * Sidecar mode (sidecar.enabled): one router beside one decode engine, in front of the pool's prefills. A
 * gateway's endpoint picker names the prefill of each request in a header (sidecar.prefill_header, llm-d's
 * x-prefiller-host-port: HOST:PORT of the prefill's HTTP address); the pool's prefill workers are the
 * allowlist: an address that is not one of them is refused and never connected to. The header is read when
 * the request arrives (a malformed one: 400, an address outside the pool: 403, both before admission), and
 * the prefill it names is taken at the first attempt's pick, bypassing the prefill policy: a serving one is
 * used, a draining one gives way to the policy's pick (a fall-back), a down or ejected one answers 503 at
 * once. Without the header the policy picks. Retries pick by the policy, avoiding the prefill that failed.
 * Loop thread of the request.
 */
#include <arpa/inet.h>
#include "fallback.h"
#include "pd_internal.h"

/* The first address of the header's first field: HOST:PORT, [IPv6]:PORT; OWS around it. 0, or -1 with why
 * in msg. An empty value is no address (1: absent). */
static int parse_addr(const char *v, size_t len, pd_sidecar_t *sc, const char *name, char *msg, size_t cap)
{
    const char *comma = memchr(v, ',', len); /* a list (RFC 9110 section 5.3): its first member */
    size_t n = comma != NULL ? (size_t)(comma - v) : len;
    while (n > 0 && (v[0] == ' ' || v[0] == '\t'))
        v++, n--;
    while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'))
        n--;
    if (n == 0 && comma == NULL)
        return 1;
    pdr_hostport_t hp;
    int64_t port = 0;
    int ok = n > 0 && pdr_split_hostport(v, n, &hp) == 0 && hp.port != NULL &&
             pdr_parse_int64(hp.port, hp.plen, 1, 65535, &port) == 0 && hp.hlen <= PD_SC_HOST_MAX;
    if (ok && hp.bracketed) { /* an IPv6 address, nothing else */
        char s[PD_SC_HOST_MAX + 1];
        struct in6_addr a;
        memcpy(s, hp.host, hp.hlen);
        s[hp.hlen] = '\0';
        ok = inet_pton(AF_INET6, s, &a) == 1;
    } else {
        ok = ok && !hp.ipv6; /* a bare IPv6 address has no port */
        /* An IPv4 address or a DNS name: letters, digits, '-', '.' and '_'. */
        for (size_t i = 0; ok && i < hp.hlen; i++) {
            char ch = hp.host[i];
            ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                 ch == '-' || ch == '.' || ch == '_';
        }
    }
    if (!ok) {
        char shown[80];
        size_t k = 0;
        for (size_t i = 0; i < n && k + 4 < sizeof(shown); i++)
            shown[k++] = v[i] >= 0x20 && v[i] < 0x7f ? v[i] : '?';
        shown[k] = '\0';
        snprintf(
            msg, cap,
            "%s: '%s%s' is not the address of a prefill: expected HOST:PORT (an IPv4 address, [IPv6] or a "
            "DNS name, and a port 1..65535)",
            name, shown, k < n ? "..." : "");
        return -1;
    }
    sc->host = hp.host;
    sc->hlen = hp.hlen;
    sc->port = (int)port;
    return 0;
}

int pdr__pd_sidecar_read(pdr_thread_t *t, const pdr_config_t *c, h2o_req_t *req, const char *pool,
                         pd_sidecar_t *sc, char *msg, size_t cap)
{
    memset(sc, 0, sizeof(*sc));
    sc->outcome = -1;
    if (!c->sidecar.enabled)
        return -1;
    const char *name = c->sidecar.prefill_header;
    ssize_t i = h2o_find_header_by_str(&req->headers, name, strlen(name), -1);
    int rc = i < 0 ? 1
                   : parse_addr(req->headers.entries[i].value.base, req->headers.entries[i].value.len, sc,
                                name, msg, cap);
    int outcome = rc > 0 ? PDR_SC_ABSENT : rc < 0 ? PDR_SC_MALFORMED : PDR_SC_USED;
    if (outcome == PDR_SC_USED) {
        int state;
        pdr_worker_unref(
            pdr_pool_find_addr(&t->r->pool, pool, PDR_ROLE_PREFILL, sc->host, sc->hlen, sc->port, &state));
        if (state == PDR_ADDR_NONE) {
            outcome = PDR_SC_NOT_IN_POOL;
            snprintf(msg, cap, "%s: %s%.*s%s:%d is not a prefill worker of this router's pool", name,
                     memchr(sc->host, ':', sc->hlen) != NULL ? "[" : "", (int)sc->hlen, sc->host,
                     memchr(sc->host, ':', sc->hlen) != NULL ? "]" : "", sc->port);
        }
    }
    if (outcome != PDR_SC_USED) { /* decided now; the others at the first attempt's pick */
        t->m.sidecar_header[outcome]++;
        sc->outcome = outcome;
    }
    sc->named = outcome == PDR_SC_USED;
    return outcome;
}

int pdr__pd_sidecar_pick(pd_req_t *x, const char *text, size_t tlen)
{
    pd_sidecar_t *sc = &x->sc;
    if (!sc->named || x->attempt > 0)
        return 1; /* the policy picks (no header, or a retry: it avoids the prefill that failed) */
    int state;
    pdr_worker_t *w =
        pdr_pool_find_addr(&x->r->pool, x->pool, PDR_ROLE_PREFILL, sc->host, sc->hlen, sc->port, &state);
    int outcome = w != NULL                    ? PDR_SC_USED
                  : state == PDR_ADDR_DRAINING ? PDR_SC_DRAINING
                                               : PDR_SC_UNHEALTHY; /* down, or gone since it arrived */
    int first = sc->outcome < 0; /* counted once: decode admission's wait runs the pick again */
    if (first) {
        x->t->m.sidecar_header[outcome]++;
        sc->outcome = outcome;
    }
    const char *name = x->conf->sidecar.prefill_header;
    if (outcome == PDR_SC_DRAINING) {
        char why[320];
        snprintf(why, sizeof(why), "the prefill %.*s:%d that %s names is draining", (int)sc->hlen, sc->host,
                 sc->port, name);
        if (first)
            pdr_fallback(PDR_FB_SIDECAR_DRAINING, why);
        return 1;
    }
    if (w == NULL) {
        char msg[400];
        snprintf(msg, sizeof(msg),
                 "the prefill %.*s:%d that %s names is %s: the gateway's endpoint picker may pick again",
                 (int)sc->hlen, sc->host, sc->port, name,
                 state == PDR_ADDR_NONE ? "no longer in the pool" : "down");
        x->error_cause = "prefill_header_unhealthy";
        pdr__pd_fail_response(x, 503, "service_unavailable", msg, 1);
        return 0;
    }
    x->at.pw = w;
    if (first && text != NULL)
        pdr_pool_record_pick(&x->r->pool, w, text, tlen); /* cache_aware learns what the picker chose */
    return 1;
}
