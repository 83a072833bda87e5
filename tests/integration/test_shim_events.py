#!/usr/bin/env python3
"""Integration tests of the shims' event and load reports (docs/internals/shim-events.md): the signed
channel (POST /shim/v1/events on the admin listener), load in admin status and metrics, worker
incarnations, room events attached to the request in flight, and decode admission by reported free KV.

Usage: test_shim_events.py SCENARIO   (one of the functions named scenario_*; ctest runs each separately)

Batches are signed here with Python's hmac module, the way libpdshim signs them, each with the key derived
for its worker (worker_key mirrors `pdrouter --derive-shim-key`, which scenario_worker_keys checks it
against); every wait polls for the event (pdtest.poll_until).
"""

import base64
import hashlib
import hmac
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check, request, request_json  # noqa: E402
from test_router import metric_value, metrics, router, sim, stats  # noqa: E402

KEY = b"k" * 40  # the master key: shim_events.key_file


def key_file(secret=KEY):
    fd, path = tempfile.mkstemp(prefix="pdrouter-events-key-")
    with os.fdopen(fd, "wb") as f:
        f.write(secret)
    return path


def key_id(secret):
    return hashlib.sha256(secret).hexdigest()[:8]


def worker_key(identity, master=KEY):
    """The key a worker's shim signs with (docs/security.md, "Shim event keys"): the hex of
    HMAC-SHA256(master, "pdr-shim-events-key-v1\n" + identity); identity "worker URL" or "bootstrap H:P"."""
    if identity.startswith("http"):
        identity = "worker " + identity
    elif not identity.startswith(("worker ", "bootstrap ")):
        identity = "bootstrap " + identity
    return hmac.new(master, b"pdr-shim-events-key-v1\n" + identity.encode(), hashlib.sha256).hexdigest().encode()


def derived_key_file(master_path, worker):
    """The worker's key file, written by `pdrouter --derive-shim-key` as an operator would."""
    out = subprocess.run([pdtest.binary("pdrouter"), "--derive-shim-key", master_path, worker], capture_output=True,
                         timeout=10)
    assert out.returncode == 0, out.stderr
    return key_file(out.stdout)


class Sender:
    """One shim instance: its id and its sequence numbers. It signs with its worker's derived key unless
    given another secret."""

    def __init__(self, worker, secret=None, inst=None, boot=None):
        self.worker, self.boot = worker, boot
        self.secret = secret or worker_key(worker or boot)
        self.inst = inst or os.urandom(16).hex()
        self.seq = 0

    def header(self, body, ts=None, seq=None, secret=None, kid=None):
        if seq is None:
            self.seq += 1
            seq = self.seq
        ts = int(time.time() * 1000) if ts is None else ts
        secret = secret or self.secret
        msg = b"pdr-events-v1\n%d\n%s\n%d\n" % (ts, self.inst.encode(), seq) + body
        sig = base64.urlsafe_b64encode(hmac.new(secret, msg, hashlib.sha256).digest()).rstrip(b"=").decode()
        return "v1 kid=%s ts=%d inst=%s seq=%d sig=%s" % (kid or key_id(secret), ts, self.inst, seq, sig)

    def body(self, *lines):
        head = {"type": "batch", "worker": self.worker or "", "bootstrap": self.boot or "", "dropped": 0}
        return ("\n".join(json.dumps(x) for x in (head,) + lines) + "\n").encode()

    def post(self, r, body, hdr=None):
        hdrs = {"Content-Type": "application/x-ndjson"}
        if hdr is not False:
            hdrs["Pdr-Signature"] = hdr or self.header(body)
        st, _, out = request(r.ports["admin"], "POST", "/shim/v1/events", body, headers=hdrs)
        return st, out

    def load(self, r, **kv):
        st, out = self.post(r, self.body(dict(type="load", **kv)))
        assert st == 200, (st, out)


def shim_view(r):
    return request_json(r.ports["admin"], "GET", "/admin/v1/shim")


def worker_by_url(r, url):
    ws = request_json(r.ports["admin"], "GET", "/admin/v1/workers")["workers"]
    return [w for w in ws if w["url"] == url][0]


def events_router(prefills, decodes, extra="", **kw):
    path = key_file()
    return router(prefills, decodes, config="shim_events: { key_file: %s }\n%s" % (path, extra), **kw)


