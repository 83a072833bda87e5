#!/usr/bin/env python3
"""Sidecar mode (sidecar.enabled, --sidecar): one router per decode pod, the prefill of each request named
by a header (x-prefiller-host-port: HOST:PORT) among the pool's prefills. Real pdrouter and pdsim
processes on loopback; which prefill served a request is read from each pdsim's own request count.

Usage: test_sidecar.py SCENARIO   (one of the functions named scenario_*; ctest runs each separately)
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check, request  # noqa: E402
from test_headers import last_headers, values  # noqa: E402
from test_router import BODIES, metric_value, metrics_when, router, sim, stats  # noqa: E402
from test_vllm import stop_clean  # noqa: E402

HDR = "x-prefiller-host-port"
ROUTE = "/v1/completions"


def addr(w):
    return "127.0.0.1:%d" % w.port


def sidecar(ps, d, protocol="sglang", *extra, alog=None):
    return router(ps, [d], "--sidecar", "--protocol", protocol, "--prefill-policy", "round_robin", *extra,
                  access_log=alog)


def served(ws):
    return [stats(w)["requests"] for w in ws]


def ask(r, value=None, stream=False, route=ROUTE):
    body = dict(BODIES[route], stream=stream)
    headers = {HDR: value} if value is not None else {}
    return request(r.port, "POST", route, body, headers=headers)


def outcome(m, name):
    return metric_value(m, "pdr_sidecar_prefill_header_total", outcome=name)


def lines(path, n):
    """The access log's first n lines of PD requests."""
    return [x for x in pdtest.access_lines(path, n) if "path" in x][:n]


def picks_named(protocol):
    ps, d = [sim("prefill"), sim("prefill")], sim("decode")
    fd, alog = tempfile.mkstemp(prefix="pdtest-sidecar-", suffix=".log")
    os.close(fd)
    r = sidecar(ps, d, protocol, alog=alog)
    try:
        n = 0
        # Every request names prefill 1 then prefill 0 then 1...: round robin alone would alternate from 0.
        for stream in (False, True):
            for k in (1, 0, 1, 1):
                before = served(ps)
                st, h, out = ask(r, addr(ps[k]), stream)
                n += 1
                check(st == 200, "%s stream=%s -> prefill %d: %d %s" % (protocol, stream, k, st, out[:300]), r)
                if stream:
                    check(b"[DONE]" in out, "no [DONE]: %r" % out[-300:], r)
                after = served(ps)
                check(after[k] == before[k] + 1 and after[1 - k] == before[1 - k],
                      "%s stream=%s: prefill %d named, counts %r -> %r" % (protocol, stream, k, before, after), r)
        # The header stays with the router: neither leg receives it.
        for w in (ps[1], d):
            hs = last_headers(w)
            check(hs is not None and values(hs, HDR) == [], "%s got %s: %r" % (w.name, HDR, hs), r)
        m = metrics_when(r, lambda t: outcome(t, "used") == n, "%d used" % n)
        for o in ("absent", "malformed", "not_in_pool", "unhealthy", "draining"):
            check(outcome(m, o) == 0, "%s: %s" % (o, outcome(m, o)), r)
        ls = lines(alog, n)
        check(all(x["prefill_header"] == "used" and x["status"] == 200 for x in ls), repr(ls[-1]), r)
        check(ls[0]["prefill"] == "http://%s" % addr(ps[1]), repr(ls[0]), r)
        stop_clean(r)  # exit 0, no sanitizer report
    finally:
        pdtest.stop_all()


def scenario_named_sglang():
    """protocol sglang, streamed and not: the header's prefill serves each request (its pdsim counts it,
    the other's count stays), over round robin; used counted, access log "prefill_header":"used"; the header
    is not sent to the prefill or the decode."""
    picks_named("sglang")


def scenario_named_vllm():
    """The same with protocol vllm (the prefill called first, its kv_transfer_params to the decode)."""
    picks_named("vllm")


