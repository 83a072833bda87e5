/*
 * The TCP backend's shared state: sessions, connections, control-frame queues, the staging ring of a
 * connection and the backend's per-engine state, used by its files (conn.c, session.c, ctl.c and one
 * mover_*.c per data mover). Not installed; only transport/ and its unit tests include it. Threading
 * and the locking rule (fields marked (L) are under eng->lock) are in transport_internal.h.
 *
 * Invariants:
 *  - Frames are never interleaved on a connection: a DATA frame, once started, is finished even if its
 *    room fails (the rest of its payload is sent as zeros), and a received DATA frame whose room failed
 *    is read to its end into a scratch buffer. So a failed room never breaks the framing of a
 *    connection, and only a malformed frame (PDR_EPROTO) or an I/O error closes one.
 *  - A room's chunks are claimed under eng->lock by whichever connection of the session is ready to
 *    send; each DATA frame names its offset, so the decode writes it in place and counts bytes. The
 *    prefill sends DONE (on the control connection) once every chunk was handed to the kernel; the
 *    decode ACKs when DONE arrived and its byte count reached the total.
 *  - Memory per connection is bounded: a 64 KiB receive buffer, one control body of at most the FETCH
 *    descriptor limit, and a control-frame queue of a few frames per pending room. Payload goes
 *    straight between the socket and the room's segments (readv/sendmsg), never through a copy
 *    proportional to the room size.
 *  - Nothing here touches a connection after pdr__conn_fail(): functions that can fail a connection return
 *    -1 and their callers stop. Failed connections are freed at the end of their thread's loop turn.
 */
#ifndef PDR_TRANSPORT_SESSION_H
#define PDR_TRANSPORT_SESSION_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include "transport_internal.h"

#define RBUF_CAP (64u << 10)
#define MAX_IOV 64
#define IO_BUDGET (8u << 20) /* bytes per connection per loop turn, for fairness */

struct ctl_msg {
    pdr_dlink_t link; /* its connection's control-frame queue (struct pdr__conn's cq) */
    size_t len;
    uint8_t *data; /* inl, or a heap buffer for FETCH and HELLO */
    uint8_t inl[PDR_XFER_HDR_LEN + 16];
};

enum { RX_HDR = 0, RX_DATAPFX, RX_BODY, RX_PAYLOAD };

/* A pinned staging buffer of chunk_bytes for GPU rooms (see "GPU staging" below). */
enum { STG_FREE = 0, STG_FILL, STG_COPY, STG_READY };
struct stage {
    uint8_t *buf;
    void *ev;
    struct pdr__op *op;     /* holds a reference, and one of the op's busy counts while STG_COPY */
    struct pdr__part *part; /* sender: the part of op the chunk belongs to, or NULL (a whole push) */
    uint64_t off, len;      /* room offset and bytes */
    int state;
};
enum { TX_IDLE = 0, TX_CTL, TX_DATA };
/* pdr__rx_process results besides 0 and -1: the connection must move to another thread. */
enum { RX_MIGRATE = 1 };

/* A session: the connections between one decode engine and one prefill engine. Created by thread 0
 * (outbound: by a pull; inbound: by the first frame of an accepted control connection), listed in
 * tcp_state.sessions until it dies; freed when its last reference (the list's, each connection's)
 * goes. Fields marked (L) are under eng->lock, the rest belong to thread 0. */
struct pdr__sess {
    pdr_dlink_t link;  /* tcp_state.sessions */
    pdr_dlink_t dlink; /* eng->dead_sess (L) */
    uint64_t id;
    int refs;        /* (L) */
    int dead;        /* (L) */
    int status;      /* (L) why it died */
    int dead_queued; /* (L) */
    int outbound;
    int hello_done; /* outbound: the peer's HELLO arrived and the data connections were opened */
    int nconns;
    struct pdr_xfer_hello peer_hello;
    struct pdr__conn *ctl;
    pdr_dlink_t *ops;  /* bound ops, by slink (L) */
    size_t nops;       /* (L) */
    pdr_dqueue_t push; /* push ops with unclaimed bytes, by plink, oldest first (L) */
    char peer[96];
    struct sockaddr_storage addr;
    socklen_t addrlen;
    /* Each mover's per-session state (its types are the mover's own), NULL until it is needed: */
    struct ipc_sess *ipc; /* mover_ipc.c: peer allocations opened by CUDA IPC, closed when the session dies */
    struct rdma_link *rdma; /* mover_rdma.c: the session's RDMA endpoint */
};

