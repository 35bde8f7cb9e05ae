"""Load helpers for the full-disk and overload scenarios: a ledger of every
send's outcome, a pipelined sender that fills it, a consumer-side collector,
message bodies that prove themselves intact, a broker's memory from /proc,
and a blkio cgroup that makes one process's disk slow."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import os
import pathlib
import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pyrmq import Message, MessageExt, Producer
from pyrmq.common.errors import BrokerError
from pyrmq.common.results import SendResult

#: digits of the id at the start of every body
ID_DIGITS = 10

# -- bodies -------------------------------------------------------------------------------------


def body(i: int, size: int) -> bytes:
    """Message i's body: its id, then bytes only i gives (incompressible,
    so nothing shrinks on the way)."""
    return b"%0*d" % (ID_DIGITS, i) + random.Random(i).randbytes(max(0, size - ID_DIGITS))


def body_id(data: bytes) -> int:
    return int(data[:ID_DIGITS])


def intact(data: bytes) -> bool:
    """True when data is exactly body(id) for the id it starts with."""
    try:
        return data == body(body_id(data), len(data))
    except ValueError:
        return False


# -- producer side -------------------------------------------------------------------------------


def error_kind(e: BaseException) -> str:
    """'code 14', 'code 2', ... for broker answers, else the class name."""
    if isinstance(e, BrokerError):
        return f"code {e.code}"
    return type(e).__name__


@dataclasses.dataclass
class Ledger:
    """Every id a producer sent, and how the send ended: acknowledged (with
    the SendResult: SEND_OK or FLUSH_DISK_TIMEOUT, both stored) or failed
    (with the exception the caller got). No id is in both, and once every
    send has settled, sent == acked | failed."""

    sent: set[int] = dataclasses.field(default_factory=set)
    acked: dict[int, SendResult] = dataclasses.field(default_factory=dict)
    failed: dict[int, BaseException] = dataclasses.field(default_factory=dict)
    #: ids in the order their outcome arrived, with it: (id, ok)
    history: list[tuple[int, bool]] = dataclasses.field(default_factory=list)
    #: acknowledgements since the last failure
    streak: int = 0

    def settle(self, i: int, result: SendResult | None, error: BaseException | None) -> None:
        assert i in self.sent and i not in self.acked and i not in self.failed, i
        if error is None:
            assert result is not None
            self.acked[i] = result
        else:
            self.failed[i] = error
        self.history.append((i, error is None))
        self.streak = self.streak + 1 if error is None else 0

    @property
    def unsettled(self) -> set[int]:
        return self.sent - self.acked.keys() - self.failed.keys()

    def failures(self) -> collections.Counter[str]:
        return collections.Counter(error_kind(e) for e in self.failed.values())

    def failed_with(self, kind: str) -> dict[int, BaseException]:
        return {i: e for i, e in self.failed.items() if error_kind(e) == kind}

    def statuses(self) -> collections.Counter[str]:
        return collections.Counter(r.send_status.name for r in self.acked.values())

    def ambiguous(self) -> set[int]:
        """Failed ids that may still be stored: a transport error or timeout
        leaves the outcome unknown; a broker's refusal does not."""
        return {i for i, e in self.failed.items() if not isinstance(e, BrokerError)}

    def check_against_stored(self, stored: set[int]) -> None:
        """The promise: every acknowledged id is stored, and everything stored
        was sent and either acknowledged or failed without a broker's answer
        (nothing appears from nowhere; no refused send was written)."""
        assert not self.unsettled, f"{len(self.unsettled)} sends never settled"
        missing = self.acked.keys() - stored
        assert not missing, f"{len(missing)} acknowledged ids not stored: {sorted(missing)[:10]}"
        extra = stored - self.acked.keys() - self.ambiguous()
        assert not extra, f"{len(extra)} stored, yet refused or never sent: {sorted(extra)[:10]}"


async def pump(
    producer: Producer,
    ledger: Ledger,
    topic: str,
    ids: Iterator[int],
    *,
    size: int,
    inflight: int,
    stop: Callable[[], bool],
    deadline: float,
) -> None:
    """Send ids (bodies of `size` bytes) with up to `inflight` sends
    outstanding, until ids run out, stop() is true or the loop time passes
    deadline; then wait for every outstanding send to settle."""
    loop = asyncio.get_running_loop()
    slots = asyncio.Semaphore(inflight)
    pending: set[asyncio.Future[SendResult]] = set()

    def done(i: int, fut: asyncio.Future[SendResult]) -> None:
        slots.release()
        pending.discard(fut)
        if fut.cancelled():
            ledger.settle(i, None, asyncio.CancelledError())
        elif fut.exception() is not None:
            ledger.settle(i, None, fut.exception())
        else:
            ledger.settle(i, fut.result(), None)

    for i in ids:
        if stop() or loop.time() > deadline:
            break
        await slots.acquire()
        if stop() or loop.time() > deadline:
            slots.release()
            break
        ledger.sent.add(i)
        msg = Message(topic, body(i, size), keys=str(i))
        try:
            fut = producer.send_async(msg)
        except Exception as e:  # refused before it left: an outcome too
            slots.release()
            ledger.settle(i, None, e)
            continue
        pending.add(fut)
        fut.add_done_callback(lambda f, i=i: done(i, f))
    if pending:
        await asyncio.wait(pending)


