"""An independent implementation of the pdshim ticket format (docs/internals/tickets.md), with the
standard library's hmac and hashlib, for tests: it signs tickets the C shims must accept, and the
broken forms they must refuse.

    pt1.<key id>.<b64url(payload)>.<b64url(HMAC-SHA256(key, "pt1.<key id>.<b64url(payload)>"))>

payload: room u64 BE, expires_ms u64 BE, port u16 BE, u8 host length, host, u8 peer length, peer.
"""
import base64
import hashlib
import hmac
import struct
import time


def key_id(secret):
    return hashlib.sha256(secret).hexdigest()[:8]


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def read_key(path):
    """A key file as common/keyring.c reads it: a text key without its line end, a binary one less its line
    end only as far as 32 bytes remain."""
    data = open(path, "rb").read()
    m = len(data)
    if data.endswith(b"\n"):
        m -= 2 if data.endswith(b"\r\n") else 1
    if all(0x20 <= b <= 0x7e for b in data[:m]):
        return data[:m]
    m = len(data)
    if m > 32 and data[m - 1:m] == b"\n":
        m -= 1
        if m > 32 and data[m - 1:m] == b"\r":
            m -= 1
    return data[:m]


def now_ms():
    return int(time.time() * 1000)


def sign(secret, room, host, port, peer, expires_ms=None, ttl_ms=30000, kid=None):
    if expires_ms is None:
        expires_ms = now_ms() + ttl_ms
    h, p = host.encode(), peer.encode()
    payload = struct.pack(">QQH", room, expires_ms, port) + bytes([len(h)]) + h + bytes([len(p)]) + p
    head = "pt1.%s.%s" % (kid or key_id(secret), b64(payload))
    mac = hmac.new(secret, head.encode(), hashlib.sha256).digest()
    return head + "." + b64(mac)


def parse(ticket):
    """The fields of a ticket (no verification): dict with room, expires_ms, host, port, peer, key_id."""
    version, kid, payload, _mac = ticket.split(".")
    assert version == "pt1"
    p = unb64(payload)
    room, expires_ms, port = struct.unpack(">QQH", p[:18])
    hl = p[18]
    host = p[19:19 + hl].decode()
    pl = p[19 + hl]
    peer = p[20 + hl:20 + hl + pl].decode()
    return {"room": room, "expires_ms": expires_ms, "host": host, "port": port, "peer": peer, "key_id": kid}


def verify(secret, ticket):
    head, _, mac = ticket.rpartition(".")
    return hmac.compare_digest(unb64(mac), hmac.new(secret, head.encode(), hashlib.sha256).digest())
