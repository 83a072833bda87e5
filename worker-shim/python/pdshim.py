"""ctypes binding for libpdshim (worker-shim/pdshim.h).

    import pdshim
    pre = pdshim.Shim(listen_host="127.0.0.1")          # prefill: listens on an ephemeral port
    dec = pdshim.Shim()                                   # decode: no listener
    f1 = pre.offer(room, [kv_bytes])                      # concurrent.futures.Future -> bytes moved
    f2 = dec.fetch("127.0.0.1", pre.port, room, [buf])    # buf: bytearray / writable memoryview
    f2.result(); f1.result()                              # or dec.fetch(..., wait=True)

Streamed offers publish a room in parts while the prefill still computes it:

    f = pre.offer_open(room, total_bytes)                 # Future, as offer's
    pre.offer_part(room, 0, [layer0]); pre.offer_part(room, len(layer0), [layer1]) ...
    pre.room_progress(room)                               # (bytes moved, total)
    f = pre.offer_open_ticket(ticket, total_bytes)       # protocol pdshim: the room is f.room

Segments are any objects exporting a contiguous buffer (bytearray, memoryview, numpy array, mmap,
ctypes array), or (address, length) pairs of integers for memory Python cannot see, such as GPU memory
(`(t.data_ptr(), t.numel() * t.element_size())` for a torch tensor) inside a region given to
`Shim.register(address, length)`; read-only bytes are fine for offer. Each future also carries
`.backend` ("tcp", "cuda_ipc", "rdma") and `.usec` once done. The binding keeps each segment (and the ctypes view
over it) alive until the operation's callback has run. Futures complete on the shim's I/O thread; a
failed operation raises PdshimError with .code (a negative PDR_E* value) and .name ("ETIMEDOUT").

The library is found through $PDSHIM_LIB, else next to this module, else in the build directories
above it, else by the dynamic linker ("libpdshim.so").
"""

import ctypes
import os
import threading
from concurrent.futures import Future

__all__ = ["Shim", "PdshimError", "load_library", "ERRORS", "MEM_KINDS", "ROOM_EVENTS"]

# A copy of common/err.h's PDR_ERRNO_MAP: explicit values, ABI (a test checks them against the header).
ERRORS = {
    "EAGAIN": -999,
    "ENOMEM": -998,
    "EINVAL": -997,
    "ETOOBIG": -996,
    "ETIMEDOUT": -995,
    "ECANCELED": -994,
    "EPEERGONE": -993,
    "ECONNREFUSED": -992,
    "ESIZE": -991,
    "ENOROOM": -990,
    "EEXIST": -989,
    "EPROTO": -988,
    "EIO": -987,
    "ENOWORKER": -986,
    "ECONFIG": -985,
    "ENOTSUP": -984,
    "ECLOSED": -983,
    "EBADTICKET": -982,
    "ETICKETEXPIRED": -981,
    "EFORGED": -980,
    "EREPLAYED": -979,
    "EWRONGPEER": -978,
}
_CODE_NAMES = {v: k for k, v in ERRORS.items()}
globals().update({"PDR_" + k: v for k, v in ERRORS.items()})


