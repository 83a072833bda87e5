#!/usr/bin/env python3
"""Model pools (config `pools:`): one pdrouter in front of several pools, each of its own pdsim prefill and
decode started with --model, and assertions on what reached which worker (pdsim /pdsim/stats).

Scenarios (argv[1]):
  routing  three pools, two sglang and one vllm: each model reaches only its pool's workers, by its pool's
           protocol (OpenAI routes and /generate with a model), an unknown model is 404 listing the served ones, /generate without a model is 400,
           /v1/models lists the union, the admin API shows and takes pools, metrics and the access log
           carry the pool, readiness names a pool without a healthy pair.
  shorthand  the one-pool form (top-level workers:): a pool "default" that takes any model or none,
           /v1/models relayed from a decode, and the pool shown as "default" everywhere.
  timeouts a pool's own timeouts: its stalled prefill is cut at its kv_transfer_ms (504 within a second),
           while the other pool keeps the top-level deadline.
  reload   a reload adds a third pool (its model becomes routable), adds a model to a pool, and removes a
           pool (its workers leave, its model is then unknown).

The pools are data (POOLS below): a pool of another protocol is one more entry with its `protocol`
(pdsim answers both protocols, telling them apart by the body).
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check, request, request_json  # noqa: E402
from test_router import metric_value, metrics, metrics_when, router, stats  # noqa: E402

# name, models, protocol. Each gets its own pdsim pair, reporting the pool's first model.
POOLS = [
    {"name": "alpha", "models": ["llama-3-8b", "llama-3-8b-instruct"], "protocol": "sglang"},
    {"name": "beta", "models": ["qwen-2-7b"], "protocol": "sglang"},
    {"name": "mistral", "models": ["mistral-7b-instruct"], "protocol": "vllm"},
]
# What the router asks a vLLM prefill to do with its KV (docs/architecture.md, the vLLM PD path).
ASK = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None, "remote_block_ids": None,
       "remote_host": None, "remote_port": None}
GAMMA = {"name": "gamma", "models": ["mistral-7b"], "protocol": "sglang"}


def start_pool(pool):
    """Starts the pool's workers (pdsim, reporting the pool's first model) into pool["prefill"/"decode"]."""
    model = pool["models"][0]
    pool["prefill"] = pdtest.start(["pdsim", "--role", "prefill", "--port", "{port}", "--bootstrap-port", "{bport}",
                                    "--model", model], name="pdsim-%s-prefill" % pool["name"])
    pool["decode"] = pdtest.start(["pdsim", "--role", "decode", "--port", "{port}", "--model", model],
                                  name="pdsim-%s-decode" % pool["name"])
    return pool


def pools_yaml(pools):
    lines = ["pools:"]
    for p in pools:
        lines += ["  - name: %s" % p["name"],
                  "    models: [%s]" % ", ".join(json.dumps(m) for m in p["models"]),
                  "    protocol: %s" % p["protocol"],
                  "    workers:",
                  "      prefill: [ { url: http://127.0.0.1:%d, bootstrap_port: %d } ]"
                  % (p["prefill"].port, p["prefill"].ports["bport"]),
                  "      decode: [ http://127.0.0.1:%d ]" % p["decode"].port]
        if p.get("timeouts"):
            lines.append("    timeouts: %s" % p["timeouts"])
    return "\n".join(lines)


COMMON = "health: { interval_ms: 200, timeout_ms: 500, rise: 1, fall: 1 }"


def rewrite_config(r, pools, extra=""):
    """The router's file with these pools (listen and admin as they were)."""
    text = "\n".join(["listen: { host: 127.0.0.1, port: %d }" % r.port,
                      "admin: { host: 127.0.0.1, port: %d }" % r.ports["admin"], COMMON, extra, pools_yaml(pools)])
    with open(r.config_path + ".new", "w") as f:
        f.write(text + "\n")
    os.replace(r.config_path + ".new", r.config_path)


def completion(r, model, path="/v1/completions"):
    if path == "/v1/chat/completions":
        body = {"model": model, "messages": [{"role": "user", "content": "hello pools"}], "max_tokens": 4}
    elif path == "/generate":
        body = {"text": "hello pools", "sampling_params": {"max_new_tokens": 4}}
        if model is not None:
            body["model"] = model
    else:
        body = {"model": model, "prompt": "hello pools", "max_tokens": 4}
    st, _, raw = request(r.port, "POST", path, body)
    return st, json.loads(raw) if raw else None


