/*
 * The precise prefix index: which worker holds which prompt block, per the KV events the workers publish
 * (docs/internals/routing.md, "Precise prefix index"). Any thread: one mutex guards everything.
 *
 * The engine's block hashes cannot be recomputed by the router (they depend on the engine's hash
 * function and seed), so the index keys blocks by its own chained hash over each block's token ids
 * (pdr_kvindex_block_hash) and keeps, per worker, the engine's hash of each block it holds so that
 * parent_block_hash and BlockRemoved can be joined back:
 *
 *   block_t  one per distinct local hash, in the block table; lists its residencies;
 *   res_t    one per (worker, block): the engine hash, in the engine table keyed by (worker, engine hash),
 *            in its block's list, in its worker's list and in the global LRU queue (common/dlist.h;
 *            least recently stored first).
 *
 * Invariants: every res_t is in exactly those four lists; a block_t has at least one residency (the
 * last one's removal frees it); ix->bytes is the sum of every allocation the index holds, and entries are
 * evicted from the LRU queue's head (the oldest) before an allocation would take it over max_bytes. Both
 * tables have a fixed number of buckets chosen from max_bytes at creation (counted too), so no rehash ever
 * runs.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dlist.h"
#include "err.h"
#include "kvevents.h"
#include "routing.h"

#include "kvindex_internal.h"

uint64_t pdr_kvindex_block_hash(uint64_t prev, const uint32_t *ids, size_t n)
{
    uint64_t h = pdr_mix64(prev ^ 0x9e3779b97f4a7c15ULL);
    size_t i = 0;
    /* Two ids per step: the hash is on the lookup path (one per block of every prompt). */
    for (; i + 1 < n; i += 2)
        h = pdr_mix64(h ^ ((uint64_t)ids[i] << 32 | ids[i + 1]));
    if (i < n)
        h = pdr_mix64(h ^ ids[i] ^ 0x8000000000000000ULL);
    return pdr_mix64(h ^ (uint64_t)n);
}

uint64_t pdr_kvindex_name_hash(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 0x100000001b3ULL;
    h = pdr_mix64(h ^ (uint64_t)n);
    return h != 0 ? h : 1;
}

uint64_t pdr_kvindex_namespace(uint64_t adapter, int64_t group, uint64_t kind)
{
    if (adapter == 0 && group == 0 && kind == 0)
        return 0;
    uint64_t h = pdr_mix64(adapter ^ 0x243f6a8885a308d3ULL);
    h = pdr_mix64(h ^ (uint64_t)group ^ 0x13198a2e03707344ULL);
    h = pdr_mix64(h ^ kind);
    return h != 0 ? h : 1;
}

/* The engine's hash of a block as the index keys it: the same hash in two KV cache groups of a hybrid
 * model is two blocks (vLLM hashes each group's blocks alike and tells them apart by group_idx). */
static uint64_t engine_key(uint64_t ehash, int64_t group)
{
    return group == 0 ? ehash : pdr_mix64(ehash ^ ((uint64_t)group * 0x9e3779b97f4a7c15ULL));
}

/* The adapter of a stored event: its lora_name, else its lora_id (older engines), else 0 (base). */
static uint64_t adapter_of(const pdr_kv_event_t *ev)
{
    if (ev->lora_name != 0)
        return ev->lora_name;
    if (ev->has_lora)
        return pdr_mix64((uint64_t)ev->lora_id ^ 0xa4093822299f31d0ULL) | 1;
    return 0;
}

static size_t ekey(const pdr_kvindex_t *ix, const worker_t *w, uint64_t ehash)
{
    return (size_t)(pdr_mix64(ehash ^ (w->id * 0x9e3779b97f4a7c15ULL)) & (ix->nbuckets - 1));
}

static size_t bkey(const pdr_kvindex_t *ix, uint64_t h)
{
    return (size_t)(h & (ix->nbuckets - 1));
}

static block_t *block_find(pdr_kvindex_t *ix, uint64_t h)
{
    block_t *b = ix->btab[bkey(ix, h)];
    while (b != NULL && b->h != h)
        b = b->hnext;
    return b;
}