# -- consumer side -------------------------------------------------------------------------------


class Collector:
    """A listener (`listen`, on the event loop) that records every
    delivery: ids seen, how many times, and any body that is not intact."""

    def __init__(self) -> None:
        self.seen: collections.Counter[int] = collections.Counter()
        self.damaged: list[MessageExt] = []
        self.topics: collections.Counter[str] = collections.Counter()

    @property
    def ids(self) -> set[int]:
        return set(self.seen)

    async def listen(self, msgs: list[MessageExt], ctx: Any) -> None:
        for m in msgs:
            self.topics[m.topic] += 1
            if not intact(m.body):
                self.damaged.append(m)
                continue
            self.seen[body_id(m.body)] += 1


# -- the broker process --------------------------------------------------------------------------


def proc_memory(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon, RssFile of a process, in KiB. RssAnon is its
    heap (what an unbounded queue grows); RssFile counts the CommitLog pages
    it has mapped and touched, which grow with the store, as in RocketMQ."""
    out = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0])
    return out


class MemorySampler:
    """Samples a process's memory every `interval` s while running; `peak`
    holds the highest value of each field, `first` the first sample."""

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        self.pid = pid
        self.interval = interval
        self.first: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.samples = 0
        self._task: asyncio.Task[None] | None = None

    def sample(self) -> dict[str, int]:
        now = proc_memory(self.pid)
        if not self.first:
            self.first = dict(now)
        for k, v in now.items():
            self.peak[k] = max(self.peak.get(k, 0), v)
        self.samples += 1
        return now

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(OSError):
                self.sample()
            await asyncio.sleep(self.interval)

    async def __aenter__(self) -> MemorySampler:
        self.sample()
        self._task = asyncio.create_task(self._loop(), name="chaos:memory-sampler")
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        with contextlib.suppress(OSError):
            self.sample()

    def mib(self, key: str, which: str = "peak") -> float:
        return round((self.peak if which == "peak" else self.first).get(key, 0) / 1024, 1)


_BLKIO = pathlib.Path("/sys/fs/cgroup/blkio")


def _device_of(path: pathlib.Path) -> str:
    """major:minor of the block device holding path (the whole disk when it
    is a partition: throttling applies to the disk's queue)."""
    st = os.stat(path)
    dev = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    sys_dev = pathlib.Path(f"/sys/dev/block/{dev}")
    if (sys_dev / "partition").exists():
        dev = (sys_dev.resolve().parent / "dev").read_text().strip()
    return dev


@contextlib.contextmanager
def slow_disk(pid: int, path: pathlib.Path, bytes_per_s: int) -> Iterator[str]:
    """Make writes of process pid to the disk holding path (its msync and
    fsync: they are issued from its own threads) take at most bytes_per_s,
    with a cgroup v1 blkio throttle made for it; skip the test when this
    machine has no such controller or the path is on no block device. The
    process leaves the cgroup and the cgroup is removed afterwards."""
    if not (_BLKIO / "blkio.throttle.write_bps_device").exists():
        pytest.skip("no cgroup v1 blkio throttle here: cannot make a disk slow for one process")
    dev = _device_of(path)
    if not pathlib.Path(f"/sys/dev/block/{dev}").exists():
        pytest.skip(f"{path} is not on a block device ({dev}): cannot throttle its writes")
    cg = _BLKIO / f"pyrmq-chaos-{os.getpid()}-{pid}"
    try:
        cg.mkdir()
        (cg / "blkio.throttle.write_bps_device").write_text(f"{dev} {bytes_per_s}")
        (cg / "cgroup.procs").write_text(str(pid))
    except OSError as e:
        with contextlib.suppress(OSError):
            cg.rmdir()
        pytest.skip(f"cannot set up a blkio cgroup to slow the disk: {e}")
    try:
        yield dev
    finally:
        with contextlib.suppress(OSError):  # gone already when it exited
            (_BLKIO / "cgroup.procs").write_text(str(pid))
        with contextlib.suppress(OSError):
            cg.rmdir()
