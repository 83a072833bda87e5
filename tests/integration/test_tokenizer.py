#!/usr/bin/env python3
"""Integration tests of the tokenizer.json encoder in the processes that load it.

Usage: test_tokenizer.py SCENARIO   (one of the functions named scenario_*; ctest runs each separately)

pdsim: --tokenizer makes prompt text the tokenizer's ids (usage.prompt_tokens equals the reference count
from tests/fixtures/tokenizer/, the prefix cache hits on shared token prefixes); without it the
whitespace words stay; a broken file exits 2 with the loader's message.
router: --tokenizer-path / config key `tokenizer` load at start (a broken file fails the start and
--check-config with the loader's message), again on reload when the file changed (a failed reload keeps
the running one), and not when it did not; the model directory's chat template gives chat requests the
engine's ids (kv_tokens in the access log), a template that fails is a counted fall-back.
pools: each pool's own tokenizer (pools[].tokenizer) gives its requests their ids; a pool with none and no
top-level one is the unknown_model fall-back where ids were wanted, and nothing where they were not; a
pool's tokenizer is checked, swapped and refused on reload with its key's file:line:col. Standard library
only; nothing sleeps to synchronize."""

import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check, request, request_json  # noqa: E402
from test_router import metric_value, router, sim  # noqa: E402
import test_shim_events  # noqa: E402

FIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "tokenizer")


def fixture(name):
    return os.path.abspath(os.path.join(FIX, name))


def references(variant, n):
    """The first n non-empty reference texts with their ids."""
    out = []
    with gzip.open(fixture(variant + ".reference.jsonl.gz"), "rt", encoding="utf-8") as f:
        for line in f:
            o = json.loads(line)
            if o["text"].strip():
                out.append((o["text"], o["ids"]))
            if len(out) == n:
                break
    return out


def tmpdir():
    d = tempfile.mkdtemp(prefix="pdtest-tok-")
    return d


