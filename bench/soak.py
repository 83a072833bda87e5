#!/usr/bin/env python3
"""Soak: pdrouter under mixed load and periodic faults for a long time, watching for leaks and lost requests.

    PDR_BUILD=build nice -n 10 python3 bench/soak.py --minutes 30 [--third] [--csv soak.csv]

It starts pdsim workers (2 prefill + 2 decode; --third adds a third of each, which the reloads add to and
remove from the config in turn) and pdrouter (2 event loops) in front of them, then runs --clients client
threads for --minutes: streaming and non-streaming /generate, /v1/chat/completions and /v1/completions,
prompts of 5 to 3000 words, 1 to 256 output tokens; most clients keep their HTTP/1.1 connection alive for a
few requests, some open a new connection per request, some read slowly through a 4 KiB receive buffer, some
leave in the middle of a stream. Every --fault-every seconds one fault, in turn: SIGKILL a worker and start
it again on the same ports; SIGSTOP a worker for 3 s, then SIGCONT; drain a worker through the admin API and
re-activate it 3 s later; SIGHUP (a reload of a changed config file).

Every --sample seconds it writes one CSV row about the router process: RSS (VmRSS), open fds, its TCP
connections from clients and to workers (its socket fds matched against /proc/PID/net/tcp), sockets in
CLOSE_WAIT, CPU seconds (utime+stime), and the request counts so far. At the end it stops the load, waits
until every client connection is gone and checks that the router holds no more non-socket fds than before
the load, stops the router with SIGTERM and prints a summary (docs/reliability.md "Soak" says how to read
it). Exit status 1 when a request was lost (sent and never answered, see below), RSS or fds grew over the
second half by more than the bounds, the router died, or it did not exit 0 on SIGTERM.

Outcomes of a request: "answered" (a status and a complete body; a stream counts when it ends with
[DONE] or an in-band error event; any status, a 502/503 during a fault included, reported by status);
"cut" (the status came, the body broke off) is accepted only for a non-streaming answer in flight while
a decode worker was SIGKILLed (documented: the router resets a JSON answer whose decode breaks);
"abandoned" (the client itself left mid-stream, on purpose); everything else (no status, a timeout, a
cut outside a kill, a stream ending without [DONE]) is "lost".
"""

import argparse
import csv
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import pdtest  # noqa: E402

HOST = "127.0.0.1"
LOOPS = 2  # the router's event-loop threads
CLIENT_TIMEOUT_S = 120  # longer than any deadline the router applies here (kv_transfer_ms 30 s)
RSS_BOUND = 0.05  # RSS may grow by at most 5% over the second half ...
RSS_FLOOR_KB = 1024  # ... or 1 MiB, whichever is larger (allocator noise on a ~20 MB process)
FD_BOUND = 0.05  # the same for the open fds, with a floor of 2 fds per client (each request in flight holds
FD_FLOOR_PER_CLIENT = 2  # a client connection and up to 2 worker connections: they come and go between samples)

WORDS = ("the cat sat on a mat and looked at the dog while a router moved tokens from prefill to decode "
         "over loopback").split()


# ---------------------------------------------------------------- workers and router
class Worker:
    """A pdsim process on fixed ports, so that it can be killed and started again at the same address."""

    def __init__(self, role, logdir, extra):
        self.role = role
        self.port = pdtest.free_port()
        self.bport = pdtest.free_port() if role == "prefill" else None
        self.logdir = logdir
        self.extra = extra
        self.proc = None
        self.starts = 0

    @property
    def url(self):
        return "http://%s:%d" % (HOST, self.port)

    def start(self):
        argv = [pdtest.binary("pdsim"), "--role", self.role, "--port", str(self.port)] + self.extra
        if self.bport:
            argv += ["--bootstrap-port", str(self.bport)]
        self.starts += 1
        log = open(os.path.join(self.logdir, "pdsim-%s-%d.log" % (self.role, self.port)), "a")
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        log.close()

        def up():
            if self.proc.poll() is not None:
                raise AssertionError("pdsim %s exited with %s" % (self.url, self.proc.returncode))
            try:
                return pdtest.request(self.port, "GET", "/health", timeout=1.0)[0] == 200
            except OSError:
                return False

        pdtest.poll_until(up, 15, "pdsim %s to answer /health" % self.url)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def write_config(path, port, admin, prefills, decodes, interval_ms):
    lines = ["listen: { host: %s, port: %d }" % (HOST, port),
             "admin: { host: %s, port: %d }" % (HOST, admin),
             "threads: %d" % LOOPS,
             "health: { interval_ms: %d, timeout_ms: 500, fall: 2, rise: 1 }" % interval_ms,
             "lifecycle: { drain_grace_ms: 0, drain_timeout_ms: 10000 }",
             "workers:", "  prefill:"]
    lines += ["    - { url: %s, bootstrap_port: %d }" % (w.url, w.bport) for w in prefills]
    lines += ["  decode:"] + ["    - { url: %s }" % w.url for w in decodes]
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, path)  # a reload never reads a half-written file


