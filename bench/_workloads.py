"""Store workloads shared by bench/bench_store.py (pytest-benchmark) and
bench/store_report.py (the one-run report).

Every loop here is bounded by a message/byte/call count and by wall time;
every store lives in a temp directory that is removed in a ``finally``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import mmap
import os
import random
import shutil
import socket
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import rmqcore
from pyrmq.storage import FlushDiskType, MessageStore, MessageStoreConfig

TOPIC = "BenchTopic"
QUEUES = 4
GIB = 1 << 30
MIB = 1 << 20
#: messages between two wall-clock checks (and event-loop yields) in per-call loops
CHUNK = 4096
#: distinct UNIQ_KEYs cycled by the append workloads
KEY_POOL = 1 << 16


# -- stores -----------------------------------------------------------------


@contextlib.contextmanager
def temp_root(base_dir: str | None, prefix: str = "pyrmq-bench-") -> Iterator[str]:
    """Yield a store root inside a new temp directory; remove it afterwards."""
    parent = tempfile.mkdtemp(prefix=prefix, dir=base_dir)
    try:
        yield os.path.join(parent, "store")
    finally:
        shutil.rmtree(parent, ignore_errors=True)
        settle(os.path.dirname(parent))


def settle(directory: str) -> None:
    """fsync ``directory``: on ext4 this waits for a journal commit, so the
    deletion of one case's store (block freeing and, mounted with
    ``discard``, discards) is committed before the next case is measured."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def open_core(root: str, **kw: Any) -> rmqcore.MessageStoreCore:
    """A MessageStoreCore with the production defaults (1 GiB CommitLog
    segments, warmed mapped files, index on) unless overridden."""
    kw.setdefault("commit_log_file_size", rmqcore.DEFAULT_COMMIT_LOG_FILE_SIZE)
    return rmqcore.MessageStoreCore(root, **kw)


def store_config(root: str, **kw: Any) -> MessageStoreConfig:
    """MessageStoreConfig with production defaults rooted at ``root``."""
    return MessageStoreConfig(store_path_root_dir=root, **kw)


def ready_core(core: rmqcore.MessageStoreCore, body: bytes, props: bytes,
               prepare_next: bool = True) -> int:
    """Create (and warm) the first CommitLog segment with one put and, if
    prepare_next, the next one ahead of need as the broker's allocate
    service would; return the record size of that put. Call before timing."""
    r = core.put(TOPIC, 0, body, props)
    if prepare_next:
        core.prepare_next_segment()
    return int(r.wrote_bytes)


# -- message shapes -----------------------------------------------------------


def uniq_keys(n: int, seed: int = 7) -> list[str]:
    """n distinct 32-hex-digit UNIQ_KEYs (RocketMQ client msgIds are 32 hex)."""
    rng = random.Random(seed)
    keys: set[str] = set()
    while len(keys) < n:
        keys.add(rng.randbytes(16).hex().upper())
    return sorted(keys)


def realistic_props(n: int = KEY_POOL, tag: str = "TagA", seed: int = 7) -> list[bytes]:
    """n encoded property strings (TAGS + a distinct UNIQ_KEY), all one length."""
    return [rmqcore.encode_properties({"TAGS": tag, "UNIQ_KEY": k}) for k in uniq_keys(n, seed)]


def props_pool(kind: str, n: int = KEY_POOL) -> list[bytes]:
    """``"realistic"``: TAGS + UNIQ_KEY; ``"none"``: empty properties."""
    if kind == "none":
        return [b""]
    if kind == "realistic":
        return realistic_props(n)
    raise ValueError(f"unknown properties kind {kind!r}")


