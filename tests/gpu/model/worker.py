#!/usr/bin/env python3
"""An inference worker that speaks the sglang worker API in front of the Llama-style model of llama.py,
with its KV cache moved between processes by libpdshim (worker-shim/python/pdshim.py).

    worker.py --mode prefill --port 30001 --bootstrap-port 8998 [--backend tcp|cuda_ipc|auto]
              [--stream-layers] [--device cuda:0] [--config 1b]
    worker.py --mode decode  --port 30002 [--backend ...] [--device cuda:0] [--config 1b]
    worker.py --mode both    --port 30003                      (monolithic: no transfer)

Routes: POST /generate ({"input_ids": [...], "sampling_params": {"max_new_tokens": N}, "stream": bool,
"bootstrap_host", "bootstrap_port", "bootstrap_room"}), GET /health, /v1/models, /get_model_info,
/get_server_info, /get_load, POST /flush_cache, and GET /pdmodel/stats (per-room timing records).

- prefill: runs the prompt into a slot of its KV pool, then offers the room (every layer's K and V for
  the prompt's rows, then the first token id as an 8-byte segment) to the decode that fetches it, and
  answers once the decode has acknowledged every byte. With --stream-layers the room is opened with its
  total size and each layer's K, V is published as a part as soon as the layer is computed (a CUDA event
  recorded after the layer; a publisher thread waits for it and publishes the part while the compute
  thread goes on), so the transfer overlaps the remaining layers.
- decode: takes a slot, fetches the room from bootstrap_host:bootstrap_port into that slot's rows (the
  destination segments are the cache slices), reads the first token from the extra segment, and runs
  greedy decode steps, streaming tokens (SSE, "data: [DONE]") or answering one JSON object.
- both: prefill and decode in one process, the reference a disaggregated run must equal.

All device work of a process runs on one thread, one request's step at a time (a prefill, or one
decode step; requests in flight take turns), so results never depend on batching. There is no
tokenizer: the text is the output token ids written in decimal, separated by spaces, and the ids are in
"output_ids". Errors are answered in the OpenAI shape {"error": {"message", "type", "code"}}.
"""

import argparse
import collections
import json
import os
import socket
import sys
import threading
import time
import traceback
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# cuBLAS picks its workspace per stream; a fixed one keeps its kernel choice repeatable (set before CUDA starts).
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def find_pdshim_py():
    """worker-shim/python (where pdshim.py lives) from $PDSHIM_PY, else the source tree above."""
    for d in (os.environ.get("PDSHIM_PY"), os.path.join(HERE, "..", "..", "..", "worker-shim", "python")):
        if d and os.path.exists(os.path.join(d, "pdshim.py")):
            return os.path.abspath(d)
    return None


class Engine:
    """The one thread that runs device work. A task is a generator: each next() is one step (a prefill
    or one decode step); tasks in flight take turns, one step at a time."""

    def __init__(self, device):
        self.device = device
        self.tasks = collections.deque()
        self.cv = threading.Condition()
        self.t = threading.Thread(target=self._run, name="engine", daemon=True)
        self.t.start()

    def _run(self):
        import torch
        if self.device.startswith("cuda"):
            torch.cuda.set_device(torch.device(self.device))
        while True:
            with self.cv:
                while not self.tasks:
                    self.cv.wait()
                gen, fut = self.tasks.popleft()
            try:
                next(gen)
            except StopIteration as e:
                fut.set_result(e.value)
                continue
            except BaseException as e:  # reported to the request, the engine goes on
                traceback.print_exc()
                fut.set_exception(e)
                continue
            with self.cv:
                self.tasks.append((gen, fut))

    def submit(self, gen):
        """Queues a generator; returns a Future of its return value."""
        fut = Future()
        with self.cv:
            self.tasks.append((gen, fut))
            self.cv.notify()
        return fut

    def call(self, fn, *args):
        """Runs fn(*args) as a one-step task and returns its result (or raises)."""
        def one():
            return fn(*args)
            yield  # noqa: unreachable: makes this a generator
        return self.submit(one()).result()


class Slots:
    """The KV pool's slots: one per request in flight; a request waits for a free one."""

    def __init__(self, n):
        self.free = list(range(n))
        self.cv = threading.Condition()

    def acquire(self, timeout):
        with self.cv:
            if not self.cv.wait_for(lambda: self.free, timeout):
                return None
            return self.free.pop(0)

    def release(self, slot):
        with self.cv:
            self.free.append(slot)
            self.cv.notify()


