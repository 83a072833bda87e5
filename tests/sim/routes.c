/*
 * pdsim's route dispatch and its routes other than generation: /pdsim/stats, /pdsim/fault, the last
 * request's headers, health, models. Loop thread only.
 */
#include <time.h>

#include "server_internal.h"

static void send_stats(h2o_req_t *req)
{
    json_t *last = json_array();
    size_t n = sim__state.last_pos < SIM_LAST_MAX ? sim__state.last_pos : SIM_LAST_MAX;
    for (size_t k = sim__state.last_pos - n; k < sim__state.last_pos; k++)
        json_array_append(last, sim__state.last[k % SIM_LAST_MAX]);
    json_t *o = json_pack(
        "{s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:o}", "role", sim__role_name(sim__state.opts.role), "requests",
        (json_int_t)sim__state.requests, "completed", (json_int_t)sim__state.completed, "cancelled",
        (json_int_t)sim__state.cancelled, "errors", (json_int_t)sim__state.errors, "resets",
        (json_int_t)sim__state.resets, "inflight", (json_int_t)sim__state.nreqs, "kv_bytes_received",
        (json_int_t)sim__state.kv_rx, "kv_bytes_sent", (json_int_t)sim__state.kv_tx, "last", last);
    json_t *arr = json_array(), *ports = json_object();
    size_t na = sim__state.arrivals_pos < SIM_LAST_MAX ? sim__state.arrivals_pos : SIM_LAST_MAX;
    for (size_t k = sim__state.arrivals_pos - na; k < sim__state.arrivals_pos; k++)
        json_array_append_new(arr, json_integer((json_int_t)sim__state.arrivals_us[k % SIM_LAST_MAX]));
    for (size_t i = 0; i < sim__state.n_by_port; i++) {
        char key[24];
        snprintf(key, sizeof(key), "%lld", (long long)sim__state.by_port[i][0]);
        json_object_set_new(ports, key, json_integer((json_int_t)sim__state.by_port[i][1]));
    }
    json_object_set_new(o, "arrivals_us", arr);
    json_object_set_new(o, "by_bootstrap_port", ports);
    json_object_set_new(o, "kv_link_failures", json_integer((json_int_t)sim__state.kv_link_failures));
    sim__vllm_stats(o);
    json_object_set_new(o, "local_prefills", json_integer((json_int_t)sim__state.local_prefills));
    json_object_set_new(o, "inflight_max", json_integer((json_int_t)sim__state.active_max));
    json_t *tr = json_object();
    for (size_t k = 0; k < sizeof(sim__ticket_reasons) / sizeof(sim__ticket_reasons[0]); k++)
        json_object_set_new(tr, sim__ticket_reasons[k],
                            json_integer((json_int_t)sim__state.ticket_refused[k]));
    json_object_set_new(o, "tickets",
                        json_pack("{s:b,s:I,s:o}", "enabled", sim__state.opts.n_ticket_keys > 0, "accepted",
                                  (json_int_t)sim__state.tickets_accepted, "refused", tr));
    json_object_set_new(o, "kv_parts",
                        json_pack("{s:I,s:I,s:I,s:I,s:I,s:I}", "parts", (json_int_t)sim__state.opts.kv_parts,
                                  "rooms", (json_int_t)sim__state.parts_rooms, "published",
                                  (json_int_t)sim__state.parts_published, "moved_at_compute_end",
                                  (json_int_t)sim__state.parts_moved_at_end, "bytes",
                                  (json_int_t)sim__state.parts_bytes, "tail_us_last",
                                  (json_int_t)sim__state.kv_tail_us_last));
    json_t *rids = json_array();
    size_t nr = sim__state.aborted_pos < SIM_LAST_MAX ? sim__state.aborted_pos : SIM_LAST_MAX;
    for (size_t k = sim__state.aborted_pos - nr; k < sim__state.aborted_pos; k++)
        json_array_append_new(rids, json_string(sim__state.aborted_rids[k % SIM_LAST_MAX]));
    json_object_set_new(o, "aborts",
                        json_pack("{s:I,s:I,s:I,s:I,s:o}", "calls", (json_int_t)sim__state.abort_calls,
                                  "matched", (json_int_t)sim__state.abort_matched, "aborted",
                                  (json_int_t)sim__state.aborted, "unknown",
                                  (json_int_t)sim__state.abort_unknown, "rids", rids));
    json_object_set_new(o, "tokens_streamed", json_integer((json_int_t)sim__state.tokens_streamed));
    json_object_set_new(o, "kv_capacity_bytes", json_integer((json_int_t)sim__state.opts.kv_capacity_bytes));
    json_object_set_new(o, "kv_used_bytes", json_integer((json_int_t)sim__state.kv_used));
    json_object_set_new(o, "kv_used_max_bytes", json_integer((json_int_t)sim__state.kv_used_max));
    json_object_set_new(o, "kv_capacity_refusals", json_integer((json_int_t)sim__state.kv_capacity_refusals));
    if (sim__state.shim != NULL) {
        uint8_t inst[16];
        char hex[33];
        pdshim_instance_id(sim__state.shim, inst);
        for (int i = 0; i < 16; i++)
            snprintf(hex + 2 * i, 3, "%02x", inst[i]);
        uint64_t sent = 0, failed = 0, dropped = 0;
        pdshim_events_stats(sim__state.shim, &sent, &failed, &dropped);
        json_object_set_new(o, "instance_id", json_string(hex));
        json_object_set_new(o, "event_batches_sent", json_integer((json_int_t)sent));
        json_object_set_new(o, "event_batches_failed", json_integer((json_int_t)failed));
        json_object_set_new(o, "events_dropped", json_integer((json_int_t)dropped));
    }
    pdsim_pcache_stats_t pc = {0};
    if (sim__state.pcache != NULL)
        pdsim_pcache_stats(sim__state.pcache, &pc);
    json_object_set_new(o, "prefix_cache",
                        json_pack("{s:b,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "enabled", sim__state.pcache != NULL,
                                  "hit_tokens", (json_int_t)pc.hit_tokens, "miss_tokens",
                                  (json_int_t)pc.miss_tokens, "blocks", (json_int_t)pc.blocks, "max_blocks",
                                  (json_int_t)pc.max_blocks, "block_tokens", (json_int_t)pc.block_tokens,
                                  "inserted_blocks", (json_int_t)pc.inserted_blocks, "evicted_blocks",
                                  (json_int_t)pc.evicted_blocks));
    pdsim_kvev_stats_t ks;
    pdsim_kvev_stats(&ks);
    json_object_set_new(o, "kv_events",
                        json_pack("{s:b,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "enabled", ks.enabled, "messages",
                                  (json_int_t)ks.messages, "dropped", (json_int_t)ks.dropped, "malformed",
                                  (json_int_t)ks.malformed, "events", (json_int_t)ks.events, "next_seq",
                                  (json_int_t)ks.next_seq, "replays", (json_int_t)ks.replays, "replayed",
                                  (json_int_t)ks.replayed));
    sim__send_json(req, 200, o);
    json_decref(o);
}

