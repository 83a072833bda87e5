#!/usr/bin/env python3
"""Integration test of pdsim's prefix cache (--prefix-cache-tokens): a second prompt with the same long
prefix reports the prefix's whole blocks as meta_info.cached_tokens (and OpenAI's
usage.prompt_tokens_details.cached_tokens), its prefill takes the time of the uncached tokens only,
/pdsim/stats counts hits, misses, blocks and evictions, the least recently used blocks go at the cap,
a PD prefill reports its hits, and bad cache flags exit 2. Standard library only; exit 0 = pass."""

import os
import random
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import request, request_json, check  # noqa: E402

US_PER_TOKEN = 4000  # 4 ms per computed prompt token


def words(tag, n):
    return " ".join("%s%d" % (tag, i) for i in range(n))


def gen(port, text):
    t0 = time.monotonic()
    r = request_json(port, "POST", "/generate", {"text": text, "sampling_params": {"max_new_tokens": 2}})
    return r["meta_info"], time.monotonic() - t0


def cache_stats(p):
    return request_json(p.port, "GET", "/pdsim/stats")["prefix_cache"]


def test_hits(p):
    system = words("sys", 80)  # 5 whole blocks of 16
    m1, t1 = gen(p.port, system + " " + words("ua", 20))
    check(m1["prompt_tokens"] == 100 and m1["cached_tokens"] == 0, repr(m1), p)
    m2, t2 = gen(p.port, system + " " + words("ub", 20))
    check(m2["cached_tokens"] == 80, "shared 80-token prefix: %r" % m2, p)
    # 100 tokens computed take at least 400 ms; 20 take about 80 ms.
    check(t1 >= 0.4 and t2 < t1 - 0.2, "prefill times %.3f then %.3f s" % (t1, t2), p)
    st = cache_stats(p)
    check(st["enabled"] and st["hit_tokens"] == 80 and st["miss_tokens"] == 120, repr(st), p)
    check(st["blocks"] == 6 + 1 and st["block_tokens"] == 16 and st["evicted_blocks"] == 0, repr(st), p)
    # The same prompt again: every whole block but the one holding the last token.
    m3, _ = gen(p.port, system + " " + words("ub", 20))
    check(m3["cached_tokens"] == 96, repr(m3), p)
    # A different first word: nothing matches (blocks chain on their prefix).
    m4, _ = gen(p.port, "other " + system)
    check(m4["cached_tokens"] == 0, repr(m4), p)
    # OpenAI routes report it in usage.prompt_tokens_details.
    c = request_json(p.port, "POST", "/v1/completions", {"prompt": system + " tail", "max_tokens": 1})
    check(c["usage"]["prompt_tokens"] == 81 and c["usage"]["prompt_tokens_details"] == {"cached_tokens": 80},
          repr(c), p)


def test_lru():
    # 256 tokens = 16 blocks; three distinct 100-token prompts hold 6 blocks each.
    p = pdtest.start(["pdsim", "--role", "both", "--port", "{port}", "--prefix-cache-tokens", "256"], name="lru")
    a, b, c = words("a", 100), words("b", 100), words("c", 100)
    gen(p.port, a)
    gen(p.port, b)
    check(gen(p.port, b)[0]["cached_tokens"] == 96, "b cached", p)
    gen(p.port, c)  # two blocks must go: the tail of a, the least recently used
    st = cache_stats(p)
    check(st["blocks"] == 16 and st["max_blocks"] == 16 and st["evicted_blocks"] == 2, repr(st), p)
    check(gen(p.port, b)[0]["cached_tokens"] == 96, "b evicted", p)
    check(gen(p.port, a)[0]["cached_tokens"] == 64, "a keeps its first 4 blocks", p)
    check(p.stop() == 0, "exit status", p)


def test_pd_prefill():
    prefill = pdtest.start(["pdsim", "--role", "prefill", "--port", "{port}", "--bootstrap-port", "{bport}",
                            "--prefix-cache-tokens", "4096", "--cache-block-tokens", "8"], name="prefill")
    decode = pdtest.start(["pdsim", "--role", "decode", "--port", "{port}"], name="decode")
    got = []
    for suffix in ("x", "y"):
        body = {"text": words("p", 40) + " " + suffix, "sampling_params": {"max_new_tokens": 2},
                "bootstrap_host": "127.0.0.1", "bootstrap_port": prefill.ports["bport"],
                "bootstrap_room": random.randrange(0, 2**63)}
        out = {}

        def go(name, port):
            out[name] = request_json(port, "POST", "/generate", body, timeout=20)

        ts = [threading.Thread(target=go, args=a) for a in (("p", prefill.port), ("d", decode.port))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        check("p" in out and "d" in out, "PD request failed", prefill, decode)
        got.append(out["p"]["meta_info"]["cached_tokens"])
    check(got == [0, 40], "prefill cached_tokens %r (block 8)" % got, prefill)
    check(request_json(decode.port, "GET", "/pdsim/stats")["prefix_cache"]["enabled"] is False, "decode", decode)
    for q in (prefill, decode):
        check(q.stop() == 0, "exit status", q)


def test_off_and_flags():
    p = pdtest.start(["pdsim", "--role", "both", "--port", "{port}"], name="off")
    text = words("w", 50)
    gen(p.port, text)
    check(gen(p.port, text)[0]["cached_tokens"] == 0, "cache off reports 0", p)
    check(cache_stats(p)["enabled"] is False, "stats", p)
    c = request_json(p.port, "POST", "/v1/completions", {"prompt": text, "max_tokens": 1})
    check("prompt_tokens_details" not in c["usage"], repr(c), p)
    check(p.stop() == 0, "exit status", p)
    pdsim = pdtest.binary("pdsim")
    for argv, what in (
        (["--role", "decode", "--port", "1", "--prefix-cache-tokens", "64"], "prefill or both"),
        (["--role", "both", "--port", "1", "--prefix-cache-tokens", "8"], "less than one block"),
        (["--role", "both", "--port", "1", "--cache-block-tokens", "0"], "--cache-block-tokens"),
        (["--role", "both", "--port", "1", "--prefix-cache-tokens", "-1"], "--prefix-cache-tokens"),
    ):
        r = subprocess.run([pdsim] + argv, capture_output=True, text=True)
        check(r.returncode == 2 and what in r.stderr, "%r: %r %r" % (argv, r.returncode, r.stderr))


def main():
    random.seed()
    t0 = time.monotonic()
    try:
        p = pdtest.start(["pdsim", "--role", "both", "--port", "{port}", "--prefix-cache-tokens", "4096",
                          "--prefill-us-per-token", str(US_PER_TOKEN)], name="cache")
        test_hits(p)
        check(p.stop() == 0, "exit status", p)
        test_lru()
        test_pd_prefill()
        test_off_and_flags()
        for q in pdtest._procs:
            log = q.log_tail(200)
            check("ERROR: AddressSanitizer" not in log and "LeakSanitizer" not in log, "sanitizer report", q)
    finally:
        pdtest.stop_all()
    print("test_pdsim_cache: ok (%.1fs)" % (time.monotonic() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
