/* Metric storage: each loop counts into its own set (pdr_metrics_t), the histograms and their bucket
 * sets, the SSE token counter. The Prometheus rendering of every family, these summed over the loops and
 * the other parts' own, is exposition.c's. Any thread, each on its own loop's set. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "metrics.h"

const char *const pdr_sidecar_outcome_names[PDR_SC__COUNT] = {"used",        "absent",    "malformed",
                                                              "not_in_pool", "unhealthy", "draining"};

const double pdr__metrics_buckets[PDR_BUCKETS__COUNT][PDR_HIST_BUCKETS] = {
    [PDR_BUCKETS_DEFAULT] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
                             30, 60},
    /* LLM request latencies: a short prompt's first token (5 ms) to a long generation (2 min). */
    [PDR_BUCKETS_LLM] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 10, 20, 30, 60, 120},
    /* Inter-token times: 1 ms (small models, big GPUs) to 1 s (overloaded decode). */
    [PDR_BUCKETS_TPOT] = {0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075,
                          0.1, 0.25, 0.5, 1},
};

void pdr_hist_observe_in(pdr_hist_t *h, pdr_buckets_t set, double v)
{
    h->counts[pdr_hist_bucket(pdr__metrics_buckets[set], v)]++;
    h->sum += v;
    h->count++;
}

void pdr_hist_observe(pdr_hist_t *h, double v)
{
    pdr_hist_observe_in(h, PDR_BUCKETS_DEFAULT, v);
}

/* Is the event that starts with head[0..len) a token: "data:" then neither [DONE] nor {"error" ...? A
 * head cut short by PDR_SSE_HEAD still decides: both markers fit well inside it. */
static int sse_is_token(const char *head, size_t len)
{
    if (len < 5 || memcmp(head, "data:", 5) != 0)
        return 0; /* a comment (": keep-alive"), an "event:" or "id:" line first: not counted */
    size_t i = 5;
    while (i < len && head[i] == ' ')
        i++;
    if (len - i >= 6 && memcmp(head + i, "[DONE]", 6) == 0)
        return 0;
    if (i < len && head[i] == '{') {
        i++;
        while (i < len && (head[i] == ' ' || head[i] == '\t'))
            i++;
        if (len - i >= 7 && memcmp(head + i, "\"error\"", 7) == 0)
            return 0;
    }
    return 1;
}

static void sse_keep(pdr_sse_counter_t *c, const char *p, size_t n)
{
    size_t room = PDR_SSE_HEAD - c->head_len;
    if (n > room)
        n = room;
    memcpy(c->head + c->head_len, p, n);
    c->head_len = (uint8_t)(c->head_len + n);
}

size_t pdr_sse_count_tokens(pdr_sse_counter_t *c, const char *p, size_t n)
{
    size_t tokens = 0, i = 0;
    while (i < n) {
        const char *nl = memchr(p + i, '\n', n - i);
        size_t end = nl != NULL ? (size_t)(nl - p) : n;
        if (end > i) {
            if (c->head_len < PDR_SSE_HEAD)
                sse_keep(c, p + i, end - i);
            c->prev_nl = 0;
        }
        if (nl == NULL)
            break;
        if (c->prev_nl) {
            /* A blank line: the event (if any bytes came) is complete. */
            if (c->head_len > 0 && sse_is_token(c->head, c->head_len))
                tokens++;
            c->head_len = 0;
            c->prev_nl = 0;
        } else {
            if (c->head_len > 0 && c->head_len < PDR_SSE_HEAD)
                sse_keep(c, "\n", 1);
            c->prev_nl = 1;
        }
        i = end + 1;
    }
    return tokens;
}

void pdr_metrics_count_request(pdr_metrics_t *m, int route, int status, double seconds, double ttfb)
{
    if (status < 100 || status > 599)
        status = 599;
    m->requests[route][status]++;
    pdr_hist_observe(&m->duration[route], seconds);
    if (ttfb >= 0)
        pdr_hist_observe(&m->ttfb[route], ttfb);
}
