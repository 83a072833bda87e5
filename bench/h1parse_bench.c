/*
 * The upstream response parser's cost per response: router/upstream/h1parse.c's pdr_h1_next against
 * picohttpparser's phr_parse_response (exported by libh2o), on the response bench/callgrind.sh's
 * upstream sends. Counted by callgrind: run it with N and 2N responses and divide the difference of the
 * totals by N (docs/benchmarks.md has the commands).
 *
 * Usage: h1parse_bench ours|pico N
 *
 * The two do not do the same work: pdr_h1_next also finds the framing (Content-Length, Transfer-Encoding,
 * Connection, Content-Type), checks every header name's characters and reports the body; phr_parse_response
 * only splits the head into a status and name/value slices, and a caller would still have to do the rest.
 * The program checks that both read the same status and head length before it counts anything.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h1parse.h"

/* libh2o exports picohttpparser; Debian ships no header for it. */
struct phr_header {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
};
int phr_parse_response(const char *buf, size_t len, int *minor_version, int *status, const char **msg,
                       size_t *msg_len, struct phr_header *headers, size_t *num_headers, size_t last_len);

/* nginx's answer to bench/callgrind.sh's upstream requests, byte for byte (the date aside). */
static const char resp[] =
    "HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Mon, 07 Dec 2026 04:50:00 GMT\r\n"
    "Content-Type: application/json\r\nContent-Length: 16\r\nConnection: keep-alive\r\n"
    "\r\n{\"text\":\"hello\"}";

/* pdr_h1_next over the whole response as one input: the head length, or -1. */
static long ours(void)
{
    pdr_h1resp_t r;
    size_t off = 0, used, blen;
    const char *b;
    long head = -1;
    pdr_h1_init(&r);
    for (;;) {
        int ev = pdr_h1_next(&r, resp + off, sizeof(resp) - 1 - off, &used, &b, &blen);
        off += used;
        if (ev == PDR_H1_HEADERS)
            head = (long)off;
        if (ev == PDR_H1_DONE)
            return r.status == 200 && off == sizeof(resp) - 1 ? head : -1;
        if (ev != PDR_H1_HEADERS && ev != PDR_H1_BODY)
            return -1;
    }
}

static long pico(void)
{
    struct phr_header h[64];
    size_t nh = 64, msg_len;
    int minor, status;
    const char *msg;
    int rc = phr_parse_response(resp, sizeof(resp) - 1, &minor, &status, &msg, &msg_len, h, &nh, 0);
    return status == 200 && nh == 5 ? rc : -1;
}

int main(int argc, char **argv)
{
    char *end = NULL;
    long n = argc == 3 ? strtol(argv[2], &end, 10) : 0;
    if (argc != 3 || end == argv[2] || *end != '\0' || n <= 0 || n > 100000000 ||
        (strcmp(argv[1], "ours") != 0 && strcmp(argv[1], "pico") != 0)) {
        fprintf(stderr, "usage: h1parse_bench ours|pico N (1..100000000)\n");
        return 2;
    }
    if (ours() < 0 || ours() != pico()) {
        fprintf(stderr, "h1parse_bench: the parsers disagree on the response (ours %ld, pico %ld)\n", ours(),
                pico());
        return 1;
    }
    long (*fn)(void) = argv[1][0] == 'o' ? ours : pico;
    long sink = 0;
    for (long i = 0; i < n; i++)
        sink += fn();
    printf("%s: %ld responses parsed\n", argv[1], sink > 0 ? n : 0);
    return 0;
}
