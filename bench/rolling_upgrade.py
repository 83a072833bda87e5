#!/usr/bin/env python3
"""A rolling upgrade under load, measured: requests served, client-visible failures, and prefill/decode
pairs formed by model revision, with and without compatible pairs (docs/operations.md, "Compatible
pairs and rolling upgrades").

    PDR_BUILD=build python3 bench/rolling_upgrade.py [--prefills 4] [--decodes 4] [--concurrency 16]
                                                     [--settle 5] [--gap 3]

N pdsim prefills and N decodes on revision rev-1 behind one router; --concurrency client threads send
/generate (one of 64 prompts of 64 words, 8 output tokens) on keep-alive connections from start to end.
After --settle seconds the workers are restarted one at a time onto revision rev-2, in the order an
operator would roll a fleet: the first half of the prefills, then the first half of the decodes, then
the other prefills, then the other decodes, --gap seconds apart; the load runs --settle seconds more.
Each restart is the documented procedure: drain the worker (admin API), wait until it has nothing in
flight, stop it, wait until the router's checks see it down (pdr_worker_healthy 0), start it again on
its ports with --revision rev-2, wait until it is healthy and (compat on) its new identity is read, then
re-activate it. At every step one revision has both a prefill and a decode serving.

Which pair served a request is read from its answer. pdsim's KV bytes are a function of the prompt and
of the worker's KV layout (its reported identity, revision included), and a decode reads them through
its own layout, so a pair of two revisions answers a text that neither revision answers whole (as a real
decode given another layout's KV answers garbage). Before the run, one pdsim --role both of each
revision answers every prompt: the reference texts. Each served answer must equal one of its prompt's two
references (rev-1 pair or rev-2 pair); one that equals neither is an incompatible pair.

Two rows: compat.enabled false (the check must find incompatible pairs there, else it could not see
them) and compat.enabled true (it must find none). Exits non-zero on any failed request (transport error,
non-2xx), an incompatible pair with compat on, none found with compat off, or a restart that did not
complete. Prints a markdown table.
"""

import argparse
import http.client
import json
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import pdtest  # noqa: E402
from test_router import metric_value, metrics, router  # noqa: E402

OLD, NEW = "rev-1", "rev-2"
PROMPTS = [" ".join("upgrade%d word%d" % (i, k) for k in range(32)) for i in range(64)]
MAX_NEW = 8
SIM_FLAGS = ["--prefill-us-per-token", "20", "--decode-us-per-token", "1000"]


def body(i):
    return json.dumps({"text": PROMPTS[i], "stream": False,
                       "sampling_params": {"max_new_tokens": MAX_NEW, "ignore_eos": True}})


def start_sim(role, revision, ports=None):
    argv = ["pdsim", "--role", role, "--port", "{port}", "--revision", revision] + SIM_FLAGS
    if role == "prefill":
        argv += ["--bootstrap-port", "{bport}"]
    return pdtest.start(argv, name="pdsim-%s-%s" % (role, revision), ports=ports)


def references():
    """{revision: [text of prompt i]} from one pdsim --role both per revision."""
    refs = {}
    for rev in (OLD, NEW):
        s = start_sim("both", rev)
        texts = []
        for i in range(len(PROMPTS)):
            st, _, b = pdtest.request(s.port, "POST", "/generate", body=body(i))
            if st != 200:
                sys.exit("reference pdsim (%s): %d %r" % (rev, st, b[:200]))
            texts.append(json.loads(b)["text"])
        s.stop()
        refs[rev] = texts
    if any(a == b for a, b in zip(refs[OLD], refs[NEW])):
        sys.exit("the two revisions answer a prompt alike: the check could not tell them apart")
    return refs


class Load:
    """Client threads, each on its own keep-alive connection, sending until stop; every answer is
    classified by which reference it equals."""

    def __init__(self, port, refs, concurrency):
        self.port, self.refs = port, refs
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.counts = {"old": 0, "new": 0, "mixed": 0}
        self.failures = []
        self.threads = [threading.Thread(target=self.client, args=(k,), daemon=True) for k in range(concurrency)]

    def client(self, k):
        conn, n = None, 0
        while not self.stop.is_set():
            i = (k * 7919 + n) % len(PROMPTS)
            n += 1
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                conn.request("POST", "/generate", body=body(i), headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                data = resp.read()
                if resp.getheader("connection", "").lower() == "close":
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException) as e:
                with self.lock:
                    self.failures.append("transport: %r" % e)
                if conn is not None:
                    conn.close()
                conn = None
                continue
            with self.lock:
                if resp.status != 200:
                    self.failures.append("%d %r" % (resp.status, data[:300]))
                    continue
                text = json.loads(data)["text"]
                if text == self.refs[OLD][i]:
                    self.counts["old"] += 1
                elif text == self.refs[NEW][i]:
                    self.counts["new"] += 1
                else:
                    self.counts["mixed"] += 1
        if conn is not None:
            conn.close()

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(60)


def admin(r, method, path, expect=200):
    return pdtest.request_json(r.ports["admin"], method, path, {} if method == "POST" else None, expect=expect)