struct pdr__conn {
    int tag;           /* PDR__IO_CONN: first, see epoll data.ptr */
    pdr_dlink_t qlink; /* the adopt (L) or zombie list of its thread */
    pdr_dlink_t link;  /* its thread's conns while attached */
    struct pdr__io *io;
    struct pdr__sess *sess; /* holds a reference */
    int index;
    int fd;
    int connecting;
    int outbound;
    int dead;
    int hello_seen;
    int migrate_to;
    int attached;
    uint32_t evmask;
    char peer[96];

    uint8_t *rbuf;
    size_t rpos, rlen;
    int rx_state;
    struct pdr_xfer_hdr rh;
    uint8_t *body;
    size_t body_len, body_got;
    uint8_t body_inl[64];
    struct pdr__op *rx_op; /* holds a reference; NULL while discarding the payload of a failed room */
    uint64_t rx_off, rx_left, rx_len;

    pdr_dqueue_t cq; /* control frames waiting to be sent, oldest first (struct ctl_msg's link) */
    int tx_state;
    struct ctl_msg *tx_ctl; /* the control frame being sent, off cq */
    size_t tx_sent;
    uint8_t tx_hdr[PDR_XFER_HDR_LEN + PDR_XFER_DATA_PFX];
    struct pdr__op *tx_op;     /* holds a reference; NULL or dead: the rest of the frame is zeros */
    struct pdr__part *tx_part; /* the part of tx_op the frame sends, or NULL (a whole push) */
    uint64_t tx_off, tx_left, tx_len;

    /* GPU staging: a ring of staging_chunks buffers, slots [stg_head, stg_head + stg_count) in issue
     * order; allocated on the connection's first GPU room, freed with the connection. */
    struct stage *stg;
    size_t nstg, stg_head, stg_count;
    void *stream;
    int stg_dev;
    int tx_stage;   /* slot whose buffer the current DATA frame sends, or -1 */
    int rx_fill;    /* slot being filled from the socket, or -1 */
    int rx_blocked; /* stopped reading: every slot busy */
    uint64_t rx_fill_len;

    pdr_dlink_t *parked;   /* parked fetches of this control connection (struct pdr__parked's clink) */
    uint64_t last_live_ns; /* last byte received or DATA payload accepted by the kernel */
    int hb_armed;          /* the session had pending rooms at the last heartbeat check */
    uint64_t ping_ns;
};

struct tcp_state {
    int listen_tag;
    pdr_dlink_t *sessions; /* struct pdr__sess's link */
    struct pdr_xfer_hello me;
    /* Each mover's engine-wide state, allocated by its init hook, freed by its shutdown hook. */
    struct ipc_engine *ipc;   /* mover_ipc_internal.h */
    struct rdma_engine *rdma; /* mover_rdma.c */
};

/* A data mover moves the bytes of a room once its FETCH met its push. Each mover is one const instance
 * of this table in its own file (mover_tcp.c, mover_staging.c, mover_ipc.c, mover_rdma.c), with its
 * state behind the session and the op; a hook a mover does not need is NULL. Every hook runs on thread
 * 0 unless it says otherwise. Which mover a room tries is decided in one place, pdr__mover_choose. */
