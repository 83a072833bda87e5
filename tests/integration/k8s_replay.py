#!/usr/bin/env python3
"""A scripted Kubernetes API server on loopback for the kubernetes discovery tests (stdlib only).

It serves the two requests the source makes, shaped as the real API server answers them:

  GET /api/v1/namespaces/NS/pods?labelSelector=SEL                  -> a PodList (kind, apiVersion,
      metadata.resourceVersion, items with metadata/spec/status as a kubelet fills them)
  GET /api/v1/namespaces/NS/pods?labelSelector=SEL&watch=1&resourceVersion=RV&timeoutSeconds=T&...
      -> a chunked stream of newline-delimited events {"type": ..., "object": ...}, replaying the
         recorded events after RV first (as the watch cache does), or HTTP 410 with a Status "Expired"
         when RV is older than the compaction point.

and the two an inference_pool source adds for its InferencePool (inference.networking.k8s.io/v1):

  GET /apis/inference.networking.k8s.io/v1/namespaces/NS/inferencepools?fieldSelector=metadata.name=NAME
      -> an InferencePoolList of the pools of that name (0 or 1)
  GET ...inferencepools?fieldSelector=metadata.name=NAME&watch=1&resourceVersion=RV&...
      -> its watch stream, replayed after RV as the pods' (one resourceVersion sequence for both kinds)

Every request must carry "Authorization: Bearer TOKEN" (401 Status otherwise) and name the namespace
given with --namespace (404 otherwise). The test drives the state through /control/* (JSON bodies):

  POST /control/put      {"pods": [SPEC...]}            ADDED or MODIFIED events
  POST /control/delete   {"names": [NAME...]}           DELETED events
  POST /control/bookmark {}                             a BOOKMARK to every open watch; answers {"rv": RV}
  POST /control/close    {"role": R}                    ends R's open watches cleanly (as timeoutSeconds)
  POST /control/expire   {"role": R, "put": [...], "delete": [...]}
        changes pods without events, compacts the history, sends an ERROR event (Status code 410) to R's
        open watches and ends them
  POST /control/compact  {"role": R, "put": [...], "delete": [...]}
        the same, but the open watches end cleanly: the next watch from their resourceVersion gets an
        HTTP 410
  POST /control/fail     {"role": R, "status": CODE, "count": N}   the next N lists of R answer CODE
  POST /control/token    {"token": T}                   the token expected from now on
  POST /control/pool     {"name", "matchLabels": {..}, "ports": [N...], "appProtocol": A (optional)}
        creates or changes an InferencePool (ADDED or MODIFIED)
  POST /control/pool_delete {"name"}                    DELETED of the InferencePool
  GET  /control/log                                     every API request seen, in order
  GET  /control/wait_watchers?role=R&n=N&timeout=S      waits until R has N open watches
  GET  /control/wait_request?role=R&watch=1&rv=RV&timeout=S   waits until such a request was seen

SPEC: {"name", "role", "ip", "ready": bool, "phase": "Running", "port": 30000 or null, "ann": "9001",
"labels": {more pod labels, e.g. "model": "a"}, "annotations": {more pod annotations}}.
A role R is the value of the pod label "role"; a selector belongs to R when a pod labelled
{app: sglang, role: R} matches its terms on the keys app and role (terms on other keys, such as a
pool's model label, pick pods within the role). It prints "PORT N" once listening and exits when stdin closes.
"""
import argparse
import json
import queue
import select
import socket
import sys
import threading
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CLOSE = object()


class State:
    def __init__(self, token, namespace):
        self.cv = threading.Condition()
        self.token = token
        self.namespace = namespace
        self.rv = 1000
        self.pods = {}
        self.history = []  # (rv, event) for watch replay
        self.compacted = 0  # a watch from an older resourceVersion is answered 410
        self.watchers = []
        self.log = []
        self.fail = {}  # role -> [status, count]
        self.pools = {}  # InferencePools by name


def parse_selector(sel):
    """Equality- and set-based selectors: k=v, k==v, k!=v, k in (a,b), k notin (a,b), k, !k."""
    reqs, depth, cur = [], 0, ""
    for ch in sel:
        if ch == "," and depth == 0:
            reqs.append(cur.strip())
            cur = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        cur += ch
    if cur.strip():
        reqs.append(cur.strip())
    out = []
    for r in reqs:
        words = r.split(None, 1)
        if len(words) == 2 and words[1].startswith(("in ", "in(", "notin ", "notin(")):
            op, rest = words[1].split("(", 1)
            out.append((words[0], op.strip(), {v.strip() for v in rest.rstrip(")").split(",")}))
        elif "!=" in r:
            k, v = r.split("!=", 1)
            out.append((k.strip(), "!=", v.strip()))
        elif "==" in r or "=" in r:
            k, v = r.split("==", 1) if "==" in r else r.split("=", 1)
            out.append((k.strip(), "=", v.strip()))
        elif r.startswith("!"):
            out.append((r[1:].strip(), "!exists", None))
        else:
            out.append((r, "exists", None))
    return out


