#!/usr/bin/env python3
"""The retry budget and back-off (docs/config.md, retries; docs/operations.md, "Retry budget and
back-off"): real pdrouter and pdsim processes on loopback. The prefills answer 500 (pdsim --fail-status),
so every attempt fails at the prefill; pdsim counts the attempts and stamps their arrival.

    python3 test_retry.py SCENARIO     (PDR_BUILD=<build dir>)

Scenarios:
  budget        40 concurrent requests, retries.max 2, budget 20 % with a minimum of 3: the retries the
                prefills see stay within 2 x 8 (not the 80 retries.max alone allows), the rest are
                answered 502 at once and counted (pdr_retries_skipped_total{reason="budget"})
  backoff       one request, back-off 300 ms doubling, jitter 0.1: the three attempts reach the prefills
                at least 270 ms and 540 ms apart (pdsim's arrival clock), then a 502
  backoff_deadline  a 20 s back-off with timeouts.first_byte_ms 800: the wait ends by the request's
                first-byte deadline (the retry goes within about 0.8 s of the request's arrival)
  disconnect    an HTTP/1 client that goes away during a 3 s back-off: the request is cleaned up at once
                (no attempt follows, the budget slot and the in-flight count go back to 0)
  after_first_byte  a decode that resets its stream after its first tokens: the client's stream breaks,
                no retry follows (the prefill and the decode saw one request each)
  decode_refused  a decode killed after its health check (its port refuses connections) with the prefill
                still working: the refusal is blamed on the decode at once, not after the 200 ms the router
                gives a prefill to show its own failure (the decode never had the request)
"""

import http.client
import json
import os
import signal
import tempfile
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check  # noqa: E402
from test_router import metric_value, metrics, metrics_when, router, sim, stats  # noqa: E402


def body(text="The capital of France is", stream=False):
    return {"text": text, "stream": stream, "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}}


def conf(retries):
    return ("policy: { prefill: round_robin, decode: round_robin }\n"
            "retries: %s\n"
            "health: { interval_ms: 60000, timeout_ms: 1000, rise: 1, fall: 1000 }\n" % retries)


def failing_pair():
    return sim("prefill", "--fail-status", "500"), sim("prefill", "--fail-status", "500"), sim("decode")


def scenario_budget():
    p1, p2, d = failing_pair()
    r = router([p1, p2], [d], config=conf("{ max: 2, budget_percent: 20, min_concurrent: 3, "
                                          "initial_backoff_ms: 400, backoff_multiplier: 1, jitter_factor: 0 }"))
    n = 40
    gate = threading.Barrier(n)
    answers = []

    def one(i):
        gate.wait()
        answers.append(pdtest.request(r.port, "POST", "/generate", body=body("request %d" % i), timeout=30))

    ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    check(len(answers) == n, "answers %d" % len(answers), r)
    for st, _, b in answers:
        err = json.loads(b).get("error", {})
        check(st == 502 and err.get("code") == 502 and err.get("type") == "upstream_error", "answer %d %r" % (st, b), r)
    attempts = stats(p1)["requests"] + stats(p2)["requests"]
    retries = attempts - n
    # At most max(3, 40 x 20 %) = 8 requests retry at once, each at most twice.
    print("budget: %d requests, %d retries seen by the prefills" % (n, retries))
    check(0 < retries <= 16, "retries seen by the prefills: %d (attempts %d)" % (retries, attempts), r, p1)
    m = metrics_when(r, lambda t: metric_value(t, "pdr_inflight_requests") == 0, "every request ended")
    skipped = metric_value(m, "pdr_retries_skipped_total", reason="budget")
    check(skipped >= n - 8, "skipped for the budget: %r" % skipped, r)
    check(metric_value(m, "pdr_retries_total") == retries, "pdr_retries_total %r, seen %d" %
          (metric_value(m, "pdr_retries_total"), retries), r)
    check(metric_value(m, "pdr_retries_active") == 0, "budget slots left held", r)
    check(r.stop() == 0, "pdrouter exit status", r)


def scenario_backoff():
    p1, p2, d = failing_pair()
    r = router([p1, p2], [d], config=conf("{ max: 2, initial_backoff_ms: 300, backoff_multiplier: 2, "
                                          "max_backoff_ms: 5000, jitter_factor: 0.1 }"))
    st, _, b = pdtest.request(r.port, "POST", "/generate", body=body(), timeout=15)
    check(st == 502 and json.loads(b)["error"]["code"] == 502, "answer %d %r" % (st, b), r)
    ts = sorted(stats(p1)["arrivals_us"] + stats(p2)["arrivals_us"])
    check(len(ts) == 3, "attempts %r" % ts, r)
    gaps = [(b_ - a) / 1000.0 for a, b_ in zip(ts, ts[1:])]
    print("back-off gaps between attempts: %.1f ms, %.1f ms" % tuple(gaps))
    check(gaps[0] >= 270 and gaps[1] >= 540, "back-off gaps %r ms (want >= 270, >= 540)" % gaps, r)
    check(gaps[0] < 2000 and gaps[1] < 2000, "back-off gaps %r ms: far past the configured series" % gaps, r)
    check(r.stop() == 0, "pdrouter exit status", r)


def scenario_backoff_deadline():
    p1, p2, d = failing_pair()
    r = router([p1, p2], [d], config=conf("{ max: 1, initial_backoff_ms: 20000, max_backoff_ms: 20000 }") +
               "timeouts: { first_byte_ms: 800 }\n")
    t0 = time.monotonic()
    st, _, b = pdtest.request(r.port, "POST", "/generate", body=body(), timeout=15)
    dt = time.monotonic() - t0
    check(st == 502, "answer %d %r" % (st, b), r)
    ts = sorted(stats(p1)["arrivals_us"] + stats(p2)["arrivals_us"])
    check(len(ts) == 2, "attempts %r" % ts, r)
    gap = (ts[1] - ts[0]) / 1000.0
    print("back-off cut to the first-byte deadline: %.1f ms between attempts, answered in %.2f s" % (gap, dt))
    check(gap < 800 + 500 and dt < 5, "the 20 s back-off was not cut short: gap %.1f ms, answer after %.2f s"
          % (gap, dt), r)
    check(r.stop() == 0, "pdrouter exit status", r)


def scenario_disconnect():
    p1, p2, d = failing_pair()
    r = router([p1, p2], [d], config=conf("{ max: 2, initial_backoff_ms: 3000, jitter_factor: 0 }"))
    data = json.dumps(body()).encode()
    s = socket.create_connection(("127.0.0.1", r.port))
    s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
              % len(data) + data)
    pdtest.poll_until(lambda: stats(p1)["requests"] + stats(p2)["requests"] >= 1, 10, "the first attempt")
    pdtest.poll_until(lambda: metric_value(metrics(r), "pdr_retries_active") == 1, 10, "the back-off")
    s.close()
    m = metrics_when(r, lambda t: metric_value(t, "pdr_inflight_requests") == 0 and
                     metric_value(t, "pdr_retries_active") == 0, "the request cleaned up")
    check((metric_value(m, "pdr_client_aborts_total") or 0) >= 1, "the abort counted", r)
    check(stats(p1)["requests"] + stats(p2)["requests"] == 1, "an attempt ran after the client left", r)
    check(r.stop() == 0, "pdrouter exit status (leaks fail it under ASan)", r)


