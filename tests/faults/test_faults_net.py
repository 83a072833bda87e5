#!/usr/bin/env python3
"""Network faults between workers (docs/reliability.md, "Faults"): the router in the root network
namespace, every pdsim worker in a namespace of its own, prefill and decode joined by their own veth link
for the KV (faultnet.py). Faults are made by the kernel (tc, links, routes) or, for latency without
sch_netem, by delayproxy.py in the KV path; each case prints the mechanism it used. Needs root: exits 77
(skipped) otherwise, saying why.

    python3 test_faults_net.py SCENARIO     (PDR_BUILD=<build dir>)

Scenarios:
  kv_loss             packet loss on the prefill <-> decode link while KV moves: every request 200
  kv_latency          added latency on the KV path: every request 200, each at least one added round trip
                      slower
  kv_partition        the link between a prefill and the decode goes down while transfers run on it: the
                      KV deadline fires, the request is retried on the other pair; with both links down,
                      504 once every attempt met its deadline
  kv_prefill_killed   a prefill SIGKILLed while its KV is on the wire: retried on the other pair
  kv_decode_killed    a decode SIGKILLed while it pulls KV: retried on the other decode
  router_partition    a prefill can no longer answer the router (its route back is gone): connect
                      timeouts and health checks take it out, requests go to the other pair; with no
                      prefill reachable, 503 with Retry-After
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import faultcase as fc  # noqa: E402
import faultnet  # noqa: E402
from faultcase import body, fire, join_all, report, verify  # noqa: E402
import pdtest  # noqa: E402

OK = {(200, "ok")}
KV_PER_TOKEN = 16384  # KV bytes per prompt token
WORDS = 64  # prompt tokens: 1 MiB of KV per request
PROMPT = " ".join("w%d" % i for i in range(WORDS))


def kvbody(i, stream=None, tokens=4):
    return body(stream=(i % 2 == 1) if stream is None else stream, tokens=tokens, text=PROMPT)


def setup(prefills, decodes, extra=(), bootstrap_ports=None, router_extra=""):
    try:
        net = faultnet.Net(prefills, decodes).up()
    except faultnet.Skip as e:
        fc.skip(str(e))
    ps = [fc.sim("prefill", "--kv-bytes-per-token", str(KV_PER_TOKEN), *extra, net=net, where=net.prefill(i))
          for i in range(prefills)]
    ds = [fc.sim("decode", "--kv-bytes-per-token", str(KV_PER_TOKEN), *extra, net=net, where=net.decode(i))
          for i in range(decodes)]
    r = fc.router(ps, ds, "policy: { prefill: round_robin, decode: round_robin }\n" + router_extra,
                  bootstrap_ports=bootstrap_ports)
    return net, ps, ds, r


def scenario_kv_loss():
    net, ps, ds, r = setup(1, 1)
    link = net.kv_link(0, 0)
    mech = link.loss(5)
    fc.note("kv_loss: %s" % mech)
    calls = []
    for _ in range(3):
        calls += join_all(fire(r.port, 4, kvbody, 15))
    sent, dropped = link.counts()
    fc.note("kv_loss: %d of %d packets dropped on the KV link (%.1f%%)" % (dropped, sent + dropped,
                                                                         100.0 * dropped / max(1, sent + dropped)))
    bound = fc.KV_MS / 1000 + fc.SLACK_S
    lines = verify(r, calls, bound, OK, "kv_transfer_ms: a transfer that lost packets still ends inside it",
                   ps + ds)
    report("kv_loss", mech, calls, bound, lines)
    assert dropped > 0, "no packet was dropped: the fault did not happen"
    assert ds[0].stats()["kv_bytes_received"] >= len(calls) * WORDS * KV_PER_TOKEN


def scenario_kv_latency():
    delay_ms = 100
    if faultnet.has_netem():
        net, ps, ds, r = setup(1, 1)
        net.kv_link(0, 0).qdisc("netem", "delay", "%dms" % delay_ms)
        mech = "netem delay %d ms each way" % delay_ms
    else:
        # No sch_netem: delayproxy.py inside the prefill's namespace, between the decode and the prefill's
        # KV listener; the router hands the decode the proxy's port as the bootstrap port.
        proxy_port = 9000
        try:
            net = faultnet.Net(1, 1).up()
        except faultnet.Skip as e:
            fc.skip(str(e))
        pw = net.prefill(0)
        proxy = fc._spawn("delayproxy", net.cmd(pw, [sys.executable, os.path.join(fc.HERE, "delayproxy.py"),
                                                     "--listen", "%s:%d" % (pw.addr, proxy_port), "--to",
                                                     "%s:8998" % pw.addr, "--delay-ms", str(delay_ms)]))
        pdtest.poll_until(lambda: "listening" in proxy.log_tail(), 10, "the delay proxy to listen")
        ps = [fc.sim("prefill", "--kv-bytes-per-token", str(KV_PER_TOKEN), net=net, where=pw)]
        ds = [fc.sim("decode", "--kv-bytes-per-token", str(KV_PER_TOKEN), net=net, where=net.decode(0))]
        r = fc.router(ps, ds, "", bootstrap_ports=[proxy_port])
        mech = "delayproxy.py (no sch_netem): %d ms each way on the KV connection" % delay_ms
    fc.note("kv_latency: %s" % mech)
    calls = join_all(fire(r.port, 6, kvbody, 15))
    bound = fc.KV_MS / 1000 + fc.SLACK_S
    lines = verify(r, calls, bound, OK, "kv_transfer_ms", ps + ds)
    report("kv_latency", mech, calls, bound, lines)
    for c in calls:
        assert c.elapsed >= 2 * delay_ms / 1000, "%s took %.3fs: no added round trip" % (c.rid, c.elapsed)


def scenario_kv_partition():
    net, ps, ds, r = setup(2, 1)
    # A slow KV path (tbf), so that the partition finds transfers in flight on it.
    for p in range(2):
        net.kv_link(p, 0).rate("200mbit")
    calls = fire(r.port, 8, kvbody, 20)
    pdtest.poll_until(lambda: ps[0].stats()["inflight"] >= 1, 10, "a transfer in flight on prefill 0")
    net.kv_link(0, 0).down()
    t_cut = time.monotonic()
    calls += fire(r.port, 6, kvbody, 20)
    join_all(calls)
    # Bound: the attempt on the cut link ends at kv_transfer_ms, the retry's transfer (1 MiB at 200 mbit,
    # 40 ms alone, the 14 requests' 14 MiB in 0.6 s) goes inside its own deadline.
    bound = 2 * fc.KV_MS / 1000 + fc.SLACK_S
    m = r.metrics()
    lines = verify(r, calls, bound, OK, "kv_transfer_ms + the retry's transfer", ps + ds)
    report("kv_partition", "ip link set down (prefill 0 <-> decode), tbf 200mbit", calls, bound, lines)
    assert any(l["kv_cause"] == "deadline" and l["attempts"] >= 2 for l in lines.values()), "no KV deadline met"
    assert fc.metric(m, "pdr_link_suspect", prefill=ps[0].url, decode=ds[0].url) == 1, "link not suspect"
    fc.note("kv_partition: cut at t=%.2fs" % (t_cut - calls[0].t0))

    # Both links cut: no pair can move KV; 504 after every attempt met its deadline.
    net.kv_link(1, 0).down()
    r2 = fc.router(ps, ds, "policy: { prefill: round_robin, decode: round_robin }")
    bad = join_all(fire(r2.port, 2, kvbody, 20))
    bound2 = (fc.RETRIES + 1) * fc.KV_MS / 1000 + fc.SLACK_S
    lines = verify(r2, bad, bound2, {(504, "error")}, "(retries + 1) x kv_transfer_ms", ps + ds)
    report("kv_partition_all", "ip link set down (both KV links)", bad, bound2, lines)


def _killed_mid_kv(victim_role):
    # Two of the victim's role, one of the other: the survivor of the other role sees every failure.
    net, ps, ds, r = setup(2, 1) if victim_role == "prefill" else setup(1, 2)
    # The victim's KV links at 50 mbit (1 MiB takes 0.17 s), so that the kill finds transfers in flight;
    # the other links run at full speed, so that a retry's transfer is quick.
    for p in range(len(ps)):
        for d in range(len(ds)):
            if (victim_role == "prefill" and p == 0) or (victim_role == "decode" and d == 0):
                net.kv_link(p, d).rate("50mbit")
    calls = fire(r.port, 8, kvbody, 20)
    victim = ps[0] if victim_role == "prefill" else ds[0]
    pdtest.poll_until(lambda: ps[0].stats()["inflight"] >= 1 and ds[0].stats()["inflight"] >= 1, 10,
                      "a transfer in flight between prefill 0 and decode 0")
    victim.kill()
    calls += fire(r.port, 4, kvbody, 20)
    join_all(calls)
    return net, ps, ds, r, victim, calls


def scenario_kv_prefill_killed():
    """A prefill SIGKILLed while its KV is on the wire: the decode's fetch fails first, the request is
    retried on the other pair (the prefill blamed, not the decode)."""
    net, ps, ds, r, victim, calls = _killed_mid_kv("prefill")
    # Bound: the transfers on the victim's links (8 MiB at 50 mbit: 1.3 s, shared), then the 1 s promise
    # for a dead prefill.
    bound = 1.3 + 1.0 + fc.SLACK_S
    m = r.metrics()
    lines = verify(r, calls, bound, OK, "the transfers on its links + 1 s for a dead prefill", ps[1:] + ds)
    report("kv_prefill_killed", "SIGKILL of a prefill mid-transfer, tbf 50mbit", calls, bound, lines)
    assert any(l["attempts"] >= 2 for l in lines.values()), "no request was retried"
    assert fc.metric(m, "pdr_worker_healthy", role="decode", url=ds[0].url) == 1, "the decode was blamed"


def scenario_kv_decode_killed():
    """A decode SIGKILLed while it pulls KV (before its first byte): retried on the other decode. The
    prefill's answer to the lost transfer (a 500: its offer lost its peer) usually reaches the router
    before the decode leg's reset; it must not be charged to the prefill, the only one here, which
    would otherwise be marked down after `fall` of them and every request refused 503 until its health
    checks rise again."""
    net, ps, ds, r, victim, calls = _killed_mid_kv("decode")
    bound = 1.3 + 1.0 + fc.SLACK_S
    m = r.metrics()
    lines = verify(r, calls, bound, OK, "the transfers on its links + 1 s for a dead worker", ps + ds[1:])
    report("kv_decode_killed", "SIGKILL of a decode mid-transfer, tbf 50mbit", calls, bound, lines)
    assert any(l["attempts"] >= 2 for l in lines.values()), "no request was retried"
    assert fc.metric(m, "pdr_worker_healthy", role="decode", url=ds[0].url) == 0, "the dead decode is healthy"
    pf = fc.metric(m, "pdr_worker_failures_total", role="prefill", url=ps[0].url)
    assert not pf, "the prefill was charged %s failures for the decode's death" % pf


def scenario_router_partition():
    net, ps, ds, r = setup(2, 1)
    warm = join_all(fire(r.port, 4, kvbody, 10))  # keep-alive connections to both prefills
    net.prefill(0).unroute_router(net)
    t_cut = time.monotonic()
    calls = join_all(fire(r.port, 8, kvbody, 20))
    # Bound: an attempt on the cut prefill ends at connect_ms (a new connection) or kv_transfer_ms (a
    # pooled one, whose request went out), then the retry.
    bound = fc.KV_MS / 1000 + fc.SLACK_S
    pdtest.poll_until(lambda: fc.metric(r.metrics(), "pdr_worker_healthy", role="prefill", url=ps[0].url) == 0,
                      5, "the cut prefill to be taken out")
    t_out = time.monotonic() - t_cut
    m = r.metrics()
    state = [s for s in ("ejected", "unhealthy") if fc.metric(m, "pdr_worker_state", role="prefill", url=ps[0].url,
                                                                state=s) == 1]
    fc.note("router_partition: the cut prefill is %s; upstream errors: connect %s, timeout %s" % (
        state, fc.metric(m, "pdr_upstream_errors_total", role="prefill", cause="connect"),
        fc.metric(m, "pdr_upstream_errors_total", role="prefill", cause="timeout")))
    assert state, "the cut prefill is neither ejected nor unhealthy"
    # A SYN that is never answered is a connect error (timeouts.connect_ms), not a late answer.
    assert fc.metric(m, "pdr_upstream_errors_total", role="prefill", cause="connect") >= 1, \
        "no connect error counted for the cut prefill"
    after = join_all(fire(r.port, 4, kvbody, 10))
    # No prefill reachable: readiness goes 503, requests get 503 with Retry-After at once.
    net.prefill(1).unroute_router(net)
    pdtest.poll_until(lambda: pdtest.request(r.port, "GET", "/readiness", timeout=2)[0] == 503, 10,
                      "readiness 503 with no prefill reachable")
    none = join_all(fire(r.port, 4, kvbody, 10))
    for c in after:
        assert c.elapsed < 1.0, "after the ejection %s still took %.2fs" % (c.rid, c.elapsed)
    lines = verify(r, warm + calls + after + none, bound, OK | {(503, "error")}, "kv_transfer_ms", ps + ds)
    report("router_partition", "route deleted (prefill 0 -> router)", calls + after, bound, lines)
    report("router_partition_all", "routes deleted (both prefills -> router)", none, bound, lines)
    fc.note("router_partition: the cut prefill was out %.2fs after the cut" % t_out)
    for c in warm + calls + after:
        assert c.status == 200, c.describe()
    for c in none:
        assert c.status == 503 and c.headers.get("retry-after") == "1" and c.elapsed < 0.5, c.describe()


if __name__ == "__main__":
    fc.run(globals())
