#!/usr/bin/env python3
"""Integration tests of pdrouter's worker discovery with real pdsim workers: Kubernetes (against
k8s_replay.py, a scripted API server replaying real list and watch responses) and DNS (against a real
dnsmasq on a loopback port).

Usage: test_discovery.py SCENARIO   (one of the functions named scenario_*; ctest runs each separately)
Exits 77 (skipped) when the scenario's server is not installed. Every wait polls for the event.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check, request, request_json  # noqa: E402
from test_admin import admin, slow_stream, stream_complete  # noqa: E402
from test_pools import completion, counts, expect_routed, start_pool  # noqa: E402
from test_router import BODIES, metric_value, router, sim, stats  # noqa: E402

GEN = BODIES["/generate"]
HERE = os.path.dirname(os.path.abspath(__file__))


def workers(r, role=None):
    ws = admin(r, "GET", "/admin/v1/workers")["workers"]
    return [w for w in ws if role is None or w["role"] == role]


def ready(r):
    try:
        return request(r.port, "GET", "/readiness", timeout=1)[0] == 200
    except OSError:
        return False


class K8s:
    """k8s_replay.py on a free port; .put(), .delete(), .expire() drive its pods."""

    def __init__(self, token, namespace):
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "k8s_replay.py"), "--token", token,
                                      "--namespace", namespace], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
        line = self.proc.stdout.readline()
        assert line.startswith("PORT "), line
        self.port = int(line.split()[1])

    def control(self, op, body):
        return request_json(self.port, "POST", "/control/" + op, body)

    def put(self, *pods):
        return self.control("put", {"pods": list(pods)})

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(10)


def pod(name, role, proc, ready=True, ann=True, labels=None):
    spec = {"name": name, "role": role, "ip": "127.0.0.1", "ready": ready, "phase": "Running", "port": proc.port}
    if labels:
        spec["labels"] = labels
    if ann and role == "prefill":
        spec["ann"] = str(proc.ports["bport"])
    return spec


def scenario_kubernetes():
    """Workers from the Kubernetes API only (no static list): the router becomes ready once the list
    gives it a prefill and a decode; pods show up in the admin API with source kubernetes, their pod name
    and the sglang.ai/bootstrap-port annotation; a pod turning ready joins, a pod turning not ready or
    deleted leaves (no new request goes to it; a stream in flight on it completes); a 410 Gone re-lists."""
    ps = [sim("prefill"), sim("prefill")]
    d = sim("decode", "--decode-us-per-token", "20000")
    fd, tok_path = tempfile.mkstemp(prefix="pdrouter-k8s-token-")
    with os.fdopen(fd, "w") as f:
        f.write("k8s-token\n")
    api = K8s("k8s-token", "sglang")
    try:
        api.put(pod("sglang-prefill-0", "prefill", ps[0]), pod("sglang-prefill-1", "prefill", ps[1], ready=False),
                pod("sglang-decode-0", "decode", d))
        cfg = ("discovery:\n  kubernetes:\n    api_server: http://127.0.0.1:%d\n    namespace: sglang\n"
               "    token_file: %s\n    prefill: { selector: \"app=sglang,role=prefill\" }\n"
               "    decode: { selector: \"app=sglang,role=decode\" }\n"
               "health: { interval_ms: 200 }" % (api.port, tok_path))
        r = router([], [], config=cfg)
        ws = workers(r)
        check(sorted((w["role"], w["name"], w["source"]) for w in ws) ==
              [("decode", "sglang-decode-0", "kubernetes"), ("prefill", "sglang-prefill-0", "kubernetes")], repr(ws), r)
        w0 = [w for w in ws if w["name"] == "sglang-prefill-0"][0]
        check(w0["url"] == "http://127.0.0.1:%d" % ps[0].port and w0["bootstrap_port"] == ps[0].ports["bport"],
              repr(w0), r)
        st, _, out = request(r.port, "POST", "/generate", GEN)
        check(st == 200 and stats(ps[0])["requests"] == 1, "request through a discovered pair: %d %r" % (st, out), r)
        s = admin(r, "GET", "/admin/v1/status")
        check(s["discovery"] == ["kubernetes"], repr(s), r)

        # sglang-prefill-1 becomes ready: it joins and takes requests.
        api.put(pod("sglang-prefill-1", "prefill", ps[1]))
        pdtest.poll_until(lambda: len(workers(r, "prefill")) == 2, 5, "the ready pod to join")
        for _ in range(6):
            check(request(r.port, "POST", "/generate", GEN)[0] == 200, "request with two prefills", r)
        check(stats(ps[1])["requests"] >= 1, "the joined pod takes no requests", r)

        # sglang-prefill-0 turns not ready: it leaves; requests go to the other.
        api.put(pod("sglang-prefill-0", "prefill", ps[0], ready=False))
        pdtest.poll_until(lambda: [w["name"] for w in workers(r, "prefill")] == ["sglang-prefill-1"], 5,
                          "the not-ready pod to leave")
        n0 = stats(ps[0])["requests"]
        for _ in range(4):
            check(request(r.port, "POST", "/generate", GEN)[0] == 200, "request after not-ready", r)
        check(stats(ps[0])["requests"] == n0, "a not-ready pod got requests", r)

        # The decode pod is deleted while a stream runs on it: the stream completes, then no decode.
        t, result = slow_stream(r, tokens=25)
        pdtest.poll_until(lambda: stats(d)["inflight"] >= 1, 5, "the stream")
        api.control("delete", {"names": ["sglang-decode-0"]})
        pdtest.poll_until(lambda: not workers(r, "decode"), 5, "the deleted pod to leave")
        st, _, out = request(r.port, "POST", "/generate", GEN)
        check(st == 503 and b"no healthy decode" in out, "without decode pods: %d %r" % (st, out), r)
        check(not ready(r), "readiness with no decode pod", r)
        t.join(10)
        check(stream_complete(result, 25), "the stream on the deleted pod was cut", r)

        # The watch history expires (410 Gone): a re-list brings the decode back.
        api.control("expire", {"role": "decode", "put": [pod("sglang-decode-0", "decode", d)]})
        pdtest.poll_until(lambda: ready(r), 5, "readiness after the re-list")
        check(request(r.port, "POST", "/generate", GEN)[0] == 200, "request after the re-list", r)
        log = request_json(api.port, "GET", "/control/log")
        lists = [e for e in log if e["role"] == "decode" and not e["watch"]]
        check(len(lists) >= 2 and lists[-1]["rv"] is None and all(e["auth_ok"] for e in log),
              "no re-list after 410: %r" % log[-5:], r)
        m = request(r.port, "GET", "/metrics")[2].decode()
        check(metric_value(m, "pdr_workers", role="prefill", source="kubernetes") == 1 and
              metric_value(m, "pdr_workers_removed_total", source="kubernetes") >= 2, m[-2500:], r)
        check(r.alive(), "router died", r)
    finally:
        pdtest.stop_all()
        api.close()


def pool_k8s_yaml(name, model, api, tok_path, prefill_sel, decode_sel):
    return ("  - name: %s\n    models: [%s]\n    discovery:\n      kubernetes:\n"
            "        api_server: http://127.0.0.1:%d\n        namespace: sglang\n        token_file: %s\n"
            "        prefill: { selector: \"%s\" }\n        decode: { selector: \"%s\" }\n"
            % (name, model, api.port, tok_path, prefill_sel, decode_sel))


def scenario_pools_kubernetes():
    """Discovery per pool: two pools, each with its own Kubernetes selectors (a "model" label on the pods),
    and no static worker. Each pool gets only the pods its selectors match; a request for a model reaches
    only its pool's discovered workers; a reload that changes one pool's prefill selector swaps that
    pool's prefill for the newly selected pod and leaves the other pool's workers (and sources) alone;
    a reload that removes a pool takes its discovered workers out."""
    pools = [start_pool({"name": "alpha", "models": ["model-a"], "protocol": "sglang"}),
             start_pool({"name": "beta", "models": ["model-b"], "protocol": "sglang"})]
    spare = start_pool({"name": "gamma", "models": ["model-b"], "protocol": "sglang"})
    fd, tok_path = tempfile.mkstemp(prefix="pdrouter-k8s-token-")
    with os.fdopen(fd, "w") as f:
        f.write("k8s-token\n")
    api = K8s("k8s-token", "sglang")
    try:
        for p, m in ((pools[0], "a"), (pools[1], "b"), (spare, "c")):
            api.put(pod("%s-prefill-0" % p["name"], "prefill", p["prefill"], labels={"model": m}),
                    pod("%s-decode-0" % p["name"], "decode", p["decode"], labels={"model": m}))
        sel = "app=sglang,role=%s,model=%s"
        cfg = ("health: { interval_ms: 200 }\npools:\n" +
               pool_k8s_yaml("alpha", "model-a", api, tok_path, sel % ("prefill", "a"), sel % ("decode", "a")) +
               pool_k8s_yaml("beta", "model-b", api, tok_path, sel % ("prefill", "b"), sel % ("decode", "b")))
        r = router([], [], config=cfg)
        pdtest.poll_until(lambda: len(workers(r)) == 4, 5, "both pools' pods")
        ws = workers(r)
        check(sorted((w["pool"], w["role"], w["name"], w["source"]) for w in ws) ==
              [("alpha", "decode", "alpha-decode-0", "kubernetes"), ("alpha", "prefill", "alpha-prefill-0", "kubernetes"),
               ("beta", "decode", "beta-decode-0", "kubernetes"), ("beta", "prefill", "beta-prefill-0", "kubernetes")],
              repr(ws), r)
        check(all(w["url"] == "http://127.0.0.1:%d" % p[w["role"]].port
                  for p in pools for w in ws if w["pool"] == p["name"]), repr(ws), r)
        everyone = pools + [spare]
        expect_routed(r, everyone, pools[0], "model-a", 3)
        expect_routed(r, everyone, pools[1], "model-b", 3)
        check(admin(r, "GET", "/admin/v1/status")["discovery"] == ["kubernetes"], "status", r)

        # A pod of beta's joins beta only; leaving, it leaves beta only.
        extra = sim("decode")
        api.put(pod("beta-decode-1", "decode", extra, labels={"model": "b"}))
        pdtest.poll_until(lambda: len(workers(r, "decode")) == 3, 5, "beta's new pod")
        check([w["pool"] for w in workers(r, "decode") if w["name"] == "beta-decode-1"] == ["beta"],
              repr(workers(r)), r)
        api.control("delete", {"names": ["beta-decode-1"]})
        pdtest.poll_until(lambda: len(workers(r, "decode")) == 2, 5, "beta's pod to leave")

        # Reload: beta's prefill selector now picks gamma's pod (model=c); alpha's sources keep running.
        alpha_ids = sorted(w["id"] for w in workers(r) if w["pool"] == "alpha")
        with open(r.config_path) as f:
            text = f.read()
        with open(r.config_path, "w") as f:
            f.write(text.replace(sel % ("prefill", "b"), sel % ("prefill", "c")))
        out = admin(r, "POST", "/admin/v1/reload")
        check(out["reloaded"] is True, repr(out), r)
        # beta's sources restart with its new selectors, so its decode (same selector) is listed again
        # by the restarted watch: wait for both beta workers, then compare one snapshot.
        pdtest.poll_until(lambda: sorted(w["name"] for w in workers(r) if w["pool"] == "beta") ==
                          ["beta-decode-0", "gamma-prefill-0"], 5, "beta's new prefill and its decode")
        ws = workers(r)
        check(sorted(w["id"] for w in ws if w["pool"] == "alpha") == alpha_ids, repr(ws), r)
        check(sorted(w["name"] for w in ws) ==
              ["alpha-decode-0", "alpha-prefill-0", "beta-decode-0", "gamma-prefill-0"], repr(ws), r)
        before = counts(everyone)
        for _ in range(3):
            check(completion(r, "model-b")[0] == 200, "model-b after the reload", r)
        after = counts(everyone)
        check(after["gamma"][0] - before["gamma"][0] == 3 and after["beta"][0] == before["beta"][0] and
              after["beta"][1] - before["beta"][1] == 3, "model-b after the reload: %r -> %r" % (before, after), r)
        expect_routed(r, everyone, pools[0], "model-a", 2)
        log = request_json(api.port, "GET", "/control/log")
        check(any(e["selector"] == sel % ("prefill", "c") for e in log), "no list with the new selector", r)

        # Reload without beta: its discovered workers leave; alpha stays.
        with open(r.config_path, "w") as f:
            f.write(text[:text.index("  - name: beta")])
        out = admin(r, "POST", "/admin/v1/reload")
        check(out["reloaded"] is True, repr(out), r)
        pdtest.poll_until(lambda: len(workers(r)) == 2, 5, "beta's workers to leave")
        check(sorted(w["id"] for w in workers(r)) == alpha_ids, repr(workers(r)), r)
        check(completion(r, "model-b")[0] == 404, "model-b without its pool", r)
        check(r.alive(), "router died", r)
        # A clean exit: every source stopped and freed (under ASan a leak makes this non-zero).
        rc = r.stop()
        check(rc == 0 and "Sanitizer" not in r.log_tail(), "pdrouter exited with %s" % rc, r)
    finally:
        pdtest.stop_all()
        api.close()
        os.unlink(tok_path)


def sim_on(role, host, port, bport=None):
    """A pdsim of role on host:port (a loopback address of its own, as a pod's IP), its shim on bport."""
    argv = ["pdsim", "--role", role, "--host", host, "--port", str(port)]
    if bport is not None:
        argv += ["--bootstrap-port", str(bport)]
    p = pdtest.start(argv, name="pdsim-%s-%s-%d" % (role, host, port), health_path=None)
    p.host, p.port = host, port
    pdtest.poll_until(lambda: _up(host, port, p), 10, "pdsim on %s:%d" % (host, port))
    return p


def pool_pod(name, ip, role_label, bport=None, model="a", extra_labels=None):
    """A pod of the InferencePool scenario: labels app=sglang, model, and llm-d.ai/role unless None."""
    labels = {"model": model}
    if role_label is not None:
        labels["llm-d.ai/role"] = role_label
    labels.update(extra_labels or {})
    spec = {"name": name, "role": "pool", "ip": ip, "ready": True, "phase": "Running", "port": None,
            "labels": labels}
    if bport is not None:
        spec["ann"] = str(bport)
    return spec


def scenario_kubernetes_inference_pool():
    """Workers from an InferencePool (discovery.kubernetes.inference_pool): the source reads the pool,
    then lists and watches the pods its matchLabels select; each pod's role is its llm-d.ai/role label
    (prefill, decode, both; a pod without the label is a decode; an unknown value is not used), its
    workers are podIP:port for each of spec.targetPorts, named POD:PORT. Requests go through the discovered
    pairs. A pod
    whose labels stop matching leaves; a new selector, then a second target port, are followed (two
    workers for one pod); an appProtocol pdrouter cannot speak is refused with a log line and changes
    nothing, as do deleting the pool and an API server that refuses to list it for a while."""
    p1, p2 = pdtest.free_port(), pdtest.free_port()
    bp = {ip: pdtest.free_port() for ip in ("127.0.0.2", "127.0.0.4", "127.0.0.6")}
    fd, tok_path = tempfile.mkstemp(prefix="pdrouter-k8s-token-")
    with os.fdopen(fd, "w") as f:
        f.write("k8s-token\n")
    api = K8s("k8s-token", "llm")
    try:
        sims = {
            "pre-0": sim_on("prefill", "127.0.0.2", p1, bp["127.0.0.2"]),
            "dec-0": sim_on("decode", "127.0.0.3", p1),
            "both-0": sim_on("both", "127.0.0.4", p1, bp["127.0.0.4"]),
            "unl-0": sim_on("decode", "127.0.0.5", p1),
            "pre-b": sim_on("prefill", "127.0.0.6", p1, bp["127.0.0.6"]),
        }
        rank2 = sim_on("decode", "127.0.0.3", p2)  # dec-0's second target port
        api.put(pool_pod("pre-0", "127.0.0.2", "prefill", bp["127.0.0.2"]),
                pool_pod("dec-0", "127.0.0.3", "decode"),
                pool_pod("both-0", "127.0.0.4", "both", bp["127.0.0.4"]),
                pool_pod("unl-0", "127.0.0.5", None),
                pool_pod("odd-0", "127.0.0.7", "router"),
                pool_pod("pre-b", "127.0.0.6", "prefill", bp["127.0.0.6"], model="b"))
        api.control("pool", {"name": "llm-pool", "matchLabels": {"app": "sglang", "model": "a"}, "ports": [p1]})
        cfg = ("discovery:\n  kubernetes:\n    api_server: http://127.0.0.1:%d\n    namespace: llm\n"
               "    token_file: %s\n    inference_pool: llm-pool\n"
               "health: { interval_ms: 200 }\npolicy: { prefill: round_robin, decode: round_robin }"
               % (api.port, tok_path))
        r = router([], [], config=cfg)

        def roles():
            return sorted((w["role"], w["name"], w["url"], w["source"]) for w in workers(r))

        u = lambda ip, port=p1: "http://%s:%d" % (ip, port)  # noqa: E731
        n = lambda pod, port=p1: "%s:%d" % (pod, port)  # noqa: E731
        want = [("decode", n("both-0"), u("127.0.0.4"), "kubernetes"), ("decode", n("dec-0"), u("127.0.0.3"), "kubernetes"),
                ("decode", n("unl-0"), u("127.0.0.5"), "kubernetes"),
                ("prefill", n("both-0"), u("127.0.0.4"), "kubernetes"), ("prefill", n("pre-0"), u("127.0.0.2"), "kubernetes")]
        pdtest.poll_until(lambda: roles() == want, 5, "the pool's pods by role")
        check([w["bootstrap_port"] for w in workers(r, "prefill") if w["name"] == n("pre-0")] == [bp["127.0.0.2"]],
              repr(workers(r)), r)

        def served(names, n):
            before = {k: sim_requests_at(sims[k]) for k in names}
            for _ in range(n):
                st, _, out = request(r.port, "POST", "/generate", GEN)
                check(st == 200, "request through the pool's pairs: %d %r" % (st, out), r)
            return {k: sim_requests_at(sims[k]) - before[k] for k in names}

        # pdsim's "both" is a whole-request engine, not one that can take either leg of a PD pair as a
        # "both" engine does: its two workers are drained before any request.
        for w in workers(r):
            if w["name"] == n("both-0"):
                admin(r, "POST", "/admin/v1/workers/%s/drain" % w["id"], expect=202)
        got = served(list(sims), 6)
        check(got["pre-0"] == 6 and got["dec-0"] >= 1 and got["unl-0"] >= 1 and got["both-0"] == 0 and
              got["pre-b"] == 0, "requests by pod: %r" % got, r)
        check("pod odd-0: label llm-d.ai/role=\"router\"" in r.log_tail(200), "no warning about odd-0", r)

        # dec-0's labels stop matching the pool's selector: it leaves.
        api.put(pool_pod("dec-0", "127.0.0.3", "decode", model="b"))
        pdtest.poll_until(lambda: n("dec-0") not in [w["name"] for w in workers(r)], 5, "dec-0 to leave")
        got = served(["dec-0", "unl-0"], 4)
        check(got["dec-0"] == 0 and got["unl-0"] == 4, "a pod that left got requests: %r" % got, r)

        # The pool selects model=b: pre-b and dec-0 are its pods now, nothing of model=a.
        api.control("pool", {"name": "llm-pool", "matchLabels": {"app": "sglang", "model": "b"}, "ports": [p1]})
        pdtest.poll_until(lambda: roles() == [("decode", n("dec-0"), u("127.0.0.3"), "kubernetes"),
                                              ("prefill", n("pre-b"), u("127.0.0.6"), "kubernetes")], 5,
                          "the new selector's pods")
        got = served(["pre-b", "dec-0", "pre-0"], 3)
        check(got["pre-b"] == 3 and got["dec-0"] == 3 and got["pre-0"] == 0, "after the new selector: %r" % got, r)

        # A second target port: dec-0 is two decode workers (its two ranks); pre-b's second port serves
        # nothing here, so the test drains it before sending requests.
        api.control("pool", {"name": "llm-pool", "matchLabels": {"app": "sglang", "model": "b"}, "ports": [p1, p2]})
        two = [("decode", n("dec-0"), u("127.0.0.3"), "kubernetes"),
               ("decode", n("dec-0", p2), u("127.0.0.3", p2), "kubernetes"),
               ("prefill", n("pre-b"), u("127.0.0.6"), "kubernetes"),
               ("prefill", n("pre-b", p2), u("127.0.0.6", p2), "kubernetes")]
        pdtest.poll_until(lambda: roles() == sorted(two), 5, "a worker per target port")
        dead = [w["id"] for w in workers(r, "prefill") if w["name"] == n("pre-b", p2)][0]
        admin(r, "POST", "/admin/v1/workers/%s/drain" % dead, expect=202)
        r0, r1 = sim_requests_at(sims["dec-0"]), sim_requests_at(rank2)
        for _ in range(4):
            check(request(r.port, "POST", "/generate", GEN)[0] == 200, "request with two decode ranks", r)
        check(sim_requests_at(sims["dec-0"]) - r0 >= 1 and sim_requests_at(rank2) - r1 >= 1,
              "both ranks of dec-0 take requests", r)

        # The API server refuses the pool's list twice (403) after its watch expired: the pool watcher logs
        # the RBAC it needs, backs off and lists again; the workers stay and requests go on meanwhile.
        ids = sorted(w["id"] for w in workers(r))
        api.control("fail", {"role": "inferencepool", "status": 403, "count": 2})
        api.control("expire", {"role": "inferencepool"})
        pdtest.poll_until(lambda: "watch on inferencepools (API group inference.networking.k8s.io)" in
                          r.log_tail(200), 5, "the RBAC hint")
        check(request(r.port, "POST", "/generate", GEN)[0] == 200, "request while the pool cannot be listed", r)
        pdtest.poll_until(lambda: [e["status"] for e in request_json(api.port, "GET", "/control/log")
                                   if e["role"] == "inferencepool" and not e["watch"]][-3:] == [403, 403, 200],
                          10, "the pool listed again after the failures")
        check(sorted(w["id"] for w in workers(r)) == ids, "an API server failure changed the workers", r)

        # appProtocol h2c: refused with a log line; the pool's last spec stays.
        api.control("pool", {"name": "llm-pool", "matchLabels": {"app": "sglang", "model": "a"}, "ports": [p1],
                             "appProtocol": "kubernetes.io/h2c"})
        pdtest.poll_until(lambda: "appProtocol \"kubernetes.io/h2c\"" in r.log_tail(200), 5, "the refusal")
        # Deleting the pool changes nothing either.
        api.control("pool_delete", {"name": "llm-pool"})
        pdtest.poll_until(lambda: "InferencePool llm-pool was deleted" in r.log_tail(200), 5, "the deletion")
        check(sorted(w["id"] for w in workers(r)) == ids, "the refused or deleted pool changed the workers", r)
        check(request(r.port, "POST", "/generate", GEN)[0] == 200, "request after the refusal", r)

        log = request_json(api.port, "GET", "/control/log")
        pools = [e for e in log if e["role"] == "inferencepool"]
        check(pools and all(e["field"] == "metadata.name=llm-pool" and e["namespace"] == "llm" for e in pools) and
              any(e["watch"] for e in pools) and all(e["auth_ok"] for e in log), "pool requests: %r" % pools[:3], r)
        pods = [e for e in log if e["role"] != "inferencepool"]
        check({e["selector"] for e in pods} == {"app=sglang,model=a", "app=sglang,model=b"}, repr(pods[-3:]), r)
        check(r.alive(), "router died", r)
        rc = r.stop()
        check(rc == 0 and "Sanitizer" not in r.log_tail(), "pdrouter exited with %s" % rc, r)
    finally:
        pdtest.stop_all()
        api.close()
        os.unlink(tok_path)


def scenario_kubernetes_inference_pool_sidecar():
    """A decode pod's sidecar (sidecar.enabled) takes its prefills from the InferencePool: the pool's
    prefill pods join as prefills, its decode pods are not used (the decode is the pod's own engine, the one
    static decode; logged), and a request whose header names a pool prefill is served by it and the local
    engine."""
    p1 = pdtest.free_port()
    bp = pdtest.free_port()
    fd, tok_path = tempfile.mkstemp(prefix="pdrouter-k8s-token-")
    with os.fdopen(fd, "w") as f:
        f.write("k8s-token\n")
    api = K8s("k8s-token", "llm")
    try:
        pre = sim_on("prefill", "127.0.0.2", p1, bp)
        other = sim_on("decode", "127.0.0.3", p1)
        local = sim("decode")
        api.put(pool_pod("pre-0", "127.0.0.2", "prefill", bp), pool_pod("dec-0", "127.0.0.3", "decode"))
        api.control("pool", {"name": "llm-pool", "matchLabels": {"app": "sglang", "model": "a"}, "ports": [p1]})
        cfg = ("sidecar: { enabled: true }\nworkers:\n  decode:\n    - { url: http://127.0.0.1:%d }\n"
               "discovery:\n  kubernetes:\n    api_server: http://127.0.0.1:%d\n    namespace: llm\n"
               "    token_file: %s\n    inference_pool: llm-pool\nhealth: { interval_ms: 200 }"
               % (local.port, api.port, tok_path))
        r = router([], [], config=cfg)
        want = [("decode", "http://127.0.0.1:%d" % local.port, "static"),
                ("prefill", "http://127.0.0.2:%d" % p1, "kubernetes")]
        pdtest.poll_until(lambda: sorted((w["role"], w["url"], w["source"]) for w in workers(r)) == want, 5,
                          "the pool's prefill and the local decode only")
        pdtest.poll_until(lambda: "decode endpoints are not used" in r.log_tail(200), 5, "the log line")
        st, _, out = request(r.port, "POST", "/generate", GEN, headers={"x-prefiller-host-port": "127.0.0.2:%d" % p1})
        check(st == 200 and sim_requests_at(pre) == 1 and stats(local)["requests"] == 1 and
              sim_requests_at(other) == 0, "a request through the sidecar: %d %r" % (st, out[:200]), r)
    finally:
        pdtest.stop_all()
        api.close()


def sim_requests_at(p):
    return request_json(p.port, "GET", "/pdsim/stats", host=p.host)["requests"]


def start_dnsmasq(hosts_path):
    """dnsmasq on 127.0.0.1 at a free port, answering *.test from hosts_path alone; exits 77 without it."""
    exe = shutil.which("dnsmasq") or ("/usr/sbin/dnsmasq" if os.path.exists("/usr/sbin/dnsmasq") else None)
    if exe is None:
        print("dnsmasq is not installed: skipped")
        sys.exit(77)
    port = pdtest.free_port()
    argv = [exe, "--no-daemon", "--conf-file=/dev/null", "--port=%d" % port, "--listen-address=127.0.0.1",
            "--bind-interfaces", "--no-resolv", "--no-hosts", "--addn-hosts=%s" % hosts_path, "--local=/test/",
            "--pid-file", "--log-facility=-"]
    if os.geteuid() == 0:
        argv.append("--user=root")
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, port


def sim_at(host, port, bport):
    """A prefill pdsim on host:port (a loopback address other than 127.0.0.1) with its shim on bport."""
    p = pdtest.start(["pdsim", "--role", "prefill", "--host", host, "--port", str(port), "--bootstrap-port",
                      str(bport)], name="pdsim-prefill-%s" % host, health_path=None)
    pdtest.poll_until(lambda: _up(host, port, p), 10, "pdsim on %s" % host)
    return p


def _up(host, port, p):
    if not p.alive():
        raise AssertionError("pdsim exited\n" + p.log_tail())
    try:
        return request(port, "GET", "/health", host=host, timeout=1)[0] == 200
    except OSError:
        return False


def sim_requests(host, port):
    return request_json(port, "GET", "/pdsim/stats", host=host)["requests"]


def scenario_dns():
    """Workers from DNS (a headless Service's A records, here dnsmasq's): one prefill worker per address
    of prefill.test at the configured port and bootstrap port; a new address joins and takes requests, a
    removed one leaves (no request reaches it); a reload with new DNS settings restarts the source; a
    resolver that stops answering changes nothing."""
    port, bport = pdtest.free_port(), pdtest.free_port()
    hosts = tempfile.mkdtemp(prefix="pdrouter-dns-")
    hosts_path = os.path.join(hosts, "hosts")

    def write_hosts(prefill_addrs):
        with open(hosts_path + ".new", "w") as f:
            f.write("".join("%s prefill.test\n" % a for a in prefill_addrs) + "127.0.0.1 decode.test\n")
        os.replace(hosts_path + ".new", hosts_path)

    write_hosts(["127.0.0.2"])
    dns, dns_port = start_dnsmasq(hosts_path)
    try:
        ps = {a: sim_at(a, port, bport) for a in ("127.0.0.2", "127.0.0.3")}
        d = sim("decode")
        cfg = ("discovery:\n  dns:\n    resolver: 127.0.0.1:%d\n    interval_ms: 100\n"
               "    prefill: { name: prefill.test, port: %d, bootstrap_port: %d }\n"
               "    decode: { name: decode.test, port: %d }" % (dns_port, port, bport, d.port))
        r = router([], [], config=cfg)
        ws = workers(r)
        check(sorted((w["role"], w["url"], w["source"], w["name"]) for w in ws) ==
              [("decode", "http://127.0.0.1:%d" % d.port, "dns", "127.0.0.1"),
               ("prefill", "http://127.0.0.2:%d" % port, "dns", "127.0.0.2")], repr(ws), r)
        check([w["bootstrap_port"] for w in workers(r, "prefill")] == [bport], repr(ws), r)
        check(request(r.port, "POST", "/generate", GEN)[0] == 200, "request through DNS workers", r)
        check(sim_requests("127.0.0.2", port) == 1, "the request went elsewhere", r)

        # A second address: it joins and takes requests.
        write_hosts(["127.0.0.2", "127.0.0.3"])
        dns.send_signal(signal.SIGHUP)  # dnsmasq re-reads --addn-hosts
        pdtest.poll_until(lambda: len(workers(r, "prefill")) == 2, 5, "the new address to join")
        for _ in range(6):
            check(request(r.port, "POST", "/generate", GEN)[0] == 200, "request with two prefills", r)
        check(sim_requests("127.0.0.3", port) >= 1, "the new address takes no requests", r)

        # The first address goes: it leaves, nothing more reaches it.
        write_hosts(["127.0.0.3"])
        dns.send_signal(signal.SIGHUP)
        pdtest.poll_until(lambda: [w["name"] for w in workers(r, "prefill")] == ["127.0.0.3"], 5,
                          "the removed address to leave")
        n2 = sim_requests("127.0.0.2", port)
        for _ in range(4):
            check(request(r.port, "POST", "/generate", GEN)[0] == 200, "request after the removal", r)
        check(sim_requests("127.0.0.2", port) == n2, "a removed address got requests", r)

        # A reload that changes the DNS settings restarts the source: the same addresses come back as new
        # workers (the old source's thread is joined off the loop, so the reload answers at once).
        old_ids = [w["id"] for w in workers(r)]
        with open(r.config_path) as f:
            text = f.read()
        with open(r.config_path, "w") as f:
            f.write(text.replace("interval_ms: 100", "interval_ms: 150"))
        out = admin(r, "POST", "/admin/v1/reload")
        check(out["reloaded"] is True, repr(out), r)
        pdtest.poll_until(lambda: len(workers(r)) == 2 and not set(w["id"] for w in workers(r)) & set(old_ids), 5,
                          "the restarted source's workers")
        check([w["name"] for w in workers(r, "prefill")] == ["127.0.0.3"], repr(workers(r)), r)

        # The resolver dies: the last answer stands (no emit on failure), requests keep flowing.
        dns.kill()
        dns.wait()
        failed0 = metric_value(request(r.port, "GET", "/metrics")[2].decode(), "pdr_workers_removed_total",
                               source="dns")
        for _ in range(10):
            check(request(r.port, "POST", "/generate", GEN)[0] == 200, "request with the resolver down", r)
        check([w["name"] for w in workers(r, "prefill")] == ["127.0.0.3"] and len(workers(r, "decode")) == 1,
              "a resolver failure changed the pool", r)
        m = request(r.port, "GET", "/metrics")[2].decode()
        check(metric_value(m, "pdr_workers_removed_total", source="dns") == failed0 == 3, m[-1500:], r)
        check(r.alive(), "router died", r)
    finally:
        pdtest.stop_all()
        if dns.poll() is None:
            dns.kill()
            dns.wait()
        shutil.rmtree(hosts, ignore_errors=True)


if __name__ == "__main__":
    pdtest.run_scenario(globals())
