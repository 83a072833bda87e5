#!/usr/bin/env python3
"""Stream migration (docs/operations.md, "Stream migration"): a decode that breaks a stream after the client's
stream began hands it to a new pair; the client receives one unbroken stream whose text is exactly the text of
an undisturbed run. Real pdrouter and pdsim processes on loopback; pdsim's model is autoregressive (its output
token j follows from the prompt and the tokens before j), as a real engine's greedy decoding is, so a
resumed request makes the same text.

    python3 test_migration.py SCENARIO     (PDR_BUILD=<build dir>)

Scenarios:
  generate_text   /generate with a text prompt: the decode resets after 5 tokens; the client's last event's
                  text and output_ids equal an undisturbed run's, meta_info.id stays the first stream's,
                  prompt_tokens and completion_tokens are the undisturbed run's
  generate_ids    the same with input_ids (the output_ids the client has are appended to them)
  completions     /v1/completions: the text deltas put together, one id, usage as undisturbed
  chat            /v1/chat/completions: one role delta, content as undisturbed (continue_final_message)
  idle            the decode's stream freezes after 5 tokens: at timeouts.stream_idle_ms the stream moves on
  kv_lost         the stream's head went, then its KV never arrives (the prefill stalls it): at the KV
                  deadline the stream moves to the other prefill, whole
  half_event      a decode resets in the middle of an event, twice: the client never sees half an event (a
                  stream that may be moved is relayed in whole events), but the whole ones, moved once,
                  then the error event
  refused         n = 2 cannot be moved: the stream ends with the error event, counted refused
  disabled        migration.enabled false: the error event as before, nothing moved
  budget          every decode breaks: migration.max_attempts 1 moves once, then the error event (budget);
                  the text before it is a prefix of the undisturbed text
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check, request, sse_events  # noqa: E402
from test_router import metric_value, metrics, router, sim  # noqa: E402

TOKENS = 24
FAKE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_sse_worker.py")
# 20 ms a token: the client has tokens before the decode breaks (a reset in the same read as the stream's head
# is an ordinary retry, before the client's response).
PACE = ("--decode-us-per-token", "20000")
RR = "policy: { prefill: round_robin, decode: round_robin }\noutlier: { consecutive_failures: 100 }\n"


def migrations(r, outcome):
    return metric_value(metrics(r), "pdr_stream_migrations_total", outcome=outcome) or 0


def bodies(kind):
    if kind == "generate_text":
        return "/generate", {"text": "The capital of France is", "stream": True,
                             "sampling_params": {"max_new_tokens": TOKENS, "temperature": 0}}
    if kind == "generate_ids":
        return "/generate", {"input_ids": [101, 2023, 2003, 1037, 3231], "stream": True,
                             "sampling_params": {"max_new_tokens": TOKENS}}
    if kind == "completions":
        return "/v1/completions", {"model": "m", "prompt": "Once upon a time", "max_tokens": TOKENS,
                                   "stream": True, "stream_options": {"include_usage": True}}
    return "/v1/chat/completions", {"model": "m", "max_tokens": TOKENS, "stream": True,
                                    "stream_options": {"include_usage": True},
                                    "messages": [{"role": "system", "content": "You are terse."},
                                                 {"role": "user", "content": "Name the colours."}]}


def summary(path, events):
    """What a client makes of a stream: its text, ids, token counts, finish reason, and the events' shape."""
    s = {"text": "", "ids": None, "chunk_ids": set(), "roles": 0, "errors": [], "done": False,
         "finish": None, "usage": None}
    for e in events:
        if e == "[DONE]":
            s["done"] = True
            continue
        if "error" in e:
            s["errors"].append(e["error"])
            continue
        if path == "/generate":
            s["text"] = e["text"]
            s["ids"] = e.get("output_ids")
            s["chunk_ids"].add(e["meta_info"]["id"])
            s["usage"] = (e["meta_info"]["prompt_tokens"], e["meta_info"]["completion_tokens"])
            s["finish"] = e["meta_info"]["finish_reason"] or s["finish"]
            continue
        s["chunk_ids"].add(e["id"])
        if e.get("usage"):
            s["usage"] = (e["usage"]["prompt_tokens"], e["usage"]["completion_tokens"],
                          e["usage"]["total_tokens"])
        for c in e.get("choices", []):
            if path == "/v1/completions":
                s["text"] += c.get("text") or ""
            else:
                d = c.get("delta", {})
                s["roles"] += "role" in d
                s["text"] += d.get("content") or ""
            s["finish"] = c.get("finish_reason") or s["finish"]
    return s


