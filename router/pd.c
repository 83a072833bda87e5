/*
 * The PD request path. For each client request: validate the body once, pick a prefill and a decode
 * worker, give both the same body with the router's bootstrap fields (a fresh CSPRNG room per item
 * and per attempt), send both legs at once, read the prefill's answer to the end and check it, and
 * relay the decode's answer with back-pressure both ways.
 *
 * pd.relay first_byte (the default): the decode's answer is relayed from its first body byte, without
 * waiting for the prefill's HTTP answer (a real prefill answers up to a forward pass after its KV has
 * left); the prefill leg is still read to its end, after the client's response if need be (the request
 * lingers, off the client's books, until the prefill answers or its KV deadline passes). A prefill
 * failure after that first byte is logged and counted by cause, and the decode's stream goes on: the
 * decode already holds the KV. pd.relay after_prefill, and any request with the logprob merge (which
 * needs the prefill's input logprobs in front of the decode's): the decode's bytes are held (at most
 * HIGH_WATER, then the decode transfer is paused) until the prefill leg has answered successfully.
 * Any failure before the client response starts cancels both legs at once (their connections are
 * closed, so workers see the abort) and retries up to retries.max on a new pair with new rooms, then
 * answers 502 (upstream failure) or 504 (deadline) in the OpenAI error shape. A decode failure cancels
 * the prefill leg at once; a client that goes away cancels both.
 *
 * Ownership: pd_req_t is malloc'd; the h2o pool holds a small anchor whose dispose callback detaches
 * the request (the client is gone or the response is over), cancels what is still running, writes
 * the access log line and closes the timer; the memory is freed in the timer's close callback.
 * A request stays on the loop thread that accepted it.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include "admission.h"
#include "breaker.h"
#include "buf.h"
#include "disagg.h"
#include "err.h"
#include "kvdeadline.h"
#include "links.h"
#include "pd_vllm.h"
#include "phases.h"
#include "retry.h"
#include "tickets.h"
#include "router.h"
#include "shim_events.h"
#include "sockinfo.h"
#include "token_ids.h"
#include "trace.h"
#include "util.h"

/* Decode bytes are coalesced up to 64 KiB per send: one small write per SSE event starves a client with a
 * small receive window (measured ~140 KB/s against ~1.9 MB/s). */
#define HIGH_WATER (64 * 1024)
/* While waiting for the workers, an HTTP/1 client's socket is probed for a close this often: h2o reads
 * nothing from an HTTP/1 client while its handler is pending, so a close is otherwise unseen. */
#define PEEK_INTERVAL_MS 100
#define PREFILL_BODY_CAP (64u << 20)
#define PDR_MAX_TRIED 16
#define PDR_MAX_AVOID (PDR_MAX_TRIED + 240) /* the failed ones, then those at their in-flight limit */

typedef enum { MODE_PD = 0, MODE_MODELS } pd_mode_t;

typedef struct pd_req {
    pdr_router_t *r;
    pdr_thread_t *t;
    h2o_req_t *req; /* NULL once h2o disposed the request */
    h2o_generator_t gen;
    pd_mode_t mode;
    pdr_route_t route;
    int mroute;
    pdr_pdreq_t pr;
    char *body;
    size_t body_len;
    uint64_t *rooms;
    size_t n_rooms;
    char request_id[80];
    pdr_fwd_t fwd; /* the headers both legs carry (fwdheaders.h), built once */

    const pdr_config_t *conf; /* the snapshot this request started with (a reload does not change it) */
    const char *pool;         /* the pool serving the request's model (a name in conf); retries stay in it */
    pdr_timeouts_t to;        /* its deadlines: the pool's timeouts where it sets them, else the top-level */
    pdr_protocol_t protocol;  /* that pool's protocol */
    int attempt;
    uint64_t tried[2][PDR_MAX_TRIED]; /* uids of the workers that failed this request, by role */
    size_t n_tried[2];
    pdr_worker_t *pw, *dw;
    pdr_leg_t pleg, dleg;
    unsigned p_running : 1, d_running : 1, p_done : 1, d_done : 1;
    int p_err, d_err;
    pdr_buf_t pbody; /* the prefill's answer (checked, used for logprob merge) */
    int p_truncated;
    json_t *p_json;    /* parsed prefill answer when merging */
    pdr_buf_t pending; /* decode bytes not yet handed to h2o */
    pdr_buf_t sending; /* bytes h2o is writing now */
    /* HTTP/2: sending goes to h2o in pieces of H2_PIECE (send_piece), each one taken being the client's
     * progress; send_off is where the next begins, send_last whether the last piece ends the response. */
    size_t send_off;
    unsigned send_last : 1;
    pdr_buf_t sse_carry; /* streaming merge: an incomplete event (at most limits.max_merge_bytes) */
    size_t sse_scanned;  /* the bytes of sse_carry already searched for an event's end */
    int merge;           /* logprob merge wanted */
    int merge_overflow;  /* a whole-answer merge outgrew limits.max_merge_bytes */
    int is_sse;
    pdr_sse_counter_t sse_count; /* token events in the relayed stream (metrics) */
    uint64_t tokens, first_token_ns, last_token_ns;

    unsigned started : 1, send_inflight : 1, final_sent : 1, stopped : 1, errored : 1, broken : 1;
    unsigned client_aborted : 1; /* the client went away before the end (error_cause "client_abort") */
    unsigned refused : 1;        /* answered by admission, no worker chosen: its log line is rate-limited */
    unsigned lingering : 1;      /* the client's response is over; the prefill leg is read to its end */
    unsigned recheck : 1;        /* advance() waits for the prefill leg's connect: look again in 1 ms */
    uint64_t d_failed_ns;        /* when the decode's failure was seen with the prefill leg outstanding */
    uint64_t p_failed_ns;        /* when the prefill's 5xx was seen with the decode leg outstanding */
    int status;
    uint64_t t0_ns, ttfb_ns, end_ns, attempt_t0_ns, last_data_ns;
    uint64_t send_ns; /* when the send in flight was handed to h2o (the client's read clock) */
    /* HTTP/1: the client's progress by bytes (a send of up to HIGH_WATER may take a slow reader longer
     * than stream_idle_ms): its TCP's acknowledged bytes, sampled while a send is in flight. */
    uint64_t took_ns, sample_ns, acked;
    unsigned acked_known : 1;
    uint64_t first_byte_deadline_ns, kv_deadline_ns;
    /* The KV deadline (kvdeadline.h): kv_ms, computed once from the prompt's length (kv_tokens, found as
     * kv_tokens_how), runs from the moment both legs are sent (protocol vllm: the decode leg) while kv_open,
     * until the KV is known to have arrived: the decode's first token (kv_sse counts its token events until
     * the first), the prefill's successful answer (sglang), or a shim's report. kv_cause names the last KV
     * failure (access log). */
    uint64_t kv_ms, kv_tokens;
    pdr_kv_tokens_how_t kv_tokens_how;
    unsigned kv_open : 1;
    uint8_t *kv_room_done; /* the shims' "done" reports by room index (pdr_pd_kv_done), NULL until one */
    size_t kv_rooms_done;
    pdr_sse_counter_t kv_sse;
    const char *kv_cause;
    char kv_msg[200];
    uint64_t bytes_in, bytes_out;
    const char *error_cause;
    uv_timer_t timer;
    int counted_inflight;
    int last_fail_status;
    char last_fail_msg[768];
    char retry_error[192]; /* JSON-escaped: the failure of the last attempt that was retried (access log) */
    /* protocol vllm (pd_vllm.h): the prefill runs first, alone; then the decode with dbody. release is the
     * body that frees the prefill's KV if the decode's answer never begins (NULL: no KV held for it). */
    unsigned vllm : 1, vllm_bad : 1;
    char *dbody, *release;
    size_t dbody_len, release_len;
    char vllm_err[200]; /* why the prefill's answer cannot be used (vllm_bad) */
    /* Conditional disaggregation (disagg.h): solo = this attempt skips the prefill and runs on one worker
     * (dw: the decode with protocol vllm, a regular worker with sglang); disagg = the attempt's decision
     * (-1: none made, the feature is off or nothing can run the request alone). */
    unsigned solo : 1, merge_wanted : 1;
    int disagg;
    /* Data-parallel attention (pool.c: a rank is a worker of its own, w->dp_rank): protocol vllm names the
     * rank in a header of each leg, built here (pdr_leg_start copies it). */
    const char *rank_hdrs[4];
    char rank_line[48];
    /* Phase timing (phases.h) and the request's trace spans (trace.h): traced = the trace is sampled and
     * an exporter runs; root_span is the router's span for the request, p_span/d_span the span ids the
     * current attempt's legs carry in their traceparent. */
    pdr_phase_t ph;
    unsigned traced : 1;
    uint8_t root_span[8], p_span[8], d_span[8];
    /* Decode admission (kv_admission, shim_events.h): the KV held on dw, the request's need in tokens
     * (0: not computed yet) and how long it may wait for room. */
    pdr_kv_hold_t kv_hold;
    uint64_t kv_need, admit_deadline_ns;
    unsigned admit_waited : 1, room_open : 1;
    /* The workers' incarnations (w->load.epoch) when the attempt began: a new one fails it fast. */
    uint64_t p_epoch, d_epoch;
    /* Admission (admission.h): the request's slot or place in the queue, and when its wait ends. */
    pdr_admit_waiter_t admit;
    uint64_t queue_deadline_ns;
    /* Retries (retry.h): retry_slot = the request holds a slot of the retry budget (released at its end);
     * backoff_ns = while non-zero, no attempt runs: the next one starts then. */
    unsigned retry_slot : 1;
    uint64_t backoff_ns;
} pd_req_t;

static void advance(pd_req_t *x);
static void on_kick(uv_timer_t *t);
static void start_attempt(pd_req_t *x);
static void vllm_start_prefill(pd_req_t *x);
static void vllm_start_decode(pd_req_t *x);
static void vllm_release_kv(pd_req_t *x);
static void arm_timer(pd_req_t *x);
static int samples_progress(const pd_req_t *x);
static void sample_client_progress(pd_req_t *x, uint64_t now);
static uint64_t idle_ns(const pd_req_t *x);
static int whole_answer(const pd_req_t *x);

/* ---- helpers ---- */

/* The decode's answer goes to the client from its first body byte (pd.relay first_byte), not after the
 * prefill's answer. The logprob merge needs the prefill's answer first. */
static int relay_first_byte(const pd_req_t *x)
{
    return x->mode == MODE_PD && !x->vllm && x->conf->pd.relay == PDR_RELAY_FIRST_BYTE && !x->merge;
}

/* The prefill leg failed (or its KV deadline passed) after the decode's first byte reached the client:
 * nothing is retried, the decode's stream goes on; logged, counted by cause, and the prefill's failure
 * reported to the pool. */
static void late_prefill_failure(pd_req_t *x, int cause, const char *msg)
{
    x->t->m.upstream_errors[PDR_ROLE_PREFILL][cause]++;
    x->t->m.prefill_late_failures[cause]++;
    if (x->pw != NULL && cause != PDR_CAUSE_KV_DEADLINE)
        pdr_pool_report_failure(&x->r->pool, x->pw, msg);
    pdr_warn("request %s: prefill %s failed after the decode's first byte (%s); the decode's answer goes on",
             x->request_id, x->pw ? x->pw->target : "-", msg);
}

/* A lingering request's prefill leg has ended: the request goes. */
static void free_req(uv_handle_t *h);
static void linger_end(pd_req_t *x)
{
    x->lingering = 0;
    x->t->live--;
    x->t->lingering--;
    uv_timer_stop(&x->timer);
    uv_close((uv_handle_t *)&x->timer, free_req);
}

/* The client response begins (first byte, or an error answer; ttfb: time it). A PD request counts in the
 * m.waiting gauge (the router's view of the workers' queues) from its start until this. */
static void mark_started(pd_req_t *x, int ttfb)
{
    if (!x->started && x->counted_inflight)
        x->t->m.waiting--;
    x->started = 1;
    if (ttfb)
        x->ttfb_ns = pdr_now_ns();
}

/* The client went away before the end: counted once, and named in the access log. */
static void note_client_abort(pd_req_t *x)
{
    x->t->m.client_aborts_total++;
    x->error_cause = "client_abort";
    x->client_aborted = 1;
}

static void random_span(uint8_t out[8])
{
    uint64_t r;
    do
        r = pdr_random_u64();
    while (r == 0); /* an all-zero span id is invalid (W3C trace context) */
    memcpy(out, &r, 8);
}

/* A leg ended (answered, failed or cancelled): its timestamps go to the phase record, and its span (the
 * id its worker received as parent) to the exporter. */
static void leg_ended(pd_req_t *x, int prefill, const pdr_worker_t *w)
{
    const pdr_leg_t *leg = prefill ? &x->pleg : &x->dleg;
    int done = prefill ? x->p_done : x->d_done, err = prefill ? x->p_err : x->d_err;
    int ok = done && err == 0 && leg->status >= 200 && leg->status < 300;
    /* The clock is read only when something uses the end: a good prefill's phase, or a traced leg. */
    uint64_t end_us = (prefill && ok) || x->traced ? pdr_now_us() : 0;
    if (prefill) {
        x->ph.prefill_sent_us = leg->started_ns / 1000;
        x->ph.prefill_headers_us = leg->first_byte_ns / 1000;
        if (ok) {
            x->ph.prefill_done_us = end_us;
            pdr_phase_observe_prefill(&x->ph, x->t->m.phases);
        }
    } else {
        x->ph.decode_sent_us = leg->started_ns / 1000;
        x->ph.decode_headers_us = leg->first_byte_ns / 1000;
    }
    if (!x->traced)
        return;
    pdr_span_t sp;
    pdr_span_init(&sp, prefill ? "prefill" : "decode", PDR_SPAN_CLIENT, x->fwd.trace.trace_id,
                  prefill ? x->p_span : x->d_span, x->root_span, leg->started_ns / 1000, end_us);
    const char *role = prefill ? "prefill" : x->solo ? "solo" : "decode";
    pdr_span_attr_str(&sp, "pdr.role", role, strlen(role));
    if (w != NULL)
        pdr_span_attr_str(&sp, "server.address", w->target, strlen(w->target));
    pdr_span_attr_int(&sp, "pdr.attempt", x->attempt + 1);
    if (leg->status != 0)
        pdr_span_attr_int(&sp, "http.response.status_code", leg->status);
    pdr_span_attr_int(&sp, "pdr.bytes_in", (int64_t)leg->bytes_in);
    const char *why = !done ? "cancelled" : err != 0 ? pdr_strerror(err) : NULL;
    if (why != NULL)
        pdr_span_attr_str(&sp, "error.type", why, strlen(why));
    if (x->n_rooms > 0 && x->rooms != NULL && !x->vllm && !x->solo)
        pdr_span_attr_int(&sp, "pdr.room", (int64_t)x->rooms[0]);
    pdr_span_event(&sp, "response_headers", leg->first_byte_ns / 1000);
    if (!prefill)
        pdr_span_event(&sp, "first_byte", x->ph.decode_first_byte_us);
    sp.status = why != NULL || leg->status >= 500 ? PDR_SPAN_STATUS_ERROR : PDR_SPAN_STATUS_OK;
    pdr_trace_submit(&sp, 1);
}

/* The attempt's KV is known to have arrived: its deadline ends and the link's suspect mark is cleared. */
static void kv_arrived(pd_req_t *x)
{
    if (!x->kv_open)
        return;
    x->kv_open = 0;
    pdr_links_success(x->pw, x->dw);
}

/* A KV failure of the attempt: counted by cause and backend, the link marked suspect, logged; the deadline
 * no longer runs for this attempt. */
