#!/usr/bin/env python3
"""Attacks and faults that must not hurt the router: clients that stop reading, request smuggling,
HTTP/2 stream floods, a full file-descriptor table, frozen or dead workers. Real pdrouter and pdsim
processes on loopback.

Usage: test_hardening.py SCENARIO   (one of the functions named scenario_*; ctest runs each separately)
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check, raw_exchange, request  # noqa: E402
from test_router import BODIES, metric_value, metrics, router, sim, stats  # noqa: E402

H = "127.0.0.1"


def cpu_seconds(pid):
    """User + system CPU time of a process so far (seconds)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def health_ok(r, timeout=1.0):
    try:
        return request(r.port, "GET", "/health", timeout=timeout)[0] == 200
    except OSError:
        return False


def access_log_lines(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def stalled_setup(idle_ms):
    p, d = sim("prefill"), sim("decode")
    fd, alog = tempfile.mkstemp(prefix="pdtest-alog-", suffix=".log")
    os.close(fd)
    r = router([p], [d], config="threads: 1\ntimeouts: { stream_idle_ms: %d }\nlog: { access_log: %s }" %
               (idle_ms, alog))
    return p, d, r, alog


def stalled_socket(r):
    """A client with a 4 KiB receive buffer that asks for a very long stream and never reads."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect((H, r.port))
    raw = json.dumps(dict(BODIES["/generate"], stream=True, sampling_params={"max_new_tokens": 1000000})).encode()
    s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(raw) + raw)
    return s


def fionread(s):
    """Bytes waiting in a socket's receive queue."""
    import array
    import fcntl
    import termios
    buf = array.array("i", [0])
    fcntl.ioctl(s.fileno(), termios.FIONREAD, buf)
    return buf[0]


def check_loop_alive(r, what):
    """The router's only loop answers /health at once and is not spinning."""
    check(health_ok(r), "/health did not answer %s" % what, r)
    c0 = cpu_seconds(r.proc.pid)
    t0 = time.monotonic()
    for _ in range(10):
        check(health_ok(r), "/health did not answer %s" % what, r)
        time.sleep(0.1)  # pacing of the probe requests, not synchronisation
    used = (cpu_seconds(r.proc.pid) - c0) / (time.monotonic() - t0)
    check(used < 0.5, "the router used %.0f%% of a core %s" % (used * 100, what), r)


def scenario_stalled_reader():
    """A client that stops reading a stream: after timeouts.stream_idle_ms the stream is ended, both legs
    are cancelled, the connection is reset, and the loop (threads: 1) keeps serving without spinning."""
    idle_ms = 1000
    p, d, r, alog = stalled_setup(idle_ms)
    try:
        s = stalled_socket(r)
        t0 = time.monotonic()
        pdtest.poll_until(lambda: stats(d)["cancelled"] >= 1, 10, "the decode leg to be cancelled")
        took = time.monotonic() - t0
        check(took >= idle_ms / 1000 * 0.9, "stream cut after %.2fs, before stream_idle_ms" % took, r)
        check(took < idle_ms / 1000 * 2 + 2, "stream cut only after %.2fs" % took, r)
        check_loop_alive(r, "after the stalled client was cut")
        # The client sees its connection reset (or closed) once it reads.
        s.settimeout(5)
        got = 0
        try:
            while True:
                b = s.recv(65536)
                if not b:
                    break
                got += len(b)
        except ConnectionResetError:
            pass
        s.close()
        check(got < 8 << 20, "the stalled client still got %d bytes" % got, r)
        m = pdtest.poll_until(lambda: (lambda t: t if metric_value(t, "pdr_client_stalled_total") == 1 else None)(
            metrics(r)), 5, "pdr_client_stalled_total to count it")
        check(metric_value(m, "pdr_worker_healthy", role="decode", url="http://127.0.0.1:%d" % d.port) == 1,
              "the decode worker was blamed for the client", r)
        lines = pdtest.poll_until(lambda: [l for l in access_log_lines(alog) if l.get("error") == "client_stalled"],
                                  5, "the access-log line")
        check(len(lines) == 1 and lines[0]["path"] == "/generate", "access log: %r" % lines, r)
        # The router still serves full requests.
        st, _, out = request(r.port, "POST", "/generate", BODIES["/generate"])
        check(st == 200, "request after the cut: %d %s" % (st, out[:200]), r)
    finally:
        pdtest.stop_all()


def scenario_slow_steady_reader():
    """A client that reads slowly but steadily (8 KB/s, far below what one coalesced send of up to 64 KiB
    needs to go out within stream_idle_ms) is not cut: its progress is the bytes it takes, not whole
    sends. Once it stops reading it is cut as any stalled client. (Its 4 KiB receive buffer on loopback,
    whose MSS is 64 KiB, makes its TCP open the window, hence acknowledge bytes, in steps of about 6 KiB:
    0.75 s apart at 8 KB/s, well inside stream_idle_ms.)"""
    idle_ms = 2000
    p, d, r, alog = stalled_setup(idle_ms)
    try:
        s = stalled_socket(r)
        s.settimeout(5)
        got, t0 = 0, time.monotonic()
        # 4 x stream_idle_ms at 8 KB/s: 1 KiB every 125 ms (pacing of the reader, not synchronisation).
        while time.monotonic() - t0 < 4 * idle_ms / 1000:
            try:
                b = s.recv(1024)
            except ConnectionResetError:
                b = b""
            check(b, "the steady reader was cut after %.2f s (%d bytes taken)" % (time.monotonic() - t0, got), r)
            got += len(b)
            time.sleep(0.125)
        check(stats(d)["cancelled"] == 0 and metric_value(metrics(r), "pdr_client_stalled_total") == 0,
              "the steady reader's stream was cancelled", r)
        check(got > 20000, "the steady reader got only %d bytes" % got, r)
        # Now it stops reading: cut once it has taken nothing for stream_idle_ms (counted from the last bytes
        # its TCP acknowledged, which may precede its last read a little).
        t1 = time.monotonic()
        pdtest.poll_until(lambda: stats(d)["cancelled"] >= 1, 10, "the decode leg to be cancelled")
        took = time.monotonic() - t1
        check(took < idle_ms / 1000 * 2 + 2, "stream cut only after %.2fs" % took, r)
        check(metric_value(metrics(r), "pdr_client_stalled_total") == 1, "the stall not counted", r)
        s.close()
        check_loop_alive(r, "after the slow reader was cut")
    finally:
        pdtest.stop_all()


def scenario_slow_steady_reader_h2():
    """HTTP/2: a stream read slowly but steadily (its flow-control window granted back at 8 KB/s) is not
    cut, though one coalesced send of up to 64 KiB takes it 8 s against a stream_idle_ms of 2 s: the router
    hands h2o a slow stream's bytes in small pieces, each piece taken being progress. Once the client grants
    nothing more, the stream is cut as any stalled one. Needs python3-h2 (run with /usr/bin/python3)."""
    import h2.config
    import h2.connection
    import h2.events
    idle_ms = 2000
    p, d, r, alog = stalled_setup(idle_ms)
    try:
        s = socket.create_connection((H, r.port), timeout=10)
        c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        c.initiate_connection()
        s.sendall(c.data_to_send())
        raw = json.dumps(dict(BODIES["/generate"], stream=True, sampling_params={"max_new_tokens": 1000000}))
        c.send_headers(1, [(":method", "POST"), (":scheme", "http"), (":path", "/generate"), (":authority", "x"),
                           ("content-type", "application/json")])
        c.send_data(1, raw.encode(), end_stream=True)
        s.sendall(c.data_to_send())
        owed, got, reset = 0, 0, False
        t0 = time.monotonic()

        def read(timeout):
            nonlocal owed, got, reset
            s.settimeout(timeout)
            try:
                b = s.recv(65536)
            except socket.timeout:
                return
            except OSError:
                b = b""
            if not b:
                reset = True
                return
            for e in c.receive_data(b):
                if isinstance(e, h2.events.DataReceived):
                    owed += e.flow_controlled_length
                    got += len(e.data)
                elif isinstance(e, (h2.events.StreamReset, h2.events.ConnectionTerminated)):
                    reset = True
            out = c.data_to_send()
            if out:
                s.sendall(out)

        # 4 x stream_idle_ms, granting 1 KiB of window back every 125 ms (the reader's pace, not
        # synchronisation).
        while time.monotonic() - t0 < 4 * idle_ms / 1000:
            read(0.125)
            check(not reset, "the steady HTTP/2 reader was cut after %.2f s (%d bytes taken)" % (
                time.monotonic() - t0, got), r)
            n = min(owed, 1024)
            if n:
                c.acknowledge_received_data(n, 1)
                owed -= n
                s.sendall(c.data_to_send())
        check(stats(d)["cancelled"] == 0 and metric_value(metrics(r), "pdr_client_stalled_total") == 0,
              "the steady HTTP/2 reader's stream was cancelled", r)
        check(got > 20000, "the steady HTTP/2 reader got only %d bytes" % got, r)
        # It grants nothing more: cut.
        t1 = time.monotonic()
        pdtest.poll_until(lambda: stats(d)["cancelled"] >= 1, 10, "the decode leg to be cancelled")
        check(time.monotonic() - t1 < idle_ms / 1000 * 2 + 2, "stream cut only after %.2fs" % (
            time.monotonic() - t1), r)
        check(metric_value(metrics(r), "pdr_client_stalled_total") == 1, "the stall not counted", r)
        s.close()
        check_loop_alive(r, "after the slow HTTP/2 reader was cut")
    finally:
        pdtest.stop_all()


def scenario_stalled_reader_left():
    """A client that stopped reading and then left without a reset (its FIN arrives, nothing more: as
    from a host that went away): the router, which reads nothing from an HTTP/1 client during a
    response, cannot tell; the send timeout ends the stream, both legs are cancelled, the loop stays
    idle."""
    p, d, r, alog = stalled_setup(1000)
    try:
        s = stalled_socket(r)
        pdtest.poll_until(lambda: stats(d)["inflight"] == 1, 5, "the stream to start")
        # Let the client's receive buffer fill (it reads nothing) and the router's send stall, then leave.
        last = [None, 0]

        def stalled():
            queued = fionread(s)
            last[1] = last[1] + 1 if queued and queued == last[0] else 0
            last[0] = queued
            return last[1] >= 5
        pdtest.poll_until(stalled, 10, "the client's receive buffer to fill")
        s.shutdown(socket.SHUT_WR)
        pdtest.poll_until(lambda: stats(d)["cancelled"] >= 1 and stats(d)["inflight"] == 0, 10,
                          "the decode leg to be cancelled")
        check_loop_alive(r, "after the client left")
        s.close()
        st, _, out = request(r.port, "POST", "/generate", BODIES["/generate"])
        check(st == 200, "request after the client left: %d %s" % (st, out[:200]), r)
    finally:
        pdtest.stop_all()


def scenario_stalled_reader_h2():
    """HTTP/2: a client that grants a stream no flow-control window gets its connection reset after
    stream_idle_ms; both legs are cancelled."""
    nghttp = shutil.which("nghttp")
    if nghttp is None:
        print("nghttp not installed (nghttp2-client): skipped")
        sys.exit(77)
    p, d, r, alog = stalled_setup(1000)
    try:
        body = json.dumps(dict(BODIES["/generate"], stream=True, sampling_params={"max_new_tokens": 1000000}))
        fd, path = tempfile.mkstemp(prefix="pdtest-body-")
        with os.fdopen(fd, "w") as f:
            f.write(body)
        t0 = time.monotonic()
        # -w 0: the stream's initial window is 2^0-1 = 0 bytes, so the router can send no DATA on it.
        out = subprocess.run([nghttp, "-n", "-w", "0", "-d", path, "-H", "content-type: application/json",
                              "http://127.0.0.1:%d/generate" % r.port], capture_output=True, timeout=20)
        took = time.monotonic() - t0
        check(took >= 0.9 and took < 5, "nghttp ended after %.2fs: %r" % (took, out), r)
        pdtest.poll_until(lambda: stats(d)["cancelled"] >= 1 and stats(d)["inflight"] == 0, 10,
                          "the decode leg to be cancelled")
        check_loop_alive(r, "after the stalled HTTP/2 stream")
        check(metric_value(metrics(r), "pdr_client_stalled_total") == 1, "stall not counted", r)
    finally:
        pdtest.stop_all()



def scenario_smuggling():
    """Heads that another parser could frame differently get 400 and a closed connection, and nothing of
    them (or of the bytes after them) reaches a worker: Content-Length with Transfer-Encoding in either
    order, two Content-Length values, obs-fold, bare LF, HTTP/1.1 without Host."""
    p, d = sim("prefill"), sim("decode")
    r = router([p], [d])
    try:
        body = json.dumps(BODIES["/generate"]).encode()
        chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
        smuggled = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
        ct = b"Content-Type: application/json\r\n"
        cases = {
            "CL then TE": b"POST /generate HTTP/1.1\r\nHost: x\r\n" + ct + b"Content-Length: %d\r\n"
                          b"Transfer-Encoding: chunked\r\n\r\n" % len(chunked) + chunked + smuggled,
            "TE then CL": b"POST /generate HTTP/1.1\r\nHost: x\r\n" + ct + b"Transfer-Encoding: chunked\r\n"
                          b"Content-Length: 3\r\n\r\n" + chunked + smuggled,
            "two CL": b"POST /generate HTTP/1.1\r\nHost: x\r\n" + ct + b"Content-Length: %d\r\n"
                      b"Content-Length: %d\r\n\r\n" % (len(body), len(body) + len(smuggled)) + body + smuggled,
            "obs-fold": b"POST /generate HTTP/1.1\r\nHost: x\r\n" + ct + b"X-Folded: a\r\n b\r\n"
                        b"Content-Length: %d\r\n\r\n" % len(body) + body + smuggled,
            "bare LF": b"POST /generate HTTP/1.1\nHost: x\n" + ct + b"Content-Length: %d\n\n" % len(body) + body +
                       smuggled,
            "no Host": b"POST /generate HTTP/1.1\r\n" + ct + b"Content-Length: %d\r\n\r\n" % len(body) + body +
                       smuggled,
        }
        for name, data in cases.items():
            out, closed = raw_exchange(r.port, data)
            statuses = re.findall(rb"HTTP/1\.[01] (\d{3}) ", out)
            check(statuses == [b"400"], "%s: statuses %r: %r" % (name, statuses, out[:600]), r)
            check(closed, "%s: connection left open after the 400" % name, r)
            check(b"connection: close" in out.lower(), "%s: no Connection: close: %r" % (name, out[:400]), r)
            check(b'"code":400' in out and b"malformed request" in out, "%s: %r" % (name, out[-300:]), r)
        for w in (p, d):
            check(stats(w)["requests"] == 0, "a refused request reached %s: %r" % (w.name, stats(w)), r)
        m = metrics(r)
        check(metric_value(m, "pdr_http_bad_framing_total") == len(cases), "bad framing count: %s" %
              metric_value(m, "pdr_http_bad_framing_total"), r)
        # The same request, framed once, still works on a kept-alive connection.
        out, _ = raw_exchange(r.port, b"POST /generate HTTP/1.1\r\nHost: x\r\n" + ct +
                              b"Content-Length: %d\r\n\r\n" % len(body) + body + smuggled, timeout=2)
        statuses = re.findall(rb"HTTP/1\.[01] (\d{3}) ", out)
        check(statuses == [b"200", b"200"], "a well-framed pipelined pair: %r" % statuses, r)
    finally:
        pdtest.stop_all()


def url(w):
    return "http://127.0.0.1:%d" % w.port


def scenario_frozen_decode():
    """Under load, one of two decodes is frozen (SIGSTOP) for 3 s: its KV deadlines are not charged to the
    prefills, which stay healthy (never ejected); every request succeeds on a retry; the frozen decode is
    the one taken out, and it comes back after SIGCONT."""
    ps = [sim("prefill"), sim("prefill")]
    ds = [sim("decode"), sim("decode")]
    r = router(ps, ds, config="policy: { prefill: round_robin, decode: round_robin }\n"
               "health: { interval_ms: 500, timeout_ms: 300, rise: 1, fall: 2 }\n"
               "timeouts: { first_byte_ms: 1500, kv_transfer_ms: 600 }\n"
               # The 4 clients can all be on the frozen decode at once and all retry together: past the
               # default retry budget (3 at once) one would get its 504 by design.
               "retries: { max: 3, min_concurrent: 4 }")
    statuses, slow = [], []
    stop = threading.Event()
    lock = threading.Lock()

    def load():
        while not stop.is_set():
            t0 = time.monotonic()
            try:
                st = request(r.port, "POST", "/generate", BODIES["/generate"], timeout=15)[0]
            except OSError as e:
                st = repr(e)
            with lock:
                statuses.append(st)
                if time.monotonic() - t0 > 5:
                    slow.append(time.monotonic() - t0)
    threads = [threading.Thread(target=load) for _ in range(4)]
    try:
        for t in threads:
            t.start()
        pdtest.poll_until(lambda: len(statuses) >= 20, 10, "load to run")
        os.kill(ds[0].proc.pid, signal.SIGSTOP)
        frozen_at = time.monotonic()
        pdtest.poll_until(lambda: metric_value(metrics(r), "pdr_worker_healthy", role="decode", url=url(ds[0])) == 0,
                          10, "the frozen decode to be taken out")
        while time.monotonic() - frozen_at < 3:
            m = metrics(r)
            for p in ps:
                check(metric_value(m, "pdr_worker_healthy", role="prefill", url=url(p)) == 1,
                      "prefill %s taken out while a decode was frozen" % url(p), r)
            time.sleep(0.05)  # sampling interval of the observation, not synchronisation
        os.kill(ds[0].proc.pid, signal.SIGCONT)
        pdtest.poll_until(lambda: metric_value(metrics(r), "pdr_worker_healthy", role="decode", url=url(ds[0])) == 1,
                          10, "the decode to come back")
        n = len(statuses)
        pdtest.poll_until(lambda: len(statuses) >= n + 20, 10, "load after the thaw")
    finally:
        stop.set()
        for t in threads:
            t.join(20)
        try:
            os.kill(ds[0].proc.pid, signal.SIGCONT)
        except OSError:
            pass
    try:
        bad = [s for s in statuses if s != 200]
        check(not bad, "%d of %d requests failed: %r" % (len(bad), len(statuses), bad[:20]), r)
        m = metrics(r)
        for p in ps:
            check(metric_value(m, "pdr_worker_ejections_total", role="prefill", url=url(p)) == 0,
                  "prefill %s was ejected" % url(p), r)
        check(metric_value(m, "pdr_worker_ejections_total", role="decode", url=url(ds[0])) >= 1,
              "the frozen decode was never taken out", r)
    finally:
        pdtest.stop_all()


def scenario_dead_prefills_503():
    """Three prefills: one frozen (health checks take it out), then the other two killed one after the other.
    Once no prefill can be reached every request is answered 503 with Retry-After and a message naming
    the cause, within 1 s; never 502 (that is for a worker that answered badly)."""
    ps = [sim("prefill"), sim("prefill"), sim("prefill")]
    d = sim("decode")
    r = router(ps, [d], config="policy: { prefill: round_robin, decode: round_robin }\n"
               "health: { interval_ms: 300, timeout_ms: 200, rise: 1, fall: 2 }\n"
               "timeouts: { first_byte_ms: 3000, kv_transfer_ms: 3000 }\nretries: { max: 2 }")
    try:
        os.kill(ps[0].proc.pid, signal.SIGSTOP)
        pdtest.poll_until(lambda: metric_value(metrics(r), "pdr_worker_healthy", role="prefill", url=url(ps[0])) == 0,
                          10, "the frozen prefill to be taken out")
        for k in (1, 2):
            ps[k].proc.kill()
            ps[k].proc.wait()
            for i in range(4):
                t0 = time.monotonic()
                st, h, out = request(r.port, "POST", "/generate", BODIES["/generate"])
                dt = time.monotonic() - t0
                check(dt < 1.0, "request took %.2fs" % dt, r)
                if k == 1:
                    check(st == 200, "with one prefill left: %d %s" % (st, out[:300]), r)
                    continue
                err = json.loads(out)["error"]
                check(st == 503 and h.get("retry-after") == "1" and err["code"] == 503,
                      "after the last kill: %d %r %s" % (st, h, out[:300]), r)
                check("could not be reached" in err["message"] or "no healthy prefill" in err["message"],
                      "the message names no cause: %s" % err["message"], r)
    finally:
        try:
            os.kill(ps[0].proc.pid, signal.SIGCONT)
        except OSError:
            pass
        pdtest.stop_all()


def scenario_fd_exhausted():
    """The router runs with 512 file descriptors (soft = hard) and 700 idle clients connect: the loops pause
    accepting instead of spinning on EMFILE, count and log it, and once the clients are gone /health and
    PD requests are served again."""
    p, d = sim("prefill"), sim("decode")
    argv = ["/usr/bin/prlimit", "--nofile=512:512", pdtest.binary("pdrouter"), "--pd-disaggregation", "--host", H,
            "--port", "{port}", "--prefill", url(p), str(p.ports["bport"]), "--decode", url(d),
            "--admin-port", "{admin}", "--access-log", "off", "--drain-grace-ms", "0", "--threads", "2"]
    if not os.access(argv[0], os.X_OK):
        print("prlimit not installed: skipped")
        sys.exit(77)
    r = pdtest.start(argv, name="pdrouter", health_path="/readiness", healthy=200)
    clients = []
    try:
        for _ in range(700):
            c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            c.setblocking(False)
            c.connect_ex((H, r.port))
            clients.append(c)
        # No port can accept now (the admin port neither): the log says when it happened. A build that spins
        # on EMFILE says nothing, and the CPU check below tells.
        try:
            pdtest.poll_until(lambda: "not accepting for" in open(r.log_path).read(), 5,
                              "accept to run out of descriptors")
        except AssertionError:
            pass
        c0, t0 = cpu_seconds(r.proc.pid), time.monotonic()
        time.sleep(1.0)  # the measurement window of the CPU use, not synchronisation
        used = (cpu_seconds(r.proc.pid) - c0) / (time.monotonic() - t0)
        check(used < 0.5, "the router used %.0f%% of a core while out of descriptors" % (used * 100), r)
        for c in clients:
            c.close()
        clients = []
        pdtest.poll_until(lambda: health_ok(r), 15, "/health after the clients left")
        st, _, out = request(r.port, "POST", "/generate", BODIES["/generate"])
        check(st == 200, "request after the clients left: %d %s" % (st, out[:200]), r)
        check(metric_value(metrics(r), "pdr_accept_fd_exhausted_total") >= 1, "not counted", r)
        log = open(r.log_path).read()
        check("open files limit 512" in log, "the limit is not logged", r)
        check(log.count("not accepting for") == 1, "EMFILE not logged exactly once", r)
    finally:
        for c in clients:
            c.close()
        pdtest.stop_all()


def scenario_h2_rapid_reset():
    """HTTP/2 rapid reset (HEADERS + DATA + RST_STREAM in a loop, 2 connections, 3 s): every flooding
    connection is closed after about limits.h2_max_resets streams, no reset stream reaches a worker, an
    ordinary request keeps being answered quickly, no worker is ejected, and the access log stays small."""
    import h2flood
    ps, ds = [sim("prefill")], [sim("decode")]
    fd, alog = tempfile.mkstemp(prefix="pdtest-alog-", suffix=".log")
    os.close(fd)
    r = router(ps, ds, config="threads: 2\nlog: { access_log: %s }\n"
               "health: { interval_ms: 300, timeout_ms: 300, rise: 1, fall: 1 }\nlimits: { h2_max_resets: 100 }" % alog)
    try:
        res = {}
        th = threading.Thread(target=lambda: res.update(h2flood.flood(r.port, 2, 3.0, 50)))
        th.start()
        lat, bad = [], []
        while th.is_alive():
            t0 = time.monotonic()
            st = request(r.port, "POST", "/generate", BODIES["/generate"], timeout=10)[0]
            lat.append(time.monotonic() - t0)
            if st != 200:
                bad.append(st)
            time.sleep(0.05)  # the probe's pacing
        th.join()
        m = metrics(r)
        # The router writes GOAWAY ENHANCE_YOUR_CALM before the reset when h2o has nothing queued.
        check(res["goaway_codes"].get(11, 0) >= res["closed_by_server"] // 2,
              "closed flooding connections without GOAWAY ENHANCE_YOUR_CALM: %r" % res, r)
        resets = metric_value(m, "pdr_h2_client_resets_total")
        floods = metric_value(m, "pdr_h2_reset_floods_total")
        check(res["closed_by_server"] >= 2 and floods >= res["closed_by_server"] - 1,
              "flooding connections not closed: %r, %s closed by the router" % (res, floods), r)
        # A connection is closed once it has used its budget (plus what its last read still held).
        check(resets <= floods * 100 * 5 + 500, "%s resets over %s closed connections" % (resets, floods), r)
        reached = stats(ps[0])["requests"] - len(lat)
        check(reached <= resets * 0.01, "%d reset streams reached the prefill (of %s)" % (reached, resets), r)
        check(not bad and max(lat) < 2.0, "ordinary requests during the flood: bad %r, slowest %.2fs" %
              (bad, max(lat)), r)
        for role, w in (("prefill", ps[0]), ("decode", ds[0])):
            check(metric_value(m, "pdr_worker_ejections_total", role=role, url=url(w)) == 0,
                  "%s ejected during the flood" % role, r)
        # Every suppressed line is counted in a summary line, written at the next flush (100 ms).
        want = metric_value(metrics(r), "pdr_access_log_suppressed_total")
        check(want > 0, "no line was suppressed", r)

        def summed():
            ls = access_log_lines(alog)
            return ls if sum(l["suppressed"] for l in ls if "suppressed" in l) == want else None
        lines = pdtest.poll_until(summed, 5, "summary lines counting %s suppressed lines" % want)
        aborted = [l for l in lines if l.get("error") == "client_abort" and "suppressed" not in l]
        # 100 lines a second per loop (a burst of as many), 2 loops, a few seconds: the rest are summed up.
        check(len(aborted) <= 100 * 2 * 6, "%d aborted-request lines in the access log" % len(aborted), r)
    finally:
        pdtest.stop_all()


def scenario_h2_reset_flood_log():
    """A rapid-reset flood whose connections reconnect as fast as they are closed (4 connections, 5 s, one
    loop): the streams of closed connections are refused (429) and the reset ones aborted, thousands a
    second, but the access log takes at most 100 lines a second of each kind (a burst of as many); the
    rest are counted in summary lines ("suppressed": N, error "refused" or "client_abort") whose sum is
    pdr_access_log_suppressed_total."""
    import h2flood
    ps, ds = [sim("prefill")], [sim("decode")]
    fd, alog = tempfile.mkstemp(prefix="pdtest-alog-", suffix=".log")
    os.close(fd)
    r = router(ps, ds, config="threads: 1\nlog: { access_log: %s }\nlimits: { h2_max_resets: 100 }" % alog)
    try:
        t0 = time.monotonic()
        res = h2flood.flood(r.port, 4, 5.0, 100)
        check(res["connections"] > 20, "the flood did not reconnect: %r" % res, r)

        def summed():
            want = metric_value(metrics(r), "pdr_access_log_suppressed_total")
            ls = access_log_lines(alog)
            return (ls, want) if want and sum(l["suppressed"] for l in ls if "suppressed" in l) == want else None
        lines, want = pdtest.poll_until(summed, 5, "summary lines counting the suppressed lines")
        took = time.monotonic() - t0
        refused = [l for l in lines if "suppressed" not in l and l.get("status") == 429]
        summaries = [l for l in lines if "suppressed" in l]
        # Two kinds, each a burst of 100 and 100 a second; the rest are summaries (at most one per flush,
        # 10 a second, per kind).
        bound = 2 * (100 + 100 * (took + 1)) + 2 * 10 * (took + 1)
        check(len(lines) <= bound, "%d access-log lines in %.1f s (%d refused with 429), over %d" %
              (len(lines), took, len(refused), bound), r)
        check(any(l["error"] == "refused" for l in summaries), "no summary of refused lines: %r" % summaries[:5], r)
        check(want > len(lines), "only %d lines suppressed, %d written: the flood was too small" % (want, len(lines)), r)
    finally:
        pdtest.stop_all()


def scenario_merge_too_large():
    """A non-streaming answer with logprobs larger than limits.max_merge_bytes is answered with a clean 502
    (JSON error, a length, nothing else sent), never a 200 with a broken body; smaller ones are merged, and
    streams are not held whole (only each event is: scenario_merge_event_unbounded)."""
    p, d = sim("prefill"), sim("decode")
    r = router([p], [d], config="limits: { max_merge_bytes: 4096 }")
    try:
        big = dict(BODIES["/generate"], return_logprob=True, sampling_params={"max_new_tokens": 600})
        st, h, out = request(r.port, "POST", "/generate", big)
        check(st == 502 and h.get("content-length") == str(len(out)), "big merge: %d %r %r" % (st, h, out[:300]), r)
        err = json.loads(out)["error"]
        check("max_merge_bytes" in err["message"] and err["code"] == 502, out, r)
        small = dict(BODIES["/generate"], return_logprob=True)
        j = json.loads(request(r.port, "POST", "/generate", small)[2])
        check(len(j["meta_info"]["input_token_logprobs"]) == j["meta_info"]["prompt_tokens"], repr(j)[:300], r)
        # A stream is merged event by event: many events, more than the limit together, each under it.
        long_stream = dict(big, stream=True, sampling_params={"max_new_tokens": 40})
        st, _, raw = request(r.port, "POST", "/generate", long_stream)
        check(st == 200 and raw.rstrip().endswith(b"data: [DONE]"), "long stream: %d %r" % (st, raw[-200:]), r)
        check(len(raw) > 4 * 4096 and max(len(e) for e in raw.split(b"\n\n")) < 4096,
              "long stream: %d bytes, longest event %d" % (len(raw), max(len(e) for e in raw.split(b"\n\n"))), r)
        pdtest.poll_until(lambda: stats(d)["inflight"] == 0, 5, "the decode to finish")
    finally:
        pdtest.stop_all()


FAKE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_sse_worker.py")


def fake_worker(role, *extra):
    return pdtest.start([sys.executable, FAKE, "--role", role, "--port", "{port}", "--bootstrap-port", "{bport}"]
                        + list(extra), name="fake-%s" % role)


def fake_stats(w):
    return json.loads(request(w.port, "GET", "/fake/stats")[2])


def vm_status(pid, field):
    """A size from /proc/PID/status (VmRSS: resident now, VmHWM: the peak), in bytes."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no %s" % field)


MERGE_STREAM = {"text": "hello", "stream": True, "return_logprob": True, "sampling_params": {"max_new_tokens": 4}}


def scenario_merge_event_unbounded():
    """A streaming logprob merge whose decode never ends its event (no blank line): the event is held at
    most limits.max_merge_bytes, then the stream ends with an error event naming the limit, the decode is
    cancelled, the refusal is counted and logged. Each read is searched once (the router's CPU stays far
    below a rescan of the growing event on every read), its memory stays bounded, and /health answers at
    once meanwhile."""
    limit = 64 << 20  # the default limits.max_merge_bytes
    # Under AddressSanitizer, freed blocks wait in its quarantine (256 MiB): the carry's earlier sizes would
    # count in the RSS. Other builds ignore the variable.
    os.environ["ASAN_OPTIONS"] = ":".join(o for o in (os.environ.get("ASAN_OPTIONS"), "quarantine_size_mb=0") if o)
    pf, dc = fake_worker("prefill"), fake_worker("decode", "--chunk", "16384")
    r = router([pf], [dc], config="threads: 1")
    try:
        rss0, cpu0 = vm_status(r.proc.pid, "VmRSS"), cpu_seconds(r.proc.pid)
        result = {}

        def client():
            try:
                result["resp"] = request(r.port, "POST", "/generate", MERGE_STREAM, timeout=30)
            except Exception as e:  # reported below
                result["error"] = e
        t = threading.Thread(target=client)
        t.start()
        health_max = 0.0
        while t.is_alive():
            t0 = time.monotonic()
            st = request(r.port, "GET", "/health", timeout=10)[0]
            health_max = max(health_max, time.monotonic() - t0)
            check(st == 200, "/health answered %d during the stream" % st, r)
            t.join(0.05)  # pacing of the probes; the loop ends when the client's request does
        cpu = cpu_seconds(r.proc.pid) - cpu0
        rss_max = vm_status(r.proc.pid, "VmHWM")
        print("router: %.2f s of CPU, /health at most %.3f s, peak RSS +%d MiB" % (cpu, health_max,
                                                                                 (rss_max - rss0) >> 20))
        check("resp" in result, "the client's request: %r" % result.get("error"), r)
        st, h, raw = result["resp"]
        events = pdtest.sse_events(raw.split(b"\n\n", 1)[-1] if not raw.startswith(b"data:") else raw)
        check(st == 200 and h.get("content-type", "").startswith("text/event-stream"), "status %d %r" % (st, h), r)
        check(len(events) >= 1 and isinstance(events[-1], dict) and "error" in events[-1] and
              "max_merge_bytes" in events[-1]["error"]["message"] and events[-1]["error"]["code"] == 502,
              "the stream's end: %r" % raw[-300:], r)
        check(len(raw) < 4096, "the unfinished event reached the client (%d bytes)" % len(raw), r)
        # The carry's buffer doubles (a realloc holds the old and the new one for a moment): at most about
        # 2 x the limit, plus the sanitizer's shadow in that build.
        check(rss_max - rss0 < 3 * limit, "RSS grew by %d MiB for a %d MiB limit" % (
            (rss_max - rss0) >> 20, limit >> 20), r)
        check(cpu < 2.0, "the router used %.1f s of CPU for a %d MiB event (searched again on every read?)" % (
            cpu, limit >> 20), r)
        check(health_max < 1.0, "/health took %.2f s during the stream" % health_max, r)
        pdtest.poll_until(lambda: fake_stats(dc)["closed"] == 1, 10, "the decode's stream to be closed")
        check(metric_value(metrics(r), "pdr_merge_too_large_total") == 1, "pdr_merge_too_large_total", r)
        with open(r.log_path, errors="replace") as f:
            check("outgrew limits.max_merge_bytes" in f.read(), "no log line for the refusal", r)
        check_loop_alive(r, "after the refused stream")
    finally:
        pdtest.stop_all()


def scenario_merge_client_gone():
    """An HTTP/1 client that leaves a streaming logprob merge to which the router has sent nothing (the
    decode's event never ends): the decode is not read on for nobody; its connection is closed within a
    second or so and the abort counted."""
    pf, dc = fake_worker("prefill"), fake_worker("decode", "--chunk", "1024", "--interval-ms", "20")
    r = router([pf], [dc], config="threads: 1")
    try:
        raw = json.dumps(MERGE_STREAM).encode()
        s = socket.create_connection((H, r.port))
        s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(raw) + raw)
        pdtest.poll_until(lambda: fake_stats(dc)["sent"] >= 4096, 10, "the decode's stream to flow")
        s.close()
        pdtest.poll_until(lambda: fake_stats(dc)["closed"] == 1, 5, "the decode's stream to be closed")
        pdtest.poll_until(lambda: metric_value(metrics(r), "pdr_client_aborts_total") == 1, 5, "the abort counted")
        check_loop_alive(r, "after the client left")
    finally:
        pdtest.stop_all()


def scenario_merge_stream_burst():
    """A streaming logprob merge puts the prefill's whole input logprobs (here about 64 KB) in front of
    every event of the decode: a burst of small events (600, about 65 KB, in one write) would make
    megabytes per read. The router merges events into a send only up to its high water mark and keeps
    the rest for the next send, so its memory stays a few sends' worth (not the tens of MB of merging a
    read's events at once); every event arrives merged, in order, then [DONE]."""
    n, lp = 600, 4000
    os.environ["ASAN_OPTIONS"] = ":".join(o for o in (os.environ.get("ASAN_OPTIONS"), "quarantine_size_mb=0") if o)
    pf = fake_worker("prefill", "--logprobs", str(lp))
    dc = fake_worker("decode", "--events", str(n))
    r = router([pf], [dc], config="threads: 1")
    try:
        rss0, cpu0, t0 = vm_status(r.proc.pid, "VmRSS"), cpu_seconds(r.proc.pid), time.monotonic()
        st, h, raw = request(r.port, "POST", "/generate", MERGE_STREAM, timeout=60)
        rss_max = vm_status(r.proc.pid, "VmHWM")
        print("router: peak RSS +%d MiB, %.2f s of CPU, for %d MiB of merged events in %.2f s" % (
            (rss_max - rss0) >> 20, cpu_seconds(r.proc.pid) - cpu0, len(raw) >> 20, time.monotonic() - t0))
        check(st == 200 and h.get("content-type", "").startswith("text/event-stream"), "status %d %r" % (st, h), r)
        events = pdtest.sse_events(raw)
        check(len(events) == n + 1 and events[-1] == "[DONE]", "%d events, the last %r" % (
            len(events), str(events[-1])[:200]), r)
        for i, e in enumerate(events[:-1]):
            m = e["meta_info"]
            check(len(m["input_token_logprobs"]) == lp and m["output_token_logprobs"][0][1] == i,
                  "event %d: %d input logprobs, token %r" % (i, len(m["input_token_logprobs"]),
                                                           m["output_token_logprobs"]), r)
        check(rss_max - rss0 < 16 << 20, "RSS grew by %d MiB: the merged events of a read were held at once" % (
            (rss_max - rss0) >> 20), r)
        check(metric_value(metrics(r), "pdr_merge_too_large_total") == 0, "pdr_merge_too_large_total", r)
        check_loop_alive(r, "after the burst")
    finally:
        pdtest.stop_all()


def scenario_merge_event_past_limit():
    """An event of the decode that the merge makes larger than limits.max_merge_bytes (the prefill's input
    logprobs, about 130 KB, in front of a small event; the limit 64 KiB) is not sent: the stream ends with an
    error event naming the limit, before any merged event. A whole answer merged past the limit is a clean
    502 before its head. Both are counted in pdr_merge_too_large_total and logged."""
    pf = fake_worker("prefill", "--logprobs", "8000")
    dc = fake_worker("decode", "--events", "5")
    r = router([pf], [dc], config="threads: 1\nlimits: { max_merge_bytes: 65536 }")
    try:
        st, h, raw = request(r.port, "POST", "/generate", MERGE_STREAM)
        events = pdtest.sse_events(raw)
        check(st == 200 and len(events) == 1 and "error" in events[0] and
              "max_merge_bytes" in events[0]["error"]["message"] and events[0]["error"]["code"] == 502,
              "stream: %d %r" % (st, raw[:300]), r)
        check(len(raw) < 4096, "a merged event reached the client (%d bytes)" % len(raw), r)
        whole = dict(MERGE_STREAM, stream=False)
        st, h, out = request(r.port, "POST", "/generate", whole)
        check(st == 502 and h.get("content-length") == str(len(out)), "whole: %d %r %r" % (st, h, out[:300]), r)
        err = json.loads(out)["error"]
        check("max_merge_bytes" in err["message"] and err["code"] == 502, out, r)
        check(metric_value(metrics(r), "pdr_merge_too_large_total") == 2, "pdr_merge_too_large_total", r)
        with open(r.log_path, errors="replace") as f:
            check("outgrew limits.max_merge_bytes" in f.read(), "no log line for the refused stream", r)
        check_loop_alive(r, "after the refusals")
    finally:
        pdtest.stop_all()


def scenario_refusals_logged():
    """Every PD request gets exactly one access-log line, the ones refused before routing too
    (limits.max_inflight, a malformed body). (A body over limits.max_body_bytes is refused by h2o before the
    router sees the request.)"""
    p, d = sim("prefill"), sim("decode", "--decode-us-per-token", "20000")
    fd, alog = tempfile.mkstemp(prefix="pdtest-alog-", suffix=".log")
    os.close(fd)
    r = router([p], [d], config="log: { access_log: %s }\nlimits: { max_inflight: 1, queue: 0 }" % alog)
    try:
        result = {}
        t = threading.Thread(target=lambda: result.update(resp=request(r.port, "POST", "/generate", dict(
            BODIES["/generate"], sampling_params={"max_new_tokens": 50}))))
        t.start()
        pdtest.poll_until(lambda: stats(d)["inflight"] == 1, 5, "the first request to run")
        st, h, _ = request(r.port, "POST", "/generate", BODIES["/generate"])
        check(st == 503 and h.get("retry-after") == "1", "over max_inflight: %d" % st, r)
        t.join(10)
        check(result["resp"][0] == 200, "the first request: %r" % (result["resp"][:2],), r)
        check(request(r.port, "POST", "/generate", "{not json")[0] == 400, "malformed", r)
        lines = pdtest.poll_until(lambda: (lambda ls: ls if len(ls) >= 3 else None)(access_log_lines(alog)), 5,
                                  "three access-log lines")
        causes = sorted(str(l["error"]) for l in lines)
        check(len(lines) == 3 and causes == ["None", "invalid_request", "max_inflight"],
              "access log: %r" % lines, r)
    finally:
        pdtest.stop_all()


_unread = {}  # socket -> bytes received past the end of the last response read_response returned


def read_response(s):
    """One HTTP/1.1 response with a Content-Length from socket s: (status, body). Bytes that arrived
    after it (a pipelined response in the same read) are kept for the next call on s."""
    buf = _unread.pop(s, b"")
    while b"\r\n\r\n" not in buf:
        b = s.recv(65536)
        if not b:
            raise AssertionError("connection closed before a response: %r" % buf)
        buf += b
    head, _, rest = buf.partition(b"\r\n\r\n")
    n = int(re.search(rb"(?i)content-length: (\d+)", head).group(1))
    while len(rest) < n:
        b = s.recv(65536)
        if not b:
            raise AssertionError("connection closed inside a response body: %r" % head)
        rest += b
    if len(rest) > n:
        _unread[s] = rest[n:]
    return int(head.split(b" ")[1]), rest[:n]


def scenario_chunked_bodies():
    """Chunked request bodies: ones that arrive in many pieces, on a kept-alive connection, are served;
    a chunk that declares more than limits.max_body_bytes is answered 413 at once (h2o alone waits 10 s
    for those bytes, then closes without an answer) and never reaches a worker."""
    p, d = sim("prefill"), sim("decode")
    r = router([p], [d])
    try:
        body = json.dumps(BODIES["/generate"]).encode()
        head = b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        pieces = [head[:20], head[20:], b"%x\r\n" % 10, body[:10], b"\r\n%x;e=1\r\n" % (len(body) - 10), body[10:30],
                  body[30:], b"\r\n", b"0\r\n", b"\r\n"]
        s = socket.create_connection((H, r.port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.settimeout(10)
        for k in range(2):
            for piece in pieces:
                s.sendall(piece)
                time.sleep(0.01)  # one read per piece on the router's side: traffic shaping, not synchronisation
            st, out = read_response(s)
            check(st == 200 and b"text" in out, "chunked request %d: %d %r" % (k, st, out[:200]), r)
        # The same connection, a third request whose chunk cannot fit: 413 at once, then closed.
        t0 = time.monotonic()
        s.sendall(head + b"7fffffff\r\n{\"text\":")
        st, out = read_response(s)
        took = time.monotonic() - t0
        check(st == 413 and json.loads(out)["error"]["code"] == 413 and took < 1.0,
              "an oversized chunk: %d %r after %.2fs" % (st, out, took), r)
        check(s.recv(100) == b"", "connection left open", r)
        s.close()
        # A fresh connection, 16 hex digits.
        t0 = time.monotonic()
        out, closed = raw_exchange(r.port, head + b"ffffffffffffffff\r\nabc", timeout=5)
        check(out.startswith(b"HTTP/1.1 413") and closed and time.monotonic() - t0 < 1.0, "%r" % out[:200], r)
        # The guard follows a body across reads: the oversized chunk comes after others, each in its own read.
        s = socket.create_connection((H, r.port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.settimeout(5)
        for piece in (head, b"5\r\n{\"tex", b"\r\n3;x\r\nt\":\r\n", b"7fffffff\r\n"):
            s.sendall(piece)
            time.sleep(0.01)  # separate reads (traffic shaping)
        check(read_response(s)[0] == 413, "an oversized chunk after others", r)
        s.close()
        # A chunked request pipelined behind another (the guard did not see its head arrive alone): served.
        pipelined = (b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                     % len(body) + body + head + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n")
        s = socket.create_connection((H, r.port))
        s.settimeout(10)
        s.sendall(pipelined)
        check([read_response(s)[0] for _ in range(2)] == [200, 200], "pipelined pair", r)
        s.close()
        check(stats(p)["requests"] == 4 and stats(d)["requests"] == 4, "workers saw %r %r" % (stats(p), stats(d)), r)
        check(metric_value(metrics(r), "pdr_http_chunk_too_large_total") == 3, "not counted", r)
    finally:
        pdtest.stop_all()


def h2_frames(sock, timeout=5.0):
    """Reads frames until the server closes: [(type, flags, stream, payload)]."""
    sock.settimeout(timeout)
    buf, out = b"", []
    try:
        while True:
            b = sock.recv(1 << 16)
            if not b:
                break
            buf += b
    except OSError:
        pass
    while len(buf) >= 9:
        n = int.from_bytes(buf[:3], "big")
        if len(buf) < 9 + n:
            break
        out.append((buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF, buf[9:9 + n]))
        buf = buf[9 + n:]
    return out


def scenario_h2_header_block():
    """An HTTP/2 header block (HEADERS + CONTINUATION) larger than h2o takes: the connection gets SETTINGS,
    then GOAWAY ENHANCE_YOUR_CALM whose debug text names the cause, and is closed, whether the block comes
    in the connection's first read or after an ordinary request on the same connection; a block of a
    normal size is served."""
    import h2flood
    p, d = sim("prefill"), sim("decode")
    r = router([p], [d])
    try:
        frag = bytes(16384)
        flood = h2flood.frame(1, 0, 1, frag) + b"".join(h2flood.frame(9, 0, 1, frag) for _ in range(40))
        # 1. All of it in one send, right behind the preface.
        s = socket.create_connection((H, r.port))
        s.sendall(h2flood.PREFACE + h2flood.frame(4, 0, 0) + flood)
        fr = h2_frames(s)
        s.close()
        check(fr and fr[0][0] == 4, "first frame is not SETTINGS: %r" % [f[:3] for f in fr], r)
        ga = [f for f in fr if f[0] == 7]
        check(len(ga) == 1, "no single GOAWAY: %r" % [f[:3] for f in fr], r)
        code = int.from_bytes(ga[0][3][4:8], "big")
        text = ga[0][3][8:].decode()
        check(code == 0xB and "header block of stream 1 exceeds" in text, "GOAWAY %#x %r" % (code, text), r)
        # 2. An ordinary request first (answered), then a block too large on stream 3.
        s = socket.create_connection((H, r.port))
        s.sendall(h2flood.PREFACE + h2flood.frame(4, 0, 0) + h2flood.frame(1, 0x4, 1, h2flood.request_block()) +
                  h2flood.frame(0, 0x1, 1, h2flood.BODY))
        s.settimeout(10)
        got, ended = b"", False
        while not ended:  # until stream 1's answer ends (a DATA or HEADERS frame with END_STREAM)
            b = s.recv(1 << 16)
            check(b, "closed before the first answer", r)
            got += b
            while len(got) >= 9 and len(got) >= 9 + int.from_bytes(got[:3], "big"):
                n = int.from_bytes(got[:3], "big")
                ended = ended or (got[3] in (0, 1) and got[4] & 1 and int.from_bytes(got[5:9], "big") == 1)
                got = got[9 + n:]
        s.sendall(h2flood.frame(1, 0, 3, frag) + b"".join(h2flood.frame(9, 0, 3, frag) for _ in range(40)))
        fr = h2_frames(s)
        s.close()
        ga = [f for f in fr if f[0] == 7]
        check(len(ga) == 1, "no GOAWAY after an answered request: %r" % [f[:3] for f in fr], r)
        last = int.from_bytes(ga[0][3][:4], "big")
        text = ga[0][3][8:].decode()
        check(last == 1 and "header block of stream 3 exceeds" in text, "GOAWAY last %d %r" % (last, text), r)
        check(metric_value(metrics(r), "pdr_h2_header_block_too_large_total") == 2, "not counted", r)
        # 3. The router still serves HTTP/2 (nghttp) and HTTP/1.
        check(request(r.port, "POST", "/generate", BODIES["/generate"], timeout=10)[0] == 200, "HTTP/1 after", r)
        out = subprocess.run(["nghttp", "-d", "-", "-H", ":method: POST", "-H", "content-type: application/json",
                              "http://%s:%d/generate" % (H, r.port)], input=json.dumps(BODIES["/generate"]).encode(),
                             capture_output=True, timeout=20)
        check(out.returncode == 0 and b"text" in out.stdout, "nghttp request: %r" % (out.stderr[-300:],), r)
    finally:
        pdtest.stop_all()


if __name__ == "__main__":
    pdtest.run_scenario(globals())
