/*
 * pdxfer_internal.h — what pdxfer-bench's files share: the arguments, the verify modes, the completion
 * queue, and the helpers both sides use. pdxfer_bench.c: the design (its header comment), the flags and
 * main; pdxfer_common.c: time, errors, addresses, the data pattern, host or device memory, the engine, the
 * completion queue and the control socket; pdxfer_target.c, pdxfer_initiator.c and pdxfer_copytest.c: the
 * three modes. Only those files (and tests/unit/test_bench_order.c, which includes them) include it.
 */
#ifndef PDXFER_INTERNAL_H
#define PDXFER_INTERNAL_H

#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "transport.h"

#define MAX_SAMPLES (1u << 20) /* latency samples kept per worker (reservoir beyond) */
#define CTL_LINE 256

struct args {
    const char *mode, *listen, *peer, *backend, *mem;
    int device, peer_device, threads, conns, io_threads, json, verify; /* verify: enum verify_mode */
    long batch;
    size_t block, chunk_bytes, staging_chunks;
    double duration;
    uint32_t timeout_ms;
    int parts;       /* streamed offers: parts per room (0: the whole offer) */
    long compute_us; /* simulated compute per room on the target */
};

enum verify_mode { VERIFY_AUTO = -1, VERIFY_OFF, VERIFY_SAMPLE, VERIFY_FULL };
extern const char *const pdx__verify_names[]; /* indexed by enum verify_mode: "off", "sample", "full" */

/* Set by SIGINT and SIGTERM (pdxfer_bench.c's handler): the target ends its session and its loop. */
extern volatile sig_atomic_t pdx__stop_flag;

/* A bounded completion queue: engine callbacks enqueue, a bench thread dequeues. */

struct done {
    uint64_t room, bytes, usec;
    int status;
    const char *backend;
};

struct queue {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct done *ring;
    size_t cap, head, len;
};

/* pdxfer_common.c */

double pdx__now_s(void);
double pdx__cpu_s(void);
/* Prints what failed and exits with status 2. */
void pdx__die(const char *what, int err);
/* "HOST:PORT" or "[v6]:PORT" into host (a copy) and port (required, 1-65534). */
int pdx__split_hostport(const char *s, char *host, size_t hlen, int *port);
/* Seed block + 1 of the pattern that transport/cuda.c's kernels also write and compare on the device. */
uint64_t pdx__pattern_word(uint64_t block, uint64_t word);
/* Offsets of the sampled words in a block: first, last and evenly spaced ones between. */
size_t pdx__sample_offset(size_t block, unsigned i, unsigned n);
int pdx__is_cuda(const struct args *a);
void *pdx__mem_alloc(const struct args *a, size_t len);
void pdx__mem_free(const struct args *a, void *p);
void pdx__cuda_setup(const struct args *a);
/* Writes the patterns of blocks 0..nblocks-1 into buf and returns once every byte is in place. */
void pdx__fill_buffer(const struct args *a, unsigned char *buf, size_t block, long nblocks);
pdr_xfer_engine_t *pdx__make_engine(const struct args *a, const char *host, int port);
void pdx__queue_init(struct queue *q, size_t cap);
void pdx__queue_fini(struct queue *q);
/* Waits up to ms for an entry; 0 when one was taken. */
int pdx__queue_get(struct queue *q, struct done *d, int ms);
/* The engine's callback: enqueues the room's result on the queue arg. */
void pdx__on_info(void *arg, uint64_t room, const pdr_xfer_info_t *info);
uint64_t pdx__room_id(unsigned session, unsigned tid, uint64_t seq);
int pdx__ctl_send(int fd, const char *line);
/* Reads one '\n'-terminated line (without it); -1 on EOF/error/timeout, -2 on pdx__stop_flag when
 * stoppable. */
int pdx__ctl_recv(int fd, char *buf, size_t len, int timeout_ms, int stoppable);
/* Parses "key=value" out of a control line as an unsigned number. */
int pdx__ctl_field(const char *line, const char *key, unsigned long long *out);
int pdx__tcp_socket(const char *host, int port, int listening);
int pdx__cmp_u32(const void *x, const void *y);

/* The modes: each returns the process's exit status. */
int pdx__run_target(const struct args *a);
int pdx__run_initiator(const struct args *a);
int pdx__run_copytest(const struct args *a);

#endif