static void note_kv_failure(pd_req_t *x, pdr_kv_cause_t cause, const char *backend, const char *why)
{
    x->kv_open = 0;
    x->kv_cause = pdr_kv_cause_names[cause];
    pdr_kv_count_failure(cause, pdr_kvf_backend_parse(backend));
    /* The breaker counts what points at the link: the deadline, a shim's failure, the decode's error
     * answer. A prefill's own error answer, a connection broken by a dying worker or a restart are the
     * worker's (outlier ejection and health checks take a worker that fails with every partner). */
    if (x->conf->breaker.enabled &&
        (cause == PDR_KVC_DEADLINE || cause == PDR_KVC_SHIM_FAILED || cause == PDR_KVC_DECODE_ERROR)) {
        pdr_breaker_conf_t bc = {(uint64_t)x->conf->breaker.consecutive_failures,
                                 (uint64_t)x->conf->breaker.open_ms, (uint64_t)x->conf->breaker.max_open_ms};
        pdr_links_failure_breaker(x->pw, x->dw, x->kv_cause, &bc);
    } else {
        pdr_links_failure(x->pw, x->dw, x->kv_cause);
    }
    pdr_warn("request %s: KV transfer from prefill %s to decode %s failed (%s, backend %s): %s",
             x->request_id, x->pw ? x->pw->target : "-", x->dw ? x->dw->target : "-", x->kv_cause,
             pdr_kvf_backend_names[pdr_kvf_backend_parse(backend)], why);
}

static void release_leg(pd_req_t *x, int prefill)
{
    pdr_worker_t *w = prefill ? x->pw : x->dw;
    if (prefill ? x->p_running : x->d_running) {
        if (x->mode == MODE_PD)
            leg_ended(x, prefill, w);
        if (prefill)
            x->p_running = 0;
        else
            x->d_running = 0;
        if (w != NULL)
            pdr_worker_track(w, -1);
        if (x->conf->limits.max_inflight_per_worker > 0)
            pdr_admit_kick(x->t, x->t->config); /* the worker may have room for a queued request */
    }
}

static void cancel_legs(pd_req_t *x)
{
    if (x->release != NULL)
        vllm_release_kv(x);
    if (x->p_running) {
        pdr_leg_cancel(&x->pleg);
        release_leg(x, 1);
    }
    if (x->d_running) {
        pdr_leg_cancel(&x->dleg);
        release_leg(x, 0);
    }
}

static void fail_response(pd_req_t *x, int status, const char *type, const char *msg, int retry_after)
{
    x->status = status;
    x->errored = 1;
    cancel_legs(x);
    if (x->req == NULL || x->started)
        return;
    mark_started(x, 1);
    x->final_sent = 1;
    pdr_send_error(x->req, status, type, msg, retry_after);
}

/* ---- client side: h2o generator ---- */

/* Counts the token events in what is about to be relayed (streams only: no per-byte work otherwise). */
static void note_tokens(pd_req_t *x)
{
    size_t n = pdr_sse_count_tokens(&x->sse_count, x->sending.p, x->sending.len);
    if (n == 0)
        return;
    uint64_t now = pdr_now_ns();
    if (x->tokens == 0) {
        x->first_token_ns = now;
        x->ph.first_token_us = now / 1000;
    }
    x->last_token_ns = now;
    x->ph.last_token_us = now / 1000;
    x->tokens += n;
    x->t->m.stream_events_total[x->mroute] += n;
}

static void send_final_or_more(pd_req_t *x);

/* HTTP/2 multiplexes streams over one socket, so a stream's progress cannot be read from the socket as an
 * HTTP/1 client's is (sample_client_progress): h2o calls proceed once it has written all it was handed,
 * which for a coalesced send of up to HIGH_WATER can take a slowly read stream longer than
 * stream_idle_ms (its flow-control window comes back as the client reads). HTTP/2 sends go to h2o in
 * pieces of one DATA frame's default size instead, each piece taken restarting the clock. */
#define H2_PIECE 16384

static void send_piece(pd_req_t *x)
{
    size_t left = x->sending.len - x->send_off, n = left;
    if (x->req->version >= 0x200 && n > H2_PIECE)
        n = H2_PIECE;
    int last = x->send_last && n == left;
    h2o_iovec_t v = h2o_iovec_init(x->sending.p + x->send_off, n);
    x->send_off += n;
    x->send_inflight = 1;
    x->send_ns = pdr_now_ns();
    h2o_send(x->req, &v, n ? 1 : 0, last ? H2O_SEND_STATE_FINAL : H2O_SEND_STATE_IN_PROGRESS);
}

static void on_proceed(h2o_generator_t *gen, h2o_req_t *req)
{
    pd_req_t *x = H2O_STRUCT_FROM_MEMBER(pd_req_t, gen, gen);
    (void)req;
    x->send_inflight = 0;
    if (!x->stopped && x->send_off < x->sending.len) { /* the next piece of an HTTP/2 send */
        send_piece(x);
        return;
    }
    x->sending.len = 0;
    x->send_off = 0;
    advance(x);
}

static void on_stop(h2o_generator_t *gen, h2o_req_t *req)
{
    pd_req_t *x = H2O_STRUCT_FROM_MEMBER(pd_req_t, gen, gen);
    (void)req;
    /* The client went away mid-response: stop both legs now. */
    x->stopped = 1;
    x->send_inflight = 0;
    if (!x->final_sent && x->error_cause == NULL) /* not when the router cut a stalled client */
        note_client_abort(x);
    cancel_legs(x);
}

/*
 * Splits complete events ("\n\n") off the decode's stream and rewrites each "data:" JSON with the
 * prefill's logprobs; the rest of an event waits in sse_carry for its end. Only bytes not searched
 * before are searched, so an event costs its length once however many reads bring it. PDR_ETOOBIG
 * when an event without its end outgrows limits.max_merge_bytes (held whole for its merge, as a whole
 * answer would be), PDR_ENOMEM when the carry cannot grow.
 */
static int sse_merge_events(pd_req_t *x, const char *p, size_t n, pdr_buf_t *out)
{
    if (pdr_buf_append(&x->sse_carry, p, n, SIZE_MAX / 2) != 0)
        return PDR_ENOMEM;
    char *c = x->sse_carry.p;
    size_t len = x->sse_carry.len, start = 0, i = x->sse_scanned;
    for (;;) {
        char *q = NULL;
        while (i + 1 < len) {
            char *nl = memchr(c + i, '\n', len - 1 - i);
            if (nl == NULL) {
                i = len - 1;
                break;
            }
            i = (size_t)(nl - c);
            if (c[i + 1] == '\n') {
                q = nl;
                break;
            }
            i++;
        }
        if (q == NULL)
            break;
        const char *ev = c + start;
        size_t evlen = (size_t)(q - ev);
        size_t dl;
        const char *d = pdr_sse_first_data(ev, evlen, &dl);
        json_t *j = d != NULL ? json_loadb(d, dl, 0, NULL) : NULL;
        if (j != NULL && x->p_json != NULL && pdr_merge_logprobs(j, x->p_json)) {
            char *s = json_dumps(j, JSON_COMPACT);
            if (s != NULL) {
                pdr_buf_append(out, "data: ", 6, SIZE_MAX / 2);
                pdr_buf_append(out, s, strlen(s), SIZE_MAX / 2);
                pdr_buf_append(out, "\n\n", 2, SIZE_MAX / 2);
                free(s);
            }
        } else {
            pdr_buf_append(out, ev, evlen + 2, SIZE_MAX / 2);
        }
        if (j != NULL)
            json_decref(j);
        start = (size_t)(q - c) + 2;
        i = start;
    }
    if (start > 0) /* no copy of a carry with no event ended: that would be a pass over it per read */
        memmove(c, c + start, len - start);
    x->sse_carry.len = len - start;
    x->sse_scanned = i > start ? i - start : 0;
    if (x->sse_carry.len > (size_t)x->conf->limits.max_merge_bytes)
        return PDR_ETOOBIG;
    return 0;
}

/* The streaming merge cannot go on (an event past limits.max_merge_bytes, or no memory for it): the
 * decode is cancelled and the stream ends with an error event after the events merged so far. */
static void sse_merge_failed(pd_req_t *x, int err, pdr_buf_t *out)
{
    int big = err == PDR_ETOOBIG;
    if (big)
        x->t->m.merge_too_large_total++;
    x->error_cause = big ? "merge_too_large" : "router_out_of_resources";
    x->broken = 1;
    pdr_warn("request %s: %s: the decode's stream is ended with an error event", x->request_id,
             big ? "an event of the decode's stream outgrew limits.max_merge_bytes without its end"
                 : "out of memory for the logprob merge of the decode's stream");
    cancel_legs(x);
    x->d_done = 1;
    x->d_err = 0;
    x->sse_carry.len = 0;
    x->sse_scanned = 0;
    char ev[300];
    int k =
        snprintf(ev, sizeof(ev), "data: {\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"code\":%d}}\n\n",
                 big ? "an event of the decode's stream exceeds limits.max_merge_bytes (the logprob merge "
                       "holds each event whole)"
                     : "the router ran out of memory for the logprob merge",
                 big ? "upstream_error" : "service_unavailable", big ? 502 : 503);
    if (k > 0 && (size_t)k < sizeof(ev))
        pdr_buf_append(out, ev, (size_t)k, SIZE_MAX / 2);
}

static void start_client_response(pd_req_t *x)
{
    h2o_req_t *req = x->req;
    mark_started(x, 1);
    x->status = (int)x->dleg.status;
    req->res.status = x->status;
    req->res.reason = pdr_http_reason(x->status);
    const char *ct = x->dleg.content_type[0] ? x->dleg.content_type : "application/json";
    x->is_sse = strncmp(ct, "text/event-stream", 17) == 0;
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, ct, strlen(ct));
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-request-id"), 0, NULL, x->request_id,
                          strlen(x->request_id));
    if (x->is_sse)
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL, H2O_STRLIT("no-cache"));
    if (!x->merge && !x->is_sse && x->dleg.content_length >= 0)
        req->res.content_length = (size_t)x->dleg.content_length;
    x->gen.proceed = on_proceed;
    x->gen.stop = on_stop;
    h2o_start_response(req, &x->gen);
}

static void send_final_or_more(pd_req_t *x)
{
    if (x->req == NULL || x->stopped || x->final_sent || x->send_inflight)
        return;
    /* Non-streaming merge: the whole decode answer is needed first. */
    if (x->merge && !x->is_sse) {
        if (!x->d_done) {
            if (x->dleg.paused)
                pdr_leg_resume(&x->dleg);
            return;
        }
        json_t *j = json_loadb(x->pending.p ? x->pending.p : "", x->pending.len, 0, NULL);
        if (j != NULL && x->p_json != NULL && pdr_merge_logprobs(j, x->p_json)) {
            char *s = json_dumps(j, JSON_COMPACT);
            if (s != NULL) {
                x->pending.len = 0;
                pdr_buf_append(&x->pending, s, strlen(s), SIZE_MAX / 2);
                free(s);
            }
        }
        if (j != NULL)
            json_decref(j);
    }
    int final = x->d_done;
    if (final && x->d_err != 0) {
        /* A non-SSE body cannot carry an error: abort the response so the client sees it broken. */
        x->final_sent = 1;
        x->end_ns = pdr_now_ns();
        h2o_send(x->req, NULL, 0, H2O_SEND_STATE_ERROR);
        return;
    }
    pdr_buf_t t = x->sending;
    x->sending = x->pending;
    x->pending = t;
    x->pending.len = 0;
    if (x->merge && x->is_sse) {
        /* Rewrite complete events from what was pending into sending. */
        pdr_buf_t raw = x->sending;
        pdr_buf_t out = {0};
        int rc = sse_merge_events(x, raw.p, raw.len, &out);
        pdr_buf_free(&raw);
        if (rc != 0) {
            sse_merge_failed(x, rc, &out);
            final = 1;
        } else if (final && x->sse_carry.len > 0) {
            pdr_buf_append(&out, x->sse_carry.p, x->sse_carry.len, SIZE_MAX / 2);
            x->sse_carry.len = 0;
            x->sse_scanned = 0;
        }
        x->sending = out;
    }
    if (x->sending.len == 0 && !final) {
        if (x->dleg.paused)
            pdr_leg_resume(&x->dleg);
        return;
    }
    if (x->is_sse && x->sending.len > 0)
        note_tokens(x);
    x->bytes_out += x->sending.len;
    x->send_ns = pdr_now_ns();
    if (!x->is_sse && x->sending.len > 0 && x->status < 400) {
        /* A whole answer: its first and last body bytes stand for the first and last token. */
        if (x->ph.first_token_us == 0)
            x->ph.first_token_us = x->send_ns / 1000;
        x->ph.last_token_us = x->send_ns / 1000;
    }
    if (final) {
        x->final_sent = 1;
        x->end_ns = pdr_now_ns();
    }
    x->send_off = 0;
    x->send_last = final != 0;
    send_piece(x);
    if (!final && x->dleg.paused)
        pdr_leg_resume(&x->dleg);
    if (!final && samples_progress(x)) {
        if (!x->acked_known) /* the baseline: later samples see the bytes taken since */
            sample_client_progress(x, x->send_ns);
        arm_timer(x); /* the send's first progress sample is due before the deadline the timer holds */
    }
}

/* ---- attempt failure and retry ---- */

/* No retry follows: the answer says how the last attempt failed. */
static void fail_last(pd_req_t *x)
{
    int st = x->last_fail_status;
    fail_response(x, st,
                  st == 504   ? "timeout_error"
                  : st == 503 ? "service_unavailable"
                              : "upstream_error",
                  x->last_fail_msg, st == 503 ? 1 : 0);
}

/* A leg that ended before its worker answered anything, with an error that means the worker could not
 * be reached (refused, reset, connect timeout): the request is answered 503, as Envoy answers upstream
 * connect failures, not 502, which is for a worker that answered badly. */
/* 200: how long a decode's failure waits for the outstanding prefill leg's own failure (a reset on
 * loopback or a LAN arrives within a few ms of the decode's failed KV fetch; 200 ms leaves room for a
 * loaded host). */
#define PDR_PREFILL_DEATH_WINDOW_MS 200
/* 50: how long a prefill's 5xx waits for the outstanding decode leg's own failure (a decode killed while
 * it pulled KV: its reset reached the router 4 ms after the prefill's 500 in the fault suite's
 * kv_decode_killed, on two loaded cores). Shorter than the prefill's window: every prefill 5xx with the
 * decode still waiting pays it before its retry. */
#define PDR_DECODE_DEATH_WINDOW_MS 50

static int unreachable(const pdr_leg_t *leg, int err)
{
    return leg->status == 0 && (err == PDR_ECONNREFUSED || err == PDR_ETIMEDOUT || err == PDR_EPEERGONE);
}

/* The retry budget (retry.h): 1 when the request may retry (it holds a slot until its end), 0 when too
 * many requests are retrying already (counted; the attempt's failure is the answer). */
static int take_retry_slot(pd_req_t *x)
{
    uint64_t inflight = __atomic_load_n(&x->r->inflight, __ATOMIC_RELAXED);
    if (!pdr_retry_acquire(inflight, x->conf->retries.budget_percent, x->conf->retries.min_concurrent)) {
        pdr_retry_count_skipped(PDR_RETRY_SKIP_BUDGET);
        pdr_info("request %s: no retry: the retry budget is spent (%" PRIu64 " of %" PRIu64
                 " requests in flight are retrying; retries.budget_percent, retries.min_concurrent)",
                 x->request_id, pdr_retry_active(), inflight);
        return 0;
    }
    x->retry_slot = 1;
    return 1;
}

/* The back-off before retry x->attempt, cut short so that it ends by the request's first-byte deadline
 * counted from its start (a request already past it retries at once). */
