/*
 * Unit tests of the precise prefix index's snapshots (routing/kvindex_snapshot.c and the export and
 * import of routing/kvindex.c): a round trip keeps every entry, its LRU order and the sync state; the
 * warm rule (the next message confirms continuity or drops the blocks); every single-bit flip and every
 * truncation of a small snapshot is refused; a foreign magic, version, hash or oversized counts are
 * refused with their own code; seeded random bytes and rewritten snapshots never crash the decoder.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "runner.h"
#include "err.h"
#include "kvsnap.h"
#include "kvsnap_park.h"

/* Applies one message of worker w: a BlockStored of n blocks (engine hashes h0..) of bs tokens from tok0. */
static int store_lora(pdr_kvindex_t *ix, uint64_t w, uint64_t seq, size_t n, uint64_t h0, int has_parent,
                      uint64_t parent, uint32_t bs, uint32_t tok0, uint64_t lora, pdr_kvindex_seq_t *what)
{
    uint64_t hashes[64];
    uint32_t toks[64 * 16];
    for (size_t i = 0; i < n; i++)
        hashes[i] = h0 + i;
    for (size_t i = 0; i < n * bs; i++)
        toks[i] = tok0 + (uint32_t)i;
    pdr_kv_event_t ev = {.kind = PDR_KV_BLOCK_STORED,
                         .hashes = hashes,
                         .n_hashes = n,
                         .has_parent = has_parent,
                         .parent = parent,
                         .tokens = toks,
                         .n_tokens = n * bs,
                         .block_size = bs,
                         .lora_name = lora,
                         .gpu = 1};
    pdr_kv_batch_t b = {0};
    b.events = &ev;
    b.n_events = n > 0 ? 1 : 0;
    return pdr_kvindex_apply(ix, w, seq, &b, what);
}

static int store(pdr_kvindex_t *ix, uint64_t w, uint64_t seq, size_t n, uint64_t h0, int has_parent,
                 uint64_t parent, uint32_t bs, uint32_t tok0, pdr_kvindex_seq_t *what)
{
    return store_lora(ix, w, seq, n, h0, has_parent, parent, bs, tok0, 0, what);
}

static pdr_kvindex_t *index_new(uint64_t max_bytes)
{
    pdr_kvindex_params_t p = {max_bytes, 4};
    int err;
    pdr_kvindex_t *ix = pdr_kvindex_new(&p, &err);
    CHECK(ix != NULL);
    return ix;
}

static const char *const names[] = {"http://10.0.0.1:8000", "http://10.0.0.2:8000", "http://10.0.0.3:8000"};

/* Worker 1 (synced, from 0): blocks 100..103 of tokens 0..15; worker 2 (joined late: unsynced): 200..201
 * of tokens 0..7 and, block size 8, 300 of tokens 1000..1007 on worker 3 (synced). */
static pdr_kvindex_t *sample(void)
{
    pdr_kvindex_t *ix = index_new(1 << 20);
    CHECK(store(ix, 11, 0, 2, 100, 0, 0, 4, 0, NULL) == 0);
    CHECK(store(ix, 22, 5, 2, 200, 0, 0, 4, 0, NULL) == 0);
    CHECK(store(ix, 11, 1, 2, 102, 1, 101, 4, 8, NULL) == 0);
    CHECK(store(ix, 33, 0, 1, 300, 0, 0, 8, 1000, NULL) == 0);
    /* An adapter's block on worker 3: the same ids as worker 1's first block, in the adapter's namespace. */
    CHECK(store_lora(ix, 33, 1, 1, 400, 0, 0, 8, 0, pdr_kvindex_name_hash("my-lora", 7), NULL) == 0);
    return ix;
}

/* Encodes ix with its workers named by id: 11, 22, 33 -> names[0..2]. */
static int encode(pdr_kvindex_t *ix, uint64_t max_bytes, char **buf, size_t *len)
{
    pdr_kvsnap_t s;
    CHECK(pdr_kvindex_export(ix, &s) == 0);
    for (size_t i = 0; i < s.n_workers; i++) {
        s.workers[i].name = names[s.workers[i].id / 11 - 1];
        s.workers[i].name_len = strlen(s.workers[i].name);
    }
    s.created_ms = 1234;
    char msg[256];
    int rc = pdr_kvsnap_encode(&s, max_bytes, buf, len, msg, sizeof(msg));
    pdr_kvsnap_free(&s);
    return rc;
}

