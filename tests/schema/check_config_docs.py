#!/usr/bin/env python3
"""docs/config.md against the configuration schema (config/schema.c).

Usage: check_config_docs.py SCHEMA_DUMPER DOCS_CONFIG_MD

SCHEMA_DUMPER is test_config_schema: with --dump it prints one tab-separated line per schema row (path,
type, default, min, max, reload, flag, flag in seconds, doc). The key tables of docs/config.md (the
"Keys" section and the discovery.dns / discovery.kubernetes sections) must list every row, and every
scalar key they list must be a row, with the same default and, for numbers, the same range (the first
"MIN..MAX" of the "accepted" column; 2^N is understood). Exit 0 when they agree, 1 with one line per
difference otherwise.
"""
import re
import subprocess
import sys

# Keys the tables list with a scalar type that are not schema rows, and why.
NOT_ROWS = {
    "policy": "the shorthand that sets policy.prefill and policy.decode at once",
    "ticket.key_file": "a key file read when the config is loaded (ticket.key_files is the list form)",
    "workers.api_key_file": "a key file read when the config is loaded",
}
SCALAR_TYPES = ("integer", "number", "boolean", "string")
# The docs' type column for each schema type family that has one.
DOC_TYPE = {"integer": "integer", "bootstrap_port": "integer", "number": "number", "boolean": "boolean"}


def read_schema(dumper):
    out = subprocess.run([dumper, "--dump"], check=True, capture_output=True, text=True).stdout
    rows = {}
    for line in out.splitlines():
        f = line.split("\t")
        if len(f) != 9:
            sys.exit("schema dump: bad line %r" % line)
        rows[f[0]] = {"type": f[1], "default": f[2], "min": f[3], "max": f[4]}
    return rows


def key_tables(text):
    """The rows of the key tables: (line number, [keys], type, default, accepted)."""
    sections = []
    cur = None
    for no, line in enumerate(text.splitlines(), 1):
        if line.startswith("#"):
            title = line.lstrip("#").strip()
            cur = title in ("Keys", "`discovery.dns`", "`discovery.kubernetes`")
            continue
        if not cur or not line.startswith("| `"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) < 4:
            continue
        keys = re.findall(r"`([^`]*)`", cells[0])
        if not keys or not all(re.fullmatch(r"[a-z_][a-z0-9_.]*", k) for k in keys):
            continue
        sections.append((no, keys, cells[1], cells[2], cells[3]))
    return sections


def number(s):
    m = re.fullmatch(r"2\^(\d+)", s)
    return str(2 ** int(m.group(1))) if m else s


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    rows = read_schema(sys.argv[1])
    with open(sys.argv[2], encoding="utf-8") as f:
        docs = key_tables(f.read())
    errors = []
    seen = set()
    for no, keys, typ, default, accepted in docs:
        for key in keys:
            where = "docs/config.md:%d: %s" % (no, key)
            row = rows.get(key)
            if row is None:
                if typ.startswith(SCALAR_TYPES) and key not in NOT_ROWS:
                    errors.append("%s: a scalar key that is not in the schema (config/schema.c)" % where)
                continue
            seen.add(key)
            want_type = DOC_TYPE.get(row["type"])
            if want_type is not None and not typ.startswith(want_type):
                errors.append("%s: type '%s' in the docs, %s in the schema" % (where, typ, row["type"]))
            m = re.match(r"`([^`]*)`", default)
            doc_default = m.group(1) if m else ""
            if doc_default != row["default"]:
                errors.append("%s: default '%s' in the docs, '%s' in the schema" %
                              (where, doc_default or default, row["default"]))
            if row["min"] != "":
                m = re.search(r"(2\^\d+|-?\d+)\.\.(2\^\d+|-?\d+)", accepted)
                got = (number(m.group(1)), number(m.group(2))) if m else None
                if got != (row["min"], row["max"]):
                    errors.append("%s: range %s in the docs, %s..%s in the schema" %
                                  (where, "%s..%s" % got if got else "(none)", row["min"], row["max"]))
    for key in rows:
        if key not in seen:
            errors.append("docs/config.md: %s (config/schema.c) is missing from the key tables" % key)
    for e in errors:
        print(e)
    if errors:
        return 1
    print("docs/config.md lists the %d schema keys with their defaults and ranges" % len(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
