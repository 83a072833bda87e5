#!/usr/bin/env python3
"""Engine aborts (docs/operations.md, "Engine aborts"): when the router lets go of a leg a worker still runs,
an sglang worker gets POST /abort_request with the leg's rid and stops; a vLLM worker's connection is closed.
Real pdrouter and pdsim processes on loopback; pdsim's /pdsim/stats shows what its engine did (aborts.rids,
tokens_streamed, inflight), not only that a socket closed.

    python3 test_abort.py SCENARIO     (PDR_BUILD=<build dir>)

Scenarios:
  client_leaves      a client leaves mid-stream: the decode gets /abort_request with the rid both legs
                     carry, ends that request and streams no more tokens; counted sent and ok
  decode_fails       the decode fails before the KV arrives (its KV fetch fails at once): the prefill, which
                     holds the KV offer, gets /abort_request for the rid and lets it go long before its own
                     KV deadline; counted for the prefill
  pdsim_stream       pdsim's own /abort_request: a live stream ends with finish_reason abort and [DONE]
  disabled           pd.abort false: the client leaves mid-stream, the decode sees its connection
                     close and no /abort_request; nothing counted sent
  hung_endpoint      the decode's /abort_request never answers: the next requests are not delayed, the abort
                     is counted a timeout at pd.abort_timeout_ms, and the router stops cleanly
  vllm_closed        protocol vllm: a client that leaves mid-stream closes the decode's connection (vLLM
                     aborts on it), counted closed; no /abort_request is sent
"""

import json
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check, request, request_json  # noqa: E402
from test_router import metric_value, metrics, metrics_when, router, sim, stats  # noqa: E402

H = "127.0.0.1"


def gen_body(tokens=200, stream=True):
    return {"text": "The capital of France is", "stream": stream,
            "sampling_params": {"max_new_tokens": tokens, "ignore_eos": True}}


def aborts(r, role, outcome):
    return metric_value(metrics(r), "pdr_engine_aborts_total", role=role, outcome=outcome) or 0


def leave_mid_stream(r, path="/generate", body=None):
    """Starts a stream, reads its first event and leaves (the socket shut down both ways)."""
    conn, resp = pdtest.stream_request(r.port, "POST", path, body or gen_body())
    check(resp.status == 200, "status %d" % resp.status, r)
    first = resp.readline()
    check(first.startswith(b"data:"), "first line %r" % first, r)
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()


def scenario_client_leaves():
    p, d = sim("prefill"), sim("decode", "--decode-us-per-token", "50000")
    r = router([p], [d])
    leave_mid_stream(r)
    ab = pdtest.poll_until(lambda: (lambda a: a if a["calls"] >= 1 else None)(stats(d)["aborts"]), 5,
                           "the decode to be told to abort")
    rid = stats(d)["last"][-1]["body"].get("rid")
    check(isinstance(rid, str) and rid.startswith("pdr-"), "the decode's body has no router rid: %r" % rid)
    check(stats(p)["last"][-1]["body"].get("rid") == rid, "the legs carry different rids", r)
    # The abort named the request (its connection was closed just before: pdsim stops it either way).
    check(ab["rids"] == [rid] and ab["matched"] == 1, "aborts %r, the request's rid is %r" % (ab, rid), r)
    # The engine stopped: nothing in flight, its stream far from its 200 tokens, and no token after.
    pdtest.poll_until(lambda: stats(d)["inflight"] == 0, 5, "the decode to let the request go")
    s = stats(d)
    check(s["completed"] == 0 and s["tokens_streamed"] < 100, "the decode ran on: %r" % s)
    before = s["tokens_streamed"]
    # A request of its own, after: the decode answers it whole, and only its own tokens were streamed.
    st, _, raw = request(r.port, "POST", "/generate", gen_body(tokens=3))
    check(st == 200 and b"[DONE]" in raw, "next request: %d %r" % (st, raw[-200:]), r)
    check(stats(d)["tokens_streamed"] == before + 3, "tokens streamed after the abort: %r" % stats(d))
    metrics_when(r, lambda m: (metric_value(m, "pdr_engine_aborts_total", role="decode", outcome="ok") or 0) == 1,
                 "the decode's abort counted ok")
    check(aborts(r, "decode", "sent") == 1 and aborts(r, "decode", "failed") == 0, metrics(r), r)
    check(r.stop() == 0, "pdrouter exit status", r)


def scenario_decode_fails():
    p = sim("prefill")
    d = sim("decode", "--fail-kv-from-port", str(p.ports["bport"]))
    r = router([p], [d], config="retries: { max: 0 }\n")
    t0 = time.monotonic()
    st, _, raw = request(r.port, "POST", "/generate", gen_body(stream=False), timeout=20)
    check(st == 502, "status %d %r" % (st, raw[:300]), r)
    ab = pdtest.poll_until(lambda: (lambda a: a if a["calls"] >= 1 else None)(stats(p)["aborts"]), 5,
                           "the prefill to be told to abort")
    rid = stats(p)["last"][-1]["body"].get("rid")
    check(ab["rids"] == [rid] and stats(d)["last"][-1]["body"].get("rid") == rid,
          "prefill aborted %r, the legs' rids %r / %r" % (ab["rids"], rid, stats(d)["last"][-1]["body"]), r)
    # The prefill let the KV offer go at once, not at its own 30 s KV deadline.
    pdtest.poll_until(lambda: stats(p)["inflight"] == 0, 5, "the prefill to let the request go")
    check(time.monotonic() - t0 < 10, "the prefill held the request %.1fs" % (time.monotonic() - t0))
    metrics_when(r, lambda m: (metric_value(m, "pdr_engine_aborts_total", role="prefill", outcome="ok") or 0) == 1,
                 "the prefill's abort counted ok")
    check(stats(d)["aborts"]["calls"] == 0, "the decode, which failed, was sent an abort: %r" % stats(d)["aborts"])
    check(r.stop() == 0, "pdrouter exit status", r)


