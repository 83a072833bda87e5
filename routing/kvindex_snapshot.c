/*
 * The binary encoding of a precise prefix index snapshot (kvsnap.h; docs/internals/routing.md,
 * "Snapshots of the index"). Pure functions of their arguments, any thread.
 *
 * Layout, every integer little-endian:
 *
 *   header (88 bytes)   magic "PDRKVIX\0" (8), version (4), header bytes (4), created_ms (8),
 *                       hash probe (8: pdr_kvindex_block_hash of a fixed block in a fixed namespace, so
 *                       that a router that chains blocks another way refuses the file), workers (4),
 *                       block sizes (4), entries (8), the block sizes (8 x 4, unused ones 0), adapters
 *                       (4), zero (4)
 *   adapters            the LoRA adapters' folded names the index knows (8 each, none 0)
 *   workers             per worker: name length (2), name (its URL), last sequence number (8),
 *                       block size (4), its group 0's kind (8), flags (1: bit 0 synced, bit 1 seen)
 *   entries             per (worker, block), least recently stored first: worker (4), the router's
 *                       chained block hash (8), the engine's hash (8)
 *   checksum            CRC32C of every byte before it (4)
 *
 * The decoder checks, in this order and before allocating anything: the length against the ceiling
 * (max_bytes) and the fixed parts, the magic, the version, the checksum, the header's own fields, the
 * counts against what an index of max_bytes holds, then every record; the counts must account for every
 * byte exactly, and the block sizes are listed in the order the workers first use them: a snapshot has
 * one encoding, which re-encoding what it decodes gives back (the fuzz target checks it).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "kvsnap.h"

#define HDR_BYTES 88u
#define WORKER_FIXED 23u /* name length, last sequence number, block size, group 0's kind, flags */
#define ENTRY_BYTES 20u
#define CRC_BYTES 4u
#define FLAG_SYNCED 1u
#define FLAG_SEEN 2u
/* 4096: the largest block size the KV event decoder accepts (kvevents.c). */
#define BLOCK_SIZE_MAX 4096u

static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1; /* Castagnoli's polynomial, reflected */
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
}

