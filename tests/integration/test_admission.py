#!/usr/bin/env python3
"""Admission: the in-flight limits (router, pool, worker), the bounded FIFO queue with its timeout, the
token-bucket rate limit, and their answers (429 / 503 + Retry-After in the OpenAI error shape). Real
pdrouter and pdsim processes on loopback; a slow decode (--decode-us-per-token) holds requests in flight.

Usage: test_admission.py SCENARIO   (one of the functions named scenario_*; ctest runs each separately)
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check, request  # noqa: E402
from test_router import metric_value, metrics, router, sim, stats  # noqa: E402

SLOW_US = "100000"  # decode µs per token: a request of N tokens is held N × 0.1 s


def body(text, tokens):
    return {"text": text, "sampling_params": {"max_new_tokens": tokens}}


def send_async(r, results, key, b):
    """POST /generate on its own thread; results[key] = (status, headers, body) when it ends."""
    def run():
        try:
            results[key] = request(r.port, "POST", "/generate", b, timeout=30)
        except OSError as e:
            results[key] = (0, {}, str(e).encode())
    t = threading.Thread(target=run)
    t.start()
    return t


def depth(r):
    return metric_value(metrics(r), "pdr_queue_depth")


def wait_depth(r, n, timeout=10):
    pdtest.poll_until(lambda: depth(r) == n, timeout, "queue depth %d" % n)


def rejected(r, reason):
    return metric_value(metrics(r), "pdr_admission_rejected_total", reason=reason)


def error_of(data):
    e = json.loads(data)["error"]
    assert set(e) >= {"message", "type", "code"}, e
    return e


def alog_path():
    fd, path = tempfile.mkstemp(prefix="pdtest-alog-", suffix=".log")
    os.close(fd)
    return path


def access(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.startswith("{")]


def scenario_inflight_cap():
    """limits.max_inflight 2 with a queue: 6 concurrent requests all succeed, the decode never sees more
    than 2 at once, and 4 of them waited (pdr_queue_wait_seconds, the access log's queue_ms)."""
    p, d = sim("prefill"), sim("decode", "--decode-us-per-token", SLOW_US)
    alog = alog_path()
    r = router([p], [d], config="threads: 1\nlog: { access_log: %s }\nlimits: { max_inflight: 2, queue: 10 }" % alog)
    res, ts = {}, []
    for i in range(6):
        ts.append(send_async(r, res, i, body("cap %d" % i, 4)))
    for t in ts:
        t.join(30)
    sts = sorted(res[i][0] for i in range(6))
    check(sts == [200] * 6, "statuses %r" % sts, r, d)
    peak = stats(d)["inflight_max"]
    check(peak == 2, "the decode saw %d requests at once, limits.max_inflight is 2" % peak, r, d)
    m = metrics(r)
    waited = metric_value(m, "pdr_queue_wait_seconds_count")
    check(waited == 4, "pdr_queue_wait_seconds_count %r, expected 4" % waited, r)
    check(metric_value(m, "pdr_queue_depth") == 0, "queue not empty at the end", r)
    lines = pdtest.poll_until(lambda: (lambda ls: ls if len(ls) >= 6 else None)(access(alog)), 5, "6 lines")
    q = sorted(l["queue_ms"] for l in lines)
    check(q[:2] == [0, 0] and all(x >= 100 for x in q[2:]), "queue_ms of the requests: %r" % q, r)


def scenario_fifo_order():
    """One slot: queued requests are dispatched in arrival order."""
    p, d = sim("prefill"), sim("decode", "--decode-us-per-token", SLOW_US)
    r = router([p], [d], config="threads: 1\nlimits: { max_inflight: 1, queue: 10 }")
    res, ts = {}, []
    ts.append(send_async(r, res, 0, body("fifo 0", 5)))
    pdtest.poll_until(lambda: stats(d)["inflight"] == 1, 10, "the first request to run")
    for i in range(1, 5):
        ts.append(send_async(r, res, i, body("fifo %d" % i, 1)))
        wait_depth(r, i)  # each is queued before the next is sent: the arrival order is known
    for t in ts:
        t.join(30)
    check(all(res[i][0] == 200 for i in range(5)), "statuses %r" % [res[i][0] for i in range(5)], r)
    order = [l["body"]["text"] for l in stats(d)["last"] if "body" in l]
    check(order[-5:] == ["fifo %d" % i for i in range(5)], "decode order %r" % order, r, d)


def scenario_queue_full():
    """One slot, a queue of 1: the third request is answered 429 at once, OpenAI's shape, Retry-After."""
    p, d = sim("prefill"), sim("decode", "--decode-us-per-token", SLOW_US)
    alog = alog_path()
    r = router([p], [d], config="threads: 1\nlog: { access_log: %s }\nlimits: { max_inflight: 1, queue: 1 }" % alog)
    res, ts = {}, []
    ts.append(send_async(r, res, 0, body("full 0", 40)))
    pdtest.poll_until(lambda: stats(d)["inflight"] == 1, 10, "the first request to run")
    ts.append(send_async(r, res, 1, body("full 1", 1)))
    wait_depth(r, 1)
    t0 = time.monotonic()
    st, h, data = request(r.port, "POST", "/generate", body("full 2", 1))
    took = time.monotonic() - t0
    check(st == 429, "status %d %r" % (st, data[:200]), r)
    # A queued request would wait for the first one (40 tokens, 4 s): half of that is "at once".
    check(took < 2.0, "the 429 took %.2fs" % took, r)
    e = error_of(data)
    check(e["type"] == "rate_limit_exceeded" and e["code"] == 429 and "limits.queue" in e["message"], "%r" % e, r)
    check(h.get("retry-after") == "1", "Retry-After %r" % h.get("retry-after"), r)
    check(h.get("content-type", "").startswith("application/json"), "content type %r" % h.get("content-type"), r)
    for t in ts:
        t.join(30)
    check(res[0][0] == 200 and res[1][0] == 200, "the others: %r" % [res[0][0], res[1][0]], r)
    check(rejected(r, "queue_full") == 1, "pdr_admission_rejected_total{queue_full}", r)
    check(stats(d)["requests"] == 2, "the refused request reached the decode", r, d)
    lines = pdtest.poll_until(lambda: (lambda ls: ls if len(ls) >= 3 else None)(access(alog)), 5, "3 lines")
    check(sorted(str(l["error"]) for l in lines) == ["None", "None", "queue_full"], "causes %r" % lines, r)


def scenario_queue_timeout():
    """A request that finds no slot within limits.queue_timeout_ms is answered 503 with Retry-After and
    never reaches a worker."""
    p, d = sim("prefill"), sim("decode", "--decode-us-per-token", SLOW_US)
    alog = alog_path()
    r = router([p], [d], config="threads: 1\nlog: { access_log: %s }\n"
               "limits: { max_inflight: 1, queue: 5, queue_timeout_ms: 400 }" % alog)
    res = {}
    t = send_async(r, res, 0, body("timeout 0", 60))
    pdtest.poll_until(lambda: stats(d)["inflight"] == 1, 10, "the first request to run")
    t0 = time.monotonic()
    st, h, data = request(r.port, "POST", "/generate", body("timeout 1", 1))
    took = time.monotonic() - t0
    check(st == 503, "status %d %r" % (st, data[:200]), r)
    # The slot frees after 6 s (60 tokens): the upper bound is far below it.
    check(0.35 <= took < 3.0, "the 503 came after %.2fs (queue_timeout_ms 400)" % took, r)
    e = error_of(data)
    check(e["type"] == "service_unavailable" and e["code"] == 503 and "queue_timeout_ms" in e["message"], "%r" % e, r)
    check(h.get("retry-after") == "1", "Retry-After %r" % h.get("retry-after"), r)
    check(rejected(r, "queue_timeout") == 1, "pdr_admission_rejected_total{queue_timeout}", r)
    check(depth(r) == 0, "queue depth after the timeout", r)
    t.join(30)
    check(res[0][0] == 200, "the first request: %r" % (res[0][:2],), r)
    check(stats(d)["requests"] == 1, "the timed-out request reached the decode", r, d)
    line = pdtest.last_access_line(alog, "/generate")
    lines = access(alog)
    bad = [l for l in lines if l["error"] == "queue_timeout"]
    check(len(bad) == 1 and bad[0]["status"] == 503 and bad[0]["queue_ms"] >= 350, "access log %r" % line, r)


def scenario_client_disconnect():
    """A client that closes its connection while queued leaves the queue at once; its request is never
    sent to a worker, even after the slot frees."""
    p, d = sim("prefill"), sim("decode", "--decode-us-per-token", SLOW_US)
    r = router([p], [d], config="threads: 1\nlimits: { max_inflight: 1, queue: 5 }")
    res = {}
    t = send_async(r, res, 0, body("stay", 60))
    pdtest.poll_until(lambda: stats(d)["inflight"] == 1, 10, "the first request to run")
    raw = json.dumps(body("leave", 1)).encode()
    s = socket.create_connection(("127.0.0.1", r.port))
    s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
              % len(raw) + raw)
    wait_depth(r, 1)
    s.close()
    t0 = time.monotonic()
    wait_depth(r, 0, timeout=5)
    # Without noticing the close, the queue would keep it until the slot frees (60 tokens, 6 s).
    check(time.monotonic() - t0 < 3.0, "the queue let the closed client go only after %.2fs" % (time.monotonic() - t0), r)
    check(stats(d)["inflight"] == 1, "the first request should still run", r, d)
    t.join(30)
    check(res[0][0] == 200, "the first request: %r" % (res[0][:2],), r)
    # Another request after the slot freed: served; the closed one never was.
    check(request(r.port, "POST", "/generate", body("after", 1))[0] == 200, "a later request", r)
    texts = [l["body"]["text"] for l in stats(d)["last"] if "body" in l]
    check("leave" not in texts and stats(d)["requests"] == 2, "decode saw %r" % texts, r, d)
    check(depth(r) == 0, "queue depth", r)


