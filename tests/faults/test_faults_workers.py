#!/usr/bin/env python3
"""Worker failure modes (docs/reliability.md, "Faults"): real pdrouter and pdsim processes on loopback,
each fault made by a real signal or a pdsim fault knob (docs/pdsim.md) while requests run. Every case
checks a bounded time for every request, the status docs/operations.md names, and exactly one answer and
one access-log line per request id (faultcase.py).

    python3 test_faults_workers.py SCENARIO     (PDR_BUILD=<build dir>)

Scenarios: prefill_killed prefill_frozen prefill_slow prefill_5xx prefill_reset decode_killed
decode_frozen decode_killed_unmoved decode_frozen_unmoved kv_stalled. Router settings: faultcase.py (connect_ms 300, first_byte_ms 4000,
kv_transfer_ms 1000, stream_idle_ms 1500, retries 2, health every 200 ms, down after 2 failures).
"""

import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import faultcase as fc  # noqa: E402
from faultcase import body, fire, join_all, report, sim, verify  # noqa: E402
import pdtest  # noqa: E402

OK = {(200, "ok")}
PREFILL_US = 60000  # per prompt token: the 5-token prompt takes 0.3 s, so a fault finds requests in flight
PREFILL_S = 5 * PREFILL_US / 1e6


def mixed(i, tokens=8):
    return body(stream=(i % 2 == 1), tokens=tokens)


def wait_inflight(w, n=1):
    pdtest.poll_until(lambda: w.stats()["inflight"] >= n, 10, "%s to have %d requests in flight" % (w.url, n))


def scenario_prefill_killed():
    """SIGKILL of a prefill with requests on it: retried on the other pair; with none left, 503."""
    a = sim("prefill", "--prefill-us-per-token", str(PREFILL_US))
    b = sim("prefill")
    d = sim("decode")
    r = fc.router([a, b], [d], "policy: { prefill: round_robin, decode: round_robin }")
    calls = fire(r.port, 8, mixed, 10)
    wait_inflight(a)
    a.kill()
    calls += join_all(fire(r.port, 6, mixed, 10))
    join_all(calls)
    # Bound: A's prefill time (the kill finds its requests there), then the design's promise for a dead
    # prefill: a retry on another pair within 1 s.
    bound = PREFILL_S + 1.0 + fc.SLACK_S
    m = r.metrics()
    lines = verify(r, calls, bound, OK, "prefill time + 1 s for a dead prefill", [b, d])
    report("prefill_killed", "SIGKILL", calls, bound, lines)
    assert any(l["attempts"] >= 2 for l in lines.values()), "no request was retried"
    assert fc.metric(m, "pdr_worker_healthy", role="prefill", url=a.url) == 0, "the killed prefill is healthy"



def scenario_prefill_dead_all():
    """Every prefill killed while requests run: each request ends within 1 s with 503 (no prefill could be
    reached; Retry-After) or 502 (the prefill's connection broke after the request went out)."""
    a = sim("prefill", "--prefill-us-per-token", str(PREFILL_US))
    b = sim("prefill", "--prefill-us-per-token", str(PREFILL_US))
    d = sim("decode")
    r = fc.router([a, b], [d])
    calls = fire(r.port, 6, mixed, 10)
    wait_inflight(a)
    wait_inflight(b)
    a.kill()
    b.kill()
    join_all(calls)
    late = join_all(fire(r.port, 4, mixed, 10))
    bound = PREFILL_S + 1.0 + fc.SLACK_S
    lines = verify(r, calls + late, bound, {(503, "error"), (502, "error")}, "prefill time + 1 s", [d])
    report("prefill_dead_all", "SIGKILL of every prefill", calls + late, bound, lines)
    for c in late:
        assert c.status == 503 and c.headers.get("retry-after") == "1", c.describe()


