#!/usr/bin/env python3
"""The pair-aware breaker (docs/operations.md, "The pair-aware breaker"): real pdrouter and pdsim
processes on loopback, two prefills and two decodes. Decode D1 fails at once every KV fetch from
prefill P1 (pdsim's fail_kv_from_port): only the link P1 -> D1 is broken.

    python3 test_breaker.py SCENARIO     (PDR_BUILD=<build dir>)

Scenarios:
  one_link   the link opens after breaker.consecutive_failures failures; while it is open no request
             uses it (D1's injected failures stay put) while P1 and D1 serve their other pairings (pdsim's
             per-bootstrap-port counts); after open_ms it is half-open and exactly one of several
             concurrent requests probes it (its failure re-opens it for twice the period); with the
             fault removed the next probe closes it. No client request fails (retries on other pairs);
             metrics and /admin/v1/links show the states
  all_open   one prefill, one decode, their link broken: once it is open every request still uses it
             (the breaker never refuses alone), counted in pdr_breaker_all_open_total
  disabled   breaker.enabled false: the same broken link keeps being used (its failures pass the
             threshold), every request still answered 200 by a retry
"""

import json
import os
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check  # noqa: E402
from test_router import metric_value, metrics, router, sim, stats  # noqa: E402

# Long enough for the open-state checks (below 60 sequential requests, a few seconds under ASan on a loaded
# machine) to end inside the first open period.
OPEN_MS = 6000


def body(text="The capital of France is"):
    return {"text": text, "stream": False, "sampling_params": {"max_new_tokens": 2, "ignore_eos": True}}


def conf(breaker):
    fd, alog = tempfile.mkstemp(prefix="pdrouter-access-", suffix=".log")
    os.close(fd)
    return ("log: { access_log: %s }\n"
            "policy: { prefill: random, decode: random }\n"
            "retries: { max: 3, initial_backoff_ms: 0 }\n"
            "health: { interval_ms: 200, timeout_ms: 500, rise: 1, fall: 5 }\n"
            "breaker: %s\n" % (alog, breaker))


def url(p):
    return "http://127.0.0.1:%d" % p.port


def link(r, p, d):
    st, _, b = pdtest.request(r.ports["admin"], "GET", "/admin/v1/links")
    check(st == 200, "links: %d %r" % (st, b), r)

    for l in json.loads(b)["links"]:
        if l["prefill"] == url(p) and l["decode"] == url(d):
            return l
    return None


def ask(r, i):
    st, _, b = pdtest.request(r.port, "POST", "/generate", body=body("request %d" % i), timeout=15)
    check(st == 200, "request %d: %d %r" % (i, st, b), r)


def port_count(d, p):
    return stats(d)["by_bootstrap_port"].get(str(p.ports["bport"]), 0)


def setup(breaker):
    p1, p2 = sim("prefill"), sim("prefill")
    d1, d2 = sim("decode"), sim("decode")
    pdtest.request_json(d1.port, "POST", "/pdsim/fault", {"fail_kv_from_port": p1.ports["bport"]})
    r = router([p1, p2], [d1, d2], config=conf(breaker))
    return p1, p2, d1, d2, r