class HttpError(Exception):
    def __init__(self, status, message, etype="invalid_request_error"):
        super().__init__(message)
        self.status, self.etype = status, etype


MAX_BODY = 64 << 20  # 8192 token ids are ~50 KiB of JSON


def error_body(status, message, etype):
    return json.dumps({"error": {"message": message, "type": etype, "code": status}}).encode()


class Worker:
    def __init__(self, a):
        import torch
        import llama
        self.a, self.torch = a, torch
        self.cfg = llama.CONFIGS[a.config]
        self.cuda = a.device.startswith("cuda")
        if self.cuda:
            if not torch.cuda.is_available():
                raise SystemExit("worker: --device %s but CUDA is not available" % a.device)
            torch.cuda.set_device(torch.device(a.device))
        t0 = time.monotonic()
        self.model = llama.Llama(self.cfg, device=a.device)
        self.pool = llama.KVPool(self.cfg, a.slots, a.max_len, a.device, self.model.dtype)
        if self.cuda:
            torch.cuda.synchronize()
        self.init_s = time.monotonic() - t0
        self.slots = Slots(a.slots)
        self.engine = Engine(a.device)
        self.records = collections.deque(maxlen=2000)
        self.rec_lock = threading.Lock()
        self.inflight = 0
        self.shim = None
        self.streamed = a.stream_layers
        if a.mode != "both":
            pdshim = self._import_pdshim()
            if a.stream_layers and not hasattr(pdshim.Shim, "offer_open"):
                raise SystemExit("worker: --stream-layers needs streamed offers (pdshim_offer_open / "
                                 "pdshim_offer_part, Shim.offer_open / Shim.offer_part), which this pdshim.py "
                                 "does not have; run without --stream-layers")
            backend = None if a.backend == "auto" else a.backend
            # With --events-url the shim reports each room's events (accepted, done with bytes, µs and
            # backend, failed with the reason) to the router, naming this worker by its URL.
            ev = {}
            if a.events_url:
                ev = {"events_url": a.events_url, "events_key_file": a.events_key_file,
                      "worker_url": "http://%s:%d" % (a.host, a.port)}
            if a.mode == "prefill":
                self.shim = pdshim.Shim(listen_host=a.host, listen_port=a.bootstrap_port,
                                        default_timeout_ms=a.kv_timeout_ms, backend=backend, **ev)
            else:
                self.shim = pdshim.Shim(default_timeout_ms=a.kv_timeout_ms, backend=backend, **ev)
            if self.cuda:
                for addr, length in self.pool.regions():
                    self.shim.register(addr, length, "cuda")

    def _import_pdshim(self):
        d = find_pdshim_py()
        if d is None:
            raise SystemExit("worker: pdshim.py not found (set PDSHIM_PY to worker-shim/python)")
        sys.path.insert(0, d)
        import pdshim
        pdshim.load_library()  # fails here, with the reason, when libpdshim.so is missing ($PDSHIM_LIB)
        return pdshim

    def record(self, rec):
        with self.rec_lock:
            self.records.append(rec)

    def digest(self, slot, n):
        """The room's digest (llama.KVPool.room_checksum); engine thread only. None with --no-checksum."""
        return None if self.a.no_checksum else self.pool.room_checksum(slot, n)

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    # ---- request parsing ----

    def parse(self, body):
        try:
            req = json.loads(body)
        except (ValueError, UnicodeDecodeError) as e:
            raise HttpError(400, "malformed JSON body: %s" % e)
        if not isinstance(req, dict):
            raise HttpError(400, "the body must be a JSON object")
        ids = req.get("input_ids")
        if ids is None:
            raise HttpError(400, "input_ids is required (this worker has no tokenizer)")
        if not isinstance(ids, list) or not ids:
            raise HttpError(400, "input_ids must be a non-empty list of token ids")
        if isinstance(ids[0], list):
            raise HttpError(400, "batch requests (a list of input_ids lists) are not supported by this worker")
        for t in ids:
            if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < self.cfg.vocab:
                raise HttpError(400, "input_ids must be integers in [0, %d)" % self.cfg.vocab)
        sp = req.get("sampling_params") or {}
        if not isinstance(sp, dict):
            raise HttpError(400, "sampling_params must be an object")
        mnt = sp.get("max_new_tokens", 16)
        if not isinstance(mnt, int) or isinstance(mnt, bool) or mnt < 0:
            raise HttpError(400, "sampling_params.max_new_tokens must be a non-negative integer")
        if len(ids) + max(mnt, 1) > self.a.max_len:
            raise HttpError(400, "prompt (%d tokens) + max_new_tokens (%d) exceed this worker's context of %d"
                            % (len(ids), mnt, self.a.max_len))
        stream = req.get("stream", False)
        if not isinstance(stream, bool):
            raise HttpError(400, "stream must be a boolean")
        out = {"ids": ids, "max_new": mnt, "stream": stream, "room": req.get("bootstrap_room"),
               "host": req.get("bootstrap_host"), "port": req.get("bootstrap_port")}
        if self.a.mode != "both":
            room = out["room"]
            if not isinstance(room, int) or isinstance(room, bool) or not 0 <= room < 2 ** 63:
                raise HttpError(400, "bootstrap_room is required: an integer in [0, 2^63-1]")
        if self.a.mode == "decode":
            if not isinstance(out["host"], str) or not out["host"]:
                raise HttpError(400, "bootstrap_host (string) is required on a decode")
            if not isinstance(out["port"], int) or isinstance(out["port"], bool) or not 0 < out["port"] < 65536:
                raise HttpError(400, "bootstrap_port (integer 1..65535) is required on a decode")
        return out

    def take_slot(self):
        slot = self.slots.acquire(self.a.queue_timeout_s)
        if slot is None:
            raise HttpError(503, "no free KV slot within %.0f s (%d slots)" % (self.a.queue_timeout_s, self.a.slots),
                            "overloaded")
        return slot

    # ---- the three roles; each returns (ids or None, record) or raises; tokens go to emit(list) ----

    def run_prefill(self, r, h):
        ids, n = r["ids"], len(r["ids"])
        rec = {"role": "prefill", "room": r["room"], "prompt_tokens": n, "t_arrive": time.time()}
        slot = self.take_slot()
        try:
            rec["queue_ms"] = (time.time() - rec["t_arrive"]) * 1e3
            kv = self.pool.room_bytes(n)
            rec["kv_bytes"] = kv
            if self.streamed:
                res = self._prefill_streamed(r, slot, rec)
            else:
                def compute():
                    t0 = time.monotonic()
                    first = self.model.prefill(ids, self.pool, slot)
                    self.sync()
                    ms = (time.monotonic() - t0) * 1e3
                    t1 = time.monotonic()
                    fut = self.shim.offer(r["room"], self.pool.segments(slot, n), self.a.kv_timeout_ms)
                    # The digest reads what the transfer reads, while it runs (in this step, so that it does not
                    # queue behind the next prompts).
                    rec["kv_sum"] = self.digest(slot, n)
                    return first, ms, t1, fut
                first, rec["prefill_ms"], t1, fut = self.engine.call(compute)
                rec["first_token"] = first
                res = self._wait(fut, h, r["room"])
                rec["offer_wall_ms"] = rec["kv_tail_ms"] = (time.monotonic() - t1) * 1e3
            rec.update(res)
            if res["status"] != "ok":
                raise HttpError(500 if res["status"] != "ETIMEDOUT" else 504,
                                "KV offer of room %d failed: %s" % (r["room"], res.get("error")), "kv_transfer_failed")
            return [], rec
        finally:
            self.slots.release(slot)
            self.record(rec)

    def _prefill_streamed(self, r, slot, rec):
        """Opens the room with its total and publishes each layer's K, V as a part once computed."""
        ids, n, room = r["ids"], len(r["ids"]), r["room"]
        total = self.pool.room_bytes(n)
        plan = self.pool.room_parts(slot, n)  # [(offset, segments)]: one per layer, then the first token
        fut = self.shim.offer_open(room, total, self.a.kv_timeout_ms)  # a Future of the bytes moved
        torch = self.torch
        parts = []
        # The compute thread only records an event once a layer's K, V writes are queued (before that
        # layer's attention and MLP) and goes on queueing kernels; this publisher thread waits for each
        # event in turn and publishes that layer's part, so the prefill's compute never stalls on the
        # device (a synchronize per layer on the compute thread cost ~8 ms of a 55 ms 8k-token prefill on
        # the H200) and the last layer's KV moves while that layer's attention and MLP run.
        import queue as _queue
        import threading as _threading
        q = _queue.Queue()
        failed = []

        def publisher():
            while True:
                item = q.get()
                if item is None:
                    return
                ev, i = item
                try:
                    if ev is not None:
                        ev.synchronize()
                    self.shim.offer_part(room, plan[i][0], plan[i][1])
                    parts.append(time.monotonic())
                except Exception as e:  # noqa: BLE001 (reported with the room's result)
                    failed.append(e)

        pub = _threading.Thread(target=publisher, name="pdmodel-publish", daemon=True)
        pub.start()

        def on_layer(i):
            ev = None
            if self.cuda:
                ev = torch.cuda.Event()
                ev.record()
            q.put((ev, i))

        def compute():
            t0 = time.monotonic()
            try:
                first = self.model.prefill(ids, self.pool, slot, on_layer=on_layer)
                self.sync()
            finally:
                q.put(None)
                pub.join()
            if failed:
                raise failed[0]
            self.shim.offer_part(room, plan[-1][0], plan[-1][1])
            t_end = time.monotonic()
            rec["kv_sum"] = self.digest(slot, n)
            return first, (t_end - t0) * 1e3, t0, t_end

        t1 = time.monotonic()
        first, rec["prefill_ms"], t0, t_end = self.engine.call(compute)
        rec["first_token"] = first
        rec["parts"] = len(parts) + 1
        rec["first_part_ms"] = (parts[0] - t0) * 1e3 if parts else None
        res = self._wait(fut, None, room)
        rec["offer_wall_ms"] = (time.monotonic() - t1) * 1e3
        rec["kv_tail_ms"] = (time.monotonic() - t_end) * 1e3  # compute end -> every byte acknowledged
        return res

    def run_decode(self, r, h, emit):
        n, room = len(r["ids"]), r["room"]
        rec = {"role": "decode", "room": room, "prompt_tokens": n, "t_arrive": time.time()}
        slot = self.take_slot()
        try:
            rec["queue_ms"] = (time.time() - rec["t_arrive"]) * 1e3
            host = r["host"].strip("[]")
            t1 = time.monotonic()
            fut = self.shim.fetch(host, r["port"], room, self.pool.segments(slot, n), self.a.kv_timeout_ms)
            res = self._wait(fut, h, room)
            rec["fetch_wall_ms"] = (time.monotonic() - t1) * 1e3
            rec.update(res)
            if res["status"] != "ok":
                print("decode: fetch of room %d from %s:%d failed: %s" % (room, host, r["port"], res.get("error")),
                      file=sys.stderr, flush=True)
                raise HttpError(504 if res["status"] == "ETIMEDOUT" else 503,
                                "KV fetch of room %d from %s:%d failed: %s" % (room, host, r["port"], res.get("error")),
                                "kv_transfer_failed")
            first = self.engine.call(lambda: int(self.pool.meta[slot, 0].item()))
            return self._decode_steps(r, slot, first, emit, rec, h), rec
        finally:
            self.slots.release(slot)
            self.record(rec)

    def run_both(self, r, h, emit):
        ids, n = r["ids"], len(r["ids"])
        rec = {"role": "both", "room": r["room"], "prompt_tokens": n, "t_arrive": time.time()}
        slot = self.take_slot()
        try:
            rec["queue_ms"] = (time.time() - rec["t_arrive"]) * 1e3
            if r["max_new"] == 0:
                return [], rec

            def compute():
                t0 = time.monotonic()
                first = self.model.prefill(ids, self.pool, slot)
                return first, (time.monotonic() - t0) * 1e3
            first, rec["prefill_ms"] = self.engine.call(compute)
            return self._decode_steps(r, slot, first, emit, rec, h), rec
        finally:
            self.slots.release(slot)
            self.record(rec)

    def _decode_steps(self, r, slot, first, emit, rec, h):
        n, max_new = len(r["ids"]), r["max_new"]
        if max_new == 0:
            return []
        out = [first]
        emit(out)

        def steps():
            while len(out) < max_new and not h.gone:
                out.append(self.model.decode_step(out[-1], n + len(out) - 1, self.pool, slot))
                emit(out)
                yield
            if self.a.mode == "decode":
                # Decode steps write rows n.. only: rows 0..n-1 and the token are still the received bytes.
                rec["kv_sum"] = self.digest(slot, n)
        t0 = time.monotonic()
        self.engine.submit(steps()).result()
        rec["decode_ms"] = (time.monotonic() - t0) * 1e3
        rec["output_tokens"] = len(out)
        if h.gone:
            raise HttpError(499, "client went away", "client_closed")
        return out

    def _wait(self, fut, h, room):
        """Waits for a shim Future; cancels the room when the HTTP client goes away. A dict result."""
        while True:
            try:
                v = fut.result(timeout=0.05)
                break
            except FutureTimeout:
                pass
            except Exception as e:
                return {"status": getattr(e, "name", type(e).__name__), "error": str(e),
                        "backend": getattr(fut, "backend", None), "xfer_us": getattr(fut, "usec", None)}
            if h is not None and h.peer_closed():
                h.gone = True
                try:
                    self.shim.cancel(room)
                except Exception:
                    pass
        return {"status": "ok", "bytes": v, "backend": getattr(fut, "backend", None),
                "xfer_us": getattr(fut, "usec", None)}