def scenario_pdsim():
    refs = references("llama3", 40)
    p = pdtest.start(["pdsim", "--role", "both", "--port", "{port}", "--tokenizer", fixture("llama3.tokenizer.json"),
                      "--prefix-cache-tokens", "65536", "--cache-block-tokens", "4"], name="pdsim-tok")
    for text, ids in refs:
        c = request_json(p.port, "POST", "/v1/completions", {"prompt": text, "max_tokens": 1})
        check(c["usage"]["prompt_tokens"] == len(ids), "%r: %r, want %d" % (text[:80], c["usage"], len(ids)), p)
    text, ids = refs[0]
    g = request_json(p.port, "POST", "/generate", {"text": text, "sampling_params": {"max_new_tokens": 1}})
    check(g["meta_info"]["prompt_tokens"] == len(ids), repr(g["meta_info"]), p)
    # The prefix cache follows the token ids: a long shared prefix hits in whole 4-token blocks.
    system = "You are a careful assistant. Answer in one short sentence, and cite the license text. " * 4
    a = request_json(p.port, "POST", "/generate", {"text": system + "First question?",
                                                   "sampling_params": {"max_new_tokens": 1}})["meta_info"]
    b = request_json(p.port, "POST", "/generate", {"text": system + "Another one!",
                                                   "sampling_params": {"max_new_tokens": 1}})["meta_info"]
    check(a["cached_tokens"] == 0 and b["cached_tokens"] >= 4 * ((a["prompt_tokens"] - 8) // 4) - 4,
          "cache over token ids: %r then %r" % (a, b), p)
    check(p.stop() == 0, "exit status", p)

    # The default is unchanged: one token per whitespace-separated word.
    q = pdtest.start(["pdsim", "--role", "both", "--port", "{port}"], name="pdsim-words")
    c = request_json(q.port, "POST", "/v1/completions", {"prompt": "one two  three\nfour", "max_tokens": 1})
    check(c["usage"]["prompt_tokens"] == 4, repr(c["usage"]), q)
    check(q.stop() == 0, "exit status", q)

    d = tmpdir()
    bad = os.path.join(d, "bad.json")
    with open(bad, "w") as f:
        f.write('{"model": {"type": "Unigram"}}')
    r = subprocess.run([pdtest.binary("pdsim"), "--role", "both", "--port", "1", "--tokenizer", bad],
                       capture_output=True, text=True)
    check(r.returncode == 2 and "model.type: \"Unigram\" is not supported" in r.stderr, repr((r.returncode, r.stderr)))
    shutil.rmtree(d)


def loaded_lines(r):
    with open(r.log_path, errors="replace") as f:
        return [l for l in f if "tokenizer: " in l and " loaded in " in l]


def reloads(r, result):
    m = request(r.port, "GET", "/metrics")[2].decode()
    return metric_value(m, "pdr_config_reloads_total", result=result)


def admin_reload(r):
    st, _, raw = request(r.ports["admin"], "POST", "/admin/v1/reload", headers={"Authorization": "Bearer secret"})
    return st, json.loads(raw)


def scenario_router():
    d = tmpdir()
    tok = os.path.join(d, "tokenizer.json")
    shutil.copy(fixture("llama3.tokenizer.json"), tok)
    broken = os.path.join(d, "broken.json")
    with open(broken, "w") as f:
        f.write('{\n  "model": {"type": "BPE",\n  "vocab": {"a" 0}}}\n')

    # --check-config loads the tokenizer as a start would.
    cfg = os.path.join(d, "check.yaml")
    pdr = pdtest.binary("pdrouter")
    for path, rc, want in ((tok, 0, "ok"), (broken, 2, "broken.json:3:"), (os.path.join(d, "missing.json"), 2,
                                                                           "missing.json")):
        with open(cfg, "w") as f:
            f.write("workers: { prefill: [ { url: http://127.0.0.1:1 } ], decode: [ { url: http://127.0.0.1:2 } ] }\n"
                    "tokenizer: %s\n" % path)
        out = subprocess.run([pdr, "--check-config", cfg], capture_output=True, text=True)
        check(out.returncode == rc and want in out.stdout + out.stderr, "%s: %r" % (path, out))

    # A broken file fails the start, with the loader's message.
    out = subprocess.run([pdr, "--pd-disaggregation", "--prefill", "http://127.0.0.1:1", "--decode",
                          "http://127.0.0.1:2", "--port", str(pdtest.free_port()), "--admin-port", "0",
                          "--access-log", "off", "--tokenizer-path", broken],
                         capture_output=True, text=True, timeout=20)
    check(out.returncode != 0 and "broken.json:3:" in out.stdout + out.stderr, repr(out))

    p, dec = sim("prefill"), sim("decode")
    admin_tok = os.path.join(d, "admin-token")
    with open(admin_tok, "w") as f:
        f.write("secret\n")
    r = router([p], [dec], config="tokenizer: %s\nadmin: { host: 127.0.0.1, port: {admin}, token_file: %s }"
               % (tok, admin_tok))
    try:
        pdtest.poll_until(lambda: len(loaded_lines(r)) == 1, 5, "the tokenizer's load line")
        check("(8000 tokens, 7741 merges" in loaded_lines(r)[0], loaded_lines(r)[0], r)
        # Unchanged file: the reload keeps the loaded tables.
        st, out = admin_reload(r)
        check(st == 200 and out["reloaded"] is True, repr(out), r)
        check(len(loaded_lines(r)) == 1, "an unchanged tokenizer was parsed again", r)
        # A broken file: the reload is refused with the loader's message, the old tokenizer stays.
        shutil.copy(broken, tok)
        st, out = admin_reload(r)
        check(st == 400 and "tokenizer.json:3:" in out["error"]["message"], "%d %r" % (st, out), r)
        check(reloads(r, "failed") == 1, "failed reloads", r)
        body = {"text": "hello", "sampling_params": {"max_new_tokens": 2}}
        check(request(r.port, "POST", "/generate", body)[0] == 200, "requests after the refused reload", r)
        # A changed, valid file (another tokenizer), but the reload is refused for another reason (the
        # admin token file is gone): nothing is installed.
        shutil.copy(fixture("gpt2.tokenizer.json"), tok)
        os.rename(admin_tok, admin_tok + ".away")
        st, out = admin_reload(r)
        check(st != 200 and "admin-token" in out["error"]["message"], "%d %r" % (st, out), r)
        check(len(loaded_lines(r)) == 1, "a refused reload installed the new tokenizer", r)
        os.rename(admin_tok + ".away", admin_tok)
        # Now it loads.
        r.proc.send_signal(signal.SIGHUP)
        pdtest.poll_until(lambda: reloads(r, "ok") == 2, 5, "the SIGHUP reload")
        lines = loaded_lines(r)
        check(len(lines) == 2 and "7743 merges" in lines[1], repr(lines), r)
        # The key removed: no tokenizer any more.
        with open(r.config_path) as f:
            text = f.read()
        with open(r.config_path, "w") as f:
            f.write(re.sub(r"(?m)^tokenizer: .*$", "", text))
        st, out = admin_reload(r)
        check(st == 200, repr(out), r)
        with open(r.log_path, errors="replace") as f:
            check("tokenizer: none any more" in f.read(), "the dropped tokenizer", r)
        check(r.stop() == 0, "exit status", r)
        log = r.log_tail(400)
        check("LeakSanitizer" not in log and "AddressSanitizer" not in log, "sanitizer report", r)
    finally:
        shutil.rmtree(d)


def fallback_lines(r, reason):
    with open(r.log_path, errors="replace") as f:
        return [l for l in f if "fallback %s:" % reason in l]


def scenario_router_fallback():
    """A prompt the router's tokenizer fails on (a pre-tokenizer regex past PCRE2's match limit) is routed
    by its text, as before, but not silently: pdr_fallbacks_total{reason} counts every such request (for
    routing, the KV deadline's length and decode admission's estimate), and the log has one line per reason and minute, however
    many come. A prompt it encodes counts nothing."""
    d = tmpdir()
    tok = os.path.join(d, "tokenizer.json")
    with open(fixture("../../fuzz/corpus/tokenizer/gpt2_small.json")) as f:
        t = json.load(f)
    # (a+)+b backtracks exponentially on a run of a's not followed by b: PCRE2 gives up at its match limit.
    t["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "(a+)+b"}, "behavior": "Isolated", "invert": False},
        t["pre_tokenizer"]]}
    with open(tok, "w") as f:
        json.dump(t, f)
    p, dec = sim("prefill"), sim("decode")
    # Decode admission is on for a decode that reports its KV (shim events): it needs the prompt's tokens.
    key = test_shim_events.key_file()
    r = router([p], [dec], config="tokenizer: %s\npolicy: { prefill: precise_prefix }\n"
               "timeouts: { kv_transfer_ms_per_1k_tokens: 100 }\nshim_events: { key_file: %s }" % (tok, key))
    try:
        m = lambda: request(r.port, "GET", "/metrics")[2].decode()  # noqa: E731
        pdtest.poll_until(lambda: (metric_value(m(), "pdr_kv_index_max_bytes") or 0) > 0, 5, "the KV event index")
        test_shim_events.Sender("http://127.0.0.1:%d" % dec.port).load(
            r, kv_free_bytes=1 << 30, kv_total_bytes=1 << 30, kv_bytes_per_token=10)
        good = {"text": "hello world", "sampling_params": {"max_new_tokens": 2}}
        bad = {"text": "a" * 40 + "!b", "sampling_params": {"max_new_tokens": 2}}
        check(request(r.port, "POST", "/generate", good)[0] == 200, "a prompt the tokenizer encodes", r)
        reasons = ("tokenize_routing", "tokenize_kv_deadline", "tokenize_kv_admission")
        for reason in reasons:
            check(metric_value(m(), "pdr_fallbacks_total", reason=reason) == 0, "%s counted a good prompt" % reason, r)
        st, _, out = request(r.port, "POST", "/generate", bad)
        check(st == 200, "the prompt the tokenizer fails on: %d %s" % (st, out[:200]), r)
        text = m()
        for reason in reasons:
            check(metric_value(text, "pdr_fallbacks_total", reason=reason) == 1, "%s not counted" % reason, r)
            lines = fallback_lines(r, reason)
            check(len(lines) == 1 and "ENOTSUP" in lines[0], "%s: log %r" % (reason, lines), r)
        # Within the minute: counted again, not logged again.
        check(request(r.port, "POST", "/generate", bad)[0] == 200, "the second prompt", r)
        text = m()
        for reason in reasons:
            check(metric_value(text, "pdr_fallbacks_total", reason=reason) == 2, "%s: second not counted" % reason, r)
            check(len(fallback_lines(r, reason)) == 1, "%s logged twice within a minute" % reason, r)
        check(r.stop() == 0, "exit status", r)
    finally:
        pdtest.stop_all()
        shutil.rmtree(d)
        os.unlink(key)


