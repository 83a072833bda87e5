/*
 * pdsim's generation routes (/generate, /v1/completions, /v1/chat/completions): the body parsed into items
 * (prompts, bootstrap fields, tickets, limits), the request recorded for /pdsim/last, and the handler that
 * starts the compute. Loop thread only.
 */
#include "server_internal.h"
#include "chat_template.h"
#include "tokenizer.h"

/* The last request's whole body and X-Request-Id, next to the fields record_last() keeps. */
static void record_detail(h2o_req_t *req, json_t *body)
{
    json_t *o = sim__state.last_pos > 0 ? sim__state.last[(sim__state.last_pos - 1) % SIM_LAST_MAX] : NULL;
    if (o == NULL)
        return;
    json_object_set(o, "body", body);
    ssize_t i = h2o_find_header_by_str(&req->headers, H2O_STRLIT("x-request-id"), -1);
    json_object_set_new(
        o, "x_request_id",
        i >= 0 ? json_stringn(req->headers.entries[i].value.base, req->headers.entries[i].value.len)
               : json_null());
    /* The data-parallel rank the request named: vLLM's header, and sglang's body field (in "body"). */
    i = h2o_find_header_by_str(&req->headers, H2O_STRLIT("x-data-parallel-rank"), -1);
    json_object_set_new(
        o, "x_data_parallel_rank",
        i >= 0 ? json_stringn(req->headers.entries[i].value.base, req->headers.entries[i].value.len)
               : json_null());
}
/* The data-parallel rank the request named (sglang's body field, vLLM's header), 0 when none or out of
 * --dp-size: /get_load counts it there. */
static int dp_rank_of(h2o_req_t *req, const json_t *body)
{
    int64_t r = -1;
    json_t *v = json_object_get(body, "data_parallel_rank");
    if (json_is_integer(v)) {
        r = json_integer_value(v);
    } else {
        ssize_t i = h2o_find_header_by_str(&req->headers, H2O_STRLIT("x-data-parallel-rank"), -1);
        if (i >= 0 && pdr_parse_int64(req->headers.entries[i].value.base, req->headers.entries[i].value.len,
                                      0, 1023, &r) != 0)
            r = -1;
    }
    int64_t n = sim__state.opts.dp_size > 0 ? sim__state.opts.dp_size : 1;
    return r >= 0 && r < n ? (int)r : 0;
}

/* ------------------------------------------------------------------ request parsing */

static int toks_from_ids(const json_t *arr, pdsim_toks_t *t, char *err, size_t errlen)
{
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v)
    {
        if (!json_is_integer(v)) {
            snprintf(err, errlen, "token ids must be integers");
            return PDR_EINVAL;
        }
        if (pdsim_toks_push(t, (int64_t)json_integer_value(v)) != 0)
            return PDR_ENOMEM;
    }
    return pdsim_toks_finish(t);
}

static int toks_from_text(const json_t *s, pdsim_toks_t *t, char *err, size_t errlen)
{
    int r = pdsim_tokenize(t, json_string_value(s), json_string_length(s));
    if (r == PDR_EINVAL || r == PDR_ENOTSUP) {
        snprintf(err, errlen, "the tokenizer cannot encode the prompt: %s",
                 r == PDR_EINVAL ? "it is not valid UTF-8" : pdr_strerror(r));
        return PDR_EINVAL;
    }
    if (r != 0)
        return PDR_ENOMEM;
    return pdsim_toks_finish(t);
}

static int add_items(sim_req_t *ctx, size_t n)
{
    ctx->items = calloc(n, sizeof(*ctx->items));
    if (ctx->items == NULL)
        return PDR_ENOMEM;
    ctx->n_items = n;
    for (size_t i = 0; i < n; i++) {
        ctx->items[i].ctx = ctx;
        ctx->items[i].index = i;
    }
    return 0;
}

/* A list of prompts: each element a string or a list of ids. */
static int prompts_from_list(sim_req_t *ctx, const json_t *list, char *err, size_t errlen)
{
    size_t n = json_array_size(list);
    if (n == 0) {
        snprintf(err, errlen, "the prompt list is empty");
        return PDR_EINVAL;
    }
    if (add_items(ctx, n) != 0)
        return PDR_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(list, i);
        int r;
        if (json_is_string(e))
            r = toks_from_text(e, &ctx->items[i].toks, err, errlen);
        else if (json_is_array(e))
            r = toks_from_ids(e, &ctx->items[i].toks, err, errlen);
        else {
            snprintf(err, errlen, "each prompt must be a string or a list of token ids");
            r = PDR_EINVAL;
        }
        if (r != 0)
            return r;
    }
    return 0;
}

