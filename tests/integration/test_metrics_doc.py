#!/usr/bin/env python3
"""docs/metrics.md holds against the metrics the router serves: a pdrouter in front of a pdsim prefill and
decode answers one PD request, then its /metrics must name exactly the families of the document's table
(every served family documented, every documented family served), each with the table's type, and no
served series may carry a label the table does not name for its family (`le` aside: histogram buckets).

Usage: test_metrics_doc.py SCENARIO|--list   (one of the functions named scenario_*)
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check, request  # noqa: E402
from test_router import BODIES, metrics_when, router, sim  # noqa: E402

DOC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "metrics.md")
ROW = re.compile(r"^\| `([^`]+)` \| ([^|]*)\| ([^|]*)\|")
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? \S+")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"')


def documented():
    """{family: (type, {label names})} from the table of docs/metrics.md."""
    rows = {}
    with open(DOC) as f:
        for line in f:
            m = ROW.match(line)
            if m:
                check(m.group(1) not in rows, "docs/metrics.md lists %s twice" % m.group(1))
                rows[m.group(1)] = (m.group(2).strip(), set(re.findall(r"`(\w+)`", m.group(3))))
    check(len(rows) > 50, "docs/metrics.md: only %d table rows found; has the table's form changed?" % len(rows))
    return rows


def family(name, rows):
    for suffix in ("_bucket", "_sum", "_count"):
        base = name[: -len(suffix)]
        if name.endswith(suffix) and rows.get(base, ("",))[0] == "histogram":
            return base
    return name


def scenario_served():
    rows = documented()
    p, d = sim("prefill"), sim("decode")
    r = router([p], [d])
    st = request(r.port, "POST", "/generate", BODIES["/generate"])[0]
    check(st == 200, "the PD request answered %d" % st, r)
    text = metrics_when(r, lambda m: 'route="generate"' in m, "the request in pdr_requests_total")
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    problems = []
    for name in sorted(set(types) - set(rows)):
        problems.append("%s (%s) is served but not in docs/metrics.md" % (name, types[name]))
    for name in sorted(set(rows) - set(types)):
        problems.append("%s is in docs/metrics.md but not served" % name)
    for name in sorted(set(rows) & set(types)):
        if rows[name][0] != types[name]:
            problems.append("%s: docs/metrics.md says %s, served as %s" % (name, rows[name][0], types[name]))
    extra = {}
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if m is None or line.startswith("#"):
            continue
        fam = family(m.group(1), rows)
        if fam in rows:
            for label in set(LABEL.findall(m.group(2) or "")) - rows[fam][1] - {"le"}:
                extra.setdefault(fam, set()).add(label)
    for fam in sorted(extra):
        problems.append("%s: served with label(s) %s that docs/metrics.md does not list"
                        % (fam, ", ".join(sorted(extra[fam]))))
    check(not problems, "docs/metrics.md and /metrics disagree:\n  " + "\n  ".join(problems))
    print("%d families served, each documented with its type and labels" % len(types))


if __name__ == "__main__":
    pdtest.run_scenario(globals())
