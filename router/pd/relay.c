/*
 * The client side of a PD request: the h2o generator (proceed, stop), the decode's answer relayed with
 * back-pressure both ways (at most HIGH_WATER pending, then the decode leg is paused; HTTP/2 sends in
 * pieces of one DATA frame), the logprob merge of a whole answer or of each SSE event, and the error
 * answers that start a response. Loop thread of the request.
 */
#include "pd_internal.h"
#include "reply.h"

/* The client response begins (first byte, or an error answer; ttfb: time it). A PD request counts in the
 * m.waiting gauge (the router's view of the workers' queues) from its start until this. */
void pdr__pd_mark_started(pd_req_t *x, int ttfb)
{
    if (!pd_started(x) && x->counted_inflight && !x->resuming) /* a migration's: counted at the first */
        x->t->m.waiting--;
    if (!pd_started(x))
        pd_set_state(x, PD_RESPONDING);
    if (ttfb)
        x->ttfb_ns = pdr_now_ns();
}

/* The client went away before the end: counted once, and named in the access log. */
void pdr__pd_note_client_abort(pd_req_t *x)
{
    x->t->m.client_aborts_total++;
    x->error_cause = "client_abort";
    x->client_aborted = 1;
}

void pdr__pd_fail_response(pd_req_t *x, int status, const char *type, const char *msg, int retry_after)
{
    if (x->resuming && x->req != NULL && !x->stopped) { /* the client's stream went long ago */
        pdr__pd_resume_failed(x, status, msg);
        return;
    }
    x->status = status;
    x->errored = 1;
    pdr__pd_cancel_legs(x);
    if (x->req == NULL || pd_started(x))
        return;
    pdr__pd_mark_started(x, 1);
    pd_set_state(x, PD_ANSWERED);
    pdr_send_error(x->req, status, type, msg, retry_after);
}

/* Counts the token events in what is about to be relayed (streams only: no per-byte work otherwise). */
static void note_tokens(pd_req_t *x)
{
    size_t n = pdr_sse_count_tokens(&x->rl.sse_count, x->rl.sending.p, x->rl.sending.len);
    if (n == 0)
        return;
    uint64_t now = pdr_now_ns();
    if (x->rl.tokens == 0) {
        x->rl.first_token_ns = now;
        x->ph.first_token_us = now / 1000;
    }
    x->rl.last_token_ns = now;
    x->ph.last_token_us = now / 1000;
    x->rl.tokens += n;
    x->t->m.stream_events_total[x->mroute] += n;
}

/* HTTP/2 multiplexes streams over one socket, so a stream's progress cannot be read from the socket as an
 * HTTP/1 client's is (pdr__pd_sample_client_progress): h2o calls proceed once it has written all it was
 * handed, which for a coalesced send of up to HIGH_WATER can take a slowly read stream longer than
 * stream_idle_ms (its flow-control window comes back as the client reads). HTTP/2 sends go to h2o in
 * pieces of one DATA frame's default size instead, each piece taken restarting the clock. */
#define H2_PIECE 16384

static void send_piece(pd_req_t *x)
{
    size_t left = x->rl.sending.len - x->rl.send_off, n = left;
    if (x->req->version >= 0x200 && n > H2_PIECE)
        n = H2_PIECE;
    int last = x->rl.send_last && n == left;
    h2o_iovec_t v = h2o_iovec_init(x->rl.sending.p + x->rl.send_off, n);
    x->rl.send_off += n;
    x->send_inflight = 1;
    x->rl.send_ns = pdr_now_ns();
    h2o_send(x->req, &v, n ? 1 : 0, last ? H2O_SEND_STATE_FINAL : H2O_SEND_STATE_IN_PROGRESS);
}

static void on_proceed(h2o_generator_t *gen, h2o_req_t *req)
{
    pd_req_t *x = H2O_STRUCT_FROM_MEMBER(pd_req_t, gen, gen);
    (void)req;
    x->send_inflight = 0;
    if (!x->stopped && x->rl.send_off < x->rl.sending.len) { /* the next piece of an HTTP/2 send */
        send_piece(x);
        return;
    }
    x->rl.sending.len = 0;
    x->rl.send_off = 0;
    x->sm->advance(x);
}

static void on_stop(h2o_generator_t *gen, h2o_req_t *req)
{
    pd_req_t *x = H2O_STRUCT_FROM_MEMBER(pd_req_t, gen, gen);
    (void)req;
    /* The client went away mid-response: stop both legs now. */
    x->stopped = 1;
    x->send_inflight = 0;
    if (!pd_final_sent(x) && x->error_cause == NULL) /* not when the router cut a stalled client */
        pdr__pd_note_client_abort(x);
    pdr__pd_cancel_legs(x);
}

