#!/usr/bin/python3
"""Offline checks of the deployment artifacts under deploy/ (docs/deploy.md "What CI checks").

  test_deploy.py k8s      render deploy/k8s/base and deploy/k8s/overlays/{sglang,vllm,gateway-api} with
                          `kubectl kustomize`, check every object against the Kubernetes schema
                          (python3-kubernetes models: unknown fields and wrong types fail, with the
                          path; fields newer than those 1.22 models from k8s_rules.NEWER_FIELDS), the
                          Kubernetes 1.30 rules of k8s_rules.py (required fields, selectors, quantities,
                          handlers, ports), then the policy checks (probes, preStop, grace period, security
                          context, RBAC, PDB, rollout, router.yaml passes `pdrouter --check-config`)
  test_deploy.py rules    the current-API rules (k8s_rules.py) on tests/deploy/bad/*.yaml (each must be
                          refused, naming the path) and tests/deploy/good/*.yaml (each must pass)
  test_deploy.py docker   lint deploy/docker/Dockerfile (it is never built in CI)
  test_deploy.py systemd  `systemd-analyze verify` of deploy/systemd/pdrouter.service + key checks

Exit 0: pass, 1: fail (every problem listed), 77: a needed tool is missing (skip).
Environment: PDR_BUILD (build dir with pdrouter), PDR_KUBECTL (kubectl to use, default from PATH).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import k8s_rules  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEPLOY = os.path.join(ROOT, "deploy")
SKIP = 77
errors = []


def fail(msg):
    errors.append(msg)


def pdrouter_bin():
    build = os.environ.get("PDR_BUILD", os.path.join(ROOT, "build"))
    path = os.path.join(build, "pdrouter")
    return path if os.access(path, os.X_OK) else None


# ---------------------------------------------------------------- Kubernetes schema validation
def schema_check(obj, where):
    """Validate one rendered object against python3-kubernetes' model of its apiVersion/kind."""
    import kubernetes.client as kc

    api, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api, str) or not isinstance(kind, str):
        fail(f"{where}: missing apiVersion/kind")
        return
    if (api, kind) in k8s_rules.CRD_KINDS:
        check_value(obj, k8s_rules.CRD_KINDS[(api, kind)], where, kc)
        return
    version = api.split("/")[-1]
    cls = getattr(kc, version[0].upper() + version[1:] + kind, None)
    if cls is None or not hasattr(cls, "openapi_types"):
        fail(f"{where}: no schema model for apiVersion {api} kind {kind}")
        return
    check_value(obj, cls.__name__, f"{where}", kc)


def check_value(value, typ, path, kc):
    if typ == "object":  # IntOrString, RawExtension, ...
        return
    if typ.startswith("x:"):  # a type newer than the 1.22 models (k8s_rules.NEW_TYPES)
        fields = k8s_rules.NEW_TYPES[typ[2:]]
        if not isinstance(value, dict):
            fail(f"{path}: expected a {typ[2:]} mapping, got {type(value).__name__}")
            return
        for k, v in value.items():
            if k not in fields:
                fail(f"{path}.{k}: unknown field (not in {typ[2:]})")
            elif v is not None:
                check_value(v, fields[k], f"{path}.{k}", kc)
        return
    m = re.fullmatch(r"list\[(.+)\]", typ)
    if m:
        if not isinstance(value, list):
            fail(f"{path}: expected a list, got {type(value).__name__}")
            return
        for i, v in enumerate(value):
            check_value(v, m.group(1), f"{path}[{i}]", kc)
        return
    m = re.fullmatch(r"dict\(str, (.+)\)", typ)
    if m:
        if not isinstance(value, dict):
            fail(f"{path}: expected a mapping, got {type(value).__name__}")
            return
        for k, v in value.items():
            check_value(v, m.group(1), f"{path}.{k}", kc)
        return
    prim = {"str": (str,), "int": (int,), "bool": (bool,), "float": (int, float),
            "datetime": (str,), "date": (str,)}
    if typ in prim:
        ok = isinstance(value, prim[typ]) and not (typ in ("int", "float") and isinstance(value, bool))
        if not ok:
            fail(f"{path}: expected {typ}, got {type(value).__name__} {value!r}")
        return
    cls = getattr(kc, typ, None)
    if cls is None:
        fail(f"{path}: unknown schema type {typ}")
        return
    if not isinstance(value, dict):
        fail(f"{path}: expected a {typ} mapping, got {type(value).__name__}")
        return
    by_json = {j: a for a, j in cls.attribute_map.items()}
    newer = k8s_rules.NEWER_FIELDS.get(typ, {})
    for k, v in value.items():
        if k not in by_json and k not in newer:
            fail(f"{path}.{k}: unknown field (not in {typ})")
            continue
        if v is None or k in k8s_rules.QUANTITY_FIELDS.get(typ, ()):
            continue
        check_value(v, cls.openapi_types[by_json[k]] if k in by_json else newer[k], f"{path}.{k}", kc)


# ---------------------------------------------------------------- policy checks
def find(objs, kind, name=None):
    return [o for o in objs if o.get("kind") == kind and (name is None or o["metadata"]["name"] == name)]


