"""rmqcore.Deflater: the zlib streams a producer writes for sysFlag
COMPRESSED bodies, from one deflate state reused body after body; and
rmqcore.DeflateWorker, the same on a C thread of its own (a traced
producer's trace messages)."""

from __future__ import annotations

import os
import time
import warnings
import weakref
import zlib

import pytest

import rmqcore


def test_every_body_inflates_back_and_reuse_changes_nothing():
    bodies = [
        b"",
        b"x",
        b"0123456789abcdef" * 4096,
        os.urandom(300_000),  # incompressible: deflateBound must hold it
        "Pub\x01trace ä\x02".encode() * 1000,
    ]
    for level in (0, 1, 5, 9):
        d = rmqcore.Deflater(level)
        first = [d.compress(b) for b in bodies]
        # a second pass over the same deflater, and a fresh one per body,
        # give the same streams: nothing of one body leaks into the next
        assert [d.compress(b) for b in bodies] == first
        assert [rmqcore.Deflater(level).compress(b) for b in bodies] == first
        assert [zlib.decompress(c) for c in first] == bodies
    assert len(rmqcore.Deflater(1).compress(bodies[2])) < 1000
    # any bytes-like body
    d = rmqcore.Deflater(5)
    assert zlib.decompress(d.compress(bytearray(b"ab" * 100))) == b"ab" * 100
    assert zlib.decompress(d.compress(memoryview(b"cd" * 100))) == b"cd" * 100


def test_bad_settings_and_bodies_are_refused():
    with pytest.raises(ValueError, match=r"level must be 0\.\.9"):
        rmqcore.Deflater(10)
    with pytest.raises(ValueError, match=r"mem_level must be 1\.\.9"):
        rmqcore.Deflater(5, 0)
    d = rmqcore.Deflater(5)
    with pytest.raises(TypeError):
        d.compress("text")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        d.compress(None)  # type: ignore[arg-type]
    assert zlib.decompress(d.compress(b"still fine")) == b"still fine"


class _Token:
    """A token that can be watched for release (weakref)."""


def _done_within(w: rmqcore.DeflateWorker, n: int, seconds: float = 60.0) -> list:
    """done() until n bodies are back; fails, naming the progress, if the
    thread stops giving any back for `seconds`."""
    got: list = []
    last = time.monotonic()
    while len(got) < n:
        more = w.done()
        if more:
            got += more
            last = time.monotonic()
        elif time.monotonic() - last > seconds:
            pytest.fail(f"{len(got)} of {n} bodies back, none for {seconds:.0f} s")
        else:
            time.sleep(0.001)
    return got


def test_a_worker_gives_back_what_deflater_writes_in_order():
    """DeflateWorker compresses on a thread of its own and gives back each
    body's stream, the body and its token, in the order submitted: the
    same bytes a Deflater of the same level writes."""
    bodies = [os.urandom(50) * (i + 1) * 40 for i in range(20)] + [b"", os.urandom(200_000)]
    for level in (1, 6):
        w = rmqcore.DeflateWorker(level)
        tokens = [_Token() for _ in bodies]
        assert all(w.submit(b, t) for b, t in zip(bodies, tokens, strict=True))
        got = _done_within(w, len(bodies))
        assert w.pending == 0 and w.done() == []
        assert [g[1] for g in got] == bodies
        assert [g[2] for g in got] == tokens
        d = rmqcore.Deflater(level)
        assert [g[0] for g in got] == [d.compress(b) for b in bodies]
        # the worker holds no reference once a body is back
        refs = [weakref.ref(t) for t in tokens]
        del got, tokens
        assert all(r() is None for r in refs)
        w.close()


def test_a_worker_takes_at_most_max_pending_and_close_gives_back_the_rest():
    w = rmqcore.DeflateWorker(1, max_pending=2)
    assert w.max_pending == 2 and w.pending == 0
    assert w.submit(b"a" * 5000, 1) and w.submit(b"b" * 5000, 2)
    assert not w.submit(b"c" * 5000, 3)  # two are out until done() takes them
    assert [t for _, _, t in _done_within(w, 2)] == [1, 2]
    token = _Token()
    assert w.submit(b"d" * 5000, token)
    ref = weakref.ref(token)
    del token
    # close gives back what was not taken back, compressed or not
    ((stream, body, tok),) = w.close()
    assert body == b"d" * 5000 and tok is ref()
    assert stream is None or zlib.decompress(stream) == body
    assert w.pending == 0 and w.done() == [] and w.close() == []
    del tok
    assert ref() is None
    # a closed worker starts a thread again at the next body
    assert w.submit(b"e" * 5000, 5)
    ((stream, body, tok),) = _done_within(w, 1)
    assert zlib.decompress(stream) == body and tok == 5
    del w  # its end stops the thread


def test_a_forked_child_gets_a_worker_of_its_own():
    """A child forked while the parent's worker has bodies out does not
    touch the parent's thread (not in the child): its first body starts
    its own. The parent's bodies come back to the parent."""
    w = rmqcore.DeflateWorker(1, max_pending=8)
    assert w.submit(b"parent" * 1000, "p")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork of a threaded process
        pid = os.fork()
    if pid == 0:
        ok = 1
        try:
            if w.pending == 0 and w.done() == [] and w.submit(b"child" * 1000, "c"):
                ((stream, _, tok),) = _done_within(w, 1, 30)
                ok = 0 if zlib.decompress(stream) == b"child" * 1000 and tok == "c" else 1
        finally:
            os._exit(ok)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    ((stream, body, tok),) = _done_within(w, 1)
    assert zlib.decompress(stream) == body == b"parent" * 1000 and tok == "p"


def test_a_worker_refuses_bad_settings_and_bodies():
    with pytest.raises(ValueError, match=r"level must be 0\.\.9"):
        rmqcore.DeflateWorker(-1)
    with pytest.raises(ValueError, match="max_pending must be at least 1"):
        rmqcore.DeflateWorker(1, 0)
    w = rmqcore.DeflateWorker(1)
    with pytest.raises(TypeError):
        w.submit("text")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        w.submit(bytearray(b"mutable"))  # type: ignore[arg-type]
    assert w.pending == 0
