#!/usr/bin/env python3
"""Priority classes, tenant fairness and deadlines of the admission queue (admission.*): a queued request of
a more important class goes before every less important one, tenants of a class take turns whatever each
offers, the last class is shed past a queue depth, and a request whose wait cannot end before its own
deadline is refused at once. Real pdrouter and pdsim processes on loopback; one slot (max_inflight 1) and a
slow decode make the order of admissions the decode's order of arrivals.

Usage: test_fairq.py SCENARIO   (one of the functions named scenario_*; ctest runs each separately)
"""

import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check, request  # noqa: E402
from test_router import metric_value, metrics, router, sim, stats  # noqa: E402

SLOW_US = "100000"  # decode µs per token: a request of N tokens holds the slot N × 0.1 s
CLASSES = "admission: { classes: 'critical,standard,sheddable', default_class: standard%s }"


def body(text, tokens):
    return {"text": text, "sampling_params": {"max_new_tokens": tokens}}


def send_async(r, results, key, b, headers=None):
    """POST /generate on its own thread; results[key] = (status, headers, body, seconds) when it ends."""
    def run():
        t0 = time.monotonic()
        try:
            st, h, data = request(r.port, "POST", "/generate", b, headers=headers, timeout=60)
        except OSError as e:
            st, h, data = 0, {}, str(e).encode()
        results[key] = (st, h, data, time.monotonic() - t0)
    t = threading.Thread(target=run)
    t.start()
    return t


def depth(r):
    return metric_value(metrics(r), "pdr_queue_depth")


def queue_one(r, res, key, b, headers, n):
    """Sends one request and returns once the queue holds n (its arrival order is then known)."""
    t = send_async(r, res, key, b, headers)
    pdtest.poll_until(lambda: depth(r) == n, 10, "queue depth %d" % n)
    return t


def hold_slot(r, d, res, tokens):
    """One request that holds the only slot for tokens × 0.1 s."""
    t = send_async(r, res, "hold", body("hold", tokens))
    pdtest.poll_until(lambda: stats(d)["inflight"] == 1, 10, "the first request to run")
    return t


def decode_order(d):
    return [l["body"]["text"] for l in stats(d)["last"] if "body" in l]


def scenario_priority():
    """Eight sheddable requests queued, then two critical ones: the critical ones are admitted next, and
    their queue wait (the router's histogram by class) stays under 5 s, what the slot holder needs (3 s)
    plus a margin, where arrival order would add the sheddable backlog (8 × 0.5 s)."""
    p, d = sim("prefill"), sim("decode", "--decode-us-per-token", SLOW_US)
    r = router([p], [d], config="threads: 1\nlimits: { max_inflight: 1, queue: 20 }\n" + CLASSES % "")
    res = {}
    ts = [hold_slot(r, d, res, 30)]
    shed = {"x-gateway-inference-objective": "sheddable"}
    for i in range(8):
        ts.append(queue_one(r, res, "s%d" % i, body("s%d" % i, 5), shed, i + 1))
    crit = {"X-Gateway-Inference-Objective": "critical"}
    for i in range(2):
        ts.append(queue_one(r, res, "c%d" % i, body("c%d" % i, 1), crit, 9 + i))
    m = metrics(r)
    check(metric_value(m, "pdr_queue_class_depth", **{"class": "sheddable"}) == 8, "sheddable depth", r)
    check(metric_value(m, "pdr_queue_class_depth", **{"class": "critical"}) == 2, "critical depth", r)
    for t in ts:
        t.join(60)
    check(all(v[0] == 200 for v in res.values()), "statuses %r" % {k: v[0] for k, v in res.items()}, r)
    order = decode_order(d)
    want = ["hold", "c0", "c1"] + ["s%d" % i for i in range(8)]
    check(order[-11:] == want, "decode order %r" % order, r, d)
    m = metrics(r)
    crit_l = {"class": "critical"}
    fast = metric_value(m, "pdr_queue_class_wait_seconds_bucket", le="5", **crit_l)
    check(fast == 2 and metric_value(m, "pdr_queue_class_wait_seconds_count", **crit_l) == 2,
          "critical waits over 5 s: %r" % fast, r)
    slow = metric_value(m, "pdr_queue_class_wait_seconds_bucket", le="5", **{"class": "sheddable"})
    check(slow is not None and slow < 8, "every sheddable request waited under 5 s: %r" % slow, r)
    adm = metric_value(m, "pdr_admission_class_total", result="admitted", **crit_l)
    check(adm == 2, "pdr_admission_class_total{critical,admitted} %r" % adm, r)