class _Seg(ctypes.Structure):
    _fields_ = [("addr", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class _Opts(ctypes.Structure):
    _fields_ = [
        ("listen_host", ctypes.c_char_p),
        ("listen_port", ctypes.c_int),
        ("default_timeout_ms", ctypes.c_uint32),
        ("max_segments", ctypes.c_size_t),
        ("backend", ctypes.c_char_p),
        ("chunk_bytes", ctypes.c_size_t),
        ("staging_chunks", ctypes.c_size_t),
        ("conns_per_peer", ctypes.c_int),
        ("io_threads", ctypes.c_int),
        ("ticket_key_files", ctypes.POINTER(ctypes.c_char_p)),
        ("n_ticket_key_files", ctypes.c_size_t),
        ("ticket_max_skew_ms", ctypes.c_uint32),
        ("ticket_identity", ctypes.c_char_p),
        ("ticket_replay_max", ctypes.c_size_t),
        ("events_url", ctypes.c_char_p),
        ("events_key_file", ctypes.c_char_p),
        ("worker_url", ctypes.c_char_p),
        ("bootstrap_addr", ctypes.c_char_p),
        ("events_flush_ms", ctypes.c_uint32),
        ("load_interval_ms", ctypes.c_uint32),
        ("events_queue", ctypes.c_size_t),
        ("instance_id", ctypes.c_void_p),
    ]


class _TicketInfo(ctypes.Structure):
    _fields_ = [
        ("room", ctypes.c_uint64),
        ("expires_ms", ctypes.c_uint64),
        ("prefill_host", ctypes.c_char * 65),
        ("prefill_port", ctypes.c_int),
        ("decode_id", ctypes.c_char * 81),
        ("key_id", ctypes.c_char * 9),
    ]


class _Load(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("kv_free_bytes", "kv_total_bytes", "kv_free_blocks", "block_size",
                                               "kv_bytes_per_token", "queue_depth")]


# Room events an engine may report itself (pdshim.h, PDSHIM_EV_*).
ROOM_EVENTS = {"accepted": 0, "started": 1, "progress": 2, "done": 3, "failed": 4, "refused": 5}


class _Result(ctypes.Structure):
    _fields_ = [
        ("room", ctypes.c_uint64),
        ("status", ctypes.c_int),
        ("bytes", ctypes.c_uint64),
        ("backend", ctypes.c_char_p),
        ("usec", ctypes.c_uint64),
    ]


MEM_KINDS = {"auto": 0, "host": 1, "cuda": 2}


_DONE_CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int, ctypes.c_uint64)
_RESULT_CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(_Result))
_lib = None
_lib_lock = threading.Lock()


def _candidates():
    env = os.environ.get("PDSHIM_LIB")
    if env:
        yield env
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "libpdshim.so")
    d = here
    for _ in range(3):
        for build in ("build", "build-xfer", "build-asan", "build-xfer-asan"):
            yield os.path.join(d, build, "libpdshim.so")
        d = os.path.dirname(d)
    yield "libpdshim.so"


