/*
 * pdsim's answers: the JSON objects of /generate and of the OpenAI routes, whole or streamed as SSE events
 * (sim__pump() sends them at the configured pace, coalesced up to SIM_SEND_HIWAT per h2o_send), and the hard
 * resets of --reset-after-tokens. Loop thread only.
 */
#include "server_internal.h"

static uint64_t total_prompt_tokens(const sim_req_t *ctx)
{
    uint64_t n = 0;
    for (size_t i = 0; i < ctx->n_items; i++)
        n += ctx->items[i].toks.n;
    return n;
}

static uint64_t total_cached_tokens(const sim_req_t *ctx)
{
    uint64_t n = 0;
    for (size_t i = 0; i < ctx->n_items; i++)
        n += ctx->items[i].cached;
    return n;
}

/* The words of output tokens [from, to), each with a leading space, as a BPE detokenizer gives them (the
 * prompt's text followed by this text tokenizes to the prompt's ids followed by the output's). NULL when
 * the item has not generated them (see extend_items). */
static json_t *words_json(const sim_item_t *it, uint64_t from, uint64_t to)
{
    if (to > it->gen.n)
        return NULL;
    size_t cap = 16 + (to - from) * 10, len = 0;
    char *s = malloc(cap);
    if (s == NULL)
        return NULL;
    for (uint64_t j = from; j < to; j++) {
        const char *w = pdsim_gen_word(&it->gen, j, NULL);
        size_t wl = strlen(w);
        if (len + wl + 2 > cap) {
            cap = cap * 2 + wl;
            char *n = realloc(s, cap);
            if (n == NULL) {
                free(s);
                return NULL;
            }
            s = n;
        }
        s[len++] = ' ';
        memcpy(s + len, w, wl);
        len += wl;
    }
    json_t *r = json_stringn(s, len);
    free(s);
    return r;
}

