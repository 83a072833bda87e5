/*
 * Frame encoders and validating decoders (see wire.h). Pure functions: any thread, no allocation.
 * Every length read from the wire is checked against a fixed limit before it is used.
 */
#include <string.h>
#include "err.h"
#include "wire.h"
#include "rdma.h"

void pdr__xfer_hdr_encode(uint8_t out[PDR_XFER_HDR_LEN], uint8_t type, uint64_t room, uint64_t len)
{
    pdr__put_u32(out, PDR_XFER_MAGIC);
    out[4] = PDR_XFER_VERSION;
    out[5] = type;
    out[6] = 0;
    out[7] = 0;
    pdr__put_u64(out + 8, room);
    pdr__put_u64(out + 16, len);
}

int pdr__xfer_hdr_decode(const uint8_t in[PDR_XFER_HDR_LEN], struct pdr_xfer_hdr *out)
{
    out->magic = pdr__get_u32(in);
    out->version = in[4];
    out->type = in[5];
    out->flags = (uint16_t)(in[6] | (in[7] << 8));
    out->room = pdr__get_u64(in + 8);
    out->len = pdr__get_u64(in + 16);
    if (out->magic != PDR_XFER_MAGIC || out->version != PDR_XFER_VERSION || out->flags != 0)
        return PDR_EPROTO;
    uint64_t len = out->len;
    switch (out->type) {
    case PDR_XF_FETCH:
        if (len < PDR_XFER_FETCH_FIXED || len > PDR_XFER_FETCH_FIXED + (uint64_t)PDR_XFER_WIRE_MAX_SEGS * 8 ||
            (len - PDR_XFER_FETCH_FIXED) % 8 != 0)
            return PDR_EPROTO;
        return 0;
    case PDR_XF_DATA:
        return len >= PDR_XFER_DATA_PFX && len <= PDR_XFER_DATA_PFX + (uint64_t)PDR_XFER_MAX_CHUNK
                   ? 0
                   : PDR_EPROTO;
    case PDR_XF_WAIT:
    case PDR_XF_CANCEL:
    case PDR_XF_RDMA_GO:
        return len == 8 ? 0 : PDR_EPROTO;
    case PDR_XF_FETCH_RDMA:
        return len >= PDR_XFER_FETCH_FIXED + PDR_XFER_RDMA_EXT &&
                       len <= PDR_XFER_FETCH_FIXED + PDR_XFER_RDMA_EXT + PDR_RDMA_EP_MAX_BYTES +
                                  PDR_RDMA_MEM_FIXED +
                                  (uint64_t)PDR_RDMA_MAX_SEGS * (8 + PDR_RDMA_MEM_PER_SEG)
                   ? 0
                   : PDR_EPROTO;
    case PDR_XF_RDMA_READY:
        return len > PDR_XFER_RDMA_READY_FIXED && len <= PDR_XFER_RDMA_READY_FIXED + PDR_RDMA_EP_MAX_BYTES
                   ? 0
                   : PDR_EPROTO;
    case PDR_XF_DONE:
    case PDR_XF_IPC_DONE:
    case PDR_XF_ACK:
    case PDR_XF_ERROR:
        return len == 16 ? 0 : PDR_EPROTO;
    case PDR_XF_FETCH_IPC:
        return len >= PDR_XFER_FETCH_FIXED + 8 &&
                       len <= PDR_XFER_FETCH_FIXED + 8 +
                                  (uint64_t)PDR_XFER_IPC_MAX_SEGS * (8 + PDR_XFER_IPC_SENTRY) +
                                  (uint64_t)PDR_XFER_IPC_MAX_HANDLES * PDR_XFER_IPC_HENTRY
                   ? 0
                   : PDR_EPROTO;
    case PDR_XF_PING:
    case PDR_XF_PONG:
        return len == 0 && out->room == 0 ? 0 : PDR_EPROTO;
    case PDR_XF_HELLO:
        return len == PDR_XFER_HELLO_LEN && out->room == 0 ? 0 : PDR_EPROTO;
    default:
        return PDR_EPROTO;
    }
}

