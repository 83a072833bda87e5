#!/usr/bin/env python3
"""A restarted router with and without its precise prefix index snapshot: the cache hit ratio of the chat
workload right after the restart.

    PDR_BUILD=build python3 bench/snapshot_restart.py [REQUESTS]

Four pdsim prefills (prefix cache, KV events) and two decodes; one router with precise_prefix, its
`tokenizer` a model directory with a chat template (as bench/replicas.sh API=chat makes it), and
kv_events.snapshot_path. Phase 1: pdbench's multi-turn chat workload (REQUESTS requests, seed 1) fills the
prefills' caches and the router's index. The router stops (SIGTERM: it writes its snapshot) and a new one
starts on the same configuration: with the snapshot it loads the index before it takes traffic; without it
(the file removed) it starts cold. Phase 2: the same workload again at once (its conversations are the
ones the prefills hold). The hit ratio is the prefills' own count over phase 2 only; the ceiling is phase
2's hit ratio with an index that never forgot (the first router kept running). Each row starts from fresh
workers. Prints a markdown table; exits non-zero on any failed request.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import pdtest  # noqa: E402
from test_router import stats  # noqa: E402

REQUESTS = int(sys.argv[1]) if len(sys.argv) > 1 else 300
TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
            "{{ m['content'] | trim }}<|eot_id|>{% endfor %}{% if add_generation_prompt %}"
            "<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")


def model_dir(d):
    m = os.path.join(d, "model")
    os.makedirs(m)
    shutil.copy(os.path.join(HERE, "..", "tests", "fixtures", "tokenizer", "llama3.tokenizer.json"),
                os.path.join(m, "tokenizer.json"))
    with open(os.path.join(m, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "chat_template": TEMPLATE}, f)
    return m


def start_router(conf, port, admin):
    cfg = conf.replace("{port}", str(port)).replace("{admin}", str(admin))
    fd, path = tempfile.mkstemp(prefix="pdr-snap-", suffix=".yaml")
    with os.fdopen(fd, "w") as f:
        f.write(cfg)
    fd, log = tempfile.mkstemp(prefix="pdr-snap-", suffix=".log")
    with os.fdopen(fd, "w") as lf:
        proc = subprocess.Popen([pdtest.binary("pdrouter"), "--config", path], stdout=lf, stderr=subprocess.STDOUT)
    t0 = time.monotonic()
    pdtest.poll_until(lambda: pdtest.request(port, "GET", "/readiness", timeout=1)[0] == 200, 20, "router ready")
    return proc, time.monotonic() - t0, log


def load(port, seed=1):
    fd, out = tempfile.mkstemp(prefix="pdr-snap-", suffix=".json")
    os.close(fd)
    argv = [pdtest.binary("pdbench"), "--url", "http://127.0.0.1:%d" % port, "--api", "chat", "--profiles", "256/16",
            "--concurrency", "12", "--requests", str(REQUESTS), "--workload", "multi-turn", "--turns", "4",
            "--seed", str(seed), "--warmup", "0", "--quiet", "--no-health", "--json", out]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    run = json.load(open(out))["runs"][0]
    os.unlink(out)
    if res.returncode != 0 or run["failed"] != 0:
        sys.exit("pdbench: %s %r" % (res.stderr.strip(), run.get("failures")))


def hits(ps):
    h = m = 0
    for p in ps:
        s = stats(p)["prefix_cache"]
        h += s["hit_tokens"]
        m += s["miss_tokens"]
    return h, m


def row(mode):
    d = tempfile.mkdtemp(prefix="pdr-snap-")
    try:
        model = model_dir(d)
        snap = os.path.join(d, "index.snapshot")
        ps = [pdtest.start(["pdsim", "--role", "prefill", "--port", "{port}", "--bootstrap-port", "{bport}",
                            "--prefix-cache-tokens", "6144", "--prefill-us-per-token", "50", "--tokenizer", model,
                            "--kv-events-endpoint", "tcp://127.0.0.1:{kvport}"], name="prefill%d" % i)
              for i in range(4)]
        ds = [pdtest.start(["pdsim", "--role", "decode", "--port", "{port}", "--tokenizer", model],
                           name="decode%d" % i) for i in range(2)]
        workers = "workers:\n  prefill:\n" + "".join(
            "    - { url: http://127.0.0.1:%d, bootstrap_port: %d, kv_events: tcp://127.0.0.1:%d }\n"
            % (p.port, p.ports["bport"], p.ports["kvport"]) for p in ps) + "  decode:\n" + "".join(
            "    - { url: http://127.0.0.1:%d }\n" % x.port for x in ds)
        conf = ("listen: { host: 127.0.0.1, port: {port} }\nadmin: { host: 127.0.0.1, port: {admin} }\n"
                "log: { access_log: \"off\" }\nlifecycle: { drain_grace_ms: 0 }\n"
                "policy: { prefill: precise_prefix, decode: least_load }\ntokenizer: %s\n"
                "kv_events: { snapshot_path: %s }\n%s" % (model, snap, workers))
        port, admin = pdtest.free_port(), pdtest.free_port()
        proc, _, log = start_router(conf, port, admin)
        load(port)
        h0, m0 = hits(ps)
        ready_s = 0.0
        if mode != "kept running":
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
            if mode == "cold start" and os.path.exists(snap):
                os.unlink(snap)
            elif mode == "snapshot" and not os.path.exists(snap):
                sys.exit("no snapshot was written at %s" % snap)
            proc, ready_s, log = start_router(conf, port, admin)
        load(port)
        h1, m1 = hits(ps)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        with open(log, errors="replace") as f:
            loaded = [line.strip() for line in f if "snapshot" in line and "load" in line]
        return (h1 - h0) / max(1, (h1 - h0) + (m1 - m0)), ready_s, loaded[:1]
    finally:
        pdtest.stop_all()
        shutil.rmtree(d)


rows = [(m,) + row(m) for m in ("kept running", "snapshot", "cold start")]
ceiling = rows[0][1]
print("| the router after phase 1 | phase 2 cache hit | of the ceiling | start to ready s |")
print("|---|---:|---:|---:|")
for mode, hit, ready, loaded in rows:
    print("| %s | %.1f%% | %.1f%% | %s |" % (mode, 100 * hit, 100 * hit / ceiling if ceiling else 0,
                                          "%.2f" % ready if mode != "kept running" else "-"))
for mode, hit, ready, loaded in rows:
    if loaded:
        print("%s: %s" % (mode, loaded[0]))
