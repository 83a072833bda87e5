/*
 * The pair-aware breaker's state machine and counters (breaker.h). The state is kept in links.c's table
 * and changed under its lock; nothing here locks. A half-open link turns so lazily, when it is next looked
 * at (a pick, the admin API, /metrics), so no timer runs per link. Any thread.
 */
#include "breaker.h"
#include <stdio.h>
#include <stdlib.h>
#include "buf.h"
#include "links.h"
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

/* Every piece of the text is at most one line of RENDER_LINE bytes: the link series, at most PDR_LINKS_MAX
 * (links.h), and fewer than 16 others (three families' heads and values, a series per state). */
#define RENDER_LINE 800
#define RENDER_CAP ((size_t)(PDR_LINKS_MAX + 16) * RENDER_LINE)
_Static_assert(PDR_BREAKER__COUNT + 4 < 16, "the breaker's families outgrew RENDER_CAP");

char *pdr_breaker_render_metrics(size_t *len)
{
    pdr_buf_t o = {0};
    char line[RENDER_LINE];
    int n;
#define PUT(...)                                                                                             \
    do {                                                                                                     \
        n = snprintf(line, sizeof(line), __VA_ARGS__);                                                       \
        if (n > 0 && pdr_buf_append(&o, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1,       \
                                    RENDER_CAP) != 0)                                                        \
            goto oom;                                                                                        \
    } while (0)
    PUT("# HELP pdr_breaker_transitions_total Prefill->decode link breaker state changes, by the state "
        "entered.\n# TYPE pdr_breaker_transitions_total counter\n");
    for (int s = 0; s < PDR_BREAKER__COUNT; s++)
        PUT("pdr_breaker_transitions_total{to=\"%s\"} %llu\n", pdr_breaker_state_names[s],
            (unsigned long long)pdr_breaker_transitions((pdr_breaker_state_t)s));
    PUT("# HELP pdr_breaker_avoided_total Pair picks that left an open link for another pairing.\n"
        "# TYPE pdr_breaker_avoided_total counter\npdr_breaker_avoided_total %llu\n",
        (unsigned long long)pdr_breaker_avoided());
    PUT("# HELP pdr_breaker_all_open_total Pair picks whose every pairing tried was open: the least "
        "recently failed link was used.\n# TYPE pdr_breaker_all_open_total counter\n"
        "pdr_breaker_all_open_total %llu\n",
        (unsigned long long)pdr_breaker_all_open());
    size_t cap = pdr_links_count() + 1;
    pdr_link_info_t *ls = malloc(sizeof(*ls) * cap);
    size_t k = ls != NULL ? pdr_links_snapshot(ls, cap, NULL) : 0;
    uint64_t now = pdr_now_ms();
    PUT("# HELP pdr_link_state The prefill->decode link's breaker: 0 closed, 1 open, 2 half-open; links "
        "that never failed have no series.\n# TYPE pdr_link_state gauge\n");
    for (size_t i = 0; i < k; i++) {
        n = snprintf(line, sizeof(line), "pdr_link_state{prefill=\"%s\",decode=\"%s\"} %d\n", ls[i].prefill,
                     ls[i].decode, (int)pdr_breaker_state(&ls[i].brk, now, NULL));
        if (n > 0 && pdr_buf_append(&o, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1,
                                    RENDER_CAP) != 0) {
            free(ls);
            goto oom;
        }
    }
    free(ls);
#undef PUT
    if (pdr_buf_append(&o, "", 1, RENDER_CAP + 1) != 0) /* NUL-terminated, not counted */
        goto oom;
    *len = o.len - 1;
    return o.p;
oom: /* out of memory (RENDER_CAP is never reached) */
    pdr_buf_free(&o);
    return NULL;
}

void pdr_breaker__reset(void)
{
    for (int s = 0; s < PDR_BREAKER__COUNT; s++)
        __atomic_store_n(&transitions[s], 0, __ATOMIC_RELAXED);
    __atomic_store_n(&avoided, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&all_open, 0, __ATOMIC_RELAXED);
}