/* The token ids of output tokens [0, ntok) (sglang's output_ids). NULL when not generated. */
static json_t *output_ids(const sim_item_t *it, uint64_t ntok)
{
    if (ntok > it->gen.n)
        return NULL;
    json_t *a = json_array();
    for (uint64_t j = 0; j < ntok && a != NULL; j++) {
        int64_t tid;
        pdsim_gen_word(&it->gen, j, &tid);
        if (json_array_append_new(a, json_integer((json_int_t)tid)) != 0) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

/* Generates every item's output up to ntok tokens (an sglang prefill answers none, a vLLM prefill the
 * router's max_tokens). 0 or a PDR_E* code. */
static int extend_items(sim_req_t *ctx, uint64_t ntok)
{
    for (size_t i = 0; i < ctx->n_items; i++) {
        int r = pdsim_gen_extend(&ctx->items[i].gen, (size_t)ntok);
        if (r != 0)
            return r;
    }
    return 0;
}

static json_t *input_logprobs(const sim_item_t *it)
{
    json_t *a = json_array();
    for (size_t i = 0; i < it->toks.n; i++)
        json_array_append_new(
            a, json_pack("[f,I,n]", pdsim_logprob(it->toks.ids[i]), (json_int_t)it->toks.ids[i]));
    return a;
}

static json_t *output_logprobs(const sim_item_t *it, uint64_t ntok)
{
    json_t *a = json_array();
    for (uint64_t j = 0; j < ntok && j < it->gen.n; j++) {
        int64_t tid;
        pdsim_gen_word(&it->gen, j, &tid);
        json_array_append_new(a, json_pack("[f,I,n]", pdsim_logprob(tid), (json_int_t)tid));
    }
    return a;
}

static void item_id(const sim_req_t *ctx, const sim_item_t *it, char *buf, size_t len)
{
    if (ctx->role != PDSIM_ROLE_BOTH)
        snprintf(buf, len, "pdsim-%" PRIu64, it->room);
    else
        snprintf(buf, len, "%s-%zu", ctx->id, it->index);
}

/* One /generate result object for an item after ntok output tokens. */
static json_t *generate_obj(const sim_req_t *ctx, const sim_item_t *it, uint64_t ntok, int final)
{
    char id[64];
    item_id(ctx, it, id, sizeof(id));
    /* An aborted request's reason is sglang's FINISH_ABORT form. */
    json_t *reason =
        !final         ? json_null()
        : ctx->aborted ? json_pack("{s:s,s:s}", "type", "abort", "message", "aborted by POST /abort_request")
                       : json_pack("{s:s,s:I}", "type", "length", "length", (json_int_t)ntok);
    json_t *meta = json_pack("{s:s,s:o,s:I,s:I,s:i}", "id", id, "finish_reason", reason, "prompt_tokens",
                             (json_int_t)it->toks.n, "completion_tokens", (json_int_t)ntok, "cached_tokens",
                             (json_int_t)it->cached);
    if (ctx->return_logprob) {
        json_object_set_new(meta, "input_token_logprobs",
                            ctx->role == PDSIM_ROLE_DECODE ? json_array() : input_logprobs(it));
        if (ctx->role != PDSIM_ROLE_PREFILL)
            json_object_set_new(meta, "output_token_logprobs", output_logprobs(it, ntok));
    }
    json_t *o = json_pack("{s:o,s:o,s:o}", "text", words_json(it, 0, ntok), "output_ids",
                          output_ids(it, ntok), "meta_info", meta);
    if (ctx->batch && ctx->stream)
        json_object_set_new(o, "index", json_integer((json_int_t)it->index));
    return o;
}

/* OpenAI's usage object for ntok output tokens per item (cached tokens only with the prefix cache on).
 * The n choices of a chat request share one prompt, counted once, as sglang's UsageProcessor counts
 * every n-th response's prompt tokens. */
static json_t *usage_obj(const sim_req_t *ctx, uint64_t ntok)
{
    int shared = ctx->route == ROUTE_CHAT && ctx->n_items > 1;
    uint64_t pt = shared ? ctx->items[0].toks.n : total_prompt_tokens(ctx), ct = ntok * ctx->n_items;
    uint64_t cached = shared ? ctx->items[0].cached : total_cached_tokens(ctx);
    json_t *u = json_pack("{s:I,s:I,s:I}", "prompt_tokens", (json_int_t)pt, "completion_tokens",
                          (json_int_t)ct, "total_tokens", (json_int_t)(pt + ct));
    if (u != NULL && sim__state.pcache != NULL)
        json_object_set_new(u, "prompt_tokens_details",
                            json_pack("{s:I}", "cached_tokens", (json_int_t)cached));
    return u;
}

/* The whole non-streaming answer (ntok = tokens per item: 0 on a prefill). */
static json_t *full_obj(const sim_req_t *ctx, uint64_t ntok)
{
    if (ctx->route == ROUTE_GENERATE) {
        if (!ctx->batch)
            return generate_obj(ctx, &ctx->items[0], ntok, 1);
        json_t *a = json_array();
        for (size_t i = 0; i < ctx->n_items; i++)
            json_array_append_new(a, generate_obj(ctx, &ctx->items[i], ntok, 1));
        return a;
    }
    json_t *choices = json_array();
    const char *finish = ctx->aborted ? "abort" : "length"; /* sglang's OpenAI routes: the reason's type */
    for (size_t i = 0; i < ctx->n_items; i++) {
        json_t *text = words_json(&ctx->items[i], 0, ntok);
        if (ctx->route == ROUTE_COMPLETIONS)
            json_array_append_new(choices, json_pack("{s:I,s:o,s:n,s:s}", "index", (json_int_t)i, "text",
                                                     text, "logprobs", "finish_reason", finish));
        else
            json_array_append_new(choices, json_pack("{s:I,s:{s:s,s:o},s:n,s:s}", "index", (json_int_t)i,
                                                     "message", "role", "assistant", "content", text,
                                                     "logprobs", "finish_reason", finish));
    }
    return json_pack("{s:s,s:s,s:I,s:s,s:o,s:o}", "id", ctx->id, "object",
                     ctx->route == ROUTE_COMPLETIONS ? "text_completion" : "chat.completion", "created",
                     (json_int_t)ctx->created, "model", sim__state.opts.model, "choices", choices, "usage",
                     usage_obj(ctx, ntok));
}

/* The usage chunk of a stream whose request asked stream_options.include_usage: the last event before
 * [DONE], with no choices, as OpenAI and sglang's serving_chat / serving_completions send it. */
static json_t *usage_chunk(const sim_req_t *ctx)
{
    return json_pack("{s:s,s:s,s:I,s:s,s:[],s:o}", "id", ctx->id, "object",
                     ctx->route == ROUTE_COMPLETIONS ? "text_completion" : "chat.completion.chunk", "created",
                     (json_int_t)time(NULL), "model", sim__state.opts.model, "choices", "usage",
                     usage_obj(ctx, ctx->max_tokens));
}

static int sendbuf_event(sim_req_t *ctx, json_t *obj);

/* The events that end an aborted stream: one per item with finish_reason abort (after the tokens it had),
 * then [DONE], as sglang ends a stream whose request was aborted. */
static int abort_events(sim_req_t *ctx)
{
    uint64_t ntok = ctx->next_ev / ctx->n_items;
    int r = extend_items(ctx, ntok);
    if (r != 0)
        return r;
    for (size_t i = 0; i < ctx->n_items; i++) {
        const sim_item_t *it = &ctx->items[i];
        json_t *ev;
        if (ctx->route == ROUTE_GENERATE) {
            ev = generate_obj(ctx, it, ntok, 1);
        } else {
            json_t *choice = ctx->route == ROUTE_COMPLETIONS
                                 ? json_pack("{s:I,s:s,s:n,s:s}", "index", (json_int_t)it->index, "text", "",
                                             "logprobs", "finish_reason", "abort")
                                 : json_pack("{s:I,s:{s:s},s:n,s:s}", "index", (json_int_t)it->index, "delta",
                                             "content", "", "logprobs", "finish_reason", "abort");
            ev = json_pack("{s:s,s:s,s:I,s:s,s:[o]}", "id", ctx->id, "object",
                           ctx->route == ROUTE_COMPLETIONS ? "text_completion" : "chat.completion.chunk",
                           "created", (json_int_t)ctx->created, "model", sim__state.opts.model, "choices",
                           choice);
        }
        r = sendbuf_event(ctx, ev);
        if (r != 0)
            return r;
    }
    return sim__sendbuf_append(ctx, "data: [DONE]\n\n", 14);
}

/* One streamed event: item i, step j (output token j; step 0 with no tokens when max_tokens is 0). */
static json_t *stream_obj(const sim_req_t *ctx, const sim_item_t *it, uint64_t j)
{
    uint64_t T = ctx->max_tokens;
    int last = T == 0 || j + 1 == T;
    uint64_t ntok = T == 0 ? 0 : j + 1;
    if (ctx->route == ROUTE_GENERATE)
        return generate_obj(ctx, it, ntok, last);
    json_t *delta = T == 0 ? json_string("") : words_json(it, j, j + 1);
    json_t *choice;
    if (ctx->route == ROUTE_COMPLETIONS) {
        choice = json_pack("{s:I,s:o,s:n,s:o}", "index", (json_int_t)it->index, "text", delta, "logprobs",
                           "finish_reason", last ? json_string("length") : json_null());
    } else {
        json_t *d = json_pack("{s:o}", "content", delta);
        if (j == 0)
            json_object_set_new(d, "role", json_string("assistant"));
        choice = json_pack("{s:I,s:o,s:n,s:o}", "index", (json_int_t)it->index, "delta", d, "logprobs",
                           "finish_reason", last ? json_string("length") : json_null());
    }
    return json_pack("{s:s,s:s,s:I,s:s,s:[o]}", "id", ctx->id, "object",
                     ctx->route == ROUTE_COMPLETIONS ? "text_completion" : "chat.completion.chunk", "created",
                     (json_int_t)ctx->created, "model", sim__state.opts.model, "choices", choice);
}

int sim__sendbuf_append(sim_req_t *ctx, const char *s, size_t len)
{
    return pdr_buf_append(&ctx->send, s, len, SIM_SEND_CAP);
}

static int sendbuf_event(sim_req_t *ctx, json_t *obj)
{
    char *s = obj != NULL ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    if (s == NULL)
        return PDR_ENOMEM;
    int r = sim__sendbuf_append(ctx, "data: ", 6);
    if (r == 0)
        r = sim__sendbuf_append(ctx, s, strlen(s));
    if (r == 0)
        r = sim__sendbuf_append(ctx, "\n\n", 2);
    free(s);
    return r;
}

static void complete_ok(sim_req_t *ctx)
{
    ctx->finished = 1;
    sim__state.completed++;
    sim__req_inactive(ctx);
    if (sim__state.die_at != 0 && sim__state.completed >= sim__state.die_at)
        ctx->die_on_dispose = 1;
    sim__req_release(ctx);
}

/* --reset-after-tokens: abort hard (RST on HTTP/1, RST_STREAM on HTTP/2) in the middle of the body. */
static void hard_reset(sim_req_t *ctx)
{
    if (ctx->req->version < 0x200) {
        int fd = sim__fd_of(ctx->req);
        struct linger lg = {1, 0};
        if (fd >= 0)
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    }
    ctx->finished = 1;
    sim__state.resets++;
    sim__req_release(ctx);
    h2o_send(ctx->req, NULL, 0, H2O_SEND_STATE_ERROR);
}

void sim__start_stream_response(sim_req_t *ctx)
{
    h2o_req_t *req = ctx->req;
    ctx->started = 1;
    uv_timer_stop(&ctx->peek);
    req->res.status = 200;
    req->res.reason = "OK";
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
                   H2O_STRLIT("text/event-stream"));
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL, H2O_STRLIT("no-cache"));
    h2o_start_response(req, &ctx->gen);
}