def gen_obj(ids, rec, n_prompt, final, max_new, extra=None):
    meta = {"id": "pdmodel-%s" % rec.get("room"), "prompt_tokens": n_prompt, "completion_tokens": len(ids),
            "finish_reason": {"type": "length", "length": len(ids)} if final else None}
    if final:
        meta["pdmodel"] = {k: v for k, v in rec.items() if k != "t_arrive"}
    o = {"text": " ".join(str(t) for t in ids), "output_ids": list(ids), "meta_info": meta}
    if extra:
        o.update(extra)
    return o


def make_handler(w):
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "pdmodel"

        def setup(self):
            super().setup()
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, fmt, *args):
            if w.a.verbose:
                sys.stderr.write("%s %s\n" % (self.address_string(), fmt % args))

        def peer_closed(self):
            try:
                return self.connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
            except BlockingIOError:
                return False
            except OSError:
                return True

        def send_json(self, status, obj, raw=None):
            data = raw if raw is not None else json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def send_err(self, status, message, etype):
            self.send_json(status, None, error_body(status, message, etype))

        def do_GET(self):
            path = self.path.split("?")[0]
            if path in ("/health", "/health_generate"):
                data = b"ok"
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(data)
            elif path == "/v1/models":
                self.send_json(200, {"object": "list", "data": [{"id": w.a.model_name, "object": "model", "created": 0,
                                                                 "owned_by": "pdmodel", "root": w.a.model_name}]})
            elif path in ("/get_model_info", "/model_info"):
                self.send_json(200, {"model_path": w.a.model_name, "tokenizer_path": None, "is_generation": True})
            elif path in ("/get_server_info", "/server_info"):
                self.send_json(200, {"model_path": w.a.model_name, "disaggregation_mode": w.a.mode,
                                     "port": w.a.port, "dp_size": 1, "backend": w.a.backend,
                                     "stream_layers": w.streamed, "device": w.a.device, "config": w.a.config})
            elif path == "/get_load":
                self.send_json(200, [{"dp_rank": 0, "num_reqs": w.inflight, "num_waiting_reqs": 0,
                                      "num_tokens": w.inflight}])
            elif path == "/pdmodel/stats":
                with w.rec_lock:
                    recs = list(w.records)
                self.send_json(200, {"mode": w.a.mode, "backend": w.a.backend, "stream_layers": w.streamed,
                                     "device": w.a.device, "config": w.a.config, "init_s": w.init_s,
                                     "records": recs})
            else:
                self.send_err(404, "no route %s" % path, "not_found")

        def do_POST(self):
            path = self.path.split("?")[0]
            try:
                n = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                n = -1
            if n < 0 or n > MAX_BODY:
                self.close_connection = True
                self.send_err(413 if n > 0 else 400, "Content-Length must be an integer in 0..%d" % MAX_BODY,
                              "invalid_request_error")
                return
            body = self.rfile.read(n) if n > 0 else b""
            if path == "/flush_cache":
                self.send_json(200, {"ok": True})
                return
            if path != "/generate":
                self.send_err(404, "no route %s (this worker serves /generate)" % path, "not_found")
                return
            self.gone = False
            try:
                r = w.parse(body)
            except HttpError as e:
                self.send_err(e.status, str(e), e.etype)
                return
            w.inflight += 1
            try:
                self.generate(r)
            finally:
                w.inflight -= 1

        def generate(self, r):
            started = [False]
            sent = [0]
            lock = threading.Lock()
            n_prompt = len(r["ids"])

            def chunk(data):
                try:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                except OSError:
                    self.gone = True

            def start_stream():
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                started[0] = True

            def emit(ids):
                # Runs on the engine thread: one SSE event per new token.
                if not r["stream"] or self.gone:
                    return
                with lock:
                    if not started[0]:
                        start_stream()
                    # Every token as it comes, the last one too: the final event (finish_reason and the
                    # worker's timing record) follows once the request is done.
                    chunk(b"data: " + json.dumps(gen_obj(ids, {"room": r["room"]}, n_prompt, False,
                                                         r["max_new"])).encode() + b"\n\n")
                    sent[0] = len(ids)

            try:
                if w.a.mode == "prefill":
                    ids, rec = w.run_prefill(r, self)
                elif w.a.mode == "decode":
                    ids, rec = w.run_decode(r, self, emit)
                else:
                    ids, rec = w.run_both(r, self, emit)
            except HttpError as e:
                if started[0]:
                    with lock:
                        chunk(b"data: " + error_body(e.status, str(e), e.etype) + b"\n\n")
                        chunk(b"")
                    self.close_connection = True
                elif not self.gone:
                    self.send_err(e.status, str(e), e.etype)
                else:
                    self.close_connection = True
                return
            except Exception as e:
                traceback.print_exc()
                msg = "worker error: %s: %s" % (type(e).__name__, e)
                if started[0]:
                    with lock:
                        chunk(b"data: " + error_body(500, msg, "internal_error") + b"\n\n")
                        chunk(b"")
                    self.close_connection = True
                else:
                    self.send_err(500, msg, "internal_error")
                return
            final = gen_obj(ids, rec, n_prompt, True, r["max_new"])
            if not r["stream"]:
                self.send_json(200, final)
                return
            with lock:
                if not started[0]:
                    start_stream()
                chunk(b"data: " + json.dumps(final).encode() + b"\n\n")
                chunk(b"data: [DONE]\n\n")
                chunk(b"")

    return H


