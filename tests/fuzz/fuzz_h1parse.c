/*
 * Fuzz target for the incremental HTTP/1.1 response parser (router/upstream/h1parse.c). Each input is parsed
 * as the bytes of one connection three ways: whole, cut in two at a point derived from the data, and (for
 * inputs up to 512 bytes) one byte at a time. Every call gets an exact-size heap copy of the bytes it is
 * given, so ASan sees any read past n. Invariants: used <= n, NEED_MORE consumes everything, BODY spans
 * are non-empty and lie inside the consumed bytes, the body never exceeds the input, DONE and ERROR are
 * stable, ERROR names its cause, and all the ways of feeding agree on the headers, the body bytes, the
 * final event, where it happened, its error and what pdr_h1_eof then says.
 * Built with libFuzzer when PDR_LIBFUZZER is defined; otherwise a main() replays the files named on the
 * command line with deterministic mutations (ctest's h1parse_fuzz_corpus). tests/unit/test_h1parse.c
 * includes this file with PDR_H1PARSE_NO_MAIN defined to reuse h1_feed() and h1_same().
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h1parse.h"

/* What one way of feeding an input produced. */
typedef struct {
    int final_ev;       /* DONE, ERROR, or NEED_MORE when the input ran out first */
    size_t final_off;   /* bytes consumed in all when final_ev came */
    const char *error;  /* r.error at the end (NULL unless final_ev or eof_ev is ERROR) */
    int eof_ev;         /* pdr_h1_eof() after final_ev */
    int headers;        /* HEADERS events (0 or 1) */
    size_t headers_off; /* bytes consumed in all when HEADERS came */
    int status, chunked, keep_alive;
    int64_t content_length;
    char content_type[96];
    unsigned char *body; /* de-chunked body bytes, body_cap == the input's length */
    size_t body_len, body_cap;
    size_t body_events;
    char why[256]; /* the first contract violation, "" if none */
} h1_run_t;

static void h1_violation(h1_run_t *o, const char *why, size_t off)
{
    if (o->why[0] == '\0')
        snprintf(o->why, sizeof(o->why), "%s (at byte %zu)", why, off);
}

/*
 * Feeds data[0..len) to a fresh parser as a peer's bytes would arrive: the first `first` bytes, then
 * `step` more each time the parser says NEED_MORE. Bytes the parser leaves unconsumed are offered again
 * with the new ones, as a caller's buffer would. o->body must have room for len bytes.
 */
static void h1_feed(const unsigned char *data, size_t len, int head_request, size_t first, size_t step,
                    h1_run_t *o)
{
    pdr_h1resp_t r;
    size_t off = 0, avail = first < len ? first : len, calls = 0;
    unsigned char *body = o->body;
    size_t cap = o->body_cap;
    memset(o, 0, sizeof(*o));
    o->body = body;
    o->body_cap = cap;
    o->content_length = -2;
    pdr_h1_init(&r);
    r.head_request = head_request;
    for (;;) {
        size_t n = avail - off, used = 12345, blen = 999;
        const char *b = "x";
        char *copy = malloc(n ? n : 1);
        if (copy == NULL)
            abort();
        memcpy(copy, data + off, n);
        int ev = pdr_h1_next(&r, copy, n, &used, &b, &blen);
        if (++calls > 4 * len + 16)
            h1_violation(o, "no progress", off);
        if (ev < PDR_H1_NEED_MORE || ev > PDR_H1_ERROR)
            h1_violation(o, "unknown event", off);
        if (used > n)
            h1_violation(o, "used > n", off);
        if (ev == PDR_H1_NEED_MORE && used != n)
            h1_violation(o, "NEED_MORE without consuming everything", off);
        if (ev == PDR_H1_BODY) {
            if (blen == 0 || b < copy || used > n || blen > used || b + blen > copy + used)
                h1_violation(o, "BODY span outside the consumed bytes", off);
            else if (o->body_len + blen > o->body_cap)
                h1_violation(o, "more body than input", off);
            else
                memcpy(o->body + o->body_len, b, blen);
            o->body_len += blen;
            o->body_events++;
        } else if (blen != 0 || b != NULL) {
            h1_violation(o, "body set on an event other than BODY", off);
        }
        free(copy);
        if (o->why[0] != '\0') {
            o->final_ev = PDR_H1_ERROR;
            return;
        }
        off += used;
        if (ev == PDR_H1_HEADERS) {
            if (o->headers++ != 0)
                h1_violation(o, "HEADERS twice", off);
            if (r.status < 200 || r.status > 999)
                h1_violation(o, "HEADERS with a status outside 200..999", off);
            o->headers_off = off;
            o->status = r.status;
            o->chunked = r.chunked;
            o->keep_alive = r.keep_alive;
            o->content_length = r.content_length;
            if (memchr(r.content_type, '\0', sizeof(r.content_type)) == NULL)
                h1_violation(o, "content_type not terminated", off);
            memcpy(o->content_type, r.content_type, sizeof(o->content_type));
        } else if (ev == PDR_H1_DONE || ev == PDR_H1_ERROR) {
            if (ev == PDR_H1_ERROR && (r.error == NULL || r.error[0] == '\0'))
                h1_violation(o, "ERROR without r.error", off);
            if (ev == PDR_H1_DONE && o->headers == 0)
                h1_violation(o, "DONE before HEADERS", off);
            /* Terminal: the same event again, nothing consumed, whatever follows. */
            const char *again = len > off ? (const char *)data + off : "";
            int ev2 = pdr_h1_next(&r, again, len - off, &used, &b, &blen);
            if (ev2 != ev || used != 0 || blen != 0)
                h1_violation(o, "DONE/ERROR not stable", off);
            o->final_ev = ev;
            break;
        } else if (ev == PDR_H1_NEED_MORE) {
            if (avail == len) {
                o->final_ev = ev;
                break;
            }
            avail = len - avail > step ? avail + step : len;
        }
    }
    o->final_off = off;
    o->eof_ev = pdr_h1_eof(&r);
    if ((o->final_ev == PDR_H1_DONE && o->eof_ev != PDR_H1_DONE) ||
        (o->final_ev == PDR_H1_ERROR && o->eof_ev != PDR_H1_ERROR))
        h1_violation(o, "pdr_h1_eof changed a terminal event", off);
    if (o->eof_ev == PDR_H1_ERROR && (r.error == NULL || r.error[0] == '\0'))
        h1_violation(o, "pdr_h1_eof ERROR without r.error", off);
    if (pdr_h1_eof(&r) != o->eof_ev)
        h1_violation(o, "pdr_h1_eof not stable", off);
    o->error = o->eof_ev == PDR_H1_ERROR ? r.error : NULL;
}

