#!/usr/bin/env python3
"""Integration tests of conditional disaggregation (config `disaggregation:`): a request whose uncached
prompt is short, or that arrives while every prefill is saturated, skips the prefill. With protocol vllm
the decode runs it alone (pdsim --local-prefill); with protocol sglang a regular worker (pdsim --role both)
does. Real pdrouter and pdsim processes on loopback.

Usage: test_disagg.py SCENARIO   (one of the functions named scenario_*; ctest runs each separately)
"""

import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check, sse_events  # noqa: E402
from test_router import curl, metric_value, metrics_when, router, sim, stats, texts  # noqa: E402
from test_vllm import stop_clean  # noqa: E402

LONG = " ".join("word%d" % i for i in range(80))  # about 560 bytes of prompt text
SHORT = "a short prompt"


def yaml_workers(prefills=(), decodes=(), regulars=()):
    lines = ["workers:", "  prefill:"]
    lines += ["    - { url: http://127.0.0.1:%d, bootstrap_port: %s }" % (p.port, p.ports.get("bport", "none"))
              for p in prefills]
    lines += ["  decode:"] + ["    - { url: http://127.0.0.1:%d }" % d.port for d in decodes]
    if regulars:
        lines += ["  regular:"] + ["    - { url: http://127.0.0.1:%d }" % w.port for w in regulars]
    return "\n".join(lines)


def start(protocol, disagg, prefills=(), decodes=(), regulars=(), extra=""):
    fd, alog = tempfile.mkstemp(prefix="pdrouter-access-", suffix=".log")
    os.close(fd)
    conf = "protocol: %s\n%s\ndisaggregation: %s\nlog: { access_log: %s }\n%s" % (
        protocol, yaml_workers(prefills, decodes, regulars), disagg, alog, extra)
    return router([], [], config=conf), alog


def log_lines(alog, n):
    """The access log's lines in time order, once n are written (each loop flushes its own in batches)."""
    def read():
        with open(alog) as f:
            lines = [json.loads(l) for l in f if l.strip()]
        return sorted(lines, key=lambda l: l["ts_us"]) if len(lines) >= n else None
    return pdtest.poll_until(read, 5, "%d access log lines" % n)


def decisions(r, **want):
    """Waits until pdr_disagg_decisions_total has exactly the wanted counts (0 for those not named)."""
    names = ("disaggregated", "short_prompt", "prefill_saturated")
    full = {k: want.get(k, 0) for k in names}

    def ok(m):
        return all(metric_value(m, "pdr_disagg_decisions_total", decision=k) == v for k, v in full.items())
    return metrics_when(r, ok, "decisions %r" % full)


def completions(prompt, stream=False, **kw):
    b = {"model": "pdsim", "prompt": prompt, "max_tokens": 8, "stream": stream}
    b.update(kw)
    return b


def chat(prompt, stream=False):
    return {"model": "pdsim", "messages": [{"role": "user", "content": prompt}], "max_tokens": 7, "stream": stream}


def same_text(route, body, out, ref_port, stream):
    st, ref = curl(ref_port, route, body)
    assert st == 200, ref
    return texts(route, body, out, stream) == texts(route, body, ref, stream)


