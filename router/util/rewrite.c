/*
 * Request validation and rewriting for the PD routes (see rewrite.h). Validation is strict about
 * the types the router relies on (stream, batch shape, logprob flags) and about the fields a worker
 * needs to run at all; it leaves every other field to the worker.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "err.h"
#include "rewrite.h"
#include "util.h"

#define FAIL(...)                                                                                            \
    do {                                                                                                     \
        snprintf(err, errlen, __VA_ARGS__);                                                                  \
        return PDR_EINVAL;                                                                                   \
    } while (0)

/* 1024: far more top-level fields than any OpenAI or sglang request has. */
#define MAX_MEMBERS 1024
/* 128: the maximum of n in OpenAI's chat completions reference; completions use the same bound. */
#define MAX_N 128

/* Inline everywhere: the name is a literal, so pdr_jfind measures it at compile time. */
static inline __attribute__((always_inline)) const pdr_jval_t *get(const pdr_pdreq_t *r, const char *name)
{
    const pdr_jmember_t *m = pdr_jfind(r->m, r->n, name);
    return m != NULL && m->v.type != PDR_JT_NULL ? &m->v : NULL;
}

static int get_bool(const pdr_pdreq_t *r, const char *key, int *out, char *err, size_t errlen)
{
    const pdr_jval_t *v = get(r, key);
    *out = 0;
    if (v == NULL)
        return 0;
    if (v->type != PDR_JT_TRUE && v->type != PDR_JT_FALSE)
        FAIL("'%s' must be a boolean", key);
    *out = v->type == PDR_JT_TRUE;
    return 0;
}

/* An array of arrays of integers; with allow_empty, inner arrays may be empty. */
static int is_int_lists(const pdr_jval_t *v, int allow_empty)
{
    return v->type == PDR_JT_ARRAY && v->elem == PDR_JT_ARRAY &&
           (v->elem_elem == PDR_JT_INT || v->elem_elem == PDR_JT_NONE) && (allow_empty || !v->empty_inner);
}

/*
 * sglang's GenerateReqInput takes one prompt form. Given two, it takes the batch size from the first of
 * text, input_ids, input_embeds but tokenizes from input_ids (older releases refuse the pair outright), so
 * {"text":"a","input_ids":[[1],[2]]} would be one item to the router and two token lists to the engine.
 * The router refuses such bodies rather than guess.
 */
static int parse_generate(pdr_pdreq_t *r, char *err, size_t errlen)
{
    const pdr_jval_t *text = get(r, "text"), *ids = get(r, "input_ids"), *embeds = get(r, "input_embeds");
    if ((text != NULL) + (ids != NULL) + (embeds != NULL) > 1)
        FAIL("give only one of 'text', 'input_ids' or 'input_embeds' (this request has %s%s%s%s%s)",
             text ? "'text'" : "", text && ids ? " and " : "", ids ? "'input_ids'" : "",
             (text || ids) && embeds ? " and " : "", embeds ? "'input_embeds'" : "");
    if (text != NULL) {
        if (text->type == PDR_JT_ARRAY) {
            if (text->count == 0)
                FAIL("'text' must not be an empty array");
            if (text->elem != PDR_JT_STRING)
                FAIL("'text' must be a string or an array of strings");
            r->batch = text->count;
        } else if (text->type != PDR_JT_STRING) {
            FAIL("'text' must be a string or an array of strings");
        }
    } else if (ids != NULL) {
        if (ids->type == PDR_JT_ARRAY && ids->count > 0 && is_int_lists(ids, 0))
            r->batch = ids->count;
        else if (ids->type != PDR_JT_ARRAY || ids->count == 0 || ids->elem != PDR_JT_INT)
            FAIL("'input_ids' must be a non-empty array of integers or a non-empty array of non-empty "
                 "arrays of integers");
    } else if (embeds != NULL) {
        /* One prompt is a list of vectors, a batch a list of those. */
        if (embeds->type != PDR_JT_ARRAY || embeds->count == 0 || embeds->elem != PDR_JT_ARRAY ||
            embeds->empty_inner)
            FAIL("'input_embeds' must be a non-empty array of embedding vectors, or an array of those");
        if (embeds->elem_elem == PDR_JT_ARRAY)
            r->batch = embeds->count;
        else if (embeds->elem_elem != PDR_JT_NUMBER && embeds->elem_elem != PDR_JT_INT)
            FAIL("'input_embeds' must be a non-empty array of embedding vectors, or an array of those");
    } else {
        FAIL("one of 'text', 'input_ids' or 'input_embeds' is required");
    }
    const pdr_jval_t *sp = get(r, "sampling_params");
    if (sp != NULL && sp->type != PDR_JT_OBJECT && sp->type != PDR_JT_ARRAY)
        FAIL("'sampling_params' must be an object");
    return get_bool(r, "return_logprob", &r->want_logprobs, err, errlen);
}

