#!/usr/bin/env python3
"""Decodes killed under load, measured: the failures a client sees, with and without stream migration
(docs/operations.md, "Stream migration").

    PDR_BUILD=build python3 bench/decode_kills.py [--prefills 2] [--decodes 4] [--concurrency 32]
                                                  [--seconds 60] [--kill-every 10] [--down 2]
                                                  [--tokens 64-128] [--us-per-token 25000]
    PDR_BUILD=build python3 bench/decode_kills.py --quick

--prefills and --decodes pdsim workers (--us-per-token between output tokens) behind one router;
--concurrency client threads send streaming requests from start to end, each on a fresh connection with
its own X-Request-Id: one of 96 distinct requests, a third each /generate (text prompt), /v1/completions
and /v1/chat/completions, greedy (temperature 0), --tokens output tokens (spread over the range), so a
stream lasts seconds. Every --kill-every seconds one decode (round robin) is sent SIGKILL while it
streams (a request it took is a stream its client has begun, 5 token times from its end), and --down
seconds later started again on its ports; the run waits until the router's health checks see it up before
the next kill. The load runs --seconds in all; no new request starts after that.

Every answer is checked as a client would: status 200, an event stream that parses (never half an event),
no error event, [DONE] at its end, no broken connection, and its text (the /generate text, or the
completion or chat deltas put together) equal to the undisturbed run's, which one pdsim --role both answers
for each distinct request before the runs (pdsim's model is autoregressive: a moved stream's text is an
undisturbed run's). Each failure is named by its kind.

Two rows: migration.enabled true (the default) and false. Streams moved and their outcomes are the
router's pdr_stream_migrations_total; which request was moved, its log's "migration N goes on" lines (by
request id). Latency: the client's total time per request, and the longest gap between two reads of one
stream, for the moved and the other completed streams. Exits non-zero on any client-visible failure with
migration on, on none with migration off (the check would not see them), on a kill that found no stream
on its decode, or on a restart that did not complete. Prints a markdown table.
"""

import argparse
import http.client
import json
import os
import re
import signal
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import pdtest  # noqa: E402
from test_router import metric_value, metrics, router  # noqa: E402

N_REQUESTS = 96
ROUTES = ("/generate", "/v1/completions", "/v1/chat/completions")
MOVED_LINE = re.compile(r"request (\S+): the decode \S+ broke the stream .* migration \d+ goes on")


