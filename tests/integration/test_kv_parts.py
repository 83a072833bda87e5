#!/usr/bin/env python3
"""pdsim --kv-parts through pdrouter: a prefill publishes each room's KV in parts spread over its
simulated compute (--prefill-us-per-token), so the transfer overlaps the compute. Disaggregated output
still equals monolithic (--role both), batch and streaming included, and pdsim's own counters show the
ordering: when the compute ended (just before the last part), the shim had already moved bytes of the
earlier parts to the decode; without parts nothing moves before the compute ended. Real pdrouter and
pdsim processes on loopback, real KV bytes over libpdshim."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check, request, request_json, sse_events  # noqa: E402
from test_router import router, sim, stats  # noqa: E402

KVBPT = "4096"
PROMPTS = [" ".join("w%d_%d" % (k, i) for i in range(150 + 20 * k)) for k in range(3)]


def generate(port, prompt, stream=False):
    body = {"text": prompt, "sampling_params": {"max_new_tokens": 8}, "stream": stream}
    if not stream:
        return request_json(port, "POST", "/generate", body)["text"]
    st, _, data = request(port, "POST", "/generate", body)
    assert st == 200, st
    return [e for e in sse_events(data) if e != "[DONE]"][-1]["text"]


def run(parts, mono):
    pre = sim("prefill", "--kv-bytes-per-token", KVBPT, "--prefill-us-per-token", "1000", "--kv-parts", str(parts))
    dec = sim("decode", "--kv-bytes-per-token", KVBPT)
    r = router([pre], [dec])
    for k, p in enumerate(PROMPTS):
        out = generate(r.port, p, stream=(k == 1))
        check(out == mono[k], "parts %d: disaggregated %r != monolithic %r" % (parts, out, mono[k]), pre, dec, r)
    batch = request_json(r.port, "POST", "/generate", {"text": PROMPTS[:2], "sampling_params": {"max_new_tokens": 8}})
    check([b["text"] for b in batch] == mono[:2], "batch differs: %r" % batch, pre, dec, r)
    # The prefill answers once its KV left; its counters are final when the decode has every byte.
    total = sum(len(p.split()) for p in PROMPTS + PROMPTS[:2]) * int(KVBPT)
    pdtest.poll_until(lambda: stats(pre)["kv_bytes_sent"] == total, 10, "the prefill's kv_bytes_sent")
    kp = stats(pre)["kv_parts"]
    check(stats(dec)["kv_bytes_received"] == total, "decode received %r" % stats(dec), pre, dec)
    rooms = len(PROMPTS) + 2
    print("parts %d: %r" % (parts, kp))
    if parts:
        check(kp["rooms"] == rooms and kp["published"] == rooms * parts and kp["bytes"] == total, repr(kp), pre)
        # The ordering: bytes of the earlier parts had moved before the compute ended (the last part was
        # published). A transport that waited for the whole room would show 0 here.
        check(0 < kp["moved_at_compute_end"] <= total, "nothing moved before the compute ended: %r" % kp, pre)
    else:
        check(kp["rooms"] == 0 and kp["moved_at_compute_end"] == 0, repr(kp), pre)
    for p in (r, dec, pre):
        p.stop()
    return kp


def main():
    t0 = time.monotonic()
    try:
        both = sim("both", "--kv-bytes-per-token", KVBPT)
        mono = [generate(both.port, p) for p in PROMPTS]
        both.stop()
        whole = run(0, mono)
        parted = run(4, mono)
        print("tail after compute (last room, informative only): whole %d us, 4 parts %d us"
              % (whole["tail_us_last"], parted["tail_us_last"]))
    finally:
        pdtest.stop_all()
    print("ok kv parts in %.2fs" % (time.monotonic() - t0))


if __name__ == "__main__":
    main()
