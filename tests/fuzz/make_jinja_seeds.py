#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_jinja (tests/fuzz/corpus/jinja/) from tests/fixtures/jinja/: each family
template with two of the chat inputs, and each edge case with the edge context, as TEMPLATE NUL JSON (the
input fuzz_jinja.c reads). Run it again when the fixtures change; it replaces the corpus."""
import glob
import json
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "fixtures", "jinja")
OUT = os.path.join(HERE, "corpus", "jinja")


def main():
    os.makedirs(OUT, exist_ok=True)
    for old in glob.glob(os.path.join(OUT, "*")):
        os.remove(old)
    inputs = {os.path.basename(p): open(p, encoding="utf-8").read() for p in glob.glob(os.path.join(FIX, "inputs", "*.json"))}
    compact = {k: json.dumps(json.loads(v), ensure_ascii=False) for k, v in inputs.items()}
    for path in sorted(glob.glob(os.path.join(FIX, "templates", "*.jinja"))):
        text = open(path, encoding="utf-8").read()
        stem = os.path.basename(path)[:-6]
        for inp in ("chat_tools.json", "chat_multimodal.json"):
            with open(os.path.join(OUT, "%s+%s" % (stem, inp[5:-5])), "wb") as f:
                f.write(text.encode() + b"\0" + compact[inp].encode())
    for path in sorted(glob.glob(os.path.join(FIX, "cases", "*.cases"))):
        stem = os.path.basename(path)[:-6]
        sections = re.split(r"^=== case (.*) ===\n", open(path, encoding="utf-8").read(), flags=re.M)
        for name, body in zip(sections[1::2], sections[2::2]):
            slug = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
            with open(os.path.join(OUT, "%s-%s" % (stem, slug)), "wb") as f:
                f.write(body.rstrip("\n").encode() + b"\0" + compact["edge_context.json"].encode())


if __name__ == "__main__":
    main()
