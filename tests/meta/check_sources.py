#!/usr/bin/env python3
"""Checks on the C sources: a limit on the length of those outside tests/ (the hand-written code of the
router, config, routing, the tokenizer, transport, the shim, common and bench), and a rule every C file of
the tree keeps.

  check_sources.py long_files [ROOT]
      No file is over 700 lines, without exception: a file that grows past it is split on its seams (files
      of one idea each, with an internal header where they share state).
  check_sources.py size_max_limits [ROOT]
      Every buffer has a ceiling: SIZE_MAX (or SIZE_MAX / 2 ...) as the limit of a pdr_buf_* call, or
      assigned to a limit, max or cap, is no ceiling at all. Any such limit in any C source or header of the
      tree (tests/ and pdsim included) fails, with its file and line: give the buffer a real ceiling, chosen
      at init, and make growth past it PDR_ETOOBIG.
  check_sources.py internals_index [ROOT]
      Every page of docs/internals/ is listed in the index of docs/internals/principles.md, and the index
      names no page that does not exist.
  check_sources.py selftest
      The size_max_limits detector against the snippets in SELFTEST: each must be found, or not, as marked.

Files are those `git ls-files --cached --others --exclude-standard` lists, new ones included (every file
under ROOT but build trees and .git when ROOT is not a git checkout). Exit 0: held; 1: broken, every problem
named; 2: usage.
"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_LINES = 700


def tracked(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"], capture_output=True, check=True).stdout
        return [p for p in out.decode("utf-8", "replace").split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, dirs, names in os.walk(root):
            dirs[:] = [x for x in dirs if x != ".git" and not x.startswith("build")]
            files += [os.path.relpath(os.path.join(d, n), root) for n in names]
        return files


def sources(root):
    """The C sources and headers outside tests/ that exist in the tree, as (relative path, text)."""
    for rel in sorted(tracked(root)):
        rel = rel.replace(os.sep, "/")
        if not rel.endswith((".c", ".h")) or rel.startswith("tests/"):
            continue
        try:
            with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
                yield rel, f.read()
        except OSError:
            continue


def check_long_files(root):
    problems, n_files = [], 0
    for rel, text in sources(root):
        n = text.count("\n")
        n_files += 1
        if n > MAX_LINES:
            problems.append("%s: %d lines, over %d: split it on its seams (files of one idea each)"
                            % (rel, n, MAX_LINES))
    return problems, "%d sources, none over %d lines" % (n_files, MAX_LINES)


def strip_c(text):
    """The text with comments and string and character literals blanked (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + (c if j < n else ""))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


BUF_CALL = re.compile(r"\bpdr_buf_\w+\s*\(")
LIMIT_ASSIGN = re.compile(r"\b\w*(?:limit|max|cap|ceil)\w*\s*=\s*(?:\(\s*size_t\s*\)\s*)?SIZE_MAX\b", re.I)


def size_max_limits(code):
    """Line numbers of SIZE_MAX used as a buffer limit in code (comments and strings already blanked)."""
    lines = []
    for m in BUF_CALL.finditer(code):
        depth, j = 1, m.end()
        while j < len(code) and depth:
            depth += {"(": 1, ")": -1}.get(code[j], 0)
            j += 1
        for s in re.finditer(r"\bSIZE_MAX\b", code[m.end():j]):
            lines.append(code.count("\n", 0, m.end() + s.start()) + 1)
    for m in LIMIT_ASSIGN.finditer(code):
        lines.append(code.count("\n", 0, m.start()) + 1)
    return sorted(lines)


def c_files(root):
    """Every C source and header in the tree, tests/ included, as (relative path, text)."""
    for rel in sorted(tracked(root)):
        rel = rel.replace(os.sep, "/")
        if not rel.endswith((".c", ".h")):
            continue
        try:
            with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
                yield rel, f.read()
        except OSError:
            continue


def check_size_max(root):
    problems, n = [], 0
    for rel, text in c_files(root):
        n += 1
        for line in size_max_limits(strip_c(text)):
            problems.append("%s:%d: SIZE_MAX as a buffer limit: give the buffer a real ceiling, chosen at init "
                            "(growth past it is PDR_ETOOBIG)" % (rel, line))
    return problems, "%d C files, no SIZE_MAX buffer limit" % n


# (snippet, the lines size_max_limits must report)
SELFTEST = [
    ("pdr_buf_append(&b, p, n, SIZE_MAX / 2);", [1]),
    ("pdr_buf_vprintf(&b, SIZE_MAX, fmt, ap);", [1]),
    ("int rc = pdr_buf_append(&o, line,\n    (size_t)n,\n    SIZE_MAX);", [3]),
    ("x.limit = SIZE_MAX;", [1]),
    ("size_t cap = (size_t)SIZE_MAX;", [1]),
    ("size_t max_len = SIZE_MAX / 4;", [1]),
    ("pdr_buf_append(&b, p, n, LIMIT); /* not SIZE_MAX */", []),
    ('pdr_buf_append(&b, "SIZE_MAX", 8, LIMIT);', []),
    ("if (t->idx != SIZE_MAX)\n    t->idx = SIZE_MAX;", []),
    ("size_t len = q != SIZE_MAX ? q : n;", []),
    ("// cap = SIZE_MAX\npdr_buf_append(&b, p, n, CAP);", []),
]


def selftest(_root):
    problems = []
    for snippet, want in SELFTEST:
        got = size_max_limits(strip_c(snippet))
        if got != want:
            problems.append("size_max_limits(%r): lines %r, expected %r" % (snippet, got, want))
    return problems, "%d snippets, each found or not as marked" % len(SELFTEST)


def check_internals_index(root):
    """Every page of docs/internals/ is in the index of docs/internals/principles.md, and every page the
    index names exists."""
    d = os.path.join(root, "docs", "internals")
    pages = {n for n in os.listdir(d) if n.endswith(".md")}
    with open(os.path.join(d, "principles.md"), encoding="utf-8") as f:
        text = f.read()
    at = text.find("## Index of docs/internals/")
    if at < 0:
        return ["docs/internals/principles.md has no \"## Index of docs/internals/\" section"], ""
    linked = set(re.findall(r"\]\(([a-z0-9_-]+\.md)\)", text[at:]))
    problems = ["docs/internals/%s: not in the index of docs/internals/principles.md" % n
                for n in sorted(pages - linked)]
    problems += ["docs/internals/principles.md's index names %s, which does not exist" % n
                 for n in sorted(linked - pages)]
    return problems, "%d pages of docs/internals/, all in the index" % len(pages)


CHECKS = {"long_files": check_long_files, "size_max_limits": check_size_max,
          "internals_index": check_internals_index, "selftest": selftest}


def main():
    if len(sys.argv) not in (2, 3) or sys.argv[1] not in CHECKS:
        print(__doc__, file=sys.stderr)
        return 2
    root = sys.argv[2] if len(sys.argv) == 3 else os.path.join(HERE, "..", "..")
    problems, summary = CHECKS[sys.argv[1]](root)
    for p in problems:
        print("FAIL:", p)
    if problems:
        return 1
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
