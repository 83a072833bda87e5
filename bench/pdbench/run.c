/*
 * pdbench's run sequence: for each run of the matrix the health gate (GET until 200), one warm-up request,
 * then `concurrency` closed-loop slots that each send the next request as soon as their last one ended,
 * until the run's request count (or duration) is reached; the progress line; SIGINT. Runs on the loop's
 * thread.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "err.h"
#include "pdbench_internal.h"
#include "util.h"

static void progress(bench_t *b, int final)
{
    if (b->o.quiet || b->cur >= b->n_runs)
        return;
    const pdb_run_t *r = &b->runs[b->cur];
    size_t failed = 0;
    int64_t toks = 0, cached = 0, prompt = 0;
    for (size_t i = 0; i < r->n_reqs; i++) {
        const pdb_req_t *q = &r->reqs[i];
        failed += !q->ok;
        toks += q->ok ? q->tokens : 0;
        if (q->ok && q->cached_tokens >= 0 && q->prompt_tokens >= 0) {
            cached += q->cached_tokens;
            prompt += q->prompt_tokens;
        }
    }
    char hit[32] = "";
    if (prompt > 0)
        snprintf(hit, sizeof(hit), ", cache hit %.1f%%", 100.0 * (double)cached / (double)prompt);
    uint64_t now = final && b->last_end_us ? b->last_end_us : pdr_now_us();
    double el = b->measure_t0_us && now > b->measure_t0_us ? (double)(now - b->measure_t0_us) / 1e6 : 0;
    char plan[32];
    if (r->planned)
        snprintf(plan, sizeof(plan), "/%zu", r->planned);
    else
        plan[0] = '\0';
    const char *ph = b->phase == PH_HEALTH ? "health gate" : b->phase == PH_WARMUP ? "warm-up" : "";
    char line[256];
    int n = snprintf(line, sizeof(line),
                     "[%zu/%zu] %d/%d c=%d r%d: %s%s%zu%s done, %zu failed, %.0f tok/s%s, %.1fs", b->cur + 1,
                     b->n_runs, r->isl, r->osl, r->concurrency, r->repeat + 1, ph, ph[0] ? ", " : "",
                     r->n_reqs, plan, failed, el > 0 ? (double)toks / el : 0.0, hit, el);
    if (n < 0)
        return;
    if (b->tty)
        fprintf(stderr, "\r%s\033[K%s", line, final ? "\n" : "");
    else if (final)
        fprintf(stderr, "%s\n", line);
}

void pdb__on_progress(uv_timer_t *t)
{
    progress(t->data, 0);
}

static void end_run(bench_t *b)
{
    pdb_run_t *run = &b->runs[b->cur];
    run->wall_s = b->last_end_us > b->measure_t0_us ? (double)(b->last_end_us - b->measure_t0_us) / 1e6 : 0;
    progress(b, 1);
    b->cur++;
    pdb__next_run(b);
}

static int more_to_start(const bench_t *b)
{
    const pdb_run_t *run = &b->runs[b->cur];
    if (b->interrupted)
        return 0;
    if (run->planned)
        return b->started < run->planned;
    return pdr_now_us() < b->deadline_us;
}

void pdb__start_more(bench_t *b)
{
    const pdb_run_t *run = &b->runs[b->cur];
    for (size_t i = 0; i < b->n_slots && more_to_start(b); i++) {
        slot_t *s = &b->slots[i];
        if (s->active)
            continue;
        if (b->o.workload == PDB_WL_MULTI_TURN && run->planned != 0 &&
            s->seq >= run->planned / b->n_slots + (i < run->planned % b->n_slots))
            continue; /* this slot's share is sent: which requests run depends on --seed only */
        if (pdb__slot_start(b, s, b->started, 0) != 0) {
            b->interrupted = b->fatal = 1;
            break;
        }
        b->started++;
    }
    if (b->active == 0 && b->phase == PH_MEASURE)
        end_run(b);
}

void pdb__begin_measure(bench_t *b)
{
    pdb_run_t *run = &b->runs[b->cur];
    b->phase = PH_MEASURE;
    b->started = b->finished = 0;
    b->measure_t0_us = b->last_end_us = pdr_now_us();
    b->deadline_us = b->measure_t0_us + (uint64_t)(b->o.duration * 1e6);
    b->n_slots = (size_t)run->concurrency;
    for (size_t i = 0; i < b->n_slots; i++)
        b->slots[i].seq = 0;
    pdb__start_more(b);
}

static void begin_warmup(bench_t *b)
{
    pdb_run_t *run = &b->runs[b->cur];
    run->health_ok = 1;
    if (b->o.warmup == 0 || b->interrupted) {
        run->warmup_ok = -1;
        pdb__begin_measure(b);
        return;
    }
    b->phase = PH_WARMUP;
    if (pdb__slot_start(b, &b->slots[0], UINT64_MAX, 1) != 0) {
        run->warmup_ok = 0;
        snprintf(run->warmup_error, sizeof(run->warmup_error), "could not be sent");
        pdb__begin_measure(b);
    }
}

static void probe_health(bench_t *b);

static size_t on_probe_data(pdr_leg_t *leg, const char *p, size_t n)
{
    (void)leg;
    (void)p;
    return n;
}

