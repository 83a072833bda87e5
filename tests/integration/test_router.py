#!/usr/bin/env python3
"""Integration tests of pdrouter with real pdsim workers on loopback (real HTTP, real KV bytes).

Usage: test_router.py SCENARIO   (one of the functions named scenario_*; ctest runs each separately)
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check, request, request_json, sse_events  # noqa: E402

H = "127.0.0.1"


def sim(role, *extra):
    argv = ["pdsim", "--role", role, "--port", "{port}"]
    if role == "prefill":
        argv += ["--bootstrap-port", "{bport}"]
    return pdtest.start(argv + list(extra), name="pdsim-%s" % role)


def router(prefills, decodes, *extra, config=None, access_log=None, ready=True):
    """Starts pdrouter in front of the given pdsim processes (flags, or a YAML file when config is a
    dict of extra top-level YAML text). The admin listener gets a free port (r.ports["admin"]) so that
    parallel tests never meet on the default 8001; "{admin}" in config text is that port.
    Without a --drain-grace-ms in extra (or a lifecycle: section), the router gets --drain-grace-ms 0 so
    that stopping it (SIGTERM) does not wait out the default 5 s grace."""
    if "--drain-grace-ms" not in extra and (config is None or "lifecycle:" not in config):
        extra = ("--drain-grace-ms", "0") + tuple(extra)
    if config is not None:
        lines = ["listen: { host: 127.0.0.1, port: {port} }"]
        if prefills or decodes:
            lines += ["workers:", "  prefill:"]
            lines += ["    - { url: http://127.0.0.1:%d, bootstrap_port: %d }" % (p.port, p.ports["bport"])
                      for p in prefills]
            lines += ["  decode:"] + ["    - { url: http://127.0.0.1:%d }" % d.port for d in decodes]
        aport = pdtest.free_port()
        if "admin:" not in config:
            lines += ["admin: { host: 127.0.0.1, port: {admin} }"]
        lines += [config]
        port = pdtest.free_port()
        fd, path = tempfile.mkstemp(prefix="pdrouter-", suffix=".yaml")
        with os.fdopen(fd, "w") as f:
            f.write("\n".join(lines).replace("{port}", str(port)).replace("{admin}", str(aport)) + "\n")
        # The port is chosen here and written into the file: start the process by hand.
        args = [pdtest.binary("pdrouter"), "--config", path] + list(extra)
        fd, log_path = tempfile.mkstemp(prefix="pdtest-pdrouter-", suffix=".log")
        with os.fdopen(fd, "w") as log:
            proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        r = pdtest.Proc("pdrouter", proc, {"port": port, "admin": aport}, log_path)
        r.config_path = path
        pdtest._procs.append(r)
        pdtest.poll_until(lambda: _answers(r, "/readiness" if ready else "/health", 200 if ready else None), 10,
                          "pdrouter to be ready")
        return r
    argv = ["pdrouter", "--pd-disaggregation", "--host", H, "--port", "{port}"]
    for p in prefills:
        argv += ["--prefill", "http://127.0.0.1:%d" % p.port, str(p.ports["bport"])]
    for d in decodes:
        argv += ["--decode", "http://127.0.0.1:%d" % d.port]
    if access_log is not None:
        argv += ["--access-log", access_log]
    else:
        argv += ["--access-log", "off"]
    if "--admin-port" not in extra:
        argv += ["--admin-port", "{admin}"]
    return pdtest.start(argv + list(extra), name="pdrouter", health_path="/readiness" if ready else "/health",
                        healthy=200 if ready else None)


def _answers(p, path, want):
    if p.proc.poll() is not None:
        raise AssertionError("pdrouter exited with %s\n%s" % (p.proc.returncode, p.log_tail()))
    try:
        st, _, _ = request(p.port, "GET", path, timeout=1.0)
    except OSError:
        return False
    return want is None or st == want


def stats(p):
    return request_json(p.port, "GET", "/pdsim/stats")


def metrics(r):
    st, _, body = request(r.port, "GET", "/metrics")
    assert st == 200
    return body.decode()


def metrics_when(r, pred, what):
    """The first /metrics text for which pred(text) holds. A request is counted when h2o disposes of it,
    which can follow the client's receipt of the last byte by a moment (and another loop may answer the
    scrape), so a test waits for the count instead of reading it once."""
    def scrape():
        m = metrics(r)
        return m if pred(m) else None
    return pdtest.poll_until(scrape, 5, what)


METRIC_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
METRIC_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def metric_value(text, name, **labels):
    """The value of the series `name` with exactly these labels (in any order). The per-worker series' `pool`
    label may be left out: it then matches any pool."""
    for line in text.splitlines():
        m = METRIC_LINE.match(line)
        if m is None or m.group(1) != name:
            continue
        have = dict(METRIC_LABEL.findall(m.group(2) or ""))
        if "pool" not in labels and name.startswith("pdr_worker_"):
            have.pop("pool", None)
        if have == {k: str(v) for k, v in labels.items()}:
            return float(m.group(3))
    return None


def curl(port, path, body, *opts, version=False):
    """POST through the curl command line tool; returns (status, body text[, HTTP version])."""
    out = subprocess.run(["curl", "-sS", "-N", "-o", "-", "-w", "\n%{http_code} %{http_version}", *opts, "-H",
                          "Content-Type: application/json", "--data-binary", json.dumps(body),
                          "http://127.0.0.1:%d%s" % (port, path)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    text, _, tail = out.stdout.rpartition("\n")
    code, ver = tail.split()
    return (int(code), text, ver) if version else (int(code), text)


def texts(route, body, payload, stream):
    """The generated text of a response, whatever the route and mode."""
    if stream:
        # A usage chunk (stream_options.include_usage) has no choices and adds no text.
        evs = [e for e in sse_events(payload) if e != "[DONE]" and e.get("choices") != []]
        if route == "/generate":
            return evs[-1]["text"]
        if route == "/v1/completions":
            return "".join(e["choices"][0]["text"] for e in evs)
        return "".join(e["choices"][0]["delta"].get("content") or "" for e in evs)
    j = json.loads(payload)
    if route == "/generate":
        return j["text"] if isinstance(j, dict) else [x["text"] for x in j]
    if route == "/v1/completions":
        return [c["text"] for c in j["choices"]]
    return [c["message"]["content"] for c in j["choices"]]


BODIES = {
    "/generate": {"text": "the cat sat on the mat and looked at the dog", "sampling_params": {"max_new_tokens": 12}},
    "/v1/completions": {"model": "pdsim", "prompt": "once upon a time there was a router", "max_tokens": 10},
    "/v1/chat/completions": {"model": "pdsim", "messages": [{"role": "user", "content": "hello there router"}],
                             "max_tokens": 9},
}


def scenario_routes():
    """All three routes, streaming and not, via curl: disaggregated output == monolithic output; same
    room on both legs and a new room per request; the client's bootstrap fields are overwritten;
    HTTP/2; logprob merge; batch; /v1/models; access log; metrics."""
    p, d, both = sim("prefill"), sim("decode"), sim("both")
    alog = tempfile.mktemp(prefix="pdrouter-access-", suffix=".log")
    r = router([p], [d], access_log=alog)
    try:
        rooms = set()
        for route, body in BODIES.items():
            for stream in (False, True):
                b = dict(body, stream=stream)
                st, out = curl(r.port, route, b)
                check(st == 200, "%s stream=%s: status %d %s" % (route, stream, st, out[:300]), r, p, d)
                st2, ref = curl(both.port, route, b)
                assert st2 == 200
                check(texts(route, b, out, stream) == texts(route, b, ref, stream),
                      "%s stream=%s: disaggregated %r != monolithic %r" % (route, stream, out[:200], ref[:200]))
                lp, ld = stats(p)["last"][-1], stats(d)["last"][-1]
                check(lp["room"] == ld["room"], "rooms differ: %r %r" % (lp, ld))
                check(lp["bootstrap_host"] == "127.0.0.1" and ld["bootstrap_port"] == p.ports["bport"], repr(ld))
                rooms.add(lp["room"])
        check(len(rooms) == 6, "each request needs its own room: %r" % rooms)
        check(all(0 <= x < 2**63 for x in rooms), repr(rooms))
        check(stats(d)["kv_bytes_received"] > 0, "no KV bytes moved")

        # A client never chooses where KV goes.
        evil = dict(BODIES["/generate"], bootstrap_host="10.66.66.66", bootstrap_port=1, bootstrap_room=7)
        st, out = curl(r.port, "/generate", evil)
        assert st == 200, out
        lp, ld = stats(p)["last"][-1], stats(d)["last"][-1]
        check(ld["bootstrap_host"] == "127.0.0.1" and ld["bootstrap_port"] == p.ports["bport"], repr(ld))
        check(ld["room"] != 7 and ld["room"] == lp["room"], repr((lp, ld)))

        # HTTP/2 with prior knowledge, streaming and not.
        for stream in (False, True):
            b = dict(BODIES["/v1/chat/completions"], stream=stream)
            st, out, ver = curl(r.port, "/v1/chat/completions", b, "--http2-prior-knowledge", version=True)
            check(st == 200, "h2: %d %s" % (st, out[:200]))
            check(ver == "2", "not served over HTTP/2: %r" % ver)
            _, ref = curl(both.port, "/v1/chat/completions", b)
            check(texts("/v1/chat/completions", b, out, stream) == texts("/v1/chat/completions", b, ref, stream), "h2 text")

        # Logprobs: the prefill's input logprobs go in front of the decode's (which are empty).
        b = dict(BODIES["/generate"], return_logprob=True)
        j = request_json(r.port, "POST", "/generate", b)
        ref = request_json(both.port, "POST", "/generate", b)
        got = j["meta_info"]["input_token_logprobs"]
        check(len(got) == ref["meta_info"]["prompt_tokens"] and got == ref["meta_info"]["input_token_logprobs"],
              "merged logprobs %r != %r" % (got[:3], ref["meta_info"]["input_token_logprobs"][:3]))
        st, _, raw = request(r.port, "POST", "/generate", dict(b, stream=True))
        evs = [e for e in sse_events(raw) if e != "[DONE]"]
        check(st == 200 and all(e["meta_info"]["input_token_logprobs"] == got for e in evs), "streamed merge")

        # Batch: one room per item, arrays on both legs, each item's text as monolithic.
        b = {"text": ["first prompt here", "and a second one"], "sampling_params": {"max_new_tokens": 5}}
        j = request_json(r.port, "POST", "/generate", b)
        ref = request_json(both.port, "POST", "/generate", b)
        check([x["text"] for x in j] == [x["text"] for x in ref], "batch texts %r %r" % (j, ref))
        lp = stats(p)["last"][-1]
        check(isinstance(lp["room"], list) and len(set(lp["room"])) == 2, repr(lp))
        check(lp["bootstrap_host"] == ["127.0.0.1"] * 2, repr(lp))

        j = request_json(r.port, "GET", "/v1/models")
        check(j["data"][0]["id"] == "pdsim", repr(j))

        # The access log names the request, both workers, the room and the timings.
        st, _, _ = request(r.port, "POST", "/generate", BODIES["/generate"], headers={"X-Request-Id": "req-abc.1"})
        assert st == 200
        room = stats(p)["last"][-1]["room"]

        def logged():
            try:
                with open(alog) as f:
                    return [json.loads(l) for l in f if '"req-abc.1"' in l]
            except OSError:
                return None
        line = pdtest.poll_until(logged, 5, "the access log line")[0]
        check(line["status"] == 200 and line["room"] == room, repr(line))
        check(line["prefill"] == "http://127.0.0.1:%d" % p.port and line["decode"] == "http://127.0.0.1:%d" % d.port,
              repr(line))
        check(0 < line["ttfb_ms"] <= line["total_ms"] and line["bytes_in"] > 0 and line["bytes_out"] > 0, repr(line))

        m = metrics(r)
        check(metric_value(m, "pdr_requests_total", route="generate", code="200") >= 4, m[:2000])
        check(metric_value(m, "pdr_worker_healthy", role="prefill", url="http://127.0.0.1:%d" % p.port) == 1, m)
        check("pdr_time_to_first_byte_seconds_bucket" in m and "pdr_request_duration_seconds_count" in m, m)
    finally:
        pdtest.stop_all()


def scenario_errors():
    """400 for malformed JSON and wrong types, 413 above limits.max_body_bytes, 404, 405, and a worker's
    own 4xx relayed."""
    p, d = sim("prefill"), sim("decode")
    r = router([p], [d], config="limits: { max_body_bytes: 4096 }")
    try:
        for body, needle in [("{not json", "malformed JSON"), ("[1]", "JSON object"),
                             ('{"text": 5}', "'text'"), ('{"text":"a","stream":"yes"}', "'stream'"),
                             ('{"text":"a","sampling_params":3}', "'sampling_params'")]:
            st, h, out = request(r.port, "POST", "/generate", body)
            j = json.loads(out)
            check(st == 400 and needle in j["error"]["message"] and j["error"]["code"] == 400, "%s -> %d %s" % (body, st, out))
            check(h["content-type"] == "application/json", repr(h))
        # Bodies the engine would read differently from the router (two prompt forms, a batch shape it
        # would not compute) or could not run (a non-string role, a number that reads as infinity).
        for path, body, needle in [
                ("/generate", '{"text": "a", "input_ids": [[1], [2]]}',
                 "give only one of 'text', 'input_ids' or 'input_embeds' (this request has 'text' and 'input_ids')"),
                ("/generate", '{"input_ids": [[1], []]}', "'input_ids' must be a non-empty array"),
                ("/generate", '{"text": "a", "sampling_params": {"temperature": 1e999}}', "number out of range"),
                ("/v1/completions", '{"prompt": "x", "n": 0}', "'n' must be an integer between 1 and 128"),
                ("/v1/completions", '{"prompt": "x", "n": 2.5}', "'n' must be an integer between 1 and 128"),
                ("/v1/chat/completions", '{"messages": [{"role": 1, "content": "x"}]}', "'messages[0].role' must be a string"),
                ("/v1/chat/completions", '{"messages": [{"role": "user", "content": 5}]}', "'messages[0].content' must be"),
                ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "x"}], "top_p": -1e400}',
                 "number out of range")]:
            st, h, out = request(r.port, "POST", path, body)
            j = json.loads(out)
            check(st == 400 and needle in j["error"]["message"] and j["error"]["type"] == "invalid_request_error"
                  and j["error"]["code"] == 400, "%s %s -> %d %s" % (path, body, st, out))
        st, _, out = request(r.port, "POST", "/v1/chat/completions", '{"messages": "hi"}')
        check(st == 400 and b"'messages'" in out, out)
        st, _, out = request(r.port, "POST", "/v1/completions", '{"prompt": "x", "max_tokens": "ten"}')
        check(st == 400 and b"'max_tokens'" in out, out)
        big = json.dumps({"text": "x" * 5000})
        st, _, out = request(r.port, "POST", "/generate", big)
        check(st == 413, "oversized body: %d %s" % (st, out[:200]))
        st, _, out = request(r.port, "GET", "/nope")
        check(st == 404 and json.loads(out)["error"]["code"] == 404, out)
        st, _, _ = request(r.port, "GET", "/generate")
        check(st == 405, "GET /generate: %d" % st)
        # Nothing reached the workers for any of these.
        check(stats(p)["requests"] == 0 and stats(d)["requests"] == 0, "a bad request reached a worker")
        # A worker's client error (both legs answer 400 without a room... the router always sets one,
        # so make the workers fail on purpose with a 4xx knob) is relayed with its status.
        request_json(p.port, "POST", "/pdsim/fault", {"fail_status": 422})
        request_json(d.port, "POST", "/pdsim/fault", {"fail_status": 422})
        st, _, out = request(r.port, "POST", "/generate", BODIES["/generate"])
        check(st == 422 and b"error" in out, "worker 4xx relayed: %d %s" % (st, out))
        # A second router on the same port is refused (SO_REUSEPORT alone would let it share the port).
        r2 = pdtest.start(["pdrouter", "--pd-disaggregation", "--host", H, "--port", str(r.port), "--prefill",
                           "http://127.0.0.1:%d" % p.port, str(p.ports["bport"]), "--decode",
                           "http://127.0.0.1:%d" % d.port, "--admin-port", "0"], name="pdrouter-2", health_path=None)
        check(r2.wait_exit(10) != 0 and "Address already in use" in open(r2.log_path).read(), "double bind", r2)
        check(r.alive(), "router died", r)
    finally:
        pdtest.stop_all()


def scenario_policy():
    """2 prefills + 2 decodes: round robin spreads evenly; least_load uses both decodes."""
    ps = [sim("prefill"), sim("prefill")]
    ds = [sim("decode"), sim("decode")]
    r = router(ps, ds, "--prefill-policy", "round_robin", "--decode-policy", "round_robin")
    try:
        for _ in range(8):
            request_json(r.port, "POST", "/generate", BODIES["/generate"])
        cp = [stats(p)["requests"] for p in ps]
        cd = [stats(d)["requests"] for d in ds]
        check(cp == [4, 4] and cd == [4, 4], "round robin spread: prefill %r decode %r" % (cp, cd))
        r.stop()
        r = router(ps, ds, "--policy", "least_load")
        # Slow requests (12 tokens, 2.4 s), each started once the one before is on a decode: every pick sees
        # the loads of those in flight, and with two decodes power of two choices compares both, so the idle
        # or less loaded one wins (a tie either way): the requests alternate.
        request_json(ds[0].port, "POST", "/pdsim/fault", {"decode_us_per_token": 200000})
        request_json(ds[1].port, "POST", "/pdsim/fault", {"decode_us_per_token": 200000})
        before = [stats(d)["requests"] for d in ds]

        def on_decodes():
            m = metrics(r)
            return sum(metric_value(m, "pdr_worker_inflight_requests", role="decode",
                                    url="http://127.0.0.1:%d" % d.port) or 0 for d in ds)
        threads = [threading.Thread(target=lambda: request_json(r.port, "POST", "/generate", BODIES["/generate"],
                                                                timeout=30))
                   for _ in range(8)]
        for k, t in enumerate(threads):
            t.start()
            pdtest.poll_until(lambda: on_decodes() >= k + 1, 10, "request %d on a decode" % k)
        for t in threads:
            t.join()
        after = [stats(d)["requests"] - b for d, b in zip(ds, before)]
        check(sum(after) == 8 and min(after) >= 2, "least_load spread: %r" % after)
    finally:
        pdtest.stop_all()


def scenario_conn_limit():
    """limits.max_connections_per_worker: 12 concurrent slow requests through one loop open at most 2
    connections to the decode worker (counted with ss on the router's side), and all 12 succeed."""
    ps = [sim("prefill")]
    ds = [sim("decode")]
    # One loop (its share is the whole limit); health checks once at start only.
    r = router(ps, ds, config="threads: 1\nlimits: { max_connections_per_worker: 2 }\n"
                               "health: { interval_ms: 600000 }")
    try:
        # Probes (health checks, identity reads) are not held back by the limit: start once the two
        # workers' identities are read, so that no probe's connection overlaps the requests.
        metrics_when(r, lambda m: (metric_value(m, "pdr_worker_identity_reads_total", result="ok") or 0) >= 2,
                     "both identities read")
        request_json(ds[0].port, "POST", "/pdsim/fault", {"decode_us_per_token": 20000})
        statuses = []

        def one():
            st, _, _ = request(r.port, "POST", "/generate", BODIES["/generate"], timeout=30)
            statuses.append(st)
        threads = [threading.Thread(target=one) for _ in range(12)]
        for t in threads:
            t.start()
        peak = 0
        while any(t.is_alive() for t in threads):
            out = subprocess.run(["ss", "-Htn", "state", "established", "( dport = :%d )" % ds[0].port],
                                 capture_output=True, text=True).stdout
            peak = max(peak, len([ln for ln in out.splitlines() if ln.strip()]))
            time.sleep(0.01)  # sampling, not synchronization: the threads are joined below
        for t in threads:
            t.join()
        check(statuses == [200] * 12, "statuses %r" % statuses, r)
        check(peak == 2, "connections to the decode worker at once: %d, limit 2" % peak, r)
    finally:
        pdtest.stop_all()


def scenario_prefill_killed():
    """kill -9 one of two prefills: every following request succeeds on the other, none over 1 s."""
    ps = [sim("prefill"), sim("prefill")]
    d = sim("decode")
    r = router(ps, [d], "--prefill-policy", "round_robin", "--health-interval-ms", "60000")
    try:
        request_json(r.port, "POST", "/generate", BODIES["/generate"])
        ps[0].proc.kill()
        ps[0].proc.wait()
        worst = 0
        for i in range(10):
            t0 = time.monotonic()
            st, _, out = request(r.port, "POST", "/v1/completions", BODIES["/v1/completions"])
            dt = time.monotonic() - t0
            worst = max(worst, dt)
            check(st == 200, "request %d after kill: %d %s" % (i, st, out[:300]), r)
        check(worst < 1.0, "slowest request after the kill took %.3fs" % worst)
        m = metrics(r)
        url = "http://127.0.0.1:%d" % ps[0].port
        check(metric_value(m, "pdr_worker_healthy", role="prefill", url=url) == 0, "dead prefill still healthy")
        # Health checks run once a minute here: the connect error took it out ("ejected", not "unhealthy").
        check(metric_value(m, "pdr_worker_state", role="prefill", url=url, state="ejected") == 1, m[-3000:], r)
        check(metric_value(m, "pdr_upstream_errors_total", role="prefill", cause="connect") >= 1, m)
    finally:
        pdtest.stop_all()


def scenario_all_prefills_dead():
    """Every prefill dead: the first request fails fast after retries; then 503 + Retry-After < 100 ms."""
    p, d = sim("prefill"), sim("decode")
    r = router([p], [d], "--health-interval-ms", "60000")
    try:
        p.proc.kill()
        p.proc.wait()
        t0 = time.monotonic()
        st, h, out = request(r.port, "POST", "/generate", BODIES["/generate"])
        dt = time.monotonic() - t0
        # The only prefill refuses connections: 503 (it cannot be reached), not 502.
        check(st == 503 and h.get("retry-after") == "1" and dt < 1.0,
              "first request after the kill: %d in %.3fs %r %s" % (st, dt, h, out))
        check("could not be reached" in json.loads(out)["error"]["message"], out)
        # At once: the dead prefill is not tried again (no connect attempt counted), so nothing is waited
        # for. The count decides; the time bound is only far below the retries' back-off and connect waits.
        tried = metric_value(metrics(r), "pdr_upstream_errors_total", role="prefill", cause="connect")
        for _ in range(5):
            t0 = time.monotonic()
            st, h, out = request(r.port, "POST", "/generate", BODIES["/generate"])
            dt = time.monotonic() - t0
            check(st == 503 and h.get("retry-after") == "1", "%d %r %s" % (st, h, out))
            check(dt < 1.0, "503 took %.3fs" % dt)
            check(json.loads(out)["error"]["code"] == 503, out)
        check(metric_value(metrics(r), "pdr_upstream_errors_total", role="prefill", cause="connect") == tried,
              "the dead prefill was tried again", r)
        st, _, _ = request(r.port, "GET", "/readiness")
        check(st == 503, "readiness with no prefill: %d" % st)
        st, _, _ = request(r.port, "GET", "/health")
        check(st == 200, "health must stay 200 while the process serves")
    finally:
        pdtest.stop_all()


HC = "health: { interval_ms: 200, timeout_ms: 150, rise: 2, fall: 2 }"


def scenario_prefill_stopped():
    """A SIGSTOPped prefill: the request ends by first_byte_ms (504 here: it is the only prefill), the
    decode sees its leg cancelled, pdr_queued_requests counts it while it waits, health checks mark the
    prefill down, and SIGCONT brings it back."""
    p, d = sim("prefill"), sim("decode")
    r = router([p], [d], config=HC + "\ntimeouts: { first_byte_ms: 800, kv_transfer_ms: 5000 }\nretries: { max: 1 }")
    try:
        os.kill(p.proc.pid, signal.SIGSTOP)
        t0 = time.monotonic()
        result = {}
        t = threading.Thread(target=lambda: result.update(resp=request(r.port, "POST", "/generate",
                                                                        BODIES["/generate"], timeout=10)))
        t.start()
        # While it waits for the stopped prefill, the request is queued (no response byte yet).
        pdtest.poll_until(lambda: metric_value(metrics(r), "pdr_queued_requests") == 1, 5, "the queued request")
        t.join(10)
        dt = time.monotonic() - t0
        st, _, out = result["resp"]
        check(st == 504, "stopped prefill: %d %s" % (st, out), r)
        check(metric_value(metrics(r), "pdr_queued_requests") == 0, "the answered request still queued", r)
        # The next deadline (kv_transfer_ms, 5 s) is far above the upper bound: a loaded machine has room.
        check(0.75 < dt < 3.0, "ended after %.3fs, first_byte_ms is 0.8s" % dt)
        pdtest.poll_until(lambda: stats(d)["cancelled"] >= 1, 5, "the decode to see its leg cancelled")
        url = "http://127.0.0.1:%d" % p.port
        pdtest.poll_until(lambda: metric_value(metrics(r), "pdr_worker_health_checks_total", role="prefill", url=url,
                                               result="failed") >= 2, 5, "health checks to fail")
        check(metric_value(metrics(r), "pdr_worker_healthy", role="prefill", url=url) == 0, "not marked down")
        st, _, _ = request(r.port, "GET", "/readiness")
        check(st == 503, "readiness while the only prefill is down")
        os.kill(p.proc.pid, signal.SIGCONT)
        pdtest.poll_until(lambda: request(r.port, "GET", "/readiness")[0] == 200, 5, "the prefill to rise again")
        request_json(r.port, "POST", "/generate", BODIES["/generate"])
    finally:
        try:
            os.kill(p.proc.pid, signal.SIGCONT)
        except OSError:
            pass
        pdtest.stop_all()


def scenario_prefill_stopped_retry():
    """One of two prefills SIGSTOPped: requests are retried on the other and succeed within
    first_byte_ms plus the retry."""
    ps = [sim("prefill"), sim("prefill")]
    d = sim("decode")
    r = router(ps, [d], config="policy: { prefill: round_robin, decode: round_robin }\n" +
               "health: { interval_ms: 60000 }\ntimeouts: { first_byte_ms: 600 }")
    try:
        os.kill(ps[0].proc.pid, signal.SIGSTOP)
        for i in range(4):
            t0 = time.monotonic()
            st, _, out = request(r.port, "POST", "/generate", BODIES["/generate"])
            dt = time.monotonic() - t0
            # first_byte_ms (0.6 s) and a retry; without the deadline a request would wait for the client's
            # 10 s timeout, so 3 s leaves a loaded machine room.
            check(st == 200 and dt < 3.0, "request %d: %d in %.3fs %s" % (i, st, dt, out), r)
        check(metric_value(metrics(r), "pdr_retries_total") >= 1, "no retry counted")
    finally:
        os.kill(ps[0].proc.pid, signal.SIGCONT)
        pdtest.stop_all()


def scenario_disconnect():
    """A client that leaves mid-stream or while waiting: the router cancels both legs."""
    p, d = sim("prefill"), sim("decode", "--decode-us-per-token", "50000")
    r = router([p], [d])
    try:
        # Mid-stream: the decode's stream is cut.
        conn, resp = pdtest.stream_request(r.port, "POST", "/generate", dict(BODIES["/generate"], stream=True,
                                                                             sampling_params={"max_new_tokens": 200}))
        check(resp.status == 200, "status %d" % resp.status)
        first = resp.readline()
        check(first.startswith(b"data:"), repr(first))
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
        pdtest.poll_until(lambda: stats(d)["cancelled"] >= 1, 5, "the decode to see the cancel", )
        # While waiting for the first byte (the prefill's KV stalls): both legs are closed.
        request_json(p.port, "POST", "/pdsim/fault", {"stall_kv": True})
        s = socket.create_connection((H, r.port))
        body = json.dumps(BODIES["/generate"]).encode()
        s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                  % len(body) + body)
        pdtest.poll_until(lambda: stats(p)["inflight"] >= 1 and stats(d)["inflight"] >= 1, 5, "both legs to start")
        s.close()
        pdtest.poll_until(lambda: stats(p)["cancelled"] >= 1 and stats(d)["cancelled"] >= 2, 5,
                          "both workers to see the cancel")
        check(metric_value(metrics(r), "pdr_client_aborts_total") >= 2, "client aborts not counted")
        check(r.alive(), "router died", r)
    finally:
        pdtest.stop_all()


