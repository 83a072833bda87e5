#!/usr/bin/env python3
"""HTTP/2 conformance of the router's listeners, in the manner of h2spec (which Debian does not ship):
connection errors, stream errors, stream states, flow control, HPACK and frame sizes of RFC 9113 §4-§6
and RFC 7541, each sent as raw frames on a connection of its own. Every connection error must end that
connection with a GOAWAY carrying the error code and nothing else; every stream error must reset that
stream and leave the connection serving; and the router must live through all of it.

Each scenario is one way in: prior knowledge on the data port (prior), `Upgrade: h2c` (upgrade), TLS with
ALPN h2 (tls) and the admin port (admin), where no token is needed because the frames never reach a
handler. The sanitizer build runs the same scenarios, and the router's exit status there fails on a leak.

Usage: test_h2_conformance.py SCENARIO   (prior | upgrade | tls | admin)
"""

import os
import tempfile
import socket
import ssl
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check, request  # noqa: E402
from test_router import router, sim  # noqa: E402

H = "127.0.0.1"
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# Frame types and error codes (RFC 9113 §6, §7).
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR = 0x0, 0x1, 0x2, 0x3
STREAM_CLOSED, FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL, COMPRESSION_ERROR = 0x5, 0x6, 0x7, 0x8, 0x9
END_STREAM, ACK, END_HEADERS, PADDED, PRIO = 0x1, 0x1, 0x4, 0x8, 0x20


