/*
 * The transport's wire codecs (transport/wire.c): every frame type round-trips, and each malformed
 * header or body is refused with PDR_EPROTO (bad magic, version, type, flags, lengths past the limits,
 * FETCH segment lengths that do not add up or overflow, unknown ERROR codes, HELLO indexes and strings,
 * CUDA IPC tables whose handle indexes or lengths are wrong, RDMA frames whose endpoint or memory
 * descriptor is malformed, whose memory total differs from the FETCH total, or whose lengths are off).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "wire.h"
#include "rdma.h"
#include "test_shim_util.h"
#include "runner.h"

static void test_header(void)
{
    uint8_t b[PDR_XFER_HDR_LEN];
    struct pdr_xfer_hdr h;
    pdr__xfer_hdr_encode(b, PDR_XF_CANCEL, 0x1122334455667788ull, 8);
    CHECK(memcmp(b, "PDXF", 4) == 0); /* the magic reads as text on the wire */
    CHECK(pdr__xfer_hdr_decode(b, &h) == 0);
    CHECK(h.type == PDR_XF_CANCEL && h.room == 0x1122334455667788ull && h.len == 8 && h.version == 1);
    CHECK(b[8] == 0x88); /* little-endian */

    uint8_t bad[PDR_XFER_HDR_LEN];
    memcpy(bad, b, sizeof(b));
    bad[0] ^= 1;
    CHECK(pdr__xfer_hdr_decode(bad, &h) == PDR_EPROTO); /* magic */
    memcpy(bad, b, sizeof(b));
    bad[4] = 2;
    CHECK(pdr__xfer_hdr_decode(bad, &h) == PDR_EPROTO); /* version */
    memcpy(bad, b, sizeof(b));
    bad[6] = 1;
    CHECK(pdr__xfer_hdr_decode(bad, &h) == PDR_EPROTO); /* reserved flags */
    for (int t = 0; t < 256; t++) {
        pdr__xfer_hdr_encode(bad, (uint8_t)t, 1, 16);
        int ok = pdr__xfer_hdr_decode(bad, &h) == 0;
        CHECK(ok == (t == PDR_XF_DONE || t == PDR_XF_ACK || t == PDR_XF_ERROR || t == PDR_XF_DATA ||
                     t == PDR_XF_IPC_DONE));
    }
    /* Length limits per type. */
    pdr__xfer_hdr_encode(bad, PDR_XF_DATA, 1, PDR_XFER_DATA_PFX + PDR_XFER_MAX_CHUNK);
    CHECK(pdr__xfer_hdr_decode(bad, &h) == 0);
    pdr__xfer_hdr_encode(bad, PDR_XF_DATA, 1, PDR_XFER_DATA_PFX + PDR_XFER_MAX_CHUNK + 1);
    CHECK(pdr__xfer_hdr_decode(bad, &h) == PDR_EPROTO);
    pdr__xfer_hdr_encode(bad, PDR_XF_DATA, 1, UINT64_MAX);
    CHECK(pdr__xfer_hdr_decode(bad, &h) == PDR_EPROTO);
    pdr__xfer_hdr_encode(bad, PDR_XF_DATA, 1, 15);
    CHECK(pdr__xfer_hdr_decode(bad, &h) == PDR_EPROTO);
    pdr__xfer_hdr_encode(bad, PDR_XF_FETCH, 1, PDR_XFER_FETCH_FIXED + 8ull * PDR_XFER_WIRE_MAX_SEGS + 8);
    CHECK(pdr__xfer_hdr_decode(bad, &h) == PDR_EPROTO);
    pdr__xfer_hdr_encode(bad, PDR_XF_FETCH, 1, PDR_XFER_FETCH_FIXED + 4);
    CHECK(pdr__xfer_hdr_decode(bad, &h) == PDR_EPROTO);
    pdr__xfer_hdr_encode(bad, PDR_XF_PING, 1, 0);
    CHECK(pdr__xfer_hdr_decode(bad, &h) == PDR_EPROTO); /* PING carries no room */
    pdr__xfer_hdr_encode(bad, PDR_XF_PING, 0, 0);
    CHECK(pdr__xfer_hdr_decode(bad, &h) == 0);
    printf("ok header\n");
}

