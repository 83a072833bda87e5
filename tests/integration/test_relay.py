#!/usr/bin/env python3
"""pd.relay: the decode's answer reaches the client from its first body byte, without waiting for the
prefill's HTTP answer (first_byte, the default), or only after it (after_prefill). pdsim's prefill answers
--prefill-answer-lag-ms after its KV has left, as a real prefill answers up to a forward pass later.

    python3 test_relay.py SCENARIO     (PDR_BUILD=<build dir>)
"""

import http.client
import json
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check, sse_events  # noqa: E402
from test_router import metric_value, metrics, metrics_when, router, sim, stats  # noqa: E402

LAG_MS = 1500


def gen_body(tokens=4, stream=True):
    return {"text": "The capital of France is", "stream": stream,
            "sampling_params": {"max_new_tokens": tokens, "ignore_eos": True}}


def timed_stream(port, body, timeout=20.0):
    """POST /generate; returns (status, seconds to the first data event, seconds to the end, events)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        t0 = time.monotonic()
        conn.request("POST", "/generate", body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        first, data = None, b""
        while True:
            b = resp.read1(65536)
            if not b:
                break
            if first is None and b"data:" in data + b:
                first = time.monotonic() - t0
            data += b
        return resp.status, first, time.monotonic() - t0, sse_events(data) if resp.status == 200 else data
    finally:
        conn.close()


def texts(events):
    """The streamed texts (the ids differ: the room names a disaggregated request)."""
    return [e["text"] for e in events if isinstance(e, dict)]


def relay_config(mode):
    return "pd: { relay: %s }\nretries: { max: 1 }" % mode


def scenario_first_byte():
    """first_byte: the first token arrives long before the prefill's answer; the stream is whole and equal
    to the monolithic one; the prefill leg is still read to its end (the prefill completes, is not
    cancelled) after the client's answer is over."""
    p = sim("prefill", "--prefill-answer-lag-ms", str(LAG_MS))
    d = sim("decode")
    both = sim("both")
    r = router([p], [d], config=relay_config("first_byte"))
    try:
        st, first, total, ev = timed_stream(r.port, gen_body())
        check(st == 200 and ev[-1] == "[DONE]", "status %d %r" % (st, ev), r)
        check(first < LAG_MS / 1000.0 / 2, "first token after %.3f s (prefill lag %d ms)" % (first, LAG_MS), r)
        check(total < LAG_MS / 1000.0, "the client's stream waited for the prefill: %.3f s" % total, r)
        mono = pdtest.request(both.port, "POST", "/generate", body=gen_body())[2]
        check(texts(ev) == texts(sse_events(mono)) and len(texts(ev)) == 4,
              "disaggregated stream differs from the monolithic one", r)
        # The prefill is still answering: its leg lingers until it has (not cancelled).
        s = pdtest.poll_until(lambda: (lambda x: x if x["completed"] == 1 else None)(stats(p)), 10,
                              "the prefill's answer")
        check(s["cancelled"] == 0 and s["errors"] == 0, "prefill stats %r" % s, r)
        m = metrics_when(r, lambda t: 'pdr_requests_total{route="generate",code="200"} 1' in t, "counted")
        check(metric_value(m, "pdr_retries_total") == 0, "retried", r)
        check(sum(metric_value(m, "pdr_prefill_late_failures_total", cause=c) for c in
                  ("connect", "timeout", "reset", "status_5xx", "first_byte_deadline", "kv_transfer_deadline", "other")) == 0,
              "late failures counted", r)
    finally:
        pdtest.stop_all()


def scenario_after_prefill():
    """after_prefill: the first token waits for the prefill's answer (the old behaviour, kept as an
    option)."""
    p = sim("prefill", "--prefill-answer-lag-ms", str(LAG_MS))
    d = sim("decode")
    r = router([p], [d], config=relay_config("after_prefill"))
    try:
        st, first, total, ev = timed_stream(r.port, gen_body())
        check(st == 200 and ev[-1] == "[DONE]", "status %d %r" % (st, ev), r)
        check(first >= LAG_MS / 1000.0 * 0.9, "first token after %.3f s, before the prefill answered" % first, r)
    finally:
        pdtest.stop_all()


