/*
 * The transport's wire format: frame headers and room descriptors, encoded and decoded by pure
 * functions (no I/O, no allocation, no globals) so that unit tests and the fuzz target can drive them
 * directly. Everything is little-endian. docs/internals/transport.md has the frame table.
 *
 * Invariant: a decoder accepts a frame only if every field is within the limits below; whatever it
 * accepts the engine can process without further range checks except those that need engine state
 * (does the room exist, does the offset fit this room's destination).
 */
#ifndef PDR_XFER_WIRE_H
#define PDR_XFER_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define PDR_XFER_MAGIC 0x46584450u /* "PDXF" as little-endian bytes */
#define PDR_XFER_VERSION 1
#define PDR_XFER_HDR_LEN 24
/* The largest DATA payload a receiver accepts, whatever the sender's chunk_bytes. */
#define PDR_XFER_MAX_CHUNK (16u << 20)
/* The most segments a FETCH may describe (8 MiB of descriptor). */
#define PDR_XFER_WIRE_MAX_SEGS (1u << 20)

enum pdr_xfer_frame_type {
    PDR_XF_FETCH = 1, /* decode → prefill: {xid u64, total u64, timeout_ms u32, nseg u32, seglen u64[nseg]} */
    PDR_XF_WAIT = 2,        /* prefill → decode: {xid}; the room is not offered yet, the fetch is parked */
    PDR_XF_DATA = 3,        /* prefill → decode: {xid, offset u64} + payload */
    PDR_XF_DONE = 4,        /* prefill → decode: {xid, total}; every DATA of the room has been sent */
    PDR_XF_ACK = 5,         /* decode → prefill: {xid, total}; every byte arrived */
    PDR_XF_ERROR = 6,       /* either way: {xid, code i32, reserved u32}; the room failed with code */
    PDR_XF_CANCEL = 7,      /* either way: {xid}; the room was canceled by the sender's user */
    PDR_XF_PING = 8,        /* either way, room 0, no body */
    PDR_XF_PONG = 9,        /* answer to PING */
    PDR_XF_HELLO = 10,      /* either way, room 0, first frame of a connection: struct pdr_xfer_hello */
    PDR_XF_FETCH_IPC = 11,  /* decode → prefill: a FETCH body + its CUDA IPC table (below) */
    PDR_XF_IPC_DONE = 12,   /* prefill → decode: {xid, total}; the bytes were copied by CUDA IPC */
    PDR_XF_FETCH_RDMA = 13, /* decode → prefill: a FETCH body + its RDMA endpoint and memory (below) */
    PDR_XF_RDMA_READY = 14, /* prefill → decode: {xid, decode qpn0 u32, reserved u32} + its endpoint */
    PDR_XF_RDMA_GO = 15,    /* decode → prefill: {xid}; the decode's QPs are connected, write away */
    PDR_XF__MAX = 15,
};

/* FETCH_IPC body: the FETCH body (PDR_XFER_FETCH_FIXED + 8 × nseg), then {nhandles u32, reserved u32},
 * nhandles × {handle u8[64], device uuid u8[16]}, then nseg × {handle index u32, reserved u32, offset
 * u64}: destination segment i is at offset inside the allocation of handle index. A decode on the same
 * host with device memory sends it instead of FETCH; the prefill copies straight into the destination
 * (cuda_ipc) or, if it cannot, falls back to DATA frames as for a FETCH. */
#define PDR_XFER_IPC_HANDLE 64
#define PDR_XFER_IPC_HENTRY (PDR_XFER_IPC_HANDLE + 16)
#define PDR_XFER_IPC_SENTRY 16
#define PDR_XFER_IPC_MAX_HANDLES 4096
#define PDR_XFER_IPC_MAX_SEGS (1u << 16)
struct pdr_xfer_ipc_desc {
    uint32_t nhandles;
    const uint8_t *handles; /* nhandles × PDR_XFER_IPC_HENTRY, pointing into the decoded body */
    const uint8_t *segs;    /* nseg × PDR_XFER_IPC_SENTRY */
};

/* HELLO body (PDR_XFER_HELLO_LEN bytes): {session u64, index u32, nconns u32, caps u32, reserved u32,
 * boot_id char[40], hostname char[64]} (strings NUL-padded). The decode opens a session with index 0
 * (its control connection) and the prefill answers on it with its own HELLO; the decode then opens
 * indexes 1..nconns-1 (data connections), each starting with a HELLO naming the same session. */
#define PDR_XFER_HELLO_LEN 128
#define PDR_XFER_HELLO_MAX_CONNS 64
enum { PDR_XFER_CAP_CUDA = 1, PDR_XFER_CAP_RDMA = 2 };
struct pdr_xfer_hello {
    uint64_t session;
    uint32_t index;
    uint32_t nconns;
    uint32_t caps;
    char boot_id[40];  /* /proc/sys/kernel/random/boot_id, NUL-terminated */
    char hostname[64]; /* NUL-terminated */
};

