#!/usr/bin/env python3
"""Session affinity (affinity.mode; router/workers/affinity.h) at the router, with pdsim workers.

Scenarios (argv[1]):
  sessions      three prefills and three decodes, soft mode: the 30 turns of a conversation (x-session-id)
                go to one pair, while 60 sessions of one turn each spread over every prefill and decode;
                requests that name no session are counted as no_key.
  unhealthy     a session's prefill fails its health checks: the session moves to another prefill (its
                decode stays) and comes back to its prefill once that is healthy again.
  soft_overload a session's decode holds two requests that never end while the others are idle: soft mode
                sends the session's next requests to other decodes (fallback_overloaded).
  hard_overload the same with hard mode: every request of the session goes to its decode, held or not.
  replicas      two routers with the same workers listed in opposite orders choose the same pair for each
                of 30 sessions: the choice is stateless and keyed by the workers' URLs.
  header_order  affinity.headers names the headers in order of preference: x-dynamo-session-id is read when
                x-session-id is absent, the body's session_params.id when no header is, and a configured
                custom header replaces the defaults.
"""
import json
import os
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check, request  # noqa: E402
from test_router import metric_value, metrics, metrics_when, router, sim, stats  # noqa: E402

FAST_HEALTH = "health: { interval_ms: 50, timeout_ms: 500, rise: 1, fall: 1 }"


def fleet(n=3, *extra_decode):
    return ([sim("prefill") for _ in range(n)], [sim("decode", *extra_decode) for _ in range(n)])


def start(ps, ds, mode, extra="", headers=None, ratio=None):
    fd, alog = tempfile.mkstemp(prefix="pdtest-affinity-", suffix=".log")
    os.close(fd)
    aff = "mode: %s" % mode + (", headers: %s" % headers if headers is not None else "")
    aff += ", max_load_ratio: %s" % ratio if ratio is not None else ""
    r = router(ps, ds, config="policy: { prefill: round_robin, decode: round_robin }\n"
               "affinity: { %s }\nlog: { access_log: %s }\n%s" % (aff, alog, extra))
    r.alog = alog
    return r


def send(r, rid, session=None, header="x-session-id", timeout=10.0):
    """header None: the session in the body's session_params.id (sglang's sessions)."""
    headers = {"x-request-id": rid}
    if session is not None and header is not None:
        headers[header] = session
    body = {"text": "turn of %s: %s" % (session, rid), "sampling_params": {"max_new_tokens": 2}}
    if session is not None and header is None:
        body["session_params"] = {"id": session}
    st = request(r.port, "POST", "/generate", body, headers=headers, timeout=timeout)[0]
    check(st == 200, "request %s: status %d" % (rid, st), r)


def line_of(r, rid):
    """The access log line of request rid."""
    def line():
        with open(r.alog) as f:
            for x in f:
                if x.startswith("{") and '"request_id":"%s"' % rid in x:
                    return json.loads(x)
        return None
    return pdtest.poll_until(line, 10, "the access log line of %s" % rid)


def pair(r, rid):
    """The (prefill, decode) the access log names for request rid."""
    e = line_of(r, rid)
    return e["prefill"], e["decode"]


def url(w):
    return "http://127.0.0.1:%d" % w.port


def picks(r, role, outcome):
    return metric_value(metrics(r), "pdr_affinity_picks_total", role=role, outcome=outcome) or 0


