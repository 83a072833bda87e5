/*
 * The PD request's pure decisions: which leg is to blame, retry or not, which status answers, the next
 * deadline. Each is a function of plain inputs (no request, no loop, no clock read), so that each can be
 * tested alone (tests/unit/test_pd_decide.c); the request path gathers the inputs and acts on the result.
 * Any thread.
 */
#ifndef PDR_PD_DECIDE_H
#define PDR_PD_DECIDE_H

#include <stdint.h>
#include "kvdeadline.h"

/* The failure cause (PDR_CAUSE_*, metrics.h) of a leg's error (PDR_E*). */
int pdr__pd_cause_of(int err);

/* The status that answers a leg's failure when no retry follows: 503 when the worker could not be reached
 * (the leg ended before any answer, status 0, with a refused, timed-out or reset connection), as Envoy
 * answers upstream connect failures; 502 for a worker that answered badly. */
int pdr__pd_leg_failure_status(long status, int err);

/* Whether a failure of `cause` ejects the blamed worker at once (it could not be reached, or went silent
 * past a deadline) rather than counting towards its outlier ejection. */
int pdr__pd_cause_ejects(int cause);

/* The KV failure (pdr_kv_cause_t) that an attempt's failure of `cause`, blamed on `role`, means while its
 * KV is in flight; -1 when it means none (a worker that could not be reached took no part in a transfer). */
int pdr__pd_kv_cause_of(int cause, int role);

/* A pair's deadline passed with the prefill's answer missing. Which side went silent? The decode, when it
 * has answered nothing of this attempt and the prefill has answered other requests since the attempt
 * began (a frozen or stopped decode holds up the transfer: the prefill cannot push KV to a decode that
 * does not pull). The prefill, when the decode has begun its answer or has answered other requests while
 * the prefill answered none. Otherwise the deadline cannot be pinned on either: -1. Returns a pdr_role_t
 * (PDR_ROLE_PREFILL or PDR_ROLE_DECODE) or -1. */
int pdr__pd_pair_culprit(int decode_answered, int prefill_alive, int decode_alive);

/* Whether a failed attempt is followed by another: attempt (0 for the first) is below retries.max and the
 * router is not shutting down. The retry budget is asked after this (retry.h). */
int pdr__pd_may_retry(int attempt, int max_retries, int shutting_down);

/* The OpenAI error type of an answer that reports how the last attempt failed (504, 503 or 502), and its
 * Retry-After in seconds (0: none). */
const char *pdr__pd_failure_type(int status);
int pdr__pd_failure_retry_after(int status);

/* 100: how often, while the workers are awaited, an HTTP/1 client's socket is probed for a close (h2o reads
 * nothing from an HTTP/1 client while its handler is pending, so a close is otherwise unseen), a restarted
 * worker looked for, and a retry's back-off cut for a shutdown. */
#define PDR_PD_PEEK_INTERVAL_MS 100

/* What the request's next deadline depends on, in ns of the monotonic clock (0: not set). */
typedef struct pdr_pd_timeline {
    unsigned started : 1; /* the client's response has begun */
    uint64_t backoff_ns;  /* before the response: a retry's back-off ends then (0: none runs) */
    uint64_t first_byte_deadline_ns;
    uint64_t kv_deadline_ns;
    unsigned kv_awaited : 1;     /* before the response: the KV, or the prefill's answer, is still to come */
    unsigned peek_client : 1;    /* before the response: the client (HTTP/1) is probed for a close */
    unsigned recheck : 1;        /* the decision waits for the prefill leg's connect: 1 ms */
    unsigned watch_restarts : 1; /* before the response: a worker of the attempt reports its restarts */
    unsigned send_inflight : 1;  /* after: a send is in flight, the client idle since client_idle_since_ns */
    uint64_t client_idle_since_ns, idle_ns;
    unsigned sample_progress : 1; /* after: the client's progress is sampled, next at sample_due_ns */
    uint64_t sample_due_ns;
    unsigned kv_after_start : 1; /* after: the prefill's answer or the KV is still to come */
    unsigned decode_reading : 1; /* after: the decode leg runs unpaused, its last bytes at last_data_ns */
    uint64_t last_data_ns;
    unsigned probe_client : 1; /* after: the client (HTTP/1) is probed for a close */
} pdr_pd_timeline_t;

/* The next deadline of a request at `now`, or 0 when it has none. Every deadline returned is one that the
 * request's timer acts on once it has passed, so the timer cannot find a passed deadline and re-arm for
 * it. */
uint64_t pdr__pd_next_deadline(const pdr_pd_timeline_t *tl, uint64_t now);

#endif
