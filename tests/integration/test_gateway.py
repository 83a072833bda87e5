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
"""
import json
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check  # noqa: E402
from test_epp import DEST, EXT, CHECK, Stream, headers, metadata, pb, set_headers  # noqa: E402
from test_router import metric_value, metrics, router, sim, stats  # noqa: E402
from test_admin import admin  # noqa: E402

BODY = json.dumps({"model": "pdsim", "prompt": "The endpoint picker names the decode", "max_tokens": 4}).encode()


def channel(port):
    import grpc
    ch = grpc.insecure_channel("127.0.0.1:%d" % port, options=[("grpc.use_local_subchannel_pool", 1)])
    grpc.channel_ready_future(ch).result(timeout=10)
    return ch


def epp_router(ps, ds, extra=""):
    port, hport = pdtest.free_port(), pdtest.free_port()
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
        c = Stream(ch)
        request(c)
        err = immediate(c, r, 429)
        check("too many requests" in err["error"]["message"], repr(err), r)
        c.close()
        pdtest.poll_until(lambda: metric_value(metrics(r), "pdr_queue_depth") == 1, 5, "b queued")
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


if __name__ == "__main__":
    pdtest.run_scenario(globals())
