/*
 * Unit tests of router/upstream/h1parse.c, the incremental HTTP/1.1 response parser. Every response of the
 * table (good and bad) is fed whole, cut in two at every point, one byte at a time and in steps of 2, 3 and 7
 * bytes; all must agree with the whole parse (headers, de-chunked body, final event and offset, error,
 * pdr_h1_eof), and the whole parse must match the expectation. The feeder and the contract checks (used
 * <= n, BODY spans inside the consumed bytes, DONE/ERROR stable) come from tests/fuzz/fuzz_h1parse.c,
 * included below. Further tests cover event sequences, maximal BODY spans, pipelining, until-close
 * bodies with pdr_h1_eof and the size limits. Exit 0 when everything passed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "runner.h"
#include "h1parse.h"

#define PDR_H1PARSE_NO_MAIN
#include "../fuzz/fuzz_h1parse.c"

enum { NOEOF = -1 };

typedef struct {
    const char *name;
    const char *in;
    size_t len;
    int head;       /* r.head_request */
    int ev;         /* the final event of the whole input */
    int eof;        /* pdr_h1_eof() afterwards */
    size_t off;     /* bytes consumed at the final event; 0 stands for len */
    int status;     /* 0: no HEADERS expected */
    int64_t cl;     /* r.content_length */
    int chunked;    /* r.chunked */
    int keep_alive; /* r.keep_alive */
    const char *ctype;
    const char *body;
    size_t body_len;
    const char *err; /* a substring of r.error (ERROR cases) */
} tcase_t;

#define IN(lit) lit, sizeof(lit) - 1
/* A complete response: DONE at its last byte. */
#define OK(nm, lit, st, cl_, ch, ka, ct, bd)                                                                 \
    {                                                                                                        \
        .name = nm, .in = lit, .len = sizeof(lit) - 1, .ev = PDR_H1_DONE, .eof = PDR_H1_DONE, .status = st,  \
        .cl = cl_, .chunked = ch, .keep_alive = ka, .ctype = ct, .body = bd, .body_len = sizeof(bd) - 1      \
    }
/* A response to HEAD. */
#define HEAD_OK(nm, lit, st)                                                                                 \
    {                                                                                                        \
        .name = nm, .in = lit, .len = sizeof(lit) - 1, .head = 1, .ev = PDR_H1_DONE, .eof = PDR_H1_DONE,     \
        .status = st, .cl = 0, .keep_alive = 1, .ctype = "", .body = ""                                      \
    }
/* Input that runs out before the response ends: NEED_MORE, then pdr_h1_eof gives eof_. */
#define OPEN(nm, lit, eof_, st, cl_, ch, ka, bd)                                                             \
    {                                                                                                        \
        .name = nm, .in = lit, .len = sizeof(lit) - 1, .ev = PDR_H1_NEED_MORE, .eof = eof_, .status = st,    \
        .cl = cl_, .chunked = ch, .keep_alive = ka, .ctype = "", .body = bd, .body_len = sizeof(bd) - 1,     \
        .err = (eof_) == PDR_H1_ERROR ? "connection closed before the response ended" : NULL                 \
    }
/* A complete response followed by other bytes: DONE after off bytes. */
#define PIPE(nm, lit, off_, st, cl_, ch, bd)                                                                 \
    {                                                                                                        \
        .name = nm, .in = lit, .len = sizeof(lit) - 1, .ev = PDR_H1_DONE, .eof = PDR_H1_DONE, .off = off_,   \
        .status = st, .cl = cl_, .chunked = ch, .keep_alive = 1, .ctype = "", .body = bd,                    \
        .body_len = sizeof(bd) - 1                                                                           \
    }
/* Malformed input: ERROR whose r.error contains msg. */
#define BAD(nm, lit, msg)                                                                                    \
    {                                                                                                        \
        .name = nm, .in = lit, .len = sizeof(lit) - 1, .ev = PDR_H1_ERROR, .eof = PDR_H1_ERROR, .err = msg   \
    }
#define BAD_HEAD(nm, lit, msg)                                                                               \
    {                                                                                                        \
        .name = nm, .in = lit, .len = sizeof(lit) - 1, .head = 1, .ev = PDR_H1_ERROR, .eof = PDR_H1_ERROR,   \
        .err = msg                                                                                           \
    }

#define R200 "HTTP/1.1 200 OK\r\n"
#define CHUNKED R200 "Transfer-Encoding: chunked\r\n\r\n"
#define STATUS_ERR "malformed status line"