def scenario_one_link():
    p1, p2, d1, d2, r = setup("{ consecutive_failures: 3, open_ms: %d, max_open_ms: %d }" % (OPEN_MS, 2 * OPEN_MS))
    n = 0
    # Random picks: P1 -> D1 comes up about once in four; each failure is retried on another pair.
    while (link(r, p1, d1) or {}).get("state") != "open":
        ask(r, n)
        n += 1
        check(n < 400, "the link never opened", r)
    check(stats(d1)["kv_link_failures"] == 3, "failures before opening: %r" % stats(d1)["kv_link_failures"], r, d1)
    l = link(r, p1, d1)
    check(l["consecutive_failures"] == 3 and l["open_period_ms"] == OPEN_MS and 0 < l["open_ms_left"] <= OPEN_MS,
          "open link %r" % l, r)
    m = metrics(r)
    check(metric_value(m, "pdr_link_state", prefill=url(p1), decode=url(d1)) == 1, "pdr_link_state open", r)
    check(metric_value(m, "pdr_breaker_transitions_total", to="open") == 1, "transitions to open", r)

    # Open: no request uses P1 -> D1; P1 and D1 go on serving with their other partners.
    d1_from_p2, d2_from_p1 = port_count(d1, p2), port_count(d2, p1)
    avoided0 = metric_value(metrics(r), "pdr_breaker_avoided_total")
    # Random picks: go on until both have served another partner and a pick has avoided the link. Each of
    # the three comes up with probability 1/4 per request (P2 -> D1, P1 -> D2, P1 -> D1), so 60 requests
    # miss one of them with probability at most 3 * (3/4)^60 = 1e-7.
    for i in range(60):
        if (port_count(d1, p2) > d1_from_p2 and port_count(d2, p1) > d2_from_p1 and
                metric_value(metrics(r), "pdr_breaker_avoided_total") > avoided0):
            break
        ask(r, n)
        n += 1
    l = link(r, p1, d1)
    check(l["state"] == "open", "the open period passed during the check (a loaded machine?) %r" % l, r)
    check(stats(d1)["kv_link_failures"] == 3, "an open link was used", r, d1)
    check(port_count(d1, p2) > d1_from_p2, "D1 served no other prefill", r, d1)
    check(port_count(d2, p1) > d2_from_p1, "P1 served no other decode", r, d2)
    m = metrics(r)
    check(metric_value(m, "pdr_breaker_avoided_total") > avoided0, "no pick avoided the link", r)
    for w, role in ((p1, "prefill"), (d1, "decode")):
        check(metric_value(m, "pdr_worker_healthy", role=role, url=url(w)) == 1, "%s ejected" % url(w), r)

    # Half-open after open_ms: of several concurrent requests, exactly one probes the link.
    pdtest.poll_until(lambda: link(r, p1, d1)["state"] == "half_open", OPEN_MS / 1000 + 5, "half-open")
    errs = []

    def one(i):
        try:
            ask(r, i)
        except AssertionError as e:
            errs.append(e)

    while stats(d1)["kv_link_failures"] == 3:
        ts = [threading.Thread(target=one, args=(n + i,)) for i in range(8)]
        n += 8
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        check(not errs, "a request failed: %s" % (errs[:1],), r)
        check(n < 800, "no probe went", r)
    check(stats(d1)["kv_link_failures"] == 4, "more than one probe: %d" % stats(d1)["kv_link_failures"], r, d1)
    l = link(r, p1, d1)
    check(l["state"] == "open" and l["open_period_ms"] == 2 * OPEN_MS, "re-opened link %r" % l, r)

    # The fault goes: the next probe completes its transfer and closes the link.
    pdtest.request_json(d1.port, "POST", "/pdsim/fault", {"fail_kv_from_port": 0})
    pdtest.poll_until(lambda: link(r, p1, d1)["state"] == "half_open", 2 * OPEN_MS / 1000 + 5, "half-open again")
    while link(r, p1, d1)["state"] != "closed":
        ask(r, n)
        n += 1
        check(n < 1200, "the link never closed", r)
    l = link(r, p1, d1)
    check(l["consecutive_failures"] == 0 and l["successes_total"] >= 1 and l["open_period_ms"] == 0,
          "closed link %r" % l, r)
    m = metrics(r)
    check(metric_value(m, "pdr_link_state", prefill=url(p1), decode=url(d1)) == 0, "pdr_link_state closed", r)
    check(metric_value(m, "pdr_breaker_transitions_total", to="open") == 2 and
          metric_value(m, "pdr_breaker_transitions_total", to="half_open") == 2 and
          metric_value(m, "pdr_breaker_transitions_total", to="closed") == 1, "transitions", r)
    check(stats(d1)["kv_link_failures"] == 4, "failures after the fault went", r, d1)
    check(r.stop() == 0, "pdrouter exit status", r)


def scenario_all_open():
    p1, d1 = sim("prefill"), sim("decode")
    pdtest.request_json(d1.port, "POST", "/pdsim/fault", {"fail_kv_from_port": p1.ports["bport"]})
    r = router([p1], [d1], config=conf("{ consecutive_failures: 2, open_ms: 60000 }").replace(
        "retries: { max: 3, initial_backoff_ms: 0 }", "retries: { max: 0 }"))
    for i in range(5):
        st, _, b = pdtest.request(r.port, "POST", "/generate", body=body("request %d" % i), timeout=15)
        err = json.loads(b).get("error", {})
        check(st == 502 and err.get("type") == "upstream_error", "request %d: %d %r" % (i, st, b), r)
    # The only pairing is open: it is still used (never a refusal for the breaker alone), and counted.
    check(link(r, p1, d1)["state"] == "open", "link %r" % link(r, p1, d1), r)
    check(stats(d1)["kv_link_failures"] == 5, "requests kept from the only link", r, d1)
    check(metric_value(metrics(r), "pdr_breaker_all_open_total") == 3, "all-open picks", r)
    check(r.stop() == 0, "pdrouter exit status", r)


def scenario_disabled():
    # Outlier ejection off too: it would take D1 out after its own consecutive failures (the per-worker
    # answer to what is a fault of one link).
    p1, p2, d1, d2, r = setup("{ enabled: false, consecutive_failures: 3 }\noutlier: { enabled: false }")
    n = 0
    while stats(d1)["kv_link_failures"] < 6:
        ask(r, n)
        n += 1
        check(n < 400, "the broken link was not used", r)
    l = link(r, p1, d1)
    check(l["state"] == "closed" and l["consecutive_failures"] >= 6, "link %r" % l, r)
    check(metric_value(metrics(r), "pdr_breaker_avoided_total") == 0, "avoided with the breaker off", r)
    check(r.stop() == 0, "pdrouter exit status", r)


if __name__ == "__main__":
    pdtest.run_scenario(globals())