def load_library():
    """Loads libpdshim once and declares its prototypes."""
    global _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        last = None
        for path in _candidates():
            if os.sep in path and not os.path.exists(path):
                continue
            try:
                lib = ctypes.CDLL(path)
                break
            except OSError as e:
                last = e
        else:
            raise OSError("libpdshim.so not found (set PDSHIM_LIB): %s" % last)
        lib.pdshim_create.restype = ctypes.c_void_p
        lib.pdshim_create.argtypes = [ctypes.POINTER(_Opts), ctypes.POINTER(ctypes.c_int)]
        lib.pdshim_listen_port.restype = ctypes.c_int
        lib.pdshim_listen_port.argtypes = [ctypes.c_void_p]
        lib.pdshim_destroy.restype = None
        lib.pdshim_destroy.argtypes = [ctypes.c_void_p]
        lib.pdshim_offer.restype = ctypes.c_int
        lib.pdshim_offer.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.POINTER(_Seg), ctypes.c_size_t,
                                     ctypes.c_uint32, _DONE_CB, ctypes.c_void_p]
        lib.pdshim_fetch.restype = ctypes.c_int
        lib.pdshim_fetch.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint64,
                                     ctypes.POINTER(_Seg), ctypes.c_size_t, ctypes.c_uint32, _DONE_CB,
                                     ctypes.c_void_p]
        for name in ("pdshim_offer_ex", "pdshim_fetch_ex"):
            getattr(lib, name).restype = ctypes.c_int
        lib.pdshim_offer_ex.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.POINTER(_Seg), ctypes.c_size_t,
                                        ctypes.c_uint32, _RESULT_CB, ctypes.c_void_p]
        lib.pdshim_fetch_ex.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint64,
                                        ctypes.POINTER(_Seg), ctypes.c_size_t, ctypes.c_uint32, _RESULT_CB,
                                        ctypes.c_void_p]
        for name in ("pdshim_offer_ticket", "pdshim_fetch_ticket"):
            getattr(lib, name).restype = ctypes.c_int
            getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(_Seg), ctypes.c_size_t,
                                           ctypes.c_uint32, _RESULT_CB, ctypes.c_void_p]
        lib.pdshim_ticket_inspect.restype = ctypes.c_int
        lib.pdshim_ticket_inspect.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(_TicketInfo)]
        lib.pdshim_offer_open.restype = ctypes.c_int
        lib.pdshim_offer_open.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint32,
                                          _RESULT_CB, ctypes.c_void_p]
        lib.pdshim_offer_open_ticket.restype = ctypes.c_int
        lib.pdshim_offer_open_ticket.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint64, ctypes.c_uint32,
                                                 _RESULT_CB, ctypes.c_void_p]
        lib.pdshim_offer_part.restype = ctypes.c_int
        lib.pdshim_offer_part.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.POINTER(_Seg),
                                          ctypes.c_size_t]
        lib.pdshim_room_progress.restype = ctypes.c_int
        lib.pdshim_room_progress.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64),
                                             ctypes.POINTER(ctypes.c_uint64)]
        lib.pdshim_mem_register.restype = ctypes.c_int
        lib.pdshim_mem_register.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        lib.pdshim_mem_unregister.restype = ctypes.c_int
        lib.pdshim_mem_unregister.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        lib.pdshim_cancel.restype = ctypes.c_int
        lib.pdshim_cancel.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
        lib.pdshim_strerror.restype = ctypes.c_char_p
        lib.pdshim_strerror.argtypes = [ctypes.c_int]
        lib.pdshim_report_load.restype = ctypes.c_int
        lib.pdshim_report_load.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Load)]
        lib.pdshim_instance_id.restype = ctypes.c_int
        lib.pdshim_instance_id.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.pdshim_report_room.restype = ctypes.c_int
        lib.pdshim_report_room.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int, ctypes.c_uint64,
                                           ctypes.c_uint64, ctypes.c_int, ctypes.c_char_p]
        lib.pdshim_events_stats.restype = None
        lib.pdshim_events_stats.argtypes = [ctypes.c_void_p] + [ctypes.POINTER(ctypes.c_uint64)] * 3
        _lib = lib
        return lib


class PdshimError(Exception):
    def __init__(self, code, what=""):
        self.code = code
        self.name = _CODE_NAMES.get(code, str(code))
        msg = load_library().pdshim_strerror(code).decode()
        super().__init__("%s%s (%s)" % (what + ": " if what else "", msg, self.name))


def _segments(buffers, writable):
    """Returns (ctypes array of _Seg, objects to keep alive)."""
    if not isinstance(buffers, (list, tuple)):
        buffers = [buffers]
    keep = []
    segs = (_Seg * max(1, len(buffers)))()
    for i, b in enumerate(buffers):
        if isinstance(b, tuple) and len(b) == 2 and all(isinstance(x, int) for x in b):
            if b[0] < 0 or b[1] < 0:
                raise ValueError("an (address, length) segment needs non-negative integers")
            segs[i].addr = b[0] or None
            segs[i].len = b[1]
            continue
        if isinstance(b, bytes):
            if writable:
                raise TypeError("fetch needs writable buffers, got bytes")
            p = ctypes.c_char_p(b)
            keep.append((b, p))
            segs[i].addr = ctypes.cast(p, ctypes.c_void_p).value
            segs[i].len = len(b)
            continue
        mv = memoryview(b).cast("B")
        if mv.readonly:
            if writable:
                raise TypeError("fetch needs writable buffers")
            # A read-only buffer: copy its address through a bytes-like view without writing to it.
            arr = (ctypes.c_char * mv.nbytes).from_buffer_copy(mv) if mv.nbytes else None
            keep.append((b, arr))
            segs[i].addr = ctypes.addressof(arr) if arr is not None else None
            segs[i].len = mv.nbytes
            continue
        arr = (ctypes.c_char * mv.nbytes).from_buffer(mv) if mv.nbytes else None
        keep.append((b, mv, arr))
        segs[i].addr = ctypes.addressof(arr) if arr is not None else None
        segs[i].len = mv.nbytes
    return segs, len(buffers), keep


