#!/usr/bin/env python3
"""Per-phase timing and trace export, with real pdrouter and pdsim processes on loopback and a small
OTLP/HTTP collector (http.server) in this process: the spans' ids chain to the client's traceparent and
the legs' span ids are the parent ids the workers received, the phases in the access log are ordered and
non-negative, the phase and per-pool histograms count, the file exporter writes one OTLP object per line,
sampling follows the client's flag and tracing.sample_ratio, and a collector that is down or hangs delays
no request (its failures are counted, the spans that do not fit are dropped and counted).

Usage: test_tracing.py SCENARIO   (one of the functions named scenario_*; ctest runs each separately)
"""

import http.server
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check, request, sse_events  # noqa: E402
from test_router import metric_value, metrics_when, router, sim  # noqa: E402

H = "127.0.0.1"
TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
TP_RE = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
BODY = {"text": "the cat sat on the mat", "sampling_params": {"max_new_tokens": 6}, "stream": True}
PHASES = ["queue", "prefill", "decode_admission", "decode_first_token", "first_token", "last_token"]


class Collector:
    """An OTLP/HTTP collector: keeps every POSTed request (path, content type, decoded JSON)."""

    def __init__(self, status=200):
        self.posts = []
        self.lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                data = self.rfile.read(n)
                with outer.lock:
                    outer.posts.append((self.path, self.headers.get("Content-Type"), json.loads(data)))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer((H, pdtest.free_port()), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def spans(self):
        with self.lock:
            posts = list(self.posts)
        out = []
        for _, _, j in posts:
            for rs in j["resourceSpans"]:
                for ss in rs["scopeSpans"]:
                    out += ss["spans"]
        return out

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def stop_clean(r, timeout=10):
    """Stops the router (SIGTERM) and checks that it exited 0 with no sanitizer report (under ASan a leak
    makes the exit status nonzero). Returns the seconds it took."""
    t = time.monotonic()
    rc = r.stop(timeout=timeout)
    took = time.monotonic() - t
    log = open(r.log_path, errors="replace").read()
    check(rc == 0 and "Sanitizer" not in log and "runtime error" not in log, "%s exited %s\n%s" % (r.name, rc, r.log_tail(60)))
    return took


def spans_of_trace(spans, trace):
    return [s for s in spans if s["traceId"] == trace]


def attr(span, key):
    for a in span.get("attributes", []):
        if a["key"] == key:
            v = a["value"]
            return v.get("stringValue", v.get("intValue"))
    return None


def worker_traceparent(w):
    got = pdtest.request_json(w.port, "GET", "/pdsim/last_headers")["generate"]
    v = [val for n, val in got if n.lower() == "traceparent"]
    assert len(v) == 1, got
    m = TP_RE.match(v[0])
    assert m is not None, v
    return m


def stream(port, headers):
    st, _, data = request(port, "POST", "/generate", BODY, headers=headers)
    return st, sse_events(data)


def check_phases(line, need_prefill=False):
    """The phases of an access-log line: present, non-negative and in order. The prefill's may be missing:
    with pd.relay first_byte its answer can follow the client's last byte (the line is written then)."""
    ph = line.get("phases_us")
    check(isinstance(ph, dict), "no phases_us: %r" % line)
    want = [p for p in PHASES if need_prefill or p != "prefill" or "prefill" in ph]
    for p in want:
        check(isinstance(ph.get(p), int) and ph[p] >= 0, "phase %s: %r" % (p, line))
    check(ph["queue"] <= ph["decode_first_token"] <= ph["first_token"] <= ph["last_token"], repr(ph))
    check(ph["last_token"] <= line["total_ms"] * 1000 + 1000, repr(line))
    check("kv" in line, repr(line))
    return ph


def scenario_otlp():
    """Spans of a streamed PD request reach an OTLP collector: the trace is the client's, the root's parent
    is the client's span, the legs' and the queue's parent is the root, the legs' span ids are the parent
    ids the workers received; attributes and events; the access-log phases; the histograms."""
    col = Collector()
    p, d = sim("prefill"), sim("decode")
    alog = tempfile.mktemp(prefix="pdtest-alog-", suffix=".log")
    r = router([p], [d], config="threads: 1\nlog: { access_log: %s }\n"
               "tracing: { otlp_endpoint: 'http://127.0.0.1:%d/v1/traces', flush_ms: 50, batch_max: 64,"
               " service_name: pdr-test }" % (alog, col.port))
    try:
        st, ev = stream(r.port, {"traceparent": TP})
        check(st == 200 and len(ev) >= 2, "status %d %r" % (st, ev), r)
        ptp, dtp = worker_traceparent(p), worker_traceparent(d)
        check(ptp.group(1) == TRACE and dtp.group(1) == TRACE, "workers' trace ids %r %r" % (ptp.group(0), dtp.group(0)))

        def complete():
            ss = spans_of_trace(col.spans(), TRACE)
            names = sorted(s["name"] for s in ss)
            return ss if {"POST /generate", "prefill", "decode", "queue"} <= set(names) else None
        ss = pdtest.poll_until(complete, 10, "the request's spans at the collector")
        path, ctype, body = col.posts[0]
        check(path == "/v1/traces" and ctype == "application/json", "%s %s" % (path, ctype))
        res = body["resourceSpans"][0]["resource"]["attributes"]
        check({"key": "service.name", "value": {"stringValue": "pdr-test"}} in res, repr(res))
        by = {s["name"]: s for s in ss}
        root = by["POST /generate"]
        check(len([s for s in ss if s["name"] == "POST /generate"]) == 1, repr(ss))
        check(root["parentSpanId"] == CLIENT_SPAN and root["kind"] == 2, repr(root))
        for name in ("prefill", "decode", "queue"):
            check(by[name]["parentSpanId"] == root["spanId"], "%s: %r" % (name, by[name]))
        check(by["prefill"]["spanId"] == ptp.group(2), "prefill span %s, worker got %s" % (by["prefill"]["spanId"], ptp.group(2)))
        check(by["decode"]["spanId"] == dtp.group(2), "decode span %s, worker got %s" % (by["decode"]["spanId"], dtp.group(2)))
        check(by["prefill"]["kind"] == 3 and by["decode"]["kind"] == 3, repr(ss))
        check(attr(by["prefill"], "server.address") == "http://127.0.0.1:%d" % p.port, repr(by["prefill"]))
        check(attr(by["decode"], "server.address") == "http://127.0.0.1:%d" % d.port, repr(by["decode"]))
        check(attr(root, "http.response.status_code") == "200" and attr(root, "pdr.pool") == "default", repr(root))
        check(attr(root, "pdr.prefill") is not None and attr(root, "pdr.decode") is not None, repr(root))
        check(int(attr(root, "pdr.tokens")) >= 1, repr(root))
        events = {e["name"]: int(e["timeUnixNano"]) for e in root["events"]}
        check({"first_token", "last_token", "decode_first_token"} <= set(events), repr(root["events"]))
        t0, t1 = int(root["startTimeUnixNano"]), int(root["endTimeUnixNano"])
        check(t0 <= events["decode_first_token"] <= events["first_token"] <= events["last_token"] <= t1, repr(root))
        check(abs(t0 / 1e9 - time.time()) < 60, "start %d is not unix time" % t0)
        q = by["queue"]
        check(int(q["startTimeUnixNano"]) == t0 and int(q["endTimeUnixNano"]) <= int(by["prefill"]["startTimeUnixNano"]) + 1000,
              repr(q))
        for s in ss:
            check(int(s["startTimeUnixNano"]) <= int(s["endTimeUnixNano"]), repr(s))
            check(s["status"]["code"] == 1, repr(s))
        line = pdtest.access_lines(alog, 1)[0]
        check(line["trace_id"] == TRACE, repr(line))
        check_phases(line)
        # A client that does not sample: nothing of its trace is exported, and the workers see flag 00.
        other = "00-" + "ab" * 16 + "-00f067aa0ba902b7-00"
        st, _ = stream(r.port, {"traceparent": other})
        check(st == 200 and worker_traceparent(d).group(3) == "00", "unsampled request")
        # A new trace (no traceparent): sampled (sample_ratio 1), exported with no parent.
        st, _ = stream(r.port, {})
        new = worker_traceparent(d).group(1)
        ss2 = pdtest.poll_until(lambda: [s for s in spans_of_trace(col.spans(), new) if s["name"] == "POST /generate"] or None,
                                10, "the new trace's root span")
        check("parentSpanId" not in ss2[0] or ss2[0]["parentSpanId"] == "", repr(ss2[0]))
        check(spans_of_trace(col.spans(), "ab" * 16) == [], "spans of an unsampled trace were exported")
        m = metrics_when(r, lambda t: all((metric_value(t, "pdr_phase_seconds_count", phase=ph) or 0) >= 3 for ph in PHASES)
                         and (metric_value(t, "pdr_trace_spans_exported_total") or 0) >= 8, "phase histograms")
        for ph in PHASES:
            check((metric_value(m, "pdr_phase_seconds_count", phase=ph) or 0) >= 3, "phase %s not counted" % ph)
        check(metric_value(m, "pdr_pool_ttft_seconds_count", route="generate", pool="default") == 3, "pool ttft")
        check(metric_value(m, "pdr_pool_tpot_seconds_count", route="generate", pool="default") == 3, "pool tpot")
        check(metric_value(m, "pdr_trace_spans_dropped_total", reason="queue_full") == 0, "drops")
        check(metric_value(m, "pdr_trace_export_failures_total", sink="otlp") == 0, "failures")
        check(metric_value(m, "pdr_kv_transfer_seconds_count", backend="tcp") == 0, "kv histogram without reports")
        stop_clean(r)
    finally:
        pdtest.stop_all()
        col.close()


def scenario_collector_down():
    """A collector that accepts connections and never answers, then one that is not there at all: every
    request still answers at once; the failed exports are counted, the spans that found the queue full are
    dropped and counted, retries are counted, and the router still stops promptly (one last try, not one
    per queued batch)."""
    hang = socket.socket()
    hang.bind((H, pdtest.free_port()))
    hang.listen(64)  # never accepted: the kernel completes the handshakes, nothing answers
    p, d = sim("prefill"), sim("decode")
    tracing = "tracing: { otlp_endpoint: 'http://127.0.0.1:%d/v1/traces', flush_ms: 20, batch_max: 4, queue_max: 64, timeout_ms: 3000 }"
    r = router([p], [d], config="threads: 1\n" + tracing % hang.getsockname()[1])
    try:
        worst = 0.0
        for i in range(40):
            t = time.monotonic()
            st, ev = stream(r.port, {"traceparent": TP})
            worst = max(worst, time.monotonic() - t)
            check(st == 200 and ev and ev[-1] == "[DONE]", "request %d: %d %r" % (i, st, ev), r)
        # Each export waits 3 s for an answer that never comes: a request that waited on one would take
        # that long.
        check(worst < 1.5, "a request took %.3f s while the collector hung" % worst, r)
        m = metrics_when(r, lambda t: (metric_value(t, "pdr_trace_export_failures_total", sink="otlp") or 0) >= 1
                         and (metric_value(t, "pdr_trace_spans_dropped_total", reason="queue_full") or 0) >= 1,
                         "export failures and drops counted")
        check(metric_value(m, "pdr_trace_spans_exported_total") == 0, "spans exported to a hung collector")
        # Stopping with a full queue (16 batches of 4) and the collector still hung: one try of 3 s, then
        # the rest is dropped, not 16 tries (48 s).
        took = stop_clean(r, timeout=30)
        check(took < 9, "stopping took %.1f s with the collector hung" % took)
        # Nobody listening at all: connections refused, retried with back-off, the router carries on.
        gone = pdtest.free_port()
        r = router([p], [d], config="threads: 1\n" + tracing % gone)
        for i in range(5):
            t = time.monotonic()
            st, _ = stream(r.port, {"traceparent": TP})
            check(st == 200 and time.monotonic() - t < 1.5, "status %d with the collector gone" % st, r)
        m = metrics_when(r, lambda t: (metric_value(t, "pdr_trace_export_retries_total") or 0) >= 1
                         and (metric_value(t, "pdr_trace_export_failures_total", sink="otlp") or 0) >= 2,
                         "retries counted")
        stop_clean(r)
    finally:
        pdtest.stop_all()
        hang.close()


def scenario_file():
    """tracing.file (--trace-file): one OTLP JSON object per line; sample_ratio 0 records no new trace (and tells the
    workers so with flag 00) but a client's sampled trace still is; a protocol vllm request's phases; a
    file that cannot be opened stops the start with its name."""
    path = tempfile.mktemp(prefix="pdtest-spans-", suffix=".jsonl")
    alog = tempfile.mktemp(prefix="pdtest-alog-", suffix=".log")
    p, d = sim("prefill"), sim("decode")
    # The flags (the YAML keys are tracing.file and tracing.sample_ratio).
    r = router([p], [d], "--threads", "1", "--trace-file", path, "--trace-sample-ratio", "0", access_log=alog)
    try:
        st, _ = stream(r.port, {})
        check(st == 200 and worker_traceparent(d).group(3) == "00", "sample_ratio 0: new trace flagged sampled")
        st, _ = stream(r.port, {"traceparent": TP})
        check(st == 200, "status %d" % st, r)

        def lines():
            try:
                with open(path) as f:
                    ls = [json.loads(l) for l in f if l.strip()]
            except OSError:
                return None
            names = [s["name"] for j in ls for rs in j["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
            return ls if "POST /generate" in names and "prefill" in names and "decode" in names else None
        ls = pdtest.poll_until(lines, 10, "spans in the file")
        spans = [s for j in ls for rs in j["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
        check({s["traceId"] for s in spans} == {TRACE}, "only the client's sampled trace: %r" % {s["traceId"] for s in spans})
        with open(path) as f:
            raw = f.read()
        check(raw.endswith("\n") and all(l.startswith("{\"resourceSpans\":") for l in raw.splitlines()), raw[:200])
        lines_ = pdtest.access_lines(alog, 2)
        for l in lines_:
            check_phases(l)
        stop_clean(r)
        # A file the router cannot open: it does not start, and says why.
        bad = "/nonexistent-dir/spans.jsonl"
        cfg = tempfile.mktemp(suffix=".yaml")
        with open(cfg, "w") as f:
            f.write("listen: { host: 127.0.0.1, port: %d }\nadmin: { port: 0 }\nworkers:\n  prefill: [ http://127.0.0.1:1 ]\n"
                    "  decode: [ http://127.0.0.1:2 ]\ntracing: { file: %s }\n" % (pdtest.free_port(), bad))
        out = subprocess.run([pdtest.binary("pdrouter"), "--config", cfg], capture_output=True, text=True, timeout=20)
        check(out.returncode != 0 and bad in out.stderr and "tracing.file" in out.stderr, "%d %r" % (out.returncode, out.stderr))
    finally:
        pdtest.stop_all()


def scenario_vllm():
    """protocol vllm (prefill, then decode): the phases are ordered, the prefill ends before the decode is
    sent, both legs' spans hang under the root with the ids the workers received."""
    col = Collector()
    p, d = sim("prefill"), sim("decode")
    alog = tempfile.mktemp(prefix="pdtest-alog-", suffix=".log")
    r = router([p], [d], config="threads: 1\nprotocol: vllm\nlog: { access_log: %s }\n"
               "tracing: { otlp_endpoint: 'http://127.0.0.1:%d/v1/traces', flush_ms: 20 }" % (alog, col.port))
    try:
        body = {"model": "pdsim", "prompt": "once upon a time", "max_tokens": 5, "stream": True}
        st, _, data = request(r.port, "POST", "/v1/completions", body, headers={"traceparent": TP})
        check(st == 200, "status %d %r" % (st, data[:300]), r)
        line = pdtest.access_lines(alog, 1)[0]
        ph = check_phases(line, need_prefill=True)
        check(ph["queue"] + ph["prefill"] <= ph["decode_first_token"], repr(ph))

        def complete():
            ss = spans_of_trace(col.spans(), TRACE)
            return ss if {"POST /v1/completions", "prefill", "decode"} <= {s["name"] for s in ss} else None
        ss = pdtest.poll_until(complete, 10, "the vllm request's spans")
        by = {s["name"]: s for s in ss}
        root = by["POST /v1/completions"]
        check(by["prefill"]["parentSpanId"] == root["spanId"] and by["decode"]["parentSpanId"] == root["spanId"], repr(ss))
        pgot = [v for n, v in pdtest.request_json(p.port, "GET", "/pdsim/last_headers")["generate"] if n.lower() == "traceparent"]
        check(pgot and TP_RE.match(pgot[0]).group(2) == by["prefill"]["spanId"], "%r %r" % (pgot, by["prefill"]))
        check(int(by["prefill"]["endTimeUnixNano"]) <= int(by["decode"]["startTimeUnixNano"]), "vllm legs overlap: %r" % ss)
        stop_clean(r)
    finally:
        pdtest.stop_all()
        col.close()


def scenario_solo():
    """A request that skips the prefill (conditional disaggregation, protocol vllm, a short prompt): no
    prefill phase and no prefill span; its one leg is a span of role solo with the id the decode received;
    the other phases as usual."""
    col = Collector()
    p, d = sim("prefill"), sim("decode", "--local-prefill")
    alog = tempfile.mktemp(prefix="pdtest-alog-", suffix=".log")
    r = router([p], [d], config="threads: 1\nprotocol: vllm\ndisaggregation: { min_prefill_chars: 200 }\n"
               "log: { access_log: %s }\ntracing: { otlp_endpoint: 'http://127.0.0.1:%d/v1/traces', flush_ms: 20 }"
               % (alog, col.port))
    try:
        body = {"model": "pdsim", "prompt": "short", "max_tokens": 5, "stream": True}
        st, _, data = request(r.port, "POST", "/v1/completions", body, headers={"traceparent": TP})
        check(st == 200, "status %d %r" % (st, data[:300]), r)
        line = pdtest.access_lines(alog, 1)[0]
        check(line["disagg"] == "short_prompt" and line["prefill"] is None, repr(line))
        ph = check_phases(line)
        check("prefill" not in ph, "a solo request has a prefill phase: %r" % ph)
        dtp = worker_traceparent(d)

        def complete():
            ss = spans_of_trace(col.spans(), TRACE)
            return ss if {"POST /v1/completions", "decode", "queue"} <= {s["name"] for s in ss} else None
        ss = pdtest.poll_until(complete, 10, "the solo request's spans")
        by = {s["name"]: s for s in ss}
        check("prefill" not in by, "a prefill span for a solo request: %r" % ss)
        check(by["decode"]["spanId"] == dtp.group(2) and attr(by["decode"], "pdr.role") == "solo", repr(by["decode"]))
        check(by["decode"]["parentSpanId"] == by["POST /v1/completions"]["spanId"], repr(ss))
        check(attr(by["POST /v1/completions"], "pdr.disagg") == "short_prompt", repr(by["POST /v1/completions"]))
        check(pdtest.request_json(p.port, "GET", "/pdsim/stats")["requests"] == 0, "the prefill was called")
        stop_clean(r)
    finally:
        pdtest.stop_all()
        col.close()


def scenario_config():
    """Bad tracing settings are refused with file:line:col."""
    exe = pdtest.binary("pdrouter")
    base = "workers:\n  prefill: [ http://127.0.0.1:1 ]\n  decode: [ http://127.0.0.1:3 ]\n"
    cases = [
        ("tracing:\n  sample_ratio: 1.5\n", "5:17:"),
        ("tracing:\n  otlp_endpoint: ftp://collector:4318\n", "5:18:"),
        ("tracing:\n  batch_max: 0\n", "5:14:"),
        ("tracing:\n  flush: 10\n", "5:3:"),
        ("tracing:\n  queue_max: lots\n", "5:14:"),
    ]
    for text, where in cases:
        path = tempfile.mktemp(suffix=".yaml")
        with open(path, "w") as f:
            f.write(base + text)
        out = subprocess.run([exe, "--check-config", path], capture_output=True, text=True)
        check(out.returncode == 2 and ("%s:%s" % (path, where)) in out.stderr and "tracing" in out.stderr,
              "%r: %d %r" % (text, out.returncode, out.stderr))
    # The flags: an endpoint that is not an OTLP/HTTP URL (sglang's gRPC default form), --enable-trace
    # with nowhere to send, a ratio out of range.
    flags = [exe, "--pd-disaggregation", "--prefill", "http://127.0.0.1:1", "--decode", "http://127.0.0.1:3"]
    for extra, want in ((["--otlp-traces-endpoint", "0.0.0.0:4317"], "OTLP/HTTP"),
                        (["--enable-trace"], "--enable-trace needs --otlp-traces-endpoint"),
                        (["--trace-sample-ratio", "2"], "--trace-sample-ratio")):
        out = subprocess.run(flags + extra, capture_output=True, text=True, timeout=20)
        check(out.returncode == 2 and want in out.stderr, "%r: %d %r" % (extra, out.returncode, out.stderr))
    good = tempfile.mktemp(suffix=".yaml")
    with open(good, "w") as f:
        f.write(base + "tracing: { otlp_endpoint: 'http://127.0.0.1:4318/v1/traces', file: /tmp/x.jsonl, sample_ratio: 0.25,"
                " service_name: edge, batch_max: 100, flush_ms: 500, queue_max: 1000, timeout_ms: 1000 }\n")
    out = subprocess.run([exe, "--check-config", good], capture_output=True, text=True)
    check(out.returncode == 0, "valid tracing config refused: %r" % out.stderr)


if __name__ == "__main__":
    pdtest.run_scenario(globals())
