#!/usr/bin/env python3
"""A streamed offer by ticket through pdshim.py (ctypes), two shims in one process, tickets signed by
pdticket.py: offer_open_ticket opens the room the ticket names, offer_part and room_progress take that
room, and the decode's fetch_ticket receives every byte, the first part moving before the last is
published. Forged, expired, replayed and wrong-peer tickets are refused at once (PdshimError with the
right code): nothing is opened (offer_part and room_progress find no room) and nothing moves. A plain fetch
of the room number gets nothing; cancel by the ticket's room ends the stream.
Usage: test_shim_parts_tickets.py [DIR containing pdshim.py and libpdshim.so]"""
import os
import sys

sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdshim  # noqa: E402
import pdticket  # noqa: E402
from shimtest import canceled, keyfile, no_plain_fetch, refused, wait_progress  # noqa: E402

H = "127.0.0.1"


def nothing_opened(shim, room):
    refused(lambda: shim.offer_part(room, 0, b"x"), "ENOROOM")
    refused(lambda: shim.room_progress(room), "ENOROOM")


def main():
    key = os.urandom(32)
    kf = keyfile(key)
    me = "10.0.0.2:30002"
    with pdshim.Shim(listen_host=H, default_timeout_ms=5000, ticket_key_files=[kf]) as pre, \
            pdshim.Shim(ticket_key_files=[kf], ticket_identity=me, default_timeout_ms=5000) as dec, \
            pdshim.Shim(default_timeout_ms=300) as thief:
        half = 300000
        src = os.urandom(2 * half)
        t = pdticket.sign(key, 77, H, pre.port, me)
        f_off = pre.offer_open_ticket(t, len(src))
        assert f_off.room == 77
        assert pre.room_progress(77) == (0, len(src))
        pre.offer_part(77, 0, src[:half])
        # Bound to the ticket: a plain fetch of room 77 finds nothing, and nothing moves to it.
        no_plain_fetch(thief, H, pre.port, 77, len(src))
        dst = bytearray(len(src))
        f = dec.fetch_ticket(t, dst)
        # The first part moves while the second is still unpublished.
        assert wait_progress(pre, 77, half) == half
        assert not f.done() and not f_off.done()
        pre.offer_part(77, half, src[half:])
        assert f.result(timeout=10) == len(src) and f_off.result(timeout=10) == len(src)
        assert bytes(dst) == src
        nothing_opened(pre, 77)
        # Replay: the same ticket again is refused, nothing opened.
        refused(lambda: pre.offer_open_ticket(t, len(src)), "EREPLAYED")
        nothing_opened(pre, 77)
        # Every other refusal, before anything is registered.
        bad = {
            "EFORGED": [pdticket.sign(os.urandom(32), 78, H, pre.port, me),
                        pdticket.sign(os.urandom(32), 78, H, pre.port, me, kid=pdticket.key_id(key))],
            "ETICKETEXPIRED": [pdticket.sign(key, 79, H, pre.port, me, expires_ms=pdticket.now_ms() - 10000)],
            "EBADTICKET": [t[:-1], ""],
            "EWRONGPEER": [pdticket.sign(key, 80, H, pre.port + 1, me)],
        }
        for name, tickets in bad.items():
            for bt in tickets:
                refused(lambda: pre.offer_open_ticket(bt, 1000), name)
        for room in (78, 79, 80):
            nothing_opened(pre, room)
        # The forged ticket's room was not used up: the genuine ticket of room 78 still opens.
        t78 = pdticket.sign(key, 78, H, pre.port, me)
        f78 = pre.offer_open_ticket(t78, 10)
        refused(lambda: pre.offer_part(78, 5, b"123456"), "EINVAL")  # past the total: the room goes on
        pre.offer_part(78, 0, b"0123456789")
        d78 = bytearray(10)
        assert dec.fetch_ticket(t78, d78).result(timeout=10) == 10 and f78.result(timeout=10) == 10
        assert bytes(d78) == b"0123456789"
        # Cancel by the ticket's room, mid-stream.
        t82 = pdticket.sign(key, 82, H, pre.port, me)
        f82 = pre.offer_open_ticket(t82, 100)
        pre.offer_part(82, 0, b"y" * 50)
        assert pre.cancel(82)
        canceled(f82, 82)
        nothing_opened(pre, 82)
    print("shim parts tickets passed")


if __name__ == "__main__":
    main()