# ---------------------------------------------------------------- /proc sampling
def proc_rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def proc_cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime (fields 14, 15)


def proc_other_fds(pid):
    """{fd: target} of the fds that are not sockets (files, pipes, eventfds, epoll)."""
    out = {}
    for name in os.listdir("/proc/%d/fd" % pid):
        try:
            t = os.readlink("/proc/%d/fd/%s" % (pid, name))
        except OSError:
            continue
        if not t.startswith("socket:["):
            out[name] = t
    return out


def proc_fds(pid):
    """(number of fds, set of socket inodes)."""
    d = "/proc/%d/fd" % pid
    n, inodes = 0, set()
    for name in os.listdir(d):
        try:
            t = os.readlink(os.path.join(d, name))
        except OSError:
            continue  # closed meanwhile
        n += 1
        if t.startswith("socket:["):
            inodes.add(t[8:-1])
    return n, inodes


def proc_tcp(pid, inodes):
    """The router's own TCP sockets: list of (local port, remote port, state) for the inodes it holds."""
    out = []
    for name in ("tcp", "tcp6"):
        try:
            with open("/proc/%d/net/%s" % (pid, name)) as f:
                next(f)
                for line in f:
                    p = line.split()
                    if p[9] in inodes:
                        out.append((int(p[1].rsplit(":", 1)[1], 16), int(p[2].rsplit(":", 1)[1], 16), p[3]))
        except OSError:
            pass
    return out


TCP_LISTEN, TCP_CLOSE_WAIT = "0A", "08"


# ---------------------------------------------------------------- load
class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.sent = 0
        self.inflight = {}  # id -> (start time, streaming)
        self.by_status = {}
        self.cut = 0
        self.abandoned = 0
        self.lost = []  # (what, detail)
        self.kills = []  # (time a decode was SIGKILLed)
        self.next_id = 0

    def begin(self, streaming):
        with self.lock:
            self.sent += 1
            self.next_id += 1
            self.inflight[self.next_id] = (time.monotonic(), streaming)
            return self.next_id

    def end(self, rid, outcome, detail=""):
        with self.lock:
            t0, streaming = self.inflight.pop(rid)
            if outcome == "cut":
                # A decode killed while this JSON answer was in flight explains a broken body.
                if not streaming and any(t0 <= k <= time.monotonic() for k in self.kills):
                    self.cut += 1
                    return
                outcome, detail = "lost", "cut outside a decode kill: " + detail
            if outcome == "abandoned":
                self.abandoned += 1
            elif outcome == "lost":
                self.lost.append(detail)
            else:
                self.by_status[outcome] = self.by_status.get(outcome, 0) + 1

    def snapshot(self):
        with self.lock:
            answered = sum(self.by_status.values())
            failed = sum(n for s, n in self.by_status.items() if not 200 <= s < 300)
            return dict(sent=self.sent, answered=answered, failed=failed, cut=self.cut,
                        abandoned=self.abandoned, lost=len(self.lost), pending=len(self.inflight),
                        by_status=";".join("%s:%d" % kv for kv in sorted(self.by_status.items())))


def make_body(rng, route, stream):
    r = rng.random()
    words = rng.randint(5, 50) if r < 0.5 else rng.randint(100, 500) if r < 0.9 else rng.randint(1000, 3000)
    text = " ".join(rng.choice(WORDS) for _ in range(words))
    out = rng.choice((1, 4, 16, 32, 64)) if rng.random() < 0.95 else 256
    if route == "/generate":
        return {"text": text, "stream": stream, "sampling_params": {"max_new_tokens": out}}
    if route == "/v1/completions":
        return {"model": "pdsim", "prompt": text, "max_tokens": out, "stream": stream}
    return {"model": "pdsim", "messages": [{"role": "user", "content": text}], "max_tokens": out,
            "stream": stream}


