/*
 * The table of the PD request's transitions (state.h). Each row: the states a request in that state may go
 * to, and where in router/pd/ it goes there. Any thread.
 */
#include "state.h"

#define S(st) (1u << (st))

static const unsigned next[PD_STATES] = {
    /* the first attempt (request.c: pdr__pd_begin, the deferred start, /v1/models); a refusal or a client
     * gone while queued (queue.c); disposed while queued */
    [PD_QUEUED] = S(PD_PICKING) | S(PD_RESPONDING) | S(PD_DONE),
    /* again after decode admission's poll (pick.c); the legs go out (attempt.c); no worker: the answer;
     * disposed while waiting for decode admission */
    [PD_PICKING] = S(PD_PICKING) | S(PD_LEGS) | S(PD_RESPONDING) | S(PD_DONE),
    /* a failed attempt retried at once or after a back-off (failure.c); the response begins (advance.c,
     * relay.c, an error answer); disposed (the client went away) */
    [PD_LEGS] = S(PD_PICKING) | S(PD_RETRY_WAIT) | S(PD_RESPONDING) | S(PD_DONE),
    /* the back-off is over (timer.c); a shutdown's or a closed client's answer; disposed */
    [PD_RETRY_WAIT] = S(PD_PICKING) | S(PD_RESPONDING) | S(PD_DONE),
    /* the end handed to h2o (relay.c, advance.c, timer.c); a broken stream moved to a new pair (migrate.c);
     * disposed mid-response */
    [PD_RESPONDING] = S(PD_ANSWERED) | S(PD_PICKING) | S(PD_DONE),
    /* disposed with the prefill leg still to read (request.c: on_dispose), or not */
    [PD_ANSWERED] = S(PD_LINGER) | S(PD_DONE),
    /* the prefill answered or its KV deadline passed (legs.c, request.c) */
    [PD_LINGER] = S(PD_DONE),
    [PD_DONE] = 0,
};

int pdr__pd_state_legal(pd_state_t from, pd_state_t to)
{
    return (unsigned)from < PD_STATES && (unsigned)to < PD_STATES && (next[from] & S(to)) != 0;
}

const char *pdr__pd_state_name(pd_state_t s)
{
    static const char *const names[PD_STATES] = {
        [PD_QUEUED] = "queued",
        [PD_PICKING] = "picking",
        [PD_LEGS] = "legs",
        [PD_RETRY_WAIT] = "retry_wait",
        [PD_RESPONDING] = "responding",
        [PD_ANSWERED] = "answered",
        [PD_LINGER] = "linger",
        [PD_DONE] = "done",
    };
    return (unsigned)s < PD_STATES ? names[s] : "unknown";
}
