/*
 * Fuzz target for the sglang PD request rewrite (router/util/rewrite.c) and the readers of an accepted body:
 * the prompt's token ids (router/workers/token_ids.c) and its measure for conditional disaggregation
 * (router/workers/disagg.c). The first input byte picks the route and the leg's parameters, the rest is the
 * client's body:
 *   bits 0-1  route: 0 /generate, 1 /v1/completions, 2 /v1/chat/completions (3: /generate too)
 *   bit 2     a data-parallel rank (bit 6: INT_MAX, else 0..7 from the second byte's low bits)
 *   bit 3     protocol pdshim's tickets
 *   bit 4     no bootstrap port (null)
 *   bit 5     an IPv6 bootstrap host of the longest form
 * Invariants, for every body the parser accepts:
 *   - the batch size is the prompt form's (jansson reads the same body), at most what the body can hold
 *     (chat: n, at most 128);
 *   - each leg's body (pdr_pdreq_build_body_rid and _ticket, with and without rank and tickets, and the
 *     plain body of pdr_pdreq_build_plain) is one strict JSON object, accepted again by the router's own
 *     scanner (no duplicate key), of exactly the length returned;
 *   - it carries the router's bootstrap_host, bootstrap_port and bootstrap_room (arrays of batch items
 *     when batch > 0), its rid per item when built with rids (the client's dropped), the data_parallel_rank
 *     asked for, pd_ticket only when tickets were given, and every
 *     other member of the client's body unchanged (json_equal); the plain body none of the router's fields;
 *   - token ids equal the body's input_ids when those are in range, the tokenizer's ids are in its
 *     vocabulary, and the disaggregation measure never counts more matched than length.
 * When jansson refuses the input (a number beyond int64, depth, ...) the structural checks run through the
 * router's scanner alone. Built with libFuzzer when PDR_LIBFUZZER is defined; otherwise a main() replays
 * the files named on the command line with deterministic mutations (ctest's router_rewrite_fuzz_corpus).
 */
#include <jansson.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "disagg.h"
#include "err.h"
#include "rewrite.h"
#include "token_ids.h"
#include "tokenizer.h"
#include "tokenizer_internal.h"

#define FUZZ_MAX_ROOMS 4096

static void fail(const char *what, const char *s, size_t n)
{
    fprintf(stderr, "fuzz_rewrite: %s: %.*s\n", what, (int)(n < 2000 ? n : 2000), s);
    abort();
}

/* A byte-level BPE tokenizer of a few tokens: enough to reach the encoder from a string prompt. */
static const pdr_tokenizer_t *fuzz_tokenizer(void)
{
    static pdr_tokenizer_t *tk;
    static int ready;
    if (!ready) {
        static const char json[] =
            "{\"added_tokens\":[{\"id\":9,\"content\":\"<|end|>\",\"special\":true}],"
            "\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
            "\"use_regex\":true},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"\\u0120\":"
            "3,"
            "\"ab\":4,\"abc\":5,\"\\u0120a\":6,\"1\":7,\"2\":8},\"merges\":[\"a b\",\"ab c\",\"\\u0120 "
            "a\"]}}";
        char *buf = malloc(sizeof(json) - 1);
        char err[256];
        if (buf == NULL)
            abort();
        memcpy(buf, json, sizeof(json) - 1);
        tk = pdr__tokenizer_load_buffer(buf, sizeof(json) - 1, "fuzz-tokenizer.json", err, sizeof(err));
        if (tk == NULL) {
            fprintf(stderr, "fuzz_rewrite: the test tokenizer does not load: %s\n", err);
            abort();
        }
        ready = 1;
    }
    return tk;
}

/* The batch size sglang and the OpenAI routes give the body jansson read (the parser accepted it). */
static size_t expected_batch(pdr_route_t route, json_t *j)
{
    if (route == PDR_ROUTE_GENERATE) {
        json_t *t = json_object_get(j, "text"), *ids = json_object_get(j, "input_ids"),
               *e = json_object_get(j, "input_embeds");
        if (json_is_array(t))
            return json_array_size(t);
        if (json_is_array(ids))
            return json_is_array(json_array_get(ids, 0)) ? json_array_size(ids) : 0;
        if (json_is_array(e))
            return json_is_array(json_array_get(json_array_get(e, 0), 0)) ? json_array_size(e) : 0;
        return 0;
    }
    if (route == PDR_ROUTE_COMPLETIONS) {
        json_t *p = json_object_get(j, "prompt");
        if (!json_is_array(p))
            return 0;
        json_t *first = json_array_get(p, 0);
        return json_is_string(first) || json_is_array(first) ? json_array_size(p) : 0;
    }
    json_t *n = json_object_get(j, "n");
    return json_is_integer(n) && json_integer_value(n) > 1 ? (size_t)json_integer_value(n) : 0;
}

