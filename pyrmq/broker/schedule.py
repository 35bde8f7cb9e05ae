"""ScheduleMessageService: delayed messages.

A message with a DELAY level (or a consumer's send-back) is stored in
SCHEDULE_TOPIC_XXXX, queue level - 1, with REAL_TOPIC and REAL_QID. One task
per level walks its queue in order: a message is due at its store time plus
the level's delay (messageDelayLevel); due messages are written again to
their real topic and queue without DELAY/REAL_*; the task then sleeps until
the head is due or a new message arrives. Progress (the next queue offset
per level) is persisted to <store>/config/delayOffset.json every
flushDelayOffsetInterval and at shutdown; a crash can deliver the messages
after the last save twice, never lose them.

pyrmq keeps the TAGS hash in the schedule queue's tags slot (Java stores the
delivery time there) and derives the due time from the stored record."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from typing import Any

import rmqcore
from pyrmq.common.config_file import JsonStateFile
from pyrmq.common.errors import DiskFullError, StoreError
from pyrmq.common.topics import SCHEDULE_TOPIC
from pyrmq.storage import MessageStore

log = logging.getLogger("pyrmq.broker")

_DROP = ("DELAY", "REAL_TOPIC", "REAL_QID")
#: get_message statuses of a level read to its end (or never written):
#: nothing to deliver until the store tells of an arrival
_CAUGHT_UP = frozenset(("OFFSET_OVERFLOW_ONE", "NO_MESSAGE_IN_QUEUE", "NO_MATCHED_LOGIC_QUEUE"))


class ScheduleMessageService:
    def __init__(
        self,
        store: MessageStore,
        delay_levels_ms: tuple[int, ...],
        store_root: str,
        *,
        persist_interval: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.delays = delay_levels_ms
        self.persist_interval = persist_interval
        self._clock = clock
        self.offsets: dict[int, int] = {}
        self._file = JsonStateFile(
            os.path.join(store_root, "config", "delayOffset.json"), self._snapshot
        )
        self._events = [asyncio.Event() for _ in delay_levels_ms]
        self._tasks: list[asyncio.Task[None]] = []
        self.delivered = 0

    def _snapshot(self) -> dict[str, Any]:
        return {"offsetTable": {str(k): v for k, v in sorted(self.offsets.items())}}

    async def start(self) -> None:
        if not self.offsets:  # a promoted slave keeps what it synced
            self.load_offsets()
        self.store.add_arrival_listener(self._arrived, SCHEDULE_TOPIC)
        for level in range(1, len(self.delays) + 1):
            self._tasks.append(
                asyncio.create_task(self._level_loop(level), name=f"pyrmq:schedule:level-{level}")
            )
        self._tasks.append(asyncio.create_task(self._persist_loop(), name="pyrmq:schedule:persist"))

    @property
    def running(self) -> bool:
        return bool(self._tasks)

    async def shutdown(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._tasks.clear()
        self._file.persist_now()

    def snapshot(self) -> dict[str, Any]:
        """delayOffset.json's content (GET_ALL_DELAY_OFFSET)."""
        return self._snapshot()

    async def persist(self) -> None:
        await self._file.persist()

    def replace_offsets(self, offsets: dict[int, int]) -> None:
        """A slave takes its master's delay offsets (saved with the next
        persist)."""
        self.offsets = dict(offsets)

    def load_offsets(self) -> None:
        """Read delayOffset.json without starting delivery (a slave)."""
        self.offsets = (
            self._file.load(
                lambda d: {int(k): int(v) for k, v in (d.get("offsetTable") or {}).items()}
            )
            or {}
        )

    def _arrived(self, topic: str, queue_id: int, max_offset: int) -> None:
        if 0 <= queue_id < len(self._events):  # told of SCHEDULE_TOPIC only
            self._events[queue_id].set()

    async def _persist_loop(self) -> None:
        while True:
            await asyncio.sleep(self.persist_interval)
            try:
                await self._file.persist()
            except Exception:
                log.exception("schedule: saving delay offsets failed")

    async def _level_loop(self, level: int) -> None:
        event = self._events[level - 1]
        for _ in iter(int, 1):
            event.clear()
            try:
                wait = self._deliver_due(level)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("schedule: level %d failed; retrying in 1s", level)
                wait = 1.0
            if wait is None:
                # nothing stored on this level: only an arrival wakes it. (A
                # poll a second of each of the 18 levels, all at once, held
                # an idle broker's loop ~0.5-1 ms every second.)
                await event.wait()
            elif wait > 0:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await event.wait()

    def _deliver_due(self, level: int) -> float | None:
        """Deliver what is due on this level; returns seconds to wait, None
        when the level holds nothing more (wait for an arrival)."""
        qid = level - 1
        delay = self.delays[qid]
        store = self.store
        for _ in range(64):  # at most 64 * 32 messages per turn, then yield
            offset = self.offsets.get(level, 0)
            r = store.get_message(SCHEDULE_TOPIC, qid, offset, 32)
            if r.status != "FOUND":
                if r.next_begin_offset != offset and r.status in (
                    "OFFSET_TOO_SMALL",
                    "OFFSET_OVERFLOW_BADLY",
                ):
                    self.offsets[level] = r.next_begin_offset
                    continue
                if r.status in _CAUGHT_UP:
                    return None
                return 1.0
            now = self._clock() * 1000
            for m in rmqcore.decode_records(store.read(r.ranges)):
                due = m["store_timestamp"] + delay
                if due > now:
                    return min((due - now) / 1000, 1.0)
                try:
                    self._deliver(m)
                except DiskFullError as e:
                    log.warning("schedule: cannot deliver yet: %s", e)
                    return 1.0
                self.offsets[level] = m["queue_offset"] + 1
            if self.offsets.get(level, 0) < r.next_begin_offset:
                self.offsets[level] = r.next_begin_offset
        return 0.0

    def _deliver(self, m: dict[str, Any]) -> None:
        props = rmqcore.decode_properties(m["properties"])
        topic = props.get("REAL_TOPIC")
        try:
            qid = int(props.get("REAL_QID", "0"))
        except ValueError:
            qid = 0
        for k in _DROP:
            props.pop(k, None)
        if not topic:
            log.warning(
                "schedule: message at %d has no REAL_TOPIC; dropped", m["commit_log_offset"]
            )
            return
        try:
            self.store.put_copy(m, topic, qid, props, m["reconsume_times"])
            self.delivered += 1
        except DiskFullError:
            raise
        except StoreError as e:
            log.error(
                "schedule: message at %d to %s/%d cannot be stored: %s",
                m["commit_log_offset"],
                topic,
                qid,
                e,
            )
