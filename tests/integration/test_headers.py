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


SECRET_HEAD = [("Connection", "keep-alive, X-Secret-Hop, X-Forwarded-For"), ("X-Secret-Hop", "1"),
               ("X-Forwarded-For", "10.9.9.9"), ("X-Visible", "2"), ("User-Agent", "pdtest/hop")]


def h1_post(port, path, body, fields):
    """One HTTP/1.1 POST written by hand with the fields given (in order); returns the status line."""
    raw = json.dumps(body).encode()
    head = b"POST %s HTTP/1.1\r\nHost: front.example\r\nContent-Type: application/json\r\nContent-Length: %d\r\n" % (
        path.encode(), len(raw))
    for n, v in fields:
        head += ("%s: %s\r\n" % (n, v)).encode()
    s = socket.create_connection((H, port))
    s.settimeout(10)
    s.sendall(head + b"\r\n" + raw)
    resp = b""
    while b"\r\n\r\n" not in resp:
        b = s.recv(65536)
        if not b:
            break
        resp += b
    s.close()
    return resp.split(b"\r\n", 1)[0]


def check_hop_removed(ws, r):
    """Both legs: no field Connection named (X-Secret-Hop; X-Forwarded-For is the router's own, the client's
    address alone), the end-to-end ones as sent."""
    for w in ws:
        hs = last_headers(w)
        check(hs is not None, "%s got no request" % w.name, r)
        check(values(hs, "x-secret-hop") == [] and values(hs, "connection") == [],
              "%s: a field Connection names was forwarded: %r" % (w.name, hs), r)
        check(one(hs, "x-forwarded-for", w.name) == "127.0.0.1", "%s: X-Forwarded-For %r" % (w.name, hs), r)
        check(one(hs, "x-visible", w.name) == "2" and one(hs, "user-agent", w.name) == "pdtest/hop",
              "%s: end-to-end fields lost: %r" % (w.name, hs), r)