def scenario_auth():
    """A signed batch is accepted; unsigned ones, ones under a key that is not the worker's (an unknown key,
    the master key), wrongly signed, stale and replayed ones are refused with 401 in the OpenAI error shape
    and counted by cause (admin view and metrics)."""
    p, d = sim("prefill"), sim("decode")
    r = events_router([p], [d])
    try:
        url = "http://127.0.0.1:%d" % d.port
        s = Sender(url)
        body = s.body(dict(type="load", kv_free_bytes=1000, queue_depth=1))
        st, out = s.post(r, body)
        check(st == 200, "signed batch: %d %s" % (st, out), r)
        cases = [
            ("unsigned", s.post(r, body, hdr=False)),
            ("unsigned", s.post(r, body, hdr="v1 kid=zz")),
            ("wrong_worker", s.post(r, body, hdr=s.header(body, secret=b"x" * 40))),
            ("shared_key", s.post(r, body, hdr=s.header(body, secret=KEY))),
            ("bad_signature", s.post(r, body, hdr=s.header(body, secret=b"x" * 40, kid=key_id(s.secret)))),
            ("bad_signature", s.post(r, body + b"\n", hdr=s.header(body))),
            ("stale", s.post(r, body, hdr=s.header(body, ts=int(time.time() * 1000) - 120000))),
            ("replayed", s.post(r, body, hdr=s.header(body, seq=1))),
        ]
        want = {}
        for cause, (st, out) in cases:
            err = json.loads(out)["error"]
            check(st == 401 and err["type"] == "authentication_error" and cause in err["message"],
                  "%s: %d %s" % (cause, st, out), r)
            want[cause] = want.get(cause, 0) + 1
        v = shim_view(r)
        for cause, n in want.items():
            check(v["refused"][cause] == n, "refused[%s] = %s, want %d" % (cause, v["refused"], n), r)
        check(v["batches"] == 1, "batches %s" % v, r)
        m = metrics(r)
        check(metric_value(m, "pdr_shim_batches_refused_total", cause="replayed") == 1, "metric replayed", r)
        # Signed but not the format: 400.
        bad = b'{"type":"load"}\n'
        st, out = s.post(r, bad)
        check(st == 400 and json.loads(out)["error"]["code"] == 400, "malformed: %d %s" % (st, out), r)
        # A large batch (1000 room events, ~150 KiB) is taken; one over 1 MiB is not.
        big = s.body(*[dict(type="room", room=i, event="done", role="decode", bytes=1, total=1, usec=1,
                            backend="tcp", code=0, reason="x" * 50) for i in range(1000)])
        st, out = s.post(r, big)
        check(st == 200 and json.loads(out)["lines"] == 1001, "big batch: %d %s" % (st, out[:200]), r)
        huge = b"x" * ((1 << 20) + 1)
        out, _ = pdtest.raw_exchange(r.ports["admin"], b"POST /shim/v1/events HTTP/1.1\r\nHost: x\r\n"
                                     b"Content-Length: %d\r\nPdr-Signature: %s\r\n\r\n" %
                                     (len(huge), s.header(huge).encode()) + huge)
        check(out.startswith(b"HTTP/1.1 413"), "over 1 MiB: %r" % out[:100], r)
        # The admin token is for operators: it neither opens nor closes this route.
        check(r.alive(), "router died", r)
    finally:
        pdtest.stop_all()


