/*
 * The precise prefix index's content as plain arrays, for its snapshots (kvsnap.h; the encoding is
 * kvindex_snapshot.c's): the export copies it under the index's lock, the import loads a verified copy.
 */
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "kvindex_internal.h"
#include "kvsnap.h"

size_t pdr_kvindex_entry_bytes(void)
{
    return sizeof(res_t);
}

int pdr_kvindex_export(pdr_kvindex_t *ix, pdr_kvsnap_t *out)
{
    memset(out, 0, sizeof(*out));
    /* The arrays are allocated and touched outside the lock (picks wait while it is held): sized from the
     * counts, with room for what arrives meanwhile, and again if that was not enough. */
    size_t capw = 0, cape = 0;
    for (;;) {
        pthread_mutex_lock(&ix->mu);
        if (out->workers != NULL && ix->nworkers <= capw && ix->entries <= cape)
            break;
        capw = ix->nworkers + 8;
        cape = (size_t)ix->entries + ix->entries / 16 + 64;
        pthread_mutex_unlock(&ix->mu);
        free(out->workers);
        free(out->entries);
        out->workers = calloc(capw, sizeof(*out->workers));
        out->entries = malloc(cape * sizeof(*out->entries));
        if (out->workers == NULL || out->entries == NULL) {
            free(out->workers);
            free(out->entries);
            memset(out, 0, sizeof(*out));
            return PDR_ENOMEM;
        }
        memset(out->entries, 0,
               cape * sizeof(*out->entries)); /* its pages faulted in here, not under the lock */
    }
    for (size_t i = 0; i < ix->nworkers; i++) {
        const worker_t *w = ix->workers[i];
        pdr_kvsnap_worker_t *o = &out->workers[i];
        o->id = w->id;
        o->last_seq = w->st.last_seq;
        o->block_size = w->block_size;
        o->g0_kind = w->g0_kind;
        o->synced = w->st.synced || w->st.warm;
        o->seen = w->seen;
    }
    out->n_workers = ix->nworkers;
    memcpy(out->adapters, ix->adapters, ix->nadapters * sizeof(ix->adapters[0]));
    out->n_adapters = ix->nadapters;
    size_t n = 0;
    for (pdr_dlink_t *l = ix->lru.head; l != NULL; l = l->next) {
        const res_t *r = LRU_RES(l);
        uint32_t k = 0;
        while (ix->workers[k] != r->w)
            k++;
        out->entries[n++] = (pdr_kvsnap_entry_t){k, r->blk->h, r->ehash};
    }
    out->n_entries = n;
    pthread_mutex_unlock(&ix->mu);
    return 0;
}

int pdr_kvindex_import(pdr_kvindex_t *ix, const pdr_kvsnap_t *s, uint64_t *loaded)
{
    uint64_t n = 0;
    int rc = 0;
    if (loaded != NULL)
        *loaded = 0;
    worker_t **ws = calloc(s->n_workers + 1, sizeof(*ws));
    if (ws == NULL)
        return PDR_ENOMEM;
    pthread_mutex_lock(&ix->mu);
    for (size_t i = 0; i < s->n_workers && rc == 0; i++) {
        const pdr_kvsnap_worker_t *sw = &s->workers[i];
        if (sw->id == 0 || !sw->seen || pdr__kvindex_worker_find(ix, sw->id) != NULL)
            continue; /* not configured, never heard from, or already heard from: its own stream is newer */
        worker_t *w = pdr__kvindex_worker_get(ix, sw->id);
        if (w == NULL) {
            rc = PDR_ENOMEM;
            break;
        }
        w->seen = 1;
        w->st.last_seq = sw->last_seq;
        w->block_size = sw->block_size;
        w->g0_kind = sw->g0_kind;
        w->st.warm = sw->synced;
        ws[i] = w;
    }
    for (size_t i = 0; i < s->n_adapters && i < PDR_KVINDEX_MAX_ADAPTERS; i++)
        (void)pdr__kvindex_adapter_known(ix, s->adapters[i]);
    for (size_t i = 0; i < s->n_entries && rc == 0; i++) {
        const pdr_kvsnap_entry_t *e = &s->entries[i];
        if (e->worker >= s->n_workers) {
            rc = PDR_EINVAL;
            break;
        }
        if (ws[e->worker] == NULL)
            continue;
        rc = pdr__kvindex_res_add(ix, ws[e->worker], e->ehash, e->hash);
        if (rc == PDR_ETOOBIG)
            rc = 0; /* a cap too small for one entry: nothing is indexed, as apply_stored */
        else if (rc == 0)
            n++;
    }
    pthread_mutex_unlock(&ix->mu);
    free(ws);
    if (loaded != NULL)
        *loaded = n;
    return rc;
}
