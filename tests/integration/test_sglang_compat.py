#!/usr/bin/env python3
"""Scenarios of the sglang router compatibility (docs/migrating-from-sglang-router.md): real pdrouter and
pdsim processes on loopback.

  prometheus        --prometheus-host/--prometheus-port: a listener serving GET /metrics only
  startup_timeout   --worker-startup-timeout-secs: exit 1 when no healthy pair comes up in time; none
                    after one did
  cors              --cors-allowed-origins: preflights answered, Access-Control-Allow-Origin on answers
  log_level         --log-level debug|info|error|critical filter the router's log (debug shows each pick and
                    health check); --log-dir gets a copy
  admin_token_file  --admin-token-file: a flag-only start with an authenticated admin API
  routes            /get_model_info, /get_server_info, /health_generate, /flush_cache, /get_loads
  refused_flags     an sglang router flag without an equivalent: exit 2 naming what exists
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check, request, request_json  # noqa: E402

H = "127.0.0.1"


def sim(role, *extra):
    argv = ["pdsim", "--role", role, "--port", "{port}"]
    if role == "prefill":
        argv += ["--bootstrap-port", "{bport}"]
    return pdtest.start(argv + list(extra), name="pdsim-%s" % role)


def router(prefills, decodes, *extra, ready=True, dead_prefills=(), dead_decodes=()):
    """pdrouter from sglang-style flags only; the admin port is a free one."""
    argv = ["pdrouter", "--pd-disaggregation", "--host", H, "--port", "{port}", "--admin-port", "{admin}",
            "--access-log", "off", "--drain-grace-ms", "0", "--health-interval-ms", "100"]
    for p in prefills:
        argv += ["--prefill", "http://127.0.0.1:%d" % p.port, str(p.ports["bport"])]
    for port in dead_prefills:
        argv += ["--prefill", "http://127.0.0.1:%d" % port]
    for d in decodes:
        argv += ["--decode", "http://127.0.0.1:%d" % d.port]
    for port in dead_decodes:
        argv += ["--decode", "http://127.0.0.1:%d" % port]
    return pdtest.start(argv + list(extra), name="pdrouter", health_path="/readiness" if ready else "/health",
                        healthy=200 if ready else None)


def stats(p):
    return request_json(p.port, "GET", "/pdsim/stats")


def log_of(p):
    with open(p.log_path, errors="replace") as f:
        return f.read()


def scenario_prometheus():
    p, d = sim("prefill"), sim("decode")
    r = router([p], [d], "--prometheus-host", H, "--prometheus-port", "{mport}")
    mport = r.ports["mport"]
    st, h, body = request(mport, "GET", "/metrics")
    check(st == 200 and b"pdr_requests_total" in body, "GET /metrics on the metrics port: %d %r" % (st, body[:200]), r)
    check(h.get("content-type", "").startswith("text/plain"), repr(h), r)
    # Nothing else is served there: no PD route, no admin route, no readiness.
    for method, path in (("POST", "/generate"), ("GET", "/readiness"), ("GET", "/admin/v1/workers"),
                         ("GET", "/v1/models")):
        st, _, body = request(mport, method, path, {"text": "x"} if method == "POST" else None)
        check(st == 404 and json.loads(body)["error"]["code"] == 404, "%s %s: %d %r" % (method, path, st, body), r)
    st, _, body = request(mport, "POST", "/metrics", {})
    check(st == 405, "POST /metrics: %d" % st, r)
    # The data port still has its own /metrics.
    st, _, _ = request(r.port, "GET", "/metrics")
    check(st == 200, "data-port /metrics: %d" % st, r)
    check("metrics listener on 127.0.0.1:%d" % mport in log_of(r), "start log names the listener", r)
    # A port already taken: the start fails and says which key.
    rc = r.stop()
    check(rc == 0, "exit status %s after SIGTERM" % rc, r)
    blocker = __import__("socket").socket()
    blocker.bind((H, 0))
    blocker.listen(1)
    busy = blocker.getsockname()[1]
    proc = subprocess.run([pdtest.binary("pdrouter"), "--prefill", "http://127.0.0.1:%d" % p.port, "--decode",
                           "http://127.0.0.1:%d" % d.port, "--host", H, "--port", str(pdtest.free_port()),
                           "--admin-port", "0", "--prometheus-host", H, "--prometheus-port", str(busy)],
                          capture_output=True, text=True, timeout=20)
    blocker.close()
    check(proc.returncode == 1 and "--prometheus-port" in proc.stderr,
          "busy metrics port: rc %d %s" % (proc.returncode, proc.stderr[-500:]))


def scenario_startup_timeout():
    # No prefill ever comes up: readiness 503, then exit 1 at the deadline, with the reason.
    dead = pdtest.free_port()
    d = sim("decode")
    r = router([], [d], "--worker-startup-timeout-secs", "2", ready=False, dead_prefills=[dead])
    st, _, _ = request(r.port, "GET", "/readiness")
    check(st == 503, "readiness before any healthy pair: %d" % st, r)
    rc = r.wait_exit(10)
    check(rc == 1, "exit status %s (want 1)" % rc, r)
    log = log_of(r)
    check("no healthy prefill/decode pair within 2000 ms" in log and "0 of 1 prefill" in log,
          "exit reason not logged", r)
    # Healthy workers: the deadline is gone once the pair is seen, the router keeps running.
    p = sim("prefill")
    r2 = router([p], [d], "--worker-startup-timeout-secs", "1")
    pdtest.poll_until(lambda: "a healthy prefill/decode pair after" in log_of(r2), 5, "the startup log line")
    check(r2.alive(), "router exited although a pair was healthy", r2)
    # Workers that fail later do not make it exit: the deadline only concerns the start.
    request_json(d.port, "POST", "/pdsim/fault", {"fail_health": True})
    pdtest.poll_until(lambda: request(r2.port, "GET", "/readiness")[0] == 503, 5, "readiness to drop")
    check(r2.alive() and "exiting" not in log_of(r2), "exited after a healthy start", r2)
    rc = r2.stop()
    check(rc == 0, "exit status %s after SIGTERM" % rc, r2)


def preflight(port, origin, path="/v1/chat/completions"):
    return request(port, "OPTIONS", path, headers={"Origin": origin, "Access-Control-Request-Method": "POST",
                                                   "Access-Control-Request-Headers": "content-type"})


def scenario_cors():
    p, d = sim("prefill"), sim("decode")
    r = router([p], [d], "--cors-allowed-origins", "https://app.example", "http://localhost:3000")
    st, h, body = preflight(r.port, "https://app.example")
    check(st == 200 and h.get("access-control-allow-origin") == "https://app.example", "preflight: %d %r" % (st, h), r)
    check("POST" in h.get("access-control-allow-methods", ""), repr(h), r)
    check("content-type" in h.get("access-control-allow-headers", ""), repr(h), r)
    check(h.get("access-control-max-age") == "3600" and "origin" in h.get("vary", ""), repr(h), r)
    check(p.alive() and json.loads(json.dumps(request_json(p.port, "GET", "/pdsim/stats")))["requests"] == 0,
          "a preflight reached a worker", r)
    # An origin not listed: answered, without the allow header (the browser then refuses).
    st, h, _ = preflight(r.port, "https://evil.example")
    check(st == 200 and "access-control-allow-origin" not in h, "unlisted origin: %d %r" % (st, h), r)
    # Real answers carry the header, errors included.
    st, h, body = request(r.port, "POST", "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 2}},
                          headers={"Origin": "http://localhost:3000"})
    check(st == 200 and h.get("access-control-allow-origin") == "http://localhost:3000", "answer: %d %r" % (st, h), r)
    check(h.get("access-control-expose-headers") == "x-request-id", repr(h), r)
    st, h, _ = request(r.port, "GET", "/nope", headers={"Origin": "https://app.example"})
    check(st == 404 and h.get("access-control-allow-origin") == "https://app.example", "404: %r" % h, r)
    st, h, _ = request(r.port, "GET", "/health")
    check("access-control-allow-origin" not in h, "no Origin, no CORS header: %r" % h, r)
    r.stop()
    # "*": any origin.
    r = router([p], [d], "--cors-allowed-origins", "*")
    st, h, _ = preflight(r.port, "https://anything.example")
    check(st == 200 and h.get("access-control-allow-origin") == "*", "any: %d %r" % (st, h), r)
    r.stop()
    # Off by default: a preflight is an ordinary OPTIONS request (405 on a PD route), no CORS header.
    r = router([p], [d])
    st, h, _ = preflight(r.port, "https://app.example")
    check(st == 405 and "access-control-allow-origin" not in h, "CORS off: %d %r" % (st, h), r)
    rc = r.stop()
    check(rc == 0, "exit status %s after SIGTERM" % rc, r)


def checked(r, wid):
    ws = request_json(r.ports["admin"], "GET", "/admin/v1/workers")["workers"]
    w = [x for x in ws if x["id"] == wid]
    return w and w[0].get("last_check_ms_ago") is not None


def scenario_log_level():
    p, d = sim("prefill"), sim("decode")
    dead = pdtest.free_port()
    logdir = tempfile.mkdtemp(prefix="pdrouter-logdir-")
    sub = os.path.join(logdir, "sub")
    for level in ("debug", "info", "error", "critical"):
        extra = ["--log-level", level] + (["--log-dir", sub] if level == "debug" else [])
        r = router([p], [d], *extra, dead_decodes=[dead])
        # The dead worker's health check failed (a debug line in the upstream client), as an event.
        pdtest.poll_until(lambda: checked(r, "decode-1"), 5, "the dead worker to be checked")
        # A request that works: at debug, the picks it made and the checks that passed are logged too.
        st = request(r.port, "POST", "/generate", {"text": "hello", "sampling_params": {"max_new_tokens": 2}})[0]
        check(st == 200, "request at %s: %d" % (level, st), r)
        r.stop()
        log = log_of(r)
        has_debug = (" debug upstream 127.0.0.1:%d" % dead) in log
        has_info = " info pdrouter listening on" in log
        if level == "debug":
            check(has_debug and has_info, "debug: %s" % log[-800:], r)
            for want in (" debug pick: pool default, prefill: prefill-0 http://127.0.0.1:%d by round_robin" % p.port,
                         " debug pick: pool default, decode: decode-0 http://127.0.0.1:%d by least_load" % d.port,
                         " debug health: prefill-0 http://127.0.0.1:%d/health: HTTP 200, check passed" % p.port):
                check(want in log, "debug: no line%r in %s" % (want, log[-1500:]), r)
            with open(os.path.join(sub, "pdrouter.log")) as f:
                copy = f.read()
            check(" info pdrouter listening on" in copy and " debug upstream" in copy, "--log-dir copy: %r" % copy[-500:], r)
        elif level == "info":
            check(has_info and " debug " not in log, "info: %s" % log[-800:], r)
        else:
            check(not has_info and " debug " not in log and " info " not in log, "error: %s" % log[-800:], r)
    # A log dir that cannot be created stops the start (exit 1, reason on stderr).
    blocker = os.path.join(logdir, "file")
    open(blocker, "w").close()
    proc = subprocess.run([pdtest.binary("pdrouter"), "--prefill", "http://127.0.0.1:1", "--decode",
                           "http://127.0.0.1:2", "--log-dir", os.path.join(blocker, "x")],
                          capture_output=True, text=True, timeout=20)
    check(proc.returncode == 1 and "log.dir" in proc.stderr, "bad log dir: %d %s" % (proc.returncode, proc.stderr))


def scenario_admin_token_file():
    p, d = sim("prefill"), sim("decode")
    tok = "tok-%d" % os.getpid()
    fd, path = tempfile.mkstemp(prefix="pdrouter-token-")
    with os.fdopen(fd, "w") as f:
        f.write(tok + "\n")
    r = router([p], [d], "--admin-token-file", path)
    aport = r.ports["admin"]
    st, h, _ = request(aport, "GET", "/admin/v1/workers")
    check(st == 401 and h.get("www-authenticate", "").startswith("Bearer"), "no token: %d" % st, r)
    st, _, _ = request(aport, "GET", "/admin/v1/workers", headers={"Authorization": "Bearer wrong"})
    check(st == 401, "wrong token: %d" % st, r)
    st, _, body = request(aport, "GET", "/admin/v1/workers", headers={"Authorization": "Bearer " + tok})
    check(st == 200 and len(json.loads(body)["workers"]) == 2, "right token: %d %r" % (st, body[:200]), r)
    # A token file that cannot be read stops the start.
    r.stop()
    proc = subprocess.run([pdtest.binary("pdrouter"), "--prefill", "http://127.0.0.1:%d" % p.port, "--decode",
                           "http://127.0.0.1:%d" % d.port, "--host", H, "--port", str(pdtest.free_port()),
                           "--admin-port", str(pdtest.free_port()), "--admin-token-file", path + ".missing"],
                          capture_output=True, text=True, timeout=20)
    check(proc.returncode != 0 and "token" in proc.stderr, "missing token file: %d %s" % (proc.returncode, proc.stderr))


def scenario_routes():
    p, d, d2 = sim("prefill"), sim("decode"), sim("decode")
    r = router([p], [d, d2], "--drain-timeout-ms", "1000")
    # Model and server info: forwarded to the prefill worker, on the path asked.
    for path in ("/get_model_info", "/model_info"):
        j = request_json(r.port, "GET", path)
        check(j.get("is_generation") is True and j.get("model_path"), "%s: %r" % (path, j), r)
    for path in ("/get_server_info", "/server_info"):
        j = request_json(r.port, "GET", path)
        check(j.get("disaggregation_mode") == "prefill" and j.get("port") == p.port, "%s: %r" % (path, j), r)
    st, _, _ = request(r.port, "POST", "/get_model_info", {})
    check(st == 405, "POST /get_model_info: %d" % st, r)
    # health_generate: one pair, both answer.
    st, _, body = request(r.port, "GET", "/health_generate")
    check(st == 200 and b"prefill=http://127.0.0.1:%d" % p.port in body, "health_generate: %d %r" % (st, body), r)
    # flush_cache: every worker.
    st, _, body = request(r.port, "POST", "/flush_cache")
    j = json.loads(body)
    check(st == 200 and j["status"] == "success" and j["workers_flushed"] == 3 and j["total_workers"] == 3,
          "flush_cache: %d %r" % (st, j), r)
    st, _, _ = request(r.port, "GET", "/flush_cache")
    check(st == 405, "GET /flush_cache: %d" % st, r)
    # get_loads: every worker, with its role.
    for path in ("/get_loads", "/v1/loads"):
        ws = request_json(r.port, "GET", path)["workers"]
        check(sorted((w["worker_type"], w["load"]) for w in ws) == [("decode", 0), ("decode", 0), ("prefill", 0)],
              "%s: %r" % (path, ws), r)
    # A worker that is gone: flush is a partial success (206) naming it, its load is -1.
    d2.stop()
    st, _, body = request(r.port, "POST", "/flush_cache")
    j = json.loads(body)
    gone = "http://127.0.0.1:%d" % d2.port
    check(st == 206 and j["status"] == "partial_success" and j["workers_flushed"] == 2 and
          [f["worker"] for f in j["failed"]] == [gone] and len(j["successful"]) == 2, "partial: %d %r" % (st, j), r)
    ws = request_json(r.port, "GET", "/get_loads")["workers"]
    check([w["load"] for w in ws if w["worker"] == gone] == [-1], "dead worker's load: %r" % ws, r)
    # No healthy decode left: health_generate is 503.
    request_json(d.port, "POST", "/pdsim/fault", {"fail_health": True})
    pdtest.poll_until(lambda: request(r.port, "GET", "/readiness")[0] == 503, 5, "readiness to drop")
    st, _, body = request(r.port, "GET", "/health_generate")
    check(st == 503 and json.loads(body)["error"]["code"] == 503, "health_generate without a pair: %d %r" % (st, body), r)
    # The prefill stops answering: the info routes are a clean 502.
    p.stop()
    st, _, body = request(r.port, "GET", "/get_server_info")
    check(st == 502 and "failed to answer /get_server_info" in json.loads(body)["error"]["message"],
          "info with the prefill gone: %d %r" % (st, body), r)
    # A worker that takes connections and never answers: a flush waits for it; a shutdown waits for the
    # flush up to lifecycle.drain_timeout_ms, then ends its call, answers, and exits 0 (no leak in ASan
    # builds).
    import socket as so
    import threading
    hole = so.socket()
    hole.bind((H, 0))
    hole.listen(64)
    hole_url = "http://127.0.0.1:%d" % hole.getsockname()[1]
    st, _, body = request(r.ports["admin"], "POST", "/admin/v1/workers", {"role": "decode", "url": hole_url})
    check(st == 201, "add the silent worker: %d %r" % (st, body), r)
    held = []

    def wait_flush():
        hole.settimeout(10)
        while True:
            conn, _ = hole.accept()
            held.append(conn)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                data += chunk
            if data.startswith(b"POST /flush_cache"):
                return
    got = {}
    t = threading.Thread(target=lambda: got.update(resp=request(r.port, "POST", "/flush_cache", timeout=20)))
    t.start()
    wait_flush()  # the router's call reached the silent worker
    r.proc.send_signal(__import__("signal").SIGTERM)
    t.join(20)
    st, _, body = got["resp"]
    j = json.loads(body)
    check(st == 206 and hole_url in [f["worker"] for f in j["failed"]], "flush at shutdown: %d %r" % (st, j), r)
    rc = r.wait_exit(10)
    check(rc == 0, "exit status %s after SIGTERM" % rc, r)
    check("requests cancelled at drain_timeout" in log_of(r), "the flush was not waited for", r)
    for c in held:
        c.close()
    hole.close()


def scenario_refused_flags():
    for argv, want in ((["--redis-url", "redis://r:6379"], "no shared state"),
                       (["--policy", "manual"], "not available yet"),
                       (["--queue-size", "-1"], "expected an integer in 0..1000000"),
                       (["--request-timeout-secs", "0"], "expected an integer in 1..86400")):
        proc = subprocess.run([pdtest.binary("pdrouter"), "--prefill", "http://a:1", "--decode", "http://b:2"] + argv,
                              capture_output=True, text=True, timeout=20)
        check(proc.returncode == 2 and want in proc.stderr, "%r: rc %d %s" % (argv, proc.returncode, proc.stderr))


if __name__ == "__main__":
    pdtest.run_scenario(globals())
