#!/usr/bin/env python3
"""Passive health (router/workers/outlier.c): real pdrouter and pdsim processes, faults set through pdsim's
POST /pdsim/fault, what reached each worker read from its /pdsim/stats.

Scenarios (argv[1]):
  eject_and_return  a prefill answering 500 is ejected after outlier.consecutive_failures, the traffic goes
                    to the others (every request answered 200 through a retry), the worker comes back by
                    itself when base_ejection_ms has passed (health checks once a minute here), and its
                    second ejection lasts twice as long; admin state, ms left, metrics and log lines.
  max_percent       every prefill answers 500: only max_ejection_percent of them are ejected, the others
                    keep receiving requests.
  panic             three of four prefills are ejected (they answered 500): with 1 of 4 serving (below
                    panic_threshold_percent) every prefill receives requests again, counted as panic
                    picks; with panic off only the one left does.
  slow_start        a prefill back from an ejection gets a small share of round_robin's picks at first
                    (its weight ramps over slow_start_ms), an even share once the ramp is over.
  reload_off        a prefill ejected for 60 s is back in service as soon as a reload turns outlier
                    detection off (outlier.enabled: false), not when its ejection would have ended.
  cli_flags         the sglang router's --cb-* flags drive it: --cb-failure-threshold 2
                    --cb-timeout-duration-secs 1 ejects after two failures for a second;
                    --disable-circuit-breaker turns it off.
"""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check, request, request_json  # noqa: E402
from test_router import metric_value, metrics, router, sim, stats  # noqa: E402

BODY = {"text": "the quick brown fox", "sampling_params": {"max_new_tokens": 2}}


def url(p):
    return "http://127.0.0.1:%d" % p.port


def workers(r):
    return {w["url"]: w for w in request_json(r.ports["admin"], "GET", "/admin/v1/workers")["workers"]}


def log_of(r):
    with open(r.log_path) as f:
        return f.read()


def fault(p, **knobs):
    request_json(p.port, "POST", "/pdsim/fault", knobs)


def generate(r, n):
    """n sequential requests; returns their statuses."""
    return [request(r.port, "POST", "/generate", BODY)[0] for _ in range(n)]


def scenario_eject_and_return():
    ps = [sim("prefill") for _ in range(3)]
    d = sim("decode")
    r = router(ps, [d], config="policy: { prefill: round_robin, decode: round_robin }\n"
               "health: { interval_ms: 60000 }\n"
               "outlier: { consecutive_failures: 3, base_ejection_ms: 1500, max_ejection_ms: 10000, "
               "max_ejection_percent: 50 }")
    bad = ps[0]
    fault(bad, fail_status=500)
    # Until it is ejected, one request in three meets it (round robin) and is retried on another prefill.
    statuses = []
    pdtest.poll_until(lambda: statuses.extend(generate(r, 1)) or workers(r)[url(bad)]["state"] == "ejected", 10,
                      "the failing prefill to be ejected")
    t_eject = time.monotonic()
    w = workers(r)[url(bad)]
    check(0 < w.get("ejected_ms_left", 0) <= 1500 and w["outlier_ejections_total"] == 1, "first ejection %r" % w, r)
    check(stats(bad)["requests"] == 3, "ejected after %d failures, not 3" % stats(bad)["requests"], r)
    check(all(s == 200 for s in statuses), "a request failed before the ejection: %r" % statuses, r)
    # Ejected: the traffic goes to the other two.
    before = [stats(p)["requests"] for p in ps]
    sts = generate(r, 12)
    after = [stats(p)["requests"] for p in ps]
    if time.monotonic() - t_eject < 1.4:  # (still inside the ejection: on a slow machine it may be over)
        check(after[0] == before[0], "the ejected prefill got %d requests" % (after[0] - before[0]), r)
        check(after[1] - before[1] == 6 and after[2] - before[2] == 6, "not shared: %r -> %r" % (before, after), r)
    check(all(s == 200 for s in sts), "statuses while ejected: %r" % sts, r)
    m = metrics(r)
    if time.monotonic() - t_eject < 1.4:
        check(metric_value(m, "pdr_worker_ejected", role="prefill", url=url(bad)) == 1, "gauge", r)
        check(metric_value(m, "pdr_worker_state", role="prefill", url=url(bad), state="ejected") == 1, "state", r)
    check(metric_value(m, "pdr_worker_ejections_by_reason_total", role="prefill", url=url(bad),
                       reason="consecutive_failures") == 1, "by reason", r)
    check(metric_value(m, "pdr_worker_healthy", role="prefill", url=url(bad)) == 1,
          "the health checks' verdict is their own", r)
    # It comes back by itself (no health check runs before a minute).
    pdtest.poll_until(lambda: workers(r)[url(bad)]["state"] == "healthy", 10, "the return")
    back = time.monotonic() - t_eject
    check(back >= 1.3, "back after %.2fs, before base_ejection_ms" % back, r)
    pdtest.poll_until(lambda: "returns from outlier ejection" in log_of(r), 5, "the return's log line")
    check("ejected for 1500 ms after 3 consecutive failures" in log_of(r), "no ejection log line", r)
    # Still failing: the second ejection lasts twice as long.
    n0 = stats(bad)["requests"]
    pdtest.poll_until(lambda: generate(r, 1) and workers(r)[url(bad)]["state"] == "ejected", 10, "second ejection")
    w = workers(r)[url(bad)]
    check(stats(bad)["requests"] - n0 == 3, "second ejection after %d failures" % (stats(bad)["requests"] - n0), r)
    check(1500 < w.get("ejected_ms_left", 0) <= 3000 and w["outlier_ejections_total"] == 2, "second %r" % w, r)
    check("ejected for 3000 ms" in log_of(r), "no second ejection log line", r)
    m = metrics(r)
    check(metric_value(m, "pdr_worker_ejections_total", role="prefill", url=url(bad)) == 2, "total", r)
    ev = request_json(r.ports["admin"], "GET", "/admin/v1/events")["events"]
    check(any("ejected for 3000 ms" in e["message"] for e in ev) and
          any("returned from outlier ejection" in e["message"] for e in ev), "events %r" % ev, r)