static const tcase_t cases[] = {
    /* Status line and headers. */
    OK("content-length", R200 "Content-Type: application/json\r\nContent-Length: 5\r\n\r\nhello", 200, 5, 0,
       1, "application/json", "hello"),
    OK("no reason phrase", "HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nhi", 200, 2, 0, 1, "", "hi"),
    OK("empty reason phrase", "HTTP/1.1 200 \r\nContent-Length: 2\r\n\r\nhi", 200, 2, 0, 1, "", "hi"),
    OK("reason with HT and obs-text",
       "HTTP/1.1 503 Service \xc3\xa9\tUnavailable\r\nContent-Length: 1\r\n\r\nx", 503, 1, 0, 1, "", "x"),
    OK("bare LF line endings", "HTTP/1.1 200 OK\nContent-Length: 2\n\nhi", 200, 2, 0, 1, "", "hi"),
    OK("mixed line endings", "HTTP/1.1 200 OK\r\nContent-Length: 2\n\r\nhi", 200, 2, 0, 1, "", "hi"),
    OK("names case-insensitive, OWS trimmed",
       "HTTP/1.1 201 Created\r\ncOnTeNt-LeNgTh:\t 3 \t\r\nCONTENT-TYPE:   text/plain; charset=utf-8  \r\n"
       "X-Empty:\r\nX-Spaces:   \r\n\r\nabc",
       201, 3, 0, 1, "text/plain; charset=utf-8", "abc"),
    OK("last Content-Type wins", R200 "Content-Type: a/b\r\nContent-Type: c/d\r\nContent-Length: 0\r\n\r\n",
       200, 0, 0, 1, "c/d", ""),
    OK("duplicate equal Content-Length", R200 "Content-Length: 3\r\nContent-Length: 3\r\n\r\nabc", 200, 3, 0,
       1, "", "abc"),
    OK("Content-Length leading zeros", R200 "Content-Length: 0003\r\n\r\nabc", 200, 3, 0, 1, "", "abc"),
    OK("Content-Length 0", R200 "Content-Length: 0\r\n\r\n", 200, 0, 0, 1, "", ""),
    OK("HTTP/1.9 read as 1.1", "HTTP/1.9 200 OK\r\nContent-Length: 1\r\n\r\nx", 200, 1, 0, 1, "", "x"),
    OK("status 999", "HTTP/1.1 999 Odd\r\nContent-Length: 1\r\n\r\nx", 999, 1, 0, 1, "", "x"),
    OK("HT and obs-text around every word boundary",
       R200 "X-Long-Value:\ta\tb\xff\x80"
            "cdefgh\tijklmnop\t\tq\xc3\xa9rstuvwxyz\t\r\nContent-Length: 1\r\n\r\nx",
       200, 1, 0, 1, "", "x"),
    OK("names that only look like framing names",
       R200 "Content_Length: 5\r\nContent-Lengtx: 5\r\nTransfer-Encodinh: chunked\r\nConnectioN: close\r\n"
            "Content-Length: 2\r\n\r\nhi",
       200, 2, 0, 0, "", "hi"),
    OK("body holds CR LF and NUL", R200 "Content-Length: 5\r\n\r\n\r\n\0\rz", 200, 5, 0, 1, "", "\r\n\0\rz"),
    /* Responses without a body. */
    OK("204", "HTTP/1.1 204 No Content\r\n\r\n", 204, 0, 0, 1, "", ""),
    OK("204 with Content-Length", "HTTP/1.1 204 No Content\r\nContent-Length: 10\r\n\r\n", 204, 0, 0, 1, "",
       ""),
    OK("304 with Content-Length", "HTTP/1.1 304 Not Modified\r\nContent-Length: 100\r\n\r\n", 304, 0, 0, 1,
       "", ""),
    OK("304 chunked", "HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n", 304, 0, 0, 1, "",
       ""),
    HEAD_OK("HEAD with Content-Length", R200 "Content-Length: 100\r\n\r\n", 200),
    HEAD_OK("HEAD chunked", R200 "Transfer-Encoding: chunked\r\n\r\n", 200),
    HEAD_OK("HEAD until close", R200 "Server: x\r\n\r\n", 200),
    /* Interim responses. */
    OK("100 then 200", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 200, 2,
       0, 1, "", "ok"),
    OK("103 with headers, 100, then chunked 200",
       "HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\nContent-Type: x/y\r\nConnection: close\r\n\r\n"
       "HTTP/1.1 100 Continue\r\n\r\n" CHUNKED "2\r\nok\r\n0\r\n\r\n",
       200, -1, 1, 1, "", "ok"),
    OK("101 skipped too",
       "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n" R200
       "Content-Length: 1\r\n\r\nx",
       200, 1, 0, 1, "", "x"),
    OK("1xx bare LF", "HTTP/1.1 100 Continue\n\nHTTP/1.1 200 OK\nContent-Length: 1\n\nx", 200, 1, 0, 1, "",
       "x"),
    OPEN("only a 100 Continue", "HTTP/1.1 100 Continue\r\n\r\n", PDR_H1_ERROR, 0, 0, 0, 0, ""),
    /* Chunked framing. */
    OK("chunked", CHUNKED "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", 200, -1, 1, 1, "", "hello world"),
    OK("chunked with extensions and trailers",
       CHUNKED "A;name=value;x\r\n0123456789\r\n1 ; ext=\"q;\\\"\"\r\n!\r\n0;last\r\nX-Trailer: 1\r\n"
               "Server-Timing: a;dur=1\r\n\r\n",
       200, -1, 1, 1, "", "0123456789!"),
    OK("chunked hex case and leading zeros",
       CHUNKED "0000b\r\nhello world\r\n00a\r\n0123456789\r\n000\r\n\r\n", 200, -1, 1, 1, "",
       "hello world0123456789"),
    OK("chunked bare LF", "HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n5\nhello\n0\n\n", 200, -1, 1, 1, "",
       "hello"),
    OK("chunked size with trailing whitespace", CHUNKED "5 \t\r\nhello\r\n0 \r\n\r\n", 200, -1, 1, 1, "",
       "hello"),
    OK("chunked data holds CRLF", CHUNKED "4\r\n\r\n\r\n\r\n0\r\n\r\n", 200, -1, 1, 1, "", "\r\n\r\n"),
    OK("gzip, chunked", R200 "Transfer-Encoding: gzip, chunked\r\n\r\n3\r\n\x1f\x8b\x08\r\n0\r\n\r\n", 200,
       -1, 1, 1, "", "\x1f\x8b\x08"),
    OK("TE over two headers, case-insensitive",
       R200 "Transfer-Encoding: gzip\r\nTransfer-Encoding:  , Chunked ,\r\n\r\n1\r\nz\r\n0\r\n\r\n", 200, -1,
       1, 1, "", "z"),
    OK("chunked 1.0", "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nz\r\n0\r\n\r\n", 200, -1, 1,
       0, "", "z"),
    /* keep_alive. */
    OK("Connection: close", R200 "Connection: close\r\nContent-Length: 1\r\n\r\nx", 200, 1, 0, 0, "", "x"),
    OK("Connection token list", R200 "Connection: keep-alive, Upgrade,CLOSE\r\nContent-Length: 1\r\n\r\nx",
       200, 1, 0, 0, "", "x"),
    OK("Connection in two headers",
       R200 "Connection: upgrade\r\nConnection: Close\r\nContent-Length: 0\r\n\r\n", 200, 0, 0, 0, "", ""),
    OK("Connection: closed is not close", R200 "Connection: closed, x-close\r\nContent-Length: 0\r\n\r\n",
       200, 0, 0, 1, "", ""),
    OK("HTTP/1.0 default close", "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx", 200, 1, 0, 0, "", "x"),
    OK("HTTP/1.0 keep-alive", "HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 1\r\n\r\nx", 200,
       1, 0, 1, "", "x"),
    OK("HTTP/1.0 keep-alive and close",
       "HTTP/1.0 200 OK\r\nConnection: keep-alive, close\r\nContent-Length: 0\r\n\r\n", 200, 0, 0, 0, "", ""),
    /* Until-close bodies and responses cut short. */
    OPEN("until close", R200 "Cache-Control: no-cache\r\n\r\ndata: 1\n\ndata: 2\n\n", PDR_H1_DONE, 200, -1, 0,
         0, "data: 1\n\ndata: 2\n\n"),
    OPEN("until close, empty", "HTTP/1.0 200 OK\r\n\r\n", PDR_H1_DONE, 200, -1, 0, 0, ""),
    OPEN("Content-Length cut short", R200 "Content-Length: 10\r\n\r\nabc", PDR_H1_ERROR, 200, 10, 0, 1,
         "abc"),
    OPEN("Content-Length 2^62", R200 "Content-Length: 4611686018427387904\r\n\r\nab", PDR_H1_ERROR, 200,
         4611686018427387904, 0, 1, "ab"),
    OPEN("chunk size 2^62", CHUNKED "4000000000000000\r\nab", PDR_H1_ERROR, 200, -1, 1, 1, "ab"),
    OPEN("chunked cut in trailers", CHUNKED "1\r\nz\r\n0\r\nX: y\r\n", PDR_H1_ERROR, 200, -1, 1, 1, "z"),
    OPEN("chunked cut after data", CHUNKED "1\r\nz", PDR_H1_ERROR, 200, -1, 1, 1, "z"),
    OPEN("head cut short", R200 "Content-Len", PDR_H1_ERROR, 0, 0, 0, 0, ""),
    OPEN("nothing at all", "", PDR_H1_ERROR, 0, 0, 0, 0, ""),
    /* Pipelining: DONE stops at the end of the first response. */
    PIPE("pipelined after Content-Length", R200 "Content-Length: 2\r\n\r\nhiHTTP/1.1 204 No Content\r\n\r\n",
         40, 200, 2, 0, "hi"),
    PIPE("pipelined after chunked", CHUNKED "2\r\nhi\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n", 59, 200, -1, 1, "hi"),
    PIPE("pipelined after 204", "HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 200 OK\r\n", 27, 204, 0, 0, ""),
    /* Malformed status lines. */
    BAD("HTTP/2", "HTTP/2 200 OK\r\n\r\n", STATUS_ERR),
    BAD("two-digit status", "HTTP/1.1 20 OK\r\n\r\n", STATUS_ERR),
    BAD("four-digit status", "HTTP/1.1 2000 OK\r\n\r\n", STATUS_ERR),
    BAD("status below 100", "HTTP/1.1 099 OK\r\n\r\n", STATUS_ERR),
    BAD("status with a letter", "HTTP/1.1 2x0 OK\r\n\r\n", STATUS_ERR),
    BAD("no space after status", "HTTP/1.1 200OK\r\n\r\n", STATUS_ERR),
    BAD("two spaces before status", "HTTP/1.1  200 OK\r\n\r\n", STATUS_ERR),
    BAD("lower-case protocol", "http/1.1 200 OK\r\n\r\n", STATUS_ERR),
    BAD("not HTTP", "SSH-2.0-OpenSSH_9.2\r\n", STATUS_ERR),
    BAD("TLS bytes", "\x16\x03\x01\x02\x00\x01", "control character"),
    BAD("empty line before status", "\r\nHTTP/1.1 200 OK\r\n\r\n", STATUS_ERR),
    BAD("missing version digit", "HTTP/1. 200 OK\r\n\r\n", STATUS_ERR),
    /* Malformed header lines. */
    BAD("obs-fold", R200 "X-A: 1\r\n  continued\r\nContent-Length: 0\r\n\r\n", "folding"),
    BAD("obs-fold with HT", R200 "X-A: 1\r\n\tcontinued\r\n\r\n", "folding"),
    BAD("first header line folded", R200 " X-A: 1\r\n\r\n", "folding"),
    BAD("header without colon", R200 "NoColonHere\r\n\r\n", "without ':'"),
    BAD("whitespace before colon", R200 "Content-Length : 5\r\n\r\nhello", "header name"),
    BAD("empty header name", R200 ": x\r\n\r\n", "empty header name"),
    BAD("bad char in name", R200 "X(a): 1\r\n\r\n", "header name"),
    BAD("CR without LF", "HTTP/1.1 200 OK\rContent-Length: 0\r\n\r\n", "CR not followed by LF"),
    BAD("CR CR LF", R200 "X: 1\r\r\n\r\n", "CR not followed by LF"),
    BAD("NUL in a header value", R200 "X: a\0b\r\n\r\n", "control character"),
    BAD("DEL in a header value", R200 "X: a\x7f\r\n\r\n", "control character"),
    BAD("control character after HT in one word", R200 "X: abcdefgh\tij\x01klmnop\r\n\r\n",
        "control character"),
    BAD("DEL after HT in one word", R200 "X: abcdefgh\tijklm\x7f\r\n\r\n", "control character"),
    BAD("control character at a word's last byte",
        R200 "X-Abcdefgh: 12345\x1b"
             "6789\r\n\r\n",
        "control character"),
    BAD("CR alone at a word's last byte", R200 "X-Abcdefgh: 123456\r789\r\n\r\n", "CR not followed by LF"),
    BAD("bad header in a 1xx", "HTTP/1.1 100 Continue\r\nbad\r\n\r\n", "without ':'"),
    /* Content-Length. */
    BAD("Content-Length letters", R200 "Content-Length: abc\r\n\r\n", "non-numeric Content-Length"),
    BAD("Content-Length plus", R200 "Content-Length: +5\r\n\r\n", "non-numeric Content-Length"),
    BAD("Content-Length negative", R200 "Content-Length: -1\r\n\r\n", "non-numeric Content-Length"),
    BAD("Content-Length list", R200 "Content-Length: 5, 5\r\n\r\n", "non-numeric Content-Length"),
    BAD("Content-Length hex", R200 "Content-Length: 0x10\r\n\r\n", "non-numeric Content-Length"),
    BAD("Content-Length inner space", R200 "Content-Length: 1 2\r\n\r\n", "non-numeric Content-Length"),
    BAD("Content-Length empty", R200 "Content-Length: \r\n\r\n", "empty Content-Length"),
    BAD("Content-Length 2^62 + 1", R200 "Content-Length: 4611686018427387905\r\n\r\n",
        "Content-Length too large"),
    BAD("Content-Length 2^64", R200 "Content-Length: 18446744073709551616\r\n\r\n",
        "Content-Length too large"),
    BAD("Content-Length huge", R200 "Content-Length: 99999999999999999999999999999\r\n\r\n",
        "Content-Length too large"),
    BAD("different Content-Length", R200 "Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
        "different Content-Length"),
    BAD("different Content-Length in a 204",
        "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
        "different Content-Length"),
    /* Transfer-Encoding. */
    BAD("TE and CL", R200 "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
        "both Transfer-Encoding"),
    BAD("CL and TE", R200 "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
        "both Transfer-Encoding"),
    BAD_HEAD("TE and CL on HEAD", R200 "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
             "both Transfer-Encoding"),
    BAD("TE gzip", R200 "Transfer-Encoding: gzip\r\n\r\nabc", "unsupported transfer coding"),
    BAD("TE chunked then gzip", R200 "Transfer-Encoding: chunked, gzip\r\n\r\n",
        "unsupported transfer coding"),
    BAD("TE chunked in two headers then gzip",
        R200 "Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\n", "unsupported transfer coding"),
    BAD("TE chunked twice", R200 "Transfer-Encoding: chunked, chunked\r\n\r\n",
        "unsupported transfer coding"),
    BAD("TE empty", R200 "Transfer-Encoding: \r\n\r\n", "unsupported transfer coding"),
    BAD("TE chunkedx", R200 "Transfer-Encoding: chunkedx\r\n\r\n", "unsupported transfer coding"),
    BAD("TE parameter without a name", R200 "Transfer-Encoding: ;a=b, chunked\r\n\r\n",
        "malformed Transfer-Encoding"),
    BAD("TE odd name", R200 "Transfer-Encoding: \"chunked\"\r\n\r\n", "malformed Transfer-Encoding"),
    /* Chunked bodies. */
    BAD("empty chunk size", CHUNKED "\r\nhello\r\n0\r\n\r\n", "empty chunk size"),
    BAD("empty chunk size bare LF", CHUNKED "\nhello\r\n0\r\n\r\n", "empty chunk size"),
    BAD("chunk extension without a size", CHUNKED ";a=b\r\nhello\r\n0\r\n\r\n", "empty chunk size"),
    BAD("chunk size with a space first", CHUNKED " 5\r\nhello\r\n0\r\n\r\n", "empty chunk size"),
    BAD("chunk size with a letter", CHUNKED "5x\r\nhello\r\n0\r\n\r\n", "invalid character in chunk size"),
    BAD("chunk size with 0x", CHUNKED "0x5\r\nhello\r\n0\r\n\r\n", "invalid character in chunk size"),
    BAD("chunk size with two numbers", CHUNKED "5 5\r\nhello\r\n0\r\n\r\n",
        "invalid character in chunk size"),
    BAD("chunk size negative", CHUNKED "-5\r\nhello\r\n0\r\n\r\n", "empty chunk size"),
    BAD("chunk size 2^62 + 1", CHUNKED "4000000000000001\r\n", "chunk size too large"),
    BAD("chunk size 2^64", CHUNKED "10000000000000000\r\n", "chunk size too large"),
    BAD("chunk size huge", CHUNKED "ffffffffffffffffffffffff\r\n", "chunk size too large"),
    BAD("chunk data too long", CHUNKED "5\r\nhelloX\r\n0\r\n\r\n", "chunk data not followed by CRLF"),
    BAD("chunk data CR CR", CHUNKED "5\r\nhello\r\r\n0\r\n\r\n", "chunk data not followed by CRLF"),
    BAD("chunk data CR then data", CHUNKED "5\r\nhello\rX", "chunk data not followed by CRLF"),
    BAD("chunk size CR without LF", CHUNKED "5\rhello\r\n", "CR not followed by LF"),
    BAD("control character in chunk extension", CHUNKED "5;a\x01\r\nhello\r\n0\r\n\r\n", "control character"),
    BAD("trailer folded", CHUNKED "0\r\nX: 1\r\n folded\r\n\r\n", "folding"),
    BAD("trailer without colon", CHUNKED "0\r\nbad trailer\r\n\r\n", "without ':'"),
    BAD("trailer with NUL", CHUNKED "0\r\nX: \0\r\n\r\n", "control character"),
};

