#!/usr/bin/env python3
"""The endpoint picker's gRPC server (router/epp/) with the test picker (epp_testpicker.c), against a
gateway played here with Debian's python3-grpcio. The messages are router/epp/proto/*.proto, compiled at
test time with python3-grpc-tools into a temporary directory; the dynamic metadata is read back as the
well-known google.protobuf.Struct too, which shows the project's own copy of those types is the same on
the wire.

    /usr/bin/python3 test_epp.py SCENARIO     (PDR_BUILD=<build dir>)

Scenarios:
  health          Health/Check: liveness, readiness and the ext_proc service SERVING; an unknown service
                  SERVICE_UNKNOWN; a picker started not ready answers NOT_SERVING for readiness and the
                  ext_proc service, SERVING for liveness; one that set nothing NOT_SERVING for all three
  pick            FULL_DUPLEX_STREAMED: request headers, two body chunks, the last with end_of_stream: the
                  headers' answer sets x-gateway-destination-endpoint (and content-length), clears the
                  route cache and carries {"envoy.lb": {"x-gateway-destination-endpoint": ...}}; the body
                  comes back whole in one streamed body mutation; the response's headers and body are
                  answered as they arrive on the same stream; the gateway's half-close ends it OK
  buffered        BUFFERED: the headers are continued at once (no mutation), and the body's answer carries
                  the pick (header, metadata), the body left unchanged
  bodyless        request headers with end_of_stream: picked at once, no content-length set
  subset          the gateway's subset hint (metadata_context envoy.lb.subset_hint): the pick keeps only
                  the endpoints it names, 503 when none or an empty list is left; the served endpoint the
                  gateway reports in the response phase (envoy.lb x-gateway-destination-endpoint-served)
                  reaches the picker
  unavailable     a picker told 503 answers an ImmediateResponse 503 (and one told 429, 429)
  unknown_method  an unknown method, and Health/Watch, end UNIMPLEMENTED naming the path
  not_grpc        a POST of another content-type and a GET are answered HTTP 415 (curl, prior knowledge);
                  an HTTP/1.1 request, which lacks the HTTP/2 preface, gets the connection closed and is
                  counted as a protocol error
  malformed       bytes that are not a ProcessingRequest, one with no part, and a bad HealthCheckRequest end
                  INVALID_ARGUMENT saying "malformed"; the server counts them
  too_big         a message over --max-message ends RESOURCE_EXHAUSTED
  idle            a connection with no stream is closed after --idle-ms (the client sees its channel go idle)
  conn_limit      past --max-connections a new connection is closed at once
  stream_limit    with --max-streams 2, a third stream on the connection waits (no answer while two are
                  open; the client queues it under SETTINGS_MAX_CONCURRENT_STREAMS) and runs once one ends
  shutdown        SIGTERM ends an open stream UNAVAILABLE and the picker exits 0 with no handle left
"""
import atexit
import json
import os
import queue
import shutil
import signal
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PROTO_DIR = os.path.join(ROOT, "router", "epp", "proto")
ENDPOINTS = "10.0.0.1:8000,10.0.0.2:8000"
EXT = "envoy.service.ext_proc.v3.ExternalProcessor"
PROCESS = "/envoy.service.ext_proc.v3.ExternalProcessor/Process"
CHECK = "/grpc.health.v1.Health/Check"
DEST = "x-gateway-destination-endpoint"

_pb = {}


def pb():
    """The compiled messages: {"ep": ext_proc_pb2, "core": envoy_core_pb2, "health": health_pb2,
    "wkt": epp_struct_pb2}."""
    if not _pb:
        from grpc_tools import protoc
        out = tempfile.mkdtemp(prefix="pdtest-epp-pb-")
        atexit.register(shutil.rmtree, out, True)
        files = sorted(f for f in os.listdir(PROTO_DIR) if f.endswith(".proto"))
        rc = protoc.main(["protoc", "-I" + PROTO_DIR, "--python_out=" + out] + files)
        assert rc == 0, "protoc failed on %s" % PROTO_DIR
        sys.path.insert(0, out)
        import envoy_core_pb2
        import epp_struct_pb2
        import ext_proc_pb2
        import health_pb2
        _pb.update(ep=ext_proc_pb2, core=envoy_core_pb2, health=health_pb2, wkt=epp_struct_pb2)
    return _pb