size_t pdr__xfer_hello_encode(uint8_t out[PDR_XFER_HDR_LEN + PDR_XFER_HELLO_LEN],
                              const struct pdr_xfer_hello *h)
{
    pdr__xfer_hdr_encode(out, PDR_XF_HELLO, 0, PDR_XFER_HELLO_LEN);
    uint8_t *p = out + PDR_XFER_HDR_LEN;
    memset(p, 0, PDR_XFER_HELLO_LEN);
    pdr__put_u64(p, h->session);
    pdr__put_u32(p + 8, h->index);
    pdr__put_u32(p + 12, h->nconns);
    pdr__put_u32(p + 16, h->caps);
    size_t n = strnlen(h->boot_id, sizeof(h->boot_id) - 1);
    memcpy(p + 24, h->boot_id, n);
    n = strnlen(h->hostname, sizeof(h->hostname) - 1);
    memcpy(p + 64, h->hostname, n);
    return PDR_XFER_HDR_LEN + PDR_XFER_HELLO_LEN;
}

int pdr__xfer_hello_decode(const uint8_t *body, size_t len, struct pdr_xfer_hello *out)
{
    memset(out, 0, sizeof(*out));
    if (len != PDR_XFER_HELLO_LEN)
        return PDR_EPROTO;
    out->session = pdr__get_u64(body);
    out->index = pdr__get_u32(body + 8);
    out->nconns = pdr__get_u32(body + 12);
    out->caps = pdr__get_u32(body + 16);
    if (out->nconns == 0 || out->nconns > PDR_XFER_HELLO_MAX_CONNS || out->index >= out->nconns ||
        (out->caps & ~(uint32_t)(PDR_XFER_CAP_CUDA | PDR_XFER_CAP_RDMA)) != 0 || pdr__get_u32(body + 20) != 0)
        return PDR_EPROTO;
    if (memchr(body + 24, 0, 40) == NULL || memchr(body + 64, 0, 64) == NULL)
        return PDR_EPROTO;
    memcpy(out->boot_id, body + 24, 40);
    memcpy(out->hostname, body + 64, 64);
    return 0;
}

int pdr__xfer_hello_same_host(const struct pdr_xfer_hello *a, const struct pdr_xfer_hello *b)
{
    return a->boot_id[0] != '\0' && a->hostname[0] != '\0' && strcmp(a->boot_id, b->boot_id) == 0 &&
           strcmp(a->hostname, b->hostname) == 0;
}

size_t pdr__xfer_fetch_encode(uint8_t *out, size_t cap, uint64_t room, uint64_t xid, uint64_t total,
                              uint32_t timeout_ms, const size_t *seglens, size_t stride, uint32_t nseg)
{
    if (nseg > PDR_XFER_WIRE_MAX_SEGS || cap < pdr__xfer_fetch_size(nseg))
        return 0;
    pdr__xfer_hdr_encode(out, PDR_XF_FETCH, room, PDR_XFER_FETCH_FIXED + (uint64_t)nseg * 8);
    uint8_t *p = out + PDR_XFER_HDR_LEN;
    pdr__put_u64(p, xid);
    pdr__put_u64(p + 8, total);
    pdr__put_u32(p + 16, timeout_ms);
    pdr__put_u32(p + 20, nseg);
    p += PDR_XFER_FETCH_FIXED;
    const uint8_t *s = (const uint8_t *)seglens;
    for (uint32_t i = 0; i < nseg; i++) {
        size_t v;
        memcpy(&v, s + (size_t)i * stride, sizeof(v));
        pdr__put_u64(p + (size_t)i * 8, v);
    }
    return pdr__xfer_fetch_size(nseg);
}

int pdr__xfer_fetch_decode(const uint8_t *body, size_t len, struct pdr_xfer_fetch_desc *out)
{
    if (len < PDR_XFER_FETCH_FIXED)
        return PDR_EPROTO;
    out->xid = pdr__get_u64(body);
    out->total = pdr__get_u64(body + 8);
    out->timeout_ms = pdr__get_u32(body + 16);
    out->nseg = pdr__get_u32(body + 20);
    if (out->nseg > PDR_XFER_WIRE_MAX_SEGS || len != PDR_XFER_FETCH_FIXED + (size_t)out->nseg * 8)
        return PDR_EPROTO;
    out->seglens = body + PDR_XFER_FETCH_FIXED;
    uint64_t sum = 0;
    for (uint32_t i = 0; i < out->nseg; i++) {
        uint64_t v = pdr__get_u64(out->seglens + (size_t)i * 8);
        if (v > UINT64_MAX - sum)
            return PDR_EPROTO;
        sum += v;
    }
    return sum == out->total ? 0 : PDR_EPROTO;
}

