#!/usr/bin/env python3
"""Conditional disaggregation when the prompt is cached on the prefill only: skip the prefill (the decode
computes the whole prompt again) or disaggregate (the prefill computes the new part and sends the KV)?

    PDR_BUILD=build python3 bench/disagg_cached.py [REQUESTS]

Protocol vllm (its decode runs a request alone). One pdsim prefill with its prefix cache, one pdsim decode
without one (--local-prefill: it computes a
prompt it is given alone), both at PREFILL_US per computed prompt token; the router has
disaggregation.min_prefill_chars at 2000 and cache_aware on the prefills. REQUESTS (default 20) completions
share a 2000-word prefix, each with its own short suffix, sent one at a time. Rows:
  skip (what the rule did when it read the prefill's cache): min_prefill_chars above every prompt, so each
      request runs on the decode alone and computes its whole prompt;
  weigh the decode's cache (the rule now): the decodes' policy knows no caches, so nothing is held there
      and the prompts are disaggregated: the prefill computes the suffix, its KV goes to the decode.
Prints a markdown table of the decode's computed prompt tokens, the prefill's hit ratio and the client's
time to first token; exits non-zero on any non-200 answer.
"""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import pdtest  # noqa: E402
from test_router import metric_value, metrics, router, sim, stats  # noqa: E402

REQUESTS = int(sys.argv[1]) if len(sys.argv) > 1 else 20
PREFILL_US = "50"
PREFIX = " ".join("w%d" % (i % 997) for i in range(2000))


def ttft(port, body):
    """Milliseconds to the first body byte of a streamed completion (the first token)."""
    t0 = time.monotonic()
    conn, resp = pdtest.stream_request(port, "POST", "/v1/completions", body, timeout=60)
    if resp.status != 200:
        sys.exit("status %d: %r" % (resp.status, resp.read()[:300]))
    while not resp.readline().startswith(b"data:"):  # the first token's event
        pass
    t = (time.monotonic() - t0) * 1000
    resp.read()
    conn.close()
    return t


def run(label, min_chars):
    try:
        p = sim("prefill", "--prefix-cache-tokens", "65536", "--prefill-us-per-token", PREFILL_US,
                "--kv-bytes-per-token", "1024")
        d = sim("decode", "--local-prefill", "--prefill-us-per-token", PREFILL_US, "--kv-bytes-per-token", "1024")
        r = router([p], [d], config="protocol: vllm\npolicy: { prefill: cache_aware, decode: least_load }\n"
                                    "disaggregation: { min_prefill_chars: %d }" % min_chars)
        # The prefix is computed once on the prefill first (a request that is disaggregated either way).
        warm = {"model": "m", "prompt": PREFIX + " warm", "max_tokens": 1}
        st = pdtest.request(r.port, "POST", "/v1/completions", warm, timeout=60)[0]
        if st != 200:
            sys.exit("warm-up: status %d" % st)
        times = []
        for i in range(REQUESTS):
            body = {"model": "m", "prompt": PREFIX + " q%d" % i, "max_tokens": 2, "stream": True}
            times.append(ttft(r.port, body))
        sp, sd = stats(p), stats(d)
        hit = sp["prefix_cache"]["hit_tokens"] / max(1, sp["prefix_cache"]["hit_tokens"] +
                                                     sp["prefix_cache"]["miss_tokens"])
        m = metrics(r)
        solo = int(metric_value(m, "pdr_disagg_decisions_total", decision="short_prompt") or 0)
        times.sort()
        print("| %s | %d of %d | %d | %.2f | %.1f | %.1f |" % (
            label, solo, REQUESTS + 1, sd["local_prefills"], hit, times[len(times) // 2], times[-1]), flush=True)
    finally:
        pdtest.stop_all()


print("| rule | requests run on the decode alone (warm-up included) | decode's own prefills | prefill's cache hit ratio | "
      "TTFT p50 ms | TTFT max ms |")
print("|---|---:|---:|---:|---:|---:|")
run("skip: the decode computes it all (the prefill's cache decided)", 10 ** 9)
run("weigh the decode's cache (now): disaggregated, the prefill's cache used", 2000)
