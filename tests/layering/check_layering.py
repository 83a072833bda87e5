#!/usr/bin/env python3
"""The router's layering (docs/internals/principles.md, "What may call what").

router/ is a set of folders, each a static library, ranked in FOLDERS from the bottom up; main.c, the
process, sits alone above them all. The check fails when:

  - a .c or .h file under router/ is in no ranked folder (nor main.c);
  - a file calls a function defined in, or #includes a header of, a folder ranked higher than its own
    (a folder uses only the folders below it, and itself);
  - the files form a cycle: the graph of calls and includes between the files of router/ has none, so
    that a reader can order every folder's files bottom to top.

The nodes of the cycle check are the files. A header is one node with the .c of its stem in its folder
(x.h with x.c: including x.h uses x.c, as calling what x.h declares does); a header with no .c of its
stem (an _internal.h, a table of types) is a node of its own. So a module split on its seams orders its
parts: the _internal.h they share at the bottom holds what every part needs (state, types, prototypes)
and includes only what is below every part; no part calls a part above it, and the public header, which
counts as the .c of its stem, is that file's and sits above what it includes. Where a lower part must
reach a higher one (a connection ending its leg, a part of a PD request handing over to the request's
state machine), the higher one registers a function pointer, in the manner of nginx's upstream handlers:
the table of handlers is filled by the file above, so a function named without a call is no edge.

A call is a function name followed by "(" outside comments and string literals, where the name is a
non-static function that a .c file of router/ defines; in a header only the calls in function bodies and
macros count (a prototype is no call). An include is a quoted #include that names a file of router/ (the
including file's folder first, then any folder: each library puts its folder on the include path, so a
name is unique across folders).

Usage: check_layering.py [ROOT] [--graph]. ROOT holds router/ (default: this repository). --graph prints
every edge between folders. Exits 1 naming each file out of the table, each edge against the ranks and
each cycle.
"""
import os
import re
import sys

# Bottom first: a folder may use the folders before it in this list.
FOLDERS = [
    "util",       # JSON scanning and body rewriting, replies, fall-backs, socket info
    "upstream",   # the HTTP/1.1 client of the workers and its TLS
    "discovery",  # the DNS and Kubernetes discovery sources
    "epp",        # the endpoint picker: gRPC on nghttp2, health checking, Envoy's ext_proc stream
    "workers",    # the pool and per-worker state: outlier, links and breakers, KV deadlines, disaggregation
    "obs",        # metrics storage, phases, traces, OTLP
    "core",       # the router's and the loops' state (router.h), the tokenizer reference
    "fleet",      # loop services about the workers: health checks, admission, KV events, shim reports
    "front",      # client connections and guards, limits, TLS contexts, forwarded headers, routes, access log
    "pd",         # the PD request path
    "gateway",    # the Gateway API roles: the endpoint picker (its picks, on epp/)
    "control",    # admin API, reload, compatible routes, the /metrics exposition
    "server",     # listeners, loop threads, route dispatch, shutdown
]
TOP = ["main.c"]  # files of router/ itself, above every folder

DEF = re.compile(r"^(?!static\b)(?:[A-Za-z_][\w \t\*]*?[\s\*])(pdr_\w+)\s*\([^;]*$", re.M)
CALL = re.compile(r"\b(pdr_\w+)\s*\(")
INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)


def strip(text):
    """The text without comments, string and character literals (line breaks kept)."""
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


def bodies(text):
    """Of a header's stripped text, the function bodies and the macros (where a header can call)."""
    out, depth = [], 0
    for line in text.split("\n"):
        if line.lstrip().startswith("#define"):
            out.append(line)
            continue
        kept = []
        for ch in line:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif depth > 0:
                kept.append(ch)
        out.append("".join(kept))
    return "\n".join(out)


def rank_of(path):
    """The rank of a file of router/ (path relative to router/), or None when it is in no ranked folder."""
    if path in TOP:
        return len(FOLDERS)
    top = path.split("/", 1)[0]
    return FOLDERS.index(top) if "/" in path and top in FOLDERS else None


def folder_of(path):
    return path.split("/", 1)[0] if "/" in path else "."


def node_of(path, files):
    """The node the cycle check counts path as: a header's .c of the same stem where there is one, else the
    file itself."""
    if path.endswith(".h") and path[:-2] + ".c" in files:
        return path[:-2] + ".c"
    return path


