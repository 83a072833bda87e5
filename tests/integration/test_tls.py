#!/usr/bin/env python3
"""TLS with real pdrouter and pdsim processes on loopback (docs/security.md): the listener (listen.tls)
over TLS 1.2 and 1.3, ALPN h2 and http/1.1, a plain-HTTP client on the TLS port, handshakes cut short,
certificate reload on SIGHUP (new connections see the new certificate, an open one keeps working, a
broken file keeps the old one), and https:// workers (workers.tls): the CA, a wrong CA, a client
certificate the worker requires. The certificates are made here with the openssl command line.

Usage: test_tls.py SCENARIO   (one of the functions named scenario_*; ctest runs each separately)
"""

import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check, request  # noqa: E402
from test_router import metric_value  # noqa: E402

H = "127.0.0.1"
BODY = {"text": "the cat sat on the mat", "sampling_params": {"max_new_tokens": 4}}


# ---- certificates ----

class Certs:
    """A throwaway CA with server and client certificates in a temporary directory."""

    def __init__(self):
        if shutil.which("openssl") is None:
            print("openssl command line tool missing: skipped")
            sys.exit(77)
        self.dir = tempfile.mkdtemp(prefix="pdtest-tls-")
        self.ca = self.make_ca("ca")

    def path(self, name):
        return os.path.join(self.dir, name)

    def run(self, *args):
        out = subprocess.run(["openssl"] + list(args), capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, "openssl %s: %s" % (" ".join(args), out.stderr)

    def make_ca(self, name):
        self.run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                 "-keyout", self.path(name + ".key"), "-out", self.path(name + ".pem"), "-days", "2",
                 "-subj", "/CN=pdtest %s" % name)
        return self.path(name + ".pem")

    def issue(self, name, serial, ca="ca", san="IP:127.0.0.1,DNS:localhost", usage="serverAuth,clientAuth"):
        """A certificate signed by ca with the given serial; returns (cert path, key path)."""
        ext = self.path(name + ".ext")
        with open(ext, "w") as f:
            f.write("subjectAltName=%s\nbasicConstraints=CA:FALSE\nextendedKeyUsage=%s\n" % (san, usage))
        self.run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
                 self.path(name + ".key"), "-out", self.path(name + ".csr"), "-subj", "/CN=%s" % name)
        self.run("x509", "-req", "-in", self.path(name + ".csr"), "-CA", self.path(ca + ".pem"), "-CAkey",
                 self.path(ca + ".key"), "-set_serial", str(serial), "-days", "2", "-out",
                 self.path(name + ".pem"), "-extfile", ext)
        return self.path(name + ".pem"), self.path(name + ".key")


# ---- clients ----

def client_ctx(ca, version=None, alpn=("http/1.1",)):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(ca)
    if version is not None:
        ctx.minimum_version = version
        ctx.maximum_version = version
    if alpn:
        ctx.set_alpn_protocols(list(alpn))
    return ctx


def https(port, ctx, method, path, body=None, conn=None, timeout=10.0):
    """One request over TLS (on conn when given, kept open); returns (status, body, conn)."""
    c = conn or http.client.HTTPSConnection(H, port, context=ctx, timeout=timeout)
    data = json.dumps(body).encode() if body is not None else None
    c.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
    r = c.getresponse()
    return r.status, r.read(), c


def serial_of(conn):
    return int(conn.sock.getpeercert()["serialNumber"], 16)


def new_serial(port, ca):
    """The serial of the certificate a fresh connection gets."""
    s = socket.create_connection((H, port), timeout=5)
    with client_ctx(ca).wrap_socket(s, server_hostname=H) as t:
        return int(t.getpeercert()["serialNumber"], 16)


