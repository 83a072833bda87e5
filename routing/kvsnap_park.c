/*
 * Parked snapshot workers (kvsnap_park.h). The parked set is a pdr_kvsnap_t of its own: the workers
 * (names copied), the adapters, and their entries in the snapshot's LRU order with the worker indexes
 * renumbered; adopting one worker imports the set with only that worker's id set (the import skips the
 * others), then drops its entries.
 */
#include "kvsnap_park.h"

#include <stdlib.h>
#include <string.h>

struct pdr_kv_park {
    pdr_kvsnap_t s;
    char **names; /* s.n_workers of them, malloc'd each */
};

void pdr_kv_park_free(pdr_kv_park_t *p)
{
    if (p == NULL)
        return;
    for (size_t i = 0; p->names != NULL && i < p->s.n_workers; i++)
        free(p->names[i]);
    free(p->names);
    free(p->s.workers);
    free(p->s.entries);
    free(p);
}

pdr_kv_park_t *pdr_kv_park_new(const pdr_kvsnap_t *snap, int *nomem)
{
    *nomem = 0;
    size_t nw = 0, ne = 0;
    uint32_t *map = malloc((snap->n_workers + 1) * sizeof(*map)); /* snapshot index -> parked index + 1 */
    if (map == NULL)
        goto oom;
    for (size_t i = 0; i < snap->n_workers; i++)
        map[i] = snap->workers[i].id == 0 && snap->workers[i].seen ? (uint32_t)++nw : 0;
    if (nw == 0) {
        free(map);
        return NULL;
    }
    for (size_t i = 0; i < snap->n_entries; i++)
        ne += snap->entries[i].worker < snap->n_workers && map[snap->entries[i].worker] != 0;
    pdr_kv_park_t *p = calloc(1, sizeof(*p));
    if (p == NULL || (p->s.workers = calloc(nw, sizeof(*p->s.workers))) == NULL ||
        (p->names = calloc(nw, sizeof(*p->names))) == NULL ||
        (ne > 0 && (p->s.entries = malloc(ne * sizeof(*p->s.entries))) == NULL)) {
        pdr_kv_park_free(p);
        free(map);
        goto oom;
    }
    p->s.n_workers = nw;
    p->s.created_ms = snap->created_ms;
    memcpy(p->s.adapters, snap->adapters, sizeof(p->s.adapters));
    p->s.n_adapters = snap->n_adapters;
    for (size_t i = 0; i < snap->n_workers; i++) {
        if (map[i] == 0)
            continue;
        const pdr_kvsnap_worker_t *sw = &snap->workers[i];
        pdr_kvsnap_worker_t *w = &p->s.workers[map[i] - 1];
        char *name = malloc(sw->name_len + 1);
        if (name == NULL) {
            pdr_kv_park_free(p);
            free(map);
            goto oom;
        }
        memcpy(name, sw->name, sw->name_len);
        name[sw->name_len] = '\0';
        p->names[map[i] - 1] = name;
        *w = *sw;
        w->name = name;
        w->id = 0;
    }
    for (size_t i = 0; i < snap->n_entries; i++) {
        const pdr_kvsnap_entry_t *e = &snap->entries[i];
        if (e->worker < snap->n_workers && map[e->worker] != 0) {
            p->s.entries[p->s.n_entries] = *e;
            p->s.entries[p->s.n_entries++].worker = map[e->worker] - 1;
        }
    }
    free(map);
    return p;
oom:
    *nomem = 1;
    return NULL;
}

uint64_t pdr_kv_park_adopt(pdr_kv_park_t *p, struct pdr_kvindex *ix, const char *name, uint64_t uid, int *rc)
{
    *rc = 0;
    size_t len = strlen(name), k;
    for (k = 0; k < p->s.n_workers; k++)
        if (p->s.workers[k].seen && p->s.workers[k].name_len == len && memcmp(p->names[k], name, len) == 0)
            break;
    if (k == p->s.n_workers)
        return 0;
    uint64_t n = 0;
    p->s.workers[k].id = uid;
    *rc = pdr_kvindex_import(ix, &p->s, &n);
    p->s.workers[k].id = 0;
    p->s.workers[k].seen = 0; /* never again: the import skips it */
    size_t out = 0;
    for (size_t i = 0; i < p->s.n_entries; i++)
        if (p->s.entries[i].worker != k)
            p->s.entries[out++] = p->s.entries[i];
    p->s.n_entries = out;
    return n;
}

size_t pdr_kv_park_workers(const pdr_kv_park_t *p)
{
    size_t n = 0;
    for (size_t i = 0; p != NULL && i < p->s.n_workers; i++)
        n += p->s.workers[i].seen != 0;
    return n;
}

size_t pdr_kv_park_entries(const pdr_kv_park_t *p)
{
    return p != NULL ? p->s.n_entries : 0;
}

const char *pdr_kv_park_name(const pdr_kv_park_t *p, size_t i)
{
    for (size_t k = 0; k < p->s.n_workers; k++)
        if (p->s.workers[k].seen && i-- == 0)
            return p->names[k];
    return "";
}
