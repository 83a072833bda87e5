/*
 * pdbench's requests: one slot's request from its start to its verdict. The answer's bytes go through the
 * SSE splitter (stream.c); each event's tokens and times are counted as they arrive (the time to the first
 * token, the gaps between tokens); when the leg ends the request is judged (ok, or a failure cause with
 * the start of what was said) and recorded in its run, and the slot starts its next request. Runs on the
 * loop's thread.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "pdbench_internal.h"
#include "util.h"

static void set_cause(slot_t *s, const char *cause, const char *detail)
{
    if (s->stream_cause[0] == '\0') {
        snprintf(s->stream_cause, sizeof(s->stream_cause), "%s", cause);
        if (detail != NULL)
            snprintf(s->detail, sizeof(s->detail), "%s", detail);
    }
}

static int itl_push(slot_t *s, double v)
{
    if (s->n_itl == s->cap_itl) {
        size_t c = s->cap_itl ? s->cap_itl * 2 : 256;
        if (c > ITL_MAX)
            return PDR_ETOOBIG;
        double *n = realloc(s->itl, c * sizeof(*n));
        if (n == NULL)
            return PDR_ENOMEM;
        s->itl = n;
        s->cap_itl = c;
    }
    s->itl[s->n_itl++] = v;
    return 0;
}

/* Copies the printable start of an event or error body into detail. */
static void snip(char *dst, size_t cap, const char *p, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n && k + 1 < cap; i++)
        dst[k++] = (p[i] >= 0x20 && p[i] < 0x7f) ? p[i] : ' ';
    dst[k] = '\0';
}

static int on_event(void *arg, const char *d, size_t n)
{
    slot_t *s = arg;
    pdb_event_t ev;
    pdb_event_parse(d, n, &ev);
    if (ev.done) {
        s->got_done = 1;
        return 0;
    }
    if (ev.bad_json) {
        char sn[120];
        snip(sn, sizeof(sn), d, n);
        set_cause(s, "bad_event", sn);
        return 0;
    }
    if (ev.error) {
        if (!s->error_event)
            snip(s->detail, sizeof(s->detail), d, n);
        s->error_event = 1;
        return 0;
    }
    if (ev.prompt >= 0)
        s->prompt_tokens = ev.prompt;
    if (ev.cached >= 0)
        s->cached_tokens = ev.cached;
    int64_t delta = 0;
    if (s->b->o.api == PDB_API_GENERATE) {
        if (ev.completion >= 0) {
            delta = ev.completion - s->cum_reported;
            if (delta > 0)
                s->cum_reported = ev.completion;
        } else {
            delta = 1;
        }
    } else {
        if (ev.has_content)
            delta = 1;
        if (ev.completion >= 0) /* the usage chunk (include_usage), or usage on every chunk */
            s->usage_tokens = ev.completion;
    }
    if (delta <= 0)
        return 0;
    if (s->events_tokens == 0) {
        s->first_us = s->now_us;
        if (ev.pdsim_mono_us >= 0)
            s->overhead_us = (double)s->now_us - (double)ev.pdsim_mono_us;
    } else if (itl_push(s, (double)(s->now_us - s->last_us) / 1000.0) != 0) {
        set_cause(s, "too_many_tokens", NULL);
    }
    s->last_us = s->now_us;
    s->events_tokens += delta;
    return 0;
}

static size_t on_req_data(pdr_leg_t *leg, const char *p, size_t n)
{
    slot_t *s = leg->data;
    s->now_us = pdr_now_us();
    if (leg->status != 200) {
        size_t room = ERRBODY_MAX - s->errbody.len;
        if (room > 0)
            pdr_buf_append(&s->errbody, p, n < room ? n : room, ERRBODY_MAX);
        return n;
    }
    if (!s->checked_type) {
        s->checked_type = 1;
        if (strncmp(leg->content_type, "text/event-stream", 17) != 0) {
            char d[160];
            snprintf(d, sizeof(d), "Content-Type \"%s\", not text/event-stream", leg->content_type);
            set_cause(s, "not_stream", d);
        }
    }
    if (strcmp(s->stream_cause, "not_stream") == 0) {
        size_t room = ERRBODY_MAX - s->errbody.len;
        if (room > 0)
            pdr_buf_append(&s->errbody, p, n < room ? n : room, ERRBODY_MAX);
        return n;
    }
    int r = pdb_sse_feed(&s->sse, p, n, on_event, s);
    if (r != 0) {
        set_cause(s, "bad_event",
                  r == PDR_ETOOBIG ? "an SSE event or line larger than 64 MiB" : "out of memory");
        return 0; /* aborts the leg */
    }
    return n;
}

