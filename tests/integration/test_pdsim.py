#!/usr/bin/env python3
"""Integration test of pdsim, the simulated worker: routes and shapes (--role both), direct PD through
libpdshim without a router (prefill + decode == both), errors, batch, fault knobs, cancellation and a
clean SIGTERM. Standard library only; exit 0 = pass. Run by ctest with PDR_BUILD=<build dir>."""

import http.client
import json
import os
import random
import signal
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import request, request_json, sse_events, check  # noqa: E402

KVBPT = 256


def gen_text(obj):
    return obj["text"]


def test_both_routes(both):
    port = both.port
    body = {"text": "the quick brown fox", "sampling_params": {"max_new_tokens": 6}}
    r = request_json(port, "POST", "/generate", body)
    text = r["text"]
    check(len(text.split()) == 6, "6 words expected: %r" % text, both)
    check(r["meta_info"]["prompt_tokens"] == 4 and r["meta_info"]["completion_tokens"] == 6, repr(r), both)
    check(r["meta_info"]["finish_reason"] == {"type": "length", "length": 6}, repr(r), both)
    # Deterministic.
    check(request_json(port, "POST", "/generate", body)["text"] == text, "not deterministic", both)

    # Streaming generate: cumulative text, last event == non-streaming text, then [DONE].
    st, hdrs, data = request(port, "POST", "/generate", dict(body, stream=True))
    check(st == 200 and hdrs["content-type"].startswith("text/event-stream"), "stream status %d" % st, both)
    ev = sse_events(data)
    check(ev[-1] == "[DONE]" and len(ev) == 7, "events: %r" % ev, both)
    check(ev[-2]["text"] == text and ev[0]["text"] == " " + text.split()[0], "stream text %r" % ev, both)
    check(ev[0]["meta_info"]["finish_reason"] is None, "first event finished?", both)

    # /v1/completions with the same prompt gives the same words.
    c = request_json(port, "POST", "/v1/completions", {"model": "pdsim", "prompt": "the quick brown fox", "max_tokens": 6})
    check(c["object"] == "text_completion" and c["choices"][0]["text"] == text, repr(c), both)
    check(c["usage"] == {"prompt_tokens": 4, "completion_tokens": 6, "total_tokens": 10}, repr(c), both)
    st, _, data = request(port, "POST", "/v1/completions", {"prompt": "the quick brown fox", "max_tokens": 6, "stream": True})
    ev = sse_events(data)
    check(ev[-1] == "[DONE]", repr(ev), both)
    check("".join(e["choices"][0]["text"] for e in ev[:-1]) == text, "completion deltas %r" % ev, both)
    check(ev[-2]["choices"][0]["finish_reason"] == "length" and ev[0]["choices"][0]["finish_reason"] is None, "", both)
    # Prompt as token ids: the words' ids give the same text.
    ids = request_json(port, "POST", "/generate", {"text": "the quick brown fox", "return_logprob": True,
                                                   "sampling_params": {"max_new_tokens": 1}})
    tok = [x[1] for x in ids["meta_info"]["input_token_logprobs"]]
    check(len(tok) == 4 and all(x[0] < 0 for x in ids["meta_info"]["input_token_logprobs"]), repr(ids), both)
    c2 = request_json(port, "POST", "/v1/completions", {"prompt": tok, "max_tokens": 6})
    check(c2["choices"][0]["text"] == text, "ids prompt differs", both)

    # Chat, plain and streamed.
    chat = {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}],
            "max_tokens": 5}
    c = request_json(port, "POST", "/v1/chat/completions", chat)
    content = c["choices"][0]["message"]["content"]
    check(c["object"] == "chat.completion" and len(content.split()) == 5, repr(c), both)
    check(c["usage"]["prompt_tokens"] == 7, repr(c), both)  # the messages' 6 and the generation prompt
    st, _, data = request(port, "POST", "/v1/chat/completions", dict(chat, stream=True))
    ev = sse_events(data)
    check(ev[0]["object"] == "chat.completion.chunk" and ev[0]["choices"][0]["delta"]["role"] == "assistant", "", both)
    check("".join(e["choices"][0]["delta"].get("content", "") for e in ev[:-1]) == content, repr(ev), both)

    # Models, health, 404, 405, malformed JSON, bad types.
    m = request_json(port, "GET", "/v1/models")
    check(m["object"] == "list" and m["data"][0]["id"] == "pdsim", repr(m), both)
    st, _, data = request(port, "GET", "/health")
    check(st == 200 and data == b"ok", "health", both)
    check(request(port, "GET", "/nope")[0] == 404, "404", both)
    check(request(port, "GET", "/generate")[0] == 405, "405", both)
    st, _, data = request(port, "POST", "/generate", b'{"text": "abc"')
    err = json.loads(data)
    check(st == 400 and err["error"]["code"] == 400 and "message" in err["error"], "malformed: %r" % data, both)
    check(request(port, "POST", "/generate", {"sampling_params": {}})[0] == 400, "missing text", both)
    check(request(port, "POST", "/v1/completions", {"prompt": "x", "max_tokens": "many"})[0] == 400, "type", both)
    check(request(port, "POST", "/generate", b"[1,2]")[0] == 400, "not an object", both)
    # Empty prompt is one token.
    r = request_json(port, "POST", "/generate", {"text": "", "sampling_params": {"max_new_tokens": 2}})
    check(r["meta_info"]["prompt_tokens"] == 1, repr(r), both)

    # Batch generate with 2 texts: an array, each equal to the single answer.
    b = request_json(port, "POST", "/generate", {"text": ["the quick brown fox", "jumps"],
                                                 "sampling_params": {"max_new_tokens": 6}})
    check(isinstance(b, list) and len(b) == 2 and b[0]["text"] == text, repr(b), both)
    single = request_json(port, "POST", "/generate", {"text": "jumps", "sampling_params": {"max_new_tokens": 6}})
    check(b[1]["text"] == single["text"], "batch item 1", both)
    # Batch completions: choices indexed per item.
    c = request_json(port, "POST", "/v1/completions", {"prompt": ["the quick brown fox", "jumps"], "max_tokens": 6})
    check([x["index"] for x in c["choices"]] == [0, 1] and c["choices"][1]["text"] == single["text"], repr(c), both)
    return text


