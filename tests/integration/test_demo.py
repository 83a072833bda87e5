#!/usr/bin/env python3
"""scripts/demo.sh (make run) in its non-interactive mode (DEMO_ONCE=1).

Usage: test_demo.py SCENARIO|--list   (taken_8000, taken_port, dead_worker)

- taken_8000: with port 8000 held by another socket, the demo picks a free port, says so, and its
  requests are answered by its own router and workers; nothing connects to the socket on 8000.
- taken_port: PORT naming a port in use stops the demo before it starts anything or sends a byte.
- dead_worker: a worker that exits at start stops the demo with its log and a non-zero status.
"""

import errno
import json
import os
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check  # noqa: E402

DEMO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "demo.sh")


def run_demo(build, **env):
    e = dict(os.environ, DEMO_ONCE="1")
    e.pop("PORT", None)
    e.update(env)
    return subprocess.run(["bash", DEMO, build], capture_output=True, text=True, timeout=90, env=e,
                          stdin=subprocess.DEVNULL)


def holder(port):
    """A listening socket on 127.0.0.1:port, or None when something else holds the port already."""
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError as e:
        s.close()
        if e.errno != errno.EADDRINUSE:
            raise
        return None
    s.listen(16)
    s.setblocking(False)
    return s


def connections(s):
    """How many connections reached the listening socket (the kernel completes them before accept)."""
    n = 0
    while True:
        try:
            c, _ = s.accept()
        except BlockingIOError:
            return n
        c.close()
        n += 1


def answered_by_pdsim(out):
    """The demo's output holds a streamed chat answer and a /generate answer made by pdsim."""
    gen = [line for line in out.splitlines() if line.startswith('{"text"')]
    check(len(gen) == 1, "one /generate answer in the output:\n" + out)
    j = json.loads(gen[0])
    check(j["meta_info"]["id"].startswith("pdsim-") and j["meta_info"]["completion_tokens"] == 8, repr(j))
    check("data: [DONE]" in out and '"object":"chat.completion.chunk"' in out, "streamed chat answer:\n" + out)


def scenario_taken_8000():
    s = holder(8000)
    try:
        out = run_demo(pdtest.build_dir())
        text = out.stdout + out.stderr
        check(out.returncode == 0, "demo failed (%d):\n%s" % (out.returncode, text))
        check("port 8000 is in use; the router takes " in out.stdout, "no word of the port:\n" + text)
        port = int(out.stdout.split("the router takes ")[1].split()[0])
        check(port != 8000 and ("pdrouter on :%d " % port) in out.stdout, "ports:\n" + text)
        check("through pdrouter on :%d" % port in out.stdout, "requests not sent to the demo's router:\n" + text)
        answered_by_pdsim(out.stdout)
        if s is not None:
            check(connections(s) == 0, "the demo connected to the socket holding port 8000")
    finally:
        if s is not None:
            s.close()


def scenario_taken_port():
    s = holder(0)
    port = s.getsockname()[1]
    try:
        out = run_demo(pdtest.build_dir(), PORT=str(port))
        text = out.stdout + out.stderr
        check(out.returncode != 0 and ("port %d is in use" % port) in out.stderr, "(%d)\n%s" % (out.returncode, text))
        check("pdsim prefill on" not in text and "POST" not in text, "the demo went on:\n" + text)
        check(connections(s) == 0, "the demo connected to the socket holding PORT")
        out = run_demo(pdtest.build_dir(), PORT="80x")
        check(out.returncode != 0 and "PORT must be a port number" in out.stderr, out.stderr)
    finally:
        s.close()


def scenario_dead_worker():
    # A build directory whose pdsim exits at once (the real pdrouter beside it).
    d = tempfile.mkdtemp(prefix="pdtest-demo-")
    with open(os.path.join(d, "pdsim"), "w") as f:
        f.write("#!/bin/sh\necho 'pdsim: cannot listen (simulated failure)' >&2\nexit 3\n")
    os.chmod(os.path.join(d, "pdsim"), 0o755)
    os.symlink(os.path.join(os.path.abspath(pdtest.build_dir()), "pdrouter"), os.path.join(d, "pdrouter"))
    out = run_demo(d)
    check(out.returncode != 0, "demo succeeded without workers:\n" + out.stdout + out.stderr)
    check("exited before it came up" in out.stderr and "simulated failure" in out.stderr, out.stderr)
    check("POST" not in out.stdout, "requests sent without workers:\n" + out.stdout)


if __name__ == "__main__":
    globals()["scenario_" + pdtest.scenario_arg(globals())]()