/* Decodes and imports buf into a new index, naming worker names[k] id 100 + k (skip: no id). */
static pdr_kvindex_t *load(const char *buf, size_t len, const char *skip, int *rc_out, uint64_t *loaded)
{
    pdr_kvsnap_t s;
    char msg[256] = "";
    int rc = pdr_kvsnap_decode(buf, len, 1 << 20, &s, msg, sizeof(msg));
    *rc_out = rc;
    if (rc != 0) {
        CHECK(msg[0] != '\0');
        return NULL;
    }
    for (size_t i = 0; i < s.n_workers; i++)
        for (size_t k = 0; k < 3; k++)
            if (s.workers[i].name_len == strlen(names[k]) &&
                memcmp(s.workers[i].name, names[k], s.workers[i].name_len) == 0 &&
                (skip == NULL || strcmp(skip, names[k]) != 0))
                s.workers[i].id = 100 + k;
    pdr_kvindex_t *ix = index_new(1 << 20);
    CHECK(pdr_kvindex_import(ix, &s, loaded) == 0);
    pdr_kvsnap_free(&s);
    return ix;
}

static void prompt(uint32_t *ids, size_t n, uint32_t tok0)
{
    for (size_t i = 0; i < n; i++)
        ids[i] = tok0 + (uint32_t)i;
}

