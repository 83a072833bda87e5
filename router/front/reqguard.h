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
 * connection's input buffer until the response is over; a refused request is answered 400 and the connection
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

/* Everything the guard in front of h2o's HTTP/1 parser needs of the request head at the start of p, from
 * one pass (reqguard_scan.c): what pdr_reqguard_head_limits, pdr_reqguard_head_len and
 * pdr_reqguard_check_head answer, whether h2o's parser refuses the head, and its Content-Length. */
typedef struct pdr_reqhead {
    int limit;       /* pdr_reqguard_head_limits: 0, 414 or 431; when not 0, the fields below say nothing */
    size_t len;      /* pdr_reqguard_head_len: 0 while the head is not complete */
    int chunked;     /* pdr_reqguard_head_len's chunked, when bad is NULL */
    const char *bad; /* a complete head: why it is refused with 400 (pdr_reqguard_check_head's reason, else
                      * "the request line or a header line cannot be parsed" when h2o's parser refuses it),
                      * or NULL */
    int64_t content_length; /* a complete head, not chunked, bad NULL: the value of the first line that
                             * starts with "Content-Length:" (INT64_MAX past 18 digits; -1 when it has no
                             * digits); -1 otherwise */
} pdr_reqhead_t;

void pdr_reqguard_scan(const char *p, size_t n, size_t max_fields, size_t max_bytes, pdr_reqhead_t *h);

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

/* Follows the HTTP/2 frames a client sends (from the connection preface on), to refuse a header block
 * (HEADERS and its CONTINUATION frames) larger than the limit before h2o buffers it: h2o 2.2.5 resets the
 * stream and then closes the connection with a GOAWAY whose debug text ("unexpected stream id in
 * CONTINUATION frame") does not say why. Counts frame payload bytes (padding and priority fields
 * included, so never fewer than the header block fragments h2o counts). Fed every raw byte once, in
 * order; decides as soon as a frame's 9-byte header is in, before its payload arrives. */
/* The guard also follows request bodies against a body limit (pdr_h2guard_set_body_limit): the DATA frame
 * that takes a stream past it has END_STREAM set in place (so h2o, whose own limit is one frame higher,
 * hands the request to the handler, which answers 413), and DATA that follows on that stream is removed
 * from the buffer (its bytes are added to window_debt, for the caller to give back with a
 * WINDOW_UPDATE). Frames of unknown types are removed too (RFC 9113 section 4.1 says to ignore them;
 * h2o 2.2.5 writes a line to stderr for each one it skips); a removed frame's bytes never reach h2o, but
 * one over 16 384 bytes is left for h2o to refuse (FRAME_SIZE_ERROR). For that the bytes fed must stay
 * in one buffer with the frame bytes fed before them that h2o has not consumed yet (h2o consumes whole
 * frames only). And it counts control frames (SETTINGS and PING that are not ACKs, PRIORITY,
 * CONTINUATION, empty DATA without END_STREAM, and frames of unknown types: none of them carries a
 * request) in `control`, for the caller's flood bucket. */
/* The guard also bounds what one connection's request bodies hold (pdr_h2guard_t.budget): the bytes of
 * bodies received on it and not yet released by the caller (`held`: the caller releases a body when the
 * request that took it ends, or the connection closes) may not pass the budget; the DATA frame that would
 * take them past it ends its stream early as above, and the stream is remembered as refused for the
 * budget (pdr_h2guard_over_budget), so that its handler answers 503 instead of using the cut body. A
 * stream reset before its body ended gives its bytes back at once. */
#define PDR_H2G_BODIES 100 /* h2o 2.2.5 keeps at most 100 streams open per connection */
enum { PDR_H2G_OPEN = 0, PDR_H2G_REFUSED_SIZE, PDR_H2G_REFUSED_BUDGET };
typedef struct pdr_h2g_body {
    uint32_t stream;  /* 0: a free slot */
    int refused;      /* PDR_H2G_REFUSED_*: ended early, later DATA is removed */
    uint64_t bytes;   /* DATA bytes so far, padding excluded */
    uint64_t last_ms; /* when its last DATA came (the caller's now_ms) */
} pdr_h2g_body_t;

/* The bodies followed, in storage of the caller's (pdr_h2guard_set_body_limit): only HTTP/2 connections
 * need it. */
