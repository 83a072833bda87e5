#!/usr/bin/env python3
"""A restarted router's prefix-cache hit ratio, with and without its index snapshot, on multi-turn chat.

    PDR_BUILD=build python3 bench/restart_hits.py [USERS]

4 pdsim prefills (prefix cache 262144 tokens each, KV events in vLLM's format with a replay socket) and 2
decodes, behind one router with prefill policy precise_prefix (cache_aware.seed smallest_tree: a prompt no
cache holds goes to the least-loaded prefill, as the sglang router seeds it). Every request is OpenAI chat
(/v1/chat/completions), rendered by the router and the prefills through the same chat template and
tokenizer (a model directory made like bench/replicas.sh's: the llama3 fixture tokenizer, a Llama-3-like
template). USERS (default 96) users each hold a 4-turn conversation: one of 8 system prompts shared across
users (about 300 words), a first user message of their own (about 100 words), later turns of about 60
words; each turn appends the decode's answer and the next user message. Concurrency 12.

Phase 1 sends turns 1 and 2 of every conversation. Then, by variant:
  none      the same router goes on (the reference);
  cold      the router is stopped (SIGTERM) and a new one started with an empty snapshot path;
  snapshot  the router is stopped (SIGTERM: it writes kv_events.snapshot_path) and a new one started
            that loads that file before it takes traffic.
Phase 2 sends turns 3 and 4 from the moment the (new) router answers /readiness. The hit ratio is the
prefills' own count (hit tokens over prompt tokens, pdsim's /pdsim/stats), sampled every 50 ms: it is
printed for the first second of phase 2 and for the whole of it. The ceiling is the same run with one
prefill whose cache holds everything (no restart).

Prints a markdown table; exits non-zero when any request fails or answers non-2xx.
"""

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import pdtest  # noqa: E402
from test_router import metric_value, metrics, stats  # noqa: E402
import test_router  # noqa: E402

USERS = int(sys.argv[1]) if len(sys.argv) > 1 else 96
SYSTEMS = 8
CONCURRENCY = 12
SEED = 1
TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
            "{{ m['content'] | trim }}<|eot_id|>{% endfor %}{% if add_generation_prompt %}"
            "<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")


def model_dir():
    d = tempfile.mkdtemp(prefix="pdr-restart-model-")
    shutil.copy(os.path.join(HERE, "..", "tests", "fixtures", "tokenizer", "llama3.tokenizer.json"),
                os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "chat_template": TEMPLATE}, f)
    return d


def words(rng, n):
    vocab = ["alpha", "river", "stone", "market", "signal", "garden", "winter", "copper", "forest", "engine",
             "harbor", "silver", "planet", "window", "letter", "bridge", "orange", "castle", "rocket", "valley",
             "number", "shadow", "ticket", "mirror", "candle", "pocket", "island", "meadow", "circle", "thunder"]
    return " ".join(rng.choice(vocab) + str(rng.randrange(100)) for _ in range(n))


def conversations():
    rng = random.Random(SEED)
    systems = ["You are assistant %d. %s" % (i, words(rng, 300)) for i in range(SYSTEMS)]
    convs = []
    for u in range(USERS):
        turns = [words(rng, 100)] + [words(rng, 60) for _ in range(3)]
        convs.append({"messages": [{"role": "system", "content": systems[u % SYSTEMS]}], "turns": turns})
    return convs


def prefill(model, cache, replay):
    argv = ["pdsim", "--role", "prefill", "--port", "{port}", "--bootstrap-port", "{bport}",
            "--prefix-cache-tokens", str(cache), "--cache-block-tokens", "16", "--prefill-us-per-token", "20",
            "--tokenizer", model, "--kv-events-endpoint", "tcp://127.0.0.1:{kv}"]
    if replay:
        argv += ["--kv-events-replay-endpoint", "tcp://127.0.0.1:{rp}", "--kv-events-replay-buffer", "10000"]
    return pdtest.start(argv, name="pdsim-prefill")


def router(ps, ds, model, snap):
    lines = ["policy: { prefill: precise_prefix, decode: least_load }", "tokenizer: %s" % model,
             "kv_events: { resync_messages: 1, snapshot_path: %s, snapshot_interval_ms: 600000 }" % snap,
             "cache_aware: { seed: smallest_tree }", "log: { access_log: \"off\" }", "workers:", "  prefill:"]
    lines += ["    - { url: http://127.0.0.1:%d, bootstrap_port: %d, kv_events: 'tcp://127.0.0.1:%d'%s }"
              % (p.port, p.ports["bport"], p.ports["kv"],
                 ", kv_events_replay: 'tcp://127.0.0.1:%d'" % p.ports["rp"] if "rp" in p.ports else "") for p in ps]
    lines += ["  decode:"] + ["    - { url: http://127.0.0.1:%d }" % d.port for d in ds]
    return test_router.router([], [], config="\n".join(lines))


def synced(r, ps):
    """Every prefill's event stream reaches r: distinct short prompts until each has applied one."""
    k = [0]

    def probe():
        k[0] += 1
        body = {"input_ids": [900000 + 100 * k[0] + i for i in range(20)], "sampling_params": {"max_new_tokens": 1}}
        st, _, data = pdtest.request(r.port, "POST", "/generate", body)
        if st != 200:
            sys.exit("probe: status %d: %r" % (st, data[:200]))
        m = metrics(r)
        return all((metric_value(m, "pdr_kv_events_total", worker="http://127.0.0.1:%d" % p.port,
                                 result="applied") or 0) >= 1 for p in ps)
    pdtest.poll_until(probe, 20, "every prefill's KV events to reach the router")


