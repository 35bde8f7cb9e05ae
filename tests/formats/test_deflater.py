"""rmqcore.Deflater: the zlib streams a producer writes for sysFlag
COMPRESSED bodies, from one deflate state reused body after body."""

from __future__ import annotations

import os
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