static uint64_t retry_backoff_ms(const pd_req_t *x)
{
    const pdr_config_t *c = x->conf;
    uint64_t ms =
        pdr_retry_backoff_ms(x->attempt, c->retries.initial_backoff_ms, c->retries.backoff_multiplier,
                             c->retries.max_backoff_ms, c->retries.jitter_factor, pdr_retry_uniform());
    uint64_t now = pdr_now_ns(), end = x->t0_ns + (uint64_t)x->to.first_byte_ms * 1000000u;
    uint64_t left = end > now ? (end - now) / 1000000u : 0;
    return ms < left ? ms : left;
}

/* An attempt failed. The worker of `role` is blamed (ejected or counted, and avoided by the retry) unless
 * role is -1: a pair's deadline that cannot be pinned on either side, where both are avoided and checked
 * out of turn instead. status is the answer when no retry follows: 503 for a worker that could not be
 * reached, 502 for one that answered badly, 504 for a deadline. */
static void attempt_failed(pd_req_t *x, int role, int cause, int status, const char *msg)
{
    int blamed = role >= 0;
    pdr_role_t r0 = blamed ? (pdr_role_t)role : PDR_ROLE_PREFILL;
    pdr_worker_t *w = r0 == PDR_ROLE_PREFILL ? x->pw : x->dw;
    x->t->m.upstream_errors[r0][cause]++;
    if (x->kv_open) {
        /* The attempt ends with its KV in flight. A worker that could not be reached never took part in a
         * transfer: not a KV failure. */
        if (cause == PDR_CAUSE_KV_DEADLINE)
            note_kv_failure(x, PDR_KVC_DEADLINE, NULL, msg);
        else if (cause == PDR_CAUSE_RESET)
            note_kv_failure(x, PDR_KVC_PEER_GONE, NULL, msg);
        else if (cause == PDR_CAUSE_STATUS_5XX || cause == PDR_CAUSE_OTHER)
            note_kv_failure(x, r0 == PDR_ROLE_PREFILL ? PDR_KVC_PREFILL_ERROR : PDR_KVC_DECODE_ERROR, NULL,
                            msg);
        x->kv_open = 0;
    }
    x->error_cause = msg;
    if (blamed && w != NULL) {
        if (cause == PDR_CAUSE_CONNECT || cause == PDR_CAUSE_FIRST_BYTE_DEADLINE ||
            cause == PDR_CAUSE_KV_DEADLINE || cause == PDR_CAUSE_TIMEOUT)
            pdr_pool_eject(&x->r->pool, w, msg);
        else
            pdr_pool_report_failure(&x->r->pool, w, msg);
    }
    for (int k = 0; k < 2; k++) {
        pdr_worker_t *v = k == PDR_ROLE_PREFILL ? x->pw : x->dw;
        if (v == NULL || (blamed && k != role))
            continue;
        if (!blamed)
            pdr_worker_suspect(v);
        if (x->n_tried[k] < PDR_MAX_TRIED)
            x->tried[k][x->n_tried[k]++] = v->uid;
    }
    cancel_legs(x);
    if (x->req == NULL)
        return;
    x->last_fail_status = status;
    if (!blamed)
        snprintf(x->last_fail_msg, sizeof(x->last_fail_msg), "prefill %s and decode %s: %s",
                 x->pw ? x->pw->target : "-", x->dw ? x->dw->target : "-", msg);
    else if (status == 503)
        snprintf(x->last_fail_msg, sizeof(x->last_fail_msg), "%s worker %s could not be reached: %s",
                 pdr_role_name(r0), w ? w->target : "-", msg);
    else
        snprintf(x->last_fail_msg, sizeof(x->last_fail_msg), "%s worker %s failed: %s", pdr_role_name(r0),
                 w ? w->target : "-", msg);
    if (x->attempt < x->conf->retries.max && !pdr_router_shutting_down(x->r)) {
        if (!x->retry_slot && !take_retry_slot(x)) {
            fail_last(x);
            return;
        }
        x->attempt++;
        x->t->m.retries_total++;
        /* msg may lie in the leg's buffer, which the next attempt reuses; the access log's error names the
         * final outcome (a retry that succeeds has none), its retry_error this failure. */
        pdr_json_escape(x->retry_error, sizeof(x->retry_error), msg);
        x->error_cause = NULL;
        uint64_t ms = retry_backoff_ms(x);
        pdr_info("request %s: %s; retry %d on a new pair in %" PRIu64 " ms", x->request_id, x->last_fail_msg,
                 x->attempt, ms);
        if (ms == 0) {
            start_attempt(x);
            return;
        }
        x->recheck = 0;
        x->backoff_ns = pdr_now_ns() + ms * 1000000u;
        arm_timer(x);
        return;
    }
    fail_last(x);
}

static int cause_of(int err)
{
    switch (err) {
    case PDR_ECONNREFUSED:
        return PDR_CAUSE_CONNECT;
    case PDR_ETIMEDOUT:
        return PDR_CAUSE_TIMEOUT;
    case PDR_EPEERGONE:
        return PDR_CAUSE_RESET;
    default:
        return PDR_CAUSE_OTHER;
    }
}

/* Decides what happens next from the facts the callbacks recorded. Called after every event. */
static void advance(pd_req_t *x)
{
    if (x->req == NULL || x->stopped || x->backoff_ns != 0) /* backoff_ns: no attempt runs */
        return;
    if (x->started) {
        send_final_or_more(x);
        return;
    }
    if (x->mode == MODE_MODELS) {
        if (!x->d_done)
            return;
        if (x->d_err != 0 || x->dleg.status == 0) {
            fail_response(x, 502, "upstream_error", "decode worker failed to answer /v1/models", 0);
            return;
        }
        start_client_response(x);
        send_final_or_more(x);
        return;
    }
    if (x->merge_overflow) {
        x->t->m.merge_too_large_total++;
        x->error_cause = "merge_too_large";
        fail_response(x, 502, "upstream_error",
                      "the decode's answer exceeds limits.max_merge_bytes (the logprob merge holds it whole)",
                      0);
        return;
    }
    /* Cancelled by the router itself (lifecycle.drain_timeout_ms ran out): not the workers' fault. */
    if ((x->p_done && x->p_err == PDR_ECANCELED) || (x->d_done && x->d_err == PDR_ECANCELED)) {
        x->error_cause = "shutdown_cancelled";
        fail_response(x, 503, "service_unavailable",
                      "the router is shutting down: request cancelled at lifecycle.drain_timeout_ms", 1);
        return;
    }
    /* The router itself ran out of descriptors or memory for a leg: no worker is at fault, and a retry now
     * would fail the same way. */
    if ((x->p_done && x->p_err == PDR_ENOMEM) || (x->d_done && x->d_err == PDR_ENOMEM)) {
        x->error_cause = "router_out_of_resources";
        fail_response(x, 503, "service_unavailable",
                      "the router is out of file descriptors or memory for a worker connection", 1);
        return;
    }
    /* Prefill failures before the response starts: retry on a new pair. */
    if (x->p_done && x->p_err != 0) {
        attempt_failed(x, PDR_ROLE_PREFILL, cause_of(x->p_err), unreachable(&x->pleg, x->p_err) ? 503 : 502,
                       pdr_leg_strerror(&x->pleg, x->p_err));
        return;
    }
    /* The prefill answered a server error while the decode leg is outstanding (the mirror of the case
     * below): a prefill whose KV offer failed because the decode died answers its 5xx before the decode
     * leg's reset arrives, or just after it. A decode already known dead is blamed at once; a decode leg
     * that broke is the decode's failure (below), whichever came first; otherwise the decode leg has
     * PDR_DECODE_DEATH_WINDOW_MS to break before the prefill is blamed. A decode that answered, even
     * badly, is alive: the prefill's 5xx is then its own. */
    int d_broke = x->d_done && x->d_err != 0 && x->dleg.status == 0;
    if (x->p_done && x->pleg.status >= 500 && x->d_running && !x->dleg.got_headers && x->dw != NULL) {
        if (!pdr_worker_healthy(x->dw)) {
            attempt_failed(x, PDR_ROLE_DECODE, PDR_CAUSE_RESET, 503,
                           "the decode is down (the prefill's KV offer to it failed)");
            return;
        }
        uint64_t now = pdr_now_ns();
        if (x->p_failed_ns == 0)
            x->p_failed_ns = now;
        if (now < x->p_failed_ns + PDR_DECODE_DEATH_WINDOW_MS * 1000000ull) {
            x->recheck = 1;
            return;
        }
    }
    if (x->p_done && x->pleg.status >= 500 && !d_broke) {
        attempt_failed(x, PDR_ROLE_PREFILL, PDR_CAUSE_STATUS_5XX, 502, "prefill answered a server error");
        return;
    }
    if (x->p_done && x->vllm_bad) {
        attempt_failed(x, PDR_ROLE_PREFILL, PDR_CAUSE_OTHER, 502, x->vllm_err);
        return;
    }
    /* The decode failed while the prefill leg is still connecting: the decode's failure may come from the
     * prefill's being unreachable (its KV bootstrap failed), so the prefill's connect outcome decides
     * first; it is polled every millisecond (bounded by timeouts.connect_ms). */
    int d_failed = (x->d_done && (x->d_err != 0 || x->dleg.status == 0)) ||
                   (x->dleg.got_headers && x->dleg.status >= 500);
    if (x->p_running && pdr_leg_connecting(&x->pleg) && d_failed) {
        x->recheck = 1; /* next_deadline: 1 ms */
        return;
    }
    /* The decode failed while the prefill leg is outstanding: a decode whose KV fetch failed because the
     * prefill died answers its 5xx before the prefill leg's reset arrives. A prefill already known dead
     * answers 503 at once; otherwise its leg has PDR_PREFILL_DEATH_WINDOW_MS to fail (then it is the
     * prefill's 503 above) before the decode is blamed. */
    if (x->p_running && d_failed && x->pw != NULL) {
        if (!pdr_worker_healthy(x->pw)) {
            attempt_failed(x, PDR_ROLE_PREFILL, PDR_CAUSE_RESET, 503,
                           "the prefill is down (the decode's KV fetch from it failed)");
            return;
        }
        uint64_t now = pdr_now_ns();
        if (x->d_failed_ns == 0)
            x->d_failed_ns = now;
        if (now < x->d_failed_ns + PDR_PREFILL_DEATH_WINDOW_MS * 1000000ull) {
            x->recheck = 1;
            return;
        }
    }
    /* protocol pdshim: a worker that refuses the router's own ticket is misconfigured (another
     * ticket.key_file), not the client's fault: 502, and the worker avoided by the retry. */
    if (x->protocol == PDR_PROTO_PDSHIM &&
        ((x->p_done && x->pleg.status == 403) || (x->dleg.got_headers && x->dleg.status == 403))) {
        int role = x->p_done && x->pleg.status == 403 ? PDR_ROLE_PREFILL : PDR_ROLE_DECODE;
        x->t->m.tickets_refused_total++;
        x->error_cause = "ticket_refused";
        attempt_failed(x, role, PDR_CAUSE_OTHER, 502,
                       "refused the router's ticket (403): check that ticket.key_file is the same on the "
                       "router and the worker");
        return;
    }
    if (x->d_done && x->d_err != 0) {
        attempt_failed(x, PDR_ROLE_DECODE, cause_of(x->d_err), unreachable(&x->dleg, x->d_err) ? 503 : 502,
                       pdr_leg_strerror(&x->dleg, x->d_err));
        return;
    }
    if (x->dleg.got_headers && x->dleg.status >= 500) {
        attempt_failed(x, PDR_ROLE_DECODE, PDR_CAUSE_STATUS_5XX, 502, "decode answered a server error");
        return;
    }
    if (x->d_done && x->dleg.status == 0) {
        attempt_failed(x, PDR_ROLE_DECODE, PDR_CAUSE_OTHER, 502, "decode answered nothing");
        return;
    }
    /* A client error from the prefill is the client's to see (the decode cannot proceed either). */
    if (x->p_done && x->pleg.status >= 400) {
        cancel_legs(x);
        x->status = (int)x->pleg.status;
        mark_started(x, 1);
        x->final_sent = 1;
        h2o_req_t *req = x->req;
        req->res.status = x->status;
        req->res.reason = pdr_http_reason(x->status);
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
                       H2O_STRLIT("application/json"));
        req->res.content_length = x->pbody.len;
        x->bytes_out += x->pbody.len;
        h2o_send_inline(req, x->pbody.p ? x->pbody.p : "", x->pbody.len);
        return;
    }
    /* A decode client error: relay it as soon as it is complete; the prefill is no longer needed. */
    int decode_4xx = x->dleg.got_headers && x->dleg.status >= 400;
    /* pd.relay first_byte: the decode's first body byte (or its end) starts the response, with the
     * prefill's answer still to come. Until then a prefill failure above retries the whole request. */
    int first_byte = relay_first_byte(x) && x->dleg.got_headers && (x->pending.len > 0 || x->d_done);
    if (!decode_4xx && !first_byte && !(x->p_done && x->dleg.got_headers) && !(x->p_done && x->d_done))
        return;
    if (!decode_4xx && whole_answer(x) && !x->d_done)
        return;
    if (decode_4xx && x->p_running) {
        pdr_leg_cancel(&x->pleg);
        release_leg(x, 1);
    }
    if (x->merge && x->p_done && x->pbody.len > 0 && !x->p_truncated) {
        size_t dl;
        const char *d = pdr_sse_first_data(x->pbody.p, x->pbody.len, &dl);
        x->p_json = json_loadb(d ? d : x->pbody.p, d ? dl : x->pbody.len, 0, NULL);
    }
    /* No attempt follows: what only attempts need goes now, not at the end of a long stream. */
    pdr_buf_free(&x->pbody);
    pdr_pdreq_clear(&x->pr);
    start_client_response(x);
    send_final_or_more(x);
}

/* ---- upstream callbacks ---- */

/* A successful non-streaming answer with the logprob merge: the client response starts only once it has
 * arrived whole, so that an answer too large to merge is refused before any byte is sent. */
static int whole_answer(const pd_req_t *x)
{
    return x->merge && x->dleg.status < 400 && strncmp(x->dleg.content_type, "text/event-stream", 17) != 0;
}

static size_t prefill_data(pdr_leg_t *leg, const char *p, size_t n)
{
    pd_req_t *x = leg->data;
    if (!x->merge && !x->vllm && leg->status < 400)
        return n; /* a successful answer is only needed for the logprob merge (or vLLM's kv_transfer_params)
                   */
    if (!x->p_truncated && pdr_buf_append(&x->pbody, p, n, PREFILL_BODY_CAP) != 0)
        x->p_truncated = 1; /* still read to the end; only the merge needs the body */
    return n;
}

static void prefill_done(pdr_leg_t *leg, int err)
{
    pd_req_t *x = leg->data;
    x->p_done = 1;
    x->p_err = err;
    release_leg(x, 1);
    if (err == 0 && leg->status >= 200 && leg->status < 300 && !x->vllm)
        kv_arrived(x); /* an sglang prefill answers once its KV has been received */
    if (x->started || x->lingering) {
        /* After the decode's first byte (pd.relay first_byte): the outcome no longer changes the answer. */
        if (err == PDR_ECANCELED) {
            /* the router's own drain deadline: nobody's fault */
        } else if (err != 0) {
            late_prefill_failure(x, cause_of(err), pdr_strerror(err));
        } else if (leg->status >= 500 || leg->status < 200) {
            late_prefill_failure(x, PDR_CAUSE_STATUS_5XX, "prefill answered a server error");
        } else if (leg->status >= 400) {
            late_prefill_failure(x, PDR_CAUSE_OTHER, "prefill answered a client error");
        } else if (x->pw != NULL) {
            pdr_pool_report_success(&x->r->pool, x->pw);
            pdr_worker_note_alive(x->pw, pdr_now_ns());
            pdr_hist_observe_in(&x->t->m.prefill[x->mroute], PDR_BUCKETS_LLM,
                                (double)(pdr_now_ns() - x->attempt_t0_ns) / 1e9);
        }
        if (x->lingering) {
            linger_end(x);
            return;
        }
        advance(x);
        arm_timer(x);
        return;
    }
    if (err == 0 && leg->status < 500 && x->pw != NULL) {
        pdr_pool_report_success(&x->r->pool, x->pw);
        pdr_worker_note_alive(x->pw, pdr_now_ns());
    }
    if (err == 0 && leg->status >= 200 && leg->status < 300)
        pdr_hist_observe_in(&x->t->m.prefill[x->mroute], PDR_BUCKETS_LLM,
                            (double)(pdr_now_ns() - x->attempt_t0_ns) / 1e9);
    if (x->vllm && err == 0 && leg->status >= 200 && leg->status < 300)
        vllm_start_decode(x);
    advance(x);
    arm_timer(x);
}