# A Llama-3-like chat template (trim_blocks: the newline after a block tag goes).
LLAMA_LIKE = ("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
              "{{ m['content'] | trim }}<|eot_id|>{% endfor %}{% if add_generation_prompt %}"
              "<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")


def llama_like(messages, gen=True):
    """LLAMA_LIKE rendered by hand (what python3-jinja2 gives for it)."""
    out = "<|begin_of_text|>"
    for m in messages:
        out += "<|start_header_id|>%s<|end_header_id|>\n\n%s<|eot_id|>" % (m["role"], m["content"].strip())
    if gen:
        out += "<|start_header_id|>assistant<|end_header_id|>\n\n"
    return out


def pdtok_count(tok, text):
    """The ids of text without the post-processor's prefix (pdtok encodes with it: Llama 3's <|begin_of_text|>)."""
    out = subprocess.run([pdtest.binary("pdtok"), tok, text], capture_output=True, text=True, check=True)
    ids = out.stdout.split()
    return len(ids) - 1


def scenario_chat_template():
    """A model directory with a chat template: a chat request's ids are the template's text encoded without
    special tokens (kv_tokens in the access log, from the tokenizer); a template that raises is a counted
    fall-back (the request is routed by its text, the KV deadline estimated); a directory without one
    leaves chat requests without ids, as before."""
    d = tmpdir()
    tok = os.path.join(d, "tokenizer.json")
    shutil.copy(fixture("llama3.tokenizer.json"), tok)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": {"content": "<|begin_of_text|>"}, "eos_token": "<|eot_id|>",
                   "chat_template": LLAMA_LIKE}, f)
    alog = os.path.join(d, "access.log")
    p, dec = sim("prefill"), sim("decode")
    r = router([p], [dec], config="tokenizer: %s\ntimeouts: { kv_transfer_ms_per_1k_tokens: 1 }\n"
               "log: { access_log: %s }" % (d, alog))
    try:
        msgs = [{"role": "system", "content": "You are terse. "}, {"role": "user", "content": "Name three colours."}]
        body = {"model": "m", "messages": msgs, "max_tokens": 2}
        check(request(r.port, "POST", "/v1/chat/completions", body)[0] == 200, "chat request", r)
        want = pdtok_count(tok, llama_like(msgs))
        line = pdtest.access_lines(alog, 1)[-1]
        check(line["kv_tokens_from"] == "tokenizer" and line["kv_tokens"] == want,
              "kv_tokens %r from %r, want %d" % (line["kv_tokens"], line["kv_tokens_from"], want), r)
        # add_generation_prompt false in the body: the template's own flag.
        body2 = dict(body, add_generation_prompt=False)
        check(request(r.port, "POST", "/v1/chat/completions", body2)[0] == 200, "chat request 2", r)
        line = pdtest.access_lines(alog, 2)[-1]
        check(line["kv_tokens"] == pdtok_count(tok, llama_like(msgs, gen=False)), "no generation prompt %r" % line, r)
        check(r.stop() == 0, "exit status", r)
        # pdsim with the same directory renders chat prompts the same way: its prompt_tokens are those ids.
        both = pdtest.start(["pdsim", "--role", "both", "--port", "{port}", "--tokenizer", d], name="pdsim-chat")
        out = request_json(both.port, "POST", "/v1/chat/completions", body)
        check(out["usage"]["prompt_tokens"] == want, "pdsim's prompt_tokens %r, want %d" % (out["usage"], want), both)
        # A template that raises: counted, and the request still served.
        with open(os.path.join(d, "chat_template.jinja"), "w") as f:
            f.write("{{ raise_exception('roles must alternate') }}")
        r = router([p], [dec], config="tokenizer: %s\ntimeouts: { kv_transfer_ms_per_1k_tokens: 1 }\n"
                   "log: { access_log: %s }" % (d, alog))
        check(request(r.port, "POST", "/v1/chat/completions", body)[0] == 200, "chat request, raising template", r)
        line = pdtest.access_lines(alog, 3)[-1]
        check(line["kv_tokens_from"] == "estimate", "a raising template gave ids: %r" % line, r)
        text = request(r.port, "GET", "/metrics")[2].decode()
        check(metric_value(text, "pdr_fallbacks_total", reason="tokenize_kv_deadline") == 1, "fall-back not counted", r)
        check(metric_value(text, "pdr_fallbacks_total", reason="chat_template") >= 1, "template failure not counted", r)
        lines = fallback_lines(r, "chat_template")
        check(len(lines) == 1 and "roles must alternate" in lines[0], "log %r" % lines, r)
    finally:
        pdtest.stop_all()
        shutil.rmtree(d)


