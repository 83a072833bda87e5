#!/usr/bin/env python3
"""Client headers end to end through the PD path, with real pdrouter and pdsim processes on loopback:
what reaches both legs (pdsim's GET /pdsim/last_headers records what each worker received), the
X-Forwarded-* fields, W3C trace context, request ids, a worker API key, and the 431 answers to heads past
limits.max_headers / limits.max_header_bytes over HTTP/1 and HTTP/2.

Usage: test_headers.py SCENARIO   (one of the functions named scenario_*; ctest runs each separately)
"""

import json
import os
import re
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check, raw_exchange, request  # noqa: E402
from test_router import metric_value, metrics, router, sim  # noqa: E402

H = "127.0.0.1"
BODY = {"text": "the cat sat on the mat", "sampling_params": {"max_new_tokens": 4}}
TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TP_RE = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


def last_headers(w, kind="generate"):
    """The header fields the worker received with its last request of `kind`: a list of (name, value)."""
    got = pdtest.request_json(w.port, "GET", "/pdsim/last_headers")[kind]
    return [tuple(x) for x in got] if got is not None else None


def values(hs, name):
    return [v for n, v in hs if n.lower() == name]


def one(hs, name, where):
    v = values(hs, name)
    assert len(v) == 1, "%s: %s %r in %r" % (where, name, v, hs)
    return v[0]


def curl_h2(port, path, headers, body=BODY):
    """POST over HTTP/2 (prior knowledge) with extra headers; returns (status, headers dict, body)."""
    args = ["curl", "-sS", "--http2-prior-knowledge", "-D", "-", "-o", "-", "-H", "Content-Type: application/json"]
    for h in headers:
        args += ["-H", h]
    args += ["--data-binary", json.dumps(body), "http://%s:%d%s" % (H, port, path)]
    out = subprocess.run(args, capture_output=True, timeout=30)
    assert out.returncode == 0, out.stderr
    head, _, data = out.stdout.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    hdrs = {l.split(":", 1)[0].lower(): l.split(":", 1)[1].strip() for l in lines[1:] if ":" in l}
    return status, hdrs, data



def field_bytes(head):
    """The bytes of a raw head's fields as the router counts them (each line with its CRLF)."""
    lines = head.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]
    return sum(len(l) + 2 for l in lines)


def error_of(data):
    """The OpenAI error object of a response body (AssertionError when it is not one)."""
    j = json.loads(data)
    e = j["error"]
    assert set(e) >= {"message", "type", "code"}, j
    return e


