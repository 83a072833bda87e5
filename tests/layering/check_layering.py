#!/usr/bin/env python3
"""The router's call direction (docs/internals/principles.md, "What may call what").

Each file of router/ named in RANKS (a folder, "pd/", stands for all its .c files as one, and so does a
pattern, "conn*.c", for the files it matches) may call the functions defined in another file of the table only
when that file's rank is lower: main starts the server; the server dispatches to the handlers (pd, admin,
compat); the handlers and the server call the reload service; everything may call the shared helpers (replies,
access log, client connections, the admin token, the admin API's body parsers). A call is the defining file's
non-static function name followed by "(" outside comments and string literals. Usage: check_layering.py [ROOT]
[--graph].
Exits 1 naming each call against the direction.
"""
import fnmatch
import os
import re
import sys

RANKS = {
    "main.c": 4,
    "server*.c": 3,
    "pd/": 2,
    "admin.c": 2,
    "compat.c": 2,
    "reload.c": 1,
    "conn*.c": 1,
    "routes.c": 0,
    "reply.c": 0,
    "accesslog.c": 0,
    "admin_token.c": 0,
    "admin_parse.c": 0,
}

DEF = re.compile(r"^(?!static\b)(?:[A-Za-z_][\w \t\*]*?[\s\*])(pdr_\w+)\s*\([^;]*$", re.M)


def strip(text):
    """The text without comments, string and character literals (same length per line kept simple)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    router = os.path.join(root, "router")
    code, defs = {}, {}
    for f in RANKS:
        path = os.path.join(router, f)
        if not ("*" in f and any(fnmatch.fnmatch(p, f) for p in os.listdir(router))) and not os.path.exists(path):
            print(f"layering: router/{f} is in the table but does not exist")
            return 1
        if f.endswith("/"):
            parts = sorted(p for p in os.listdir(path) if p.endswith(".c"))
            text = "".join(open(os.path.join(path, p), encoding="utf-8").read() + "\n" for p in parts)
        elif "*" in f:
            parts = sorted(p for p in os.listdir(router) if fnmatch.fnmatch(p, f))
            text = "".join(open(os.path.join(router, p), encoding="utf-8").read() + "\n" for p in parts)
        else:
            text = open(path, encoding="utf-8").read()
        code[f] = strip(text)
        for m in DEF.finditer(code[f]):
            defs.setdefault(m.group(1), f)
    bad, edges = [], set()
    for f, text in code.items():
        for name, home in defs.items():
            if home == f or not re.search(r"\b" + name + r"\s*\(", text):
                continue
            edges.add((f, home, name))
            if RANKS[home] >= RANKS[f]:
                bad.append(f"router/{f} calls {name}() of router/{home}: against the direction "
                           f"(rank {RANKS[f]} may call only lower ranks, {home} is {RANKS[home]})")
    if "--graph" in sys.argv:
        for e in sorted(edges):
            print("%s -> %s: %s" % e)
    for b in bad:
        print(b)
    if not defs:
        print("layering: no function definitions found (the pattern broke)")
        return 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