GPT2 = fixture("gpt2.tokenizer.json")  # byte-level BPE
SPM = fixture("spm_meta.tokenizer.json")  # SentencePiece-style BPE


def pdtok_ids(tok, text):
    out = subprocess.run([pdtest.binary("pdtok"), tok, text], capture_output=True, text=True, check=True)
    return [int(x) for x in out.stdout.split()]


def pool_yaml(name, model, p, d, policy="round_robin", tokenizer=None, kv_events=False, per_1k=0):
    kv = ", kv_events: 'tcp://127.0.0.1:%d'" % p.ports["kv"] if kv_events else ""
    lines = ["  - name: %s" % name, "    models: [%s]" % model, "    policy: { prefill: %s, decode: least_load }" % policy,
             "    timeouts: { kv_transfer_ms_per_1k_tokens: %d }" % per_1k if per_1k else "    timeouts: {}",
             "    workers:",
             "      prefill: [ { url: http://127.0.0.1:%d, bootstrap_port: %d%s } ]" % (p.port, p.ports["bport"], kv),
             "      decode: [ http://127.0.0.1:%d ]" % d.port]
    if tokenizer is not None:
        lines.append("    tokenizer: %s" % tokenizer)
    return "\n".join(lines)


def kv_prefill(tokenizer=None):
    argv = ["pdsim", "--role", "prefill", "--port", "{port}", "--bootstrap-port", "{bport}", "--prefix-cache-tokens",
            "65536", "--cache-block-tokens", "16", "--kv-events-endpoint", "tcp://127.0.0.1:{kv}"]
    return pdtest.start(argv + (["--tokenizer", tokenizer] if tokenizer else []), name="pdsim-prefill")


