#!/usr/bin/env python3
"""pdsim is autoregressive, as a greedy engine is: a request whose prompt is an undisturbed run's prompt
followed by its first k output tokens (ids appended to input_ids, text appended to the text or prompt, an
open assistant message with continue_final_message) goes on with exactly that run's tokens k.. . Checked on
/generate (input_ids and text), /v1/completions and /v1/chat/completions, on --role both and through a
prefill and decode pair; plus the chat template's 400s. Standard library only; exit 0 = pass. Run by ctest
with PDR_BUILD=<build dir>."""

import json
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import request, request_json, sse_events, check  # noqa: E402

KVBPT = 100  # not a multiple of 8: the digest's tail bytes count too
N = 12
KS = (1, 2, 5, 11)


class Both:
    """Sends each request to one --role both worker."""

    def __init__(self, proc):
        self.proc = proc

    def ask(self, path, body):
        st, _, data = request(self.proc.port, "POST", path, body, timeout=20)
        return st, data


class Pair:
    """Sends each request to a prefill and a decode at once, as a router does; the decode's answer."""

    def __init__(self, prefill, decode, both):
        self.prefill, self.decode, self.both = prefill, decode, both

    def ask(self, path, body):
        b = dict(body, bootstrap_host="127.0.0.1", bootstrap_port=self.prefill.ports["bport"],
                 bootstrap_room=random.randrange(0, 2**63))
        out = [None, None]

        def go(i, port):
            st, _, data = request(port, "POST", path, b, timeout=20)
            out[i] = (st, data)

        ts = [threading.Thread(target=go, args=(i, p)) for i, p in enumerate((self.prefill.port, self.decode.port))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        check(out[0][0] == 200, "prefill %s: %r" % (path, out[0]), self.prefill)
        return out[1]


def ask_json(w, path, body):
    st, data = w.ask(path, body)
    check(st == 200, "%s %r: %d %r" % (path, body, st, data[:300]))
    return json.loads(data)


def ask_stream(w, path, body):
    st, data = w.ask(path, dict(body, stream=True))
    check(st == 200, "%s stream: %d %r" % (path, st, data[:300]))
    ev = sse_events(data)
    check(ev[-1] == "[DONE]", "stream end %r" % ev[-3:])
    return ev[:-1]


def words_of(text):
    """A BPE detokenizer's text: every word with its leading space."""
    check(text.startswith(" ") and "  " not in text, "leading spaces: %r" % text)
    return text.split(" ")[1:]


def test_generate_ids(w):
    prompt = [17, 4242, 31999, 5, 123]
    base = {"input_ids": prompt, "sampling_params": {"max_new_tokens": N}}
    full = ask_json(w, "/generate", base)
    text, ids = full["text"], full["output_ids"]
    words = words_of(text)
    check(len(words) == N and len(ids) == N, "undisturbed: %r" % full)
    # An output id is what pdsim's tokenizer gives the word (a decode answers no input logprobs).
    tok = ask_json(w if isinstance(w, Both) else Both(w.both), "/generate", {"text": " ".join(words), "return_logprob": True,
                                    "sampling_params": {"max_new_tokens": 0}})
    check([x[1] for x in tok["meta_info"]["input_token_logprobs"]] == ids, "ids %r vs %r" % (ids, tok))
    lp = ask_json(w, "/generate", dict(base, return_logprob=True))["meta_info"]["output_token_logprobs"]
    check([x[1] for x in lp] == ids, "output_token_logprobs %r vs %r" % (lp, ids))
    # Streamed: cumulative text and output_ids, as sglang sends them.
    ev = ask_stream(w, "/generate", base)
    check(len(ev) == N and all(e["output_ids"] == ids[:j + 1] and e["text"] == "".join(" " + x for x in words[:j + 1])
                              for j, e in enumerate(ev)), "stream %r" % ev)
    for k in KS:
        r = ask_json(w, "/generate", {"input_ids": prompt + ids[:k], "sampling_params": {"max_new_tokens": N - k}})
        check(r["output_ids"] == ids[k:] and r["text"] == "".join(" " + x for x in words[k:]),
              "resumed at %d: %r, undisturbed %r" % (k, r, full))
        check(r["meta_info"]["prompt_tokens"] == len(prompt) + k, "prompt_tokens %r" % r["meta_info"])
    ev = ask_stream(w, "/generate", {"input_ids": prompt + ids[:5], "sampling_params": {"max_new_tokens": N - 5}})
    check(ev[-1]["output_ids"] == ids[5:], "resumed stream %r" % ev[-1])


def test_generate_text(w):
    prompt = "the quick brown fox jumps over"
    full = ask_json(w, "/generate", {"text": prompt, "sampling_params": {"max_new_tokens": N}})
    words = words_of(full["text"])
    for k in KS:
        head = "".join(" " + x for x in words[:k])
        r = ask_json(w, "/generate", {"text": prompt + head, "sampling_params": {"max_new_tokens": N - k}})
        check(r["text"] == full["text"][len(head):] and r["output_ids"] == full["output_ids"][k:],
              "resumed at %d: %r, undisturbed %r" % (k, r, full))


def test_completions(w):
    prompt = "disaggregated serving moves the kv cache"
    base = {"prompt": prompt, "max_tokens": N}
    text = ask_json(w, "/v1/completions", base)["choices"][0]["text"]
    words = words_of(text)
    ev = ask_stream(w, "/v1/completions", base)
    check([e["choices"][0]["text"] for e in ev] == [" " + x for x in words], "deltas %r" % ev)
    for k in KS:
        head = "".join(" " + x for x in words[:k])
        r = ask_json(w, "/v1/completions", {"prompt": prompt + head, "max_tokens": N - k})
        check(r["choices"][0]["text"] == text[len(head):], "resumed at %d: %r, undisturbed %r" % (k, r, text))
        ev = ask_stream(w, "/v1/completions", {"prompt": prompt + head, "max_tokens": N - k})
        check("".join(e["choices"][0]["text"] for e in ev) == text[len(head):], "resumed stream at %d" % k)


def test_chat(w):
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "tell me a story"}]
    full = ask_json(w, "/v1/chat/completions", {"messages": msgs, "max_tokens": N})
    text = full["choices"][0]["message"]["content"]
    words = words_of(text)
    # The generation prompt is counted: the messages' 8 tokens and "assistant".
    check(full["usage"]["prompt_tokens"] == 9, "usage %r" % full["usage"])
    explicit = ask_json(w, "/v1/chat/completions", {"messages": msgs, "max_tokens": N, "add_generation_prompt": True})
    check(explicit["choices"][0]["message"]["content"] == text, "add_generation_prompt true is the default")
    bare = ask_json(w, "/v1/chat/completions", {"messages": msgs, "max_tokens": N, "add_generation_prompt": False})
    check(bare["usage"]["prompt_tokens"] == 8, "no generation prompt: %r" % bare["usage"])
    for k in KS:
        head = "".join(" " + x for x in words[:k])
        body = {"messages": msgs + [{"role": "assistant", "content": head}], "max_tokens": N - k,
                "continue_final_message": True, "add_generation_prompt": False}
        r = ask_json(w, "/v1/chat/completions", body)
        check(r["choices"][0]["message"]["content"] == text[len(head):],
              "resumed at %d: %r, undisturbed %r" % (k, r, text))
        check(r["usage"]["prompt_tokens"] == 9 + k, "resumed usage %r" % r["usage"])
        ev = ask_stream(w, "/v1/chat/completions", body)
        check("".join(e["choices"][0]["delta"]["content"] for e in ev) == text[len(head):], "resumed stream at %d" % k)
    # Content parts continue the same way.
    head = "".join(" " + x for x in words[:3])
    r = ask_json(w, "/v1/chat/completions", {
        "messages": msgs + [{"role": "assistant", "content": [{"type": "text", "text": head}]}],
        "max_tokens": N - 3, "continue_final_message": True, "add_generation_prompt": False})
    check(r["choices"][0]["message"]["content"] == text[len(head):], "content parts: %r" % r)


