#!/usr/bin/env python3
"""The repository stands alone: no tracked file (code, comments, docs, scripts) sends a reader to a file
outside it or to an issue number. Facts belong in docs/ (docs/internals/ for the inside of the code).

Usage: check_standalone.py [ROOT]. Lists the tracked files with `git ls-files` (every file under ROOT but
build trees and .git when ROOT is not a git checkout); exits 1 naming each offending line.
"""
import os
import re
import subprocess
import sys

# Written in pieces so that this file does not match itself.
PATTERNS = [
    ("a path outside the repository", re.compile(r"\.\./" + "shared|/work/" + "shared")),
    ("an outside design document", re.compile(r"\b(?:design|style|stack)" + r"\.md\b")),
    ("an issue number", re.compile(r"\bissue" + r"\s*#?\s*[0-9]+\b", re.I)),
    ("a pull request number", re.compile(r"\b(?:PR|pull request)" + r"\s*#\s*[0-9]+\b")),
]


def tracked(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True, check=True).stdout
        return [p for p in out.decode("utf-8", "replace").split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, dirs, names in os.walk(root):
            dirs[:] = [x for x in dirs if x != ".git" and not x.startswith("build")]
            files += [os.path.relpath(os.path.join(d, n), root) for n in names]
        return files


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    bad, seen = [], 0
    for rel in tracked(root):
        path = os.path.join(root, rel)
        try:
            data = open(path, "rb").read()
        except OSError:
            continue
        if b"\0" in data[:8192]:
            continue  # binary (images)
        seen += 1
        text = data.decode("utf-8", "replace")
        for n, line in enumerate(text.splitlines(), 1):
            for what, rx in PATTERNS:
                if rx.search(line):
                    bad.append("%s:%d: %s: %s" % (rel, n, what, line.strip()[:160]))
    if seen == 0:
        print("standalone: no files read under %s" % root)
        return 1
    for b in bad:
        print(b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