struct pdr__mover_ops {
    const char *name;
    /* Backend init, before any I/O thread runs: allocates the mover's engine-wide state. 0 or a PDR_E*
     * code (the engine is not created). */
    int (*init)(pdr_xfer_engine_t *eng);
    /* Decode: the FETCH-family frame that offers this mover for op on s, or NULL (*rc says why). */
    struct ctl_msg *(*offer)(pdr_xfer_engine_t *eng, struct pdr__sess *s, struct pdr__op *op, int *rc);
    /* Prefill: starts moving op's bytes as the decode's offer (body, len) asks. 0, or a PDR_E* code with
     * nothing started (the caller falls back or fails the room). */
    int (*serve)(pdr_xfer_engine_t *eng, struct pdr__op *op, struct pdr__sess *s, const uint8_t *body,
                 size_t len);
    /* op leaves its session (completion, cancel, deadline): release what this mover holds of it. */
    void (*abort)(pdr_xfer_engine_t *eng, struct pdr__op *op, struct pdr__sess *s);
    /* Before thread 0 waits for op's busy count: finish the copies thread 0 issued itself. */
    void (*quiesce)(pdr_xfer_engine_t *eng, struct pdr__op *op);
    /* Each turn of thread 0: polls work in flight; returns how many rooms are still pending. */
    int (*poll)(pdr_xfer_engine_t *eng);
    /* Session s dies (io: thread 0, or NULL at shutdown): releases the mover's per-session state. */
    void (*sess_close)(pdr_xfer_engine_t *eng, struct pdr__io *io, struct pdr__sess *s);
    /* [addr, addr+len) was unregistered (any thread): forget what was exported from it. */
    void (*mem_unregistered)(pdr_xfer_engine_t *eng, const void *addr, size_t len);
    /* After every thread was joined and every session closed: frees the mover's engine-wide state (also
     * after a failed init: its state may be NULL). */
    void (*shutdown)(pdr_xfer_engine_t *eng);
};

extern const struct pdr__mover_ops pdr__mover_tcp, pdr__mover_staging, pdr__mover_ipc, pdr__mover_rdma;
#define PDR__NMOVERS 4
/* Every mover, for the hooks that concern all of them, in the order they run. */
extern const struct pdr__mover_ops *const pdr__movers[PDR__NMOVERS];

/* The steps at which a room's mover is chosen. */
enum {
    PDR__CHOOSE_PUSH,  /* a push was posted (prefill) */
    PDR__CHOOSE_PULL,  /* a pull was posted (decode), before its session is known */
    PDR__CHOOSE_OFFER, /* the decode's FETCH goes on session s */
    PDR__CHOOSE_SERVE, /* the prefill matched a FETCH (of type ext_type, with a body or not) */
};
/* What pdr__mover_choose decided. Movers not tried fall back to the TCP mover (mover_tcp.c), which moves
 * every kind of memory (device memory through the staging ring). */
struct pdr__mover_plan {
    int refuse;      /* the forced backend cannot move this room: it fails with PDR_ENOTSUP */
    int ipc, rdma;   /* try CUDA IPC, RDMA (on the decode IPC is offered first, then RDMA) */
    int ipc_forced;  /* backend cuda_ipc: a failed CUDA IPC fails the room instead of falling back */
    int rdma_forced; /* backend rdma: likewise for RDMA */
    int need_hello;  /* PDR__CHOOSE_PULL: the choice needs the peer's HELLO (its RDMA capability) */
};

/* -- cross-file functions (begin) -- */
/* conn.c */
struct tcp_state *pdr__tcp_st(pdr_xfer_engine_t *eng);
void pdr__conn_set_events(pdr_xfer_engine_t *eng, struct pdr__conn *c, uint32_t mask);
struct pdr__conn *pdr__conn_new(int fd, int outbound, int connecting, const char *peer);
int pdr__conn_attach(struct pdr__io *io, struct pdr__conn *c);
void pdr__conn_handoff(pdr_xfer_engine_t *eng, struct pdr__io *io, struct pdr__conn *c);
void pdr__rescan_all(pdr_xfer_engine_t *eng);
void pdr__ctl_free(struct ctl_msg *m);
void pdr__ctl_free_all(pdr_dqueue_t *q);
void pdr__conn_free(pdr_xfer_engine_t *eng, struct pdr__conn *c);
void pdr__conn_fail(pdr_xfer_engine_t *eng, struct pdr__conn *c, int status);
int pdr__connect_to(pdr_xfer_engine_t *eng, const struct sockaddr_storage *addr, socklen_t addrlen,
                    int *connecting, int *err);