static int check_count(const pdr_pdreq_t *r, const char *key, int64_t min, int64_t max, char *err,
                       size_t errlen)
{
    const pdr_jval_t *v = get(r, key);
    int64_t x;
    if (v != NULL && (v->type != PDR_JT_INT || pdr_jval_int(v, &x) != 0 || x < min || x > max)) {
        if (max == INT64_MAX)
            FAIL("'%s' must be a non-negative integer", key);
        FAIL("'%s' must be an integer between %lld and %lld", key, (long long)min, (long long)max);
    }
    return 0;
}

static int parse_completions(pdr_pdreq_t *r, char *err, size_t errlen)
{
    const pdr_jval_t *p = get(r, "prompt");
    if (p == NULL)
        FAIL("'prompt' is required");
    if (p->type == PDR_JT_ARRAY) {
        if (p->count == 0)
            FAIL("'prompt' must not be an empty array");
        if (p->elem == PDR_JT_STRING || is_int_lists(p, 1))
            r->batch = p->count;
        else if (p->elem != PDR_JT_INT)
            FAIL("'prompt' must be a string, an array of strings, or an array of integers");
    } else if (p->type != PDR_JT_STRING) {
        FAIL("'prompt' must be a string, an array of strings, or an array of integers");
    }
    /* n completions per prompt: the engine samples them from one prefill, so the batch stays the prompts. */
    if (check_count(r, "n", 1, MAX_N, err, errlen) != 0 ||
        check_count(r, "max_tokens", 0, INT64_MAX, err, errlen) != 0)
        return PDR_EINVAL;
    const pdr_jval_t *lp = get(r, "logprobs");
    if (lp != NULL) {
        int64_t k;
        if (lp->type == PDR_JT_INT && pdr_jval_int(lp, &k) == 0)
            r->want_logprobs = k > 0;
        else if (lp->type == PDR_JT_TRUE || lp->type == PDR_JT_FALSE)
            r->want_logprobs = lp->type == PDR_JT_TRUE;
        else
            FAIL("'logprobs' must be an integer");
    }
    return 0;
}

/* Each message: an object whose "role" is a string and whose "content", if any, is a string, null or an
 * array of content parts (objects). Every occurrence of a repeated key is checked: parsers keep the last. */
static int check_messages(const pdr_jval_t *msgs, char *err, size_t errlen)
{
    size_t pos = 0, i = 0;
    pdr_jval_t msg;
    for (; pdr_jarray_next(msgs, &pos, &msg); i++) {
        size_t mpos = 0;
        int has_role = 0;
        pdr_jmember_t f;
        while (pdr_jobject_next(&msg, &mpos, &f)) {
            if (pdr_jmember_key_is(&f, "role")) {
                if (f.v.type != PDR_JT_STRING)
                    FAIL("'messages[%zu].role' must be a string", i);
                has_role = 1;
            } else if (pdr_jmember_key_is(&f, "content")) {
                if (f.v.type != PDR_JT_STRING && f.v.type != PDR_JT_NULL &&
                    (f.v.type != PDR_JT_ARRAY || (f.v.count > 0 && f.v.elem != PDR_JT_OBJECT)))
                    FAIL("'messages[%zu].content' must be a string, null or an array of content parts "
                         "(objects)",
                         i);
            }
        }
        if (!has_role)
            FAIL("'messages[%zu].role' is required (a string such as \"user\")", i);
    }
    return 0;
}