def reference(path, body):
    """The undisturbed run: one pdsim serving the request whole (role both makes what a pair makes)."""
    both = sim("both")
    st, _, raw = request(both.port, "POST", path, body)
    check(st == 200, "reference run: %d %r" % (st, raw[:300]))
    return summary(path, sse_events(raw))


def run_moved(kind):
    path, body = bodies(kind)
    want = reference(path, body)
    check(len(want["text"]) > 0 and want["done"], "reference %r" % want)
    p = sim("prefill")
    broken = sim("decode", "--reset-after-tokens", "5", *PACE)
    good = sim("decode", *PACE)
    r = router([p], [broken, good], config=RR)
    # Round robin sends one of two consecutive requests to the decode that breaks.
    for i in range(2):
        st, hdrs, raw = request(r.port, "POST", path, body)
        check(st == 200, "request %d: %d %r" % (i, st, raw[:300]), r)
        got = summary(path, sse_events(raw))
        check(not got["errors"], "request %d ended with an error event: %r" % (i, got["errors"]), r)
        check(got["text"] == want["text"], "request %d: text %r, undisturbed %r" % (i, got["text"], want["text"]),
              r)
        check(got["done"] and got["finish"] == want["finish"], "request %d: end %r / %r, undisturbed %r" %
              (i, got["done"], got["finish"], want["finish"]), r)
        check(len(got["chunk_ids"]) == 1, "request %d: the stream carries ids %r" % (i, got["chunk_ids"]), r)
        if want["usage"] is not None:
            check(got["usage"] == want["usage"], "request %d: usage %r, undisturbed %r" %
                  (i, got["usage"], want["usage"]), r)
        if path == "/generate":
            check(got["ids"] == want["ids"], "request %d: output_ids %r, undisturbed %r" %
                  (i, got["ids"], want["ids"]), r)
        if path == "/v1/chat/completions":
            check(got["roles"] == 1, "request %d: %d role deltas" % (i, got["roles"]), r)
    check(migrations(r, "moved") >= 1, "moved %r, expected at least 1" % migrations(r, "moved"), r)
    return r


def scenario_generate_text():
    run_moved("generate_text")


def scenario_generate_ids():
    run_moved("generate_ids")


def scenario_completions():
    run_moved("completions")


def scenario_chat():
    run_moved("chat")


def scenario_idle():
    path, body = bodies("completions")
    want = reference(path, body)
    p = sim("prefill")
    frozen = sim("decode", "--stall-after-tokens", "5", *PACE)
    good = sim("decode", *PACE)
    r = router([p], [frozen, good], config=RR + "timeouts: { stream_idle_ms: 500 }\n")
    for i in range(2):
        st, _, raw = request(r.port, "POST", path, body)
        got = summary(path, sse_events(raw))
        check(st == 200 and not got["errors"] and got["text"] == want["text"] and got["done"],
              "request %d: %d %r, undisturbed %r" % (i, st, got, want["text"]), r)
    check(migrations(r, "moved") >= 1, "moved %r" % migrations(r, "moved"), r)