def check_router(objs, where):
    deps = find(objs, "Deployment", "pdrouter")
    if len(deps) != 1:
        fail(f"{where}: expected one Deployment 'pdrouter', found {len(deps)}")
        return
    d = deps[0]
    spec = d.get("spec", {})
    if spec.get("replicas") != 2:
        fail(f"{where}: Deployment replicas is {spec.get('replicas')!r}, want 2")
    strat = spec.get("strategy", {})
    ru = strat.get("rollingUpdate", {})
    if strat.get("type") != "RollingUpdate" or ru.get("maxUnavailable") != 0 or ru.get("maxSurge") != 1:
        fail(f"{where}: strategy must be RollingUpdate maxUnavailable 0 maxSurge 1, got {strat!r}")
    pod = spec.get("template", {}).get("spec", {})
    grace = pod.get("terminationGracePeriodSeconds", 30)
    if not isinstance(grace, int) or grace < 60:
        fail(f"{where}: terminationGracePeriodSeconds {grace!r} < 60 (must exceed preStop + drain)")
    psc = pod.get("securityContext", {})
    cs = [c for c in pod.get("containers", []) if c.get("name") == "pdrouter"]
    if len(cs) != 1:
        fail(f"{where}: no container 'pdrouter' in the Deployment")
        return
    c = cs[0]
    for probe, want in (("livenessProbe", "/health"), ("readinessProbe", "/readiness"),
                        ("startupProbe", "/health")):
        got = c.get(probe, {}).get("httpGet", {})
        if got.get("path") != want or got.get("port") not in ("http", 8000):
            fail(f"{where}: {probe} must be GET {want} on port http/8000, got {got or None!r}")
    # preStop: the sleep action (Kubernetes >= 1.30 by default), or an exec of /bin/sleep N
    pre = c.get("lifecycle", {}).get("preStop", {})
    cmd = pre.get("exec", {}).get("command")
    secs = pre.get("sleep", {}).get("seconds")
    if secs is None and cmd and len(cmd) == 2 and cmd[0] == "/bin/sleep" and str(cmd[1]).isdigit():
        secs = int(cmd[1])
    if not isinstance(secs, int) or isinstance(secs, bool):
        fail(f"{where}: preStop hook missing or neither sleep.seconds nor '/bin/sleep N': {pre!r}")
    elif grace < secs + 30 + 5:
        fail(f"{where}: grace {grace}s does not cover preStop {secs}s + 30s drain + margin")
    sc = c.get("securityContext", {})
    merged = dict(psc, **sc)
    if merged.get("runAsNonRoot") is not True:
        fail(f"{where}: runAsNonRoot is not true")
    if merged.get("runAsUser") != 65532:
        fail(f"{where}: runAsUser is {merged.get('runAsUser')!r}, want 65532")
    if sc.get("readOnlyRootFilesystem") is not True:
        fail(f"{where}: readOnlyRootFilesystem is not true")
    if sc.get("allowPrivilegeEscalation") is not False:
        fail(f"{where}: allowPrivilegeEscalation is not false")
    if sc.get("capabilities", {}).get("drop") != ["ALL"]:
        fail(f"{where}: capabilities.drop is not [ALL]")
    if merged.get("seccompProfile", {}).get("type") != "RuntimeDefault":
        fail(f"{where}: seccompProfile is not RuntimeDefault")
    res = c.get("resources", {})
    if not res.get("requests") or not res.get("limits"):
        fail(f"{where}: router container needs resources requests and limits")
    if c.get("args", [])[:2] != ["--config", "/etc/pdrouter/router.yaml"]:
        fail(f"{where}: args must start with --config /etc/pdrouter/router.yaml, got {c.get('args')!r}")

    # volumes: config from the ConfigMap at /etc/pdrouter, token from a Secret file
    vols = {v["name"]: v for v in pod.get("volumes", [])}
    mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
    cfg_vol = vols.get(mounts.get("/etc/pdrouter", ""), {})
    cm_name = cfg_vol.get("configMap", {}).get("name")
    cms = find(objs, "ConfigMap", cm_name) if cm_name else []
    if len(cms) != 1:
        fail(f"{where}: /etc/pdrouter is not mounted from a ConfigMap of this kustomization")
    else:
        check_router_yaml(cms[0], mounts, vols, where)

    roles = find(objs, "Role")
    if len(roles) != 1:
        fail(f"{where}: expected one Role, found {len(roles)}")
    else:
        rules = roles[0].get("rules", [])
        want = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
        norm = [{k: sorted(r.get(k, [])) for k in ("apiGroups", "resources", "verbs")} for r in rules]
        if norm != [{k: sorted(v) for k, v in want[0].items()}] or any(
                set(r) - {"apiGroups", "resources", "verbs"} for r in rules):
            fail(f"{where}: Role must allow exactly get/list/watch on pods, got {rules!r}")
        rb = find(objs, "RoleBinding")
        sa = pod.get("serviceAccountName")
        if not any(b["roleRef"]["name"] == roles[0]["metadata"]["name"] and
                   any(s.get("kind") == "ServiceAccount" and s.get("name") == sa for s in b.get("subjects", []))
                   for b in rb):
            fail(f"{where}: no RoleBinding binds the Role to the router's ServiceAccount {sa!r}")
        if not find(objs, "ServiceAccount", sa):
            fail(f"{where}: ServiceAccount {sa!r} is not defined")
    if find(objs, "ClusterRole") or find(objs, "ClusterRoleBinding"):
        fail(f"{where}: cluster-wide RBAC is not allowed")

    labels = spec.get("template", {}).get("metadata", {}).get("labels", {})
    pdbs = find(objs, "PodDisruptionBudget")
    if not pdbs:
        fail(f"{where}: no PodDisruptionBudget")
    for p in pdbs:
        if p["apiVersion"] != "policy/v1" or p["spec"].get("minAvailable") != 1:
            fail(f"{where}: PDB must be policy/v1 minAvailable 1")
        sel = p["spec"].get("selector", {}).get("matchLabels", {})
        if not sel or any(labels.get(k) != v for k, v in sel.items()):
            fail(f"{where}: PDB selector {sel!r} does not match the router pods {labels!r}")

    svcs = [s for s in find(objs, "Service")
            if all(labels.get(k) == v for k, v in s["spec"].get("selector", {}).items())]
    normal = [s for s in svcs if s["spec"].get("clusterIP") != "None"]
    headless = [s for s in svcs if s["spec"].get("clusterIP") == "None"]
    if not any(p.get("name") == "http" and p.get("port") == 8000 and p.get("targetPort") in ("http", 8000)
               for s in normal for p in s["spec"].get("ports", [])):
        fail(f"{where}: no Service port http 8000 -> 8000 for the router")
    if not headless:
        fail(f"{where}: no headless Service for the router pods")
    for s in svcs:
        for p in s["spec"].get("ports", []):
            if p.get("port") == 8001 or p.get("targetPort") == 8001:
                fail(f"{where}: Service {s['metadata']['name']} exposes the admin port 8001")


