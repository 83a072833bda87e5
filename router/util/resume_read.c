/*
 * Stream migration's reading side (resume.h): the events relayed to a client read back into what the client
 * has (text, ids, tokens, the first id, its end). Pure; any thread. resume.c builds the body that goes on
 * from it and rewrites the new stream's events.
 */
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "err.h"
#include "jsonscan.h"
#include "resume_read.h"
#include "resume_internal.h"
#include "util.h"

void pdr_resume_init(pdr_resume_t *s, pdr_route_t route, size_t max_text)
{
    memset(s, 0, sizeof(*s));
    s->route = route;
    s->max_text = max_text;
}

void pdr_resume_free(pdr_resume_t *s)
{
    pdr_buf_free(&s->log);
    pdr_buf_free(&s->text);
    free(s->ids);
    s->ids = NULL;
    s->n_ids = s->cap_ids = 0;
}

size_t pdr_resume_events_end(const char *p, size_t n)
{
    for (size_t i = n; i >= 2; i--) {
        if (p[i - 1] != '\n')
            continue;
        if (p[i - 2] == '\n' || (i >= 3 && p[i - 2] == '\r' && p[i - 3] == '\n'))
            return i;
    }
    return 0;
}

size_t pdr_resume_first_event_end(const char *p, size_t n)
{
    size_t i = 1;
    while (i < n) {
        const char *nl = memchr(p + i, '\n', n - i);
        if (nl == NULL)
            return 0;
        i = (size_t)(nl - p);
        if (p[i - 1] == '\n' || (i >= 2 && p[i - 1] == '\r' && p[i - 2] == '\n'))
            return i + 1;
        i++;
    }
    return 0;
}

/* The payload of an event's first "data:" line (without one space after the colon and the line's end), or
 * NULL. */
const char *pdr__resume_event_data(const char *ev, size_t len, size_t *dl)
{
    size_t i = 0;
    while (i < len) {
        const char *nl = memchr(ev + i, '\n', len - i);
        size_t e = nl ? (size_t)(nl - ev) : len;
        if (e - i >= 5 && memcmp(ev + i, "data:", 5) == 0) {
            size_t b = i + 5;
            if (b < e && ev[b] == ' ')
                b++;
            size_t end = e;
            if (end > b && ev[end - 1] == '\r')
                end--;
            *dl = end - b;
            return ev + b;
        }
        i = e + 1;
    }
    return NULL;
}

int pdr__resume_is_done(const char *d, size_t dl)
{
    return dl == 6 && memcmp(d, "[DONE]", 6) == 0;
}

static int push_id(pdr_resume_t *s, int64_t v)
{
    if (s->n_ids == s->cap_ids) {
        size_t nc = s->cap_ids ? s->cap_ids * 2 : 64;
        int64_t *n = realloc(s->ids, nc * sizeof(*n));
        if (n == NULL)
            return -1;
        s->ids = n;
        s->cap_ids = nc;
    }
    s->ids[s->n_ids++] = v;
    return 0;
}

static int set_text(pdr_resume_t *s, const char *p, size_t n)
{
    s->text.len = 0;
    return n == 0 ? 0 : pdr_buf_append(&s->text, p, n, s->max_text);
}

static void keep_id(pdr_resume_t *s, const json_t *id)
{
    if (s->id[0] == '\0' && json_is_string(id) && json_string_length(id) < sizeof(s->id))
        memcpy(s->id, json_string_value(id), json_string_length(id) + 1);
}