def scenario_max_percent():
    ps = [sim("prefill") for _ in range(4)]
    d = sim("decode")
    r = router(ps, [d], config="policy: { prefill: round_robin, decode: round_robin }\n"
               "health: { interval_ms: 60000 }\n"
               "outlier: { consecutive_failures: 2, base_ejection_ms: 60000, max_ejection_percent: 50, "
               "panic_threshold_percent: 0 }")
    for p in ps:
        fault(p, fail_status=500)
    sts = generate(r, 12)
    check(all(s == 502 for s in sts), "statuses with every prefill failing: %r" % sts, r)
    ws = workers(r)
    ejected = [u for u, w in ws.items() if w["state"] == "ejected"]
    check(len(ejected) == 2, "ejected: %r" % {u: w["state"] for u, w in ws.items()}, r)
    check(all(ws[url(p)]["state"] == "healthy" for p in ps if url(p) not in ejected), "the others %r" % ws, r)
    # Those left in keep getting requests; the ejected ones get none.
    before = {url(p): stats(p)["requests"] for p in ps}
    generate(r, 6)
    after = {url(p): stats(p)["requests"] for p in ps}
    for u in before:
        got = after[u] - before[u]
        check(got == 0 if u in ejected else got > 0, "%s (%s) got %d" % (u, ws[u]["state"], got), r)
    m = metrics(r)
    check(sum(metric_value(m, "pdr_worker_ejected", role="prefill", url=url(p)) for p in ps) == 2, "gauge", r)
    ev = request_json(r.ports["admin"], "GET", "/admin/v1/events")["events"]
    check(any("max_ejection_percent" in e["message"] for e in ev), "no capped event in %r" % ev, r)


def scenario_panic():
    ps = [sim("prefill") for _ in range(4)]
    d = sim("decode")
    for panic in (50, 0):
        r = router(ps, [d], config="policy: { prefill: round_robin, decode: round_robin }\n"
                   "health: { interval_ms: 60000 }\n"
                   "outlier: { consecutive_failures: 1, base_ejection_ms: 60000, max_ejection_percent: 100, "
                   "panic_threshold_percent: %d }" % panic)
        for p in ps[1:]:
            fault(p, fail_status=500)
        pdtest.poll_until(lambda: generate(r, 1) and
                          sum(w["state"] == "ejected" for w in workers(r).values()) >= 2, 10, "two ejections")
        # Two of four ejected: 50% serving, no panic yet. The third ejection leaves 1 of 4 (25%).
        for p in ps[1:]:
            if workers(r)[url(p)]["state"] != "ejected":
                for _ in range(4):  # round robin: it is met within a turn
                    generate(r, 1)
        ws = workers(r)
        check(all(ws[url(p)]["state"] == "ejected" for p in ps[1:]), "not all three ejected: %r" % ws, r)
        for p in ps[1:]:
            fault(p, reset=True)
        before = [stats(p)["requests"] for p in ps]
        picks0 = metric_value(metrics(r), "pdr_outlier_panic_total", role="prefill")
        sts = generate(r, 40)
        got = [stats(p)["requests"] - b for p, b in zip(ps, before)]
        check(all(s == 200 for s in sts), "statuses %r" % sts, r)
        m = metrics(r)
        picks = metric_value(m, "pdr_outlier_panic_total", role="prefill") - picks0
        if panic:  # 1 of 4 serving: every healthy prefill is picked, ejected or not
            check(got == [10, 10, 10, 10], "panic: not every prefill used evenly: %r" % got, r)
            check(picks >= 40, "panic picks %r" % picks, r)
            check(metric_value(m, "pdr_outlier_panic_total", role="decode") == 0, "decode panic", r)
            check(all(workers(r)[url(p)]["state"] == "ejected" for p in ps[1:]), "still ejected", r)
        else:
            check(got == [40, 0, 0, 0], "no panic: %r" % got, r)
            check(picks == 0, "panic picks %r with panic off" % picks, r)
        r.stop()


