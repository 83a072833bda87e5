/*
 * The upstream HTTP/1.1 client (router/upstream/upstream.c) against h1_script_server.py, a raw-socket server
 * on loopback that misbehaves on purpose: Content-Length, chunked (split, extensions, trailer), until-close
 * and body-less answers, 1xx, keep-alive reuse, a close by the server while the connection is idle, a
 * reset, garbage, a hang (total deadline), connect refused, back-pressure (pause/resume), cancel from the
 * data callback, fail_all, and a clean close of the multi. Each case runs the loop until its leg ends.
 * Each case has its own server, loop and multi, and ends with the multi's clean close (every handle goes,
 * the callback runs, the loop has nothing left).
 *
 * Usage: test_upstream PYTHON SCRIPT [CASE...]
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../unit/check.h"
#include "../unit/runner.h"
#include "err.h"
#include "script_server.h"
#include "upstream.h"
#include "util.h"

static uv_loop_t *loop;
static pdr_multi_t *multi;
static char base[64];
static script_server_t server;

typedef struct result {
    pdr_leg_t leg;
    int done, err, calls;
    char *body;
    size_t len, cap;
    int pause_every;   /* pause on every n-th on_data call (0: never) */
    int redeliver;     /* paused: the next call brings the same bytes again */
    int cancel_at;     /* cancel from the n-th on_data call (0: never) */
    int in_start;      /* set around pdr_leg_start: on_done must not run then */
    int called_inside; /* on_done ran inside pdr_leg_start */
    uv_timer_t resume;
} result_t;

static void on_resume(uv_timer_t *t)
{
    result_t *r = t->data;
    pdr_leg_resume(&r->leg);
}

static size_t on_data(pdr_leg_t *leg, const char *p, size_t n)
{
    result_t *r = leg->data;
    r->calls++;
    if (r->cancel_at > 0 && r->calls == r->cancel_at) {
        pdr_leg_cancel(leg);
        r->done = 2; /* cancelled: on_done must not come */
        return n;
    }
    if (r->pause_every > 0 && r->calls % r->pause_every == 0 && !r->redeliver) {
        r->redeliver = 1; /* the same bytes come again after the resume */
        uv_timer_start(&r->resume, on_resume, 1, 0);
        return PDR_LEG_PAUSE;
    }
    r->redeliver = 0;
    if (r->len + n > r->cap) {
        r->cap = (r->len + n) * 2;
        r->body = realloc(r->body, r->cap + 1);
    }
    memcpy(r->body + r->len, p, n);
    r->len += n;
    r->body[r->len] = '\0';
    return n;
}

static void on_done(pdr_leg_t *leg, int err)
{
    result_t *r = leg->data;
    if (r->in_start)
        r->called_inside = 1;
    r->done = 1;
    r->err = err;
}

static const pdr_leg_cbs_t cbs = {on_data, on_done};

static void result_init(result_t *r)
{
    memset(r, 0, sizeof(*r));
    uv_timer_init(loop, &r->resume);
    r->resume.data = r;
}

