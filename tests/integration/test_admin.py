#!/usr/bin/env python3
"""Integration tests of pdrouter's admin REST API (docs/admin-api.md) with real pdsim workers.

Usage: test_admin.py SCENARIO   (one of the functions named scenario_*; ctest runs each separately)

Every wait polls for the event (pdtest.poll_until); nothing sleeps to synchronize.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check, request, request_json  # noqa: E402
from test_router import BODIES, metric_value, router, sim, stats  # noqa: E402

GEN = BODIES["/generate"]


def admin(r, method, path, body=None, token=None, expect=200):
    hdrs = {"Authorization": "Bearer " + token} if token else {}
    return request_json(r.ports["admin"], method, path, body, expect=expect, headers=hdrs)


def worker(r, wid, token=None):
    return admin(r, "GET", "/admin/v1/workers/" + wid, token=token)


def state_is(r, wid, want, token=None):
    return worker(r, wid, token)["state"] == want


def fault(p, knobs):
    return request_json(p.port, "POST", "/pdsim/fault", knobs)


def token_file(text):
    fd, path = tempfile.mkstemp(prefix="pdrouter-token-")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


def scenario_auth():
    """No token and a wrong token get 401 with WWW-Authenticate: Bearer; the right one (read from the
    token file, trailing newline stripped) gets 200 on every admin route, /metrics included. The data
    port has no admin routes. An empty token file stops the router at start."""
    p, d = sim("prefill"), sim("decode")
    tok = "s3cret-token-%d" % os.getpid()
    path = token_file(tok + "\n")
    r = router([p], [d], config="admin: { host: 127.0.0.1, port: {admin}, token_file: %s }" % path)
    try:
        aport = r.ports["admin"]
        for hdrs in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Bearer " + tok + "x"},
                     {"Authorization": "Basic " + tok}):
            for path_ in ("/admin/v1/workers", "/admin/v1/status", "/metrics", "/nope"):
                st, h, body = request(aport, "GET", path_, headers=hdrs)
                check(st == 401, "%s %r: %d %r" % (path_, hdrs, st, body), r)
                check(h.get("www-authenticate", "").startswith("Bearer"), repr(h), r)
                e = json.loads(body)["error"]
                check(e["code"] == 401 and e["type"] and e["message"], repr(e), r)
        st, _, _ = request(aport, "POST", "/admin/v1/workers/prefill-0/drain", headers={"Authorization": "Bearer x"})
        check(st == 401, "drain without the right token: %d" % st, r)
        check(worker(r, "prefill-0", tok)["state"] == "healthy", "a refused drain changed nothing", r)
        check(len(admin(r, "GET", "/admin/v1/workers", token=tok)["workers"]) == 2, "list", r)
        st, _, body = request(aport, "GET", "/metrics", headers={"Authorization": "Bearer " + tok})
        check(st == 200 and b"pdr_worker_state{" in body, "admin /metrics: %d" % st, r)
        st, _, _ = request(r.port, "GET", "/admin/v1/workers", headers={"Authorization": "Bearer " + tok})
        check(st == 404, "admin route on the data port: %d" % st, r)
        check("bearer token" in open(r.log_path).read(), "start log mentions auth", r)
    finally:
        pdtest.stop_all()
    # An empty token file (a newline only) is a start error.
    empty = token_file("\n")
    p, d = sim("prefill"), sim("decode")
    try:
        cfg = tempfile.mktemp(suffix=".yaml")
        with open(cfg, "w") as f:
            f.write("listen: { host: 127.0.0.1, port: %d }\nadmin: { host: 127.0.0.1, port: %d, token_file: %s }\n"
                    "workers:\n  prefill:\n    - { url: http://127.0.0.1:%d, bootstrap_port: %d }\n"
                    "  decode:\n    - { url: http://127.0.0.1:%d }\n"
                    % (pdtest.free_port(), pdtest.free_port(), empty, p.port, p.ports["bport"], d.port))
        proc = pdtest.start(["pdrouter", "--config", cfg], health_path=None)
        rc = proc.wait_exit(10)
        check(rc != 0 and "empty" in open(proc.log_path).read(), "empty token file: exit %s" % rc, proc)
    finally:
        pdtest.stop_all()


def scenario_auth_duplicate():
    """A request with two Authorization headers is answered 400 whatever they hold (the right token first,
    second, or both times), and counted; with one right header the same request is served. The same
    holds with auth off (a duplicated credential is malformed)."""
    p, d = sim("prefill"), sim("decode")
    tok = "s3cret-token-%d" % os.getpid()
    path = token_file(tok + "\n")
    r = router([p], [d], config="admin: { host: 127.0.0.1, port: {admin}, token_file: %s }" % path)

    def raw(auths):
        head = "GET /admin/v1/workers HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        head += "".join("Authorization: %s\r\n" % a for a in auths)
        out, _ = pdtest.raw_exchange(r.ports["admin"], (head + "\r\n").encode())
        st = int(out.split(b" ", 2)[1]) if out.startswith(b"HTTP/1.1 ") else None
        return st, out.partition(b"\r\n\r\n")[2]
    try:
        right, wrong = "Bearer " + tok, "Bearer wrong"
        for auths in ([right, wrong], [wrong, right], [right, right]):
            st, body = raw(auths)
            check(st == 400, "%r: %s %r" % (auths, st, body), r)
            e = json.loads(body)["error"]
            check(e["code"] == 400 and "Authorization" in e["message"], repr(e), r)
        check(raw([right])[0] == 200, "one right header refused", r)
        st, _, m = request(r.ports["admin"], "GET", "/metrics", headers={"Authorization": right})
        check(st == 200 and metric_value(m.decode(), "pdr_admin_auth_refused_total", reason="duplicated") == 3,
              "duplicates not counted", r)
    finally:
        pdtest.stop_all()
    p, d = sim("prefill"), sim("decode")
    r = router([p], [d], config="admin: { host: 127.0.0.1, port: {admin} }")
    try:
        check(raw(["Bearer a", "Bearer b"])[0] == 400, "auth off: a duplicated header served", r)
        check(raw(["Bearer a"])[0] == 200, "auth off: one header refused", r)
    finally:
        pdtest.stop_all()


def scenario_workers():
    """The worker list, one worker, status, and the error answers (404, 405, 400; 409 for a reload of a
    router started from flags); without a token file auth is off and the start log says so."""
    ps = [sim("prefill"), sim("prefill")]
    d = sim("decode")
    r = router(ps, [d])
    try:
        check("WITHOUT authentication" in open(r.log_path).read(), "dev mode is logged", r)
        ws = admin(r, "GET", "/admin/v1/workers")["workers"]
        check([w["id"] for w in ws] == ["prefill-0", "prefill-1", "decode-0"], repr(ws), r)
        for w, proc in zip(ws, ps + [d]):
            check(w["url"] == "http://127.0.0.1:%d" % proc.port and w["source"] == "static" and
                  w["state"] == "healthy" and w["in_flight"] == 0 and w["labels"] == {}, repr(w), r)
        check(ws[0]["bootstrap_port"] == ps[0].ports["bport"] and ws[2]["bootstrap_port"] is None, repr(ws), r)
        check(ws[0]["role"] == "prefill" and ws[2]["role"] == "decode", repr(ws), r)
        pdtest.poll_until(lambda: worker(r, "decode-0")["last_check_ms_ago"] is not None, 10, "a health check")
        for _ in range(3):
            request_json(r.port, "POST", "/generate", GEN)
        total = sum(w["requests_total"] for w in admin(r, "GET", "/admin/v1/workers")["workers"][:2])
        check(total == 3, "requests_total %d" % total, r)
        s = admin(r, "GET", "/admin/v1/status")
        check(s["workers"]["prefill"] == {"total": 2, "healthy": 2, "draining": 0, "drained": 0}, repr(s), r)
        check(s["workers"]["decode"]["total"] == 1 and s["inflight"] == 0 and s["shutting_down"] is False and
              s["threads"] >= 1 and s["uptime_s"] >= 0 and s["version"], repr(s), r)
        aport = r.ports["admin"]
        for method, path, want in (("GET", "/admin/v1/workers/prefill-9", 404),
                                   ("GET", "/admin/v1/workers/prefill-01", 404),
                                   ("GET", "/admin/v1/workers/gpu-0", 404),
                                   ("POST", "/admin/v1/workers/decode-7/drain", 404),
                                   ("POST", "/admin/v1/workers/decode-0/explode", 404),
                                   ("GET", "/admin/v2/workers", 404),
                                   ("GET", "/admin/v1/workers/prefill-0/drain", 405),
                                   ("DELETE", "/admin/v1/workers", 405),
                                   ("POST", "/admin/v1/status", 405),
                                   ("POST", "/admin/v1/workers", 400),
                                   ("DELETE", "/admin/v1/workers/prefill-0?force=maybe", 400),
                                   ("PUT", "/admin/v1/workers/prefill-0", 405),
                                   ("POST", "/admin/v1/reload", 409)):
            st, h, body = request(aport, method, path, body=b"{}" if method == "POST" else None)
            check(st == want, "%s %s: %d, expected %d: %r" % (method, path, st, want, body), r)
            e = json.loads(body)["error"]
            check(e["code"] == want and isinstance(e["message"], str) and e["type"], repr(e), r)
            if want == 405:
                check("allow" in h, repr(h), r)
        for bad in (b"{", b"[1]", b'{"timeout_ms": -1}', b'{"timeout_ms": "5"}', b'{"timeout": 5}'):
            st, _, body = request(aport, "POST", "/admin/v1/workers/prefill-1/drain", body=bad)
            check(st == 400 and json.loads(body)["error"]["code"] == 400, "%r: %d %r" % (bad, st, body), r)
        check(worker(r, "prefill-1")["state"] == "healthy", "a bad drain body changed nothing", r)
    finally:
        pdtest.stop_all()


class Load:
    """Requests on `conns` threads until stop(): every answer is recorded; failures are non-200 answers
    and connection errors."""

    def __init__(self, r, conns=4, body=GEN):
        self.r, self.body = r, body
        self.done, self.failures = 0, []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._run) for _ in range(conns)]
        for t in self.threads:
            t.start()

    def _run(self):
        while not self.stopping.is_set():
            try:
                st, _, body = request(self.r.port, "POST", "/generate", self.body, timeout=30)
            except OSError as e:
                st, body = -1, repr(e).encode()
            with self.lock:
                self.done += 1
                if st != 200:
                    self.failures.append((st, body[:200]))

    def wait_done(self, n, what):
        start = self.done
        pdtest.poll_until(lambda: self.done >= start + n, 30, what)

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join(60)
        return self.done, self.failures


def slow_stream(r, tokens=25):
    """Starts a streamed /generate of `tokens` tokens on a thread; returns (thread, result dict)."""
    result = {}

    def run():
        result["resp"] = request(r.port, "POST", "/generate", dict(GEN, stream=True,
                                                                    sampling_params={"max_new_tokens": tokens}),
                                 timeout=30)
    t = threading.Thread(target=run)
    t.start()
    return t, result


def stream_complete(result, tokens):
    st, _, raw = result["resp"]
    evs = [ln[6:] for ln in raw.decode().split("\n") if ln.startswith("data: ")]
    return st == 200 and evs and evs[-1] == "[DONE]" and len(evs) == tokens + 1


def scenario_worker_urls():
    """POST /admin/v1/workers normalizes the URL before its duplicate check: every numeric spelling of
    the static decode's address (0x7f000001, 2130706433, 0177.0.0.1, 127.1, [::ffff:127.0.0.1]), with or
    without a trailing slash, is 409; so are another host case and an explicit default port. Addresses no
    worker can have (0.0.0.0, ::, broadcast, multicast) are 400, as are the default deny-list's
    (link-local, cloud metadata) in any spelling; admin.deny_worker_networks replaces that list."""
    p, d = sim("prefill"), sim("decode")
    r = router([p], [d])
    try:
        def add(url, role="decode"):
            st, _, raw = request(r.ports["admin"], "POST", "/admin/v1/workers", {"role": role, "url": url})
            return st, json.loads(raw)

        canon = "http://127.0.0.1:%d" % d.port
        for host in ("0x7f000001", "2130706433", "0177.0.0.1", "127.1", "0x7f.1", "[::ffff:127.0.0.1]",
                     "[::ffff:7f00:1]", "127.0.0.1"):
            for tail in ("", "/"):
                url = "http://%s:%d%s" % (host, d.port, tail)
                st, j = add(url)
                check(st == 409 and j["error"]["type"] == "conflict_error" and canon in j["error"]["message"],
                      "%s: %d %r" % (url, st, j), r)
        st, j = add("http://0x7f000001:%d" % p.port, role="prefill")
        check(st == 409 and ("http://127.0.0.1:%d" % p.port) in j["error"]["message"], repr(j), r)
        # Host names: compared without case. Port 80 is the same as no port.
        st, j = add("http://LocalHost:%d/" % d.port)
        check(st == 201 and j["url"] == "http://localhost:%d" % d.port, "%d %r" % (st, j), r)
        st, j = add("http://LOCALHOST:%d" % d.port)
        check(st == 409, "LOCALHOST: %d %r" % (st, j), r)
        st, j = add("http://127.0.0.1")
        check(st == 201 and j["url"] == "http://127.0.0.1", "%d %r" % (st, j), r)
        for url in ("http://127.0.0.1:80", "HTTP://127.0.0.1:080/", "http://2130706433:80"):
            st, j = add(url)
            check(st == 409, "%s: %d %r" % (url, st, j), r)

        for url, needle in [
                ("http://0.0.0.0:30001", "0.0.0.0 is the unspecified address"),
                ("http://0:30001", "0.0.0.0 is the unspecified address"),
                ("http://[::]:30001", ":: is the unspecified address"),
                ("http://[::ffff:0.0.0.0]:30001", "0.0.0.0 is the unspecified address"),
                ("http://255.255.255.255:30001", "255.255.255.255 is the limited broadcast address"),
                ("http://4294967295:30001", "255.255.255.255 is the limited broadcast address"),
                ("http://224.0.0.1:30001", "224.0.0.1 is a multicast address"),
                ("http://239.255.255.250:1900", "239.255.255.250 is a multicast address"),
                ("http://[ff02::1]:30001", "ff02::1 is a multicast address"),
                ("http://1.2.3.256:30001", "is read as an IPv4 address"),
                ("http://169.254.169.254", "is in admin.deny_worker_networks (169.254.0.0/16)"),
                ("http://0xa9fea9fe:80", "http://169.254.169.254 is in admin.deny_worker_networks (169.254.0.0/16)"),
                ("http://[::ffff:169.254.169.254]", "is in admin.deny_worker_networks (169.254.0.0/16)"),
                ("http://169.254.1.1:30001", "is in admin.deny_worker_networks (169.254.0.0/16)"),
                ("http://[fe80::1]:30001", "is in admin.deny_worker_networks (fe80::/10)"),
                ("http://[fd00:ec2::254]", "is in admin.deny_worker_networks (fd00:ec2::254/128)")]:
            st, j = add(url)
            check(st == 400 and j["error"]["type"] == "invalid_request_error" and needle in j["error"]["message"],
                  "%s: %d %r" % (url, st, j), r)
        urls = sorted(w["url"] for w in admin(r, "GET", "/admin/v1/workers")["workers"])
        check(urls == sorted(["http://127.0.0.1:%d" % p.port, canon, "http://localhost:%d" % d.port,
                              "http://127.0.0.1"]), "the pool: %r" % urls, r)
        check("admin audit: POST /admin/v1/workers" in open(r.log_path).read() and
              "refused: denied network" in open(r.log_path).read(), "refusals are audited", r)
        r.stop()

        # The key replaces the default list: link-local is allowed then, the listed network is not.
        r = router([p], [d], config="admin: { host: 127.0.0.1, port: {admin}, "
                                    "deny_worker_networks: [10.0.0.0/8, \"fd00::/8\"] }")
        st, j = add("http://169.254.0.1:1")
        check(st == 201 and j["url"] == "http://169.254.0.1:1", "%d %r" % (st, j), r)
        st, j = add("http://0x0a000001:1")
        check(st == 400 and "http://10.0.0.1:1 is in admin.deny_worker_networks (10.0.0.0/8)" in j["error"]["message"],
              "%d %r" % (st, j), r)
        st, j = add("http://[fd00:ec2::254]:1")
        check(st == 400 and "(fd00::/8)" in j["error"]["message"], "%d %r" % (st, j), r)
        st, j = add("http://0.0.0.0:1")
        check(st == 400 and "unspecified" in j["error"]["message"], "%d %r" % (st, j), r)
    finally:
        pdtest.stop_all()


def scenario_add_delete():
    """POST /admin/v1/workers adds a worker that takes traffic at once (201, Location, source admin,
    labels); a duplicate is 409 and bad bodies 400. DELETE drains first: a stream in flight on the worker
    completes, no new request goes to it, then it leaves the pool (404). DELETE ?force=true removes at
    once. Metrics count workers by source and removals."""
    p = sim("prefill")
    d0 = sim("decode", "--decode-us-per-token", "20000")
    r = router([p], [d0], "--decode-policy", "round_robin")
    try:
        t, result = slow_stream(r)
        pdtest.poll_until(lambda: stats(d0)["inflight"] >= 1, 5, "the stream on decode-0")
        d1 = sim("decode")
        body = {"role": "decode", "url": "http://127.0.0.1:%d" % d1.port, "labels": {"zone": "b"}}
        st, h, raw = request(r.ports["admin"], "POST", "/admin/v1/workers", body)
        w = json.loads(raw)
        check(st == 201 and h.get("location") == "/admin/v1/workers/decode-1", "%d %r %r" % (st, h, raw), r)
        check(w["id"] == "decode-1" and w["source"] == "admin" and w["labels"] == {"zone": "b"} and
              w["state"] == "healthy" and w["bootstrap_port"] is None, repr(w), r)
        st, _, raw = request(r.ports["admin"], "POST", "/admin/v1/workers", body)
        check(st == 409 and json.loads(raw)["error"]["code"] == 409, "duplicate: %d %r" % (st, raw), r)
        for bad in (b"{", b"[]", b'{"role":"decode"}', b'{"role":"gpu","url":"http://127.0.0.1:1"}',
                    b'{"role":"decode","url":"http://127.0.0.1:1","bootstrap_port":8998}',
                    b'{"role":"prefill","url":"ftp://x"}', b'{"role":"prefill","url":"http://a:1","extra":1}',
                    b'{"role":"prefill","url":"http://a:1","labels":{"k":1}}',
                    b'{"role":"prefill","url":"http://a:1","bootstrap_port":70000}'):
            st, _, raw = request(r.ports["admin"], "POST", "/admin/v1/workers", bad)
            check(st == 400 and json.loads(raw)["error"]["message"], "%r: %d %r" % (bad, st, raw), r)
        check(len(admin(r, "GET", "/admin/v1/workers")["workers"]) == 3, "bad adds added nothing", r)

        # Drain-first delete of decode-0 while its stream runs.
        w = admin(r, "DELETE", "/admin/v1/workers/decode-0", expect=202)
        check(w["state"] == "draining" and w.get("delete_pending") is True, repr(w), r)
        before = stats(d0)["requests"]
        for _ in range(4):
            st, _, out = request(r.port, "POST", "/generate", GEN)
            check(st == 200, "request during the delete: %d %r" % (st, out[:200]), r)
        check(stats(d0)["requests"] == before, "decode-0 got a request while being deleted", r)
        check(stats(d1)["requests"] >= 4, "decode-1 (added) took the requests", r)
        t.join(10)
        check(stream_complete(result, 25), "the stream on the deleted worker was cut: %r" % (result,), r)
        pdtest.poll_until(lambda: request(r.ports["admin"], "GET", "/admin/v1/workers/decode-0")[0] == 404, 5,
                          "decode-0 to leave the pool")
        ids = [x["id"] for x in admin(r, "GET", "/admin/v1/workers")["workers"]]
        check(ids == ["prefill-0", "decode-1"], repr(ids), r)

        # Force: gone at once.
        p1 = sim("prefill")
        w = admin(r, "POST", "/admin/v1/workers", {"role": "prefill", "url": "http://127.0.0.1:%d" % p1.port,
                                                   "bootstrap_port": p1.ports["bport"]}, expect=201)
        check(w["id"] == "prefill-1" and w["bootstrap_port"] == p1.ports["bport"], repr(w), r)
        for _ in range(4):
            check(request(r.port, "POST", "/generate", GEN)[0] == 200, "request with prefill-1", r)
        check(stats(p1)["requests"] >= 1, "the added prefill took requests", r, p1)
        w = admin(r, "DELETE", "/admin/v1/workers/prefill-1?force=true")
        check(w.get("removed") is True, repr(w), r)
        check(request(r.ports["admin"], "GET", "/admin/v1/workers/prefill-1")[0] == 404, "force delete", r)
        n1 = stats(p1)["requests"]
        for _ in range(3):
            check(request(r.port, "POST", "/generate", GEN)[0] == 200, "request after the force delete", r)
        check(stats(p1)["requests"] == n1, "a force-deleted worker got requests", r)
        m = request(r.port, "GET", "/metrics")[2].decode()
        check(metric_value(m, "pdr_workers", role="decode", source="admin") == 1 and
              metric_value(m, "pdr_workers", role="decode", source="static") == 0, m, r)
        check(metric_value(m, "pdr_workers_added_total", source="admin") == 2 and
              metric_value(m, "pdr_workers_removed_total", source="admin") == 1 and
              metric_value(m, "pdr_workers_removed_total", source="static") == 1, m, r)
        check(r.alive(), "router died", r)
    finally:
        pdtest.stop_all()


def write_config(r, prefills, decodes, extra=""):
    lines = ["listen: { host: 127.0.0.1, port: %d }" % r.port, "admin: { host: 127.0.0.1, port: %d%s }"
             % (r.ports["admin"], extra), "workers:", "  prefill:"]
    lines += ["    - { url: http://127.0.0.1:%d, bootstrap_port: %d }" % (p.port, p.ports["bport"]) for p in prefills]
    lines += ["  decode:"] + ["    - { url: http://127.0.0.1:%d }" % d.port for d in decodes]
    with open(r.config_path + ".new", "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(r.config_path + ".new", r.config_path)


def reloads(r, result):
    m = request(r.port, "GET", "/metrics")[2].decode()
    return metric_value(m, "pdr_config_reloads_total", result=result)


def scenario_reload():
    """Reload under load (SIGHUP, then POST /admin/v1/reload): zero failed requests; a stream in flight
    across the reload completes; an unchanged worker keeps its id and state (drained stays drained); a
    new worker takes traffic; a removed one leaves; an invalid file is refused with file:line:col and the
    running config stays; a rotated admin token applies at once."""
    ps = [sim("prefill"), sim("prefill")]
    d = sim("decode", "--decode-us-per-token", "2000")
    tok_path = token_file("old-token\n")
    r = router([ps[0]], [d], config="admin: { host: 127.0.0.1, port: {admin}, token_file: %s }" % tok_path)
    tok = "old-token"
    try:
        # State that a rebuilt worker would lose: decode-0's drain count, prefill-0's request count.
        admin(r, "POST", "/admin/v1/workers/decode-0/drain", token=tok, expect=202)
        admin(r, "POST", "/admin/v1/workers/decode-0/activate", token=tok)
        load = Load(r)
        load.wait_done(20, "load to start")
        t, result = slow_stream(r, tokens=100)
        before = worker(r, "prefill-0", tok)
        check(before["requests_total"] > 0, repr(before), r)

        write_config(r, ps, [d], extra=", token_file: %s" % tok_path)
        r.proc.send_signal(signal.SIGHUP)
        pdtest.poll_until(lambda: reloads(r, "ok") == 1, 5, "the SIGHUP reload")
        ws = admin(r, "GET", "/admin/v1/workers", token=tok)["workers"]
        check([w["id"] for w in ws] == ["prefill-0", "prefill-1", "decode-0"], repr(ws), r)
        check(ws[0]["requests_total"] >= before["requests_total"], "prefill-0 lost its counters: %r" % ws[0], r)
        m = request(r.port, "GET", "/metrics")[2].decode()
        check(metric_value(m, "pdr_worker_drains_total", role="decode", url="http://127.0.0.1:%d" % d.port) == 1,
              "decode-0 lost its drain count across the reload", r)
        n1 = stats(ps[1])["requests"]
        load.wait_done(20, "requests after the reload")
        check(stats(ps[1])["requests"] > n1, "the new prefill takes no traffic", r)

        # An invalid file: refused with its position; the running config stays.
        with open(r.config_path, "a") as f:
            f.write("retries: { max: [1, 2 }\n")
        st, _, raw = request(r.ports["admin"], "POST", "/admin/v1/reload",
                             headers={"Authorization": "Bearer " + tok})
        e = json.loads(raw)["error"]
        check(st == 400 and re.search(r"\.yaml:\d+:\d+: ", e["message"]), "%d %r" % (st, e), r)
        check(reloads(r, "failed") == 1 and len(admin(r, "GET", "/admin/v1/workers", token=tok)["workers"]) == 3,
              "a refused reload changed something", r)
        load.wait_done(10, "requests after the refused reload")

        # Remove prefill-0, rotate the token: POST /admin/v1/reload.
        with open(tok_path, "w") as f:
            f.write("new-token\n")
        write_config(r, [ps[1]], [d], extra=", token_file: %s" % tok_path)
        out = admin(r, "POST", "/admin/v1/reload", token=tok)
        check(out["reloaded"] is True and "1 static worker change" in out["message"], repr(out), r)
        st, _, _ = request(r.ports["admin"], "GET", "/admin/v1/workers", headers={"Authorization": "Bearer " + tok})
        check(st == 401, "the old token still works after the rotation: %d" % st, r)
        tok = "new-token"
        ids = [w["id"] for w in admin(r, "GET", "/admin/v1/workers", token=tok)["workers"]]
        check(ids == ["prefill-1", "decode-0"], repr(ids), r)
        n0 = stats(ps[0])["requests"]
        load.wait_done(20, "requests after the second reload")
        check(stats(ps[0])["requests"] <= n0 + 4, "the removed prefill still gets traffic", r)
        done, failures = load.stop()
        t.join(15)
        check(not failures, "failed requests across reloads: %r" % failures[:5], r)
        resp = result.get("resp", (None, None, b""))
        check(stream_complete(result, 100), "the stream across the reloads was cut: %r %r" % (resp[0], resp[2][-300:]),
              r)
        print("%d requests across 3 reloads, 0 failed" % done)
        check(r.alive(), "router died", r)
    finally:
        pdtest.stop_all()


def kept_keys(out):
    """The keys a reload's answer says keep their running values, as a set."""
    tail = out["message"].partition("until a restart: ")[2]
    return set(k for k in tail.split(", ") if k)


