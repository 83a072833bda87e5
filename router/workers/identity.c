/*
 * Worker identities (identity.h): the engines' answers parsed, the compat key, the difference between two
 * identities in words, and the feature's per-pool counters. Parsing runs on loop 0; the counters on any
 * loop (atomics; a pool's slot is claimed once under a mutex).
 */
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include "err.h"
#include "identity.h"

/* A string member into out; "" when absent or null. Returns -1 when it is another type or too long. */
static int get_str(json_t *o, const char *name, char *out, size_t cap)
{
    json_t *v = json_object_get(o, name);
    out[0] = '\0';
    if (v == NULL || json_is_null(v))
        return 0;
    if (!json_is_string(v) || json_string_length(v) >= cap)
        return -1;
    memcpy(out, json_string_value(v), json_string_length(v) + 1);
    return 0;
}

/* An integer member; -1 when absent or null. Returns -1 when it is another type. */
static int get_int(json_t *o, const char *name, int64_t *out)
{
    json_t *v = json_object_get(o, name);
    *out = -1;
    if (v == NULL || json_is_null(v))
        return 0;
    if (!json_is_integer(v))
        return -1;
    *out = (int64_t)json_integer_value(v);
    return 0;
}

static int parse_sglang(json_t *o, pdr_identity_t *id, char *msg, size_t cap)
{
    static const struct {
        const char *name;
        size_t off, cap;
    } strs[] = {
        {"model_path", offsetof(pdr_identity_t, model_path), sizeof(id->model_path)},
        {"revision", offsetof(pdr_identity_t, revision), sizeof(id->revision)},
        {"dtype", offsetof(pdr_identity_t, dtype), sizeof(id->dtype)},
        {"kv_cache_dtype", offsetof(pdr_identity_t, kv_cache_dtype), sizeof(id->kv_cache_dtype)},
        {"disaggregation_transfer_backend", offsetof(pdr_identity_t, backend), sizeof(id->backend)},
    };
    for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++)
        if (get_str(o, strs[i].name, (char *)id + strs[i].off, strs[i].cap) != 0) {
            snprintf(msg, cap, "\"%s\" is not a string of at most %zu bytes", strs[i].name, strs[i].cap - 1);
            return PDR_EINVAL;
        }
    static const struct {
        const char *name;
        size_t off;
    } ints[] = {
        {"page_size", offsetof(pdr_identity_t, page_size)},
        {"tp_size", offsetof(pdr_identity_t, tp_size)},
        {"dp_size", offsetof(pdr_identity_t, dp_size)},
    };
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++)
        if (get_int(o, ints[i].name, (int64_t *)(void *)((char *)id + ints[i].off)) != 0) {
            snprintf(msg, cap, "\"%s\" is not an integer", ints[i].name);
            return PDR_EINVAL;
        }
    return 0;
}

/* vLLM's model list: the first model's root (the path it loaded), else its id. */
static int parse_vllm(json_t *o, pdr_identity_t *id, char *msg, size_t cap)
{
    json_t *data = json_object_get(o, "data");
    json_t *m = json_is_array(data) ? json_array_get(data, 0) : NULL;
    if (!json_is_object(m)) {
        snprintf(msg, cap, "no model in \"data\"");
        return PDR_EINVAL;
    }
    if (get_str(m, "root", id->model_path, sizeof(id->model_path)) != 0 ||
        (id->model_path[0] == '\0' && get_str(m, "id", id->model_path, sizeof(id->model_path)) != 0)) {
        snprintf(msg, cap, "the model's \"root\" or \"id\" is not a string of at most %zu bytes",
                 sizeof(id->model_path) - 1);
        return PDR_EINVAL;
    }
    return 0;
}

int pdr_identity_parse(int engine, const char *body, size_t len, pdr_identity_t *id, char *msg, size_t cap)
{
    memset(id, 0, sizeof(*id));
    id->engine = engine;
    id->page_size = id->tp_size = id->dp_size = -1;
    msg[0] = '\0';
    json_error_t je;
    json_t *o = json_loadb(body, len, 0, &je);
    if (!json_is_object(o)) {
        snprintf(msg, cap, "the answer is not a JSON object");
        json_decref(o);
        return PDR_EINVAL;
    }
    int rc = engine == PDR_IDENTITY_VLLM ? parse_vllm(o, id, msg, cap) : parse_sglang(o, id, msg, cap);
    json_decref(o);
    if (rc == 0 && id->model_path[0] == '\0') {
        snprintf(msg, cap, "no model path in the answer");
        rc = PDR_EINVAL;
    }
    if (rc == 0)
        id->key = pdr_identity_key(id);
    return rc;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 1099511628211u; /* FNV-1a 64-bit prime */
    }
    return h;
}

uint64_t pdr_identity_key(const pdr_identity_t *id)
{
    uint64_t h = 14695981039346656037u; /* FNV-1a 64-bit offset basis */
    const char *strs[] = {id->model_path, id->revision, id->dtype, id->kv_cache_dtype, id->backend};
    int64_t ints[] = {id->engine, id->page_size, id->tp_size};
    for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++)
        h = fnv(h, strs[i], strlen(strs[i]) + 1); /* the NUL separates the fields */
    h = fnv(h, ints, sizeof(ints));
    return h != 0 && h != PDR_COMPAT_KEY_NONE ? h : 1;
}