def scenario_vllm_short_prompt():
    """protocol vllm, min_prefill_chars: a short prompt goes to the decode alone, as a plain request (no
    kv_transfer_params), streaming and not, on both OpenAI routes, its answer complete and equal to a
    monolithic worker's; a long prompt is disaggregated; decisions counted; the access log names them."""
    p, d, both = sim("prefill"), sim("decode", "--local-prefill"), sim("both")
    r, alog = start("vllm", "{ min_prefill_chars: 200 }", [p], [d])
    try:
        n = 0
        for route, mk in (("/v1/completions", completions), ("/v1/chat/completions", chat)):
            for stream in (False, True):
                b = mk(SHORT, stream)
                b["kv_transfer_params"] = {"do_remote_prefill": True}  # a client's own is never sent on
                st, out = curl(r.port, route, b)
                n += 1
                check(st == 200, "%s stream=%s: %d %s" % (route, stream, st, out[:300]), r, d)
                del b["kv_transfer_params"]
                check(same_text(route, b, out, both.port, stream), "%s: %r" % (route, out[:300]))
                if stream:
                    check(sse_events(out.encode())[-1] == "[DONE]", "no [DONE]: %r" % out[-200:])
                body = stats(d)["last"][-1]["body"]
                check("kv_transfer_params" not in body and body.get("stream") is stream,
                      "decode body %r" % body)
        sp, sd = stats(p), stats(d)
        check(sp["requests"] == 0, "the prefill was called: %r" % sp)
        check(sd["local_prefills"] == n and sd["completed"] == n, "decode stats %r" % sd)
        # A long prompt: prefill, then decode with the prefill's kv_transfer_params.
        b = completions(LONG)
        st, out = curl(r.port, "/v1/completions", b)
        check(st == 200 and same_text("/v1/completions", b, out, both.port, False), out[:300], r)
        check(stats(p)["requests"] == 1 and stats(d)["local_prefills"] == n, "long prompt not disaggregated")
        check(stats(d)["last"][-1]["body"]["kv_transfer_params"]["do_remote_prefill"] is True, "decode body")
        decisions(r, short_prompt=n, disaggregated=1)
        lines = log_lines(alog, n + 1)
        check([l["disagg"] for l in lines] == ["short_prompt"] * n + ["disaggregated"], "log %r" % lines)
        check(all(l["prefill"] is None and l["status"] == 200 for l in lines[:n]), "log %r" % lines[:n])
        check(lines[n]["prefill"] == "http://127.0.0.1:%d" % p.port, "log %r" % lines[n])
        stop_clean(r, d)  # exit 0, and no sanitizer report under ASan
    finally:
        os.unlink(alog)


def scenario_vllm_tokens():
    """min_prefill_tokens counts token ids (a prompt of integers): 5 ids skip the prefill, 40 do not;
    min_prefill_chars 0 leaves text prompts disaggregated."""
    p, d = sim("prefill"), sim("decode", "--local-prefill")
    r, alog = start("vllm", "{ min_prefill_tokens: 16 }", [p], [d])
    try:
        st, out = curl(r.port, "/v1/completions", completions(list(range(1, 6))))
        check(st == 200 and stats(p)["requests"] == 0, "%d %s" % (st, out[:200]), r)
        st, out = curl(r.port, "/v1/completions", completions(list(range(1, 41))))
        check(st == 200 and stats(p)["requests"] == 1, "%d %s" % (st, out[:200]), r)
        st, out = curl(r.port, "/v1/completions", completions(SHORT))
        check(st == 200 and stats(p)["requests"] == 2, "a text prompt skipped with no chars threshold")
        decisions(r, short_prompt=1, disaggregated=2)
    finally:
        os.unlink(alog)


def scenario_vllm_cached_prefix():
    """With cache_aware on the decodes, "uncached" is the prompt minus the prefix the decode that would run
    it alone holds (a vLLM decode keeps the KV it received in its prefix cache): a long prompt goes to the
    prefill; the same prompt with a short suffix then skips it (only the suffix is uncached on the decode);
    a different long prompt is disaggregated again."""
    p, d = sim("prefill"), sim("decode", "--local-prefill")
    r, alog = start("vllm", "{ min_prefill_chars: 100 }", [p], [d],
                    extra="policy: { prefill: cache_aware, decode: cache_aware }")
    try:
        for prompt in (LONG, LONG + " and then some", LONG.replace("word", "other"),
                       LONG.replace("word", "other") + " and more"):
            st, out = curl(r.port, "/v1/completions", completions(prompt))
            check(st == 200, "%d %s" % (st, out[:200]), r)
        check(stats(p)["requests"] == 2, "prefill stats %r" % stats(p))
        decisions(r, short_prompt=2, disaggregated=2)
        lines = log_lines(alog, 4)
        check([l["disagg"] for l in lines] == ["disaggregated", "short_prompt"] * 2, "log %r" % lines)
        # The access log's prefix: the prefill's miss, then what the decode held of the longer prompt.
        check(lines[0]["prefix"] == {"source": "tree", "matched": 0, "unit": "bytes"} and
              lines[1]["prefix"]["source"] == "tree" and lines[1]["prefix"]["matched"] > 100,
              "prefix %r" % [l["prefix"] for l in lines])
    finally:
        os.unlink(alog)