/* The gate did not pass: the run is recorded as failed and the next one starts. */
static void health_failed(bench_t *b)
{
    pdb_run_t *run = &b->runs[b->cur];
    run->health_ok = 0;
    snprintf(run->health_error, sizeof(run->health_error),
             "health gate: GET %.200s did not answer 200 within %.1f s (last: %.150s)", b->health_url,
             b->o.health_timeout_s, b->health_last);
    if (!b->o.quiet)
        fprintf(stderr, "%spdbench: run %zu (%d/%d c=%d): %s; run skipped\n", b->tty ? "\r\033[K" : "",
                b->cur + 1, run->isl, run->osl, run->concurrency, run->health_error);
    b->cur++;
    pdb__next_run(b);
}

static void on_health_timer(uv_timer_t *t)
{
    bench_t *b = t->data;
    if (b->health_failed_pending) {
        b->health_failed_pending = 0;
        health_failed(b);
        return;
    }
    probe_health(b);
}

static void on_probe_done(pdr_leg_t *leg, int err)
{
    bench_t *b = leg->data;
    b->probe_active = 0;
    if (err == 0 && leg->status == 200) {
        begin_warmup(b);
        return;
    }
    if (err != 0)
        snprintf(b->health_last, sizeof(b->health_last), "%s (%s)", pdr_strerror(err), pdr_errname(err));
    else
        snprintf(b->health_last, sizeof(b->health_last), "HTTP %ld", leg->status);
    if (pdr_now_us() >= b->health_deadline_us) {
        health_failed(b);
        return;
    }
    uv_timer_start(&b->health_timer, on_health_timer, HEALTH_RETRY_MS, 0);
}

static const pdr_leg_cbs_t probe_cbs = {on_probe_data, on_probe_done};

static void probe_health(bench_t *b)
{
    uint64_t now = pdr_now_us();
    long left_ms = b->health_deadline_us > now ? (long)((b->health_deadline_us - now) / 1000) : 0;
    long t = left_ms < 2000 ? (left_ms < 100 ? 100 : left_ms) : 2000;
    int r = pdr_leg_start_probe(&b->probe, b->multi, b->health_url, NULL, t, &probe_cbs, b);
    if (r != 0) {
        /* A URL the client cannot use: reported as a failed gate on the next turn of the loop. */
        snprintf(b->health_last, sizeof(b->health_last), "cannot send: %s", pdr_strerror(r));
        b->health_failed_pending = 1;
        uv_timer_start(&b->health_timer, on_health_timer, 0, 0);
        return;
    }
    b->probe_active = 1;
}

static void on_closed(uv_handle_t *h)
{
    (void)h;
}

static void on_multi_closed(void *arg)
{
    (void)arg;
}

static void finish(bench_t *b)
{
    b->phase = PH_DONE;
    uv_timer_stop(&b->progress_timer);
    uv_close((uv_handle_t *)&b->progress_timer, on_closed);
    uv_close((uv_handle_t *)&b->health_timer, on_closed);
    uv_close((uv_handle_t *)&b->sigint, on_closed);
    pdr_multi_close(b->multi, on_multi_closed, b);
}

void pdb__next_run(bench_t *b)
{
    if (b->interrupted && b->cur < b->n_runs)
        b->n_runs = b->cur; /* the runs not begun, or not measured, are left out */
    if (b->cur >= b->n_runs) {
        finish(b);
        return;
    }
    b->phase = PH_HEALTH;
    b->measure_t0_us = b->last_end_us = 0;
    pdb_run_t *run = &b->runs[b->cur];
    run->warmup_ok = -1;
    if (b->o.no_health) {
        begin_warmup(b);
        return;
    }
    b->health_deadline_us = pdr_now_us() + (uint64_t)(b->o.health_timeout_s * 1e6);
    b->health_last[0] = '\0';
    probe_health(b);
}

/* SIGINT: no new requests; those in flight are cancelled and recorded as "interrupted". */
void pdb__on_sigint(uv_signal_t *sg, int signum)
{
    (void)signum;
    bench_t *b = sg->data;
    if (b->interrupted || b->phase == PH_DONE)
        return;
    b->interrupted = 1;
    fprintf(stderr, "%spdbench: interrupted; writing what was measured\n", b->tty ? "\r\033[K" : "");
    if (b->probe_active) {
        pdr_leg_cancel(&b->probe);
        b->probe_active = 0;
    }
    uv_timer_stop(&b->health_timer);
    pdb_run_t *run = &b->runs[b->cur];
    for (size_t i = 0; i < b->n_slots || (b->phase == PH_WARMUP && i == 0); i++) {
        slot_t *s = &b->slots[i];
        if (!s->active)
            continue;
        pdr_leg_cancel(&s->leg);
        s->active = 0;
        b->active--;
        if (!s->warmup && run->n_reqs < run->cap_reqs) {
            pdb_req_t q;
            memset(&q, 0, sizeof(q));
            q.overhead_us = NAN;
            q.ttft_ms = q.tpot_ms = q.e2e_ms = -1;
            q.prompt_tokens = -1;
            snprintf(q.cause, sizeof(q.cause), "interrupted");
            run->reqs[run->n_reqs++] = q;
        }
    }
    if (b->phase == PH_MEASURE) {
        b->last_end_us = pdr_now_us();
        end_run(b);
        return;
    }
    pdb__next_run(b);
}
