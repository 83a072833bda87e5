/*
 * The RDMA backend of the transfer engine: engine-facing internal API (only transport/ includes this).
 *
 * Two layers:
 *  - Pure parts, no verbs, unit-tested and fuzzed on any machine: the endpoint and memory descriptors
 *    (rdma_wire.c), the QP state machine and the per-room write plan (rdma_plan.c), and the NIC choice
 *    from a sysfs tree (rdma_topo.c).
 *  - The runtime (rdma.c): real libibverbs, compiled everywhere, exercised only where a device exists.
 *    The engine must pick this backend only when pdr__rdma_device_count() > 0.
 *
 * How the engine drives one peer (the descriptors travel over the engine's own control channel, the
 * TCP connection it already has, as opaque bytes):
 *
 *   ctx = pdr__rdma_open(NULL, gpu_bus_id, &err);                  // once per engine (per NIC)
 *   pdr__rdma_ep_create(ctx, 2, &ep, &mine);                        // per peer; QPs in INIT
 *   pdr__rdma_set_imm_cb(ep, on_room_arrived, eng);                 // receiver side, before connect
 *   n = pdr__rdma_pack_ep(&mine, buf, sizeof buf);   ... send buf, receive the peer's bytes ...
 *   pdr__rdma_unpack_ep(peer_bytes, len, &theirs);
 *   pdr__rdma_ep_connect(ep, &theirs);                              // RTR, RTS
 *   decode: pdr__rdma_reg(ctx, addr, len, is_cuda, &mr, &lkey, &rkey) per segment, then
 *           pdr__rdma_pack_mem(segs with rkeys) → send to the prefill; wait for on_room_arrived(tag32)
 *   prefill: pdr__rdma_reg(...) its own segments (lkeys), pdr__rdma_unpack_mem(the decode's bytes),
 *           pdr__rdma_write_room(ep, room, local, nl, remote, nr, done_cb, arg)
 *
 * Completion rule (why the IMM is separate): RC orders operations per QP only, and a room's writes are
 * spread over several QPs. So the sender posts every data WRITE first, waits until all of them have
 * completed locally (an RC WRITE completes at the requester only after the responder acknowledged it,
 * i.e. the bytes are placed), and only then posts one 0-byte RDMA_WRITE_WITH_IMM carrying the low 32
 * bits of the room tag (on the room's first QP). When the receiver sees that immediate, every byte of
 * the room is in its memory. Cost: one extra round trip per room, paid once, not per WR.
 *
 * Threading: every runtime function may be called from any thread except from a callback (ep_destroy
 * and close must not be called from one). Each context runs one completion thread; done_cb and imm_cb
 * run there, never inside the call that posted the work, and must not block. open, ep_create,
 * ep_connect, ep_destroy, reg and dereg make blocking verbs calls (reg pins memory: milliseconds per
 * GiB); the engine makes them on its I/O thread 0 (transport/mover_rdma.c), a bounded cost per session,
 * region or room, except that pdr_xfer_mem_unregister deregisters an idle region's MR on the caller's
 * thread. write_room and set_imm_cb only queue. Errors: 0 or a
 * negative PDR_E* code; verbs errors are translated here (IBV_WC_RETRY_EXC_ERR → PDR_EPEERGONE, other
 * WC errors → PDR_EIO, with ibv_wc_status_str logged).
 */
#ifndef PDR_TRANSPORT_RDMA_H
#define PDR_TRANSPORT_RDMA_H

#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------------------------------------------
 * Limits and defaults. Defaults cite mooncake (include/config.h, rdma_endpoint.cpp:36).
 */
#define PDR_RDMA_MAX_QP 16               /* QPs per endpoint (nqp) */
#define PDR_RDMA_DEFAULT_NQP 2           /* mooncake num_qp_per_ep=2 */
#define PDR_RDMA_MAX_WR 256              /* send WRs outstanding per QP; mooncake max_wr=256 */
#define PDR_RDMA_RECV_WR 64              /* receives pre-posted per QP for WITH_IMM notifications */
#define PDR_RDMA_MAX_SEGS 65536          /* segments per memory descriptor, as the TCP FETCH limit */
#define PDR_RDMA_WR_BYTES (1u << 20)     /* bytes per WRITE work request */
#define PDR_RDMA_BATCH_WRS 32            /* WRs chained per ibv_post_send; the last one is signaled */
#define PDR_RDMA_MAX_PLAN_WRS (1u << 22) /* a plan larger than this is PDR_ETOOBIG */