def pctl(xs, q):
    """The nearest-rank q-quantile of xs (0 < q <= 1); None for no values."""
    if not xs:
        return None
    xs = sorted(xs)
    return xs[max(0, min(len(xs) - 1, int(-(-q * len(xs) // 1)) - 1))]


def requests(lo, hi):
    """The distinct requests: [(path, body bytes)]."""
    out = []
    for i in range(N_REQUESTS):
        path = ROUTES[i % 3]
        tokens = lo + (i * 37) % (hi - lo + 1)
        words = " ".join("kill%d word%d" % (i, k) for k in range(8 + i % 24))
        if path == "/generate":
            b = {"text": words, "stream": True, "sampling_params": {"max_new_tokens": tokens, "temperature": 0}}
        elif path == "/v1/completions":
            b = {"model": "pdsim", "prompt": words, "max_tokens": tokens, "temperature": 0, "stream": True}
        else:
            b = {"model": "pdsim", "max_tokens": tokens, "temperature": 0, "stream": True,
                 "messages": [{"role": "system", "content": "Answer at length."},
                              {"role": "user", "content": words}]}
        out.append((path, json.dumps(b).encode()))
    return out


def events(raw):
    """The data payloads of a text/event-stream body; raises ValueError on a block that is not a whole event
    (a JSON payload that does not parse, or bytes after the last blank line)."""
    text = raw.decode()
    blocks = text.replace("\r\n", "\n").split("\n\n")
    if blocks[-1].strip():
        raise ValueError("the stream ends inside an event: %r" % blocks[-1][-120:])
    out = []
    for block in blocks:
        lines = [l[5:].lstrip(" ") for l in block.split("\n") if l.startswith("data:")]
        if not lines:
            continue
        payload = "\n".join(lines)
        out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def client_text(path, evs):
    """(text, error events, [DONE] seen last, finish_reason) of a stream as a client reads it."""
    text, errors, done, finish = "", [], False, None
    for k, e in enumerate(evs):
        if e == "[DONE]":
            done = k == len(evs) - 1
            continue
        if "error" in e:
            errors.append(e["error"])
            continue
        if path == "/generate":
            text = e.get("text", "")
            finish = (e.get("meta_info") or {}).get("finish_reason") or finish
            continue
        for c in e.get("choices", []):
            text += (c.get("text") if path == "/v1/completions" else (c.get("delta") or {}).get("content")) or ""
            finish = c.get("finish_reason") or finish
    if isinstance(finish, dict):
        finish = finish.get("type")
    return text, errors, done, finish


def references(reqs):
    """Each distinct request's (text, finish_reason), from one pdsim --role both."""
    both = pdtest.start(["pdsim", "--role", "both", "--port", "{port}"], name="pdsim-both")
    refs = []
    for path, b in reqs:
        st, _, raw = pdtest.request(both.port, "POST", path, b, headers={"Content-Type": "application/json"})
        text, errors, done, finish = client_text(path, events(raw))
        if st != 200 or errors or not done or not text:
            sys.exit("reference run of %s: %d %r" % (path, st, raw[:300]))
        refs.append((text, finish))
    both.stop()
    return refs


class Load:
    """Client threads, each sending one stream after another on a fresh connection until --seconds; every
    answer is recorded as (request id, distinct request index, outcome, total seconds, longest gap seconds)."""

    def __init__(self, port, reqs, refs, concurrency, seconds, us_per_token):
        self.port, self.reqs, self.refs, self.us_per_token = port, reqs, refs, us_per_token
        self.tokens = [json.loads(b).get("max_tokens") or json.loads(b)["sampling_params"]["max_new_tokens"]
                       for _, b in reqs]
        self.deadline = time.monotonic() + seconds
        self.lock = threading.Lock()
        self.results = []
        self.live = {}  # request id -> when its stream should end, from its first byte on
        self.threads = [threading.Thread(target=self.client, args=(k,), daemon=True) for k in range(concurrency)]

    def one(self, rid, i, us_per_token):
        path, b = self.reqs[i]
        tokens = self.tokens[i]
        t0 = time.monotonic()
        gap, last = 0.0, None
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("POST", path, body=b, headers={"Content-Type": "application/json", "X-Request-Id": rid})
            resp = conn.getresponse()
            chunks = []
            while True:
                c = resp.read1(65536)
                now = time.monotonic()
                if not c:
                    break
                if last is not None:
                    gap = max(gap, now - last)
                else:
                    with self.lock:
                        self.live[rid] = now + tokens * us_per_token / 1e6
                last = now
                chunks.append(c)
            raw = b"".join(chunks)
        except (OSError, http.client.HTTPException) as e:
            return "broken connection: %r" % e, time.monotonic() - t0, gap
        finally:
            conn.close()
            with self.lock:
                self.live.pop(rid, None)
        total = time.monotonic() - t0
        if resp.status != 200:
            return "status %d: %r" % (resp.status, raw[:200]), total, gap
        try:
            text, errors, done, finish = client_text(path, events(raw))
        except ValueError as e:
            return "unparseable stream: %s" % e, total, gap
        if errors:
            return "error event: %r" % (errors[0],), total, gap
        if not done:
            return "no [DONE]", total, gap
        want_text, want_finish = self.refs[i]
        if text != want_text or finish != want_finish:
            return "text mismatch (%s, %d chars, finish %r; undisturbed %d chars, finish %r)" % (
                path, len(text), finish, len(want_text), want_finish), total, gap
        return "ok", total, gap

    def client(self, k):
        n = 0
        while time.monotonic() < self.deadline:
            i = (k * 7919 + n * 13) % len(self.reqs)
            rid = "kill-%d-%d" % (k, n)
            n += 1
            outcome, total, gap = self.one(rid, i, self.us_per_token)
            with self.lock:
                self.results.append((rid, i, outcome, total, gap))

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        for t in self.threads:
            t.join(60)


def healthy(r, url):
    return metric_value(metrics(r), "pdr_worker_healthy", role="decode", url=url)


def start_decode(flags, ports=None):
    return pdtest.start(["pdsim", "--role", "decode", "--port", "{port}"] + flags, name="pdsim-decode",
                        ports=ports)


def kill_and_restart(r, ds, k, flags, down, load):
    """SIGKILL of ds[k] once it holds a stream in the middle (a client has its first bytes and 5 token times
    are left), its restart on its ports after down seconds, and the wait until the router sees it healthy.
    Returns the requests it held at the kill."""
    d = ds[k]
    url = "http://127.0.0.1:%d" % d.port
    margin = max(0.2, 5 * load.us_per_token / 1e6)

    def streaming():
        st = pdtest.request_json(d.port, "GET", "/pdsim/stats")
        now = time.monotonic()
        with load.lock:
            mid = [e["x_request_id"] for e in st["last"] if load.live.get(e.get("x_request_id"), 0) > now + margin]
        return st["inflight"] if mid else None

    held = pdtest.poll_until(streaming, 10, "%s to hold a stream" % url)
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait()
    time.sleep(down)
    ds[k] = start_decode(flags, ports=dict(d.ports))
    pdtest.poll_until(lambda: healthy(r, url) == 1, 15, "%s seen up again" % url)
    return held


def run(args, reqs, refs, migrate):
    fd, alog = tempfile.mkstemp(prefix="pdr-kills-access-", suffix=".log")
    os.close(fd)
    flags = ["--decode-us-per-token", str(args.us_per_token)]
    try:
        ps = [pdtest.start(["pdsim", "--role", "prefill", "--port", "{port}", "--bootstrap-port", "{bport}"],
                           name="pdsim-prefill") for _ in range(args.prefills)]
        ds = [start_decode(flags) for _ in range(args.decodes)]
        conf = ("health: { interval_ms: 200, timeout_ms: 1000, rise: 1, fall: 2 }\n"
                "log: { access_log: %s, level: info }\n"
                "migration: { enabled: %s }\n" % (alog, "true" if migrate else "false"))
        r = router(ps, ds, config=conf)
        kills, held = 0, 0
        t0 = time.monotonic()
        with Load(r.port, reqs, refs, args.concurrency, args.seconds, args.us_per_token) as load:
            k = 0
            while True:
                t_kill = t0 + args.kill_every * (kills + 1)
                # A kill needs its streams to run to their ends: none later than a stream's length before the end.
                if t_kill > t0 + args.seconds - args.down - 0.5:
                    break
                time.sleep(max(0.0, t_kill - time.monotonic()))
                held += kill_and_restart(r, ds, k, flags, args.down, load)
                kills += 1
                k = (k + 1) % len(ds)
        secs = time.monotonic() - t0
        if any(t.is_alive() for t in load.threads):
            sys.exit("a client thread did not finish")
        m = metrics(r)
        mig = {o: int(metric_value(m, "pdr_stream_migrations_total", outcome=o) or 0)
               for o in ("moved", "completed", "refused", "budget", "unreadable", "failed")}
        st = r.stop()
        if st != 0:
            sys.exit("pdrouter exit status %d" % st)
        moved_ids = []  # a stream moved twice is named twice
        with open(r.log_path, errors="replace") as f:
            for line in f:
                mm = MOVED_LINE.search(line)
                if mm:
                    moved_ids.append(mm.group(1))
        access = {}
        with open(alog) as f:
            for line in f:
                a = json.loads(line)
                access[a["request_id"]] = a
        return load.results, mig, moved_ids, access, kills, held, secs, r.log_path
    finally:
        pdtest.stop_all()


def ms(x):
    return "-" if x is None else "%.0f" % (x * 1000)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prefills", type=int, default=2)
    ap.add_argument("--decodes", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=60.0, help="seconds of load (new requests start until then)")
    ap.add_argument("--kill-every", type=float, default=10.0, help="seconds between kills")
    ap.add_argument("--down", type=float, default=2.0, help="seconds a killed decode stays down")
    ap.add_argument("--tokens", default="64-128", help="output tokens per request, LO-HI")
    ap.add_argument("--us-per-token", type=int, default=25000, help="decode time between output tokens (us)")
    ap.add_argument("--quick", action="store_true",
                    help="the smallest run (ctest): 8 clients, 4 s, one kill, 24-48 tokens at 20 ms, 0.5 s down")
    args = ap.parse_args()
    if args.quick:
        args.concurrency, args.seconds, args.kill_every, args.down = 8, 4.0, 2.0, 0.5
        args.tokens, args.us_per_token = "24-48", 20000
    lo, hi = (int(x) for x in args.tokens.split("-"))
    reqs = requests(lo, hi)
    refs = references(reqs)
    errors = []
    print("| migration.enabled | requests completed | client-visible failures | kills | requests on the killed "
          "decode | streams moved | migrations refused or failed | retried before the stream began | "
          "moved total ms p50 / p99 | unmoved total ms p50 / p99 | "
          "moved longest gap ms p50 / p99 | unmoved longest gap ms p50 / p99 | seconds |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---|---|---|---|---:|")
    for migrate in (True, False):
        results, mig, moved_ids, access, kills, held, secs, rlog = run(args, reqs, refs, migrate)
        fails = [(rid, o) for rid, _, o, _, _ in results if o != "ok"]
        ok = [(rid, total, gap) for rid, _, o, total, gap in results if o == "ok"]
        moved = set(moved_ids)
        mv = [(t, g) for rid, t, g in ok if rid in moved]
        un = [(t, g) for rid, t, g in ok if rid not in moved]
        refused = sum(v for o, v in mig.items() if o not in ("moved", "completed"))
        retried = sum(1 for rid, a in access.items() if a.get("attempts", 0) > 1 and rid not in moved)
        kinds = {}
        for _, o in fails:
            kinds.setdefault(o.split(":")[0].split(" (")[0], []).append(o)
        by_kind = ", ".join("%d %s" % (len(v), k) for k, v in sorted(kinds.items())) or "-"
        print("| %s | %d | %d (%s) | %d | %d | %d | %d | %d | %s / %s | %s / %s | %s / %s | %s / %s | %.1f |" % (
            "true" if migrate else "false", len(ok), len(fails), by_kind, kills, held, mig["moved"], refused, retried,
            ms(pctl([t for t, _ in mv], 0.5)), ms(pctl([t for t, _ in mv], 0.99)),
            ms(pctl([t for t, _ in un], 0.5)), ms(pctl([t for t, _ in un], 0.99)),
            ms(pctl([g for _, g in mv], 0.5)), ms(pctl([g for _, g in mv], 0.99)),
            ms(pctl([g for _, g in un], 0.5)), ms(pctl([g for _, g in un], 0.99)), secs), flush=True)
        for kind, os_ in sorted(kinds.items()):
            print("  migration %s: %d x %s, e.g. %s" % (migrate, len(os_), kind, os_[0]), file=sys.stderr)
        for rid, o in fails[:5] if migrate else [f for f in fails if "error event" not in f[1]][:5]:
            a = access.get(rid) or {}
            print("  migration %s: %s: %s; access log: status %s attempts %s error %s retry_error %s decode %s "
                  "phases_us %s" % (migrate, rid, o, a.get("status"), a.get("attempts"), a.get("error"),
                                    a.get("retry_error"), a.get("decode"), a.get("phases_us")), file=sys.stderr)
        if fails:
            print("  migration %s: router log %s" % (migrate, rlog), file=sys.stderr)
        # Each moved stream: a later attempt on a new pair, the failure it moved from named.
        for rid in moved:
            a = access.get(rid) or {}
            if not (a.get("attempts", 0) > 1 and a.get("retry_error")):
                errors.append("moved stream %s: access log %r" % (rid, a))
        if migrate and fails:
            errors.append("%d client-visible failures with migration.enabled true" % len(fails))
        if not migrate and not fails:
            errors.append("no client-visible failure with migration.enabled false: the check did not work")
        if migrate and mig["moved"] == 0:
            errors.append("no stream moved with migration.enabled true")
        if migrate and len(moved_ids) != mig["moved"]:
            errors.append("the router's log names %d moved streams, its metric %d" % (len(moved_ids), mig["moved"]))
    if errors:
        sys.exit("decode_kills: " + "; ".join(errors))


if __name__ == "__main__":
    main()