/* Fixed prefix of every frame. len counts the bytes after the header (body and payload). */
struct pdr_xfer_hdr {
    uint32_t magic;
    uint8_t version;
    uint8_t type;
    uint16_t flags; /* reserved, 0 */
    uint64_t room;
    uint64_t len;
};

/* The fixed part of each body: DATA and the room-scoped control frames. */
#define PDR_XFER_DATA_PFX 16
#define PDR_XFER_FETCH_FIXED 24

struct pdr_xfer_fetch_desc {
    uint64_t xid;
    uint64_t total;
    uint32_t timeout_ms;
    uint32_t nseg;
    const uint8_t *seglens; /* nseg little-endian u64, pointing into the decoded body */
};

/* FETCH_RDMA body: the FETCH body, then {tag u32, eplen u32, memlen u32, reserved u32}, then eplen bytes
 * of pdr__rdma_pack_ep (the decode's endpoint) and memlen bytes of pdr__rdma_pack_mem (the destination
 * segments with rkeys; their total equals the FETCH total). tag: the low 32 bits the prefill's final
 * WRITE_WITH_IMM carries. RDMA_READY body: {xid u64, qpn0 u32, reserved u32} + the prefill's packed
 * endpoint, sent when the prefill (re)connected its endpoint to the decode endpoint whose first QP is
 * qpn0. docs/internals/transport.md has the handshake. */
#define PDR_XFER_RDMA_EXT 16
#define PDR_XFER_RDMA_READY_FIXED 16
struct pdr_xfer_rdma_desc {
    uint32_t tag;
    const uint8_t *ep; /* pointing into the decoded body */
    size_t eplen;
    const uint8_t *mem;
    size_t memlen;
    uint32_t nseg; /* of the memory descriptor */
};

/* A decoded WAIT, DONE, ACK, ERROR or CANCEL body. */
struct pdr_xfer_ctl {
    uint64_t xid;
    uint64_t value; /* DONE/ACK: total */
    int32_t code;   /* ERROR: a negative PDR_E* code */
};

static inline void pdr__put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline void pdr__put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint32_t pdr__get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}
static inline uint64_t pdr__get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* Writes a 24-byte header. */
void pdr__xfer_hdr_encode(uint8_t out[PDR_XFER_HDR_LEN], uint8_t type, uint64_t room, uint64_t len);
/* Decodes and validates a header (magic, version, type, flags, len against the type's limits).
 * Returns 0 or PDR_EPROTO. */
int pdr__xfer_hdr_decode(const uint8_t in[PDR_XFER_HDR_LEN], struct pdr_xfer_hdr *out);

/* Encodes a whole FETCH frame (header included) into out. Returns the frame length, or 0 if cap is
 * too small or nseg exceeds PDR_XFER_WIRE_MAX_SEGS. seglens[i] are host integers. */
size_t pdr__xfer_fetch_encode(uint8_t *out, size_t cap, uint64_t room, uint64_t xid, uint64_t total,
                              uint32_t timeout_ms, const size_t *seglens, size_t stride, uint32_t nseg);
/* The encoded size of a FETCH frame with nseg segments. */
static inline size_t pdr__xfer_fetch_size(uint32_t nseg)
{
    return PDR_XFER_HDR_LEN + PDR_XFER_FETCH_FIXED + (size_t)nseg * 8;
}
/* Decodes a FETCH body of len bytes: len must match nseg and the segment lengths must add up to total
 * without overflow. Returns 0 or PDR_EPROTO. */
int pdr__xfer_fetch_decode(const uint8_t *body, size_t len, struct pdr_xfer_fetch_desc *out);

/* Encodes a room-scoped control frame (WAIT, DONE, ACK, ERROR, CANCEL) or PING/PONG into out (at least
 * PDR_XFER_HDR_LEN + 16 bytes). Returns the frame length. */
size_t pdr__xfer_ctl_encode(uint8_t *out, uint8_t type, uint64_t room, uint64_t xid, uint64_t value,
                            int32_t code);
/* Decodes the body of a control frame whose header was accepted. ERROR codes must be PDR_E* codes.
 * Returns 0 or PDR_EPROTO. */
int pdr__xfer_ctl_decode(uint8_t type, const uint8_t *body, size_t len, struct pdr_xfer_ctl *out);

/* Decodes the DATA prefix; payload_len is the header len minus the prefix. */
void pdr__xfer_data_pfx_decode(const uint8_t in[PDR_XFER_DATA_PFX], uint64_t *xid, uint64_t *offset);
void pdr__xfer_data_hdr_encode(uint8_t out[PDR_XFER_HDR_LEN + PDR_XFER_DATA_PFX], uint64_t room, uint64_t xid,
                               uint64_t offset, uint64_t payload_len);