/* ---------------------------------------------------------------------------------------------------
 * Descriptors (rdma_wire.c). Little-endian, versioned; unpack validates everything and accepts only
 * the exact length. docs/internals/rdma.md draws both layouts.
 */
#define PDR_RDMA_EP_VERSION 1
#define PDR_RDMA_MEM_VERSION 1
#define PDR_RDMA_EP_FIXED 24    /* bytes before the per-QP entries */
#define PDR_RDMA_EP_PER_QP 7    /* qpn u32 + psn u24 */
#define PDR_RDMA_MEM_FIXED 16   /* bytes before the segments */
#define PDR_RDMA_MEM_PER_SEG 20 /* addr u64 + len u64 + rkey u32 */
#define PDR_RDMA_EP_MAX_BYTES (PDR_RDMA_EP_FIXED + PDR_RDMA_MAX_QP * PDR_RDMA_EP_PER_QP)

enum pdr_rdma_link {
    PDR_RDMA_LINK_IB = 1,
    PDR_RDMA_LINK_ETH = 2, /* RoCE (v2 preferred) */
};

/* What a peer needs to connect its QPs to ours. mtu is an enum ibv_mtu value (1: 256 ... 5: 4096). */
struct pdr_rdma_ep_info {
    uint8_t version; /* PDR_RDMA_EP_VERSION; pack ignores it and writes the current one */
    uint8_t nqp;     /* 1..PDR_RDMA_MAX_QP */
    uint8_t link_layer;
    uint8_t mtu;
    uint8_t gid_index;
    uint16_t lid;                  /* nonzero on InfiniBand */
    uint8_t gid[16];               /* nonzero on Ethernet */
    uint32_t qpn[PDR_RDMA_MAX_QP]; /* 24-bit QP numbers, >= 2 */
    uint32_t psn[PDR_RDMA_MAX_QP]; /* 24-bit initial packet sequence numbers */
};

/* One memory segment: on the wire (remote side) key is the rkey; in a local list it is the lkey. */
struct pdr_rdma_seg {
    uint64_t addr;
    uint64_t len;
    uint32_t key;
};

/* Bytes that pdr__rdma_pack_ep writes for nqp QPs / pdr__rdma_pack_mem for nseg segments. */
size_t pdr__rdma_ep_wire_size(unsigned nqp);
size_t pdr__rdma_mem_wire_size(uint32_t nseg);

/* Packs info into buf. Returns the bytes written, or 0 when info is invalid (the same rules unpack
 * checks) or cap is too small. */
size_t pdr__rdma_pack_ep(const struct pdr_rdma_ep_info *info, uint8_t *buf, size_t cap);
/* Returns 0, or PDR_EPROTO for anything malformed: short or trailing bytes, unknown version, nqp out of
 * range, unknown link layer or mtu, nonzero reserved bytes, qpn < 2 or > 2^24-1, LID 0 on IB, zero GID
 * on Ethernet. *out is written only on success. */
int pdr__rdma_unpack_ep(const uint8_t *buf, size_t len, struct pdr_rdma_ep_info *out);

/* Packs a room's remote memory (segments with rkeys). Returns the bytes written, or 0 when nseg is 0 or
 * above PDR_RDMA_MAX_SEGS, a segment is empty or wraps the address space, or cap is too small. */
size_t pdr__rdma_pack_mem(const struct pdr_rdma_seg *segs, uint32_t nseg, uint8_t *buf, size_t cap);
/* Reads the header only: *nseg and *total, so the caller can size the array. 0 or PDR_EPROTO (same
 * rules as below, except the segments themselves). */
int pdr__rdma_peek_mem(const uint8_t *buf, size_t len, uint32_t *nseg, uint64_t *total);
/* Unpacks into segs[0..cap). Returns 0; PDR_ETOOBIG when the descriptor holds more than cap segments;
 * PDR_EPROTO for a wrong length, version or reserved byte, nseg 0 or above PDR_RDMA_MAX_SEGS, an empty
 * or wrapping segment, or lengths whose sum overflows or differs from the stated total. */