static int text_error(int r, char *err, size_t errlen)
{
    if (r != PDR_EINVAL && r != PDR_ENOTSUP)
        return PDR_ENOMEM;
    snprintf(err, errlen, "the tokenizer cannot encode a message: %s",
             r == PDR_EINVAL ? "it is not valid UTF-8" : pdr_strerror(r));
    return PDR_EINVAL;
}

static int append_text(pdsim_toks_t *t, const json_t *s)
{
    return json_is_string(s) ? pdsim_tokenize(t, json_string_value(s), json_string_length(s)) : 0;
}

/* A boolean field of the body: its value, dflt when absent or null; -1 when it is not a boolean. */
static int bool_field(const json_t *body, const char *key, int dflt)
{
    json_t *v = json_object_get(body, key);
    if (v == NULL || json_is_null(v))
        return dflt;
    return json_is_boolean(v) ? json_is_true(v) : -1;
}

/* The chat template's flags, checked as vLLM checks them: add_generation_prompt (default true) and
 * continue_final_message (default false) exclude each other, and the message continued must be the
 * assistant's. */
static int chat_template_flags(const json_t *body, const json_t *msgs, int *add_gen, int *cont, char *err,
                               size_t errlen)
{
    *add_gen = bool_field(body, "add_generation_prompt", 1);
    *cont = bool_field(body, "continue_final_message", 0);
    if (*add_gen < 0 || *cont < 0) {
        snprintf(err, errlen, "add_generation_prompt and continue_final_message must be booleans");
        return PDR_EINVAL;
    }
    if (*add_gen && *cont) {
        snprintf(err, errlen, "Cannot set both add_generation_prompt and continue_final_message to true");
        return PDR_EINVAL;
    }
    const json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
    const json_t *role = json_object_get(last, "role");
    if (*cont && (!json_is_string(role) || strcmp(json_string_value(role), "assistant") != 0)) {
        snprintf(err, errlen,
                 "continue_final_message is set, so the final message must be the assistant's (role "
                 "\"assistant\"): it is the message continued");
        return PDR_EINVAL;
    }
    return 0;
}

