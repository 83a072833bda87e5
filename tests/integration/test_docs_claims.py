#!/usr/bin/env python3
"""Claims of README.md and docs/operations.md held against the real binaries (docs that no linter checks).

  readme_sglang_command  every pdrouter command of the README written with sglang router flags
                         (--pd-disaggregation) names only policies the sglang router has too, and pdrouter
                         starts with it (its workers' addresses kept, its listener moved to loopback)
  readme_refused         the README's list of refused sglang features names none that pdrouter takes: the
                         circuit breaker, cache-aware and tokenizer flags start a router
  body_too_large         operations.md's account of an oversized body: 413 in the OpenAI shape over HTTP/1
                         and HTTP/2, counted, an HTTP/2 stream's line in the access log; not "plain text"
  quick_start            the README's Quick start is two commands; `make run` installs what building and
                         running needs and no test tool, `make test` (and .ci/run) what the tests use
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check, request  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
# router_args.py's choices for --policy, --prefill-policy and --decode-policy (every release), less the
# two pdrouter refuses (manual, bucket): what a command "accepted by both" may name.
SGLANG_POLICIES = {"random", "round_robin", "cache_aware", "power_of_two"}


def read(rel):
    with open(os.path.join(ROOT, rel)) as f:
        return f.read()


def sh_blocks(text):
    """The commands of the ```sh blocks, continuation lines joined."""
    out = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        out += [c.strip() for c in block.replace("\\\n", " ").split("\n") if c.strip()]
    return out


def start_flags(words, name):
    """Starts pdrouter with words (its listener moved to a free loopback port, no admin listener) and
    waits for /health: the flags were accepted."""
    words = list(words)
    for flag, value in (("--host", "127.0.0.1"), ("--port", "{port}"), ("--admin-port", "0"),
                        ("--access-log", "off"), ("--drain-grace-ms", "0")):
        if flag in words:
            words[words.index(flag) + 1] = value
        else:
            words += [flag, value]
    r = pdtest.start(["pdrouter"] + words, name=name, health_path="/health")
    r.stop()


def scenario_readme_sglang_command():
    cmds = [shlex.split(c) for c in sh_blocks(read("README.md"))]
    cmds = [c for c in cmds if c and c[0] == "pdrouter" and "--pd-disaggregation" in c]
    check(len(cmds) >= 2, "the README's sglang-style commands: %r" % cmds)
    for c in cmds:
        for i, w in enumerate(c):
            if w in ("--policy", "--prefill-policy", "--decode-policy"):
                check(c[i + 1] in SGLANG_POLICIES,
                      "README: %s %s in an sglang-style command: the sglang router has no such policy" % (w, c[i + 1]))
        start_flags(c[1:], "pdrouter-readme")


def scenario_readme_refused():
    text = " ".join(read("README.md").split())
    m = re.search(r"Flags without an equivalent \(([^)]*)\) are refused", text)
    check(m is not None, "README: no sentence 'Flags without an equivalent (...) are refused'")
    refused = m.group(1).lower()
    for feature in ("circuit breaker", "cache-aware", "cache_aware", "tokenizer"):
        check(feature not in refused, "README says %r flags are refused: %r" % (feature, m.group(1)))
    tok = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "gpt2.tokenizer.json")
    start_flags(["--pd-disaggregation", "--prefill", "http://127.0.0.1:9", "--decode", "http://127.0.0.1:9",
                 "--cb-failure-threshold", "5", "--cb-timeout-duration-secs", "30", "--disable-circuit-breaker",
                 "--prefill-policy", "cache_aware", "--cache-threshold", "0.5", "--balance-abs-threshold", "32",
                 "--tokenizer-path", tok], "pdrouter-flags")


def scenario_body_too_large():
    ops = " ".join(read("docs/operations.md").split())
    check("plain text 413" not in ops and "plain-text 413) and not logged" not in ops,
          "operations.md still says an oversized body gets a plain-text 413 that is not logged")
    curl = shutil.which("curl")
    if curl is None:
        print("skipped: no curl (HTTP/2 client)")
        sys.exit(77)
    p = pdtest.start(["pdsim", "--role", "prefill", "--port", "{port}", "--bootstrap-port", "{bport}"],
                     name="pdsim-prefill")
    d = pdtest.start(["pdsim", "--role", "decode", "--port", "{port}"], name="pdsim-decode")
    log = tempfile.mktemp(prefix="pdrouter-access-", suffix=".log")
    r = pdtest.start(["pdrouter", "--pd-disaggregation", "--host", "127.0.0.1", "--port", "{port}",
                      "--admin-port", "0", "--prefill", "http://127.0.0.1:%d" % p.port, str(p.ports["bport"]),
                      "--decode", "http://127.0.0.1:%d" % d.port, "--max-payload-size", "1024",
                      "--access-log", log], name="pdrouter", health_path="/readiness", healthy=200)
    body = {"text": "a" * 4096}
    st, _, raw = request(r.port, "POST", "/generate", body)
    err = json.loads(raw)["error"]
    check(st == 413 and err["type"] == "invalid_request_error" and err["code"] == 413,
          "HTTP/1: %d %r" % (st, raw), r)
    out = subprocess.run([curl, "-s", "--http2-prior-knowledge", "-H", "content-type: application/json",
                          "--data-binary", json.dumps(body), "-w", "\n%{http_code} %{http_version}",
                          "http://127.0.0.1:%d/v1/completions" % r.port],
                         capture_output=True, text=True, timeout=20).stdout
    answer, status = out.rsplit("\n", 1)
    err = json.loads(answer)["error"]
    check(status == "413 2" and err["type"] == "invalid_request_error", "HTTP/2: %r" % out, r)
    line = pdtest.last_access_line(log, "/v1/completions")
    check(line["status"] == 413 and line["error"] == "body_too_large", "access log: %r" % line, r)

    def counted():
        m = re.search(r"^pdr_http_body_too_large_total (\d+)", request(r.port, "GET", "/metrics")[2].decode(), re.M)
        return m is not None and int(m.group(1)) == 2
    pdtest.poll_until(counted, 5, "pdr_http_body_too_large_total to count both")


# Packages only the tests and benchmarks use: none of them belongs on the run path.
TEST_ONLY = {"chromium", "chromium-driver", "python3-selenium", "iperf3", "wrk", "nginx-light", "nghttp2-client",
             "dnsmasq-base", "kubernetes-client", "python3-kubernetes", "gnuplot-nox", "clang", "clang-format",
             "jq", "bc", "iproute2"}


def scenario_quick_start():
    block = re.search(r"## Quick start\n.*?```sh\n(.*?)```", read("README.md"), re.S)
    check(block is not None, "README: no Quick start block")
    cmds = [l.split("#")[0].strip() for l in block.group(1).splitlines() if l.split("#")[0].strip()]
    check(cmds == ["./scripts/install-deps.sh && make run", "make test"], "README Quick start: %r" % cmds)

    def pkgs(*args):
        out = subprocess.run(["sh", os.path.join(ROOT, "scripts", "install-deps.sh"), "--print"] + list(args),
                             capture_output=True, text=True)
        check(out.returncode == 0, "install-deps.sh --print %s: %s" % (" ".join(args), out.stderr))
        return set(out.stdout.split())
    run, test = pkgs(), pkgs("--test")
    build = set(subprocess.run(["sh", os.path.join(ROOT, "scripts", "install-deps.sh"), "--print-build"],
                               capture_output=True, text=True).stdout.split())
    check(not run & TEST_ONLY, "the run path installs test tools: %s" % " ".join(sorted(run & TEST_ONLY)))
    check(build and build <= run and {"python3", "curl"} <= run, "the run path misses: %s" %
          " ".join(sorted((build | {"python3", "curl"}) - run)))
    check(run <= test and TEST_ONLY - {"kubernetes-client"} <= test,
          "the test path misses: %s" % " ".join(sorted((run | TEST_ONLY) - test - {"kubernetes-client"})))
    make = shutil.which("make")
    if make is None:
        print("skipped: no make")
        sys.exit(77)

    def installs(target):
        out = subprocess.run([make, "-n", "-C", ROOT, target, "BUILD=/nonexistent-pdr-build"],
                             capture_output=True, text=True).stdout
        return [l.strip() for l in out.splitlines() if "install-deps.sh" in l]
    check(installs("run") == ["./scripts/install-deps.sh"], "make run installs: %r" % installs("run"))
    check(installs("test") == ["./scripts/install-deps.sh --test"], "make test installs: %r" % installs("test"))
    check("./scripts/install-deps.sh --test" in read(".ci/run"), ".ci/run does not install the test tools")


if __name__ == "__main__":
    pdtest.run_scenario(globals())