def scenario_worker_keys():
    """Each worker's shim has its own key, derived from the master: `pdrouter --derive-shim-key` prints the
    key the KDF gives (checked against Python's HMAC). Worker A's key speaks for A only: a batch signed with
    it naming worker B is refused (wrong_worker, 401, counted) and B's state is untouched; A's own batch is
    taken, even when it also names B's bootstrap address (the batch speaks for its URL alone). The master key
    itself signs for no worker (shared_key). A worker past 8 live instances gets 429 (too_many_instances)
    while the others' new instances are still taken; the refusals are logged."""
    p, d = sim("prefill"), sim("decode")
    master = key_file()
    r = router([p], [d], config="shim_events: { key_file: %s }" % master)
    try:
        ua, ub = "http://127.0.0.1:%d" % d.port, "http://127.0.0.1:%d" % p.port
        boot_b = "127.0.0.1:%d" % p.ports["bport"]
        for w in (ua, ub + "/", boot_b):
            with open(derived_key_file(master, w), "rb") as f:
                got = f.read()
            want = worker_key(w.rstrip("/")) + b"\n"
            check(got == want, "derive %s: %r, the KDF gives %r" % (w, got, want), r)
        a = Sender(ua)
        forged = Sender(ub, secret=worker_key(ua))  # A's key, claiming B
        st, out = forged.post(r, forged.body(dict(type="load", kv_free_bytes=1, queue_depth=99)))
        err = json.loads(out)["error"]
        check(st == 401 and "wrong_worker" in err["message"] and "--derive-shim-key" in err["message"],
              "A's key for B: %d %s" % (st, out), r)
        forged_boot = Sender(None, secret=worker_key(ua), boot=boot_b)  # A's key, claiming B's bootstrap
        st, out = forged_boot.post(r, forged_boot.body(dict(type="load", queue_depth=98)))
        check(st == 401 and b"wrong_worker" in out, "A's key for B's bootstrap: %d %s" % (st, out), r)
        check("load" not in worker_by_url(r, ub), "B's state changed: %s" % worker_by_url(r, ub), r)
        # A's own batch, naming B's bootstrap too: A's load only.
        a.boot = boot_b
        st, out = a.post(r, a.body(dict(type="load", kv_free_bytes=4242, queue_depth=7)))
        check(st == 200 and json.loads(out)["worker_known"], "A's own batch: %d %s" % (st, out), r)
        check(worker_by_url(r, ua)["load"]["queue_depth"] == 7, "A's load %s" % worker_by_url(r, ua), r)
        check("load" not in worker_by_url(r, ub), "A's batch spoke for B: %s" % worker_by_url(r, ub), r)
        # B through its bootstrap identity, with its own key.
        b = Sender(None, boot=boot_b)
        st, out = b.post(r, b.body(dict(type="load", queue_depth=5)))
        check(st == 200 and worker_by_url(r, ub)["load"]["queue_depth"] == 5, "B's own: %d %s" % (st, out), r)
        # The master key (every shim's key before per-worker keys) signs for nobody.
        old = Sender(ua, secret=KEY)
        st, out = old.post(r, old.body(dict(type="load", queue_depth=1)))
        check(st == 401 and b"shared_key" in out, "master key: %d %s" % (st, out), r)
        # Instances: A has one; seven more are taken, the ninth is refused; B's new instance is taken.
        for _ in range(7):
            Sender(ua).load(r, queue_depth=1)
        extra = Sender(ua)
        st, out = extra.post(r, extra.body(dict(type="load", queue_depth=1)))
        check(st == 429 and b"too_many_instances" in out, "ninth instance: %d %s" % (st, out), r)
        st, out = a.post(r, a.body(dict(type="load", queue_depth=3)))
        check(st == 200, "A's first instance goes on: %d %s" % (st, out), r)
        nb = Sender(ub)
        st, out = nb.post(r, nb.body(dict(type="load", queue_depth=4)))
        check(st == 200, "B locked out: %d %s" % (st, out), r)
        v = shim_view(r)
        check(v["refused"]["wrong_worker"] == 2 and v["refused"]["shared_key"] == 1 and
              v["refused"]["too_many_instances"] == 1, "refused %s" % v["refused"], r)
        m = metrics(r)
        check(metric_value(m, "pdr_shim_batches_refused_total", cause="wrong_worker") == 2, "metric", r)
        check(metric_value(m, "pdr_shim_batches_refused_total", cause="too_many_instances") == 1, "metric", r)
        log = pdtest.poll_until(lambda: (lambda t: t if "too_many_instances" in t else None)(r.log_tail(200)), 5,
                                "the refusal's log line")
        check("wrong_worker" in log and "shared_key" in log, "log: %s" % log, r)
    finally:
        pdtest.stop_all()