static void on_kick(uv_timer_t *t)
{
    pd_req_t *x = t->data;
    advance(x);
    arm_timer(x);
}

static size_t decode_data(pdr_leg_t *leg, const char *p, size_t n)
{
    pd_req_t *x = leg->data;
    x->last_data_ns = pdr_now_ns();
    if (x->ph.decode_first_byte_us == 0)
        x->ph.decode_first_byte_us = x->last_data_ns / 1000;
    if (x->dw != NULL && leg->status < 500)
        pdr_worker_note_alive(x->dw, x->last_data_ns);
    if (whole_answer(x)) {
        /* Held whole until it ends: past the limit the leg is aborted and the client receives a clean 502. */
        if (x->pending.len + n > (uint64_t)x->conf->limits.max_merge_bytes) {
            x->merge_overflow = 1;
            return 0;
        }
    } else if (x->pending.len >= (leg->status >= 400 ? PREFILL_BODY_CAP : HIGH_WATER)) {
        return PDR_LEG_PAUSE; /* an error body is read whole too, within its own cap */
    }
    if (pdr_buf_append(&x->pending, p, n,
                       whole_answer(x) ? (size_t)x->conf->limits.max_merge_bytes : PREFILL_BODY_CAP) != 0)
        return 0; /* aborts the transfer; on_done reports it */
    x->bytes_in += n;
    /* A decode produces its first token only from the KV: a stream's first token event, or any byte of
     * another answer (it is whole by then), ends the KV deadline. */
    if (x->kv_open && leg->status < 400 &&
        (strncmp(leg->content_type, "text/event-stream", 17) != 0 ||
         pdr_sse_count_tokens(&x->kv_sse, p, n) > 0))
        kv_arrived(x);
    if (x->started) {
        send_final_or_more(x);
    } else if (x->req != NULL) {
        /* The first bytes may unblock the response; decide on the next loop turn, outside the leg's
         * data callback. */
        uv_timer_start(&x->timer, on_kick, 0, 0);
    }
    return n;
}

static void decode_done(pdr_leg_t *leg, int err)
{
    pd_req_t *x = leg->data;
    x->d_done = 1;
    x->d_err = err;
    release_leg(x, 0);
    if (x->started && err != 0 && !x->final_sent) {
        /* The stream broke after the response started (or the router cancelled it at its drain
         * deadline, which is not counted against the worker): end it visibly. The prefill leg (still
         * running with pd.relay first_byte) is no longer of use. */
        x->broken = 1;
        if (x->kv_open && err != PDR_ECANCELED) /* before its first token: the KV never arrived */
            note_kv_failure(x, err == PDR_EPEERGONE ? PDR_KVC_PEER_GONE : PDR_KVC_DECODE_ERROR, NULL,
                            pdr_strerror(err));
        x->kv_open = 0;
        if (x->p_running) {
            pdr_leg_cancel(&x->pleg);
            release_leg(x, 1);
        }
        if (err == PDR_ECANCELED) {
            x->error_cause = "shutdown_cancelled";
        } else {
            x->error_cause = "decode_stream_broken";
            x->t->m.upstream_errors[PDR_ROLE_DECODE][cause_of(err)]++;
        }
        if (x->is_sse) {
            char ev[256];
            int k = snprintf(
                ev, sizeof(ev),
                "data: {\"error\":{\"message\":\"decode stream ended: %s\",\"type\":\"upstream_error\","
                "\"code\":502}}\n\n",
                pdr_strerror(err));
            pdr_buf_append(&x->pending, ev, (size_t)k, SIZE_MAX / 2);
            x->d_err = 0; /* end the SSE stream normally after the error event */
        }
    }
    advance(x);
    arm_timer(x);
}

static const pdr_leg_cbs_t prefill_cbs = {prefill_data, prefill_done};
static const pdr_leg_cbs_t decode_cbs = {decode_data, decode_done};

/* ---- timer: deadlines, idle stream, stalled client, h1 disconnect probe ---- */

static uint64_t idle_ns(const pd_req_t *x)
{
    return (uint64_t)x->to.stream_idle_ms * 1000000u;
}

/* Ends the response of a client that has not taken a send for stream_idle_ms (nginx's send_timeout): both
 * legs are cancelled and the client's connection is reset, which fails the write in flight, so h2o closes
 * the connection and disposes of the request. Over HTTP/2 this ends the other streams of that connection
 * too, as nginx's send_timeout does: a client that stopped reading has stalled them all, and one that
 * withholds a single stream's flow-control window is misbehaving. */
/* A pair's deadline passed with the prefill's answer missing. Which side went silent? The decode, when it
 * has answered nothing of this attempt and the prefill has answered other requests since the attempt
 * began (a frozen or stopped decode holds up the transfer: the prefill cannot push KV to a decode that
 * does not pull). The prefill, when the decode has begun its answer or has answered other requests while
 * the prefill answered none. Otherwise the deadline cannot be pinned on either (-1): neither is ejected
 * for it, both are avoided by the retry and health-checked out of turn, so that one frozen worker cannot
 * empty the other role. */
static int deadline_culprit(const pd_req_t *x)
{
    if (x->vllm) /* the decode starts only once the prefill has answered; then either may hold up the KV */
        return x->p_done ? -1 : PDR_ROLE_PREFILL;
    if (x->dleg.got_headers)
        return PDR_ROLE_PREFILL;
    int p_alive = x->pw != NULL && pdr_worker_alive_ns(x->pw) > x->attempt_t0_ns;
    int d_alive = x->dw != NULL && pdr_worker_alive_ns(x->dw) > x->attempt_t0_ns;
    if (p_alive && !d_alive)
        return PDR_ROLE_DECODE;
    if (d_alive && !p_alive)
        return PDR_ROLE_PREFILL;
    return -1;
}

/* How often an HTTP/1 client's progress is sampled while a send is in flight: an eighth of
 * stream_idle_ms (at least 10 ms), so a client that stops is cut within 1.125 x stream_idle_ms. */
static uint64_t sample_every_ns(const pd_req_t *x)
{
    uint64_t q = idle_ns(x) / 8;
    return q > 10000000u ? q : 10000000u;
}

static uint64_t progress_sample_due(const pd_req_t *x)
{
    return (x->sample_ns > x->send_ns ? x->sample_ns : x->send_ns) + sample_every_ns(x);
}

/* Whether an HTTP/1 client took bytes of the response since the last sample (a steady slow reader makes
 * progress inside one long send). HTTP/2 shares the socket among streams: its progress stays per send. */
static void sample_client_progress(pd_req_t *x, uint64_t now)
{
    x->sample_ns = now;
    h2o_socket_t *sock = x->req->conn->callbacks->get_socket(x->req->conn);
    uint64_t acked;
    if (sock == NULL || pdr_sock_bytes_acked(h2o_socket_get_fd(sock), &acked) != 0)
        return;
    if (x->acked_known && acked > x->acked)
        x->took_ns = now;
    x->acked = acked;
    x->acked_known = 1;
}

/* Since when the client has taken nothing: the send in flight's start, or its last progress. */
static uint64_t client_idle_since(const pd_req_t *x)
{
    return x->took_ns > x->send_ns ? x->took_ns : x->send_ns;
}

static int samples_progress(const pd_req_t *x)
{
    return x->send_inflight && x->req->version < 0x200;
}

static void cut_stalled_client(pd_req_t *x)
{
    h2o_req_t *req = x->req;
    x->t->m.client_stalled_total++;
    x->error_cause = "client_stalled";
    x->stopped = 1;
    cancel_legs(x);
    pdr_warn("request %s: the client took no data for %d ms (timeouts.stream_idle_ms): connection reset",
             x->request_id, x->to.stream_idle_ms);
    h2o_socket_t *sock = req->conn->callbacks->get_socket(req->conn);
    if (sock == NULL)
        return;
    /* SO_LINGER 0: the bytes queued for a client that does not read are dropped (an RST, not a FIN
     * behind them), so the kernel does not keep them either. */
    int fd = h2o_socket_get_fd(sock);
    struct linger lg = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    shutdown(fd, SHUT_RDWR);
}

/* The role whose worker restarted (its shim reported a new instance) since the attempt began, or -1. Its
 * KV for this request is gone with the old process: waiting for it would last until a deadline. */
static int restarted_role(const pd_req_t *x)
{
    if (x->p_running && x->pw != NULL && __atomic_load_n(&x->pw->load.epoch, __ATOMIC_RELAXED) != x->p_epoch)
        return PDR_ROLE_PREFILL;
    if (x->d_running && x->dw != NULL && __atomic_load_n(&x->dw->load.epoch, __ATOMIC_RELAXED) != x->d_epoch)
        return PDR_ROLE_DECODE;
    return -1;
}

/* Whether a worker of the attempt reports through its shim (then its restarts are looked for). */
static int reports(const pd_req_t *x)
{
    return (x->pw != NULL && __atomic_load_n(&x->pw->load.report_ms, __ATOMIC_RELAXED) != 0) ||
           (x->dw != NULL && __atomic_load_n(&x->dw->load.report_ms, __ATOMIC_RELAXED) != 0);
}

/* A KV failure after the client's answer began: nothing can be retried. Both legs are cancelled and the
 * answer ends visibly: a stream with an error event then its normal end, another answer aborted (its body
 * is cut short, which the client sees as a broken response). */
static void kv_failed_in_response(pd_req_t *x, pdr_kv_cause_t cause, const char *backend, const char *why)
{
    note_kv_failure(x, cause, backend, why);
    x->t->m.upstream_errors[PDR_ROLE_PREFILL]
                           [cause == PDR_KVC_DEADLINE ? PDR_CAUSE_KV_DEADLINE : PDR_CAUSE_OTHER]++;
    x->broken = 1;
    x->error_cause = cause == PDR_KVC_DEADLINE ? "kv_transfer_deadline" : "kv_transfer_failed";
    cancel_legs(x);
    x->p_done = x->d_done = 1;
    if (x->is_sse) {
        char ev[400];
        int k =
            snprintf(ev, sizeof(ev), "data: {\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"code\":%d}}\n\n",
                     why, cause == PDR_KVC_DEADLINE ? "timeout_error" : "upstream_error",
                     cause == PDR_KVC_DEADLINE ? 504 : 502);
        if (k > 0 && (size_t)k < sizeof(ev))
            pdr_buf_append(&x->pending, ev, (size_t)k, SIZE_MAX / 2);
        x->d_err = 0;
    } else {
        x->d_err = cause == PDR_KVC_DEADLINE ? PDR_ETIMEDOUT : PDR_EIO;
    }
    send_final_or_more(x);
}

/* Whether an HTTP/1 client closed its connection: h2o reads nothing from it while a handler is pending
 * or while a response has no write in flight, so nothing else would tell. */
