#!/usr/bin/env python3
"""The cache_aware and power_of_two policies (sglang's), with two pdsim prefills and two decodes.

Scenarios (argv[1]):
  affinity      cache_aware: requests sharing a long system prompt go to the same prefill, two prompt
                families end on different prefills, and the decisions are counted by rule; round_robin
                with the same requests mixes the families on both prefills (the comparison).
  power_of_two  requests spread over both prefills.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check, request  # noqa: E402
from test_router import metric_value, metrics, router, sim, stats  # noqa: E402

FAMILY = {
    "a": " ".join("alpha%d" % i for i in range(300)),
    "b": " ".join("bravo%d" % i for i in range(300)),
}
ORDER = "aabbabba" * 2  # an order round_robin cannot keep apart


def send(r, fam, k):
    body = {"text": FAMILY[fam] + " question %d" % k, "sampling_params": {"max_new_tokens": 2}}
    st = request(r.port, "POST", "/generate", body)[0]
    check(st == 200, "status %d" % st, r)


def families_seen(p, n):
    """The prompt families of the last n requests the prefill received."""
    out = []
    for e in stats(p)["last"][-n:]:
        t = e["body"]["text"]
        out.append("a" if t.startswith("alpha") else "b")
    return out


def run(policy):
    ps, ds = [sim("prefill"), sim("prefill")], [sim("decode"), sim("decode")]
    r = router(ps, ds, config="policy: { prefill: %s, decode: least_load }" % policy)
    for k, fam in enumerate(ORDER):
        send(r, fam, k)
    seen = [families_seen(p, stats(p)["requests"]) for p in ps]
    return r, ps, seen


def scenario_affinity():
    try:
        r, ps, seen = run("cache_aware")
        check(all(len(set(s)) == 1 for s in seen) and {seen[0][0], seen[1][0]} == {"a", "b"},
              "cache_aware mixed the families: %r" % seen, r)
        check(sorted(len(s) for s in seen) == [8, 8], "per prefill %r" % [len(s) for s in seen], r)
        m = metrics(r)
        check(metric_value(m, "pdr_cache_aware_decisions_total", decision="match") >= 14 and
              metric_value(m, "pdr_cache_aware_decisions_total", decision="smallest_tree") >= 1,
              "decisions not counted", r)
        pdtest.stop_all()
        r, ps, seen = run("round_robin")
        check(any(len(set(s)) == 2 for s in seen), "round_robin kept the families apart: %r" % seen, r)
    finally:
        pdtest.stop_all()


def scenario_power_of_two():
    try:
        ps, ds = [sim("prefill"), sim("prefill")], [sim("decode"), sim("decode")]
        r = router(ps, ds, config="policy: { prefill: power_of_two, decode: power_of_two }")
        for k in range(40):
            send(r, "a", k)
        n = [stats(p)["requests"] for p in ps]
        check(sum(n) == 40 and min(n) >= 5, "power_of_two spread %r" % n, r)
    finally:
        pdtest.stop_all()


if __name__ == "__main__":
    pdtest.run_scenario(globals())
