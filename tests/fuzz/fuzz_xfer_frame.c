/*
 * Fuzz target for the transport's wire decoders (transport/wire.c): the input is read as a stream of
 * frames, exactly as a connection's receive path walks it (header, then the body or DATA prefix the
 * header announces). Built with -DPDR_LIBFUZZER for libFuzzer; otherwise main() replays the files or
 * directories given as arguments plus deterministic mutations of each, so ctest runs it over the seed
 * corpus (tests/fuzz/corpus/xfer/) under ASan/UBSan.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "wire.h"
#include "rdma.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t off = 0;
    while (size - off >= PDR_XFER_HDR_LEN) {
        struct pdr_xfer_hdr h;
        if (pdr__xfer_hdr_decode(data + off, &h) != 0)
            return 0; /* the connection would be closed here */
        off += PDR_XFER_HDR_LEN;
        size_t avail = size - off;
        if (h.type == PDR_XF_DATA) {
            if (avail < PDR_XFER_DATA_PFX)
                return 0;
            uint64_t xid, offset;
            pdr__xfer_data_pfx_decode(data + off, &xid, &offset);
            uint64_t n = h.len - PDR_XFER_DATA_PFX;
            (void)xid;
            (void)offset;
            if (n > avail - PDR_XFER_DATA_PFX)
                return 0;
            off += (size_t)h.len;
            continue;
        }
        if (h.len > avail)
            return 0;
        if (h.type == PDR_XF_FETCH) {
            struct pdr_xfer_fetch_desc d;
            if (pdr__xfer_fetch_decode(data + off, (size_t)h.len, &d) == 0) {
                uint64_t sum = 0;
                for (uint32_t i = 0; i < d.nseg; i++)
                    sum += pdr__get_u64(d.seglens + (size_t)i * 8);
                if (sum != d.total)
                    abort(); /* the decoder promised this */
                /* Re-encoding an accepted descriptor gives the same bytes back. */
                if (d.nseg <= 64) {
                    size_t lens[64];
                    uint8_t again[PDR_XFER_HDR_LEN + PDR_XFER_FETCH_FIXED + 64 * 8];
                    for (uint32_t i = 0; i < d.nseg; i++)
                        lens[i] = (size_t)pdr__get_u64(d.seglens + (size_t)i * 8);
                    size_t n = pdr__xfer_fetch_encode(again, sizeof(again), h.room, d.xid, d.total,
                                                      d.timeout_ms, lens, sizeof(size_t), d.nseg);
                    if (n != PDR_XFER_HDR_LEN + h.len ||
                        memcmp(again + PDR_XFER_HDR_LEN, data + off, (size_t)h.len))
                        abort();
                }
            }
        } else if (h.type == PDR_XF_HELLO) {
            struct pdr_xfer_hello hl;
            if (pdr__xfer_hello_decode(data + off, (size_t)h.len, &hl) == 0 &&
                (hl.index >= hl.nconns || strlen(hl.hostname) >= sizeof(hl.hostname)))
                abort();
        } else if (h.type == PDR_XF_FETCH_IPC) {
            struct pdr_xfer_fetch_desc d;
            struct pdr_xfer_ipc_desc ipc;
            if (pdr__xfer_fetch_ipc_decode(data + off, (size_t)h.len, &d, &ipc) == 0) {
                for (uint32_t i = 0; i < d.nseg; i++) {
                    uint32_t hi;
                    uint64_t o;
                    pdr__xfer_ipc_seg(&ipc, i, &hi, &o);
                    if (hi >= ipc.nhandles)
                        abort(); /* the decoder promised this */
                }
            }
        } else if (h.type == PDR_XF_FETCH_RDMA) {
            struct pdr_xfer_fetch_desc d;
            struct pdr_xfer_rdma_desc rd;
            if (pdr__xfer_fetch_rdma_decode(data + off, (size_t)h.len, &d, &rd) == 0) {
                /* The decoder promised a valid endpoint and a memory descriptor as long as the body says,
                 * whose header total is the FETCH total; the engine then unpacks the segments. */
                struct pdr_rdma_ep_info info;
                uint32_t mseg;
                uint64_t mtotal;
                if (pdr__rdma_unpack_ep(rd.ep, rd.eplen, &info) != 0 ||
                    pdr__rdma_peek_mem(rd.mem, rd.memlen, &mseg, &mtotal) != 0 || mtotal != d.total ||
                    mseg != rd.nseg || rd.mem + rd.memlen != data + off + h.len)
                    abort();
                struct pdr_rdma_seg segs[64];
                uint32_t ns;
                uint64_t tot;
                int rc = pdr__rdma_unpack_mem(rd.mem, rd.memlen, segs, 64, &ns, &tot);
                if (rc == 0 && (ns != rd.nseg || tot != d.total))
                    abort();
            }
        } else if (h.type == PDR_XF_RDMA_READY) {
            uint64_t xid;
            uint32_t qpn0;
            const uint8_t *ep;
            size_t eplen;
            struct pdr_rdma_ep_info info;
            if (pdr__xfer_rdma_ready_decode(data + off, (size_t)h.len, &xid, &qpn0, &ep, &eplen) == 0 &&
                (pdr__rdma_unpack_ep(ep, eplen, &info) != 0 || ep + eplen != data + off + h.len))
                abort();
        } else {
            struct pdr_xfer_ctl c;
            if (pdr__xfer_ctl_decode(h.type, data + off, (size_t)h.len, &c) == 0 && h.type == PDR_XF_ERROR &&
                (c.code <= PDR__ERR_FIRST || c.code >= PDR__ERR_LAST))
                abort();
        }
        off += (size_t)h.len;
    }
    return 0;
}

#ifndef PDR_LIBFUZZER
#define PDR_REPLAY_MUTATIONS 2000
#include "replay_main.h"
#endif