def scenario_prefill_frozen():
    """SIGSTOP of a prefill with requests on it: the KV never comes, the KV deadline cancels both legs and
    the retry goes to the other pair; health checks then take the frozen prefill out."""
    a = sim("prefill", "--prefill-us-per-token", str(PREFILL_US))
    b = sim("prefill")
    d = sim("decode")
    r = fc.router([a, b], [d], "policy: { prefill: round_robin, decode: round_robin }")
    calls = fire(r.port, 8, mixed, 15)
    wait_inflight(a)
    a.signal(signal.SIGSTOP)
    calls += fire(r.port, 6, mixed, 15)
    join_all(calls)
    # Bound: one attempt on the frozen prefill ends at kv_transfer_ms, the retry avoids it.
    bound = PREFILL_S + fc.KV_MS / 1000 + fc.SLACK_S
    pdtest.poll_until(lambda: fc.metric(r.metrics(), "pdr_worker_healthy", role="prefill", url=a.url) == 0, 5,
                      "health checks to take the frozen prefill out")
    lines = verify(r, calls, bound, OK, "prefill time + kv_transfer_ms", [b, d])
    report("prefill_frozen", "SIGSTOP", calls, bound, lines)
    assert any(l["kv_cause"] == "deadline" and l["attempts"] >= 2 for l in lines.values()), "no KV deadline met"
    a.signal(signal.SIGCONT)


def scenario_prefill_slow():
    """A prefill slower than kv_transfer_ms: its attempts end at the deadline, retried on the other pair.
    Then one slower than usual but inside the deadline: served, in its own time."""
    a = sim("prefill")
    b = sim("prefill")
    d = sim("decode")
    r = fc.router([a, b], [d], "policy: { prefill: round_robin, decode: round_robin }")
    slow_us = int(2 * fc.KV_MS * 1000 / 5)  # 2 x kv_transfer_ms for the 5-token prompt
    a.fault({"prefill_us_per_token": slow_us})
    calls = join_all(fire(r.port, 6, mixed, 15))
    bound = fc.KV_MS / 1000 + fc.SLACK_S
    # Inside the deadline: 0.5 x kv_transfer_ms.
    a.fault({"prefill_us_per_token": int(0.5 * fc.KV_MS * 1000 / 5)})
    b.fault({"prefill_us_per_token": int(0.5 * fc.KV_MS * 1000 / 5)})
    inside = join_all(fire(r.port, 4, mixed, 15))
    lines = verify(r, calls + inside, bound, OK, "kv_transfer_ms", [a, b, d])
    report("prefill_slow", "pdsim prefill_us_per_token (2x, then 0.5x kv_transfer_ms)", calls + inside, bound,
           lines)
    assert any(lines[c.rid]["kv_cause"] == "deadline" for c in calls), "no attempt met the deadline"
    for c in inside:
        assert lines[c.rid]["attempts"] == 1 and c.elapsed >= 0.5 * fc.KV_MS / 1000, c.describe()


def scenario_prefill_5xx():
    """A prefill answering 500: retried on the other pair; every prefill answering 5xx: 502, or 503 once
    `fall` such answers in a row marked both prefills down (passive health)."""
    a = sim("prefill", "--fail-status", "500")
    b = sim("prefill")
    d = sim("decode")
    r = fc.router([a, b], [d], "policy: { prefill: round_robin, decode: round_robin }")
    calls = join_all(fire(r.port, 8, mixed, 10))
    b.fault({"fail_status": 503})
    bad = join_all(fire(r.port, 4, mixed, 10))
    bound = 1.0 + fc.SLACK_S
    lines = verify(r, calls + bad, bound, OK | {(502, "error"), (503, "error")}, "1 s: a 5xx answer is immediate",
                   [a, b, d])
    report("prefill_5xx", "pdsim fail_status 500 / 503", calls + bad, bound, lines)
    assert all(c.status == 200 for c in calls), [c.describe() for c in calls if c.status != 200]
    assert all(c.status in (502, 503) for c in bad), [c.describe() for c in bad if c.status not in (502, 503)]
    for c in bad:
        assert c.status == 502 or c.headers.get("retry-after") == "1", c.describe()


