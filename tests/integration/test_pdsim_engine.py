#!/usr/bin/env python3
"""pdsim behaves as the engines it stands for, checked through pdrouter on loopback (real HTTP, real KV
bytes through libpdshim):

- default_bootstrap_port: a router given "--prefill URL" without a bootstrap port sends
  "bootstrap_port": null; the decode pulls from its own --bootstrap-port (sglang's scheduler puts its
  --disaggregation-bootstrap-port, 8998 by default, into such a request).

Usage: test_pdsim_engine.py SCENARIO   (one of the functions named scenario_*; ctest runs each separately)
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check, request, request_json, sse_events  # noqa: E402
from test_router import BODIES, curl, sim, stats, texts  # noqa: E402

H = "127.0.0.1"


def router(prefill_args, decodes, *extra):
    argv = ["pdrouter", "--pd-disaggregation", "--host", H, "--port", "{port}", "--access-log", "off",
            "--admin-port", "{admin}", "--drain-grace-ms", "0"]
    for a in prefill_args:
        argv += ["--prefill"] + list(a)
    for d in decodes:
        argv += ["--decode", "http://%s:%d" % (H, d.port)]
    return pdtest.start(argv + list(extra), name="pdrouter", health_path="/readiness", healthy=200)


def scenario_default_bootstrap_port():
    """--prefill URL with no port: the decode gets bootstrap_port null and pulls from its own
    --bootstrap-port, the prefill's; every route, streamed and not, gives --role both's text. A decode
    without the flag takes 8998, sglang's default, and counts the pull under it."""
    p = sim("prefill")
    bport = p.ports["bport"]
    d = sim("decode", "--bootstrap-port", str(bport))
    both = sim("both")
    r = router([["http://%s:%d" % (H, p.port)]], [d])
    try:
        for route, body in BODIES.items():
            for stream in (False, True):
                b = dict(body, stream=stream)
                st, out = curl(r.port, route, b)
                check(st == 200, "%s stream=%s: %d %s" % (route, stream, st, out[:300]), r, p, d)
                st2, ref = curl(both.port, route, b)
                assert st2 == 200, ref
                check(texts(route, b, out, stream) == texts(route, b, ref, stream),
                      "%s stream=%s: %r != %r" % (route, stream, out[:300], ref[:300]))
                last = stats(d)["last"][-1]
                check("bootstrap_port" in last["body"] and last["body"]["bootstrap_port"] is None,
                      "the router did not send bootstrap_port null: %r" % last["body"])
        sd = stats(d)
        check(sd["by_bootstrap_port"] == {str(bport): 6} and sd["errors"] == 0, repr(sd))
        check(stats(p)["kv_bytes_sent"] == sd["kv_bytes_received"] > 0, repr((stats(p), sd)))

        # A decode started without --bootstrap-port pulls such a request from port 8998.
        d2 = sim("decode", "--kv-timeout-ms", "2000")
        body = dict(BODIES["/generate"], bootstrap_host=H, bootstrap_port=None, bootstrap_room=7)
        st, _, out = request(d2.port, "POST", "/generate", body)
        check(st != 400, "bootstrap_port null refused: %d %r" % (st, out), d2)
        check(stats(d2)["by_bootstrap_port"] == {"8998": 1}, repr(stats(d2)), d2)
        # Absent is the same as null; anything else that is not a port is still refused.
        body.pop("bootstrap_port")
        st, _, out = request(d2.port, "POST", "/generate", body)
        check(st != 400 and stats(d2)["by_bootstrap_port"] == {"8998": 2}, "%d %r" % (st, out), d2)
        for bad in ("8998", 0, 70000):
            st, _, out = request(d2.port, "POST", "/generate", dict(body, bootstrap_port=bad))
            check(st == 400 and b"bootstrap_port" in out, "bootstrap_port %r: %d %r" % (bad, st, out), d2)
    finally:
        pdtest.stop_all()


if __name__ == "__main__":
    pdtest.run_scenario(globals())