def stream_outcome(status, data):
    """An answered stream ends with [DONE] or carries an error event; a 200 stream without either is lost."""
    if status != 200:
        return status, ""
    tail = data[-4096:]
    if b"data: [DONE]" in tail or b'"error"' in tail:
        return status, ""
    return "lost", "200 stream without [DONE] (%d bytes)" % len(data)


class Client(threading.Thread):
    def __init__(self, idx, port, stats, stop, seed):
        super().__init__(daemon=True, name="client-%d" % idx)
        self.port, self.stats, self.stop_ev = port, stats, stop
        self.rng = random.Random(seed * 1000 + idx)
        self.conn = None
        self.left = 0  # requests left on the kept-alive connection

    def run(self):
        while not self.stop_ev.is_set():
            route = self.rng.choice(("/generate", "/v1/chat/completions", "/v1/completions"))
            stream = self.rng.random() < 0.5
            body = json.dumps(make_body(self.rng, route, stream)).encode()
            kind = self.rng.random()
            if stream and kind < 0.05:
                self.abandon(route, body)
            elif kind < 0.10:
                self.one(route, body, stream, slow=True)
            elif kind < 0.25:
                self.one(route, body, stream, fresh=True)
            else:
                self.one(route, body, stream)
        self.close()

    def close(self):
        if self.conn:
            self.conn.close()
            self.conn = None

    def connect(self, rcvbuf=None):
        c = http.client.HTTPConnection(HOST, self.port, timeout=CLIENT_TIMEOUT_S)
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)  # before connect: sets the window
        s.settimeout(CLIENT_TIMEOUT_S)
        s.connect((HOST, self.port))
        c.sock = s
        return c

    def one(self, route, body, stream, fresh=False, slow=False):
        hdrs = {"Content-Type": "application/json"}
        rid = self.stats.begin(stream)
        status, conn = None, None
        try:
            if fresh or slow:
                conn = self.connect(4096 if slow else None)
                hdrs["Connection"] = "close"
            else:
                if self.conn is None or self.left <= 0:
                    self.close()
                    self.conn = self.connect()
                    self.left = self.rng.randint(1, 20)
                conn = self.conn
                self.left -= 1
            conn.request("POST", route, body=body, headers=hdrs)
            resp = conn.getresponse()
            status = resp.status
            if slow:
                parts = []
                while True:
                    b = resp.read(512)
                    if not b:
                        break
                    parts.append(b)
                    time.sleep(0.01)  # the slow reader's pace, not a synchronization
                data = b"".join(parts)
            else:
                data = resp.read()
            if resp.will_close and conn is self.conn:
                self.close()
            outcome, detail = stream_outcome(status, data) if stream else (status, "")
            self.stats.end(rid, outcome, "%s %s: %s" % (route, "stream" if stream else "json", detail))
        except (OSError, http.client.HTTPException) as e:  # resets, timeouts, IncompleteRead
            self.fail(rid, conn, status, route, stream, e)
        finally:
            if conn is not None and conn is not self.conn:
                conn.close()

    def fail(self, rid, conn, status, route, stream, e):
        what = "%s %s: %s %r" % (route, "stream" if stream else "json", status, e)
        if conn is not None and conn is self.conn:
            self.close()
        self.stats.end(rid, "cut" if status is not None else "lost", what)

    def abandon(self, route, body):
        """A streaming request left by the client after its first event: the router must clean up."""
        rid = self.stats.begin(True)
        conn = None
        try:
            conn = self.connect()
            conn.request("POST", route, body=body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            if resp.status == 200:
                resp.read(1)
                self.stats.end(rid, "abandoned")
            else:
                resp.read()
                self.stats.end(rid, resp.status)
        except (OSError, http.client.HTTPException) as e:
            self.stats.end(rid, "lost", "%s abandon: %r" % (route, e))
        finally:
            if conn is not None:
                conn.close()


# ---------------------------------------------------------------- faults
class Faults(threading.Thread):
    """Runs one fault every `every` seconds, in turn; each leaves the cluster as it found it."""

    KINDS = ("kill_restart", "stop_cont", "drain_activate", "reload")

    def __init__(self, env, every, stop, rng):
        super().__init__(daemon=True, name="faults")
        self.env, self.every, self.stop_ev, self.rng = env, every, stop, rng
        self.done = {k: 0 for k in self.KINDS}
        self.errors = []
        self.log = []  # (seconds since t0, kind, detail)
        self.t0 = time.monotonic()
        self.n = 0

    def run(self):
        while not self.stop_ev.wait(self.every):
            kind = self.KINDS[self.n % len(self.KINDS)]
            self.n += 1
            try:
                detail = getattr(self, kind)()
                self.log.append((round(time.monotonic() - self.t0, 1), kind, detail))
                self.done[kind] += 1
            except Exception as e:  # noqa: BLE001: reported, and the soak fails on it
                self.errors.append("%s: %r" % (kind, e))

    def victim(self):
        return self.rng.choice(self.env["prefills"][:2] + self.env["decodes"][:2])

    def kill_restart(self):
        w = self.victim()
        if w.role == "decode":
            with self.env["stats"].lock:
                self.env["stats"].kills.append(time.monotonic())
        w.proc.kill()
        w.proc.wait()
        self.stop_ev.wait(1.0)  # the worker stays down for a second: health checks see it
        w.start()
        return w.url

    def stop_cont(self):
        w = self.victim()
        w.proc.send_signal(signal.SIGSTOP)
        try:
            self.stop_ev.wait(3.0)
        finally:
            w.proc.send_signal(signal.SIGCONT)
        return w.url

    def admin(self, method, path, body=None):
        st, _, data = pdtest.request(self.env["admin"], method, path, body, timeout=10)
        if st not in (200, 202):
            raise AssertionError("%s %s: %d %r" % (method, path, st, data[:200]))
        return json.loads(data)

    def drain_activate(self):
        w = self.victim()
        ws = self.admin("GET", "/admin/v1/workers")["workers"]
        wid = next(x["id"] for x in ws if x["url"].rstrip("/") == w.url and x["role"] == w.role)
        self.admin("POST", "/admin/v1/workers/%s/drain" % wid, {"timeout_ms": 5000})
        try:
            self.stop_ev.wait(3.0)
        finally:
            self.admin("POST", "/admin/v1/workers/%s/activate" % wid)
        return w.url

    def reload(self):
        e = self.env
        e["reloads"] += 1
        odd = e["reloads"] % 2 == 1
        n = 3 if (e["third"] and odd) else 2
        write_config(e["config"], e["port"], e["admin"], e["prefills"][:n], e["decodes"][:n],
                     600 if odd else 500)
        before = reload_count(e)
        e["router"].send_signal(signal.SIGHUP)
        pdtest.poll_until(lambda: reload_count(e) > before, 10, "the reload to be counted")
        return "%d pairs" % n


def reload_count(env):
    st, _, data = pdtest.request(env["port"], "GET", "/metrics", timeout=5)
    for line in data.decode().splitlines():
        if line.startswith("pdr_config_reloads_total") and 'result="ok"' in line:
            return float(line.split()[-1])
    return 0.0


# ---------------------------------------------------------------- summary
def slope(xs, ys):
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--fault-every", type=float, default=15, help="seconds between faults (0: none)")
    ap.add_argument("--sample", type=float, default=2, help="seconds between samples")
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--third", action="store_true", help="a third prefill and decode, added and removed by reloads")
    ap.add_argument("--csv", default="soak.csv")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--min-flat-minutes", type=float, default=1,
                    help="judge RSS and fd growth only for runs at least this long (shorter: reported only)")
    a = ap.parse_args()

    logdir = tempfile.mkdtemp(prefix="pdr-soak-")
    sim_extra = ["--prefill-us-per-token", "20", "--decode-us-per-token", "1000"]
    n = 3 if a.third else 2
    prefills = [Worker("prefill", logdir, sim_extra) for _ in range(n)]
    decodes = [Worker("decode", logdir, sim_extra) for _ in range(n)]
    stats, stop = Stats(), threading.Event()
    env = dict(prefills=prefills, decodes=decodes, stats=stats, third=a.third, reloads=0,
               port=pdtest.free_port(), admin=pdtest.free_port(), config=os.path.join(logdir, "router.yaml"))
    router = None
    problems = []
    try:
        for w in prefills + decodes:
            w.start()
        write_config(env["config"], env["port"], env["admin"], prefills[:2], decodes[:2], 500)
        router = pdtest.start_router(env["config"], {"port": env["port"], "admin": env["admin"]})
        env["router"] = router.proc
        pid = router.proc.pid
        worker_ports = {w.port for w in prefills + decodes}
        # Warm-up before the baseline: libuv opens /dev/null once per loop, at the loop's first stream (its
        # reserve fd for EMFILE), so every loop must have accepted a connection; the kernel spreads new
        # connections over the SO_REUSEPORT listeners, and 16 of them miss one of 2 loops with p = 2^-15.
        for i in range(16):
            pdtest.request(env["port"], "POST", "/generate",
                           {"text": "warm up", "sampling_params": {"max_new_tokens": 2}}, timeout=30)
        other0 = proc_other_fds(pid)
        # A loop that still has no reserve fd may open it later: that one /dev/null is not a leak.
        idle_other0 = len(other0) + max(0, LOOPS - sum(1 for t in other0.values() if t == "/dev/null"))
        env["other_before"] = len(other0)

        def sample(t0, faults):
            nfd, inodes = proc_fds(pid)
            tcp = proc_tcp(pid, inodes)
            s = stats.snapshot()
            return dict(t_s=round(time.monotonic() - t0, 1), rss_kb=proc_rss_kb(pid), fds=nfd,
                        sockets=len(inodes), other_fds=nfd - len(inodes),
                        client_conns=sum(1 for lp, _, st in tcp if lp == env["port"] and st != TCP_LISTEN),
                        worker_conns=sum(1 for _, rp, _ in tcp if rp in worker_ports),
                        close_wait=sum(1 for _, _, st in tcp if st == TCP_CLOSE_WAIT),
                        cpu_s=round(proc_cpu_s(pid), 2), faults=faults.n, **s)

        clients = [Client(i, env["port"], stats, stop, a.seed) for i in range(a.clients)]
        faults = Faults(env, a.fault_every, stop, random.Random(a.seed))
        t0 = faults.t0 = time.monotonic()
        for c in clients:
            c.start()
        if a.fault_every > 0:
            faults.start()
        rows = []
        end = t0 + a.minutes * 60
        with open(a.csv, "w", newline="") as f:
            wr = None
            while time.monotonic() < end:
                if router.proc.poll() is not None:
                    problems.append("the router died (status %s)" % router.proc.returncode)
                    break
                row = sample(t0, faults)
                if wr is None:
                    wr = csv.DictWriter(f, fieldnames=list(row))
                    wr.writeheader()
                wr.writerow(row)
                f.flush()
                rows.append(row)
                time.sleep(min(a.sample, max(0.0, end - time.monotonic())))  # the sampling period
            stop.set()
            for c in clients:
                c.join(CLIENT_TIMEOUT_S + 10)
            if faults.is_alive():
                faults.join(30)
        hung = [c.name for c in clients if c.is_alive()]
        if hung:
            problems.append("client threads still waiting after the load stopped: %s" % ", ".join(hung))

        idle = None
        if router.proc.poll() is None:
            # Idle check: once every client connection is gone, the router holds no more non-socket fds
            # than before the load (sockets left are the pooled worker connections and the listeners). A
            # file the router has open for a moment (a health check, a scrape) may be seen by one look, so
            # the check waits up to 15 s for both to hold.
            def settled():
                nfd, inodes = proc_fds(pid)
                tcp = proc_tcp(pid, inodes)
                cc = sum(1 for lp, _, st in tcp if lp == env["port"] and st != TCP_LISTEN)
                return (nfd, inodes, tcp) if cc == 0 and nfd - len(inodes) <= idle_other0 else None

            try:
                nfd, inodes, tcp = pdtest.poll_until(settled, 15, "the client connections and extra fds to close")
                idle = dict(fds=nfd, other=nfd - len(inodes), other_before=env["other_before"], allowed=idle_other0,
                            worker_conns=sum(1 for _, rp, _ in tcp if rp in worker_ports),
                            close_wait=sum(1 for _, _, st in tcp if st == TCP_CLOSE_WAIT))
            except AssertionError as e:
                now = proc_other_fds(pid)
                extra = {k: v for k, v in now.items() if other0.get(k) != v}
                problems.append("%s: non-socket fds %d (before the load %d), new: %s" %
                                (e, len(now), idle_other0, extra))
            router.proc.send_signal(signal.SIGTERM)
            try:
                rc = router.proc.wait(30)
                if rc != 0:
                    problems.append("pdrouter exited %d on SIGTERM" % rc)
            except subprocess.TimeoutExpired:
                problems.append("pdrouter did not exit within 30 s of SIGTERM")
        elif not any("died" in p for p in problems):
            problems.append("the router died (status %s)" % router.proc.returncode)

        report(a, rows, stats, faults, idle, problems, router, logdir)
    finally:
        stop.set()
        for w in prefills + decodes:
            w.stop()
        if router and router.proc.poll() is None:
            router.proc.kill()
    return 1 if problems else 0


