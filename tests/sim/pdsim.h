/*
 * pdsim — the simulated inference worker. Shared declarations of its parts:
 *   model.c   the deterministic "model": tokenizer, KV bytes, digest, output words, logprobs (pure);
 *   server.c  the h2o data plane, the request state machine and the libpdshim glue (loop thread);
 *   prefix_cache.c  the LRU prefix cache of prompt blocks (pure);
 *   kv_events.c  vLLM-format KV events of the prefix cache (ZMQ PUB);
 *   kv_lease.c   vLLM mode's KV leases: a prefill's expiry sweep, a decode's heartbeats (UDP);
 *   main.c    flags, the loop, signals and shutdown.
 */
#ifndef PDSIM_H
#define PDSIM_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include <uv.h>
#include "dlist.h"

/* 32000: a common LLM vocabulary size (Llama 2); prompt token ids are word hashes modulo this. */
#define PDSIM_VOCAB 32000
/* A request's KV buffers together may not exceed this (answered 413 otherwise). */
#define PDSIM_KV_CAP ((uint64_t)1 << 30)
/* Ceiling on output tokens per item. */
#define PDSIM_MAX_TOKENS 1000000

enum pdsim_role { PDSIM_ROLE_BOTH = 0, PDSIM_ROLE_PREFILL, PDSIM_ROLE_DECODE };

/* Fault knobs: set from flags, changed at run time with POST /pdsim/fault. 0 means off. */
typedef struct pdsim_faults {
    int fail_health;
    int health_status; /* 0: normal; else /health answers this status (410 asks the router to drain) */
    int fail_status;
    int hang_before_headers;
    int64_t drip_ms;
    int64_t reset_after_tokens;
    int64_t stall_after_tokens; /* a stream stops after N output tokens and stays open, silent */
    int stall_kv;
    int stream_head_before_kv;  /* decode: a stream (headers, an SSE comment) starts before the KV pull */
    int64_t stall_kv_from_port; /* decode: KV offered on this bootstrap port is never pulled (0: off) */
    int64_t fail_kv_from_port;  /* decode: KV offered on this bootstrap port fails at once: 500 (0: off) */
    int fail_after_kv;          /* prefill: the KV is sent, then the request is answered with this status */
    int reset_answer;           /* a JSON answer is cut in the middle of its body by a hard reset */
    int hang_abort;             /* POST /abort_request is accepted and never answered (nor acted on) */
    int load_status;            /* 0: normal; else /get_load and /metrics answer this status */
    int load_garbage;           /* /get_load and /metrics answer text in neither engine's format */
    int64_t die_after;          /* as configured (reported back) */
} pdsim_faults_t;