def turn(r, conv, t):
    """Sends turn t (0-based) of conv; appends the user message and the answer."""
    conv["messages"].append({"role": "user", "content": conv["turns"][t]})
    body = {"model": "pdsim", "messages": conv["messages"], "max_tokens": 16, "temperature": 0}
    st, _, data = pdtest.request(r.port, "POST", "/v1/chat/completions", body, timeout=30)
    if st != 200:
        raise RuntimeError("turn %d: status %d: %r" % (t + 1, st, data[:300]))
    answer = json.loads(data)["choices"][0]["message"]["content"]
    conv["messages"].append({"role": "assistant", "content": answer})


def phase(r, convs, turns):
    """Every conversation's turns `turns`, CONCURRENCY at a time (a conversation's turns in order)."""
    work = list(convs)
    lock = threading.Lock()
    errors = []

    def worker():
        while True:
            with lock:
                if not work or errors:
                    return
                conv = work.pop(0)
            try:
                for t in turns:
                    turn(r, conv, t)
            except Exception as e:  # noqa: BLE001 (reported below, the run fails)
                with lock:
                    errors.append(str(e))
    threads = [threading.Thread(target=worker) for _ in range(CONCURRENCY)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        sys.exit("phase failed: %s" % errors[0])


def totals(ps):
    hit = miss = 0
    for p in ps:
        s = stats(p)["prefix_cache"]
        hit += s["hit_tokens"]
        miss += s["miss_tokens"]
    return hit, miss


def sampled(ps, fn):
    """Runs fn while sampling the prefills' totals every 50 ms: [(seconds since the start, hit, miss)]."""
    samples = [(0.0,) + totals(ps)]
    t0 = time.monotonic()
    done = threading.Event()

    def sample():
        while not done.wait(0.05):
            samples.append((time.monotonic() - t0,) + totals(ps))
    th = threading.Thread(target=sample)
    th.start()
    try:
        fn()
    finally:
        done.set()
        th.join()
    samples.append((time.monotonic() - t0,) + totals(ps))
    return samples


def ratio(a, b):
    hit, miss = b[1] - a[1], b[2] - a[2]
    return hit / max(1, hit + miss), hit + miss


def run(variant, prefills=4, cache=262144, replay=False):
    try:
        model = model_dir()
        snap = os.path.join(tempfile.mkdtemp(prefix="pdr-restart-snap-"), "index.snap")
        ps = [prefill(model, cache, replay) for _ in range(prefills)]
        ds = [pdtest.start(["pdsim", "--role", "decode", "--port", "{port}", "--tokenizer", model],
                           name="pdsim-decode") for _ in range(2)]
        r = router(ps, ds, model, snap)
        synced(r, ps)
        convs = conversations()
        before = (0.0,) + totals(ps)
        phase(r, convs, (0, 1))
        p1 = ratio(before, (0.0,) + totals(ps))
        load_ms, ready_ms = "", ""
        if variant != "none":
            r.stop()
            if variant == "cold":
                snap = os.path.join(tempfile.mkdtemp(prefix="pdr-restart-snap-"), "index.snap")
            t = time.monotonic()
            r = router(ps, ds, model, snap)  # returns once /readiness answers 200
            ready_ms = "%.0f" % ((time.monotonic() - t) * 1000)
            with open(r.log_path, errors="replace") as f:
                log = f.read()
            if variant == "snapshot":
                i = log.find("kv index snapshot loaded from")
                if i < 0:
                    sys.exit("the snapshot was not loaded:\n%s" % log[-2000:])
                load_ms = log[i:].split("loaded in ")[1].split(" ms")[0]
        samples = sampled(ps, lambda: phase(r, convs, (2, 3)))
        first = [s for s in samples if s[0] <= 1.0][-1]
        m = metrics(r)
        matches = metric_value(m, "pdr_precise_prefix_decisions_total", source="index", decision="match") or 0
        replays = sum(float(line.split()[-1]) for line in m.splitlines()
                      if line.startswith("pdr_kv_events_replays_total{") and 'outcome="repaired"' in line)
        return {"phase1": p1, "first": ratio(samples[0], first), "first_t": first[0],
                "phase2": ratio(samples[0], samples[-1]), "phase2_s": samples[-1][0], "ready_ms": ready_ms,
                "load_ms": load_ms, "matches": int(matches),
                "replays": int(replays)}
    finally:
        pdtest.stop_all()


def main():
    ceiling = run("none", prefills=1, cache=16777216)
    rows = [("ceiling: one prefill, unbounded cache, no restart", ceiling)]
    for v, replay, label in (("none", False, "no restart"), ("cold", False, "restarted, no snapshot (cold)"),
                             ("snapshot", False, "restarted, snapshot loaded"),
                             ("cold", True, "restarted, no snapshot, prefills' replay sockets")):
        rows.append((label, run(v, replay=replay)))
    c1, c2 = ceiling["first"][0], ceiling["phase2"][0]
    print("| precise_prefix, 4 prefills | turns 1-2 hit | ready after start ms | snapshot load ms | "
          "turns 3-4, first second: hit | of the ceiling | turns 3-4, all: hit | of the ceiling | seconds | "
          "index matches | replays |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, x in rows:
        print("| %s | %.1f%% | %s | %s | %.1f%% (at %.2f s) | %.1f%% | %.1f%% | %.1f%% | %.2f | %d | %d |" % (
            label, 100 * x["phase1"][0], x["ready_ms"] or "-", x["load_ms"] or "-", 100 * x["first"][0],
            x["first_t"], 100 * x["first"][0] / c1, 100 * x["phase2"][0], 100 * x["phase2"][0] / c2,
            x["phase2_s"], x["matches"], x["replays"]), flush=True)


if __name__ == "__main__":
    main()