/* Runs one way of feeding c and compares it with the whole parse. */
static void check_way(const tcase_t *c, const h1_run_t *whole, size_t first, size_t step, h1_run_t *o)
{
    char why[300];
    h1_feed((const unsigned char *)c->in, c->len, c->head, first, step, o);
    if (!h1_same(whole, o, why, sizeof(why))) {
        fprintf(stderr, "%s: fed from %zu in steps of %zu: differs from the whole parse: %s\n", c->name,
                first, step, why);
        check_failures++;
    }
}

static void check_case(const tcase_t *c)
{
    static h1_run_t whole, other;
    unsigned char *bufs = malloc(2 * (c->len ? c->len : 1));
    if (bufs == NULL)
        abort();
    whole.body = bufs;
    other.body = bufs + c->len;
    whole.body_cap = other.body_cap = c->len;
    h1_feed((const unsigned char *)c->in, c->len, c->head, c->len, c->len, &whole);
    size_t off = c->off ? c->off : c->len;
    size_t blen = c->body_len;
    int fails = check_failures;
    CHECK(whole.why[0] == '\0');
    CHECK(whole.final_ev == c->ev);
    CHECK(whole.eof_ev == c->eof);
    if (c->ev != PDR_H1_ERROR)
        CHECK(whole.final_off == off);
    if (c->err != NULL)
        CHECK(whole.error != NULL && strstr(whole.error, c->err) != NULL);
    else
        CHECK(whole.error == NULL);
    if (c->ev != PDR_H1_ERROR || c->status != 0)
        CHECK(whole.headers == (c->status != 0));
    if (c->status != 0) {
        CHECK(whole.status == c->status);
        CHECK(whole.content_length == c->cl);
        CHECK(whole.chunked == c->chunked);
        CHECK(whole.keep_alive == c->keep_alive);
        CHECK(strcmp(whole.content_type, c->ctype) == 0);
    }
    if (c->ev != PDR_H1_ERROR) {
        CHECK(whole.body_len == blen);
        CHECK(whole.body_len == blen && memcmp(whole.body, c->body, blen) == 0);
        /* Given everything at once, a body comes in one span per chunk, or in one span. */
        CHECK(whole.body_events <= (c->chunked ? 3u : 1u));
    }
    if (check_failures != fails)
        fprintf(stderr, "  in case \"%s\" (final %d at %zu, eof %d, error %s, %s)\n", c->name, whole.final_ev,
                whole.final_off, whole.eof_ev, whole.error ? whole.error : "none", whole.why);
    /* Every split point, then byte by byte and in small steps. */
    size_t stride = c->len > 2048 ? c->len / 257 : 1;
    for (size_t k = 0; k <= c->len; k += stride)
        check_way(c, &whole, k, c->len, &other);
    check_way(c, &whole, 0, 1, &other);
    check_way(c, &whole, 1, 2, &other);
    check_way(c, &whole, 0, 3, &other);
    check_way(c, &whole, 5, 7, &other);
    /* And through the fuzz target's own checks. */
    LLVMFuzzerTestOneInput((const uint8_t *)c->in, c->len);
    free(bufs);
}