def scenario_prefill_reset():
    """A prefill whose answer is cut by a reset after its KV left: a prefill failure before the decode's
    first byte, retried on the other pair; with every prefill resetting, 502."""
    a = sim("prefill", "--reset-answer")
    b = sim("prefill")
    # The decode's answer comes 8 x 20 ms after its KV: the prefill's reset is seen first.
    d = sim("decode", "--decode-us-per-token", "20000")
    r = fc.router([a, b], [d], "policy: { prefill: round_robin, decode: round_robin }")
    calls = join_all(fire(r.port, 8, lambda i: body(tokens=8), 10))
    b.fault({"reset_answer": True})
    bad = join_all(fire(r.port, 4, lambda i: body(tokens=8), 10))
    bound = 1.0 + fc.SLACK_S
    lines = verify(r, calls + bad, bound, OK | {(502, "error")}, "1 s: a reset is seen at once", [a, b, d])
    report("prefill_reset", "pdsim reset_answer (RST mid-body)", calls + bad, bound, lines)
    assert all(c.status == 200 for c in calls), [c.describe() for c in calls if c.status != 200]
    assert all(c.status == 502 for c in bad), [c.describe() for c in bad if c.status != 502]
    assert a.stats()["resets"] >= 1


def _decode_midstream(freeze, migrate=True):
    p = sim("prefill")
    d1 = sim("decode", "--drip-ms", "100")
    d2 = sim("decode", "--drip-ms", "100")
    r = fc.router([p], [d1, d2], "policy: { prefill: round_robin, decode: round_robin }" +
                  ("" if migrate else "\nmigration: { enabled: false }"))
    # Streams of 30 tokens, 100 ms apart (3 s), and JSON answers (sent whole after their 3 s).
    streams = fire(r.port, 6, lambda i: body(stream=True, tokens=30), 15, tag="s")
    jsons = fire(r.port, 2, lambda i: body(tokens=30), 15, tag="j")
    for c in streams:
        c.tokens.wait(10)
    t_fault = time.monotonic()
    if freeze:
        d1.signal(signal.SIGSTOP)
    else:
        d1.kill()
    calls = join_all(streams + jsons)
    return p, d1, d2, r, streams, jsons, t_fault, calls


def _moved(mtext, lines, streams):
    """The streams the failed decode held went on on the other: each whole (verify), moved once, counted."""
    moved = [c for c in streams if lines[c.rid]["attempts"] > 1]
    assert moved, "no stream was on the failed decode"
    for c in moved:
        assert lines[c.rid]["retry_error"] is not None and lines[c.rid]["error"] is None, lines[c.rid]
    n = fc.metric(mtext, "pdr_stream_migrations_total", outcome="moved") or 0
    assert n == len(moved), "%d migrations counted, %d streams moved" % (n, len(moved))
    return moved


def scenario_decode_killed():
    """SIGKILL of a decode mid-stream: its streams go on on the other decode (stream migration) and end
    whole; JSON answers that had no byte yet are retried on the other decode."""
    p, d1, d2, r, streams, jsons, t_fault, calls = _decode_midstream(False)
    bound = 3.0 + 3.0 + fc.SLACK_S  # a JSON answer retried after 3 s on d1 takes 3 s more on d2
    mtext = r.metrics()  # before verify stops the router
    lines = verify(r, calls, bound, OK, "stream length + retry", [p, d2])
    report("decode_killed", "SIGKILL mid-stream, streams moved", calls, bound, lines)
    moved = _moved(mtext, lines, streams)
    fc.note("decode_killed: %d streams moved, all whole" % len(moved))


def scenario_decode_frozen():
    """SIGSTOP of a decode mid-stream: at stream_idle_ms of silence its streams go on on the other decode
    (stream migration) and end whole; JSON answers with no byte yet end at first_byte_ms and are retried."""
    p, d1, d2, r, streams, jsons, t_fault, calls = _decode_midstream(True)
    bound = fc.FIRST_BYTE_MS / 1000 + 3.0 + fc.SLACK_S
    mtext = r.metrics()  # before verify stops the router
    lines = verify(r, calls, bound, OK, "first_byte_ms + a retried answer", [p, d2])
    report("decode_frozen", "SIGSTOP mid-stream, streams moved", calls, bound, lines)
    moved = _moved(mtext, lines, streams)
    fc.note("decode_frozen: %d streams moved, all whole" % len(moved))
    d1.signal(signal.SIGCONT)