void pdr__tcp_on_event(pdr_xfer_engine_t *eng, struct pdr__io *io, void *handle, uint32_t events);
int pdr__tcp_tick(pdr_xfer_engine_t *eng, struct pdr__io *io, uint64_t now);
void pdr__tcp_after_turn(pdr_xfer_engine_t *eng, struct pdr__io *io);
int pdr__tcp_init(pdr_xfer_engine_t *eng);
void pdr__tcp_shutdown(pdr_xfer_engine_t *eng);
/* session.c */
void pdr__sess_unref(pdr_xfer_engine_t *eng, struct pdr__sess *s);
void pdr__push_list_add(struct pdr__sess *s, struct pdr__op *op);
void pdr__push_list_del(struct pdr__sess *s, struct pdr__op *op);
void pdr__mover_choose(pdr_xfer_engine_t *eng, const struct pdr__sess *s, const struct pdr__op *op, int step,
                       int ext_type, int has_body, struct pdr__mover_plan *p);
int pdr__movers_init(pdr_xfer_engine_t *eng);
void pdr__movers_abort(pdr_xfer_engine_t *eng, struct pdr__op *op, struct pdr__sess *s);
void pdr__movers_quiesce(pdr_xfer_engine_t *eng, struct pdr__op *op);
int pdr__movers_poll(pdr_xfer_engine_t *eng);
void pdr__movers_sess_close(pdr_xfer_engine_t *eng, struct pdr__io *io, struct pdr__sess *s);
void pdr__movers_mem_unregistered(pdr_xfer_engine_t *eng, const void *addr, size_t len);
void pdr__movers_shutdown(pdr_xfer_engine_t *eng);
void pdr__push_match(pdr_xfer_engine_t *eng, struct pdr__op *op, struct pdr__conn *c, uint64_t xid,
                     uint64_t total, const uint8_t *ipc, size_t ipc_len, int ext_type);
void pdr__tcp_start_push(pdr_xfer_engine_t *eng, struct pdr__op *op);
void pdr__tcp_start_pull(pdr_xfer_engine_t *eng, struct pdr__op *op);
void pdr__sess_kill(pdr_xfer_engine_t *eng, struct pdr__sess *s, int status);
int pdr__sess_implicit(pdr_xfer_engine_t *eng, struct pdr__conn *c);
int pdr__on_hello(pdr_xfer_engine_t *eng, struct pdr__conn *c, const uint8_t *body, size_t len);
void pdr__read_identity(struct pdr_xfer_hello *me);
/* ctl.c */
struct ctl_msg *pdr__ctl_new(size_t len);
void pdr__cq_append(pdr_xfer_engine_t *eng, struct pdr__conn *c, struct ctl_msg *m);
int pdr__queue_ctl(pdr_xfer_engine_t *eng, struct pdr__conn *c, uint8_t type, uint64_t room, uint64_t xid,
                   uint64_t value, int32_t code);
void pdr__tomb_del(pdr_xfer_engine_t *eng, struct pdr__parked *p);
void pdr__parked_unlink(struct pdr__conn *c, struct pdr__parked *p);
void pdr__drop_parked_all(pdr_xfer_engine_t *eng, struct pdr__conn *c);
void pdr__tcp_abort(pdr_xfer_engine_t *eng, struct pdr__op *op, int notify_code);
int pdr__on_ctl(pdr_xfer_engine_t *eng, struct pdr__conn *c, const struct pdr_xfer_hdr *h,
                const uint8_t *body);
void pdr__tcp_ready(pdr_xfer_engine_t *eng, struct pdr__op *op, int what);
void pdr__tcp_parked_expired(pdr_xfer_engine_t *eng, struct pdr__parked *p);
/* mover_tcp.c */
int pdr__seg_iov_at(const struct pdr__op *op, uint64_t off, uint64_t max, struct iovec *iov, int maxiov);
/* The same for a push's source: from part's segments when it is not NULL (a push in parts). */
int pdr__src_iov_at(const struct pdr__op *op, const struct pdr__part *part, uint64_t off, uint64_t max,
                    struct iovec *iov, int maxiov);
