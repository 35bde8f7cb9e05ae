"""PopService: consumption without queue rebalancing (RocketMQ 5's POP,
served to the 5.x SDKs' SimpleConsumer and PushConsumer by the proxy).

A pop takes up to ``batch`` messages of a topic for a group from any of its
queues (and from the group's retry topic), moves the group's offsets past
them at once, and hands each out with a receipt handle (receipt.py) for its
invisible time. Before anything is handed out its checkpoints are written to
the revive log, a one-queue system topic in the CommitLog, so they survive a
crash and are replicated like messages.

- ``ack``: the checkpoint is gone (an ack record is logged); the message is
  done.
- ``change_invisible``: the checkpoint is acked and a new one, from now, is
  written; a new handle is returned.
- Nobody acks before the deadline: the revive loop stores the message again
  in %RETRY%<group> with its reconsume count plus one, where the group's
  next pop finds it, or, past the group's retryMaxTimes, in %DLQ%<group>.
- An orderly group (subscription group consumeMessageOrderly=true, 5.x FIFO
  groups): a queue with a message out is not popped again for the group
  until it is acked; an expired one rewinds the group's offset to it, so the
  queue is delivered again in order (RocketMQ 5 delivers orderly pops again
  from the queue too, never through the retry topic).

The revive log's read position is kept as the offset of group
``CID_RMQ_SYS_REVIVE_GROUP`` (consumerOffset.json): a restart reads the log
from there and rebuilds the checkpoints not acked. A message popped just
before a crash whose offset move was not saved yet is delivered again:
at-least-once, never lost."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import rmqcore
from pyrmq.broker.pop.receipt import (
    Checkpoint,
    CkKey,
    InvalidReceiptHandle,
    decode,
    encode,
    key_item,
)
from pyrmq.broker.pop.table import CheckpointTable
from pyrmq.broker.topic_config import PERM_READ, PERM_WRITE
from pyrmq.common.message import MessageExt, decode_messages
from pyrmq.common.subscription import SubscriptionData
from pyrmq.common.topics import RETRY_GROUP_TOPIC_PREFIX, dlq_topic, retry_topic

if TYPE_CHECKING:
    from pyrmq.broker.offset_manager import ConsumerOffsetManager
    from pyrmq.broker.subscription_group import SubscriptionGroupManager
    from pyrmq.broker.topic_config import TopicConfigManager
    from pyrmq.storage import MessageStore

log = logging.getLogger("pyrmq.broker.pop")

REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"
#: the shortest and longest invisible time a pop or a change may ask for
#: (RocketMQ 5 proxy: minInvisibleTimeMillsForRecv 10 s for receives; a
#: change may be shorter; 12 hours at most)
MIN_INVISIBLE_MS = 1_000
MAX_INVISIBLE_MS = 12 * 3600 * 1000
#: how often the revive loop looks for checkpoints past their deadline (s)
REVIVE_INTERVAL = 0.2
#: messages read per queue per look during a pop
READ_BATCH = 32


def revive_topic(cluster: str) -> str:
    return f"rmq_sys_REVIVE_LOG_{cluster}"


@dataclass(slots=True)
class Popped:
    message: MessageExt
    handle: str
    #: the topic the consumer asked for (a retried message shows it, not
    #: %RETRY%<group>)
    topic: str


@dataclass(slots=True, eq=False)
class _TopicWait:
    """The pops long-polling one topic: the event its next arrival sets,
    and how many pops wait on it."""

    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    pops: int = 0


class PopService:
    def __init__(
        self,
        store: MessageStore,
        topics: TopicConfigManager,
        offsets: ConsumerOffsetManager,
        groups: SubscriptionGroupManager,
        *,
        broker_name: str,
        cluster: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.topics = topics
        self.offsets = offsets
        self.groups = groups
        self.broker_name = broker_name
        self.revive_topic = revive_topic(cluster)
        self._clock = clock
        self.pending = CheckpointTable()
        self._task: asyncio.Task[None] | None = None
        #: the topics pops wait on (the store tells this service only of those)
        self._waits: dict[str, _TopicWait] = {}
        #: messages revived into the retry topic, and put into the DLQ
        self.revived = 0
        self.dead_lettered = 0

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    # -- lifecycle ----------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Serving pops: a master's (a slave's store takes no writes)."""
        return self._task is not None

    async def start(self) -> None:
        self.topics.create_system_group_topic(self.revive_topic, 1, PERM_READ | PERM_WRITE)
        self.pending = CheckpointTable()
        self._rebuild()
        for t in self._waits:  # pops that outlived a shutdown
            self.store.add_arrival_listener(self._arrived, t)
        self._task = asyncio.get_running_loop().create_task(
            self._revive_loop(), name="pyrmq:pop:revive"
        )
        if self.pending:
            log.info("pop: %d messages out when the broker stopped", len(self.pending))

    async def shutdown(self) -> None:
        for t in self._waits:  # their pops end by their own timeouts
            self.store.remove_arrival_listener(self._arrived, t)
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _rebuild(self) -> None:
        """The checkpoints not acked, from the revive log."""
        start = max(self.offsets.query_offset(REVIVE_GROUP, self.revive_topic, 0), 0)
        acked: set[CkKey] = set()
        offset = start
        for _ in range(10_000_000):
            r = self.store.get_message(self.revive_topic, 0, offset, READ_BATCH)
            if not r.ranges:
                break
            for m in decode_messages(self.store.read(r.ranges)):
                self._apply(m, acked)
            offset = r.next_begin_offset
        for k in acked:
            self.pending.remove(k)

    def _apply(self, m: MessageExt, acked: set[CkKey]) -> None:
        try:
            doc = json.loads(m.body)
            for item in doc.get("ck", ()):
                self.pending.add(Checkpoint.from_item(item, m.queue_offset))
            for item in doc.get("ack", ()):
                g, t, q, o, p = item[:5]
                acked.add(CkKey(str(g), str(t), int(q), int(o), int(p)))
        except (ValueError, TypeError, AttributeError) as e:
            log.error("pop: revive log record at %d unreadable, skipped: %s", m.queue_offset, e)

    def _log(self, doc: dict[str, list[list[object]]]) -> int:
        """A revive log record; its queue offset."""
        r = self.store.put_message_nowait(self.revive_topic, 0, json.dumps(doc).encode())
        return int(r.queue_offset)

    # -- pop --------------------------------------------------------------------------

    def orderly(self, group: str) -> bool:
        sgc = self.groups.find(group)
        return sgc is not None and sgc.orderly

    def pop(
        self,
        group: str,
        topic: str,
        sub: SubscriptionData,
        batch: int,
        invisible_ms: int,
        queue_id: int = -1,
    ) -> list[Popped]:
        """Up to batch messages (none: nothing there now), from any queue of
        the topic or only from queue_id when it is not -1 (the retry topic's
        queues are looked at either way, as RocketMQ does)."""
        orderly = self.orderly(group)
        out: list[Popped] = []
        now = self._now_ms()
        sources = [topic]
        rtopic = retry_topic(group)
        if self.topics.get(rtopic) is not None and not orderly:
            # the retry topic first one time in five, as RocketMQ mixes them
            sources.insert(0 if random.random() < 0.2 else 1, rtopic)
        cks: list[Checkpoint] = []
        moves: list[tuple[str, int, int]] = []
        for t in sources:
            tc = self.topics.get(t)
            if tc is None or not tc.readable:
                continue
            qids = list(range(tc.read_queue_nums))
            if queue_id >= 0 and t == topic:
                qids = [queue_id] if queue_id < tc.read_queue_nums else []
            start = random.randrange(len(qids)) if qids else 0
            for qid in qids[start:] + qids[:start]:
                if len(out) >= batch:
                    break
                if orderly and self._busy(group, t, qid):
                    continue
                got, next_offset = self._take(group, t, qid, sub, batch - len(out))
                if next_offset is not None:
                    moves.append((t, qid, next_offset))
                for m in got:
                    ck = Checkpoint(CkKey(group, t, qid, m.queue_offset, now), invisible_ms,
                                    m.reconsume_times, orderly)  # fmt: skip
                    cks.append(ck)
                    shown = m.properties.get("RETRY_TOPIC", topic) if t == rtopic else topic
                    out.append(Popped(m, encode(ck, t == rtopic, self.broker_name), shown))
                if orderly and got:
                    break  # one queue at a time: its order is the group's
        if cks:
            log_offset = self._log({"ck": [ck.as_item() for ck in cks]})
            for ck in cks:
                ck.log_offset = log_offset
                self.pending.add(ck)
        for t, qid, offset in moves:
            self.offsets.commit_offset(group, t, qid, offset)
        return out

    def _busy(self, group: str, topic: str, qid: int) -> bool:
        return bool(self.pending.queue(group, topic, qid))

    def _start_offset(self, group: str, topic: str, qid: int) -> int:
        off = self.offsets.query_offset(group, topic, qid)
        if off >= 0:
            return off
        # a new group: from the queue's start while nothing has been
        # cleaned from it (RocketMQ 5 starts from its first message while
        # it is in memory), else from its end
        low = self.store.min_offset_in_queue(topic, qid)
        return (
            low
            if low == 0 or topic.startswith("%RETRY%")
            else self.store.max_offset_in_queue(topic, qid)
        )

    def _take(
        self, group: str, topic: str, qid: int, sub: SubscriptionData, want: int
    ) -> tuple[list[MessageExt], int | None]:
        """Messages of one queue the subscription takes, and the offset the
        group moves to (None: no move)."""
        offset = self._start_offset(group, topic, qid)
        begin = offset
        taken: list[MessageExt] = []
        codes = sub.code_set or None
        for _ in range(64):  # a bounded scan past messages the filter skips
            r = self.store.get_message(topic, qid, offset, READ_BATCH, tags_codes=codes)
            if r.ranges:
                for m in decode_messages(self.store.read(r.ranges)):
                    if len(taken) >= want:
                        return taken, m.queue_offset
                    if sub.accepts(m.properties):
                        taken.append(m)
            if r.next_begin_offset <= offset:
                break
            offset = r.next_begin_offset
            if len(taken) >= want or (not r.ranges and r.status != "NO_MATCHED_MESSAGE"):
                break
        return taken, (offset if offset != begin else None)

    # -- long polling -----------------------------------------------------------------

    def _arrived(self, topic: str, queue_id: int, max_offset: int) -> None:
        w = self._waits.get(topic)
        if w is not None:
            w.arrived.set()

    async def wait_arrival(self, topics: list[str], timeout: float) -> None:
        """Until a message arrives in one of topics, or timeout."""
        topics = list(dict.fromkeys(topics))
        events = []
        for t in topics:
            w = self._waits.get(t)
            if w is None:
                w = self._waits[t] = _TopicWait()
                self.store.add_arrival_listener(self._arrived, t)
            elif w.arrived.is_set():  # by an arrival an earlier pop took
                w.arrived = asyncio.Event()
            w.pops += 1
            events.append(w.arrived)
        waits = [asyncio.ensure_future(ev.wait()) for ev in events]
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for f in waits:
                f.cancel()
            for t in topics:
                w = self._waits[t]
                w.pops -= 1
                if not w.pops:
                    del self._waits[t]
                    self.store.remove_arrival_listener(self._arrived, t)

    # -- ack and change ---------------------------------------------------------------

    def _find(self, group: str, topic: str, handle: str) -> Checkpoint:
        rc = decode(handle)
        if rc.broker_name != self.broker_name:
            raise InvalidReceiptHandle(
                f"the receipt handle is broker {rc.broker_name}'s, not {self.broker_name}'s"
            )
        t = retry_topic(group) if rc.retry else topic
        ck = self.pending.get(CkKey(group, t, rc.queue_id, rc.offset, rc.pop_time))
        if ck is None:
            raise InvalidReceiptHandle(
                "the receipt handle has expired: the message was acked, or its invisible "
                "time passed and it is delivered again"
            )
        return ck

    def ack(self, group: str, topic: str, handle: str) -> None:
        ck = self._find(group, topic, handle)
        self._log({"ack": [key_item(ck.key)]})
        self.pending.remove(ck.key)

    def change_invisible(self, group: str, topic: str, handle: str, invisible_ms: int) -> str:
        """A new handle, invisible for invisible_ms from now."""
        old = self._find(group, topic, handle)
        k = old.key
        # a later pop time than the old one's, even within its millisecond:
        # the checkpoint's key holds it, and the old handle must name none
        new = Checkpoint(
            CkKey(k.group, k.topic, k.queue_id, k.offset, max(self._now_ms(), k.pop_time + 1)),
            invisible_ms,
            old.reconsume_times,
            old.orderly,
        )
        new.log_offset = self._log({"ck": [new.as_item()], "ack": [key_item(k)]})
        self.pending.remove(k)
        self.pending.add(new)
        return encode(new, k.topic == retry_topic(k.group), self.broker_name)

    # -- revive -----------------------------------------------------------------------

    async def _revive_loop(self) -> None:
        while True:
            await asyncio.sleep(REVIVE_INTERVAL)
            try:
                self.revive()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("pop: revive failed; tried again")

    def revive(self) -> int:
        """Deliver again what passed its deadline; how many. What a failure
        (the store refusing) leaves undone is due again at the next look."""
        due = self.pending.due(self._now_ms())
        done: dict[CkKey, None] = {}
        try:
            for ck in sorted(due, key=lambda c: (c.key.topic, c.key.queue_id, c.key.offset)):
                if ck.key in done:
                    continue
                if ck.orderly:
                    done.update(dict.fromkeys(self._rewind(ck)))
                else:
                    self._retry(ck)
                    done[ck.key] = None
        finally:
            if done:
                self._log({"ack": [key_item(k) for k in done]})
                for k in done:
                    self.pending.remove(k)
            for ck in due:
                if ck.key not in done and ck.key in self.pending:
                    self.pending.add(ck)  # back on the deadline heap
        self._advance_log()
        return len(done)

    def _rewind(self, ck: Checkpoint) -> list[CkKey]:
        """An orderly group's expired message: the queue is read again from
        it (and whatever followed it out is taken back too)."""
        k = ck.key
        same = list(self.pending.queue(k.group, k.topic, k.queue_id))
        self.offsets.commit_offset(k.group, k.topic, k.queue_id, min(s.offset for s in same))
        return same

    def _read(self, topic: str, queue_id: int, offset: int) -> dict[str, Any] | None:
        """The stored record at a queue offset (None: gone)."""
        r = self.store.get_message(topic, queue_id, offset, 1)
        if not r.ranges:
            return None
        return self.store.look_message_by_offset(r.ranges[0][0])

    def _again(self, msg: dict[str, Any], topic: str) -> dict[str, str]:
        """The properties of a message stored again for its group."""
        props = rmqcore.decode_properties(msg["properties"])
        if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            props.setdefault("RETRY_TOPIC", topic)
        uniq = props.get("UNIQ_KEY")
        props.setdefault(
            "ORIGIN_MESSAGE_ID",
            uniq or rmqcore.offset_msg_id(msg["store_host"], msg["commit_log_offset"]),
        )
        return props

    def _to_dlq(self, group: str, msg: dict[str, Any], props: dict[str, str]) -> None:
        dlq = self.topics.create_system_group_topic(dlq_topic(group), 1, PERM_READ | PERM_WRITE)
        self.store.put_copy(msg, dlq.topic_name, 0, props, msg["reconsume_times"] + 1)
        self.dead_lettered += 1

    def _retry(self, ck: Checkpoint) -> None:
        k = ck.key
        msg = self._read(k.topic, k.queue_id, k.offset)
        if msg is None:
            log.warning("pop: %s is gone from the store; not delivered again", k)
            return
        props = self._again(msg, k.topic)
        sgc = self.groups.find(k.group)
        max_times = sgc.retry_max_times if sgc is not None else 16
        if msg["reconsume_times"] + 1 > max_times:
            self._to_dlq(k.group, msg, props)
            return
        rtopic = retry_topic(k.group)
        queues = max(1, sgc.retry_queue_nums) if sgc is not None else 1
        tc = self.topics.create_system_group_topic(rtopic, queues, PERM_READ | PERM_WRITE)
        qid = random.randrange(tc.write_queue_nums or 1)
        self.store.put_copy(msg, rtopic, qid, props, msg["reconsume_times"] + 1)
        self.revived += 1

    def dead_letter(self, group: str, topic: str, handle: str) -> None:
        """A message its consumer gave up on (5.x
        ForwardMessageToDeadLetterQueue): into %DLQ%<group>, and acked."""
        ck = self._find(group, topic, handle)
        k = ck.key
        msg = self._read(k.topic, k.queue_id, k.offset)
        if msg is not None:
            self._to_dlq(group, msg, self._again(msg, k.topic))
        self.ack(group, topic, handle)

    def _advance_log(self) -> None:
        """The revive log's read position: the oldest record still holding
        a checkpoint out (or its end)."""
        low = self.pending.min_log_offset()
        if low is None:
            low = self.store.max_offset_in_queue(self.revive_topic, 0)
        if low > self.offsets.query_offset(REVIVE_GROUP, self.revive_topic, 0):
            self.offsets.commit_offset(REVIVE_GROUP, self.revive_topic, 0, low)

    def status(self) -> dict[str, int]:
        return {
            "popInvisible": len(self.pending),
            "popRevived": self.revived,
            "popDeadLettered": self.dead_lettered,
        }

    def check_invisible(self, invisible_ms: int) -> None:
        if not MIN_INVISIBLE_MS <= invisible_ms <= MAX_INVISIBLE_MS:
            raise ValueError(
                f"invisible duration {invisible_ms} ms is out of range "
                f"[{MIN_INVISIBLE_MS}, {MAX_INVISIBLE_MS}]"
            )


__all__ = ["REVIVE_GROUP", "InvalidReceiptHandle", "PopService", "Popped", "revive_topic"]
