/*
 * Fall-backs (fallback.c): places where the router tries one way, fails, and goes on another. None is
 * silent: each is counted in pdr_fallbacks_total{reason} and logged (warn) at most once a minute per
 * reason, the line saying how many were not logged since the last. Any thread.
 */
#ifndef PDR_FALLBACK_H
#define PDR_FALLBACK_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    /* The prompt's token ids (precise_prefix, conditional disaggregation) could not be read: the routing
     * decision uses the prompt's text (the prefix tree, the text's length). */
    PDR_FB_TOKENIZE_ROUTING = 0,
    /* Nor for the KV deadline: its prompt length is the text's bytes / 4. */
    PDR_FB_TOKENIZE_KV_DEADLINE,
    /* Nor for decode admission: the prompt's tokens are estimated from its bytes. */
    PDR_FB_TOKENIZE_KV_ADMISSION,
    /* precise_prefix: a candidate's block size had no hashes of the prompt (a fifth distinct size among
     * the candidates, or no memory): its match comes from the prefix tree. Counted on loop 0's KV events
     * tick (once a second), from the index's own count. */
    PDR_FB_KV_INDEX_UNHASHED,
    /* load.poll_ms is on, but a candidate's engine load is unknown (its poll failed, timed out or answered
     * garbage, or is older than three polls) and no shim reports for it: a policy that reads loads weighs
     * the router's own count of its requests. Counted per candidate and pick. */
    PDR_FB_ENGINE_LOAD_UNKNOWN,
    /* A chat request's messages could not go through the model's chat template (it raised, called something
     * undefined, passed a limit): the request has no token ids (and the reason that needed them counts its
     * own fall-back too). */
    PDR_FB_CHAT_TEMPLATE,
    /* precise_prefix: a candidate the index knows was not in sync (cold): its match came from the prefix
     * tree. Counted per candidate on loop 0's KV events tick, from the index's own count. */
    PDR_FB_KV_INDEX_COLD,
    /* A request needed its prompt's token ids (precise_prefix's routing, the KV deadline's length, decode
     * admission) for a text or chat prompt, and no tokenizer applies to its model (its pool has none and
     * there is no top-level one): each of those estimates or routes by the text. Counted once per request;
     * the log line names the model. */
    PDR_FB_UNKNOWN_MODEL,
    /* Sidecar mode: the prefill the request's header names is draining: the prefill policy picks another
     * (router/pd/sidecar.c). */
    PDR_FB_SIDECAR_DRAINING,
    PDR_FB__COUNT
} pdr_fallback_t;

/* The metric's reason labels: "tokenize_routing", "tokenize_kv_deadline", "tokenize_kv_admission",
 * "kv_index_unhashed", "engine_load_unknown", "chat_template", "kv_index_cold", "unknown_model",
 * "sidecar_draining". */
extern const char *const pdr_fallback_names[PDR_FB__COUNT];

/* Counts one fall-back; logs it unless one of the same reason was logged less than a minute ago. why
 * says what failed (a phrase: "the tokenizer refused the prompt (PDR_ENOTSUP: ...)"). */
void pdr_fallback(pdr_fallback_t reason, const char *why);
/* As pdr_fallback, for n fall-backs seen at once (n 0: nothing). */
void pdr_fallback_n(pdr_fallback_t reason, uint64_t n, const char *why);
uint64_t pdr_fallback_count(pdr_fallback_t reason);
/* The pdr_fallbacks_total family (malloc'd text, *len bytes), or NULL. */
char *pdr_fallback_render_metrics(size_t *len);

#endif