def scenario_decode_reset():
    """A decode that resets mid-stream: the client gets an SSE error event and a clean end."""
    p, d = sim("prefill"), sim("decode", "--reset-after-tokens", "3", "--decode-us-per-token", "40000")
    r = router([p], [d])
    try:
        st, _, raw = request(r.port, "POST", "/generate", dict(BODIES["/generate"], stream=True))
        evs = sse_events(raw)
        check(st == 200 and any(isinstance(e, dict) and "error" in e for e in evs), "no error event: %r" % raw[-300:])
        check(r.alive(), "router died", r)
    finally:
        pdtest.stop_all()


def scenario_check_config():
    """--check-config: 0 for a valid file, 2 with file:line:col for a broken one."""
    good = tempfile.mktemp(suffix=".yaml")
    with open(good, "w") as f:
        f.write("workers:\n  prefill:\n    - { url: http://127.0.0.1:1, bootstrap_port: 2 }\n"
                "  decode:\n    - { url: http://127.0.0.1:3 }\n")
    bad = tempfile.mktemp(suffix=".yaml")
    with open(bad, "w") as f:
        f.write("workers:\n  prefill:\n    - { url: http://127.0.0.1:1 }\n  decode:\n    - { url: http://127.0.0.1:3 }\n"
                "timeouts:\n  first_byte_ms: fast\n")
    exe = pdtest.binary("pdrouter")
    out = subprocess.run([exe, "--check-config", good], capture_output=True, text=True)
    check(out.returncode == 0, "valid config: %d %s" % (out.returncode, out.stderr))
    out = subprocess.run([exe, "--check-config", bad], capture_output=True, text=True)
    check(out.returncode == 2 and ("%s:7:18:" % bad) in out.stderr, "broken config: %d %r" % (out.returncode, out.stderr))
    # What the router refuses at start, --check-config refuses too, at the key: protocol pdshim without
    # ticket keys. The same file given to the router stops it with the same message, before it listens.
    unsupported = tempfile.mktemp(suffix=".yaml")
    with open(unsupported, "w") as f:
        f.write("workers:\n  prefill: [ http://127.0.0.1:1 ]\n  decode: [ http://127.0.0.1:3 ]\n"
                "protocol:  pdshim\n")
    want = ("%s:4:12: protocol: protocol pdshim signs tickets: set ticket: { key_file: FILE } (or key_files)"
            % unsupported)
    out = subprocess.run([exe, "--check-config", unsupported], capture_output=True, text=True)
    check(out.returncode == 2 and want in out.stderr, "check-config pdshim: %d %r" % (out.returncode, out.stderr))
    out = subprocess.run([exe, "--config", unsupported, "--admin-port", "0", "--port", str(pdtest.free_port())],
                         capture_output=True, text=True, timeout=10)
    check(out.returncode == 2 and want in out.stderr, "start with pdshim: %d %r" % (out.returncode, out.stderr))
    # protocol: vllm: --check-config and the router agree that it runs (a bootstrap_port is accepted and
    # unused); the flag spelling too.
    vllm = tempfile.mktemp(suffix=".yaml")
    with open(vllm, "w") as f:
        f.write("workers:\n  prefill: [ { url: http://127.0.0.1:1, bootstrap_port: 2 } ]\n"
                "  decode: [ http://127.0.0.1:3 ]\nprotocol: vllm\n")
    out = subprocess.run([exe, "--check-config", vllm], capture_output=True, text=True)
    check(out.returncode == 0, "check-config vllm: %d %r" % (out.returncode, out.stderr))
    for argv in (["--config", vllm], ["--pd-disaggregation", "--prefill", "http://127.0.0.1:1", "--decode",
                                      "http://127.0.0.1:3", "--protocol", "vllm"]):
        r = pdtest.start([exe] + argv + ["--admin-port", "0", "--port", "{port}", "--drain-grace-ms", "0"],
                         name="pdrouter", health_path="/health", healthy=200)
        check(r.alive(), "the router did not start with protocol vllm", r)
        r.stop()
    out = subprocess.run([exe, "--no-such-flag"], capture_output=True, text=True)
    check(out.returncode == 2 and "no-such-flag" in out.stderr, out.stderr)
    out = subprocess.run([exe, "--version"], capture_output=True, text=True)
    check(out.returncode == 0 and out.stdout.startswith("pdrouter "), out.stdout)


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def scenario_slow_client():
    """Back-pressure: a client that stops reading a long stream does not make the router buffer it
    (the decode transfer is paused); when the client reads again every token arrives."""
    p, d = sim("prefill"), sim("decode")
    r = router([p], [d], "--threads", "1")
    try:
        tokens = 200000  # ~24 MB of SSE chunks: more than loopback socket buffers can absorb (~10 MB)
        body = dict(BODIES["/v1/completions"], stream=True, max_tokens=tokens)
        s = socket.create_connection((H, r.port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
        raw = json.dumps(body).encode()
        base = rss_kib(r.proc.pid)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(raw) + raw)
        # Wait until the decode has stopped making progress: its writes block because nobody reads.
        last = [None, 0]

        def stalled():
            st = stats(d)
            sent = st.get("tokens_sent", st.get("completed", 0))
            now = rss_kib(r.proc.pid)
            key = (st["inflight"], now)
            if key == last[0]:
                last[1] += 1
            else:
                last[0], last[1] = key, 0
            return last[1] >= 5 and st["inflight"] == 1
        pdtest.poll_until(stalled, 20, "the stream to stall behind the slow client")
        grown = rss_kib(r.proc.pid) - base
        check(grown < 4096, "router RSS grew by %d KiB while the client was not reading" % grown, r)
        # Now read everything: all tokens arrive, then [DONE].
        s.settimeout(30)
        buf = bytearray()
        while not buf.endswith(b"0\r\n\r\n"):
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            buf += chunk
        s.close()
        head, _, rest = bytes(buf).partition(b"\r\n\r\n")
        text = bytearray()
        while rest:  # undo the chunked transfer coding
            size, _, rest = rest.partition(b"\r\n")
            size = int(size, 16)
            if size == 0:
                break
            text += rest[:size]
            rest = rest[size + 2:]
        text = bytes(text)
        n = text.count(b'"text_completion"')
        check(n == tokens and b"data: [DONE]" in text, "got %d of %d chunks" % (n, tokens), r, d)
    finally:
        pdtest.stop_all()


def hist(text, name, route):
    """(count, sum) of a histogram for one route; (0, 0.0) before its first observation."""
    return (metric_value(text, name + "_count", route=route) or 0, metric_value(text, name + "_sum", route=route) or 0.0)


def scenario_metrics_latency():
    """TTFT, TPOT, end-to-end and prefill histograms and the stream event counter: a decode that spaces its
    tokens 20 ms apart, streamed (10 tokens, then [DONE]) and not."""
    p, d = sim("prefill"), sim("decode", "--decode-us-per-token", "20000")
    r = router([p], [d])
    try:
        body = {"text": "the cat sat on the mat", "sampling_params": {"max_new_tokens": 10}}
        m0 = metrics(r)
        st, _, raw = request(r.port, "POST", "/generate", dict(body, stream=True))
        evs = sse_events(raw)
        check(st == 200 and evs[-1] == "[DONE]" and len(evs) == 11, "stream: %r" % raw[-200:])
        m1 = metrics_when(r, lambda m: hist(m, "pdr_e2e_seconds", "generate")[0] >= 1, "the stream counted")
        ttft0, ttft1 = hist(m0, "pdr_ttft_seconds", "generate"), hist(m1, "pdr_ttft_seconds", "generate")
        check(ttft1[0] == ttft0[0] + 1, "ttft count %r -> %r" % (ttft0, ttft1))
        # pdsim sends token j at (j + 1) * 20 ms after it got the request: the first token is >= 20 ms in.
        check(0.019 <= ttft1[1] - ttft0[1] < 5, "ttft %r" % (ttft1[1] - ttft0[1]))
        tpot = hist(m1, "pdr_tpot_seconds", "generate")
        # Tokens 1..10 at 20 ms steps: (last - first) / 9 is 20 ms, give or take a slow machine.
        check(tpot[0] == 1 and 0.01 <= tpot[1] <= 0.2, "tpot %r" % (tpot,))
        ev0 = metric_value(m0, "pdr_stream_events_total", route="generate")
        ev1 = metric_value(m1, "pdr_stream_events_total", route="generate")
        check(ev0 == 0 and ev1 == 10, "stream events %r -> %r" % (ev0, ev1))
        e2e = hist(m1, "pdr_e2e_seconds", "generate")
        check(e2e[0] == 1 and e2e[1] >= 0.2 - 0.001 and e2e[1] >= ttft1[1], "e2e %r" % (e2e,))
        pre = hist(m1, "pdr_prefill_seconds", "generate")
        check(pre[0] == 1 and 0 < pre[1] <= e2e[1], "prefill %r" % (pre,))
        check('pdr_tpot_seconds_bucket{route="generate",le="0.02"}' in m1 and
              'pdr_ttft_seconds_bucket{route="generate",le="120"}' in m1, m1[-3000:])

        # Not streamed: e2e and ttft (the response start) count, tpot and stream events do not.
        st, _, _ = request(r.port, "POST", "/generate", body)
        check(st == 200, "status %d" % st)
        m2 = metrics_when(r, lambda m: hist(m, "pdr_e2e_seconds", "generate")[0] >= e2e[0] + 1,
                          "the non-streamed request counted")
        check(hist(m2, "pdr_ttft_seconds", "generate")[0] == ttft1[0] + 1, "non-stream ttft not counted")
        check(hist(m2, "pdr_e2e_seconds", "generate")[0] == e2e[0] + 1, "non-stream e2e not counted")
        check(hist(m2, "pdr_tpot_seconds", "generate")[0] == tpot[0], "non-stream counted in tpot")
        check(metric_value(m2, "pdr_stream_events_total", route="generate") == ev1, "non-stream events")

        # A failure (the prefill answers 4xx) counts in neither e2e nor ttft.
        st, _, _ = request(r.port, "POST", "/generate", {"text": "x", "sampling_params": {"max_new_tokens": -1}})
        m3 = metrics_when(r, lambda m: metric_value(m, "pdr_requests_total", route="generate", code=str(st)),
                          "the failed request counted")
        if st >= 400:
            check(hist(m3, "pdr_e2e_seconds", "generate")[0] == e2e[0] + 1, "failed request in e2e")
            check(hist(m3, "pdr_ttft_seconds", "generate")[0] == ttft1[0] + 1, "failed request in ttft")
        check(r.alive(), "router died", r)
    finally:
        pdtest.stop_all()


def scenario_shutdown():
    """SIGTERM: readiness fails at once while the listener still accepts, the in-flight stream
    completes, the process exits 0; a second SIGTERM during the grace ends the grace at once."""
    p, d = sim("prefill"), sim("decode", "--decode-us-per-token", "20000")
    r = router([p], [d], "--drain-grace-ms", "300")
    try:
        result = {}

        def slow():
            result["resp"] = request(r.port, "POST", "/generate", dict(BODIES["/generate"], stream=True,
                                                                        sampling_params={"max_new_tokens": 25}))
        t = threading.Thread(target=slow)
        t.start()
        pdtest.poll_until(lambda: stats(d)["inflight"] >= 1, 5, "the stream to start")
        r.proc.send_signal(signal.SIGTERM)
        pdtest.poll_until(lambda: _answers(r, "/readiness", 503), 5, "readiness 503 (listener still open)")
        t.join(10)
        st, _, raw = result["resp"]
        evs = sse_events(raw)
        check(st == 200 and evs[-1] == "[DONE]" and len(evs) == 26, "stream cut by shutdown: %r" % raw[-200:])
        check(r.wait_exit(5) == 0, "exit status", r)
        log = open(r.log_path).read()
        for phase in ("shutdown: readiness off, serving for 300 ms", "shutdown: listeners closed",
                      "shutdown: 0 requests cancelled at drain_timeout", "bye"):
            check(phase in log, "log lacks %r" % phase, r)

        # A second SIGTERM skips the rest of a long grace.
        r2 = router([p], [d], "--drain-grace-ms", "60000")
        t0 = time.monotonic()
        r2.proc.send_signal(signal.SIGTERM)
        pdtest.poll_until(lambda: _answers(r2, "/readiness", 503), 5, "readiness 503")
        r2.proc.send_signal(signal.SIGTERM)
        check(r2.wait_exit(10) == 0, "exit status after a second SIGTERM", r2)
        check(time.monotonic() - t0 < 10, "the second signal did not end the grace", r2)
    finally:
        pdtest.stop_all()


def scenario_shutdown_load():
    """SIGTERM under load (new connections all along): every answered request is a 200, readiness goes
    503 while the listener still accepts, connections are refused only after the grace, the slow
    stream in flight completes, exit 0."""
    grace_ms = 1000
    p, d = sim("prefill"), sim("decode", "--decode-us-per-token", "20000")
    r = router([p], [d], "--drain-grace-ms", str(grace_ms))
    lock = threading.Lock()
    statuses, errors, refused, served_after = [], [], [], []
    stop = threading.Event()
    t_sig = [None]
    quick = dict(BODIES["/generate"], sampling_params={"max_new_tokens": 1})

    def load():
        while not stop.is_set():
            t_start = time.monotonic()
            try:
                st, _, _ = request(r.port, "POST", "/generate", quick, timeout=10)
            except ConnectionRefusedError:
                with lock:
                    refused.append(time.monotonic())
                continue
            except OSError as e:
                with lock:
                    errors.append(repr(e))
                continue
            with lock:
                statuses.append(st)
                if t_sig[0] is not None and t_start > t_sig[0]:
                    served_after.append(t_start)
    try:
        result = {}

        def slow():
            result["resp"] = request(r.port, "POST", "/generate", dict(BODIES["/generate"], stream=True,
                                                                        sampling_params={"max_new_tokens": 100}))
        ts = threading.Thread(target=slow)
        ts.start()
        pool = [threading.Thread(target=load) for _ in range(4)]
        for th in pool:
            th.start()
        pdtest.poll_until(lambda: stats(d)["inflight"] >= 1 and len(statuses) >= 10, 10, "load and the stream")
        t_sig[0] = time.monotonic()
        r.proc.send_signal(signal.SIGTERM)
        pdtest.poll_until(lambda: _answers(r, "/readiness", 503), 5, "readiness 503 while accepting")
        check(r.wait_exit(grace_ms / 1000 + 15) == 0, "exit status", r)
        stop.set()
        for th in pool:
            th.join(15)
        ts.join(15)
        check(not errors, "requests failed during shutdown: %r" % errors[:5], r)
        check(statuses and all(st == 200 for st in statuses),
              "non-200 answers: %r" % sorted(set(statuses)), r)
        check(served_after, "no request served during the grace", r)
        check(refused, "no connection was refused after the exit", r)
        first_refused = min(refused) - t_sig[0]
        check(first_refused >= grace_ms / 1000 * 0.9,
              "connection refused %.3fs after SIGTERM, inside the %d ms grace" % (first_refused, grace_ms), r)
        st, _, raw = result["resp"]
        evs = sse_events(raw)
        check(st == 200 and evs[-1] == "[DONE]" and len(evs) == 101, "stream cut by shutdown: %r" % raw[-200:])
    finally:
        stop.set()
        pdtest.stop_all()


def scenario_shutdown_drain_timeout():
    """A stream that outlives lifecycle.drain_timeout_ms is cut at the deadline (SSE error event, both
    legs closed: pdsim counts the cancel) and the process exits 0 within grace + timeout + 1 s."""
    grace_ms, timeout_ms = 200, 800
    p, d = sim("prefill"), sim("decode", "--decode-us-per-token", "200000")
    r = router([p], [d], config="lifecycle: { drain_grace_ms: %d, drain_timeout_ms: %d }" % (grace_ms, timeout_ms))
    try:
        result = {}

        def slow():
            result["resp"] = request(r.port, "POST", "/generate", dict(BODIES["/generate"], stream=True,
                                                                        sampling_params={"max_new_tokens": 200}))
        t = threading.Thread(target=slow)
        t.start()
        pdtest.poll_until(lambda: stats(d)["inflight"] >= 1, 5, "the stream to start")
        t0 = time.monotonic()
        r.proc.send_signal(signal.SIGTERM)
        rc = r.wait_exit((grace_ms + timeout_ms) / 1000 + 5)
        took = time.monotonic() - t0
        check(rc == 0, "exit status %s" % rc, r)
        # LeakSanitizer scans the heap after main returns: another 2 s in the sanitizer build.
        slack = 1 + (2 if "detect_leaks=1" in os.environ.get("ASAN_OPTIONS", "") else 0)
        check(took <= (grace_ms + timeout_ms) / 1000 + slack, "exit took %.2fs" % took, r)
        check(took >= (grace_ms + timeout_ms) / 1000 * 0.9, "stream cut early, after %.2fs" % took, r)
        t.join(10)
        st, _, raw = result["resp"]
        evs = sse_events(raw)
        check(st == 200 and any(isinstance(e, dict) and "error" in e for e in evs),
              "no error event at the deadline: %r" % raw[-300:], r)
        pdtest.poll_until(lambda: stats(d)["cancelled"] >= 1, 5, "the decode worker to see the cancel")
        check(stats(d)["inflight"] == 0, "decode still streaming", r)
        log = open(r.log_path).read()
        check("shutdown: 1 requests cancelled at drain_timeout" in log, "cancel not counted in the log", r)
        # The access log names the cause; the decode worker is not blamed (no ejection, no upstream error).
        check('"error":"shutdown_cancelled"' in log and "decode_stream_broken" not in log and
              "marked unhealthy" not in log, "the cancel is blamed on the worker: %s" % log[-1500:], r)
    finally:
        pdtest.stop_all()


if __name__ == "__main__":
    pdtest.run_scenario(globals())
