"""`pyrmq store check`: read-only verification finds damage and changes nothing."""

from __future__ import annotations

import hashlib

import rmqcore
from pyrmq.cli import main
from pyrmq.storage import MessageStore
from pyrmq.storage.check import check_store
from tests.conftest import small_config


def _fill(root: str, run) -> list[rmqcore.AppendResult]:
    async def go():
        async with MessageStore(small_config(root)) as store:
            return [store.put_message_nowait("T", i % 2, b"payload-%04d" % i) for i in range(400)]
    return run(go())


def test_check_passes_a_healthy_store(tmp_path, run, capsys):
    _fill(str(tmp_path), run)
    rep = check_store(str(tmp_path))
    assert rep.ok, rep.problems
    assert rep.records == 400
    assert rep.queues == {"T/0": 200, "T/1": 200}
    assert main(["store", "check", str(tmp_path)]) == 0
    assert "400 records" in capsys.readouterr().out


def test_check_reports_a_flipped_body_byte_without_touching_the_file(tmp_path, run):
    results = _fill(str(tmp_path), run)
    seg = tmp_path / "commitlog" / f"{0:020d}"
    target = results[123]
    pos = target.phys_offset + target.wrote_bytes - 5  # inside the body's tail ("0123")
    with open(seg, "r+b") as f:
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ 0x40]))
    digest = hashlib.sha256(seg.read_bytes()).hexdigest()
    rep = check_store(str(tmp_path))
    assert not rep.ok
    assert any("CRC" in p for p in rep.problems), rep.problems
    assert rep.records == 123  # the intact prefix
    assert hashlib.sha256(seg.read_bytes()).hexdigest() == digest
    assert main(["store", "check", str(tmp_path)]) == 1


def test_check_reports_a_consume_queue_unit_that_points_at_the_wrong_record(tmp_path, run):
    results = _fill(str(tmp_path), run)
    cq = tmp_path / "consumequeue" / "T" / "0" / f"{0:020d}"
    with open(cq, "r+b") as f:  # unit 5 of T/0 now points at T/1's record 5
        f.seek(5 * rmqcore.CQ_STORE_UNIT_SIZE)
        f.write(results[11].phys_offset.to_bytes(8, "big"))
    rep = check_store(str(tmp_path))
    assert rep.records == 400
    assert rep.problems == ["T/0 unit 5 points at a record of T/1 offset 5"]