typedef struct pdsim_opts {
    int role;
    const char *host;
    int port;
    int bootstrap_port;
    int64_t kv_bytes_per_token;
    const char *model;
    const char *tokenizer; /* --tokenizer: a tokenizer.json for prompt text (NULL: one hash per word) */
    int64_t prefill_us_per_token;
    int64_t decode_us_per_token;
    int64_t max_tokens_default;
    int64_t kv_timeout_ms;
    int64_t prefill_answer_lag_ms; /* prefill: the answer comes this long after the KV was sent */
    int stamp_first_token;         /* the first streamed event carries "pdsim_mono_us" */
    int64_t kv_lease_ms;           /* vLLM mode: a held KV's lease (vLLM's kv_lease_duration, 30 s) */
    int64_t kv_fetch_delay_ms;     /* a decode waits this long before pulling the KV */
    int64_t kv_parts; /* prefill: publish each room in this many parts over the prefill time; 0 = whole */
    int64_t prefix_cache_tokens; /* prefill and both: the prefix cache's size in tokens; 0 = off */
    int64_t cache_block_tokens;  /* the prefix cache's block size (16, vLLM's default block size) */
    int64_t dp_size;             /* what /get_server_info reports as dp_size (default 1) */
    /* The identity /get_server_info reports by sglang's names (vLLM mode: /v1/models's root): */
    const char *model_path;       /* --model-path (default: --model) */
    const char *revision;         /* --revision (default: null) */
    const char *dtype;            /* --dtype (default auto) */
    const char *kv_cache_dtype;   /* --kv-cache-dtype (default auto) */
    const char *transfer_backend; /* --transfer-backend (default mooncake, sglang's) */
    int64_t page_size;            /* --page-size (default 1, sglang's) */
    int64_t tp_size;              /* --tp-size (default 1) */
    int no_server_info;           /* --no-server-info: /get_server_info answers 404 (an engine without it) */
    int local_prefill;            /* decode: a request with no bootstrap fields and no kv_transfer_params is
                                     computed locally (a vLLM decode's plain request) */
    const char *kv_events_endpoint; /* ZMQ PUB endpoint (bound) for KV events in vLLM's format; NULL: off */
    const char *kv_events_topic;    /* the topic frame (default empty) */
    int64_t kv_events_drop_every;   /* fault: every Nth message is not sent (its number is used up) */
    const char *kv_events_replay_endpoint; /* ZMQ ROUTER endpoint (bound) serving replays; NULL: off */
    int64_t kv_events_replay_buffer;       /* batches the replay keeps (vLLM's buffer_steps; 0: 10000) */
    const char *kv_events_lora_name; /* every stored block's lora_name (an adapter's cache); NULL: nil */
    const char *ticket_keys[4];      /* --ticket-key (protocol pdshim): the router's key files; 0: off */
    int n_ticket_keys;
    const char *ticket_identity; /* --ticket-identity; NULL: HOST:PORT */
    const char *events_url;      /* the router's admin listener for shim event and load reports; NULL: off */
    const char *events_key_file; /* the router's shim_events.key_file */
    int64_t kv_capacity_bytes;   /* decode: KV held by running requests at most; 0 = unlimited */
    const char *tls_cert, *tls_key; /* --tls-cert/--tls-key: serve HTTPS on --port; NULL: plain HTTP */
    const char *tls_client_ca;      /* --tls-client-ca: require a client certificate signed by it */
    int tls_no_resumption; /* --tls-fail-resumption: fail handshakes that resume (with a client CA) */
    pdsim_faults_t faults;
} pdsim_opts_t;
#define PDSIM_MAX_TICKET_KEYS 4

/* ---- server.c ---- */

/* Binds the HTTP listener (and the shim for prefill/decode). Returns 0 or a PDR_E* code. */
int pdsim_server_start(uv_loop_t *loop, const pdsim_opts_t *opts);
/* Begins a clean shutdown; on_drained runs once no connection and no request is left. */
void pdsim_server_shutdown(void (*on_drained)(void));
/* Closes the remaining handles and frees h2o's state; then run the loop once more and close it. */
void pdsim_server_dispose(void);

/* ---- model.c ---- */

/* A growable vector of token ids. */
typedef struct pdsim_toks {
    int64_t *ids;
    size_t n, cap;
} pdsim_toks_t;

uint64_t pdsim_fnv1a(const void *p, size_t len);
uint64_t pdsim_mix64(uint64_t x);
/* Appends one id. Returns 0 or PDR_ENOMEM. */
int pdsim_toks_push(pdsim_toks_t *t, int64_t id);
/* Splits text on whitespace and appends one token per word; with a tokenizer set (--tokenizer), appends
 * the tokenizer's ids of the text instead. Returns 0, PDR_ENOMEM, or the tokenizer's PDR_EINVAL (text not
 * UTF-8) / PDR_ENOTSUP. */
