/*
 * KV deadlines (kvdeadline.h): the deadline's arithmetic, the prompt's length in tokens, and the
 * process-wide failure counters (atomics: failures are rare, any loop counts them), rendered with the
 * link state of links.c for /metrics. Any thread.
 */
#include "kvdeadline.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "buf.h"
#include "defaults.h"
#include "disagg.h"
#include "links.h"
#include "pool.h"
#include "token_ids.h"

const char *const pdr_kv_cause_names[PDR_KVC__COUNT] = {"deadline",      "shim_failed",  "peer_gone",
                                                        "prefill_error", "decode_error", "incarnation"};
const char *const pdr_kvf_backend_names[PDR_KVF__COUNT] = {"tcp", "rdma", "cuda_ipc", "unknown", "other"};
const char *const pdr_kv_tokens_how_names[4] = {"ids", "tokenizer", "estimate", "none"};

static uint64_t failures[PDR_KVC__COUNT][PDR_KVF__COUNT];

pdr_kv_cause_t pdr_kv_cause_parse(const char *name)
{
    for (int c = 0; name != NULL && c < PDR_KVC__COUNT; c++)
        if (strcmp(name, pdr_kv_cause_names[c]) == 0)
            return (pdr_kv_cause_t)c;
    return PDR_KVC_SHIM_FAILED;
}

pdr_kvf_backend_t pdr_kvf_backend_parse(const char *name)
{
    if (name == NULL || name[0] == '\0' || strcmp(name, "unknown") == 0)
        return PDR_KVF_UNKNOWN;
    for (int b = 0; b < PDR_KVF_UNKNOWN; b++)
        if (strcmp(name, pdr_kvf_backend_names[b]) == 0)
            return (pdr_kvf_backend_t)b;
    return PDR_KVF_OTHER;
}

void pdr_kv_count_failure(pdr_kv_cause_t cause, pdr_kvf_backend_t backend)
{
    if ((unsigned)cause < PDR_KVC__COUNT && (unsigned)backend < PDR_KVF__COUNT)
        __atomic_add_fetch(&failures[cause][backend], 1, __ATOMIC_RELAXED);
}

uint64_t pdr_kv_failures(pdr_kv_cause_t cause, pdr_kvf_backend_t backend)
{
    if ((unsigned)cause >= PDR_KVC__COUNT || (unsigned)backend >= PDR_KVF__COUNT)
        return 0;
    return __atomic_load_n(&failures[cause][backend], __ATOMIC_RELAXED);
}

uint64_t pdr_kv_prompt_tokens(const pdr_pdreq_t *pr, const pdr_tokenizer_t *tk, pdr_kv_tokens_how_t *how,
                              int *unknown_counted)
{
    static const char *const keys[] = {"input_ids", "text", "prompt", "messages"};
    const char *text = NULL;
    size_t len = 0;
    for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]) && text == NULL; k++)
        for (size_t i = 0; i < pr->n; i++)
            if (pr->m[i].key_len == strlen(keys[k]) && memcmp(pr->m[i].key, keys[k], pr->m[i].key_len) == 0) {
                text = pr->m[i].v.p;
                len = pr->m[i].v.len;
                break;
            }
    *how = PDR_KVT_ESTIMATE;
    if (text == NULL)
        return 0;
    pdr_disagg_input_t in;
    pdr_disagg_measure(text, len, 0, &in);
    if (in.tokens) { /* integers: one token each, over every item of a batch */
        *how = PDR_KVT_IDS;
        return in.length;
    }
    pdr_prompt_tokens_t tok = {NULL, 0, NULL, 0};
    pdr_request_token_ids_or(pr, tk, &tok, PDR_FB_TOKENIZE_KV_DEADLINE, unknown_counted);
    if (tok.n > 0) {
        free(tok.ids);
        *how = PDR_KVT_TOKENIZER;
        return tok.n;
    }
    free(tok.ids);
    return (len + PDR_KV_BYTES_PER_TOKEN - 1) / PDR_KV_BYTES_PER_TOKEN;
}