typedef struct {
    int ev;
    size_t used;
    size_t blen;
} step_t;

/* Feeds s (all of it each call, minus what was used) and checks the sequence of events. */
static void check_events(const char *name, const char *s, size_t len, int head, const step_t *want,
                         size_t nwant)
{
    pdr_h1resp_t r;
    size_t off = 0;
    pdr_h1_init(&r);
    r.head_request = head;
    for (size_t k = 0; k < nwant; k++) {
        size_t used, blen;
        const char *b;
        int ev = pdr_h1_next(&r, s + off, len - off, &used, &b, &blen);
        if (ev != want[k].ev || used != want[k].used || blen != want[k].blen) {
            fprintf(stderr, "%s: step %zu: event %d used %zu blen %zu, want %d %zu %zu\n", name, k, ev, used,
                    blen, want[k].ev, want[k].used, want[k].blen);
            check_failures++;
            return;
        }
        if (ev == PDR_H1_BODY)
            CHECK(b == s + off + used - blen);
        off += used;
    }
}

static void test_event_sequences(void)
{
    static const char no_content[] = "HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 200 OK\r\n";
    const step_t s204[] = {{PDR_H1_HEADERS, 27, 0}, {PDR_H1_DONE, 0, 0}, {PDR_H1_DONE, 0, 0}};
    check_events("204", no_content, sizeof(no_content) - 1, 0, s204, 3);
    check_events("204 alone", no_content, 27, 0, s204, 3);

    static const char cl0[] = R200 "Content-Length: 0\r\n\r\n";
    const step_t scl0[] = {{PDR_H1_HEADERS, sizeof(cl0) - 1, 0}, {PDR_H1_DONE, 0, 0}, {PDR_H1_DONE, 0, 0}};
    check_events("Content-Length: 0", cl0, sizeof(cl0) - 1, 0, scl0, 3);

    static const char head[] = R200 "Content-Length: 7\r\n\r\n";
    const step_t shead[] = {{PDR_H1_HEADERS, sizeof(head) - 1, 0}, {PDR_H1_DONE, 0, 0}};
    check_events("HEAD", head, sizeof(head) - 1, 1, shead, 2);

    /* The whole body in one span, DONE with used 0 on the next call, NEED_MORE never in between. */
    static const char cl[] = R200 "Content-Length: 11\r\n\r\nhello worldHTTP";
    const step_t scl[] = {
        {PDR_H1_HEADERS, 39, 0}, {PDR_H1_BODY, 11, 11}, {PDR_H1_DONE, 0, 0}, {PDR_H1_DONE, 0, 0}};
    check_events("Content-Length", cl, sizeof(cl) - 1, 0, scl, 4);

    /* One span per chunk; the CRLF and the next size line are consumed with the next span. */
    static const char ch[] = CHUNKED "5\r\nhello\r\n6;x=y\r\n world\r\n0\r\nT: 1\r\n\r\nNEXT";
    const step_t sch[] = {{PDR_H1_HEADERS, 47, 0},
                          {PDR_H1_BODY, 8, 5},
                          {PDR_H1_BODY, 2 + 7 + 6, 6},
                          {PDR_H1_DONE, 2 + 3 + 6 + 2, 0},
                          {PDR_H1_DONE, 0, 0}};
    check_events("chunked", ch, sizeof(ch) - 1, 0, sch, 5);

    /* An until-close body: each call's input is one span; the end is the connection's. */
    static const char uc[] = R200 "\r\nabcdef";
    const step_t suc[] = {{PDR_H1_HEADERS, 19, 0}, {PDR_H1_BODY, 6, 6}, {PDR_H1_NEED_MORE, 0, 0}};
    check_events("until close", uc, sizeof(uc) - 1, 0, suc, 3);

    static const char bad[] = R200 "Content-Length: x\r\n\r\n";
    const step_t sbad[] = {{PDR_H1_ERROR, 36, 0}, {PDR_H1_ERROR, 0, 0}, {PDR_H1_ERROR, 0, 0}};
    check_events("error", bad, sizeof(bad) - 1, 0, sbad, 3);

    /* NEED_MORE consumes everything, including a partial line. */
    static const char part[] = R200 "Content-Le";
    const step_t spart[] = {{PDR_H1_NEED_MORE, sizeof(part) - 1, 0}};
    check_events("partial", part, sizeof(part) - 1, 0, spart, 1);
}

