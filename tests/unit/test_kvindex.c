/*
 * Unit tests of the KV event decoder (routing/kvevents.c) on hand-built payloads in both encodings,
 * truncated and wrong-typed ones, and of the precise prefix index (routing/kvindex.c): chaining across
 * events, removal, orphans, sequence gaps and restarts, resync, the byte cap, allocation failures, and
 * the precise_prefix decision. The sources are included so that their allocations go through a counting
 * allocator that can fail the N-th call.
 */
#include <msgpack.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "runner.h"
#include "err.h"

#include "failalloc.h"
#include "../../routing/kvevents.c"
#include "../../routing/kvindex.c"
#include "../../routing/precise.c"
#include "../../routing/policy.c"
#include "../../routing/ptree.c"
#include "../../routing/chash.c"
#include "failalloc_end.h"

/* ---- payload builders (msgpack-c's packer) ---- */

typedef struct pk {
    msgpack_sbuffer sb;
    msgpack_packer p;
} pk_t;

static void pk_init(pk_t *k)
{
    msgpack_sbuffer_init(&k->sb);
    msgpack_packer_init(&k->p, &k->sb, msgpack_sbuffer_write);
}

static void pk_str(pk_t *k, const char *s)
{
    msgpack_pack_str(&k->p, strlen(s));
    msgpack_pack_str_body(&k->p, s, strlen(s));
}

/* BlockStored as an array: n blocks of bs tokens, hashes h0.., token ids from tok0 on. */
static void pk_stored(pk_t *k, size_t n, uint64_t h0, int parent, uint64_t ph, uint32_t bs, uint32_t tok0,
                      const char *medium)
{
    msgpack_pack_array(&k->p, 7);
    pk_str(k, "BlockStored");
    msgpack_pack_array(&k->p, n);
    for (size_t i = 0; i < n; i++)
        msgpack_pack_uint64(&k->p, h0 + i);
    if (parent)
        msgpack_pack_uint64(&k->p, ph);
    else
        msgpack_pack_nil(&k->p);
    msgpack_pack_array(&k->p, n * bs);
    for (size_t i = 0; i < n * bs; i++)
        msgpack_pack_uint32(&k->p, tok0 + (uint32_t)i);
    msgpack_pack_uint32(&k->p, bs);
    msgpack_pack_nil(&k->p);
    if (medium)
        pk_str(k, medium);
    else
        msgpack_pack_nil(&k->p);
}

static void pk_removed(pk_t *k, const uint64_t *h, size_t n)
{
    msgpack_pack_array(&k->p, 3);
    pk_str(k, "BlockRemoved");
    msgpack_pack_array(&k->p, n);
    for (size_t i = 0; i < n; i++)
        msgpack_pack_uint64(&k->p, h[i]);
    msgpack_pack_nil(&k->p);
}

static void pk_batch_head(pk_t *k, size_t nev)
{
    msgpack_pack_array(&k->p, 3);
    msgpack_pack_double(&k->p, 1700000000.5);
    msgpack_pack_array(&k->p, nev);
}

static int decode(pk_t *k, pdr_kv_batch_t *b, char *err, size_t errlen)
{
    return pdr_kv_batch_decode(k->sb.data, k->sb.size, b, err, errlen);
}

static void test_decode_array_like(void)
{
    pk_t k;
    pk_init(&k);
    pk_batch_head(&k, 4);
    pk_stored(&k, 2, 100, 0, 0, 4, 10, "GPU");
    uint64_t rm[] = {100};
    pk_removed(&k, rm, 1);
    msgpack_pack_array(&k.p, 1);
    pk_str(&k, "AllBlocksCleared");
    msgpack_pack_array(&k.p, 1);
    pk_str(&k, "SomethingNew");
    msgpack_pack_int(&k.p, 3); /* data_parallel_rank */
    pdr_kv_batch_t b;
    char err[200];
    CHECK(decode(&k, &b, err, sizeof(err)) == 0);
    CHECK(b.ts == 1700000000.5);
    CHECK(b.has_dp_rank && b.dp_rank == 3);
    CHECK(b.n_events == 3 && b.n_unknown == 1);
    if (b.n_events == 3) {
        CHECK(b.events[0].kind == PDR_KV_BLOCK_STORED && b.events[0].n_hashes == 2);
        CHECK(b.events[0].hashes[1] == 101 && !b.events[0].has_parent);
        CHECK(b.events[0].n_tokens == 8 && b.events[0].tokens[7] == 17 && b.events[0].block_size == 4);
        CHECK(b.events[0].gpu && !b.events[0].has_lora);
        CHECK(b.events[1].kind == PDR_KV_BLOCK_REMOVED && b.events[1].hashes[0] == 100);
        CHECK(b.events[2].kind == PDR_KV_ALL_CLEARED);
    }
    pdr_kv_batch_free(&b);
    msgpack_sbuffer_destroy(&k.sb);
}