static void test_round_trip(void)
{
    pdr_kvindex_t *a = sample();
    char *buf;
    size_t len;
    CHECK(encode(a, 1 << 20, &buf, &len) == 0);
    int rc;
    uint64_t loaded = 0;
    pdr_kvindex_t *b = load(buf, len, NULL, &rc, &loaded);
    CHECK(rc == 0 && b != NULL && loaded == 8);
    /* The same matches under the new ids; worker 1 and 3 warm (usable), worker 2 not (it was unsynced). */
    uint32_t ids[16];
    prompt(ids, 16, 0);
    uint64_t wa[2] = {11, 22}, wb[2] = {100, 101};
    pdr_kvindex_match_t ma[2], mb[2];
    pdr_kvindex_match(a, ids, 16, wa, 2, ma);
    pdr_kvindex_match(b, ids, 16, wb, 2, mb);
    CHECK(ma[0].blocks == 4 && mb[0].blocks == 4 && mb[0].synced && mb[0].block_size == 4);
    CHECK(ma[1].blocks == 2 && mb[1].blocks == 2 && !mb[1].synced);
    uint32_t ids8[8];
    prompt(ids8, 8, 1000);
    uint64_t w3 = 102;
    pdr_kvindex_match(b, ids8, 8, &w3, 1, mb);
    CHECK(mb[0].blocks == 1 && mb[0].synced && mb[0].block_size == 8);
    /* The adapter is known after the load: a request naming it matches the adapter's block. */
    pdr_kvindex_match_model(b, "my-lora", 7, ids, 8, &w3, 1, mb);
    CHECK(mb[0].blocks == 1 && mb[0].synced);
    pdr_kvindex_match(b, ids, 8, &w3, 1, mb);
    CHECK(mb[0].blocks == 0);
    pdr_kvindex_worker_stats_t st;
    CHECK(pdr_kvindex_worker_stats(b, 100, &st) == 0 && st.warm && !st.synced && st.last_seq == 1 &&
          st.blocks == 4);
    CHECK(pdr_kvindex_worker_stats(b, 101, &st) == 0 && !st.warm && !st.synced && st.last_seq == 5);
    /* The LRU order survives: a second export lists the same (worker, hash, ehash) in the same order. */
    pdr_kvsnap_t ea, eb;
    CHECK(pdr_kvindex_export(a, &ea) == 0 && pdr_kvindex_export(b, &eb) == 0);
    CHECK(ea.n_entries == eb.n_entries);
    for (size_t i = 0; i < ea.n_entries && i < eb.n_entries; i++) {
        CHECK(ea.entries[i].hash == eb.entries[i].hash && ea.entries[i].ehash == eb.entries[i].ehash);
        CHECK(ea.workers[ea.entries[i].worker].id - 11 == (eb.workers[eb.entries[i].worker].id - 100) * 11);
    }
    pdr_kvsnap_free(&ea);
    pdr_kvsnap_free(&eb);
    /* The stream continues where the snapshot ended: synced. BlockRemoved and parents join as before. */
    pdr_kvindex_seq_t what;
    CHECK(store(b, 100, 2, 1, 104, 1, 103, 4, 16, &what) == 0 && what == PDR_KVINDEX_SEQ_OK);
    CHECK(pdr_kvindex_worker_stats(b, 100, &st) == 0 && st.synced && !st.warm && st.blocks == 5 &&
          st.orphans == 0);
    /* A gap after the snapshot: the warm worker's blocks go, and it is unsynced. */
    CHECK(store(b, 102, 9, 0, 0, 0, 0, 8, 0, &what) == 0 && what == PDR_KVINDEX_SEQ_GAP);
    CHECK(pdr_kvindex_worker_stats(b, 102, &st) == 0 && !st.synced && !st.warm && st.blocks == 0);
    pdr_kvindex_match(b, ids8, 8, &w3, 1, mb);
    CHECK(!mb[0].synced && mb[0].blocks == 0);
    pdr_kvindex_free(b);
    /* A worker of the snapshot not in the configuration is skipped; a worker already heard from keeps its
     * own state. */
    b = load(buf, len, names[1], &rc, &loaded);
    CHECK(rc == 0 && loaded == 6);
    CHECK(pdr_kvindex_worker_stats(b, 101, &st) == PDR_EINVAL);
    pdr_kvindex_free(b);
    pdr_kvsnap_t s;
    char msg[256];
    CHECK(pdr_kvsnap_decode(buf, len, 1 << 20, &s, msg, sizeof(msg)) == 0);
    for (size_t i = 0; i < s.n_workers; i++)
        s.workers[i].id = 100;
    b = index_new(1 << 20);
    CHECK(store(b, 100, 0, 0, 0, 0, 0, 4, 0, NULL) == 0);
    CHECK(pdr_kvindex_import(b, &s, &loaded) == 0 && loaded == 0);
    pdr_kvindex_free(b);
    /* A worker the snapshot never heard from is skipped (its sequence number means nothing). */
    for (size_t i = 0; i < s.n_workers; i++) {
        s.workers[i].id = 200 + i;
        s.workers[i].seen = 0;
    }
    b = index_new(1 << 20);
    CHECK(pdr_kvindex_import(b, &s, &loaded) == 0 && loaded == 0);
    CHECK(pdr_kvindex_worker_stats(b, 200, &st) == PDR_EINVAL);
    pdr_kvsnap_free(&s);
    pdr_kvindex_free(b);
    /* A publisher restart (0) after the snapshot drops the blocks and syncs from its start. */
    b = load(buf, len, NULL, &rc, &loaded);
    CHECK(store(b, 100, 0, 1, 900, 0, 0, 4, 50, &what) == 0 && what == PDR_KVINDEX_SEQ_RESTART);
    CHECK(pdr_kvindex_worker_stats(b, 100, &st) == 0 && st.synced && st.blocks == 1);
    pdr_kvindex_free(b);
    /* The writer's ceiling: a snapshot over it is refused. */
    char *big;
    size_t blen;
    CHECK(encode(a, len - 1, &big, &blen) == PDR_ETOOBIG);
    CHECK(encode(a, len, &big, &blen) == 0 && blen == len && memcmp(big, buf, len) == 0);
    free(big);
    free(buf);
    pdr_kvindex_free(a);
}