static void test_fetch(void)
{
    size_t lens[5] = {1, 0, 4096, 7, 1u << 20};
    uint64_t total = 1 + 0 + 4096 + 7 + (1u << 20);
    uint8_t buf[256];
    CHECK(pdr__xfer_fetch_encode(buf, 10, 9, 3, total, 500, lens, sizeof(size_t), 5) == 0); /* too small */
    size_t n = pdr__xfer_fetch_encode(buf, sizeof(buf), 9, 3, total, 500, lens, sizeof(size_t), 5);
    CHECK(n == pdr__xfer_fetch_size(5));
    struct pdr_xfer_hdr h;
    CHECK(pdr__xfer_hdr_decode(buf, &h) == 0 && h.type == PDR_XF_FETCH && h.len == n - PDR_XFER_HDR_LEN);
    struct pdr_xfer_fetch_desc d;
    CHECK(pdr__xfer_fetch_decode(buf + PDR_XFER_HDR_LEN, (size_t)h.len, &d) == 0);
    CHECK(d.xid == 3 && d.total == total && d.timeout_ms == 500 && d.nseg == 5);
    CHECK(pdr__get_u64(d.seglens + 16) == 4096);
    /* A body whose nseg disagrees with its length. */
    CHECK(pdr__xfer_fetch_decode(buf + PDR_XFER_HDR_LEN, (size_t)h.len - 8, &d) == PDR_EPROTO);
    /* Segment lengths that do not add up to total. */
    pdr__put_u64(buf + PDR_XFER_HDR_LEN + 8, total + 1);
    CHECK(pdr__xfer_fetch_decode(buf + PDR_XFER_HDR_LEN, (size_t)h.len, &d) == PDR_EPROTO);
    /* Segment lengths that overflow 64 bits. */
    size_t big[2] = {SIZE_MAX, 2};
    n = pdr__xfer_fetch_encode(buf, sizeof(buf), 9, 3, 1, 0, big, sizeof(size_t), 2);
    CHECK(pdr__xfer_fetch_decode(buf + PDR_XFER_HDR_LEN, n - PDR_XFER_HDR_LEN, &d) == PDR_EPROTO);
    /* Empty room. */
    n = pdr__xfer_fetch_encode(buf, sizeof(buf), 9, 4, 0, 0, NULL, sizeof(size_t), 0);
    CHECK(pdr__xfer_fetch_decode(buf + PDR_XFER_HDR_LEN, n - PDR_XFER_HDR_LEN, &d) == 0 && d.nseg == 0);
    printf("ok fetch descriptor\n");
}

static void test_ctl(void)
{
    uint8_t buf[64];
    struct pdr_xfer_hdr h;
    struct pdr_xfer_ctl c;
    static const uint8_t types[] = {PDR_XF_WAIT,   PDR_XF_DONE, PDR_XF_ACK, PDR_XF_ERROR,
                                    PDR_XF_CANCEL, PDR_XF_PING, PDR_XF_PONG};
    for (size_t i = 0; i < sizeof(types); i++) {
        size_t n = pdr__xfer_ctl_encode(buf, types[i], 42, 7, 99, PDR_ESIZE);
        CHECK(pdr__xfer_hdr_decode(buf, &h) == 0 && h.type == types[i] && n == PDR_XFER_HDR_LEN + h.len);
        CHECK(pdr__xfer_ctl_decode(h.type, buf + PDR_XFER_HDR_LEN, (size_t)h.len, &c) == 0);
        if (types[i] != PDR_XF_PING && types[i] != PDR_XF_PONG)
            CHECK(c.xid == 7 && h.room == 42);
        if (types[i] == PDR_XF_DONE || types[i] == PDR_XF_ACK)
            CHECK(c.value == 99);
        if (types[i] == PDR_XF_ERROR)
            CHECK(c.code == PDR_ESIZE);
    }
    /* ERROR codes outside the PDR_E* table are refused. */
    size_t n = pdr__xfer_ctl_encode(buf, PDR_XF_ERROR, 1, 1, 0, -5);
    CHECK(pdr__xfer_ctl_decode(PDR_XF_ERROR, buf + PDR_XFER_HDR_LEN, n - PDR_XFER_HDR_LEN, &c) == PDR_EPROTO);
    n = pdr__xfer_ctl_encode(buf, PDR_XF_ERROR, 1, 1, 0, 0);
    CHECK(pdr__xfer_ctl_decode(PDR_XF_ERROR, buf + PDR_XFER_HDR_LEN, n - PDR_XFER_HDR_LEN, &c) == PDR_EPROTO);
    CHECK(pdr__xfer_ctl_decode(PDR_XF_DATA, buf, 16, &c) == PDR_EPROTO);
    CHECK(pdr__xfer_ctl_decode(PDR_XF_WAIT, buf, 16, &c) == PDR_EPROTO);

    uint8_t d[PDR_XFER_HDR_LEN + PDR_XFER_DATA_PFX];
    pdr__xfer_data_hdr_encode(d, 5, 6, 1u << 30, 1000);
    CHECK(pdr__xfer_hdr_decode(d, &h) == 0 && h.len == 1016 && h.room == 5);
    uint64_t xid, off;
    pdr__xfer_data_pfx_decode(d + PDR_XFER_HDR_LEN, &xid, &off);
    CHECK(xid == 6 && off == 1u << 30);
    printf("ok control frames\n");
}

