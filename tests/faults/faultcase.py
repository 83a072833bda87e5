"""The fault suite's harness: workers (on loopback or in namespaces), a router in front of them, clients
that record what crossed the wire, and the three checks every case makes (python3 standard library).

Every request a case sends carries its own X-Request-Id and runs on its own connection (HTTP/1.1,
`Connection: close`), read to the end, so that the bytes after the answer are seen too:
1. a bounded time: the answer (or the stream's end) came within the case's bound, which the case derives
   from the router's configuration;
2. the right status: the one docs/operations.md ("What happens when things fail") names;
3. exactly one answer and exactly one access-log line: one status line, a body that ends where its
   framing says and nothing after it; a stream with at most one error event, at most one [DONE] and
   nothing after it; and, once the router has stopped (its log flushed), one line naming the request id,
   with the status the client saw.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import pdtest  # noqa: E402

# The router's settings in every case; bounds are derived from them.
CONNECT_MS = 300
FIRST_BYTE_MS = 4000
KV_MS = 1000
STREAM_IDLE_MS = 1500
RETRIES = 2
# A health check timeout well above a loaded 2-core machine's worst answer time under ASan (300 ms failed
# there), so that only the faults take workers out.
HEALTH = {"interval_ms": 200, "timeout_ms": 1000, "rise": 1, "fall": 2}
SLACK_S = 1.0  # scheduling on 2 shared cores, process starts, the access log's 100 ms batches


def note(msg):
    print(msg, flush=True)


def skip(why):
    print("skipped: %s" % why, flush=True)
    sys.exit(77)


# ---------------------------------------------------------------------------------------------- workers

class Worker:
    """A pdsim process: .url, .host, .port, .bport, .proc (a pdtest.Proc)."""

    def __init__(self, role, host, port, bport, proc):
        self.role, self.host, self.port, self.bport, self.proc = role, host, port, bport, proc
        self.url = "http://%s:%d" % (host, port)

    def stats(self):
        return pdtest.request_json(self.port, "GET", "/pdsim/stats", host=self.host, timeout=3)

    def fault(self, knobs):
        return pdtest.request_json(self.port, "POST", "/pdsim/fault", knobs, host=self.host, timeout=3)

    def signal(self, sig):
        os.kill(self.proc.proc.pid, sig)

    def kill(self):
        self.proc.proc.kill()
        self.proc.proc.wait()


def _spawn(name, argv):
    fd, log_path = tempfile.mkstemp(prefix="pdfault-%s-" % name, suffix=".log")
    with os.fdopen(fd, "w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    p = pdtest.Proc(name, proc, {}, log_path)
    pdtest._procs.append(p)
    return p


def _wait_health(w):
    def up():
        if not w.proc.alive():
            raise AssertionError("%s exited during start\n%s" % (w.proc.name, w.proc.log_tail()))
        try:
            return pdtest.request(w.port, "GET", "/health", host=w.host, timeout=1.0)[0] == 200
        except OSError:
            return False

    pdtest.poll_until(up, 10, "%s to answer /health" % w.proc.name)
    return w


def sim(role, *extra, net=None, where=None):
    """Starts a pdsim worker: on loopback, or (net, where) inside the namespace of a faultnet.Worker."""
    if net is None:
        host, port = pdtest.HOST, pdtest.free_port()
        bport = pdtest.free_port() if role == "prefill" else None
    else:
        host, port, bport = where.addr, 30000, (8998 if role == "prefill" else None)
    argv = [pdtest.binary("pdsim"), "--role", role, "--host", host, "--port", str(port)]
    if bport:
        argv += ["--bootstrap-port", str(bport)]
    argv += list(extra)
    if net is not None:
        argv = net.cmd(where, argv)
    name = "pdsim-%s-%s" % (role, host if net else port)
    return _wait_health(Worker(role, host, port, bport, _spawn(name, argv)))


# ----------------------------------------------------------------------------------------------- router

class Router:
    def __init__(self, proc, port, admin, alog):
        self.proc, self.port, self.admin, self.alog = proc, port, admin, alog

    def metrics(self):
        return pdtest.request(self.port, "GET", "/metrics", timeout=3)[2].decode()

    def stop(self):
        """SIGTERM (grace 0): the access log is flushed; returns the exit status."""
        return self.proc.stop()


def router(prefills, decodes, extra="", bootstrap_ports=None):
    """pdrouter in the root namespace in front of the workers, with the suite's settings."""
    port, admin = pdtest.free_port(), pdtest.free_port()
    fd, alog = tempfile.mkstemp(prefix="pdfault-access-", suffix=".log")
    os.close(fd)
    bports = bootstrap_ports or [p.bport for p in prefills]
    lines = ["listen: { host: 127.0.0.1, port: %d }" % port,
             "admin: { host: 127.0.0.1, port: %d }" % admin,
             "log: { access_log: %s }" % alog,
             "timeouts: { connect_ms: %d, first_byte_ms: %d, kv_transfer_ms: %d, stream_idle_ms: %d }"
             % (CONNECT_MS, FIRST_BYTE_MS, KV_MS, STREAM_IDLE_MS),
             # Every request of a case may fail at once and retry together: the retry budget (its default
             # lets 20 %, at least 3, retry at once) would answer some of them with their failure.
             "retries: { max: %d, budget_percent: 100 }" % RETRIES,
             "health: { interval_ms: %d, timeout_ms: %d, rise: %d, fall: %d }"
             % (HEALTH["interval_ms"], HEALTH["timeout_ms"], HEALTH["rise"], HEALTH["fall"]),
             "lifecycle: { drain_grace_ms: 0, drain_timeout_ms: 5000 }",
             "workers:", "  prefill:"]
    lines += ["    - { url: %s, bootstrap_port: %d }" % (p.url, b) for p, b in zip(prefills, bports)]
    lines += ["  decode:"] + ["    - { url: %s }" % d.url for d in decodes]
    lines += [extra]
    fd, path = tempfile.mkstemp(prefix="pdfault-", suffix=".yaml")
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines) + "\n")
    proc = pdtest.start_router(path, {"port": port, "admin": admin})
    return Router(proc, port, admin, alog)


