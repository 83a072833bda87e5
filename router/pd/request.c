/*
 * A PD request's lifetime: the entry points (pdr_pd_handle validates the body once and admits the request,
 * pdr_models_handle relays /v1/models), the request's allocation, its end when h2o disposes of the client
 * request (on_dispose: the access log line, the legs still running, the linger of a prefill leg read to its
 * end) and its memory freed in the timer's close callback. Loop thread of the request.
 */
#include "front.h"
#include "pd.h"
#include "pd_internal.h"
#include "policies.h"
#include "reply.h"

static void free_req(uv_handle_t *h);

/* A lingering request's prefill leg has ended: the request goes. */
void pdr__pd_linger_end(pd_req_t *x)
{
    pd_set_state(x, PD_DONE);
    x->t->live--;
    x->t->lingering--;
    pdr__pd_kick_cancel(x);
    uv_timer_stop(&x->timer);
    uv_close((uv_handle_t *)&x->timer, free_req);
}

static void free_req(uv_handle_t *h)
{
    pd_req_t *x = h->data;
    pdr__pd_forget_room(x); /* the shims' table must not point at x once it is freed */
    pdr_kv_release(&x->kv.hold);
    pdr_worker_unref(x->at.pw);
    pdr_worker_unref(x->at.dw);
    pdr_config_unref((pdr_config_t *)x->conf);
    pdr_pdreq_clear(&x->pr);
    free(x->mig_body);
    pdr_resume_free(&x->mig);
    free(x->body);
    free(x->dbody);
    free(x->vl.release);
    if (x->rooms != x->room_space)
        free(x->rooms);
    free(x->kv.room_done);
    pdr_buf_free(&x->pbody);
    pdr_buf_free(&x->rl.pending);
    pdr_buf_free(&x->rl.sending);
    pdr_buf_free(&x->rl.sse_carry);
    if (x->rl.p_json)
        json_decref(x->rl.p_json);
    free(x);
}

/* A lingering request's prefill did not answer within timeouts.kv_transfer_ms. */
static void on_linger_deadline(uv_timer_t *t)
{
    pd_req_t *x = t->data;
    if (x->state != PD_LINGER)
        return;
    if (x->at.p_running) {
        pdr_leg_cancel(&x->pleg);
        pdr__pd_release_leg(x, 1);
        pdr__pd_late_prefill_failure(x, PDR_CAUSE_KV_DEADLINE, "no answer within timeouts.kv_transfer_ms");
    }
    pdr__pd_linger_end(x);
}

static void on_dispose(void *p)
{
    pd_req_t *x = *(pd_req_t **)p;
    if (!pd_final_sent(x) && !x->errored && x->error_cause == NULL)
        pdr__pd_note_client_abort(x);
    if (x->req->version >= 0x200 && x->client_aborted)
        pdr__note_client_reset(x->t, x->req); /* may close the connection: a reset flood */
    /* The client's answer is complete and the prefill has not answered yet (pd.relay first_byte): its
     * leg is read to its end, so that the prefill sees no abort, and its outcome is counted. */
    int linger = x->at.p_running && x->counted_inflight && pd_final_sent(x) && !x->broken && !x->stopped &&
                 !x->errored && !x->client_aborted;
    if (linger) {
        if (x->at.d_running) {
            pdr_leg_cancel(&x->dleg);
            pdr__pd_release_leg(x, 0);
        }
    } else {
        pdr__pd_cancel_legs(x);
    }
    if (!pd_started(x) && x->counted_inflight && !x->resuming)
        x->t->m.waiting--;
    pdr_kv_release(&x->kv.hold);                    /* the decode's answer is over: its KV is free */
    pdr_admit_leave(x->t, x->t->config, &x->admit); /* its slot, or its place in the queue */
    pdr_kv_release(&x->kv.hold);                    /* the decode's answer is over: its KV is free */
    if (x->retry_slot) {
        x->retry_slot = 0;
        pdr_retry_release();
    }
    x->backoff_ns = 0;
    pdr__pd_write_access_log(x);
    x->req = NULL;
    if (x->counted_inflight) {
        __atomic_sub_fetch(&x->r->inflight, 1, __ATOMIC_RELAXED);
        if (!linger)
            x->t->live--;
    }
    if (linger) {
        pd_set_state(x, PD_LINGER);
        x->t->lingering++;
        uint64_t now = pdr_now_ns();
        uint64_t ms = x->at.kv_deadline_ns > now ? (x->at.kv_deadline_ns - now + 999999) / 1000000 : 1;
        x->armed_ns = 0;
        pdr__pd_kick_cancel(x);
        uv_timer_start(&x->timer, on_linger_deadline, ms, 0);
        return;
    }
    pd_set_state(x, PD_DONE);
    pdr__pd_kick_cancel(x);
    uv_timer_stop(&x->timer);
    uv_close((uv_handle_t *)&x->timer, free_req);
}

