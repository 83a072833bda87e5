/*
 * The PD request's state: where the whole request is, one value that only the transitions of one table
 * change (docs/internals/request.md, "The request's state"). The legs' own progress (running, done, their
 * errors) stays with the attempt (pd_attempt_t): a state says what the request waits for, the legs' facts
 * say why it moves. Pure: the table and its names, tested alone (tests/unit/test_pd_state.c). Any thread.
 */
#ifndef PDR_PD_STATE_H
#define PDR_PD_STATE_H

typedef enum {
    PD_QUEUED = 0, /* not admitted yet: admission decides, the request waits in its queue, or its first
                      attempt waits a loop turn (HTTP/2) */
    PD_PICKING,    /* an attempt chooses its workers; it may wait for decode admission (kv_admission) */
    PD_LEGS,       /* the attempt's legs run; the client's response has not begun */
    PD_RETRY_WAIT, /* an attempt failed: the back-off before the next (pd_req_t.backoff_ns), no leg runs */
    PD_RESPONDING, /* the client's response has begun (its status line went); body bytes may follow */
    PD_ANSWERED,   /* the response's end was handed to h2o (the last send, an error answer, an abort) */
    PD_LINGER,     /* h2o disposed of the request; the prefill leg is read to its end, off the books */
    PD_DONE,       /* over: the memory goes in the timer's close callback */
    PD_STATES
} pd_state_t;

/* Whether the request may go from `from` to `to`. */
int pdr__pd_state_legal(pd_state_t from, pd_state_t to);
/* The state's name ("queued", "picking", ...), or "unknown". */
const char *pdr__pd_state_name(pd_state_t s);

#endif