def counts(pools):
    return {p["name"]: (stats(p["prefill"])["requests"], stats(p["decode"])["requests"]) for p in pools}


def expect_routed(r, pools, target, model, n, path="/v1/completions"):
    """n requests for model on path reach target's prefill and decode n times each, and no other pool."""
    before = counts(pools)
    for _ in range(n):
        st, body = completion(r, model, path)
        check(st == 200, "%s %s: %d %r" % (path, model, st, body), r)
        if path != "/generate":
            check(body["model"] == target["models"][0], "answered by the wrong model: %r" % body, r)
    after = counts(pools)
    for p in pools:
        want = n if p is target else 0
        got = (after[p["name"]][0] - before[p["name"]][0], after[p["name"]][1] - before[p["name"]][1])
        check(got == (want, want), "%s for %s: pool %s got %r, want %r each" % (path, model, p["name"], got, want), r)


def last(p):
    return stats(p)["last"][-1]


def scenario_routing():
    pools = [start_pool(dict(p)) for p in POOLS]
    alpha, beta, mistral = pools
    fd, alog = tempfile.mkstemp(prefix="pdrouter-access-", suffix=".log")
    os.close(fd)
    r = router([], [], config="%s\nlog: { access_log: %s }\n%s" % (COMMON, alog, pools_yaml(pools)))
    try:
        expect_routed(r, pools, alpha, "llama-3-8b", 4)
        expect_routed(r, pools, alpha, "llama-3-8b-instruct", 2, "/v1/chat/completions")
        expect_routed(r, pools, beta, "qwen-2-7b", 3)
        expect_routed(r, pools, beta, "qwen-2-7b", 2, "/v1/chat/completions")
        expect_routed(r, pools, beta, "qwen-2-7b", 2, "/generate")
        check(isinstance(last(beta["prefill"])["room"], int), "beta's prefill got no bootstrap room", r)
        # The vllm pool: its own protocol, prefill first with kv_transfer_params, no bootstrap fields.
        expect_routed(r, pools, mistral, "mistral-7b-instruct", 3)
        expect_routed(r, pools, mistral, "mistral-7b-instruct", 2, "/v1/chat/completions")
        lp, ld = last(mistral["prefill"]), last(mistral["decode"])
        check(lp["body"]["kv_transfer_params"] == ASK and lp["room"] is None and
              ld["body"]["kv_transfer_params"]["remote_host"] == "127.0.0.1", repr((lp, ld)), r)
        expect_routed(r, pools, alpha, "llama-3-8b", 1)
        la = last(alpha["prefill"])
        check(isinstance(la["room"], int) and "kv_transfer_params" not in la.get("body", {}), repr(la), r)
        before = counts(pools)
        st, body = completion(r, "mistral-7b-instruct", "/generate")
        check(st == 400 and "protocol vllm serves" in body["error"]["message"] and counts(pools) == before,
              "%d %r" % (st, body), r)

        # An unknown model: 404 in the OpenAI shape, listing what is served; no worker sees it.
        before = counts(pools)
        st, body = completion(r, "gpt-4")
        err = body["error"]
        check(st == 404 and err["code"] == 404 and err["type"] == "invalid_request_error" and
              err["message"] == "The model `gpt-4` does not exist. Served: llama-3-8b, llama-3-8b-instruct, "
              "qwen-2-7b, mistral-7b-instruct", "%d %r" % (st, body), r)
        st, body = completion(r, None, "/generate")
        check(st == 400 and "model: required" in body["error"]["message"] and
              "qwen-2-7b" in body["error"]["message"], "%d %r" % (st, body), r)
        st, _, raw = request(r.port, "POST", "/v1/completions", {"model": 7, "prompt": "x"})
        check(st == 400 and "model" in json.loads(raw)["error"]["message"], repr(raw), r)
        check(counts(pools) == before, "a refused request reached a worker", r)

        # /v1/models: the union of the pools' models, answered by the router.
        ms = request_json(r.port, "GET", "/v1/models")
        check(ms["object"] == "list" and [m["id"] for m in ms["data"]] == ["llama-3-8b", "llama-3-8b-instruct",
                                                                             "qwen-2-7b", "mistral-7b-instruct"],
              repr(ms), r)
        check(all(m["object"] == "model" and m["owned_by"] == "pdrouter" for m in ms["data"]) and
              ms["data"][2]["pool"] == "beta", repr(ms), r)

        # The admin API: every worker shows its pool; the status lists the pools; adding a worker needs a
        # pool when there are several.
        stp = request_json(r.ports["admin"], "GET", "/admin/v1/status")["pools"]
        check(stp == [{"name": "alpha", "protocol": "sglang", "models": ["llama-3-8b", "llama-3-8b-instruct"],
                       "healthy": {"prefill": 1, "decode": 1}},
                      {"name": "beta", "protocol": "sglang", "models": ["qwen-2-7b"], "healthy": {"prefill": 1, "decode": 1}},
                      {"name": "mistral", "protocol": "vllm", "models": ["mistral-7b-instruct"],
                       "healthy": {"prefill": 1, "decode": 1}}], repr(stp), r)
        ws = request_json(r.ports["admin"], "GET", "/admin/v1/workers")["workers"]
        check([(w["id"], w["pool"]) for w in ws] == [("prefill-0", "alpha"), ("prefill-1", "beta"),
                                                      ("prefill-2", "mistral"), ("decode-0", "alpha"),
                                                      ("decode-1", "beta"), ("decode-2", "mistral")], repr(ws), r)
        extra = pdtest.start(["pdsim", "--role", "decode", "--port", "{port}", "--model", "qwen-2-7b"],
                             name="pdsim-beta-decode-2")
        url = "http://127.0.0.1:%d" % extra.port
        st, _, raw = request(r.ports["admin"], "POST", "/admin/v1/workers", {"role": "decode", "url": url})
        check(st == 400 and json.loads(raw)["error"]["message"] ==
              "pool is required: the router has several pools (alpha, beta, mistral)", raw, r)
        st, _, raw = request(r.ports["admin"], "POST", "/admin/v1/workers",
                             {"role": "decode", "url": url, "pool": "delta"})
        check(st == 400 and json.loads(raw)["error"]["message"] == 'unknown pool "delta" (pools: alpha, beta, mistral)',
              raw, r)
        st, _, raw = request(r.ports["admin"], "POST", "/admin/v1/workers",
                             {"role": "decode", "url": url, "pool": "Beta!"})
        check(st == 400 and "pool must be a pool name" in json.loads(raw)["error"]["message"], raw, r)
        w = request_json(r.ports["admin"], "POST", "/admin/v1/workers", {"role": "decode", "url": url, "pool": "beta"},
                         expect=201)
        check(w["pool"] == "beta" and w["id"] == "decode-3", repr(w), r)
        # The added decode serves beta only: alpha's requests never reach it.
        n0 = stats(extra)["requests"]
        for _ in range(6):
            check(completion(r, "llama-3-8b")[0] == 200, "alpha after the add", r)
        check(stats(extra)["requests"] == n0, "an alpha request reached beta's added decode", r)
        # beta's decodes are picked by least_load: sequential requests find both idle, so each goes to either
        # with probability 1/2, and 24 miss the added one with probability 2^-24 = 6e-8.
        for _ in range(24):
            check(completion(r, "qwen-2-7b")[0] == 200, "beta after the add", r)
        check(stats(extra)["requests"] > n0, "beta's added decode takes no traffic", r)

        # Metrics: the per-worker series carry the pool.
        m = metrics(r)
        da = "http://127.0.0.1:%d" % alpha["decode"].port
        check(metric_value(m, "pdr_worker_requests_total", pool="alpha", role="decode", url=da) ==
              stats(alpha["decode"])["requests"], m, r)
        check(metric_value(m, "pdr_worker_healthy", pool="beta", role="decode", url=url) == 1, m, r)
        check(metric_value(m, "pdr_worker_healthy", pool="alpha", role="decode", url=url) is None, m, r)

        # The access log: the pool of each request; null for one refused before a pool was chosen.
        # (alpha 13 answered, beta 31, mistral 5, 4 refused; the lines are written in batches).
        def logged():
            by_pool = {}
            with open(alog) as f:
                for l in f:
                    if l.startswith("{"):
                        j = json.loads(l)
                        by_pool.setdefault(j["pool"], []).append(j)
            n = {k: len(v) for k, v in by_pool.items()}
            return by_pool if n == {"alpha": 13, "beta": 31, "mistral": 5, None: 4} else None
        by_pool = pdtest.poll_until(logged, 5, "the access log lines")
        check(all(l["decode"] == da and l["status"] == 200 for l in by_pool["alpha"]) and
              all(l["status"] == 200 for l in by_pool["beta"]) and
              sorted(l["error"] for l in by_pool[None]) == ["invalid_request", "invalid_request", "model_not_found",
                                                          "route_not_served"],
              repr(by_pool), r)

        # Readiness: every pool needs a healthy pair; the answer names the one that has none.
        request_json(beta["prefill"].port, "POST", "/pdsim/fault", {"fail_health": True})

        def not_ready():
            st, _, raw = request(r.port, "GET", "/readiness")
            return raw if st == 503 else None
        raw = pdtest.poll_until(not_ready, 5, "readiness to turn 503")
        check(json.loads(raw)["error"]["message"] == "no healthy prefill or decode worker in pool beta", repr(raw), r)
        st, body = completion(r, "qwen-2-7b")
        check(st == 503 and "pool beta" in body["error"]["message"], "%d %r" % (st, body), r)
        check(completion(r, "llama-3-8b")[0] == 200, "alpha stops serving when beta is down", r)
        request_json(beta["prefill"].port, "POST", "/pdsim/fault", {"fail_health": False})
        pdtest.poll_until(lambda: request(r.port, "GET", "/readiness")[0] == 200, 5, "readiness back")
    finally:
        pdtest.stop_all()
        os.unlink(alog)