def unknown(text):
    return metric_value(text, "pdr_fallbacks_total", reason="unknown_model")


def scenario_pools():
    """Pools with tokenizers of their own: pool a (byte-level BPE) and pool b (SentencePiece) encode the same
    text with their own tokenizer (the KV deadline's kv_tokens are each fixture's count, and pool a's
    precise_prefix pick matches the ids its engine's KV events hold); pool c has none and there is no
    top-level one: its text and chat prompts are the unknown_model fall-back, counted once per request in
    /metrics and shown in the access log's prefix, its log line naming the model; input_ids are not."""
    d = tmpdir()
    alog = os.path.join(d, "access.log")
    pa, pb, pc, pd = kv_prefill(GPT2), kv_prefill(SPM), kv_prefill(), sim("prefill")
    da, db, dc, dd = sim("decode", "--tokenizer", GPT2), sim("decode", "--tokenizer", SPM), sim("decode"), sim("decode")
    cfg = "\n".join(["log: { access_log: %s }" % alog,
                     "cache_aware: { seed: smallest_tree }", "kv_events: { resync_messages: 1 }", "pools:",
                     pool_yaml("a", "model-a", pa, da, "precise_prefix", GPT2, kv_events=True, per_1k=1),
                     pool_yaml("b", "model-b", pb, db, "precise_prefix", SPM, kv_events=True, per_1k=1),
                     pool_yaml("c", "model-c", pc, dc, "precise_prefix", kv_events=True, per_1k=1),
                     # Pool d wants no ids (round_robin, no KV deadline per token): nothing to count.
                     pool_yaml("d", "model-d", pd, dd)])
    r = router([], [], config=cfg)
    try:
        m = lambda: request(r.port, "GET", "/metrics")[2].decode()  # noqa: E731
        n = [0]

        def post(model, body, route="/v1/completions"):
            extra = {} if route == "/generate" else {"max_tokens": 1}
            st, _, out = request(r.port, "POST", route, dict(body, model=model, **extra))
            check(st == 200, "%s: %d %r" % (model, st, out[:300]), r)
            n[0] += 1
            return pdtest.access_lines(alog, n[0])[-1]

        # Pool a's engine publishes its blocks; once its events reach the router (the SUB socket connects
        # asynchronously), a prompt sharing a prefix is matched in the index, in pool a's token ids.
        system = " ".join("sentence%d about the weather here" % i for i in range(40))
        want_a, want_b = len(pdtok_ids(GPT2, system + " one")), len(pdtok_ids(SPM, system + " one"))
        check(want_a != want_b, "the fixtures give the same count", r)
        line = post("model-a", {"prompt": system + " one"})
        check(line["kv_tokens_from"] == "tokenizer" and line["kv_tokens"] == want_a,
              "pool a: kv_tokens %r from %r, want %d (gpt2)" % (line["kv_tokens"], line["kv_tokens_from"], want_a), r)
        line = post("model-b", {"prompt": system + " one"})
        check(line["kv_tokens_from"] == "tokenizer" and line["kv_tokens"] == want_b,
              "pool b: kv_tokens %r from %r, want %d (spm)" % (line["kv_tokens"], line["kv_tokens_from"], want_b), r)
        k, last = [0], [None]

        def indexed():
            k[0] += 1
            line = post("model-a", {"prompt": system + " tail %d" % k[0]})
            p = line["prefix"]
            last[0] = p
            return line if p and p["source"] == "index" and p["matched"] >= 16 else None
        try:
            line = pdtest.poll_until(indexed, 10, "pool a's prompt matched in the KV event index")
        except AssertionError:
            check(False, "pool a's prompt not matched in the KV event index: last prefix %r" % last[0], r)
        check(line["prefix"]["unit"] == "tokens" and "fallback" not in line["prefix"], repr(line["prefix"]), r)
        text = m()
        check(unknown(text) == 0, "pools with tokenizers counted unknown_model", r)
        for reason in ("tokenize_routing", "tokenize_kv_deadline"):
            check(metric_value(text, "pdr_fallbacks_total", reason=reason) == 0, "%s counted" % reason, r)

        post("model-d", {"prompt": system + " one"})
        post("model-d", {"messages": [{"role": "user", "content": "hi"}]}, "/v1/chat/completions")
        check(unknown(m()) == 0, "pool d (no ids wanted) counted unknown_model", r)

        # Pool c: no tokenizer of its own and none at the top. Routing and the KV deadline both wanted the
        # ids: one count for the request.
        line = post("model-c", {"prompt": system + " one"})
        check(line["prefix"] is not None and line["prefix"]["source"] == "tree" and
              line["prefix"].get("fallback") == "unknown_model", "pool c prefix %r" % line["prefix"], r)
        check(line["kv_tokens_from"] == "estimate", "pool c kv_tokens_from %r" % line["kv_tokens_from"], r)
        check(unknown(m()) == 1, "unknown_model: %r, want 1" % unknown(m()), r)
        with open(r.log_path, errors="replace") as f:
            lines = [l for l in f if "fallback unknown_model:" in l]
        check(len(lines) == 1 and 'model "model-c" has no tokenizer' in lines[0], "log %r" % lines, r)
        # A chat request too; input_ids need no tokenizer.
        msgs = [{"role": "user", "content": "Name three colours."}]
        post("model-c", {"messages": msgs}, "/v1/chat/completions")
        check(unknown(m()) == 2, "chat: unknown_model %r, want 2" % unknown(m()), r)
        line = post("model-c", {"input_ids": list(range(100, 140)), "sampling_params": {"max_new_tokens": 1}},
                    "/generate")
        check(line["kv_tokens_from"] == "ids" and "fallback" not in (line["prefix"] or {}), repr(line), r)
        # The router reads a body's input_ids on any route, before its text: no tokenizer is needed then.
        line = post("model-c", {"prompt": "hello there", "input_ids": list(range(100, 140))})
        check(line["kv_tokens_from"] == "ids" and "fallback" not in (line["prefix"] or {}), repr(line), r)
        check(unknown(m()) == 2, "input_ids counted unknown_model: %r" % unknown(m()), r)
        check(r.stop() == 0, "exit status", r)
    finally:
        pdtest.stop_all()
        shutil.rmtree(d)


