/*
 * pdsim's prefix cache: an LRU set of whole prompt blocks, as a real engine's prefix cache holds KV
 * blocks (vLLM's block pool, sglang's radix tree). Pure code, no I/O; the loop thread owns the cache.
 *
 * A block is block_tokens consecutive token ids starting at a multiple of block_tokens. Its key is a
 * running hash of its ids and the key of the block before it (vLLM's chained block hash), so a key
 * names the whole prefix up to the block's end and a lookup walks the prompt block by block until
 * the first miss. Only whole blocks are cached; a partial last block is always recomputed.
 *
 * Invariants: at most cap_tokens / block_tokens blocks are held; each is one malloc'ed entry in one
 * hash bucket's list and in the LRU queue (common/dlist.h). A request touches its blocks last to
 * first, so its first block is the most recent one and eviction takes a prefix's tail before its head
 * (vLLM frees a request's blocks in reverse order for the same reason). Memory: one entry (about 48
 * bytes) per held block and one pointer per bucket (buckets = the block cap rounded up to a power of
 * two).
 */
#include <stdlib.h>
#include "dlist.h"
#include "err.h"
#include "pdsim.h"

typedef struct pc_block {
    uint64_t key;
    pdr_dlink_t hlink; /* its hash bucket */
    pdr_dlink_t link;  /* the LRU queue, or a request's chain while it is being touched */
} pc_block_t;

struct pdsim_pcache {
    size_t block_tokens, max_blocks, nbuckets;
    pdr_dlink_t **buckets;
    pdr_dqueue_t lru; /* least recent first: the head is the next victim */
    pdsim_pcache_stats_t st;
    pdsim_pcache_listener_cb on_event;
    void *on_event_arg;
};

void pdsim_pcache_set_listener(pdsim_pcache_t *c, pdsim_pcache_listener_cb cb, void *arg)
{
    c->on_event = cb;
    c->on_event_arg = arg;
}

pdsim_pcache_t *pdsim_pcache_new(uint64_t cap_tokens, uint64_t block_tokens)
{
    if (block_tokens == 0 || cap_tokens < block_tokens)
        return NULL;
    pdsim_pcache_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->block_tokens = (size_t)block_tokens;
    c->max_blocks = (size_t)(cap_tokens / block_tokens);
    c->nbuckets = 1;
    while (c->nbuckets < c->max_blocks)
        c->nbuckets <<= 1;
    c->buckets = calloc(c->nbuckets, sizeof(*c->buckets));
    if (c->buckets == NULL) {
        free(c);
        return NULL;
    }
    return c;
}

void pdsim_pcache_free(pdsim_pcache_t *c)
{
    if (c == NULL)
        return;
    pc_block_t *b;
    while ((b = PDR_DLINK_ENTRY(pdr_dqueue_pop(&c->lru), pc_block_t, link)) != NULL)
        free(b);
    free(c->buckets);
    free(c);
}

/* The key of the block of ids[0..block_tokens) that follows the block keyed prev. */
static uint64_t block_key(uint64_t prev, const int64_t *ids, size_t n)
{
    uint64_t h = pdsim_mix64(prev ^ 0x9e3779b97f4a7c15ULL);
    for (size_t i = 0; i < n; i++)
        h = pdsim_mix64(h ^ (uint64_t)ids[i]);
    return h;
}

static pdr_dlink_t **bucket(pdsim_pcache_t *c, uint64_t key)
{
    return &c->buckets[key & (c->nbuckets - 1)];
}

static pc_block_t *find(pdsim_pcache_t *c, uint64_t key)
{
    pc_block_t *b = PDR_DLINK_ENTRY(*bucket(c, key), pc_block_t, hlink);
    while (b != NULL && b->key != key)
        b = PDR_DLINK_ENTRY(b->hlink.next, pc_block_t, hlink);
    return b;
}