/* The requests on pdsim now, of one data-parallel rank (rank < 0: all): every request runs at once (pdsim
 * has no queue), so none waits. */
static uint64_t running_now(int rank)
{
    if (rank < 0)
        return (uint64_t)sim__state.nreqs;
    uint64_t n = 0;
    for (const pdr_dlink_t *l = sim__state.reqs.head; l != NULL; l = l->next)
        n += PDR_DLINK_ITEM(l, sim_req_t, link)->dp_rank == rank;
    return n;
}

/* KV in use as a fraction of --kv-capacity-bytes (0 without a capacity). */
static double kv_usage_now(void)
{
    uint64_t cap = (uint64_t)sim__state.opts.kv_capacity_bytes;
    return cap > 0 ? (double)sim__state.kv_used / (double)cap : 0.0;
}

/* sglang's GET /get_load: one entry per data-parallel rank (--dp-size) with its current fields (dp_rank,
 * num_reqs = running + waiting, num_waiting_reqs, num_tokens, num_pending_tokens, ts_tic); pdsim's tokens
 * are its requests in flight, none pending. A request counts on the rank it named (else rank 0). */
static void send_get_load(h2o_req_t *req)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t ranks = sim__state.opts.dp_size > 0 ? sim__state.opts.dp_size : 1;
    json_t *a = json_array();
    for (int64_t r = 0; r < ranks && a != NULL; r++) {
        uint64_t n = running_now((int)r);
        json_array_append_new(a, json_pack("{s:I,s:I,s:i,s:I,s:i,s:f}", "dp_rank", (json_int_t)r, "num_reqs",
                                           (json_int_t)n, "num_waiting_reqs", 0, "num_tokens", (json_int_t)n,
                                           "num_pending_tokens", 0, "ts_tic",
                                           (double)ts.tv_sec + (double)ts.tv_nsec / 1e9));
    }
    sim__send_json(req, 200, a);
    json_decref(a);
}