/* Every single-bit flip anywhere and every truncation: refused, never loaded. */
static void test_corruption(void)
{
    pdr_kvindex_t *a = sample();
    char *buf;
    size_t len;
    CHECK(encode(a, 1 << 20, &buf, &len) == 0);
    pdr_kvsnap_t s;
    char msg[256];
    for (size_t bit = 0; bit < len * 8; bit++) {
        buf[bit / 8] ^= (char)(1 << (bit % 8));
        int rc = pdr_kvsnap_decode(buf, len, 1 << 20, &s, msg, sizeof(msg));
        CHECK(rc == PDR_EPROTO || rc == PDR_ENOTSUP);
        buf[bit / 8] ^= (char)(1 << (bit % 8));
    }
    for (size_t n = 0; n < len; n++)
        CHECK(pdr_kvsnap_decode(buf, n, 1 << 20, &s, msg, sizeof(msg)) == PDR_EPROTO);
    CHECK(pdr_kvsnap_decode(buf, len, 1 << 20, &s, msg, sizeof(msg)) == 0);
    pdr_kvsnap_free(&s);
    /* The reader's ceiling. */
    CHECK(pdr_kvsnap_decode(buf, len, len - 1, &s, msg, sizeof(msg)) == PDR_ETOOBIG);
    /* Wrong magic, another version. */
    char *c = malloc(len);
    memcpy(c, buf, len);
    c[0] = 'X';
    CHECK(pdr_kvsnap_decode(c, len, 1 << 20, &s, msg, sizeof(msg)) == PDR_EPROTO && strstr(msg, "magic"));
    memcpy(c, buf, len);
    c[8] = 2;
    CHECK(pdr_kvsnap_decode(c, len, 1 << 20, &s, msg, sizeof(msg)) == PDR_ENOTSUP && strstr(msg, "version"));
    /* A consistent checksum over rewritten fields: the other checks still refuse. */
    struct {
        size_t off;
        uint64_t v;
        int bytes, rc;
        const char *what;
    } edits[] = {
        {24, 0x1234, 8, PDR_ECONFIG, "hashes blocks"},    /* another block hash */
        {40, (uint64_t)1 << 40, 8, PDR_ETOOBIG, "holds"}, /* entries past the cap */
        {32, 1u << 30, 4, PDR_ETOOBIG, "holds"},          /* workers past the cap */
        {40, 9, 8, PDR_EPROTO, "entries"},                /* one entry too many */
        {40, 7, 8, PDR_EPROTO, "entries"},                /* one too few */
        {36, 9, 4, PDR_EPROTO, "block sizes"},            /* too many sizes */
        {48, 0, 4, PDR_EPROTO, "block size"},             /* a listed size missing */
        {12, 64, 4, PDR_EPROTO, "header"},                /* another header length */
        {32, 2, 4, PDR_EPROTO, "block sizes"},            /* one worker fewer */
        {98, 1, 1, PDR_EPROTO, "printable"},              /* a control byte in the first worker's name */
        {80, 300, 4, PDR_EPROTO, "adapters"},             /* more adapters than an index keeps */
        {84, 1, 4, PDR_EPROTO, "reserved"},               /* the reserved field */
        {88, 0, 8, PDR_EPROTO, "no adapter"},             /* the first adapter's name zeroed */
    };
    for (size_t k = 0; k < sizeof(edits) / sizeof(edits[0]); k++) {
        memcpy(c, buf, len);
        for (int i = 0; i < edits[k].bytes; i++)
            c[edits[k].off + (size_t)i] = (char)(edits[k].v >> (8 * i));
        uint32_t crc = pdr_crc32c(0, c, len - 4);
        for (int i = 0; i < 4; i++)
            c[len - 4 + (size_t)i] = (char)(crc >> (8 * i));
        int rc = pdr_kvsnap_decode(c, len, 1 << 20, &s, msg, sizeof(msg));
        CHECK(rc == edits[k].rc);
        CHECK(strstr(msg, edits[k].what) != NULL);
        if (rc != edits[k].rc || strstr(msg, edits[k].what) == NULL)
            fprintf(stderr, "edit %zu: %d %s\n", k, rc, msg);
    }
    free(c);
    free(buf);
    pdr_kvindex_free(a);
}

static uint64_t rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Seeded random bytes, raw and behind a valid header and checksum, and random rewrites of a valid snapshot
 * with the checksum fixed: decoding never crashes, and whatever decodes imports into a consistent index. */
static void test_random_bytes(void)
{
    pdr_kvindex_t *a = sample();
    char *buf;
    size_t len;
    CHECK(encode(a, 1 << 20, &buf, &len) == 0);
    uint64_t seed = 0x5eed5eed12345678ULL;
    unsigned char r[4096];
    pdr_kvsnap_t s;
    char msg[256];
    size_t decoded = 0;
    for (int trial = 0; trial < 20000; trial++) {
        size_t n = (size_t)(rng(&seed) % sizeof(r));
        int mode = trial % 3;
        if (mode == 2) {
            n = len;
            memcpy(r, buf, len);
            for (int k = 0, m = 1 + (int)(rng(&seed) % 4); k < m; k++)
                r[rng(&seed) % (len - 4)] = (unsigned char)rng(&seed);
        } else {
            for (size_t i = 0; i < n; i++)
                r[i] = (unsigned char)rng(&seed);
            if (mode == 1 && n >= 84)
                memcpy(r, buf, 48); /* a real header up to the counts */
        }
        if (mode != 0 && n >= 4) {
            uint32_t crc = pdr_crc32c(0, r, n - 4);
            for (int i = 0; i < 4; i++)
                r[n - 4 + (size_t)i] = (unsigned char)(crc >> (8 * i));
        }
        if (pdr_kvsnap_decode(r, n, 1 << 20, &s, msg, sizeof(msg)) != 0)
            continue;
        decoded++;
        for (size_t i = 0; i < s.n_workers; i++)
            s.workers[i].id = 1 + i;
        pdr_kvindex_t *b = index_new(1 << 16);
        uint64_t loaded;
        CHECK(pdr_kvindex_import(b, &s, &loaded) == 0);
        uint32_t ids[16];
        prompt(ids, 16, 0);
        uint64_t ws[3] = {1, 2, 3};
        pdr_kvindex_match_t m[3];
        pdr_kvindex_match(b, ids, 16, ws, 3, m);
        pdr_kvindex_stats_t st;
        pdr_kvindex_stats(b, &st);
        CHECK(st.bytes <= st.max_bytes && st.entries <= loaded); /* a repeated engine hash is one entry */
        pdr_kvindex_free(b);
        pdr_kvsnap_free(&s);
    }
    CHECK(decoded > 0); /* rewrites of hashes and sequence numbers still decode */
    free(buf);
    pdr_kvindex_free(a);
}

