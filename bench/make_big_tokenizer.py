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
    # Syllables: the fixture's short tokens. New tokens are runs of syllables, each added with every
    # merge that splits it at a syllable boundary into two tokens (as Llama 3 lists every such split).
    syl = [t for t in toks if t not in specials and 2 <= len(t) <= 4]
    by_first = {}

    def add(parts):
        nonlocal nid
        t = "".join(parts)
        if t in vocab:
            return False
        vocab[t] = nid
        nid += 1
        for k in range(1, len(parts)):
            a, b = "".join(parts[:k]), "".join(parts[k:])
            if a in vocab and b in vocab and (a, b) not in have:
                merges.append((a, b))
                have.add((a, b))
        return True

    runs = []
    while len(vocab) < vocab_n:
        if len(runs) < 2000 or rnd.random() < 0.25:
            parts = [rnd.choice(syl), rnd.choice(syl)]
        else:
            # Extend a run by a syllable that follows its last one in another run (so the tail is a token).
            r = rnd.choice(runs)
            nxt = by_first.get(r[-1])
            if len(r) >= 6 or not nxt:
                continue
            parts = r + [rnd.choice(nxt)[1]]
        if add(parts):
            runs.append(parts)
            if len(parts) == 2:
                by_first.setdefault(parts[0], []).append(parts)
    m["vocab"] = vocab
    m["merges"] = [list(x) for x in merges]
    with open(out, "w", encoding="utf-8") as f:
        json.dump(d, f, ensure_ascii=False, indent=indent)
    print("%s: %d tokens, %d merges" % (out, len(vocab), len(merges)))


main()