size_t pdr__xfer_ctl_encode(uint8_t *out, uint8_t type, uint64_t room, uint64_t xid, uint64_t value,
                            int32_t code)
{
    uint8_t *p = out + PDR_XFER_HDR_LEN;
    switch (type) {
    case PDR_XF_WAIT:
    case PDR_XF_CANCEL:
    case PDR_XF_RDMA_GO:
        pdr__xfer_hdr_encode(out, type, room, 8);
        pdr__put_u64(p, xid);
        return PDR_XFER_HDR_LEN + 8;
    case PDR_XF_DONE:
    case PDR_XF_IPC_DONE:
    case PDR_XF_ACK:
        pdr__xfer_hdr_encode(out, type, room, 16);
        pdr__put_u64(p, xid);
        pdr__put_u64(p + 8, value);
        return PDR_XFER_HDR_LEN + 16;
    case PDR_XF_ERROR:
        pdr__xfer_hdr_encode(out, type, room, 16);
        pdr__put_u64(p, xid);
        pdr__put_u32(p + 8, (uint32_t)code);
        pdr__put_u32(p + 12, 0);
        return PDR_XFER_HDR_LEN + 16;
    default: /* PING, PONG */
        pdr__xfer_hdr_encode(out, type, 0, 0);
        return PDR_XFER_HDR_LEN;
    }
}

int pdr__xfer_ctl_decode(uint8_t type, const uint8_t *body, size_t len, struct pdr_xfer_ctl *out)
{
    memset(out, 0, sizeof(*out));
    switch (type) {
    case PDR_XF_WAIT:
    case PDR_XF_CANCEL:
    case PDR_XF_RDMA_GO:
        if (len != 8)
            return PDR_EPROTO;
        out->xid = pdr__get_u64(body);
        return 0;
    case PDR_XF_DONE:
    case PDR_XF_IPC_DONE:
    case PDR_XF_ACK:
        if (len != 16)
            return PDR_EPROTO;
        out->xid = pdr__get_u64(body);
        out->value = pdr__get_u64(body + 8);
        return 0;
    case PDR_XF_ERROR:
        if (len != 16)
            return PDR_EPROTO;
        out->xid = pdr__get_u64(body);
        out->code = (int32_t)pdr__get_u32(body + 8);
        if (out->code <= PDR__ERR_FIRST || out->code >= PDR__ERR_LAST || pdr__get_u32(body + 12) != 0)
            return PDR_EPROTO;
        return 0;
    case PDR_XF_PING:
    case PDR_XF_PONG:
        return len == 0 ? 0 : PDR_EPROTO;
    default:
        return PDR_EPROTO;
    }
}

void pdr__xfer_data_pfx_decode(const uint8_t in[PDR_XFER_DATA_PFX], uint64_t *xid, uint64_t *offset)
{
    *xid = pdr__get_u64(in);
    *offset = pdr__get_u64(in + 8);
}

void pdr__xfer_data_hdr_encode(uint8_t out[PDR_XFER_HDR_LEN + PDR_XFER_DATA_PFX], uint64_t room, uint64_t xid,
                               uint64_t offset, uint64_t payload_len)
{
    pdr__xfer_hdr_encode(out, PDR_XF_DATA, room, PDR_XFER_DATA_PFX + payload_len);
    pdr__put_u64(out + PDR_XFER_HDR_LEN, xid);
    pdr__put_u64(out + PDR_XFER_HDR_LEN + 8, offset);
}

