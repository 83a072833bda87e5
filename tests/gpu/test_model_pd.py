#!/usr/bin/env python3
"""A real (randomly initialised) Llama-style model served disaggregated behind pdrouter: one prefill and
one decode worker (tests/gpu/model/worker.py, separate processes, each with its own CUDA context, both on
device 0) with the KV cache moved by libpdshim, against a monolithic worker. It proves and measures:

  1. the model is Llama: logits equal transformers' LlamaForCausalLM on the same weights (skipped with a
     message without transformers);
  2. equality: output ids through the router == a monolithic run, for each prompt length, at concurrency
     1 and 8, for each backend (cuda_ipc, tcp whole, tcp streamed by layer);
  3. TTFT and TPOT through the router (streaming client: first SSE token, inter-token times; median and
     p90) per backend and for a monolithic worker behind the router, and the TTFT overhead of each
     backend over monolithic;
  4. the kill test: 8 concurrent long prompts, the prefill SIGKILLed mid-run: every client answered
     (503/504, or a stream that ends with an error or completes) within 1 s of the kill, no hang; what the
     decode's shim reported for its fetches;
  5. the per-phase timing of one request: the router's access-log line and the workers' own records
     (prefill compute ms, KV bytes, transfer us and backend from the shim's result).

Writes DIR/results.json (updated after every step) and DIR/summary.txt, logs under DIR/logs/. Exits 0
when everything passed, 1 on any mismatch, error or non-2xx answer, 77 when PyTorch is not importable or
(with a CUDA device) no GPU is visible.

    test_model_pd.py --out DIR [--device cuda:0 --config 1b]          # the GPU run
    test_model_pd.py --out DIR --device cpu --config tiny              # the same flow on the CPU (tcp)

Binaries: --pdrouter/--pdsim/--pdshim-lib, else $PDROUTER, $PDSIM, $PDSHIM_LIB, else BUILD_DIR/(pdrouter,
pdsim, libpdshim.so) with BUILD_DIR from --build-dir or $PDR_BUILD. pdshim.py: --pdshim-py or $PDSHIM_PY,
else worker-shim/python of this tree. The workers run under --python (default: this interpreter).
"""

import argparse
import http.client
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import pdtest  # noqa: E402  (free_port, poll_until)

HOST = "127.0.0.1"
BACKENDS = {  # name -> (worker --backend, --stream-layers)
    "cuda_ipc": ("cuda_ipc", False),
    "tcp": ("tcp", False),
    "tcp_layers": ("tcp", True),
}