static res_t *res_find(pdr_kvindex_t *ix, const worker_t *w, uint64_t ehash)
{
    res_t *r = ix->etab[ekey(ix, w, ehash)];
    while (r != NULL && (r->w != w || r->ehash != ehash))
        r = r->enext;
    return r;
}

/* Unlinks and frees one residency (and its block when it was the last). */
static void res_drop(pdr_kvindex_t *ix, res_t *r)
{
    res_t **pp = &ix->etab[ekey(ix, r->w, r->ehash)];
    while (*pp != r)
        pp = &(*pp)->enext;
    *pp = r->enext;
    block_t *b = r->blk;
    pp = &b->res;
    while (*pp != r)
        pp = &(*pp)->bnext;
    *pp = r->bnext;
    pdr_dqueue_unlink(&ix->lru, &r->llink);
    pdr_dlink_unlink(&r->wlink);
    r->w->st.blocks--;
    free(r);
    ix->bytes -= sizeof(res_t);
    ix->entries--;
    if (b->res == NULL) {
        block_t **bp = &ix->btab[bkey(ix, b->h)];
        while (*bp != b)
            bp = &(*bp)->hnext;
        *bp = b->hnext;
        free(b);
        ix->bytes -= sizeof(block_t);
        ix->blocks--;
    }
}

/* Drops every block of w (gaps, restarts, clears): a publisher that sends these in a loop costs the
 * router what it stored since, never a walk over the other workers' entries. */
static void worker_drop(pdr_kvindex_t *ix, worker_t *w)
{
    while (w->res != NULL)
        res_drop(ix, WORKER_RES(w->res));
}

static worker_t *worker_find(pdr_kvindex_t *ix, uint64_t id)
{
    for (size_t i = 0; i < ix->nworkers; i++)
        if (ix->workers[i]->id == id)
            return ix->workers[i];
    return NULL;
}

static worker_t *worker_get(pdr_kvindex_t *ix, uint64_t id)
{
    worker_t *w = worker_find(ix, id);
    if (w != NULL)
        return w;
    if (ix->nworkers == ix->capworkers) {
        size_t cap = ix->capworkers ? 2 * ix->capworkers : 4;
        worker_t **nw = realloc(ix->workers, cap * sizeof(*nw));
        if (nw == NULL)
            return NULL;
        ix->bytes += (cap - ix->capworkers) * sizeof(*nw);
        ix->workers = nw;
        ix->capworkers = cap;
    }
    w = calloc(1, sizeof(*w));
    if (w == NULL)
        return NULL;
    ix->bytes += sizeof(*w);
    w->id = id;
    ix->workers[ix->nworkers++] = w;
    return w;
}

pdr_kvindex_t *pdr_kvindex_new(const pdr_kvindex_params_t *params, int *err)
{
    pdr_kvindex_params_t p = PDR_KVINDEX_PARAMS_DEFAULT;
    if (params != NULL)
        p = *params;
    if (p.max_bytes < PDR_KVINDEX_MIN_BYTES) {
        *err = PDR_EINVAL;
        return NULL;
    }
    pdr_kvindex_t *ix = calloc(1, sizeof(*ix));
    if (ix == NULL) {
        *err = PDR_ENOMEM;
        return NULL;
    }
    ix->p = p;
    /* About one bucket per entry that fits: the two tables take a sixth of the cap. */
    uint64_t fit = p.max_bytes / (sizeof(res_t) + sizeof(block_t) + 2 * sizeof(void *));
    ix->nbuckets = 16;
    while ((uint64_t)ix->nbuckets * 2 <= fit && ix->nbuckets < PDR__KVINDEX_MAX_BUCKETS)
        ix->nbuckets *= 2;
    ix->btab = calloc(ix->nbuckets, sizeof(*ix->btab));
    ix->etab = calloc(ix->nbuckets, sizeof(*ix->etab));
    if (ix->btab == NULL || ix->etab == NULL) {
        free(ix->btab);
        free(ix->etab);
        free(ix);
        *err = PDR_ENOMEM;
        return NULL;
    }
    ix->bytes = sizeof(*ix) + ix->nbuckets * (sizeof(*ix->btab) + sizeof(*ix->etab));
    pthread_mutex_init(&ix->mu, NULL);
    return ix;
}

