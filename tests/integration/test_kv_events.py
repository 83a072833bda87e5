#!/usr/bin/env python3
"""precise_prefix: the router routes by the KV events pdsim's prefix caches publish (vLLM's format).

Two pdsim prefills with prefix caches publish KV events; one decode. Prompts are input_ids.

Scenarios (argv[1]):
  routing    a shared prefix sent as input_ids with spaces after the commas lands on a prefill X; the
             same ids written compactly (other JSON bytes, the same tokens) then go to X as well, because
             X's events say it holds the prefix: its cache hits grow, and the decisions are counted as
             index matches. With cache_aware (the prefix tree of request bytes) the compact requests go
             to the other prefill: the comparison that fails without the feature.
  gap        a message X does not send (a sequence gap) is counted, X's blocks are dropped, and X is
             routed by the tree (decisions counted as such) until it is in sync again.
  replay_repaired  with pdsim's replay socket (vLLM's), the router's late join and a dropped message are
             replayed: X stays in sync with its blocks, counted as repaired, never as a gap.
  replay_busy  gaps replayed while 60 requests run at once: in sync, every block, no gap or restart.
  replay_too_old   a replay buffer of one batch cannot cover the gap: today's resync, counted too_old.
  replay_timeout   a replay endpoint that never answers: the gap stands after replay_timeout_ms, counted.
  lora       X's blocks are a LoRA adapter's: the index matches them only for requests naming it.
  incarnation  X's shim reports a new instance: its blocks leave the index at once (logged).
  restart    X restarts (a new publisher, numbers from 0 again): counted as a restart.
  malformed  a truncated payload from Y is counted as malformed; the router keeps serving.
  block_sizes  five prefills with five KV block sizes: the candidate whose size the lookup does not hash
             is matched by the tree, and that fall-back is counted and logged.
  text       with a tokenizer (the router's config key tokenizer, pdsim's --tokenizer: the same
             tokenizer.json), text prompts are matched by token ids too: the same text written with
             JSON escapes (other bytes for the tree) goes to the prefill whose events hold it.
  big_messages  a publisher (kvflood) sends 5 MB messages: past kv_events.max_message_bytes they are
             dropped with the connection (counted, logged), and the router's memory stays small.
  flood      while one publisher's 450 000 blocks fill the index, others send BlockStored +
             AllBlocksCleared messages as fast as they can (one block each, then 2 000 blocks each):
             /health and the admin API answer within a second all along, and the floods are read in
             shares (budget yields counted).
"""
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check, request, request_json  # noqa: E402
from test_router import metric_value, metrics, sim, stats  # noqa: E402
import test_router  # noqa: E402

PREFIX = list(range(1000, 1512))  # 512 ids: 32 blocks of 16
GPT2 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "tokenizer", "gpt2.tokenizer.json")


def prefill(kv_port=None, http_port=None, bport=None, tokenizer=None, block=16, replay_buffer=None, lora_name=None):
    kv = "{kv}" if kv_port is None else str(kv_port)
    argv = ["pdsim", "--role", "prefill", "--port", "{port}" if http_port is None else str(http_port),
            "--bootstrap-port", "{bport}" if bport is None else str(bport), "--prefix-cache-tokens", "65536",
            "--cache-block-tokens", str(block), "--kv-events-endpoint", "tcp://127.0.0.1:%s" % kv]
    if tokenizer:
        argv += ["--tokenizer", tokenizer]
    if lora_name:  # every block it stores is this LoRA adapter's
        argv += ["--kv-events-lora-name", lora_name]
    if replay_buffer is not None:  # vLLM's replay socket, keeping replay_buffer batches
        argv += ["--kv-events-replay-endpoint", "tcp://127.0.0.1:{rp}", "--kv-events-replay-buffer",
                 str(replay_buffer)]
    return pdtest.start(argv, name="pdsim-prefill")