def picker(*args):
    """Starts epp_testpicker on a free port and waits until it listens."""
    p = pdtest.start(["epp_testpicker", "--port", "{port}", "--endpoints", ENDPOINTS] + list(args),
                     health_path=None)

    def listening():
        check(p.alive(), "epp_testpicker exited during start", p)
        return "listening on %d" % p.port in p.log_tail()

    pdtest.poll_until(listening, 10, "epp_testpicker to listen")
    return p


def channel(p, **opts):
    import grpc
    options = [("grpc.use_local_subchannel_pool", 1)] + list(opts.items())
    ch = grpc.insecure_channel("127.0.0.1:%d" % p.port, options=options)
    grpc.channel_ready_future(ch).result(timeout=10)
    return ch


def stats(p):
    """Stops the picker with SIGTERM (it must exit 0: every handle closed) and returns its counters."""
    rc = p.stop(signal.SIGTERM)
    check(rc == 0, "epp_testpicker exited %s" % rc, p)
    lines = [line for line in p.log_tail(200).splitlines() if line.startswith("{")]
    check(lines, "no counters printed", p)
    return json.loads(lines[-1])


def headers(**kv):
    core = pb()["core"]
    return core.HeaderMap(headers=[core.HeaderValue(key=k.replace("_", "-"), raw_value=v.encode())
                                   for k, v in kv.items()])


class Stream:
    """A Process stream the test feeds one message at a time, reading the answers as they come."""

    def __init__(self, ch):
        ep = pb()["ep"]
        self.q = queue.Queue()
        fn = ch.stream_stream(PROCESS, request_serializer=ep.ProcessingRequest.SerializeToString,
                              response_deserializer=ep.ProcessingResponse.FromString)
        self.call = fn(iter(self.q.get, None), timeout=20)

    def send(self, **kw):
        self.q.put(pb()["ep"].ProcessingRequest(**kw))

    def recv(self):
        return next(self.call)

    def close(self):
        self.q.put(None)
        rest = list(self.call)
        return rest, self.call.code()


def streamed_request(s, body_chunks, end_on_headers=False):
    ep = pb()["ep"]
    mode = ep.ProtocolConfiguration(request_body_mode=ep.FULL_DUPLEX_STREAMED,
                                    response_body_mode=ep.FULL_DUPLEX_STREAMED)
    s.send(request_headers=ep.HttpHeaders(headers=headers(**{":method": "POST", ":path": "/v1/completions"}),
                                          end_of_stream=end_on_headers), protocol_config=mode)
    for i, c in enumerate(body_chunks):
        s.send(request_body=ep.HttpBody(body=c, end_of_stream=i == len(body_chunks) - 1))


def set_headers(common):
    return {o.header.key: o.header.raw_value for o in common.header_mutation.set_headers}


def check_pick(r, p):
    from google.protobuf import json_format, struct_pb2
    check(r.WhichOneof("response") == "request_headers", "not a headers answer: %s" % r, p)
    common = r.request_headers.response
    sh = set_headers(common)
    check(sh.get(DEST) == ENDPOINTS.encode(), "destination header: %r" % sh, p)
    check(common.clear_route_cache, "route cache not cleared", p)
    opts = {o.header.key: o for o in common.header_mutation.set_headers}
    core = pb()["core"]
    check(opts[DEST].append_action == core.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD, str(opts[DEST]), p)
    # The metadata read as the well-known Struct: the same bytes on the wire.
    md = struct_pb2.Struct.FromString(r.dynamic_metadata.SerializeToString())
    want = {"envoy.lb": {DEST: ENDPOINTS}}
    check(json_format.MessageToDict(md) == want, "dynamic metadata: %s" % json_format.MessageToDict(md), p)
    return sh


