/* A request's prompt as token ids (precise_prefix): token_ids.c. */
#ifndef PDR_TOKEN_IDS_H
#define PDR_TOKEN_IDS_H

#include "pool.h"
#include "rewrite.h"

/* Prompts longer than this are matched on their first PDR_ROUTING_MAX_TOKENS ids. */
#define PDR_ROUTING_MAX_TOKENS ((size_t)1 << 18)

/*
 * Fills *out with the prompt's token ids (malloc'd: free(out->ids)), or leaves it empty (n 0) when the
 * request has none the router can read: no input_ids, a batch, or ids outside 0..2^32-1. Returns 0 or
 * PDR_ENOMEM or PDR_EINVAL (out empty in both cases: routing goes on without ids).
 */
int pdr_request_token_ids(const pdr_pdreq_t *pr, pdr_prompt_tokens_t *out);

#endif
