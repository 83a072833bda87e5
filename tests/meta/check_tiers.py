#!/usr/bin/env python3
"""The test tiers hold (docs/internals/testing.md, "Tiers"): every ctest test of the build tree has a
label that is a tier, and the unit tier is pure C, so that `ctest -L unit` runs without Python: no unit
test's command names a Python interpreter or a .py file.

Usage: check_tiers.py CTEST BUILD_DIR TIER...   (ctest's own listing, --show-only=json-v1, is read)
"""

import json
import subprocess
import sys


def main():
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    ctest, build, tiers = sys.argv[1], sys.argv[2], set(sys.argv[3:])
    out = subprocess.run([ctest, "--show-only=json-v1"], cwd=build, check=True, capture_output=True,
                         text=True).stdout
    problems = []
    tests = json.loads(out)["tests"]
    for t in tests:
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        labels = props.get("LABELS") or []
        if not labels:
            problems.append("%s: no label (one of %s)" % (t["name"], " ".join(sorted(tiers))))
        for l in labels:
            if l not in tiers:
                problems.append("%s: label %s is no tier" % (t["name"], l))
        if "unit" in labels:
            py = [a for a in t.get("command", []) if "python" in a or a.endswith(".py")]
            if py:
                problems.append("%s: a unit test must not need Python, its command has %s" % (t["name"], py[0]))
    for p in problems:
        print("FAIL:", p)
    if problems:
        return 1
    print("%d tests, each in a tier; the unit tier needs no Python" % len(tests))
    return 0


if __name__ == "__main__":
    sys.exit(main())
