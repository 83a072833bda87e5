#!/usr/bin/env python3
"""The load read from the engines themselves (load.poll_ms): sglang's GET /get_load and vLLM's GET /metrics,
served by pdsim from its real state, fed to the decode policy.

Scenarios (argv[1]):
  least_load_sglang  two decodes; decode 0 is loaded by requests sent to it directly (never through the
                router), which only its /get_load shows: every request the router sends goes to decode 1.
                With the poll off the router counts none on either and least_load sends some to decode 0.
  least_load_vllm  the same with protocol: vllm, the load read from decode 0's /metrics.
  power_of_two_sglang  the same as least_load_sglang under power_of_two.
  poll_fails    decode 0's /get_load answers 500 (then garbage): its load is unknown, not idle; the router's
                own count (one request it holds there) weighs it, so every new request goes to decode 1,
                whose engine says it is idle. The failures are counted by outcome, the fall-back counted, the
                admin listing names each worker's source, and the log says it once per change.
  dp_ranks      a decode with two data-parallel ranks (dp_size 2, pdsim --dp-size 2): rank 0 is loaded by
                requests sent to it directly, and /get_load says so per rank: least_load sends every request
                to rank 1 of the same decode (each rank weighed by its own entry, not the engine's sum).
  kv_usage      load.kv_usage_max_percent (protocol: vllm): a decode whose /metrics reports its KV cache
                fuller than the key takes no new request while another has room (round robin alone would
                alternate).
"""
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check, request, request_json  # noqa: E402
from test_router import metric_value, metrics, router, sim, stats  # noqa: E402

DIRECT = 3  # requests held on decode 0 behind the router's back


def url(w):
    return "http://127.0.0.1:%d" % w.port


def engine_requests(r, w):
    return metric_value(metrics(r), "pdr_worker_engine_requests", worker=url(w), role="decode")


def hold_direct(w, n, path="/generate"):
    """Sends n requests straight to worker w, which never answers them (hang_before_headers)."""
    request_json(w.port, "POST", "/pdsim/fault", {"hang_before_headers": 1})
    body = {"text": "direct", "sampling_params": {"max_new_tokens": 2}, "prompt": "direct", "max_tokens": 2}

    def send():
        try:
            request(w.port, "POST", path, body, timeout=300)
        except OSError:
            pass  # ends when the test stops the processes

    for _ in range(n):
        threading.Thread(target=send, daemon=True).start()
    pdtest.poll_until(lambda: stats(w)["requests"] == n, 10, "%d direct requests on %s" % (n, url(w)))


def send_all(r, n, path, body_of):
    """n requests through the router, each answered 200 within 5 s (one sent to the held decode never is)."""
    for k in range(n):
        try:
            st = request(r.port, "POST", path, body_of(k), timeout=5)[0]
        except OSError as e:
            check(False, "request %d got no answer (sent to the loaded decode?): %s" % (k, e), r)
        check(st == 200, "status %d" % st, r)


def by_engine(policy, protocol):
    try:
        ps, ds = [sim("prefill")], [sim("decode"), sim("decode")]
        conf = "policy: { prefill: round_robin, decode: %s }\nload: { poll_ms: 50, timeout_ms: 5000 }\n" % policy
        if protocol == "vllm":
            conf += "protocol: vllm\n"
            path = "/v1/completions"
            body_of = lambda k: {"model": "pdsim", "prompt": "q%d" % k, "max_tokens": 2}  # noqa: E731
        else:
            path = "/generate"
            body_of = lambda k: {"text": "q%d" % k, "sampling_params": {"max_new_tokens": 2}}  # noqa: E731
        r = router(ps, ds, config=conf)
        hold_direct(ds[0], DIRECT, path)
        pdtest.poll_until(lambda: engine_requests(r, ds[0]) == DIRECT, 10, "the router to read decode 0's load")
        pdtest.poll_until(lambda: engine_requests(r, ds[1]) == 0, 10, "the router to read decode 1's load")
        m = metrics(r)
        for d in ds:
            check(metric_value(m, "pdr_worker_load_source", worker=url(d), role="decode", source="engine") == 1,
                  "%s's load source is not the engine" % url(d), r)
        # Loads 3 and 0 (plus what the router sends, back to 0 at each answer): with two candidates both
        # are drawn at every pick and the less loaded wins, every time.
        before = stats(ds[1])["requests"]
        send_all(r, 20, path, body_of)
        n = [stats(ds[0])["requests"] - DIRECT, stats(ds[1])["requests"] - before]
        check(n == [0, 20], "%s sent %r of 20 to the loaded and the idle decode" % (policy, n), r)
        # One good read of each of the three workers at least, none failed.
        m = metrics(r)
        check((metric_value(m, "pdr_engine_load_poll_total", outcome="ok") or 0) >= 3 and
              metric_value(m, "pdr_engine_load_poll_total", outcome="failed") == 0, "reads not counted", r)
        ws = request_json(r.ports["admin"], "GET", "/admin/v1/workers")["workers"]
        d0 = [w for w in ws if w["url"] == url(ds[0]) and w["role"] == "decode"][0]
        check(d0["load_source"]["source"] == "engine" and d0["load_source"]["engine"]["requests"] == DIRECT,
              "admin listing of decode 0: %r" % d0.get("load_source"), r)
    finally:
        pdtest.stop_all()