static int parse_chat(pdr_pdreq_t *r, char *err, size_t errlen)
{
    const pdr_jval_t *m = get(r, "messages");
    if (m == NULL || m->type != PDR_JT_ARRAY || m->count == 0)
        FAIL("'messages' must be a non-empty array");
    if (m->elem != PDR_JT_OBJECT)
        FAIL("'messages' items must all be objects");
    if (check_messages(m, err, errlen) != 0)
        return PDR_EINVAL;
    if (check_count(r, "n", 1, MAX_N, err, errlen) != 0)
        return PDR_EINVAL;
    const pdr_jval_t *n = get(r, "n");
    int64_t k;
    if (n != NULL && pdr_jval_int(n, &k) == 0 && k > 1)
        r->batch = (size_t)k;
    if (check_count(r, "max_tokens", 0, INT64_MAX, err, errlen) != 0 ||
        check_count(r, "max_completion_tokens", 0, INT64_MAX, err, errlen) != 0)
        return PDR_EINVAL;
    return get_bool(r, "logprobs", &r->want_logprobs, err, errlen);
}

int pdr_pdreq_parse_in(pdr_route_t route, const char *body, size_t len, pdr_pdreq_t *r, pdr_jmember_t *space,
                       size_t space_n, char *err, size_t errlen)
{
    memset(r, 0, sizeof(*r));
    r->body = body;
    r->len = len;
    /* Room for every member of a small body; a member needs at least 5 bytes ("a":1,). */
    size_t cap = len / 5 + 1 < MAX_MEMBERS ? len / 5 + 1 : MAX_MEMBERS;
    int rc = PDR_ETOOBIG;
    if (space != NULL && space_n > 0) {
        /* The caller's space first: a body has few top-level members, however long its prompt. */
        r->m = space;
        rc = pdr_json_scan_object_in(body, len, space, space_n < cap ? space_n : cap, &r->n, err, errlen);
        if (rc == PDR_ETOOBIG && space_n >= cap)
            rc = PDR_EINVAL; /* more members than any body of this length may have: the error stands */
    }
    if (rc == PDR_ETOOBIG) {
        r->m = malloc(cap * sizeof(*r->m));
        if (r->m == NULL) {
            snprintf(err, errlen, "out of memory");
            return PDR_ENOMEM;
        }
        r->m_owned = 1;
        rc = pdr_json_scan_object(body, len, r->m, cap, &r->n, err, errlen);
    }
    if (rc == 0 && (rc = get_bool(r, "stream", &r->stream, err, errlen)) == 0) {
        const pdr_jval_t *model = get(r, "model");
        if (model != NULL && model->type != PDR_JT_STRING) {
            snprintf(err, errlen, "'model' must be a string");
            rc = PDR_EINVAL;
        } else if (route == PDR_ROUTE_GENERATE) {
            rc = parse_generate(r, err, errlen);
        } else if (route == PDR_ROUTE_COMPLETIONS) {
            rc = parse_completions(r, err, errlen);
        } else {
            rc = parse_chat(r, err, errlen);
        }
    }
    if (rc != 0)
        pdr_pdreq_clear(r);
    return rc;
}

int pdr_pdreq_parse(pdr_route_t route, const char *body, size_t len, pdr_pdreq_t *r, char *err, size_t errlen)
{
    return pdr_pdreq_parse_in(route, body, len, r, NULL, 0, err, errlen);
}

void pdr_pdreq_clear(pdr_pdreq_t *r)
{
    if (r->m_owned)
        free(r->m);
    memset(r, 0, sizeof(*r));
}

/* The fields that say where KV goes: the router's alone. pd_ticket (protocol pdshim) is dropped under
 * every protocol, so that no client ticket ever reaches a worker. */
static int is_bootstrap_field(const pdr_jmember_t *m)
{
    return (m->key_len >= 14 &&
            (pdr_jmember_key_is(m, "bootstrap_host") || pdr_jmember_key_is(m, "bootstrap_port") ||
             pdr_jmember_key_is(m, "bootstrap_room"))) ||
           pdr_jmember_key_is(m, "pd_ticket");
}