def test_chat_errors(port, p):
    msgs = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": " alpha"}]
    cases = [
        ({"messages": msgs, "continue_final_message": True, "add_generation_prompt": True},
         "Cannot set both add_generation_prompt and continue_final_message to true"),
        ({"messages": msgs, "continue_final_message": True}, "Cannot set both"),  # the default is true
        ({"messages": msgs[:1], "continue_final_message": True, "add_generation_prompt": False}, "final message"),
        ({"messages": msgs, "continue_final_message": "yes", "add_generation_prompt": False}, "must be booleans"),
    ]
    for body, msg in cases:
        st, _, data = request(port, "POST", "/v1/chat/completions", dict(body, max_tokens=3))
        check(st == 400 and msg in json.loads(data)["error"]["message"], "%r: %d %r" % (body, st, data), p)


def run_all(w):
    test_generate_ids(w)
    test_generate_text(w)
    test_completions(w)
    test_chat(w)


def main():
    random.seed(7)
    t0 = time.monotonic()
    try:
        both = pdtest.start(["pdsim", "--role", "both", "--port", "{port}", "--kv-bytes-per-token", str(KVBPT)],
                            name="both")
        run_all(Both(both))
        test_chat_errors(both.port, both)
        prefill = pdtest.start(["pdsim", "--role", "prefill", "--port", "{port}", "--bootstrap-port", "{bport}",
                                "--kv-bytes-per-token", str(KVBPT)], name="prefill")
        decode = pdtest.start(["pdsim", "--role", "decode", "--port", "{port}", "--kv-bytes-per-token", str(KVBPT),
                               "--kv-timeout-ms", "5000"], name="decode")
        run_all(Pair(prefill, decode, both))
        # The pair answers as role both does.
        body = {"messages": [{"role": "user", "content": "same text"}], "max_tokens": N}
        check(ask_json(Pair(prefill, decode, both), "/v1/chat/completions", body)["choices"] ==
              ask_json(Both(both), "/v1/chat/completions", body)["choices"], "pair != both")
        for p in (both, prefill, decode):
            check(p.stop() == 0, "%s exit status after SIGTERM" % p.name, p)
    finally:
        pdtest.stop_all()
    print("test_pdsim_resume: ok (%.1fs)" % (time.monotonic() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