def scenario_shorthand():
    pool = start_pool({"name": "default", "models": ["served-model"], "protocol": "sglang"})
    r = router([pool["prefill"]], [pool["decode"]], config=COMMON)
    try:
        for model in ("served-model", "anything-else"):
            st, body = completion(r, model)
            check(st == 200 and body["model"] == "served-model", "%s: %d %r" % (model, st, body), r)
        check(completion(r, None, "/generate")[0] == 200, "/generate without a model", r)
        ms = request_json(r.port, "GET", "/v1/models")
        check([m["id"] for m in ms["data"]] == ["served-model"] and ms["data"][0]["owned_by"] == "pdsim",
              "not relayed from the decode: %r" % ms, r)
        ws = request_json(r.ports["admin"], "GET", "/admin/v1/workers")["workers"]
        check([w["pool"] for w in ws] == ["default", "default"], repr(ws), r)
        stp = request_json(r.ports["admin"], "GET", "/admin/v1/status")["pools"]
        check(stp == [{"name": "default", "protocol": "sglang", "models": None,
                       "healthy": {"prefill": 1, "decode": 1}}], repr(stp), r)
        m = metrics(r)
        check(metric_value(m, "pdr_worker_requests_total", pool="default", role="decode",
                           url="http://127.0.0.1:%d" % pool["decode"].port) == 4, m, r)  # 3 PD + /v1/models
        # One pool: an admin-added worker needs no pool; a wrong one is still refused.
        st, _, raw = request(r.ports["admin"], "POST", "/admin/v1/workers",
                             {"role": "decode", "url": "http://127.0.0.1:1", "pool": "other"})
        check(st == 400 and json.loads(raw)["error"]["message"] == 'unknown pool "other" (pools: default)', raw, r)
        w = request_json(r.ports["admin"], "POST", "/admin/v1/workers", {"role": "decode", "url": "http://127.0.0.1:1"},
                         expect=201)
        check(w["pool"] == "default", repr(w), r)
    finally:
        pdtest.stop_all()