def report(a, rows, stats, faults, idle, problems, router, logdir):
    s = stats.snapshot()
    print("soak: %.1f min, %d clients, a fault every %gs, samples every %gs -> %s" %
          (a.minutes, a.clients, a.fault_every, a.sample, a.csv))
    if not rows:
        problems.append("no sample taken")
    else:
        print("%-13s %10s %10s %10s" % ("series", "start", "end", "max"))
        for k in ("rss_kb", "fds", "client_conns", "worker_conns", "close_wait", "cpu_s"):
            print("%-13s %10s %10s %10s" % (k, rows[0][k], rows[-1][k], max(r[k] for r in rows)))
        half = rows[0]["t_s"] + (rows[-1]["t_s"] - rows[0]["t_s"]) / 2
        second = [r for r in rows if r["t_s"] >= half]
        span = second[-1]["t_s"] - second[0]["t_s"] if second else 0
        for k, rel, floor, unit in (("rss_kb", RSS_BOUND, RSS_FLOOR_KB, "KiB"),
                                    ("fds", FD_BOUND, max(4, FD_FLOOR_PER_CLIENT * a.clients), "")):
            xs, ys = [r["t_s"] for r in second], [r[k] for r in second]
            sl = slope(xs, ys)
            growth = sl * span
            base = ys[0] if ys else 0
            bound = max(rel * base, floor)
            judged = a.minutes >= a.min_flat_minutes
            verdict = ("flat" if growth <= bound else "GROWING") if judged else "not judged (short run)"
            print("%s second half: slope %+.2f %s/min, growth %+.1f %s over %.0fs (bound %.0f): %s" %
                  (k, sl * 60, unit, growth, unit, span, bound, verdict))
            if judged and growth > bound:
                problems.append("%s grew %+.1f over the second half (bound %.0f)" % (k, growth, bound))
        cpu = rows[-1]["cpu_s"] - rows[0]["cpu_s"]
        dur = rows[-1]["t_s"] - rows[0]["t_s"]
        print("router CPU: %.1f s over %.0f s (%.2f of a core)" % (cpu, dur, cpu / dur if dur else 0))
    print("requests: sent %d, answered %d (by status: %s), cut by a decode kill %d, abandoned by the client %d, "
          "lost %d" % (s["sent"], s["answered"], ", ".join("%s: %d" % kv for kv in sorted(stats.by_status.items())),
                       s["cut"], s["abandoned"], s["lost"]))
    lost = s["sent"] - s["answered"] - s["cut"] - s["abandoned"]
    if lost:
        problems.append("%d request(s) lost" % lost)
        for d in stats.lost[:10]:
            print("  lost: %s" % d)
    print("faults: %s" % ", ".join("%s %d" % kv for kv in faults.done.items()))
    flog = os.path.splitext(a.csv)[0] + "-faults.csv"
    with open(flog, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(("t_s", "fault", "target"))
        w.writerows(faults.log)
    for e in faults.errors:
        problems.append("fault failed: %s" % e)
    if idle:
        print("idle after the load: %d fds (%d non-socket: %d before the load, at most %d allowed), %d worker "
              "connections pooled, %d in CLOSE_WAIT" % (idle["fds"], idle["other"], idle["other_before"],
                                                         idle["allowed"], idle["worker_conns"], idle["close_wait"]))
    for p in problems:
        print("FAIL: %s" % p)
    if problems:
        print("logs: %s, router log %s" % (logdir, router.log_path if router else "-"))
    print("soak: %s" % ("FAILED" if problems else "passed"))


if __name__ == "__main__":
    sys.exit(main())
