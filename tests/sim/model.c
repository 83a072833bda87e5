/*
 * The deterministic model of pdsim. Pure functions, any thread.
 *
 * Invariant: the output text is a function of the KV bytes only (through pdsim_kv_digest), and the KV
 * bytes are a function of the prompt token ids, the bytes per token and the KV layout (the identity
 * /get_server_info reports). So a decode that received its KV intact from a prefill of its own layout
 * produces exactly what --role both produces, and a lost, partial or misrouted transfer, or KV from a
 * prefill of another layout (another model, revision, dtype, page size...), changes the text.
 */
#include <string.h>
#include <stdlib.h>
#include "err.h"
#include "pdsim.h"
#include "tokenizer.h"

/* 64 fixed output words. */
static const char *const vocab[64] = {
    "alpha",   "bravo",  "charlie", "delta",    "echo",   "foxtrot", "golf",   "hotel",  "india",   "juliet",
    "kilo",    "lima",   "mike",    "november", "oscar",  "papa",    "quebec", "romeo",  "sierra",  "tango",
    "uniform", "victor", "whiskey", "xray",     "yankee", "zulu",    "red",    "orange", "yellow",  "green",
    "blue",    "indigo", "violet",  "amber",    "silver", "gold",    "copper", "iron",   "stone",   "river",
    "ocean",   "cloud",  "storm",   "rain",     "snow",   "wind",    "fire",   "earth",  "light",   "shadow",
    "north",   "south",  "east",    "west",     "spring", "summer",  "autumn", "winter", "morning", "evening",
    "night",   "day",    "moon",    "sun"};

