"""pdbench end to end: real pdbench runs against pdsim workers (behind pdrouter or directly) and a small
scripted SSE server, checking what pdbench measured and reported.

    python3 test_pdbench.py cluster|failures|stub|usage|prefix|spread|plot

- cluster: a prefill + decode pdsim pair behind pdrouter; a 2 profiles x 2 concurrencies matrix on
  /generate (text and input_ids), /v1/completions and /v1/chat/completions. Counts, token numbers,
  percentile order, latencies against pdsim's configured decode time, the router overhead from the
  decode's first-token stamp (pdsim --stamp-first-token), the JSON, report.md and the PNGs
  (this scenario exits 77 at the end, after every other check, when gnuplot is not installed).
- failures: HTTP 500 from a worker, 503 through the router, refused connections, a failed health gate,
  a reset mid-stream: non-zero exit, failures counted by cause; --allow-failures exits 0.
- stub: a Python SSE server that stamps pdsim_mono_us (router_overhead_us), answers short, sends an
  error event, ends without [DONE] or does not stream; the seed fixes the prompts (and repeats get
  their own); plots skipped without gnuplot (exit 3) or with --no-plots.
- usage: bad flags exit 2 with a message; --help names every flag.
- prefix: --workload random, shared-prefix and multi-turn against pdsim with its prefix cache on: the
  hit ratio pdbench reports from the answers' cached_tokens is 0 for random prompts and well above 0
  for shared prefixes and conversations; the same seed sends the same prompts (a second run is all
  hits), another seed other suffixes; multi-turn prompts grow by ISL + OSL per turn.
- plot: the TTFT plot's lines when two profiles share an input length (one per concurrency and output
  length, each titled with both), checked in plots.gp and ttft_vs_isl.dat.
- spread: --url A,B (router replicas behind one name): requests alternate between the two targets; a
  list with a bad URL is a usage error.
- session: --session-header names each multi-turn request's conversation: pdrouter's session affinity
  (hard mode, three prefills with prefix caches) finds a key in every request and keeps each
  conversation's turns on one prefill, so each turn hits its whole previous prompt; without the flag
  no request has a key; the flag without multi-turn is a usage error.
"""

import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check  # noqa: E402

DECODE_US = 2000  # pdsim's decode time per output token in the cluster scenario
PREFILL_US = 20


