"""MessageStore used as the broker will use it: puts, gets, statuses,
lookups, bad input, retention, sendfile, locking and a full disk."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import time

import pytest

import rmqcore
from pyrmq.common.errors import (
    DiskFullError,
    IllegalMessageError,
    NotAStoreError,
    StoreLockedError,
)
from pyrmq.storage import FlushDiskType, MessageStore, MessageStoreConfig, PutMessageStatus
from pyrmq.storage.zero_copy import sendfile_ranges
from tests._waiting import wait_until
from tests.conftest import small_config

PROPS = rmqcore.encode_properties({"TAGS": "TagA", "KEYS": "order-1 order-2", "UNIQ_KEY": "U" * 32})


def test_put_get_round_trip(tmp_path, run):
    async def main():
        async with MessageStore(small_config(str(tmp_path))) as store:
            results = [
                store.put_message_nowait("TopicA", i % 3, b"body-%d" % i, PROPS) for i in range(300)
            ]
            assert [r.queue_offset for r in results[:6]] == [0, 0, 0, 1, 1, 1]
            got = store.get_message("TopicA", 1, 0, 32)
            assert got.status == "FOUND"
            assert got.message_count == 32
            assert got.next_begin_offset == 32
            assert got.max_offset == 100
            recs = rmqcore.decode_records(store.read(got.ranges))
            assert [r["body"] for r in recs] == [b"body-%d" % i for i in range(1, 96, 3)]
            assert all(r["topic"] == "TopicA" and r["queue_id"] == 1 for r in recs)
            assert [r["queue_offset"] for r in recs] == list(range(32))
            first = results[1]
            assert recs[0]["commit_log_offset"] == first.phys_offset
            assert recs[0]["store_timestamp"] == first.store_timestamp

    run(main())


def test_get_message_statuses_follow_rocketmq(tmp_path, run):
    async def main():
        async with MessageStore(small_config(str(tmp_path))) as store:
            assert store.get_message("Nope", 0, 0).status == "NO_MATCHED_LOGIC_QUEUE"
            for i in range(10):
                tag = "TagA" if i % 2 else "TagB"
                store.put_message_nowait("T", 0, b"x", rmqcore.encode_properties({"TAGS": tag}))
            r = store.get_message("T", 0, 10)
            assert (r.status, r.next_begin_offset) == ("OFFSET_OVERFLOW_ONE", 10)
            r = store.get_message("T", 0, 12)
            assert (r.status, r.next_begin_offset) == ("OFFSET_OVERFLOW_BADLY", 10)
            r = store.get_message("T", 0, 0, tags_codes=[rmqcore.tag_code("TagA")])
            assert r.status == "FOUND" and r.message_count == 5
            assert r.next_begin_offset == 10
            r = store.get_message("T", 0, 0, tags_codes=[rmqcore.tag_code("TagC")])
            assert (r.status, r.next_begin_offset, r.message_count) == ("NO_MATCHED_MESSAGE", 10, 0)
            r = store.get_message("T", 0, 3, max_msgs=4)
            assert (r.status, r.message_count, r.next_begin_offset) == ("FOUND", 4, 7)

    run(main())


def test_get_message_stops_before_the_first_record_beyond_max_phys(tmp_path, run):
    """A controller-mode master's confirmOffset: records ending beyond it
    are neither served nor skipped, matching the tag filter or not."""

    async def main():
        async with MessageStore(small_config(str(tmp_path))) as store:
            ends = []
            for i in range(6):
                tag = "TagA" if i in (0, 4, 5) else "TagB"
                r = store.put_message_nowait("T", 0, b"x", rmqcore.encode_properties({"TAGS": tag}))
                store.put_message_nowait("Other", 0, b"y" * 50)  # interleaved records
                ends.append(r.next_phys_offset)
            r = store.get_message("T", 0, 0, max_phys=ends[2])
            assert (r.status, r.message_count, r.next_begin_offset) == ("FOUND", 3, 3)
            r = store.get_message("T", 0, 3, max_phys=ends[2])
            assert (r.status, r.message_count, r.next_begin_offset) == ("OFFSET_OVERFLOW_ONE", 0, 3)
            r = store.get_message("T", 0, 0, max_phys=ends[0] - 1)
            assert (r.status, r.next_begin_offset) == ("OFFSET_OVERFLOW_ONE", 0)
            a = [rmqcore.tag_code("TagA")]
            # units 1-3 do not match and are confirmed: skipped; 4 is not confirmed
            r = store.get_message("T", 0, 1, tags_codes=a, max_phys=ends[3])
            assert (r.status, r.message_count, r.next_begin_offset) == ("OFFSET_OVERFLOW_ONE", 0, 4)
            r = store.get_message("T", 0, 0, tags_codes=a, max_phys=ends[4])
            assert (r.status, r.message_count, r.next_begin_offset) == ("FOUND", 2, 5)
            r = store.get_message("T", 0, 0, max_phys=-1)
            assert (r.status, r.message_count, r.next_begin_offset) == ("FOUND", 6, 6)

    run(main())


def test_get_message_respects_byte_limit_but_always_returns_one(tmp_path, run):
    async def main():
        cfg = small_config(str(tmp_path), max_transfer_bytes_on_message_in_memory=3000)
        async with MessageStore(cfg) as store:
            for _ in range(5):
                store.put_message_nowait("T", 0, b"y" * 1000)
            r = store.get_message("T", 0, 0)
            assert r.message_count == 2 and r.next_begin_offset == 2
            big = b"z" * 5000
            store.put_message_nowait("T", 1, big)
            r = store.get_message("T", 1, 0)
            assert r.message_count == 1
            assert rmqcore.decode_records(store.read(r.ranges))[0]["body"] == big

    run(main())


@pytest.mark.parametrize(
    ("topic", "qid", "body", "props", "fragment"),
    [
        ("bad topic", 0, b"x", b"", "invalid topic"),
        ("", 0, b"x", b"", "invalid topic"),
        ("t" * 128, 0, b"x", b"", "invalid topic"),
        ("T", -1, b"x", b"", "queue id"),
        ("T", 1024, b"x", b"", "queue id"),
        ("T", 0, b"x" * (256 * 1024 + 1), b"", "too large"),
        ("T", 0, b"x", b"k\x01" + b"v" * 32767 + b"\x02", "properties too large"),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(tmp_path, run, topic, qid, body, props, fragment):
    async def main():
        async with MessageStore(small_config(str(tmp_path))) as store:
            store.put_message_nowait("T", 0, b"before")
            end = store.commit_log_max_offset
            with pytest.raises(IllegalMessageError, match=fragment):
                store.put_message_nowait(topic, qid, body, props)
            assert store.commit_log_max_offset == end
            store.put_message_nowait("T", 0, b"after")
            r = store.get_message("T", 0, 0)
            assert [m["body"] for m in rmqcore.decode_records(store.read(r.ranges))] == [
                b"before",
                b"after",
            ]

    run(main())


@pytest.mark.parametrize(
    "batch",
    [
        b"\x00\x00\x00\x05abc",  # shorter than an entry header
        rmqcore.encode_batch([(b"ok", b"", 0)])[:-1],  # truncated
        b"\x00\x00\x00\x30" + bytes(44),  # size says 48, body/props lengths disagree
        rmqcore.encode_batch([(b"ok", b"", 0)]) + b"\x00\x00\x00\x16",  # trailing junk
    ],
)
def test_malformed_batch_is_refused_whole(tmp_path, run, batch):
    async def main():
        async with MessageStore(small_config(str(tmp_path))) as store:
            with pytest.raises(IllegalMessageError, match="batch"):
                store.put_messages_nowait("T", 0, batch)
            assert store.commit_log_max_offset == 0
            assert store.max_offset_in_queue("T", 0) == 0

    run(main())


def test_batch_gets_consecutive_queue_offsets(tmp_path, run):
    async def main():
        async with MessageStore(small_config(str(tmp_path))) as store:
            store.put_message_nowait("T", 2, b"single")
            batch = rmqcore.encode_batch([(b"m%d" % i, {"KEYS": f"k{i}"}, i) for i in range(50)])
            r = store.put_messages_nowait("T", 2, batch)
            assert (r.queue_offset, r.count) == (1, 50)
            got = store.get_message("T", 2, 1, 32)
            recs = rmqcore.decode_records(store.read(got.ranges))
            assert [m["flag"] for m in recs] == list(range(32))
            assert [m["queue_offset"] for m in recs] == list(range(1, 33))
            assert [m["body"] for m in await store.query_message("T", "k7")] == [b"m7"]

    run(main())


@pytest.mark.parametrize("index_async", [True, False], ids=["index-thread", "inline-index"])
def test_lookup_by_msg_id_key_and_time(tmp_path, run, index_async):
    async def main():
        cfg = small_config(str(tmp_path), message_index_async=index_async)
        async with MessageStore(cfg) as store:
            r1 = store.put_message_nowait("T", 0, b"first", PROPS)
            await asyncio.sleep(0.02)
            t_mid = int(time.time() * 1000)
            await asyncio.sleep(0.02)
            r2 = store.put_message_nowait(
                "T",
                0,
                b"second",
                rmqcore.encode_properties({"KEYS": "order-2", "UNIQ_KEY": "V" * 32}),
            )
            assert store.look_message_by_offset_msg_id(r2.msg_id)["body"] == b"second"
            assert [m["body"] for m in await store.query_message("T", "order-2")] == [
                b"second",
                b"first",
            ]
            assert [m["body"] for m in await store.query_message("T", "U" * 32)] == [b"first"]
            assert await store.query_message("T", "order-3") == []
            assert await store.query_message("Other", "order-1") == []
            assert store.offset_in_queue_by_time("T", 0, 0) == 0
            assert store.offset_in_queue_by_time("T", 0, t_mid) == 1
            assert store.offset_in_queue_by_time("T", 0, r2.store_timestamp + 10_000) == 2
            assert r1.msg_id != r2.msg_id
            with pytest.raises(ValueError, match="hex"):
                store.look_message_by_offset_msg_id("zz")

    run(main())


def test_arrival_listener_sees_new_max_offset(tmp_path, run):
    async def main():
        seen = []
        async with MessageStore(small_config(str(tmp_path))) as store:
            store.add_arrival_listener(lambda t, q, m: seen.append((t, q, m)))
            store.put_message_nowait("T", 1, b"a")
            store.put_messages_nowait("T", 1, rmqcore.encode_batch([(b"b", b"", 0)] * 3))
        assert seen == [("T", 1, 1), ("T", 1, 4)]

    run(main())


def test_a_topic_listener_hears_only_its_topic(tmp_path, run):
    async def main():
        every, only_u = [], []
        async with MessageStore(small_config(str(tmp_path))) as store:
            store.add_arrival_listener(lambda t, q, m: every.append(t))
            store.add_arrival_listener(lambda t, q, m: only_u.append((t, q, m)), "U")
            store.put_message_nowait("T", 0, b"a")
            store.put_message_nowait("U", 2, b"b")
            store.appended(False, [("T", 0, 1), ("U", 2, 1)])  # the C send path's notices
        assert every == ["T", "U", "T", "U"]
        assert only_u == [("U", 2, 1), ("U", 2, 1)]

    run(main())


def test_rolls_segments_and_prepares_the_next_one_ahead(tmp_path, run):
    async def main():
        async with MessageStore(small_config(str(tmp_path))) as store:
            body = b"r" * 3000
            for _ in range(1000):
                store.put_message_nowait("T", 0, body)
            files = store.core.commit_log_files()
            assert len(files) >= 3
            assert files == [i << 20 for i in range(len(files))]
            for _ in range(200):  # the allocator thread creates the next segment
                if store.core.has_prepared_segment:
                    break
                await asyncio.sleep(0.01)
            assert store.core.has_prepared_segment
            r = store.get_message("T", 0, 990, 32)
            assert [m["queue_offset"] for m in rmqcore.decode_records(store.read(r.ranges))] == (
                list(range(990, 1000))
            )

    run(main())


def test_clean_shutdown_reopens_scanning_only_the_last_segment(tmp_path, run):
    async def main():
        cfg = small_config(str(tmp_path))
        async with MessageStore(cfg) as store:
            for i in range(500):
                store.put_message_nowait("T", i % 4, b"v" * 100, PROPS)
        assert not (tmp_path / "abort").exists()
        async with MessageStore(cfg) as store:
            rec = store.recovery
            assert not rec["abnormal"] and rec["checkpoint_valid"]
            assert rec["scan_from"] == rec["commit_log_end"] - rec["commit_log_end"] % (1 << 20)
            assert rec["records_dispatched"] == 0 and rec["bytes_trimmed"] == 0
            assert [store.max_offset_in_queue("T", q) for q in range(4)] == [125] * 4
            assert store.put_message_nowait("T", 0, b"next").queue_offset == 125
            assert (tmp_path / "abort").exists()

    run(main())


def test_corrupt_checkpoint_recovers_by_scanning(tmp_path, run):
    async def main():
        cfg = small_config(str(tmp_path))
        async with MessageStore(cfg) as store:
            for i in range(100):
                store.put_message_nowait("T", 0, b"%d" % i)
        with open(tmp_path / "checkpoint", "r+b") as f:
            f.seek(10)
            f.write(b"\xff\xff")
        async with MessageStore(cfg) as store:
            assert not store.recovery["checkpoint_valid"]
            assert store.recovery["records_scanned"] == 100
            assert store.max_offset_in_queue("T", 0) == 100
            recs = rmqcore.decode_records(store.read(store.get_message("T", 0, 99).ranges))
            assert recs[0]["body"] == b"99"

    run(main())


def test_a_directory_that_is_not_a_store_is_refused(tmp_path, run):
    (tmp_path / "notes.txt").write_text("my files")
    with pytest.raises(NotAStoreError, match="not a pyrmq store"):
        run(MessageStore(small_config(str(tmp_path))).start())
    assert (tmp_path / "notes.txt").read_text() == "my files"
    other = tmp_path / "other"
    (other / "commitlog").mkdir(parents=True)
    (other / "commitlog" / "segment.log").write_bytes(b"x")
    with pytest.raises(NotAStoreError):
        run(MessageStore(small_config(str(other))).start())
    assert (other / "commitlog" / "segment.log").read_bytes() == b"x"


def test_a_store_is_opened_by_one_owner_only(tmp_path, run):
    async def main():
        cfg = small_config(str(tmp_path))
        async with MessageStore(cfg):
            with pytest.raises(StoreLockedError, match="locked"):
                await MessageStore(cfg).start()

    run(main())


def test_retention_deletes_expired_segments_and_moves_min_offsets(tmp_path, run):
    async def main():
        cfg = small_config(str(tmp_path), file_reserved_time=1, delete_when="04")
        # A disk far from full, whatever this host's disk is: only time counts here.
        async with MessageStore(cfg, disk_ratio=lambda _path: 0.1) as store:
            for _i in range(1500):
                store.put_message_nowait("T", 0, b"e" * 2000, PROPS)
            files = store.core.commit_log_files()
            assert len(files) >= 3
            old = time.time() - 2 * 3600
            for start in files[:-1]:
                os.utime(tmp_path / "commitlog" / f"{start:020d}", (old, old))
            res = await store.clean_expired_files(now=_next_local(13))
            assert res.commit_log_files == 0
            res = await store.clean_expired_files(now=_next_local(4))
            assert res.commit_log_files == len(files) - 1  # never the one being written
            assert store.core.commit_log_files() == files[-1:]
            assert store.commit_log_min_offset == files[-1]
            low = store.min_offset_in_queue("T", 0)
            assert low > 0
            r = store.get_message("T", 0, 0)
            assert (r.status, r.next_begin_offset) == ("OFFSET_TOO_SMALL", low)
            r = store.get_message("T", 0, low)
            assert r.status == "FOUND"
            assert rmqcore.decode_records(store.read(r.ranges))[0]["queue_offset"] == low
            store.put_message_nowait("T", 0, b"still writing")

    run(main())


def _next_local(hour: int) -> float:
    """The next time after now that the local clock shows hour:30."""
    t = time.time()
    lt = time.localtime(t)
    cand = time.mktime((lt.tm_year, lt.tm_mon, lt.tm_mday, hour, 30, 0, 0, 0, -1))
    return cand if cand > t else cand + 24 * 3600


def test_sendfile_partial_sends_on_a_nonblocking_socket(tmp_path, run):
    async def main():
        async with MessageStore(small_config(str(tmp_path))) as store:
            for i in range(200):
                store.put_message_nowait("T", i % 2, os.urandom(3000))
            r = store.get_message("T", 0, 0, 32)
            expected = store.read(r.ranges)
            a, b = socket.socketpair()
            a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            a.setblocking(False)
            b.setblocking(False)
            received = bytearray()
            loop = asyncio.get_running_loop()

            async def reader():
                while len(received) < len(expected):
                    received.extend(await loop.sock_recv(b, 1024))

            with contextlib.closing(a), contextlib.closing(b):
                sent, _ = await asyncio.wait_for(
                    asyncio.gather(sendfile_ranges(store.core, a, r.ranges), reader()), 10
                )
            assert sent == len(expected) == r.total_bytes
            assert bytes(received) == expected

    run(main())


def test_sync_flush_reports_flush_disk_timeout_when_the_disk_is_slow(tmp_path, run):
    async def main():
        cfg = small_config(
            str(tmp_path), flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout_ms=50
        )
        async with MessageStore(cfg) as store:
            r = await store.put_message("T", 0, b"fast")
            assert r.status is PutMessageStatus.PUT_OK
            assert store.flushed_offset >= r.append.next_phys_offset
            # Occupy the flush thread, as a stalled disk would.
            stall = store._io.run("flush-commitlog", time.sleep, 0.3)
            r = await store.put_message("T", 0, b"slow")
            assert r.status is PutMessageStatus.FLUSH_DISK_TIMEOUT
            await stall
            await store.wait_durable(r.append.next_phys_offset)
            assert store.flushed_offset >= r.append.next_phys_offset

    run(main())


def test_config_loads_broker_conf_keys():
    cfg = MessageStoreConfig.from_properties(
        {
            "storePathRootDir": "/data/rmq",
            "flushDiskType": "SYNC_FLUSH",
            "mappedFileSizeCommitLog": "8388608",
            "fileReservedTime": "48",
            "messageIndexEnable": "false",
            "brokerName": "broker-a",
        }
    )
    assert cfg.store_path_root_dir == "/data/rmq"
    assert cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert cfg.mapped_file_size_commit_log == 8 << 20
    assert cfg.file_reserved_time == 48
    assert cfg.message_index_enable is False
    with pytest.raises(Exception, match="mappedFileSizeCommitLog"):
        MessageStoreConfig(mapped_file_size_commit_log=1 << 20)  # 4 MiB messages do not fit
    with pytest.raises(Exception, match="flushDiskType"):
        MessageStoreConfig.from_properties({"flushDiskType": "SOMETIMES"})


@pytest.fixture
def tiny_fs(tmp_path):
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    rc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)], capture_output=True
    ).returncode
    if rc != 0:
        pytest.skip("cannot mount a size-limited tmpfs here (needs root)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_full_disk_fails_sends_cleanly_and_recovers(tiny_fs, run):
    async def main():
        cfg = small_config(
            str(tiny_fs / "store"),
            mapped_file_size_commit_log=512 * 1024,
            max_message_size=64 * 1024,
            message_index_enable=False,
        )
        filler = tiny_fs / "filler"
        async with MessageStore(cfg) as store:
            sent = []
            with pytest.raises(DiskFullError, match="No space left"):
                for i in range(10_000):
                    sent.append(store.put_message_nowait("T", 0, b"%06d" % i + b"f" * 4000))
                    if i == 5:
                        filler.write_bytes(b"\0" * (1 << 20))  # someone else fills the disk
            end = store.commit_log_max_offset
            assert len(sent) > 5
            with pytest.raises(DiskFullError):
                store.put_message_nowait("T", 0, b"g" * 4000)
            assert store.commit_log_max_offset == end
            # Everything acknowledged is still there and readable.
            got, offset = [], 0
            for _ in range(1000):
                r = store.get_message("T", 0, offset)
                if r.status != "FOUND":
                    break
                got += rmqcore.decode_records(store.read(r.ranges))
                offset = r.next_begin_offset
            assert [m["body"][:6] for m in got] == [b"%06d" % i for i in range(len(sent))]
            filler.unlink()  # space comes back
            r = store.put_message_nowait("T", 0, b"after")
            assert r.queue_offset == len(sent)
        async with MessageStore(cfg) as store:
            assert store.max_offset_in_queue("T", 0) == len(sent) + 1

    run(main())


@pytest.mark.parametrize(
    ("ratio", "aged", "expect_deleted"),
    [
        (0.50, True, False),  # not the hour, disk fine: nothing
        (0.80, True, True),  # over diskMaxUsedSpaceRatio: expired files go at any hour
        (0.80, False, False),  # ...but only expired ones
        (0.90, False, True),  # over diskSpaceCleanForciblyRatio: the oldest go even if young
    ],
)
def test_retention_by_disk_usage(tmp_path, run, ratio, aged, expect_deleted):
    from pyrmq.storage.clean import CleanService

    if time.localtime().tm_hour == 4:
        pytest.skip("runs inside deleteWhen (04), where hour-based deletion applies too")

    async def main():
        cfg = small_config(str(tmp_path), file_reserved_time=1, delete_when="04")
        async with MessageStore(cfg) as store:
            for _ in range(800):
                store.put_message_nowait("T", 0, b"d" * 2000)
            files = store.core.commit_log_files()
            if aged:
                old = time.time() - 2 * 3600
                for start in files[:-1]:
                    os.utime(tmp_path / "commitlog" / f"{start:020d}", (old, old))
            svc = CleanService(store.core, cfg, store._io, disk_ratio=lambda _path: ratio)
            res = await svc.run_once(now=time.time())
            assert (res.commit_log_files > 0) == expect_deleted
            remaining = store.core.commit_log_files()
            assert remaining[-1] == files[-1]  # never the segment being written
            store.put_message_nowait("T", 0, b"still writing")

    run(main())


def test_async_index_builds_off_the_put_path_and_lookups_see_every_put(tmp_path, run):
    async def main():
        cfg = small_config(str(tmp_path), message_index_async=True)
        async with MessageStore(cfg) as store:
            for i in range(3000):
                store.put_message_nowait(
                    "T",
                    i % 4,
                    b"%d" % i,
                    rmqcore.encode_properties({"KEYS": f"k{i}", "UNIQ_KEY": f"{i:032X}"}),
                )
            for _ in range(500):  # the index thread catches up by itself
                if store.core.index_lag == 0:
                    break
                await asyncio.sleep(0.01)
            assert store.core.index_lag == 0
            store.put_message_nowait("T", 0, b"last", rmqcore.encode_properties({"KEYS": "k-last"}))
            assert [m["body"] for m in await store.query_message("T", "k-last")] == [b"last"]
            assert [m["body"] for m in await store.query_message("T", f"{2999:032X}")] == [b"2999"]
            assert store.core.index_lag == 0  # the lookup caught the index up
        async with MessageStore(cfg) as store:
            for i in (0, 1234, 2999):
                assert [m["body"] for m in await store.query_message("T", f"k{i}")] == [b"%d" % i]

    run(main())


def test_async_index_builds_after_a_batch_put_by_itself(tmp_path, run):
    """A batch put wakes the index thread as a single put does: its keys
    are indexed with no later put or lookup to start the build."""

    async def main():
        cfg = small_config(str(tmp_path), message_index_async=True)
        async with MessageStore(cfg) as store:
            batch = rmqcore.encode_batch(
                [(b"b%d" % i, {"KEYS": f"bk{i}", "UNIQ_KEY": f"{i:032X}"}, 0) for i in range(50)]
            )
            store.put_messages_nowait("T", 0, batch)
            # index_dispatched moves while the index thread works: if nothing
            # starts the build (the gap this pins), the wait fails as a stall
            await wait_until(
                lambda: store.core.index_lag == 0,
                "the batch's keys indexed with no later put or lookup",
                progress=lambda: store.core.index_dispatched,
            )

    run(main())