def matches(sel, labels):
    return matches_terms(parse_selector(sel), labels)


def matches_terms(terms, labels):
    for k, op, v in terms:
        have = labels.get(k)
        if op == "=" and have != v:
            return False
        if op == "!=" and have == v:
            return False
        if op == "in" and have not in v:
            return False
        if op == "notin" and have in v:
            return False
        if op == "exists" and have is None:
            return False
        if op == "!exists" and have is not None:
            return False
    return True


def selector_role(sel):
    terms = [t for t in parse_selector(sel) if t[0] in ("app", "role")]
    for role in ("prefill", "decode"):
        if matches_terms(terms, {"app": "sglang", "role": role}):
            return role
    return None


def status_object(code, reason, message):
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


def make_pod(st, spec, rv, old=None):
    name, role = spec["name"], spec["role"]
    ip, ready, phase = spec.get("ip"), bool(spec.get("ready", True)), spec.get("phase", "Running")
    port = spec.get("port", 30000)
    ts = "2024-05-01T10:00:00Z"
    meta = {
        "name": name,
        "generateName": name.rsplit("-", 1)[0] + "-",
        "namespace": st.namespace,
        "uid": old["metadata"]["uid"] if old else str(uuid.uuid4()),
        "resourceVersion": str(rv),
        "creationTimestamp": ts,
        "labels": dict({"app": "sglang", "role": role, "pod-template-hash": "7d9f8c6b5"}, **spec.get("labels", {})),
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "sglang-" + role,
                             "uid": "5f0c1a5e-0000-4000-8000-000000000001", "controller": True,
                             "blockOwnerDeletion": True}],
    }
    if spec.get("ann") is not None:
        meta["annotations"] = {"sglang.ai/bootstrap-port": spec["ann"]}
    if spec.get("annotations"):
        meta["annotations"] = dict(meta.get("annotations", {}), **spec["annotations"])
    container = {"name": "sglang", "image": "lmsysorg/sglang:v0.4.6", "resources": {},
                 "terminationMessagePath": "/dev/termination-log", "imagePullPolicy": "IfNotPresent"}
    if port is not None:
        container["ports"] = [{"name": "http", "containerPort": port, "protocol": "TCP"}]
    cond = "True" if ready else "False"
    status = {
        "phase": phase,
        "hostIP": "192.168.10.4",
        "qosClass": "BestEffort",
        "conditions": [
            {"type": "Initialized", "status": "True", "lastProbeTime": None, "lastTransitionTime": ts},
            {"type": "Ready", "status": cond, "lastProbeTime": None, "lastTransitionTime": ts},
            {"type": "ContainersReady", "status": cond, "lastProbeTime": None, "lastTransitionTime": ts},
            {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": ts},
        ],
    }
    if ip is not None:
        status["podIP"] = ip
        status["podIPs"] = [{"ip": ip}]
    if phase != "Pending":
        status["startTime"] = ts
    return {"kind": "Pod", "apiVersion": "v1", "metadata": meta,
            "spec": {"containers": [container], "restartPolicy": "Always", "nodeName": "node-1",
                     "serviceAccountName": "sglang-router", "dnsPolicy": "ClusterFirst"},
            "status": status}


class Watcher:
    def __init__(self, selector, pool=None):
        self.selector = selector
        self.pool = pool  # an InferencePool watch: the name its fieldSelector names
        self.role = "inferencepool" if pool is not None else selector_role(selector)
        self.q = queue.Queue()

    def wants(self, obj):
        if obj.get("kind") == "InferencePool":
            return self.pool is not None and obj["metadata"]["name"] == self.pool
        return self.pool is None and matches(self.selector, obj["metadata"]["labels"])


def make_pool(st, spec, rv, old=None):
    """An InferencePool as the API server returns it (defaults filled in, as its CRD's schema does)."""
    pool_spec = {"selector": {"matchLabels": dict(spec["matchLabels"])},
                 "targetPorts": [{"number": n} for n in spec["ports"]],
                 "appProtocol": spec.get("appProtocol", "http"),
                 "endpointPickerRef": {"group": "", "kind": "Service", "name": spec["name"] + "-epp",
                                       "port": {"number": 9002}, "failureMode": "FailClose"}}
    return {"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
            "metadata": {"name": spec["name"], "namespace": st.namespace,
                         "uid": old["metadata"]["uid"] if old else str(uuid.uuid4()),
                         "resourceVersion": str(rv), "generation": int(old["metadata"]["generation"]) + 1 if old else 1,
                         "creationTimestamp": "2024-05-01T10:00:00Z"},
            "spec": pool_spec,
            "status": {"parents": [{"parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                                  "name": "inference-gateway"},
                                    "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted",
                                                    "message": "", "observedGeneration": 1,
                                                    "lastTransitionTime": "2024-05-01T10:00:00Z"}]}]}}


