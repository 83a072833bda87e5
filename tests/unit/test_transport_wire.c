/*
 * The transport's wire codecs (transport/wire.c): every frame type round-trips, and each malformed
 * header or body is refused with PDR_EPROTO (bad magic, version, type, flags, lengths past the limits,
 * FETCH segment lengths that do not add up or overflow, unknown ERROR codes).
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
        CHECK(ok == (t == PDR_XF_DONE || t == PDR_XF_ACK || t == PDR_XF_ERROR || t == PDR_XF_DATA));
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

int main(void)
{
    test_header();
    test_fetch();
    test_ctl();
    return 0;
}