def scenario_vllm_cached_on_prefill_only():
    """A prompt cached on the prefill only (the decodes' policy knows no caches) is not skipped: running it
    alone would compute it again in full on the decode; every request is disaggregated."""
    p, d = sim("prefill"), sim("decode", "--local-prefill")
    r, alog = start("vllm", "{ min_prefill_chars: 100 }", [p], [d],
                    extra="policy: { prefill: cache_aware, decode: least_load }")
    try:
        for prompt in (LONG, LONG + " and then some", LONG + " and more"):
            st, out = curl(r.port, "/v1/completions", completions(prompt))
            check(st == 200, "%d %s" % (st, out[:200]), r)
        check(stats(p)["requests"] == 3 and stats(d)["local_prefills"] == 0, "stats %r %r" % (stats(p), stats(d)))
        decisions(r, short_prompt=0, disaggregated=3)
    finally:
        os.unlink(alog)


def scenario_vllm_retry_solo():
    """A retry that runs solo is not failed by the attempt before it: the first attempt is disaggregated
    and its prefill answers 2xx without kv_transfer_params (a pdsim of role both ignores them, as a vLLM
    without a KV connector does), which fails that attempt; the decode's cache_aware tree now holds the
    prompt (its pick recorded it), so the retry finds it cached on the decode and runs there alone, where
    it must succeed with the decode's answer."""
    plain, d, both = sim("both"), sim("decode", "--local-prefill"), sim("both")
    r, alog = start("vllm", "{ min_prefill_chars: 100 }", [plain], [d],
                    extra="policy: { prefill: cache_aware, decode: cache_aware }\n"
                          "retries: { initial_backoff_ms: 0 }")
    try:
        b = completions(LONG)
        st, out = curl(r.port, "/v1/completions", b)
        check(st == 200, "%d %s" % (st, out[:300]), r, d)
        check(same_text("/v1/completions", b, out, both.port, False), out[:300])
        sp, sd = stats(plain), stats(d)
        check(sp["requests"] == 1, "the prefill was not called once: %r" % sp)
        check(sd["requests"] == 1 and sd["local_prefills"] == 1, "decode stats %r" % sd)
        check("kv_transfer_params" not in sd["last"][-1]["body"], "decode body %r" % sd["last"][-1]["body"])
        metrics_when(r, lambda m: metric_value(m, "pdr_retries_total") == 1, "one retry")
        decisions(r, disaggregated=1, short_prompt=1)
        lines = log_lines(alog, 1)
        check(lines[0]["status"] == 200 and lines[0]["disagg"] == "short_prompt", "log %r" % lines)
        stop_clean(r, d)
    finally:
        os.unlink(alog)