static int h1_client_closed(pd_req_t *x)
{
    if (x->req->version >= 0x200)
        return 0;
    h2o_socket_t *sock = x->req->conn->callbacks->get_socket(x->req->conn);
    char c;
    return sock != NULL && recv(h2o_socket_get_fd(sock), &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* Whether the client's connection is probed for a close: HTTP/1, response started, nothing being
 * written (a write in flight shows a close by failing), the decode still read. A decode stream that
 * gives the client nothing (an event without its end, held for the logprob merge) is not read on for a
 * client that left. */
static int probe_started_client(const pd_req_t *x)
{
    return x->started && x->req->version < 0x200 && !x->send_inflight && !x->final_sent && x->d_running;
}

static void on_timer(uv_timer_t *t)
{
    pd_req_t *x = t->data;
    if (x->req == NULL || x->stopped) /* stopped: both legs are cancelled already */
        return;
    uint64_t now = pdr_now_ns();
    if (x->recheck && !x->started) {
        x->recheck = 0;
        advance(x);
        if (x->req == NULL || x->stopped)
            return;
    }
    if (x->started && samples_progress(x) && now >= progress_sample_due(x))
        sample_client_progress(x, now);
    if (probe_started_client(x) && h1_client_closed(x)) {
        note_client_abort(x);
        x->stopped = 1;
        cancel_legs(x);
        x->final_sent = 1;
        x->end_ns = now;
        h2o_send(x->req, NULL, 0, H2O_SEND_STATE_ERROR);
        return;
    }
    if (!x->started) {
        if (h1_client_closed(x)) {
            /* HTTP/1 client closed while we wait for the workers (h2o does not read it meanwhile). */
            note_client_abort(x);
            x->status = 499;
            cancel_legs(x);
            x->stopped = 1;
            mark_started(x, 0);
            h2o_send_error_502(x->req, "Bad Gateway", "client closed", H2O_SEND_ERROR_HTTP1_CLOSE_CONNECTION);
            return;
        }
        if (x->backoff_ns != 0) {
            /* Waiting out a retry's back-off: no leg runs, so a shutdown's cancellation of the legs in
             * flight cannot reach the request; it is looked for here. */
            int stopping = pdr_router_shutting_down(x->r);
            if (now < x->backoff_ns && !stopping) {
                arm_timer(x);
                return;
            }
            x->backoff_ns = 0;
            if (stopping)
                fail_last(x);
            else
                start_attempt(x);
            return;
        }
        int gone = x->mode == MODE_PD ? restarted_role(x) : -1;
        if (gone >= 0) {
            attempt_failed(x, gone, PDR_CAUSE_RESET, 503,
                           "the worker restarted (a new shim instance): its KV for this request is gone");
            return;
        }
        if (x->mode == MODE_PD && (x->kv_open || !x->p_done) && now >= x->kv_deadline_ns) {
            if (x->kv_open)
                snprintf(x->kv_msg, sizeof(x->kv_msg),
                         "the KV transfer did not finish within its deadline of %" PRIu64
                         " ms (timeouts.kv_transfer_ms)",
                         x->kv_ms);
            else
                snprintf(x->kv_msg, sizeof(x->kv_msg),
                         "the prefill did not answer within %" PRIu64
                         " ms (timeouts.kv_transfer_ms; its KV had arrived)",
                         x->kv_ms);
            attempt_failed(x, deadline_culprit(x), PDR_CAUSE_KV_DEADLINE, 504, x->kv_msg);
            return;
        }
        if (now >= x->first_byte_deadline_ns) {
            attempt_failed(x, x->mode == MODE_PD && !x->p_done ? deadline_culprit(x) : PDR_ROLE_DECODE,
                           PDR_CAUSE_FIRST_BYTE_DEADLINE, 504, "no first byte within timeouts.first_byte_ms");
            return;
        }
    } else if (x->kv_open && now >= x->kv_deadline_ns) {
        /* The client has bytes of the answer (a stream's head), but the decode's first token has not come:
         * the KV never arrived. */
        snprintf(x->kv_msg, sizeof(x->kv_msg),
                 "the KV transfer did not finish within its deadline of %" PRIu64
                 " ms (timeouts.kv_transfer_ms)",
                 x->kv_ms);
        kv_failed_in_response(x, PDR_KVC_DEADLINE, NULL, x->kv_msg);
        return;
    } else if (x->p_running && now >= x->kv_deadline_ns) {
        /* pd.relay first_byte: the prefill still has not answered; the decode's answer goes on. */
        pdr_leg_cancel(&x->pleg);
        release_leg(x, 1);
        x->p_done = 1;
        x->p_err = PDR_ETIMEDOUT;
        late_prefill_failure(x, PDR_CAUSE_KV_DEADLINE, "no answer within timeouts.kv_transfer_ms");
    } else if (x->send_inflight && now - client_idle_since(x) >= idle_ns(x)) {
        cut_stalled_client(x);
        return;
    } else if (x->d_running && !x->dleg.paused && now - x->last_data_ns >= idle_ns(x)) {
        x->t->m.upstream_errors[PDR_ROLE_DECODE][PDR_CAUSE_TIMEOUT]++;
        pdr_leg_cancel(&x->dleg);
        release_leg(x, 0);
        decode_done(&x->dleg, PDR_ETIMEDOUT);
        return;
    }
    arm_timer(x);
}

/* The next deadline of a request, or 0 when it has none. Every deadline armed here is one that on_timer
 * acts on once it has passed, so the timer cannot find a passed deadline and re-arm for it. */
static uint64_t next_deadline(const pd_req_t *x, uint64_t now)
{
    uint64_t next = 0;
    if (!x->started && x->backoff_ns != 0) {
        /* The next attempt; meanwhile an HTTP/1 client's close and a shutdown are looked for. */
        next = x->backoff_ns;
        if (now + PEEK_INTERVAL_MS * 1000000ull < next)
            next = now + PEEK_INTERVAL_MS * 1000000ull;
        return next;
    }
    if (!x->started) {
        next = x->first_byte_deadline_ns;
        if (x->mode == MODE_PD && (x->kv_open || !x->p_done) && x->kv_deadline_ns < next)
            next = x->kv_deadline_ns;
        if (x->req->version < 0x200 && now + PEEK_INTERVAL_MS * 1000000ull < next)
            next = now + PEEK_INTERVAL_MS * 1000000ull;
        if (x->recheck && now + 1000000ull < next)
            next = now + 1000000ull;
        if (x->mode == MODE_PD && reports(x) && now + PEEK_INTERVAL_MS * 1000000ull < next)
            next = now + PEEK_INTERVAL_MS * 1000000ull; /* a restart of a worker is looked for as often */
        return next;
    }
    /* The client's side: a send it has taken nothing of for stream_idle_ms (it stopped reading); an
     * HTTP/1 client's progress sampled meanwhile. */
    if (x->send_inflight)
        next = client_idle_since(x) + idle_ns(x);
    if (samples_progress(x) && progress_sample_due(x) < next)
        next = progress_sample_due(x);
    /* The prefill's answer, still to come after the decode's first byte (pd.relay first_byte); or the KV,
     * not known to have arrived yet though the client's answer began. */
    if ((x->p_running || x->kv_open) && (next == 0 || x->kv_deadline_ns < next))
        next = x->kv_deadline_ns;
    /* The decode's side: silence while the router is ready for its bytes (not paused by the client). */
    if (x->d_running && !x->dleg.paused) {
        uint64_t d = x->last_data_ns + idle_ns(x);
        if (next == 0 || d < next)
            next = d;
    }
    if (probe_started_client(x) && (next == 0 || now + PEEK_INTERVAL_MS * 1000000ull < next))
        next = now + PEEK_INTERVAL_MS * 1000000ull;
    return next;
}

static void arm_timer(pd_req_t *x)
{
    if (x->req == NULL || x->final_sent || x->stopped)
        return;
    uint64_t now = pdr_now_ns(), next = next_deadline(x, now);
    if (next == 0) {
        uv_timer_stop(&x->timer);
        return;
    }
    /* At least 1 ms: libuv runs a 0 ms timer started from a timer callback again in the same pass, so a
     * deadline that on_timer did not act on would keep the loop from ever polling again. */
    uint64_t ms = next > now ? (next - now + 999999) / 1000000 : 1;
    uv_timer_start(&x->timer, on_timer, ms ? ms : 1, 0);
}

/* ---- attempts ---- */

/* What cache_aware matches on: the raw JSON of the prompt member ("text", "prompt", "messages" or
 * "input_ids"), exactly as the client sent it, so that requests sharing a system prompt or a
 * conversation's start share a prefix. NULL when the body has none. */
static const char *routing_text(const pdr_pdreq_t *pr, size_t *len)
{
    static const char *const keys[] = {"text", "prompt", "messages", "input_ids"};
    for (size_t i = 0; i < pr->n; i++)
        for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
            if (pr->m[i].key_len == strlen(keys[k]) && memcmp(pr->m[i].key, keys[k], pr->m[i].key_len) == 0) {
                *len = pr->m[i].v.len;
                return pr->m[i].v.p;
            }
    return NULL;
}

/* ---- data-parallel attention ranks ---- */

/* The header lines of a leg to w: the request's (pdr_fwd_leg), and for protocol vllm with w one rank of a
 * data-parallel worker "X-data-parallel-rank: R" (vLLM's API server hands the request to that rank's
 * engine). sglang takes the rank in the body instead (pdr_pdreq_build_body_rank). */
static const char *const *leg_headers(pd_req_t *x, const pdr_worker_t *w)
{
    const char *const *base = pdr_fwd_leg(&x->fwd);
    if (!x->vllm || w == NULL || w->dp_rank < 0)
        return base;
    size_t k = 0;
    for (; base[k] != NULL && k < 2; k++)
        x->rank_hdrs[k] = base[k];
    snprintf(x->rank_line, sizeof(x->rank_line), "X-data-parallel-rank: %d", w->dp_rank);
    x->rank_hdrs[k++] = x->rank_line;
    x->rank_hdrs[k] = NULL;
    return x->rank_hdrs;
}

/* sglang: the room of a prefill rank. A prefill with dp_size N sends a request to rank room % N unless the
 * request names one ("follow_bootstrap_room", its default in PD mode), and a decode finds the prefill rank
 * that holds the KV the same way, so the room is made to agree with the rank the router chose: its value
 * modulo N is the rank (the rest of it stays random). */
static uint64_t room_for_rank(uint64_t room, const pdr_worker_t *pw)
{
    if (pw == NULL || pw->dp_rank < 0)
        return room;
    uint64_t n = (uint64_t)pw->conf.dp_size, r = room - room % n + (uint64_t)pw->dp_rank;
    return r > ((1ull << 63) - 1) ? r - n : r;
}

/* ---- conditional disaggregation (disagg.h) ---- */

/* The feature is on and something can run the request alone: with protocol vllm the decode; with sglang
 * a regular worker of the pool (a decode-mode sglang server cannot prefill), so without regular workers
 * sglang requests are always disaggregated. */
static int disagg_possible(const pd_req_t *x)
{
    if (!pdr_disagg_enabled(x->conf))
        return 0;
    if (x->protocol == PDR_PROTO_VLLM)
        return 1;
    return x->protocol == PDR_PROTO_SGLANG &&
           pdr_pool_count_healthy_in(&x->r->pool, x->pool, PDR_ROLE_REGULAR) > 0;
}

/* Picks the prefill without recording the prompt in its cache_aware tree, decides from the prefix it holds
 * and the prefills' load, and either keeps that prefill (recording the prompt now) or lets it go: the
 * attempt is solo. */
static void decide_disaggregation(pd_req_t *x, const char *text, size_t tlen, const pdr_prompt_tokens_t *tok)
{
    pdr_router_t *r = x->r;
    pdr_pick_info_t info = {.record = 0, .tok = tok};
    x->pw = pdr_pool_pick_info(&r->pool, x->pool, PDR_ROLE_PREFILL, x->tried[PDR_ROLE_PREFILL],
                               x->n_tried[PDR_ROLE_PREFILL], text, tlen, &info);
    if (x->pw == NULL)
        return; /* no serving prefill: answered as without the feature */
    pdr_disagg_input_t in;
    if (info.matched_known && info.tokens) { /* a policy that counts tokens itself */
        memset(&in, 0, sizeof(in));
        in.tokens = 1;
        in.length = info.prompt_tokens;
        in.matched = info.matched;
    } else {
        pdr_disagg_measure(text, tlen, info.matched_known ? info.matched : 0, &in);
    }
    const pdr_config_t *c = x->conf;
    if (c->disaggregation.skip_when_prefill_saturated)
        in.prefill_saturated = pdr_pool_saturated(&r->pool, x->pool, PDR_ROLE_PREFILL,
                                                  c->disaggregation.prefill_saturated_inflight);
    x->disagg = (int)pdr_disagg_decide(c, &in);
    x->t->m.disagg_decisions[x->disagg]++;
    if (x->disagg == PDR_DISAGG_DISAGGREGATED) {
        if (info.matched_known)
            pdr_pool_record_pick(&r->pool, x->pw, text, tlen);
        return;
    }
    pdr_worker_unref(x->pw);
    x->pw = NULL;
    x->solo = 1;
    x->merge = 0; /* one worker answers the whole request, input logprobs included */
}

/* A solo attempt: one leg, the client's body without any PD field, to the worker that runs it all. The
 * prefill counts as done, so advance() treats the leg as a decode whose prefill succeeded. */
static void start_solo(pd_req_t *x)
{
    free(x->body);
    x->body = pdr_pdreq_build_plain(&x->pr, x->vllm ? -1 : x->dw->dp_rank, &x->body_len);
    if (x->body == NULL) {
        fail_response(x, 503, "service_unavailable", "out of memory", 1);
        return;
    }
    memset(&x->pleg, 0, sizeof(x->pleg));
    x->p_done = 1;
    char url[512];
    static const char *paths[] = {"/generate", "/v1/completions", "/v1/chat/completions"};
    pdr_join2(url, sizeof(url), x->dw->conf.url, paths[x->route]);
    if (pdr_leg_start(&x->dleg, x->t->multi, url, x->body, x->body_len, leg_headers(x, x->dw),
                      x->to.connect_ms, 0, &decode_cbs, x) != 0) {
        fail_response(x, 503, "service_unavailable", "cannot start upstream requests", 1);
        return;
    }
    memcpy(x->d_span, x->fwd.last_span, 8);
    x->ph.solo = 1;
    x->d_running = 1;
    pdr_worker_track(x->dw, 1);
    arm_timer(x);
}

/* The attempt's rooms but the first, taken back from the shims' table (the first one's events go to the
 * access log). */
static void take_other_rooms(pd_req_t *x)
{
    char skip[8];
    for (size_t i = 1; i < x->n_rooms; i++)
        pdr_shim_room_take(x->r, x->rooms[i], skip, sizeof(skip));
}

/* The shims' events for the attempt's rooms: forgotten (a retry takes new rooms). */
static void forget_room(pd_req_t *x)
{
    if (x->room_open) {
        char skip[8];
        pdr_shim_room_take(x->r, x->rooms[0], skip, sizeof(skip));
        take_other_rooms(x);
        x->room_open = 0;
    }
}

static void on_admit_retry(uv_timer_t *h)
{
    pd_req_t *x = h->data;
    if (x->req != NULL)
        start_attempt(x);
}

/* Decode admission (kv_admission): 1 to go on with x->dw, its KV held in x->kv_hold; 0 when the request
 * waits for room (a timer runs the attempt again, polling every ADMIT_POLL_MS) or was answered 503. */
#define ADMIT_POLL_MS 5
#define ADMIT_MAX_PICKS 8
static int admit_decode(pd_req_t *x, const char *text, size_t tlen)
{
    pdr_router_t *r = x->r;
    if (!pdr_kv_limited(x->conf, x->dw))
        return 1; /* the usual case without reports: nothing to estimate */
    if (x->kv_need == 0) {
        pdr_prompt_tokens_t tok = {NULL, 0};
        struct pdr_tokenizer *tk = pdr_router_tokenizer(r);
        pdr_request_token_ids_or(&x->pr, tk, &tok, PDR_FB_TOKENIZE_KV_ADMISSION);
        pdr_tokenizer_free(tk);
        x->kv_need = pdr_kv_need_tokens(x->conf, &x->pr, tok.n, tlen);
        free(tok.ids);
    }
    uint64_t avoid[PDR_MAX_TRIED + ADMIT_MAX_PICKS];
    size_t n = x->n_tried[PDR_ROLE_DECODE];
    memcpy(avoid, x->tried[PDR_ROLE_DECODE], n * sizeof(avoid[0]));
    int never = 1; /* every decode tried has less KV in all than the request needs */
    for (int k = 0; k < ADMIT_MAX_PICKS; k++) {
        int fit = pdr_kv_admit(x->conf, x->dw, x->kv_need, &x->kv_hold);
        if (fit > 0) {
            pdr_kv_count(x->admit_waited ? 2 : k > 0 ? 1 : 0);
            return 1;
        }
        never &= fit < 0;
        avoid[n++] = x->dw->uid;
        pdr_worker_t *o =
            pdr_pool_pick_prompt(&r->pool, x->pool, PDR_ROLE_DECODE, avoid, n, text, tlen, NULL);
        int seen = 0;
        for (size_t i = 0; o != NULL && i < n; i++)
            seen |= avoid[i] == o->uid;
        if (o == NULL || seen) {
            pdr_worker_unref(o);
            break;
        }
        pdr_worker_unref(x->dw);
        x->dw = o;
    }
    if (never) {
        /* Waiting cannot help: no decode tried could hold it even empty. */
        pdr_kv_count(3);
        x->error_cause = "kv_too_large";
        fail_response(x, 400, "invalid_request_error",
                      "the request's KV cache need (prompt and output tokens) exceeds the whole KV cache of "
                      "every decode worker (kv_admission)",
                      0);
        return 0;
    }
    uint64_t now = pdr_now_ns();
    if (x->admit_deadline_ns == 0) {
        uint64_t ms = (uint64_t)x->conf->kv_admission.wait_ms;
        if (ms > (uint64_t)x->to.first_byte_ms)
            ms = (uint64_t)x->to.first_byte_ms;
        x->admit_deadline_ns = now + ms * 1000000u;
    }
    if (now < x->admit_deadline_ns) {
        x->admit_waited = 1;
        uv_timer_start(&x->timer, on_admit_retry, ADMIT_POLL_MS, 0);
        return 0;
    }
    pdr_kv_count(3);
    x->error_cause = "kv_capacity";
    fail_response(x, 503, "service_unavailable",
                  "no decode worker has room for the request's KV cache (kv_admission); retry later", 1);
    return 0;
}

/* The pair-aware breaker (breaker.h): when the picked pair's link is open, another decode for the prefill,
 * else another prefill with a decode of its own, is picked (BREAKER_MAX_PICKS of each at most, avoiding the
 * workers that failed this request). When every pairing tried is open, the least recently failed one goes:
 * the breaker alone never refuses a request. */
#define BREAKER_MAX_PICKS 8
static int uid_in(const uint64_t *a, size_t n, uint64_t uid)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] == uid)
            return 1;
    return 0;
}