class Shim:
    """One pdshim instance. Use as a context manager or call close()."""

    def __init__(self, listen_host=None, listen_port=0, default_timeout_ms=0, max_segments=0, backend=None,
                 chunk_bytes=0, staging_chunks=0, conns_per_peer=0, io_threads=0, ticket_key_files=(),
                 ticket_max_skew_ms=0, ticket_identity=None, ticket_replay_max=0, events_url=None,
                 events_key_file=None, worker_url=None, bootstrap_addr=None, events_flush_ms=0,
                 load_interval_ms=0, events_queue=0, instance_id=None):
        """ticket_key_files: the router's ticket key files (every one verifies); ticket_identity: a decode's
        identity as tickets name it ("host:port" of its URL at the router). events_url etc.: reports to the
        router (docs/internals/shim-events.md); events_key_file is this worker's own key, from
        `pdrouter --derive-shim-key KEY_FILE WORKER_URL` (docs/security.md); instance_id: 16 bytes."""
        self._lib = load_library()
        files = [os.fsencode(f) for f in ticket_key_files]
        self._key_files = (ctypes.c_char_p * max(1, len(files)))(*files)
        enc = lambda v: v.encode() if v else None  # noqa: E731
        if instance_id is not None and len(instance_id) != 16:
            raise ValueError("instance_id must be 16 bytes")
        self._inst = ctypes.create_string_buffer(bytes(instance_id), 16) if instance_id is not None else None
        opts = _Opts(enc(listen_host), listen_port, default_timeout_ms, max_segments, enc(backend), chunk_bytes,
                     staging_chunks, conns_per_peer, io_threads, self._key_files if files else None, len(files),
                     ticket_max_skew_ms, enc(ticket_identity), ticket_replay_max, enc(events_url),
                     enc(events_key_file), enc(worker_url), enc(bootstrap_addr), events_flush_ms, load_interval_ms,
                     events_queue, ctypes.cast(self._inst, ctypes.c_void_p) if self._inst is not None else None)
        err = ctypes.c_int(0)
        self._h = self._lib.pdshim_create(ctypes.byref(opts), ctypes.byref(err))
        if not self._h:
            raise PdshimError(err.value, "pdshim_create")
        self._lock = threading.Lock()
        self._pending = {}  # token -> (future, keep-alive objects)
        self._next = 1
        self._streams = {}  # room -> token of its offer_open, while pending
        self._cb = _RESULT_CB(self._on_done)  # one callback object for the shim's lifetime

    @property
    def port(self):
        return self._lib.pdshim_listen_port(self._h)

    def _on_done(self, arg, res):
        r = res.contents
        with self._lock:
            fut, _ = self._pending.pop(arg or 0, (None, None))
            if self._streams.get(r.room) == arg:
                del self._streams[r.room]
        if fut is None:
            return
        fut.backend = r.backend.decode() if r.backend else "none"
        fut.usec = r.usec
        if r.status == 0:
            fut.set_result(r.bytes)
        else:
            fut.set_exception(PdshimError(r.status, "room %d" % r.room))

    def _post(self, call, buffers, writable, wait):
        if not self._h:
            raise PdshimError(ERRORS["ECLOSED"], "shim closed")
        segs, n, keep = _segments(buffers, writable)
        fut = Future()
        with self._lock:
            token = self._next
            self._next += 1
            self._pending[token] = (fut, (segs, keep))
        rc = call(segs, n, token)
        if rc != 0:
            with self._lock:
                self._pending.pop(token, None)
            raise PdshimError(rc)
        return fut.result() if wait else fut

    def offer(self, room, buffers, timeout_ms=0, wait=False):
        """Prefill side. Returns a Future of the bytes moved (or the count itself with wait=True).

        GPU buffers must hold their final bytes on the device before the call: synchronize the stream
        that wrote them first (torch.cuda.synchronize(), or an event recorded after the writes); the
        shim's copies are not ordered after any of the caller's streams (pdshim.h)."""
        return self._post(lambda s, n, t: self._lib.pdshim_offer_ex(self._h, room, s, n, timeout_ms, self._cb, t),
                          buffers, False, wait)

    def fetch(self, host, port, room, buffers, timeout_ms=0, wait=False):
        """Decode side: fills buffers with the room's bytes from the prefill shim at host:port.

        No queued kernel or copy may still touch GPU buffers when called. Once the Future completes,
        the bytes are on the device: kernels launched after that, on any stream, read them (pdshim.h)."""
        h = host.encode()
        return self._post(
            lambda s, n, t: self._lib.pdshim_fetch_ex(self._h, h, port, room, s, n, timeout_ms, self._cb, t),
            buffers, True, wait)

    def offer_ticket(self, ticket, buffers, timeout_ms=0, wait=False):
        """Prefill side, protocol pdshim: offer() of the room the router's signed ticket names. A bad
        ticket raises PdshimError (EBADTICKET, EFORGED, ETICKETEXPIRED, EWRONGPEER, EREPLAYED) at once."""
        t = ticket.encode() if isinstance(ticket, str) else bytes(ticket)
        return self._post(
            lambda s, n, k: self._lib.pdshim_offer_ticket(self._h, t, s, n, timeout_ms, self._cb, k),
            buffers, False, wait)

    def fetch_ticket(self, ticket, buffers, timeout_ms=0, wait=False):
        """Decode side, protocol pdshim: fetch() from the prefill address inside the ticket."""
        t = ticket.encode() if isinstance(ticket, str) else bytes(ticket)
        return self._post(
            lambda s, n, k: self._lib.pdshim_fetch_ticket(self._h, t, s, n, timeout_ms, self._cb, k),
            buffers, True, wait)

    def ticket_inspect(self, ticket):
        """Verifies a ticket (syntax, key, MAC, expiry; not the peer, not replay) and returns its fields."""
        _, info = self._inspect(ticket, "ticket")
        return {"room": info.room, "expires_ms": info.expires_ms, "prefill_host": info.prefill_host.decode(),
                "prefill_port": info.prefill_port, "decode_id": info.decode_id.decode(),
                "key_id": info.key_id.decode()}

    def _inspect(self, ticket, what):
        """Verifies a ticket through pdshim_ticket_inspect; returns its bytes and its _TicketInfo, or raises
        PdshimError naming what."""
        if not self._h:
            raise PdshimError(ERRORS["ECLOSED"], "shim closed")
        t = ticket.encode() if isinstance(ticket, str) else bytes(ticket)
        info = _TicketInfo()
        rc = self._lib.pdshim_ticket_inspect(self._h, t, ctypes.byref(info))
        if rc != 0:
            raise PdshimError(rc, what)
        return t, info

    def offer_open(self, room, total_bytes, timeout_ms=0, cb=None):
        """Prefill side, a streamed offer: opens the room with its total size; publish its bytes with
        offer_part. Returns a Future of the bytes moved; cb, if given, is called with that Future when it
        completes (on the shim's thread: it must not block). The Future fails with ETIMEDOUT when a part
        was not published before the deadline."""
        return self._open(room, cb, "offer_open",
                          lambda k: self._lib.pdshim_offer_open(self._h, room, total_bytes, timeout_ms, self._cb, k))

    def offer_open_ticket(self, ticket, total_bytes, timeout_ms=0, cb=None):
        """Prefill side, protocol pdshim: offer_open() of the room the router's signed ticket names, refused
        as offer_ticket is (PdshimError EBADTICKET, EFORGED, ETICKETEXPIRED, EWRONGPEER, EREPLAYED) before
        anything is registered. Publish its parts with offer_part(fut.room, ...); fut.room is the ticket's
        room."""
        t, info = self._inspect(ticket, "offer_open_ticket")
        return self._open(info.room, cb, "offer_open_ticket",
                          lambda k: self._lib.pdshim_offer_open_ticket(self._h, t, total_bytes, timeout_ms,
                                                                       self._cb, k))

    def _open(self, room, cb, what, call):
        if not self._h:
            raise PdshimError(ERRORS["ECLOSED"], "shim closed")
        fut = Future()
        fut.room = room
        with self._lock:
            token = self._next
            self._next += 1
            self._pending[token] = (fut, [])
            self._streams[room] = token
        if cb is not None:
            fut.add_done_callback(cb)
        rc = call(token)
        if rc != 0:
            with self._lock:
                self._pending.pop(token, None)
                if self._streams.get(room) == token:
                    del self._streams[room]
            raise PdshimError(rc, what)
        return fut

    def offer_part(self, room, offset, buffers):
        """Publishes room bytes [offset, offset + len(buffers)) of a room opened with offer_open. GPU
        buffers must be complete on the device first (synchronize the stream that wrote them). The
        buffers are kept alive until the room's Future completes. Raises PdshimError (EINVAL: empty, past
        the end, overlapping a published part; ENOROOM: no such streamed offer pending)."""
        if not self._h:
            raise PdshimError(ERRORS["ECLOSED"], "shim closed")
        segs, n, keep = _segments(buffers, False)
        with self._lock:
            entry = self._pending.get(self._streams.get(room, 0))
            if entry is not None:
                entry[1].append((segs, keep))
        rc = self._lib.pdshim_offer_part(self._h, room, offset, segs, n)
        if rc != 0:
            raise PdshimError(rc, "offer_part")

    def room_progress(self, room):
        """(bytes moved so far, total) of the pending offer or fetch of room; PdshimError ENOROOM when
        nothing of it is pending."""
        moved, total = ctypes.c_uint64(0), ctypes.c_uint64(0)
        rc = self._lib.pdshim_room_progress(self._h, room, ctypes.byref(moved), ctypes.byref(total))
        if rc != 0:
            raise PdshimError(rc, "room_progress")
        return moved.value, total.value

    def register(self, address, length, kind="auto"):
        """Describes a memory region (GPU memory must be registered before segments point into it)."""
        if not self._h:
            raise PdshimError(ERRORS["ECLOSED"], "shim closed")
        rc = self._lib.pdshim_mem_register(self._h, address, length, MEM_KINDS[kind])
        if rc != 0:
            raise PdshimError(rc, "register")

    def unregister(self, address):
        rc = self._lib.pdshim_mem_unregister(self._h, address)
        if rc != 0:
            raise PdshimError(rc, "unregister")

    def cancel(self, room):
        """Returns True if something was pending for the room."""
        rc = self._lib.pdshim_cancel(self._h, room)
        if rc not in (0, ERRORS["ENOROOM"]):
            raise PdshimError(rc)
        return rc == 0

    def report_load(self, kv_free_bytes=0, kv_total_bytes=0, kv_free_blocks=0, block_size=0,
                    kv_bytes_per_token=0, queue_depth=0):
        """The engine's load, sent to the router with the next batch and periodically (needs events_url)."""
        ld = _Load(kv_free_bytes, kv_total_bytes, kv_free_blocks, block_size, kv_bytes_per_token, queue_depth)
        rc = self._lib.pdshim_report_load(self._h, ctypes.byref(ld))
        if rc != 0:
            raise PdshimError(rc, "report_load")

    def report_room(self, room, event, bytes_moved=0, total=0, status=0, reason=None):
        """Queues one room event (event: a ROOM_EVENTS name). False when the queue was full (dropped)."""
        rc = self._lib.pdshim_report_room(self._h, room, ROOM_EVENTS[event], bytes_moved, total, status,
                                          reason.encode() if reason else None)
        if rc not in (0, ERRORS["EAGAIN"]):
            raise PdshimError(rc, "report_room")
        return rc == 0

    def instance_id(self):
        """This shim's instance id (16 bytes)."""
        out = ctypes.create_string_buffer(16)
        self._lib.pdshim_instance_id(self._h, out)
        return out.raw

    def events_stats(self):
        """(batches sent, batches failed, events dropped) of the reporter."""
        v = [ctypes.c_uint64(0) for _ in range(3)]
        self._lib.pdshim_events_stats(self._h, *[ctypes.byref(x) for x in v])
        return tuple(x.value for x in v)

    def close(self):
        """Fails pending operations with ECLOSED (their futures complete) and frees the shim."""
        h, self._h = self._h, None
        if h:
            self._lib.pdshim_destroy(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