def scenario_vllm_saturated():
    """skip_when_prefill_saturated: while the only prefill holds prefill_saturated_inflight requests, a
    long prompt goes to the decode alone; once the prefill is free again, long prompts are disaggregated."""
    p, d = sim("prefill"), sim("decode", "--local-prefill")
    r, alog = start("vllm", "{ skip_when_prefill_saturated: true, prefill_saturated_inflight: 1 }", [p], [d])
    try:
        pdtest.request_json(p.port, "POST", "/pdsim/fault", {"hang_before_headers": True})
        conn, _ = None, None
        import http.client
        conn = http.client.HTTPConnection("127.0.0.1", r.port, timeout=30)
        conn.request("POST", "/v1/completions", body=json.dumps(completions(LONG)),
                     headers={"Content-Type": "application/json"})
        pdtest.poll_until(lambda: stats(p)["inflight"] == 1, 5, "the prefill to hold the first request")
        st, out = curl(r.port, "/v1/completions", completions(LONG, stream=True))
        check(st == 200 and sse_events(out.encode())[-1] == "[DONE]", "%d %s" % (st, out[:300]), r)
        check(stats(d)["local_prefills"] == 1 and stats(p)["requests"] == 1, "decode %r" % stats(d))
        conn.close()  # the client of the hung request leaves: the router cancels its prefill leg
        pdtest.request_json(p.port, "POST", "/pdsim/fault", {"reset": True})
        pdtest.poll_until(lambda: stats(p)["inflight"] == 0, 5, "the prefill to let go of the first request")
        st, out = curl(r.port, "/v1/completions", completions(LONG))
        check(st == 200 and stats(p)["requests"] == 2, "%d %s" % (st, out[:300]), r)
        decisions(r, prefill_saturated=1, disaggregated=2)
        lines = log_lines(alog, 3)
        check(sorted(l["disagg"] for l in lines) == ["disaggregated", "disaggregated", "prefill_saturated"],
              "log %r" % lines)
    finally:
        os.unlink(alog)


def scenario_off():
    """Without disaggregation: every request is disaggregated, nothing counted, the log field null; a
    saturation setting without its threshold is refused at load."""
    p, d = sim("prefill"), sim("decode", "--local-prefill")
    fd, alog = tempfile.mkstemp(prefix="pdrouter-access-", suffix=".log")
    os.close(fd)
    r = router([], [], config="protocol: vllm\n%s\nlog: { access_log: %s }" % (yaml_workers([p], [d]), alog))
    try:
        st, out = curl(r.port, "/v1/completions", completions(SHORT))
        check(st == 200 and stats(p)["requests"] == 1, "%d %s" % (st, out[:200]), r)
        decisions(r)
        check(log_lines(alog, 1)[0]["disagg"] is None, "log field")
    finally:
        os.unlink(alog)
    for bad, want in (("{ skip_when_prefill_saturated: true }", "prefill_saturated_inflight"),
                      ("{ skip_when_prefill_saturated: maybe }", "expected true or false"),
                      ("{ min_prefill_chars: -1 }", "out of range"),
                      ("{ min_prefil_chars: 10 }", "min_prefil_chars")):
        fd, path = tempfile.mkstemp(suffix=".yaml")
        with os.fdopen(fd, "w") as f:
            f.write("workers: { prefill: [ { url: 'http://127.0.0.1:1' } ], decode: [ { url: 'http://127.0.0.1:2' } ] }\n"
                    "disaggregation: %s\n" % bad)
        import subprocess
        out = subprocess.run([pdtest.binary("pdrouter"), "--check-config", path], capture_output=True, text=True)
        os.unlink(path)
        check(out.returncode == 2 and want in out.stderr, "%s: %d %s" % (bad, out.returncode, out.stderr))


GEN = "/generate"


