#!/usr/bin/env python3
"""precise_prefix index snapshots: a restarted router and a new replica start warm.

Two pdsim prefills publish KV events (vLLM's format), one decode; prompts are input_ids written compactly
after the prefix was sent with spaces, so that the prefix tree of request bytes cannot match them: only
the index can send them to the prefill X that holds the prefix.

Scenarios (argv[1]):
  restart   a router builds its index, stops (SIGTERM: the snapshot is written to kv_events.snapshot_path);
            a new router with the same snapshot_path sends its very first request to X, counted as an
            index match. Prints how long after the start the index was usable.
  corrupt   the timer writes the snapshot while the router runs; a snapshot with one byte changed: the
            router logs why it refused it, counts it, starts cold (its first pick is no index match) and
            keeps serving.
  replay    with the workers' replay sockets: the restarted router's view of X is warm (not cold) with the
            snapshot's number; X's first message after it is lost, so the next one shows a gap, which is
            replayed from the snapshot's number: X ends synced with its loaded blocks, no gap counted.
  discovered  the workers come from Kubernetes discovery (pods with the KV events annotation), which
            lists them only after the snapshot was loaded: their entries wait for them and are loaded when
            each is subscribed; the restarted router's first request goes to X from the index.
  replica   a second router fetches the first one's index from its admin API (token required) at start
            and sends its first request to X; without the token the fetch fails, is counted and the
            replica starts cold; a sibling that never answers costs the start no more than
            kv_events.snapshot_fetch_timeout_ms.
"""
import os
import re
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check, request  # noqa: E402
from test_router import metric_value, metrics, sim, stats  # noqa: E402
from test_kv_events import PREFIX, connect_all, prefill, send, url, wait_metric, worker_kv  # noqa: E402
import test_router  # noqa: E402


def router(ps, ds, kv="", admin=None, resync=1):
    """pdrouter with precise_prefix on the prefills; kv: more kv_events keys ("k: v, ...")."""
    lines = ([admin] if admin else []) + [
        "policy: { prefill: precise_prefix, decode: least_load }",
        "kv_events: { resync_messages: %d%s }" % (resync, ", " + kv if kv else ""),
        "cache_aware: { seed: smallest_tree }", "workers:", "  prefill:"]
    lines += ["    - { url: http://127.0.0.1:%d, bootstrap_port: %d, kv_events: 'tcp://127.0.0.1:%d'%s }" %
              (p.port, p.ports["bport"], p.ports["kv"],
               ", kv_events_replay: 'tcp://127.0.0.1:%d'" % p.ports["rp"] if "rp" in p.ports else "") for p in ps]
    lines += ["  decode:"] + ["    - { url: http://127.0.0.1:%d }" % d.port for d in ds]
    return test_router.router([], [], config="\n".join(lines))


def snapshot_path():
    d = tempfile.mkdtemp(prefix="pdtest-kvsnap-")
    return os.path.join(d, "index.snap")


def token_file(text):
    fd, path = tempfile.mkstemp(prefix="pdtest-token-")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