def scenario_forward():
    """HTTP/1 and HTTP/2 clients: end-to-end headers reach both legs as sent, hop-by-hop ones and the ones
    Connection names do not, X-Forwarded-For is appended to, X-Forwarded-Proto/-Host are set, the request
    id comes from the configured headers and is echoed, the client's Authorization passes (no worker key)."""
    p, d = sim("prefill"), sim("decode")
    alog = tempfile.mktemp(prefix="pdtest-alog-", suffix=".log")
    r = router([p], [d], "--threads", "1", "--request-id-headers", "x-my-id", "x-request-id", access_log=alog)
    try:
        sent = [("X-Custom", "one two"), ("X-Empty-Ok", "v"), ("User-Agent", "pdtest/1"), ("Accept", "text/x-test"),
                ("Authorization", "Bearer client-token"), ("X-Forwarded-For", "192.0.2.1"),
                ("Connection", "keep-alive, X-Hop-One"), ("X-Hop-One", "gone"), ("Keep-Alive", "timeout=5"),
                ("TE", "trailers"), ("Trailer", "X-T"), ("Proxy-Authorization", "Basic eDp5"),
                ("Proxy-Connection", "keep-alive"), ("Upgrade-Insecure-Requests", "1"), ("Accept-Encoding", "gzip"),
                ("X-My-Id", "req-h1-77"), ("X-Request-Id", "ignored-second-choice")]
        raw = json.dumps(BODY).encode()
        head = b"POST /generate HTTP/1.1\r\nHost: front.example:8443\r\nContent-Type: application/json\r\n" \
               b"Content-Length: %d\r\n" % len(raw)
        for n, v in sent:
            head += ("%s: %s\r\n" % (n, v)).encode()
        s = socket.create_connection((H, r.port))
        s.settimeout(10)
        s.sendall(head + b"\r\n" + raw)
        resp = b""
        while b"\r\n\r\n" not in resp:
            resp += s.recv(65536)
        s.close()
        check(resp.startswith(b"HTTP/1.1 200"), repr(resp[:300]), r)
        check(b"\r\nx-request-id: req-h1-77\r\n" in resp.lower(), "request id not echoed: %r" % resp[:400], r)
        for w in (p, d):
            hs = last_headers(w)
            where = w.name
            check(one(hs, "x-custom", where) == "one two" and one(hs, "user-agent", where) == "pdtest/1", repr(hs))
            check(one(hs, "accept", where) == "text/x-test", repr(hs))
            check(one(hs, "upgrade-insecure-requests", where) == "1", repr(hs))  # not Upgrade
            check(one(hs, "authorization", where) == "Bearer client-token", repr(hs))
            check(one(hs, "x-my-id", where) == "req-h1-77", repr(hs))
            check(one(hs, "x-request-id", where) == "req-h1-77", repr(hs))
            check(one(hs, "x-forwarded-for", where) == "192.0.2.1, 127.0.0.1", repr(hs))
            check(one(hs, "x-forwarded-proto", where) == "http", repr(hs))
            check(one(hs, "x-forwarded-host", where) == "front.example:8443", repr(hs))
            check(one(hs, "content-type", where) == "application/json", repr(hs))
            for gone in ("connection", "x-hop-one", "keep-alive", "te", "trailer", "proxy-authorization",
                         "proxy-connection", "accept-encoding", "expect", "transfer-encoding"):
                check(values(hs, gone) == [], "%s: %s forwarded: %r" % (where, gone, hs))
        # HTTP/2: lower-case names from h2o, no Connection at all; the same rules.
        st, rh, _ = curl_h2(r.port, "/v1/completions", ["X-Custom: h2 value", "te: trailers", "X-Request-Id: h2-id",
                                                        "x-forwarded-for: 198.51.100.9", "Cookie: a=1",
                                                        "Cookie: b=2"],
                            body={"model": "pdsim", "prompt": "once upon a time", "max_tokens": 3})
        check(st == 200 and rh.get("x-request-id") == "h2-id", "h2: %d %r" % (st, rh), r)
        for w in (p, d):
            hs = last_headers(w)
            check(one(hs, "x-custom", w.name) == "h2 value" and values(hs, "te") == [], repr(hs))
            check(one(hs, "x-forwarded-for", w.name) == "198.51.100.9, 127.0.0.1", repr(hs))
            check(one(hs, "x-forwarded-host", w.name) == "%s:%d" % (H, r.port), repr(hs))
            check(one(hs, "cookie", w.name) == "a=1; b=2", repr(hs))
        # A request id that is not a plain token is replaced (and not forwarded).
        st, rh, _ = request(r.port, "POST", "/generate", BODY, headers={"X-My-Id": "bad id"})
        rid = rh.get("x-request-id", "")
        check(st == 200 and re.fullmatch(r"[0-9a-f]{32}", rid), "made-up id %r" % rid, r)
        check(values(last_headers(d), "x-request-id") == [rid], repr(last_headers(d)))
        lines = pdtest.access_lines(alog, 3)
        check([l["request_id"] for l in lines[:3]] == ["req-h1-77", "h2-id", rid], repr(lines))
    finally:
        pdtest.stop_all()