/* The current vLLM shape: tagged maps, bytes hashes, a negative int hash, no data_parallel_rank. */
static void test_decode_maps(void)
{
    pk_t k;
    pk_init(&k);
    msgpack_pack_map(&k.p, 2);
    pk_str(&k, "ts");
    msgpack_pack_double(&k.p, 2.0);
    pk_str(&k, "events");
    msgpack_pack_array(&k.p, 2);
    msgpack_pack_map(&k.p, 8);
    pk_str(&k, "type");
    pk_str(&k, "BlockStored");
    pk_str(&k, "block_hashes");
    msgpack_pack_array(&k.p, 1);
    msgpack_pack_bin(&k.p, 32);
    char sha[32];
    memset(sha, 0xab, sizeof(sha));
    msgpack_pack_bin_body(&k.p, sha, 32);
    pk_str(&k, "parent_block_hash");
    msgpack_pack_int64(&k.p, -5);
    pk_str(&k, "token_ids");
    msgpack_pack_array(&k.p, 2);
    msgpack_pack_uint32(&k.p, 7);
    msgpack_pack_uint32(&k.p, 4000000000u);
    pk_str(&k, "block_size");
    msgpack_pack_uint32(&k.p, 2);
    pk_str(&k, "lora_id");
    msgpack_pack_int(&k.p, 9);
    pk_str(&k, "medium");
    pk_str(&k, "CPU");
    pk_str(&k, "extra_keys");
    msgpack_pack_nil(&k.p);
    msgpack_pack_map(&k.p, 1);
    pk_str(&k, "type");
    pk_str(&k, "AllBlocksCleared");
    pdr_kv_batch_t b;
    char err[200];
    int rc = decode(&k, &b, err, sizeof(err));
    CHECK(rc == 0);
    if (rc != 0)
        fprintf(stderr, "maps: %s\n", err);
    CHECK(b.n_events == 2 && !b.has_dp_rank);
    if (b.n_events == 2) {
        const pdr_kv_event_t *e = &b.events[0];
        CHECK(e->kind == PDR_KV_BLOCK_STORED && e->n_hashes == 1 && e->hashes[0] == fold_bytes(sha, 32));
        CHECK(e->has_parent && e->parent == (uint64_t)(int64_t)-5);
        CHECK(e->tokens[1] == 4000000000u && e->has_lora && e->lora_id == 9 && !e->gpu);
        CHECK(b.events[1].kind == PDR_KV_ALL_CLEARED);
    }
    pdr_kv_batch_free(&b);

    /* Every strict prefix of a valid payload is an error, never a crash. */
    for (size_t n = 0; n < k.sb.size; n++) {
        CHECK(pdr_kv_batch_decode(k.sb.data, n, &b, err, sizeof(err)) == PDR_EPROTO);
        CHECK(b.n_events == 0 && b.events == NULL);
        CHECK(err[0] != '\0');
    }
    msgpack_sbuffer_destroy(&k.sb);
}

/* Builds a one-event batch whose event the callback writes, expects PDR_EPROTO and a message. */
static void expect_bad(void (*ev)(pk_t *), const char *needle)
{
    pk_t k;
    pk_init(&k);
    pk_batch_head(&k, 1);
    ev(&k);
    msgpack_pack_nil(&k.p);
    pdr_kv_batch_t b;
    char err[200] = "";
    int rc = decode(&k, &b, err, sizeof(err));
    CHECK(rc == PDR_EPROTO);
    if (strstr(err, needle) == NULL) {
        fprintf(stderr, "expected '%s' in '%s'\n", needle, err);
        CHECK(0);
    }
    pdr_kv_batch_free(&b);
    msgpack_sbuffer_destroy(&k.sb);
}

static void ev_token_str(pk_t *k)
{
    msgpack_pack_array(&k->p, 6);
    pk_str(k, "BlockStored");
    msgpack_pack_array(&k->p, 1);
    msgpack_pack_uint64(&k->p, 1);
    msgpack_pack_nil(&k->p);
    msgpack_pack_array(&k->p, 2);
    msgpack_pack_uint32(&k->p, 1);
    pk_str(k, "x");
    msgpack_pack_uint32(&k->p, 2);
    msgpack_pack_nil(&k->p);
}
static void ev_count_mismatch(pk_t *k)
{
    msgpack_pack_array(&k->p, 5);
    pk_str(k, "BlockStored");
    msgpack_pack_array(&k->p, 2);
    msgpack_pack_uint64(&k->p, 1);
    msgpack_pack_uint64(&k->p, 2);
    msgpack_pack_nil(&k->p);
    msgpack_pack_array(&k->p, 3);
    for (int i = 0; i < 3; i++)
        msgpack_pack_uint32(&k->p, 1);
    msgpack_pack_uint32(&k->p, 2);
}
static void ev_block_size0(pk_t *k)
{
    msgpack_pack_array(&k->p, 5);
    pk_str(k, "BlockStored");
    msgpack_pack_array(&k->p, 0);
    msgpack_pack_nil(&k->p);
    msgpack_pack_array(&k->p, 0);
    msgpack_pack_uint32(&k->p, 0);
}
static void ev_no_parent(pk_t *k)
{
    msgpack_pack_array(&k->p, 2);
    pk_str(k, "BlockStored");
    msgpack_pack_array(&k->p, 0);
}
static void ev_hash_float(pk_t *k)
{
    msgpack_pack_array(&k->p, 2);
    pk_str(k, "BlockRemoved");
    msgpack_pack_array(&k->p, 1);
    msgpack_pack_double(&k->p, 1.5);
}
static void ev_tag_int(pk_t *k)
{
    msgpack_pack_array(&k->p, 1);
    msgpack_pack_int(&k->p, 1);
}
static void ev_map_no_type(pk_t *k)
{
    msgpack_pack_map(&k->p, 1);
    pk_str(k, "block_hashes");
    msgpack_pack_array(&k->p, 0);
}
static void ev_dup_key(pk_t *k)
{
    msgpack_pack_map(&k->p, 3);
    pk_str(k, "type");
    pk_str(k, "BlockRemoved");
    pk_str(k, "block_hashes");
    msgpack_pack_array(&k->p, 0);
    pk_str(k, "block_hashes");
    msgpack_pack_array(&k->p, 0);
}
static void ev_scalar(pk_t *k)
{
    msgpack_pack_int(&k->p, 7);
}