/* A Content-Length body fed in pieces: one BODY per piece, with exactly the piece's bytes. */
static void test_spans_follow_input(void)
{
    static const char s[] = R200 "Content-Length: 10\r\n\r\n0123456789";
    pdr_h1resp_t r;
    size_t used, blen;
    const char *b;
    pdr_h1_init(&r);
    CHECK(pdr_h1_next(&r, s, 42, &used, &b, &blen) == PDR_H1_HEADERS && used == 39);
    CHECK(pdr_h1_next(&r, s + 39, 3, &used, &b, &blen) == PDR_H1_BODY && used == 3 && blen == 3 &&
          b == s + 39);
    CHECK(pdr_h1_next(&r, s + 42, 0, &used, &b, &blen) == PDR_H1_NEED_MORE && used == 0 && b == NULL);
    CHECK(pdr_h1_next(&r, s + 42, 7, &used, &b, &blen) == PDR_H1_BODY && used == 7 && blen == 7 &&
          b == s + 42);
    CHECK(pdr_h1_next(&r, NULL, 0, &used, &b, &blen) == PDR_H1_DONE && used == 0);
    CHECK(pdr_h1_eof(&r) == PDR_H1_DONE);
}

/* Several responses on one connection, parsed one after the other with pdr_h1_init in between. */
static void test_pipelined(void)
{
    static const char s[] = "HTTP/1.1 100 Continue\r\n\r\n" R200 "Content-Length: 3\r\n\r\nabc"
                            "HTTP/1.1 204 No Content\r\n\r\n" CHUNKED "2\r\nde\r\n0\r\n\r\n"
                            "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
                            "HTTP/1.0 200 OK\r\n\r\nfgh";
    static const int want_status[] = {200, 204, 200, 200, 200};
    static const char *const want_body[] = {"abc", "", "de", "", "fgh"};
    size_t off = 0, len = sizeof(s) - 1;
    for (int k = 0; k < 5; k++) {
        pdr_h1resp_t r;
        char body[16];
        size_t bl = 0;
        int ev;
        pdr_h1_init(&r);
        do {
            size_t used, blen;
            const char *b;
            ev = pdr_h1_next(&r, s + off, len - off, &used, &b, &blen);
            CHECK(used <= len - off);
            if (ev == PDR_H1_BODY && bl + blen <= sizeof(body)) {
                memcpy(body + bl, b, blen);
                bl += blen;
            }
            off += used;
        } while (ev == PDR_H1_HEADERS || ev == PDR_H1_BODY);
        if (k < 4) {
            CHECK(ev == PDR_H1_DONE);
        } else {
            CHECK(ev == PDR_H1_NEED_MORE && off == len);
            CHECK(r.keep_alive == 0);
            CHECK(pdr_h1_eof(&r) == PDR_H1_DONE);
        }
        CHECK(r.status == want_status[k]);
        CHECK(bl == strlen(want_body[k]) && memcmp(body, want_body[k], bl) == 0);
    }
    CHECK(off == len);
}

