#!/usr/bin/env python3
"""pdrouter as the endpoint picker of a Gateway API InferencePool (`epp.enabled`, router/gateway/): a
gateway played here with Debian's python3-grpcio (the messages of router/epp/proto/, compiled at test time
as test_epp.py does) asks the router, over Envoy's ext_proc stream, where each request goes; the router
picks among real pdsim workers with its own policies and state.

    /usr/bin/python3 test_gateway.py SCENARIO     (PDR_BUILD=<build dir>)

Scenarios:
  pick       FULL_DUPLEX_STREAMED: the headers' answer names a decode first (then the other decode, a
             fall-back) in x-gateway-destination-endpoint and the envoy.lb metadata, and a prefill in
             x-prefiller-host-port; the body comes back whole; the decode counts one request in flight until
             the response's last chunk, which is given back; the served endpoint is counted; health:
             liveness, readiness and the ext_proc service SERVING, on epp.port and on epp.health_port
             (with the extension's "inference-extension"); the metrics count the pick
  drain      a draining decode is never named first, nor listed; with every decode drained the answer is
             an ImmediateResponse 503 and readiness turns NOT_SERVING; a dead prefill (killed, its health
             checks failing) makes the answer 503 at once
  subset     the gateway's endpoint subset hint: the pick stays inside it; a subset naming no worker: 503
  admission  limits.max_inflight 1 and limits.queue 1: a second request waits in the queue (no answer
             while the first is in flight), a third is refused 429 at once; the first's response ends and
             the second gets its pick
  bad        a body that is not JSON: 400; a body past limits.max_body_bytes: 413; both as
             ImmediateResponse with an OpenAI-style error body
  e2e        the whole path: client -> gateway -> the picker's pick -> the named decode pod's sidecar
             (pdrouter --sidecar) -> the named pdsim prefill and the pod's pdsim decode -> back, streaming
             and not, with the same answers as through pdrouter's own front door; a stream in flight on a
             decode pod drained at the picker completes whole and new picks avoid the pod; with every
             prefill dead the client has its 503 within 1 s
  restart    the picker restarts (SIGTERM) while the gateway holds an open stream: the stream ends
             UNAVAILABLE, and the gateway's retry on the same channel, once the new picker listens on the
             same port, gets its pick
"""
import http.client
import json
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check  # noqa: E402
from test_epp import DEST, EXT, CHECK, Stream, headers, metadata, pb, set_headers  # noqa: E402
from test_router import BODIES, metric_value, metrics, router, sim, stats, texts  # noqa: E402
from test_admin import admin  # noqa: E402

BODY = json.dumps({"model": "pdsim", "prompt": "The endpoint picker names the decode", "max_tokens": 4}).encode()


def channel(port):
    import grpc
    ch = grpc.insecure_channel("127.0.0.1:%d" % port, options=[("grpc.use_local_subchannel_pool", 1)])
    grpc.channel_ready_future(ch).result(timeout=10)
    return ch


def epp_router(ps, ds, extra="", ports=None):
    port, hport = ports or (pdtest.free_port(), pdtest.free_port())
    r = router(ps, ds, config="epp: { enabled: true, host: 127.0.0.1, port: %d, health_port: %d }\n"
               "health: { interval_ms: 100, fall: 1 }\n%s" % (port, hport, extra))
    r.ports["epp"] = port
    r.ports["epp_health"] = hport
    pdtest.poll_until(lambda: "endpoint picker: serving" in r.log_tail(), 10, "the picker to serve")
    return r


def ep(p):
    return "127.0.0.1:%d" % p.port


def health(ch, svc):
    h = pb()["health"]
    fn = ch.unary_unary(CHECK, request_serializer=h.HealthCheckRequest.SerializeToString,
                        response_deserializer=h.HealthCheckResponse.FromString)
    return fn(h.HealthCheckRequest(service=svc), timeout=5).status


