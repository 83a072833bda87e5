#!/usr/bin/env python3
"""Faults and attacks against pdrouter, measured (not asserted), so that two builds can be compared:

    PDR_BUILD=build python3 bench/faults.py [stalled|stalled_h2|fd|frozen_decode|dead_prefill|smuggle ...]

Each case prints one JSON line:
- stalled: a client with a 4 KiB receive buffer asks for a 1M-token stream and never reads
  (threads: 1, stream_idle_ms: 1000): seconds until the decode leg is cancelled (null: not within 10 s),
  router CPU (share of a core) over the 2 s after, /health answers (of 10, 1 s timeout each).
- fd: the router with 512 descriptors (soft = hard), 2 loops, and 700 idle clients: router CPU over 1 s, then
  seconds until /health answers once the clients are gone (null: not within 15 s).
- frozen_decode: 2 prefills, 2 decodes, 4 clients in a loop; one decode SIGSTOPped for 3 s: requests
  sent and failed, ejections per role.
- dead_prefill: 3 prefills, one frozen, then the other two killed: the statuses of the requests after the
  last kill.
- smuggle: Content-Length with Transfer-Encoding and a pipelined second request: the statuses the client
  got and the requests that reached the decode.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import pdtest  # noqa: E402
from test_hardening import (cpu_seconds, health_ok, stalled_setup, stalled_socket, url)  # noqa: E402
from test_router import BODIES, metric_value, metrics, router, sim, stats  # noqa: E402


def cpu_share(pid, seconds):
    c0, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)  # the measurement window
    return round((cpu_seconds(pid) - c0) / (time.monotonic() - t0), 2)


def case_stalled():
    p, d, r, alog = stalled_setup(1000)
    s = stalled_socket(r)
    t0 = time.monotonic()
    try:
        pdtest.poll_until(lambda: stats(d)["cancelled"] >= 1, 10, "cancel")
        cut = round(time.monotonic() - t0, 2)
    except AssertionError:
        cut = None
    cpu = cpu_share(r.proc.pid, 2.0)
    ok = sum(health_ok(r) for _ in range(10))
    s.close()
    return {"case": "stalled", "cut_after_s": cut, "router_cpu": cpu, "health_ok_of_10": ok}


def case_fd():
    p, d = sim("prefill"), sim("decode")
    argv = ["/usr/bin/prlimit", "--nofile=512:512", pdtest.binary("pdrouter"), "--pd-disaggregation", "--host",
            "127.0.0.1", "--port", "{port}", "--prefill", url(p), str(p.ports["bport"]), "--decode", url(d),
            "--admin-port", "{admin}", "--access-log", "off", "--drain-grace-ms", "0", "--threads", "2"]
    r = pdtest.start(argv, name="pdrouter", health_path="/readiness", healthy=200)
    clients = []
    for _ in range(700):
        c = socket.socket()
        c.setblocking(False)
        c.connect_ex(("127.0.0.1", r.port))
        clients.append(c)
    time.sleep(1.0)  # let the router take what it can
    cpu = cpu_share(r.proc.pid, 1.0)
    for c in clients:
        c.close()
    t0 = time.monotonic()
    try:
        pdtest.poll_until(lambda: health_ok(r), 15, "health")
        back = round(time.monotonic() - t0, 2)
    except AssertionError:
        back = None
    return {"case": "fd", "router_cpu_while_full": cpu, "health_back_after_s": back}


def case_frozen_decode():
    ps, ds = [sim("prefill"), sim("prefill")], [sim("decode"), sim("decode")]
    r = router(ps, ds, config="policy: { prefill: round_robin, decode: round_robin }\n"
               "health: { interval_ms: 500, timeout_ms: 300, rise: 1, fall: 2 }\n"
               "timeouts: { first_byte_ms: 1500, kv_transfer_ms: 600 }\nretries: { max: 3 }")
    statuses, stop = [], threading.Event()

    def load():
        while not stop.is_set():
            try:
                statuses.append(pdtest.request(r.port, "POST", "/generate", BODIES["/generate"], timeout=15)[0])
            except OSError as e:
                statuses.append(repr(e))
    ts = [threading.Thread(target=load) for _ in range(4)]
    for t in ts:
        t.start()
    time.sleep(1.0)
    os.kill(ds[0].proc.pid, signal.SIGSTOP)
    time.sleep(3.0)
    os.kill(ds[0].proc.pid, signal.SIGCONT)
    time.sleep(2.0)
    stop.set()
    for t in ts:
        t.join(20)
    m = metrics(r)
    ej = {role: sum(metric_value(m, "pdr_worker_ejections_total", role=role, url=url(w)) or 0 for w in ws)
          for role, ws in (("prefill", ps), ("decode", ds))}
    return {"case": "frozen_decode", "requests": len(statuses), "failed": sum(1 for s in statuses if s != 200),
            "failures": sorted(set(map(str, (s for s in statuses if s != 200)))), "ejections": ej}


def case_dead_prefill():
    ps, d = [sim("prefill"), sim("prefill"), sim("prefill")], sim("decode")
    r = router(ps, [d], config="policy: { prefill: round_robin, decode: round_robin }\n"
               "health: { interval_ms: 300, timeout_ms: 200, rise: 1, fall: 2 }\n"
               "timeouts: { first_byte_ms: 3000, kv_transfer_ms: 3000 }\nretries: { max: 2 }")
    os.kill(ps[0].proc.pid, signal.SIGSTOP)
    time.sleep(1.5)
    for k in (1, 2):
        ps[k].proc.kill()
        ps[k].proc.wait()
        for _ in range(3):
            pdtest.request(r.port, "POST", "/generate", BODIES["/generate"])
    out = [pdtest.request(r.port, "POST", "/generate", BODIES["/generate"])[0] for _ in range(5)]
    os.kill(ps[0].proc.pid, signal.SIGCONT)
    return {"case": "dead_prefill", "statuses_after_last_kill": out}


def case_smuggle():
    p, d = sim("prefill"), sim("decode")
    r = router([p], [d])
    body = json.dumps(BODIES["/generate"]).encode()
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    data = (b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" % len(chunked) + chunked +
            b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
    s = socket.create_connection(("127.0.0.1", r.port))
    s.settimeout(3)
    s.sendall(data)
    got = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            got += b
    except socket.timeout:
        pass
    import re
    return {"case": "smuggle", "statuses": [int(x) for x in re.findall(rb"HTTP/1\.1 (\d{3}) ", got)],
            "decode_requests": stats(d)["requests"]}


CASES = {"stalled": case_stalled, "fd": case_fd, "frozen_decode": case_frozen_decode,
         "dead_prefill": case_dead_prefill, "smuggle": case_smuggle}


def main():
    names = sys.argv[1:] or list(CASES)
    for n in names:
        try:
            print(json.dumps(CASES[n]()), flush=True)
        finally:
            pdtest.stop_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
