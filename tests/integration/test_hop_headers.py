#!/usr/bin/env python3
"""Each hop-by-hop and router-set header rule on its own (docs/operations.md, X-Forwarded-*): real pdrouter
and pdsim processes, an HTTP/1.1 client on a raw socket, the fields each leg received
(GET /pdsim/last_headers). test_headers.py's forward scenario sends them together with a Connection header
that names some of them, which removes them by that rule alone; here no Connection header is sent, so each
header goes or stays by its own rule.

    python3 test_hop_headers.py SCENARIO     (PDR_BUILD=<build dir>)

Scenarios:
  own_rules  Keep-Alive, Transfer-Encoding (a chunked body) and a client's X-Forwarded-Proto, with no
             Connection header: neither leg sees Keep-Alive or Transfer-Encoding, each sees the router's
             X-Forwarded-Proto only, and an end-to-end header passes
"""
import json
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check  # noqa: E402
from test_headers import BODY, H, last_headers, one, values  # noqa: E402
from test_router import router, sim  # noqa: E402


def scenario_own_rules():
    p, d = sim("prefill"), sim("decode")
    r = router([p], [d], "--threads", "1")
    try:
        raw = json.dumps(BODY).encode()
        head = (b"POST /generate HTTP/1.1\r\nHost: front.example\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\nKeep-Alive: timeout=5\r\nX-Forwarded-Proto: https\r\n"
                b"X-End-To-End: kept\r\n\r\n")
        s = socket.create_connection((H, r.port))
        s.settimeout(10)
        s.sendall(head + b"%x\r\n" % len(raw) + raw + b"\r\n0\r\n\r\n")
        resp = b""
        while b"\r\n\r\n" not in resp:
            chunk = s.recv(65536)
            check(chunk, "closed without an answer: %r" % resp, r)
            resp += chunk
        s.close()
        check(resp.startswith(b"HTTP/1.1 200"), repr(resp[:300]), r)
        for w in (p, d):
            hs = last_headers(w)
            where = w.name
            check(one(hs, "x-end-to-end", where) == "kept", repr(hs), r)
            for gone in ("keep-alive", "transfer-encoding"):
                check(values(hs, gone) == [], "%s: %s forwarded: %r" % (where, gone, hs), r)
            check(one(hs, "x-forwarded-proto", where) == "http", "%s: the client's X-Forwarded-Proto: %r" % (where, hs),
                  r)
    finally:
        pdtest.stop_all()


if __name__ == "__main__":
    pdtest.run_scenario(globals())