static void test_hello(void)
{
    struct pdr_xfer_hello h = {
        .session = 0x0102030405060708ull, .index = 2, .nconns = 4, .caps = PDR_XFER_CAP_CUDA};
    snprintf(h.boot_id, sizeof(h.boot_id), "%s", "6f1c2f8e-8f2b-4a55-a1a3-1f0e3d2c4b5a");
    snprintf(h.hostname, sizeof(h.hostname), "%s", "prefill-0");
    uint8_t buf[PDR_XFER_HDR_LEN + PDR_XFER_HELLO_LEN];
    CHECK(pdr__xfer_hello_encode(buf, &h) == sizeof(buf));
    struct pdr_xfer_hdr hd;
    CHECK(pdr__xfer_hdr_decode(buf, &hd) == 0 && hd.type == PDR_XF_HELLO && hd.room == 0 &&
          hd.len == PDR_XFER_HELLO_LEN);
    struct pdr_xfer_hello g;
    CHECK(pdr__xfer_hello_decode(buf + PDR_XFER_HDR_LEN, PDR_XFER_HELLO_LEN, &g) == 0);
    CHECK(g.session == h.session && g.index == 2 && g.nconns == 4 && g.caps == PDR_XFER_CAP_CUDA);
    CHECK(strcmp(g.boot_id, h.boot_id) == 0 && strcmp(g.hostname, "prefill-0") == 0);
    CHECK(pdr__xfer_hello_same_host(&g, &h));
    snprintf(g.hostname, sizeof(g.hostname), "%s", "decode-0");
    CHECK(!pdr__xfer_hello_same_host(&g, &h));
    struct pdr_xfer_hello empty = {0};
    CHECK(!pdr__xfer_hello_same_host(&empty, &empty)); /* unknown identity is never "same host" */

    uint8_t bad[sizeof(buf)];
    uint8_t *b = bad + PDR_XFER_HDR_LEN;
    memcpy(bad, buf, sizeof(buf));
    pdr__put_u32(b + 8, 4); /* index == nconns */
    CHECK(pdr__xfer_hello_decode(b, PDR_XFER_HELLO_LEN, &g) == PDR_EPROTO);
    memcpy(bad, buf, sizeof(buf));
    pdr__put_u32(b + 12, PDR_XFER_HELLO_MAX_CONNS + 1);
    CHECK(pdr__xfer_hello_decode(b, PDR_XFER_HELLO_LEN, &g) == PDR_EPROTO);
    memcpy(bad, buf, sizeof(buf));
    pdr__put_u32(b + 16, 8); /* unknown capability */
    CHECK(pdr__xfer_hello_decode(b, PDR_XFER_HELLO_LEN, &g) == PDR_EPROTO);
    memcpy(bad, buf, sizeof(buf));
    pdr__put_u32(b + 20, 1); /* reserved */
    CHECK(pdr__xfer_hello_decode(b, PDR_XFER_HELLO_LEN, &g) == PDR_EPROTO);
    memcpy(bad, buf, sizeof(buf));
    memset(b + 64, 'x', 64); /* hostname without its NUL */
    CHECK(pdr__xfer_hello_decode(b, PDR_XFER_HELLO_LEN, &g) == PDR_EPROTO);
    CHECK(pdr__xfer_hello_decode(b, PDR_XFER_HELLO_LEN - 1, &g) == PDR_EPROTO);
    pdr__xfer_hdr_encode(bad, PDR_XF_HELLO, 1, PDR_XFER_HELLO_LEN); /* HELLO carries no room */
    CHECK(pdr__xfer_hdr_decode(bad, &hd) == PDR_EPROTO);
    pdr__xfer_hdr_encode(bad, PDR_XF_HELLO, 0, 16);
    CHECK(pdr__xfer_hdr_decode(bad, &hd) == PDR_EPROTO);
    printf("ok hello\n");
}

