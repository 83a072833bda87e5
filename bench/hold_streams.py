#!/usr/bin/env python3
"""Opens N streaming /generate requests to a router, waits until each has received its first token event,
holds them all open, reports the router's resident memory, then closes them.

Usage: hold_streams.py PORT N ROUTER_PID     (prints one JSON line)
The decode worker behind the router must stream slowly enough that the streams are still running when
the memory is read (bench/streams.sh sets one token per second).
"""
import asyncio
import json
import sys
import time

BODY = json.dumps({"text": "hold this stream open", "stream": True,
                   "sampling_params": {"max_new_tokens": 100000}}).encode()


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


async def one(port, started, failures):
    try:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                % len(BODY) + BODY)
        await w.drain()
        head = await r.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            failures.append(head[:40])
            return None
        buf = b""
        while b"data:" not in buf:
            chunk = await r.read(4096)
            if not chunk:
                failures.append(b"closed before the first event")
                return None
            buf += chunk
        started.append(1)
        return w
    except (OSError, asyncio.IncompleteReadError) as e:
        failures.append(repr(e).encode())
        return None


async def main():
    port, n, pid = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    base = rss_kib(pid)
    started, failures = [], []
    t0 = time.monotonic()
    writers = []
    step = 200  # open in waves, so that the prefill phase does not pile up
    for i in range(0, n, step):
        writers += await asyncio.gather(*(one(port, started, failures) for _ in range(min(step, n - i))))
    opened_s = time.monotonic() - t0
    await asyncio.sleep(1.0)  # let the router settle (buffers, pools) with everything open
    held = rss_kib(pid)
    print(json.dumps({"streams": n, "started": len(started), "failures": len(failures),
                      "first_failure": failures[0].decode(errors="replace") if failures else None,
                      "rss_before_kib": base, "rss_held_kib": held,
                      "bytes_per_stream": round((held - base) * 1024 / max(1, len(started))),
                      "open_s": round(opened_s, 2)}))
    for w in writers:
        if w is not None:
            w.close()


asyncio.run(main())
