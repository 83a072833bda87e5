/*
 * KV cache events (vLLM's and sglang's KVEventBatch, docs/internals/kv-events.md) and the precise prefix
 * index built from them (docs/internals/routing.md, "Precise prefix index"). Plain C: no event-loop,
 * HTTP, ZeroMQ or msgpack types cross this header, so the router, pdsim's tests, the unit tests and the
 * benchmark link the same code.
 *
 * Threads: a decoded batch belongs to its caller. An index is shared: every call takes its mutex.
 */
#ifndef PDR_KVEVENTS_H
#define PDR_KVEVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "routing.h"

/* ---- decoding (kvevents.c) ---- */

typedef enum pdr_kv_event_kind {
    PDR_KV_BLOCK_STORED,
    PDR_KV_BLOCK_REMOVED,
    PDR_KV_ALL_CLEARED,
} pdr_kv_event_kind_t;

typedef struct pdr_kv_event {
    pdr_kv_event_kind_t kind;
    /* Stored and removed: the engine's block hashes (an int as its 64 bits, bytes folded to 64 bits). */
    uint64_t *hashes;
    size_t n_hashes;
    /* Stored only. */
    int has_parent;
    uint64_t parent;
    uint32_t *tokens; /* n_hashes * block_size ids */
    size_t n_tokens;
    uint32_t block_size;
    int has_lora;
    int64_t lora_id;
    uint64_t lora_name; /* the adapter's name folded (pdr_kvindex_name_hash); 0: none */
    /* Stored and removed: vLLM's KV cache group of a hybrid model (nil: 0). Stored only: the group's kind
     * (kv_cache_spec_kind and its sliding window folded together; 0: none given). */
    int64_t group;
    uint64_t kind_hash;
    int gpu; /* medium nil or "GPU": the blocks are in the engine's device cache */
} pdr_kv_event_t;

typedef struct pdr_kv_batch {
    double ts;
    int has_dp_rank;
    int64_t dp_rank;
    pdr_kv_event_t *events;
    size_t n_events;
    size_t n_unknown; /* events with a tag this decoder does not know (skipped) */
} pdr_kv_batch_t;

/* Ceilings of one payload (a batch above them is malformed): bytes, events, ids per event. */
#define PDR_KV_MAX_PAYLOAD (16u << 20)
#define PDR_KV_MAX_BLOCK_SIZE 4096u

/*
 * Decodes one msgpack payload (the third frame of a message) into *out. Accepts the array_like and the
 * map encodings at both levels. Returns 0, or PDR_EPROTO (malformed: err says what and where, out is
 * left empty), PDR_ETOOBIG (over the ceilings), PDR_ENOMEM. Free a decoded batch with
 * pdr_kv_batch_free(); an empty one may be freed too.
 */
int pdr_kv_batch_decode(const void *payload, size_t len, pdr_kv_batch_t *out, char *err, size_t errlen);
void pdr_kv_batch_free(pdr_kv_batch_t *b);

/* The 8-byte big-endian sequence number frame; PDR_EPROTO when the frame is not 8 bytes. */
int pdr_kv_seq_decode(const void *frame, size_t len, uint64_t *seq);

/* ---- the index (kvindex.c) ---- */

typedef struct pdr_kvindex pdr_kvindex_t;

typedef struct pdr_kvindex_params {
    uint64_t max_bytes;       /* hard cap on the index's own allocations; LRU blocks go first */
    uint32_t resync_messages; /* consecutive messages after a gap before an unsynced worker counts again */
} pdr_kvindex_params_t;

/* 64 MiB and 32 messages. */
#define PDR_KVINDEX_PARAMS_DEFAULT                                                                           \
    {                                                                                                        \
        (uint64_t)64 << 20, 32                                                                               \
    }

/* The smallest max_bytes an index accepts (its tables and a few entries). */
#define PDR_KVINDEX_MIN_BYTES 4096u

