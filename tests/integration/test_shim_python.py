#!/usr/bin/env python3
"""pdshim.py (ctypes) end to end: two shims in one process move bytes both ways round, with several
segments, either order, and the error paths surface as PdshimError with the right code.
Usage: test_shim_python.py [DIR containing pdshim.py and libpdshim.so]"""
import os
import random
import sys
import time

sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else os.getcwd())
import pdshim  # noqa: E402
from shimtest import refused  # noqa: E402


def main():
    rng = random.Random(7)
    with pdshim.Shim(listen_host="127.0.0.1", default_timeout_ms=5000) as pre, pdshim.Shim() as dec:
        assert pre.port > 0
        for i, total in enumerate([0, 1, 4099, 1 << 20, 3 * 1000 * 1000 + 17]):
            src = bytes(rng.getrandbits(8) for _ in range(min(total, 4096))) * (total // 4096 + 1)
            src = src[:total]
            cut = [0] + sorted(rng.randrange(total + 1) for _ in range(3)) + [total]
            dst = [bytearray(cut[k + 1] - cut[k]) for k in range(len(cut) - 1)]
            room = 5000 + i
            if i % 2:
                f_off = pre.offer(room, [memoryview(src)[cut[k]:cut[k + 1]] for k in range(len(cut) - 1)])
                f_fet = dec.fetch("127.0.0.1", pre.port, room, dst)
            else:
                f_fet = dec.fetch("127.0.0.1", pre.port, room, dst)
                f_off = pre.offer(room, src)
            assert f_fet.result(timeout=10) == total
            assert f_off.result(timeout=10) == total
            assert b"".join(dst) == src, "bytes differ for room %d" % room

        # Blocking form.
        buf = bytearray(10)
        f = pre.offer(77, b"0123456789")
        assert dec.fetch("127.0.0.1", pre.port, 77, buf, wait=True) == 10 and buf == b"0123456789"
        assert f.result(timeout=5) == 10

        # Size mismatch on both sides, then the pair keeps working.
        fo = pre.offer(78, bytearray(10))
        ff = dec.fetch("127.0.0.1", pre.port, 78, bytearray(11))
        for fut in (fo, ff):
            refused(lambda: fut.result(timeout=5), "ESIZE")

        # Unknown room at the deadline.
        t0 = time.monotonic()
        refused(lambda: dec.fetch("127.0.0.1", pre.port, 79, bytearray(4), timeout_ms=300, wait=True),
                "ENOROOM")
        assert time.monotonic() - t0 < 2

        # Cancel, and a duplicate room is refused synchronously.
        fo = pre.offer(80, b"abc", timeout_ms=10000)
        refused(lambda: pre.offer(80, b"abc"), "EEXIST")
        assert pre.cancel(80)
        refused(lambda: fo.result(timeout=5), "ECANCELED")
        assert not pre.cancel(80)

        # Close with a pending fetch: its future fails with ECLOSED.
        pending = dec.fetch("127.0.0.1", pre.port, 81, bytearray(4), timeout_ms=60000)
    refused(lambda: pending.result(timeout=5), "ECLOSED")
    tuning()
    streamed()
    print("ok python binding")


def streamed():
    """offer_open / offer_part / room_progress: parts out of order, the decode holding the first part
    before the rest is published, refused parts, a callback, a missing part at the deadline."""
    with pdshim.Shim(listen_host="127.0.0.1", default_timeout_ms=5000) as pre, pdshim.Shim() as dec:
        total = 3 * (1 << 20) + 5
        src = bytes(random.Random(3).getrandbits(8) for _ in range(4096)) * (total // 4096 + 1)
        src = src[:total]
        dst = bytearray(total)
        seen = []
        f_off = pre.offer_open(300, total, 10000, cb=seen.append)
        f_fet = dec.fetch("127.0.0.1", pre.port, 300, dst, timeout_ms=10000)
        cut = [0, 1 << 20, 2 << 20, total]
        pre.offer_part(300, cut[1], [memoryview(src)[cut[1]:cut[2]]])
        deadline = time.monotonic() + 10
        while dec.room_progress(300)[0] < cut[2] - cut[1] and time.monotonic() < deadline:
            time.sleep(0.001)
        assert dec.room_progress(300) == (cut[2] - cut[1], total)
        assert not f_fet.done()
        for bad in [(cut[1], memoryview(src)[cut[1]:cut[1] + 10]), (total, b"x"), (0, b"")]:
            refused(lambda: pre.offer_part(300, bad[0], [bad[1]]), "EINVAL")
        pre.offer_part(300, cut[2], [bytes(src[cut[2]:])])
        pre.offer_part(300, 0, [memoryview(src)[:cut[1] // 2], memoryview(src)[cut[1] // 2:cut[1]]])
        assert f_fet.result(timeout=10) == total and f_off.result(timeout=10) == total
        assert bytes(dst) == src
        assert seen == [f_off]
        refused(lambda: pre.room_progress(300), "ENOROOM")
        # A part never published: both sides fail at the offer's deadline.
        f_off = pre.offer_open(301, 100, 300)
        f_fet = dec.fetch("127.0.0.1", pre.port, 301, bytearray(100), timeout_ms=10000)
        pre.offer_part(301, 0, [b"a" * 50])
        for f in (f_off, f_fet):
            refused(lambda: f.result(timeout=10), "ETIMEDOUT")


def tuning():
    """Transport options reach the engine, (address, length) segments and registration work, and each
    future says which backend moved its bytes."""
    import ctypes
    refused(lambda: pdshim.Shim(backend="carrier-pigeon"), "EINVAL")
    with pdshim.Shim(listen_host="127.0.0.1", backend="tcp", chunk_bytes=4096, conns_per_peer=2,
                     io_threads=2, staging_chunks=2) as pre, \
            pdshim.Shim(backend="tcp", chunk_bytes=4096, conns_per_peer=2, io_threads=2) as dec:
        src = bytes(range(256)) * 4096  # 1 MiB: 256 frames of 4 KiB over 2 connections
        raw = (ctypes.c_char * len(src))()
        dec.register(ctypes.addressof(raw), len(src), "host")
        ff = dec.fetch("127.0.0.1", pre.port, 90, [(ctypes.addressof(raw), 1000),
                                                    (ctypes.addressof(raw) + 1000, len(src) - 1000)])
        fo = pre.offer(90, src)
        assert ff.result(timeout=10) == len(src) and fo.result(timeout=10) == len(src)
        assert bytes(raw) == src
        assert ff.backend == "tcp" and fo.backend == "tcp", (ff.backend, fo.backend)
        assert ff.usec > 0
        dec.unregister(ctypes.addressof(raw))
        # No GPU here, or not device memory.
        refused(lambda: dec.register(ctypes.addressof(raw), len(src), "cuda"), "ENOTSUP", "EINVAL")
        try:
            dec.fetch("127.0.0.1", pre.port, 91, [(-1, 4)])
            raise AssertionError("expected ValueError")
        except ValueError:
            pass


if __name__ == "__main__":
    main()