def build_batches(body: bytes, pool: Sequence[bytes], batch: int, queues: int = QUEUES,
                  max_keys: int = KEY_POOL) -> list[tuple[int, bytes]]:
    """(queue_id, batch body) pairs that together use min(len(pool), max_keys)
    distinct properties (at least one batch per queue)."""
    nbatches = max(queues, min(len(pool), max_keys) // batch)
    out = []
    for j in range(nbatches):
        items = [(body, pool[(j * batch + k) % len(pool)], 0) for k in range(batch)]
        out.append((j % queues, rmqcore.encode_batch(items)))
    return out


# -- results --------------------------------------------------------------------


@dataclasses.dataclass
class Rate:
    """msgs appended (or sent), stored bytes and seconds of one timed run."""

    msgs: int
    bytes: int
    secs: float
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def msgs_per_s(self) -> float:
        return self.msgs / self.secs if self.secs > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.secs / 1e6 if self.secs > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"msgs": self.msgs, "bytes": self.bytes, "secs": self.secs,
                "msgs_per_s": self.msgs_per_s, "MBps": self.mb_per_s, **self.extra}


# -- appends ----------------------------------------------------------------------


def _call_chunks(pool: Sequence[bytes], queues: int) -> list[list[tuple[int, bytes]]]:
    n = max(len(pool), CHUNK)
    calls = [(i % queues, pool[i % len(pool)]) for i in range(n)]
    return [calls[i:i + CHUNK] for i in range(0, n, CHUNK)]