/* What one message did to its worker's state (pdr_kvindex_apply). */
typedef enum pdr_kvindex_seq {
    PDR_KVINDEX_SEQ_OK,      /* the next number (or the first one seen) */
    PDR_KVINDEX_SEQ_GAP,     /* numbers were skipped: the worker's blocks were dropped, unsynced */
    PDR_KVINDEX_SEQ_RESTART, /* the number went backwards (a new publisher): blocks dropped */
} pdr_kvindex_seq_t;

typedef struct pdr_kvindex_worker_stats {
    uint64_t messages, events, blocks_stored, blocks_removed, clears;
    uint64_t gaps, restarts, resyncs;
    uint64_t orphans; /* stored blocks whose parent the index did not know (not indexed) */
    uint64_t
        ignored; /* blocks of another medium, or of an adapter past PDR_KVINDEX_MAX_ADAPTERS (not indexed) */
    uint64_t adapter_blocks; /* stored blocks of a LoRA adapter (indexed under the adapter's namespace) */
    uint64_t blocks;         /* blocks the index holds for the worker now */
    int synced;
    /* Loaded from a snapshot (pdr_kvindex_import) and not yet confirmed by a message: its matches are used
     * as if it were synced until its next message, whose number either follows the snapshot's (synced) or
     * does not (the gap and restart rules drop the blocks). */
    int warm;
    uint64_t last_seq;
} pdr_kvindex_worker_stats_t;

typedef struct pdr_kvindex_stats {
    uint64_t bytes, max_bytes;
    uint64_t blocks, entries; /* distinct block hashes; (worker, block) pairs */
    uint64_t evicted;         /* entries dropped to stay under the cap */
    /* Lookups in which a candidate known to the index was left to the prefix tree because its block size
     * had no hashes: a fifth distinct size among the candidates (four are hashed), or out of memory. */
    uint64_t unhashed;
    /* Candidates of lookups that the index knows but that were not in sync (cold: joined late, a gap not
     * repaired, a restart), left to the prefix tree. */
    uint64_t cold;
    size_t workers;
    size_t adapters; /* adapter names known from the events (PDR_KVINDEX_MAX_ADAPTERS at most) */
} pdr_kvindex_stats_t;

/* Adapter names the index remembers for pdr_kvindex_match_model; the blocks of an adapter past it are not
 * indexed (counted as ignored). */
#define PDR_KVINDEX_MAX_ADAPTERS 256

/* Returns NULL and sets *err (PDR_EINVAL: max_bytes below PDR_KVINDEX_MIN_BYTES; PDR_ENOMEM). */
pdr_kvindex_t *pdr_kvindex_new(const pdr_kvindex_params_t *params, int *err);
void pdr_kvindex_free(pdr_kvindex_t *ix);

/*
 * Applies one message (sequence number seq, decoded batch) from worker (an opaque non-zero id; the
 * worker is added on its first message). Returns 0 or PDR_ENOMEM (the index stays consistent) or
 * PDR_EINVAL; *what (may be NULL) says what the number meant.
 */
int pdr_kvindex_apply(pdr_kvindex_t *ix, uint64_t worker, uint64_t seq, const pdr_kv_batch_t *batch,
                      pdr_kvindex_seq_t *what);
/* Marks a worker unsynced and drops its blocks (a malformed message: something was lost). */
void pdr_kvindex_desync(pdr_kvindex_t *ix, uint64_t worker);
/* Forgets a worker and its blocks. */
void pdr_kvindex_remove_worker(pdr_kvindex_t *ix, uint64_t worker);

typedef struct pdr_kvindex_match {
    uint32_t blocks;     /* whole blocks of the prompt the worker holds, from the start */
    uint32_t block_size; /* the worker's block size (0: no block stored yet) */
    int synced;          /* 0: the index does not know (unknown worker or unsynced): use another estimate */
} pdr_kvindex_match_t;

/*
 * For each of the n candidate workers, the prefix of ids[0..n_ids) it holds per its events, in whole
 * blocks (the router's own chained hash over each block's ids, walked block by block). Read-only.
 */
void pdr_kvindex_match(pdr_kvindex_t *ix, const uint32_t *ids, size_t n_ids, const uint64_t *workers,
                       size_t n, pdr_kvindex_match_t *out);