def frame(ftype, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", stream) + payload


def lit(name, value):
    """A literal header field without indexing, with a literal name (RFC 7541 §6.2.2), raw strings."""
    n, v = name.encode(), value.encode()
    assert len(n) < 127 and len(v) < 127
    return b"\x00" + bytes([len(n)]) + n + bytes([len(v)]) + v


def get_block(path="/health", extra=b""):
    # :method GET (static 2), :scheme http (static 6), :path (literal, indexed name 4), :authority.
    return b"\x82\x86" + b"\x04" + bytes([len(path)]) + path.encode() + b"\x01\x01x" + extra


def post_block(path="/generate"):
    # :method POST (static 3), content-type application/json (name static 31).
    return b"\x83\x86" + b"\x04" + bytes([len(path)]) + path.encode() + b"\x01\x01x" + b"\x0f\x10" + \
        bytes([16]) + b"application/json"


def settings(*pairs):
    return frame(SETTINGS, 0, 0, b"".join(struct.pack(">HI", k, v) for k, v in pairs))


def wu(stream, inc):
    return frame(WINDOW_UPDATE, 0, stream, struct.pack(">I", inc))


# ---- the cases ----
#
# (name, frames to send after the connection's preface and SETTINGS, expectation). Expectations:
#   ("conn", codes)          a GOAWAY with one of codes, then the connection closes
#   ("stream", sid, codes)   RST_STREAM on sid with one of codes (or a GOAWAY with one of codes: RFC 9113
#                            allows treating a stream error as a connection error), and the connection
#                            still answers a PING when it was only a stream error
#   ("ok",)                  the connection still answers a PING and serves a request
# Stream ids start at 3 so that the same frames fit the upgraded connection, whose stream 1 is the
# upgrade request.

HPACK_GARBAGE = b"\xff\xff\xff\xff\xff\xff"

CASES = [
    # §4.1-4.2 frame format and size
    ("DATA larger than SETTINGS_MAX_FRAME_SIZE", frame(DATA, 0, 3, b"x" * 16385), ("conn", [FRAME_SIZE_ERROR])),
    ("HEADERS larger than SETTINGS_MAX_FRAME_SIZE", frame(HEADERS, END_HEADERS, 3, b"\x82" * 16385),
     ("conn", [FRAME_SIZE_ERROR])),
    ("unknown frame type", frame(0x20, 0, 0, b"ignored") + frame(0x21, 0xff, 3, b"x" * 20), ("ok",)),
    ("unknown flags on PING", frame(PING, 0xfe, 0, b"12345678"), ("ok",)),
    # §4.3 header compression
    ("HPACK: invalid index", frame(HEADERS, END_HEADERS | END_STREAM, 3, HPACK_GARBAGE),
     ("conn", [COMPRESSION_ERROR])),
    ("HPACK: table size update above the limit",
     frame(HEADERS, END_HEADERS | END_STREAM, 3, b"\x3f\xe1\xff\x03" + get_block()), ("conn", [COMPRESSION_ERROR])),
    ("HPACK: truncated string", frame(HEADERS, END_HEADERS | END_STREAM, 3, b"\x82\x86\x04\x40ab"),
     ("conn", [COMPRESSION_ERROR])),
    # §5.1 stream states
    ("DATA on an idle stream", frame(DATA, END_STREAM, 3, b"x"), ("conn", [PROTOCOL_ERROR])),
    ("RST_STREAM on an idle stream", frame(RST_STREAM, 0, 5, struct.pack(">I", CANCEL)), ("conn", [PROTOCOL_ERROR])),
    ("WINDOW_UPDATE on an idle stream", wu(5, 100), ("conn", [PROTOCOL_ERROR])),
    ("CONTINUATION without HEADERS", frame(CONTINUATION, END_HEADERS, 3, get_block()), ("conn", [PROTOCOL_ERROR])),
    ("HEADERS on a half-closed (remote) stream",
     frame(HEADERS, END_HEADERS | END_STREAM, 3, post_block()) + frame(HEADERS, END_HEADERS | END_STREAM, 3,
                                                                        get_block()),
     ("stream", 3, [STREAM_CLOSED, PROTOCOL_ERROR])),
    ("DATA on a half-closed (remote) stream",
     frame(HEADERS, END_HEADERS | END_STREAM, 3, post_block()) + frame(DATA, END_STREAM, 3, b"x"),
     ("stream", 3, [STREAM_CLOSED, PROTOCOL_ERROR])),
    ("HEADERS with an even stream id", frame(HEADERS, END_HEADERS | END_STREAM, 4, get_block()),
     ("conn", [PROTOCOL_ERROR])),
    ("HEADERS with a stream id below an earlier one",
     frame(HEADERS, END_HEADERS | END_STREAM, 7, get_block()) + frame(HEADERS, END_HEADERS | END_STREAM, 5,
                                                                       get_block()),
     ("conn", [PROTOCOL_ERROR, STREAM_CLOSED])),
    # §5.3 / §6.3 priority
    ("HEADERS that depends on itself", frame(HEADERS, END_HEADERS | END_STREAM | PRIO, 3,
                                             struct.pack(">IB", 3, 16) + get_block()),
     ("stream", 3, [PROTOCOL_ERROR])),
    ("PRIORITY of length 4", frame(PRIORITY, 0, 3, b"\0\0\0\0"), ("stream", 3, [FRAME_SIZE_ERROR])),
    ("PRIORITY on stream 0", frame(PRIORITY, 0, 0, b"\0\0\0\1\x10"), ("conn", [PROTOCOL_ERROR])),
    # §5.5 / §6.1 DATA
    ("DATA on stream 0", frame(DATA, 0, 0, b"x"), ("conn", [PROTOCOL_ERROR])),
    ("DATA with padding longer than the frame",
     frame(HEADERS, END_HEADERS, 3, post_block()) + frame(DATA, PADDED, 3, b"\x10abc"), ("conn", [PROTOCOL_ERROR])),
    # §6.2 HEADERS
    ("HEADERS on stream 0", frame(HEADERS, END_HEADERS | END_STREAM, 0, get_block()), ("conn", [PROTOCOL_ERROR])),
    ("HEADERS with padding longer than the frame", frame(HEADERS, END_HEADERS | END_STREAM | PADDED, 3, b"\x40" +
                                                         get_block()),
     ("conn", [PROTOCOL_ERROR])),
    ("CONTINUATION interrupted by another frame",
     frame(HEADERS, END_STREAM, 3, get_block()) + frame(PING, 0, 0, b"12345678"), ("conn", [PROTOCOL_ERROR])),
    ("CONTINUATION on another stream",
     frame(HEADERS, END_STREAM, 3, get_block()) + frame(CONTINUATION, END_HEADERS, 5, b""),
     ("conn", [PROTOCOL_ERROR])),
    # §6.4 RST_STREAM
    ("RST_STREAM on stream 0", frame(RST_STREAM, 0, 0, struct.pack(">I", CANCEL)), ("conn", [PROTOCOL_ERROR])),
    ("RST_STREAM of length 3", frame(HEADERS, END_HEADERS, 3, post_block()) + frame(RST_STREAM, 0, 3, b"\0\0\x08"),
     ("conn", [FRAME_SIZE_ERROR])),
    # §6.5 SETTINGS
    ("SETTINGS of length 5", frame(SETTINGS, 0, 0, b"12345"), ("conn", [FRAME_SIZE_ERROR])),
    ("SETTINGS ACK with a payload", frame(SETTINGS, ACK, 0, b"\0\1\0\0\0\0"), ("conn", [FRAME_SIZE_ERROR])),
    ("SETTINGS on stream 1", frame(SETTINGS, 0, 1, b""), ("conn", [PROTOCOL_ERROR])),
    ("SETTINGS_ENABLE_PUSH of 2", settings((2, 2)), ("conn", [PROTOCOL_ERROR])),
    ("SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1", settings((4, 0x80000000)), ("conn", [FLOW_CONTROL_ERROR])),
    ("SETTINGS_MAX_FRAME_SIZE below 16384", settings((5, 16383)), ("conn", [PROTOCOL_ERROR])),
    ("SETTINGS_MAX_FRAME_SIZE above 2^24-1", settings((5, 0x1000000)), ("conn", [PROTOCOL_ERROR])),
    ("unknown SETTINGS identifier", settings((0xff, 1)), ("ok",)),
    # §6.6 PUSH_PROMISE
    ("PUSH_PROMISE from a client", frame(PUSH_PROMISE, END_HEADERS, 3, b"\0\0\0\x04" + get_block()),
     ("conn", [PROTOCOL_ERROR])),
    # §6.7 PING
    ("PING of length 7", frame(PING, 0, 0, b"1234567"), ("conn", [FRAME_SIZE_ERROR])),
    ("PING on stream 1", frame(PING, 0, 1, b"12345678"), ("conn", [PROTOCOL_ERROR])),
    # §6.8 GOAWAY
    ("GOAWAY on stream 1", frame(GOAWAY, 0, 1, b"\0\0\0\0\0\0\0\0"), ("conn", [PROTOCOL_ERROR])),
    # §6.9 WINDOW_UPDATE
    ("WINDOW_UPDATE of 0 on the connection", wu(0, 0), ("conn", [PROTOCOL_ERROR])),
    ("WINDOW_UPDATE of length 3", frame(WINDOW_UPDATE, 0, 0, b"\0\0\1"), ("conn", [FRAME_SIZE_ERROR])),
    ("connection window above 2^31-1", wu(0, 0x7fffffff) + wu(0, 0x7fffffff), ("conn", [FLOW_CONTROL_ERROR])),
    ("stream window above 2^31-1",
     frame(HEADERS, END_HEADERS, 3, post_block()) + wu(3, 0x7fffffff) + wu(3, 0x7fffffff),
     ("stream", 3, [FLOW_CONTROL_ERROR])),
    # §8.2 / §8.3 malformed requests: stream errors
    ("upper-case header name", frame(HEADERS, END_HEADERS | END_STREAM, 3, get_block(extra=lit("X-Upper", "1"))),
     ("stream", 3, [PROTOCOL_ERROR])),
    ("connection-specific header", frame(HEADERS, END_HEADERS | END_STREAM, 3,
                                         get_block(extra=lit("connection", "keep-alive"))),
     ("stream", 3, [PROTOCOL_ERROR])),
    ("pseudo-header after a regular one", frame(HEADERS, END_HEADERS | END_STREAM, 3,
                                                b"\x82\x86" + lit("x-a", "1") + b"\x04\x07/health\x01\x01x"),
     ("stream", 3, [PROTOCOL_ERROR])),
    ("unknown pseudo-header", frame(HEADERS, END_HEADERS | END_STREAM, 3, get_block(extra=lit(":bogus", "1"))),
     ("stream", 3, [PROTOCOL_ERROR])),
    ("no :path", frame(HEADERS, END_HEADERS | END_STREAM, 3, b"\x82\x86\x01\x01x"), ("stream", 3, [PROTOCOL_ERROR])),
    ("TE other than trailers", frame(HEADERS, END_HEADERS | END_STREAM, 3, get_block(extra=lit("te", "gzip"))),
     ("stream", 3, [PROTOCOL_ERROR])),
    ("content-length that disagrees with DATA",
     frame(HEADERS, END_HEADERS, 3, post_block() + lit("content-length", "10")) + frame(DATA, END_STREAM, 3, b"{}"),
     ("stream", 3, [PROTOCOL_ERROR])),
]

# The preface itself (§3.4): not a case on an open connection, sent on a connection of its own.
BAD_PREFACE = b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n"


class Conn:
    """A raw HTTP/2 client connection that collects the frames the server sends (and acknowledges its
    SETTINGS, as a client must)."""

    def __init__(self, sock, pending=b""):
        self.s = sock
        self.buf = pending
        self.frames = []
        self.closed = False

    def send(self, data):
        try:
            self.s.sendall(data)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass  # the server answered and closed: what it sent is still to be read

    def _parse(self):
        while len(self.buf) >= 9:
            n = int.from_bytes(self.buf[:3], "big")
            if len(self.buf) < 9 + n:
                break
            f = (self.buf[3], self.buf[4], int.from_bytes(self.buf[5:9], "big") & 0x7FFFFFFF, self.buf[9:9 + n])
            self.buf = self.buf[9 + n:]
            self.frames.append(f)
            if f[0] == SETTINGS and not f[1] & ACK:
                self.send(frame(SETTINGS, ACK, 0))

    def read(self, deadline):
        self._parse()
        self.s.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            b = self.s.recv(1 << 16)
        except socket.timeout:
            return False
        except (ConnectionResetError, ssl.SSLError, OSError):
            b = b""
        if not b:
            self.closed = True
            return False
        self.buf += b
        self._parse()
        return True

    def wait(self, pred, timeout=5.0):
        deadline = time.monotonic() + timeout
        while True:
            v = pred(self.frames)
            if v or self.closed or time.monotonic() > deadline:
                return v
            self.read(deadline)

    def wait_closed(self, timeout=5.0):
        deadline = time.monotonic() + timeout
        while not self.closed and time.monotonic() < deadline:
            self.read(deadline)
        return self.closed

    def goaways(self):
        return [(int.from_bytes(f[3][4:8], "big"), f[3][8:]) for f in self.frames if f[0] == GOAWAY]

    def ping_answered(self, data=b"pdrping!"):
        self.send(frame(PING, 0, 0, data))
        return self.wait(lambda fr: any(f[0] == PING and f[1] & ACK and f[3] == data for f in fr))

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass


# ---- the ways in ----

def open_prior(port):
    s = socket.create_connection((H, port), timeout=5)
    s.sendall(PREFACE + frame(SETTINGS, 0, 0))
    return Conn(s)


def open_upgrade(port):
    """HTTP/1.1 with Upgrade: h2c; after the 101 the client sends its preface (RFC 7540 §3.2)."""
    s = socket.create_connection((H, port), timeout=5)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
              b"HTTP2-Settings: \r\n\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        b = s.recv(4096)
        assert b, "closed before the 101: %r" % head
        head += b
    head, _, rest = head.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101"), "no 101 for Upgrade: h2c: %r" % head
    s.sendall(PREFACE + frame(SETTINGS, 0, 0))
    c = Conn(s, rest)
    # The upgrade request's answer (stream 1) must come first: then the connection is fully HTTP/2.
    assert c.wait(lambda fr: any(f[2] == 1 and f[1] & END_STREAM for f in fr)), "no answer on stream 1"
    return c


def tls_opener(ca):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(ca)
    ctx.set_alpn_protocols(["h2"])

    def open_tls(port):
        s = socket.create_connection((H, port), timeout=5)
        t = ctx.wrap_socket(s, server_hostname=H)
        assert t.selected_alpn_protocol() == "h2", "ALPN chose %r" % t.selected_alpn_protocol()
        t.sendall(PREFACE + frame(SETTINGS, 0, 0))
        return Conn(t)

    return open_tls


# ---- running the cases ----

def serves(c, sid=9):
    """The connection still serves a request: GET /health on a fresh stream is answered (with 200 on the data
    port, 401 on an admin port with a token)."""
    c.send(frame(HEADERS, END_HEADERS | END_STREAM, sid, get_block()))
    return c.wait(lambda fr: any(f[0] == HEADERS and f[2] == sid for f in fr))


def run_case(opener, port, name, data, expect):
    c = opener(port)
    try:
        c.wait(lambda fr: any(f[0] == SETTINGS and not f[1] & ACK for f in fr))
        c.send(data)
        kind = expect[0]
        if kind == "ok":
            assert c.ping_answered(), "%s: the connection stopped answering PING (frames %r)" % (name, c.frames[-4:])
            assert serves(c), "%s: the connection stopped serving requests" % name
            assert not c.goaways(), "%s: unexpected GOAWAY %r" % (name, c.goaways())
            return
        if kind == "conn":
            codes = expect[1]
            closed = c.wait_closed()
            g = c.goaways()
            assert g, "%s: no GOAWAY (closed=%s, frames %r)" % (name, closed, [f[:3] for f in c.frames])
            assert g[0][0] in codes, "%s: GOAWAY code %#x, expected one of %s (%r)" % (
                name, g[0][0], [hex(x) for x in codes], g[0][1])
            assert closed, "%s: GOAWAY but the connection stayed open" % name
            return
        sid, codes = expect[1], expect[2]

        def reset(fr):
            return any(f[0] == RST_STREAM and f[2] == sid for f in fr) or any(f[0] == GOAWAY for f in fr)

        assert c.wait(reset), "%s: stream %d was not reset (frames %r)" % (name, sid, [f[:3] for f in c.frames])
        rst = [int.from_bytes(f[3][:4], "big") for f in c.frames if f[0] == RST_STREAM and f[2] == sid]
        if rst:
            assert rst[0] in codes, "%s: RST_STREAM code %#x, expected one of %s" % (name, rst[0],
                                                                                    [hex(x) for x in codes])
            assert c.ping_answered(), "%s: after a stream error the connection must go on" % name
        else:
            g = c.goaways()
            assert g[0][0] in codes, "%s: GOAWAY code %#x, expected one of %s" % (name, g[0][0],
                                                                                 [hex(x) for x in codes])
            assert c.wait_closed(), "%s: GOAWAY but the connection stayed open" % name
    finally:
        c.close()


def run_door(r, port, opener, health_port, health_path="/health"):
    failures = []
    for name, data, expect in CASES:
        try:
            run_case(opener, port, name, data, expect)
        except AssertionError as e:
            failures.append(str(e))
        except OSError as e:
            failures.append("%s: %r" % (name, e))
        try:
            st = request(health_port, "GET", health_path, timeout=5)[0]
        except OSError as e:
            st = repr(e)
        check(r.alive() and st == 200, "after the case '%s': router alive %s, health %s" % (name, r.alive(), st), r)
    # A bad preface is answered with a GOAWAY (or a close), never a crash.
    if opener is open_prior:
        s = socket.create_connection((H, port), timeout=5)
        s.sendall(BAD_PREFACE + frame(SETTINGS, 0, 0))
        c = Conn(s)
        check(c.wait_closed(), "a bad preface leaves the connection open", r)
        c.close()
        check(r.alive(), "the router died on a bad preface", r)
    check(not failures, "%d of %d cases failed:\n  %s" % (len(failures), len(CASES), "\n  ".join(failures)), r)


def stop_clean(r, *others):
    rc = r.stop()
    check(rc == 0, "pdrouter exited with %s (the sanitizer build fails the exit status on a leak)" % rc, r, *others)


def scenario_prior():
    p, d = sim("prefill"), sim("decode")
    r = router([p], [d])
    run_door(r, r.port, open_prior, r.port)
    stop_clean(r, p, d)


# The same cases against the HTTP/2 of libnghttp2 (h2_nghttp2: true, router/front/conn_ng2.c): prior knowledge,
# the admin port and TLS with ALPN h2 are its; Upgrade: h2c stays h2o's.
NGHTTP2 = "h2_nghttp2: true"


def scenario_prior_nghttp2():
    p, d = sim("prefill"), sim("decode")
    r = router([p], [d], config=NGHTTP2)
    run_door(r, r.port, open_prior, r.port)
    stop_clean(r, p, d)


def scenario_floods_nghttp2():
    """The floods nghttp2 does not stop alone, on its connections: SETTINGS, PING and unknown-type frames
    past limits.h2_max_control_frames get GOAWAY ENHANCE_YOUR_CALM naming the key (the front end's
    bucket), a header block past 8 CONTINUATION frames one that says so; each is closed and counted,
    and the port goes on serving."""
    import h2flood
    p, d = sim("prefill"), sim("decode")
    r = router([p], [d], config=NGHTTP2 + "\nlimits: { h2_max_control_frames: 300 }")
    for attack, text in (("settings", b"limits.h2_max_control_frames"), ("ping", b"limits.h2_max_control_frames"),
                         ("unknown", b"limits.h2_max_control_frames"), ("continuation", b"CONTINUATION frames")):
        c = open_prior(r.port)
        for i in range(10):
            c.send(h2flood.control_burst(attack, 100, i == 0))
        closed = c.wait_closed()
        g = c.goaways()
        c.close()
        check(closed and g and g[0][0] == 0xB and text in g[0][1], "%s flood: closed %s, GOAWAY %r" % (attack, closed, g),
              r)
        check(request(r.port, "GET", "/health", timeout=5)[0] == 200, "not serving after a %s flood" % attack, r)
    m = request(r.ports["admin"], "GET", "/metrics", timeout=5)[2].decode()
    check("pdr_h2_control_floods_total 3" in m and "pdr_h2_header_block_too_large_total 1" in m,
          "floods not counted: %r" % [l for l in m.splitlines() if "flood" in l or "block_too" in l], r)
    stop_clean(r, p, d)


def scenario_streams_nghttp2():
    """limits.h2_max_concurrent_streams on nghttp2's connections as on h2o's: 100 streams open at once
    (past them REFUSED_STREAM), the limit of them processed at a time, the others waiting."""
    import test_limits
    test_limits.scenario_h2_streams(NGHTTP2 + "\n")


def scenario_admin_nghttp2():
    p, d = sim("prefill"), sim("decode")
    fd, token = tempfile.mkstemp(prefix="pdtest-token-")
    with os.fdopen(fd, "w") as f:
        f.write("s3cret-token-for-the-admin-api\n")
    r = router([p], [d], "--admin-token-file", token, config=NGHTTP2)
    run_door(r, r.ports["admin"], open_prior, r.port)
    stop_clean(r, p, d)


def scenario_upgrade():
    p, d = sim("prefill"), sim("decode")
    r = router([p], [d])
    run_door(r, r.port, open_upgrade, r.port)
    stop_clean(r, p, d)


def scenario_admin():
    p, d = sim("prefill"), sim("decode")
    fd, token = tempfile.mkstemp(prefix="pdtest-token-")
    with os.fdopen(fd, "w") as f:
        f.write("s3cret-token-for-the-admin-api\n")
    r = router([p], [d], "--admin-token-file", token)
    run_door(r, r.ports["admin"], open_prior, r.port)
    stop_clean(r, p, d)


def scenario_tls():
    import test_tls
    certs = test_tls.Certs()
    cert, key = certs.issue("router", 3001)
    p, d = test_tls.sim("prefill"), test_tls.sim("decode")
    r = test_tls.router(p, d, listen_tls="{ cert_file: %s, key_file: %s }" % (cert, key), threads=1)
    test_tls.wait_healthy(r)
    run_door(r, r.port, tls_opener(certs.ca), r.ports["admin"], "/metrics")
    stop_clean(r, p, d)


def scenario_tls_nghttp2():
    import test_tls
    certs = test_tls.Certs()
    cert, key = certs.issue("router", 3001)
    p, d = test_tls.sim("prefill"), test_tls.sim("decode")
    r = test_tls.router(p, d, listen_tls="{ cert_file: %s, key_file: %s }" % (cert, key), threads=1, extra=NGHTTP2)
    test_tls.wait_healthy(r)
    run_door(r, r.port, tls_opener(certs.ca), r.ports["admin"], "/metrics")
    stop_clean(r, p, d)


if __name__ == "__main__":
    pdtest.run_scenario(globals())
