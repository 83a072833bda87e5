#!/usr/bin/env python3
"""Priority and fair admission, measured: the router's queue wait per priority class under a flood, and
the slots two backlogged tenants get at 10:1 offered load (docs/operations.md, "Priority and fairness").

    PDR_BUILD=build python3 bench/priority_flood.py [--seconds 15]

Two pdsim prefills and two decodes (1 ms per output token) behind one router admitting 4 PD requests at
once (limits.max_inflight 4; the rest wait in its queue of 2000). Every client is a pdbench process
(streamed /generate, 32 prompt and 16 output tokens, closed loop) running --seconds; two run at once.

Priority: a low-priority tenant floods at concurrency 64 (X-Gateway-Inference-Objective: sheddable)
while a high-priority one sends at concurrency 2 (critical). Rows: no admission.classes (one FIFO, the
header ignored) and admission.classes critical,sheddable.

Fairness: tenants a and b in one class at concurrency 40 and 4 (10:1 offered load, both always have
requests waiting, X-Tenant names the tenant). Rows: no fairness_header (FIFO) and fairness_header
x-tenant.

Queue wait is the router's own per request: the access log's queue_ms (time in the admission queue),
each client marked by its X-Request-Id. Percentiles and served counts cover the requests that completed
between 1 s after the start and the end of --seconds, while both clients were sending. Exits non-zero
when a pdbench run reports a failed request, an access-log line is not 200, or the log and pdbench
disagree on how many requests a client completed. Prints two markdown tables.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import pdtest  # noqa: E402
from test_router import metric_value, metrics, router, sim  # noqa: E402

LIMITS = "limits: { max_inflight: 4, queue: 2000, queue_timeout_ms: 120000 }\n"


def pctl(xs, q):
    """The nearest-rank q-quantile of xs (0 < q <= 1)."""
    xs = sorted(xs)
    return xs[max(0, min(len(xs) - 1, int(-(-q * len(xs) // 1)) - 1))]


def run(admission, clients, seconds):
    """Runs the clients [(request id, concurrency, [headers])] at once behind a router with the given
    admission YAML; returns ({request id: [queue_ms of each request in the window]}, metrics text)."""
    fd, log = tempfile.mkstemp(prefix="pdr-flood-", suffix=".log")
    os.close(fd)
    outs = []
    try:
        flags = ["--decode-us-per-token", "1000"]
        ps = [sim("prefill", *flags) for _ in range(2)]
        ds = [sim("decode", *flags) for _ in range(2)]
        r = router(ps, ds, config=LIMITS + "log: { access_log: %s }\n" % log + admission)
        procs = []
        t0 = time.time()
        for rid, conc, headers in clients:
            fd, out = tempfile.mkstemp(prefix="pdr-flood-", suffix=".json")
            os.close(fd)
            outs.append(out)
            argv = [pdtest.binary("pdbench"), "--url", "http://127.0.0.1:%d" % r.port, "--profiles", "32/16",
                    "--concurrency", str(conc), "--duration", str(seconds), "--warmup", "0", "--quiet",
                    "--no-health", "--json", out, "--header", "X-Request-Id: %s" % rid]
            for h in headers:
                argv += ["--header", h]
            procs.append((rid, subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)))
        done = {}
        for (rid, p), out in zip(procs, outs):
            _, err = p.communicate(timeout=seconds + 300)
            if p.returncode != 0:
                sys.exit("pdbench (%s) exit %d: %s" % (rid, p.returncode, err.strip()))
            with open(out) as f:
                runs = json.load(f)["runs"]
            if sum(x["failed"] for x in runs):
                sys.exit("pdbench (%s) reported failed requests" % rid)
            done[rid] = sum(x["ok"] for x in runs)
        m = metrics(r)
        st = r.stop()  # flushes the access log
        if st != 0:
            sys.exit("pdrouter exit status %d" % st)
        waits = {rid: [] for rid, _, _ in clients}
        seen = {rid: 0 for rid, _, _ in clients}
        lo, hi = (t0 + 1) * 1e6, (t0 + seconds) * 1e6
        with open(log) as f:
            for line in f:
                if not line.startswith("{"):
                    continue
                x = json.loads(line)
                if x.get("path") != "/generate":
                    continue
                if x["status"] != 200:
                    sys.exit("access log: a request answered %d: %s" % (x["status"], line.strip()))
                seen[x["request_id"]] += 1
                if lo <= x["ts_us"] <= hi:
                    waits[x["request_id"]].append(x["queue_ms"])
        if seen != done:
            sys.exit("access log counts %r, pdbench completed %r" % (seen, done))
        if any(not w for w in waits.values()):
            sys.exit("a client completed nothing in the window: %r" % {k: len(v) for k, v in waits.items()})
        return waits, m
    finally:
        pdtest.stop_all()
        for p in [log] + outs:
            if os.path.exists(p):
                os.unlink(p)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=15.0, help="seconds each pair of clients sends")
    ap.add_argument("--flood", type=int, default=64, help="the low-priority tenant's concurrency")
    args = ap.parse_args()
    cls = "X-Gateway-Inference-Objective: %s"

    print("| admission | class | concurrency | served in window | queue wait p50 (ms) | queue wait p99 (ms) |")
    print("|---|---|---:|---:|---:|---:|")
    for label, admission in (("one FIFO (no classes)", ""),
                             ("classes critical,sheddable", "admission: { classes: \"critical,sheddable\" }\n")):
        waits, m = run(admission, [("hi", 2, [cls % "critical"]), ("lo", args.flood, [cls % "sheddable"])],
                       args.seconds)
        admitted = metric_value(m, "pdr_admission_class_total", **{"class": "critical", "result": "admitted"})
        if admission and not admitted:
            sys.exit("no request admitted in class critical: the classes were not applied")
        for rid, name, conc in (("hi", "critical", 2), ("lo", "sheddable", args.flood)):
            w = waits[rid]
            print("| %s | %s | %d | %d | %.1f | %.1f |" % (label, name, conc, len(w), pctl(w, 0.5), pctl(w, 0.99)),
                  flush=True)

    print()
    print("| admission | tenant | concurrency | served in window | share | queue wait p50 (ms) |")
    print("|---|---|---:|---:|---:|---:|")
    for label, admission in (("one FIFO (no fairness)", ""),
                             ("fairness_header x-tenant", "admission: { fairness_header: x-tenant }\n")):
        waits, _ = run(admission, [("a", 40, ["X-Tenant: a"]), ("b", 4, ["X-Tenant: b"])], args.seconds)
        total = sum(len(w) for w in waits.values())
        for rid, conc in (("a", 40), ("b", 4)):
            w = waits[rid]
            print("| %s | %s | %d | %d | %.2f | %.1f |" % (label, rid, conc, len(w), len(w) / total, pctl(w, 0.5)),
                  flush=True)


if __name__ == "__main__":
    main()
