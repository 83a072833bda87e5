/*
 * What a PD request leaves for observation: the phase record and the spans of its legs and of itself
 * (trace.h), the LLM latencies of a 2xx answer (docs/metrics.md), and its one access-log line. Loop thread
 * of the request.
 */
#include "front.h"
#include "otlp.h"
#include "pd_internal.h"
#include "reply.h"

/* The attempt's rooms but the first, taken back from the shims' table (the first one's events go to the
 * access log). */
void pdr__pd_take_other_rooms(pd_req_t *x)
{
    char skip[8];
    for (size_t i = 1; i < x->n_rooms; i++)
        pdr_shim_room_take(x->r, x->rooms[i], skip, sizeof(skip));
}

void pdr__pd_random_span(uint8_t out[8])
{
    uint64_t r;
    do
        r = pdr_random_u64();
    while (r == 0); /* an all-zero span id is invalid (W3C trace context) */
    memcpy(out, &r, 8);
}

/* A leg ended (answered, failed or cancelled): its timestamps go to the phase record, and its span (the
 * id its worker received as parent) to the exporter. */
void pdr__pd_leg_ended(pd_req_t *x, int prefill, const pdr_worker_t *w)
{
    const pdr_leg_t *leg = prefill ? &x->pleg : &x->dleg;
    int done = prefill ? x->at.p_done : x->at.d_done, err = prefill ? x->at.p_err : x->at.d_err;
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
                  prefill ? x->at.p_span : x->at.d_span, x->root_span, leg->started_ns / 1000, end_us);
    const char *role = prefill ? "prefill" : x->at.ops->answer_name;
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
    if (x->n_rooms > 0 && x->rooms != NULL && x->at.ops->rooms)
        pdr_span_attr_int(&sp, "pdr.room", (int64_t)x->rooms[0]);
    pdr_span_event(&sp, "response_headers", leg->first_byte_ns / 1000);
    if (!prefill)
        pdr_span_event(&sp, "first_byte", x->ph.decode_first_byte_us);
    sp.status = why != NULL || leg->status >= 500 ? PDR_SPAN_STATUS_ERROR : PDR_SPAN_STATUS_OK;
    pdr_trace_submit(&sp, 1);
}

/* The LLM latencies of a 2xx PD request (docs/metrics.md defines them). */
static void count_latencies(pd_req_t *x, uint64_t end)
{
    pdr_metrics_t *m = &x->t->m;
    uint64_t first = x->rl.is_sse ? x->rl.first_token_ns : x->ttfb_ns;
    double ttft = -1, tpot = -1;
    if (first != 0) {
        ttft = (double)(first - x->t0_ns) / 1e9;
        pdr_hist_observe_in(&m->ttft[x->mroute], PDR_BUCKETS_LLM, ttft);
    }
    if (x->rl.is_sse && x->rl.tokens >= 2) {
        tpot = (double)(x->rl.last_token_ns - x->rl.first_token_ns) / 1e9 / (double)(x->rl.tokens - 1);
        pdr_hist_observe_in(&m->tpot[x->mroute], PDR_BUCKETS_TPOT, tpot);
    }
    pdr_phase_observe_llm(m->phases, x->mroute, x->pool, ttft, tpot);
    if (pd_final_sent(x) && !x->stopped && !x->broken && !x->errored)
        pdr_hist_observe_in(&m->e2e[x->mroute], PDR_BUCKETS_LLM, (double)(end - x->t0_ns) / 1e9);
}

/* The router's own spans of the request: the root (the client's request), its queue and the KV transfer
 * the shim reported; the legs' spans went when each leg ended (pdr__pd_leg_ended). */
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
    if (x->at.pw != NULL)
        pdr_span_attr_str(root, "pdr.prefill", x->at.pw->target, strlen(x->at.pw->target));
    if (x->at.dw != NULL)
        pdr_span_attr_str(root, "pdr.decode", x->at.dw->target, strlen(x->at.dw->target));
    pdr_span_attr_int(root, "pdr.attempts", x->attempt + 1);
    pdr_span_attr_int(root, "pdr.bytes_out", (int64_t)x->bytes_out);
    pdr_span_attr_int(root, "pdr.tokens", (int64_t)x->rl.tokens);
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
        pdr__pd_random_span(id);
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
        pdr__pd_random_span(id);
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

