/*
 * RDMA descriptors: the endpoint info (QP numbers, PSNs, LID/GID) and a room's remote memory (segments
 * with rkeys), as little-endian, versioned byte strings that travel over the engine's control channel.
 * Pure functions, any thread, no allocation. Every decoder accepts only the exact length and checks
 * every field, because the bytes come from the network (fuzzed: tests/fuzz/fuzz_rdma_desc.c).
 */
#include <string.h>

#include "err.h"
#include "rdma.h"

static void put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put_u24(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
}

static void put_u32(uint8_t *p, uint32_t v)
{
    put_u16(p, (uint16_t)v);
    put_u16(p + 2, (uint16_t)(v >> 16));
}

static void put_u64(uint8_t *p, uint64_t v)
{
    put_u32(p, (uint32_t)v);
    put_u32(p + 4, (uint32_t)(v >> 32));
}

static uint16_t get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t get_u24(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16);
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)get_u16(p) | ((uint32_t)get_u16(p + 2) << 16);
}

static uint64_t get_u64(const uint8_t *p)
{
    return (uint64_t)get_u32(p) | ((uint64_t)get_u32(p + 4) << 32);
}

size_t pdr__rdma_ep_wire_size(unsigned nqp)
{
    return PDR_RDMA_EP_FIXED + (size_t)nqp * PDR_RDMA_EP_PER_QP;
}

size_t pdr__rdma_mem_wire_size(uint32_t nseg)
{
    return PDR_RDMA_MEM_FIXED + (size_t)nseg * PDR_RDMA_MEM_PER_SEG;
}

/* The rules both directions share; the version field is checked by the decoder only. */
static int ep_valid(const struct pdr_rdma_ep_info *e)
{
    static const uint8_t zero_gid[16];
    if (e->nqp < 1 || e->nqp > PDR_RDMA_MAX_QP)
        return 0;
    if (e->link_layer != PDR_RDMA_LINK_IB && e->link_layer != PDR_RDMA_LINK_ETH)
        return 0;
    if (e->mtu < 1 || e->mtu > 5) /* IBV_MTU_256 .. IBV_MTU_4096 */
        return 0;
    if (e->link_layer == PDR_RDMA_LINK_IB && e->lid == 0)
        return 0;
    if (e->link_layer == PDR_RDMA_LINK_ETH && memcmp(e->gid, zero_gid, 16) == 0)
        return 0;
    for (unsigned i = 0; i < e->nqp; i++) {
        if (e->qpn[i] < 2 || e->qpn[i] > 0xFFFFFFu) /* QP0 and QP1 are the special QPs */
            return 0;
        if (e->psn[i] > 0xFFFFFFu)
            return 0;
    }
    return 1;
}

size_t pdr__rdma_pack_ep(const struct pdr_rdma_ep_info *info, uint8_t *buf, size_t cap)
{
    if (info == NULL || buf == NULL || !ep_valid(info))
        return 0;
    size_t n = pdr__rdma_ep_wire_size(info->nqp);
    if (cap < n)
        return 0;
    buf[0] = PDR_RDMA_EP_VERSION;
    buf[1] = info->nqp;
    buf[2] = info->link_layer;
    buf[3] = info->mtu;
    buf[4] = info->gid_index;
    buf[5] = 0;
    put_u16(buf + 6, info->lid);
    memcpy(buf + 8, info->gid, 16);
    uint8_t *p = buf + PDR_RDMA_EP_FIXED;
    for (unsigned i = 0; i < info->nqp; i++, p += PDR_RDMA_EP_PER_QP) {
        put_u32(p, info->qpn[i]);
        put_u24(p + 4, info->psn[i]);
    }
    return n;
}

