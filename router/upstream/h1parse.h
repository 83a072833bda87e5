/*
 * Incremental HTTP/1.1 response parser for the upstream client (pure: no I/O, no allocation).
 *
 * The caller feeds the bytes it has read, in order, as they come (any split, one byte at a time
 * included) and gets back one event per call:
 *
 *   size_t used; const char *body; size_t blen;
 *   int ev = pdr_h1_next(&r, p, n, &used, &body, &blen);
 *
 * `used` bytes of p were consumed (the caller drops them from its buffer and calls again with the
 * rest); for PDR_H1_BODY, [body, body + blen) lies inside those consumed bytes: body bytes of the
 * response, de-chunked, as many as the input holds (one chunk's worth at most). Only NEED_MORE means
 * "wait for input": after HEADERS and BODY call again even with nothing left (n == 0), since DONE may be
 * due without another byte (a 204, Content-Length: 0, the last bytes of a Content-Length body). Events:
 *
 *   PDR_H1_NEED_MORE  everything given was consumed (used == n) and more input is needed
 *   PDR_H1_HEADERS    the status line and headers are complete: r.status, r.content_length,
 *                     r.chunked, r.keep_alive, r.content_type are set (1xx interim responses such as
 *                     100 Continue are skipped silently and never reported)
 *   PDR_H1_BODY       a span of body bytes (blen > 0)
 *   PDR_H1_DONE       the response is complete (used counts up to its last byte; what follows belongs to
 *                     the next response on the connection)
 *   PDR_H1_ERROR      malformed input; r.error names the problem. Terminal.
 *
 * Framing (RFC 9112 section 6): 204 and 304 responses, and any response to HEAD (r.head_request set by the
 * caller before the first call), have no body; otherwise Transfer-Encoding: chunked (the last coding;
 * chunk extensions ignored, trailers read and dropped), else Content-Length, else the body runs until
 * the connection closes: the caller reports the close with pdr_h1_eof(), which turns such a body into
 * DONE and anything else into an error. Both Transfer-Encoding and Content-Length, several different
 * Content-Length values, a non-numeric length, an over-long line or header block, or a status line that
 * is not "HTTP/1.x NNN ..." are errors. keep_alive is 0 for HTTP/1.0 without "Connection: keep-alive",
 * for "Connection: close", and for until-close bodies.
 *
 * Details the RFC leaves to the recipient: bare LF ends a line like CRLF (a CR must be followed by LF),
 * chunk data included; control characters other than HT in the head are errors, and so are obs-fold lines and
 * whitespace before a header's ':'; Content-Length is digits only, at most 2^62; content_length is the length
 * of the body that follows (0 for 204, 304 and HEAD, -1 for chunked and until-close bodies); the last
 * Content-Type wins; a chunk-size line is at most PDR_H1_MAX_CHUNK_LINE bytes and the trailer section
 * at most PDR_H1_MAX_HEAD; the header lines of a 1xx response are checked like a final one's, but
 * the framing rules (TE with CL, unsupported coding) apply to the final response only.
 */
#ifndef PDR_H1PARSE_H
#define PDR_H1PARSE_H

#include <stddef.h>
#include <stdint.h>

#define PDR_H1_MAX_HEAD 16384      /* status line + headers, bytes (and the trailer section) */
#define PDR_H1_MAX_CHUNK_LINE 4096 /* chunk size + extensions + line end, bytes */

enum { PDR_H1_NEED_MORE = 0, PDR_H1_HEADERS, PDR_H1_BODY, PDR_H1_DONE, PDR_H1_ERROR };

typedef struct pdr_h1resp {
    /* results */
    int status;             /* 100..999 once HEADERS was reported */
    int64_t content_length; /* -1 when absent (chunked or until close) */
    int chunked;
    int keep_alive;
    int head_request;  /* set by the caller: a response to HEAD has no body */
    const char *error; /* static text once ERROR was reported */
    /* internal */
    int state;
    size_t head_len;    /* bytes of the header block (or trailer section) seen so far */
    size_t line_len;    /* bytes of the current line, terminator excluded */
    uint64_t remaining; /* body bytes left (length mode) or in the current chunk */
    int line_cr;        /* the previous byte was CR */
    int saw_te, saw_cl, http10, conn_close, conn_keep;
    int te_last_chunked; /* the last transfer coding seen so far is chunked */
    int te_chunked_seen; /* how many times chunked was listed */
    int chunk_phase;     /* where the chunk-size line is: digits, whitespace after them, extensions */
    /* The arrays come last: a new response clears only the fields above and the first byte of
     * content_type. */
    char content_type[96]; /* a result: NUL-terminated, "" when the response had none */
    char line[256 + 1];    /* a head line split across inputs (longer lines are checked by line_len only),
                            * and a byte after its end that stops the scan of a header name */
} pdr_h1resp_t;

/* Prepares r for a new response (head_request cleared). */
void pdr_h1_init(pdr_h1resp_t *r);
int pdr_h1_next(pdr_h1resp_t *r, const char *p, size_t n, size_t *used, const char **body, size_t *blen);
/* The connection closed after everything was fed: PDR_H1_DONE for an until-close body that has begun
 * (headers seen) or a response already complete (DONE reported or due), else PDR_H1_ERROR (r.error says
 * "connection closed before the response ended", or keeps the earlier error). Terminal like DONE/ERROR. */
int pdr_h1_eof(pdr_h1resp_t *r);

#endif
