/*
 * The vLLM PD protocol's leg bodies and KV release legs (see pd_vllm.h, and docs/architecture.md "vLLM
 * PD path").
 *
 * Why release legs: a vLLM prefill that answered with kv_transfer_params keeps the request's KV blocks
 * until a decode reads them, or until VLLM_NIXL_ABORT_REQUEST_TIMEOUT (480 s) passes. vLLM offers no
 * call to free them sooner, so when the client goes away (or the attempt fails) before the decode's
 * answer began, the router still sends the decode a copy of the request with max_tokens 1 and the
 * prefill's kv_transfer_params: the decode reads the KV, which frees it, and its one token is thrown
 * away. A release owns all its memory (the body, the header line), so the request may end first; it is
 * bounded by its own deadline and blocks nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "err.h"
#include "pd_vllm.h"
#include "router.h"
#include "util.h"

int pdr__vllm_next(const pdr_pdreq_t *pr, const char *answer, size_t len, pdr_vllm_next_t *out, char *err,
                   size_t errlen)
{
    const char *kv;
    size_t kv_len;
    memset(out, 0, sizeof(*out));
    int rc = pdr_vllm_kv_params(answer, len, &kv, &kv_len, err, errlen);
    if (rc != 0)
        return rc;
    out->decode = pdr_pdreq_build_vllm(pr, PDR_VLLM_DECODE, kv, kv_len, &out->decode_len);
    out->release = pdr_pdreq_build_vllm(pr, PDR_VLLM_RELEASE, kv, kv_len, &out->release_len);
    if (out->decode == NULL || out->release == NULL) {
        free(out->decode);
        free(out->release);
        memset(out, 0, sizeof(*out));
        snprintf(err, errlen, "out of memory");
        return PDR_ENOMEM;
    }
    return 0;
}

typedef struct vllm_release {
    pdr_leg_t leg;
    pdr_thread_t *t;
    char *body;
    char xrid[112]; /* "request ID", for the log */
} vllm_release_t;

static size_t release_data(pdr_leg_t *leg, const char *p, size_t n)
{
    (void)leg;
    (void)p;
    return n; /* the one token nobody reads */
}

static void release_done(pdr_leg_t *leg, int err)
{
    vllm_release_t *rel = leg->data;
    int outcome = err == PDR_ETIMEDOUT                                  ? PDR_KV_RELEASE_TIMEOUT
                  : err == 0 && leg->status >= 200 && leg->status < 300 ? PDR_KV_RELEASE_OK
                                                                        : PDR_KV_RELEASE_FAILED;
    rel->t->m.vllm_kv_release[outcome]++;
    if (outcome != PDR_KV_RELEASE_OK)
        pdr_warn("KV release (%s) failed: %s, status %ld; the prefill keeps that KV until its abort timeout",
                 rel->xrid, err != 0 ? pdr_strerror(err) : "answered", leg->status);
    rel->t->live--;
    free(rel->body);
    free(rel);
}

static const pdr_leg_cbs_t release_cbs = {release_data, release_done};

void pdr__vllm_release(pdr_thread_t *t, const char *url, char *body, size_t len, const char *const *headers,
                       const char *request_id, long connect_ms, long total_ms)
{
    vllm_release_t *rel = calloc(1, sizeof(*rel));
    /* Not once the shutdown deadline passed: the loop's upstream client is about to close. */
    if (rel == NULL || t->multi == NULL || pdr_router_shutting_down(t->r)) {
        t->m.vllm_kv_release[PDR_KV_RELEASE_FAILED]++;
        free(rel);
        free(body);
        return;
    }
    rel->t = t;
    rel->body = body;
    snprintf(rel->xrid, sizeof(rel->xrid), "request %s", request_id);
    if (pdr_leg_start(&rel->leg, t->multi, url, body, len, headers, connect_ms, total_ms, &release_cbs,
                      rel) != 0) {
        t->m.vllm_kv_release[PDR_KV_RELEASE_FAILED]++;
        free(rel->body);
        free(rel);
        return;
    }
    t->live++;
}
