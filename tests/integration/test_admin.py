#!/usr/bin/env python3
"""Integration tests of pdrouter's admin REST API (docs/admin-api.md) with real pdsim workers.

Usage: test_admin.py SCENARIO   (one of the functions named scenario_*; ctest runs each separately)

Every wait polls for the event (pdtest.poll_until); nothing sleeps to synchronize.
"""

import json
import os
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


def scenario_workers():
    """The worker list, one worker, status, and the error answers (404, 405, 400, 501); without a token
    file auth is off and the start log says so."""
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
                                   ("POST", "/admin/v1/workers", 501),
                                   ("DELETE", "/admin/v1/workers/prefill-0", 501),
                                   ("POST", "/admin/v1/reload", 501)):
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
        check(worker(r, "prefill-0")["in_flight"] == 0, "in_flight back to 0", r)
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