static void test_decode_bad(void)
{
    expect_bad(ev_token_str, "token_ids[1]");
    expect_bad(ev_count_mismatch, "3 ids for 2 blocks of 2 tokens");
    expect_bad(ev_block_size0, "block_size");
    expect_bad(ev_no_parent, "parent_block_hash: missing");
    expect_bad(ev_hash_float, "expected an int or bytes block hash, got float");
    expect_bad(ev_tag_int, "the tag is int");
    expect_bad(ev_map_no_type, "without a 'type' key");
    expect_bad(ev_dup_key, "duplicate key 'block_hashes'");
    expect_bad(ev_scalar, "expected an array or a map, got int");

    pdr_kv_batch_t b;
    char err[200];
    /* A header announcing 4 Gi elements in a 5-byte payload: refused before msgpack-c allocates. */
    const uint8_t huge[] = {0xdd, 0xff, 0xff, 0xff, 0xff};
    CHECK(pdr_kv_batch_decode(huge, sizeof(huge), &b, err, sizeof(err)) == PDR_EPROTO);
    CHECK(strstr(err, "announced") != NULL);
    const uint8_t bad_byte[] = {0x92, 0xc1, 0x90};
    CHECK(pdr_kv_batch_decode(bad_byte, sizeof(bad_byte), &b, err, sizeof(err)) == PDR_EPROTO);
    CHECK(strstr(err, "0xc1") != NULL);
    const uint8_t trailing[] = {0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x90, 0x00};
    CHECK(pdr_kv_batch_decode(trailing, sizeof(trailing), &b, err, sizeof(err)) == PDR_EPROTO);
    CHECK(strstr(err, "1 bytes after") != NULL);
    const uint8_t ok[] = {0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x90};
    CHECK(pdr_kv_batch_decode(ok, sizeof(ok), &b, err, sizeof(err)) == 0 && b.n_events == 0);
    pdr_kv_batch_free(&b);
    const uint8_t not_batch[] = {0xa3, 'a', 'b', 'c'};
    CHECK(pdr_kv_batch_decode(not_batch, sizeof(not_batch), &b, err, sizeof(err)) == PDR_EPROTO);
    const uint8_t ts_str[] = {0x92, 0xa1, 'x', 0x90};
    CHECK(pdr_kv_batch_decode(ts_str, sizeof(ts_str), &b, err, sizeof(err)) == PDR_EPROTO);
    CHECK(strstr(err, "batch.ts") != NULL);
    CHECK(pdr_kv_batch_decode(ok, 0, &b, err, sizeof(err)) == PDR_EPROTO);
    /* 40 nested arrays: beyond msgpack-c's nesting limit, an error and no crash. */
    uint8_t deep[41];
    memset(deep, 0x91, 40);
    deep[40] = 0xc0;
    int drc = pdr_kv_batch_decode(deep, sizeof(deep), &b, err, sizeof(err));
    if (drc != PDR_EPROTO)
        fprintf(stderr, "deep: %d %s\n", drc, err);
    CHECK(drc == PDR_EPROTO);
    static uint8_t big[PDR_KV_MAX_PAYLOAD + 1];
    CHECK(pdr_kv_batch_decode(big, sizeof(big), &b, err, sizeof(err)) == PDR_ETOOBIG);
    uint64_t seq;
    const uint8_t s8[] = {0, 0, 0, 0, 0, 0, 1, 2};
    CHECK(pdr_kv_seq_decode(s8, 8, &seq) == 0 && seq == 258);
    CHECK(pdr_kv_seq_decode(s8, 7, &seq) == PDR_EPROTO);
}

/* ---- the index ---- */

/* Applies a batch of one BlockStored (n blocks from hash h0, tokens tok0..) as message seq of worker w. */
static int store(pdr_kvindex_t *ix, uint64_t w, uint64_t seq, size_t n, uint64_t h0, int parent, uint64_t ph,
                 uint32_t bs, uint32_t tok0, pdr_kvindex_seq_t *what)
{
    pk_t k;
    pk_init(&k);
    pk_batch_head(&k, 1);
    pk_stored(&k, n, h0, parent, ph, bs, tok0, NULL);
    msgpack_pack_nil(&k.p);
    pdr_kv_batch_t b;
    char err[200];
    int rc = decode(&k, &b, err, sizeof(err));
    CHECK(rc == 0 || alloc_fail_at > 0);
    if (rc == 0)
        rc = pdr_kvindex_apply(ix, w, seq, &b, what);
    pdr_kv_batch_free(&b);
    msgpack_sbuffer_destroy(&k.sb);
    return rc;
}