def scenario_late_prefill_failure():
    """A prefill that moves its KV and then answers 500: before, the request was retried or failed; with
    first_byte the decode's stream goes on whole, the failure is counted by cause and nothing is retried.
    The same prefill failure before the decode's first byte is retried on a new pair."""
    p = sim("prefill", "--prefill-answer-lag-ms", "200", "--fail-after-kv", "500")
    d = sim("decode", "--decode-us-per-token", "50000")
    both = sim("both")
    r = router([p], [d], config=relay_config("first_byte"))
    try:
        st, first, total, ev = timed_stream(r.port, gen_body(tokens=12))
        check(st == 200 and ev[-1] == "[DONE]" and len(ev) == 13, "status %d, %d events" % (st, len(ev)), r)
        mono = pdtest.request(both.port, "POST", "/generate", body=gen_body(tokens=12))[2]
        check(texts(ev) == texts(sse_events(mono)) and len(texts(ev)) == 12,
              "stream differs from the monolithic one", r)
        m = pdtest.poll_until(lambda: (lambda t: t if metric_value(
            t, "pdr_prefill_late_failures_total", cause="status_5xx") == 1 else None)(metrics(r)), 10,
            "the late prefill failure counted")
        check(metric_value(m, "pdr_retries_total") == 0 and stats(d)["requests"] == 1, "retried", r)
        # The same failure before the decode's first byte (the prefill fails right after its KV, the decode's
        # first token comes 50 ms later): the attempt is retried on a new pair (none is left here: 502).
        p2 = sim("prefill", "--fail-after-kv", "500")
        r2 = router([p2], [d], config=relay_config("first_byte"))
        st = pdtest.request(r2.port, "POST", "/generate", body=gen_body(tokens=12), timeout=20)[0]
        m = metrics(r2)
        check(st == 502 and metric_value(m, "pdr_retries_total") == 1 and
              metric_value(m, "pdr_prefill_late_failures_total", cause="status_5xx") == 0,
              "status %d, retries %s" % (st, metric_value(m, "pdr_retries_total")), r2)
    finally:
        pdtest.stop_all()


def scenario_decode_failure_cancels_prefill():
    """A decode that breaks after its first tokens cancels the prefill leg at once (the prefill sees the
    abort long before its answer was due); a client that goes away cancels both."""
    p = sim("prefill", "--prefill-answer-lag-ms", "20000")
    d = sim("decode", "--decode-us-per-token", "20000", "--reset-after-tokens", "3")
    # Without stream migration (its own test moves such a stream): the error event ends the stream.
    r = router([p], [d], config=relay_config("first_byte") + "\nmigration: { enabled: false }")
    try:
        t0 = time.monotonic()
        st, first, total, ev = timed_stream(r.port, gen_body(tokens=50))
        check(st == 200 and ev and isinstance(ev[-1], dict) and "error" in ev[-1], "stream %r" % (ev,), r)
        pdtest.poll_until(lambda: stats(p)["cancelled"] == 1, 5, "the prefill's leg cancelled")
        check(time.monotonic() - t0 < 10, "the prefill leg was not cancelled at once", r)
        # The client leaves after the first event: both legs cancelled.
        pdtest.request(d.port, "POST", "/pdsim/fault", body={"reset_after_tokens": 0})
        s = socket.create_connection(("127.0.0.1", r.port))
        b = json.dumps(gen_body(tokens=1000)).encode()
        s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                  % len(b) + b)
        got = b""
        while b"data:" not in got:
            got += s.recv(65536)
        s.close()
        pdtest.poll_until(lambda: stats(p)["cancelled"] == 2 and stats(d)["cancelled"] >= 1, 5,
                          "both legs cancelled after the client left")
    finally:
        pdtest.stop_all()


def scenario_linger_deadline():
    """A prefill that never answers after its KV (lag past timeouts.kv_transfer_ms): the client's answer is
    whole and on time; the lingering leg is cancelled at the KV deadline and counted as kv_deadline."""
    p = sim("prefill", "--prefill-answer-lag-ms", "600000")
    d = sim("decode")
    r = router([p], [d], config=relay_config("first_byte") + "\ntimeouts: { kv_transfer_ms: 1500 }")
    try:
        st, first, total, ev = timed_stream(r.port, gen_body())
        check(st == 200 and ev[-1] == "[DONE]" and total < 1.0, "status %d after %.3f s" % (st, total), r)
        pdtest.poll_until(lambda: metric_value(metrics(r), "pdr_prefill_late_failures_total",
                                               cause="kv_transfer_deadline") == 1, 10, "the KV deadline counted")
        pdtest.poll_until(lambda: stats(p)["cancelled"] == 1, 5, "the lingering prefill leg cancelled")
    finally:
        pdtest.stop_all()


if __name__ == "__main__":
    pdtest.run_scenario(globals())