def scenario_sessions():
    try:
        ps, ds = fleet()
        # Soft mode with a bound no sequence of turns can pass: a turn's prefill leg may still be counted
        # in flight when the next turn arrives (pdsim's decode can end first), and on a loaded machine
        # two such legs on the home worker are over the default 1.5 (soft_overload tests the shedding).
        r = start(ps, ds, "soft", ratio=100)
        for t in range(30):  # header names match in any case
            send(r, "conv-t%d" % t, "conversation-0", header="X-Session-Id" if t % 2 else "x-session-id")
        turns = {pair(r, "conv-t%d" % t) for t in range(30)}
        check(len(turns) == 1, "a conversation's turns went to %r" % turns, r)
        # 60 sessions over 3 workers: each worker gets a share (one worker missing among 60 keys has
        # probability 3 x (2/3)^60 = 8e-11; the keys are fixed, so the result is too).
        for s in range(60):
            send(r, "one-%d" % s, "session-%d" % s)
        pairs = [pair(r, "one-%d" % s) for s in range(60)]
        check({p for p, _ in pairs} == {url(p) for p in ps} and {d for _, d in pairs} == {url(d) for d in ds},
              "sessions did not spread: %r" % pairs, r)
        metrics_when(r, lambda m: metric_value(m, "pdr_affinity_picks_total", role="prefill", outcome="hit") == 90
                     and metric_value(m, "pdr_affinity_picks_total", role="decode", outcome="hit") == 90,
                     "90 hits of each role")
        check(line_of(r, "one-7")["affinity"] == {"prefill": "hit", "decode": "hit"}, "access log", r)
        send(r, "anonymous")
        check(line_of(r, "anonymous")["affinity"] == {"prefill": "no_key", "decode": "no_key"}, "access log", r)
        check(picks(r, "decode", "no_key") == 1 and picks(r, "prefill", "no_key") == 1, "no_key not counted", r)
    finally:
        pdtest.stop_all()


def healthy_in_router(r, w, role, want):
    pdtest.poll_until(lambda: metric_value(metrics(r), "pdr_worker_healthy", role=role, url=url(w)) == want,
                      10, "%s %s healthy=%d" % (role, url(w), want))


def scenario_unhealthy():
    try:
        ps, ds = fleet()
        r = start(ps, ds, "soft", FAST_HEALTH)
        send(r, "u-0", "sticky")
        home_p, home_d = pair(r, "u-0")
        bad = next(p for p in ps if url(p) == home_p)
        pdtest.request_json(bad.port, "POST", "/pdsim/fault", {"fail_health": 1})
        healthy_in_router(r, bad, "prefill", 0)
        for t in range(1, 6):
            send(r, "u-%d" % t, "sticky")
        moved = {pair(r, "u-%d" % t) for t in range(1, 6)}
        check(len(moved) == 1 and next(iter(moved))[0] != home_p and next(iter(moved))[1] == home_d,
              "with its prefill unhealthy the session went to %r (home %s, %s)" % (moved, home_p, home_d), r)
        check(picks(r, "prefill", "moved") == 5, "moved picks not counted", r)
        check(line_of(r, "u-3")["affinity"] == {"prefill": "moved", "decode": "hit"}, "access log", r)
        pdtest.request_json(bad.port, "POST", "/pdsim/fault", {"reset": True})
        healthy_in_router(r, bad, "prefill", 1)
        send(r, "u-back", "sticky")
        check(pair(r, "u-back") == (home_p, home_d), "the session did not come back: %r" % (pair(r, "u-back"),),
              r)
    finally:
        pdtest.stop_all()


def hold(r, rid, session):
    def go():
        try:
            send(r, rid, session, timeout=300)
        except (OSError, AssertionError):
            pass  # the held request ends when the test stops the processes
    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


def inflight(r, role, w):
    return metric_value(metrics(r), "pdr_worker_inflight_requests", role=role, url=url(w))


def overload(mode):
    """Starts the fleet, finds the session's decode, makes it hang and holds two requests of the session
    there. Returns the router, the decodes and the held decode."""
    ps = [sim("prefill", "--kv-timeout-ms", "600000") for _ in range(3)]
    ds = [sim("decode") for _ in range(3)]
    r = start(ps, ds, mode, "timeouts: { first_byte_ms: 600000, kv_transfer_ms: 600000 }")
    send(r, "o-0", "busy")
    home = next(d for d in ds if url(d) == pair(r, "o-0")[1])
    pdtest.request_json(home.port, "POST", "/pdsim/fault", {"hang_before_headers": 1})
    for k in range(2):
        hold(r, "held-%d" % k, "busy")
        pdtest.poll_until(lambda: inflight(r, "decode", home) == k + 1, 10, "held request %d" % k)
    return r, ds, home