static int apply_removed(pdr_kvindex_t *ix, uint64_t w, uint64_t seq, const uint64_t *h, size_t n)
{
    pk_t k;
    pk_init(&k);
    pk_batch_head(&k, 1);
    pk_removed(&k, h, n);
    msgpack_pack_nil(&k.p);
    pdr_kv_batch_t b;
    int rc = decode(&k, &b, NULL, 0);
    if (rc == 0)
        rc = pdr_kvindex_apply(ix, w, seq, &b, NULL);
    pdr_kv_batch_free(&b);
    msgpack_sbuffer_destroy(&k.sb);
    return rc;
}

static int apply_cleared(pdr_kvindex_t *ix, uint64_t w, uint64_t seq)
{
    pdr_kv_event_t ev = {.kind = PDR_KV_ALL_CLEARED};
    pdr_kv_batch_t b = {.events = &ev, .n_events = 1};
    return pdr_kvindex_apply(ix, w, seq, &b, NULL);
}

/* Recomputes the index's byte count and checks every list against the others. */
static int index_problems(pdr_kvindex_t *ix)
{
    int bad = 0;
    uint64_t bytes = sizeof(*ix) + ix->nbuckets * 2 * sizeof(void *) + ix->capworkers * sizeof(worker_t *) +
                     ix->nworkers * sizeof(worker_t);
    uint64_t nres = 0, nblk = 0;
    for (res_t *r = LRU_RES(ix->lru.head); r != NULL; r = LRU_RES(r->llink.next)) {
        nres++;
        if (res_find(ix, r->w, r->ehash) != r || !held_by(r->blk, r->w) ||
            block_find(ix, r->blk->h) != r->blk)
            bad++;
    }
    for (size_t i = 0; i < ix->nbuckets; i++)
        for (block_t *b = ix->btab[i]; b != NULL; b = b->hnext) {
            nblk++;
            if (b->res == NULL)
                bad++;
        }
    bytes += nres * sizeof(res_t) + nblk * sizeof(block_t);
    if (bytes != ix->bytes || nres != ix->entries || nblk != ix->blocks)
        bad++;
    uint64_t per = 0;
    for (size_t i = 0; i < ix->nworkers; i++)
        per += ix->workers[i]->st.blocks;
    if (per != nres)
        bad++;
    return bad;
}

/* A prompt of n ids: tok0, tok0+1, ... (what pk_stored stores). */
static void prompt(uint32_t *ids, size_t n, uint32_t tok0)
{
    for (size_t i = 0; i < n; i++)
        ids[i] = tok0 + (uint32_t)i;
}

static void test_index_basic(void)
{
    pdr_kvindex_params_t p = {1 << 20, 4};
    int err;
    pdr_kvindex_t *ix = pdr_kvindex_new(&p, &err);
    CHECK(ix != NULL);
    pdr_kvindex_seq_t what;
    /* Worker 1: blocks 100,101 (tokens 0..7), then 102 chained on 101 in a second message. */
    CHECK(store(ix, 1, 0, 2, 100, 0, 0, 4, 0, &what) == 0 && what == PDR_KVINDEX_SEQ_OK);
    CHECK(store(ix, 1, 1, 1, 102, 1, 101, 4, 8, &what) == 0 && what == PDR_KVINDEX_SEQ_OK);
    /* Worker 2 joined late (first message seq 7): unsynced until 4 consecutive numbers. */
    CHECK(store(ix, 2, 7, 1, 500, 0, 0, 4, 0, NULL) == 0);
    uint32_t ids[14];
    prompt(ids, 14, 0);
    uint64_t ws[3] = {1, 2, 3};
    pdr_kvindex_match_t m[3];
    pdr_kvindex_match(ix, ids, 14, ws, 3, m);
    CHECK(m[0].synced && m[0].blocks == 3 && m[0].block_size == 4);
    CHECK(!m[1].synced && m[1].blocks == 1);
    CHECK(!m[2].synced && m[2].blocks == 0);
    /* A prompt that diverges in block 2 matches 1 block. */
    ids[5] = 999;
    pdr_kvindex_match(ix, ids, 14, ws, 1, m);
    CHECK(m[0].blocks == 1);
    prompt(ids, 14, 0);
    /* Removing the middle block ends the match after the first one. */
    uint64_t rm = 101;
    CHECK(apply_removed(ix, 1, 2, &rm, 1) == 0);
    pdr_kvindex_match(ix, ids, 14, ws, 1, m);
    CHECK(m[0].blocks == 1);
    /* A store whose parent is unknown is an orphan: not indexed. */
    CHECK(store(ix, 1, 3, 1, 700, 1, 12345, 4, 40, NULL) == 0);
    pdr_kvindex_worker_stats_t st = {0};
    CHECK(pdr_kvindex_worker_stats(ix, 1, &st) == 0);
    CHECK(st.orphans == 1 && st.blocks == 2 && st.blocks_stored == 3 && st.blocks_removed == 1);
    CHECK(st.synced && st.messages == 4 && st.last_seq == 3);
    /* Worker 2 resyncs after 4 consecutive numbers. */
    CHECK(store(ix, 2, 8, 1, 501, 1, 500, 4, 4, NULL) == 0);
    CHECK(store(ix, 2, 9, 1, 502, 1, 501, 4, 8, NULL) == 0);
    pdr_kvindex_match(ix, ids, 14, ws + 1, 1, m);
    CHECK(!m[0].synced);
    CHECK(store(ix, 2, 10, 0, 0, 0, 0, 4, 0, NULL) == 0);
    pdr_kvindex_match(ix, ids, 14, ws + 1, 1, m);
    CHECK(m[0].synced && m[0].blocks == 3);
    CHECK(pdr_kvindex_worker_stats(ix, 2, &st) == 0 && st.resyncs == 1);
    /* A gap drops worker 2's blocks and unsyncs it. */
    CHECK(store(ix, 2, 20, 1, 600, 0, 0, 4, 0, &what) == 0 && what == PDR_KVINDEX_SEQ_GAP);
    CHECK(pdr_kvindex_worker_stats(ix, 2, &st) == 0 && st.gaps == 1 && !st.synced && st.blocks == 1);
    /* AllBlocksCleared drops and syncs at once. */
    CHECK(apply_cleared(ix, 2, 21) == 0);
    CHECK(pdr_kvindex_worker_stats(ix, 2, &st) == 0 && st.synced && st.blocks == 0 && st.clears == 1);
    /* A publisher restart (back to 0): dropped, and in sync from its start. */
    CHECK(store(ix, 1, 0, 1, 100, 0, 0, 4, 0, &what) == 0 && what == PDR_KVINDEX_SEQ_RESTART);
    CHECK(pdr_kvindex_worker_stats(ix, 1, &st) == 0 && st.synced && st.restarts == 1 && st.blocks == 1);
    /* Backwards but not to 0: unsynced. */
    CHECK(store(ix, 1, 5, 0, 0, 0, 0, 4, 0, NULL) == 0);
    CHECK(store(ix, 1, 3, 0, 0, 0, 0, 4, 0, &what) == 0 && what == PDR_KVINDEX_SEQ_RESTART);
    CHECK(pdr_kvindex_worker_stats(ix, 1, &st) == 0 && !st.synced);
    CHECK(index_problems(ix) == 0);
    pdr_kvindex_desync(ix, 2);
    pdr_kvindex_remove_worker(ix, 1);
    pdr_kvindex_remove_worker(ix, 2);
    pdr_kvindex_stats_t s;
    pdr_kvindex_stats(ix, &s);
    CHECK(s.entries == 0 && s.blocks == 0 && s.workers == 0);
    CHECK(index_problems(ix) == 0);
    pdr_kvindex_free(ix);
    p.max_bytes = 100;
    CHECK(pdr_kvindex_new(&p, &err) == NULL && err == PDR_EINVAL);
}