int pdsim_tokenize(pdsim_toks_t *t, const char *s, size_t len);
struct pdr_tokenizer;
/* Makes pdsim_tokenize() use tok (NULL: the whitespace words again). */
void pdsim_set_tokenizer(const struct pdr_tokenizer *tok);
/* The tokenizer set (NULL: none); its extra is the model's chat template, when one lies beside it. */
const struct pdr_tokenizer *pdsim_tokenizer(void);
/* Gives an empty prompt its one token. Returns 0 or PDR_ENOMEM. */
int pdsim_toks_finish(pdsim_toks_t *t);
void pdsim_toks_free(pdsim_toks_t *t);
/* Fills n * bpt bytes: token i's bytes come from splitmix64 seeded by a running hash of ids[0..i] that
 * starts from `layout` (pdsim_layout_salt()). */
void pdsim_kv_fill(const int64_t *ids, size_t n, size_t bpt, uint64_t layout, uint8_t *out);
/* The KV layout of the identity the options report (model path, revision, dtype, KV cache dtype,
 * transfer backend, page size, tp size): 0 for the defaults. A prefill fills its KV from it and a decode
 * reads its digest through it, so a pair of two layouts answers another text (as a real decode given
 * another layout's KV answers garbage). */
uint64_t pdsim_layout_salt(const pdsim_opts_t *o);
/* A 64-bit hash of a KV buffer of n tokens of bpt bytes, folded one token at a time (linear in bytes). */
uint64_t pdsim_kv_digest(const uint8_t *buf, size_t n, size_t bpt);
/* The token id of an output word: what the whitespace tokenizer gives it. */
int64_t pdsim_word_id(const char *w);

/* An item's generation, autoregressive: output token j is drawn from the state after the context and
 * tokens 0..j-1; the words so far are kept (one vocabulary index each, at most PDSIM_MAX_TOKENS). */
typedef struct pdsim_gen {
    uint64_t s;     /* the state after the context and the n tokens so far */
    uint64_t h;     /* the running id hash of the same (pdsim_kv_fill's) */
    size_t bpt;     /* KV bytes per token */
    uint8_t *words; /* vocabulary index of output token j, j < n */
    size_t n, cap;
} pdsim_gen_t;
/* Starts from the KV digest of a context of n tokens (ids), read through the decode's KV layout. */
void pdsim_gen_init(pdsim_gen_t *g, uint64_t digest, const int64_t *ids, size_t n, size_t bpt,
                    uint64_t layout);
/* Generates up to n tokens in all (each costs one token's KV bytes). 0, PDR_ENOMEM, or PDR_EINVAL past
 * PDSIM_MAX_TOKENS. */
int pdsim_gen_extend(pdsim_gen_t *g, size_t n);
/* Output token j (j < g->n): its word and its token id. */
const char *pdsim_gen_word(const pdsim_gen_t *g, size_t j, int64_t *token_id);
void pdsim_gen_free(pdsim_gen_t *g);
/* A deterministic negative log probability for a token id. */
double pdsim_logprob(int64_t token_id);

/* ---- prefix_cache.c ---- */

/* Ceiling on --prefix-cache-tokens: 16 Mi tokens (about 50 MB of entries with 16-token blocks). */
#define PDSIM_PCACHE_MAX_TOKENS ((int64_t)1 << 24)

typedef struct pdsim_pcache pdsim_pcache_t;

typedef struct pdsim_pcache_stats {
    uint64_t hit_tokens, miss_tokens; /* prompt tokens found cached / computed, over all lookups */
    uint64_t blocks, max_blocks, block_tokens;
    uint64_t inserted_blocks, evicted_blocks;
} pdsim_pcache_stats_t;

/* A cache of at most cap_tokens / block_tokens whole blocks. NULL when block_tokens is 0, cap_tokens
 * is below one block, or memory is short. */
pdsim_pcache_t *pdsim_pcache_new(uint64_t cap_tokens, uint64_t block_tokens);
void pdsim_pcache_free(pdsim_pcache_t *c);
/* The prompt's cached prefix in tokens (whole blocks, at most n - 1 tokens); marks those blocks used
 * and counts hits and misses. */