def scenario_reload_restart_keys():
    """A reload's answer names exactly the changed keys that need a restart (their reload class in the
    configuration schema): a new thread count, access log and raised body limit are named; a lowered body
    limit, a changed retry count (applied) and tracing (read at start, not named) are not; removing
    admin.token_file is named, setting a new one is not."""
    p, d = sim("prefill"), sim("decode")
    tok_path = token_file("tok\n")
    r = router([p], [d], config="threads: 1\nlimits: { max_body_bytes: 65536 }\n"
               "admin: { host: 127.0.0.1, port: {admin}, token_file: %s }" % tok_path)
    log_path = r.config_path + ".access"
    try:
        def reload(extra_admin, text):
            write_config(r, [p], [d], extra=extra_admin)
            with open(r.config_path, "a") as f:
                f.write(text)
            return admin(r, "POST", "/admin/v1/reload", token="tok")

        out = reload(", token_file: %s" % tok_path,
                     "threads: 2\nlimits: { max_body_bytes: 131072 }\nretries: { max: 3 }\n"
                     "tracing: { batch_max: 7 }\nlog: { access_log: %s }\n" % log_path)
        check(out["reloaded"] is True, repr(out), r)
        check(kept_keys(out) == {"threads", "limits.max_body_bytes (raising it)", "log.access_log"}, repr(out), r)
        # The running values stay: the second reload compares with the first one's snapshot, whose
        # threads, body limit and access log are the file's (2, 131072, the file): lowering the limit,
        # the same thread count and log, and no token file.
        out = reload("", "threads: 2\nlimits: { max_body_bytes: 32768 }\nlog: { access_log: %s }\n" % log_path)
        check(kept_keys(out) == {"admin.token_file (removing it)"}, repr(out), r)
        check(r.alive(), "router died", r)
    finally:
        pdtest.stop_all()
        os.unlink(tok_path)


