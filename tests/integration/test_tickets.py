#!/usr/bin/env python3
"""Protocol pdshim end to end: pdrouter signs a pd_ticket per room, pdsim (--ticket-key) verifies it
through libpdshim's ticket calls. Tickets are also signed here by tests/integration/pdticket.py, an
independent implementation of the format (docs/internals/tickets.md): a good one must pass, each broken
one must be refused with 403 and move no bytes.

Usage: test_tickets.py SCENARIO   (one of the functions named scenario_*; ctest runs each separately)
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
import pdticket  # noqa: E402
from pdtest import check, request, request_json  # noqa: E402
from shimtest import keyfile  # noqa: E402

H = "127.0.0.1"


KEY_A = b"A" * 16 + os.urandom(16).hex().encode()
KEY_B = b"B" * 16 + os.urandom(16).hex().encode()


def sim(role, *keys, extra=()):
    argv = ["pdsim", "--role", role, "--port", "{port}"]
    if role == "prefill":
        argv += ["--bootstrap-port", "{bport}"]
    for k in keys:
        argv += ["--ticket-key", k]
    return pdtest.start(argv + list(extra), name="pdsim-%s" % role)


def write_config(path, prefills, decodes, ticket_yaml, port, aport, protocol="pdshim", bport=None):
    lines = ["listen: { host: 127.0.0.1, port: %d }" % port, "admin: { host: 127.0.0.1, port: %d }" % aport,
             "protocol: %s" % protocol, "workers:", "  prefill:"]
    lines += ["    - { url: http://127.0.0.1:%d, bootstrap_port: %s }" % (p.port, bport or p.ports["bport"])
              for p in prefills]
    lines += ["  decode:"] + ["    - { url: http://127.0.0.1:%d }" % d.port for d in decodes]
    lines += [ticket_yaml, "log: { access_log: off }", "lifecycle: { drain_grace_ms: 0 }"]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def router(prefills, decodes, ticket_yaml, protocol="pdshim", bport=None):
    port, aport = pdtest.free_port(), pdtest.free_port()
    fd, path = tempfile.mkstemp(prefix="pdrouter-", suffix=".yaml")
    os.close(fd)
    write_config(path, prefills, decodes, ticket_yaml, port, aport, protocol, bport)
    r = pdtest.start_router(path, {"port": port, "admin": aport})
    r.prefills, r.decodes = prefills, decodes
    return r


def stats(p):
    return request_json(p.port, "GET", "/pdsim/stats")


def generate(port, body, expect=None):
    st, _, data = request(port, "POST", "/generate", body)
    if expect is not None:
        assert st == expect, "status %d, expected %d: %r" % (st, expect, data[:400])
    return st, json.loads(data) if data else None


def text_of(ans):
    if isinstance(ans, list):
        return [a["text"] for a in ans]
    return ans["text"]


PROMPT = {"text": "the quick brown fox jumps over the lazy dog", "sampling_params": {"max_new_tokens": 8}}


def scenario_end_to_end():
    """protocol pdshim: disaggregated output == monolithic (--role both), single and batch, streaming and
    not, on /generate and /v1/completions; each room its own ticket naming the prefill's transport address
    and the decode; KV bytes moved through the ticket calls; pdr_tickets_signed_total counts them."""
    ka = keyfile(KEY_A)
    p, d, both = sim("prefill", ka), sim("decode", ka), sim("both")
    r = router([p], [d], "ticket: { key_file: %s }" % ka)
    for body in (PROMPT, dict(PROMPT, stream=False), {"text": ["one two three", "four five", "six"],
                                                       "sampling_params": {"max_new_tokens": 5}}):
        _, out = generate(r.port, body, 200)
        _, ref = generate(both.port, body, 200)
        check(text_of(out) == text_of(ref), "disaggregated %r != monolithic %r" % (out, ref), r, p, d)
        lp, ld = stats(p)["last"][-1], stats(d)["last"][-1]
        tp, td = lp["body"]["pd_ticket"], ld["body"]["pd_ticket"]
        check(tp == td, "the legs carry different tickets: %r %r" % (tp, td))
        rooms = lp["room"] if isinstance(lp["room"], list) else [lp["room"]]
        tickets = tp if isinstance(tp, list) else [tp]
        check(len(tickets) == len(rooms) and len(set(tickets)) == len(tickets), repr(tickets))
        for room, t in zip(rooms, tickets):
            check(pdticket.verify(KEY_A, t), "the router's ticket does not verify here: %s" % t)
            f = pdticket.parse(t)
            check(f["room"] == room and f["host"] == H and f["port"] == p.ports["bport"], repr(f))
            check(f["peer"] == "%s:%d" % (H, d.port) and f["key_id"] == pdticket.key_id(KEY_A), repr(f))
            ttl = f["expires_ms"] - pdticket.now_ms()
            check(20000 < ttl <= 30000, "ticket ttl %d ms, want the 30 s default" % ttl)
            check(len(t) <= 300, "ticket of %d bytes" % len(t))
    # Completions, streaming: token for token the same.
    body = {"prompt": "hello there general", "max_tokens": 6, "stream": True}
    st, _, out = request(r.port, "POST", "/v1/completions", body)
    st2, _, ref = request(both.port, "POST", "/v1/completions", body)
    assert st == 200 and st2 == 200, (st, st2)
    texts = lambda data: "".join(e["choices"][0]["text"] for e in pdtest.sse_events(data) if e != "[DONE]")
    check(texts(out) == texts(ref), "stream %r != %r" % (out[:300], ref[:300]))
    sd, sp = stats(d), stats(p)
    check(sd["tickets"]["accepted"] == 6 and sp["tickets"]["accepted"] == 6, repr((sd["tickets"], sp["tickets"])))
    check(sum(sd["tickets"]["refused"].values()) == 0, repr(sd["tickets"]))
    check(sd["kv_bytes_received"] > 0 and sd["kv_bytes_received"] == sp["kv_bytes_sent"], repr(sd))

    def counted():
        st, _, m = request(r.port, "GET", "/metrics")
        return st == 200 and "\npdr_tickets_signed_total 6\n" in m.decode()

    pdtest.poll_until(counted, 5, "pdr_tickets_signed_total 6")


def scenario_no_bootstrap_port():
    """A prefill without a bootstrap port cannot be named in a ticket: the request answers 500 in the
    OpenAI error shape saying so, and neither worker is called."""
    ka = keyfile(KEY_A)
    p, d = sim("prefill", ka), sim("decode", ka)
    r = router([p], [d], "ticket: { key_file: %s }" % ka, bport="none")
    st, ans = generate(r.port, PROMPT)
    check(st == 500 and ans["error"]["code"] == 500 and "has no bootstrap port" in ans["error"]["message"],
          "status %d %r" % (st, ans), r)
    check(stats(p)["requests"] == 0 and stats(d)["requests"] == 0, "a worker was called")


def scenario_strip_client_ticket():
    """A client's pd_ticket never reaches a worker: protocol sglang drops it; protocol pdshim replaces it
    with the router's own (the client's would have steered the KV to 10.66.66.66)."""
    ka = keyfile(KEY_A)
    evil = pdticket.sign(KEY_A, 7, "10.66.66.66", 1, "%s:1" % H)
    p, d = sim("prefill"), sim("decode")
    r = router([p], [d], "", protocol="sglang")
    generate(r.port, dict(PROMPT, pd_ticket=evil, bootstrap_room=7), 200)
    ld = stats(d)["last"][-1]
    check("pd_ticket" not in ld["body"], "sglang leg carries the client's pd_ticket: %r" % ld["body"])
    r.stop()
    p2, d2 = sim("prefill", ka), sim("decode", ka)
    r2 = router([p2], [d2], "ticket: { key_file: %s }" % ka)
    generate(r2.port, dict(PROMPT, pd_ticket=evil), 200)
    generate(r2.port, dict(PROMPT, pd_ticket=[evil, evil]), 200)
    for s in (p2, d2):
        raw = request(s.port, "GET", "/pdsim/stats")[2].decode()
        check(evil not in raw, "%s received the client's ticket" % s.name)
        body = stats(s)["last"][-1]["body"]
        f = pdticket.parse(body["pd_ticket"])
        check(f["host"] == H and f["port"] == p2.ports["bport"] and f["room"] == body["bootstrap_room"], repr(f))


def direct_pair(keys_p, keys_d, extra_d=()):
    return sim("prefill", *keys_p), sim("decode", *keys_d, extra=extra_d)


def both_legs(p, d, body):
    """Sends body to the prefill and the decode at once (the router's sglang flow, without a router)."""
    res = {}

    def leg(name, s):
        res[name] = request(s.port, "POST", "/generate", body, timeout=30)

    t = threading.Thread(target=leg, args=("p", p))
    t.start()
    leg("d", d)
    t.join()
    return res["p"], res["d"]


def scenario_refusals():
    """pdsim --ticket-key refuses, with 403 in the OpenAI error shape naming the reason and without moving a
    byte: a missing, malformed, forged (unknown key; right key id, wrong MAC), expired, replayed ticket, one
    for another decode or another prefill port, and one for another room. A good ticket signed here passes
    and gives the monolithic output."""
    ka = keyfile(KEY_A)
    p, d = direct_pair([ka], [ka])
    both = sim("both")
    bport, me = p.ports["bport"], "%s:%d" % (H, d.port)
    room = 4242

    def body(ticket, r=room):
        b = dict(PROMPT, bootstrap_host=H, bootstrap_port=bport, bootstrap_room=r)
        if ticket is not None:
            b["pd_ticket"] = ticket
        return b

    good = pdticket.sign(KEY_A, room, H, bport, me)
    forged_mac = good[:-4] + ("AAAA" if not good.endswith("AAAA") else "BBBB")
    cases = [
        ("missing", None, d),
        ("malformed", "pt1.not-a-ticket", d),
        ("malformed", good[:-1] + "!", d),
        ("malformed", 12345, d),
        ("forged", pdticket.sign(KEY_B, room, H, bport, me), d),
        ("forged", forged_mac, d),
        ("forged", pdticket.sign(KEY_B, room, H, bport, me, kid=pdticket.key_id(KEY_A)), d),
        ("expired", pdticket.sign(KEY_A, room, H, bport, me, expires_ms=pdticket.now_ms() - 60000), d),
        ("wrong_peer", pdticket.sign(KEY_A, room, H, bport, "%s:1" % H), d),
        ("wrong_peer", pdticket.sign(KEY_A, room, H, bport + 1 if bport < 65535 else bport - 1, me), p),
        ("wrong_room", pdticket.sign(KEY_A, room + 1, H, bport, me), d),
        ("missing", None, p),
        ("forged", pdticket.sign(KEY_B, room, H, bport, me), p),
    ]
    for why, ticket, s in cases:
        st, _, data = request(s.port, "POST", "/generate", body(ticket))
        check(st == 403, "%s to %s: status %d %r" % (why, s.name, st, data[:300]), s)
        err = json.loads(data)["error"]
        check(set(err) == {"message", "type", "code"} and err["code"] == 403 and err["type"] == "permission_error",
              repr(err))
        check("(%s)" % why in err["message"], "message does not name %s: %r" % (why, err["message"]))
    sp, sd = stats(p), stats(d)
    check(sd["kv_bytes_received"] == 0 and sp["kv_bytes_sent"] == 0, "a refused ticket moved bytes: %r" % sd)
    refused = {k: sp["tickets"]["refused"][k] + sd["tickets"]["refused"][k] for k in sd["tickets"]["refused"]}
    want = {}
    for why, _, _ in cases:
        want[why] = want.get(why, 0) + 1
    check(all(refused.get(k, 0) == v for k, v in want.items()), "refusals %r, want %r" % (refused, want))
    # The good ticket, to both legs at once: the KV moves, the text is the monolithic one.
    (stp, _, _), (std, _, out) = both_legs(p, d, body(good))
    check(stp == 200 and std == 200, "good ticket: %d %d %r" % (stp, std, out[:300]), p, d)
    _, ref = generate(both.port, PROMPT, 200)
    check(json.loads(out)["text"] == ref["text"], "disaggregated != monolithic")
    moved = stats(d)["kv_bytes_received"]
    check(moved > 0, "nothing moved")
    # Replayed: the same ticket again, to each side; nothing more moves.
    for s in (d, p):
        st, _, data = request(s.port, "POST", "/generate", body(good), timeout=30)
        check(st == 403 and "(replayed)" in json.loads(data)["error"]["message"], "replay on %s: %d %r"
              % (s.name, st, data[:300]), s)
    check(stats(d)["kv_bytes_received"] == moved, "a replayed ticket moved bytes")
    check(stats(d)["tickets"]["refused"]["replayed"] == 1 and stats(p)["tickets"]["refused"]["replayed"] == 1,
          repr((stats(d)["tickets"], stats(p)["tickets"])))


def scenario_rotation():
    """key_files: [new, old]: the router signs with the new key; shims holding old and new accept; a shim
    holding only the old one refuses (forged) and the client gets an error, never a 200."""
    ka, kb = keyfile(KEY_A), keyfile(KEY_B)
    p, d = sim("prefill", ka, kb), sim("decode", ka, kb)
    r = router([p], [d], "ticket:\n  key_files: [ %s, %s ]\n  ttl_ms: 10000" % (kb, ka))
    generate(r.port, PROMPT, 200)
    f = pdticket.parse(stats(d)["last"][-1]["body"]["pd_ticket"])
    check(f["key_id"] == pdticket.key_id(KEY_B), "signed with %s, want the first key" % f["key_id"])
    check(f["expires_ms"] - pdticket.now_ms() <= 10000, "ttl_ms not applied: %r" % f)
    # A ticket of the old key still verifies on shims with both (the rollout's other routers).
    old = pdticket.sign(KEY_A, 99, H, p.ports["bport"], "%s:%d" % (H, d.port))
    b = dict(PROMPT, bootstrap_host=H, bootstrap_port=p.ports["bport"], bootstrap_room=99, pd_ticket=old)
    (stp, _, _), (std, _, _) = both_legs(p, d, b)
    check(stp == 200 and std == 200, "old key refused by a shim with both: %d %d" % (stp, std))
    r.stop()
    p2, d2 = sim("prefill", ka), sim("decode", ka)
    r2 = router([p2], [d2], "ticket: { key_files: [ %s, %s ] }" % (kb, ka))
    st, _ = generate(r2.port, PROMPT)
    check(st != 200, "a shim with only the old key accepted the new key's ticket", r2, p2, d2)
    check(stats(d2)["tickets"]["refused"]["forged"] >= 1, repr(stats(d2)["tickets"]))
    check(stats(d2)["kv_bytes_received"] == 0, "bytes moved")


def scenario_reload():
    """A reload re-reads the key files: after the config names key B (SIGHUP), tickets carry B's key id;
    a reload naming a missing key file is refused and the router keeps signing with B."""
    ka, kb = keyfile(KEY_A), keyfile(KEY_B)
    p, d = sim("prefill", ka, kb), sim("decode", ka, kb)
    r = router([p], [d], "ticket: { key_file: %s }" % ka)
    generate(r.port, PROMPT, 200)
    kid = lambda: pdticket.parse(stats(d)["last"][-1]["body"]["pd_ticket"])["key_id"]
    check(kid() == pdticket.key_id(KEY_A), "not signed with A")
    write_config(r.config_path, [p], [d], "ticket: { key_file: %s }" % kb, r.port, r.ports["admin"])
    r.proc.send_signal(signal.SIGHUP)

    def signed_with_b():
        generate(r.port, PROMPT, 200)
        return kid() == pdticket.key_id(KEY_B)

    pdtest.poll_until(signed_with_b, 10, "tickets signed with key B after the reload")
    # The same key file rewritten in place (rotation by file content) is read again too.
    with open(kb, "wb") as f:
        f.write(KEY_A + b"\n")
    r.proc.send_signal(signal.SIGHUP)
    pdtest.poll_until(lambda: generate(r.port, PROMPT, 200) and kid() == pdticket.key_id(KEY_A), 10,
                      "the rewritten key file to be read again")
    missing = kb + ".missing"
    write_config(r.config_path, [p], [d], "ticket: { key_file: %s }" % missing, r.port, r.ports["admin"])
    r.proc.send_signal(signal.SIGHUP)
    pdtest.poll_until(lambda: "reload failed" in r.log_tail(200), 10, "the bad reload to be refused")
    check(missing in r.log_tail(200), "the refusal does not name the key file", r)
    generate(r.port, PROMPT, 200)
    check(kid() == pdticket.key_id(KEY_A) and r.alive(), "the running keys changed on a refused reload", r)


def scenario_config_errors():
    """--check-config and the router agree: protocol pdshim without a ticket key, a missing or short key
    file (file:line:col), a valid file (0)."""
    exe = pdtest.binary("pdrouter")
    ka = keyfile(KEY_A)
    short = keyfile(b"too short")
    workers = "workers:\n  prefill: [ { url: http://127.0.0.1:1, bootstrap_port: 2 } ]\n  decode: [ http://127.0.0.1:3 ]\n"
    cases = [
        ("protocol:  pdshim\n", "4:12: protocol: protocol pdshim signs tickets: set ticket: { key_file: FILE }"),
        ("protocol: pdshim\nticket: { key_file: /nonexistent/key }\n",
         "5:21: ticket.key_file: key file /nonexistent/key: No such file or directory"),
        ("protocol: pdshim\nticket:\n  key_files:\n    - %s\n    - %s\n" % (ka, short),
         "8:7: ticket.key_files: key file %s: 9 bytes; a key has at least 32" % short),
        ("ticket: { ttl_ms: 0 }\n", "4:19: ticket.ttl_ms: 0 is out of range, expected 1000..300000"),
    ]
    for extra, want in cases:
        fd, path = tempfile.mkstemp(suffix=".yaml")
        with os.fdopen(fd, "w") as f:
            f.write(workers + extra)
        out = subprocess.run([exe, "--check-config", path], capture_output=True, text=True)
        check(out.returncode == 2 and ("%s:%s" % (path, want)) in out.stderr, "check-config %r: %d %r"
              % (extra, out.returncode, out.stderr))
        out = subprocess.run([exe, "--config", path, "--admin-port", "0", "--port", str(pdtest.free_port())],
                             capture_output=True, text=True, timeout=10)
        check(out.returncode == 2 and want in out.stderr, "start %r: %d %r" % (extra, out.returncode, out.stderr))
    fd, path = tempfile.mkstemp(suffix=".yaml")
    with os.fdopen(fd, "w") as f:
        f.write(workers + "protocol: pdshim\nticket: { key_files: [ %s ], ttl_ms: 15000 }\n" % ka)
    out = subprocess.run([exe, "--check-config", path], capture_output=True, text=True)
    check(out.returncode == 0, "valid pdshim config: %d %r" % (out.returncode, out.stderr))
    # Per pool: a pdshim pool needs the key as well.
    fd, path = tempfile.mkstemp(suffix=".yaml")
    with os.fdopen(fd, "w") as f:
        f.write("pools:\n  - name: a\n    models: [m]\n    protocol: pdshim\n    workers: { prefill: [ "
                "http://127.0.0.1:1 ], decode: [ http://127.0.0.1:3 ] }\n")
    out = subprocess.run([exe, "--check-config", path], capture_output=True, text=True)
    check(out.returncode == 2 and "%s:4:15: pools[0].protocol: protocol pdshim signs tickets" % path in out.stderr,
          out.stderr)


if __name__ == "__main__":
    pdtest.run_scenario(globals())