def scenario_reload():
    pools = [start_pool(dict(p)) for p in POOLS[:2]]
    alpha, beta = pools
    r = router([], [], config="%s\n%s" % (COMMON, pools_yaml(pools)))
    try:
        expect_routed(r, pools, beta, "qwen-2-7b", 2)
        st, body = completion(r, "mistral-7b")
        check(st == 404, "%d %r" % (st, body), r)

        # A third pool, and one more model for alpha.
        gamma = start_pool(dict(GAMMA))
        alpha["models"] = alpha["models"] + ["llama-3-70b"]
        three = [alpha, beta, gamma]
        rewrite_config(r, three)
        out = request_json(r.ports["admin"], "POST", "/admin/v1/reload")
        check(out["reloaded"] is True and "2 static worker changes" in out["message"], repr(out), r)
        expect_routed(r, three, gamma, "mistral-7b", 3)
        expect_routed(r, three, alpha, "llama-3-70b", 2)
        expect_routed(r, three, beta, "qwen-2-7b", 2)
        ws = request_json(r.ports["admin"], "GET", "/admin/v1/workers")["workers"]
        check([(w["id"], w["pool"]) for w in ws] == [("prefill-0", "alpha"), ("prefill-1", "beta"),
                                                      ("prefill-2", "gamma"), ("decode-0", "alpha"),
                                                      ("decode-1", "beta"), ("decode-2", "gamma")], repr(ws), r)
        ms = [m["id"] for m in request_json(r.port, "GET", "/v1/models")["data"]]
        check(ms == ["llama-3-8b", "llama-3-8b-instruct", "llama-3-70b", "qwen-2-7b", "mistral-7b"], repr(ms), r)
        m = metrics_when(r, lambda t: metric_value(t, "pdr_worker_requests_total", pool="gamma", role="prefill",
                                                   url="http://127.0.0.1:%d" % gamma["prefill"].port) == 3,
                         "gamma's prefill series")

        # beta goes: its workers leave, its model is unknown; the others keep their workers (same ids).
        rewrite_config(r, [alpha, gamma])
        out = request_json(r.ports["admin"], "POST", "/admin/v1/reload")
        check(out["reloaded"] is True and "2 static worker changes" in out["message"], repr(out), r)
        ws = request_json(r.ports["admin"], "GET", "/admin/v1/workers")["workers"]
        check([(w["id"], w["pool"]) for w in ws] == [("prefill-0", "alpha"), ("prefill-2", "gamma"),
                                                      ("decode-0", "alpha"), ("decode-2", "gamma")], repr(ws), r)
        st, body = completion(r, "qwen-2-7b")
        check(st == 404 and body["error"]["message"] == "The model `qwen-2-7b` does not exist. Served: llama-3-8b, "
              "llama-3-8b-instruct, llama-3-70b, mistral-7b", "%d %r" % (st, body), r)
        expect_routed(r, [alpha, gamma], gamma, "mistral-7b", 2)
        m = metrics(r)
        check(metric_value(m, "pdr_worker_healthy", pool="beta", role="decode",
                           url="http://127.0.0.1:%d" % beta["decode"].port) is None, "beta's series stay", r)

        # A model cannot be in two pools: the reload is refused with the position, nothing changes.
        gamma["models"] = ["mistral-7b", "llama-3-8b"]
        rewrite_config(r, [alpha, gamma])
        st, _, raw = request(r.ports["admin"], "POST", "/admin/v1/reload")
        msg = json.loads(raw)["error"]["message"]
        check(st == 400 and ".yaml:" in msg and "model 'llama-3-8b' is served by pool 'alpha' already" in msg,
              "%d %s" % (st, msg), r)
        expect_routed(r, [alpha, gamma], alpha, "llama-3-8b", 2)
    finally:
        pdtest.stop_all()