def scenario_connection_named():
    """Every field the client's Connection names is hop-by-hop (RFC 9110 section 7.6.1): with protocols sglang,
    vllm and pdshim, X-Secret-Hop reaches neither the prefill nor the decode and a named X-Forwarded-For is
    not joined, while the end-to-end fields are forwarded."""
    import test_tickets
    import test_vllm
    from shimtest import keyfile
    # sglang
    p, d = sim("prefill"), sim("decode")
    r = router([p], [d])
    try:
        st = h1_post(r.port, "/generate", BODY, SECRET_HEAD)
        check(st.startswith(b"HTTP/1.1 200"), "sglang: %r" % st, r)
        check_hop_removed((p, d), r)
    finally:
        pdtest.stop_all()
    # vllm, both routes
    p, d = sim("prefill"), sim("decode")
    r = test_vllm.router([p], [d])
    try:
        for path, body in (("/v1/completions", {"model": "pdsim", "prompt": "once upon", "max_tokens": 3}),
                           ("/v1/chat/completions",
                            {"model": "pdsim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})):
            st = h1_post(r.port, path, body, SECRET_HEAD)
            check(st.startswith(b"HTTP/1.1 200"), "vllm %s: %r" % (path, st), r)
            check_hop_removed((p, d), r)
    finally:
        pdtest.stop_all()
    # pdshim (signed tickets)
    k = keyfile(test_tickets.KEY_A)
    p, d = test_tickets.sim("prefill", k), test_tickets.sim("decode", k)
    r = test_tickets.router([p], [d], "ticket: { key_file: %s }" % k)
    try:
        st = h1_post(r.port, "/generate", BODY, SECRET_HEAD)
        check(st.startswith(b"HTTP/1.1 200"), "pdshim: %r" % st, r)
        check_hop_removed((p, d), r)
    finally:
        pdtest.stop_all()
        os.unlink(k)


def hpack_new_name(name, value):
    """A literal header field without indexing, new name (RFC 7541 section 6.2.2), raw strings."""
    n, v = name.encode(), value.encode()
    assert len(n) < 127 and len(v) < 127
    return bytes([0x00, len(n)]) + n + bytes([len(v)]) + v


def h2_frames_until_end(sock, streams, timeout=10.0):
    """Reads frames until every stream of `streams` ended (END_STREAM on its DATA or HEADERS) or the server
    closes."""
    sock.settimeout(timeout)
    buf, out, left = b"", [], set(streams)
    while True:
        while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
            n = int.from_bytes(buf[:3], "big")
            f = (buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF, buf[9:9 + n])
            out.append(f)
            buf = buf[9 + n:]
            if f[0] in (0, 1) and f[1] & 1:
                left.discard(f[2])
            if not left:
                return out
        b = sock.recv(1 << 16)
        if not b:
            return out
        buf += b


def scenario_h2_connection_specific():
    """HTTP/2 requests with connection-specific fields are malformed (RFC 9113 section 8.2.2) and never
    forwarded: Connection (h2o's HPACK decoder ends the connection with GOAWAY PROTOCOL_ERROR) and
    Keep-Alive, Proxy-Connection (the router answers 400 on the stream, the connection stays usable); the
    router then still serves HTTP/2."""
    import h2flood
    from test_hardening import h2_frames
    p, d = sim("prefill"), sim("decode")
    r = router([p], [d])
    try:
        check(request(r.port, "POST", "/generate", BODY, headers={"X-Mark": "before"})[0] == 200, "warm-up", r)

        def marks():
            return [values(last_headers(w), "x-mark") for w in (p, d)]

        # Connection: the whole connection ends, GOAWAY PROTOCOL_ERROR (1), nothing of it forwarded.
        block = h2flood.request_block() + hpack_new_name("connection", "keep-alive, x-secret-hop") + \
            hpack_new_name("x-secret-hop", "1") + hpack_new_name("x-mark", "h2-connection")
        s = socket.create_connection((H, r.port))
        s.sendall(h2flood.PREFACE + h2flood.frame(4, 0, 0) + h2flood.frame(1, 0x4, 1, block) +
                  h2flood.frame(0, 0x1, 1, h2flood.BODY))
        fr = h2_frames(s)
        s.close()
        ga = [f for f in fr if f[0] == 7]
        check(len(ga) == 1 and int.from_bytes(ga[0][3][4:8], "big") == 1,
              "Connection over HTTP/2: no GOAWAY PROTOCOL_ERROR: %r" % [f[:3] for f in fr], r)
        check(not [f for f in fr if f[0] == 1 and f[2] == 1], "Connection over HTTP/2 was answered: %r" % fr, r)
        check(marks() == [["before"], ["before"]], "Connection over HTTP/2 reached a worker: %r" % marks(), r)
        # Keep-Alive and Proxy-Connection: 400 on the stream, not forwarded; the next stream is served.
        for name, value in (("keep-alive", "timeout=5"), ("proxy-connection", "keep-alive")):
            s = socket.create_connection((H, r.port))
            block = h2flood.request_block() + hpack_new_name(name, value) + hpack_new_name("x-mark", name)
            ok_block = h2flood.request_block() + hpack_new_name("x-mark", "after-" + name)
            s.sendall(h2flood.PREFACE + h2flood.frame(4, 0, 0) + h2flood.frame(1, 0x4, 1, block) +
                      h2flood.frame(0, 0x1, 1, h2flood.BODY) + h2flood.frame(1, 0x4, 3, ok_block) +
                      h2flood.frame(0, 0x1, 3, h2flood.BODY))
            fr = h2_frames_until_end(s, (1, 3))
            s.close()
            heads = {f[2]: f[3] for f in fr if f[0] == 1}
            data = b"".join(f[3] for f in fr if f[0] == 0 and f[2] == 1)
            # HPACK: the indexed :status 400 is 0x8c, 200 is 0x88 (RFC 7541 appendix A).
            check(1 in heads and heads[1][:1] == b"\x8c", "%s: stream 1 not 400: %r" % (name, fr), r)
            check(b"connection-specific" in data and name.encode() in data, "%s: body %r" % (name, data), r)
            check(3 in heads and heads[3][:1] == b"\x88", "%s: stream 3 not served: %r" % (name, fr), r)
            check(marks() == [["after-" + name]] * 2, "%s: %r" % (name, marks()), r)
        check(request(r.port, "POST", "/generate", BODY)[0] == 200, "HTTP/1 after", r)
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
