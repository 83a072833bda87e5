"""Helpers shared by the tests that drive pdshim.py (ctypes) in their own process, and by the ticket
tests: a key file, a call that must be refused with a given PdshimError, a canceled future, a fetch
without the ticket, and a wait on a room's progress counter.

    sys.path.insert(0, DIR_WITH_PDSHIM)        # the caller puts pdshim.py on the path first
    import shimtest
    kf = shimtest.keyfile(os.urandom(32))
    shimtest.refused(lambda: shim.offer_ticket(bad, b"x"), "EFORGED")
    shimtest.refused(lambda: fut.result(timeout=5), "ECANCELED")
"""
import os
import tempfile
import time


def keyfile(secret):
    """A temporary key file holding secret and a newline, as the shims' ticket_key_files read it."""
    fd, path = tempfile.mkstemp(prefix="pdshim-ticket-", suffix=".key")
    with os.fdopen(fd, "wb") as f:
        f.write(secret + b"\n")
    return path


def refused(fn, *names):
    """Calls fn(), which must raise PdshimError named one of names."""
    import pdshim

    try:
        fn()
    except pdshim.PdshimError as e:
        assert e.name in names, "got %s, want %s" % (e.name, "/".join(names))
        return
    raise AssertionError("accepted; want %s" % "/".join(names))


def wait_progress(shim, room, want, timeout=10.0):
    """Until room_progress(room) reports want bytes moved (the transport's own counter, which has no event
    to wait on); returns the bytes moved."""
    end = time.monotonic() + timeout
    while True:
        moved, _ = shim.room_progress(room)
        if moved >= want:
            return moved
        if time.monotonic() > end:
            raise AssertionError("room %d: %d of %d bytes moved" % (room, moved, want))
        time.sleep(0.002)


def no_plain_fetch(thief, host, port, room, n):
    """A fetch of room by its number alone, without the ticket, finds nothing and moves no byte."""
    loot = bytearray(n)
    refused(lambda: thief.fetch(host, port, room, loot, wait=True), "ETIMEDOUT", "ENOROOM")
    assert loot == bytearray(n), "bytes moved to a peer without the ticket"


def canceled(fut, room):
    """fut, of an operation canceled by room, fails with ECANCELED naming that room."""
    import pdshim

    try:
        fut.result(timeout=5)
    except pdshim.PdshimError as e:
        assert e.name == "ECANCELED" and "room %d" % room in str(e), e
        return
    raise AssertionError("cancel did not end room %d" % room)
