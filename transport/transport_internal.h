/*
 * Engine internals shared by engine.c (lifecycle, command queue, the I/O threads), engine_room.c (API,
 * room table, timers, parked table, completion) and
 * the TCP backend (conn.c and the files session.h lists). Not installed; only transport/ and its unit tests
 * include it.
 *
 * Threads. An engine runs opts.io_threads I/O threads (struct pdr__io), each with its own epoll set.
 * Every connection is owned by exactly one of them: only the owner reads, writes, flushes or frees it.
 * I/O thread 0 is the control thread; it alone
 *  - drains the command queue (posted ops and cancels), arms and fires deadlines (the timer heap),
 *    owns the parked-fetch table, the listener and the session list;
 *  - owns every session's control connection (index 0), so FETCH, WAIT, DONE, ACK, ERROR, CANCEL and
 *    HELLO are all handled there;
 *  - completes every op (pdr__op_complete), so every user callback runs on I/O thread 0.
 * Other threads own data connections (index >= 1) and only move DATA bytes and heartbeats.
 *
 * Shared state and its lock. eng->lock guards the room table, the command queue, each session's push
 * list and op list, the fields of an op marked (L) below, op and session reference counts, every
 * thread's adopt list and rescan flag, and the ready list that data threads use to hand an op back to
 * thread 0 (all bytes sent: send DONE; all bytes received: ACK and complete). A data thread never
 * completes an op or touches the timer heap.
 *
 * User memory. A data thread touches an op's segments only between pdr__op_enter() and pdr__op_leave()
 * (one syscall or memcpy); pdr__op_complete first marks the op dead and then waits (yielding) until no
 * thread is inside, so once a callback has run the engine never reads or writes that room's memory
 * again. The op struct itself lives until its last reference is dropped (pdr__op_unref).
 *
 * Sessions. A pull opens a session to its peer (host:port): conns_per_peer connections, the first one
 * the control connection. A room's DATA chunks are claimed one at a time by whichever connection of the
 * session is ready to send (so they stripe over all of them); offsets are explicit. A dead connection
 * kills its session: the rooms bound to it fail (PDR_EPEERGONE, or PDR_EPROTO after a malformed frame),
 * rooms of other sessions are untouched, and the next pull to that peer opens a fresh session.
 */
#ifndef PDR_TRANSPORT_INTERNAL_H
#define PDR_TRANSPORT_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>
#include "dlist.h"
#include "transport.h"
#include "wire.h"

enum { PDR__OP_PUSH = 0, PDR__OP_PULL = 1 };

enum pdr__op_state {
    PDR__OP_QUEUED = 0, /* posted, not yet seen by the I/O thread */
    PDR__OP_WAITING,    /* push: not matched with a fetch; pull: FETCH sent, nothing heard */
    PDR__OP_PARKED,     /* pull: the peer answered WAIT (room not offered yet) */
    PDR__OP_ACTIVE,     /* data flowing */
    PDR__OP_DRAINED,    /* push: every chunk sent and DONE queued, waiting for the ACK */
};

/* A deadline in the engine's min-heap (thread 0). idx is SIZE_MAX while not armed. */
struct pdr__timer {
    uint64_t at_ns;
    size_t idx;
    uint8_t what; /* PDR__TIMER_OP or PDR__TIMER_PARKED */
};
enum { PDR__TIMER_OP = 1, PDR__TIMER_PARKED = 2 };

struct pdr__conn;
struct pdr__sess;

/* Reasons an op sits on the ready list (bits). */
enum { PDR__READY_SENT = 1, PDR__READY_GOT = 2, PDR__READY_FAIL = 4, PDR__READY_PART = 8 };

/* One published part of a push opened in parts (pdr_xfer_push_open): the room's bytes [off, off+len)
 * in the part's own segments. Immutable once published, except claimed; freed with its op. A connection
 * or staging slot that claimed bytes of a part keeps a pointer to it next to its reference to the op. */
struct pdr__part {
    pdr_dlink_t olink; /* op->parts, by offset (L) */
    pdr_dlink_t qlink; /* op->pend, while it has unclaimed bytes (L) */
    uint64_t off, len;
    uint64_t claimed; /* bytes handed to a connection or a copy (L) */
    size_t nseg;
    pdr_xfer_seg_t *segs; /* allocated with the struct */
    uint64_t *cum;        /* cum[i]: room offset of segs[i]; cum[0] = off, cum[nseg] = off + len */
};
/* At most this many parts per room (PDR_ETOOBIG beyond). */
#define PDR__MAX_PARTS 65536

