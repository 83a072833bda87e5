#!/usr/bin/env python3
"""Allocation failure along one PD request's path through the router.

pdrouter_failalloc is pdrouter with the allocation wrappers of failalloc.c (its own code's malloc,
calloc, realloc, strdup, strndup and free counted; the shared libraries' untouched). A clean run counts
the allocations from SIGUSR2 (sent once the router is ready) through one disaggregated request to pdsim
workers and the router's shutdown: K. Then for every N in 1..K a fresh router fails the N-th of them.
Each run must answer the request with 200 or an error in the OpenAI shape
{"error": {"message", "type", "code"}} (or, when the allocation that fails is the accepted connection's
own, close that connection before reading a request, as nginx does), never crash, never hang (it still answers /health afterwards and
exits 0 on SIGTERM within its deadline); in a sanitizer build, LeakSanitizer at exit fails a leak (the
exit status), in any build the wrappers' count of live allocations at exit may not exceed the clean
run's.
"""
import http.client
import json
import os
import signal
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import pdtest  # noqa: E402
from pdtest import check, request  # noqa: E402

H = "127.0.0.1"
BODY = {"model": "pdsim", "prompt": "once upon a time there was a router", "max_tokens": 4}


def sim(role):
    argv = ["pdsim", "--role", role, "--port", "{port}"]
    if role == "prefill":
        argv += ["--bootstrap-port", "{bport}"]
    return pdtest.start(argv, name="pdsim-%s" % role)


def run(p, d, n, report):
    """One router failing the n-th allocation after arming (0: none). Returns (status, body, count, live,
    failed)."""
    for path in (report, report + ".armed"):
        if os.path.exists(path):
            os.unlink(path)
    env = dict(os.environ, PDR_FAIL_ALLOC_AT=str(n), PDR_FAIL_ALLOC_REPORT=report)
    argv = ["pdrouter_failalloc", "--pd-disaggregation", "--host", H, "--port", "{port}",
            "--prefill", "http://127.0.0.1:%d" % p.port, str(p.ports["bport"]),
            "--decode", "http://127.0.0.1:%d" % d.port, "--admin-port", "{admin}", "--access-log", "off",
            "--drain-grace-ms", "0", "--health-interval-ms", "60000"]
    r = pdtest.start(argv, name="pdrouter-N%d" % n, health_path="/readiness", healthy=200, env=env)
    r.proc.send_signal(signal.SIGUSR2)
    pdtest.poll_until(lambda: os.path.exists(report + ".armed"), 5, "the counter to be armed")
    try:
        st, _, body = request(r.port, "POST", "/v1/completions", BODY, timeout=15)
    except (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected):
        st, body = 0, b""  # no memory for the connection itself: it is closed before any request is read
    except OSError as e:
        raise AssertionError("N=%d: no answer (%s)\n%s" % (n, e, r.log_tail()))
    check(r.alive(), "N=%d: pdrouter died after answering %d" % (n, st), r)
    if st == 0:
        pass
    elif st == 200:
        j = json.loads(body)
        check("choices" in j, "N=%d: 200 without choices: %r" % (n, body[:200]), r)
    else:
        try:
            e = json.loads(body)["error"]
        except (ValueError, KeyError, TypeError):
            raise AssertionError("N=%d: status %d without an OpenAI error body: %r\n%s"
                                 % (n, st, body[:200], r.log_tail()))
        check(all(k in e for k in ("message", "type", "code")), "N=%d: error shape %r" % (n, e), r)
        # The request is valid: a failure of the router's memory is its own fault (5xx), never the client's.
        check(st >= 500, "N=%d: answered %d %r to a valid request" % (n, st, e), r)
    # Still serving. Only one allocation fails: if it is this connection's own (the request's path was
    # shorter this time), the next connection is served.
    try:
        hs, _, _ = request(r.port, "GET", "/health", timeout=5)
    except (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected):
        hs, _, _ = request(r.port, "GET", "/health", timeout=5)
    check(hs in (200, 503), "N=%d: /health answered %d after the request" % (n, hs), r)
    rc = r.stop(timeout=15)
    check(rc == 0, "N=%d: exit status %s (a leak report, or a crash at shutdown)" % (n, rc), r)
    with open(report) as f:
        count, live, failed = (int(x) for x in f.read().split())
    return st, body, count, live, failed, r


def main():
    fd, report = tempfile.mkstemp(prefix="pdtest-failalloc-", suffix=".txt")
    os.close(fd)
    try:
        p, d = sim("prefill"), sim("decode")
        st, body, k, live0, _, _ = run(p, d, 0, report)
        check(st == 200, "clean run answered %d: %r" % (st, body[:200]))
        check(k > 0, "clean run counted no allocation")
        print("a clean request (and the router's shutdown) makes %d allocations; %d live at exit" % (k, live0))
        errors = closed = 0
        for n in range(1, k + 1):
            st, body, count, live, failed, r = run(p, d, n, report)
            errors += st not in (0, 200)
            closed += st == 0
            print("N=%d%s: %d, %d allocations, %d live at exit" % (n, "" if failed else " (not reached)", st,
                                                                  count, live))
            check(live <= live0, "N=%d: %d allocations live at exit, the clean run had %d" % (n, live, live0), r)
        print("ok %d runs: %d answered an error, %d closed the connection, %d succeeded"
              % (k, errors, closed, k - errors - closed))
    finally:
        pdtest.stop_all()
        for path in (report, report + ".armed"):
            if os.path.exists(path):
                os.unlink(path)


if __name__ == "__main__":
    main()
