/*
 * Fuzz target for the RDMA descriptor decoders (transport/rdma_wire.c): every input is offered to the
 * endpoint-info decoder and to the memory-descriptor decoder. An accepted input must re-encode to the
 * same bytes, a memory descriptor's segments must sum to its total, and a write plan over it must
 * succeed. Built with -DPDR_LIBFUZZER for libFuzzer; otherwise main() replays the files or directories
 * given as arguments plus deterministic mutations of each (ctest runs it over tests/fuzz/corpus/rdma/).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "rdma.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_FUZZ_SEGS 256

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct pdr_rdma_ep_info ep;
    if (pdr__rdma_unpack_ep(data, size, &ep) == 0) {
        uint8_t again[PDR_RDMA_EP_MAX_BYTES];
        size_t n = pdr__rdma_pack_ep(&ep, again, sizeof(again));
        if (n != size || memcmp(again, data, size) != 0)
            abort();
    }

    static struct pdr_rdma_seg segs[MAX_FUZZ_SEGS];
    uint32_t nseg = 0, pn = 0;
    uint64_t total = 0, ptotal = 0;
    int rc = pdr__rdma_unpack_mem(data, size, segs, MAX_FUZZ_SEGS, &nseg, &total);
    int prc = pdr__rdma_peek_mem(data, size, &pn, &ptotal);
    if (rc == 0) {
        if (prc != 0 || pn != nseg || ptotal != total)
            abort();
        uint64_t sum = 0;
        for (uint32_t i = 0; i < nseg; i++)
            sum += segs[i].len;
        if (sum != total)
            abort();
        static uint8_t again[PDR_RDMA_MEM_FIXED + MAX_FUZZ_SEGS * PDR_RDMA_MEM_PER_SEG];
        size_t n = pdr__rdma_pack_mem(segs, nseg, again, sizeof(again));
        if (n != size || memcmp(again, data, size) != 0)
            abort();
        /* A plan into this memory from one local segment of the same size (small totals only). */
        if (total < (1ull << 36)) {
            struct pdr_rdma_seg local = {0x100000, total, 1};
            struct pdr_rdma_plan_limits lim = {1u << 31, 0, 3};
            size_t nwr;
            uint32_t nb;
            if (pdr__rdma_plan(&local, 1, segs, nseg, &lim, 42, NULL, 0, &nwr, &nb) != 0 || nwr < 2)
                abort();
        }
    } else if (rc == PDR_ETOOBIG) {
        if (prc != 0 || pn <= MAX_FUZZ_SEGS)
            abort();
    } else if (rc != PDR_EPROTO) {
        abort();
    }
    return 0;
}

#ifndef PDR_LIBFUZZER
#define PDR_REPLAY_MUTATIONS 5000
#include "replay_main.h"
#endif