def scenario_trace():
    """W3C trace context: a valid traceparent is continued on both legs (same trace id and flags, a new
    parent id per leg) with its tracestate; none or an invalid one starts a new trace (flags 01, tracestate
    dropped); the trace id is in the access log line."""
    p, d = sim("prefill"), sim("decode")
    alog = tempfile.mktemp(prefix="pdtest-alog-", suffix=".log")
    r = router([p], [d], "--threads", "1", access_log=alog)  # one loop: access-log lines in request order
    try:
        st, _, _ = request(r.port, "POST", "/generate", BODY, headers={"traceparent": TP, "tracestate": "k=v,q=w"})
        check(st == 200, "status %d" % st, r)
        parents = []
        for w in (p, d):
            hs = last_headers(w)
            m = TP_RE.match(one(hs, "traceparent", w.name))
            check(m is not None and m.group(1) == "4bf92f3577b34da6a3ce929d0e0e4736" and m.group(3) == "01", repr(hs))
            check(m.group(2) != "00f067aa0ba902b7" and m.group(2) != "0" * 16, "parent id not the router's: %r" % hs)
            parents.append(m.group(2))
            check(one(hs, "tracestate", w.name) == "k=v,q=w", repr(hs))
        check(parents[0] != parents[1], "both legs got parent id %s" % parents[0])
        # Sampled flag 00 is kept as the client set it.
        request(r.port, "POST", "/generate", BODY, headers={"traceparent": TP[:-2] + "00"})
        check(TP_RE.match(one(last_headers(d), "traceparent", "decode")).group(3) == "00", repr(last_headers(d)))
        # None, and invalid ones: a new trace each, tracestate dropped.
        invalid = [None, TP.upper(), "00-" + "0" * 32 + "-00f067aa0ba902b7-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-"
                   + "0" * 16 + "-01", "ff" + TP[2:], TP + "-x", "garbage"]
        traces = []
        for tp in invalid:
            hdrs = {"tracestate": "k=v"}
            if tp is not None:
                hdrs["traceparent"] = tp
            st, _, _ = request(r.port, "POST", "/generate", BODY, headers=hdrs)
            check(st == 200, "status %d" % st, r)
            ids = set()
            for w in (p, d):
                hs = last_headers(w)
                m = TP_RE.match(one(hs, "traceparent", w.name))
                check(m is not None and m.group(1) != "4bf92f3577b34da6a3ce929d0e0e4736" and m.group(3) == "01",
                      "%r: %r" % (tp, hs))
                check(m.group(1) != "0" * 32 and m.group(2) != "0" * 16, repr(hs))
                check(values(hs, "tracestate") == [], "tracestate of a dropped trace forwarded: %r" % hs)
                ids.add(m.group(1))
            check(len(ids) == 1, "the legs got different trace ids %r" % ids)
            traces.append(ids.pop())
        check(len(set(traces)) == len(traces), "trace ids repeat: %r" % traces)
        lines = pdtest.access_lines(alog, 2 + len(invalid))
        want = ["4bf92f3577b34da6a3ce929d0e0e4736"] * 2 + traces
        check([l["trace_id"] for l in lines] == want, "access log %r, want %r" % ([l.get("trace_id") for l in lines],
                                                                                  want))
        # A refused request's line carries the client's trace id (and null without one).
        st, _, _ = request(r.port, "POST", "/generate", "{not json", headers={"traceparent": TP})
        check(st == 400, "status %d" % st, r)
        st, _, _ = request(r.port, "POST", "/generate", "{not json")
        lines = pdtest.access_lines(alog, 4 + len(invalid))
        check([l["trace_id"] for l in lines[-2:]] == ["4bf92f3577b34da6a3ce929d0e0e4736", None], repr(lines[-2:]))
    finally:
        pdtest.stop_all()