void pdr__rx_advance(pdr_xfer_engine_t *eng, struct pdr__conn *c, uint64_t n);
void pdr__rx_drop_op(pdr_xfer_engine_t *eng, struct pdr__conn *c);
int pdr__rx_process(pdr_xfer_engine_t *eng, struct pdr__conn *c);
int pdr__conn_read(pdr_xfer_engine_t *eng, struct pdr__conn *c);
struct pdr__op *pdr__claim(pdr_xfer_engine_t *eng, struct pdr__conn *c, int want_dev, uint64_t *off,
                           uint64_t *len, struct pdr__part **part);
int pdr__conn_flush(pdr_xfer_engine_t *eng, struct pdr__conn *c);
/* mover_staging.c */
int pdr__io_bind(struct pdr__io *io, int dev);
int pdr__stage_init(pdr_xfer_engine_t *eng, struct pdr__conn *c, int dev);
void pdr__stage_free(pdr_xfer_engine_t *eng, struct pdr__conn *c);
void pdr__op_fail_async(pdr_xfer_engine_t *eng, struct pdr__op *op, int status);
size_t pdr__stage_poll(pdr_xfer_engine_t *eng, struct pdr__conn *c, int block);
int pdr__stage_issue(pdr_xfer_engine_t *eng, struct pdr__conn *c, struct stage *g, struct pdr__op *op,
                     int d2h);
int pdr__rx_stage_slot(pdr_xfer_engine_t *eng, struct pdr__conn *c);
void pdr__rx_stage_commit(pdr_xfer_engine_t *eng, struct pdr__conn *c, uint64_t n);
size_t pdr__rx_stage_room(pdr_xfer_engine_t *eng, const struct pdr__conn *c);
int pdr__stage_pump(pdr_xfer_engine_t *eng, struct pdr__conn *c, int *want);
void pdr__stage_quiesce(pdr_xfer_engine_t *eng, struct pdr__op *op);
/* mover_ipc.c */
int pdr__same_host(pdr_xfer_engine_t *eng, const struct pdr__sess *s);
void pdr__ipc_map_close(struct pdr__io *io, struct pdr__sess *s);
int pdr__ipc_start(pdr_xfer_engine_t *eng, struct pdr__op *op, struct pdr__sess *s, const uint8_t *body,
                   size_t len);
void pdr__ipc_finish(pdr_xfer_engine_t *eng, struct pdr__op *op);
int pdr__ipc_poll(pdr_xfer_engine_t *eng);
void pdr__ipc_parts(pdr_xfer_engine_t *eng, struct pdr__op *op);
/* mover_ipc_export.c */
void pdr__tcp_mem_unregistered(pdr_xfer_engine_t *eng, const void *addr, size_t len);
struct ctl_msg *pdr__fetch_ipc_msg(pdr_xfer_engine_t *eng, struct pdr__op *op);
/* mover_rdma.c */
void pdr__mv_rdma_link_kill(pdr_xfer_engine_t *eng, struct pdr__sess *s);
struct ctl_msg *pdr__mv_rdma_fetch_msg(pdr_xfer_engine_t *eng, struct pdr__sess *s, struct pdr__op *op,
                                       int *rc);
int pdr__mv_rdma_push_start(pdr_xfer_engine_t *eng, struct pdr__op *op, struct pdr__sess *s,
                            const uint8_t *body, size_t len);
int pdr__mv_rdma_on_ready(pdr_xfer_engine_t *eng, struct pdr__conn *c, uint64_t room, const uint8_t *body,
                          size_t len);
void pdr__mv_rdma_on_go(pdr_xfer_engine_t *eng, struct pdr__sess *s);
void pdr__mv_rdma_abort(pdr_xfer_engine_t *eng, struct pdr__op *op, struct pdr__sess *s);
/* -- cross-file functions (end) -- */

#endif
