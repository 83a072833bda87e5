/*
 * The access log (log.access): each loop buffers its lines and writes them in batches (every
 * ALOG_FLUSH_MS, or when the buffer fills), off the request path; lines of client-aborted requests and
 * of refused requests are rate-limited, each kind by a bucket of its own. The loop's own thread only. Calls
 * nothing of server.c, pd/ or admin.c.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "err.h"
#include "front.h"
#include "router.h"
#include "util.h"
#include <unistd.h>

#define ALOG_FLUSH_MS 100
#define ALOG_MAX (256 * 1024)

static void alog_flush(pdr_thread_t *t)
{
    size_t off = 0;
    while (off < t->alog_len) {
        ssize_t n = write(t->r->access_fd, t->alog + off, t->alog_len - off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            break; /* EAGAIN on a full pipe or a broken log: drop this batch rather than block the loop */
        }
        off += (size_t)n;
    }
    t->alog_len = 0;
}

/* Lines of client-aborted and of refused requests, each kind at most this many a second per loop (a
 * burst of as many); the rest are counted in a summary line written at the next flush. */
#define ALOG_ABORT_PER_S 100
#define ALOG_REFUSED_PER_S 100

static void alog_summary(pdr_thread_t *t, uint64_t *suppressed, const char *error, const char *what,
                         int per_s)
{
    char line[192];
    int n = snprintf(line, sizeof(line),
                     "{\"ts_us\":%" PRIu64 ",\"suppressed\":%" PRIu64
                     ",\"error\":\"%s\",\"note\":\"lines of %s requests over %d/s per loop\"}\n",
                     pdr_wall_us(), *suppressed, error, what, per_s);
    *suppressed = 0;
    pdr_access_log(t, line, (size_t)n);
}

static void alog_summaries(pdr_thread_t *t)
{
    if (t->alog_suppressed > 0)
        alog_summary(t, &t->alog_suppressed, "client_abort", "client-aborted", ALOG_ABORT_PER_S);
    if (t->alog_refused_suppressed > 0)
        alog_summary(t, &t->alog_refused_suppressed, "refused", "refused", ALOG_REFUSED_PER_S);
}

static void on_alog_timer(uv_timer_t *h)
{
    pdr_thread_t *t = h->data;
    alog_summaries(t);
    if (t->alog_len > 0)
        alog_flush(t);
}

/* One line through a token bucket of per_s lines a second: written, or counted in *suppressed. */
static void alog_limited(pdr_thread_t *t, double *tokens, uint64_t *last_ms, uint64_t *suppressed, int per_s,
                         const char *line, size_t len)
{
    if (t->r->access_fd < 0 || t->alog == NULL)
        return;
    uint64_t now = pdr_now_ms();
    *tokens += (double)(now - *last_ms) * per_s / 1000;
    if (*tokens > per_s)
        *tokens = per_s;
    *last_ms = now;
    if (*tokens >= 1) {
        *tokens -= 1;
        pdr_access_log(t, line, len);
        return;
    }
    (*suppressed)++;
    t->m.alog_suppressed_total++;
    if (t->alog_closed)
        alog_summaries(t);
    else if (!uv_is_active((uv_handle_t *)&t->alog_timer))
        uv_timer_start(&t->alog_timer, on_alog_timer, ALOG_FLUSH_MS, 0);
}

void pdr_access_log_aborted(pdr_thread_t *t, const char *line, size_t len)
{
    alog_limited(t, &t->alog_abort_tokens, &t->alog_abort_ms, &t->alog_suppressed, ALOG_ABORT_PER_S, line,
                 len);
}

void pdr_access_log_refused(pdr_thread_t *t, const char *line, size_t len)
{
    alog_limited(t, &t->alog_refused_tokens, &t->alog_refused_ms, &t->alog_refused_suppressed,
                 ALOG_REFUSED_PER_S, line, len);
}

void pdr_access_log(pdr_thread_t *t, const char *line, size_t len)
{
    if (t->r->access_fd < 0 || t->alog == NULL)
        return;
    if (t->alog_len + len > t->alog_cap) {
        if (t->alog_len > 0)
            alog_flush(t);
        if (len > t->alog_cap)
            return;
    }
    memcpy(t->alog + t->alog_len, line, len);
    t->alog_len += len;
    if (t->alog_closed) /* shutting down: requests ending after the last batch are written at once */
        alog_flush(t);
    else if (!uv_is_active((uv_handle_t *)&t->alog_timer))
        uv_timer_start(&t->alog_timer, on_alog_timer, ALOG_FLUSH_MS, 0);
}

int pdr__access_log_init(pdr_thread_t *t)
{
    t->alog_abort_tokens = ALOG_ABORT_PER_S;
    t->alog_abort_ms = pdr_now_ms();
    t->alog_refused_tokens = ALOG_REFUSED_PER_S;
    t->alog_refused_ms = t->alog_abort_ms;
    if (t->r->access_fd >= 0) {
        t->alog_cap = ALOG_MAX;
        t->alog = malloc(t->alog_cap);
        if (t->alog == NULL)
            return PDR_ENOMEM;
    }
    return 0;
}

void pdr__access_log_close(pdr_thread_t *t)
{
    alog_summaries(t);
    if (t->alog_len > 0)
        alog_flush(t);
    uv_timer_stop(&t->alog_timer);
    uv_close((uv_handle_t *)&t->alog_timer, NULL);
    t->alog_closed = 1;
}