/* sglang's field for the data-parallel rank a request goes to (newer releases also read routed_dp_rank and
 * take this one as its deprecated spelling). */
static int is_rank_field(const pdr_jmember_t *m)
{
    return pdr_jmember_key_is(m, "data_parallel_rank");
}

static size_t put_rank(char *out, size_t o, int dp_rank)
{
    static const char k[] = "\"data_parallel_rank\":";
    memcpy(out + o, k, sizeof(k) - 1);
    o += sizeof(k) - 1;
    return o + pdr_fmt_u64(out + o, (uint64_t)dp_rank);
}

char *pdr_pdreq_build_body(pdr_pdreq_t *r, const char *bootstrap_host, int bport, const uint64_t *rooms,
                           size_t *len)
{
    return pdr_pdreq_build_body_rank(r, bootstrap_host, bport, rooms, -1, len);
}

char *pdr_pdreq_build_body_rank(pdr_pdreq_t *r, const char *bootstrap_host, int bport, const uint64_t *rooms,
                                int dp_rank, size_t *len)
{
    return pdr_pdreq_build_body_ticket(r, bootstrap_host, bport, rooms, dp_rank, NULL, len);
}

void pdr_pdreq_rid(uint64_t room, char out[PDR_RID_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    memcpy(out, "pdr-", 4);
    for (int i = 0; i < 16; i++)
        out[4 + i] = hex[(room >> (60 - 4 * i)) & 15];
    out[PDR_RID_LEN] = '\0';
}

/* A member added after the body's last one, its closing brace moved past it: the key (with its comma and
 * colon), then '[' for a batch; put_item writes the i-th quoted string (no escaping: the caller's strings
 * need none), member_close the ']' and the brace. */
static size_t member_open(char *out, size_t o, const char *k, size_t klen, int batch)
{
    o--; /* the closing brace */
    memcpy(out + o, k, klen);
    o += klen;
    if (batch)
        out[o++] = '[';
    return o;
}

static size_t put_item(char *out, size_t o, size_t i, const char *v, size_t n)
{
    if (i > 0)
        out[o++] = ',';
    out[o++] = '"';
    memcpy(out + o, v, n);
    o += n;
    out[o++] = '"';
    return o;
}

static size_t member_close(char *out, size_t o, int batch)
{
    if (batch)
        out[o++] = ']';
    out[o++] = '}';
    return o;
}

static char *build_pd_body(pdr_pdreq_t *r, const char *bootstrap_host, int bport, const uint64_t *rooms,
                           int dp_rank, const char *const *tickets, int rids, size_t *len);

char *pdr_pdreq_build_body_ticket(pdr_pdreq_t *r, const char *bootstrap_host, int bport,
                                  const uint64_t *rooms, int dp_rank, const char *const *tickets, size_t *len)
{
    return build_pd_body(r, bootstrap_host, bport, rooms, dp_rank, tickets, 0, len);
}

char *pdr_pdreq_build_body_rid(pdr_pdreq_t *r, const char *bootstrap_host, int bport, const uint64_t *rooms,
                               int dp_rank, const char *const *tickets, size_t *len)
{
    return build_pd_body(r, bootstrap_host, bport, rooms, dp_rank, tickets, 1, len);
}

/* rids: the router's "rid" per item replaces the client's. */
static char *build_pd_body(pdr_pdreq_t *r, const char *bootstrap_host, int bport, const uint64_t *rooms,
                           int dp_rank, const char *const *tickets, int rids, size_t *len)
{
    size_t items = r->batch ? r->batch : 1;
    size_t hl = strlen(bootstrap_host);
    size_t tl = 0;
    for (size_t i = 0; tickets != NULL && i < items; i++)
        tl += strlen(tickets[i]) + 3;
    /* Members, separators, the three fields: each item at most host + quotes, 5-digit port or null,
     * 19-digit room, 3 commas; the tickets with quotes and commas, and their key; the rids with quotes and
     * commas, their key and brackets. */
    size_t cap = r->len + 2 + r->n + 64 + items * (hl + 2 + 5 + 19 + 3) + 16 + 48 + tl + 16 +
                 (rids ? items * (PDR_RID_LEN + 3) + 16 : 0);
    char *out = malloc(cap);
    if (out == NULL)
        return NULL;
    size_t o = 0;
    out[o++] = '{';
    for (size_t i = 0; i < r->n; i++) {
        const pdr_jmember_t *m = &r->m[i];
        if (is_bootstrap_field(m) || (dp_rank >= 0 && is_rank_field(m)) ||
            (rids && pdr_jmember_key_is(m, "rid")))
            continue; /* a client never chooses where KV goes, nor the rank or the rid the router chose */
        memcpy(out + o, m->raw, m->raw_len);
        o += m->raw_len;
        out[o++] = ',';
    }
    if (dp_rank >= 0) {
        o = put_rank(out, o, dp_rank);
        out[o++] = ',';
    }
    static const char names[3][18] = {"\"bootstrap_host\":", "\"bootstrap_port\":", "\"bootstrap_room\":"};
    for (int f = 0; f < 3; f++) {
        _Static_assert(sizeof("\"bootstrap_host\":") == 18,
                       "each name is 17 bytes with its quotes and colon");
        memcpy(out + o, names[f], 17);
        o += 17;
        if (r->batch)
            out[o++] = '[';
        for (size_t i = 0; i < items; i++) {
            if (i > 0)
                out[o++] = ',';
            if (f == 0) {
                /* The host comes from a validated worker URL: no character needs escaping. */
                out[o++] = '"';
                memcpy(out + o, bootstrap_host, hl);
                o += hl;
                out[o++] = '"';
            } else if (f == 1) {
                if (bport < 0) {
                    memcpy(out + o, "null", 4);
                    o += 4;
                } else {
                    o += pdr_fmt_u64(out + o, (uint64_t)bport);
                }
            } else {
                o += pdr_fmt_u64(out + o, rooms[i]);
            }
        }
        if (r->batch)
            out[o++] = ']';
        out[o++] = f < 2 ? ',' : '}';
    }
    if (rids) {
        static const char k[] = ",\"rid\":";
        o = member_open(out, o, k, sizeof(k) - 1, r->batch);
        for (size_t i = 0; i < items; i++) {
            char rid[PDR_RID_LEN + 1];
            pdr_pdreq_rid(rooms[i], rid);
            o = put_item(out, o, i, rid, PDR_RID_LEN);
        }
        o = member_close(out, o, r->batch);
    }
    if (tickets != NULL) {
        /* Tickets are base64url and dots (ticket.h): no character needs escaping. */
        static const char k[] = ",\"pd_ticket\":";
        o = member_open(out, o, k, sizeof(k) - 1, r->batch);
        for (size_t i = 0; i < items; i++)
            o = put_item(out, o, i, tickets[i], strlen(tickets[i]));
        o = member_close(out, o, r->batch);
    }
    out[o] = '\0';
    *len = o;
    return out;
}

char *pdr_pdreq_build_plain(const pdr_pdreq_t *r, int dp_rank, size_t *len)
{
    char *out = malloc(r->len + r->n + 3 + 48);
    if (out == NULL)
        return NULL;
    size_t o = 0;
    out[o++] = '{';
    for (size_t i = 0; i < r->n; i++) {
        const pdr_jmember_t *m = &r->m[i];
        if (is_bootstrap_field(m) || pdr_jmember_key_is(m, "kv_transfer_params") ||
            (dp_rank >= 0 && is_rank_field(m)))
            continue; /* a client never chooses where KV goes, nor that its request is a PD leg */
        if (o > 1)
            out[o++] = ',';
        memcpy(out + o, m->raw, m->raw_len);
        o += m->raw_len;
    }
    if (dp_rank >= 0) {
        if (o > 1)
            out[o++] = ',';
        o = put_rank(out, o, dp_rank);
    }
    out[o++] = '}';
    out[o] = '\0';
    *len = o;
    return out;
}

/* ---- protocol vllm ---- */

/* What the router sets on the prefill and release legs (vLLM's proxies drop min_tokens and
 * min_completion_tokens there: a one-token prefill cannot honour them; the decode receives them). */
static int is_vllm_prefill_field(const pdr_jmember_t *m)
{
    static const char *const names[] = {"stream",
                                        "max_tokens",
                                        "max_completion_tokens",
                                        "stream_options",
                                        "min_tokens",
                                        "min_completion_tokens",
                                        "kv_transfer_params"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (pdr_jmember_key_is(m, names[i]))
            return 1;
    return 0;
}

/* {"do_remote_decode": true, every other field false or null}: vLLM's proxies send exactly this. */
static const char VLLM_ASK[] =
    "\"kv_transfer_params\":{\"do_remote_decode\":true,\"do_remote_prefill\":false,"
    "\"remote_engine_id\":null,\"remote_block_ids\":null,\"remote_host\":null,"
    "\"remote_port\":null}";

static size_t put(char *out, size_t o, const char *s, size_t n)
{
    memcpy(out + o, s, n);
    return o + n;
}

char *pdr_pdreq_build_vllm(const pdr_pdreq_t *r, pdr_vllm_body_t kind, const char *kv, size_t kv_len,
                           size_t *len)
{
    size_t cap = r->len + r->n + kv_len + sizeof(VLLM_ASK) + 128;
    char *out = malloc(cap);
    if (out == NULL)
        return NULL;
    size_t o = 0;
    out[o++] = '{';
    for (size_t i = 0; i < r->n; i++) {
        const pdr_jmember_t *m = &r->m[i];
        if (kind == PDR_VLLM_DECODE ? pdr_jmember_key_is(m, "kv_transfer_params") : is_vllm_prefill_field(m))
            continue; /* a client never chooses where KV goes */
        o = put(out, o, m->raw, m->raw_len);
        out[o++] = ',';
    }
    if (kind != PDR_VLLM_DECODE) {
        static const char one[] = "\"stream\":false,\"max_tokens\":1,";
        o = put(out, o, one, sizeof(one) - 1);
        if (pdr_jfind(r->m, r->n, "max_completion_tokens") != NULL)
            o = put(out, o, "\"max_completion_tokens\":1,", sizeof("\"max_completion_tokens\":1,") - 1);
    }
    if (kind == PDR_VLLM_PREFILL) {
        o = put(out, o, VLLM_ASK, sizeof(VLLM_ASK) - 1);
    } else {
        o = put(out, o, "\"kv_transfer_params\":", sizeof("\"kv_transfer_params\":") - 1);
        o = put(out, o, kv, kv_len);
    }
    out[o++] = '}';
    out[o] = '\0';
    *len = o;
    return out;
}

int pdr_vllm_kv_params(const char *body, size_t len, const char **kv, size_t *kv_len, char *err,
                       size_t errlen)
{
    size_t cap = len / 5 + 1 < MAX_MEMBERS ? len / 5 + 1 : MAX_MEMBERS, n = 0;
    pdr_jmember_t *m = malloc(cap * sizeof(*m));
    if (m == NULL) {
        snprintf(err, errlen, "out of memory");
        return PDR_ENOMEM;
    }
    char why[160];
    int rc = pdr_json_scan_object(body, len, m, cap, &n, why, sizeof(why));
    if (rc != 0) {
        free(m);
        if (rc == PDR_ENOMEM)
            FAIL("out of memory");
        FAIL("the prefill's answer is not a JSON object (%s)", why);
    }
    const pdr_jmember_t *f = pdr_jfind(m, n, "kv_transfer_params");
    pdr_jval_t v = f != NULL ? f->v : (pdr_jval_t){0};
    free(m);
    if (f == NULL || v.type != PDR_JT_OBJECT)
        FAIL("the prefill's answer has no kv_transfer_params object (is the prefill a vLLM worker with a KV "
             "connector, kv_role kv_producer or kv_both?)");
    size_t pos = 0;
    pdr_jmember_t e;
    int remote = 0;
    while (pdr_jobject_next(&v, &pos, &e))
        if (pdr_jmember_key_is(&e, "do_remote_prefill"))
            remote = e.v.type == PDR_JT_TRUE; /* the last occurrence counts, as in Python's json */
    if (!remote)
        FAIL("the prefill's kv_transfer_params does not offer its KV (\"do_remote_prefill\" is not true)");
    *kv = v.p;
    *kv_len = v.len;
    return 0;
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
