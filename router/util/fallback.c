/* Counted and rate-limited fall-backs: see fallback.h. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "fallback.h"
#include "ratelog.h"
#include "util.h"

#define FALLBACK_LOG_PERIOD_NS (60ull * 1000000000ull)

const char *const pdr_fallback_names[] = {
    "tokenize_routing",  "tokenize_kv_deadline", "tokenize_kv_admission",
    "kv_index_unhashed", "engine_load_unknown",  "chat_template",
    "kv_index_cold",     "unknown_model",        "sidecar_draining"};

/* What the router does instead, for the log line. */
static const char *const instead[] = {
    "routing uses the prompt's text (the prefix tree) instead of its token ids",
    "the KV deadline counts the prompt's bytes / 4 as its tokens",
    "decode admission estimates the prompt's tokens from its bytes (kv_admission.prompt_bytes_per_token)",
    "precise_prefix takes that worker's match from the prefix tree",
    "the policy weighs the router's own count of that worker's requests",
    "the chat request has no token ids (the prefix tree routes it; what else needs them estimates)",
    "precise_prefix takes that worker's match from the prefix tree until its events are in sync",
    "the request has no token ids (the prefix tree routes it; what else needs them estimates)",
    "the prefill policy picks another prefill of the pool",
};

/* Every reason has its name and its line (a missing one would print NULL). */
_Static_assert(sizeof(pdr_fallback_names) / sizeof(pdr_fallback_names[0]) == PDR_FB__COUNT,
               "a fall-back without its name");
_Static_assert(sizeof(instead) / sizeof(instead[0]) == PDR_FB__COUNT, "a fall-back without its line");

static uint64_t counts[PDR_FB__COUNT];
static pdr_ratelog_t logs[PDR_FB__COUNT];

void pdr_fallback(pdr_fallback_t reason, const char *why)
{
    pdr_fallback_n(reason, 1, why);
}

void pdr_fallback_n(pdr_fallback_t reason, uint64_t n, const char *why)
{
    if ((unsigned)reason >= PDR_FB__COUNT || n == 0)
        return;
    __atomic_add_fetch(&counts[reason], n, __ATOMIC_RELAXED);
    uint64_t suppressed;
    if (!pdr_ratelog_take(&logs[reason], pdr_now_ns(), FALLBACK_LOG_PERIOD_NS, &suppressed)) {
        if (n > 1) /* the rest of the batch: not logged either */
            __atomic_add_fetch(&logs[reason].suppressed, n - 1, __ATOMIC_RELAXED);
        return;
    }
    suppressed += n - 1;
    pdr_warn("fallback %s: %s: %s (counted in pdr_fallbacks_total, logged at most once a minute; %" PRIu64
             " more since the last line)",
             pdr_fallback_names[reason], why, instead[reason], suppressed);
}

uint64_t pdr_fallback_count(pdr_fallback_t reason)
{
    return (unsigned)reason < PDR_FB__COUNT ? __atomic_load_n(&counts[reason], __ATOMIC_RELAXED) : 0;
}

char *pdr_fallback_render_metrics(size_t *len)
{
    size_t cap = 512 + 96 * PDR_FB__COUNT;
    char *p = malloc(cap);
    if (p == NULL)
        return NULL;
    int n = snprintf(p, cap,
                     "# HELP pdr_fallbacks_total Times the router could not do something one way and did it "
                     "another, by reason (each logged at most once a minute per reason).\n"
                     "# TYPE pdr_fallbacks_total counter\n");
    for (int i = 0; i < PDR_FB__COUNT && n > 0 && (size_t)n < cap; i++)
        n += snprintf(p + n, cap - (size_t)n, "pdr_fallbacks_total{reason=\"%s\"} %" PRIu64 "\n",
                      pdr_fallback_names[i], pdr_fallback_count((pdr_fallback_t)i));
    if (n < 0 || (size_t)n >= cap) {
        free(p);
        return NULL;
    }
    *len = (size_t)n;
    return p;
}