/* A JSON value serialized into a buffer as jansson writes it, never past limit: the merged logprobs are
 * the prefill's whole list in front of the decode's, and go out within the merge's ceiling. */
typedef struct dump_to {
    pdr_buf_t *b;
    size_t limit;
    int err;
} dump_to_t;

static int dump_piece(const char *p, size_t n, void *data)
{
    dump_to_t *d = data;
    d->err = pdr_buf_append(d->b, p, n, d->limit);
    return d->err == 0 ? 0 : -1;
}

/* Appends j as compact JSON to b, b->len staying at most limit: PDR_ETOOBIG past it, PDR_ENOMEM. On an
 * error b->len is as it was. */
static int dump_json(const json_t *j, pdr_buf_t *b, size_t limit)
{
    size_t was = b->len;
    dump_to_t d = {b, limit, 0};
    if (json_dump_callback(j, dump_piece, &d, JSON_COMPACT) != 0) {
        b->len = was;
        return d.err != 0 ? d.err : PDR_ENOMEM;
    }
    return 0;
}

/* The ceiling of what one send of a merged stream holds (x->rl.sending): events are merged until it
 * reaches HIGH_WATER, the last one at most limits.max_merge_bytes, then the stream's unended tail (at most
 * limits.max_merge_bytes too) or the error event that ends it. */
static size_t merge_send_cap(const pd_req_t *x)
{
    return HIGH_WATER + 2 * (size_t)x->conf->limits.max_merge_bytes + ERR_EVENT_MAX;
}

/*
 * Splits complete events ("\n\n") off the decode's stream and rewrites each "data:" JSON with the
 * prefill's logprobs; the rest of an event waits in sse_carry for its end. Only bytes not searched
 * before are searched, so an event costs its length once however many reads bring it. Every event merged
 * carries the prefill's whole input logprobs, so a few KiB of the decode's events can make megabytes:
 * events are merged into out until it holds HIGH_WATER, and those left wait in sse_carry (sse_more: the
 * decode's bytes are not taken meanwhile) for the next send. PDR_ETOOBIG when an event, as the decode
 * sent it (ended or not) or merged, is larger than limits.max_merge_bytes (each is held whole);
 * PDR_ENOMEM when a buffer cannot grow.
 */
static int sse_merge_events(pd_req_t *x, const char *p, size_t n, pdr_buf_t *out)
{
    size_t limit = (size_t)x->conf->limits.max_merge_bytes, cap = merge_send_cap(x);
    /* The carry holds an unended event (at most limit: checked below) when new bytes come, and they are
     * at most one batch of pending (PENDING_CAP). */
    int rc = n > 0 ? pdr_buf_append(&x->rl.sse_carry, p, n, limit + PENDING_CAP) : 0;
    if (rc != 0)
        return rc;
    char *c = x->rl.sse_carry.p;
    size_t len = x->rl.sse_carry.len, start = 0, i = x->rl.sse_scanned;
    x->rl.sse_more = 0;
    for (;;) {
        if (out->len >= HIGH_WATER && start < len) {
            x->rl.sse_more = 1; /* the rest is merged on the next send */
            break;
        }
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
        if (evlen + 2 > limit)
            return PDR_ETOOBIG;
        size_t dl, was = out->len;
        const char *d = pdr_sse_first_data(ev, evlen, &dl);
        json_t *j = d != NULL ? json_loadb(d, dl, 0, NULL) : NULL;
        if (j != NULL && x->rl.p_json != NULL && pdr_merge_logprobs(j, x->rl.p_json)) {
            /* The merged event, as sent, is at most limit. */
            rc = pdr_buf_append(out, "data: ", 6, cap);
            if (rc == 0)
                rc = dump_json(j, out, was + limit - 2 < cap ? was + limit - 2 : cap);
            if (rc == 0)
                rc = pdr_buf_append(out, "\n\n", 2, cap);
        } else {
            rc = pdr_buf_append(out, ev, evlen + 2, cap);
        }
        if (j != NULL)
            json_decref(j);
        if (rc != 0) {
            out->len = was;
            return rc;
        }
        start = (size_t)(q - c) + 2;
        i = start;
    }
    if (start > 0) /* no copy of a carry with no event ended: that would be a pass over it per read */
        memmove(c, c + start, len - start);
    x->rl.sse_carry.len = len - start;
    x->rl.sse_scanned = i > start ? i - start : 0;
    if (!x->rl.sse_more && x->rl.sse_carry.len > limit) /* the carry is one unended event */
        return PDR_ETOOBIG;
    return 0;
}

