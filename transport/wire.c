/*
 * Frame encoders and validating decoders (see wire.h). Pure functions: any thread, no allocation.
 * Every length read from the wire is checked against a fixed limit before it is used.
 */
#include <string.h>
#include "err.h"
#include "wire.h"

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
        return len == 8 ? 0 : PDR_EPROTO;
    case PDR_XF_DONE:
    case PDR_XF_ACK:
    case PDR_XF_ERROR:
        return len == 16 ? 0 : PDR_EPROTO;
    case PDR_XF_PING:
    case PDR_XF_PONG:
        return len == 0 && out->room == 0 ? 0 : PDR_EPROTO;
    default:
        return PDR_EPROTO;
    }
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
        pdr__xfer_hdr_encode(out, type, room, 8);
        pdr__put_u64(p, xid);
        return PDR_XFER_HDR_LEN + 8;
    case PDR_XF_DONE:
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
        if (len != 8)
            return PDR_EPROTO;
        out->xid = pdr__get_u64(body);
        return 0;
    case PDR_XF_DONE:
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
