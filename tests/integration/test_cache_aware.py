#!/usr/bin/env python3
"""The cache_aware and power_of_two policies (sglang's), with two pdsim prefills and two decodes.

Scenarios (argv[1]):
  affinity      cache_aware: requests sharing a long system prompt go to the same prefill, two prompt
                families end on different prefills, and the decisions are counted by rule; round_robin
                with the same requests mixes the families on both prefills (the comparison).
  power_of_two  requests spread over both prefills.
  replicas      three routers in front of the same workers, requests spread over them in turn: with
                cache_aware.seed consistent_hash each prompt family reaches one prefill; with
                smallest_tree, routers whose trees differ (one saw another prompt first) split a family.
  pool_thresholds  cache_aware settings per pool and role: a pool whose prefill role never counts a match
                (cache_threshold 1 for the pool, seed smallest_tree for its prefills) alternates a family
                over its prefills, while a pool on the top-level settings keeps it on one.
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
    # sglang's rule: unseen prefixes to the smallest tree, so the two families part deterministically.
    r = router(ps, ds, config="policy: { prefill: %s, decode: least_load }\n"
               "cache_aware: { seed: smallest_tree }" % policy)
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


def owners(ps):
    """family -> the set of prefill indexes that received it."""
    out = {}
    for i, p in enumerate(ps):
        for fam in families_seen(p, stats(p)["requests"]):
            out.setdefault(fam, set()).add(i)
    return out


def replicas(seed):
    ps, ds = [sim("prefill"), sim("prefill")], [sim("decode"), sim("decode")]
    conf = "policy: { prefill: cache_aware, decode: least_load }\ncache_aware: { seed: %s }" % seed
    rs = [router(ps, ds, config=conf) for _ in range(3)]
    # Replica 1 has served another prompt before: its trees differ from the others'.
    st = request(rs[1].port, "POST", "/generate", {"text": "alpha" + FAMILY["a"][5:], "sampling_params":
                                                   {"max_new_tokens": 2}})[0]
    check(st == 200, "status %d" % st, rs[1])
    for k, fam in enumerate(ORDER[:12]):
        send(rs[k % 3], fam, k)
    return rs, owners(ps)


def scenario_replicas():
    try:
        rs, own = replicas("consistent_hash")
        check(all(len(v) == 1 for v in own.values()), "consistent_hash split a family: %r" % own, rs[0])
        for r in rs:
            m = metrics(r)
            check(metric_value(m, "pdr_cache_aware_decisions_total", decision="consistent_hash") >= 1,
                  "no consistent_hash decision counted", r)
        pdtest.stop_all()
        rs, own = replicas("smallest_tree")
        check(any(len(v) == 2 for v in own.values()), "smallest_tree kept every family whole: %r" % own, rs[0])
    finally:
        pdtest.stop_all()


def scenario_pool_thresholds():
    try:
        pools = {}
        for name, model in (("spread", "m-spread"), ("sticky", "m-sticky")):
            pools[name] = ([sim("prefill", "--model", model), sim("prefill", "--model", model)],
                           [sim("decode", "--model", model)])
        lines = ["cache_aware: { seed: consistent_hash, cache_threshold: 0.3 }", "pools:"]
        for name, (ps, ds) in pools.items():
            lines += ["  - name: %s" % name, "    models: [m-%s]" % name,
                      "    policy: { prefill: cache_aware, decode: round_robin }",
                      "    workers:",
                      "      prefill: [%s]" % ", ".join("{ url: http://127.0.0.1:%d, bootstrap_port: %d }"
                                                       % (p.port, p.ports["bport"]) for p in ps),
                      "      decode: [%s]" % ", ".join("http://127.0.0.1:%d" % d.port for d in ds)]
        lines.insert(lines.index("  - name: spread") + 1,
                     "    cache_aware: { cache_threshold: 1.0, prefill: { seed: smallest_tree } }")
        lines.insert(lines.index("  - name: sticky") + 1, "    cache_aware: { decode: { cache_threshold: 1.0 } }")
        r = router([], [], config="\n".join(lines))
        for name in pools:
            for k in range(6):
                body = {"model": "m-" + name, "text": FAMILY["a"] + " question %d" % k,
                        "sampling_params": {"max_new_tokens": 2}}
                st = request(r.port, "POST", "/generate", body)[0]
                check(st == 200, "status %d" % st, r)
        n = {name: [stats(p)["requests"] for p in ps] for name, (ps, _) in pools.items()}
        check(n["spread"] == [3, 3], "the spread pool's prefills got %r (expected to alternate)" % n["spread"], r)
        check(sorted(n["sticky"]) == [0, 6], "the sticky pool's prefills got %r (expected one)" % n["sticky"], r)
    finally:
        pdtest.stop_all()


if __name__ == "__main__":
    pdtest.run_scenario(globals())