def scenario_body_priority():
    """No class header: the body's "priority" (vLLM's and sglang's field, lower is more important) picks the
    class; a header that names a class wins over it; admission.priority_field false ignores it."""
    p, d = sim("prefill"), sim("decode", "--decode-us-per-token", SLOW_US)
    r = router([p], [d], config="threads: 1\nlimits: { max_inflight: 1, queue: 20 }\n" + CLASSES % "")
    res = {}
    ts = [hold_slot(r, d, res, 10)]
    for i in range(3):
        b = body("s%d" % i, 1)
        b["priority"] = 7  # past the last class: the last class
        ts.append(queue_one(r, res, "s%d" % i, b, None, i + 1))
    named = body("h", 1)
    named["priority"] = 0
    ts.append(queue_one(r, res, "h", named, {"x-gateway-inference-objective": "sheddable"}, 4))
    b = body("c", 1)
    b["priority"] = 0
    ts.append(queue_one(r, res, "c", b, None, 5))
    m = metrics(r)
    check(metric_value(m, "pdr_queue_class_depth", **{"class": "sheddable"}) == 4 and
          metric_value(m, "pdr_queue_class_depth", **{"class": "critical"}) == 1, "class depths", r)
    for t in ts:
        t.join(60)
    check(all(v[0] == 200 for v in res.values()), "statuses %r" % {k: v[0] for k, v in res.items()}, r)
    order = decode_order(d)
    check(order[-6:] == ["hold", "c", "s0", "s1", "s2", "h"], "decode order %r" % order, r, d)
    # Off: the field is ignored (the default class).
    r2 = router([p], [d], config="threads: 1\nlimits: { max_inflight: 1, queue: 20 }\n" +
                CLASSES % ", priority_field: false")
    res2 = {}
    t = hold_slot(r2, d, res2, 10)
    b = body("c2", 1)
    b["priority"] = 0
    t2 = queue_one(r2, res2, "c2", b, None, 1)
    check(metric_value(metrics(r2), "pdr_queue_class_depth", **{"class": "standard"}) == 1, "ignored", r2)
    t.join(60)
    t2.join(60)


def scenario_fair_shares():
    """Tenant a queues ten times as many requests as tenant b, all before b's: while both are backlogged
    they are admitted in turns (3 and 3 of the first 6), where arrival order would admit a's ten first."""
    p, d = sim("prefill"), sim("decode", "--decode-us-per-token", SLOW_US)
    r = router([p], [d], config="threads: 1\nlimits: { max_inflight: 1, queue: 50 }\n"
               "admission: { fairness_header: x-tenant-id }")
    res = {}
    ts = [hold_slot(r, d, res, 50)]
    n = 0
    for i in range(30):
        n += 1
        ts.append(queue_one(r, res, "a%d" % i, body("a%d" % i, 1), {"x-tenant-id": "a"}, n))
    for i in range(3):
        n += 1
        ts.append(queue_one(r, res, "b%d" % i, body("b%d" % i, 1), {"x-tenant-id": "b"}, n))
    for t in ts:
        t.join(60)
    check(all(v[0] == 200 for v in res.values()), "statuses %r" % {k: v[0] for k, v in res.items()}, r)
    order = decode_order(d)
    first = order[order.index("hold") + 1:][:6]
    nb = sum(1 for x in first if x.startswith("b"))
    check(nb == 3, "the first 6 admissions after the holder: %r" % first, r, d)
    m = metrics(r)
    check(metric_value(m, "pdr_admission_tenant_overflow_total") == 0, "tenant overflow", r)