uint32_t pdr_crc32c(uint32_t crc, const void *p, size_t n)
{
    pthread_once(&crc_once, crc_init);
    const unsigned char *b = p;
    crc = ~crc;
    /* Eight bytes a step (slicing by 8): a snapshot of the default cap is about 12 MiB. */
    while (n >= 8) {
        uint32_t lo =
            crc ^ ((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24);
        crc = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^ crc_table[5][(lo >> 16) & 0xff] ^
              crc_table[4][lo >> 24] ^ crc_table[3][b[4]] ^ crc_table[2][b[5]] ^ crc_table[1][b[6]] ^
              crc_table[0][b[7]];
        b += 8;
        n -= 8;
    }
    while (n-- > 0)
        crc = crc_table[0][(crc ^ *b++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

/* The chained hash of the block 1, 2, 3, 4 in the namespace of adapter 1, group 2, kind 3: two routers agree
 * on it when they hash blocks and namespaces alike. */
static uint64_t hash_probe(void)
{
    static const uint32_t ids[4] = {1, 2, 3, 4};
    return pdr_kvindex_block_hash(pdr_kvindex_namespace(1, 2, 3), ids, 4);
}

static void put16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint16_t get16(const unsigned char *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const unsigned char *p)
{
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

/* A name is printable ASCII without spaces (a URL): it goes into log lines as it is. */
static int name_ok(const char *p, size_t n)
{
    if (n == 0 || n > PDR_KVSNAP_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (p[i] <= 0x20 || p[i] >= 0x7f)
            return 0;
    return 1;
}

void pdr_kvsnap_free(pdr_kvsnap_t *s)
{
    free(s->workers);
    free(s->entries);
    s->workers = NULL;
    s->entries = NULL;
    s->n_workers = s->n_entries = s->n_adapters = 0;
}

int pdr_kvsnap_encode(const pdr_kvsnap_t *s, uint64_t max_bytes, char **out, size_t *len, char *msg,
                      size_t cap)
{
    uint32_t sizes[PDR_KVSNAP_MAX_SIZES] = {0};
    uint32_t nsizes = 0;
    uint64_t total =
        HDR_BYTES + (uint64_t)s->n_adapters * 8 + (uint64_t)s->n_entries * ENTRY_BYTES + CRC_BYTES;
    if (s->n_adapters > PDR_KVINDEX_MAX_ADAPTERS) {
        snprintf(msg, cap, "%zu adapters, at most %u", s->n_adapters, PDR_KVINDEX_MAX_ADAPTERS);
        return PDR_EINVAL;
    }
    if (s->n_workers > PDR_KVSNAP_MAX_WORKERS) {
        snprintf(msg, cap, "%zu workers, at most %u", s->n_workers, PDR_KVSNAP_MAX_WORKERS);
        return PDR_ETOOBIG;
    }
    for (size_t i = 0; i < s->n_workers; i++) {
        const pdr_kvsnap_worker_t *w = &s->workers[i];
        if (w->name == NULL || w->name_len == 0 || w->name_len > PDR_KVSNAP_NAME_MAX) {
            snprintf(msg, cap, "worker %zu: a name of %zu bytes (1..%u)", i, w->name_len,
                     PDR_KVSNAP_NAME_MAX);
            return PDR_EINVAL;
        }
        total += WORKER_FIXED + w->name_len;
        if (w->block_size == 0)
            continue;
        uint32_t k = 0;
        while (k < nsizes && sizes[k] != w->block_size)
            k++;
        if (k == nsizes) {
            if (nsizes == PDR_KVSNAP_MAX_SIZES) {
                snprintf(msg, cap, "more than %u distinct block sizes", PDR_KVSNAP_MAX_SIZES);
                return PDR_EINVAL;
            }
            sizes[nsizes++] = w->block_size;
        }
    }
    if (total > max_bytes) {
        snprintf(msg, cap, "%" PRIu64 " bytes, over the ceiling of %" PRIu64 " (kv_events.max_index_bytes)",
                 total, max_bytes);
        return PDR_ETOOBIG;
    }
    unsigned char *b = malloc((size_t)total), *p = b;
    if (b == NULL) {
        snprintf(msg, cap, "out of memory for %" PRIu64 " bytes", total);
        return PDR_ENOMEM;
    }
    memcpy(p, PDR_KVSNAP_MAGIC, 8);
    put32(p + 8, PDR_KVSNAP_VERSION);
    put32(p + 12, HDR_BYTES);
    put64(p + 16, s->created_ms);
    put64(p + 24, hash_probe());
    put32(p + 32, (uint32_t)s->n_workers);
    put32(p + 36, nsizes);
    put64(p + 40, s->n_entries);
    for (uint32_t k = 0; k < PDR_KVSNAP_MAX_SIZES; k++)
        put32(p + 48 + 4 * k, sizes[k]);
    put32(p + 80, (uint32_t)s->n_adapters);
    put32(p + 84, 0);
    p += HDR_BYTES;
    for (size_t i = 0; i < s->n_adapters; i++, p += 8)
        put64(p, s->adapters[i]);
    for (size_t i = 0; i < s->n_workers; i++) {
        const pdr_kvsnap_worker_t *w = &s->workers[i];
        put16(p, (uint16_t)w->name_len);
        memcpy(p + 2, w->name, w->name_len);
        p += 2 + w->name_len;
        put64(p, w->last_seq);
        put32(p + 8, w->block_size);
        put64(p + 12, w->g0_kind);
        p[20] = (unsigned char)((w->synced ? FLAG_SYNCED : 0) | (w->seen ? FLAG_SEEN : 0));
        p += 21;
    }
    for (size_t i = 0; i < s->n_entries; i++) {
        const pdr_kvsnap_entry_t *e = &s->entries[i];
        if (e->worker >= s->n_workers) {
            free(b);
            snprintf(msg, cap, "entry %zu names worker %" PRIu32 " of %zu", i, e->worker, s->n_workers);
            return PDR_EINVAL;
        }
        put32(p, e->worker);
        put64(p + 4, e->hash);
        put64(p + 12, e->ehash);
        p += ENTRY_BYTES;
    }
    put32(p, pdr_crc32c(0, b, (size_t)(p - b)));
    *out = (char *)b;
    *len = (size_t)total;
    return 0;
}

int pdr_kvsnap_decode(const void *buf, size_t len, uint64_t max_bytes, pdr_kvsnap_t *out, char *msg,
                      size_t cap)
{
    const unsigned char *b = buf;
    memset(out, 0, sizeof(*out));
    if (len > max_bytes) {
        snprintf(msg, cap, "%zu bytes, over the ceiling of %" PRIu64 " (kv_events.max_index_bytes)", len,
                 max_bytes);
        return PDR_ETOOBIG;
    }
    if (len < HDR_BYTES + CRC_BYTES) {
        snprintf(msg, cap, "truncated: %zu bytes, shorter than a header and a checksum (%u)", len,
                 HDR_BYTES + CRC_BYTES);
        return PDR_EPROTO;
    }
    if (memcmp(b, PDR_KVSNAP_MAGIC, 8) != 0) {
        snprintf(msg, cap, "bad magic: not a precise prefix index snapshot");
        return PDR_EPROTO;
    }
    if (get32(b + 8) != PDR_KVSNAP_VERSION) {
        snprintf(msg, cap, "format version %" PRIu32 ", this router reads version %u", get32(b + 8),
                 PDR_KVSNAP_VERSION);
        return PDR_ENOTSUP;
    }
    uint32_t want = get32(b + len - CRC_BYTES), got = pdr_crc32c(0, b, len - CRC_BYTES);
    if (want != got) {
        snprintf(msg, cap,
                 "checksum mismatch (stored %08" PRIx32 ", computed %08" PRIx32 "): corrupt or truncated",
                 want, got);
        return PDR_EPROTO;
    }
    if (get32(b + 12) != HDR_BYTES) {
        snprintf(msg, cap, "a header of %" PRIu32 " bytes, expected %u", get32(b + 12), HDR_BYTES);
        return PDR_EPROTO;
    }
    if (get64(b + 24) != hash_probe()) {
        snprintf(msg, cap,
                 "written by a router that hashes blocks another way (probe %016" PRIx64 ", ours %016" PRIx64
                 ")",
                 get64(b + 24), hash_probe());
        return PDR_ECONFIG;
    }
    uint64_t nw = get32(b + 32), nsizes = get32(b + 36), ne = get64(b + 40);
    uint32_t sizes[PDR_KVSNAP_MAX_SIZES];
    if (nsizes > PDR_KVSNAP_MAX_SIZES) {
        snprintf(msg, cap, "%" PRIu64 " block sizes, at most %u", nsizes, PDR_KVSNAP_MAX_SIZES);
        return PDR_EPROTO;
    }
    for (uint32_t k = 0; k < PDR_KVSNAP_MAX_SIZES; k++) {
        sizes[k] = get32(b + 48 + 4 * k);
        if ((k < nsizes) != (sizes[k] != 0) || sizes[k] > BLOCK_SIZE_MAX) {
            snprintf(msg, cap, "block size slot %u holds %" PRIu32 " (%" PRIu64 " sizes listed)", k, sizes[k],
                     nsizes);
            return PDR_EPROTO;
        }
    }
    uint64_t na = get32(b + 80);
    if (na > PDR_KVINDEX_MAX_ADAPTERS || get32(b + 84) != 0) {
        snprintf(msg, cap, "%" PRIu64 " adapters (at most %u), or a reserved field not zero", na,
                 PDR_KVINDEX_MAX_ADAPTERS);
        return PDR_EPROTO;
    }
    if (ne > max_bytes / pdr_kvindex_entry_bytes() || nw > PDR_KVSNAP_MAX_WORKERS) {
        snprintf(msg, cap,
                 "%" PRIu64 " entries of %" PRIu64 " workers: more than an index of %" PRIu64
                 " bytes (kv_events.max_index_bytes) holds, or more than %u workers",
                 ne, nw, max_bytes, PDR_KVSNAP_MAX_WORKERS);
        return PDR_ETOOBIG;
    }
    /* The counts must fit the bytes before anything is allocated for them. */
    size_t body = len - HDR_BYTES - CRC_BYTES;
    if (na * 8 + nw * (WORKER_FIXED + 1) + ne * ENTRY_BYTES > body) {
        snprintf(msg, cap, "%" PRIu64 " workers and %" PRIu64 " entries do not fit in %zu bytes", nw, ne,
                 body);
        return PDR_EPROTO;
    }
    const unsigned char *p = b + HDR_BYTES, *end = b + len - CRC_BYTES;
    out->workers = calloc((size_t)nw + 1, sizeof(*out->workers));
    out->entries = malloc(((size_t)ne + 1) * sizeof(*out->entries));
    if (out->workers == NULL || out->entries == NULL) {
        pdr_kvsnap_free(out);
        snprintf(msg, cap, "out of memory for %" PRIu64 " entries", ne);
        return PDR_ENOMEM;
    }
    int rc = PDR_EPROTO;
    uint32_t nused = 0;
    for (size_t i = 0; i < na; i++, p += 8) {
        if ((out->adapters[i] = get64(p)) == 0) {
            snprintf(msg, cap, "adapter %zu: 0 is no adapter's name", i);
            goto fail;
        }
    }
    out->n_adapters = (size_t)na;
    for (size_t i = 0; i < nw; i++) {
        pdr_kvsnap_worker_t *w = &out->workers[i];
        if ((size_t)(end - p) < 2) {
            snprintf(msg, cap, "worker %zu: truncated", i);
            goto fail;
        }
        w->name_len = get16(p);
        if ((size_t)(end - p) < 2 + w->name_len + 21 || !name_ok((const char *)p + 2, w->name_len)) {
            snprintf(msg, cap, "worker %zu: a name of %zu bytes (1..%u of printable ASCII) or truncated", i,
                     w->name_len, PDR_KVSNAP_NAME_MAX);
            goto fail;
        }
        w->name = (const char *)p + 2;
        p += 2 + w->name_len;
        w->last_seq = get64(p);
        w->block_size = get32(p + 8);
        w->g0_kind = get64(p + 12);
        unsigned flags = p[20];
        p += 21;
        if (flags & ~(FLAG_SYNCED | FLAG_SEEN)) {
            snprintf(msg, cap, "worker %zu: unknown flags %#x", i, flags);
            goto fail;
        }
        w->synced = (flags & FLAG_SYNCED) != 0;
        w->seen = (flags & FLAG_SEEN) != 0;
        /* The header lists the sizes in the order the workers first use them, each once: one encoding. */
        int listed = w->block_size == 0;
        for (uint32_t k = 0; k < nused && !listed; k++)
            listed = sizes[k] == w->block_size;
        if (!listed && (nused == nsizes || sizes[nused] != w->block_size)) {
            snprintf(msg, cap, "worker %zu: block size %" PRIu32 " not in the header's list (in order)", i,
                     w->block_size);
            goto fail;
        }
        nused += !listed;
    }
    if (nused != nsizes) {
        snprintf(msg, cap, "the header lists %" PRIu64 " block sizes, the workers use %" PRIu32, nsizes,
                 nused);
        goto fail;
    }
    if ((uint64_t)(end - p) != ne * ENTRY_BYTES) {
        snprintf(msg, cap, "%zu bytes of entries, %" PRIu64 " entries need %" PRIu64, (size_t)(end - p), ne,
                 ne * ENTRY_BYTES);
        goto fail;
    }
    for (size_t i = 0; i < ne; i++, p += ENTRY_BYTES) {
        pdr_kvsnap_entry_t *e = &out->entries[i];
        e->worker = get32(p);
        e->hash = get64(p + 4);
        e->ehash = get64(p + 12);
        if (e->worker >= nw || out->workers[e->worker].block_size == 0) {
            snprintf(msg, cap,
                     "entry %zu names worker %" PRIu32 " (%" PRIu64 " workers, or one without blocks)", i,
                     e->worker, nw);
            goto fail;
        }
    }
    out->created_ms = get64(b + 16);
    out->n_workers = (size_t)nw;
    out->n_entries = (size_t)ne;
    return 0;
fail:
    pdr_kvsnap_free(out);
    return rc;
}
