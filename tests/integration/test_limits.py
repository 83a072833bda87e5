#!/usr/bin/env python3
"""Client-side limits (docs/operations.md, "Limits"): bodies above limits.max_body_bytes (413 in the
OpenAI error shape on every path), slow request heads and bodies (408), idle keep-alive connections,
the client connection cap, HTTP/2 stream concurrency, and HTTP/2 control-frame floods (SETTINGS, PING,
CONTINUATION), and batched requests past limits.max_batch_items. Raw HTTP/1 and raw HTTP/2 frames on real
sockets, real pdrouter and pdsim processes.

Usage: test_limits.py SCENARIO   (one of the functions named scenario_*; ctest runs each separately)
"""

import json
import os
import re
import socket
import ssl
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import h2flood  # noqa: E402
import pdtest  # noqa: E402
from pdtest import check, request  # noqa: E402
from test_router import BODIES, metric_value, metrics, router, sim, stats  # noqa: E402

H = "127.0.0.1"
BODY = json.dumps(BODIES["/generate"]).encode()


def health_ok(r, timeout=2.0):
    try:
        return request(r.port, "GET", "/health", timeout=timeout)[0] == 200
    except OSError:
        return False


def still_serving(r, what):
    """/health and an ordinary PD request are answered at once."""
    check(health_ok(r), "/health did not answer %s" % what, r)
    t0 = time.monotonic()
    st = request(r.port, "POST", "/generate", BODIES["/generate"], timeout=10)[0]
    check(st == 200 and time.monotonic() - t0 < 2.0, "an ordinary request %s: %d" % (what, st), r)