def router(ps, ds, policy, resync=1, health=None, extra=None, replay_port=None, kv_opts=""):
    lines = ([extra] if extra else []) + ["policy: { prefill: %s, decode: least_load }" % policy,
             "kv_events: { resync_messages: %d%s }" % (resync, kv_opts),
             # sglang's seed: a prompt no tree matches goes to the smallest tree (the comparison in
             # scenario_routing relies on it; the hash ring would pick either prefill).
             "cache_aware: { seed: smallest_tree }"] + ([health] if health else []) + ["workers:", "  prefill:"]
    lines += ["    - { url: http://127.0.0.1:%d, bootstrap_port: %d, kv_events: 'tcp://127.0.0.1:%d'%s }" %
              (p.port, p.ports["bport"], p.ports["kv"],
               ", kv_events_replay: 'tcp://127.0.0.1:%d'" % (replay_port or p.ports["rp"])
               if replay_port or "rp" in p.ports else "") for p in ps]
    lines += ["  decode:"] + ["    - { url: http://127.0.0.1:%d }" % d.port for d in ds]
    return test_router.router([], [], config="\n".join(lines))


def post(r, ids, compact, model=None):
    req = {"input_ids": ids, "sampling_params": {"max_new_tokens": 1}}
    if model:
        req["model"] = model
    body = json.dumps(req, separators=(",", ":") if compact else (", ", ": "))
    return request(r.port, "POST", "/generate", body, headers={"Content-Type": "application/json"})


def send(r, ids, compact):
    st, _, data = post(r, ids, compact)
    check(st == 200, "status %d: %r" % (st, data[:300]), r)


def url(p):
    return "http://127.0.0.1:%d" % p.port


def kv_metric(r, name, p, **labels):
    return metric_value(metrics(r), name, worker=url(p), **labels) or 0


def wait_metric(r, what, pred):
    return pdtest.poll_until(lambda: pred(metrics(r)), 10, what)


def connect_all(r, ps):
    """Sends distinct short prompts until every prefill's events reach the router: the SUB sockets
    connect asynchronously, and a message published before that is not seen."""
    k = [0]

    def probe():
        k[0] += 1
        send(r, [900000 + 100 * k[0] + i for i in range(20)], False)
        m = metrics(r)
        return all((metric_value(m, "pdr_kv_events_total", worker=url(p), result="applied") or 0) >= 1 and
                   metric_value(m, "pdr_kv_events_synced", worker=url(p)) == 1 for p in ps)
    pdtest.poll_until(probe, 10, "every prefill's KV events to reach the router")


def holder(ps, before):
    """The prefill whose request count grew since before (one request sent)."""
    grown = [p for p, b in zip(ps, before) if stats(p)["requests"] > b]
    assert len(grown) == 1, grown
    return grown[0]