int pdr__rdma_unpack_mem(const uint8_t *buf, size_t len, struct pdr_rdma_seg *segs, uint32_t cap,
                         uint32_t *nseg, uint64_t *total);

/* ---------------------------------------------------------------------------------------------------
 * QP state machine (rdma_plan.c), a pure function. NONE is "no QP yet", DESTROYED is terminal.
 *
 *   NONE    --create-->               RESET   action MODIFY_INIT
 *   RESET   --local_init_done-->      INIT    action NONE (wait for the peer's ep_info)
 *   INIT    --remote_info_received--> INIT    action MODIFY_RTR (with the remote info)
 *   INIT    --rtr_done-->             RTR     action MODIFY_RTS
 *   RTR     --rts_done-->             RTS     action NONE (ready: post work)
 *   RESET|INIT|RTR|RTS --error-->     ERR     action FLUSH_FAIL (fail every pending room)
 *   ERR     --error-->                ERR     action NONE
 *   any but NONE/DESTROYED --destroy--> DESTROYED  action DESTROY (fail pending rooms, destroy the QP)
 *
 * Everything else (remote info before INIT or twice, rts_done before RTR, anything after DESTROYED) is
 * PDR_EINVAL with *next = cur and *act = NONE.
 */
enum pdr_rdma_qp_state {
    PDR_RDMA_QPS_NONE = 0,
    PDR_RDMA_QPS_RESET,
    PDR_RDMA_QPS_INIT,
    PDR_RDMA_QPS_RTR,
    PDR_RDMA_QPS_RTS,
    PDR_RDMA_QPS_ERR,
    PDR_RDMA_QPS_DESTROYED,
    PDR_RDMA_QPS__COUNT
};
enum pdr_rdma_qp_event {
    PDR_RDMA_QPE_CREATE = 0,
    PDR_RDMA_QPE_LOCAL_INIT_DONE,
    PDR_RDMA_QPE_REMOTE_INFO,
    PDR_RDMA_QPE_RTR_DONE,
    PDR_RDMA_QPE_RTS_DONE,
    PDR_RDMA_QPE_ERROR,
    PDR_RDMA_QPE_DESTROY,
    PDR_RDMA_QPE__COUNT
};
enum pdr_rdma_qp_action {
    PDR_RDMA_QPA_NONE = 0,
    PDR_RDMA_QPA_MODIFY_INIT,
    PDR_RDMA_QPA_MODIFY_RTR,
    PDR_RDMA_QPA_MODIFY_RTS,
    PDR_RDMA_QPA_FLUSH_FAIL,
    PDR_RDMA_QPA_DESTROY,
};
int pdr__rdma_qp_step(enum pdr_rdma_qp_state cur, enum pdr_rdma_qp_event ev, enum pdr_rdma_qp_state *next,
                      enum pdr_rdma_qp_action *act);
/* Static names for logs ("RTS", "remote_info_received", "MODIFY_RTR"); "?" when out of range. */
const char *pdr__rdma_qp_state_name(int s);
const char *pdr__rdma_qp_event_name(int e);
const char *pdr__rdma_qp_action_name(int a);

/* ---------------------------------------------------------------------------------------------------
 * Per-room write plan (rdma_plan.c), a pure function.
 *
 * Walks the local segments (lkeys) and the remote segments (rkeys) together and emits one RDMA WRITE
 * per piece, cut at every segment boundary on either side and at max_wr_bytes. Consecutive WRs form
 * batches of batch_wrs (one ibv_post_send chain each); batch b goes to QP b % nqp; the last WR of each
 * batch is SIGNALED (its completion retires the whole batch, RC completes a QP's WRs in order). After
 * the data WRs comes one final entry: len 0, flags IMM|SIGNALED, QP 0, imm = low 32 bits of the tag,
 * in its own batch; the runtime posts it only after every data batch completed (see the completion
 * rule at the top). A room of n bytes therefore needs about n / max_wr_bytes + cuts + 1 entries. The
 * runtime rotates the QP numbers by one per room (room k's batch b goes to QP (b + k) % nqp, its IMM to
 * QP k % nqp), so that rooms of a single batch still spread over every QP.
 */