static const char *err_cause(int err)
{
    switch (err) {
    case PDR_ECONNREFUSED:
        return "connect";
    case PDR_ETIMEDOUT:
        return "timeout";
    case PDR_EPEERGONE:
        return "reset"; /* the connection closed or was reset before the response ended */
    case PDR_EIO:
        return "bad_response"; /* malformed HTTP framing (a stream cut inside a chunk looks like this) */
    default:
        return "io";
    }
}

static void slot_reset(slot_t *s)
{
    s->errbody.len = 0;
    pdb_sse_free(&s->sse);
    pdb_sse_init(&s->sse, EVENT_LIMIT);
    s->events_tokens = s->cum_reported = 0;
    s->usage_tokens = s->prompt_tokens = s->cached_tokens = -1;
    s->got_done = s->error_event = s->checked_type = 0;
    s->stream_cause[0] = s->detail[0] = '\0';
    s->overhead_us = NAN;
    free(s->itl);
    s->itl = NULL;
    s->n_itl = s->cap_itl = 0;
    s->first_us = s->last_us = 0;
}

/* Judges a finished request: 1 ok, else 0 with cause and detail filled. */
static int judge(slot_t *s, int err, pdb_req_t *q)
{
    const pdb_run_t *run = &s->b->runs[s->b->cur];
    int64_t tokens =
        s->b->o.api != PDB_API_GENERATE && s->usage_tokens >= 0 ? s->usage_tokens : s->events_tokens;
    q->tokens = tokens;
    q->status = s->leg.status;
    if (err == PDR_ECANCELED && s->stream_cause[0] != '\0') {
        snprintf(q->cause, sizeof(q->cause), "%s", s->stream_cause);
        snprintf(q->detail, sizeof(q->detail), "%s", s->detail);
        return 0;
    }
    if (err != 0) {
        snprintf(q->cause, sizeof(q->cause), "%s", err_cause(err));
        snprintf(q->detail, sizeof(q->detail), "%s%s (%s)", s->leg.status ? "after the headers: " : "",
                 pdr_strerror(err), pdr_errname(err));
        return 0;
    }
    if (s->leg.status != 200) {
        snprintf(q->cause, sizeof(q->cause), "http_%ld", s->leg.status);
        snip(q->detail, sizeof(q->detail), s->errbody.p ? s->errbody.p : "", s->errbody.len);
        return 0;
    }
    if (s->stream_cause[0] != '\0') {
        snprintf(q->cause, sizeof(q->cause), "%s", s->stream_cause);
        if (strcmp(s->stream_cause, "not_stream") == 0 && s->errbody.len > 0) {
            char b[120];
            snip(b, sizeof(b), s->errbody.p, s->errbody.len);
            snprintf(q->detail, sizeof(q->detail), "%.40s: %.110s", s->detail, b);
        } else {
            snprintf(q->detail, sizeof(q->detail), "%s", s->detail);
        }
        return 0;
    }
    if (s->error_event) {
        snprintf(q->cause, sizeof(q->cause), "stream_error");
        snprintf(q->detail, sizeof(q->detail), "%s", s->detail);
        return 0;
    }
    if (!s->got_done) {
        snprintf(q->cause, sizeof(q->cause), "no_done");
        snprintf(q->detail, sizeof(q->detail), "the stream ended after %lld tokens without data: [DONE]",
                 (long long)tokens);
        return 0;
    }
    if (s->b->o.ignore_eos ? tokens != run->osl : tokens == 0) {
        snprintf(q->cause, sizeof(q->cause), "%s", tokens < run->osl ? "short_output" : "long_output");
        snprintf(q->detail, sizeof(q->detail), "%lld output tokens, asked for %d", (long long)tokens,
                 run->osl);
        return 0;
    }
    return 1;
}

