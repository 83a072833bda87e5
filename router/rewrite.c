/*
 * Request validation and rewriting for the PD routes (see rewrite.h). Validation is strict about
 * the types the router relies on (stream, batch shape, logprob flags) and about the fields a worker
 * needs to run at all; it leaves every other field to the worker.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "err.h"
#include "rewrite.h"

#define FAIL(...)                                                                                            \
    do {                                                                                                     \
        snprintf(err, errlen, __VA_ARGS__);                                                                  \
        return PDR_EINVAL;                                                                                   \
    } while (0)

static int is_int_array(const json_t *a)
{
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v) if (!json_is_integer(v)) return 0;
    return 1;
}

static int check_bool(json_t *root, const char *key, int *out, char *err, size_t errlen)
{
    json_t *v = json_object_get(root, key);
    *out = 0;
    if (v == NULL || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        FAIL("'%s' must be a boolean", key);
    *out = json_is_true(v);
    return 0;
}

static int parse_generate(pdr_pdreq_t *r, char *err, size_t errlen)
{
    json_t *text = json_object_get(r->root, "text");
    json_t *ids = json_object_get(r->root, "input_ids");
    json_t *emb = json_object_get(r->root, "input_embeds");
    if (text != NULL && !json_is_null(text)) {
        if (json_is_array(text)) {
            if (json_array_size(text) == 0)
                FAIL("'text' must not be an empty array");
            size_t i;
            json_t *v;
            json_array_foreach(text, i, v) if (!json_is_string(v))
                FAIL("'text' must be a string or an array of strings");
            r->batch = json_array_size(text);
        } else if (!json_is_string(text)) {
            FAIL("'text' must be a string or an array of strings");
        }
    } else if (ids != NULL && !json_is_null(ids)) {
        if (!json_is_array(ids) || json_array_size(ids) == 0)
            FAIL("'input_ids' must be a non-empty array of integers or of arrays of integers");
        if (json_is_array(json_array_get(ids, 0))) {
            size_t i;
            json_t *v;
            json_array_foreach(ids, i, v) if (!json_is_array(v) || !is_int_array(v))
                FAIL("'input_ids' must be a non-empty array of integers or of arrays of integers");
            r->batch = json_array_size(ids);
        } else if (!is_int_array(ids)) {
            FAIL("'input_ids' must be a non-empty array of integers or of arrays of integers");
        }
    } else if (emb == NULL || json_is_null(emb)) {
        FAIL("one of 'text', 'input_ids' or 'input_embeds' is required");
    }
    json_t *sp = json_object_get(r->root, "sampling_params");
    if (sp != NULL && !json_is_null(sp) && !json_is_object(sp) && !json_is_array(sp))
        FAIL("'sampling_params' must be an object");
    return check_bool(r->root, "return_logprob", &r->want_logprobs, err, errlen);
}

static int check_max_tokens(json_t *root, const char *key, char *err, size_t errlen)
{
    json_t *v = json_object_get(root, key);
    if (v != NULL && !json_is_null(v) && (!json_is_integer(v) || json_integer_value(v) < 0))
        FAIL("'%s' must be a non-negative integer", key);
    return 0;
}

static int parse_completions(pdr_pdreq_t *r, char *err, size_t errlen)
{
    json_t *p = json_object_get(r->root, "prompt");
    if (p == NULL || json_is_null(p))
        FAIL("'prompt' is required");
    if (json_is_array(p)) {
        if (json_array_size(p) == 0)
            FAIL("'prompt' must not be an empty array");
        json_t *first = json_array_get(p, 0);
        size_t i;
        json_t *v;
        if (json_is_string(first)) {
            json_array_foreach(p, i, v) if (!json_is_string(v))
                FAIL("'prompt' array items must all be strings");
            r->batch = json_array_size(p);
        } else if (json_is_array(first)) {
            json_array_foreach(p, i, v) if (!json_is_array(v) || !is_int_array(v))
                FAIL("'prompt' array items must all be arrays of integers");
            r->batch = json_array_size(p);
        } else if (!is_int_array(p)) {
            FAIL("'prompt' must be a string, an array of strings, or an array of integers");
        }
    } else if (!json_is_string(p)) {
        FAIL("'prompt' must be a string, an array of strings, or an array of integers");
    }
    if (check_max_tokens(r->root, "max_tokens", err, errlen) != 0)
        return PDR_EINVAL;
    json_t *lp = json_object_get(r->root, "logprobs");
    if (lp != NULL && !json_is_null(lp)) {
        if (json_is_integer(lp))
            r->want_logprobs = json_integer_value(lp) > 0;
        else if (json_is_boolean(lp))
            r->want_logprobs = json_is_true(lp);
        else
            FAIL("'logprobs' must be an integer");
    }
    return 0;
}

static int parse_chat(pdr_pdreq_t *r, char *err, size_t errlen)
{
    json_t *m = json_object_get(r->root, "messages");
    if (m == NULL || !json_is_array(m) || json_array_size(m) == 0)
        FAIL("'messages' must be a non-empty array");
    size_t i;
    json_t *v;
    json_array_foreach(m, i, v) if (!json_is_object(v)) FAIL("'messages[%zu]' must be an object", i);
    json_t *n = json_object_get(r->root, "n");
    if (n != NULL && !json_is_null(n)) {
        if (!json_is_integer(n) || json_integer_value(n) < 1 || json_integer_value(n) > 128)
            FAIL("'n' must be an integer between 1 and 128");
        if (json_integer_value(n) > 1)
            r->batch = (size_t)json_integer_value(n);
    }
    if (check_max_tokens(r->root, "max_tokens", err, errlen) != 0 ||
        check_max_tokens(r->root, "max_completion_tokens", err, errlen) != 0)
        return PDR_EINVAL;
    return check_bool(r->root, "logprobs", &r->want_logprobs, err, errlen);
}

int pdr_pdreq_parse(pdr_route_t route, const char *body, size_t len, pdr_pdreq_t *r, char *err, size_t errlen)
{
    json_error_t je;
    memset(r, 0, sizeof(*r));
    if (len == 0)
        FAIL("request body is empty; a JSON object is required");
    r->root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (r->root == NULL)
        FAIL("malformed JSON at line %d column %d: %s", je.line, je.column, je.text);
    int rc = PDR_EINVAL;
    if (!json_is_object(r->root)) {
        snprintf(err, errlen, "the request body must be a JSON object");
        goto fail;
    }
    if ((rc = check_bool(r->root, "stream", &r->stream, err, errlen)) != 0)
        goto fail;
    json_t *model = json_object_get(r->root, "model");
    if (model != NULL && !json_is_null(model) && !json_is_string(model)) {
        snprintf(err, errlen, "'model' must be a string");
        rc = PDR_EINVAL;
        goto fail;
    }
    switch (route) {
    case PDR_ROUTE_GENERATE:
        rc = parse_generate(r, err, errlen);
        break;
    case PDR_ROUTE_COMPLETIONS:
        rc = parse_completions(r, err, errlen);
        break;
    default:
        rc = parse_chat(r, err, errlen);
        break;
    }
    if (rc == 0)
        return 0;
fail:
    pdr_pdreq_clear(r);
    return rc;
}

void pdr_pdreq_clear(pdr_pdreq_t *r)
{
    if (r->root != NULL)
        json_decref(r->root);
    memset(r, 0, sizeof(*r));
}

char *pdr_pdreq_build_body(pdr_pdreq_t *r, const char *bootstrap_host, int bport, const uint64_t *rooms,
                           size_t *len)
{
    json_t *host, *port, *room;
    if (r->batch == 0) {
        host = json_string(bootstrap_host);
        port = bport < 0 ? json_null() : json_integer(bport);
        room = json_integer((json_int_t)rooms[0]);
    } else {
        host = json_array();
        port = json_array();
        room = json_array();
        for (size_t i = 0; i < r->batch; i++) {
            json_array_append_new(host, json_string(bootstrap_host));
            json_array_append_new(port, bport < 0 ? json_null() : json_integer(bport));
            json_array_append_new(room, json_integer((json_int_t)rooms[i]));
        }
    }
    /* json_object_set_new replaces a client's value under the same name: a client never chooses
     * where KV goes. */
    json_object_set_new(r->root, "bootstrap_host", host);
    json_object_set_new(r->root, "bootstrap_port", port);
    json_object_set_new(r->root, "bootstrap_room", room);
    char *s = json_dumps(r->root, JSON_COMPACT);
    if (s != NULL)
        *len = strlen(s);
    return s;
}

