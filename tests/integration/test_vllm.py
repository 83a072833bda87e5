#!/usr/bin/env python3
"""Integration tests of pdrouter's vLLM PD protocol (protocol: vllm) with real pdsim workers speaking
vLLM's kv_transfer_params on loopback (real HTTP, real KV bytes through libpdshim).

Usage: test_vllm.py SCENARIO   (one of the functions named scenario_*; ctest runs each separately)
"""

import json
import os
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check, request, request_json, sse_events  # noqa: E402
from test_router import BODIES, curl, metric_value, metrics, sim, stats, texts  # noqa: E402

H = "127.0.0.1"
ASK = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None, "remote_block_ids": None,
       "remote_host": None, "remote_port": None}
ROUTES = ("/v1/completions", "/v1/chat/completions")
LEASE_MS = 1200  # the short lease of the lease scenarios (vLLM's default is 30 s): heartbeats every 200 ms


def router(prefills, decodes, *extra):
    argv = ["pdrouter", "--pd-disaggregation", "--protocol", "vllm", "--host", H, "--port", "{port}",
            "--access-log", "off", "--admin-port", "{admin}", "--drain-grace-ms", "0"]
    for p in prefills:
        argv += ["--prefill", "http://127.0.0.1:%d" % p.port]
    for d in decodes:
        argv += ["--decode", "http://127.0.0.1:%d" % d.port]
    return pdtest.start(argv + list(extra), name="pdrouter", health_path="/readiness", healthy=200)


def last(p):
    return stats(p)["last"][-1]


def stop_clean(*procs):
    """Stops each process (SIGTERM) and checks that it exited 0 with no sanitizer report (under ASan a
    leak makes the exit status nonzero)."""
    for p in procs:
        rc = p.stop()
        log = open(p.log_path, errors="replace").read()
        check(rc == 0 and "Sanitizer" not in log and "runtime error" not in log,
              "%s exited %s\n%s" % (p.name, rc, p.log_tail(60)))