def scenario_api_key():
    """workers.api_key_file: both legs, the model list and the health checks carry Authorization: Bearer
    KEY; the client's Authorization is not forwarded; the key is in no log; a key file others can read is
    refused at start."""
    p, d = sim("prefill"), sim("decode")
    key = "k-" + os.urandom(12).hex()
    fd, kpath = tempfile.mkstemp(prefix="pdtest-key-")
    os.write(fd, (key + "\n").encode())
    os.close(fd)
    os.chmod(kpath, 0o600)
    alog = tempfile.mktemp(prefix="pdtest-alog-", suffix=".log")
    # The health checks of the first round may predate nothing: the checks run every 100 ms here.
    cfg = "health: { interval_ms: 100 }\nlog: { access_log: %s }" % alog
    try:
        lines = ["listen: { host: 127.0.0.1, port: {port} }", "admin: { port: 0 }", "workers:",
                 "  api_key_file: %s" % kpath, "  prefill:",
                 "    - { url: http://127.0.0.1:%d, bootstrap_port: %d }" % (p.port, p.ports["bport"]), "  decode:",
                 "    - { url: http://127.0.0.1:%d }" % d.port, cfg]
        r = start_router_yaml("\n".join(lines))
        st, _, _ = request(r.port, "POST", "/generate", BODY, headers={"Authorization": "Bearer client-secret"})
        check(st == 200, "status %d" % st, r)
        for w in (p, d):
            hs = last_headers(w)
            check(values(hs, "authorization") == ["Bearer " + key], "%s: %r" % (w.name, hs), r)
        st, _, _ = request(r.port, "GET", "/v1/models", headers={"Authorization": "Bearer client-secret"})
        check(st == 200 and values(last_headers(d, "models"), "authorization") == ["Bearer " + key],
              repr(last_headers(d, "models")), r)
        for w in (p, d):
            pdtest.poll_until(lambda: last_headers(w, "health") is not None, 5, "a health check of %s" % w.name)
            check(values(last_headers(w, "health"), "authorization") == ["Bearer " + key],
                  repr(last_headers(w, "health")), r)
        r.stop()
        with open(r.log_path) as f:
            log = f.read()
        with open(alog) as f:
            log += f.read()
        check(key not in log and "client-secret" not in log, "the key is in a log", r)
        # A key file other users can read: refused at start, naming the file and its mode.
        os.chmod(kpath, 0o644)
        out = subprocess.run([pdtest.binary("pdrouter"), "--check-config", r.config_path], capture_output=True,
                             text=True, timeout=10)
        check(out.returncode == 2 and "workers.api_key_file" in out.stderr + out.stdout and "0644" in
              out.stderr + out.stdout, "check-config: %d %r" % (out.returncode, out.stderr + out.stdout))
        check(key not in out.stderr + out.stdout, "the key in an error message")
        # sglang's flag.
        os.chmod(kpath, 0o600)
        r2 = router([p], [d], "--api-key", key + "x")
        st, _, _ = request(r2.port, "POST", "/generate", BODY, headers={"Authorization": "Bearer client-secret"})
        check(st == 200 and values(last_headers(d), "authorization") == ["Bearer " + key + "x"],
              repr(last_headers(d)), r2)
    finally:
        os.unlink(kpath)
        pdtest.stop_all()


def start_router_yaml(text):
    """pdrouter from a whole YAML text ("{port}" replaced by a free port); waits for /readiness."""
    port = pdtest.free_port()
    fd, path = tempfile.mkstemp(prefix="pdrouter-", suffix=".yaml")
    with os.fdopen(fd, "w") as f:
        f.write(text.replace("{port}", str(port)) + "\n")
    return pdtest.start_router(path, {"port": port}, ["--drain-grace-ms", "0"])


