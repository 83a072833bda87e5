#!/usr/bin/env python3
"""The error codes are ABI: common/err.h's PDR_ERRNO_MAP is the table; worker-shim/pdshim.h's enum and
worker-shim/python/pdshim.py's ERRORS are copies. Each copy must hold exactly the table's names with the
table's values, every value explicit in the header (never a position), no value used twice.

Usage: check_err_codes.py SOURCE_DIR   (exit 0 when all agree; each difference is printed)
"""
import ast
import os
import re
import sys


def table(err_h):
    """name -> value from the XX(NAME, VALUE, "text") lines of PDR_ERRNO_MAP."""
    text = open(err_h).read()
    m = re.search(r"#define PDR_ERRNO_MAP\(XX\)(.*?)\n\s*\n", text, re.S)
    if not m:
        raise SystemExit(f"{err_h}: no PDR_ERRNO_MAP(XX) table")
    body = m.group(1)
    rows = re.findall(r"XX\(\s*(\w+)\s*,\s*([^,]+?)\s*,", body)
    if body.count("XX(") != len(rows):
        raise SystemExit(f"{err_h}: a PDR_ERRNO_MAP row is not XX(NAME, VALUE, \"description\")")
    out = {}
    for name, value in rows:
        if not re.fullmatch(r"\(?-\d+\)?", value):
            raise SystemExit(f"{err_h}: {name}: value {value!r} is not an explicit negative integer")
        if name in out:
            raise SystemExit(f"{err_h}: {name} listed twice")
        out[name] = int(value.strip("()"))
    return out


def shim_header(pdshim_h):
    """name -> value from pdshim.h's enum of PDR_* constants (each with an explicit value)."""
    text = re.sub(r"/\*.*?\*/", "", open(pdshim_h).read(), flags=re.S)
    m = re.search(r"enum\s*\{([^}]*\bPDR_OK\b[^}]*)\}", text)
    if not m:
        raise SystemExit(f"{pdshim_h}: no enum of PDR_* codes")
    out = {}
    for item in filter(None, (i.strip() for i in m.group(1).split(","))):
        im = re.fullmatch(r"PDR_(\w+)\s*=\s*\(?(-?\d+)\)?", item)
        if not im:
            raise SystemExit(f"{pdshim_h}: enum entry {item!r} has no explicit value")
        out[im.group(1)] = int(im.group(2))
    if out.pop("OK", None) != 0:
        raise SystemExit(f"{pdshim_h}: PDR_OK is not 0")
    return out


def shim_python(pdshim_py):
    """name -> value of the ERRORS dict literal in pdshim.py (read, not imported: no library needed)."""
    tree = ast.parse(open(pdshim_py).read(), pdshim_py)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "ERRORS" for t in node.targets):
            value = ast.literal_eval(node.value)
            if not isinstance(value, dict):
                break
            return value
    raise SystemExit(f"{pdshim_py}: ERRORS is not a dict literal of name: value")


def documented(pdshim_h):
    """Every PDR_E* name the header's text mentions."""
    return set(re.findall(r"\bPDR_(E[A-Z]+)\b", open(pdshim_h).read()))


def compare(what, ref, copy):
    errors = []
    for name in sorted(ref.keys() - copy.keys()):
        errors.append(f"{what}: missing {name} ({ref[name]})")
    for name in sorted(copy.keys() - ref.keys()):
        errors.append(f"{what}: {name} ({copy[name]}) is not in common/err.h")
    for name in sorted(ref.keys() & copy.keys()):
        if ref[name] != copy[name]:
            errors.append(f"{what}: {name} is {copy[name]}, common/err.h says {ref[name]}")
    return errors


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    err_h = os.path.join(src, "common", "err.h")
    pdshim_h = os.path.join(src, "worker-shim", "pdshim.h")
    pdshim_py = os.path.join(src, "worker-shim", "python", "pdshim.py")
    ref = table(err_h)
    errors = []
    seen = {}
    for name, value in ref.items():
        if value in seen:
            errors.append(f"common/err.h: {name} and {seen[value]} share the value {value}")
        seen[value] = name
    header = shim_header(pdshim_h)
    errors += compare("worker-shim/pdshim.h", ref, header)
    errors += [f"worker-shim/pdshim.h: documents PDR_{n} but does not define it"
               for n in sorted(documented(pdshim_h) - header.keys())]
    errors += compare("worker-shim/python/pdshim.py", ref, shim_python(pdshim_py))
    for e in errors:
        print(e)
    if errors:
        return 1
    print(f"{len(ref)} error codes agree in common/err.h, pdshim.h and pdshim.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
