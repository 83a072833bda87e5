/*
 * A request's prompt as token ids, for precise_prefix (the KV event index matches token ids, not text).
 * Any loop thread; no shared state. Member names are compared after decoding escapes, as the request's
 * validation (rewrite.c) and the worker read them: "input\u005fids" is input_ids.
 *
 * The ids come from the body's input_ids (generate route) when it has them: a flat JSON array of
 * integers in 0..2^32-1, validated by the request scanner already. Otherwise, with the router's
 * tokenizer (config key tokenizer), a string prompt (generate's text, completions' prompt) is decoded
 * from JSON and encoded as the engine's tokenizer would. Chat messages go through the model's chat template
 * when the tokenizer carries one (chat_template.h), as the engines render them; without one they get no ids
 * (the tree routes them). The tokenizer is the one of the request's pool, else the top-level one (the
 * caller's); a text or chat prompt with neither is the unknown_model fall-back.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "chat_template.h"
#include "fallback.h"
#include "jsonscan.h"
#include "token_ids.h"

/* Parses the raw bytes of a JSON array of non-negative integers, at most PDR_ROUTING_MAX_TOKENS of them
 * (the head of a longer prompt: a prefix match never looks further). PDR_EINVAL on anything else. */
static int parse_ids(const char *p, size_t len, uint32_t **ids, size_t *n)
{
    size_t i = 0, k = 0, cap = 0;
    uint32_t *v = NULL;
    while (i < len && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r'))
        i++;
    if (i >= len || p[i] != '[')
        return PDR_EINVAL;
    i++;
    for (;;) {
        while (i < len && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r' || p[i] == ','))
            i++;
        if (i >= len)
            goto bad;
        if (p[i] == ']')
            break;
        if (p[i] < '0' || p[i] > '9')
            goto bad;
        uint64_t x = 0;
        while (i < len && p[i] >= '0' && p[i] <= '9') {
            x = x * 10 + (uint64_t)(p[i] - '0');
            if (x > UINT32_MAX)
                goto bad;
            i++;
        }
        if (i < len && (p[i] == '.' || p[i] == 'e' || p[i] == 'E'))
            goto bad;
        if (k == PDR_ROUTING_MAX_TOKENS)
            break;
        if (k == cap) {
            size_t nc = cap ? 2 * cap : 256;
            uint32_t *nv = realloc(v, nc * sizeof(*nv));
            if (nv == NULL) {
                free(v);
                return PDR_ENOMEM;
            }
            v = nv;
            cap = nc;
        }
        v[k++] = (uint32_t)x;
    }
    *ids = v;
    *n = k;
    return 0;
bad:
    free(v);
    return PDR_EINVAL;
}

/*
 * How much of a prompt's text to encode: all of it up to PDR_TOKENIZE_MAX_BYTES; past that the head, cut
 * just before a whitespace byte that follows a non-whitespace one (where the byte-level pre-tokenizers
 * end a piece, so the head's pieces, hence its ids, are those of the whole text), or at a character
 * boundary when the last 4 KiB of the head has no such place. The encoder's cost grows with the text and
 * with its longest piece (n log n); the cap bounds what one request costs its loop (about 30 ms for 64 KiB
 * of spaces, one piece, on the test machine), and a prefix match needs only the head.
 */
static size_t tokenize_len(const char *s, size_t len)
{
    if (len <= PDR_TOKENIZE_MAX_BYTES)
        return len;
    size_t cut = PDR_TOKENIZE_MAX_BYTES;
    for (size_t i = cut; i > cut - 4096; i--) {
        int sp = s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r';
        int prev_sp = s[i - 1] == ' ' || s[i - 1] == '\n' || s[i - 1] == '\t' || s[i - 1] == '\r';
        if (sp && !prev_sp)
            return i;
    }
    while (cut > 0 && ((unsigned char)s[cut] & 0xC0) == 0x80)
        cut--; /* not inside a UTF-8 sequence */
    return cut;
}

/* A JSON string value (raw bytes, quotes included) decoded and encoded with tk. */
static int encode_string(const pdr_tokenizer_t *tk, const char *raw, size_t len, pdr_prompt_tokens_t *out)
{
    json_error_t jerr;
    /* JSON_ALLOW_NUL: "\u0000" is a character of the prompt like any other (the text's length is used). */
    json_t *v = json_loadb(raw, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    if (!json_is_string(v)) {
        json_decref(v);
        return PDR_EINVAL;
    }
    const char *text = json_string_value(v);
    int rc = pdr_tokenizer_encode(tk, text, tokenize_len(text, json_string_length(v)), &out->ids, &out->n);
    json_decref(v);
    if (rc != 0) {
        free(out->ids);
        out->ids = NULL;
        out->n = 0;
    } else if (out->n > PDR_ROUTING_MAX_TOKENS) {
        out->n = PDR_ROUTING_MAX_TOKENS; /* the head: a prefix match never looks further */
    }
    return rc;
}

int pdr_request_token_ids(const pdr_pdreq_t *pr, const pdr_tokenizer_t *tk, pdr_prompt_tokens_t *out)
{
    out->ids = NULL;
    out->n = 0;
    if (pr->batch > 0)
        return 0; /* a batch has one prompt per item: the router routes it as a whole, by text */
    for (size_t i = 0; i < pr->n; i++) {
        const pdr_jmember_t *m = &pr->m[i];
        if (pdr_jmember_key_is(m, "input_ids") && m->v.type == PDR_JT_ARRAY && m->v.elem == PDR_JT_INT)
            return parse_ids(m->v.p, m->v.len, &out->ids, &out->n);
    }
    if (tk == NULL)
        return 0;
    for (size_t i = 0; i < pr->n; i++) {
        const pdr_jmember_t *m = &pr->m[i];
        int named = pdr_jmember_key_is(m, "text") || pdr_jmember_key_is(m, "prompt");
        if (named && m->v.type == PDR_JT_STRING)
            return encode_string(tk, m->v.p, m->v.len, out);
    }
    const pdr_chat_template_t *ct = pdr_tokenizer_extra(tk);
    for (size_t i = 0; ct != NULL && i < pr->n; i++) {
        if (!pdr_jmember_key_is(&pr->m[i], "messages") || pr->m[i].v.type != PDR_JT_ARRAY)
            continue;
        char err[256];
        int rc = pdr_chat_template_ids(ct, tk, pr->body, pr->len, &out->ids, &out->n, err, sizeof(err));
        if (rc != 0)
            pdr_fallback(PDR_FB_CHAT_TEMPLATE, err);
        if (rc == 0 && out->n > PDR_ROUTING_MAX_TOKENS)
            out->n = PDR_ROUTING_MAX_TOKENS; /* the head: a prefix match never looks further */
        return rc;
    }
    return 0;
}

/* Whether the prompt is text or chat messages, which only a tokenizer makes ids of (not a batch, not a body
 * that carries input_ids): what pdr_request_token_ids reads, in its order. */
static int wants_tokenizer(const pdr_pdreq_t *pr)
{
    if (pr->batch > 0)
        return 0;
    int text = 0;
    for (size_t i = 0; i < pr->n; i++) {
        const pdr_jmember_t *m = &pr->m[i];
        if (pdr_jmember_key_is(m, "input_ids") && m->v.type == PDR_JT_ARRAY && m->v.elem == PDR_JT_INT)
            return 0; /* ids in the body: no tokenizer needed */
        if ((pdr_jmember_key_is(m, "text") || pdr_jmember_key_is(m, "prompt")) && m->v.type == PDR_JT_STRING)
            text = 1;
        if (pdr_jmember_key_is(m, "messages") && m->v.type == PDR_JT_ARRAY)
            text = 1;
    }
    return text;
}

/* unknown_model: a prompt that needs a tokenizer and has none; counted once per request (*counted). */
static void unknown_model(const pdr_pdreq_t *pr, pdr_fallback_t reason, int *counted)
{
    if (counted != NULL && *counted)
        return;
    if (counted != NULL)
        *counted = 1;
    const pdr_jmember_t *m = pdr_jfind(pr->m, pr->n, "model");
    int named = m != NULL && m->v.type == PDR_JT_STRING && m->v.len >= 2;
    int len = named ? (int)(m->v.len - 2 < 128 ? m->v.len - 2 : 128) : 6;
    char why[320];
    snprintf(
        why, sizeof(why),
        "model %s%.*s%s has no tokenizer (its pool has none and there is no top-level tokenizer), and %s "
        "wanted the prompt's token ids",
        named ? "\"" : "", len, named ? m->v.p + 1 : "(none)", named ? "\"" : "", pdr_fallback_names[reason]);
    pdr_fallback(PDR_FB_UNKNOWN_MODEL, why);
}

int pdr_request_token_ids_or(const pdr_pdreq_t *pr, const pdr_tokenizer_t *tk, pdr_prompt_tokens_t *out,
                             pdr_fallback_t reason, int *unknown_counted)
{
    if (tk == NULL && wants_tokenizer(pr)) {
        out->ids = NULL;
        out->n = 0;
        unknown_model(pr, reason, unknown_counted);
        return PDR_FB_UNKNOWN_MODEL;
    }
    int rc = pdr_request_token_ids(pr, tk, out);
    if (rc == 0)
        return -1;
    char why[160];
    snprintf(why, sizeof(why), "the prompt's token ids could not be read (%s: %s)", pdr_errname(rc),
             pdr_strerror(rc));
    pdr_fallback(reason, why);
    return (int)reason;
}