static int merge_one(json_t *d, const json_t *p)
{
    json_t *dm = json_object_get(d, "meta_info");
    json_t *pm = json_object_get(p, "meta_info");
    if (!json_is_object(dm) || !json_is_object(pm))
        return 0;
    json_t *pl = json_object_get(pm, "input_token_logprobs");
    if (!json_is_array(pl))
        return 0;
    json_t *dl = json_object_get(dm, "input_token_logprobs");
    json_t *merged = json_copy(pl);
    if (json_is_array(dl))
        json_array_extend(merged, dl);
    json_object_set_new(dm, "input_token_logprobs", merged);
    return 1;
}

int pdr_merge_logprobs(json_t *decode, const json_t *prefill)
{
    if (json_is_object(decode) && json_is_object(prefill))
        return merge_one(decode, prefill);
    if (json_is_array(decode) && json_is_array(prefill)) {
        int any = 0;
        size_t i;
        json_t *v;
        json_array_foreach(decode, i, v)
        {
            const json_t *pv = json_array_get(prefill, i);
            if (pv != NULL)
                any |= merge_one(v, pv);
        }
        return any;
    }
    if (json_is_object(decode) && json_is_array(prefill)) {
        /* A streamed batch chunk names its item with "index". */
        json_t *idx = json_object_get(decode, "index");
        size_t i = json_is_integer(idx) ? (size_t)json_integer_value(idx) : 0;
        const json_t *pv = json_array_get(prefill, i);
        return pv != NULL ? merge_one(decode, pv) : 0;
    }
    return 0;
}

const char *pdr_sse_first_data(const char *body, size_t len, size_t *out_len)
{
    size_t i = 0;
    while (i < len) {
        const char *nl = memchr(body + i, '\n', len - i);
        size_t end = nl ? (size_t)(nl - body) : len;
        size_t l = end - i;
        if (l > 0 && body[end - 1] == '\r')
            l--;
        if (l >= 5 && memcmp(body + i, "data:", 5) == 0) {
            const char *p = body + i + 5;
            size_t pl = l - 5;
            while (pl > 0 && *p == ' ') {
                p++;
                pl--;
            }
            if (!(pl == 6 && memcmp(p, "[DONE]", 6) == 0)) {
                *out_len = pl;
                return p;
            }
        }
        i = end + 1;
    }
    return NULL;
}