def concurrent(port_a, port_b, path, body):
    """Sends the same body to two servers at once (as a router does) and returns both (status, body)."""
    out = [None, None]

    def go(i, port):
        st, _, data = request(port, "POST", path, body, timeout=20)
        out[i] = (st, data)

    ts = [threading.Thread(target=go, args=(i, p)) for i, p in enumerate((port_a, port_b))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


def room():
    return random.randrange(0, 2**63)


def test_pd(both, prefill, decode):
    bport = prefill.ports["bport"]
    prompt = "disaggregated serving moves the kv cache " * 20
    n_tok = len(prompt.split())

    def pd_body(extra, r=None):
        b = {"bootstrap_host": "127.0.0.1", "bootstrap_port": bport, "bootstrap_room": room() if r is None else r}
        b.update(extra)
        return b

    s0p = request_json(prefill.port, "GET", "/pdsim/stats")
    s0d = request_json(decode.port, "GET", "/pdsim/stats")
    gen = {"text": prompt, "sampling_params": {"max_new_tokens": 12}, "return_logprob": True}
    body = pd_body(gen)
    (sp, pdata), (sd, ddata) = concurrent(prefill.port, decode.port, "/generate", body)
    check(sp == 200 and sd == 200, "PD statuses %d %d: %r %r" % (sp, sd, pdata[:300], ddata[:300]), prefill, decode)
    pre, dec = json.loads(pdata), json.loads(ddata)
    ref = request_json(both.port, "POST", "/generate", gen)
    check(dec["text"] == ref["text"], "decode %r != both %r" % (dec["text"], ref["text"]), prefill, decode)
    check(pre["text"] == "" and pre["meta_info"]["completion_tokens"] == 0, repr(pre)[:300], prefill)
    check(pre["meta_info"]["finish_reason"] == {"type": "length", "length": 0}, repr(pre["meta_info"]), prefill)
    check(pre["meta_info"]["input_token_logprobs"] == ref["meta_info"]["input_token_logprobs"], "prefill lp", prefill)
    check(dec["meta_info"]["input_token_logprobs"] == [], "decode input lp", decode)
    check(dec["meta_info"]["output_token_logprobs"] == ref["meta_info"]["output_token_logprobs"], "out lp", decode)
    s1p = request_json(prefill.port, "GET", "/pdsim/stats")
    s1d = request_json(decode.port, "GET", "/pdsim/stats")
    kv = n_tok * KVBPT
    check(s1p["kv_bytes_sent"] - s0p["kv_bytes_sent"] == kv, "sent %r" % s1p, prefill)
    check(s1d["kv_bytes_received"] - s0d["kv_bytes_received"] == kv, "received %r" % s1d, decode)
    last = s1d["last"][-1]
    check(last["room"] == body["bootstrap_room"] and last["bootstrap_port"] == bport and
          last["bootstrap_host"] == "127.0.0.1" and last["path"] == "/generate" and last["stream"] is False,
          "last %r" % last, decode)

    # Streaming OpenAI completions through PD: the decode streams, the prefill sends one event.
    comp = {"prompt": prompt, "max_tokens": 8, "stream": True}
    (sp, pdata), (sd, ddata) = concurrent(prefill.port, decode.port, "/v1/completions", pd_body(comp))
    check(sp == 200 and sd == 200, "PD stream statuses %d %d" % (sp, sd), prefill, decode)
    pev, dev = sse_events(pdata), sse_events(ddata)
    check(len(pev) == 2 and pev[1] == "[DONE]" and pev[0]["choices"][0]["text"] == "", repr(pev), prefill)
    ref = request_json(both.port, "POST", "/v1/completions", dict(comp, stream=False))["choices"][0]["text"]
    check("".join(e["choices"][0]["text"] for e in dev[:-1]) == ref, "PD stream text", decode)

    # Chat through PD.
    chat = {"messages": [{"role": "user", "content": prompt}], "max_tokens": 7}
    (sp, _), (sd, ddata) = concurrent(prefill.port, decode.port, "/v1/chat/completions", pd_body(chat))
    ref = request_json(both.port, "POST", "/v1/chat/completions", chat)["choices"][0]["message"]["content"]
    check(sp == 200 and sd == 200 and json.loads(ddata)["choices"][0]["message"]["content"] == ref, "PD chat", decode)

    # Batch through PD: rooms, hosts and ports become arrays.
    batch = {"text": [prompt, "short one"], "sampling_params": {"max_new_tokens": 5},
             "bootstrap_room": [room(), room()], "bootstrap_host": ["127.0.0.1"] * 2, "bootstrap_port": [bport] * 2}
    (sp, pdata), (sd, ddata) = concurrent(prefill.port, decode.port, "/generate", batch)
    check(sp == 200 and sd == 200, "PD batch %d %d %r" % (sp, sd, ddata[:300]), prefill, decode)
    ref = request_json(both.port, "POST", "/generate", {"text": [prompt, "short one"],
                                                        "sampling_params": {"max_new_tokens": 5}})
    check([x["text"] for x in json.loads(ddata)] == [x["text"] for x in ref], "PD batch text", decode)
    check(len(json.loads(pdata)) == 2, "prefill batch answer", prefill)

    # A KV above 1 MiB (built and hashed on the thread pool), streamed by the decode.
    big = {"text": " ".join("tok%d" % i for i in range(6000)), "sampling_params": {"max_new_tokens": 4},
           "stream": True}
    (sp, _), (sd, ddata) = concurrent(prefill.port, decode.port, "/generate", pd_body(big))
    ref = request_json(both.port, "POST", "/generate", dict(big, stream=False))["text"]
    check(sp == 200 and sd == 200 and sse_events(ddata)[-2]["text"] == ref, "PD big KV", prefill, decode)

    # Missing bootstrap fields: 400 on both roles.
    check(request(prefill.port, "POST", "/generate", gen)[0] == 400, "prefill without room", prefill)
    check(request(decode.port, "POST", "/generate", dict(gen, bootstrap_room=1))[0] == 400, "decode no host", decode)

    # A room the prefill never offers: the decode fails after its short --kv-timeout-ms.
    t0 = time.monotonic()
    st, _, data = request(decode.port, "POST", "/generate", pd_body(gen))
    err = json.loads(data)
    check(st == 500 and "PDR_E" in err["error"]["message"], "lost room: %d %r" % (st, data), decode)
    check(time.monotonic() - t0 < 5, "lost room took too long", decode)

    # Stalled KV, then the client (a router) gives up: both legs close their connections while waiting;
    # both workers count a cancel (HTTP/1 disconnect peek) and the decode's fetch is cancelled.
    request_json(prefill.port, "POST", "/pdsim/fault", {"stall_kv": True})
    s0p = request_json(prefill.port, "GET", "/pdsim/stats")
    s0d = request_json(decode.port, "GET", "/pdsim/stats")
    body = json.dumps(pd_body(gen))
    conns = []
    for w in (prefill, decode):
        c = http.client.HTTPConnection("127.0.0.1", w.port, timeout=5)
        c.request("POST", "/generate", body=body, headers={"Content-Type": "application/json"})
        conns.append(c)
    for w in (prefill, decode):
        pdtest.poll_until(lambda: request_json(w.port, "GET", "/pdsim/stats")["inflight"] >= 1, 5, "in flight")
    for c in conns:
        c.sock.shutdown(socket.SHUT_RDWR)
        c.close()
    for w, s0 in ((prefill, s0p), (decode, s0d)):
        pdtest.poll_until(lambda: request_json(w.port, "GET", "/pdsim/stats")["cancelled"] > s0["cancelled"], 5,
                          "%s to count the cancel" % w.name)
        pdtest.poll_until(lambda: request_json(w.port, "GET", "/pdsim/stats")["inflight"] == 0, 5,
                          "%s to release the request" % w.name)
    request_json(prefill.port, "POST", "/pdsim/fault", {"reset": True})


def test_faults(both):
    port = both.port
    fault = lambda body: request_json(port, "POST", "/pdsim/fault", body)  # noqa: E731
    fault({"fail_health": True})
    check(request(port, "GET", "/health")[0] == 503, "fail_health", both)
    fault({"fail_health": False, "fail_status": 500})
    st, _, data = request(port, "POST", "/generate", {"text": "x"})
    check(st == 500 and json.loads(data)["error"]["code"] == 500, "fail_status", both)
    f = fault({"reset": True})
    check(f["fail_status"] == 0 and not f["fail_health"], repr(f), both)
    check(request(port, "GET", "/health")[0] == 200, "health after reset", both)
    check(request(port, "POST", "/pdsim/fault", b"{nope")[0] == 400, "fault malformed", both)

    # Drip: 5 tokens 40 ms apart take about 200 ms.
    fault({"drip_ms": 40})
    t0 = time.monotonic()
    st, _, data = request(port, "POST", "/generate", {"text": "a", "stream": True, "sampling_params": {"max_new_tokens": 5}})
    dt = time.monotonic() - t0
    check(st == 200 and len(sse_events(data)) == 6 and 0.15 < dt < 2.0, "drip took %.3fs" % dt, both)

    # A client that drops a dripping stream is counted as cancelled.
    s0 = request_json(port, "GET", "/pdsim/stats")
    conn, resp = pdtest.stream_request(port, "POST", "/generate",
                                       {"text": "a", "stream": True, "sampling_params": {"max_new_tokens": 50}})
    resp.fp.readline()
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    pdtest.poll_until(lambda: request_json(port, "GET", "/pdsim/stats")["cancelled"] > s0["cancelled"], 5,
                      "cancel of a stream")
    fault({"drip_ms": 0})

    # Reset mid-stream: the client sees a broken body, not [DONE].
    fault({"reset_after_tokens": 2})
    broken = False
    try:
        st, _, data = request(port, "POST", "/generate", {"text": "a", "stream": True,
                                                          "sampling_params": {"max_new_tokens": 10}})
        broken = b"[DONE]" not in data
    except (OSError, Exception):
        broken = True
    check(broken, "reset_after_tokens did not break the stream", both)
    check(request_json(port, "GET", "/pdsim/stats")["resets"] >= 1, "resets counter", both)
    fault({"reset": True})

    # Hang before headers: a client that gives up is counted as cancelled (HTTP/1 peek, pitfall 3).
    fault({"hang_before_headers": True})
    s0 = request_json(port, "GET", "/pdsim/stats")
    try:
        request(port, "POST", "/generate", {"text": "a"}, timeout=0.3)
        check(False, "hang answered", both)
    except socket.timeout:
        pass
    pdtest.poll_until(lambda: request_json(port, "GET", "/pdsim/stats")["cancelled"] > s0["cancelled"], 5,
                      "cancel of a hanging request")
    fault({"reset": True})


def test_die_after():
    p = pdtest.start(["pdsim", "--role", "both", "--port", "{port}", "--die-after", "2"], name="die")
    for _ in range(2):
        request_json(p.port, "POST", "/generate", {"text": "x"})
    st = p.wait_exit(5)
    check(st == 3, "die-after exit status %r" % st, p)


def test_flags():
    p = pdtest.start(["pdsim", "--role", "both", "--port", "{port}", "--fail-health", "--fail-status", "503"],
                     name="flags", healthy=503)
    check(request(p.port, "POST", "/v1/completions", {"prompt": "x"})[0] == 503, "--fail-status", p)
    check(p.stop() == 0, "SIGTERM exit status", p)
    # Bad flags exit 2 at once.
    import subprocess
    r = subprocess.run([pdtest.binary("pdsim"), "--role", "prefill", "--port", "1"], capture_output=True)
    check(r.returncode == 2, "prefill without --bootstrap-port: %r" % r.returncode)


def main():
    random.seed()
    t0 = time.monotonic()
    try:
        both = pdtest.start(["pdsim", "--role", "both", "--port", "{port}", "--kv-bytes-per-token", str(KVBPT)],
                            name="both")
        test_both_routes(both)
        prefill = pdtest.start(["pdsim", "--role", "prefill", "--port", "{port}", "--bootstrap-port", "{bport}",
                                "--kv-bytes-per-token", str(KVBPT)], name="prefill")
        decode = pdtest.start(["pdsim", "--role", "decode", "--port", "{port}", "--kv-bytes-per-token", str(KVBPT),
                               "--kv-timeout-ms", "1500"], name="decode")
        test_pd(both, prefill, decode)
        test_faults(both)
        test_die_after()
        test_flags()
        for p in (both, prefill, decode):
            st = p.stop()
            check(st == 0, "%s exit status %r after SIGTERM" % (p.name, st), p)
            log = p.log_tail(200)
            check("ERROR: AddressSanitizer" not in log and "LeakSanitizer" not in log, "sanitizer report", p)
    finally:
        pdtest.stop_all()
    print("test_pdsim: ok (%.1fs)" % (time.monotonic() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
