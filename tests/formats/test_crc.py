"""BODYCRC is zlib's CRC-32 & 0x7FFFFFFF, whichever code path computes it
(the PCLMUL fold for 64+ bytes, zlib's table for the rest)."""

from __future__ import annotations

import zlib

from hypothesis import given, settings
from hypothesis import strategies as st

import rmqcore


@settings(max_examples=400, deadline=None)
@given(st.binary(min_size=0, max_size=5000), st.integers(min_value=0, max_value=15))
def test_body_crc_matches_zlib(data, skip):
    view = memoryview(data)[min(skip, len(data)):]  # unaligned starts too
    assert rmqcore.body_crc(view) == zlib.crc32(view) & 0x7FFFFFFF


def test_body_crc_on_large_bodies():
    for n in (64, 65, 127, 128, 1 << 16, (1 << 22) + 13):
        data = bytes((i * 131 + 7) & 0xFF for i in range(n))
        assert rmqcore.body_crc(data) == zlib.crc32(data) & 0x7FFFFFFF