/* The CRC32C of "123456789" is e3069283 (the check value of the Castagnoli polynomial). */
static void test_crc32c(void)
{
    CHECK(pdr_crc32c(0, "123456789", 9) == 0xe3069283u);
    CHECK(pdr_crc32c(pdr_crc32c(0, "1234", 4), "56789", 5) == 0xe3069283u);
    CHECK(pdr_crc32c(0, "", 0) == 0);
}

/* Workers no one matched at the load are parked; each is loaded, alone, when a worker of its name joins. */
static void test_park(void)
{
    pdr_kvindex_t *a = sample();
    char *buf, msg[256];
    size_t len;
    CHECK(encode(a, 1 << 20, &buf, &len) == 0);
    pdr_kvsnap_t s;
    CHECK(pdr_kvsnap_decode(buf, len, 1 << 20, &s, msg, sizeof(msg)) == 0);
    for (size_t i = 0; i < s.n_workers; i++)
        if (s.workers[i].name_len == strlen(names[1]) &&
            memcmp(s.workers[i].name, names[1], s.workers[i].name_len) == 0)
            s.workers[i].id = 7; /* matched at the load: not parked */
    int nomem, rc;
    pdr_kv_park_t *p = pdr_kv_park_new(&s, &nomem);
    pdr_kvsnap_free(&s);
    free(buf); /* the parked names are copies */
    CHECK(p != NULL && !nomem && pdr_kv_park_workers(p) == 2 && pdr_kv_park_entries(p) == 6);
    pdr_kvindex_t *b = index_new(1 << 20);
    CHECK(pdr_kv_park_adopt(p, b, "http://10.0.0.9:8000", 99, &rc) == 0 && rc == 0);
    CHECK(pdr_kv_park_adopt(p, b, names[1], 99, &rc) == 0); /* not parked */
    CHECK(pdr_kv_park_adopt(p, b, names[0], 100, &rc) == 4 && rc == 0);
    CHECK(pdr_kv_park_workers(p) == 1 && pdr_kv_park_entries(p) == 2 &&
          strcmp(pdr_kv_park_name(p, 0), names[2]) == 0);
    CHECK(pdr_kv_park_adopt(p, b, names[0], 100, &rc) == 0); /* once */
    uint32_t ids[16];
    prompt(ids, 16, 0);
    uint64_t w = 100;
    pdr_kvindex_match_t m;
    pdr_kvindex_match(b, ids, 16, &w, 1, &m);
    CHECK(m.blocks == 4 && m.synced); /* warm: it was in sync when the snapshot was taken */
    CHECK(pdr_kv_park_adopt(p, b, names[2], 102, &rc) == 2 && rc == 0);
    CHECK(pdr_kv_park_workers(p) == 0 && pdr_kv_park_entries(p) == 0);
    pdr_kv_park_free(p);
    pdr_kvindex_free(a);
    pdr_kvindex_free(b);
}

int main(int argc, char **argv)
{
    static const pdr_test_case_t cases[] = {
        {"crc32c", test_crc32c, 10},
        {"round_trip", test_round_trip, 30},
        {"corruption", test_corruption, 60},
        {"random_bytes", test_random_bytes, 120},
        {"park", test_park, 30},
    };
    return PDR_TEST_RUN(cases, argc, argv);
}