void pdr_kvindex_free(pdr_kvindex_t *ix)
{
    if (ix == NULL)
        return;
    pdr_dlink_t *l;
    while ((l = pdr_dqueue_pop(&ix->lru)) != NULL)
        free(LRU_RES(l));
    for (size_t i = 0; i < ix->nbuckets; i++) {
        block_t *b = ix->btab[i];
        while (b != NULL) {
            block_t *n = b->hnext;
            free(b);
            b = n;
        }
    }
    for (size_t i = 0; i < ix->nworkers; i++)
        free(ix->workers[i]);
    free(ix->workers);
    free(ix->btab);
    free(ix->etab);
    pthread_mutex_destroy(&ix->mu);
    free(ix);
}

/* Records that w holds the block (ehash, local hash h): a new residency, or a refreshed one. */
static int res_add(pdr_kvindex_t *ix, worker_t *w, uint64_t ehash, uint64_t h)
{
    res_t *r = res_find(ix, w, ehash);
    if (r != NULL && r->blk->h == h) {
        pdr_dqueue_unlink(&ix->lru, &r->llink);
        pdr_dqueue_append(&ix->lru, &r->llink);
        return 0;
    }
    if (r != NULL)
        res_drop(ix, r); /* the engine reused a hash for other tokens: the newer store wins */
    /* Make room first, so that the cap holds at every moment. */
    while (ix->bytes + sizeof(res_t) + sizeof(block_t) > ix->p.max_bytes && ix->lru.head != NULL) {
        res_drop(ix, LRU_RES(ix->lru.head));
        ix->evicted++;
    }
    if (ix->bytes + sizeof(res_t) + sizeof(block_t) > ix->p.max_bytes)
        return PDR_ETOOBIG;
    block_t *b = block_find(ix, h);
    if (b == NULL) {
        b = malloc(sizeof(*b));
        if (b == NULL)
            return PDR_ENOMEM;
        b->h = h;
        b->res = NULL;
        size_t k = bkey(ix, h);
        b->hnext = ix->btab[k];
        ix->btab[k] = b;
        ix->bytes += sizeof(*b);
        ix->blocks++;
    }
    r = malloc(sizeof(*r));
    if (r == NULL) {
        if (b->res == NULL) {
            ix->btab[bkey(ix, h)] = b->hnext; /* b was just pushed at the chain's head */
            free(b);
            ix->bytes -= sizeof(*b);
            ix->blocks--;
        }
        return PDR_ENOMEM;
    }
    r->ehash = ehash;
    r->blk = b;
    r->w = w;
    size_t k = ekey(ix, w, ehash);
    r->enext = ix->etab[k];
    ix->etab[k] = r;
    r->bnext = b->res;
    b->res = r;
    pdr_dqueue_append(&ix->lru, &r->llink);
    pdr_dlink_push(&w->res, &r->wlink);
    ix->bytes += sizeof(*r);
    ix->entries++;
    w->st.blocks++;
    return 0;
}

/* Remembers an adapter's name for the lookups; 0 when there is no room left. */
static int adapter_known(pdr_kvindex_t *ix, uint64_t name)
{
    for (size_t i = 0; i < ix->nadapters; i++)
        if (ix->adapters[i] == name)
            return 1;
    if (ix->nadapters == PDR_KVINDEX_MAX_ADAPTERS)
        return 0;
    ix->adapters[ix->nadapters++] = name;
    return 1;
}