/* Whether two ways of feeding agree; if not, says how in why. */
static int h1_same(const h1_run_t *a, const h1_run_t *b, char *why, size_t whylen)
{
    const char *d = NULL;
    if (a->why[0] != '\0' || b->why[0] != '\0')
        d = a->why[0] != '\0' ? a->why : b->why;
    else if (a->final_ev != b->final_ev || a->final_off != b->final_off)
        d = "final event or its offset";
    else if (a->eof_ev != b->eof_ev)
        d = "pdr_h1_eof";
    else if ((a->error == NULL) != (b->error == NULL) || (a->error && strcmp(a->error, b->error) != 0))
        d = "error text";
    else if (a->headers != b->headers || a->headers_off != b->headers_off)
        d = "HEADERS event or its offset";
    else if (a->headers &&
             (a->status != b->status || a->chunked != b->chunked || a->keep_alive != b->keep_alive ||
              a->content_length != b->content_length || strcmp(a->content_type, b->content_type) != 0))
        d = "header results";
    else if (a->body_len != b->body_len || memcmp(a->body, b->body, a->body_len) != 0)
        d = "body bytes";
    if (d != NULL)
        snprintf(why, whylen, "%s", d);
    return d == NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static h1_run_t whole, split, bytes;
    char why[300];
    unsigned char *bufs = malloc(3 * (size ? size : 1));
    if (bufs == NULL)
        abort();
    whole.body = bufs;
    split.body = bufs + size;
    bytes.body = bufs + 2 * size;
    whole.body_cap = split.body_cap = bytes.body_cap = size;
    /* The split point and HEAD-ness come from the data, so a mutation moves them. */
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < size; i++)
        h = (h ^ data[i]) * 16777619u;
    size_t cut = size ? h % (size + 1) : 0;
    int head = (h >> 24) % 16 == 0;
    h1_feed(data, size, head, size, size, &whole);
    h1_feed(data, size, head, cut, size, &split);
    int ok = h1_same(&whole, &split, why, sizeof(why));
    if (ok && size <= 512) {
        h1_feed(data, size, head, 0, 1, &bytes);
        ok = h1_same(&whole, &bytes, why, sizeof(why));
    }
    if (!ok) {
        fprintf(stderr, "h1parse: %s (size %zu, cut %zu, head %d)\n", why, size, cut, head);
        abort();
    }
    free(bufs);
    return 0;
}

#if !defined(PDR_LIBFUZZER) && !defined(PDR_H1PARSE_NO_MAIN)
#define PDR_REPLAY_MUTATIONS 200
#include "replay_main.h"
#endif
