/*
 * Stream migration's arithmetic (resume.h): the client's share of a stream read back from the relayed
 * events, the body that goes on from it, and the rewrite of the new stream's events. Pure; any thread.
 */
#include "resume.h"
#include "resume_internal.h"
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "err.h"

/* The token limits an engine applies when the request names none: sglang's max_new_tokens (128) and the
 * OpenAI completions default (16), which sglang and vLLM follow. Chat completions have none. */
#define DEFAULT_MAX_NEW_TOKENS 128
#define DEFAULT_COMPLETION_MAX_TOKENS 16

/* The raw value of top-level member `key` is one of the JSON texts given: 1. */
static int member_is(const json_t *o, const char *key, int (*test)(const json_t *))
{
    json_t *v = json_object_get(o, key);
    return v != NULL && test(v);
}

static int above_one(const json_t *v)
{
    return json_is_integer(v) && json_integer_value(v) > 1;
}

static int truthy(const json_t *v)
{
    return json_is_true(v) || (json_is_integer(v) && json_integer_value(v) > 0);
}

static int not_null(const json_t *v)
{
    return !json_is_null(v) && !json_is_false(v);
}

static const char *refusal_of(pdr_route_t route, const json_t *o)
{
    if (route == PDR_ROUTE_GENERATE) {
        const json_t *sp = json_object_get(o, "sampling_params");
        if (json_is_array(sp) || json_is_array(json_object_get(o, "text")) ||
            json_is_array(json_array_get(json_object_get(o, "input_ids"), 0)))
            return "batch";
        if (member_is(sp, "n", above_one))
            return "n";
        if (member_is(o, "return_logprob", truthy))
            return "logprobs";
        if (member_is(o, "input_embeds", not_null))
            return "input_embeds";
        const json_t *ids = json_object_get(o, "input_ids");
        if (ids != NULL && !json_is_null(ids) && !json_is_array(ids))
            return "token_prompt";
        if ((ids == NULL || json_is_null(ids)) && !json_is_string(json_object_get(o, "text")))
            return "token_prompt";
        return NULL;
    }
    if (member_is(o, "n", above_one))
        return "n";
    if (member_is(o, "best_of", above_one))
        return "best_of";
    if (member_is(o, "logprobs", truthy) || member_is(o, "top_logprobs", truthy) ||
        member_is(o, "prompt_logprobs", not_null))
        return "logprobs";
    if (route == PDR_ROUTE_COMPLETIONS) {
        if (member_is(o, "echo", truthy))
            return "echo";
        if (!json_is_string(json_object_get(o, "prompt")))
            return "token_prompt";
        return NULL;
    }
    const json_t *msgs = json_object_get(o, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return "not_json";
    return NULL;
}

json_t *pdr_resume_parse(pdr_route_t route, const char *body, size_t len, const char **refusal)
{
    json_t *o = json_loadb(body, len, 0, NULL);
    if (!json_is_object(o)) {
        json_decref(o);
        *refusal = "not_json";
        return NULL;
    }
    *refusal = refusal_of(route, o);
    return o;
}

const char *pdr_resume_refusal(pdr_route_t route, const char *body, size_t len)
{
    const char *why;
    json_decref(pdr_resume_parse(route, body, len, &why));
    return why;
}

/* Lowers the integer member `key` of o by k (at least floor); an absent one becomes def - k when def > 0.
 * Returns what the member now holds (-1: none). */
static int64_t lower_limit(json_t *o, const char *key, uint64_t k, int64_t def, int64_t floor)
{
    json_t *v = json_object_get(o, key);
    int64_t n;
    if (json_is_integer(v))
        n = json_integer_value(v);
    else if ((v == NULL || json_is_null(v)) && def > 0)
        n = def;
    else
        return -1;
    n -= (int64_t)k;
    if (n < floor)
        n = floor;
    json_object_set_new(o, key, json_integer(n));
    return n;
}

static json_t *text_json(const pdr_resume_t *s, size_t from)
{
    return json_stringn(s->text.p ? s->text.p + from : "", s->text.len - from);
}

/* o[key] (a string) replaced by itself followed by tail[0..tl). 0, or -1 with err. */
static int append_text(json_t *o, const char *key, const char *tail, size_t tl, char *err, size_t errlen)
{
    json_t *cur = json_object_get(o, key);
    size_t cl = json_string_length(cur);
    char *joined = malloc(cl + tl + 1);
    if (joined == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    memcpy(joined, json_string_value(cur), cl);
    if (tl > 0)
        memcpy(joined + cl, tail, tl);
    json_object_set_new(o, key, json_stringn(joined, cl + tl));
    free(joined);
    return 0;
}

/* The prompt extended by what the client has; the limits lowered. -1 with err, 1: nothing left. */
static int go_on(pdr_resume_t *s, json_t *o, char *err, size_t errlen)
{
    uint64_t k = s->tokens;
    int64_t left = -1;
    if (s->route == PDR_ROUTE_GENERATE) {
        json_t *sp = json_object_get(o, "sampling_params");
        if (sp == NULL || json_is_null(sp)) {
            sp = json_object();
            json_object_set_new(o, "sampling_params", sp);
        }
        if (!json_is_object(sp)) {
            snprintf(err, errlen, "sampling_params is not an object");
            return -1;
        }
        left = lower_limit(sp, "max_new_tokens", k, DEFAULT_MAX_NEW_TOKENS, 0);
        lower_limit(sp, "min_new_tokens", k, 0, 0);
        json_t *ids = json_object_get(o, "input_ids");
        if (json_is_array(ids)) {
            if (!s->have_ids || s->n_ids != k) {
                snprintf(err, errlen, "the stream's output_ids do not hold every token the client has");
                return -1;
            }
            for (size_t i = 0; i < s->n_ids; i++)
                json_array_append_new(ids, json_integer((json_int_t)s->ids[i]));
        } else if (append_text(o, "text", s->text.p, s->text.len, err, errlen) != 0) {
            return -1;
        }
    } else if (s->route == PDR_ROUTE_COMPLETIONS) {
        left = lower_limit(o, "max_tokens", k, DEFAULT_COMPLETION_MAX_TOKENS, 0);
        lower_limit(o, "min_tokens", k, 0, 0);
        if (append_text(o, "prompt", s->text.p, s->text.len, err, errlen) != 0)
            return -1;
    } else {
        int64_t a = lower_limit(o, "max_tokens", k, 0, 0),
                b = lower_limit(o, "max_completion_tokens", k, 0, 0);
        left = a >= 0 && b >= 0 ? (a < b ? a : b) : a >= 0 ? a : b;
        lower_limit(o, "min_tokens", k, 0, 0);
        json_t *msgs = json_object_get(o, "messages");
        json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
        json_t *role = json_object_get(last, "role"), *content = json_object_get(last, "content");
        int open = json_is_true(json_object_get(o, "continue_final_message")) && json_is_string(role) &&
                   strcmp(json_string_value(role), "assistant") == 0 && json_is_string(content);
        if (open) { /* the client continues its own assistant message: the text goes on it */
            if (append_text(last, "content", s->text.p, s->text.len, err, errlen) != 0)
                return -1;
        } else {
            json_array_append_new(msgs,
                                  json_pack("{s:s,s:o}", "role", "assistant", "content", text_json(s, 0)));
        }
        json_object_set_new(o, "continue_final_message", json_true());
        json_object_set_new(o, "add_generation_prompt", json_false());
    }
    return left == 0 ? 1 : 0;
}

char *pdr_resume_body(pdr_resume_t *s, json_t *o, size_t *out_len, int *nothing_left, char *err,
                      size_t errlen)
{
    *nothing_left = 0;
    if (pdr_resume_fold(s) != 0) {
        snprintf(err, errlen,
                 "the stream relayed so far cannot be read back (or its text exceeds "
                 "migration.max_bytes)");
        return NULL;
    }
    if (s->finished || s->done) {
        *nothing_left = 1;
        return NULL;
    }
    /* Checked again here (a few lookups, no parse): go_on relies on what it checks. */
    const char *why = json_is_object(o) ? refusal_of(s->route, o) : "not_json";
    if (why != NULL) {
        snprintf(err, errlen, "the request cannot be moved (%s)", why);
        return NULL;
    }
    int rc = go_on(s, o, err, errlen);
    char *out = NULL;
    if (rc == 0) {
        out = json_dumps(o, JSON_COMPACT);
        if (out == NULL)
            snprintf(err, errlen, "out of memory");
        else
            *out_len = strlen(out);
    } else if (rc == 1) {
        *nothing_left = 1;
    }
    if (out != NULL) {
        s->base_text = s->text.len;
        s->base_ids = s->n_ids;
        s->base_tokens = s->tokens;
        s->resumed = 1;
    }
    return out;
}

/* n moved from prompt_tokens to completion_tokens of o (a usage or meta_info object). */
static void move_tokens(json_t *o, uint64_t n)
{
    json_t *p = json_object_get(o, "prompt_tokens"), *c = json_object_get(o, "completion_tokens");
    if (json_is_integer(p) && json_integer_value(p) >= (json_int_t)n)
        json_object_set_new(o, "prompt_tokens", json_integer(json_integer_value(p) - (json_int_t)n));
    if (json_is_integer(c))
        json_object_set_new(o, "completion_tokens", json_integer(json_integer_value(c) + (json_int_t)n));
}

/* Returns 1 when the event is to be dropped. */
static int rewrite_obj(pdr_resume_t *s, json_t *j)
{
    if (s->route == PDR_ROUTE_GENERATE) {
        json_t *meta = json_object_get(j, "meta_info"), *text = json_object_get(j, "text");
        json_t *ids = json_object_get(j, "output_ids");
        if (json_is_object(meta)) {
            json_t *ct = json_object_get(meta, "completion_tokens");
            int cumulative = json_is_array(ids) && json_is_integer(ct) &&
                             json_array_size(ids) == (size_t)json_integer_value(ct);
            if (s->id[0] != '\0')
                json_object_set_new(meta, "id", json_string(s->id));
            move_tokens(meta, s->base_tokens);
            /* sglang's length reason names the limit, which the new request lowered */
            json_t *fr = json_object_get(meta, "finish_reason"), *fl = json_object_get(fr, "length");
            if (json_is_integer(fl))
                json_object_set_new(fr, "length",
                                    json_integer(json_integer_value(fl) + (json_int_t)s->base_tokens));
            if (cumulative) {
                json_t *all = json_array();
                for (size_t i = 0; i < s->base_ids && i < s->n_ids; i++)
                    json_array_append_new(all, json_integer((json_int_t)s->ids[i]));
                json_array_extend(all, ids);
                json_object_set_new(j, "output_ids", all);
            }
        }
        if (json_is_string(text) && s->base_text > 0) {
            size_t tl = json_string_length(text);
            char *joined = malloc(s->base_text + tl + 1);
            if (joined != NULL) {
                memcpy(joined, s->text.p, s->base_text);
                memcpy(joined + s->base_text, json_string_value(text), tl);
                json_object_set_new(j, "text", json_stringn(joined, s->base_text + tl));
                free(joined);
            }
        }
        return 0;
    }
    if (s->id[0] != '\0' && json_is_string(json_object_get(j, "id")))
        json_object_set_new(j, "id", json_string(s->id));
    json_t *usage = json_object_get(j, "usage");
    if (json_is_object(usage))
        move_tokens(usage, s->base_tokens);
    if (s->route == PDR_ROUTE_CHAT) {
        json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
        json_t *delta = json_object_get(c0, "delta");
        if (json_is_object(delta) && json_object_get(delta, "role") != NULL) {
            json_object_del(delta, "role");
            json_t *content = json_object_get(delta, "content"), *fr = json_object_get(c0, "finish_reason");
            int says_nothing =
                json_object_size(delta) == 0 ||
                (json_object_size(delta) == 1 && json_is_string(content) && json_string_length(content) == 0);
            if (says_nothing && (fr == NULL || json_is_null(fr)) && !json_is_object(usage))
                return 1;
        }
    }
    return 0;
}

typedef struct dump_into {
    pdr_buf_t *b;
    size_t cap;
} dump_into_t;

static int dump_piece(const char *p, size_t n, void *data)
{
    dump_into_t *d = data;
    return pdr_buf_append(d->b, p, n, d->cap) == 0 ? 0 : -1;
}

int pdr_resume_rewrite(pdr_resume_t *s, const char *ev, size_t len, pdr_buf_t *out, size_t cap)
{
    size_t dl;
    const char *d = pdr__resume_event_data(ev, len, &dl);
    json_t *j = d != NULL && !pdr__resume_is_done(d, dl) ? json_loadb(d, dl, 0, NULL) : NULL;
    if (!json_is_object(j) || json_object_get(j, "error") != NULL) {
        json_decref(j);
        return pdr_buf_append(out, ev, len, cap);
    }
    int rc = 0;
    if (rewrite_obj(s, j) == 0) {
        size_t was = out->len;
        dump_into_t di = {out, cap};
        rc = pdr_buf_append(out, "data: ", 6, cap);
        if (rc == 0 && json_dump_callback(j, dump_piece, &di, JSON_COMPACT) != 0)
            rc = out->len + 1 > cap ? PDR_ETOOBIG : PDR_ENOMEM;
        if (rc == 0)
            rc = pdr_buf_append(out, "\n\n", 2, cap);
        if (rc != 0)
            out->len = was;
    }
    json_decref(j);
    return rc;
}

const char *pdr_resume_tail(const pdr_resume_t *s, size_t *len)
{
    static const char done[] = "data: [DONE]\n\n";
    if (s->done) {
        *len = 0;
        return "";
    }
    *len = sizeof(done) - 1;
    return done;
}
