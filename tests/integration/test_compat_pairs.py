#!/usr/bin/env python3
"""Compatible pairs (docs/operations.md, "Compatible pairs and rolling upgrades"): real pdrouter and pdsim
processes on loopback; each pdsim reports an identity in /get_server_info (sglang's field names) and the
router pairs a prefill only with a decode of the same compat group.

    python3 test_compat_pairs.py SCENARIO     (PDR_BUILD=<build dir>)

Scenarios:
  rolling_upgrade  prefills and decodes on revisions A and B, random picks: every request is answered 200
                   and each decode received KV only from the prefill of its own revision (pdsim's
                   per-bootstrap-port counts); then decode B is drained: the prefill B has no partner, and
                   every request is still served by prefill A (counted in pdr_compat_repicks_total)
  no_pair          one prefill with kv_cache_dtype fp8, one decode with auto: 503 naming the difference,
                   counted in pdr_incompatible_pairs_total{pool}; the decode received nothing
  disabled         compat.enabled false: the same pair as no_pair serves (200); no identity is read
  restarted        a decode restarts on the same port with another revision: once it is healthy again its
                   identity is read again (admin API), and requests are refused instead of paired with it
  shim_restart     a decode's shim reports a new instance id (a restart no health check saw): its identity
                   is read again at once (pdr_worker_identity_reads_total)
  vllm             protocol vllm: the identity is /v1/models's root (the model path); prefills and decodes
                   of two model paths, random picks: every request 200, and each decode's
                   kv_transfer_params name only the prefill of its own model path
  refuse_unknown   compat.unknown: refuse and a decode that does not answer /get_server_info: its
                   identity stays unknown (identity_error in the admin API) and it is never paired
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check  # noqa: E402
from test_router import metric_value, metrics, router, sim, stats  # noqa: E402

CONF = ("policy: { prefill: random, decode: random }\n"
        "health: { interval_ms: 100, timeout_ms: 500, rise: 1, fall: 1 }\n")


def body(text):
    return {"text": text, "stream": False, "sampling_params": {"max_new_tokens": 2, "ignore_eos": True}}


def url(p):
    return "http://127.0.0.1:%d" % p.port


def workers(r):
    return pdtest.request_json(r.ports["admin"], "GET", "/admin/v1/workers")["workers"]


def worker(r, p):
    for w in workers(r):
        if w["url"] == url(p):
            return w
    return None


def identified(r, n):
    """Waits until n workers have a compat group (their identities read); returns the listing."""
    return pdtest.poll_until(lambda: (lambda ws: ws if sum(1 for w in ws if w["compat_group"]) == n else None)(
        workers(r)), 10, "%d identities read" % n)


def port_count(d, p):
    return stats(d)["by_bootstrap_port"].get(str(p.ports["bport"]), 0)


def ask(r, i, want=200):
    st, _, b = pdtest.request(r.port, "POST", "/generate", body=body("request %d" % i), timeout=15)
    check(st == want, "request %d: %d %r" % (i, st, b), r)
    return b


def scenario_rolling_upgrade():
    pa, pb = sim("prefill", "--revision", "rev-a"), sim("prefill", "--revision", "rev-b")
    da, db = sim("decode", "--revision", "rev-a"), sim("decode", "--revision", "rev-b")
    r = router([pa, pb], [da, db], config=CONF)
    ws = identified(r, 4)
    by_url = {w["url"]: w for w in ws}
    check(by_url[url(pa)]["identity"]["revision"] == "rev-a" and by_url[url(pb)]["identity"]["revision"] == "rev-b",
          "identities %r" % ws, r)
    check(by_url[url(pa)]["compat_group"] == by_url[url(da)]["compat_group"] != by_url[url(pb)]["compat_group"] ==
          by_url[url(db)]["compat_group"], "groups %r" % ws, r)
    # Random picks: a prefill is picked first, then a decode of its group; 40 requests miss either revision
    # with probability 2 * 2^-40.
    for i in range(40):
        ask(r, i)
    check(port_count(da, pa) > 0 and port_count(db, pb) > 0, "a revision served nothing", r, da, db)
    check(port_count(da, pb) == 0, "decode A received KV from prefill B: %r" % stats(da)["by_bootstrap_port"], r, da)
    check(port_count(db, pa) == 0, "decode B received KV from prefill A: %r" % stats(db)["by_bootstrap_port"], r, db)
    check(stats(da)["requests"] + stats(db)["requests"] == 40, "decodes' requests", r, da, db)

    # Decode B drained (half the upgrade rolled back): prefill B has no partner; prefill A serves it all.
    pdtest.request_json(r.ports["admin"], "POST", "/admin/v1/workers/%s/drain" % by_url[url(db)]["id"], {},
                        expect=202)
    pdtest.poll_until(lambda: worker(r, db)["state"] == "drained", 10, "decode B drained")
    a0, b0 = port_count(da, pa), stats(pb)["requests"]
    for i in range(40, 80):
        ask(r, i)
    check(port_count(da, pa) == a0 + 40, "decode A: %r" % stats(da)["by_bootstrap_port"], r, da)
    check(port_count(da, pb) == 0, "decode A received KV from prefill B", r, da)
    check(stats(pb)["requests"] == b0, "prefill B was sent a request without a partner", r, pb)
    m = metrics(r)
    check((metric_value(m, "pdr_compat_repicks_total", pool="default") or 0) > 0, "no repick counted", r)
    check(metric_value(m, "pdr_incompatible_pairs_total", pool="default") == 0, "a request was refused", r)
    check(r.stop() == 0, "pdrouter exit status", r)


def scenario_no_pair():
    p = sim("prefill", "--kv-cache-dtype", "fp8_e4m3")
    d = sim("decode")
    r = router([p], [d], config=CONF)
    identified(r, 2)
    b = ask(r, 0, want=503)
    err = json.loads(b)["error"]
    check("kv_cache_dtype fp8_e4m3 vs auto" in err["message"] and "no decode compatible with prefill" in err["message"],
          "reason %r" % err, r)
    m = pdtest.poll_until(lambda: (lambda t: t if metric_value(t, "pdr_incompatible_pairs_total", pool="default") == 1
                                   else None)(metrics(r)), 5, "pdr_incompatible_pairs_total 1")
    check(metric_value(m, "pdr_compat_repicks_total", pool="default") == 0, "repicks", r)
    check(stats(d)["requests"] == 0 and stats(p)["requests"] == 0, "a worker was sent the request", r, p, d)
    # /health_generate asks a pair a request could get: there is none.
    st, _, hb = pdtest.request(r.port, "GET", "/health_generate")
    check(st == 503 and b"no healthy prefill/decode pair" in hb, "/health_generate %d %r" % (st, hb), r)
    check(r.stop() == 0, "pdrouter exit status", r)


def scenario_disabled():
    p = sim("prefill", "--kv-cache-dtype", "fp8_e4m3")
    d = sim("decode")
    r = router([p], [d], config=CONF + "compat: { enabled: false }\n")
    for i in range(3):
        ask(r, i)
    m = metrics(r)
    check(metric_value(m, "pdr_worker_identity_reads_total", result="ok") == 0 and
          metric_value(m, "pdr_worker_identity_reads_total", result="failed") == 0, "identity reads", r)
    check(all(w["compat_group"] == "" for w in workers(r)), "groups with the feature off", r)
    check(r.stop() == 0, "pdrouter exit status", r)


def scenario_restarted():
    p, d = sim("prefill", "--revision", "rev-a"), sim("decode", "--revision", "rev-a")
    r = router([p], [d], config=CONF)
    identified(r, 2)
    ask(r, 0)
    group_a = worker(r, d)["compat_group"]
    d.stop()
    pdtest.poll_until(lambda: worker(r, d)["state"] != "healthy", 10, "the decode seen down")
    d2 = pdtest.start(["pdsim", "--role", "decode", "--port", "{port}", "--revision", "rev-b"], name="pdsim-decode",
                      ports={"port": d.port})
    w = pdtest.poll_until(lambda: (lambda w: w if w["state"] == "healthy" and w["identity"] and
                                   w["identity"]["revision"] == "rev-b" else None)(worker(r, d2)), 10,
                          "the restarted decode re-read")
    check(w["compat_group"] and w["compat_group"] != group_a, "group after the restart %r" % w, r)
    b = ask(r, 1, want=503)
    check("revision rev-a vs rev-b" in json.loads(b)["error"]["message"], "reason %r" % b, r)
    check(stats(d2)["requests"] == 0, "the restarted decode was paired with the old prefill", r, d2)
    m = metrics(r)
    check(metric_value(m, "pdr_worker_identity_reads_total", result="ok") >= 3, "identity reads", r)
    check(r.stop() == 0, "pdrouter exit status", r)


def scenario_shim_restart():
    from test_shim_events import Sender, events_router
    p, d = sim("prefill"), sim("decode")
    r = events_router([p], [d], extra=CONF)
    identified(r, 2)

    def reads():
        return metric_value(metrics(r), "pdr_worker_identity_reads_total", result="ok")
    Sender(url(d)).load(r, queue_depth=0)  # the shim's first instance: nothing to re-read
    ask(r, 0)
    n0 = reads()
    check(n0 == 2, "identity reads before the restart: %r" % n0, r)
    Sender(url(d)).load(r, queue_depth=0)  # a new instance id: the worker restarted
    pdtest.poll_until(lambda: reads() == n0 + 1, 10, "the restarted decode's identity read again")
    check(worker(r, p)["compat_group"] == worker(r, d)["compat_group"] != "", "groups after the re-read", r)
    ask(r, 1)
    check(r.stop() == 0, "pdrouter exit status", r)


def scenario_vllm():
    pa, pb = (sim("prefill", "--model", "m", "--model-path", "/models/%s" % v) for v in ("a", "b"))
    da, db = (sim("decode", "--model", "m", "--model-path", "/models/%s" % v) for v in ("a", "b"))
    argv = ["pdrouter", "--pd-disaggregation", "--protocol", "vllm", "--host", "127.0.0.1", "--port", "{port}",
            "--access-log", "off", "--admin-port", "{admin}", "--drain-grace-ms", "0", "--policy", "random",
            "--health-check-interval-secs", "1"]
    for p in (pa, pb):
        argv += ["--prefill", url(p)]
    for d in (da, db):
        argv += ["--decode", url(d)]
    r = pdtest.start(argv, name="pdrouter", health_path="/readiness", healthy=200)
    ws = identified(r, 4)
    check(all(w["identity"]["engine"] == "vllm" for w in ws), "engines %r" % ws, r)
    # Random picks: 40 requests miss either model path with probability 2 * 2^-40.
    for i in range(40):
        st, _, b = pdtest.request(r.port, "POST", "/v1/completions", body={"model": "m", "prompt": "request %d" % i,
                                                                            "max_tokens": 2}, timeout=15)
        check(st == 200, "request %d: %d %r" % (i, st, b), r)
    for d, p in ((da, pa), (db, pb)):
        seen = {x["body"]["kv_transfer_params"]["remote_port"] for x in stats(d)["last"]
                if "kv_transfer_params" in x["body"]}
        check(seen == {p.ports["bport"]}, "decode %s took KV from %r, its prefill is %d" % (url(d), seen,
                                                                                           p.ports["bport"]), r, d)
    check(r.stop() == 0, "pdrouter exit status", r)


def scenario_refuse_unknown():
    p = sim("prefill")
    d = sim("decode", "--no-server-info")  # an engine without the route: its identity cannot be read
    r = router([p], [d], config=CONF + "compat: { unknown: refuse }\n")
    w = pdtest.poll_until(lambda: (lambda w: w if w and w.get("identity_error") else None)(
        next((x for x in workers(r) if x["role"] == "decode"), None)), 10, "the decode's identity read failed")
    check(w["compat_group"] == "" and w["identity"] is None, "unknown identity %r" % w, r)
    b = ask(r, 0, want=503)
    check("compat.unknown is refuse" in json.loads(b)["error"]["message"], "reason %r" % b, r)
    check(stats(d)["requests"] == 0, "a decode of unknown identity was paired", r, d)
    check(r.stop() == 0, "pdrouter exit status", r)


if __name__ == "__main__":
    pdtest.run_scenario(globals())
