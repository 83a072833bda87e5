#!/usr/bin/env python3
"""Integration tests of data-parallel attention ranks (a worker's `dp_size: N`): each rank is a routing
target of its own, and each leg names its worker's rank the way the engine expects (sglang:
`data_parallel_rank` in the body, with the room agreeing with the prefill's rank; vLLM: the
`X-data-parallel-rank` header). pdsim records what it was given. Real pdrouter and pdsim processes.

Usage: test_dp.py SCENARIO   (one of the functions named scenario_*; ctest runs each separately)
"""

import os
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check, request_json  # noqa: E402
from test_router import curl, metric_value, metrics, router, sim, stats, texts  # noqa: E402
from test_vllm import stop_clean  # noqa: E402


def workers_yaml(p, pdp, d, ddp):
    return ("workers:\n"
            "  prefill: [ { url: 'http://127.0.0.1:%d', bootstrap_port: %d, dp_size: %d } ]\n"
            "  decode: [ { url: 'http://127.0.0.1:%d', dp_size: %d } ]\n" % (p.port, p.ports["bport"], pdp, d.port, ddp))


def scenario_sglang_ranks():
    """sglang, prefill dp_size 2 and decode dp_size 4 under round_robin: the prefill legs alternate
    data_parallel_rank 0 and 1 and each room modulo 2 is its rank; the decode legs go round ranks 0..3,
    each with its own rank in the body and the prefill's room; a client's data_parallel_rank is
    replaced; answers equal a monolithic worker's; metrics and the admin list show one target per rank."""
    p, d, both = sim("prefill"), sim("decode"), sim("both")
    r = router([], [], config="%spolicy: { prefill: round_robin, decode: round_robin }" % workers_yaml(p, 2, d, 4))
    n = 8
    for i in range(n):
        b = {"text": "the cat sat on mat %d" % i, "sampling_params": {"max_new_tokens": 5},
             "data_parallel_rank": 7}
        st, out = curl(r.port, "/generate", b)
        check(st == 200, "%d %s" % (st, out[:300]), r)
        del b["data_parallel_rank"]
        st, ref = curl(both.port, "/generate", b)
        check(texts("/generate", b, out, False) == texts("/generate", b, ref, False), out[:200])
    lp, ld = stats(p)["last"][-n:], stats(d)["last"][-n:]
    pr = [e["body"]["data_parallel_rank"] for e in lp]
    dr = [e["body"]["data_parallel_rank"] for e in ld]
    check(sorted(pr) == sorted([0, 1] * (n // 2)), "prefill ranks %r" % pr)
    check(all(e["room"] % 2 == e["body"]["data_parallel_rank"] for e in lp), "rooms %r" % lp)
    check(sorted(dr) == sorted([0, 1, 2, 3] * (n // 4)), "decode ranks %r" % dr)
    rooms_p = sorted(e["room"] for e in lp)
    check(rooms_p == sorted(e["room"] for e in ld), "the legs' rooms differ")
    m = metrics(r)
    for k in range(4):
        url = "http://127.0.0.1:%d@%d" % (d.port, k)
        check(metric_value(m, "pdr_worker_requests_total", role="decode", url=url) == n / 4, "%s in %s" % (url, m))
    ws = request_json(r.ports["admin"], "GET", "/admin/v1/workers")
    ws = ws["workers"] if isinstance(ws, dict) else ws
    check(sorted(w.get("dp_rank") for w in ws if w["role"] == "decode") == [0, 1, 2, 3], "admin %r" % ws)
    # A reload of the same file keeps every rank's target (same ids), and grows or shrinks them with
    # dp_size.
    ids = sorted(w["id"] for w in ws)
    r.proc.send_signal(signal.SIGHUP)
    pdtest.poll_until(lambda: metric_value(metrics(r), "pdr_config_reloads_total", result="ok") == 1, 5, "reload")
    ws2 = request_json(r.ports["admin"], "GET", "/admin/v1/workers")
    ws2 = ws2["workers"] if isinstance(ws2, dict) else ws2
    check(sorted(w["id"] for w in ws2) == ids, "ids changed across a reload: %r -> %r" % (ids, ws2))
    with open(r.config_path) as f:
        text = f.read()
    with open(r.config_path, "w") as f:
        f.write(text.replace("dp_size: 4", "dp_size: 2"))
    r.proc.send_signal(signal.SIGHUP)
    pdtest.poll_until(lambda: metric_value(metrics(r), "pdr_config_reloads_total", result="ok") == 2, 5, "reload")
    ws3 = request_json(r.ports["admin"], "GET", "/admin/v1/workers")
    ws3 = ws3["workers"] if isinstance(ws3, dict) else ws3
    check(sorted(w.get("dp_rank") for w in ws3 if w["role"] == "decode") == [0, 1], "after dp_size 2: %r" % ws3)
    st, out = curl(r.port, "/generate", {"text": "after", "sampling_params": {"max_new_tokens": 3}})
    check(st == 200, out[:200], r)
    stop_clean(r)


def scenario_vllm_ranks():
    """vllm, prefill dp_size 2 and decode dp_size 2: each leg carries X-data-parallel-rank with its own
    worker's rank (a client's header is not forwarded), the body no data_parallel_rank; both ranks of
    each role are used."""
    p, d = sim("prefill"), sim("decode")
    r = router([], [], config="protocol: vllm\n%spolicy: { prefill: round_robin, decode: round_robin }" %
               workers_yaml(p, 2, d, 2))
    n = 4
    for i in range(n):
        b = {"model": "pdsim", "prompt": "once upon a time %d" % i, "max_tokens": 4}
        st, out = curl(r.port, "/v1/completions", b, "-H", "X-data-parallel-rank: 9")
        check(st == 200, "%d %s" % (st, out[:300]), r)
    lp, ld = stats(p)["last"][-n:], stats(d)["last"][-n:]
    check(sorted(e["x_data_parallel_rank"] for e in lp) == ["0", "0", "1", "1"], "prefill %r" % lp)
    check(sorted(e["x_data_parallel_rank"] for e in ld) == ["0", "0", "1", "1"], "decode %r" % ld)
    check(all("data_parallel_rank" not in e["body"] for e in lp + ld), "a body names a rank")
    stop_clean(r)


def scenario_solo_ranks():
    """A request that skips the prefill (conditional disaggregation) names its worker's rank too: a vLLM
    decode's in the header, an sglang regular worker's in the body."""
    p, d, reg = sim("prefill"), sim("decode", "--local-prefill"), sim("both")
    r = router([], [], config="protocol: vllm\n%sdisaggregation: { min_prefill_chars: 1000 }\n"
               "policy: { prefill: round_robin, decode: round_robin }" % workers_yaml(p, 1, d, 2))
    for i in range(2):
        st, out = curl(r.port, "/v1/completions", {"model": "pdsim", "prompt": "hi %d" % i, "max_tokens": 3})
        check(st == 200, "%d %s" % (st, out[:300]), r)
    check(stats(p)["requests"] == 0, "the prefill was called")
    check(sorted(e["x_data_parallel_rank"] for e in stats(d)["last"][-2:]) == ["0", "1"], "decode %r" % stats(d))
    stop_clean(r)
    r = router([], [], config="%s  regular: [ { url: 'http://127.0.0.1:%d', dp_size: 2 } ]\n"
               "disaggregation: { min_prefill_chars: 1000 }\npolicy: { prefill: round_robin, decode: round_robin }"
               % (workers_yaml(p, 1, d, 1), reg.port))
    for i in range(2):
        st, out = curl(r.port, "/generate", {"text": "hi %d" % i, "sampling_params": {"max_new_tokens": 3}})
        check(st == 200, "%d %s" % (st, out[:300]), r)
    bodies = [e["body"] for e in stats(reg)["last"][-2:]]
    check(sorted(b["data_parallel_rank"] for b in bodies) == [0, 1], "regular bodies %r" % bodies)
    check(all("bootstrap_room" not in b for b in bodies), "regular bodies %r" % bodies)
    stop_clean(r)


def scenario_dp_aware():
    """--dp-aware (the sglang router's flag): each worker is asked its dp_size (GET /get_server_info) at
    start and becomes that many targets; a worker given dp_size in the file is not asked; a reload keeps the
    learned sizes without asking; ranks reach the legs."""
    p, d = sim("prefill", "--dp-size", "2"), sim("decode", "--dp-size", "3")
    r = router([p], [d], "--dp-aware", "--prefill-policy", "round_robin", "--decode-policy", "round_robin")

    def ranks():
        ws = request_json(r.ports["admin"], "GET", "/admin/v1/workers")
        ws = ws["workers"] if isinstance(ws, dict) else ws
        return {role: sorted(w.get("dp_rank") for w in ws if w["role"] == role) for role in ("prefill", "decode")}
    check(ranks() == {"prefill": [0, 1], "decode": [0, 1, 2]}, "ranks %r" % ranks(), r)
    for i in range(6):
        st, out = curl(r.port, "/generate", {"text": "x %d" % i, "sampling_params": {"max_new_tokens": 2}})
        check(st == 200, "%d %s" % (st, out[:200]), r)
    check(sorted(e["body"]["data_parallel_rank"] for e in stats(d)["last"][-6:]) == [0, 0, 1, 1, 2, 2], "decode")
    check(all(e["room"] % 2 == e["body"]["data_parallel_rank"] for e in stats(p)["last"][-6:]), "rooms")
    check(len([l for l in open(r.log_path) if "--dp-aware: " in l]) == 2, "log", r)
    stop_clean(r)
    # From a file: dp_size written there is not asked for (nor overridden); a worker that cannot be asked
    # is one target (warned); a reload keeps the learned sizes without asking again.
    r = router([], [], "--dp-aware", config="workers:\n"
               "  prefill: [ { url: 'http://127.0.0.1:%d', bootstrap_port: %d, dp_size: 4 } ]\n"
               "  decode: [ 'http://127.0.0.1:%d' ]\n"
               "  regular: [ 'http://127.0.0.1:%d' ]\n" % (p.port, p.ports["bport"], d.port, pdtest.free_port()))

    def ranks2():
        ws = request_json(r.ports["admin"], "GET", "/admin/v1/workers")
        ws = ws["workers"] if isinstance(ws, dict) else ws
        return {role: sorted(w.get("dp_rank", -1) for w in ws if w["role"] == role)
                for role in ("prefill", "decode", "regular")}
    want = {"prefill": [0, 1, 2, 3], "decode": [0, 1, 2], "regular": [-1]}
    check(ranks2() == want, "ranks %r" % ranks2(), r)
    log = [l for l in open(r.log_path) if "--dp-aware: " in l]
    check(len(log) == 2 and any("cannot read the dp_size" in l for l in log), "log %r" % log, r)
    r.proc.send_signal(signal.SIGHUP)
    pdtest.poll_until(lambda: metric_value(metrics(r), "pdr_config_reloads_total", result="ok") == 1, 5, "reload")
    check(ranks2() == want, "after the reload %r" % ranks2(), r)
    check(len([l for l in open(r.log_path) if "--dp-aware: " in l]) == 2, "asked again on reload", r)
    stop_clean(r)


def scenario_config():
    """dp_size out of range is refused where it is written; a worker without it is one target."""
    for bad, want in (("dp_size: 0", "out of range"), ("dp_size: 5000", "out of range"), ("dp_size: two", "integer")):
        fd, path = tempfile.mkstemp(suffix=".yaml")
        with os.fdopen(fd, "w") as f:
            f.write("workers:\n  prefill: [ { url: 'http://127.0.0.1:1', %s } ]\n  decode: [ 'http://127.0.0.1:2' ]\n" % bad)
        out = subprocess.run([pdtest.binary("pdrouter"), "--check-config", path], capture_output=True, text=True)
        os.unlink(path)
        check(out.returncode == 2 and want in out.stderr and ":2:" in out.stderr,
              "%s: %d %s" % (bad, out.returncode, out.stderr))


if __name__ == "__main__":
    pdtest.run_scenario(globals())