def scenario_client_disconnect_h2():
    """The same over HTTP/2: a client that gives up (curl --max-time) while queued leaves the queue at once
    and its request never reaches a worker."""
    p, d = sim("prefill"), sim("decode", "--decode-us-per-token", SLOW_US)
    r = router([p], [d], config="threads: 1\nlimits: { max_inflight: 1, queue: 5 }")
    res = {}
    t = send_async(r, res, 0, body("stay", 60))
    pdtest.poll_until(lambda: stats(d)["inflight"] == 1, 10, "the first request to run")
    out = subprocess.run(["curl", "-sS", "--http2-prior-knowledge", "--max-time", "0.5", "-H",
                          "Content-Type: application/json", "--data-binary", json.dumps(body("leave", 1)),
                          "http://127.0.0.1:%d/generate" % r.port], capture_output=True, text=True, timeout=30)
    check(out.returncode == 28, "curl should time out while queued: rc %d %s" % (out.returncode, out.stderr), r)
    t0 = time.monotonic()
    wait_depth(r, 0, timeout=5)
    # Without the reset, the queue would keep it until the slot frees (60 tokens, 6 s).
    check(time.monotonic() - t0 < 3.0, "the queue let the HTTP/2 client go only after %.2fs" % (time.monotonic() - t0), r)
    check(stats(d)["inflight"] == 1, "the first request should still run", r, d)
    t.join(30)
    check(res[0][0] == 200, "the first request: %r" % (res[0][:2],), r)
    texts = [l["body"]["text"] for l in stats(d)["last"] if "body" in l]
    check("leave" not in texts and stats(d)["requests"] == 1, "decode saw %r" % texts, r, d)