def scenario_load():
    """A load report shows in the worker's admin status (free KV, queue depth, instance id, report age)
    and in the per-worker metrics; a new instance id behind the same URL counts a restart, is recorded in
    the admin events ring, and resets the worker's health (an ejected worker serves again at once)."""
    p, d = sim("prefill"), sim("decode")
    r = events_router([p], [d], extra="health: { interval_ms: 60000 }")
    try:
        url = "http://127.0.0.1:%d" % d.port
        s = Sender(url)
        s.load(r, kv_free_bytes=123456, kv_total_bytes=200000, kv_bytes_per_token=64, queue_depth=3,
               active_rooms=2, block_size=16, kv_free_blocks=120)
        w = worker_by_url(r, url)
        check("load" in w, "no load in %s" % w, r)
        ld = w["load"]
        check(ld["kv_free_bytes"] == 123456 and ld["queue_depth"] == 3 and ld["active_rooms"] == 2 and
              ld["instance_id"] == s.inst and ld["last_report_ms_ago"] < 5000 and ld["restarts_total"] == 0,
              "load %s" % ld, r)
        m = metrics(r)
        check(metric_value(m, "pdr_worker_kv_free_bytes", worker=url, role="decode") == 123456,
              "metric kv free", r)
        check(metric_value(m, "pdr_worker_queue_depth", worker=url, role="decode") == 3, "metric queue", r)
        # The decode fails requests with 5xx until it is ejected (fall 3 by failures).
        request_json(d.port, "POST", "/pdsim/fault", {"fail_status": 500})
        body = {"text": "a b c", "sampling_params": {"max_new_tokens": 2}}
        for _ in range(6):
            request(r.port, "POST", "/generate", body)
            if worker_by_url(r, url)["state"] != "healthy":
                break
        check(worker_by_url(r, url)["state"] != "healthy", "decode still healthy", r)
        request_json(d.port, "POST", "/pdsim/fault", {"fail_status": 0})
        s2 = Sender(url)  # a new process behind the same address
        s2.load(r, kv_free_bytes=999, kv_bytes_per_token=64)
        w = worker_by_url(r, url)
        check(w["state"] == "healthy" and w["load"]["restarts_total"] == 1 and w["load"]["instance_id"] == s2.inst,
              "after restart %s" % w, r)
        st, _, out = request(r.port, "POST", "/generate", body)
        check(st == 200, "request after restart: %d %s" % (st, out[:200]), r)
        evs = request_json(r.ports["admin"], "GET", "/admin/v1/events")["events"]
        check(any("restarted" in e["message"] for e in evs), "no restart event in %s" % evs, r)
        m = metrics(r)
        check(metric_value(m, "pdr_worker_restarts_total", worker=url, role="decode") == 1, "metric restarts", r)
        # The old instance's batches still verify but no longer speak for the worker's state... they do
        # carry its id: a late report from it is a (second) new incarnation only if it is newer.
    finally:
        pdtest.stop_all()


def scenario_admission_wait_503():
    """A decode that reported too little free KV gets no request: the request waits (kv_admission.wait_ms)
    and is answered 503 with Retry-After in the OpenAI error shape; one that fits passes; with admission
    off the same request goes through. A worker that never reported is not limited."""
    p, d = sim("prefill"), sim("decode")
    r = events_router([p], [d], extra="kv_admission: { wait_ms: 300 }")
    try:
        url = "http://127.0.0.1:%d" % d.port
        body = {"input_ids": list(range(100)), "sampling_params": {"max_new_tokens": 28}}  # 128 tokens
        st, _, out = request(r.port, "POST", "/generate", body)
        check(st == 200, "never reported: %d" % st, r)
        s = Sender(url)
        s.load(r, kv_free_bytes=127 * 10, kv_total_bytes=1000 * 10, kv_bytes_per_token=10)
        t0 = time.monotonic()
        st, hdrs, out = request(r.port, "POST", "/generate", body)
        took = time.monotonic() - t0
        err = json.loads(out)["error"]
        check(st == 503 and hdrs.get("retry-after") == "1" and err["type"] == "service_unavailable" and
              "kv_admission" in err["message"], "too big: %d %s %s" % (st, hdrs, out), r)
        check(took >= 0.25, "answered after %.3f s, before kv_admission.wait_ms" % took, r)
        s.load(r, kv_free_bytes=128 * 10, kv_total_bytes=1000 * 10, kv_bytes_per_token=10)
        st, _, out = request(r.port, "POST", "/generate", body)
        check(st == 200, "fits: %d %s" % (st, out[:200]), r)
        # More than the decode's whole KV: refused at once with 400, no wait. A max_new_tokens whose bytes
        # pass 2^64 ((2^60 - 4 + 4) * 16 = 2^64) must not wrap to a small need and be admitted.
        s.load(r, kv_free_bytes=1000 * 16, kv_total_bytes=1000 * 16, kv_bytes_per_token=16)
        for what, big in (("over the total", {"input_ids": [1, 2, 3, 4], "sampling_params": {"max_new_tokens": 997}}),
                          ("past 2^64 bytes", {"input_ids": [1, 2, 3, 4],
                                               "sampling_params": {"max_new_tokens": 2 ** 60 - 4}})):
            st, hdrs, out = request(r.port, "POST", "/generate", big)
            err = json.loads(out).get("error", {})
            check(st == 400 and err.get("type") == "invalid_request_error" and "kv_admission" in err["message"],
                  "%s: %d %s" % (what, st, out), r)
        m = metrics(r)
        check(metric_value(m, "pdr_kv_admission_total", decision="refused") == 3, "metric refused", r)
        check(metric_value(m, "pdr_kv_admission_total", decision="admitted") >= 1, "metric admitted", r)
        check(worker_by_url(r, url)["load"]["kv_reserved_bytes"] == 0, "hold not released", r)
    finally:
        pdtest.stop_all()
    p, d = sim("prefill"), sim("decode")
    r = events_router([p], [d], extra="kv_admission: { enabled: false }")
    try:
        url = "http://127.0.0.1:%d" % d.port
        Sender(url).load(r, kv_free_bytes=10, kv_total_bytes=10, kv_bytes_per_token=10)
        st, _, out = request(r.port, "POST", "/generate", body)
        check(st == 200, "admission off: %d" % st, r)
    finally:
        pdtest.stop_all()


