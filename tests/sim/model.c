/*
 * The deterministic model of pdsim. Pure functions, any thread.
 *
 * Invariant: the output text is a function of the KV bytes (through pdsim_kv_digest) and of the
 * context's token ids, and the KV bytes are a function of the prompt token ids, the bytes per token and the
 * KV layout (the identity /get_server_info reports). So a decode that received its KV intact from a prefill
 * of its own layout produces exactly what --role both produces, and a lost, partial or misrouted transfer,
 * or KV from a prefill of another layout (another model, revision, dtype, page size...), changes the text.
 *
 * The model is autoregressive, as a greedy engine is: the digest folds the KV one token at a time,
 * D = mix(D ^ H(token i's KV bytes)), and output token j is drawn from the state S_j (S_0 = D); its KV
 * bytes (pdsim_kv_fill's, for the context followed by that token) fold into S_{j+1}. So a request whose
 * prompt is the prompt followed by output tokens 0..k-1 starts from S_k and goes on with token k.
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

const pdr_tokenizer_t *pdsim_tokenizer(void)
{
    return sim_tokenizer;
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

/* The running id hash's seed (sqrt(2) bits, as in SHA-512's IV, salted by the KV layout) and its step:
 * h_i = mix64(h_{i-1} ^ id_i). */
#define ID_HASH_SEED 0x6a09e667f3bcc908ULL

static uint64_t id_hash_step(uint64_t h, int64_t id)
{
    return pdsim_mix64(h ^ (uint64_t)id);
}

void pdsim_kv_fill(const int64_t *ids, size_t n, size_t bpt, uint64_t layout, uint8_t *out)
{
    uint64_t h = ID_HASH_SEED ^ layout;
    for (size_t i = 0; i < n; i++) {
        h = id_hash_step(h, ids[i]);
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

/* One token's KV hash, in steps: init, then 8-byte words, then the tail bytes, then final. Multipliers
 * from xxHash64; 8 bytes per step keeps a 1 GiB buffer well under a second. */
static inline uint64_t tok_hash_init(size_t bpt)
{
    return 0x27d4eb2f165667c5ULL ^ ((uint64_t)bpt * 0x9e3779b97f4a7c15ULL);
}

static inline uint64_t tok_hash_word(uint64_t h, uint64_t w)
{
    return rotl64(h ^ (w * 0xc2b2ae3d27d4eb4fULL), 31) * 0x9e3779b185ebca87ULL;
}

static inline uint64_t tok_hash_byte(uint64_t h, uint8_t c)
{
    return rotl64(h ^ (c * 0x165667b19e3779f9ULL), 23) * 0x9e3779b185ebca87ULL;
}

static uint64_t tok_hash(const uint8_t *p, size_t bpt)
{
    uint64_t h = tok_hash_init(bpt);
    size_t k = 0;
    for (; k + 8 <= bpt; k += 8) {
        uint64_t w;
        memcpy(&w, p + k, 8);
        h = tok_hash_word(h, w);
    }
    for (; k < bpt; k++)
        h = tok_hash_byte(h, p[k]);
    return pdsim_mix64(h);
}

/* tok_hash of the bytes pdsim_kv_fill gives the token whose running id hash is h, without the buffer. */
static uint64_t tok_hash_of_fill(uint64_t h, size_t bpt)
{
    uint64_t st = h, x = tok_hash_init(bpt);
    size_t k = 0;
    for (; k + 8 <= bpt; k += 8)
        x = tok_hash_word(x, splitmix64(&st));
    if (k < bpt) {
        uint64_t v = splitmix64(&st);
        uint8_t b[8];
        memcpy(b, &v, 8);
        for (size_t i = 0; k < bpt; k++, i++)
            x = tok_hash_byte(x, b[i]);
    }
    return pdsim_mix64(x);
}

/* The digest's seed (pi's fraction bits) and its step: one token's KV hash folded in. */
#define DIGEST_SEED 0x243f6a8885a308d3ULL

static uint64_t digest_step(uint64_t d, uint64_t tok)
{
    return pdsim_mix64(d ^ tok);
}

uint64_t pdsim_kv_digest(const uint8_t *buf, size_t n, size_t bpt)
{
    uint64_t d = DIGEST_SEED;
    for (size_t i = 0; i < n; i++)
        d = digest_step(d, tok_hash(buf + i * bpt, bpt));
    return d;
}

static const char *word_of(uint64_t s, uint8_t *index)
{
    uint8_t w = (uint8_t)(pdsim_mix64(s + 0x9e3779b97f4a7c15ULL) % 64);
    *index = w;
    return vocab[w];
}

int64_t pdsim_word_id(const char *w)
{
    return (int64_t)(pdsim_fnv1a(w, strlen(w)) % PDSIM_VOCAB);
}

void pdsim_gen_init(pdsim_gen_t *g, uint64_t digest, const int64_t *ids, size_t n, size_t bpt,
                    uint64_t layout)
{
    uint64_t h = ID_HASH_SEED ^ layout;
    for (size_t i = 0; i < n; i++)
        h = id_hash_step(h, ids[i]);
    memset(g, 0, sizeof(*g));
    g->s = digest;
    g->h = h;
    g->bpt = bpt;
}

int pdsim_gen_extend(pdsim_gen_t *g, size_t n)
{
    if (n <= g->n)
        return 0;
    if (n > PDSIM_MAX_TOKENS)
        return PDR_EINVAL;
    if (n > g->cap) {
        size_t ncap = g->cap ? g->cap : 64;
        while (ncap < n)
            ncap *= 2;
        if (ncap > PDSIM_MAX_TOKENS)
            ncap = PDSIM_MAX_TOKENS;
        uint8_t *w = realloc(g->words, ncap);
        if (w == NULL)
            return PDR_ENOMEM;
        g->words = w;
        g->cap = ncap;
    }
    while (g->n < n) {
        uint8_t idx;
        const char *w = word_of(g->s, &idx);
        g->words[g->n++] = idx;
        g->h = id_hash_step(g->h, pdsim_word_id(w));
        g->s = digest_step(g->s, tok_hash_of_fill(g->h, g->bpt));
    }
    return 0;
}

const char *pdsim_gen_word(const pdsim_gen_t *g, size_t j, int64_t *token_id)
{
    const char *w = vocab[g->words[j]];
    if (token_id != NULL)
        *token_id = pdsim_word_id(w);
    return w;
}

void pdsim_gen_free(pdsim_gen_t *g)
{
    free(g->words);
    memset(g, 0, sizeof(*g));
}

double pdsim_logprob(int64_t token_id)
{
    /* Multiples of 1/256 are exact in binary, so every printer gives the same digits. */
    return -(double)(1 + pdsim_mix64((uint64_t)token_id) % 4096) / 256.0;
}