static void test_fetch_ipc(void)
{
    size_t lens[3] = {100, 200, 300};
    uint8_t handles[2 * PDR_XFER_IPC_HENTRY];
    for (size_t i = 0; i < sizeof(handles); i++)
        handles[i] = (uint8_t)(i * 7);
    uint32_t hidx[3] = {0, 1, 0};
    uint64_t offs[3] = {0, 4096, 1u << 30};
    uint8_t buf[1024];
    size_t need = pdr__xfer_fetch_ipc_size(3, 2);
    CHECK(pdr__xfer_fetch_ipc_encode(buf, need - 1, 8, 9, 600, 1000, lens, sizeof(size_t), 3, handles, 2,
                                     hidx, offs) == 0);
    size_t n = pdr__xfer_fetch_ipc_encode(buf, sizeof(buf), 8, 9, 600, 1000, lens, sizeof(size_t), 3, handles,
                                          2, hidx, offs);
    CHECK(n == need);
    struct pdr_xfer_hdr h;
    CHECK(pdr__xfer_hdr_decode(buf, &h) == 0 && h.type == PDR_XF_FETCH_IPC && h.room == 8 &&
          h.len == n - PDR_XFER_HDR_LEN);
    struct pdr_xfer_fetch_desc fd;
    struct pdr_xfer_ipc_desc d;
    uint8_t *body = buf + PDR_XFER_HDR_LEN;
    CHECK(pdr__xfer_fetch_ipc_decode(body, (size_t)h.len, &fd, &d) == 0);
    CHECK(fd.xid == 9 && fd.total == 600 && fd.nseg == 3 && d.nhandles == 2);
    CHECK(memcmp(d.handles, handles, sizeof(handles)) == 0);
    for (uint32_t i = 0; i < 3; i++) {
        uint32_t hi;
        uint64_t off;
        pdr__xfer_ipc_seg(&d, i, &hi, &off);
        CHECK(hi == hidx[i] && off == offs[i]);
    }
    /* A handle index out of range, a reserved field, a short body, a FETCH part that does not add up. */
    size_t segs_at = (size_t)h.len - 3 * PDR_XFER_IPC_SENTRY;
    pdr__put_u32(body + segs_at + PDR_XFER_IPC_SENTRY, 2);
    CHECK(pdr__xfer_fetch_ipc_decode(body, (size_t)h.len, &fd, &d) == PDR_EPROTO);
    pdr__put_u32(body + segs_at + PDR_XFER_IPC_SENTRY, 1);
    pdr__put_u32(body + segs_at + 4, 1);
    CHECK(pdr__xfer_fetch_ipc_decode(body, (size_t)h.len, &fd, &d) == PDR_EPROTO);
    pdr__put_u32(body + segs_at + 4, 0);
    CHECK(pdr__xfer_fetch_ipc_decode(body, (size_t)h.len, &fd, &d) == 0);
    CHECK(pdr__xfer_fetch_ipc_decode(body, (size_t)h.len - 1, &fd, &d) == PDR_EPROTO);
    pdr__put_u64(body + 8, 601);
    CHECK(pdr__xfer_fetch_ipc_decode(body, (size_t)h.len, &fd, &d) == PDR_EPROTO);
    /* IPC_DONE is a {xid, total} control frame. */
    struct pdr_xfer_ctl c;
    n = pdr__xfer_ctl_encode(buf, PDR_XF_IPC_DONE, 8, 9, 600, 0);
    CHECK(pdr__xfer_hdr_decode(buf, &h) == 0 && h.type == PDR_XF_IPC_DONE);
    CHECK(pdr__xfer_ctl_decode(PDR_XF_IPC_DONE, buf + PDR_XFER_HDR_LEN, n - PDR_XFER_HDR_LEN, &c) == 0 &&
          c.xid == 9 && c.value == 600);
    printf("ok fetch ipc\n");
}

/* A valid endpoint of nqp QPs (RoCE when eth, else InfiniBand), packed into buf. */
static size_t make_ep(uint8_t *buf, size_t cap, unsigned nqp, int eth)
{
    struct pdr_rdma_ep_info e = {.nqp = (uint8_t)nqp, .mtu = 5, .gid_index = 3};
    e.link_layer = eth ? PDR_RDMA_LINK_ETH : PDR_RDMA_LINK_IB;
    if (eth) {
        e.gid[10] = 0xff;
        e.gid[11] = 0xff;
        e.gid[12] = 10;
        e.gid[15] = 7;
    } else {
        e.lid = 0x1234;
    }
    for (unsigned i = 0; i < nqp; i++) {
        e.qpn[i] = 0x100 + i;
        e.psn[i] = 0xabc00 + i;
    }
    return pdr__rdma_pack_ep(&e, buf, cap);
}