def scenario_routes():
    """Completions and chat, streaming and not, batches: disaggregated output == --role both output; the
    prefill gets one token, no stream and the router's kv_transfer_params; the decode gets the client's
    body with the prefill's kv_transfer_params; one X-Request-Id on both legs; KV pulled, none left held;
    /generate refused with 400 naming the routes."""
    p, d, both = sim("prefill"), sim("decode"), sim("both")
    r = router([p], [d])
    try:
        n = 0
        for route in ROUTES:
            for stream in (False, True):
                b = dict(BODIES[route], stream=stream)
                if stream:
                    b["stream_options"] = {"include_usage": True}
                if route == "/v1/chat/completions":
                    b["max_completion_tokens"] = 9
                    b["min_tokens"] = 2
                st, out = curl(r.port, route, b)
                n += 1
                check(st == 200, "%s stream=%s: %d %s" % (route, stream, st, out[:300]), r, p, d)
                st2, ref = curl(both.port, route, b)
                assert st2 == 200, ref
                check(texts(route, b, out, stream) == texts(route, b, ref, stream),
                      "%s stream=%s: disaggregated %r != monolithic %r" % (route, stream, out[:300], ref[:300]))
                if stream:
                    check(any(e == "[DONE]" for e in sse_events(out.encode())), "no [DONE]: %r" % out[-200:])
                lp, ld = last(p), last(d)
                pb, db = lp["body"], ld["body"]
                # The prefill: one token, not streamed, no stream_options or min_tokens, the router's ask.
                check(pb["stream"] is False and pb["max_tokens"] == 1 and pb["kv_transfer_params"] == ASK,
                      "prefill body %r" % pb)
                check("stream_options" not in pb and "min_tokens" not in pb, "prefill body %r" % pb)
                if "max_completion_tokens" in b:
                    check(pb["max_completion_tokens"] == 1, "prefill body %r" % pb)
                else:
                    check("max_completion_tokens" not in pb, "prefill body %r" % pb)
                # The decode: the client's body as sent, plus the prefill's answer.
                kv = db.pop("kv_transfer_params")
                check(db == b, "decode body %r != client body %r" % (db, b))
                check(kv["do_remote_prefill"] is True and kv["do_remote_decode"] is False and
                      kv["remote_host"] == H and kv["remote_port"] == p.ports["bport"] and
                      kv["remote_engine_id"].startswith("pdsim-") and len(kv["remote_block_ids"]) == 1, repr(kv))
                check(lp["x_request_id"] and lp["x_request_id"] == ld["x_request_id"],
                      "X-Request-Id differs: %r %r" % (lp["x_request_id"], ld["x_request_id"]))

        # HTTP/2 with prior knowledge, streaming and not.
        for stream in (False, True):
            b = dict(BODIES["/v1/chat/completions"], stream=stream)
            st, out, ver = curl(r.port, "/v1/chat/completions", b, "--http2-prior-knowledge", version=True)
            n += 1
            check(st == 200 and ver == "2", "h2: %d %s %s" % (st, ver, out[:200]))
            _, ref = curl(both.port, "/v1/chat/completions", b)
            check(texts("/v1/chat/completions", b, out, stream) == texts("/v1/chat/completions", b, ref, stream),
                  "h2 text %r != %r" % (out[:200], ref[:200]))

        # The client's X-Request-Id reaches both legs; its own kv_transfer_params reach neither.
        evil = dict(BODIES["/v1/completions"], kv_transfer_params={"do_remote_prefill": True, "remote_host": "10.6.6.6",
                                                                   "remote_port": 1, "remote_block_ids": [7]})
        st, _, out = request(r.port, "POST", "/v1/completions", evil, headers={"X-Request-Id": "vllm-req.1"})
        n += 1
        check(st == 200, "%d %s" % (st, out))
        lp, ld = last(p), last(d)
        check(lp["x_request_id"] == "vllm-req.1" and ld["x_request_id"] == "vllm-req.1", repr((lp, ld)))
        check(lp["body"]["kv_transfer_params"] == ASK, repr(lp["body"]))
        check(ld["body"]["kv_transfer_params"]["remote_host"] == H and
              ld["body"]["kv_transfer_params"]["remote_block_ids"] != [7], repr(ld["body"]))

        # Batches go through as vLLM's proxies send them: one prefill call and one decode call, the
        # prefill's one kv_transfer_params object (pdsim names one held KV per item in it).
        for route, b in (("/v1/completions", {"prompt": ["first prompt here", "and a second one"], "max_tokens": 5}),
                         ("/v1/chat/completions", dict(BODIES["/v1/chat/completions"], n=3))):
            j = request_json(r.port, "POST", route, b)
            n += 1
            ref = request_json(both.port, "POST", route, b)
            check(texts(route, b, json.dumps(j), False) == texts(route, b, json.dumps(ref), False),
                  "batch %s: %r != %r" % (route, j, ref))
            items = len(b["prompt"]) if "prompt" in b else b["n"]
            check(len(last(d)["body"]["kv_transfer_params"]["remote_block_ids"]) == items, repr(last(d)))

        check(stats(p)["requests"] == n and stats(d)["requests"] == n, "one call per leg: %r %r" % (stats(p), stats(d)))
        check(stats(d)["kv_bytes_received"] > 0, "no KV bytes moved")
        # Every held KV was pulled by its decode: nothing waits for the abort timeout. The prefill counts
        # a pull done when its transfer thread reports it to its loop, which may come after the client's
        # answer: awaited, well inside the abort timeout (kv_expired would count one that ran out).
        def released():
            s = stats(p)
            return s if s["kv_held"] == 0 else None
        try:
            sp = pdtest.poll_until(released, timeout=10.0, what="the prefill's held KV to be released")
        except AssertionError:
            sp = stats(p)
        check(sp["kv_held"] == 0 and sp["kv_released"] >= n and sp["kv_expired"] == 0, repr(sp))

        # /generate is sglang's: 400 in the OpenAI error shape, naming the routes; no worker called.
        st, h, out = request(r.port, "POST", "/generate", {"text": "hi"})
        j = json.loads(out)
        check(st == 400 and j["error"]["type"] == "invalid_request_error" and j["error"]["code"] == 400 and
              "/v1/completions" in j["error"]["message"] and "/v1/chat/completions" in j["error"]["message"],
              "%d %s" % (st, out))
        check(stats(p)["requests"] == n and stats(d)["requests"] == n, "/generate reached a worker")
        # Malformed bodies: 400 before any worker, as with sglang.
        st, _, out = request(r.port, "POST", "/v1/completions", "{not json")
        check(st == 400 and b"malformed JSON" in out, out)
        # A worker's client error on the prefill is the client's to see; the decode is not called.
        request_json(p.port, "POST", "/pdsim/fault", {"fail_status": 422})
        st, _, out = request(r.port, "POST", "/v1/completions", BODIES["/v1/completions"])
        check(st == 422 and stats(d)["requests"] == n, "prefill 4xx: %d %s" % (st, out))
        m = metrics(r)
        check(metric_value(m, "pdr_vllm_kv_release_total", outcome="released") == 0, m)
        check(r.alive(), "router died", r)
        stop_clean(r, p, d, both)
    finally:
        pdtest.stop_all()