static int parse_prompts(sim_req_t *ctx, const json_t *body, char *err, size_t errlen)
{
    if (ctx->route == ROUTE_GENERATE) {
        json_t *ids = json_object_get(body, "input_ids"), *text = json_object_get(body, "text");
        if (ids != NULL && !json_is_null(ids)) {
            if (!json_is_array(ids)) {
                snprintf(err, errlen, "input_ids must be a list");
                return PDR_EINVAL;
            }
            if (json_array_size(ids) > 0 && json_is_array(json_array_get(ids, 0))) {
                ctx->batch = 1;
                return prompts_from_list(ctx, ids, err, errlen);
            }
            if (add_items(ctx, 1) != 0)
                return PDR_ENOMEM;
            return toks_from_ids(ids, &ctx->items[0].toks, err, errlen);
        }
        if (json_is_string(text)) {
            if (add_items(ctx, 1) != 0)
                return PDR_ENOMEM;
            return toks_from_text(text, &ctx->items[0].toks, err, errlen);
        }
        if (json_is_array(text)) {
            ctx->batch = 1;
            return prompts_from_list(ctx, text, err, errlen);
        }
        snprintf(err, errlen, "either text or input_ids is required");
        return PDR_EINVAL;
    }
    if (ctx->route == ROUTE_COMPLETIONS) {
        json_t *p = json_object_get(body, "prompt");
        if (json_is_string(p)) {
            if (add_items(ctx, 1) != 0)
                return PDR_ENOMEM;
            return toks_from_text(p, &ctx->items[0].toks, err, errlen);
        }
        if (json_is_array(p)) {
            json_t *first = json_array_get(p, 0);
            if (first == NULL || json_is_integer(first)) {
                if (add_items(ctx, 1) != 0)
                    return PDR_ENOMEM;
                return toks_from_ids(p, &ctx->items[0].toks, err, errlen);
            }
            ctx->batch = 1;
            return prompts_from_list(ctx, p, err, errlen);
        }
        snprintf(err, errlen, "prompt is required (a string, a list of token ids or a list of prompts)");
        return PDR_EINVAL;
    }
    json_t *msgs = json_object_get(body, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        snprintf(err, errlen, "messages must be a non-empty list");
        return PDR_EINVAL;
    }
    json_t *nj = json_object_get(body, "n");
    json_int_t n = 1;
    if (nj != NULL && !json_is_null(nj)) {
        if (!json_is_integer(nj) || json_integer_value(nj) < 1 || json_integer_value(nj) > 128) {
            snprintf(err, errlen, "n must be an integer in [1, 128]");
            return PDR_EINVAL;
        }
        n = json_integer_value(nj);
    }
    int add_gen, cont;
    if (chat_template_flags(body, msgs, &add_gen, &cont, err, errlen) != 0)
        return PDR_EINVAL;
    ctx->batch = n > 1;
    if (add_items(ctx, (size_t)n) != 0)
        return PDR_ENOMEM;
    pdsim_toks_t *t = &ctx->items[0].toks;
    size_t i;
    json_t *m;
    int r;
    const pdr_tokenizer_t *tk = pdsim_tokenizer();
    const pdr_chat_template_t *ct = pdr_tokenizer_extra(tk);
    if (ct != NULL) {
        /* The model's chat template beside --tokenizer, as an engine renders it: the ids of its text. */
        char *s = json_dumps(body, JSON_COMPACT);
        uint32_t *ids = NULL;
        size_t nids = 0;
        r = s != NULL ? pdr_chat_template_ids(ct, tk, s, strlen(s), &ids, &nids, err, errlen) : PDR_ENOMEM;
        free(s);
        for (size_t k = 0; r == 0 && k < nids; k++)
            r = pdsim_toks_push(t, (int64_t)ids[k]);
        free(ids);
        if (r != 0)
            return r;
    }
    json_array_foreach(msgs, i, m)
    {
        if (ct != NULL)
            break;
        if (!json_is_object(m)) {
            snprintf(err, errlen, "each message must be an object");
            return PDR_EINVAL;
        }
        json_t *content = json_object_get(m, "content");
        if ((r = append_text(t, json_object_get(m, "role"))) != 0 || (r = append_text(t, content)) != 0)
            return text_error(r, err, errlen);
        if (json_is_array(content)) { /* content parts: [{"type":"text","text":...}] */
            size_t k;
            json_t *part;
            json_array_foreach(content, k, part)
            {
                if ((r = append_text(t, json_object_get(part, "text"))) != 0)
                    return text_error(r, err, errlen);
            }
        }
    }
    /* The generation prompt: the assistant's role word opens its message, as a chat template's
     * add_generation_prompt does; continue_final_message leaves the final (assistant) message open. */
    if (ct == NULL && add_gen && (r = pdsim_tokenize(t, "assistant", 9)) != 0)
        return text_error(r, err, errlen);
    if (pdsim_toks_finish(t) != 0)
        return PDR_ENOMEM;
    for (size_t k = 1; k < (size_t)n; k++) {
        for (size_t x = 0; x < t->n; x++)
            if (pdsim_toks_push(&ctx->items[k].toks, t->ids[x]) != 0)
                return PDR_ENOMEM;
    }
    return 0;
}

/* Element i of a bootstrap field: the array element in a batch, the value itself otherwise. */
static json_t *field_at(const sim_req_t *ctx, json_t *v, size_t i, int *bad)
{
    if (v == NULL || json_is_null(v))
        return NULL;
    if (json_is_array(v)) {
        if (json_array_size(v) != ctx->n_items) {
            *bad = 1;
            return NULL;
        }
        return json_array_get(v, i);
    }
    return v;
}