static void breaker_pick(pd_req_t *x, const char *text, size_t tlen, const pdr_prompt_tokens_t *tok)
{
    uint64_t last;
    if (!x->conf->breaker.enabled || x->pw == NULL || x->dw == NULL ||
        pdr_links_admit(x->pw, x->dw, 1, &last))
        return;
    pdr_breaker_count_avoided();
    pdr_pool_t *pool = &x->r->pool;
    pdr_worker_t *bp = x->pw, *bd = x->dw;   /* the least recently failed pairing seen (owned) */
    pdr_worker_t *p = pdr_worker_ref(x->pw); /* the prefill whose decodes are tried (owned) */
    x->pw = x->dw = NULL;
    uint64_t pav[PDR_MAX_TRIED + BREAKER_MAX_PICKS], dav[PDR_MAX_TRIED + BREAKER_MAX_PICKS + 1];
    size_t np = x->n_tried[PDR_ROLE_PREFILL];
    memcpy(pav, x->tried[PDR_ROLE_PREFILL], np * sizeof(pav[0]));
    for (int i = 0; i < BREAKER_MAX_PICKS && p != NULL; i++) {
        size_t nd = x->n_tried[PDR_ROLE_DECODE];
        memcpy(dav, x->tried[PDR_ROLE_DECODE], nd * sizeof(dav[0]));
        if (p == bp)
            dav[nd++] = bd->uid;
        for (int j = 0; j < BREAKER_MAX_PICKS; j++) {
            pdr_worker_t *d = pdr_pool_pick_prompt(pool, x->pool, PDR_ROLE_DECODE, dav, nd, text, tlen, tok);
            if (d == NULL || uid_in(dav, nd, d->uid)) {
                pdr_worker_unref(d);
                break;
            }
            uint64_t lf;
            if (pdr_links_admit(p, d, 1, &lf)) {
                pdr_worker_unref(bp);
                pdr_worker_unref(bd);
                x->pw = p;
                x->dw = d;
                return;
            }
            if (lf < last) {
                pdr_worker_unref(bp);
                pdr_worker_unref(bd);
                bp = pdr_worker_ref(p);
                bd = d;
                last = lf;
            } else {
                pdr_worker_unref(d);
            }
            dav[nd++] = d->uid;
        }
        pav[np++] = p->uid;
        pdr_worker_unref(p);
        p = pdr_pool_pick_prompt(pool, x->pool, PDR_ROLE_PREFILL, pav, np, text, tlen, tok);
        if (p != NULL && uid_in(pav, np, p->uid)) {
            pdr_worker_unref(p);
            p = NULL;
        }
    }
    pdr_worker_unref(p);
    pdr_breaker_count_all_open();
    (void)pdr_links_admit(bp, bd, 1, NULL); /* a half-open link's probe, if it is free */
    pdr_warn("request %s: every pairing tried has its breaker open: prefill %s -> decode %s (the least "
             "recently failed) is used",
             x->request_id, bp->target, bd->target);
    x->pw = bp;
    x->dw = bd;
}

static void start_attempt(pd_req_t *x)
{
    pdr_router_t *r = x->r;
    x->p_done = x->d_done = 0;
    x->recheck = 0;
    x->d_failed_ns = 0;
    x->p_failed_ns = 0;
    x->kv_open = 0;
    x->p_err = x->d_err = 0;
    x->pbody.len = 0;
    x->pending.len = 0;
    x->p_truncated = 0;
    pdr_kv_release(&x->kv_hold);
    forget_room(x);
    pdr_worker_unref(x->pw);
    pdr_worker_unref(x->dw);
    x->pw = x->dw = NULL;
    size_t tlen = 0;
    const char *text = x->mode == MODE_PD ? routing_text(&x->pr, &tlen) : NULL;
    /* precise_prefix matches token ids: only read them when some pool uses it (the index exists). */
    pdr_prompt_tokens_t tok = {NULL, 0};
    if (text != NULL && r->pool.kvindex != NULL) {
        struct pdr_tokenizer *tk = pdr_router_tokenizer(r);
        pdr_request_token_ids_or(&x->pr, tk, &tok, PDR_FB_TOKENIZE_ROUTING);
        pdr_tokenizer_free(tk);
    }
    x->solo = 0;
    x->merge = x->merge_wanted;
    if (x->mode == MODE_PD && disagg_possible(x)) {
        decide_disaggregation(x, text, tlen, &tok);
    } else if (x->mode == MODE_PD) {
        uint64_t avoid[PDR_MAX_AVOID];
        size_t n = pdr_admit_avoid(x->conf, &r->pool, x->pool, PDR_ROLE_PREFILL, x->tried[PDR_ROLE_PREFILL],
                                   x->n_tried[PDR_ROLE_PREFILL], avoid, PDR_MAX_AVOID);
        x->pw = pdr_pool_pick_prompt(&r->pool, x->pool, PDR_ROLE_PREFILL, avoid, n, text, tlen, &tok);
    }
    /* The decode; or, for a solo sglang attempt, the regular worker that runs it all (in dw: it is the
     * worker that answers, blamed and avoided as a decode would be). Workers at
     * limits.max_inflight_per_worker are avoided as failed ones are. */
    pdr_role_t drole = x->solo && !x->vllm ? PDR_ROLE_REGULAR : PDR_ROLE_DECODE;
    uint64_t davoid[PDR_MAX_AVOID];
    size_t dn = pdr_admit_avoid(x->conf, &r->pool, x->pool, drole, x->tried[PDR_ROLE_DECODE],
                                x->n_tried[PDR_ROLE_DECODE], davoid, PDR_MAX_AVOID);
    x->dw = pdr_pool_pick_prompt(&r->pool, x->pool, drole, davoid, dn, text, tlen, &tok);
    if (x->mode == MODE_PD && !x->solo)
        breaker_pick(x, text, tlen, &tok);
    free(tok.ids);
    if (x->mode == MODE_PD && x->dw != NULL && x->pw != NULL && !x->solo && !admit_decode(x, text, tlen))
        return;
    if ((x->mode == MODE_PD && x->pw == NULL && !x->solo) || x->dw == NULL) {
        if (x->attempt > 0) {
            /* The pair that failed was the last healthy one: answer with that failure. */
            fail_last(x);
            return;
        }
        pdr_role_t role =
            x->mode == MODE_PD && x->pw == NULL && !x->solo ? PDR_ROLE_PREFILL : PDR_ROLE_DECODE;
        x->t->m.no_worker_total[role]++;
        pdr_role_t named = x->solo && !x->vllm ? PDR_ROLE_REGULAR : role;
        char msg[128];
        if (x->conf->n_pools > 0)
            snprintf(msg, sizeof(msg), "no healthy %s worker is available in pool %s", pdr_role_name(named),
                     x->pool);
        else
            snprintf(msg, sizeof(msg), "no healthy %s worker is available", pdr_role_name(named));
        x->error_cause = "no_healthy_worker";
        fail_response(x, 503, "service_unavailable", msg, 1);
        return;
    }
    x->p_epoch = x->pw != NULL ? __atomic_load_n(&x->pw->load.epoch, __ATOMIC_RELAXED) : 0;
    x->d_epoch = __atomic_load_n(&x->dw->load.epoch, __ATOMIC_RELAXED);
    x->attempt_t0_ns = pdr_now_ns();
    pdr_phase_attempt(&x->ph);
    x->ph.sent_us = x->attempt_t0_ns / 1000; /* the pair is picked; its first leg goes out now */
    x->first_byte_deadline_ns = x->attempt_t0_ns + (uint64_t)x->to.first_byte_ms * 1000000u;
    x->kv_deadline_ns = x->attempt_t0_ns + x->kv_ms * 1000000u;
    char url[512];
    if (x->mode == MODE_MODELS) {
        snprintf(url, sizeof(url), "%s/v1/models", x->dw->conf.url);
        if (pdr_leg_start(&x->dleg, x->t->multi, url, NULL, 0, pdr_fwd_leg(&x->fwd), x->to.connect_ms, 0,
                          &decode_cbs, x) != 0) {
            fail_response(x, 503, "service_unavailable", "out of memory", 1);
            return;
        }
        x->d_running = 1;
        pdr_worker_track(x->dw, 1);
        arm_timer(x);
        return;
    }
    if (x->solo) {
        start_solo(x);
        return;
    }
    if (x->vllm) {
        vllm_start_prefill(x);
        return;
    }
    /* A fresh CSPRNG room per item and per attempt; the same rooms go to both legs. */
    for (size_t i = 0; i < x->n_rooms; i++)
        x->rooms[i] = room_for_rank(pdr_random_room(), x->pw);
    for (size_t i = 0; i < x->n_rooms; i++)
        pdr_shim_room_own(r, x->rooms[i], x->t, x); /* done and failed come back on this loop */
    x->room_open = 1;
    free(x->body);
    free(x->dbody);
    x->dbody = NULL;
    /* protocol pdshim: a signed ticket per room (tickets.h), the same in both legs. */
    char **tickets = NULL;
    if (x->protocol == PDR_PROTO_PDSHIM) {
        char terr[256];
        int oom;
        tickets = pdr_tickets_sign(x->conf, x->pw, x->dw, x->rooms, x->n_rooms, &oom, terr, sizeof(terr));
        if (tickets == NULL) {
            x->error_cause = oom ? "out_of_memory" : "ticket";
            fail_response(x, oom ? 503 : 500, oom ? "service_unavailable" : "internal_error", terr, oom);
            return;
        }
        x->t->m.tickets_signed_total += x->n_rooms;
    }
    const char *const *tk = (const char *const *)tickets;
    x->body = pdr_pdreq_build_body_ticket(&x->pr, x->pw->bootstrap_host, x->pw->conf.bootstrap_port, x->rooms,
                                          x->pw->dp_rank, tk, &x->body_len);
    /* Each leg names its own worker's rank: the decode's rank is its own choice (it finds the prefill's
     * rank from the room). Without ranks both legs share one body. */
    if (x->body != NULL && (x->pw->dp_rank >= 0 || x->dw->dp_rank >= 0)) {
        x->dbody = pdr_pdreq_build_body_ticket(&x->pr, x->pw->bootstrap_host, x->pw->conf.bootstrap_port,
                                               x->rooms, x->dw->dp_rank, tk, &x->dbody_len);
        if (x->dbody == NULL) {
            free(x->body);
            x->body = NULL;
        }
    }
    free(tickets);
    if (x->body == NULL) {
        fail_response(x, 503, "service_unavailable", "out of memory", 1);
        return;
    }
    static const char *paths[] = {"/generate", "/v1/completions", "/v1/chat/completions"};
    pdr_join2(url, sizeof(url), x->pw->conf.url, paths[x->route]);
    int rc = pdr_leg_start(&x->pleg, x->t->multi, url, x->body, x->body_len, pdr_fwd_leg(&x->fwd),
                           x->to.connect_ms, 0, &prefill_cbs, x);
    memcpy(x->p_span, x->fwd.last_span, 8);
    if (rc == 0) {
        x->p_running = 1;
        pdr_worker_track(x->pw, 1);
        pdr_join2(url, sizeof(url), x->dw->conf.url, paths[x->route]);
        rc = pdr_leg_start(&x->dleg, x->t->multi, url, x->dbody ? x->dbody : x->body,
                           x->dbody ? x->dbody_len : x->body_len, pdr_fwd_leg(&x->fwd), x->to.connect_ms, 0,
                           &decode_cbs, x);
        memcpy(x->d_span, x->fwd.last_span, 8);
        if (rc == 0) {
            x->d_running = 1;
            pdr_worker_track(x->dw, 1);
        }
    }
    if (rc != 0) {
        fail_response(x, 503, "service_unavailable", "cannot start upstream requests", 1);
        return;
    }
    /* Both legs are sent: the KV deadline runs. */
    x->kv_open = 1;
    x->kv_rooms_done = 0;
    if (x->kv_room_done != NULL)
        memset(x->kv_room_done, 0, x->n_rooms);
    memset(&x->kv_sse, 0, sizeof(x->kv_sse));
    arm_timer(x);
}

/* ---- protocol vllm: the prefill alone, then the decode (pd_vllm.h) ---- */

static const char *const route_paths[] = {"/generate", "/v1/completions", "/v1/chat/completions"};

/* The attempt's first leg: the prefill, with the body that asks it to keep its KV for a remote decode. */
static void vllm_start_prefill(pd_req_t *x)
{
    free(x->body);
    free(x->dbody);
    x->dbody = NULL;
    x->vllm_bad = 0;
    memset(&x->dleg, 0, sizeof(x->dleg)); /* no decode leg in this attempt yet */
    x->body = pdr_pdreq_build_vllm(&x->pr, PDR_VLLM_PREFILL, NULL, 0, &x->body_len);
    if (x->body == NULL) {
        fail_response(x, 503, "service_unavailable", "out of memory", 1);
        return;
    }
    char url[512];
    pdr_join2(url, sizeof(url), x->pw->conf.url, route_paths[x->route]);
    if (pdr_leg_start(&x->pleg, x->t->multi, url, x->body, x->body_len, leg_headers(x, x->pw),
                      x->to.connect_ms, 0, &prefill_cbs, x) != 0) {
        fail_response(x, 503, "service_unavailable", "cannot start upstream requests", 1);
        return;
    }
    memcpy(x->p_span, x->fwd.last_span, 8);
    x->p_running = 1;
    pdr_worker_track(x->pw, 1);
    arm_timer(x);
}

/* The prefill answered 2xx: its kv_transfer_params go to the decode with the client's body. An answer
 * without them fails the attempt as a prefill failure (advance() retries or answers 502). */
static void vllm_start_decode(pd_req_t *x)
{
    pdr_vllm_next_t next;
    if (x->req == NULL || x->p_truncated ||
        pdr__vllm_next(&x->pr, x->pbody.p ? x->pbody.p : "", x->pbody.len, &next, x->vllm_err,
                       sizeof(x->vllm_err)) != 0) {
        if (x->p_truncated)
            snprintf(x->vllm_err, sizeof(x->vllm_err), "the prefill's answer exceeds 64 MiB");
        x->vllm_bad = 1;
        return;
    }
    x->dbody = next.decode;
    x->dbody_len = next.decode_len;
    x->release = next.release; /* the prefill holds KV for this request from now on */
    x->release_len = next.release_len;
    char url[512];
    pdr_join2(url, sizeof(url), x->dw->conf.url, route_paths[x->route]);
    if (pdr_leg_start(&x->dleg, x->t->multi, url, x->dbody, x->dbody_len, leg_headers(x, x->dw),
                      x->to.connect_ms, 0, &decode_cbs, x) != 0) {
        x->dleg.got_headers = 0;
        fail_response(x, 503, "service_unavailable", "cannot start upstream requests", 1);
        return;
    }
    memcpy(x->d_span, x->fwd.last_span, 8);
    x->d_running = 1;
    pdr_worker_track(x->dw, 1);
    /* The decode pulls the KV now: the KV deadline runs from here. */
    x->kv_open = 1;
    memset(&x->kv_sse, 0, sizeof(x->kv_sse));
    x->kv_deadline_ns = pdr_now_ns() + x->kv_ms * 1000000u;
}

/* The request lets go of the decode (client gone, attempt failed, response over). KV the prefill holds for
 * a decode that has not answered a byte yet would stay there until vLLM's abort timeout: a release leg
 * has a decode read it, the same one unless this request just blamed it (any decode can read the KV).
 * A decode that has begun a successful answer has read it already. */
static void vllm_release_kv(pd_req_t *x)
{
    char *body = x->release;
    x->release = NULL;
    if ((x->dleg.bytes_in > 0 && x->dleg.status < 400) || x->dw == NULL) {
        free(body);
        return;
    }
    pdr_worker_t *w = x->dw, *other = NULL;
    for (size_t i = 0; i < x->n_tried[PDR_ROLE_DECODE]; i++)
        if (x->tried[PDR_ROLE_DECODE][i] == x->dw->uid) {
            other = pdr_pool_pick(&x->r->pool, x->pool, PDR_ROLE_DECODE, x->tried[PDR_ROLE_DECODE],
                                  x->n_tried[PDR_ROLE_DECODE]);
            if (other != NULL)
                w = other;
            break;
        }
    char url[512];
    pdr_join2(url, sizeof(url), w->conf.url, route_paths[x->route]);
    const char *const *hdrs = leg_headers(x, w);
    pdr_worker_unref(other);
    pdr__vllm_release(x->t, url, body, x->release_len, hdrs, x->fwd.request_id, x->to.connect_ms,
                      x->to.kv_transfer_ms);
}

/* ---- lifetime ---- */

static void free_req(uv_handle_t *h)
{
    pd_req_t *x = h->data;
    forget_room(x); /* the shims' table must not point at x once it is freed */
    pdr_kv_release(&x->kv_hold);
    pdr_worker_unref(x->pw);
    pdr_worker_unref(x->dw);
    pdr_config_unref((pdr_config_t *)x->conf);
    pdr_pdreq_clear(&x->pr);
    free(x->body);
    free(x->dbody);
    free(x->release);
    free(x->rooms);
    free(x->kv_room_done);
    pdr_buf_free(&x->pbody);
    pdr_buf_free(&x->pending);
    pdr_buf_free(&x->sending);
    pdr_buf_free(&x->sse_carry);
    if (x->p_json)
        json_decref(x->p_json);
    free(x);
}