def scenario_sglang_regular():
    """protocol sglang with workers.regular: a short prompt goes to the regular worker (pdsim --role both)
    as a plain request (the client's bootstrap fields dropped, nothing added), on all three routes,
    streaming and not, with logprobs answered by that worker alone; a long prompt is disaggregated and the
    regular worker sees nothing; regular workers are health-checked, and an unhealthy one is not used."""
    p, d, reg, ref = sim("prefill"), sim("decode"), sim("both"), sim("both")
    r, alog = start("sglang", "{ min_prefill_chars: 200 }", [p], [d], [reg],
                    extra="health: { interval_ms: 100, timeout_ms: 1000, rise: 1, fall: 1 }")
    try:
        n = 0
        bodies = [(GEN, {"text": SHORT, "sampling_params": {"max_new_tokens": 6}, "bootstrap_room": 5,
                         "bootstrap_host": "10.9.9.9"}),
                  (GEN, {"text": SHORT, "sampling_params": {"max_new_tokens": 6}, "return_logprob": True}),
                  ("/v1/completions", completions(SHORT)), ("/v1/chat/completions", chat(SHORT))]
        for route, b0 in bodies:
            for stream in (False, True):
                b = dict(b0, stream=stream)
                st, out = curl(r.port, route, b)
                n += 1
                check(st == 200, "%s stream=%s: %d %s" % (route, stream, st, out[:300]), r, reg)
                body = stats(reg)["last"][-1]["body"]
                check(not any(k.startswith("bootstrap_") for k in body), "regular body %r" % body)
                clean = {k: v for k, v in b.items() if not k.startswith("bootstrap_")}
                check(same_text(route, clean, out, ref.port, stream), "%s: %r" % (route, out[:300]))
                if stream:
                    check(sse_events(out.encode())[-1] == "[DONE]", "no [DONE]: %r" % out[-200:])
                elif b.get("return_logprob"):
                    mi = json.loads(out)["meta_info"]
                    check(len(mi["input_token_logprobs"]) == 3, "input logprobs %r" % mi)
        check(stats(p)["requests"] == 0 and stats(d)["requests"] == 0, "a PD worker was called")
        check(stats(reg)["completed"] == n, "regular stats %r" % stats(reg))
        st, out = curl(r.port, GEN, {"text": LONG, "sampling_params": {"max_new_tokens": 6}})
        check(st == 200 and stats(p)["requests"] == 1 and stats(d)["requests"] == 1, out[:300], r)
        check(stats(reg)["requests"] == n, "the regular worker got a long prompt")
        m = decisions(r, short_prompt=n, disaggregated=1)
        check(metric_value(m, "pdr_workers", role="regular", source="static") == 1, "pdr_workers regular")
        lines = log_lines(alog, n + 1)
        check(all(l["decode"] == "http://127.0.0.1:%d" % reg.port and l["prefill"] is None and l["room"] is None
                  for l in lines[:n]), "log %r" % lines[:n])
        # An unhealthy regular worker is not used: short prompts are disaggregated again.
        pdtest.request_json(reg.port, "POST", "/pdsim/fault", {"fail_health": True})
        metrics_when(r, lambda t: metric_value(t, "pdr_worker_healthy", role="regular",
                                                url="http://127.0.0.1:%d" % reg.port) == 0, "regular unhealthy")
        st, out = curl(r.port, GEN, {"text": SHORT, "sampling_params": {"max_new_tokens": 6}})
        check(st == 200 and stats(p)["requests"] == 2 and stats(reg)["requests"] == n, out[:300], r)
        stop_clean(r, reg)
    finally:
        os.unlink(alog)


def scenario_sglang_no_regular():
    """protocol sglang without regular workers: a decode cannot prefill, so nothing is skipped (and no
    decision is counted)."""
    p, d = sim("prefill"), sim("decode")
    r, alog = start("sglang", "{ min_prefill_chars: 200, skip_when_prefill_saturated: true, "
                    "prefill_saturated_inflight: 1 }", [p], [d])
    try:
        st, out = curl(r.port, GEN, {"text": SHORT, "sampling_params": {"max_new_tokens": 6}})
        check(st == 200 and stats(p)["requests"] == 1, "%d %s" % (st, out[:300]), r)
        decisions(r)
        check(log_lines(alog, 1)[0]["disagg"] is None, "log field")
    finally:
        os.unlink(alog)


if __name__ == "__main__":
    pdtest.run_scenario(globals())