def _per_call_chunks(put: Callable[..., Any], body: bytes, pool: Sequence[bytes],
                     record_size: int, max_msgs: int, time_limit_s: float,
                     queues: int) -> Iterator[None]:
    """The per-call append loop, one CHUNK of puts per step (so an asyncio
    caller can yield between chunks); returns the Rate when done."""
    chunks = _call_chunks(pool, queues)
    msgs = 0
    last = None
    start = time.perf_counter()
    deadline = start + time_limit_s
    for k in range(max_msgs // CHUNK + len(chunks) + 1):
        chunk = chunks[k % len(chunks)]
        if msgs + len(chunk) > max_msgs:
            chunk = chunk[:max_msgs - msgs]
        for qid, props in chunk:
            last = put(TOPIC, qid, body, props)
        msgs += len(chunk)
        if msgs >= max_msgs or time.perf_counter() > deadline:
            break
        yield
    secs = time.perf_counter() - start
    if last is not None and last.wrote_bytes != record_size:
        raise AssertionError(f"record size changed: {last.wrote_bytes} != {record_size}")
    return Rate(msgs, msgs * record_size, secs)


def append_per_call(put: Callable[..., Any], body: bytes, pool: Sequence[bytes],
                    record_size: int, max_msgs: int, time_limit_s: float,
                    queues: int = QUEUES) -> Rate:
    """Call put(TOPIC, qid, body, props) one message at a time until max_msgs
    or time_limit_s (checked every CHUNK messages)."""
    steps = _per_call_chunks(put, body, pool, record_size, max_msgs, time_limit_s, queues)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


async def append_per_call_async(put: Callable[..., Any], body: bytes, pool: Sequence[bytes],
                                record_size: int, max_msgs: int, time_limit_s: float,
                                queues: int = QUEUES) -> Rate:
    """append_per_call for MessageStore.put_message_nowait: the same loop,
    yielding to the event loop every CHUNK messages so the store's flush and
    allocate services run as they would in the broker."""
    steps = _per_call_chunks(put, body, pool, record_size, max_msgs, time_limit_s, queues)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value
        await asyncio.sleep(0)


def append_batched(put_batch: Callable[..., Any], batches: Sequence[tuple[int, bytes]],
                   max_msgs: int, time_limit_s: float) -> Rate:
    """put_batch(TOPIC, qid, body) over the batches, cyclically, until
    max_msgs or time_limit_s; bytes are the sum of AppendResult.wrote_bytes."""
    msgs = nbytes = 0
    start = time.perf_counter()
    deadline = start + time_limit_s
    for k in range(max_msgs + 1):
        qid, data = batches[k % len(batches)]
        r = put_batch(TOPIC, qid, data)
        msgs += r.count
        nbytes += r.wrote_bytes
        if msgs >= max_msgs or time.perf_counter() > deadline:
            break
    return Rate(msgs, nbytes, time.perf_counter() - start)


@dataclasses.dataclass(frozen=True)
class AppendCase:
    """One ASYNC_FLUSH append measurement on a fresh store."""

    body_len: int
    props: str = "realistic"  # or "none"
    # "core.put", "core.put_batch", "store.put_message_nowait", "store.put_messages_nowait"
    api: str = "core.put"
    batch: int = 0
    index: bool = True
    index_async: bool = False

    @property
    def name(self) -> str:
        how = f"{self.api}({self.batch})" if self.batch else self.api
        props = "TAGS+UNIQ_KEY" if self.props == "realistic" else "no props"
        idx = "" if self.index else ", index off"
        if self.index and self.index_async:
            idx = ", index thread"
        return f"{self.body_len} B {how}, {props}{idx}"


def run_append_case(base_dir: str | None, case: AppendCase, max_bytes: int,
                    time_limit_s: float, pool: Sequence[bytes] | None = None) -> Rate:
    """Open a fresh store, ready it (outside the timing), run the case,
    close and remove the store. max_bytes bounds the CommitLog bytes written
    (keep it below two segments: one roll, into the prepared segment)."""
    body = b"\xab" * case.body_len
    pool = pool if pool is not None else props_pool(case.props)
    # A second segment is needed only when the run may fill the first one.
    prepare = max_bytes > rmqcore.DEFAULT_COMMIT_LOG_FILE_SIZE - 16 * MIB
    with temp_root(base_dir) as root:
        if case.api.startswith("store."):
            cfg = store_config(root, message_index_enable=case.index,
                               message_index_async=case.index_async)
            if case.api == "store.put_messages_nowait":
                batches = build_batches(body, pool, case.batch)
                return asyncio.run(_run_store_batched(cfg, body, pool, batches, max_bytes,
                                                      time_limit_s, prepare))
            return asyncio.run(_run_store_nowait(cfg, body, pool, max_bytes, time_limit_s,
                                                 prepare))
        core = open_core(root, index_enable=case.index)
        try:
            rec = ready_core(core, body, pool[0], prepare)
            max_msgs = max(1, max_bytes // rec)
            if case.api == "core.put":
                rate = append_per_call(core.put, body, pool, rec, max_msgs, time_limit_s)
            elif case.api == "core.put_batch":
                batches = build_batches(body, pool, case.batch)
                rate = append_batched(core.put_batch, batches, max_msgs, time_limit_s)
            else:
                raise ValueError(f"unknown api {case.api!r}")
            rate.extra["record_bytes"] = rec
            return rate
        finally:
            core.close()


async def _run_store_nowait(cfg: MessageStoreConfig, body: bytes, pool: Sequence[bytes],
                            max_bytes: int, time_limit_s: float, prepare: bool) -> Rate:
    async with MessageStore(cfg) as store:
        rec = ready_core(store.core, body, pool[0], prepare)
        rate = await append_per_call_async(store.put_message_nowait, body, pool, rec,
                                           max(1, max_bytes // rec), time_limit_s)
        rate.extra["record_bytes"] = rec
        return rate


async def _run_store_batched(cfg: MessageStoreConfig, body: bytes, pool: Sequence[bytes],
                             batches: Sequence[tuple[int, bytes]], max_bytes: int,
                             time_limit_s: float, prepare: bool) -> Rate:
    """Batches through MessageStore.put_messages_nowait, yielding to the loop
    every 32 batches so the store's services (allocator, index) run."""
    async with MessageStore(cfg) as store:
        rec = ready_core(store.core, body, pool[0], prepare)
        max_msgs = max(1, max_bytes // rec)
        msgs = nbytes = 0
        start = time.perf_counter()
        deadline = start + time_limit_s
        i = 0
        while msgs < max_msgs and time.perf_counter() < deadline:
            qid, batch = batches[i % len(batches)]
            r = store.put_messages_nowait("BenchTopic", qid, batch)
            msgs += r.count
            nbytes += r.wrote_bytes
            i += 1
            if i % 32 == 0:
                await asyncio.sleep(0)
        rate = Rate(msgs, nbytes, time.perf_counter() - start)
        rate.extra["record_bytes"] = rec
        return rate


# -- SYNC_FLUSH ---------------------------------------------------------------------


async def sync_appenders(store: MessageStore, tasks: int, body: bytes, pool: Sequence[bytes],
                         max_msgs: int, time_limit_s: float) -> Rate:
    """``tasks`` coroutines each awaiting MessageStore.put_message (durable
    in SYNC_FLUSH) in a loop, until max_msgs in total or time_limit_s."""
    state = {"count": 0, "stop": False}
    gc = getattr(store, "_group_commit", None)  # for the flush count only
    flushes0 = getattr(gc, "flush_count", 0)

    async def writer(k: int) -> None:
        i = k
        while not state["stop"] and state["count"] < max_msgs:
            r = await store.put_message(TOPIC, i % QUEUES, body, pool[i % len(pool)])
            if not r.ok:
                raise RuntimeError(f"put_message: {r.status}")
            state["count"] += 1
            i += tasks

    def stop() -> None:
        state["stop"] = True

    start = time.perf_counter()
    timer = asyncio.get_running_loop().call_later(time_limit_s, stop)
    try:
        await asyncio.wait_for(asyncio.gather(*(writer(k) for k in range(tasks))),
                               time_limit_s + 30)
    finally:
        timer.cancel()
    secs = time.perf_counter() - start
    flushes = getattr(gc, "flush_count", 0) - flushes0
    rate = Rate(state["count"], 0, secs, {"tasks": tasks, "flushes": flushes})
    return rate


def run_sync_case(base_dir: str | None, tasks: int, body_len: int, max_msgs: int,
                  time_limit_s: float, pool: Sequence[bytes] | None = None) -> Rate:
    """SYNC_FLUSH appenders on a fresh MessageStore (removed afterwards)."""
    body = b"\xcd" * body_len
    pool = pool if pool is not None else realistic_props(4096)

    async def main(root: str) -> Rate:
        cfg = store_config(root, flush_disk_type=FlushDiskType.SYNC_FLUSH)
        async with MessageStore(cfg) as store:
            rec = ready_core(store.core, body, pool[0], prepare_next=False)
            await store.put_message(TOPIC, 0, body, pool[0])  # settle the first flush
            rate = await sync_appenders(store, tasks, body, pool, max_msgs, time_limit_s)
            rate.bytes = rate.msgs * rec
            rate.extra["record_bytes"] = rec
            return rate

    with temp_root(base_dir) as root:
        return asyncio.run(main(root))


# -- ConsumeQueue --------------------------------------------------------------------


def fill_queue(core: rmqcore.MessageStoreCore, topic: str, units: int, batch: int = 4096,
               progress: Callable[[int], None] | None = None, every: int = 1_000_000) -> float:
    """Append ``units`` 1-byte messages to (topic, 0) with put_batch; return seconds."""
    full = rmqcore.encode_batch([(b"\x01", b"", 0)] * batch)
    done = 0
    next_report = every
    start = time.perf_counter()
    while done < units:
        n = min(batch, units - done)
        data = full if n == batch else rmqcore.encode_batch([(b"\x01", b"", 0)] * n)
        r = core.put_batch(topic, 0, data)
        if r.rolled:
            core.prepare_next_segment()
        done += r.count
        if progress is not None and done >= next_report:
            progress(done)
            next_report += every
    return time.perf_counter() - start


def random_offsets(size: int, count: int, max_msgs: int, seed: int = 11) -> list[int]:
    """count random queue offsets in [0, size - max_msgs]."""
    rng = random.Random(seed)
    hi = max(0, size - max_msgs)
    return [rng.randint(0, hi) for _ in range(count)]


def cq_random_reads(core: rmqcore.MessageStoreCore, topic: str, offsets: Sequence[int],
                    max_msgs: int, time_limit_s: float) -> Rate:
    """get_message(topic, 0, off, max_msgs) at each offset (until time_limit_s);
    Rate.msgs counts units returned, extra['calls'] the calls made."""
    get = core.get_message
    units = calls = 0
    start = time.perf_counter()
    deadline = start + time_limit_s
    for k in range(0, len(offsets), CHUNK):
        for off in offsets[k:k + CHUNK]:
            units += len(get(topic, 0, off, max_msgs).ranges)
        calls += len(offsets[k:k + CHUNK])
        if time.perf_counter() > deadline:
            break
    secs = time.perf_counter() - start
    return Rate(units, units * rmqcore.CQ_STORE_UNIT_SIZE, secs, {"calls": calls})


def cq_sequential_reads(core: rmqcore.MessageStoreCore, topic: str, start: int, calls: int,
                        max_msgs: int, time_limit_s: float) -> Rate:
    """A consumer walking the queue: get_message from start, then from each
    next_begin_offset, back to 0 before the end (no empty calls); `calls`
    calls at most."""
    size = core.max_offset_in_queue(topic, 0)
    get = core.get_message
    units = done = 0
    off = start
    begin = time.perf_counter()
    deadline = begin + time_limit_s
    while done < calls:
        for _ in range(min(CHUNK, calls - done)):
            r = get(topic, 0, off, max_msgs)
            units += len(r.ranges)
            off = r.next_begin_offset if r.next_begin_offset < size else 0
        done += min(CHUNK, calls - done)
        if time.perf_counter() > deadline:
            break
    secs = time.perf_counter() - begin
    return Rate(units, units * rmqcore.CQ_STORE_UNIT_SIZE, secs, {"calls": done})


def mmap_random_reads(directory: str, units: int, offsets: Sequence[int],
                      time_limit_s: float) -> float:
    """Reference for cq_random_reads: ns per 20-byte slice at random unit
    offsets of a file mapping of units * 20 bytes in ``directory`` (page
    cache, 4 KiB pages, as ConsumeQueue files), from a Python loop."""
    size = max(units * rmqcore.CQ_STORE_UNIT_SIZE, mmap.PAGESIZE)
    fd, path = tempfile.mkstemp(prefix=".pyrmq-bench-mmap-", dir=directory)
    try:
        chunk = b"\x5a" * MIB
        for pos in range(0, size, MIB):
            os.write(fd, chunk[:min(MIB, size - pos)])
        with mmap.mmap(fd, size) as m:
            unit = rmqcore.CQ_STORE_UNIT_SIZE
            n = 0
            start = time.perf_counter()
            deadline = start + time_limit_s
            for k in range(0, len(offsets), CHUNK):
                for off in offsets[k:k + CHUNK]:
                    p = off * unit
                    m[p:p + unit]
                n += len(offsets[k:k + CHUNK])
                if time.perf_counter() > deadline:
                    break
            return (time.perf_counter() - start) / max(1, n) * 1e9
    finally:
        os.close(fd)
        os.unlink(path)


# -- sendfile -----------------------------------------------------------------------


class Drain:
    """A loopback TCP connection whose receiving end a thread drains until
    ``expected`` bytes arrived (or EOF / time limit)."""

    def __init__(self, expected: int, time_limit_s: float = 60.0) -> None:
        self.expected = expected
        self.received = 0
        with socket.create_server(("127.0.0.1", 0)) as server:
            server.settimeout(time_limit_s)
            self.sock = socket.create_connection(server.getsockname(), timeout=time_limit_s)
            self._peer, _ = server.accept()
        # Blocking, so that sendfile/sendall send everything, but bounded by
        # SO_SNDTIMEO in case the receiver stops.
        self.sock.settimeout(None)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO,
                             struct.pack("ll", int(time_limit_s), 0))
        self._peer.settimeout(time_limit_s)
        self._deadline = time.perf_counter() + time_limit_s
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        buf = memoryview(bytearray(MIB))
        try:
            for _ in range(self.expected + 1):
                if self.received >= self.expected or time.perf_counter() > self._deadline:
                    return
                n = self._peer.recv_into(buf)
                if n == 0:
                    return
                self.received += n
        except OSError:
            pass

    def wait(self) -> int:
        """Wait for the drain thread; returns the bytes it received."""
        self._thread.join(max(0.0, self._deadline - time.perf_counter()) + 1.0)
        return self.received

    def close(self) -> None:
        self.sock.close()
        self._peer.close()
        self._thread.join(5.0)

    def __enter__(self) -> Drain:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def coalesce(ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Merge CommitLog ranges that follow each other into one."""
    out: list[list[int]] = []
    for off, size in ranges:
        if out and out[-1][0] + out[-1][1] == off:
            out[-1][1] += size
        else:
            out.append([off, size])
    return [(o, s) for o, s in out]


SEND_MODES = ("sendfile", "sendfile_coalesced", "read_sendall", "read_ranges_sendall")


def send_ranges(core: rmqcore.MessageStoreCore, mode: str,
                range_lists: Sequence[Sequence[tuple[int, int]]], max_rounds: int,
                time_limit_s: float) -> Rate:
    """Send GetResult ranges to a drained loopback socket, one range list per
    round, until max_rounds or time_limit_s; timing ends when the receiver
    has every byte. Rate.msgs counts ranges sent (records), extra['rounds']
    the range lists. Modes: sendfile (SegmentPin.sendfile per range),
    sendfile_coalesced (adjacent ranges merged first), read_sendall
    (core.read + sendall per range), read_ranges_sendall (one joined copy
    and one sendall per list). Ranges of a list must share one segment."""
    if mode not in SEND_MODES:
        raise ValueError(f"unknown mode {mode!r}")
    per_round = [sum(s for _, s in rl) for rl in range_lists]
    full, part = divmod(max_rounds, len(per_round))
    budget = full * sum(per_round) + sum(per_round[:part])
    with Drain(budget, time_limit_s + 30) as drain:
        fd = drain.sock.fileno()
        sendall = drain.sock.sendall
        read = core.read
        sent = records = rounds = 0
        start = time.perf_counter()
        deadline = start + time_limit_s
        for k in range(max_rounds):
            rl = range_lists[k % len(range_lists)]
            if mode.startswith("sendfile"):
                todo = coalesce(rl) if mode == "sendfile_coalesced" else rl
                with core.pin(todo[0][0]) as pin:
                    for off, size in todo:
                        n = pin.sendfile(fd, off, size)
                        if n != size:
                            raise RuntimeError(f"sendfile sent {n} of {size}")
            elif mode == "read_sendall":
                for off, size in rl:
                    sendall(read(off, size))
            else:
                sendall(core.read_ranges(rl))
            sent += per_round[k % len(per_round)]
            records += len(rl)
            rounds += 1
            if time.perf_counter() > deadline:
                break
        drain.sock.shutdown(socket.SHUT_WR)
        drain.expected = sent
        got = drain.wait()
        secs = time.perf_counter() - start
    if got != sent:
        raise RuntimeError(f"receiver got {got} of {sent} bytes")
    return Rate(records, sent, secs, {"rounds": rounds})


def fill_for_send(core: rmqcore.MessageStoreCore, topic: str, queue_id: int, body_len: int,
                  total_bytes: int, batch: int = 256) -> int:
    """Append ~total_bytes of body_len-byte messages to (topic, queue_id) in
    batches (so that the queue's records follow each other); return count."""
    data = rmqcore.encode_batch([(b"\xee" * body_len, b"", 0)] * batch)
    n = 0
    for _ in range(total_bytes // (body_len * batch) + 1):
        r = core.put_batch(topic, queue_id, data)
        n += r.count
    return n