def scenario_decode_killed_unmoved():
    """SIGKILL of a decode mid-stream with migration.enabled false: its streams end at once with one error
    event (never a hang); JSON answers that had no byte yet are retried on the other decode."""
    p, d1, d2, r, streams, jsons, t_fault, calls = _decode_midstream(False, migrate=False)
    bound = 3.0 + 3.0 + fc.SLACK_S  # a JSON answer retried after 3 s on d1 takes 3 s more on d2
    lines = verify(r, calls, bound, {(200, "ok"), (200, "stream_error")}, "stream length + retry", [p, d2])
    report("decode_killed", "SIGKILL mid-stream", calls, bound, lines)
    broken = [c for c in streams if c.outcome == "stream_error"]
    assert broken, "no stream was on the killed decode"
    for c in broken:
        assert lines[c.rid]["error"] == "decode_stream_broken", lines[c.rid]
        # Ended by the kill itself, not by a timeout: the decode's connection closed.
        assert c.t_end - t_fault < 0.5, "%s ended %.2fs after the kill" % (c.rid, c.t_end - t_fault)
    for c in jsons:
        assert c.outcome == "ok", c.describe()
    fc.note("decode_killed: broken streams ended %.3f-%.3fs after the kill" % (
        min(c.t_end - t_fault for c in broken), max(c.t_end - t_fault for c in broken)))


def scenario_decode_frozen_unmoved():
    """SIGSTOP of a decode mid-stream with migration.enabled false: its streams end with one error event at
    stream_idle_ms of silence; JSON answers with no byte yet end at first_byte_ms and are retried."""
    p, d1, d2, r, streams, jsons, t_fault, calls = _decode_midstream(True, migrate=False)
    bound = fc.FIRST_BYTE_MS / 1000 + 3.0 + fc.SLACK_S
    lines = verify(r, calls, bound, {(200, "ok"), (200, "stream_error")}, "first_byte_ms + a retried answer",
                   [p, d2])
    report("decode_frozen", "SIGSTOP mid-stream", calls, bound, lines)
    broken = [c for c in streams if c.outcome == "stream_error"]
    assert broken, "no stream was on the frozen decode"
    idle = fc.STREAM_IDLE_MS / 1000
    for c in broken:
        # Cut after stream_idle_ms of silence, counted from its last token (100 ms apart, more on a loaded
        # machine, so up to a few hundred ms before the stop), not at once.
        assert idle - 0.5 < c.t_end - t_fault < idle + fc.SLACK_S, "%s ended %.2fs after the stop" % (
            c.rid, c.t_end - t_fault)
    fc.note("decode_frozen: broken streams ended %.3f-%.3fs after the stop" % (
        min(c.t_end - t_fault for c in broken), max(c.t_end - t_fault for c in broken)))
    for c in jsons:
        assert c.outcome == "ok", c.describe()
    d1.signal(signal.SIGCONT)


def scenario_kv_stalled():
    """A prefill that never offers its KV (pdsim stall_kv): the KV deadline, a retry on the other pair;
    both stalled: 504 once every attempt met its deadline."""
    a = sim("prefill", "--stall-kv")
    b = sim("prefill")
    d = sim("decode")
    r = fc.router([a, b], [d], "policy: { prefill: round_robin, decode: round_robin }")
    calls = join_all(fire(r.port, 6, mixed, 15))
    b.fault({"stall_kv": True})
    bad = join_all(fire(r.port, 2, mixed, 15))
    bound = (fc.RETRIES + 1) * fc.KV_MS / 1000 + fc.SLACK_S
    lines = verify(r, calls + bad, bound, OK | {(504, "error"), (200, "stream_error")},
                   "(retries + 1) x kv_transfer_ms", [a, b, d])
    report("kv_stalled", "pdsim stall_kv", calls + bad, bound, lines)
    assert all(c.status == 200 for c in calls), [c.describe() for c in calls if c.status != 200]
    assert all(c.status == 504 for c in bad), [c.describe() for c in bad if c.status != 504]


if __name__ == "__main__":
    fc.run(globals())