def check_router_yaml(cm, mounts, vols, where):
    import yaml
    text = cm.get("data", {}).get("router.yaml")
    if text is None:
        fail(f"{where}: ConfigMap {cm['metadata']['name']} has no router.yaml")
        return
    exe = pdrouter_bin()
    if exe is None:
        fail(f"{where}: pdrouter binary not found (set PDR_BUILD)")
    else:
        with tempfile.TemporaryDirectory() as td:
            f = os.path.join(td, "router.yaml")
            with open(f, "w") as fh:
                fh.write(text)
            r = subprocess.run([exe, "--check-config", f], capture_output=True, text=True)
            if r.returncode != 0:
                fail(f"{where}: router.yaml fails pdrouter --check-config: {r.stderr.strip()}")
    conf = yaml.safe_load(text) or {}
    admin = conf.get("admin", {}) or {}
    tf = admin.get("token_file")
    if not tf:
        fail(f"{where}: router.yaml has no admin.token_file")
        return
    d, base = os.path.split(tf)
    vol = vols.get(mounts.get(d, ""), {})
    sec = vol.get("secret")
    if not sec:
        fail(f"{where}: admin.token_file {tf} is not in a mounted Secret volume")
    elif "items" in sec and base not in [i["path"] for i in sec["items"]]:
        fail(f"{where}: Secret volume does not project {base}")
    if str(admin.get("host", "127.0.0.1")) not in ("127.0.0.1", "::1", "localhost"):
        fail(f"{where}: admin listener must stay on loopback, got {admin.get('host')!r}")