def scenario_soft_overload():
    try:
        r, ds, home = overload("soft")
        # Two in flight, the others idle: 2 + 1 > 1.5 x (2/3 + 1). The policy picks elsewhere.
        for t in range(5):
            send(r, "s-%d" % t, "busy")
        got = [pair(r, "s-%d" % t)[1] for t in range(5)]
        check(url(home) not in got, "soft mode sent the session to its overloaded decode: %r" % got, r)
        check(picks(r, "decode", "fallback_overloaded") == 5, "fallbacks not counted", r)
        check(line_of(r, "s-2")["affinity"]["decode"] == "fallback_overloaded", "access log", r)
    finally:
        pdtest.stop_all()


def scenario_hard_overload():
    try:
        r, ds, home = overload("hard")
        for t in range(3):
            hold(r, "h-%d" % t, "busy")
        pdtest.poll_until(lambda: inflight(r, "decode", home) == 5, 10, "five requests on the session's decode")
        others = [inflight(r, "decode", d) for d in ds if d is not home]
        check(others == [0, 0], "hard mode sent the session elsewhere: %r" % others, r)
        check(picks(r, "decode", "fallback_overloaded") == 0, "hard mode fell back", r)
    finally:
        pdtest.stop_all()


def scenario_replicas():
    try:
        ps, ds = fleet()
        r1 = start(ps, ds, "soft")
        r2 = start(list(reversed(ps)), list(reversed(ds)), "soft")
        for s in range(30):
            send(r1, "r1-%d" % s, "replica-%d" % s)
            send(r2, "r2-%d" % s, "replica-%d" % s)
        a = [pair(r1, "r1-%d" % s) for s in range(30)]
        b = [pair(r2, "r2-%d" % s) for s in range(30)]
        check(a == b, "the replicas chose differently: %r / %r" % (a, b), r1, r2)
        check(len(set(a)) > 1, "every session on one pair: %r" % a, r1)
    finally:
        pdtest.stop_all()


def scenario_header_order():
    try:
        ps, ds = fleet()
        r = start(ps, ds, "hard")
        send(r, "x-0", "dyn-session", header="x-session-id")
        for t in range(1, 8):
            send(r, "x-%d" % t, "dyn-session", header="x-dynamo-session-id")
        check(len({pair(r, "x-%d" % t) for t in range(8)}) == 1, "x-dynamo-session-id not read alike", r)
        check(picks(r, "decode", "hit") == 8, "hits not counted", r)
        # Without a header, the body's session_params.id is the key: the same key, the same pair.
        send(r, "x-body", "dyn-session", header=None)
        check(pair(r, "x-body") == pair(r, "x-0") and picks(r, "decode", "hit") == 9, "session_params.id", r)
        # A custom header replaces the defaults: x-session-id is no key there.
        r2 = start(ps, ds, "hard", headers="x-chat-id")
        send(r2, "c-0", "dyn-session", header="x-session-id")
        check(picks(r2, "decode", "no_key") == 1 and picks(r2, "decode", "hit") == 0,
              "x-session-id read although not configured", r2)
        for t in range(1, 8):
            send(r2, "c-%d" % t, "dyn-session", header="x-chat-id")
        check(len({pair(r2, "c-%d" % t) for t in range(1, 8)}) == 1 and picks(r2, "decode", "hit") == 7,
              "x-chat-id not read", r2)
        check(pair(r2, "c-1") == pair(r, "x-0"), "the same key chose another pair under another header", r2)
    finally:
        pdtest.stop_all()


if __name__ == "__main__":
    pdtest.run_scenario(globals())