static int parse_bootstrap(sim_req_t *ctx, const json_t *body, char *err, size_t errlen)
{
    json_t *rooms = json_object_get(body, "bootstrap_room");
    json_t *hosts = json_object_get(body, "bootstrap_host");
    json_t *ports = json_object_get(body, "bootstrap_port");
    int decode = ctx->role == PDSIM_ROLE_DECODE;
    if (json_is_integer(rooms) && ctx->n_items > 1) {
        snprintf(err, errlen, "bootstrap_room must be a list of %zu rooms for this batch", ctx->n_items);
        return PDR_EINVAL;
    }
    for (size_t i = 0; i < ctx->n_items; i++) {
        sim_item_t *it = &ctx->items[i];
        int bad = 0;
        json_t *r = field_at(ctx, rooms, i, &bad);
        if (bad || !json_is_integer(r) || json_integer_value(r) < 0) {
            snprintf(err, errlen, "bootstrap_room is required: an integer in [0, 2^63-1]%s",
                     ctx->batch ? ", one per batch item" : "");
            return PDR_EINVAL;
        }
        it->room = (uint64_t)json_integer_value(r);
        if (!decode)
            continue;
        json_t *h = field_at(ctx, hosts, i, &bad);
        json_t *p = field_at(ctx, ports, i, &bad);
        /* A null or absent bootstrap_port is the decode's own --bootstrap-port, as an sglang scheduler
         * puts its --disaggregation-bootstrap-port into a request that names none (a router given
         * "--prefill URL" without a port sends null). */
        int port_default = p == NULL || json_is_null(p);
        if (bad || !json_is_string(h) ||
            (!port_default &&
             (!json_is_integer(p) || json_integer_value(p) < 1 || json_integer_value(p) > 65535))) {
            snprintf(err, errlen,
                     "bootstrap_host (string) is required on a decode, and bootstrap_port an integer in "
                     "[1, 65535] or null (null: this decode's --bootstrap-port, %d)",
                     sim__state.opts.bootstrap_port);
            return PDR_EINVAL;
        }
        it->host = json_string_value(h);
        it->port = port_default ? sim__state.opts.bootstrap_port : (int)json_integer_value(p);
    }
    return 0;
}

/* --ticket-key: every item needs a pd_ticket (a string, or a list of one per item in a batch) that
 * verifies, names the item's room and this worker (the prefill's transport port; the decode's identity).
 * Returns -1 when all pass, else the refusal's TICKET_* reason with the message in err. Replay is the
 * shim's to see, when the KV moves (transfers_done). */
static int parse_tickets(sim_req_t *ctx, const json_t *body, char *err, size_t errlen)
{
    json_t *tickets = json_object_get(body, "pd_ticket");
    for (size_t i = 0; i < ctx->n_items; i++) {
        sim_item_t *it = &ctx->items[i];
        int bad = 0;
        json_t *t = field_at(ctx, tickets, i, &bad);
        if (tickets == NULL) {
            snprintf(err, errlen, "pdsim: pd_ticket refused (missing): a signed ticket is required%s",
                     ctx->batch ? ", one per batch item" : "");
            return TICKET_MISSING;
        }
        if (bad || !json_is_string(t)) {
            snprintf(err, errlen, "pdsim: pd_ticket refused (malformed): expected %s",
                     ctx->batch ? "a list of one ticket string per batch item" : "a ticket string");
            return TICKET_MALFORMED;
        }
        pdshim_ticket_info_t info;
        int rc = pdshim_ticket_inspect(sim__state.shim, json_string_value(t), &info);
        int why = rc == 0 ? -1 : sim__ticket_reason(rc);
        if (rc != 0 && why < 0)
            why = TICKET_MALFORMED;
        if (why < 0 && info.room != it->room)
            why = TICKET_WRONG_ROOM;
        if (why < 0 &&
            ((ctx->role == PDSIM_ROLE_PREFILL && info.prefill_port != sim__state.opts.bootstrap_port) ||
             (ctx->role == PDSIM_ROLE_DECODE && sim__state.ticket_identity[0] != '\0' &&
              strcmp(info.decode_id, sim__state.ticket_identity) != 0)))
            why = TICKET_WRONG_PEER;
        if (why >= 0) {
            snprintf(err, errlen, "pdsim: pd_ticket refused (%s) for item %zu: %s", sim__ticket_reasons[why],
                     i,
                     why == TICKET_WRONG_ROOM ? "the ticket names another room than bootstrap_room"
                     : why == TICKET_WRONG_PEER && ctx->role == PDSIM_ROLE_PREFILL
                         ? "the ticket names another prefill transport port"
                     : why == TICKET_WRONG_PEER ? "the ticket names another decode"
                                                : pdshim_strerror(rc));
            return why;
        }
        it->ticket = json_string_value(t);
    }
    sim__state.tickets_accepted += ctx->n_items;
    return -1;
}

static int parse_max_tokens(sim_req_t *ctx, const json_t *body, char *err, size_t errlen)
{
    json_t *v = NULL;
    if (ctx->route == ROUTE_GENERATE) {
        json_t *sp = json_object_get(body, "sampling_params");
        if (json_is_object(sp))
            v = json_object_get(sp, "max_new_tokens");
    } else {
        v = json_object_get(body, "max_tokens");
        if ((v == NULL || json_is_null(v)) && ctx->route == ROUTE_CHAT)
            v = json_object_get(body, "max_completion_tokens");
    }
    if (v == NULL || json_is_null(v)) {
        ctx->max_tokens = (uint64_t)sim__state.opts.max_tokens_default;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > PDSIM_MAX_TOKENS) {
        snprintf(err, errlen, "the maximum number of tokens must be an integer in [0, %d]", PDSIM_MAX_TOKENS);
        return PDR_EINVAL;
    }
    ctx->max_tokens = (uint64_t)json_integer_value(v);
    return 0;
}