/* vLLM's GET /metrics: its scheduler gauges under vLLM's names and labels (model_name, engine), from
 * pdsim's state, with a histogram's lines around them as vLLM writes them. */
static void send_vllm_metrics(h2o_req_t *req)
{
    char body[2048];
    const char *m = sim__state.opts.model;
    int n = snprintf(body, sizeof(body),
                     "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
                     "# TYPE vllm:num_requests_running gauge\n"
                     "vllm:num_requests_running{engine=\"0\",model_name=\"%s\"} %llu.0\n"
                     "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
                     "# TYPE vllm:num_requests_waiting gauge\n"
                     "vllm:num_requests_waiting{engine=\"0\",model_name=\"%s\"} 0.0\n"
                     "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
                     "# TYPE vllm:kv_cache_usage_perc gauge\n"
                     "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"%s\"} %.6f\n"
                     "# HELP vllm:request_success_total Count of successfully processed requests.\n"
                     "# TYPE vllm:request_success_total counter\n"
                     "vllm:request_success_total{engine=\"0\",finished_reason=\"stop\",model_name=\"%s\"} "
                     "%llu.0\n",
                     m, (unsigned long long)running_now(-1), m, m, kv_usage_now(), m,
                     (unsigned long long)sim__state.completed);
    if (n < 0 || (size_t)n >= sizeof(body)) {
        sim__send_error(req, 500, "metrics page too long (the model name)");
        return;
    }
    sim__send_body(req, 200, "text/plain; version=0.0.4; charset=utf-8", body, (size_t)n);
}

static json_t *faults_obj(void)
{
    const pdsim_faults_t *f = &sim__state.faults;
    return json_pack("{s:b,s:i,s:i,s:b,s:I,s:I,s:I,s:b,s:I,s:i,s:b,s:I,s:b,s:I,s:i,s:b,s:b}", "fail_health",
                     f->fail_health, "health_status", f->health_status, "fail_status", f->fail_status,
                     "hang_before_headers", f->hang_before_headers, "drip_ms", (json_int_t)f->drip_ms,
                     "reset_after_tokens", (json_int_t)f->reset_after_tokens, "stall_after_tokens",
                     (json_int_t)f->stall_after_tokens, "stall_kv", f->stall_kv, "die_after",
                     (json_int_t)f->die_after, "fail_after_kv", f->fail_after_kv, "stream_head_before_kv",
                     f->stream_head_before_kv, "stall_kv_from_port", (json_int_t)f->stall_kv_from_port,
                     "reset_answer", f->reset_answer, "fail_kv_from_port", (json_int_t)f->fail_kv_from_port,
                     "load_status", f->load_status, "load_garbage", f->load_garbage, "hang_abort",
                     f->hang_abort);
}

void sim__set_die_after(int64_t n)
{
    sim__state.faults.die_after = n;
    sim__state.die_at = n > 0 ? sim__state.completed + (uint64_t)n : 0;
}

static int fault_int(json_t *body, const char *key, int64_t min, int64_t max, int64_t *out)
{
    json_t *v = json_object_get(body, key);
    if (v == NULL)
        return 0;
    if (json_is_boolean(v)) {
        *out = json_is_true(v);
    } else if (json_is_integer(v) && json_integer_value(v) >= min && json_integer_value(v) <= max) {
        *out = json_integer_value(v);
    } else if (json_is_null(v)) {
        *out = 0;
    } else {
        return PDR_EINVAL;
    }
    return 0;
}

