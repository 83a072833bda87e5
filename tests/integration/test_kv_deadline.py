#!/usr/bin/env python3
"""The router's own KV-transfer deadline (docs/operations.md, "When KV transfers fail"): real pdrouter and
pdsim processes on loopback. pdsim's --kv-timeout-ms (the engine's own deadline) stays at its 30 s
default in every scenario, so an answer that comes in seconds comes from the router's deadline.

    python3 test_kv_deadline.py SCENARIO     (PDR_BUILD=<build dir>)

Scenarios:
  retry_other_pair   two prefills, one stalls its KV: every request answers 200 within seconds, the one
                     that met the stalled prefill retried on the other pair; the cause is counted
                     (pdr_kv_transfer_failures_total{cause="deadline"}), the access log names it, the link
                     is marked suspect (metrics, /admin/v1/links, /admin/v1/status) and cleared by the
                     next KV transfer that completes on it
  one_link           two prefills, three decodes, one decode never pulls from one prefill (a broken path
                     between them): only that link is marked suspect, every request answers 200, and
                     neither of its workers is ejected (both serve their other links)
  no_pair_left       one pair, the prefill stalls: a 504 in the OpenAI error shape at the router's
                     deadline, both legs cancelled (the prefill and the decode see the abort)
  stream_error_event a decode whose stream begins before its first token, a prefill that stalls: the
                     client has the stream's head already, so the stream ends with an error event
                     (code 504) and its normal end; both legs cancelled
  scaled_deadline    kv_transfer_ms_per_1k_tokens: a long prompt gets a longer deadline (the access log's
                     kv_deadline_ms and kv_tokens, not timing); a pool's own value wins
  vllm_decode_stall  protocol vllm: the deadline runs from the decode leg (the prefill has answered with
                     its kv_transfer_params); a decode whose pull stalls is cut at the router's deadline,
                     not at first_byte_ms
  cancel_stages      a stall at each stage (before any decode header, after the stream's head), streamed
                     and not, then a clean shutdown: run under ASan, no leak and exit status 0
"""

import http.client
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check  # noqa: E402
from test_router import metric_value, metrics, metrics_when, router, sim, stats  # noqa: E402

KV_MS = 800


def body(stream=False, text="The capital of France is", tokens=4):
    return {"text": text, "stream": stream, "sampling_params": {"max_new_tokens": tokens, "ignore_eos": True}}


def _no_duplicate_keys(pairs):
    keys = [k for k, _ in pairs]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    assert not dup, "access-log line with the key(s) %s more than once: %r" % (dup, pairs)
    return dict(pairs)


def access_lines(path):
    """The access log's JSON lines; AssertionError on a line that names a key twice (a JSON reader
    would silently keep only the last)."""
    try:
        with open(path) as f:
            return [json.loads(l, object_pairs_hook=_no_duplicate_keys) for l in f
                    if l.strip().startswith("{") and '"request_id"' in l]
    except OSError:
        return []


def wait_lines(path, n, what="access log lines"):
    return pdtest.poll_until(lambda: (lambda ls: ls if len(ls) >= n else None)(access_lines(path)), 10, what)


def conf(alog, extra=""):
    return ("log: { access_log: %s }\n"
            "timeouts: { kv_transfer_ms: %d, first_byte_ms: 20000 }\n"
            "retries: { max: 2 }\n"
            "health: { interval_ms: 200, timeout_ms: 500, rise: 1, fall: 3 }\n%s" % (alog, KV_MS, extra))


def admin_json(r, path):
    st, _, b = pdtest.request(r.ports["admin"], "GET", path)
    check(st == 200, "%s: %d %r" % (path, st, b), r)
    return json.loads(b)


def url(p):
    return "http://127.0.0.1:%d" % p.port


def new_alog():
    fd, path = tempfile.mkstemp(prefix="pdrouter-access-", suffix=".log")
    os.close(fd)
    return path


