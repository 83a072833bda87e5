/*
 * Conditional disaggregation: whether a PD request runs its prefill on a prefill worker at all. A request
 * whose uncached prompt is short gains little from a separate prefill (the KV transfer and the second hop
 * cost about what the prefill saves), and one that arrives while every prefill is saturated would only
 * queue there; either goes to one worker that runs the whole request: the decode itself (protocol vllm:
 * a vLLM decode serves a plain request) or a regular, non-disaggregated worker (protocol sglang: a
 * decode-mode sglang server cannot prefill). docs/config.md "disaggregation" has the settings.
 *
 * The decision is one pure function of the prompt's size, the prefix the prefill pick found cached and
 * whether the prefills are saturated, in one unit (tokens or bytes of prompt text) throughout, so any
 * policy that knows a matched length (cache_aware's tree in bytes, or engine-reported token counts) feeds
 * the same rule. Any thread.
 */
#ifndef PDR_DISAGG_H
#define PDR_DISAGG_H

#include <stddef.h>
#include <stdint.h>
#include "config.h"

typedef enum {
    PDR_DISAGG_DISAGGREGATED = 0, /* prefill and decode, as usual */
    PDR_DISAGG_SHORT_PROMPT,      /* the uncached part is under the threshold: no prefill */
    PDR_DISAGG_PREFILL_SATURATED, /* every serving prefill is at its in-flight threshold: no prefill */
    PDR_DISAGG__COUNT
} pdr_disagg_decision_t;

/* "disaggregated", "short_prompt", "prefill_saturated": the metric's label and the access log's value. */
extern const char *const pdr_disagg_decision_names[PDR_DISAGG__COUNT];

/* What the decision looks at. */
typedef struct pdr_disagg_input {
    int tokens;            /* 1: length and matched count tokens; 0: bytes of the prompt's JSON text */
    uint64_t length;       /* the prompt (all items of a batch) */
    uint64_t matched;      /* the prefix the chosen prefill holds already (0: none or unknown) */
    int prefill_saturated; /* every serving prefill is at disaggregation.prefill_saturated_inflight */
} pdr_disagg_input_t;

/* Any of c's disaggregation settings is on. */
int pdr_disagg_enabled(const pdr_config_t *c);

/* The rule: short_prompt when the threshold of the input's unit (min_prefill_tokens or min_prefill_chars)
 * is set and length - matched is below it; else prefill_saturated when skip_when_prefill_saturated is on
 * and in->prefill_saturated; else disaggregated. Pure. */
pdr_disagg_decision_t pdr_disagg_decide(const pdr_config_t *c, const pdr_disagg_input_t *in);

/* Measures the prompt member's raw JSON text[0..len) (the routing text: text, prompt, messages or
 * input_ids), with matched_bytes of it found cached: a token prompt (an array of integers, or of arrays of
 * integers) counts its integers, and matched the integers wholly inside the matched bytes; any other
 * prompt counts bytes. text NULL: length 0. */
void pdr_disagg_measure(const char *text, size_t len, size_t matched_bytes, pdr_disagg_input_t *out);

#endif