def build(ps, ds, kv="", admin=None, resync=1):
    """A router that learns the prefix from X: returns (router, x, y)."""
    r = router(ps, ds, kv, admin, resync)
    connect_all(r, ps)
    before = [stats(p)["requests"] for p in ps]
    send(r, PREFIX + list(range(5000, 5016)), False)
    grown = [p for p, b in zip(ps, before) if stats(p)["requests"] > b]
    check(len(grown) == 1, "the prefix went to %d prefills" % len(grown), r)
    x = grown[0]
    y = ps[1] if x is ps[0] else ps[0]
    wait_metric(r, "the prefix's blocks indexed for X",
                lambda m: (metric_value(m, "pdr_kv_events_blocks", worker=url(x)) or 0) >= len(PREFIX) // 16)
    return r, x, y


def index_matches(r):
    return metric_value(metrics(r), "pdr_precise_prefix_decisions_total", source="index", decision="match") or 0


def snapshots(r, op, outcome):
    return metric_value(metrics(r), "pdr_kv_index_snapshots_total", op=op, outcome=outcome) or 0


def first_pick(r, x, y, tag):
    """Sends the prefix compactly once; returns (the prefill that served it, seconds the answer took)."""
    counts0 = [stats(p)["requests"] for p in (x, y)]
    t0 = time.monotonic()
    send(r, PREFIX + list(range(tag, tag + 16)), True)
    dt = time.monotonic() - t0
    counts = [stats(p)["requests"] - c for p, c in zip((x, y), counts0)]
    check(sum(counts) == 1, "one request, counts %r" % counts, r)
    return (x if counts[0] == 1 else y), dt


def loaded_ms(r):
    with open(r.log_path, errors="replace") as f:
        m = re.search(r"kv index snapshot loaded from .*?: (\d+) entries.*loaded in (\d+) ms", f.read())
    return (int(m.group(1)), int(m.group(2))) if m else (0, -1)


def scenario_restart():
    try:
        ps, ds = [prefill(), prefill()], [sim("decode")]
        path = snapshot_path()
        kv = "snapshot_path: %s, snapshot_interval_ms: 600000" % path
        a, x, y = build(ps, ds, kv)
        a.stop()
        check(os.path.exists(path) and not os.path.exists(path + ".tmp"), "no snapshot after SIGTERM", a)
        check("saved to %s at shutdown" % path in a.log_tail(200), "no shutdown save logged", a)
        t_start = time.monotonic()
        b = router(ps, ds, kv)
        t_ready = time.monotonic() - t_start
        warm = metric_value(metrics(b), "pdr_kv_index_snapshot_warm_workers")
        got, dt = first_pick(b, x, y, 8000)
        usable = time.monotonic() - t_start
        entries, load_ms = loaded_ms(b)
        print("warm-up: snapshot of %d entries loaded in %d ms; router ready %.0f ms after its start; first "
              "request answered from the index %.0f ms after its start (the request itself %.0f ms)"
              % (entries, load_ms, t_ready * 1000, usable * 1000, dt * 1000))
        check(got is x, "the restarted router's first pick went to the other prefill", b)
        check(index_matches(b) == 1, "the first pick was not an index match", b)
        check(entries >= len(PREFIX) // 16 and 0 <= load_ms < 1000, "loaded %d entries in %d ms" % (entries, load_ms), b)
        check(usable < 5.0, "the index became usable %.1f s after the start" % usable, b)
        m = metrics(b)
        check(metric_value(m, "pdr_kv_index_snapshots_total", op="load", outcome="ok") == 1, "load not counted", b)
        check((metric_value(m, "pdr_kv_index_snapshot_loaded_entries") or 0) == entries, "loaded entries gauge", b)
        # The stream goes on from the snapshot's number: X becomes synced (or, had the first message been
        # published before the subscription connected, the gap rule drops its blocks): never stuck warm.
        check(warm == 2, "%r workers warm after the load, expected both prefills" % warm, b)
        wait_metric(b, "X's state to be decided by its stream (Y, silent, stays warm)",
                    lambda m: (metric_value(m, "pdr_kv_events_total", worker=url(x), result="applied") or 0) >= 1
                    and metric_value(m, "pdr_kv_index_snapshot_warm_workers") == 1)
    finally:
        pdtest.stop_all()


def scenario_corrupt():
    try:
        ps, ds = [prefill(), prefill()], [sim("decode")]
        path = snapshot_path()
        kv = "snapshot_path: %s, snapshot_interval_ms: 200" % path
        a, x, y = build(ps, ds, kv)
        # The timer's write, while the router runs: the file holds the prefix's blocks.
        pdtest.poll_until(lambda: snapshots(a, "write", "ok") >= 1 and os.path.getsize(path) > 80 + 20 * 32, 10,
                          "the timer to write the snapshot with the prefix's blocks")
        a.stop()
        with open(path, "r+b") as f:
            f.seek(100)
            b0 = f.read(1)
            f.seek(100)
            f.write(bytes([b0[0] ^ 0x40]))
        b = router(ps, ds, kv)
        check(re.search(r"kv index snapshot from .* refused: checksum mismatch", b.log_tail(200)) is not None,
              "no log line naming the corruption", b)
        check(snapshots(b, "load", "corrupt") == 1, "corrupt load not counted", b)
        check((metric_value(metrics(b), "pdr_kv_index_snapshot_loaded_entries") or 0) == 0, "entries loaded", b)
        first_pick(b, x, y, 8000)
        check(index_matches(b) == 0, "a cold router's first pick was an index match", b)
    finally:
        pdtest.stop_all()


def scenario_replay():
    try:
        ps, ds = [prefill(replay_buffer=1000), prefill(replay_buffer=1000)], [sim("decode")]
        path = snapshot_path()
        kv = "snapshot_path: %s, snapshot_interval_ms: 600000" % path
        a, x, y = build(ps, ds, kv, resync=1000)
        a.stop()
        b = router(ps, ds, kv, resync=1000)
        view = worker_kv(b, x)
        last = stats(x)["kv_events"]["next_seq"] - 1
        check(view is not None and view["warm"] and not view["cold"] and not view["synced"] and
              view["last_seq"] == last and view["blocks"] >= len(PREFIX) // 16, "X's view %r" % view, b)
        check(metric_value(metrics(b), "pdr_kv_events_cold_workers") == 0, "warm workers counted as cold", b)
        # X loses the message of the first request: the next one is a gap from the snapshot's number on.
        request(x.port, "POST", "/pdsim/fault", {"kv_events_drop_every": 1})
        got, _ = first_pick(b, x, y, 8000)
        check(got is x and index_matches(b) == 1, "the warm index did not pick X", b)
        request(x.port, "POST", "/pdsim/fault", {"kv_events_drop_every": 0})
        k = [0]

        def repaired():
            k[0] += 1
            first_pick(b, x, y, 8100 + 100 * k[0])
            return (metric_value(metrics(b), "pdr_kv_events_replays_total", worker=url(x), outcome="repaired")
                    or 0) >= 1
        pdtest.poll_until(repaired, 10, "the gap after the snapshot to be replayed")
        m = metrics(b)
        check((metric_value(m, "pdr_kv_events_gaps_total", worker=url(x)) or 0) == 0, "a gap reached the index", b)
        # Replayed from the snapshot's number, not from 0 as a late join (which replays as a restart).
        check((metric_value(m, "pdr_kv_events_restarts_total", worker=url(x)) or 0) == 0,
              "the gap was replayed from 0, not from the snapshot's number", b)
        view = worker_kv(b, x)
        check(view["synced"] and not view["warm"] and view["blocks"] >= len(PREFIX) // 16 + 2,
              "X after the replay %r" % view, b)
    finally:
        pdtest.stop_all()


def scenario_discovered():
    from test_discovery import K8s, pod
    ps, ds = [prefill(), prefill()], [sim("decode")]
    fd, tok_path = tempfile.mkstemp(prefix="pdtest-k8s-token-")
    with os.fdopen(fd, "w") as f:
        f.write("k8s-token\n")
    api = K8s("k8s-token", "sglang")
    try:
        api.put(*([dict(pod("prefill-%d" % i, "prefill", p),
                        annotations={"pdrouter.io/kv-events-endpoint": "tcp://127.0.0.1:%d" % p.ports["kv"]})
                   for i, p in enumerate(ps)] + [pod("decode-0", "decode", ds[0])]))
        path = snapshot_path()
        cfg = "\n".join([
            "policy: { prefill: precise_prefix, decode: least_load }",
            "kv_events: { resync_messages: 1, snapshot_path: %s, snapshot_interval_ms: 600000 }" % path,
            "cache_aware: { seed: smallest_tree }",
            "discovery:\n  kubernetes:\n    api_server: http://127.0.0.1:%d\n    namespace: sglang\n"
            "    token_file: %s\n    prefill: { selector: \"app=sglang,role=prefill\" }\n"
            "    decode: { selector: \"app=sglang,role=decode\" }" % (api.port, tok_path)])
        a = test_router.router([], [], config=cfg)
        connect_all(a, ps)
        before = [stats(p)["requests"] for p in ps]
        send(a, PREFIX + list(range(5000, 5016)), False)
        x = [p for p, b0 in zip(ps, before) if stats(p)["requests"] > b0]
        check(len(x) == 1, "the prefix went to %d prefills" % len(x), a)
        x = x[0]
        y = ps[1] if x is ps[0] else ps[0]
        wait_metric(a, "the prefix's blocks indexed for X",
                    lambda m: (metric_value(m, "pdr_kv_events_blocks", worker=url(x)) or 0) >= len(PREFIX) // 16)
        a.stop()
        b = test_router.router([], [], config=cfg)
        check(re.search(r"snapshot loaded from .*: 0 entries of 0 workers \(2 skipped\)", b.log_tail(200)),
              "the snapshot was loaded before discovery listed the workers?", b)
        wait_metric(b, "the parked entries to be loaded as the discovered workers are subscribed",
                    lambda m: metric_value(m, "pdr_kv_index_snapshot_parked_entries") == 0 and
                    metric_value(m, "pdr_kv_index_snapshot_warm_workers") == 2)
        check("loaded as it joined the pool" in b.log_tail(200), "no adoption logged", b)
        check(metric_value(metrics(b), "pdr_kv_index_snapshot_loaded_entries") >= len(PREFIX) // 16,
              "loaded entries gauge", b)
        got, _ = first_pick(b, x, y, 8300)
        check(got is x, "the restarted router's first pick went to the other prefill", b)
        check(index_matches(b) == 1, "the first pick was not an index match", b)
    finally:
        pdtest.stop_all()
        api.close()


def scenario_replica():
    try:
        ps, ds = [prefill(), prefill()], [sim("decode")]
        tok = token_file("s3cret-kv-token\n")
        a, x, y = build(ps, ds, admin="admin: { host: 127.0.0.1, port: {admin}, token_file: %s }" % tok)
        st, _, _ = request(a.ports["admin"], "GET", "/admin/v1/kv-index/snapshot")
        check(st == 401, "the snapshot route answered %d without the token" % st, a)
        st, hdrs, body = request(a.ports["admin"], "GET", "/admin/v1/kv-index/snapshot",
                                 headers={"Authorization": "Bearer s3cret-kv-token"})
        check(st == 200 and body[:8] == b"PDRKVIX\0", "snapshot route: %d %r" % (st, body[:16]), a)
        src = "http://127.0.0.1:%d" % a.ports["admin"]
        b = router(ps, ds, "snapshot_from: '%s', snapshot_from_token_file: %s" % (src, tok))
        got, _ = first_pick(b, x, y, 8100)
        check(got is x, "the replica's first pick went to the other prefill", b)
        check(index_matches(b) == 1, "the replica's first pick was not an index match", b)
        check(snapshots(b, "fetch", "ok") == 1, "fetch not counted", b)
        # Without the token: refused by the sibling, counted, the replica starts cold.
        c = router(ps, ds, "snapshot_from: '%s'" % src)
        check(snapshots(c, "fetch", "failed") == 1, "a refused fetch not counted", c)
        check("HTTP status 401" in c.log_tail(200), "the refused fetch not logged", c)
        first_pick(c, x, y, 8200)
        check(index_matches(c) == 0, "a cold replica's first pick was an index match", c)
        # A sibling that accepts the connection and never answers: the fetch gives up at its timeout.
        mute = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        mute.bind(("127.0.0.1", 0))
        mute.listen(4)
        t0 = time.monotonic()
        e = router(ps, ds, "snapshot_from: 'http://127.0.0.1:%d', snapshot_fetch_timeout_ms: 300"
                   % mute.getsockname()[1])
        took = time.monotonic() - t0
        mute.close()
        check(snapshots(e, "fetch", "failed") == 1 and "Timeout was reached" in e.log_tail(200),
              "a fetch timeout not counted or logged", e)
        check(0.3 <= took < 5.0, "a silent sibling held the start %.1f s" % took, e)
    finally:
        pdtest.stop_all()


if __name__ == "__main__":
    pdtest.run_scenario(globals())