static void on_timer_pump(uv_timer_t *t)
{
    sim__pump(t->data);
}

static void pump_once(sim_req_t *ctx)
{
    if (ctx->req == NULL || ctx->stopped || ctx->finished || ctx->sending)
        return;
    if (ctx->aborted && !ctx->abort_pending) {
        ctx->send.len = 0;
        if (abort_events(ctx) != 0) {
            ctx->abort_pending = 1;
            ctx->need_pump = 1;
            return;
        }
        h2o_iovec_t buf = h2o_iovec_init(ctx->send.p, ctx->send.len);
        ctx->finished = 1;
        h2o_send(ctx->req, &buf, 1, H2O_SEND_STATE_FINAL);
        return;
    }
    if (ctx->kv_wait && !ctx->abort_pending)
        return; /* the stream's head is out; its tokens wait for the KV */
    if (ctx->abort_pending) {
        ctx->finished = 1;
        sim__req_release(ctx);
        h2o_send(ctx->req, NULL, 0, H2O_SEND_STATE_ERROR);
        return;
    }
    uint64_t steps = ctx->max_tokens == 0 ? 1 : ctx->max_tokens;
    uint64_t total = steps * ctx->n_items;
    uint64_t now = uv_hrtime() / 1000;
    ctx->send.len = 0;
    while (ctx->next_ev < total && ctx->send.len < SIM_SEND_HIWAT) {
        uint64_t j = ctx->next_ev / ctx->n_items;
        if (ctx->gap_us > 0 && ctx->max_tokens > 0 && now < ctx->t0_us + (j + 1) * ctx->gap_us)
            break;
        if (ctx->reset_after > 0 && j >= (uint64_t)ctx->reset_after)
            break;
        if (ctx->stall_after > 0 && j >= (uint64_t)ctx->stall_after)
            break;
        sim_item_t *it = &ctx->items[ctx->next_ev % ctx->n_items];
        json_t *ev = NULL;
        if (pdsim_gen_extend(&it->gen, ctx->max_tokens == 0 ? 0 : (size_t)(j + 1)) == 0)
            ev = stream_obj(ctx, it, j);
        if (ev != NULL && ctx->next_ev == 0 && sim__state.opts.stamp_first_token)
            json_object_set_new(ev, "pdsim_mono_us", json_integer((json_int_t)(uv_hrtime() / 1000)));
        if (sendbuf_event(ctx, ev) != 0) {
            ctx->abort_pending = 1;
            ctx->need_pump = 1;
            return;
        }
        ctx->next_ev++;
        if (ctx->max_tokens > 0)
            sim__state.tokens_streamed++;
    }
    if (ctx->next_ev == total) {
        if ((ctx->include_usage && sendbuf_event(ctx, usage_chunk(ctx)) != 0) ||
            sim__sendbuf_append(ctx, "data: [DONE]\n\n", 14) != 0) {
            ctx->abort_pending = 1;
            ctx->need_pump = 1;
            return;
        }
        h2o_iovec_t buf = h2o_iovec_init(ctx->send.p, ctx->send.len);
        complete_ok(ctx);
        h2o_send(ctx->req, &buf, 1, H2O_SEND_STATE_FINAL);
        return;
    }
    if (ctx->send.len > 0) {
        h2o_iovec_t buf = h2o_iovec_init(ctx->send.p, ctx->send.len);
        ctx->sending = 1;
        h2o_send(ctx->req, &buf, 1, H2O_SEND_STATE_IN_PROGRESS);
        return;
    }
    uint64_t j = ctx->next_ev / ctx->n_items;
    if (ctx->reset_after > 0 && j >= (uint64_t)ctx->reset_after) {
        hard_reset(ctx);
        return;
    }
    if (ctx->stall_after > 0 && j >= (uint64_t)ctx->stall_after)
        return; /* frozen: open and silent until the client goes */
    uint64_t due = ctx->t0_us + (j + 1) * ctx->gap_us;
    uint64_t wait_ms = due > now ? (due - now + 999) / 1000 : 0;
    uv_timer_start(&ctx->timer, on_timer_pump, wait_ms, 0);
}

