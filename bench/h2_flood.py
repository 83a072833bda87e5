#!/usr/bin/env python3
"""HTTP/2 floods against pdrouter with two pdsim workers per role, and what they cost the router's
ordinary clients.

    PDR_BUILD=build python3 bench/h2_flood.py [--attack reset|settings|ping|continuation] [--seconds 20]
        [--connections 4] [--config YAML]

Starts 2 prefill and 2 decode pdsim workers and pdrouter (health checks every 500 ms, an access log),
runs the flood (tests/integration/h2flood.py: for reset, HEADERS + DATA + RST_STREAM per stream; for
settings and ping, those frames; for continuation, one HEADERS without END_HEADERS and then empty
CONTINUATION frames; in bursts of 100, on N connections that reconnect when closed) and, beside it,
one ordinary /generate request every 100 ms. Prints one JSON object: streams sent and their rate, connections the router closed, requests
that reached the prefills beyond the ordinary ones, the ordinary requests' latency (p50, p99, max) and
failures, workers ejected, router RSS and CPU, access-log bytes. Exits 1 when an ordinary request
failed or a worker was ejected.
"""

import argparse
import json
import os
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import h2flood  # noqa: E402
import pdtest  # noqa: E402
from test_router import BODIES, metric_value, metrics, router, sim, stats  # noqa: E402


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def peak_rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--attack", choices=("reset", "settings", "ping", "continuation"), default="reset")
    ap.add_argument("--config", default="", help="more YAML for the router (e.g. 'limits: { h2_max_control_frames: 0 }')")
    a = ap.parse_args()
    ps = [sim("prefill"), sim("prefill")]
    ds = [sim("decode"), sim("decode")]
    fd, alog = tempfile.mkstemp(prefix="pdbench-alog-")
    os.close(fd)
    r = router(ps, ds, config="log: { access_log: %s }\nhealth: { interval_ms: 500, timeout_ms: 300 }\n%s" %
               (alog, a.config))
    try:
        rss0, cpu0 = rss_kib(r.proc.pid), cpu_s(r.proc.pid)
        res = {}
        th = threading.Thread(target=lambda: res.update(h2flood.flood(r.port, a.connections, a.seconds, 100,
                                                                           attack=a.attack)))
        th.start()
        lat, failed = [], []
        while th.is_alive():
            t0 = time.monotonic()
            try:
                st = pdtest.request(r.port, "POST", "/generate", BODIES["/generate"], timeout=30)[0]
            except OSError as e:
                st = repr(e)
            lat.append(time.monotonic() - t0)
            if st != 200:
                failed.append(st)
            time.sleep(0.1)  # the probe's pacing
        th.join()
        rss1, cpu1 = rss_kib(r.proc.pid), cpu_s(r.proc.pid)
        m = metrics(r)
        ejected = sum(metric_value(m, "pdr_worker_ejections_total", role=role, url="http://127.0.0.1:%d" % w.port)
                      or 0 for role, ws in (("prefill", ps), ("decode", ds)) for w in ws)
        reached = sum(stats(p)["requests"] for p in ps) - len(lat)
        lat.sort()
        out = dict(res)
        out.update({
            "attack": a.attack,
            "router_control_floods": metric_value(m, "pdr_h2_control_floods_total"),
            "flood_requests_reaching_prefills": reached,
            "ordinary_requests": len(lat), "ordinary_failed": len(failed), "ordinary_failures": failed[:10],
            "ordinary_p50_ms": round(lat[len(lat) // 2] * 1e3, 1),
            "ordinary_p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3, 1),
            "ordinary_max_ms": round(lat[-1] * 1e3, 1),
            "router_counted_resets": metric_value(m, "pdr_h2_client_resets_total"),
            "workers_ejected": ejected,
            "router_rss_kib": [rss0, rss1], "router_peak_rss_kib": peak_rss_kib(r.proc.pid), "router_cpu_s": round(cpu1 - cpu0, 1),
            "access_log_bytes": os.path.getsize(alog),
        })
        print(json.dumps(out))
        return 1 if failed or ejected else 0
    finally:
        pdtest.stop_all()
        os.unlink(alog)


if __name__ == "__main__":
    sys.exit(main())