int pdr__rdma_unpack_ep(const uint8_t *buf, size_t len, struct pdr_rdma_ep_info *out)
{
    if (buf == NULL || out == NULL || len < PDR_RDMA_EP_FIXED)
        return PDR_EPROTO;
    if (buf[0] != PDR_RDMA_EP_VERSION || buf[5] != 0)
        return PDR_EPROTO;
    struct pdr_rdma_ep_info e;
    memset(&e, 0, sizeof(e));
    e.version = buf[0];
    e.nqp = buf[1];
    if (e.nqp < 1 || e.nqp > PDR_RDMA_MAX_QP || len != pdr__rdma_ep_wire_size(e.nqp))
        return PDR_EPROTO;
    e.link_layer = buf[2];
    e.mtu = buf[3];
    e.gid_index = buf[4];
    e.lid = get_u16(buf + 6);
    memcpy(e.gid, buf + 8, 16);
    const uint8_t *p = buf + PDR_RDMA_EP_FIXED;
    for (unsigned i = 0; i < e.nqp; i++, p += PDR_RDMA_EP_PER_QP) {
        e.qpn[i] = get_u32(p);
        e.psn[i] = get_u24(p + 4);
    }
    if (!ep_valid(&e))
        return PDR_EPROTO;
    *out = e;
    return 0;
}

size_t pdr__rdma_pack_mem(const struct pdr_rdma_seg *segs, uint32_t nseg, uint8_t *buf, size_t cap)
{
    if (segs == NULL || buf == NULL || nseg == 0 || nseg > PDR_RDMA_MAX_SEGS)
        return 0;
    size_t n = pdr__rdma_mem_wire_size(nseg);
    if (cap < n)
        return 0;
    uint64_t total = 0;
    for (uint32_t i = 0; i < nseg; i++) {
        if (segs[i].len == 0 || segs[i].addr + segs[i].len < segs[i].addr || total + segs[i].len < total)
            return 0;
        total += segs[i].len;
    }
    buf[0] = PDR_RDMA_MEM_VERSION;
    buf[1] = buf[2] = buf[3] = 0;
    put_u32(buf + 4, nseg);
    put_u64(buf + 8, total);
    uint8_t *p = buf + PDR_RDMA_MEM_FIXED;
    for (uint32_t i = 0; i < nseg; i++, p += PDR_RDMA_MEM_PER_SEG) {
        put_u64(p, segs[i].addr);
        put_u64(p + 8, segs[i].len);
        put_u32(p + 16, segs[i].key);
    }
    return n;
}

int pdr__rdma_peek_mem(const uint8_t *buf, size_t len, uint32_t *nseg, uint64_t *total)
{
    if (buf == NULL || nseg == NULL || total == NULL || len < PDR_RDMA_MEM_FIXED)
        return PDR_EPROTO;
    if (buf[0] != PDR_RDMA_MEM_VERSION || buf[1] != 0 || buf[2] != 0 || buf[3] != 0)
        return PDR_EPROTO;
    uint32_t n = get_u32(buf + 4);
    if (n == 0 || n > PDR_RDMA_MAX_SEGS || len != pdr__rdma_mem_wire_size(n))
        return PDR_EPROTO;
    *nseg = n;
    *total = get_u64(buf + 8);
    return 0;
}

int pdr__rdma_unpack_mem(const uint8_t *buf, size_t len, struct pdr_rdma_seg *segs, uint32_t cap,
                         uint32_t *nseg, uint64_t *total)
{
    uint32_t n;
    uint64_t stated;
    int rc = pdr__rdma_peek_mem(buf, len, &n, &stated);
    if (rc != 0)
        return rc;
    if (segs == NULL || n > cap)
        return PDR_ETOOBIG;
    uint64_t sum = 0;
    const uint8_t *p = buf + PDR_RDMA_MEM_FIXED;
    for (uint32_t i = 0; i < n; i++, p += PDR_RDMA_MEM_PER_SEG) {
        uint64_t a = get_u64(p), l = get_u64(p + 8);
        if (l == 0 || a + l < a || sum + l < sum)
            return PDR_EPROTO;
        sum += l;
        segs[i].addr = a;
        segs[i].len = l;
        segs[i].key = get_u32(p + 16);
    }
    if (sum != stated)
        return PDR_EPROTO;
    *nseg = n;
    *total = sum;
    return 0;
}