def curl(port, ca, *opts, path="/generate", body=BODY):
    """POST over TLS with the curl tool; returns (status, HTTP version, body)."""
    out = subprocess.run(["curl", "-sS", "--cacert", ca, "-o", "-", "-w", "\n%{http_code} %{http_version}", *opts,
                          "-H", "Content-Type: application/json", "--data-binary", json.dumps(body),
                          "https://%s:%d%s" % (H, port, path)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    text, _, tail = out.stdout.rpartition("\n")
    code, ver = tail.split()
    return int(code), ver, text


# ---- processes ----

def sim(role, *extra, tls=None, client_ca=None):
    argv = ["pdsim", "--role", role, "--port", "{port}"]
    if role == "prefill":
        argv += ["--bootstrap-port", "{bport}"]
    if tls is not None:
        argv += ["--tls-cert", tls[0], "--tls-key", tls[1]]
    if client_ca is not None:
        argv += ["--tls-client-ca", client_ca]
    return pdtest.start(argv + list(extra), name="pdsim-%s" % role, health_path="/health" if tls is None else None)


def wait_tls_sim(w, ca, cert=None):
    """Waits until a TLS pdsim answers GET /health."""
    ctx = client_ctx(ca)
    if cert is not None:
        ctx.load_cert_chain(*cert)

    def up():
        check(w.alive(), "pdsim exited", w)
        try:
            return https(w.port, ctx, "GET", "/health", timeout=1.0)[0] == 200
        except (OSError, http.client.HTTPException):
            return False

    pdtest.poll_until(up, 10, "pdsim to answer over TLS")


def check_resumes(w, ca, cert):
    """A TLS pdsim that requires a client certificate resumes a session it issued, as an engine's server
    does (the router resumes its sessions with the workers)."""
    ctx = client_ctx(ca)
    ctx.load_cert_chain(*cert)

    def get(session):
        s = ctx.wrap_socket(socket.create_connection((H, w.port), timeout=10), server_hostname=H, session=session)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        raw = b""
        while True:
            b = s.recv(65536)
            if not b:
                return s, raw
            raw += b
    try:
        s, raw = get(None)
        s2, raw2 = get(s.session)
    except (OSError, ssl.SSLError) as e:
        check(False, "a resumed session with a client certificate: %r" % e, w)
    check(raw2.startswith(b"HTTP/1.1 200") and s2.session_reused, "resumed %s: %r" % (s2.session_reused, raw2[:60]), w)


def write_config(text):
    fd, path = tempfile.mkstemp(prefix="pdrouter-tls-", suffix=".yaml")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


HEALTH = "{ interval_ms: 200, timeout_ms: 1000, rise: 1, fall: 1 }"


def router(p, d, listen_tls="", workers_tls="", scheme="http", threads=2, health=HEALTH, extra=""):
    """pdrouter in front of pdsim p and d; listen_tls/workers_tls: YAML flow mappings or "". Returns the Proc
    once its plain admin port (.ports["admin"]) answers."""
    port, admin = pdtest.free_port(), pdtest.free_port()
    lines = ["listen: { host: 127.0.0.1, port: %d%s }" % (port, (", tls: " + listen_tls) if listen_tls else ""),
             "admin: { host: 127.0.0.1, port: %d }" % admin,
             "threads: %d" % threads,
             "health: %s" % health,
             "lifecycle: { drain_grace_ms: 0 }",
             "workers:",
             "  prefill: [ { url: '%s://127.0.0.1:%d', bootstrap_port: %d } ]" % (scheme, p.port, p.ports["bport"]),
             "  decode: [ { url: '%s://127.0.0.1:%d' } ]" % (scheme, d.port)]
    if workers_tls:
        lines.append("  tls: " + workers_tls)
    if extra:
        lines.append(extra)
    path = write_config("\n".join(lines) + "\n")
    fd, log_path = tempfile.mkstemp(prefix="pdtest-pdrouter-", suffix=".log")
    with os.fdopen(fd, "w") as log:
        proc = subprocess.Popen([pdtest.binary("pdrouter"), "--config", path], stdout=log, stderr=subprocess.STDOUT)
    r = pdtest.Proc("pdrouter", proc, {"port": port, "admin": admin}, log_path)
    r.config_path = path
    pdtest._procs.append(r)

    def listening():
        check(r.alive(), "pdrouter exited", r)
        try:
            return request(admin, "GET", "/metrics", timeout=1.0)[0] == 200
        except OSError:
            return False

    pdtest.poll_until(listening, 10, "pdrouter to listen")
    return r


def admin_metrics(r):
    st, _, body = request(r.ports["admin"], "GET", "/metrics")
    assert st == 200
    return body.decode()


def wait_healthy(r, n=2):
    def ok():
        m = admin_metrics(r)
        return sum(1 for l in m.splitlines() if l.startswith("pdr_worker_healthy{") and l.endswith(" 1")) >= n

    pdtest.poll_until(ok, 10, "%d healthy workers" % n)


def reloads(r, result):
    return metric_value(admin_metrics(r), "pdr_config_reloads_total", result=result) or 0


def stop_clean(r, *others):
    """SIGTERM and a clean exit (an ASan build fails the exit status on a leak)."""
    rc = r.stop()
    check(rc == 0, "pdrouter exited with %s" % rc, r, *others)


# ---- scenarios ----

def scenario_front():
    """TLS 1.2 and 1.3, ALPN http/1.1 and h2, a PD request over each; a plain client on the TLS port fails
    at once and cleanly; handshakes cut at every stage leave nothing behind."""
    certs = Certs()
    cert, key = certs.issue("router", 1001)
    p, d = sim("prefill"), sim("decode")
    r = router(p, d, listen_tls="{ cert_file: %s, key_file: %s }" % (cert, key))
    wait_healthy(r)
    ca = certs.ca

    # Python's ssl: TLS 1.2 and 1.3 with ALPN http/1.1, a PD request each.
    for ver in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
        st, body, c = https(r.port, client_ctx(ca, ver), "POST", "/generate", BODY)
        check(st == 200 and "text" in json.loads(body), "PD over %s: %s %r" % (ver, st, body), r, p, d)
        check(c.sock.version() == {ssl.TLSVersion.TLSv1_2: "TLSv1.2", ssl.TLSVersion.TLSv1_3: "TLSv1.3"}[ver],
              "negotiated %s" % c.sock.version(), r)
        check(c.sock.selected_alpn_protocol() == "http/1.1", "ALPN %r" % c.sock.selected_alpn_protocol(), r)
        check(serial_of(c) == 1001, "serial %d" % serial_of(c), r)
        c.close()

    # curl: ALPN h2 over TLS 1.3 and 1.2, and http/1.1; streaming over h2.
    st, ver, text = curl(r.port, ca, "--http2", "--tlsv1.3")
    check(st == 200 and ver == "2", "curl h2/TLS1.3: %s %s %s" % (st, ver, text), r)
    st, ver, text = curl(r.port, ca, "--http2", "--tlsv1.2", "--tls-max", "1.2")
    check(st == 200 and ver == "2", "curl h2/TLS1.2: %s %s %s" % (st, ver, text), r)
    st, ver, text = curl(r.port, ca, "--http1.1")
    check(st == 200 and ver == "1.1", "curl http/1.1: %s %s %s" % (st, ver, text), r)
    st, ver, text = curl(r.port, ca, "--http2", body=dict(BODY, stream=True))
    check(st == 200 and ver == "2" and "[DONE]" in text, "curl h2 stream: %s %s %r" % (st, ver, text), r)
    # A client that offers no ALPN gets HTTP/1.1.
    st, _, c = https(r.port, client_ctx(ca, alpn=()), "GET", "/health")
    check(st == 200 and c.sock.selected_alpn_protocol() is None, "no ALPN: %s" % st, r)
    c.close()
    # The wrong name: the certificate names 127.0.0.1 and localhost only.
    try:
        s = socket.create_connection((H, r.port), timeout=5)
        client_ctx(ca).wrap_socket(s, server_hostname="elsewhere.example")
        raise AssertionError("a certificate for another name was accepted")
    except ssl.SSLCertVerificationError:
        pass

    # Plain HTTP on the TLS port: no hang, no answer in the clear, the connection closes.
    s = socket.create_connection((H, r.port), timeout=5)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    got = b""
    try:
        while True:
            b = s.recv(4096)
            if not b:
                break
            got += b
    except ConnectionResetError:
        pass
    s.close()
    check(b"HTTP/1.1 200" not in got, "plain HTTP answered on the TLS port: %r" % got[:80], r)

    # Handshakes cut short: before any byte, inside the ClientHello, after it, after the whole handshake.
    hello = bytearray()
    for cut in ("none", "partial", "hello", "done"):
        for _ in range(5):
            s = socket.create_connection((H, r.port), timeout=5)
            if cut == "partial":
                s.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 20)
            elif cut == "hello":
                o = ssl.MemoryBIO()
                i = ssl.MemoryBIO()
                obj = client_ctx(ca).wrap_bio(i, o, server_hostname=H)
                try:
                    obj.do_handshake()
                except ssl.SSLWantReadError:
                    pass
                hello = o.read()
                s.sendall(hello)
                s.recv(10)  # the server's first flight: its handshake state is allocated
            elif cut == "done":
                s = client_ctx(ca).wrap_socket(s, server_hostname=H)
            s.close()
    st, body, c = https(r.port, client_ctx(ca), "POST", "/generate", BODY)
    check(st == 200, "after the cut handshakes: %s %r" % (st, body), r)
    c.close()
    stop_clean(r, p, d)


def one_flight(port, ca, data):
    """A TLS 1.3 connection whose first request leaves in the same write as the client's Finished (so the
    router reads both at once). Returns a reader of everything answered until the close: (bytes, closed)."""
    s = socket.create_connection((H, port), timeout=10)
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = client_ctx(ca, ssl.TLSVersion.TLSv1_3).wrap_bio(inc, out, server_hostname=H)
    while True:
        try:
            obj.do_handshake()
            break
        except ssl.SSLWantReadError:
            if out.pending:
                s.sendall(out.read())
            b = s.recv(65536)
            assert b, "closed in the handshake"
            inc.write(b)
    obj.write(data)
    s.sendall(out.read())

    def read_all():
        got = b""
        try:
            while True:
                try:
                    b = obj.read(65536)  # b"": only handshake messages (session tickets) were read
                    got += b
                    if b:
                        continue
                except ssl.SSLWantReadError:
                    pass
                b = s.recv(65536)
                if not b:
                    return got, True
                inc.write(b)
        except (ssl.SSLZeroReturnError, ssl.SSLEOFError, ConnectionResetError):
            return got, True
        except socket.timeout:
            return got, False
        finally:
            s.close()
    return read_all


def scenario_guards():
    """The client guards hold over TLS as over plain TCP: a connection that never starts its handshake is
    closed at timeouts.client_header_ms; over HTTP/1 a head sent a byte at a time and a body that stops
    get 408 in the OpenAI shape, encrypted, and the close; a Content-Length or a chunk past
    limits.max_body_bytes gets 413 at once, also when the request comes in the write that ends the
    handshake; over HTTP/2 (ALPN h2) a body past the limit is refused (413 with a content-length, h2o's
    stream reset without one) and a PING flood past limits.h2_max_control_frames closes the connection.
    Ordinary requests are served throughout."""
    import test_limits as tl
    import h2flood

    certs = Certs()
    cert, key = certs.issue("router", 31)
    p, d = sim("prefill"), sim("decode")
    r = router(p, d, listen_tls="{ cert_file: %s, key_file: %s }" % (cert, key), threads=1,
               extra="timeouts: { client_header_ms: 600, client_body_ms: 600 }\n"
                     "limits: { max_body_bytes: 4096, h2_max_control_frames: 300 }")
    wait_healthy(r)
    ca = certs.ca

    def tls(alpn=("http/1.1",)):
        s = socket.create_connection((H, r.port), timeout=10)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return client_ctx(ca, alpn=alpn).wrap_socket(s, server_hostname=H)

    def served(what):
        st, body, c = https(r.port, client_ctx(ca), "POST", "/generate", BODY)
        c.close()
        check(st == 200, "an ordinary request %s: %s %r" % (what, st, body), r)

    def answered(t, t0, code, lo, hi, what):
        raw, closed = tl.read_until_close(t)
        took = time.monotonic() - t0
        t.close()
        check(raw, "%s: closed without an answer after %.2fs" % (what, took), r)
        st, h, out = tl.split_response(raw)
        err = tl.check_openai_error(r, st, h, out, code, what)
        check(closed and lo <= took <= hi, "%s: %d after %.2fs (expected %.1f..%.1f), closed %s" %
              (what, code, took, lo, hi, closed), r)
        return err

    # No handshake at all: closed at the deadline (no HTTP connection to answer on yet).
    s, t0 = socket.create_connection((H, r.port), timeout=10), time.monotonic()
    try:
        got = s.recv(100)
    except ConnectionResetError:
        got = b""
    took = time.monotonic() - t0
    s.close()
    check(got == b"" and 0.5 <= took <= 2.0, "no handshake: %r after %.2fs" % (got, took), r)
    # Slowloris over TLS: one byte every 100 ms, never a complete head.
    t, t0 = tls(), time.monotonic()
    stop, th = tl.slowloris(t)
    served("during a slowloris over TLS")
    err = answered(t, t0, 408, 0.5, 2.0, "slowloris over TLS")
    stop.set()
    th.join()
    check("client_header_ms" in err["message"], err, r)
    # A body that stops half-way.
    data = json.dumps(BODY).encode()
    t, t0 = tls(), time.monotonic()
    t.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
              % len(data) + data[:10])
    err = answered(t, t0, 408, 0.5, 2.0, "a stalled body over TLS")
    check("client_body_ms" in err["message"], err, r)
    # A Content-Length past the limit: 413 at the head.
    big = b'{"text":"' + b"a" * 8000 + b'"}'
    t, t0 = tls(), time.monotonic()
    t.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
              % len(big) + big[:100])
    err = answered(t, t0, 413, 0, 1.0, "Content-Length over TLS")
    check("max_body_bytes" in err["message"], err, r)
    # The same, and an ordinary request, in the write that ends the handshake.
    raw, closed = one_flight(r.port, ca, b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n" % len(big) + big[:100])()
    st, h, out = tl.split_response(raw)
    tl.check_openai_error(r, st, h, out, 413, "Content-Length with the handshake's end")
    check(closed, "Content-Length with the handshake's end: left open", r)
    raw, _ = one_flight(r.port, ca, b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(data) + data)()
    st, h, out = tl.split_response(raw)
    check(st == 200 and b"text" in out, "a request with the handshake's end: %s %r" % (st, raw[:200]), r)
    # Chunks that add up past the limit.
    t, t0 = tls(), time.monotonic()
    tl.send_big_chunked(t)
    answered(t, t0, 413, 0, 1.0, "chunked over TLS")
    served("after the HTTP/1 guards")
    # HTTP/2 over TLS: a PING flood is closed; a client below the limit is served.
    c = tl.H2Conn(r, sock=tls(alpn=("h2",)))
    check(c.s.selected_alpn_protocol() == "h2", "ALPN %r" % c.s.selected_alpn_protocol(), r)
    try:
        for i in range(10):
            c.send(h2flood.control_burst("ping", 100, i == 0))
    except OSError:
        pass
    c.wait(lambda fr: False, timeout=5)  # until the router closes
    check(c.closed, "a PING flood over TLS was not closed", r)
    c.close()
    # HTTP/2 bodies past the limit, with a content-length and without: 413 in the OpenAI shape.
    c = tl.H2Conn(r, sock=tls(alpn=("h2",)))
    c.send(h2flood.frame(1, 0x4, 1, tl.h2_request_block(content_length=len(big))) + h2flood.frame(0, 0, 1, big[:4000]) +
           h2flood.frame(0, 0x1, 1, big[4000:]))
    c.stream_ended(1)
    tl.check_openai_error(r, tl.status_of(c.frames, 1), {"content-type": "application/json"}, c.data_of(1), 413,
                          "HTTP/2 content-length over TLS")
    huge = b'{"text":"' + b"a" * 40000 + b'"}'
    c.send(h2flood.frame(1, 0x4, 3, tl.h2_request_block()) + b"".join(
        h2flood.frame(0, 0x1 if i + 8000 >= len(huge) else 0, 3, huge[i:i + 8000]) for i in range(0, len(huge), 8000)))
    c.stream_ended(3)
    # Past max_body_bytes + one frame without a content-length, h2o refuses the stream itself over TLS
    # (docs/security.md): a reset, nothing forwarded, and the connection goes on.
    check(any(f[0] == 3 and f[2] == 3 for f in c.frames) and tl.status_of(c.frames, 3) is None,
          "HTTP/2 without content-length over TLS: %r" % (c.frames[-3:],), r)
    c.send(h2flood.frame(1, 0x4, 5, tl.h2_request_block()) + h2flood.frame(0, 0x1, 5, data))
    c.stream_ended(5)
    check(tl.status_of(c.frames, 5) == 200, "HTTP/2 over TLS after a refused body: %r" % (c.frames[-3:],), r)
    c.close()
    c = tl.H2Conn(r, sock=tls(alpn=("h2",)))
    c.send(h2flood.frame(6, 0, 0, b"abcdefgh") * 100)
    c.wait(lambda fr: sum(1 for f in fr if f[0] == 6 and f[1] & 1) >= 100)
    c.send(h2flood.frame(1, 0x4, 1, tl.h2_request_block()) + h2flood.frame(0, 0x1, 1, data))
    c.stream_ended(1)
    check(not c.closed and tl.status_of(c.frames, 1) == 200, "HTTP/2 over TLS below the limit: %r" %
          (c.frames[-3:],), r)
    c.close()
    served("after the HTTP/2 flood")
    m = admin_metrics(r)
    counts = {k: metric_value(m, k) for k in ("pdr_http_client_header_timeouts_total",
                                              "pdr_http_client_body_timeouts_total", "pdr_h2_control_floods_total")}
    check(counts == {"pdr_http_client_header_timeouts_total": 2, "pdr_http_client_body_timeouts_total": 1,
                     "pdr_h2_control_floods_total": 1}, "counts %r" % counts, r)
    stop_clean(r, p, d)


def scenario_client_certs():
    """listen.tls.client_ca_file (mutual TLS): a client with a certificate the CA signed is served over
    HTTP/1.1 and HTTP/2; one without a certificate, or with one another CA signed, gets no answer (its
    handshake fails); a client_ca_file that is not PEM refuses the reload and the old context stays."""
    certs = Certs()
    cert, key = certs.issue("router", 41)
    good = certs.issue("client-good", 42, usage="clientAuth")
    certs.make_ca("rogue")
    bad = certs.issue("client-rogue", 43, ca="rogue", usage="clientAuth")
    p, d = sim("prefill"), sim("decode")
    r = router(p, d, listen_tls="{ cert_file: %s, key_file: %s, client_ca_file: %s }" % (cert, key, certs.ca))
    wait_healthy(r)

    def ctx_with(pair, alpn=("http/1.1",)):
        c = client_ctx(certs.ca, alpn=alpn)
        if pair is not None:
            c.load_cert_chain(*pair)
        return c

    st, body, c = https(r.port, ctx_with(good), "POST", "/generate", BODY)
    check(st == 200 and "text" in json.loads(body), "with a client certificate: %s %r" % (st, body), r)
    c.close()
    st, ver, text = curl(r.port, certs.ca, "--http2", "--cert", good[0], "--key", good[1])
    check(st == 200 and ver == "2", "h2 with a client certificate: %s %s %s" % (st, ver, text), r)
    for name, pair in (("no client certificate", None), ("a certificate of another CA", bad)):
        for ver in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
            ctx = ctx_with(pair)
            ctx.minimum_version = ctx.maximum_version = ver
            try:
                st, body, c = https(r.port, ctx, "POST", "/generate", BODY, timeout=5)
                c.close()
                raise AssertionError("%s over %s was answered %s" % (name, ver, st))
            except (ssl.SSLError, ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected):
                pass
    m = admin_metrics(r)
    check(metric_value(m, "pdr_requests_total", route="generate", code="200") == 2, "requests counted", r)
    # A broken client_ca_file refuses the reload; the running context keeps serving.
    broken = certs.path("broken.pem")
    with open(broken, "w") as f:
        f.write("not a certificate\n")
    with open(r.config_path) as f:
        text = f.read()
    with open(r.config_path, "w") as f:
        f.write(text.replace(certs.ca, broken))
    r.proc.send_signal(signal.SIGHUP)
    pdtest.poll_until(lambda: reloads(r, "failed") == 1, 5, "the refused reload")
    check("listen.tls.client_ca_file %s" % broken in r.log_tail(50), "the log names the file", r)
    st, _, c = https(r.port, ctx_with(good), "POST", "/generate", BODY)
    c.close()
    check(st == 200, "after the refused reload: %s" % st, r)
    stop_clean(r, p, d)


def scenario_min_version():
    """min_version TLS1.3 refuses a TLS 1.2 client; ciphers and alpn: [http/1.1] are applied."""
    certs = Certs()
    cert, key = certs.issue("router", 7)
    p, d = sim("prefill"), sim("decode")
    r = router(p, d, listen_tls="{ cert_file: %s, key_file: %s, min_version: TLS1.3, alpn: [http/1.1] }" % (cert, key))
    wait_healthy(r)
    try:
        https(r.port, client_ctx(certs.ca, ssl.TLSVersion.TLSv1_2), "GET", "/health")
        raise AssertionError("TLS 1.2 accepted with min_version TLS1.3")
    except ssl.SSLError:
        pass
    st, ver, _ = curl(r.port, certs.ca, "--http2")
    check(st == 200 and ver == "1.1", "alpn [http/1.1]: curl --http2 got %s %s" % (st, ver), r)
    stop_clean(r, p, d)


def live_pair(certs, serial):
    """A certificate and key under the fixed names live.pem / live.key that the router is given, for
    renewals in place (renew)."""
    cert, key = certs.issue("router%d" % serial, serial)
    live_cert, live_key = certs.path("live.pem"), certs.path("live.key")
    shutil.copy(cert, live_cert)
    shutil.copy(key, live_key)
    return live_cert, live_key


def renew(certs, serial, live_cert, live_key):
    """New files renamed into place, key first, as docs/security.md tells operators to."""
    c2, k2 = certs.issue("router%d" % serial, serial)
    shutil.copy(c2, live_cert + ".tmp")
    shutil.copy(k2, live_key + ".tmp")
    os.replace(live_key + ".tmp", live_key)
    os.replace(live_cert + ".tmp", live_cert)


def scenario_reload():
    """SIGHUP with renewed files: new connections get the new certificate (every loop), an open connection
    keeps working; a broken file refuses the reload, names the file, and the running certificate stays."""
    certs = Certs()
    cert, key = certs.issue("router", 2001)
    live_cert, live_key = live_pair(certs, 2001)
    p, d = sim("prefill"), sim("decode")
    r = router(p, d, listen_tls="{ cert_file: %s, key_file: %s }" % (live_cert, live_key), threads=2)
    wait_healthy(r)
    ca = certs.ca
    st, _, old = https(r.port, client_ctx(ca), "POST", "/generate", BODY)
    check(st == 200 and serial_of(old) == 2001, "first: %s" % st, r)

    renew(certs, 2002, live_cert, live_key)
    ok0 = reloads(r, "ok")
    r.proc.send_signal(signal.SIGHUP)
    pdtest.poll_until(lambda: reloads(r, "ok") > ok0, 10, "the reload")
    # Every loop takes the new context at its next wakeup: several fresh connections in a row see it.
    pdtest.poll_until(lambda: all(new_serial(r.port, ca) == 2002 for _ in range(8)), 10, "the new serial")
    st, body, old = https(r.port, None, "POST", "/generate", BODY, conn=old)
    check(st == 200 and serial_of(old) == 2001, "the open connection after the reload: %s %r" % (st, body), r)

    # A broken certificate file: the reload is refused with the file named, the running one stays.
    with open(live_cert, "w") as f:
        f.write("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    bad0 = reloads(r, "failed")
    r.proc.send_signal(signal.SIGHUP)
    pdtest.poll_until(lambda: reloads(r, "failed") > bad0, 10, "the refused reload")
    check("listen.tls.cert_file %s" % live_cert in r.log_tail(80), "the log names the file", r)
    st, _, body = request(r.ports["admin"], "POST", "/admin/v1/reload")
    msg = json.loads(body)["error"]["message"]
    check(st >= 400 and "listen.tls.cert_file %s" % live_cert in msg, "admin reload: %s %s" % (st, msg), r)
    # A key that does not match the certificate is refused too.
    shutil.copy(cert, live_cert)
    st, _, body = request(r.ports["admin"], "POST", "/admin/v1/reload")
    msg = json.loads(body)["error"]["message"]
    check(st >= 400 and "does not match the certificate" in msg, "mismatched key: %s %s" % (st, msg), r)
    for _ in range(4):
        check(new_serial(r.port, ca) == 2002, "the running certificate stays", r)
    st, _, c = https(r.port, client_ctx(ca), "POST", "/generate", BODY)
    check(st == 200, "serving after the refused reloads: %s" % st, r)
    c.close()
    old.close()
    stop_clean(r, p, d)


def accepted(pid, port, socks):
    """Whether process pid holds (has accepted) the server side of every client socket in socks, by ss: a
    connection still in the listen queue has no owning process."""
    want = {s.getsockname()[1] for s in socks}
    out = subprocess.run(["ss", "-tnpH", "state", "established", "( sport = :%d )" % port], capture_output=True,
                         text=True, timeout=10).stdout
    have = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 4 and "pid=%d," % pid in line:
            have.add(int(parts[3].rpartition(":")[2]))
    return want <= have


def scenario_reload_idle():
    """Connections accepted before a certificate reload whose ClientHello comes after it: h2o creates their
    SSL object from the context of the accept, which the reload retires. Each connection holds that
    context until it closes, so the handshakes complete (under the sanitizer build, a use after free
    aborts the router otherwise). Reloaded by SIGHUP, then by the admin API."""
    certs = Certs()
    live_cert, live_key = live_pair(certs, 4001)
    p, d = sim("prefill"), sim("decode")
    r = router(p, d, listen_tls="{ cert_file: %s, key_file: %s }" % (live_cert, live_key), threads=2,
               extra="timeouts: { client_header_ms: 60000 }")
    wait_healthy(r)
    ca = certs.ca
    for serial, how in ((4002, "SIGHUP"), (4003, "admin")):
        idle = [socket.create_connection((H, r.port), timeout=10) for _ in range(24)]
        pdtest.poll_until(lambda: accepted(r.proc.pid, r.port, idle), 10, "the router to accept them")
        renew(certs, serial, live_cert, live_key)
        ok0 = reloads(r, "ok")
        if how == "SIGHUP":
            r.proc.send_signal(signal.SIGHUP)
        else:
            st, _, body = request(r.ports["admin"], "POST", "/admin/v1/reload")
            check(st == 200, "admin reload: %s %r" % (st, body), r)
        pdtest.poll_until(lambda: reloads(r, "ok") > ok0, 10, "the reload")
        # Both loops have moved to the new context (and released the old one) once fresh connections in a
        # row all see it.
        pdtest.poll_until(lambda: all(new_serial(r.port, ca) == serial for _ in range(8)), 10, "the new serial")
        ctx = client_ctx(ca)
        for i, s in enumerate(idle):
            t = ctx.wrap_socket(s, server_hostname=H)
            got = int(t.getpeercert()["serialNumber"], 16)
            check(got == serial - 1, "%s: connection %d accepted before the reload got serial %d" % (how, i, got), r)
            t.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            resp = b""
            while True:
                b = t.recv(4096)
                if not b:
                    break
                resp += b
            check(resp.startswith(b"HTTP/1.1 200"), "%s: connection %d: %r" % (how, i, resp[:80]), r)
            t.close()
        check(r.alive(), "the router died", r)
    stop_clean(r, p, d)


def scenario_descriptors():
    """Every way a TLS client can leave frees its connection: a reset after the handshake (TLS 1.2, TLS 1.3,
    with ALPN h2 and without ALPN), after a keep-alive answer, after HTTP/2 frames, a close with the
    router's session tickets unread, a close_notify, no handshake (timeouts.client_header_ms), and a head
    that never ends (408). 300 clients a case; the router's descriptor count is back at its baseline
    within the header timeout each time."""
    certs = Certs()
    cert, key = certs.issue("router", 5001)
    p, d = sim("prefill"), sim("decode")
    r = router(p, d, listen_tls="{ cert_file: %s, key_file: %s }" % (cert, key), threads=2,
               extra="timeouts: { client_header_ms: 500 }")
    wait_healthy(r)
    ca = certs.ca
    fds = lambda: len(os.listdir("/proc/%d/fd" % r.proc.pid))  # noqa: E731

    def reset(t):
        t.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        t.close()

    def tls(version=None, alpn=("http/1.1",)):
        return client_ctx(ca, version, alpn).wrap_socket(socket.create_connection((H, r.port), timeout=10),
                                                        server_hostname=H)

    def keepalive_then_reset():
        t = tls()
        t.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        check(t.recv(4096).startswith(b"HTTP/1.1 200"), "keep-alive answer", r)
        reset(t)

    def h2_then_reset():
        t = tls(alpn=("h2",))
        t.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\0\0\0\x04\0\0\0\0\0")
        t.recv(4096)
        reset(t)

    def close_notify():
        t = tls()
        t.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        t.recv(4096)
        try:
            t.unwrap().close()
        except (OSError, ssl.SSLError):
            t.close()

    cases = [
        ("TLS 1.2, then a reset", lambda: reset(tls(ssl.TLSVersion.TLSv1_2))),
        ("TLS 1.3, then a reset", lambda: reset(tls(ssl.TLSVersion.TLSv1_3))),
        ("ALPN h2, then a reset", lambda: reset(tls(alpn=("h2",)))),
        ("no ALPN, then a reset", lambda: reset(tls(alpn=()))),
        ("a close with the session tickets unread", lambda: tls().close()),
        ("a keep-alive answer, then a reset", keepalive_then_reset),
        ("HTTP/2 frames, then a reset", h2_then_reset),
        ("a close_notify", close_notify),
    ]
    # Health checks and the admin requests below hold a few descriptors of their own now and then; a leak
    # is 300 a case.
    SLACK = 4
    base = fds()
    for name, fn in cases:
        gone0 = metric_value(admin_metrics(r), "pdr_tls_client_read_failures_total") or 0
        for _ in range(300):
            fn()
        pdtest.poll_until(lambda: fds() <= base + SLACK, 30, "descriptors back at %d after %s (now %d)" % (base, name, fds()))
        check(r.alive(), "the router died: %s" % name, r)
        # Counted once the handshake is over at the router: in TLS 1.2 the router's Finished is the last
        # message, and a keep-alive answer comes after it (a TLS 1.3 reset may cut the handshake instead).
        # The descriptor count settles within SLACK, so the last few resets may still be on their way.
        if name in ("TLS 1.2, then a reset", "a keep-alive answer, then a reset"):
            pdtest.poll_until(lambda: (metric_value(admin_metrics(r), "pdr_tls_client_read_failures_total") or 0) -
                              gone0 >= 300, 30, "%s: 300 failed reads counted" % name)
    # Connections that never finish a handshake, or a head: closed at timeouts.client_header_ms.
    silent = [socket.create_connection((H, r.port), timeout=10) for _ in range(100)]
    heads = []
    for _ in range(100):
        t = tls()
        t.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        heads.append(t)
    for t in heads:
        got = b""
        while True:
            b = t.recv(4096)
            if not b:
                break
            got += b
        check(got.startswith(b"HTTP/1.1 408"), "a head that never ends: %r" % got[:60], r)
        t.close()
    for s in silent:
        check(s.recv(16) == b"", "a silent connection is closed", r)
        s.close()
    pdtest.poll_until(lambda: fds() <= base + SLACK, 30, "descriptors back at %d after the timeouts (now %d)" % (base, fds()))
    stop_clean(r, p, d)


def scenario_h2_body_budget():
    """Over TLS the router cannot give a refused body's window back (that needs a write of its own), so an
    HTTP/2 connection whose bodies would pass limits.h2_max_connection_body_bytes is closed (counted), the
    bodies it held are released (pdr_h2_body_bytes_held back to 0), and other connections are served."""
    import h2flood
    import test_limits as tl
    certs = Certs()
    cert, key = certs.issue("router", 6001)
    p, d = sim("prefill"), sim("decode")
    # The budget is taken as at least one body of max_body_bytes plus a frame: 4096 + 16384 bytes.
    r = router(p, d, listen_tls="{ cert_file: %s, key_file: %s }" % (cert, key), threads=1,
               extra="limits: { max_body_bytes: 4096, h2_max_connection_body_bytes: 4096 }")
    wait_healthy(r)
    s = client_ctx(certs.ca, alpn=("h2",)).wrap_socket(socket.create_connection((H, r.port), timeout=10),
                                                       server_hostname=H)
    c = tl.H2Conn(r, sock=s)
    body = b"x" * 3000
    for sid in (1, 3, 5, 7, 9, 11, 13, 15):  # 8 x 3000 bytes pass 20480 at the seventh
        c.send(h2flood.frame(1, 0x4, sid, tl.h2_request_block()) + h2flood.frame(0, 0, sid, body))
    c.wait(lambda fr: False, timeout=10)  # until the router closes
    check(c.closed, "an HTTP/2 connection over TLS past its body budget was not closed", r)
    c.close()
    m = admin_metrics(r)
    check((metric_value(m, "pdr_h2_bodies_over_budget_total") or 0) == 1, "the refusal is counted", r)
    pdtest.poll_until(lambda: metric_value(admin_metrics(r), "pdr_h2_body_bytes_held") == 0, 10,
                      "the held bytes released")
    st, _, c2 = https(r.port, client_ctx(certs.ca), "POST", "/generate", BODY)
    check(st == 200, "another connection after the close: %s" % st, r)
    c2.close()
    stop_clean(r, p, d)
    # The router's budget (limits.max_body_memory_bytes, taken as one body and a frame: 20480 bytes) spent
    # by a second connection: that one is closed, and so is the connection holding the biggest body still
    # arriving (a stream cannot be reset inside TLS); the bytes held go back to zero.
    p, d = sim("prefill"), sim("decode")
    r = router(p, d, listen_tls="{ cert_file: %s, key_file: %s }" % (cert, key), threads=1,
               extra="limits: { max_body_bytes: 4096, max_body_memory_bytes: 4096 }")
    wait_healthy(r)

    def h2tls():
        s = client_ctx(certs.ca, alpn=("h2",)).wrap_socket(socket.create_connection((H, r.port), timeout=10),
                                                           server_hostname=H)
        return tl.H2Conn(r, sock=s)
    a = h2tls()
    for sid, n in ((1, 1000), (3, 3000), (5, 2000)):
        a.send(h2flood.frame(1, 0x4, sid, tl.h2_request_block()) + h2flood.frame(0, 0, sid, b"x" * n))
    pdtest.poll_until(lambda: metric_value(admin_metrics(r), "pdr_h2_body_bytes_held") == 6000, 10,
                      "the first connection's bodies held")
    b = h2tls()
    for sid in range(1, 20, 2):  # 10 x 3000 bytes: 6000 + 15000 pass 20480 at the fifth
        b.send(h2flood.frame(1, 0x4, sid, tl.h2_request_block()) + h2flood.frame(0, 0, sid, body))
    b.wait(lambda fr: False, timeout=10)
    check(b.closed, "the connection past the router's budget was not closed", r)
    a.wait(lambda fr: False, timeout=10)
    check(a.closed, "the connection with the biggest body still arriving was not closed", r)
    m = admin_metrics(r)
    check((metric_value(m, "pdr_h2_bodies_evicted_total") or 0) == 1, "the eviction is counted", r)
    pdtest.poll_until(lambda: metric_value(admin_metrics(r), "pdr_h2_body_bytes_held") == 0, 10,
                      "the held bytes released")
    a.close()
    b.close()
    st, _, c2 = https(r.port, client_ctx(certs.ca), "POST", "/generate", BODY)
    check(st == 200, "another connection after the evictions: %s" % st, r)
    c2.close()
    stop_clean(r, p, d)


def scenario_workers_resumption():
    """A worker that fails every handshake that resumes a session (pdsim --tls-fail-resumption: an OpenSSL
    server that verifies client certificates without a session id context): the first failure is counted
    and logged, the leg is sent once more on a new connection with a full handshake, and the worker gets
    full handshakes from then on: with no retries of the request, every request that needed new connections
    is served, and no connect failure is counted."""
    certs = Certs()
    wcert = certs.issue("worker", 3001)
    ccert = certs.issue("router-client", 4001, usage="clientAuth")
    p = sim("prefill", "--tls-fail-resumption", tls=wcert, client_ca=certs.ca)
    # Decodes that take a while (4 tokens, 50 ms apart) make the requests of a round overlap.
    d = sim("decode", "--tls-fail-resumption", "--decode-us-per-token", "50000", tls=wcert, client_ca=certs.ca)
    wait_tls_sim(p, certs.ca, ccert)
    wait_tls_sim(d, certs.ca, ccert)
    r = router(p, d, scheme="https", threads=1,
               workers_tls="{ ca_file: %s, cert_file: %s, key_file: %s }" % (certs.ca, ccert[0], ccert[1]),
               health="{ interval_ms: 60000, timeout_ms: 1000, rise: 1, fall: 10 }", extra="retries: { max: 0 }")
    wait_healthy(r)
    st, _, body = request(r.port, "POST", "/generate", BODY)
    check(st == 200, "a first request: %s %r" % (st, body[:200]), r)
    # Requests at once need new connections (more each round than the pool holds), which would offer the
    # session the first ones kept.
    for n in (3, 6, 9):
        sts = []
        ths = [threading.Thread(target=lambda: sts.append(request(r.port, "POST", "/generate", BODY)))
               for _ in range(n)]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        check([s[0] for s in sts] == [200] * n, "%d at once: %r" % (n, [(s[0], s[2][:160]) for s in sts]), r)
    m = admin_metrics(r)
    failed = metric_value(m, "pdr_upstream_tls_resumption_failures_total") or 0
    check(1 <= failed <= 2, "resumption failures counted once per worker: %r" % failed, r)
    connect = sum(metric_value(m, "pdr_upstream_errors_total", role=role, cause="connect") or 0
                  for role in ("prefill", "decode"))
    check(connect == 0, "connect failures counted: %r" % connect, r)
    check((metric_value(m, "pdr_upstream_tls_handshakes_total") or 0) >= 4, "full handshakes", r)
    check("full handshakes only" in r.log_tail(200), "the failure is logged", r)
    stop_clean(r, p, d)


def scenario_workers():
    """https:// workers: with the CA a PD request and the health checks go over TLS, and new connections
    resume the session an earlier one got; a wrong CA makes the
    worker unreachable with a 503 naming the certificate check; a worker that requires a client
    certificate is reached with the router's and refused without it."""
    certs = Certs()
    wcert = certs.issue("worker", 3001)
    p, d = sim("prefill", tls=wcert), sim("decode", tls=wcert)
    wait_tls_sim(p, certs.ca)
    wait_tls_sim(d, certs.ca)
    r = router(p, d, scheme="https", workers_tls="{ ca_file: %s }" % certs.ca)
    wait_healthy(r)
    for stream in (False, True):
        st, _, body = request(r.port, "POST", "/generate", dict(BODY, stream=stream))
        check(st == 200 and (b"[DONE]" in body if stream else "text" in json.loads(body)),
              "PD over https (stream %s): %s %r" % (stream, st, body[:200]), r, p, d)
    # Pooled connections stay TLS: many requests, a few connections.
    for _ in range(20):
        st, _, _ = request(r.port, "POST", "/generate", BODY)
        check(st == 200, "repeat: %s" % st, r)
    st, _, body = request(r.port, "GET", "/v1/models")
    check(st == 200 and b"data" in body, "models over https: %s %r" % (st, body[:200]), r)
    # Requests at once need more connections than the pool holds: they resume the kept sessions.
    m = admin_metrics(r)
    full0, res0 = (metric_value(m, "pdr_upstream_tls_handshakes_total") or 0,
                   metric_value(m, "pdr_upstream_tls_resumptions_total") or 0)
    check(full0 >= 2, "full handshakes before: %s" % full0, r)
    sts = []
    ths = [threading.Thread(target=lambda: sts.append(request(r.port, "POST", "/generate", BODY)[0]))
           for _ in range(12)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    m = admin_metrics(r)
    full1, res1 = (metric_value(m, "pdr_upstream_tls_handshakes_total") or 0,
                   metric_value(m, "pdr_upstream_tls_resumptions_total") or 0)
    print("TLS handshakes with the workers: full %d -> %d, resumed %d -> %d" % (full0, full1, res0, res1))
    check(sts == [200] * 12, "concurrent: %r" % sts, r)
    check(res1 > res0, "no new connection resumed a session: full %s -> %s, resumed %s -> %s" %
          (full0, full1, res0, res1), r)
    stop_clean(r, p, d)

    # A CA that did not sign the workers' certificate.
    other = certs.make_ca("other")
    # Health checks fail too but only after many rounds (fall): the PD request meets the TLS failure itself.
    slow = "{ interval_ms: 60000, timeout_ms: 1000, rise: 1, fall: 10 }"
    r = router(p, d, scheme="https", workers_tls="{ ca_file: %s }" % other, health=slow)
    st, _, body = request(r.port, "POST", "/generate", BODY)
    err = json.loads(body)["error"]
    check(st == 503 and "certificate was refused" in err["message"], "wrong CA: %s %r" % (st, err), r)
    print("wrong CA: %d %s" % (st, err["message"]))
    m = admin_metrics(r)
    check((metric_value(m, "pdr_upstream_errors_total", role="prefill", cause="connect") or 0) +
          (metric_value(m, "pdr_upstream_errors_total", role="decode", cause="connect") or 0) >= 1,
          "counted as connect errors", r)
    check("certificate" in r.log_tail(200), "the log names the certificate check", r)
    stop_clean(r)
    # verify: false reaches them anyway (documented as for tests only).
    r = router(p, d, scheme="https", workers_tls="{ ca_file: %s, verify: false }" % other)
    wait_healthy(r)
    st, _, _ = request(r.port, "POST", "/generate", BODY)
    check(st == 200, "verify false: %s" % st, r)
    stop_clean(r)
    p.stop()
    d.stop()

    # Workers that require a client certificate signed by the CA.
    p, d = sim("prefill", tls=wcert, client_ca=certs.ca), sim("decode", tls=wcert, client_ca=certs.ca)
    ccert = certs.issue("router-client", 4001, usage="clientAuth")
    wait_tls_sim(p, certs.ca, ccert)
    wait_tls_sim(d, certs.ca, ccert)
    check_resumes(p, certs.ca, ccert)
    r = router(p, d, scheme="https", workers_tls="{ ca_file: %s }" % certs.ca, health=slow)
    st, _, body = request(r.port, "POST", "/generate", BODY)
    err = json.loads(body)["error"]
    check(st == 503 and "TLS" in err["message"], "no client certificate: %s %r" % (st, body), r)
    print("no client certificate: %d %s" % (st, err["message"]))
    stop_clean(r)
    r = router(p, d, scheme="https",
               workers_tls="{ ca_file: %s, cert_file: %s, key_file: %s }" % (certs.ca, ccert[0], ccert[1]))
    wait_healthy(r)
    st, _, body = request(r.port, "POST", "/generate", BODY)
    check(st == 200, "with the client certificate: %s %r" % (st, body), r, p, d)
    stop_clean(r, p, d)


def scenario_config_errors():
    """Files that do not load stop the start with the key and file named."""
    certs = Certs()
    cert, key = certs.issue("router", 5)
    _, other_key = certs.issue("x", 6)
    cases = [
        ("listen: { host: 127.0.0.1, port: {port}, tls: { cert_file: /nonexistent.pem, key_file: %s } }" % key,
         "listen.tls.cert_file /nonexistent.pem: cannot read it"),
        ("listen: { host: 127.0.0.1, port: {port}, tls: { cert_file: %s, key_file: %s } }" % (cert, other_key),
         "does not match the certificate"),
        ("listen: { host: 127.0.0.1, port: {port}, tls: { cert_file: %s, key_file: %s, ciphers: 'NOPE' } }" % (cert, key),
         "listen.tls.ciphers 'NOPE'"),
        ("listen: { host: 127.0.0.1, port: {port} }\nworkers:\n  tls: { ca_file: %s }" % key,
         "workers.tls.ca_file %s" % key),
    ]
    for text, want in cases:
        text = text.replace("{port}", str(pdtest.free_port()))
        if "workers:" in text:
            text += "\n  prefill: [ http://127.0.0.1:1 ]\n  decode: [ http://127.0.0.1:2 ]\n"
        else:
            text += "\nworkers: { prefill: [ http://127.0.0.1:1 ], decode: [ http://127.0.0.1:2 ] }\n"
        text += "admin: { port: 0 }\n"
        path = write_config(text)
        out = subprocess.run([pdtest.binary("pdrouter"), "--config", path], capture_output=True, text=True,
                             timeout=30)
        check(out.returncode != 0 and want in out.stderr + out.stdout,
              "%r: exit %s, want %r in\n%s" % (text, out.returncode, want, out.stderr + out.stdout))


if __name__ == "__main__":
    pdtest.run_scenario(globals())
