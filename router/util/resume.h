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
#include "buf.h"
#include "rewrite.h"

/* The log of relayed events is read back into the state once it holds this much (and before a migration):
 * the state, not the log, is what a long stream keeps. */
#define PDR_RESUME_LOG_FOLD (64u * 1024u)

typedef struct pdr_resume {
    pdr_route_t route;
    size_t max_text; /* the text a stream may carry to a new pair (migration.max_bytes) */
    pdr_buf_t log;   /* whole events relayed to the client, not read back yet */
    pdr_buf_t text;  /* the answer's text the client has */
    int64_t *ids;    /* /generate: the output ids the client has (have_ids) */
    size_t n_ids, cap_ids;
    uint64_t tokens; /* completion tokens the client has */
    char id[128];    /* the first stream's id ("id"; /generate: meta_info.id), "" until seen */
    /* What the current stream's prompt already holds (set by pdr_resume_body): its events are put behind it.
     */
    size_t base_text, base_ids;
    uint64_t base_tokens;
    unsigned resumed : 1;  /* the current stream is a migration's: its events are rewritten */
    unsigned have_ids : 1; /* /generate's events carried output_ids */
    unsigned finished : 1; /* an event carried a finish_reason */
    unsigned done : 1;     /* "data: [DONE]" went */
    unsigned bad : 1;      /* an event could not be read, or the text outgrew max_text: no migration */
    /* /generate: the first events were read (decided), and each held everything so far (cumulative, sglang's
     * default): only the last data event of each send is kept, not every event. */
    unsigned decided : 1, cumulative : 1;
} pdr_resume_t;

void pdr_resume_init(pdr_resume_t *s, pdr_route_t route, size_t max_text);
void pdr_resume_free(pdr_resume_t *s);

/* Whole events (each ending with an empty line) relayed to the client: kept, and read back once the log
 * holds PDR_RESUME_LOG_FOLD (a cumulative /generate stream keeps only its last data event). A stream that
 * cannot be read back is marked bad (no migration), never fails. */
void pdr_resume_note(pdr_resume_t *s, const char *p, size_t n);
/* Reads the log back into the state. 0, or -1 when the stream is bad. */
int pdr_resume_fold(pdr_resume_t *s);

/* Why the request (its body as the client sent it) cannot be moved: a short name ("n", "best_of", "echo",
 * "logprobs", "token_prompt", "input_embeds", "batch", "not_json"), or NULL when it can. */
const char *pdr_resume_refusal(pdr_route_t route, const char *body, size_t len);

/* The body that asks a new pair to go on from what the client has (after pdr_resume_fold), and the base its
 * events are put behind. Returns a malloc'd NUL-terminated body (*out_len), or NULL: with *nothing_left set
 * when the client has every token the request allows (the stream only needs its end), else with the reason
 * in err. */
char *pdr_resume_body(pdr_resume_t *s, const char *body, size_t len, size_t *out_len, int *nothing_left,
                      char *err, size_t errlen);

/* One whole event of a migration's stream (ev, len: up to and including its empty line), as the client is to
 * see it, appended to out (at most cap): 0, PDR_ETOOBIG or PDR_ENOMEM. An event that is not JSON goes as it
 * is; one that says nothing the client lacks (chat's second role) is dropped. */
int pdr_resume_rewrite(pdr_resume_t *s, const char *ev, size_t len, pdr_buf_t *out, size_t cap);

/* The end of the last whole event in p[0..n) (the offset just past its empty line), 0 when none ends. */
size_t pdr_resume_events_end(const char *p, size_t n);

/* The event that ends a stream whose client has every token but not the end: "data: [DONE]" when it has
 * not gone yet ("" otherwise). */
const char *pdr_resume_tail(const pdr_resume_t *s, size_t *len);

#endif