/* The encoded size of a FETCH_IPC frame. */
static inline size_t pdr__xfer_fetch_ipc_size(uint32_t nseg, uint32_t nhandles)
{
    return pdr__xfer_fetch_size(nseg) + 8 + (size_t)nhandles * PDR_XFER_IPC_HENTRY +
           (size_t)nseg * PDR_XFER_IPC_SENTRY;
}
/* Encodes a whole FETCH_IPC frame: handles is nhandles × PDR_XFER_IPC_HENTRY bytes (handle, uuid),
 * hidx[i] and offs[i] locate segment i. Returns the frame length, or 0 (cap too small, limits). */
size_t pdr__xfer_fetch_ipc_encode(uint8_t *out, size_t cap, uint64_t room, uint64_t xid, uint64_t total,
                                  uint32_t timeout_ms, const size_t *seglens, size_t stride, uint32_t nseg,
                                  const uint8_t *handles, uint32_t nhandles, const uint32_t *hidx,
                                  const uint64_t *offs);
/* Decodes a FETCH_IPC body: the FETCH part as pdr__xfer_fetch_decode, every handle index in range,
 * nseg <= PDR_XFER_IPC_MAX_SEGS, nhandles <= PDR_XFER_IPC_MAX_HANDLES, reserved fields zero, the
 * length exact. Returns 0 or PDR_EPROTO. */
int pdr__xfer_fetch_ipc_decode(const uint8_t *body, size_t len, struct pdr_xfer_fetch_desc *fd,
                               struct pdr_xfer_ipc_desc *ipc);
/* Segment i of a decoded table. */
static inline void pdr__xfer_ipc_seg(const struct pdr_xfer_ipc_desc *d, uint32_t i, uint32_t *hidx,
                                     uint64_t *off)
{
    *hidx = pdr__get_u32(d->segs + (size_t)i * PDR_XFER_IPC_SENTRY);
    *off = pdr__get_u64(d->segs + (size_t)i * PDR_XFER_IPC_SENTRY + 8);
}

/* Encodes a whole HELLO frame (header included) into out. Returns PDR_XFER_HDR_LEN + PDR_XFER_HELLO_LEN. */
size_t pdr__xfer_hello_encode(uint8_t out[PDR_XFER_HDR_LEN + PDR_XFER_HELLO_LEN],
                              const struct pdr_xfer_hello *h);
/* The encoded size of a FETCH_RDMA frame. */
size_t pdr__xfer_fetch_rdma_size(uint32_t nseg, size_t eplen, size_t memlen);
/* Encodes a whole FETCH_RDMA frame (seglens as pdr__xfer_fetch_encode). Returns its length or 0. */
size_t pdr__xfer_fetch_rdma_encode(uint8_t *out, size_t cap, uint64_t room, uint64_t xid, uint64_t total,
                                   uint32_t timeout_ms, const uint64_t *seglens, size_t stride, uint32_t nseg,
                                   uint32_t tag, const uint8_t *ep, size_t eplen, const uint8_t *mem,
                                   size_t memlen);
/* Decodes a FETCH_RDMA body: the FETCH part as pdr__xfer_fetch_decode, the reserved field zero, the
 * lengths exact, the endpoint valid (pdr__rdma_unpack_ep) and the memory header valid with the same
 * total (pdr__rdma_peek_mem). 0 or PDR_EPROTO. */
int pdr__xfer_fetch_rdma_decode(const uint8_t *body, size_t len, struct pdr_xfer_fetch_desc *fd,
                                struct pdr_xfer_rdma_desc *rd);
/* Encodes a whole RDMA_READY frame. Returns its length or 0. */
size_t pdr__xfer_rdma_ready_encode(uint8_t *out, size_t cap, uint64_t room, uint64_t xid, uint32_t qpn0,
                                   const uint8_t *ep, size_t eplen);
/* Decodes an RDMA_READY body (reserved zero, endpoint valid). 0 or PDR_EPROTO. */
int pdr__xfer_rdma_ready_decode(const uint8_t *body, size_t len, uint64_t *xid, uint32_t *qpn0,
                                const uint8_t **ep, size_t *eplen);

/* Decodes a HELLO body: index < nconns <= PDR_XFER_HELLO_MAX_CONNS, unknown caps bits and reserved
 * bytes zero, both strings NUL-terminated. Returns 0 or PDR_EPROTO. */
int pdr__xfer_hello_decode(const uint8_t *body, size_t len, struct pdr_xfer_hello *out);
/* Same host: equal, non-empty boot ids and host names. */
int pdr__xfer_hello_same_host(const struct pdr_xfer_hello *a, const struct pdr_xfer_hello *b);

#endif