def scenario_prefill_failures():
    """A prefill answering 5xx, or 2xx without kv_transfer_params, is retried on another prefill and the
    decode is never called for it; with no good prefill left the client gets 502 naming the cause."""
    bad, good, d = sim("prefill"), sim("prefill"), sim("decode")
    request_json(bad.port, "POST", "/pdsim/fault", {"fail_status": 503})
    r = router([bad, good], [d], "--policy", "round_robin", "--health-interval-ms", "60000")
    try:
        for i in range(4):
            j = request_json(r.port, "POST", "/v1/completions", BODIES["/v1/completions"])
            check(j["choices"][0]["text"], repr(j))
        check(stats(bad)["requests"] >= 1, "the failing prefill was never tried: %r" % stats(bad))
        check(stats(d)["requests"] == 4, "the decode was called for a failed prefill: %r" % stats(d))
        check(metric_value(metrics(r), "pdr_retries_total") >= 1, "no retry counted")
    finally:
        pdtest.stop_all()
    # A prefill that answers without kv_transfer_params (a pdsim of role both ignores them, as a vLLM
    # without a KV connector would) cannot hand its KV over.
    plain, good, d = sim("both"), sim("prefill"), sim("decode")
    r = router([plain, good], [d], "--policy", "round_robin", "--health-interval-ms", "60000")
    try:
        for i in range(3):
            st, _, out = request(r.port, "POST", "/v1/chat/completions", BODIES["/v1/chat/completions"])
            check(st == 200, "%d %s" % (st, out))
        check(stats(plain)["requests"] >= 1 and stats(d)["requests"] == 3, repr((stats(plain), stats(d))))
    finally:
        pdtest.stop_all()
    plain, d = sim("both"), sim("decode")
    r = router([plain], [d], "--health-interval-ms", "60000")
    try:
        st, _, out = request(r.port, "POST", "/v1/completions", BODIES["/v1/completions"])
        msg = json.loads(out)["error"]["message"]
        check(st == 502 and "kv_transfer_params" in msg, "%d %s" % (st, out))
        check(stats(d)["requests"] == 0, "the decode was called: %r" % stats(d))
    finally:
        pdtest.stop_all()