def check_engine(objs, where, role):
    """One engine StatefulSet of the role: GPU, readiness on /health, a headless Service, and the router's
    discovery selector matching its pods and no other's, on its http port. Returns (StatefulSet,
    container, the router's config) or None."""
    import yaml
    sts = [o for o in find(objs, "StatefulSet")
           if o["spec"]["template"]["metadata"].get("labels", {}).get("app.kubernetes.io/component") == role]
    if len(sts) != 1:
        fail(f"{where}: expected one {role} StatefulSet, found {len(sts)}")
        return None
    s = sts[0]
    tmpl = s["spec"]["template"]
    c = tmpl["spec"]["containers"][0]
    if str(c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")) != "1":
        fail(f"{where}: {role} needs nvidia.com/gpu: 1")
    if c.get("readinessProbe", {}).get("httpGet", {}).get("path") != "/health":
        fail(f"{where}: {role} readiness must be GET /health")
    svc = find(objs, "Service", s["spec"]["serviceName"])
    if not svc or svc[0]["spec"].get("clusterIP") != "None":
        fail(f"{where}: {role} StatefulSet's serviceName is not a headless Service")
    # the router finds exactly this StatefulSet's pods: its selector for the role matches the pod
    # template's labels, and nothing of the other role; the port is the pods' http port
    cm = [o for o in find(objs, "ConfigMap") if "router.yaml" in o.get("data", {})]
    conf = yaml.safe_load(cm[0]["data"]["router.yaml"]) if cm else {}
    k8s = ((conf.get("discovery") or {}).get("kubernetes") or {}).get(role) or {}
    sel = dict(kv.split("=", 1) for kv in str(k8s.get("selector", "")).split(",") if "=" in kv)
    labels = tmpl["metadata"].get("labels", {})
    port = next(p["containerPort"] for p in c["ports"] if p.get("name") == "http")
    if not sel or any(labels.get(k) != v for k, v in sel.items()):
        fail(f"{where}: discovery.kubernetes.{role}.selector {k8s.get('selector')!r} does not match the "
             f"{role} pods' labels {labels!r}")
    other = [o for o in find(objs, "StatefulSet") if o is not s and
             all(o["spec"]["template"]["metadata"].get("labels", {}).get(k) == v for k, v in sel.items())]
    if other:
        fail(f"{where}: discovery.kubernetes.{role}.selector also matches {other[0]['metadata']['name']}")
    if k8s.get("port") not in (None, 0, port):
        fail(f"{where}: discovery.kubernetes.{role}.port {k8s.get('port')} != the pods' http port {port}")
    return s, c, conf


def check_vllm(objs, where):
    """The engine settings of docs/operations.md ("In front of real vLLM") on both roles."""
    import json
    for role in ("prefill", "decode"):
        got = check_engine(objs, where, role)
        if got is None:
            continue
        s, c, conf = got
        if conf.get("protocol") != "vllm":
            fail(f"{where}: router.yaml protocol is {conf.get('protocol')!r}, want vllm")
        argv = c.get("command", []) + c.get("args", [])
        if argv[:2] != ["vllm", "serve"]:
            fail(f"{where}: {role} StatefulSet does not run vllm serve: {argv[:2]!r}")
        ktc = argv[argv.index("--kv-transfer-config") + 1] if "--kv-transfer-config" in argv[:-1] else None
        try:
            ktc = json.loads(ktc) if ktc else None
        except ValueError:
            fail(f"{where}: {role}: --kv-transfer-config is not JSON: {ktc!r}")
            ktc = None
        if not ktc or ktc.get("kv_connector") != "NixlConnector" or ktc.get("kv_role") != "kv_both":
            fail(f"{where}: {role}: --kv-transfer-config must be NixlConnector with kv_role kv_both, got {ktc!r}")
        port = next(p["containerPort"] for p in c["ports"] if p.get("name") == "http")
        if "--port" not in argv[:-1] or str(argv[argv.index("--port") + 1]) != str(port):
            fail(f"{where}: {role}: vllm serve --port is not the container's http port {port}")
        env = {e["name"]: e for e in c.get("env", [])}
        host = env.get("VLLM_NIXL_SIDE_CHANNEL_HOST", {})
        if host.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") != "status.podIP":
            fail(f"{where}: {role}: VLLM_NIXL_SIDE_CHANNEL_HOST must be the pod's IP (fieldRef status.podIP): "
                 f"the default localhost works only when both engines share a host")
        side = str(env.get("VLLM_NIXL_SIDE_CHANNEL_PORT", {}).get("value", ""))
        if not side.isdigit() or not any(str(p["containerPort"]) == side for p in c["ports"]):
            fail(f"{where}: {role}: VLLM_NIXL_SIDE_CHANNEL_PORT {side!r} is not a declared container port")


def check_sglang(objs, where):
    for role in ("prefill", "decode"):
        got = check_engine(objs, where, role)
        if got is None:
            continue
        s, c, _ = got
        argv = c.get("command", []) + c.get("args", [])
        if "sglang.launch_server" not in argv or f"--disaggregation-mode" not in argv or \
                argv[argv.index("--disaggregation-mode") + 1] != role:
            fail(f"{where}: {role} StatefulSet does not run sglang.launch_server --disaggregation-mode {role}")
        ann = s["spec"]["template"]["metadata"].get("annotations", {})
        if role == "prefill" and ann.get("sglang.ai/bootstrap-port") != "8998":
            fail(f"{where}: prefill pods need annotation sglang.ai/bootstrap-port: \"8998\"")


def check_gateway_api(objs, where):
    """The Gateway API path: the HTTPRoute's backend is the InferencePool, whose selector takes the prefill
    and decode pods (each with its llm-d.ai/role label) and nothing else; its target port is where the
    decode pods' pdrouter --sidecar and the prefill engines listen; its endpointPickerRef is the Service of
    the pdrouter --epp Deployment at the picker's gRPC port; both configs name the pool and pass
    `pdrouter --check-config`; the Role lets the picker and the sidecars read pods and inferencepools."""
    import yaml
    pools = find(objs, "InferencePool")
    if len(pools) != 1:
        fail(f"{where}: expected one InferencePool, found {len(pools)}")
        return
    pool = pools[0]
    name, spec = pool["metadata"]["name"], pool.get("spec", {})
    routes = [b for r in find(objs, "HTTPRoute") for rule in r["spec"].get("rules", [])
              for b in rule.get("backendRefs", [])]
    if not any(b.get("kind") == "InferencePool" and b.get("name") == name for b in routes):
        fail(f"{where}: no HTTPRoute backendRef names the InferencePool {name}")
    sel = spec.get("selector", {}).get("matchLabels", {})
    port = (spec.get("targetPorts") or [{}])[0].get("number")
    selected = {}
    for o in find(objs, "StatefulSet") + find(objs, "Deployment"):
        labels = o["spec"]["template"]["metadata"].get("labels", {})
        if all(labels.get(k) == v for k, v in sel.items()):
            selected[labels.get("llm-d.ai/role")] = o
    if sorted(selected, key=str) != ["decode", "prefill"]:
        fail(f"{where}: the pool's selector {sel!r} must take exactly the prefill and decode pods (by their "
             f"llm-d.ai/role label), got {sorted(map(str, selected))}")
        return

    def container_port(o, pred):
        cs = o["spec"]["template"]["spec"]["containers"]
        return [c for c in cs if pred(c) and any(p.get("containerPort") == port for p in c.get("ports", []))]

    def argv(c):
        return c.get("command", []) + c.get("args", [])

    def config(c, key):
        """The config file a pdrouter container reads, from its ConfigMap volume; checked with --check-config."""
        path = argv(c)[argv(c).index("--config") + 1] if "--config" in argv(c)[:-1] else ""
        d, base = os.path.split(path)
        pod = [o for o in objs if o.get("kind") in ("Deployment", "StatefulSet") and
               c in o["spec"]["template"]["spec"]["containers"]][0]["spec"]["template"]["spec"]
        vol = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}.get(d)
        cmname = next((v["configMap"]["name"] for v in pod.get("volumes", [])
                       if v["name"] == vol and "configMap" in v), None)
        cm = find(objs, "ConfigMap", cmname) if cmname else []
        text = cm[0].get("data", {}).get(base) if cm else None
        if text is None:
            fail(f"{where}: {key}: {path!r} is not in a mounted ConfigMap")
            return {}
        exe = pdrouter_bin()
        if exe is None:
            fail(f"{where}: pdrouter binary not found (set PDR_BUILD)")
        else:
            with tempfile.TemporaryDirectory() as td:
                f = os.path.join(td, base)
                with open(f, "w") as fh:
                    fh.write(text)
                r = subprocess.run([exe, "--check-config", f], capture_output=True, text=True)
                if r.returncode != 0:
                    fail(f"{where}: {key}: {base} fails pdrouter --check-config: {r.stderr.strip()}")
        conf = yaml.safe_load(text) or {}
        if ((conf.get("discovery") or {}).get("kubernetes") or {}).get("inference_pool") != name:
            fail(f"{where}: {key}: {base} does not name discovery.kubernetes.inference_pool {name}")
        return conf

    if not container_port(selected["prefill"], lambda c: True):
        fail(f"{where}: the prefill pods listen on no containerPort {port} (the pool's target port)")
    side = container_port(selected["decode"], lambda c: "--sidecar" in argv(c))
    if len(side) != 1:
        fail(f"{where}: the decode pods need one pdrouter --sidecar container on the target port {port}")
    else:
        conf = config(side[0], "sidecar")
        if conf.get("listen", {}).get("port") != port:
            fail(f"{where}: the sidecar's listen.port is not the pool's target port {port}")
        engines = [c for c in selected["decode"]["spec"]["template"]["spec"]["containers"] if c is not side[0]]
        urls = [w.get("url") if isinstance(w, dict) else w for w in (conf.get("workers") or {}).get("decode", [])]
        want = ["http://127.0.0.1:%s" % a[a.index("--port") + 1] for a in map(argv, engines) if "--port" in a[:-1]]
        if not urls or urls != want[:len(urls)]:
            fail(f"{where}: the sidecar's decode worker {urls!r} is not the engine beside it {want!r}")
    ref = spec.get("endpointPickerRef") or {}
    svc = find(objs, "Service", ref.get("name"))
    epps = [o for o in find(objs, "Deployment") if any("--epp" in argv(c) for c in
                                                       o["spec"]["template"]["spec"]["containers"])]
    if not svc or len(epps) != 1:
        fail(f"{where}: endpointPickerRef {ref.get('name')!r} must be the Service of one pdrouter --epp Deployment")
        return
    epp, s = epps[0], svc[0]["spec"]
    if any(epp["spec"]["template"]["metadata"]["labels"].get(k) != v for k, v in s.get("selector", {}).items()):
        fail(f"{where}: Service {ref.get('name')} does not select the --epp pods")
    c = [c for c in epp["spec"]["template"]["spec"]["containers"] if "--epp" in argv(c)][0]
    sp = [p for p in s.get("ports", []) if p.get("port") == (ref.get("port") or {}).get("number")]
    named = {p.get("name"): p.get("containerPort") for p in c.get("ports", [])}
    target = sp[0].get("targetPort") if sp else None
    conf = config(c, "epp")
    epp_conf = conf.get("epp", {})
    if not epp_conf.get("enabled"):
        fail(f"{where}: the picker's config does not set epp.enabled (--epp sets it too)")
    if not sp or named.get(target, target) != epp_conf.get("port", 9002):
        fail(f"{where}: endpointPickerRef port {ref.get('port')!r} does not reach the picker's epp.port")
    if (sp[0].get("appProtocol") if sp else None) != "http2":
        fail(f"{where}: the picker's Service port needs appProtocol http2 (the gateway speaks gRPC to it)")
    for probe in ("readinessProbe", "livenessProbe"):
        if c.get(probe, {}).get("grpc", {}).get("port") not in named.values():
            fail(f"{where}: the picker's {probe} is not a gRPC health check on one of its ports")
    rules = [r for role in find(objs, "Role") for r in role.get("rules", [])]
    for group, res in (("", "pods"), ("inference.networking.k8s.io", "inferencepools")):
        if not any(group in r.get("apiGroups", []) and res in r.get("resources", []) and
                   {"get", "list", "watch"} <= set(r.get("verbs", [])) for r in rules):
            fail(f"{where}: no Role grants get, list, watch on {res}")
    bound = {s.get("name") for b in find(objs, "RoleBinding") for s in b.get("subjects", [])}
    for o in (epp, selected["decode"]):
        sa = o["spec"]["template"]["spec"].get("serviceAccountName", "default")
        if sa not in bound:
            fail(f"{where}: {o['metadata']['name']}'s service account {sa} is not bound to the Role")