/* The streaming merge cannot go on (an event past limits.max_merge_bytes, or no memory for it): the
 * decode is cancelled and the stream ends with an error event after the events merged so far. 0, or
 * PDR_ENOMEM when not even the error event fits (the caller aborts the response). */
static int sse_merge_failed(pd_req_t *x, int err, pdr_buf_t *out)
{
    int big = err == PDR_ETOOBIG;
    if (big)
        x->t->m.merge_too_large_total++;
    x->error_cause = big ? "merge_too_large" : "router_out_of_resources";
    x->broken = 1;
    pdr_warn("request %s: %s: the decode's stream is ended with an error event", x->request_id,
             big ? "an event of the decode's stream outgrew limits.max_merge_bytes (unended, or with the "
                   "prefill's logprobs merged in)"
                 : "out of memory for the logprob merge of the decode's stream");
    pdr__pd_cancel_legs(x);
    x->at.d_done = 1;
    x->at.d_err = 0;
    x->rl.sse_carry.len = 0;
    x->rl.sse_scanned = 0;
    x->rl.sse_more = 0;
    x->rl.pending.len = 0;
    char ev[ERR_EVENT_MAX];
    int k =
        snprintf(ev, sizeof(ev), "data: {\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"code\":%d}}\n\n",
                 big ? "an event of the decode's stream exceeds limits.max_merge_bytes (the logprob merge "
                       "holds each event whole, with the prefill's logprobs merged in)"
                     : "the router ran out of memory for the logprob merge",
                 big ? "upstream_error" : "service_unavailable", big ? 502 : 503);
    if (k <= 0 || (size_t)k >= sizeof(ev))
        return PDR_ENOMEM;
    return pdr_buf_append(out, ev, (size_t)k, merge_send_cap(x));
}

/* A whole answer with the logprob merge, before its head: the prefill's input logprobs put in front of the
 * decode's in x->rl.pending. The merged answer is held whole too: PDR_ETOOBIG past
 * limits.max_merge_bytes, PDR_ENOMEM; 0 also when there is nothing to merge (not JSON, no logprobs). */
int pdr__pd_merge_whole_answer(pd_req_t *x)
{
    json_t *j = json_loadb(x->rl.pending.p ? x->rl.pending.p : "", x->rl.pending.len, 0, NULL);
    int rc = 0;
    if (j != NULL && x->rl.p_json != NULL && pdr_merge_logprobs(j, x->rl.p_json)) {
        pdr_buf_t m = {0};
        rc = dump_json(j, &m, (size_t)x->conf->limits.max_merge_bytes);
        if (rc == 0) {
            pdr_buf_free(&x->rl.pending);
            x->rl.pending = m;
        } else {
            pdr_buf_free(&m);
        }
    }
    if (j != NULL)
        json_decref(j);
    return rc;
}

/* The response cannot end as it should (no memory for its last bytes): aborted, so the client sees it
 * broken rather than cut short. */
static void abort_response(pd_req_t *x)
{
    pd_set_state(x, PD_ANSWERED);
    x->end_ns = pdr_now_ns();
    h2o_send(x->req, NULL, 0, H2O_SEND_STATE_ERROR);
}

void pdr__pd_start_client_response(pd_req_t *x)
{
    h2o_req_t *req = x->req;
    pdr__pd_mark_started(x, 1);
    x->status = (int)x->dleg.status;
    req->res.status = x->status;
    req->res.reason = pdr_http_reason(x->status);
    const char *ct = x->dleg.content_type[0] ? x->dleg.content_type : "application/json";
    x->rl.is_sse = strncmp(ct, "text/event-stream", 17) == 0;
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, ct, strlen(ct));
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-request-id"), 0, NULL, x->request_id,
                          strlen(x->request_id));
    if (x->rl.is_sse)
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL, H2O_STRLIT("no-cache"));
    if (!x->at.merge && !x->rl.is_sse && x->dleg.content_length >= 0)
        req->res.content_length = (size_t)x->dleg.content_length;
    x->gen.proceed = on_proceed;
    x->gen.stop = on_stop;
    pdr__pd_migration_arm(x);
    h2o_start_response(req, &x->gen);
}

