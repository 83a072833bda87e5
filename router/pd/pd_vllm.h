/*
 * The vLLM PD protocol (protocol: vllm), the parts that do not need the request's state (router/pd/): the
 * bodies of the decode and release legs made from the prefill's answer, and the release legs themselves,
 * which outlive the client request that left KV behind. pd/proto_vllm.c runs the sequence (prefill, then
 * decode) with its own legs and calls these. Loop thread only.
 */
#ifndef PDR_PD_VLLM_H
#define PDR_PD_VLLM_H

#include <stddef.h>
#include "rewrite.h"

struct pdr_thread;

/* The legs that follow a vLLM prefill's successful answer. Both malloc'd; the caller frees them. */
typedef struct pdr_vllm_next {
    char *decode; /* the client's body with the prefill's kv_transfer_params */
    size_t decode_len;
    char *release; /* the same one token long and not streamed: sent if the decode's answer never starts */
    size_t release_len;
} pdr_vllm_next_t;

/* Reads the prefill's answer and builds both bodies. Returns 0, PDR_EINVAL when the answer carries no
 * usable kv_transfer_params (the reason in err, for the client's 502), or PDR_ENOMEM. */
int pdr__vllm_next(const pdr_pdreq_t *pr, const char *answer, size_t len, pdr_vllm_next_t *out, char *err,
                   size_t errlen);

/* Sends a release leg to url (the decode's route) with `body` (taken over, freed when the leg ends), the
 * header lines of the request (its X-Request-Id, worker key, trace context) and a deadline of total_ms: the
 * decode pulls the KV, which frees it on the prefill, and its answer is read and discarded. The leg counts in
 * t->live (a shutdown waits for it, or cancels it at drain_timeout_ms) and, when it ends, in
 * pdr_vllm_kv_release_total. */
void pdr__vllm_release(struct pdr_thread *t, const char *url, char *body, size_t len,
                       const char *const *headers, const char *request_id, long connect_ms, long total_ms);

#endif
