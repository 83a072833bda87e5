#!/usr/bin/env python3
"""Protocol pdshim with pdsim --kv-parts: pdrouter signs a pd_ticket per room and the prefill streams each
room's KV in parts through the shim's ticketed streamed offer (pdshim_offer_open_ticket), the decode
fetching it with its ticket. Disaggregated output equals monolithic (--role both), single, streaming and
batch; every room went in parts; bytes of the earlier parts moved before the compute ended
(/pdsim/stats kv_parts.moved_at_compute_end > 0). A replayed ticket sent to the prefill again is refused
(403, replayed) and opens no room. With shim events on, the streamed rooms are reported under the room the
router chose (not the transport's ticket-bound name), so their events are matched to the request. Real
pdrouter and pdsim processes on loopback."""

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check, request  # noqa: E402
from test_tickets import KEY_A, generate, keyfile, router, sim, stats, text_of  # noqa: E402

KVBPT = "4096"
PARTS = 4
PROMPTS = [" ".join("w%d_%d" % (k, i) for i in range(150 + 20 * k)) for k in range(3)]


def body_of(prompt, stream=False):
    return {"text": prompt, "sampling_params": {"max_new_tokens": 8}, "stream": stream}


def last_text(data):
    return [e for e in pdtest.sse_events(data) if e != "[DONE]"][-1]["text"]


def events_reported():
    import test_shim_events as tse
    alog = tempfile.mktemp(prefix="pdrouter-access-", suffix=".log")
    tk = keyfile(KEY_A)
    r, p, ds, _ = tse.stack(decode_args=("--decode-us-per-token", "20000"), alog=alog,
                            common=("--ticket-key", tk, "--kv-parts", str(PARTS), "--prefill-us-per-token", "200"),
                            extra="protocol: pdshim\nticket: { key_file: %s }" % tk)
    tse.wait_load(r, ds[0])
    st, _, out = request(r.port, "POST", "/generate", {"input_ids": list(range(64)),
                                                        "sampling_params": {"max_new_tokens": 5}})
    check(st == 200, "status %d %s" % (st, out[:200]), r, p)
    check(stats(p)["kv_parts"]["rooms"] == 1, "not streamed: %r" % stats(p)["kv_parts"], p)

    rec = pdtest.last_access_line(alog, "/generate")
    kv = rec.get("kv_events")
    check(kv is not None and "done" in kv["events"] and kv["bytes"] == 64 * 16, "kv field: %s" % rec, r)

    def mine():
        # Both shims' accepted and done (a streamed room may also have started / progress between them).
        ev = [e for e in tse.shim_view(r)["recent"] if e["room"] == rec["room"]]
        ends = [e for e in ev if e["event"] in ("accepted", "done")]
        return ev if len(ends) == 4 else None
    ev = pdtest.poll_until(mine, 10, "both shims' events of the room")
    check(all(e["matched"] for e in ev) and {"accepted", "done"} <= {e["event"] for e in ev} <=
          {"accepted", "started", "progress", "done"}, repr(ev), r)


def main():
    try:
        ka = keyfile(KEY_A)
        both = sim("both", extra=["--kv-bytes-per-token", KVBPT])
        p = sim("prefill", ka, extra=["--kv-bytes-per-token", KVBPT, "--prefill-us-per-token", "1000",
                                      "--kv-parts", str(PARTS)])
        d = sim("decode", ka, extra=["--kv-bytes-per-token", KVBPT])
        r = router([p], [d], "ticket: { key_file: %s }" % ka)
        for k, prompt in enumerate(PROMPTS):
            if k == 1:
                st, _, out = request(r.port, "POST", "/generate", body_of(prompt, True))
                st2, _, ref = request(both.port, "POST", "/generate", body_of(prompt, True))
                check(st == 200 and st2 == 200, "status %d %d" % (st, st2), r, p, d)
                check(last_text(out) == last_text(ref), "stream %r != %r" % (out[-300:], ref[-300:]), r, p, d)
                continue
            _, out = generate(r.port, body_of(prompt), 200)
            _, ref = generate(both.port, body_of(prompt), 200)
            check(text_of(out) == text_of(ref), "disaggregated %r != monolithic %r" % (out, ref), r, p, d)
        batch = {"text": PROMPTS[:2], "sampling_params": {"max_new_tokens": 8}}
        _, out = generate(r.port, batch, 200)
        _, ref = generate(both.port, batch, 200)
        check(text_of(out) == text_of(ref), "batch %r != %r" % (out, ref), r, p, d)

        rooms = len(PROMPTS) + 2
        total = sum(len(x.split()) for x in PROMPTS + PROMPTS[:2]) * int(KVBPT)
        pdtest.poll_until(lambda: stats(p)["kv_bytes_sent"] == total, 10, "the prefill's kv_bytes_sent")
        sp, sd = stats(p), stats(d)
        kp = sp["kv_parts"]
        print("kv_parts with tickets: %r" % kp)
        check(sd["kv_bytes_received"] == total, "decode received %r" % sd, p, d)
        check(sp["tickets"]["accepted"] == rooms and sd["tickets"]["accepted"] == rooms,
              repr((sp["tickets"], sd["tickets"])))
        check(kp["rooms"] == rooms and kp["published"] == rooms * PARTS and kp["bytes"] == total, repr(kp), p)
        check(0 < kp["moved_at_compute_end"] <= total, "nothing moved before the compute ended: %r" % kp, p)

        # The last prefill body again, straight to the prefill: its ticket is used up.
        last = sp["last"][-1]["body"]
        st, _, data = request(p.port, "POST", "/generate", last)
        check(st == 403 and b"replayed" in data, "replayed ticket: %d %r" % (st, data[:300]), p)
        kp2 = stats(p)["kv_parts"]
        check(kp2["rooms"] == rooms and kp2["published"] == kp["published"], "a replay opened a room: %r" % kp2, p)
        for x in (r, d, p, both):
            x.stop()
        events_reported()
    finally:
        pdtest.stop_all()
    print("ok kv parts with tickets")


if __name__ == "__main__":
    main()
