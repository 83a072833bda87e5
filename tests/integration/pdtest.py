"""Small helpers shared by the integration tests (python3 standard library only).

    import pdtest
    sim = pdtest.start(["pdsim", "--role", "both", "--port", "{port}"], name="both")
    status, headers, body = pdtest.request(sim.port, "POST", "/generate", {"text": "hi"})
    events = pdtest.sse_events(body)            # the JSON objects of "data:" lines, "[DONE]" kept as a str
    sim.stop()                                  # SIGTERM, then wait; returns the exit status

- Binaries are found in $PDR_BUILD (set by ctest), else ../../build next to this file.
- start() replaces "{port}" (and "{port2}", ...) in the argument list with free loopback ports, starts
  the process with its output in a log file, and waits until GET /health answers (any status unless
  `healthy` is given), polling with a short backoff: it waits on the event, never sleeps blindly.
- Every failure raises AssertionError with the process's log tail, so a test reads as plain asserts.
"""

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

HOST = "127.0.0.1"


def build_dir():
    """The CMake build directory that holds the binaries."""
    d = os.environ.get("PDR_BUILD")
    if d:
        return d
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build")


def binary(name):
    """Absolute path of a built binary; AssertionError if it is missing."""
    p = os.path.join(build_dir(), name)
    assert os.access(p, os.X_OK), "binary not found: %s (set PDR_BUILD)" % p
    return p


def _ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_PORT_DIR = os.path.join(tempfile.gettempdir(), "pdtest-ports")
_held = {}  # port -> lock file this process holds until it exits (fcntl locks do not stop the holder)