def scenario_per_worker_cap():
    """limits.max_inflight_per_worker 1 with two decodes: four concurrent requests all succeed, no worker
    ever has two at once, and both decodes serve."""
    p = sim("prefill")
    d1, d2 = sim("decode", "--decode-us-per-token", SLOW_US), sim("decode", "--decode-us-per-token", SLOW_US)
    r = router([p], [d1, d2], config="threads: 1\nlimits: { max_inflight_per_worker: 1, queue: 10 }")
    res, ts = {}, []
    for i in range(4):
        ts.append(send_async(r, res, i, body("worker %d" % i, 3)))
    for t in ts:
        t.join(30)
    check(all(res[i][0] == 200 for i in range(4)), "statuses %r" % [res[i][0] for i in range(4)], r)
    for w in (p, d1, d2):
        st = stats(w)
        check(st["inflight_max"] == 1, "%s saw %d at once" % (st["role"], st["inflight_max"]), r, w)
    check(stats(d1)["requests"] >= 1 and stats(d2)["requests"] >= 1, "a decode was left idle", r)
    check(metric_value(metrics(r), "pdr_queue_wait_seconds_count") >= 2, "nothing waited", r)


def scenario_per_pool_cap():
    """limits.max_inflight_per_pool 1 and no queue: a second request to a busy pool gets 503 at once, a
    request to the other pool goes through."""
    pa, da = sim("prefill", "--model", "ma"), sim("decode", "--model", "ma", "--decode-us-per-token", SLOW_US)
    pb, db = sim("prefill", "--model", "mb"), sim("decode", "--model", "mb")
    pools = ["pools:"]
    for name, p, d in (("a", pa, da), ("b", pb, db)):
        pools += ["  - name: %s" % name, "    models: [m%s]" % name, "    workers:",
                  "      prefill: [{ url: http://127.0.0.1:%d, bootstrap_port: %d }]" % (p.port, p.ports["bport"]),
                  "      decode: [{ url: http://127.0.0.1:%d }]" % d.port]
    r = router([], [], config="threads: 1\nlimits: { max_inflight_per_pool: 1, queue: 0 }\n" + "\n".join(pools))
    res = {}
    t = send_async(r, res, 0, dict(body("pool a", 10), model="ma"))
    pdtest.poll_until(lambda: stats(da)["inflight"] == 1, 10, "pool a's request to run")
    st, h, data = request(r.port, "POST", "/generate", dict(body("pool a again", 1), model="ma"))
    check(st == 503 and "max_inflight_per_pool" in error_of(data)["message"], "pool a: %d %r" % (st, data), r)
    check(h.get("retry-after") == "1", "Retry-After %r" % h.get("retry-after"), r)
    st, _, data = request(r.port, "POST", "/generate", dict(body("pool b", 1), model="mb"))
    check(st == 200, "pool b: %d %r" % (st, data[:200]), r)
    t.join(30)
    check(res[0][0] == 200, "pool a's first request: %r" % (res[0][:2],), r)
    check(rejected(r, "max_inflight_per_pool") == 1, "pdr_admission_rejected_total{max_inflight_per_pool}", r)