/* The LLM latencies of a 2xx PD request (docs/metrics.md defines them). */
static void count_latencies(pd_req_t *x, uint64_t end)
{
    pdr_metrics_t *m = &x->t->m;
    uint64_t first = x->is_sse ? x->first_token_ns : x->ttfb_ns;
    double ttft = -1, tpot = -1;
    if (first != 0) {
        ttft = (double)(first - x->t0_ns) / 1e9;
        pdr_hist_observe_in(&m->ttft[x->mroute], PDR_BUCKETS_LLM, ttft);
    }
    if (x->is_sse && x->tokens >= 2) {
        tpot = (double)(x->last_token_ns - x->first_token_ns) / 1e9 / (double)(x->tokens - 1);
        pdr_hist_observe_in(&m->tpot[x->mroute], PDR_BUCKETS_TPOT, tpot);
    }
    pdr_phase_observe_llm(m->phases, x->mroute, x->pool, ttft, tpot);
    if (x->final_sent && !x->stopped && !x->broken && !x->errored)
        pdr_hist_observe_in(&m->e2e[x->mroute], PDR_BUCKETS_LLM, (double)(end - x->t0_ns) / 1e9);
}

/* The router's own spans of the request: the root (the client's request), its queue and the KV transfer
 * the shim reported; the legs' spans went when each leg ended (leg_ended). */
static void emit_request_spans(pd_req_t *x, int status, uint64_t end_us)
{
    static const char *const names[] = {"POST /generate", "POST /v1/completions",
                                        "POST /v1/chat/completions"};
    static const char *const routes[] = {"/generate", "/v1/completions", "/v1/chat/completions"};
    const uint8_t *parent = x->fwd.trace.parent_id; /* all zero for a new trace: the root has no parent */
    pdr_span_t sp[3];
    size_t n = 0;
    pdr_span_t *root = &sp[n++];
    pdr_span_init(root, names[x->route], PDR_SPAN_SERVER, x->fwd.trace.trace_id, x->root_span, parent,
                  x->ph.arrival_us, end_us);
    pdr_span_attr_str(root, "http.request.method", "POST", 4);
    pdr_span_attr_str(root, "http.route", routes[x->route], strlen(routes[x->route]));
    pdr_span_attr_int(root, "http.response.status_code", status);
    pdr_span_attr_str(root, "pdr.request_id", x->request_id, strlen(x->request_id));
    if (x->pool != NULL)
        pdr_span_attr_str(root, "pdr.pool", x->pool, strlen(x->pool));
    if (x->pw != NULL)
        pdr_span_attr_str(root, "pdr.prefill", x->pw->target, strlen(x->pw->target));
    if (x->dw != NULL)
        pdr_span_attr_str(root, "pdr.decode", x->dw->target, strlen(x->dw->target));
    pdr_span_attr_int(root, "pdr.attempts", x->attempt + 1);
    pdr_span_attr_int(root, "pdr.bytes_out", (int64_t)x->bytes_out);
    pdr_span_attr_int(root, "pdr.tokens", (int64_t)x->tokens);
    if (x->error_cause != NULL)
        pdr_span_attr_str(root, "error.type", x->error_cause, strlen(x->error_cause));
    if (x->disagg >= 0)
        pdr_span_attr_str(root, "pdr.disagg", pdr_disagg_decision_names[x->disagg],
                          strlen(pdr_disagg_decision_names[x->disagg]));
    pdr_span_event(root, "decode_first_token", x->ph.decode_first_byte_us);
    pdr_span_event(root, "first_token", x->ph.first_token_us);
    pdr_span_event(root, "last_token", x->ph.last_token_us);
    root->status = status >= 500 || x->broken ? PDR_SPAN_STATUS_ERROR : PDR_SPAN_STATUS_OK;
    if (x->ph.sent_us != 0) {
        uint8_t id[8];
        random_span(id);
        pdr_span_t *q = &sp[n++];
        pdr_span_init(q, "queue", PDR_SPAN_INTERNAL, x->fwd.trace.trace_id, id, x->root_span,
                      x->ph.arrival_us, x->ph.sent_us);
        pdr_span_attr_int(q, "pdr.attempts", x->attempt + 1);
        q->status = PDR_SPAN_STATUS_OK;
    }
    if (x->ph.kv_seen) {
        /* The shim's wall-clock times, placed on the router's monotonic clock. */
        int64_t off = (int64_t)pdr_wall_us() - (int64_t)pdr_now_us();
        uint8_t id[8];
        random_span(id);
        pdr_span_t *k = &sp[n++];
        pdr_span_init(k, "kv_transfer", PDR_SPAN_INTERNAL, x->fwd.trace.trace_id, id, x->root_span,
                      (uint64_t)((int64_t)x->ph.kv_start_wall_us - off),
                      (uint64_t)((int64_t)x->ph.kv_end_wall_us - off));
        pdr_span_attr_int(k, "pdr.kv.bytes", (int64_t)x->ph.kv_bytes);
        pdr_span_attr_str(k, "pdr.kv.backend", x->ph.kv_backend, strlen(x->ph.kv_backend));
        pdr_span_attr_int(k, "pdr.kv.status", x->ph.kv_status);
        if (x->ph.kv_cause[0])
            pdr_span_attr_str(k, "error.type", x->ph.kv_cause, strlen(x->ph.kv_cause));
        k->status = x->ph.kv_status != 0 ? PDR_SPAN_STATUS_ERROR : PDR_SPAN_STATUS_OK;
    }
    pdr_trace_submit(sp, n);
}

