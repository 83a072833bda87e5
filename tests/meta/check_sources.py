#!/usr/bin/env python3
"""Ratchets on the C sources outside tests/ (the hand-written code of the router, config, routing, tokenizer,
transport, the shim, common and bench), each against a list in tests/meta/ that may only shrink.

  check_sources.py long_files [ROOT]
      No file is over 700 lines, except those in long_files.txt, each at most its listed ceiling (its size
      when it was listed). A file that is split must leave the list: a listed file no longer over 700 lines
      fails until its line is removed, so the list is the work left.
  check_sources.py size_max_limits [ROOT]
      Every buffer has a ceiling: SIZE_MAX (or SIZE_MAX / 2 ...) as the limit of a pdr_buf_* call, or
      assigned to a limit, max or cap, is no ceiling at all. size_max_limits.txt lists the files where such
      limits remain, with their count; a count that grows, or any in another file, fails, and so does a
      count that fell until the list is lowered to it.

  check_sources.py internals_index [ROOT]
      Every page of docs/internals/ is listed in the index of docs/internals/principles.md, and the index
      names no page that does not exist.

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


def read_list(name):
    """{path: number} from tests/meta/NAME: one "path number" a line; # starts a comment."""
    out = {}
    with open(os.path.join(HERE, name)) as f:
        for i, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 2 or not parts[1].isdigit():
                raise SystemExit("%s:%d: expected \"path number\", got %r" % (name, i, line))
            out[parts[0]] = int(parts[1])
    return out


def check_long_files(root):
    allowed = read_list("long_files.txt")
    problems, seen = [], set()
    for rel, text in sources(root):
        n = text.count("\n")
        seen.add(rel)
        ceiling = allowed.get(rel)
        if ceiling is None:
            if n > MAX_LINES:
                problems.append("%s: %d lines, over %d: split it on its seams (files of one idea each)"
                                % (rel, n, MAX_LINES))
        elif n > ceiling:
            problems.append("%s: %d lines, past its ceiling of %d in long_files.txt: split it instead of growing "
                            "it" % (rel, n, ceiling))
        elif n <= MAX_LINES:
            problems.append("%s: %d lines, no longer over %d: remove its line from tests/meta/long_files.txt"
                            % (rel, n, MAX_LINES))
        elif n < ceiling:
            print("note: %s is %d lines now: its ceiling in long_files.txt can be lowered from %d"
                  % (rel, n, ceiling))
    for rel in sorted(set(allowed) - seen):
        problems.append("%s: listed in tests/meta/long_files.txt but not in the tree: remove its line" % rel)
    return problems, "%d sources, none over %d lines but the %d listed" % (len(seen), MAX_LINES, len(allowed))


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


def check_size_max(root):
    allowed = read_list("size_max_limits.txt")
    problems, seen, total = [], set(), 0
    for rel, text in sources(root):
        found = size_max_limits(strip_c(text))
        seen.add(rel)
        total += len(found)
        want = allowed.get(rel, 0)
        where = ", ".join("%s:%d" % (rel, n) for n in found)
        if len(found) > want:
            problems.append("%s: %d SIZE_MAX buffer limits (%s), %d allowed: give each buffer a real ceiling "
                            "(growth past it is PDR_ETOOBIG)" % (rel, len(found), where, want))
        elif len(found) < want:
            problems.append("%s: %d SIZE_MAX buffer limits left, %d listed: lower its count in "
                            "tests/meta/size_max_limits.txt (remove the line at 0)" % (rel, len(found), want))
    for rel in sorted(set(allowed) - seen):
        problems.append("%s: listed in tests/meta/size_max_limits.txt but not in the tree: remove its line" % rel)
    return problems, "%d SIZE_MAX buffer limits, as listed" % total


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
          "internals_index": check_internals_index}


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
