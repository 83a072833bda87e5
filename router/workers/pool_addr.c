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

/* An IP literal's bytes (4 or 16) into a, its family's length returned; 0 for a name. */
static size_t ip_bytes(const char *host, size_t len, uint8_t a[16])
{
    char s[64];
    if (len == 0 || len >= sizeof(s))
        return 0;
    memcpy(s, host, len);
    s[len] = '\0';
    if (inet_pton(AF_INET, s, a) == 1)
        return 4;
    if (inet_pton(AF_INET6, s, a) == 1)
        return 16;
    return 0;
}

int pdr_worker_addr_is(const pdr_worker_t *w, const char *host, size_t hlen, int port)
{
    const pdr_worker_conf_t *c = &w->conf;
    if (c->port != port || c->host == NULL)
        return 0;
    size_t wlen = strlen(c->host);
    uint8_t a[16], b[16];
    size_t na = ip_bytes(host, hlen, a), nb = ip_bytes(c->host, wlen, b);
    if (na != 0 || nb != 0) /* an address matches the same address only, however it is written */
        return na == nb && memcmp(a, b, na) == 0;
    return wlen == hlen && strncasecmp(c->host, host, hlen) == 0; /* DNS names are case-insensitive */
}

pdr_worker_t *pdr_pool_find_addr(pdr_pool_t *p, const char *pool, pdr_role_t role, const char *host,
                                 size_t hlen, int port, int *state)
{
    pdr_worker_t *best = NULL;
    int draining = 0, found = 0;
    uint64_t now = pdr_now_ms();
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