def run_k8s():
    try:
        import yaml  # noqa: F401
        import kubernetes.client  # noqa: F401
    except ImportError as e:
        print(f"SKIP: {e} (install python3-yaml python3-kubernetes)")
        return SKIP
    import yaml
    kubectl = os.environ.get("PDR_KUBECTL") or shutil.which("kubectl")
    if not kubectl:
        print("SKIP: kubectl not found (install kubernetes-client)")
        return SKIP
    for name, extra in (("base", None), ("overlays/sglang", check_sglang), ("overlays/vllm", check_vllm),
                        ("overlays/gateway-api", check_gateway_api)):
        d = os.path.join(DEPLOY, "k8s", name)
        r = subprocess.run([kubectl, "kustomize", d], capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"{name}: kubectl kustomize failed: {r.stderr.strip()}")
            continue
        objs = [o for o in yaml.safe_load_all(r.stdout) if o]
        print(f"{name}: {len(objs)} objects: " +
              ", ".join(f"{o['kind']}/{o['metadata']['name']}" for o in objs))
        for o in objs:
            where = f"{name}: {o.get('kind')}/{o.get('metadata', {}).get('name')}"
            schema_check(o, where)
            for e in k8s_rules.check(o, where):
                fail(e)
        if extra is not check_gateway_api:  # there the gateway is the front door, not a router Deployment
            check_router(objs, name)
        if extra:
            extra(objs, name)
    return 0