/* Whole blocks of ids[0..n) that may count as cached: a prompt's last token is always computed (an
 * engine needs its logits), so the hit covers at most n - 1 tokens, as in vLLM and sglang. */
static size_t matchable_blocks(const pdsim_pcache_t *c, size_t n)
{
    return n == 0 ? 0 : (n - 1) / c->block_tokens;
}

/* Takes b off the LRU queue onto the front of a request's chain (its first block ends last). */
static void chain_push(pdsim_pcache_t *c, pdr_dlink_t **chain, pc_block_t *b)
{
    pdr_dqueue_unlink(&c->lru, &b->link);
    pdr_dlink_push(chain, &b->link);
}

/* Puts a request's chain back as the most recent blocks: its first block the most recent of all, its
 * last one the oldest of the chain. */
static void lru_touch(pdsim_pcache_t *c, pdr_dlink_t **chain)
{
    pdr_dlink_t *l;
    while ((l = pdr_dlink_pop(chain)) != NULL)
        pdr_dqueue_append(&c->lru, l);
}

uint64_t pdsim_pcache_lookup(pdsim_pcache_t *c, const int64_t *ids, size_t n)
{
    size_t nb = matchable_blocks(c, n), hit = 0;
    pdr_dlink_t *chain = NULL;
    uint64_t key = 0;
    for (; hit < nb; hit++) {
        key = block_key(key, ids + hit * c->block_tokens, c->block_tokens);
        pc_block_t *b = find(c, key);
        if (b == NULL)
            break;
        chain_push(c, &chain, b);
    }
    lru_touch(c, &chain);
    uint64_t cached = (uint64_t)hit * c->block_tokens;
    c->st.hit_tokens += cached;
    c->st.miss_tokens += n - cached;
    return cached;
}

int pdsim_pcache_insert(pdsim_pcache_t *c, const int64_t *ids, size_t n)
{
    size_t nb = n / c->block_tokens;
    if (nb > c->max_blocks)
        nb = c->max_blocks; /* the head of a prompt longer than the cache */
    uint64_t key = 0, parent = 0;
    pdr_dlink_t *chain = NULL;
    /* Build the request's chain off the LRU queue first (so that it never evicts itself), then put
     * it back as the most recent blocks. */
    for (size_t i = 0; i < nb; i++) {
        key = block_key(key, ids + i * c->block_tokens, c->block_tokens);
        pc_block_t *b = find(c, key);
        if (b == NULL) {
            if (c->st.blocks == c->max_blocks) {
                pc_block_t *victim = PDR_DLINK_ENTRY(pdr_dqueue_pop(&c->lru), pc_block_t, link);
                if (victim == NULL)
                    break; /* every slot is taken by this request's own chain */
                pdr_dlink_unlink(&victim->hlink);
                if (c->on_event != NULL)
                    c->on_event(c->on_event_arg, PDSIM_PCACHE_REMOVED, victim->key, 0, 0, NULL, 0);
                free(victim);
                c->st.blocks--;
                c->st.evicted_blocks++;
            }
            b = calloc(1, sizeof(*b));
            if (b == NULL) {
                lru_touch(c, &chain);
                return PDR_ENOMEM;
            }
            b->key = key;
            pdr_dlink_push(bucket(c, key), &b->hlink);
            c->st.blocks++;
            c->st.inserted_blocks++;
            if (c->on_event != NULL)
                c->on_event(c->on_event_arg, PDSIM_PCACHE_STORED, key, i > 0, parent,
                            ids + i * c->block_tokens, c->block_tokens);
        }
        parent = key;
        chain_push(c, &chain, b);
    }
    lru_touch(c, &chain);
    return 0;
}

void pdsim_pcache_stats(const pdsim_pcache_t *c, pdsim_pcache_stats_t *out)
{
    *out = c->st;
    out->max_blocks = c->max_blocks;
    out->block_tokens = c->block_tokens;
}