/* /generate: each event holds the whole text so far, and the ids so far or the new ones. */
static int note_generate(pdr_resume_t *s, json_t *j)
{
    json_t *meta = json_object_get(j, "meta_info"), *text = json_object_get(j, "text");
    json_t *ids = json_object_get(j, "output_ids"), *ct = json_object_get(meta, "completion_tokens");
    if (!json_is_object(meta) || !json_is_string(text) || !json_is_integer(ct) || json_integer_value(ct) < 0)
        return -1;
    keep_id(s, json_object_get(meta, "id"));
    uint64_t c = (uint64_t)json_integer_value(ct);
    /* The new ones only (incremental streaming): text and ids are added to what the client has. */
    int delta = json_is_array(ids) && json_array_size(ids) != c;
    if (delta && s->decided && s->cumulative)
        return -1; /* the log kept only the last event: the earlier ones are gone */
    s->cumulative = !delta;
    if (c > 1 || delta) /* a first token's event reads the same both ways */
        s->decided = 1;
    if (delta) {
        if (pdr_buf_append(&s->text, json_string_value(text), json_string_length(text), s->max_text) != 0)
            return -1;
    } else if (set_text(s, json_string_value(text), json_string_length(text)) != 0) {
        return -1;
    }
    if (json_is_array(ids)) {
        if (!delta)
            s->n_ids = 0; /* the ids so far */
        else if (!s->have_ids && s->tokens > 0)
            return -1; /* new ids only, but the earlier ones were never seen */
        size_t k;
        json_t *v;
        json_array_foreach(ids, k, v)
        {
            if (!json_is_integer(v) || push_id(s, (int64_t)json_integer_value(v)) != 0)
                return -1;
        }
        s->have_ids = 1;
    } else {
        s->have_ids = 0;
    }
    s->tokens = c;
    json_t *fr = json_object_get(meta, "finish_reason");
    if (fr != NULL && !json_is_null(fr))
        s->finished = 1;
    return 0;
}

/* OpenAI: choice 0's delta (completions: "text"; chat: delta.content). */
static int note_openai(pdr_resume_t *s, json_t *j)
{
    keep_id(s, json_object_get(j, "id"));
    json_t *choices = json_object_get(j, "choices");
    json_t *c0 = json_array_get(choices, 0);
    if (json_array_size(choices) > 1)
        return -1;
    if (json_is_object(c0)) {
        json_t *idx = json_object_get(c0, "index");
        if (idx != NULL && json_integer_value(idx) != 0)
            return -1;
        json_t *t = s->route == PDR_ROUTE_COMPLETIONS
                        ? json_object_get(c0, "text")
                        : json_object_get(json_object_get(c0, "delta"), "content");
        if (json_is_string(t) && json_string_length(t) > 0) {
            if (pdr_buf_append(&s->text, json_string_value(t), json_string_length(t), s->max_text) != 0)
                return -1;
            s->tokens++;
        }
        json_t *fr = json_object_get(c0, "finish_reason");
        if (fr != NULL && !json_is_null(fr))
            s->finished = 1;
    }
    json_t *ct = json_object_get(json_object_get(j, "usage"), "completion_tokens");
    if (json_is_integer(ct) && json_integer_value(ct) >= 0)
        s->tokens = (uint64_t)json_integer_value(ct); /* the engine's own count (so far) wins */
    return 0;
}

/* Appends the JSON string value raw[0..len) (quotes included), its escapes decoded, to b (at most max). 0 or
 * -1. */