# ---------------------------------------------------------------- the rules on hand-written manifests
def run_rules():
    """tests/deploy/bad/*.yaml must each be refused, every `# expect: TEXT` line of the file naming a
    substring of some error (the path); tests/deploy/good/*.yaml must pass with no error at all."""
    try:
        import yaml
        import kubernetes.client  # noqa: F401
    except ImportError as e:
        print(f"SKIP: {e} (install python3-yaml python3-kubernetes)")
        return SKIP
    here = os.path.dirname(os.path.abspath(__file__))
    print(f"rules: the Kubernetes {k8s_rules.API_VERSION} table, {len(k8s_rules.RULES)} rows")
    for sub in ("bad", "good"):
        d = os.path.join(here, sub)
        files = sorted(f for f in os.listdir(d) if f.endswith(".yaml"))
        if not files:
            fail(f"{sub}/: no manifests")
        for f in files:
            with open(os.path.join(d, f)) as fh:
                text = fh.read()
            expect = [l.split(":", 1)[1].strip() for l in text.splitlines() if l.startswith("# expect:")]
            mark = len(errors)
            for o in (o for o in yaml.safe_load_all(text) if o):
                where = f"{o.get('kind')}/{(o.get('metadata') or {}).get('name')}"
                schema_check(o, where)
                for e in k8s_rules.check(o, where):
                    fail(e)
            got = errors[mark:]
            del errors[mark:]
            if sub == "good":
                for e in got:
                    fail(f"good/{f}: refused: {e}")
                print(f"good/{f}: accepted" if not got else f"good/{f}: REFUSED")
                continue
            if not expect:
                fail(f"bad/{f}: no '# expect:' line")
            if not got:
                fail(f"bad/{f}: accepted, but it is broken ({'; '.join(expect)})")
            for x in expect:
                if not any(x in e for e in got):
                    fail(f"bad/{f}: no error names {x!r}; got: {got}")
            print(f"bad/{f}: refused: " + " | ".join(got))
    return 0


# ---------------------------------------------------------------- Dockerfile lint
# In debian:12-slim already (Priority: required), or the project's own library.
BASE_PACKAGES = {"libc6", "libgcc-s1", "zlib1g"}