size_t pdr__xfer_fetch_ipc_encode(uint8_t *out, size_t cap, uint64_t room, uint64_t xid, uint64_t total,
                                  uint32_t timeout_ms, const size_t *seglens, size_t stride, uint32_t nseg,
                                  const uint8_t *handles, uint32_t nhandles, const uint32_t *hidx,
                                  const uint64_t *offs)
{
    if (nseg > PDR_XFER_IPC_MAX_SEGS || nhandles > PDR_XFER_IPC_MAX_HANDLES ||
        cap < pdr__xfer_fetch_ipc_size(nseg, nhandles))
        return 0;
    size_t n = pdr__xfer_fetch_encode(out, cap, room, xid, total, timeout_ms, seglens, stride, nseg);
    if (n == 0)
        return 0;
    size_t len = pdr__xfer_fetch_ipc_size(nseg, nhandles);
    pdr__xfer_hdr_encode(out, PDR_XF_FETCH_IPC, room, len - PDR_XFER_HDR_LEN);
    uint8_t *p = out + n;
    pdr__put_u32(p, nhandles);
    pdr__put_u32(p + 4, 0);
    p += 8;
    if (nhandles > 0)
        memcpy(p, handles, (size_t)nhandles * PDR_XFER_IPC_HENTRY);
    p += (size_t)nhandles * PDR_XFER_IPC_HENTRY;
    for (uint32_t i = 0; i < nseg; i++) {
        pdr__put_u32(p, hidx[i]);
        pdr__put_u32(p + 4, 0);
        pdr__put_u64(p + 8, offs[i]);
        p += PDR_XFER_IPC_SENTRY;
    }
    return len;
}

/* The FETCH body that opens an extended FETCH (FETCH_IPC, FETCH_RDMA) of len bytes: at most max_segs
 * segments, then at least ext bytes of extension. 0 with the FETCH's length in *flen, or PDR_EPROTO. */
static int fetch_ext_decode(const uint8_t *body, size_t len, uint32_t max_segs, size_t ext,
                            struct pdr_xfer_fetch_desc *fd, size_t *flen)
{
    if (len < PDR_XFER_FETCH_FIXED)
        return PDR_EPROTO;
    uint32_t nseg = pdr__get_u32(body + 20);
    if (nseg > max_segs)
        return PDR_EPROTO;
    *flen = PDR_XFER_FETCH_FIXED + (size_t)nseg * 8;
    if (len < *flen + ext || pdr__xfer_fetch_decode(body, *flen, fd) != 0)
        return PDR_EPROTO;
    return 0;
}

int pdr__xfer_fetch_ipc_decode(const uint8_t *body, size_t len, struct pdr_xfer_fetch_desc *fd,
                               struct pdr_xfer_ipc_desc *ipc)
{
    memset(ipc, 0, sizeof(*ipc));
    size_t flen;
    if (fetch_ext_decode(body, len, PDR_XFER_IPC_MAX_SEGS, 8, fd, &flen) != 0)
        return PDR_EPROTO;
    uint32_t nseg = fd->nseg;
    const uint8_t *p = body + flen;
    uint32_t nh = pdr__get_u32(p);
    if (nh > PDR_XFER_IPC_MAX_HANDLES || pdr__get_u32(p + 4) != 0 ||
        len != flen + 8 + (size_t)nh * PDR_XFER_IPC_HENTRY + (size_t)nseg * PDR_XFER_IPC_SENTRY)
        return PDR_EPROTO;
    ipc->nhandles = nh;
    ipc->handles = p + 8;
    ipc->segs = ipc->handles + (size_t)nh * PDR_XFER_IPC_HENTRY;
    for (uint32_t i = 0; i < nseg; i++) {
        const uint8_t *e = ipc->segs + (size_t)i * PDR_XFER_IPC_SENTRY;
        if (pdr__get_u32(e) >= nh || pdr__get_u32(e + 4) != 0)
            return PDR_EPROTO;
    }
    return 0;
}

size_t pdr__xfer_fetch_rdma_size(uint32_t nseg, size_t eplen, size_t memlen)
{
    return pdr__xfer_fetch_size(nseg) + PDR_XFER_RDMA_EXT + eplen + memlen;
}