static int apply_stored(pdr_kvindex_t *ix, worker_t *w, const pdr_kv_event_t *ev)
{
    if (!ev->gpu || (ev->lora_name != 0 && !adapter_known(ix, ev->lora_name))) {
        w->st.ignored += ev->n_hashes;
        return 0;
    }
    uint64_t adapter = adapter_of(ev);
    if (adapter != 0)
        w->st.adapter_blocks += ev->n_hashes;
    if (ev->group == 0)
        w->g0_kind = ev->kind_hash;
    /* The first block chains from its namespace's seed: no two adapters or groups share a hash. */
    uint64_t prev = pdr_kvindex_namespace(adapter, ev->group, ev->kind_hash);
    if (ev->has_parent) {
        res_t *pr = res_find(ix, w, engine_key(ev->parent, ev->group));
        if (pr == NULL) {
            w->st.orphans += ev->n_hashes;
            return 0;
        }
        prev = pr->blk->h;
    }
    w->block_size = ev->block_size;
    for (size_t i = 0; i < ev->n_hashes; i++) {
        uint64_t h = pdr_kvindex_block_hash(prev, ev->tokens + i * ev->block_size, ev->block_size);
        int rc = res_add(ix, w, engine_key(ev->hashes[i], ev->group), h);
        if (rc == PDR_ETOOBIG)
            return 0; /* a cap too small for one entry: nothing is indexed */
        if (rc != 0)
            return rc;
        w->st.blocks_stored++;
        prev = h;
    }
    return 0;
}

static void mark_synced(worker_t *w)
{
    if (!w->st.synced) {
        w->st.synced = 1;
        w->st.resyncs++;
    }
}

static void desync(pdr_kvindex_t *ix, worker_t *w)
{
    worker_drop(ix, w);
    w->st.synced = 0;
    w->st.warm = 0;
    w->run = 0;
}

int pdr_kvindex_apply(pdr_kvindex_t *ix, uint64_t worker, uint64_t seq, const pdr_kv_batch_t *batch,
                      pdr_kvindex_seq_t *what)
{
    if (worker == 0 || batch == NULL)
        return PDR_EINVAL;
    pdr_kvindex_seq_t s = PDR_KVINDEX_SEQ_OK;
    int rc = 0;
    pthread_mutex_lock(&ix->mu);
    worker_t *w = worker_get(ix, worker);
    if (w == NULL) {
        pthread_mutex_unlock(&ix->mu);
        return PDR_ENOMEM;
    }
    int warm = w->st.warm; /* loaded from a snapshot: this message confirms the stream's continuity or not */
    w->st.warm = 0;
    if (!w->seen) {
        /* A publisher numbers from 0 and starts with an empty cache: seeing 0 means seeing everything. */
        w->seen = 1;
        w->st.synced = seq == 0;
        w->run = 1;
    } else if (seq == w->st.last_seq + 1) {
        if (warm)
            w->st.synced = 1;
        if (!w->st.synced && ++w->run >= ix->p.resync_messages)
            mark_synced(w);
    } else if (seq > w->st.last_seq + 1) {
        s = PDR_KVINDEX_SEQ_GAP;
        w->st.gaps++;
        desync(ix, w);
        w->run = 1;
    } else {
        s = PDR_KVINDEX_SEQ_RESTART;
        w->st.restarts++;
        desync(ix, w);
        w->run = 1;
        if (seq == 0)
            mark_synced(w);
    }
    if (!w->st.synced && w->run >= ix->p.resync_messages)
        mark_synced(w);
    w->st.last_seq = seq;
    w->st.messages++;
    for (size_t i = 0; i < batch->n_events && rc == 0; i++) {
        const pdr_kv_event_t *ev = &batch->events[i];
        w->st.events++;
        switch (ev->kind) {
        case PDR_KV_BLOCK_STORED:
            rc = apply_stored(ix, w, ev);
            break;
        case PDR_KV_BLOCK_REMOVED:
            if (ev->gpu)
                for (size_t k = 0; k < ev->n_hashes; k++) {
                    res_t *r = res_find(ix, w, engine_key(ev->hashes[k], ev->group));
                    if (r != NULL) {
                        res_drop(ix, r);
                        w->st.blocks_removed++;
                    }
                }
            break;
        case PDR_KV_ALL_CLEARED:
            worker_drop(ix, w);
            w->st.clears++;
            mark_synced(w);
            break;
        }
    }
    pthread_mutex_unlock(&ix->mu);
    if (what != NULL)
        *what = s;
    return rc;
}

void pdr_kvindex_desync(pdr_kvindex_t *ix, uint64_t worker)
{
    pthread_mutex_lock(&ix->mu);
    worker_t *w = worker_find(ix, worker);
    if (w != NULL)
        desync(ix, w);
    pthread_mutex_unlock(&ix->mu);
}