def change(st, put, delete, record):
    """Applies pod changes under st.cv; records and pushes events when record is true."""
    for spec in put:
        st.rv += 1
        old = st.pods.get(spec["name"])
        pod = make_pod(st, spec, st.rv, old)
        st.pods[spec["name"]] = pod
        if record:
            publish(st, {"type": "MODIFIED" if old else "ADDED", "object": pod}, old)
    for name in delete:
        old = st.pods.pop(name, None)
        if old is None:
            continue
        st.rv += 1
        pod = json.loads(json.dumps(old))
        pod["metadata"]["resourceVersion"] = str(st.rv)
        pod["metadata"]["deletionTimestamp"] = "2024-05-01T11:00:00Z"
        pod["metadata"]["deletionGracePeriodSeconds"] = 0
        if record:
            publish(st, {"type": "DELETED", "object": pod})


def seen_by(w, ev, old):
    """The event watcher w gets for ev (None: none), as the API server's watch filter makes it: a change
    that takes an object out of the watch's selector is a DELETED for it, one that brings it in an ADDED."""
    now, before = w.wants(ev["object"]), old is not None and w.wants(old)
    if now and before or ev["type"] not in ("MODIFIED",):
        return ev if now else None
    if now:
        return {"type": "ADDED", "object": ev["object"]}
    return {"type": "DELETED", "object": ev["object"]} if before else None