/* stream_options (OpenAI routes): {"include_usage": bool} asks for a usage chunk before [DONE] on a
 * stream; ignored when the answer is not streamed, as sglang ignores it. */
static int parse_stream_options(sim_req_t *ctx, const json_t *body, char *err, size_t errlen)
{
    json_t *so = json_object_get(body, "stream_options");
    if (ctx->route == ROUTE_GENERATE || so == NULL || json_is_null(so))
        return 0;
    json_t *iu = json_is_object(so) ? json_object_get(so, "include_usage") : NULL;
    if (!json_is_object(so) || (iu != NULL && !json_is_null(iu) && !json_is_boolean(iu))) {
        snprintf(err, errlen, "stream_options must be an object whose include_usage is a boolean");
        return PDR_EINVAL;
    }
    ctx->include_usage = ctx->stream && json_is_true(iu);
    return 0;
}

static json_t *field_or_null(const json_t *body, const char *key)
{
    json_t *v = json_object_get(body, key);
    return v != NULL ? json_incref(v) : json_null();
}

static void count_port(const json_t *body)
{
    json_t *v = json_object_get(body, "bootstrap_port");
    int64_t port;
    if (json_is_integer(v))
        port = json_integer_value(v);
    else if (sim__state.opts.role == PDSIM_ROLE_DECODE && (v == NULL || json_is_null(v)) &&
             json_object_get(body, "bootstrap_room") != NULL)
        port = sim__state.opts.bootstrap_port; /* the port such a decode pulls from: see parse_bootstrap */
    else
        return;
    for (size_t i = 0; i < sim__state.n_by_port; i++)
        if (sim__state.by_port[i][0] == port) {
            sim__state.by_port[i][1]++;
            return;
        }
    if (sim__state.n_by_port < SIM_PORTS_MAX) {
        sim__state.by_port[sim__state.n_by_port][0] = port;
        sim__state.by_port[sim__state.n_by_port++][1] = 1;
    }
}

static void record_last(const char *path, const json_t *body)
{
    count_port(body);
    json_t *o = json_pack(
        "{s:s,s:o,s:o,s:o,s:b}", "path", path, "room", field_or_null(body, "bootstrap_room"),
        "bootstrap_host", field_or_null(body, "bootstrap_host"), "bootstrap_port",
        field_or_null(body, "bootstrap_port"), "stream", json_is_true(json_object_get(body, "stream")));
    if (o == NULL)
        return;
    json_decref(sim__state.last[sim__state.last_pos % SIM_LAST_MAX]);
    sim__state.last[sim__state.last_pos % SIM_LAST_MAX] = o;
    sim__state.last_pos++;
}