/* Two workers share blocks; the cap holds after every message; evicted entries are counted. */
static void test_index_cap(void)
{
    pdr_kvindex_params_t p = {64 << 10, 1};
    int err;
    pdr_kvindex_t *ix = pdr_kvindex_new(&p, &err);
    CHECK(ix != NULL);
    int over = 0;
    for (uint32_t i = 0; i < 3000; i++) {
        /* Chains of 4 blocks: each message stores one chain of fresh tokens for one worker. */
        CHECK(store(ix, 1 + i % 2, i / 2, 4, 10000 + (uint64_t)i * 4, 0, 0, 16, (i / 2) * 64, NULL) == 0);
        pdr_kvindex_stats_t s;
        pdr_kvindex_stats(ix, &s);
        if (s.bytes > p.max_bytes)
            over++;
    }
    CHECK(over == 0);
    pdr_kvindex_stats_t s;
    pdr_kvindex_stats(ix, &s);
    CHECK(s.evicted > 0 && s.entries > 100);
    /* Worker 1 and 2 store the same tokens: one block, two residencies. */
    CHECK(s.blocks < s.entries);
    CHECK(index_problems(ix) == 0);
    /* The newest chain is still whole. */
    uint32_t ids[64];
    prompt(ids, 64, 1499 * 64);
    uint64_t ws[2] = {1, 2};
    pdr_kvindex_match_t m[2];
    pdr_kvindex_match(ix, ids, 64, ws, 2, m);
    CHECK(m[0].blocks == 4 && m[1].blocks == 4);
    pdr_kvindex_free(ix);
}

/* Every allocation of a sequence fails in turn: errors, no leak (ASan), consistent counts. */
static void test_index_alloc_failures(void)
{
    for (long fail = 1; fail < 60; fail++) {
        alloc_calls = 0;
        alloc_fail_at = fail;
        pdr_kvindex_params_t p = {1 << 20, 1};
        int err;
        pdr_kvindex_t *ix = pdr_kvindex_new(&p, &err);
        if (ix == NULL) {
            CHECK(err == PDR_ENOMEM);
            continue;
        }
        for (uint64_t s = 0; s < 4; s++)
            (void)store(ix, 1 + s % 2, s / 2, 3, 100 + s * 3, 0, 0, 4, (uint32_t)s * 12, NULL);
        uint64_t rm[] = {100, 104};
        (void)apply_removed(ix, 1, 2, rm, 2);
        CHECK(index_problems(ix) == 0);
        pdr_kvindex_free(ix);
    }
    alloc_fail_at = -1;
}