def scenario_limits():
    """Heads past limits.max_headers or limits.max_header_bytes get 431 in the OpenAI error shape, over
    HTTP/1 (before h2o parses: more than its own 100 fields, and past its ~408 KiB head cap, where h2o
    itself would answer a plain 400 or close silently) and HTTP/2; a head at the limits passes; nothing
    refused reaches a worker."""
    p, d = sim("prefill"), sim("decode")
    # 50 fields: what the router adds to a request at the limit stays within pdsim's own 100 (h2o's).
    r = router([p], [d], config="limits: { max_headers: 50, max_header_bytes: 8192 }")
    try:
        raw = json.dumps(BODY).encode()

        def head(fields):
            h = b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n" % \
                len(raw)
            return h + b"".join(b"X-F%d: v\r\n" % i for i in range(fields)) + b"\r\n" + raw

        # Host, Content-Type, Content-Length and Connection plus 46: exactly 50 passes.
        out, _ = raw_exchange(r.port, head(46).replace(b"Content-Length", b"Connection: close\r\nContent-Length"))
        check(out.startswith(b"HTTP/1.1 200"), "50 fields: %r" % out[:200], r)
        for fields in (48, 150, 5000):  # 51; past h2o's own 100; a head of ~45 KiB
            out, closed = raw_exchange(r.port, head(fields))
            check(out.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n") and closed,
                  "%d fields: %r" % (fields, out[:200]), r)
            e = error_of(out.split(b"\r\n\r\n", 1)[1])
            check(e["code"] == 431 and e["type"] == "invalid_request_error", repr(e))
        # One field past max_header_bytes; a head past h2o's own cap (~408 KiB), never finished.
        out, closed = raw_exchange(r.port, b"POST /generate HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n")
        check(out.startswith(b"HTTP/1.1 431 ") and closed, "big field: %r" % out[:200], r)
        out, closed = raw_exchange(r.port, b"POST /generate HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 600000)
        check(out.startswith(b"HTTP/1.1 431 ") and closed, "600 KB head: %r" % out[:200], r)
        # Fields of exactly max_header_bytes pass; one byte more does not.
        base = head(0).replace(b"Content-Length", b"Connection: close\r\nX-Fill: \r\nContent-Length")
        fill = 8192 - field_bytes(base)
        exact = base.replace(b"X-Fill: ", b"X-Fill: " + b"f" * fill)
        check(field_bytes(exact) == 8192, "test arithmetic")
        out, _ = raw_exchange(r.port, exact)
        check(out.startswith(b"HTTP/1.1 200"), "fields of exactly 8192 bytes: %r" % out[:200], r)
        out, _ = raw_exchange(r.port, exact.replace(b"X-Fill: ", b"X-Fill: f"))
        check(out.startswith(b"HTTP/1.1 431 "), "8193 bytes: %r" % out[:100], r)
        # A request line longer than max_header_bytes: 414.
        out, closed = raw_exchange(r.port, b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        check(out.startswith(b"HTTP/1.1 414 URI Too Long\r\n") and closed, "long target: %r" % out[:200], r)
        # HTTP/2: the handler's check (h2o decodes the whole block first).
        st, _, data = curl_h2(r.port, "/generate", ["x-h%d: v" % i for i in range(101)])
        check(st == 431 and error_of(data)["code"] == 431, "h2 101 fields: %d %r" % (st, data), r)
        st, _, data = curl_h2(r.port, "/generate", ["x-h%d: v" % i for i in range(48)])
        check(st == 431 and "limits.max_headers" in error_of(data)["message"], "h2 51 fields: %d %r" % (st, data), r)
        st, _, data = curl_h2(r.port, "/generate", ["x-big: " + "b" * 9000])
        check(st == 431 and "limits.max_header_bytes" in error_of(data)["message"], "h2 big: %d %r" % (st, data), r)
        st, _, data = curl_h2(r.port, "/v1/models", ["x-big: " + "b" * 9000])
        check(st == 431, "h2 big on another route: %d" % st, r)
        st, _, data = curl_h2(r.port, "/generate", ["x-h%d: v" % i for i in range(40)])
        check(st == 200, "h2 within the limits: %d %r" % (st, data), r)
        for w in (p, d):
            requests = pdtest.request_json(w.port, "GET", "/pdsim/stats")["requests"]
            check(requests == 3, "%s served %d requests, want 3 (the accepted ones)" % (w.name, requests), r)
        m = metrics(r)
        check(metric_value(m, "pdr_http_headers_too_large_total") == 11, "counted %r" %
              metric_value(m, "pdr_http_headers_too_large_total"), r)
    finally:
        pdtest.stop_all()


if __name__ == "__main__":
    pdtest.run_scenario(globals())
