#!/usr/bin/env python3
"""A small TCP proxy that adds latency: every chunk read from one side is written to the other side
DELAY ms after it was read, in order, in both directions (a one-way delay of DELAY ms each way, so the
round trip grows by 2 x DELAY). The fault suite puts it in a KV path where the kernel has no sch_netem.

    delayproxy.py --listen HOST:PORT --to HOST:PORT --delay-ms N

Prints "listening HOST:PORT" on stdout once it accepts connections. A side that closes is closed on the
other side after the data before it; a reset is passed on as a close. Standard library only.
"""

import argparse
import collections
import socket
import sys
import threading
import time


def pipe(src, dst, delay):
    """Reads src, writes each chunk to dst `delay` seconds after it arrived."""
    q = collections.deque()
    cv = threading.Condition()

    def writer():
        while True:
            with cv:
                while not q:
                    cv.wait()
                due, data = q.popleft()
            now = time.monotonic()
            if due > now:
                time.sleep(due - now)  # the delay itself, not a synchronisation
            if data is None:
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                return
            try:
                dst.sendall(data)
            except OSError:
                return

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    while True:
        try:
            data = src.recv(65536)
        except OSError:
            data = b""
        with cv:
            q.append((time.monotonic() + delay, data or None))
            cv.notify()
        if not data:
            break
    t.join()


def serve(conn, to, delay):
    try:
        up = socket.create_connection(to, timeout=10)
        up.settimeout(None)
    except OSError:
        conn.close()
        return
    for s in (conn, up):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    a = threading.Thread(target=pipe, args=(conn, up, delay), daemon=True)
    a.start()
    pipe(up, conn, delay)
    a.join()
    conn.close()
    up.close()


def hostport(s):
    h, _, p = s.rpartition(":")
    return h, int(p)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", required=True)
    ap.add_argument("--to", required=True)
    ap.add_argument("--delay-ms", type=float, required=True)
    a = ap.parse_args()
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(hostport(a.listen))
    ls.listen(128)
    print("listening %s" % a.listen, flush=True)
    to = hostport(a.to)
    while True:
        c, _ = ls.accept()
        threading.Thread(target=serve, args=(c, to, a.delay_ms / 1000.0), daemon=True).start()


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(0)