uint64_t pdr_kv_deadline_ms(int base_ms, int per_1k_ms, uint64_t tokens)
{
    uint64_t ms = base_ms > 0 ? (uint64_t)base_ms : 0;
    if (per_1k_ms > 0 && tokens > 0) {
        /* tokens is at most the body's bytes (limits.max_body_bytes, 1 GiB at most): no overflow. */
        ms += ((uint64_t)per_1k_ms * tokens + 1023) / 1024;
    }
    return ms < PDR_MAX_MS ? ms : PDR_MAX_MS;
}

/* Every piece of the text is one line of at most RENDER_LINE bytes (two targets of PDR_LINKS_TARGET and
 * a name and value, or a family's head): a series per cause and backend, two per link (at most
 * PDR_LINKS_MAX, links.h), and fewer than 16 heads. */
#define RENDER_LINE (2 * PDR_LINKS_TARGET + 256)
#define RENDER_CAP ((size_t)(PDR_KVC__COUNT * PDR_KVF__COUNT + 2 * PDR_LINKS_MAX + 16) * RENDER_LINE)

typedef struct {
    char *p;
    size_t len, cap;
    int oom; /* out of memory (RENDER_CAP is never reached) */
} out_t;

__attribute__((format(printf, 2, 3))) static void put(out_t *o, const char *fmt, ...)
{
    if (o->oom)
        return;
    pdr_buf_t b = {o->p, o->len, o->cap};
    va_list ap;
    va_start(ap, fmt);
    if (pdr_buf_vprintf(&b, RENDER_CAP, fmt, ap) != 0)
        o->oom = 1;
    va_end(ap);
    o->p = b.p, o->len = b.len, o->cap = b.cap;
}

char *pdr_kv_render_metrics(size_t *len)
{
    out_t o = {0};
    put(&o,
        "# HELP pdr_kv_transfer_failures_total KV transfers that failed (the request was retried on a new "
        "pair or ended with an error), by cause and transport backend.\n"
        "# TYPE pdr_kv_transfer_failures_total counter\n");
    for (int c = 0; c < PDR_KVC__COUNT; c++)
        for (int b = 0; b < PDR_KVF__COUNT; b++) {
            uint64_t v = pdr_kv_failures((pdr_kv_cause_t)c, (pdr_kvf_backend_t)b);
            if (v != 0 || b == PDR_KVF_UNKNOWN)
                put(&o, "pdr_kv_transfer_failures_total{cause=\"%s\",backend=\"%s\"} %llu\n",
                    pdr_kv_cause_names[c], pdr_kvf_backend_names[b], (unsigned long long)v);
        }
    size_t cap = pdr_links_count() + 1;
    pdr_link_info_t *ls = malloc(sizeof(*ls) * cap);
    size_t suspect = 0, n = ls != NULL ? pdr_links_snapshot(ls, cap, &suspect) : 0;
    put(&o,
        "# HELP pdr_links_suspect Prefill->decode links marked suspect by KV failures (cleared by a "
        "completed transfer on the link).\n# TYPE pdr_links_suspect gauge\npdr_links_suspect %zu\n",
        suspect);
    put(&o, "# HELP pdr_link_suspect 1 while the prefill->decode link is suspect; links that never failed "
            "have no series.\n# TYPE pdr_link_suspect gauge\n");
    for (size_t i = 0; i < n; i++)
        put(&o, "pdr_link_suspect{prefill=\"%s\",decode=\"%s\"} %d\n", ls[i].prefill, ls[i].decode,
            ls[i].suspect);
    put(&o, "# HELP pdr_link_consecutive_failures KV failures on the link since its last completed "
            "transfer.\n# TYPE pdr_link_consecutive_failures gauge\n");
    for (size_t i = 0; i < n; i++)
        put(&o, "pdr_link_consecutive_failures{prefill=\"%s\",decode=\"%s\"} %llu\n", ls[i].prefill,
            ls[i].decode, (unsigned long long)ls[i].consecutive_failures);
    free(ls);
    if (o.oom) {
        free(o.p);
        return NULL;
    }
    *len = o.len;
    return o.p;
}
