/*
 * A worker found by the address of its URL (sidecar mode's prefill header, router/pd/sidecar.c): the
 * workers of a role in one pool whose URL has a given host and port, and the state the best of them is
 * in. Under the pool's read lock; any loop thread.
 */
#include <arpa/inet.h>
#include <string.h>
#include <strings.h>
#include "pool.h"
#include "pool_internal.h"
#include "util.h"

/* An IPv6 literal's 16 bytes into a: 1, or 0 when it is none. */
static int ip6_bytes(const char *host, size_t len, uint8_t a[16])
{
    char s[64];
    if (len == 0 || len >= sizeof(s))
        return 0;
    memcpy(s, host, len);
    s[len] = '\0';
    return inet_pton(AF_INET6, s, a) == 1;
}

int pdr_worker_addr_is(const pdr_worker_t *w, const char *host, size_t hlen, int port)
{
    const pdr_worker_conf_t *c = &w->conf;
    if (c->port != port || c->host == NULL)
        return 0;
    size_t wlen = strlen(c->host);
    if (wlen == hlen && strncasecmp(c->host, host, hlen) == 0)
        return 1; /* the same name (DNS names are case-insensitive) or the same address */
    /* An IPv4 address has one spelling (inet_pton takes four decimal octets without leading zeros), a name
     * never matches an address; an IPv6 address has many ("::1", "0:0::1"): compared as bytes. */
    uint8_t a[16], b[16];
    return c->is_ipv6 && memchr(host, ':', hlen) != NULL && ip6_bytes(host, hlen, a) &&
           ip6_bytes(c->host, wlen, b) && memcmp(a, b, 16) == 0;
}

pdr_worker_t *pdr_pool_find_addr(pdr_pool_t *p, const char *pool, pdr_role_t role, const char *host,
                                 size_t hlen, int port, int *state)
{
    pdr_worker_t *best = NULL;
    int draining = 0, found = 0;
    uint64_t now = 0; /* read once, when an ejection must be looked at */
    pthread_rwlock_rdlock(&p->rw);
    int gi = pdr__pool_group_of(p, pool);
    const pdr_worker_list_t *l = p->list[role];
    for (size_t i = 0; gi >= 0 && i < l->n; i++) {
        pdr_worker_t *w = l->w[i];
        if (w->group != gi || !pdr_worker_addr_is(w, host, hlen, port))
            continue;
        found = 1;
        if (pdr_worker_drain_state(w) != PDR_DRAIN_ACTIVE) {
            draining = 1;
            continue;
        }
        if (p->outlier.enabled && now == 0)
            now = pdr_now_ms();
        if (!pdr_worker_healthy(w) || (p->outlier.enabled && pdr_outlier_is_ejected(&w->outlier, now)))
            continue;
        /* Ranks of one data-parallel worker share its address: the one with the fewest in flight. */
        if (best == NULL || pdr_worker_inflight(w) < pdr_worker_inflight(best))
            best = w;
    }
    if (best != NULL)
        pdr_worker_ref(best);
    pthread_rwlock_unlock(&p->rw);
    *state = best != NULL ? PDR_ADDR_SERVING
             : !found     ? PDR_ADDR_NONE
             : draining   ? PDR_ADDR_DRAINING
                          : PDR_ADDR_DOWN;
    return best;
}