def scenario_unknown_model_quiet():
    """No tokenizer anywhere, but nothing wants token ids (round_robin, no KV deadline per token, no decode
    admission): text and chat prompts count no fall-back."""
    p, dec = sim("prefill"), sim("decode")
    r = router([p], [dec], config="policy: { prefill: round_robin, decode: round_robin }")
    try:
        check(request(r.port, "POST", "/generate", {"text": "hello", "sampling_params": {"max_new_tokens": 1}})[0]
              == 200, "text", r)
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
        check(request(r.port, "POST", "/v1/chat/completions", body)[0] == 200, "chat", r)
        text = request(r.port, "GET", "/metrics")[2].decode()
        for reason in ("unknown_model", "tokenize_routing", "tokenize_kv_deadline", "tokenize_kv_admission"):
            check(metric_value(text, "pdr_fallbacks_total", reason=reason) == 0, "%s counted" % reason, r)
        check(r.stop() == 0, "exit status", r)
    finally:
        pdtest.stop_all()


def scenario_pool_reload():
    """A pool's tokenizer: --check-config and a start refuse a broken path with its file:line:col; a reload
    that swaps it takes the new one (the request's kv_tokens follow), one that leaves it unchanged does not
    parse it again, and one with a broken path is refused with the place and keeps the running one."""
    d = tmpdir()
    alog = os.path.join(d, "access.log")
    admin_tok = os.path.join(d, "admin-token")
    with open(admin_tok, "w") as f:
        f.write("secret\n")
    p1, d1, p2, d2 = sim("prefill"), sim("decode"), sim("prefill"), sim("decode")

    def config(tok_a):
        return "\n".join(["timeouts: { kv_transfer_ms_per_1k_tokens: 1 }", "log: { access_log: %s }" % alog,
                          "admin: { host: 127.0.0.1, port: {admin}, token_file: %s }" % admin_tok, "pools:",
                          pool_yaml("a", "model-a", p1, d1, tokenizer=tok_a),
                          pool_yaml("b", "model-b", p2, d2, tokenizer=GPT2)])
    missing = os.path.join(d, "missing.json")
    # --check-config and a start: the broken path named with its place in the file (pool b's line is fine).
    cfg = os.path.join(d, "check.yaml")
    with open(cfg, "w") as f:
        f.write(config(missing).replace("{admin}", "0") + "\n")
    at = next(i for i, l in enumerate(open(cfg), 1) if "tokenizer: " + missing in l)
    col = open(cfg).read().splitlines()[at - 1].index(missing) + 1
    pdr = pdtest.binary("pdrouter")
    out = subprocess.run([pdr, "--check-config", cfg], capture_output=True, text=True)
    want = "%s:%d:%d: pools[0].tokenizer: %s" % (cfg, at, col, missing)
    check(out.returncode == 2 and want in out.stderr, "check-config %r, want %r" % (out, want))
    out = subprocess.run([pdr, "--config", cfg, "--access-log", "off"], capture_output=True, text=True, timeout=20)
    check(out.returncode != 0 and want in out.stdout + out.stderr, "start %r" % out)
    # An empty path is refused by the loader of the file itself.
    with open(cfg, "w") as f:
        f.write(config("''").replace("{admin}", "0") + "\n")
    out = subprocess.run([pdr, "--check-config", cfg], capture_output=True, text=True)
    check(out.returncode == 2 and "pools[0].tokenizer: must not be empty" in out.stderr, repr(out))
    with open(cfg, "w") as f:
        f.write(config(SPM).replace("{admin}", "0") + "\n")
    out = subprocess.run([pdr, "--check-config", cfg], capture_output=True, text=True)
    check(out.returncode == 0 and "ok" in out.stdout, repr(out))

    r = router([], [], config=config(SPM))
    try:
        text = "The quick brown fox jumps over the lazy dog, twice and again."
        n = [0]

        def tokens(model):
            st, _, out = request(r.port, "POST", "/v1/completions", {"model": model, "prompt": text, "max_tokens": 1})
            check(st == 200, "%d %r" % (st, out[:200]), r)
            n[0] += 1
            line = pdtest.access_lines(alog, n[0])[-1]
            check(line["kv_tokens_from"] == "tokenizer", repr(line), r)
            return line["kv_tokens"]
        spm, gpt2 = len(pdtok_ids(SPM, text)), len(pdtok_ids(GPT2, text))
        check(spm != gpt2, "the fixtures give the same count")
        check(tokens("model-a") == spm and tokens("model-b") == gpt2, "per-pool counts at start", r)
        check(len(loaded_lines(r)) == 2, "load lines %r" % loaded_lines(r), r)
        # Unchanged: nothing parsed again.
        st, out = admin_reload(r)
        check(st == 200 and len(loaded_lines(r)) == 2, "unchanged reload parsed again: %r" % loaded_lines(r), r)
        # Pool a's tokenizer swapped for pool b's file: taken, not parsed again (b has it loaded).
        with open(r.config_path) as f:
            body = f.read()
        with open(r.config_path, "w") as f:
            f.write(body.replace("tokenizer: " + SPM, "tokenizer: " + GPT2))
        st, out = admin_reload(r)
        check(st == 200, repr(out), r)
        check(tokens("model-a") == gpt2, "pool a after the swap", r)
        check(len(loaded_lines(r)) == 2, "a file loaded already was parsed again", r)
        # Then to a broken path: refused, with the place; the running tokenizer stays.
        with open(r.config_path, "w") as f:
            f.write(body.replace("tokenizer: " + SPM, "tokenizer: " + missing))
        at = next(i for i, l in enumerate(open(r.config_path), 1) if "tokenizer: " + missing in l)
        st, out = admin_reload(r)
        msg = out["error"]["message"]
        check(st == 400 and ("%s:%d:" % (r.config_path, at)) in msg and "pools[0].tokenizer: " + missing in msg,
              "%d %r" % (st, out), r)
        check(tokens("model-a") == gpt2, "pool a after the refused reload", r)
        # Back to SentencePiece: parsed again (no one holds it any more).
        with open(r.config_path, "w") as f:
            f.write(body)
        st, out = admin_reload(r)
        check(st == 200 and tokens("model-a") == spm, "pool a back to spm", r)
        check(any("pool a: tokenizer: " in l for l in loaded_lines(r)[2:]), repr(loaded_lines(r)), r)
        check(r.stop() == 0, "exit status", r)
        log = r.log_tail(400)
        check("LeakSanitizer" not in log and "AddressSanitizer" not in log, "sanitizer report", r)
    finally:
        pdtest.stop_all()
        shutil.rmtree(d)


if __name__ == "__main__":
    pdtest.run_scenario(globals())