def scenario_drain_load():
    """Drain prefill-0 while ~200 requests run over several connections: no request fails, prefill-0
    gets no new request once the drain call returned (those in flight finish), it reaches "drained";
    after activate it receives requests again."""
    ps = [sim("prefill"), sim("prefill")]
    d = sim("decode")
    r = router(ps, [d], "--prefill-policy", "round_robin")
    try:
        n_total, n_conns = 200, 4
        done, failures = [0], []
        lock = threading.Lock()

        def load(k):
            for _ in range(k):
                try:
                    st, _, body = request(r.port, "POST", "/generate", GEN, timeout=30)
                except OSError as e:
                    st, body = -1, repr(e).encode()
                with lock:
                    done[0] += 1
                    if st != 200:
                        failures.append((st, body[:200]))

        threads = [threading.Thread(target=load, args=(n_total // n_conns,)) for _ in range(n_conns)]
        for t in threads:
            t.start()
        pdtest.poll_until(lambda: done[0] >= 40, 30, "the first 40 requests")
        w = admin(r, "POST", "/admin/v1/workers/prefill-0/drain", expect=202)
        before = stats(ps[0])["requests"]
        done_at_drain = done[0]
        check(w["id"] == "prefill-0" and w["state"] in ("draining", "drained"), repr(w), r)
        pdtest.poll_until(lambda: state_is(r, "prefill-0", "drained"), 10, "prefill-0 drained")
        at_drained = stats(ps[0])["requests"]
        check(at_drained <= before + w["in_flight"], "prefill-0 got new requests while draining: %d -> %d (%d in "
              "flight)" % (before, at_drained, w["in_flight"]), r, ps[0])
        for t in threads:
            t.join(60)
        check(not failures, "failed requests during the drain: %r" % failures[:5], r)
        check(done[0] == n_total, "done %d" % done[0], r)
        check(done_at_drain < n_total - 20, "the drain happened under load (%d done)" % done_at_drain, r)
        print("drain at %d/%d requests; prefill-0 served %d, prefill-1 %d" % (done_at_drain, n_total, at_drained,
                                                                             stats(ps[1])["requests"]))
        after = stats(ps[0])["requests"]
        check(after == at_drained, "prefill-0 got requests after it was drained: %d -> %d" % (at_drained, after), r)
        check(stats(ps[1])["requests"] > n_total - at_drained - 1, "prefill-1 took the rest", r)
        m = request(r.port, "GET", "/metrics")[2].decode()
        url0 = "http://127.0.0.1:%d" % ps[0].port
        check(metric_value(m, "pdr_worker_state", role="prefill", url=url0, state="drained") == 1, m, r)
        check(metric_value(m, "pdr_worker_state", role="prefill", url=url0, state="healthy") == 0, m, r)
        check(metric_value(m, "pdr_worker_drains_total", role="prefill", url=url0) == 1, m, r)
        # Draining again changes nothing; activate brings it back.
        check(admin(r, "POST", "/admin/v1/workers/prefill-0/drain", expect=202)["state"] == "drained", "redrain", r)
        w = admin(r, "POST", "/admin/v1/workers/prefill-0/activate")
        check(w["state"] == "healthy", repr(w), r)
        for _ in range(6):
            request_json(r.port, "POST", "/generate", GEN)
        check(stats(ps[0])["requests"] >= after + 2, "prefill-0 serves again after activate", r)
    finally:
        pdtest.stop_all()


def scenario_drain_h2load():
    """Drain under h2load (HTTP/2, 8 connections, 2 streams each): every one of the requests answers
    2xx (h2load's own count), prefill-0 reaches drained and gets nothing after, prefill-1 takes the rest."""
    exe = shutil.which("h2load")
    if exe is None:
        print("h2load is not installed (nghttp2-client): skipped")
        sys.exit(77)
    ps = [sim("prefill"), sim("prefill")]
    d = sim("decode")
    r = router(ps, [d], "--prefill-policy", "round_robin")
    try:
        fd, body = tempfile.mkstemp(prefix="pdrouter-h2load-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(GEN, f)
        n = 4000
        h2 = subprocess.Popen([exe, "-n", str(n), "-c", "8", "-m", "2", "-d", body, "-H",
                               "content-type: application/json", "http://127.0.0.1:%d/generate" % r.port],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

        def served():
            m = request(r.port, "GET", "/metrics")[2].decode()
            return metric_value(m, "pdr_requests_total", route="generate", code="200") or 0
        pdtest.poll_until(lambda: served() >= 400, 30, "h2load's first 400 requests")
        w = admin(r, "POST", "/admin/v1/workers/prefill-0/drain", expect=202)
        at_drain = served()
        pdtest.poll_until(lambda: state_is(r, "prefill-0", "drained"), 10, "prefill-0 drained")
        drained_count = stats(ps[0])["requests"]
        out, _ = h2.communicate(timeout=120)
        check(h2.returncode == 0, "h2load failed: %s" % out[-2000:], r)
        m = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, "
                      r"(\d+) errored", out)
        codes = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out)
        check(m and codes, "h2load output: %s" % out[-2000:], r)
        total, _, done, ok, failed, errored = map(int, m.groups())
        check(total == n and done == n and ok == n and failed == 0 and errored == 0 and int(codes.group(1)) == n,
              "requests lost during the drain: %s" % out[-1500:], r)
        check(at_drain < n - 400, "the drain came too late to be under load (%d of %d served)" % (at_drain, n), r)
        check(stats(ps[0])["requests"] == drained_count, "prefill-0 got requests after it was drained", r)
        check(stats(ps[1])["requests"] >= n - drained_count, "prefill-1 took the rest", r)
        print("h2load: %d requests, 0 failed; drain at %d (%d in flight on prefill-0); prefill-0 %d, prefill-1 %d" %
              (n, at_drain, w["in_flight"], drained_count, stats(ps[1])["requests"]))
    finally:
        pdtest.stop_all()


def scenario_drain_timeout():
    """Drain with timeout_ms while a slow request is in flight: "draining" until the timeout, then
    "drained" although the request still runs; the request is not killed and completes."""
    p, d = sim("prefill"), sim("decode")
    r = router([p], [d])
    try:
        fault(p, {"prefill_us_per_token": 150000})  # about 1.5 s for this ~10-token prompt
        res = {}

        def slow():
            res["r"] = request(r.port, "POST", "/generate", GEN, timeout=30)

        t = threading.Thread(target=slow)
        t.start()
        pdtest.poll_until(lambda: worker(r, "prefill-0")["in_flight"] == 1, 10, "the slow request in flight")
        t0 = time.monotonic()
        w = admin(r, "POST", "/admin/v1/workers/prefill-0/drain", {"timeout_ms": 300}, expect=202)
        check(w["state"] == "draining" and w["in_flight"] == 1, repr(w), r)
        pdtest.poll_until(lambda: state_is(r, "prefill-0", "drained"), 10, "drained at the timeout")
        waited = time.monotonic() - t0
        check(waited >= 0.29, "drained after %.3fs, before the 300 ms timeout" % waited, r)
        check(t.is_alive() and worker(r, "prefill-0")["in_flight"] == 1, "the slow request is still running", r)
        check("drain timeout" in open(r.log_path).read(), "the forced drain is logged", r)
        t.join(30)
        st, _, body = res["r"]
        check(st == 200 and json.loads(body)["text"], "the in-flight request completed: %d %r" % (st, body[:200]), r)
        # pd.relay first_byte: the client's answer may end before the prefill's own answer has arrived
        # (its leg is read to its end); in_flight drops then.
        pdtest.poll_until(lambda: worker(r, "prefill-0")["in_flight"] == 0, 10, "in_flight back to 0")
        # With the only prefill drained, new requests get 503.
        st, _, _ = request(r.port, "POST", "/generate", GEN)
        check(st == 503, "no serving prefill: %d" % st, r)
    finally:
        pdtest.stop_all()


def scenario_self_drain():
    """A health check answered 410 drains the worker; a later 2xx check does not re-activate it, only
    POST .../activate does."""
    ps = [sim("prefill"), sim("prefill")]
    d = sim("decode")
    r = router(ps, [d], "--health-interval-ms", "50")
    url0 = "http://127.0.0.1:%d" % ps[0].port

    def checks_ok():
        m = request(r.port, "GET", "/metrics")[2].decode()
        return metric_value(m, "pdr_worker_health_checks_total", role="prefill", url=url0, result="ok") or 0

    try:
        fault(ps[0], {"health_status": 410})
        pdtest.poll_until(lambda: state_is(r, "prefill-0", "drained"), 10, "prefill-0 drained by its 410")
        check("410" in open(r.log_path).read(), "the self-drain is logged", r)
        fault(ps[0], {"health_status": 0})
        base = checks_ok()
        pdtest.poll_until(lambda: checks_ok() >= base + 4, 10, "four more passing checks")
        check(state_is(r, "prefill-0", "drained"), "a 2xx check re-activated a self-drained worker", r)
        before = stats(ps[0])["requests"]
        for _ in range(4):
            request_json(r.port, "POST", "/generate", GEN)
        check(stats(ps[0])["requests"] == before, "a drained worker got requests", r)
        admin(r, "POST", "/admin/v1/workers/prefill-0/activate")
        check(state_is(r, "prefill-0", "healthy"), "activated", r)
        for _ in range(4):
            request_json(r.port, "POST", "/generate", GEN)
        check(stats(ps[0])["requests"] > before, "serves again after activate", r)
        pdtest.stop_all()

        # health.drain_status picks the status: 418 drains here, and 410 is then an ordinary failure.
        ps = [sim("prefill"), sim("prefill")]
        d = sim("decode")
        r = router(ps, [d], config="health: { interval_ms: 50, drain_status: 418, fall: 1 }")
        fault(ps[1], {"health_status": 410})
        pdtest.poll_until(lambda: state_is(r, "prefill-1", "unhealthy"), 10, "410 as a failed check")
        fault(ps[0], {"health_status": 418})
        pdtest.poll_until(lambda: state_is(r, "prefill-0", "drained"), 10, "prefill-0 drained by its 418")
    finally:
        pdtest.stop_all()


def scenario_readiness():
    """/readiness counts only healthy workers that are not draining: 503 once every prefill drains,
    200 again after one is activated; status counts follow."""
    ps = [sim("prefill"), sim("prefill")]
    d = sim("decode")
    r = router(ps, [d])
    try:
        check(request(r.port, "GET", "/readiness")[0] == 200, "ready", r)
        admin(r, "POST", "/admin/v1/workers/prefill-0/drain", expect=202)
        check(request(r.port, "GET", "/readiness")[0] == 200, "one prefill still serves", r)
        admin(r, "POST", "/admin/v1/workers/prefill-1/drain", {"timeout_ms": 1000}, expect=202)
        st, h, body = request(r.port, "GET", "/readiness")
        check(st == 503 and json.loads(body)["error"]["code"] == 503, "not ready: %d" % st, r)
        s = admin(r, "GET", "/admin/v1/status")
        check(s["workers"]["prefill"]["healthy"] == 0 and
              s["workers"]["prefill"]["draining"] + s["workers"]["prefill"]["drained"] == 2, repr(s), r)
        st, _, body = request(r.port, "POST", "/generate", GEN)
        check(st == 503, "no prefill to pick: %d %r" % (st, body), r)
        admin(r, "POST", "/admin/v1/workers/prefill-1/activate")
        check(request(r.port, "GET", "/readiness")[0] == 200, "ready again", r)
        request_json(r.port, "POST", "/generate", GEN)
    finally:
        pdtest.stop_all()


def scenario_shutdown():
    """SIGTERM with an idle keep-alive admin connection open: status shows shutting_down during the
    grace (the admin listener still answers), a second SIGTERM ends the grace, the admin listener
    closes with the data listener and the process still exits 0 (the admin connection does not keep
    loop 0 alive)."""
    import http.client
    import signal
    p, d = sim("prefill"), sim("decode")
    r = router([p], [d], "--drain-grace-ms", "60000")
    try:
        conn = http.client.HTTPConnection("127.0.0.1", r.ports["admin"], timeout=10)
        conn.request("GET", "/admin/v1/status")
        resp = conn.getresponse()
        check(resp.status == 200 and json.loads(resp.read())["shutting_down"] is False, "status", r)
        r.proc.send_signal(signal.SIGTERM)
        pdtest.poll_until(lambda: request_json(r.ports["admin"], "GET", "/admin/v1/status")["shutting_down"] is True,
                          5, "status to show shutting_down during the grace")
        rc = r.stop(signal.SIGTERM, timeout=10)
        check(rc == 0, "exit status %s" % rc, r)
        conn.close()
    finally:
        pdtest.stop_all()


if __name__ == "__main__":
    pdtest.run_scenario(globals())