/* 64-bit FNV-1a (offset basis and prime from the FNV specification). */
uint64_t pdsim_fnv1a(const void *p, size_t len)
{
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < len; i++) {
        h ^= s[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* The splitmix64 finalizer (Steele, Lea, Flood 2014). */
uint64_t pdsim_mix64(uint64_t x)
{
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static uint64_t splitmix64(uint64_t *state)
{
    *state += 0x9e3779b97f4a7c15ULL;
    return pdsim_mix64(*state);
}

int pdsim_toks_push(pdsim_toks_t *t, int64_t id)
{
    if (t->n == t->cap) {
        size_t ncap = t->cap ? t->cap * 2 : 64;
        int64_t *n = realloc(t->ids, ncap * sizeof(*n));
        if (n == NULL)
            return PDR_ENOMEM;
        t->ids = n;
        t->cap = ncap;
    }
    t->ids[t->n++] = id;
    return 0;
}

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* --tokenizer: set once at start, read-only afterwards (pdr_tokenizer_encode is thread-safe). */
static const pdr_tokenizer_t *sim_tokenizer;

void pdsim_set_tokenizer(const pdr_tokenizer_t *tok)
{
    sim_tokenizer = tok;
}

int pdsim_tokenize(pdsim_toks_t *t, const char *s, size_t len)
{
    if (sim_tokenizer != NULL) {
        uint32_t *ids;
        size_t n;
        int r = pdr_tokenizer_encode(sim_tokenizer, s, len, &ids, &n);
        if (r != 0)
            return r;
        for (size_t k = 0; k < n && r == 0; k++)
            r = pdsim_toks_push(t, (int64_t)ids[k]);
        free(ids);
        return r;
    }
    size_t i = 0;
    while (i < len) {
        while (i < len && is_space(s[i]))
            i++;
        size_t b = i;
        while (i < len && !is_space(s[i]))
            i++;
        if (i > b && pdsim_toks_push(t, (int64_t)(pdsim_fnv1a(s + b, i - b) % PDSIM_VOCAB)) != 0)
            return PDR_ENOMEM;
    }
    return 0;
}

int pdsim_toks_finish(pdsim_toks_t *t)
{
    if (t->n > 0)
        return 0;
    return pdsim_toks_push(t, (int64_t)(pdsim_fnv1a("", 0) % PDSIM_VOCAB));
}

void pdsim_toks_free(pdsim_toks_t *t)
{
    free(t->ids);
    t->ids = NULL;
    t->n = t->cap = 0;
}

void pdsim_kv_fill(const int64_t *ids, size_t n, size_t bpt, uint64_t layout, uint8_t *out)
{
    uint64_t h = 0x6a09e667f3bcc908ULL ^ layout; /* sqrt(2) bits, as in SHA-512's IV */
    for (size_t i = 0; i < n; i++) {
        h = pdsim_mix64(h ^ (uint64_t)ids[i]);
        uint64_t st = h;
        uint8_t *p = out + i * bpt;
        size_t k = 0;
        for (; k + 8 <= bpt; k += 8) {
            uint64_t v = splitmix64(&st);
            memcpy(p + k, &v, 8);
        }
        if (k < bpt) {
            uint64_t v = splitmix64(&st);
            memcpy(p + k, &v, bpt - k);
        }
    }
}

static void salt_str(uint64_t *h, const char *s)
{
    *h = pdsim_mix64(*h ^ pdsim_fnv1a(s, strlen(s) + 1));
}

static uint64_t layout_hash(const char *model_path, const char *revision, const char *dtype,
                            const char *kv_dtype, const char *backend, int64_t page_size, int64_t tp_size)
{
    uint64_t h = 0;
    salt_str(&h, model_path);
    salt_str(&h, revision);
    salt_str(&h, dtype);
    salt_str(&h, kv_dtype);
    salt_str(&h, backend);
    h = pdsim_mix64(h ^ (uint64_t)page_size);
    return pdsim_mix64(h ^ ((uint64_t)tp_size << 32));
}

uint64_t pdsim_layout_salt(const pdsim_opts_t *o)
{
    /* The defaults' own hash is subtracted out, so that a worker of the default identity keeps the KV
     * bytes and the text it always had. */
    uint64_t own = layout_hash(o->model_path ? o->model_path : o->model, o->revision ? o->revision : "",
                               o->dtype ? o->dtype : "auto", o->kv_cache_dtype ? o->kv_cache_dtype : "auto",
                               o->transfer_backend ? o->transfer_backend : "mooncake",
                               o->page_size > 0 ? o->page_size : 1, o->tp_size > 0 ? o->tp_size : 1);
    return own ^ layout_hash("pdsim", "", "auto", "auto", "mooncake", 1, 1);
}

static inline uint64_t rotl64(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

uint64_t pdsim_kv_digest(const uint8_t *buf, size_t len)
{
    /* Multipliers from xxHash64; 8 bytes per step keeps a 1 GiB buffer well under a second. */
    uint64_t h = 0x27d4eb2f165667c5ULL ^ ((uint64_t)len * 0x9e3779b97f4a7c15ULL);
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, buf + i, 8);
        h = rotl64(h ^ (w * 0xc2b2ae3d27d4eb4fULL), 31) * 0x9e3779b185ebca87ULL;
    }
    for (; i < len; i++)
        h = rotl64(h ^ (buf[i] * 0x165667b19e3779f9ULL), 23) * 0x9e3779b185ebca87ULL;
    return pdsim_mix64(h);
}

const char *pdsim_out_word(uint64_t digest, uint64_t j, int64_t *token_id)
{
    const char *w = vocab[pdsim_mix64(digest + (j + 1) * 0x9e3779b97f4a7c15ULL) % 64];
    if (token_id != NULL)
        *token_id = (int64_t)(pdsim_fnv1a(w, strlen(w)) % PDSIM_VOCAB);
    return w;
}

double pdsim_logprob(int64_t token_id)
{
    /* Multiples of 1/256 are exact in binary, so every printer gives the same digits. */
    return -(double)(1 + pdsim_mix64((uint64_t)token_id) % 4096) / 256.0;
}