static void test_fetch_rdma(void)
{
    /* Three destination segments on the decode, four QPs on RoCE. */
    uint64_t lens[3] = {4096, 1u << 20, 12345};
    uint64_t total = 4096 + (1u << 20) + 12345;
    struct pdr_rdma_seg segs[3] = {{0x7f0000000000ull, 4096, 0x11},
                                   {0x7f0000100000ull, 1u << 20, 0x22},
                                   {0x7f0000300000ull, 12345, 0x33}};
    uint8_t ep[PDR_RDMA_EP_MAX_BYTES], mem[256];
    size_t eplen = make_ep(ep, sizeof(ep), 4, 1);
    size_t memlen = pdr__rdma_pack_mem(segs, 3, mem, sizeof(mem));
    CHECK(eplen == pdr__rdma_ep_wire_size(4) && memlen == pdr__rdma_mem_wire_size(3));

    uint8_t buf[1024];
    size_t need = pdr__xfer_fetch_rdma_size(3, eplen, memlen);
    CHECK(pdr__xfer_fetch_rdma_encode(buf, need - 1, 5, 6, total, 700, lens, sizeof(uint64_t), 3, 0xdeadbeef,
                                      ep, eplen, mem, memlen) == 0); /* too small */
    size_t n = pdr__xfer_fetch_rdma_encode(buf, sizeof(buf), 5, 6, total, 700, lens, sizeof(uint64_t), 3,
                                           0xdeadbeef, ep, eplen, mem, memlen);
    CHECK(n == need);
    struct pdr_xfer_hdr h;
    CHECK(pdr__xfer_hdr_decode(buf, &h) == 0 && h.type == PDR_XF_FETCH_RDMA && h.room == 5 &&
          h.len == n - PDR_XFER_HDR_LEN);
    uint8_t *body = buf + PDR_XFER_HDR_LEN;
    size_t blen = (size_t)h.len;
    struct pdr_xfer_fetch_desc fd;
    struct pdr_xfer_rdma_desc rd;
    CHECK(pdr__xfer_fetch_rdma_decode(body, blen, &fd, &rd) == 0);
    CHECK(fd.xid == 6 && fd.total == total && fd.timeout_ms == 700 && fd.nseg == 3);
    CHECK(pdr__get_u64(fd.seglens + 8) == (1u << 20));
    CHECK(rd.tag == 0xdeadbeef && rd.eplen == eplen && rd.memlen == memlen && rd.nseg == 3);
    CHECK(memcmp(rd.ep, ep, eplen) == 0 && memcmp(rd.mem, mem, memlen) == 0);
    struct pdr_rdma_ep_info info;
    CHECK(pdr__rdma_unpack_ep(rd.ep, rd.eplen, &info) == 0 && info.nqp == 4 && info.qpn[3] == 0x103);
    struct pdr_rdma_seg back[3];
    uint32_t nb = 0;
    uint64_t tb = 0;
    CHECK(pdr__rdma_unpack_mem(rd.mem, rd.memlen, back, 3, &nb, &tb) == 0 && nb == 3 && tb == total);
    CHECK(back[1].addr == segs[1].addr && back[2].key == 0x33);

    /* The memory may be cut differently from the FETCH segments: only the totals must agree. One FETCH
     * segment over two remote segments, on one InfiniBand QP. */
    uint64_t one = 4096 + (1u << 20);
    size_t ib = make_ep(ep, sizeof(ep), 1, 0);
    size_t ml2 = pdr__rdma_pack_mem(segs, 2, mem, sizeof(mem));
    n = pdr__xfer_fetch_rdma_encode(buf, sizeof(buf), 1, 2, one, 0, &one, sizeof(uint64_t), 1, 1, ep, ib, mem,
                                    ml2);
    CHECK(n > 0 && pdr__xfer_fetch_rdma_decode(body, n - PDR_XFER_HDR_LEN, &fd, &rd) == 0);
    CHECK(fd.nseg == 1 && rd.nseg == 2 && rd.eplen == pdr__rdma_ep_wire_size(1));

    /* Back to the three-segment frame for the rejections. */
    eplen = make_ep(ep, sizeof(ep), 4, 1);
    memlen = pdr__rdma_pack_mem(segs, 3, mem, sizeof(mem));
    n = pdr__xfer_fetch_rdma_encode(buf, sizeof(buf), 5, 6, total, 700, lens, sizeof(uint64_t), 3, 0xdeadbeef,
                                    ep, eplen, mem, memlen);
    blen = n - PDR_XFER_HDR_LEN;
    uint8_t good[1024];
    memcpy(good, buf, n);
    size_t ext = PDR_XFER_FETCH_FIXED + 3 * 8; /* where {tag, eplen, memlen, reserved} starts */
    size_t epat = ext + PDR_XFER_RDMA_EXT, memat = epat + eplen;

    /* Truncated bodies and trailing bytes: every length but the exact one fails. */
    for (size_t cut = 0; cut < blen; cut++)
        CHECK(pdr__xfer_fetch_rdma_decode(body, cut, &fd, &rd) == PDR_EPROTO);
    body[blen] = 0;
    CHECK(pdr__xfer_fetch_rdma_decode(body, blen + 1, &fd, &rd) == PDR_EPROTO);
    /* The reserved field. */
    pdr__put_u32(body + ext + 12, 1);
    CHECK(pdr__xfer_fetch_rdma_decode(body, blen, &fd, &rd) == PDR_EPROTO);
    memcpy(buf, good, n);
    /* eplen and memlen that disagree with the body length, or that shift the boundary. */
    pdr__put_u32(body + ext + 4, (uint32_t)eplen + 1);
    CHECK(pdr__xfer_fetch_rdma_decode(body, blen, &fd, &rd) == PDR_EPROTO);
    pdr__put_u32(body + ext + 8, (uint32_t)memlen - 1);
    CHECK(pdr__xfer_fetch_rdma_decode(body, blen, &fd, &rd) == PDR_EPROTO); /* same sum, wrong cut */
    memcpy(buf, good, n);
    pdr__put_u32(body + ext + 8, (uint32_t)memlen + 1);
    CHECK(pdr__xfer_fetch_rdma_decode(body, blen, &fd, &rd) == PDR_EPROTO);
    memcpy(buf, good, n);
    pdr__put_u32(body + ext + 4, UINT32_MAX); /* eplen above PDR_RDMA_EP_MAX_BYTES */
    CHECK(pdr__xfer_fetch_rdma_decode(body, blen, &fd, &rd) == PDR_EPROTO);
    memcpy(buf, good, n);
    pdr__put_u32(body + ext + 8, UINT32_MAX - 8); /* eplen + memlen past the body */
    CHECK(pdr__xfer_fetch_rdma_decode(body, blen, &fd, &rd) == PDR_EPROTO);
    memcpy(buf, good, n);
    /* Endpoint info that fails pdr__rdma_unpack_ep: version, nqp 0, unknown link layer, mtu, qpn < 2,
     * zero GID on Ethernet. */
    static const size_t ep_bytes[] = {0, 1, 2, 3};
    for (size_t i = 0; i < sizeof(ep_bytes) / sizeof(ep_bytes[0]); i++) {
        body[epat + ep_bytes[i]] = 0;
        CHECK(pdr__xfer_fetch_rdma_decode(body, blen, &fd, &rd) == PDR_EPROTO);
        body[epat + ep_bytes[i]] = 0x77;
        CHECK(pdr__xfer_fetch_rdma_decode(body, blen, &fd, &rd) == PDR_EPROTO);
        memcpy(buf, good, n);
    }
    pdr__put_u32(body + epat + PDR_RDMA_EP_FIXED, 1); /* qpn 1 */
    CHECK(pdr__xfer_fetch_rdma_decode(body, blen, &fd, &rd) == PDR_EPROTO);
    memcpy(buf, good, n);
    {
        uint8_t zgid[PDR_RDMA_EP_MAX_BYTES];
        struct pdr_rdma_ep_info e;
        CHECK(pdr__rdma_unpack_ep(ep, eplen, &e) == 0);
        memcpy(zgid, ep, eplen);
        /* Find the GID bytes by difference: zeroing them must be refused. */
        e.gid[10] = e.gid[11] = e.gid[12] = e.gid[15] = 0;
        CHECK(pdr__rdma_pack_ep(&e, zgid, sizeof(zgid)) == 0); /* pack refuses it too */
        for (size_t i = 0; i < eplen; i++)
            if (memcmp(body + epat + i, "\xff\xff\x0a", 3) == 0) {
                memset(body + epat + i - 10, 0, 16);
                break;
            }
        CHECK(memcmp(body + epat, ep, eplen) != 0);
        CHECK(pdr__xfer_fetch_rdma_decode(body, blen, &fd, &rd) == PDR_EPROTO);
        memcpy(buf, good, n);
    }
    /* Memory descriptors: wrong version, nonzero reserved byte, nseg 0, nseg that disagrees with memlen. */
    body[memat] = 2;
    CHECK(pdr__xfer_fetch_rdma_decode(body, blen, &fd, &rd) == PDR_EPROTO);
    memcpy(buf, good, n);
    body[memat + 2] = 1;
    CHECK(pdr__xfer_fetch_rdma_decode(body, blen, &fd, &rd) == PDR_EPROTO);
    memcpy(buf, good, n);
    pdr__put_u32(body + memat + 4, 0);
    CHECK(pdr__xfer_fetch_rdma_decode(body, blen, &fd, &rd) == PDR_EPROTO);
    pdr__put_u32(body + memat + 4, 2);
    CHECK(pdr__xfer_fetch_rdma_decode(body, blen, &fd, &rd) == PDR_EPROTO);
    memcpy(buf, good, n);
    /* A memory total that differs from the FETCH total (FETCH part itself consistent). */
    pdr__put_u64(body + memat + 8, total + 1);
    CHECK(pdr__xfer_fetch_rdma_decode(body, blen, &fd, &rd) == PDR_EPROTO);
    memcpy(buf, good, n);
    {
        uint64_t l2[3] = {4096, 1u << 20, 12346};
        n = pdr__xfer_fetch_rdma_encode(buf, sizeof(buf), 5, 6, total + 1, 700, l2, sizeof(uint64_t), 3, 1,
                                        ep, eplen, mem, memlen);
        CHECK(n > 0 && pdr__xfer_fetch_rdma_decode(body, n - PDR_XFER_HDR_LEN, &fd, &rd) == PDR_EPROTO);
        memcpy(buf, good, sizeof(good));
        n = blen + PDR_XFER_HDR_LEN;
    }
    /* The FETCH part: a total its segments do not add up to, an nseg that disagrees with the length. */
    pdr__put_u64(body + 8, total - 1);
    CHECK(pdr__xfer_fetch_rdma_decode(body, blen, &fd, &rd) == PDR_EPROTO);
    memcpy(buf, good, n);
    pdr__put_u32(body + 20, 4);
    CHECK(pdr__xfer_fetch_rdma_decode(body, blen, &fd, &rd) == PDR_EPROTO);
    /* Too many segments: above PDR_RDMA_MAX_SEGS, refused before anything is read past the prefix. */
    pdr__put_u32(body + 20, PDR_RDMA_MAX_SEGS + 1);
    CHECK(pdr__xfer_fetch_rdma_decode(body, blen, &fd, &rd) == PDR_EPROTO);
    pdr__put_u32(body + 20, UINT32_MAX);
    CHECK(pdr__xfer_fetch_rdma_decode(body, blen, &fd, &rd) == PDR_EPROTO);
    memcpy(buf, good, n);
    CHECK(pdr__xfer_fetch_rdma_decode(body, blen, &fd, &rd) == 0);

    /* Header limits: at least the FETCH prefix and the extension; at most the largest endpoint and
     * memory descriptor. */
    pdr__xfer_hdr_encode(buf, PDR_XF_FETCH_RDMA, 1, PDR_XFER_FETCH_FIXED + PDR_XFER_RDMA_EXT - 1);
    CHECK(pdr__xfer_hdr_decode(buf, &h) == PDR_EPROTO);
    pdr__xfer_hdr_encode(buf, PDR_XF_FETCH_RDMA, 1, PDR_XFER_FETCH_FIXED + PDR_XFER_RDMA_EXT);
    CHECK(pdr__xfer_hdr_decode(buf, &h) == 0);
    uint64_t maxlen = PDR_XFER_FETCH_FIXED + PDR_XFER_RDMA_EXT + PDR_RDMA_EP_MAX_BYTES + PDR_RDMA_MEM_FIXED +
                      (uint64_t)PDR_RDMA_MAX_SEGS * (8 + PDR_RDMA_MEM_PER_SEG);
    pdr__xfer_hdr_encode(buf, PDR_XF_FETCH_RDMA, 1, maxlen);
    CHECK(pdr__xfer_hdr_decode(buf, &h) == 0);
    pdr__xfer_hdr_encode(buf, PDR_XF_FETCH_RDMA, 1, maxlen + 1);
    CHECK(pdr__xfer_hdr_decode(buf, &h) == PDR_EPROTO);
    pdr__xfer_hdr_encode(buf, PDR_XF_FETCH_RDMA, 1, UINT64_MAX);
    CHECK(pdr__xfer_hdr_decode(buf, &h) == PDR_EPROTO);
    memcpy(buf, good, n);
    buf[4] = 2; /* wrong version */
    CHECK(pdr__xfer_hdr_decode(buf, &h) == PDR_EPROTO);
    printf("ok fetch rdma\n");
}