int pdr_kvindex_worker_stats(pdr_kvindex_t *ix, uint64_t worker, pdr_kvindex_worker_stats_t *out);
void pdr_kvindex_stats(pdr_kvindex_t *ix, pdr_kvindex_stats_t *out);

/* ---- the precise_prefix decision (precise.c) ---- */

/*
 * cache_aware's rules (routing.h) on a better estimate of each candidate's cached prefix. Unless the
 * loads are imbalanced, and when at least one candidate is in sync with the index: for a candidate in
 * sync, the share of the prompt's token ids it holds per its events (matched blocks x block size /
 * n_tokens); for any other (unsynced, not yet heard from), the tree's match of text for it alone
 * (matched / len). The best share above cache_threshold picks its candidate (MATCH; ties to the lower
 * load, then the lower index) and the text is recorded in the tree under it. Otherwise (imbalanced, no
 * index or token ids, no candidate in sync, no share above the threshold) the decision is
 * pdr_cache_aware_pick_keyed's on the tree: balance, the tree's match (the prefix stays where it went
 * last even if the index says its blocks are gone everywhere), or the seed. *from_index (may be NULL) is
 * 1 when the index chose. record and matched_out as pdr_cache_aware_pick_ex's, except that the match is in
 * tokens when the index chose (*from_index 1) and in bytes of text otherwise. keys: as
 * pdr_cache_aware_pick_keyed's. Returns the index of the pick, PDR_ENOWORKER (n is 0) or PDR_EINVAL.
 */
int pdr_precise_prefix_pick(pdr_ptree_t *tree, pdr_kvindex_t *ix, const pdr_cache_aware_params_t *params,
                            const uint64_t *ids, const uint64_t *keys, const uint64_t *loads, size_t n,
                            const char *text, size_t len, const uint32_t *tokens, size_t n_tokens,
                            pdr_cache_aware_decision_t *decision, int record, size_t *matched_out,
                            int *from_index);

/* As pdr_precise_prefix_pick, for a request whose "model" is model[0..mlen) (NULL: none): the index's
 * lookup is pdr_kvindex_match_model's (a LoRA adapter's blocks for a request naming the adapter). */
int pdr_precise_prefix_pick_model(pdr_ptree_t *tree, pdr_kvindex_t *ix,
                                  const pdr_cache_aware_params_t *params, const uint64_t *ids,
                                  const uint64_t *keys, const uint64_t *loads, size_t n, const char *text,
                                  size_t len, const uint32_t *tokens, size_t n_tokens,
                                  pdr_cache_aware_decision_t *decision, int record, size_t *matched_out,
                                  int *from_index, const char *model, size_t mlen);

/* The router's hash of a block: chained from prev (the namespace's seed for the first block) over its ids. */
uint64_t pdr_kvindex_block_hash(uint64_t prev, const uint32_t *ids, size_t n);

/* A name (a LoRA adapter's, a KV cache group kind's) folded to 64 bits; never 0. */
uint64_t pdr_kvindex_name_hash(const char *s, size_t n);

/*
 * The seed of a namespace's chain of blocks: the adapter (a folded lora_name, or a lora_id's key; 0 for the
 * base model), the KV cache group and its kind (0: none given). The base model's group 0 without a kind
 * is 0, the seed of every block before these fields existed; any other namespace has its own seed, so
 * that the same ids under another adapter or in another group never hash alike.
 */
uint64_t pdr_kvindex_namespace(uint64_t adapter, int64_t group, uint64_t kind);

/*
 * As pdr_kvindex_match, for a request whose "model" is model[0..mlen) (NULL: none). The model is a LoRA
 * adapter when some worker's events named an adapter of that name (lora_name): then the lookup walks that
 * adapter's chains; otherwise it walks the base model's. Group 0 either way, with the kind each worker's
 * group 0 last announced.
 */
void pdr_kvindex_match_model(pdr_kvindex_t *ix, const char *model, size_t mlen, const uint32_t *ids,
                             size_t n_ids, const uint64_t *workers, size_t n, pdr_kvindex_match_t *out);

#endif