def scenario_admission_other_decode():
    """Of two decodes, the one without room is passed over for the one with room; a request waits while
    the only room is held by another request, and goes once that one ends."""
    p, d1, d2 = sim("prefill"), sim("decode", "--decode-us-per-token", "20000"), sim("decode")
    r = events_router([p], [d1, d2], extra="kv_admission: { wait_ms: 5000 }\npolicy: { decode: round_robin }")
    try:
        u1, u2 = "http://127.0.0.1:%d" % d1.port, "http://127.0.0.1:%d" % d2.port
        s1, s2 = Sender(u1), Sender(u2)
        s1.load(r, kv_free_bytes=1000, kv_total_bytes=1000, kv_bytes_per_token=10)
        s2.load(r, kv_free_bytes=5, kv_total_bytes=5, kv_bytes_per_token=10)
        body = {"input_ids": list(range(40)), "sampling_params": {"max_new_tokens": 20}}  # 600 bytes
        for _ in range(4):
            st, _, out = request(r.port, "POST", "/generate", dict(body, sampling_params={"max_new_tokens": 2}))
            check(st == 200, "status %d %s" % (st, out[:200]), r)
        m = metrics(r)
        check(metric_value(m, "pdr_worker_requests_total", role="decode", url=u2) == 0,
              "the full decode got requests", r)
        check(metric_value(m, "pdr_kv_admission_total", decision="other_decode") >= 1, "metric other", r)
        # Two requests of 600 bytes against d1's 1000: the second waits for the first. The first runs 2 s
        # (20 tokens at 0.1 s), and the second starts once the first is on d1.
        request_json(d1.port, "POST", "/pdsim/fault", {"decode_us_per_token": 100000})
        res = []

        def one():
            res.append(request(r.port, "POST", "/generate", body, timeout=30)[0])
        ts = [threading.Thread(target=one) for _ in range(2)]
        ts[0].start()
        pdtest.poll_until(lambda: stats(d1)["inflight"] >= 1, 10, "the first request on d1")
        ts[1].start()
        for t in ts:
            t.join()
        check(res == [200, 200], "results %s" % res, r)
        m = metrics(r)
        check(metric_value(m, "pdr_kv_admission_total", decision="waited") >= 1, "metric waited", r)
    finally:
        pdtest.stop_all()