def scenario_health():
    health = pb()["health"]
    serving = health.HealthCheckResponse.SERVING
    for ready in (True, False):
        p = picker(*(() if ready else ("--not-ready",)))
        ch = channel(p)
        fn = ch.unary_unary(CHECK, request_serializer=health.HealthCheckRequest.SerializeToString,
                            response_deserializer=health.HealthCheckResponse.FromString)
        for svc in ("liveness", "readiness", EXT):
            r = fn(health.HealthCheckRequest(service=svc), timeout=5)
            want = serving if ready or svc == "liveness" else health.HealthCheckResponse.NOT_SERVING
            check(r.status == want, "%s (ready %s): %s" % (svc, ready, r.status), p)
        r = fn(health.HealthCheckRequest(service="nosuch"), timeout=5)
        check(r.status == health.HealthCheckResponse.SERVICE_UNKNOWN, "unknown service: %s" % r.status, p)
        ch.close()
        st = stats(p)
        check(st["calls"] == 4, "calls counted: %s" % st, p)
    # Nothing set: the three services exist, not serving.
    p = picker("--no-health")
    ch = channel(p)
    fn = ch.unary_unary(CHECK, request_serializer=health.HealthCheckRequest.SerializeToString,
                        response_deserializer=health.HealthCheckResponse.FromString)
    for svc in ("liveness", "readiness", EXT):
        r = fn(health.HealthCheckRequest(service=svc), timeout=5)
        check(r.status == health.HealthCheckResponse.NOT_SERVING, "%s at start: %s" % (svc, r.status), p)
    ch.close()
    stats(p)


def scenario_pick():
    import grpc
    ep = pb()["ep"]
    p = picker()
    ch = channel(p)
    s = Stream(ch)
    chunks = [b'{"model": "m", "prompt": "', b'hello"}']
    streamed_request(s, chunks)
    r1 = s.recv()
    sh = check_pick(r1, p)
    check(sh.get("content-length") == str(len(b"".join(chunks))).encode(), "content-length: %r" % sh, p)
    r2 = s.recv()
    check(r2.WhichOneof("response") == "request_body", "second answer: %s" % r2, p)
    sb = r2.request_body.response.body_mutation.streamed_response
    check(sb.body == b"".join(chunks) and sb.end_of_stream, "body given back: %s" % sb, p)
    # The response phase on the same stream: each message answered as it arrives.
    s.send(response_headers=ep.HttpHeaders(headers=headers(**{":status": "200"})))
    r3 = s.recv()
    check(r3.WhichOneof("response") == "response_headers", "response headers' answer: %s" % r3, p)
    s.send(response_body=ep.HttpBody(body=b"data: one\n\n"))
    r4 = s.recv()
    check(r4.response_body.response.body_mutation.streamed_response.body == b"data: one\n\n", str(r4), p)
    s.send(response_body=ep.HttpBody(body=b"data: two\n\n", end_of_stream=True))
    r5 = s.recv()
    sb = r5.response_body.response.body_mutation.streamed_response
    check(sb.body == b"data: two\n\n" and sb.end_of_stream, str(r5), p)
    rest, code = s.close()
    check(rest == [] and code == grpc.StatusCode.OK, "end of stream: %s %s" % (rest, code), p)
    ch.close()
    st = stats(p)
    check(st["streams"] == 1 and st["messages"] == 6 and st["malformed"] == 0, "counters: %s" % st, p)