def scenario_least_load_sglang():
    by_engine("least_load", "sglang")


def scenario_least_load_vllm():
    by_engine("least_load", "vllm")


def scenario_power_of_two_sglang():
    by_engine("power_of_two", "sglang")


def router_inflight(r, w):
    return metric_value(metrics(r), "pdr_worker_inflight_requests", role="decode", url=url(w))


def scenario_poll_fails():
    try:
        ps, ds = [sim("prefill", "--kv-timeout-ms", "600000")], [sim("decode"), sim("decode")]
        r = router(ps, ds, config="policy: { prefill: round_robin, decode: least_load }\n"
                   "load: { poll_ms: 50, timeout_ms: 5000 }\n"
                   "timeouts: { first_byte_ms: 600000, kv_transfer_ms: 600000 }")
        request_json(ds[0].port, "POST", "/pdsim/fault", {"load_status": 500, "hang_before_headers": 1})
        pdtest.poll_until(lambda: (metric_value(metrics(r), "pdr_engine_load_poll_total", outcome="failed") or 0)
                          >= 2, 10, "failed reads counted")
        pdtest.poll_until(lambda: engine_requests(r, ds[1]) == 0, 10, "the router to read decode 1's load")
        body = {"text": "hold", "sampling_params": {"max_new_tokens": 2}}

        def send_bg():
            try:
                request(r.port, "POST", "/generate", body, timeout=300)
            except OSError:
                pass

        # One request held on decode 0 through the router. Until it lands there, tries reach decode 1 (and
        # end) or decode 0: 40 tries all miss it with probability 2^-40 (both look alike: 0 and 0).
        for _ in range(40):
            t = threading.Thread(target=send_bg, daemon=True)
            t.start()
            pdtest.poll_until(lambda: stats(ds[0])["requests"] == 1 or not t.is_alive(), 10, "a try to end")
            if stats(ds[0])["requests"] == 1:
                break
            pdtest.poll_until(lambda: router_inflight(r, ds[1]) == 0, 10, "decode 1 idle")
        check(stats(ds[0])["requests"] == 1, "no request reached decode 0", r)
        pdtest.poll_until(lambda: router_inflight(r, ds[0]) == 1, 10, "the router's count on decode 0")
        # Decode 0's engine load is unknown: the router's count (1) weighs it, not an idle 0; decode 1's
        # engine says 0. Every request goes to decode 1.
        for fault in ({"load_status": 500}, {"load_status": 0, "load_garbage": 1}):
            request_json(ds[0].port, "POST", "/pdsim/fault", fault)
            before = stats(ds[1])["requests"]
            send_all(r, 10, "/generate", lambda k: {"text": "q%d" % k, "sampling_params": {"max_new_tokens": 2}})
            n = [stats(ds[0])["requests"] - 1, stats(ds[1])["requests"] - before]
            check(n == [0, 10], "with %r: %r of 10 to the unknown and the idle decode" % (fault, n), r)
        pdtest.poll_until(lambda: (metric_value(metrics(r), "pdr_engine_load_poll_total", outcome="garbage") or 0)
                          >= 1, 10, "garbage reads counted")
        m = metrics(r)
        check((metric_value(m, "pdr_fallbacks_total", reason="engine_load_unknown") or 0) >= 10,
              "fall-backs to the router's count not counted", r)
        check(metric_value(m, "pdr_worker_load_source", worker=url(ds[0]), role="decode", source="router") == 1,
              "decode 0's source is not the router's count", r)
        ws = request_json(r.ports["admin"], "GET", "/admin/v1/workers")["workers"]
        d0 = [w for w in ws if w["url"] == url(ds[0]) and w["role"] == "decode"][0]
        check(d0["load_source"]["source"] == "router" and d0["load_source"]["fell_back"] and
              d0["load_source"]["engine_state"] == "failed", "admin listing of decode 0: %r" % d0["load_source"], r)
        # Logged once for the change to failing (500, then garbage: still failing, no second line).
        lines = [x for x in open(r.log_path, errors="replace") if "engine load:" in x and url(ds[0]) in x]
        check(len(lines) == 1, "log lines about decode 0's load: %r" % lines, r)
    finally:
        pdtest.stop_all()


