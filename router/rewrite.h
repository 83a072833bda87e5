/*
 * Request and response rewriting for the sglang PD protocol: validate the client's JSON, find the
 * batch shape, set the router's bootstrap fields (overwriting any the client sent), and merge the
 * prefill's input logprobs in front of the decode's. Pure functions over jansson values; any thread.
 */
#ifndef PDR_REWRITE_H
#define PDR_REWRITE_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

typedef enum {
    PDR_ROUTE_GENERATE = 0,
    PDR_ROUTE_COMPLETIONS,
    PDR_ROUTE_CHAT,
    PDR_ROUTE__PD_COUNT
} pdr_route_t;

typedef struct pdr_pdreq {
    json_t *root;      /* the client's object, owned */
    int stream;        /* "stream": true */
    int want_logprobs; /* return_logprob (generate) or logprobs (OpenAI) */
    size_t batch;      /* 0: one item; else the number of items (fields become arrays) */
} pdr_pdreq_t;

/* Parses and validates a PD request body. Returns 0, or PDR_EINVAL with a client-facing message. */
int pdr_pdreq_parse(pdr_route_t route, const char *body, size_t len, pdr_pdreq_t *out, char *err,
                    size_t errlen);
void pdr_pdreq_clear(pdr_pdreq_t *r);

/* Sets bootstrap_host, bootstrap_port (bport < 0: null) and bootstrap_room (arrays of `batch`
 * elements, rooms[i] each, when batch > 0) and serializes the body. Returns a malloc'd string. */
char *pdr_pdreq_build_body(pdr_pdreq_t *r, const char *bootstrap_host, int bport, const uint64_t *rooms,
                           size_t *len);

/* Puts prefill's meta_info.input_token_logprobs in front of decode's, for an object or, element by
 * element, for arrays. Returns 1 when something was merged. */
int pdr_merge_logprobs(json_t *decode, const json_t *prefill);

/* Finds the JSON payload of the first "data:" event of an SSE body (not "[DONE]"); *len its length. */
const char *pdr_sse_first_data(const char *body, size_t len, size_t *out_len);

#endif
