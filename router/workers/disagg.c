/*
 * Conditional disaggregation's rule and the prompt measure it reads (see disagg.h). Pure functions, any
 * thread; pd/ gathers the inputs (the prefill pick's matched prefix, the prefills' saturation) and acts
 * on the result.
 */
#include "disagg.h"

#include <string.h>

const char *const pdr_disagg_decision_names[PDR_DISAGG__COUNT] = {"disaggregated", "short_prompt",
                                                                  "prefill_saturated"};

int pdr_disagg_enabled(const pdr_config_t *c)
{
    return c->disaggregation.min_prefill_tokens > 0 || c->disaggregation.min_prefill_chars > 0 ||
           c->disaggregation.skip_when_prefill_saturated;
}

pdr_disagg_decision_t pdr_disagg_decide(const pdr_config_t *c, const pdr_disagg_input_t *in)
{
    uint64_t min =
        (uint64_t)(in->tokens ? c->disaggregation.min_prefill_tokens : c->disaggregation.min_prefill_chars);
    uint64_t uncached = in->length > in->matched ? in->length - in->matched : 0;
    if (min > 0 && uncached < min)
        return PDR_DISAGG_SHORT_PROMPT;
    if (c->disaggregation.skip_when_prefill_saturated && in->prefill_saturated)
        return PDR_DISAGG_PREFILL_SATURATED;
    return PDR_DISAGG_DISAGGREGATED;
}

/* An array whose first element is an integer or an array of integers: token ids (the body was validated,
 * so the shape is uniform). */
static int is_token_prompt(const char *t, size_t len)
{
    size_t i = 0;
    int depth = 0;
    for (; i < len; i++) {
        char ch = t[i];
        if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r')
            continue;
        if (ch == '[' && depth < 2) {
            depth++;
            continue;
        }
        return depth > 0 && (ch == '-' || (ch >= '0' && ch <= '9'));
    }
    return 0;
}

void pdr_disagg_measure(const char *text, size_t len, size_t matched_bytes, pdr_disagg_input_t *out)
{
    memset(out, 0, sizeof(*out));
    if (text == NULL)
        return;
    if (matched_bytes > len)
        matched_bytes = len;
    if (!is_token_prompt(text, len)) {
        out->length = len;
        out->matched = matched_bytes;
        return;
    }
    /* Integers: maximal runs of digits (a sign or exponent never separates one; validated JSON). A run is
     * cached when a byte after it lies inside the matched prefix as well. */
    out->tokens = 1;
    int in_run = 0;
    for (size_t i = 0; i < len; i++) {
        int digit = text[i] >= '0' && text[i] <= '9';
        if (digit && !in_run) {
            out->length++;
        } else if (!digit && in_run && i < matched_bytes) {
            out->matched++;
        }
        in_run = digit;
    }
}