def pdbench(*args, timeout=60):
    """Runs pdbench; returns (rc, stdout, stderr)."""
    p = subprocess.run([pdtest.binary("pdbench")] + [str(a) for a in args], capture_output=True, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def bench_json(*args, expect_rc=0, timeout=60):
    """Runs pdbench with --json into a temporary file; asserts the exit status; returns (json, stderr)."""
    fd, path = tempfile.mkstemp(prefix="pdbench-", suffix=".json")
    os.close(fd)
    try:
        rc, out, err = pdbench(*args, "--json", path, timeout=timeout)
        check(rc == expect_rc, "pdbench %s: exit %d, expected %d\n%s%s" % (" ".join(map(str, args)), rc, expect_rc,
                                                                          out, err))
        with open(path) as f:
            return json.load(f), err
    finally:
        os.unlink(path)


def dist_ok(d, what):
    """A distribution object: ordered percentiles, mean within [min-ish, max]."""
    check(d is not None, "%s: no distribution" % what)
    check(0 <= d["p50"] <= d["p90"] <= d["p99"] <= d["max"], "%s: percentiles out of order: %r" % (what, d))
    check(0 <= d["mean"] <= d["max"], "%s: mean above max: %r" % (what, d))


def cluster():
    p = pdtest.start(["pdsim", "--role", "prefill", "--port", "{port}", "--bootstrap-port", "{bport}",
                      "--prefill-us-per-token", str(PREFILL_US), "--decode-us-per-token", str(DECODE_US)],
                     name="pdsim-prefill")
    d = pdtest.start(["pdsim", "--role", "decode", "--port", "{port}", "--prefill-us-per-token", str(PREFILL_US),
                      "--decode-us-per-token", str(DECODE_US), "--stamp-first-token"], name="pdsim-decode")
    r = pdtest.start(["pdrouter", "--pd-disaggregation", "--host", "127.0.0.1", "--port", "{port}",
                      "--admin-port", "{admin}", "--drain-grace-ms", "0", "--prefill",
                      "http://127.0.0.1:%d" % p.port, str(p.ports["bport"]), "--decode",
                      "http://127.0.0.1:%d" % d.port], name="pdrouter", health_path="/readiness", healthy=200)
    return p, d, r


def scenario_cluster():
    p, d, r = cluster()
    url = "http://127.0.0.1:%d" % r.port
    report = tempfile.mkdtemp(prefix="pdbench-report-")
    try:
        j, err = bench_json("--url", url, "--profiles", "16/16,64/8", "--concurrency", "1,4", "--requests", 8,
                            "--seed", 7, "--per-request", "--report", report,
                            *([] if shutil.which("gnuplot") else ["--no-plots"]))
        check(j["tool"] == "pdbench" and j["config"]["api"] == "generate" and j["config"]["seed"] == 7,
              "config block: %r" % j["config"])
        runs = j["runs"]
        check([(x["profile"], x["concurrency"]) for x in runs] ==
              [("16/16", 1), ("16/16", 4), ("64/8", 1), ("64/8", 4)], "run order: %r" % runs)
        for x in runs:
            what = "run %s c=%d" % (x["profile"], x["concurrency"])
            check(x["requests"] == 8 and x["ok"] == 8 and x["failed"] == 0 and x["failures"] == {},
                  "%s: counts %r" % (what, x), r, d)
            check(x["health_ok"] is True and x["warmup"] is True, "%s: gate/warm-up %r" % (what, x))
            check(x["output_tokens"] == 8 * x["osl"], "%s: %d output tokens" % (what, x["output_tokens"]))
            check(x["prompt_tokens_mean"] == x["isl"], "%s: pdsim counted %r prompt tokens" % (what,
                                                                                            x["prompt_tokens_mean"]))
            # The decode stamps its first event (--stamp-first-token): the router's share of TTFT.
            dist_ok(x.get("router_overhead_us"), "%s router_overhead_us" % what)
            check(x["router_overhead_us"]["n"] == 8 and x["router_overhead_us"]["max"] < 1000 * x["ttft_ms"]["max"],
                  "%s: overhead %r, TTFT %r" % (what, x["router_overhead_us"], x["ttft_ms"]))
            for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
                dist_ok(x[k], "%s %s" % (what, k))
            check(x["ttft_ms"]["n"] == 8 and x["e2e_ms"]["n"] == 8 and x["itl_ms"]["n"] == 8 * (x["osl"] - 1),
                  "%s: sample counts" % what)
            ms = DECODE_US / 1000.0
            # pdsim writes token j no earlier than t0 + (j+1) x decode time, t0 after the request came: E2E
            # is at least OSL x decode time (checked per request below). A late token is followed by one
            # that catches up, so single gaps may be shorter, and TPOT by the first token's own delay
            # over OSL - 1 gaps: hence the margins.
            check(x["tpot_ms"]["p50"] >= 0.7 * ms, "%s: TPOT p50 %.3f ms < %.1f ms" % (what, x["tpot_ms"]["p50"], ms))
            check(x["tpot_ms"]["p50"] < 10 * ms, "%s: TPOT p50 %.3f ms implausible" % (what, x["tpot_ms"]["p50"]))
            check(x["itl_ms"]["mean"] >= 0.6 * ms and x["itl_ms"]["max"] >= ms, "%s: ITL mean %.3f ms" % (what, x["itl_ms"]["mean"]))
            for q in x["per_request"]:
                check(q["ok"] and q["tokens"] == x["osl"] and q["prompt_tokens"] == x["isl"], "%s: %r" % (what, q))
                check(q["ttft_ms"] >= ms, "%s: TTFT %.3f ms before the first token was due" % (what,
                                                                                                   q["ttft_ms"]))
                check(q["e2e_ms"] >= x["osl"] * ms and q["e2e_ms"] >= q["ttft_ms"], "%s: E2E %r" % (what, q))
                check(len(q["itl_ms"]) == x["osl"] - 1, "%s: %d gaps" % (what, len(q["itl_ms"])))
                tpot = (q["e2e_ms"] - q["ttft_ms"]) / (q["tokens"] - 1)
                check(abs(tpot - q["tpot_ms"]) < 1e-3, "%s: TPOT %r != (E2E-TTFT)/(tokens-1)" % (what, q))
            check(x["output_tokens_per_s"] > 0 and x["requests_per_s"] > 0, "%s: rates %r" % (what, x))
        # Concurrency 4 keeps more requests in flight: more tokens per second than concurrency 1.
        check(runs[1]["output_tokens_per_s"] > runs[0]["output_tokens_per_s"], "throughput did not grow with c")

        with open(os.path.join(report, "report.md")) as f:
            md = f.read()
        for row in ("| 1 | 16/16 | 1 | 1 | 8 / 8 | 0 |", "| 4 | 64/8 | 4 | 1 | 8 / 8 | 0 |"):
            check(row in md, "report.md lacks %r:\n%s" % (row, md))
        check("router overhead µs" in md, "report.md has no overhead column:\n%s" % md)
        for dat in ("ttft_vs_isl.dat", "throughput_vs_concurrency.dat", "failures.dat", "plots.gp"):
            check(os.path.getsize(os.path.join(report, dat)) > 0, "report: %s empty" % dat)

        # The other APIs and input_ids, one short run each.
        for extra in (["--api", "completions"], ["--api", "chat"], ["--input-ids"]):
            j2, _ = bench_json("--url", url, "--profiles", "32/5", "--concurrency", 2, "--requests", 4, "--quiet",
                               "--per-request", *extra)
            x = j2["runs"][0]
            check(x["ok"] == 4 and x["output_tokens"] == 20, "%s: %r" % (extra, x), r, d)
            check(all(len(q["itl_ms"]) == 4 for q in x["per_request"]), "%s: gaps" % extra)
            if extra == ["--input-ids"]:
                check(x["prompt_tokens_mean"] == 32, "input_ids: %r prompt tokens" % x["prompt_tokens_mean"])
        # The same seed sends the same prompts: pdsim's outputs (a function of the prompt) repeat.
        st = pdtest.request_json(d.port, "GET", "/pdsim/stats")
        check(st["errors"] == 0, "decode errors: %r" % st)

        if not shutil.which("gnuplot"):
            print("gnuplot not installed: PNG checks skipped")
            sys.exit(77)
        check("Plots skipped" not in md, "plots skipped with gnuplot present:\n%s" % md)
        for png in ("ttft_vs_isl.png", "throughput_vs_concurrency.png", "failures_heatmap.png"):
            with open(os.path.join(report, png), "rb") as f:
                check(f.read(8) == b"\x89PNG\r\n\x1a\n", "%s is not a PNG" % png)
            check("](%s)" % png in md, "report.md does not show %s" % png)
    finally:
        shutil.rmtree(report, ignore_errors=True)


def scenario_failures():
    # A worker that answers 500: every request is an http_500; the warm-up failed too.
    w = pdtest.start(["pdsim", "--role", "both", "--port", "{port}", "--fail-status", "500"], name="pdsim-500")
    url = "http://127.0.0.1:%d" % w.port
    j, err = bench_json("--url", url, "--profiles", "8/4", "--concurrency", 2, "--requests", 6, expect_rc=1)
    x = j["runs"][0]
    check(x["ok"] == 0 and x["failed"] == 6 and x["failures"] == {"http_500": 6}, "fail-status: %r" % x)
    check("injected failure" in x["failure_examples"]["http_500"], "example: %r" % x["failure_examples"])
    check(x["warmup"] is False and "http_500" in x["warmup_error"], "warm-up: %r" % x)
    check("http_500" in err, "stderr does not name the cause:\n%s" % err)
    j, _ = bench_json("--url", url, "--profiles", "8/4", "--requests", 3, "--allow-failures", "--quiet")
    check(j["runs"][0]["failures"] == {"http_500": 3}, "allow-failures: %r" % j["runs"][0])
    w.stop()

    # Nothing listens: refused connections (no gate), then a health gate that never passes.
    port = pdtest.free_port()
    url = "http://127.0.0.1:%d" % port
    j, _ = bench_json("--url", url, "--profiles", "8/4", "--requests", 3, "--no-health", "--warmup", 0, expect_rc=1)
    check(j["runs"][0]["failures"] == {"connect": 3}, "refused: %r" % j["runs"][0])
    t0 = time.monotonic()
    j, err = bench_json("--url", url, "--profiles", "8/4,16/4", "--requests", 3, "--health-timeout", "0.3",
                        expect_rc=1)
    check(time.monotonic() - t0 < 10, "health gate took %.1fs" % (time.monotonic() - t0))
    for x in j["runs"]:
        check(x["health_ok"] is False and x["requests"] == 0 and "did not answer 200" in x["health_error"],
              "gate: %r" % x)
    check("health gate" in err and "ECONNREFUSED" in err, "gate stderr:\n%s" % err)

    # A worker whose health fails: the gate names the status.
    w = pdtest.start(["pdsim", "--role", "both", "--port", "{port}", "--fail-health"], name="pdsim-unhealthy")
    j, err = bench_json("--url", "http://127.0.0.1:%d" % w.port, "--profiles", "8/4", "--requests", 2,
                        "--health-timeout", "0.3", expect_rc=1)
    check("HTTP 503" in j["runs"][0]["health_error"], "gate: %r" % j["runs"][0])
    w.stop()

    # A stream cut mid-way (after 3 tokens h2o writes a broken chunk, then the RST): counted.
    w = pdtest.start(["pdsim", "--role", "both", "--port", "{port}", "--reset-after-tokens", "3"], name="pdsim-rst")
    j, _ = bench_json("--url", "http://127.0.0.1:%d" % w.port, "--profiles", "8/6", "--requests", 3, "--quiet",
                      "--per-request", expect_rc=1)
    x = j["runs"][0]
    check(x["failed"] == 3 and set(x["failures"]) <= {"reset", "bad_response", "no_done"}, "reset: %r" % x["failures"])
    w.stop()

    # Through the router: a decode answering 500 makes every request fail (502, or 503 once ejected).
    p, d, r = cluster()
    pdtest.request_json(d.port, "POST", "/pdsim/fault", {"fail_status": 500})
    j, _ = bench_json("--url", "http://127.0.0.1:%d" % r.port, "--profiles", "8/4", "--concurrency", 2,
                      "--requests", 6, "--quiet", "--health-url", "http://127.0.0.1:%d/health" % r.port, expect_rc=1)
    x = j["runs"][0]
    check(x["ok"] == 0 and x["failed"] == 6 and all(k in ("http_502", "http_503") for k in x["failures"]),
          "router failures: %r" % x, r)


SEEN = []  # every body the stub received


class Stub(http.server.BaseHTTPRequestHandler):
    """An SSE server in the sglang /generate shape. The query string picks the behaviour:
    stamp (pdsim_mono_us in every event: 50 ms in the past on the first, 10 s on the others), short
    (half the tokens), error (an error event), nodone (no [DONE]), json (a non-streaming answer)."""

    protocol_version = "HTTP/1.0"

    def log_message(self, *a):
        pass

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        SEEN.append(body)
        n = body["sampling_params"]["max_new_tokens"]
        mode = self.path.partition("?")[2]
        self.send_response(200)
        self.send_header("Content-Type", "application/json" if mode == "json" else "text/event-stream")
        self.end_headers()
        if mode == "json":
            self.wfile.write(json.dumps({"text": "x", "meta_info": {"completion_tokens": n}}).encode())
            return
        if mode == "short":
            n //= 2
        for i in range(n):
            ev = {"text": "w " * (i + 1), "meta_info": {"completion_tokens": i + 1, "prompt_tokens": 3}}
            if mode == "stamp":
                ev["pdsim_mono_us"] = time.monotonic_ns() // 1000 - (50000 if i == 0 else 10000000)
            if mode == "error" and i == 1:
                ev = {"error": {"message": "stub failure", "type": "internal_error", "code": 500}}
            self.wfile.write(b"data: " + json.dumps(ev).encode() + b"\n\n")
            self.wfile.flush()
        if mode != "nodone":
            self.wfile.write(b"data: [DONE]\n\n")


def scenario_stub():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = "http://127.0.0.1:%d" % srv.server_address[1]
    report = tempfile.mkdtemp(prefix="pdbench-report-")
    try:
        j, _ = bench_json("--url", url, "--path", "/generate?stamp", "--profiles", "4/5", "--concurrency", 2,
                          "--requests", 6, "--quiet", "--per-request", "--report", report, "--no-plots")
        x = j["runs"][0]
        check(x["ok"] == 6, "stamp: %r" % x)
        o = x.get("router_overhead_us")
        dist_ok(o, "router_overhead_us")
        # Only the first token event's stamp counts (the later ones say 10 s ago).
        check(o["n"] == 6 and 50000 <= o["p50"] and o["max"] < 5000000, "overhead: %r" % o)
        check(all(50000 <= q["router_overhead_us"] < 5000000 for q in x["per_request"]), "per request overhead")
        with open(os.path.join(report, "report.md")) as f:
            md = f.read()
        check("router overhead µs" in md and "Plots skipped (--no-plots)" in md, "report.md:\n%s" % md)

        for mode, cause in (("short", "short_output"), ("error", "stream_error"), ("nodone", "no_done"),
                            ("json", "not_stream")):
            j, _ = bench_json("--url", url, "--path", "/generate?" + mode, "--profiles", "4/6", "--requests", 2,
                              "--quiet", "--warmup", 0, expect_rc=1)
            check(j["runs"][0]["failures"] == {cause: 2}, "%s: %r" % (mode, j["runs"][0]))
            if mode == "error":
                check("stub failure" in j["runs"][0]["failure_examples"][cause], "error event: %r" % j["runs"][0])

        # The seed fixes the prompts: the same seed sends the same bodies, another seed others; every
        # request of a matrix (repeats included) has its own prompt of ISL words.
        def prompts(seed):
            del SEEN[:]
            j, _ = bench_json("--url", url, "--path", "/generate?plain", "--profiles", "12/2", "--concurrency", "1,2",
                              "--repeats", 2, "--requests", 3, "--seed", seed, "--quiet")
            check([(x["concurrency"], x["repeat"]) for x in j["runs"]] == [(1, 0), (1, 1), (2, 0), (2, 1)],
                  "repeats: %r" % j["runs"])
            check(all(x["ok"] == 3 and "router_overhead_us" not in x for x in j["runs"]), "plain: %r" % j["runs"])
            texts = [b["text"] for b in SEEN]
            check(len(texts) == 16 and all(len(t.split(" ")) == 12 for t in texts), "prompts: %r" % texts)
            check(all(b["sampling_params"] == {"max_new_tokens": 2, "ignore_eos": True, "temperature": 0}
                      and b["stream"] is True for b in SEEN), "bodies: %r" % SEEN[:2])
            return sorted(texts)
        a, b, c = prompts(5), prompts(5), prompts(6)
        check(a == b, "the same seed sent other prompts")
        check(len(set(a)) == 16 and not set(a) & set(c), "prompts repeat across requests or seeds")

        # Plots asked for but gnuplot missing: the report says so, pdbench says so, exit 3.
        rc, out, err = pdbench("--url", url, "--path", "/generate?stamp", "--profiles", "4/3", "--requests", 2,
                               "--quiet", "--report", report, "--gnuplot", "/nonexistent/gnuplot")
        check(rc == 3 and "plots skipped" in err, "missing gnuplot: rc %d\n%s" % (rc, err))
        with open(os.path.join(report, "report.md")) as f:
            md = f.read()
        check("Plots skipped: cannot run /nonexistent/gnuplot" in md, "report.md:\n%s" % md)
    finally:
        srv.shutdown()
        shutil.rmtree(report, ignore_errors=True)


def scenario_usage():
    rc, out, err = pdbench("--help")
    check(rc == 0, "--help: %d" % rc)
    src = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "pdbench",
                            "flags.c")).read()
    import re
    flags = set(re.findall(r'strcmp\(a, "(--[a-z-]+)"\)', src))
    check(len(flags) > 20, "flags found in flags.c: %r" % flags)
    for fl in flags:
        check(fl in out, "--help does not document %s" % fl)
    for args, msg in ((["--profiles", "8/4"], "--url is required"),
                      (["--url", "http://x", "--profiles", "8"], "ISL/OSL pairs"),
                      (["--url", "http://x", "--concurrency", "0"], "--concurrency"),
                      (["--url", "http://x", "--api", "foo"], "--api foo"),
                      (["--url", "https://x"], "only http://"),
                      (["--url", "http://x", "--api", "chat", "--input-ids"], "--input-ids needs"),
                      (["--url", "http://x", "--bogus"], "unknown argument --bogus"),
                      (["--url", "http://x", "--requests"], "--requests needs a value")):
        rc, out, err = pdbench(*args)
        check(rc == 2 and msg in err, "%r: rc %d, stderr %r" % (args, rc, err))