void pdr_kvindex_remove_worker(pdr_kvindex_t *ix, uint64_t worker)
{
    pthread_mutex_lock(&ix->mu);
    for (size_t i = 0; i < ix->nworkers; i++) {
        worker_t *w = ix->workers[i];
        if (w->id != worker)
            continue;
        worker_drop(ix, w);
        ix->workers[i] = ix->workers[--ix->nworkers];
        free(w);
        ix->bytes -= sizeof(*w);
        break;
    }
    pthread_mutex_unlock(&ix->mu);
}

/* Does block b have a residency of w? */
static int held_by(const block_t *b, const worker_t *w)
{
    for (const res_t *r = b->res; r != NULL; r = r->bnext)
        if (r->w == w)
            return 1;
    return 0;
}

/* Distinct block sizes one lookup hashes the prompt for (workers with a fifth size fall back). */
#define KVI_MAX_SIZES 4
/* Blocks of a prompt whose hashes live on the stack (4096 tokens of 16); longer ones are malloc'ed. */
#define KVI_STACK_BLOCKS 256
/* How many blocks ahead a lookup prefetches its bucket. */
#define KVI_PREFETCH 4

void pdr_kvindex_match(pdr_kvindex_t *ix, const uint32_t *ids, size_t n_ids, const uint64_t *workers,
                       size_t n, pdr_kvindex_match_t *out)
{
    pdr_kvindex_match_model(ix, NULL, 0, ids, n_ids, workers, n, out);
}

void pdr_kvindex_match_model(pdr_kvindex_t *ix, const char *model, size_t mlen, const uint32_t *ids,
                             size_t n_ids, const uint64_t *workers, size_t n, pdr_kvindex_match_t *out)
{
    worker_t *ws[n + 1];
    /* The distinct (block size, namespace seed) pairs of the candidates: each is one chain of hashes. */
    uint32_t sizes[KVI_MAX_SIZES] = {0};
    uint64_t seeds[KVI_MAX_SIZES] = {0};
    size_t nsizes = 0;
    uint64_t name = model != NULL ? pdr_kvindex_name_hash(model, mlen) : 0, adapter = 0;
    /* 1. Under the lock: the request's adapter, the candidates' block sizes and their group 0's kind. */
    pthread_mutex_lock(&ix->mu);
    for (size_t k = 0; name != 0 && k < ix->nadapters && adapter == 0; k++)
        if (ix->adapters[k] == name)
            adapter = name;
    for (size_t i = 0; i < n; i++) {
        worker_t *w = worker_find(ix, workers[i]);
        uint32_t bs = w != NULL ? w->block_size : 0;
        uint64_t seed = w != NULL ? pdr_kvindex_namespace(adapter, 0, w->g0_kind) : 0;
        int known = bs == 0;
        for (size_t k = 0; k < nsizes && !known; k++)
            known = sizes[k] == bs && seeds[k] == seed;
        if (!known && nsizes < KVI_MAX_SIZES) {
            sizes[nsizes] = bs;
            seeds[nsizes++] = seed;
        }
    }
    pthread_mutex_unlock(&ix->mu);

    /* 2. Without it: the prompt's chained block hashes, per pair (the costly part of a lookup). */
    uint64_t stack[KVI_STACK_BLOCKS], *hashes[KVI_MAX_SIZES];
    size_t nblocks[KVI_MAX_SIZES] = {0};
    int stack_used = 0;
    for (size_t k = 0; k < nsizes; k++) {
        nblocks[k] = n_ids / sizes[k];
        if (!stack_used && nblocks[k] <= KVI_STACK_BLOCKS) {
            hashes[k] = stack;
            stack_used = 1;
        } else {
            hashes[k] = malloc((nblocks[k] ? nblocks[k] : 1) * sizeof(uint64_t));
        }
        uint64_t h = seeds[k];
        for (size_t b = 0; hashes[k] != NULL && b < nblocks[k]; b++)
            hashes[k][b] = h = pdr_kvindex_block_hash(h, ids + b * sizes[k], sizes[k]);
    }

    /* 3. Under the lock again: the walks. A worker gone, resized or re-kinded in between matches nothing. */
    int unhashed = 0;
    size_t which[n + 1];
    pthread_mutex_lock(&ix->mu);
    for (size_t i = 0; i < n; i++) {
        ws[i] = worker_find(ix, workers[i]);
        out[i].blocks = 0;
        out[i].block_size = ws[i] != NULL ? ws[i]->block_size : 0;
        out[i].synced = ws[i] != NULL && (ws[i]->st.synced || ws[i]->st.warm);
        ix->cold += ws[i] != NULL && !out[i].synced;
        uint64_t seed = ws[i] != NULL ? pdr_kvindex_namespace(adapter, 0, ws[i]->g0_kind) : 0;
        which[i] = nsizes;
        for (size_t k = 0; k < nsizes && which[i] == nsizes; k++)
            if (out[i].block_size == sizes[k] && seeds[k] == seed && hashes[k] != NULL)
                which[i] = k;
        if (which[i] == nsizes && out[i].block_size != 0) {
            out[i].synced = 0; /* no hashes for its size (out of memory, or a fifth size): the tree decides */
            unhashed = 1;
        }
    }
    ix->unhashed += unhashed;
    for (size_t k = 0; k < nsizes; k++) {
        if (hashes[k] == NULL)
            continue;
        size_t alive = 0;
        unsigned char live[n + 1];
        for (size_t j = 0; j < n; j++) {
            live[j] = which[j] == k && ws[j]->st.blocks > 0;
            alive += live[j];
        }
        for (size_t blk = 0; alive > 0 && blk < nblocks[k]; blk++) {
            if (blk + KVI_PREFETCH < nblocks[k])
                __builtin_prefetch(&ix->btab[bkey(ix, hashes[k][blk + KVI_PREFETCH])]);
            const block_t *b = block_find(ix, hashes[k][blk]);
            for (size_t j = 0; j < n; j++) {
                if (!live[j])
                    continue;
                if (b != NULL && held_by(b, ws[j])) {
                    out[j].blocks = (uint32_t)(blk + 1);
                } else {
                    live[j] = 0;
                    alive--;
                }
            }
        }
    }
    pthread_mutex_unlock(&ix->mu);
    for (size_t k = 0; k < nsizes; k++)
        if (hashes[k] != stack)
            free(hashes[k]);
}

