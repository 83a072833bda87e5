/*
 * The pair-aware breaker's state machine and counters (breaker.h). The state is kept in links.c's table
 * and changed under its lock; nothing here locks. A half-open link turns so lazily, when it is next looked
 * at (a pick, the admin API, /metrics), so no timer runs per link. Any thread.
 */
#include "breaker.h"
#include "util.h"

const char *const pdr_breaker_state_names[PDR_BREAKER__COUNT] = {"closed", "open", "half_open"};

static uint64_t transitions[PDR_BREAKER__COUNT], avoided, all_open;

static void count_to(pdr_breaker_state_t s)
{
    __atomic_add_fetch(&transitions[s], 1, __ATOMIC_RELAXED);
}

/* An open link past its period turns half-open. */
static void tick(pdr_breaker_t *b, uint64_t now_ms)
{
    if (b->state == PDR_BREAKER_OPEN && now_ms >= b->until_ms) {
        b->state = PDR_BREAKER_HALF_OPEN;
        b->probe = 0;
        count_to(PDR_BREAKER_HALF_OPEN);
    }
}

static void open_for(pdr_breaker_t *b, uint64_t period_ms, uint64_t now_ms)
{
    b->state = PDR_BREAKER_OPEN;
    b->probe = 0;
    b->period_ms = period_ms;
    b->until_ms = now_ms + period_ms;
    count_to(PDR_BREAKER_OPEN);
}

pdr_breaker_state_t pdr_breaker_failure(pdr_breaker_t *b, uint64_t consecutive, const pdr_breaker_conf_t *c,
                                        uint64_t now_ms)
{
    tick(b, now_ms);
    if (b->state == PDR_BREAKER_CLOSED && consecutive >= c->consecutive_failures) {
        open_for(b, c->open_ms, now_ms);
    } else if (b->state == PDR_BREAKER_HALF_OPEN) {
        /* The probe failed (or a request the pick had to send anyway): twice as long this time. */
        uint64_t p = b->period_ms ? b->period_ms * 2 : c->open_ms;
        open_for(b, p > c->max_open_ms ? c->max_open_ms : p, now_ms);
    }
    /* Open: a request sent on it because every pairing was open failed; the period runs on. */
    return (pdr_breaker_state_t)b->state;
}

void pdr_breaker_success(pdr_breaker_t *b)
{
    if (b->state != PDR_BREAKER_CLOSED)
        count_to(PDR_BREAKER_CLOSED);
    b->state = PDR_BREAKER_CLOSED;
    b->probe = 0;
    b->period_ms = 0;
    b->until_ms = 0;
}

int pdr_breaker_admit(pdr_breaker_t *b, uint64_t now_ms, int claim)
{
    tick(b, now_ms);
    if (b->state == PDR_BREAKER_CLOSED)
        return 1;
    if (b->state == PDR_BREAKER_OPEN)
        return 0;
    if (b->probe && now_ms < b->until_ms)
        return 0; /* the probe is out */
    if (claim) {
        b->probe = 1;
        b->until_ms = now_ms + (b->period_ms ? b->period_ms : 1);
    }
    return 1;
}

pdr_breaker_state_t pdr_breaker_state(const pdr_breaker_t *b, uint64_t now_ms, uint64_t *left_ms)
{
    pdr_breaker_state_t s = (pdr_breaker_state_t)b->state;
    if (s == PDR_BREAKER_OPEN && now_ms >= b->until_ms)
        s = PDR_BREAKER_HALF_OPEN;
    if (left_ms != NULL)
        *left_ms = s == PDR_BREAKER_OPEN ? b->until_ms - now_ms : 0;
    return s;
}

void pdr_breaker_count_avoided(void)
{
    __atomic_add_fetch(&avoided, 1, __ATOMIC_RELAXED);
}

void pdr_breaker_count_all_open(void)
{
    __atomic_add_fetch(&all_open, 1, __ATOMIC_RELAXED);
}

uint64_t pdr_breaker_transitions(pdr_breaker_state_t to)
{
    return __atomic_load_n(&transitions[to], __ATOMIC_RELAXED);
}

uint64_t pdr_breaker_avoided(void)
{
    return __atomic_load_n(&avoided, __ATOMIC_RELAXED);
}

uint64_t pdr_breaker_all_open(void)
{
    return __atomic_load_n(&all_open, __ATOMIC_RELAXED);
}

void pdr_breaker__reset(void)
{
    for (int s = 0; s < PDR_BREAKER__COUNT; s++)
        __atomic_store_n(&transitions[s], 0, __ATOMIC_RELAXED);
    __atomic_store_n(&avoided, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&all_open, 0, __ATOMIC_RELAXED);
}