/* The state machine the request's parts hand over to (pd_internal.h). */
static const pd_machine_t machine = {
    .advance = pdr__pd_advance,
    .start_attempt = pdr__pd_start_attempt,
    .begin = pdr__pd_begin,
    .linger_end = pdr__pd_linger_end,
    .on_timer = pdr__pd_on_timer,
};

static pd_req_t *new_req(pdr_thread_t *t, h2o_req_t *req, int mroute)
{
    pd_req_t *x = malloc(sizeof(*x));
    if (x == NULL)
        return NULL;
    memset(x, 0, PD_REQ_TAIL); /* the tail is written before it is read (pd_internal.h) */
    x->sm = &machine;
    x->last_fail_msg[0] = x->retry_error[0] = x->rank_line[0] = '\0';
    x->t = t;
    x->r = t->r;
    x->conf = pdr_config_ref(t->config);
    pdr_config_pool_timeouts(x->conf, NULL, &x->to);
    x->req = req;
    x->mroute = mroute;
    x->t0_ns = pdr_now_ns();
    x->last_data_ns = x->t0_ns;
    x->disagg = -1;
    x->kv.ms = (uint64_t)x->to.kv_transfer_ms;
    x->kv.tokens_how = PDR_KVT_NONE;
    pdr_fwd_build(&x->fwd, req, x->conf); /* the request id, the trace and the forwarded headers */
    if (x->conf->affinity.mode != PDR_AFFINITY_OFF)
        pdr__pd_session_key(x, req);
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
        pdr__pd_start_attempt(x);
    pdr_admit_started(&x->admit);
}

