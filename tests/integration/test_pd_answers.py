#!/usr/bin/env python3
"""Two answers of the PD path whose worker statuses are not the client's to see: real pdrouter and pdsim
processes on loopback.

    python3 test_pd_answers.py SCENARIO     (PDR_BUILD=<build dir>)

Scenarios:
  ticket_refused  protocol pdshim, workers that verify tickets under another key: the worker's 403 is a
                  deployment fault, answered 502 in the OpenAI error shape naming the worker and "refused
                  the router's ticket", counted in pdr_tickets_refused_total
  prefill_dies    the decode answers a server error first (its KV fetch failed), then the prefill leg is
                  reset (the prefill died): the answer is the prefill's 503 naming the prefill, not a 502
                  blaming the decode
"""
import json
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check, request  # noqa: E402
from test_router import metric_value, router, sim, stats  # noqa: E402
import test_tickets  # noqa: E402

PROMPT = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}}


def scenario_ticket_refused():
    ka, kb = test_tickets.keyfile(test_tickets.KEY_A), test_tickets.keyfile(test_tickets.KEY_B)
    p, d = test_tickets.sim("prefill", kb), test_tickets.sim("decode", kb)
    r = test_tickets.router([p], [d], "ticket: { key_file: %s }" % ka)
    try:
        st, _, out = request(r.port, "POST", "/generate", PROMPT)
        check(st == 502, "status %d %r" % (st, out[:300]), r)
        err = json.loads(out)["error"]
        check(set(err) == {"message", "type", "code"} and err["code"] == 502 and err["type"] == "upstream_error",
              repr(err), r)
        check("refused the router's ticket" in err["message"] and
              any("127.0.0.1:%d" % w.port in err["message"] for w in (p, d)), repr(err), r)
        st, _, m = request(r.port, "GET", "/metrics")
        if st != 200:
            st, _, m = request(r.ports["admin"], "GET", "/metrics")
        m = m.decode() if isinstance(m, bytes) else m
        check((metric_value(m, "pdr_tickets_refused_total") or 0) >= 1, "pdr_tickets_refused_total", r)
        check(r.stop() == 0, "pdrouter exit status (leaks fail it under ASan)", r)
    finally:
        pdtest.stop_all()
        os.unlink(ka)
        os.unlink(kb)


def scenario_prefill_dies():
    p, d = sim("prefill"), sim("decode")
    pdtest.request_json(p.port, "POST", "/pdsim/fault", {"hang_before_headers": 1})
    pdtest.request_json(d.port, "POST", "/pdsim/fault", {"fail_status": 500})
    r = router([p], [d], config="retries: { max: 0 }")
    try:
        res = {}

        def one():
            res["st"], _, res["out"] = request(r.port, "POST", "/generate", PROMPT, timeout=20)
        th = threading.Thread(target=one)
        th.start()
        # The decode's 500 is out; the prefill is killed right after (its leg is reset).
        t0 = time.monotonic()
        while stats(d)["requests"] < 1 and time.monotonic() - t0 < 10:
            time.sleep(0.001)
        p.stop(signal.SIGKILL)
        th.join(20)
        check(not th.is_alive(), "no answer", r)
        check(res["st"] == 503, "status %s %r" % (res["st"], res["out"][:300]), r)
        err = json.loads(res["out"])["error"]
        check(set(err) == {"message", "type", "code"} and err["code"] == 503 and
              "prefill" in err["message"] and "127.0.0.1:%d" % p.port in err["message"], repr(err), r)
        check(r.stop() == 0, "pdrouter exit status (leaks fail it under ASan)", r)
    finally:
        pdtest.stop_all()


if __name__ == "__main__":
    pdtest.run_scenario(globals())