static void on_req_done(pdr_leg_t *leg, int err)
{
    slot_t *s = leg->data;
    bench_t *b = s->b;
    pdb_run_t *run = &b->runs[b->cur];
    uint64_t end = pdr_now_us();
    s->active = 0;
    b->active--;
    pdb_req_t q;
    memset(&q, 0, sizeof(q));
    q.overhead_us = NAN;
    q.ok = judge(s, err, &q);
    q.prompt_tokens = s->prompt_tokens;
    q.cached_tokens = s->cached_tokens;
    q.e2e_ms = (double)(end - s->t0_us) / 1000.0;
    q.ttft_ms = s->events_tokens > 0 ? (double)(s->first_us - s->t0_us) / 1000.0 : -1;
    q.tpot_ms = q.tokens > 1 && s->events_tokens > 0 ? (q.e2e_ms - q.ttft_ms) / (double)(q.tokens - 1) : -1;
    q.overhead_us = s->overhead_us;
    if (s->warmup) {
        run->warmup_ok = q.ok;
        if (!q.ok)
            snprintf(run->warmup_error, sizeof(run->warmup_error), "%.31s: %.159s", q.cause, q.detail);
        pdb__begin_measure(b);
        return;
    }
    b->finished++;
    b->last_end_us = end;
    if (run->n_reqs == run->cap_reqs && run->n_reqs < REQS_MAX) {
        size_t c = run->cap_reqs ? run->cap_reqs * 2 : 64;
        pdb_req_t *n = realloc(run->reqs, c * sizeof(*n));
        if (n != NULL) {
            run->reqs = n;
            run->cap_reqs = c;
        }
    }
    if (run->n_reqs < run->cap_reqs) {
        q.itl_ms = s->itl;
        q.n_itl = s->n_itl;
        s->itl = NULL;
        s->n_itl = s->cap_itl = 0;
        run->reqs[run->n_reqs++] = q;
    }
    pdb__start_more(b);
}

static const pdr_leg_cbs_t req_cbs = {on_req_data, on_req_done};

int pdb__slot_start(bench_t *b, slot_t *s, uint64_t index, int warmup)
{
    pdb_run_t *run = &b->runs[b->cur];
    slot_reset(s);
    s->warmup = warmup;
    /* Multi-turn: slot k runs conversations k, k + c, k + 2c, ... (c = concurrency), each for --turns
     * requests in order, so a turn is sent only after the previous one was answered. */
    uint64_t c = (uint64_t)run->concurrency, k = (uint64_t)(s - b->slots), T = (uint64_t)b->o.turns;
    uint64_t conv = k + c * (s->seq / T) + c * 1000003ull * (uint64_t)run->repeat;
    int turn = (int)(s->seq % T);
    int r = pdb__build_body(b, run, pdb__request_seed(&b->o, run, index), conv, turn, &s->body);
    if (r != 0) {
        fprintf(stderr, "pdbench: cannot build a %d-token request body: %s\n", run->isl, pdr_strerror(r));
        return r;
    }
    s->t0_us = pdr_now_us();
    const char *url = b->urls[b->next_url++ % b->n_urls];
    /* --session-header: the run's headers and the conversation's (pdr_leg_start copies them). */
    const char *hdrs[b->o.n_headers + 2], *const *h = b->hdrs;
    char line[96];
    if (b->o.session_header != NULL) {
        memcpy(hdrs, b->hdrs, b->o.n_headers * sizeof(hdrs[0]));
        snprintf(line, sizeof(line), "%s: pdbench-%llu", b->o.session_header, (unsigned long long)conv);
        hdrs[b->o.n_headers] = line;
        hdrs[b->o.n_headers + 1] = NULL;
        h = hdrs;
    }
    r = pdr_leg_start(&s->leg, b->multi, url, s->body.p, s->body.len, h, b->o.connect_timeout_ms,
                      (long)(b->o.timeout_s * 1000.0), &req_cbs, s);
    if (r != 0) {
        fprintf(stderr, "pdbench: cannot send to %s: %s\n", url, pdr_strerror(r));
        return r;
    }
    s->active = 1;
    b->active++;
    if (!warmup)
        s->seq++;
    return 0;
}