static void test_precise_pick(void)
{
    int err;
    pdr_kvindex_params_t p = {1 << 20, 1};
    pdr_kvindex_t *ix = pdr_kvindex_new(&p, &err);
    pdr_ptree_t *t = pdr_ptree_new(1 << 20, &err);
    pdr_cache_aware_params_t ca = PDR_CACHE_AWARE_PARAMS_DEFAULT;
    uint64_t ids[3] = {1, 2, 3}, loads[3] = {0, 0, 0};
    uint32_t tok[64];
    prompt(tok, 64, 0);
    const char *text = "[0,1,2,3]";
    /* The tree says worker 1 saw the text; the events say worker 2 holds 48 of the 64 tokens. */
    CHECK(pdr_ptree_insert(t, text, strlen(text), 1) == 0);
    CHECK(store(ix, 1, 0, 0, 0, 0, 0, 16, 0, NULL) == 0);
    CHECK(store(ix, 2, 0, 3, 100, 0, 0, 16, 0, NULL) == 0);
    pdr_cache_aware_decision_t d;
    int from = -1;
    int k = pdr_precise_prefix_pick(t, ix, &ca, ids, NULL, loads, 3, text, strlen(text), tok, 64, &d, 1, NULL,
                                    &from);
    CHECK(k == 1 && d == PDR_CACHE_AWARE_MATCH && from == 1);
    /* record 0 leaves the tree alone; the match comes back in tokens when the index chose. */
    size_t mt = 0;
    uint64_t chars2 = pdr_ptree_tenant_chars(t, 2);
    const char *text2 = "[0,1,2,3,4]";
    k = pdr_precise_prefix_pick(t, ix, &ca, ids, NULL, loads, 3, text2, strlen(text2), tok, 64, &d, 0, &mt,
                                &from);
    CHECK(k == 1 && from == 1 && mt == 48 && pdr_ptree_tenant_chars(t, 2) == chars2);
    /* Worker 3 is unknown to the index: its estimate comes from the tree, which now says it saw it. */
    CHECK(pdr_ptree_insert(t, text, strlen(text), 3) == 0);
    CHECK(store(ix, 2, 5, 0, 0, 0, 0, 16, 0, NULL) == 0); /* a gap: worker 2 unsynced and empty */
    uint64_t c2[2] = {3, 2};
    k = pdr_precise_prefix_pick(t, ix, &ca, c2, NULL, loads, 2, text, strlen(text), tok, 64, &d, 1, NULL,
                                &from);
    CHECK(k == 0 && d == PDR_CACHE_AWARE_MATCH && from == 0);
    /* Without token ids, the tree alone: cache_aware's answer. */
    k = pdr_precise_prefix_pick(t, ix, &ca, ids, NULL, loads, 3, text, strlen(text), NULL, 0, &d, 1, NULL,
                                &from);
    CHECK(k >= 0 && d == PDR_CACHE_AWARE_MATCH && from == 0);
    /* Every worker in sync and none holding the prompt (its blocks evicted): the tree's memory keeps it
     * where it went last (worker 3 here, the most recent insert), not the smallest tree. */
    pdr_kvindex_t *ix2 = pdr_kvindex_new(&p, &err);
    for (uint64_t w = 1; w <= 3; w++)
        CHECK(store(ix2, w, 0, 0, 0, 0, 0, 16, 0, NULL) == 0);
    const char *other = "[7,7,7,7]";
    CHECK(pdr_ptree_insert(t, other, strlen(other), 1) == 0); /* worker 1's tree grows */
    k = pdr_precise_prefix_pick(t, ix2, &ca, ids, NULL, loads, 3, text, strlen(text), tok, 64, &d, 1, NULL,
                                &from);
    uint64_t who = 0;
    CHECK(d == PDR_CACHE_AWARE_MATCH && from == 0 && k >= 0);
    CHECK(k >= 0 && pdr_ptree_match(t, text, strlen(text), &ids[k], 1, &who) == strlen(text));
    pdr_kvindex_free(ix2);
    /* Imbalanced loads: the least loaded. */
    uint64_t heavy[3] = {500, 0, 500};
    k = pdr_precise_prefix_pick(t, ix, &ca, ids, NULL, heavy, 3, text, strlen(text), tok, 64, &d, 1, NULL,
                                NULL);
    CHECK(k == 1 && d == PDR_CACHE_AWARE_BALANCE);
    CHECK(pdr_precise_prefix_pick(t, ix, &ca, ids, NULL, loads, 0, text, 1, tok, 64, &d, 1, NULL, NULL) ==
          PDR_ENOWORKER);
    CHECK(pdr_precise_prefix_pick(t, ix, &ca, ids, NULL, loads, 3, text, 1, NULL, 5, &d, 1, NULL, NULL) ==
          PDR_EINVAL);
    pdr_ptree_free(t);
    pdr_kvindex_free(ix);
}

/* Five candidates with five block sizes: four sizes are hashed, the fifth worker is left to the tree, and
 * the lookup is counted (the router reports it as a fall-back); four sizes count nothing. */