int pdr_kvindex_worker_stats(pdr_kvindex_t *ix, uint64_t worker, pdr_kvindex_worker_stats_t *out)
{
    int rc = PDR_EINVAL;
    pthread_mutex_lock(&ix->mu);
    worker_t *w = worker_find(ix, worker);
    if (w != NULL) {
        *out = w->st;
        rc = 0;
    }
    pthread_mutex_unlock(&ix->mu);
    return rc;
}

void pdr_kvindex_stats(pdr_kvindex_t *ix, pdr_kvindex_stats_t *out)
{
    pthread_mutex_lock(&ix->mu);
    out->bytes = ix->bytes;
    out->max_bytes = ix->p.max_bytes;
    out->blocks = ix->blocks;
    out->entries = ix->entries;
    out->evicted = ix->evicted;
    out->unhashed = ix->unhashed;
    out->cold = ix->cold;
    out->workers = ix->nworkers;
    out->adapters = ix->nadapters;
    pthread_mutex_unlock(&ix->mu);
}

/* ---- for the other parts of the index (kvindex_internal.h) ---- */

worker_t *pdr__kvindex_worker_find(pdr_kvindex_t *ix, uint64_t id)
{
    return worker_find(ix, id);
}

worker_t *pdr__kvindex_worker_get(pdr_kvindex_t *ix, uint64_t id)
{
    return worker_get(ix, id);
}

int pdr__kvindex_res_add(pdr_kvindex_t *ix, worker_t *w, uint64_t ehash, uint64_t h)
{
    return res_add(ix, w, ehash, h);
}

int pdr__kvindex_adapter_known(pdr_kvindex_t *ix, uint64_t name)
{
    return adapter_known(ix, name);
}