static void result_free(result_t *r)
{
    uv_close((uv_handle_t *)&r->resume, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
    free(r->body);
}

/* Starts a leg and runs the loop until it ends (or `limit_ms` passes). Returns pdr_leg_start's code. */
static int run(result_t *r, const char *method_path, const char *body, long total_ms)
{
    char url[256];
    snprintf(url, sizeof(url), "%s%s", base, method_path);
    r->in_start = 1;
    int rc = pdr_leg_start(&r->leg, multi, url, body, body ? strlen(body) : 0, NULL, 1000, total_ms, &cbs, r);
    r->in_start = 0;
    if (rc != 0)
        return rc;
    uint64_t deadline = pdr_now_ms() + 10000;
    while (!r->done && pdr_now_ms() < deadline)
        uv_run(loop, UV_RUN_ONCE);
    return 0;
}

static int get_ok(const char *path, const char *want)
{
    result_t r;
    result_init(&r);
    int ok = run(&r, path, NULL, 5000) == 0 && r.done == 1 && r.err == 0 && r.leg.status == 200 &&
             strcmp(r.body != NULL ? r.body : "", want) == 0;
    if (!ok)
        fprintf(stderr, "GET %s: done %d err %d status %ld body %.80s\n", path, r.done, r.err, r.leg.status,
                r.body ? r.body : "(none)");
    result_free(&r);
    return ok;
}

static int server_connections(void)
{
    result_t r;
    result_init(&r);
    int n = -1;
    if (run(&r, "/stats", NULL, 5000) == 0 && r.err == 0 && r.body != NULL) {
        const char *p = strstr(r.body, "\"connections\": ");
        char *end;
        long v = p != NULL ? strtol(p + 15, &end, 10) : -1;
        if (p != NULL && end != p + 15 && v >= 0 && v < 1000000)
            n = (int)v;
    }
    result_free(&r);
    return n;
}

static void on_waited(uv_timer_t *t)
{
    *(int *)t->data = 1;
}

/* Runs the loop for ms milliseconds (until a timer fires). */
static void wait_ms(int ms)
{
    int fired = 0;
    uv_timer_t t;
    uv_timer_init(loop, &t);
    t.data = &fired;
    uv_timer_start(&t, on_waited, (uint64_t)ms, 0);
    while (!fired)
        uv_run(loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
}

static int closed_called;
static void on_multi_closed(void *arg)
{
    (void)arg;
    closed_called = 1;
}

/* argv[1] and argv[2], read by main before the cases run. */
static const char *py_path, *script_path;

/* Each case's own server, loop and multi. */
static void setup(void)
{
    signal(SIGPIPE, SIG_IGN);
    char *const server_argv[] = {(char *)py_path, (char *)script_path, NULL};
    if (script_server_start(&server, server_argv) != 0)
        exit(1);
    snprintf(base, sizeof(base), "http://127.0.0.1:%d", server.port);
    if (getenv("PDR_DEBUG") != NULL)
        pdr_log_level = PDR_LOG_DEBUG;
    loop = uv_default_loop();
    multi = pdr_multi_new(loop, 16);
}

/* Close: every handle goes, the callback runs, the loop has nothing left. */
static void teardown(void)
{
    closed_called = 0;
    pdr_multi_close(multi, on_multi_closed, NULL);
    uv_run(loop, UV_RUN_DEFAULT);
    CHECK(closed_called);
    CHECK(uv_loop_close(loop) == 0);
    script_server_stop(&server);
}

static void test_content_length(void)
{
    /* Content-Length, then reuse of the same connection. */
    char *big = malloc(100001);
    for (int i = 0; i < 100000; i++)
        big[i] = (char)('a' + i % 26);
    big[100000] = '\0';
    CHECK(get_ok("/cl/100000", big));
    int conns = server_connections();
    CHECK(get_ok("/cl/10", "abcdefghij"));
    CHECK(get_ok("/cl/0", ""));
    CHECK(server_connections() == conns); /* one pooled connection served them all */
    free(big);
}

static void test_buffer_reuse(void)
{
    /* Legs on a pooled connection take the read buffer the last leg gave back: no allocation each. */
    CHECK(get_ok("/cl/10", "abcdefghij"));
    uint64_t allocs = pdr__multi_buf_allocs(multi);
    int conns = server_connections();
    for (int i = 0; i < 20; i++)
        CHECK(get_ok("/cl/3", "abc"));
    CHECK(server_connections() == conns);
    CHECK(pdr__multi_buf_allocs(multi) == allocs);
    /* A grown buffer is not kept: the next leg starts small again, with one allocation. */
    char *big = malloc(20001);
    for (int i = 0; i < 20000; i++)
        big[i] = (char)('a' + i % 26);
    big[20000] = '\0';
    CHECK(get_ok("/cl/20000", big));
    free(big);
    uint64_t after_big = pdr__multi_buf_allocs(multi);
    CHECK(get_ok("/cl/3", "abc"));
    CHECK(pdr__multi_buf_allocs(multi) == after_big + 1);
}

static void test_chunked(void)
{
    CHECK(get_ok("/cl/10", "abcdefghij")); /* a pooled connection first */
    int conns = server_connections();
    /* Chunked, split over many writes, with extensions and a trailer; then the connection is reused. */
    CHECK(get_ok("/chunked/20", "chunk-0;chunk-1;chunk-2;chunk-3;chunk-4;chunk-5;chunk-6;chunk-7;chunk-8;"
                                "chunk-9;chunk-10;chunk-11;chunk-12;chunk-13;chunk-14;chunk-15;chunk-16;"
                                "chunk-17;chunk-18;chunk-19;"));
    CHECK(server_connections() == conns);
}

static void test_close_eof_204_100(void)
{
    /* Connection: close; a body that runs until the close; 204; 100 Continue. */
    CHECK(get_ok("/close", "bye"));
    CHECK(get_ok("/eof", "until-close"));
    result_t r;
    result_init(&r);
    CHECK(run(&r, "/204", NULL, 5000) == 0 && r.done == 1 && r.err == 0 && r.leg.status == 204 && r.len == 0);
    result_free(&r);
    CHECK(get_ok("/100", "after-100"));
}

static void test_idle_close(void)
{
    /* The server closes a pooled connection while it is idle: the next request still succeeds. */
    CHECK(get_ok("/idle-close", "ok"));
    wait_ms(150);
    CHECK(get_ok("/cl/3", "abc"));
    /* ... and when the close races the reuse (no wait), the request is sent once more. */
    for (int i = 0; i < 20; i++) {
        CHECK(get_ok("/idle-close", "ok"));
        wait_ms(i % 2 ? 49 : 51);
        CHECK(get_ok("/cl/3", "abc"));
    }
}

static void test_host_names(void)
{
    result_t r;
    /* A host name (resolved off the loop, then cached), and one that does not resolve. */
    char saved_base[64];
    snprintf(saved_base, sizeof(saved_base), "%s", base);
    snprintf(base, sizeof(base), "http://localhost:%s", strrchr(saved_base, ':') + 1);
    CHECK(get_ok("/cl/4", "abcd"));
    CHECK(get_ok("/cl/5", "abcde"));
    snprintf(base, sizeof(base), "http://no-such-host.invalid:80");
    result_init(&r);
    CHECK(run(&r, "/x", NULL, 0) == 0 && r.done == 1 && r.err == PDR_ECONNREFUSED);
    result_free(&r);
    snprintf(base, sizeof(base), "%s", saved_base);
}

static void test_burst(void)
{
    /* A burst of 300 requests: at most 64 connects are in progress at once to the origin (the others
     * wait for a slot or a pooled connection), and every request succeeds. */
    {
        enum { BURST = 300 };
        result_t *rs = calloc(BURST, sizeof(*rs));
        int before = server_connections();
        char u[128];
        snprintf(u, sizeof(u), "%s/cl/100", base);
        for (int i = 0; i < BURST; i++) {
            result_init(&rs[i]);
            CHECK(pdr_leg_start(&rs[i].leg, multi, u, NULL, 0, NULL, 1000, 0, &cbs, &rs[i]) == 0);
        }
        int ok = 0;
        uint64_t until = pdr_now_ms() + 10000;
        for (;;) {
            ok = 0;
            for (int i = 0; i < BURST; i++)
                ok += rs[i].done == 1 && rs[i].err == 0 && rs[i].len == 100;
            int done = 0;
            for (int i = 0; i < BURST; i++)
                done += rs[i].done != 0;
            if (done == BURST || pdr_now_ms() > until)
                break;
            uv_run(loop, UV_RUN_ONCE);
        }
        int opened = server_connections() - before;
        CHECK(ok == BURST);
        size_t peak = pdr__multi_connecting_peak(multi);
        CHECK(opened > 0 && opened <= BURST && peak == 64);
        if (ok != BURST || peak != 64) {
            fprintf(stderr, "burst: %d of %d ok, %d new connections, %zu connects at once\n", ok, BURST,
                    opened, peak);
            for (int i = 0, shown = 0; i < BURST && shown < 5; i++)
                if (!(rs[i].done == 1 && rs[i].err == 0 && rs[i].len == 100) && ++shown)
                    fprintf(stderr, "  leg %d: done %d err %d status %ld len %zu\n", i, rs[i].done, rs[i].err,
                            rs[i].leg.status, rs[i].len);
        }
        for (int i = 0; i < BURST; i++)
            result_free(&rs[i]);
        free(rs);
    }
}

static void test_conn_limit(void)
{
    /* limits.max_connections_per_worker: with a limit of 3, a burst of 60 requests to the worker opens
     * exactly 3 connections (its own multi, so the peak is this burst's) and every request succeeds. */
    {
        enum { N2 = 60, LIMIT = 3 };
        pdr_multi_t *m2 = pdr_multi_new(loop, 16);
        pdr_multi_set_conn_limit(m2, LIMIT);
        result_t *rs = calloc(N2, sizeof(*rs));
        int before = server_connections();
        char u[128];
        snprintf(u, sizeof(u), "%s/cl/100", base);
        for (int i = 0; i < N2; i++) {
            result_init(&rs[i]);
            CHECK(pdr_leg_start(&rs[i].leg, m2, u, NULL, 0, NULL, 1000, 0, &cbs, &rs[i]) == 0);
        }
        int ok = 0, done = 0;
        uint64_t until = pdr_now_ms() + 10000;
        while (done < N2 && pdr_now_ms() < until) {
            uv_run(loop, UV_RUN_ONCE);
            ok = done = 0;
            for (int i = 0; i < N2; i++) {
                ok += rs[i].done == 1 && rs[i].err == 0 && rs[i].len == 100;
                done += rs[i].done != 0;
            }
        }
        int opened = server_connections() - before;
        CHECK(ok == N2);
        CHECK(pdr__multi_open_peak(m2) == LIMIT && opened == LIMIT);
        if (ok != N2 || opened != LIMIT)
            fprintf(stderr, "limit: %d of %d ok, %d new connections, peak %zu\n", ok, N2, opened,
                    pdr__multi_open_peak(m2));
        for (int i = 0; i < N2; i++)
            result_free(&rs[i]);
        free(rs);

        /* A health check is not held back by the limit: with all 3 connections hung, a request waits
         * but a probe is given its own connection and its answer. */
        result_t hung[LIMIT], waiting, probe;
        char uh[128];
        snprintf(uh, sizeof(uh), "%s/hang", base);
        for (int i = 0; i < LIMIT; i++) {
            result_init(&hung[i]);
            CHECK(pdr_leg_start(&hung[i].leg, m2, uh, NULL, 0, NULL, 1000, 0, &cbs, &hung[i]) == 0);
        }
        result_init(&waiting);
        result_init(&probe);
        CHECK(pdr_leg_start(&waiting.leg, m2, u, NULL, 0, NULL, 1000, 0, &cbs, &waiting) == 0);
        CHECK(pdr_leg_start_probe(&probe.leg, m2, u, NULL, 2000, &cbs, &probe) == 0);
        until = pdr_now_ms() + 5000;
        while (!probe.done && pdr_now_ms() < until)
            uv_run(loop, UV_RUN_ONCE);
        CHECK(probe.done == 1 && probe.err == 0 && probe.len == 100);
        CHECK(waiting.done == 0 && waiting.leg.waiting);
        for (int i = 0; i < LIMIT; i++) {
            pdr_leg_cancel(&hung[i].leg);
            result_free(&hung[i]);
        }
        /* The hung connections are gone: the waiting request is given one and its answer. */
        until = pdr_now_ms() + 5000;
        while (!waiting.done && pdr_now_ms() < until)
            uv_run(loop, UV_RUN_ONCE);
        CHECK(waiting.done == 1 && waiting.err == 0 && waiting.len == 100);
        result_free(&waiting);
        result_free(&probe);
        closed_called = 0;
        pdr_multi_close(m2, on_multi_closed, NULL);
        while (!closed_called)
            uv_run(loop, UV_RUN_ONCE);
        closed_called = 0;
    }
}

static void test_post_bodies(void)
{
    result_t r;
    /* A POST body, 1 MiB, echoed. */
    char *post = malloc((1 << 20) + 1);
    for (int i = 0; i < (1 << 20); i++)
        post[i] = (char)('A' + i % 26);
    post[1 << 20] = '\0';
    result_init(&r);
    CHECK(run(&r, "/echo", post, 5000) == 0 && r.err == 0 && r.len == (1u << 20) &&
          memcmp(r.body, post, r.len) == 0);
    result_free(&r);
    free(post);
    /* 32 MiB: more than the socket takes at once, so the client writes what it can and queues the rest. */
    size_t huge_len = 32u << 20;
    char *huge = malloc(huge_len + 1);
    for (size_t i = 0; i < huge_len; i++)
        huge[i] = (char)('a' + (i * 7) % 26);
    huge[huge_len] = '\0';
    result_init(&r);
    CHECK(run(&r, "/echo", huge, 20000) == 0 && r.err == 0 && r.len == huge_len &&
          memcmp(r.body, huge, r.len) == 0);
    result_free(&r);
    free(huge);
}

static void test_back_pressure(void)
{
    result_t r;
    /* Back-pressure: every 3rd delivery pauses, a timer resumes; nothing is lost or repeated. */
    char *two = malloc(2000001);
    for (int i = 0; i < 2000000; i++)
        two[i] = (char)('a' + i % 26);
    two[2000000] = '\0';
    result_init(&r);
    r.pause_every = 3;
    CHECK(run(&r, "/cl/2000000", NULL, 5000) == 0 && r.err == 0 && r.len == 2000000 &&
          memcmp(r.body, two, r.len) == 0);
    result_free(&r);
    free(two);
}

static void test_cancel_from_data(void)
{
    result_t r;
    /* Cancel from the data callback: no on_done; the next request works. */
    result_init(&r);
    r.cancel_at = 1;
    CHECK(run(&r, "/cl/1000000", NULL, 5000) == 0 && r.done == 2);
    wait_ms(20);
    CHECK(r.done == 2);
    result_free(&r);
    CHECK(get_ok("/cl/2", "ab"));
}

static void test_late_deadline(void)
{
    result_t r;
    /* A deadline that passes while the loop is busy elsewhere (here: not running at all) is judged after
     * the loop has read what arrived meanwhile: the answer that came in time wins over the late timer. */
    CHECK(get_ok("/cl/2", "ab")); /* a pooled connection: the next request is written at once */
    result_init(&r);
    {
        char lag_url[256];
        snprintf(lag_url, sizeof(lag_url), "%s/cl/2", base);
        CHECK(pdr_leg_start(&r.leg, multi, lag_url, NULL, 0, NULL, 1000, 100, &cbs, &r) == 0);
        usleep(300 * 1000); /* the loop lags 300 ms behind a 100 ms deadline; the server answers meanwhile */
        uint64_t lag_until = pdr_now_ms() + 5000;
        while (!r.done && pdr_now_ms() < lag_until)
            uv_run(loop, UV_RUN_ONCE);
        CHECK(r.done == 1 && r.err == 0 && r.leg.status == 200);
    }
    result_free(&r);
}

static void test_failures(void)
{
    result_t r;
    /* Failures: reset, garbage, hang past the total deadline, connect refused (reported later, never
     * from inside pdr_leg_start), a URL it cannot use. */
    result_init(&r);
    CHECK(run(&r, "/reset", NULL, 5000) == 0 && r.done == 1 && r.err == PDR_EPEERGONE);
    result_free(&r);
    result_init(&r);
    CHECK(run(&r, "/garbage", NULL, 5000) == 0 && r.done == 1 && r.err == PDR_EIO);
    result_free(&r);
    result_init(&r);
    uint64_t t0 = pdr_now_ms();
    CHECK(run(&r, "/hang", NULL, 200) == 0 && r.done == 1 && r.err == PDR_ETIMEDOUT);
    CHECK(pdr_now_ms() - t0 < 2000);
    result_free(&r);
    char saved[64];
    snprintf(saved, sizeof(saved), "%s", base);
    snprintf(base, sizeof(base), "http://127.0.0.1:1");
    result_init(&r);
    CHECK(run(&r, "/x", NULL, 0) == 0 && r.done == 1 && r.err == PDR_ECONNREFUSED && !r.called_inside);
    result_free(&r);
    snprintf(base, sizeof(base), "%s", saved);
    result_init(&r);
    CHECK(pdr_leg_start(&r.leg, multi, "ftp://127.0.0.1:1/", NULL, 0, NULL, 100, 0, &cbs, &r) == PDR_EINVAL);
    CHECK(pdr_leg_start(&r.leg, multi, "http://[::1/", NULL, 0, NULL, 100, 0, &cbs, &r) == PDR_EINVAL);
    CHECK(pdr_leg_start(&r.leg, multi, "http://h:99999/", NULL, 0, NULL, 100, 0, &cbs, &r) == PDR_EINVAL);
    result_free(&r);
}

static void test_fail_all(void)
{
    result_t r;
    /* fail_all ends a leg in flight with the given error. */
    result_init(&r);
    char url[128];
    snprintf(url, sizeof(url), "%s/hang", base);
    CHECK(pdr_leg_start(&r.leg, multi, url, NULL, 0, NULL, 1000, 0, &cbs, &r) == 0);
    wait_ms(50);
    size_t failed = pdr_multi_fail_all(multi, PDR_ECANCELED);
    CHECK(failed == 1 && r.done == 1 && r.err == PDR_ECANCELED);
    if (failed != 1)
        fprintf(stderr, "fail_all ended %zu legs, done %d err %d\n", failed, r.done, r.err);
    result_free(&r);
}

static const pdr_test_case_t cases[] = {
    {"content_length", test_content_length, 30},
    {"buffer_reuse", test_buffer_reuse, 30},
    {"chunked", test_chunked, 30},
    {"close_eof_204_100", test_close_eof_204_100, 30},
    {"idle_close", test_idle_close, 60},
    {"host_names", test_host_names, 30},
    {"burst", test_burst, 60},
    {"conn_limit", test_conn_limit, 60},
    {"post_bodies", test_post_bodies, 60},
    {"back_pressure", test_back_pressure, 30},
    {"cancel_from_data", test_cancel_from_data, 30},
    {"late_deadline", test_late_deadline, 30},
    {"failures", test_failures, 30},
    {"fail_all", test_fail_all, 30},
};

/* argv[1] is python3 and argv[2] the script; the names after them pick cases. */
int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: test_upstream PYTHON SCRIPT [CASE...]\n");
        return 2;
    }
    py_path = argv[1];
    script_path = argv[2];
    int rc = pdr_test_run(cases, sizeof(cases) / sizeof(cases[0]), setup, teardown, argc - 2, argv + 2);
    if (rc == 0)
        printf("all checks passed\n");
    return rc;
}