def scenario_decode_refused():
    p = sim("prefill", "--prefill-answer-lag-ms", "3000")  # the prefill leg stays out
    dead, d = sim("decode"), sim("decode")
    alog = tempfile.mktemp(prefix="pdr-retry-access-", suffix=".log")
    r = router([p], [dead, d], config=conf("{ max: 2, initial_backoff_ms: 0 }") +
               "log: { access_log: %s }\noutlier: { enabled: false }\n" % alog)
    dead.stop(signal.SIGKILL)  # healthy in the router's eyes (health every 60 s), its port refusing now
    for _ in range(4):  # round robin: a first attempt meets the dead decode (then it is ejected)
        st, _, b = pdtest.request(r.port, "POST", "/generate", body=body(), timeout=15)
        check(st == 200, "status %d %r" % (st, b[:200]), r)
    lines = pdtest.access_lines(alog, 4)
    refused = [l for l in lines if l["attempts"] > 1 and "refused" in (l["retry_error"] or "")]
    check(len(refused) >= 1, "requests that met the dead decode: %r" % lines, r)
    # Without the wait, the retry goes at once; with it, each would take 200 ms and more.
    fastest = min(l["total_ms"] for l in refused)
    check(fastest < 150, "the fastest retried request took %.1f ms: %r" % (fastest, refused), r)


def scenario_after_first_byte():
    # One pair: a retry would meet the same workers again, and they count every request. Tokens 100 ms
    # apart: the first reaches the client before the reset (bytes still in the router would be retried).
    p, d = sim("prefill"), sim("decode", "--reset-after-tokens", "2", "--decode-us-per-token", "100000")
    # Stream migration off: what is checked here is that retries.max never re-runs a started answer.
    r = router([p], [d], config=conf("{ max: 2, initial_backoff_ms: 1 }") + "migration: { enabled: false }\n")
    try:
        st, _, b = pdtest.request(r.port, "POST", "/generate", body=body(stream=True), timeout=15)
        check(st == 200 and b"[DONE]" not in b, "a stream that should break: %r %r" % (st, b), r)
    except (OSError, http.client.HTTPException):
        pass  # the broken stream may surface as a protocol error
    m = metrics_when(r, lambda t: metric_value(t, "pdr_inflight_requests") == 0, "the request ended")
    check(stats(d)["requests"] == 1 and stats(p)["requests"] == 1, "requests %d %d: a retry after the first byte"
          % (stats(p)["requests"], stats(d)["requests"]), r)
    check((metric_value(m, "pdr_retries_total") or 0) == 0, "a retry counted", r)
    check(r.stop() == 0, "pdrouter exit status", r)


if __name__ == "__main__":
    pdtest.run_scenario(globals())