def request(s, body=BODY, path="/v1/completions", subset=None, chunks=2):
    e = pb()["ep"]
    mode = e.ProtocolConfiguration(request_body_mode=e.FULL_DUPLEX_STREAMED,
                                   response_body_mode=e.FULL_DUPLEX_STREAMED)
    kw = {}
    if subset is not None:
        kw["metadata_context"] = metadata("envoy.lb.subset_hint", "x-gateway-destination-endpoint-subset", subset)
    s.send(request_headers=e.HttpHeaders(headers=headers(**{":method": "POST", ":path": path,
                                                             "content-type": "application/json"}),
                                         end_of_stream=False), protocol_config=mode, **kw)
    cut = max(1, len(body) // chunks)
    parts = [body[i:i + cut] for i in range(0, len(body), cut)]
    for i, c in enumerate(parts):
        s.send(request_body=e.HttpBody(body=c, end_of_stream=i == len(parts) - 1))


def picked(s, r):
    """The pick's answer: (endpoints, prefill header value or None), the body checked to come back whole."""
    a = s.recv()
    check(a.WhichOneof("response") == "request_headers", "not a pick: %s" % a, r)
    sh = set_headers(a.request_headers.response)
    from google.protobuf import json_format, struct_pb2
    md = json_format.MessageToDict(struct_pb2.Struct.FromString(a.dynamic_metadata.SerializeToString()))
    check(md == {"envoy.lb": {DEST: sh[DEST].decode()}}, "metadata %r, header %r" % (md, sh), r)
    return sh[DEST].decode().split(","), sh.get("x-prefiller-host-port", b"").decode() or None, a


def body_back(s, r, body=BODY):
    b = s.recv()
    check(b.WhichOneof("response") == "request_body", "not the body: %s" % b, r)
    sr = b.request_body.response.body_mutation.streamed_response
    check(sr.body == body and sr.end_of_stream, "the body given back: %r" % sr, r)


def respond(s, r, served):
    e = pb()["ep"]
    s.send(response_headers=e.HttpHeaders(headers=headers(**{":status": "200"})),
           metadata_context=metadata("envoy.lb", "x-gateway-destination-endpoint-served", served))
    check(s.recv().WhichOneof("response") == "response_headers", "response headers not answered", r)
    s.send(response_body=e.HttpBody(body=b'{"choices":[]}', end_of_stream=True))
    a = s.recv()
    check(a.response_body.response.body_mutation.streamed_response.body == b'{"choices":[]}', "%s" % a, r)


def inflight(r, wid):
    return admin(r, "GET", "/admin/v1/workers/" + wid)["in_flight"]


def immediate(s, r, code):
    a = s.recv()
    check(a.WhichOneof("response") == "immediate_response" and a.immediate_response.status.code == code,
          "expected %d: %s" % (code, a), r)
    return json.loads(a.immediate_response.body)


def scenario_pick():
    ps, ds = [sim("prefill"), sim("prefill")], [sim("decode"), sim("decode")]
    try:
        r = epp_router(ps, ds)
        ch = channel(r.ports["epp"])
        hs = pb()["health"].HealthCheckResponse
        pdtest.poll_until(lambda: health(ch, "readiness") == hs.SERVING, 10, "readiness")
        check(health(ch, "liveness") == hs.SERVING and health(ch, EXT) == hs.SERVING, "health", r)
        hch = channel(r.ports["epp_health"])  # epp.health_port: the probes' listener, the same services
        check(health(hch, "inference-extension") == hs.SERVING and health(hch, "liveness") == hs.SERVING,
              "health on epp.health_port", r)
        hch.close()
        s = Stream(ch)
        request(s)
        eps, pre, a = picked(s, r)
        check(sorted(eps) == sorted(ep(d) for d in ds), "endpoints %r (decodes %r)" % (eps, [ep(d) for d in ds]), r)
        check(pre in [ep(p) for p in ps], "prefill header %r" % pre, r)
        clen = set_headers(a.request_headers.response).get("content-length")
        check(clen == str(len(BODY)).encode(), "content-length %r" % clen, r)
        body_back(s, r)
        first = [d for d in ds if ep(d) == eps[0]][0]
        wid = [w["id"] for w in admin(r, "GET", "/admin/v1/workers")["workers"] if w["url"].endswith(":%d" % first.port)][0]
        check(inflight(r, wid) == 1, "the picked decode is not in flight", r)
        respond(s, r, eps[0])
        s.close()
        pdtest.poll_until(lambda: inflight(r, wid) == 0, 5, "the decode's in-flight count to drop")
        m = metrics(r)
        check(metric_value(m, "pdr_epp_requests_total", outcome="picked") == 1, "picked not counted", r)
        check(metric_value(m, "pdr_epp_served_total", endpoint="first") == 1, "served not counted", r)
        check((metric_value(m, "pdr_epp_pick_seconds_count") or 0) == 1, "pick latency not observed", r)
        ch.close()
    finally:
        pdtest.stop_all()


def scenario_drain():
    ps, ds = [sim("prefill")], [sim("decode"), sim("decode")]
    try:
        r = epp_router(ps, ds)
        ch = channel(r.ports["epp"])
        hs = pb()["health"].HealthCheckResponse
        pdtest.poll_until(lambda: health(ch, "readiness") == hs.SERVING, 10, "readiness")
        admin(r, "POST", "/admin/v1/workers/decode-0/drain", expect=202)
        d0 = admin(r, "GET", "/admin/v1/workers/decode-0")["url"].split("//")[1]
        for _ in range(8):
            s = Stream(ch)
            request(s)
            eps, _, _ = picked(s, r)
            check(d0 not in eps, "a draining decode was named: %r" % eps, r)
            body_back(s, r)
            s.close()
        admin(r, "POST", "/admin/v1/workers/decode-1/drain", expect=202)
        s = Stream(ch)
        request(s)
        err = immediate(s, r, 503)
        check("no healthy decode" in err["error"]["message"], repr(err), r)
        s.close()
        pdtest.poll_until(lambda: health(ch, "readiness") == hs.NOT_SERVING, 5, "readiness off")
        check(health(ch, "liveness") == hs.SERVING, "liveness with no decode", r)
        admin(r, "POST", "/admin/v1/workers/decode-1/activate")
        pdtest.poll_until(lambda: health(ch, "readiness") == hs.SERVING, 10, "readiness back")
        # The only prefill dies: once its checks fail, the answer is 503 at once.
        ps[0].stop(signal.SIGKILL)
        pdtest.poll_until(lambda: admin(r, "GET", "/admin/v1/workers/prefill-0")["state"] != "healthy", 10,
                          "the dead prefill to be seen")
        s = Stream(ch)
        request(s)
        err = immediate(s, r, 503)
        check("no healthy prefill" in err["error"]["message"], repr(err), r)
        s.close()
        m = metrics(r)
        check(metric_value(m, "pdr_epp_requests_total", outcome="no_prefill") == 1, "no_prefill", r)
        check(metric_value(m, "pdr_epp_requests_total", outcome="no_decode") == 1, "no_decode", r)
        ch.close()
    finally:
        pdtest.stop_all()


def scenario_subset():
    ps, ds = [sim("prefill")], [sim("decode"), sim("decode"), sim("decode")]
    try:
        r = epp_router(ps, ds)
        ch = channel(r.ports["epp"])
        for _ in range(6):
            s = Stream(ch)
            request(s, subset=[ep(ds[2]), "10.9.9.9:1"])
            eps, _, _ = picked(s, r)
            check(eps == [ep(ds[2])], "outside the subset: %r" % eps, r)
            body_back(s, r)
            s.close()
        s = Stream(ch)
        request(s, subset=["10.9.9.9:1"])
        err = immediate(s, r, 503)
        check("subset" in err["error"]["message"], repr(err), r)
        s.close()
        ch.close()
    finally:
        pdtest.stop_all()


def scenario_admission():
    ps, ds = [sim("prefill")], [sim("decode")]
    try:
        r = epp_router(ps, ds, "limits: { max_inflight: 1, queue: 1, queue_timeout_ms: 20000 }")
        ch = channel(r.ports["epp"])
        a = Stream(ch)
        request(a)
        picked(a, r)
        body_back(a, r)
        b = Stream(ch)
        request(b)
        # b waits in the queue before c is sent (streams of one connection may arrive in any order).
        pdtest.poll_until(lambda: metric_value(metrics(r), "pdr_queue_depth") == 1, 5, "b queued")
        c = Stream(ch)
        request(c)
        err = immediate(c, r, 429)
        check("too many requests" in err["error"]["message"], repr(err), r)
        c.close()
        respond(a, r, ep(ds[0]))
        a.close()
        picked(b, r)  # its slot handed over when a's response ended
        body_back(b, r)
        b.close()
        m = metrics(r)
        check(metric_value(m, "pdr_epp_requests_total", outcome="shed") == 1, "429 not counted", r)
        check(metric_value(m, "pdr_epp_requests_total", outcome="picked") == 2, "picks", r)
        ch.close()
    finally:
        pdtest.stop_all()


def scenario_bad():
    ps, ds = [sim("prefill")], [sim("decode")]
    try:
        r = epp_router(ps, ds, "limits: { max_body_bytes: 4096 }")
        ch = channel(r.ports["epp"])
        s = Stream(ch)
        request(s, body=b'{"prompt": "unterminated')
        err = immediate(s, r, 400)
        check(err["error"]["type"] == "invalid_request_error", repr(err), r)
        s.close()
        s = Stream(ch)
        request(s, body=json.dumps({"prompt": "x" * 8000}).encode(), chunks=4)
        err = immediate(s, r, 413)
        check("max_body_bytes" in err["error"]["message"], repr(err), r)
        s.close()
        m = metrics(r)
        check(metric_value(m, "pdr_epp_requests_total", outcome="bad_request") == 1, "400 not counted", r)
        check(metric_value(m, "pdr_epp_requests_total", outcome="too_large") == 1, "413 not counted", r)
        check(stats(ds[0])["requests"] == 0, "a refused request reached a worker", r)
        ch.close()
    finally:
        pdtest.stop_all()


def through_gateway(ch, r, body, path="/v1/completions"):
    """One client request along the gateway's path: the picker's pick, the request sent to the endpoint it
    named with its header mutation applied (as Envoy forwards it), the response fed back to the picker.
    Returns (status, body, endpoint, prefill header value)."""
    raw = json.dumps(body).encode()
    s = Stream(ch)
    request(s, body=raw, path=path)
    a = s.recv()
    if a.WhichOneof("response") == "immediate_response":
        s.close()
        return a.immediate_response.status.code, a.immediate_response.body, None, None
    sh = set_headers(a.request_headers.response)
    dest, pre = sh[DEST].decode().split(",")[0], sh.get("x-prefiller-host-port", b"").decode()
    body_back(s, r, raw)
    host, port = dest.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=20)
    conn.request("POST", path, body=raw, headers={"Content-Type": "application/json", "x-prefiller-host-port": pre})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    e = pb()["ep"]
    s.send(response_headers=e.HttpHeaders(headers=headers(**{":status": str(resp.status)})),
           metadata_context=metadata("envoy.lb", "x-gateway-destination-endpoint-served", dest))
    s.recv()
    s.send(response_body=e.HttpBody(body=data, end_of_stream=True))
    s.recv()
    s.close()
    return resp.status, data, dest, pre