def stack(decode_args=(), n_decodes=1, extra="", alog=None, common=(), prefill_args=()):
    """pdsim workers that report to the router through libpdshim (--events-url), and the router. The
    admin port is chosen first, so that the workers know where to report before the router starts; they
    keep re-sending their load until it is up. Each worker's port is chosen first too, so that its shim gets
    its own key (pdrouter --derive-shim-key for its URL). Returns the router, the prefill, the decodes and
    ev(port): the reporting flags of a worker on that port."""
    path = key_file()
    aport = pdtest.free_port()

    def ev(port):
        return ("--events-url", "http://127.0.0.1:%d" % aport, "--events-key-file",
                derived_key_file(path, "http://127.0.0.1:%d" % port), "--kv-bytes-per-token", "16") + tuple(common)

    def one(role, args):
        port = pdtest.free_port()
        argv = ["pdsim", "--role", role, "--port", "{port}"]
        if role == "prefill":
            argv += ["--bootstrap-port", "{bport}"]
        return pdtest.start(argv + list(ev(port)) + list(args), name="pdsim-%s" % role, ports={"port": port})
    p = one("prefill", prefill_args)
    ds = [one("decode", decode_args) for _ in range(n_decodes)]
    cfg = "admin: { host: 127.0.0.1, port: %d }\nshim_events: { key_file: %s }\n%s" % (aport, path, extra)
    if alog:
        cfg += "\nlog: { access_log: %s }" % alog
    r = router([p], ds, config=cfg, ready=False)
    r.ports["admin"] = aport
    return r, p, ds, ev


def wait_load(r, d):
    url = "http://127.0.0.1:%d" % d.port
    return pdtest.poll_until(lambda: worker_by_url(r, url).get("load"), 10, "a load report from %s" % url)


def scenario_rooms():
    """pdsim's shims report each room (accepted, done with bytes, µs and backend) and their load; the
    router attaches the room's events to the request in flight: the access log line carries them, and
    GET /admin/v1/shim lists them as matched."""
    alog = tempfile.mktemp(prefix="pdrouter-access-", suffix=".log")
    r, p, ds, _ = stack(decode_args=("--decode-us-per-token", "20000"), alog=alog)
    d = ds[0]
    try:
        ld = wait_load(r, d)
        check(ld["instance_id"] == stats(d)["instance_id"], "instance id %s vs %s" % (ld, stats(d)), r, d)
        body = {"input_ids": list(range(64)), "sampling_params": {"max_new_tokens": 5}}
        st, _, out = request(r.port, "POST", "/generate", body)
        check(st == 200, "status %d %s" % (st, out[:200]), r)
        rec = pdtest.last_access_line(alog, "/generate")
        kv = rec.get("kv_events")
        check(kv is not None and "accepted" in kv["events"] and "done" in kv["events"] and
              kv["bytes"] == 64 * 16 and kv["backend"] == "tcp" and kv["failed"] is None,
              "access log kv field: %s" % rec, r)
        v = shim_view(r)
        mine = [e for e in v["recent"] if e["room"] == rec["room"]]
        check(len(mine) == 4 and all(e["matched"] for e in mine), "recent %s" % v["recent"], r)
        check({e["event"] for e in mine} == {"accepted", "done"}, "events %s" % mine, r)
        check(sum(v["refused"].values()) == 0, "refusals %s" % v["refused"], r)
    finally:
        pdtest.stop_all()


def scenario_rooms_progress():
    """A room whose KV moves over a while (a streamed offer: 8 parts over the prefill's 320 ms) is
    reported by both shims while it moves: started once its first bytes moved, then progress as more do,
    each below the room's total and growing, all before its done; the router attaches them to the
    request (the access log's kv_events)."""
    alog = tempfile.mktemp(prefix="pdrouter-access-", suffix=".log")
    r, p, ds, _ = stack(decode_args=("--decode-us-per-token", "20000"), alog=alog,
                        prefill_args=("--kv-parts", "8", "--prefill-us-per-token", "5000"))
    try:
        wait_load(r, ds[0])
        body = {"input_ids": list(range(64)), "sampling_params": {"max_new_tokens": 2}}
        st, _, out = request(r.port, "POST", "/generate", body)
        check(st == 200, "status %d %s" % (st, out[:200]), r)
        rec = pdtest.last_access_line(alog, "/generate")
        total = 64 * 16
        kv = rec.get("kv_events") or {}
        check({"accepted", "started", "progress", "done"} <= set(kv.get("events", [])) and kv.get("bytes") == total,
              "access log kv_events: %s" % kv, r)
        mine = pdtest.poll_until(
            lambda: [e for e in shim_view(r)["recent"] if e["room"] == rec["room"]] or None, 10, "the room's events")
        for role_url in ("http://127.0.0.1:%d" % p.port, "http://127.0.0.1:%d" % ds[0].port):
            evs = [e for e in mine if e["worker"] == worker_by_url(r, role_url).get("id")]
            names = [e["event"] for e in evs]
            check(names and names[0] == "accepted" and names[-1] == "done" and "started" in names,
                  "%s: events %s" % (role_url, evs), r)
            moving = [e for e in evs if e["event"] in ("started", "progress")]
            check(names.index("started") < names.index("done") and names.count("started") == 1 and
                  all(0 < e["bytes"] < total for e in moving) and
                  all(a["bytes"] < b["bytes"] for a, b in zip(moving, moving[1:])),
                  "%s: started/progress must grow below the total, before done: %s" % (role_url, evs), r)
        check(any(e["event"] == "progress" for e in mine), "no progress event at all: %s" % mine, r)
    finally:
        pdtest.stop_all()


