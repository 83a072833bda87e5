#!/usr/bin/env python3
"""libpdshim's ticket calls through pdshim.py (ctypes), two shims in one process, tickets signed by
pdticket.py (an independent implementation of the format): offer_ticket / fetch_ticket move the room the
ticket names from the address inside it; every bad ticket is refused at once (PdshimError with the right
code, nothing moved); the fetch is bound to the ticket: a peer that knows the room but not the ticket
finds nothing to fetch; cancel by room; the replay cache's bound.
Usage: test_shim_tickets.py [DIR containing pdshim.py and libpdshim.so]"""
import os
import sys

sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdshim  # noqa: E402
import pdticket  # noqa: E402
from shimtest import canceled, keyfile, no_plain_fetch, refused  # noqa: E402

H = "127.0.0.1"


def main():
    key, other = os.urandom(32), os.urandom(32)
    kf, kother = keyfile(key), keyfile(other)
    me = "10.0.0.2:30002"
    with pdshim.Shim(listen_host=H, default_timeout_ms=5000, ticket_key_files=[kf]) as pre, \
            pdshim.Shim(ticket_key_files=[kother, kf], ticket_identity=me, default_timeout_ms=5000) as dec, \
            pdshim.Shim(default_timeout_ms=300) as thief, \
            pdshim.Shim(listen_host=H, ticket_key_files=[kf], ticket_replay_max=2) as small:
        src = os.urandom(100000)
        t = pdticket.sign(key, 77, H, pre.port, me)
        info = dec.ticket_inspect(t)
        assert info == {"room": 77, "expires_ms": pdticket.parse(t)["expires_ms"], "prefill_host": H,
                        "prefill_port": pre.port, "decode_id": me, "key_id": pdticket.key_id(key)}, info
        f_off = pre.offer_ticket(t, src)
        # The room number alone is not enough: a plain fetch of room 77 finds nothing offered under it.
        no_plain_fetch(thief, H, pre.port, 77, len(src))
        dst = bytearray(len(src))
        f = dec.fetch_ticket(t, dst)
        assert f.result(timeout=10) == len(src) and f_off.result(timeout=10) == len(src)
        assert bytes(dst) == src
        # Replay, per role: the same ticket again on each side.
        refused(lambda: pre.offer_ticket(t, src), "EREPLAYED")
        refused(lambda: dec.fetch_ticket(t, bytearray(len(src))), "EREPLAYED")
        # Every other refusal, on both sides, before anything is posted.
        bad = {
            "EBADTICKET": [t[:-1], "", "pt1." + "0" * 8 + ".AAAA." + "A" * 43, t.replace(".", "!", 1)],
            "EFORGED": [pdticket.sign(os.urandom(32), 78, H, pre.port, me),
                        pdticket.sign(os.urandom(32), 78, H, pre.port, me, kid=pdticket.key_id(key)),
                        t[:-3] + ("AAA" if not t.endswith("AAA") else "BBB")],
            "ETICKETEXPIRED": [pdticket.sign(key, 79, H, pre.port, me, expires_ms=pdticket.now_ms() - 10000)],
        }
        for name, tickets in bad.items():
            for bt in tickets:
                refused(lambda: pre.offer_ticket(bt, src), name)
                refused(lambda: dec.fetch_ticket(bt, bytearray(10)), name)
        # An expiry further ahead than any ticket lives (300 s + skew): refused, not remembered for hours.
        bad = {
            "EBADTICKET": [pdticket.sign(key, 83, H, pre.port, me, expires_ms=pdticket.now_ms() + 3600 * 1000)],
        }
        for name, tickets in bad.items():
            for bt in tickets:
                refused(lambda: pre.offer_ticket(bt, src), name)
                refused(lambda: dec.fetch_ticket(bt, bytearray(10)), name)
        refused(lambda: pre.offer_ticket(pdticket.sign(key, 80, H, pre.port + 1, me), src), "EWRONGPEER")
        refused(lambda: dec.fetch_ticket(pdticket.sign(key, 80, H, pre.port, "10.0.0.9:1"), bytearray(1)),
                "EWRONGPEER")
        # The decode's key ring holds both keys (rotation): a ticket of the other key verifies there and
        # is refused by a prefill that holds only the first.
        t2 = pdticket.sign(other, 81, H, pre.port, me)
        assert dec.ticket_inspect(t2)["key_id"] == pdticket.key_id(other)
        refused(lambda: pre.offer_ticket(t2, src), "EFORGED")
        # A shim without key files verifies nothing.
        refused(lambda: thief.ticket_inspect(t), "EFORGED")
        # Cancel by the ticket's room.
        t3 = pdticket.sign(key, 82, H, pre.port, me)
        f3 = pre.offer_ticket(t3, src)
        assert pre.cancel(82)
        canceled(f3, 82)
        # Bounded replay memory: with 2 live tickets remembered, a third is refused, not one forgotten.
        futs = [small.offer_ticket(pdticket.sign(key, 90 + i, H, small.port, me), b"x", timeout_ms=200)
                for i in range(2)]
        refused(lambda: small.offer_ticket(pdticket.sign(key, 92, H, small.port, me), b"x"), "ETOOBIG")
        for fu in futs:
            try:
                fu.result(timeout=5)
            except pdshim.PdshimError as e:
                assert e.name == "ETIMEDOUT", e
    print("shim tickets passed")


if __name__ == "__main__":
    main()