static void handle_fault(h2o_req_t *req)
{
    json_error_t jerr;
    json_t *body = json_loadb(req->entity.base, req->entity.len, 0, &jerr);
    if (!json_is_object(body)) {
        json_decref(body);
        sim__send_error(req, 400, "malformed JSON body: expected an object of fault knobs");
        return;
    }
    pdsim_faults_t f = sim__state.faults;
    int64_t die = f.die_after, v;
    int bad = 0;
    if (json_is_true(json_object_get(body, "reset"))) {
        memset(&f, 0, sizeof(f));
        die = 0;
    }
#define KNOB(key, field, min, max)                                                                           \
    v = f.field;                                                                                             \
    if (fault_int(body, key, min, max, &v) != 0)                                                             \
        bad = 1;                                                                                             \
    else                                                                                                     \
        f.field = v;
    KNOB("fail_health", fail_health, 0, 1)
    KNOB("fail_status", fail_status, 0, 599)
    KNOB("fail_after_kv", fail_after_kv, 0, 599)
    KNOB("health_status", health_status, 0, 599)
    KNOB("hang_before_headers", hang_before_headers, 0, 1)
    KNOB("drip_ms", drip_ms, 0, 3600000)
    KNOB("reset_after_tokens", reset_after_tokens, 0, PDSIM_MAX_TOKENS)
    KNOB("stall_after_tokens", stall_after_tokens, 0, PDSIM_MAX_TOKENS)
    KNOB("stall_kv", stall_kv, 0, 1)
    KNOB("stream_head_before_kv", stream_head_before_kv, 0, 1)
    KNOB("stall_kv_from_port", stall_kv_from_port, 0, 65535)
    KNOB("reset_answer", reset_answer, 0, 1)
    KNOB("fail_kv_from_port", fail_kv_from_port, 0, 65535)
    KNOB("hang_abort", hang_abort, 0, 1)
    KNOB("load_status", load_status, 0, 599)
    KNOB("load_garbage", load_garbage, 0, 1)
#undef KNOB
    int64_t kv_drop = -1, kv_bad = -1;
    if (fault_int(body, "kv_events_drop_every", 0, INT32_MAX, &kv_drop) != 0 ||
        fault_int(body, "kv_events_malformed", 0, 1000, &kv_bad) != 0)
        bad = 1;
    int die_set = json_object_get(body, "die_after") != NULL || json_is_true(json_object_get(body, "reset"));
    if (fault_int(body, "die_after", 0, INT32_MAX, &die) != 0)
        bad = 1;
    if (fault_int(body, "prefill_us_per_token", 0, 10000000, &sim__state.opts.prefill_us_per_token) != 0 ||
        fault_int(body, "decode_us_per_token", 0, 10000000, &sim__state.opts.decode_us_per_token) != 0)
        bad = 1;
    json_decref(body);
    if (bad || (f.fail_status != 0 && f.fail_status < 400) ||
        (f.health_status != 0 && f.health_status < 200)) {
        sim__send_error(
            req, 400,
            "bad fault knob: booleans, or integers in range (fail_status 400-599 or 0, health_status "
            "200-599 or 0)");
        return;
    }
    sim__state.faults = f;
    if (die_set)
        sim__set_die_after(die);
    pdsim_kvev_fault(kv_drop, kv_bad);
    json_t *o = faults_obj();
    sim__send_json(req, 200, o);
    json_decref(o);
}

static int path_is(const h2o_req_t *req, const char *p)
{
    size_t n = strlen(p);
    return req->path_normalized.len == n && memcmp(req->path_normalized.base, p, n) == 0;
}

static int method_is(const h2o_req_t *req, const char *m)
{
    size_t n = strlen(m);
    return req->method.len == n && memcmp(req->method.base, m, n) == 0;
}

/* Tests: the header fields of the last request of each kind, as h2o received them ([[name, value], ...]),
 * answered by GET /pdsim/last_headers. */
