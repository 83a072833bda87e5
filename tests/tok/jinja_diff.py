#!/usr/bin/env python3
"""The Jinja engine (pdjinja --batch) against python3-jinja2, byte for byte.

Usage: jinja_diff.py PDJINJA FIXTURES_DIR [-v]

The reference is jinja2 in the environment transformers' apply_chat_template builds (the one vLLM and
sglang render chat templates with): ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
extensions=[AssistantTracker, loopcontrols]), its tojson filter (json.dumps with ensure_ascii=False),
raise_exception() and strftime_now() (here at a fixed time, TZ=UTC, so both sides format the same instant).
AssistantTracker's {% generation %} block renders its body through a caller, as transformers' does when
it tracks nothing.

Cases, from FIXTURES_DIR:
  templates/*.jinja   chat templates in the style of the model families, each rendered with every
                      inputs/chat_*.json (messages, tools, add_generation_prompt...)
  cases/*.cases       small templates, each section headed by a line "=== case NAME ===", rendered with
                      inputs/edge_context.json
Each case must render to the same bytes on both sides, or fail on both (a compile or render error; the
messages differ). Exits 0 when every case agrees, 1 naming each one that does not, 77 when jinja2 is
missing.
"""
import datetime
import glob
import json
import os
import subprocess
import sys

NOW = 1700000000  # 2023-11-14 22:13:20 UTC

try:
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    print("jinja_diff: python3-jinja2 is not installed (apt-get install python3-jinja2); skipping")
    sys.exit(77)


class AssistantTracker(jinja2.ext.Extension):
    """transformers' {% generation %}...{% endgeneration %}, without the tracking."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        call = self.call_method("_generation_support")
        return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _generation_support(self, caller):
        return caller()


def reference_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.datetime.fromtimestamp(NOW).strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def load_cases(root):
    cases = []
    inputs = {}
    for path in sorted(glob.glob(os.path.join(root, "inputs", "*.json"))):
        with open(path, encoding="utf-8") as f:
            inputs[os.path.basename(path)] = json.load(f)
    for path in sorted(glob.glob(os.path.join(root, "templates", "*.jinja"))):
        with open(path, encoding="utf-8", newline="") as f:
            text = f.read()
        for name, ctx in inputs.items():
            if name.startswith("chat_"):
                cases.append(("%s + %s" % (os.path.basename(path), name), text, ctx))
    edge = inputs.get("edge_context.json", {})
    for path in sorted(glob.glob(os.path.join(root, "cases", "*.cases"))):
        with open(path, encoding="utf-8", newline="") as f:
            lines = f.read().split("\n")
        name, body = None, []
        for line in lines + ["=== case end ==="]:
            if line.startswith("=== case ") and line.endswith(" ==="):
                if name is not None:
                    # The line break before the next header belongs to the file, not to the template.
                    cases.append(("%s: %s" % (os.path.basename(path), name), "\n".join(body), edge))
                name, body = line[9:-4], []
            elif name is not None:
                body.append(line)
    return cases


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    pdjinja, root = sys.argv[1], sys.argv[2]
    verbose = "-v" in sys.argv[3:]
    os.environ["TZ"] = "UTC"
    try:
        import time
        time.tzset()
    except AttributeError:
        pass
    env = reference_env()
    cases = load_cases(root)
    lines = "".join(json.dumps({"template": t, "context": c, "now": NOW}) + "\n" for _, t, c in cases)
    proc = subprocess.run([pdjinja, "--batch"], input=lines.encode("utf-8"), capture_output=True,
                          env=dict(os.environ, TZ="UTC"))
    if proc.returncode != 0:
        print("jinja_diff: pdjinja failed (%d): %s" % (proc.returncode, proc.stderr.decode(errors="replace")))
        return 1
    got = [json.loads(x) for x in proc.stdout.decode("utf-8").splitlines()]
    if len(got) != len(cases):
        print("jinja_diff: %d cases, %d answers" % (len(cases), len(got)))
        return 1
    bad = same = both_err = 0
    for (name, text, ctx), res in zip(cases, got):
        try:
            want = env.from_string(text).render(**ctx)
            want_err = None
        except Exception as e:  # any jinja2 or Python error of the template
            want, want_err = None, "%s: %s" % (type(e).__name__, e)
        if want_err is not None and not res["ok"]:
            both_err += 1
            if verbose:
                print("both fail: %s\n  jinja2: %s\n  C:      %s" % (name, want_err, res["error"]))
            continue
        if want_err is None and res["ok"] and res["out"] == want:
            same += 1
            continue
        bad += 1
        print("MISMATCH: %s" % name)
        if want_err is not None:
            print("  jinja2 fails: %s" % want_err)
        else:
            print("  jinja2: %r" % want[:2000])
        if not res["ok"]:
            print("  C fails (%s): %s" % (res["stage"], res["error"]))
        else:
            out = res["out"]
            if want_err is None:
                at = next((i for i in range(min(len(out), len(want))) if out[i] != want[i]), min(len(out), len(want)))
                print("  first difference at character %d: jinja2 %r, C %r" % (at, want[at:at + 60], out[at:at + 60]))
            print("  C:      %r" % out[:2000])
    print("jinja_diff: %d cases: %d equal, %d fail on both sides, %d mismatched" % (len(cases), same, both_err, bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