def scenario_retry_other_pair():
    stalled = sim("prefill", "--stall-kv")
    good = sim("prefill")
    d = sim("decode")
    alog = new_alog()
    r = router([stalled, good], [d], config=conf(alog))
    try:
        # Round robin: within a few requests one meets the stalled prefill first.
        met = None
        for i in range(4):
            t0 = time.monotonic()
            st, _, b = pdtest.request(r.port, "POST", "/generate", body=body(), timeout=15)
            dt = time.monotonic() - t0
            check(st == 200, "request %d: %d %r" % (i, st, b), r)
            check(dt < 8.0, "request %d took %.1f s: the router waited for the engine's KV timeout" % (i, dt), r)
            line = wait_lines(alog, i + 1)[-1]
            if line["kv_cause"] == "deadline":
                met = line
                break
        check(met is not None, "no request met the stalled prefill", r)
        check(met["attempts"] == 2 and met["prefill"] == url(good) and met["status"] == 200 and
              met["kv_deadline_ms"] == KV_MS, "retried line %r" % met, r)
        m = metrics_when(r, lambda t: (metric_value(t, "pdr_kv_transfer_failures_total", cause="deadline",
                                                    backend="unknown") or 0) >= 1, "the KV failure counted")
        check(metric_value(m, "pdr_link_suspect", prefill=url(stalled), decode=url(d)) == 1, "link not suspect", r)
        check(metric_value(m, "pdr_link_suspect", prefill=url(good), decode=url(d)) is None,
              "a link that never failed has a series", r)
        check(metric_value(m, "pdr_links_suspect") == 1, "pdr_links_suspect", r)
        check(metric_value(m, "pdr_retries_total") >= 1, "no retry counted", r)
        links = admin_json(r, "/admin/v1/links")
        check(links["suspect"] == 1 and links["links"][0]["prefill"] == url(stalled) and
              links["links"][0]["last_cause"] == "deadline" and links["links"][0]["consecutive_failures"] >= 1,
              "admin links %r" % links, r)
        check(admin_json(r, "/admin/v1/status")["suspect_links"] == 1, "status suspect_links", r)
        # Both legs of the failed attempt were cancelled: the stalled prefill saw the abort.
        pdtest.poll_until(lambda: stats(stalled)["cancelled"] >= 1 and stats(stalled)["inflight"] == 0, 10,
                          "the stalled prefill's leg cancelled")

        # The prefill recovers: the next KV transfer that completes on the link clears the mark.
        pdtest.request_json(stalled.port, "POST", "/pdsim/fault", {"stall_kv": False})
        n0 = len(access_lines(alog))

        def cleared():
            st, _, b = pdtest.request(r.port, "POST", "/generate", body=body(), timeout=15)
            check(st == 200, "after recovery: %d %r" % (st, b), r)
            return any(l["prefill"] == url(stalled) and l["kv_cause"] is None for l in access_lines(alog)[n0:])

        pdtest.poll_until(cleared, 20, "a request completed on the recovered prefill")
        m = metrics(r)
        check(metric_value(m, "pdr_link_suspect", prefill=url(stalled), decode=url(d)) == 0, "link still suspect", r)
        check(metric_value(m, "pdr_links_suspect") == 0, "pdr_links_suspect after recovery", r)
        links = admin_json(r, "/admin/v1/links")
        check(links["suspect"] == 0 and links["links"][0]["successes_total"] >= 1, "links %r" % links, r)
        check(r.stop() == 0, "pdrouter exit status", r)
    finally:
        os.unlink(alog)


