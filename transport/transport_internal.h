/*
 * Engine internals shared by engine.c (API, command queue, room table, timers, the I/O loop) and the
 * backends (tcp.c). Not installed; only transport/ and its unit tests include it.
 *
 * Ownership and threads:
 *  - An op (one push or pull) is allocated by the API call, inserted into the room table and the
 *    command queue under eng->lock, and from then on belongs to the I/O thread, which completes it
 *    exactly once (pdr__op_complete: table removal under the lock, then the callback, then free).
 *  - The room table is written by API threads (insert) and the I/O thread (remove), always under
 *    eng->lock; everything else (connections, parked fetches, the timer heap) is touched only by the
 *    I/O thread and needs no lock.
 */
#ifndef PDR_TRANSPORT_INTERNAL_H
#define PDR_TRANSPORT_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>
#include "transport.h"
#include "wire.h"

enum { PDR__OP_PUSH = 0, PDR__OP_PULL = 1 };

enum pdr__op_state {
    PDR__OP_QUEUED = 0, /* posted, not yet seen by the I/O thread */
    PDR__OP_WAITING,    /* push: not matched with a fetch; pull: FETCH sent, nothing heard */
    PDR__OP_PARKED,     /* pull: the peer answered WAIT (room not offered yet) */
    PDR__OP_ACTIVE,     /* data flowing */
    PDR__OP_DRAINED,    /* push: DONE sent, waiting for the ACK */
};

/* A deadline in the engine's min-heap. idx is SIZE_MAX while not armed. */
struct pdr__timer {
    uint64_t at_ns;
    size_t idx;
    uint8_t what; /* PDR__TIMER_OP or PDR__TIMER_PARKED */
};
enum { PDR__TIMER_OP = 1, PDR__TIMER_PARKED = 2 };

struct pdr__conn;

struct pdr__op {
    struct pdr__timer timer;       /* first: container from timer */
    struct pdr__op *hnext;         /* room table chain (eng->lock) */
    struct pdr__op *qnext;         /* command queue */
    struct pdr__op *cnext, *cprev; /* ops bound to conn */
    struct pdr__op *pnext, *pprev; /* conn's round-robin push list */
    uint64_t room;
    int kind;
    int state;
    int in_push_list;
    pdr_xfer_seg_t *segs;
    size_t nseg;
    uint64_t total;
    uint64_t xid;   /* pull: our id; push: the id of the fetch being served */
    uint64_t pos;   /* bytes queued for send (push) or received (pull) */
    size_t cur_seg; /* segment holding byte pos, and pos's offset inside it */
    size_t cur_off;
    uint32_t timeout_ms;
    struct pdr__conn *conn;
    pdr_xfer_done_cb cb;
    void *arg;
    /* pull only */
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char peer[96]; /* "host:port", the connection cache key */
};

/* A FETCH that arrived before the push of its room; or, with conn NULL and tomb_code set, a tombstone:
 * the memory of a push that was canceled or expired before anyone fetched it (tomb_push 1: a late
 * FETCH fails at once with tomb_code), or of a parked fetch that its decode canceled or gave up
 * (tomb_push 0: a late push fails at once), instead of either side waiting for its deadline.
 * I/O thread only. */
struct pdr__parked {
    struct pdr__timer timer;
    struct pdr__parked *hnext;
    struct pdr__parked *cnext, *cprev;
    uint64_t room, xid, total;
    struct pdr__conn *conn;
    int tomb_code;
    int tomb_push;
};

struct pdr__cancel {
    struct pdr__cancel *next;
    uint64_t room;
};

/* A backend moves the bytes of ops over its own connections. v1 has TCP only; rdma and cuda_ipc plug
 * in here (one table per backend, chosen per memory kind). All hooks run on the I/O thread. */
struct pdr_xfer_backend_ops {
    const char *name;
    int (*supports_mem)(int kind);
    int (*init)(pdr_xfer_engine_t *eng);
    void (*start_push)(pdr_xfer_engine_t *eng, struct pdr__op *op);
    void (*start_pull)(pdr_xfer_engine_t *eng, struct pdr__op *op);
    /* Detaches op from the backend; tells the peer when notify_code != 0. */
    void (*abort)(pdr_xfer_engine_t *eng, struct pdr__op *op, int notify_code);
    void (*on_event)(pdr_xfer_engine_t *eng, void *handle, uint32_t events);
    /* Heartbeats; returns the ms until it wants to run again, or -1. */
    int (*tick)(pdr_xfer_engine_t *eng, uint64_t now_ns);
    void (*parked_expired)(pdr_xfer_engine_t *eng, struct pdr__parked *p);
    void (*after_turn)(pdr_xfer_engine_t *eng);
    void (*shutdown)(pdr_xfer_engine_t *eng);
};

extern const struct pdr_xfer_backend_ops pdr__tcp_backend;

struct pdr_xfer_engine {
    pdr_xfer_opts_t opts;
    const struct pdr_xfer_backend_ops *be;
    int epfd;
    int wakefd;
    int wake_tag; /* &wake_tag is the eventfd's epoll data.ptr */
    int listen_fd;
    int listen_port;
    pthread_t thread;
    int thread_started;

    pthread_mutex_t lock;
    /* Under lock: */
    struct pdr__op **rooms; /* hash of pending ops, keyed by (room, kind) */
    size_t nbuckets;
    size_t nops;
    struct pdr__op *q_head, *q_tail;
    struct pdr__cancel *c_head, *c_tail;
    int closing;
    int wake_pending;
    uint64_t next_xid;
    struct pdr_xfer_memreg *mem;

    /* I/O thread only: */
    struct pdr__timer **heap;
    size_t heap_len, heap_cap;
    struct pdr__parked **parked; /* keyed by room, nbuckets */
    size_t nparked;
    void *be_state;
};

/* Room table (eng->lock held). */
struct pdr__op *pdr__room_find(pdr_xfer_engine_t *eng, uint64_t room, int kind);

/* Timers (I/O thread). */
int pdr__timer_arm(pdr_xfer_engine_t *eng, struct pdr__timer *t, uint64_t at_ns);
void pdr__timer_disarm(pdr_xfer_engine_t *eng, struct pdr__timer *t);

/* Completes op exactly once: tells the backend (which notifies the peer with notify_code when non-zero),
 * removes it from the room table, runs the callback and frees it. I/O thread. */
void pdr__op_complete(pdr_xfer_engine_t *eng, struct pdr__op *op, int status, int notify_code);

/* Parked fetches (I/O thread). */
struct pdr__parked *pdr__parked_find(pdr_xfer_engine_t *eng, uint64_t room);
void pdr__parked_insert(pdr_xfer_engine_t *eng, struct pdr__parked *p);
void pdr__parked_remove(pdr_xfer_engine_t *eng, struct pdr__parked *p);

/* Tags on epoll data.ptr: the first member of every registered object. */
enum { PDR__IO_WAKE = 1, PDR__IO_LISTEN = 2, PDR__IO_CONN = 3 };

#endif