def scenario_timeouts():
    """Per-pool timeouts: pool "slow" (its prefill never offers its KV) answers 504 once its own
    kv_transfer_ms (400 ms) passes, not the top-level 30 s; pool "fast" serves as usual."""
    slow = {"name": "slow", "models": ["m-slow"], "protocol": "sglang",
            "timeouts": "{ kv_transfer_ms: 400, first_byte_ms: 20000 }"}
    fast = {"name": "fast", "models": ["m-fast"], "protocol": "sglang"}
    for p in (slow, fast):
        start_pool(p)
    request(slow["prefill"].port, "POST", "/pdsim/fault", {"stall_kv": True})
    r = router([], [], config=COMMON + "\nretries: { max: 0 }\n" + pools_yaml([slow, fast]))
    try:
        import time
        t0 = time.monotonic()
        st, body = completion(r, "m-slow")
        dt = time.monotonic() - t0
        check(st == 504 and "kv_transfer_ms" in body["error"]["message"] and dt < 3.0,
              "slow pool: %d after %.2fs: %r" % (st, dt, body), r)
        st, body = completion(r, "m-fast")
        check(st == 200, "fast pool: %d %r" % (st, body), r)
    finally:
        pdtest.stop_all()

if __name__ == "__main__":
    pdtest.run_scenario(globals())