# ---------------------------------------------------------------------------------------------- clients

def body(stream=False, tokens=8, text="The capital of France is"):
    return {"text": text, "stream": stream, "sampling_params": {"max_new_tokens": tokens, "ignore_eos": True}}


class Call:
    """One request on its own connection; run() fills the fields below."""

    seq = 0

    def __init__(self, port, path, payload, cap_s, tag="r"):
        Call.seq += 1
        self.rid = "f%d-%s-%d" % (os.getpid(), tag, Call.seq)
        self.port, self.path, self.payload, self.cap_s = port, path, payload, cap_s
        self.raw = b""
        self.status = None
        self.elapsed = None
        self.outcome = None  # ok | error | stream_error | cut | hang | no_answer
        self.problems = []
        self.events = []
        self.tokens = threading.Event()  # set once the answer carries a first data event
        self.thread = None

    def start(self):
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        return self

    def join(self):
        self.thread.join(self.cap_s + 5)
        return self

    def run(self):
        data = json.dumps(self.payload).encode()
        head = ("POST %s HTTP/1.1\r\nHost: router\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                "X-Request-Id: %s\r\nConnection: close\r\n\r\n" % (self.path, len(data), self.rid)).encode()
        t0 = self.t0 = time.monotonic()
        hung = reset = False
        try:
            s = socket.create_connection((pdtest.HOST, self.port), timeout=self.cap_s)
            s.sendall(head + data)
            while True:
                left = self.cap_s - (time.monotonic() - t0)
                if left <= 0:
                    hung = True
                    break
                s.settimeout(left)
                try:
                    b = s.recv(65536)
                except socket.timeout:
                    hung = True
                    break
                if not b:
                    break
                self.raw += b
                if b"data:" in self.raw:
                    self.tokens.set()
            s.close()
        except ConnectionResetError:
            reset = True
        except OSError as e:
            self.problems.append("socket error %r" % e)
        self.t_end = time.monotonic()
        self.elapsed = self.t_end - t0
        self.tokens.set()
        self._parse(hung, reset)

    def _parse(self, hung, reset):
        raw = self.raw
        if hung:
            self.outcome = "hang"
            return
        end = raw.find(b"\r\n\r\n")
        if end < 0:
            self.outcome = "no_answer"
            if raw:
                self.problems.append("a partial head %r" % raw[:200])
            return
        lines = raw[:end].decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        self.status = int(parts[1])
        hdrs = {}
        for l in lines[1:]:
            k, _, v = l.partition(":")
            hdrs[k.strip().lower()] = v.strip()
        self.headers = hdrs
        rest = raw[end + 4:]
        complete, content, extra = False, b"", b""
        if hdrs.get("transfer-encoding", "").lower() == "chunked":
            pos = 0
            while True:
                nl = rest.find(b"\r\n", pos)
                if nl < 0:
                    break
                n = int(rest[pos:nl].split(b";")[0] or b"0", 16)
                if n == 0:
                    trailer_end = rest.find(b"\r\n", nl + 2)
                    if trailer_end >= 0:
                        complete, extra = True, rest[trailer_end + 2:]
                    break
                if len(rest) < nl + 2 + n + 2:
                    content += rest[nl + 2:]
                    break
                content += rest[nl + 2:nl + 2 + n]
                pos = nl + 2 + n + 2
        elif "content-length" in hdrs:
            n = int(hdrs["content-length"])
            content, extra = rest[:n], rest[n:]
            complete = len(content) == n
        else:
            content, complete = rest, True
        if extra:
            self.problems.append("%d bytes after the answer (a second answer?): %r" % (len(extra), extra[:200]))
        self.content = content
        if hdrs.get("content-type", "").startswith("text/event-stream"):
            self._parse_stream(content, complete)
            return
        if not complete:
            self.outcome = "cut"
            return
        if self.status == 200:
            try:
                json.loads(content)
                self.outcome = "ok"
            except ValueError:
                self.problems.append("a 200 whose body is not JSON: %r" % content[:200])
            return
        self.outcome = "error"
        try:
            err = json.loads(content)["error"]
            assert isinstance(err["message"], str) and err["message"] and isinstance(err["type"], str)
            assert err["code"] == self.status, "code %r" % err["code"]
        except (ValueError, KeyError, TypeError, AssertionError) as e:
            self.problems.append("not an OpenAI error (%s): %r" % (e, content[:300]))

    def _parse_stream(self, content, complete):
        text = content.decode("utf-8", "replace")
        cut = not text.endswith("\n\n")
        blocks = [b for b in text.replace("\r\n", "\n").split("\n\n") if b.strip()]
        if cut and blocks:
            blocks = blocks[:-1]
        done = errors = 0
        for b in blocks:
            data = "\n".join(l[5:].lstrip(" ") for l in b.split("\n") if l.startswith("data:"))
            if not data:
                continue  # a comment
            if done:
                self.problems.append("an event after [DONE]: %r" % data[:200])
            elif errors and data != "[DONE]":
                self.problems.append("an event after the error event: %r" % data[:200])
            if data == "[DONE]":
                done += 1
                self.events.append("[DONE]")
                continue
            try:
                ev = json.loads(data)
            except ValueError:
                self.problems.append("an event that is not JSON: %r" % data[:200])
                continue
            self.events.append(ev)
            if isinstance(ev, dict) and "error" in ev:
                errors += 1
        if not complete or cut:
            self.outcome = "cut"
        elif errors:
            self.outcome = "stream_error"
        elif done == 1:
            self.outcome = "ok"
        else:
            self.problems.append("a stream that ended without [DONE] or an error event")

    def describe(self):
        return "%s %s: %s %s in %.2fs %s" % (self.rid, self.path, self.status, self.outcome, self.elapsed or -1,
                                              "; ".join(self.problems))


def fire(port, n, payload_fn, cap_s, path="/generate", tag="r"):
    """Starts n calls at once; payload_fn(i) gives each body. Returns the started Calls."""
    return [Call(port, path, payload_fn(i), cap_s, tag).start() for i in range(n)]


def join_all(calls):
    for c in calls:
        c.join()
    return calls


# ----------------------------------------------------------------------------------------------- checks

def access_lines(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.startswith("{") and '"request_id"' in l]


def verify(r, calls, bound_s, allowed, why, others=()):
    """The three checks over calls, with the router stopped first (so that its access log is complete).
    allowed: the set of acceptable (status, outcome) pairs. Returns the access-log lines by request id."""
    code = r.stop()
    lines = access_lines(r.alog)
    by_id = {}
    for l in lines:
        by_id.setdefault(l["request_id"], []).append(l)
    bad = []
    for c in calls:
        if c.thread.is_alive():
            bad.append("%s still running after %.1fs" % (c.rid, c.cap_s + 5))
            continue
        if c.problems:
            bad.append(c.describe())
        if c.outcome in ("hang", "no_answer"):
            bad.append("%s: no answer (%s) in %.2fs" % (c.rid, c.outcome, c.elapsed))
            continue
        if c.elapsed > bound_s:
            bad.append("%s took %.2fs, the bound is %.2fs (%s)" % (c.rid, c.elapsed, bound_s, why))
        if (c.status, c.outcome) not in allowed:
            bad.append("%s: %s/%s, expected one of %s" % (c.describe(), c.status, c.outcome, sorted(allowed)))
        got = by_id.get(c.rid, [])
        if len(got) != 1:
            bad.append("%s: %d access-log lines, expected exactly 1: %r" % (c.rid, len(got), got))
        elif got[0]["status"] != c.status:
            bad.append("%s: the access log says %s, the client saw %s" % (c.rid, got[0]["status"], c.status))
        elif c.status == 200 and c.outcome == "ok" and got[0]["error"] is not None:
            # a retry that succeeded: the error of the attempt before it is not the request's
            bad.append("%s: answered, yet the access log names an error %r" % (c.rid, got[0]["error"]))
        elif (got[0]["attempts"] > 1) != (got[0].get("retry_error") is not None):
            bad.append("%s: %d attempts, retry_error %r" % (c.rid, got[0]["attempts"], got[0].get("retry_error")))
    if code != 0:
        bad.append("pdrouter exited with %s" % code)
    if bad:
        procs = [r.proc] + [w.proc for w in others]
        raise AssertionError("\n".join(bad) + "".join("\n--- %s log ---\n%s" % (p.name, p.log_tail(30))
                                                       for p in procs))
    os.unlink(r.alog)
    os.unlink(r.proc.config_path)
    return {c.rid: by_id[c.rid][0] for c in calls}


def report(case, mechanism, calls, bound_s, lines=None):
    """Prints one summary line per case: statuses, the slowest answer, the bound (docs/reliability.md)."""
    counts = {}
    for c in calls:
        k = "%s/%s" % (c.status, c.outcome)
        counts[k] = counts.get(k, 0) + 1
    times = sorted(c.elapsed for c in calls)
    med = times[len(times) // 2] if times else 0
    errs = sorted({l.get("error") for l in (lines or {}).values() if l.get("error")})
    note("case %s | mechanism: %s | %d requests: %s | median %.3fs, max %.3fs, bound %.2fs | log errors %s" % (
        case, mechanism, len(calls), ", ".join("%s x%d" % kv for kv in sorted(counts.items())), med,
        times[-1] if times else 0, bound_s, errs))


def metric(text, name, **labels):
    """The value of one series of a Prometheus text page, or None."""
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        head, _, val = line.rpartition(" ")
        if head == name and not labels:
            return float(val)
        if head.startswith(name + "{") and all('%s="%s"' % kv in head for kv in labels.items()):
            return float(val)
    return None


def run(scope):
    """Runs scenario_<argv[1]> of scope; processes are stopped afterwards (SIGCONT first for frozen ones).
    `--list` prints the scenario names (pdtest.scenario_arg)."""
    name = pdtest.scenario_arg(scope)
    fn = scope.get("scenario_" + name)
    if fn is None:
        print("unknown scenario %s" % name, file=sys.stderr)
        sys.exit(2)
    t0 = time.monotonic()
    try:
        fn()
    finally:
        for p in pdtest._procs:
            if p.alive():
                try:
                    os.kill(p.proc.pid, signal.SIGCONT)
                except OSError:
                    pass
        pdtest.stop_all()
    print("scenario %s passed in %.2fs" % (name, time.monotonic() - t0))