def worker(r, url):
    for w in admin(r, "GET", "/admin/v1/workers")["workers"]:
        if w["url"] == url:
            return w
    raise AssertionError("worker %s not listed" % url)


def healthy(r, url, role):
    return metric_value(metrics(r), "pdr_worker_healthy", role=role, url=url)


def restart(r, procs, k, role, compat):
    """The documented procedure for one worker; replaces procs[k] with the rev-2 process."""
    old = procs[k]
    url = "http://127.0.0.1:%d" % old.port
    wid = worker(r, url)["id"]
    admin(r, "POST", "/admin/v1/workers/%s/drain" % wid, expect=202)
    pdtest.poll_until(lambda: (lambda w: w["state"] == "drained" and w["in_flight"] == 0)(worker(r, url)), 30,
                      "%s drained" % wid)
    old.stop()
    pdtest.poll_until(lambda: healthy(r, url, role) == 0, 10, "%s seen down" % wid)
    new = start_sim(role, NEW, ports=dict(old.ports))
    procs[k] = new
    pdtest.poll_until(lambda: healthy(r, url, role) == 1, 10, "%s seen up" % wid)
    if compat:
        pdtest.poll_until(lambda: (lambda w: w["compat_group"] and (w["identity"] or {}).get("revision") == NEW)(
            worker(r, url)), 10, "%s identity re-read" % wid)
    admin(r, "POST", "/admin/v1/workers/%s/activate" % wid)


def run(args, refs, compat):
    try:
        ps = [start_sim("prefill", OLD) for _ in range(args.prefills)]
        ds = [start_sim("decode", OLD) for _ in range(args.decodes)]
        conf = ("policy: { prefill: round_robin, decode: round_robin }\n"
                "health: { interval_ms: 100, timeout_ms: 500, rise: 1, fall: 1 }\n"
                "compat: { enabled: %s }\n" % ("true" if compat else "false"))
        r = router(ps, ds, config=conf)
        if compat:
            pdtest.poll_until(lambda: all(w["compat_group"] for w in admin(r, "GET", "/admin/v1/workers")["workers"]),
                              10, "identities read")
        hp, hd = (args.prefills + 1) // 2, (args.decodes + 1) // 2
        order = ([("prefill", ps, k) for k in range(hp)] + [("decode", ds, k) for k in range(hd)] +
                 [("prefill", ps, k) for k in range(hp, args.prefills)] +
                 [("decode", ds, k) for k in range(hd, args.decodes)])
        t0 = time.monotonic()
        with Load(r.port, refs, args.concurrency) as load:
            time.sleep(args.settle)
            for role, procs, k in order:
                restart(r, procs, k, role, compat)
                time.sleep(args.gap)
            time.sleep(args.settle)
        secs = time.monotonic() - t0
        if any(t.is_alive() for t in load.threads):
            sys.exit("a client thread did not finish")
        m = metrics(r)
        pool = {"pool": "default"}
        extra = {name: int(metric_value(m, name, **pool) or 0)
                 for name in ("pdr_compat_repicks_total", "pdr_incompatible_pairs_total",
                              "pdr_compat_unknown_pairs_total")}
        st = r.stop()
        if st != 0:
            sys.exit("pdrouter exit status %d" % st)
        return load.counts, load.failures, secs, extra
    finally:
        pdtest.stop_all()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prefills", type=int, default=4)
    ap.add_argument("--decodes", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--settle", type=float, default=5.0,
                    help="seconds of load before the first and after the last restart")
    ap.add_argument("--gap", type=float, default=3.0, help="seconds between restarts")
    args = ap.parse_args()
    refs = references()
    errors = []
    print("| compat.enabled | requests served | failed | pairs rev-1/rev-1 | pairs rev-2/rev-2 | incompatible pairs "
          "(rev-1 with rev-2) | compat re-picks | 503 no compatible pair | seconds |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for compat in (False, True):
        counts, failures, secs, extra = run(args, refs, compat)
        served = sum(counts.values())
        print("| %s | %d | %d | %d | %d | %d | %d | %d | %.1f |" % (
            "true" if compat else "false", served, len(failures), counts["old"], counts["new"], counts["mixed"],
            extra["pdr_compat_repicks_total"], extra["pdr_incompatible_pairs_total"], secs), flush=True)
        for f in failures[:5]:
            print("  failure (compat %s): %s" % (compat, f), file=sys.stderr)
        if failures:
            errors.append("%d failed requests with compat.enabled %s" % (len(failures), compat))
        if compat and counts["mixed"]:
            errors.append("%d incompatible pairs with compat.enabled true" % counts["mixed"])
        if not compat and not counts["mixed"]:
            errors.append("no incompatible pair seen with compat.enabled false: the check did not work")
        if counts["old"] == 0 or counts["new"] == 0:
            errors.append("a revision served nothing (compat %s): %r" % (compat, counts))
    if errors:
        sys.exit("rolling_upgrade: " + "; ".join(errors))


if __name__ == "__main__":
    main()