def publish(st, ev, old=None):
    st.history.append((st.rv, ev, old))
    for w in st.watchers:
        out = seen_by(w, ev, old)
        if out is not None:
            w.q.put(out)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    st = None

    def log_message(self, fmt, *args):
        pass

    def reply(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def body_json(self):
        n = int(self.headers.get("Content-Length", "0"))
        return json.loads(self.rfile.read(n) or b"{}")

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        q = {k: v[0] for k, v in urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
        if url.path == "/control/log":
            with self.st.cv:
                return self.reply(200, list(self.st.log))
        if url.path == "/control/wait_watchers":
            return self.wait(q, lambda: sum(w.role == q["role"] for w in self.st.watchers) >= int(q["n"]))
        if url.path == "/control/wait_request":
            return self.wait(q, lambda: any(e["role"] == q["role"] and e["watch"] == (q["watch"] == "1")
                                            and e["rv"] == q.get("rv") and e["status"] == 200
                                            for e in self.st.log))
        parts = url.path.split("/")
        if len(parts) == 6 and parts[:4] == ["", "api", "v1", "namespaces"] and parts[5] == "pods":
            return self.api(parts[4], q)
        if (len(parts) == 7 and parts[:5] == ["", "apis", "inference.networking.k8s.io", "v1", "namespaces"]
                and parts[6] == "inferencepools"):
            return self.api(parts[5], q, pools=True)
        return self.reply(404, status_object(404, "NotFound", "the server could not find the requested resource"))

    def wait(self, q, pred):
        with self.st.cv:
            ok = self.st.cv.wait_for(pred, timeout=float(q.get("timeout", "5")))
        self.reply(200, {"ok": bool(ok)})

    def api(self, ns, q, pools=False):
        st = self.st
        sel = q.get("labelSelector", "")
        field = q.get("fieldSelector", "")
        pool = field[len("metadata.name="):] if field.startswith("metadata.name=") else None
        if pools and pool is None:
            return self.reply(400, status_object(400, "BadRequest", "this server serves one pool by name only"))
        watch = q.get("watch") in ("1", "true")
        entry = {"path": self.path, "namespace": ns, "selector": sel, "field": field,
                 "role": "inferencepool" if pools else selector_role(sel), "watch": watch,
                 "rv": q.get("resourceVersion"), "timeoutSeconds": q.get("timeoutSeconds"),
                 "bookmarks": q.get("allowWatchBookmarks"),
                 "auth_ok": self.headers.get("Authorization") == "Bearer " + st.token}
        with st.cv:
            code, obj = 200, None
            fail = st.fail.get(entry["role"])
            if not entry["auth_ok"]:
                code, obj = 401, status_object(401, "Unauthorized", "Unauthorized")
            elif ns != st.namespace:
                code, obj = 404, status_object(404, "NotFound", 'namespaces "%s" not found' % ns)
            elif not watch and fail and fail[1] > 0:
                fail[1] -= 1
                code, obj = fail[0], status_object(fail[0], "InternalError", "scripted failure")
            elif watch and int(q.get("resourceVersion") or 0) < st.compacted:
                code, obj = 410, status_object(410, "Expired", "too old resource version: %s (%d)" % (
                    q.get("resourceVersion"), st.compacted))
            elif not watch and pools:
                items = [st.pools[pool]] if pool in st.pools else []
                obj = {"kind": "InferencePoolList", "apiVersion": "inference.networking.k8s.io/v1",
                       "metadata": {"resourceVersion": str(st.rv)}, "items": items}
            elif not watch:
                items = [st.pods[n] for n in sorted(st.pods) if matches(sel, st.pods[n]["metadata"]["labels"])]
                obj = {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": str(st.rv)},
                       "items": items}
            else:
                w = Watcher(sel, pool if pools else None)
                since = int(q.get("resourceVersion") or 0)
                for rv, ev, old in st.history:
                    out = seen_by(w, ev, old) if rv > since else None
                    if out is not None:
                        w.q.put(out)
                st.watchers.append(w)
            entry["status"] = code
            st.log.append(entry)
            st.cv.notify_all()
        if obj is not None:
            return self.reply(code, obj)
        try:
            self.stream(w, float(q.get("timeoutSeconds") or 1800))
        finally:
            with st.cv:
                st.watchers.remove(w)
                st.cv.notify_all()

    def stream(self, w, timeout):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        deadline = threading.TIMEOUT_MAX if timeout <= 0 else timeout
        waited = 0.0
        while waited < deadline:
            try:
                ev = w.q.get(timeout=0.05)
            except queue.Empty:
                waited += 0.05
                if self.client_gone():
                    self.close_connection = True
                    return
                continue
            if ev is CLOSE:
                break
            data = (json.dumps(ev) + "\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
            if ev["type"] == "ERROR":
                break
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def client_gone(self):
        r, _, _ = select.select([self.connection], [], [], 0)
        if not r:
            return False
        try:
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def do_POST(self):
        st = self.st
        op = urllib.parse.urlsplit(self.path).path[len("/control/"):]
        req = self.body_json()
        out = {}
        with st.cv:
            if op == "put":
                change(st, req.get("pods", []), [], True)
            elif op == "delete":
                change(st, [], req.get("names", []), True)
            elif op == "bookmark":
                st.rv += 1
                ev = {"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1", "metadata": {
                    "resourceVersion": str(st.rv), "creationTimestamp": None,
                    "annotations": {"k8s.io/initial-events-end": "true"}}, "spec": {"containers": None},
                    "status": {}}}
                for w in st.watchers:
                    w.q.put(ev)
                out["rv"] = str(st.rv)
            elif op in ("close", "expire", "compact"):
                if op != "close":
                    change(st, req.get("put", []), req.get("delete", []), False)
                    st.compacted = st.rv
                for w in st.watchers:
                    if w.role == req["role"]:
                        if op == "expire":
                            w.q.put({"type": "ERROR", "object": status_object(
                                410, "Expired", "too old resource version: %d (%d)" % (st.compacted - 1,
                                                                                       st.compacted))})
                        else:
                            w.q.put(CLOSE)
            elif op == "fail":
                st.fail[req["role"]] = [req["status"], req.get("count", 1)]
            elif op == "token":
                st.token = req["token"]
            elif op == "pool":
                st.rv += 1
                old = st.pools.get(req["name"])
                st.pools[req["name"]] = make_pool(st, req, st.rv, old)
                publish(st, {"type": "MODIFIED" if old else "ADDED", "object": st.pools[req["name"]]}, old)
            elif op == "pool_delete":
                old = st.pools.pop(req["name"], None)
                if old is not None:
                    st.rv += 1
                    gone = json.loads(json.dumps(old))
                    gone["metadata"]["resourceVersion"] = str(st.rv)
                    publish(st, {"type": "DELETED", "object": gone})
            else:
                return self.reply(404, {"error": "unknown control " + op})
            out["resourceVersion"] = str(st.rv)
            st.cv.notify_all()
        self.reply(200, out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--token", required=True)
    ap.add_argument("--namespace", default="default")
    args = ap.parse_args()
    Handler.st = State(args.token, args.namespace)
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    print("PORT %d" % srv.server_address[1], flush=True)
    sys.stdin.read()  # the test holds the other end; EOF means it is gone


if __name__ == "__main__":
    main()
