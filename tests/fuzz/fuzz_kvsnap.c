/*
 * Fuzz target for the precise prefix index's snapshot decoder (routing/kvindex_snapshot.c) and the import
 * it feeds (routing/kvindex.c). The input is a snapshot file; its last 4 bytes are replaced by the CRC32C
 * of the rest first, so that the fuzzer reaches the checks behind the checksum. Invariants:
 *   - pdr_kvsnap_decode returns 0 or PDR_EPROTO, PDR_ENOTSUP, PDR_ECONFIG, PDR_ETOOBIG, PDR_ENOMEM with a
 *     non-empty message and nothing allocated;
 *   - a decoded snapshot's entries name its workers, each with a block size, and re-encoding it gives the
 *     same bytes back;
 *   - importing it into a small index never takes the index past its cap, and loads at most its entries.
 * Built with libFuzzer when PDR_LIBFUZZER is defined; otherwise a main() replays the files named on the
 * command line with deterministic mutations (ctest's kvsnap_fuzz_corpus).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "kvsnap.h"

/* The largest input worked on: bigger ones are refused by the size check alone. */
#define FUZZ_MAX 65536

static void fail(const char *what, size_t size)
{
    fprintf(stderr, "kvsnap: %s (input of %zu bytes)\n", what, size);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > FUZZ_MAX)
        return 0;
    uint8_t *in = malloc(size + 1);
    if (in == NULL)
        return 0;
    memcpy(in, data, size);
    if (size >= 4) {
        uint32_t crc = pdr_crc32c(0, in, size - 4);
        for (int i = 0; i < 4; i++)
            in[size - 4 + (size_t)i] = (uint8_t)(crc >> (8 * i));
    }
    pdr_kvsnap_t s;
    char msg[256] = "";
    int rc = pdr_kvsnap_decode(in, size, 1 << 20, &s, msg, sizeof(msg));
    if (rc != 0) {
        if (rc != PDR_EPROTO && rc != PDR_ENOTSUP && rc != PDR_ECONFIG && rc != PDR_ETOOBIG &&
            rc != PDR_ENOMEM)
            fail("an unexpected error code", size);
        if (msg[0] == '\0' || s.workers != NULL || s.entries != NULL)
            fail("a refused snapshot left arrays or no message", size);
        free(in);
        return 0;
    }
    for (size_t i = 0; i < s.n_entries; i++)
        if (s.entries[i].worker >= s.n_workers || s.workers[s.entries[i].worker].block_size == 0)
            fail("an entry names no worker with blocks", size);
    char *again = NULL;
    size_t len = 0;
    if (pdr_kvsnap_encode(&s, 1 << 20, &again, &len, msg, sizeof(msg)) != 0 || len != size ||
        memcmp(again, in, size) != 0)
        fail("re-encoding a decoded snapshot gave other bytes", size);
    free(again);
    for (size_t i = 0; i < s.n_workers; i++)
        s.workers[i].id = 1 + i % 3; /* some ids repeat: the later worker is skipped */
    pdr_kvindex_params_t p = {8192, 1};
    int err;
    pdr_kvindex_t *ix = pdr_kvindex_new(&p, &err);
    if (ix == NULL)
        fail("no index", size);
    uint64_t loaded = 0;
    rc = pdr_kvindex_import(ix, &s, &loaded);
    pdr_kvindex_stats_t st;
    pdr_kvindex_stats(ix, &st);
    if ((rc != 0 && rc != PDR_ENOMEM) || st.bytes > p.max_bytes || loaded > s.n_entries ||
        st.entries > loaded)
        fail("the import broke the index's bounds", size);
    pdr_kvindex_free(ix);
    pdr_kvsnap_free(&s);
    free(in);
    return 0;
}

#ifndef PDR_LIBFUZZER
#define PDR_REPLAY_MUTATIONS 500
#include "replay_main.h"
#endif