def scenario_prefix():
    sim = pdtest.start(["pdsim", "--role", "both", "--port", "{port}", "--prefix-cache-tokens", "1000000",
                        "--prefill-us-per-token", str(PREFILL_US)], name="cache")
    url = "http://127.0.0.1:%d" % sim.port
    base = ["--url", url, "--profiles", "256/4", "--concurrency", 2, "--warmup", 0, "--quiet", "--per-request"]

    def cache():
        return pdtest.request_json(sim.port, "GET", "/pdsim/stats")["prefix_cache"]

    j, _ = bench_json(*base, "--requests", 16)
    r = j["runs"][0]
    check(j["config"]["workload"] == "random" and r["cache_hit_ratio"] is not None, repr(r)[:400])
    check(r["cache_hit_ratio"] < 0.01, "random prompts hit the cache: %r" % r["cache_hit_ratio"])
    shared = base + ["--workload", "shared-prefix", "--prefixes", 2, "--prefix-tokens", 192, "--requests", 16,
                     "--seed", 7]
    h0 = cache()["hit_tokens"]
    j, _ = bench_json(*shared)
    r = j["runs"][0]
    check(j["config"]["workload"] == "shared-prefix" and j["config"]["prefix_tokens"] == 192, repr(j["config"]))
    # 2 prefixes of 12 blocks; at most the first request of each prefix per slot misses.
    check(0.4 < r["cache_hit_ratio"] <= 0.75, "shared-prefix hit ratio %r" % r["cache_hit_ratio"])
    per = [q["cached_tokens"] for q in r["per_request"]]
    check(all(c % 16 == 0 and c <= 192 for c in per), "cached_tokens per request: %r" % per)
    check(r["cached_tokens"] == sum(per) == cache()["hit_tokens"] - h0, "sum %r vs %r" % (r["cached_tokens"], per))
    # The same seed again: the same prompts, so every whole block but the last token's hits.
    j, _ = bench_json(*shared)
    check(j["runs"][0]["cache_hit_ratio"] == 240 / 256, "same seed: %r" % j["runs"][0]["cache_hit_ratio"])
    shared[shared.index("--seed") + 1] = 8
    j, _ = bench_json(*shared)
    check(j["runs"][0]["cache_hit_ratio"] <= 0.75, "another seed: %r" % j["runs"][0]["cache_hit_ratio"])
    # Conversations: 2 slots x 2 conversations of 3 turns; turn t sends (t + 1) x 64 + t x 8 tokens.
    j, err = bench_json("--url", url, "--profiles", "64/8", "--concurrency", 2, "--warmup", 0, "--per-request",
                        "--workload", "multi-turn", "--turns", 3, "--requests", 12)
    r = j["runs"][0]
    pt = sorted(q["prompt_tokens"] for q in r["per_request"])
    check(pt == [64] * 4 + [136] * 4 + [208] * 4, "multi-turn prompt sizes %r" % pt)
    check(r["cache_hit_ratio"] > 0.3, "multi-turn hit ratio %r" % r["cache_hit_ratio"])
    check("cache hit" in err, "progress line: %r" % err)
    report = tempfile.mkdtemp(prefix="pdbench-report-")
    try:
        rc, out, err = pdbench(*shared, "--report", report, "--no-plots")
        check(rc == 0, "report run: %d %s" % (rc, err))
        with open(os.path.join(report, "report.md")) as f:
            md = f.read()
        check("cache hit |" in md and "Workload shared-prefix: 2 system prompts of 192 tokens" in md, md)
    finally:
        shutil.rmtree(report, ignore_errors=True)
    for args, msg in ((["--workload", "shared-prefix"], "needs --prefix-tokens"),
                      (["--workload", "shared-prefix", "--prefix-tokens", 300], "longer than a profile's ISL"),
                      (["--prefix-tokens", 10], "need --workload shared-prefix"),
                      (["--turns", 3], "--turns needs --workload multi-turn"),
                      (["--workload", "nope"], "--workload nope")):
        rc, out, err = pdbench("--url", url, "--profiles", "256/4", *args)
        check(rc == 2 and msg in err, "%r: rc %d, stderr %r" % (args, rc, err))
    check(sim.stop() == 0, "pdsim exit status", sim)


