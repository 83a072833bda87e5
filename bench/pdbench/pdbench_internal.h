/*
 * pdbench_internal.h — what pdbench's request-driving files share: the limits, the run's phases, a slot
 * (one request in flight) and the bench (the whole run matrix on one loop), and the functions one file
 * calls in another. main.c: the process (setup, the loop, the outputs, the exit status); flags.c: the
 * command line; workload.c: the prompts and request bodies; request.c: one request from its start to its
 * verdict; run.c: the run sequence (health gate, warm-up, the closed-loop slots, progress, SIGINT).
 * Single-threaded: everything runs on the loop's thread.
 */
#ifndef PDBENCH_INTERNAL_H
#define PDBENCH_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "buf.h"
#include "pdbench.h"
#include "upstream.h"

#define BODY_LIMIT (256u << 20) /* a request body (a 1M-token prompt fits) */
#define EVENT_LIMIT (64u << 20) /* one SSE event: /generate repeats the whole text in every event */
#define ERRBODY_MAX 4096        /* bytes of an error answer kept for its message */
#define ITL_MAX (1u << 24)      /* inter-token gaps kept per request */
#define REQS_MAX (16u << 20)    /* requests recorded per run */
#define HEALTH_RETRY_MS 200
#define PROGRESS_TTY_MS 250

enum { PH_IDLE = 0, PH_HEALTH, PH_WARMUP, PH_MEASURE, PH_DONE };

typedef struct bench bench_t;

typedef struct slot {
    bench_t *b;
    pdr_leg_t leg;
    int active, warmup;
    pdr_buf_t body;
    pdb_sse_t sse;
    pdr_buf_t errbody;
    uint64_t t0_us, first_us, last_us, now_us;
    int64_t events_tokens; /* tokens counted from events */
    int64_t cum_reported;  /* /generate: the last meta_info.completion_tokens */
    int64_t usage_tokens;  /* OpenAI: usage.completion_tokens when a usage chunk came */
    int64_t prompt_tokens, cached_tokens;
    uint64_t seq; /* requests this slot started in the run (multi-turn: its conversations' turns) */
    int got_done, error_event, checked_type;
    char stream_cause[32];
    char detail[160];
    double overhead_us;
    double *itl;
    size_t n_itl, cap_itl;
} slot_t;

struct bench {
    uv_loop_t *loop;
    pdr_multi_t *multi;
    pdb_opts_t o;
    char url[2048], health_url[2048]; /* url: the first (or only) target */
    char (*urls)[2048];               /* --url A,B,C: every target; requests go to them in turn */
    size_t n_urls, next_url;
    const char **hdrs; /* NULL-terminated */
    pdb_run_t *runs;
    size_t n_runs, cur;
    int phase;
    slot_t *slots;
    size_t n_slots;
    size_t started, finished, active;
    uint64_t measure_t0_us, deadline_us, last_end_us;
    uv_timer_t health_timer, progress_timer;
    uv_signal_t sigint;
    pdr_leg_t probe;
    int probe_active;
    uint64_t health_deadline_us;
    char health_last[160];
    int tty, interrupted, fatal, health_failed_pending;
    uint64_t last_progress_us;
};

/* workload.c */

/* The PRNG state of one request: a function of --seed, the run and the request's index only. */
uint64_t pdb__request_seed(const pdb_opts_t *o, const pdb_run_t *r, uint64_t index);
/* The body of a request whose PRNG state is seed (multi-turn: conversation conv at turn turn) into out. */
int pdb__build_body(const bench_t *b, const pdb_run_t *run, uint64_t seed, uint64_t conv, int turn,
                    pdr_buf_t *out);

/* request.c */

/* Starts slot s's next request (index: its place in the run; UINT64_MAX for the warm-up). 0 or a PDR_E*
 * code (reported on stderr). */
int pdb__slot_start(bench_t *b, slot_t *s, uint64_t index, int warmup);

/* run.c */

void pdb__start_more(bench_t *b);
void pdb__begin_measure(bench_t *b);
/* Starts the next run of the matrix (its health gate first), or ends the loop after the last one. */
void pdb__next_run(bench_t *b);
void pdb__on_progress(uv_timer_t *t);
void pdb__on_sigint(uv_signal_t *sg, int signum);

/* flags.c */

int pdb__parse_args(int argc, char **argv, pdb_opts_t *o);
/* Prints "pdbench: MESSAGE" and the --help hint on stderr; returns 2 (the usage exit status). */
int pdb__usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