class Server(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default backlog is 5: a burst of connections (8 clients' legs and health checks)
    # past it has SYNs dropped, and the kernel retries them only after a second.
    request_queue_size = 1024

    def handle_error(self, request, client_address):
        # A peer that resets its connection (the router cancelling a leg) is routine, not a traceback.
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


def main():
    ap = argparse.ArgumentParser(description="sglang-API worker in front of llama.py, KV through libpdshim")
    ap.add_argument("--mode", choices=("prefill", "decode", "both"), required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--bootstrap-port", type=int, default=8998, help="prefill: the shim's listen port (8998: sglang's default)")
    ap.add_argument("--backend", choices=("tcp", "cuda_ipc", "auto"), default="auto")
    ap.add_argument("--stream-layers", action="store_true", help="prefill: publish each layer's KV as it is computed")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--config", default="tiny")
    ap.add_argument("--slots", type=int, default=8, help="requests in flight (KV pool slots)")
    ap.add_argument("--max-len", type=int, default=8192 + 64, help="tokens per slot (prompt + output)")
    ap.add_argument("--kv-timeout-ms", type=int, default=30000)
    ap.add_argument("--events-url", help="the router's admin listener, http://HOST:PORT (the shim posts its batches to /shim/v1/events there)")
    ap.add_argument("--events-key-file", help="the key the event batches are signed with: this worker's own, "
                    "derived from the router's shim_events.key_file by pdrouter --derive-shim-key KEY_FILE URL")
    ap.add_argument("--queue-timeout-s", type=float, default=120.0)
    ap.add_argument("--model-name", default="pdmodel-llama")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--no-checksum", action="store_true", help="skip the per-room KV digest (kv_sum in the records)")
    a = ap.parse_args()
    if a.slots < 1 or a.max_len < 2 or a.kv_timeout_ms < 1 or not 0 < a.port < 65536 or not 0 < a.bootstrap_port < 65536:
        ap.error("--slots >= 1, --max-len >= 2, --kv-timeout-ms >= 1 and ports in 1..65535 are required")
    if a.stream_layers and a.mode != "prefill":
        a.stream_layers = False  # only the prefill publishes; accepted on the others for symmetric command lines
    import importlib.util
    if importlib.util.find_spec("torch") is None:
        print("worker: PyTorch is not importable: skipped", file=sys.stderr)
        return 77
    w = Worker(a)
    srv = Server((a.host, a.port), make_handler(w))
    print(json.dumps({"ready": True, "mode": a.mode, "port": a.port, "bootstrap_port": a.bootstrap_port if a.mode == "prefill" else None,
                      "backend": a.backend, "stream_layers": w.streamed, "device": a.device, "config": a.config,
                      "init_s": round(w.init_s, 2), "pid": os.getpid()}), flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
