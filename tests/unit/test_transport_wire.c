/*
 * The transport's wire codecs (transport/wire.c): every frame type round-trips, and each malformed
 * header or body is refused with PDR_EPROTO (bad magic, version, type, flags, lengths past the limits,
 * FETCH segment lengths that do not add up or overflow, unknown ERROR codes, HELLO indexes and strings,
 * CUDA IPC tables whose handle indexes or lengths are wrong).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "wire.h"
#include "test_shim_util.h"

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

int main(void)
{
    test_header();
    test_fetch();
    test_ctl();
    test_hello();
    test_fetch_ipc();
    return 0;
}
