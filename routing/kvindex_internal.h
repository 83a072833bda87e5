/*
 * The precise prefix index's state (kvindex.c), shared with the parts of the index in other files: the
 * snapshot's export and import (kvindex_export.c). Every field is guarded by the index's mutex; the
 * pdr__kvindex_* functions expect it held.
 */
#ifndef PDR_KVINDEX_INTERNAL_H
#define PDR_KVINDEX_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "dlist.h"
#include "kvevents.h"

typedef struct res res_t;
typedef struct worker worker_t;

typedef struct block {
    uint64_t h;
    struct block *hnext;
    res_t *res;
} block_t;

struct res {
    uint64_t ehash;
    block_t *blk;
    worker_t *w;
    res_t *enext;      /* engine table chain */
    res_t *bnext;      /* the block's other residencies */
    pdr_dlink_t llink; /* ix->lru: the oldest at its head, the newest at its tail */
    pdr_dlink_t wlink; /* w->res */
};

struct worker {
    uint64_t id;
    int seen;
    uint32_t run; /* consecutive numbers since the last gap, while unsynced */
    uint32_t block_size;
    uint64_t g0_kind; /* the kind its group 0 last announced (the lookups' namespace) */
    pdr_dlink_t *res; /* its residencies: dropping them all costs their number, not the index's size */
    pdr_kvindex_worker_stats_t st;
};

/* 2^24 buckets a table (256 MiB for both): past about 16 Mi entries the chains grow instead. */
#define PDR__KVINDEX_MAX_BUCKETS ((size_t)1 << 24)

struct pdr_kvindex {
    pthread_mutex_t mu;
    pdr_kvindex_params_t p;
    uint64_t bytes, blocks, entries, evicted;
    uint64_t unhashed; /* lookups that left a worker to the tree for want of its size's hashes */
    uint64_t cold;     /* candidates known to the index but not in sync, left to the tree */
    size_t nbuckets;
    /* The tables' chains (hnext, enext) and a block's residencies (bnext) stay singly linked, as open
     * hashing's chains are: a dlist would add a pointer to every entry for O(1) unlinks not needed. */
    block_t **btab;
    res_t **etab;
    pdr_dqueue_t lru; /* every residency (res_t's llink), least recently stored or refreshed first */
    worker_t **workers;
    size_t nworkers, capworkers;
    uint64_t adapters[PDR_KVINDEX_MAX_ADAPTERS]; /* lora_name hashes seen in the events */
    size_t nadapters;
};

#define LRU_RES(l) PDR_DLINK_ENTRY((l), res_t, llink)
#define WORKER_RES(l) PDR_DLINK_ENTRY((l), res_t, wlink)

/* The worker of id, or NULL. */
worker_t *pdr__kvindex_worker_find(pdr_kvindex_t *ix, uint64_t id);
/* The worker of id, added when new; NULL: out of memory. */
worker_t *pdr__kvindex_worker_get(pdr_kvindex_t *ix, uint64_t id);
/* Records that w holds the block (engine key ehash, local hash h), evicting the oldest entries first to
 * stay under the cap: 0, PDR_ETOOBIG (a cap too small for one entry) or PDR_ENOMEM. */
int pdr__kvindex_res_add(pdr_kvindex_t *ix, worker_t *w, uint64_t ehash, uint64_t h);
/* Remembers an adapter's name for the lookups; 0 when there is no room left. */
int pdr__kvindex_adapter_known(pdr_kvindex_t *ix, uint64_t name);

#endif
