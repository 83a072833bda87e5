#!/usr/bin/env python3
"""A scripted prefill or decode worker for the router's stream tests: raw sockets, so that it can send
what no engine should.

Usage: fake_sse_worker.py --role prefill|decode --port N [--chunk BYTES] [--interval-ms MS] [--logprobs N]
                          [--events N] [--cut-mid-event N] [--bootstrap-port N]

  GET /health        200 "ok"
  GET /fake/stats    200 JSON {"streams": decode streams begun, "closed": streams whose connection the
                     router closed, "sent": body bytes sent on streams}
  POST /generate     prefill: 200 JSON with meta_info.input_token_logprobs (for the logprob merge): N
                     entries (--logprobs, default 2).
                     decode, --events 0 (the default): 200 text/event-stream (chunked), "data: " then
                     BYTES of 'x' every MS (0: as fast as the socket takes them), never a blank line,
                     until the router closes the connection.
                     decode, --events N: a stream request gets N small token events (each with one
                     output logprob, event i the token i) and "data: [DONE]" in one write, then the
                     end of the body; another request gets one JSON answer with N output logprobs.
                     decode, --cut-mid-event N: a stream request gets N whole /generate events (cumulative
                     text " w0 w1 ...", 50 ms apart), then the first half of the next one, then a reset.

Every connection serves requests until the client closes it.
"""
import argparse
import json
import select
import socket
import struct
import threading
import time

lock = threading.Lock()
stats = {"streams": 0, "closed": 0, "sent": 0}


def read_request(f):
    line = f.readline()
    if not line:
        return None
    method, path, _ = line.decode().split(" ", 2)
    headers = {}
    while True:
        h = f.readline()
        if h in (b"\r\n", b"\n", b""):
            break
        k, v = h.decode().split(":", 1)
        headers[k.strip().lower()] = v.strip()
    body = f.read(int(headers.get("content-length", "0")))
    return method, path, headers, body


def answer(conn, status, ctype, body):
    conn.sendall(b"HTTP/1.1 %d X\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n" % (status, ctype, len(body))
                 + body)


def peer_closed(conn):
    """Whether the router closed the connection (it sends nothing on a decode's stream)."""
    r, _, _ = select.select([conn], [], [], 0)
    if not r:
        return False
    try:
        return conn.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def endless_event(conn, chunk, interval):
    with lock:
        stats["streams"] += 1
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                 b"6\r\ndata: \r\n")
    piece = b"%x\r\n%s\r\n" % (chunk, b"x" * chunk)
    try:
        while not peer_closed(conn):
            conn.sendall(piece)
            with lock:
                stats["sent"] += chunk
            if interval > 0:
                time.sleep(interval)
    except OSError:
        pass
    with lock:
        stats["closed"] += 1


def token_events(conn, n):
    """n complete token events and [DONE], written at once: the router gets them in as few reads as the
    socket allows."""
    with lock:
        stats["streams"] += 1
    body = b"".join(b"data: %s\n\n" % json.dumps(
        {"text": "t", "index": 0, "meta_info": {"id": "d", "input_token_logprobs": [],
                                                "output_token_logprobs": [[-0.125, i, None]]}}).encode()
        for i in range(n)) + b"data: [DONE]\n\n"
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                 + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
    with lock:
        stats["sent"] += len(body)


def cut_mid_event(conn, n):
    """n whole events 50 ms apart, then half an event and a hard reset (SO_LINGER 0)."""
    with lock:
        stats["streams"] += 1
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
    text = ""
    for i in range(n + 1):
        text += " w%d" % i
        ev = b"data: %s\n\n" % json.dumps({"text": text, "output_ids": list(range(i + 1)), "meta_info": {
            "id": "d", "prompt_tokens": 3, "completion_tokens": i + 1, "finish_reason": None}}).encode()
        if i == n:
            ev = ev[:len(ev) // 2]
        conn.sendall(b"%x\r\n%s\r\n" % (len(ev), ev))
        time.sleep(0.05)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


def serve(conn, args):
    f = conn.makefile("rb")
    try:
        while True:
            req = read_request(f)
            if req is None:
                return
            method, path, headers, body = req
            if path == "/fake/stats":
                with lock:
                    answer(conn, 200, b"application/json", json.dumps(stats).encode())
            elif method == "GET":
                answer(conn, 200, b"text/plain", b"ok")
            elif args.role == "prefill":
                lp = [[-0.5, 1, None], [-0.25, 2, None]] if args.logprobs == 2 else \
                    [[-0.5, i % 50000, None] for i in range(args.logprobs)]
                out = {"text": "", "meta_info": {"id": "p", "prompt_tokens": args.logprobs, "completion_tokens": 0,
                                                 "input_token_logprobs": lp}}
                answer(conn, 200, b"application/json", json.dumps(out).encode())
            elif args.cut_mid_event > 0:
                cut_mid_event(conn, args.cut_mid_event)
                return
            elif args.events > 0 and json.loads(body or b"{}").get("stream"):
                token_events(conn, args.events)
            elif args.events > 0:
                out = {"text": "t" * args.events, "meta_info": {
                    "id": "d", "input_token_logprobs": [],
                    "output_token_logprobs": [[-0.125, i, None] for i in range(args.events)]}}
                answer(conn, 200, b"application/json", json.dumps(out).encode())
            else:
                endless_event(conn, args.chunk, args.interval_ms / 1000.0)
                return
    except (ConnectionError, ValueError):
        return
    finally:
        try:
            f.close()
            conn.close()
        except OSError:
            pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--role", choices=("prefill", "decode"), required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--chunk", type=int, default=16384)
    ap.add_argument("--interval-ms", type=float, default=0)
    ap.add_argument("--logprobs", type=int, default=2)
    ap.add_argument("--events", type=int, default=0)
    ap.add_argument("--cut-mid-event", type=int, default=0)
    ap.add_argument("--bootstrap-port", type=int, help="unused: the router's prefill entries name one")
    args = ap.parse_args()
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", args.port))
    srv.listen(1024)
    while True:
        c, _ = srv.accept()
        threading.Thread(target=serve, args=(c, args), daemon=True).start()


if __name__ == "__main__":
    main()
