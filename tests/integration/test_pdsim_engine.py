#!/usr/bin/env python3
"""pdsim behaves as the engines it stands for, checked through pdrouter on loopback (real HTTP, real KV
bytes through libpdshim):

- default_bootstrap_port: a router given "--prefill URL" without a bootstrap port sends
  "bootstrap_port": null; the decode pulls from its own --bootstrap-port (sglang's scheduler puts its
  --disaggregation-bootstrap-port, 8998 by default, into such a request).
- include_usage: stream_options.include_usage gets a last chunk with empty choices and the usage before
  [DONE] (chat and completions, as OpenAI and sglang send it), relayed by the router.

Usage: test_pdsim_engine.py SCENARIO   (one of the functions named scenario_*; ctest runs each separately)
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check, request, request_json, sse_events  # noqa: E402
from test_router import BODIES, curl, sim, stats, texts  # noqa: E402

H = "127.0.0.1"


def router(prefill_args, decodes, *extra):
    argv = ["pdrouter", "--pd-disaggregation", "--host", H, "--port", "{port}", "--access-log", "off",
            "--admin-port", "{admin}", "--drain-grace-ms", "0"]
    for a in prefill_args:
        argv += ["--prefill"] + list(a)
    for d in decodes:
        argv += ["--decode", "http://%s:%d" % (H, d.port)]
    return pdtest.start(argv + list(extra), name="pdrouter", health_path="/readiness", healthy=200)


def scenario_default_bootstrap_port():
    """--prefill URL with no port: the decode gets bootstrap_port null and pulls from its own
    --bootstrap-port, the prefill's; every route, streamed and not, gives --role both's text. A decode
    without the flag takes 8998, sglang's default, and counts the pull under it."""
    p = sim("prefill")
    bport = p.ports["bport"]
    d = sim("decode", "--bootstrap-port", str(bport))
    both = sim("both")
    r = router([["http://%s:%d" % (H, p.port)]], [d])
    try:
        for route, body in BODIES.items():
            for stream in (False, True):
                b = dict(body, stream=stream)
                st, out = curl(r.port, route, b)
                check(st == 200, "%s stream=%s: %d %s" % (route, stream, st, out[:300]), r, p, d)
                st2, ref = curl(both.port, route, b)
                assert st2 == 200, ref
                check(texts(route, b, out, stream) == texts(route, b, ref, stream),
                      "%s stream=%s: %r != %r" % (route, stream, out[:300], ref[:300]))
                last = stats(d)["last"][-1]
                check("bootstrap_port" in last["body"] and last["body"]["bootstrap_port"] is None,
                      "the router did not send bootstrap_port null: %r" % last["body"])
        sd = stats(d)
        check(sd["by_bootstrap_port"] == {str(bport): 6} and sd["errors"] == 0, repr(sd))
        check(stats(p)["kv_bytes_sent"] == sd["kv_bytes_received"] > 0, repr((stats(p), sd)))

        # A decode started without --bootstrap-port pulls such a request from port 8998.
        d2 = sim("decode", "--kv-timeout-ms", "2000")
        body = dict(BODIES["/generate"], bootstrap_host=H, bootstrap_port=None, bootstrap_room=7)
        st, _, out = request(d2.port, "POST", "/generate", body)
        check(st != 400, "bootstrap_port null refused: %d %r" % (st, out), d2)
        check(stats(d2)["by_bootstrap_port"] == {"8998": 1}, repr(stats(d2)), d2)
        # Absent is the same as null; anything else that is not a port is still refused.
        body.pop("bootstrap_port")
        st, _, out = request(d2.port, "POST", "/generate", body)
        check(st != 400 and stats(d2)["by_bootstrap_port"] == {"8998": 2}, "%d %r" % (st, out), d2)
        for bad in ("8998", 0, 70000):
            st, _, out = request(d2.port, "POST", "/generate", dict(body, bootstrap_port=bad))
            check(st == 400 and b"bootstrap_port" in out, "bootstrap_port %r: %d %r" % (bad, st, out), d2)
    finally:
        pdtest.stop_all()