static void test_index_unhashed(void)
{
    pdr_kvindex_params_t p = {1 << 20, 4};
    int err;
    pdr_kvindex_t *ix = pdr_kvindex_new(&p, &err);
    CHECK(ix != NULL);
    uint64_t ws[5] = {1, 2, 3, 4, 5};
    for (uint32_t i = 0; i < 5; i++)
        CHECK(store(ix, ws[i], 0, 1, 100 + i, 0, 0, 1u << i, 0, NULL) == 0);
    uint32_t ids[64];
    prompt(ids, 64, 0);
    pdr_kvindex_match_t m[5];
    pdr_kvindex_stats_t st;
    pdr_kvindex_match(ix, ids, 64, ws, 4, m);
    pdr_kvindex_stats(ix, &st);
    CHECK(st.unhashed == 0);
    pdr_kvindex_match(ix, ids, 64, ws, 5, m);
    pdr_kvindex_stats(ix, &st);
    int left = 0;
    for (int i = 0; i < 5; i++)
        left += !m[i].synced;
    CHECK(st.unhashed == 1 && left == 1);
    pdr_kvindex_free(ix);
}

/* vLLM's lora_name and hybrid-model fields, in the map shape: decoded, and a wrong type is an error. */
static void test_decode_hybrid_fields(void)
{
    for (int bad = 0; bad < 2; bad++) {
        pk_t k;
        pk_init(&k);
        pk_batch_head(&k, 2);
        msgpack_pack_map(&k.p, 10);
        pk_str(&k, "type");
        pk_str(&k, "BlockStored");
        pk_str(&k, "block_hashes");
        msgpack_pack_array(&k.p, 1);
        msgpack_pack_uint64(&k.p, 77);
        pk_str(&k, "parent_block_hash");
        msgpack_pack_nil(&k.p);
        pk_str(&k, "token_ids");
        msgpack_pack_array(&k.p, 2);
        msgpack_pack_uint32(&k.p, 1);
        msgpack_pack_uint32(&k.p, 2);
        pk_str(&k, "block_size");
        msgpack_pack_uint32(&k.p, 2);
        pk_str(&k, "lora_id");
        msgpack_pack_nil(&k.p);
        pk_str(&k, "lora_name");
        if (bad)
            msgpack_pack_int(&k.p, 3);
        else
            pk_str(&k, "sql-adapter");
        pk_str(&k, "group_idx");
        msgpack_pack_int(&k.p, 1);
        pk_str(&k, "kv_cache_spec_kind");
        pk_str(&k, "sliding_window");
        pk_str(&k, "kv_cache_spec_sliding_window");
        msgpack_pack_int(&k.p, 128);
        msgpack_pack_map(&k.p, 3);
        pk_str(&k, "type");
        pk_str(&k, "BlockRemoved");
        pk_str(&k, "block_hashes");
        msgpack_pack_array(&k.p, 1);
        msgpack_pack_uint64(&k.p, 77);
        pk_str(&k, "group_idx");
        msgpack_pack_int(&k.p, 2);
        msgpack_pack_nil(&k.p);
        pdr_kv_batch_t b;
        char err[200] = "";
        int rc = decode(&k, &b, err, sizeof(err));
        if (bad) {
            CHECK(rc == PDR_EPROTO && strstr(err, "lora_name") != NULL);
        } else {
            CHECK(rc == 0 && b.n_events == 2);
            if (rc == 0 && b.n_events == 2) {
                const pdr_kv_event_t *e = &b.events[0];
                CHECK(e->lora_name == pdr_kvindex_name_hash("sql-adapter", 11) && !e->has_lora);
                CHECK(e->group == 1 && e->kind_hash != 0 && e->gpu);
                CHECK(b.events[1].kind == PDR_KV_BLOCK_REMOVED && b.events[1].group == 2);
            }
        }
        pdr_kv_batch_free(&b);
        msgpack_sbuffer_destroy(&k.sb);
    }
}

/* One BlockStored built in place: n blocks from engine hash h0, ids tok0.., under an adapter and a group. */
typedef struct ns_ev {
    const char *lora_name;
    int has_lora_id;
    int64_t lora_id;
    int64_t group;
    const char *kind;
} ns_ev_t;

static int store_ns(pdr_kvindex_t *ix, uint64_t w, uint64_t seq, size_t n, uint64_t h0, int parent,
                    uint64_t ph, uint32_t bs, uint32_t tok0, const ns_ev_t *ns)
{
    uint64_t hs[16];
    uint32_t toks[16 * 16];
    CHECK(n <= 16 && n * bs <= 16 * 16);
    for (size_t i = 0; i < n; i++)
        hs[i] = h0 + i;
    for (size_t i = 0; i < n * bs; i++)
        toks[i] = tok0 + (uint32_t)i;
    pdr_kv_event_t ev = {.kind = PDR_KV_BLOCK_STORED,
                         .hashes = hs,
                         .n_hashes = n,
                         .has_parent = parent,
                         .parent = ph,
                         .tokens = toks,
                         .n_tokens = n * bs,
                         .block_size = bs,
                         .has_lora = ns->has_lora_id,
                         .lora_id = ns->lora_id,
                         .lora_name =
                             ns->lora_name ? pdr_kvindex_name_hash(ns->lora_name, strlen(ns->lora_name)) : 0,
                         .group = ns->group,
                         .kind_hash = ns->kind ? pdr_kvindex_name_hash(ns->kind, strlen(ns->kind)) : 0,
                         .gpu = 1};
    pdr_kv_batch_t b = {.events = &ev, .n_events = 1};
    return pdr_kvindex_apply(ix, w, seq, &b, NULL);
}