#define PDR_RDMA_WR_SIGNALED 1u /* request a completion: last WR of a batch */
#define PDR_RDMA_WR_IMM 2u      /* the final 0-byte WRITE_WITH_IMM */

struct pdr_rdma_wr {
    uint64_t laddr;
    uint64_t raddr;
    uint32_t len;
    uint32_t lkey;
    uint32_t rkey;
    uint32_t imm;   /* meaningful with PDR_RDMA_WR_IMM */
    uint32_t batch; /* batch index; the IMM entry has batch == number of data batches */
    uint16_t qp;    /* 0..nqp-1 */
    uint8_t flags;
};

struct pdr_rdma_plan_limits {
    uint32_t max_wr_bytes; /* 0: PDR_RDMA_WR_BYTES; at most 2^31 */
    uint32_t batch_wrs;    /* 0: PDR_RDMA_BATCH_WRS; at most PDR_RDMA_MAX_WR */
    uint32_t nqp;          /* 0: 1; at most PDR_RDMA_MAX_QP */
};

/* Computes the plan. With out == NULL only counts: *nwr receives the number of entries (data WRs + 1) and
 * *nbatch the number of data batches. Returns 0; PDR_ESIZE when the two sides' totals differ;
 * PDR_EINVAL for empty lists, empty or wrapping segments, or limits out of range; PDR_ETOOBIG when the
 * plan would exceed PDR_RDMA_MAX_PLAN_WRS or cap (with out != NULL). */
int pdr__rdma_plan(const struct pdr_rdma_seg *local, uint32_t nlocal, const struct pdr_rdma_seg *remote,
                   uint32_t nremote, const struct pdr_rdma_plan_limits *lim, uint64_t tag,
                   struct pdr_rdma_wr *out, size_t cap, size_t *nwr, uint32_t *nbatch);

/* ---------------------------------------------------------------------------------------------------
 * NIC choice by PCIe topology (rdma_topo.c). sysfs_root is "/sys" in production, a temp dir in tests.
 *
 * For each <sysfs_root>/class/infiniband/<name>, resolves <name>/device (a symlink into
 * .../devices/pci<dom>:<bus>/<bridge>/.../<nic>) and the GPU's <sysfs_root>/bus/pci/devices/<bus id>,
 * and ranks NICs by: (1) most leading path components shared with the GPU (same PCIe switch beats same
 * root port beats same root complex beats nothing); (2) same numa_node as the GPU; (3) name order.
 * gpu_pci_bus_id may be NULL (ranked by name only) and is accepted as "0000:3B:00.0" or
 * "00000000:3b:00.0". Returns 0 with the name in name[len]; PDR_ENOTSUP when there is no NIC;
 * PDR_ETOOBIG when len is too small; PDR_EINVAL for NULL arguments. A GPU bus id that does not resolve
 * is treated as unknown (ranked by name).
 */
int pdr__rdma_pick_nic(const char *sysfs_root, const char *gpu_pci_bus_id, char *name, size_t len);

/* ---------------------------------------------------------------------------------------------------
 * Runtime (rdma.c): libibverbs.
 */
struct pdr_rdma_ctx;
struct pdr_rdma_ep;
struct pdr_rdma_mr;

/* Number of RDMA devices: 0 when ibv_get_device_list returns NULL (no kernel support: ENOSYS) or none. */
int pdr__rdma_device_count(void);

/* Opens a device (dev_name NULL: pdr__rdma_pick_nic("/sys", gpu_pci_bus_id) among the listed devices,
 * else the first), its first ACTIVE port, the GID for RoCE (a RoCE v2 IPv4-mapped entry first, then any
 * RoCE v2, then any nonzero GID) or the LID for IB, a PD, one CQ with a completion channel, and starts
 * the completion thread. Returns NULL and sets *err: PDR_ENOTSUP (no device or no active port),
 * PDR_EINVAL, PDR_ENOMEM, PDR_EIO. */
