/*
 * Fuzz target for whole client connections: a real router (one loop, the listener's h2o context, every
 * connection guard of router/front/conn.c, the request handlers) is started once in this process, and each
 * input is the byte stream of one client connection. The input goes in over a real loopback TCP
 * connection handed to the router as an accepted one (pdr__serve_conn), with the loop turning between
 * writes; then the client half-closes and the loop turns until the router has closed the connection, and
 * once more until the connection's memory is freed. Seeds: HTTP/1 requests, HTTP/2 connections with prior
 * knowledge (valid and each class of connection and stream error), Upgrade: h2c.
 * Invariants: no crash or sanitizer report, and the router closes every connection within the bound of
 * loop turns (a connection it keeps open for a closed client is a leak). Workers are unreachable
 * (connection refused), so a routed request ends at once in a 503.
 * Built with libFuzzer when PDR_LIBFUZZER is defined; otherwise a main() replays the files named on the
 * command line with deterministic mutations (ctest's router_conn_fuzz_corpus).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "config.h"
#include "front.h"
#include "router.h"
#include "server.h"
#include "util.h"

static pdr_router_t fuzz_router;
static uv_loop_t fuzz_loop;
static int pair_listener = -1;
static uv_timer_t tick; /* keeps UV_RUN_ONCE from blocking longer than a millisecond */

static void on_tick(uv_timer_t *h)
{
    (void)h;
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0)
        abort();
    close(fd);
    return ntohs(a.sin_port);
}

static void setup(void)
{
    static int ready;
    if (ready)
        return;
    ready = 1;
    pdr_log_level = PDR_LOG_ERROR;
    char yaml[1024];
    int n = snprintf(yaml, sizeof(yaml),
                     "listen: { host: 127.0.0.1, port: %d }\n"
                     "admin: { port: 0 }\n"
                     "threads: 1\n"
                     "log: { access_log: 'off' }\n"
                     "health: { interval_ms: 3600000 }\n"
                     "timeouts: { connect_ms: 100, client_header_ms: 200, client_body_ms: 200 }\n"
                     "limits: { max_body_bytes: 65536 }\n"
                     "workers:\n"
                     "  prefill: [ { url: 'http://127.0.0.1:1', bootstrap_port: 2 } ]\n"
                     "  decode: [ { url: 'http://127.0.0.1:1' } ]\n",
                     free_port());
    char err[512];
    pdr_config_t *c = pdr_config_load_string(yaml, (size_t)n, "fuzz_conn.yaml", err, sizeof(err));
    if (c == NULL) {
        fprintf(stderr, "fuzz_conn: %s\n", err);
        abort();
    }
    if (uv_loop_init(&fuzz_loop) != 0 || pdr_router_start(&fuzz_router, c, &fuzz_loop) != 0)
        abort();
    pdr_config_unref(c);
    uv_timer_init(&fuzz_loop, &tick);
    uv_timer_start(&tick, on_tick, 1, 1);
    uv_unref((uv_handle_t *)&tick);

    pair_listener = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (pair_listener < 0 || bind(pair_listener, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        listen(pair_listener, 16) != 0)
        abort();
}

/* A connected loopback TCP pair: the client end (non-blocking) and the server end. */
static void tcp_pair(int *client, int *server)
{
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    if (getsockname(pair_listener, (struct sockaddr *)&a, &len) != 0)
        abort();
    int c = socket(AF_INET, SOCK_STREAM, 0);
    if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof(a)) != 0)
        abort();
    int s = accept(pair_listener, NULL, NULL);
    if (s < 0)
        abort();
    fcntl(c, F_SETFL, fcntl(c, F_GETFL) | O_NONBLOCK);
    fcntl(s, F_SETFL, fcntl(s, F_GETFL) | O_NONBLOCK);
    *client = c;
    *server = s;
}

/* Reads and drops what the router sent: 1 once it closed the connection. */
static int drained_closed(int fd)
{
    char buf[65536];
    for (;;) {
        ssize_t r = read(fd, buf, sizeof(buf));
        if (r > 0)
            continue;
        if (r == 0)
            return 1;
        return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : 1;
    }
}

#define MAX_TURNS 20000 /* at ~1 ms a turn: the client timeouts above are 200 ms */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    int c, s;
    tcp_pair(&c, &s);
    pdr_thread_t *t = &fuzz_router.threads[0];
    uint64_t conns0 = t->conns;
    pdr__serve_conn(t, &t->listener, s);
    size_t off = 0;
    int closed = 0, turns = 0;
    if (size == 0)
        shutdown(c, SHUT_WR);
    while (!closed && turns < MAX_TURNS) {
        if (off < size) {
            ssize_t w = send(c, data + off, size - off, MSG_NOSIGNAL);
            if (w > 0)
                off += (size_t)w;
            else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
                off = size; /* the router closed its end */
            if (off == size)
                shutdown(c, SHUT_WR);
        }
        uv_run(&fuzz_loop, UV_RUN_ONCE);
        closed = drained_closed(c);
        turns++;
    }
    if (!closed) {
        fprintf(stderr, "fuzz_conn: the router kept a connection open after %d loop turns\n", turns);
        abort();
    }
    close(c);
    /* The connection's memory goes in its close callbacks. */
    for (turns = 0; t->conns > conns0 && turns < MAX_TURNS; turns++)
        uv_run(&fuzz_loop, UV_RUN_ONCE);
    if (t->conns > conns0) {
        fprintf(stderr, "fuzz_conn: a closed connection was never freed\n");
        abort();
    }
    return 0;
}

#ifndef PDR_LIBFUZZER
#define PDR_REPLAY_MUTATIONS 4
#include "replay_main.h"
#endif
