/*
 * Request-head checks h2o 2.2.5 does not make (pure: no I/O, no allocation). h2o accepts, and then frames
 * by its own rule, request heads that front-door proxies must refuse because a server behind them, or
 * the next request on the connection, may read them differently (request smuggling, RFC 9112 sections
 * 6.1 and 6.3):
 *
 *   - Content-Length together with Transfer-Encoding (h2o uses the chunked body and keeps the
 *     connection, so bytes after it are read as the next request);
 *   - more than one Content-Length (h2o uses the first), or more than one Transfer-Encoding;
 *   - Transfer-Encoding in an HTTP/1.0 request;
 *   - obs-fold (a header line that begins with whitespace), whitespace between a field name and its
 *     colon, a bare LF as a line end;
 *   - an HTTP/1.1 request without Host, or with more than one.
 *
 * The router calls it on every HTTP/1 request with the raw head, which h2o keeps at the start of the
 * connection's input buffer until the response is over; a refused request gets 400 and the connection
 * is closed. nginx and HAProxy refuse the same heads.
 */
#ifndef PDR_REQGUARD_H
#define PDR_REQGUARD_H

#include <stddef.h>
#include <stdint.h>

/* Checks the request head at the start of p (leading empty lines are skipped, as parsers do). Returns 0
 * when it is acceptable, or -1 with *why set to a static description of the problem. A head that does not
 * end within n bytes is refused too ("incomplete request head"). */
int pdr_reqguard_check_head(const char *p, size_t n, const char **why);

/* The length of the complete request head at the start of p (through its empty line, leading empty lines
 * included), or 0 when p holds no complete head yet; *chunked says whether it declares
 * Transfer-Encoding: chunked. */
size_t pdr_reqguard_head_len(const char *p, size_t n, int *chunked);

/* Checks the size of the request head at the start of p as far as it has arrived (complete or not), so
 * that a head past the router's limits is answered before h2o parses it (h2o 2.2.5 answers a plain 400
 * to more than 100 fields and closes the connection without an answer past ~408 KiB). Returns 0 while
 * within the limits, 414 when the request line is longer than max_bytes, 431 when there are more than
 * max_fields header lines or they take more than max_bytes (each line counted with its CRLF: a field
 * "name: value" is name + value + 4 bytes, the count the router applies to HTTP/2 fields too). */
int pdr_reqguard_head_limits(const char *p, size_t n, size_t max_fields, size_t max_bytes);

/* Follows the framing of a chunked request body as its raw bytes arrive, to refuse at once a chunk whose
 * declared size cannot fit the body limit (h2o 2.2.5 would wait for those bytes until its request
 * timeout). The caller feeds every raw body byte once, in order. */
typedef struct pdr_chunkguard {
    int state;
    int digits;
    uint64_t size;  /* the chunk size being read */
    uint64_t left;  /* data bytes left in the current chunk */
    uint64_t data;  /* data bytes so far (what h2o has de-chunked once it has read the same bytes) */
    uint64_t limit; /* the body limit */
} pdr_chunkguard_t;

enum { PDR_CHUNK_MORE = 0, PDR_CHUNK_DONE, PDR_CHUNK_TOO_BIG, PDR_CHUNK_LOST };

void pdr_chunkguard_init(pdr_chunkguard_t *g, uint64_t limit);
/* MORE: everything fed is consistent, more to come; DONE: the last chunk's size line is complete (the
 * trailers are h2o's); TOO_BIG: a chunk declares more than the limit leaves; LOST: bytes that are not
 * chunked framing (h2o answers those itself). */
int pdr_chunkguard_feed(pdr_chunkguard_t *g, const char *p, size_t n);

#endif