def find_cycle(scc, edges):
    """One cycle through the nodes of a strongly connected component, as a list of nodes."""
    start = sorted(scc)[0]
    prev, queue, seen = {}, [start], {start}
    while queue:
        v = queue.pop(0)
        for w in sorted(edges.get(v, {})):
            if w not in scc:
                continue
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(prev[path[-1]])
                return list(reversed(path)) + [start]
            if w not in seen:
                seen.add(w)
                prev[w] = v
                queue.append(w)
    return [start, start]


def sccs(edges):
    """Tarjan's strongly connected components with more than one node."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    nodes = sorted(set(edges) | {w for v in edges for w in edges[v]})
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, {}))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, {})))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = set()
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.add(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(comp)
    return out


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    router = os.path.join(root, "router")
    files = []
    for d, dirs, names in os.walk(router):
        dirs.sort()
        for name in sorted(names):
            if name.endswith((".c", ".h")):
                files.append(os.path.relpath(os.path.join(d, name), router).replace(os.sep, "/"))
    problems = []
    for f in FOLDERS:
        if not os.path.isdir(os.path.join(router, f)):
            problems.append(f"layering: router/{f}/ is in the table but does not exist")
    for f in files:
        if rank_of(f) is None:
            problems.append(f"layering: router/{f} is in no ranked folder (add it to one, or the folder to FOLDERS)")

    raw = {f: open(os.path.join(router, f), encoding="utf-8").read() for f in files}
    code = {f: strip(raw[f]) for f in files}
    by_name = {}
    for f in files:
        by_name.setdefault(os.path.basename(f), []).append(f)
    defs = {}
    for f in files:
        if f.endswith(".c"):
            for m in DEF.finditer(code[f]):
                defs.setdefault(m.group(1), f)

    # Edges between files, each with what makes it (a call or an include).
    uses = {}
    for f in files:
        for m in INCLUDE.finditer(raw[f]):
            inc = m.group(1)
            here = os.path.normpath(os.path.join(os.path.dirname(f), inc)).replace(os.sep, "/")
            if here in raw:
                target = here
            elif len(by_name.get(os.path.basename(inc), [])) == 1:
                target = by_name[os.path.basename(inc)][0]
            elif by_name.get(os.path.basename(inc)):
                problems.append(f"layering: router/{f} includes \"{inc}\", a name several folders hold: "
                                + ", ".join("router/" + p for p in by_name[os.path.basename(inc)]))
                continue
            else:
                continue  # not a file of router/ (common/, config/, a generated header)
            if target != f:
                uses.setdefault(f, {}).setdefault(target, set()).add(f'#include "{inc}"')
        text = code[f] if f.endswith(".c") else bodies(code[f])
        for name in sorted(set(CALL.findall(text))):
            home = defs.get(name)
            if home is not None and home != f:
                uses.setdefault(f, {}).setdefault(home, set()).add(name + "()")

    edges, folder_edges = {}, {}
    for f, targets in sorted(uses.items()):
        for t, why in sorted(targets.items()):
            rf, rt = rank_of(f), rank_of(t)
            if folder_of(f) != folder_of(t):
                folder_edges.setdefault((folder_of(f), folder_of(t)), set()).update(why)
            if rf is not None and rt is not None and rt > rf:
                problems.append(f"layering: router/{f} uses router/{t} ({', '.join(sorted(why))}): against the "
                                f"ranks ({folder_of(f)}/ may use only the folders below it; {folder_of(t)}/ is above)")
            a, b = node_of(f, raw), node_of(t, raw)
            if a != b:
                edges.setdefault(a, {}).setdefault(b, set()).update(f"router/{f}: {w}" for w in why)
    for comp in sccs(edges):
        cycle = find_cycle(comp, edges)
        steps = "; ".join(
            f"{a} -> {b} by {', '.join(sorted(edges[a][b])[:3])}" for a, b in zip(cycle, cycle[1:]))
        problems.append("layering: cycle: " + " -> ".join("router/" + n for n in cycle) + f" ({steps})")

    if "--graph" in sys.argv:
        for (a, b), why in sorted(folder_edges.items()):
            print(f"{a} -> {b}: {', '.join(sorted(why))}")
    for p in problems:
        print(p)
    if not defs:
        print("layering: no function definitions found (the pattern broke)")
        return 1
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