void sim__pump(sim_req_t *ctx)
{
    if (ctx->in_pump) {
        ctx->need_pump = 1;
        return;
    }
    ctx->in_pump = 1;
    do {
        ctx->need_pump = 0;
        pump_once(ctx);
    } while (ctx->need_pump);
    ctx->in_pump = 0;
}

/* A non-streaming answer, or its hard reset. */
void sim__send_final(sim_req_t *ctx, uint64_t ntok)
{
    json_t *o = extend_items(ctx, ntok) == 0 ? full_obj(ctx, ntok) : NULL;
    if (o != NULL && ctx->vllm_kv != NULL && json_is_object(o))
        json_object_set(o, "kv_transfer_params", ctx->vllm_kv);
    char *s = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (s == NULL) {
        sim__req_fail(ctx, 500, "pdsim: out of memory building the response");
        return;
    }
    size_t len = strlen(s);
    /* reset_answer reaches the answers reset_after_tokens cannot: a prefill's, which carries no output
     * token, and one of fewer tokens than the knob. */
    if ((ctx->reset_after > 0 && (uint64_t)ctx->reset_after < ntok) || sim__state.faults.reset_answer) {
        h2o_req_t *req = ctx->req;
        size_t half = len / 2;
        char *part = h2o_mem_alloc_pool(&req->pool, half + 1);
        memcpy(part, s, half);
        free(s);
        req->res.status = 200;
        req->res.reason = "OK";
        req->res.content_length = len;
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
                       H2O_STRLIT("application/json"));
        ctx->started = 1;
        h2o_start_response(req, &ctx->gen);
        h2o_iovec_t buf = h2o_iovec_init(part, half);
        if (req->version < 0x200) {
            int fd = sim__fd_of(req);
            struct linger lg = {1, 0};
            if (fd >= 0)
                setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        }
        ctx->finished = 1;
        sim__state.resets++;
        sim__req_release(ctx);
        h2o_send(req, &buf, 1, H2O_SEND_STATE_ERROR);
        return;
    }
    h2o_req_t *req = ctx->req;
    complete_ok(ctx);
    if (ctx->stream) {
        /* A prefill's stream: one event with the whole object, then [DONE]. */
        size_t blen = len + 32;
        char *b = h2o_mem_alloc_pool(&req->pool, blen);
        int n = snprintf(b, blen, "data: %s\n\ndata: [DONE]\n\n", s);
        free(s);
        req->res.status = 200;
        req->res.reason = "OK";
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL, H2O_STRLIT("no-cache"));
        sim__send_body(req, 200, "text/event-stream", b, (size_t)n);
        return;
    }
    sim__send_body(req, 200, "application/json", s, len);
    free(s);
}