int pdr_identity_diff(const pdr_identity_t *a, const pdr_identity_t *b, char *out, size_t cap)
{
    static const char *const engines[] = {"sglang", "vllm"};
    out[0] = '\0';
    if (a->engine != b->engine) {
        snprintf(out, cap, "engine %s vs %s", engines[a->engine != 0], engines[b->engine != 0]);
        return 1;
    }
    const struct {
        const char *name, *x, *y;
    } strs[] = {
        {"model_path", a->model_path, b->model_path},
        {"revision", a->revision, b->revision},
        {"kv_cache_dtype", a->kv_cache_dtype, b->kv_cache_dtype},
        {"dtype", a->dtype, b->dtype},
        {"disaggregation_transfer_backend", a->backend, b->backend},
    };
    for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++)
        if (strcmp(strs[i].x, strs[i].y) != 0) {
            snprintf(out, cap, "%s %s vs %s", strs[i].name, strs[i].x[0] ? strs[i].x : "(none)",
                     strs[i].y[0] ? strs[i].y : "(none)");
            return 1;
        }
    const struct {
        const char *name;
        int64_t x, y;
    } ints[] = {{"page_size", a->page_size, b->page_size}, {"tp_size", a->tp_size, b->tp_size}};
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++)
        if (ints[i].x != ints[i].y) {
            snprintf(out, cap, "%s %" PRId64 " vs %" PRId64, ints[i].name, ints[i].x, ints[i].y);
            return 1;
        }
    return 0;
}

void pdr_identity_group(uint64_t key, char out[17])
{
    if (key == 0)
        out[0] = '\0';
    else
        snprintf(out, 17, "%016" PRIx64, key);
}

/* ---- counters ---- */

/* PDR_CONFIG_MAX_POOLS: a pool name beyond it (after reloads that renamed pools) counts under "other". */
#define COMPAT_POOLS 64
static struct {
    char name[64];
    uint64_t n[PDR_COMPAT__COUNT]; /* atomic */
} slots[COMPAT_POOLS + 1];
static uint32_t n_slots; /* atomic: slots below it have their name written */
static pthread_mutex_t slot_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t reads[2]; /* atomic: ok, failed */

static int slot_of(const char *pool)
{
    if (pool == NULL)
        pool = "default";
    uint32_t n = __atomic_load_n(&n_slots, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(slots[i].name, pool) == 0)
            return (int)i;
    pthread_mutex_lock(&slot_lock);
    n = n_slots;
    int k = -1;
    for (uint32_t i = 0; i < n && k < 0; i++)
        if (strcmp(slots[i].name, pool) == 0)
            k = (int)i;
    if (k < 0 && n < COMPAT_POOLS) {
        snprintf(slots[n].name, sizeof(slots[n].name), "%s", pool);
        __atomic_store_n(&n_slots, n + 1, __ATOMIC_RELEASE);
        k = (int)n;
    }
    pthread_mutex_unlock(&slot_lock);
    return k >= 0 ? k : COMPAT_POOLS;
}

void pdr_compat_count(const char *pool, int what)
{
    if (what >= 0 && what < PDR_COMPAT__COUNT)
        __atomic_add_fetch(&slots[slot_of(pool)].n[what], 1, __ATOMIC_RELAXED);
}

void pdr_compat_count_read(int failed)
{
    __atomic_add_fetch(&reads[failed != 0], 1, __ATOMIC_RELAXED);
}

void pdr_compat_render_metrics(const char (*pools)[64], size_t n_pools, pdr_compat_put_cb put, void *out)
{
    for (size_t i = 0; i < n_pools; i++)
        (void)slot_of(pools[i]);
    static const char *const fam[PDR_COMPAT__COUNT][2] = {
        {"pdr_incompatible_pairs_total",
         "PD requests refused because no prefill/decode pair of their pool had compatible identities."},
        {"pdr_compat_repicks_total",
         "Pair picks whose first prefill had no compatible decode and another prefill was paired instead."},
        {"pdr_compat_unknown_pairs_total",
         "Pairs made with a worker whose identity was not known (compat.unknown: allow)."},
    };
    uint32_t n = __atomic_load_n(&n_slots, __ATOMIC_ACQUIRE);
    for (int f = 0; f < PDR_COMPAT__COUNT; f++) {
        put(out, "# HELP %s %s\n# TYPE %s counter\n", fam[f][0], fam[f][1], fam[f][0]);
        for (uint32_t i = 0; i < n; i++)
            put(out, "%s{pool=\"%s\"} %llu\n", fam[f][0], slots[i].name,
                (unsigned long long)__atomic_load_n(&slots[i].n[f], __ATOMIC_RELAXED));
        uint64_t other = __atomic_load_n(&slots[COMPAT_POOLS].n[f], __ATOMIC_RELAXED);
        if (other > 0)
            put(out, "%s{pool=\"other\"} %llu\n", fam[f][0], (unsigned long long)other);
    }
    put(out,
        "# HELP pdr_worker_identity_reads_total Reads of the workers' identities by result.\n"
        "# TYPE pdr_worker_identity_reads_total counter\n"
        "pdr_worker_identity_reads_total{result=\"ok\"} %llu\n"
        "pdr_worker_identity_reads_total{result=\"failed\"} %llu\n",
        (unsigned long long)__atomic_load_n(&reads[0], __ATOMIC_RELAXED),
        (unsigned long long)__atomic_load_n(&reads[1], __ATOMIC_RELAXED));
}
