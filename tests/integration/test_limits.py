#!/usr/bin/env python3
"""Client-side limits (docs/operations.md, "Limits"): bodies above limits.max_body_bytes (413 in the
OpenAI error shape on every path), slow request heads and bodies (408), idle keep-alive connections,
the client connection cap, HTTP/2 stream concurrency, and HTTP/2 control-frame floods (SETTINGS, PING,
CONTINUATION). Raw HTTP/1 and raw HTTP/2 frames on real sockets, real pdrouter and pdsim processes.

Usage: test_limits.py SCENARIO   (one of the functions named scenario_*; ctest runs each separately)
"""

import json
import os
import re
import socket
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
    except ConnectionResetError:
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
    """A raw HTTP/2 client connection (prior knowledge) that collects the frames the server sends."""

    def __init__(self, r, settings=b""):
        self.s = connect(r)
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
        except ConnectionResetError:
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
                self.s.sendall(h2flood.frame(4, 1, 0))  # SETTINGS ACK, as a client must
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
        s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n")
        for _ in range(12):
            try:
                s.sendall(b"400\r\n" + b"a" * 1024 + b"\r\n")
            except OSError:
                break
            time.sleep(0.005)  # separate reads on the router's side (traffic shaping)
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


if __name__ == "__main__":
    pdtest.run_scenario(globals())