def scenario_one_link():
    p1, p2 = sim("prefill"), sim("prefill")
    d1, d2, d3 = sim("decode"), sim("decode"), sim("decode")
    pdtest.request_json(d1.port, "POST", "/pdsim/fault", {"stall_kv_from_port": p1.ports["bport"]})
    alog = new_alog()
    # Round robin over 2 prefills and 3 decodes: the pairs go round every combination.
    r = router([p1, p2], [d1, d2, d3], config=conf(alog, "policy: { prefill: round_robin, decode: round_robin }\n"))
    try:
        def pairs():
            return {(l["prefill"], l["decode"]) for l in access_lines(alog) if l["kv_cause"] is None}

        for i in range(24):
            st, _, b = pdtest.request(r.port, "POST", "/generate", body=body(), timeout=15)
            check(st == 200, "request %d: %d %r" % (i, st, b), r)
            wait_lines(alog, i + 1)
            got = pairs()
            if (url(p1), url(d2)) in got and (url(p2), url(d1)) in got and \
                    any(l["kv_cause"] == "deadline" for l in access_lines(alog)):
                break
        got = pairs()
        check((url(p1), url(d2)) in got and (url(p2), url(d1)) in got, "links used %r" % got, r)
        check((url(p1), url(d1)) not in got, "the stalled link completed a transfer", r)
        m = metrics(r)
        check(metric_value(m, "pdr_link_suspect", prefill=url(p1), decode=url(d1)) == 1, "the stalled link", r)
        for a, b_ in ((p1, d2), (p1, d3), (p2, d1), (p2, d2), (p2, d3)):
            check(metric_value(m, "pdr_link_suspect", prefill=url(a), decode=url(b_)) is None,
                  "link %s -> %s has a series" % (url(a), url(b_)), r)
        for w, role in ((p1, "prefill"), (d1, "decode")):
            check(metric_value(m, "pdr_worker_healthy", role=role, url=url(w)) == 1, "%s ejected" % url(w), r)
        check(r.stop() == 0, "pdrouter exit status", r)
    finally:
        os.unlink(alog)


def scenario_no_pair_left():
    p = sim("prefill", "--stall-kv")
    d = sim("decode")
    alog = new_alog()
    r = router([p], [d], config=conf(alog, "").replace("retries: { max: 2 }", "retries: { max: 1 }"))
    try:
        t0 = time.monotonic()
        st, h, b = pdtest.request(r.port, "POST", "/generate", body=body(), timeout=15)
        dt = time.monotonic() - t0
        err = json.loads(b).get("error", {})
        check(st == 504 and err.get("type") == "timeout_error" and err.get("code") == 504 and
              "kv_transfer_ms" in err.get("message", "") and "%d ms" % KV_MS in err["message"],
              "answer %d %r" % (st, b), r)
        check(dt < 8.0, "answered after %.1f s" % dt, r)
        line = wait_lines(alog, 1)[-1]
        check(line["status"] == 504 and line["attempts"] == 2 and line["kv_cause"] == "deadline", repr(line), r)
        m = metrics(r)
        check(metric_value(m, "pdr_kv_transfer_failures_total", cause="deadline", backend="unknown") == 2,
              "two attempts, two KV failures", r)
        # Both legs of both attempts cancelled: nothing left running on either worker.
        pdtest.poll_until(lambda: stats(p)["cancelled"] == 2 and stats(d)["cancelled"] == 2 and
                          stats(p)["inflight"] == 0 and stats(d)["inflight"] == 0, 10, "both legs cancelled")
        check(r.stop() == 0, "pdrouter exit status", r)
    finally:
        os.unlink(alog)