static int remove_group(pdr_kvindex_t *ix, uint64_t w, uint64_t seq, uint64_t h, int64_t group)
{
    pdr_kv_event_t ev = {.kind = PDR_KV_BLOCK_REMOVED, .hashes = &h, .n_hashes = 1, .group = group, .gpu = 1};
    pdr_kv_batch_t b = {.events = &ev, .n_events = 1};
    return pdr_kvindex_apply(ix, w, seq, &b, NULL);
}

/* Blocks of another adapter (by name or by id) or another KV cache group never match each other; a request
 * naming a known adapter walks that adapter's blocks, any other the base model's group 0. */
static void test_index_lora_groups(void)
{
    pdr_kvindex_params_t p = {1 << 20, 4};
    int err;
    pdr_kvindex_t *ix = pdr_kvindex_new(&p, &err);
    CHECK(ix != NULL);
    const ns_ev_t base = {0}, sql = {.lora_name = "sql"}, lid = {.has_lora_id = 1, .lora_id = 5},
                  g1 = {.group = 1, .kind = "sliding_window"}, g0full = {.kind = "full_attention"},
                  sql_g1 = {.lora_name = "sql", .group = 1};
    /* The same ids, three blocks of 4, on six workers, each under its own namespace. */
    CHECK(store_ns(ix, 1, 0, 3, 100, 0, 0, 4, 0, &base) == 0);
    CHECK(store_ns(ix, 2, 0, 3, 100, 0, 0, 4, 0, &sql) == 0);
    CHECK(store_ns(ix, 3, 0, 3, 100, 0, 0, 4, 0, &lid) == 0);
    CHECK(store_ns(ix, 4, 0, 3, 100, 0, 0, 4, 0, &g1) == 0);
    CHECK(store_ns(ix, 5, 0, 3, 100, 0, 0, 4, 0, &g0full) == 0);
    CHECK(store_ns(ix, 6, 0, 3, 100, 0, 0, 4, 0, &sql_g1) == 0);
    uint32_t ids[12];
    prompt(ids, 12, 0);
    uint64_t ws[6] = {1, 2, 3, 4, 5, 6};
    pdr_kvindex_match_t m[6];
    /* No model, and a model that no event named (the base model's name): the base model's group 0. Worker 5's
     * group 0 announced its kind: the lookup walks its chains with that kind. */
    for (int k = 0; k < 2; k++) {
        pdr_kvindex_match_model(ix, k ? "base-model" : NULL, k ? 10 : 0, ids, 12, ws, 6, m);
        CHECK(m[0].blocks == 3 && m[1].blocks == 0 && m[2].blocks == 0 && m[3].blocks == 0);
        CHECK(m[4].blocks == 3 && m[5].blocks == 0);
    }
    /* The adapter "sql": only its group 0 blocks. */
    pdr_kvindex_match_model(ix, "sql", 3, ids, 12, ws, 6, m);
    CHECK(m[0].blocks == 0 && m[1].blocks == 3 && m[2].blocks == 0 && m[3].blocks == 0 && m[4].blocks == 0);
    CHECK(m[5].blocks == 0);
    pdr_kvindex_worker_stats_t st = {0};
    CHECK(pdr_kvindex_worker_stats(ix, 2, &st) == 0 && st.adapter_blocks == 3 && st.ignored == 0);
    pdr_kvindex_stats_t is;
    pdr_kvindex_stats(ix, &is);
    CHECK(is.adapters == 1 && is.blocks == 3 * 6); /* six namespaces: no block shared */

    /* One worker, the same engine hashes in groups 0 and 1 (vLLM hashes each group's blocks alike): removing
     * group 1's middle block leaves group 0's chain whole, and a group 1 store chains onto group 1's parent.
     */
    CHECK(store_ns(ix, 7, 0, 3, 100, 0, 0, 4, 0, &base) == 0);
    CHECK(store_ns(ix, 7, 1, 2, 100, 0, 0, 4, 0, &g1) == 0);
    CHECK(remove_group(ix, 7, 2, 101, 1) == 0);
    uint64_t w7 = 7;
    pdr_kvindex_match(ix, ids, 12, &w7, 1, m);
    CHECK(m[0].blocks == 3);
    CHECK(store_ns(ix, 7, 3, 1, 200, 1, 100, 4, 4, &g1) == 0);
    CHECK(pdr_kvindex_worker_stats(ix, 7, &st) == 0 && st.orphans == 0 && st.blocks == 3 + 2);
    CHECK(remove_group(ix, 7, 4, 101, 0) == 0);
    pdr_kvindex_match(ix, ids, 12, &w7, 1, m);
    CHECK(m[0].blocks == 1);
    CHECK(index_problems(ix) == 0);
    pdr_kvindex_free(ix);
}

static const pdr_test_case_t cases[] = {
    {"decode_array_like", test_decode_array_like, 60},
    {"decode_maps", test_decode_maps, 60},
    {"decode_bad", test_decode_bad, 60},
    {"index_basic", test_index_basic, 60},
    {"index_cap", test_index_cap, 60},
    {"index_alloc_failures", test_index_alloc_failures, 60},
    {"index_unhashed", test_index_unhashed, 60},
    {"precise_pick", test_precise_pick, 60},
    {"decode_hybrid_fields", test_decode_hybrid_fields, 60},
    {"index_lora_groups", test_index_lora_groups, 60},
};

int main(int argc, char **argv)
{
    return PDR_TEST_RUN(cases, argc, argv);
}
