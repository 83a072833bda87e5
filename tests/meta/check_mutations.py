#!/usr/bin/env python3
"""The list of scripts/mutate.sh follows the code: every mutation names a file that exists and a text that
occurs in it exactly once, so that a moved or rewritten line fails here (in the meta tier, on every run)
rather than the next time someone runs the slow mutation script.

usage: check_mutations.py [ROOT]   (ROOT: the source tree; default: this repository)"""
import os
import sys


def mutations(script):
    """(line number, fields) for each mutation of the script's MUTATIONS list, read as the script reads it:
    a mutation may span lines and ends with its fifth separator's line; the text fields are kept as written."""
    with open(script, encoding="utf-8") as f:
        lines = f.read().split("\n")
    try:
        start = next(i for i, l in enumerate(lines) if l.startswith("MUTATIONS=$(cat <<'EOF'"))
    except StopIteration:
        raise SystemExit("%s: no MUTATIONS list (MUTATIONS=$(cat <<'EOF' ... EOF))" % script)
    cur, first = "", 0
    for n in range(start + 1, len(lines)):
        line = lines[n]
        if line == "EOF":
            if cur.strip():
                raise SystemExit("%s:%d: an unfinished mutation at the end of the list" % (script, first))
            return
        if not cur and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if not cur:
            first = n + 1
        cur = line if not cur else cur + "\n" + line
        if cur.count(" @@ ") >= 5:
            yield first, [x.strip() if i in (0, 1, 4, 5) else x for i, x in enumerate(cur.split(" @@ "))]
            cur = ""
    raise SystemExit("%s: the MUTATIONS list has no closing EOF" % script)


def main():
    if len(sys.argv) > 2:
        sys.exit(__doc__)
    root = sys.argv[1] if len(sys.argv) == 2 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    script = os.path.join(root, "scripts", "mutate.sh")
    bad, n_ok, names = [], 0, set()
    for line, f in mutations(script):
        if len(f) != 6:
            bad.append("scripts/mutate.sh:%d: %d fields, expected 6 (name @@ file @@ text @@ replacement @@ "
                       "targets @@ tests)" % (line, len(f)))
            continue
        name, rel, old = f[0], f[1], f[2]
        if name in names:
            bad.append("scripts/mutate.sh:%d: %s: a second mutation of that name" % (line, name))
        names.add(name)
        path = os.path.join(root, rel)
        if not os.path.isfile(path):
            bad.append("scripts/mutate.sh:%d: %s: no file %s" % (line, name, rel))
            continue
        if "\\n" in old:  # mutate.sh's round trip of the text turns it into a backslash and a newline
            bad.append("scripts/mutate.sh:%d: %s: its text holds a backslash-n, which mutate.sh cannot apply "
                       "(quote a single line)" % (line, name))
            continue
        with open(path, encoding="utf-8", errors="replace") as src:
            count = src.read().count(old)
        if count != 1:
            bad.append("scripts/mutate.sh:%d: %s: its text occurs %d times in %s (once expected)"
                       % (line, name, count, rel))
            continue
        n_ok += 1
    for b in bad:
        print(b)
    if bad:
        return 1
    print("check_mutations: %d mutations, each text found once in its file" % n_ok)
    return 0


if __name__ == "__main__":
    sys.exit(main())