static void record_headers(h2o_req_t *req)
{
    int kind = path_is(req, "/health") || path_is(req, "/health_generate") ? 1
               : path_is(req, "/v1/models")                                ? 2
                                                                           : 0;
    if (kind == 0 && !path_is(req, "/generate") && !path_is(req, "/v1/completions") &&
        !path_is(req, "/v1/chat/completions"))
        return;
    json_t *a = json_array();
    for (size_t i = 0; a != NULL && i < req->headers.size; i++) {
        const h2o_header_t *e = &req->headers.entries[i];
        json_array_append_new(a,
                              json_pack("[s%s%]", e->name->base, e->name->len, e->value.base, e->value.len));
    }
    if (a == NULL)
        return;
    json_decref(sim__state.last_headers[kind]);
    sim__state.last_headers[kind] = a;
}

static void send_last_headers(h2o_req_t *req)
{
    json_t *o = json_pack("{s:O?,s:O?,s:O?}", "generate", sim__state.last_headers[0], "health",
                          sim__state.last_headers[1], "models", sim__state.last_headers[2]);
    sim__send_json(req, 200, o);
    json_decref(o);
}

/* The rid of a request's body (a string, or one per item in a batch) equals rid. */
static int rid_matches(const sim_req_t *ctx, const char *rid)
{
    json_t *v = ctx->body != NULL ? json_object_get(ctx->body, "rid") : NULL, *e;
    size_t i;
    if (json_is_string(v))
        return strcmp(json_string_value(v), rid) == 0;
    json_array_foreach(v, i, e)
    {
        if (json_is_string(e) && strcmp(json_string_value(e), rid) == 0)
            return 1;
    }
    return 0;
}

/* POST /abort_request, sglang's: {"rid": RID} aborts the live request whose rid (or a batch item's) is RID,
 * {"abort_all": true} every live request; answered 200 with an empty body, whether anything matched or not
 * (sglang ignores an unknown rid). hang_abort: accepted and never answered. */
static void handle_abort(h2o_req_t *req)
{
    sim__state.abort_calls++;
    if (sim__state.faults.hang_abort)
        return; /* h2o frees the request when the caller closes the connection */
    json_error_t jerr;
    json_t *body = json_loadb(req->entity.base, req->entity.len, 0, &jerr);
    json_t *rid = json_object_get(body, "rid");
    int all = json_is_true(json_object_get(body, "abort_all"));
    if (!json_is_object(body) || (!all && !json_is_string(rid))) {
        json_decref(body);
        sim__send_error(req, 400, "abort_request: expected {\"rid\": string} or {\"abort_all\": true}");
        return;
    }
    size_t n = 0;
    pdr_dlink_t *l = sim__state.reqs.head;
    while (l != NULL) {
        sim_req_t *ctx = PDR_DLINK_ITEM(l, sim_req_t, link);
        l = l->next;
        if (!sim__req_is_live(ctx) || (!all && !rid_matches(ctx, json_string_value(rid))))
            continue;
        n++;
        sim__state.abort_matched++;
        /* A caller that closed the request's connection before it sent the abort (a router cancels its leg,
         * then aborts) is gone: the request is cancelled, as the peek would find on its next turn. */
        if (sim__req_peer_closed(ctx))
            sim__req_disconnected(ctx);
        else
            sim__abort(ctx);
    }
    snprintf(sim__state.aborted_rids[sim__state.aborted_pos++ % SIM_LAST_MAX], 64, "%s",
             all ? "*" : json_string_value(rid));
    if (n == 0)
        sim__state.abort_unknown++;
    json_decref(body);
    sim__send_body(req, 200, "text/plain", "", 0);
}

