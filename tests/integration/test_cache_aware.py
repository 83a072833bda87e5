#!/usr/bin/env python3
"""The cache_aware and power_of_two policies (sglang's), with two pdsim prefills and two decodes.

Scenarios (argv[1]):
  affinity      cache_aware: requests sharing a long system prompt go to the same prefill, two prompt
                families end on different prefills, and the decisions are counted by rule; round_robin
                with the same requests mixes the families on both prefills (the comparison).
  power_of_two  requests spread over both prefills.
  power_of_two_load  two decodes, one holding a request that never ends: every new request goes to the
                other one (of two candidates the less loaded wins); round_robin, random or a pick that
                ignores loads sends some to the held decode.
  least_load_load  the same with least_load (pdrouter's name for the same rule).
  round_robin   sequential requests alternate over two prefills, strictly.
  random        sequential requests spread over two prefills, in no fixed alternation.
  replicas      three routers in front of the same workers, requests spread over them in turn: with
                cache_aware.seed consistent_hash each prompt family reaches one prefill; with
                smallest_tree, routers whose trees differ (one saw another prompt first) split a family.
  replicas_order  two routers listing the same prefills in different orders send each new prompt
                (consistent_hash seed) to the same prefill, and the prompts spread over both prefills:
                the ring is keyed by the workers' URLs, not by their order or a per-process id.
  pool_thresholds  cache_aware settings per pool and role: a pool whose prefill role never counts a match
                (cache_threshold 1 for the pool, seed smallest_tree for its prefills) alternates a family
                over its prefills, while a pool on the top-level settings keeps it on one.
"""
import os
import sys
import threading

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
        # Sequential requests leave both prefills idle at each pick, so each goes to either with
        # probability 1/2: a prefill gets fewer than 5 of 40 with probability
        # 2 * sum(C(40, k), k <= 4) / 2^40 = 1.9e-7.
        check(sum(n) == 40 and min(n) >= 5, "power_of_two spread %r" % n, r)
    finally:
        pdtest.stop_all()


def worker_inflight(r, role, w):
    return metric_value(metrics(r), "pdr_worker_inflight_requests", role=role, url="http://127.0.0.1:%d" % w.port)


def settled(r, role, ws, want):
    """Waits until the router's in-flight count of each worker in ws is the one in want."""
    pdtest.poll_until(lambda: [worker_inflight(r, role, w) for w in ws] == want, 10,
                      "in-flight counts %r" % (want,))


def by_load(policy):
    try:
        ps, ds = [sim("prefill", "--kv-timeout-ms", "600000")], [sim("decode"), sim("decode")]
        r = router(ps, ds, config="policy: { prefill: round_robin, decode: %s }\n" % policy +
                   "timeouts: { first_byte_ms: 600000, kv_transfer_ms: 600000 }")
        pdtest.request_json(ds[0].port, "POST", "/pdsim/fault", {"hang_before_headers": 1})
        body = {"text": "hold", "sampling_params": {"max_new_tokens": 2}}

        def send_bg():
            try:
                request(r.port, "POST", "/generate", body, timeout=300)
            except OSError:
                pass  # the held request ends when the test stops the processes

        # Load decode 0 with one request that never ends. Both decodes are idle at each try, so a try
        # reaches decode 0 with probability 1/2: 40 tries all miss it with probability 2^-40.
        for _ in range(40):
            t = threading.Thread(target=send_bg, daemon=True)
            t.start()
            pdtest.poll_until(lambda: stats(ds[0])["requests"] == 1 or not t.is_alive(), 10, "a try to end")
            if stats(ds[0])["requests"] == 1:
                break
            settled(r, "decode", ds, [0, 0])
        check(stats(ds[0])["requests"] == 1, "no request reached decode 0", r)
        settled(r, "decode", ds, [1, 0])
        # Loads 1 and 0: with two candidates both are drawn at every pick and the idle one wins, every time.
        before = stats(ds[1])["requests"]
        for k in range(30):
            try:
                st = request(r.port, "POST", "/generate", {"text": "q%d" % k, "sampling_params":
                                                           {"max_new_tokens": 2}}, timeout=5)[0]
            except OSError as e:
                check(False, "request %d got no answer (sent to the held decode?): %s" % (k, e), r)
            check(st == 200, "status %d" % st, r)
            settled(r, "decode", ds, [1, 0])
        n = [stats(ds[0])["requests"], stats(ds[1])["requests"] - before]
        check(n == [1, 30], "%s sent %r of 30 to the held and the idle decode" % (policy, n), r)
    finally:
        pdtest.stop_all()


def scenario_power_of_two_load():
    by_load("power_of_two")


def scenario_least_load_load():
    by_load("least_load")


def prefill_sequence(policy, n):
    """The prefill index each of n sequential requests reached, under the prefill policy."""
    ps, ds = [sim("prefill"), sim("prefill")], [sim("decode")]
    r = router(ps, ds, config="policy: { prefill: %s, decode: round_robin }" % policy)
    seq = []
    for k in range(n):
        before = [stats(p)["requests"] for p in ps]
        send(r, "a", k)
        seq.append([stats(p)["requests"] - b for p, b in zip(ps, before)].index(1))
    return r, seq


def scenario_round_robin():
    try:
        r, seq = prefill_sequence("round_robin", 20)
        check(all(seq[k] != seq[k + 1] for k in range(len(seq) - 1)), "round_robin did not alternate: %r" % seq, r)
    finally:
        pdtest.stop_all()


def scenario_random():
    try:
        r, seq = prefill_sequence("random", 40)
        n = [seq.count(0), seq.count(1)]
        # Each request reaches either prefill with probability 1/2: fewer than 5 of 40 on one has probability
        # 1.9e-7 (as in power_of_two above), a strict alternation 2 * 2^-40.
        check(min(n) >= 5, "random spread %r" % n, r)
        check(any(seq[k] == seq[k + 1] for k in range(len(seq) - 1)), "random alternated strictly: %r" % seq, r)
    finally:
        pdtest.stop_all()


def scenario_replicas_order():
    try:
        ps, ds = [sim("prefill"), sim("prefill")], [sim("decode")]
        conf = "policy: { prefill: cache_aware, decode: round_robin }\ncache_aware: { seed: consistent_hash }"
        rs = [router(ps, ds, config=conf), router(ps[::-1], ds, config=conf)]
        keys = ["key %d: " % k + " ".join("word%d" % i for i in range(40)) for k in range(64)]
        dest = []
        for r in rs:
            seen = []
            for k, text in enumerate(keys):
                # Idle workers at each pick: the ring's load bound never moves a prompt.
                settled(r, "prefill", ps, [0, 0])
                before = [stats(p)["requests"] for p in ps]
                st = request(r.port, "POST", "/generate", {"text": text, "sampling_params": {"max_new_tokens": 2}})[0]
                check(st == 200, "status %d" % st, r)
                after = [stats(p)["requests"] for p in ps]
                seen.append([a - b for a, b in zip(after, before)].index(1))
            dest.append(seen)
        diff = [k for k in range(len(keys)) if dest[0][k] != dest[1][k]]
        check(not diff, "the routers sent keys %r to different prefills" % diff, rs[0])
        # The ring gives each prefill about half of the keys (64 points per worker): one gets fewer than 4 of
        # 64 with probability below 1e-8 even at a 35% share.
        n = [dest[0].count(i) for i in range(len(ps))]
        check(min(n) >= 4, "the keys did not spread over the prefills: %r" % n, rs[0])
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