void sim__handle_generate(h2o_req_t *req, enum sim_route route, const char *path)
{
    sim__state.requests++;
    sim__state.arrivals_us[sim__state.arrivals_pos++ % SIM_LAST_MAX] = uv_hrtime() / 1000;
    if (sim__state.faults.fail_status != 0) {
        char msg[96];
        snprintf(msg, sizeof(msg), "pdsim: injected failure (--fail-status %d)",
                 sim__state.faults.fail_status);
        sim__state.errors++;
        sim__send_error(req, sim__state.faults.fail_status, msg);
        return;
    }
    sim_req_t *ctx = sim__req_new(req, route);
    if (ctx == NULL) {
        sim__send_error(req, 503, "pdsim: out of memory");
        return;
    }
    if (sim__state.faults.hang_before_headers) {
        ctx->hang = 1; /* accepted, never answered; the peek timer or dispose notices the client leaving */
        return;
    }
    json_error_t jerr;
    char err[256];
    ctx->body = json_loadb(req->entity.base, req->entity.len, 0, &jerr);
    if (ctx->body == NULL || !json_is_object(ctx->body)) {
        snprintf(err, sizeof(err), "malformed JSON body: %s",
                 ctx->body == NULL ? jerr.text : "not an object");
        sim__req_fail(ctx, 400, err);
        return;
    }
    record_last(path, ctx->body);
    record_detail(req, ctx->body);
    ctx->dp_rank = dp_rank_of(req, ctx->body);
    ctx->stream = json_is_true(json_object_get(ctx->body, "stream"));
    ctx->return_logprob =
        route == ROUTE_GENERATE && json_is_true(json_object_get(ctx->body, "return_logprob"));
    err[0] = 0;
    int r = parse_stream_options(ctx, ctx->body, err, sizeof(err));
    if (r == 0)
        r = parse_prompts(ctx, ctx->body, err, sizeof(err));
    if (r == 0)
        r = parse_max_tokens(ctx, ctx->body, err, sizeof(err));
    if (r == 0)
        r = sim__vllm_parse(ctx, ctx->body, err, sizeof(err));
    if (r == 0 && ctx->role == PDSIM_ROLE_DECODE && ctx->vllm == VLLM_OFF && sim__state.opts.local_prefill &&
        json_object_get(ctx->body, "bootstrap_room") == NULL) {
        /* --local-prefill: a plain request (no bootstrap fields, no kv_transfer_params) is computed here,
         * prompt and all, as a vLLM decode does with a request its router did not disaggregate. */
        ctx->role = PDSIM_ROLE_BOTH;
        sim__state.local_prefills++;
    }
    if (r == 0 && ctx->role != PDSIM_ROLE_BOTH && ctx->vllm == VLLM_OFF)
        r = parse_bootstrap(ctx, ctx->body, err, sizeof(err));
    if (r == 0 && ctx->role != PDSIM_ROLE_BOTH && ctx->vllm == VLLM_OFF &&
        sim__state.opts.n_ticket_keys > 0) {
        int why = parse_tickets(ctx, ctx->body, err, sizeof(err));
        if (why >= 0) {
            sim__state.ticket_refused[why]++;
            sim__req_fail(ctx, 403, err);
            return;
        }
    }
    if (r != 0) {
        if (r == PDR_ENOMEM)
            sim__req_fail(ctx, 503, "pdsim: out of memory");
        else
            sim__req_fail(ctx, 400, err);
        return;
    }
    if (ctx->role == PDSIM_ROLE_BOTH)
        snprintf(ctx->id, sizeof(ctx->id), "pdsim-%" PRIu64, ++sim__state.counter);
    else
        snprintf(ctx->id, sizeof(ctx->id), "pdsim-%" PRIu64, ctx->items[0].room);
    uint64_t bpt = (uint64_t)sim__state.opts.kv_bytes_per_token, total = 0;
    for (size_t i = 0; i < ctx->n_items; i++)
        total += (uint64_t)ctx->items[i].toks.n * bpt;
    if (total > PDSIM_KV_CAP) {
        snprintf(err, sizeof(err), "the request's KV (%" PRIu64 " bytes) exceeds pdsim's 1 GiB cap", total);
        sim__req_fail(ctx, 413, err);
        return;
    }
    for (size_t i = 0; i < ctx->n_items; i++) {
        sim_item_t *it = &ctx->items[i];
        it->kv_len = it->toks.n * (size_t)bpt;
        it->kv = malloc(it->kv_len);
        if (it->kv == NULL) {
            sim__req_fail(ctx, 503, "pdsim: out of memory for the KV buffer");
            return;
        }
    }
    if (ctx->role == PDSIM_ROLE_DECODE && sim__state.opts.kv_capacity_bytes > 0) {
        /* Its KV while it runs: the prompt's and every output token's. */
        uint64_t need = 0;
        for (size_t i = 0; i < ctx->n_items; i++)
            need += ((uint64_t)ctx->items[i].toks.n + ctx->max_tokens) * bpt;
        if (sim__state.kv_used + need > (uint64_t)sim__state.opts.kv_capacity_bytes) {
            sim__state.kv_capacity_refusals++;
            snprintf(err, sizeof(err),
                     "pdsim: KV cache full (%" PRIu64 " of %" PRId64
                     " bytes held, this request needs %" PRIu64 ")",
                     sim__state.kv_used, sim__state.opts.kv_capacity_bytes, need);
            sim__req_fail(ctx, 503, err);
            return;
        }
        sim__state.kv_used += need;
        ctx->kv_held = need;
        if (sim__state.kv_used > sim__state.kv_used_max)
            sim__state.kv_used_max = sim__state.kv_used;
        sim__report_load();
    }
    if (ctx->role == PDSIM_ROLE_DECODE)
        sim__decode_fetch(ctx);
    else
        sim__compute_then_continue(ctx);
}
