#!/usr/bin/env python3
"""docs/openapi.yaml: valid OpenAPI (checked by openapi-spec-validator), and it lists every route the
router serves, no more and no fewer.

Usage: test_openapi.py   (exit 77, skipped, when the openapi_spec_validator module is missing)

The routes come from two sides that must agree with the spec:
- the router's route table (router/front/routes.c: one line per path and method of both listeners, the
  admin port's lines are those of a PDR_RK_ADMIN_* kind): what dispatch matches against; and
- a running router: every (path, method) pair of those paths is sent over HTTP, and a pair is served
  when the answer is neither 404 (unknown route) nor 405 (wrong method).
The spec's routes (with the listener each names in its servers) must equal the served pairs.
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check, request  # noqa: E402

try:
    import openapi_spec_validator
    import yaml
except ImportError as e:
    print("skipped: %s (Debian: python3-openapi-spec-validator)" % e)
    sys.exit(77)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SPEC = os.path.join(ROOT, "docs", "openapi.yaml")
METHODS = ("get", "post", "put", "delete", "patch")
ADMIN, DATA = "admin", "data"


def validate(spec):
    v = getattr(openapi_spec_validator, "validate", None) or openapi_spec_validator.validate_spec
    v(spec)


def untyped_nullables(node, where="#"):
    """The JSON pointers of schemas with `nullable` but no `type`. OpenAPI 3.0.3 (Schema Object): nullable
    adds null to the values `type` allows, and means nothing without it (redocly lint reports it as
    "nullable-type-sibling"); openapi-spec-validator does not look."""
    found = []
    if isinstance(node, dict):
        if "nullable" in node and "type" not in node:
            found.append(where)
        for k, v in node.items():
            found += untyped_nullables(v, "%s/%s" % (where, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            found += untyped_nullables(v, "%s/%d" % (where, i))
    return found


def listener(servers):
    """ADMIN or DATA by the port of a server URL (8001: admin.port's default, 8000: listen.port's)."""
    port = re.search(r":(\d+)", servers["url"]).group(1)
    check(port in ("8000", "8001"), "server %r: expected port 8000 (data) or 8001 (admin)" % servers)
    return ADMIN if port == "8001" else DATA


def spec_routes(spec):
    routes = set()
    top = spec.get("servers", [])
    for path, item in spec["paths"].items():
        for server in item.get("servers", top):
            for m in METHODS:
                if m in item:
                    routes.add((listener(server), path, m.upper()))
    return routes


def source_paths():
    """The paths of the route table, per listener, as spec paths ({id} for a worker id)."""
    with open(os.path.join(ROOT, "router", "front", "routes.c")) as f:
        routes = f.read()
    rows = re.findall(r'^\s*\{"(/[^"]*)", "(?:GET|POST|DELETE)", PDR_RK_(ADMIN_)?', routes, re.M)
    data = {path for path, admin in rows if not admin}
    adm = {path for path, admin in rows if admin}
    # The parse found the table it expects (a refactor that hides it must update this test).
    check({"/generate", "/v1/completions", "/v1/chat/completions", "/health", "/readiness", "/metrics",
           "/v1/models", "/get_model_info", "/get_server_info", "/health_generate", "/flush_cache",
           "/get_loads"} <= data, "data routes found in routes.c: %r" % sorted(data))
    check({"/", "/metrics", "/admin/v1/workers", "/admin/v1/workers/{id}/drain"} <= adm,
          "admin routes found in routes.c: %r" % sorted(adm))
    return data, adm


def served(r, wid):
    """(listener, path, method) for every pair the running router answers with something other than
    404 or 405. The probes use a worker that exists only for them; DELETE goes last, and the DELETE
    that removes the worker last of all."""
    data, adm = source_paths()
    probes = [(kind, path, m) for kind, paths in ((DATA, data), (ADMIN, adm)) for path in sorted(paths)
              for m in ("GET", "POST", "PUT", "PATCH", "DELETE")]
    probes.sort(key=lambda x: (x[2] == "DELETE", x[1] == "/admin/v1/workers/{id}"))
    out = set()
    for kind, path, m in probes:
        port = r.port if kind == DATA else r.ports["admin"]
        st, _, body = request(port, m, path.replace("{id}", wid), b"")
        if st not in (404, 405):
            out.add((kind, path, m))
        elif st == 404 and "{id}" in path:
            check(b"no worker with id" not in body, "%s %s: the probe worker is gone" % (m, path))
    return out


def main():
    with open(SPEC) as f:
        spec = yaml.safe_load(f)
    validate(spec)
    bad = untyped_nullables(spec)
    check(not bad, "nullable without a type (null is then not allowed): %s" % ", ".join(bad))
    want = spec_routes(spec)

    p = pdtest.start(["pdsim", "--role", "prefill", "--port", "{port}", "--bootstrap-port", "{bport}"],
                     name="pdsim-prefill")
    d = pdtest.start(["pdsim", "--role", "decode", "--port", "{port}"], name="pdsim-decode")
    r = pdtest.start(["pdrouter", "--pd-disaggregation", "--host", "127.0.0.1", "--port", "{port}",
                      "--admin-port", "{admin}", "--drain-grace-ms", "0", "--prefill",
                      "http://127.0.0.1:%d" % p.port, str(p.ports["bport"]), "--decode",
                      "http://127.0.0.1:%d" % d.port], name="pdrouter", healthy=200)
    try:
        st, _, body = request(r.ports["admin"], "POST", "/admin/v1/workers",
                              {"role": "decode", "url": "http://localhost:%d" % d.port})
        check(st == 201, "probe worker: %d %r" % (st, body), r)
        got = served(r, "decode-1")
    finally:
        pdtest.stop_all()
    missing, extra = got - want, want - got
    check(not missing, "served but not in docs/openapi.yaml: %s" % sorted(missing))
    check(not extra, "in docs/openapi.yaml but not served: %s" % sorted(extra))
    print("docs/openapi.yaml: valid (openapi-spec-validator %s), %d routes, all served"
          % (getattr(openapi_spec_validator, "__version__", "?"), len(want)))


if __name__ == "__main__":
    main()