static void test_eof(void)
{
    pdr_h1resp_t r;
    size_t used, blen;
    const char *b;
    static const char cl[] = R200 "Content-Length: 2\r\n\r\nhi";

    pdr_h1_init(&r);
    CHECK(pdr_h1_eof(&r) == PDR_H1_ERROR && r.error != NULL && strstr(r.error, "closed before") != NULL);
    CHECK(pdr_h1_next(&r, cl, sizeof(cl) - 1, &used, &b, &blen) == PDR_H1_ERROR && used == 0);

    /* The last body bytes were handed out but DONE not yet asked for: the response is complete. */
    pdr_h1_init(&r);
    CHECK(pdr_h1_next(&r, cl, sizeof(cl) - 1, &used, &b, &blen) == PDR_H1_HEADERS);
    CHECK(pdr_h1_next(&r, cl + used, 2, &used, &b, &blen) == PDR_H1_BODY && blen == 2);
    CHECK(pdr_h1_eof(&r) == PDR_H1_DONE);
    CHECK(pdr_h1_next(&r, NULL, 0, &used, &b, &blen) == PDR_H1_DONE && used == 0);

    /* An until-close body ends at the close; after that the parser stays DONE. */
    static const char uc[] = "HTTP/1.1 200 OK\r\nX: y\r\n\r\npartial";
    pdr_h1_init(&r);
    CHECK(pdr_h1_next(&r, uc, sizeof(uc) - 1, &used, &b, &blen) == PDR_H1_HEADERS);
    CHECK(r.keep_alive == 0 && r.content_length == -1 && r.chunked == 0);
    CHECK(pdr_h1_next(&r, uc + used, 7, &used, &b, &blen) == PDR_H1_BODY && blen == 7);
    CHECK(pdr_h1_next(&r, NULL, 0, &used, &b, &blen) == PDR_H1_NEED_MORE);
    CHECK(pdr_h1_eof(&r) == PDR_H1_DONE);
    CHECK(pdr_h1_next(&r, uc, 5, &used, &b, &blen) == PDR_H1_DONE && used == 0);
    CHECK(pdr_h1_eof(&r) == PDR_H1_DONE);

    /* A close in the middle of a chunk is an error, and an earlier error is kept. */
    static const char ch[] = CHUNKED "5\r\nhel";
    pdr_h1_init(&r);
    CHECK(pdr_h1_next(&r, ch, sizeof(ch) - 1, &used, &b, &blen) == PDR_H1_HEADERS);
    CHECK(pdr_h1_eof(&r) == PDR_H1_ERROR && strstr(r.error, "closed before") != NULL);
    static const char te[] = R200 "Transfer-Encoding: gzip\r\n\r\n";
    pdr_h1_init(&r);
    CHECK(pdr_h1_next(&r, te, sizeof(te) - 1, &used, &b, &blen) == PDR_H1_ERROR);
    CHECK(pdr_h1_eof(&r) == PDR_H1_ERROR && strstr(r.error, "unsupported transfer coding") != NULL);

    /* pdr_h1_init clears everything, head_request included. */
    r.head_request = 1;
    pdr_h1_init(&r);
    CHECK(r.head_request == 0 && r.error == NULL && r.content_length == -1 && r.status == 0);
}