def scenario_all_prefills_dead():
    """The only prefill dead: 503 with Retry-After at once; the decode is never called."""
    p, d = sim("prefill"), sim("decode")
    r = router([p], [d], "--health-interval-ms", "60000")
    try:
        p.proc.kill()
        p.proc.wait()
        for i in range(4):
            t0 = time.monotonic()
            st, h, out = request(r.port, "POST", "/v1/chat/completions", BODIES["/v1/chat/completions"])
            dt = time.monotonic() - t0
            check(st == 503 and h.get("retry-after") == "1" and dt < 1.0, "%d in %.3fs %r %s" % (st, dt, h, out))
            check(json.loads(out)["error"]["code"] == 503, out)
        check(stats(d)["requests"] == 0, "the decode was called: %r" % stats(d))
    finally:
        pdtest.stop_all()


def scenario_disconnect_release():
    """A client that leaves after the prefill answered, before the decode's answer began: the router sends
    the decode a one-token, non-streamed copy with the prefill's kv_transfer_params, the decode pulls the
    KV, the prefill frees it, and pdr_vllm_kv_release_total counts it. The leases are short (vLLM's
    design: 30 s, renewed by the decode's heartbeats) and the decode waits longer than one before it
    pulls: the release's own heartbeats keep the KV until it is pulled, so it is released, not expired."""
    p = sim("prefill", "--kv-lease-ms", str(LEASE_MS))
    d = sim("decode", "--kv-lease-ms", str(LEASE_MS), "--kv-fetch-delay-ms", str(2 * LEASE_MS))
    r = router([p], [d])
    try:
        for path in ROUTES:
            before = stats(p)["kv_released"]
            body = json.dumps(dict(BODIES[path], stream=True)).encode()
            s = socket.create_connection((H, r.port))
            s.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Request-Id: gone-1\r\n"
                      b"Content-Length: %d\r\n\r\n" % (path.encode(), len(body)) + body)
            # The prefill answered and holds the KV; the decode waits before pulling it.
            pdtest.poll_until(lambda: stats(p)["kv_held"] == 1 and stats(d)["inflight"] >= 1, 5,
                              "the prefill to hold the KV")
            s.close()
            pdtest.poll_until(lambda: stats(p)["kv_held"] == 0, 10, "the KV to be released")
            sp = stats(p)
            check(sp["kv_released"] == before + 1 and sp["kv_expired"] == 0, repr(sp))
            check(sp["kv_lease"]["renewed"] > 0 and sp["kv_lease"]["leases"] == 0, repr(sp["kv_lease"]))
            ld = last(d)
            check(ld["body"]["max_tokens"] == 1 and ld["body"]["stream"] is False and
                  "stream_options" not in ld["body"], "release body %r" % ld["body"])
            # The release carries what the abandoned decode leg carried: the prefill's kv_transfer_params.
            abandoned = stats(d)["last"][-2]
            check(ld["body"]["kv_transfer_params"] == abandoned["body"]["kv_transfer_params"] and
                  ld["body"]["kv_transfer_params"]["do_remote_prefill"] is True, repr((abandoned, ld)))
            if path == "/v1/chat/completions":
                check("max_completion_tokens" not in ld["body"], repr(ld["body"]))
            check(ld["x_request_id"] == "gone-1", repr(ld))
        want = len(ROUTES)
        m = pdtest.poll_until(lambda: (lambda t: t if metric_value(t, "pdr_vllm_kv_release_total", outcome="released")
                                       == want else None)(metrics(r)), 5, "the release to be counted")
        check(metric_value(m, "pdr_vllm_kv_release_total", outcome="failed") == 0, m)
        check(metric_value(m, "pdr_client_aborts_total") >= want, m)
        # A request that ends normally sends no release.
        request_json(r.port, "POST", "/v1/completions", BODIES["/v1/completions"])
        check(stats(d)["requests"] == 2 * want + 1, repr(stats(d)))
        check(r.alive(), "router died", r)
        stop_clean(r, p, d)
    finally:
        pdtest.stop_all()


