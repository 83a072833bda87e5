#!/usr/bin/env python3
"""What the router says when something is wrong, and when it says it is ready: real pdrouter and pdsim
processes on loopback, scripted workers where a worker must misbehave.

  dns_failure            a worker whose host name does not resolve (the reserved .invalid TLD, RFC 6761):
                         the health log, the admin events and the client's 503 name the DNS failure, never
                         "connection refused"
  readiness_first_check  /readiness is 503 until a prefill and a decode have passed a health check (workers
                         start optimistically healthy; that guess does not make the router ready)
  readiness_never_passes a worker that answers every check with 500 and has not failed enough of them to be
                         marked unhealthy: still 503
"""
import http.server
import os
import re
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check, request, request_json  # noqa: E402

H = "127.0.0.1"
NOWHERE = "pdrouter-test.invalid"  # RFC 6761: .invalid names never resolve


def sim(role, *extra):
    argv = ["pdsim", "--role", role, "--port", "{port}"]
    if role == "prefill":
        argv += ["--bootstrap-port", "{bport}"]
    return pdtest.start(argv + list(extra), name="pdsim-%s" % role)


def router(prefill_urls, decode_urls, *extra):
    """pdrouter from flags, waited for on /health only (readiness is what some scenarios look at)."""
    argv = ["pdrouter", "--pd-disaggregation", "--host", H, "--port", "{port}", "--admin-port", "{admin}",
            "--access-log", "off", "--drain-grace-ms", "0"]
    for u in prefill_urls:
        argv += ["--prefill", u, "8998"]  # a bootstrap port: a pdsim decode refuses a request without one
    for u in decode_urls:
        argv += ["--decode", u]
    return pdtest.start(argv + list(extra), name="pdrouter", health_path="/health")


def log_of(p):
    with open(p.log_path, errors="replace") as f:
        return f.read()


def readiness(r):
    st, _, body = request(r.port, "GET", "/readiness")
    return st, body.decode(errors="replace")


class ScriptedWorker:
    """A worker whose GET /health answers `health_status`, and only once `release` is set."""

    def __init__(self, health_status=200):
        self.release = threading.Event()
        self.health_status = health_status
        self.checks = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.release.wait(30)
                outer.checks += 1
                body = b"{}"
                self.send_response(outer.health_status if self.path == "/health" else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.port = pdtest.free_port()
        self.server = http.server.ThreadingHTTPServer((H, self.port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self):
        return "http://%s:%d" % (H, self.port)

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def scenario_dns_failure():
    d = sim("decode")
    bad = "http://%s:8000" % NOWHERE
    # Health checks alone: the worker is marked unhealthy, and the log and the admin events say why.
    r = router([bad], ["http://127.0.0.1:%d" % d.port], "--health-interval-ms", "100")
    line = pdtest.poll_until(lambda: re.search(r".* is unhealthy: 3 checks failed, last: (.*)", log_of(r)), 10,
                             "the health checks to mark the worker unhealthy")
    want = "DNS lookup failed: cannot resolve host '%s'" % NOWHERE
    check(line.group(1).startswith(want), "health log: %r" % line.group(0), r)
    events = request_json(r.ports["admin"], "GET", "/admin/v1/events")["events"]
    check(any(want in e["message"] for e in events), "admin events: %r" % events, r)
    check("refused" not in log_of(r) and not any("refused" in e["message"] for e in events),
          "a DNS failure reported as a refused connection", r)
    r.stop()
    # A request before any check marked it down: the client's 503 names the DNS failure too.
    r = router([bad], ["http://127.0.0.1:%d" % d.port], "--health-interval-ms", "600000")
    st, _, body = request(r.port, "POST", "/generate", {"text": "hi"})
    msg = body.decode(errors="replace")
    check(st == 503 and want in msg and "refused" not in msg, "client: %d %s" % (st, msg), r)


def scenario_readiness_first_check():
    w = ScriptedWorker()
    try:
        d = sim("decode")
        r = router([w.url()], ["http://127.0.0.1:%d" % d.port], "--health-check-timeout-secs", "30")
        # The worker has not answered its first check (it holds it): not ready, and the answer says so.
        for _ in range(5):
            st, body = readiness(r)
            check(st == 503 and "no prefill/decode pair has passed a health check yet" in body,
                  "readiness before the first check passed: %d %s" % (st, body), r)
        w.release.set()
        pdtest.poll_until(lambda: readiness(r)[0] == 200, 10, "readiness after the first check passed")
    finally:
        w.close()


def scenario_readiness_never_passes():
    w = ScriptedWorker(health_status=500)
    w.release.set()
    try:
        d = sim("decode")
        r = router([w.url()], ["http://127.0.0.1:%d" % d.port], "--health-interval-ms", "50",
                   "--health-failure-threshold", "1000")
        pdtest.poll_until(lambda: w.checks >= 5, 10, "five failed checks")
        st, body = readiness(r)
        check(st == 503 and "no prefill/decode pair has passed a health check yet" in body,
              "readiness with a prefill that never passed: %d %s" % (st, body), r)
        # The same worker answering 200: ready at its next check.
        w.health_status = 200
        pdtest.poll_until(lambda: readiness(r)[0] == 200, 10, "readiness once the worker passes")
    finally:
        w.close()


if __name__ == "__main__":
    pdtest.run_scenario(globals())