/* The current leg was built with the router's rids (pdr_pdreq_build_body_rid): "rid" is the router's. */
static int leg_rids;

static int is_router_key(const char *k, int plain)
{
    return (leg_rids && strcmp(k, "rid") == 0) || strcmp(k, "bootstrap_host") == 0 ||
           strcmp(k, "bootstrap_port") == 0 || strcmp(k, "bootstrap_room") == 0 ||
           strcmp(k, "pd_ticket") == 0 || strcmp(k, "data_parallel_rank") == 0 ||
           (plain && strcmp(k, "kv_transfer_params") == 0);
}

/* One field the router set: a scalar for one item, else an array of `items` such scalars. */
static void check_field(json_t *o, const char *key, size_t batch, size_t items, json_t *(*want)(size_t i),
                        const char *s, size_t n)
{
    json_t *v = json_object_get(o, key);
    if (v == NULL)
        fail(key, s, n);
    for (size_t i = 0; i < items; i++) {
        json_t *got = batch ? json_array_get(v, i) : v;
        json_t *w = want(i);
        if (got == NULL || !json_equal(got, w))
            fail(key, s, n);
        json_decref(w);
    }
    if (batch && (!json_is_array(v) || json_array_size(v) != items))
        fail(key, s, n);
}

/* What the current leg was built with (check_field's want() callbacks read these). */
static const char *leg_host;
static int leg_port;
static const uint64_t *leg_rooms;
static const char *const *leg_tickets;

static json_t *want_host(size_t i)
{
    (void)i;
    return json_string(leg_host);
}

static json_t *want_port(size_t i)
{
    (void)i;
    return leg_port < 0 ? json_null() : json_integer(leg_port);
}

static json_t *want_room(size_t i)
{
    return json_integer((json_int_t)leg_rooms[i]);
}

static json_t *want_ticket(size_t i)
{
    return json_string(leg_tickets[i]);
}

static json_t *want_rid(size_t i)
{
    char rid[PDR_RID_LEN + 1];
    pdr_pdreq_rid(leg_rooms[i], rid);
    return json_string(rid);
}

/* The body is one object the router's scanner accepts again, of the length returned; jansson's copy
 * (NULL when jansson refused the client's body, which the leg copies). */
static json_t *check_object(const char *s, size_t n, int with_jansson)
{
    static pdr_jmember_t m[4096];
    size_t k;
    char why[160];
    if (strlen(s) != n)
        fail("a NUL inside the body, or a wrong length", s, n);
    if (pdr_json_scan_object(s, n, m, 4096, &k, why, sizeof(why)) != 0)
        fail(why, s, n);
    if (!with_jansson)
        return NULL;
    json_error_t e;
    /* No JSON_REJECT_DUPLICATES: a repeated key inside a member is the client's, copied as it came (the
     * top level was checked by the scan above). */
    json_t *j = json_loadb(s, n, JSON_ALLOW_NUL, &e);
    if (!json_is_object(j))
        fail(e.text, s, n);
    return j;
}

/* Every member of the client's body that the leg keeps comes through unchanged, and nothing else. */
static void check_kept(json_t *in, json_t *out, int plain, int ranked, const char *s, size_t n)
{
    const char *key;
    json_t *v;
    json_object_foreach(in, key, v)
    {
        int dropped = is_router_key(key, plain) && (strcmp(key, "data_parallel_rank") != 0 || ranked);
        if (!dropped && !json_equal(v, json_object_get(out, key)))
            fail("a client member changed", s, n);
    }
    json_object_foreach(out, key, v)
    {
        if (json_object_get(in, key) == NULL && !is_router_key(key, 0))
            fail("a member the client did not send", s, n);
    }
}