def setup(policy, resync=1, replay_buffer=None, kv_opts="", replay_port=None):
    ps, ds = [prefill(replay_buffer=replay_buffer), prefill(replay_buffer=replay_buffer)], [sim("decode")]
    r = router(ps, ds, policy, resync, kv_opts=kv_opts, replay_port=replay_port)
    if policy == "precise_prefix":
        connect_all(r, ps)
    before = [stats(p)["requests"] for p in ps]
    send(r, PREFIX + list(range(5000, 5016)), False)  # the prefix, JSON with spaces
    x = holder(ps, before)
    y = ps[1] if x is ps[0] else ps[0]
    if policy == "precise_prefix":
        wait_metric(r, "the prefix's blocks indexed for X",
                    lambda m: (metric_value(m, "pdr_kv_events_blocks", worker=url(x)) or 0) >= len(PREFIX) // 16)
    return r, ps, x, y


def compact_round(r, ps, x, y, n=4):
    hits0 = stats(x)["prefix_cache"]["hit_tokens"]
    counts0 = [stats(p)["requests"] for p in (x, y)]
    for k in range(n):
        send(r, PREFIX + list(range(6000 + 100 * k, 6000 + 100 * k + 16)), True)
    counts = [stats(p)["requests"] - c for p, c in zip((x, y), counts0)]
    return counts, stats(x)["prefix_cache"]["hit_tokens"] - hits0


def scenario_routing():
    try:
        r, ps, x, y = setup("precise_prefix")
        counts, hits = compact_round(r, ps, x, y)
        check(counts == [4, 0], "precise_prefix: compact requests per prefill (X, Y) %r" % counts, r)
        check(hits >= 4 * len(PREFIX), "X's cache hits grew by %d tokens only" % hits, r)
        m = metrics(r)
        check((metric_value(m, "pdr_precise_prefix_decisions_total", source="index", decision="match") or 0) >= 4,
              "index matches not counted", r)
        check((metric_value(m, "pdr_kv_index_bytes") or 0) > 0 and
              metric_value(m, "pdr_kv_index_max_bytes") == 64 << 20, "index bytes", r)
        pdtest.stop_all()
        # The comparison: the prefix tree sees other bytes and sends the compact requests elsewhere.
        r, ps, x, y = setup("cache_aware")
        counts, _ = compact_round(r, ps, x, y)
        check(counts[0] < 4, "cache_aware kept the compact requests on X: %r" % counts, r)
    finally:
        pdtest.stop_all()


def scenario_gap():
    try:
        r, ps, x, y = setup("precise_prefix", resync=3)
        # X does not send its next message; the one after shows the gap.
        request(x.port, "POST", "/pdsim/fault", {"kv_events_drop_every": 1})
        send(r, PREFIX + list(range(7000, 7016)), True)
        check(stats(x)["kv_events"]["dropped"] == 1, "X dropped %r" % stats(x)["kv_events"], x)
        request(x.port, "POST", "/pdsim/fault", {"kv_events_drop_every": 0})
        send(r, PREFIX + list(range(7100, 7116)), True)
        wait_metric(r, "the gap to be counted",
                    lambda m: (metric_value(m, "pdr_kv_events_gaps_total", worker=url(x)) or 0) >= 1)
        m = metrics(r)
        check(metric_value(m, "pdr_kv_events_synced", worker=url(x)) == 0, "X still synced after a gap", r)
        check(metric_value(m, "pdr_kv_events_blocks", worker=url(x)) == 0, "X's blocks kept after a gap", r)
        # Unsynced: X's match comes from the tree (it saw these compact prompts).
        tree0 = metric_value(m, "pdr_precise_prefix_decisions_total", source="tree", decision="match") or 0
        counts, _ = compact_round(r, ps, x, y, n=1)
        check(counts == [1, 0], "fallback sent the request to %r" % counts, r)
        m = metrics(r)
        check((metric_value(m, "pdr_precise_prefix_decisions_total", source="tree", decision="match") or 0) ==
              tree0 + 1, "the fallback decision was not counted as a tree match", r)
        # ... and the cold candidate is a counted fall-back (the index's count, read once a second).
        wait_metric(r, "the cold candidate's fall-back",
                    lambda m: (metric_value(m, "pdr_fallbacks_total", reason="kv_index_cold") or 0) >= 1)
        # Two more consecutive messages (three in a row with the last one): in sync again.
        for k in range(2):
            send(r, PREFIX + list(range(7200 + 100 * k, 7216 + 100 * k)), True)
        wait_metric(r, "X to resync",
                    lambda m: metric_value(m, "pdr_kv_events_synced", worker=url(x)) == 1 and
                    (metric_value(m, "pdr_kv_events_resyncs_total", worker=url(x)) or 0) >= 1)
        # Without a replay endpoint the gap was no replay's: counted as such.
        check(kv_metric(r, "pdr_kv_events_replays_total", x, outcome="unavailable") >= 1,
              "the gap without a replay endpoint was not counted", r)
    finally:
        pdtest.stop_all()


def worker_kv(r, p):
    """The admin API's kv_events view of prefill p."""
    for w in request_json(r.ports["admin"], "GET", "/admin/v1/workers")["workers"]:
        if w["url"] == url(p):
            return w.get("kv_events")
    return None


def drop_one(r, x, base):
    """X does not send its next message; the one after it shows the gap. Returns the gap's number."""
    request(x.port, "POST", "/pdsim/fault", {"kv_events_drop_every": 1})
    send(r, PREFIX + list(range(base, base + 16)), True)
    check(stats(x)["kv_events"]["dropped"] == 1, "X dropped %r" % stats(x)["kv_events"], x)
    request(x.port, "POST", "/pdsim/fault", {"kv_events_drop_every": 0})
    gap = stats(x)["kv_events"]["next_seq"] - 1
    send(r, PREFIX + list(range(base + 100, base + 116)), True)
    return gap


def scenario_replay_repaired():
    """vLLM's replay socket repairs a gap: X stays in sync (resync_messages is far away), its blocks before
    the gap stay and the dropped message's block is indexed too; counted as repaired, never as a gap. The
    late join (the router subscribed after X's message 0) was repaired the same way."""
    try:
        r, ps, x, y = setup("precise_prefix", resync=1000, replay_buffer=1000)
        check(kv_metric(r, "pdr_kv_events_replays_total", x, outcome="repaired") >= 1,
              "the late join was not replayed", r)
        blocks0 = kv_metric(r, "pdr_kv_events_blocks", x)
        check(blocks0 >= len(PREFIX) // 16, "X holds %d blocks" % blocks0, r)
        repaired0 = kv_metric(r, "pdr_kv_events_replays_total", x, outcome="repaired")
        drop_one(r, x, 7000)
        wait_metric(r, "the gap to be replayed",
                    lambda m: (metric_value(m, "pdr_kv_events_replays_total", worker=url(x),
                                            outcome="repaired") or 0) > repaired0)
        m = metrics(r)
        check((metric_value(m, "pdr_kv_events_gaps_total", worker=url(x)) or 0) == 0, "a gap reached the index", r)
        check(metric_value(m, "pdr_kv_events_synced", worker=url(x)) == 1, "X unsynced after a repaired gap", r)
        # The prefix, the dropped message's block and the next one's.
        check(metric_value(m, "pdr_kv_events_blocks", worker=url(x)) == blocks0 + 2,
              "X's blocks %r, expected %d" % (metric_value(m, "pdr_kv_events_blocks", worker=url(x)), blocks0 + 2), r)
        check(stats(x)["kv_events"]["replayed"] >= 1, "pdsim answered no replay", x)
        check(worker_kv(r, x) == {"synced": True, "warm": False, "cold": False, "blocks": blocks0 + 2,
                                  "last_seq": stats(x)["kv_events"]["next_seq"] - 1, "replay": True,
                                  "replaying": False}, "admin view %r" % worker_kv(r, x), r)
        check(metric_value(m, "pdr_kv_events_cold_workers") == 0, "cold workers counted", r)
        # The index still routes: the compact prompts go to X by its events.
        idx0 = metric_value(m, "pdr_precise_prefix_decisions_total", source="index", decision="match") or 0
        counts, _ = compact_round(r, ps, x, y, n=2)
        check(counts == [2, 0], "after the repair the requests went to %r" % counts, r)
        check((metric_value(metrics(r), "pdr_precise_prefix_decisions_total", source="index",
                            decision="match") or 0) == idx0 + 2, "the decisions were not the index's", r)
    finally:
        pdtest.stop_all()


def scenario_replay_busy():
    """Messages keep coming while gaps are replayed (60 requests at once, one new block each, every 7th
    message of X lost): each gap is repaired amid live messages; batches the replay sent that the live
    socket brings again afterwards are neither applied twice nor taken for a restarted publisher. X ends in
    sync, holding every block, with no gap or restart counted."""
    try:
        r, ps, x, y = setup("precise_prefix", resync=1000, replay_buffer=1000)
        blocks0 = kv_metric(r, "pdr_kv_events_blocks", x)
        seq0 = stats(x)["kv_events"]["next_seq"] - 1
        pdtest.poll_until(lambda: (worker_kv(r, x) or {}).get("last_seq") == seq0, 10, "X's messages applied")
        repaired0 = kv_metric(r, "pdr_kv_events_replays_total", x, outcome="repaired")
        # Every 7th message of X is lost while 60 requests run at once: gaps replayed amid live messages.
        request(x.port, "POST", "/pdsim/fault", {"kv_events_drop_every": 7})
        threads = [threading.Thread(target=post, args=(r, PREFIX + list(range(30000 + 100 * k, 30016 + 100 * k)),
                                                       True)) for k in range(60)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        request(x.port, "POST", "/pdsim/fault", {"kv_events_drop_every": 0})
        check(stats(x)["kv_events"]["dropped"] >= 1, "X dropped nothing: %r" % stats(x)["kv_events"], x)
        # One more message of X, sent: the last gap shows (a request may go to Y, so until X has published).
        n0, k = stats(x)["kv_events"]["next_seq"], [0]

        def one_more():
            k[0] += 1
            send(r, PREFIX + list(range(39000 + 100 * k[0], 39016 + 100 * k[0])), True)
            return stats(x)["kv_events"]["next_seq"] > n0
        pdtest.poll_until(one_more, 10, "a message of X after the burst")
        last = stats(x)["kv_events"]["next_seq"] - 1
        pdtest.poll_until(lambda: (worker_kv(r, x) or {}).get("last_seq") == last, 10, "X's last message applied")
        m = metrics(r)
        check(kv_metric(r, "pdr_kv_events_replays_total", x, outcome="repaired") > repaired0, "no repair counted", r)
        for name in ("pdr_kv_events_restarts_total", "pdr_kv_events_gaps_total"):
            check((metric_value(m, name, worker=url(x)) or 0) == 0, "%s %r" % (name, metric_value(m, name, worker=url(x))), r)
        check(metric_value(m, "pdr_kv_events_synced", worker=url(x)) == 1, "X unsynced", r)
        # Each message of X since then stored one new block (the dropped one included).
        check(metric_value(m, "pdr_kv_events_blocks", worker=url(x)) == blocks0 + last - seq0,
              "X holds %r blocks, expected %d" % (metric_value(m, "pdr_kv_events_blocks", worker=url(x)),
                                                  blocks0 + last - seq0), r)
    finally:
        pdtest.stop_all()


def scenario_replay_too_old():
    """A replay buffer of one batch cannot cover the gap: today's resync (blocks dropped, X cold until
    resync_messages messages), counted as too_old and logged."""
    try:
        r, ps, x, y = setup("precise_prefix", resync=3, replay_buffer=1)
        old0 = kv_metric(r, "pdr_kv_events_replays_total", x, outcome="too_old")
        drop_one(r, x, 7000)
        wait_metric(r, "the replay to be counted too old",
                    lambda m: (metric_value(m, "pdr_kv_events_replays_total", worker=url(x),
                                            outcome="too_old") or 0) > old0)
        m = metrics(r)
        check((metric_value(m, "pdr_kv_events_gaps_total", worker=url(x)) or 0) >= 1, "no gap counted", r)
        check(metric_value(m, "pdr_kv_events_synced", worker=url(x)) == 0, "X synced after an unrepaired gap", r)
        check(metric_value(m, "pdr_kv_events_cold_workers") == 1, "X not counted cold", r)
        kv = worker_kv(r, x)
        check(kv is not None and kv["cold"] and not kv["synced"], "admin view %r" % kv, r)
        check("too_old" in open(r.log_path).read(), "no log line for the unrepaired gap", r)
        for k in range(3):
            send(r, PREFIX + list(range(7300 + 100 * k, 7316 + 100 * k)), True)
        wait_metric(r, "X to resync", lambda m: metric_value(m, "pdr_kv_events_synced", worker=url(x)) == 1)
    finally:
        pdtest.stop_all()


def scenario_incarnation():
    """X's shim reports a new instance (the process restarted behind the same ports): the index forgets X's
    blocks at once, and says so, before any event of the new publisher."""
    import test_shim_events as se
    try:
        master = se.key_file()
        ports = {"port": pdtest.free_port(), "bport": pdtest.free_port(), "kv": pdtest.free_port()}
        aport = pdtest.free_port()
        wkey = se.derived_key_file(master, "http://127.0.0.1:%d" % ports["port"])
        argv = ["pdsim", "--role", "prefill", "--port", str(ports["port"]), "--bootstrap-port", str(ports["bport"]),
                "--prefix-cache-tokens", "65536", "--cache-block-tokens", "16", "--kv-events-endpoint",
                "tcp://127.0.0.1:%d" % ports["kv"], "--events-url", "http://127.0.0.1:%d" % aport,
                "--events-key-file", wkey]
        x = pdtest.start(argv, name="pdsim-prefill", ports=dict(ports))
        x.ports.update(ports)
        r = router([x], [sim("decode")], "precise_prefix",
                   extra="admin: { host: 127.0.0.1, port: %d }\nshim_events: { key_file: %s }" % (aport, master))
        r.ports["admin"] = aport
        connect_all(r, [x])
        pdtest.poll_until(lambda: (worker_kv(r, x) or {}).get("blocks", 0) >= 1, 10, "X's blocks indexed")
        x.stop()
        pdtest.start(argv, name="pdsim-prefill-2", ports=dict(ports))
        pdtest.poll_until(lambda: "a new instance of the worker; its blocks were dropped" in open(r.log_path).read(),
                          15, "the new incarnation to drop X's blocks")
    finally:
        pdtest.stop_all()


def scenario_lora():
    """X's blocks are the LoRA adapter "sql"'s (lora_name), Y's the base model's. The prefix goes to one of
    them; the same ids, compact, then match its blocks in the index only for a request whose model names
    its namespace: "sql" for X, any other model for Y. The other model's request is no index match."""
    try:
        x, y = prefill(lora_name="sql"), prefill()
        r = router([x, y], [sim("decode")], "precise_prefix")
        connect_all(r, [x, y])  # each published a block: the index knows the adapter "sql"
        before = [stats(p)["requests"] for p in (x, y)]
        st, _, data = post(r, PREFIX + list(range(5000, 5016)), False, model="sql")
        check(st == 200, "status %d: %r" % (st, data[:300]), r)
        h = holder([x, y], before)
        wait_metric(r, "the prefix's blocks indexed",
                    lambda m: (metric_value(m, "pdr_kv_events_blocks", worker=url(h)) or 0) >= len(PREFIX) // 16)
        for k, (model, ours) in enumerate((("sql", h is x), ("base-model", h is y))):
            m0 = metric_value(metrics(r), "pdr_precise_prefix_decisions_total", source="index", decision="match") or 0
            n0 = stats(h)["requests"]
            st, _, data = post(r, PREFIX + list(range(6000 + 100 * k, 6016 + 100 * k)), True, model=model)
            check(st == 200, "status %d: %r" % (st, data[:300]), r)
            m1 = metric_value(metrics(r), "pdr_precise_prefix_decisions_total", source="index", decision="match") or 0
            check(m1 - m0 == (1 if ours else 0), "model %s (the prefix on %s): %d index matches" %
                  (model, "X" if h is x else "Y", m1 - m0), r)
            if ours:
                check(stats(h)["requests"] == n0 + 1, "model %s did not go to the prefix's worker" % model, r)
    finally:
        pdtest.stop_all()


def scenario_replay_timeout():
    """A replay endpoint that never answers: the gap stands after kv_events.replay_timeout_ms, counted."""
    try:
        silent = pdtest.free_port()
        r, ps, x, y = setup("precise_prefix", resync=3, kv_opts=", replay_timeout_ms: 200", replay_port=silent)
        t0 = kv_metric(r, "pdr_kv_events_replays_total", x, outcome="timeout")
        drop_one(r, x, 7000)
        wait_metric(r, "the replay to time out",
                    lambda m: (metric_value(m, "pdr_kv_events_replays_total", worker=url(x),
                                            outcome="timeout") or 0) > t0)
        check((kv_metric(r, "pdr_kv_events_gaps_total", x)) >= 1, "no gap counted", r)
    finally:
        pdtest.stop_all()


def _up(port):
    try:
        return request(port, "GET", "/health", timeout=1.0)[0] == 200
    except OSError:
        return False


def scenario_restart():
    try:
        # One prefill: every request goes to it, whatever the index says of it.
        x, ds = prefill(), [sim("decode")]
        r = router([x], ds, "precise_prefix", health="health: { interval_ms: 200, rise: 1 }")
        connect_all(r, [x])
        for k in range(30):  # many messages: the publisher's numbers are well past the new one's first
            send(r, PREFIX + list(range(6000 + 100 * k, 6016 + 100 * k)), True)
        wait_metric(r, "X's messages", lambda m: (metric_value(m, "pdr_kv_events_total", worker=url(x),
                                                               result="applied") or 0) >= 30)
        ports = (x.ports["kv"], x.port, x.ports["bport"])
        x.stop()
        prefill(*ports)
        pdtest.poll_until(lambda: _up(ports[1]), 10, "the new prefill to answer /health")
        # The new process numbers its messages from 0 again, below the old publisher's last one. Each
        # request has new blocks (so a message), since the router's socket reconnects in its own time;
        # requests sent while the router still holds connections to the old process may fail.
        k = [0]

        def new_message():
            k[0] += 1
            post(r, PREFIX + list(range(20000 + 100 * k[0], 20016 + 100 * k[0])), True)
            return kv_metric(r, "pdr_kv_events_restarts_total", x) >= 1
        pdtest.poll_until(new_message, 15, "the publisher restart to be counted")
        check(request(r.port, "GET", "/health")[0] == 200, "router not healthy", r)
    finally:
        pdtest.stop_all()


def scenario_malformed():
    try:
        r, ps, x, y = setup("precise_prefix")
        request(y.port, "POST", "/pdsim/fault", {"kv_events_malformed": 1})
        # New prompts go to the prefill with the smaller tree, Y, until it has published one.
        k = [0]

        def new_prompt():
            k[0] += 1
            send(r, [700000 + 1000 * k[0] + i for i in range(40)], False)
            return stats(y)["kv_events"]["malformed"] >= 1
        pdtest.poll_until(new_prompt, 10, "Y to send a malformed message")
        wait_metric(r, "the malformed message to be counted",
                    lambda m: (metric_value(m, "pdr_kv_events_total", worker=url(y), result="malformed") or 0) >= 1)
        check(request(r.port, "GET", "/health")[0] == 200, "router not healthy", r)
        send(r, PREFIX + list(range(9000, 9016)), True)  # still serving and routing
        check("malformed message" in open(r.log_path).read(), "no log line for the malformed message", r)
    finally:
        pdtest.stop_all()


def scenario_block_sizes():
    """Five prefills with five KV block sizes: a lookup hashes the prompt for four sizes, so one candidate's
    match comes from the prefix tree. That fall-back is counted (pdr_fallbacks_total{reason=
    "kv_index_unhashed"}) and logged once, not silent."""
    try:
        ps = [prefill(block=b) for b in (1, 2, 4, 8, 16)]
        r = router(ps, [sim("decode")], "precise_prefix")
        connect_all(r, ps)  # its requests are lookups over the five, once each size is known
        send(r, PREFIX, False)
        wait_metric(r, "the fall-back to be counted",
                    lambda m: (metric_value(m, "pdr_fallbacks_total", reason="kv_index_unhashed") or 0) >= 1)
        with open(r.log_path, errors="replace") as f:
            lines = [l for l in f if "fallback kv_index_unhashed:" in l]
        check(len(lines) == 1, "log lines: %r" % lines, r)
    finally:
        pdtest.stop_all()


def scenario_text():
    try:
        ps = [prefill(tokenizer=GPT2), prefill(tokenizer=GPT2)]
        r = router(ps, [sim("decode", "--tokenizer", GPT2)], "precise_prefix", extra="tokenizer: %s" % GPT2)
        connect_all(r, ps)
        system = " ".join("sentence%d about the weather here" % i for i in range(60))

        def post_text(tail, escaped):
            raw = json.dumps(system + tail)
            if escaped:  # the same text, other bytes: every "e" as a \u0065 escape
                raw = raw.replace("e", "\\u0065")
            body = '{"text": %s, "sampling_params": {"max_new_tokens": 1}}' % raw
            st, _, data = request(r.port, "POST", "/generate", body, headers={"Content-Type": "application/json"})
            check(st == 200, "status %d: %r" % (st, data[:300]), r)
        before = [stats(p)["requests"] for p in ps]
        post_text(" first question", False)
        x = holder(ps, before)
        y = ps[1] if x is ps[0] else ps[0]
        wait_metric(r, "the text's blocks indexed for X",
                    lambda m: (metric_value(m, "pdr_kv_events_blocks", worker=url(x)) or 0) >= 16)
        counts0 = [stats(p)["requests"] for p in (x, y)]
        for k in range(3):
            post_text(" question number %d" % k, True)
        counts = [stats(p)["requests"] - c for p, c in zip((x, y), counts0)]
        check(counts == [3, 0], "escaped text prompts per prefill (X, Y) %r" % counts, r)
        m = metrics(r)
        check((metric_value(m, "pdr_precise_prefix_decisions_total", source="index", decision="match") or 0) >= 3,
              "index matches for text not counted", r)
    finally:
        pdtest.stop_all()


class Flood:
    """A kvflood publisher (tests/integration/kvflood.c) bound to a free port: it waits for a subscriber,
    then for go(), sends, and reports what it sent; it stays bound until stop()."""

    def __init__(self, *mode):
        self.port = pdtest.free_port()
        self.endpoint = "tcp://127.0.0.1:%d" % self.port
        self.proc = subprocess.Popen([pdtest.binary("kvflood"), self.endpoint] + [str(m) for m in mode],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def go(self):
        self.proc.stdin.write(b"go\n")
        self.proc.stdin.flush()

    def result(self, timeout=60):
        """The JSON line kvflood prints when it has sent everything."""
        box = {}
        t = threading.Thread(target=lambda: box.update(line=self.proc.stdout.readline()), daemon=True)
        t.start()
        t.join(timeout)
        assert box.get("line"), "kvflood did not finish (rc %r)" % self.proc.poll()
        return json.loads(box["line"])

    def stop(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(10)


def flood_router(floods, extra=""):
    """One prefill per publisher (the publisher is its kv_events endpoint), one decode, precise_prefix, a
    single loop (so that /health and the admin API share loop 0 with the KV events)."""
    ps = [sim("prefill") for _ in floods]
    lines = ["threads: 1", "policy: { prefill: precise_prefix, decode: least_load }", extra, "workers:", "  prefill:"]
    lines += ["    - { url: http://127.0.0.1:%d, bootstrap_port: %d, kv_events: '%s' }" %
              (p.port, p.ports["bport"], f.endpoint) for p, f in zip(ps, floods)]
    lines += ["  decode:", "    - { url: http://127.0.0.1:%d }" % sim("decode").port]
    return test_router.router([], [], config="\n".join(lines)), ps


def scenario_big_messages():
    f = Flood("big", 5 * 1000 * 1000, 40)
    try:
        r, ps = flood_router([f])
        base = pdtest.peak_rss_mib(r.proc.pid)
        f.go()
        sent = f.result()
        check(sent["messages"] >= 1, "kvflood sent nothing: %r" % sent, r)
        wait_metric(r, "the dropped connection to be counted",
                    lambda m: (metric_value(m, "pdr_kv_events_disconnects_total", worker=url(ps[0])) or 0) >= 1)
        m = metrics(r)
        check((metric_value(m, "pdr_kv_events_total", worker=url(ps[0]), result="applied") or 0) == 0 and
              (metric_value(m, "pdr_kv_events_total", worker=url(ps[0]), result="malformed") or 0) == 0,
              "a 5 MB message was read", r)
        grew = pdtest.peak_rss_mib(r.proc.pid) - base
        check(grew < 64, "router peak RSS grew by %.0f MiB reading 5 MB messages" % grew, r)
        check("kv_events.max_message_bytes" in open(r.log_path).read(), "no log line for the dropped connection", r)
        check(request(r.port, "GET", "/health")[0] == 200, "router not healthy", r)
    finally:
        f.stop()
        pdtest.stop_all()


def _timed(port, path):
    """(status, seconds) of one GET; a request not answered within 5 s is (None, 5.0)."""
    t0 = time.monotonic()
    try:
        st = request(port, "GET", path, timeout=5)[0]
    except OSError:
        return None, 5.0
    return st, time.monotonic() - t0


def probe_during(r, flood):
    """Runs the flood while /health and an admin route are asked in turn; returns (what kvflood sent,
    each answer's seconds, the refused or unanswered ones)."""
    lat, bad, done = [], [], threading.Event()

    def probe():
        while not done.is_set():
            for port, path in ((r.port, "/health"), (r.ports["admin"], "/admin/v1/workers")):
                st, took = _timed(port, path)
                lat.append(took)
                if st != 200:
                    bad.append((path, st))
                    return
    t = threading.Thread(target=probe)
    t.start()
    try:
        flood.go()
        sent = flood.result()
    finally:
        done.set()
        t.join()
    return sent, lat, bad


def scenario_flood():
    # Two floods by the second publisher, each 3 s: messages of one new block and an AllBlocksCleared,
    # which made each message walk the whole index while the first publisher's 450 000 blocks filled
    # it; then messages of 2 000 new blocks and an AllBlocksCleared, each costing the router real work,
    # more than it can keep up with: only the budget per turn keeps the loop answering.
    fill, clear, churn = Flood("store", 450000), Flood("clear", 3), Flood("clear", 3, 2000)
    try:
        r, ps = flood_router([fill, clear, churn])
        fill.go()
        check(fill.result()["messages"] == 23, "kvflood store", r)
        wait_metric(r, "the index to hold the first publisher's blocks",
                    lambda m: (metric_value(m, "pdr_kv_events_blocks", worker=url(ps[0])) or 0) >= 400000)
        for f, p in ((clear, ps[1]), (churn, ps[2])):
            sent, lat, bad = probe_during(r, f)
            what = "kvflood clear %s" % " ".join(f.proc.args[3:])
            check(sent["messages"] > 1000, "%s sent %r" % (what, sent), r)
            check(not bad and lat and max(lat) < 1.0, "during %s: %d probes, slowest %.2f s, bad %r" %
                  (what, len(lat), max(lat or [0]), bad), r)
            m = metrics(r)
            check((metric_value(m, "pdr_kv_events_total", worker=url(p), result="applied") or 0) > 10,
                  "%s: the flood was not read" % what, r)
        check((metric_value(metrics(r), "pdr_kv_events_budget_yields_total", worker=url(ps[2])) or 0) > 0,
              "no budget yield counted", r)
    finally:
        for f in (fill, clear, churn):
            f.stop()
        pdtest.stop_all()

if __name__ == "__main__":
    pdtest.run_scenario(globals())
