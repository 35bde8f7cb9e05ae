"""A slave's CommitLog append (MessageStoreCore.append_replica): the master's
bytes land unchanged at the same offsets, in whatever pieces they arrive,
and build the same ConsumeQueues; damaged or misplaced data is refused with
nothing of it written."""

from __future__ import annotations

import random

import pytest

import rmqcore
from pyrmq.common.errors import CorruptStoreError

SEG = 64 * 1024
CORE = {"commit_log_file_size": SEG, "cq_units_per_file": 1000}


def _fill(core: rmqcore.MessageStoreCore, n: int, seed: int = 1) -> None:
    rnd = random.Random(seed)
    for i in range(n):
        body = rnd.randbytes(rnd.randint(1, 3000))
        core.put(f"T{i % 3}", i % 4, body, f"KEYS\x01k{i}\x02TAGS\x01t{i % 2}\x02")


def _log_bytes(core: rmqcore.MessageStoreCore, start: int, end: int) -> bytes:
    out = bytearray()
    off = start
    while off < end:
        n = min(end - off, SEG - off % SEG)
        out += core.read(off, n)
        off += n
    return bytes(out)


def _copy(
    master: rmqcore.MessageStoreCore, slave: rmqcore.MessageStoreCore, rnd: random.Random
) -> int:
    """Stream the master's log to the slave in random pieces (within a
    segment, as the HA transfer reads them); returns pieces sent."""
    pending = bytearray()
    at = slave.commit_log_max_offset if slave.commit_log_files() else master.commit_log_min_offset
    sent = 0
    src = at
    end = master.commit_log_max_offset
    for _ in range(100_000):
        if src >= end and not pending:
            break
        if src < end:
            n = min(rnd.randint(1, 9000), end - src, SEG - src % SEG)
            pending += master.read(src, n)
            src += n
            sent += 1
        accepted, _ = slave.append_replica(at, pending)
        del pending[:accepted]
        at += accepted
        if src >= end and pending and accepted == 0:
            raise AssertionError(f"{len(pending)} bytes never accepted at {at}")
    return sent


def test_copy_in_random_pieces_is_byte_identical_and_dispatched(tmp_path):
    master = rmqcore.MessageStoreCore(str(tmp_path / "m"), **CORE)
    slave = rmqcore.MessageStoreCore(str(tmp_path / "s"), **CORE)
    _fill(master, 400)
    assert len(master.commit_log_files()) > 5  # the copy crosses segment ends
    _copy(master, slave, random.Random(7))
    end = master.commit_log_max_offset
    assert slave.commit_log_max_offset == end
    assert _log_bytes(slave, 0, end) == _log_bytes(master, 0, end)
    for topic in ("T0", "T1", "T2"):
        for qid in range(4):
            assert slave.max_offset_in_queue(topic, qid) == master.max_offset_in_queue(topic, qid)
            m = master.get_message(topic, qid, 0, 1000, 1 << 30, None)
            s = slave.get_message(topic, qid, 0, 1000, 1 << 30, None)
            assert s.ranges == m.ranges and s.tags_codes == m.tags_codes
    [hit] = slave.query_message_offsets("T1", "k13")
    assert b"KEYS\x01k13\x02" in slave.look_message_by_offset(hit)["properties"]
    # more puts on the master continue the copy; the slave survives a reopen
    slave.close()
    slave = rmqcore.MessageStoreCore(str(tmp_path / "s"), **CORE)
    _fill(master, 50, seed=2)
    _copy(master, slave, random.Random(8))
    end = master.commit_log_max_offset
    assert _log_bytes(slave, 0, end) == _log_bytes(master, 0, end)
    assert slave.max_offset_in_queue("T0", 0) == master.max_offset_in_queue("T0", 0)
    master.close()
    slave.close()


def test_a_new_slave_starts_at_the_masters_first_retained_segment(tmp_path):
    master = rmqcore.MessageStoreCore(str(tmp_path / "m"), **CORE)
    _fill(master, 300)
    assert master.delete_expired_commit_log(0, 2**62, True, 2) == 2
    start = master.commit_log_min_offset
    assert start == 2 * SEG
    slave = rmqcore.MessageStoreCore(str(tmp_path / "s"), **CORE)
    _copy(master, slave, random.Random(3))
    end = master.commit_log_max_offset
    assert slave.commit_log_min_offset == start
    assert _log_bytes(slave, start, end) == _log_bytes(master, start, end)
    master.delete_expired_logics()
    first = slave.min_offset_in_queue("T0", 0)
    assert first == master.min_offset_in_queue("T0", 0) > 0
    m = master.get_message("T0", 0, first, 1000, 1 << 30, None)
    s = slave.get_message("T0", 0, first, 1000, 1 << 30, None)
    assert s.status == m.status == "FOUND" and s.ranges == m.ranges
    slave.close()
    # what is on disk is a store: it opens again, contiguous from `start`
    slave = rmqcore.MessageStoreCore(str(tmp_path / "s"), **CORE)
    assert slave.commit_log_files()[0] == start
    assert slave.commit_log_max_offset == end
    slave.close()
    master.close()