def scenario_dp_ranks():
    try:
        p, d = sim("prefill"), sim("decode", "--dp-size", "2", "--local-prefill")
        r = router([], [], config="workers:\n"
                   "  prefill: [ { url: 'http://127.0.0.1:%d', bootstrap_port: %d } ]\n"
                   "  decode: [ { url: 'http://127.0.0.1:%d', dp_size: 2 } ]\n"
                   "policy: { prefill: round_robin, decode: least_load }\n"
                   "load: { poll_ms: 50, timeout_ms: 5000 }\n" % (p.port, p.ports["bport"], d.port))
        # Two long requests on rank 0, sent to the decode directly (--local-prefill runs them there).
        request_json(d.port, "POST", "/pdsim/fault", {"drip_ms": 100})
        body = {"text": "direct", "sampling_params": {"max_new_tokens": 1000}, "data_parallel_rank": 0}

        def send():
            try:
                request(d.port, "POST", "/generate", body, timeout=300)
            except OSError:
                pass
        for _ in range(2):
            threading.Thread(target=send, daemon=True).start()
        ranks = ["%s@%d" % (url(d), k) for k in range(2)]

        def engine(k):
            return metric_value(metrics(r), "pdr_worker_engine_requests", worker=ranks[k], role="decode")
        pdtest.poll_until(lambda: engine(0) == 2 and engine(1) == 0, 10, "the router to read both ranks' load")
        # Ranks 0 and 1 weigh 2 and 0: both drawn at every pick, rank 1 wins every time. Weighed by the
        # engine's sum (2 and 2) the 20 picks would all reach rank 1 with probability 2^-20.
        n0 = stats(d)["requests"]
        for k in range(20):
            st = request(r.port, "POST", "/generate", {"text": "q%d" % k, "sampling_params": {"max_new_tokens": 2}},
                         timeout=10)[0]
            check(st == 200, "status %d" % st, r)
        got = [e["body"].get("data_parallel_rank") for e in stats(d)["last"][-20:]]
        check(stats(d)["requests"] - n0 == 20 and got == [1] * 20,
              "the decode legs went to ranks %r (rank 0 is the loaded one)" % got, r)
    finally:
        pdtest.stop_all()


def scenario_kv_usage():
    try:
        cap = 2 << 20  # a held request's KV: (about 200 prompt tokens + 1000 output) * 1024 bytes, over half
        ps = [sim("prefill", "--kv-timeout-ms", "600000")]
        ds = [sim("decode", "--kv-capacity-bytes", str(cap)), sim("decode")]
        r = router(ps, ds, config="policy: { prefill: round_robin, decode: round_robin }\nprotocol: vllm\n"
                   "load: { poll_ms: 50, timeout_ms: 5000, kv_usage_max_percent: 50 }\n"
                   "timeouts: { first_byte_ms: 600000, kv_transfer_ms: 600000 }")
        # Decode 0 streams slowly: one long request there holds over half its KV while it runs.
        request_json(ds[0].port, "POST", "/pdsim/fault", {"drip_ms": 1000})
        body = {"model": "pdsim", "prompt": "x " * 200, "max_tokens": 1000}

        def send_bg():
            try:
                request(r.port, "POST", "/v1/completions", body, timeout=300)
            except OSError:
                pass
        for _ in range(4):  # round robin: the first or the second try reaches decode 0
            t = threading.Thread(target=send_bg, daemon=True)
            t.start()
            pdtest.poll_until(lambda: stats(ds[0])["requests"] == 1 or not t.is_alive(), 30, "a try to end")
            if stats(ds[0])["requests"] == 1:
                break
        check(stats(ds[0])["requests"] == 1, "no request reached decode 0", r)
        pdtest.poll_until(lambda: (metric_value(metrics(r), "pdr_worker_engine_kv_usage_ratio", worker=url(ds[0]),
                                                role="decode") or 0) >= 0.5, 10, "decode 0's KV usage read")
        # Round robin alone alternates; with decode 0's KV over the key, admission takes decode 1 every time.
        before = stats(ds[1])["requests"]
        send_all(r, 6, "/v1/completions", lambda k: {"model": "pdsim", "prompt": "q%d" % k, "max_tokens": 2})
        check(stats(ds[1])["requests"] - before == 6 and stats(ds[0])["requests"] == 1,
              "a request went to the decode whose KV is full", r)
        check((metric_value(metrics(r), "pdr_kv_admission_total", decision="other_decode") or 0) >= 1,
              "admission's other decode not counted", r)
    finally:
        pdtest.stop_all()


if __name__ == "__main__":
    pdtest.run_scenario(globals())