def free_port(host=HOST):
    """A loopback port (free for TCP and UDP) for a server a test starts.

    bind(0) would hand out a port from the kernel's ephemeral range, which every outgoing connection
    (the router to its workers, ZMQ, clients) also draws its source port from: between closing the probe
    socket and the server's bind, a connection of a test running in parallel may take it. Ports are
    therefore picked below that range, checked with a bind, and reserved across the parallel test
    processes with a lock file held (fcntl) until this process exits."""
    import fcntl
    import random

    low = _ephemeral_low()
    lo, hi = (12000, low - 1) if low > 14000 else (61000, 65535)
    os.makedirs(_PORT_DIR, exist_ok=True)
    for _ in range(2000):
        port = random.randint(lo, hi)
        if port in _held:
            continue
        fd = os.open(os.path.join(_PORT_DIR, str(port)), os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        # UDP too: a pdsim prefill also binds its bootstrap port's number for KV lease heartbeats.
        try:
            for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
                with socket.socket(socket.AF_INET, kind) as s:
                    s.bind((host, port))
        except OSError:
            os.close(fd)
            continue
        _held[port] = fd
        return port
    raise AssertionError("no free loopback port in %d..%d" % (lo, hi))


def poll_until(pred, timeout=10.0, what="condition"):
    """Calls pred() with a short, growing backoff (1 ms .. 100 ms) until it returns a true value, which
    is returned. AssertionError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


class Proc:
    """A started server process: .port, .ports (dict of the placeholders), .proc, .log_path."""

    def __init__(self, name, proc, ports, log_path):
        self.name = name
        self.proc = proc
        self.ports = ports
        self.port = ports.get("port")
        self.log_path = log_path

    def log_tail(self, n=40):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def alive(self):
        return self.proc.poll() is None

    def wait_exit(self, timeout=10.0):
        """Waits for the process to exit by itself; returns its status."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError("%s did not exit within %.1fs\n%s" % (self.name, timeout, self.log_tail()))

    def stop(self, sig=signal.SIGTERM, timeout=10.0):
        """Sends sig (SIGTERM) and waits; returns the exit status (kills after timeout)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("%s ignored signal %d for %.1fs\n%s" % (self.name, sig, timeout, self.log_tail()))
        return self.proc.returncode


_procs = []


def start(argv, name=None, health_path="/health", healthy=None, timeout=10.0, env=None, ports=None):
    """Starts argv (argv[0] a binary name looked up in the build dir unless it contains a '/').

    Placeholders "{port}", "{port2}", "{bport}", ... inside arguments become free loopback ports, or the
    ones `ports` presets (when a file passed to the process must name its port before it starts).
    Waits until health_path answers (any HTTP status, or exactly `healthy` when given). Returns Proc."""
    ports = dict(ports or {})
    args = []
    for a in argv:
        while "{" in a and "}" in a:
            key = a[a.index("{") + 1 : a.index("}")]
            if key not in ports:
                ports[key] = free_port()
            a = a.replace("{%s}" % key, str(ports[key]))
        args.append(a)
    if "/" not in args[0]:
        args[0] = binary(args[0])
    name = name or os.path.basename(args[0])
    fd, log_path = tempfile.mkstemp(prefix="pdtest-%s-" % name, suffix=".log")
    with os.fdopen(fd, "w") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
    p = Proc(name, proc, ports, log_path)
    _procs.append(p)
    if health_path is not None and p.port is not None:

        def up():
            if proc.poll() is not None:
                raise AssertionError("%s exited with %s during start\n%s" % (name, proc.returncode, p.log_tail()))
            try:
                st, _, _ = request(p.port, "GET", health_path, timeout=1.0)
            except OSError:
                return False
            return healthy is None or st == healthy

        poll_until(up, timeout, "%s to answer %s" % (name, health_path))
    return p


def stop_all():
    """Stops every process started by start() that is still running (for a finally: clause)."""
    for p in _procs:
        if p.alive():
            try:
                p.stop(timeout=5)
            except AssertionError as e:
                print(e, file=sys.stderr)


def request(port, method, path, body=None, headers=None, timeout=10.0, host=HOST):
    """One HTTP/1.1 request on a fresh connection. body: bytes, str, or any JSON value (sent as JSON).
    Returns (status, headers dict with lower-case names, body bytes)."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        hdrs = dict(headers or {})
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
            hdrs.setdefault("Content-Type", "application/json")
        if isinstance(body, str):
            body = body.encode()
        conn.request(method, path, body=body, headers=hdrs)
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
    finally:
        conn.close()


def request_json(port, method, path, body=None, expect=200, **kw):
    """request() that asserts the status (when expect is not None) and decodes the JSON body."""
    st, hdrs, data = request(port, method, path, body, **kw)
    if expect is not None:
        assert st == expect, "%s %s: status %d, expected %d: %r" % (method, path, st, expect, data[:500])
    return json.loads(data) if data else None


def sse_events(data):
    """Splits a text/event-stream body into its data payloads: JSON objects decoded, "[DONE]" kept as
    the string "[DONE]". Multi-line data fields are joined with newlines, as the SSE spec says."""
    if isinstance(data, bytes):
        data = data.decode()
    out = []
    for block in data.replace("\r\n", "\n").split("\n\n"):
        lines = [l[5:].lstrip(" ") if l.startswith("data:") else None for l in block.split("\n")]
        payload = "\n".join(l for l in lines if l is not None)
        if not any(l is not None for l in lines):
            continue
        out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def stream_request(port, method, path, body, timeout=10.0, host=HOST):
    """Starts a request and returns (conn, response) without reading the body, for tests that read a
    stream step by step or drop the connection mid-way. Close conn when done."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    conn.request(method, path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    return conn, conn.getresponse()


def raw_exchange(port, data, timeout=5.0, host=HOST):
    """Sends data on a fresh connection (as much as the peer takes) and reads until it closes the
    connection. Returns (bytes, closed)."""
    s = socket.create_connection((host, port))
    s.settimeout(timeout)
    out, closed = b"", False
    try:
        s.sendall(data)
    except (ConnectionResetError, BrokenPipeError, socket.timeout):
        pass  # the peer answered and closed before taking it all: its answer is still to be read
    try:
        while True:
            b = s.recv(65536)
            if not b:
                closed = True
                break
            out += b
    except socket.timeout:
        pass
    except ConnectionResetError:
        closed = True
    s.close()
    return out, closed


def peak_rss_mib(pid):
    """The process's peak resident set (VmHWM), MiB."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def check(cond, msg, *procs):
    """assert with the log tails of procs appended to the message."""
    if not cond:
        raise AssertionError(msg + "".join("\n--- %s log ---\n%s" % (p.name, p.log_tail()) for p in procs))


def scenario_names(scope):
    """The scenarios a driver defines: the names of its own scenario_* functions (not imported ones), in
    the order written. CMake registers one ctest per name from `DRIVER --list` (tests/CMakeLists.txt,
    pdr_scenario_tests), so the driver is the one list of its tests."""
    module = scope.get("__name__")
    return [k[len("scenario_"):] for k, v in scope.items()
            if k.startswith("scenario_") and callable(v) and getattr(v, "__module__", None) == module]


def scenario_arg(scope, argv=None):
    """The scenario named on the command line (argv[1]). `--list` prints scenario_names(scope), one a
    line, and exits 0; no argument exits 2 with the usage and the names."""
    argv = argv or sys.argv
    if len(argv) < 2:
        print("usage: %s SCENARIO|--list\nscenarios: %s" % (os.path.basename(argv[0]),
                                                         " ".join(scenario_names(scope))), file=sys.stderr)
        sys.exit(2)
    if argv[1] == "--list":
        print("\n".join(scenario_names(scope)))
        sys.exit(0)
    return argv[1]


def run_scenario(scope, argv=None):
    """Runs the function scenario_<argv[1]> found in scope (a module's globals()), stopping every
    process it started afterwards; exits 2 for an unknown name. `--list` prints the scenario names."""
    name = scenario_arg(scope, argv)
    fn = scope.get("scenario_" + name)
    if fn is None:
        print("unknown scenario %s" % name, file=sys.stderr)
        sys.exit(2)
    t0 = time.monotonic()
    try:
        fn()
    finally:
        stop_all()
    print("scenario %s passed in %.2fs" % (name, time.monotonic() - t0))


def start_router(config_path, ports, args=()):
    """Starts pdrouter --config config_path (args appended) whose ports ({"port": ..., "admin": ...}) the
    caller chose and wrote into the file; waits until GET /readiness on ports["port"] answers 200.
    Returns its Proc, with .config_path set."""
    fd, log_path = tempfile.mkstemp(prefix="pdtest-pdrouter-", suffix=".log")
    with os.fdopen(fd, "w") as log:
        proc = subprocess.Popen([binary("pdrouter"), "--config", config_path] + list(args), stdout=log,
                                stderr=subprocess.STDOUT)
    r = Proc("pdrouter", proc, dict(ports), log_path)
    r.config_path = config_path
    _procs.append(r)

    def ready():
        if proc.poll() is not None:
            raise AssertionError("pdrouter exited with %s\n%s" % (proc.returncode, r.log_tail()))
        try:
            return request(r.port, "GET", "/readiness", timeout=1.0)[0] == 200
        except OSError:
            return False

    poll_until(ready, 10, "pdrouter to be ready")
    return r


def access_lines(path, n, timeout=5.0):
    """Waits until the JSON access log at path holds at least n lines; returns them all, parsed."""

    def read():
        try:
            with open(path) as f:
                lines = [json.loads(l) for l in f if l.strip()]
        except OSError:
            return None
        return lines if len(lines) >= n else None

    return poll_until(read, timeout, "%d access-log lines" % n)


def last_access_line(path, uri, timeout=10.0):
    """Waits for a JSON line of the access log at path that names uri (e.g. "/generate"); returns the
    last such line, parsed. Lines that are not JSON objects are skipped."""

    def line():
        try:
            with open(path) as f:
                ls = [json.loads(x) for x in f if x.startswith("{") and '"%s"' % uri in x]
        except OSError:
            return None
        return ls[-1] if ls else None

    return poll_until(line, timeout, "the access log line")