def test_damaged_or_misplaced_data_is_refused_and_nothing_of_it_written(tmp_path):
    master = rmqcore.MessageStoreCore(str(tmp_path / "m"), **CORE)
    slave = rmqcore.MessageStoreCore(str(tmp_path / "s"), **CORE)
    first = master.put("T", 0, b"a" * 100)
    second = master.put("T", 0, b"b" * 100)
    data = bytearray(master.read(0, master.commit_log_max_offset))
    with pytest.raises(ValueError, match="does not continue this CommitLog"):
        slave.append_replica(12, data)
    # a flipped body byte in the second record: the first is kept
    bad = bytearray(data)
    bad[second.phys_offset + second.wrote_bytes - 40] ^= 0xFF
    with pytest.raises(CorruptStoreError):
        slave.append_replica(0, bad)
    assert slave.commit_log_max_offset == first.wrote_bytes
    assert slave.max_offset_in_queue("T", 0) == 1
    # the intact bytes then continue where the slave stands
    accepted, _ = slave.append_replica(first.wrote_bytes, data[first.wrote_bytes :])
    assert accepted == second.wrote_bytes
    assert slave.max_offset_in_queue("T", 0) == 2
    # garbage, and a record claiming another offset
    with pytest.raises(CorruptStoreError):
        slave.append_replica(slave.commit_log_max_offset, b"\x00\x00\x01\x00" + bytes(252))
    moved = bytearray(master.read(first.phys_offset, first.wrote_bytes))
    with pytest.raises(CorruptStoreError):
        slave.append_replica(slave.commit_log_max_offset, moved)
    assert slave.commit_log_max_offset == master.commit_log_max_offset
    master.close()
    slave.close()


def test_a_master_with_another_segment_size_is_refused(tmp_path):
    master = rmqcore.MessageStoreCore(str(tmp_path / "m"), commit_log_file_size=SEG * 2)
    slave = rmqcore.MessageStoreCore(str(tmp_path / "s"), **CORE)
    rnd = random.Random(5)
    for _ in range(45):  # ~95 KiB: one master segment, across a slave segment's end
        master.put("T", 0, rnd.randbytes(2000))
    data = master.read(0, master.commit_log_max_offset)
    with pytest.raises(CorruptStoreError):
        for _ in range(3):
            at = slave.commit_log_max_offset
            slave.append_replica(at, data[at:])
    assert slave.commit_log_max_offset < SEG
    master.close()
    slave.close()


def test_truncate_drops_the_tail_and_its_queue_units(tmp_path):
    core = rmqcore.MessageStoreCore(str(tmp_path / "s"), **CORE)
    _fill(core, 200)
    cut = core.put("T0", 0, b"first of the tail").phys_offset
    before = {q: core.max_offset_in_queue("T0", q) for q in range(4)}
    _fill(core, 100, seed=9)
    assert len(core.commit_log_files()) > 2
    with pytest.raises(ValueError, match="cannot truncate"):
        core.truncate(core.commit_log_max_offset + 1)
    core.truncate(cut)
    assert core.commit_log_max_offset == cut
    assert core.max_offset_in_queue("T0", 0) == before[0] - 1
    for q in (1, 2, 3):
        assert core.max_offset_in_queue("T0", q) <= before[q]
    # appends continue with the next queue offset; the store reopens clean
    r = core.put("T0", 0, b"after the cut")
    assert r.phys_offset == cut and r.queue_offset == before[0] - 1
    core.close()
    core = rmqcore.MessageStoreCore(str(tmp_path / "s"), **CORE)
    assert core.recovery["bytes_trimmed"] == 0 and core.recovery["damaged_ranges"] == 0
    got = core.get_message("T0", 0, before[0] - 1, 1, 1 << 20, None)
    assert core.look_message_by_offset(got.ranges[0][0])["body"] == b"after the cut"
    core.close()