def scenario_e2e():
    ps = [sim("prefill"), sim("prefill")]
    ds = [sim("decode", "--decode-us-per-token", "20000"), sim("decode", "--decode-us-per-token", "20000")]
    try:
        pods = [router(ps, [d], "--sidecar", "--prefill-policy", "round_robin", "--health-interval-ms", "100")
                for d in ds]
        r = epp_router(ps, pods)  # the decode pods' endpoints are their sidecars
        front = router(ps, ds)    # pdrouter's own front door over the same workers, for the answers
        ch = channel(r.ports["epp"])
        hs = pb()["health"].HealthCheckResponse
        pdtest.poll_until(lambda: health(ch, "readiness") == hs.SERVING, 10, "readiness")
        route = "/v1/completions"
        for stream in (False, True):
            body = dict(BODIES[route], stream=stream)
            before = [stats(p)["requests"] for p in ps] + [stats(d)["requests"] for d in ds]
            st, data, dest, pre = through_gateway(ch, r, body)
            check(st == 200, "through the gateway: %d %r" % (st, data[:300]), r, *pods)
            after = [stats(p)["requests"] for p in ps] + [stats(d)["requests"] for d in ds]
            grew = [i for i in range(4) if after[i] > before[i]]
            named = [i for i, p in enumerate(ps) if ep(p) == pre]
            pod = [i for i, x in enumerate(pods) if ep(x) == dest]
            check(len(named) == 1 and len(pod) == 1 and grew == [named[0], 2 + pod[0]],
                  "workers that served: %r (prefill named %s, pod %s)" % (grew, pre, dest), r)
            st2, _, ref = pdtest.request(front.port, "POST", route, body)
            check(st2 == 200 and texts(route, body, data, stream) == texts(route, body, ref, stream),
                  "the gateway's answer differs from the front door's: %r vs %r" % (data[:200], ref[:200]), r)
            if stream:
                check(pdtest.sse_events(data)[-1] == "[DONE]", "the stream did not end with [DONE]", r)
        # Drain: a stream in flight on one pod, the pod drained at the picker: it completes whole, and
        # new picks go to the other pod.
        out = {}
        body = dict(BODIES[route], stream=True, max_tokens=25)
        t = threading.Thread(target=lambda: out.update(res=through_gateway(ch, r, body)))
        t.start()
        pdtest.poll_until(lambda: sum(stats(d)["inflight"] for d in ds) == 1, 5, "the stream to start")
        busy = [i for i, d in enumerate(ds) if stats(d)["inflight"] == 1][0]
        wid = "decode-%d" % busy
        admin(r, "POST", "/admin/v1/workers/%s/drain" % wid, expect=202)
        for _ in range(3):
            st, _, dest, _ = through_gateway(ch, r, dict(BODIES[route], max_tokens=2))
            check(st == 200 and dest == ep(pods[1 - busy]), "a pick went to the draining pod: %s" % dest, r)
        t.join(20)
        st, data, _, _ = out["res"]
        evs = pdtest.sse_events(data)
        check(st == 200 and evs[-1] == "[DONE]" and len(texts(route, body, data, True)) > 0,
              "the stream on the drained pod was cut: %d %r" % (st, data[-200:]), r)
        pdtest.poll_until(lambda: admin(r, "GET", "/admin/v1/workers/" + wid)["state"] == "drained", 5, "drained")
        # Every prefill dies: the client has its 503 within 1 s.
        for p in ps:
            p.stop(signal.SIGKILL)
        t0 = time.monotonic()
        st, data, _, _ = through_gateway(ch, r, dict(BODIES[route]))
        took = time.monotonic() - t0
        check(st == 503 and took < 1.0, "with the prefills dead: %d after %.2f s: %r" % (st, took, data[:200]), r)
        ch.close()
    finally:
        pdtest.stop_all()