def scenario_rate_limit():
    """limits.rate_limit_rps 2, burst 3, no queue: three requests go, the fourth is answered 429 with
    Retry-After; after the bucket refills one more goes."""
    p, d = sim("prefill"), sim("decode")
    r = router([p], [d], config="threads: 1\nlimits: { rate_limit_rps: 2, rate_limit_burst: 3, queue: 0 }")
    sts = [request(r.port, "POST", "/generate", body("rate %d" % i, 1))[0] for i in range(3)]
    check(sts == [200] * 3, "the burst: %r" % sts, r)
    st, h, data = request(r.port, "POST", "/generate", body("rate 3", 1))
    check(st == 429, "past the burst: %d %r" % (st, data[:200]), r)
    e = error_of(data)
    check(e["type"] == "rate_limit_exceeded" and "rate_limit_rps" in e["message"], "%r" % e, r)
    check(h.get("retry-after") == "1", "Retry-After %r" % h.get("retry-after"), r)
    check(rejected(r, "rate_limited") >= 1, "pdr_admission_rejected_total{rate_limited}", r)
    time.sleep(0.6)  # the bucket's refill is what is tested: one token per 0.5 s
    st, _, data = request(r.port, "POST", "/generate", body("rate 4", 1))
    check(st == 200, "after the refill: %d %r" % (st, data[:200]), r)


def scenario_rate_limit_queued():
    """With a queue, requests over the rate wait for tokens (as the sglang router's queue does) instead of
    being refused: 4 requests at 5/s with a burst of 1 all succeed and take at least 0.6 s."""
    p, d = sim("prefill"), sim("decode")
    r = router([p], [d], config="threads: 1\nlimits: { rate_limit_rps: 5, rate_limit_burst: 1, queue: 10 }")
    res, ts = {}, []
    t0 = time.monotonic()
    for i in range(4):
        ts.append(send_async(r, res, i, body("rq %d" % i, 1)))
    for t in ts:
        t.join(30)
    took = time.monotonic() - t0
    check(all(res[i][0] == 200 for i in range(4)), "statuses %r" % [res[i][0] for i in range(4)], r)
    check(took >= 0.55, "4 requests at 5/s (burst 1) took only %.2fs" % took, r)
    check(metric_value(metrics(r), "pdr_queue_wait_seconds_count") >= 3, "nobody waited for a token", r)


def scenario_threads_global_cap():
    """threads: 2: the limit is the router's, not each loop's: 8 concurrent requests over separate
    connections, the decode never sees more than 2 at once."""
    p, d = sim("prefill"), sim("decode", "--decode-us-per-token", SLOW_US)
    r = router([p], [d], config="threads: 2\nlimits: { max_inflight: 2, queue: 20 }")
    res, ts = {}, []
    for i in range(8):
        ts.append(send_async(r, res, i, body("mt %d" % i, 3)))
    for t in ts:
        t.join(30)
    check(all(res[i][0] == 200 for i in range(8)), "statuses %r" % [res[i][0] for i in range(8)], r)
    peak = stats(d)["inflight_max"]
    check(peak == 2, "the decode saw %d at once with threads: 2 and max_inflight 2" % peak, r, d)
    check(depth(r) == 0, "queue depth", r)


def scenario_sglang_flags():
    """The sglang router's flags: --max-concurrent-requests 1 --queue-size 1 --queue-timeout-secs 1."""
    p, d = sim("prefill"), sim("decode", "--decode-us-per-token", SLOW_US)
    r = router([p], [d], "--max-concurrent-requests", "1", "--queue-size", "1", "--queue-timeout-secs", "1",
               "--threads", "1")
    res = {}
    t = send_async(r, res, 0, body("flags 0", 25))
    pdtest.poll_until(lambda: stats(d)["inflight"] == 1, 10, "the first request to run")
    t1 = send_async(r, res, 1, body("flags 1", 1))
    wait_depth(r, 1)
    st, _, _ = request(r.port, "POST", "/generate", body("flags 2", 1))
    check(st == 429, "queue of 1 full: %d" % st, r)
    t1.join(10)
    check(res[1][0] == 503, "--queue-timeout-secs 1: %r" % (res[1][:2],), r)
    t.join(30)
    check(res[0][0] == 200, "the first: %r" % (res[0][:2],), r)


if __name__ == "__main__":
    pdtest.run_scenario(globals())
