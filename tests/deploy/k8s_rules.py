"""Rules of the current Kubernetes API that python3-kubernetes 22.6 (the Kubernetes 1.22 API, Debian 12's
only offline schema) does not enforce, for the kinds deploy/k8s uses. test_deploy.py runs them on every
rendered object after its model check (unknown fields, types).

The table follows the **Kubernetes v1.30 API** (the first release whose defaults accept
`lifecycle.preStop.sleep`: feature gate PodLifecycleSleepAction, alpha off by default in 1.29, beta on by
default from 1.30, GA in 1.34). Debian 12 ships no newer schema: kubernetes-client is kubectl 1.20.2,
python3-kubernetes 22.6.0 is the 1.22 API, and no package holds the Kubernetes OpenAPI document
(golang-k8s-kube-openapi-dev, a 2021 snapshot, is the generator library; its swagger.json files are test
fixtures, not a Kubernetes release's API; k8s.io/api is not packaged). The rules come
from the v1.30 API reference (fields marked required) and the API server's validation of those objects
(pkg/apis/{core,apps,policy,rbac}/validation in kubernetes v1.30); the source of each is in its row.

    errors = k8s_rules.check(obj, "base: Deployment/pdrouter")   # list of "path: message"

Only what deploy/ uses or could plausibly get wrong is covered: this is not a full API server.

Two custom resources have no model in python3-kubernetes: CRD_KINDS gives their schema (as NEW_TYPES
entries) for the model check, and RULES their validation, written from the published Go types and
their kubebuilder markers (the CRDs' OpenAPI schema and CEL rules): the Gateway API Inference
Extension's InferencePool (inference.networking.k8s.io/v1, api/v1/inferencepool_types.go and
api/v1/shared_types.go of kubernetes-sigs/gateway-api-inference-extension) and the Gateway API's Gateway
and HTTPRoute (gateway.networking.k8s.io/v1, apis/v1 of kubernetes-sigs/gateway-api), the latter only
for the fields deploy/ uses.
"""
import re

API_VERSION = "1.30"