def scenario_buffered():
    ep = pb()["ep"]
    p = picker()
    ch = channel(p)
    s = Stream(ch)
    mode = ep.ProtocolConfiguration(request_body_mode=ep.BUFFERED)
    s.send(request_headers=ep.HttpHeaders(headers=headers(**{":path": "/v1/completions"})), protocol_config=mode)
    r1 = s.recv()
    check(r1.WhichOneof("response") == "request_headers", "headers' answer: %s" % r1, p)
    check(not r1.request_headers.response.HasField("header_mutation") and not r1.HasField("dynamic_metadata"),
          "the headers were answered with more than a continue: %s" % r1, p)
    s.send(request_body=ep.HttpBody(body=b'{"model": "m"}', end_of_stream=True))
    r2 = s.recv()
    check(r2.WhichOneof("response") == "request_body", "body's answer: %s" % r2, p)
    common = r2.request_body.response
    check(set_headers(common).get(DEST) == ENDPOINTS.encode() and common.clear_route_cache, str(r2), p)
    check(not common.HasField("body_mutation"), "the body was changed: %s" % r2, p)
    from google.protobuf import json_format, struct_pb2
    md = json_format.MessageToDict(struct_pb2.Struct.FromString(r2.dynamic_metadata.SerializeToString()))
    check(md == {"envoy.lb": {DEST: ENDPOINTS}}, "dynamic metadata: %s" % md, p)
    s.close()
    ch.close()
    stats(p)


def scenario_bodyless():
    p = picker()
    ch = channel(p)
    s = Stream(ch)
    streamed_request(s, [], end_on_headers=True)
    sh = check_pick(s.recv(), p)
    check("content-length" not in sh, "content-length set without a body: %r" % sh, p)
    s.close()
    ch.close()
    st = stats(p)
    check(st["streams"] == 1 and st["messages"] == 1, "counters: %s" % st, p)


def metadata(ns, key, value):
    """A Metadata {ns: {key: value}}, value a string or a list of strings. The Struct is built as the
    well-known google.protobuf.Struct and read into the project's own copy from its bytes: the two agree
    on the wire (Struct, Value's string and list kinds, ListValue)."""
    from google.protobuf import json_format, struct_pb2
    real = struct_pb2.Struct()
    json_format.ParseDict({key: value}, real)
    md = pb()["core"].Metadata()
    md.filter_metadata[ns].MergeFromString(real.SerializeToString())
    return md


def scenario_subset():
    ep = pb()["ep"]
    p = picker()
    ch = channel(p)
    subset_ns, subset_key = "envoy.lb.subset_hint", "x-gateway-destination-endpoint-subset"
    for subset, want in ((["10.9.9.9:1", "10.0.0.2:8000"], "10.0.0.2:8000"), (["10.9.9.9:1"], None), ([], None)):
        s = Stream(ch)
        s.send(request_headers=ep.HttpHeaders(headers=headers(**{":path": "/v1/completions"}), end_of_stream=True),
               metadata_context=metadata(subset_ns, subset_key, subset))
        r = s.recv()
        if want is None:
            check(r.WhichOneof("response") == "immediate_response" and r.immediate_response.status.code == 503,
                  "subset %s: %s" % (subset, r), p)
        else:
            sh = set_headers(r.request_headers.response)
            check(sh.get(DEST) == want.encode(), "subset %s: %r" % (subset, sh), p)
        s.close()
    s = Stream(ch)
    s.send(response_headers=ep.HttpHeaders(headers=headers(**{":status": "200"})),
           metadata_context=metadata("envoy.lb", "x-gateway-destination-endpoint-served", "10.0.0.2:8000"))
    check(s.recv().WhichOneof("response") == "response_headers", "served: no answer", p)
    s.close()
    pdtest.poll_until(lambda: "served 10.0.0.2:8000" in p.log_tail(), 10, "the picker to see the served endpoint")
    ch.close()
    stats(p)


