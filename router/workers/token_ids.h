/* A request's prompt as token ids (precise_prefix): token_ids.c. */
#ifndef PDR_TOKEN_IDS_H
#define PDR_TOKEN_IDS_H

#include "fallback.h"
#include "pool.h"
#include "rewrite.h"
#include "tokenizer.h"

/* Prompts longer than this are matched on their first PDR_ROUTING_MAX_TOKENS ids. */
#define PDR_ROUTING_MAX_TOKENS ((size_t)1 << 18)
/* Prompt text longer than this is tokenized on its head only (token_ids.c says where it is cut). */
#define PDR_TOKENIZE_MAX_BYTES ((size_t)64 << 10)

/*
 * Fills *out with the prompt's token ids (malloc'd: free(out->ids)): the body's input_ids, else, with a
 * tokenizer tk (NULL: none), a string text or prompt encoded by it. Leaves it empty (n 0) when the
 * request has none the router can read: no such member, a batch, chat messages, ids outside
 * 0..2^32-1, text the tokenizer refuses. Returns 0 or PDR_ENOMEM or PDR_EINVAL or PDR_ENOTSUP (out empty
 * in every error case: routing goes on without ids).
 */
int pdr_request_token_ids(const pdr_pdreq_t *pr, const pdr_tokenizer_t *tk, pdr_prompt_tokens_t *out);
/* As pdr_request_token_ids, for a caller that goes on without ids when they cannot be read: an error (not
 * a prompt that has none) is a fall-back, counted and logged under reason (fallback.h); so is a text or chat
 * prompt with no tokenizer (tk NULL: the request's model has none), under PDR_FB_UNKNOWN_MODEL, counted
 * once per request: *unknown_counted (the request's, 0 at its start; NULL: every time) says it was.
 * Returns the fall-back that applies (a pdr_fallback_t, counted now or before), or -1 for none. */
int pdr_request_token_ids_or(const pdr_pdreq_t *pr, const pdr_tokenizer_t *tk, pdr_prompt_tokens_t *out,
                             pdr_fallback_t reason, int *unknown_counted);

#endif