# ---------------------------------------------------------------- fields newer than the 1.22 models
# Model type (python3-kubernetes class name) -> {JSON field: type}. A type is a model class name, a
# primitive ("str", "int", "bool", "object"), "list[T]", "dict(str, T)", or a "x:Name" entry of NEW_TYPES.
# test_deploy.py's model check looks a field up here when the 1.22 model does not know it.
NEWER_FIELDS = {
    "V1Handler": {"sleep": "x:SleepAction"},  # 1.29 alpha, 1.30 beta (KEP-3960)
    "V1Probe": {"grpc": "x:GRPCAction"},  # 1.23 alpha, 1.24 beta, 1.27 GA
    "V1PodSpec": {
        "os": "x:PodOS",  # 1.23 alpha, 1.25 GA
        "hostUsers": "bool",  # 1.25 alpha (user namespaces)
        "schedulingGates": "list[x:PodSchedulingGate]",  # 1.26 alpha, 1.27 beta, 1.30 GA
        "resourceClaims": "list[object]",  # 1.26 alpha (dynamic resource allocation)
    },
    "V1Container": {
        "resizePolicy": "list[x:ContainerResizePolicy]",  # 1.27 alpha
        "restartPolicy": "str",  # 1.28 alpha, 1.29 beta: init containers as sidecars ("Always")
    },
    "V1ResourceRequirements": {"claims": "list[x:ResourceClaim]"},  # 1.26 alpha
    "V1SecurityContext": {"appArmorProfile": "x:AppArmorProfile"},  # 1.30 beta field
    "V1PodSecurityContext": {"appArmorProfile": "x:AppArmorProfile"},  # 1.30
    "V1StatefulSetSpec": {
        "persistentVolumeClaimRetentionPolicy": "x:PVCRetentionPolicy",  # 1.23 alpha, 1.27 beta
        "ordinals": "x:StatefulSetOrdinals",  # 1.26 alpha, 1.27 beta
    },
    "V1PodDisruptionBudgetSpec": {"unhealthyPodEvictionPolicy": "str"},  # 1.26 alpha, 1.27 beta
    "V1TopologySpreadConstraint": {
        "minDomains": "int",  # 1.24 alpha, 1.25 beta, 1.30 GA
        "nodeAffinityPolicy": "str",  # 1.25 alpha, 1.26 beta
        "nodeTaintsPolicy": "str",
        "matchLabelKeys": "list[str]",  # 1.25 alpha, 1.27 beta
    },
}
# Fields of the models that hold quantities: the 1.22 models type them as strings, but the API takes a
# JSON number as well (resource.Quantity's UnmarshalJSON); the grammar is checked by the rules below.
QUANTITY_FIELDS = {
    "V1ResourceRequirements": {"limits", "requests"},
    "V1EmptyDirVolumeSource": {"sizeLimit"},
    "V1PodSpec": {"overhead"},
}
NEW_TYPES = {
    "SleepAction": {"seconds": "int"},
    "GRPCAction": {"port": "int", "service": "str"},
    "PodOS": {"name": "str"},
    "PodSchedulingGate": {"name": "str"},
    "ContainerResizePolicy": {"resourceName": "str", "restartPolicy": "str"},
    "ResourceClaim": {"name": "str"},
    "AppArmorProfile": {"type": "str", "localhostProfile": "str"},
    "PVCRetentionPolicy": {"whenDeleted": "str", "whenScaled": "str"},
    "StatefulSetOrdinals": {"start": "int"},
    # inference.networking.k8s.io/v1 InferencePool (status is written by the gateway, not by deploy/).
    "InferencePool": {"apiVersion": "str", "kind": "str", "metadata": "V1ObjectMeta",
                      "spec": "x:InferencePoolSpec", "status": "object"},
    "InferencePoolSpec": {"selector": "x:PoolLabelSelector", "targetPorts": "list[x:PoolPort]",
                          "appProtocol": "str", "endpointPickerRef": "x:EndpointPickerRef"},
    "PoolLabelSelector": {"matchLabels": "dict(str, str)"},  # v1's LabelSelector: matchLabels only
    "PoolPort": {"number": "int"},
    "EndpointPickerRef": {"group": "str", "kind": "str", "name": "str", "port": "x:PoolPort",
                          "failureMode": "str"},
    # gateway.networking.k8s.io/v1 Gateway and HTTPRoute (standard channel fields).
    "Gateway": {"apiVersion": "str", "kind": "str", "metadata": "V1ObjectMeta", "spec": "x:GatewaySpec",
                "status": "object"},
    "GatewaySpec": {"gatewayClassName": "str", "listeners": "list[x:Listener]", "addresses": "list[object]",
                    "infrastructure": "object"},
    "Listener": {"name": "str", "hostname": "str", "port": "int", "protocol": "str", "tls": "object",
                 "allowedRoutes": "object"},
    "HTTPRoute": {"apiVersion": "str", "kind": "str", "metadata": "V1ObjectMeta", "spec": "x:HTTPRouteSpec",
                  "status": "object"},
    "HTTPRouteSpec": {"parentRefs": "list[x:ParentReference]", "hostnames": "list[str]",
                      "rules": "list[x:HTTPRouteRule]"},
    "ParentReference": {"group": "str", "kind": "str", "namespace": "str", "name": "str",
                        "sectionName": "str", "port": "int"},
    "HTTPRouteRule": {"name": "str", "matches": "list[x:HTTPRouteMatch]", "filters": "list[object]",
                      "backendRefs": "list[x:HTTPBackendRef]", "timeouts": "x:HTTPRouteTimeouts",
                      "sessionPersistence": "object"},
    "HTTPRouteMatch": {"path": "x:HTTPPathMatch", "headers": "list[object]", "queryParams": "list[object]",
                       "method": "str"},
    "HTTPPathMatch": {"type": "str", "value": "str"},
    "HTTPBackendRef": {"group": "str", "kind": "str", "name": "str", "namespace": "str", "port": "int",
                       "weight": "int", "filters": "list[object]"},
    "HTTPRouteTimeouts": {"request": "str", "backendRequest": "str"},
}
# Custom resources: (apiVersion, kind) -> their NEW_TYPES schema, for test_deploy.py's model check.
CRD_KINDS = {
    ("inference.networking.k8s.io/v1", "InferencePool"): "x:InferencePool",
    ("gateway.networking.k8s.io/v1", "Gateway"): "x:Gateway",
    ("gateway.networking.k8s.io/v1", "HTTPRoute"): "x:HTTPRoute",
}