static void check_leg(const pdr_pdreq_t *r, json_t *in, int dp_rank, int with_tickets, int rids,
                      const char *host, int bport, const uint64_t *rooms, char **tickets)
{
    size_t items = r->batch ? r->batch : 1, n = 0;
    const char *const *tk = with_tickets ? (const char *const *)tickets : NULL;
    char *s = rids ? pdr_pdreq_build_body_rid((pdr_pdreq_t *)r, host, bport, rooms, dp_rank, tk, &n)
                   : pdr_pdreq_build_body_ticket((pdr_pdreq_t *)r, host, bport, rooms, dp_rank, tk, &n);
    leg_rids = rids;
    if (s == NULL)
        return; /* out of memory */
    json_t *j = check_object(s, n, in != NULL);
    if (j != NULL) {
        leg_host = host;
        leg_port = bport;
        leg_rooms = rooms;
        leg_tickets = (const char *const *)tickets;
        check_field(j, "bootstrap_host", r->batch, items, want_host, s, n);
        check_field(j, "bootstrap_port", r->batch, items, want_port, s, n);
        check_field(j, "bootstrap_room", r->batch, items, want_room, s, n);
        if (rids)
            check_field(j, "rid", r->batch, items, want_rid, s, n);
        if (with_tickets)
            check_field(j, "pd_ticket", r->batch, items, want_ticket, s, n);
        else if (json_object_get(j, "pd_ticket") != NULL)
            fail("a client's pd_ticket reached a worker", s, n);
        json_t *rank = json_object_get(j, "data_parallel_rank");
        if (dp_rank >= 0 && (!json_is_integer(rank) || json_integer_value(rank) != dp_rank))
            fail("data_parallel_rank", s, n);
        check_kept(in, j, 0, dp_rank >= 0, s, n);
        json_decref(j);
    }
    leg_rids = 0;
    free(s);
}

static void check_plain(const pdr_pdreq_t *r, json_t *in, int dp_rank)
{
    size_t n = 0;
    char *s = pdr_pdreq_build_plain(r, dp_rank, &n);
    if (s == NULL)
        return;
    json_t *j = check_object(s, n, in != NULL);
    if (j != NULL) {
        static const char *const gone[] = {"bootstrap_host", "bootstrap_port", "bootstrap_room", "pd_ticket",
                                           "kv_transfer_params"};
        for (size_t i = 0; i < sizeof(gone) / sizeof(gone[0]); i++)
            if (json_object_get(j, gone[i]) != NULL)
                fail(gone[i], s, n);
        json_t *rank = json_object_get(j, "data_parallel_rank");
        if (dp_rank >= 0 && (!json_is_integer(rank) || json_integer_value(rank) != dp_rank))
            fail("data_parallel_rank", s, n);
        check_kept(in, j, 1, dp_rank >= 0, s, n);
        json_decref(j);
    }
    free(s);
}

/* The prompt's token ids: input_ids when they are a flat array in 0..2^32-1 (compared with jansson's
 * reading), else the tokenizer's, each in the vocabulary or an added token. */
static void check_token_ids(const pdr_pdreq_t *r, json_t *in)
{
    const pdr_tokenizer_t *tk = fuzz_tokenizer();
    pdr_prompt_tokens_t tok;
    int rc = pdr_request_token_ids(r, tk, &tok);
    if (rc != 0 && rc != PDR_EINVAL && rc != PDR_ENOMEM && rc != PDR_ENOTSUP)
        fail("an unexpected error code of pdr_request_token_ids", r->body, r->len);
    if (rc != 0 && (tok.ids != NULL || tok.n != 0))
        fail("an error with ids left", r->body, r->len);
    json_t *ids = in != NULL ? json_object_get(in, "input_ids") : NULL;
    if (rc == 0 && r->batch == 0 && json_is_array(ids) && json_array_size(ids) <= PDR_ROUTING_MAX_TOKENS) {
        int in_range = 1;
        for (size_t i = 0; i < json_array_size(ids); i++) {
            json_t *x = json_array_get(ids, i);
            if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > UINT32_MAX)
                in_range = 0;
        }
        if (in_range && tok.n != json_array_size(ids))
            fail("token ids differ in number from input_ids", r->body, r->len);
        for (size_t i = 0; in_range && i < tok.n; i++)
            if ((json_int_t)tok.ids[i] != json_integer_value(json_array_get(ids, i)))
                fail("token ids differ from input_ids", r->body, r->len);
    } else if (rc == 0 && pdr_jfind(r->m, r->n, "input_ids") == NULL) {
        /* The tokenizer's ids (asked of the router's scan: jansson may have refused the body). */
        for (size_t i = 0; i < tok.n; i++)
            if (tok.ids[i] > 9)
                fail("a token id outside the vocabulary", r->body, r->len);
    }
    free(tok.ids);
}