int sim__on_req(h2o_handler_t *self, h2o_req_t *req)
{
    (void)self;
    record_headers(req);
    static const struct {
        const char *path;
        enum sim_route route;
    } gen_routes[] = {{"/generate", ROUTE_GENERATE},
                      {"/v1/completions", ROUTE_COMPLETIONS},
                      {"/v1/chat/completions", ROUTE_CHAT}};
    for (size_t i = 0; i < sizeof(gen_routes) / sizeof(gen_routes[0]); i++) {
        if (path_is(req, gen_routes[i].path)) {
            if (!method_is(req, "POST"))
                sim__send_error(req, 405, "use POST");
            else if (sim__state.shutting_down)
                sim__send_error(req, 503, "pdsim is shutting down");
            else
                sim__handle_generate(req, gen_routes[i].route, gen_routes[i].path);
            return 0;
        }
    }
    if (path_is(req, "/health") || path_is(req, "/health_generate")) {
        if (sim__state.faults.fail_health || sim__state.shutting_down)
            sim__send_body(req, 503, "text/plain", "unhealthy\n", 10);
        else if (sim__state.faults.health_status != 0)
            sim__send_body(req, sim__state.faults.health_status, "text/plain", "health_status\n", 14);
        else
            sim__send_body(req, 200, "text/plain", "ok", 2);
    } else if (path_is(req, "/v1/models")) {
        json_t *o =
            json_pack("{s:s,s:[{s:s,s:s,s:i,s:s,s:s}]}", "object", "list", "data", "id",
                      sim__state.opts.model, "object", "model", "created", 0, "owned_by", "pdsim", "root",
                      sim__state.opts.model_path ? sim__state.opts.model_path : sim__state.opts.model);
        sim__send_json(req, 200, o);
        json_decref(o);
    } else if (path_is(req, "/get_model_info") || path_is(req, "/model_info")) {
        json_t *o = json_pack("{s:s,s:s,s:b}", "model_path", sim__state.opts.model, "tokenizer_path",
                              sim__state.opts.model, "is_generation", 1);
        sim__send_json(req, 200, o);
        json_decref(o);
    } else if ((path_is(req, "/get_server_info") || path_is(req, "/server_info")) &&
               sim__state.opts.no_server_info) {
        sim__send_error(req, 404, "no such route on pdsim (--no-server-info)");
    } else if (path_is(req, "/get_server_info") || path_is(req, "/server_info")) {
        /* sglang's names (its server arguments, dataclasses.asdict of ServerArgs). */
        const pdsim_opts_t *so = &sim__state.opts;
        json_t *o = json_pack(
            "{s:s,s:o,s:s,s:s,s:s,s:I,s:I,s:s,s:I,s:I}", "model_path",
            so->model_path ? so->model_path : so->model, "revision",
            so->revision ? json_string(so->revision) : json_null(), "dtype", so->dtype ? so->dtype : "auto",
            "kv_cache_dtype", so->kv_cache_dtype ? so->kv_cache_dtype : "auto",
            "disaggregation_transfer_backend", so->transfer_backend ? so->transfer_backend : "mooncake",
            "page_size", (json_int_t)(so->page_size > 0 ? so->page_size : 1), "tp_size",
            (json_int_t)(so->tp_size > 0 ? so->tp_size : 1), "disaggregation_mode", sim__role_name(so->role),
            "port", (json_int_t)so->port, "dp_size", (json_int_t)(so->dp_size > 0 ? so->dp_size : 1));
        sim__send_json(req, 200, o);
        json_decref(o);
    } else if (path_is(req, "/flush_cache")) {
        if (method_is(req, "POST"))
            sim__send_body(req, 200, "text/plain", "Cache flushed.\n", 15);
        else
            sim__send_error(req, 405, "use POST");
    } else if ((path_is(req, "/get_load") || path_is(req, "/metrics")) && sim__state.faults.load_status) {
        sim__send_error(req, sim__state.faults.load_status, "load_status fault");
    } else if ((path_is(req, "/get_load") || path_is(req, "/metrics")) && sim__state.faults.load_garbage) {
        sim__send_body(req, 200, "text/html", "<html>busy</html>\n", 18);
    } else if (path_is(req, "/get_load")) {
        send_get_load(req);
    } else if (path_is(req, "/metrics")) {
        send_vllm_metrics(req);
    } else if (path_is(req, "/abort_request")) {
        if (method_is(req, "POST"))
            handle_abort(req);
        else
            sim__send_error(req, 405, "use POST");
    } else if (path_is(req, "/pdsim/stats")) {
        send_stats(req);
    } else if (path_is(req, "/pdsim/last_headers")) {
        send_last_headers(req);
    } else if (path_is(req, "/pdsim/fault")) {
        if (method_is(req, "POST")) {
            handle_fault(req);
        } else {
            json_t *o = faults_obj();
            sim__send_json(req, 200, o);
            json_decref(o);
        }
    } else {
        sim__send_error(req, 404, "no such route on pdsim");
    }
    return 0;
}
