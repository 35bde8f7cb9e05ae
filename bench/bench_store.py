"""pytest-benchmark suite for the store (rmqcore + pyrmq.storage).

Run: ``python -m pytest bench/bench_store.py --benchmark-only``
(``-k append`` etc. to pick a group; ``PYRMQ_BENCH_DIR=/path`` to measure on
another filesystem, default: pytest's tmp directory).

Groups: ``store.append`` (ASYNC_FLUSH appends), ``store.flush_sync`` (SYNC_FLUSH
with concurrent asyncio appenders), ``cq.read`` (ConsumeQueue random reads),
``store.sendfile`` (sendfile vs read + sendall to loopback TCP),
``index.query`` (IndexFile key lookups), ``index.build`` (the index thread's
work: IndexFile entries for records already stored). Each test makes one measured call of
benchmark.pedantic; one round is a whole bounded workload (e.g. 100,000
appends), so the reported times are per round and ``extra_info`` has the
messages and bytes one round handles (and the rate of the fastest round).
Appends and SYNC_FLUSH get a fresh store per round (setup/teardown are not
timed); read-only groups share one module-scoped store.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Iterator
from typing import Any

import pytest

import rmqcore
from bench import _workloads as w
from pyrmq.storage import FlushDiskType, MessageStore

#: messages per round of one append test, by body size
APPEND_MSGS = {128: 200_000, 1024: 100_000}
#: messages per round of the SYNC_FLUSH tests, by appender count
SYNC_MSGS = {1: 1_000, 8: 5_000, 64: 20_000}
#: units of the big ConsumeQueue (the report uses 10,000,000)
CQ_BIG_UNITS = int(os.environ.get("PYRMQ_BENCH_CQ_UNITS", "1000000"))
CQ_READS = 20_000
INDEX_MSGS = 100_000
INDEX_QUERIES = 2_000
#: records indexed per round of index.build (two keys each)
INDEX_BUILD_MSGS = 300_000
TIME_LIMIT_S = 60.0  # per round; every workload is also bounded by count


# -- fixtures ---------------------------------------------------------------------


@pytest.fixture(scope="session")
def bench_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    d = os.environ.get("PYRMQ_BENCH_DIR")
    if d:
        os.makedirs(d, exist_ok=True)
        return d
    return str(tmp_path_factory.mktemp("pyrmq-bench"))


@pytest.fixture(scope="module")
def realistic() -> list[bytes]:
    return w.realistic_props()


def _record(benchmark: Any, result: w.Rate, per_round: dict[str, int] | None = None,
            **more: Any) -> None:
    """extra_info: what one round handled (msgs, bytes, ``more``) and the
    fastest round's rates (msgs_per_s_best, MBps_best, and <name>_per_s_best
    for each count in per_round)."""
    benchmark.extra_info.update(msgs=result.msgs, bytes=result.bytes, **more)
    stats = getattr(getattr(benchmark, "stats", None), "stats", None)
    best = getattr(stats, "min", 0) or 0
    if best > 0:
        benchmark.extra_info["msgs_per_s_best"] = round(result.msgs / best)
        benchmark.extra_info["MBps_best"] = round(result.bytes / best / 1e6, 1)
        for name, count in (per_round or {}).items():
            benchmark.extra_info[f"{name}_per_s_best"] = round(count / best)


class _FreshStore:
    """pedantic setup/teardown for a fresh store per round."""

    def __init__(self, base: str) -> None:
        self.base = base
        self._roots: list[Any] = []

    def root(self) -> str:
        cm = w.temp_root(self.base)
        self._roots.append(cm)
        return cm.__enter__()

    def cleanup(self) -> None:
        while self._roots:
            self._roots.pop().__exit__(None, None, None)


# -- store.append -------------------------------------------------------------------

APPEND_CASES = [
    ("core.put", 0, "realistic"),
    ("core.put", 0, "none"),
    ("store.put_message_nowait", 0, "realistic"),
    ("core.put_batch", 64, "realistic"),
    ("core.put_batch", 256, "realistic"),
    ("core.put_batch", 256, "none"),
]


@pytest.mark.benchmark(group="store.append")
@pytest.mark.parametrize("body_len", [128, 1024])
@pytest.mark.parametrize(("api", "batch", "props"), APPEND_CASES,
                         ids=[f"{a}{'-' + str(b) if b else ''}-{p}" for a, b, p in APPEND_CASES])
def test_append(benchmark: Any, bench_dir: str, realistic: list[bytes], body_len: int,
                api: str, batch: int, props: str) -> None:
    """ASYNC_FLUSH appends of APPEND_MSGS messages into a fresh store with
    1 GiB CommitLog segments (first segment created and warmed in setup)."""
    body = b"\xab" * body_len
    pool = realistic if props == "realistic" else w.props_pool("none")
    n = APPEND_MSGS[body_len]
    fresh = _FreshStore(bench_dir)
    batches = w.build_batches(body, pool, batch) if batch else None

    if api == "store.put_message_nowait":
        def setup() -> tuple[tuple[Any, ...], dict[str, Any]]:
            loop = asyncio.new_event_loop()
            store = MessageStore(w.store_config(fresh.root()))
            loop.run_until_complete(store.start())
            rec = w.ready_core(store.core, body, pool[0], prepare_next=False)
            return (loop, store, rec), {}

        def target(loop: Any, store: MessageStore, rec: int) -> w.Rate:
            return loop.run_until_complete(w.append_per_call_async(
                store.put_message_nowait, body, pool, rec, n, TIME_LIMIT_S))

        def teardown(loop: Any, store: MessageStore, rec: int) -> None:
            try:
                loop.run_until_complete(store.shutdown())
            finally:
                loop.close()
                fresh.cleanup()
    else:
        def setup() -> tuple[tuple[Any, ...], dict[str, Any]]:
            core = w.open_core(fresh.root())
            rec = w.ready_core(core, body, pool[0], prepare_next=False)
            return (core, rec), {}

        def target(core: rmqcore.MessageStoreCore, rec: int) -> w.Rate:
            if batches is not None:
                return w.append_batched(core.put_batch, batches, n, TIME_LIMIT_S)
            return w.append_per_call(core.put, body, pool, rec, n, TIME_LIMIT_S)

        def teardown(core: rmqcore.MessageStoreCore, rec: int) -> None:
            try:
                core.close()
            finally:
                fresh.cleanup()

    try:
        result = benchmark.pedantic(target, setup=setup, teardown=teardown, rounds=3)
    finally:
        fresh.cleanup()
    _record(benchmark, result, body_len=body_len, api=api, batch=batch, props=props)


# -- store.flush_sync ---------------------------------------------------------------


@pytest.mark.benchmark(group="store.flush_sync")
@pytest.mark.parametrize("tasks", sorted(SYNC_MSGS))
def test_flush_sync(benchmark: Any, bench_dir: str, tasks: int) -> None:
    """SYNC_FLUSH: ``tasks`` asyncio tasks await MessageStore.put_message
    (128 B, TAGS + UNIQ_KEY) until SYNC_MSGS[tasks] are durable."""
    body = b"\xcd" * 128
    pool = w.realistic_props(4096)
    fresh = _FreshStore(bench_dir)

    def setup() -> tuple[tuple[Any, ...], dict[str, Any]]:
        loop = asyncio.new_event_loop()
        cfg = w.store_config(fresh.root(), flush_disk_type=FlushDiskType.SYNC_FLUSH)
        store = MessageStore(cfg)
        loop.run_until_complete(store.start())
        rec = w.ready_core(store.core, body, pool[0], prepare_next=False)
        loop.run_until_complete(store.put_message(w.TOPIC, 0, body, pool[0]))
        return (loop, store, rec), {}

    def target(loop: Any, store: MessageStore, rec: int) -> w.Rate:
        rate = loop.run_until_complete(
            w.sync_appenders(store, tasks, body, pool, SYNC_MSGS[tasks], TIME_LIMIT_S))
        rate.bytes = rate.msgs * rec
        return rate

    def teardown(loop: Any, store: MessageStore, rec: int) -> None:
        try:
            loop.run_until_complete(store.shutdown())
        finally:
            loop.close()
            fresh.cleanup()

    try:
        result = benchmark.pedantic(target, setup=setup, teardown=teardown, rounds=3)
    finally:
        fresh.cleanup()
    _record(benchmark, result, tasks=tasks, flushes=result.extra.get("flushes"))


# -- cq.read ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cq_core(bench_dir: str) -> Iterator[rmqcore.MessageStoreCore]:
    """A store with a 1,000-unit queue (CqSmall) and a CQ_BIG_UNITS one (CqBig)."""
    with w.temp_root(bench_dir) as root:
        core = w.open_core(root, index_enable=False)
        try:
            core.put_batch("CqBig", 0, rmqcore.encode_batch([(b"\x01", b"", 0)]))
            core.prepare_next_segment()
            w.fill_queue(core, "CqBig", CQ_BIG_UNITS - 1)
            w.fill_queue(core, "CqSmall", 1000)
            yield core
        finally:
            core.close()


@pytest.mark.benchmark(group="cq.read")
@pytest.mark.parametrize("max_msgs", [32, 1])
@pytest.mark.parametrize("queue", ["small", "big"])
def test_cq_read(benchmark: Any, cq_core: rmqcore.MessageStoreCore, queue: str,
                 max_msgs: int) -> None:
    """CQ_READS get_message calls at random offsets (same count for both sizes)."""
    topic, size = ("CqSmall", 1000) if queue == "small" else ("CqBig", CQ_BIG_UNITS)
    offsets = w.random_offsets(size, CQ_READS, max_msgs)
    result = benchmark.pedantic(w.cq_random_reads, args=(cq_core, topic, offsets, max_msgs,
                                                         TIME_LIMIT_S), rounds=5)
    _record(benchmark, result, {"calls": result.extra["calls"]}, queue_units=size,
            calls=result.extra["calls"])


# -- store.sendfile -----------------------------------------------------------------


@pytest.fixture(scope="module")
def send_core(bench_dir: str) -> Iterator[tuple[rmqcore.MessageStoreCore, dict[str, Any]]]:
    """A store with queues 0/1 interleaved record by record and queue 2
    and 3 written in batches (contiguous), 8 MiB of 1 KiB messages each in
    queues 0-2 and 100 MiB in queue 3; plus GetResult range lists (32
    records) and 1 MiB ranges."""
    with w.temp_root(bench_dir) as root:
        core = w.open_core(root, index_enable=False)
        try:
            body = b"\xee" * 1024
            for i in range(2 * 8192):
                core.put(w.TOPIC, i & 1, body)
            w.fill_for_send(core, w.TOPIC, 2, 1024, 8 * w.MIB)
            # 1 MiB ranges 4 MiB apart over ~100 MB: more than a CPU cache holds.
            w.fill_for_send(core, w.TOPIC, 3, 1024, 100 * w.MIB)
            lists: dict[str, Any] = {}
            for qid, label in ((0, "interleaved"), (2, "contiguous")):
                size = core.max_offset_in_queue(w.TOPIC, qid)
                got = [core.get_message(w.TOPIC, qid, off, 32)
                       for off in w.random_offsets(size, 128, 32)]
                lists[label] = [g.ranges for g in got if g.message_count == 32]
            end = core.commit_log_max_offset
            lists["1mib"] = [[(o, w.MIB)] for o in range(0, end - w.MIB, 4 * w.MIB + 4096)]
            yield core, lists
        finally:
            core.close()


SEND_CASES = [
    ("interleaved", "sendfile"), ("interleaved", "read_sendall"),
    ("interleaved", "read_ranges_sendall"),
    ("contiguous", "sendfile"), ("contiguous", "sendfile_coalesced"),
    ("contiguous", "read_ranges_sendall"),
    ("1mib", "sendfile"), ("1mib", "read_sendall"),
]


@pytest.mark.benchmark(group="store.sendfile")
@pytest.mark.parametrize(("ranges", "mode"), SEND_CASES,
                         ids=[f"{r}-{m}" for r, m in SEND_CASES])
def test_sendfile(benchmark: Any, send_core: tuple[rmqcore.MessageStoreCore, dict[str, Any]],
                  ranges: str, mode: str) -> None:
    """64 MiB of GetResult ranges (32 x 1 KiB records, or 1 MiB ranges) to a
    loopback socket drained by a thread; timing ends when all arrived."""
    core, lists = send_core
    per_list = sum(s for _, s in lists[ranges][0])
    result = benchmark.pedantic(w.send_ranges, args=(core, mode, lists[ranges],
                                                     (64 * w.MIB) // per_list, TIME_LIMIT_S),
                                rounds=5)
    _record(benchmark, result, ranges=ranges, mode=mode, lists=result.extra["rounds"])


# -- index.query --------------------------------------------------------------------


@pytest.fixture(scope="module")
def index_core(bench_dir: str) -> Iterator[tuple[rmqcore.MessageStoreCore, list[str], int]]:
    """A store with INDEX_MSGS 128 B messages, each with its own UNIQ_KEY."""
    with w.temp_root(bench_dir) as root:
        core = w.open_core(root)
        try:
            keys = w.uniq_keys(INDEX_MSGS, seed=3)
            body = b"\x11" * 128
            rec = 0
            for i, k in enumerate(keys):
                props = rmqcore.encode_properties({"TAGS": "TagA", "UNIQ_KEY": k})
                rec = core.put(w.TOPIC, i % w.QUEUES, body, props).wrote_bytes
            yield core, keys, rec
        finally:
            core.close()


def _query(core: rmqcore.MessageStoreCore, keys: list[str], decode: bool, rec: int) -> w.Rate:
    found = 0
    query = core.query_message_offsets
    start = time.perf_counter()
    for key in keys:
        offsets = query(w.TOPIC, key)
        found += len(offsets)
        if decode:
            for off in offsets:
                core.look_message_by_offset(off)
    return w.Rate(found, found * rec, time.perf_counter() - start, {"queries": len(keys)})


@pytest.mark.benchmark(group="index.query")
@pytest.mark.parametrize("decode", [False, True], ids=["offsets", "offsets+decode"])
@pytest.mark.parametrize("hit", [True, False], ids=["hit", "miss"])
def test_index_query(benchmark: Any, index_core: tuple[rmqcore.MessageStoreCore, list[str], int],
                     hit: bool, decode: bool) -> None:
    """INDEX_QUERIES lookups of stored (hit) or never-stored (miss) UNIQ_KEYs;
    with decode, each found record is also decoded (MessageStore.query_message)."""
    core, keys, rec = index_core
    rng = random.Random(5)
    if hit:
        sample = rng.sample(keys, INDEX_QUERIES)
    else:
        stored = set(keys)
        sample = [k for k in w.uniq_keys(INDEX_QUERIES * 2, seed=99) if k not in stored]
        sample = sample[:INDEX_QUERIES]
    result = benchmark.pedantic(_query, args=(core, sample, decode, rec), rounds=5)
    if hit:
        assert result.msgs == len(sample)
    _record(benchmark, result, {"queries": len(sample)}, queries=len(sample), hit=hit,
            decode=decode)


# -- index.build --------------------------------------------------------------------


@pytest.mark.benchmark(group="index.build")
@pytest.mark.parametrize("slots", [rmqcore.DEFAULT_INDEX_HASH_SLOT_NUM, 4096],
                         ids=["default-slots", "4096-slots"])
def test_index_build(benchmark: Any, bench_dir: str, slots: int) -> None:
    """build_index over INDEX_BUILD_MSGS stored 128 B records, each with a
    UNIQ_KEY and one KEYS item (the C++ client's sends), as the index thread
    builds them (index_async). Setup stores the records and makes the first
    IndexFile (with RocketMQ's 5M hash slots: 420 MB, warmed), untimed.
    With 4096 slots the slot table stays in the cache: the difference is
    what the slots' cache misses cost."""
    keys = w.uniq_keys(INDEX_BUILD_MSGS, seed=11)
    body = b"\x22" * 128
    fresh = _FreshStore(bench_dir)

    def setup() -> tuple[tuple[Any, ...], dict[str, Any]]:
        core = w.open_core(fresh.root(), index_async=True, index_hash_slot_num=slots)
        for i, k in enumerate(keys):
            props = rmqcore.encode_properties({"UNIQ_KEY": k, "KEYS": f"order-{i}"})
            core.put(w.TOPIC, i % w.QUEUES, body, props)
        core.build_index(1)
        return (core,), {}

    def target(core: rmqcore.MessageStoreCore) -> w.Rate:
        start = time.perf_counter()
        done = 1
        while done < len(keys):
            n = core.build_index(65536)
            assert n > 0, f"the build stopped after {done} records"
            done += n
        return w.Rate(done - 1, 0, time.perf_counter() - start)

    def teardown(core: rmqcore.MessageStoreCore) -> None:
        core.close()
        fresh.cleanup()

    result = benchmark.pedantic(target, setup=setup, teardown=teardown, rounds=3)
    _record(benchmark, result, slots=slots)
    if result.secs > 0:
        benchmark.extra_info["ns_per_record"] = round(result.secs / result.msgs * 1e9)