struct pdr__op {
    struct pdr__timer timer; /* first: container from timer */
    pdr_dlink_t hlink;       /* room table bucket (L) */
    pdr_dlink_t qlink;       /* command queue, eng->cmds (L) */
    pdr_dlink_t slink;       /* session's op list (L) */
    pdr_dlink_t plink;       /* session's push queue: ops with unclaimed bytes (L) */
    pdr_dlink_t rlink;       /* ready list, eng->ready (L) */
    uint64_t room;
    int kind;
    int state; /* thread 0 */
    int ready; /* PDR__READY_* bits (L) */
    int refs;  /* (L) the room table holds one; every connection or list holding the op one more */
    int dead;  /* atomic: set once by pdr__op_complete */
    int busy;  /* atomic: threads inside pdr__op_enter/leave */
    int dev;   /* -1: host memory; else the CUDA device ordinal that owns every segment */
    pdr_xfer_seg_t *segs;
    uint64_t *cum; /* cum[i]: offset of segs[i] in the room; nseg + 1 entries */
    size_t nseg;
    uint64_t total;
    uint64_t xid;      /* pull: our id; push: the id of the fetch being served */
    uint64_t next_off; /* push: the next byte not yet claimed by a connection (L) */
    uint64_t sent;     /* push: bytes whose DATA frames were fully sent (L) */
    uint64_t got;      /* pull: bytes received (L) */
    int done_seen;     /* pull: DONE arrived (thread 0) */
    int fail_status;   /* PDR__READY_FAIL: a data thread's reason (L) */
    uint32_t timeout_ms;
    uint64_t t_post_ns;
    struct pdr__sess *sess; /* set and cleared by thread 0 under L */
    pdr_xfer_done_cb cb;
    pdr_xfer_info_cb info_cb;
    void *arg;
    const char *backend; /* name of the backend that moved the bytes, "none" before */
    /* The data mover (session.h's struct pdr__mover_ops) that holds this room's state mv: a pull whose
     * FETCH offered it (mv may stay NULL), a push it serves. NULL: the TCP mover, which keeps none. */
    const void *mover; /* thread 0 */
    void *mv;       /* that mover's state of the room, or NULL (thread 0; its fields marked (L) under it) */
    int wait_hello; /* pull: its FETCH waits for the peer's HELLO (RDMA capability) (L) */
    /* A push opened in parts: parted is set at creation; the rest is under L. Its segs stay NULL: every
     * published part carries its own (struct pdr__part). dev is set by the first part. */
    int parted;
    int tcp_serving;    /* (L) the TCP mover serves it: a new part goes on the push list */
    pdr_dlink_t *parts; /* (L) published parts (struct pdr__part's olink), by offset */
    pdr_dqueue_t pend;  /* (L) parts with unclaimed bytes (qlink), in publish order */
    size_t nparts;      /* (L) */
    size_t part_segs;   /* (L) segments of every part */
    uint64_t published; /* (L) bytes published */
    /* pull only */
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char peer[96]; /* "host:port", the session cache key */
};

/* A FETCH that arrived before the push of its room; or, with conn NULL and tomb_code set, a tombstone:
 * the memory of a push that was canceled or expired before anyone fetched it (tomb_push 1: a late
 * FETCH fails at once with tomb_code), or of a parked fetch that its decode canceled or gave up
 * (tomb_push 0: a late push fails at once), instead of either side waiting for its deadline.
 * Thread 0 only. */
struct pdr__parked {
    struct pdr__timer timer;
    pdr_dlink_t hlink; /* parked table bucket */
    pdr_dlink_t clink; /* its connection's parked list (struct pdr__conn's parked) */
    uint64_t room, xid, total;
    struct pdr__conn *conn;
    int tomb_code;
    int tomb_push;
    uint8_t *ipc; /* FETCH_IPC or FETCH_RDMA body (allocated with the struct), or NULL */
    size_t ipc_len;
    int ext_type; /* PDR_XF_FETCH_IPC or PDR_XF_FETCH_RDMA when ipc != NULL */
};

struct pdr__cancel {
    pdr_dlink_t link; /* eng->cancels (L) */
    uint64_t room;
};

