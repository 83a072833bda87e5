#!/usr/bin/env python3
"""The shims' room events acting on the request in flight (docs/internals/shim-events.md, "Events,
deadlines, links and phases"): real pdrouter and pdsim processes on loopback.

    python3 test_kv_shim.py SCENARIO     (PDR_BUILD=<build dir>)

Scenarios:
  done_phase      pdsim's shims report each room done (bytes, µs, backend): the access log's "kv" carries
                  the shim's bytes and backend, and pdr_kv_transfer_seconds{backend="tcp"} counts it
  failed_retry    a decode stalls its KV pull; a signed "failed" event for the request's room (read from
                  the decode's stats) makes the router cancel the attempt and retry on the other pair at
                  once, long before the KV deadline; the cause is counted as shim_failed, not deadline
  restart_links   a link marked suspect by a KV deadline is forgotten when its decode reports a new
                  shim instance (it restarted)
"""
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check, request  # noqa: E402
from test_router import metric_value, metrics, stats  # noqa: E402
from test_router import sim  # noqa: E402
from test_shim_events import Sender, events_router, stack, wait_load  # noqa: E402
from test_kv_deadline import access_lines, new_alog, url, wait_lines  # noqa: E402


def scenario_done_phase():
    alog = new_alog()
    r, p, ds, _ = stack(decode_args=("--decode-us-per-token", "20000"), alog=alog)
    try:
        wait_load(r, ds[0])
        st, _, out = request(r.port, "POST", "/generate", {"input_ids": list(range(64)),
                                                            "sampling_params": {"max_new_tokens": 5}})
        check(st == 200, "status %d %s" % (st, out[:200]), r)
        rec = [x for x in wait_lines(alog, 1) if x.get("path") == "/generate"][-1]
        kv = rec.get("kv")
        check(kv is not None and kv.get("bytes") == 64 * 16 and kv.get("backend") == "tcp",
              "access log kv field: %s" % rec, r)

        def counted():
            v = metric_value(metrics(r), "pdr_kv_transfer_seconds_count", backend="tcp")
            return v if v and v >= 1 else None
        pdtest.poll_until(counted, 10, "pdr_kv_transfer_seconds_count{backend=\"tcp\"}")
        check(r.stop() == 0, "pdrouter exit status (leaks fail it under ASan)", r)
    finally:
        pdtest.stop_all()
        os.unlink(alog)


def scenario_failed_retry():
    alog = new_alog()
    p = sim("prefill")
    d1, d2 = sim("decode"), sim("decode")
    pdtest.request_json(d1.port, "POST", "/pdsim/fault", {"stall_kv_from_port": p.ports["bport"]})
    r = events_router([p], [d1, d2], extra="log: { access_log: %s }\ntimeouts: { kv_transfer_ms: 20000, "
                      "first_byte_ms: 30000 }\nretries: { max: 2 }\npolicy: { decode: round_robin }" % alog)
    try:
        res = {}

        def one():
            st, _, out = request(r.port, "POST", "/generate", {"input_ids": [1, 2, 3],
                                                                "sampling_params": {"max_new_tokens": 2}}, timeout=40)
            res["st"], res["out"] = st, out
        th = None
        for _ in range(4):  # round robin: until a request is held by the stalled decode
            th = threading.Thread(target=one)
            th.start()
            pdtest.poll_until(lambda: stats(d1)["inflight"] > 0 or not th.is_alive(), 10, "a request")
            if th.is_alive():
                break
            th.join()
        check(th.is_alive(), "no request reached the stalled decode", r)
        room = stats(d1)["last"][-1]["room"]
        check(isinstance(room, int), "room %r" % room, r)
        t0 = time.monotonic()
        s = Sender(url(d1))
        st, out = s.post(r, s.body({"type": "room", "room": room, "event": "failed", "role": "decode",
                                    "backend": "tcp", "code": 5, "reason": "fetch failed"}))
        check(st == 200, "batch: %d %s" % (st, out), r)
        th.join(20)
        took = time.monotonic() - t0
        check(not th.is_alive() and res.get("st") == 200, "result %s" % res, r)
        check(took < 5.0, "retried after %.2f s (the deadline is 20 s)" % took, r)
        m = metrics(r)
        check(metric_value(m, "pdr_kv_transfer_failures_total", cause="shim_failed", backend="tcp") == 1,
              "shim_failed count", r)
        check(not metric_value(m, "pdr_kv_transfer_failures_total", cause="deadline", backend="unknown"),
              "a deadline was counted", r)
        check(metric_value(m, "pdr_link_suspect", prefill=url(p), decode=url(d1)) == 1, "link suspect", r)
        lines = pdtest.poll_until(lambda: [x for x in access_lines(alog) if x["attempts"] == 2], 10, "retried line")
        check(lines[-1]["status"] == 200 and lines[-1]["decode"] == url(d2), "line %s" % lines[-1], r)
        check(r.stop() == 0, "pdrouter exit status (leaks fail it under ASan)", r)
    finally:
        pdtest.stop_all()
        os.unlink(alog)


def scenario_restart_links():
    alog = new_alog()
    p = sim("prefill")
    d1 = sim("decode")
    pdtest.request_json(d1.port, "POST", "/pdsim/fault", {"stall_kv_from_port": p.ports["bport"]})
    r = events_router([p], [d1], extra="log: { access_log: %s }\ntimeouts: { kv_transfer_ms: 300, "
                      "first_byte_ms: 20000 }\nretries: { max: 0 }" % alog)
    try:
        Sender(url(d1)).load(r, queue_depth=0)  # the first instance
        st, _, out = request(r.port, "POST", "/generate", {"input_ids": [1, 2, 3],
                                                            "sampling_params": {"max_new_tokens": 2}}, timeout=20)
        check(st == 504, "status %d %s" % (st, out[:200]), r)
        check(metric_value(metrics(r), "pdr_link_suspect", prefill=url(p), decode=url(d1)) == 1, "suspect", r)
        Sender(url(d1)).load(r, queue_depth=0)  # a new instance: the decode restarted
        m = metrics(r)
        check(metric_value(m, "pdr_worker_restarts_total", worker=url(d1), role="decode") == 1, "restart", r)
        check(metric_value(m, "pdr_link_suspect", prefill=url(p), decode=url(d1)) is None,
              "the restarted decode's link is still there", r)
        st, _, b = request(r.ports["admin"], "GET", "/admin/v1/links")
        check(st == 200 and json.loads(b).get("links") == [], "links %s" % b, r)
    finally:
        pdtest.stop_all()
        os.unlink(alog)


if __name__ == "__main__":
    pdtest.run_scenario(globals())