/* The request has its slot: its first attempt. */
void pdr__pd_begin(pd_req_t *x, int deferred)
{
    if (deferred && x->req->version >= 0x200) {
        /* HTTP/2: the legs go out on the next loop turn, after h2o has read the rest of what the client
         * sent with this request, so that a stream the client resets at once (the rapid-reset pattern)
         * costs the workers nothing: on_dispose runs first and nothing is started. */
        x->armed_ns = 0;
        pdr__pd_kick_cancel(x);
        uv_timer_start(&x->timer, on_deferred_start, 0, 0);
        return;
    }
    pdr__pd_start_attempt(x);
    pdr_admit_started(&x->admit);
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

/* The answer to a /generate request for a protocol that does not serve it. */
/* The policy reads the KV event index, hence the prompt's token ids (precise_prefix). */
static int reads_kv_index(pdr_policy_kind_t kind)
{
    const pdr_policy_ops_t *ops = pdr_policy_get(kind);
    return ops != NULL && (ops->flags & PDR_POLICY_F_KV_INDEX) != 0;
}

static const char *no_generate_msg(char *buf, size_t len, pdr_protocol_t protocol)
{
    snprintf(
        buf, len,
        "protocol %s serves /v1/completions and /v1/chat/completions; /generate is sglang's native route",
        pdr__pd_proto(protocol)->name);
    return buf;
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
    char no_generate[160];
    if (route == PDR_ROUTE_GENERATE && !pdr__pd_proto(c->protocol)->generate)
        return refuse(t, req, route, mroute, 400, "invalid_request_error",
                      no_generate_msg(no_generate, sizeof(no_generate), c->protocol), 0, "route_not_served");
    pdr_pdreq_t pr;
    char err[256];
    pdr_jmember_t space[PD_MEMBERS]; /* copied into the request (members) when the body is accepted */
    int prc = pdr_pdreq_parse_in(route, req->entity.base, req->entity.len, &pr, space, PD_MEMBERS, err,
                                 sizeof(err));
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
    if (route == PDR_ROUTE_GENERATE && !pdr__pd_proto(pc.protocol)->generate) { /* a pool of pools: */
        pdr_pdreq_clear(&pr);
        return refuse(t, req, route, mroute, 400, "invalid_request_error",
                      no_generate_msg(no_generate, sizeof(no_generate), pc.protocol), 0, "route_not_served");
    }
    /* Sidecar mode: the prefill the header names must be one of the pool's (sidecar.c). */
    pd_sidecar_t sc;
    int sco = pdr__pd_sidecar_read(t, c, req, pc.name, &sc, pmsg, sizeof(pmsg));
    if (sco == PDR_SC_MALFORMED || sco == PDR_SC_NOT_IN_POOL) {
        pdr_pdreq_clear(&pr);
        if (sco == PDR_SC_MALFORMED)
            return refuse(t, req, route, mroute, 400, "invalid_request_error", pmsg, 0,
                          "prefill_header_malformed");
        return refuse(t, req, route, mroute, 403, "permission_error", pmsg, 0, "prefill_not_in_pool");
    }
    pd_req_t *x = new_req(t, req, mroute);
    if (x == NULL) {
        pdr_pdreq_clear(&pr);
        pdr_send_error(req, 503, "service_unavailable", "out of memory", 1);
        return 0;
    }
    x->sc = sc;
    x->mode = MODE_PD;
    x->route = route;
    x->traced = pdr_trace_on() && (x->fwd.trace.flags & 0x01);
    if (x->traced)
        pdr__pd_random_span(x->root_span);
    x->pool = pc.name; /* lives as long as x->conf (== c) */
    x->precise = reads_kv_index(pc.policy_prefill) || reads_kv_index(pc.policy_decode);
    pdr_config_pool_timeouts(c, &pc, &x->to);
    x->proto = pdr__pd_proto(pc.protocol);
    x->at.ops = x->proto; /* until the first attempt: what the access log reads of it */
    x->pr = pr;
    if (!pr.m_owned) {
        memcpy(x->members, pr.m, pr.n * sizeof(*pr.m));
        x->pr.m = x->members;
    }
    if (c->affinity.mode != PDR_AFFINITY_OFF && !x->has_session)
        pdr__pd_session_body(x);
    if (x->to.kv_transfer_ms_per_1k_tokens > 0) {
        /* The deadline grows with the prompt: its length, counted once per request. */
        struct pdr_tokenizer *tk = pdr_router_tokenizer_for(r, x->pool);
        x->kv.tokens = pdr_kv_prompt_tokens(&x->pr, tk, &x->kv.tokens_how, &x->unknown_model);
        pdr_tokenizer_free(tk);
    }
    x->kv.ms = pdr_kv_deadline_ms(x->to.kv_transfer_ms, x->to.kv_transfer_ms_per_1k_tokens, x->kv.tokens);
    x->at.merge = pr.want_logprobs && x->proto->merge_logprobs; /* vLLM: the decode answers them itself */
    x->merge_wanted = x->at.merge;
    x->mig_possible = c->migration.enabled && pr.stream;
    x->n_rooms = pr.batch ? pr.batch : 1;
    if (x->n_rooms <= PD_ROOMS) {
        x->rooms = x->room_space;
        memset(x->rooms, 0, x->n_rooms * sizeof(uint64_t));
    } else {
        x->rooms = calloc(x->n_rooms, sizeof(uint64_t));
    }
    x->counted_inflight = 1;
    t->m.waiting++;
    __atomic_add_fetch(&r->inflight, 1, __ATOMIC_RELAXED);
    t->live++;
    if (x->rooms == NULL) {
        pdr__pd_fail_response(x, 503, "service_unavailable", "out of memory", 1);
        return 0;
    }
    pdr_admit_tag_t tag;
    pdr__pd_admit_tag(x, c, &tag);
    pdr_admit_result_t adm =
        pdr_admit_enter(t, c, &x->admit, &r->pool, x->pool, (int)pool, &tag, pdr__pd_on_admitted);
    if (adm == PDR_ADMIT_WAIT) {
        x->queue_deadline_ns = tag.deadline_ns;
        pdr__pd_arm_queue_tick(x);
        return 0;
    }
    if (adm != PDR_ADMIT_GO) {
        pdr__pd_admit_refused(x, adm);
        return 0;
    }
    pdr__pd_begin(x, 1);
    return 0;
}

/* GET /v1/models relayed to one decode worker (the router's only non-PD use of the request path). */
static void models_start(pd_req_t *x)
{
    char url[512];
    snprintf(url, sizeof(url), "%s/v1/models", x->at.dw->conf.url);
    if (pdr_leg_start(&x->dleg, x->t->multi, url, NULL, 0, pdr_fwd_leg(&x->fwd), x->to.connect_ms, 0,
                      &pdr__pd_decode_cbs, x) != 0) {
        pdr__pd_fail_response(x, 503, "service_unavailable", "out of memory", 1);
        return;
    }
    x->at.d_running = 1;
    pdr_worker_track(x->at.dw, 1);
    pdr__pd_arm_timer(x);
}

static const pd_proto_ops_t models_ops = {
    .name = "models",
    .start = models_start,
    .answer_role = PDR_ROLE_DECODE,
    .answer_name = "decode",
};

const pd_proto_ops_t *pdr__pd_proto(pdr_protocol_t protocol)
{
    static const pd_proto_ops_t *const tables[] = {
        [PDR_PROTO_SGLANG] = &pdr__pd_sglang_ops,
        [PDR_PROTO_VLLM] = &pdr__pd_vllm_ops,
        [PDR_PROTO_PDSHIM] = &pdr__pd_pdshim_ops,
    };
    return tables[protocol]; /* config.c accepts only these */
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
    x->proto = &models_ops;
    x->at.ops = x->proto;
    pdr__pd_start_attempt(x);
    return 0;
}