def scenario_decode_failure_release():
    """A decode that answers 5xx before reading the KV: the attempt is retried (a new prefill call), and the
    KV of the failed attempt is released through another decode, not left to the abort timeout."""
    p, bad, good = sim("prefill"), sim("decode"), sim("decode")
    request_json(bad.port, "POST", "/pdsim/fault", {"fail_status": 503})
    r = router([p], [bad, good], "--policy", "round_robin", "--health-interval-ms", "60000")
    try:
        j = request_json(r.port, "POST", "/v1/chat/completions", BODIES["/v1/chat/completions"])
        check(j["choices"][0]["message"]["content"], repr(j))
        check(stats(bad)["requests"] == 1 and stats(p)["requests"] == 2, repr((stats(bad), stats(p))))
        pdtest.poll_until(lambda: stats(p)["kv_held"] == 0 and stats(p)["kv_released"] == 2, 5,
                          "both attempts' KV to be released")
        check(stats(good)["requests"] == 2, "the release did not go to the healthy decode: %r" % stats(good))
        releases = [e for e in stats(good)["last"] if e["body"].get("max_tokens") == 1]
        check(len(releases) == 1 and releases[0]["body"]["stream"] is False, repr(stats(good)["last"]))
        m = pdtest.poll_until(lambda: (lambda t: t if metric_value(t, "pdr_vllm_kv_release_total", outcome="released")
                                       == 1 else None)(metrics(r)), 5, "the release to be counted")
        check(metric_value(m, "pdr_retries_total") == 1, m)
        stop_clean(r, p, bad, good)
    finally:
        pdtest.stop_all()


def scenario_kv_expiry():
    """An unrenewed lease expires: KV that no decode heartbeats is freed once its lease (--kv-lease-ms)
    has run out, and counted as expired (what happens on a vLLM prefill without the router's release,
    no decode ever holding the request)."""
    p = sim("prefill", "--kv-lease-ms", "300")
    try:
        b = dict(BODIES["/v1/completions"], max_tokens=1, kv_transfer_params=ASK)
        t0 = time.monotonic()
        j = request_json(p.port, "POST", "/v1/completions", b)
        kv = j["kv_transfer_params"]
        check(kv["do_remote_prefill"] is True and kv["remote_port"] == p.ports["bport"] and kv["tp_size"] == 1, repr(j))
        check(stats(p)["kv_held"] == 1, repr(stats(p)))
        pdtest.poll_until(lambda: stats(p)["kv_expired"] == 1, 5, "the KV to expire")
        check(time.monotonic() - t0 >= 0.3, "expired before its lease ran out")
        sp = stats(p)
        check(sp["kv_held"] == 0 and sp["kv_released"] == 0, repr(sp))
        check(sp["kv_lease"]["lease_ms"] == 300 and sp["kv_lease"]["granted"] == 1 and sp["kv_lease"]["expired"] == 1
              and sp["kv_lease"]["leases"] == 0, repr(sp["kv_lease"]))
        # KV still held at shutdown is freed with the shim: a clean exit, no leak.
        p2 = sim("prefill")
        request_json(p2.port, "POST", "/v1/completions", b)
        check(stats(p2)["kv_held"] == 1, repr(stats(p2)))
        stop_clean(p, p2)
    finally:
        pdtest.stop_all()