# ---------------------------------------------------------------- grammars
# Quantity (k8s.io/apimachinery/pkg/api/resource, quantity.go):
#   <quantity> ::= <signedNumber><suffix>;  <suffix> ::= <binarySI> | <decimalExponent> | <decimalSI>
#   <binarySI> ::= Ki | Mi | Gi | Ti | Pi | Ei;  <decimalSI> ::= m | "" | k | M | G | T | P | E
#   <decimalExponent> ::= "e" <signedNumber> | "E" <signedNumber>
#   <signedNumber> ::= <number> | <sign><number>;  <number> ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
QUANTITY = re.compile(r"[+-]?" + _NUMBER + r"(?:Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?" + _NUMBER + r"|m|k|M|G|T|P|E)?")
_MULT = {"": 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
         "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
# IANA_SVC_NAME (validation.IsValidPortName): 1-15 of [a-z0-9-], at least one letter, no '-' at either end
# nor "--".
PORT_NAME = re.compile(r"(?!-)(?!.*--)(?=.*[a-z])[a-z0-9-]{1,15}(?<!-)")
# DNS-1123 subdomain (object names): <= 253, lower-case alphanumerics, '-' and '.', alphanumeric at both ends.
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# DNS-1123 label (container, port and volume names, Service names): <= 63, no dots.
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# Label values (validation.IsValidLabelValue): <= 63, empty or alphanumeric at both ends, [-_.A-Za-z0-9].
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
# Label keys (IsQualifiedName): [prefix/]name, prefix a DNS-1123 subdomain, name <= 63 like a value, not empty.
LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
STANDARD_RESOURCES = {"cpu", "memory", "ephemeral-storage"}  # plus hugepages-<size>; others need a domain


def parse_quantity(v):
    """The value of a quantity (a YAML number or a string in the grammar above), or None if invalid."""
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if not isinstance(v, str) or not QUANTITY.fullmatch(v):
        return None
    m = re.fullmatch(r"([+-]?" + _NUMBER + r")(.*)", v)
    num, suf = float(m.group(1)), m.group(2)
    if suf[:1] in ("e", "E"):
        return num * 10 ** float(suf[1:])
    return num * _MULT[suf]


# ---------------------------------------------------------------- the table
# Each row: (kinds, path, rule, source). A path is dot-separated from the object's root; "[]" walks every
# element of a list; "{pod}" is the pod spec of the kinds that carry a template (spec.template.spec).
# Rules: "required" (present and not empty), "one-of:a|b|c" (exactly one present), a callable
# (value, path, obj) -> list of messages, applied when the field is present.
POD_KINDS = ("Deployment", "StatefulSet")
ALL = ("*",)


def _positive(v, path, obj):
    return [] if isinstance(v, int) and not isinstance(v, bool) and v >= 1 else [f"must be an integer >= 1, got {v!r}"]


def _non_negative(v, path, obj):
    return [] if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else [f"must be an integer >= 0, got {v!r}"]


def _port_number(v, path, obj):
    return [] if isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 65535 else \
        [f"must be a port number 1..65535, got {v!r}"]


def _int_or_port_name(v, path, obj):
    if isinstance(v, str):
        return [] if PORT_NAME.fullmatch(v) else \
            [f"{v!r} is neither a port number nor a port name (IANA_SVC_NAME: 1-15 of a-z 0-9 -, a letter)"]
    return _port_number(v, path, obj)


def _port_name(v, path, obj):
    return [] if isinstance(v, str) and PORT_NAME.fullmatch(v) else \
        [f"{v!r} is not a port name (IANA_SVC_NAME: 1-15 of a-z 0-9 -, at least one letter)"]


def _protocol(v, path, obj):
    return [] if v in ("TCP", "UDP", "SCTP") else [f"must be TCP, UDP or SCTP, got {v!r}"]


def _dns_label(v, path, obj):
    return [] if isinstance(v, str) and len(v) <= 63 and DNS1123_LABEL.fullmatch(v) else \
        [f"{v!r} is not a DNS-1123 label (lower-case alphanumerics and '-', at most 63)"]


def _dns_subdomain(v, path, obj):
    return [] if isinstance(v, str) and len(v) <= 253 and DNS1123_SUBDOMAIN.fullmatch(v) else \
        [f"{v!r} is not a DNS-1123 subdomain (lower-case alphanumerics, '-' and '.', at most 253)"]


def _labels(v, path, obj):
    if not isinstance(v, dict):
        return [f"must be a mapping of strings, got {type(v).__name__}"]
    out = []
    for k, val in v.items():
        prefix, _, name = str(k).rpartition("/")
        if (prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.fullmatch(prefix))) or \
                len(name) > 63 or not LABEL_NAME.fullmatch(name):
            out.append(f"key {k!r} is not a qualified name ([prefix/]name, name <= 63 of [-_.A-Za-z0-9])")
        if not isinstance(val, str) or len(val) > 63 or not LABEL_VALUE.fullmatch(val):
            out.append(f"value {val!r} of {k!r} is not a label value (a string, <= 63 of [-_.A-Za-z0-9])")
    return out


def _resources(v, path, obj):
    """requests/limits: known or domain-qualified names, quantities in the grammar, >= 0, requests <=
    limits; extended resources (with a domain) are whole numbers and requests == limits."""
    if not isinstance(v, dict):
        return [f"must be a mapping, got {type(v).__name__}"]
    out, parsed = [], {}
    for part in ("requests", "limits"):
        if not isinstance(v.get(part) or {}, dict):
            out.append(f"{part}: must be a mapping of resource names to quantities")
            continue
        for name, q in (v.get(part) or {}).items():
            where = f"{part}.{name}"
            if name not in STANDARD_RESOURCES and not name.startswith("hugepages-") and "/" not in name:
                out.append(f"{where}: unknown resource name (standard: cpu, memory, ephemeral-storage, "
                           "hugepages-<size>; others need a domain, e.g. nvidia.com/gpu)")
            val = parse_quantity(q)
            if val is None:
                out.append(f"{where}: {q!r} is not a quantity (e.g. 500m, 2, 1Gi, 1.5Gi, 1e3)")
                continue
            if val < 0:
                out.append(f"{where}: must be >= 0, got {q!r}")
            if "/" in name and val != int(val):
                out.append(f"{where}: an extended resource must be a whole number, got {q!r}")
            parsed[(part, name)] = val
    for (part, name), val in parsed.items():
        if part != "requests" or ("limits", name) not in parsed:
            continue
        lim = parsed[("limits", name)]
        if val > lim:
            out.append(f"requests.{name}: {v['requests'][name]!r} exceeds limits.{name} {v['limits'][name]!r}")
        if "/" in name and val != lim:
            out.append(f"requests.{name}: an extended resource's request must equal its limit")
    return out