def scenario_shed():
    """admission.shed_queue_depth 2: with two requests queued a sheddable one is answered 429 at once, a
    critical one still waits and is served."""
    p, d = sim("prefill"), sim("decode", "--decode-us-per-token", SLOW_US)
    r = router([p], [d], config="threads: 1\nlimits: { max_inflight: 1, queue: 20 }\n" +
               CLASSES % ", shed_queue_depth: 2")
    res = {}
    ts = [hold_slot(r, d, res, 20)]
    for i in range(2):
        ts.append(queue_one(r, res, "q%d" % i, body("q%d" % i, 1), None, i + 1))
    t0 = time.monotonic()
    st, h, data = request(r.port, "POST", "/generate", body("shed", 1),
                          headers={"x-gateway-inference-objective": "sheddable"})
    took = time.monotonic() - t0
    check(st == 429 and h.get("retry-after") == "1", "sheddable: %d %r" % (st, data[:200]), r)
    check(took < 1.0, "the 429 took %.2fs" % took, r)
    ts.append(queue_one(r, res, "crit", body("crit", 1), {"x-gateway-inference-objective": "critical"}, 3))
    for t in ts:
        t.join(60)
    check(all(v[0] == 200 for v in res.values()), "statuses %r" % {k: v[0] for k, v in res.items()}, r)
    m = metrics(r)
    check(metric_value(m, "pdr_admission_rejected_total", reason="shed") == 1, "rejected{shed}", r)
    check(metric_value(m, "pdr_admission_class_total", result="shed", **{"class": "sheddable"}) == 1,
          "class_total{sheddable,shed}", r)
    check("shed" not in decode_order(d), "the shed request reached the decode", r, d)


def scenario_deadline():
    """admission.refuse_late: after 4 requests of 0.5 s set the mean slot time, a request with 3 queued
    ahead (an estimated wait of 4 x 0.5 s) and a 1 s deadline of its own (x-request-timeout-ms) is refused
    at once with 503 and a Retry-After of the estimate, well before its deadline; one with a deadline it
    can meet waits and is served."""
    p, d = sim("prefill"), sim("decode", "--decode-us-per-token", SLOW_US)
    r = router([p], [d], config="threads: 1\nlimits: { max_inflight: 1, queue: 20 }\n"
               "admission: { refuse_late: true, timeout_header: x-request-timeout-ms }")
    for i in range(4):
        st = request(r.port, "POST", "/generate", body("warm %d" % i, 5))[0]
        check(st == 200, "warm-up %d: %d" % (i, st), r)
    res = {}
    ts = [hold_slot(r, d, res, 10)]
    for i in range(3):
        ts.append(queue_one(r, res, "q%d" % i, body("q%d" % i, 3), None, i + 1))
    t0 = time.monotonic()
    st, h, data = request(r.port, "POST", "/generate", body("late", 1), headers={"x-request-timeout-ms": "1000"})
    took = time.monotonic() - t0
    check(st == 503, "status %d %r" % (st, data[:200]), r)
    check(took < 0.5, "the 503 took %.3fs, its deadline was 1 s" % took, r)
    retry = int(h.get("retry-after", "0"))
    check(retry >= 2, "Retry-After %r, the estimate is about 2 s" % h.get("retry-after"), r)
    check(b"admission.refuse_late" in data, "message %r" % data[:200], r)
    ts.append(queue_one(r, res, "ok", body("ok", 1), {"x-request-timeout-ms": "30000"}, 4))
    for t in ts:
        t.join(60)
    check(all(v[0] == 200 for v in res.values()), "statuses %r" % {k: v[0] for k, v in res.items()}, r)
    check(metric_value(metrics(r), "pdr_admission_rejected_total", reason="deadline") == 1, "rejected{deadline}", r)
    check("late" not in decode_order(d), "the refused request reached the decode", r, d)


def scenario_own_timeout():
    """admission.timeout_header shortens the queue timeout: a request with x-request-timeout-ms 300 that
    finds no slot gets 503 after about 300 ms, not limits.queue_timeout_ms."""
    p, d = sim("prefill"), sim("decode", "--decode-us-per-token", SLOW_US)
    r = router([p], [d], config="threads: 1\nlimits: { max_inflight: 1, queue: 5, queue_timeout_ms: 60000 }\n"
               "admission: { timeout_header: x-request-timeout-ms }")
    res = {}
    t = hold_slot(r, d, res, 40)
    t0 = time.monotonic()
    st, h, data = request(r.port, "POST", "/generate", body("short", 1), headers={"x-request-timeout-ms": "300"})
    took = time.monotonic() - t0
    check(st == 503 and 0.25 <= took < 3.0, "status %d after %.2fs %r" % (st, took, data[:200]), r)
    check(metric_value(metrics(r), "pdr_admission_rejected_total", reason="queue_timeout") == 1,
          "rejected{queue_timeout}", r)
    t.join(60)
    check(res["hold"][0] == 200, "the holder: %r" % (res["hold"][:2],), r)


if __name__ == "__main__":
    pdtest.run_scenario(globals())