static void on_timer_send_final(uv_timer_t *t)
{
    sim_req_t *ctx = t->data;
    if (sim__req_is_live(ctx))
        sim__send_final(ctx, ctx->max_tokens);
}

/* Output phase of role both and decode: the digests are known. */
void sim__begin_output(sim_req_t *ctx)
{
    if (!sim__req_is_live(ctx))
        return;
    pdsim_faults_t *f = &sim__state.faults;
    ctx->gap_us =
        f->drip_ms > 0 ? (uint64_t)f->drip_ms * 1000 : (uint64_t)sim__state.opts.decode_us_per_token;
    ctx->reset_after = f->reset_after_tokens;
    ctx->stall_after = f->stall_after_tokens;
    ctx->t0_us = uv_hrtime() / 1000;
    if (ctx->stream) {
        if (!ctx->started)
            sim__start_stream_response(ctx);
        ctx->kv_wait = 0;
        sim__pump(ctx);
        return;
    }
    uint64_t ms = (ctx->gap_us * ctx->max_tokens + 999) / 1000;
    if (ms == 0) {
        sim__send_final(ctx, ctx->max_tokens);
        return;
    }
    uv_timer_start(&ctx->timer, on_timer_send_final, ms, 0);
}

/* POST /abort_request named this live request (routes.c): it stops where it is, as an sglang scheduler drops
 * an aborted request. Its timers stop, its KV transfers are cancelled (the shim frees their rooms), the KV it
 * held is given back; its answer ends with finish_reason abort: a stream with one last event per item and
 * [DONE] (its head sent first when it had not begun), a whole answer with the tokens it had (none). */
void sim__abort(sim_req_t *ctx)
{
    ctx->aborted = 1;
    sim__state.aborted++;
    sim__req_inactive(ctx);
    sim__req_release(ctx);
    if (ctx->stream) {
        if (!ctx->started)
            sim__start_stream_response(ctx);
        ctx->kv_wait = 0;
        sim__pump(ctx);
        return;
    }
    json_t *o = full_obj(ctx, 0);
    char *s = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    ctx->finished = 1;
    if (s == NULL) {
        sim__send_error(ctx->req, 500, "pdsim: out of memory building the response");
        return;
    }
    sim__send_body(ctx->req, 200, "application/json", s, strlen(s));
    free(s);
}
