#!/usr/bin/env python3
"""A scripted HTTP/1.1 server on loopback for the upstream client test (tests/integration/test_upstream.c).

Raw sockets, so that it can misbehave on purpose. Prints "PORT N" once listening; exits when stdin
closes. Every connection serves requests until the client closes it or a path says otherwise:

  GET /cl/N          200, Content-Length: N, N bytes of 'a'..'z' repeating (keep-alive)
  GET /chunked/K     200, chunked: K chunks "chunk-i;" each flushed separately (extensions, trailer)
  GET /close         200, Connection: close, body "bye", then the server closes
  GET /eof           200 with no length: body "until-close" then the server closes
  GET /204           204 No Content
  GET /100           "100 Continue" first, then 200 "after-100"
  GET /reset         closes the connection without answering
  GET /garbage       answers "NOT HTTP\\r\\n\\r\\n"
  GET /hang          reads the request and never answers
  GET /idle-close    200 "ok" (keep-alive), then closes the connection 50 ms later while idle
  POST /echo         200 with the request body as body (Content-Length)
  GET /stats         200 JSON {"connections": accepted connections, "requests": requests read}

Requests are logged with the connection number so that a test can tell reuse from a new connection.
"""
import json
import socket
import sys
import threading
import time

lock = threading.Lock()
stats = {"connections": 0, "requests": 0}


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
    body = f.read(int(headers.get("content-length", "0"))) if "content-length" in headers else b""
    return method, path, headers, body


def body_of(n):
    return bytes(ord("a") + (i % 26) for i in range(n))


def serve(conn):
    f = conn.makefile("rb")
    try:
        while True:
            req = read_request(f)
            if req is None:
                return
            method, path, headers, body = req
            with lock:
                stats["requests"] += 1
            if path.startswith("/cl/"):
                b = body_of(int(path[4:]))
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % len(b) + b)
            elif path.startswith("/chunked/"):
                conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/event-stream\r\n\r\n")
                for i in range(int(path[9:])):
                    c = b"chunk-%d;" % i
                    conn.sendall(b"%x;ext=1\r\n%s\r\n" % (len(c), c))
                    time.sleep(0.005)
                conn.sendall(b"0\r\nX-Trailer: t\r\n\r\n")
            elif path == "/close":
                conn.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 3\r\n\r\nbye")
                return
            elif path == "/eof":
                conn.sendall(b"HTTP/1.1 200 OK\r\n\r\nuntil-")
                time.sleep(0.02)
                conn.sendall(b"close")
                return
            elif path == "/204":
                conn.sendall(b"HTTP/1.1 204 No Content\r\n\r\n")
            elif path == "/100":
                conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nafter-100")
            elif path == "/reset":
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                return
            elif path == "/garbage":
                conn.sendall(b"NOT HTTP\r\n\r\n")
                return
            elif path == "/hang":
                time.sleep(30)
                return
            elif path == "/idle-close":
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                time.sleep(0.05)
                return
            elif path == "/echo":
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            elif path == "/stats":
                with lock:
                    b = json.dumps(stats).encode()
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(b) + b)
            else:
                conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
    except (ConnectionError, ValueError):
        return
    finally:
        try:
            f.close()
            conn.close()
        except OSError:
            pass


def main():
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(1024)

    def accept():
        while True:
            c, _ = srv.accept()
            with lock:
                stats["connections"] += 1
            threading.Thread(target=serve, args=(c,), daemon=True).start()
    threading.Thread(target=accept, daemon=True).start()
    print("PORT %d" % srv.getsockname()[1], flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
