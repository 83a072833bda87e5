/*
 * Fuzz target for the KV event decoder (routing/kvevents.c) and the index it feeds (routing/kvindex.c).
 * The input is one payload (the third frame of a message). Invariants:
 *   - pdr_kv_batch_decode returns 0, PDR_EPROTO (with a non-empty message), PDR_ETOOBIG or PDR_ENOMEM,
 *     and a refused payload leaves the batch empty;
 *   - a decoded BlockStored has len(token_ids) == len(block_hashes) * block_size, block_size 1..4096;
 *   - applying it to a small index (as worker 1, then worker 2 with the next number) never takes the
 *     index past its cap, and a lookup of the stored tokens matches at most the blocks they span.
 * Built with libFuzzer when PDR_LIBFUZZER is defined; otherwise a main() replays the files named on the
 * command line with deterministic mutations (ctest's kvevents_fuzz_corpus).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "kvevents.h"

static void fail(const char *what, size_t size)
{
    fprintf(stderr, "kvevents: %s (input of %zu bytes)\n", what, size);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pdr_kv_batch_t b;
    char err[256];
    int rc = pdr_kv_batch_decode(data, size, &b, err, sizeof(err));
    if (rc != 0) {
        if (rc != PDR_EPROTO && rc != PDR_ETOOBIG && rc != PDR_ENOMEM)
            fail("an unexpected error code", size);
        if (b.n_events != 0 || b.events != NULL || err[0] == '\0')
            fail("a refused payload left events or no message", size);
        return 0;
    }
    for (size_t i = 0; i < b.n_events; i++) {
        const pdr_kv_event_t *e = &b.events[i];
        if (e->kind == PDR_KV_BLOCK_STORED && (e->block_size == 0 || e->block_size > PDR_KV_MAX_BLOCK_SIZE ||
                                               e->n_tokens != e->n_hashes * e->block_size))
            fail("a stored event with inconsistent sizes", size);
    }
    pdr_kvindex_params_t p = {8192, 1};
    int err2;
    pdr_kvindex_t *ix = pdr_kvindex_new(&p, &err2);
    if (ix == NULL)
        fail("no index", size);
    (void)pdr_kvindex_apply(ix, 1, 0, &b, NULL);
    (void)pdr_kvindex_apply(ix, 2, 7, &b, NULL);
    (void)pdr_kvindex_apply(ix, 2, 8, &b, NULL);
    pdr_kvindex_stats_t st;
    pdr_kvindex_stats(ix, &st);
    if (st.bytes > p.max_bytes)
        fail("the index went past its cap", size);
    uint64_t ws[3] = {1, 2, 3};
    pdr_kvindex_match_t m[3];
    for (size_t i = 0; i < b.n_events; i++) {
        const pdr_kv_event_t *e = &b.events[i];
        if (e->kind != PDR_KV_BLOCK_STORED || e->n_tokens == 0)
            continue;
        pdr_kvindex_match(ix, e->tokens, e->n_tokens, ws, 3, m);
        for (int k = 0; k < 3; k++)
            if (m[k].block_size != 0 && (uint64_t)m[k].blocks * m[k].block_size > e->n_tokens)
                fail("a match longer than the prompt", size);
    }
    pdr_kvindex_free(ix);
    pdr_kv_batch_free(&b);
    return 0;
}

#ifndef PDR_LIBFUZZER
#define PDR_REPLAY_MUTATIONS 500
#include "replay_main.h"
#endif