def scenario_spread():
    sims = [pdtest.start(["pdsim", "--role", "both", "--port", "{port}"], name="both%d" % i) for i in range(2)]
    urls = ",".join("http://127.0.0.1:%d/" % x.port for x in sims)
    j, _ = bench_json("--url", urls, "--profiles", "16/2", "--concurrency", 2, "--requests", 10, "--warmup", 0,
                      "--quiet")
    check(j["runs"][0]["requests"] == 10 and j["runs"][0]["failed"] == 0, repr(j["runs"][0])[:300])
    n = [pdtest.request_json(x.port, "GET", "/pdsim/stats")["requests"] for x in sims]
    check(n == [5, 5], "requests per target %r" % n)
    rc, out, err = pdbench("--url", urls + ",https://x", "--profiles", "16/2")
    check(rc == 2 and "every URL must be http://HOST:PORT" in err, "rc %d, stderr %r" % (rc, err))
    for x in sims:
        check(x.stop() == 0, "pdsim exit status", x)


def scenario_session():
    from test_router import metric_value, metrics, router, sim, stats
    ps = [sim("prefill", "--prefix-cache-tokens", "100000") for _ in range(3)]
    ds = [sim("decode") for _ in range(3)]
    r = router(ps, ds, config="policy: { prefill: round_robin, decode: round_robin }\naffinity: { mode: hard }")
    # 2 slots x 3 conversations of 4 turns; turn t sends (t + 1) x 64 + t x 16 tokens, and with each
    # conversation on one prefill every turn but the first finds its whole previous prompt cached (whole
    # 16-token blocks: 64 t + 16 (t - 1) of the (t + 1) x 64 + t x 16).
    args = ["--url", "http://127.0.0.1:%d" % r.port, "--profiles", "64/16", "--concurrency", 2, "--warmup", 0,
            "--quiet", "--no-health", "--workload", "multi-turn", "--turns", 4, "--requests", 24]
    bench_json(*args, "--session-header", "x-session-id")
    m = metrics(r)
    check(metric_value(m, "pdr_affinity_picks_total", role="prefill", outcome="hit") == 24 and
          metric_value(m, "pdr_affinity_picks_total", role="prefill", outcome="no_key") == 0, "keys: %s" % m, r)
    hit = sum(stats(p)["prefix_cache"]["hit_tokens"] for p in ps)
    check(hit == 6 * sum(64 * t + 16 * (t - 1) for t in range(1, 4)), "prefix hits %d" % hit, r)
    bench_json(*args)
    check(metric_value(metrics(r), "pdr_affinity_picks_total", role="prefill", outcome="no_key") == 24,
          "a key without --session-header", r)
    rc, out, err = pdbench("--url", "http://127.0.0.1:%d" % r.port, "--session-header", "x-s")
    check(rc == 2 and "--session-header needs --workload multi-turn" in err, "rc %d, stderr %r" % (rc, err))
    pdtest.stop_all()


