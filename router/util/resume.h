/*
 * Stream migration's arithmetic: what the client of a stream already has (read back from the events the
 * router relayed to it), the body that asks a new pair to go on from there, and the rewrite of the new
 * stream's events so that the client sees one stream. Pure functions over jansson; any thread, one
 * pdr_resume_t per stream.
 *
 * What a client has, by route:
 *   /generate (sglang): each event's "text" is the whole text so far and its "output_ids" the ids so far
 *     (sglang's default streaming), or both only the new ones when the ids' count is not
 *     meta_info.completion_tokens (sglang's incremental streaming); meta_info.completion_tokens the tokens so
 *     far;
 *   /v1/completions, /v1/chat/completions: the text deltas of choice 0 (choices[0].text, delta.content) put
 *     together; tokens from usage.completion_tokens when an event carries it (continuous usage), else one
 *     per event that carries text (an engine streaming one token per event, as sglang and vLLM do by
 *     default).
 * The body that goes on: the client's body with the prompt extended by what the client has (/generate:
 * input_ids + output_ids, or text + text; completions: prompt + text; chat: an assistant message with the
 * text, "continue_final_message": true and "add_generation_prompt": false, as vLLM and sglang accept), the
 * token limits lowered by the tokens the client has (an absent limit: the engine's default, 128 for
 * /generate, 16 for completions; chat has none).
 * The rewrite of the new stream's events: the first stream's id; /generate's text and ids put behind what
 * the client has, its token counts moved from prompt to completion; OpenAI usage the same; chat's second
 * "role" dropped.
 */
#ifndef PDR_RESUME_H
#define PDR_RESUME_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include "buf.h"
#include "resume_read.h"
#include "rewrite.h"

/* Why the request (its body as the client sent it) cannot be moved: a short name ("n", "best_of", "echo",
 * "logprobs", "token_prompt", "input_embeds", "batch", "not_json"), or NULL when it can. */
const char *pdr_resume_refusal(pdr_route_t route, const char *body, size_t len);
/* The client's body parsed once for a migration: the JSON object (its reference is the caller's), or NULL
 * when the body is not one; *refusal as pdr_resume_refusal says it ("not_json" with NULL). */
json_t *pdr_resume_parse(pdr_route_t route, const char *body, size_t len, const char **refusal);

/* The body that asks a new pair to go on from what the client has (after pdr_resume_fold), and the base its
 * events are put behind, from the client's body as pdr_resume_parse gave it (NULL: not JSON), which it
 * extends in place (its reference stays the caller's). Returns a malloc'd NUL-terminated body (*out_len), or
 * NULL: with *nothing_left set when the client has every token the request allows (the stream only needs
 * its end), else with the reason in err. */
char *pdr_resume_body(pdr_resume_t *s, json_t *client, size_t *out_len, int *nothing_left, char *err,
                      size_t errlen);

/* One whole event of a migration's stream (ev, len: up to and including its empty line), as the client is to
 * see it, appended to out (at most cap): 0, PDR_ETOOBIG or PDR_ENOMEM. An event that is not JSON goes as it
 * is; one that says nothing the client lacks (chat's second role) is dropped. */
int pdr_resume_rewrite(pdr_resume_t *s, const char *ev, size_t len, pdr_buf_t *out, size_t cap);

/* The event that ends a stream whose client has every token but not the end: "data: [DONE]" when it has
 * not gone yet ("" otherwise). */
const char *pdr_resume_tail(const pdr_resume_t *s, size_t *len);

#endif