def read_stream(port, b, timeout=15.0):
    """POST /generate streaming; returns (status, content type, raw body, seconds)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        t0 = time.monotonic()
        conn.request("POST", "/generate", body=json.dumps(b), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, resp.getheader("content-type"), data, time.monotonic() - t0
    finally:
        conn.close()


def scenario_stream_error_event():
    p = sim("prefill", "--stall-kv")
    d = sim("decode", "--stream-head-before-kv")
    alog = new_alog()
    # Without stream migration (which would move the stream to a new pair): the error event ends it.
    r = router([p], [d], config=conf(alog, "migration: { enabled: false }\n"))
    try:
        st, ct, data, dt = read_stream(r.port, body(stream=True))
        check(st == 200 and ct.startswith("text/event-stream"), "status %d %s" % (st, ct), r)
        check(dt < 8.0, "the stream ended after %.1f s" % dt, r)
        text = data.decode()
        check(text.startswith(": pdsim: waiting for the KV\n\n"), "the stream's head %r" % text, r)
        events = [e for e in text.split("\n\n") if e.startswith("data:")]
        check(len(events) == 1, "events %r" % events, r)
        err = json.loads(events[0][5:])["error"]
        check(err["code"] == 504 and err["type"] == "timeout_error" and "kv_transfer_ms" in err["message"],
              "error event %r" % err, r)
        line = wait_lines(alog, 1)[-1]
        check(line["status"] == 200 and line["attempts"] == 1 and line["kv_cause"] == "deadline" and
              line["error"] == "kv_transfer_deadline", repr(line), r)
        m = metrics(r)
        check(metric_value(m, "pdr_kv_transfer_failures_total", cause="deadline", backend="unknown") == 1,
              "counted", r)
        check(metric_value(m, "pdr_retries_total") == 0, "a started answer was retried", r)
        pdtest.poll_until(lambda: stats(p)["cancelled"] == 1 and stats(d)["cancelled"] == 1 and
                          stats(p)["inflight"] == 0 and stats(d)["inflight"] == 0, 10, "both legs cancelled")
        check(r.stop() == 0, "pdrouter exit status", r)
    finally:
        os.unlink(alog)


def scenario_scaled_deadline():
    p = sim("prefill")
    d = sim("decode")
    alog = new_alog()
    r = router([p], [d], config=conf(alog).replace(
        "kv_transfer_ms: %d," % KV_MS, "kv_transfer_ms: 1000, kv_transfer_ms_per_1k_tokens: 2000,"))
    try:
        st, _, b = pdtest.request(r.port, "POST", "/generate", body=body(text="hello"))
        check(st == 200, "short: %d %r" % (st, b), r)
        long_ids = {"input_ids": list(range(1, 4097)), "sampling_params": {"max_new_tokens": 2}}
        st, _, b = pdtest.request(r.port, "POST", "/generate", body=long_ids)
        check(st == 200, "long: %d %r" % (st, b), r)
        chat = {"model": "pdsim", "messages": [{"role": "user", "content": "x" * 8000}], "max_tokens": 2}
        st, _, b = pdtest.request(r.port, "POST", "/v1/chat/completions", body=chat)
        check(st == 200, "chat: %d %r" % (st, b), r)
        # Two loops write their own lines: found by what they are, not by their order.
        lines = wait_lines(alog, 3)
        est = [l for l in lines if l["path"] == "/v1/chat/completions"][0]
        long_ = [l for l in lines if l["path"] == "/generate" and l["kv_tokens_from"] == "ids"][0]
        short = [l for l in lines if l["path"] == "/generate" and l["kv_tokens_from"] != "ids"][0]
        # "hello" with its quotes is 7 bytes: 2 tokens by the estimate, 1000 + ceil(2000 * 2 / 1024) ms.
        check(short["kv_tokens"] == 2 and short["kv_tokens_from"] == "estimate" and
              short["kv_deadline_ms"] == 1004, "short %r" % short, r)
        check(long_["kv_tokens"] == 4096 and long_["kv_tokens_from"] == "ids" and
              long_["kv_deadline_ms"] == 9000, "long %r" % long_, r)
        check(est["kv_tokens_from"] == "estimate" and est["kv_tokens"] > 2000 and
              est["kv_deadline_ms"] == 1000 + (2000 * est["kv_tokens"] + 1023) // 1024, "chat %r" % est, r)
        check(all(l["kv_cause"] is None for l in (short, long_, est)), "a KV failure", r)
        r.stop()
    finally:
        os.unlink(alog)
    # A pool's own timeouts win over the top level's.
    alog = new_alog()
    pools = ("timeouts: { kv_transfer_ms: 1000, kv_transfer_ms_per_1k_tokens: 2000 }\n"
             "log: { access_log: %s }\n"
             "pools:\n"
             "  - name: main\n"
             "    models: [pdsim]\n"
             "    timeouts: { kv_transfer_ms: 500, kv_transfer_ms_per_1k_tokens: 1024 }\n"
             "    workers:\n"
             "      prefill: [ { url: %s, bootstrap_port: %d } ]\n"
             "      decode: [ { url: %s } ]\n" % (alog, url(p), p.ports["bport"], url(d)))
    r = router([], [], config=pools)
    try:
        ids = {"model": "pdsim", "input_ids": list(range(1, 2049)), "sampling_params": {"max_new_tokens": 2}}
        st, _, b = pdtest.request(r.port, "POST", "/generate", body=ids)
        check(st == 200, "pool: %d %r" % (st, b), r)
        line = wait_lines(alog, 1)[-1]
        check(line["pool"] == "main" and line["kv_deadline_ms"] == 500 + 2048, "pool line %r" % line, r)
        check(r.stop() == 0, "pdrouter exit status", r)
    finally:
        os.unlink(alog)


def scenario_vllm_decode_stall():
    p = sim("prefill", "--stall-kv")  # vLLM mode: answers with kv_transfer_params, never offers the KV
    d = sim("decode")
    alog = new_alog()
    r = router([p], [d], config="protocol: vllm\n" + conf(alog).replace("retries: { max: 2 }", "retries: { max: 0 }"))
    try:
        req = {"model": "pdsim", "prompt": "The capital of France is", "max_tokens": 4}
        t0 = time.monotonic()
        st, _, b = pdtest.request(r.port, "POST", "/v1/completions", body=req, timeout=25)
        dt = time.monotonic() - t0
        check(st == 504 and "kv_transfer_ms" in json.loads(b)["error"]["message"], "answer %d %r" % (st, b), r)
        check(dt < 8.0, "answered after %.1f s (first_byte_ms is 20 s)" % dt, r)
        line = wait_lines(alog, 1)[-1]
        check(line["kv_cause"] == "deadline" and line["status"] == 504, repr(line), r)
        check(metric_value(metrics(r), "pdr_link_suspect", prefill=url(p), decode=url(d)) == 1, "link", r)
        pdtest.poll_until(lambda: stats(d)["inflight"] == 0, 10, "the decode's leg cancelled")
        check(r.stop() == 0, "pdrouter exit status", r)
    finally:
        os.unlink(alog)


def scenario_cancel_stages():
    p = sim("prefill", "--stall-kv")
    d = sim("decode")
    alog = new_alog()
    r = router([p], [d], config=conf(alog).replace("retries: { max: 2 }", "retries: { max: 0 }"))
    try:
        # Before any decode header: JSON and stream both 504.
        st, _, b = pdtest.request(r.port, "POST", "/generate", body=body(), timeout=15)
        check(st == 504, "json: %d %r" % (st, b), r)
        st, _, data, _ = read_stream(r.port, body(stream=True))
        check(st == 504, "stream before headers: %d %r" % (st, data), r)
        # After the stream's head: an error event.
        pdtest.request_json(d.port, "POST", "/pdsim/fault", {"stream_head_before_kv": True})
        st, _, data, _ = read_stream(r.port, body(stream=True))
        check(st == 200 and b'"code":504' in data, "stream after its head: %d %r" % (st, data), r)
        # Several at once, on one connection each, some clients leaving early.
        conns = []
        for i in range(6):
            c = http.client.HTTPConnection("127.0.0.1", r.port, timeout=15)
            c.request("POST", "/generate", body=json.dumps(body(stream=i % 2 == 0)),
                      headers={"Content-Type": "application/json"})
            conns.append(c)
        for i, c in enumerate(conns):
            if i % 3 == 0:
                c.close()
            else:
                c.getresponse().read()
                c.close()
        pdtest.poll_until(lambda: stats(p)["inflight"] == 0 and stats(d)["inflight"] == 0, 10,
                          "every leg cancelled")
        m = metrics(r)
        check((metric_value(m, "pdr_kv_transfer_failures_total", cause="deadline", backend="unknown") or 0) >= 3,
              "counted", r)
        check(r.stop() == 0, "pdrouter exit status (leaks fail it under ASan)", r)
    finally:
        os.unlink(alog)


if __name__ == "__main__":
    pdtest.run_scenario(globals())