def log(msg):
    print("[%s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


def pct(xs, p):
    if not xs:
        return None
    s = sorted(xs)
    k = (len(s) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def stats_of(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return {"n": len(xs), "median": round(statistics.median(xs), 3), "p90": round(pct(xs, 90), 3),
            "min": round(min(xs), 3), "max": round(max(xs), 3)}


class Run:
    """Process bookkeeping, results and failures of one run."""

    def __init__(self, a):
        self.a = a
        self.out = os.path.abspath(a.out)
        self.logs = os.path.join(self.out, "logs")
        os.makedirs(self.logs, exist_ok=True)
        self.procs = []
        self.failures = []
        self.warnings = []
        self.results = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "steps": {}}
        self.t0 = time.monotonic()

    def fail(self, what):
        log("FAIL: " + what)
        self.failures.append(what)

    def warn(self, what):
        log("WARNING: " + what)
        self.warnings.append(what)

    def check(self, cond, what):
        if not cond:
            self.fail(what)
        return cond

    def save(self):
        self.results["failures"] = self.failures
        self.results["warnings"] = self.warnings
        self.results["elapsed_s"] = round(time.monotonic() - self.t0, 1)
        tmp = os.path.join(self.out, "results.json.tmp")
        with open(tmp, "w") as f:
            json.dump(self.results, f, indent=1, sort_keys=True)
        os.replace(tmp, os.path.join(self.out, "results.json"))

    def spawn(self, name, argv, env=None):
        path = os.path.join(self.logs, name + ".log")
        f = open(path, "w")
        p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        f.close()
        p.name, p.log_path = name, path
        self.procs.append(p)
        return p

    def tail(self, p, n=30):
        try:
            with open(p.log_path, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def wait_http(self, p, port, path, timeout, want=200):
        def up():
            if p.poll() is not None:
                raise RuntimeError("%s exited with %s during start:\n%s" % (p.name, p.returncode, self.tail(p)))
            try:
                st, _, _ = http_req(port, "GET", path, timeout=2)
            except OSError:
                return False
            return st == want
        pdtest.poll_until(up, timeout, "%s to answer %s %d" % (p.name, path, want))

    def stop(self, p, sig=signal.SIGTERM):
        if p.poll() is None:
            p.send_signal(sig)
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if p in self.procs:
            self.procs.remove(p)

    def stop_all(self):
        for p in list(self.procs):
            self.stop(p)


def http_req(port, method, path, body=None, headers=None, timeout=60):
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        hdrs = dict(headers or {})
        if body is not None:
            body = json.dumps(body).encode()
            hdrs["Content-Type"] = "application/json"
        conn.request(method, path, body=body, headers=hdrs)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def generate(port, ids, max_new, stream, timeout, request_id=None):
    """One /generate call. Returns a dict: status, ids, ttft_ms, itl_ms, e2e_ms, error, t_first, t_end."""
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": max_new, "temperature": 0}, "stream": stream}
    hdrs = {"Content-Type": "application/json"}
    if request_id:
        hdrs["X-Request-Id"] = request_id
    res = {"status": None, "ids": None, "ttft_ms": None, "itl_ms": [], "e2e_ms": None, "error": None,
           "t_first": None, "t_end": None, "meta": None}
    t0 = time.monotonic()
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        conn.request("POST", "/generate", body=json.dumps(body).encode(), headers=hdrs)
        r = conn.getresponse()
        res["status"] = r.status
        res["request_id"] = r.getheader("X-Request-Id")
        if not stream or r.status != 200 or "event-stream" not in (r.getheader("Content-Type") or ""):
            data = r.read()
            res["t_end"] = time.monotonic()
            try:
                o = json.loads(data)
            except ValueError:
                o = None
            if r.status == 200 and isinstance(o, dict) and "output_ids" in o:
                res["ids"] = o["output_ids"]
                res["meta"] = o.get("meta_info")
            else:
                res["error"] = (o or {}).get("error") if isinstance(o, dict) else data[:300].decode(errors="replace")
            res["e2e_ms"] = (res["t_end"] - t0) * 1e3
            return res
        last_n, last_t, done = 0, None, False
        while True:
            line = r.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            now = time.monotonic()
            if payload == b"[DONE]":
                done = True
                continue
            try:
                ev = json.loads(payload)
            except ValueError:
                res["error"] = "unparsable SSE event: %r" % payload[:200]
                continue
            if "error" in ev:
                res["error"] = ev["error"]
                continue
            ids_now = ev.get("output_ids") or []
            if len(ids_now) > last_n:
                if last_n == 0:
                    res["t_first"] = now
                    res["ttft_ms"] = (now - t0) * 1e3
                else:
                    # Events may carry more than one new token when relayed together: spread the gap.
                    k = len(ids_now) - last_n
                    res["itl_ms"] += [(now - last_t) * 1e3 / k] * k
                last_n, last_t = len(ids_now), now
            res["ids"] = ids_now
            if ev.get("meta_info", {}).get("finish_reason"):
                res["meta"] = ev.get("meta_info")
        res["t_end"] = time.monotonic()
        res["e2e_ms"] = (res["t_end"] - t0) * 1e3
        if not done and res["error"] is None:
            res["error"] = "stream ended without [DONE]"
        return res
    except (OSError, http.client.HTTPException) as e:
        res["t_end"] = time.monotonic()
        res["error"] = "%s: %s" % (type(e).__name__, e)
        return res
    finally:
        conn.close()


def parallel(fns):
    out = [None] * len(fns)

    def run(i):
        out[i] = fns[i]()
    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(fns))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


def prompts_for(cfg_vocab, length, count, seed=7):
    """Deterministic random prompts without torch in this process (llama.prompt_ids is the same idea;
    the ids only need to be the same for every leg of the run)."""
    import random
    out = []
    for i in range(count):
        rnd = random.Random(seed * 1000003 + length * 1009 + i)
        out.append([rnd.randrange(cfg_vocab) for _ in range(length)])
    return out


class Bench:
    def __init__(self, a):
        self.a = a
        self.run = Run(a)
        self.r = self.run.results
        self.env = dict(os.environ)
        self.env["PDSHIM_LIB"] = a.pdshim_lib
        self.env["PDSHIM_PY"] = a.pdshim_py
        self.env.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        self.env["PYTHONUNBUFFERED"] = "1"
        self.cuda = a.device.startswith("cuda")
        self.timeout = a.request_timeout_s
        self.step_procs = []

    # ---- processes ----

    def events_key(self):
        """The router's shim_events.key_file: the master key the workers' keys are derived from."""
        path = os.path.join(self.run.logs, "shim-events.key")
        if not os.path.exists(path):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(os.urandom(32))
        return path

    def worker_events_key(self, port):
        """The key the shim of the worker on port signs with: `pdrouter --derive-shim-key` for its URL."""
        path = os.path.join(self.run.logs, "shim-events-%d.key" % port)
        out = subprocess.run([self.a.pdrouter, "--derive-shim-key", self.events_key(), "http://127.0.0.1:%d" % port],
                             capture_output=True, timeout=30)
        if out.returncode != 0:
            raise SystemExit("pdrouter --derive-shim-key: %s" % out.stderr.decode(errors="replace"))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(out.stdout)
        return path

    def worker(self, name, mode, backend="auto", stream_layers=False, events_port=None):
        port = pdtest.free_port()
        bport = pdtest.free_port() if mode == "prefill" else None
        argv = [self.a.python, os.path.join(HERE, "model", "worker.py"), "--mode", mode, "--port", str(port),
                "--device", self.a.decode_device if mode == "decode" else self.a.device, "--config", self.a.config,
                "--backend", backend,
                "--slots", str(self.a.slots), "--max-len", str(max(self.a.lengths) + self.a.max_new_tokens + 8),
                "--kv-timeout-ms", str(self.a.kv_timeout_ms)]
        if events_port:
            argv += ["--events-url", "http://127.0.0.1:%d" % events_port,
                     "--events-key-file", self.worker_events_key(port)]
        if bport:
            argv += ["--bootstrap-port", str(bport)]
        if stream_layers:
            argv += ["--stream-layers"]
        p = self.run.spawn(name, argv, self.env)
        p.port, p.bport = port, bport
        return p

    def pdsim(self, name, role):
        port = pdtest.free_port()
        bport = pdtest.free_port() if role == "prefill" else None
        argv = [self.a.pdsim, "--role", role, "--port", str(port)]
        if bport:
            argv += ["--bootstrap-port", str(bport)]
        p = self.run.spawn(name, argv, self.env)
        p.port, p.bport = port, bport
        return p

    def router(self, name, prefill, decode, regular=None, admin=None):
        """admin: the admin port, chosen before the workers when their shims report events to it."""
        port, admin = pdtest.free_port(), admin or pdtest.free_port()
        alog = os.path.join(self.run.logs, name + "-access.log")
        lines = [
            "listen: { host: 127.0.0.1, port: %d }" % port,
            "admin: { host: 127.0.0.1, port: %d }" % admin,
            "protocol: sglang",
            "workers:",
            "  prefill:",
            "    - { url: http://127.0.0.1:%d, bootstrap_port: %d }" % (prefill.port, prefill.bport),
            "  decode:",
            "    - { url: http://127.0.0.1:%d }" % decode.port,
        ]
        if regular is not None:
            lines += ["  regular:", "    - { url: http://127.0.0.1:%d }" % regular.port,
                      # Every prompt is "short": the request skips the prefill and runs whole on the regular worker.
                      "disaggregation: { min_prefill_tokens: 1073741824 }"]
        lines += [
            "health: { path: /health, interval_ms: 1000, timeout_ms: 2000, rise: 1, fall: 3 }",
            "timeouts: { connect_ms: 1000, first_byte_ms: %d, kv_transfer_ms: %d, stream_idle_ms: 300000 }"
            % (self.timeout * 1000, self.a.kv_timeout_ms + 5000),
            "retries: { max: 1 }",
            "lifecycle: { drain_grace_ms: 0 }",
            "log: { access_log: %s, level: info }" % alog,
        ]
        if getattr(prefill, "events", False):
            lines.append("shim_events: { key_file: %s }" % self.events_key())
        path = os.path.join(self.run.logs, name + ".yaml")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        p = self.run.spawn(name, [self.a.pdrouter, "--config", path], self.env)
        p.port, p.admin, p.alog, p.config = port, admin, alog, path
        self.run.wait_http(p, port, "/readiness", 60)
        return p

    def start_workers(self, procs):
        for p in procs:
            self.run.wait_http(p, p.port, "/health", self.a.start_timeout_s)

    def stats(self, p):
        st, _, data = http_req(p.port, "GET", "/pdmodel/stats", timeout=10)
        return json.loads(data) if st == 200 else {}

    def access_lines(self, r, n=1, timeout=10):
        def read():
            try:
                with open(r.alog) as f:
                    ls = [json.loads(x) for x in f if x.strip()]
            except (OSError, ValueError):
                return None
            return ls if len(ls) >= n else None
        return pdtest.poll_until(read, timeout, "%d access-log lines of %s" % (n, r.name))

    # ---- steps ----

    def env_info(self):
        code = ("import json,sys,torch;sys.path.insert(0,%r);import llama;"
                "d={'torch':torch.__version__,'cuda':torch.cuda.is_available(),'attention':llama.SDPA_NAME};"
                "d['gpu']=torch.cuda.get_device_name(0) if d['cuda'] else None;"
                "d['cuda_version']=torch.version.cuda;print(json.dumps(d))") % os.path.join(HERE, "model")
        p = subprocess.run([self.a.python, "-c", code], capture_output=True, text=True, timeout=120, env=self.env)
        if p.returncode != 0:
            return None, p.stderr.strip().splitlines()[-1:] or ["exit %d" % p.returncode]
        return json.loads(p.stdout.strip().splitlines()[-1]), None

    def shim_info(self):
        code = ("import json,sys;sys.path.insert(0,%r);import pdshim;pdshim.load_library();"
                "print(json.dumps({'offer_open':hasattr(pdshim.Shim,'offer_open'),'lib':%r}))") % (
                    self.a.pdshim_py, self.a.pdshim_lib)
        p = subprocess.run([self.a.python, "-c", code], capture_output=True, text=True, timeout=60, env=self.env)
        if p.returncode != 0:
            raise RuntimeError("cannot load pdshim.py / libpdshim.so: %s" % p.stderr.strip()[-500:])
        return json.loads(p.stdout.strip().splitlines()[-1])

    def step_hf_check(self):
        log("transformers check (%s on %s)" % (self.a.config, self.a.device))
        p = subprocess.run([self.a.python, os.path.join(HERE, "model", "llama.py"), "--check", "--config",
                            self.a.config, "--device", self.a.device], capture_output=True, text=True,
                           timeout=900, env=self.env)
        lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
        res = json.loads(lines[-1]) if lines else {"ok": False, "reason": "no result (exit %d): %s"
                                                       % (p.returncode, p.stderr.strip()[-800:])}
        self.r["steps"]["transformers_check"] = res
        if res.get("skipped"):
            log("transformers check skipped: %s" % res.get("reason"))
        else:
            self.run.check(res.get("ok"), "transformers comparison: %s" % json.dumps(res))
            log("transformers check: %s" % json.dumps(res))

    def step_selftest(self):
        p = subprocess.run([self.a.python, os.path.join(HERE, "model", "llama.py"), "--selftest", "--device",
                            self.a.device], capture_output=True, text=True, timeout=300, env=self.env)
        lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
        res = json.loads(lines[-1]) if lines else {"ok": False, "reason": p.stderr.strip()[-800:]}
        self.r["steps"]["selftest"] = res
        self.run.check(res.get("ok"), "model self-test (tiny): %s" % json.dumps(res))
        log("model self-test: %s" % json.dumps(res))

    def equality(self, port, label, refs, conc):
        """Sends the prompts of every length (conc at a time, streamed) and compares with refs."""
        out = {}
        for L in self.a.lengths:
            ps = self.prompts[L][:conc]
            rs = parallel([(lambda ids=ids: generate(port, ids, self.a.max_new_tokens, True, self.timeout))
                           for ids in ps])
            bad = []
            for i, res in enumerate(rs):
                if res["status"] != 200 or res["error"] is not None:
                    bad.append("prompt %d: status %s error %s" % (i, res["status"], res["error"]))
                elif res["ids"] != refs[L][i]:
                    k = next((j for j, (x, y) in enumerate(zip(res["ids"], refs[L][i])) if x != y),
                             min(len(res["ids"]), len(refs[L][i])))
                    bad.append("prompt %d: ids differ from token %d: got %s want %s" % (
                        i, k, res["ids"][max(0, k - 2):k + 6], refs[L][i][max(0, k - 2):k + 6]))
            out[str(L)] = {"requests": len(rs), "equal": not bad, "problems": bad[:4],
                           "ttft_ms": stats_of([x["ttft_ms"] for x in rs])}
            self.run.check(not bad, "%s: %d-token prompts at concurrency %d: %s" % (label, L, conc, "; ".join(bad[:3])))
            log("  %s L=%d c=%d: %s" % (label, L, conc, "equal" if not bad else "MISMATCH %s" % bad[:2]))
        return out

    def timing(self, port, label, refs):
        """reps streamed requests per length at concurrency 1: TTFT and inter-token times."""
        out = {}
        for L in self.a.lengths:
            ttft, itl, e2e, bad = [], [], [], 0
            for i in range(self.a.warmup + self.a.reps):
                res = generate(port, self.prompts[L][i % len(self.prompts[L])], self.a.max_new_tokens, True,
                               self.timeout)
                ok = res["status"] == 200 and res["error"] is None and res["ids"] == refs[L][i % len(refs[L])]
                if not ok:
                    bad += 1
                    self.run.fail("%s timing L=%d #%d: status %s error %s ids %s" % (
                        label, L, i, res["status"], res["error"], (res["ids"] or [])[:8]))
                if i >= self.a.warmup and ok:
                    ttft.append(res["ttft_ms"])
                    itl += res["itl_ms"]
                    e2e.append(res["e2e_ms"])
            out[str(L)] = {"ttft_ms": stats_of(ttft), "tpot_ms": stats_of(itl), "e2e_ms": stats_of(e2e),
                           "failed": bad}
            t = out[str(L)]
            log("  %s L=%d: TTFT median %s p90 %s ms, TPOT median %s p90 %s ms" % (
                label, L, (t["ttft_ms"] or {}).get("median"), (t["ttft_ms"] or {}).get("p90"),
                (t["tpot_ms"] or {}).get("median"), (t["tpot_ms"] or {}).get("p90")))
        return out

    def prefill_timing(self, p, n0):
        """The prefill side of the timed requests (p's records from index n0 on, warm-ups included): per
        length, the compute time and the KV tail (compute end -> every byte acknowledged; none for a
        monolithic worker), median and p90."""
        recs = [x for x in self.stats(p).get("records", [])[n0:] if x.get("prefill_ms") is not None]
        out = {}
        for L in self.a.lengths:
            rs = [x for x in recs if x.get("prompt_tokens") == L]
            out[str(L)] = {"compute_ms": stats_of([x["prefill_ms"] for x in rs]),
                           "kv_tail_ms": stats_of([x["kv_tail_ms"] for x in rs if x.get("kv_tail_ms") is not None])}
        return out

    def step_monolithic(self):
        log("monolithic worker (mode both): references, then behind the router")
        both = self.worker("both", "both")
        # A second monolithic process: the same ids from another process (another CUDA context) show that
        # the numerics repeat across processes, which every disaggregated comparison relies on.
        both2 = self.worker("both2", "both")
        dp, dd = self.pdsim("pdsim-prefill", "prefill"), self.pdsim("pdsim-decode", "decode")
        self.start_workers([both, both2, dp, dd])
        res = {"init_s": self.stats(both).get("init_s")}
        # References: the monolithic worker called directly, one request at a time, not streamed.
        refs = {}
        t0 = time.monotonic()
        for L in self.a.lengths:
            refs[L] = []
            for ids in self.prompts[L]:
                r = generate(both.port, ids, self.a.max_new_tokens, False, self.timeout)
                if not self.run.check(r["status"] == 200 and r["ids"] is not None and len(r["ids"]) == self.a.max_new_tokens,
                                      "reference L=%d: status %s error %s" % (L, r["status"], r["error"])):
                    raise RuntimeError("the monolithic worker cannot answer: %s" % self.run.tail(both))
                refs[L].append(r["ids"])
        res["reference_s"] = round(time.monotonic() - t0, 2)
        # The same request twice gives the same ids (if not, nothing else can be equal: say so first).
        again = generate(both.port, self.prompts[self.a.lengths[-1]][0], self.a.max_new_tokens, False, self.timeout)
        res["repeatable"] = again["ids"] == refs[self.a.lengths[-1]][0]
        self.run.check(res["repeatable"], "the monolithic worker is not repeatable: %s vs %s" % (
            again["ids"], refs[self.a.lengths[-1]][0]))
        cross = {}
        for L in self.a.lengths:
            r2 = generate(both2.port, self.prompts[L][0], self.a.max_new_tokens, False, self.timeout)
            cross[str(L)] = r2["ids"] == refs[L][0]
            self.run.check(cross[str(L)], "two monolithic processes disagree at %d tokens: %s vs %s (numerics "
                           "differ across processes: no disaggregated run can match)" % (L, r2["ids"], refs[L][0]))
        res["cross_process_equal"] = cross
        self.run.stop(both2)
        res["distinct_outputs"] = len({tuple(x) for L in refs for x in refs[L]})
        log("  references: %d prompts in %.1fs, repeatable %s, same in another process %s, %d distinct outputs, "
            "e.g. %s" % (sum(len(v) for v in refs.values()), res["reference_s"], res["repeatable"], cross,
                         res["distinct_outputs"], refs[self.a.lengths[0]][0][:10]))
        self.refs = refs
        r = self.router("router-mono", dp, dd, regular=both)
        res["equality_c1"] = self.equality(r.port, "monolithic", refs, 1)
        res["equality_c8"] = self.equality(r.port, "monolithic", refs, 8)
        n0 = len(self.stats(both).get("records", []))
        res["timing"] = self.timing(r.port, "monolithic", refs)
        res["prefill_timing"] = self.prefill_timing(both, n0)
        line = self.access_lines(r, 1)[-1]
        res["access_log_example"] = line
        self.run.check(line.get("disagg") == "short_prompt" and line.get("prefill") is None,
                       "monolithic router did not run the request on the regular worker: %s" % json.dumps(line))
        self.r["steps"]["monolithic"] = res
        self.run.save()
        for p in (r, dp, dd, both):
            self.run.stop(p)

    def guarded(self, name, fn):
        """Runs one backend's step; an exception fails that step (with the tails of its processes' logs)
        and the run goes on with the next backend. New failures also print those tails."""
        before, n_procs = len(self.run.failures), len(self.run.procs)
        try:
            fn()
        except Exception as e:
            import traceback
            traceback.print_exc()
            self.run.fail("backend %s aborted: %s: %s" % (name, type(e).__name__, e))
        if len(self.run.failures) > before:
            for p in self.run.procs[n_procs:] + [p for p in self.step_procs if p not in self.run.procs]:
                log("--- %s (exit %s), last lines of %s ---\n%s" % (p.name, p.poll(), p.log_path, self.run.tail(p, 25)))
        for p in list(self.run.procs[n_procs:]):
            self.run.stop(p)
        self.step_procs = []
        self.run.save()

    def step_backend(self, name, kill):
        backend, layers = BACKENDS[name]
        log("backend %s: prefill + decode workers (--backend %s%s)" % (name, backend, " --stream-layers" if layers else ""))
        admin = pdtest.free_port()  # the router's: both shims report their room events there
        pre = self.worker("prefill-" + name, "prefill", backend, layers, events_port=admin)
        dec = self.worker("decode-" + name, "decode", backend, events_port=admin)
        pre.events = dec.events = True
        self.step_procs = [pre, dec]
        self.start_workers([pre, dec])
        r = self.router("router-" + name, pre, dec, admin=admin)
        self.step_procs.append(r)
        res = {"worker_backend": backend, "stream_layers": layers}
        res["equality_c1"] = self.equality(r.port, name, self.refs, 1)
        res["equality_c8"] = self.equality(r.port, name, self.refs, 8)
        n0 = len(self.stats(pre).get("records", []))
        res["timing"] = self.timing(r.port, name, self.refs)
        res["prefill_timing"] = self.prefill_timing(pre, n0)
        # Which backend the shims used, from the decode's fetch records.
        recs = self.stats(dec).get("records", [])
        used = sorted({x.get("backend") for x in recs if x.get("status") == "ok"})
        res["backends_seen"] = used
        self.run.check(used == [backend], "%s: the decode's fetches used %s, expected [%s]" % (name, used, backend))
        res["kv_checksums"] = self.kv_checksums(pre, dec, name)
        res["phase"] = self.phase(r, pre, dec, name)
        self.r["steps"]["backend_" + name] = res
        self.run.save()
        if kill:
            self.r["steps"]["kill"] = self.kill_test(r, pre, dec, name)
            self.run.save()
        for p in (r, pre, dec):
            self.run.stop(p)

    def kv_checksums(self, pre, dec, name):
        """Compares, room by room, the digest of the KV the prefill offered with what the decode received."""
        p = {x.get("room"): x.get("kv_sum") for x in self.stats(pre).get("records", []) if x.get("kv_sum") is not None}
        d = {x.get("room"): x.get("kv_sum") for x in self.stats(dec).get("records", []) if x.get("kv_sum") is not None}
        both = [room for room in d if room in p]
        bad = [room for room in both if p[room] != d[room]]
        out = {"rooms_compared": len(both), "mismatched": len(bad), "examples": bad[:4]}
        log("  %s KV digests: %d rooms compared, %d differ" % (name, len(both), len(bad)))
        self.run.check(both and not bad, "%s: KV digests of %d of %d rooms differ between prefill and decode (%s)"
                       % (name, len(bad), len(both), bad[:4]))
        return out

    def phase(self, r, pre, dec, name):
        """One request's timing: the router's access-log line and both workers' records of its room."""
        L = self.a.lengths[len(self.a.lengths) // 2]
        rid = "pdmodel-phase-%s-%d" % (name, os.getpid())
        res = generate(r.port, self.prompts[L][0], self.a.max_new_tokens, False, self.timeout, request_id=rid)
        self.run.check(res["status"] == 200 and res["ids"] == self.refs[L][0],
                       "%s phase request: status %s error %s" % (name, res["status"], res["error"]))
        line = pdtest.poll_until(lambda: next((x for x in (self.access_lines(r, 1) or [])
                                               if x.get("request_id") == rid), None), 10, "access-log line " + rid)
        room = line.get("room")
        p_rec = next((x for x in self.stats(pre).get("records", []) if x.get("room") == room), None)
        d_rec = next((x for x in self.stats(dec).get("records", []) if x.get("room") == room), None)
        out = {"prompt_tokens": L, "access_log": line, "prefill": p_rec, "decode": d_rec}
        log("  phase (%s, %d tokens): router ttfb %s ms total %s ms; prefill compute %s ms, KV %s bytes, "
            "offer %s us; decode fetch %s us via %s, decode %s ms" % (
                name, L, line.get("ttfb_ms"), line.get("total_ms"), _r(p_rec, "prefill_ms"), _r(p_rec, "kv_bytes"),
                _r(p_rec, "xfer_us"), _r(d_rec, "xfer_us"), _r(d_rec, "backend"), _r(d_rec, "decode_ms")))
        self.run.check(p_rec is not None and d_rec is not None, "%s: no worker record for room %s" % (name, room))
        if getattr(pre, "events", False):
            # The shims' events reached the router and were attached to the request: its access-log line
            # has the KV transfer as the shim measured it.
            kv = line.get("kv")
            self.run.check(isinstance(kv, dict) and kv.get("backend") == (d_rec or {}).get("backend"),
                           "%s: the access-log line's kv field does not hold the shim's transfer: %s" % (name, kv))
        return out

    def shim_events(self, r):
        """The router's record of the shims' event channel (GET /admin/v1/shim)."""
        st, _, data = http_req(r.admin, "GET", "/admin/v1/shim", timeout=10)
        return json.loads(data) if st == 200 else {}

    def kill_test(self, r, pre, dec, name):
        L = self.a.lengths[-1]
        n = 8
        log("kill test (%s): %d concurrent %d-token streams, SIGKILL to the prefill mid-run" % (name, n, L))
        done_before = len(self.stats(pre).get("records", []))
        results = [None] * n
        threads = []
        for i in range(n):
            def go(i=i):
                results[i] = generate(r.port, self.prompts[L][i], self.a.max_new_tokens, True, 60)
            t = threading.Thread(target=go)
            t.start()
            threads.append(t)

        # Mid-run: once the prefill has finished at least one of these rooms, while others are still to come.
        def mid():
            try:
                recs = self.stats(pre).get("records", [])
            except OSError:
                return None
            return len(recs) - done_before if len(recs) > done_before else None
        # A tight poll (2 ms), not a growing backoff: a long prompt's prefill takes tens of ms on a GPU.
        t_start = time.monotonic()
        deadline, finished, polls = t_start + 120, None, 0
        while finished is None and time.monotonic() < deadline:
            finished = mid()
            polls += 1
            if finished is None:
                time.sleep(0.002)
        if finished is None:
            raise RuntimeError("kill test: the prefill finished none of the rooms within 120 s:\n" + self.run.tail(pre))
        os.kill(pre.pid, signal.SIGKILL)
        t_kill = time.monotonic()
        log("  SIGKILL to the prefill (pid %d) after %d of %d rooms, %.3f s after the requests went out (%d polls)"
            % (pre.pid, finished, n, t_kill - t_start, polls))
        for t in threads:
            t.join(90)
        hung = [i for i, t in enumerate(threads) if t.is_alive()]
        out = {"prompt_tokens": L, "requests": n, "prefill_rooms_done_at_kill": finished, "hung": hung, "clients": []}
        self.run.check(not hung, "kill test: clients %s still waiting 90 s after the kill" % hung)
        self.run.check(finished < n, "kill test: the prefill had finished every room before the kill (not mid-run)")
        for i, res in enumerate(results):
            if res is None:
                continue
            streaming = res["t_first"] is not None and res["t_first"] < t_kill
            before = res["t_end"] is not None and res["t_end"] < t_kill
            after = (res["t_end"] - t_kill) if res["t_end"] else None
            complete = res["status"] == 200 and res["error"] is None and res["ids"] == self.refs[L][i]
            c = {"index": i, "status": res["status"], "error": res["error"], "streaming_at_kill": streaming,
                 "done_before_kill": before,
                 "answered_s_after_kill": round(after, 3) if after is not None else None, "complete": complete}
            out["clients"].append(c)
            if streaming:
                # Its KV had arrived before the kill: the decode goes on; it must end, complete or with an error.
                self.run.check(complete or res["error"] is not None,
                               "kill test: client %d (streaming at the kill) neither completed nor failed: %s" % (i, c))
            else:
                ok_status = res["status"] in (502, 503, 504) or (res["status"] == 200 and (res["error"] is not None or complete))
                self.run.check(ok_status, "kill test: client %d answered %s" % (i, c))
                if res["status"] == 502:
                    # The decode's own 5xx (its fetch failed: the prefill is gone) reached the router before
                    # the prefill leg's reset did, so the decode was blamed. Answered in time, but not the 503
                    # the contract names for a dead prefill: reported, not failed.
                    self.run.warn("kill test: client %d got 502 (%s): the decode's KV-failure answer won the race "
                                  "with the prefill's reset" % (i, (res["error"] or {}).get("message")))
                if not complete:
                    self.run.check(after is not None and after <= 1.0,
                                   "kill test: client %d answered %.3f s after the kill (limit 1 s): %s" % (
                                       i, after if after is not None else -1, c))
            log("  client %d: status %s %s, %s s after the kill%s" % (
                i, res["status"], "complete" if complete else "error %s" % json.dumps(res["error"])[:160],
                c["answered_s_after_kill"], " (done before the kill)" if before else " (was streaming)" if streaming else ""))
        # The router's view of each client: its access-log line (attempts, error, rooms).
        try:
            lines = {x.get("request_id"): x for x in self.access_lines(r, 1)}
        except AssertionError:
            lines = {}
        for c, res in zip(out["clients"], results):
            x = lines.get(res.get("request_id")) if res else None
            c["access_log"] = {k: x.get(k) for k in ("attempts", "status", "error", "prefill", "room", "ttfb_ms",
                                                     "total_ms")} if x else None
        # What the decode's shim said about the rooms of the dead prefill.
        def failed_recs():
            recs = self.stats(dec).get("records", [])
            return [x for x in recs if x.get("status") not in (None, "ok")]
        try:
            fails = pdtest.poll_until(lambda: failed_recs() or None, 30, "the decode to report a failed fetch")
        except AssertionError:
            fails = []
        out["decode_fetch_failures"] = [{k: x.get(k) for k in ("room", "status", "error", "backend", "xfer_us",
                                                                  "fetch_wall_ms")} for x in fails]
        for x in out["decode_fetch_failures"]:
            log("  decode shim: room %s fetch failed: %s (%s) after %s ms" % (x["room"], x["status"], x["error"],
                                                                            _r(x, "fetch_wall_ms")))
        if getattr(pre, "events", False):
            # The same failures as the decode's shim reported them to the router (its room events).
            rooms = {x["room"] for x in out["decode_fetch_failures"]}

            def shim_failed():
                ev = [x for x in self.shim_events(r).get("recent", []) if x.get("event") == "failed"
                      and x.get("room") in rooms]
                return ev if len({x["room"] for x in ev}) == len(rooms) else None
            try:
                evs = pdtest.poll_until(shim_failed, 10, "the decode shim's failed events at the router")
            except AssertionError:
                evs = [x for x in self.shim_events(r).get("recent", []) if x.get("event") == "failed"]
            out["router_shim_failed_events"] = [{k: x.get(k) for k in ("room", "worker", "code", "reason", "matched")}
                                                for x in evs]
            self.run.check(rooms and len({x["room"] for x in evs if x.get("room") in rooms}) == len(rooms)
                           and all(x.get("reason") for x in evs),
                           "kill test: the router did not receive a failed event with a reason for each failed "
                           "fetch: rooms %s, events %s" % (sorted(rooms), out["router_shim_failed_events"][:4]))
        st, _, _ = http_req(dec.port, "GET", "/health", timeout=5)
        out["decode_healthy_after"] = st == 200
        self.run.check(st == 200, "kill test: the decode is not healthy after the prefill died")
        st, _, body = http_req(r.port, "POST", "/generate", {"input_ids": [1, 2, 3],
                                                             "sampling_params": {"max_new_tokens": 2}}, timeout=10)
        out["after_kill_status"] = st
        self.run.check(st in (502, 503, 504), "kill test: a new request after the kill got %d, expected 503: %r" % (st, body[:200]))
        return out

    def main(self):
        a, run = self.a, self.run
        info, err = self.env_info()
        if info is None:
            log("skip: PyTorch not importable with %s (%s)" % (a.python, err))
            return 77
        if self.cuda and not info["cuda"]:
            log("skip: no CUDA device visible to PyTorch")
            return 77
        self.r["env"] = dict(info, python=a.python, host=platform.node(), device=a.device,
                             decode_device=a.decode_device, config=a.config,
                             pdrouter=a.pdrouter, pdsim=a.pdsim, pdshim_lib=a.pdshim_lib)
        shim = self.shim_info()
        self.r["env"]["shim_streamed_offers"] = shim["offer_open"]
        self.r["params"] = {"lengths": a.lengths, "max_new_tokens": a.max_new_tokens, "reps": a.reps,
                            "warmup": a.warmup, "backends": a.backends, "slots": a.slots}
        log("env: %s" % json.dumps(self.r["env"]))
        with open(os.path.join(ROOT, "tests", "gpu", "model", "llama.py")):
            pass
        vocab = {"1b": 32000, "tiny": 512}[a.config]
        self.prompts = {L: prompts_for(vocab, L, max(8, a.reps + a.warmup)) for L in a.lengths}
        try:
            self.step_selftest()
            if not a.skip_hf_check:
                self.step_hf_check()
                run.save()
            self.step_monolithic()
            todo = []
            for name in a.backends:
                if name == "cuda_ipc" and not self.cuda:
                    self.r["steps"]["backend_cuda_ipc"] = {"not_run": "cuda_ipc needs GPU memory (device %s)" % a.device}
                    log("backend cuda_ipc: not run on %s" % a.device)
                    continue
                if BACKENDS[name][1] and not shim["offer_open"]:
                    msg = ("streamed offers are not in this libpdshim/pdshim.py (no Shim.offer_open): "
                           "tcp streamed by layer not run")
                    self.r["steps"]["backend_" + name] = {"not_run": msg}
                    log("backend %s: %s" % (name, msg))
                    if a.require_stream_layers:
                        run.fail(msg)
                    continue
                todo.append(name)
            kill_on = a.kill_backend if a.kill_backend in todo else (todo[-1] if todo else None)
            for name in todo:
                self.guarded(name, lambda name=name: self.step_backend(name, kill=(name == kill_on)))
        except Exception as e:
            import traceback
            traceback.print_exc()
            run.fail("aborted: %s: %s" % (type(e).__name__, e))
            for p in run.procs:
                if p.poll() is not None and p.returncode not in (0, -signal.SIGTERM, -signal.SIGKILL):
                    log("--- %s exited %s, log tail ---\n%s" % (p.name, p.returncode, run.tail(p)))
        finally:
            run.stop_all()
            self.summarize()
            run.save()
        log("%s: %d failure(s); results in %s" % ("PASSED" if not run.failures else "FAILED", len(run.failures), run.out))
        return 0 if not run.failures else 1

    def summarize(self):
        r, a = self.r, self.a
        steps = r["steps"]
        out = ["pdrouter + real model (%s, %s%s), %s" % (a.config, a.device, "" if a.decode_device == a.device else
                                                          ", decode on " + a.decode_device, r.get("started")),
               "env: %s" % json.dumps(r.get("env", {})),
               "prompts %s tokens, max_new_tokens %d, %d timed requests per point (after %d warm-up)" % (
                   a.lengths, a.max_new_tokens, a.reps, a.warmup), ""]
        hf = steps.get("transformers_check")
        if hf:
            out.append("transformers check: %s" % ("skipped (%s)" % hf.get("reason") if hf.get("skipped") else
                                                   "%s max|dlogit| %.3g of max|logit| %.3g (tol %.0e rel), argmax same %s"
                                                   % ("ok" if hf.get("ok") else "FAILED", hf.get("max_abs_diff", -1),
                                                      hf.get("max_abs_logit", -1), hf.get("rel_tol", 0), hf.get("argmax_same"))))
        names = ["monolithic"] + ["backend_" + b for b in a.backends]
        out.append("")
        out.append("%-22s %-8s %-10s %-10s %-10s %-10s %-10s" % ("setup", "prompt", "equal c1", "equal c8",
                                                                  "TTFT med", "TTFT p90", "TPOT med"))
        mono = steps.get("monolithic", {}).get("timing", {})
        for n in names:
            s = steps.get(n)
            if s is None:
                continue
            label = n.replace("backend_", "")
            if "not_run" in s:
                out.append("%-22s NOT RUN: %s" % (label, s["not_run"]))
                continue
            for L in a.lengths:
                k = str(L)
                t = s.get("timing", {}).get(k, {})
                out.append("%-22s %-8d %-10s %-10s %-10s %-10s %-10s" % (
                    label, L, _eq(s, "equality_c1", k), _eq(s, "equality_c8", k), _m(t, "ttft_ms", "median"),
                    _m(t, "ttft_ms", "p90"), _m(t, "tpot_ms", "median")))
        out.append("")
        out.append("prefill side of the timed requests (median ms): compute / KV done after compute")
        for n in names:
            s = steps.get(n)
            if not s or "not_run" in s or "prefill_timing" not in s:
                continue
            parts = []
            for L in a.lengths:
                t = s["prefill_timing"].get(str(L), {})
                parts.append("%d: %s / %s" % (L, _m(t, "compute_ms", "median"), _m(t, "kv_tail_ms", "median")))
            out.append("  %-20s %s" % (n.replace("backend_", ""), ", ".join(parts)))
        out.append("")
        out.append("TTFT overhead over monolithic (median, ms):")
        for n in names[1:]:
            s = steps.get(n)
            if not s or "not_run" in s:
                continue
            parts = []
            for L in a.lengths:
                b, m = _m(s.get("timing", {}).get(str(L), {}), "ttft_ms", "median"), _m(mono.get(str(L), {}), "ttft_ms", "median")
                if isinstance(b, float) and isinstance(m, float):
                    parts.append("%d: %+.2f" % (L, b - m))
            out.append("  %-20s %s" % (n.replace("backend_", ""), ", ".join(parts)))
        for n in names[1:]:
            s = steps.get(n)
            if s and "phase" in s:
                ph = s["phase"]
                al, p, d = ph.get("access_log", {}), ph.get("prefill") or {}, ph.get("decode") or {}
                out.append("")
                out.append("phase timing, %s, %d tokens:" % (n.replace("backend_", ""), ph.get("prompt_tokens")))
                out.append("  router access log: %s" % json.dumps(al))
                out.append("  prefill: compute %s ms, KV %s bytes, offer %s us (%s), KV done %s ms after compute%s" % (
                    _r(p, "prefill_ms"), p.get("kv_bytes"), p.get("xfer_us"), p.get("backend"), _r(p, "kv_tail_ms"),
                    ", %s parts, first part %s ms after start" % (p.get("parts"), _r(p, "first_part_ms")) if p.get("parts") else ""))
                out.append("  decode: fetch %s us via %s (%s bytes; counted from the fetch call at the request's "
                           "arrival, so it includes the wait for the prefill's compute), decode %s ms for %s tokens" % (
                    d.get("xfer_us"), d.get("backend"), d.get("bytes"), _r(d, "decode_ms"), d.get("output_tokens")))
        k = steps.get("kill")
        if k:
            out.append("")
            out.append("kill test (%d x %d tokens, prefill SIGKILLed after %s rooms):" % (
                k["requests"], k["prompt_tokens"], k.get("prefill_rooms_done_at_kill")))
            for c in k.get("clients", []):
                out.append("  client %d: status %s, %s, answered %s s after the kill%s" % (
                    c["index"], c["status"], "complete" if c["complete"] else "error %s" % json.dumps(c["error"])[:120],
                    c["answered_s_after_kill"], " (done before the kill)" if c.get("done_before_kill") else
                    " (streaming at the kill)" if c["streaming_at_kill"] else ""))
                if c.get("access_log"):
                    out.append("      router: %s" % json.dumps(c["access_log"]))
            for x in k.get("decode_fetch_failures", []):
                out.append("  decode shim: room %s: %s (%s)" % (x["room"], x["status"], x["error"]))
            for x in k.get("router_shim_failed_events", []):
                out.append("  router, shim event: room %s failed at %s: code %s, reason %s (request in flight: %s)" % (
                    x["room"], x["worker"], x["code"], x["reason"], x["matched"]))
            out.append("  decode healthy after: %s; next request: %s" % (k.get("decode_healthy_after"), k.get("after_kill_status")))
        out.append("")
        if self.run.warnings:
            out.append("WARNINGS (%d):" % len(self.run.warnings))
            out += ["  - " + w for w in self.run.warnings]
        if self.run.failures:
            out.append("FAILED (%d):" % len(self.run.failures))
            out += ["  - " + f for f in self.run.failures]
        else:
            out.append("PASSED")
        text = "\n".join(out) + "\n"
        with open(os.path.join(self.run.out, "summary.txt"), "w") as f:
            f.write(text)
        print(text, flush=True)


def _r(d, k):
    v = (d or {}).get(k)
    return round(v, 2) if isinstance(v, float) else v


def _m(t, k, q):
    v = (t or {}).get(k) or {}
    v = v.get(q)
    return round(float(v), 2) if v is not None else "-"


def _eq(s, k, L):
    e = s.get(k, {}).get(L)
    return "-" if e is None else ("yes" if e["equal"] else "NO")


def torch_python():
    cands = [os.environ.get("PDMODEL_PYTHON"), sys.executable, "/usr/bin/python3"]
    for py in [c for c in cands if c]:
        try:
            if subprocess.run([py, "-c", "import torch"], capture_output=True, timeout=120).returncode == 0:
                return py
        except (OSError, subprocess.TimeoutExpired):
            pass
    return sys.executable


def main():
    ap = argparse.ArgumentParser(description="real model disaggregated behind pdrouter")
    ap.add_argument("build_dir", nargs="?", default=os.environ.get("PDR_BUILD"))
    ap.add_argument("--out", default=None, help="results directory (default: a new temporary one)")
    ap.add_argument("--device", default="cuda:0", help="the monolithic and prefill workers' device")
    ap.add_argument("--decode-device", default=None,
                    help="the decode workers' device (default --device; cuda:1 puts the decode on a second GPU)")
    ap.add_argument("--config", default=None, help="1b (default on CUDA) or tiny (default on the CPU)")
    ap.add_argument("--pdrouter", default=os.environ.get("PDROUTER"))
    ap.add_argument("--pdsim", default=os.environ.get("PDSIM"))
    ap.add_argument("--pdshim-lib", default=os.environ.get("PDSHIM_LIB"))
    ap.add_argument("--pdshim-py", default=os.environ.get("PDSHIM_PY") or os.path.join(ROOT, "worker-shim", "python"))
    ap.add_argument("--python", default=None,
                    help="the interpreter (with PyTorch) that runs the workers: default $PDMODEL_PYTHON, else this "
                    "one if it imports torch, else /usr/bin/python3 if that one does")
    ap.add_argument("--lengths", default=None, help="prompt lengths (default 128,2048,8192; CPU 128,512,1024)")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="default 32 (CPU 8)")
    ap.add_argument("--reps", type=int, default=None, help="timed requests per length (default 5; CPU 2)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--backends", default=None, help="default cuda_ipc,tcp,tcp_layers (CPU tcp,tcp_layers)")
    ap.add_argument("--kill-backend", default="cuda_ipc", help="the backend whose pair runs the kill test")
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--kv-timeout-ms", type=int, default=30000)
    ap.add_argument("--request-timeout-s", type=int, default=120)
    ap.add_argument("--start-timeout-s", type=int, default=300)
    ap.add_argument("--skip-hf-check", action="store_true")
    ap.add_argument("--require-stream-layers", action="store_true",
                    help="fail (instead of reporting 'not run') when the shim has no streamed offers")
    a = ap.parse_args()
    cpu = not a.device.startswith("cuda")
    a.decode_device = a.decode_device or a.device
    if a.decode_device.startswith("cuda") == cpu:
        ap.error("--decode-device %s and --device %s: both on CUDA or both on the CPU" % (a.decode_device, a.device))
    a.config = a.config or ("tiny" if cpu else "1b")
    a.lengths = [int(x) for x in (a.lengths or ("128,512,1024" if cpu else "128,2048,8192")).split(",")]
    a.max_new_tokens = a.max_new_tokens or (8 if cpu else 32)
    a.reps = a.reps if a.reps is not None else (2 if cpu else 5)
    a.backends = (a.backends or ("tcp,tcp_layers" if cpu else "cuda_ipc,tcp,tcp_layers")).split(",")
    for b in a.backends:
        if b not in BACKENDS:
            ap.error("unknown backend %s (one of %s)" % (b, ", ".join(BACKENDS)))
    bd = a.build_dir
    a.pdrouter = a.pdrouter or (bd and os.path.join(bd, "pdrouter"))
    a.pdsim = a.pdsim or (bd and os.path.join(bd, "pdsim"))
    a.pdshim_lib = a.pdshim_lib or (bd and os.path.join(bd, "libpdshim.so"))
    for k in ("pdrouter", "pdsim", "pdshim_lib"):
        v = getattr(a, k)
        if not v or not os.path.exists(v):
            print("test_model_pd: %s not found (%r): pass --%s, set $%s or give the build directory" % (
                k, v, k.replace("_", "-"), k.upper()), file=sys.stderr)
            return 2
        setattr(a, k, os.path.abspath(v))
    if not os.path.exists(os.path.join(a.pdshim_py, "pdshim.py")):
        print("test_model_pd: pdshim.py not in %s (--pdshim-py / $PDSHIM_PY)" % a.pdshim_py, file=sys.stderr)
        return 2
    a.pdshim_py = os.path.abspath(a.pdshim_py)
    a.python = a.python or torch_python()
    a.out = a.out or tempfile.mkdtemp(prefix="pdmodel-")
    return Bench(a).main()


if __name__ == "__main__":
    sys.exit(main())