def check_usage(route, payload, ref):
    """The stream ends with one usage chunk (empty choices) before [DONE], whose usage equals the
    non-streamed answer's; no other chunk carries usage."""
    evs = sse_events(payload)
    check(evs[-1] == "[DONE]", "no [DONE]: %r" % evs[-3:])
    u = evs[-2]
    obj = "text_completion" if route == "/v1/completions" else "chat.completion.chunk"
    check(u["choices"] == [] and u["object"] == obj and u["model"] == "pdsim" and
          isinstance(u["created"], int) and u["id"] == evs[0]["id"], "usage chunk %r" % u)
    check(u["usage"] == ref["usage"], "usage %r != non-streamed %r" % (u["usage"], ref["usage"]))
    check(all("usage" not in e and e["choices"] for e in evs[:-2]), "other chunks: %r" % evs[:-2])


def scenario_include_usage():
    """stream_options.include_usage on chat and completions: through the router (disaggregated) and from
    --role both, a final usage chunk with empty choices before [DONE]; without it (or false) none; a
    non-streamed request ignores it; a malformed stream_options is refused 400."""
    p, d, both = sim("prefill"), sim("decode"), sim("both")
    r = router([["http://%s:%d" % (H, p.port), str(p.ports["bport"])]], [d])
    try:
        for route in ("/v1/completions", "/v1/chat/completions"):
            ref = request_json(both.port, "POST", route, BODIES[route])
            check(ref["usage"]["completion_tokens"] > 0, repr(ref))
            b = dict(BODIES[route], stream=True, stream_options={"include_usage": True})
            for port in (r.port, both.port):
                st, out = curl(port, route, b)
                check(st == 200, "%s: %d %s" % (route, st, out[:300]), r, p, d)
                check_usage(route, out, ref)
                check(texts(route, b, out, True) == ref["choices"][0].get("text", ref["choices"][0].get(
                    "message", {}).get("content")), "text %r" % out[:300])
            # A batch (n = 2 on chat, two prompts on completions): one usage chunk for all choices.
            bb = dict(b, n=2) if route == "/v1/chat/completions" else dict(b, prompt=[b["prompt"]] * 2)
            refb = request_json(both.port, "POST", route, dict(bb, stream=False))
            # sglang counts the prompt of a chat's n choices once, a completions prompt list per prompt.
            check(refb["usage"]["completion_tokens"] == 2 * ref["usage"]["completion_tokens"] and
                  refb["usage"]["prompt_tokens"] == (1 if "n" in bb else 2) * ref["usage"]["prompt_tokens"],
                  "batch usage %r against %r" % (refb["usage"], ref["usage"]))
            st, out = curl(r.port, route, bb)
            check(st == 200, "%s batch: %d %s" % (route, st, out[:300]), r, p, d)
            check_usage(route, out, refb)
            for so in (None, {}, {"include_usage": False}):
                b2 = dict(BODIES[route], stream=True)
                if so is not None:
                    b2["stream_options"] = so
                st, out = curl(r.port, route, b2)
                evs = sse_events(out)
                check(st == 200 and evs[-1] == "[DONE]" and all(e["choices"] and "usage" not in e
                                                              for e in evs[:-1]), "%r: %r" % (so, evs[-2:]))
            j = request_json(r.port, "POST", route, dict(BODIES[route], stream_options={"include_usage": True}))
            check(j["usage"] == ref["usage"], repr(j))
            for bad in ({"include_usage": 1}, [True], "yes"):
                st, _, out = request(both.port, "POST", route, dict(b, stream_options=bad))
                check(st == 400 and b"stream_options" in out, "%r: %d %r" % (bad, st, out), both)
    finally:
        pdtest.stop_all()


if __name__ == "__main__":
    pdtest.run_scenario(globals())