def runtime_packages():
    """The Debian packages of the libraries that the built pdrouter, pdsim and libpdshim.so load
    directly (readelf's NEEDED, found with ldd, owned per dpkg), less the base image's. Empty when the
    binaries or the tools are missing (the build directory is not always there)."""
    build = os.environ.get("PDR_BUILD", os.path.join(ROOT, "build"))
    bins = [os.path.join(build, b) for b in ("pdrouter", "pdsim", "libpdshim.so")]
    if not all(os.path.exists(b) for b in bins) or not all(shutil.which(t) for t in ("readelf", "ldd", "dpkg")):
        print("Dockerfile: runtime libraries not checked (no build or no readelf/ldd/dpkg)")
        return set()
    libs = {}  # library path -> what loads it
    for b in bins:
        needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]",
                            subprocess.run(["readelf", "-d", b], capture_output=True, text=True).stdout)
        paths = dict(re.findall(r"^\s*(\S+) => (/\S+)", subprocess.run(["ldd", b], capture_output=True,
                                                                        text=True).stdout, re.M))
        for lib in needed:
            # A sanitizer build's runtimes (libasan, libubsan, libtsan) belong to that test build, not to
            # the image, which builds a plain release.
            if lib != "libpdshim.so" and lib in paths and not re.match(r"lib(asan|ubsan|tsan|lsan)\.", lib):
                libs[paths[lib]] = f"{lib} of {os.path.basename(b)}"
    # dpkg knows a file by the path its package installed (/usr/lib or /lib, the link or its target): one
    # query with every spelling, each answer mapped back to its library.
    spellings = {}
    for path in libs:
        real = os.path.realpath(path)
        for cand in (path, real, "/usr" + path, "/usr" + real, path.replace("/usr/lib/", "/lib/", 1),
                     real.replace("/usr/lib/", "/lib/", 1)):
            spellings.setdefault(cand, path)
    out = subprocess.run(["dpkg", "-S"] + sorted(spellings), capture_output=True, text=True).stdout
    owners = {}
    for line in out.splitlines():
        pkg, _, file = line.partition(": ")
        if file in spellings:
            owners[spellings[file]] = pkg.split(":")[0]
    pkgs = set()
    for path, what in libs.items():
        if path not in owners:
            fail(f"Dockerfile check: no Debian package owns {path} ({what})")
        elif owners[path] not in BASE_PACKAGES:
            pkgs.add(owners[path])
    return pkgs


def run_docker():
    path = os.path.join(DEPLOY, "docker", "Dockerfile")
    with open(path) as fh:
        text = fh.read()
    # join continuation lines, drop comments
    lines, cur = [], ""
    for raw in text.splitlines():
        s = raw.strip()
        if s.startswith("#") and not cur:
            continue
        if s.endswith("\\"):
            cur += s[:-1] + " "
            continue
        cur += s
        if cur.strip():
            lines.append(cur.strip())
        cur = ""
    instrs = [(l.split(None, 1)[0].upper(), l.split(None, 1)[1] if " " in l else "") for l in lines]
    froms = [a for i, a in instrs if i == "FROM"]
    stage_names = set()
    for a in froms:
        parts = a.split()
        image = parts[0]
        if image not in ("debian:12", "debian:12-slim") and not image.startswith(("debian:12@", "debian:12-slim@")):
            fail(f"Dockerfile: FROM {image}: only debian:12 / debian:12-slim are allowed")
        if len(parts) >= 3 and parts[1].upper() == "AS":
            stage_names.add(parts[2])
    if len(froms) < 2:
        fail("Dockerfile: expected a build stage and a runtime stage")
    elif not froms[-1].split()[0].startswith("debian:12-slim"):
        fail("Dockerfile: the final (runtime) stage must be debian:12-slim")
    last = max(i for i, (ins, _) in enumerate(instrs) if ins == "FROM")
    runtime = instrs[last:]
    users = [a for i, a in runtime if i == "USER"]
    if not users:
        fail("Dockerfile: the runtime stage sets no USER (it would run as root)")
    elif users[-1].split(":")[0] in ("root", "0"):
        fail(f"Dockerfile: runtime USER {users[-1]} is root")
    elif users[-1].split(":")[0] != "65532":
        fail(f"Dockerfile: runtime USER {users[-1]} is not 65532 (the manifests' runAsUser)")
    ep = [a for i, a in runtime if i == "ENTRYPOINT"]
    if not ep or "pdrouter" not in ep[-1] or not ep[-1].startswith("["):
        fail("Dockerfile: ENTRYPOINT must be the exec form running pdrouter")
    for i, a in instrs:
        if i == "ADD" and re.search(r"https?://|git@", a):
            fail(f"Dockerfile: ADD of a URL: {a}")
        if i == "ADD":
            fail(f"Dockerfile: use COPY, not ADD: {a}")
        if i == "RUN":
            if re.search(r"\b(curl|wget)\b[^|;&]*\|\s*(ba|z|da)?sh\b", a):
                fail(f"Dockerfile: pipes a download into a shell: {a}")
            if re.search(r"\b(curl|wget|pip3?|npm|git clone)\b", a):
                fail(f"Dockerfile: downloads outside apt-get: {a}")
            if "apt-get install" in a and "--no-install-recommends" not in a:
                fail(f"Dockerfile: apt-get install without --no-install-recommends: {a}")
            if "apt-get install" in a and "apt-get update" not in a:
                fail(f"Dockerfile: apt-get install without apt-get update in the same RUN: {a}")
        if i == "COPY":
            m = re.search(r"--from=(\S+)", a)
            if m and m.group(1) not in stage_names:
                fail(f"Dockerfile: COPY --from={m.group(1)} names no stage")
    rt = " ".join(a for i, a in runtime if i == "RUN")
    for pkg in ("libuv1", "libh2o0.13", "libcurl4", "libyaml-0-2", "libjansson4", "libibverbs1", "libssl3"):
        if not re.search(rf"(?<![\w.-]){re.escape(pkg)}(?![\w.-])", rt):
            fail(f"Dockerfile: runtime stage does not install {pkg}")
    # The build stage installs what scripts/install-deps.sh installs to build (its --print-build list), and
    # the runtime stage the package of every library the built binaries load directly.
    bt = " ".join(a for i, a in instrs[:last] if i == "RUN")
    r = subprocess.run(["sh", os.path.join(ROOT, "scripts", "install-deps.sh"), "--print-build"],
                       capture_output=True, text=True)
    if r.returncode != 0 or not r.stdout.split():
        fail(f"scripts/install-deps.sh --print-build failed: {r.stderr.strip()}")
    for pkg in r.stdout.split():
        if not re.search(rf"(?<![\w.-]){re.escape(pkg)}(?![\w.-])", bt):
            fail(f"Dockerfile: build stage does not install {pkg} (scripts/install-deps.sh builds with it)")
    for pkg in runtime_packages():
        if not re.search(rf"(?<![\w.-]){re.escape(pkg)}(?![\w.-])", rt):
            fail(f"Dockerfile: runtime stage does not install {pkg} (a library the binaries load)")
    if re.search(r"-dev\b", rt):
        fail("Dockerfile: runtime stage installs -dev packages")
    print(f"Dockerfile: {len(instrs)} instructions, stages: {', '.join(f.split()[0] for f in froms)}")
    return 0