def scenario_unavailable():
    for status in (503, 429):
        p = picker("--status", str(status))
        ch = channel(p)
        s = Stream(ch)
        streamed_request(s, [b"{}"])
        r = s.recv()
        check(r.WhichOneof("response") == "immediate_response", "not an ImmediateResponse: %s" % r, p)
        check(r.immediate_response.status.code == status, "status %s" % r.immediate_response.status.code, p)
        s.close()
        ch.close()
        stats(p)


def expect_error(fn, arg, code, text, p):
    import grpc
    try:
        fn(arg, timeout=5)
    except grpc.RpcError as e:
        check(e.code() == code, "code %s, wanted %s: %s" % (e.code(), code, e.details()), p)
        check(text in (e.details() or ""), "details %r lack %r" % (e.details(), text), p)
        return
    raise AssertionError("no error; wanted %s" % code)


def identity(b):
    return b


def scenario_unknown_method():
    import grpc
    p = picker()
    ch = channel(p)
    for path in ("/envoy.service.ext_proc.v3.ExternalProcessor/Nope", "/grpc.health.v1.Health/Watch"):
        fn = ch.unary_unary(path, request_serializer=identity, response_deserializer=identity)
        expect_error(fn, b"", grpc.StatusCode.UNIMPLEMENTED, path, p)
    ch.close()
    st = stats(p)
    check(st["unimplemented"] == 2, "counters: %s" % st, p)


def scenario_not_grpc():
    import subprocess
    p = picker()
    url = "http://127.0.0.1:%d/grpc.health.v1.Health/Check" % p.port
    for args in (["-X", "POST", "-H", "content-type: application/json", "--data", "{}"], []):
        r = subprocess.run(["curl", "-s", "--http2-prior-knowledge", "-o", "/dev/null", "-D", "-", "--max-time", "5"]
                           + args + [url], capture_output=True, text=True)
        head = r.stdout.lower()
        check(head.startswith("http/2 415") and "grpc-status: 13" in head, "%s: %r" % (args, r.stdout), p)
    r = subprocess.run(["curl", "-s", "--http1.1", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "5", url],
                       capture_output=True, text=True)
    check(r.stdout == "000", "an HTTP/1.1 request was answered: %r" % r.stdout, p)
    st = stats(p)
    check(st["invalid"] == 2 and st["protocol_errors"] == 1, "counters: %s" % st, p)


def scenario_malformed():
    import grpc
    p = picker()
    ch = channel(p)
    # A length-delimited field whose length runs past the message's end.
    bad = b"\x12\xff\xff\xff\x0f\x01"
    proc = ch.stream_stream(PROCESS, request_serializer=identity, response_deserializer=identity)
    expect_error(lambda m, timeout: list(proc(iter([m]), timeout=timeout)), bad, grpc.StatusCode.INVALID_ARGUMENT,
                 "malformed ProcessingRequest", p)
    # A ProcessingRequest with none of its six parts.
    empty = pb()["ep"].ProcessingRequest(observability_mode=False).SerializeToString()
    expect_error(lambda m, timeout: list(proc(iter([m]), timeout=timeout)), empty,
                 grpc.StatusCode.INVALID_ARGUMENT, "carries no headers", p)
    hc = ch.unary_unary(CHECK, request_serializer=identity, response_deserializer=identity)
    expect_error(hc, bad, grpc.StatusCode.INVALID_ARGUMENT, "malformed HealthCheckRequest", p)
    ch.close()
    st = stats(p)
    check(st["malformed"] == 3, "counters: %s" % st, p)


def scenario_too_big():
    import grpc
    ep = pb()["ep"]
    p = picker("--max-message", "1024")
    ch = channel(p)
    proc = ch.stream_stream(PROCESS, request_serializer=ep.ProcessingRequest.SerializeToString,
                            response_deserializer=ep.ProcessingResponse.FromString)
    big = ep.ProcessingRequest(request_body=ep.HttpBody(body=b"x" * 4096, end_of_stream=True))
    expect_error(lambda m, timeout: list(proc(iter([m]), timeout=timeout)), big,
                 grpc.StatusCode.RESOURCE_EXHAUSTED, "over the ceiling of 1024", p)
    ch.close()
    st = stats(p)
    check(st["too_big"] == 1, "counters: %s" % st, p)