/* The disaggregation measure of each prompt member, with every matched prefix length up to past its end. */
static void check_measure(const pdr_pdreq_t *r)
{
    static const char *const keys[] = {"text", "prompt", "messages", "input_ids"};
    for (size_t i = 0; i < r->n; i++)
        for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
            if (!pdr_jmember_key_is(&r->m[i], keys[k]))
                continue;
            const pdr_jval_t *v = &r->m[i].v;
            size_t steps[4] = {0, v->len / 2, v->len, v->len + 7};
            for (int s = 0; s < 4; s++) {
                pdr_disagg_input_t d;
                pdr_disagg_measure(v->p, v->len, steps[s], &d);
                if (d.matched > d.length || (!d.tokens && d.length != v->len))
                    fail("a measure with matched > length", v->p, v->len);
            }
        }
}

/* Logprob merging of two answers: the input as the prefill's answer and a copy as the decode's. */
static void check_merge(json_t *in)
{
    json_t *d = json_deep_copy(in), *arr = json_array();
    (void)pdr_merge_logprobs(d, in);
    json_array_append(arr, in);
    (void)pdr_merge_logprobs(d, arr);
    json_t *darr = json_array();
    json_array_append(darr, d);
    (void)pdr_merge_logprobs(darr, arr);
    json_decref(darr);
    json_decref(arr);
    json_decref(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t flags = data[0];
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    size_t sl = 0;
    const char *sse = pdr_sse_first_data(body, len, &sl);
    if (sse != NULL && (sse < body || sse + sl > body + len))
        fail("an SSE span outside the body", body, len);
    pdr_route_t route = (flags & 3) == 3 ? PDR_ROUTE_GENERATE : (pdr_route_t)(flags & 3);
    pdr_pdreq_t r;
    char err[256];
    int rc = pdr_pdreq_parse(route, body, len, &r, err, sizeof(err));
    if (rc != 0) {
        if ((rc != PDR_EINVAL && rc != PDR_ENOMEM) || err[0] == '\0' ||
            memchr(err, '\0', sizeof(err)) == NULL)
            fail("a refusal without a message", body, len);
        return 0;
    }
    json_error_t je;
    json_t *in = json_loadb(body, len, JSON_ALLOW_NUL, &je);
    if (in != NULL) {
        if (!json_is_object(in))
            fail("an accepted body that is not an object", body, len);
        size_t want = expected_batch(route, in);
        if (r.batch != want)
            fail("the batch size differs from the prompt form's", body, len);
        check_merge(in);
    }
    /* A batch of prompts has one element (at least 2 bytes) each; chat's n is at most 128. */
    if (route == PDR_ROUTE_CHAT ? r.batch > 128 : r.batch > len / 2)
        fail("a batch larger than the body holds", body, len);
    if (r.batch <= FUZZ_MAX_ROOMS) {
        static uint64_t rooms[FUZZ_MAX_ROOMS];
        static char *tickets[FUZZ_MAX_ROOMS];
        static char ticket_bytes[FUZZ_MAX_ROOMS][40];
        size_t items = r.batch ? r.batch : 1;
        for (size_t i = 0; i < items; i++) {
            rooms[i] = (uint64_t)INT64_MAX - i * 0x100000001ull; /* 19 digits, the most a room has */
            snprintf(ticket_bytes[i], sizeof(ticket_bytes[i]), "v1.k%u.AbC-_d.%u", (unsigned)i,
                     (unsigned)i * 7);
            tickets[i] = ticket_bytes[i];
        }
        const char *host = (flags & 0x20) ? "[fe80:ffff:ffff:ffff:ffff:ffff:ffff:ffff]" : "10.1.2.3";
        int bport = (flags & 0x10) ? -1 : 65535;
        int dp_rank = !(flags & 4) ? -1 : (flags & 0x40) ? INT_MAX : (len > 0 ? body[0] & 7 : 0);
        /* The sglang legs' bodies (rids, tickets or not), and the builder without rids. */
        check_leg(&r, in, dp_rank, (flags & 8) != 0, 1, host, bport, rooms, tickets);
        check_leg(&r, in, -1, 0, 0, host, bport, rooms, tickets);
        check_plain(&r, in, dp_rank);
        check_plain(&r, in, -1);
    }
    check_token_ids(&r, in);
    check_measure(&r);
    json_decref(in);
    pdr_pdreq_clear(&r);
    return 0;
}

#ifndef PDR_LIBFUZZER
#define PDR_REPLAY_MUTATIONS 200
#include "replay_main.h"
#endif
