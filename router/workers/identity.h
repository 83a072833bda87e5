/*
 * A worker's identity: what its engine reports of the model it serves and of the layout of its KV cache,
 * and the compat key hashed from the fields that decide that layout. A prefill and a decode are paired
 * only when their keys agree (compat.enabled): a decode that reads KV laid out for another model, revision,
 * page size, tensor-parallel split or cache dtype answers with garbage, not an error.
 *
 * The fields are read off the request path by loop 0 (router/fleet/identify.c): sglang's
 * GET /get_server_info (its server arguments by their own names), vLLM's GET /v1/models (the model's id and
 * root; vLLM does not expose its KV transfer configuration, dtypes, block size or parallel sizes there).
 * Parsing and hashing here are pure; the pool stores a worker's identity (pool.h).
 *
 * Also the per-pool counters of the feature (pdr_incompatible_pairs_total and the others): slots claimed
 * by pool name on first use, atomics after that. Any thread.
 */
#ifndef PDR_IDENTITY_H
#define PDR_IDENTITY_H

#include <stddef.h>
#include <stdint.h>

/* The engines' answers carry every server argument: 256 KiB is far above sglang's (a few KiB). */
#define PDR_IDENTITY_BODY_CAP ((size_t)256 << 10)

enum { PDR_IDENTITY_SGLANG = 0, PDR_IDENTITY_VLLM = 1 };

typedef struct pdr_identity {
    int engine;           /* PDR_IDENTITY_* */
    char model_path[256]; /* sglang model_path; vLLM the model's root (else its id) */
    char revision[96];    /* sglang revision; "" when null or not reported */
    char dtype[32];       /* "" when not reported */
    char kv_cache_dtype[32];
    char backend[32];  /* sglang disaggregation_transfer_backend */
    int64_t page_size; /* -1 when not reported (null) */
    int64_t tp_size;
    int64_t dp_size; /* shown, not part of the key: each rank holds its own KV */
    uint64_t key;    /* the compat key: never 0 once computed */
} pdr_identity_t;

/* Fills *id from an engine's answer (body, len) and computes its key. Returns 0, or PDR_EINVAL with a
 * reason in msg when the answer is not the engine's shape (not JSON, no model). */
int pdr_identity_parse(int engine, const char *body, size_t len, pdr_identity_t *id, char *msg, size_t cap);
/* The key of the fields that decide the KV layout (engine, model path, revision, page size, tp size, dtype,
 * kv cache dtype, transfer backend): FNV-1a over them; never 0 or PDR_COMPAT_KEY_NONE. */
uint64_t pdr_identity_key(const pdr_identity_t *id);
/* The first field that tells a from b, as "kv_cache_dtype fp8 vs auto", into out. Returns 1 when one
 * differs, else 0 (out ""). */
int pdr_identity_diff(const pdr_identity_t *a, const pdr_identity_t *b, char *out, size_t cap);
/* The compat group's text: the key in 16 hex digits, "" for 0 (unknown). */
void pdr_identity_group(uint64_t key, char out[17]);

/* What a pick may take, beside the policy: a compat key (0: any known identity; PDR_COMPAT_KEY_NONE: no
 * known one) and whether a worker whose identity is unknown is taken (key 0 with unknown_ok: any worker);
 * and the request's session affinity (affinity.h): its mode (pdr_affinity_mode_t, 0: off), whether it names
 * a session, its key, soft mode's bound and where the pick writes its outcome. */
#define PDR_COMPAT_KEY_NONE UINT64_MAX
typedef struct pdr_pick_filter {
    uint64_t key;
    int unknown_ok;
    int affinity;
    int has_session;
    uint64_t session;
    double max_load_ratio;
    int *outcome; /* out, with affinity on: the pick's outcome (PDR_AFFINITY_* of affinity.h); NULL: none */
} pdr_pick_filter_t;
static inline int pdr_pick_filter_ok(const pdr_pick_filter_t *f, uint64_t key)
{
    return key == 0 ? f->unknown_ok : f->key == 0 || f->key == key;
}

/* The per-pool counters. */
enum {
    PDR_COMPAT_INCOMPATIBLE = 0, /* no compatible pair: the request was refused */
    PDR_COMPAT_REPICKED,         /* the first prefill had no compatible decode; another prefill's did */
    PDR_COMPAT_UNKNOWN_PAIRED,   /* a pair made with a worker of unknown identity (compat.unknown: allow) */
    PDR_COMPAT__COUNT
};
void pdr_compat_count(const char *pool, int what);
/* Identity reads by result (0 ok, 1 failed): loop 0. */
void pdr_compat_count_read(int failed);
typedef void (*pdr_compat_put_cb)(void *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The families of the feature (docs/metrics.md), through put. pools: the configured names (their series
 * exist at 0 from the start). */
void pdr_compat_render_metrics(const char (*pools)[64], size_t n_pools, pdr_compat_put_cb put, void *out);

#endif
