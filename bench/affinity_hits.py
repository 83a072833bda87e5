#!/usr/bin/env python3
"""Session affinity, measured: the prefix cache hit ratio of multi-turn chats at the prefills, with and
without affinity, by routing policy.

    PDR_BUILD=build python3 bench/affinity_hits.py [REQUESTS]

Three pdsim prefills (prefix cache of 65536 tokens each) and three decodes behind one router; pdbench
sends REQUESTS (default 384) requests of 8-turn conversations (128-token turns, 32 output tokens) at
concurrency 8, each turn naming its conversation in X-Session-Id. The hit ratio is the prefills' own
count: prefix tokens found cached over all prompt tokens (pdsim's /pdsim/stats). Prints a markdown table;
exits non-zero when pdbench reports any failed request.
"""

import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import pdtest  # noqa: E402
from test_router import metric_value, metrics, router, sim, stats  # noqa: E402

REQUESTS = int(sys.argv[1]) if len(sys.argv) > 1 else 384


def run(policy, mode, ratio=None):
    """(hit ratio, prefill picks by affinity outcome) of one configuration."""
    try:
        ps = [sim("prefill", "--prefix-cache-tokens", "65536") for _ in range(3)]
        ds = [sim("decode") for _ in range(3)]
        aff = "mode: %s" % mode + (", max_load_ratio: %s" % ratio if ratio is not None else "")
        r = router(ps, ds, config="policy: { prefill: %s, decode: %s }\naffinity: { %s }" % (policy, policy, aff))
        fd, out = tempfile.mkstemp(prefix="pdr-affinity-", suffix=".json")
        os.close(fd)
        argv = [pdtest.binary("pdbench"), "--url", "http://127.0.0.1:%d" % r.port, "--profiles", "128/32",
                "--concurrency", "8", "--requests", str(REQUESTS), "--workload", "multi-turn", "--turns", "8",
                "--warmup", "0", "--quiet", "--no-health", "--json", out, "--session-header", "x-session-id"]
        res = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        os.unlink(out)
        if res.returncode != 0:
            sys.exit("pdbench failed (%s, affinity %s): %s" % (policy, mode, res.stderr.strip()))
        hit = sum(stats(p)["prefix_cache"]["hit_tokens"] for p in ps)
        miss = sum(stats(p)["prefix_cache"]["miss_tokens"] for p in ps)
        m = metrics(r)
        shed = metric_value(m, "pdr_affinity_picks_total", role="prefill", outcome="fallback_overloaded") or 0
        return hit / max(1, hit + miss), int(shed)
    finally:
        pdtest.stop_all()


print("| prefill and decode policy | affinity | prefix hit ratio at the prefills | prefill picks shed (soft) |")
print("|---|---|---:|---:|")
for policy in ("round_robin", "cache_aware"):
    for mode, ratio in (("off", None), ("soft", None), ("soft", 3), ("hard", None)):
        hits, shed = run(policy, mode, ratio)
        label = mode + (" (max_load_ratio %s)" % ratio if ratio is not None else "")
        print("| %s | %s | %.3f | %s |" % (policy, label, hits, shed if mode == "soft" else ""), flush=True)