def scenario_idle():
    import grpc
    p = picker("--idle-ms", "300")
    ch = channel(p)
    states = []
    ch.subscribe(states.append, try_to_connect=False)
    pdtest.poll_until(lambda: states and states[-1] == grpc.ChannelConnectivity.IDLE, 10,
                      "the channel to go idle after the server's GOAWAY")
    ch.close()
    st = stats(p)
    check(st["idle_closed"] == 1, "counters: %s" % st, p)


def scenario_conn_limit():
    import grpc
    p = picker("--max-connections", "1")
    first = channel(p)
    health = pb()["health"]
    second = grpc.insecure_channel("127.0.0.1:%d" % p.port, options=[("grpc.use_local_subchannel_pool", 1)])
    fn = second.unary_unary(CHECK, request_serializer=health.HealthCheckRequest.SerializeToString,
                            response_deserializer=health.HealthCheckResponse.FromString)
    expect_error(fn, health.HealthCheckRequest(service="liveness"), grpc.StatusCode.UNAVAILABLE, "", p)
    ok = first.unary_unary(CHECK, request_serializer=health.HealthCheckRequest.SerializeToString,
                           response_deserializer=health.HealthCheckResponse.FromString)
    check(ok(health.HealthCheckRequest(service="liveness"), timeout=5).status == 1, "first channel", p)
    second.close()
    first.close()
    st = stats(p)
    check(st["refused_connections"] >= 1 and st["connections"] == 1, "counters: %s" % st, p)


def scenario_stream_limit():
    import grpc
    ep = pb()["ep"]
    p = picker("--max-streams", "2")
    ch = channel(p)
    held = []
    for _ in range(2):
        s = Stream(ch)
        s.send(response_headers=ep.HttpHeaders(headers=headers(**{":status": "200"})))
        check(s.recv().WhichOneof("response") == "response_headers", "a held stream's answer", p)
        held.append(s)
    fn = ch.stream_stream(PROCESS, request_serializer=ep.ProcessingRequest.SerializeToString,
                          response_deserializer=ep.ProcessingResponse.FromString)
    third = fn(iter([ep.ProcessingRequest(response_headers=ep.HttpHeaders())]), timeout=1.0)
    try:
        list(third)
        raise AssertionError("a third stream was answered while two were open")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.DEADLINE_EXCEEDED, "third stream: %s %s" % (e.code(), e.details()), p)
    rest, code = held.pop().close()
    check(code == grpc.StatusCode.OK, "closing a held stream: %s" % code, p)
    s = Stream(ch)
    s.send(response_headers=ep.HttpHeaders(headers=headers(**{":status": "200"})))
    check(s.recv().WhichOneof("response") == "response_headers", "a stream after one ended", p)
    s.close()
    held.pop().close()
    ch.close()
    stats(p)


def scenario_shutdown():
    import grpc
    ep = pb()["ep"]
    p = picker()
    ch = channel(p)
    s = Stream(ch)
    # An answered message shows the stream is open on the server before the signal.
    s.send(response_headers=ep.HttpHeaders(headers=headers(**{":status": "200"})))
    check(s.recv().WhichOneof("response") == "response_headers", "first answer", p)
    p.proc.send_signal(signal.SIGTERM)
    try:
        s.recv()
        raise AssertionError("the stream went on after SIGTERM")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.UNAVAILABLE and "shutting down" in e.details(),
              "%s %s" % (e.code(), e.details()), p)
    check(p.wait_exit(10) == 0, "epp_testpicker did not exit 0 (a handle left open?)", p)
    ch.close()


if __name__ == "__main__":
    pdtest.run_scenario(globals())