/* Appends a literal or n copies of a byte to a growing test input. */
static void put(char *buf, size_t *len, size_t cap, const char *s, size_t n, int repeat)
{
    if (*len + n > cap)
        abort();
    if (repeat)
        memset(buf + *len, s[0], n);
    else
        memcpy(buf + *len, s, n);
    *len += n;
}

/* Runs check_case on a built input. */
static void check_built(const char *name, const char *in, size_t len, int ev, int eof, int status,
                        const char *body, const char *err, const char *ctype)
{
    tcase_t c = {.name = name,
                 .in = in,
                 .len = len,
                 .ev = ev,
                 .eof = eof,
                 .status = status,
                 .cl = (int64_t)strlen(body),
                 .keep_alive = 1,
                 .ctype = ctype,
                 .body = body,
                 .body_len = strlen(body),
                 .err = err};
    check_case(&c);
}

static void test_limits(void)
{
    enum { CAP = 3 * PDR_H1_MAX_HEAD };
    char *b = malloc(CAP);
    size_t n;
    if (b == NULL)
        abort();

    /* A head of exactly PDR_H1_MAX_HEAD bytes passes; one byte more fails. */
    static const char start[] = R200 "Content-Length: 2\r\nX-Pad: ";
    for (int extra = 0; extra <= 1; extra++) {
        n = 0;
        put(b, &n, CAP, IN(start), 0);
        put(b, &n, CAP, "a", PDR_H1_MAX_HEAD - (sizeof(start) - 1) - 4 + (size_t)extra, 1);
        put(b, &n, CAP, IN("\r\n\r\nhi"), 0);
        if (extra == 0)
            check_built("head of the maximum size", b, n, PDR_H1_DONE, PDR_H1_DONE, 200, "hi", NULL, "");
        else
            check_built("head one byte too long", b, n, PDR_H1_ERROR, PDR_H1_ERROR, 0, "",
                        "response header block too long", "");
    }
    /* Many short headers add up too; the limit applies to each 1xx head separately. */
    n = 0;
    for (int k = 0; k < 3; k++) {
        put(b, &n, CAP, IN("HTTP/1.1 100 Continue\r\n"), 0);
        for (int h = 0; h < 1000; h++)
            put(b, &n, CAP, IN("X-Abc: 0123\r\n"), 0);
        put(b, &n, CAP, IN("\r\n"), 0);
    }
    put(b, &n, CAP, IN(R200 "Content-Length: 2\r\n\r\nhi"), 0);
    check_built("large 1xx heads", b, n, PDR_H1_DONE, PDR_H1_DONE, 200, "hi", NULL, "");
    n = 0;
    put(b, &n, CAP, IN(R200), 0);
    for (int h = 0; h < 1300; h++)
        put(b, &n, CAP, IN("X-Abc: 0123\r\n"), 0);
    put(b, &n, CAP, IN("\r\n"), 0);
    check_built("too many headers", b, n, PDR_H1_ERROR, PDR_H1_ERROR, 0, "", "response header block too long",
                "");

    /* Long lines beyond the line buffer: fine for other headers, errors for framing ones. */
    n = 0;
    put(b, &n, CAP, IN(R200 "X-Long: "), 0);
    put(b, &n, CAP, "v", 5000, 1);
    put(b, &n, CAP, IN("\r\nContent-Length: 2\r\n\r\nhi"), 0);
    check_built("long header value", b, n, PDR_H1_DONE, PDR_H1_DONE, 200, "hi", NULL, "");
    n = 0;
    put(b, &n, CAP, IN(R200 "Content-Length:"), 0);
    put(b, &n, CAP, " ", 2000, 1);
    put(b, &n, CAP, IN("2\r\n\r\nhi"), 0);
    check_built("long Content-Length line", b, n, PDR_H1_ERROR, PDR_H1_ERROR, 0, "", "line too long", "");
    n = 0;
    put(b, &n, CAP, IN(R200 "Connection: "), 0);
    put(b, &n, CAP, "x", 2000, 1);
    put(b, &n, CAP, IN(", close\r\n\r\nhi"), 0);
    check_built("long Connection line", b, n, PDR_H1_ERROR, PDR_H1_ERROR, 0, "", "line too long", "");
    n = 0;
    put(b, &n, CAP, IN(R200), 0);
    put(b, &n, CAP, "N", 3000, 1);
    put(b, &n, CAP, IN(": 1\r\n\r\n"), 0);
    check_built("long header name", b, n, PDR_H1_ERROR, PDR_H1_ERROR, 0, "", "header name too long", "");
    n = 0;
    put(b, &n, CAP, IN("HTTP/1.1 200 "), 0);
    put(b, &n, CAP, "r", 3000, 1);
    put(b, &n, CAP, IN("\r\nContent-Length: 2\r\n\r\nhi"), 0);
    check_built("long reason phrase", b, n, PDR_H1_DONE, PDR_H1_DONE, 200, "hi", NULL, "");

    /* Content-Type is truncated to the field. */
    n = 0;
    put(b, &n, CAP, IN(R200 "Content-Type: "), 0);
    put(b, &n, CAP, "t", 300, 1);
    put(b, &n, CAP, IN("\r\nContent-Length: 2\r\n\r\nhi"), 0);
    char want_ct[96];
    memset(want_ct, 't', 95);
    want_ct[95] = '\0';
    check_built("long Content-Type", b, n, PDR_H1_DONE, PDR_H1_DONE, 200, "hi", NULL, want_ct);

    /* Chunk-size lines: extensions up to PDR_H1_MAX_CHUNK_LINE bytes in all. */
    static const char chunk_head[] = CHUNKED "2;e=";
    for (int extra = 0; extra <= 1; extra++) {
        n = 0;
        put(b, &n, CAP, IN(chunk_head), 0);
        put(b, &n, CAP, "e", PDR_H1_MAX_CHUNK_LINE - 4 - 2 + (size_t)extra, 1);
        put(b, &n, CAP, IN("\r\nhi\r\n0\r\n\r\n"), 0);
        if (extra == 0) {
            tcase_t c = {.name = "longest chunk-size line",
                         .in = b,
                         .len = n,
                         .ev = PDR_H1_DONE,
                         .eof = PDR_H1_DONE,
                         .status = 200,
                         .cl = -1,
                         .chunked = 1,
                         .keep_alive = 1,
                         .ctype = "",
                         .body = "hi",
                         .body_len = 2};
            check_case(&c);
        } else {
            check_built("chunk-size line too long", b, n, PDR_H1_ERROR, PDR_H1_ERROR, 0, "",
                        "chunk-size line too long", "");
        }
    }
    /* Trailers: PDR_H1_MAX_HEAD bytes in all, checked line by line. */
    for (int extra = 0; extra <= 1; extra++) {
        n = 0;
        put(b, &n, CAP, IN(CHUNKED "2\r\nhi\r\n0\r\nX-T: "), 0);
        put(b, &n, CAP, "t", PDR_H1_MAX_HEAD - 5 - 4 + (size_t)extra, 1);
        put(b, &n, CAP, IN("\r\n\r\n"), 0);
        tcase_t c = {.name = extra ? "trailers too long" : "longest trailers",
                     .in = b,
                     .len = n,
                     .ev = extra ? PDR_H1_ERROR : PDR_H1_DONE,
                     .eof = extra ? PDR_H1_ERROR : PDR_H1_DONE,
                     .status = 200,
                     .cl = -1,
                     .chunked = 1,
                     .keep_alive = 1,
                     .ctype = "",
                     .body = "hi",
                     .body_len = 2,
                     .err = extra ? "trailer section too long" : NULL};
        check_case(&c);
    }
    free(b);
}