/* One I/O thread. */
struct pdr__io {
    int wake_tag; /* PDR__IO_WAKE: first; &wake_tag is the eventfd's epoll data.ptr */
    int idx;
    int epfd;
    int wakefd;
    pthread_t thread;
    int started;
    /* Owner thread only: */
    int cuda_dev;  /* the device whose primary context is current here, -1 none */
    int copy_wait; /* this turn's timeout 0 is only for GPU copies in flight: wait briefly, do not spin */
    pdr_dlink_t *conns;   /* attached connections (struct pdr__conn's link) */
    pdr_dlink_t *zombies; /* failed connections, freed after the turn (struct pdr__conn's qlink) */
    /* Under eng->lock: */
    pdr_dlink_t *adopt; /* connections handed to this thread (struct pdr__conn's qlink) */
    int rescan;         /* look at every connection: new work, or its session died */
    int wake_pending;
};

/* The TCP backend (conn.c, session.c, ctl.c and the data movers, mover_*.c; session.h has its types),
 * the one backend engine.c drives. All of these run on I/O threads; those without an io argument run
 * on thread 0. */
int pdr__tcp_init(pdr_xfer_engine_t *eng);
void pdr__tcp_start_push(pdr_xfer_engine_t *eng, struct pdr__op *op);
void pdr__tcp_start_pull(pdr_xfer_engine_t *eng, struct pdr__op *op);
/* Detaches op from the backend; tells the peer when notify_code != 0. */
void pdr__tcp_abort(pdr_xfer_engine_t *eng, struct pdr__op *op, int notify_code);
/* Before pdr__op_complete waits for op's busy count: finish what thread 0 itself holds. */
void pdr__movers_quiesce(pdr_xfer_engine_t *eng, struct pdr__op *op);
/* An op on the ready list (thread 0). */
void pdr__tcp_ready(pdr_xfer_engine_t *eng, struct pdr__op *op, int what);
void pdr__tcp_on_event(pdr_xfer_engine_t *eng, struct pdr__io *io, void *handle, uint32_t events);
/* Adopted connections, rescans, heartbeats; returns the ms until it wants to run again, or -1. */
int pdr__tcp_tick(pdr_xfer_engine_t *eng, struct pdr__io *io, uint64_t now_ns);
void pdr__tcp_parked_expired(pdr_xfer_engine_t *eng, struct pdr__parked *p);
void pdr__tcp_after_turn(pdr_xfer_engine_t *eng, struct pdr__io *io);
void pdr__tcp_shutdown(pdr_xfer_engine_t *eng); /* after every thread was joined */
/* [addr, addr+len) was unregistered (any thread): the movers forget what was exported from it. */
void pdr__movers_mem_unregistered(pdr_xfer_engine_t *eng, const void *addr, size_t len);

struct pdr_xfer_memreg {
    pdr_dlink_t link; /* eng->mem (L) */
    void *addr;
    size_t len;
    int kind;
    int ordinal;
    /* The region's one RDMA MR on the engine's RDMA context (mover_rdma.c's rdma_mem_ref): registered by
     * thread 0 on the first RDMA room inside the region, released by pdr_xfer_mem_unregister, or by the last
     * room that still uses it when unregister came first (link no longer linked), or at shutdown.
     * rdma_refs and link are guarded by eng->lock; rdma_mr and the keys are written by thread 0 only,
     * under it. */
    struct pdr_rdma_mr *rdma_mr;
    uint32_t rdma_lkey, rdma_rkey;
    int rdma_refs; /* RDMA rooms in flight whose keys come from rdma_mr */
};

struct pdr_xfer_engine {
    pdr_xfer_opts_t opts;
    int backend_forced; /* 0 auto, else a PDR__BE_* value */
    int listen_fd;
    int listen_port;
    int nio;
    struct pdr__io *io;

    pthread_mutex_t lock;
    /* Under lock: */
    pdr_dlink_t **rooms; /* hash of pending ops, keyed by (room, kind) (struct pdr__op's hlink) */
    size_t nbuckets;
    size_t nops;
    pdr_dqueue_t cmds;      /* posted ops, oldest first (qlink) */
    pdr_dqueue_t cancels;   /* struct pdr__cancel, oldest first */
    pdr_dqueue_t ready;     /* ops handed back to thread 0 (rlink) */
    pdr_dlink_t *dead_sess; /* sessions a data thread saw die (struct pdr__sess's dlink) */
    int closing;
    uint64_t next_xid;
    pdr_dlink_t *mem; /* registered regions (struct pdr_xfer_memreg's link), newest first */
    int has_cuda;     /* CUDA memory was registered here */

    /* Atomics (pdr_xfer_get_stats). */
    uint64_t st_transfers, st_failures, st_bytes_sent, st_bytes_received, st_staging, st_staging_peak;

    /* Thread 0 only: */
    struct pdr__timer **heap;
    size_t heap_len, heap_cap;
    pdr_dlink_t **parked; /* keyed by room, nbuckets (struct pdr__parked's hlink) */
    size_t nparked;
    void *be_state;
};