size_t pdr__xfer_fetch_rdma_encode(uint8_t *out, size_t cap, uint64_t room, uint64_t xid, uint64_t total,
                                   uint32_t timeout_ms, const uint64_t *seglens, size_t stride, uint32_t nseg,
                                   uint32_t tag, const uint8_t *ep, size_t eplen, const uint8_t *mem,
                                   size_t memlen)
{
    size_t flen = pdr__xfer_fetch_size(nseg);
    size_t len = pdr__xfer_fetch_rdma_size(nseg, eplen, memlen);
    if (cap < len || eplen > UINT32_MAX || memlen > UINT32_MAX ||
        pdr__xfer_fetch_encode(out, cap, room, xid, total, timeout_ms, seglens, stride, nseg) != flen)
        return 0;
    pdr__xfer_hdr_encode(out, PDR_XF_FETCH_RDMA, room, len - PDR_XFER_HDR_LEN);
    uint8_t *p = out + flen;
    pdr__put_u32(p, tag);
    pdr__put_u32(p + 4, (uint32_t)eplen);
    pdr__put_u32(p + 8, (uint32_t)memlen);
    pdr__put_u32(p + 12, 0);
    memcpy(p + PDR_XFER_RDMA_EXT, ep, eplen);
    memcpy(p + PDR_XFER_RDMA_EXT + eplen, mem, memlen);
    return len;
}

int pdr__xfer_fetch_rdma_decode(const uint8_t *body, size_t len, struct pdr_xfer_fetch_desc *fd,
                                struct pdr_xfer_rdma_desc *rd)
{
    memset(rd, 0, sizeof(*rd));
    size_t flen;
    if (fetch_ext_decode(body, len, PDR_RDMA_MAX_SEGS, PDR_XFER_RDMA_EXT, fd, &flen) != 0)
        return PDR_EPROTO;
    const uint8_t *p = body + flen;
    size_t eplen = pdr__get_u32(p + 4), memlen = pdr__get_u32(p + 8);
    if (pdr__get_u32(p + 12) != 0 || eplen > PDR_RDMA_EP_MAX_BYTES ||
        len - flen - PDR_XFER_RDMA_EXT != eplen + memlen)
        return PDR_EPROTO;
    struct pdr_rdma_ep_info info;
    uint64_t mtotal = 0;
    uint32_t mseg = 0;
    const uint8_t *ep = p + PDR_XFER_RDMA_EXT;
    if (pdr__rdma_unpack_ep(ep, eplen, &info) != 0 ||
        pdr__rdma_peek_mem(ep + eplen, memlen, &mseg, &mtotal) != 0 || mtotal != fd->total)
        return PDR_EPROTO;
    rd->tag = pdr__get_u32(p);
    rd->ep = ep;
    rd->eplen = eplen;
    rd->mem = ep + eplen;
    rd->memlen = memlen;
    rd->nseg = mseg;
    return 0;
}

size_t pdr__xfer_rdma_ready_encode(uint8_t *out, size_t cap, uint64_t room, uint64_t xid, uint32_t qpn0,
                                   const uint8_t *ep, size_t eplen)
{
    size_t len = PDR_XFER_HDR_LEN + PDR_XFER_RDMA_READY_FIXED + eplen;
    if (cap < len || eplen == 0 || eplen > PDR_RDMA_EP_MAX_BYTES)
        return 0;
    pdr__xfer_hdr_encode(out, PDR_XF_RDMA_READY, room, len - PDR_XFER_HDR_LEN);
    uint8_t *p = out + PDR_XFER_HDR_LEN;
    pdr__put_u64(p, xid);
    pdr__put_u32(p + 8, qpn0);
    pdr__put_u32(p + 12, 0);
    memcpy(p + PDR_XFER_RDMA_READY_FIXED, ep, eplen);
    return len;
}

int pdr__xfer_rdma_ready_decode(const uint8_t *body, size_t len, uint64_t *xid, uint32_t *qpn0,
                                const uint8_t **ep, size_t *eplen)
{
    struct pdr_rdma_ep_info info;
    if (len <= PDR_XFER_RDMA_READY_FIXED || pdr__get_u32(body + 12) != 0 ||
        pdr__rdma_unpack_ep(body + PDR_XFER_RDMA_READY_FIXED, len - PDR_XFER_RDMA_READY_FIXED, &info) != 0)
        return PDR_EPROTO;
    *xid = pdr__get_u64(body);
    *qpn0 = pdr__get_u32(body + 8);
    *ep = body + PDR_XFER_RDMA_READY_FIXED;
    *eplen = len - PDR_XFER_RDMA_READY_FIXED;
    return 0;
}