# ---------------------------------------------------------------- systemd unit
def run_systemd():
    path = os.path.join(DEPLOY, "systemd", "pdrouter.service")
    keys = {}
    section = None
    with open(path) as fh:
        for n, raw in enumerate(fh, 1):
            s = raw.strip()
            if not s or s.startswith(("#", ";")):
                continue
            if s.startswith("["):
                section = s.strip("[]")
                continue
            if "=" not in s:
                fail(f"pdrouter.service:{n}: not a key=value line")
                continue
            k, v = s.split("=", 1)
            keys.setdefault((section, k.strip()), []).append(v.strip())

    def get(k, sec="Service"):
        v = keys.get((sec, k))
        return v[-1] if v else None

    want = {"Type": "exec", "KillSignal": "SIGTERM", "Restart": "on-failure", "NoNewPrivileges": "yes",
            "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
            "CapabilityBoundingSet": "", "LimitNOFILE": "1048576",
            "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX"}
    for k, v in want.items():
        if get(k) != v:
            fail(f"pdrouter.service: {k}={get(k)!r}, want {v!r}")
    if get("DynamicUser") != "yes" and not get("User"):
        fail("pdrouter.service: neither DynamicUser=yes nor User= (it would run as root)")
    if get("User") in ("root", "0"):
        fail("pdrouter.service: User=root")
    es = get("ExecStart") or ""
    if not es.startswith("/usr/local/bin/pdrouter --config /etc/pdrouter/router.yaml"):
        fail(f"pdrouter.service: ExecStart is {es!r}")
    ts = get("TimeoutStopSec") or "0"
    if not ts.isdigit() or int(ts) < 35:
        fail(f"pdrouter.service: TimeoutStopSec={ts} does not exceed the 30 s drain")
    if get("WantedBy", "Install") is None:
        fail("pdrouter.service: no [Install] WantedBy=")

    exe = pdrouter_bin()
    ex = os.path.join(DEPLOY, "systemd", "router.yaml.example")
    if exe is None:
        fail("pdrouter binary not found (set PDR_BUILD)")
    else:
        r = subprocess.run([exe, "--check-config", ex], capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"router.yaml.example fails pdrouter --check-config: {r.stderr.strip()}")

    sa = shutil.which("systemd-analyze")
    if sa is None or exe is None:
        print("note: systemd-analyze not available: key checks only")
        return 0
    with tempfile.TemporaryDirectory() as td:
        # verify needs the executables to exist: point them at the built binary
        with open(path) as fh:
            unit = fh.read().replace("/usr/local/bin/pdrouter", exe)
        u = os.path.join(td, "pdrouter.service")
        with open(u, "w") as fh:
            fh.write(unit)
        r = subprocess.run([sa, "verify", u], capture_output=True, text=True,
                           env=dict(os.environ, SYSTEMD_LOG_COLOR="0"))
        out = (r.stdout + r.stderr).strip()
        # systemd-analyze exits 0 even on unknown keys or bad values: any message about our unit fails
        ours = [l for l in out.splitlines() if "pdrouter.service" in l]
        if r.returncode != 0 or ours:
            fail("systemd-analyze verify: " + (out or f"exit {r.returncode}"))
        else:
            print("systemd-analyze verify: clean" + (f" (other output: {out})" if out else ""))
    return 0


PARTS = {"k8s": run_k8s, "rules": run_rules, "docker": run_docker, "systemd": run_systemd}


def main():
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what == "--list":  # The parts, one a line: CMake registers a ctest deploy_PART for each.
        print("\n".join(PARTS))
        return 0
    fn = PARTS.get(what)
    if fn is None:
        print(__doc__)
        return 2
    rc = fn()
    if rc == SKIP:
        return SKIP
    for e in errors:
        print("FAIL:", e)
    if errors:
        print(f"{len(errors)} problem(s)")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