void pdr__pd_write_access_log(pd_req_t *x)
{
    uint64_t end = x->end_ns ? x->end_ns : pdr_now_ns();
    double total = (double)(end - x->t0_ns) / 1e9;
    double ttfb = x->ttfb_ns ? (double)(x->ttfb_ns - x->t0_ns) / 1e9 : -1;
    int status = x->status ? x->status : 499;
    pdr_metrics_count_request(&x->t->m, x->mroute, status, total, ttfb);
    if (x->mode == MODE_PD && status >= 200 && status < 300)
        count_latencies(x, end);
    x->t->m.bytes_out_total += x->bytes_out;
    char phases[512], kv[320]; /* strings: only their first byte needs clearing (832 bytes a request) */
    phases[0] = kv[0] = '\0';
    if (x->room_open) {
        pdr_shim_room_take(x->r, x->rooms[0], kv, sizeof(kv));
        pdr__pd_take_other_rooms(x);
        x->room_open = 0;
    }
    if (x->mode == MODE_PD) {
        x->ph.end_us = end / 1000;
        if (x->at.d_running) { /* the current attempt's decode leg (or solo leg), still going */
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
    char line[2944], error[256], retry_error[sizeof(x->retry_error) + 2] = "null";
    if (x->error_cause != NULL)
        pdr_json_escape(error, sizeof(error), x->error_cause);
    if (x->retry_error[0] != '\0')
        snprintf(retry_error, sizeof(retry_error), "\"%s\"", x->retry_error);
    char room[24] = "null";
    if (x->n_rooms > 0 && x->body != NULL && x->at.ops->rooms)
        snprintf(room, sizeof(room), "%" PRIu64, x->rooms[0]);
    /* Session affinity's outcome for each worker of the last attempt, when it is on. */
    char affinity[80] = "null";
    if (x->conf->affinity.mode != PDR_AFFINITY_OFF) {
        int po = x->at.pw != NULL ? x->affinity_outcome[0] : -1,
            dout = x->at.dw != NULL ? x->affinity_outcome[1] : -1;
        snprintf(affinity, sizeof(affinity), "{\"prefill\":%s%s%s,\"decode\":%s%s%s}", po >= 0 ? "\"" : "",
                 po >= 0 ? pdr_affinity_outcome_names[po] : "null", po >= 0 ? "\"" : "",
                 dout >= 0 ? "\"" : "", dout >= 0 ? pdr_affinity_outcome_names[dout] : "null",
                 dout >= 0 ? "\"" : "");
    }
    /* What the last attempt's pick found cached of the prompt, when its policy knows. */
    char prefix[128] = "null"; /* a fall-back's name: at most 24 bytes (fallback.h) */
    if (x->mode == MODE_PD && x->at.match_known)
        snprintf(prefix, sizeof(prefix), "{\"source\":\"%s\",\"matched\":%zu,\"unit\":\"%s\"%s%s%s}",
                 x->at.match_index ? "index" : "tree", x->at.matched, x->at.match_index ? "tokens" : "bytes",
                 x->at.ids_fallback ? ",\"fallback\":\"" : "", x->at.ids_fallback ? x->at.ids_fallback : "",
                 x->at.ids_fallback ? "\"" : "");
    /* Sidecar mode: what the request's prefill header did (sidecar.c). */
    int sco = x->mode == MODE_PD && x->conf->sidecar.enabled ? x->sc.outcome : -1;
    static const char *names[] = {"/generate", "/v1/completions", "/v1/chat/completions"};
    int n = snprintf(
        line, sizeof(line),
        "{\"ts_us\":%" PRIu64 ",\"request_id\":\"%s\",\"trace_id\":\"%s\",\"path\":\"%s\",\"status\":%d,"
        "\"pool\":%s%s%s,\"prefill\":%s%s%s,\"decode\":%s%s%s,\"room\":%s,\"attempts\":%d,\"queue_ms\":%.3f,"
        "\"ttfb_ms\":%.3f,"
        "\"total_ms\":%.3f,\"bytes_in\":%zu,\"bytes_out\":%" PRIu64 ",\"error\":%s%s%s,\"retry_error\":%s,"
        "\"disagg\":%s%s%s,"
        "\"kv_deadline_ms\":%" PRIu64 ",\"kv_tokens\":%" PRIu64
        ",\"kv_tokens_from\":\"%s\",\"kv_cause\":%s%s%s,\"affinity\":%s,\"prefix\":%s,\"migrations\":%d,"
        "\"prefill_header\":%s%s%s%s%s}"
        "\n",
        pdr_wall_us(), x->request_id, x->fwd.trace_id,
        x->mode == MODE_MODELS ? "/v1/models" : names[x->route], status, x->pool ? "\"" : "",
        x->pool ? x->pool : "null", x->pool ? "\"" : "", x->at.pw ? "\"" : "",
        x->at.pw ? x->at.pw->target : "null", x->at.pw ? "\"" : "", x->at.dw ? "\"" : "",
        x->at.dw ? x->at.dw->target : "null", x->at.dw ? "\"" : "", room, x->attempt + 1,
        (double)x->admit.wait_ns / 1e6, ttfb >= 0 ? ttfb * 1e3 : -1.0, total * 1e3,
        x->req ? x->req->entity.len : 0, x->bytes_out, x->error_cause ? "\"" : "",
        x->error_cause ? error : "null", x->error_cause ? "\"" : "", retry_error, x->disagg >= 0 ? "\"" : "",
        x->disagg >= 0 ? pdr_disagg_decision_names[x->disagg] : "null", x->disagg >= 0 ? "\"" : "", x->kv.ms,
        x->kv.tokens, pdr_kv_tokens_how_names[x->kv.tokens_how], x->kv.cause ? "\"" : "",
        x->kv.cause ? x->kv.cause : "null", x->kv.cause ? "\"" : "", affinity, prefix, x->migrations,
        sco >= 0 ? "\"" : "", sco >= 0 ? pdr_sidecar_outcome_names[sco] : "null", sco >= 0 ? "\"" : "",
        phases, kv);
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