def scenario_absent():
    """No header: the prefill policy picks (round robin: both prefills serve), counted as absent."""
    ps, d = [sim("prefill"), sim("prefill")], sim("decode")
    fd, alog = tempfile.mkstemp(prefix="pdtest-sidecar-", suffix=".log")
    os.close(fd)
    r = sidecar(ps, d, alog=alog)
    try:
        for _ in range(4):
            st, _, out = ask(r)
            check(st == 200, "%d %s" % (st, out[:300]), r)
        check(served(ps) == [2, 2], "round robin without the header: %r" % served(ps), r)
        # An empty value names nothing either.
        st, _, out = ask(r, "  ")
        check(st == 200, "empty header: %d %s" % (st, out[:300]), r)
        metrics_when(r, lambda t: outcome(t, "absent") == 5 and outcome(t, "used") == 0, "5 absent")
        check(all(x["prefill_header"] == "absent" for x in lines(alog, 5)), "access log", r)
        stop_clean(r)  # exit 0, no sanitizer report
    finally:
        pdtest.stop_all()


def scenario_malformed():
    """A value that is not HOST:PORT: 400 in the OpenAI error shape naming the header, before any worker is
    called; counted as malformed, access log error prefill_header_malformed."""
    ps, d = [sim("prefill"), sim("prefill")], sim("decode")
    fd, alog = tempfile.mkstemp(prefix="pdtest-sidecar-", suffix=".log")
    os.close(fd)
    r = sidecar(ps, d, alog=alog)
    try:
        bad = ["127.0.0.1", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:80x", "[::1", "::1:8000",
               "[::1]x:80", "a b:80", "h@st:80", "http://127.0.0.1:80", ":80", "[not-v6]:80", "[::1]"]
        for v in bad:
            st, h, out = ask(r, v)
            check(st == 400, "%r: %d %s" % (v, st, out[:300]), r)
            e = json.loads(out)["error"]
            check(e["type"] == "invalid_request_error" and e["code"] == 400 and HDR in e["message"], out, r)
        check(served(ps) + served([d]) == [0, 0, 0], "a worker was called: %r" % (served(ps) + served([d])), r)
        n = len(bad)
        metrics_when(r, lambda t: outcome(t, "malformed") == n, "%d malformed" % n)
        ls = lines(alog, n)
        check(all(x["error"] == "prefill_header_malformed" and x["status"] == 400 for x in ls), repr(ls[0]), r)
        # A list: its first member, as llm-d's sidecar reads it.
        st, _, out = ask(r, " %s , 10.0.0.1:1" % addr(ps[1]))
        check(st == 200 and served(ps) == [0, 1], "list: %d %r %s" % (st, served(ps), out[:300]), r)
        stop_clean(r)  # exit 0, no sanitizer report
    finally:
        pdtest.stop_all()


def scenario_not_in_pool():
    """An address that is not a prefill of the pool (a third pdsim that listens but is not configured, the
    decode itself, another port of a prefill's host): 403, and that pdsim receives nothing."""
    ps, d, other = [sim("prefill"), sim("prefill")], sim("decode"), sim("prefill")
    fd, alog = tempfile.mkstemp(prefix="pdtest-sidecar-", suffix=".log")
    os.close(fd)
    r = sidecar(ps, d, alog=alog)
    try:
        refused = [addr(other), addr(d), "127.0.0.1:%d" % other.ports["bport"], "localhost:%d" % ps[0].port,
                   "[::1]:%d" % ps[0].port, "127.0.0.2:%d" % ps[0].port]
        for v in refused:
            st, _, out = ask(r, v)
            check(st == 403, "%r: %d %s" % (v, st, out[:300]), r)
            e = json.loads(out)["error"]
            check(e["type"] == "permission_error" and e["code"] == 403 and HDR in e["message"], out, r)
        for v in (addr(other), addr(other).replace("127.0.0.1", "0127.0.0.1")):
            st, _, _ = ask(r, v, stream=True, route="/v1/chat/completions")
            check(st in (400, 403), "%r streamed: %d" % (v, st), r)
        check(stats(other)["requests"] == 0, "the unlisted pdsim was called: %r" % stats(other), r)
        check(served(ps) + served([d]) == [0, 0, 0], "a worker was called", r)
        n = len(refused)
        metrics_when(r, lambda t: outcome(t, "not_in_pool") >= n, "%d not_in_pool" % n)
        ls = lines(alog, n)
        check(all(x["error"] == "prefill_not_in_pool" and x["status"] == 403 for x in ls), repr(ls[0]), r)
        # The same address written another way is the same worker (IPv4 here; IPv6 compares as addresses).
        st, _, out = ask(r, "127.0.0.1:0%d" % ps[1].port)
        check(st == 200 and served(ps) == [0, 1], "%d %r %s" % (st, served(ps), out[:300]), r)
        stop_clean(r)  # exit 0, no sanitizer report
    finally:
        pdtest.stop_all()


def scenario_dead_named():
    """The named prefill is down (its health checks failed): 503 with Retry-After at once (under 1 s), no
    other prefill called; counted as unhealthy. The other prefill named still serves."""
    ps, d = [sim("prefill"), sim("prefill")], sim("decode")
    fd, alog = tempfile.mkstemp(prefix="pdtest-sidecar-", suffix=".log")
    os.close(fd)
    r = sidecar(ps, d, "sglang", "--health-interval-ms", "100", alog=alog)
    try:
        st, _, out = ask(r, addr(ps[0]))
        check(st == 200, "%d %s" % (st, out[:300]), r)
        # The client's answer can come before the prefill leg reached the prefill (the decode answers
        # first): the prefill is killed once it has the request, so that the leg never meets a refused
        # connection.
        pdtest.poll_until(lambda: stats(ps[0])["requests"] == 1, 5, "the prefill leg to arrive")
        ps[0].proc.kill()
        ps[0].proc.wait()
        url = "http://%s" % addr(ps[0])
        metrics_when(r, lambda t: metric_value(t, "pdr_worker_healthy", role="prefill", url=url) == 0,
                     "the killed prefill unhealthy")
        for stream in (False, True):
            t0 = time.monotonic()
            st, h, out = ask(r, addr(ps[0]), stream)
            dt = time.monotonic() - t0
            check(st == 503 and h.get("retry-after") == "1" and dt < 1.0,
                  "stream=%s: %d in %.3fs %r %s" % (stream, st, dt, h, out[:300]), r)
            check(HDR in json.loads(out)["error"]["message"], out, r)
        check(stats(ps[1])["requests"] == 0, "the other prefill was called", r)
        m = metrics_when(r, lambda t: outcome(t, "unhealthy") == 2, "2 unhealthy")
        check(metric_value(m, "pdr_upstream_errors_total", role="prefill", cause="connect") == 0, "connected", r)
        ls = lines(alog, 3)[1:]
        check(all(x["prefill_header"] == "unhealthy" and x["error"] == "prefill_header_unhealthy" and
                  x["status"] == 503 and x["prefill"] is None for x in ls), repr(ls), r)
        st, _, out = ask(r, addr(ps[1]))
        check(st == 200 and stats(ps[1])["requests"] == 1, "%d %s" % (st, out[:300]), r)
        stop_clean(r)  # exit 0, no sanitizer report
    finally:
        pdtest.stop_all()


def scenario_named_fails():
    """The named prefill fails (500): the retry's prefill is the policy's, avoiding it: the client gets 200
    from the other prefill, the access log says 2 attempts, the header used and the retried failure."""
    ps, d = [sim("prefill"), sim("prefill")], sim("decode")
    fd, alog = tempfile.mkstemp(prefix="pdtest-sidecar-", suffix=".log")
    os.close(fd)
    r = sidecar(ps, d, "vllm", "--retry-initial-backoff-ms", "1", alog=alog)
    try:
        request(ps[0].port, "POST", "/pdsim/fault", {"fail_status": 500})
        st, _, out = ask(r, addr(ps[0]))
        check(st == 200, "%d %s" % (st, out[:300]), r)
        check(served(ps) == [1, 1], "the named prefill first, then the other: %r" % served(ps), r)
        x = lines(alog, 1)[0]
        check(x["attempts"] == 2 and x["prefill_header"] == "used" and x["retry_error"] is not None and
              x["prefill"] == "http://%s" % addr(ps[1]), repr(x), r)
        stop_clean(r)  # exit 0, no sanitizer report
    finally:
        pdtest.stop_all()


def scenario_draining_named():
    """The named prefill drains (admin API): the policy picks another prefill of the pool (no client error
    for an operator's drain), counted as draining and as the sidecar_draining fall-back."""
    ps, d = [sim("prefill"), sim("prefill")], sim("decode")
    fd, alog = tempfile.mkstemp(prefix="pdtest-sidecar-", suffix=".log")
    os.close(fd)
    r = sidecar(ps, d, alog=alog)
    try:
        st, _, out = request(r.ports["admin"], "POST", "/admin/v1/workers/prefill-0/drain")
        check(st in (200, 202), "drain: %d %s" % (st, out), r)
        for _ in range(3):
            st, _, out = ask(r, addr(ps[0]))
            check(st == 200, "%d %s" % (st, out[:300]), r)
        check(served(ps) == [0, 3], "a draining prefill was used: %r" % served(ps), r)
        m = metrics_when(r, lambda t: outcome(t, "draining") == 3, "3 draining")
        check(metric_value(m, "pdr_fallbacks_total", reason="sidecar_draining") == 3, "fall-back count", r)
        ls = lines(alog, 3)
        check(all(x["prefill_header"] == "draining" and x["prefill"] == "http://%s" % addr(ps[1]) for x in ls),
              repr(ls), r)
        stop_clean(r)  # exit 0, no sanitizer report
    finally:
        pdtest.stop_all()


def scenario_discovered():
    """Prefills from DNS discovery (dnsmasq; skipped without it) are the allowlist, and it follows them: a
    discovered prefill named serves, a listening pdsim that DNS does not list gets nothing (403); once DNS
    lists it and drops another, the first is named and serves and the dropped one is refused."""
    from test_discovery import sim_at, sim_requests, start_dnsmasq, workers
    port, bport = pdtest.free_port(), pdtest.free_port()
    hosts_path = os.path.join(tempfile.mkdtemp(prefix="pdrouter-dns-"), "hosts")

    def write_hosts(addrs):
        with open(hosts_path + ".new", "w") as f:
            f.write("".join("%s prefill.test\n" % a for a in addrs))
        os.replace(hosts_path + ".new", hosts_path)

    def names():
        return sorted(w["name"] for w in workers(r, "prefill"))

    write_hosts(["127.0.0.2", "127.0.0.3"])
    dns, dns_port = start_dnsmasq(hosts_path)
    try:
        for a in ("127.0.0.2", "127.0.0.3", "127.0.0.4"):
            sim_at(a, port, bport)
        d = sim("decode")
        cfg = ("sidecar: { enabled: true }\nworkers:\n  decode:\n    - { url: http://127.0.0.1:%d }\n"
               "discovery:\n  dns:\n    resolver: 127.0.0.1:%d\n    interval_ms: 100\n"
               "    prefill: { name: prefill.test, port: %d, bootstrap_port: %d }" % (d.port, dns_port, port, bport))
        r = router([], [], config=cfg)
        pdtest.poll_until(lambda: names() == ["127.0.0.2", "127.0.0.3"], 5, "the discovered prefills")
        st, _, out = ask(r, "127.0.0.3:%d" % port)
        check(st == 200, "%d %s" % (st, out[:300]), r)
        check([sim_requests(a, port) for a in ("127.0.0.2", "127.0.0.3")] == [0, 1], "the named prefill", r)
        st, _, _ = ask(r, "127.0.0.4:%d" % port)
        check(st == 403 and sim_requests("127.0.0.4", port) == 0, "an address DNS does not list: %d" % st, r)
        write_hosts(["127.0.0.3", "127.0.0.4"])
        dns.send_signal(signal.SIGHUP)  # dnsmasq re-reads --addn-hosts
        pdtest.poll_until(lambda: names() == ["127.0.0.3", "127.0.0.4"], 5, "the new DNS answer")
        st, _, out = ask(r, "127.0.0.4:%d" % port)
        check(st == 200 and sim_requests("127.0.0.4", port) == 1, "%d %s" % (st, out[:300]), r)
        st, _, _ = ask(r, "127.0.0.2:%d" % port)
        check(st == 403 and sim_requests("127.0.0.2", port) == 0, "a dropped address: %d" % st, r)
        stop_clean(r)  # exit 0, no sanitizer report
    finally:
        dns.kill()
        dns.wait()
        pdtest.stop_all()


def scenario_config():
    """--sidecar needs exactly one decode (the local engine), no decode discovery and no pools: exit 2 with
    the reason; a header name that is not lower-case token characters is refused too."""
    exe = pdtest.binary("pdrouter")
    cases = [
        (["--sidecar", "--prefill", "http://127.0.0.1:1", "--decode", "http://127.0.0.1:2", "--decode",
          "http://127.0.0.1:3"], "exactly one decode worker"),
    ]
    for argv, want in cases:
        out = subprocess.run([exe] + argv, capture_output=True, text=True, timeout=10)
        check(out.returncode == 2 and want in out.stderr, "%r: %d %s" % (argv, out.returncode, out.stderr))
    fd, path = tempfile.mkstemp(prefix="pdtest-sidecar-", suffix=".yaml")
    with os.fdopen(fd, "w") as f:
        f.write("sidecar: { enabled: true }\nworkers:\n  prefill: [{ url: http://127.0.0.1:1 }]\n"
                "discovery:\n  dns:\n    decode: { name: decode.example, port: 8000 }\n")
    out = subprocess.run([exe, "--check-config", path], capture_output=True, text=True, timeout=10)
    check(out.returncode == 2 and "not discovered" in out.stderr, "%d %s" % (out.returncode, out.stderr))
    with open(path, "w") as f:
        f.write("sidecar: { enabled: true }\nworkers:\n  prefill: [{ url: http://127.0.0.1:1 }]\n")
    out = subprocess.run([exe, "--check-config", path], capture_output=True, text=True, timeout=10)
    check(out.returncode == 2 and "decode worker" in out.stderr, "%d %s" % (out.returncode, out.stderr))
    with open(path, "w") as f:
        f.write("sidecar: { enabled: true, prefill_header: X-Prefill }\nworkers:\n"
                "  prefill: [{ url: http://127.0.0.1:1 }]\n  decode: [{ url: http://127.0.0.1:2 }]\n")
    out = subprocess.run([exe, "--check-config", path], capture_output=True, text=True, timeout=10)
    check(out.returncode == 2 and "sidecar.prefill_header" in out.stderr, "%d %s" % (out.returncode, out.stderr))
    with open(path, "w") as f:
        f.write("sidecar: { enabled: true, prefill_header: x-prefill }\nworkers:\n"
                "  prefill: [{ url: http://127.0.0.1:1 }]\n  decode: [{ url: http://127.0.0.1:2 }]\n")
    out = subprocess.run([exe, "--check-config", path], capture_output=True, text=True, timeout=10)
    check(out.returncode == 0, "%d %s" % (out.returncode, out.stderr))
    os.unlink(path)


if __name__ == "__main__":
    pdtest.run_scenario(globals())