static void write_access_log(pd_req_t *x)
{
    uint64_t end = x->end_ns ? x->end_ns : pdr_now_ns();
    double total = (double)(end - x->t0_ns) / 1e9;
    double ttfb = x->ttfb_ns ? (double)(x->ttfb_ns - x->t0_ns) / 1e9 : -1;
    int status = x->status ? x->status : 499;
    pdr_metrics_count_request(&x->t->m, x->mroute, status, total, ttfb);
    if (x->mode == MODE_PD && status >= 200 && status < 300)
        count_latencies(x, end);
    x->t->m.bytes_out_total += x->bytes_out;
    char phases[512] = "", kv[320] = "";
    if (x->room_open) {
        pdr_shim_room_take(x->r, x->rooms[0], kv, sizeof(kv));
        take_other_rooms(x);
        x->room_open = 0;
    }
    if (x->mode == MODE_PD) {
        x->ph.end_us = end / 1000;
        if (x->d_running) { /* the current attempt's decode leg (or solo leg), still going */
            x->ph.decode_sent_us = x->dleg.started_ns / 1000;
            x->ph.decode_headers_us = x->dleg.first_byte_ns / 1000;
        }
        pdr_phase_observe(&x->ph, x->t->m.phases);
        if (x->traced)
            emit_request_spans(x, status, end / 1000);
    }
    if (x->r->access_fd < 0)
        return;
    if (x->mode == MODE_PD) {
        int k = pdr_phase_format_json(&x->ph, phases + 1, sizeof(phases) - 1);
        if (k > 0 && (size_t)k < sizeof(phases) - 1)
            phases[0] = ',';
        else
            phases[0] = '\0';
    }
    char line[2816], error[256], retry_error[sizeof(x->retry_error) + 2] = "null";
    if (x->error_cause != NULL)
        pdr_json_escape(error, sizeof(error), x->error_cause);
    if (x->retry_error[0] != '\0')
        snprintf(retry_error, sizeof(retry_error), "\"%s\"", x->retry_error);
    char room[24] = "null";
    if (x->n_rooms > 0 && x->body != NULL && !x->vllm && !x->solo)
        snprintf(room, sizeof(room), "%" PRIu64, x->rooms[0]);
    static const char *names[] = {"/generate", "/v1/completions", "/v1/chat/completions"};
    int n = snprintf(
        line, sizeof(line),
        "{\"ts_us\":%" PRIu64 ",\"request_id\":\"%s\",\"trace_id\":\"%s\",\"path\":\"%s\",\"status\":%d,"
        "\"pool\":%s%s%s,\"prefill\":%s%s%s,\"decode\":%s%s%s,\"room\":%s,\"attempts\":%d,\"queue_ms\":%.3f,"
        "\"ttfb_ms\":%.3f,"
        "\"total_ms\":%.3f,\"bytes_in\":%zu,\"bytes_out\":%" PRIu64 ",\"error\":%s%s%s,\"retry_error\":%s,"
        "\"disagg\":%s%s%s,"
        "\"kv_deadline_ms\":%" PRIu64 ",\"kv_tokens\":%" PRIu64
        ",\"kv_tokens_from\":\"%s\",\"kv_cause\":%s%s%s%s%s}\n",
        pdr_wall_us(), x->request_id, x->fwd.trace_id,
        x->mode == MODE_MODELS ? "/v1/models" : names[x->route], status, x->pool ? "\"" : "",
        x->pool ? x->pool : "null", x->pool ? "\"" : "", x->pw ? "\"" : "", x->pw ? x->pw->target : "null",
        x->pw ? "\"" : "", x->dw ? "\"" : "", x->dw ? x->dw->target : "null", x->dw ? "\"" : "", room,
        x->attempt + 1, (double)x->admit.wait_ns / 1e6, ttfb >= 0 ? ttfb * 1e3 : -1.0, total * 1e3,
        x->req ? x->req->entity.len : 0, x->bytes_out, x->error_cause ? "\"" : "",
        x->error_cause ? error : "null", x->error_cause ? "\"" : "", retry_error, x->disagg >= 0 ? "\"" : "",
        x->disagg >= 0 ? pdr_disagg_decision_names[x->disagg] : "null", x->disagg >= 0 ? "\"" : "", x->kv_ms,
        x->kv_tokens, pdr_kv_tokens_how_names[x->kv_tokens_how], x->kv_cause ? "\"" : "",
        x->kv_cause ? x->kv_cause : "null", x->kv_cause ? "\"" : "", phases, kv);
    if (n <= 0)
        return;
    size_t len = (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1;
    if (status == 499 && x->client_aborted)
        pdr_access_log_aborted(x->t, line, len);
    else if (x->refused)
        pdr_access_log_refused(x->t, line, len);
    else
        pdr_access_log(x->t, line, len);
}

/* A lingering request's prefill did not answer within timeouts.kv_transfer_ms. */
static void on_linger_deadline(uv_timer_t *t)
{
    pd_req_t *x = t->data;
    if (!x->lingering)
        return;
    if (x->p_running) {
        pdr_leg_cancel(&x->pleg);
        release_leg(x, 1);
        late_prefill_failure(x, PDR_CAUSE_KV_DEADLINE, "no answer within timeouts.kv_transfer_ms");
    }
    linger_end(x);
}

static void on_dispose(void *p)
{
    pd_req_t *x = *(pd_req_t **)p;
    if (!x->final_sent && !x->errored && x->error_cause == NULL)
        note_client_abort(x);
    if (x->req->version >= 0x200 && x->client_aborted)
        pdr__note_client_reset(x->t, x->req); /* may close the connection: a reset flood */
    /* The client's answer is complete and the prefill has not answered yet (pd.relay first_byte): its
     * leg is read to its end, so that the prefill sees no abort, and its outcome is counted. */
    int linger = x->p_running && x->counted_inflight && x->final_sent && !x->broken && !x->stopped &&
                 !x->errored && !x->client_aborted;
    if (linger) {
        if (x->d_running) {
            pdr_leg_cancel(&x->dleg);
            release_leg(x, 0);
        }
    } else {
        cancel_legs(x);
    }
    if (!x->started && x->counted_inflight)
        x->t->m.waiting--;
    pdr_kv_release(&x->kv_hold);                    /* the decode's answer is over: its KV is free */
    pdr_admit_leave(x->t, x->t->config, &x->admit); /* its slot, or its place in the queue */
    pdr_kv_release(&x->kv_hold);                    /* the decode's answer is over: its KV is free */
    if (x->retry_slot) {
        x->retry_slot = 0;
        pdr_retry_release();
    }
    x->backoff_ns = 0;
    write_access_log(x);
    x->req = NULL;
    if (x->counted_inflight) {
        __atomic_sub_fetch(&x->r->inflight, 1, __ATOMIC_RELAXED);
        if (!linger)
            x->t->live--;
    }
    if (linger) {
        x->lingering = 1;
        x->t->lingering++;
        uint64_t now = pdr_now_ns();
        uint64_t ms = x->kv_deadline_ns > now ? (x->kv_deadline_ns - now + 999999) / 1000000 : 1;
        uv_timer_start(&x->timer, on_linger_deadline, ms, 0);
        return;
    }
    uv_timer_stop(&x->timer);
    uv_close((uv_handle_t *)&x->timer, free_req);
}

static pd_req_t *new_req(pdr_thread_t *t, h2o_req_t *req, int mroute)
{
    pd_req_t *x = calloc(1, sizeof(*x));
    if (x == NULL)
        return NULL;
    x->t = t;
    x->r = t->r;
    x->conf = pdr_config_ref(t->config);
    pdr_config_pool_timeouts(x->conf, NULL, &x->to);
    x->req = req;
    x->mroute = mroute;
    x->t0_ns = pdr_now_ns();
    x->last_data_ns = x->t0_ns;
    x->disagg = -1;
    x->kv_ms = (uint64_t)x->to.kv_transfer_ms;
    x->kv_tokens_how = PDR_KVT_NONE;
    pdr_fwd_build(&x->fwd, req, x->conf); /* the request id, the trace and the forwarded headers */
    pdr_phase_init(&x->ph, t->m.phases, x->t0_ns / 1000);
    memcpy(x->request_id, x->fwd.request_id, sizeof(x->request_id));
    uv_timer_init(t->loop, &x->timer);
    x->timer.data = x;
    pd_req_t **anchor = h2o_mem_alloc_shared(&req->pool, sizeof(*anchor), on_dispose);
    *anchor = x;
    return x;
}

static void on_deferred_start(uv_timer_t *h)
{
    pd_req_t *x = h->data;
    if (x->req != NULL)
        start_attempt(x);
    pdr_admit_started(&x->admit);
}

/* ---- admission (admission.h) ---- */

/* The request has its slot: its first attempt. */
static void begin(pd_req_t *x, int deferred)
{
    if (deferred && x->req->version >= 0x200) {
        /* HTTP/2: the legs go out on the next loop turn, after h2o has read the rest of what the client
         * sent with this request, so that a stream the client resets at once (the rapid-reset pattern)
         * costs the workers nothing: on_dispose runs first and nothing is started. */
        uv_timer_start(&x->timer, on_deferred_start, 0, 0);
        return;
    }
    start_attempt(x);
    pdr_admit_started(&x->admit);
}

static void on_queue_tick(uv_timer_t *h);

/* While queued, the request's timer wakes it for its queue timeout, the next token of the rate limit, and
 * (HTTP/1) to see whether its client closed; a freed slot comes through on_admitted, not the timer. */
static void arm_queue_tick(pd_req_t *x)
{
    uint64_t now = pdr_now_ns(), next = x->queue_deadline_ns;
    uint64_t peek = now + PEEK_INTERVAL_MS * 1000000ull; /* also when a drain's deadline is looked for */
    if (peek < next)
        next = peek;
    uint64_t rate = pdr_admit_rate_wait_ns(x->conf);
    if (rate > 0 && now + rate < next)
        next = now + rate;
    uint64_t ms = next > now ? (next - now + 999999) / 1000000 : 1;
    uv_timer_start(&x->timer, on_queue_tick, ms ? ms : 1, 0);
}

static void queue_refused(pd_req_t *x, pdr_admit_reject_t why, const char *cause, const char *msg)
{
    pdr_admit_count_reject(why);
    x->error_cause = cause;
    x->refused = 1;
    fail_response(x, 503, "service_unavailable", msg, 1);
}

static void on_queue_tick(uv_timer_t *h)
{
    pd_req_t *x = h->data;
    if (x->req == NULL || x->admit.state != PDR_ADMIT_QUEUED)
        return;
    if (x->req->version < 0x200) {
        h2o_socket_t *sock = x->req->conn->callbacks->get_socket(x->req->conn);
        char c;
        if (sock != NULL && recv(h2o_socket_get_fd(sock), &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0) {
            /* The HTTP/1 client closed while queued: it leaves the queue now (a slot handed over meanwhile
             * is given back by on_dispose). */
            (void)pdr_admit_expire(&x->admit);
            note_client_abort(x);
            x->status = 499;
            x->stopped = 1;
            mark_started(x, 0);
            h2o_send_error_502(x->req, "Bad Gateway", "client closed", H2O_SEND_ERROR_HTTP1_CLOSE_CONNECTION);
            return;
        }
    }
    if (pdr_router_shutting_down(x->r)) {
        if (pdr_admit_expire(&x->admit))
            queue_refused(x, PDR_REJ_SHUTTING_DOWN, "shutting_down", "the router is shutting down");
        return;
    }
    if (pdr_now_ns() >= x->queue_deadline_ns) {
        if (pdr_admit_expire(&x->admit)) {
            char msg[160];
            snprintf(msg, sizeof(msg),
                     "no room for the request within limits.queue_timeout_ms (%d ms): too many requests in "
                     "flight",
                     x->conf->limits.queue_timeout_ms);
            queue_refused(x, PDR_REJ_QUEUE_TIMEOUT, "queue_timeout", msg);
        }
        return;
    }
    pdr_admit_kick(x->t, x->t->config); /* a token of the rate limit may have come */
    if (x->admit.state == PDR_ADMIT_QUEUED)
        arm_queue_tick(x);
}

/* Loop of the request (pdr_admit_deliver): a slot was handed over. */
static void on_admitted(pdr_admit_waiter_t *w)
{
    pd_req_t *x = PDR_DLINK_ITEM(w, pd_req_t, admit);
    uv_timer_stop(&x->timer);
    if (x->req != NULL && !x->stopped && !x->final_sent) /* not answered while the slot came */
        begin(x, 0);
}

/* Admission said no: the answer (429 for the queue and the rate limit, 503 for a limit without a queue),
 * with the cause in the access log. */
static void admit_refused(pd_req_t *x, pdr_admit_result_t res)
{
    const pdr_config_t *c = x->conf;
    char msg[200];
    x->refused = 1;
    if (res == PDR_ADMIT_FULL || res == PDR_ADMIT_RATE) {
        int retry = 1;
        if (res == PDR_ADMIT_FULL) {
            x->error_cause = "queue_full";
            snprintf(msg, sizeof(msg), "too many requests: the admission queue is full (limits.queue %d)",
                     c->limits.queue);
        } else {
            x->error_cause = "rate_limited";
            snprintf(msg, sizeof(msg),
                     "too many requests: over the rate limit of %g requests/s "
                     "(limits.rate_limit_rps)",
                     c->limits.rate_limit_rps);
            retry = (int)((pdr_admit_rate_wait_ns(c) + 999999999ull) / 1000000000ull);
        }
        fail_response(x, 429, "rate_limit_exceeded", msg, retry > 0 ? retry : 1);
        return;
    }
    if (res == PDR_ADMIT_BUSY_POOL) {
        x->error_cause = "max_inflight_per_pool";
        snprintf(msg, sizeof(msg), "too many requests in flight in pool %s (limits.max_inflight_per_pool)",
                 x->pool);
    } else if (res == PDR_ADMIT_BUSY_WORKER) {
        x->error_cause = "max_inflight_per_worker";
        snprintf(msg, sizeof(msg), "every worker is at limits.max_inflight_per_worker (%d)",
                 c->limits.max_inflight_per_worker);
    } else {
        x->error_cause = "max_inflight";
        snprintf(msg, sizeof(msg), "too many requests in flight (limits.max_inflight)");
    }
    fail_response(x, 503, "service_unavailable", msg, 1);
}

/* A PD request refused before any worker is chosen: the error answer, its metrics, and its access-log line
 * (every PD request receives exactly one), with the cause in "error". */
static int refuse(pdr_thread_t *t, h2o_req_t *req, pdr_route_t route, int mroute, int status,
                  const char *type, const char *msg, int retry_after, const char *cause)
{
    pdr_send_error(req, status, type, msg, retry_after);
    pdr_metrics_count_request(&t->m, mroute, status, 0, -1);
    if (t->r->access_fd < 0)
        return 0;
    static const char *names[] = {"/generate", "/v1/completions", "/v1/chat/completions"};
    char id[33], line[512], trace[35] = "null";
    pdr_fwd_new_request_id(id);
    if (pdr_fwd_trace_id(req, trace + 1)) {
        trace[0] = '"';
        trace[33] = '"';
        trace[34] = '\0';
    }
    int n =
        snprintf(line, sizeof(line),
                 "{\"ts_us\":%" PRIu64
                 ",\"request_id\":\"%s\",\"trace_id\":%s,\"path\":\"%s\",\"status\":%d,\"pool\":null,"
                 "\"prefill\":null,"
                 "\"decode\":null,\"room\":null,\"attempts\":0,\"ttfb_ms\":0.000,\"total_ms\":0.000,"
                 "\"bytes_in\":%zu,\"bytes_out\":0,\"error\":\"%s\",\"retry_error\":null,\"disagg\":null}\n",
                 pdr_wall_us(), id, trace, names[route], status, req->entity.len, cause);
    if (n > 0 && (size_t)n < sizeof(line))
        pdr_access_log_refused(t, line, (size_t)n);
    return 0;
}

int pdr_pd_handle(pdr_thread_t *t, h2o_req_t *req, pdr_route_t route, int mroute)
{
    pdr_router_t *r = t->r;
    const pdr_config_t *c = t->config;
    t->m.bytes_in_total += req->entity.len;
    if (pdr_router_shutting_down(r))
        return refuse(t, req, route, mroute, 503, "service_unavailable", "the router is shutting down", 1,
                      "shutting_down");
    if (req->version >= 0x200 && pdr__conn_condemned(req)) /* parsed from a connection closed for a flood */
        return refuse(t, req, route, mroute, 429, "rate_limit_exceeded",
                      "connection closed: too many streams reset", 0, "h2_reset_flood");
    char why[256];
    int bad = pdr_fwd_check_request(req, c, why, sizeof(why));
    if (bad != 0 && bad != 400)
        t->m.headers_too_large_total++;
    if (bad != 0)
        return refuse(t, req, route, mroute, bad, "invalid_request_error", why, 0,
                      bad == 400   ? "bad_header"
                      : bad == 414 ? "request_target_too_long"
                                   : "headers_too_large");
    if (pdr__body_too_large(t, req))
        return refuse(t, req, route, mroute, 413, "invalid_request_error",
                      "request body exceeds limits.max_body_bytes", 0, "body_too_large");
    static const char no_generate[] =
        "protocol vllm serves /v1/completions and /v1/chat/completions; /generate "
        "is sglang's native route";
    if (c->protocol == PDR_PROTO_VLLM && route == PDR_ROUTE_GENERATE)
        return refuse(t, req, route, mroute, 400, "invalid_request_error", no_generate, 0,
                      "route_not_served");
    pdr_pdreq_t pr;
    char err[256];
    int prc = pdr_pdreq_parse(route, req->entity.base, req->entity.len, &pr, err, sizeof(err));
    if (prc == PDR_ENOMEM)
        return refuse(t, req, route, mroute, 503, "service_unavailable", err, 1, "out_of_memory");
    if (prc != 0)
        return refuse(t, req, route, mroute, 400, "invalid_request_error", err, 0, "invalid_request");
    if (pr.batch > (size_t)c->limits.max_batch_items) {
        /* Before any per-item work: rooms, tickets and the legs' bodies grow with the items. */
        snprintf(err, sizeof(err), "the batch has %zu items, more than limits.max_batch_items (%d)", pr.batch,
                 c->limits.max_batch_items);
        pdr_pdreq_clear(&pr);
        t->m.batch_too_large_total++;
        return refuse(t, req, route, mroute, 400, "invalid_request_error", err, 0, "batch_too_large");
    }
    long pool;
    char pmsg[512];
    int pst = pdr__request_pool(c, &pr, &pool, pmsg, sizeof(pmsg));
    if (pst != 0) {
        pdr_pdreq_clear(&pr);
        return refuse(t, req, route, mroute, pst, "invalid_request_error", pmsg, 0,
                      pst == 404 ? "model_not_found" : "invalid_request");
    }
    pdr_pool_conf_t pc;
    pdr_config_pool(c, (size_t)pool, &pc);
    if (pc.protocol == PDR_PROTO_VLLM && route == PDR_ROUTE_GENERATE) { /* a vllm pool of pools: */
        pdr_pdreq_clear(&pr);
        return refuse(t, req, route, mroute, 400, "invalid_request_error", no_generate, 0,
                      "route_not_served");
    }
    pd_req_t *x = new_req(t, req, mroute);
    if (x == NULL) {
        pdr_pdreq_clear(&pr);
        pdr_send_error(req, 503, "service_unavailable", "out of memory", 1);
        return 0;
    }
    x->mode = MODE_PD;
    x->route = route;
    x->traced = pdr_trace_on() && (x->fwd.trace.flags & 0x01);
    if (x->traced)
        random_span(x->root_span);
    x->pool = pc.name; /* lives as long as x->conf (== c) */
    pdr_config_pool_timeouts(c, &pc, &x->to);
    x->protocol = pc.protocol;
    x->pr = pr;
    if (x->to.kv_transfer_ms_per_1k_tokens > 0) {
        /* The deadline grows with the prompt: its length, counted once per request. */
        struct pdr_tokenizer *tk = pdr_router_tokenizer(r);
        x->kv_tokens = pdr_kv_prompt_tokens(&x->pr, tk, &x->kv_tokens_how);
        pdr_tokenizer_free(tk);
    }
    x->kv_ms = pdr_kv_deadline_ms(x->to.kv_transfer_ms, x->to.kv_transfer_ms_per_1k_tokens, x->kv_tokens);
    x->vllm = x->protocol == PDR_PROTO_VLLM;
    x->merge = pr.want_logprobs && !x->vllm; /* vLLM: the decode answers the logprobs itself */
    x->merge_wanted = x->merge;
    x->n_rooms = pr.batch ? pr.batch : 1;
    x->rooms = calloc(x->n_rooms, sizeof(uint64_t));
    x->counted_inflight = 1;
    t->m.waiting++;
    __atomic_add_fetch(&r->inflight, 1, __ATOMIC_RELAXED);
    t->live++;
    if (x->rooms == NULL) {
        fail_response(x, 503, "service_unavailable", "out of memory", 1);
        return 0;
    }
    pdr_admit_result_t adm = pdr_admit_enter(t, c, &x->admit, &r->pool, x->pool, (int)pool, on_admitted);
    if (adm == PDR_ADMIT_WAIT) {
        x->queue_deadline_ns = x->t0_ns + (uint64_t)c->limits.queue_timeout_ms * 1000000ull;
        arm_queue_tick(x);
        return 0;
    }
    if (adm != PDR_ADMIT_GO) {
        admit_refused(x, adm);
        return 0;
    }
    begin(x, 1);
    return 0;
}

int pdr_models_handle(pdr_thread_t *t, h2o_req_t *req)
{
    if (t->config->n_pools > 0) {
        /* pools: the union of their models, answered here (no worker has them all). */
        size_t len;
        char *body = pdr__models_list_json(t->config, pdr_wall_us() / 1000000, &len);
        if (body == NULL) {
            pdr_send_error(req, 503, "service_unavailable", "out of memory", 1);
            pdr_metrics_count_request(&t->m, PDR_MR_MODELS, 503, 0, -1);
            return 0;
        }
        req->res.status = 200;
        req->res.reason = "OK";
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
                       H2O_STRLIT("application/json"));
        req->res.content_length = len;
        h2o_send_inline(req, body, len); /* copies */
        free(body);
        pdr_metrics_count_request(&t->m, PDR_MR_MODELS, 200, 0, -1);
        return 0;
    }
    pd_req_t *x = new_req(t, req, PDR_MR_MODELS);
    if (x == NULL) {
        pdr_send_error(req, 503, "service_unavailable", "out of memory", 1);
        return 0;
    }
    x->mode = MODE_MODELS;
    start_attempt(x);
    return 0;
}

/* ---- the shims' reports (kvdeadline.h) ---- */

int pdr_pd_kv_failed(struct pd_req *x, const char *cause, const char *backend)
{
    if (x == NULL || x->req == NULL || x->stopped || x->final_sent || x->mode != MODE_PD || !x->kv_open)
        return 0;
    pdr_kv_cause_t c = pdr_kv_cause_parse(cause);
    /* The shim's own reason, kept to characters that need no escaping in JSON and logs. */
    char why[48];
    size_t k = 0;
    for (const char *q = cause ? cause : "unknown"; *q != '\0' && k + 1 < sizeof(why); q++)
        why[k++] = (*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') ||
                           *q == '_' || *q == '-' || *q == '.'
                       ? *q
                       : '_';
    why[k] = '\0';
    snprintf(x->kv_msg, sizeof(x->kv_msg), "the KV transfer failed: the shim reported %s", why);
    if (x->started) {
        kv_failed_in_response(x, c, backend, x->kv_msg);
        arm_timer(x);
        return 1;
    }
    note_kv_failure(x, c, backend, x->kv_msg);
    attempt_failed(x, -1, PDR_CAUSE_OTHER, 502, x->kv_msg);
    arm_timer(x);
    return 1;
}

int pdr_pd_kv_done(struct pd_req *x, uint64_t room)
{
    if (x == NULL || x->req == NULL || x->mode != MODE_PD || !x->kv_open || x->vllm)
        return 0;
    size_t i = 0;
    while (i < x->n_rooms && x->rooms[i] != room)
        i++;
    if (i == x->n_rooms)
        return 0; /* not a room of this attempt */
    if (x->kv_room_done == NULL && (x->kv_room_done = calloc(x->n_rooms, 1)) == NULL)
        return 0; /* out of memory: the first token or the prefill's answer still ends the deadline */
    if (!x->kv_room_done[i]) {
        x->kv_room_done[i] = 1;
        if (++x->kv_rooms_done == x->n_rooms)
            kv_arrived(x);
    }
    return 1;
}

void pdr_pd_shim_room_event(void *owner, uint64_t room, int failed, int code, uint64_t bytes, uint64_t usec,
                            uint64_t wall_us, const char *backend, const char *reason)
{
    pd_req_t *x = owner;
    if (x == NULL || x->req == NULL || x->mode != MODE_PD)
        return;
    size_t i = 0;
    while (i < x->n_rooms && x->rooms[i] != room)
        i++;
    if (i == x->n_rooms)
        return; /* a room of an earlier attempt */
    uint64_t start = usec < wall_us ? wall_us - usec : 0;
    if (!failed) {
        /* Both shims report done; the KV phase is the request's first room, recorded once. */
        if (i == 0 && (!x->ph.kv_seen || x->ph.kv_status != 0))
            pdr_phase_kv(&x->ph, start, wall_us, bytes, backend[0] ? backend : NULL, 0, NULL);
        pdr_pd_kv_done(x, room);
        return;
    }
    if (!x->kv_open || x->stopped || x->final_sent)
        return; /* the KV had arrived, or the answer is over: nothing to act on */
    pdr_phase_kv(&x->ph, start, wall_us, bytes, backend[0] ? backend : NULL, code != 0 ? code : -1, reason);
    pdr_pd_kv_failed(x, reason, backend[0] ? backend : NULL);
}