typedef struct pdr_h2g_bodies {
    pdr_h2g_body_t body[PDR_H2G_BODIES];
    uint32_t over_budget[PDR_H2G_BODIES]; /* the streams refused for the budget, latest last (a ring) */
} pdr_h2g_bodies_t;

typedef struct pdr_h2guard {
    uint32_t preface_left; /* connection preface bytes not yet seen */
    uint8_t hdr[9];
    uint32_t hdr_have;
    uint32_t payload_left; /* of the current frame */
    int in_block;          /* a HEADERS frame without END_HEADERS was seen */
    uint32_t block_stream; /* its stream */
    uint64_t block;        /* payload bytes of the block so far */
    uint64_t limit;        /* the most a header block may have */
    uint32_t last_stream;  /* the highest stream whose header block was complete */
    /* request bodies (see above) */
    uint64_t body_limit; /* 0: not followed */
    pdr_h2g_bodies_t *bodies;
    pdr_h2g_body_t *pad_wait; /* a PADDED DATA frame of this body waits for its pad length byte */
    uint32_t pad_frame_len;
    uint64_t window_debt; /* bytes of DATA removed, not given back yet */
    uint64_t bodies_refused;
    uint64_t held;   /* body bytes received and not released (pdr_h2guard_release) */
    uint64_t budget; /* the most `held` may reach, when budget_on; set by the caller before each feed */
    int budget_on;
    int budget_closes; /* past the budget the connection is to be closed (PDR_H2G_OVER_BUDGET) instead */
    int budget_hit;
    uint64_t now_ms; /* the caller's clock, set before each feed */
    uint64_t bodies_over_budget;
    uint32_t over_budget_next;
    uint64_t control; /* control frames seen */
    int dropping;     /* the current frame's payload is removed as it comes */
    uint64_t dropped; /* frames removed */
} pdr_h2guard_t;

enum { PDR_H2G_MORE = 0, PDR_H2G_TOO_BIG, PDR_H2G_LOST, PDR_H2G_OVER_BUDGET };

void pdr_h2guard_init(pdr_h2guard_t *g, uint64_t limit);
/* Follows request bodies against this limit from now on (0: not), in `bodies` (zeroed; the caller's, kept
 * as long as the guard). */
void pdr_h2guard_set_body_limit(pdr_h2guard_t *g, uint64_t body_limit, pdr_h2g_bodies_t *bodies);
/* Feeds buf[from, *len): the bytes added since the last feed, buf[0, from) the ones h2o has not consumed
 * yet. Frames the guard removes (see above) leave the buffer: *len becomes its new length (it may end
 * below from when a removed frame's header began in an earlier feed). MORE: fine so far; TOO_BIG: the
 * header block in progress exceeds the limit (g->block_stream is its stream, g->last_stream the stream to
 * name in a GOAWAY); LOST: bytes that are not a client's HTTP/2 framing (h2o answers those itself). */
int pdr_h2guard_feed(pdr_h2guard_t *g, char *buf, size_t from, size_t *len);
/* 1 when stream's body was ended early because the connection's budget was spent. */
int pdr_h2guard_over_budget(const pdr_h2guard_t *g, uint32_t stream);
/* The caller gives back bytes of a body it counted as held (its request ended). */
void pdr_h2guard_release(pdr_h2guard_t *g, uint64_t bytes);
/* The stream whose body has waited longest for DATA since before `before_ms`, still receiving and not
 * refused; 0 when none. Its bytes are given back and it is forgotten (the caller resets it). */
uint32_t pdr_h2guard_take_stalled(pdr_h2guard_t *g, uint64_t before_ms);
/* The stream of the biggest body still receiving (not refused), with its bytes and when its last DATA
 * came: the longest paused of equal ones; 0 when none. */
uint32_t pdr_h2guard_biggest(const pdr_h2guard_t *g, uint64_t *bytes, uint64_t *last_ms);
/* Gives back the bytes of stream's body and forgets it (the caller resets the stream). */
void pdr_h2guard_take(pdr_h2guard_t *g, uint32_t stream);
/* Writes a GOAWAY frame (last stream id, error code, debug text) into out; returns its length, or 0 when
 * it does not fit. */
size_t pdr_h2_goaway_frame(char *out, size_t cap, uint32_t last_stream, uint32_t error_code,
                           const char *debug);

#endif
