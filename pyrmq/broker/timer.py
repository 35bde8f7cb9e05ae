"""TimerMessageService: messages due at a time of the sender's choosing
(RocketMQ 5's timer: 5.x ``delivery_timestamp``, 4.x properties
``TIMER_DELIVER_MS`` and ``TIMER_DELAY_SEC``), up to ``timerMaxDelaySec``
(3 days) ahead, to the second, with nothing held in memory but the minute
being delivered.

A timed message is stored as it arrives, under ``rmq_sys_wheel_timer``
queue 0 with REAL_TOPIC and REAL_QID (as a delay level parks a message in
SCHEDULE_TOPIC_XXXX). This service reads that queue in order and files each
message under the minute it is due in:

``<store>/timerwheel/<minute>.bin``
    16-byte entries, big-endian: ``deliver_ms`` (int64) and the message's
    offset in rmq_sys_wheel_timer queue 0 (int64); appended in arrival
    order. ``minute`` is deliver_ms // 60000.
``<store>/timerwheel/checkpoint``
    32 bytes, four int64: the timer queue offset filed up to (exclusive);
    the minute being delivered; (deliver_ms, queue offset) of the last
    message delivered in it. Written after every filing and every
    delivery (no fsync: a process crash keeps the page cache).

Each minute's file is read when its minute comes, sorted by (deliver_ms,
offset) and duplicates dropped (a crash between filing and checkpoint files
a message twice); messages are delivered in that order once due, each
stored again in its real topic and queue, then the file is deleted. After
a crash the one delivery that may have been stored without its checkpoint
is looked up in the IndexFiles (by UNIQ_KEY in its real topic) before it
is stored again: delivered once. A message due in a minute already passed
(late filing, downtime) is delivered at once."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import os
import struct
import time
from collections.abc import Callable
from typing import Any

import rmqcore
from pyrmq.common.errors import DiskFullError, StoreError
from pyrmq.common.message import decode_messages
from pyrmq.storage import MessageStore

log = logging.getLogger("pyrmq.broker.timer")

TIMER_TOPIC = "rmq_sys_wheel_timer"
#: properties a delivered message no longer carries
_DROP = ("REAL_TOPIC", "REAL_QID", "TIMER_DELAY_SEC")
_ENTRY = struct.Struct(">qq")
_CHECKPOINT = struct.Struct(">qqqq")
#: the longest the service sleeps (s) when nothing is due sooner; it wakes
#: for the next due message, at a minute's end, and at once when a timed
#: message arrives (it polled every 50 ms before: 20 wake-ups a second of
#: an idle broker)
IDLE_WAIT = 1.0
#: minutes walked per tick while catching up after downtime
CATCH_UP_MINUTES = 600
READ_BATCH = 64


class TimerMessageService:
    def __init__(
        self, store: MessageStore, store_root: str, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.dir = os.path.join(store_root, "timerwheel")
        self._clock = clock
        self._checkpoint_fd = -1
        self.filed_to = 0
        self.minute = -1
        self.done: tuple[int, int] = (-1, -1)
        #: the minute being delivered, sorted: (deliver_ms, offset)
        self._current: list[tuple[int, int]] | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        #: after a restart, the first delivery is checked against the index
        self._check_first = False
        self.delivered = 0
        self.skipped_duplicates = 0

    # -- lifecycle -----------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._task is not None

    async def start(self) -> None:
        self._current = None
        os.makedirs(self.dir, exist_ok=True)
        path = os.path.join(self.dir, "checkpoint")
        self._checkpoint_fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        raw = os.pread(self._checkpoint_fd, _CHECKPOINT.size, 0)
        if len(raw) == _CHECKPOINT.size:
            self.filed_to, self.minute, done_ms, done_off = _CHECKPOINT.unpack(raw)
            self.done = (done_ms, done_off)
            self._check_first = True
        if self.minute < 0:
            self.minute = int(self._clock() * 1000) // 60000
            self._save()
        self.store.add_arrival_listener(self._arrived, TIMER_TOPIC)
        self._task = asyncio.get_running_loop().create_task(self._run(), name="pyrmq:timer")

    async def shutdown(self) -> None:
        self.store.remove_arrival_listener(self._arrived, TIMER_TOPIC)
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._checkpoint_fd >= 0:
            os.close(self._checkpoint_fd)
            self._checkpoint_fd = -1

    def _save(self) -> None:
        data = _CHECKPOINT.pack(self.filed_to, self.minute, *self.done)
        os.pwrite(self._checkpoint_fd, data, 0)

    def _arrived(self, topic: str, queue_id: int, max_offset: int) -> None:
        self._wake.set()  # told of TIMER_TOPIC only

    async def _run(self) -> None:
        while True:
            # cleared before the work: an arrival while it runs is not lost
            self._wake.clear()
            try:
                await self.file_new()
                await self.deliver_due()
            except asyncio.CancelledError:
                raise
            except (StoreError, DiskFullError, OSError) as e:
                log.error("timer: %s; tried again", e)
                await asyncio.sleep(1.0)
            except Exception:
                log.exception("timer: failed; tried again")
                await asyncio.sleep(1.0)
            wait = self._next_wait()
            if wait > 0:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._wake.wait()

    def _next_wait(self) -> float:
        """Seconds until the first message of the minute is due, or the
        minute ends; IDLE_WAIT at most."""
        cur = self._current
        due = cur[0][0] if cur else (self.minute + 1) * 60000
        return min(IDLE_WAIT, max(0.0, (due - self._clock() * 1000) / 1000))

    # -- filing ------------------------------------------------------------------------

    def _file(self, minute: int) -> str:
        return os.path.join(self.dir, f"{minute}.bin")

    async def file_new(self) -> int:
        """File the timer queue's new messages under their minutes; how many."""
        n = 0
        off = self.filed_to
        appends: dict[int, bytearray] = {}
        for _ in range(1000):
            r = self.store.get_message(TIMER_TOPIC, 0, off, READ_BATCH)
            if not r.ranges:
                if r.next_begin_offset > off:  # cleaned from under us: skip ahead
                    off = r.next_begin_offset
                    continue
                break
            for m in decode_messages(self.store.read(r.ranges)):
                due = _due_ms(m.properties, m.store_timestamp)
                if due // 60000 < self.minute or (
                    due // 60000 == self.minute and (due, m.queue_offset) <= self.done
                ):
                    # due in a minute (or at a point) already delivered: as
                    # soon as possible, after what was delivered
                    due = max(self.minute * 60000, self.done[0] + 1)
                entry = (due, m.queue_offset)
                minute = due // 60000
                if minute == self.minute and self._current is not None:
                    bisect.insort(self._current, entry)
                appends.setdefault(minute, bytearray()).extend(_ENTRY.pack(*entry))
                n += 1
            off = r.next_begin_offset
        if appends:
            # minute files: appended off the event loop
            await asyncio.to_thread(self._append, appends)
        if off != self.filed_to:
            self.filed_to = off
            self._save()
        return n

    # -- delivery ----------------------------------------------------------------------

    def _append(self, appends: dict[int, bytearray]) -> None:
        for minute, data in appends.items():
            fd = os.open(self._file(minute), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)

    def _load(self) -> list[tuple[int, int]]:
        try:
            with open(self._file(self.minute), "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return []
        usable = len(data) - len(data) % _ENTRY.size
        entries = {_ENTRY.unpack_from(data, i) for i in range(0, usable, _ENTRY.size)}
        return sorted(e for e in entries if e > self.done)

    async def deliver_due(self) -> int:
        now = int(self._clock() * 1000)
        n = 0
        for _ in range(CATCH_UP_MINUTES):
            if self._current is None:
                # a busy minute's file is megabytes: read off the event loop
                self._current = await asyncio.to_thread(self._load)
            cur = self._current
            while cur and cur[0][0] <= now:
                entry = cur.pop(0)
                if self._check_first:
                    self._check_first = False
                    if await self._already_delivered(entry):
                        self.skipped_duplicates += 1
                        self.done = entry
                        self._save()
                        continue
                self._deliver(entry)
                self.done = entry
                self._save()
                n += 1
            if cur or now < (self.minute + 1) * 60000:
                break
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._file(self.minute))
            self.minute += 1
            self.done = (-1, -1)
            self._current = None
            self._save()
        return n

    def _read(self, offset: int) -> dict[str, Any] | None:
        r = self.store.get_message(TIMER_TOPIC, 0, offset, 1)
        if not r.ranges:
            return None
        return self.store.look_message_by_offset(r.ranges[0][0])

    def _deliver(self, entry: tuple[int, int]) -> None:
        msg = self._read(entry[1])
        if msg is None:
            log.warning("timer: message %d of %s is gone from the store", entry[1], TIMER_TOPIC)
            return
        props = rmqcore.decode_properties(msg["properties"])
        topic = props.get("REAL_TOPIC", "")
        try:
            qid = int(props.get("REAL_QID", "0"))
        except ValueError:
            qid = 0
        if not topic:
            log.warning("timer: message %d has no REAL_TOPIC; dropped", entry[1])
            return
        for k in _DROP:
            props.pop(k, None)
        props["TIMER_OUT_MS"] = str(int(self._clock() * 1000))
        self.store.put_copy(msg, topic, qid, props, msg["reconsume_times"])
        self.delivered += 1

    async def _already_delivered(self, entry: tuple[int, int]) -> bool:
        """The delivery a crash may have stored without its checkpoint."""
        msg = self._read(entry[1])
        if msg is None or not self.store.config.message_index_enable:
            return False
        props = rmqcore.decode_properties(msg["properties"])
        uniq, topic = props.get("UNIQ_KEY"), props.get("REAL_TOPIC")
        if not uniq or not topic:
            return False
        await self.store.catch_up_index()
        for phys in self.store.find_key(topic, uniq, msg["store_timestamp"]):
            p = self.store.properties_at(phys)
            if p.get("UNIQ_KEY") == uniq and "TIMER_OUT_MS" in p:
                return True
        return False

    def pending_files(self) -> int:
        with contextlib.suppress(FileNotFoundError):
            return sum(1 for n in os.listdir(self.dir) if n.endswith(".bin"))
        return 0


def _due_ms(props: dict[str, str], store_ms: int) -> int:
    """When a timed message is due (its TIMER_DELIVER_MS; TIMER_DELAY_SEC
    counts from its store time)."""
    try:
        if "TIMER_DELIVER_MS" in props:
            return int(props["TIMER_DELIVER_MS"])
        return store_ms + int(props.get("TIMER_DELAY_SEC", "0")) * 1000
    except ValueError:
        return store_ms