def ttft_plot(report):
    """The TTFT plot as drawn: [(title, [(isl, osl, ttft)])] from plots.gp and ttft_vs_isl.dat."""
    import re
    with open(os.path.join(report, "plots.gp")) as f:
        gp = f.read()
    section = gp[gp.index("set output 'ttft_vs_isl.png'"):gp.index("set output 'throughput_vs_concurrency.png'")]
    series = re.findall(r"'ttft_vs_isl\.dat' index (\d+) using 1:2 with linespoints pt 7 title '([^']*)'", section)
    with open(os.path.join(report, "ttft_vs_isl.dat")) as f:
        blocks = f.read().split("\n\n\n")
    out = []
    for index, title in series:
        rows = [l.split() for l in blocks[int(index)].splitlines() if l and not l.startswith("#")]
        out.append((title, [(int(r[0]), int(r[2].split("/")[1]), float(r[1])) for r in rows]))
    return out


def scenario_plot():
    """The TTFT-against-ISL plot tells every point apart: with two profiles of one input length (the
    study's 2048/256 and 2048/2048) each line is one concurrency and one output length, titled with both,
    so no line has two points at one ISL; without a shared ISL the lines stay one per concurrency. Every
    profile x concurrency is drawn exactly once, and gnuplot accepts the script."""
    both = pdtest.start(["pdsim", "--role", "both", "--port", "{port}"], name="both")
    report = tempfile.mkdtemp(prefix="pdbench-report-")
    try:
        url = "http://127.0.0.1:%d" % both.port
        for profiles, split in (("64/4,64/8,128/4,256/8", True), ("64/4,128/8", False)):
            cells = {(int(p.split("/")[0]), int(p.split("/")[1]), c) for p in profiles.split(",") for c in (1, 2)}
            rc, out, err = pdbench("--url", url, "--profiles", profiles, "--concurrency", "1,2", "--requests", 2,
                                   "--warmup", 0, "--quiet", "--report", report, "--no-plots")
            check(rc == 0, "pdbench: %d %s%s" % (rc, out, err))
            lines = ttft_plot(report)
            seen = []
            for title, points in lines:
                conc = int(title.split(",")[0][2:])
                xs = [x for x, _, _ in points]
                check(len(xs) == len(set(xs)) and points, "line %r has two points at one ISL: %r" % (title, points))
                osls = {o for _, o, _ in points}
                if split:
                    check(len(osls) == 1 and title == "c=%d, OSL %d" % (conc, osls.pop()), "line %r: %r" % (title, points))
                else:
                    check(title == "c=%d" % conc, "line %r" % title)
                seen += [(x, o, conc) for x, o, _ in points]
            check(sorted(seen) == sorted(cells), "cells drawn %r, expected %r" % (sorted(seen), sorted(cells)))
            check(len({t for t, _ in lines}) == len(lines), "two lines share a title: %r" % lines)
            if shutil.which("gnuplot"):
                p = subprocess.run(["gnuplot", "plots.gp"], cwd=report, capture_output=True, text=True, timeout=60)
                check(p.returncode == 0 and os.path.getsize(os.path.join(report, "ttft_vs_isl.png")) > 0,
                      "gnuplot: %d %s" % (p.returncode, p.stderr))
    finally:
        shutil.rmtree(report, ignore_errors=True)


if __name__ == "__main__":
    pdtest.run_scenario(globals())