uint64_t pdsim_pcache_lookup(pdsim_pcache_t *c, const int64_t *ids, size_t n);
/* Inserts the prompt's whole blocks (or marks them used), evicting the least recently used blocks
 * at the cap. Returns 0 or PDR_ENOMEM (the blocks inserted so far stay). */
int pdsim_pcache_insert(pdsim_pcache_t *c, const int64_t *ids, size_t n);
void pdsim_pcache_stats(const pdsim_pcache_t *c, pdsim_pcache_stats_t *out);

/* What the cache tells a listener: a block stored (its key, its parent's key unless it starts the
 * prompt, its block_tokens ids) or a block evicted (its key only). */
typedef enum { PDSIM_PCACHE_STORED, PDSIM_PCACHE_REMOVED } pdsim_pcache_event_t;
typedef void (*pdsim_pcache_listener_cb)(void *arg, pdsim_pcache_event_t ev, uint64_t key, int has_parent,
                                         uint64_t parent, const int64_t *ids, size_t n);
/* Every later insert reports its stores and evictions to cb, in the order they happen. */
void pdsim_pcache_set_listener(pdsim_pcache_t *c, pdsim_pcache_listener_cb cb, void *arg);

/* ---- kv_events.c ---- */

/* Binds the PUB socket, hooks the cache, publishes AllBlocksCleared (sequence 0). 0 or a PDR_E* code
 * (the reason logged). */
int pdsim_kvev_start(const pdsim_opts_t *opts, pdsim_pcache_t *cache);
/* Sends the events collected since the last call as one batch (nothing when there are none). */
void pdsim_kvev_flush(void);
/* Counters for /pdsim/stats; enabled 0 when off. */
typedef struct pdsim_kvev_stats {
    int enabled;
    uint64_t messages, dropped, malformed, events, next_seq;
    uint64_t replays, replayed; /* replay requests answered, batches sent in them */
} pdsim_kvev_stats_t;
void pdsim_kvev_stats(pdsim_kvev_stats_t *out);
void pdsim_kvev_stop(void);
/* Fault knobs at run time (-1: unchanged): every Nth message dropped (0: none); the next `malformed`
 * messages carry a truncated payload instead of their batch (their events are lost). */
void pdsim_kvev_fault(int64_t drop_every, int64_t malformed);

/* ---- kv_lease.c ---- */

/* A prefill's lease on one room's held KV (embedded in the hold; loop thread). */
typedef struct pdsim_lease {
    uint64_t room;
    uint64_t expires_ms; /* uv_now() time */
    int expired;         /* the sweep found it expired and handed it to the expired callback */
    pdr_dlink_t link;    /* the lease list while it runs */
} pdsim_lease_t;
/* Called for a lease that ran out (already off the list): the server frees that KV. */
typedef void (*pdsim_lease_expired_cb)(pdsim_lease_t *ls);
/* Prefill: binds UDP host:bootstrap_port for heartbeats and starts the expiry sweep. Decode: opens the
 * sending sockets and calls tick every lease / 6 (the server heartbeats its pulls from it). 0 or a
 * PDR_E* code (the reason logged). */
int pdsim_lease_start(uv_loop_t *loop, const pdsim_opts_t *opts, pdsim_lease_expired_cb expired,
                      void (*tick)(void));
/* Prefill: the lease of a room whose KV is held from now on (--kv-lease-ms). */
void pdsim_lease_grant(pdsim_lease_t *ls, uint64_t room);
/* Prefill: the KV left (pulled, failed): its lease ends. Safe on an expired lease. */
void pdsim_lease_drop(pdsim_lease_t *ls);
/* Decode: one heartbeat for these rooms, held by the prefill whose bootstrap port is host:port. */
void pdsim_lease_heartbeat(const char *host, int port, const uint64_t *rooms, size_t n);
/* Adds "kv_lease" (settings and counters) to a /pdsim/stats object. */
void pdsim_lease_stats(json_t *o);
void pdsim_lease_stop(void);

#endif
