/*
 * Request and response rewriting for the sglang PD protocol: validate the client's JSON in one pass
 * (jsonscan.c, no DOM), find the batch shape, build each leg's body by copying the client's top-level
 * members byte for byte and appending the router's bootstrap fields (any the client sent are dropped),
 * and merge the prefill's input logprobs in front of the decode's (jansson, only when asked for).
 * Pure functions; any thread.
 */
#ifndef PDR_REWRITE_H
#define PDR_REWRITE_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include "jsonscan.h"

typedef enum {
    PDR_ROUTE_GENERATE = 0,
    PDR_ROUTE_COMPLETIONS,
    PDR_ROUTE_CHAT,
    PDR_ROUTE__PD_COUNT
} pdr_route_t;

typedef struct pdr_pdreq {
    const char *body; /* the client's bytes, borrowed: they must outlive the pdr_pdreq_t */
    size_t len;
    pdr_jmember_t *m; /* its top-level members (malloc'd when m_owned, else the caller's space) */
    size_t n;
    int m_owned;
    int stream;        /* "stream": true */
    int want_logprobs; /* return_logprob (generate) or logprobs (OpenAI) */
    size_t batch;      /* 0: one item; else the number of items (fields become arrays) */
} pdr_pdreq_t;

/* Parses and validates a PD request body. Returns 0, PDR_EINVAL with a client-facing message, or
 * PDR_ENOMEM (the router's fault: a 503, not a 400). */
int pdr_pdreq_parse(pdr_route_t route, const char *body, size_t len, pdr_pdreq_t *out, char *err,
                    size_t errlen);
/* The same, the members going into space[0..space_n) when they fit (out->m is space then, and owned by the
 * caller), else into a malloc'd array as pdr_pdreq_parse does. */
int pdr_pdreq_parse_in(pdr_route_t route, const char *body, size_t len, pdr_pdreq_t *out,
                       pdr_jmember_t *space, size_t space_n, char *err, size_t errlen);
/* Frees what the parse allocated and zeroes *r. */
void pdr_pdreq_clear(pdr_pdreq_t *r);

/* Builds a leg's body: the client's members except bootstrap_host, bootstrap_port, bootstrap_room and
 * pd_ticket, then those three set by the router (arrays of `batch` elements, rooms[i] each, when batch > 0;
 * bport < 0 gives null). Returns a malloc'd, NUL-terminated string and its length, or NULL. */
char *pdr_pdreq_build_body(pdr_pdreq_t *r, const char *bootstrap_host, int bport, const uint64_t *rooms,
                           size_t *len);

/* As pdr_pdreq_build_body, for a worker running data-parallel attention: dp_rank >= 0 adds
 * "data_parallel_rank": dp_rank (sglang's field naming the rank that serves the request), replacing any the
 * client sent. */
char *pdr_pdreq_build_body_rank(pdr_pdreq_t *r, const char *bootstrap_host, int bport, const uint64_t *rooms,
                                int dp_rank, size_t *len);

/* As pdr_pdreq_build_body_rank, with protocol pdshim's "pd_ticket" too (tickets non-NULL): a string, or
 * with batch > 0 an array with tickets[i] for rooms[i]. Whatever the client sent as pd_ticket is dropped
 * by every build function, tickets or not. */
char *pdr_pdreq_build_body_ticket(pdr_pdreq_t *r, const char *bootstrap_host, int bport,
                                  const uint64_t *rooms, int dp_rank, const char *const *tickets,
                                  size_t *len);

/* The request id ("rid") the router gives a PD item in both legs' bodies: "pdr-" and the item's bootstrap
 * room in 16 hex digits. It is unique per item and per attempt (a fresh room each), the same on the prefill
 * and the decode, and what an engine abort (POST /abort_request) names. */
#define PDR_RID_LEN 20
void pdr_pdreq_rid(uint64_t room, char out[PDR_RID_LEN + 1]);

/* As pdr_pdreq_build_body_ticket, with "rid" set by the router too (pdr_pdreq_rid of rooms[i]; an array
 * with batch > 0), replacing any rid the client sent: an abort must name exactly this attempt's item. */
char *pdr_pdreq_build_body_rid(pdr_pdreq_t *r, const char *bootstrap_host, int bport, const uint64_t *rooms,
                               int dp_rank, const char *const *tickets, size_t *len);

/* The body of a request that skips the prefill (conditional disaggregation, router/workers/disagg.h): the
 * client's members except bootstrap_host, bootstrap_port, bootstrap_room and kv_transfer_params, so that
 * the worker runs it as a plain, non-disaggregated request; dp_rank >= 0 adds "data_parallel_rank" as
 * pdr_pdreq_build_body_rank does. Returns a malloc'd, NUL-terminated string and
 * its length, or NULL. */
char *pdr_pdreq_build_plain(const pdr_pdreq_t *r, int dp_rank, size_t *len);

/* The three bodies of protocol vllm (docs/architecture.md, "vLLM PD path"). */
typedef enum {
    /* The prefill: the client's members without stream, max_tokens, max_completion_tokens, stream_options,
     * min_tokens, min_completion_tokens and kv_transfer_params, then "stream":false, "max_tokens":1,
     * "max_completion_tokens":1 (only when the client sent that key) and the router's kv_transfer_params
     * asking for a remote decode (every remote_* null). */
    PDR_VLLM_PREFILL = 0,
    /* The decode: the client's members without kv_transfer_params, then kv_transfer_params set to the
     * object the prefill answered (kv, its raw bytes). */
    PDR_VLLM_DECODE,
    /* The release of KV a client left behind: as the prefill's body, with kv as kv_transfer_params, so that
     * a decode pulls the KV (which frees it on the prefill) and answers one token nobody reads. */
    PDR_VLLM_RELEASE
} pdr_vllm_body_t;

/* Builds one of those bodies (kv/kv_len: the prefill's kv_transfer_params object, unused for
 * PDR_VLLM_PREFILL). Returns a malloc'd, NUL-terminated string and its length, or NULL. */
char *pdr_pdreq_build_vllm(const pdr_pdreq_t *r, pdr_vllm_body_t kind, const char *kv, size_t kv_len,
                           size_t *len);

/* Finds the kv_transfer_params object in a vLLM prefill's answer (a JSON object, validated whole). The
 * object is usable when it says "do_remote_prefill": true, as vLLM's connectors answer when the prefill
 * holds KV for a remote decode. Returns 0 with *kv, *kv_len pointing into body, or PDR_EINVAL with the
 * reason in err (PDR_ENOMEM when out of memory). */
int pdr_vllm_kv_params(const char *body, size_t len, const char **kv, size_t *kv_len, char *err,
                       size_t errlen);

/* Puts prefill's meta_info.input_token_logprobs in front of decode's, for an object or, element by
 * element, for arrays. Returns 1 when something was merged. */
int pdr_merge_logprobs(json_t *decode, const json_t *prefill);

/* Finds the JSON payload of the first "data:" event of an SSE body (not "[DONE]"); *len its length. */
const char *pdr_sse_first_data(const char *body, size_t len, size_t *out_len);

#endif