def scenario_restart():
    import grpc
    ps, ds = [sim("prefill")], [sim("decode")]
    try:
        r = epp_router(ps, ds)
        ports = (r.ports["epp"], r.ports["epp_health"])
        ch = channel(ports[0])
        s = Stream(ch)
        e = pb()["ep"]
        mode = e.ProtocolConfiguration(request_body_mode=e.FULL_DUPLEX_STREAMED)
        s.send(request_headers=e.HttpHeaders(headers=headers(**{":method": "POST", ":path": "/v1/completions"}),
                                             end_of_stream=False), protocol_config=mode)
        pdtest.poll_until(lambda: metric_value(metrics(r), "pdr_epp_streams_open") == 1, 5, "the stream to open")
        check(r.stop(signal.SIGTERM) == 0, "the picker did not exit cleanly", r)
        try:
            s.recv()
            check(False, "the open stream got an answer from a picker that stopped", r)
        except grpc.RpcError as err:
            check(err.code() == grpc.StatusCode.UNAVAILABLE, "the open stream ended %s" % err.code(), r)
        r = epp_router(ps, ds, ports=ports)
        # The gateway's retry on the same channel, once gRPC has reconnected to the same address.
        grpc.channel_ready_future(ch).result(timeout=10)
        s = Stream(ch)
        request(s)
        eps, pre, _ = picked(s, r)
        check(eps == [ep(ds[0])] and pre == ep(ps[0]), "the retried pick: %r %r" % (eps, pre), r)
        body_back(s, r)
        s.close()
        ch.close()
    finally:
        pdtest.stop_all()


if __name__ == "__main__":
    pdtest.run_scenario(globals())