/* Deterministic mutations of every table input through the fuzz target's checks. */
static void test_mutations(void)
{
    uint64_t s = 0x243F6A8885A308D3ull;
    unsigned char m[512];
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        size_t len = cases[k].len < sizeof(m) ? cases[k].len : sizeof(m);
        if (len == 0)
            continue;
        for (int iter = 0; iter < 100; iter++) {
            memcpy(m, cases[k].in, len);
            for (int j = 0; j < 1 + iter % 3; j++) {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                static const char interesting[] = "\r\n :;,0aF\t\x7f";
                m[s % len] = (s >> 40) % 2 ? (unsigned char)interesting[(s >> 20) % (sizeof(interesting) - 1)]
                                           : (unsigned char)(s >> 48);
            }
            LLVMFuzzerTestOneInput(m, len - (iter % 5 == 0 ? (size_t)(s >> 8) % len : 0));
        }
    }
}

/*
 * A head that lies whole in the input is parsed where it lies: the line buffer is neither cleared by
 * pdr_h1_init nor written, and the results are those of a parse fed byte by byte.
 */
static void test_in_place(void)
{
    static const char s[] = "HTTP/1.1 200 OK\r\nServer: nginx\r\nContent-Type: application/json\r\n"
                            "Content-Length: 2\r\nConnection: keep-alive\r\n\r\nhi";
    pdr_h1resp_t r;
    size_t used, blen;
    const char *b;
    memset(&r, 0x5a, sizeof(r));
    pdr_h1_init(&r);
    CHECK(r.line[0] == 0x5a && r.line[sizeof(r.line) - 1] == 0x5a);
    CHECK(r.content_type[0] == '\0' && r.content_length == -1 && r.error == NULL && r.head_request == 0);
    CHECK(pdr_h1_next(&r, s, sizeof(s) - 1, &used, &b, &blen) == PDR_H1_HEADERS && used == sizeof(s) - 3);
    CHECK(r.status == 200 && r.content_length == 2 && r.keep_alive == 1);
    CHECK(strcmp(r.content_type, "application/json") == 0);
    for (size_t i = 0; i < sizeof(r.line); i++)
        if (r.line[i] != 0x5a) {
            fprintf(stderr, "line buffer written at %zu\n", i);
            check_failures++;
            break;
        }
    /* A line cut by the end of the input still goes through the line buffer. */
    pdr_h1_init(&r);
    CHECK(pdr_h1_next(&r, s, 20, &used, &b, &blen) == PDR_H1_NEED_MORE && used == 20);
    CHECK(memcmp(r.line, "Se", 2) == 0);
    CHECK(pdr_h1_next(&r, s + 20, sizeof(s) - 21, &used, &b, &blen) == PDR_H1_HEADERS);
    CHECK(r.status == 200 && r.content_length == 2 && strcmp(r.content_type, "application/json") == 0);
}

static void test_table(void)
{
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++)
        check_case(&cases[k]);
}

static const pdr_test_case_t runner_cases[] = {
    {"table", test_table, 60},
    {"event_sequences", test_event_sequences, 60},
    {"spans_follow_input", test_spans_follow_input, 60},
    {"pipelined", test_pipelined, 60},
    {"eof", test_eof, 60},
    {"limits", test_limits, 60},
    {"in_place", test_in_place, 60},
    {"mutations", test_mutations, 60},
};

int main(int argc, char **argv)
{
    return PDR_TEST_RUN(runner_cases, argc, argv);
}