static void test_rdma_ready_go(void)
{
    uint8_t ep[PDR_RDMA_EP_MAX_BYTES];
    uint8_t buf[PDR_XFER_HDR_LEN + PDR_XFER_RDMA_READY_FIXED + PDR_RDMA_EP_MAX_BYTES + 8];
    struct pdr_xfer_hdr h;
    const uint8_t *gep;
    size_t geplen;
    uint64_t xid;
    uint32_t qpn0;
    /* Every QP count round-trips, on both link layers. */
    for (unsigned nqp = 1; nqp <= PDR_RDMA_MAX_QP; nqp++) {
        size_t eplen = make_ep(ep, sizeof(ep), nqp, (int)(nqp % 2));
        CHECK(eplen == pdr__rdma_ep_wire_size(nqp));
        size_t n = pdr__xfer_rdma_ready_encode(buf, sizeof(buf), 77, 1000 + nqp, 0x100, ep, eplen);
        CHECK(n == PDR_XFER_HDR_LEN + PDR_XFER_RDMA_READY_FIXED + eplen);
        CHECK(pdr__xfer_hdr_decode(buf, &h) == 0 && h.type == PDR_XF_RDMA_READY && h.room == 77 &&
              h.len == n - PDR_XFER_HDR_LEN);
        CHECK(pdr__xfer_rdma_ready_decode(buf + PDR_XFER_HDR_LEN, (size_t)h.len, &xid, &qpn0, &gep,
                                          &geplen) == 0);
        CHECK(xid == 1000 + nqp && qpn0 == 0x100 && geplen == eplen && memcmp(gep, ep, eplen) == 0);
    }
    size_t eplen = make_ep(ep, sizeof(ep), 2, 0);
    /* The encoder refuses a small buffer, an empty or oversized endpoint. */
    CHECK(pdr__xfer_rdma_ready_encode(buf, PDR_XFER_HDR_LEN + PDR_XFER_RDMA_READY_FIXED + eplen - 1, 1, 1, 2,
                                      ep, eplen) == 0);
    CHECK(pdr__xfer_rdma_ready_encode(buf, sizeof(buf), 1, 1, 2, ep, 0) == 0);
    CHECK(pdr__xfer_rdma_ready_encode(buf, sizeof(buf), 1, 1, 2, ep, PDR_RDMA_EP_MAX_BYTES + 1) == 0);
    size_t n = pdr__xfer_rdma_ready_encode(buf, sizeof(buf), 1, 9, 0x100, ep, eplen);
    size_t blen = n - PDR_XFER_HDR_LEN;
    uint8_t *body = buf + PDR_XFER_HDR_LEN;
    uint8_t good[sizeof(buf)];
    memcpy(good, buf, sizeof(buf));
    /* Truncated (down to no endpoint at all) and trailing bytes. */
    for (size_t cut = 0; cut < blen; cut++)
        CHECK(pdr__xfer_rdma_ready_decode(body, cut, &xid, &qpn0, &gep, &geplen) == PDR_EPROTO);
    body[blen] = 0;
    CHECK(pdr__xfer_rdma_ready_decode(body, blen + 1, &xid, &qpn0, &gep, &geplen) == PDR_EPROTO);
    /* The reserved field, and an endpoint that fails unpack (version, nqp, link layer, mtu, LID 0). */
    pdr__put_u32(body + 12, 1);
    CHECK(pdr__xfer_rdma_ready_decode(body, blen, &xid, &qpn0, &gep, &geplen) == PDR_EPROTO);
    memcpy(buf, good, sizeof(buf));
    for (size_t i = 0; i < 4; i++) {
        body[PDR_XFER_RDMA_READY_FIXED + i] = 0;
        CHECK(pdr__xfer_rdma_ready_decode(body, blen, &xid, &qpn0, &gep, &geplen) == PDR_EPROTO);
        memcpy(buf, good, sizeof(buf));
    }
    body[PDR_XFER_RDMA_READY_FIXED + 1] = 3; /* nqp 3 in a body sized for 2 */
    CHECK(pdr__xfer_rdma_ready_decode(body, blen, &xid, &qpn0, &gep, &geplen) == PDR_EPROTO);
    memcpy(buf, good, sizeof(buf));
    {
        struct pdr_rdma_ep_info e;
        CHECK(pdr__rdma_unpack_ep(ep, eplen, &e) == 0 && e.lid == 0x1234);
        for (size_t i = 0; i + 1 < eplen; i++)
            if (body[PDR_XFER_RDMA_READY_FIXED + i] == 0x34 &&
                body[PDR_XFER_RDMA_READY_FIXED + i + 1] == 0x12) {
                body[PDR_XFER_RDMA_READY_FIXED + i] = body[PDR_XFER_RDMA_READY_FIXED + i + 1] = 0; /* LID 0 */
                break;
            }
        CHECK(pdr__xfer_rdma_ready_decode(body, blen, &xid, &qpn0, &gep, &geplen) == PDR_EPROTO);
        memcpy(buf, good, sizeof(buf));
    }
    CHECK(pdr__xfer_rdma_ready_decode(body, blen, &xid, &qpn0, &gep, &geplen) == 0 && xid == 9);
    /* Header limits: a body past the fixed part, at most the largest endpoint. */
    pdr__xfer_hdr_encode(buf, PDR_XF_RDMA_READY, 1, PDR_XFER_RDMA_READY_FIXED);
    CHECK(pdr__xfer_hdr_decode(buf, &h) == PDR_EPROTO);
    pdr__xfer_hdr_encode(buf, PDR_XF_RDMA_READY, 1, PDR_XFER_RDMA_READY_FIXED + PDR_RDMA_EP_MAX_BYTES);
    CHECK(pdr__xfer_hdr_decode(buf, &h) == 0);
    pdr__xfer_hdr_encode(buf, PDR_XF_RDMA_READY, 1, PDR_XFER_RDMA_READY_FIXED + PDR_RDMA_EP_MAX_BYTES + 1);
    CHECK(pdr__xfer_hdr_decode(buf, &h) == PDR_EPROTO);
    memcpy(buf, good, sizeof(buf));
    buf[4] = 0; /* wrong version */
    CHECK(pdr__xfer_hdr_decode(buf, &h) == PDR_EPROTO);
    memcpy(buf, good, sizeof(buf));
    buf[7] = 1; /* reserved flags */
    CHECK(pdr__xfer_hdr_decode(buf, &h) == PDR_EPROTO);

    /* RDMA_GO is an {xid} control frame: exactly 8 bytes. */
    struct pdr_xfer_ctl c;
    n = pdr__xfer_ctl_encode(buf, PDR_XF_RDMA_GO, 3, 0x0102030405060708ull, 0, 0);
    CHECK(n == PDR_XFER_HDR_LEN + 8);
    CHECK(pdr__xfer_hdr_decode(buf, &h) == 0 && h.type == PDR_XF_RDMA_GO && h.room == 3 && h.len == 8);
    CHECK(pdr__xfer_ctl_decode(PDR_XF_RDMA_GO, buf + PDR_XFER_HDR_LEN, 8, &c) == 0 &&
          c.xid == 0x0102030405060708ull);
    for (size_t len = 0; len < 24; len++)
        if (len != 8)
            CHECK(pdr__xfer_ctl_decode(PDR_XF_RDMA_GO, buf + PDR_XFER_HDR_LEN, len, &c) == PDR_EPROTO);
    for (uint64_t len = 0; len < 64; len++) {
        pdr__xfer_hdr_encode(buf, PDR_XF_RDMA_GO, 3, len);
        CHECK((pdr__xfer_hdr_decode(buf, &h) == 0) == (len == 8));
    }
    pdr__xfer_ctl_encode(buf, PDR_XF_RDMA_GO, 3, 1, 0, 0);
    buf[4] = 9;
    CHECK(pdr__xfer_hdr_decode(buf, &h) == PDR_EPROTO);
    printf("ok rdma ready and go\n");
}

static const pdr_test_case_t cases[] = {
    {"header", test_header, 10},
    {"fetch", test_fetch, 10},
    {"ctl", test_ctl, 10},
    {"hello", test_hello, 10},
    {"fetch_ipc", test_fetch_ipc, 10},
    {"fetch_rdma", test_fetch_rdma, 10},
    {"rdma_ready_go", test_rdma_ready_go, 10},
};

int main(int argc, char **argv)
{
    return pdr_test_run(cases, sizeof(cases) / sizeof(cases[0]), NULL, NULL, argc, argv);
}
