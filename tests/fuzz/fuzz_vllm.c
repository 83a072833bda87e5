/*
 * Fuzz target for the vLLM PD rewrite (router/util/rewrite.c): the prefill, decode and release bodies built
 * from a client body, and the kv_transfer_params found in a prefill's answer. The input is used both
 * ways: as a client body (of /v1/completions when its first byte is even, else of chat) and as a
 * prefill's answer. Every body the router builds must be strict JSON (jansson; no duplicate top-level
 * key) with
 * the fields the protocol fixes; an accepted answer's span must be an object with "do_remote_prefill":
 * true; pdr__vllm_next (router/pd/pd_vllm.c) builds the decode and release bodies exactly when the answer
 * offers its KV. Built with libFuzzer when PDR_LIBFUZZER is defined; otherwise main() replays the files named
 * on the command line with mutations (ctest's router_vllm_fuzz_corpus).
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "err.h"
#include "pd_vllm.h"
#include "rewrite.h"

/* jansson cannot hold some valid JSON the router accepts and copies as it came: a key with a NUL
 * ("\u0000"), an integer beyond int64, a number beyond a double's range in an exponent form it refuses.
 * For an input jansson refuses, the bodies are checked by the router's scanner alone. */
static int input_beyond_jansson;

/* Strict JSON with an object at the top and no duplicate top-level key (the router's own scanner says
 * so; nested duplicates are the client's or the prefill's, copied as they came). NULL when jansson cannot
 * represent it (input_beyond_jansson). */
static json_t *must_parse(const char *s, size_t n)
{
    json_error_t e;
    json_t *j = json_loadb(s, n, JSON_ALLOW_NUL, &e);
    static pdr_jmember_t m[4096];
    size_t k;
    char why[160];
    if (j == NULL && input_beyond_jansson && pdr_json_scan_object(s, n, m, 4096, &k, why, sizeof(why)) == 0)
        return NULL;
    if (!json_is_object(j) || pdr_json_scan_object(s, n, m, 4096, &k, why, sizeof(why)) != 0) {
        fprintf(stderr, "fuzz_vllm: the router built bad JSON (%s): %.*s\n", j ? why : e.text, (int)n, s);
        abort();
    }
    return j;
}

static void check_leg(const pdr_pdreq_t *r, pdr_vllm_body_t kind, const char *kv, size_t kv_len)
{
    size_t n = 0;
    char *s = pdr_pdreq_build_vllm(r, kind, kv, kv_len, &n);
    if (s == NULL)
        return;
    if (strlen(s) != n)
        abort();
    json_t *j = must_parse(s, n);
    if (j == NULL) {
        free(s);
        return;
    }
    json_t *p = json_object_get(j, "kv_transfer_params");
    if (!json_is_object(p))
        abort();
    if (kind == PDR_VLLM_PREFILL && !json_is_true(json_object_get(p, "do_remote_decode")))
        abort();
    if (kind != PDR_VLLM_DECODE) {
        json_t *mt = json_object_get(j, "max_tokens");
        if (!json_is_false(json_object_get(j, "stream")) || !json_is_integer(mt) ||
            json_integer_value(mt) != 1 || json_object_get(j, "stream_options") != NULL ||
            json_object_get(j, "min_tokens") != NULL)
            abort();
    }
    if (kind != PDR_VLLM_PREFILL && !json_is_true(json_object_get(p, "do_remote_prefill")))
        abort();
    json_decref(j);
    free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *in = (const char *)data;
    char err[256];
    const char *kv = NULL;
    size_t kv_len = 0;
    err[0] = '\0';
    json_error_t je;
    json_t *whole = json_loadb(in, size, JSON_ALLOW_NUL, &je);
    input_beyond_jansson = whole == NULL;
    json_decref(whole);
    int have_kv = pdr_vllm_kv_params(in, size, &kv, &kv_len, err, sizeof(err)) == 0;
    if (have_kv) {
        if (kv < in || kv + kv_len > in + size)
            abort();
        /* The object as the decode reads it: a repeated key's last value counts (Python's json; jansson
         * without JSON_REJECT_DUPLICATES), as it does for the router. */
        json_error_t e;
        json_t *p = json_loadb(kv, kv_len, JSON_ALLOW_NUL, &e);
        if ((p != NULL || !input_beyond_jansson) &&
            (!json_is_object(p) || !json_is_true(json_object_get(p, "do_remote_prefill"))))
            abort();
        json_decref(p);
    } else if (err[0] == '\0') {
        abort();
    }
    pdr_pdreq_t r;
    pdr_route_t route = size > 0 && (data[0] & 1) ? PDR_ROUTE_CHAT : PDR_ROUTE_COMPLETIONS;
    if (pdr_pdreq_parse(route, in, size, &r, err, sizeof(err)) != 0)
        return 0;
    /* A known-good answer object when the input itself is none. */
    static const char fixed[] = "{\"do_remote_prefill\":true,\"remote_block_ids\":[1],\"remote_host\":\"h\"}";
    if (!have_kv) {
        kv = fixed;
        kv_len = sizeof(fixed) - 1;
    }
    check_leg(&r, PDR_VLLM_PREFILL, NULL, 0);
    check_leg(&r, PDR_VLLM_DECODE, kv, kv_len);
    check_leg(&r, PDR_VLLM_RELEASE, kv, kv_len);
    /* The input as the prefill's answer to this very request (router/pd/pd_vllm.c): both next bodies exactly
     * when the answer offers its KV. */
    pdr_vllm_next_t nx;
    int nrc = pdr__vllm_next(&r, in, size, &nx, err, sizeof(err));
    if (nrc == 0) {
        if (!have_kv)
            abort();
        size_t dl = 0;
        char *d = pdr_pdreq_build_vllm(&r, PDR_VLLM_DECODE, kv, kv_len, &dl);
        if (d != NULL && (dl != nx.decode_len || memcmp(d, nx.decode, dl) != 0))
            abort();
        free(d);
        json_decref(must_parse(nx.release, nx.release_len));
        free(nx.decode);
        free(nx.release);
    } else if ((nrc == PDR_EINVAL && have_kv) || nx.decode != NULL || nx.release != NULL) {
        abort();
    }
    pdr_pdreq_clear(&r);
    return 0;
}

#ifndef PDR_LIBFUZZER
#define PDR_REPLAY_MUTATIONS 200
#include "replay_main.h"
#endif