def scenario_pdsim_stream():
    """pdsim itself, as sglang: POST /abort_request ends a live stream with finish_reason {"type": "abort"}
    and [DONE], its tokens stop, an unknown rid is a no-op answered 200."""
    both = sim("both", "--decode-us-per-token", "50000")
    body = dict(gen_body(), rid="r-1")
    conn, resp = pdtest.stream_request(both.port, "POST", "/generate", body)
    check(resp.status == 200 and resp.readline().startswith(b"data:"), "no stream", both)
    st, _, _ = request(both.port, "POST", "/abort_request", {"rid": "nobody"})
    check(st == 200 and stats(both)["aborts"]["unknown"] == 1, "unknown rid: %d %r" % (st, stats(both)["aborts"]))
    st, _, _ = request(both.port, "POST", "/abort_request", {"rid": "r-1"})
    check(st == 200, "abort answered %d" % st, both)
    rest = resp.read()
    conn.close()
    events = [json.loads(l[6:]) for l in rest.split(b"\n") if l.startswith(b"data: {")]
    check(rest.endswith(b"data: [DONE]\n\n") and events and
          events[-1]["meta_info"]["finish_reason"]["type"] == "abort", "the stream's end: %r" % rest[-300:], both)
    s = stats(both)
    check(s["aborts"]["aborted"] == 1 and s["completed"] == 0 and s["tokens_streamed"] < 100, repr(s), both)
    st, _, _ = request(both.port, "POST", "/abort_request", {"rid": 3})
    check(st == 400, "a rid that is not a string: %d" % st, both)


def scenario_disabled():
    p, d = sim("prefill"), sim("decode", "--decode-us-per-token", "50000")
    r = router([p], [d], config="pd: { abort: false }\n")
    leave_mid_stream(r)
    pdtest.poll_until(lambda: stats(d)["cancelled"] >= 1, 5, "the decode to see the connection close")
    # Anything sent would have gone with the cancel; a request after it is answered first on this loop's
    # client anyway, and then the counters are read.
    st, _, _ = request(r.port, "POST", "/generate", gen_body(tokens=2, stream=False))
    check(st == 200, "next request %d" % st, r)
    check(stats(d)["aborts"]["calls"] == 0 and stats(p)["aborts"]["calls"] == 0,
          "an abort was sent: %r %r" % (stats(d)["aborts"], stats(p)["aborts"]), r)
    check(aborts(r, "decode", "sent") == 0 and aborts(r, "prefill", "sent") == 0, metrics(r), r)
    check(r.stop() == 0, "pdrouter exit status", r)


def scenario_hung_endpoint():
    p, d = sim("prefill"), sim("decode", "--decode-us-per-token", "50000")
    request_json(d.port, "POST", "/pdsim/fault", {"hang_abort": True})
    r = router([p], [d], config="pd: { abort_timeout_ms: 3000 }\n")
    leave_mid_stream(r)
    pdtest.poll_until(lambda: stats(d)["aborts"]["calls"] >= 1, 5, "the abort to reach the decode")
    # While the abort hangs, requests on every loop are answered at their own pace.
    t0 = time.monotonic()
    for _ in range(4):
        st, _, _ = request(r.port, "POST", "/generate", gen_body(tokens=2, stream=False))
        check(st == 200, "request during the hung abort: %d" % st, r)
    took = time.monotonic() - t0
    m = metrics(r)
    check(took < 2.0, "4 requests took %.2fs while an abort hung" % took, r)
    check((metric_value(m, "pdr_engine_aborts_total", role="decode", outcome="sent") or 0) == 1 and
          (metric_value(m, "pdr_engine_aborts_total", role="decode", outcome="timeout") or 0) == 0,
          "the abort is not in flight: %s" % m, r)
    metrics_when(r, lambda m: (metric_value(m, "pdr_engine_aborts_total", role="decode", outcome="timeout")
                               or 0) == 1, "the hung abort counted a timeout")
    check(aborts(r, "decode", "ok") == 0, metrics(r), r)
    check(r.stop() == 0, "pdrouter exit status", r)


def scenario_vllm_closed():
    p, d = sim("prefill"), sim("decode", "--decode-us-per-token", "50000")
    argv = ["pdrouter", "--pd-disaggregation", "--protocol", "vllm", "--host", H, "--port", "{port}",
            "--access-log", "off", "--admin-port", "{admin}", "--drain-grace-ms", "0",
            "--prefill", "http://127.0.0.1:%d" % p.port, "--decode", "http://127.0.0.1:%d" % d.port]
    r = pdtest.start(argv, name="pdrouter", health_path="/readiness", healthy=200)
    leave_mid_stream(r, "/v1/completions", {"model": "m", "prompt": "The capital of France is", "stream": True,
                                            "max_tokens": 200})
    pdtest.poll_until(lambda: stats(d)["cancelled"] >= 1, 5, "the decode to see its connection close")
    metrics_when(r, lambda m: (metric_value(m, "pdr_engine_aborts_total", role="decode", outcome="closed")
                               or 0) == 1, "the closed decode counted")
    check(stats(d)["aborts"]["calls"] == 0 and aborts(r, "decode", "sent") == 0, "an abort was sent", r)
    check(r.stop() == 0, "pdrouter exit status", r)


if __name__ == "__main__":
    pdtest.run_scenario(globals())