static int append_jstring(pdr_buf_t *b, const char *raw, size_t len, size_t max)
{
    if (len < 2)
        return -1;
    const char *p = raw + 1, *end = raw + len - 1;
    while (p < end) {
        const char *bs = memchr(p, '\\', (size_t)(end - p));
        size_t run = bs ? (size_t)(bs - p) : (size_t)(end - p);
        if (run > 0 && pdr_buf_append(b, p, run, max) != 0)
            return -1;
        if (bs == NULL)
            break;
        p = bs + 1;
        if (p >= end)
            return -1;
        char c = *p++, one = 0;
        switch (c) {
        case '"':
        case '\\':
        case '/':
            one = c;
            break;
        case 'b':
            one = '\b';
            break;
        case 'f':
            one = '\f';
            break;
        case 'n':
            one = '\n';
            break;
        case 'r':
            one = '\r';
            break;
        case 't':
            one = '\t';
            break;
        case 'u': {
            uint32_t cp = 0;
            for (int k = 0; k < 4; k++) {
                int h = p < end ? pdr_hex_digit(*p++) : -1;
                if (h < 0)
                    return -1;
                cp = cp << 4 | (uint32_t)h;
            }
            if (cp >= 0xD800 && cp <= 0xDBFF) { /* a surrogate pair (the scan validated it) */
                uint32_t lo = 0;
                if (end - p < 6 || p[0] != '\\' || p[1] != 'u')
                    return -1;
                p += 2;
                for (int k = 0; k < 4; k++) {
                    int h = pdr_hex_digit(*p++);
                    if (h < 0)
                        return -1;
                    lo = lo << 4 | (uint32_t)h;
                }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            char u[4];
            size_t n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
            if (n == 1) {
                u[0] = (char)cp;
            } else if (n == 2) {
                u[0] = (char)(0xC0 | cp >> 6);
                u[1] = (char)(0x80 | (cp & 0x3F));
            } else if (n == 3) {
                u[0] = (char)(0xE0 | cp >> 12);
                u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
                u[2] = (char)(0x80 | (cp & 0x3F));
            } else {
                u[0] = (char)(0xF0 | cp >> 18);
                u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
                u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
                u[3] = (char)(0x80 | (cp & 0x3F));
            }
            if (pdr_buf_append(b, u, n, max) != 0)
                return -1;
            continue;
        }
        default:
            return -1;
        }
        if (pdr_buf_append(b, &one, 1, max) != 0)
            return -1;
    }
    return 0;
}

/* An OpenAI event read without building a tree (no allocation: a long stream's events are read back in
 * bulk): choice 0's text, its finish reason, usage.completion_tokens. 0, -1 (not readable), or 1: read it
 * with jansson instead (the first event, whose id is kept; an error event). */
static int note_openai_scan(pdr_resume_t *s, const char *d, size_t dl)
{
    if (s->id[0] == '\0')
        return 1;
    pdr_jmember_t m[16];
    size_t n;
    char err[8];
    if (pdr_json_scan_object(d, dl, m, 16, &n, err, sizeof(err)) != 0)
        return -1;
    if (pdr_jfind(m, n, "error") != NULL)
        return 1;
    const pdr_jmember_t *ch = pdr_jfind(m, n, "choices"), *us = pdr_jfind(m, n, "usage");
    if (ch != NULL && ch->v.type == PDR_JT_ARRAY) {
        if (ch->v.count > 1)
            return -1;
        size_t pos = 0;
        pdr_jval_t c0;
        if (pdr_jarray_next(&ch->v, &pos, &c0) && c0.type == PDR_JT_OBJECT) {
            pdr_jmember_t e;
            const pdr_jval_t *text = NULL;
            pdr_jmember_t de;
            size_t p2 = 0;
            while (pdr_jobject_next(&c0, &p2, &e)) {
                if (pdr_jmember_key_is(&e, "index")) {
                    int64_t idx;
                    if (pdr_jval_int(&e.v, &idx) != 0 || idx != 0)
                        return -1;
                } else if (s->route == PDR_ROUTE_COMPLETIONS && pdr_jmember_key_is(&e, "text")) {
                    de = e;
                    text = &de.v;
                } else if (s->route == PDR_ROUTE_CHAT && pdr_jmember_key_is(&e, "delta") &&
                           e.v.type == PDR_JT_OBJECT) {
                    pdr_jmember_t f;
                    size_t p3 = 0;
                    while (pdr_jobject_next(&e.v, &p3, &f))
                        if (pdr_jmember_key_is(&f, "content")) {
                            de = f;
                            text = &de.v;
                        }
                } else if (pdr_jmember_key_is(&e, "finish_reason") && e.v.type != PDR_JT_NULL) {
                    s->finished = 1;
                }
            }
            if (text != NULL && text->type == PDR_JT_STRING && text->len > 2) {
                if (append_jstring(&s->text, text->p, text->len, s->max_text) != 0)
                    return -1;
                s->tokens++;
            }
        }
    }
    if (us != NULL && us->v.type == PDR_JT_OBJECT) {
        pdr_jmember_t e;
        size_t pos = 0;
        int64_t ct;
        while (pdr_jobject_next(&us->v, &pos, &e))
            if (pdr_jmember_key_is(&e, "completion_tokens") && pdr_jval_int(&e.v, &ct) == 0 && ct >= 0)
                s->tokens = (uint64_t)ct; /* the engine's own count (so far) wins */
    }
    return 0;
}

static int note_event(pdr_resume_t *s, const char *ev, size_t len)
{
    size_t dl;
    const char *d = pdr__resume_event_data(ev, len, &dl);
    if (d == NULL)
        return 0; /* a comment or a keep-alive */
    if (pdr__resume_is_done(d, dl)) {
        s->done = 1;
        return 0;
    }
    if (s->route != PDR_ROUTE_GENERATE) {
        int fast = note_openai_scan(s, d, dl);
        if (fast <= 0)
            return fast;
    }
    json_t *j = json_loadb(d, dl, 0, NULL);
    if (!json_is_object(j)) {
        json_decref(j);
        return -1;
    }
    int rc = 0;
    if (json_object_get(j, "error") == NULL)
        rc = s->route == PDR_ROUTE_GENERATE ? note_generate(s, j) : note_openai(s, j);
    json_decref(j);
    return rc;
}

int pdr_resume_fold(pdr_resume_t *s)
{
    size_t off = 0;
    while (!s->bad && off < s->log.len) {
        size_t e = pdr_resume_first_event_end(s->log.p + off, s->log.len - off);
        if (e == 0)
            break; /* only whole events are noted: not reached */
        if (note_event(s, s->log.p + off, e) != 0)
            s->bad = 1;
        off += e;
    }
    s->log.len = 0;
    return s->bad ? -1 : 0;
}

/* A cumulative /generate stream: each data event holds everything so far, so the log keeps the last one of
 * what went (an end the client had is noted at once). */
static void note_last(pdr_resume_t *s, const char *p, size_t n)
{
    const char *last = NULL;
    size_t last_len = 0, off = 0;
    while (off < n) {
        size_t e = pdr_resume_first_event_end(p + off, n - off), dl;
        if (e == 0)
            e = n - off;
        const char *d = pdr__resume_event_data(p + off, e, &dl);
        if (d != NULL && pdr__resume_is_done(d, dl))
            s->done = 1;
        else if (d != NULL && dl > 0 && d[0] == '{') {
            last = p + off;
            last_len = e;
        }
        off += e;
    }
    if (last == NULL)
        return;
    s->log.len = 0;
    if (pdr_buf_append(&s->log, last, last_len, last_len) != 0)
        s->bad = 1;
}

void pdr_resume_note(pdr_resume_t *s, const char *p, size_t n)
{
    if (s->bad || n == 0)
        return;
    if (s->route == PDR_ROUTE_GENERATE && s->decided && s->cumulative) {
        note_last(s, p, n);
        return;
    }
    if (s->route == PDR_ROUTE_GENERATE && !s->decided) {
        /* The first events say how the stream goes: read one by one until they do (two tokens), then the rest
         * as the stream goes. */
        size_t off = 0;
        while (!s->decided && !s->bad && off < n) {
            size_t e = pdr_resume_first_event_end(p + off, n - off);
            if (e == 0)
                e = n - off;
            if (note_event(s, p + off, e) != 0)
                s->bad = 1;
            off += e;
        }
        if (off < n)
            pdr_resume_note(s, p + off, n - off);
        return;
    }
    if (pdr_buf_append(&s->log, p, n, PDR_RESUME_LOG_FOLD + n) != 0) {
        s->bad = 1;
        return;
    }
    if (s->log.len >= PDR_RESUME_LOG_FOLD)
        pdr_resume_fold(s);
}