def connect(r, timeout=10.0):
    s = socket.create_connection((H, r.port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.settimeout(timeout)
    return s


def read_until_close(s):
    out = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                return out, True
            out += b
    except socket.timeout:
        return out, False
    except (ConnectionResetError, ssl.SSLError):  # ssl.SSLError: a TLS socket closed without close_notify
        return out, True


def split_response(raw):
    """(status, headers, body) of one HTTP/1 response with a Content-Length at the start of raw."""
    head, _, rest = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    hdrs = {}
    for l in lines[1:]:
        k, _, v = l.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    n = int(hdrs.get("content-length", len(rest)))
    return int(lines[0].split()[1]), hdrs, rest[:n]


def check_openai_error(r, status, hdrs, body, code, what):
    check(status == code, "%s: status %d, expected %d: %r" % (what, status, code, body[:300]), r)
    check(hdrs.get("content-type", "").startswith("application/json"), "%s: content-type %r" %
          (what, hdrs.get("content-type")), r)
    try:
        err = json.loads(body)["error"]
    except (ValueError, KeyError):
        err = None
    check(err is not None and err.get("code") == code and err.get("type") and err.get("message"),
          "%s: not the OpenAI error shape: %r" % (what, body[:300]), r)
    return err


# ---- raw HTTP/2 ----

def hpack_literal_name(name, value):
    """A literal header field without indexing, with a literal name (RFC 7541 6.2.2), raw strings."""
    n, v = name.encode(), value.encode()
    return bytes([0, len(n)]) + n + bytes([len(v)]) + v


def h2_request_block(path="/generate", content_length=None):
    b = h2flood.request_block(path)
    if content_length is not None:
        b += h2flood.hpack_literal(28, str(content_length))  # content-length (static 28)
    return b


class H2Conn:
    """A raw HTTP/2 client connection (prior knowledge, or sock: one already open, such as TLS with ALPN h2)
    that collects the frames the server sends."""

    def __init__(self, r, settings=b"", sock=None):
        self.s = sock if sock is not None else connect(r)
        self.buf = b""
        self.frames = []
        self.closed = False
        self.s.sendall(h2flood.PREFACE + h2flood.frame(4, 0, 0, settings))

    def send(self, data):
        self.s.sendall(data)

    def _read(self):
        try:
            b = self.s.recv(1 << 16)
        except socket.timeout:
            return False
        except (ConnectionResetError, ssl.SSLError):  # a TLS connection closed without close_notify
            b = b""
        if not b:
            self.closed = True
            return False
        self.buf += b
        while len(self.buf) >= 9:
            n = int.from_bytes(self.buf[:3], "big")
            if len(self.buf) < 9 + n:
                break
            f = (self.buf[3], self.buf[4], int.from_bytes(self.buf[5:9], "big") & 0x7FFFFFFF, self.buf[9:9 + n])
            self.frames.append(f)
            if f[0] == 4 and not f[1] & 1:
                try:
                    self.s.sendall(h2flood.frame(4, 1, 0))  # SETTINGS ACK, as a client must
                except OSError:
                    pass
            self.buf = self.buf[9 + n:]
        return True

    def wait(self, pred, timeout=10.0):
        """Reads until pred(frames) holds or the server closes; returns pred's value."""
        deadline = time.monotonic() + timeout
        while True:
            v = pred(self.frames)
            if v or self.closed or time.monotonic() > deadline:
                return v
            self.s.settimeout(max(0.05, deadline - time.monotonic()))
            self._read()

    def stream_ended(self, sid):
        return self.wait(lambda fr: any(f[2] == sid and f[0] in (0, 1) and f[1] & 1 or f[2] == sid and f[0] == 3
                                        for f in fr))

    def data_of(self, sid):
        return b"".join(f[3] for f in self.frames if f[0] == 0 and f[2] == sid)

    def goaway(self):
        g = [f for f in self.frames if f[0] == 7]
        if not g:
            return None
        p = g[0][3]
        return int.from_bytes(p[4:8], "big"), p[8:].decode("latin-1")

    def close(self):
        self.s.close()


def status_of(frames, sid):
    """The :status of stream sid's response (h2o writes it as a literal with an indexed name, or indexed)."""
    for f in frames:
        if f[0] == 1 and f[2] == sid:
            p = f[3]
            m = re.search(rb"[\x08\x48]\x03(\d\d\d)", p)
            if m:
                return int(m.group(1))
            for b, st in ((0x88, 200), (0x89, 204), (0x8a, 206), (0x8b, 304), (0x8c, 400), (0x8d, 404), (0x8e, 500)):
                if p[:1] == bytes([b]):
                    return st
    return None


# ---- 1. limits.max_body_bytes: 413 in the OpenAI shape on every path ----

def send_big_chunked(s):
    """A chunked POST /generate head, then 12 chunks of 1 KiB (past a 4096-byte body limit), until the
    router closes."""
    s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Transfer-Encoding: chunked\r\n\r\n")
    for _ in range(12):
        try:
            s.sendall(b"400\r\n" + b"a" * 1024 + b"\r\n")
        except OSError:
            break
        time.sleep(0.005)  # separate reads on the router's side (traffic shaping)


def scenario_body_too_large():
    """A body above limits.max_body_bytes gets 413 in the OpenAI error shape on HTTP/1 with a
    Content-Length (answered at the head, the connection closed, the body unread), HTTP/1 chunked whose
    chunks add up past the limit mid-body (closed), HTTP/2 with a content-length and HTTP/2 without one
    (DATA frames past the limit; the connection stays and serves the next stream); nothing reaches a
    worker, and the router serves other clients afterwards."""
    p, d = sim("prefill"), sim("decode")
    r = router([p], [d], config="limits: { max_body_bytes: 4096 }")
    try:
        big = b'{"text":"' + b"a" * 8000 + b'"}'
        # HTTP/1, Content-Length: the head is enough; the connection closes without the body being read.
        s = connect(r)
        s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                  % len(big) + big[:100])
        raw, closed = read_until_close(s)
        s.close()
        st, h, out = split_response(raw)
        check_openai_error(r, st, h, out, 413, "HTTP/1 Content-Length")
        check(closed and h.get("connection") == "close", "HTTP/1 Content-Length: connection left open %r" % h, r)
        # HTTP/1 chunked: small chunks that add up past the limit.
        s = connect(r)
        send_big_chunked(s)
        raw, closed = read_until_close(s)
        s.close()
        st, h, out = split_response(raw)
        check_openai_error(r, st, h, out, 413, "HTTP/1 chunked")
        check(closed, "HTTP/1 chunked: connection left open", r)
        # HTTP/2 with content-length.
        c = H2Conn(r)
        c.send(h2flood.frame(1, 0x4, 1, h2_request_block(content_length=len(big))) + h2flood.frame(0, 0, 1, big[:3000]))
        c.send(h2flood.frame(0, 0, 1, big[3000:6000]))
        c.send(h2flood.frame(0, 0x1, 1, big[6000:]))
        c.stream_ended(1)
        err = check_openai_error(r, status_of(c.frames, 1), {"content-type": "application/json"}, c.data_of(1), 413,
                                 "HTTP/2 content-length")
        # HTTP/2 without content-length: DATA frames past the limit.
        c.send(h2flood.frame(1, 0x4, 3, h2_request_block()) + h2flood.frame(0, 0, 3, big[:4000]) +
               h2flood.frame(0, 0x1, 3, big[4000:]))
        c.stream_ended(3)
        check_openai_error(r, status_of(c.frames, 3), {"content-type": "application/json"}, c.data_of(3), 413,
                           "HTTP/2 without content-length")
        # The same HTTP/2 connection serves an ordinary stream next.
        c.send(h2flood.frame(1, 0x4, 5, h2_request_block()) + h2flood.frame(0, 0x1, 5, BODY))
        c.stream_ended(5)
        check(status_of(c.frames, 5) == 200 and b"text" in c.data_of(5), "HTTP/2 after a 413: %r" %
              (c.frames[-3:],), r)
        c.close()
        check("max_body_bytes" in err["message"], "message does not name the limit: %r" % err, r)
        check(stats(p)["requests"] == 1, "a refused body reached the prefill: %r" % stats(p), r)
        still_serving(r, "after the oversized bodies")
    finally:
        pdtest.stop_all()


def send_all_then_read(port, data, out, i):
    """A client that writes its whole request before it reads, as undici and the OpenAI SDKs do: the status
    line it reads, or how the connection failed."""
    s = socket.create_connection((H, port), timeout=60)
    try:
        s.sendall(data)
        raw, _ = read_until_close(s)
        out[i] = raw.split(b"\r\n", 1)[0].decode("latin-1") if raw else "closed with no answer"
    except OSError as e:
        out[i] = "%s while sending or reading" % type(e).__name__
    finally:
        s.close()


def parallel_status_lines(port, data, n=50):
    out = [None] * n
    ts = [threading.Thread(target=send_all_then_read, args=(port, data, out, i)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    return out


def scenario_early_answers():
    """Answers given before the request is read whole reach a client still sending (lingering close): 50
    clients in parallel each write a 35 MiB body above the 32 MiB limit, then a 32 KiB header with a body,
    then a malformed head with a body, all before reading, and every one reads its status (413, 431, 400),
    not a reset. The dropped bytes are counted. A client that goes on sending past
    limits.max_lingering_bytes is cut."""
    p, d = sim("prefill"), sim("decode")
    r = router([p], [d])
    big = 35 << 20
    cases = [
        ("413", b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
         b"Content-Length: %d\r\n\r\n" % big + b"x" * big),
        ("431", b"POST /generate HTTP/1.1\r\nHost: x\r\nX-Big: " + b"h" * (32 << 10) +
         b"\r\nContent-Length: 1048576\r\n\r\n" + b"x" * (1 << 20)),
        ("400", b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\nContent-Length: 7\r\n\r\n" +
         b"x" * (1 << 20)),
    ]
    for code, data in cases:
        n = 50 if code == "413" else 20
        before = metric_value(metrics(r), "pdr_http_lingering_closes_total") or 0
        got = parallel_status_lines(r.port, data, n)
        bad = [g for g in got if g is None or not g.startswith("HTTP/1.1 " + code)]
        check(not bad, "%d of %d clients did not read the %s: %r" % (len(bad), n, code, bad[:5]), r)
        # The loop that answered counts right after its send: the client may read the answer first.
        pdtest.poll_until(lambda: (metric_value(metrics(r), "pdr_http_lingering_closes_total") or 0) - before == n,
                          10, "%d lingering closes counted for the %s" % (n, code))
    pdtest.poll_until(lambda: (metric_value(metrics(r), "pdr_http_lingering_discarded_bytes_total") or 0) >=
                      50 * (big - (32 << 20)), 10, "the dropped bytes counted")
    still_serving(r, "after the early answers")
    pdtest.stop_all()

    # A client that goes on past limits.max_lingering_bytes is reset (and counted).
    p, d = sim("prefill"), sim("decode")
    r = router([p], [d], config="limits: { max_lingering_bytes: 1048576 }")
    s = socket.create_connection((H, r.port), timeout=30)
    s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % big)
    cut = False
    try:
        for _ in range(big >> 16):
            s.sendall(b"x" * 65536)
    except (ConnectionResetError, BrokenPipeError):
        cut = True
    s.close()
    check(cut, "a client sending 35 MiB past a 1 MiB lingering bound was not cut", r)
    pdtest.poll_until(lambda: (metric_value(metrics(r), "pdr_http_lingering_cut_total") or 0) == 1, 10,
                      "the cut to be counted")
    still_serving(r, "after the cut")


class H2Client:
    """An HTTP/2 client with flow control (python3-h2) on a raw socket, for bodies larger than a window."""

    def __init__(self, port):
        import h2.config
        import h2.connection
        self.s = socket.create_connection((H, port), timeout=10)
        self.c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.c.initiate_connection()
        self.s.sendall(self.c.data_to_send())
        self.status, self.data, self.ended, self.reset = {}, {}, set(), {}
        self.closed = False

    def pump(self, timeout=0.05):
        import h2.events
        self.s.settimeout(timeout)
        try:
            b = self.s.recv(1 << 16)
        except (socket.timeout, BlockingIOError):
            return
        except OSError:
            b = b""
        if not b:
            self.closed = True
            return
        for e in self.c.receive_data(b):
            if isinstance(e, h2.events.ResponseReceived):
                self.status[e.stream_id] = int(dict(e.headers)[":status"])
            elif isinstance(e, h2.events.DataReceived):
                self.data[e.stream_id] = self.data.get(e.stream_id, b"") + e.data
                self.c.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
            elif isinstance(e, h2.events.StreamEnded):
                self.ended.add(e.stream_id)
            elif isinstance(e, h2.events.StreamReset):
                self.reset[e.stream_id] = e.error_code
        out = self.c.data_to_send()
        if out:
            self.s.sendall(out)

    def open(self, path="/generate"):
        sid = self.c.get_next_available_stream_id()
        self.c.send_headers(sid, [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "x"),
                                  ("content-type", "application/json")])
        self.s.sendall(self.c.data_to_send())
        return sid

    def send(self, sid, n, end=False, stop=None):
        """Sends n body bytes on sid as the windows allow; stops early when stop() holds."""
        import h2.exceptions
        while n > 0:
            if stop is not None and stop():
                return
            w = min(n, self.c.local_flow_control_window(sid), self.c.max_outbound_frame_size)
            if w <= 0:
                self.pump(1.0)
                check(not self.closed, "the router closed the connection while a body was sent", self.r)
                continue
            try:
                self.c.send_data(sid, b"x" * w)
            except h2.exceptions.StreamClosedError:
                return
            n -= w
            self.s.sendall(self.c.data_to_send())
            self.pump(0)
        if end:
            self.c.end_stream(sid)
            self.s.sendall(self.c.data_to_send())

    def wait(self, pred, what, timeout=10.0):
        deadline = time.monotonic() + timeout
        while not pred():
            check(time.monotonic() < deadline and not self.closed, "timed out or closed waiting for %s" % what,
                  self.r)
            self.pump(0.1)


def scenario_h2_body_budget():
    """HTTP/2 request bodies are bounded: by connection (limits.h2_max_connection_body_bytes), over every
    connection (limits.max_body_memory_bytes), and in time (timeouts.client_body_ms). The stream whose DATA
    would pass a budget is answered 503; the bodies below it go on; past the router's budget the biggest
    bodies still arriving are reset (RST_STREAM CANCEL) until there is room for a whole body again; a body
    that pauses is reset and the connection goes on; the bytes held (pdr_h2_body_bytes_held) follow it all
    and go back to zero."""
    k = 128 << 10
    p, d = sim("prefill"), sim("decode")
    r = router([p], [d], config="threads: 1\n"
                                "limits: { max_body_bytes: 1048576, h2_max_connection_body_bytes: 2097152, "
                                "max_body_memory_bytes: 2883584 }\ntimeouts: { client_body_ms: 5000 }")
    held = lambda: metric_value(metrics(r), "pdr_h2_body_bytes_held")  # noqa: E731
    over = lambda: metric_value(metrics(r), "pdr_h2_bodies_over_budget_total") or 0  # noqa: E731
    evicted = lambda: metric_value(metrics(r), "pdr_h2_bodies_evicted_total") or 0  # noqa: E731
    a = H2Client(r.port)
    a.r = r
    # Four bodies (640, 512, 512 and 384 KiB) fill the connection's 2 MiB; the fifth stream's DATA would
    # pass it: 503.
    sizes = (5 * k, 4 * k, 4 * k, 3 * k)
    sids = []
    for n in sizes:
        sid = a.open()
        a.send(sid, n)
        sids.append(sid)
    fifth = a.open()
    a.send(fifth, 4 * k, stop=lambda: fifth in a.status)
    a.wait(lambda: fifth in a.ended, "the fifth stream's answer")
    check(a.status.get(fifth) == 503 and b"h2_max_connection_body_bytes" in a.data.get(fifth, b""),
          "the stream past the connection's budget: %r %r" % (a.status.get(fifth), a.data.get(fifth, b"")[:200]), r)
    check(not any(s in a.status for s in sids), "a body below the budget was answered early: %r" % a.status, r)
    check(over() == 1, "over-budget count %r" % over(), r)
    check(evicted() == 0, "bodies reset for the connection's budget: %r" % evicted(), r)
    pdtest.poll_until(lambda: held() == sum(sizes), 5, "4 bodies held, the refused one released")
    # A second connection: 2 MiB are held by the first, 2.75 MiB is the router's budget. A small body goes
    # on; a whole one (1 MiB) would pass the budget: 503, and the biggest bodies still arriving are reset
    # until the router holds no more than 2.75 MiB less a whole body (1 MiB and a frame): the 640 KiB body
    # first (and a 512 KiB one when the refused body was not released yet), never the small ones.
    b = H2Client(r.port)
    b.r = r
    b1 = b.open()
    b.send(b1, k)
    b2 = b.open()
    b.send(b2, 8 * k, stop=lambda: b2 in b.status)
    b.wait(lambda: b2 in b.ended, "the answer past the router's budget")
    check(b.status.get(b2) == 503 and b"max_body_memory_bytes" in b.data.get(b2, b""),
          "the stream past the router's budget: %r" % b.status.get(b2), r)
    check(over() == 2, "over-budget count %r" % over(), r)
    a.wait(lambda: sids[0] in a.reset, "the biggest body's reset")
    check(a.reset[sids[0]] == 8, "the biggest body: code %r" % a.reset[sids[0]], r)
    pdtest.poll_until(lambda: held() <= 2883584 - 1048576 - 16384, 5, "room for a whole body")
    a.pump(0.2)
    check(sids[3] not in a.reset and b1 not in b.reset, "a small body was reset: %r %r" % (a.reset, b.reset), r)
    check(evicted() == len(a.reset) and len(a.reset) in (1, 2), "evictions %r, resets %r" % (evicted(), a.reset), r)
    # Room is back for a whole body while the others still arrive.
    b3 = b.open()
    b.send(b3, 8 * k, end=True)
    b.wait(lambda: b3 in b.ended, "a whole body once room is back")
    check(b.status.get(b3) not in (None, 503) and b"max_body_memory_bytes" not in b.data.get(b3, b""),
          "room is back, yet %r %r" % (b.status.get(b3), b.data.get(b3, b"")[:200]), r)
    # The first connection's other bodies end: each is answered (not 503) and released.
    left = [s for s in sids if s not in a.reset]
    for sid in left:
        a.send(sid, 0, end=True)
    a.wait(lambda: all(s in a.ended for s in left), "the bodies' answers")
    check(all(a.status[s] != 503 for s in left), "bodies below the budget: %r" % a.status, r)
    a.s.close()
    pdtest.poll_until(lambda: held() == k, 5, "only the second connection's small body held")
    # A body that pauses past timeouts.client_body_ms is reset, the connection goes on.
    b.wait(lambda: b1 in b.reset, "the paused body's reset", timeout=15)
    check(b.reset[b1] == 8, "paused body: code %r" % b.reset[b1], r)
    check((metric_value(metrics(r), "pdr_h2_body_timeouts_total") or 0) == 1, "timeouts counted", r)
    g = b.open("/health")
    b.c.end_stream(g)
    b.s.sendall(b.c.data_to_send())
    b.wait(lambda: g in b.ended, "a request after the reset")
    check(b.status.get(g) is not None, "a stream after the reset went unanswered", r)
    b.s.close()
    pdtest.poll_until(lambda: held() == 0, 5, "nothing held")
    still_serving(r, "after the body budgets")


# ---- 2, 3. slow heads and bodies (408), idle keep-alive connections ----

def timed_out(r, s, t0, lo, hi, what):
    """Reads s to its end: a 408 in the OpenAI shape, then the close, between lo and hi seconds after t0."""
    raw, closed = read_until_close(s)
    took = time.monotonic() - t0
    s.close()
    check(raw, "%s: closed without an answer after %.2fs" % (what, took), r)
    st, h, out = split_response(raw)
    err = check_openai_error(r, st, h, out, 408, what)
    check(closed and lo <= took <= hi, "%s: 408 after %.2fs (expected %.1f..%.1f), closed %s" %
          (what, took, lo, hi, closed), r)
    return err


def slowloris(s):
    """Sends a request head on s one byte every 100 ms, never all of it, from a thread; returns the event
    that stops it and the thread."""
    head = b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Pad: " + b"a" * 100
    stop = threading.Event()

    def drip():
        for b in head:
            if stop.wait(0.1):  # the attacker's pacing (traffic shaping)
                return
            try:
                s.sendall(bytes([b]))
            except (OSError, ValueError):  # ValueError: a TLS socket closed meanwhile
                return
    th = threading.Thread(target=drip)
    th.start()
    return stop, th


def scenario_client_timeouts():
    """timeouts.client_header_ms: a head sent a byte at a time (slowloris) and a connection that sends
    nothing get 408 in the OpenAI shape and are closed at the deadline; timeouts.client_body_ms: a body that
    stops gets 408, one that keeps coming slowly (pauses below the limit, longer than it in all) is served;
    other clients are served meanwhile, and the counts are in /metrics."""
    p, d = sim("prefill"), sim("decode")
    r = router([p], [d], config="threads: 1\ntimeouts: { client_header_ms: 600, client_body_ms: 600 }")
    try:
        # Slowloris: one byte every 100 ms, never a complete head.
        s, t0 = connect(r), time.monotonic()
        stop, th = slowloris(s)
        still_serving(r, "during a slowloris")
        err = timed_out(r, s, t0, 0.5, 2.0, "slowloris")
        stop.set()
        th.join()
        check("client_header_ms" in err["message"], err, r)
        # Nothing at all.
        s, t0 = connect(r), time.monotonic()
        timed_out(r, s, t0, 0.5, 2.0, "a silent connection")
        # A body that stops half-way.
        s, t0 = connect(r), time.monotonic()
        s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                  % len(BODY) + BODY[:10])
        err = timed_out(r, s, t0, 0.5, 2.0, "a stalled body")
        check("client_body_ms" in err["message"], err, r)
        # A body that keeps coming, 300 ms between pieces, 1.5 s in all: served.
        s = connect(r)
        s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                  % len(BODY))
        for i in range(0, len(BODY), len(BODY) // 5 + 1):
            time.sleep(0.3)  # the client's pacing (traffic shaping)
            s.sendall(BODY[i:i + len(BODY) // 5 + 1])
        buf = b""
        while b"\r\n\r\n" not in buf or len(buf.partition(b"\r\n\r\n")[2]) < int(
                re.search(rb"(?i)content-length: (\d+)", buf).group(1)):
            b = s.recv(65536)
            check(b, "closed before the answer to a slow body: %r" % buf, r)
            buf += b
        s.close()
        st, _, out = split_response(buf)
        check(st == 200 and b"text" in out, "a slow but steady body: %d %r" % (st, out[:200]), r)
        m = metrics(r)
        check(metric_value(m, "pdr_http_client_header_timeouts_total") == 2 and
              metric_value(m, "pdr_http_client_body_timeouts_total") == 1, "not counted", r)
        still_serving(r, "after the timeouts")
    finally:
        pdtest.stop_all()


def keepalive_request(s):
    """One request on an open keep-alive connection; returns its status."""
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    buf = b""
    while b"\r\n\r\n" not in buf or not buf.endswith(b"ok\n"):
        b = s.recv(65536)
        if not b:
            raise AssertionError("closed: %r" % buf)
        buf += b
    return int(buf.split(b" ")[1])


def scenario_keepalive_idle():
    """timeouts.keepalive_idle_ms: an idle HTTP/1 keep-alive connection is closed after it without an
    answer, one that keeps sending requests stays open longer than that; an idle HTTP/2 connection gets
    GOAWAY after it (h2o's idle timeout). limits.max_idle_client_connections: past it the oldest idle
    connection is closed first."""
    p, d = sim("prefill"), sim("decode")
    # 1.5 s of idle time: the busy client's 0.3 s gaps and the idle cap's 0.3 s reads stay far inside it
    # on a loaded machine.
    r = router([p], [d], config="threads: 1\ntimeouts: { keepalive_idle_ms: 1500 }\n"
               "limits: { max_idle_client_connections: 2 }")
    try:
        s = connect(r)
        check(keepalive_request(s) == 200, "first request", r)
        t0 = time.monotonic()
        raw, closed = read_until_close(s)
        took = time.monotonic() - t0
        s.close()
        check(closed and raw == b"" and 1.4 <= took <= 4.0, "idle connection: %r closed %s after %.2fs" %
              (raw, closed, took), r)
        # Busy: a request every 300 ms for 3 s, the same connection.
        s = connect(r)
        for _ in range(10):
            check(keepalive_request(s) == 200, "a kept-alive request", r)
            time.sleep(0.3)  # the client's pacing
        s.close()
        # HTTP/2: GOAWAY after the idle time.
        c, t0 = H2Conn(r), time.monotonic()
        c.wait(lambda fr: c.goaway() is not None, timeout=5)
        took = time.monotonic() - t0
        check(c.goaway() is not None and 1.4 <= took <= 4.5, "HTTP/2 idle: %r after %.2fs" % (c.goaway(), took), r)
        c.close()
        # The idle cap: three idle connections, the oldest is closed at once when the third goes idle.
        # "At once" is read as within 0.7 s, half the idle time; a newer connection closed by the cap would
        # be closed already when it is read, so a short read of each tells.
        cs = [connect(r, timeout=0.7) for _ in range(3)]
        for c in cs:
            check(keepalive_request(c) == 200, "idle-cap request", r)
        raw, closed = read_until_close(cs[0])
        check(closed and raw == b"", "the oldest idle connection was not closed", r)
        for c in cs[1:]:
            c.settimeout(0.1)
            _, closed = read_until_close(c)
            check(not closed, "a newer idle connection was closed", r)
        for c in cs:
            c.close()
        check(metric_value(metrics(r), "pdr_http_keepalive_closed_total") >= 2, "not counted", r)
        still_serving(r, "after idle connections")
    finally:
        pdtest.stop_all()


# ---- 4. the client connection cap ----

def scenario_max_client_connections():
    """limits.max_client_connections: with that many connections open, accepting pauses (the kernel's
    backlog holds the next one: its request waits, unanswered), and resumes once one closes; the admin
    port is not counted."""
    p, d = sim("prefill"), sim("decode")
    r = router([p], [d], config="threads: 1\nlimits: { max_client_connections: 3 }")
    try:
        held = [connect(r) for _ in range(3)]
        for c in held:
            check(keepalive_request(c) == 200, "a held connection's request", r)
        extra = connect(r, timeout=0.5)
        extra.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            got = extra.recv(100)
        except socket.timeout:
            got = None
        check(got is None, "a connection past the cap was served: %r" % got, r)
        st = request(r.ports["admin"], "GET", "/health", timeout=2)[0] if "admin" in r.ports else 200
        check(st in (200, 404), "the admin port is held back too: %d" % st, r)
        held.pop().close()
        extra.settimeout(5)
        t0 = time.monotonic()
        buf = b""
        while b"ok\n" not in buf:
            b = extra.recv(100)
            check(b, "the waiting connection was closed", r)
            buf += b
        check(buf.startswith(b"HTTP/1.1 200") and time.monotonic() - t0 < 1.0,
              "the waiting connection once one closed: %r" % buf, r)
        extra.close()
        for c in held:
            c.close()
        pdtest.poll_until(lambda: health_ok(r), 5, "/health")
        check(metric_value(metrics(r), "pdr_accept_paused_total") >= 1, "not counted", r)
    finally:
        pdtest.stop_all()


# ---- 6. HTTP/2 control-frame floods ----

def scenario_h2_control_floods():
    """limits.h2_max_control_frames: a SETTINGS flood, a PING flood and a CONTINUATION flood (empty
    frames after a HEADERS without END_HEADERS) each get GOAWAY ENHANCE_YOUR_CALM naming the limit and
    are closed; a client sending fewer control frames than the limit keeps its connection and is
    served; ordinary clients are served meanwhile. A connection upgraded from HTTP/1 (Upgrade: h2c) is
    followed as well: served, and closed for a PING flood."""
    p, d = sim("prefill"), sim("decode")
    r = router([p], [d], config="limits: { h2_max_control_frames: 300 }")
    try:
        for attack in ("settings", "ping", "continuation"):
            c = H2Conn(r)
            try:
                for i in range(10):
                    c.send(h2flood.control_burst(attack, 100, i == 0))
            except OSError:
                pass
            c.wait(lambda fr: False, timeout=5)  # until the router closes
            ga = c.goaway()
            check(c.closed and ga is not None and ga[0] == 0xB and "limits.h2_max_control_frames" in ga[1],
                  "%s flood: closed %s, GOAWAY %r" % (attack, c.closed, ga), r)
            c.close()
            still_serving(r, "after a %s flood" % attack)
        # Below the limit: 100 PINGs, all answered, and a request on the same connection.
        c = H2Conn(r)
        c.send(h2flood.frame(6, 0, 0, b"abcdefgh") * 100)
        c.wait(lambda fr: sum(1 for f in fr if f[0] == 6 and f[1] & 1) >= 100)
        c.send(h2flood.frame(1, 0x4, 1, h2_request_block()) + h2flood.frame(0, 0x1, 1, BODY))
        c.stream_ended(1)
        check(not c.closed and status_of(c.frames, 1) == 200, "a client below the limit: %r" % (c.frames[-3:],), r)
        c.close()
        check(metric_value(metrics(r), "pdr_h2_control_floods_total") == 3, "not counted", r)
        # Upgrade: h2c: the upgraded connection is followed as well. Its first request is answered over
        # HTTP/2 (stream 1), and a PING flood on it is closed with the GOAWAY.
        for flood in (False, True):
            s = connect(r)
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\n"
                      b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n")
            buf = b""
            while b"\r\n\r\n" not in buf:
                b = s.recv(65536)
                check(b, "closed before an answer to Upgrade: h2c: %r" % buf, r)
                buf += b
            check(buf.startswith(b"HTTP/1.1 101"), "Upgrade: h2c answered %r" % buf[:80], r)
            c = H2Conn(r, sock=s)
            c.buf = buf.partition(b"\r\n\r\n")[2]  # h2o's SETTINGS may have come with the 101
            c.stream_ended(1)
            check(status_of(c.frames, 1) == 200 and b"ok" in c.data_of(1), "upgraded stream 1: %r" %
                  (c.frames[-3:],), r)
            if flood:
                try:
                    for i in range(10):
                        c.send(h2flood.control_burst("ping", 100, False))
                except OSError:
                    pass
                c.wait(lambda fr: False, timeout=5)  # until the router closes
                ga = c.goaway()
                check(c.closed and ga is not None and ga[0] == 0xB and "limits.h2_max_control_frames" in ga[1],
                      "PING flood after Upgrade: h2c: closed %s, GOAWAY %r" % (c.closed, ga), r)
            else:
                c.send(h2flood.frame(1, 0x4, 3, h2_request_block()) + h2flood.frame(0, 0x1, 3, BODY))
                c.stream_ended(3)
                check(status_of(c.frames, 3) == 200, "a PD request after Upgrade: h2c: %r" % (c.frames[-3:],), r)
            c.close()
        check(metric_value(metrics(r), "pdr_h2_control_floods_total") == 4, "the upgraded flood not counted", r)
    finally:
        pdtest.stop_all()


def scenario_h2_unknown_frames():
    """Frames of unknown types carry no request: they take tokens of limits.h2_max_control_frames, and a
    flood of 16 KB ones gets GOAWAY ENHANCE_YOUR_CALM and is closed (counted). They never reach h2o,
    which would write a line to stderr for each: 100 of them and a request on the same connection leave
    the log as it was, and so do the DATA frames a client goes on sending after its body was refused."""
    p, d = sim("prefill"), sim("decode")
    r = router([p], [d], config="limits: { h2_max_control_frames: 300, max_body_bytes: 4096 }")

    def log_lines():
        with open(r.log_path) as f:
            return f.read().splitlines()
    try:
        before = len(log_lines())
        c = H2Conn(r)
        c.send(h2flood.control_burst("unknown", 100, True))
        c.send(h2flood.frame(1, 0x4, 1, h2_request_block()) + h2flood.frame(0, 0x1, 1, BODY))
        c.stream_ended(1)
        check(not c.closed and status_of(c.frames, 1) == 200, "100 unknown frames, then a request: %r" %
              (c.frames[-3:],), r)
        # A body over the limit: the DATA that follows the 413 is dropped by the router, not by h2o.
        c.send(h2flood.frame(1, 0x4, 3, h2_request_block()) + b"".join(h2flood.frame(0, 0, 3, b"z" * 4000)
                                                                        for _ in range(8)))
        c.stream_ended(3)
        check(status_of(c.frames, 3) == 413, "a body over the limit: %r" % (c.frames[-3:],), r)
        c.send(b"".join(h2flood.frame(0, 0, 3, b"z" * 4000) for _ in range(20)) + h2flood.frame(0, 0x1, 3, b"z"))
        c.send(h2flood.frame(6, 0, 0, b"12345678"))
        c.wait(lambda fr: any(f[0] == 6 and f[1] & 1 for f in fr))  # the PING after them is answered
        c.close()
        still_serving(r, "after unknown frames")
        check(len(log_lines()) - before < 5 and not any("skipping frame" in l for l in log_lines()),
              "lines written for ignored frames: %r" % log_lines()[before:before + 10], r)
        # The flood: 1000 frames of 16 KB against a bucket of 300.
        c = H2Conn(r)
        try:
            for i in range(10):
                c.send(h2flood.control_burst("unknown", 100, i == 0))
        except OSError:
            pass
        c.wait(lambda fr: False, timeout=5)  # until the router closes
        ga = c.goaway()
        check(c.closed and ga is not None and ga[0] == 0xB and "limits.h2_max_control_frames" in ga[1],
              "unknown-frame flood: closed %s, GOAWAY %r" % (c.closed, ga), r)
        c.close()
        still_serving(r, "after an unknown-frame flood")
        check(metric_value(metrics(r), "pdr_h2_control_floods_total") == 1, "the flood not counted", r)
        lines = log_lines()[before:]
        check(len(lines) < 10 and not any("skipping frame" in l for l in lines),
              "%d lines written for an unknown-frame flood: %r" % (len(lines), lines[:10]), r)
    finally:
        pdtest.stop_all()


# ---- 5. HTTP/2 stream concurrency ----

def scenario_h2_streams(config=""):
    """limits.h2_max_concurrent_streams: of 120 streams opened at once on one connection, h2o refuses those
    past 100 open with RST_STREAM REFUSED_STREAM (RFC 9113 5.1.2; 100 is what it advertises), and the
    router processes at most the limit at a time (its pdr_inflight_requests gauge never shows more; without
    the limit it reaches tens); all 100 are answered. config: more YAML (test_h2_conformance.py runs it
    with h2_nghttp2: true)."""
    p, d = sim("prefill"), sim("decode", "--decode-us-per-token", "20000")
    r = router([p], [d], config=config + "threads: 1\nlimits: { h2_max_concurrent_streams: 5 }")
    try:
        c = H2Conn(r)
        c.send(b"".join(h2flood.frame(1, 0x4, 1 + 2 * i, h2_request_block()) + h2flood.frame(0, 0x1, 1 + 2 * i, BODY)
                        for i in range(120)))
        peak, done = [0], threading.Event()

        def watch():
            while not done.is_set():
                peak[0] = max(peak[0], metric_value(metrics(r), "pdr_inflight_requests") or 0)
        th = threading.Thread(target=watch)
        th.start()
        try:
            c.wait(lambda fr: len({f[2] for f in fr if f[2] and (f[0] == 3 or f[0] in (0, 1) and f[1] & 1)}) >= 120,
                   timeout=60)
        finally:
            done.set()
            th.join()
        refused = {f[2] for f in c.frames if f[0] == 3 and int.from_bytes(f[3][:4], "big") == 7}
        answered = {f[2] for f in c.frames if f[0] in (0, 1) and f[1] & 1} - refused
        check(len(refused) == 20 and len(answered) == 100, "refused %d, answered %d" % (len(refused), len(answered)), r)
        check(1 <= peak[0] <= 5, "the router had %d requests in flight at once" % peak[0], r)
        c.close()
        still_serving(r, "after the streams")
    finally:
        pdtest.stop_all()


def scenario_batch_items():
    """limits.max_batch_items, under protocol sglang and pdshim (a ticket per item): a batch at the cap is
    served (one room and ticket per item); one item more is answered 400 in the OpenAI error shape naming
    the limit, on /generate and /v1/completions, and counted; a 32 MB body of millions of items is refused
    within a second or two without the router's memory growing more than a few times the body (the
    per-item data, rooms, tickets and legs' bodies, is never built)."""
    from shimtest import keyfile
    key = keyfile(b"K" * 16 + os.urandom(16).hex().encode())
    cap = 64
    for protocol in ("sglang", "pdshim"):
        keys = ("--ticket-key", key) if protocol == "pdshim" else ()
        p, d = sim("prefill", *keys), sim("decode", *keys)
        extra = "\nticket: { key_file: %s }" % key if protocol == "pdshim" else ""
        r = router([p], [d], config="protocol: %s%s\nlimits: { max_batch_items: %d }" % (protocol, extra, cap))
        try:
            items = ["w%d" % i for i in range(cap)]
            st, _, data = request(r.port, "POST", "/generate", {"text": items, "sampling_params": {"max_new_tokens": 1}})
            check(st == 200 and len(json.loads(data)) == cap, "%s: a batch at the cap: %d %r" % (protocol, st, data[:300]), r)
            for path, body in (("/generate", {"text": items + ["one more"], "sampling_params": {"max_new_tokens": 1}}),
                               ("/v1/completions", {"prompt": items + ["one more"], "max_tokens": 1})):
                st, _, data = request(r.port, "POST", path, body)
                e = json.loads(data).get("error", {}) if data.startswith(b"{") else {}
                check(st == 400 and e.get("type") == "invalid_request_error" and e.get("code") == 400 and
                      "limits.max_batch_items" in e.get("message", ""),
                      "%s %s: a batch over the cap: %d %r" % (protocol, path, st, data[:300]), r)
            # The amplification: 8 million items in a 32 MB body (each item 4 bytes: "a",).
            n = (32 * 1000 * 1000 - 64) // 4
            big = b'{"text":[' + b'"a",' * (n - 1) + b'"a"],"sampling_params":{"max_new_tokens":1}}'
            base = pdtest.peak_rss_mib(r.proc.pid)
            t0 = time.monotonic()
            st, _, data = request(r.port, "POST", "/generate", big, headers={"Content-Type": "application/json"},
                                  timeout=60)
            took = time.monotonic() - t0
            grew = pdtest.peak_rss_mib(r.proc.pid) - base
            check(st == 400 and b"limits.max_batch_items" in data, "%s: the 32 MB batch: %d %r" % (protocol, st, data[:300]), r)
            # Each of a few copies of the body (h2o's buffer, the request, the JSON scan) is 32 MB; building
            # the per-item data took the router past 1.4 GB and the loop 15 s.
            check(took < 5.0 and grew < 300, "%s: the 32 MB batch took %.2f s, peak RSS +%.0f MiB" % (protocol, took, grew), r)
            m = metrics(r)
            check(metric_value(m, "pdr_batch_too_large_total") == 3, "%s: refusals not counted" % protocol, r)
            if protocol == "pdshim":
                check(metric_value(m, "pdr_tickets_signed_total") == cap, "%s: tickets signed" % protocol, r)
            check(stats(p)["requests"] == 1 and stats(d)["requests"] == 1,
                  "%s: a refused batch reached a worker" % protocol, r)
        finally:
            pdtest.stop_all()


if __name__ == "__main__":
    pdtest.run_scenario(globals())