def share(r, ps, n):
    """Sends n requests; returns the share of them the first prefill got."""
    before = [stats(p)["requests"] for p in ps]
    sts = generate(r, n)
    check(all(s == 200 for s in sts), "statuses %r" % sts, r)
    got = [stats(p)["requests"] - b for p, b in zip(ps, before)]
    return got[0] / float(sum(got))


def scenario_slow_start():
    ps = [sim("prefill") for _ in range(2)]
    d = sim("decode")
    r = router(ps, [d], config="policy: { prefill: round_robin, decode: round_robin }\n"
               "health: { interval_ms: 60000 }\n"
               "outlier: { consecutive_failures: 2, base_ejection_ms: 500, max_ejection_percent: 50, "
               "slow_start_ms: 8000 }")
    fault(ps[0], fail_status=500)
    pdtest.poll_until(lambda: generate(r, 1) and workers(r)[url(ps[0])]["state"] == "ejected", 10, "the ejection")
    fault(ps[0], reset=True)
    pdtest.poll_until(lambda: workers(r)[url(ps[0])]["state"] == "healthy", 10, "the return")
    w = workers(r)[url(ps[0])]
    check(0 < w.get("slow_start_weight", 1) < 0.5, "weight right after the return %r" % w, r)
    early = share(r, ps, 100)
    pdtest.poll_until(lambda: "slow_start_weight" not in workers(r)[url(ps[0])], 15, "the end of the ramp")
    late = share(r, ps, 100)
    check(early < 0.3, "share during the ramp %.2f" % early, r)
    check(0.4 <= late <= 0.6, "share after the ramp %.2f" % late, r)
    print("slow start: share %.2f during the first part of the ramp, %.2f after it" % (early, late))


def scenario_reload_off():
    ps = [sim("prefill") for _ in range(2)]
    d = sim("decode")
    conf = ("policy: { prefill: round_robin, decode: round_robin }\n"
            "health: { interval_ms: 60000 }\n"
            "outlier: { enabled: %s, consecutive_failures: 2, base_ejection_ms: 60000, max_ejection_percent: 50 }")
    r = router(ps, [d], config=conf % "true")
    fault(ps[0], fail_status=500)
    pdtest.poll_until(lambda: generate(r, 1) and workers(r)[url(ps[0])]["state"] == "ejected", 10,
                      "the failing prefill to be ejected")
    fault(ps[0], fail_status=0)
    with open(r.config_path) as f:
        text = f.read()
    with open(r.config_path, "w") as f:
        f.write(text.replace("enabled: true", "enabled: false"))
    n0 = stats(ps[0])["requests"]
    r.proc.send_signal(signal.SIGHUP)
    pdtest.poll_until(lambda: metric_value(metrics(r), "pdr_config_reloads_total", result="ok") == 1, 5,
                      "the SIGHUP reload")
    w = workers(r)[url(ps[0])]
    check(w["state"] == "healthy" and "ejected_ms_left" not in w and "slow_start_weight" not in w,
          "still ejected after outlier detection was turned off: %r" % w, r)
    sts = generate(r, 6)
    check(all(s == 200 for s in sts), "statuses %r" % sts, r)
    check(stats(ps[0])["requests"] - n0 == 3, "round robin gave the prefill %d of 6" % (stats(ps[0])["requests"] - n0),
          r)


def scenario_cli_flags():
    ps = [sim("prefill") for _ in range(2)]
    d = sim("decode")
    fault(ps[0], fail_status=500)
    for flags, ejects in ((["--cb-failure-threshold", "2", "--cb-timeout-duration-secs", "1",
                            "--cb-window-duration-secs", "60"], True),
                          (["--cb-failure-threshold", "2", "--disable-circuit-breaker"], False)):
        r = router(ps, [d], "--prefill-policy", "round_robin", "--health-check-interval-secs", "60", *flags)
        sts = generate(r, 8)
        check(all(s == 200 for s in sts), "%r: statuses %r" % (flags, sts), r)
        w = workers(r)[url(ps[0])]
        if ejects:
            check(w["state"] == "ejected" and 0 < w.get("ejected_ms_left", 0) <= 1000 and
                  w["outlier_ejections_total"] == 1, "%r: %r" % (flags, w), r)
            pdtest.poll_until(lambda: workers(r)[url(ps[0])]["state"] == "healthy", 10, "the return")
        else:  # off: request failures count against health.fall (3) as without outlier detection
            check(w["outlier_ejections_total"] == 0 and "ejected_ms_left" not in w, "%r: %r" % (flags, w), r)
        r.stop()


if __name__ == "__main__":
    pdtest.run_scenario(globals())