def hb_socket(port):
    """A UDP socket aimed at a prefill's bootstrap port (where its lease heartbeats arrive)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect((H, port))
    return s


def scenario_lease_renewal():
    """vLLM's lease renewal: the decode heartbeats the prefill's lease from the request's arrival until its
    pull, so a decode that waits longer than the lease before it pulls still finds the KV (the text equals
    --role both's, nothing expires). A decode that dies while it holds the request stops heartbeating:
    the prefill frees that KV within the renewal (2/3 of the lease), not after minutes. A heartbeat for a
    room the prefill does not hold, or a malformed one, is counted and changes nothing."""
    p = sim("prefill", "--kv-lease-ms", str(LEASE_MS))
    d = sim("decode", "--kv-lease-ms", str(LEASE_MS), "--kv-fetch-delay-ms", str(3 * LEASE_MS))
    both = sim("both")
    r = router([p], [d])
    try:
        route = "/v1/chat/completions"
        j = request_json(r.port, "POST", route, BODIES[route])
        ref = request_json(both.port, "POST", route, BODIES[route])
        check(j["choices"][0]["message"]["content"] == ref["choices"][0]["message"]["content"], repr((j, ref)))
        sp, sd = stats(p), stats(d)
        check(sp["kv_released"] == 1 and sp["kv_expired"] == 0 and sp["kv_held"] == 0, repr(sp))
        # Heartbeats every lease / 6 over three leases: about 18; at least the first and a few more.
        check(sp["kv_lease"]["renewed"] >= 6 and sd["kv_lease"]["heartbeats_sent"] >= 6 and
              sd["kv_lease"]["send_failed"] == 0, repr((sp["kv_lease"], sd["kv_lease"])))
        check(sd["kv_lease"]["heartbeat_ms"] == LEASE_MS // 6 and sp["kv_lease"]["extension_ms"] == LEASE_MS * 2 // 3,
              repr(sd["kv_lease"]))
        # Heartbeats after the pull, for other rooms, or malformed: counted, nothing else.
        hb = hb_socket(p.ports["bport"])
        renewed, unknown, bad = (sp["kv_lease"][k] for k in ("renewed", "unknown_rooms", "malformed"))
        for msg in (b"HB:12345", b"HB:1,2", b"HELLO", b"HB:x", b"HB:"):
            hb.send(msg)
        pdtest.poll_until(lambda: stats(p)["kv_lease"]["malformed"] == bad + 3, 5, "the malformed heartbeats")
        sl = stats(p)["kv_lease"]
        check(sl["unknown_rooms"] == unknown + 3 and sl["renewed"] == renewed, repr(sl))

        # A decode that dies holding the request: the prefill frees the KV once the last renewal ran out.
        dead = sim("decode", "--kv-lease-ms", str(LEASE_MS), "--kv-fetch-delay-ms", "60000")
        r2 = router([p], [dead])
        s = socket.create_connection((H, r2.port))
        body = json.dumps(BODIES[route]).encode()
        s.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                  % (route.encode(), len(body)) + body)
        pdtest.poll_until(lambda: stats(p)["kv_held"] == 1 and stats(dead)["inflight"] >= 1, 5, "the KV to be held")
        t0 = time.monotonic()
        # Held past its first lease: the dead-to-be decode renews it.
        pdtest.poll_until(lambda: time.monotonic() - t0 > LEASE_MS / 1000 * 1.5, 10, "one and a half leases")
        check(stats(p)["kv_held"] == 1 and stats(p)["kv_expired"] == 0, "expired while renewed: %r" % stats(p))
        dead.proc.kill()
        dead.proc.wait()
        t1 = time.monotonic()
        pdtest.poll_until(lambda: stats(p)["kv_expired"] >= 1, 10, "the KV of the dead decode to expire")
        check(time.monotonic() - t1 < LEASE_MS / 1000 * 2, "freed %.2fs after the decode died" % (time.monotonic() - t1))
        # The router's retries find the decode gone; their KV, never heartbeated, expires with its first lease.
        sp = pdtest.poll_until(lambda: (lambda x: x if x["kv_held"] == 0 else None)(stats(p)), 10, "no KV held")
        check(sp["kv_released"] == 1 and sp["kv_expired"] == sp["requests"] - 1, repr(sp))
        s.close()
        stop_clean(r, p, d)
    finally:
        pdtest.stop_all()


if __name__ == "__main__":
    pdtest.run_scenario(globals())
