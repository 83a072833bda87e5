/*
 * KV-transfer deadlines and their failures (kvdeadline.c): how long a request's KV may take (the base
 * timeouts.kv_transfer_ms plus timeouts.kv_transfer_ms_per_1k_tokens per 1024 prompt tokens), the prompt's
 * length in tokens as the router can know it, and the process-wide count of KV failures by cause and
 * backend (pdr_kv_transfer_failures_total). The deadline itself runs in router/pd/, on the request's timer.
 */
#ifndef PDR_KVDEADLINE_H
#define PDR_KVDEADLINE_H

#include <stddef.h>
#include <stdint.h>
#include "config.h"
#include "rewrite.h"
#include "tokenizer.h"

typedef enum {
    PDR_KVC_DEADLINE = 0,  /* the KV deadline passed before the KV was known to have arrived */
    PDR_KVC_SHIM_FAILED,   /* a shim reported the room failed (its own reason is logged) */
    PDR_KVC_PEER_GONE,     /* a leg's connection broke (reset, closed) while the KV was in flight */
    PDR_KVC_PREFILL_ERROR, /* the prefill answered an error before the KV arrived */
    PDR_KVC_DECODE_ERROR,  /* the decode answered an error before the KV arrived */
    PDR_KVC_INCARNATION,   /* a worker of the pair restarted (a new incarnation) with the room open */
    PDR_KVC__COUNT
} pdr_kv_cause_t;

typedef enum {
    PDR_KVF_TCP = 0,
    PDR_KVF_RDMA,
    PDR_KVF_CUDA_IPC,
    PDR_KVF_UNKNOWN, /* no shim said which */
    PDR_KVF_OTHER,   /* a name the router does not know (kept out of the label: bounded cardinality) */
    PDR_KVF__COUNT
} pdr_kvf_backend_t;

extern const char *const pdr_kv_cause_names[PDR_KVC__COUNT];
extern const char *const pdr_kvf_backend_names[PDR_KVF__COUNT];

/* A cause's name ("deadline", "shim_failed", ...) to its value; a name it does not know is
 * PDR_KVC_SHIM_FAILED (a shim's own reason). NULL too. */
pdr_kv_cause_t pdr_kv_cause_parse(const char *name);
/* A backend's name (the transport's: "tcp", "rdma", "cuda_ipc") to its value; NULL or "" is
 * PDR_KVF_UNKNOWN, anything else PDR_KVF_OTHER. */
pdr_kvf_backend_t pdr_kvf_backend_parse(const char *name);

/* Counts one KV failure (any thread). */
void pdr_kv_count_failure(pdr_kv_cause_t cause, pdr_kvf_backend_t backend);
uint64_t pdr_kv_failures(pdr_kv_cause_t cause, pdr_kvf_backend_t backend);

/* How the prompt's length was found. */
typedef enum {
    PDR_KVT_IDS = 0,   /* token ids in the body (input_ids, or a prompt of integers) */
    PDR_KVT_TOKENIZER, /* the router's tokenizer (config `tokenizer`) */
    PDR_KVT_ESTIMATE,  /* the prompt's bytes / PDR_KV_BYTES_PER_TOKEN */
    PDR_KVT_NONE,      /* not counted: the deadline does not scale (kv_transfer_ms_per_1k_tokens is 0) */
} pdr_kv_tokens_how_t;
extern const char *const pdr_kv_tokens_how_names[4];

/* 4: the usual bytes per token of English text under BPE tokenizers (OpenAI's rule of thumb). */
#define PDR_KV_BYTES_PER_TOKEN 4

/* The prompt's length in tokens (all items of a batch together): ids in the body counted, else the
 * tokenizer's count of a plain text or prompt (tk NULL: none, the unknown_model fall-back, counted once per
 * request with *unknown_counted as pdr_request_token_ids_or does), else an estimate from the JSON bytes of
 * the prompt member ("text", "prompt", "messages", "input_ids"). 0 with no prompt member. */
uint64_t pdr_kv_prompt_tokens(const pdr_pdreq_t *pr, const pdr_tokenizer_t *tk, pdr_kv_tokens_how_t *how,
                              int *unknown_counted);

/* The KV deadline in ms: base + per_1k x tokens / 1024 (rounded up), at most PDR_MAX_MS. */
uint64_t pdr_kv_deadline_ms(int base_ms, int per_1k_ms, uint64_t tokens);

/* The Prometheus text of pdr_kv_transfer_failures_total and of the link state (pdr_link_suspect,
 * pdr_link_consecutive_failures), malloc'd (free), or NULL when out of memory. */
char *pdr_kv_render_metrics(size_t *len);

#endif