def scenario_kv_lost():
    path, body = bodies("chat")
    want = reference(path, body)
    stalled, fine = sim("prefill", "--stall-kv"), sim("prefill")
    d = sim("decode", "--stream-head-before-kv", *PACE)
    r = router([stalled, fine], [d], config=RR + "timeouts: { kv_transfer_ms: 800 }\n")
    for i in range(2):  # round robin: one of the two meets the stalled prefill
        st, _, raw = request(r.port, "POST", path, body, timeout=20)
        got = summary(path, sse_events(raw))
        check(st == 200 and not got["errors"] and got["text"] == want["text"] and got["done"] and
              got["usage"] == want["usage"], "request %d: %d %r, undisturbed %r" % (i, st, got, want), r)
    n = migrations(r, "moved")
    check(n >= 1 and metric_value(metrics(r), "pdr_kv_transfer_failures_total", cause="deadline",
                                  backend="unknown") == n, "moved %r, every one at a KV deadline" % n, r)


def scenario_half_event():
    p = sim("prefill")
    fake = pdtest.start([sys.executable, FAKE, "--role", "decode", "--port", "{port}", "--cut-mid-event", "4"],
                        name="fake-decode")
    # One decode: the migration meets it again (it cuts its stream the same way), then the budget is spent.
    r = router([p], [fake], config=RR + "migration: { max_attempts: 1 }\n")
    st, _, raw = request(r.port, "POST", "/generate", {"text": "a b c", "stream": True}, timeout=20)
    ev = sse_events(raw)  # raises on half an event
    texts = [e["text"] for e in ev[:-1]]
    check(st == 200 and len(ev) == 9 and "error" in ev[-1], "%d %r" % (st, raw), r)
    check(texts[3] == " w0 w1 w2 w3" and texts[7] == " w0 w1 w2 w3 w0 w1 w2 w3",
          "the client's texts %r" % texts, r)
    check(migrations(r, "moved") == 1 and migrations(r, "budget") == 1,
          "moved %r budget %r" % (migrations(r, "moved"), migrations(r, "budget")), r)


def one_broken(config=""):
    p = sim("prefill")
    d = sim("decode", "--reset-after-tokens", "5", *PACE)
    return router([p], [d], config=RR + config)


def scenario_refused():
    r = one_broken()
    path, body = bodies("chat")
    body["n"] = 2
    st, _, raw = request(r.port, "POST", path, body)
    ev = sse_events(raw)
    check(st == 200 and any(isinstance(e, dict) and "error" in e for e in ev), "n=2: %d %r" % (st, raw[-300:]), r)
    check(migrations(r, "refused") == 1 and migrations(r, "moved") == 0,
          "refused %r moved %r" % (migrations(r, "refused"), migrations(r, "moved")), r)


def scenario_disabled():
    r = one_broken("migration: { enabled: false }\n")
    path, body = bodies("completions")
    st, _, raw = request(r.port, "POST", path, body)
    ev = sse_events(raw)
    check(st == 200 and any(isinstance(e, dict) and "error" in e for e in ev), "%d %r" % (st, raw[-300:]), r)
    total = sum(migrations(r, o) for o in ("moved", "refused", "budget", "unreadable", "failed", "completed"))
    check(total == 0, "migrations counted with migration.enabled false: %r" % total, r)


def scenario_budget():
    path, body = bodies("completions")
    want = reference(path, body)
    p = sim("prefill")
    d1, d2 = sim("decode", "--reset-after-tokens", "5", *PACE), sim("decode", "--reset-after-tokens", "5", *PACE)
    r = router([p], [d1, d2], config=RR + "migration: { max_attempts: 1 }\n")
    st, _, raw = request(r.port, "POST", path, body)
    got = summary(path, sse_events(raw))
    check(st == 200 and len(got["errors"]) == 1, "%d %r" % (st, raw[-300:]), r)
    check(len(got["text"]) > 0 and want["text"].startswith(got["text"]) and got["text"] != want["text"],
          "the text before the error %r is not a proper prefix of %r" % (got["text"], want["text"]), r)
    check(migrations(r, "moved") == 1 and migrations(r, "budget") == 1,
          "moved %r budget %r" % (migrations(r, "moved"), migrations(r, "budget")), r)


if __name__ == "__main__":
    pdtest.run_scenario(globals())