enum { PDR__BE_AUTO = 0, PDR__BE_TCP, PDR__BE_RDMA, PDR__BE_CUDA_IPC };

/* Room table (eng->lock held). */
struct pdr__op *pdr__room_find(pdr_xfer_engine_t *eng, uint64_t room, int kind);
/* The same, taking eng->lock. */
struct pdr__op *pdr__room_get(pdr_xfer_engine_t *eng, uint64_t room, int kind);

/* Timers (thread 0). */
int pdr__timer_arm(pdr_xfer_engine_t *eng, struct pdr__timer *t, uint64_t at_ns);
void pdr__timer_disarm(pdr_xfer_engine_t *eng, struct pdr__timer *t);

/* Completes op exactly once: tells the backend (which notifies the peer with notify_code when non-zero),
 * waits until no thread is inside its memory, removes it from the room table, runs the callback and
 * drops the table's reference. Thread 0. */
void pdr__op_complete(pdr_xfer_engine_t *eng, struct pdr__op *op, int status, int notify_code);
/* Drops a reference; frees the op at zero. Takes eng->lock. */
void pdr__op_unref(pdr_xfer_engine_t *eng, struct pdr__op *op);
/* Takes one more reference. Takes eng->lock. */
void pdr__op_ref(pdr_xfer_engine_t *eng, struct pdr__op *op);
/* Counts n more bytes of a live op, as sent (what PDR__READY_SENT: a push's DATA handed to the kernel)
 * or received (PDR__READY_GOT: a pull's bytes in place), and puts it on the ready list with what when
 * that reaches its total. Nothing for a dead op. Takes eng->lock; any thread. */
void pdr__op_count(pdr_xfer_engine_t *eng, struct pdr__op *op, uint64_t n, int what);
/* Around each access to op's memory from any thread: enter returns 0 (go ahead, then leave) or -1 (the
 * op is dead: do not touch its memory). */
static inline int pdr__op_enter(struct pdr__op *op)
{
    __atomic_add_fetch(&op->busy, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&op->dead, __ATOMIC_SEQ_CST)) {
        __atomic_sub_fetch(&op->busy, 1, __ATOMIC_SEQ_CST);
        return -1;
    }
    return 0;
}
static inline void pdr__op_leave(struct pdr__op *op)
{
    __atomic_sub_fetch(&op->busy, 1, __ATOMIC_SEQ_CST);
}
/* Parts (engine_parts.c). Whether op's FETCH may be served now: a whole push always, a push in parts
 * once its first part (which fixes its memory kind) was published. eng->lock held. */
int pdr__op_servable_locked(const struct pdr__op *op);
/* Takes the next chunk (at most max bytes) of op's first pending part: its room offset and length, and
 * the part. 0, or -1 when nothing is pending. eng->lock held. */
int pdr__part_take_locked(struct pdr__op *op, uint64_t max, uint64_t *off, uint64_t *len,
                          struct pdr__part **part);
/* Frees op's parts (its last reference went). */
void pdr__parts_free(struct pdr__op *op);
/* Thread 0: op got a new part (PDR__READY_PART): serve a FETCH parked for it, or give it to the mover. */
void pdr__parts_ready(pdr_xfer_engine_t *eng, struct pdr__op *op);
/* The device that owns [addr, addr+len): its ordinal, -1 for host memory, -2 when it straddles a
 * registered CUDA region's edge. eng->lock held. */
int pdr__mem_device_locked(pdr_xfer_engine_t *eng, const void *addr, size_t len);
/* Staging memory accounting (any thread). */
void pdr__stats_staging(pdr_xfer_engine_t *eng, int64_t delta);
/* Puts op on the ready list with reason what (eng->lock held) and wakes thread 0. */
void pdr__op_ready_locked(pdr_xfer_engine_t *eng, struct pdr__op *op, int what);

/* Wakes an I/O thread (eng->lock held). */
void pdr__io_wake_locked(pdr_xfer_engine_t *eng, struct pdr__io *io);

/* Parked fetches (thread 0). */
struct pdr__parked *pdr__parked_find(pdr_xfer_engine_t *eng, uint64_t room);
void pdr__parked_insert(pdr_xfer_engine_t *eng, struct pdr__parked *p);
void pdr__parked_remove(pdr_xfer_engine_t *eng, struct pdr__parked *p);

/* Tags on epoll data.ptr: the first member of every registered object. */
enum { PDR__IO_WAKE = 1, PDR__IO_LISTEN = 2, PDR__IO_CONN = 3 };

#endif