def scenario_rooms_tickets():
    """With protocol pdshim the transport names a ticket's room by its MAC; the shims still report the
    room the router chose, so its events are attached to the request."""
    alog = tempfile.mktemp(prefix="pdrouter-access-", suffix=".log")
    tk = key_file(b"T" * 40)
    r, p, ds, _ = stack(decode_args=("--decode-us-per-token", "20000"), alog=alog, common=("--ticket-key", tk),
                        extra="protocol: pdshim\nticket: { key_file: %s }" % tk)
    try:
        wait_load(r, ds[0])
        st, _, out = request(r.port, "POST", "/generate", {"input_ids": list(range(32)),
                                                            "sampling_params": {"max_new_tokens": 5}})
        check(st == 200, "status %d %s" % (st, out[:200]), r)

        rec = pdtest.last_access_line(alog, "/generate")
        kv = rec.get("kv_events")
        check(kv is not None and "done" in kv["events"] and kv["bytes"] == 32 * 16, "kv field: %s" % rec, r)
    finally:
        pdtest.stop_all()


def scenario_restart():
    """A decode restarted behind the same port reports a new instance id: the router counts a restart,
    records it in the events ring, and the worker serves at once with its new state."""
    r, p, ds, ev = stack()
    d = ds[0]
    try:
        first = wait_load(r, d)["instance_id"]
        port = d.port
        d.stop(signal.SIGKILL)
        d2 = pdtest.start(["pdsim", "--role", "decode", "--port", str(port)] + list(ev(port)), name="pdsim-decode-2",
                          health_path=None)
        url = "http://127.0.0.1:%d" % port
        w = pdtest.poll_until(lambda: (lambda w: w if w.get("load", {}).get("instance_id", first) != first else None)(
            worker_by_url(r, url)), 10, "the new instance's report")
        check(w["load"]["restarts_total"] == 1 and w["state"] == "healthy", "after restart %s" % w, r, d2)
        pdtest.poll_until(lambda: request(port, "GET", "/health")[0] == 200, 10, "the new decode")
        st, _, out = request(r.port, "POST", "/generate", {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}})
        check(st == 200, "after restart: %d %s" % (st, out[:200]), r, d2)
        evs = request_json(r.ports["admin"], "GET", "/admin/v1/events")["events"]
        check(any("restarted" in e["message"] for e in evs), "no restart event in %s" % evs, r)
    finally:
        pdtest.stop_all()


def scenario_restart_inflight():
    """A request waits on a decode that hangs; that decode then reports a new instance id (it restarted:
    whatever it held for the request is gone). The router fails the attempt at once and retries it on the
    other decode, instead of waiting out timeouts.first_byte_ms."""
    p, d1, d2 = sim("prefill"), sim("decode"), sim("decode")
    r = events_router([p], [d1, d2], extra="timeouts: { first_byte_ms: 30000 }\npolicy: { decode: round_robin }")
    try:
        u1 = "http://127.0.0.1:%d" % d1.port
        s1 = Sender(u1)
        s1.load(r, queue_depth=0)
        request_json(d1.port, "POST", "/pdsim/fault", {"hang_before_headers": 1})
        res = {}

        def one():
            t0 = time.monotonic()
            st, _, out = request(r.port, "POST", "/generate", {"input_ids": [1, 2, 3],
                                                                "sampling_params": {"max_new_tokens": 2}}, timeout=40)
            res["st"], res["took"], res["out"] = st, time.monotonic() - t0, out
        got = None
        for _ in range(4):  # round robin: until a request is held by the hanging decode
            th = threading.Thread(target=one)
            th.start()
            got = pdtest.poll_until(lambda: stats(d1)["inflight"] > 0 or not th.is_alive(), 10, "a request")
            if th.is_alive():
                break
            th.join()
        check(th.is_alive(), "no request reached the hanging decode", r)
        t0 = time.monotonic()
        Sender(u1).load(r, queue_depth=0)  # the new instance
        th.join(20)
        check(not th.is_alive() and res["st"] == 200, "result %s" % res, r)
        check(time.monotonic() - t0 < 2.0, "failed over after %.2f s" % (time.monotonic() - t0), r)
        m = metrics(r)
        check(metric_value(m, "pdr_worker_restarts_total", worker=u1, role="decode") == 1, "restart metric", r)
        del got
    finally:
        pdtest.stop_all()