struct pdr_rdma_ctx *pdr__rdma_open(const char *dev_name, const char *gpu_pci_bus_id, int *err);
/* The device's name ("mlx5_0"). */
const char *pdr__rdma_dev_name(const struct pdr_rdma_ctx *ctx);
/* Fails every room still pending on any endpoint with PDR_ECLOSED (callbacks run before this returns),
 * destroys the endpoints, joins the thread, releases MRs left registered and frees everything. */
void pdr__rdma_close(struct pdr_rdma_ctx *ctx);

/* Creates nqp RC QPs (1..PDR_RDMA_MAX_QP) for one peer, moves them to INIT, pre-posts receives and fills
 * *info for the peer. PDR_ETOOBIG when the context's CQ has no room for nqp more QPs. */
int pdr__rdma_ep_create(struct pdr_rdma_ctx *ctx, unsigned nqp, struct pdr_rdma_ep **ep,
                        struct pdr_rdma_ep_info *info);
/* Connects QP i to the peer's QP i: RTR (path MTU = min(ours, theirs)) then RTS (timeout 14, retry 7,
 * rnr_retry 7, max_rd_atomic min(16, device)). PDR_EPROTO when the nqp or link layer differ, PDR_EINVAL
 * when already connected, PDR_EIO when a modify fails. */
int pdr__rdma_ep_connect(struct pdr_rdma_ep *ep, const struct pdr_rdma_ep_info *remote);
/* Fails the endpoint's pending rooms with PDR_ECLOSED and destroys its QPs. Every callback of its rooms
 * and its imm_cb have returned when this returns. Not from a callback. */
void pdr__rdma_ep_destroy(struct pdr_rdma_ep *ep);

/* Receiver side: cb(arg, tag32) runs on the completion thread for each WITH_IMM that arrives (the room
 * whose tag's low 32 bits are tag32 is complete in memory). Set it before pdr__rdma_ep_connect. */
typedef void (*pdr__rdma_imm_cb)(void *arg, uint32_t tag32);
void pdr__rdma_set_imm_cb(struct pdr_rdma_ep *ep, pdr__rdma_imm_cb cb, void *arg);

/* Registers [addr, addr+len). Host memory: ibv_reg_mr with LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ (and
 * the optional RELAXED_ORDERING). CUDA memory (is_cuda): ibv_reg_dmabuf_mr over a dma-buf of the
 * page-aligned range from pdr__cuda_dmabuf_fd, falling back to ibv_reg_mr on the device pointer
 * (nvidia-peermem). The caller binds the owning device's context first (gpu_cuda.h's rule). Returns 0 or
 * PDR_EINVAL, PDR_ENOMEM, PDR_EIO (neither path worked; logged with errno). */
int pdr__rdma_reg(struct pdr_rdma_ctx *ctx, void *addr, size_t len, int is_cuda, struct pdr_rdma_mr **mr,
                  uint32_t *lkey, uint32_t *rkey);
/* Deregisters; the memory must not be in use by a pending room. NULL is a no-op. */
void pdr__rdma_dereg(struct pdr_rdma_mr *mr);

/* Sender side: writes the room (local segments with lkeys) into the peer's memory (remote segments
 * with rkeys, from pdr__rdma_unpack_mem) following pdr__rdma_plan, then the WITH_IMM carrying
 * (uint32_t)tag. done_cb(arg, status) runs once on the completion thread (or inside ep_destroy/close):
 * 0 when the IMM completed (the peer has every byte, even if the endpoint failed just after),
 * PDR_EPEERGONE (retry exceeded), PDR_EIO (any other verbs error), PDR_ECLOSED (destroyed). A failure
 * fails every room of the endpoint, which is dead from then on (destroy it, create a new one). Returns 0
 * (the callback will run), or PDR_EINVAL/PDR_ESIZE/PDR_ETOOBIG (plan), PDR_ENOMEM, PDR_EIO (the QPs are
 * not in RTS, or posting failed: the callback will not run). */
typedef void (*pdr__rdma_done_cb)(void *arg, int status);
int pdr__rdma_write_room(struct pdr_rdma_ep *ep, uint64_t tag, const struct pdr_rdma_seg *local,
                         uint32_t nlocal, const struct pdr_rdma_seg *remote, uint32_t nremote,
                         pdr__rdma_done_cb cb, void *arg);

#endif