void pdr__pd_send_final_or_more(pd_req_t *x)
{
    if (x->req == NULL || x->stopped || pd_final_sent(x) || x->send_inflight)
        return;
    /* Non-streaming merge: the whole decode answer is needed first (advance merged it before the head). */
    if (x->at.merge && !x->rl.is_sse && !x->at.d_done) {
        if (x->dleg.paused)
            pdr_leg_resume(&x->dleg);
        return;
    }
    int final = x->at.d_done;
    if (final && x->at.d_err != 0) {
        /* A non-SSE body cannot carry an error: abort the response so the client sees it broken. */
        abort_response(x);
        return;
    }
    if (x->at.merge && x->rl.is_sse) {
        /* Rewrite complete events from what was pending into sending; while merged events wait in the
         * carry (sse_more), those go first and pending waits. */
        pdr_buf_t out = x->rl.sending;
        out.len = 0;
        int rc;
        do { /* at most twice: the events left in the carry, then pending once they all went */
            int more = x->rl.sse_more;
            rc = sse_merge_events(x, x->rl.pending.p, more ? 0 : x->rl.pending.len, &out);
            if (!more)
                x->rl.pending.len = 0;
        } while (rc == 0 && !x->rl.sse_more && x->rl.pending.len > 0);
        if (rc != 0) {
            if (sse_merge_failed(x, rc, &out) != 0) {
                x->rl.sending = out;
                abort_response(x);
                return;
            }
            final = 1;
        } else if (x->rl.sse_more) {
            final = 0; /* more to merge before the end */
        } else if (final && x->rl.sse_carry.len > 0) {
            /* The stream's unended tail (at most limits.max_merge_bytes) goes as it is. */
            if (pdr_buf_append(&out, x->rl.sse_carry.p, x->rl.sse_carry.len, merge_send_cap(x)) != 0) {
                x->rl.sending = out;
                abort_response(x);
                return;
            }
            x->rl.sse_carry.len = 0;
            x->rl.sse_scanned = 0;
        }
        x->rl.sending = out;
    } else if (x->mig_armed) {
        if (pdr__pd_migration_take(x, &final) != 0) { /* no memory for a migrated stream's event */
            abort_response(x);
            return;
        }
    } else {
        pdr_buf_t t = x->rl.sending;
        x->rl.sending = x->rl.pending;
        x->rl.pending = t;
        x->rl.pending.len = 0;
    }
    if (x->rl.sending.len == 0 && !final) {
        if (x->dleg.paused)
            pdr_leg_resume(&x->dleg);
        return;
    }
    if (x->rl.is_sse && x->rl.sending.len > 0)
        note_tokens(x);
    x->bytes_out += x->rl.sending.len;
    x->rl.send_ns = pdr_now_ns();
    if (!x->rl.is_sse && x->rl.sending.len > 0 && x->status < 400) {
        /* A whole answer: its first and last body bytes stand for the first and last token. */
        if (x->ph.first_token_us == 0)
            x->ph.first_token_us = x->rl.send_ns / 1000;
        x->ph.last_token_us = x->rl.send_ns / 1000;
    }
    if (final) {
        pd_set_state(x, PD_ANSWERED);
        x->end_ns = pdr_now_ns();
    }
    x->rl.send_off = 0;
    x->rl.send_last = final != 0;
    send_piece(x);
    if (!final && x->dleg.paused)
        pdr_leg_resume(&x->dleg);
    if (!final && pdr__pd_samples_progress(x)) {
        if (!x->rl.acked_known) /* the baseline: later samples see the bytes taken since */
            pdr__pd_sample_client_progress(x, x->rl.send_ns);
        pdr__pd_arm_timer(
            x); /* the send's first progress sample is due before the deadline the timer holds */
    }
}

/* The stream ends here with an error event after what the client has. */
static void end_with_error(pd_req_t *x, int status, const char *msg)
{
    char esc[384], ev[ERR_EVENT_MAX];
    pdr_json_escape(esc, sizeof(esc), msg);
    int k = snprintf(ev, sizeof(ev), "data: {\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"code\":%d}}\n\n",
                     esc, pdr__pd_failure_type(status), status);
    x->rl.pending.len = 0;
    x->at.d_done = 1;
    x->at.d_err =
        k > 0 && (size_t)k < sizeof(ev) && pdr_buf_append(&x->rl.pending, ev, (size_t)k, PENDING_CAP) == 0
            ? 0
            : PDR_ENOMEM;
}

void pdr__pd_resume_failed(pd_req_t *x, int status, const char *msg)
{
    x->t->m.migrations[PDR_MIG_FAILED]++;
    x->broken = 1;
    x->error_cause = "migration_failed";
    pdr_warn("request %s: migration %d failed: %s; the stream ends with an error event", x->request_id,
             x->migrations, msg);
    pdr__pd_cancel_legs(x);
    pdr__pd_mark_started(x, 0);
    x->resuming = 0;
    end_with_error(x, status, msg);
    pdr__pd_send_final_or_more(x);
}