def burst(r, n, body):
    res = []
    lock = threading.Lock()

    def one():
        st = request(r.port, "POST", "/generate", body, timeout=60)[0]
        with lock:
            res.append(st)
    ts = [threading.Thread(target=one) for _ in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return res


def scenario_admission_capacity():
    """A decode with room for two requests' KV (pdsim --kv-capacity-bytes) under a burst of eight: with
    admission on, every request succeeds and pdsim refuses none (the router never overfills it); with
    admission off, the same burst makes pdsim refuse some."""
    body = {"input_ids": list(range(50)), "sampling_params": {"max_new_tokens": 10}}  # 60 tokens x 16 B
    cap = ("--kv-capacity-bytes", "2000", "--decode-us-per-token", "20000")
    for on in (True, False):
        r, p, ds, _ = stack(decode_args=cap, extra="kv_admission: { enabled: %s, wait_ms: 20000 }\nretries: { max: 0 }"
                            % ("true" if on else "false"))
        d = ds[0]
        try:
            wait_load(r, d)
            res = burst(r, 8, body)
            st = stats(d)
            if on:
                check(res == [200] * 8, "admission on: %s" % res, r, d)
                check(st["kv_capacity_refusals"] == 0 and st["kv_used_max_bytes"] <= 2000, "pdsim %s" % st, r, d)
                m = metrics(r)
                check(metric_value(m, "pdr_kv_admission_total", decision="waited") >= 1, "no wait counted", r)
            else:
                check(st["kv_capacity_refusals"] > 0, "admission off: pdsim refused none (%s, %s)" % (res, st), r, d)
        finally:
            pdtest.stop_all()


def scenario_python():
    """python/pdshim.py: a Shim with events_url reports the engine's load under the instance id the
    engine chose, and room events the engine adds itself (refused), through the same signed channel."""
    sys.path.insert(0, pdtest.build_dir())
    import pdshim
    p, d = sim("prefill"), sim("decode")
    path = key_file()
    r = router([p], [d], config="shim_events: { key_file: %s }" % path)
    try:
        url = "http://127.0.0.1:%d" % d.port
        with pdshim.Shim(events_url="http://127.0.0.1:%d" % r.ports["admin"],
                         events_key_file=derived_key_file(path, url),
                         worker_url=url, instance_id=b"\x01" * 16, events_flush_ms=5) as sh:
            check(sh.instance_id() == b"\x01" * 16, "instance id", r)
            sh.report_load(kv_free_bytes=4096, kv_total_bytes=8192, kv_bytes_per_token=16, queue_depth=2)
            ld = pdtest.poll_until(lambda: worker_by_url(r, url).get("load"), 10, "the load report")
            check(ld["instance_id"] == "01" * 16 and ld["kv_free_bytes"] == 4096 and ld["queue_depth"] == 2,
                  "load %s" % ld, r)
            check(sh.report_room(77, "refused", reason="bad ticket"), "queue full?", r)
            ev = pdtest.poll_until(lambda: [e for e in shim_view(r)["recent"] if e["room"] == 77], 10, "room 77")
            check(ev[0]["event"] == "refused" and ev[0]["reason"] == "bad ticket" and not ev[0]["matched"],
                  "event %s" % ev, r)
            # The router shows an event before its answer reaches the shim, which counts the batch then.
            pdtest.poll_until(lambda: sh.events_stats()[0] >= 2, 10, "the shim to count its two batches sent")
            sent, failed, dropped = sh.events_stats()
            check(sent >= 2 and dropped == 0, "stats %s" % ((sent, failed, dropped),), r)
    finally:
        pdtest.stop_all()


if __name__ == "__main__":
    pdtest.run_scenario(globals())
