#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_conn (tests/fuzz/corpus/conn/): whole client connections. Every case of
the HTTP/2 conformance suite behind the preface and a SETTINGS frame, the same through Upgrade: h2c, valid
HTTP/2 requests, and HTTP/1 requests (plain, with a body, chunked, pipelined, over the limits).

    python3 tests/fuzz/make_conn_seeds.py
"""
import json
import os
import re
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "integration"))
import test_h2_conformance as h2  # noqa: E402

out = os.path.join(here, "corpus", "conn")
os.makedirs(out, exist_ok=True)
body = json.dumps({"text": "hello", "sampling_params": {"max_new_tokens": 2}}).encode()
pre = h2.PREFACE + h2.frame(h2.SETTINGS, 0, 0)
upgrade = (b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
           b"HTTP2-Settings: \r\n\r\n")
seeds = {
    "h2_get_health": pre + h2.frame(h2.HEADERS, h2.END_HEADERS | h2.END_STREAM, 1, h2.get_block()),
    "h2_post_generate": pre + h2.frame(h2.HEADERS, h2.END_HEADERS, 1, h2.post_block()) +
    h2.frame(h2.DATA, h2.END_STREAM, 1, body),
    "h2_reset_after_post": pre + h2.frame(h2.HEADERS, h2.END_HEADERS, 1, h2.post_block()) +
    h2.frame(h2.DATA, h2.END_STREAM, 1, body) + h2.frame(h2.RST_STREAM, 0, 1, b"\0\0\0\x08"),
    "h2_bad_preface": h2.BAD_PREFACE,
    "h1_get_health": b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
    "h1_post_generate": b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n%s" % (len(body), body),
    "h1_chunked": b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body),
    "h1_pipelined": b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" * 3 + b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
    "h1_cl_te": b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"0\r\n\r\n",
    "h1_body_too_large": b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n{}",
    "h1_chunk_too_large": b"POST /generate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nffffff\r\nab",
    "h1_connection_hop": b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\n\r\n",
    "h2c_upgrade_get": upgrade + pre + h2.frame(h2.HEADERS, h2.END_HEADERS | h2.END_STREAM, 3, h2.get_block()),
}
for name, data, _ in h2.CASES:
    slug = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
    seeds["h2_" + slug] = pre + data
    seeds["h2c_" + slug] = upgrade + pre + data
for name, data in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
print("%d seeds in %s" % (len(seeds), out))
