#!/usr/bin/env python3
"""Writes a tokenizer.json of real-file size (Llama 3's: 128 000 tokens, 280 000 merges, about 9 MB;
Qwen2's 151 000 / 151 000 in 7 MB; Qwen2 with pretty printing reaches 11 MB) from one of the small
fixtures, for tokenizer_bench's load time and memory: the fixture's vocabulary and merges, then tokens
made by joining two existing ones (each a new merge), then further merges that reach an existing token
by another split. Deterministic (seeded). The ids it encodes mean nothing; the structure is that of a
real file.

    python3 bench/make_big_tokenizer.py SMALL.tokenizer.json OUT.json [VOCAB MERGES [INDENT]]
"""
import json
import random
import sys


def main():
    src, out = sys.argv[1], sys.argv[2]
    vocab_n = int(sys.argv[3]) if len(sys.argv) > 3 else 128000
    merges_n = int(sys.argv[4]) if len(sys.argv) > 4 else 280000
    indent = int(sys.argv[5]) if len(sys.argv) > 5 else 2
    d = json.load(open(src, encoding="utf-8"))
    m = d["model"]
    vocab = dict(m["vocab"])
    merges = [tuple(x) if isinstance(x, list) else tuple(x.split(" ")) for x in m["merges"]]
    have = set(merges)
    toks = sorted(vocab, key=vocab.get)
    rnd = random.Random(1)
    nid = max(vocab.values()) + 1
    specials = {a["content"] for a in d["added_tokens"]}
    base = [t for t in toks if t not in specials and len(t) <= 8]
    while len(vocab) < vocab_n:
        a, b = rnd.choice(base), rnd.choice(base)
        t = a + b
        if t in vocab or len(t) > 16:
            continue
        vocab[t] = nid
        nid += 1
        merges.append((a, b))
        have.add((a, b))
        base.append(t)
    # More merges to existing tokens by another split point (real files have more merges than tokens).
    long_toks = [t for t in vocab if len(t) >= 3 and t not in specials]
    tries = 0
    while len(merges) < merges_n and tries < merges_n * 20:
        tries += 1
        t = rnd.choice(long_toks)
        k = rnd.randrange(1, len(t))
        a, b = t[:k], t[k:]
        if a in vocab and b in vocab and (a, b) not in have:
            merges.append((a, b))
            have.add((a, b))
    m["vocab"] = vocab
    m["merges"] = [list(x) for x in merges]
    with open(out, "w", encoding="utf-8") as f:
        json.dump(d, f, ensure_ascii=False, indent=indent)
    print("%s: %d tokens, %d merges" % (out, len(vocab), len(merges)))


main()