def _selector_matches_template(v, path, obj):
    """apps/v1: spec.selector must select spec.template.metadata.labels (and not be empty)."""
    labels = ((obj.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels") or {}
    ml = v.get("matchLabels") or {} if isinstance(v, dict) else {}
    exprs = v.get("matchExpressions") or [] if isinstance(v, dict) else []
    if not ml and not exprs:
        return ["empty selector is invalid for a workload (it would select every pod)"]
    out = [f"matchLabels {k}={val!r} does not match the template's labels {labels!r}"
           for k, val in ml.items() if labels.get(k) != val]
    for e in exprs:
        k, op, vals = e.get("key"), e.get("operator"), e.get("values") or []
        ok = {"In": lambda: labels.get(k) in vals, "NotIn": lambda: labels.get(k) not in vals,
              "Exists": lambda: k in labels, "DoesNotExist": lambda: k not in labels}.get(op)
        if ok is None:
            out.append(f"matchExpressions: unknown operator {op!r} (In, NotIn, Exists, DoesNotExist)")
        elif not ok():
            out.append(f"matchExpressions {k} {op} {vals} does not match the template's labels {labels!r}")
    return out


def _probe(v, path, obj):
    """A probe: thresholds >= 1; liveness and startup probes need successThreshold 1."""
    out = []
    for k in ("periodSeconds", "timeoutSeconds", "successThreshold", "failureThreshold"):
        if k in v:
            out += [f"{k}: {m}" for m in _positive(v[k], path, obj)]
    if "initialDelaySeconds" in v:
        out += [f"initialDelaySeconds: {m}" for m in _non_negative(v["initialDelaySeconds"], path, obj)]
    if path.endswith(("livenessProbe", "startupProbe")) and v.get("successThreshold", 1) != 1:
        out.append(f"successThreshold must be 1 for a {path.rsplit('.', 1)[-1]}")
    return out


def _sleep(v, path, obj):
    """1 <= seconds <= the pod's terminationGracePeriodSeconds (default 30) (1.30; 0 is allowed from 1.33)."""
    pod = ((obj.get("spec") or {}).get("template") or {}).get("spec") or obj.get("spec") or {}
    grace = pod.get("terminationGracePeriodSeconds", 30)
    s = v.get("seconds") if isinstance(v, dict) else None
    if not isinstance(s, int) or isinstance(s, bool):
        return ["seconds: required integer"]
    if not 1 <= s <= grace:
        return [f"seconds: must be greater than 0 and at most terminationGracePeriodSeconds ({grace}), got {s}"]
    return []


def _pdb_one_of(v, path, obj):
    if isinstance(v, dict) and "minAvailable" in v and "maxUnavailable" in v:
        return ["minAvailable and maxUnavailable cannot be both set"]
    out = []
    for k in ("minAvailable", "maxUnavailable"):
        x = v.get(k) if isinstance(v, dict) else None
        if x is None:
            continue
        if isinstance(x, str):
            if not re.fullmatch(r"[0-9]+%", x) or int(x[:-1]) > 100:
                out.append(f"{k}: {x!r} is neither an integer nor a percentage 0%..100%")
        elif isinstance(x, bool) or not isinstance(x, int) or x < 0:
            out.append(f"{k}: must be an integer >= 0 or a percentage, got {x!r}")
    return out


def _unique_names(v, path, obj):
    names = [e.get("name") for e in v if isinstance(e, dict) and e.get("name") is not None]
    dup = sorted({n for n in names if names.count(n) > 1})
    return [f"duplicate name {d!r}" for d in dup]


def _service_ports(spec, path, obj):
    """Ports are required except for ExternalName and headless Services; several need names."""
    v = spec.get("ports") if isinstance(spec, dict) else None
    if not v:
        if spec.get("type") == "ExternalName" or spec.get("clusterIP") == "None":
            return []
        return [".ports: required field missing (at least one port, except for ExternalName and headless "
                "Services)"]
    out = [f".ports: {m}" for m in _unique_names(v, path, obj)]
    if len(v) > 1:
        out += [f".ports[{i}].name: required when a Service has more than one port"
                for i, p in enumerate(v) if isinstance(p, dict) and not p.get("name")]
    return out


def _role_rule(v, path, obj):
    out = []
    if v.get("nonResourceURLs"):
        out.append("nonResourceURLs: a namespaced Role cannot apply to non-resource URLs")
    if not v.get("apiGroups"):
        out.append("apiGroups: resource rules must supply at least one api group (\"\" is the core group)")
    if not v.get("resources"):
        out.append("resources: resource rules must supply at least one resource")
    return out


def _enum(*allowed):
    def check(v, path, obj):
        return [] if v in allowed else [f"must be one of {', '.join(allowed)}, got {v!r}"]
    return check


def _service_account_subject(v, path, obj):
    if v.get("kind") == "ServiceAccount" and v.get("apiGroup"):
        return ["apiGroup: must be \"\" for a ServiceAccount subject"]
    return []


# Gateway API and Inference Extension shared types: Group (^$|DNS-1123 subdomain, <= 253), Kind
# (^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$, 1..63), ObjectName (1..253).
KIND = re.compile(r"[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?")
POOL_GROUP = "inference.networking.k8s.io"


def _group(v, path, obj):
    return [] if v == "" or (isinstance(v, str) and len(v) <= 253 and DNS1123_SUBDOMAIN.fullmatch(v)) else \
        [f"{v!r} is not an API group (empty for the core group, or a DNS-1123 subdomain)"]


def _kind(v, path, obj):
    return [] if isinstance(v, str) and 1 <= len(v) <= 63 and KIND.fullmatch(v) else \
        [f"{v!r} is not a Kind (a letter, then letters, digits and '-', at most 63)"]


def _object_name(v, path, obj):
    return [] if isinstance(v, str) and 1 <= len(v) <= 253 else [f"{v!r} is not an object name (1..253 characters)"]


def _pool_match_labels(v, path, obj):
    """InferencePool v1 LabelSelector.matchLabels: required, 1..64 entries (MaxItems=64), each a label."""
    if not isinstance(v, dict) or not v:
        return ["required: at least one label (the pool would select no pod, or every pod)"]
    out = [] if len(v) <= 64 else [f"at most 64 labels, got {len(v)}"]
    return out + _labels(v, path, obj)


def _pool_target_ports(v, path, obj):
    """targetPorts: MinItems=1, MaxItems=8, and the CEL rule "port number must be unique"."""
    if not isinstance(v, list) or not 1 <= len(v) <= 8:
        return [f"must have 1..8 ports, got {len(v) if isinstance(v, list) else v!r}"]
    nums = [p.get("number") for p in v if isinstance(p, dict)]
    dup = sorted({n for n in nums if nums.count(n) > 1 and n is not None})
    return [f"port number must be unique: {d} appears more than once" for d in dup]


def _epp_ref(v, path, obj):
    """EndpointPickerRef's CEL rule: port is required when kind is Service or unspecified."""
    if not isinstance(v, dict):
        return ["must be a mapping"]
    if v.get("kind", "Service") == "Service" and not v.get("port"):
        return [".port: required when kind is 'Service' or unspecified (defaults to 'Service')"]
    return []


def _backend_ref(v, path, obj):
    """HTTPBackendRef: a Service (the default kind, core group) needs a port (the CEL rule "Must have port
    for Service reference"); an InferencePool is in group inference.networking.k8s.io (any other group
    names another, unknown, kind, and the route's backend does not resolve)."""
    if not isinstance(v, dict):
        return ["must be a mapping"]
    kind, group = v.get("kind", "Service"), v.get("group", "")
    out = []
    if kind == "Service" and group == "" and v.get("port") is None:
        out.append(".port: required for a Service backend")
    if kind == "InferencePool" and group != POOL_GROUP:
        out.append(f".group: an InferencePool backend is in group {POOL_GROUP}, got {group!r}")
    if kind == "InferencePool" and v.get("port") is not None:
        out.append(".port: an InferencePool backend takes its ports from the pool (spec.targetPorts)")
    return out


def _weight(v, path, obj):
    return [] if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 1000000 else \
        [f"must be an integer 0..1000000, got {v!r}"]


def _path_match(v, path, obj):
    """HTTPPathMatch: type Exact|PathPrefix|RegularExpression (default PathPrefix); an Exact or PathPrefix
    value is an absolute path ("/" first, at most 1024)."""
    if not isinstance(v, dict):
        return ["must be a mapping"]
    t, val = v.get("type", "PathPrefix"), v.get("value", "/")
    if t not in ("Exact", "PathPrefix", "RegularExpression"):
        return [f".type: must be one of Exact, PathPrefix, RegularExpression, got {t!r}"]
    if t != "RegularExpression" and (not isinstance(val, str) or not val.startswith("/") or len(val) > 1024):
        return [f".value: must be an absolute path (starting with '/'), got {val!r}"]
    return []


def _duration(v, path, obj):
    """Gateway API Duration: ^([0-9]{1,5}(h|m|s|ms)){1,4}$."""
    return [] if isinstance(v, str) and re.fullmatch(r"([0-9]{1,5}(h|m|s|ms)){1,4}", v) else \
        [f"{v!r} is not a Gateway API duration (e.g. 300s, 1m30s, 500ms)"]


PROBE_HANDLERS = "one-of:exec|httpGet|tcpSocket|grpc"  # core/v1 ProbeHandler (validateProbe: one handler)
LIFECYCLE_HANDLERS = "one-of:exec|httpGet|tcpSocket|sleep"  # core/v1 LifecycleHandler (validateHandler)
CONTAINER = "{pod}.containers[]"

RULES = [
    # every object (ObjectMeta, TypeMeta)
    (ALL, "apiVersion", "required", "TypeMeta"),
    (ALL, "kind", "required", "TypeMeta"),
    (ALL, "metadata", "required", "ObjectMeta"),
    (ALL, "metadata.name", "required", "ObjectMeta: name required (no generateName in deploy/)"),
    (ALL, "metadata.labels", _labels, "ObjectMeta: labels (IsQualifiedName, IsValidLabelValue)"),
    (("Deployment", "StatefulSet", "ConfigMap", "ServiceAccount", "Role", "RoleBinding",
      "PodDisruptionBudget", "InferencePool", "Gateway", "HTTPRoute"), "metadata.name", _dns_subdomain,
     "ValidateObjectMeta: DNS-1123 subdomain names"),
    (("Service",), "metadata.name", _dns_label, "ValidateService: a Service name is a DNS-1035/1123 label"),
    # apps/v1 Deployment, StatefulSet (apps/validation ValidateDeploymentSpec, ValidateStatefulSetSpec)
    (POD_KINDS, "spec.selector", "required", "apps/v1 DeploymentSpec/StatefulSetSpec: selector required"),
    (POD_KINDS, "spec.selector", _selector_matches_template,
     "apps/validation: `selector` does not match template `labels`; empty selector invalid"),
    (POD_KINDS, "spec.template", "required", "apps/v1: template required"),
    (POD_KINDS, "spec.template.metadata.labels", _labels, "PodTemplateSpec labels"),
    (POD_KINDS, "spec.replicas", _non_negative, "apps/validation: replicas >= 0"),
    (POD_KINDS, "{pod}.containers", "required", "PodSpec: containers required, at least one"),
    (POD_KINDS, "{pod}.containers", _unique_names, "PodSpec: container names unique"),
    (POD_KINDS, "{pod}.terminationGracePeriodSeconds", _non_negative, "PodSpec: >= 0"),
    (POD_KINDS, "{pod}.volumes", _unique_names, "PodSpec: volume names unique"),
    (POD_KINDS, "{pod}.volumes[].name", _dns_label, "Volume name: DNS-1123 label"),
    (POD_KINDS, CONTAINER + ".name", "required", "Container: name required"),
    (POD_KINDS, CONTAINER + ".name", _dns_label, "Container: name is a DNS-1123 label"),
    (POD_KINDS, CONTAINER + ".image", "required",
     "core/validation validateContainers: image required in pods and pod templates"),
    (POD_KINDS, CONTAINER + ".imagePullPolicy", _enum("Always", "IfNotPresent", "Never"), "Container"),
    (POD_KINDS, CONTAINER + ".ports[].containerPort", "required", "ContainerPort: containerPort required"),
    (POD_KINDS, CONTAINER + ".ports[].containerPort", _port_number, "ContainerPort: 1..65535"),
    (POD_KINDS, CONTAINER + ".ports[].name", _port_name, "ContainerPort: name is an IANA_SVC_NAME"),
    (POD_KINDS, CONTAINER + ".ports[].protocol", _protocol, "Protocol enum"),
    (POD_KINDS, CONTAINER + ".resources", _resources,
     "ResourceRequirements: quantity grammar (apimachinery resource.Quantity), requests <= limits, "
     "extended resources integral and request == limit"),
    (POD_KINDS, CONTAINER + ".volumeMounts[].name", "required", "VolumeMount: name required"),
    (POD_KINDS, CONTAINER + ".volumeMounts[].mountPath", "required", "VolumeMount: mountPath required"),
    (POD_KINDS, "{pod}.volumes[].emptyDir.sizeLimit",
     lambda v, p, o: [] if parse_quantity(v) is not None else [f"{v!r} is not a quantity"], "EmptyDirVolumeSource"),
]
for _probe_name in ("livenessProbe", "readinessProbe", "startupProbe"):
    _p = CONTAINER + "." + _probe_name
    RULES += [
        (POD_KINDS, _p, PROBE_HANDLERS, "core/v1 ProbeHandler: exactly one of exec, httpGet, tcpSocket, grpc"),
        (POD_KINDS, _p, _probe, "validateProbe: thresholds >= 1, liveness/startup successThreshold 1"),
        (POD_KINDS, _p + ".httpGet.port", "required", "HTTPGetAction: port required"),
        (POD_KINDS, _p + ".httpGet.port", _int_or_port_name, "HTTPGetAction: port number or name"),
        (POD_KINDS, _p + ".tcpSocket.port", "required", "TCPSocketAction: port required"),
        (POD_KINDS, _p + ".tcpSocket.port", _int_or_port_name, "TCPSocketAction: port number or name"),
        (POD_KINDS, _p + ".exec.command", "required", "ExecAction: command required"),
        (POD_KINDS, _p + ".grpc.port", "required", "GRPCAction: port required"),
        (POD_KINDS, _p + ".grpc.port", _port_number, "GRPCAction: port number 1..65535"),
    ]
for _hook in ("preStop", "postStart"):
    _h = CONTAINER + ".lifecycle." + _hook
    RULES += [
        (POD_KINDS, _h, LIFECYCLE_HANDLERS,
         "core/v1 LifecycleHandler: exactly one of exec, httpGet, tcpSocket, sleep (sleep: 1.29+)"),
        (POD_KINDS, _h + ".sleep", _sleep, "validateSleepAction (1.30): 0 < seconds <= grace period"),
        (POD_KINDS, _h + ".httpGet.port", "required", "HTTPGetAction: port required"),
        (POD_KINDS, _h + ".exec.command", "required", "ExecAction: command required"),
    ]
RULES += [
    # core/v1 Service (core/validation ValidateService)
    (("Service",), "spec", "required", "Service: spec"),
    (("Service",), "spec", _service_ports, "ServiceSpec: ports required unless ExternalName/headless"),
    (("Service",), "spec.ports[].port", "required", "ServicePort: port required"),
    (("Service",), "spec.ports[].port", _port_number, "ServicePort: 1..65535"),
    (("Service",), "spec.ports[].targetPort", _int_or_port_name, "ServicePort: targetPort number or name"),
    (("Service",), "spec.ports[].name", _dns_label, "ServicePort: name is a DNS-1123 label"),
    (("Service",), "spec.ports[].protocol", _protocol, "Protocol enum"),
    (("Service",), "spec.type", _enum("ClusterIP", "NodePort", "LoadBalancer", "ExternalName"), "ServiceType"),
    (("Service",), "spec.selector", _labels, "ServiceSpec: selector keys and values are labels"),
    # policy/v1 PodDisruptionBudget (policy/validation ValidatePodDisruptionBudgetSpec)
    (("PodDisruptionBudget",), "spec", "required", "PodDisruptionBudget: spec"),
    (("PodDisruptionBudget",), "spec", _pdb_one_of,
     "policy/validation: at most one of minAvailable/maxUnavailable, each an int >= 0 or 0%..100%"),
    (("PodDisruptionBudget",), "spec.unhealthyPodEvictionPolicy", _enum("IfHealthyBudget", "AlwaysAllow"),
     "PodDisruptionBudgetSpec (1.27 beta)"),
    # rbac.authorization.k8s.io/v1 (rbac/validation)
    (("Role",), "rules[].verbs", "required", "PolicyRule: verbs required"),
    (("Role",), "rules[]", _role_rule, "rbac/validation ValidatePolicyRule (namespaced)"),
    (("RoleBinding",), "roleRef", "required", "RoleBinding: roleRef required"),
    (("RoleBinding",), "roleRef.apiGroup", "required", "RoleRef: apiGroup required"),
    (("RoleBinding",), "roleRef.kind", _enum("Role", "ClusterRole"), "rbac/validation: roleRef.kind"),
    (("RoleBinding",), "roleRef.name", "required", "RoleRef: name required"),
    (("RoleBinding",), "subjects[].kind", _enum("ServiceAccount", "User", "Group"), "Subject: kind"),
    (("RoleBinding",), "subjects[].name", "required", "Subject: name required"),
    (("RoleBinding",), "subjects[]", _service_account_subject, "rbac/validation ValidateRoleBindingSubject"),
    # inference.networking.k8s.io/v1 InferencePool (inferencepool_types.go, shared_types.go)
    (("InferencePool",), "spec", "required", "InferencePool: spec +required"),
    (("InferencePool",), "spec.selector", "required", "InferencePoolSpec: selector +required"),
    (("InferencePool",), "spec.selector.matchLabels", "required", "LabelSelector: matchLabels Required"),
    (("InferencePool",), "spec.selector.matchLabels", _pool_match_labels,
     "LabelSelector: MaxItems=64, LabelKey/LabelValue patterns"),
    (("InferencePool",), "spec.targetPorts", "required", "InferencePoolSpec: targetPorts +required"),
    (("InferencePool",), "spec.targetPorts", _pool_target_ports, "targetPorts: MinItems=1, MaxItems=8, unique"),
    (("InferencePool",), "spec.targetPorts[].number", "required", "Port: number +required"),
    (("InferencePool",), "spec.targetPorts[].number", _port_number, "PortNumber: Minimum=1, Maximum=65535"),
    (("InferencePool",), "spec.appProtocol", _enum("http", "kubernetes.io/h2c"), "AppProtocol: Enum"),
    (("InferencePool",), "spec.endpointPickerRef", _epp_ref, "EndpointPickerRef: CEL port rule"),
    (("InferencePool",), "spec.endpointPickerRef.name", "required", "EndpointPickerRef: name +required"),
    (("InferencePool",), "spec.endpointPickerRef.name", _object_name, "ObjectName: 1..253"),
    (("InferencePool",), "spec.endpointPickerRef.group", _group, "Group: pattern"),
    (("InferencePool",), "spec.endpointPickerRef.kind", _kind, "Kind: pattern"),
    (("InferencePool",), "spec.endpointPickerRef.port.number", _port_number, "PortNumber"),
    (("InferencePool",), "spec.endpointPickerRef.failureMode", _enum("FailOpen", "FailClose"),
     "EndpointPickerFailureMode: Enum"),
    # gateway.networking.k8s.io/v1 Gateway, HTTPRoute (apis/v1 gateway_types.go, httproute_types.go)
    (("Gateway",), "spec.gatewayClassName", "required", "GatewaySpec: gatewayClassName required"),
    (("Gateway",), "spec.listeners", "required", "GatewaySpec: listeners MinItems=1"),
    (("Gateway",), "spec.listeners", _unique_names, "Listener names unique"),
    (("Gateway",), "spec.listeners[].name", "required", "Listener: name required"),
    (("Gateway",), "spec.listeners[].name", _dns_label, "SectionName: DNS-1123 label"),
    (("Gateway",), "spec.listeners[].port", "required", "Listener: port required"),
    (("Gateway",), "spec.listeners[].port", _port_number, "PortNumber"),
    (("Gateway",), "spec.listeners[].protocol", "required", "Listener: protocol required"),
    (("HTTPRoute",), "spec.parentRefs", "required", "an HTTPRoute attaches to a Gateway through parentRefs"),
    (("HTTPRoute",), "spec.parentRefs[].name", "required", "ParentReference: name required"),
    (("HTTPRoute",), "spec.parentRefs[].group", _group, "Group: pattern"),
    (("HTTPRoute",), "spec.parentRefs[].kind", _kind, "Kind: pattern"),
    (("HTTPRoute",), "spec.rules[].matches[].path", _path_match, "HTTPPathMatch: type enum, absolute path"),
    (("HTTPRoute",), "spec.rules[].backendRefs[]", _backend_ref,
     "HTTPBackendRef: CEL Service port rule; an InferencePool's group (Inference Extension)"),
    (("HTTPRoute",), "spec.rules[].backendRefs[].name", "required", "BackendRef: name required"),
    (("HTTPRoute",), "spec.rules[].backendRefs[].name", _object_name, "ObjectName: 1..253"),
    (("HTTPRoute",), "spec.rules[].backendRefs[].group", _group, "Group: pattern"),
    (("HTTPRoute",), "spec.rules[].backendRefs[].kind", _kind, "Kind: pattern"),
    (("HTTPRoute",), "spec.rules[].backendRefs[].port", _port_number, "PortNumber"),
    (("HTTPRoute",), "spec.rules[].backendRefs[].weight", _weight, "weight: Minimum=0, Maximum=1000000"),
    (("HTTPRoute",), "spec.rules[].timeouts.request", _duration, "Duration pattern"),
    (("HTTPRoute",), "spec.rules[].timeouts.backendRequest", _duration, "Duration pattern"),
    # core/v1 ConfigMap (ValidateConfigMap: keys are [-._a-zA-Z0-9]+, <= 253)
    (("ConfigMap",), "data", lambda v, p, o: [f"key {k!r} is not a valid config key ([-._a-zA-Z0-9]+, <= 253)"
                                              for k in v if not re.fullmatch(r"[-._a-zA-Z0-9]{1,253}", k)],
     "ValidateConfigMap"),
]


# ---------------------------------------------------------------- engine
def _walk(node, parts, path):
    """Yields (path, value, present) for every match of parts below node ("[]" fans out over a list)."""
    if not parts:
        yield path, node, True
        return
    head, rest = parts[0], parts[1:]
    many = head.endswith("[]")
    key = head[:-2] if many else head
    if not isinstance(node, dict):
        return
    if key not in node or node[key] is None:
        if not many and not rest:
            yield f"{path}.{key}" if path else key, None, False
        return
    child = node[key]
    sub = f"{path}.{key}" if path else key
    if many:
        if isinstance(child, list):
            for i, c in enumerate(child):
                yield from _walk(c, rest, f"{sub}[{i}]")
        return
    if rest and not isinstance(child, dict):
        return
    yield from _walk(child, rest, sub)


def check(obj, where):
    """Every rule of RULES that applies to obj's kind; returns ["where.path: message", ...]."""
    kind = obj.get("kind") if isinstance(obj, dict) else None
    out = []
    for kinds, path, rule, _source in RULES:
        if kinds != ALL and kind not in kinds:
            continue
        parts = path.replace("{pod}", "spec.template.spec").split(".")
        for p, v, present in _walk(obj, parts, ""):
            # A missing parent is reported by its own row; only the last step's absence counts here.
            if rule == "required":
                if not present or v in ("", [], {}):
                    out.append(f"{where}.{p}: required field missing")
            elif not present:
                continue
            elif isinstance(rule, str) and rule.startswith("one-of:"):
                names = rule[7:].split("|")
                have = [n for n in names if isinstance(v, dict) and v.get(n) is not None]
                if len(have) != 1:
                    what = "must specify a handler type" if not have else \
                        "may not specify more than 1 handler type (has %s)" % ", ".join(have)
                    out.append(f"{where}.{p}: {what}: exactly one of {', '.join(names)}")
            else:
                out += [f"{where}.{p}: {m}" if not m.startswith((".", "[")) else f"{where}.{p}{m}"
                        for m in rule(v, p, obj)]
    return out
