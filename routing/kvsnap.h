/*
 * Snapshots of the precise prefix index (docs/internals/routing.md, "Snapshots of the index"): the index's
 * content as plain arrays (pdr_kvindex_export, pdr_kvindex_import in kvindex_export.c) and their versioned,
 * checksummed binary encoding (kvindex_snapshot.c). No I/O: the router reads and writes the files and
 * serves the bytes on its admin port.
 */
#ifndef PDR_KVSNAP_H
#define PDR_KVSNAP_H

#include <stddef.h>
#include <stdint.h>

#include "kvevents.h"

/* "PDRKVIX" and a NUL; the version of the layout below. */
#define PDR_KVSNAP_MAGIC "PDRKVIX"
#define PDR_KVSNAP_VERSION 1u
/* A worker's name (its URL, the router's stable name for it across restarts) is at most this long. */
#define PDR_KVSNAP_NAME_MAX 1024u
/* Workers one snapshot may name: the configuration's 4096 a role (PDR_CONFIG_MAX_WORKERS) for both roles,
 * each with up to 2 data-parallel ranks on average; the index finds a worker by a linear search. */
#define PDR_KVSNAP_MAX_WORKERS 16384u
/* Distinct block sizes a snapshot lists in its header. */
#define PDR_KVSNAP_MAX_SIZES 8u

typedef struct pdr_kvsnap_worker {
    const char *name; /* export: NULL (the caller names it); decode: into the decoded buffer, not NUL-ended */
    size_t name_len;
    uint64_t id; /* export: the index's worker id; import: the id to load it under (0: skip the worker) */
    uint64_t last_seq;
    uint32_t block_size; /* 0: none stored yet */
    uint64_t g0_kind;    /* the kind its KV cache group 0 last announced (its lookups' namespace) */
    int synced;
    int seen; /* a message was applied (last_seq means something) */
} pdr_kvsnap_worker_t;

typedef struct pdr_kvsnap_entry {
    uint32_t worker; /* index into the workers */
    uint64_t hash;   /* the router's chained hash of the block (pdr_kvindex_block_hash) */
    uint64_t ehash;  /* the engine's hash, as the index folds it */
} pdr_kvsnap_entry_t;

typedef struct pdr_kvsnap {
    uint64_t created_ms; /* the writer's wall clock */
    /* The LoRA adapters' names (folded) the events named: a lookup for a request naming one walks its
     * namespace (pdr_kvindex_match_model). */
    uint64_t adapters[PDR_KVINDEX_MAX_ADAPTERS];
    size_t n_adapters;
    pdr_kvsnap_worker_t *workers;
    size_t n_workers;
    pdr_kvsnap_entry_t *entries; /* least recently stored first (the index's LRU order) */
    size_t n_entries;
} pdr_kvsnap_t;

/* Frees what export or decode allocated (the arrays; never the decoded buffer the names point into). */
void pdr_kvsnap_free(pdr_kvsnap_t *s);

/* Bytes of the index's memory one entry costs at least (its residency): the decode's bound on the count. */
size_t pdr_kvindex_entry_bytes(void);

/* Copies the index's workers and entries under its lock (one walk of the LRU queue). 0 or PDR_ENOMEM. */
int pdr_kvindex_export(pdr_kvindex_t *ix, pdr_kvsnap_t *out);

/*
 * Loads s into ix: each worker whose id is non-zero, of which the snapshot had seen a message (seen), and
 * which the index does not know yet gets the snapshot's sequence number and block size, and its entries
 * in the snapshot's LRU order. A worker that was synced when the snapshot was taken is warm
 * (pdr_kvindex_worker_stats_t.warm); the others are unsynced. *loaded (may be NULL) counts the entries
 * loaded. 0, PDR_EINVAL (an entry names no worker) or PDR_ENOMEM (what was loaded stays, consistent).
 */
int pdr_kvindex_import(pdr_kvindex_t *ix, const pdr_kvsnap_t *s, uint64_t *loaded);

/* CRC32C (Castagnoli, reflected, as iSCSI and ext4 use) of p[0..n), continuing crc (0 to start). */
uint32_t pdr_crc32c(uint32_t crc, const void *p, size_t n);

/*
 * Encodes s (names set) into a malloc'd buffer (*out, free). PDR_ETOOBIG when it would exceed max_bytes or
 * name more than PDR_KVSNAP_MAX_WORKERS workers, PDR_EINVAL for a name over PDR_KVSNAP_NAME_MAX or not
 * printable ASCII, an entry naming no worker or more than PDR_KVSNAP_MAX_SIZES block sizes, PDR_ENOMEM.
 * msg gets the reason.
 */
int pdr_kvsnap_encode(const pdr_kvsnap_t *s, uint64_t max_bytes, char **out, size_t *len, char *msg,
                      size_t cap);

/*
 * Verifies and decodes buf[0..len) for an index of max_bytes; nothing is allocated unless every check
 * passed. The names point into buf (printable ASCII, not NUL-ended). Returns 0; PDR_EPROTO (corrupt:
 * truncated, bad magic, checksum, structure); PDR_ENOTSUP (another version of the format); PDR_ECONFIG
 * (written by a router that hashes blocks another way); PDR_ETOOBIG (more than an index of max_bytes holds);
 * PDR_ENOMEM. msg names what is wrong.
 */
int pdr_kvsnap_decode(const void *buf, size_t len, uint64_t max_bytes, pdr_kvsnap_t *out, char *msg,
                      size_t cap);

#endif
