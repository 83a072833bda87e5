#!/usr/bin/env python3
"""The summary at the end of `make test`: for each phase (PHASE=BUILD_DIR arguments, in order), the tests
that failed and the tests that were skipped, each skipped test with the reason it printed, read from the
JUnit file ctest wrote there (BUILD_DIR/ctest-junit.xml). A phase without that file did not get as far as
its tests (its build failed). Exits 1 when a phase failed or has no results, 0 otherwise.

    scripts/test-summary.py release=build asan=build-asan tsan=build-tsan
"""
import os
import re
import sys
import xml.etree.ElementTree as ET

JUNIT = "ctest-junit.xml"


TAP = re.compile(r"^((not )?ok \d+ |1\.\.\d+)")  # the C unit runner's own lines


def skip_reason(out):
    """What the test printed about its skip: its lines that mention a skip (the C unit runner's per-case
    lines aside, each reason once), else the last line it printed."""
    lines = [ln.strip() for ln in (out or "").splitlines() if ln.strip() and not TAP.match(ln.strip())]
    why = []
    for ln in lines:
        if "skip" in ln.lower() and ln not in why:
            why.append(ln)
    if why:
        return "; ".join(why)
    return lines[-1] if lines else "(the test printed no reason)"


def phase(name, build):
    path = os.path.join(build, JUNIT)
    if not os.path.exists(path):
        print("%s: no test results in %s (the phase stopped before its tests: see the build output above)"
              % (name, path))
        return 1
    try:
        suite = ET.parse(path).getroot()
    except ET.ParseError as e:
        print("%s: %s is not readable: %s" % (name, path, e))
        return 1
    failed, skipped, total = [], [], 0
    for tc in suite.iter("testcase"):
        total += 1
        status = tc.get("status")
        if status == "fail" or tc.find("failure") is not None:
            failed.append(tc.get("name"))
        elif status in ("notrun", "disabled") or tc.find("skipped") is not None:
            skipped.append((tc.get("name"), skip_reason(tc.findtext("system-out"))))
    print("%s: %d tests, %d failed, %d skipped" % (name, total, len(failed), len(skipped)))
    for t in failed:
        print("  FAILED  %s" % t)
    for t, why in skipped:
        print("  skipped %s: %s" % (t, why))
    return 1 if failed else 0


def main(argv):
    if not argv or any("=" not in a for a in argv):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    print("==== test summary ====")
    rc = 0
    for a in argv:
        name, build = a.split("=", 1)
        rc |= phase(name, build)
    print("==== %s ====" % ("FAILED" if rc else "all phases passed"))
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
