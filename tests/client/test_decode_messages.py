"""decode_messages leaves out a record whose body fails its CRC (logged)
and keeps the others, so a consumer neither gets a corrupted message nor
retries one pull for ever."""

from __future__ import annotations

import glob
import logging
import os

import pytest

import rmqcore
from pyrmq.common.errors import CorruptStoreError
from pyrmq.common.message import decode_messages


def _pull_body(tmp_path: str) -> bytes:
    core = rmqcore.MessageStoreCore(os.path.join(tmp_path, "s"), commit_log_file_size=1 << 20)
    try:
        last = None
        for i in range(3):
            last = core.put("DecT", 0, f"body-{i}".encode() * 4, b"UNIQ_KEY\x01id-%d\x02" % i)
        assert last is not None
        path = sorted(glob.glob(os.path.join(tmp_path, "s", "commitlog", "*")))[0]
        with open(path, "rb") as f:
            return f.read(last.next_phys_offset)
    finally:
        core.close()


def test_a_corrupted_body_is_left_out_and_logged(tmp_path, caplog):
    data = bytearray(_pull_body(str(tmp_path)))
    recs = rmqcore.decode_records(bytes(data))
    # flip a byte inside the second record's body
    start2 = recs[0]["store_size"]
    body_at = start2 + data[start2 : start2 + recs[1]["store_size"]].index(b"body-1")
    data[body_at] ^= 0x20
    with caplog.at_level(logging.ERROR, logger="pyrmq.client"):
        msgs = decode_messages(bytes(data), "broker-a")
    assert [m.msg_id for m in msgs] == ["id-0", "id-2"]
    assert [m.body for m in msgs] == [b"body-0" * 4, b"body-2" * 4]
    assert "left out a corrupted message of DecT queue 0 at offset 1" in caplog.text


def test_records_that_do_not_parse_still_raise(tmp_path):
    data = bytearray(_pull_body(str(tmp_path)))
    data[4:8] = b"\x00\x00\x00\x01"  # the first record's magic code
    with pytest.raises(CorruptStoreError):
        decode_messages(bytes(data))
